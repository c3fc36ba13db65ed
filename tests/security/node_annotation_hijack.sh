#!/usr/bin/env bash
# tests/security/node_annotation_hijack.sh - the attack: a kubelet may set
# its own Node's annotations (and, through a compromised node, its
# addresses), so hostile Node objects reach every agent through the
# Kubernetes API (the fake API server of tests/k8s, as nodes_k8s.sh):
# a network.fibril.io/ipv4-pod-cidr annotation of 0.0.0.0/0, an annotation
# naming the victim's own pod CIDR next to a spec.podCIDR, a
# network.fibril.io/tunnel-endpoint naming the victim, a spec.podCIDRs
# overlapping the victim's, and an InternalIP that is the victim's.
# The promise: by default spec.podCIDRs wins and the network.fibril.io/
# annotations are not read at all ([nodes] k8s-node-annotations = false);
# a Node whose CIDRs or addresses are hostile is refused whole (a log line
# naming the Node and what was wrong, records-refused counted), nothing
# installed: the routes and the ipcache hold only the good nodes'. With
# the annotations allowed, a 0.0.0.0/0 annotation and a tunnel endpoint
# naming the victim are refused the same way.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
. "$top_srcdir/tests/lib/node.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "needs root (a network namespace, routes)"
k8s_require ip
MODS="k8s ipam-k8s-podcidr ipam-api endpoint datapath nodes"
for m in $MODS; do
	[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built"
done
node_netns_up fsak
NS=$NODE
node_uplink 172.31.253.11/24
K8S_NETNS=$NS
k8s_start || { fail "the API server starts"; finish; }
# shellcheck disable=SC2086
node_modules $MODS

# node NAME JSON-SPEC JSON-ANNOTATIONS INTERNAL-IP : create a Node
node() {
	k8s_api -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d \
		'{"apiVersion":"v1","kind":"Node","metadata":{"name":"'"$1"'","annotations":'"$3"'},"spec":'"$2"',"status":{"addresses":[{"type":"InternalIP","address":"'"$4"'"}]}}' \
		/api/v1/nodes >/dev/null
}
A=network.fibril.io
node n1 '{"podCIDRs":["10.204.1.0/24"]}' '{}' 172.31.253.11
node n2 '{"podCIDRs":["10.204.2.0/24"]}' '{}' 172.31.253.12
node a-default '{}' '{"'$A'/ipv4-pod-cidr":"0.0.0.0/0"}' 172.31.253.13
node a-both '{"podCIDR":"10.204.5.0/24"}' '{"'$A'/ipv4-pod-cidr":"10.204.1.0/24"}' 172.31.253.15
node a-own '{"podCIDRs":["10.204.1.0/25"]}' '{}' 172.31.253.16
node a-selfip '{"podCIDRs":["10.204.7.0/24"]}' '{}' 172.31.253.11
node a-tep '{"podCIDRs":["10.204.8.0/24"]}' '{"'$A'/tunnel-endpoint":"172.31.253.11"}' 172.31.253.18

# same WANT GOT : equal, else the difference printed
same() { [ "$1" = "$2" ] && return 0; diff <(echo "$1") <(echo "$2") | sed 's/^/  /'; return 1; }
start() {
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	nsenter --net=/run/netns/"$NS" "$AGENT" "${args[@]}" --set "k8s.kubeconfig=$K8S_KUBECONFIG" \
		--set "k8s.node-name=n1" --set "agent.node-name=n1" "$@" >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 15 agent_healthy && return 0
	tail -30 "$WORK/agent.log"
	return 1
}
routes() { ip -n "$NS" route show proto 242 | sed 's/ *$//' | sort; }
ipcache() { "$CLI" -s "$WORK/fibril.sock" map dump dp_ipcache 2>&1; }
nodes_get() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$(api http://x/v1/nodes)" "$1"; }

start || { fail "the agent starts"; finish; }
want=$'10.204.2.0/24 via 172.31.253.12 dev eth0\n10.204.5.0/24 via 172.31.253.15 dev eth0\n10.204.8.0/24 via 172.31.253.18 dev eth0'
check "routes: only the good nodes' spec.podCIDRs (no default route, not our CIDR)" same "$want" "$(routes)"
IPC=$(ipcache)
check "the ipcache's 0.0.0.0/0 is world, no tunnel endpoint" grep -Eq '^0\.0\.0\.0/0 +identity=2 \(world\)$' <<<"$IPC"
check "the ipcache holds none of the victim's pod CIDR as a remote node's" \
	bash -c '! grep -Eq "^10\.204\.1\.0/(24|25) " <<<"$1"' _ "$IPC"
check "no ipcache entry names the victim as its tunnel endpoint" \
	bash -c '! grep -q "tunnel-endpoint=172.31.253.11" <<<"$1"' _ "$IPC"
check "a-both: spec.podCIDR wins over the annotation" \
	test "$(nodes_get "[n['pod-cidrs'] for n in j['nodes'] if n['name'] == 'a-both']")" = "[['10.204.5.0/24']]"
check "a-default: its annotation is not read (no pod CIDR)" \
	test "$(nodes_get "[n['pod-cidrs'] for n in j['nodes'] if n['name'] == 'a-default']")" = "[[]]"
for h in a-own a-selfip; do
	check "$h is refused: not known" test "$(nodes_get "any(n['name'] == '$h' for n in j['nodes'])")" = False
	check "$h: one log line naming the Node, refused" grep -q "nodes: node $h refused: " "$WORK/agent.log"
done
grep "refused: " "$WORK/agent.log" | sed 's/^/  log: /' || true
check "the refusals are counted" test "$(nodes_get "j['metrics'].get('records-refused', 0)")" -ge 2

# ---- the annotations allowed: 0.0.0.0/0 is refused all the same ----------------------------
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
AGENT_PID=""
start --set nodes.k8s-node-annotations=true || { fail "the agent restarts, annotations allowed"; finish; }
check "annotations allowed: a-default (0.0.0.0/0) is refused, named" \
	grep -q "nodes: node a-default refused: pod CIDR 0.0.0.0/0" "$WORK/agent.log"
check "annotations allowed: a-tep (tunnel endpoint: the victim) is refused, named" \
	grep -q "nodes: node a-tep refused: tunnel endpoint 172.31.253.11 is this node's" "$WORK/agent.log"
want=$'10.204.2.0/24 via 172.31.253.12 dev eth0\n10.204.5.0/24 via 172.31.253.15 dev eth0'
check "  no default route, only the good nodes' routes" same "$want" "$(routes)"
check "  the ipcache's 0.0.0.0/0 is world still" grep -Eq '^0\.0\.0\.0/0 +identity=2 \(world\)$' <<<"$(ipcache)"
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
AGENT_PID=""
finish
