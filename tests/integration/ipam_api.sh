#!/usr/bin/env bash
# tests/integration/ipam_api.sh - the ipam-api module in front of an ipam
# mode: every /v1/ipam route, its status codes and error lines, the CLI's
# `fibril ipam` commands (table and JSON) and the IPAM line of `fibril
# status`. The mode is the SDK's vendor-ipam example, built here against the
# in-tree SDK; its start-time checks (table FILE:LINE, config) are covered
# too. When ipam-cluster-pool is built and provides ipam, the mode-neutral
# route checks run against it as well. Without sanitizers the CLI and the
# agent also run a few ipam requests under valgrind.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
[ -f "$top_builddir/.libs/ipam-api.so" ] || skip_or_fail "ipam-api is not built (configured without it?)"

# ---- the modules ---------------------------------------------------------------

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/ipam-api.so" "$mods/ipam-api.so"
# shellcheck disable=SC2086
if $CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Wformat=2 -Wshadow \
	-Wstrict-prototypes -Wmissing-prototypes -Werror ${SAN_CFLAGS:-} \
	-I"$top_srcdir/sdk/include" -o "$mods/vendor-ipam.so" \
	"$top_srcdir/sdk/examples/vendor-ipam/vendor_ipam.c" \
	-L"$top_builddir/.libs" -lfibril 2>"$WORK/cc.log"; then
	pass "vendor-ipam builds against the in-tree SDK with every warning on"
else
	fail "vendor-ipam builds against the in-tree SDK with every warning on"
	cat "$WORK/cc.log"
	finish
fi
chmod 0644 "$mods/vendor-ipam.so"

cat >"$WORK/table" <<'EOF'
# owner        address
c1/eth0        10.0.3.7
c2/eth0        10.0.3.8   # a comment after the entry

c3/eth0	10.0.3.9
EOF
VENDOR=(--set "vendor-ipam.table=$WORK/table" --set vendor-ipam.cidr=10.0.3.0/24)

# ---- helpers -------------------------------------------------------------------

# req METHOD PATH... : prints the HTTP status; the body is in $WORK/body
req() {
	local method=$1 path=$2
	shift 2
	api -X "$method" -o "$WORK/body" -w '%{http_code}' "$@" "http://x$path" || true
}
body() { cat "$WORK/body"; }

# expect WHAT METHOD PATH STATUS [NEEDLE] : the status, and the body contains NEEDLE
expect() {
	local what=$1 method=$2 path=$3 status=$4 needle=${5:-} got
	got=$(req "$method" "$path")
	if [ "$got" = "$status" ] && { [ -z "$needle" ] || contains "$(body)" "$needle"; }; then
		pass "$what"
	else
		fail "$what (HTTP $got, expected $status: $(body))"
	fi
}

# expect_body WHAT METHOD PATH STATUS BODY : the exact body
expect_body() {
	local what=$1 method=$2 path=$3 status=$4 want=$5 got
	got=$(req "$method" "$path")
	if [ "$got" = "$status" ] && [ "$(body)" = "$want" ]; then
		pass "$what"
	else
		fail "$what"
		echo "  expected: HTTP $status $want"
		echo "  got:      HTTP $got $(body)"
	fi
}

# json PYTHON-EXPR : evaluates EXPR with `j` = the last body as JSON
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$WORK/body"; }

# cli ARGS... : runs the CLI; stdout in $WORK/out, stderr in $WORK/err, status in $CRC
cli() {
	CRC=0
	"$CLI" --socket "$WORK/fibril.sock" "$@" >"$WORK/out" 2>"$WORK/err" || CRC=$?
}
out() { cat "$WORK/out"; }
err() { cat "$WORK/err"; }

# route_checks MODE CIDR GATEWAY : what any ipam mode must answer, given
# an empty IPv4 pool CIDR with router GATEWAY that has an address for the
# owner "c1/eth0" (the vendor table lists it; a dynamic pool has them all).
route_checks() {
	local mode=$1 cidr=$2 gw=$3 addr
	expect "$mode: POST /v1/ipam is 201" POST '/v1/ipam?family=ipv4&owner=c1/eth0' 201 '"owner":"c1/eth0"'
	addr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["addresses"][0]["address"])' "$WORK/body" 2>/dev/null || true)
	check "$mode: the reply names the address, its pool and gateway" \
		json "len(j['addresses']) == 1 and j['addresses'][0] == {'family': 'ipv4', 'address': '$addr', 'cidr': '$cidr', 'gateway': '$gw'}"
	expect "$mode: the same owner asking again gets the same address" \
		POST '/v1/ipam?family=ipv4&owner=c1/eth0' 201 "\"address\":\"$addr\""
	expect "$mode: GET /v1/ipam lists the allocation" GET /v1/ipam 200 "{\"address\":\"$addr\",\"owner\":\"c1/eth0\"}"
	check "$mode: GET /v1/ipam shows the pool with used/total" \
		json "[p for p in j['pools'] if p['cidr'] == '$cidr' and p['family'] == 'ipv4' and p['gateway'] == '$gw' and p['used'] == 1 and p['total'] >= 3]"
	expect "$mode: the address for another owner is 409, naming the holder" \
		POST "/v1/ipam/$addr?owner=other" 409 "\"error\":\"address $addr is taken by owner c1/eth0\""
	expect "$mode: an address outside the pool is 400" \
		POST '/v1/ipam/10.9.9.9?owner=c1/eth0' 400 "\"error\":\"address 10.9.9.9 is outside the pool $cidr\""
	expect "$mode: the gateway is 400" \
		POST "/v1/ipam/$gw?owner=c1/eth0" 400 "\"error\":\"address $gw is the gateway of the pool $cidr\""
	expect "$mode: a bad address is 400" \
		POST '/v1/ipam/10.0.3.x?owner=c1/eth0' 400 "\"error\":\"invalid address '10.0.3.x': expected an IPv4 or IPv6 address\""
	expect_body "$mode: DELETE /v1/ipam/{ip} is 200 with the address" \
		DELETE "/v1/ipam/$addr" 200 "{\"released\":[\"$addr\"]}"
	expect "$mode: DELETE of an address not allocated is 404" \
		DELETE "/v1/ipam/$addr" 404 "\"error\":\"address $addr is not allocated\""
	expect "$mode: a bad durable= is 400" POST '/v1/ipam/'"$addr"'?owner=c1/eth0&durable=soon' 400 \
		'"error":"query '"'durable'"': expected now or later"'
	expect "$mode: durable=later (fibril-cni's ADD) allocates as well" \
		POST '/v1/ipam/'"$addr"'?owner=c1/eth0&durable=later' 201 "\"address\":\"$addr\""
	expect "$mode: the owner gets an address again (durable=now)" POST '/v1/ipam/'"$addr"'?owner=c1/eth0&durable=now' 201 "\"address\":\"$addr\""
	expect_body "$mode: DELETE /v1/ipam?owner= releases all the owner holds" \
		DELETE '/v1/ipam?owner=c1/eth0' 200 "{\"owner\":\"c1/eth0\",\"released\":[\"$addr\"]}"
	expect_body "$mode: DELETE /v1/ipam?owner= again is 200 with nothing (idempotent)" \
		DELETE '/v1/ipam?owner=c1/eth0' 200 '{"owner":"c1/eth0","released":[]}'
	expect "$mode: nothing is left allocated" GET /v1/ipam 200 '"allocations":[]'
}

# ---- the routes against vendor-ipam -------------------------------------------

start_agent "$mods" "${VENDOR[@]}"

expect_body "GET /v1/ipam on an empty pool" GET /v1/ipam 200 \
	'{"pools":[{"family":"ipv4","cidr":"10.0.3.0/24","gateway":"10.0.3.1","used":0,"total":3}],"allocations":[]}'
route_checks vendor-ipam 10.0.3.0/24 10.0.3.1

expect_body "POST /v1/ipam (family both by default) is 201 with every address" POST '/v1/ipam?owner=c1/eth0' 201 \
	'{"owner":"c1/eth0","addresses":[{"family":"ipv4","address":"10.0.3.7","cidr":"10.0.3.0/24","gateway":"10.0.3.1"}]}'
expect "family=both is the default spelled out" POST '/v1/ipam?family=both&owner=c1/eth0' 201 '"address":"10.0.3.7"'
expect "a family the mode does not offer is 400" POST '/v1/ipam?family=ipv6&owner=c2/eth0' 400 \
	'"error":"family ipv6 is not offered by the ipam mode"'
expect "an unknown family is 400" POST '/v1/ipam?family=ipv5&owner=c2/eth0' 400 \
	'"error":"query '"'family'"': expected ipv4, ipv6 or both"'
expect "a missing owner is 400" POST '/v1/ipam?family=ipv4' 400 '"error":"query '"'owner'"' is required"'
expect "an empty owner is 400" POST '/v1/ipam?owner=' 400 '"error":"query '"'owner'"' is required"'
expect "an owner with control characters is 400" POST '/v1/ipam?owner=a%01b' 400 \
	'"error":"query '"'owner'"': control characters are not allowed"'
expect "an owner of 256 bytes is 400" POST "/v1/ipam?owner=$(printf 'o%.0s' $(seq 256))" 400 \
	'"error":"query '"'owner'"': at most 255 bytes"'
expect "an owner the mode has no address for is 503" POST '/v1/ipam?owner=nobody' 503 \
	'"error":"the ipam mode has no address for owner nobody (pool 10.0.3.0/24)"'
expect "POST /v1/ipam/{ip} needs an owner" POST '/v1/ipam/10.0.3.8' 400 '"error":"query '"'owner'"' is required"'
expect "an address of another family is 400" POST '/v1/ipam/fd00::8?owner=c2/eth0' 400 \
	'"error":"family ipv6 is not offered by the ipam mode"'
expect "an address the mode keeps for someone else is 409" POST '/v1/ipam/10.0.3.8?owner=c1/eth0' 409 \
	'"error":"address 10.0.3.8 is taken by another owner"'
expect "an address in the pool the mode does not hand out is 400" POST '/v1/ipam/10.0.3.100?owner=c1/eth0' 400 \
	'"error":"address 10.0.3.100 is in the pool 10.0.3.0/24 but not handed out by the ipam mode"'
expect "the network address is 400" POST '/v1/ipam/10.0.3.0?owner=c1/eth0' 400 \
	'"error":"address 10.0.3.0 is the network address of the pool 10.0.3.0/24"'
expect "the broadcast address is 400" POST '/v1/ipam/10.0.3.255?owner=c1/eth0' 400 \
	'"error":"address 10.0.3.255 is the broadcast address of the pool 10.0.3.0/24"'
expect_body "POST /v1/ipam/{ip} is 201" POST '/v1/ipam/10.0.3.8?owner=c2/eth0' 201 \
	'{"owner":"c2/eth0","addresses":[{"family":"ipv4","address":"10.0.3.8","cidr":"10.0.3.0/24","gateway":"10.0.3.1"}]}'
expect "POST /v1/ipam/{ip} again for the same owner is 201 (idempotent)" POST '/v1/ipam/10.0.3.8?owner=c2/eth0' 201 '"address":"10.0.3.8"'
expect "DELETE /v1/ipam/{ip} with a bad address is 400" DELETE '/v1/ipam/nonsense' 400 "\"error\":\"invalid address 'nonsense'"
expect "DELETE /v1/ipam/{ip} outside the pool is 400" DELETE '/v1/ipam/192.168.1.1' 400 \
	'"error":"address 192.168.1.1 is outside the pool 10.0.3.0/24"'
expect "DELETE /v1/ipam without an owner is 400" DELETE '/v1/ipam' 400 '"error":"query '"'owner'"' is required'
expect "GET /v1/ipam counts what is allocated" GET /v1/ipam 200 '"used":2,"total":3'
check "GET /v1/ipam lists both allocations" json "j['allocations'] == [{'address': '10.0.3.7', 'owner': 'c1/eth0'}, {'address': '10.0.3.8', 'owner': 'c2/eth0'}]"
expect "PUT /v1/ipam is 405" PUT /v1/ipam 405 'allowed: '
expect "GET /v1/ipam/{ip} is 405" GET /v1/ipam/10.0.3.7 405 'allowed: '

# The status summary and health.
expect "the summary counts the pool" GET /v1/status 200 '"summary":"2/3 allocated from 10.0.3.0/24"'
check "the agent is healthy" test "$(req GET /v1/healthz)" = 200

# Exhaust the pool.
expect "the last table address" POST '/v1/ipam?owner=c3/eth0' 201 '"address":"10.0.3.9"'
expect "a full pool is 503 pool exhausted" POST '/v1/ipam?owner=c4/eth0' 503 '"error":"pool 10.0.3.0/24 is exhausted"'
expect "a full pool: ipv4 asked explicitly" POST '/v1/ipam?family=ipv4&owner=c4/eth0' 503 '"error":"pool 10.0.3.0/24 is exhausted"'

# ---- the CLI ---------------------------------------------------------------------

cli status
check "fibril status has the IPAM line" contains "$(out)" "
IPAM:       3/3 allocated from 10.0.3.0/24
"
cli ipam list
check "fibril ipam list prints the allocations as a table" test "$(out)" = "ADDRESS   OWNER
10.0.3.7  c1/eth0
10.0.3.8  c2/eth0
10.0.3.9  c3/eth0

POOL         FAMILY  GATEWAY   ALLOCATED
10.0.3.0/24  ipv4    10.0.3.1  3/3"
cli -o json ipam list
check "fibril -o json ipam list is the agent's JSON" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["allocations"]) == 3 and j["pools"][0]["used"] == 3, j' "$WORK/out"
cli ipam release 10.0.3.9
check "fibril ipam release ADDR" test "$CRC:$(out)" = "0:released 10.0.3.9"
cli ipam release 10.0.3.9
check "fibril ipam release of a free address fails with the agent's error" test "$CRC:$(err)" = "1:fibril: address 10.0.3.9 is not allocated (HTTP 404)"
cli ipam allocate c3/eth0
check "fibril ipam allocate OWNER prints a table" test "$CRC:$(out)" = "0:ADDRESS   FAMILY  CIDR         GATEWAY   OWNER
10.0.3.9  ipv4    10.0.3.0/24  10.0.3.1  c3/eth0"
cli ipam allocate --family ipv6 c3/eth0
check "fibril ipam allocate --family ipv6: the agent's 400" test "$CRC:$(err)" = "1:fibril: family ipv6 is not offered by the ipam mode (HTTP 400)"
cli ipam allocate --family ipv4 -o json c3/eth0
check "fibril ipam allocate --family ipv4 -o json" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j == {"owner": "c3/eth0", "addresses": [{"family": "ipv4", "address": "10.0.3.9", "cidr": "10.0.3.0/24", "gateway": "10.0.3.1"}]}, j' "$WORK/out"
cli ipam release --owner c3/eth0
check "fibril ipam release --owner OWNER" test "$CRC:$(out)" = "0:released 10.0.3.9"
cli ipam release --owner c3/eth0
check "fibril ipam release --owner of an owner holding nothing succeeds" test "$CRC:$(out)" = "0:c3/eth0 holds no address: nothing released"
cli ipam allocate --ip 10.0.3.9 c3/eth0
check "fibril ipam allocate --ip ADDR OWNER" test "$CRC" = 0 -a "$(out | tail -1 | awk '{print $1, $5}')" = "10.0.3.9 c3/eth0"
cli ipam allocate --ip 10.0.3.9 c1/eth0
check "fibril ipam allocate --ip taken: the agent's 409" test "$CRC:$(err)" = "1:fibril: address 10.0.3.9 is taken by owner c3/eth0 (HTTP 409)"
cli -o json ipam release --owner c3/eth0
check "fibril -o json ipam release --owner" python3 -c '
import json, sys
assert json.load(open(sys.argv[1])) == {"owner": "c3/eth0", "released": ["10.0.3.9"]}' "$WORK/out"
cli ipam allocate 'odd owner/#1'
check "the CLI escapes the owner in the URL (the 503 names it whole)" test "$CRC:$(err)" = \
	"1:fibril: the ipam mode has no address for owner odd owner/#1 (pool 10.0.3.0/24) (HTTP 503)"
cli ipam release
check "fibril ipam release without ADDR is a usage error" test "$CRC" = 2
check "  naming what is missing" contains "$(err)" "ipam release: missing ADDR (or --owner OWNER)"
cli ipam allocate --ip 10.0.3.9 --family ipv4 c1/eth0
check "--ip and --family together are a usage error" test "$CRC" = 2
cli ipam allocate --family ipv7 c1/eth0
check "an unknown --family is a usage error" test "$CRC:$(err)" = "2:fibril: ipam allocate: unknown family 'ipv7' (expected ipv4, ipv6 or both) (see 'fibril help')"
cli ipam frobnicate
check "an unknown ipam subcommand is a usage error" test "$CRC" = 2
cli --owner x status
check "ipam options on another command are a usage error" test "$CRC:$(err)" = "2:fibril: --owner is only for 'fibril ipam' (see 'fibril help')"

# The CLI under valgrind: no leaks on the success and the error paths.
if [ -z "${SAN_CFLAGS:-}" ]; then
	command -v valgrind >/dev/null || { fail "valgrind is not installed"; finish; }
	# shellcheck disable=SC2054
	VG=(valgrind -q --leak-check=full --show-leak-kinds=definite,indirect
		--errors-for-leak-kinds=definite,indirect --error-exitcode=99)
	for args in "ipam list" "ipam allocate c2/eth0" "ipam allocate --ip 10.0.3.7 c2/eth0" \
		"-o json ipam release --owner c2/eth0" "ipam release 10.0.3.200" "status"; do
		rc=0
		# shellcheck disable=SC2086
		"${VG[@]}" "$CLI" --socket "$WORK/fibril.sock" $args >"$WORK/vg.out" 2>&1 || rc=$?
		check "valgrind: fibril $args has no leaks or errors (exit $rc)" test "$rc" != 99 -a "$rc" -le 1 ||
			cat "$WORK/vg.out"
	done
fi
stop_agent TERM

# ---- the IPv6 pool, [providers], a module that only provides ------------------

cat >"$WORK/table6" <<'EOF'
p6/eth0 fd00::a
EOF
start_agent "$mods" --set providers.ipam=vendor-ipam --set "vendor-ipam.table=$WORK/table6" \
	--set vendor-ipam.cidr=fd00::/112
expect_body "IPv6: POST /v1/ipam/{ip} takes any spelling and answers the canonical one" \
	POST '/v1/ipam/fd00:0:0::000a?owner=p6/eth0' 201 \
	'{"owner":"p6/eth0","addresses":[{"family":"ipv6","address":"fd00::a","cidr":"fd00::/112","gateway":"fd00::1"}]}'
expect "IPv6: a chosen provider is named in the error" POST '/v1/ipam?family=ipv4&owner=p6/eth0' 400 \
	'"error":"family ipv4 is not offered by the ipam mode (vendor-ipam)"'
expect "IPv6: outside the pool" POST '/v1/ipam/fd01::a?owner=p6/eth0' 400 \
	'"error":"address fd01::a is outside the pool fd00::/112"'
expect_body "IPv6: DELETE /v1/ipam/{ip}" DELETE '/v1/ipam/fd00::a' 200 '{"released":["fd00::a"]}'
expect "IPv6: the summary" GET /v1/status 200 '"summary":"0/1 allocated from fd00::/112"'
stop_agent TERM

mkdir -p "$WORK/only"
chmod 0755 "$WORK/only"
install -m 0644 "$mods/vendor-ipam.so" "$WORK/only/vendor-ipam.so"
start_agent "$WORK/only" "${VENDOR[@]}"
cli status
check "no IPAM line in fibril status without ipam-api" test "$CRC" = 0 -a -z "$(out | grep '^IPAM:' || true)"
stop_agent TERM

# ---- start-time refusals ----------------------------------------------------------

printf 'c1/eth0 10.0.3.7\n\nc2/eth0 10.0.3.7.1\n' >"$WORK/bad"
run_agent "$mods" --set "vendor-ipam.table=$WORK/bad" --set vendor-ipam.cidr=10.0.3.0/24
check "a bad table line fails the start with FILE:LINE" contains "$OUT" "module vendor-ipam failed to start: table $WORK/bad:3: invalid address '10.0.3.7.1'"
check "  and the agent exits 1" test "$RC" = 1
for bad in "c1 10.0.4.7|address 10.0.4.7 is outside cidr 10.0.3.0/24" \
	"c1 10.0.3.1|address 10.0.3.1 is the gateway of 10.0.3.0/24" \
	"c1 10.0.3.255|address 10.0.3.255 is the broadcast address of 10.0.3.0/24" \
	"c1 10.0.3.7 extra|expected 'OWNER ADDRESS'" \
	"c1 10.0.3.7\nc1 10.0.3.8|owner c1 is listed twice (first on line 1)" \
	"c1 10.0.3.7\nc2 10.0.3.7|address 10.0.3.7 is listed twice (first on line 1)"; do
	printf '%b\n' "${bad%%|*}" >"$WORK/bad"
	run_agent "$mods" --set "vendor-ipam.table=$WORK/bad" --set vendor-ipam.cidr=10.0.3.0/24
	check "table refused: ${bad#*|}" contains "$OUT" "table $WORK/bad:"
	check "  with why" contains "$OUT" "${bad#*|}"
done
run_agent "$mods" --set "vendor-ipam.table=$WORK/missing" --set vendor-ipam.cidr=10.0.3.0/24
check "a missing table fails the start" contains "$OUT" "table $WORK/missing: No such file or directory"
run_agent "$mods" --set "vendor-ipam.table=$WORK/table" --set vendor-ipam.cidr=10.0.3.1/24
check "a bad cidr is a config error before anything starts" contains "$OUT" "[vendor-ipam] cidr: expected a CIDR such as 10.0.0.0/24"
run_agent "$mods" --set "vendor-ipam.table=$WORK/table" --set vendor-ipam.cidr=10.0.3.0/24 --set vendor-ipam.gateway=10.0.4.1
check "a gateway outside the cidr fails the start" contains "$OUT" "[vendor-ipam] gateway 10.0.4.1 is not a host address of 10.0.3.0/24"
run_agent "$mods" --set vendor-ipam.cidr=10.0.3.0/24
check "an unset table fails the start" contains "$OUT" "[vendor-ipam] table is not set"
mkdir -p "$WORK/api-only"
chmod 0755 "$WORK/api-only"
install -m 0644 "$mods/ipam-api.so" "$WORK/api-only/ipam-api.so"
run_agent "$WORK/api-only"
check "ipam-api without an ipam mode is refused" contains "$OUT" "unresolved dependency: ipam-api -> 'ipam'"

# ---- the agent under valgrind with both modules -----------------------------------

if [ -z "${SAN_CFLAGS:-}" ]; then
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	"$top_builddir/libtool" --mode=execute valgrind -q --leak-check=full \
		--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--error-exitcode=99 --log-file="$WORK/vg-agent.%p" "$AGENT" "${args[@]}" "${VENDOR[@]}" \
		>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || true
	check "the agent starts ipam-api and vendor-ipam under valgrind" test -S "$WORK/fibril.sock"
	req POST '/v1/ipam?owner=c1/eth0' >/dev/null
	req POST '/v1/ipam/10.0.3.8?owner=c1/eth0' >/dev/null
	req POST '/v1/ipam/10.9.9.9?owner=c1/eth0' >/dev/null
	req POST '/v1/ipam?owner=nobody' >/dev/null
	req GET /v1/ipam >/dev/null
	req GET /v1/status >/dev/null
	req DELETE '/v1/ipam/10.0.3.7' >/dev/null
	req DELETE '/v1/ipam?owner=c2/eth0' >/dev/null
	rc=0
	stop_agent TERM || rc=$?
	check "valgrind: the ipam routes leak nothing (exit $rc)" test "$rc" = 0 ||
		cat "$WORK"/vg-agent.* "$WORK/agent.log"
fi

# ---- the same routes against ipam-cluster-pool, when it provides ipam -----------

cp_so=$top_builddir/.libs/ipam-cluster-pool.so
if [ -f "$cp_so" ]; then
	cpmods=$WORK/cpmods
	mkdir -p "$cpmods"
	chmod 0755 "$cpmods"
	install -m 0644 "$cp_so" "$cpmods/ipam-cluster-pool.so"
	install -m 0644 "$mods/ipam-api.so" "$cpmods/ipam-api.so"
	CP=(--set ipam-cluster-pool.node-cidr=10.0.3.0/24)
	run_agent "$cpmods" "${CP[@]}" --check
	if [ "$RC" = 0 ]; then
		start_agent "$cpmods" "${CP[@]}"
		route_checks ipam-cluster-pool 10.0.3.0/24 10.0.3.1
		expect "ipam-cluster-pool: the summary" GET /v1/status 200 '"summary":"0/253 allocated from 10.0.3.0/24'
		stop_agent TERM
	else
		note_or_fail "ipam-cluster-pool is built but does not run with node-cidr as an ipam mode: $(echo "$OUT" | head -1)"
	fi
fi

finish
