#!/usr/bin/env bash
# tests/integration/masq_ports.sh - masquerading's port allocation
# (issue 24): a node whose [datapath] masquerade-port-min..-max holds 8
# ports, three pods and a "world" namespace on the underlay. The promises:
# 8 clients at once (4 per pod, each a TCP connection and a UDP socket of
# its own) toward one destination all get through, and each gets only
# its own answers for 45 s (while the checks below run) from one
# unchanging address (no mapping is cross-wired); a 9th flow to that
# (destination, node address), from a third pod, is dropped, counted and
# named (drop:masquerade-no-port, its counter and a drop event), never
# given a port another flow holds, while another destination still gets
# ports; with [datapath] masquerade-endpoint-max = 8 a pod holding 8
# mappings gets no 9th to any destination (drop:masquerade-endpoint-quota)
# while the third pod does: one pod's pressure takes nothing from
# another; once the clients are gone the GC frees their ports and their
# quota and new flows get through.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
WORLD=$MN_UNDERLAY_PREFIX.200
WORLD2=$MN_UNDERLAY_PREFIX.202
mn_world_up "$WORLD" "$WORLD2"

mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
	--set nodes.retry=300ms --set nodes.lease-ttl=30s \
	--set datapath.masquerade-port-min=65500 --set datapath.masquerade-port-max=65507 \
	--set datapath.masquerade-endpoint-max=8 \
	--set datapath.conntrack-gc-interval=1s --set datapath.conntrack-timeout-tcp-closing=1s \
	--set datapath.conntrack-timeout-other=2s --set datapath.conntrack-refresh-interval=1s ||
	{ fail "the agent of n1 starts"; finish; }
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"
mn_pod_add n1 pa || fail "pod pa"
mn_pod_add n1 pb || fail "pod pb"
mn_pod_add n1 pc || fail "pod pc"

world=("/usr/bin/python3" "$top_srcdir/tests/integration/masq_world.py")
in_pod() { local pod=$1; shift; ip netns exec "$(mn_pod_ns "$pod")" "$@"; }
probe() { # POD HOST : a TCP and a UDP exchange, seen as the node
	local out
	out=$(in_pod "$1" "${world[@]}" probe "$2" "$PORT" 2>&1)
	[[ $out == *"tcp SEEN ${MN_IP[n1]} "* && $out == *"udp SEEN ${MN_IP[n1]} "* ]] && return 0
	echo "  $1 -> $2: $out"
	return 1
}
established() { # the world holds N TCP connections on PORT
	[ "$(ip netns exec "$WORLD_NS" ss -Htn state established "sport = :$PORT" | wc -l)" -ge "$1" ]
}
dp_is() { json_is "$(mn_api n1 http://x/v1/datapath)" "$1"; }

in_pod pa "${world[@]}" clients "$WORLD" "$PORT" 4 45 pa >"$WORK/pa.out" 2>&1 &
PA=$!
in_pod pb "${world[@]}" clients "$WORLD" "$PORT" 4 45 pb >"$WORK/pb.out" 2>&1 &
PB=$!
check "8 clients (4 in pa, 4 in pb) hold their connections to the world" wait_for 10 established 8
no_port() { ! probe "$@" >/dev/null; }
check "a 9th flow, from pc, to the same destination gets no port (the 8 are taken)" no_port pc "$WORLD"
check "  its drop is counted as masquerade-no-port (to-netdev)" \
	dp_is "j['packets-to-netdev']['drop:masquerade-no-port'] > 0"
check "  and named in a drop event" \
	json_is "$(mn_api n1 'http://x/v1/datapath/events?type=drop')" \
	"any(e['reason'] == 'drop:masquerade-no-port' and e['dst'] == '$WORLD' for e in j['events'])"
check "pa, holding its 8 mappings, gets no 9th, to another destination ($WORLD2) either" no_port pa "$WORLD2"
check "  its drop is counted as masquerade-endpoint-quota, apart from no-port" \
	dp_is "j['packets-to-netdev']['drop:masquerade-endpoint-quota'] > 0"
check "pc still gets ports to $WORLD2 meanwhile (pa's and pb's pressure takes none of its)" probe pc "$WORLD2"
rc_a=0
wait "$PA" || rc_a=$?
rc_b=0
wait "$PB" || rc_b=$?
check "pa's 4 clients each got only their own answers, from the node's address, for 45 s" \
	test "$rc_a" = 0 || cat "$WORK/pa.out"
check "pb's 4 clients too" test "$rc_b" = 0 || cat "$WORK/pb.out"
check "  (every client reported ok)" test "$(grep -c "^ok .* seen=${MN_IP[n1]} " "$WORK/pa.out" "$WORK/pb.out" | awk -F: '{s += $2} END {print s}')" = 8
check "once the clients are gone, the GC frees their ports: a new flow gets through" \
	wait_for 30 probe pc "$WORLD"
check "  and pa's quota: pa gets through again" wait_for 30 probe pa "$WORLD2"
finish
