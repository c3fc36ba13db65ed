#!/usr/bin/env bash
# tests/integration/crd_k8s_write.sh - the k8s capability's writes (SDK
# 1.11 `request`, what CRD mode builds on) through tests/modules/k8sprobe.c
# against the test API server: six racing creates of one CiliumIdentity end
# with one 201 and five 409 AlreadyExists (the reason told, so the loser
# reads the winner); an update with a stale resourceVersion is a 409
# Conflict, with the current one a 200, without one a 422; a delete's stale
# precondition is a 409; a live GET of a deleted object is 404 NotFound; a
# Lease is written in its namespace; the ciliumidentities informer sees what
# was written; bad arguments (unknown resource, a name or namespace that is
# no RFC 1123 name, a name on a create, an unknown method) are refused at
# once, and an unreachable server is an error with status 0 and a message.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require
[ "$(id -u)" = 0 ] || skip_or_fail "run as root (the agent only loads root-owned modules)"
[ -f "$top_builddir/.libs/k8s.so" ] || skip_or_fail "module k8s is not built"
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/k8s.so"
# shellcheck disable=SC2046,SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
	-Wno-unused-parameter ${SAN_CFLAGS:-} -I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) \
	-o "$WORK/k8sprobe.so" "$top_srcdir/tests/modules/k8sprobe.c" \
	-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
install -m 0644 "$WORK/k8sprobe.so" "$mods/k8sprobe.so"

# the probe drives requests no module of the agent makes (updates, deletes,
# Leases): kept out of the record k8s_rbac.sh checks the ClusterRole against
unset FIBRIL_K8S_REQUEST_LOG_DIR
k8s_start --bookmark-interval 1 || { fail "the API server starts"; finish; exit 1; }
start_agent "$mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-a \
	--set k8s.resources=ciliumidentities || { fail "the agent starts"; finish; exit 1; }

# req METHOD RESOURCE NAMESPACE NAME [BODY] : start a request, print its op number
# (or the refusal's JSON)
req() {
	local q="method=$1&resource=$2"
	[ -n "$3" ] && q="$q&namespace=$3"
	[ -n "$4" ] && q="$q&name=$4"
	api -X POST -H 'Content-Type: application/json' ${5:+--data-binary "$5"} \
		"http://x/v1/k8sprobe/request?$q"
}
# result OP : wait for the reply of op OP and print it
result() {
	case $1 in '' | *[!0-9]*) echo '{"done":false}' && return 0 ;; esac # the request was refused
	await_output 20 '"done":true' api "http://x/v1/k8sprobe/op/$1" || true
}
# field JSON EXPR : a python expression over j
field() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null || echo "?"; }
op_of() { field "$1" 'j["op"]'; }

# -- six racing creates of one name ---------------------------------------------
k8s_ctl -o /dev/null config?write_delay=0.05
ops=()
for i in 1 2 3 4 5 6; do
	body='{"apiVersion":"cilium.io/v2","kind":"CiliumIdentity","metadata":{"name":"70123"},"security-labels":{"k8s:app":"racer-'$i'"}}'
	ops+=("$(op_of "$(req POST ciliumidentities "" "" "$body")")")
done
outcomes=""
for op in "${ops[@]}"; do
	r=$(result "$op")
	outcomes="$outcomes $(field "$r" '"%s/%s" % (j["status"], j["reason"] or "-")')"
done
outcomes=$(tr ' ' '\n' <<<"$outcomes" | sed '/^$/d' | sort | tr '\n' ' ')
check "6 racing creates: one 201, five 409 AlreadyExists" \
	test "$outcomes" = "201/- 409/AlreadyExists 409/AlreadyExists 409/AlreadyExists 409/AlreadyExists 409/AlreadyExists "
k8s_ctl -o /dev/null config?write_delay=0
r=$(result "$(op_of "$(req GET ciliumidentities "" 70123)")")
check "a live GET reads the winner: 200 with its labels" \
	test "$(field "$r" 'j["status"] == 200 and j["body"]["security-labels"]["k8s:app"].startswith("racer-")')" = True
rv=$(field "$r" 'j["body"]["metadata"]["resourceVersion"]')
[[ $rv =~ ^[0-9]+$ ]] || rv=0
winner=$(field "$r" 'j["body"]["security-labels"]["k8s:app"]')
check "the ciliumidentities informer sees the winner" \
	await_output 10 '"name":"70123"' api http://x/v1/k8sprobe/ciliumidentities

# -- updates and deletes with resourceVersions ----------------------------------
upd() { printf '{"apiVersion":"cilium.io/v2","kind":"CiliumIdentity","metadata":{"name":"70123"%s},"security-labels":{"k8s:app":"%s"}}' "$1" "$2"; }
r=$(result "$(op_of "$(req PUT ciliumidentities "" 70123 "$(upd ",\"resourceVersion\":\"$((rv - 1))\"" stale)")")")
check "PUT with a stale resourceVersion: 409 Conflict" test "$(field "$r" '"%s/%s" % (j["status"], j["reason"])')" = 409/Conflict
r=$(result "$(op_of "$(req PUT ciliumidentities "" 70123 "$(upd "" blind)")")")
check "PUT of a custom resource without resourceVersion: 422 Invalid" \
	test "$(field "$r" '"%s/%s" % (j["status"], j["reason"])')" = 422/Invalid
r=$(result "$(op_of "$(req PUT ciliumidentities "" 70123 "$(upd ",\"resourceVersion\":\"$rv\"" "$winner")")")")
check "PUT with the current resourceVersion: 200" test "$(field "$r" 'j["status"]')" = 200
rv2=$(field "$r" 'j["body"]["metadata"]["resourceVersion"]')
r=$(result "$(op_of "$(req PATCH ciliumidentities "" 70123 '{"metadata":{"labels":{"a":"b"}}}')")")
check "PATCH (merge): 200, labels set" test "$(field "$r" 'j["status"], j["body"]["metadata"]["labels"]')" = "(200, {'a': 'b'})"
r=$(result "$(op_of "$(req DELETE ciliumidentities "" 70123 "{\"preconditions\":{\"resourceVersion\":\"$rv2\"}}")")")
check "DELETE with a stale precondition: 409 Conflict" test "$(field "$r" '"%s/%s" % (j["status"], j["reason"])')" = 409/Conflict
r=$(result "$(op_of "$(req DELETE ciliumidentities "" 70123)")")
check "DELETE: 200" test "$(field "$r" 'j["status"]')" = 200
r=$(result "$(op_of "$(req GET ciliumidentities "" 70123)")")
check "GET of the deleted identity: 404 NotFound" test "$(field "$r" '"%s/%s" % (j["status"], j["reason"])')" = 404/NotFound

# -- a namespaced resource: the GC Lease ----------------------------------------
lease='{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"fibril-gc"},"spec":{"holderIdentity":"node-a","leaseDurationSeconds":15}}'
r=$(result "$(op_of "$(req POST leases kube-system "" "$lease")")")
check "POST a Lease into kube-system: 201" test "$(field "$r" 'j["status"], j["body"]["metadata"]["namespace"]')" = "(201, 'kube-system')"
check "the API server holds it there" \
	contains "$(k8s_api /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fibril-gc)" '"holderIdentity":"node-a"'

# -- refused at once ------------------------------------------------------------
check "an unknown resource: -ENOENT" test "$(field "$(req GET secrets "" x)" 'j["rc"]')" = -2
check "a name that is no RFC 1123 name: -EINVAL" test "$(field "$(req GET ciliumidentities "" Bad_Name)" 'j["rc"]')" = -22
check "a path in the namespace: -EINVAL" test "$(field "$(req GET leases ..%2Fx y)" 'j["rc"]')" = -22
check "a name on a create: -EINVAL" test "$(field "$(req POST leases kube-system y '{}')" 'j["rc"]')" = -22
check "an unknown method: -EINVAL" test "$(field "$(req FETCH leases kube-system y)" 'j["rc"]')" = -22
check "a write without a body: -EINVAL" test "$(field "$(req PUT leases kube-system y)" 'j["rc"]')" = -22

# -- no server ------------------------------------------------------------------
k8s_ctl -o /dev/null pause?seconds=4
r=$(result "$(op_of "$(req GET leases kube-system fibril-gc)")")
check "the server unreachable: status 0, an error and a message" \
	test "$(field "$r" 'j["status"] == 0 and j["err"] < 0 and len(j["message"]) > 0')" = True || echo "$r"
check "the agent lives on" test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" != 000
finish
