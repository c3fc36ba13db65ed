#!/usr/bin/env bash
# scripts/test.sh - every test: installs the dependencies, then builds and
# runs the test suite (unit tests, integration tests against the real agent,
# BPF, valgrind) with gcc and warnings as errors, builds everything with clang
# (warnings as errors) and runs the C test programs (unit, BPF, fuzz
# replays), runs the whole suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer, runs the unit tests under
# ThreadSanitizer, runs each libFuzzer target for FUZZ_SECONDS (default 20;
# tests/fuzz; as many at once as there are cores), and finishes with make
# distcheck (running the C test programs) and the Debian packages. A failed
# test program's failed checks are printed, and it is
# run once more alone: a second failure fails the suite, a pass is reported
# as FLAKY (its first log kept as *.log.first-run). Prints "N passed, N
# failed" at the end.
#
# Time: the build trees are configured all at once (configure is one
# process); `make check` runs TEST_JOBS test programs at once (default 3 a
# core: an integration test mostly waits on an agent, a route or a fake
# server, and each has its own network namespaces, pins, ports and dirs);
# while the gcc suite's tests run, the clang, sanitizer, TSan and fuzz trees
# are built in the background at the lowest priority (a build is only
# compiling: the tests keep the CPU they need). Each stage prints its time,
# and each suite its slowest tests.
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
top=$PWD
[ "$(id -u)" -eq 0 ] || { echo "run as root: the tests load BPF maps, own module files as root and use bpffs"; exit 1; }
scripts/deps.sh
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
if [ -f config.status ]; then
	echo "this tree is configured in place; run 'make distclean' first (the tests build in build/)"
	exit 1
fi
autoreconf -fi >build-autoreconf.log 2>&1 || { cat build-autoreconf.log; exit 1; }
jobs=$(nproc)
test_jobs=${TEST_JOBS:-$((jobs * 3))}
total_pass=0
total_fail=0
run_t0=$SECONDS
stage_t0=$SECONDS
# stage_done NAME : how long the stage took (the clock starts again)
stage_done() {
	echo "=== $1: $((SECONDS - stage_t0)) s (the run so far: $((SECONDS - run_t0)) s) ==="
	stage_t0=$SECONDS
}

# Commit messages since the rule began follow git's convention (a subject
# of at most 72 characters, a blank line before the body:
# scripts/check-commits.sh, also the .githooks/commit-msg hook).
echo "=== commit messages ==="
if scripts/check-commits.sh; then
	total_pass=$((total_pass + 1))
else
	total_fail=$((total_fail + 1))
	commit_rule_failed=1
fi

# configure_tree NAME CONFIGURE-ARGS... : a fresh build/NAME, configured
# (its output in build/NAME.configure.log)
configure_tree() {
	local name=$1
	shift
	rm -rf "build/$name" "build/$name".{configured,make.log,prebuild.log}
	mkdir -p "build/$name"
	(cd "build/$name" && "$top/configure" -q --enable-werror "$@") >"build/$name.configure.log" 2>&1 &&
		echo "$*" >"build/$name.configured"
}
# configured NAME : its configure succeeded (else its log is shown)
configured() {
	[ -f "build/$1.configured" ] && return 0
	cat "build/$1.configure.log"
	echo "$1: configure FAILED"
	return 1
}
# check_programs NAME : the test programs of make check in build/NAME
check_programs() { make -s -C "build/$1" print-check-programs; }
# make_tree NAME FIRST [TARGET...] : make FIRST in build/NAME, then the
# TARGETs. Not in one make: `all` is a recursive make (automake's config.h
# rule), so `make all tests/unit/x` builds libfibril_core.la's objects in two
# makes at once, which race on the same .o and .Tpo files (CI, round 3).
make_tree() {
	local name=$1 first=$2
	shift 2
	make -C "build/$name" -j"$jobs" "$first" || return 1
	[ "$#" -eq 0 ] || make -C "build/$name" -j"$jobs" "$@"
}
# prebuild NAME TARGET... : make TARGETs in build/NAME at the lowest
# priority (a head start: the stage's own make finds them built)
prebuild() {
	local name=$1
	shift
	[ -f "build/$name.configured" ] || return 0
	local first=$1
	shift
	{
		nice -n 19 make -C "build/$name" -j"$jobs" "$first" &&
			{ [ "$#" -eq 0 ] || nice -n 19 make -C "build/$name" -j"$jobs" "$@"; }
	} >>"build/$name.prebuild.log" 2>&1
}
# slowest NAME : the 10 test programs of build/NAME that took longest (the
# log is created when a test starts, its .trs written when it ends)
slowest() {
	local trs log born
	echo "$1: the slowest tests (s):"
	for trs in $(find "build/$1/tests" -name '*.trs'); do
		log=${trs%.trs}.log
		born=$(stat -c %W "$log" 2>/dev/null) || continue
		[ "$born" -gt 0 ] || continue
		echo "$(($(stat -c %Y "$trs") - born)) ${trs#build/$1/}"
	done | sort -rn | head -n 10 | sed 's/^/  /; s/\.trs$//'
}

# run_suite NAME : build build/NAME (configured) and its test programs, make
# check; check_jobs (default test_jobs) programs at once
run_suite() {
	local name=$1
	echo "=== $name: build and make check ($(cat "build/$name.configured" 2>/dev/null)) ==="
	if ! configured "$name" ||
		! make_tree "$name" all $(check_programs "$name") >"build/$name.make.log" 2>&1; then
		[ -f "build/$name.make.log" ] && cat "build/$name.make.log"
		echo "$name: build FAILED"
		total_fail=$((total_fail + 1))
		return 1
	fi
	local rc=0 tests
	# suite_tests (optional): run only these; every check program is still
	# built. Else every test, in the order of print-tests (Makefile.am: the
	# longest integration tests start first)
	tests=${suite_tests:-$(make -s -C "build/$name" print-tests)}
	if [ -z "$tests" ]; then
		echo "$name: no test to run (make print-tests)"
		total_fail=$((total_fail + 1))
		return 1
	fi
	make -C "build/$name" -j"${check_jobs:-$test_jobs}" check TESTS="$tests" || rc=$?
	if [ "$rc" -ne 0 ]; then
		# Show why each failed program failed, then run those programs once
		# more, alone: a failure that does not repeat is reported as flaky
		# (with its first run's log above); one that repeats fails the suite.
		local trs log failed=()
		for trs in $(find "build/$name/tests" -name '*.trs'); do
			grep -qE '^:test-result: (FAIL|ERROR|XPASS)' "$trs" || continue
			log=${trs%.trs}.log
			echo "--- $log: its failed checks"
			grep -E -A6 '^(FAIL|ERROR)' "$log" | head -n 80 || true
			echo "--- $log: its end"
			tail -n 40 "$log"
			cp "$log" "$log.first-run"
			failed+=("${trs#build/$name/}")
		done
		if [ "${#failed[@]}" -gt 0 ]; then
			failed=("${failed[@]%.trs}")
			echo "=== $name: running again, alone: ${failed[*]} ==="
			rc=0
			make -C "build/$name" check TESTS="${failed[*]}" || rc=$?
			local t
			for t in "${failed[@]}"; do
				if grep -q '^:test-result: PASS' "build/$name/$t.trs"; then
					echo "FLAKY: $name: $t failed once, passed when run again (first run's log: build/$name/$t.log.first-run)"
					flaky+=("$name:$t")
				fi
			done
		fi
	fi
	local p f
	p=$(grep -h '^:test-result: PASS' $(find "build/$name/tests" -name '*.trs') | wc -l)
	f=$(grep -hE '^:test-result: (FAIL|ERROR|XPASS)' $(find "build/$name/tests" -name '*.trs') | wc -l)
	echo "$name: $p test programs passed, $f failed"
	slowest "$name"
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	return $rc
}

status=${commit_rule_failed:-0}
flaky=()
echo "=== configure: gcc, clang, sanitizers, tsan, fuzz (at once) ==="
configure_tree gcc CC=gcc &
# DWARF 4: Debian 12's valgrind cannot read the DWARF 5 that clang 14 emits
configure_tree clang CC=clang CFLAGS="-g -O2 -gdwarf-4" &
configure_tree sanitizers CC=clang --enable-sanitizers &
configure_tree tsan CC=clang --enable-tsan &
configure_tree fuzz --enable-fuzz CC=clang &
wait
stage_done configure
# The C test programs (unit, BPF, fuzz replays): the clang suite and distcheck
# run only these (CPU-bound: one a core). The integration tests run in the
# gcc suite and under the sanitizers; clang's job is to build everything with
# -Werror.
quick_tests=$(check_programs gcc 2>/dev/null) || quick_tests=

# The head start: while the gcc suite's tests run (they mostly wait), the
# other trees are built in the background, in the order they are needed.
# Only building: every test still runs in the foreground, in its stage.
if configured gcc >/dev/null && make_tree gcc all $quick_tests >build/gcc.make.log 2>&1; then
	stage_done "gcc: build"
	(
		prebuild clang all $(check_programs clang 2>/dev/null) || true
		prebuild sanitizers all $(check_programs sanitizers 2>/dev/null) || true
		unit=$(check_programs tsan 2>/dev/null | tr ' ' '\n' | grep '^tests/unit/') || true
		[ -z "$unit" ] || prebuild tsan $unit || true
		prebuild fuzz fuzz-build || true
	) &
	prebuild_pid=$!
fi
run_suite gcc || status=1
stage_done "gcc suite"
if [ -n "${prebuild_pid:-}" ]; then
	wait "$prebuild_pid" || true
	stage_done "the rest of the background builds"
fi
check_jobs=$jobs suite_tests=$quick_tests run_suite clang || status=1
stage_done "clang suite"
run_suite sanitizers || status=1
stage_done "sanitizers suite"

# The ThreadSanitizer suite: the unit tests only (tests/unit/*, `make
# check-unit`: the agent, modules and integration tests are not built), so
# it fits the CI budget. A data race makes the test program exit 66.
run_tsan_suite() {
	echo "=== tsan: CC=clang --enable-tsan (unit tests only) ==="
	local rc=0
	configured tsan || { total_fail=$((total_fail + 1)); return 1; }
	make -C build/tsan -j"$jobs" check-unit >build/tsan.check.log 2>&1 || rc=$?
	local trs p f
	trs=$(find build/tsan/tests -name '*.trs' 2>/dev/null)
	p=$( [ -z "$trs" ] || grep -h '^:test-result: PASS' $trs | wc -l)
	f=$( [ -z "$trs" ] || grep -hE '^:test-result: (FAIL|ERROR|XPASS)' $trs | wc -l)
	if [ "$rc" -ne 0 ]; then
		tail -n 40 build/tsan.check.log
		for t in $trs; do
			grep -qE '^:test-result: (FAIL|ERROR|XPASS)' "$t" || continue
			echo "--- ${t%.trs}.log: its reports"
			grep -E -A14 '^(WARNING: ThreadSanitizer|FAIL|ERROR)' "${t%.trs}.log" | head -n 80 || true
		done
		[ "${f:-0}" -gt 0 ] || f=1 # the build failed
	fi
	echo "tsan: ${p:-0} test programs passed, ${f:-0} failed"
	total_pass=$((total_pass + ${p:-0}))
	total_fail=$((total_fail + ${f:-0}))
	return $rc
}
run_tsan_suite || status=1
stage_done tsan
# Fuzzing: the libFuzzer targets (tests/fuzz) built with clang in build/fuzz
# and run FUZZ_SECONDS each (whole stage a few minutes); a crash fails it.
# Each target counts once in the totals. The replay of the regression inputs
# and seed corpus already ran in each suite's make check.
# The targets run $jobs at once (libFuzzer: one process a target, one core).
echo "=== fuzz: --enable-fuzz (clang, libFuzzer), $jobs targets at once ==="
fuzz_rc=0
if ! [ -f build/fuzz.configured ] ||
	! make -C build/fuzz -j"$jobs" fuzz-build >build/fuzz.make.log 2>&1; then
	cat build/fuzz.configure.log build/fuzz.make.log 2>/dev/null | tail -60
	echo "fuzz: build FAILED"
	total_fail=$((total_fail + 1))
	status=1
else
	make -C build/fuzz fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_JOBS="$jobs" | tee build/fuzz.log || fuzz_rc=$?
	p=$(grep -c '^PASS ' build/fuzz.log || true)
	f=$(grep -c '^FAIL ' build/fuzz.log || true)
	echo "fuzz: $p targets passed, $f failed"
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	if [ "$fuzz_rc" -ne 0 ] || [ "$f" -ne 0 ] || [ "$p" -eq 0 ]; then
		status=1
	fi
fi
stage_done fuzz

echo "=== distcheck ==="
# distcheck proves the tarball builds and installs; its check runs the C test
# programs (the integration tests already ran twice above)
if make -C build/gcc -j"$jobs" distcheck TESTS="$quick_tests" >build/distcheck.log 2>&1; then
	echo "distcheck: OK"
	total_pass=$((total_pass + 1))
else
	tail -80 build/distcheck.log
	echo "distcheck: FAILED"
	total_fail=$((total_fail + 1))
	status=1
fi
stage_done distcheck

echo "=== Debian packages ==="
# builds the binary packages from distcheck's tarball and checks them
# (scripts/deb-check.sh: lintian, contents, Depends == requires, a scratch root,
# then scripts/deb-install-test.sh: dpkg -i/-r/--purge on this machine, the
# vendor package; last, so that nothing else runs while fibril is installed)
if scripts/deb-check.sh build/gcc/fibril-*.tar.gz; then
	total_pass=$((total_pass + 1))
else
	echo "Debian packages: FAILED (build/deb/build.log)"
	total_fail=$((total_fail + 1))
	status=1
fi
stage_done "Debian packages"

if [ "${#flaky[@]}" -gt 0 ]; then
	echo "flaky (failed once, passed alone; see FLAKY lines above): ${flaky[*]}"
fi
echo "$total_pass passed, $total_fail failed"
exit $status
