#!/usr/bin/env bash
# tests/security/api_request_edges.sh - the attack: request heads that
# libwebsockets 4.1 gives up on before any callback of ours runs, so the
# client got its connection closed (or reset) with no answer at all: a
# percent-encoded NUL in the path or the query (`/v1/healthz%00x`), a header
# block past lws's 32 KB buffer (one 40 KB field, or 600 small ones), and
# a request line that is not HTTP or names an unknown method. The promise:
# each is answered like every other error of the API, a JSON
# `{"error": ..., "code": N}` with the right status (400 naming the byte of
# the NUL, 431 for the header block, 400 for a malformed request line, 501
# for an unknown method, 505 for another HTTP version), on the unix socket
# and on the TCP listener, then the connection is closed; and the agent
# serves a normal request on the same listener afterwards.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
mkdir -p "$mods"
install -m 0644 "$top_builddir/.libs/hello.so" "$mods/hello.so"
port=$((20000 + ($$ + 11) % 20000))
start_agent "$mods" --set "agent.api-tcp-listen=127.0.0.1:$port"

# raw WHERE BYTES(a python bytes expression) : the agent's whole answer to
# BYTES, in $WORK/answer ("RESET" when the connection was reset)
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
out = b""
try:
    s.sendall(data)
except OSError:
    pass
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
except ConnectionResetError:
    out += b"RESET"
except OSError as e:
    out += b"ERROR " + str(e).encode()
sys.stdout.buffer.write(out)
PY
}

# answered WHAT WHERE BYTES STATUS NEEDLE : a JSON error with STATUS whose
# message contains NEEDLE, and the connection closed after it
answered() {
	local what=$1 where=$2 bytes=$3 status=$4 needle=$5
	raw "$where" "$bytes"
	if /usr/bin/python3 - "$WORK/answer" "$status" "$needle" <<'PY'; then pass "$what ($where): $status, JSON naming '$needle'"; else fail "$what ($where): expected $status, JSON naming '$needle'; got: $(head -c 300 "$WORK/answer" | tr -c '[:print:]' .)"; fi
import json, sys
text = open(sys.argv[1], encoding="latin-1", newline="").read()
head, _, body = text.partition("\r\n\r\n")
status_line = head.split("\r\n")[0]
assert status_line.split(" ")[1] == sys.argv[2], status_line
assert "content-type: application/json" in head.lower(), head
length = [l for l in head.lower().split("\r\n") if l.startswith("content-length:")]
assert length and int(length[0].split(":")[1]) == len(body.encode("latin-1")), head
j = json.loads(body)
assert j["code"] == int(sys.argv[2]) and sys.argv[3] in j["error"], j
assert "\n" not in j["error"], j
PY
}

# serves WHERE : a normal request on that listener is answered 200
serves() {
	raw "$1" "b'GET $(health_path "$1") HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n'"
	head -c 12 "$WORK/answer" | grep -q '^HTTP/1.1 200'
}
# health_path WHERE : the health route of that listener
health_path() { if [ "$1" = unix ]; then echo /v1/healthz; else echo /healthz; fi; }

for where in unix tcp; do
	p=$(health_path $where)
	big_field="b'GET $p HTTP/1.1\\r\\nHost: x\\r\\nX-Pad: ' + b'a' * 40960 + b'\\r\\n\\r\\n'"
	many_fields="b'GET $p HTTP/1.1\\r\\nHost: x\\r\\n' + b''.join(b'X-F%d: %s\\r\\n' % (i, b'v' * 60) for i in range(600)) + b'\\r\\n'"
	answered "a percent-encoded NUL in the path" $where \
		"b'GET $p%00x HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'" 400 "path: percent-encoded NUL at byte ${#p}"
	answered "a percent-encoded NUL in the query" $where \
		"b'GET $p?owner=a%00b HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'" 400 "query: percent-encoded NUL at byte $((${#p} + 8))"
	answered "a 40 KB header field" $where "$big_field" 431 "request header fields"
	answered "600 header fields (40 KB)" $where "$many_fields" 431 "request header fields"
	answered "a garbage request line" $where "b'GARBAGE\\r\\n\\r\\n'" 400 "request line"
	answered "control bytes for a request line" $where "b'\\x01\\x02\\x03\\r\\n\\r\\n'" 400 "request line"
	answered "an unknown method" $where "b'BLAH $p HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'" 501 "method 'BLAH'"
	answered "another HTTP version" $where "b'GET $p HTTP/3.0\\r\\nHost: x\\r\\n\\r\\n'" 505 "HTTP/3.0"
	check "the $where listener serves a normal request afterwards" serves $where
done
check "the agent still serves" agent_healthy
finish
