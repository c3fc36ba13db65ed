# shellcheck shell=bash
# shellcheck disable=SC2034 # SOCK, CONF, OUT_NS, PIDS are read by the tests
# tests/lib/policynode.sh - one node with the policy datapath, the set-up
# the conntrack and fragment attack tests share (source after
# tests/lib/common.sh and tests/cni/lib.sh):
#
#   policy_node_up               cni_prereqs and the modules ipam-api,
#                                ipam-cluster-pool, endpoint, datapath and
#                                policy in $WORK/mods; the node namespace
#                                NODE_NS
#   policy_node_outside NAME NET POD-CIDR
#                                an "outside" namespace OUT_NS (fNAME-out-<pid>)
#                                on a veth NAME-und (NET.1/24, in the node) to
#                                NAME-out (NET.2/24) that routes POD-CIDR via
#                                the node: before the agent starts (it attaches
#                                to the devices that have an address)
#   policy_node_agent ARGS...    the node's agent (start_node_agent ARGS...;
#                                fail + finish when it does not start); SOCK,
#                                CONF (the netconf labelled_pods uses), fib
#                                CLI-ARGS..., ADDR and NS (labelled_pods fills
#                                them) and PIDS (background pids, killed on exit)
PIDS=()
declare -A ADDR NS
cni_test_cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
fib() { "$CLI" --socket "$SOCK" "$@"; }

policy_node_up() {
	local mods=(ipam-api ipam-cluster-pool endpoint datapath policy)
	cni_prereqs "${mods[@]}"
	cni_modules "$WORK/mods" "${mods[@]}"
	netns_add "$NODE_NS"
}

policy_node_outside() {
	local name=$1 net=$2 pods=$3
	OUT_NS="f$name-out-$$"
	netns_add "$OUT_NS"
	ip -n "$NODE_NS" link add "$name-und" type veth peer name "$name-out" netns "$OUT_NS"
	ip -n "$NODE_NS" addr add "$net.1/24" dev "$name-und"
	ip -n "$NODE_NS" link set "$name-und" up
	ip -n "$OUT_NS" addr add "$net.2/24" dev "$name-out"
	ip -n "$OUT_NS" link set "$name-out" up
	ip -n "$OUT_NS" route add "$pods" via "$net.1"
}

policy_node_agent() {
	start_node_agent "$WORK/mods" "$@" || { fail "the agent starts"; finish; }
	SOCK=$WORK/fibril.sock
	CONF='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'$SOCK'"}'
}
