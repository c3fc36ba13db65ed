#!/usr/bin/env bash
# tests/integration/k8s_no_crd.sh - a cluster without Cilium's CRDs: the
# test API server (tests/k8s/apiserver.py --no-cilium) answers 404 for the
# cilium.io resources. The k8s module, asked to watch networkpolicies,
# ciliumnetworkpolicies and ciliumclusterwidenetworkpolicies, reports the
# two CRDs "unavailable" (synced, empty, health OK, one log line each) and
# does not retry them in a loop, while networkpolicies are watched as
# usual; the agent is healthy (200).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require
[ "$(id -u)" = 0 ] || skip_or_fail "run as root (the agent only loads root-owned modules)"
[ -f "$top_builddir/.libs/k8s.so" ] || skip_or_fail "module k8s is not built"
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/k8s.so"

k8s_start --no-cilium --bookmark-interval 1 || { fail "the API server starts"; finish; exit 1; }
start_agent "$mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-a \
	--set k8s.resources=networkpolicies,ciliumnetworkpolicies,ciliumclusterwidenetworkpolicies ||
	{ fail "the agent starts"; finish; exit 1; }

# phase RESOURCE : its phase and synced flag in GET /v1/k8s
phase() { api http://x/v1/k8s | python3 -c '
import json,sys
r = [x for x in json.load(sys.stdin)["resources"] if x["name"] == sys.argv[1]]
print(r[0]["phase"], r[0]["synced"], r[0]["objects"]) if r else print("none")' "$1"; }
is() { [ "$(phase "$1")" = "$2" ]; }
check "ciliumnetworkpolicies: unavailable, synced, empty" wait_for 10 is ciliumnetworkpolicies "unavailable True 0" ||
	phase ciliumnetworkpolicies
check "ciliumclusterwidenetworkpolicies: unavailable, synced, empty" \
	wait_for 10 is ciliumclusterwidenetworkpolicies "unavailable True 0"
check "networkpolicies are watched as usual" wait_for 10 is networkpolicies "watching True 0"
sleep 3 # sleep: a window for a retry that must not come (it would log again, 0.8 s backoff, and keep health degraded)
check "the agent is healthy (200)" test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200 ||
	api http://x/v1/healthz
status=$(api http://x/v1/status)
check "k8s health names the missing kind, as OK" \
	contains "$status" "watch ciliumnetworkpolicies: not served by the API server (404)"
check "said once in the log, not retried in a loop" \
	test "$(grep -c 'ciliumnetworkpolicies: not served by the API server' "$WORK/agent.log")" = 1 ||
	grep "ciliumnetworkpolicies" "$WORK/agent.log"
check "no 'retrying' for the missing kinds" \
	test "$(grep -c 'watch ciliumnetworkpolicies.*retrying' "$WORK/agent.log")" = 0
check "the agent is still running" kill -0 "$AGENT_PID"
finish
