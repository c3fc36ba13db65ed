#!/usr/bin/env bash
# tests/integration/masq_pmtu.sh - path-MTU discovery through
# masquerading (issue 24): a node, a pod, and beyond the underlay a router
# namespace whose link to a "far" namespace has an MTU of 1280. The pod
# sends 1400-byte UDP datagrams with "don't fragment" to the far end
# (IPv4 and IPv6); they leave masqueraded to the node's address, so the
# router's ICMP Fragmentation Needed / Packet Too Big comes back to the
# node. The promise: fibril_from_netdev translates that error back (outer
# destination, inner source and port, checksums) and delivers it, so the
# pod's kernel learns the path MTU (1280) for its own socket.
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_PREFIX6="fd00:fd:$(printf %x $(($$ % 65536)))::"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
# the router: on the bridge (.250) and on a 1280-byte link to the far end
mn_world_add router "$MN_UNDERLAY_PREFIX.250" "${MN_UNDERLAY_PREFIX6}250"
R=$(mn_ns router)
F=$(mn_ns far)
_mn_netns_add "$F"
ip -n "$R" link add eth1 mtu 1280 type veth peer name eth0 mtu 1280 netns "$F"
ip -n "$R" addr add 10.250.9.1/24 dev eth1
ip -n "$R" addr add fd00:9::1/64 dev eth1 nodad
ip -n "$R" link set eth1 up
ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
ip -n "$F" addr add 10.250.9.2/24 dev eth0
ip -n "$F" addr add fd00:9::2/64 dev eth0 nodad
ip -n "$F" link set eth0 up
ip -n "$F" route add default via 10.250.9.1
ip -n "$F" -6 route add default via fd00:9::1
# the node reaches the far network through the router (the network's
# routing, not the cluster's)
ip -n "$(mn_ns n1)" route add 10.250.9.0/24 via "$MN_UNDERLAY_PREFIX.250"
ip -n "$(mn_ns n1)" -6 route add fd00:9::/64 via "${MN_UNDERLAY_PREFIX6}250"

mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.206.0.0/16 \
	--set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd00:206::/104 \
	--set nodes.retry=300ms --set nodes.lease-ttl=30s || { fail "the agent of n1 starts"; finish; }
mn_pod_add n1 pa || { fail "pod pa"; finish; }
in_pod() { local pod=$1; shift; ip netns exec "$(mn_pod_ns "$pod")" "$@"; }
pmtu() { # FAMILY-ADDRESS : the pod's probe learns 1280
	local out
	out=$(in_pod pa /usr/bin/python3 "$top_srcdir/tests/integration/masq_pmtu.py" "$1" 9 1400 10 2>&1)
	[ "$out" = "pmtu 1280" ] && return 0
	echo "  pa -> $1: $out"
	return 1
}
check "the pod's 1400-byte UDP with DF to 10.250.9.2 learns the path MTU 1280 (Fragmentation Needed translated back)" \
	pmtu 10.250.9.2
check "  over IPv6 to fd00:9::2 (Packet Too Big translated back)" pmtu fd00:9::2
check "  the errors came back through fibril_from_netdev (masquerade-reply counted)" \
	json_is "$(mn_api n1 http://x/v1/datapath)" "j['packets-from-netdev']['masquerade-reply'] >= 2"
finish
