#!/usr/bin/env bash
# tests/integration/masq.sh - masquerading (BPF SNAT, issue 24) on three
# nodes in native routing (masq_tunnel.sh: the same in tunnel mode): a
# "world" namespace on the underlay bridge only (no route to any pod
# CIDR) runs a TCP, UDP and ICMP server (tests/integration/masq_world.py)
# that tells each client the address it saw. The promise: every pod
# reaches it over TCP, UDP and ICMP echo and the world sees the pod's node
# address (fibril_to_netdev translated it; the replies were translated
# back by fibril_from_netdev and delivered, with host-routing bpf on n1
# and n3 and legacy on n2); a destination in [datapath]
# non-masquerade-cidrs sees the pod's own address; a pod on another node
# (the cluster: never masqueraded) sees the pod's own address too; a
# 4000-byte UDP datagram (fragments both ways) goes and comes back whole.
# All of it for IPv4 and IPv6 (a dual-stack underlay and pods).
. "$top_srcdir/tests/lib/common.sh"
MASQ_MODE=${MASQ_MODE:-native}
[ "$MASQ_MODE" = tunnel ] && MN_UNDERLAY_MTU=9000 # room for VXLAN around 1500-byte frames
MN_UNDERLAY_PREFIX6="fd00:fc:$(printf %x $(($$ % 65536)))::"
. "$top_srcdir/tests/lib/multinode.sh"

command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
NODES=(n1 n2 n3)

# the world: on the bridge, an address the nodes reach on the link, and
# a second one that is in the non-masquerade set; no route to the pods
WORLD=$MN_UNDERLAY_PREFIX.200
WORLD_NOMASQ=$MN_UNDERLAY_PREFIX.201
WORLD6=${MN_UNDERLAY_PREFIX6}200
WORLD6_NOMASQ=${MN_UNDERLAY_PREFIX6}201
mn_world_up "$WORLD" "$WORLD_NOMASQ" "$WORLD6" "$WORLD6_NOMASQ"

declare -A HOST_ROUTING=([n1]=bpf [n2]=legacy [n3]=bpf)
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16
	--set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd00:203::/104
	--set nodes.retry=300ms --set "nodes.routing-mode=$MASQ_MODE" --set nodes.lease-ttl=30s
	--set "datapath.non-masquerade-cidrs=$WORLD_NOMASQ/32 $WORLD6_NOMASQ/128")
start() {
	mn_agent_start "$1" "$WORK/mods" "${AGENT_ARGS[@]}" --set "datapath.host-routing=${HOST_ROUTING[$1]}"
}
dp_is() { # NODE EXPR : EXPR over j = NODE's GET /v1/datapath
	local doc
	doc=$(mn_api "$1" http://x/v1/datapath)
	json_is "$doc" "$2"
}
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
for n in "${NODES[@]}"; do check "$n routes every other node" wait_for 15 mn_routes_all "$n"; done
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"

declare -A POD_OF=([n1]=pa [n2]=pb [n3]=pc)
for n in "${NODES[@]}"; do mn_pod_add "$n" "${POD_OF[$n]}" || fail "a pod on $n"; done
# a pod's own server, for the cluster's side
mn_bg "$(mn_pod_ns pb)" /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" serve "$PORT" "$WORK/pb.log"
check "pb's server is up" wait_for 10 grep -q ready "$WORK/pb.log"

in_pod() { local pod=$1; shift; ip netns exec "$(mn_pod_ns "$pod")" "$@"; }
probe() { # POD HOST EXPECTED-ADDRESS : TCP and UDP answer "SEEN EXPECTED"
	local out
	out=$(in_pod "$1" /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" probe "$2" "$PORT" 2>&1)
	[[ $out == *"tcp SEEN $3"* && $out == *"udp SEEN $3"* ]] && return 0
	echo "  $1 -> $2: $out (expected SEEN $3)"
	return 1
}
world_saw() { grep -qx "$1" "$WLOG"; }
big() { # POD HOST EXPECTED-ADDRESS : a 4000-byte datagram there and back
	local out
	out=$(in_pod "$1" /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" big "$2" "$PORT" 4000 2>&1)
	[ "$out" = "big SEEN $3 4000" ] && return 0
	echo "  $1 -> $2: $out (expected big SEEN $3 4000)"
	return 1
}

for n in "${NODES[@]}"; do
	pod=${POD_OF[$n]}
	check "$MASQ_MODE: $pod (${MN_POD_IP[$pod]}, $n, host-routing ${HOST_ROUTING[$n]}) reaches the world over TCP and UDP, seen as $n (${MN_IP[$n]})" \
		probe "$pod" "$WORLD" "${MN_IP[$n]}"
	check "$MASQ_MODE: $pod pings the world" in_pod "$pod" ping -c 2 -W 3 -q "$WORLD"
	check "  the world saw the echo requests from $n's address" world_saw "icmp ${MN_IP[$n]}"
	check "  the world never saw $pod's own address" bash -c "! grep -qE ' ${MN_POD_IP[$pod]}( |\$)' '$WLOG'"
	check "$MASQ_MODE: $pod's 4000-byte UDP datagram (fragments) reaches the world as $n's and comes back whole (fragments)" \
		big "$pod" "$WORLD" "${MN_IP[$n]}"
	in_pod "$pod" /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" send "$WORLD_NOMASQ" "$PORT"
	check "$MASQ_MODE: the non-masquerade destination $WORLD_NOMASQ sees $pod's own address" \
		wait_for 5 grep -q "^udp ${MN_POD_IP[$pod]} " "$WLOG"
	# IPv6 the same
	p6=${MN_POD_IP6[$pod]}
	check "$MASQ_MODE: $pod ($p6) reaches the world's IPv6 address over TCP and UDP, seen as $n (${MN_IP6[$n]})" \
		probe "$pod" "$WORLD6" "${MN_IP6[$n]}"
	check "$MASQ_MODE: $pod pings the world's IPv6 address" in_pod "$pod" ping -6 -c 2 -W 3 -q "$WORLD6"
	check "  the world saw the IPv6 echo requests from $n's address" world_saw "icmp ${MN_IP6[$n]}"
	check "  the world never saw $pod's own IPv6 address" bash -c "! grep -qE ' $p6( |\$)' '$WLOG'"
	check "$MASQ_MODE: $pod's 4000-byte UDP datagram over IPv6 (fragments) goes and comes back whole" \
		big "$pod" "$WORLD6" "${MN_IP6[$n]}"
	in_pod "$pod" /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" send "$WORLD6_NOMASQ" "$PORT"
	check "$MASQ_MODE: the non-masquerade destination $WORLD6_NOMASQ sees $pod's own IPv6 address" \
		wait_for 5 grep -q "^udp $p6 " "$WLOG"
done
check "$MASQ_MODE: pa on n1 reaches pb on n2 with its own address (the cluster is not masqueraded)" \
	probe pa "${MN_POD_IP[pb]}" "${MN_POD_IP[pa]}"
check "$MASQ_MODE: pc on n3 reaches pb with its own address" probe pc "${MN_POD_IP[pb]}" "${MN_POD_IP[pc]}"
check "$MASQ_MODE: pa reaches pb over IPv6 with its own address" \
	probe pa "${MN_POD_IP6[pb]}" "${MN_POD_IP6[pa]}"
for n in "${NODES[@]}"; do
	check "$n counted masqueraded packets (to-netdev) and translated replies (from-netdev)" \
		dp_is "$n" "j['packets-to-netdev']['masqueraded'] > 0 and j['packets-from-netdev']['masquerade-reply'] > 0"
done
# a fresh flow (a closed TCP one's mapping goes after conntrack-timeout-tcp-closing)
probe pa "$WORLD" "${MN_IP[n1]}" >/dev/null
dump=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump dp_nat 2>&1)
check "fibril map dump dp_nat decodes pa's UDP flow to the world: out, translated to n1's address" \
	grep -Eq "^out UDP ${MN_POD_IP[pa]}:[0-9]+ -> $WORLD:$PORT +to ${MN_IP[n1]}:[0-9]+ endpoint=[0-9]+ " <<<"$dump" ||
	echo "$dump" | head
check "  and its reply's entry: in, back to pa" \
	grep -Eq "^in UDP $WORLD:$PORT -> ${MN_IP[n1]}:[0-9]+ +to ${MN_POD_IP[pa]}:[0-9]+ " <<<"$dump"
check "fibril_to_netdev is on n2's eth0 egress (host-routing legacy, masquerade on)" \
	bash -c "tc -n $(mn_ns n2) filter show dev eth0 egress | grep -q fibril_to_netde" # (a program name keeps 15 characters)
finish
