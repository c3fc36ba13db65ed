#!/usr/bin/env bash
# tests/integration/cli_endpoint_view.sh - what `fibril endpoint` shows of
# real endpoints (issue 26): two pods whose container IDs share their first
# 12+ characters, as the demo's do (demo-fibril-demo-pod-web, -db), are
# told apart in `endpoint list`'s CONTAINER column (cut to the shortest
# prefix, at least 12 characters, that differs), 64-hex IDs are still cut
# to 12 as docker shows them, and `endpoint get` shows the creation time
# in RFC 3339 (UTC), the time the agent's JSON gives in Unix seconds.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"

cli() { CRC=0; "$CLI" --socket "$WORK/fibril.sock" "$@" >"$WORK/out" 2>"$WORK/err" || CRC=$?; }
show_out() { sed 's/^/    /' "$WORK/out" "$WORK/err"; }
# chk WHAT COMMAND... : check, showing the CLI's output when it fails
chk() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; show_out; fi; }

start_node_agent || { fail "the agent starts"; finish; exit 1; }
pass "the agent starts with ipam-cluster-pool, ipam-api and endpoint in a node netns"

# add_endpoint NAME HOSTIF CID : a pod and its endpoint (container ID CID)
add_endpoint() {
	make_pod "$1" "$2"
	local hostif=$2 netns=$POD_NETNS ifindex=$HOST_IFINDEX pmac=$POD_MAC hmac=$HOST_MAC
	req POST "/v1/ipam?family=ipv4&owner=$3/eth0" >/dev/null
	local ip4
	ip4=$(jq_py "j['addresses'][0]['address']")
	body "$3" "$netns" "$hostif" "$ifindex" "$pmac" "$hmac" "$ip4" "" default "$1" '["k8s:app='"$1"'"]' \
		>"$WORK/$1.json"
	expect "endpoint $1 ($3) is created" PUT "/v1/endpoint/container-id:$3:eth0" 201 '"state"' \
		--data-binary @"$WORK/$1.json"
}

add_endpoint web lxcw$$ demo-fibril-demo-pod-web
add_endpoint db lxcd$$ demo-fibril-demo-pod-db
# as runtimes make them: 64 hex digits that differ early
HEX1=a1$(printf '%062d' 0)
HEX2=b2$(printf '%062d' 0)
# cells COLUMN : the CONTAINER cells of the list, one a line
cells() { awk 'NR == 1 {c = index($0, "CONTAINER"); next} c && /^[0-9]/ && length($0) > c {s = substr($0, c); sub(/ .*/, "", s); print s}' "$WORK/out"; }

cli endpoint list
chk "endpoint list: the demo's two pods have different CONTAINER cells" eval '
	w=$(grep " default/web " "$WORK/out"); d=$(grep " default/db " "$WORK/out")
	grep -q " demo-fibril-demo-pod-w " <<<"$w" && grep -q " demo-fibril-demo-pod-d " <<<"$d" &&
	[ "$(cells | sort -u | wc -l)" = 2 ]'
chk "endpoint list: the IDs are cut, not shown whole" \
	eval '! grep -q "demo-fibril-demo-pod-web" "$WORK/out"'

# container IDs as runtimes make them (64 hex) differ early: 12 characters
add_endpoint hexa lxch$$ "$HEX1"
add_endpoint hexb lxci$$ "$HEX2"
# the two demo IDs above still need 22 characters; two hex IDs alone need 12
cli endpoint list
chk "endpoint list: four different cells, each cut to the 22 characters the demo's need" \
	eval '[ "$(cells | sort -u | wc -l)" = 4 ] && [ "$(cells | awk "{print length(\$0)}" | sort -u)" = 22 ]'
req DELETE /v1/endpoint/container-id:demo-fibril-demo-pod-web:eth0 >/dev/null
req DELETE /v1/endpoint/container-id:demo-fibril-demo-pod-db:eth0 >/dev/null
cli endpoint list
chk "endpoint list: 64-hex IDs alone are cut to 12 characters, as docker shows them" \
	eval 'grep -q " ${HEX1:0:12} " "$WORK/out" && grep -q " ${HEX2:0:12} " "$WORK/out" && ! grep -q "${HEX1:0:13}" "$WORK/out"'

cli endpoint get "container-id:$HEX1"
created=$(api "http://x/v1/endpoint/container-id:$HEX1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["created"])')
want=$(date -u -d "@$created" +%Y-%m-%dT%H:%M:%SZ)
chk "endpoint get: CREATED in RFC 3339 UTC ($want), not Unix seconds" \
	eval 'grep -Eq "^CREATED +$want$" "$WORK/out"'
cli -o json endpoint get "container-id:$HEX1"
chk "endpoint get -o json keeps the agent's Unix seconds" \
	eval 'grep -Eq "\"created\": *$created" "$WORK/out"'

finish
