#!/usr/bin/env bash
# tests/integration/health_ipv6.sh - the health module on two dual-stack
# nodes (tests/lib/multinode.sh with an IPv6 underlay, MN_UNDERLAY_PREFIX6;
# ipam-cluster-pool with an IPv4 and an IPv6 pool, so each node has a pod
# CIDR of each family and a health endpoint in each), probing every 1 s:
# each node reaches each node over both families on all eight targets
# (ICMP and HTTP to the node address and to the health endpoint, IPv4 and
# IPv6; n1 over unprivileged ICMP datagram sockets, n2 over raw ones), the
# responder listens on the IPv6 addresses, /v1/health and
# `fibril health status` show the IPv6 addresses and the result per family.
# Then n2's IPv6 node address is removed from its underlay link -> n1
# shows n2's IPv6 targets unreachable within two intervals while its IPv4
# ones stay reachable, /v1/status names the IPv6 targets (healthz stays
# 200: information, not n1's health), `fibril node list`
# says "no (ipv6)"; the address back -> reachable again.
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_PREFIX6=fd31:$(printf '%x' $(($$ % 65536)))::
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/health_view.sh"

MODS="kvstore-etcd ipam-cluster-pool ipam-api nodes health"
# shellcheck disable=SC2086
mn_cluster_up 2 $MODS
# n1 probes over unprivileged ICMP datagram sockets (root's group may open
# them there), n2 over raw sockets: both kinds, both families
ip netns exec "$(mn_ns n1)" sysctl -qw net.ipv4.ping_group_range="0 0"
INTERVAL_MS=1000
HPORT=$((20000 + ($$ + 13) % 20000))
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16 \
		--set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd10:203::/104 \
		--set ipam-cluster-pool.cluster-pool-ipv6-mask-size=120 \
		--set nodes.retry=300ms --set nodes.lease-ttl=30s --set "health.interval=${INTERVAL_MS}ms" \
		--set "health.port=$HPORT" || { fail "the agent of $n starts"; finish; }
done

V4="['node-icmp', 'node-http', 'endpoint-icmp', 'endpoint-http']"
V6="['node-icmp6', 'node-http6', 'endpoint-icmp6', 'endpoint-http6']"
all_ok() { QUIET=1 health_is "$1" "all(tgt(p, t)['reachable'] for p in ['n1', 'n2'] for t in $V4 + $V6) and not j['unreachable']"; }

for n in n1 n2; do
	check "$n reaches both nodes on all eight targets (IPv4 and IPv6)" wait_for 30 all_ok $n ||
		{ health_is $n False; finish; }
done
EP6=$(mn_json n2 /v1/health "j['endpoint_ip6']")
check "n1 probes over datagram ICMP sockets, n2 over raw ones" \
	eval '[ "$(mn_json n1 /v1/health "j[\"icmp_socket\"]")" = datagram ] && [ "$(mn_json n2 /v1/health "j[\"icmp_socket\"]")" = raw ]'
check "n2's IPv6 health endpoint $EP6 is in its IPv6 pod CIDR, on its loopback" \
	eval '[[ $EP6 == fd10:203::* ]] && grep -q "inet6 $EP6/128" <<<"$(ip -n "$(mn_ns n2)" -6 addr show dev lo)"' ||
	ip -n "$(mn_ns n2)" -6 addr show dev lo
check "n2's responder listens on its IPv6 node address and endpoint" \
	eval 'ss=$(ip netns exec "$(mn_ns n2)" ss -Hltn "sport = :$HPORT");
	grep -q "\[${MN_IP6[n2]}\]:$HPORT" <<<"$ss" && grep -q "\[$EP6\]:$HPORT" <<<"$ss"'
check "n1 knows n2's IPv6 node address and endpoint, both families reachable" \
	health_is n1 "peer('n2')['node_ip6'] == '${MN_IP6[n2]}' and peer('n2')['endpoint_ip6'] == '$EP6' and peer('n2')['families'] == {'ipv4': peer('n2')['families']['ipv4'], 'ipv6': peer('n2')['families']['ipv6']} and peer('n2')['families']['ipv4']['reachable'] and peer('n2')['families']['ipv6']['reachable']"
check "  IPv6 latencies: last, p50 <= p99" \
	health_is n1 "all(0 < tgt('n2', t)['p50_ms'] <= tgt('n2', t)['p99_ms'] and tgt('n2', t)['last_ms'] > 0 for t in $V6)"
rc=0; out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" health status) || rc=$?
check "fibril health status: an IPv4 and an IPv6 row for n2" \
	eval '[ $rc = 0 ] && grep -Eq "^n2 +${MN_IP[n2]} +ok .* ok .* ok .* ok " <<<"$out" &&
	grep -Eq "^n2 +${MN_IP6[n2]} +ok [0-9.]+/[0-9.]+/[0-9.]+ +ok .* $EP6 +ok .* ok " <<<"$out"' || echo "$out"
mn_api n1 http://x/metrics >"$WORK/metrics.txt"
check "/metrics: n2's IPv6 targets reachable, ICMPv6 probes counted" \
	eval 'grep -q "^fibril_health_node_reachable{peer=\"n2\",target=\"node-http6\"} 1$" "$WORK/metrics.txt" &&
	grep -Eq "^fibril_health_probes_total\{target=\"node-icmp6\",result=\"ok\"\} [1-9]" "$WORK/metrics.txt"'

# ---- n2's IPv6 path breaks ----------------------------------------------------------------------
ip -n "$(mn_ns n2)" addr del "${MN_IP6[n2]}/64" dev eth0
v6_down() { QUIET=1 health_is n1 "not any(tgt('n2', t)['reachable'] for t in $V6) and all(tgt('n2', t)['reachable'] for t in $V4) and not peer('n2')['families']['ipv6']['reachable'] and peer('n2')['families']['ipv4']['reachable']"; }
check "n2's IPv6 address gone: n1 shows n2's four IPv6 targets unreachable within two intervals, IPv4 still reachable" \
	wait_for 3 v6_down || health_is n1 False
hz=$(mn_api n1 -w ' %{http_code}' http://x/v1/healthz)
check "  n1's healthz stays 200 (information, not n1's health)" eval 'grep -q " 200$" <<<"$hz"' || echo "$hz"
check "  GET /v1/status names n2's IPv6 targets" \
	contains "$(mn_api n1 http://x/v1/status)" "n2 (node-icmp6, node-http6, endpoint-icmp6, endpoint-http6)"
rc=0; out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" health status) || rc=$?
check "  fibril health status exits 1: the IPv4 row ok, the IPv6 row FAIL" \
	eval '[ $rc = 1 ] && grep -Eq "^n2 +${MN_IP[n2]} +ok " <<<"$out" && grep -Eq "^n2 +${MN_IP6[n2]} +FAIL" <<<"$out"'
sed 's/^/    | /' <<<"$out" # the view, for the log
"$CLI" -s "${MN_DIR[n1]}/fibril.sock" node list | sed 's/^/    | /'
check "  fibril node list on n1 says \"no (ipv6)\" for n2" \
	wait_for 3 eval 'grep -Eq "^n2 .* no \(ipv6\)$" <<<"$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" node list)"'
ip -n "$(mn_ns n2)" addr add "${MN_IP6[n2]}/64" dev eth0 nodad
check "n2's IPv6 address back: all eight targets reachable again" wait_for 5 all_ok n1 || health_is n1 False
check "  and fibril node list says yes" \
	wait_for 3 eval 'grep -Eq "^n2 .* yes$" <<<"$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" node list)"'

mn_agent_kill n2 TERM
check "a stopped agent takes its IPv6 endpoint address off its loopback" \
	eval '! grep -q "inet6 $EP6/128" <<<"$(ip -n "$(mn_ns n2)" -6 addr show dev lo)"'
check "n2's agent stopped cleanly (no sanitizer report in its log)" eval '! grep -q "Sanitizer" "${MN_DIR[n2]}/agent.log"'

finish
