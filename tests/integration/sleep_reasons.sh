#!/usr/bin/env bash
# tests/integration/sleep_reasons.sh - the tests wait for conditions, not for
# time: every `sleep` left in a shell or Python file under tests/ (the
# scripts, their heredocs, the helpers) carries a "# sleep: <why>" comment on
# its line saying why the elapsed time itself is the point (a poll interval of
# a wait with a deadline, a pace, a window in which nothing may happen). A
# sleep that waits for something to happen is a wait_for / await
# (tests/lib/common.sh) instead.
. "$top_srcdir/tests/lib/common.sh"

cd "$top_srcdir"
# sleep_lines FILE|DIR... : the lines that sleep without saying why, in the
# shell and Python files (by name, or by a #! line) of each DIR. A shell
# `sleep N` (a command: at a line's start or after ; & | ( { do then else),
# Python's time.sleep(; not the word in a comment or in a longer name.
sleep_lines() {
	python3 - "$@" <<'PY'
import os, re, sys
call = re.compile(r"""(^|[;&|({]|\bdo|\bthen|\belse|\btime\.)\s*sleep\b\s*[(0-9"'$]""")
reason = re.compile(r"#\s*sleep:\s*\S")
def script(path):
    if path.endswith((".sh", ".py")):
        return True
    if "." in os.path.basename(path):
        return False
    with open(path, "rb") as f:
        first = f.readline(128)
    return first.startswith(b"#!") and (b"sh" in first or b"python" in first)
files = []
for arg in sys.argv[1:]:
    if os.path.isdir(arg):
        for d, _, names in os.walk(arg):
            files += [os.path.join(d, n) for n in names if script(os.path.join(d, n))]
    else:
        files.append(arg)
print("files %d" % len(files), file=sys.stderr)
for path in sorted(files):
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("#"):
                continue  # a comment line
            if call.search(line) and not reason.search(line):
                print("%s:%d: %s" % (path, n, line.strip()))
PY
}

bad=$(sleep_lines tests 2>"$WORK/files")
check "there are test scripts to look at ($(cat "$WORK/files"))" test "$(cut -d' ' -f2 "$WORK/files")" -gt 50
[ -z "$bad" ] || sed "s/^/  /" <<<"$bad"
check "every sleep in tests/ says why time itself is the point (# sleep: <why>)" test -z "$bad"

# the check itself: it finds an unexplained sleep and lets an explained one be
# (written with the word in a variable, so that this file's own lines pass)
z=sleep
printf '%s\n' "$z 1" "for _ in 1 2; do true; $z 0.1; done" \
	"python3 -c 'import time; time.$z(1)'" "$z 2 # $z: the window in which nothing may happen" \
	"# $z 3 in a comment" "${z}_lines() { :; }" >"$WORK/probe.sh"
got=$(sleep_lines "$WORK/probe.sh" 2>/dev/null | cut -d: -f2 | tr '\n' ' ')
check "the check finds the unexplained sleeps of a probe (lines 1 2 3: got $got)" test "$got" = "1 2 3 "

finish
