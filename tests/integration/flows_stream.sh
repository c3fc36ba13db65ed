#!/usr/bin/env bash
# tests/integration/flows_stream.sh - the flow stream (/v1/flows/stream,
# websocket) end to end: an agent with ipam, endpoint, datapath (trace
# events on), policy and hubble-lite in a node namespace; pods a and b
# through fibril-cni, a under a policy that lets b in on UDP 7000 only.
# Traffic of known shape - b -> a UDP 7000 (allowed), b -> a UDP 7001
# (dropped by policy), a -> b TCP 82 (nobody listens: SYN, then RST) -
# comes over the websocket as exactly the expected flows (verdicts,
# reason, TCP flags, the policy verdict of the allowed flow and the rule
# it names, the default deny of the drop), to each follower as its filter says, and to
# `fibril observe -f`; a bad filter is refused in the stream; a reader
# that stalls loses its own flows and is told how many while a fast one
# gets every flow of a burst; the lost counters and the ring's overwritten
# counter move; the stream is served on the TCP listener too; the
# datapath's event ring buffer has the size the config gives; a burst
# leaves the agent in frames of more than 16 KiB per send() (strace: the
# API's protocol sets libwebsockets' tx_packet_size; without it every write
# is cut into 4 KiB pieces, one per trip round the loop); of three
# followers with one filter (matched once for the group), the first
# leaving does not cut the other two off.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/flowpods.sh"

flowpods_start --set hubble-lite.ring-size=1000 --set hubble-lite.follow-queue=512 \
	--set datapath.events-ring-bytes=2097152
WS=$top_srcdir/tests/lib/wsflows.py
fib() { "$CLI" --socket "$SOCK" "$@"; }
check "the dp_events ring buffer has the configured size ([datapath] events-ring-bytes)" \
	test "$(api http://x/v1/map | python3 -c 'import json,sys
print([m["max_entries"] for m in json.load(sys.stdin)["maps"] if m["name"] == "dp_events"])')" = "[2097152]"

# follow NAME QUERY [wsflows args] : a follower in the background
follow() {
	local name=$1 query=$2
	shift 2
	rm -f "$WORK/$name.ready"
	python3 "$WS" "$SOCK" "/v1/flows/stream?$query" "$WORK/$name.out" --ready "$WORK/$name.ready" "$@" \
		2>"$WORK/$name.err" &
	BG+=($!)
	eval "PID_$name=$!"
	wait_alive "$!" 10 test -e "$WORK/$name.ready"
}
followers_are() { grep -q "^fibril_hubble_followers $1\$" <<<"$(api http://x/metrics)"; }
# summary FILE : one line per flow: verdict reason proto src>dst:dport flags
summary() {
	python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    f = json.loads(line)
    if "lost_events" in f or "error" in f:
        print(json.dumps(f, sort_keys=True)); continue
    l4 = f.get("l4", {})
    print(f["verdict"], f.get("drop_reason_desc") or f.get("trace_reason"), l4.get("protocol"),
          "%s>%s:%s" % (f["source"].get("pod_name", "?"), f["destination"].get("pod_name", "?"),
                        l4.get("destination_port")), l4.get("flags") or "-")
PY
}

# ---- traffic of known shape -> exactly the expected flows ----------------------------------
follow all "ip=$A&ip=$B" --idle 8 --timeout 40 || fail "follower 'all' connects"
follow dropped "verdict=DROPPED&namespace=team" --idle 8 --timeout 40 || fail "follower 'dropped' connects"
follow tcp "protocol=tcp&from-pod=team/a" --idle 8 --timeout 40 || fail "follower 'tcp' connects"
"$CLI" --socket "$SOCK" observe -f --to-pod team/a --protocol udp >"$WORK/observe.out" 2>"$WORK/observe.err" &
OBS=$!
BG+=($OBS)
check "the three websocket followers and fibril observe -f are in" wait_for 10 followers_are 4
udp b a 7000
udp b a 7001
check "a -> b TCP 82 is refused (nobody listens)" test "$(tcp_dead a b 82)" = refused
wait "$PID_all" "$PID_dropped" "$PID_tcp"
EXPECT_ALL="FORWARDED policy-allowed UDP b>a:7000 -
FORWARDED forwarded UDP b>a:7000 -
DROPPED policy-denied UDP b>a:7001 -
FORWARDED forwarded TCP a>b:82 SYN
FORWARDED forwarded TCP b>a:40082 RST,ACK"
got=$(summary "$WORK/all.out" | sed "s/b>a:[0-9]* RST/b>a:40082 RST/")
check "follower ip=a|b: exactly the 5 expected flows (the policy's verdict first)" test "$got" = "$EXPECT_ALL"
[ "$got" = "$EXPECT_ALL" ] || printf '  got:\n%s\n' "$got"
check "follower verdict=DROPPED: exactly the policy drop" \
	test "$(summary "$WORK/dropped.out")" = "DROPPED policy-denied UDP b>a:7001 -"
check "follower protocol=tcp&from-pod=team/a: exactly the SYN" \
	test "$(summary "$WORK/tcp.out")" = "FORWARDED forwarded TCP a>b:82 SYN"
check "the flows carry pods, namespaces, labels and the node" python3 - "$WORK/all.out" <<'PY'
import json, sys
f = json.loads(open(sys.argv[1]).readline())
assert f["source"]["namespace"] == "team" and f["source"]["pod_name"] == "b", f
assert "k8s:app=b" in f["source"]["labels"] and f["destination"]["pod_name"] == "a", f
assert f["traffic_direction"] == "egress" and f["node_name"], f
PY
check "the stream's policy verdict and policy drop name their rule" python3 - "$WORK/all.out" <<'PY'
import json, sys
flows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
verdict = [f for f in flows if f["type"] == "policy-verdict"]
drop = [f for f in flows if f.get("drop_reason_desc") == "policy-denied"]
assert len(verdict) == 1 and len(drop) == 1, flows
p = verdict[0]["policy"]
assert (p["match"], p["direction"], p["name"], p["kind"], p["section"], p["rule_index"]) == \
    ("allow", "ingress", "a-from-b-udp", "CiliumNetworkPolicy", "ingress", 0), p
assert drop[0]["policy"] == {"match": "default-deny", "direction": "ingress"}, drop[0]
assert all("policy" not in f for f in flows if f["type"] == "trace"), flows
PY
observed() { [ "$(wc -l <"$WORK/observe.out")" -ge 3 ]; }
wait_for 10 observed || true # (the check below counts the lines)
kill "$OBS" 2>/dev/null || true
wait "$OBS" 2>/dev/null || true
OUT=$(cat "$WORK/observe.out")
check "fibril observe -f --to-pod team/a --protocol udp: the UDP flows as they came, the policy's rules named" \
	test "$(grep -c 'team/b:40000 (ID:[0-9]*) <> team/a:7000 (ID:[0-9]*) to-endpoint FORWARDED (UDP)' <<<"$OUT")" = 1 -a \
	"$(grep -c 'team/b:40001 (ID:[0-9]*) -> team/a:7001 (ID:[0-9]*) Policy denied DROPPED (UDP, policy: default deny (ingress: no rule allows it))' <<<"$OUT")" = 1 -a \
	"$(grep -c 'team/b:40000 (ID:[0-9]*) -> team/a:7000 (ID:[0-9]*) policy-verdict:none INGRESS ALLOWED (UDP, policy: allow (ingress) by CiliumNetworkPolicy a-from-b-udp ingress\[0\] (rule [0-9]*))' <<<"$OUT")" = 1 -a \
	"$(wc -l <"$WORK/observe.out")" = 3
check "fibril observe -f --port http: exit 1 naming the filter" \
	sh -c '! "$1" --socket "$2" observe -f --port http 2>"$3" && grep -q "query .port." "$3"' _ "$CLI" "$SOCK" "$WORK/err"
# --last N with -f: the ring's last matches first
OUT=$(timeout 3 "$CLI" --socket "$SOCK" observe -f --last 1 --verdict DROPPED -o flat || true)
check "fibril observe -f --last 1: the last matching flow first (flat JSON lines)" \
	test "$(python3 -c 'import json,sys; f = json.loads(sys.argv[1]); print(f["l4"]["destination_port"])' "$OUT")" = 7001
python3 "$WS" "$SOCK" "/v1/flows/stream?verdict=MAYBE" "$WORK/bad.out" --timeout 5 2>"$WORK/bad.err" || true
check "a bad filter: the stream says why and closes" \
	grep -q '"error":"query .verdict.*","code":400' "$WORK/bad.out"
ip netns exec "$NODE_NS" python3 "$WS" "127.0.0.1:$TCP_PORT" "/v1/flows/stream?last=1&verdict=DROPPED" \
	"$WORK/tcpl.out" --count 1 --timeout 5 2>"$WORK/tcpl.err" || true
check "the stream is served on the TCP listener" test "$(summary "$WORK/tcpl.out")" = "DROPPED policy-denied UDP b>a:7001 -"
ip netns exec "$NODE_NS" python3 "$WS" "127.0.0.1:$TCP_PORT" "/v1/flows/stream" "$WORK/evil.out" \
	--origin http://evil.example --timeout 5 2>"$WORK/evil.err" || true
check "TCP: a websocket from another site's page (Origin) is refused" grep -q 'upgrade refused\|closed the connection' "$WORK/evil.err"
ip netns exec "$NODE_NS" python3 "$WS" "127.0.0.1:$TCP_PORT" "/v1/flows/stream?last=1" "$WORK/same.out" \
	--origin "http://127.0.0.1:$TCP_PORT" --count 1 --timeout 5 2>"$WORK/same.err" || true
check "TCP: the page's own origin is taken" test "$(grep -c '"verdict"' "$WORK/same.out")" = 1
tcpcode() { ip netns exec "$NODE_NS" curl -sS -o /dev/null -w '%{http_code}' "$@"; }
check "TCP: GET /v1/flows under a host name is 421 (DNS rebinding), under the address 200" \
	test "$(tcpcode -H "Host: evil.example:$TCP_PORT" "http://127.0.0.1:$TCP_PORT/v1/flows?last=1")" = 421 -a \
	"$(tcpcode "http://127.0.0.1:$TCP_PORT/v1/flows?last=1")" = 200 -a \
	"$(tcpcode -H "Host: localhost:$TCP_PORT" "http://127.0.0.1:$TCP_PORT/flows")" = 200
check "TCP: /metrics still answers under a host name (scrapers)" \
	test "$(tcpcode -H "Host: node1.example:$TCP_PORT" "http://127.0.0.1:$TCP_PORT/metrics")" = 200

# ---- a slow reader loses its own flows, a fast one gets them all -----------------------------
N=6000
follow fast "from-pod=team/b&to-port=7000" --count "$N" --idle 10 --timeout 60 || fail "the fast follower connects"
follow slow "from-pod=team/b&to-port=7000" --slow --stall 6 --idle 4 --timeout 60 || fail "the slow follower connects"
check "the fast and the slow follower are in" wait_for 10 followers_are 2
t0=$(date +%s.%N)
udp b a 7000 "$N" 3000
wait "$PID_fast"
t1=$(date +%s.%N)
check "the fast follower got all $N flows of the burst (in $(python3 -c "print(round($t1 - $t0, 1))") s, the slow one stalled)" \
	test "$(grep -c '"destination_port":7000' "$WORK/fast.out")" = "$N"
wait "$PID_slow"
check "the slow follower was told what it lost, and got the rest" python3 - "$WORK/slow.out" "$N" <<'PY'
import json, sys
lost = got = 0
for line in open(sys.argv[1]):
    f = json.loads(line)
    if "lost_events" in f:
        assert f["lost_events"]["source"] == "SLOW_READER", f
        lost += f["lost_events"]["num_events_lost"]
    else:
        got += 1
n = int(sys.argv[2])
assert lost > 0 and got + lost == n, (got, lost, n)
print("  slow follower: %d flows, %d lost" % (got, lost))
PY
PROM=$(api http://x/metrics)
check "/metrics: fibril_hubble_follower_lost_flows_total moved" \
	grep -q '^fibril_hubble_follower_lost_flows_total [1-9]' <<<"$PROM"
check "/metrics: no follower left" grep -q '^fibril_hubble_followers 0' <<<"$PROM"
check "/metrics: the ring (1000) overwrote flows" \
	grep -q '^fibril_hubble_ring_overwritten_total [1-9]' <<<"$PROM"
check "GET /v1/flows: the ring holds 1000 flows, overwritten counted" \
	test "$(api "http://x/v1/flows" | python3 -c 'import json,sys; j = json.load(sys.stdin); print(len(j["flows"]), j["overwritten"] > 0)')" = "1000 True"
# ---- a burst goes out in big writes: one send() per frame, not 4 KiB pieces ------------------
command -v strace >/dev/null || skip_or_fail "strace is not installed (scripts/deps.sh)"
follow big "from-pod=team/b&to-port=7000" --count 3000 --idle 10 --timeout 60 || fail "the follower 'big' connects"
strace -qq -f -e trace=sendto -e signal=none -p "$AGENT_PID" -o "$WORK/sends.txt" 2>"$WORK/strace.err" &
STRACE=$!
BG+=($STRACE)
traced() { grep -q "^TracerPid:[[:space:]]*$STRACE\$" "/proc/$AGENT_PID/status"; }
check "strace is attached to the agent" wait_for 10 traced
udp b a 7000 3000 3000
wait "$PID_big" || true
kill -INT "$STRACE" 2>/dev/null || true
wait "$STRACE" 2>/dev/null || true
check "the follower 'big' got the 3000 flows of the burst" test "$(grep -c '"destination_port":7000' "$WORK/big.out")" = 3000
BIGGEST=$(python3 -c 'import re, sys
sizes = [int(m.group(1)) for m in re.finditer(r"sendto\(.*\) = (\d+)$", open(sys.argv[1]).read(), re.M)]
print(max(sizes or [0]), len(sizes))' "$WORK/sends.txt")
check "a burst of 3000 flows left in sends of more than 16 KiB (largest, sends: $BIGGEST; 4 KiB pieces: at most 4116)" test "${BIGGEST% *}" -gt 16384
# ---- followers with one filter: matched once for all, and still served when one leaves -------
# hubble-lite keeps followers with the same filter together and works the
# match out once, at the first of them; the first leaving must hand that on
Q="from-pod=team/b&to-port=7000&protocol=udp"
follow twin1 "$Q" --count 1 --idle 10 --timeout 30 || fail "follower twin1 connects"
follow twin2 "$Q" --count 201 --idle 10 --timeout 30 || fail "follower twin2 connects"
follow twin3 "$Q" --count 201 --idle 10 --timeout 30 || fail "follower twin3 connects"
check "the three followers with one filter are in" wait_for 10 followers_are 3
udp b a 7000 1
wait "$PID_twin1" || true
check "the first of three followers with one filter left after its flow" wait_for 5 followers_are 2
udp b a 7000 200 2000
wait "$PID_twin2" || true
wait "$PID_twin3" || true
check "the two followers left of the three with one filter each got all 201 flows (twin2: $(grep -c '"destination_port":7000' "$WORK/twin2.out"), twin3: $(grep -c '"destination_port":7000' "$WORK/twin3.out"))" \
	test "$(grep -c '"destination_port":7000' "$WORK/twin2.out")" = 201 -a \
	"$(grep -c '"destination_port":7000' "$WORK/twin3.out")" = 201
check "the agent is still healthy" test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200
finish
