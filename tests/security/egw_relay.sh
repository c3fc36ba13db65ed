#!/usr/bin/env bash
# tests/security/egw_relay.sh - the attack: an egress gateway as a relay.
# A pod on n1 is selected by an egress gateway policy whose gateway is n2;
# n2 SNATs to its egress IP what arrives claiming the pod's source address
# on its way to the policy's destinations. Anyone who can put a packet on
# the underlay (a host on the underlay bridge, or another node, n3) sends
# n2 a UDP datagram with the pod's address as its source toward the world:
# the gateway used to trust the source address, SNAT it to the egress IP
# and send it on (EGW_MODE=tunnel, egw_relay_tunnel.sh: the same in tunnel
# mode, plus VXLAN from n3, a known node, carrying the pod's address and
# identity).
# The promise: the gateway relays a packet for another node's pod only when
# it came from the node that hosts that pod (tunnel: the VXLAN outer source
# is the node the ipcache names for the pod; native: the frame's source MAC
# is this node's neighbour toward that node's IP); anything else claiming
# the pod's address toward the policy's destinations is dropped
# (drop:egress-gateway-relay, counted, a drop event) and the world never
# sees it. The genuine pod's traffic still leaves through n2 with the
# egress IP.
. "$top_srcdir/tests/lib/common.sh"
EGW_MODE=${EGW_MODE:-native}
[ "$EGW_MODE" = tunnel ] && MN_UNDERLAY_MTU=9000 # room for VXLAN around 1500-byte frames
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes health egressgw
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import scapy' 2>/dev/null ||
	skip_or_fail "Debian's python3-scapy is not installed"
PY=$top_srcdir/tests/security/egw_relay.py

WORLD_NS=$(mn_ns world)
_mn_netns_add "$WORLD_NS"
WORLD=$MN_UNDERLAY_PREFIX.200
ip -n "$WORLD_NS" link add eth0 type veth peer name uw netns "$MN_UNDERLAY_NS"
ip -n "$MN_UNDERLAY_NS" link set uw mtu "$MN_UNDERLAY_MTU" master br0 up
ip -n "$WORLD_NS" link set eth0 mtu "$MN_UNDERLAY_MTU" up
ip -n "$WORLD_NS" addr add "$WORLD/24" dev eth0
PORT=$((20000 + RANDOM % 20000))
WLOG=$WORK/world.log
: >"$WLOG"
ip netns exec "$WORLD_NS" /usr/bin/python3 "$PY" world "$WORLD" "$PORT" "$WLOG" &
WORLD_PID=$!
mn_test_cleanup() { kill "$WORLD_PID" 2>/dev/null; }
check "the world's receiver is up" wait_for 10 test -e "$WLOG.ready"

EGRESS_IP=$MN_UNDERLAY_PREFIX.102
ip -n "$(mn_ns n2)" addr add "$EGRESS_IP/32" dev eth0
for n in n1 n2 n3; do
	mn_agent_start "$n" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.208.0.0/16 \
		--set nodes.retry=300ms --set "nodes.routing-mode=$EGW_MODE" --set health.interval=500ms \
		--set datapath.host-routing=bpf || { fail "the agent of $n starts"; finish; }
done
for n in n1 n2 n3; do check "$n routes every other node" wait_for 15 mn_routes_all "$n"; done

mn_pod_add n1 sel1 || { fail "pod sel1 on n1"; finish; }
code=$(mn_api n1 -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
	-d '{"labels":["k8s:app=egw","k8s:io.kubernetes.pod.namespace=default"]}' \
	"http://x/v1/endpoint/container-id:${MN_TAG}sel1")
check "sel1 is labelled app=egw" test "$code" = 200
SEL1=${MN_POD_IP[sel1]}
POLICY="{\"selectors\":[{\"namespace\":\"default\",\"podSelector\":{\"matchLabels\":{\"app\":\"egw\"}}}],
 \"destinationCIDRs\":[\"$WORLD/32\"],\"egressGateways\":[{\"nodeName\":\"n2\",\"egressIP\":\"$EGRESS_IP\"}]}"
for n in n1 n2 n3; do
	code=$(mn_api "$n" -o "$WORK/put.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
		-d "$POLICY" "http://x/v1/egress-gateway/relay")
	check "$n accepts the policy (gateway n2, egress IP $EGRESS_IP)" test "$code" = 200 -o "$code" = 201
done
SEL1_ID=$(mn_json n1 "/v1/endpoint/container-id:${MN_TAG}sel1:eth0" "j['identity']")
echo "  sel1 $SEL1 on n1 (identity $SEL1_ID), gateway n2 ${MN_IP[n2]}, world $WORLD, mode $EGW_MODE"

seen_as() { grep -q "^$1 $2\$" "$WLOG"; }
genuine() { # TOKEN: sel1 sends one datagram until the world saw it from the egress IP
	local i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		ip netns exec "$(mn_pod_ns sel1)" /usr/bin/python3 "$PY" send "$WORLD" "$PORT" "$1-$i"
		wait_for 1 seen_as "$1-$i" "$EGRESS_IP" && return 0
	done
	echo "  the world saw: $(grep "^$1-" "$WLOG" | head -3 | tr '\n' ';')"
	return 1
}
check "$EGW_MODE: sel1's own traffic reaches the world as the egress IP $EGRESS_IP" genuine GENUINE

N2_MAC=$(ip -n "$(mn_ns n2)" -o link show eth0 | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
dropped() { mn_json n2 /v1/datapath "j['packets-to-netdev'].get('drop:egress-gateway-relay', 0)"; }
d0=$(dropped)
# ---- forged: a host on the underlay bridge, and another node (n3) ------------------------
ip netns exec "$MN_UNDERLAY_NS" /usr/bin/python3 "$PY" l2 br0 "$N2_MAC" "$SEL1" "$WORLD" "$PORT" RELAY-underlay 5
ip netns exec "$(mn_ns n3)" /usr/bin/python3 "$PY" l2 eth0 "$N2_MAC" "$SEL1" "$WORLD" "$PORT" RELAY-node 5
sent=10
if [ "$EGW_MODE" = tunnel ]; then
	ip netns exec "$(mn_ns n3)" /usr/bin/python3 "$PY" vxlan "${MN_IP[n2]}" "$SEL1_ID" "$SEL1" "$WORLD" \
		"$PORT" RELAY-vxlan 5
	sent=15
fi
# the genuine datagram after the forged ones: when it arrived, so would they have
check "$EGW_MODE: sel1's traffic still leaves as the egress IP after the forged packets" genuine AFTER
for how in underlay node $([ "$EGW_MODE" = tunnel ] && echo vxlan); do
	check "$EGW_MODE: the world never received a forged RELAY-$how datagram with the egress IP" \
		bash -c '! grep -q "^RELAY-$1 $2\$" "$3"' _ "$how" "$EGRESS_IP" "$WLOG"
	check "$EGW_MODE:   nor with any other source" bash -c '! grep -q "^RELAY-$1 " "$2"' _ "$how" "$WLOG"
done
all_dropped() { [ "$(dropped)" -ge $((d0 + sent)) ]; }
check "$EGW_MODE: n2 counted the $sent forged packets drop:egress-gateway-relay" wait_for 5 all_dropped ||
	echo "  counted $(dropped) (before: $d0)"
drop_events() {
	mn_json n2 "/v1/datapath/events?type=drop" \
		"sum(1 for e in j['events'] if e['reason'] == 'drop:egress-gateway-relay' and e['src'] == '$SEL1')"
}
one_event() { [ "$(drop_events)" -ge 1 ]; }
check "$EGW_MODE: the drop is a drop event naming the claimed source $SEL1" wait_for 5 one_event
echo "  the world's log:"
sed 's/^/    /' "$WLOG"
finish
