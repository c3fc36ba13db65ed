#!/usr/bin/env bash
# tests/integration/crd_identity.sh - identity-allocation = crd: three
# agents (k8s, ipam-cluster-pool, endpoint; no kvstore, no etcd anywhere)
# share identities through CiliumIdentity objects of the test API server:
#   - the same labels get the same number on every node, other labels
#     another, and the API server holds one CiliumIdentity per label set
#     (its name the number, its security-labels the set);
#   - the three nodes add endpoints of the same new labels at the same
#     instant, with every write delayed by a random 0..50 ms (several
#     rounds): each label set ends with one number on every node;
#   - every agent restarted keeps its endpoints' numbers, and a node whose
#     state was wiped finds the same number for the same labels from the
#     API server alone;
#   - the ciliumidentities CRD missing: a new label set is refused within
#     identity-timeout and the log says the CRD is not served.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require
[ "$(id -u)" = 0 ] || skip_or_fail "run as root (the agent only loads root-owned modules)"
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for m in k8s ipam-cluster-pool endpoint; do
	[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built"
	install -m 0644 "$top_builddir/.libs/$m.so" "$mods/$m.so"
done

# one network namespace for the API server, the three agents and their
# endpoints (identities need no traffic; no datapath is loaded): each
# endpoint's host side is a veth of its own there
PODNS=crdid-$$
ip netns add "$PODNS"
ip -n "$PODNS" link set lo up
trap 'rc=$?; set +e; ip netns del "$PODNS" 2>/dev/null; cleanup "$rc"' EXIT INT TERM
K8S_NETNS=$PODNS

k8s_start --bookmark-interval 1 || { fail "the API server starts"; finish; exit 1; }
NODES=(n1 n2 n3)
declare -A PID
# agent NODE : start NODE's agent (its own socket and state), wait for its socket
agent() {
	local n=$1 i=${1#n} d=$WORK/$1
	mkdir -p "$d" "$BPFFS_DIR/$n"
	rm -f "$d/fibril.sock"
	ip netns exec "$PODNS" "$AGENT" --set "agent.module-dir=$mods" --set "agent.socket=$d/fibril.sock" \
		--set "agent.state-dir=$d/state" --set "agent.run-dir=$d/run" \
		--set "agent.bpffs-dir=$BPFFS_DIR/$n" --set "agent.node-name=$n" \
		--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$n" \
		--set "ipam-cluster-pool.node-cidr=10.88.$i.0/24" \
		--set endpoint.identity-allocation=crd --set endpoint.identity-timeout=3s \
		>>"$d/agent.log" 2>&1 &
	PID[$n]=$!
	wait_alive "${PID[$n]}" 30 test -S "$d/fibril.sock" && return 0
	tail -20 "$d/agent.log"
	return 1
}
stop() { kill "${PID[$1]}" 2>/dev/null && wait "${PID[$1]}" 2>/dev/null || true; }
napi() { local n=$1; shift; curl -sS --max-time 15 --unix-socket "$WORK/$n/fibril.sock" "$@"; }
# pod NODE LABEL : PUT an endpoint of labels app=LABEL on NODE, print its identity (or the error)
# (runs in $(...): NODE's endpoint count is kept in a file; one call per node at a time)
pod() {
	local n=$1 l=$2 cid out SEQ ifindex
	SEQ=$(($(cat "$WORK/$n/seq" 2>/dev/null || echo 0) + 1))
	echo "$SEQ" >"$WORK/$n/seq"
	cid=$(printf 'c%s%06d%057d' "$n" "$SEQ" 0)
	cid=${cid:0:64}
	ip -n "$PODNS" link add "d$n-$SEQ" type veth peer name "p$n-$SEQ"
	ifindex=$(ip netns exec "$PODNS" cat "/sys/class/net/d$n-$SEQ/ifindex")
	out=$(napi "$n" -X PUT -H 'Content-Type: application/json' \
		"http://x/v1/endpoint/container-id:$cid:eth0" --data-binary @- <<EOF
{"container-id":"$cid","ifname":"eth0","netns":"/run/netns/$PODNS","host-ifname":"d$n-$SEQ",
 "host-ifindex":$ifindex,"mac":"02:00:00:00:00:01","host-mac":"02:00:00:00:00:02",
 "ipv4":"10.88.${n#n}.$((10 + SEQ))","pod-namespace":"default","pod-name":"p$SEQ","labels":["k8s:app=$l"]}
EOF
	) || true
	python3 -c 'import json, sys
j = json.loads(sys.argv[1])
print(j.get("identity") or ("error: " + str(j.get("error", j))))' "$out" 2>/dev/null || echo "error: $out"
}
# the CiliumIdentity objects of the API server: "number labels" lines, sorted
cids() { k8s_api /apis/cilium.io/v2/ciliumidentities | python3 -c 'import json, sys
for o in sorted(json.load(sys.stdin)["items"], key=lambda o: int(o["metadata"]["name"])):
    print(o["metadata"]["name"], ",".join("%s=%s" % kv for kv in sorted(o["security-labels"].items())))'; }
isnum() { [[ $1 =~ ^[0-9]+$ ]]; }

for n in "${NODES[@]}"; do agent "$n" || { fail "the agent of $n starts"; finish; exit 1; }; done
pass "three agents start with identity-allocation = crd and no kvstore"

# ---- the same labels, the same number -------------------------------------------
declare -A WEB
for n in "${NODES[@]}"; do WEB[$n]=$(pod "$n" web); done
check "web on n1, n2, n3: one number (${WEB[n1]} ${WEB[n2]} ${WEB[n3]})" \
	eval 'isnum "${WEB[n1]}" && [ "${WEB[n1]}" = "${WEB[n2]}" ] && [ "${WEB[n2]}" = "${WEB[n3]}" ]'
DB=$(pod n2 db)
check "db gets another number ($DB)" eval 'isnum "$DB" && [ "$DB" != "${WEB[n1]}" ]'
check "the API server holds one CiliumIdentity per label set, named by its number" \
	test "$(cids | grep -c 'k8s:app=web')$(cids | grep -c 'k8s:app=db')" = 11
check "named ${WEB[n1]}, labels app=web and the namespace" \
	contains "$(cids)" "${WEB[n1]} k8s:app=web,k8s:io.kubernetes.pod.namespace=default"

# ---- three nodes race for new labels ---------------------------------------------
k8s_ctl -o /dev/null config?write_delay=0.05
for r in 1 2 3 4; do
	pids=()
	for n in "${NODES[@]}"; do
		pod "$n" "race$r" >"$WORK/race$r.$n" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || true; done
	a=$(cat "$WORK/race$r.n1") b=$(cat "$WORK/race$r.n2") c=$(cat "$WORK/race$r.n3")
	check "round $r: three nodes at once, one number ($a $b $c)" \
		eval 'isnum "$a" && [ "$a" = "$b" ] && [ "$b" = "$c" ]'
	check "round $r: one CiliumIdentity for race$r" test "$(cids | grep -c "k8s:app=race$r,")" = 1
done
k8s_ctl -o /dev/null config?write_delay=0
RACE1=$(cat "$WORK/race1.n1")

# ---- restarts ----------------------------------------------------------------------
for n in "${NODES[@]}"; do stop "$n"; done
for n in "${NODES[@]}"; do agent "$n" || fail "the agent of $n starts again"; done
ids() { napi "$1" http://x/v1/endpoint | python3 -c 'import json, sys
j = json.load(sys.stdin); j = j.get("endpoints", j) if isinstance(j, dict) else j
print(" ".join(sorted({str(e["identity"]) for e in j})))'; }
check "after every agent restarted, n1's endpoints keep their numbers" \
	contains " $(ids n1) " " ${WEB[n1]} "
out=$(pod n3 web)
check "a new web endpoint on restarted n3: ${WEB[n1]} again ($out)" eval 'isnum "$out" && [ "$out" = "${WEB[n1]}" ]'
stop n3
rm -rf "$WORK/n3/state"
agent n3 || fail "n3 starts with its state wiped"
out=$(pod n3 race1)
check "n3 with no state: race1 is still $RACE1 (read from the API server: $out)" \
	eval 'isnum "$out" && [ "$out" = "$RACE1" ]'
out=$(pod n3 web)
check "n3 with no state: web is still ${WEB[n1]} ($out)" eval 'isnum "$out" && [ "$out" = "${WEB[n1]}" ]'

# ---- the CRD missing ---------------------------------------------------------------
k8s_ctl -o /dev/null config?missing_crds=ciliumidentities
out=$(pod n1 nocrd)
check "the CRD missing: a new label set is refused ($out)" eval '! isnum "$out"'
check "the log says the CRD is not served" \
	grep -q 'does not serve ciliumidentities.cilium.io (its CustomResourceDefinition is not installed: kubectl apply -f deploy/kubernetes/crds.yaml)' "$WORK/n1/agent.log"
out=$(pod n1 web)
check "labels held already still work without the CRD ($out)" eval 'isnum "$out" && [ "$out" = "${WEB[n1]}" ]'
k8s_ctl -o /dev/null config?missing_crds=
for n in "${NODES[@]}"; do stop "$n"; done
finish
