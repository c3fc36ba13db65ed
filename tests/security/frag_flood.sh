#!/usr/bin/env bash
# tests/security/frag_flood.sh - the attack: dp_frags (the ports of a
# fragmented datagram, recorded by its first fragment for the later ones,
# which carry no L4 header) was one LRU every pod filled. A pod that sends
# first fragments of ever new datagrams pushes the other pods' entries out:
# their later fragments then meet drop:fragment-without-first, and large
# UDP (DNS over EDNS, NFS, video) between other pods breaks.
# The promise: what one pod sends can take only its own fragment state
# (dp_frags: DP_FRAGS_SLOTS slots per pod address and protocol, lib/frag.h):
# a pod's fragmented UDP to another pod arrives whole while a third pod
# floods first fragments, even when the flood comes between the first
# fragment and the last, and the flooder holds at most 64 entries. The
# same from outside (dp_frags_out, what the node, the underlay or another
# node sends, was one LRU the whole outside shared): one outside source
# address flooding first fragments to pod b between another's first and
# last fragment holds at most 64 entries, and that other source's datagram
# still reaches b whole through b's policy (which allows only its port:
# a later fragment without its ports would be dropped).
# Setup: an agent (ipam, endpoint, datapath, policy; host-routing bpf) in a
# node namespace, pods a, b and f through fibril-cni, a UDP receiver on
# b:7001 logging what arrives; a's datagrams cut by hand (Debian's scapy).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/wait.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/policynode.sh"

[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import scapy' 2>/dev/null ||
	skip_or_fail "Debian's python3-scapy is not installed"
policy_node_up
policy_node_agent --set ipam-cluster-pool.node-cidr=10.244.37.0/24
labelled_pods ffrg a b f

RECV=$WORK/b.recv
: >"$RECV"
ip netns exec "${NS[b]}" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 7001))
with open(sys.argv[1], "a") as f:
    while True:
        data, peer = s.recvfrom(65535)
        f.write("%s %d\n" % (data[:12].decode(errors="replace"), len(data)))
        f.flush()' "$RECV" >/dev/null 2>&1 &
PIDS+=($!)
disown $!
_udp_listening() { ip netns exec "${NS[b]}" ss -Hlun "sport = :7001" | grep -q .; }
wait_for 10 _udp_listening || fail "b's UDP receiver listens"

# a's fragmented datagram MARK: 2400 bytes of UDP payload cut into two
# fragments; the first sent, then FLOOD (a command run between them), then
# the last; from pod a, or from SPLIT_NS with source SPLIT_SRC
mkfifo "$WORK/between"
SPLIT_NS=${NS[a]} SPLIT_SRC=${ADDR[a]}
split_send() {
	local mark=$1
	shift
	ip netns exec "$SPLIT_NS" /usr/bin/python3 -c '
import errno, sys, time
from scapy.all import IP, UDP, Raw, fragment, send, conf
conf.verb = 0
src, dst, mark, fifo = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
pkt = IP(src=src, dst=dst, id=int(mark[-4:]) + 1000) / UDP(sport=40001, dport=7001) / Raw((mark.ljust(12, "-") * 200).encode())
frags = fragment(pkt, fragsize=1480)
send(frags[0])
open(fifo + ".sent", "w").close()
open(fifo).read()          # waits until the flood is over
for f in frags[1:]:
    for attempt in range(100):  # a flood just sent may leave the queue full (ENOBUFS)
        try:
            send(f)
            break
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            time.sleep(0.05)  # sleep: the queue drains
' "$SPLIT_SRC" "${ADDR[b]}" "$mark" "$WORK/between" &
	local sender=$!
	wait_for 20 test -e "$WORK/between.sent" || fail "a's first fragment of $mark is sent"
	rm -f "$WORK/between.sent"
	"$@"
	echo done >"$WORK/between"
	wait "$sender"
}
arrived() { grep -q "^$1-* 2400$" "$RECV"; }
nothing() { :; }

# the flood: COUNT first fragments (more-fragments set, offset 0) of new
# datagrams (new IP IDs) from pod f, to an outside address, one flow's ports
# (or from FLOOD_NS with source FLOOD_SRC to FLOOD_DST)
FLOOD_NS=${NS[f]} FLOOD_SRC=${ADDR[f]} FLOOD_DST=203.0.113.9
flood() {
	ip netns exec "$FLOOD_NS" python3 -c '
import socket, struct, sys, time
count = int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
src, d = socket.inet_aton(sys.argv[1]), socket.inet_aton(sys.argv[3])
udp = struct.pack("!HHHH", 40002, 9, 8 + 1472, 0) + bytes(16)
t0 = time.time()
for i in range(count):
    s.sendto(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xffff, 0x2000, 64, 17, 0, src, d) + udp, (sys.argv[3], 0))
print("%.0f" % (count / max(time.time() - t0, 1e-6)))' "$FLOOD_SRC" "$1" "$FLOOD_DST" >"$WORK/flood.rate"
}
FLOOD=32768 # four times dp_frags' old size (8192), and ids enough to be new

# flood_case WHO FLOODER MAP MARK MARK2 : WHO's datagram alone (MARK), then
# with FLOODER's flood between its first and last fragment (MARK2); FLOODER
# (source FLOOD_SRC) holds at most 64 entries of MAP
flood_case() {
	local who=$1 flooder=$2 map=$3 held
	split_send "$4" nothing
	check "without a flood, $who's fragmented datagram reaches b whole" wait_for 10 arrived "$4"
	split_send "$5" flood "$FLOOD"
	echo "$flooder ($FLOOD_SRC) sent $FLOOD first fragments at $(cat "$WORK/flood.rate") /s between $who's first and last fragment"
	check "with $flooder's flood of $FLOOD first fragments between them, $who's datagram still reaches b whole" \
		wait_for 10 arrived "$5"
	held=$(fib map dump "$map" | grep -c " $FLOOD_SRC " || true)
	check "$flooder holds at most 64 entries of $map ($held)" test "$held" -le 64
}
d0=$(fib map dump dp_frags | wc -l)
flood_case "pod a" "pod f" dp_frags mark0001 mark0002
split_send mark0003 nothing
check "and after it, a's next datagram too" wait_for 10 arrived mark0003

# from outside: the node's namespace sends as two outside addresses (a
# raw socket chooses its source); b admits UDP 7001 only
cat >"$WORK/b-7001.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "b-udp-7001"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "b"}},
          "ingress": [{"fromEntities": ["all"],
                       "toPorts": [{"ports": [{"port": "7001", "protocol": "UDP"}]}]}]}}
EOF2
out=$(fib policy import "$WORK/b-7001.json" 2>&1)
check "b's policy (UDP 7001 only) is imported" contains "$out" "Revision:"
SPLIT_NS=$NODE_NS SPLIT_SRC=198.51.100.8
FLOOD_NS=$NODE_NS FLOOD_SRC=198.51.100.9 FLOOD_DST=${ADDR[b]}
flood_case "an outside source ($SPLIT_SRC)" "another outside source" dp_frags_out mark0004 mark0005
check "the agent still serves ($d0 entries before)" agent_healthy
finish
