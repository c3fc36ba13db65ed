#!/usr/bin/env bash
# tests/integration/health.sh - the health module on three nodes
# (tests/lib/multinode.sh: a network namespace per node with its own agent,
# one etcd on the underlay bridge), probing every 1 s: each node sees every
# node (itself too) reachable over ICMP and HTTP, at its node address and
# at its health endpoint (the last address of its pod CIDR, on the node's
# loopback), with latencies and the connectivity matrix (rows from the
# peers); `fibril health status` and /metrics show it. Then n3's agent is
# stopped (SIGSTOP: the kernel still answers ICMP, its responder does not)
# -> n1 and n2 show n3's HTTP targets unreachable within two intervals,
# their status names n3 (as information: their healthz stays 200), and all
# is well again within two intervals of SIGCONT; n3 ignoring echo requests (its namespace's
# icmp_echo_ignore_all) -> the ICMP targets fail the same way. `fibril
# node list` shows each node's reachability (the health module's bus topic
# health.node, read by the nodes module). A stopped agent takes its
# endpoint address off its loopback; once its node record is gone, n1's
# /metrics (parsed with prometheus_client) has no series of n3 left.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/health_view.sh"

prometheus_python
mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api nodes health
INTERVAL_MS=1000
HPORT=$((20000 + ($$ + 11) % 20000))
start() {
	mn_agent_start "$1" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.202.0.0/16 \
		--set nodes.retry=300ms --set nodes.lease-ttl=30s --set "health.interval=${INTERVAL_MS}ms" \
		--set "health.port=$HPORT"
}
for n in n1 n2 n3; do start $n || { fail "the agent of $n starts"; finish; }; done

health_json() { mn_api "$1" http://x/v1/health; }
# elapsed_until SECONDS CMD... : poll CMD; prints the seconds it took
elapsed_until() {
	local limit=$1 t0 us
	shift
	t0=$(now_us)
	QUIET=1 wait_for "$limit" "$@" || { echo "timeout"; return 1; }
	us=$(($(now_us) - t0))
	printf '%d.%02d\n' $((us / 1000000)) $((us % 1000000 / 10000))
}
ALL_T="['node-icmp', 'node-http', 'endpoint-icmp', 'endpoint-http']"
all_ok() { QUIET=1 health_is "$1" "len(j['peers']) == 3 and all(tgt(p, t)['reachable'] for p in ['n1', 'n2', 'n3'] for t in $ALL_T) and not j['unreachable']"; }

for n in n1 n2 n3; do
	check "$n sees the three nodes reachable on all four targets" wait_for 30 all_ok $n ||
		{ health_is $n False; finish; }
done
EP3=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["endpoint_ip"])' "$(health_json n3)")
check "n3's health endpoint $EP3 is the last address of its pod CIDR, on its loopback" \
	grep -q "inet $EP3/32" <<<"$(ip -n "$(mn_ns n3)" addr show dev lo)"
check "n1 knows n3's endpoint address and node address" \
	health_is n1 "peer('n3')['endpoint_ip'] == '$EP3' and peer('n3')['node_ip'] == '${MN_IP[n3]}'"
check "latency: last, p50 and p99 per target, p50 <= p99" \
	health_is n1 "all(0 < tgt('n2', t)['p50_ms'] <= tgt('n2', t)['p99_ms'] and tgt('n2', t)['last_ms'] > 0 for t in $ALL_T)"
check "the matrix on n1 has the rows n2 and n3 reported, all reachable" \
	wait_for 5 health_is n1 "all(j['matrix']['rows'][f] == {'n1': True, 'n2': True, 'n3': True} for f in ['n1', 'n2', 'n3'])"
rc=0; out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" health status) || rc=$?
check "fibril health status exits 0 and lists n3 with its addresses" \
	eval '[ $rc = 0 ] && grep -Eq "^n3 +${MN_IP[n3]} +ok [0-9.]+/[0-9.]+/[0-9.]+ +ok .* $EP3 +ok" <<<"$out"'
check "  and prints the matrix" grep -Eq "^n2 +ok +ok +ok$" <<<"$out"
nodelist() { "$CLI" -s "${MN_DIR[$1]}/fibril.sock" node list; }
reach_col() { nodelist "$1" | awk -v n="$2" '$1 == n { print $NF }'; }
node_reach_is() { [ "$(reach_col "$1" "$2")" = "$3" ]; }
all_reach_n1() {
	node_reach_is n1 n1 yes && node_reach_is n1 n2 yes && node_reach_is n1 n3 yes &&
		grep -q "REACHABLE$" <<<"$(nodelist n1)"
}
check "fibril node list on n1: REACHABLE yes for n1, n2 and n3" wait_for 5 all_reach_n1 ||
	nodelist n1
check "  GET /v1/nodes has n3's health" eval '[ "$(mn_json n1 /v1/nodes "[n[\"health\"][\"reachable\"] for n in j[\"nodes\"] if n[\"name\"] == \"n3\"]")" = "[True]" ]'
check "fibril health still prints ok" test "$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" health)" = ok
rc=0; err=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" health frob 2>&1) || rc=$?
check "fibril health frob: a usage error naming it" eval '[ $rc = 2 ] && grep -q "unknown subcommand .frob." <<<"$err"'
mn_api n1 http://x/metrics >"$WORK/metrics.txt"
check "/metrics: n3's targets reachable, probes counted, RTT histogram" \
	eval 'grep -q "^fibril_health_node_reachable{peer=\"n3\",target=\"node-http\"} 1$" "$WORK/metrics.txt" &&
	grep -Eq "^fibril_health_probes_total\{target=\"endpoint-icmp\",result=\"ok\"\} [1-9]" "$WORK/metrics.txt" &&
	grep -Eq "^fibril_health_probe_rtt_seconds_count\{target=\"node-http\"\} [1-9]" "$WORK/metrics.txt" &&
	grep -q "^fibril_health_nodes{state=\"reachable\"} 3$" "$WORK/metrics.txt"'

# ---- n3's responder stops answering --------------------------------------------------------
kill -STOP "${MN_PID[n3]}"
n3_http_down() { health_is "$1" "not tgt('n3', 'node-http')['reachable'] and not tgt('n3', 'endpoint-http')['reachable'] and j['unreachable'] == ['n3']"; }
LIMIT=$(python3 -c "print(2 * $INTERVAL_MS / 1000 + 1)") # two intervals, and a second of polling on a busy machine
r1=0; t1=$(elapsed_until "$LIMIT" n3_http_down n1) || r1=$?
r2=0; t2=$(elapsed_until "$LIMIT" n3_http_down n2) || r2=$?
check "n1 shows n3's HTTP targets unreachable within two intervals (${t1}s)" test $r1 = 0
check "n2 too (${t2}s from n1's)" test $r2 = 0
check "  ICMP to n3's stack still answers (the kernel does)" \
	health_is n1 "tgt('n3', 'node-icmp')['reachable'] and tgt('n3', 'endpoint-icmp')['reachable'] and 'HTTP' in tgt('n3', 'node-http')['error']"
check "  n1 and n2 still reach each other" health_is n1 "peer('n2')['reachable']"
hz=$(mn_api n1 -w ' %{http_code}' http://x/v1/healthz)
check "n1's healthz stays 200: another node's reachability is information, not n1's health" \
	eval 'grep -q " 200$" <<<"$hz"' || echo "  $hz"
check "  GET /v1/status names n3 in the health module's connectivity component" \
	contains "$(mn_api n1 http://x/v1/status)" "1 of 3 nodes unreachable (information, see GET /v1/health): n3 (node-http, endpoint-http)"
rc=0; out=$("$CLI" -s "${MN_DIR[n2]}/fibril.sock" health status) || rc=$?
check "fibril health status on n2 exits 1 and says n3 is unreachable" \
	eval '[ $rc = 1 ] && grep -q "^Unreachable: n3$" <<<"$out" && grep -Eq "^n3 .*FAIL: no HTTP answer" <<<"$out"'
check "  the matrix row of n2 says FAIL for n3" grep -Eq "^n2 +ok +ok +FAIL$" <<<"$out"
check "  and n3's row is unknown while it does not answer" grep -Eq "^n3 +- +- +-$" <<<"$out"
sed 's/^/    | /' <<<"$out" # the view, for the log
mn_api n1 http://x/metrics >"$WORK/metrics.txt"
check "/metrics: n3's node-http is 0, one node unreachable" \
	eval 'grep -q "^fibril_health_node_reachable{peer=\"n3\",target=\"node-http\"} 0$" "$WORK/metrics.txt" &&
	grep -q "^fibril_health_nodes{state=\"unreachable\"} 1$" "$WORK/metrics.txt"'
check "fibril node list on n1: n3 not reachable, n2 still is" eval 'node_reach_is n1 n3 no && node_reach_is n1 n2 yes' ||
	nodelist n1
check "n1's log names n3 unreachable" grep -q 'unreachable: n3 (node-http, endpoint-http)' "${MN_DIR[n1]}/agent.log"
kill -CONT "${MN_PID[n3]}"
back() { QUIET=1 all_ok "$1"; }
r1=0; t1=$(elapsed_until "$LIMIT" back n1) || r1=$?
check "n1 shows n3 reachable again within two intervals of SIGCONT (${t1}s)" test $r1 = 0
check "  and its healthz is 200 again" test "$(mn_api n1 -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200
check "  n2 too" wait_for 3 back n2
check "  and fibril node list says yes for n3 again" wait_for 3 node_reach_is n1 n3 yes

# ---- n3's kernel stops answering echo requests -----------------------------------------------------
ip netns exec "$(mn_ns n3)" sysctl -qw net.ipv4.icmp_echo_ignore_all=1
n3_icmp_down() { health_is "$1" "not tgt('n3', 'node-icmp')['reachable'] and not tgt('n3', 'endpoint-icmp')['reachable'] and tgt('n3', 'node-http')['reachable']"; }
r1=0; t1=$(elapsed_until "$LIMIT" n3_icmp_down n1) || r1=$?
check "n3 ignoring echo requests: n1 shows its ICMP targets unreachable within two intervals (${t1}s)" test $r1 = 0
check "  with the reason" health_is n1 "tgt('n3', 'node-icmp')['error'] == 'no echo reply within the interval'"
ip netns exec "$(mn_ns n3)" sysctl -qw net.ipv4.icmp_echo_ignore_all=0
check "  and reachable again after" wait_for 5 back n1

# ---- a node leaves ---------------------------------------------------------------------------------
mn_agent_kill n3 TERM
check "n3's agent stopped cleanly (no sanitizer report in its log)" eval '! grep -q "Sanitizer" "${MN_DIR[n3]}/agent.log"'
check "a stopped agent takes its health endpoint address off its loopback" \
	eval '! grep -q "inet $EP3/32" <<<"$(ip -n "$(mn_ns n3)" addr show dev lo)"'
# n3_series NODE: how many samples of the node's /metrics name peer n3 (the
# exposition parsed by prometheus_client)
n3_series() {
	mn_api "$1" http://x/metrics >"$WORK/m-$1.txt" || return 1
	"$PY" - "$WORK/m-$1.txt" <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(open(sys.argv[1]).read()))
assert any(f.name == "fibril_health_node_reachable" for f in fams), "no health family"
print(sum(1 for f in fams for s in f.samples if s.labels.get("peer") == "n3"))
PY
}
n3_gone() { [ "$(n3_series "$1")" = 0 ]; }
before=$(n3_series n1) || before=error
before2=$(n3_series n2) || before2=error
check "n3 stopped but its record still held (lease TTL 30 s): n1 and n2 still have n3's series ($before, $before2)" \
	eval '[ "$before" -ge 8 ] && [ "$before2" -ge 8 ]'
# delete n3's record as an operator would (or its lease would expire)
mn_etcdctl del /fibril/state/nodes/v1/n3 >/dev/null
check "n1's node list no longer has n3" wait_for 10 eval '! grep -q "^n3 " <<<"$(nodelist n1)"'
check "n1's /metrics has no series of n3 left" wait_for 5 n3_gone n1
check "  n2's neither" wait_for 5 n3_gone n2
check "  n1's series of n2 stay" eval '[ "$(grep -c "peer=\"n2\"" "$WORK/m-n1.txt")" -ge 4 ]'

finish
