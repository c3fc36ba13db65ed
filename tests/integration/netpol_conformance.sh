#!/usr/bin/env bash
# tests/integration/netpol_conformance.sh - network policy conformance, in
# the style of the upstream Kubernetes network-policy e2e tests: an agent
# (k8s, ipam, endpoint, datapath, policy) and the test API server in a node
# namespace; namespaces x, y, z with pods a, b, c (pod=a|b|c, named container
# ports), each a network namespace added through fibril-cni and serving TCP
# and UDP on 80 and 81 (netpol_pod.py); the node itself ("host") and an
# outside namespace routed through the node ("world", two addresses) as
# extra probe sources. netpol_conformance.py applies each scenario's
# policies (NetworkPolicy, CNP, CCNP through the API server; some through
# `fibril policy import`, JSON and YAML), probes every pair on every
# port/protocol in parallel and compares the whole matrix with the one the
# scenario writes down (and, for five of them, `fibril policy trace` on
# every cell). Then kubectl applies a NetworkPolicy, the agent is killed
# (-9) and the policy keeps dropping; one policy deleted and one added while
# it is down are caught up after the restart; the node reaches a pod
# through a deny-all (allow-localhost, the default) and `fibril policy
# trace --src host` says why; restarted with allow-localhost = policy, the
# node is an ordinary peer and is dropped. The whole table also runs
# under the sanitizers (about 35 s there: the probes do not wait on the
# agent).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

MODS=(ipam-api ipam-cluster-pool endpoint datapath policy k8s)
cni_prereqs "${MODS[@]}"
k8s_require
cni_modules "$WORK/mods" "${MODS[@]}"
netns_add "$NODE_NS"
T0=$(date +%s)

# ---- the API server, in the node namespace (where the agent reaches it) ------------------------
K8S_NETNS=$NODE_NS k8s_start --bookmark-interval 1 || { fail "the API server starts"; finish; }
K8S_DIR=$WORK/k8s

CTL=$WORK/ctl
mkdir -p "$CTL"
SOCK=$WORK/fibril.sock
CONF='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'$SOCK'"}'
WORLD_NET=198.18.0.0/24
export AGENT_SOCK=$SOCK CLI K8S_URL K8S_CA K8S_TOKEN CTL_DIR=$CTL WORLD_NET WORLD2_SRC=198.18.0.3 \
	CNI_PLUGIN CNI_CONF=$CONF NEW_POD_NETNS="fnp-$$-x-d" NODE_NAME=node-a
driver() { ip netns exec "$NODE_NS" python3 "$top_srcdir/tests/integration/netpol_conformance.py" "$@"; }

driver setup || { fail "namespaces and pods on the API server"; finish; }
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.19.0/24 \
	--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-a --set k8s.sync-timeout=20s ||
	{ fail "the agent starts"; finish; }

# a pod's server and prober: NETNS NAME [PORTS]
start_pod_proc() {
	ip netns exec "$1" python3 "$top_srcdir/tests/integration/netpol_pod.py" "$CTL/$2.sock" \
		${3:+--serve "$3"} >>"$WORK/pods.log" 2>&1 &
}
for ns in x y z; do
	for pod in a b c; do
		NS=fnp-$$-$ns-$pod
		netns_add "$NS"
		plugin ADD "$CONF" CNI_CONTAINERID="netpol-$ns-$pod" CNI_NETNS="/var/run/netns/$NS" \
			CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=$ns;K8S_POD_NAME=$pod"
		[ "$PRC" = 0 ] || { fail "ADD pod $ns/$pod: $(out) $(cat "$WORK/err")"; finish; }
		start_pod_proc "$NS" "$ns-$pod" 80,81
	done
done
netns_add "$NEW_POD_NETNS" # pod x/d: its network comes with a CNI ADD in the scenario
start_pod_proc "$NEW_POD_NETNS" x-d 80,81

# ---- outside the cluster: a namespace routed through the node --------------------------------
WORLD_NS=fnp-$$-world
netns_add "$WORLD_NS"
ip link add "fnpw$$" netns "$NODE_NS" type veth peer name eth0 netns "$WORLD_NS"
ip -n "$NODE_NS" addr add 198.18.0.1/24 dev "fnpw$$"
ip -n "$NODE_NS" link set "fnpw$$" up
ip -n "$WORLD_NS" addr add 198.18.0.2/24 dev eth0
ip -n "$WORLD_NS" addr add 198.18.0.3/24 dev eth0
ip -n "$WORLD_NS" link set eth0 up
ip -n "$WORLD_NS" route add default via 198.18.0.1
ip netns exec "$NODE_NS" sysctl -qw net.ipv4.ip_forward=1
start_pod_proc "$NODE_NS" host
start_pod_proc "$WORLD_NS" world

for s in x-a x-b x-c y-a y-b y-c z-a z-b z-c x-d host world; do
	wait_for 10 test -S "$CTL/$s.sock" || { fail "the prober of $s starts"; cat "$WORK/pods.log"; finish; }
done
echo "# set up in $(($(date +%s) - T0)) s"

# ---- the scenarios -------------------------------------------------------------------------------
T1=$(date +%s)
rc=0
driver run >"$WORK/driver.out" 2>&1 || rc=$?
cat "$WORK/driver.out"
n_pass=$(grep -c '^PASS:' "$WORK/driver.out" || true)
n_fail=$(grep -c '^FAIL:' "$WORK/driver.out" || true)
PASSED=$((PASSED + n_pass))
FAILED=$((FAILED + n_fail))
check "the driver finished (status $rc)" test "$rc" -le 1 -a "$(grep -c '^# .* scenarios passed' "$WORK/driver.out")" = 1
want=30
[ -n "${SUBSET:-}" ] && want=$(tr ',' '\n' <<<"$SUBSET" | grep -c .)
check "at least $want scenarios ran" test "$(grep -Ec '^(PASS|FAIL): scenario' "$WORK/driver.out" || true)" -ge "$want"
echo "# scenarios took $(($(date +%s) - T1)) s, the whole test $(($(date +%s) - T0)) s"
check "the agent is still running" kill -0 "$AGENT_PID"

# ---- kubectl, and a restart: the k8s policies stay enforced while the agent is down; one
# deleted and one added meanwhile are caught up from the informers' first list ------------------
kcn() { K8S_NETNS=$NODE_NS kc "$@"; }
deny_in() { printf 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-in, namespace: "%s"}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n' "$1"; }
wait_k8s_policies() { # WANT : the k8s policies in force, "ns/name ..."
	wait_for 10 _k8s_policies_are "$1" && return 0
	echo "  k8s policies in force: '$(driver policies 2>/dev/null)', want '$1'"
	return 1
}
_k8s_policies_are() { [ "$(driver policies 2>/dev/null)" = "$1" ]; }
deny_in z >"$WORK/deny-z.yaml"
kcn apply -f "$WORK/deny-z.yaml" >/dev/null
check "kubectl apply: the NetworkPolicy is in force" wait_k8s_policies "z/deny-in"
check "y/a -> z/a:80 is dropped" test "$(driver probe y/a z/a 80 tcp)" = fail
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
check "agent down: y/a -> z/a:80 is still dropped" test "$(driver probe y/a z/a 80 tcp)" = fail
kcn delete networkpolicy -n z deny-in >/dev/null
deny_in y >"$WORK/deny-y.yaml"
kcn apply -f "$WORK/deny-y.yaml" >/dev/null
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.19.0/24 \
	--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-a --set k8s.sync-timeout=20s ||
	{ fail "the agent restarts"; finish; }
check "after the restart: the policy deleted meanwhile is gone, the one added is in force" \
	wait_k8s_policies "y/deny-in"
check "after the restart: y/a -> z/a:80 connects" test "$(driver probe y/a z/a 80 tcp)" = ok
check "after the restart: z/a -> y/b:80 is dropped" test "$(driver probe z/a y/b 80 tcp)" = fail

# ---- allow-localhost: the node's own traffic (kubelet's probes) into its pods -------------------
# (the default, always: the node reaches y/a through y's deny-all, and trace says why; policy:
# the node is an ordinary peer, dropped by the same deny-all)
check "allow-localhost (default): the node reaches y/a:80 through y's deny-all" \
	test "$(driver probe host y/a 80 tcp)" = ok
fcli() { ip netns exec "$NODE_NS" "$CLI" --socket "$SOCK" "$@"; }
fcli policy trace --src host --dst y/a --dport 80/tcp >"$WORK/trace-host.out" 2>&1
check "fibril policy trace --src host names allow-localhost, not a rule" \
	grep -q 'allowed by: allow-localhost' "$WORK/trace-host.out"
check "fibril policy trace --src host: ALLOWED" grep -q 'Final verdict: ALLOWED' "$WORK/trace-host.out"
sed 's/^/#   /' "$WORK/trace-host.out"
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.19.0/24 \
	--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-a --set k8s.sync-timeout=20s \
	--set policy.allow-localhost=policy >/dev/null || wait_alive "$AGENT_PID" 30 agent_healthy ||
	{ fail "the agent restarts with allow-localhost = policy"; finish; }
check "allow-localhost = policy: y's deny-all is in force" wait_k8s_policies "y/deny-in"
_host_dropped() { [ "$(driver probe host y/a 80 tcp)" = fail ]; }
check "allow-localhost = policy: the node is an ordinary peer, y's deny-all drops it" \
	wait_for 10 _host_dropped
fcli policy trace --src host --dst y/a --dport 80/tcp >"$WORK/trace-host.out" 2>&1 || true # DENIED exits 1
check "allow-localhost = policy: trace --src host says default deny" \
	grep -q 'Final verdict: DENIED' "$WORK/trace-host.out"
check "allow-localhost = policy: the node still reaches z/a (no policy there)" \
	test "$(driver probe host z/a 80 tcp)" = ok
check "no sanitizer report in the agent's log" \
	test "$(grep -cE 'AddressSanitizer|runtime error|LeakSanitizer' "$WORK/agent.log" || true)" = 0
finish
