#!/usr/bin/env bash
# tests/integration/cni_http_reader.sh - fibril-cni's HTTP reader (cni/agent.c)
# against a fake agent on a unix socket that answers a CNI STATUS (GET
# /v1/ipam) in pieces and keeps the connection open after the body: the
# reply must be taken as whole once Content-Length bytes are in, however
# the header is spelled (no space after the colon, other case, tabs) and
# wherever the reads split it (the blank line across two reads, a body of
# 200 kB in 1 kB pieces). A reader that misses the length waits for the
# close that never comes and fails on the 5 s bound here.
. "$top_srcdir/tests/lib/common.sh"

command -v python3 >/dev/null || skip_or_fail "python3 is missing"
CNI_PLUGIN="$top_builddir/fibril-cni"
[ -x "$CNI_PLUGIN" ] || skip_or_fail "fibril-cni is not built"
SOCK=$WORK/agent.sock

# fake_agent CASE : serves one connection of CASE, then exits
fake_agent() {
	python3 - "$SOCK" "$1" <<'PY' &
import json, os, socket, sys, time
path, case = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path + ".tmp")
os.rename(path + ".tmp", path)
srv.listen(1)
srv.settimeout(20)
c, _ = srv.accept()
req = b""
while b"\r\n\r\n" not in req:
    d = c.recv(4096)
    if not d:
        sys.exit(0)
    req += d
pools = [{"family": "ipv4", "cidr": "10.9.0.0/24", "gateway": "10.9.0.1", "used": 1, "total": 253}]
body = {"pools": pools, "allocations": []}
if case == "big":
    body["allocations"] = [{"address": "10.9.0.%d" % (i % 250 + 2), "owner": "c%06d/eth0" % i} for i in range(4000)]
body = json.dumps(body).encode()
names = {"nospace": b"Content-Length:", "case-tabs": b"content-length \t:\t ",
         "split-blank": b"Content-Length: ", "big": b"Content-Length: "}
head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + names[case] + str(len(body)).encode() + b"\r\n\r\n"
msg = head + body
if case == "split-blank":  # the blank line split across two reads
    cut = len(head) - 2
    pieces = [msg[:cut], msg[cut:cut + 1], msg[cut + 1:]]
elif case == "big":
    pieces = [msg[i:i + 1024] for i in range(0, len(msg), 1024)]
else:
    pieces = [msg[:10], msg[10:len(head) + 5], msg[len(head) + 5:]]
for i, p in enumerate(pieces):
    c.sendall(p)
    if case != "big" or i % 50 == 0:
        time.sleep(0.05)  # sleep: the answer comes in pieces, in separate reads
# keep the connection open: the client must not wait for the close
c.settimeout(10)
try:
    c.recv(1)
except OSError:
    pass
PY
	FAKE_PID=$!
	wait_alive "$FAKE_PID" 4 test -S "$SOCK"
}

for case in nospace case-tabs split-blank big; do
	rm -f "$SOCK"
	fake_agent "$case" || { fail "$case: the fake agent did not start"; continue; }
	conf=$(printf '{"cniVersion":"1.1.0","name":"fibril","type":"fibril-cni","agent-socket":"%s"}' "$SOCK")
	rc=0
	t0=$(date +%s%N)
	printf '%s' "$conf" | env -i PATH="$PATH" CNI_COMMAND=STATUS timeout 5 "$CNI_PLUGIN" \
		>"$WORK/out" 2>"$WORK/err" || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	check "$case: STATUS reads the whole reply by its Content-Length and answers (exit $rc, $ms ms)" \
		test "$rc" = 0
	[ "$rc" = 0 ] || cat "$WORK/out" "$WORK/err"
	kill "$FAKE_PID" 2>/dev/null || true
	wait "$FAKE_PID" 2>/dev/null || true
done
finish
