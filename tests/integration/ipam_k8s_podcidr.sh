#!/usr/bin/env bash
# tests/integration/ipam_k8s_podcidr.sh - the ipam-k8s-podcidr module against
# the fake kube-apiserver (tests/k8s/apiserver.py), the Nodes created and
# changed with the real kubectl: the node CIDR in each precedence case
# (spec.podCIDRs, spec.podCIDR, the network.fibril.io/ipvN-pod-cidr
# annotations, per family), an invalid CIDR refused naming its field, no
# Node / no CIDR failing the start after node-timeout with the places it
# looked, a Node that appears while start waits, addresses through ipam-api
# and `fibril ipam` persisted across a restart, the node annotation written
# (and written again when removed), a CIDR changed under a running agent
# reported in health, `fibril k8s status` and the Kubernetes line of
# `fibril status`, and a start/stop under valgrind.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

if [ "$(id -u)" != 0 ]; then # the agent only loads root-owned modules
	[ "${CI:-}" = true ] && { echo "FAIL: CI runs as root; not skipping"; exit 1; }
	echo "SKIP: run as root"
	exit 77
fi
k8s_require
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in k8s ipam-k8s-podcidr ipam-api; do
	[ -f "$top_builddir/.libs/$so.so" ] || { echo "FAIL: $so is not built"; exit 1; }
	install -m 0644 "$top_builddir/.libs/$so.so" "$mods/$so.so"
done

k8s_start
M=$WORK/manifests
mkdir -p "$M"

# node NAME [YAML lines under spec:] [-- annotation lines] : kubectl apply a Node
node() {
	local name=$1 spec="" ann="" in_ann=0 line
	shift
	for line in "$@"; do
		if [ "$line" = -- ]; then in_ann=1; continue; fi
		if [ $in_ann = 1 ]; then ann+="    $line"$'\n'; else spec+="  $line"$'\n'; fi
	done
	{
		printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n' "$name"
		[ -n "$ann" ] && printf '  annotations:\n%s' "$ann"
		[ -n "$spec" ] && printf 'spec:\n%s' "$spec"
	} >"$M/$name.yaml"
	kc apply -f "$M/$name.yaml" >/dev/null
}

pc_args() { # NODE : the agent's k8s settings for that node
	printf '%s\n' --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$1" \
		--set "ipam-k8s-podcidr.node-timeout=${NODE_TIMEOUT:-3s}"
}
start_pc() { # NODE [more args]
	local node=$1
	shift
	mapfile -t pargs < <(pc_args "$node")
	start_agent "$mods" "${pargs[@]}" "$@"
}
run_pc() { # NODE [more args] : foreground; $OUT, $RC
	local node=$1
	shift
	mapfile -t pargs < <(pc_args "$node")
	run_agent "$mods" "${pargs[@]}" "$@"
}
# wait_ready : until the agent's socket answers /v1/ipam with a pool (or it exited)
wait_ready() { wait_alive "$AGENT_PID" 10 has_pool; }
has_pool() { api http://x/v1/ipam 2>/dev/null | grep -q '"pools":\[{'; }
pools() { api http://x/v1/ipam | python3 -c 'import json,sys; print(" ".join(p["cidr"] for p in json.load(sys.stdin)["pools"]))'; }
summary() { api http://x/v1/status | python3 -c 'import json,sys; print([m.get("summary","") for m in json.load(sys.stdin)["modules"] if m["name"]=="ipam-k8s-podcidr"][0])'; }
annotation() { kc get node "$1" -o "jsonpath={.metadata.annotations.network\.fibril\.io/$2}"; }
cli() { CRC=0; "$CLI" --socket "$WORK/fibril.sock" "$@" >"$WORK/out" 2>"$WORK/err" || CRC=$?; }

# ---- precedence ------------------------------------------------------------------------
node pc-both 'podCIDRs: [10.1.0.0/24, "fd00:1::/112"]' 'podCIDR: 10.1.0.0/24' -- \
	'network.fibril.io/ipv4-pod-cidr: 10.3.0.0/24' 'network.fibril.io/ipv6-pod-cidr: "fd00:3::/112"'
start_pc pc-both
wait_ready || true
check "spec.podCIDRs wins over spec.podCIDR and the annotations (both families)" \
	[ "$(pools)" = "10.1.0.0/24 fd00:1::/112" ]
check "the summary names the source field" contains "$(summary)" "10.1.0.0/24 (spec.podCIDRs[0])"
stop_agent TERM || true

node pc-single 'podCIDR: 10.2.0.0/24' -- 'network.fibril.io/ipv4-pod-cidr: 10.3.0.0/24' \
	'network.fibril.io/ipv6-pod-cidr: "fd00:3::/112"'
start_pc pc-single
wait_ready || true
check "spec.podCIDR wins over the IPv4 annotation; IPv6 from its annotation" \
	[ "$(pools)" = "10.2.0.0/24 fd00:3::/112" ]
check "sources in the summary" contains "$(summary)" "(spec.podCIDR), "
check "IPv6 source: the annotation" contains "$(summary)" "(annotation network.fibril.io/ipv6-pod-cidr)"
stop_agent TERM || true

node pc-annot -- 'network.fibril.io/ipv4-pod-cidr: 10.4.0.0/25'
start_pc pc-annot
wait_ready || true
check "annotations only: the IPv4 annotation" [ "$(pools)" = "10.4.0.0/25" ]
stop_agent TERM || true

# ---- invalid CIDRs: refused, naming the field --------------------------------------------
node bad-spec 'podCIDR: 10.5.0.1/24' -- 'network.fibril.io/ipv4-pod-cidr: 10.6.0.0/24'
run_pc bad-spec
check "invalid spec.podCIDR: the start fails" [ "$RC" = 1 ]
check "invalid spec.podCIDR: named, no fallback to the annotation" \
	contains "$OUT" 'node bad-spec: spec.podCIDR "10.5.0.1/24" is not a valid CIDR'
node bad-list 'podCIDRs: [10.7.0.0/24, "nonsense"]'
run_pc bad-list
check "invalid spec.podCIDRs[1]: named" contains "$OUT" 'node bad-list: spec.podCIDRs[1] "nonsense" is not a valid CIDR'
node bad-ann -- 'network.fibril.io/ipv4-pod-cidr: "fd00:9::/112"'
run_pc bad-ann
check "an IPv6 CIDR in the IPv4 annotation: named" \
	contains "$OUT" 'node bad-ann: annotation network.fibril.io/ipv4-pod-cidr "fd00:9::/112" is not an IPv4 CIDR'
node bad-big 'podCIDR: 10.0.0.0/7'
run_pc bad-big
check "a CIDR too large for the allocator: named" contains "$OUT" 'spec.podCIDR "10.0.0.0/7" is too large'

# ---- no Node, no CIDR: the start fails after node-timeout, saying where it looked ----------
run_pc ghost
check "no Node: exit 1" [ "$RC" = 1 ]
check "no Node: names the node and the timeout" contains "$OUT" "node ghost not found within 3s (node-timeout)"
node bare
run_pc bare
check "a Node without a CIDR: names the three places" contains "$OUT" \
	"node bare has no pod CIDR after 3s (node-timeout): spec.podCIDRs and spec.podCIDR are empty and the annotations network.fibril.io/ipv4-pod-cidr and network.fibril.io/ipv6-pod-cidr are not set"

# ---- start waits for the Node (node events), then serves ------------------------------------
# (the agent opens its API socket once every module started)
mapfile -t args < <(agent_args "$mods")
mapfile -t pargs < <(NODE_TIMEOUT=30s pc_args late)
rm -f "$WORK/fibril.sock"
node_watches0=$(k8s_agent_requests watch nodes)
"$AGENT" "${args[@]}" "${pargs[@]}" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
check "start waits for the Node" wait_for 10 grep -q "waiting up to 30s for node late" "$WORK/agent.log"
# the Node comes as an event of the watch (not in the list before it)
watching_nodes() { [ "$(k8s_agent_requests watch nodes)" -gt "$node_watches0" ]; }
check "  the agent watches the nodes" wait_for 10 watching_nodes
node late 'podCIDR: 10.8.0.0/28'
check "the Node created while start waits: the agent starts" wait_for 10 test -S "$WORK/fibril.sock"
check "the Node created while start waits: ready" wait_ready
check "late: the pool" [ "$(pools)" = "10.8.0.0/28" ]

# ---- allocations through ipam-api and fibril ipam, persisted ----------------------------------
cli ipam allocate c1/eth0
check "fibril ipam allocate: 10.8.0.2 (router .1)" contains "$(cat "$WORK/out")" "10.8.0.2  ipv4    10.8.0.0/28  10.8.0.1  c1/eth0"
cli ipam allocate c2/eth0
cli ipam allocate c1/eth0
check "the same owner asking again gets the same address" contains "$(cat "$WORK/out")" "10.8.0.2"
check "the allocation is in the journal under the state dir" \
	[ "$(python3 "$top_srcdir/tests/lib/ipam_journal.py" "$WORK/state/ipam-k8s-podcidr" 10.8.0.3)" = c2/eth0 ]
for i in $(seq 3 14); do cli ipam allocate "c$i/eth0"; done
check "exhausted /28 (13 usable): the 14th gets the agent's error" contains "$(cat "$WORK/err")" "pool 10.8.0.0/28 is exhausted (HTTP 503)"
ann_is() { [ "$(annotation "$1" "$2")" = "$3" ]; }
check "annotation: the pod CIDR" wait_for 10 ann_is late ipv4-pod-cidr 10.8.0.0/28
check "annotation: the host (router) address" [ "$(annotation late ipv4-host-ip)" = 10.8.0.1 ]
kc annotate node late network.fibril.io/ipv4-host-ip- >/dev/null
has_host_ip() { [ -n "$(annotation late ipv4-host-ip)" ]; }
wait_for 5 has_host_ip || true
got=$(annotation late ipv4-host-ip)
check "a removed annotation is written again" [ "$got" = 10.8.0.1 ]

# ---- fibril k8s status, the Kubernetes line of fibril status ---------------------------------
cli k8s status
check "fibril k8s status: a table with nodes synced" python3 - "$(cat "$WORK/out")" <<'EOF'
import sys
lines = sys.argv[1].splitlines()
assert lines[0].startswith("Node:") and "late" in lines[0], lines
hdr = [l for l in lines if l.startswith("RESOURCE")][0].split()
assert hdr[:3] == ["RESOURCE", "SYNCED", "OBJECTS"] and "RELISTS" in hdr, hdr
row = [l for l in lines if l.startswith("nodes")][0].split()
assert row[1] == "yes" and row[2] == "1" and "ago)" in " ".join(row) and "watching" in row, row
EOF
cli -o json k8s status
check "fibril k8s status -o json: the agent's document" python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); r = d["resources"][0]
assert d["node"] == "late" and r["name"] == "nodes" and r["synced"] and r["objects"] == 1
assert r["relists"] == 0 and r["last_event"] and r["phase"] == "watching"' "$WORK/out"
cli k8s nonsense
check "fibril k8s nonsense: usage error" [ "$CRC" = 2 ]
cli status
check "fibril status: a Kubernetes line" grep -q "^Kubernetes: 1 resources synced, 1 objects" "$WORK/out"

# ---- the CIDR changes under a running agent: health says so, allocations stay -----------------
kc annotate node late --overwrite network.fibril.io/ipv4-pod-cidr=10.9.0.0/24 >/dev/null
kc patch node late --type merge -p '{"spec":{"podCIDR":"10.9.0.0/24"}}' >/dev/null
degraded() { api http://x/v1/healthz | grep -q "spec.podCIDR is now 10.9.0.0/24 but 10.8.0.0/28 is in use"; }
check "a changed spec.podCIDR: health Degraded naming both" wait_for 10 degraded
check "allocations still served from the old CIDR" [ "$(pools)" = "10.8.0.0/28" ]
stop_agent TERM || true

# ---- restart: the same allocations come back -----------------------------------------------
kc patch node late --type merge -p '{"spec":{"podCIDR":"10.8.0.0/28"}}' >/dev/null
kc annotate node late --overwrite network.fibril.io/ipv4-pod-cidr=10.8.0.0/28 >/dev/null
start_pc late
wait_ready || true
cli ipam list
check "after a restart the allocations are back" contains "$(cat "$WORK/out")" "10.8.0.3   c2/eth0"
check "health ok again" [ "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200 ]
stop_agent TERM || true

# ---- valgrind: start (waits for the Node), allocate, stop ------------------------------------
if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "NOTE: sanitizer build: valgrind runs in the plain build"
elif ! command -v valgrind >/dev/null; then
	if [ "${CI:-}" = true ]; then fail "valgrind is not installed"; else echo "NOTE: no valgrind"; fi
else
	mapfile -t args < <(agent_args "$mods")
	mapfile -t pargs < <(pc_args late)
	rm -f "$WORK/fibril.sock"
	valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--log-file="$WORK/vg.log" "$AGENT" "${args[@]}" "${pargs[@]}" \
		--set ipam-k8s-podcidr.node-timeout=20s >"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || true
	wait_ready || true
	cli ipam release --owner c13/eth0
	cli ipam allocate vg/eth0
	check "valgrind: an allocation" [ "$CRC" = 0 ]
	rc=0
	stop_agent TERM || rc=$?
	check "valgrind: clean exit (no errors, no definite leaks)" [ "$rc" = 0 ]
	[ "$rc" = 0 ] || tail -40 "$WORK/vg.log"
	run_agent_vg() {
		RC=0
		OUT=$(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
			--log-file="$WORK/vg2.log" "$AGENT" "${args[@]}" "$@" 2>&1) || RC=$?
	}
	mapfile -t pargs < <(pc_args bare)
	run_agent_vg "${pargs[@]}"
	check "valgrind: a start that times out exits 1, clean" [ "$RC" = 1 ]
	[ "$RC" = 1 ] || tail -40 "$WORK/vg2.log"
fi

k8s_stop
finish
