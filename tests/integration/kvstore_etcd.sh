#!/usr/bin/env bash
# tests/integration/kvstore_etcd.sh - the kvstore-etcd module against a real
# etcd on loopback, driven through the kvprobe test module: put/get/delete
# and prefix reads checked with etcdctl, txn compare-and-swap, leases kept
# alive, revoked and lost, a prefix watch in revision order, etcd going away
# (healthz 503, status, the bus topics) and coming back (healthz 200, the
# watch resumes from its revision), endpoint failover, a host name endpoint
# and kept-alive connections, a start with etcd
# down failing on start-timeout, TLS with client certificates, and a run
# under valgrind.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/etcd.sh"

etcd_require curl pkg-config
if [ "$(id -u)" != 0 ]; then # the agent only loads root-owned modules
	[ "${CI:-}" = true ] && { echo "FAIL: CI runs as root; not skipping"; exit 1; }
	echo "SKIP: run as root"
	exit 77
fi
KVSTORE_SO=${KVSTORE_ETCD_SO:-$top_builddir/.libs/kvstore-etcd.so}
[ -f "$KVSTORE_SO" ] || { echo "FAIL: $KVSTORE_SO is not built"; exit 1; }

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$KVSTORE_SO" "$mods/kvstore-etcd.so"
# kvprobe, compiled as build_module compiles testmod.c (plus json-c)
# shellcheck disable=SC2046,SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
	-Wno-unused-parameter ${SAN_CFLAGS:-} -I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) \
	-o "$mods/kvprobe.so" "$top_srcdir/tests/modules/kvprobe.c" \
	-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
chmod 0644 "$mods/kvprobe.so"

# jtest JSON EXPR: python EXPR over the document j is true
jtest() {
	python3 -c 'import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if eval(sys.argv[2]) else 1)' \
		"$1" "$2" && return 0
	echo "  false: $2"
	echo "  json: $1"
	return 1
}
jget() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null || echo "?"; }

# op NAME [k=v...] : POST /v1/kvprobe/NAME?k=v..., wait for its callback, print the result
op() {
	local name=$1 arg out id
	shift
	local q=()
	for arg in "$@"; do q+=(--data-urlencode "$arg"); done
	out=$(api -X POST -G "${q[@]}" "http://x/v1/kvprobe/$name") || true
	id=$(jget "$out" 'j["op"]')
	[ "$id" != "?" ] || { echo "$out"; return 0; }
	await_output 10 '"done":true' api "http://x/v1/kvprobe/op/$id" || true
}
# txn JSON : the same with a JSON body
txn() {
	local out id
	out=$(api -X POST -H 'Content-Type: application/json' -d "$1" http://x/v1/kvprobe/txn) || true
	id=$(jget "$out" 'j["op"]')
	[ "$id" != "?" ] || { echo "$out"; return 0; }
	await_output 10 '"done":true' api "http://x/v1/kvprobe/op/$id" || true
}
events() { api http://x/v1/kvprobe/events; }
events_are() { jtest "$(events)" "$1" >/dev/null; }
state_is() { jtest "$(api http://x/v1/kvprobe/state)" "$1" >/dev/null; }
healthz() { api -o "$WORK/healthz" -w '%{http_code}' http://x/v1/healthz; }
healthz_is() { [ "$(healthz)" = "$1" ]; }
# wait_for SECONDS COMMAND... : here, tests/lib/common.sh's with the command's output discarded
wait_for() { wait_quiet "$@"; }
ectl_value() { etcdctl_run get --print-value-only "$1"; }
ectl_rev() { jget "$(etcdctl_run "$@" -w json)" 'j["header"]["revision"]'; }

KV=(--set kvstore-etcd.health-interval=500ms --set kvstore-etcd.dial-timeout=500ms
	--set kvstore-etcd.request-timeout=2s)

etcd_start main
start_agent "$mods" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" "${KV[@]}"

# ---- 1. connected at start -------------------------------------------------------
check "healthz is 200 once kvstore-etcd started" test "$(healthz)" = 200
check "status summary says connected" contains "$(api http://x/v1/status)" \
	"connected to $ETCD_ENDPOINT, 0 leases, 0 watches"
check "kvprobe sees the store connected" jtest "$(api http://x/v1/kvprobe/state)" \
	'j["connected"] is True'

# ---- 2. put, get, delete, prefixes ------------------------------------------------
r=$(op put key=a value=one)
check "put answers with a revision" jtest "$r" 'j["err"] == 0 and j["revision"] > 0'
check "etcdctl sees the put under the prefix" test "$(ectl_value /fibril/a)" = one
check "nothing is written outside the prefix" test -z "$(ectl_value a)"
r=$(op get key=a)
check "get returns the pair, key relative to the prefix" jtest "$r" \
	'j["err"] == 0 and len(j["kvs"]) == 1 and j["kvs"][0]["key"] == "a" and j["kvs"][0]["value"] == "one" and j["kvs"][0]["version"] == 1 and j["kvs"][0]["mod_revision"] == j["revision"]'
check "get of a missing key is empty, not an error" jtest "$(op get key=nosuch)" \
	'j["err"] == 0 and j["kvs"] == []'
etcdctl_run put /fibril/dir/x 1 >/dev/null
etcdctl_run put /fibril/dir/y 2 >/dev/null
etcdctl_run put /fibril/dirt 3 >/dev/null
r=$(op get key=dir/ prefix=1)
check "prefix get returns every key under it, in order" jtest "$r" \
	'[(k["key"], k["value"]) for k in j["kvs"]] == [("dir/x", "1"), ("dir/y", "2")]'
for k in z1 z2 z3; do etcdctl_run put "/fibril/dir/$k" "$k" >/dev/null; done
rev_now=$(ectl_rev get /fibril/dir/x)
r=$(op getpaged key=dir/ limit=2)
check "get_paged: every key under the prefix in pages of 2, in order, at one revision" jtest "$r" \
	'j["err"] == 0 and j["pages"] == 3 and [k["key"] for k in j["kvs"]] == ["dir/x", "dir/y", "dir/z1", "dir/z2", "dir/z3"] and set(j["revisions"]) == {'"$rev_now"'}'
check "get_paged of an empty prefix: one empty page" jtest "$(op getpaged key=nosuch/ limit=2)" \
	'j["err"] == 0 and j["pages"] == 1 and j["kvs"] == []'
# get_range: [dir/y, dir/z3) at the revision before dir/z2 changed and
# dir/y2 was added, in pages of 1: the keys inside the range, at that
# revision (dir/z2 "z2", no dir/y2), nothing outside (dir/x, dir/z3, dirt)
etcdctl_run put /fibril/dir/z2 changed >/dev/null
etcdctl_run put /fibril/dir/y2 new >/dev/null
r=$(op getrange key=dir/y end=dir/z3 rev="$rev_now" limit=1)
check "get_range: the keys in [start, end) at the revision asked, in pages, nothing outside" jtest "$r" \
	'j["err"] == 0 and [(k["key"], k["value"]) for k in j["kvs"]] == [("dir/y", "2"), ("dir/z1", "z1"), ("dir/z2", "z2")] and j["pages"] == 3 and set(j["revisions"]) == {'"$rev_now"'}'
r=$(op getrange key=dir/z2 limit=10)
check "get_range without an end: to the end of the prefix, at the current revision" jtest "$r" \
	'j["err"] == 0 and [(k["key"], k["value"]) for k in j["kvs"]][:3] == [("dir/z2", "changed"), ("dir/z3", "z3"), ("dirt", "3")] and all(k["key"] >= "dir/z2" for k in j["kvs"]) and set(j["revisions"]) == {'"$(ectl_rev get /fibril/dir/y2)"'}'
etcdctl_run del --prefix /fibril/dir/y2 >/dev/null
etcdctl_run del --prefix /fibril/dir/z >/dev/null
r=$(op del key=a)
check "del answers" jtest "$r" 'j["err"] == 0 and j["revision"] > 0'
check "etcdctl no longer sees the deleted key" test -z "$(etcdctl_run get /fibril/a)"
op del key=dir/ prefix=1 >/dev/null
check "prefix del removes the keys under it only" test \
	"$(etcdctl_run get --prefix --keys-only /fibril/dir | tr -s '\n' ' ')" = "/fibril/dirt "

# ---- 3. txn -----------------------------------------------------------------------
create='{"compare":[{"key":"cas","target":"version","result":"equal","number":0}],
	"success":[{"type":"put","key":"cas","value":"v1"}],"failure":[{"type":"get","key":"cas"}]}'
r=$(txn "$create")
check "txn create-if-absent succeeds the first time" jtest "$r" \
	'j["err"] == 0 and j["succeeded"] is True and j["kvs"] == []'
r=$(txn "$create")
check "txn create-if-absent fails the second time and returns the failure's get" jtest "$r" \
	'j["err"] == 0 and j["succeeded"] is False and [k["value"] for k in j["kvs"]] == ["v1"]'
swap='{"compare":[{"key":"cas","target":"value","result":"equal","value":"v1"}],
	"success":[{"type":"put","key":"cas","value":"v2"},{"type":"get","key":"cas"}],"failure":[]}'
r=$(txn "$swap")
check "txn value compare-and-swap succeeds and the success get sees the new value" jtest "$r" \
	'j["succeeded"] is True and [k["value"] for k in j["kvs"]] == ["v2"]'
check "etcdctl sees the swapped value" test "$(ectl_value /fibril/cas)" = v2
r=$(txn "$swap")
check "txn value compare fails once the value changed" jtest "$r" \
	'j["err"] == 0 and j["succeeded"] is False'
r=$(txn '{"compare":[{"key":"cas","target":"mod","result":"greater","number":1}],
	"success":[{"type":"del","key":"cas"}],"failure":[]}')
check "txn mod_revision compare and delete" jtest "$r" 'j["succeeded"] is True'
check "etcdctl sees the txn delete" test -z "$(etcdctl_run get /fibril/cas)"

# ---- 4. leases -----------------------------------------------------------------------
r=$(op grant ttl=3)
check "lease grant returns the id and TTL" jtest "$r" 'j["err"] == 0 and j["lease"] > 0 and j["ttl"] == 3'
lease=$(jget "$r" 'j["lease"]')
check "put attached to the lease" jtest "$(op put key=leased value=x lease="$lease")" 'j["err"] == 0'
check "the key carries the lease" jtest "$(op get key=leased)" "j['kvs'][0]['lease'] == $lease"
check "the summary counts the lease" contains "$(api http://x/v1/status)" "1 leases"
sleep 7 # sleep: 2 x the lease's TTL must pass with the key kept alive
check "the leased key is still there after 2 x TTL (kept alive)" test "$(ectl_value /fibril/leased)" = x
check "lease revoke answers" jtest "$(op revoke id="$lease")" 'j["err"] == 0'
check "revoking the lease deleted its key" test -z "$(etcdctl_run get /fibril/leased)"
check "revoking an unknown lease is -ENOENT" jtest "$(op revoke id=12345)" 'j["err"] == -2'
r=$(op grant ttl=3)
lost=$(jget "$r" 'j["lease"]')
etcdctl_run lease revoke "$(printf %x "$lost")" >/dev/null
check "a lease revoked behind our back is reported lost (kvstore.lease-lost with its id)" \
	wait_for 15 state_is "j['lost'] == [$lost]"
check "a lost lease is no longer kept alive" contains "$(api http://x/v1/status)" "0 leases"

# ---- 5. watch --------------------------------------------------------------------------
out=$(api -X POST 'http://x/v1/kvprobe/watch?prefix=w/')
check "watch on a prefix" jtest "$out" 'j["watch"] == 0'
check "  etcd has created the watch" wait_for 10 etcd_watchers_are 1
r1=$(ectl_rev put /fibril/w/1 a)
r2=$(ectl_rev put /fibril/w/2 b)
etcdctl_run put /fibril/other z >/dev/null
r3=$(ectl_rev del /fibril/w/1)
expect="[('put', 'w/1', 'a', $r1), ('put', 'w/2', 'b', $r2), ('delete', 'w/1', '', $r3)]"
wait_for 5 events_are "len(j['events']) >= 3" || true
check "the watch sees puts and deletes in order with their revisions" jtest "$(events)" \
	"[(e['type'], e['key'], e['value'], e['revision']) for e in j['events']] == $expect"
api -X POST "http://x/v1/kvprobe/watch?prefix=w/&rev=$r1" >/dev/null
wait_for 5 events_are "len([e for e in j['events'] if e['watch'] == 1]) >= 3" || true
check "a watch from a past revision replays from it" jtest "$(events)" \
	"[(e['type'], e['key'], e['revision']) for e in j['events'] if e['watch'] == 1] == [(t, k, r) for t, k, v, r in $expect]"
api -X POST 'http://x/v1/kvprobe/unwatch?id=1' >/dev/null

# ---- 6. etcd goes away ---------------------------------------------------------------------
etcd_stop
check "healthz turns 503 within a few seconds of etcd stopping" wait_for 5 healthz_is 503
healthz >/dev/null
check "healthz names kvstore-etcd degraded: etcd unreachable" contains "$(cat "$WORK/healthz")" \
	"kvstore-etcd (degraded: etcd unreachable"
st=$("$CLI" --socket "$WORK/fibril.sock" status 2>&1 || true)
check "fibril status shows kvstore-etcd degraded and unreachable" python3 - "$st" <<'PY'
import sys
rows = [l for l in sys.argv[1].splitlines() if l.startswith("kvstore-etcd ")]
assert rows and "degraded" in rows[0] and "unreachable since" in rows[0], sys.argv[1]
PY
check "kvprobe sees the store disconnected" jtest "$(api http://x/v1/kvprobe/state)" \
	'j["connected"] is False and j["disconnected_events"] == 1'
check "a put while etcd is down fails with -ENOTCONN" jtest "$(op put key=down value=1)" \
	'j["err"] == -107'
check "the watch reported the break once (-ENOTCONN)" jtest "$(events)" \
	"[e['err'] for e in j['events'] if e['watch'] == 0 and e['err']] == [-107]"

# ---- 7. etcd comes back ----------------------------------------------------------------------
etcd_restart
r4=$(ectl_rev put /fibril/w/4 during-reconnect)
check "healthz is 200 again once etcd is back" wait_for 15 healthz_is 200
r5=$(ectl_rev put /fibril/w/5 after-restart)
wait_for 5 events_are "'w/5' in [e.get('key') for e in j['events']]" || true
check "the watch resumed from its revision: puts during and after the restart, once each" \
	jtest "$(events)" \
	"[(e['key'], e['revision']) for e in j['events'] if e['watch'] == 0 and not e['err']][3:] == [('w/4', $r4), ('w/5', $r5)]"
check "the summary says connected again" contains "$(api http://x/v1/status)" "connected to $ETCD_ENDPOINT"
check "kvstore.connected published twice, kvstore.disconnected once" python3 - "$(api http://x/v1/bus)" <<'PY'
import json, sys
t = {t["name"]: t for t in json.loads(sys.argv[1])["topics"]}
assert t["kvstore.connected"]["published"] == 2, t["kvstore.connected"]
assert t["kvstore.disconnected"]["published"] == 1, t["kvstore.disconnected"]
assert t["kvstore.lease-lost"]["published"] == 1, t["kvstore.lease-lost"]
PY
check "kvprobe got the same bus events" jtest "$(api http://x/v1/kvprobe/state)" \
	'j["connected"] is True and j["connected_events"] == 2 and j["disconnected_events"] == 1'

# ---- 8. etcd hangs (SIGSTOP): requests time out ------------------------------------------
kill -STOP "$ETCD_PID"
check "a hung etcd turns healthz 503 (the check times out)" wait_for 10 healthz_is 503
kill -CONT "$ETCD_PID"
check "healthz is 200 again when etcd resumes" wait_for 15 healthz_is 200
r6=$(ectl_rev put /fibril/w/6 after-hang)
check "the watch resumed after the hang" wait_for 5 events_are \
	"('w/6', $r6) in [(e.get('key'), e['revision']) for e in j['events'] if e['watch'] == 0]"

# ---- 9. a watch from a compacted revision ---------------------------------------------------
c1=$(ectl_rev put /fibril/c/1 x)
etcdctl_run compact "$(ectl_rev put /fibril/c/2 y)" >/dev/null
api -X POST "http://x/v1/kvprobe/watch?prefix=c/&rev=$c1" >/dev/null
wait_for 5 events_are "[e for e in j['events'] if e['watch'] == 2]" || true
c3=$(ectl_rev put /fibril/c/3 z)
wait_for 5 events_are "len([e for e in j['events'] if e['watch'] == 2]) >= 2" || true
check "a compacted start revision is reported (-ERANGE) and the watch goes on from now" \
	jtest "$(events)" "[(e['err'], e.get('key'), e['revision']) for e in j['events'] if e['watch'] == 2][1:] == [(0, 'c/3', $c3)] and [e['err'] for e in j['events'] if e['watch'] == 2][0] == -34"
api -X POST 'http://x/v1/kvprobe/unwatch?id=2' >/dev/null

# ---- 10. stop keeps leases ---------------------------------------------------------------------
r=$(op grant ttl=30)
op put key=keep value=1 lease="$(jget "$r" 'j["lease"]')" >/dev/null
rc=0; stop_agent TERM || rc=$?
check "the agent stops cleanly (exit 0)" test "$rc" -eq 0
check "stop does not revoke: the leased key survives the agent" test "$(ectl_value /fibril/keep)" = 1

# ---- 11. endpoint failover ---------------------------------------------------------------------
dead=http://127.0.0.1:$(_etcd_free_port)
start_agent "$mods" --set "kvstore-etcd.endpoints=$dead,$ETCD_ENDPOINT" "${KV[@]}"
check "with the first endpoint dead, start uses the next one" contains "$(api http://x/v1/status)" \
	"connected to $ETCD_ENDPOINT"
check "requests go to the live endpoint" jtest "$(op put key=failover value=ok)" 'j["err"] == 0'
check "etcdctl sees it" test "$(ectl_value /fibril/failover)" = ok
stop_agent TERM

# ---- 11b. the HTTP client: a host name, kept-alive connections ------------------------------------
# localhost is looked up on the worker pool (it may give ::1 first: each address is tried)
start_agent "$mods" --set "kvstore-etcd.endpoints=${ETCD_ENDPOINT/127.0.0.1/localhost}" "${KV[@]}"
check "a host name endpoint: connected" contains "$(api http://x/v1/status)" "connected to http://localhost:"
# 10 requests in series go over kept-alive connections: the client closes
# none, so no socket of ours to etcd sits in TIME_WAIT (one per request
# without keep-alive)
time_wait() { ss -Htan state time-wait "dst 127.0.0.1:${ETCD_ENDPOINT##*:}" | wc -l; }
tw0=$(time_wait) # earlier agents' connections
for i in $(seq 1 10); do op put key="ka/$i" value="$i" >/dev/null; done
check "the 10 puts arrived" test "$(ectl_value /fibril/ka/10)" = 10
tw=$(($(time_wait) - tw0))
check "keep-alive: no connection to etcd closed by us during 10 requests ($tw more in TIME_WAIT)" \
	test "$tw" -lt 3
stop_agent TERM

# ---- 12. no etcd at start ----------------------------------------------------------------------
etcd_stop
run_agent "$mods" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" "${KV[@]}" --set agent.start-timeout=2s
check "a start with etcd down fails" test "$RC" -ne 0
check "the failure names kvstore-etcd and the start timeout" contains "$OUT" \
	"module kvstore-etcd failed to start: start did not complete within the start timeout"
check "the log says why (etcd unreachable, retrying)" contains "$OUT" "etcd unreachable: "

# ---- 12b. the CLI while the start waits, and after it failed -----------------------------------
# no socket yet: `fibril status` reads <socket>.starting and says what the
# start waits for, then repeats why it failed instead of "not running"
mapfile -t sargs < <(agent_args "$mods")
rm -f "$WORK/fibril.sock" "$WORK/fibril.sock.starting"
"$AGENT" "${sargs[@]}" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" "${KV[@]}" \
	--set agent.start-timeout=6s >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
cli_status() { "$CLI" --socket "$WORK/fibril.sock" status 2>&1 || true; }
starting() { [[ $(cli_status) == *"agent is starting"* ]]; }
wait_for 10 starting
st=$(cli_status)
check "status during a waiting start: starting, and for what" contains "$st" \
	"agent is starting (pid $AGENT_PID"
check "status during a waiting start names the module and etcd" contains "$st" "module kvstore-etcd: waiting"
RC=0
wait "$AGENT_PID" || RC=$?
AGENT_PID=""
check "that start fails" test "$RC" -ne 0
st=$(cli_status)
check "status after the failed start repeats the cause" contains "$st" \
	"failed: module kvstore-etcd failed to start: start did not complete within the start timeout"
rm -f "$WORK/fibril.sock.starting"

# ---- 13. TLS with a client certificate ------------------------------------------------------------
etcd_start tls tls
TLS=(--set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" --set "kvstore-etcd.ca-file=$ETCD_CA_FILE")
start_agent "$mods" "${TLS[@]}" --set "kvstore-etcd.cert-file=$ETCD_CLIENT_CERT" \
	--set "kvstore-etcd.key-file=$ETCD_CLIENT_KEY" "${KV[@]}"
check "TLS: connected over https" contains "$(api http://x/v1/status)" "connected to https://127.0.0.1:"
check "TLS: put" jtest "$(op put key=tls value=secure)" 'j["err"] == 0'
check "TLS: etcdctl sees it" test "$(ectl_value /fibril/tls)" = secure
stop_agent TERM
run_agent "$mods" "${TLS[@]}" "${KV[@]}" --set agent.start-timeout=2s
check "TLS: without the client certificate the start fails" contains "$OUT" \
	"module kvstore-etcd failed to start"
CERT=(--set "kvstore-etcd.cert-file=$ETCD_CLIENT_CERT" --set "kvstore-etcd.key-file=$ETCD_CLIENT_KEY")
# a CA that did not sign etcd's certificate
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
	-subj "/CN=another CA" -keyout "$WORK/other-ca.key" -out "$WORK/other-ca.pem" 2>/dev/null
run_agent "$mods" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" --set "kvstore-etcd.ca-file=$WORK/other-ca.pem" \
	"${CERT[@]}" "${KV[@]}" --set agent.start-timeout=2s
check "TLS: an unknown CA fails the start, the log says the certificate did not verify" contains "$OUT" \
	"certificate verification failed"
# etcd's certificate is for IP 127.0.0.1: the name localhost does not match it
run_agent "$mods" --set "kvstore-etcd.endpoints=${ETCD_ENDPOINT/127.0.0.1/localhost}" \
	--set "kvstore-etcd.ca-file=$ETCD_CA_FILE" "${CERT[@]}" "${KV[@]}" --set agent.start-timeout=2s
check "TLS: a certificate for another name fails the start (hostname mismatch)" contains "$OUT" \
	"hostname mismatch"
etcd_stop

# ---- 14. valgrind: connected, traffic, SIGTERM ----------------------------------------------------
if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "valgrind part skipped: sanitizer build"
elif ! command -v valgrind >/dev/null; then
	if [ "${CI:-}" = true ]; then fail "valgrind is not installed"; else echo "valgrind part skipped: no valgrind"; fi
else
	etcd_start vg
	mapfile -t args < <(agent_args "$mods")
	"$top_builddir/libtool" --mode=execute valgrind --leak-check=full \
		--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--error-exitcode=99 --log-file="$WORK/vg.%p" "$AGENT" "${args[@]}" \
		--set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" "${KV[@]}" --set agent.start-timeout=60s \
		--set kvstore-etcd.request-timeout=60s \
		>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_for 60 test -S "$WORK/fibril.sock"
	check "valgrind: the agent starts" test -S "$WORK/fibril.sock"
	api -X POST 'http://x/v1/kvprobe/watch?prefix=vg/' >/dev/null
	op put key=vg/a value=1 >/dev/null
	op get key=vg/ prefix=1 >/dev/null
	txn "$create" >/dev/null
	op grant ttl=5 >/dev/null
	etcdctl_run put /fibril/vg/b 2 >/dev/null
	wait_for 20 events_are "'vg/b' in [e['key'] for e in j['events']]" || fail "valgrind: the watch sees vg/b"
	kill -STOP "$ETCD_PID" # requests now hang: stop must cancel them (-ECANCELED)
	pending=$(jget "$(api -X POST 'http://x/v1/kvprobe/put?key=vg/pending&value=1')" 'j["op"]')
	api -X POST 'http://x/v1/kvprobe/grant?ttl=5' >/dev/null
	sleep 0.5 # sleep: the module writes the two requests to the stopped etcd (nothing shows them in flight)
	check "valgrind: requests are pending at stop" jtest "$(api "http://x/v1/kvprobe/op/$pending")" \
		'j["done"] is False'
	wait_for 10 api_idle || true # no API connection half-closed at the stop
	rc=0; stop_agent TERM || rc=$?
	kill -CONT "$ETCD_PID"
	check "valgrind: connected run, pending requests cancelled at stop: no leaks, no errors (exit $rc)" \
		test "$rc" -eq 0
	grep -h -E "definitely lost|ERROR SUMMARY" "$WORK"/vg.* || true
	if [ "$rc" -ne 0 ]; then # what ended it, for whoever reads the log
		tail -30 "$WORK/agent.log"
		grep -v '^==[0-9]*== *$' "$WORK"/vg.* | tail -60
	fi
	rm -f "$WORK"/vg.*
	etcd_stop
	RC=0
	"$top_builddir/libtool" --mode=execute valgrind --leak-check=full \
		--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--error-exitcode=99 --log-file="$WORK/vg.%p" "$AGENT" "${args[@]}" \
		--set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" "${KV[@]}" --set agent.start-timeout=3s \
		>"$WORK/agent.log" 2>&1 || RC=$?
	check "valgrind: a start failing with etcd down: exit 1, no leaks, no errors (exit $RC)" \
		test "$RC" -eq 1
	grep -h -E "definitely lost|ERROR SUMMARY" "$WORK"/vg.* || true
fi

finish
