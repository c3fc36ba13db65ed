#!/usr/bin/env bash
# tests/integration/cni_restore.sh - pods outlive their agent: two pods
# added through libcni with an agent (ipam-cluster-pool, ipam-api,
# endpoint, datapath) in a node namespace, a TCP stream between them
# (tests/cni/nettest.py send/recv, counting bytes and noting any reset);
# the agent is killed with SIGKILL, the stream keeps flowing while it is
# down, the agent is started again on the same state, the stream goes on
# without a reset; `fibril endpoint list -o json` shows the same endpoints,
# identities and addresses as before; a pod added after the restart does
# not get an address a live pod holds, and everyone still reaches it; the
# pinned maps are reused after the restart (the agent runs with the host's
# mounts, via nsenter --net, so its bpffs is not private to it).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

cni_prereqs ipam-api ipam-cluster-pool endpoint datapath
command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
build_driver || { fail "the libcni driver builds"; finish; }
cni_modules "$WORK/mods" ipam-api ipam-cluster-pool endpoint datapath
netns_add "$NODE_NS"
AGENT_ARGS=(--set ipam-cluster-pool.node-cidr=10.244.9.0/24)
start_node_agent "$WORK/mods" "${AGENT_ARGS[@]}"
SOCK=$WORK/fibril.sock
GW=10.244.9.1
PORT=$((20000 + RANDOM % 20000))
cat >"$WORK/fibril.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "fibril",
 "plugins": [{"type": "fibril-cni", "agent-socket": "$SOCK"}]}
EOF
pod_ns() { echo "fcni-r$$-$1"; }
pod_id() { echo "fcni$$restore$1"; }
declare -A ADDR
add_pod() {
	netns_add "$(pod_ns "$1")"
	driver "$WORK/fibril.conflist" -args "K8S_POD_NAMESPACE=default;K8S_POD_NAME=$1" \
		add "$(pod_id "$1")" "/var/run/netns/$(pod_ns "$1")" eth0
	[ "$PRC" = 0 ] || { echo "  ADD $1: $(out) $(cat "$WORK/err")"; return 1; }
	ADDR[$1]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
}
check "ADD pod a" add_pod a
check "ADD pod b" add_pod b
if [ -z "${ADDR[a]:-}" ] || [ -z "${ADDR[b]:-}" ]; then
	tail -20 "$WORK/agent.log"
	finish
fi

# endpoints JSON -> sorted (id, container-id, identity, ipv4, ipv6, state-independent)
endpoint_view() {
	"$CLI" --socket "$SOCK" -o json endpoint list | python3 -c 'import json,sys
j = json.load(sys.stdin)
eps = j["endpoints"] if isinstance(j, dict) else j
print(sorted((e["id"], e["container-id"], e["identity"], e.get("ipv4"), e.get("ipv6"), e["host-ifname"]) for e in eps))'
}
BEFORE=$(endpoint_view)
check "fibril endpoint list -o json shows both pods" contains "$BEFORE" "'$(pod_id b)'"

# ---- the stream ---------------------------------------------------------------------
ip netns exec "$(pod_ns b)" python3 "$top_srcdir/tests/cni/nettest.py" recv "$PORT" "$WORK/recv.status" &
RECV=$!
wait_alive "$RECV" 10 test -f "$WORK/recv.status" || true
ip netns exec "$(pod_ns a)" python3 "$top_srcdir/tests/cni/nettest.py" send "${ADDR[b]}" "$PORT" "$WORK/send.status" &
SEND=$!
cni_test_cleanup() { kill "$SEND" "$RECV" 2>/dev/null; }
received() { sed -n 's/.*bytes=\([0-9]*\).*/\1/p' "$WORK/recv.status" 2>/dev/null || echo 0; }
# received_past N : pod b has received more than N bytes
received_past() { [ "$(received)" -gt "$1" ]; }
# the two python processes start slowly on a loaded machine: wait (up to
# 15 s) for the first bytes
wait_for 15 received_past 0 || true
b0=$(received)
check "the stream flows from pod a to pod b" test "${b0:-0}" -gt 0

kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
AGENT_PID=""
# with the agent gone (not only signalled), another MiB of the stream arrives
b_dead=$(received)
wait_for 15 received_past $((b_dead + 1048576)) || true
b1=$(received)
check "the stream keeps flowing while the agent is down ($b0 -> $b_dead at its death -> $b1 bytes)" \
	test "${b1:-0}" -gt $((b_dead + 1048576))
check "  pod a still pings pod b" ip netns exec "$(pod_ns a)" ping -c 1 -W 2 "${ADDR[b]}"

start_node_agent "$WORK/mods" "${AGENT_ARGS[@]}"
check "the agent starts again on the same state" kill -0 "$AGENT_PID"
map_origins() { api http://x/v1/map | python3 -c 'import json,sys; print(" ".join(sorted({m["origin"] for m in json.load(sys.stdin)["maps"]})))'; }
check "after the restart every pinned map is reused, none created ($(map_origins))" test "$(map_origins)" = reused
check "  the agent's bpffs is the host's (no private-bpffs warning)" \
	bash -c "! grep -q 'private to the agent' '$WORK/agent.log'"
# another 12 MiB with the agent back: at most 6.4 MB/s (the sender's pace), so
# at least 2 s in which the restarted agent must leave the stream alone
b_back=$(received)
wait_for 30 received_past $((b_back + 12582912)) || true
b2=$(received)
check "the stream goes on after the restart ($b1 -> $b_back -> $b2 bytes)" test "${b2:-0}" -gt $((b_back + 12582912))
check "  without a reset on the receiver" contains "$(cat "$WORK/recv.status")" "reset=0 eof=0"
check "  nor on the sender" contains "$(cat "$WORK/send.status")" "reset=0"
AFTER=$(endpoint_view)
check "the same endpoints, identities and addresses after the restart" test "$AFTER" = "$BEFORE" ||
	{ echo "  before: $BEFORE"; echo "  after:  $AFTER"; }

# ---- a new pod after the restart ---------------------------------------------------
check "ADD pod c after the restart" add_pod c
check "pod c got an address no live pod holds (${ADDR[c]:-none})" \
	test -n "${ADDR[c]:-}" -a "${ADDR[c]:-}" != "${ADDR[a]}" -a "${ADDR[c]:-}" != "${ADDR[b]}"
ip netns exec "$(pod_ns c)" python3 "$top_srcdir/tests/cni/nettest.py" serve "$((PORT + 1))" &
SERVE=$!
cni_test_cleanup() { kill "$SEND" "$RECV" "$SERVE" 2>/dev/null; }
wait_listening "$(pod_ns c)" "$((PORT + 1))"
check "pod a reaches pod c and the node" \
	ip netns exec "$(pod_ns a)" python3 "$top_srcdir/tests/cni/nettest.py" probe "$((PORT + 1))" "${ADDR[c]}"
check "pod c reaches pod a and the node (ping)" ip netns exec "$(pod_ns c)" ping -c 1 -W 2 "${ADDR[a]}"
check "  and the gateway" ip netns exec "$(pod_ns c)" ping -c 1 -W 2 "$GW"

# ---- the end -----------------------------------------------------------------------------
kill "$SEND" 2>/dev/null || true
wait "$SEND" 2>/dev/null || true
for p in a b c; do
	driver "$WORK/fibril.conflist" del "$(pod_id $p)" "/var/run/netns/$(pod_ns $p)" eth0
	check "DEL pod $p" test "$PRC" = 0
done
check "no lxc link is left" test -z "$(node_lxc_links)"
check "no address is left" test -z "$(ipam_allocations)"
rc=0
stop_agent TERM || rc=$?
check "the agent stops cleanly (exit $rc)" test "$rc" = 0

finish
