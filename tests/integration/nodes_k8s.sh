#!/usr/bin/env bash
# tests/integration/nodes_k8s.sh - node discovery from the Kubernetes Node
# objects alone (no kvstore): an agent with the k8s, ipam-k8s-podcidr,
# datapath and nodes modules in a network namespace of its own, talking to
# the fake kube-apiserver (tests/k8s/) run in that namespace. The other
# nodes are Node objects: spec.podCIDRs, or the network.fibril.io/
# ipv4-pod-cidr annotation (read: [nodes] k8s-node-annotations = true; off
# by default, see tests/security/node_annotation_hijack.sh), and
# status.addresses InternalIP. Checked:
# GET /v1/nodes lists them with source k8s; routing-mode native routes
# each pod CIDR via the node's InternalIP (proto 242) and the ipcache holds
# it; a Node changed (new pod CIDR) moves its route; a Node deleted loses
# its route and ipcache entries; a Node with a bad address is refused,
# named in the log, counted, and changes nothing; an agent restart adopts
# the routes. Then both sources (etcd started in that namespace, the
# kvstore-etcd module added): a registry record of a node wins over its
# Node object (its IP routes the CIDR), and when the record goes the Node
# object takes over again.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
. "$top_srcdir/tests/lib/node.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "needs root (a network namespace, routes)"
k8s_require ip etcd etcdctl
MODS="k8s ipam-k8s-podcidr ipam-api endpoint datapath nodes"
for m in $MODS kvstore-etcd; do
	[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built"
done
node_netns_up fnk8s
NS=$NODE
# the underlay: the other nodes' InternalIPs are on-link (a veth pair:
# the kernel may have no dummy driver)
node_uplink 172.31.252.11/24
K8S_NETNS=$NS
k8s_start || { fail "the API server starts"; finish; }
# shellcheck disable=SC2086
node_modules $MODS

# node NAME JSON-SPEC JSON-ANNOTATIONS INTERNAL-IP : create a Node
node() {
	k8s_api -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d \
		'{"apiVersion":"v1","kind":"Node","metadata":{"name":"'"$1"'","annotations":'"$3"'},"spec":'"$2"',"status":{"addresses":[{"type":"InternalIP","address":"'"$4"'"},{"type":"Hostname","address":"'"$1"'"}]}}' \
		/api/v1/nodes
}
node n1 '{"podCIDRs":["10.203.1.0/24"]}' '{}' 172.31.252.11 >/dev/null
node n2 '{"podCIDRs":["10.203.2.0/24"]}' '{}' 172.31.252.12 >/dev/null
node n3 '{}' '{"network.fibril.io/ipv4-pod-cidr":"10.203.3.0/24"}' 172.31.252.13 >/dev/null
check "a Node with a bad InternalIP is accepted by the API server" \
	test "$(node n4 '{"podCIDRs":["10.203.4.0/24"]}' '{}' 172.31.252.300)" = 201

start() {
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	nsenter --net=/run/netns/"$NS" "$AGENT" "${args[@]}" --set "k8s.kubeconfig=$K8S_KUBECONFIG" \
		--set "k8s.node-name=n1" --set "agent.node-name=n1" --set nodes.k8s-node-annotations=true \
		"$@" >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 15 agent_healthy && return 0
	tail -30 "$WORK/agent.log"
	return 1
}
nodes_is() { json_is "$(api http://x/v1/nodes)" "$2"; }
routes() { ip -n "$NS" route show proto 242 | sed 's/ *$//' | sort; }
ipcache() { "$CLI" -s "$WORK/fibril.sock" map dump dp_ipcache 2>&1; }

start || { fail "the agent starts without a kvstore"; finish; }
check "n1 knows n2 and n3 from their Node objects (source k8s), routed" nodes_is x "
sorted((n['name'], n['source'], n['ips'], n['pod-cidrs'], n.get('routed')) for n in j['nodes'] if n['name'] != 'n1')
 == [('n2', 'k8s', ['172.31.252.12'], ['10.203.2.0/24'], True), ('n3', 'k8s', ['172.31.252.13'], ['10.203.3.0/24'], True)]"
check "its own pod CIDR comes from its Node's spec.podCIDRs" nodes_is x "
[n['pod-cidrs'] for n in j['nodes'] if n['name'] == 'n1'] == [['10.203.1.0/24']]"
want=$'10.203.2.0/24 via 172.31.252.12 dev eth0\n10.203.3.0/24 via 172.31.252.13 dev eth0'
check "a route per remote pod CIDR via the Node's InternalIP" test "$(routes)" = "$want"
check "the ipcache holds the CIDRs and the node IPs (remote-node)" bash -c '
	grep -Eq "^10.203.2.0/24 +identity=2 " <<<"$1" && grep -Eq "^172.31.252.13/32 +identity=6 " <<<"$1"' _ "$(ipcache)"
check "the bad Node is refused, named with its field" \
	grep -q 'Kubernetes Node n4: status.addresses\[0\].address: "172.31.252.300" is not an IP address' "$WORK/agent.log"
check "  counted as a bad record, and not known" nodes_is x "j['metrics']['bad-records'] >= 1 and all(n['name'] != 'n4' for n in j['nodes'])"

# ---- changes --------------------------------------------------------------------------------
k8s_api -o /dev/null -X PATCH -H 'Content-Type: application/merge-patch+json' \
	-d '{"spec":{"podCIDRs":["10.203.22.0/24"]}}' /api/v1/nodes/n2
want=$'10.203.22.0/24 via 172.31.252.12 dev eth0\n10.203.3.0/24 via 172.31.252.13 dev eth0'
check "n2's new pod CIDR moves its route" wait_for 5 bash -c '[ "$(ip -n '"$NS"' route show proto 242 | sed "s/ *$//" | sort)" = "$1" ]' _ "$want"
check "  and its old CIDR left the ipcache" bash -c '! grep -q "^10.203.2.0/24 " <<<"$1"' _ "$(ipcache)"
k8s_api -o /dev/null -X DELETE /api/v1/nodes/n3
check "a Node deleted: its route goes" wait_for 5 bash -c '[ "$(ip -n '"$NS"' route show proto 242 | sed "s/ *$//")" = "10.203.22.0/24 via 172.31.252.12 dev eth0" ]'
check "  and its ipcache entries" bash -c '! grep -q -e "^10.203.3.0/24 " -e "^172.31.252.13/32 " <<<"$1"' _ "$(ipcache)"
check "  and it is not known any more" nodes_is x "all(n['name'] != 'n3' for n in j['nodes']) and j['metrics']['nodes-deleted'] >= 1"
node n5 '{"podCIDRs":["10.203.5.0/24"]}' '{}' 172.31.252.15 >/dev/null
check "a Node added later is routed" wait_for 5 bash -c 'ip -n '"$NS"' route show proto 242 | grep -q "10.203.5.0/24 via 172.31.252.15"'

# ---- restart: the routes are adopted --------------------------------------------------------
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
check "with the agent stopped the routes stay" test "$(routes | wc -l)" = 2
start || fail "the agent restarts"
check "after a restart both routes are adopted, none re-added" nodes_is x "
j['metrics']['routes-adopted'] == 2 and j['metrics']['routes-installed'] == 0 and j['metrics']['routes-removed'] == 0"

# ---- both sources: the registry's record wins; the Node object takes over when it goes ------
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
AGENT_PID=""
EP=http://127.0.0.1:2379 # etcd inside the agent's namespace
ip netns exec "$NS" etcd --name nk --data-dir "$WORK/etcd" --listen-client-urls "$EP" \
	--advertise-client-urls "$EP" --listen-peer-urls http://127.0.0.1:2380 \
	--initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster nk=http://127.0.0.1:2380 \
	>"$WORK/etcd.log" 2>&1 & # killed on exit with everything in $NS (tests/lib/node.sh)
etcdctl_ns() { ip netns exec "$NS" env ETCDCTL_API=3 etcdctl --endpoints="$EP" --dial-timeout=2s "$@"; }
wait_for 20 etcdctl_ns endpoint health >/dev/null 2>&1 || fail "etcd starts in the namespace"
etcdctl_ns put /fibril/state/nodes/v1/n2 \
	'{"name":"n2","ipv4":"172.31.252.22","pod-cidrs":["10.203.22.0/24"],"tunnel-endpoint":"172.31.252.22","updated":1}' >/dev/null
install -m 0644 "$top_builddir/.libs/kvstore-etcd.so" "$mods/kvstore-etcd.so"
start --set "kvstore-etcd.endpoints=$EP" || fail "the agent starts with both sources"
check "with both sources n2 is the registry's (its IP), n5 the Node object's" nodes_is x "
sorted((n['name'], n['source'], n['ips']) for n in j['nodes'] if n['name'] != 'n1')
 == [('n2', 'kvstore', ['172.31.252.22']), ('n5', 'k8s', ['172.31.252.15'])]"
check "  the registry's IP routes n2's CIDR" bash -c 'ip -n '"$NS"' route show proto 242 | grep -q "10.203.22.0/24 via 172.31.252.22"'
etcdctl_ns del /fibril/state/nodes/v1/n2 >/dev/null
check "the record deleted: n2's Node object takes over (source k8s, its InternalIP)" \
	wait_for 5 bash -c 'ip -n '"$NS"' route show proto 242 | grep -q "10.203.22.0/24 via 172.31.252.12"'
check "  and n2 stays known" nodes_is x "[(n['source'], n['ips']) for n in j['nodes'] if n['name'] == 'n2'] == [('k8s', ['172.31.252.12'])]"
kill -TERM "$AGENT_PID"
rc=0
wait "$AGENT_PID" 2>/dev/null || rc=$?
AGENT_PID=""
check "the agent stops cleanly (exit $rc)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || tail -30 "$WORK/agent.log"
finish
