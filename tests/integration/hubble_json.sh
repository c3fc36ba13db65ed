#!/usr/bin/env bash
# tests/integration/hubble_json.sh - `fibril observe` as Hubble's users know
# it: an agent (ipam-cluster-pool, endpoint, datapath with trace events,
# hubble-lite) in a node namespace named by [agent] node-name only, two
# pods, UDP and TCP between them and a spoofed packet. Flows carry the
# configured node name (not the host name); `-o json` lines are Hubble's
# GetFlowsResponse with only Hubble's field names and enum values
# (tests/integration/hubble_flow_fields.txt) and jq scripts written for
# `hubble observe -o json` run unchanged; compact prints the security
# identity; ICMP flows carry their type and code, ARP flows their
# addresses; each Hubble flag (--first, --node-name, --tcp-flags,
# --traffic-direction, --ip-version, --drop-reason-desc, --print-node-name,
# --time-format, -j, --input-file, --not, the verdict and type value sets) does what
# Hubble's does; a filter flag given twice ORs its values (the CLI and
# the API's repeated query keys); --drop-reason refuses a name nobody knows.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF)"
for so in ipam-cluster-pool endpoint datapath hubble-lite; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so.so is not built"
done
command -v jq >/dev/null || skip_or_fail "jq is not installed"

NODE=fhjn$$
PODNS=(fhja$$ fhjb$$)
HOSTIF=(lxhja lxhjb)
ADDR4=(10.203.0.10 10.203.0.11)
POD=(web client)
LABELS=('["k8s:app=web"]' '["k8s:app=client"]')
hj_cleanup() {
	local rc=$? ns p
	set +e
	if [ -n "$AGENT_PID" ]; then kill -KILL "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=""; fi
	for ns in "${PODNS[@]}" "$NODE"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	(exit "$rc")
	cleanup
}
trap hj_cleanup EXIT INT TERM

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in ipam-cluster-pool endpoint datapath hubble-lite; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done

ip netns add "$NODE"
ip -n "$NODE" link set lo up
inpod() { local i=$1; shift; ip netns exec "${PODNS[$i]}" "$@"; }
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }

mapfile -t args < <(agent_args "$mods")
# the node's name is the agent's, not hubble-lite's own key, not the host name
nsenter --net="/run/netns/$NODE" "$AGENT" "${args[@]}" --set ipam-cluster-pool.node-cidr=10.203.0.0/24 \
	--set datapath.trace-events=true --set agent.node-name=hj-node >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 20 test -S "$WORK/fibril.sock" || true
check "the agent starts with hubble-lite" test -S "$WORK/fibril.sock"
GW4=10.203.0.1

make_pod() {
	local i=$1 p=${PODNS[$1]} h=${HOSTIF[$1]}
	ip netns add "$p"
	ip -n "$NODE" link add "$h" type veth peer name eth0 netns "$p"
	ip -n "$p" link set lo up
	ip -n "$p" link set eth0 up
	ip -n "$NODE" link set "$h" up
	ip -n "$p" addr add "${ADDR4[$i]}/32" dev eth0
	ip -n "$p" route add "$GW4" dev eth0 scope link
	ip -n "$p" route add default via "$GW4"
	local body
	body=$(printf '{"container-id":"c%s%s","ifname":"eth0","netns":"/run/netns/%s","host-ifname":"%s","host-ifindex":%s,"mac":"%s","host-mac":"%s","ipv4":"%s","pod-namespace":"team","pod-name":"%s","labels":%s}' \
		"$i" "$$" "$p" "$h" "$(ip netns exec "$NODE" cat "/sys/class/net/$h/ifindex")" \
		"$(mac_of eth0 -n "$p")" "$(mac_of "$h" -n "$NODE")" "${ADDR4[$i]}" "${POD[$i]}" "${LABELS[$i]}")
	api -o "$WORK/put.out" -w '%{http_code}' -X PUT --data-binary "$body" \
		"http://x/v1/endpoint/container-id:c$i$$:eth0"
}
check "pod web created" test "$(make_pod 0)" = 201
check "pod client created" test "$(make_pod 1)" = 201

# UDP client -> web:7777, a TCP connection client -> web:8080, a spoofed UDP packet
inpod 0 python3 -c '
import socket, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 7777))
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(("0.0.0.0", 8080)); t.listen(1)
t.settimeout(8); c, _ = t.accept(); c.recv(10); c.close()' &
LISTENER=$!
listening() { inpod 0 ss -Hl"$1"n "sport = :$2" | grep -q .; }
wait_for 10 listening u 7777 || fail "pod web listens on UDP 7777"
wait_for 10 listening t 8080 || fail "pod web listens on TCP 8080"
inpod 1 python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 40123))
[s.sendto(b"x" * 32, ("10.203.0.10", 7777)) for _ in range(3)]
t = socket.create_connection(("10.203.0.10", 8080), timeout=5); t.send(b"hello"); t.close()'
wait "$LISTENER" 2>/dev/null || true
pinged() { inpod 1 ping -c 1 -W 1 10.203.0.10 >/dev/null; }
wait_for 10 pinged || fail "client pings web"
cat >"$WORK/spoof.py" <<'EOF'
import socket, struct, sys
ifname, smac, dmac, sip, dip = sys.argv[1:6]
mac = lambda m: bytes.fromhex(m.replace(":", ""))
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
payload = b"spoofed!"
udp = struct.pack("!HHHH", 40000, 9, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(sip), socket.inet_aton(dip))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((ifname, 0))
s.send(mac(dmac) + mac(smac) + b"\x08\x00" + ip + udp)
EOF
inpod 1 python3 "$WORK/spoof.py" eth0 "$(mac_of eth0 -n "${PODNS[1]}")" "$(mac_of "${HOSTIF[1]}" -n "$NODE")" \
	10.203.0.99 10.203.0.10

fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
nlines() { grep -c . || true; }
have_drop() { [ "$(fib observe --verdict DROPPED -o flat | nlines)" -ge 1 ]; }
have_tcp() { [ "$(fib observe --protocol tcp -o flat | nlines)" -ge 3 ]; }
wait_for 10 have_drop || true
wait_for 10 have_tcp || true
# the pods' IPv6 link-local chatter goes on: every count below is of the
# flows up to now (--until), a set that no longer changes
T=$(($(date +%s) + 1))
past_t() { [ "$(date +%s)" -gt "$T" ]; }
wait_for 5 past_t
obs() { fib observe --until "$T" "$@"; }

# ---- the node's name ----
check "GET /v1/flows: node_name is [agent] node-name" \
	test "$(api http://x/v1/flows | jq -r '.node_name, ([.flows[].node_name] | unique | join(","))' | tr '\n' ' ')" = "hj-node hj-node "

# ---- -o json: Hubble's lines ----
obs -o json >"$WORK/hubble.json"
check "-o json: $(nlines <"$WORK/hubble.json") lines, each Hubble's field names and enum values only" \
	sh -c '[ "$(python3 "$1" "$2" <"$3")" -ge 6 ]' _ "$top_srcdir/tests/integration/hubble_fields_check.py" \
	"$top_srcdir/tests/integration/hubble_flow_fields.txt" "$WORK/hubble.json"
check "-o json: each line is {flow, node_name, time} with node_name hj-node" \
	test "$(jq -c '[keys, .node_name, .flow.node_name, (.time == .flow.time)]' "$WORK/hubble.json" | sort -u)" = '[["flow","node_name","time"],"hj-node","hj-node",true]'
# jq as an operator writes it for hubble observe -o json
check "jq: the drop's reason is Hubble's INVALID_SOURCE_IP" \
	test "$(jq -r 'select(.flow.verdict == "DROPPED") | .flow.drop_reason_desc' "$WORK/hubble.json")" = INVALID_SOURCE_IP
check "jq: UDP to 7777 came from pod client (l4.UDP nested)" \
	test "$(jq -r '.flow | select(.l4.UDP.destination_port == 7777) | .source.pod_name' "$WORK/hubble.json" | sort -u)" = client
check "jq: a SYN (l4.TCP.flags.SYN) to 8080" \
	test "$(jq -r 'select(.flow.l4.TCP.flags.SYN == true and .flow.l4.TCP.destination_port == 8080) | .flow.destination.pod_name' "$WORK/hubble.json" | sort -u)" = web
check "jq: Type L3_L4, event_type.type drop 1 / trace 4, Summary, unique uuids" \
	test "$(jq -r '[.flow.Type, (.flow.event_type.type | tostring), (.flow.Summary | length > 0)] | join(" ")' "$WORK/hubble.json" | sort -u | tr '\n' ,)" = "L3_L4 1 true,L3_L4 4 true," -a \
	"$(jq -r .flow.uuid "$WORK/hubble.json" | grep -Ec '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$')" = "$(nlines <"$WORK/hubble.json")" -a \
	"$(jq -r .flow.uuid "$WORK/hubble.json" | sort -u | nlines)" = "$(nlines <"$WORK/hubble.json")"
check "jq: client's UDP traces: trace_observation_point TO_ENDPOINT, traffic_direction EGRESS" \
	test "$(jq -r 'select(.flow.event_type.type == 4 and .flow.source.pod_name == "client" and .flow.l4.UDP) | .flow.trace_observation_point + " " + .flow.traffic_direction' "$WORK/hubble.json" | sort -u)" = "TO_ENDPOINT EGRESS"
check "jq: client's pings are l4.ICMPv4.type 8, Summary ICMPv4 EchoRequest; web's answers EchoReply (type 0, left out as protojson does)" \
	test "$(jq -r 'select(.flow.l4.ICMPv4 and .flow.source.pod_name == "client") | "\(.flow.l4.ICMPv4.type) \(.flow.Summary)"' "$WORK/hubble.json" | sort -u)" = "8 ICMPv4 EchoRequest" -a \
	"$(jq -r 'select(.flow.l4.ICMPv4 and .flow.source.pod_name == "web") | "\(.flow.l4.ICMPv4.type) \(.flow.Summary)"' "$WORK/hubble.json" | sort -u)" = "null ICMPv4 EchoReply"
check "compact: the ICMP type by Hubble's name (ICMPv4 EchoRequest)" \
	test "$(obs --protocol icmp --from-pod team/client | grep -c 'ICMPv4 EchoRequest')" -ge 1
CLIENT_ID=$(obs -o flat --from-port 40123 --last 1 | jq -r .source.identity)
check "ARP: client's who-has of its gateway names both ends, not ? -> ?" \
	grep -Eq "team/client \(ID:$CLIENT_ID\) <> 10\.203\.0\.1 \([a-z]+\) [a-z-]+ FORWARDED \(ARP\)" <<<"$(obs --ip-version none)"
check "ARP in Hubble's JSON: source pod_name client, Summary ARP 10.203.0.11 -> 10.203.0.1" \
	test "$(jq -r 'select(.flow.Summary == "ARP 10.203.0.11 -> 10.203.0.1") | .flow.source.pod_name' "$WORK/hubble.json" | sort -u)" = client
WEB_ID=$(obs -o flat --to-port 7777 --last 1 | jq -r .destination.identity)
check "jq: source.identity is the security identity (web's $WEB_ID), not the endpoint ID" \
	test "$(jq -r 'select(.flow.destination.pod_name == "web") | .flow.destination.identity' "$WORK/hubble.json" | sort -u)" = "$WEB_ID"
check "-j is -o json (same flows)" test "$(obs -j | jq -r .flow.uuid | sort)" = "$(jq -r .flow.uuid "$WORK/hubble.json" | sort)"
check "-o jsonpb is -o json" test "$(obs -o jsonpb | jq -r .flow.uuid | sort)" = "$(jq -r .flow.uuid "$WORK/hubble.json" | sort)"
check "-o flat keeps fibril's own flat flows" \
	test "$(obs -o flat --verdict DROPPED | jq -r '.drop_reason_desc + " " + .node_name')" = "spoofed-source-ip hj-node"

# ---- compact: the security identity, as Hubble ----
OUT=$(obs --to-port 7777 --last 1)
check "compact: (ID:$WEB_ID) is web's security identity ($OUT)" grep -q -- "<> team/web:7777 (ID:$WEB_ID) " <<<"$OUT"

# ---- the drop reason: Hubble's names, unknown ones refused ----
check "--drop-reason foo: refused, naming it" \
	sh -c '! "$@" observe --drop-reason foo 2>"'"$WORK"'/err" && grep -q "drop-reason.*foo" "'"$WORK"'/err"' _ "$CLI" --socket "$WORK/fibril.sock"
check "--drop-reason POLICY_DENIED (Hubble's name) is taken: no such drop here" \
	test "$(obs --drop-reason POLICY_DENIED | nlines)" = 0
check "--drop-reason-desc INVALID_SOURCE_IP: the spoofed packet" \
	test "$(obs --drop-reason-desc INVALID_SOURCE_IP | nlines)" = 1
check "--drop-reason spoofed-source-ip (fibril's name) still works" \
	test "$(obs --drop-reason spoofed-source-ip | nlines)" = 1

# ---- Hubble's flags ----
ALLN=$(nlines <"$WORK/hubble.json")
check "--verdict AUDIT (Hubble's, never fibril's): accepted, no flow" test "$(obs --verdict AUDIT | nlines)" = 0
check "--verdict MAYBE: refused" sh -c '! "$@" observe --verdict MAYBE 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"
check "-t l7: accepted, no flow" test "$(obs -t l7 | nlines)" = 0
check "-t trace:to-endpoint: the traces delivered to pods" \
	test "$(obs -t trace:to-endpoint -j | jq -r .flow.trace_observation_point | sort -u)" = TO_ENDPOINT
check "-t trace:to-nowhere: refused" sh -c '! "$@" observe -t trace:to-nowhere 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"
check "--ip-version 6 / 4: the flows of each IP version (the pods' link-local chatter is IPv6)" \
	test "$(obs --ip-version 6 | nlines)" = "$(jq -r 'select(.flow.IP.ipVersion == "IPv6") | 1' "$WORK/hubble.json" | nlines)" -a \
	"$(obs --ip-version 4 | nlines)" = "$(jq -r 'select(.flow.IP.ipVersion == "IPv4") | 1' "$WORK/hubble.json" | nlines)" -a \
	"$(obs --ip-version 4 -j | jq -r .flow.IP.ipVersion | sort -u)" = IPv4
check "--tcp-flags SYN: only flows with SYN, at least one" \
	test "$(obs --tcp-flags SYN -j | jq -r '.flow.l4.TCP.flags.SYN' | sort -u)" = true
check "--traffic-direction ingress: none from client's sends" \
	test "$(obs --traffic-direction ingress --from-pod team/client --protocol udp | nlines)" = 0 -a \
	"$(obs --traffic-direction egress --from-pod team/client --protocol udp | nlines)" -ge 3
check "--first 2: the two oldest" \
	test "$(obs --first 2 -j | jq -r .flow.uuid)" = "$(jq -r .flow.uuid "$WORK/hubble.json" | head -2)"
check "--all: every flow" test "$(obs --all | nlines)" = "$ALLN"
check "--all with --last: refused" sh -c '! "$@" observe --all --last 2 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"
FROM_CLIENT=$(jq -r 'select(.flow.source.pod_name == "client") | 1' "$WORK/hubble.json" | nlines)
check "--not --from-pod team/client: every flow but client's $FROM_CLIENT" \
	test "$(obs --not --from-pod team/client -j | jq -r 'select(.flow.source.pod_name == "client") | 1' | nlines)" = 0 -a \
	"$(obs --not --from-pod team/client | nlines)" = "$((ALLN - FROM_CLIENT))"
check "--not --from-pod team/client --not --protocol udp: only client's UDP left out" \
	test "$(obs --not --from-pod team/client --not --protocol udp | nlines)" = \
	"$((ALLN - $(jq -r 'select(.flow.source.pod_name == "client" and .flow.l4.UDP) | 1' "$WORK/hubble.json" | nlines)))"
check "a trailing --not: refused" sh -c '! "$@" observe --from-pod team/client --not 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"
check "--not --last 1: refused" sh -c '! "$@" observe --not --last 1 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"
check "--node-name 'hj-*': all; --node-name other: none" \
	test "$(obs --node-name 'hj-*' | nlines)" = "$ALLN" -a "$(obs --node-name other | nlines)" = 0
check "--print-node-name: compact lines say [hj-node]" \
	test "$(obs --print-node-name | grep -c ' \[hj-node\]: ')" = "$ALLN"
check "--time-format StampMilli: Hubble's default layout" \
	test "$(obs --time-format StampMilli | grep -Ec '^[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}: ')" = "$ALLN"
check "--time-format Kitchen: refused" sh -c '! "$@" observe --time-format Kitchen 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"
check "-o dict: Hubble's dict blocks" \
	test "$(obs -o dict | grep -c '^  TIMESTAMP: ')" = "$ALLN" -a "$(obs -o dict | grep -c '^------------$')" = "$((ALLN - 1))"
check "--input-file: -o json replays the file unchanged" \
	test "$(fib observe --input-file "$WORK/hubble.json" -o json | jq -c . | sort)" = "$(jq -c . "$WORK/hubble.json" | sort)"
check "--input-file - (stdin) as compact: every flow, the drop with Hubble's reason" \
	test "$(fib observe --input-file - <"$WORK/hubble.json" | nlines)" = "$ALLN" -a \
	"$(fib observe --input-file - <"$WORK/hubble.json" | grep -c 'Invalid source ip DROPPED (UDP)')" = 1
check "--input-file with a server filter: refused" \
	sh -c '! "$@" observe --input-file /dev/null --port 80 2>/dev/null' _ "$CLI" --socket "$WORK/fibril.sock"

# ---- a flag given twice: its values are ORed, as hubble observe does ----
jcount() { jq -r "select($1) | 1" "$WORK/hubble.json" | nlines; }
NDROP=$(jcount '.flow.verdict == "DROPPED"')
NFWD=$(jcount '.flow.verdict == "FORWARDED"')
check "--verdict DROPPED --verdict FORWARDED: $NDROP + $NFWD flows, both verdicts" \
	test "$NDROP" -ge 1 -a "$NFWD" -ge 1 -a \
	"$(obs --verdict DROPPED --verdict FORWARDED | nlines)" = "$((NDROP + NFWD))" -a \
	"$(obs --verdict DROPPED --verdict FORWARDED -j | jq -r .flow.verdict | sort -u | tr '\n' ,)" = "DROPPED,FORWARDED,"
check "GET /v1/flows?verdict=DROPPED&verdict=FORWARDED: the same (the API itself ORs)" \
	test "$(api "http://x/v1/flows?until=$T&verdict=DROPPED&verdict=FORWARDED" | jq '.flows | length')" = "$((NDROP + NFWD))"
NCW=$(jcount '.flow.source.pod_name == "client" or .flow.source.pod_name == "web"')
check "--from-pod team/client --from-pod team/web: the $NCW flows from either" \
	test "$(obs --from-pod team/client --from-pod team/web | nlines)" = "$NCW" -a \
	"$(obs --from-pod team/client --from-pod team/web -j | jq -r .flow.source.pod_name | sort -u | tr '\n' ,)" = "client,web,"
NTU=$(jcount '.flow.l4.TCP or .flow.l4.UDP')
check "--protocol tcp --protocol udp: the $NTU TCP and UDP flows" \
	test "$(obs --protocol tcp --protocol udp | nlines)" = "$NTU" -a \
	"$(obs --protocol tcp --protocol udp -j | jq -r '.flow.l4 | keys[0]' | sort -u | tr '\n' ,)" = "TCP,UDP,"
NTE=$(jcount '.flow.event_type.type == 1 or .flow.trace_observation_point == "TO_ENDPOINT"')
check "-t drop -t trace:to-endpoint: the $NTE drops and deliveries" \
	test "$(obs -t drop -t trace:to-endpoint | nlines)" = "$NTE" -a "$NTE" -gt "$NDROP"
NIP=$(jcount '.flow.IP.ipVersion == "IPv4" or .flow.IP.ipVersion == "IPv6"')
check "--ip-version 4 --ip-version 6: the $NIP IP flows (not ARP)" \
	test "$(obs --ip-version 4 --ip-version 6 | nlines)" = "$NIP"
NDIR=$(jcount '.flow.traffic_direction == "INGRESS" or .flow.traffic_direction == "EGRESS"')
check "--traffic-direction ingress --traffic-direction egress: $NDIR flows" \
	test "$(obs --traffic-direction ingress --traffic-direction egress | nlines)" = "$NDIR"
check "--drop-reason-desc INVALID_SOURCE_IP --drop-reason-desc POLICY_DENIED: the $NDROP drops" \
	test "$(obs --drop-reason-desc POLICY_DENIED --drop-reason-desc INVALID_SOURCE_IP | nlines)" = "$NDROP"
check "--not --verdict DROPPED --not --verdict FORWARDED: every flow left out" \
	test "$(obs --not --verdict DROPPED --not --verdict FORWARDED | nlines)" = "$((ALLN - NDROP - NFWD))"
check "--verdict MAYBE as a second value: refused, naming it" \
	sh -c '! "$@" observe --verdict DROPPED --verdict MAYBE 2>"'"$WORK"'/err2" && grep -q "verdict.*MAYBE" "'"$WORK"'/err2"' _ "$CLI" --socket "$WORK/fibril.sock"

finish
