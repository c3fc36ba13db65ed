#!/bin/bash
# tests/integration/api_shutdown.sh - the API server's connections at stop:
# the agent is stopped, many times over, while clients hold requests whose
# answers are deferred (sent by the module in its stop, after the API has
# closed), half-close their side, hang up mid-request and connect/close in
# a loop. Each stop must exit 0 with nothing on the log from libuv,
# libwebsockets or a sanitizer. Before the fix the API's connections were
# only torn down inside lws_context_destroy.
. "$(dirname "$0")/../lib/common.sh"

ROUNDS=${API_SHUTDOWN_ROUNDS:-4}
[ "$FIBRIL_ABI_MINOR" -ge 4 ] || skip_or_fail "deferred answers need SDK 1.4"
command -v python3 >/dev/null || skip_or_fail "python3 is needed"
build_module "$WORK/mods" tm

# The clients: deferred GETs left pending, half-closed ones, ones that hang
# up mid-request and a connect/close hammer, until the socket goes away.
cat >"$WORK/clients.py" <<'PY'
import os, socket, sys, time, threading
path, ready, trace = sys.argv[1], sys.argv[2], sys.argv[3]
held = []
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s
for i in range(12):
    s = conn()
    s.sendall(b"GET /v1/tm/tm/later HTTP/1.1\r\nHost: x\r\n\r\n")
    if i % 3 == 1:
        s.shutdown(socket.SHUT_WR)        # half-closed, answer pending
    held.append(s)
for i in range(6):
    s = conn()
    s.sendall(b"POST /v1/tm/tm/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":")
    held.append(s)                      # mid-body
def deferred():                          # the GETs the module has deferred
    try:
        return sum(line.startswith("later ") for line in open(trace))
    except OSError:
        return 0
deadline = time.monotonic() + 20
while deferred() < 12 and time.monotonic() < deadline:
    time.sleep(0.01)  # sleep: the poll interval of a wait with a deadline
open(ready, "w").close()
def hammer():
    end = time.time() + 3
    while time.time() < end:
        try:
            s = conn()
            s.sendall(b"GET /v1/tm/tm/later HTTP/1.1\r\nHost: x\r\n\r\n")
            s.close()
        except OSError:
            return
        time.sleep(0.002)  # sleep: paces the connect/close hammer
ts = [threading.Thread(target=hammer) for _ in range(2)]
for t in ts: t.start()
time.sleep(0.05)  # sleep: the hang-ups race the stop on purpose
for i, s in enumerate(held):               # hang up while the agent stops
    if i % 2 == 0:
        s.close()
for t in ts: t.join()
PY

bad=0
for r in $(seq 1 "$ROUNDS"); do
	rm -f "$WORK/ready" "$WORK/trace"
	start_agent "$WORK/mods" --set tm.trace="$WORK/trace" >/dev/null || { bad=$((bad + 1)); continue; }
	python3 "$WORK/clients.py" "$WORK/fibril.sock" "$WORK/ready" "$WORK/trace" 2>/dev/null &
	cpid=$!
	wait_alive "$cpid" 25 test -e "$WORK/ready" || true
	rc=0
	t0=$SECONDS
	stop_agent TERM || rc=$?
	t1=$SECONDS
	wait "$cpid" 2>/dev/null || true
	[ -n "${API_SHUTDOWN_VERBOSE:-}" ] && echo "round $r: stop ${t0}->${t1} s, clients done at $SECONDS s"
	if [ "$rc" != 0 ] || grep -Eqi "AddressSanitizer|runtime error|Assertion|uv__|LeakSanitizer" "$WORK/agent.log"; then
		bad=$((bad + 1))
		echo "round $r: exit $rc"
		grep -Ei "AddressSanitizer|runtime error|Assertion|ERROR|#[0-9] " "$WORK/agent.log" | head -15
	fi
done
check "$ROUNDS stops with deferred, half-closed and hung-up connections: all exit 0 cleanly ($bad bad)" \
	test "$bad" = 0
finish
