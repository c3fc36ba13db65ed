#!/usr/bin/env bash
# tests/integration/cluster_policy.sh - policy across nodes: three nodes
# (tests/lib/multinode.sh), cluster-wide identities through one etcd, native
# routing. A CiliumNetworkPolicy on n1 lets into n1's server pod only pods
# whose labels say namespace "good". The peers live on the other nodes and
# are added after the policy, so n1 resolves the selector only from the
# identities other nodes allocated (the endpoint module's identity events):
#   - a pod labelled "good" on n2 connects (real TCP), a pod labelled "bad"
#     on n3 does not; n1's selector shows the "good" identity;
#   - a second "good" pod, on n3, connects too (the same identity);
#   - the identity deleted from etcd leaves n1's selector (and the pod is
#     refused again);
#   - incrementally: with a second local pod on n1 that no policy selects,
#     the identities of good and bad coming to n1 resolve only the server
#     pod, once (good enters the selector, bad matches none): no full
#     recompute, the other pod never.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy
NODES=(n1 n2 n3)
PORT=$((20000 + RANDOM % 20000))
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16
	--set nodes.retry=300ms --set endpoint.identity-timeout=5s
	--set endpoint.identity-gc-interval=1h --set kvstore-etcd.request-timeout=2s)
identity() { mn_json "${MN_POD_NODE[$1]}" "/v1/endpoint/container-id:$MN_TAG$1:eth0" "j['identity']"; }

for n in "${NODES[@]}"; do
	mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of $n starts"; finish; }
done
for n in "${NODES[@]}"; do check "$n knows and routes the two others" wait_for 15 mn_routes_all "$n"; done

mn_pod_add n1 srv srv || { fail "the server pod on n1"; finish; }
mn_serve srv "$PORT" || fail "the server listens"

cat >"$WORK/cnp.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "srv-from-good"},
 "spec": {"endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "srv"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "good"}}]}]}}
EOF2
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/cnp.json" 2>&1)
check "n1 imports the policy" contains "$out" "Revision: 1"

# a second pod on n1 that no policy selects (the selector cache must leave it alone)
mn_pod_add n1 other other || fail "a second pod on n1, labelled other"
# pstats : n1's "endpoint_resolutions recomputes cluster_identity_updates endpoints"
pstats() { mn_json n1 /v1/policy "' '.join(str(j['stats'][k]) for k in ('endpoint_resolutions', 'recomputes', 'cluster_identity_updates')) + ' ' + str(len(j['endpoints']))"; }
two_eps() { [ "$(pstats | cut -d' ' -f4)" = 2 ]; }
check "n1's policy module knows its two pods" wait_for 10 two_eps
# the identity events of both (srv's and other's, through the kvstore watch) have come
two_ids() { [ "$(pstats | cut -d' ' -f3)" -ge 2 ]; }
check "  and the cluster identities of both" wait_for 10 two_ids
read -r res0 full0 upd0 _ <<<"$(pstats)"

mn_pod_add n2 good good || fail "a pod labelled good on n2"
mn_pod_add n3 bad bad || fail "a pod labelled bad on n3"
GOOD=$(identity good) BAD=$(identity bad)
echo "  identities: good $GOOD (allocated by n2), bad $BAD (allocated by n3)"
both_came() { [ "$(pstats | cut -d' ' -f3)" -ge $((upd0 + 2)) ]; }
check "n1 hears of the two new cluster identities" wait_for 10 both_came

# tcp POD : "ok" when a TCP connection to the server gets its answer (1 s: a drop is a timeout)
tcp() { mn_tcp_get "$1" "${MN_POD_IP[srv]}" "$PORT"; }
gets_in() { [ "$(tcp "$1")" = ok ]; }
selected() { mn_json n1 /v1/policy/selectors "sorted(set(i for s in j['selectors'] for i in s['identities']) if isinstance(j, dict) else set(i for s in j for i in s['identities']))"; }
selects() { [[ "$(selected)" =~ (^|[^0-9])$1([^0-9]|$) ]]; }
lets_go() { ! selects "$1"; }
refused() { [ "$(tcp "$1")" = fail ]; }

check "n1's selector holds the identity n2 allocated for good ($GOOD)" wait_for 10 selects "$GOOD" ||
	echo "  selected: $(selected)"
check "the good pod on n2 connects to n1's server (TCP)" wait_for 10 gets_in good
check "the bad pod on n3 does not" test "$(tcp bad)" = fail
check "  and n1's selector does not hold its identity ($BAD)" lets_go "$BAD"
read -r res1 full1 upd1 _ <<<"$(pstats)"
check "the two identities resolved only the server pod, once, with no full recompute (resolutions $res0 -> $res1, recomputes $full0 -> $full1, identity updates $upd0 -> $upd1)" \
	test "$((res1 - res0))" = 1 -a "$full1" = "$full0"

mn_pod_add n3 good2 good || fail "a second pod labelled good, on n3"
check "  it has the same identity" test "$(identity good2)" = "$GOOD"
check "the good pod on n3 connects too" wait_for 10 gets_in good2
check "the bad pod on n3 still does not" test "$(tcp bad)" = fail

# the identity's record deleted: n1 forgets it (the watch), the selector drops it
mn_etcdctl del "/fibril/state/identities/v1/id/$GOOD" >/dev/null
check "good's id/ record deleted: n1's selector lets go of $GOOD" wait_for 10 lets_go "$GOOD"
check "  and the good pod on n2 is refused" wait_for 5 refused good
finish
