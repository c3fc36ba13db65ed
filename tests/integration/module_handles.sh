#!/usr/bin/env bash
# tests/integration/module_handles.sh - a module that does the natural thing
# with its handles: it subscribes, arms timers (one of them a one-shot that
# has fired and been freed), watches an fd and a signal, and releases all of
# them in stop and again in fini, twice each, never resetting its pointers.
# fini runs before the host releases what is left, and a release of an
# already-released handle does nothing: no invalid read under valgrind (or
# ASan in the sanitizer build), exit 0, and a failed start (rollback) is
# clean too.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" natural
build_module "$mods" later requires=x
build_module "$mods" provider provides=x
TRACE=$WORK/trace
args=(--set natural.handles=true --set later.handles=true --set provider.handles=true
	--set natural.trace="$TRACE" --set later.trace="$TRACE")

VG=()
if [ -z "${SAN_CFLAGS:-}" ]; then
	command -v valgrind >/dev/null || skip_or_fail "valgrind is not installed"
	VG=("$top_builddir/libtool" --mode=execute valgrind --error-exitcode=99
		--log-file="$WORK/vg.%p")
fi
vg_errors() { cat "$WORK"/vg.* 2>/dev/null | grep -E "Invalid (read|write)|ERROR SUMMARY: [1-9]" || true; }

# 1. Start, serve, stop on SIGTERM.
mapfile -t aargs < <(agent_args "$mods")
"${VG[@]}" "$AGENT" "${aargs[@]}" "${args[@]}" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || true
check "the agent starts" test -S "$WORK/fibril.sock"
api http://x/v1/status >/dev/null
# the one-shot timers have fired (their handles freed) before the stop
onces_fired() { [ "$(grep -c '^once' "$TRACE" 2>/dev/null)" = 2 ]; }
check "the one-shot timers fired" wait_for 10 onces_fired
rc=0; stop_agent TERM || rc=$?
check "stop and fini release every handle twice: exit 0 (got $rc)" test "$rc" -eq 0
bad=$(vg_errors)
check "no invalid read or write${bad:+: $bad}" test -z "$bad"
check "fini ran for every module, after stop" test "$(grep -c '^fini' "$TRACE")" -eq 2
! grep -q -E "AddressSanitizer|runtime error" "$WORK/agent.log" || { fail "sanitizer report"; cat "$WORK/agent.log"; }
rm -f "$WORK"/vg.* "$TRACE"

# 2. A failed start rolls back through the same path.
rc=0
"${VG[@]}" "$AGENT" "${aargs[@]}" "${args[@]}" --set later.fail-start=true >"$WORK/agent.log" 2>&1 || rc=$?
check "failed start: exit 1 (got $rc)" test "$rc" -eq 1
bad=$(vg_errors)
check "failed start: no invalid read or write${bad:+: $bad}" test -z "$bad"
! grep -q -E "AddressSanitizer|runtime error" "$WORK/agent.log" || { fail "sanitizer report"; cat "$WORK/agent.log"; }

# 3. A failed init rolls back too (fini of the modules initialized before it).
rm -f "$WORK"/vg.*
rc=0
"${VG[@]}" "$AGENT" "${aargs[@]}" "${args[@]}" --set later.fail-init=true >"$WORK/agent.log" 2>&1 || rc=$?
check "failed init: exit 1 (got $rc)" test "$rc" -eq 1
bad=$(vg_errors)
check "failed init: no invalid read or write${bad:+: $bad}" test -z "$bad"

finish
