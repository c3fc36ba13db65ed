#!/bin/bash
# tests/bench/bench_health.sh - the health module's probe round for 100 and
# 1,000 peers, beside `ping` of the same peers in the same run. One network
# namespace with its own etcd (on its loopback) and one agent (kvstore-etcd,
# nodes, health); the peers are node records written straight into the
# registry, each with its own loopback address (127.1.x.y: the kernel
# answers their echo requests) and the agent's own responder listening on
# 0.0.0.0 answering their HTTP probes - so a round is what one node of an
# N-node cluster does per interval: N echo requests, N HTTP probes sent and
# N answered. Figures: the round's wall time (its start to its last probe's
# answer: fibril_health_round_duration_seconds) and the agent's CPU time per
# round (/proc/PID/task/*/schedstat over ROUNDS intervals, the agent's other
# work - its etcd keepalives, two scrapes - included);
# reference: `ping -c1 -W1` of each peer one after the other (wall and CPU
# of the ping processes), and a single `ping -c1` for one peer.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
BENCH_NAME=bench_health . "$top_srcdir/tests/bench/bench_lib.sh"
die() { bench_die "$@"; }
SIZES=${HEALTH_PEERS:-"100 1000"}
ROUNDS=${HEALTH_ROUNDS:-5}
MODS=(kvstore-etcd nodes health)
bench_require ip nsenter ping etcd python3 curl
bench_require_modules "${MODS[@]}"
bench_find_agent
NS=fbh-$$
bench_cleanup() {
	local rc=$?
	set +e
	bench_kill_netns "$NS"
	(exit "$rc")
	cleanup
}
trap bench_cleanup EXIT INT TERM
ip netns add "$NS"
ip -n "$NS" link set lo up
nsx() { ip netns exec "$NS" "$@"; }
bench_install_modules "$WORK/mods" "${MODS[@]}"

ETCD_PORT=$((23000 + $$ % 5000))
ETCD=http://127.0.0.1:$ETCD_PORT
nsx etcd --name bh --data-dir "$WORK/etcd" --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
	--listen-peer-urls http://127.0.0.1:$((ETCD_PORT + 1)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT + 1)) \
	--initial-cluster bh=http://127.0.0.1:$((ETCD_PORT + 1)) --logger zap --log-outputs stderr >"$WORK/etcd.log" 2>&1 &
echo $! >"$WORK/etcd.pid"
wait_quiet 10 nsx curl -sf "$ETCD/health" || true
nsx curl -sf "$ETCD/health" >/dev/null || die "etcd did not start: $(tail -5 "$WORK/etcd.log")"

addr() { echo "127.1.$(($1 / 250)).$(($1 % 250 + 1))"; }
# the registry: N node records (no lease: they stay), written through the JSON gateway
load_peers() {
	nsx python3 - "$ETCD" "$1" <<'EOF'
import base64, json, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
def call(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=10).read()
b64 = lambda s: base64.b64encode(s.encode()).decode()
prefix = "/fibril/state/nodes/v1/"
call("/v3/kv/deleterange", {"key": b64(prefix), "range_end": b64(prefix[:-1] + "0")})
for i in range(n):
    name = "peer-%d" % i
    rec = {"name": name, "ipv4": "127.1.%d.%d" % (i // 250, i % 250 + 1), "pod-cidrs": [], "updated": int(time.time())}
    call("/v3/kv/put", {"key": b64(prefix + name), "value": b64(json.dumps(rec))})
EOF
}
api() { curl -sS --max-time 10 --unix-socket "$WORK/fibril.sock" "$@"; }
hget() { api http://x/v1/health | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
# "COUNT SUM" of fibril_health_round_duration_seconds
round_stats() {
	api http://x/metrics | awk '$1 == "fibril_health_round_duration_seconds_count" {c = $2}
		$1 == "fibril_health_round_duration_seconds_sum" {s = $2} END {print c + 0, s + 0}'
}
# the agent's CPU time in ns, every thread (schedstat: nanoseconds, not ticks)
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%d", s}'; }

printf '%-6s %-34s %12s %14s %16s\n' peers what "wall ms" "CPU ms" "per peer us CPU"
for n in $SIZES; do
	load_peers "$n" || die "cannot write $n node records"
	interval=$(( n >= 1000 ? 2000 : 1000 ))
	rm -f "$WORK/fibril.sock"
	# nsenter execs the agent itself, so $! is its pid (ip netns exec forks)
	nsenter --net=/run/netns/"$NS" "$AGENT_BIN" --set agent.module-dir="$WORK/mods" --set agent.socket="$WORK/fibril.sock" \
		--set agent.state-dir="$WORK/state" --set agent.run-dir="$WORK/run" --set agent.node-name=self \
		--set kvstore-etcd.endpoints="$ETCD" --set nodes.node-ip=127.0.0.1 --set health.endpoint=false \
		--set health.listen-address=0.0.0.0 --set health.port=$((30000 + ($$ + n) % 20000)) \
		--set "health.interval=${interval}ms" >"$WORK/agent-$n.log" 2>&1 &
	pid=$!
	echo "$pid" >"$WORK/agent.pid"
	wait_alive "$pid" 15 test -S "$WORK/fibril.sock" || true
	# wait until every peer is known and a whole round answered
	ok=""
	for _ in $(seq 1 120); do
		if [ "$(hget "len(j['peers'])" 2>/dev/null)" = $((n + 1)) ] &&
			[ "$(hget "sum(1 for p in j['peers'] if p['reachable'])" 2>/dev/null)" = $((n + 1)) ]; then ok=1; break; fi
		sleep 0.5 # sleep: the poll interval of a wait with a deadline
	done
	[ -n "$ok" ] || die "$n peers: not all reachable: $(hget "j['unreachable'][:5], len(j['peers'])" 2>&1); $(tail -3 "$WORK/agent-$n.log")"
	# measured between two scrapes of /metrics with nothing in between: the
	# round histogram's sum and count, and the agent's CPU time
	read -r c0 s0 < <(round_stats); t0=$(cpu_ns "$pid")
	sleep "$(python3 -c "print($ROUNDS * $interval / 1000)")" # sleep: the measurement window (ROUNDS rounds)
	read -r c1 s1 < <(round_stats); t1=$(cpu_ns "$pid")
	[ "$c1" -gt "$c0" ] || die "$n peers: no round concluded in $ROUNDS intervals"
	cpu=$(python3 -c "print('%.2f' % (($t1 - $t0) / 1e6 / ($c1 - $c0)))")
	wall=$(python3 -c "print('%.2f' % (($s1 - $s0) * 1000 / ($c1 - $c0)))")
	printf '%-6s %-34s %12s %14s %16s\n' "$n" "health round (ICMP+HTTP per peer)" "$wall" "$cpu" \
		"$(python3 -c "print('%.1f' % ($cpu * 1000 / $n))")"
	kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
	# the reference: ping each peer once, one after the other
	nsx python3 - "$n" <<'EOF'
import resource, subprocess, sys, time
n = int(sys.argv[1])
addrs = ["127.1.%d.%d" % (i // 250, i % 250 + 1) for i in range(n)]
t0 = time.monotonic(); r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
bad = sum(subprocess.call(["ping", "-c1", "-W1", "-n", "-q", a], stdout=subprocess.DEVNULL) != 0 for a in addrs)
wall = (time.monotonic() - t0) * 1000; r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) * 1000
print("%-6d %-34s %12.2f %14.2f %16.1f%s" % (n, "reference: ping -c1 each (ICMP only)", wall, cpu, cpu * 1000 / n,
      "  (%d failed)" % bad if bad else ""))
EOF
done
