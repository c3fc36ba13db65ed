#!/usr/bin/env bash
# tests/security/netdev_spoof.sh - the attack: a host on the underlay sends
# packets to a local pod with a forged source: this node's own IP (identity
# host) or a local pod's IP (that pod's identity). With host-routing = bpf
# fibril_from_netdev used to take the sender's identity from the ipcache
# entry of the source address and redirect the packet into the pod past
# rp_filter, so a pod that lets in only the host and one trusted pod took
# both.
# The promise: a packet arriving from the network that claims this node's
# address or a local pod's address is dropped (drop:spoofed-from-network,
# counted and in the drop events); genuine senders (the node itself, the
# trusted pod) still get in. With host-routing legacy (no source check on
# the underlay: the stack forwards) the pod's address is still refused,
# at the pod's veth (fibril_to_endpoint), with the stack's rp_filter off.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import scapy' 2>/dev/null ||
	skip_or_fail "Debian's python3-scapy is not installed"
PORT=$((20000 + RANDOM % 20000))
mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
	--set nodes.retry=300ms || { fail "the agent of n1 starts"; finish; }
netdev_attached() { [ "$(mn_json n1 /v1/datapath "j['host-routing'] == 'bpf' and j['host-routing-devices'] >= 1" 2>/dev/null)" = True ]; }
check "n1 runs host-routing bpf (fibril_from_netdev on eth0)" wait_for 20 netdev_attached
mn_pod_add n1 victim victim || { fail "the victim pod"; finish; }
mn_pod_add n1 friend friend || { fail "the friend pod"; finish; }
VICTIM=${MN_POD_IP[victim]}
FRIEND=${MN_POD_IP[friend]}
NODE_IP=${MN_IP[n1]}

# the victim lets in only the host and pods of namespace friend
cat >"$WORK/cnp.json" <<'EOF'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "victim-host-and-friend"},
 "spec": {"endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "victim"}},
          "ingress": [{"fromEntities": ["host"]},
                      {"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "friend"}}]}]}}
EOF
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/cnp.json" 2>&1)
check "the policy is imported" contains "$out" "Revision: 1"

# the victim logs every UDP payload it receives, one a line
RECV=$WORK/victim.recv
mn_udp_log victim "$PORT" "$RECV" || fail "the victim's UDP receiver listens"

send_udp() { # send_udp NETNS PAYLOAD
	ip netns exec "$1" python3 -c 'import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[1].encode(), (sys.argv[2], int(sys.argv[3])))' \
		"$2" "$VICTIM" "$PORT"
}
received() { grep -q "^$1 " "$RECV"; }

# ---- genuine senders get in --------------------------------------------------------------
send_udp "$(mn_ns n1)" from-host
check "the node itself reaches the victim (host is allowed)" wait_for 5 received from-host
send_udp "$(mn_pod_ns friend)" from-friend
check "the friend pod reaches the victim (its identity is allowed)" wait_for 5 received from-friend

# ---- the spoofs, from the underlay namespace, to n1's eth0 MAC ---------------------------
NODE_MAC=$(ip -n "$(mn_ns n1)" -j link show eth0 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["address"])')
dropped() { mn_json n1 /v1/datapath "j['packets-from-netdev'].get('drop:spoofed-from-network', 0)"; }
drop_events() { mn_json n1 "/v1/datapath/events?type=drop" "sum(1 for e in j['events'] if e['reason'] == 'drop:spoofed-from-network' and e['direction'] == 'from-netdev')"; }
spoof() { # spoof SRC PAYLOAD: one UDP datagram from the underlay with source SRC
	ip netns exec "$MN_UNDERLAY_NS" /usr/bin/python3 -c '
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp, conf
conf.verb = 0
mac, src, dst, port, payload = sys.argv[1:6]
sendp(Ether(dst=mac) / IP(src=src, dst=dst, ttl=64) / UDP(sport=40000, dport=int(port)) / Raw(payload.encode()), iface="br0")
' "$NODE_MAC" "$1" "$VICTIM" "$PORT" "$2"
}
d0=$(dropped)
spoof "$NODE_IP" spoof-host
spoof "$FRIEND" spoof-friend
# the datapath acts on each at once: a spoof that got through is in the
# log within this wait; one that was dropped is counted
two_dropped() { [ "$(dropped)" -ge $((d0 + 2)) ]; }
check "both spoofs are counted drop:spoofed-from-network (from-netdev)" wait_for 5 two_dropped ||
	echo "  counted $(dropped) (before: $d0)"
check "a packet from the underlay claiming this node's IP ($NODE_IP) does not reach the pod" \
	bash -c '! grep -q "^spoof-host " "$1"' _ "$RECV"
check "a packet from the underlay claiming the friend pod's IP ($FRIEND) does not reach the pod" \
	bash -c '! grep -q "^spoof-friend " "$1"' _ "$RECV"
two_events() { [ "$(drop_events)" -ge 2 ]; }
check "the drops are drop events (direction from-netdev)" wait_for 5 two_events
# the world (the underlay's own address) is still judged by the policy, not by this check
spoof "$MN_UNDERLAY_PREFIX.1" from-world
policy_dropped() { [ "$(mn_json n1 /v1/datapath "j['packets-from-netdev'].get('drop:policy-denied', 0)")" -ge 1 ]; }
check "a genuine world sender is judged by the victim's policy (drop:policy-denied)" wait_for 5 policy_dropped
check "  and not counted as a spoof" test "$(dropped)" = $((d0 + 2))

# ---- host-routing legacy: no source check on eth0, the stack forwards -----------------------
# The same spoof of the friend pod's IP, with the node's stack routing it to
# the victim's veth (rp_filter off, as a node's admin may have it: the
# datapath's own check must hold alone). fibril_to_endpoint takes a local
# pod's address only from that pod's veth (or the node itself).
mn_agent_kill n1 TERM
mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
	--set nodes.retry=300ms --set datapath.host-routing=legacy --set datapath.masquerade=false ||
	{ fail "the agent of n1 restarts with host-routing legacy"; finish; }
legacy_on() { [ "$(mn_json n1 /v1/datapath "j['host-routing'] == 'legacy' and j['host-routing-devices'] == 0" 2>/dev/null)" = True ]; }
check "n1 runs host-routing legacy (no fibril_from_netdev on eth0)" wait_for 20 legacy_on
for c in all default eth0; do ip netns exec "$(mn_ns n1)" sysctl -qw "net.ipv4.conf.$c.rp_filter=0"; done
to_ep_dropped() { mn_json n1 /v1/datapath "j['packets-to-endpoints'].get('drop:spoofed-from-network', 0)"; }
t0=$(to_ep_dropped)
send_udp "$(mn_pod_ns friend)" legacy-from-friend
check "legacy: the friend pod still reaches the victim" wait_for 5 received legacy-from-friend
spoof "$FRIEND" legacy-spoof-friend
legacy_dropped() { [ "$(to_ep_dropped)" -ge $((t0 + 1)) ]; }
check "legacy: the spoof of the friend's IP is dropped at the victim's veth (to-endpoint, drop:spoofed-from-network)" \
	wait_for 5 legacy_dropped || echo "  counted $(to_ep_dropped) (before: $t0)"
check "legacy: a packet from the underlay claiming the friend pod's IP does not reach the pod" \
	bash -c '! grep -q "^legacy-spoof-friend " "$1"' _ "$RECV"
spoof "$NODE_IP" legacy-spoof-host
# the kernel drops a local source as a martian, uncounted: a genuine
# packet sent after it is logged after it would have been
send_udp "$(mn_pod_ns friend)" legacy-after-host
check "legacy: the friend's next packet arrives" wait_for 5 received legacy-after-host
check "legacy: one claiming this node's IP does not reach the pod (the kernel's martian check)" \
	bash -c '! grep -q "^legacy-spoof-host " "$1"' _ "$RECV"
finish
