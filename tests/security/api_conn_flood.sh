#!/usr/bin/env bash
# tests/security/api_conn_flood.sh - the attack: thousands of idle TCP
# connections to the agent's TCP listener (from many source addresses, and
# from one), some sending half a request and nothing more: with 9,000-15,000
# of them the unix socket (CNI ADD, IPAM) went unanswered for 22-35 s. The
# promise: the TCP listener holds at most [agent] api-max-connections
# connections, at most api-max-connections-per-source from one address
# (the rest are closed at once), an idle connection or an unfinished
# request is closed after api-idle-timeout, and the unix socket's requests
# (an IPAM allocation and release, as a CNI ADD/DEL makes) are answered
# within 1 s each all along.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"

PORT=$((20000 + ($$ + 17) % 20000))
MAXCONN=200
PERSRC=20
start_node_agent --set "agent.api-tcp-listen=127.0.0.1:$PORT" --set "agent.api-max-connections=$MAXCONN" \
	--set "agent.api-max-connections-per-source=$PERSRC" --set agent.api-idle-timeout=3s ||
	{ fail "the agent starts"; finish; exit 1; }

# the flood: N connections from 127.0.0.1..127.0.0.SOURCES, every 4th sends
# half a request; it reports how many the agent accepted and kept (not
# closed within 0.3 s), then, after HOLD seconds, how many are still open
FLOOD_PID=""
flood_stop() {
	if [ -n "$FLOOD_PID" ]; then
		kill -KILL "$FLOOD_PID" 2>/dev/null || true
		wait "$FLOOD_PID" 2>/dev/null || true
	fi
	FLOOD_PID=""
}
flood() { # flood N SOURCES HOLD OUTFILE
	ip netns exec "$NODE" python3 - "$PORT" "$@" <<'PY' &
import resource, select, socket, sys, time
port, n, sources, hold, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 256, n + 256))
socks, refused = [], 0
deadline = time.monotonic() + 20
for i in range(n):
    if time.monotonic() > deadline:
        break
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
    s.bind(("127.0.0.%d" % (1 + i % sources), 0))
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        if i % 4 == 0:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    except OSError:
        refused += 1
        s.close()
def open_count():
    alive = 0
    for s in socks:
        p = select.poll()
        p.register(s, select.POLLIN)
        if not p.poll(0):
            alive += 1
            continue
        try:
            if s.recv(1, socket.MSG_PEEK):
                alive += 1
        except OSError:
            pass
    return alive
time.sleep(0.3)  # sleep: the agent's refusals (a close at once) arrive
with open(out, "w") as f:
    f.write("connected=%d refused=%d kept=%d\n" % (len(socks), refused, open_count()))
    f.flush()
    time.sleep(hold)  # sleep: the connections stay idle this long
    f.write("after=%d\n" % open_count())
PY
	FLOOD_PID=$!
}
trap 'rc=$?; set +e; flood_stop; (exit $rc); ep_cleanup' EXIT INT TERM

# cni_like I : POST /v1/ipam (an address) then DELETE it, each timed; prints the slower
cni_like() {
	local a b
	a=$(api -o /dev/null -w '%{http_code} %{time_total}' -X POST "http://x/v1/ipam?family=ipv4&owner=flood$1/eth0")
	b=$(api -o /dev/null -w '%{http_code} %{time_total}' -X DELETE "http://x/v1/ipam?owner=flood$1/eth0")
	echo "$a $b"
}

for round in "many 8000 40" "one 3000 1"; do
	set -- $round
	what=$1
	: >"$WORK/flood.$what"
	flood "$2" "$3" 6 "$WORK/flood.$what"
	worst=0 bad=""
	for i in $(seq 1 40); do
		r=$(cni_like "$what$i")
		read -r c1 t1 c2 t2 <<<"$r"
		[ "$c1" = 201 ] && [ "$c2" = 200 ] || bad="$bad [$r]"
		for t in $t1 $t2; do
			worst=$(python3 -c "print(max($worst, $t))")
		done
		grep -q after= "$WORK/flood.$what" && break
	done
	check "$what source(s): unix IPAM requests during the flood are answered (201/200)" test -z "$bad"
	check "$what source(s): each unix IPAM request is answered within 1 s (worst ${worst}s)" \
		python3 -c "import sys; sys.exit(0 if $worst < 1 else 1)"
	await_output 60 "after=*" cat "$WORK/flood.$what" >/dev/null || true
	stats=$(cat "$WORK/flood.$what")
	echo "  flood ($what): $stats"
	kept=$(sed -n 's/.*kept=\([0-9]*\).*/\1/p' "$WORK/flood.$what")
	after=$(sed -n 's/^after=\([0-9]*\)/\1/p' "$WORK/flood.$what")
	limit=$MAXCONN
	[ "$what" = one ] && limit=$PERSRC
	check "$what source(s): the agent keeps at most $limit of the flood's connections (kept ${kept:-?})" \
		test "${kept:-99999}" -le "$limit"
	check "$what source(s): idle and unfinished connections are closed after the idle timeout (open after 6 s: ${after:-?})" \
		test "${after:-99999}" = 0
	flood_stop
done
check "the TCP listener still answers after the floods" \
	test "$(ip netns exec "$NODE" curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$PORT/livez")" = 200
finish
