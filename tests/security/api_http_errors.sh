#!/usr/bin/env bash
# tests/security/api_http_errors.sh - the attack: a request line the HTTP
# parser does not take (garbage, an unknown method, control bytes), which
# libwebsockets answered with an HTML page of its own. The promise: it is
# answered like every other error of the API, 400 with a JSON
# `{"error": ..., "code": 400}` naming the request line (an unknown method:
# 501 naming it), on the unix socket and the TCP listener, and the agent
# serves on. (A percent-encoded NUL and an oversized header block:
# api_request_edges.sh.)
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
mkdir -p "$mods"
install -m 0644 "$top_builddir/.libs/hello.so" "$mods/hello.so"
port=$((20000 + ($$ + 5) % 20000))
start_agent "$mods" --set "agent.api-tcp-listen=127.0.0.1:$port"

# raw WHERE BYTES(a python bytes expression) : the agent's whole answer to BYTES, in $WORK/answer
raw() {
	python3 - "$WORK/fibril.sock" "$port" "$1" "$2" >"$WORK/answer" <<'PY'
import socket, sys
sock, port, where, data = sys.argv[1], int(sys.argv[2]), sys.argv[3], eval(sys.argv[4])
if where == "unix":
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
else:
    s = socket.create_connection(("127.0.0.1", port))
s.settimeout(5)
try:
    s.sendall(data)
except OSError:
    pass
out = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
except OSError:
    pass
sys.stdout.buffer.write(out)
PY
}
# answered WHAT WHERE BYTES STATUS NEEDLE : a JSON error with STATUS that contains NEEDLE
answered() {
	local what=$1 where=$2 bytes=$3 status=$4 needle=$5
	raw "$where" "$bytes"
	if python3 - "$WORK/answer" "$status" "$needle" <<'PY'; then pass "$what ($where): $status, JSON"; else fail "$what ($where): expected $status, JSON naming '$needle'; got: $(head -c 300 "$WORK/answer")"; fi
import json, sys
text = open(sys.argv[1], encoding="latin-1", newline="").read()
head, _, body = text.partition("\r\n\r\n")
status_line = head.split("\r\n")[0]
assert status_line.split(" ")[1] == sys.argv[2], status_line
assert "content-type: application/json" in head.lower(), head
j = json.loads(body)
assert j["code"] == int(sys.argv[2]) and sys.argv[3] in j["error"], j
PY
}

for where in unix tcp; do
	answered "a garbage request line" $where "b'GARBAGE\\r\\n\\r\\n'" 400 "request line"
	answered "an unknown method" $where "b'BLAH / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'" 501 "method 'BLAH'"
	answered "control bytes for a request line" $where "b'\\x01\\x02\\x03\\r\\n\\r\\n'" 400 "request line"
done
check "the agent still serves" agent_healthy
finish
