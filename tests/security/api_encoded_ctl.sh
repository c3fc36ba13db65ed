#!/usr/bin/env bash
# tests/security/api_encoded_ctl.sh - the attack: a percent-encoded CR or LF
# (or another control character) in a request's path or query, e.g.
# `DELETE /v1/ipam?owner=<pod>/eth0%0Ajunk`: libwebsockets cut the value at
# the decoded CR/LF, so the request named a live pod's owner and released
# its address (then handed to another owner); the same on
# /v1/endpoint/{ref}, /v1/ipam/{ip}, /v1/service/{id} and
# /v1/policy/{name}?namespace=. The promise: a control character after
# decoding, anywhere in the request target, is answered 400 with a JSON
# error naming the parameter, and changes nothing (IPAM, endpoints, their
# state on disk are as before).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"

STATE=$WORK/state
snapshot() {
	{
		(cd "$STATE" && find . -type f | sort | xargs md5sum)
		api http://x/v1/endpoint
		api http://x/v1/ipam
	} | md5sum
}

start_node_agent || { fail "the agent starts"; finish; exit 1; }
make_pod a lxca$$ ; A=("$POD_NETNS" "lxca$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")
CID=aaaa$$000000000000000000000000000000000000000000000000000000000000
CID=${CID:0:64}
expect "IPAM hands the pod its addresses" POST "/v1/ipam?family=both&owner=$CID/eth0" 201 '"owner"'
A4=$(jq_py "[a['address'] for a in j['addresses'] if a['family']=='ipv4'][0]")
A6=$(jq_py "[a['address'] for a in j['addresses'] if a['family']=='ipv6'][0]")
body "$CID" "${A[@]}" "$A4" "$A6" default web-1 '["k8s:app=web"]' >"$WORK/a.json"
expect "the pod's endpoint is created" PUT "/v1/endpoint/container-id:$CID:eth0" 201 '"state":"ready"' \
	--data-binary @"$WORK/a.json"
before=$(snapshot)

# refused WHAT METHOD PATH NEEDLE : 400, a JSON error naming NEEDLE
refused() {
	local what=$1 method=$2 path=$3 needle=$4 got
	got=$(req "$method" "$path")
	if [ "$got" = 400 ] && json_ok "j['code'] == 400" && contains "$(resp)" "$needle"; then
		pass "$what: 400 naming $needle"
	else
		fail "$what: expected 400 naming $needle, got HTTP $got: $(resp)"
	fi
}

for enc in %0A %0D %0d%0a %09 %1B %7F; do
	refused "DELETE /v1/ipam?owner=<pod>/eth0${enc}junk" DELETE "/v1/ipam?owner=$CID/eth0${enc}junk" "'owner'"
	refused "DELETE /v1/ipam?family=ipv4&owner=<pod>/eth0${enc}" DELETE "/v1/ipam?owner=$CID/eth0${enc}&family=ipv4" "'owner'"
	refused "DELETE /v1/ipam/<ip>${enc}junk" DELETE "/v1/ipam/$A4${enc}junk" "path"
	refused "DELETE /v1/endpoint/<ref>${enc}junk" DELETE "/v1/endpoint/container-id:$CID:eth0${enc}junk" "path"
	refused "PATCH /v1/endpoint/<ref>${enc}" PATCH "/v1/endpoint/container-id:$CID:eth0${enc}" "path"
	refused "DELETE /v1/service/1${enc}5" DELETE "/v1/service/1${enc}5" "path"
	refused "DELETE /v1/policy/x?namespace=default${enc}" DELETE "/v1/policy/x?namespace=default${enc}" "'namespace'"
done
check "nothing changed: IPAM, endpoints and their state on disk are as before" test "$(snapshot)" = "$before"
expect "the pod still holds its address" GET "/v1/ipam" 200 "\"address\":\"$A4\",\"owner\":\"$CID/eth0\""
expect "the pod's endpoint is still there" GET "/v1/endpoint/container-id:$CID:eth0" 200 '"state":"ready"'
expect "a plain request still works on the same agent" GET "/v1/healthz" 200 ''
finish
