#!/usr/bin/env bash
# tests/integration/masq_crr.sh - new connections through masquerading
# (issue 24's TCP_CRR defect, bench_masq.sh's setting): a node whose
# masquerade range is 1024-65535, a pod whose ephemeral ports lie in
# that range (8,000 of them), and a "world" server that
# closes first, so the world holds every finished connection's TIME_WAIT
# (60 s) under the node's address and a port. The promises: a pod's own
# source port inside the range is the port its flow leaves with (as the
# kernel's masquerade keeps it), so the world sees one TCP conversation
# per pod 4-tuple; new connections one after another for 20 s, the pod's
# ports coming round after their mappings were collected (so each new flow lands on
# a port the world holds in TIME_WAIT), are accepted on the first SYN:
# the world counts no PAWSTimewait reject, and at most one connection in
# 10,000 retransmits its SYN or takes over 0.5 s (a flow coming back in
# the instant the GC takes its idle mapping's reply half is put right by
# its next SYN)
# (before, a random port took another pod 4-tuple's TIME_WAIT, whose
# timestamp the new SYN could not always beat: refused (PAWS), a 1 s SYN
# retransmit, sometimes a connection that never completed).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
WORLD=$MN_UNDERLAY_PREFIX.200
mn_world_add world "$WORLD"
WORLD_NS=$(mn_ns world)
PORT=$((20000 + RANDOM % 10000))
WLOG=$WORK/world.log
crr_py=("/usr/bin/python3" "$top_srcdir/tests/integration/masq_crr.py")
mn_bg "$WORLD_NS" "${crr_py[@]}" serve "$PORT" "$WLOG"

# mappings of closed flows go 1 s after their last packet: a pod port
# comes round again (8,000 of them) after its mapping was collected
mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
	--set nodes.retry=300ms --set nodes.lease-ttl=30s \
	--set datapath.conntrack-gc-interval=1s --set datapath.conntrack-timeout-tcp-closing=1s \
	--set datapath.conntrack-refresh-interval=1s \
	--set datapath.masquerade-port-min=1024 --set datapath.masquerade-endpoint-max=65536 ||
	{ fail "the agent of n1 starts"; finish; }
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"
mn_pod_add n1 pa || fail "pod pa"
POD_NS=$(mn_pod_ns pa)
# 8,000 ephemeral ports (inside the masquerade range): they come round
# within the 20 s even on a slow CI machine (26,000 connections were seen
# on one, which 64,512 ports would not have brought round)
ip netns exec "$POD_NS" sysctl -qw net.ipv4.ip_local_port_range="30000 37999"
tcpstat() { ip netns exec "$1" nstat -asz "$2" | awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }'; }

check "a pod's own source port (63001, in the range) is the port its flow leaves with" \
	ip netns exec "$POD_NS" "${crr_py[@]}" once "$WORLD" "$PORT" 63001
check "  the world saw ${MN_IP[n1]} 63001" wait_for 5 grep -qx "peer ${MN_IP[n1]} 63001" "$WLOG"

paws0=$(tcpstat "$WORLD_NS" TcpExtPAWSTimewait)
syn0=$(tcpstat "$POD_NS" TcpExtTCPSynRetrans)
out=$(ip netns exec "$POD_NS" "${crr_py[@]}" crr "$WORLD" "$PORT" 20 2>&1) || fail "new connections for 20 s: $out"
echo "  $out"
paws=$(($(tcpstat "$WORLD_NS" TcpExtPAWSTimewait) - paws0))
syn=$(($(tcpstat "$POD_NS" TcpExtTCPSynRetrans) - syn0))
conns=$(sed -n 's/^connections=\([0-9]*\) .*/\1/p' <<<"$out")
ports=$(sed -n 's/.* ports=\([0-9]*\).*/\1/p' <<<"$out")
check "the pod's ports came round ($conns connections on $ports ports) onto the world's TIME_WAITs" \
	test "${conns:-0}" -gt "$((${ports:-0} * 3 / 2))"
check "the world refused no SYN on a TIME_WAIT (PAWSTimewait: $paws)" test "$paws" = 0
slow=$(sed -n 's/.* slow=\([0-9]*\) .*/\1/p' <<<"$out")
check "at most 1 in 10,000 connections retransmitted its SYN (TCPSynRetrans: $syn)" \
	test "$((syn * 10000))" -le "${conns:-0}"
check "at most 1 in 10,000 took over 0.5 s (slow: ${slow:-?})" test "$((${slow:-99999} * 10000))" -le "${conns:-0}"
[ "$FAILED" = 0 ] || echo "  datapath counters: $(mn_api n1 http://x/v1/datapath | python3 -c 'import json, sys
j = json.load(sys.stdin)
print(" ".join("%s/%s=%s" % (s, k, v) for s, d in j.items() if isinstance(d, dict) for k, v in d.items() if isinstance(v, int) and v))')"
finish
