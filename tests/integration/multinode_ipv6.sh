#!/usr/bin/env bash
# tests/integration/multinode_ipv6.sh - IPv6 across nodes and the pod MTU
# (tests/lib/multinode.sh: three nodes, each a network namespace with its
# own agent, on a dual-stack underlay bridge of MTU 1500; one etcd).
# Every node has an IPv4 and an IPv6 pod CIDR (ipam-cluster-pool) and
# dual-stack pods (fibril-cni).
#   native: each node routes the others' IPv6 pod CIDRs via their IPv6
#   node address (proto 242), holds their IPv6 node address (remote-node)
#   and, through the kvstore's ipcache, their pods' /128s; every pod pings
#   and connects over TCP to every pod on the other nodes over IPv6; a
#   pod's eth0 and its routes have the underlay's MTU, 1500.
#   tunnel (the same agents restarted with routing-mode tunnel): the IPv6
#   routes become routes through fibril_vxlan (encap to the node's IPv4
#   tunnel endpoint); new pods get MTU 1450 (1500 - VXLAN's 50) on both
#   veth ends and on their routes; every new pod pings6 and connects over
#   TCP/IPv6 to the new pods of the other nodes while a capture of the
#   underlay checks each IPv6 packet crossed it in VXLAN over IPv4 between
#   the right nodes with the sender's identity as VNI (a node's own
#   packets: remote-node), and that none crossed it in the clear; a bulk TCP transfer (IPv6 and IPv4) and a
#   1400-byte ping with DF set (IPv4 and IPv6) cross nodes, and no outer
#   packet was fragmented on the way.
#   [nodes] mtu = 1400 on one node: its pod MTU is 1350, its tunnel routes
#   are replaced with it, a new pod gets it.
#   tunnel over an IPv6 underlay (every node registers its IPv6 address
#   only, [nodes] node-ip): both pod CIDRs of the others are routed through
#   fibril_vxlan with an IPv6 encapsulation, pods get MTU 1430 (1500 - 70),
#   and their IPv4 and IPv6 traffic crosses the underlay in VXLAN/IPv6 with
#   the sender's identity as VNI.
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_PREFIX6="fd00:fb:$(printf %x $(($$ % 65536)))::"
. "$top_srcdir/tests/lib/multinode.sh"

command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
NODES=(n1 n2 n3)
PORT=$((20000 + RANDOM % 20000))
MODE=native
start() { # start NODE [agent args...]
	local n=$1
	shift
	mn_agent_start "$n" "$WORK/mods" "$@" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16 \
		--set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd00:203::/104 \
		--set nodes.retry=300ms --set nodes.lease-ttl=30s --set "nodes.routing-mode=$MODE"
}
nodes_json() { mn_api "$1" http://x/v1/nodes; }
knows_all() {
	QUIET_JSON=1 json_is "$(nodes_json "$1")" "sorted(n['name'] for n in j['nodes']) == ['n1', 'n2', 'n3'] and all(n.get('routed', True) for n in j['nodes']) and j['synced']"
}
ipcache() { "$CLI" -s "${MN_DIR[$1]}/fibril.sock" map dump dp_ipcache 2>&1; }
routes6() { ip -6 -n "$(mn_ns "$1")" route show proto 242 | sed 's/ *$//' | sort; }
others() { local o; for o in "${NODES[@]}"; do [ "$o" = "$1" ] || echo "$o"; done; }
probe() { mn_probe_from "$(mn_pod_ns "$1")" "$PORT" "${@:2}"; } # POD TARGET...: ping and TCP
probe_from() { mn_probe_from "$1" "$PORT" "${@:2}"; }             # NETNS TARGET...
SERVERS=()
mn_test_cleanup() {
	local p
	for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done
}
serve() { # serve POD... : a TCP server (both families) and a sink in each
	local p
	for p in "$@"; do
		ip netns exec "$(mn_pod_ns "$p")" env BIND=:: python3 "$top_srcdir/tests/cni/nettest.py" serve "$PORT" &
		SERVERS+=($!)
		ip netns exec "$(mn_pod_ns "$p")" env BIND=:: python3 "$top_srcdir/tests/cni/nettest.py" sink $((PORT + 1)) &
		SERVERS+=($!)
	done
	for p in "$@"; do mn_listening "$p" "$PORT" && mn_listening "$p" $((PORT + 1)); done
}
mtu_of() { # mtu_of NETNS IFNAME
	ip -n "$1" -o link show "$2" | sed -nE 's/.* mtu ([0-9]+) .*/\1/p'
}
# pod_mtus POD : "eth0-mtu host-veth-mtu" and its routes' mtu lock values
pod_mtus() {
	local ns host
	ns=$(mn_pod_ns "$1")
	host=$(ip -n "$ns" -o link show eth0 | sed -nE 's/.*eth0@if([0-9]+):.*/\1/p')
	echo "eth0=$(mtu_of "$ns" eth0) host=$(ip -n "$(mn_ns "${MN_POD_NODE[$1]}")" -o link show | awk -F': ' -v i="$host" '$1 == i { sub(/.* mtu /, ""); sub(/ .*/, ""); print }')"
}
route_mtus() { # route_mtus POD : the mtu of each route fibril-cni made in the pod (both families), sorted unique
	local ns
	ns=$(mn_pod_ns "$1")
	{ ip -4 -n "$ns" route show; ip -6 -n "$ns" route show; } | grep -v 'proto kernel\|^multicast' |
		sed -nE 's/.* mtu (lock )?([0-9]+).*/\2/p; t; s/.*/none/p' | sort -u | tr '\n' ' '
}

# ==== native =============================================================================
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts (native)"; finish; }; done
for n in "${NODES[@]}"; do check "$n learns the other two nodes" wait_for 15 knows_all "$n"; done
declare -A CIDR6
for n in "${NODES[@]}"; do
	CIDR6[$n]=$(mn_json "$n" /v1/nodes "[c for x in j['nodes'] if x['name'] == '$n' for c in x['pod-cidrs'] if ':' in c][0]")
done
echo "  IPv6 pod CIDRs: n1 ${CIDR6[n1]}, n2 ${CIDR6[n2]}, n3 ${CIDR6[n3]}"
check "the nodes have IPv6 pod CIDRs of their own" test "$(printf '%s\n' "${CIDR6[@]}" | sort -u | grep -c :)" = 3
check "n1 sees n2's IPv6 node address and both of its pod CIDRs" json_is "$(nodes_json n1)" \
	"[('${MN_IP6[n2]}' in x['ips'], len(x['pod-cidrs'])) for x in j['nodes'] if x['name'] == 'n2'] == [(True, 2)]"
want_native6() { local o; for o in $(others "$1"); do echo "${CIDR6[$o]} via ${MN_IP6[$o]} dev eth0 metric 1024 pref medium"; done | sort; }
for n in "${NODES[@]}"; do
	check "$n routes the other nodes' IPv6 pod CIDRs via their IPv6 node addresses" \
		test "$(routes6 "$n")" = "$(want_native6 "$n")" || { echo "  got:"; routes6 "$n" | sed 's/^/    /'; }
	for o in $(others "$n"); do
		check "  $n's ipcache: $o's IPv6 node address is remote-node" \
			grep -Eq "^${MN_IP6[$o]}/128 +identity=6 " <<<"$(ipcache "$n")"
	done
done

declare -A POD_OF=([n1]=pa [n2]=pb [n3]=pc)
for n in "${NODES[@]}"; do
	mn_pod_add "$n" "${POD_OF[$n]}" || fail "a dual-stack pod on $n"
	mn_label "$n" "${POD_OF[$n]}"
done
serve pa pb pc
for p in pa pb pc; do
	check "$p has an IPv6 address (${MN_POD_IP6[$p]}) in its node's IPv6 CIDR" python3 -c '
import ipaddress, sys
sys.exit(0 if sys.argv[1] and ipaddress.ip_address(sys.argv[1]) in ipaddress.ip_network(sys.argv[2]) else 1)' \
		"${MN_POD_IP6[$p]}" "${CIDR6[${MN_POD_NODE[$p]}]}"
done
# the kvstore's ipcache: each node holds the other nodes' pods' /128s
ipcache_holds() { # ipcache_holds NODE POD...
	local n=$1 p d
	shift
	d=$(ipcache "$n")
	for p in "$@"; do grep -Eq "^${MN_POD_IP6[$p]}/128 +identity=[0-9]+" <<<"$d" || return 1; done
}
for n in "${NODES[@]}"; do
	o=()
	for p in pa pb pc; do [ "${MN_POD_NODE[$p]}" = "$n" ] || o+=("$p"); done
	check "$n's ipcache holds the IPv6 /128s of the other nodes' pods (${o[*]})" wait_for 10 ipcache_holds "$n" "${o[@]}"
	check "  and fibril ipcache list names them with their node" bash -c \
		'for p in "${@:2}"; do grep -q "$p" <<<"$1" || exit 1; done' _ "$("$CLI" -s "${MN_DIR[$n]}/fibril.sock" ipcache list 2>&1)" \
		"${MN_POD_IP6[${o[0]}]}" "${MN_POD_IP6[${o[1]}]}"
done
for p in pa pb pc; do
	t=()
	for q in pa pb pc; do [ "$q" = "$p" ] || t+=("${MN_POD_IP6[$q]}"); done
	check "native: $p (${MN_POD_NODE[$p]}) pings6 and connects over TCP/IPv6 to the pods of the other nodes" probe "$p" "${t[@]}"
done
check "native: node n1 pings6 and connects over TCP/IPv6 to pb (n2) and pc (n3)" \
	probe_from "$(mn_ns n1)" "${MN_POD_IP6[pb]}" "${MN_POD_IP6[pc]}"
check "native: pa's eth0 and its host veth have the underlay's MTU (1500)" test "$(pod_mtus pa)" = "eth0=1500 host=1500"
check "native: pa's routes carry MTU 1500" test "$(route_mtus pa)" = "1500 "
check "native: GET /v1/mtu: pod MTU 1500, the underlay's (eth0), no tunnel overhead" \
	json_is "$(mn_api n1 http://x/v1/mtu)" "j == {'pod-mtu': 1500, 'underlay-mtu': 1500, 'tunnel-overhead': 0, 'source': 'device', 'device': 'eth0'}"
check "native: a bulk TCP transfer over IPv6 from pa to pb" ip netns exec "$(mn_pod_ns pa)" \
	python3 "$top_srcdir/tests/cni/nettest.py" bulk "${MN_POD_IP6[pb]}" $((PORT + 1)) 4000000

# ==== tunnel =============================================================================
MODE=tunnel
for n in "${NODES[@]}"; do mn_agent_kill "$n" TERM; done
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n restarts in tunnel mode"; finish; }; done
for n in "${NODES[@]}"; do check "$n (tunnel) knows the other two nodes" wait_for 15 knows_all "$n"; done
tunnel6() { # NODE: its IPv6 proto 242 routes as "CIDR DST MTU"
	ip -6 -n "$(mn_ns "$1")" route show proto 242 |
		sed -nE 's/^([0-9a-f:/]+) +encap ip id 6 src [0-9.]+ dst ([0-9.]+) ttl 64 .*dev fibril_vxlan .*mtu ([0-9]+).*/\1 \2 \3/p' | sort
}
want_tunnel6() { local o; for o in $(others "$1"); do echo "${CIDR6[$o]} ${MN_IP[$o]} 1450"; done | sort; }
for n in "${NODES[@]}"; do
	check "$n routes the other nodes' IPv6 pod CIDRs through fibril_vxlan to their IPv4 tunnel endpoint, MTU 1450" \
		test "$(tunnel6 "$n")" = "$(want_tunnel6 "$n")" || { echo "  got:"; ip -6 -n "$(mn_ns "$n")" route show proto 242 | sed 's/^/    /'; }
	check "  and nothing else of proto 242 (IPv4: 2, IPv6: 2)" \
		test "$(ip -4 -n "$(mn_ns "$n")" route show proto 242 | wc -l):$(ip -6 -n "$(mn_ns "$n")" route show proto 242 | wc -l)" = 2:2
done
for o in n2 n3; do
	check "n1's ipcache: $o's IPv6 pod CIDR with $o as tunnel endpoint" \
		grep -Eq "^${CIDR6[$o]} +identity=2 \(world\) tunnel-endpoint=${MN_IP[$o]}\$" <<<"$(ipcache n1)"
done
check "n1's ipcache: pb's /128 with n2 as tunnel endpoint" \
	grep -Eq "^${MN_POD_IP6[pb]}/128 +identity=[0-9]+ .*tunnel-endpoint=${MN_IP[n2]}\$" <<<"$(ipcache n1)"

check "tunnel: GET /v1/mtu: pod MTU 1450 = the underlay's 1500 less VXLAN's 50" \
	json_is "$(mn_api n2 http://x/v1/mtu)" "j == {'pod-mtu': 1450, 'underlay-mtu': 1500, 'tunnel-overhead': 50, 'source': 'device', 'device': 'eth0'}"
declare -A TPOD_OF=([n1]=ta [n2]=tb [n3]=tc)
TPODS=(ta tb tc)
for n in "${NODES[@]}"; do
	mn_pod_add "$n" "${TPOD_OF[$n]}" || fail "a dual-stack pod on $n (tunnel)"
	mn_label "$n" "${TPOD_OF[$n]}"
done
serve ta tb tc
for p in "${TPODS[@]}"; do
	check "tunnel: $p's eth0 and its host veth have MTU 1450 (1500 - VXLAN's 50)" test "$(pod_mtus "$p")" = "eth0=1450 host=1450"
	check "tunnel: $p's routes carry MTU 1450" test "$(route_mtus "$p")" = "1450 "
done
declare -A IDENT
for p in "${TPODS[@]}"; do
	IDENT[$p]=$(ipcache "${MN_POD_NODE[$p]}" | awk -v ip="${MN_POD_IP6[$p]}/128" '$1 == ip { sub("identity=", "", $2); print $2 }')
done
echo "  pods: ta ${MN_POD_IP6[ta]} (identity ${IDENT[ta]}), tb ${MN_POD_IP6[tb]} (${IDENT[tb]}), tc ${MN_POD_IP6[tc]} (${IDENT[tc]})"
check "the three pods have three identities" test "$(printf '%s\n' "${IDENT[@]}" | sort -u | grep -c .)" = 3
for n in "${NODES[@]}"; do
	o=()
	for p in "${TPODS[@]}"; do [ "${MN_POD_NODE[$p]}" = "$n" ] || o+=("$p"); done
	check "$n's ipcache holds the IPv6 /128s of the other nodes' new pods" wait_for 10 ipcache_holds "$n" "${o[@]}"
done

mn_capture_start || fail "the underlay capture starts"
for p in "${TPODS[@]}"; do
	t=()
	for q in "${TPODS[@]}"; do [ "$q" = "$p" ] || t+=("${MN_POD_IP6[$q]}"); done
	check "tunnel: $p (${MN_POD_NODE[$p]}) pings6 and connects over TCP/IPv6 to the pods of the other nodes" probe "$p" "${t[@]}"
done
check "tunnel: node n1 pings6 and connects over TCP/IPv6 to tb (n2) and tc (n3)" \
	probe_from "$(mn_ns n1)" "${MN_POD_IP6[tb]}" "${MN_POD_IP6[tc]}"
check "tunnel: a bulk TCP transfer over IPv6 from ta to tb (full-size segments)" ip netns exec "$(mn_pod_ns ta)" \
	python3 "$top_srcdir/tests/cni/nettest.py" bulk "${MN_POD_IP6[tb]}" $((PORT + 1)) 4000000
check "tunnel: a bulk TCP transfer over IPv4 from tc to ta" ip netns exec "$(mn_pod_ns tc)" \
	python3 "$top_srcdir/tests/cni/nettest.py" bulk "${MN_POD_IP[ta]}" $((PORT + 1)) 4000000
check "tunnel: a 1400-byte IPv4 ping with DF set from tb to tc" \
	ip netns exec "$(mn_pod_ns tb)" ping -c 1 -W 2 -M do -s 1372 "${MN_POD_IP[tc]}" >/dev/null
check "tunnel: a 1400-byte IPv6 ping (no fragmentation) from tb to tc" \
	ip netns exec "$(mn_pod_ns tb)" ping -c 1 -W 2 -M do -s 1352 "${MN_POD_IP6[tc]}" >/dev/null
mn_capture_stop
CAP=$MN_CAP
for a in "${TPODS[@]}"; do
	for b in "${TPODS[@]}"; do
		[ "$a" = "$b" ] && continue
		na=${MN_POD_NODE[$a]} nb=${MN_POD_NODE[$b]}
		check "$a -> $b over IPv6 crossed the underlay in VXLAN/IPv4 from $na to $nb, VNI = $a's identity ${IDENT[$a]} (ICMPv6 and TCP)" \
			json_is "$CAP" "{r[5] for r in j['vxlan'] if r[:5] == ['${MN_IP[$na]}', '${MN_IP[$nb]}', ${IDENT[$a]:-0}, '${MN_POD_IP6[$a]}', '${MN_POD_IP6[$b]}']} >= {58, 6}"
	done
done
for b in tb tc; do
	nb=${MN_POD_NODE[$b]}
	check "node n1 -> $b over IPv6 crossed the underlay in VXLAN from n1 to $nb, VNI = remote-node (6), from n1's IPv6 address" \
		json_is "$CAP" "{r[5] for r in j['vxlan'] if r[:5] == ['${MN_IP[n1]}', '${MN_IP[$nb]}', 6, '${MN_IP6[n1]}', '${MN_POD_IP6[$b]}']} >= {58, 6}"
done
check "no outer packet was fragmented on the underlay" json_is "$CAP" "j['fragments'] == 0"
check "no pod-to-pod packet crossed the underlay in the clear (IPv6 or IPv4)" \
	json_is "$CAP" "not [r for r in j['plain6'] if r[0].startswith('fd00:203:') and r[1].startswith('fd00:203:')] and not [r for r in j['plain'] if r[0].startswith('10.203.') and r[1].startswith('10.203.')]"

# ==== [nodes] mtu overrides the underlay's MTU ============================================
mn_agent_kill n3 TERM
start n3 --set nodes.mtu=1400 || fail "the agent of n3 restarts with [nodes] mtu = 1400"
check "n3: GET /v1/mtu: pod MTU 1350 = [nodes] mtu 1400 less 50" \
	json_is "$(mn_api n3 http://x/v1/mtu)" "j == {'pod-mtu': 1350, 'underlay-mtu': 1400, 'tunnel-overhead': 50, 'source': 'config'}"
want_mtu() { local o; for o in $(others "$1"); do echo "${CIDR6[$o]} ${MN_IP[$o]} $2"; done | sort; }
check "n3's tunnel routes were replaced with MTU 1350 (not adopted with 1450)" \
	test "$(tunnel6 n3)" = "$(want_mtu n3 1350)"
mn_pod_add n3 td || fail "a pod on n3 with [nodes] mtu = 1400"
check "  a new pod on n3 gets MTU 1350 on both veth ends and its routes" \
	test "$(pod_mtus td) $(route_mtus td)" = "eth0=1350 host=1350 1350 "

# ==== tunnel over an IPv6 underlay ========================================================
# every node registers its IPv6 address only: the others' tunnel endpoint
for n in "${NODES[@]}"; do mn_agent_kill "$n" TERM; done
for n in "${NODES[@]}"; do
	start "$n" --set "nodes.node-ip=${MN_IP6[$n]}" || { fail "the agent of $n restarts with an IPv6 node IP"; finish; }
done
v6_underlay() { # NODE: it knows the others by their IPv6 address alone
	QUIET_JSON=1 json_is "$(nodes_json "$1")" "sorted(x['name'] for x in j['nodes']) == ['n1', 'n2', 'n3'] and all(x.get('routed', True) and len(x['ips']) == 1 and ':' in x['ips'][0] for x in j['nodes'])"
}
for n in "${NODES[@]}"; do check "$n knows the other nodes by their IPv6 address" wait_for 15 v6_underlay "$n"; done
check "GET /v1/mtu: pod MTU 1430 = 1500 less VXLAN's 70 over IPv6" \
	json_is "$(mn_api n1 http://x/v1/mtu)" "j['pod-mtu'] == 1430 and j['tunnel-overhead'] == 70"
tunnel_via6() { # NODE: its proto 242 routes (both families) as "CIDR DST"
	{ ip -4 -n "$(mn_ns "$1")" route show proto 242; ip -6 -n "$(mn_ns "$1")" route show proto 242; } |
		sed -nE 's/^([0-9a-f:./]+) +encap ip6 id 6 src :: dst ([0-9a-f:]+) hoplimit 64 .*dev fibril_vxlan .*mtu 1430.*/\1 \2/p' | sort
}
want_via6() { local o; for o in $(others "$1"); do echo "${CIDR[$o]} ${MN_IP6[$o]}"; echo "${CIDR6[$o]} ${MN_IP6[$o]}"; done | sort; }
declare -A CIDR
for n in "${NODES[@]}"; do
	CIDR[$n]=$(mn_json "$n" /v1/nodes "[c for x in j['nodes'] if x['name'] == '$n' for c in x['pod-cidrs'] if ':' not in c][0]")
done
check "n1 routes both pod CIDRs of the others through fibril_vxlan to their IPv6 address, MTU 1430" \
	test "$(tunnel_via6 n1)" = "$(want_via6 n1)" || { echo "  got:"; ip -n "$(mn_ns n1)" route show proto 242 | sed 's/^/    /'; ip -6 -n "$(mn_ns n1)" route show proto 242 | sed 's/^/    /'; }
declare -A UPOD_OF=([n1]=ua [n2]=ub [n3]=uc)
UPODS=(ua ub uc)
for n in "${NODES[@]}"; do
	mn_pod_add "$n" "${UPOD_OF[$n]}" || fail "a dual-stack pod on $n (IPv6 underlay)"
	mn_label "$n" "${UPOD_OF[$n]}"
done
serve ua ub uc
check "IPv6 underlay: a new pod has MTU 1430 on both veth ends and its routes" \
	test "$(pod_mtus ub) $(route_mtus ub)" = "eth0=1430 host=1430 1430 "
for p in "${UPODS[@]}"; do
	IDENT[$p]=$(ipcache "${MN_POD_NODE[$p]}" | awk -v ip="${MN_POD_IP6[$p]}/128" '$1 == ip { sub("identity=", "", $2); print $2 }')
done
for n in "${NODES[@]}"; do
	o=()
	for p in "${UPODS[@]}"; do [ "${MN_POD_NODE[$p]}" = "$n" ] || o+=("$p"); done
	check "$n's ipcache holds the other nodes' new pods" wait_for 10 ipcache_holds "$n" "${o[@]}"
done
mn_capture_start || fail "the underlay capture starts"
for p in "${UPODS[@]}"; do
	t=()
	for q in "${UPODS[@]}"; do [ "$q" = "$p" ] || t+=("${MN_POD_IP6[$q]}" "${MN_POD_IP[$q]}"); done
	check "IPv6 underlay: $p (${MN_POD_NODE[$p]}) pings and connects over TCP to the pods of the other nodes (IPv6 and IPv4)" probe "$p" "${t[@]}"
done
check "IPv6 underlay: a bulk TCP transfer over IPv4 from ua to uc" ip netns exec "$(mn_pod_ns ua)" \
	python3 "$top_srcdir/tests/cni/nettest.py" bulk "${MN_POD_IP[uc]}" $((PORT + 1)) 4000000
mn_capture_stop
CAP=$MN_CAP
for a in "${UPODS[@]}"; do
	for b in "${UPODS[@]}"; do
		[ "$a" = "$b" ] && continue
		na=${MN_POD_NODE[$a]} nb=${MN_POD_NODE[$b]}
		check "$a -> $b crossed the underlay in VXLAN/IPv6 from $na to $nb, VNI = $a's identity ${IDENT[$a]} (IPv6 and IPv4 inside)" \
			json_is "$CAP" "{r[4] for r in j['vxlan'] if r[:3] == ['${MN_IP6[$na]}', '${MN_IP6[$nb]}', ${IDENT[$a]:-0}] and r[3] in ('${MN_POD_IP6[$a]}', '${MN_POD_IP[$a]}')} == {'${MN_POD_IP6[$b]}', '${MN_POD_IP[$b]}'}"
	done
done
check "IPv6 underlay: no outer packet was fragmented" json_is "$CAP" "j['fragments'] == 0"
finish
