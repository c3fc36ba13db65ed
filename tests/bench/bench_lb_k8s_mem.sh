#!/usr/bin/env bash
# tests/bench/bench_lb_k8s_mem.sh - the lb module's Services from Kubernetes
# at scale (issue 23): N Services (default 10,000) and N EndpointSlices (3
# endpoints each) bulk-loaded into the fake kube-apiserver
# (tests/k8s/apiserver.py); an agent in a netns of its own with the k8s
# and lb modules: the agent's RSS after all N are
# programmed and the time from the agent's start to all programmed
# (goals < 64 MB, < 2 s), beside the reference in the same run: an agent
# with lb alone given the same N services x 3 backends through one batch
# (PUT /v1/service with a JSON array). Also printed: the agent's CPU time
# until all are programmed, when each phase ended (ready, each list
# synced, lb's sync: from the agent's log), the API server's CPU meanwhile,
# and the floor: the server's own time to serve the same LIST pages to a
# client that only reads them (tests/bench/bench_lb_k8s_floor.py). "All
# programmed" is watched through /metrics (fibril_lb_services), which
# costs the agent little, not by listing the 10,000 services. Run by hand
# as root with top_srcdir/top_builddir set; LB_BENCH_PERF=FILE records the
# k8s agent with perf record -g until all are programmed;
# LB_BENCH_PAGE_SIZE sets [k8s] page-size (else its default).
BENCH_NAME=bench_lb_k8s_mem
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/bench/bench_lib.sh"
bench_require python3 ip nsenter curl
bench_require_modules lb k8s
bench_find_agent
N=${LB_BENCH_SERVICES:-10000}
NS=fblbk$$
bench_mem_cleanup() {
	local rc=$?
	set +e
	[ -n "$AGENT_PID" ] && kill -KILL "$AGENT_PID" 2>/dev/null
	bench_kill_netns "$NS"
	(exit "$rc")
	cleanup
}
trap bench_mem_cleanup EXIT INT TERM
ip netns add "$NS"
ip -n "$NS" link set lo up

cp "$top_srcdir/tests/k8s/apiserver.py" "$top_srcdir/tests/k8s/apiserver_crd.py" \
	"$top_srcdir/tests/k8s/control.py" "$top_srcdir/tests/bench/bench_lb_k8s_floor.py" "$WORK/"
python3 "$WORK/control.py" gen --pods 0 --nodes 1 --namespaces 20 --services "$N" \
	--endpointslices "$N" >"$WORK/objects.json"
TOKEN=bench-$$
nsenter --net="/run/netns/$NS" python3 "$WORK/apiserver.py" --port 0 --token "$TOKEN" --service-cidr 10.96.0.0/12 \
	--load "$WORK/objects.json" >"$WORK/api.out" 2>"$WORK/api.err" &
echo $! >"$WORK/api.pid"
wait_for 300 grep -q LISTENING "$WORK/api.out" || bench_die "the API server did not start: $(cat "$WORK/api.err")"
PORT=$(awk '/LISTENING/ {print $2; exit}' "$WORK/api.out")
cat >"$WORK/kubeconfig" <<EOK
apiVersion: v1
kind: Config
current-context: b
clusters: [{name: f, cluster: {server: "http://127.0.0.1:$PORT"}}]
contexts: [{name: b, context: {cluster: f, user: u}}]
users: [{name: u, user: {token: $TOKEN}}]
EOK

rss() { awk -v k="$1:" '$1 == k {printf "%.1f", $2 / 1024}' "/proc/$AGENT_PID/status"; }
n_services() {
	curl -sS --max-time 30 --unix-socket "$WORK/fibril.sock" http://x/v1/service 2>/dev/null |
		python3 -c 'import json, sys; print(len(json.load(sys.stdin)["services"]))' 2>/dev/null
}
# the gauge of services programmed (cheap to read while the agent works)
n_programmed() {
	curl -sS --max-time 30 --unix-socket "$WORK/fibril.sock" http://x/metrics 2>/dev/null |
		awk '$1 == "fibril_lb_services" {printf "%d", $2}'
}
# cpu_secs PID : the process's user + system CPU seconds so far
cpu_secs() {
	awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' "/proc/$1/stat"
}
# log_at PATTERN : seconds from T0 to the agent's first log line matching it
log_at() {
	local ts
	ts=$(grep -m1 -E "$1" "$WORK/agent.log" | cut -d' ' -f1)
	[ -n "$ts" ] || { echo "?"; return; }
	awk -v a="$T0" -v b="$(date -d "$ts" +%s.%N)" 'BEGIN {printf "%.2f", b - a}'
}
# agent MODULE... : start an agent with those modules in the netns; T0 its start
agent() {
	local mods=$WORK/mods-$*
	mods=${mods// /-}
	bench_install_modules "$mods" "$@"
	mapfile -t args < <(agent_args "$mods")
	rm -rf "$WORK/state" "$BPFFS_DIR" "$WORK/fibril.sock"
	local k8s=()
	[[ " $* " == *" k8s "* ]] && k8s=(--set "k8s.kubeconfig=$WORK/kubeconfig"
		--set k8s.node-name=node-0 --set k8s.sync-timeout=120s
		${LB_BENCH_PAGE_SIZE:+--set "k8s.page-size=$LB_BENCH_PAGE_SIZE"})
	T0=$(date +%s.%N)
	# nsenter execs the agent: $! is the agent itself
	nsenter --net="/run/netns/$NS" "$AGENT_BIN" "${args[@]}" --set lb.socket-lb=false \
		--set agent.api-max-body=67108864 --set "agent.log-level=${LB_BENCH_LOG_LEVEL:-info}" "${k8s[@]}" >"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 300 test -S "$WORK/fibril.sock" || bench_die "the agent did not start: $(tail -5 "$WORK/agent.log")"
}
# LB_BENCH_LOGDIR=DIR keeps each agent's log there (agent-k8s.log, agent-api.log)
stop() {
	kill -TERM "$AGENT_PID"
	wait "$AGENT_PID" 2>/dev/null || true
	AGENT_PID=""
	[ -z "${LB_BENCH_LOGDIR:-}" ] || cp "$WORK/agent.log" "$LB_BENCH_LOGDIR/agent-$1.log"
}
secs_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}'; }
is_n() { [ "$("$@")" = "$WANT" ]; }

echo "lb: $N Services + $N EndpointSlices from Kubernetes (tests/bench/bench_lb_k8s_mem.sh; load average $(cut -d' ' -f1-3 /proc/loadavg))"
API_PID=$(cat "$WORK/api.pid")
api_cpu0=$(cpu_secs "$API_PID")
agent k8s lb
PERF_PID=""
if [ -n "${LB_BENCH_PERF:-}" ]; then # where the time goes: perf report -i $LB_BENCH_PERF
	perf record -g -F 999 -p "$AGENT_PID" -o "$LB_BENCH_PERF" >"$WORK/perf.log" 2>&1 &
	PERF_PID=$!
fi
WANT=$N
wait_alive "$AGENT_PID" 300 is_n n_programmed || bench_die "lb did not program $N services: $(n_programmed)"
prog_s=$(secs_since "$T0")
agent_cpu=$(cpu_secs "$AGENT_PID")
api_cpu=$(awk -v a="$api_cpu0" -v b="$(cpu_secs "$API_PID")" 'BEGIN {printf "%.2f", b - a}')
if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" 2>/dev/null || true; fi
is_n n_services || bench_die "GET /v1/service does not list $N services: $(n_services)"
read -r parsed scanned < <(curl -sS --max-time 30 --unix-socket "$WORK/fibril.sock" http://x/v1/service |
	python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["k8s-parsed"], d["k8s-scanned"])')
echo "   k8s + lb: all $N programmed ${prog_s} s after the start (goal < 2 s), RSS $(rss VmRSS) MB (peak $(rss VmHWM) MB; goal < 64 MB), agent CPU ${agent_cpu} s"
echo "     phases (s after the start): ready $(log_at 'agent ready'), services listed $(log_at 'k8s: services synced'), endpointslices listed $(log_at 'k8s: endpointslices synced'), lb synced $(log_at 'lb: Services and EndpointSlices synced'); the API server's CPU meanwhile ${api_cpu} s; texts parsed ${parsed}, of them read in place ${scanned}"
stop k8s
page=${LB_BENCH_PAGE_SIZE:-$("$AGENT_BIN" --set "agent.module-dir=$WORK/mods-k8s-lb" --print-config 2>/dev/null | awk -F' *= *' '/^\[k8s\]/ {k = 1; next} /^\[/ {k = 0} k && $1 == "page-size" {print $2}')}
[ -n "$page" ] || page=500
read -r floor_s floor_pages floor_bytes < <(nsenter --net="/run/netns/$NS" python3 "$WORK/bench_lb_k8s_floor.py" \
	"$PORT" "$TOKEN" "$page" /api/v1/services /apis/discovery.k8s.io/v1/endpointslices) ||
	bench_die "the floor measurement failed"
echo "   floor: the API server alone serves the same $floor_pages pages of $page ($((floor_bytes / 1048576)) MB) to a reader in ${floor_s} s"

python3 - "$N" >"$WORK/batch.json" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps([{"frontend": "10.96.%d.%d:80" % (i // 256, i % 256),
                   "backends": [{"address": "10.%d.%d.%d:80" % (j, i // 250 % 250, i % 250 + 2)} for j in range(3)]}
                  for i in range(n)]))
PY
agent lb
"$CLI" --socket "$WORK/fibril.sock" service apply -f "$WORK/batch.json" >/dev/null || bench_die "the batch failed"
api_s=$(secs_since "$T0")
echo "   reference, lb alone, the same $N services x 3 backends through one batch: ${api_s} s after the start, RSS $(rss VmRSS) MB (peak $(rss VmHWM) MB)"
stop api
