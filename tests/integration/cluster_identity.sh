#!/usr/bin/env bash
# tests/integration/cluster_identity.sh - cluster-wide identities and the
# ipcache through the kvstore, on three nodes (tests/lib/multinode.sh: a
# network namespace per node with its own agent, one etcd on an underlay
# bridge), native routing:
#   - pods get addresses from their own node's pod CIDR;
#   - the three nodes add pods of the same new labels at the same instant
#     (a real race, several rounds): each label set ends with one number,
#     the same on every node, one id/ key in etcd; other labels, other numbers;
#   - each node's ipcache (GET /v1/ipcache, `fibril ipcache list`, the
#     datapath's dp_ipcache map) holds exactly the other nodes' pods, with
#     their identities and host IPs; pods reach each other across nodes;
#   - an agent restart keeps its endpoints' identities;
#   - etcd stopped for 20 s: cross-node traffic keeps flowing, a new pod of
#     labels the node holds still works, one of new labels fails clearly
#     (bounded wait), and after etcd returns a new pod on any node appears
#     in every other node's ipcache;
#   - the identity no node references any more is deleted by the GC;
#   - n3's agent stopped and its node record deleted: its pods leave the
#     others' datapath ipcache.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
NODES=(n1 n2 n3)
PORT=$((20000 + RANDOM % 20000))
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.202.0.0/16
	--set nodes.retry=300ms --set nodes.lease-ttl=30s
	--set endpoint.identity-timeout=3s --set endpoint.identity-gc-interval=1s
	--set endpoint.identity-gc-grace=2s --set kvstore-etcd.request-timeout=2s)
start() { mn_agent_start "$1" "$WORK/mods" "${AGENT_ARGS[@]}"; }

py() { mn_json "$@"; }
identity() { py "${MN_POD_NODE[$1]}" "/v1/endpoint/container-id:$MN_TAG$1:eth0" "j['identity']"; }
# the kvstore-learned endpoints of NODE's ipcache: "ip identity node" lines, sorted
kv_entries() { py "$1" /v1/ipcache "'\\n'.join(sorted('%s %d %s' % (e['prefix'].split('/')[0], e['identity'], e['node']) for e in j['entries'] if e['source'] == 'kvstore' and e['programmed']))"; }
# what they should be: every pod of the other nodes
want_entries() { local p; for p in "${!MN_POD_NODE[@]}"; do [ "${MN_POD_NODE[$p]}" = "$1" ] && continue
	[ -n "${GONE[$p]:-}" ] && continue; echo "${MN_POD_IP[$p]} $(identity "$p") ${MN_POD_NODE[$p]}"; done | sort; }
ipcache_is_others() { [ "$(kv_entries "$1")" = "$(want_entries "$1")" ]; }
dp_ipcache() { "$CLI" -s "${MN_DIR[$1]}/fibril.sock" map dump dp_ipcache 2>&1; }
declare -A GONE

for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
for n in "${NODES[@]}"; do check "$n knows and routes the two others" wait_for 15 mn_routes_all "$n"; done

# ---- racing for new labels: one number per label set, on every node -------------------------
# first labels only n1 has: a node-local counter would now be one ahead on n1
mn_pod_add n1 s1 solo || fail "a pod of labels only n1 has"
for r in 1 2 3 4; do
	pids=()
	for n in "${NODES[@]}"; do
		MN_NETNS_LIST+=("$(mn_pod_ns "r$r$n")") # made in the subshell, removed by the parent
		mn_pod_add "$n" "r$r$n" "race$r" >"$WORK/add.r$r$n" 2>&1 &
		pids+=($!)
	done
	ok=1
	for p in "${pids[@]}"; do wait "$p" || ok=0; done
	check "round $r: the three nodes add a pod of new labels at once" test "$ok" = 1 ||
		cat "$WORK"/add.r$r*
	# the pods' IPs were written by subshells: read them from the agents
	for n in "${NODES[@]}"; do
		MN_POD_NODE[r$r$n]=$n
		MN_POD_IP[r$r$n]=$(py "$n" "/v1/endpoint/container-id:${MN_TAG}r$r$n:eth0" "j['ipv4']")
	done
	ids="$(identity "r${r}n1") $(identity "r${r}n2") $(identity "r${r}n3")"
	read -r a b c <<<"$ids"
	check "round $r: one identity on the three nodes ($ids)" test "$a" = "$b" -a "$b" = "$c" -a "$a" -ge 256
	ROUND_ID[r]=$a
	keys=$(mn_etcdctl get --prefix /fibril/state/identities/v1/id/ | grep -c "^k8s:io.kubernetes.pod.namespace=race$r;\$" || true)
	check "round $r: one id/ key in etcd for the labels" test "$keys" = 1
	refs=$(mn_etcdctl get --prefix --keys-only "/fibril/state/identities/v1/value/k8s:io.kubernetes.pod.namespace=race$r;/" | grep -c . || true)
	check "round $r: a reference from each of the three nodes" test "$refs" = 3
done
check "each label set has its own number (${ROUND_ID[*]})" \
	test "$(printf '%s\n' "${ROUND_ID[@]}" | sort -u | wc -l)" = 4
echo "  races lost (a transaction that found another node's number first):"
for n in "${NODES[@]}"; do
	echo "    $n: $(mn_api "$n" http://x/metrics | grep 'identity_ops_total{result="race-lost"}' || echo 0)"
done

# ---- addresses from each node's CIDR; ipcache = the other nodes' pods ----------------------------
for n in "${NODES[@]}"; do
	cidr=$(py "$n" /v1/nodes "[x for x in j['nodes'] if x['name'] == '$n'][0]['pod-cidrs'][0]")
	check "$n's pods have addresses from its pod CIDR $cidr" python3 -c '
import ipaddress, sys
net = ipaddress.ip_network(sys.argv[1])
sys.exit(0 if all(ipaddress.ip_address(a) in net for a in sys.argv[2:]) else 1)' "$cidr" \
		"${MN_POD_IP[r1$n]}" "${MN_POD_IP[r2$n]}" "${MN_POD_IP[r3$n]}" "${MN_POD_IP[r4$n]}"
done
for n in "${NODES[@]}"; do
	check "$n's ipcache holds exactly the other nodes' 8 pods, with their identities" \
		wait_for 10 ipcache_is_others "$n" || diff <(kv_entries "$n") <(want_entries "$n")
done
check "  n1's datapath ipcache maps n2's pod to its identity" \
	grep -Eq "^${MN_POD_IP[r1n2]}/32 +identity=${ROUND_ID[1]} " <<<"$(dp_ipcache n1)"
check "  and carries the host IP of n2" test "$(py n1 /v1/ipcache "[e['host-ip'] for e in j['entries'] if e['prefix'] == '${MN_POD_IP[r1n2]}/32'][0]")" = "${MN_IP[n2]}"
check "  n1's own IP is host (1), n2's remote-node (6)" bash -c \
	'grep -Eq "^$1/32 +identity=1 " <<<"$3" && grep -Eq "^$2/32 +identity=6 " <<<"$3"' _ "${MN_IP[n1]}" "${MN_IP[n2]}" "$(dp_ipcache n1)"
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" ipcache list)
check "fibril ipcache list shows prefix, identity, source, node, host IP" \
	bash -c '[[ $1 == *PREFIX*IDENTITY*SOURCE*NODE*"HOST IP"* && $1 == *"$2/32"*"$3"*kvstore*n2*"$4"* ]]' \
	_ "$out" "${MN_POD_IP[r1n2]}" "${ROUND_ID[1]}" "${MN_IP[n2]}" || echo "$out"

for p in r1n2 r1n3; do mn_serve "$p" "$PORT"; done
probe() { ip netns exec "$(mn_pod_ns "$1")" python3 "$top_srcdir/tests/cni/nettest.py" probe "$PORT" "${@:2}" \
	>"$WORK/probe.out" 2>&1 || { sed 's/^/  /' "$WORK/probe.out"; return 1; }; }
check "a pod on n1 pings and connects to pods on n2 and n3" probe r1n1 "${MN_POD_IP[r1n2]}" "${MN_POD_IP[r1n3]}"

# ---- a restart keeps the identities ---------------------------------------------------------------
mn_agent_kill n1 TERM
start n1 || fail "the agent of n1 restarts"
check "after n1's restart its pods keep their identities" \
	test "$(identity r1n1) $(identity r2n1)" = "${ROUND_ID[1]} ${ROUND_ID[2]}"
check "  and n1 references them again in etcd" wait_for 5 bash -c \
	'[ -n "$(ip netns exec '"$MN_UNDERLAY_NS"' env ETCDCTL_API=3 etcdctl --endpoints='"$MN_ETCD_ENDPOINT"' get --print-value-only "/fibril/state/identities/v1/value/k8s:io.kubernetes.pod.namespace=race1;/n1")" ]'
check "  n2 still has n1's pods in its ipcache" wait_for 10 ipcache_is_others n2

# ---- the GC: an identity no node references goes after the grace period ------------------------
mn_pod_add n1 g1 gcns || fail "a pod of labels only n1 has"
GCID=$(identity g1)
mn_pod_del n1 g1 >/dev/null || fail "its CNI DEL"
GONE[g1]=1
gc_gone() { [ -z "$(mn_etcdctl get --print-value-only "/fibril/state/identities/v1/id/$GCID")" ]; }
check "identity $GCID, referenced by no node, is deleted by the GC after its grace" wait_for 10 gc_gone

# ---- etcd stopped for 20 s ------------------------------------------------------------------------
kill -TERM "$MN_ETCD_PID"; wait "$MN_ETCD_PID" 2>/dev/null || true; MN_ETCD_PID=""
down_at=$SECONDS
check "with etcd down, n1's pod still reaches the pods on n2 and n3" probe r1n1 "${MN_POD_IP[r1n2]}" "${MN_POD_IP[r1n3]}"
check "  a new pod of labels n1 holds (race1) still works" mn_pod_add n1 o1 race1
check "  and has their identity" test "$(identity o1)" = "${ROUND_ID[1]}"
t0=$SECONDS
rc=0
mn_pod_add n2 o2 brandnew >"$WORK/o2.err" 2>&1 || rc=$?
check "  a new pod of new labels fails (bounded: $((SECONDS - t0)) s)" test "$rc" != 0 -a $((SECONDS - t0)) -le 15
check "  with a clear error" grep -q "no cluster-wide identity from the kvstore" "$WORK/o2.err" || cat "$WORK/o2.err"
sed 's/^/  /' "$WORK/o2.err"
check "  n2's agent still serves its endpoints" test "$(mn_api n2 -o /dev/null -w '%{http_code}' http://x/v1/endpoint)" = 200
sleep $((20 - (SECONDS - down_at) > 0 ? 20 - (SECONDS - down_at) : 0)) # sleep: 20 s without etcd must pass
check "after 20 s without etcd, traffic still flows" probe r1n1 "${MN_POD_IP[r1n2]}" "${MN_POD_IP[r1n3]}"
mn_etcd_start || fail "etcd starts again"
mn_pod_del n2 o2 >/dev/null 2>&1 || true
check "with etcd back, the pod of new labels is added on n2" wait_for 20 mn_pod_add n2 o2b brandnew
MN_POD_NODE[o2b]=n2
MN_POD_NODE[o1]=n1
for n in "${NODES[@]}"; do
	check "$n's ipcache converges (the pods added during and after the outage)" \
		wait_for 20 ipcache_is_others "$n" || diff <(kv_entries "$n") <(want_entries "$n")
done

# ---- a node that is gone: its pods leave the others' ipcache ----------------------------------
mn_agent_kill n3 TERM
mn_etcdctl del /fibril/state/nodes/v1/n3 >/dev/null
for p in r1n3 r2n3 r3n3 r4n3; do GONE[$p]=1; done
n3_gone() { ! grep -Eq -e "^${MN_POD_IP[r1n3]}/32 " -e "^${MN_POD_IP[r4n3]}/32 " <<<"$(dp_ipcache "$1")"; }
for n in n1 n2; do
	check "n3 stopped and its record deleted: its pods leave $n's datapath ipcache" wait_for 10 n3_gone "$n"
	check "  and $n's ipcache holds exactly the remaining node's pods" ipcache_is_others "$n" ||
		diff <(kv_entries "$n") <(want_entries "$n")
done
finish
