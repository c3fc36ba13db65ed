# shellcheck shell=bash
# tests/lib/wait.sh - waiting on a condition with a deadline, for the shell
# tests (sourced by tests/lib/common.sh; a script of its own, e.g.
# tests/integration/cli.sh, may source it alone). A test waits for what it
# expects to happen (a socket, a file, a route, a map entry, a process
# gone), never for a fixed time: a fixed sleep is too long on an idle
# machine and too short on a loaded one. A `sleep` stays only where the
# elapsed time itself is what is tested, and says so on its line with a
# "# sleep: <why>" comment (tests/integration/sleep_reasons.sh checks that).
#
#   wait_for SECONDS COMMAND...        until COMMAND succeeds (0); 1 when
#                                      SECONDS (a fraction is fine) passed first
#   wait_alive PID SECONDS COMMAND...  the same; 2 as soon as process PID is gone
#   wait_quiet SECONDS COMMAND...      wait_for, COMMAND's output discarded
#   wait_gone PID SECONDS              until process PID has exited
#   await_output SECONDS PATTERN COMMAND...  until COMMAND's output contains
#                                      PATTERN (a glob; "": until COMMAND
#                                      succeeds); prints its last output
#   await DESCRIPTION SECONDS COMMAND...     a check (common.sh's pass/fail)
#                                      that waits, naming what it awaited
#   output_is TEXT COMMAND...          COMMAND prints TEXT; output_isnt: not
#                                      (conditions to wait on: a
#                                      "$(...)" in a wait's arguments is
#                                      read once, before the wait)
#
# The deadline is read from the clock (a loaded machine does not stretch it
# the way counting polls does), and COMMAND runs once more after it. It is
# polled every 10 ms at first, backing off to every 100 ms.

# now_us : the wall clock in microseconds
now_us() { local t=${EPOCHREALTIME//[!0-9]/}; echo "$((10#$t))"; }
# seconds_us SECONDS : SECONDS (an integer or a decimal fraction, e.g. 2.5) in microseconds
seconds_us() {
	local int=${1%%.*} frac=000000
	[[ $1 == *.* ]] && frac=${1#*.}000000
	echo $(((10#${int:-0}) * 1000000 + 10#${frac:0:6}))
}

wait_alive() {
	local pid=$1 deadline now interval=0.01
	deadline=$(($(now_us) + $(seconds_us "$2")))
	shift 2
	until "$@"; do
		[ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 2
		now=${EPOCHREALTIME//[!0-9]/}
		[ "$((10#$now))" -lt "$deadline" ] || return 1
		sleep "$interval" # sleep: the poll interval of a wait with a deadline
		case $interval in 0.01) interval=0.02 ;; 0.02) interval=0.05 ;; *) interval=0.1 ;; esac
	done
}

wait_for() { wait_alive "" "$@"; }

wait_quiet() {
	local secs=$1
	shift
	wait_alive "" "$secs" _quietly "$@"
}
_quietly() { "$@" >/dev/null 2>&1; }

wait_gone() { wait_alive "" "$2" _gone "$1"; }
_gone() { ! kill -0 "$1" 2>/dev/null; }

await_output() {
	local secs=$1 rc=0
	shift
	_AWAITED=""
	wait_alive "" "$secs" _output_has "$@" || rc=$?
	printf '%s\n' "$_AWAITED"
	return $rc
}
_output_has() {
	local pattern=$1 rc=0
	shift
	_AWAITED=$("$@" 2>/dev/null) || rc=$?
	if [ -z "$pattern" ]; then return $rc; fi
	[[ $_AWAITED == *$pattern* ]]
}

await() {
	local what=$1 secs=$2
	shift 2
	if wait_alive "" "$secs" "$@"; then
		pass "$what"
	else
		fail "$what (awaited $secs s: $*)"
	fi
}

output_is() {
	local want=$1
	shift
	[ "$("$@" 2>/dev/null)" = "$want" ]
}
output_isnt() { ! output_is "$@"; }
