#!/usr/bin/env bash
# scripts/run-cluster.sh - a three-node fibril cluster on this machine, the
# multi-node counterpart of scripts/run.sh (which it reuses to install the
# dependencies, build and install fibril under /usr/local):
#   - an underlay: a network namespace of its own with a bridge, and one etcd
#     listening on the bridge;
#   - three "nodes" n1, n2, n3: a network namespace each, joined to the bridge
#     by a veth, each with its own fibril-agent (its own state, run and bpffs
#     dirs) running kvstore-etcd, ipam-cluster-pool, ipam-api, endpoint,
#     datapath, nodes, policy, hubble-lite and health (when installed);
#   - pods added on every node through fibril-cni, as a container runtime
#     does, and labelled; then it shows the node list, the ipcache, the
#     identities (equal on every node for the same labels), ping and TCP
#     between every pair of nodes, the health matrix, and a policy imported
#     on every node whose drop of a cross-node packet `fibril observe` shows.
# The nodes, pods and etcd are tests/lib/multinode.sh's, the helpers the
# multi-node integration tests use (driven here through a small adapter).
#
#   scripts/run-cluster.sh [--routing native|tunnel] [--keep]    (as root)
#
# --routing: how pod traffic crosses nodes: native (a route per remote pod
# CIDR via its node's IP) or tunnel (VXLAN, the sender's identity in the
# VNI; the default). --keep: leave the cluster running until Ctrl-C instead
# of stopping after the show. Everything (namespaces, pins, etcd, agents,
# work dir) is removed on exit, whatever happens; nothing is added to this
# machine's own network namespace. The node namespaces are fmn<PID>-n1 ..
# fmn<PID>-n3 (the script prints them). Exit status: 0 when ping and TCP
# between the web pods of every pair of nodes answered, 1 when not (or on
# any other failure), 2 for a usage error.
set -euo pipefail
umask 022
routing=tunnel
keep=""
while [ $# -gt 0 ]; do
	case $1 in
	--routing) routing=${2:-}; shift 2 || { echo "run-cluster.sh: --routing needs a value (native or tunnel)"; exit 2; } ;;
	--routing=*) routing=${1#--routing=}; shift ;;
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run-cluster.sh: unknown argument '$1' (try --help)"; exit 2 ;;
	esac
done
case $routing in
native | tunnel) ;;
*) echo "run-cluster.sh: --routing '$routing': not native or tunnel"; exit 2 ;;
esac
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (the agents manage network namespaces, BPF and their pins)"; exit 1; }
FIBRIL_INSTALL_ONLY=1 scripts/run.sh

# ---- the adapter: what tests/lib/multinode.sh expects from tests/lib/common.sh ----------
prefix=/usr/local
top_srcdir=$PWD
top_builddir=$prefix/lib/cni          # where it finds fibril-cni (and CNI_PATH)
AGENT=$prefix/sbin/fibril-agent
CLI=$prefix/bin/fibril
MODDIR=$prefix/lib/fibril/modules
WORK=$(mktemp -d /tmp/fibril-cluster.XXXXXX)
chmod 0755 "$WORK"
skip_or_fail() { echo "run-cluster.sh: $1"; exit 1; }
cleanup() { # called last by multinode.sh's exit trap, after agents, etcd, namespaces, pins
	local rc=$?
	rm -rf "$WORK"
	echo "run-cluster.sh: cluster removed (namespaces, agents, etcd, pins, $WORK)"
	exit "$rc"
}
[ "$routing" = tunnel ] && MN_UNDERLAY_MTU=9000 # room for VXLAN's 50 bytes around 1500-byte pod frames
. tests/lib/multinode.sh
SERVERS=()
mn_test_cleanup() { # the pods' TCP servers (the pod namespaces go next)
	local p
	for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done
}
trap 'exit 130' INT TERM

for t in ip etcd etcdctl python3 curl nsenter ping; do
	command -v "$t" >/dev/null || { echo "run-cluster.sh: $t is not installed"; exit 1; }
done
MODS=(kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy hubble-lite)
# health when installed, in both routing modes (in tunnel mode the node's
# own probes reach the other nodes' health endpoints through fibril_vxlan)
health=""
[ -f "$MODDIR/health.so" ] && { health=1; MODS+=(health); }
mods=$(IFS=,; echo "${MODS[*]}")

fibril() { local n=$1; shift; ip netns exec "$(mn_ns "$n")" "$CLI" --socket "${MN_DIR[$n]}/fibril.sock" "$@"; }
say() { printf '\n=== %s\n' "$*"; }
NODES=(n1 n2 n3)

# ---- the cluster ------------------------------------------------------------------------
say "underlay $MN_UNDERLAY_NS (bridge $MN_UNDERLAY_PREFIX.1/24), etcd on it, routing mode $routing"
mn_underlay_up
mn_etcd_start || { echo "run-cluster.sh: etcd did not start"; exit 1; }
for i in 1 2 3; do mn_node_add "n$i" "$i"; done
AGENT_ARGS=(--set "agent.modules=$mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.244.0.0/16
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=24 --set "nodes.routing-mode=$routing"
	--set nodes.retry=300ms --set nodes.lease-ttl=15s --set datapath.trace-events=true)
[ -n "$health" ] && AGENT_ARGS+=(--set health.interval=1s)
for n in "${NODES[@]}"; do
	mn_agent_start "$n" "$MODDIR" "${AGENT_ARGS[@]}" ||
		{ echo "run-cluster.sh: the agent of $n did not start; its log: ${MN_DIR[$n]}/agent.log"; exit 1; }
	echo "node $n: netns $(mn_ns "$n"), IP ${MN_IP[$n]}, agent pid ${MN_PID[$n]}, API ${MN_DIR[$n]}/fibril.sock"
done
knows_all() { # every node routes (or tunnels to) the two others
	local n
	for n in "${NODES[@]}"; do
		[ "$(mn_api "$1" http://x/v1/nodes | python3 -c 'import json,sys; j=json.load(sys.stdin); print(sum(1 for n in j["nodes"] if n.get("routed", True)))')" = 3 ] || return 1
	done
}
ok=""
for _ in $(seq 1 150); do
	knows_all n1 && knows_all n2 && knows_all n3 && { ok=1; break; }
	sleep 0.1
done
[ -n "$ok" ] || echo "run-cluster.sh: the nodes did not all learn each other within 15 s (the list below says who is missing)"
say "fibril node list (on n1)"
fibril n1 node list

# ---- pods on every node -----------------------------------------------------------------
# on every node a pod app=web; a client pod (app=client) on n1 and another
# (app=other) on n3, for the policy below (both cross nodes to reach web2)
declare -A APP=([web1]=web [web2]=web [web3]=web [client]=client [other]=other)
POD_ORDER=(web1 web2 client web3 other)
declare -A HOME_NODE=([web1]=n1 [web2]=n2 [client]=n1 [web3]=n3 [other]=n3)
PORT=8080
say "pods through fibril-cni (CNI ADD), labelled app=...; a TCP server on :$PORT in each"
for p in "${POD_ORDER[@]}"; do
	n=${HOME_NODE[$p]}
	mn_pod_add "$n" "$p" demo || { echo "run-cluster.sh: CNI ADD of $p on $n failed"; exit 1; }
	code=$(mn_api "$n" -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
		-d '{"labels":["k8s:app='"${APP[$p]}"'"]}' "http://x/v1/endpoint/container-id:$MN_TAG$p")
	[ "$code" = 200 ] || { echo "run-cluster.sh: labelling $p failed: $(cat "$WORK/patch.out")"; exit 1; }
	ip netns exec "$(mn_pod_ns "$p")" python3 tests/cni/nettest.py serve "$PORT" &
	SERVERS+=($!)
	printf '  %-6s on %s: %-12s app=%s\n' "$p" "$n" "${MN_POD_IP[$p]}" "${APP[$p]}"
done
for p in "${POD_ORDER[@]}"; do mn_listening "$p" "$PORT"; done

say "fibril endpoint list (on n2)"
fibril n2 endpoint list
say "identities: the same labels, the same number on every node"
identity() { mn_api "${HOME_NODE[$1]}" "http://x/v1/endpoint/container-id:$MN_TAG$1:eth0" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["identity"])'; }
for p in web1 web2 web3 client other; do
	printf '  %-6s (%s, app=%s): identity %s\n' "$p" "${HOME_NODE[$p]}" "${APP[$p]}" "$(identity "$p")"
done
w1=$(identity web1) w2=$(identity web2) w3=$(identity web3)
if [ "$w1" = "$w2" ] && [ "$w2" = "$w3" ]; then
	echo "  app=web is identity $w1 on n1, n2 and n3 (allocated once, through etcd)"
else
	echo "  run-cluster.sh: app=web has different identities: $w1 $w2 $w3"
fi
for n in "${NODES[@]}"; do
	echo "  fibril identity list on $n (the reserved ones left out):"
	fibril "$n" identity list | grep -v ' reserved ' | sed 's/^/    /'
done

wait_ipcache() { # every node's ipcache holds the other nodes' pods
	local n p
	for n in "${NODES[@]}"; do
		local have
		have=$(fibril "$n" ipcache list 2>/dev/null) || return 1
		for p in "${POD_ORDER[@]}"; do
			[ "${HOME_NODE[$p]}" = "$n" ] && continue
			grep -q "${MN_POD_IP[$p]}" <<<"$have" || return 1
		done
	done
}
for _ in $(seq 1 100); do wait_ipcache && break; sleep 0.1; done
say "fibril ipcache list (on n1): the other nodes' pods, node IPs and pod CIDRs"
fibril n1 ipcache list

# ---- traffic across every pair of nodes -------------------------------------------------
say "ping and TCP :$PORT between the web pods of every pair of nodes"
failed=0
for a in web1 web2 web3; do
	for b in web1 web2 web3; do
		[ "$a" = "$b" ] && continue
		out=$(ip netns exec "$(mn_pod_ns "$a")" python3 tests/cni/nettest.py probe "$PORT" "${MN_POD_IP[$b]}" 2>&1) || failed=1
		printf '  %s (%s) -> %s (%s, %s): %s\n' "$a" "${HOME_NODE[$a]}" "$b" "${MN_POD_IP[$b]}" "${HOME_NODE[$b]}" \
			"$(tr '\n' ' ' <<<"$out")"
	done
done
[ "$failed" = 0 ] && echo "  every pair: ping and TCP answered" || echo "  run-cluster.sh: some cross-node traffic failed (above); exit status 1 at the end"
echo "  one ping in full, web1 (n1) -> web3 (n3):"
ip netns exec "$(mn_pod_ns web1)" ping -c 2 -W 2 "${MN_POD_IP[web3]}" | sed 's/^/    /' || true
if [ "$routing" = tunnel ]; then
	echo "  n1's VXLAN device:"
	ip -n "$(mn_ns n1)" -d link show fibril_vxlan | sed -n 's/^ *\(vxlan.*\)/    \1/p;1s/^/    /p'
else
	echo "  n1's routes to the other nodes' pod CIDRs (protocol 242 = fibril):"
	ip -n "$(mn_ns n1)" route show proto 242 | sed 's/^/    /'
fi

if [ -n "$health" ]; then
	# ready once every node and health endpoint answered a round of probes
	for _ in $(seq 1 50); do fibril n1 health >/dev/null 2>&1 && break; sleep 0.2; done
	say "fibril health status (on n1): every node and its health endpoint, probed over ICMP and HTTP"
	fibril n1 health status || true
fi

# ---- a policy, on every node: app=web accepts traffic from app=client only --------------
cat >"$WORK/policy.json" <<POLICY
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "web-from-client", "namespace": "demo"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "web"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "client"}}]}]}}
POLICY
say "policy web-from-client imported on every node: app=web accepts traffic from app=client only"
for n in "${NODES[@]}"; do echo "  $n: $(fibril "$n" policy import "$WORK/policy.json" | tr '\n' ' ')"; done
fibril n2 policy get
echo "--- client (n1) -> web2 (n2): allowed (n2 knows app=client's cluster-wide identity from the kvstore)"
ip netns exec "$(mn_pod_ns client)" python3 tests/cni/nettest.py probe "$PORT" "${MN_POD_IP[web2]}" | sed 's/^/  /' || true
echo "--- other (n3) -> web2 (n2): dropped by n2's datapath (the sender's identity: $( [ "$routing" = tunnel ] && echo "from the VXLAN VNI" || echo "from the ipcache"))"
ip netns exec "$(mn_pod_ns other)" python3 tests/cni/nettest.py probe "$PORT" "${MN_POD_IP[web2]}" | sed 's/^/  /' || true
say "fibril observe (on n2): the drops (the source by the identity its packets carried)"
fibril n2 observe --verdict DROPPED --last 4 || true
say "fibril policy trace (on n2): other -> web2, TCP $PORT"
fibril n2 policy trace --src "${MN_POD_IP[other]}" --dst "${MN_POD_IP[web2]}" --dport "$PORT/tcp" || true

say "the cluster: ${#NODES[@]} nodes, ${#POD_ORDER[@]} pods, routing mode $routing"
echo "  node namespaces: $(for n in "${NODES[@]}"; do printf '%s ' "$(mn_ns "$n")"; done)(n1..n3 above)"
# a script (or CI) running the demo learns whether the cluster worked
if [ "$failed" != 0 ]; then
	echo "run-cluster.sh: FAILED: cross-node ping or TCP between the web pods did not answer (above)"
	[ -n "$keep" ] && echo "  (--keep: left running to look into it; the exit status will be 1)"
	[ -z "$keep" ] && exit 1
fi
if [ -n "$keep" ]; then
	for n in "${NODES[@]}"; do
		echo "  try: ip netns exec $(mn_ns "$n") $CLI --socket ${MN_DIR[$n]}/fibril.sock node list"
	done
	echo "running until Ctrl-C"
	trap 'exit $((failed ? 1 : 130))' INT TERM
	# a background sleep and wait: a signal's trap runs at once
	while :; do
		sleep 3600 &
		SERVERS+=($!) # stopped by the cleanup
		wait $! || true
	done
fi
