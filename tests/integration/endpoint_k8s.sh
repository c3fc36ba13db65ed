#!/usr/bin/env bash
# tests/integration/endpoint_k8s.sh - endpoint labels from Kubernetes: the
# fake kube-apiserver (tests/k8s/apiserver.py) and the real kubectl, both
# in the node netns with the agent (k8s, ipam-cluster-pool, ipam-api,
# endpoint). A pod that exists before its endpoint gives it its labels at
# PUT; a pod created after its endpoint relabels it (identity recomputed);
# `kubectl label` changes it again, and two pods with the same labels end
# up sharing an identity; labels changed while the agent is down are
# picked up after a restart. Labels of a pod that Cilium's default filter
# leaves out (pod-template-hash) do not split an identity.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require
[ -f "$top_builddir/.libs/k8s.so" ] || skip_or_fail "module k8s is not built"
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/k8s.so"

# ---- the API server, in the node netns (the agent cannot reach the root's loopback) ----
K8S_NETNS=$NODE
k8s_start --bookmark-interval 1 || { fail "the API server starts"; finish; exit 1; }
kcn() { kc "$@"; } # kubectl in the node netns (K8S_NETNS)

NODE_NAME=node-a
NODE_ARGS+=(--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$NODE_NAME" --set k8s.sync-timeout=10s)

create_pod() { # NAME LABEL=VALUE...
	local name=$1
	shift
	{
		printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: default\n  labels:\n' "$name"
		for l in "$@"; do printf '    %s: "%s"\n' "${l%%=*}" "${l#*=}"; done
		printf 'spec:\n  nodeName: %s\n  containers:\n  - name: c\n    image: busybox\n' "$NODE_NAME"
	} >"$WORK/pod-$name.yaml"
	kcn create -f "$WORK/pod-$name.yaml" >/dev/null
}

# await_json WHAT PYTHON-EXPR PATH : a check: GET PATH until EXPR (j = the body) holds, 10 s
await_json() {
	local what=$1
	if wait_for 10 _json_holds "$2" "$3"; then
		pass "$what"
		return 0
	fi
	fail "$what (last: $(resp))"
	return 1
}
_json_holds() { [ "$(req GET "$2")" = 200 ] && json_ok "$1" 2>/dev/null; }

start_node_agent || { fail "the agent starts with k8s"; finish; exit 1; }
pass "the agent starts with k8s, ipam-cluster-pool, ipam-api and endpoint"
check "the endpoint module watches pods" grep -q "kubernetes pods watched" <(last_log)

make_pod w lxcw$$ ; W=("$POD_NETNS" "lxcw$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")
make_pod d lxcd$$ ; D=("$POD_NETNS" "lxcd$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")

# 1. the pod exists before its endpoint (the usual order): its labels at PUT
create_pod web-1 app=web pod-template-hash=7c5ddbdf54
await_json "the k8s cache has pod web-1" "[i for i in j['items'] if i['name'] == 'web-1']" /v1/k8s/pods
body cidw$$ "${W[@]}" 10.77.1.2 "" default web-1 '["k8s:from=cni"]' >"$WORK/w.json"
expect "PUT for pod web-1: 201" PUT "/v1/endpoint/container-id:cidw$$:eth0" 201 '"state":"ready"' \
	--data-binary @"$WORK/w.json"
check "the endpoint has the pod's labels (and the namespace label; not pod-template-hash)" \
	json_ok "j['labels'] == ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default']"
IDENT_WEB=$(jq_py "j['identity']")

# 2. the endpoint first, the pod after
body cidd$$ "${D[@]}" 10.77.1.3 "" default db-1 '["k8s:from=cni"]' >"$WORK/d.json"
expect "PUT for pod db-1 (not in Kubernetes yet): 201 with the body's labels" \
	PUT "/v1/endpoint/container-id:cidd$$:eth0" 201 '"labels":["k8s:from=cni","k8s:io.kubernetes.pod.namespace=default"]' \
	--data-binary @"$WORK/d.json"
IDENT_CNI=$(jq_py "j['identity']")
create_pod db-1 app=db
await_json "kubectl create pod db-1 (app=db): the endpoint takes its labels" \
	"j['labels'] == ['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=default'] and j['state'] == 'ready'" \
	"/v1/endpoint/container-id:cidd$$:eth0"
IDENT_DB=$(jq_py "j['identity']")
check "... with a new identity" test "$IDENT_DB" != "$IDENT_CNI" -a "$IDENT_DB" != "$IDENT_WEB"
check "the identity of the CNI labels went with its last endpoint" test "$(req GET "/v1/identity/$IDENT_CNI")" = 404
# the journal has it once its batch is flushed (a k8s change waits for nobody)
journal_has_db() {
	python3 "$top_srcdir/tests/integration/endpoint_journal.py" "$WORK/state/endpoint" 2 |
		grep -q '"labels":\["k8s:app=db",'
}
check "the journal has the pod's labels" wait_for 5 journal_has_db

# 3. kubectl label
kcn label pod db-1 tier=backend >/dev/null
await_json "kubectl label pod db-1 tier=backend: labels follow" \
	"j['labels'] == ['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=default', 'k8s:tier=backend']" \
	"/v1/endpoint/container-id:cidd$$:eth0"
IDENT_DB2=$(jq_py "j['identity']")
check "... and the identity changes again" test "$IDENT_DB2" != "$IDENT_DB"
kcn label pod db-1 tier- app=web pod-template-hash=59b8f6c4d --overwrite >/dev/null
await_json "kubectl label pod db-1 app=web tier- (another pod-template-hash): the same labels as web-1" \
	"j['labels'] == ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default']" "/v1/endpoint/container-id:cidd$$:eth0"
check "... so the same identity as web-1" json_ok "j['identity'] == $IDENT_WEB"
expect "identity $IDENT_WEB now counts 2 endpoints" GET "/v1/identity/$IDENT_WEB" 200 '"endpoints":2'
expect "the bus carried the updates" GET /v1/bus 200 '"topics"'
check "... endpoint.updated published 3 times" \
	json_ok "[t['published'] for t in j['topics'] if t['name']=='endpoint.updated'] == [3]"

# 4. labels changed while the agent is down
stop_agent KILL || true
kcn label pod web-1 app=frontend --overwrite >/dev/null
start_node_agent || fail "the agent restarts"
await_json "after a restart, web-1's endpoint takes the labels changed meanwhile" \
	"j['labels'] == ['k8s:app=frontend', 'k8s:io.kubernetes.pod.namespace=default'] and j['state'] == 'ready'" \
	"/v1/endpoint/container-id:cidw$$:eth0"
expect "db-1's endpoint kept its identity across the restart" GET "/v1/endpoint/container-id:cidd$$:eth0" 200 \
	"\"identity\":$IDENT_WEB,"
check "the restore is logged" grep -Eq "restored 2 endpoints in [0-9.]+ ms \(0 removed\)" <(last_log)
stop_agent TERM || true
finish
