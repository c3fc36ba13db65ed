#!/usr/bin/env bash
# tests/security/ct_planting.sh - the attack: conntrack's reply check
# ("the reverse 5-tuple is in dp_conntrack") lets a packet skip policy, and
# the reverse entry can be planted from outside. One spoofed packet
# B:80 -> A:PORT delivered to an unenforced pod A (sent from the node, from
# a machine on the underlay, or by another pod) would create the entry
# B:80 -> A:PORT, and A:PORT -> B:80 would then pass B's deny-all ingress
# as a "reply" and complete a TCP session into B.
# The promise: a packet is a reply at an enforcement point only against
# state that point itself recorded - B's ingress treats A -> B as a reply
# only if B's own egress opened B -> A - so the planted packet never opens
# B: A's connections to B:80 from the planted ports all fail, as one from a
# port nobody planted does.
# Setup: an agent (ipam, endpoint, datapath, policy; host-routing bpf) in a
# node namespace with an underlay veth to an "outside" namespace routing
# the pod CIDR through the node, pods a, b and c through fibril-cni, a TCP
# server on b:80, a CiliumNetworkPolicy making b deny-all ingress.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/wait.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/policynode.sh"

/usr/bin/python3 -c 'import scapy.all' 2>/dev/null || skip_or_fail "Debian's python3-scapy is missing"
policy_node_up
# the underlay: node 10.250.77.1 <-> outside 10.250.77.2
policy_node_outside ctp 10.250.77 10.244.33.0/24
ip netns exec "$NODE_NS" sysctl -qw net.ipv4.ip_forward=1
policy_node_agent --set ipam-cluster-pool.node-cidr=10.244.33.0/24

labelled_pods fctp a b c
ip netns exec "${NS[b]}" python3 "$top_srcdir/tests/cni/nettest.py" serve 80 >/dev/null 2>&1 &
PIDS+=($!)
disown $!
wait_listening "${NS[b]}" 80 || fail "b listens on 80"

# connect FROM SPORT TO PORT : "ok" when a TCP session from FROM's port SPORT
# gets the server's answer (one attempt, 2 s: a policy drop is a timeout)
connect() {
	ip netns exec "${NS[$1]}" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1])))
s.settimeout(2)
try:
    s.connect((sys.argv[2], int(sys.argv[3])))
    print("ok" if s.recv(3) == b"ok\n" else "bad")
except OSError:
    print("fail")' "$2" "${ADDR[$3]}" "$4"
}
# spoof NETNS SPORT DPORT : one TCP SYN B:SPORT -> A:DPORT sent from NETNS
spoof() {
	ip netns exec "$1" /usr/bin/python3 -c '
import sys
from scapy.all import IP, TCP, send
send(IP(src=sys.argv[1], dst=sys.argv[2]) / TCP(sport=int(sys.argv[3]), dport=int(sys.argv[4]), flags="S"), verbose=0)' \
		"${ADDR[b]}" "${ADDR[a]}" "$2" "$3"
}
metric() { # metric DIRECTION REASON : packets summed over the dump
	fib map dump dp_metrics | awk -v d="$1" -v r="$2" '$1 == d && $2 == r {
		for (i = 3; i <= NF; i++) if ($i ~ /^packets=/) { sub("packets=", "", $i); s += $i } }
		END { print s + 0 }'
}

check "before any policy a reaches b:80" test "$(connect a 1200 b 80)" = ok

cat >"$WORK/deny.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "b-deny-all"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "b"}}, "ingress": [{}]}}
EOF2
out=$(fib policy import "$WORK/deny.json" 2>&1)
check "the deny-all ingress policy on b is imported" contains "$out" "Revision:"
check "a's connection to b:80 from an unplanted port fails (b is deny-all)" \
	test "$(connect a 1201 b 80)" = fail

# 1. from the node: the stack routes the spoofed SYN to a's veth (to-endpoint)
before=$(metric to-endpoint delivered)
spoof "$NODE_NS" 80 1234
check "the node's spoofed b:80 -> a:1234 reached a (to-endpoint delivered)" \
	test "$(metric to-endpoint delivered)" -gt "$before"
check "after a spoofed b:80 -> a:1234 from the node, a:1234 -> b:80 still fails" \
	test "$(connect a 1234 b 80)" = fail

# 2. from the underlay: b is a local pod, so fibril_from_netdev's source
# check (netdev_spoof.sh) drops the spoof before it reaches a; were it let
# through, it would still plant nothing (the BPF test covers that path)
before=$(metric from-netdev forwarded)
before_drop=$(metric from-netdev drop:spoofed-from-network)
spoof "$OUT_NS" 80 1235
check "the underlay's spoofed b:80 -> a:1235 is dropped as spoofed or reaches a" \
	test "$(metric from-netdev drop:spoofed-from-network)" -gt "$before_drop" -o \
	"$(metric from-netdev forwarded)" -gt "$before"
check "after a spoofed b:80 -> a:1235 from the underlay, a:1235 -> b:80 still fails" \
	test "$(connect a 1235 b 80)" = fail

# 3. from another pod: c claims b's address
spoof "${NS[c]}" 80 1236
check "after a spoofed b:80 -> a:1236 from pod c, a:1236 -> b:80 still fails" \
	test "$(connect a 1236 b 80)" = fail

# the genuine reply path still works: b opens b -> a, a's answers pass b's
# deny-all ingress (b's own egress opened the flow)
ip netns exec "${NS[a]}" python3 "$top_srcdir/tests/cni/nettest.py" serve 8080 >/dev/null 2>&1 &
PIDS+=($!)
disown $!
wait_listening "${NS[a]}" 8080 || fail "a listens on 8080"
check "b's own connection to a:8080 gets its replies through b's deny-all ingress" \
	test "$(connect b 1300 a 8080)" = ok
finish
