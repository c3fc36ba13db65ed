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
for _ in $(seq 1 600); do
	api http://x/v1/modules 2>/dev/null | grep -q '"running"' && break
	sleep 0.1
done

# The count alone, and its result.
t0=$(date +%s%N)
list=$(api http://x/v1/map)
t1=$(date +%s%N)
count_ms=$(((t1 - t0) / 1000000))
echo "GET /v1/map with $ENTRIES entries: $count_ms ms"
# healthz goes a third of a count after the map request: both clients pay
# the same start-up, so the map request is in and its count still running
# (a fixed wait longer than the count, on a fast machine, tested nothing)
wait_s=$(awk -v ms="$count_ms" 'BEGIN { w = ms / 3000; if (w < 0.01) w = 0.01; printf "%.3f", w }')
check "the LPM trie's entries are counted ($ENTRIES)" \
	contains "$(echo "$list" | tr -d ' \n')" "\"name\":\"tmbig\""
check "... and the count is $ENTRIES" \
	python3 -c "import json,sys; m=[x for x in json.loads(sys.argv[1])['maps'] if x['name']=='tmbig'][0]; sys.exit(m['entries']!=$ENTRIES)" "$list"

# healthz sent while a count runs is answered before it, each of 3 times.
first_ok=0
for round in 1 2 3; do
	: >"$WORK/order"
	(api http://x/v1/map >/dev/null && echo map >>"$WORK/order") &
	mpid=$!
	sleep "$wait_s" # the request reached the agent: its count is running
	api http://x/v1/healthz >/dev/null && echo healthz >>"$WORK/order"
	wait "$mpid"
	echo "round $round: $(tr '\n' ' ' <"$WORK/order")"
	[ "$(head -1 "$WORK/order")" = healthz ] && first_ok=$((first_ok + 1))
done
check "healthz answered while GET /v1/map counts (3 of 3 rounds: $first_ok)" test "$first_ok" = 3
check "the agent stops cleanly" stop_agent TERM
finish
