#!/usr/bin/env bash
# tests/security/vni_spoof.sh - the attack: in tunnel mode a host on the
# underlay that is no node sends VXLAN (UDP 8472) to a node, the VNI set to
# a privileged identity (that of the one pod a victim pod lets in), the
# inner packet addressed to the victim. fibril_from_overlay used to take
# the VNI as the sender's identity from whoever sent it, so the victim's
# ingress policy let the packet in.
# The promise: the VNI is an identity only when the outer source is a known
# node (the ipcache says remote-node); from anyone else the frame is
# dropped (drop:tunnel-from-unknown-node, counted, a drop event). The
# trusted pod on a real node still reaches the victim through the tunnel.
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_MTU=9000 # room for VXLAN's 50 bytes around 1500-byte pod frames
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import scapy' 2>/dev/null ||
	skip_or_fail "Debian's python3-scapy is not installed"
PORT=$((20000 + RANDOM % 20000))
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.206.0.0/16 \
		--set nodes.retry=300ms --set nodes.routing-mode=tunnel ||
		{ fail "the agent of $n starts"; finish; }
done
for n in n1 n2; do check "$n knows and routes the other node" wait_for 15 mn_routes_all "$n"; done
mn_pod_add n1 victim victim || { fail "the victim pod on n1"; finish; }
mn_pod_add n2 trusted trusted || { fail "the trusted pod on n2"; finish; }
VICTIM=${MN_POD_IP[victim]}
TRUSTED=${MN_POD_IP[trusted]}
TRUSTED_ID=$(mn_json n2 "/v1/endpoint/container-id:${MN_TAG}trusted:eth0" "j['identity']")
echo "  victim $VICTIM on n1, trusted $TRUSTED on n2 (identity $TRUSTED_ID)"

cat >"$WORK/cnp.json" <<'EOF'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "victim-from-trusted"},
 "spec": {"endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "victim"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "trusted"}}]}]}}
EOF
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/cnp.json" 2>&1)
check "n1 imports the policy" contains "$out" "Revision: 1"

RECV=$WORK/victim.recv
mn_udp_log victim "$PORT" "$RECV" || fail "the victim's UDP receiver listens"
received() { grep -q "^$1 " "$RECV"; }

# ---- the real node: the trusted pod through the tunnel -----------------------------------
send_from_trusted() {
	ip netns exec "$(mn_pod_ns trusted)" python3 -c 'import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[1].encode(), (sys.argv[2], int(sys.argv[3])))' \
		"$1" "$VICTIM" "$PORT"
}
send_from_trusted from-trusted
check "the trusted pod on n2 reaches the victim through the tunnel" wait_for 5 received from-trusted

# ---- the forged VXLAN frame from the underlay's own address (no node) --------------------
dropped() { mn_json n1 /v1/datapath "j['packets-from-overlay'].get('drop:tunnel-from-unknown-node', 0)"; }
drop_events() { mn_json n1 "/v1/datapath/events?type=drop" "sum(1 for e in j['events'] if e['reason'] == 'drop:tunnel-from-unknown-node' and e['src'] == '$MN_UNDERLAY_PREFIX.1' and e['src-identity'] == $TRUSTED_ID)"; }
forge() { # forge OUTER-SRC PAYLOAD
	ip netns exec "$MN_UNDERLAY_NS" /usr/bin/python3 -c '
import sys
from scapy.all import Ether, IP, UDP, Raw, send, conf, L3RawSocket
from scapy.layers.vxlan import VXLAN
conf.verb = 0
conf.L3socket = L3RawSocket # the kernel routes it and resolves the MAC
outer_src, node, vni, victim, port, payload = sys.argv[1:7]
inner = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.206.250.9", dst=victim, ttl=64) / \
    UDP(sport=40000, dport=int(port)) / Raw(payload.encode())
send(IP(src=outer_src, dst=node) / UDP(sport=50000, dport=8472) / VXLAN(vni=int(vni), flags=0x08) / inner)
' "$1" "${MN_IP[n1]}" "$TRUSTED_ID" "$VICTIM" "$PORT" "$2"
}
d0=$(dropped)
forge "$MN_UNDERLAY_PREFIX.1" forged-vni
one_dropped() { [ "$(dropped)" -ge $((d0 + 1)) ]; }
check "VXLAN from a non-node underlay address is counted drop:tunnel-from-unknown-node" \
	wait_for 5 one_dropped || echo "  counted $(dropped) (before: $d0)"
check "its inner packet (VNI = the trusted identity $TRUSTED_ID) does not reach the victim" \
	bash -c '! grep -q "^forged-vni " "$1"' _ "$RECV"
one_event() { [ "$(drop_events)" -ge 1 ]; }
check "the drop is a drop event naming the outer source and the VNI it claimed" wait_for 5 one_event
# the real node keeps working after it
send_from_trusted after-forge
check "the trusted pod on n2 still reaches the victim" wait_for 5 received after-forge
finish
