#!/usr/bin/env bash
# tests/integration/valgrind_agent.sh - the agent's start/stop path under
# valgrind: a clean run (start, API traffic, SIGTERM) and a failed start
# (rollback) must both end with no leaks and no memory errors.
. "$top_srcdir/tests/lib/common.sh"

if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "SKIP: sanitizer build (valgrind cannot run ASan binaries); the plain build runs this test"
	exit 77
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }

mods=$WORK/mods
build_module "$mods" alpha provides=a
build_module "$mods" beta requires=a
install -m 0644 "$top_builddir/.libs/hello.so" "$mods/hello.so"

VG=(valgrind --leak-check=full --show-leak-kinds=definite,indirect
	--errors-for-leak-kinds=definite,indirect --error-exitcode=99 --log-file="$WORK/vg.%p")
vg_agent() { "$top_builddir/libtool" --mode=execute "${VG[@]}" "$AGENT" "$@"; }

# 1. Start, serve, stop.
mapfile -t args < <(agent_args "$mods")
# not through the function: $! must be valgrind itself (libtool execs it)
"$top_builddir/libtool" --mode=execute "${VG[@]}" "$AGENT" "${args[@]}" --set hello.interval=20ms \
	>"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || true
check "the agent starts under valgrind" test -S "$WORK/fibril.sock"
api http://x/v1/status >/dev/null
api http://x/v1/modules >/dev/null
api http://x/v1/config >/dev/null
api -X POST -d '{"k":[1,2]}' http://x/v1/tm/alpha/echo >/dev/null
api -X POST -d '{"k":' http://x/v1/tm/alpha/echo >/dev/null
api http://x/v1/nosuch >/dev/null
# hello's timer has ticked through the bus (every 20 ms); no API connection is left open
hello_ticked() { api http://x/v1/hello 2>/dev/null | grep -q '"ticks":[1-9]'; }
wait_for 20 hello_ticked || true
wait_for 10 api_idle || true
rc=0; stop_agent TERM || rc=$?
check "start/serve/stop: no leaks, no errors (exit $rc)" test "$rc" -eq 0
grep -h -E "definitely lost|ERROR SUMMARY" "$WORK"/vg.* || true
# a failed run's valgrind logs stay in the work dir (KEEP_WORK=1 keeps it),
# apart from the next run's; nothing goes to /tmp
if [ "$rc" -eq 0 ]; then rm -f "$WORK"/vg.*; else mkdir -p "$WORK/run1" && mv "$WORK"/vg.* "$WORK/run1/"; fi

# 2. A failed start rolls back without leaking.
RC=0
vg_agent "${args[@]}" --set beta.fail-start=true >"$WORK/agent.log" 2>&1 || RC=$?
check "failed start: exits 1, no leaks, no errors (exit $RC)" test "$RC" -eq 1
grep -h -E "definitely lost|ERROR SUMMARY" "$WORK"/vg.* || true

finish
