#!/usr/bin/env bash
# scripts/test.sh - every test: installs the dependencies, then builds and
# runs the test suite (unit tests, integration tests against the real agent,
# BPF, valgrind) with gcc and warnings as errors, builds everything with clang
# (warnings as errors) and runs the C test programs (unit, BPF, fuzz
# replays), runs the whole suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer, runs the unit tests under
# ThreadSanitizer, runs each libFuzzer target for FUZZ_SECONDS (default 20;
# tests/fuzz), and finishes with make distcheck (running the C test
# programs). A failed test program's
# failed checks are printed, and it is
# run once more alone: a second failure fails the suite, a pass is reported
# as FLAKY (its first log kept as *.log.first-run). Prints "N passed, N
# failed" at the end.
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
total_pass=0
total_fail=0

# run_suite NAME CONFIGURE-ARGS... : configure in build/NAME, build, make check
run_suite() {
	local name=$1
	shift
	echo "=== $name: configure $* ==="
	rm -rf "build/$name"
	mkdir -p "build/$name"
	(cd "build/$name" && "$top/configure" -q --enable-werror "$@")
	if ! make -C "build/$name" -j"$jobs" >"build/$name.make.log" 2>&1; then
		cat "build/$name.make.log"
		echo "$name: build FAILED"
		total_fail=$((total_fail + 1))
		return 1
	fi
	local rc=0
	# suite_tests (optional): run only these; every check program is still built
	make -C "build/$name" -j"$jobs" check ${suite_tests:+TESTS="$suite_tests"} || rc=$?
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
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	return $rc
}

status=0
flaky=()
run_suite gcc CC=gcc || status=1
# DWARF 4: Debian 12's valgrind cannot read the DWARF 5 that clang 14 emits
# The C test programs (unit, BPF, fuzz replays): the clang suite and distcheck
# run only these. The integration tests run in the gcc suite and under the
# sanitizers; clang's job is to build everything with -Werror.
quick_tests=$(make -s -C build/gcc print-check-programs) || quick_tests=
suite_tests=$quick_tests run_suite clang CC=clang CFLAGS="-g -O2 -gdwarf-4" || status=1
run_suite sanitizers CC=clang --enable-sanitizers || status=1

# The ThreadSanitizer suite: the unit tests only (tests/unit/*, `make
# check-unit`: the agent, modules and integration tests are not built), so
# it fits the CI budget. A data race makes the test program exit 66.
run_tsan_suite() {
	echo "=== tsan: configure CC=clang --enable-tsan (unit tests only) ==="
	rm -rf build/tsan
	mkdir -p build/tsan
	(cd build/tsan && "$top/configure" -q --enable-werror CC=clang --enable-tsan)
	local rc=0
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
# Fuzzing: the libFuzzer targets (tests/fuzz) built with clang in build/fuzz
# and run FUZZ_SECONDS each (whole stage a few minutes); a crash fails it.
# Each target counts once in the totals. The replay of the regression inputs
# and seed corpus already ran in each suite's make check.
echo "=== fuzz: configure --enable-fuzz (clang, libFuzzer) ==="
rm -rf build/fuzz
mkdir -p build/fuzz
fuzz_rc=0
if ! (cd build/fuzz && "$top/configure" -q --enable-werror --enable-fuzz CC=clang) >build/fuzz.configure.log 2>&1 ||
	! make -C build/fuzz -j"$jobs" fuzz-build >build/fuzz.make.log 2>&1; then
	cat build/fuzz.configure.log build/fuzz.make.log 2>/dev/null | tail -60
	echo "fuzz: build FAILED"
	total_fail=$((total_fail + 1))
	status=1
else
	make -C build/fuzz fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-20}" | tee build/fuzz.log || fuzz_rc=$?
	p=$(grep -c '^PASS ' build/fuzz.log || true)
	f=$(grep -c '^FAIL ' build/fuzz.log || true)
	echo "fuzz: $p targets passed, $f failed"
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	if [ "$fuzz_rc" -ne 0 ] || [ "$f" -ne 0 ] || [ "$p" -eq 0 ]; then
		status=1
	fi
fi

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

if [ "${#flaky[@]}" -gt 0 ]; then
	echo "flaky (failed once, passed alone; see FLAKY lines above): ${flaky[*]}"
fi
echo "$total_pass passed, $total_fail failed"
exit $status
