#!/usr/bin/env bash
# tests/security/ct_charge_release.sh - the attack: a pod fills its
# conntrack quota (dp_ct_count) with half-open flows and is deleted; the
# endpoint slot (the lowest free ID) goes to the next pod created, which
# inherits the charges of flows that are no longer anybody's and is refused
# new flows (drop:conntrack-full) until the GC expires them - an hour with
# the timeouts set here. The promise: deleting an endpoint gives back what
# its flows were charged with and takes its conntrack entries out, so a
# pod recreated in the same slot starts with an empty quota.
# Setup: an agent (ipam, endpoint, datapath, policy; host-routing bpf,
# conntrack-max-tcp 1024 with a 5 % endpoint share: 51 TCP flows per
# endpoint, SYN timeout and GC interval one hour) in a node namespace, pods
# a and b through fibril-cni, a server on b:7000.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/wait.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/policynode.sh"

policy_node_up
policy_node_agent --set ipam-cluster-pool.node-cidr=10.244.36.0/24 \
	--set datapath.conntrack-max-tcp=1024 --set datapath.conntrack-endpoint-share=5 \
	--set datapath.conntrack-timeout-tcp-syn=1h --set datapath.conntrack-gc-interval=1h

labelled_pods fctc b a
ip netns exec "${NS[b]}" python3 -c '
import socket
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 7000))
srv.listen(64)
while True:
    c, _ = srv.accept()
    c.close()' >/dev/null 2>&1 &
PIDS+=($!)
disown $!
wait_listening "${NS[b]}" 7000 || fail "b listens on 7000"

ep_id() { api "http://x/v1/endpoint/container-id:fctc$$a" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])' 2>/dev/null || echo "?"; }
# connects : pod a opens a TCP connection to b:7000 within 3 s
connects() { ip netns exec "${NS[a]}" python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], 7000), timeout=3).close()' "${ADDR[b]}" 2>/dev/null; }
# slot_count ID : the TCP flows dp_ct_count charges to endpoint ID (0: none)
slot_count() {
	fib map dump dp_ct_count | awk -v id="$1" '$1 == id { sub("tcp=", "", $2); print $2; f = 1 } END { if (!f) print 0 }'
}
# charged_entries ID : dp_conntrack entries charged to endpoint ID
charged_entries() { fib map dump dp_conntrack | grep -c " charged=$1\b" || true; }

id1=$(ep_id)
check "pod a reaches b:7000 before anything" connects
# 200 SYNs from a to an outside address (new source ports): 51 are charged
# to a, the rest dropped over its quota
ip netns exec "${NS[a]}" python3 -c '
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
src, d = socket.inet_aton(sys.argv[1]), socket.inet_aton("203.0.113.9")
for i in range(200):
    tcp = struct.pack("!HHIIBBHHH", 20000 + i, 9, i, 0, 5 << 4, 0x02, 1024, 0, 0)
    s.sendto(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, i, 0, 64, 6, 0, src, d) + tcp, ("203.0.113.9", 0))' "${ADDR[a]}"
n=$(slot_count "$id1")
check "pod a's flood fills its quota: endpoint $id1 is charged with $n TCP flows (51)" test "$n" = 51
check "pod a, at its quota, gets no new flow to b:7000" eval '! connects'

plugin DEL "$CONF" CNI_CONTAINERID="fctc$$a" CNI_NETNS="/var/run/netns/${NS[a]}" CNI_IFNAME=eth0 \
	CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=a"
check "pod a is deleted (CNI DEL)" test "$PRC" = 0
ip netns del "${NS[a]}"
unset 'NS[a]'
labelled_pods fctc a
id2=$(ep_id)
check "the recreated pod a has the same endpoint slot ($id1 -> $id2)" test "$id1" = "$id2"
n=$(slot_count "$id2")
check "the recreated pod a starts uncharged ($n TCP flows charged to slot $id2)" test "$n" = 0
check "the recreated pod a reaches b:7000" connects
_stale_gone() { [ "$(charged_entries "$id2")" -le 2 ]; }
check "the deleted pod's conntrack entries are taken out ($(charged_entries "$id2") charged to slot $id2 left, at most its own 2)" \
	wait_for 20 _stale_gone
check "the agent still serves" agent_healthy
finish
