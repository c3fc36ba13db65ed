#!/usr/bin/env bash
# tests/integration/flows.sh - hubble-lite end to end: an agent in a node
# namespace with ipam-cluster-pool, endpoint, datapath (trace events on)
# and hubble-lite; two pods made by the endpoint module's PUT (pod names,
# namespaces, labels), UDP between them, and a spoofed packet. GET
# /v1/flows shows the traffic as FORWARDED flows named by pod and the spoof
# as a DROPPED flow with its reason, each filter narrows the answer, a bad
# filter is a 400 naming it, and /metrics counts the flows. With the lb
# module (socket hooks on a cgroup of the test's own), a TCP connection from
# client to a ClusterIP whose backend is web gives flows naming the service
# (destination_service on the way there, source_service on the replies),
# filtered by service / to-service / from-service and shown by `fibril
# observe`; once the service is deleted, flows are no longer named.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF)"
for so in ipam-cluster-pool endpoint datapath hubble-lite lb; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so.so is not built"
done

NODE=fflown$$
PODNS=(fflowa$$ fflowb$$)
HOSTIF=(lxfa lxfb)
ADDR4=(10.202.0.10 10.202.0.11)
POD=(web client)
LABELS=('["k8s:app=web"]' '["k8s:app=client"]')
flows_cleanup() {
	local rc=$? ns p
	set +e
	if [ -n "$AGENT_PID" ]; then kill -KILL "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=""; fi
	for ns in "${PODNS[@]}" "$NODE"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	if [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		wait_for 5 rmdir "$CG" 2>/dev/null # once the killed processes have left it
	fi
	[ -n "$CG2_MOUNTED" ] && umount "$CG2_MOUNTED"
	(exit "$rc")
	cleanup
}
trap flows_cleanup EXIT INT TERM
# the lb module's socket hooks go on a cgroup of the test's own
find_cgroup2
CG="$CG2/fibril-flows-test-$$"
mkdir "$CG"

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in ipam-cluster-pool endpoint datapath hubble-lite lb; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done

ip netns add "$NODE"
ip -n "$NODE" link set lo up
inpod() { local i=$1; shift; ip netns exec "${PODNS[$i]}" "$@"; }
jget() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null || echo "?"; }
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }

mapfile -t args < <(agent_args "$mods")
nsenter --net="/run/netns/$NODE" "$AGENT" "${args[@]}" --set ipam-cluster-pool.node-cidr=10.202.0.0/24 \
	--set datapath.trace-events=true --set hubble-lite.node-name=node-x --set "lb.cgroup=$CG" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 20 test -S "$WORK/fibril.sock" || true
check "the agent starts with hubble-lite" test -S "$WORK/fibril.sock"
GW4=10.202.0.1

# make_pod I : netns, veth, the endpoint module's PUT (it attaches the program)
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
check "pod web created through the endpoint module" test "$(make_pod 0)" = 201
check "pod client created through the endpoint module" test "$(make_pod 1)" = 201

# traffic: client -> web UDP port 7777 (a listener answers nothing)
inpod 0 python3 -c 'import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",7777)); time.sleep(8)  # sleep: the port stays bound while the test sends' &
# listening PROTO PORT : pod web has a socket on PORT (ss -l, t or u)
listening() { inpod 0 ss -Hl"$1"n "sport = :$2" | grep -q .; }
wait_for 10 listening u 7777 || fail "pod web listens on UDP 7777"
inpod 1 python3 -c 'import socket; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",40123)); [s.sendto(b"x"*32,("10.202.0.10",7777)) for _ in range(3)]'
# a spoofed source from client's veth
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
	10.202.0.99 10.202.0.10

flows() { api "http://x/v1/flows?$1"; }
count() { jget "$(flows "$1")" 'len(j["flows"])'; }
# at_least N QUERY : GET /v1/flows?QUERY has N flows or more
at_least() { local n; n=$(count "$2"); [ "$n" != "?" ] && [ "$n" -ge "$1" ]; }
# the flows of the packets above reach the ring
wait_for 10 at_least 3 'from-pod=team/client&to-port=7777' || true
wait_for 10 at_least 1 'drop-reason=spoofed-source-ip' || true
ALL=$(flows "")
check "the UDP packets are FORWARDED flows from team/client to team/web, with ports and labels" \
	test "$(jget "$ALL" 'len([f for f in j["flows"] if f["verdict"] == "FORWARDED" and f["source"].get("pod_name") == "client" and f["destination"].get("pod_name") == "web" and f["source"]["namespace"] == "team" and f["l4"]["protocol"] == "UDP" and f["l4"]["destination_port"] == 7777 and f["l4"]["source_port"] == 40123 and "k8s:app=client" in f["source"]["labels"] and f["node_name"] == "node-x"])')" -ge 3
check "the spoofed packet is a DROPPED flow with its reason" \
	test "$(jget "$ALL" 'len([f for f in j["flows"] if f["verdict"] == "DROPPED" and f["drop_reason_desc"] == "spoofed-source-ip" and f["IP"]["source"] == "10.202.0.99" and f["destination"].get("pod_name") == "web" and f["type"] == "drop"])')" = 1
check "filter verdict=DROPPED" test "$(count verdict=DROPPED)" = 1
check "filter drop-reason" test "$(count drop-reason=spoofed-source-ip)" = 1
check "filter from-pod=team/client&to-port=7777" test "$(count 'from-pod=team/client&to-port=7777')" -ge 3
check "filter to-pod=client (none sent to it)" test "$(count 'to-pod=team/client&protocol=udp&port=7777')" = 0
check "filter from-label=app=client" test "$(count 'from-label=app%3Dclient&protocol=udp&to-port=7777')" -ge 3
check "filter ip CIDR" test "$(count 'ip=10.202.0.99/32')" = 1
check "filter protocol=tcp (none)" test "$(count protocol=tcp)" = 0
check "filter namespace=team&last=2" test "$(count 'namespace=team&last=2')" = 2
check "filter since=10m keeps them, until=1h ago drops them" \
	test "$(count since=10m)" -ge 4 -a "$(count until=1h)" = 0
code=$(api -o "$WORK/bad" -w '%{http_code}' "http://x/v1/flows?port=http")
check "a bad filter is a 400 naming it ($(cat "$WORK/bad"))" \
	test "$code" = 400 -a "$(grep -c "query 'port'" "$WORK/bad")" = 1
# ---- fibril observe ----
fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
OUT=$(fib observe --verdict DROPPED)
check "fibril observe --verdict DROPPED: one compact line naming pods, ports, the reason as Hubble does, the verdict ($OUT)" \
	test "$(grep -c -- '<> team/web:9 (ID:[0-9]*) Invalid source ip DROPPED (UDP)' <<<"$OUT")" = 1 -a "$(wc -l <<<"$OUT")" = 1
OUT=$(fib observe --from-pod team/client --to-port 7777 --last 2 -o table)
check "fibril observe -o table: a header and the last 2 rows" \
	test "$(head -1 <<<"$OUT" | grep -c '^TIMESTAMP *SOURCE *DESTINATION *TYPE *VERDICT *SUMMARY')" = 1 -a "$(wc -l <<<"$OUT")" = 3
OUT=$(fib observe -o flat --protocol udp -l app=web --type trace --since 5m)
check "fibril observe -o flat: fibril's JSON lines of the matching flows" python3 -c '
import json, sys
lines = sys.argv[1].splitlines()
assert len(lines) >= 3, lines
for l in lines:
    f = json.loads(l)
    assert f["l4"]["protocol"] == "UDP" and f["type"] == "trace", f
' "$OUT"
check "fibril observe --port http: exit 1 naming the filter" \
	sh -c '! "$1" --socket "$2" observe --port http 2>"$3" && grep -q "query .port." "$3"' _ "$CLI" "$WORK/fibril.sock" "$WORK/err"

# ---- a service: the flows of a connection through its ClusterIP name it ------------------------
printf '{"frontend":"10.96.77.1:80","name":"team/websvc","backends":[{"address":"10.202.0.10:8080"}]}' |
	fib service upsert - >/dev/null
check "a ClusterIP service team/websvc -> web:8080" fib service get 1
inpod 0 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(8); s.settimeout(10)
for _ in range(3):
    c, _ = s.accept(); c.recv(16); c.sendall(b"ok"); c.close()' &
wait_for 10 listening t 8080 || fail "pod web listens on TCP 8080"
# tcp_connect ADDR PORT N: N connections from the client pod, in the cgroup
tcp_connect() {
	nsenter --net="/run/netns/${PODNS[1]}" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" \
		python3 -c '
import socket, sys
for _ in range(int(sys.argv[3])):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    s.sendall(b"hi"); assert s.recv(16) == b"ok"; s.close()
print("ok")' "$@"
}
check "3 TCP connections from client through the ClusterIP" test "$(tcp_connect 10.96.77.1 80 3)" = ok
# their flows both ways reach the ring
wait_for 10 at_least 3 'to-service=team/websvc' || true
wait_for 10 at_least 3 'from-service=team/websvc&from-port=8080' || true
SVC=$(flows 'to-service=team/websvc')
check "the flows to the backend name the service (destination_service team/websvc)" \
	test "$(jget "$SVC" 'len([f for f in j["flows"] if f["destination"].get("pod_name") == "web" and f["l4"]["destination_port"] == 8080 and f["destination_service"] == {"name": "websvc", "namespace": "team"} and f["source"].get("pod_name") == "client"])')" -ge 3 ||
	echo "  $(jget "$SVC" 'j["flows"][:1]')"
check "the replies name it as their source_service" \
	test "$(jget "$(flows 'from-service=team/websvc&from-port=8080')" 'len([f for f in j["flows"] if f["source_service"]["name"] == "websvc" and f["destination"].get("pod_name") == "client"])')" -ge 3
check "filter service=websvc (either end, by name) has both" \
	test "$(count 'service=websvc')" -ge 6
check "filter service=team/other has none" test "$(count 'service=team/other')" = 0
check "the UDP flows of before name no service" \
	test "$(jget "$(flows 'to-port=7777')" 'sum(1 for f in j["flows"] if "destination_service" in f or "source_service" in f)')" = 0
OUT=$(fib observe --to-service team/websvc --last 1)
check "fibril observe --to-service: the line names the service ($OUT)" \
	grep -q -- '<> team/web:8080 (ID:[0-9]*) (service team/websvc) ' <<<"$OUT"
check "fibril observe -o json (Hubble's) carries destination_service" \
	grep -q '"destination_service":{"name":"websvc","namespace":"team"}' <<<"$(fib observe --to-service websvc --last 1 -o json)"
check "the service is deleted" fib service delete 1
inpod 0 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(8); s.settimeout(10)
c, _ = s.accept(); c.recv(16); c.sendall(b"ok"); c.close()' &
wait_for 10 listening t 8080 || fail "pod web listens on TCP 8080 again"
n_before=$(count 'to-service=team/websvc')
# a connection's flows to web:8080: a third of the three through the
# service, but at most 3 (SYN, data, FIN: a slower run's delayed ACKs can
# fold the rest) and at least 1
per_conn=$(($(count 'to-service=team/websvc') / 3))
[ "$per_conn" -gt 3 ] && per_conn=3
[ "$per_conn" -lt 1 ] && per_conn=1
direct_before=$(count 'from-pod=team/client&to-port=8080')
check "a direct connection to web:8080 after the delete" test "$(tcp_connect 10.202.0.10 8080 1)" = ok
check "  its flows reach the ring (at least $per_conn)" wait_for 10 at_least $((direct_before + per_conn)) 'from-pod=team/client&to-port=8080'
check "... names no service any more" test "$(count 'to-service=team/websvc')" = "$n_before"

PROM=$(api http://x/metrics)
check "/metrics: fibril_hubble_drops_total by reason" \
	contains "$PROM" 'fibril_hubble_drops_total{reason="spoofed-source-ip"} 1'
check "/metrics: forwarded UDP trace flows" \
	grep -q '^fibril_hubble_flows_total{verdict="FORWARDED",type="trace",protocol="UDP"} [1-9]' <<<"$PROM"
finish
