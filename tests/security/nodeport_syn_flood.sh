#!/usr/bin/env bash
# tests/security/nodeport_syn_flood.sh - the attack: a SYN flood from the
# underlay (spoofed sources, random ports) against a NodePort, many times
# the size of lb_ct, the per-packet NAT's flows; with lb_ct an LRU map the
# flood evicted the entries of established NodePort connections (an idle
# one then broke: its next packet was no longer translated) and let
# snat_claim hand out an SNAT port whose flow was still alive. The promise:
# lb_ct never evicts a live entry - when it is full, new flows are refused
# (dropped, counted as tc-ct-full) and the established ones keep working;
# no SNAT port is ever held by two flows to one backend; SNAT ports are not
# the client's own port. Topology: tests/lib/lbtopo.sh with the backend
# "on another node": an address in the outside netns the node routes out of
# ext0, so every flow is SNATed (four lb_ct entries per flow).
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
/usr/bin/python3 -c 'import scapy.all' 2>/dev/null || skip_or_fail "python3-scapy is not installed"
LB_BACKENDS=1
. "$top_srcdir/tests/lib/lbtopo.sh"

# the backend on "another node": 10.99.0.5 in the outside netns, routed out of ext0
ip -n "$OUTSIDE" addr add 10.99.0.5/32 dev lo
ip -n "$NODE" route add 10.99.0.0/24 via 192.168.212.2 dev ext0
for ns in "$NODE" "$OUTSIDE"; do
	ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0
	ip netns exec "$ns" sysctl -qw net.ipv4.conf.default.rp_filter=0
done
ip netns exec "$NODE" sysctl -qw net.ipv4.conf.ext0.rp_filter=0
ip netns exec "$OUTSIDE" sysctl -qw net.ipv4.conf.eth0.rp_filter=0
nsenter --net="/run/netns/$OUTSIDE" python3 "$top_srcdir/tests/lib/lbnet.py" serve remote 8080 >/dev/null 2>&1 &
BG_PIDS+=($!)
disown $!
wait_listening "$OUTSIDE" || fail "the remote backend listens"

CT_MAX=1024
start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 \
	--set "lb.ct-map-max=$CT_MAX" || { fail "the agent starts"; finish; }
upsert '{"frontend":"192.168.212.1:30080","type":"NodePort","backends":[{"address":"10.99.0.5:8080"}]}'
check "a NodePort whose backend is on another node" test "$URC" = 0 || echo "  $UOUT"
out=$(outside tcpsrc 192.168.212.1 30080 3)
check "served from the underlay, SNATed (the backend sees the node's address)" \
	test "$(jq_ "$out" 'j["sources"] == {"192.168.212.1": 3}')" = True || echo "  $out"

# an established connection, idle during the flood, then used again
nsenter --net="/run/netns/$OUTSIDE" python3 - "$WORK/held" <<'PY' &
import socket, sys, os, time
path = sys.argv[1]
c = socket.create_connection(("192.168.212.1", 30080), timeout=3)
f = c.makefile("rb")
c.sendall(b"hi\n")
first = f.readline().decode().strip()
open(path + ".ready", "w").write(first + "\n")
while not os.path.exists(path + ".go"):
    time.sleep(0.05)  # sleep: polls for the test's signal that the flood is over
try:
    c.sendall(b"hi\n")
    second = f.readline().decode().strip() or "closed"
except OSError as e:
    second = "error " + str(e)
open(path, "w").write(second + "\n")
PY
BG_PIDS+=($!)
disown $!
check "the connection is established" wait_for 10 test -s "$WORK/held.ready"

# the flood: 4 x lb_ct's size of SYNs from spoofed sources and random ports
mac=$(ip -n "$NODE" -o link show ext0 | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
nsenter --net="/run/netns/$OUTSIDE" /usr/bin/python3 - "$mac" $((CT_MAX * 4)) <<'PY'
import random, sys
from scapy.all import Ether, IP, TCP, sendp, conf
conf.verb = 0
mac, n = sys.argv[1], int(sys.argv[2])
pkts = [Ether(dst=mac) / IP(src="10.250.%d.%d" % (random.randrange(256), random.randrange(1, 255)),
                            dst="192.168.212.1") /
        TCP(sport=random.randrange(1024, 65536), dport=30080, flags="S", seq=random.getrandbits(32))
        for _ in range(n)]
sendp(pkts, iface="eth0")
PY
touch "$WORK/held.go"
check "the established connection answered after the flood" wait_for 10 test -s "$WORK/held"
got=$(cat "$WORK/held" 2>/dev/null || true)
check "... by its backend (got: '$got')" test "$got" = remote

# no SNAT port held twice for one backend, none equal to its client's port
dump=$(fib map dump lb_ct)
dups=$(awk '$4 == "10.99.0.5:8080" && $5 == "egress" { for (i = 1; i <= NF; i++) if ($i ~ /^source=/) print $i }' <<<"$dump" |
	sort | uniq -d | wc -l)
check "no SNAT port is held by two flows ($dups held twice)" test "$dups" = 0
same=$(awk '$4 == "10.99.0.5:8080" && $5 == "egress" { split($2, c, ":"); for (i = 1; i <= NF; i++) if ($i ~ /^source=/) { split($i, s, ":"); if (s[2] == c[2]) n++ } } END { print n + 0 }' <<<"$dump")
entries=$(grep -c ' -> ' <<<"$dump" || true)
check "lb_ct stayed within its bound ($entries <= $CT_MAX entries)" test "$entries" -le "$CT_MAX"
full=$(fib map dump lb_metrics | awk '$1 == "tc-ct-full" { print $2 }')
check "the refused new flows are counted (tc-ct-full: ${full:-none})" test "${full:-0}" -gt 0
check "SNAT ports are random, not the client's own ($same of them equal)" test "$same" -lt 5
finish
