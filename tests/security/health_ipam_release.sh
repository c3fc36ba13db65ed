#!/usr/bin/env bash
# tests/security/health_ipam_release.sh - the attack: a caller of the API
# releases the health endpoint's IPAM reservation (DELETE /v1/ipam/{ip} or
# DELETE /v1/ipam?owner=fibril-health) while the address stays on the
# node's loopback, then allocates it to a pod of its own: two holders of
# one address. The promise: ipam-api refuses to release an address the
# agent itself holds (owner fibril-*) with 409 naming the owner, and the
# reservation stays (the address is not handed to anyone else).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api nodes health
NODE=$(mn_ns n1)
mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16 \
	--set "health.port=$((20000 + ($$ + 13) % 20000))" || { fail "the agent starts"; finish; }

api() { mn_api n1 "$@"; }
# req METHOD PATH [curl args...] : prints the HTTP status; the body is in $WORK/body
req() {
	local method=$1 path=$2
	shift 2
	api -X "$method" -o "$WORK/body" -w '%{http_code}' "$@" "http://x$path" || true
}
expect() { # expect WHAT METHOD PATH STATUS NEEDLE
	local got
	got=$(req "$2" "$3")
	if [ "$got" = "$4" ] && contains "$(cat "$WORK/body")" "$5"; then pass "$1"; else
		fail "$1 (HTTP $got, expected $4: $(cat "$WORK/body"))"; fi
}
jq_py() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$WORK/body"; }

# the health endpoint's address: the one fibril-health holds
holder_addr() { api http://x/v1/ipam | python3 -c '
import json, sys
print(" ".join(a["address"] for a in json.load(sys.stdin)["allocations"] if a["owner"] == "fibril-health"))'; }
holder_present() { [ -n "$(holder_addr)" ]; }
await "the health module reserves its endpoint address in IPAM" 10 holder_present
addrs=$(holder_addr)
ep=${addrs%% *}
check "the health endpoint address $ep is on the node's loopback" \
	bash -c "ip -n $NODE addr show dev lo | grep -qw '${ep}'"

expect "DELETE /v1/ipam/$ep (the health endpoint's) is refused: 409 naming the owner" \
	DELETE "/v1/ipam/$ep" 409 'fibril-health'
expect "DELETE /v1/ipam?owner=fibril-health is refused: 409 naming the owner" \
	DELETE "/v1/ipam?owner=fibril-health" 409 'fibril-health'
check "the reservation stays: $ep is still held by fibril-health" test "$(holder_addr)" = "$addrs"
expect "another owner cannot take $ep: 409 naming fibril-health" \
	POST "/v1/ipam/$ep?owner=attacker/eth0" 409 'fibril-health'
expect "a pod's own address is still released as before" POST "/v1/ipam?family=ipv4&owner=pod1/eth0" 201 '"owner"'
p=$(jq_py "j['addresses'][0]['address']")
expect "DELETE /v1/ipam/{ip} of a pod's address: 200" DELETE "/v1/ipam/$p" 200 "\"released\":[\"$p\"]"
finish
