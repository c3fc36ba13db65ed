#!/usr/bin/env bash
# tests/integration/systemd_notify.sh - the agent's sd_notify protocol
# without systemd: the test listens on its own NOTIFY_SOCKET (a unix
# datagram socket, as systemd does) and checks that READY=1 comes only
# after every module has finished starting (one starts asynchronously, as
# a restore does) and the API answers, WATCHDOG=1 follows at half of
# WATCHDOG_USEC, and STOPPING=1 comes when the agent is told to stop; then
# that the installed unit file passes systemd-analyze verify.
. "$top_srcdir/tests/lib/common.sh"

grep -q '^#define HAVE_LIBSYSTEMD 1' "$top_builddir/config.h" ||
	skip_or_fail "built without libsystemd (apt-get install libsystemd-dev)"

mods=$WORK/mods
build_module "$mods" alpha
trace=$WORK/trace
notify_sock=$WORK/notify.sock
events=$WORK/notify.events

# The listener: one JSON line per datagram; on READY=1 it reads the trace
# and asks the API for /v1/status at that moment.
python3 - "$notify_sock" "$events" "$trace" "$WORK/fibril.sock" <<'PY' &
import json, os, socket, sys, time
path, out, trace, api = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(30)
open(path + ".ready", "w").close()
with open(out, "w", buffering=1) as f:
    while True:
        try:
            msg = s.recv(4096).decode()
        except socket.timeout:
            break
        ev = {"t": time.monotonic(), "msg": msg}
        if "READY=1" in msg.split("\n"):
            ev["trace"] = open(trace).read() if os.path.exists(trace) else ""
            try:
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.settimeout(5)
                c.connect(api)
                c.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                ev["api"] = data.decode(errors="replace")
            except OSError as e:
                ev["api_error"] = str(e)
        f.write(json.dumps(ev) + "\n")
        if "STOPPING=1" in msg.split("\n"):
            break
PY
listener=$!
wait_alive "$listener" 5 test -e "$notify_sock.ready" || true

t0=$(python3 -c 'import time; print(time.monotonic())')
NOTIFY_SOCKET=$notify_sock WATCHDOG_USEC=200000 start_agent "$mods" \
	--set alpha.trace="$trace" --set alpha.async-start=1s
wait_for 5 grep -q READY=1 "$events" 2>/dev/null || true
# a few watchdog periods (100 ms each) after READY
watchdogs() { [ "$(grep -c '"msg": "WATCHDOG=1"' "$events")" -ge 3 ]; }
wait_for 5 watchdogs || true
stop_agent TERM
wait "$listener" || true
t_stop=$(python3 -c 'import time; print(time.monotonic())')

check "the notify protocol: READY after start and API, WATCHDOG, STOPPING" \
	python3 - "$events" "$t0" "$t_stop" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
t0, t_stop = float(sys.argv[2]), float(sys.argv[3])
msgs = [e["msg"] for e in evs]
print("  messages:", [m.split("\n")[0] for m in msgs])
ready = [i for i, m in enumerate(msgs) if "READY=1" in m.split("\n")]
stopping = [i for i, m in enumerate(msgs) if "STOPPING=1" in m.split("\n")]
dog = [i for i, m in enumerate(msgs) if m == "WATCHDOG=1"]
assert len(ready) == 1, "READY=1 sent once"
r = evs[ready[0]]
assert "STATUS=1 modules started, API on" in r["msg"], r["msg"]
assert "started alpha" in r["trace"], "READY=1 before the asynchronous start finished: " + r["trace"]
assert r["t"] - t0 >= 1.0, "READY=1 sooner than the 1 s start"
assert "api" in r and r["api"].startswith("HTTP/1.1 200"), r.get("api", r.get("api_error"))
assert '"state":"running"' in r["api"].replace(" ", ""), r["api"]
assert len(stopping) == 1 and stopping[0] > ready[0], "STOPPING=1 once, after READY=1"
assert len(dog) >= 2, "WATCHDOG=1 every 100 ms after READY"
assert all(ready[0] < i < stopping[0] for i in dog), "WATCHDOG=1 only while running"
PY
check "the agent traced its stop after STOPPING=1 was sent" grep -q "^stop alpha" "$trace"

# a stop during start (SIGTERM while a module is still starting) also says STOPPING=1
rm -f "$notify_sock" "$notify_sock.ready" "$events" "$trace"
python3 - "$notify_sock" "$events" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); s.settimeout(20)
open(sys.argv[1] + ".ready", "w").close()
with open(sys.argv[2], "w", buffering=1) as f:
    try:
        while True:
            m = s.recv(4096).decode(); f.write(m.replace("\n", " ") + "\n")
            if "STOPPING=1" in m: break
    except socket.timeout:
        pass
PY
listener=$!
wait_alive "$listener" 5 test -e "$notify_sock.ready" || true
mapfile -t args < <(agent_args "$mods")
NOTIFY_SOCKET=$notify_sock "$AGENT" "${args[@]}" --set alpha.trace="$trace" --set alpha.async-start=5s \
	>"$WORK/agent2.log" 2>&1 &
AGENT_PID=$!
wait_for 5 grep -q "^start alpha" "$trace" 2>/dev/null || true
stop_agent TERM || true
wait "$listener" || true
check "STOPPING=1 and no READY=1 when stopped while starting" \
	bash -c 'grep -q STOPPING=1 "$1" && ! grep -q READY=1 "$1"' _ "$events"

# the unit file as installed
unit=$top_builddir/systemd/fibril-agent.service
if command -v systemd-analyze >/dev/null; then
	# verify wants the ExecStart binary and the man pages to exist: point
	# ExecStart at this build's agent and drop Documentation for the check
	sed -e "s|^ExecStart=[^ ]*|ExecStart=$(cd "$top_builddir" && pwd)/fibril-agent|" \
		-e '/^Documentation=/d' "$unit" >"$WORK/fibril-agent.service"
	out=$(systemd-analyze verify "$WORK/fibril-agent.service" 2>&1) && rc=0 || rc=$?
	check "systemd-analyze verify passes on the unit ($out)" test "$rc" -eq 0 -a -z "$out"
else
	note_or_fail "systemd-analyze is not installed"
fi
check "the unit is Type=notify with a watchdog" grep -q '^Type=notify$' "$unit"
check "the unit bounds its capabilities" grep -qx 'CapabilityBoundingSet=CAP_NET_ADMIN CAP_BPF CAP_PERFMON' "$unit"

finish
