#!/usr/bin/env bash
# tests/integration/lifecycle_jobs.sh - taking modules down runs no other
# module's code while it waits: a worker job still running after stop is
# waited for on its own (a module whose repeating timer ticks into the trace
# gets no tick after its stop), its completion runs before the module's
# fini, and a job that outlives the stop-timeout makes the agent say which
# module and how many jobs, and exit within the bound.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" ticker provides=t
build_module "$mods" worker requires=t
TRACE=$WORK/trace
targs=(--set ticker.trace="$TRACE" --set worker.trace="$TRACE" --set ticker.tick=10ms)

# 1. A job that finishes within the stop-timeout.
rm -f "$TRACE"
start_agent "$mods" "${targs[@]}" --set worker.stop-job=600ms --set agent.stop-timeout=5s
wait_for 5 grep -q '^tick ticker' "$TRACE" || true # the ticker runs (its ticks must stop at the stop)
rc=0; stop_agent TERM || rc=$?
check "exit 0 after the job finished (got $rc)" test "$rc" -eq 0
after_stop=$(sed -n '/^stop ticker/,$p' "$TRACE" | grep -c '^tick' || true)
check "no other module's timer ran while waiting for the job ($after_stop ticks after stop)" test "$after_stop" -eq 0
check "the job's completion ran before the module's fini" \
	test "$(grep -E '^(job-done|fini) worker' "$TRACE" | tr '\n' ' ')" = "job-done worker fini worker "

# 2. A job that outlives the stop-timeout.
rm -f "$TRACE"
start_agent "$mods" "${targs[@]}" --set worker.stop-job=30s --set agent.stop-timeout=1s
t0=$(date +%s%N)
rc=0; stop_agent TERM || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "a job outliving the stop-timeout: exit 1 (got $rc)" test "$rc" -eq 1
check "... within the bound (${ms} ms)" test "$ms" -lt 5000
check "... naming the module and the job count" contains "$(cat "$WORK/agent.log")" \
	"module worker: 1 worker job still running 1000 ms after its stop (stop-timeout)"
check "... without running its fini" test "$(grep -c '^fini worker' "$TRACE" || true)" -eq 0

finish
