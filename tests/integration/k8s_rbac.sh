#!/usr/bin/env bash
# tests/integration/k8s_rbac.sh - deploy/kubernetes/fibril.yaml against the
# project's test API server (tests/k8s/apiserver.py) with the real kubectl:
#  - `kubectl apply --dry-run=server`, then `kubectl apply`: every object
#    is accepted (the server validates what the real one would refuse in a
#    DaemonSet: selector vs labels, volumeMounts naming a declared volume,
#    probe handlers; RBAC rules and the binding's roleRef) and reads back;
#    a manifest with a mount of an undeclared volume is refused (the check
#    can fail);
#  - deploy/kubernetes/crds.yaml (CRD mode's CustomResourceDefinitions) is
#    applied; the server refuses a CRD that does not declare a kind as it
#    serves it (group, plural, kind, scope: a CiliumEndpoint CRD made
#    cluster-scoped is refused, so the check can fail);
#  - the ClusterRole (and the kube-system Role: the GC's Lease and the
#    pod CIDR claims of crd_podcidr.sh, listed, watched and deleted) cover
#    exactly what the agent asks for: every
#    request the agent made to the test API server during the other k8s
#    tests (recorded by apiserver.py under tests/k8s-requests/ as "VERB
#    GROUP RESOURCE"; Makefile.am runs this test after them) must be allowed
#    by a rule, and every (group, resource, verb) a rule grants must have
#    been used.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require

manifest=$top_srcdir/deploy/kubernetes/fibril.yaml
crds=$top_srcdir/deploy/kubernetes/crds.yaml
k8s_start

# ---- the CustomResourceDefinitions of CRD mode (deploy/kubernetes/crds.yaml) ----
out=$(kc apply -f "$crds" 2>&1) && rc=0 || rc=$?
echo "$out" | sed 's/^/  /'
check "kubectl apply creates the CiliumIdentity, CiliumEndpoint and CiliumNode CRDs" bash -c '
	[ "$1" -eq 0 ] && for o in ciliumidentities ciliumendpoints ciliumnodes; do
		grep -q "^customresourcedefinition.apiextensions.k8s.io/$o.cilium.io created" <<<"$2" ||
			{ echo "  not created: $o"; exit 1; }; done' _ "$rc" "$out"
# the check can fail: a CRD declaring CiliumEndpoint cluster-scoped (the
# agents write them namespaced) is refused
sed '/name: ciliumendpoints.cilium.io/,/scope:/s/scope: Namespaced/scope: Cluster/' "$crds" >"$WORK/crds-bad.yaml"
cmp -s "$crds" "$WORK/crds-bad.yaml" && fail "the broken CRD manifest was not made (the sed matched nothing)"
out=$(kc apply --dry-run=server -f "$WORK/crds-bad.yaml" 2>&1) && rc=0 || rc=$?
check "a CiliumEndpoint CRD of the wrong scope is refused" \
	bash -c '[ "$1" -ne 0 ] && grep -q "is not the CiliumEndpoint this server serves" <<<"$2"' _ "$rc" "$out"

out=$(kc apply --dry-run=server -f "$manifest" 2>&1) && rc=0 || rc=$?
echo "$out" | sed 's/^/  /'
check "kubectl apply --dry-run=server accepts the manifest" test "$rc" -eq 0
# a broken manifest is refused (before the objects exist: the test server
# takes a strategic merge patch for a plain merge patch): a mount of a volume the pod does not declare
sed 's/{name: state, mountPath: \/var\/lib\/fibril}/{name: no-such-volume, mountPath: \/var\/lib\/fibril}/' \
	"$manifest" >"$WORK/broken.yaml"
grep -q no-such-volume "$WORK/broken.yaml" || fail "the broken manifest was not made (the sed matched nothing)"
out=$(kc apply --dry-run=server -f "$WORK/broken.yaml" 2>&1) && rc=0 || rc=$?
echo "$out" | sed 's/^/  /'
check "a DaemonSet mounting an undeclared volume is refused ($(grep -o 'volumeMounts[^:]*: Not found[^,]*' <<<"$out" | head -1))" \
	bash -c '[ "$1" -ne 0 ] && grep -q "Not found: \"no-such-volume\"" <<<"$2"' _ "$rc" "$out"

out=$(kc apply -f "$manifest" 2>&1) && rc=0 || rc=$?
echo "$out" | sed 's/^/  /'
check "kubectl apply creates the ServiceAccount, ClusterRole, Role, bindings, ConfigMap and DaemonSet" bash -c '
	[ "$1" -eq 0 ] && for o in serviceaccount/fibril clusterrole.rbac.authorization.k8s.io/fibril \
		role.rbac.authorization.k8s.io/fibril rolebinding.rbac.authorization.k8s.io/fibril \
		clusterrolebinding.rbac.authorization.k8s.io/fibril configmap/fibril-config daemonset.apps/fibril; do
		grep -q "^$o created" <<<"$2" || { echo "  not created: $o"; exit 1; }; done' _ "$rc" "$out"
ds=$(kc get -n kube-system daemonset fibril -o json 2>&1) || true
check "the DaemonSet reads back: host network, NET_ADMIN/BPF/PERFMON, probes on the TCP listener" \
	python3 - "$ds" <<'PY'
import json, sys
ds = json.loads(sys.argv[1])
pod = ds["spec"]["template"]["spec"]
assert pod["hostNetwork"] is True
agent = [c for c in pod["containers"] if c["name"] == "agent"][0]
assert sorted(agent["securityContext"]["capabilities"]["add"]) == ["BPF", "NET_ADMIN", "PERFMON"], agent
for p in ("startupProbe", "livenessProbe", "readinessProbe"):
    assert agent[p]["httpGet"]["port"] == 9876, p
assert any(v["name"] == "bpffs" for v in pod["volumes"])
PY
cm=$(kc get -n kube-system configmap fibril-config -o jsonpath='{.data.fibril\.conf}' 2>&1) || true
check "the ConfigMap's fibril.conf sets the TCP listener the probes use" grep -q 'api-tcp-listen = 127.0.0.1:9876' <<<"$cm"

# ---- the agent with every resource the k8s module can inform on -----------
# (the other tests watch what their modules ask for; here [k8s] resources
# names all eight, as a node running the policy and lb modules would), and
# its node annotation (a merge patch of its Node)
mods=$WORK/mods
mkdir -p "$mods"
[ -f "$top_builddir/.libs/k8s.so" ] || { echo "FAIL: k8s.so is not built"; exit 1; }
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/k8s.so"
kc create -f - >/dev/null <<'EOF_NODE'
apiVersion: v1
kind: Node
metadata: {name: rbac-node}
spec: {podCIDR: 10.0.9.0/24}
EOF_NODE
all=nodes,pods,namespaces,services,endpointslices,networkpolicies,ciliumnetworkpolicies,ciliumclusterwidenetworkpolicies
if start_agent "$mods" --set agent.modules=k8s --set agent.node-name=rbac-node \
	--set k8s.kubeconfig="$K8S_KUBECONFIG" --set k8s.resources="$all"; then
	synced=$(api http://x/v1/k8s 2>&1) || true
	check "the agent informs on all eight resources" python3 - "$synced" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
names = {r["name"] for r in d["resources"]}
assert len(names) == 8, names
PY
	check "the agent stops cleanly" stop_agent TERM
else
	fail "the agent with the k8s module did not start"
fi

# ---- RBAC: recorded requests vs the ClusterRole ----------------------------
role=$(kc get clusterrole fibril -o json 2>&1) || true
nsrole=$(kc get role -n kube-system fibril -o json 2>&1) || true
shopt -s nullglob
records=("$FIBRIL_K8S_REQUEST_LOG_DIR"/requests-*.log)
check "the agent's requests to the test API server were recorded (${#records[@]} files)" test "${#records[@]}" -gt 0
check "the ClusterRole and the kube-system Role allow every request the agent made, and grant nothing unused" \
	python3 - "$role" "$nsrole" "${records[@]}" <<'PY'
import json, sys
granted = set()
for role in (json.loads(sys.argv[1]), json.loads(sys.argv[2])):
    for r in role["rules"]:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                for v in r["verbs"]:
                    granted.add((v, g, res))
used = {}
for f in sys.argv[3:]:
    for line in open(f):
        verb, group, res = line.split()
        key = (verb, "" if group == "core" else group, res)
        used[key] = used.get(key, 0) + 1
def name(k):
    return f"{k[0]} {k[2]}" + (f".{k[1]}" if k[1] else "")
print("  requests the agent made (count):")
for k in sorted(used):
    print(f"    {name(k)}: {used[k]}")
missing = [k for k in used if k not in granted]
unused = [k for k in granted if k not in used]
for k in sorted(missing):
    print(f"  NOT ALLOWED by the ClusterRole: {name(k)}")
for k in sorted(unused):
    print(f"  granted but never used: {name(k)}")
sys.exit(1 if missing or unused else 0)
PY
k8s_stop
finish
