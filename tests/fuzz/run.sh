#!/usr/bin/env bash
# tests/fuzz/run.sh TARGET... - runs each libFuzzer target of tests/fuzz for
# FUZZ_SECONDS (default 60) from its seed corpus (tests/fuzz/corpus/NAME,
# read only; new inputs go to a work corpus in the build tree) with its
# dictionary when there is one, and prints per target the executions per
# second and the coverage (libFuzzer's final cov: and ft:). A crash, leak,
# timeout or sanitizer report fails the target: its input is kept in the
# build tree (fuzz-artifacts/NAME/) to become a regression case
# (tests/fuzz/regressions/NAME/). Ends with "N passed, N failed".
# FUZZ_JOBS (default 1) targets run at once, each on its own core (libFuzzer
# runs one process per target); the results are printed in the given order.
set -uo pipefail
: "${top_srcdir:?}" "${top_builddir:?}"
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
work=$top_builddir/tests/fuzz/work
pass=0
fail=0
results=()

# fuzz_one TARGET : runs it; its exit status in $work/TARGET.rc, its log in $work/TARGET.log
fuzz_one() {
	local t=$1 bin seeds corpus artifacts log args dict
	bin=$top_builddir/tests/fuzz/fuzz_$t
	seeds=$top_srcdir/tests/fuzz/corpus/$t
	corpus=$work/corpus/$t
	artifacts=$top_builddir/tests/fuzz/fuzz-artifacts/$t
	log=$work/$t.log
	mkdir -p "$corpus" "$artifacts" "$work/cwd/$t"
	# a target's own files (state dirs) go to a folder of its own
	args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
	      -max_len=65536 -artifact_prefix="$artifacts/")
	dict=$top_srcdir/tests/fuzz/dict/$t.dict
	[ -f "$dict" ] && args+=(-dict="$dict")
	echo "=== fuzz $t: ${seconds}s ==="
	(cd "$work/cwd/$t" && exec "$bin" "${args[@]}" "$corpus" "$seeds") >"$log" 2>&1
	echo $? >"$work/$t.rc"
}

mkdir -p "$work"
running=0
for t in "$@"; do
	if [ "$running" -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	rm -f "$work/$t.rc"
	fuzz_one "$t" &
	running=$((running + 1))
done
wait

for t in "$@"; do
	corpus=$work/corpus/$t
	artifacts=$top_builddir/tests/fuzz/fuzz-artifacts/$t
	log=$work/$t.log
	rc=$(cat "$work/$t.rc" 2>/dev/null || echo 99)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
	eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
	cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n1 | cut -d' ' -f2)
	ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -n1 | cut -d' ' -f2)
	units=$(find "$corpus" -type f | wc -l)
	line=$(printf '%-16s %9s execs %7s exec/s  cov %5s  ft %6s  corpus %5s' "$t" "${execs:-?}" \
		"${eps:-?}" "${cov:-?}" "${ft:-?}" "$units")
	if [ "$rc" -eq 0 ]; then
		pass=$((pass + 1))
		results+=("PASS $line")
	else
		fail=$((fail + 1))
		results+=("FAIL $line")
		grep -E -m1 -A30 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error:|==ERROR' "$log" || tail -n 40 "$log"
		echo "fuzz $t: FAILED (exit $rc); input kept in $artifacts/, full log $log"
		ls -1 "$artifacts" 2>/dev/null | sed 's/^/  artifact: /'
	fi
done
echo "=== fuzz results (${seconds}s per target) ==="
printf '%s\n' "${results[@]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
