#!/usr/bin/env bash
# tests/integration/flows_sampled.sh - drops past the datapath's event rate
# limit are counted, not lost in silence: a pod sends 100,000 packets with a
# spoofed source (each one dropped); the drop flows plus the drops
# hubble-lite counts as sampled away (GET /v1/flows "sampled", the metric
# fibril_hubble_sampled_drops_total) plus events lost on the way make
# 100,000; a follower of the stream (-o json) is told with Hubble's
# lost_events lines ({"lost_events":{"source":"PERF_EVENT_RING_BUFFER",
# "num_events_lost":"N"},"node_name":...,"time":...}, checked against
# Hubble's field list) adding up to the same, a compact follower with
# Hubble's "EVENTS LOST: PERF_EVENT_RING_BUFFER CPU(0) N" lines; `fibril
# status` says it; `fibril observe` says it on stderr.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF)"
for so in ipam-cluster-pool endpoint datapath hubble-lite; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so.so is not built"
done
command -v jq >/dev/null || skip_or_fail "jq is not installed"

N=100000
NODE=fsmpn$$
PODNS=fsmpa$$
HOSTIF=lxsmpa
ADDR=10.204.0.10
sampled_cleanup() {
	local rc=$? ns p
	set +e
	[ -n "$OBS" ] && kill "$OBS" 2>/dev/null && wait "$OBS" 2>/dev/null
	[ -n "$OBS2" ] && kill "$OBS2" 2>/dev/null && wait "$OBS2" 2>/dev/null
	if [ -n "$AGENT_PID" ]; then kill -KILL "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=""; fi
	for ns in "$PODNS" "$NODE"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	(exit "$rc")
	cleanup
}
trap sampled_cleanup EXIT INT TERM

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in ipam-cluster-pool endpoint datapath hubble-lite; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done
ip netns add "$NODE"
ip -n "$NODE" link set lo up
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }

mapfile -t args < <(agent_args "$mods")
# the default event rate limit (1000 a second per CPU, bursts of 1000);
# the flows ring big enough that nothing is overwritten
nsenter --net="/run/netns/$NODE" "$AGENT" "${args[@]}" --set ipam-cluster-pool.node-cidr=10.204.0.0/24 \
	--set agent.node-name=smp-node --set hubble-lite.ring-size=200000 >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 20 test -S "$WORK/fibril.sock" || true
check "the agent starts with hubble-lite" test -S "$WORK/fibril.sock"

ip netns add "$PODNS"
ip -n "$NODE" link add "$HOSTIF" type veth peer name eth0 netns "$PODNS"
ip -n "$PODNS" link set lo up
ip -n "$PODNS" link set eth0 up
ip -n "$NODE" link set "$HOSTIF" up
ip -n "$PODNS" addr add "$ADDR/32" dev eth0
body=$(printf '{"container-id":"s%s","ifname":"eth0","netns":"/run/netns/%s","host-ifname":"%s","host-ifindex":%s,"mac":"%s","host-mac":"%s","ipv4":"%s","pod-namespace":"team","pod-name":"sender","labels":["k8s:app=sender"]}' \
	"$$" "$PODNS" "$HOSTIF" "$(ip netns exec "$NODE" cat "/sys/class/net/$HOSTIF/ifindex")" \
	"$(mac_of eth0 -n "$PODNS")" "$(mac_of "$HOSTIF" -n "$NODE")" "$ADDR")
check "pod sender created" test "$(api -o "$WORK/put.out" -w '%{http_code}' -X PUT --data-binary "$body" "http://x/v1/endpoint/container-id:s$$:eth0")" = 201

fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
# a follower of the stream: Hubble's JSON lines, the lost events among them
fib observe -f -o json --verdict DROPPED >"$WORK/follow.out" 2>"$WORK/follow.err" &
OBS=$!
# and one in the compact view
fib observe -f --verdict DROPPED >"$WORK/compact.out" 2>"$WORK/compact.err" &
OBS2=$!
following() { [ "$(api http://x/metrics | awk '$1 == "fibril_hubble_followers" {print $2}')" = 2 ]; }
check "the followers are in" wait_for 10 following

# N frames with a source address that is not the pod's: every one is dropped
cat >"$WORK/spoof.py" <<'EOF'
import socket, struct, sys
ifname, smac, dmac, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mac = lambda m: bytes.fromhex(m.replace(":", ""))
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
udp = struct.pack("!HHHH", 40000, 9, 16, 0) + b"spoofed!"
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton("10.204.0.99"), socket.inet_aton("10.204.0.1"))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
frame = mac(dmac) + mac(smac) + b"\x08\x00" + ip + udp
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((ifname, 0))
sent = 0
while sent < n:
    try:
        s.send(frame); sent += 1
    except BlockingIOError:
        pass
print(sent)
EOF
SENT=$(ip netns exec "$PODNS" python3 "$WORK/spoof.py" eth0 "$(mac_of eth0 -n "$PODNS")" "$(mac_of "$HOSTIF" -n "$NODE")" "$N")
check "the pod sent $N spoofed frames ($SENT)" test "$SENT" = "$N"

# the datapath counted them all as drops
dp_drops() { api http://x/v1/datapath 2>/dev/null | jq '[."packets-from-endpoints"["drop:spoofed-source-ip"]] | add // 0'; }
all_dropped() { [ "$(dp_drops)" = "$N" ]; }
check "the datapath dropped all $N ($(dp_drops))" wait_for 20 all_dropped

# flows + sampled + lost = N, once the counts have come (every 200 ms)
flows_json() { api "http://x/v1/flows?drop-reason=spoofed-source-ip&last=1"; }
total() { local f; f=$(flows_json); jq -r '"\(.seen // 0) \(.sampled // 0) \(.lost // 0)"' <<<"$f"; }
accounted() { set -- $(total); [ "$(($1 + $2 + $3))" = "$N" ]; }
wait_for 20 accounted || true
read -r SEEN SAMPLED LOST <<<"$(total)"
check "drop flows $SEEN + sampled $SAMPLED + lost $LOST = $N" test "$((SEEN + SAMPLED + LOST))" = "$N"
check "most were sampled away (rate limit 1000/s per CPU): $SAMPLED" test "$SAMPLED" -gt $((N / 2))
PROM=$(api http://x/metrics)
check "fibril_hubble_sampled_drops_total = $SAMPLED" \
	grep -q "^fibril_hubble_sampled_drops_total $SAMPLED\$" <<<"$PROM"

# the followers were told, as Hubble says it: -o json's lost_events lines are
# Hubble's GetFlowsResponse (rate-limited drops and a full ring are both
# PERF_EVENT_RING_BUFFER: lost between the datapath and the agent), the
# compact view's lines Hubble's "EVENTS LOST: SOURCE CPU(n) N"
told_sum() { jq -r 'select(.lost_events.source == "PERF_EVENT_RING_BUFFER") | .lost_events.num_events_lost' "$WORK/follow.out" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
told() { [ "$(told_sum)" = "$((SAMPLED + LOST))" ]; }
wait_for 10 told || true
TOLD=$(told_sum)
FOLLOWED=$(jq -r 'select(.flow.verdict == "DROPPED") | 1' "$WORK/follow.out" | wc -l)
check "the stream: $FOLLOWED drop flows + $TOLD told as lost_events PERF_EVENT_RING_BUFFER = $N" \
	test "$((FOLLOWED + TOLD))" = "$N"
check "the lost_events lines are Hubble's GetFlowsResponse (fields, enum, uint64 as a string)" \
	sh -c 'grep lost_events "$1" | /usr/bin/python3 "$2" "$3"' _ "$WORK/follow.out" \
	"$top_srcdir/tests/integration/hubble_fields_check.py" "$top_srcdir/tests/integration/hubble_flow_fields.txt"
check "  with node_name and time" /usr/bin/python3 -c 'import json, re, sys
ls = [json.loads(l) for l in open(sys.argv[1]) if "lost_events" in l]
sys.exit(0 if ls and all(isinstance(l.get("node_name"), str) and l["node_name"] and isinstance(l.get("time"), str) and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$", l["time"]) for l in ls) else 1)' "$WORK/follow.out"
compact_sum() { grep -E '^EVENTS LOST: PERF_EVENT_RING_BUFFER CPU\(0\) [0-9]+$' "$WORK/compact.out" 2>/dev/null | awk '{s += $NF} END {print s + 0}'; }
compact_told() { [ "$(compact_sum)" = "$((SAMPLED + LOST))" ]; }
check "the compact follower prints Hubble's EVENTS LOST lines on stdout ($(compact_sum))" wait_for 10 compact_told ||
	grep -m3 -i lost "$WORK/compact.out"
check "fibril observe -f says so on stderr" grep -q "over the datapath's event rate limit" "$WORK/follow.err"
check "fibril status says how many drops were sampled away" \
	grep -q "$SAMPLED drops sampled away" <<<"$(fib status 2>&1)"
check "fibril observe says so on stderr" \
	sh -c '"$@" observe --last 1 2>&1 >/dev/null | grep -q "^fibril: '"$SAMPLED"' drop(s) have no flow: over the datapath.s event rate limit"' _ "$CLI" --socket "$WORK/fibril.sock"

finish
