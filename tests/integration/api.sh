#!/usr/bin/env bash
# tests/integration/api.sh - the API server: built-in routes and their JSON,
# a module's routes, JSON errors with the right HTTP statuses (404, 405, 400
# for malformed JSON, 413 over the body limit, 414 / 431 for a request
# target / header block past the limits), the socket's mode, a
# websocket stream, keep-alive, and the optional TCP listener with /healthz,
# /livez and Prometheus /metrics.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" alpha
install -m 0644 "$top_builddir/.libs/hello.so" "$mods/hello.so"
port=$((20000 + $$ % 20000))
start_agent "$mods" --set hello.interval=50ms --set agent.api-tcp-listen=127.0.0.1:$port \
	--set agent.api-max-body=2048

code() { api -o "$WORK/body" -w '%{http_code}' "$@"; }
body() { cat "$WORK/body"; }

check "the socket has mode 0660" test "$(stat -c %a "$WORK/fibril.sock")" = 660
check "GET /v1/healthz is 200" test "$(code http://x/v1/healthz)" = 200
check "GET /v1/modules lists both modules with their ABI" python3 - "$(api http://x/v1/modules)" "$FIBRIL_ABI_MINOR" <<'PY'
import json, sys
mods = {m["name"]: m for m in json.loads(sys.argv[1])["modules"]}
assert set(mods) == {"alpha", "hello"}, mods
assert mods["hello"]["abi"] == "1." + sys.argv[2] and mods["hello"]["provides"] == ["greeting"]
assert mods["hello"]["file"].endswith("/hello.so") and mods["hello"]["state"] == "running"
PY
check "GET /v1/status carries the module summary" contains "$(api http://x/v1/status)" '"summary":"'
check "a module's route answers" contains "$(api 'http://x/v1/hello?name=ops')" '"greeting":"hello, ops"'
check "a module's route validates its query (400)" test "$(code 'http://x/v1/hello?name=%22x')" = 400
check "unknown path is 404" test "$(code http://x/v1/nosuch)" = 404
check "404 is a JSON error" contains "$(body)" '{"error":"no such path: /v1/nosuch","code":404}'
check "wrong method is 405" test "$(code -X DELETE http://x/v1/status)" = 405
check "405 names the allowed methods" contains "$(body)" "allowed: GET"
check "POST with valid JSON reaches the handler" test "$(code -X POST -H 'Content-Type: application/json' -d '{"a":1}' http://x/v1/tm/alpha/echo)" = 200
check "the handler got the body" test "$(body)" = '{"a":1}'
check "malformed JSON is 400" test "$(code -X POST -d '{"a":' http://x/v1/tm/alpha/echo)" = 400
check "400 says the JSON is malformed" contains "$(body)" '"error":"malformed JSON body'
head -c 4096 /dev/zero | tr '\0' 'x' >"$WORK/big"
check "a body over the limit is 413" test "$(code -X POST --data-binary @"$WORK/big" http://x/v1/tm/alpha/echo)" = 413
check "413 names the limit" contains "$(body)" "exceeds the limit of 2048 bytes"
long=$(head -c 20000 /dev/zero | tr '\0' a)
check "a 20 KB request target is 414" test "$(code "http://x/v1/hello?name=$long")" = 414
check "414 names the limit" contains "$(body)" "request target longer than 8192 bytes"
check "a 20 KB header block is 431" test "$(code -H "Cookie: $long" http://x/v1/healthz)" = 431
check "431 names the limit" contains "$(body)" "request header fields longer than 16384 bytes"
check "a 20 KB unknown header field is answered (under lws's 32 KB buffer)" \
	test "$(code -H "X-Big: $long" http://x/v1/healthz)" = 200
check "no 'Ran out of header data space' (the connection was answered)" \
	bash -c "! grep -q 'Ran out of header data space' '$WORK/agent.log'"
check "the agent still serves after oversized requests" test "$(code http://x/v1/healthz)" = 200
check "GET /v1/bus shows the module's topic" python3 - "$(api http://x/v1/bus)" <<'PY'
import json, sys
t = {t["name"]: t for t in json.loads(sys.argv[1])["topics"]}
assert t["hello.tick"]["subscribers"] == 1 and t["hello.tick"]["published"] >= 1, t
PY
check "keep-alive serves several requests on one connection" test "$(curl -sS --unix-socket "$WORK/fibril.sock" http://x/v1/healthz http://x/v1/healthz http://x/v1/healthz | grep -o ok | wc -l)" = 3

check "a websocket stream delivers the module's messages" python3 - "$WORK/fibril.sock" <<'PY'
import base64, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET /v1/hello/ticks HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % key).encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(4096)
head, rest = buf.split(b"\r\n\r\n", 1)
assert head.startswith(b"HTTP/1.1 101"), head
def frame(data):
    while len(data) < 2:
        data += s.recv(4096)
    n = data[1] & 0x7F
    off = 2
    if n == 126:
        n = int.from_bytes(data[2:4], "big"); off = 4
    while len(data) < off + n:
        data += s.recv(4096)
    return data[0] & 0x0F, data[off:off + n], data[off + n:]
op, payload, rest = frame(rest)
assert op == 1 and payload.startswith(b'{"tick":'), (op, payload)
op, payload2, rest = frame(rest)
assert payload2 != payload
PY
check "an unknown stream path refuses the upgrade" python3 - "$WORK/fibril.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"GET /v1/nostream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
data = s.recv(4096)
assert not data.startswith(b"HTTP/1.1 101"), data
PY

tcp() { curl -sS --max-time 5 "$@"; }
check "TCP /healthz answers 200" test "$(tcp -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/healthz)" = 200
check "TCP /livez answers" test "$(tcp http://127.0.0.1:$port/livez)" = ok
metrics=$(tcp http://127.0.0.1:$port/metrics)
check "metrics has bus counters" contains "$metrics" 'fibril_bus_events_published_total{topic="hello.tick"}'
check "metrics has module health" contains "$metrics" 'fibril_module_health{module="hello",level="ok"} 1'
check "metrics has bootstrap timings" contains "$metrics" 'fibril_module_phase_seconds{module="alpha",phase="start"}'
check "metrics is Prometheus text" contains "$metrics" '# TYPE fibril_uptime_seconds gauge'
check "the TCP listener does not serve the full API" test "$(tcp -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/v1/status)" = 404

# A second agent on the same socket is refused, the first keeps serving.
run_agent "$mods" --set agent.api-tcp-listen=
check "a second agent on a live socket is refused" contains "$OUT" "is in use: another fibril-agent is running"
check "the first agent still serves" test "$(code http://x/v1/healthz)" = 200
stop_agent TERM

# The TCP listener is off by default.
start_agent "$mods"
check "no TCP listener by default" test "$(tcp -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/livez 2>/dev/null || true)" = 000
stop_agent TERM

finish
