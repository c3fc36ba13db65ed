#!/usr/bin/env bash
# tests/security/ct_lru_flood.sh - the attack: conntrack is one table every
# pod (and the outside) fills. A pod that opens new flows as fast as it can,
# or a machine on the underlay that sends SYNs from ever new sources to a
# pod, would push the other pods' established flows out of it (an LRU evicts
# the least recently used); a flow whose entry is gone has its replies
# taken for new flows, which a one-way policy drops.
# The promise: what one endpoint, or the outside, opens cannot take another
# endpoint's state: every one of pod a's established connections (a has a
# deny-all ingress, so b's bytes reach a only as replies by conntrack)
# still carries b's bytes through a flood of 16 times the table's size from
# pod f, and through one from the underlay towards pod b.
# Setup: an agent (ipam, endpoint, datapath, policy; host-routing bpf,
# conntrack-max-tcp 1024, the smallest) in a node namespace with an
# underlay veth to an "outside" namespace, pods a, b and f through
# fibril-cni, a server on b:7000 that sends a byte on each connection twice
# a second (b speaks first: a sends nothing that could make a's state
# again), 32 connections a -> b:7000 held open.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/wait.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/policynode.sh"

CT_MAX=1024
FLOWS=32
policy_node_up
policy_node_outside ctf 10.250.78 10.244.34.0/24
policy_node_agent --set ipam-cluster-pool.node-cidr=10.244.34.0/24 --set datapath.conntrack-max-tcp=$CT_MAX

labelled_pods fctf a b f

# a server on b:7000 that sends a byte on every connection twice a second:
# b speaks first, so once a's conntrack state is gone nothing of a's
# (an ACK, a request) can make it again, and b's bytes meet a's deny-all
# ingress as new flows
ip netns exec "${NS[b]}" python3 -c '
import socket, threading, time
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 7000))
srv.listen(256)
def tick(c):
    try:
        while True:
            c.sendall(b"t")
            time.sleep(0.5) # sleep: the ticks pace
    except OSError:
        return
while True:
    c, _ = srv.accept()
    threading.Thread(target=tick, args=(c,), daemon=True).start()' >/dev/null 2>&1 &
PIDS+=($!)
disown $!
wait_listening "${NS[b]}" 7000 || fail "b listens on 7000"

# a deny-all ingress on a: its connections' replies pass by conntrack only
cat >"$WORK/deny.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "a-deny-all"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "a"}}, "ingress": [{}]}}
EOF2
out=$(fib policy import "$WORK/deny.json" 2>&1)
check "the deny-all ingress policy on a is imported" contains "$out" "Revision:"

# the holder in a: FLOWS connections to b:7000; on each line of its fifo
# it reads what is waiting on each, then writes how many connections bring
# a new byte from b within 3 s (a sends nothing itself)
mkfifo "$WORK/ask"
ip netns exec "${NS[a]}" python3 -c '
import os, select, socket, sys, time
conns = []
for i in range(int(sys.argv[2])):
    s = socket.create_connection((sys.argv[1], 7000), timeout=3)
    conns.append(s)
open(sys.argv[3] + ".ready", "w").write("%d\n" % len(conns))
for line in open(sys.argv[4]):
    for s in conns:
        s.setblocking(False)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
    fresh, t0 = set(), time.time()
    while len(fresh) < len(conns) and time.time() - t0 < 3:
        r, _, _ = select.select([s for s in conns if s not in fresh], [], [], 0.2)
        for s in r:
            try:
                if s.recv(4096):
                    fresh.add(s)
            except OSError:
                pass
    alive = len(fresh)
    with open(sys.argv[3] + ".tmp", "w") as f:
        f.write("%d\n" % alive)
    os.rename(sys.argv[3] + ".tmp", sys.argv[3])' "${ADDR[b]}" "$FLOWS" "$WORK/alive" "$WORK/ask" \
	>"$WORK/holder.log" 2>&1 &
PIDS+=($!)
disown $!
# (read-write: opening a fifo so never waits for its reader)
exec 7<>"$WORK/ask"
_ready() { [ "$(cat "$WORK/alive.ready" 2>/dev/null)" = "$FLOWS" ]; }
check "a holds $FLOWS connections to b:7000" wait_for 15 _ready
# alive : how many of a's connections still hear from b
alive() {
	rm -f "$WORK/alive"
	echo go >&7
	wait_for 120 test -s "$WORK/alive" || { echo 0; return; }
	cat "$WORK/alive"
}
n=$(alive)
check "before any flood all $FLOWS of a's connections hear from b ($n)" test "$n" = "$FLOWS"

# flood NETNS SRC-PREFIX DST COUNT : COUNT new TCP flows to DST:9 from
# NETNS: new source ports, and with SRC-PREFIX new sources too; each SYN
# sent twice (an LRU keeps an entry looked up after its insertion as used:
# a flood of single packets would mostly evict only itself); raw socket,
# header built here: as fast as Python sends
flood() {
	ip netns exec "$1" python3 -c '
import socket, struct, sys, time
prefix, dst, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
base = struct.unpack("!I", socket.inet_aton(prefix))[0] if prefix != "-" else 0
d = socket.inet_aton(dst)
pkts = []
for i in range(count):
    src = struct.pack("!I", base + 1 + (i >> 14)) if base else bytes(4)
    sport = 1024 + (i & 0x3fff)
    tcp = struct.pack("!HHIIBBHHH", sport, 9, i, 0, 5 << 4, 0x02, 1024, 0, 0)
    pkts.append(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, i & 0xffff, 0, 64, 6, 0, src, d) + tcp)
t0 = time.time()
for p in pkts:
    s.sendto(p, (dst, 0))
    s.sendto(p, (dst, 0))
print("%.0f" % (count / max(time.time() - t0, 1e-6)))' "$2" "$3" "$4"
}
# from pod f: three times the table in new flows towards the world
rate=$(flood "${NS[f]}" - 203.0.113.9 $((16 * CT_MAX)))
echo "pod f sent $((16 * CT_MAX)) new flows at $rate flows/s"
n=$(alive)
check "after pod f's flood of $((16 * CT_MAX)) new flows, $n of $FLOWS of a's connections hear from b (all must)" \
	test "$n" = "$FLOWS"
# from the underlay: SYNs to pod b from ever new sources
rate=$(flood "$OUT_NS" 198.18.0.0 "${ADDR[b]}" $((16 * CT_MAX)))
echo "the underlay sent $((16 * CT_MAX)) new flows to b at $rate flows/s"
n=$(alive)
check "after the underlay's flood of $((16 * CT_MAX)) new flows, $n of $FLOWS of a's connections hear from b (all must)" \
	test "$n" = "$FLOWS"
exec 7>&-
finish
