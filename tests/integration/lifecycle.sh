#!/usr/bin/env bash
# tests/integration/lifecycle.sh - the module lifecycle end to end: init and
# start in dependency order, stop and fini in reverse on SIGTERM and SIGINT,
# rollback when a start fails (sync, async, timeout), the watchdog on a hung
# hook, a second signal forcing exit, health turning /v1/healthz to 503, and
# bootstrap timings in /v1/status.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" alpha provides=a
build_module "$mods" beta provides=b requires=a
build_module "$mods" gamma requires=b wants=a
TRACE=$WORK/trace
trace_args=(--set alpha.trace="$TRACE" --set beta.trace="$TRACE" --set gamma.trace="$TRACE")
trace_text() { tr '\n' ' ' <"$TRACE" | sed 's/ $//'; }

# 1. Normal start and graceful stop on SIGTERM.
rm -f "$TRACE"
start_agent "$mods" "${trace_args[@]}"
status=$(api http://x/v1/status)
check "status lists the modules in start order" python3 - "$status" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
names = [m["name"] for m in s["modules"]]
assert names == ["alpha", "beta", "gamma"], names
assert all(m["state"] == "running" for m in s["modules"])
assert all(m["timings"]["init_ms"] is not None and m["timings"]["start_ms"] is not None for m in s["modules"])
assert s["bootstrap"]["total_ms"] > 0 and s["state"] == "running"
PY
check "healthz is 200 when all modules are OK" test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200
rc=0; stop_agent TERM || rc=$?
check "SIGTERM stops the agent with status 0" test "$rc" -eq 0
check "init/start in order, stop/fini in reverse" test "$(trace_text)" = \
	"init alpha init beta init gamma start alpha start beta start gamma stop gamma stop beta stop alpha fini gamma fini beta fini alpha"
check "the socket is removed on stop" test ! -e "$WORK/fibril.sock"

# 2. SIGINT stops gracefully too.
rm -f "$TRACE"
start_agent "$mods" "${trace_args[@]}"
rc=0; stop_agent INT || rc=$?
check "SIGINT stops the agent with status 0" test "$rc" -eq 0
check "SIGINT runs the stop hooks" contains "$(trace_text)" "stop gamma stop beta stop alpha"

# 3. A start failure rolls back what started, in reverse, and names it all.
rm -f "$TRACE"
run_agent "$mods" "${trace_args[@]}" --set gamma.fail-start=true
check "a failed start exits non-zero" test "$RC" -ne 0
check "the log names the module, its error and what was stopped" contains "$OUT" \
	"module gamma failed to start: start failure requested by config; stopped: beta, alpha"
check "started modules are stopped in reverse, the failed one is not" test "$(trace_text)" = \
	"init alpha init beta init gamma start alpha start beta start gamma stop beta stop alpha fini gamma fini beta fini alpha"

# 4. The first module failing: nothing else was started.
rm -f "$TRACE"
run_agent "$mods" "${trace_args[@]}" --set alpha.fail-start=true
check "first module failing says nothing else was started" contains "$OUT" \
	"module alpha failed to start: start failure requested by config; nothing else was started"

# 5. An init failure stops before anything starts.
rm -f "$TRACE"
run_agent "$mods" "${trace_args[@]}" --set beta.fail-init=true
check "an init failure exits non-zero naming the module" contains "$OUT" "module beta ($mods/beta.so): init failed: init failure requested by config"
check "an init failure starts nothing and finis what was initialized" test "$(trace_text)" = "init alpha init beta fini alpha"

# 6. Asynchronous start: the agent waits on the loop, then carries on.
rm -f "$TRACE"
start_agent "$mods" "${trace_args[@]}" --set beta.async-start=300ms
check "an asynchronous start completes before the next module starts" contains "$(trace_text)" "start beta started beta start gamma"
stop_agent TERM

# 7. Asynchronous start failing, and timing out.
run_agent "$mods" "${trace_args[@]}" --set beta.async-start=100ms --set beta.fail-start=true
check "an asynchronous start failure rolls back" contains "$OUT" "module beta failed to start: asynchronous start failure requested by config; stopped: alpha"
run_agent "$mods" "${trace_args[@]}" --set beta.async-start=10s --set agent.start-timeout=1s
check "a start that does not complete in time fails" contains "$OUT" "module beta failed to start: start did not complete within the start timeout; stopped: alpha"

# 8. A hook that never returns: the watchdog ends the agent.
run_agent "$mods" "${trace_args[@]}" --set gamma.hang-start=true --set agent.start-timeout=1s
check "the watchdog ends an agent whose start hook hangs" test "$RC" -ne 0
check "the watchdog names the module and hook" contains "$OUT" "module gamma: start hook did not return within its timeout"

# 9. A stop signal during an asynchronous start rolls back.
rm -f "$TRACE"
start_bg() {
	mapfile -t args < <(agent_args "$mods")
	"$AGENT" "${args[@]}" "${trace_args[@]}" --set beta.async-start=20s >"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
}
start_bg
wait_for 5 grep -q "start beta" "$TRACE" 2>/dev/null || true
rc=0; stop_agent TERM || rc=$?
check "a signal during start fails the start" test "$rc" -ne 0
check "a signal during start names the interruption" contains "$(cat "$WORK/agent.log")" "start interrupted by a stop signal; stopped: alpha"

# 10. A second signal forces exit when a stop hook hangs.
rm -f "$TRACE"
start_agent "$mods" "${trace_args[@]}" --set alpha.hang-stop=true
kill -TERM "$AGENT_PID"
wait_for 5 grep -q "stop alpha" "$TRACE" 2>/dev/null || true
rc=0; stop_agent TERM || rc=$?
check "a second signal forces exit" test "$rc" -eq 143
check "the forced exit is logged" contains "$(cat "$WORK/agent.log")" "second signal: forcing exit"

# 11. A Degraded module turns readiness to 503 naming it.
start_agent "$mods" --set beta.degraded="etcd unreachable"
code=$(api -o "$WORK/healthz" -w '%{http_code}' http://x/v1/healthz)
check "healthz is 503 with a degraded module" test "$code" = 503
check "healthz names the module and why" contains "$(cat "$WORK/healthz")" '"error":"not ready: beta (degraded: etcd unreachable)"'
check "status shows the degraded component" contains "$(api http://x/v1/status)" '"components":[{"name":"probe","level":"degraded","message":"etcd unreachable"}]'
stop_agent TERM

finish
