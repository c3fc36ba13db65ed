#!/usr/bin/env bash
# tests/integration/multinode.sh - two nodes in native routing mode
# (tests/lib/multinode.sh: a network namespace per node with its own agent,
# state, run and bpffs dirs, joined by an underlay bridge; one etcd on the
# bridge): each node learns the other through the kvstore's node registry
# (GET /v1/nodes, `fibril node list`), routes the other's pod CIDR via its
# node IP (protocol 0xf2) and has it in its ipcache; a pod on each node
# pings and connects over TCP to the other across the underlay; an agent
# restart adopts its routes (none re-added) while traffic flows; a bad
# registry record is refused and changes nothing; a node key removed by
# hand is written back by its owner; kill -9 of one agent: a stream between
# the pods keeps flowing, and the other node removes the dead one (routes,
# ipcache entries) within the lease TTL plus a bound; the node comes back
# when its agent does.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

MODS="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes"
# shellcheck disable=SC2086
mn_require $MODS
command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
# the registry lease: long while the checks with an agent down run (a
# busy machine starts python slowly), short where its expiry is tested
LONG_TTL=30
TTL=4
# shellcheck disable=SC2086
mn_modules "$WORK/mods" $MODS
mn_underlay_up
mn_etcd_start || { fail "etcd starts on the underlay"; finish; }
mn_node_add n1 1
mn_node_add n2 2
PORT=$((20000 + RANDOM % 20000))
# masquerading off: it attaches fibril_from_netdev with host-routing legacy
# too (its replies), and the filter's presence is what is checked here
# (tests/integration/masq.sh tests masquerading)
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.201.0.0/16
	--set nodes.retry=300ms --set datapath.masquerade=false)
# n1 routes its pods' packets to n2 in BPF ([datapath] host-routing = bpf,
# the default: bpf_fib_lookup + bpf_redirect_neigh), n2 through its stack
# (legacy, set explicitly so that it stays tested): both ways are checked
# below
declare -A HOST_ROUTING=([n1]=bpf [n2]=legacy)
start() {
	mn_agent_start "$1" "$WORK/mods" "${AGENT_ARGS[@]}" --set "nodes.lease-ttl=${2:-$LONG_TTL}s" \
		--set "datapath.host-routing=${HOST_ROUTING[$1]}"
}
dp_json() { mn_api "$1" http://x/v1/datapath; }
dp_is() { # NODE EXPR : EXPR over j = NODE's GET /v1/datapath
	python3 -c 'import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' \
		"$(dp_json "$1")" "$2" 2>/dev/null && return 0
	echo "  $1: $(dp_json "$1")"
	return 1
}

# jq-less JSON checks: python EXPR over j = the node's GET /v1/nodes
nodes_json() { mn_api "$1" http://x/v1/nodes; }
nodes_is() {
	local doc
	doc=$(nodes_json "$1") || true
	python3 -c 'import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' \
		"$doc" "$2" 2>/dev/null && return 0
	[ -z "${QUIET_JSON:-}" ] && echo "  $1: $doc"
	return 1
}
nget() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$(nodes_json "$1")" "$2"; }
knows() { QUIET_JSON=1 nodes_is "$1" "any(n['name'] == '$2' and n['source'] == 'kvstore' and not n['lost'] for n in j['nodes'])"; }
# a node whose lease expired is lost: unrouted, still listed ([nodes] lost-node-grace)
forgot() { QUIET_JSON=1 nodes_is "$1" "all(n['name'] != '$2' or (n['lost'] and not n['routed']) for n in j['nodes'])"; }
routes() { ip -n "$(mn_ns "$1")" route show proto 242 | sed 's/ *$//'; }
ipcache() { "$CLI" -s "${MN_DIR[$1]}/fibril.sock" map dump dp_ipcache 2>&1; }
diag() { # what the nodes look like, for a failed probe
	local n l
	for n in n1 n2; do
		echo "  -- $n routes:"; ip -n "$(mn_ns $n)" route | sed 's/^/    /'
		for l in $(ip -n "$(mn_ns $n)" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep '^lxc'); do
			echo "  -- $n tc $l:"; tc -n "$(mn_ns $n)" filter show dev "$l" ingress | sed 's/^/    /'
			tc -n "$(mn_ns $n)" filter show dev "$l" egress | sed 's/^/    /'
		done
		ip -n "$(mn_ns $n)" neigh | sed 's/^/    neigh /'
	done
}
probe() { # probe POD TARGET : ping and TCP from POD's namespace
	ip netns exec "$(mn_pod_ns "$1")" python3 "$top_srcdir/tests/cni/nettest.py" probe "$PORT" "$2" \
		>"$WORK/probe.out" 2>&1 || { sed 's/^/  /' "$WORK/probe.out"; diag; return 1; }
}

start n1 || { fail "the agent of n1 starts"; finish; }
start n2 || { fail "the agent of n2 starts"; finish; }
check "n1 learns n2 from the registry" wait_for 10 knows n1 n2
check "n2 learns n1 from the registry" wait_for 10 knows n2 n1
CIDR1=$(nget n1 "[n for n in j['nodes'] if n['name'] == 'n1'][0]['pod-cidrs'][0]")
CIDR2=$(nget n2 "[n for n in j['nodes'] if n['name'] == 'n2'][0]['pod-cidrs'][0]")
check "the nodes have their own pod CIDRs ($CIDR1, $CIDR2)" test "$CIDR1" != "$CIDR2"
check "n1's view of n2: its node IP, pod CIDR, routed" nodes_is n1 "
[(n['ips'], n['pod-cidrs'], n['routed']) for n in j['nodes'] if n['name'] == 'n2']
 == [(['${MN_IP[n2]}'], ['$CIDR2'], True)] and j['self'] == 'n1' and j['synced']"
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" node list)
check "fibril node list shows both nodes with IPs, CIDRs and source" \
	bash -c '[[ $1 == *NAME*IPS*"POD CIDRS"*SOURCE*"LAST SEEN"* && $1 == *n1*"'"${MN_IP[n1]}"'"*"'"$CIDR1"'"*local* &&
		$1 == *n2*"'"${MN_IP[n2]}"'"*"'"$CIDR2"'"*kvstore*ago*yes* ]]' _ "$out" || echo "$out"
check "n1 routes $CIDR2 via n2's IP" test "$(routes n1)" = "$CIDR2 via ${MN_IP[n2]} dev eth0"
check "n2 routes $CIDR1 via n1's IP" test "$(routes n2)" = "$CIDR1 via ${MN_IP[n1]} dev eth0"
check "n1's ipcache: n2's pod CIDR (world) and node IP (remote-node)" \
	contains "$(ipcache n1)" "$CIDR2"
check "  and the node IP" grep -Eq "^${MN_IP[n2]}/32 +identity=6 " <<<"$(ipcache n1)"
# read_rev NODE WHAT -> the revision of NODE's first "WHAT read at revision N" log line
read_rev() { sed -n "s/.*nodes: $2 read at revision \([0-9]*\).*/\1/p" "${MN_DIR[$1]}/agent.log" | head -n 1; }
check "n1 read the ipcache at its registry read's revision ($(read_rev n1 registry)), its parts at once" \
	wait_for 10 bash -c '[ -n "$2" ] && [ "$(sed -n "s/.*nodes: ipcache read at revision \([0-9]*\).*/\1/p" "$1" | head -n 1)" = "$2" ]' \
	_ "${MN_DIR[n1]}/agent.log" "$(read_rev n1 registry)"
check "n1's datapath loaded its programs on a worker (program-load-ms, the ids)" \
	dp_is n1 "j['program-load-ms'] > 0 and j['program-id'] > 0 and j['program-id-egress'] > 0 and 'program-error' not in j"

# ---- pods across nodes ------------------------------------------------------------------
mn_pod_add n1 pa || fail "a pod on n1"
mn_pod_add n2 pb || fail "a pod on n2"
for p in pa pb; do mn_serve "$p" "$PORT"; done
check "pa (${MN_POD_IP[pa]}, n1) pings and connects to pb (${MN_POD_IP[pb]}, n2)" probe pa "${MN_POD_IP[pb]}"
check "pb pings and connects to pa" probe pb "${MN_POD_IP[pa]}"
check "n1 (host-routing bpf) sent pa's packets out by the FIB (to-fib), not the stack" \
	dp_is n1 "j['host-routing'] == 'bpf' and j['packets-from-endpoints']['to-fib'] > 0"
check "n1 delivered pb's packets from its underlay straight into pa (from-netdev forwarded)" \
	dp_is n1 "j['host-routing-devices'] >= 1 and j['packets-from-netdev']['forwarded'] > 0"
check "  fibril_from_netdev is on n1's eth0 ingress, not on n2's" \
	bash -c "tc -n $(mn_ns n1) filter show dev eth0 ingress | grep -q fibril_from_net && ! tc -n $(mn_ns n2) filter show dev eth0 ingress | grep -q fibril_from_net"
check "n2 (host-routing legacy) passed pb's packets to its stack" \
	dp_is n2 "j['host-routing'] == 'legacy' and j['host-routing-devices'] == 0 and j['packets-from-endpoints']['to-fib'] == 0 and j['packets-from-endpoints']['to-stack'] > 0 and j['packets-from-netdev']['forwarded'] == 0"

# ---- restart: routes adopted, not re-added ----------------------------------------------
mn_agent_kill n1 TERM
check "with n1's agent stopped, pa still reaches pb" probe pa "${MN_POD_IP[pb]}"
start n1 || fail "the agent of n1 restarts"
check "after the restart n1 knows n2 again" wait_for 10 knows n1 n2
check "the route to n2 was adopted, nothing re-added or removed" nodes_is n1 "
j['metrics']['routes-adopted'] == 1 and j['metrics']['routes-installed'] == 0
and j['metrics']['routes-removed'] == 0"
check "  and is still in place" test "$(routes n1)" = "$CIDR2 via ${MN_IP[n2]} dev eth0"
check "pa reaches pb after n1's restart" probe pa "${MN_POD_IP[pb]}"

# ---- a bad record is refused whole ------------------------------------------------------
mn_etcdctl put /fibril/state/nodes/v1/bogus '{"name":"bogus","ipv4":"10.0.0.300","pod-cidrs":["10.9.0.0/16"]}' >/dev/null
check "a bad registry record is counted" wait_for 5 nodes_is n1 "j['metrics']['bad-records'] >= 1"
check "  and changes nothing" test "$(routes n1)" = "$CIDR2 via ${MN_IP[n2]} dev eth0"
check "  the log names the key and the field" grep -q 'registry key state/nodes/v1/bogus.*"ipv4": not an IPv4 address' \
	"${MN_DIR[n1]}/agent.log"
mn_etcdctl del /fibril/state/nodes/v1/bogus >/dev/null

# ---- a node key removed by hand is put back by its owner ----------------------------------
mn_etcdctl del /fibril/state/nodes/v1/n2 >/dev/null
check "n2 registers itself again after its key was removed" \
	wait_for 10 bash -c '[ -n "$(ip netns exec '"$MN_UNDERLAY_NS"' env ETCDCTL_API=3 etcdctl --endpoints='"$MN_ETCD_ENDPOINT"' get --print-value-only /fibril/state/nodes/v1/n2)" ]'
check "n1 knows n2 (and routes it) again" wait_for 10 bash -c \
	'[ "$(ip -n '"$(mn_ns n1)"' route show proto 242 | sed "s/ *$//")" = "'"$CIDR2 via ${MN_IP[n2]} dev eth0"'" ]'

check "pa reaches pb after n2's key came back" probe pa "${MN_POD_IP[pb]}"

# ---- kill -9: traffic keeps flowing, the dead node goes within the TTL ----------------------
mn_stream_start pa pb $((PORT + 1)) || fail "a stream from pa to pb is up"
mn_agent_kill n2 KILL
check "with n2's agent killed, pa still reaches pb" probe pa "${MN_POD_IP[pb]}"
check "  the stream flows on: 6 MiB more (1 s at least)" mn_stream_flows_on 6291456
mn_stream_stop
check "the stream from pa to pb was never reset while n2's agent was down" \
	grep -q 'reset=0 error=$' "$WORK/send.status"
cat "$WORK/send.status" "$WORK/recv.status" 2>/dev/null | sed 's/^/  /'
check "  n1 still routes n2 (its lease of ${LONG_TTL}s runs)" test "$(routes n1)" = "$CIDR2 via ${MN_IP[n2]} dev eth0"

# the lease's expiry: n2 again with a ${TTL}s lease, killed again
start n2 "$TTL" || fail "the agent of n2 restarts with a ${TTL}s lease"
check "  n1 knows n2 again" wait_for 10 knows n1 n2
mn_agent_kill n2 KILL
killed_at=$SECONDS
check "n1 removes n2 (keeps it listed as lost) within the lease TTL (${TTL}s) + 3 s of its death" \
	wait_for $((TTL + 3)) forgot n1 n2
echo "  n2 was removed $((SECONDS - killed_at)) s after its agent died"
check "  its route is gone" test -z "$(routes n1)"
check "  its ipcache entries are gone" bash -c '! grep -q -e "$1" -e "$2/32" <<<"$3"' _ "$CIDR2" "${MN_IP[n2]}" "$(ipcache n1)"
check "  a node-deleted count" nodes_is n1 "j['metrics']['nodes-deleted'] >= 1"

start n2 || fail "the agent of n2 restarts"
check "n2 is back on n1 when its agent is" wait_for 10 knows n1 n2
check "  routed again" test "$(routes n1)" = "$CIDR2 via ${MN_IP[n2]} dev eth0"
check "n2 adopted its route to n1" nodes_is n2 "j['metrics']['routes-adopted'] == 1 and j['metrics']['routes-installed'] == 0"
check "pa reaches pb again" probe pa "${MN_POD_IP[pb]}"

# ---- host-routing back to legacy: fibril_from_netdev detached, traffic works ------------
mn_agent_kill n1 TERM
HOST_ROUTING[n1]=legacy
start n1 || fail "the agent of n1 restarts with host-routing legacy"
check "n1 (now legacy) detached fibril_from_netdev from its eth0" \
	bash -c "! tc -n $(mn_ns n1) filter show dev eth0 ingress | grep -q fibril_from_net"
check "  and says legacy" dp_is n1 "j['host-routing'] == 'legacy' and j['host-routing-devices'] == 0"
check "pa reaches pb with host-routing legacy on both nodes" probe pa "${MN_POD_IP[pb]}"
check "  and pb reaches pa" probe pb "${MN_POD_IP[pa]}"
finish
