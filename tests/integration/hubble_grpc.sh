#!/usr/bin/env bash
# tests/integration/hubble_grpc.sh - Hubble's Observer gRPC API served by
# hubble-lite, read by a client generated at test time from the project's
# .proto by Debian's grpc_tools and run on python3-grpcio
# (hubble_grpc_client.py), never by the server's own encoder. First the
# .proto is checked field by field against Hubble's names and numbers
# (hubble_grpc_proto.py, hubble_proto_reference.txt). Then an agent in a
# node namespace (ipam-cluster-pool, endpoint, datapath with trace events,
# hubble-lite) with two pods, UDP from client to web and a spoofed packet:
# on the unix socket (mode 0660) GetFlows answers the flows (number,
# first, filters by verdict, ip, pod, label, port, blacklist), follows new
# ones, tells a slow follower the flows it lost (LostEvent,
# OBSERVER_EVENTS_QUEUE), refuses bad and unsupported filters naming them; ServerStatus's
# numbers are the ring's; GetNodes names this node. On the TLS listener a
# client without a certificate, or with one from another CA, is refused
# and one with a good certificate is served; an agent asked for the TCP
# listener without the TLS settings refuses to start, saying why.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF)"
for so in ipam-cluster-pool endpoint datapath hubble-lite; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so.so is not built"
done
/usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null ||
	skip_or_fail "python3-grpcio and python3-grpc-tools are not installed (scripts/deps.sh)"

NODE=fhgrpcn$$
PODNS=(fhgrpca$$ fhgrpcb$$)
HOSTIF=(lxga lxgb)
ADDR4=(10.203.0.10 10.203.0.11)
POD=(web client)
LABELS=('["k8s:app=web"]' '["k8s:app=client"]')
hg_cleanup() {
	local rc=$? ns p
	set +e
	if [ -n "$AGENT_PID" ]; then kill -KILL "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=""; fi
	[ -n "${FOLLOW_PID:-}" ] && kill "$FOLLOW_PID" 2>/dev/null
	for ns in "${PODNS[@]}" "$NODE"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	(exit "$rc")
	cleanup
}
trap hg_cleanup EXIT INT TERM

export HUBBLE_PROTO_DIR="$top_srcdir/modules/hubble-lite/proto"
CLIENT="/usr/bin/python3 $top_srcdir/tests/integration/hubble_grpc_client.py"
OUT=$(/usr/bin/python3 "$top_srcdir/tests/integration/hubble_grpc_proto.py" "$HUBBLE_PROTO_DIR" \
	"$top_srcdir/tests/integration/hubble_proto_reference.txt" "$WORK" 2>&1) || true
check "the .proto has Hubble's names, numbers and types, field by field ($(tail -1 <<<"$OUT"))" \
	grep -q ', 0 differ from' <<<"$OUT"
grep '^FAIL' <<<"$OUT" || true

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in ipam-cluster-pool endpoint datapath hubble-lite; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done

# TLS material: a CA, the server's certificate (127.0.0.1), a client's,
# and a client's from another CA
pki=$WORK/pki
mkdir -p "$pki"
mkcert() { # NAME CA-NAME|"" SUBJECT-ALT-NAME
	local n=$1 ca=$2 san=$3
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$n" \
		-keyout "$pki/$n.key" -out "$pki/$n.csr" 2>/dev/null
	if [ -z "$ca" ]; then
		openssl x509 -req -in "$pki/$n.csr" -signkey "$pki/$n.key" -days 2 -out "$pki/$n.crt" \
			-extfile <(printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n') 2>/dev/null
	else
		openssl x509 -req -in "$pki/$n.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
			-days 2 -out "$pki/$n.crt" -extfile <(printf 'subjectAltName=%s\n' "$san") 2>/dev/null
	fi
}
mkcert ca "" ""
mkcert other-ca "" ""
mkcert server ca IP:127.0.0.1
mkcert client ca DNS:client
mkcert intruder other-ca DNS:intruder

# ---- an agent asked for the TCP listener without TLS refuses to start ----
mapfile -t args < <(agent_args "$mods")
RC=0
OUT=$(timeout 60 "$AGENT" "${args[@]}" --set agent.modules=hubble-lite --set hubble-lite.grpc-socket=off \
	--set hubble-lite.grpc-listen=127.0.0.1:50061 --set "hubble-lite.grpc-tls-cert=$pki/server.crt" \
	--set "hubble-lite.grpc-tls-key=$pki/server.key" 2>&1) || RC=$?
check "grpc-listen without grpc-tls-client-ca: the agent does not start, naming the key (exit $RC)" \
	test "$RC" != 0 -a "$RC" != 124 -a "$(grep -c 'grpc-listen needs .*missing: grpc-tls-client-ca' <<<"$OUT")" -ge 1
[ "$RC" = 0 ] || [ "$RC" = 124 ] && echo "$OUT" | tail -5

# ---- the agent with both listeners ----
ip netns add "$NODE"
ip -n "$NODE" link set lo up
nsenter --net="/run/netns/$NODE" "$AGENT" "${args[@]}" --set ipam-cluster-pool.node-cidr=10.203.0.0/24 \
	--set datapath.trace-events=true --set hubble-lite.node-name=node-g --set hubble-lite.ring-size=256 \
	--set hubble-lite.grpc-stream-queue=65536 \
	--set "hubble-lite.grpc-socket=$WORK/hubble.sock" --set hubble-lite.grpc-listen=127.0.0.1:50051 \
	--set "hubble-lite.grpc-tls-cert=$pki/server.crt" --set "hubble-lite.grpc-tls-key=$pki/server.key" \
	--set "hubble-lite.grpc-tls-client-ca=$pki/ca.crt" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 60 test -S "$WORK/fibril.sock" || true
check "the agent starts with hubble-lite's gRPC listeners" test -S "$WORK/hubble.sock"
[ -S "$WORK/hubble.sock" ] || { tail -20 "$WORK/agent.log"; finish; exit 1; }
check "the gRPC unix socket is mode 0660" test "$(stat -c %a "$WORK/hubble.sock")" = 660
GW4=10.203.0.1
inpod() { local i=$1; shift; ip netns exec "${PODNS[$i]}" "$@"; }
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }
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
# udp_send PORT N : N datagrams from client:40123 to web:PORT
udp_send() {
	inpod 1 python3 -c 'import socket, sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",40123)); [s.sendto(b"x"*32,("10.203.0.10",int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]' "$@"
}
udp_send 7777 3
cat >"$WORK/spoof.py" <<'PY'
from scapy.all import Ether, IP, UDP, sendp
import sys
ifname, smac, dmac = sys.argv[1:4]
sendp(Ether(src=smac, dst=dmac) / IP(src="10.203.0.99", dst="10.203.0.10") / UDP(sport=40000, dport=9) / b"spoofed!",
      iface=ifname, verbose=False)
PY
inpod 1 /usr/bin/python3 "$WORK/spoof.py" eth0 "$(mac_of eth0 -n "${PODNS[1]}")" "$(mac_of "${HOSTIF[1]}" -n "$NODE")"

U="unix://$WORK/hubble.sock"
grpc() { $CLIENT "$U" "$@"; }
jl() { /usr/bin/python3 -c 'import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(eval(sys.argv[1]))' "$1"; }
n_flows() { grpc flows "$@" | jl 'len([r for r in rows if "flow" in r])'; }
drops_in() { [ "$(n_flows --whitelist '[{"verdict":["DROPPED"]}]')" -ge 1 ]; }
udp_in() { [ "$(n_flows --whitelist '[{"destination_port":["7777"]}]')" -ge 3 ]; }
wait_for 15 udp_in || true
wait_for 15 drops_in || true

ALL=$(grpc flows)
# shown in the log: one UDP flow and the drop, as the client read them
jl 'chr(10).join("  GetFlows: " + json.dumps(r) for r in ([x for x in rows if "UDP" in x["flow"].get("l4", {})][:1] + [x for x in rows if x["flow"]["verdict"] == "DROPPED"][:1]))' <<<"$ALL"
check "GetFlows: the UDP packets are FORWARDED flows team/client -> team/web with ports, labels, identity, node" \
	test "$(jl 'len([r for r in rows if r["flow"]["verdict"] == "FORWARDED" and r["flow"]["source"].get("pod_name") == "client" and r["flow"]["source"].get("namespace") == "team" and r["flow"]["destination"].get("pod_name") == "web" and r["flow"].get("l4", {}).get("UDP") == {"source_port": 40123, "destination_port": 7777} and "k8s:app=client" in r["flow"]["source"]["labels"] and r["flow"]["source"]["identity"] > 0 and r["flow"]["node_name"] == "node-g" and r["node_name"] == "node-g" and r["flow"]["IP"]["ipVersion"] == "IPv4" and r["flow"]["Type"] == "L3_L4"])' <<<"$ALL")" -ge 3
check "GetFlows: the spoofed packet is DROPPED, INVALID_SOURCE_IP (132), event type 1" \
	test "$(jl 'len([r for r in rows if r["flow"]["verdict"] == "DROPPED" and r["flow"]["drop_reason_desc"] == "INVALID_SOURCE_IP" and r["flow"]["drop_reason"] == 132 and r["flow"].get("IP", {}).get("source") == "10.203.0.99" and r["flow"]["event_type"]["type"] == 1])' <<<"$ALL")" = 1
# the pods' IPv6 neighbour discovery keeps adding flows: the ring's count
# is read between two GetFlows
NALL=$(jl 'len(rows)' <<<"$ALL")
STATUS=$(grpc status)
NAFTER=$(n_flows)
echo "  ServerStatus: $STATUS"
check "ServerStatus: num_flows is what GetFlows gave ($NALL..$NAFTER), max_flows the ring size, seen >= num" \
	test "$(jl "[$NALL <= int(s['num_flows']) <= $NAFTER and s['max_flows'] == '256' and int(s['seen_flows']) >= int(s['num_flows']) and int(s['uptime_ns']) > 0 and s['version'].startswith('fibril') and s['num_connected_nodes'] == 1 for s in rows[:1]] == [True]" <<<"$STATUS")" = True
UDP='[{"protocol":["udp"]}]'
UDPALL=$(grpc flows --whitelist "$UDP")
check "GetFlows number=2: the last two, oldest first" \
	test "$(grpc flows --number 2 --whitelist "$UDP" | jl 'json.dumps(rows)')" = "$(jl 'json.dumps(rows[-2:])' <<<"$UDPALL")"
check "GetFlows first number=1: the oldest" \
	test "$(grpc flows --first --number 1 --whitelist "$UDP" | jl 'json.dumps(rows)')" = "$(jl 'json.dumps(rows[:1])' <<<"$UDPALL")"
check "filter verdict DROPPED" test "$(n_flows --whitelist '[{"verdict":["DROPPED"]}]')" = 1
check "filter source_ip CIDR 10.203.0.99/32" test "$(n_flows --whitelist '[{"source_ip":["10.203.0.99/32"]}]')" = 1
check "filter source_pod team/client and destination_port 7777" \
	test "$(n_flows --whitelist '[{"source_pod":["team/client"],"destination_port":["7777"]}]')" -ge 3
check "filter destination_pod team/web (the UDP and the drop)" \
	test "$(n_flows --whitelist '[{"destination_pod":["team/web"]}]')" -ge 4
check "filter source_label app=client and protocol udp" \
	test "$(n_flows --whitelist '[{"source_label":["app=client"],"protocol":["udp"]}]')" -ge 3
check "filter protocol tcp: none" test "$(n_flows --whitelist '[{"protocol":["tcp"]}]')" = 0
check "filter destination_pod team/client (nothing sent to it): none" \
	test "$(n_flows --whitelist '[{"destination_pod":["team/client"],"protocol":["udp"],"destination_port":["7777"]}]')" = 0
check "blacklist verdict DROPPED: the UDP flows but the drop" \
	test "$(n_flows --whitelist "$UDP" --blacklist '[{"verdict":["DROPPED"]}]')" = $(($(jl 'len(rows)' <<<"$UDPALL") - 1))
check "two whitelist filters are ORed" \
	test "$(n_flows --whitelist '[{"verdict":["DROPPED"]},{"destination_port":["7777"]}]')" -ge 4
check "until an hour ago: none; since a minute ago: all" \
	test "$(n_flows --until-ago 3600)" = 0 -a "$(n_flows --since-ago 120)" -ge "$NALL"
OUT=$(grpc flows --whitelist '[{"source_ip":["banana"]}]' 2>&1) || true
check "a bad filter value is INVALID_ARGUMENT naming it ($OUT)" grep -q '^ERROR: INVALID_ARGUMENT: whitelist\[0\].source_ip' <<<"$OUT"
OUT=$(grpc flows --blacklist '[{},{"http_method":["GET"]}]' 2>&1) || true
check "an unsupported filter field is INVALID_ARGUMENT naming it ($OUT)" grep -q '^ERROR: INVALID_ARGUMENT: blacklist\[1\].http_method' <<<"$OUT"
OUT=$(grpc flows --first --follow 2>&1) || true
check "first with follow is INVALID_ARGUMENT ($OUT)" grep -q '^ERROR: INVALID_ARGUMENT' <<<"$OUT"

# follow: a follower of port 7778 gets the 3 new flows and nothing older
grpc flows --follow --max 3 --timeout 30 --whitelist '[{"destination_port":["7778"]}]' >"$WORK/follow.out" 2>&1 &
FOLLOW_PID=$!
followers() { api http://x/v1/status | grep -q '1 on gRPC'; }
wait_for 15 followers || true
udp_send 7778 3
wait_gone "$FOLLOW_PID" 20 || true
FRC=0
wait "$FOLLOW_PID" || FRC=$?
FOLLOW_PID=""
check "GetFlows follow: the 3 new flows to port 7778, as they come (exit $FRC)" \
	test "$FRC" = 0 -a "$(jl 'len([r for r in rows if r["flow"]["l4"]["UDP"]["destination_port"] == 7778])' <"$WORK/follow.out" 2>/dev/null)" = 3

# a slow follower: it reads nothing for 6 s while 3000 flows match it; past
# its 64 KiB window and the server's 64 KiB queue ([hubble-lite]
# grpc-stream-queue) it loses flows, and is told so with Hubble's
# LostEvent (OBSERVER_EVENTS_QUEUE) before the next flow it gets
SLOWN=3000
grpc flows --follow --slow 6 --timeout 14 --whitelist '[{"destination_port":["7779","7780"]}]' \
	>"$WORK/slow.out" 2>&1 &
FOLLOW_PID=$!
wait_for 15 followers || true
udp_send 7779 "$SLOWN"
awake() { grep -q '^{' "$WORK/slow.out"; }
wait_for 15 awake || true
udp_send 7780 3
wait_gone "$FOLLOW_PID" 20 || true
FRC=0
wait "$FOLLOW_PID" || FRC=$?
FOLLOW_PID=""
SLOW=$(jl '"%d %d %d %d" % (len([r for r in rows if r.get("flow", {}).get("l4", {}).get("UDP", {}).get("destination_port") == 7779]), sum(int(r["lost_events"]["num_events_lost"]) for r in rows if r.get("lost_events", {}).get("source") == "OBSERVER_EVENTS_QUEUE"), sum(int(r["lost_events"]["num_events_lost"]) for r in rows if "lost_events" in r and r["lost_events"].get("source") != "OBSERVER_EVENTS_QUEUE"), len([i for i, r in enumerate(rows) if r.get("flow", {}).get("l4", {}).get("UDP", {}).get("destination_port") == 7780 and any("lost_events" in x for x in rows[:i])]))' <"$WORK/slow.out" 2>/dev/null || echo "0 0 0 0")
read -r SLOW_GOT SLOW_LOST SLOW_OTHER SLOW_AFTER <<<"$SLOW"
echo "  slow follower: $SLOW_GOT flows, lost_events OBSERVER_EVENTS_QUEUE $SLOW_LOST, other lost $SLOW_OTHER, of $SLOWN; $SLOW_AFTER flows after the loss"
grep -m1 lost_events "$WORK/slow.out" | sed 's/^/  GetFlows: /' || true
check "a slow follower is told its lost flows: lost_events OBSERVER_EVENTS_QUEUE $SLOW_LOST > 0 (exit $FRC)" \
	test "$FRC" = 0 -a "$SLOW_LOST" -gt 0
check "  what it got and what it was told it lost add up: $SLOW_GOT + $SLOW_LOST (+ $SLOW_OTHER lost before the agent) = $SLOWN" \
	test "$((SLOW_GOT + SLOW_LOST))" -le "$SLOWN" -a "$((SLOW_GOT + SLOW_LOST + SLOW_OTHER))" -ge "$SLOWN"
check "  and it goes on getting new flows after the loss ($SLOW_AFTER of 3)" test "$SLOW_AFTER" = 3

NODES=$(grpc nodes)
echo "  GetNodes: $NODES"
check "GetNodes: this node, connected, with the ring's numbers" \
	test "$(jl "[n['name'] == 'node-g' and n['state'] == 'NODE_CONNECTED' and n['max_flows'] == '256' and int(n['num_flows']) >= $NALL and n['tls'] == {'enabled': True} for n in rows[0]['nodes'][:1]] == [True]" <<<"$NODES")" = True

# ---- TLS with client certificates ----
tls() { ip netns exec "$NODE" $CLIENT --ca "$pki/ca.crt" "$@"; }
OUT=$(tls 127.0.0.1:50051 status --timeout 5 2>&1) || true
check "TLS listener: a client without a certificate is refused ($(tail -1 <<<"$OUT" | cut -c1-60))" \
	grep -q '^ERROR: UNAVAILABLE' <<<"$OUT"
OUT=$(tls --cert "$pki/intruder.crt" --key "$pki/intruder.key" 127.0.0.1:50051 status --timeout 5 2>&1) || true
check "TLS listener: a certificate from another CA is refused" grep -q '^ERROR: UNAVAILABLE' <<<"$OUT"
OUT=$(tls --cert "$pki/client.crt" --key "$pki/client.key" 127.0.0.1:50051 flows --number 1 2>&1) || true
check "TLS listener: a client with a good certificate is served GetFlows" \
	test "$(jl 'len([r for r in rows if r["flow"]["node_name"] == "node-g"])' <<<"$OUT")" = 1
check "the agent is alive after it all" kill -0 "$AGENT_PID"
finish
