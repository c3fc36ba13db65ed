# tests/lib/common.sh - shared helpers of the integration tests: a private
# work dir removed on exit, building test modules from tests/modules/testmod.c
# against the in-tree SDK, starting and stopping an agent on its own socket,
# and pass/fail bookkeeping that ends with "N passed, N failed".
set -euo pipefail
umask 022

: "${top_srcdir:?run through make check (top_srcdir unset)}"
: "${top_builddir:?run through make check (top_builddir unset)}"
CC=${CC:-cc}
AGENT="$top_builddir/fibril-agent"
CLI="$top_builddir/fibril"
TEST_NAME=$(basename "$0" .sh)
# the SDK minor this tree builds (modules built here report 1.$FIBRIL_ABI_MINOR)
FIBRIL_ABI_MINOR=$(sed -n "s/^#define FIBRIL_ABI_MINOR \([0-9]*\)$/\1/p" "$top_srcdir/sdk/include/fibril/version.h")
WORK=$(mktemp -d "/tmp/fibril-$TEST_NAME.XXXXXX")
chmod 0755 "$WORK"
BPFFS_DIR="/sys/fs/bpf/fibril-$TEST_NAME-$$"
AGENT_PID=""
# the fake kube-apiserver (tests/k8s/apiserver.py) appends each request the
# agent's k8s module makes to a file here; k8s_rbac.sh checks them against
# the DaemonSet's ClusterRole
export FIBRIL_K8S_REQUEST_LOG_DIR=${FIBRIL_K8S_REQUEST_LOG_DIR:-$top_builddir/tests/k8s-requests}
mkdir -p "$FIBRIL_K8S_REQUEST_LOG_DIR"
PASSED=0
FAILED=0

# cleanup [RC] : RC (default the status the trap found) is the test's exit
# status; a test's own trap runs its part and then `cleanup "$rc"` (not a
# subshell `exit $rc` first: under set -e that ends the trap early and
# leaks the namespaces and pins of a failed test)
cleanup() {
	local rc=${1:-$?}
	# a test that stopped before its finish (a failing check under set -e,
	# an error) still says how far it got
	if [ -z "$FINISHED" ] && [ $((PASSED + FAILED)) -gt 0 ]; then
		echo "$PASSED passed, $FAILED failed (stopped early, status $rc)"
	fi
	if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
		kill -KILL "$AGENT_PID" 2>/dev/null || true
		wait "$AGENT_PID" 2>/dev/null || true
	fi
	# anything else still running from this test's work dir (e.g. under valgrind)
	pkill -KILL -f -- "$WORK/" 2>/dev/null || true
	# KEEP_WORK=1 keeps the work dir (agent logs) of a failed test for a look
	[ -n "${KEEP_WORK:-}" ] && [ "${FAILED:-0}" != 0 ] && echo "kept $WORK" || rm -rf "$WORK"; rm -rf "$BPFFS_DIR"
	exit "$rc"
}
trap cleanup EXIT INT TERM

# skip_or_fail WHY : a missing prerequisite skips the test locally (exit 77)
# and fails it in CI (CI=true), where every test must run.
skip_or_fail() {
	if [ "${CI:-}" = true ]; then
		echo "FAIL: $1 (CI must run every test)"
		exit 1
	fi
	echo "SKIP: $1"
	exit 77
}
# prometheus_python : PY = a python3 that has prometheus_client's parser
# (Debian's python3-prometheus-client lives in the system python; a python3
# earlier in PATH, e.g. pyenv's, may not see it), else skip_or_fail.
prometheus_python() {
	local p
	PY=python3
	for p in python3 /usr/bin/python3; do
		if "$p" -c 'import prometheus_client.parser' 2>/dev/null; then PY=$p; break; fi
	done
	"$PY" -c 'import prometheus_client.parser' 2>/dev/null ||
		skip_or_fail "python3-prometheus-client is missing (scripts/deps.sh installs it)"
}
# find_cgroup2 : CG2 = the host's cgroup v2 directory; on a cgroup v1 host
# a cgroup2 hierarchy of the test's own is mounted at $WORK/cgroup2 and
# named in CG2_MOUNTED (the caller's cleanup unmounts it).
find_cgroup2() {
	CG2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
	CG2_MOUNTED=""
	if [ -z "$CG2" ]; then
		CG2=$WORK/cgroup2
		mkdir -p "$CG2"
		mount -t cgroup2 none "$CG2" || skip_or_fail "cannot mount a cgroup v2 file system"
		CG2_MOUNTED=$CG2
	fi
}
# note_or_fail WHY : a check that could not run: a note locally, a failure in CI.
note_or_fail() {
	if [ "${CI:-}" = true ]; then fail "$1"; else echo "NOTE: $1"; fi
}
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }

# check DESCRIPTION COMMAND... : PASS when the command succeeds, FAIL when
# not; returns the command's status, so `check ... || echo "  detail"` prints
# the detail of a failure and carries on, and a bare failing check ends the
# test under set -e (the trap still prints the summary line)
check() {
	# a name of its own for the status: COMMAND may be an eval of the
	# caller's $rc
	local what=$1 _check_status=0
	shift
	"$@" || _check_status=$?
	if [ "$_check_status" = 0 ]; then pass "$what"; else fail "$what"; fi
	return "$_check_status"
}

# finish : the summary line; fails when a check failed
FINISHED=""
finish() {
	FINISHED=1
	echo "$PASSED passed, $FAILED failed"
	[ "$FAILED" -eq 0 ]
}

# quote_list "a,b" -> "a","b" for FIBRIL_LIST(...)
quote_list() {
	local IFS=, out="" item
	for item in $1; do out="$out${out:+,}\"$item\""; done
	printf '%s' "$out"
}

# build_module DIR NAME [provides=a,b] [requires=x] [wants=y] [cflags=...] [sdk=INCLUDEDIR] [file=NAME.so]
build_module() {
	local dir=$1 name=$2 provides="" requires="" wants="" cflags="" sdk="$top_srcdir/sdk/include" file="$2.so"
	shift 2
	local arg
	for arg in "$@"; do
		case $arg in
		provides=*) provides=${arg#provides=} ;;
		requires=*) requires=${arg#requires=} ;;
		wants=*) wants=${arg#wants=} ;;
		cflags=*) cflags=${arg#cflags=} ;;
		sdk=*) sdk=${arg#sdk=} ;;
		file=*) file=${arg#file=} ;;
		*) echo "build_module: bad argument $arg" >&2; return 2 ;;
		esac
	done
	local defs=(-DTM_NAME="\"$name\"")
	[ -n "$provides" ] && defs+=(-DTM_PROVIDES="FIBRIL_LIST($(quote_list "$provides"))")
	[ -n "$requires" ] && defs+=(-DTM_REQUIRES="FIBRIL_LIST($(quote_list "$requires"))")
	[ -n "$wants" ] && defs+=(-DTM_WANTS="FIBRIL_LIST($(quote_list "$wants"))")
	mkdir -p "$dir"
	chmod 0755 "$dir"
	# shellcheck disable=SC2086
	$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
		-Wno-unused-parameter ${SAN_CFLAGS:-} -I"$sdk" \
		"${defs[@]}" $cflags -o "$dir/$file" "$top_srcdir/tests/modules/testmod.c" \
		-L"$top_builddir/.libs" -lfibril
	chmod 0644 "$dir/$file"
}

# agent_args DIR : the --set options that keep an agent inside $WORK
agent_args() {
	local dir=$1
	printf '%s\n' --set "agent.module-dir=$dir" --set "agent.socket=$WORK/fibril.sock" \
		--set "agent.state-dir=$WORK/state" --set "agent.run-dir=$WORK/run" \
		--set "agent.bpffs-dir=$BPFFS_DIR"
}

# start_agent MODULEDIR [more agent args...] : background agent, waits for the socket
start_agent() {
	start_agent_netns "" "$@"
}

# start_agent_netns NETNS MODULEDIR [args...] : start_agent in a network
# namespace ("": this one), through nsenter (the mount namespace stays the
# host's, so its pins are on the real bpffs); the log is appended to
# $WORK/agent.log when NETNS is set (restarts keep the earlier runs' lines)
start_agent_netns() {
	local ns=$1 dir=$2
	shift 2
	mapfile -t args < <(agent_args "$dir")
	rm -f "$WORK/fibril.sock"
	if [ -n "$ns" ]; then
		echo "--- start in $ns $*" >>"$WORK/agent.log"
		nsenter --net="/run/netns/$ns" "$AGENT" "${args[@]}" "$@" >>"$WORK/agent.log" 2>&1 &
	else
		"$AGENT" "${args[@]}" "$@" >"$WORK/agent.log" 2>&1 &
	fi
	AGENT_PID=$!
	# the API opens once every module started: with the datapath, once its
	# programs are in (a first start verifies them: slow on a loaded machine)
	if wait_alive "$AGENT_PID" 60 test -S "$WORK/fibril.sock"; then return 0; fi
	kill -0 "$AGENT_PID" 2>/dev/null && echo "agent did not open its socket within 60 s" >&2
	cat "$WORK/agent.log"
	return 1
}

# stop_agent [SIGNAL] : stop the background agent; returns its exit status
stop_agent() {
	local sig=${1:-TERM} rc=0
	kill -"$sig" "$AGENT_PID"
	wait "$AGENT_PID" || rc=$?
	AGENT_PID=""
	return $rc
}

# run_agent MODULEDIR [args...] : run in the foreground; output in $OUT, status in $RC
run_agent() {
	local dir=$1
	shift
	mapfile -t args < <(agent_args "$dir")
	RC=0
	OUT=$("$AGENT" "${args[@]}" "$@" 2>&1) || RC=$?
}

api() { curl -sS --max-time 10 --unix-socket "$WORK/fibril.sock" "$@"; }

# contains HAYSTACK NEEDLE
contains() { case $1 in *"$2"*) return 0 ;; *) echo "  expected to find: $2"; echo "  in: $1"; return 1 ;; esac; }

# wait_for, wait_alive, wait_quiet, wait_gone, await_output, await: waiting
# on a condition with a deadline (tests/lib/wait.sh)
. "$top_srcdir/tests/lib/wait.sh"

# agent_healthy : the agent's GET /v1/healthz answers 200
agent_healthy() { [ "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz 2>/dev/null)" = 200 ]; }

# api_idle : the agent holds no API connection (every client's is closed on
# its side too); for an agent in this network namespace (unix sockets are
# listed per namespace)
api_idle() { [ -z "$(ss -Hx src "$WORK/fibril.sock" 2>/dev/null)" ]; }

# json_is DOC EXPR : python's EXPR over j = the JSON document DOC is true;
# else DOC is printed (unless QUIET_JSON is set).
json_is() {
	python3 -c 'import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' \
		"$1" "$2" 2>/dev/null && return 0
	[ -z "${QUIET_JSON:-}" ] && echo "  $1"
	return 1
}
