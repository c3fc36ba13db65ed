#!/usr/bin/env bash
# tests/security/lb_ct_source_quota.sh - the attack: ONE outside source on
# the underlay floods SYNs (random source ports) at a NodePort until lb_ct,
# the per-packet NAT's flows (a hash that never evicts), is full; every
# other client's new NodePort flow is then refused (tc-ct-full) for as long
# as the flood's half-open entries live. The promise: what one client (an
# IPv4 address, an IPv6 /64) holds in lb_ct is bounded by [lb]
# ct-source-max (default: a sixteenth of ct-map-max flows), checked before
# any entry is made - over it the new flow is dropped and counted
# (tc-ct-source-quota) - so another client's established connection keeps
# working AND a third client's new connection is served; the GC gives the
# quota back when the flood's entries go (a half-open flow keeps its short
# lifetime), after which the flooding address is served again.
# Topology: tests/lib/lbtopo.sh, the backend "on another node" (routed out
# of ext0), so every flow is SNATed: four lb_ct entries per flow.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
/usr/bin/python3 -c 'import scapy.all' 2>/dev/null || skip_or_fail "python3-scapy is not installed"
LB_BACKENDS=1
. "$top_srcdir/tests/lib/lbtopo.sh"

FLOODER=192.168.212.66 # the one flooding source (its address comes up later)
THIRD=192.168.212.3    # a client that connects after the flood
ip -n "$OUTSIDE" addr add "$THIRD/24" dev eth0
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

# one TCP exchange with the NodePort from source address $1: the backend's name
connect_from() {
	nsenter --net="/run/netns/$OUTSIDE" python3 - "$1" <<'PY'
import socket, sys
try:
    c = socket.create_connection(("192.168.212.1", 30080), timeout=3, source_address=(sys.argv[1], 0))
    c.sendall(b"hi\n")
    print(c.makefile("rb").readline().decode().strip() or "closed")
except OSError as e:
    print("error", e)
PY
}
served_from() { [ "$(connect_from "$1")" = remote ]; }

CT_MAX=1024 # 256 SNATed flows; the default quota: 1024 / 16 = 64 flows (256 entries)
start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 \
	--set "lb.ct-map-max=$CT_MAX" --set lb.ct-timeout-tcp-syn=8s --set lb.ct-gc-interval=500ms ||
	{ fail "the agent starts"; finish; }
upsert '{"frontend":"192.168.212.1:30080","type":"NodePort","backends":[{"address":"10.99.0.5:8080"}]}'
check "a NodePort whose backend is on another node" test "$URC" = 0 || echo "  $UOUT"

# an established connection of another client, held across the flood
nsenter --net="/run/netns/$OUTSIDE" python3 - "$WORK/held" <<'PY' &
import socket, sys, os, time
path = sys.argv[1]
c = socket.create_connection(("192.168.212.1", 30080), timeout=3, source_address=("192.168.212.2", 0))
f = c.makefile("rb")
c.sendall(b"hi\n")
open(path + ".ready", "w").write(f.readline().decode().strip() + "\n")
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
check "the other client's connection is established" wait_for 10 test -s "$WORK/held.ready"

# the flood: lb_ct's size in SYNs from one address, random source ports
mac=$(ip -n "$NODE" -o link show ext0 | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
nsenter --net="/run/netns/$OUTSIDE" /usr/bin/python3 - "$mac" "$FLOODER" "$CT_MAX" <<'PY'
import random, sys
from scapy.all import Ether, IP, TCP, sendp, conf
conf.verb = 0
mac, src, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ports = random.sample(range(1024, 65536), n)
pkts = [Ether(dst=mac) / IP(src=src, dst="192.168.212.1") /
        TCP(sport=p, dport=30080, flags="S", seq=random.getrandbits(32)) for p in ports]
sendp(pkts, iface="eth0")
PY
dump=$(fib map dump lb_ct)
held=$(awk -v f="$FLOODER:" 'index($2, f) == 1 && $5 == "ingress"' <<<"$dump" | wc -l)
entries=$(grep -c ' -> ' <<<"$dump" || true)
echo "  after the flood: $entries lb_ct entries, $held of them keyed by the flooder"
out=$(connect_from "$THIRD")
check "a third client's new connection is served during the flood (got: '$out')" test "$out" = remote
touch "$WORK/held.go"
check "the other client's established connection answers after the flood" wait_for 10 test -s "$WORK/held"
got=$(cat "$WORK/held" 2>/dev/null || true)
check "... by its backend (got: '$got')" test "$got" = remote
check "the flooder holds at most its quota, 64 flows ($held client entries)" test "$held" -le 64 -a "$held" -gt 0
quota=$(fib map dump lb_metrics | awk '$1 == "tc-ct-source-quota" { print $2 }')
check "the flood's refused flows are counted (tc-ct-source-quota: ${quota:-none})" \
	test "${quota:-0}" -gt 0

# the quota comes back when the flood's half-open flows go (8 s, then the
# GC): the flooding address, now real, is served again
ip -n "$OUTSIDE" addr add "$FLOODER/24" dev eth0
flood_gone() { ! fib map dump lb_ct | grep -q "^TCP $FLOODER:"; }
check "the flood's half-open flows leave lb_ct" wait_for 30 flood_gone
check "the flooding address is served again once its flows are gone" wait_for 20 served_from "$FLOODER"
finish
