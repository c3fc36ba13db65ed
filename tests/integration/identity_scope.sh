#!/usr/bin/env bash
# tests/integration/identity_scope.sh - the scope an identity is shown with
# (issue 26: cluster-wide identities were called `local`). Two nodes with
# cluster-wide allocation through the kvstore (tests/lib/multinode.sh), a pod
# on each:
#   - `fibril identity list` / `identity get` / GET /v1/identity name the pods'
#     identity cluster:kvstore and the reserved ones reserved;
#   - `fibril map dump dp_ipcache` names the other node's pod's identity
#     cluster:kvstore, the host's `host`.
# (endpoint.sh checks the node-local case: an agent without a kvstore says local.)
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16 \
		--set nodes.retry=300ms --set endpoint.identity-allocation=kvstore ||
		{ fail "the agent of $n starts"; finish; }
done
for n in n1 n2; do check "$n knows and routes the other" wait_for 15 mn_routes_all "$n"; done
mn_pod_add n1 web scope || fail "a pod on n1"
mn_pod_add n2 db scope || fail "a pod on n2"
ID=$(mn_json n1 "/v1/endpoint/container-id:${MN_TAG}web:eth0" "j['identity']")
check "the pods have a cluster identity ($ID)" test "${ID:-0}" -ge 256

cli1() { "$CLI" -s "${MN_DIR[n1]}/fibril.sock" "$@" >"$WORK/out" 2>&1; }
cli1 identity list
check "identity list: the pods' identity is cluster:kvstore" \
	grep -Eq "^$ID +cluster:kvstore +1 +k8s:io.kubernetes.pod.namespace=scope" "$WORK/out" ||
	cat "$WORK/out"
check "identity list: host is reserved" grep -Eq "^1 +reserved +0 +reserved:host" "$WORK/out"
cli1 identity get "$ID"
check "identity get: KIND cluster:kvstore" grep -Eq "^KIND +cluster:kvstore$" "$WORK/out" ||
	cat "$WORK/out"
check "GET /v1/identity/N: scope cluster:kvstore" \
	test "$(mn_json n1 "/v1/identity/$ID" "j['scope']")" = cluster:kvstore

dp_ipcache_line() { "$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump dp_ipcache 2>&1 |
	grep -F "${MN_POD_IP[db]}/32"; }
check "n1's dp_ipcache holds n2's pod" wait_for 15 dp_ipcache_line
line=$(dp_ipcache_line)
check "dp_ipcache: n2's pod's identity is cluster:kvstore ($line)" \
	grep -q "identity=$ID (cluster:kvstore)" <<<"$line"
finish
