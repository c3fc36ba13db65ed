#!/bin/bash
# tests/integration/map_count.sh - GET /v1/map counts entries off the loop:
# with a big LPM trie (no batch operations: counted key by key) the count
# takes a while, and a /v1/healthz sent while it runs is answered first.
# The order of the two answers is the proof, not a time: with the count on
# the loop, healthz waited for it. The count itself must be right.
. "$(dirname "$0")/../lib/common.sh"

ENTRIES=${MAP_COUNT_ENTRIES:-100000}
[ -d /sys/fs/bpf ] || skip_or_fail "no /sys/fs/bpf"
mkdir -p "$WORK/mods"
chmod 0755 "$WORK/mods"
# shellcheck disable=SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror ${SAN_CFLAGS:-} \
	-I"$top_srcdir/sdk/include" -o "$WORK/mods/bigmap.so" "$top_srcdir/tests/modules/bigmap.c" \
	-L"$top_builddir/.libs" -lfibril
chmod 0644 "$WORK/mods/bigmap.so"
start_agent "$WORK/mods" --set bigmap.entries="$ENTRIES" ||
	skip_or_fail "the agent with a $ENTRIES-entry LPM trie did not start (BPF?)"
modules_running() { api http://x/v1/modules 2>/dev/null | grep -q '"running"'; }
wait_for 60 modules_running || true

# The count alone, and its result.
t0=$(date +%s%N)
list=$(api http://x/v1/map)
t1=$(date +%s%N)
count_ms=$(((t1 - t0) / 1000000))
echo "GET /v1/map with $ENTRIES entries: $count_ms ms"
# healthz goes a third of a count after the map request, so the map
# request is in and its count still running (a fixed wait longer than the
# count, on a fast machine, tested nothing)
wait_s=$(awk -v ms="$count_ms" 'BEGIN { w = ms / 3000; if (w < 0.01) w = 0.01; printf "%.3f", w }')
check "the LPM trie's entries are counted ($ENTRIES)" \
	contains "$(echo "$list" | tr -d ' \n')" "\"name\":\"tmbig\""
check "... and the count is $ENTRIES" \
	python3 -c "import json,sys; m=[x for x in json.loads(sys.argv[1])['maps'] if x['name']=='tmbig'][0]; sys.exit(m['entries']!=$ENTRIES)" "$list"

# healthz sent while a count runs is answered before it, each of 3 times.
# One client, two connections made beforehand (no process start in the
# timing): GET /v1/map on the first, then healthz on the second, and which
# answer comes first. With the count on the loop, healthz waits for it.
first_ok=$(python3 - "$WORK/fibril.sock" "$wait_s" <<'PY'
import select, socket, sys, time
path, wait = sys.argv[1], float(sys.argv[2])
ok = 0
for rnd in range(1, 4):
    conns = []
    for _ in range(2):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(path)
        conns.append(s)
    m, h = conns
    m.sendall(b"GET /v1/map HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    time.sleep(wait)  # sleep: part of the count's measured time: healthz comes while it runs
    h.sendall(b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    order = []
    pending = {m: "map", h: "healthz"}
    while pending:
        r, _, _ = select.select(list(pending), [], [], 30)
        if not r:
            break
        for s in r:
            if s.recv(65536) is not None:
                order.append(pending.pop(s))
    print("round %d: %s" % (rnd, " ".join(order)), file=sys.stderr)
    ok += bool(order) and order[0] == "healthz"
    for s in conns:
        s.close()
print(ok)
PY
)
check "healthz answered while GET /v1/map counts (3 of 3 rounds: $first_ok)" test "$first_ok" = 3
check "the agent stops cleanly" stop_agent TERM
finish
