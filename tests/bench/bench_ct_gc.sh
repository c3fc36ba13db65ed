#!/usr/bin/env bash
# tests/bench/bench_ct_gc.sh - the conntrack GC's cost (as root, by hand or
# from `make bench`; never by make check):
#   1. one GC pass over 100k and 1M flows (10% expired): the per-entry walk
#      the module used to make on the loop (get_next_key + lookup per
#      entry) beside the batch pass it makes now on the worker pool
#      (bench_ct_gc compare: time and bpf() calls, same run);
#   2. the loop while the agent's GC walks 1M flows: the agent (datapath
#      module, conntrack-max-tcp 1M, GC every second) in a network
#      namespace of its own, dp_conntrack filled with 1M flows, and
#      GET /v1/healthz timed (curl) before and during the passes: median
#      and max latency side by side. Nothing is asserted.
# Environment: top_srcdir, top_builddir (as make sets them); optional
# HEALTH_SAMPLES (200).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/node.sh"
BPFFS_DIR="/sys/fs/bpf/fibril-bench-ctgc-$$"
SAMPLES=${HEALTH_SAMPLES:-200}
[ "$(id -u)" = 0 ] || { echo "bench_ct_gc: run as root (BPF, a network namespace)" >&2; exit 1; }
for tool in ip nsenter curl python3; do
	command -v "$tool" >/dev/null || { echo "bench_ct_gc: $tool is not installed" >&2; exit 1; }
done
GC=$top_builddir/tests/bench/bench_ct_gc
[ -x "$GC" ] || { echo "bench_ct_gc: $GC is not built (make bench builds it)" >&2; exit 1; }
[ -f "$top_builddir/.libs/datapath.so" ] || { echo "bench_ct_gc: datapath.so is not built" >&2; exit 1; }


echo "== conntrack GC: one pass, per-entry walk (old, on the loop) vs batch (now, on the worker pool)"
for n in 100000 1000000; do
	"$GC" compare "$n" 10
done

# ---- the loop during a 1M-flow GC ------------------------------------------------------
node_modules datapath ipam-cluster-pool
node_netns_up fbgc
mapfile -t args < <(agent_args "$mods")
nsenter --net="/run/netns/$NODE" "$AGENT" "${args[@]}" \
	--set ipam-cluster-pool.node-cidr=10.203.0.0/24 \
	--set datapath.conntrack-max-tcp=1048576 --set datapath.conntrack-gc-interval=1s \
	--set datapath.conntrack-timeout-other=10m >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 1 200); do
	[ -S "$WORK/fibril.sock" ] && break
	kill -0 "$AGENT_PID" 2>/dev/null || { cat "$WORK/agent.log"; exit 1; }
	sleep 0.05 # sleep: the poll interval of a wait with a deadline
done
# health_ms N -> N latencies of GET /v1/healthz in ms, one a line
health_ms() {
	local i
	for i in $(seq 1 "$1"); do
		curl -s -o /dev/null -w '%{time_total}\n' --unix-socket "$WORK/fibril.sock" \
			http://x/v1/healthz
	done | awk '{ printf "%.3f\n", $1 * 1000 }'
}
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "median=%.2f ms p99=%.2f ms max=%.2f ms (n=%d)", v[int((NR + 1) / 2)], v[int(NR * 0.99) ? int(NR * 0.99) : 1], v[NR], NR }'; }
gc_runs() { curl -s --unix-socket "$WORK/fibril.sock" http://x/v1/datapath |
	python3 -c 'import json,sys; c=json.load(sys.stdin)["conntrack"]; print(c["gc-runs"], c["last-gc-us"], c["last-gc-bpf-calls"], c["entries-after-last-gc"])'; }
IDLE=$(health_ms "$SAMPLES" | stats)
read -r runs0 _ _ _ <<<"$(gc_runs)" || true
t0=$(date +%s.%N)
"$GC" fill "$BPFFS_DIR/dp_conntrack" 1000000 10 >/dev/null
FILL_S=$(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo "?")
BUSY=$(health_ms "$SAMPLES" | stats)
read -r runs1 us calls left <<<"$(gc_runs)"
echo "== the agent's loop while its GC walks dp_conntrack (1M flows written in ${FILL_S}s, 10% expired; a pass every second, on the worker pool)"
echo "GET /v1/healthz idle:        $IDLE"
echo "GET /v1/healthz during GC:   $BUSY ($((runs1 - runs0)) passes meanwhile; the last: $((us / 1000)) ms, $calls bpf() calls, $left flows left)"
