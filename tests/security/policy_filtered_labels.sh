#!/usr/bin/env bash
# tests/security/policy_filtered_labels.sh - policies on the labels the
# endpoint module leaves out of identities (pod-template-hash, the
# statefulset's pod-name, controller-revision-hash...).
#
# The attack: a namespace owner writes a deny-all NetworkPolicy for one pod
# of a StatefulSet (podSelector statefulset.kubernetes.io/pod-name: web-0)
# and trusts it; web-0 and web-1 share one identity, since the label is
# filtered out of identities for cardinality, and fibril used to match
# policy subjects against identity labels only: web-0 stayed open to
# everyone, silently. A peer selector on pod-template-hash likewise never
# matched, without a word.
#
# The promise: a policy's subject is matched against all of its pod's
# labels (the policy map is per endpoint, so this costs no identity):
# the deny-all on web-0 drops traffic to web-0 and leaves web-1 open, and
# `fibril policy trace` agrees. A peer selector on such a label (the
# datapath decides peers by identity, which does not carry it) is flagged
# loudly: a warning on the policy in `fibril policy get` (and GET
# /v1/policy), one in the agent's log, and the metric
# fibril_policy_selector_warnings_total; it selects no peer (fail closed
# for an allow).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

MODS=(ipam-api ipam-cluster-pool endpoint datapath policy k8s)
cni_prereqs "${MODS[@]}"
k8s_require
cni_modules "$WORK/mods" "${MODS[@]}"
netns_add "$NODE_NS"

K8S_NETNS=$NODE_NS k8s_start || { fail "the API server starts"; finish; }
kcn() { K8S_NETNS=$NODE_NS kc "$@"; }
SOCK=$WORK/fibril.sock
CONF='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'$SOCK'"}'
fcli() { ip netns exec "$NODE_NS" "$CLI" --socket "$SOCK" "$@"; }

# namespace s: web-0 and web-1 of a StatefulSet (one identity: only app=web
# counts), client-1 and client-2 of a Deployment (two pod-template-hashes)
cat >"$WORK/pods.yaml" <<'EOF'
apiVersion: v1
kind: Namespace
metadata: {name: s}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: s
  labels: {app: web, statefulset.kubernetes.io/pod-name: web-0, controller-revision-hash: web-7f9}
spec: {nodeName: node-a, containers: [{name: srv, image: srv}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: s
  labels: {app: web, statefulset.kubernetes.io/pod-name: web-1, controller-revision-hash: web-7f9}
spec: {nodeName: node-a, containers: [{name: srv, image: srv}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: client-1
  namespace: s
  labels: {app: client, pod-template-hash: h1}
spec: {nodeName: node-a, containers: [{name: cli, image: cli}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: client-2
  namespace: s
  labels: {app: client, pod-template-hash: h2}
spec: {nodeName: node-a, containers: [{name: cli, image: cli}]}
EOF
kcn apply -f "$WORK/pods.yaml" >/dev/null || { fail "the pods on the API server"; finish; }
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.23.0/24 \
	--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-a --set k8s.sync-timeout=20s ||
	{ fail "the agent starts"; finish; }

declare -A IP PNS
for pod in web-0 web-1 client-1 client-2; do
	PNS[$pod]=fpfl-$$-$pod
	netns_add "${PNS[$pod]}"
	plugin ADD "$CONF" CNI_CONTAINERID="fl-$pod" CNI_NETNS="/var/run/netns/${PNS[$pod]}" \
		CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=s;K8S_POD_NAME=$pod"
	[ "$PRC" = 0 ] || { fail "ADD pod s/$pod: $(out) $(cat "$WORK/err")"; finish; }
	IP[$pod]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
	ip netns exec "${PNS[$pod]}" python3 "$top_srcdir/tests/integration/netpol_pod.py" \
		"$WORK/$pod.sock" --serve 80 >>"$WORK/pods.log" 2>&1 &
done
for pod in web-0 web-1 client-1 client-2; do
	wait_for 10 test -S "$WORK/$pod.sock" || { fail "the server of $pod starts"; finish; }
done

# connects SRC DST : a TCP connection from pod SRC to pod DST's port 80 is answered
connects() {
	ip netns exec "${PNS[$1]}" timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/80" && read -r -t 1 l <&3 && [ "$l" = ok ]' \
		"${IP[$2]}" 2>/dev/null
}
dropped() { ! connects "$@"; }
policies_in_force() { [ "$(api http://x/v1/policy | python3 -c 'import json,sys
j=json.load(sys.stdin); print(" ".join(sorted(p["name"] for p in j["policies"])) if {e["revision"] for e in j["endpoints"]} <= {j["revision"]} else "")')" = "$1" ]; }

# every label the pods carry reached the agent, and web-0 and web-1 share one identity
ident() { api http://x/v1/endpoint | python3 -c 'import json,sys
j=json.load(sys.stdin); j=j.get("endpoints", j) if isinstance(j, dict) else j
print([e["identity"] for e in j if e.get("pod-name")==sys.argv[1]][0])' "$1"; }
check "web-0 and web-1 share one identity (pod-name is not an identity label)" \
	test "$(ident web-0)" = "$(ident web-1)" -a -n "$(ident web-0)"
check "before any policy: client-1 reaches web-0" wait_for 5 connects client-1 web-0
check "before any policy: client-1 reaches web-1" connects client-1 web-1

# ---- the attack: a deny-all selecting one StatefulSet pod by its pod-name -----------------------
cat >"$WORK/deny-web-0.yaml" <<'EOF'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-web-0, namespace: s}
spec:
  podSelector:
    matchLabels: {statefulset.kubernetes.io/pod-name: web-0}
  policyTypes: [Ingress]
EOF
kcn apply -f "$WORK/deny-web-0.yaml" >/dev/null
check "the deny-all on web-0 is in force" wait_for 10 policies_in_force deny-web-0
check "deny-all on statefulset pod-name web-0: client-1 -> web-0 is dropped" \
	wait_for 5 dropped client-1 web-0
check "deny-all on statefulset pod-name web-0: client-2 -> web-0 is dropped" dropped client-2 web-0
check "the deny-all on web-0 leaves web-1 (same identity) open" connects client-1 web-1
fcli policy trace --src s/client-1 --dst s/web-0 --dport 80/tcp >"$WORK/trace.out" 2>&1 || true # DENIED exits 1
check "fibril policy trace: s/client-1 -> s/web-0 selected by deny-web-0" \
	grep -q 'selected by: NetworkPolicy s/deny-web-0' "$WORK/trace.out"
check "fibril policy trace: s/client-1 -> s/web-0 DENIED" grep -q 'Final verdict: DENIED' "$WORK/trace.out"
fcli policy trace --src s/client-1 --dst s/web-1 --dport 80/tcp >"$WORK/trace1.out" 2>&1
check "fibril policy trace: s/client-1 -> s/web-1 ALLOWED" \
	grep -q 'Final verdict: ALLOWED' "$WORK/trace1.out"
kcn delete networkpolicy -n s deny-web-0 >/dev/null

# ---- a peer selector on pod-template-hash: flagged, never silently mis-enforced -----------------
cat >"$WORK/web-from-h1.yaml" <<'EOF'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-h1, namespace: s}
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - podSelector:
        matchLabels: {pod-template-hash: h1}
EOF
kcn apply -f "$WORK/web-from-h1.yaml" >/dev/null
check "the policy with a pod-template-hash peer is in force" wait_for 10 policies_in_force web-from-h1
get_out=$(fcli policy get 2>&1)
check "fibril policy get warns about web-from-h1's pod-template-hash peer" \
	contains "$get_out" "Warning: s/web-from-h1: "
check "the warning names the label and says it selects no peer" \
	contains "$get_out" "pod-template-hash"
warnings=$(api http://x/v1/policy | python3 -c 'import json,sys
j=json.load(sys.stdin); print(" | ".join(w for p in j["policies"] if p["name"]=="web-from-h1" for w in p.get("warnings", [])))')
check "GET /v1/policy: the policy carries the warning" contains "$warnings" "spec.ingress[0].from[0].podSelector"
check "the agent's log names the policy and the label" \
	grep -q "web-from-h1.*pod-template-hash" "$WORK/agent.log"
metric=$(api http://x/metrics | sed -n 's/^fibril_policy_selector_warnings_total{reason="filtered-label"} //p')
check "fibril_policy_selector_warnings_total{reason=\"filtered-label\"} counts it ($metric)" \
	test "${metric:-0}" -ge 1
check "the flagged peer selects nobody (fail closed): client-1 -> web-0 dropped" \
	wait_for 5 dropped client-1 web-0
check "the flagged peer selects nobody: client-2 -> web-1 dropped" dropped client-2 web-1
check "no sanitizer report in the agent's log" \
	test "$(grep -cE 'AddressSanitizer|runtime error|LeakSanitizer' "$WORK/agent.log" || true)" = 0
finish
