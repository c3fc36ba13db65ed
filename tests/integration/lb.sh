#!/usr/bin/env bash
# tests/integration/lb.sh - the lb module end to end (as root): a node netns
# with a bridge, ten backend "pods" and a client pod (netns on veths), the
# agent with the lb module in the node netns, its socket hooks attached to
# a cgroup v2 directory this test creates (named with its pid; the client
# processes run in it - never the machine's root cgroup). Checked, with
# real traffic: a ClusterIP service reaches every backend with an even
# spread (each of 4 backends gets 25% +- 12 points of 400 connections) and
# getpeername() shows the frontend; the same over IPv6 (TCP and UDP);
# NodePort from a client outside the node (per-packet DNAT at tc, TCP and
# UDP, IPv4 and IPv6, with the refusal - RST, ICMPv6 port unreachable -
# when the service has no backend); UDP request/response through a
# frontend, recvfrom() reporting the frontend; a service without backends
# refuses at once (ECONNREFUSED, < 0.5 s); bad input (an invalid address,
# port, a duplicate frontend for another ID) is one line and changes
# nothing; a removed backend gets no new connections while established ones
# to the others go on; all backends terminating -> they are used, one ready
# -> only it; session affinity sticks and expires; Maglev: every backend
# reached, and the share of table slots (= flows) that move when one of 10
# backends is removed is measured from the pinned table; kill -9 of the
# agent during a long-running connection through a ClusterIP: no reset,
# and the restarted agent restores the same service and backend IDs from
# the pins; a restart with another Maglev table size rebuilds the tables;
# `fibril map dump` decodes the maps; metrics.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl bpftool; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
. "$top_srcdir/tests/lib/lbtopo.sh"

node_agent() {
	start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.maglev-table-size=4093 \
		--set lb.nodeport-devices=ext0 "$@"
}
node_agent || { fail "the agent starts"; finish; }
check "the socket hooks are attached to the test's cgroup" \
	test "$(jq_ "$(api http://x/v1/service)" 'j["socket-lb-hooks"]')" = 8

# ---- ClusterIP: every backend, an even spread, getpeername shows the frontend -------------
upsert '{"frontend":"10.96.10.1:80","name":"default/web","backends":'"$(be_json active 0 1 2 3)"'}'
check "upsert answers the service with ID 1" test "$URC" = 0 -a "$(jq_ "$UOUT" 'j["id"]')" = 1 ||
	echo "  $UOUT"
out=$(client tcp 10.96.10.1 80 400)
check "400 connections, no error" test "$(jq_ "$out" 'sum(j["backends"].values())')" = 400 || echo "  $out"
check "every backend reached, each 25% +- 12 points (50..150 of 400)" \
	test "$(jq_ "$out" 'all(50 <= j["backends"].get(b, 0) <= 150 for b in ["b0","b1","b2","b3"]) and len(j["backends"]) == 4')" = True ||
	echo "  $out"
echo "  spread over 4 backends: $(jq_ "$out" 'j["backends"]')"
check "getpeername() answers the frontend" test "$(jq_ "$out" 'j["peers"]')" = "['10.96.10.1:80']"
list=$(fib service list)
check "service list shows the frontend, backends, states and IDs" \
	grep -Eq '^1 +10\.96\.10\.1:80/TCP +ClusterIP +random +default/web +[0-9]+ +10\.212\.0\.10:8080 \(active\)' <<<"$list" ||
	echo "$list"
dump=$(fib map dump lb_services)
check "map dump decodes lb_services" contains "$dump" "10.96.10.1:80/TCP slot=0  service=1 type=ClusterIP count=4"
check "map dump decodes lb_backends" contains "$(fib map dump lb_backends)" "10.212.0.13:8080/TCP active"

# ---- IPv6 ClusterIP (connect6, getpeername6) and UDP over IPv6 (sendmsg6, recvmsg6) --------
upsert '{"frontend":"[fd00:96::1]:80","backends":[{"address":"[fd00:212::10]:8080"},{"address":"[fd00:212::11]:8080"}]}'
check "an IPv6 service" test "$URC" = 0 || echo "  $UOUT"
out=$(client tcp fd00:96::1 80 60)
check "IPv6: 60 connections over both backends, getpeername() the frontend" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b0", "b1"] and j["peers"] == ["[fd00:96::1]:80"]')" = True ||
	echo "  $out"
upsert '{"frontend":"[fd00:96::2]:53","protocol":"UDP","backends":[{"address":"[fd00:212::12]:8080"}]}'
out=$(client udp fd00:96::2 53 10)
check "IPv6 UDP: answered by b2, recvfrom() the frontend" \
	test "$(jq_ "$out" 'j["backends"] == {"b2": 10} and j["peers"] == ["[fd00:96::2]:53"]')" = True || echo "  $out"

# ---- UDP request/response -------------------------------------------------------------------
upsert '{"frontend":"10.96.10.2:53","protocol":"UDP","backends":'"$(be_json active 4 5)"'}'
check "a UDP service" test "$URC" = 0 || echo "  $UOUT"
out=$(client udp 10.96.10.2 53 40)
check "40 UDP requests answered by both backends" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b4", "b5"] and sum(j["backends"].values()) == 40')" = True ||
	echo "  $out"
check "recvfrom() reports the frontend" test "$(jq_ "$out" 'j["peers"]')" = "['10.96.10.2:53']" ||
	echo "  $out"

# ---- NodePort from outside the node: per-packet DNAT at tc, replies reverse-NATed -----------
upsert '{"frontend":"192.168.212.1:30080","type":"NodePort","backends":'"$(be_json active 0 1)"'}'
check "a NodePort service" test "$URC" = 0 || echo "  $UOUT"
out=$(outside tcp 192.168.212.1 30080 40)
check "NodePort from outside the node: 40 TCP connections over both backends" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b0", "b1"] and sum(j["backends"].values()) == 40')" = True ||
	echo "  $out"
check "... the replies come from the frontend" test "$(jq_ "$out" 'j["peers"]')" = "['192.168.212.1:30080']"
upsert '{"frontend":"192.168.212.1:30053","type":"NodePort","protocol":"UDP","backends":'"$(be_json active 2)"'}'
out=$(outside udp 192.168.212.1 30053 10)
check "NodePort UDP from outside: answered by b2, from the frontend" \
	test "$(jq_ "$out" 'j["backends"] == {"b2": 10} and j["peers"] == ["192.168.212.1:30053"]')" = True ||
	echo "  $out"
check "lb_ct holds the flows" contains "$(fib map dump lb_ct)" "source=192.168.212.1:30080"

upsert '{"frontend":"192.168.212.1:30081","type":"NodePort","backends":[]}'
out=$(outside tcp 192.168.212.1 30081 3)
check "NodePort without backends from outside: refused at once (RST from the node)" \
	test "$(jq_ "$out" 'j["errors"] == {"ECONNREFUSED": 3} and j["max_s"] < 0.5')" = True || echo "  $out"
check "the tc programs are on ext0" test "$(jq_ "$(api http://x/v1/service)" 'j["nodeport-devices"]')" = 1

# ---- no backend: an immediate refusal --------------------------------------------------------
upsert '{"frontend":"10.96.10.3:80","backends":[]}'
out=$(client tcp 10.96.10.3 80 3)
check "no backend: connect() fails with ECONNREFUSED" test "$(jq_ "$out" 'j["errors"]')" = "{'ECONNREFUSED': 3}" ||
	echo "  $out"
check "... at once (< 0.5 s)" test "$(jq_ "$out" 'j["max_s"] < 0.5')" = True
upsert '{"frontend":"10.96.10.3:80","backends":'"$(be_json not-ready 6)"'}'
out=$(client tcp 10.96.10.3 80 2)
check "only a not-ready backend: refused too" test "$(jq_ "$out" 'j["errors"]')" = "{'ECONNREFUSED': 2}" ||
	echo "  $out"

# ---- bad input: one line, nothing changes -----------------------------------------------------
before=$(api http://x/v1/service)
for bad in '{"frontend":"10.96.10.300:80"}' '{"frontend":"10.96.10.9:0"}' \
	'{"frontend":"10.96.10.9:80","backends":[{"address":"10.212.0.10:99999"}]}' \
	'{"frontend":"10.96.10.9:80","backends":[{"address":"fd00::1:80"}]}' \
	'{"frontend":"10.96.10.9:80","colour":"red"}' \
	'{"id":1,"frontend":"10.96.10.9:80"}' '{"id":7,"frontend":"10.96.10.1:80"}' 'not json'; do
	upsert "$bad"
	check "refused with one line: $bad" test "$URC" = 1 -a "$(wc -l <<<"$UOUT")" = 1 || echo "  $UOUT"
done
upsert '{"id":7,"frontend":"10.96.10.1:80"}'
check "a duplicate frontend names the service that holds it" contains "$UOUT" "frontend 10.96.10.1:80/TCP is service 1's, not 7"
check "the refusals changed nothing" test "$(api http://x/v1/service)" = "$before"

# ---- a backend removed: no new connections to it, established ones go on ------------------------
for n in 1 2 3 4 5 6; do
	client hold 10.96.10.1 80 "$WORK/hold$n" &
	BG_PIDS+=($!)
	disown $!
done
# oks_at_least FILE N : a held connection logged N answers or more
oks_at_least() { [ "$(grep -c ok "$1" 2>/dev/null)" -ge "$2" ]; }
# holds_at N : each of the 6 held connections logged N answers (or an error)
holds_at() {
	local n
	for n in 1 2 3 4 5 6; do
		grep -q error "$WORK/hold$n" 2>/dev/null || oks_at_least "$WORK/hold$n" "$1" || return 1
	done
}
wait_for 10 holds_at 1 || true # established
upsert '{"frontend":"10.96.10.1:80","name":"default/web","backends":'"$(be_json active 1 2 3)"'}'
check "the update keeps ID 1" test "$(jq_ "$UOUT" 'j["id"]')" = 1
out=$(client tcp 10.96.10.1 80 150)
check "150 new connections, none to the removed backend b0" \
	test "$(jq_ "$out" '"b0" not in j["backends"] and sum(j["backends"].values()) == 150')" = True || echo "  $out"
wait_for 10 holds_at 10 || true
held_ok=0
for n in 1 2 3 4 5 6; do
	if ! grep -q error "$WORK/hold$n" && [ "$(grep -c ok "$WORK/hold$n")" -ge 10 ]; then
		held_ok=$((held_ok + 1))
	else
		# a connection to the removed backend itself may go on too (socket LB:
		# nothing is torn down), but none may fail
		grep -q error "$WORK/hold$n" && echo "  hold$n: $(grep error "$WORK/hold$n")"
	fi
done
check "the 6 established connections go on (no error)" test "$held_ok" = 6

# ---- terminating backends (KEP-1669) ------------------------------------------------------------
upsert '{"frontend":"10.96.10.4:80","backends":'"$(be_json terminating 7 8)"'}'
out=$(client tcp 10.96.10.4 80 40)
check "all terminating -> the terminating ones serve" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b7", "b8"]')" = True || echo "  $out"
upsert '{"frontend":"10.96.10.4:80","backends":[{"address":"10.212.0.17:8080","state":"terminating"},{"address":"10.212.0.18:8080","state":"terminating"},{"address":"10.212.0.19:8080"}]}'
out=$(client tcp 10.96.10.4 80 40)
check "one ready -> only the ready one" test "$(jq_ "$out" 'j["backends"]')" = "{'b9': 40}" || echo "  $out"

# ---- session affinity: sticks, expires -----------------------------------------------------------
upsert '{"frontend":"10.96.10.5:80","session-affinity":true,"session-affinity-timeout":1,"backends":'"$(be_json active 0 1 2 3)"'}'
out=$(client tcp 10.96.10.5 80 30)
check "affinity: 30 connections, one backend" test "$(jq_ "$out" 'len(j["backends"])')" = 1 || echo "  $out"
check "the affinity entry is in lb_affinity" contains "$(fib map dump lb_affinity)" "service=$(jq_ "$UOUT" 'j["id"]')"
seen=""
for n in 1 2 3 4 5 6 7; do
	sleep 1.3 # sleep: past the affinity timeout (1 s), so the choice is made again
	seen="$seen $(jq_ "$(client tcp 10.96.10.5 80 1)" 'list(j["backends"])[0]')"
done
check "after the timeout the choice is made again (7 rounds: more than one backend)" \
	test "$(tr ' ' '\n' <<<"$seen" | sort -u | grep -c .)" -gt 1 || echo "  rounds:$seen"

# ---- Maglev: reached, and the share of flows moved when 1 of 10 goes --------------------------
upsert '{"frontend":"10.96.10.6:80","algorithm":"maglev","backends":'"$(be_json active 0 1 2 3 4 5 6 7 8 9)"'}'
MID=$(jq_ "$UOUT" 'j["id"]')
out=$(client tcp 10.96.10.6 80 300)
check "maglev: all 10 backends reached by 300 connections" test "$(jq_ "$out" 'len(j["backends"])')" = 10 || echo "  $out"
table() { bpftool -j map lookup pinned "$BPFFS_DIR/lb_maglev" key $((MID & 255)) $((MID >> 8)) 0 0; }
table >"$WORK/maglev.before"
upsert '{"frontend":"10.96.10.6:80","algorithm":"maglev","backends":'"$(be_json active 0 1 2 3 4 5 6 7 8)"'}'
removed_id=$(jq_ "$(api http://x/v1/service)" '[b["id"] for s in j["services"] for b in s["backends"] if b["address"] == "10.212.0.19:8080"]')
table >"$WORK/maglev.after"
moved=$(python3 - "$WORK/maglev.before" "$WORK/maglev.after" <<'PY'
import json, struct, sys
def ids(path):
    v = json.load(open(path))
    v = v[0] if isinstance(v, list) else v
    b = bytes(int(x, 16) for x in v["value"])
    return struct.unpack("<%dI" % (len(b) // 4), b)
a, b = ids(sys.argv[1]), ids(sys.argv[2])
gone = {x for x in a} - {x for x in b}
moved = sum(1 for x, y in zip(a, b) if x != y)
others = sum(1 for x, y in zip(a, b) if x != y and x not in gone)
print("%.4f %.4f %d" % (moved / len(a), others / len(a), len(gone)))
PY
)
read -r moved_all moved_others gone_n <<<"$moved"
echo "  maglev M=4093, 10 -> 9 backends: $moved_all of the flows moved ($moved_others of flows on remaining backends; ideal 0.10 and 0)"
check "maglev: one backend gone from the table" test "$gone_n" = 1
check "maglev: about 1/10 of the flows moved (<= 0.15)" test "$(python3 -c "print($moved_all <= 0.15)")" = True
check "maglev: flows on the remaining backends mostly stay (< 3% moved)" test "$(python3 -c "print($moved_others < 0.03)")" = True
check "map dump summarises the Maglev table" contains "$(fib map dump lb_maglev)" "M=4093"

check "metrics: refused upserts" grep -Eq '^fibril_lb_operations_total\{op="upsert",result="invalid"\} [1-9]' <<<"$(api http://x/metrics)"

# ---- kill -9 during a long-running connection; the restart keeps every ID -----------------------
ids_of() { api http://x/v1/service | python3 -c '
import json, sys
for s in json.load(sys.stdin)["services"]:
    print(s["id"], s["frontend"], s["protocol"], " ".join(sorted("%s=%s/%s" % (b["id"], b["address"], b["state"]) for b in s["backends"])))'; }
before_ids=$(ids_of)
client hold 10.96.10.1 80 "$WORK/long" &
BG_PIDS+=($!)
disown $!
wait_for 10 oks_at_least "$WORK/long" 1 || true # established
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
AGENT_PID=""
out=$(client tcp 10.96.10.1 80 20)
check "while the agent is down, new connections are balanced" \
	test "$(jq_ "$out" 'sum(j["backends"].values())')" = 20 || echo "  $out"
node_agent || { fail "the agent restarts"; finish; }
check "the restart restored the services from the pins" contains "$(cat "$WORK/agent.log")" "restored 11 services"
after_ids=$(ids_of)
check "same service and backend IDs after the restart" test "$after_ids" = "$before_ids"
[ "$after_ids" = "$before_ids" ] || diff <(echo "$before_ids") <(echo "$after_ids")
web=$(fib -o json service get 1)
check "after kill -9: the API service keeps its name and its origin (api)" \
	test "$(jq_ "$web" 'j.get("name"), j["source"]')" = "('default/web', 'api')" || echo "  $web"
check "... none of the restored services is of unknown origin" \
	test "$(jq_ "$(api http://x/v1/service)" 'j["restored-unknown-origin"]')" = 0
n_before=$(grep -c ok "$WORK/long")
# 10 more answers (one each 100 ms: at least 1 s) with the agent back
long_goes_on() { grep -q error "$WORK/long" || oks_at_least "$WORK/long" $((n_before + 10)); }
wait_for 20 long_goes_on || true
check "the long-running connection was never reset" \
	test -z "$(grep error "$WORK/long")" -a "$(grep -c ok "$WORK/long")" -ge $((n_before + 10)) ||
	tail -3 "$WORK/long"
upsert '{"frontend":"10.96.10.7:80","backends":'"$(be_json active 5)"'}'
check "a service added after the restart takes a new ID" test "$(jq_ "$UOUT" 'j["id"]')" = 12 || echo "  $UOUT"
out=$(outside tcp 192.168.212.1 30080 10)
check "after the restart: NodePort from outside still served" \
	test "$(jq_ "$out" 'sum(j["backends"].values())')" = 10 || echo "  $out"
out=$(client tcp 10.96.10.1 80 50)
check "after the restart: new connections reach b1-b3" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b1", "b2", "b3"]')" = True || echo "  $out"

# ---- a new Maglev table size: the restored tables are rebuilt ----------------------------------
check "the agent stops" stop_agent
node_agent --set lb.maglev-table-size=8191 || { fail "the agent restarts with M=8191"; finish; }
mg=$(fib map dump lb_maglev | grep "^$MID ")
check "M=8191: the Maglev table is rebuilt with its 9 backends" \
	test "$(sed 's/.*M=8191//' <<<"$mg" | wc -w)" = 9 || echo "  $mg"
out=$(client tcp 10.96.10.6 80 200)
check "M=8191: the 9 backends reached" test "$(jq_ "$out" 'len(j["backends"])')" = 9 || echo "  $out"

# ---- NodePort over IPv6 from outside: DNAT to IPv6 backends, reverse NAT, checksums -------
be6() { local out="" i; for i in "$@"; do out="$out${out:+,}{\"address\":\"[fd00:212::$((10 + i))]:8080\"}"; done; printf '[%s]' "$out"; }
upsert '{"frontend":"[fd00:213::1]:30080","type":"NodePort","backends":'"$(be6 0 1)"'}'
check "an IPv6 NodePort service" test "$URC" = 0 || echo "  $UOUT"
out=$(outside tcp fd00:213::1 30080 40)
check "IPv6 NodePort from outside: 40 TCP connections over both backends, from the frontend" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b0", "b1"] and sum(j["backends"].values()) == 40 and j["peers"] == ["[fd00:213::1]:30080"]')" = True ||
	echo "  $out"
upsert '{"frontend":"[fd00:213::1]:30053","type":"NodePort","protocol":"UDP","backends":'"$(be6 2)"'}'
out=$(outside udp fd00:213::1 30053 10)
check "IPv6 NodePort UDP from outside: answered by b2, from the frontend (UDP checksum right)" \
	test "$(jq_ "$out" 'j["backends"] == {"b2": 10} and j["peers"] == ["[fd00:213::1]:30053"]')" = True ||
	echo "  $out"
check "lb_ct holds the IPv6 flows" contains "$(fib map dump lb_ct)" "source=[fd00:213::1]:30080"
upsert '{"frontend":"[fd00:213::1]:30081","type":"NodePort","backends":[]}'
out=$(outside tcp fd00:213::1 30081 3)
check "IPv6 NodePort without backends: refused at once (RST from the node)" \
	test "$(jq_ "$out" 'j["errors"] == {"ECONNREFUSED": 3} and j["max_s"] < 0.5')" = True || echo "  $out"
upsert '{"frontend":"[fd00:213::1]:30082","type":"NodePort","protocol":"UDP","backends":[]}'
out=$(nsenter --net="/run/netns/$OUTSIDE" python3 -c '
import socket, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(2); s.connect(("fd00:213::1", 30082))
t = time.monotonic(); s.send(b"q")
try: s.recv(100); print("answered")
except ConnectionRefusedError: print("refused %.2f" % (time.monotonic() - t))
except OSError as e: print(e)')
check "IPv6 UDP NodePort without backends: ICMPv6 port unreachable at once ($out)" \
	python3 -c 'import sys; w = sys.argv[1].split(); sys.exit(not (w[0] == "refused" and float(w[1]) < 0.5))' "$out"
for fe in "[fd00:213::1]:30080" "[fd00:213::1]:30053" "[fd00:213::1]:30081" "[fd00:213::1]:30082"; do
	id=$(api http://x/v1/service | python3 -c 'import json, sys; print([s["id"] for s in json.load(sys.stdin)["services"] if s["frontend"] == sys.argv[1]][0])' "$fe")
	fib service delete "$id" >/dev/null || fail "delete the IPv6 NodePort $fe"
done

# ---- delete, metrics -------------------------------------------------------------------------------
check "service delete" fib service delete 12
rc=0
fib service get 12 >/dev/null 2>&1 || rc=$?
check "the deleted service is gone" test "$rc" = 1
metrics=$(api http://x/metrics)
check "metrics: services" grep -q '^fibril_lb_services 11' <<<"$metrics"
check "metrics: tc DNAT" grep -Eq '^fibril_lb_socket_events_total\{event="tc-dnat"\} [1-9]' <<<"$metrics"
check "metrics: socket events" grep -Eq '^fibril_lb_socket_events_total\{event="translated"\} [1-9]' <<<"$metrics"
check "metrics: no-backend refusals" grep -Eq '^fibril_lb_socket_events_total\{event="no-backend"\} [1-9]' <<<"$metrics"
check "the agent stops cleanly" stop_agent
finish
