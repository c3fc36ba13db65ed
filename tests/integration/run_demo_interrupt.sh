#!/usr/bin/env bash
# tests/integration/run_demo_interrupt.sh - Ctrl-C in the middle of the demo
# (scripts/run.sh). The attack on the promise is an operator's Ctrl-C while
# the pods are up: the terminal sends SIGINT to the whole foreground
# process group. The promise (the script's header): the pods are deleted
# with CNI DEL while the agent still answers (etcd and the agent run in a
# session of their own, out of the terminal's reach), then everything is
# removed: the namespaces, the pins, /run/fibril-demo, /var/lib/fibril-demo
# and the processes. The demo runs the programs of this build tree
# (FIBRIL_BUILD_DIR: no dependencies, no build, no install, nothing under
# /usr/local); it is started in a process group of its own, and once its
# first ping runs the test sends SIGINT to that group, as a terminal does.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF)"
command -v etcd >/dev/null || skip_or_fail "etcd is not installed (scripts/deps.sh)"
for f in fibril fibril-agent fibril-cni; do
	[ -x "$top_builddir/$f" ] || skip_or_fail "$f is not built"
done

DEMO_PID=""
# whatever the demo left (only if the test fails): its process group, then
# the processes in its namespaces, by their IDs
rd_cleanup() {
	local rc=$? ns p
	set +e
	if [ -n "$DEMO_PID" ] && kill -0 "$DEMO_PID" 2>/dev/null; then
		kill -TERM -- "-$DEMO_PID" 2>/dev/null
		wait_gone "$DEMO_PID" 30
	fi
	for ns in fibril-demo-node fibril-demo-world fibril-demo-pod-a fibril-demo-pod-b fibril-demo-pod-c; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf /sys/fs/bpf/fibril-demo /run/fibril-demo /var/lib/fibril-demo
	cleanup "$rc"
}
trap rd_cleanup EXIT INT TERM

touch "$WORK/stamp"
sleep 1.1 # sleep: a write under /usr/local must be newer than the stamp to be told
# a process group of its own (setsid), as a terminal's foreground job, with
# SIGINT's default action back (a script's background job starts with it
# ignored, and a shell cannot trap a signal ignored at its entry)
FIBRIL_BUILD_DIR="$top_builddir" /usr/bin/python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execvp("bash", ["bash", sys.argv[1]])' "$top_srcdir/scripts/run.sh" >"$WORK/demo.out" 2>&1 &
DEMO_PID=$!
mid_demo() { grep -q '^--- ping: pod a -> pod b, pod b -> pod c' "$WORK/demo.out"; }
# the agent's start verifies and attaches its programs: slow on a loaded machine
wait_alive "$DEMO_PID" 240 mid_demo || true
if mid_demo; then
	pass "the demo reaches its first ping (pods added with CNI ADD)"
else
	fail "the demo reaches its first ping (pods added with CNI ADD)"
	tail -n 30 "$WORK/demo.out"
	finish
	exit 1
fi
ADDED=$(grep -c '^--- CNI ADD ' "$WORK/demo.out" || true)
AGENT=$(ip netns pids fibril-demo-node 2>/dev/null | while read -r p; do
	grep -qa fibril-agent "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done | head -n 1)
check "the agent runs in the node namespace (pid ${AGENT:-none})" test -n "$AGENT"

# Ctrl-C: SIGINT to the demo's process group
kill -INT -- "-$DEMO_PID"
RC=0
if wait_gone "$DEMO_PID" 60; then
	wait "$DEMO_PID" || RC=$?
	DEMO_PID=""
else
	RC="still running after 60 s"
fi
sed -n '/^--- ping: pod a -> pod b, pod b -> pod c/,$p' "$WORK/demo.out" | sed 's/^/  demo: /' | tail -n 15
check "the demo ends on SIGINT with 130 ($RC)" test "$RC" = 130
for p in a b c; do
	check "the pod $p is deleted with CNI DEL, the agent answering" \
		grep -qx "run.sh: CNI DEL fibril-demo-pod-$p: done" "$WORK/demo.out"
done
check "the three pods were added before ($ADDED CNI ADD)" test "$ADDED" = 3
check "every CNI DEL ran before the agent stopped" \
	test "$(grep -n -e '^run.sh: CNI DEL' -e '^run.sh: the agent stopped' "$WORK/demo.out" | tail -n 1 | cut -d: -f3-)" = " the agent stopped"
check "no CNI DEL failed" eval '! grep -q "^run.sh: CNI DEL .* failed" "$WORK/demo.out"'
check "the script says what it removed" grep -q '^run.sh: removed the namespaces' "$WORK/demo.out"
left=$(ip netns list | grep -o '^fibril-demo[^ ]*' || true)
check "no namespace is left (${left:-none})" test -z "$left"
for d in /sys/fs/bpf/fibril-demo /run/fibril-demo /var/lib/fibril-demo; do
	check "$d is gone" test ! -e "$d"
done
check "the agent (pid $AGENT) is gone" eval '[ -n "$AGENT" ] && ! kill -0 "$AGENT" 2>/dev/null'
procs=$(pgrep -f -- '/var/lib/fibril-demo|fibril-demo-world|/run/fibril-demo' || true)
check "no process of the demo is left (etcd, the agent, the world's server: ${procs:-none})" test -z "$procs"
touched=$(find /usr/local -newer "$WORK/stamp" -name '*fibril*' 2>/dev/null | head -n 3)
check "nothing of fibril was written under /usr/local (${touched:-nothing})" test -z "$touched"
finish
