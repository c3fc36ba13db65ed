#!/usr/bin/env bash
# tests/integration/tunnel.sh - three nodes in routing-mode tunnel
# (tests/lib/multinode.sh: a network namespace per node with its own agent,
# state, run and bpffs dirs, joined by an underlay bridge; one etcd):
# every node creates the VXLAN device (external / collect-metadata, port
# 8472, noarp) through the datapath and attaches the overlay program to
# it; the remote CIDRs are in the ipcache with their node as tunnel
# endpoint, and routed (proto 242) through the device with an IP tunnel
# encapsulation towards their node, VNI 6 (remote-node), for the node's own
# packets; a pod on each node pings and connects over TCP to the pods on
# both other nodes, and each node (its namespace) to the pods on the other
# two, while a capture in the underlay namespace
# (tests/lib/vxlan_capture.py) checks that every pod-to-pod packet crossed
# it VXLAN-encapsulated between the right nodes with the sender pod's
# identity as its VNI, each node-to-pod one with VNI remote-node, and no
# pod-to-pod packet crossed it in the clear; an agent restart adopts the
# device (counted, nothing created) and its routes; kill -9 of one agent
# while a stream crosses the tunnel: the stream is never reset, the tunnel
# stays; a node stopped and its record deleted: its CIDR's route goes.
# The health module runs on every node: every node and health endpoint
# (behind the tunnel) is reachable.
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_MTU=9000 # room for the 50 bytes of VXLAN around 1500-byte pod frames
. "$top_srcdir/tests/lib/multinode.sh"

command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes health
NODES=(n1 n2 n3)
PORT=$((20000 + RANDOM % 20000))
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.202.0.0/16
	--set nodes.retry=300ms --set nodes.routing-mode=tunnel --set nodes.lease-ttl=30s
	--set health.interval=1s --set "health.port=$((20000 + ($$ + 11) % 20000))")
start() { mn_agent_start "$1" "$WORK/mods" "${AGENT_ARGS[@]}"; }

nodes_json() { mn_api "$1" http://x/v1/nodes; }
dp_json() { mn_api "$1" http://x/v1/datapath; }
knows_all() {
	QUIET_JSON=1 json_is "$(nodes_json "$1")" "sorted(n['name'] for n in j['nodes']) == ['n1', 'n2', 'n3'] and all(n.get('routed', True) for n in j['nodes'])"
}
ipcache() { "$CLI" -s "${MN_DIR[$1]}/fibril.sock" map dump dp_ipcache 2>&1; }
vxlan_link() { ip -n "$(mn_ns "$1")" -d link show fibril_vxlan 2>&1; }
probe() { mn_probe_from "$(mn_pod_ns "$1")" "$PORT" "${@:2}"; } # POD TARGET...: ping and TCP
probe_from() { mn_probe_from "$1" "$PORT" "${@:2}"; }             # NETNS TARGET...

for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
for n in "${NODES[@]}"; do check "$n learns the other two nodes" wait_for 15 knows_all "$n"; done
# the health module probes every node's IP and its health endpoint (an
# address of that node's pod CIDR on its loopback: through the tunnel)
health_ok() {
	QUIET_JSON=1 json_is "$(mn_api "$1" http://x/v1/health)" "len(j['peers']) == 3 and not j['unreachable'] and all(t['reachable'] for p in j['peers'] for t in p['targets'].values())"
}
for n in "${NODES[@]}"; do
	check "$n: health sees every node and health endpoint reachable (ICMP and HTTP)" wait_for 30 health_ok "$n" ||
		echo "  $(mn_api "$n" http://x/v1/health | head -c 600)"
done
declare -A CIDR
for n in "${NODES[@]}"; do
	CIDR[$n]=$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print([n for n in j["nodes"] if n["name"]==sys.argv[2]][0]["pod-cidrs"][0])' \
		"$(nodes_json "$n")" "$n")
done

# ---- the device, no routes, the ipcache -------------------------------------------------
for n in "${NODES[@]}"; do
	check "$n: fibril_vxlan is a VXLAN device in external mode on port 8472, up" \
		bash -c '[[ $1 == *"<"*UP*">"* && $1 == *"vxlan external"* && $1 == *"dstport 8472"* ]]' _ "$(vxlan_link "$n")"
	check "$n: the overlay program is attached to it" \
		json_is "$(dp_json "$n")" "j['tunnel']['mode'] == 'vxlan' and j['tunnel']['attached-program'] == j['tunnel']['program-id'] > 0 and j['tunnel']['created'] == 1"
	check "$n: fibril_vxlan is noarp" bash -c '[[ $1 == *"<"*NOARP*">"* ]]' _ "$(vxlan_link "$n")"
done
tunnel_routes() { # tunnel_routes NODE : its proto 242 routes, one "CIDR DST" a line, sorted
	ip -n "$(mn_ns "$1")" route show proto 242 |
		sed -nE 's/^([0-9./]+) +encap ip id 6 src [0-9.]+ dst ([0-9.]+) ttl 64 .*dev fibril_vxlan .*src '"${MN_IP[$1]//./\\.}"'.*/\1 \2/p' | sort
}
want_routes() { # want_routes NODE OTHER... : what tunnel_routes NODE must say
	local n=$1 o
	shift
	for o in "$@"; do echo "${CIDR[$o]} ${MN_IP[$o]}"; done | sort
}
for n in "${NODES[@]}"; do
	others=()
	for o in "${NODES[@]}"; do [ "$o" = "$n" ] || others+=("$o"); done
	check "$n: the other nodes' CIDRs are routed through fibril_vxlan, encap ip id 6 (remote-node) to their node, from its own IP" \
		test "$(tunnel_routes "$n")" = "$(want_routes "$n" "${others[@]}")"
	check "  and nothing else of proto 242" test "$(ip -n "$(mn_ns "$n")" route show proto 242 | wc -l)" = 2
done
check "n1's ipcache: n2's CIDR with n2 as tunnel endpoint" \
	grep -Eq "^${CIDR[n2]} +identity=2 \(world\) tunnel-endpoint=${MN_IP[n2]}\$" <<<"$(ipcache n1)"
check "n1's ipcache: n3's CIDR with n3 as tunnel endpoint" \
	grep -Eq "^${CIDR[n3]} +identity=2 \(world\) tunnel-endpoint=${MN_IP[n3]}\$" <<<"$(ipcache n1)"
check "GET /v1/nodes says routing-mode tunnel" json_is "$(nodes_json n2)" "j['routing-mode'] == 'tunnel'"

# ---- pods on every node, traffic across every pair, a capture in the underlay -----------------
declare -A POD_OF=([n1]=pa [n2]=pb [n3]=pc)
PODS=(pa pb pc)
label() { mn_label "$@"; } # app=POD
# three identities, so the VNI names its sender: labels of their own, and
# (while identities are node-local) pods labelled before them on n2 and n3
# (with cluster-wide identities the PATCH waits for the new labels' number)
# so the numbers differ too
mn_pod_add n2 f1 && label n2 f1
mn_pod_add n3 f2 && label n3 f2
mn_pod_add n3 f3 && label n3 f3
for n in "${NODES[@]}"; do
	mn_pod_add "$n" "${POD_OF[$n]}" || fail "a pod on $n"
	label "$n" "${POD_OF[$n]}"
done
for p in "${PODS[@]}"; do mn_serve "$p" "$PORT"; done
declare -A IDENT
for p in "${PODS[@]}"; do
	IDENT[$p]=$(ipcache "${MN_POD_NODE[$p]}" | awk -v ip="${MN_POD_IP[$p]}/32" '$1 == ip { sub("identity=", "", $2); print $2 }')
done
echo "  pods: pa ${MN_POD_IP[pa]} (identity ${IDENT[pa]}), pb ${MN_POD_IP[pb]} (${IDENT[pb]}), pc ${MN_POD_IP[pc]} (${IDENT[pc]})"
check "the three pods have three identities" test "$(printf '%s\n' "${IDENT[@]}" | sort -u | wc -l)" = 3

mn_capture_start || fail "the underlay capture starts"
check "pa (n1) pings and connects to pb (n2) and pc (n3)" probe pa "${MN_POD_IP[pb]}" "${MN_POD_IP[pc]}"
check "pb (n2) pings and connects to pa (n1) and pc (n3)" probe pb "${MN_POD_IP[pa]}" "${MN_POD_IP[pc]}"
check "pc (n3) pings and connects to pa (n1) and pb (n2)" probe pc "${MN_POD_IP[pa]}" "${MN_POD_IP[pb]}"
check "node n1 pings and connects to pb (n2) and pc (n3)" probe_from "$(mn_ns n1)" "${MN_POD_IP[pb]}" "${MN_POD_IP[pc]}"
check "node n2 pings and connects to pa (n1) and pc (n3)" probe_from "$(mn_ns n2)" "${MN_POD_IP[pa]}" "${MN_POD_IP[pc]}"
check "node n3 pings and connects to pa (n1) and pb (n2)" probe_from "$(mn_ns n3)" "${MN_POD_IP[pa]}" "${MN_POD_IP[pb]}"
mn_capture_stop
CAP=$MN_CAP
for a in "${PODS[@]}"; do
	for b in "${PODS[@]}"; do
		[ "$a" = "$b" ] && continue
		na=${MN_POD_NODE[$a]} nb=${MN_POD_NODE[$b]}
		check "$a -> $b crossed the underlay in VXLAN from $na to $nb, VNI = $a's identity ${IDENT[$a]} (ICMP and TCP)" \
			json_is "$CAP" "{r[5] for r in j['vxlan'] if r[:5] == ['${MN_IP[$na]}', '${MN_IP[$nb]}', ${IDENT[$a]:-0}, '${MN_POD_IP[$a]}', '${MN_POD_IP[$b]}']} == {1, 6}"
	done
done
for n in "${NODES[@]}"; do
	for b in "${PODS[@]}"; do
		nb=${MN_POD_NODE[$b]}
		[ "$n" = "$nb" ] && continue
		check "node $n -> $b crossed the underlay in VXLAN from $n to $nb, VNI = remote-node (6), from $n's IP (ICMP and TCP)" \
			json_is "$CAP" "{r[5] for r in j['vxlan'] if r[:5] == ['${MN_IP[$n]}', '${MN_IP[$nb]}', 6, '${MN_IP[$n]}', '${MN_POD_IP[$b]}']} == {1, 6}"
	done
done
# the pods' replies to a node IP take the underlay (node IPs are reachable there)
check "no pod-to-pod packet crossed the underlay unencapsulated" \
	json_is "$CAP" "not [r for r in j['plain'] if r[0].startswith('10.202.') and r[1].startswith('10.202.')]"
check "every VXLAN packet carried a pod's identity or remote-node (from a node)" \
	json_is "$CAP" "j['vxlan'] and all(r[2] in (${IDENT[pa]:-0}, ${IDENT[pb]:-0}, ${IDENT[pc]:-0}) or (r[2] == 6 and r[3] == r[0]) for r in j['vxlan'])"
check "n2 counted encapsulated packets (to-tunnel) and decapsulated ones (from-overlay)" \
	json_is "$(dp_json n2)" "j['packets-from-endpoints']['to-tunnel'] > 0 and j['packets-from-overlay']['forwarded'] > 0"

# ---- restart: the device is adopted ----------------------------------------------------------
mn_agent_kill n1 TERM
check "with n1's agent stopped, pa still reaches pb and pc" probe pa "${MN_POD_IP[pb]}" "${MN_POD_IP[pc]}"
IFX=$(ip -n "$(mn_ns n1)" -o link show fibril_vxlan | cut -d: -f1)
start n1 || fail "the agent of n1 restarts"
check "after the restart n1 adopted fibril_vxlan (adopted 1, created 0, same ifindex $IFX)" \
	json_is "$(dp_json n1)" "j['tunnel']['adopted'] == 1 and j['tunnel']['created'] == 0 and j['tunnel']['replaced'] == 0 and j['tunnel']['ifindex'] == ${IFX:-0}"
check "  and its new overlay program is the one attached" \
	json_is "$(dp_json n1)" "j['tunnel']['attached-program'] == j['tunnel']['program-id'] > 0"
check "pa reaches pb and pc after n1's restart" probe pa "${MN_POD_IP[pb]}" "${MN_POD_IP[pc]}"
check "after the restart n1's tunnel routes are the same (adopted, nothing removed)" \
	test "$(tunnel_routes n1)" = "$(want_routes n1 n2 n3)"
check "  counted as adopted" json_is "$(nodes_json n1)" "j['metrics']['routes-adopted'] == 2 and j['metrics']['routes-removed'] == 0"
check "node n1 reaches pb and pc after its restart" probe_from "$(mn_ns n1)" "${MN_POD_IP[pb]}" "${MN_POD_IP[pc]}"

# ---- kill -9 during a stream across the tunnel -----------------------------------------------
mn_stream_start pa pb $((PORT + 1)) || fail "a stream from pa to pb is up"
mn_agent_kill n2 KILL
mn_agent_kill n1 KILL
check "with the agents of n1 and n2 killed, pa still reaches pb" probe pa "${MN_POD_IP[pb]}"
check "  the stream flows on: 6 MiB more (1 s at least)" mn_stream_flows_on 6291456
mn_stream_stop
check "the stream from pa to pb through the tunnel was never reset" grep -q 'reset=0 error=$' "$WORK/send.status"
check "  and carried data" grep -Eq 'bytes=[1-9]' "$WORK/recv.status"
cat "$WORK/send.status" "$WORK/recv.status" 2>/dev/null | sed 's/^/  /'
# n1's agent back too: n2's health (all nodes reachable) needs n1's responder
MN_START_NOWAIT=1 start n1
start n2 || fail "the agent of n2 restarts"
healthz() { [ "$(mn_api "$1" -o /dev/null -w '%{http_code}' http://x/v1/healthz 2>/dev/null)" = 200 ]; }
check "the agent of n1 restarts" wait_for 20 healthz n1
check "n2 adopted its device after kill -9" json_is "$(dp_json n2)" "j['tunnel']['adopted'] == 1 and j['tunnel']['created'] == 0"
check "pb reaches pa and pc again" probe pb "${MN_POD_IP[pa]}" "${MN_POD_IP[pc]}"

# ---- a node goes: its CIDR's route goes ------------------------------------------------------
mn_agent_kill n3 TERM
mn_etcdctl del /fibril/state/nodes/v1/n3 >/dev/null
check "n3 stopped and its record deleted: n2's route to n3's CIDR goes" \
	wait_for 10 bash -c 'test "$(ip -n "$1" route show proto 242 | grep -c "^$2 ")" = 0' _ "$(mn_ns n2)" "${CIDR[n3]}"
check "  and n2 keeps its route to n1's" test "$(tunnel_routes n2)" = "$(want_routes n2 n1)"
finish
