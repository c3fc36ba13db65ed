#!/usr/bin/env bash
# tests/integration/crd_cluster.sh - a three-node cluster with NO etcd
# (Cilium's CRD mode): nodes from their Node objects, identities as
# CiliumIdentity objects, the ipcache from CiliumEndpoint objects, all
# through the fake kube-apiserver (tests/k8s/) on the underlay's bridge.
# CRD_ROUTING (native, default; crd_cluster_tunnel.sh: tunnel) picks the
# routing mode. Every module's source is left on auto: the k8s module
# loaded and no kvstore picks crd. Checked:
#   - each agent publishes its pods as CiliumEndpoints (name and namespace
#     of the pod, ownerReferences to the Pod, identity, address, node IP,
#     the Pod's named ports);
#   - every node's ipcache holds exactly the other nodes' pods (with the
#     identity their node gave them), and none of its own as remote;
#   - cross-node policy by label (cluster_policy.sh's checks): a policy on
#     n1 lets in pods of namespace "good" only: good on n2 connects, bad on
#     n3 does not, a second good pod on n3 does;
#   - an endpoint relabelled (a new identity): its CiliumEndpoint is
#     replaced at the live resourceVersion, the others' ipcaches follow;
#   - a CiliumEndpoint with an address outside its node's pod CIDRs is
#     refused by every node (the kvstore records' checks);
#   - the Pod deleted: the API server's garbage collector takes its
#     CiliumEndpoint, and the other nodes' ipcaches let go of its address;
#   - an endpoint deleted (CNI DEL) with its Pod still there: its agent
#     deletes the CiliumEndpoint, the others let go of the address;
#   - the CiliumEndpoint CRD missing: a new pod still starts, and the log
#     says the API server does not serve the CRD.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/k8scluster.sh"

ROUTING=${CRD_ROUTING:-native}
mn_k8s_cluster_up 3 default,kube-system,srv,good,bad,other k8s ipam-cluster-pool ipam-api endpoint datapath nodes policy
mn_k8s_nodes 10.204

PORT=$((20000 + RANDOM % 20000))
start() {
	local i=${1#n}
	mn_agent_start "$1" "$WORK/mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$1" \
		--set "ipam-cluster-pool.node-cidr=10.204.$i.0/24" --set "nodes.routing-mode=$ROUTING" \
		--set endpoint.identity-timeout=5s --set nodes.retry=300ms
}
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
pass "three agents start with no kvstore ($ROUTING routing)"
for n in "${NODES[@]}"; do check "$n knows and routes the two others" wait_for 15 mn_routes_all "$n"; done
check "n1 chose CRD mode for the ipcache" grep -q 'the ipcache comes from CiliumEndpoint objects' \
	"${MN_DIR[n1]}/agent.log"

# pod NODE NAME NAMESPACE : the Pod object (a named port "http"), then CNI ADD
pod() {
	local code
	code=$(mn_k8s_post "/api/v1/namespaces/$3/pods" '{"apiVersion":"v1","kind":"Pod",
	  "metadata":{"name":"'"$2"'","namespace":"'"$3"'","labels":{"app":"'"$3"'"}},
	  "spec":{"nodeName":"'"$1"'","containers":[{"name":"c","image":"x",
	    "ports":[{"name":"http","containerPort":'"$PORT"',"protocol":"TCP"}]}]}}')
	[ "$code" = 201 ] || { echo "Pod $3/$2: $code $(cat "$WORK/post.out")" >&2; return 1; }
	mn_pod_add "$1" "$2" "$3"
}

pod n1 srv srv || { fail "the server pod on n1"; finish; }
mn_serve srv "$PORT" || fail "the server listens"
cat >"$WORK/cnp.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "srv-from-good"},
 "spec": {"endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "srv"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "good"}}]}]}}
EOF2
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/cnp.json" 2>&1)
check "n1 imports the policy" contains "$out" "Revision: 1"
pod n2 good good || fail "a pod in namespace good on n2"
pod n3 bad bad || fail "a pod in namespace bad on n3"
pod n3 good2 good || fail "a second pod in namespace good, on n3"
identity() { mn_json "${MN_POD_NODE[$1]}" "/v1/endpoint/container-id:$MN_TAG$1:eth0" "j['identity']"; }
declare -A ID
for p in srv good bad good2; do ID[$p]=$(identity "$p"); done
echo "  identities: srv ${ID[srv]} good ${ID[good]} bad ${ID[bad]} good2 ${ID[good2]}"
check "good on n2 and good2 on n3 share one identity" test "${ID[good]}" = "${ID[good2]}"

# ---- the CiliumEndpoint objects --------------------------------------------------------
cep() { k8s_api "/apis/cilium.io/v2/namespaces/$2/ciliumendpoints/$1"; }
uid() { k8s_api "/api/v1/namespaces/$2/pods/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])'; }
cep_is() { # POD NS : the object says what the brief says it must
	cep "$1" "$2" | python3 -c 'import json, sys
o = json.load(sys.stdin); st = o["status"]; a = st["networking"]["addressing"][0]
ref = o["metadata"]["ownerReferences"][0]
ok = (ref["kind"] == "Pod" and ref["name"] == sys.argv[1] and ref["uid"] == sys.argv[2]
      and str(st["identity"]["id"]) == sys.argv[3] and a.get("ipv4") == sys.argv[4]
      and st["networking"]["node"] == sys.argv[5] and st["networking"]["node-name"] == sys.argv[6]
      and {"name": "http", "port": int(sys.argv[7]), "protocol": "TCP"} in st["named-ports"])
sys.exit(0 if ok else 1)' "$1" "$(uid "$1" "$2")" "${ID[$1]}" "${MN_POD_IP[$1]}" \
		"${MN_IP[${MN_POD_NODE[$1]}]}" "${MN_POD_NODE[$1]}" "$PORT"
}
for p in srv good bad good2; do
	ns=$p; [ "$p" = good2 ] && ns=good
	check "the CiliumEndpoint $ns/$p: owned by its Pod, identity, address, node, named port" \
		wait_for 10 cep_is "$p" "$ns" || cep "$p" "$ns"
done

# ---- every node's ipcache: exactly the other nodes' pods ---------------------------------
remote() { # NODE : "ip=identity" of its remote endpoint entries, sorted
	mn_json "$1" /v1/ipcache "' '.join(sorted('%s=%s' % (e['prefix'].split('/')[0], e['identity']) for e in j['entries'] if e.get('source') == 'crd' and e.get('programmed')))"
}
want() { # NODE : what its ipcache must hold
	local p out=()
	for p in srv good bad good2; do
		[ "${MN_POD_NODE[$p]}" = "$1" ] || out+=("${MN_POD_IP[$p]}=${ID[$p]}")
	done
	printf '%s\n' "${out[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
holds() { [ "$(remote "$1")" = "$(want "$1")" ]; }
for n in "${NODES[@]}"; do
	check "$n's ipcache holds exactly the other nodes' pods ($(want "$n"))" wait_for 15 holds "$n" ||
		echo "  it holds: $(remote "$n")"
done

# ---- policy across nodes -------------------------------------------------------------
tcp() { mn_tcp_get "$1" "${MN_POD_IP[srv]}" "$PORT"; }
gets_in() { [ "$(tcp "$1")" = ok ]; }
check "the good pod on n2 connects to n1's server (TCP)" wait_for 10 gets_in good
check "the good pod on n3 connects too" wait_for 10 gets_in good2
check "the bad pod on n3 does not" test "$(tcp bad)" = fail

# ---- an endpoint's identity changes: its CiliumEndpoint is replaced at its resourceVersion ----
# (the POST meets AlreadyExists; the agent reads the live object and PUTs at its version)
rv_of() { cep good2 good | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])'; }
RV0=$(rv_of)
mn_label n3 good2
ID[good2]=$(identity good2)
check "good2 relabelled app=good2: a new identity (${ID[good2]})" test "${ID[good2]}" != "${ID[good]}"
check "  its CiliumEndpoint says so (replaced, still owned by its Pod)" wait_for 10 cep_is good2 good
check "  at a new resourceVersion ($RV0 -> $(rv_of))" test "$(rv_of)" != "$RV0"
for n in n1 n2; do
	check "  $n's ipcache follows ($(want "$n"))" wait_for 10 holds "$n" || echo "  it holds: $(remote "$n")"
done
check "  and good2 (still of namespace good, the policy's label) still connects" \
	wait_for 10 gets_in good2

# ---- a forged CiliumEndpoint: refused ----------------------------------------------------
code=$(mn_k8s_post /apis/cilium.io/v2/namespaces/bad/ciliumendpoints '{"apiVersion":"cilium.io/v2",
  "kind":"CiliumEndpoint","metadata":{"name":"forged","namespace":"bad"},
  "status":{"identity":{"id":'"${ID[good]}"'},"networking":{"addressing":[{"ipv4":"10.204.1.250"}],
  "node":"'"$MN_UNDERLAY_PREFIX.13"'","node-name":"n3"}}}')
check "a CiliumEndpoint claiming n1's address for n3 is accepted by the API server" test "$code" = 201
refused() { grep -q 'CiliumEndpoint bad/forged: .*refused' "${MN_DIR[$1]}/agent.log"; }
check "n2 refuses it, saying why" wait_for 10 refused n2
check "  and does not program it" eval '! remote n2 | grep -q "10.204.1.250="'

# ---- the Pod deleted: its CiliumEndpoint goes with it, and its ipcache entries ----------
k8s_api -o /dev/null -X DELETE /api/v1/namespaces/bad/pods/bad
gone() { [ "$(k8s_api -o /dev/null -w '%{http_code}' /apis/cilium.io/v2/namespaces/bad/ciliumendpoints/bad)" = 404 ]; }
check "the Pod bad deleted: the API server collects its CiliumEndpoint" wait_for 10 gone
dropped() { ! remote "$1" | grep -q "${MN_POD_IP[bad]}="; }
check "  and n1's ipcache lets go of ${MN_POD_IP[bad]}" wait_for 10 dropped n1
check "  and n2's" wait_for 10 dropped n2

# ---- CNI DEL (the Pod still there): the agent deletes the CiliumEndpoint ------------------
mn_pod_del n2 good >/dev/null || fail "CNI DEL of good on n2"
gone_good() { [ "$(k8s_api -o /dev/null -w '%{http_code}' /apis/cilium.io/v2/namespaces/good/ciliumendpoints/good)" = 404 ]; }
check "good's endpoint deleted on n2 (its Pod still there): n2 deletes its CiliumEndpoint" wait_for 10 gone_good
dropped_good() { ! remote "$1" | grep -q "${MN_POD_IP[good]}="; }
check "  and n1's ipcache lets go of ${MN_POD_IP[good]}" wait_for 10 dropped_good n1

# ---- the CiliumEndpoint CRD missing: the agent says so --------------------------------------
k8s_ctl -o /dev/null config?missing_crds=ciliumendpoints
pod n1 late srv || fail "a pod on n1 with the CRD missing (CNI ADD still works)"
said() { grep -q 'CiliumEndpoint srv/late: not published: the API server does not serve ciliumendpoints.cilium.io (its CustomResourceDefinition is not installed: kubectl apply -f deploy/kubernetes/crds.yaml)' "${MN_DIR[n1]}/agent.log"; }
check "the CiliumEndpoint CRD missing: n1's log says so, naming the pod" wait_for 10 said
k8s_ctl -o /dev/null config?missing_crds=
finish
