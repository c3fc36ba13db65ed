#!/bin/bash
# tests/bench/run.sh - the fibril benchmarks, run by `make bench` (never by
# make check). Prints, next to each goal of the performance issue: agent
# start-to-ready and stop time with 1/10/50 trivial modules, agent RSS, bus
# throughput (tests/bench/bench_bus), bus memory under a burst
# (tests/bench/bench_bus_burst) and API round trip (tests/bench/bench_api
# vs curl vs the CLI). Figures are printed, not asserted. Needs top_srcdir,
# top_builddir (and optionally CC) in the environment, as `make bench` sets.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source=../lib/common.sh
. "$top_srcdir/tests/lib/common.sh" # $WORK, cleanup trap, build_module, agent_args
BPFFS_DIR="/sys/fs/bpf/fibril-bench-$$"

# Long helpers run in the background and are waited for, so a signal is
# handled at once; this trap kills the helper (its children die with it:
# bench_api sets PR_SET_PDEATHSIG), then common.sh's cleanup kills the agent
# and removes $WORK and $BPFFS_DIR.
HELPER_PID=""
bench_cleanup() {
	local rc=$?
	set +e
	if [ -n "$HELPER_PID" ]; then
		kill -KILL "$HELPER_PID" 2>/dev/null || true
		wait "$HELPER_PID" 2>/dev/null || true
		HELPER_PID=""
	fi
	(exit "$rc") # common.sh's cleanup exits with $?
	cleanup
}
trap bench_cleanup EXIT INT TERM

REPEAT=5            # agent start/stop cycles per module count
COUNTS="1 10 50"    # module counts
BUS_EVENTS=2000000  # events per bus case
BURST_EVENTS=50000  # events of the bus memory burst
RTT_COUNT=2000      # requests for the in-process client
SPAWN_COUNT=200     # curl / CLI invocations
MAKE=${MAKE:-make}

say() { printf '%s\n' "$*"; }
die() { say "bench: $*" >&2; exit 1; }
is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | tr -d '\177')" = ELF ]; }
# goal VALUE OP LIMIT -> "met" / "NOT met"
goal() { awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
	ok = (op == "<") ? (v + 0 < l + 0) : (v + 0 > l + 0); print (ok ? "met" : "NOT met") }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
# field NAME LINE... -> the value of NAME=... in a key=value line
field() { local name=$1; shift; printf '%s\n' "$*" | tr ' ' '\n' | sed -n "s/^$name=//p" | head -n 1; }
# helper OUTFILE CMD... : run CMD in the background with stdout to OUTFILE, wait for it
helper() {
	local out=$1 rc=0
	shift
	"$@" >"$out" &
	HELPER_PID=$!
	wait "$HELPER_PID" || rc=$?
	HELPER_PID=""
	return "$rc"
}

# ---- build ------------------------------------------------------------------
"$MAKE" -s -C "$top_builddir" fibril-agent fibril tests/bench/bench_bus tests/bench/bench_ipalloc >/dev/null ||
	die "cannot build fibril-agent, fibril and tests/bench/bench_bus"
BENCH_BUS="$top_builddir/tests/bench/bench_bus"
"$MAKE" -s -C "$top_builddir" tests/bench/bench_bus_burst >/dev/null || die "cannot build tests/bench/bench_bus_burst"
BENCH_BUS_BURST="$top_builddir/tests/bench/bench_bus_burst"
if grep -q '^tests/bench/bench_api\$(EXEEXT):' "$top_builddir/Makefile" 2>/dev/null; then
	"$MAKE" -s -C "$top_builddir" tests/bench/bench_api >/dev/null || die "cannot build tests/bench/bench_api"
	BENCH_API="$top_builddir/tests/bench/bench_api"
else # not in Makefile.am yet: build it here, same warnings
	BENCH_API="$WORK/bench_api"
	$CC -std=gnu11 -O2 -D_GNU_SOURCE -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes \
		-Wmissing-prototypes -Werror -o "$BENCH_API" "$top_srcdir/tests/bench/bench_api.c" ||
		die "cannot build tests/bench/bench_api.c"
fi

# The real binaries, not libtool's wrapper scripts (a wrapper adds a shell
# start to every timing and hides the agent's pid).
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
AGENT_BIN=""
for f in "$top_builddir/fibril-agent" "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
	if is_elf "$f"; then AGENT_BIN=$f; break; fi
done
[ -n "$AGENT_BIN" ] || die "no fibril-agent binary under $top_builddir"
CLI_BIN=""
for f in "$top_builddir/fibril" "$top_builddir/.libs/lt-fibril" "$top_builddir/.libs/fibril"; do
	if is_elf "$f"; then CLI_BIN=$f; break; fi
done
[ -n "$CLI_BIN" ] || die "no fibril binary under $top_builddir"
CURL_BIN=$(command -v curl) || die "curl not found"

# N trivial modules bm-001..bm-050 (no dependencies), built two at a time per core.
NCPU=$(nproc 2>/dev/null || echo 1)
MAXN=0
for n in $COUNTS; do [ "$n" -gt "$MAXN" ] && MAXN=$n; done
pids=()
for i in $(seq 1 "$MAXN"); do
	build_module "$WORK/mods-all" "$(printf 'bm-%03d' "$i")" &
	pids+=($!)
	if [ "${#pids[@]}" -ge $((NCPU * 2)) ]; then
		for p in "${pids[@]}"; do wait "$p" || die "cannot build test module"; done
		pids=()
	fi
done
for p in "${pids[@]}"; do wait "$p" || die "cannot build test module"; done
for n in $COUNTS; do
	mkdir -p "$WORK/mods-$n"
	chmod 0755 "$WORK/mods-$n"
	for i in $(seq 1 "$n"); do cp -p "$WORK/mods-all/$(printf 'bm-%03d' "$i").so" "$WORK/mods-$n/"; done
done
mkdir -p "$WORK/state" "$WORK/run"

# ---- report header ----------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cflags=$(sed -n 's/^CFLAGS = //p' "$top_builddir/Makefile" 2>/dev/null | head -n 1)
san=$(sed -n 's/^SAN_CFLAGS = //p' "$top_builddir/Makefile" 2>/dev/null | head -n 1)
say "== fibril benchmarks ($NCPU cores, $(uname -sr), ${cpu:-unknown cpu}) =="
say "   build: CFLAGS=${cflags:-?}${san:+ SAN_CFLAGS=$san (sanitizers distort every figure)}"
say "   agent: $AGENT_BIN"
say ""

# ---- 1+2. agent start-to-ready, stop, RSS -----------------------------------
SOCK="$WORK/fibril.sock"
declare -A READY BOOT STOP RSS
# One discarded cycle first, so the page cache and the dynamic linker's
# caches are warm for every measured one.
mapfile -t args < <(agent_args "$WORK/mods-$MAXN")
helper /dev/null "$BENCH_API" agent "$SOCK" "$WORK/agent-warmup.log" -- "$AGENT_BIN" "${args[@]}" ||
	die "agent warm-up run failed: $(tail -n 5 "$WORK/agent-warmup.log" 2>/dev/null)"
for n in $COUNTS; do
	mapfile -t args < <(agent_args "$WORK/mods-$n")
	: >"$WORK/cycles-$n"
	for r in $(seq 1 "$REPEAT"); do
		helper "$WORK/cycle.out" "$BENCH_API" agent "$SOCK" "$WORK/agent-$n-$r.log" -- "$AGENT_BIN" "${args[@]}" ||
			die "agent with $n modules, run $r failed: $(tail -n 5 "$WORK/agent-$n-$r.log" 2>/dev/null)"
		line=$(cat "$WORK/cycle.out")
		[ "$(field exit "$line")" = 0 ] ||
			say "   warning: agent with $n modules exited with status $(field exit "$line") on SIGTERM"
		printf '%s\n' "$line" >>"$WORK/cycles-$n"
	done
	for k in ready_ms bootstrap_ms stop_ms rss_kb; do
		v=$(while read -r l; do field "$k" "$l"; done <"$WORK/cycles-$n" | median)
		case $k in
		ready_ms) READY[$n]=$v ;; bootstrap_ms) BOOT[$n]=$v ;;
		stop_ms) STOP[$n]=$v ;; rss_kb) RSS[$n]=$v ;;
		esac
	done
done
row() { # row LABEL ARRAY-NAME FORMAT
	local -n arr=$2
	local out="" n
	for n in $COUNTS; do out="$out$(printf "  %3s: $3" "$n" "${arr[$n]}")"; done
	printf '%s' "$out"
}
say "1. agent start-to-ready, median of $REPEAT (exec -> GET /v1/healthz 200)"
printf '   wall clock  %s   goal < 20 ms @50: %s\n' "$(row x READY '%7.2f ms')" "$(goal "${READY[$MAXN]}" '<' 20)"
printf '   bootstrap   %s   (agent'"'"'s own bootstrap.total_ms, /v1/status)\n' "$(row x BOOT '%7.2f ms')"
printf '   stop        %s   (SIGTERM -> exit)\n' "$(row x STOP '%7.2f ms')"
say ""
rss_mb() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
say "2. agent RSS after start (VmRSS, median of $REPEAT)"
line="  "
for n in $COUNTS; do line="$line$(printf '  %3s: %6s MB' "$n" "$(rss_mb "${RSS[$n]}")")"; done
printf '   VmRSS     %s   goal < 8 MB @50: %s\n' "$line" "$(goal "$(rss_mb "${RSS[$MAXN]}")" '<' 8)"
say ""

# ---- 3. bus throughput -------------------------------------------------------
say "3. bus throughput, $BUS_EVENTS events of 16 bytes, bus_flush() every 1024 (tests/bench/bench_bus)"
helper "$WORK/bus.out" "$BENCH_BUS" "$BUS_EVENTS" 1 10 || die "bench_bus failed"
printf '   %-36s %8s  %14s  %16s\n' "case" "subs" "events/s" "deliveries/s"
while read -r l; do
	mode=$(field mode "$l")
	case $mode in
	inline) what="publish+flush on one thread" ;;
	threaded) what="publisher thread + flushing thread" ;;
	*) what=$mode ;;
	esac
	printf '   %-36s %8s  %14.0f  %16.0f\n' "$what" "$(field subs "$l")" \
		"$(field events_per_s "$l")" "$(field deliveries_per_s "$l")"
done <"$WORK/bus.out"
one=$(awk '$2 == "mode=inline" && $3 == "subs=1" { sub("events_per_s=", "", $6); print $6 }' "$WORK/bus.out")
printf '   goal > 5,000,000 events/s to 1 subscriber (one thread): %.0f/s %s\n' "$one" "$(goal "$one" '>' 5000000)"
say ""

# ---- 3b. bus memory under a burst --------------------------------------------
# A watch-like burst (an update of each of $BURST_EVENTS keys, key+value
# 200-500 bytes) to a subscriber that keeps the latest value per key, with
# the bounded queue (4 MiB, the default) and with the unbounded queue of SDK
# 1.0-1.3 (limit 0) as the reference. steady: VmRSS with every key cached,
# before the burst; peak: VmHWM during it; after: VmRSS after it.
say "3b. bus memory, a burst of $BURST_EVENTS updates of 200-500 bytes to a caching subscriber (tests/bench/bench_bus_burst)"
printf '   %-31s %-22s %9s %9s %9s %11s\n' "publisher" "queue" "steady" "peak" "after" "peak-steady"
for mode in loop thread; do
	for limit in 0 4194304; do
		helper "$WORK/burst.out" "$BENCH_BUS_BURST" "$mode" "$limit" "$BURST_EVENTS" ||
			die "bench_bus_burst $mode $limit failed"
		l=$(cat "$WORK/burst.out")
		case $mode in loop) who="loop thread, no return to loop" ;; *) who="another thread, loop delivers" ;; esac
		case $limit in 0) q="unbounded (1.0, ref.)" ;; *) q="bounded $((limit / 1048576)) MiB" ;; esac
		over=$(field peak_over_steady_kb "$l")
		printf '   %-31s %-22s %6s MB %6s MB %6s MB %8s MB' "$who" "$q" \
			"$(rss_mb "$(field rss_before_kb "$l")")" "$(rss_mb "$(field hwm_kb "$l")")" \
			"$(rss_mb "$(field rss_after_kb "$l")")" "$(rss_mb "$over")"
		[ "$limit" = 0 ] && printf '\n' ||
			printf '  goal <= 16 MB: %s\n' "$(goal "$over" '<' 16385)"
		[ "$(field hwm_reset "$l")" = 1 ] || say "   (VmHWM could not be reset: the peak includes the setup)"
	done
done
# The real case: the agent with kvstore-etcd and kvprobe watching while
# $BURST_EVENTS keys are put into a real etcd (kvstore watch events reach
# the module through callbacks: this shows what the bus does not carry).
if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
	"$MAKE" -s -C "$top_builddir" kvstore-etcd.la >/dev/null || die "cannot build kvstore-etcd"
	helper "$WORK/burst-etcd.out" env BURST_KEYS="$BURST_EVENTS" bash "$top_srcdir/tests/bench/bench_bus_etcd.sh" ||
		die "bench_bus_etcd.sh failed: $(tail -n 5 "$WORK/burst-etcd.out")"
	tail -n 1 "$WORK/burst-etcd.out"
else
	say "   (etcd not installed: the agent + kvstore-etcd case is not measured)"
fi
say ""

# ---- 4. API round trip -------------------------------------------------------
AGENT=$AGENT_BIN
start_agent "$WORK/mods-$MAXN" || die "cannot start the agent"
for i in $(seq 1 200); do
	code=$("$CURL_BIN" -s -o /dev/null -w '%{http_code}' --max-time 2 --unix-socket "$SOCK" \
		http://localhost/v1/healthz 2>/dev/null || true)
	[ "$code" = 200 ] && break
	sleep 0.05 # sleep: the poll interval of a wait with a deadline
done
[ "$code" = 200 ] || die "agent not healthy (healthz $code)"
"$CLI_BIN" --socket "$SOCK" status -o json >/dev/null || die "fibril status failed"
helper "$WORK/keep.out" "$BENCH_API" rtt "$SOCK" "$RTT_COUNT" || die "bench_api rtt failed"
helper "$WORK/fresh.out" "$BENCH_API" rtt-new "$SOCK" "$RTT_COUNT" || die "bench_api rtt-new failed"
helper "$WORK/curl.out" "$BENCH_API" spawn "$SPAWN_COUNT" -- "$CURL_BIN" -sS --fail --max-time 5 \
	--unix-socket "$SOCK" -o /dev/null http://localhost/v1/status || die "curl timing failed"
helper "$WORK/cli.out" "$BENCH_API" spawn "$SPAWN_COUNT" -- "$CLI_BIN" --socket "$SOCK" status -o json ||
	die "CLI timing failed"
keep=$(cat "$WORK/keep.out") fresh=$(cat "$WORK/fresh.out")
curl_t=$(cat "$WORK/curl.out") cli_t=$(cat "$WORK/cli.out")
stop_agent || say "   warning: agent exited with status $? on SIGTERM"
us_ms() { awk -v u="$1" 'BEGIN { printf "%.3f", u / 1000 }'; }
say "4. API round trip, GET /v1/status (agent with $MAXN modules, body $(field bytes "$keep") bytes)"
printf '   %-44s %10s %10s %10s\n' "method" "p50 ms" "p99 ms" "mean ms"
api_row() {
	printf '   %-44s %10s %10s %10s\n' "$1" "$(us_ms "$(field p50_us "$2")")" \
		"$(us_ms "$(field p99_us "$2")")" "$(us_ms "$(field mean_us "$2")")"
}
api_row "C client, keep-alive (n=$RTT_COUNT)" "$keep"
api_row "C client, new connection each (n=$RTT_COUNT)" "$fresh"
api_row "curl --unix-socket, process each (n=$SPAWN_COUNT)" "$curl_t"
api_row "fibril status -o json, process each (n=$SPAWN_COUNT)" "$cli_t"
p50=$(us_ms "$(field p50_us "$keep")")
printf '   goal < 1 ms p50 direct: %s ms (keep-alive), %s ms (new connection) %s\n' "$p50" \
	"$(us_ms "$(field p50_us "$fresh")")" "$(goal "$p50" '<' 1)"
say "   (curl and CLI rows are dominated by process start: exec, dynamic linking, libcurl init)"
say ""

# ---- 5. address allocator ------------------------------------------------------
say "5. ip allocator, /16 pool, allocate+release per second (tests/bench/bench_ipalloc)"
helper "$WORK/ipalloc.out" "$top_builddir/tests/bench/bench_ipalloc" 5000000 || die "bench_ipalloc failed"
sed '1,/^$/d; s/^/   /' "$WORK/ipalloc.out"

# ---- 6. IPAM -----------------------------------------------------------------
"$MAKE" -s -C "$top_builddir" ipam-cluster-pool.la ipam-api.la kvstore-etcd.la >/dev/null ||
	die "cannot build the ipam modules"
say ""
helper "$WORK/ipam.out" bash "$top_srcdir/tests/bench/bench_ipam_api.sh" || die "bench_ipam_api.sh failed"
cat "$WORK/ipam.out"

# ---- 7-9. pods, datapath, Kubernetes (root: namespaces, BPF) ---------------
# Each is its own script (also runnable by hand); they print their tables.
"$MAKE" -s -C "$top_builddir" endpoint.la datapath.la fibril-cni ipam-k8s-podcidr.la k8s.la nodes.la \
	tests/bench/bench_dp_rr tests/bench/bench_ct_gc tests/bench/bench_nat_gc tests/bench/bench_ct_prog tests/bench/bench_identity lb.la tests/bench/bench_lb \
	health.la egressgw.la >/dev/null ||
	die "cannot build the pod networking modules"
"$MAKE" -s -C "$top_builddir" ipam-api.la policy.la hubble-lite.la tests/bench/bench_flows \
	tests/bench/bench_ws_follow >/dev/null ||
	die "cannot build hubble-lite and its benchmark"
for b in bench_cni.sh bench_endpoints.sh bench_datapath.sh bench_crossnode.sh bench_ct_gc.sh bench_nat_gc.sh \
	bench_masq.sh bench_ct.sh bench_k8s.sh bench_rss.sh bench_cluster.sh bench_crd.sh bench_flows.sh bench_health.sh \
	bench_lb.sh bench_lb_batch.sh bench_lb_k8s_restart.sh bench_egw_failover.sh \
	bench_crd_propagation.sh bench_crd_scale.sh; do
	say ""
	helper "$WORK/$b.out" bash "$top_srcdir/tests/bench/$b" || die "$b failed: $(tail -n 5 "$WORK/$b.out")"
	cat "$WORK/$b.out"
done
# ---- 10. network policy (1,000 endpoints and policies; root) -----------------
"$MAKE" -s -C "$top_builddir" policy.la >/dev/null || die "cannot build the policy module"
say ""
helper "$WORK/bench_policy.out" bash "$top_srcdir/tests/bench/bench_policy.sh" ||
	die "bench_policy.sh failed: $(tail -n 5 "$WORK/bench_policy.out")"
cat "$WORK/bench_policy.out"
