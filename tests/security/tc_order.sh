#!/usr/bin/env bash
# tests/security/tc_order.sh - the attack (on the order of checks): the
# datapath (fibril_from_netdev: the source check and the pods' ingress
# policy for what comes from the network) and the lb module (its NodePort
# program) both put a tc filter on the underlay device's ingress. At the
# same priority the kernel runs the one attached last first, and the lb
# program ended every packet with TC_ACT_OK, so after an agent start that
# added lb to a node whose datapath filter was there already,
# fibril_from_netdev never ran: the order depended on who attached first.
# The promise (bpf/README.md, the tc order contract): the datapath's
# filter is at priority 1 and lb's at 2, whichever attached first, and a
# program with nothing to do hands the packet on (TC_ACT_UNSPEC): packets
# from the network to a pod meet fibril_from_netdev, NodePort still works
# behind it.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

DP_MODS="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes"
# shellcheck disable=SC2086
mn_require $DP_MODS lb
command -v tc >/dev/null || skip_or_fail "tc (iproute2) is not installed"
find_cgroup2
CG="$CG2/fibril-tc-order-test-$$"
RECEIVER=""
mn_test_cleanup() {
	[ -n "$RECEIVER" ] && kill "$RECEIVER" 2>/dev/null
	if [ -d "$CG" ]; then wait_for 5 rmdir "$CG" 2>/dev/null || true; fi
	[ -n "$CG2_MOUNTED" ] && umount "$CG2_MOUNTED"
}
mkdir "$CG"
# shellcheck disable=SC2086
mn_modules "$WORK/mods-dp" $DP_MODS
# shellcheck disable=SC2086
mn_modules "$WORK/mods-all" $DP_MODS lb
mn_underlay_up
mn_etcd_start || { fail "etcd starts on the underlay"; finish; }
mn_node_add n1 1
N1=$(mn_ns n1)
ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.207.0.0/16 --set nodes.retry=300ms)
LB_ARGS=(--set "lb.cgroup=$CG" --set lb.nodeport-devices=eth0)
restart() { # restart [args...] : the agent again, with lb
	mn_agent_kill n1 TERM
	mn_agent_start n1 "$WORK/mods-all" "$@" "${ARGS[@]}" "${LB_ARGS[@]}"
}
netdev_on() { [ "$(mn_json n1 /v1/datapath "j['host-routing-devices']" 2>/dev/null)" = 1 ]; }
filters() { tc -n "$N1" filter show dev eth0 ingress; }
# pref_of MODULE : the priority of the module's filter on eth0's ingress (by
# its handle: the datapath's 0xf1b1, lb's 0xf1b2)
declare -A HANDLE=([datapath]=0xf1b1 [lb]=0xf1b2)
pref_of() { filters | sed -n "s/^filter .*pref \([0-9]*\) bpf .*handle ${HANDLE[$1]} .*/\1/p" | head -1; }
forwarded() { mn_json n1 /v1/datapath "j['packets-from-netdev'].get('forwarded', 0)"; }

mn_agent_start n1 "$WORK/mods-dp" "${ARGS[@]}" || { fail "the agent starts (datapath only)"; finish; }
check "fibril_from_netdev is on eth0" wait_for 20 netdev_on
mn_pod_add n1 pod pod || { fail "a pod on n1"; finish; }
POD=${MN_POD_IP[pod]}
NODE_IP=${MN_IP[n1]}
ip -n "$MN_UNDERLAY_NS" route add "$POD/32" via "$NODE_IP"

RECV=$WORK/pod.recv
mn_udp_log pod 8080 "$RECV" || fail "the pod's UDP receiver listens"
send() { # send DST PORT PAYLOAD : one datagram from the underlay namespace
	ip netns exec "$MN_UNDERLAY_NS" python3 -c 'import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[3].encode(), (sys.argv[1], int(sys.argv[2])))' "$@"
}
received() { grep -q "^$1 [0-9.]*$" "$RECV"; }

# through_netdev NAME : a datagram from the network to the pod arrives and
# fibril_from_netdev forwarded it (its counter went up)
through_netdev() {
	local f0
	f0=$(forwarded)
	send "$POD" 8080 "$1"
	wait_for 5 received "$1" || { echo "  $1 did not arrive"; return 1; }
	[ "$(forwarded)" -gt "$f0" ] || { echo "  packets-from-netdev forwarded stayed $f0"; filters | sed 's/^/  /'; return 1; }
}
check "datapath alone: a datagram from the network to the pod goes through fibril_from_netdev" \
	through_netdev alone

nodeport() { # nodeport PAYLOAD : through NodePort NODE_IP:30091/udp to the pod
	send "$NODE_IP" 30091 "$1"
	wait_for 5 received "$1"
}
upsert_nodeport() {
	local out
	out=$(printf '{"frontend":"%s:30091","protocol":"UDP","type":"NodePort","backends":[{"address":"%s:8080"}]}' \
		"$NODE_IP" "$POD" | "$CLI" -s "${MN_DIR[n1]}/fibril.sock" -o json service upsert - 2>&1) ||
		{ echo "  $out"; return 1; }
}

# ---- order 1: the datapath's filter was there, lb attaches after it ----------------------
restart || { fail "the agent restarts with lb"; finish; }
check "order 1 (datapath first): fibril_from_netdev at priority 1" test "$(pref_of datapath)" = 1 ||
	filters | sed 's/^/  /'
check "  the lb program at priority 2" test "$(pref_of lb)" = 2
check "  a datagram from the network to the pod still goes through fibril_from_netdev" \
	through_netdev order1
check "  a NodePort service is programmed" upsert_nodeport
check "  and served through lb's program behind it" nodeport np1

# ---- order 2: lb's filter was there, the datapath attaches after it ----------------------
# (masquerading off too: it keeps fibril_from_netdev for its replies)
restart --set datapath.host-routing=legacy --set datapath.masquerade=false ||
	{ fail "the agent restarts with host-routing legacy"; finish; }
check "host-routing legacy: fibril_from_netdev is gone, lb's filter stays" \
	test "$(pref_of datapath):$(pref_of lb)" = ":2"
restart || { fail "the agent restarts with host-routing bpf"; finish; }
check "order 2 (lb first): fibril_from_netdev at priority 1, lb at 2" \
	test "$(pref_of datapath):$(pref_of lb)" = "1:2" || filters | sed 's/^/  /'
check "  a datagram from the network to the pod goes through fibril_from_netdev" through_netdev order2
check "  NodePort is still served" nodeport np2
finish
