#!/usr/bin/env bash
# tests/integration/masq_restart.sh - masquerading across an agent crash
# (issue 24): a pod holds 20 masqueraded TCP connections (and 20 UDP
# flows) to a "world" namespace on the underlay, each checking that every
# answer is its own, from one unchanging address. The promise: kill -9 of
# the agent in the middle resets none of them (the programs stay attached,
# the mappings stay in the pinned dp_nat) and the restarted agent adopts
# the NAT state as it is (the same map, its entries kept by its GC, the
# flows go on with the ports they had: a new port would get the world's
# RST) and masquerades new flows.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

command -v bpftool >/dev/null || skip_or_fail "bpftool is not installed (the map id is read with it)"
mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
WORLD=$MN_UNDERLAY_PREFIX.200
mn_world_up "$WORLD"
world=("/usr/bin/python3" "$top_srcdir/tests/integration/masq_world.py")
start() {
	mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.205.0.0/16 \
		--set nodes.retry=300ms --set nodes.lease-ttl=30s --set datapath.conntrack-gc-interval=1s
}
start || { fail "the agent of n1 starts"; finish; }
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"
mn_pod_add n1 pa || { fail "pod pa"; finish; }
in_pod() { local pod=$1; shift; ip netns exec "$(mn_pod_ns "$pod")" "$@"; }
established() { [ "$(ip netns exec "$WORLD_NS" ss -Htn state established "sport = :$PORT" | wc -l)" -ge "$1" ]; }
dp() { mn_json n1 /v1/datapath "$1"; }
nat_entries() { [ "$(dp "j['masquerade-entries']")" -ge "$1" ]; }

in_pod pa "${world[@]}" clients "$WORLD" "$PORT" 20 25 pa >"$WORK/pa.out" 2>&1 &
CLIENTS=$!
check "20 masqueraded connections are up" wait_for 10 established 20
check "  and their 40 mappings are in dp_nat (the GC's count)" wait_for 10 nat_entries 40
nat_map_id() { bpftool map show pinned "/sys/fs/bpf/$MN_TAG-n1/dp_nat" | sed -n 's/^\([0-9]*\):.*/\1/p'; }
ID_BEFORE=$(nat_map_id)
mn_agent_kill n1 KILL
check "with the agent killed (-9), the 20 connections stay up" established 20
sleep 3 # sleep: the flows go on for a while without any agent
start || { fail "the agent of n1 restarts"; finish; }
check "the restarted agent has its programs in place" test "$(dp "j['program-id']")" != 0
check "  and the NAT state: its GC counts the 40 mappings in the map it opened" wait_for 10 nat_entries 40
check "  dp_nat was reused, not recreated (map id $ID_BEFORE)" test -n "$ID_BEFORE" -a "$(nat_map_id)" = "$ID_BEFORE"
rc=0
wait "$CLIENTS" || rc=$?
check "none of the 20 connections was reset: each got only its own answers, from one address, for 25 s" \
	test "$rc" = 0 || cat "$WORK/pa.out"
check "  (20 clients reported ok)" test "$(grep -c "^ok .* seen=${MN_IP[n1]} " "$WORK/pa.out")" = 20
check "a new flow is masqueraded after the restart" \
	bash -c "ip netns exec $(mn_pod_ns pa) ${world[*]} probe $WORLD $PORT | grep -q 'tcp SEEN ${MN_IP[n1]} '"
finish
