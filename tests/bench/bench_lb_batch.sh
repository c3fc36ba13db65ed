#!/usr/bin/env bash
# tests/bench/bench_lb_batch.sh - N services (default 10,000, 2 backends
# each) into the lb module through one `fibril service apply -f` (PUT
# /v1/service with a JSON array, all or nothing) beside the reference in
# the same run: the same number of services through one PUT /v1/service
# each, on one keep-alive connection (as a script looping over the API
# would at best). An agent with the lb module alone in a netns of its own
# (socket-lb off: the table and the maps are what is measured), each path
# on fresh frontends. Run by tests/bench/run.sh, or by hand as root with
# top_srcdir/top_builddir set.
BENCH_NAME=bench_lb_batch
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/bench/bench_lib.sh"
bench_require python3 ip nsenter
bench_require_modules lb
bench_find_agent
N=${LB_BENCH_SERVICES:-10000}
NS=fblbt$$
bench_batch_cleanup() {
	local rc=$?
	set +e
	[ -n "$AGENT_PID" ] && kill -KILL "$AGENT_PID" 2>/dev/null
	bench_kill_netns "$NS"
	(exit "$rc")
	cleanup
}
trap bench_batch_cleanup EXIT INT TERM
ip netns add "$NS"
ip -n "$NS" link set lo up

# services NET N -> N services as JSON lines: 10.NET.x.y:80, backends 10.(NET+100).x.y:8080 and :8081
services() {
	python3 - "$1" "$2" <<'PY'
import json, sys
net, n = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    be = "10.%d.%d.%d" % (net + 100, i // 256, i % 256)
    print(json.dumps({"frontend": "10.%d.%d.%d:80" % (net, i // 256, i % 256),
                      "backends": [{"address": be + ":8080"}, {"address": be + ":8081"}]}))
PY
}
# one_each FILE : each line of FILE through its own PUT /v1/service (keep-alive)
one_each() {
	python3 - "$WORK/fibril.sock" "$1" <<'PY'
import http.client, socket, sys
class UC(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)
c = UC(sys.argv[1])
for i, line in enumerate(open(sys.argv[2])):
    c.request("PUT", "/v1/service", line, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit("PUT %d: %s" % (i, data))
PY
}
secs_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}'; }
services 96 "$N" >"$WORK/one.jsonl"
services 97 "$N" >"$WORK/batch.jsonl"

mods=$WORK/mods
bench_install_modules "$mods" lb
mapfile -t args < <(agent_args "$mods")
nsenter --net="/run/netns/$NS" "$AGENT_BIN" "${args[@]}" --set lb.socket-lb=false \
	--set agent.api-max-body=67108864 --set lb.service-map-max=65536 \
	--set lb.backend-map-max=65536 >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || bench_die "the agent did not start"

t0=$(date +%s.%N)
one_each "$WORK/one.jsonl" || bench_die "one PUT each failed"
one_s=$(secs_since "$t0")
t0=$(date +%s.%N)
out=$("$CLI" --socket "$WORK/fibril.sock" service apply -f "$WORK/batch.jsonl") ||
	bench_die "service apply failed: $out"
batch_s=$(secs_since "$t0")
[ "$out" = "Applied $N services" ] || bench_die "service apply: $out"
have=$(curl -sS --unix-socket "$WORK/fibril.sock" http://x/v1/service |
	python3 -c 'import json, sys; print(len(json.load(sys.stdin)["services"]))')
[ "$have" = $((2 * N)) ] || bench_die "$have services in the table, expected $((2 * N))"
echo "lb batch upsert (tests/bench/bench_lb_batch.sh; $N services x 2 backends, this machine's load)"
echo "   fibril service apply -f (one request, all or nothing): ${batch_s} s"
echo "   reference, one PUT /v1/service each (keep-alive):      ${one_s} s"
