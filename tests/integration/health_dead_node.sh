#!/usr/bin/env bash
# tests/integration/health_dead_node.sh - a node whose agent dies (issue
# 23), on four nodes (tests/lib/multinode.sh), probing every 1 s:
#   - n4 started first with a 1 h interval has never probed n1..n3: its
#     GET /v1/health says "unknown (not yet probed)" (reachable null), not
#     failing, and `fibril health status` there exits 0;
#   - kill -9 of n3's agent: n1 and n2 show it unreachable with since when
#     (GET /v1/health, `fibril health status` exits 1, `fibril node list`),
#     while their /readyz, /livez (the TCP listener the DaemonSet's probes
#     use) and /v1/healthz stay 200: another node's death is information,
#     never this agent's health; n2's agent restarted meanwhile turns ready;
#   - a pod record of n3 left in the kvstore leaves `fibril ipcache list`
#     (what is programmed) once n3 is deleted;
#   - n3's record deleted by an operator (its lease still runs): it goes at
#     once from the node list and the health view;
#   - n3 again with a 2 s lease, killed: when its lease expires its routes
#     go, but it stays in `fibril node list` (lost) and in the health view
#     as unreachable (status exits 1) until [nodes] lost-node-grace (8 s)
#     has passed, then it goes.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/health_view.sh"

mn_cluster_up 4 kvstore-etcd ipam-cluster-pool ipam-api nodes health
HPORT=$((20000 + ($$ + 23) % 20000))
TCP=127.0.0.1:9876 # each node's own loopback
GRACE_ARGS=(--set nodes.lost-node-grace=8s)
# start NAME LEASE-TTL-S INTERVAL [more agent args]
start() {
	mn_agent_start "$1" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.205.0.0/16 \
		--set nodes.retry=300ms --set "nodes.lease-ttl=$2s" "${GRACE_ARGS[@]}" \
		--set "health.interval=$3" --set "health.port=$HPORT" --set "agent.api-tcp-listen=$TCP" "${@:4}"
}
start n4 30 1h || { fail "the agent of n4 starts"; finish; }
# n3's lease outlives the checks below (a deliberate delete needs it)
for n in n1 n2 n3; do start $n 90 1000ms || { fail "the agent of $n starts"; finish; }; done
cli() { local n=$1; shift; "$CLI" -s "${MN_DIR[$n]}/fibril.sock" "$@"; }
tcp_code() { ip netns exec "$(mn_ns "$1")" curl -s -o /dev/null --max-time 5 -w '%{http_code}' "http://$TCP$2"; }
ALL_T="['node-icmp', 'node-http', 'endpoint-icmp', 'endpoint-http']"
all_ok() { QUIET=1 health_is "$1" "all(tgt(p, t)['reachable'] for p in ['n1', 'n2', 'n3', 'n4'] for t in $ALL_T) and not j['unreachable']"; }
for n in n1 n2; do
	check "$n sees the four nodes reachable" wait_for 30 all_ok $n || { health_is $n False; finish; }
done

# ---- never probed: unknown, not failing ----------------------------------------------------
check "n4 (1 h interval) has not probed n1..n3: unknown (not yet probed), reachable null, none unreachable" \
	health_is n4 "all(peer(p)['reachable'] is None and peer(p)['state'] == 'unknown (not yet probed)' and tgt(p, 'node-http')['reachable'] is None and tgt(p, 'node-http')['state'] == 'unknown' for p in ['n1', 'n2', 'n3']) and j['unreachable'] == []"
rc=0; out=$(cli n4 health status) || rc=$?
check "  fibril health status on n4 exits 0 and says unknown for n1" \
	eval '[ $rc = 0 ] && grep -Eq "^n1 +${MN_IP[n1]} +unknown +unknown " <<<"$out"' || sed 's/^/    | /' <<<"$out"

# ---- kill -9 of n3's agent -----------------------------------------------------------------
# a pod of n3 in the kvstore's ipcache (no lease: it outlives n3's record)
CIDR3=$(mn_json n1 /v1/nodes "[n for n in j['nodes'] if n['name'] == 'n3'][0]['pod-cidrs'][0]")
POD3=${CIDR3%.*}.77
mn_etcdctl put "/fibril/state/ip/v1/default/$POD3" \
	"{\"IP\":\"$POD3\",\"HostIP\":\"${MN_IP[n3]}\",\"ID\":300,\"Node\":\"n3\",\"K8sNamespace\":\"default\",\"K8sPodName\":\"p3\"}" >/dev/null
check "n1's fibril ipcache list has n3's pod $POD3" wait_for 10 eval 'grep -Eq "^$POD3/32 +300 .* yes$" <<<"$(cli n1 ipcache list)"'
mn_agent_kill n3 KILL
killed=$(date +%s)
n3_down() { QUIET=1 health_is "$1" "not peer('n3')['reachable'] and j['unreachable'] == ['n3'] and peer('n3')['state'] == 'unreachable' and $killed - 2 <= peer('n3')['since_unix'] <= $killed + 5 and j['unreachable_since']['n3'] == peer('n3')['since_unix']"; }
for n in n1 n2; do
	check "$n shows n3 unreachable since its death" wait_for 5 n3_down $n || health_is $n False
done
rc=0; out=$(cli n1 health status) || rc=$?
check "  fibril health status on n1 exits 1, n3 unreachable since when" \
	eval '[ $rc = 1 ] && grep -q "^Unreachable: n3$" <<<"$out" && grep -Eq "^  n3 unreachable since [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z \([0-9]+s\)$" <<<"$out"' ||
	sed 's/^/    | /' <<<"$out"
check "  fibril node list on n1: n3 up, not reachable, since a few seconds" \
	eval 'cli n1 node list | grep -Eq "^n3 .* up +[0-9]+s +no$"' || cli n1 node list
# ready_all NODE: /readyz, /livez (TCP) and /v1/healthz all 200
ready_all() {
	[ "$(tcp_code "$1" /readyz)" = 200 ] && [ "$(tcp_code "$1" /livez)" = 200 ] &&
		[ "$(mn_api "$1" -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200 ]
}
rounds() { mn_json "$1" /v1/health "j['rounds']"; }
rounds_past() { [ "$(rounds "$1")" -ge "$2" ]; }
for n in n1 n2; do
	r0=$(rounds $n)
	ok=0
	for _ in 1 2 3; do # three rounds with n3 unreachable
		ready_all $n || ok=1
		wait_for 5 rounds_past $n $((r0 += 1)) || true
	done
	check "$n stays ready and live for three rounds while n3 is unreachable (readyz $(tcp_code $n /readyz), livez $(tcp_code $n /livez))" test $ok = 0 ||
		mn_api $n http://x/v1/healthz
done
# the DaemonSet's probes, as deploy/kubernetes/fibril.yaml has them
probes=$(grep -A1 -E '^ +(startup|liveness|readiness)Probe:' "$top_srcdir/deploy/kubernetes/fibril.yaml" |
	grep -o 'path: /[a-z]*' | awk '{print $2}' | tr '\n' ' ')
codes=""
for path in $probes; do codes="$codes$(tcp_code n1 "$path") "; done
check "the DaemonSet's startup, liveness and readiness probes ($probes) answer 200 on n1 ($codes)" \
	eval '[ -n "$probes" ] && [ "$codes" = "$(for _ in $probes; do printf "200 "; done)" ]'
mn_agent_kill n2 TERM
MN_START_NOWAIT=1 start n2 30 1000ms
check "n2's agent restarted while n3 is unreachable turns ready (startup probe: /readyz)" \
	wait_for 20 eval '[ "$(tcp_code n2 /readyz)" = 200 ]'
check "  it sees n3 unreachable" wait_for 5 health_is n2 "j['unreachable'] == ['n3'] and peer('n3')['state'] == 'unreachable'"
check "  and stays ready" ready_all n2

# ---- an operator deletes n3's record (its lease still runs) ----------------------------------
mn_etcdctl del /fibril/state/nodes/v1/n3 >/dev/null
gone() { ! cli "$1" node list | grep -q "^n3 " && QUIET=1 health_is "$1" "all(p['name'] != 'n3' for p in j['peers'])"; }
for n in n1 n2; do
	check "n3's record deleted: it leaves $n's node list and health view" wait_for 5 gone $n
done
check "  fibril health status on n1 exits 0 again" cli n1 health status >/dev/null
check "  n3's pod left n1's fibril ipcache list (what is programmed)" \
	wait_for 3 eval '! cli n1 ipcache list | grep -q "^$POD3/"'
check "  while the kvstore still holds it, and --all shows it not programmed" \
	eval '[ -n "$(mn_etcdctl get --print-value-only /fibril/state/ip/v1/default/$POD3)" ] && cli n1 ipcache list --all | grep -Eq "^$POD3/32 .* no$"'

# ---- its lease expires: lost, kept until the grace period passes ------------------------------------
start n3 2 1000ms || fail "the agent of n3 starts with a 2 s lease"
check "n1 reaches n3 again" wait_for 15 all_ok n1
mn_agent_kill n3 KILL
routed3() { ip -n "$(mn_ns n1)" route show proto 242 | grep -q "^$CIDR3 "; }
check "n3's lease expires: n1's route to its pod CIDR goes" wait_for 10 eval '! routed3'
lost_at=$SECONDS
check "  n3 stays in n1's node list, lost, not routed, not reachable" \
	eval 'cli n1 node list | grep -Eq "^n3 .* kvstore .* no +lost +[0-9]+s +no$"' || cli n1 node list
rc=0; out=$(cli n1 health status) || rc=$?
check "  and fibril health status on n1 exits 1 naming n3 unreachable" \
	eval '[ $rc = 1 ] && grep -q "^Unreachable: n3$" <<<"$out"' || sed 's/^/    | /' <<<"$out"
check "  GET /v1/nodes says since when it is lost" \
	eval '[ "$(mn_json n1 /v1/nodes "[n[\"lost\"] and n[\"lost-since\"] > 0 and not n[\"routed\"] for n in j[\"nodes\"] if n[\"name\"] == \"n3\"]")" = "[True]" ]'
check "after the grace period (8 s) n3 goes from n1's node list and health view" wait_for 15 gone n1
echo "  gone $((SECONDS - lost_at)) s after its routes went"
check "  fibril health status on n1 exits 0" cli n1 health status >/dev/null
finish
