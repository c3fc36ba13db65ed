#!/usr/bin/env bash
# tests/integration/crd_gc.sh - CRD mode's garbage collection with no
# operator (issue 27): three agents, no etcd, the fake kube-apiserver on the
# underlay (tests/k8s/). Checked:
#   - one agent holds the Lease kube-system/fibril-gc (coordination.k8s.io/v1)
#     and says so; the others do not;
#   - a CiliumIdentity nobody references is deleted by the leader, not
#     before identity-gc-grace; the identities the pods use never are;
#   - kill -9 of the leader: another agent holds the Lease within
#     gc-lease-duration plus one renewal period (measured, printed);
#   - the dead leader's Node deleted: its CiliumEndpoints and its CiliumNode
#     are deleted by the new leader; the live nodes' are kept;
#   - a restart: an agent deletes its own node's CiliumEndpoints that match
#     no endpoint it restored (a pod gone while it was down), and keeps the
#     one of the pod it restored;
#   - every CiliumEndpoint, CiliumIdentity and CiliumNode in the server fits
#     the schema of deploy/kubernetes/crds.yaml (tests/k8s/crd_schema.py: no
#     field a real server would prune).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/k8scluster.sh"

mn_k8s_cluster_up 3 default,kube-system,alpha,beta,gamma k8s ipam-cluster-pool ipam-api endpoint datapath nodes policy
LEASE_S=4 GRACE_S=4
code_of() { k8s_api -o /dev/null -w '%{http_code}' "$1"; }
mn_k8s_nodes 10.205

start() {
	local i=${1#n}
	mn_agent_start "$1" "$WORK/mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$1" \
		--set "ipam-cluster-pool.node-cidr=10.205.$i.0/24" --set nodes.retry=300ms \
		--set endpoint.identity-timeout=5s --set "endpoint.gc-lease-duration=${LEASE_S}s" \
		--set "endpoint.identity-gc-grace=${GRACE_S}s" --set endpoint.identity-gc-interval=300ms
}
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
pass "three agents start with no kvstore"

lease_holder() {
	k8s_api "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fibril-gc" 2>/dev/null |
		python3 -c 'import json,sys
try: print(json.load(sys.stdin)["spec"]["holderIdentity"])
except Exception: pass'
}
held() { [ -n "$(lease_holder)" ]; }
check "the Lease kube-system/fibril-gc is taken" wait_for 15 held
LEADER=$(lease_holder)
[ -n "$LEADER" ] || LEADER=n1 # none: the checks below go on (and fail) as if n1 held it
says_leader() { grep -q "this node ($1) leads the garbage collection now" "${MN_DIR[$1]}/agent.log"; }
check "its holder $LEADER says it leads the GC" wait_for 5 says_leader "$LEADER"
for n in "${NODES[@]}"; do
	[ "$n" = "$LEADER" ] && continue
	check "  $n does not" eval '! says_leader '"$n"
done

# pod NODE NAME NAMESPACE : the Pod object, then CNI ADD
pod() {
	local code
	code=$(mn_k8s_post "/api/v1/namespaces/$3/pods" '{"apiVersion":"v1","kind":"Pod",
	  "metadata":{"name":"'"$2"'","namespace":"'"$3"'","labels":{"app":"'"$2"'"}},
	  "spec":{"nodeName":"'"$1"'","containers":[{"name":"c","image":"x"}]}}')
	[ "$code" = 201 ] || { echo "Pod $3/$2: $code $(cat "$WORK/post.out")" >&2; return 1; }
	mn_pod_add "$1" "$2" "$3"
}
declare -A PODNS=([a]=alpha [b]=beta [c]=gamma [a2]=alpha [b2]=beta [c2]=gamma)
declare -A ON=([a]=n1 [b]=n2 [c]=n3 [a2]=n1 [b2]=n2 [c2]=n3)
for p in a b c a2 b2 c2; do pod "${ON[$p]}" "$p" "${PODNS[$p]}" || fail "pod $p on ${ON[$p]}"; done
cep_path() { echo "/apis/cilium.io/v2/namespaces/${PODNS[$1]}/ciliumendpoints/$1"; }
cep_there() { [ "$(code_of "$(cep_path "$1")")" = 200 ]; }
cep_gone() { [ "$(code_of "$(cep_path "$1")")" = 404 ]; }
for p in a b c a2 b2 c2; do check "the CiliumEndpoint of $p is published" wait_for 10 cep_there "$p"; done
identity() { mn_json "${MN_POD_NODE[$1]}" "/v1/endpoint/container-id:$MN_TAG$1:eth0" "j['identity']"; }
declare -A ID
for p in a b c; do ID[$p]=$(identity "$p"); done
echo "  identities: a ${ID[a]} b ${ID[b]} c ${ID[c]}"
id_there() { [ "$(code_of "/apis/cilium.io/v2/ciliumidentities/$1")" = 200 ]; }
id_gone() { [ "$(code_of "/apis/cilium.io/v2/ciliumidentities/$1")" = 404 ]; }

# ---- an unused identity goes after the grace, used ones never ---------------------------
UNUSED=65000
t0=$(now_us)
code=$(mn_k8s_post /apis/cilium.io/v2/ciliumidentities '{"apiVersion":"cilium.io/v2","kind":"CiliumIdentity",
  "metadata":{"name":"'$UNUSED'"},"security-labels":{"k8s:app":"nobody-uses-this"}}')
check "an unused CiliumIdentity $UNUSED is created" test "$code" = 201
check "the leader deletes it" wait_for $((GRACE_S + 10)) id_gone $UNUSED
waited_ms=$((($(now_us) - t0) / 1000))
echo "  waited $waited_ms ms (identity-gc-grace ${GRACE_S}s)"
check "  not before identity-gc-grace" test "$waited_ms" -ge $((GRACE_S * 1000))
said_gc() { grep -q "GC: deleted CiliumIdentity (unused) $UNUSED" "${MN_DIR[$LEADER]}/agent.log"; }
check "  the leader's log says so" said_gc
for p in a b c; do check "the identity of $p (${ID[$p]}, used) is still there" id_there "${ID[$p]}"; done

# ---- what the agents wrote fits deploy/kubernetes/crds.yaml's schemas ---------------------
# (a field a schema does not declare would be pruned by a real API server)
CRDS=$top_srcdir/deploy/kubernetes/crds.yaml
# the dead node's CiliumNode below, written as the nodes module writes them
fits() { # PLURAL : every object of that kind in the server matches its CRD's schema
	k8s_api "/apis/cilium.io/v2/$1" >"$WORK/$1.json" &&
		/usr/bin/python3 "$top_srcdir/tests/k8s/crd_schema.py" "$CRDS" "$1" "$WORK/$1.json"
}
for plural in ciliumendpoints ciliumidentities; do
	check "the $plural the agents wrote fit the schema of deploy/kubernetes/crds.yaml" fits "$plural"
done
echo '{"items":[{"apiVersion":"cilium.io/v2","kind":"CiliumEndpoint","metadata":{"name":"x","namespace":"d"},
  "status":{"networking":{"addressing":[{"ipv4":"10.0.0.1"}],"nodename":"n1"}}}]}' >"$WORK/bad-cep.json"
check "  (a CiliumEndpoint with a field its schema lacks does not)" eval \
	'! /usr/bin/python3 "$top_srcdir/tests/k8s/crd_schema.py" "$CRDS" ciliumendpoints "$WORK/bad-cep.json"'

# ---- kill -9 the leader: another takes over within the lease ---------------------------
DEAD=$LEADER
declare -A DEADPOD=([n1]=a [n2]=b [n3]=c)
declare -A DEADPOD2=([n1]=a2 [n2]=b2 [n3]=c2)
# the dead node's CiliumNode (the agents' own are written by the nodes module when it publishes them)
code=$(mn_k8s_post /apis/cilium.io/v2/ciliumnodes '{"apiVersion":"cilium.io/v2","kind":"CiliumNode",
  "metadata":{"name":"'"$DEAD"'"},"spec":{"addresses":[{"type":"InternalIP","ip":"'"${MN_IP[$DEAD]}"'"}]}}')
check "the CiliumNode $DEAD exists" bash -c '[ "$1" = 201 ] || [ "$1" = 409 ]' _ "$code"
check "the CiliumNodes fit the schema of deploy/kubernetes/crds.yaml" fits ciliumnodes
t0=$(now_us)
mn_agent_kill "$DEAD" KILL
other_holds() { local h; h=$(lease_holder); [ -n "$h" ] && [ "$h" != "$DEAD" ]; }
wait_for $((LEASE_S * 3)) other_holds || true # checked below, with the time it took
took_ms=$((($(now_us) - t0) / 1000))
LEADER=$(lease_holder)
[ -n "$LEADER" ] || LEADER=$DEAD
echo "  kill -9 of $DEAD -> $LEADER holds the Lease after $took_ms ms (lease ${LEASE_S}s, renewed every $((LEASE_S * 1000 / 3)) ms)"
check "another agent ($LEADER) took the Lease over within the lease duration and one renewal" \
	test "$LEADER" != "$DEAD" -a "$took_ms" -le $((LEASE_S * 1000 + LEASE_S * 1000 / 3 + 1000))
check "  and says it leads the GC" wait_for 5 says_leader "$LEADER"

# ---- the dead node's Node deleted: its objects are collected -----------------------------
check "the CiliumEndpoints of $DEAD's pods are still there while its Node is" \
	cep_there "${DEADPOD[$DEAD]}"
k8s_api -o /dev/null -X DELETE "/api/v1/nodes/$DEAD"
check "Node $DEAD deleted: the leader deletes its CiliumEndpoint ${DEADPOD[$DEAD]}" \
	wait_for 10 cep_gone "${DEADPOD[$DEAD]}"
check "  and ${DEADPOD2[$DEAD]}" wait_for 10 cep_gone "${DEADPOD2[$DEAD]}"
cn_gone() { [ "$(code_of "/apis/cilium.io/v2/ciliumnodes/$DEAD")" = 404 ]; }
check "  and its CiliumNode" wait_for 10 cn_gone
for n in "${NODES[@]}"; do
	[ "$n" = "$DEAD" ] && continue
	check "  the CiliumEndpoints of $n's pods stay" cep_there "${DEADPOD[$n]}"
done

# ---- a restart: this node's CiliumEndpoints of pods it no longer has go -------------------
# a follower (not the leader: the sweep is every agent's own) restarts; while
# it is down a CiliumEndpoint of its node names a pod it never had
for n in "${NODES[@]}"; do
	[ "$n" != "$DEAD" ] && [ "$n" != "$LEADER" ] && R=$n
done
mn_agent_kill "$R" TERM
i=${R#n}
code=$(mn_k8s_post /apis/cilium.io/v2/namespaces/default/ciliumendpoints '{"apiVersion":"cilium.io/v2",
  "kind":"CiliumEndpoint","metadata":{"name":"ghost","namespace":"default"},
  "status":{"identity":{"id":'"${ID[${DEADPOD[$R]}]}"'},"networking":{"addressing":[{"ipv4":"10.205.'$i'.250"}],
  "node":"'"${MN_IP[$R]}"'","node-name":"'"$R"'"}}}')
check "a CiliumEndpoint default/ghost of node $R (no such endpoint) is created while $R is down" \
	test "$code" = 201
start "$R" || fail "the agent of $R starts again"
ghost_gone() { [ "$(code_of /apis/cilium.io/v2/namespaces/default/ciliumendpoints/ghost)" = 404 ]; }
check "$R's agent, restarted, deletes it" wait_for 10 ghost_gone
said_ghost() { grep -q "GC: deleted stale CiliumEndpoint of this node default/ghost" "${MN_DIR[$R]}/agent.log"; }
check "  and says so" said_ghost
check "  and keeps the CiliumEndpoint of its restored pod ${DEADPOD[$R]}" cep_there "${DEADPOD[$R]}"
check "  and of ${DEADPOD2[$R]}" cep_there "${DEADPOD2[$R]}"
check "the identity of ${DEADPOD[$R]} (used) is still there" id_there "${ID[${DEADPOD[$R]}]}"
finish
