#!/usr/bin/env bash
# tests/bench/bench_bus_etcd.sh - the agent's memory under a real watch
# burst (run by tests/bench/run.sh, or by hand with top_srcdir and
# top_builddir set): a real etcd on loopback, the agent with kvstore-etcd
# and the kvprobe test module watching a prefix, and a load generator that
# puts BURST_KEYS keys (200-450 byte values, 128 per txn) into etcd under
# the module's key prefix (/fibril/). Prints
# the agent's VmRSS before the burst, its VmHWM (reset just before) and its
# VmRSS once it is idle again, and the bus queue's own high-water mark
# (kvstore watch events reach kvprobe through callbacks, not the bus).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/etcd.sh"

etcd_require curl pkg-config
BURST_KEYS=${BURST_KEYS:-50000}
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
	[ -x "$f" ] && { AGENT=$f; break; }
done

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/kvstore-etcd.so" "$mods/kvstore-etcd.so"
# shellcheck disable=SC2046
$CC -std=gnu11 -O2 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
	-I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) -o "$mods/kvprobe.so" \
	"$top_srcdir/tests/modules/kvprobe.c" -L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
chmod 0644 "$mods/kvprobe.so"

etcd_start bench
start_agent "$mods" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" >/dev/null
for _ in $(seq 1 200); do
	[ "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz 2>/dev/null)" = 200 ] && break
	sleep 0.05 # sleep: the poll interval of a wait with a deadline
done
watch=$(api -X POST 'http://x/v1/kvprobe/watch?prefix=bench/')
case $watch in *'"watch"'*) ;; *) echo "bench_bus_etcd: the watch failed: $watch" >&2; exit 1 ;; esac

status_kb() { sed -n "s/^$1:[[:space:]]*\([0-9]*\) kB/\1/p" "/proc/$AGENT_PID/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$AGENT_PID/stat"; }
sleep 0.5 # sleep: the agent settles before its RSS baseline is read
before=$(status_kb VmRSS)
echo 5 >"/proc/$AGENT_PID/clear_refs"

# The load generator: BURST_KEYS puts, 128 per txn, over one keep-alive
# connection to etcd's JSON gateway.
python3 - "$ETCD_ENDPOINT" "$BURST_KEYS" <<'PY'
import base64, http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1]); n = int(sys.argv[2])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
b64 = lambda s: base64.b64encode(s.encode()).decode()
for start in range(0, n, 128):
    ops = []
    for i in range(start, min(n, start + 128)):
        value = chr(97 + i % 26) * (200 + (i * 7919) % 251)
        ops.append({"request_put": {"key": b64("/fibril/bench/node-%05d" % i), "value": b64(value)}})
    conn.request("POST", "/v3/kv/txn", json.dumps({"success": ops}), {"Content-Type": "application/json"})
    r = conn.getresponse(); r.read()
    if r.status != 200:
        sys.exit("txn failed: %d" % r.status)
PY

# Wait until the agent has been idle for a second (all events handled).
last=-1
for _ in $(seq 1 240); do
	now=$(cpu_ticks)
	[ "$now" = "$last" ] && break
	last=$now
	sleep 1 # sleep: idle is a second without CPU time
done
peak=$(status_kb VmHWM)
after=$(status_kb VmRSS)
kill -0 "$AGENT_PID" || { tail -n 20 "$WORK/agent.log"; exit 1; }
held_max=$(api http://x/v1/bus | python3 -c 'import json,sys; print(json.load(sys.stdin)["queue"]["held_max_bytes"])')
[ -z "${BENCH_DEBUG:-}" ] || { api http://x/v1/kvprobe/events | head -c 600; echo; etcdctl_run get --prefix bench/ --keys-only | head -3; cat "$WORK/agent.log" | tail -5; }
# The events seen (the body is large: a failure to fetch it prints "?").
count=$(curl -sS --max-time 120 --unix-socket "$WORK/fibril.sock" http://x/v1/kvprobe/events 2>/dev/null |
	python3 -c 'import json,sys; print(len(json.load(sys.stdin)["events"]))' 2>/dev/null || echo "?")
stop_agent || true
etcd_stop
mb() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
echo "etcd burst keys=$BURST_KEYS events_seen=$count rss_before_kb=$before hwm_kb=$peak rss_after_kb=$after" \
	"peak_over_after_kb=$((peak - after)) bus_held_max_bytes=$held_max"
echo "   agent + kvstore-etcd + kvprobe watching, $BURST_KEYS puts into a real etcd: before $(mb "$before") MB," \
	"peak $(mb "$peak") MB, after $(mb "$after") MB (peak-after $(mb $((peak - after))) MB);" \
	"the bus queue held at most $held_max bytes"
