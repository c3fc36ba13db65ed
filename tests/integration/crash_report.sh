#!/usr/bin/env bash
# tests/integration/crash_report.sh - a module that crashes takes the agent
# down, but not without a word: one line names the signal, the module and
# what of it was running (hook, timer, bus callback with its topic, worker
# job, API route handler with its route), and the exit status is still the signal's (139 for SIGSEGV).
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" steady
build_module "$mods" crashy wants=x

# crash_case WHERE EXPECTED-TEXT
crash_case() {
	local where=$1 text=$2
	run_agent "$mods" --set crashy.crash="$where" --set agent.stop-timeout=2s
	local line
	line=$(printf '%s\n' "$OUT" | grep 'fatal signal' || true)
	check "crash in $where: exit status 139 (got $RC)" test "$RC" -eq 139
	check "crash in $where: one line names it" contains "$line" "fibril-agent: fatal signal SIGSEGV in module 'crashy' ($text)"
}

# run_agent runs in the foreground: it never opens the API socket here since
# every case crashes during start or right after.
crash_case start "start hook"
crash_case bus "bus callback for topic 'tm.crashy'"
crash_case timer "timer callback"
crash_case job "worker job"

# Crash in stop: started normally, SIGTERM, then the stop hook crashes.
start_agent "$mods" --set crashy.crash=stop
rc=0; stop_agent TERM || rc=$?
check "crash in stop: exit status 139 (got $rc)" test "$rc" -eq 139
check "crash in stop: the line names the stop hook" contains "$(cat "$WORK/agent.log")" \
	"fibril-agent: fatal signal SIGSEGV in module 'crashy' (stop hook)"

# Crash in an API route handler: the line names the module and the route.
start_agent "$mods" --set crashy.crash=route
curl -sS --max-time 5 --unix-socket "$WORK/fibril.sock" -X POST -d '{}' \
	http://x/v1/tm/crashy/echo >/dev/null 2>&1 || true
rc=0; wait "$AGENT_PID" || rc=$?
AGENT_PID=""
check "crash in a route handler: exit status 139 (got $rc)" test "$rc" -eq 139
check "crash in a route handler: the line names the module and route" contains "$(cat "$WORK/agent.log")" \
	"fibril-agent: fatal signal SIGSEGV in module 'crashy' (API route handler for '/v1/tm/crashy/echo')"

finish
