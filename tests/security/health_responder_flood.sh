#!/usr/bin/env bash
# tests/security/health_responder_flood.sh - the attack: a pod on node n1
# opens thousands of TCP connections to its node's health responder (node
# address and health endpoint, [health] port) from 80 source addresses,
# never sends a request (to the node address: not a byte; to the health
# endpoint: the first byte of one), and opens each again as soon as the
# responder closes it, so it tries to hold every one of the responder's
# slots.
# The promise (issue 22): a pod cannot make its node look unreachable to
# the cluster. The responder takes a connection only once its request
# begins (TCP_DEFER_ACCEPT), keeps capacity for the known nodes'
# addresses, limits the connections per source and sheds idle ones, so
# node n2's HTTP probes of n1 keep succeeding, round after round, and
# `fibril health status` on n2 shows n1 reachable, while the attack runs.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/health_view.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api nodes health
HPORT=$((20000 + ($$ + 17) % 20000))
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
		--set nodes.retry=300ms --set health.interval=1000ms --set "health.port=$HPORT" ||
		{ fail "the agent of $n starts"; finish; }
done

# the attacker's pod: a namespace behind a veth of n1, 80 addresses of its own
POD=$MN_TAG-flood
ip netns add "$POD"
MN_NETNS_LIST+=("$POD")
ip -n "$POD" link set lo up
ip link add "${MN_TAG}fl0" netns "$(mn_ns n1)" type veth peer name eth0 netns "$POD"
ip -n "$(mn_ns n1)" addr add 10.99.0.1/24 dev "${MN_TAG}fl0"
ip -n "$(mn_ns n1)" link set "${MN_TAG}fl0" up
SRCS=()
for i in $(seq 10 89); do
	ip -n "$POD" addr add "10.99.0.$i/24" dev eth0
	SRCS+=("10.99.0.$i")
done
ip -n "$POD" link set eth0 up
ip -n "$POD" route add default via 10.99.0.1
ATTACKER=""
mn_test_cleanup() { [ -z "$ATTACKER" ] || kill -KILL "$ATTACKER" 2>/dev/null; }

ALL_T="['node-icmp', 'node-http', 'endpoint-icmp', 'endpoint-http']"
n1_ok() { QUIET=1 health_is n2 "all(tgt('n1', t)['reachable'] for t in $ALL_T)"; }
check "before the attack n2 reaches n1 on all four targets" wait_for 30 n1_ok ||
	{ health_is n2 False; finish; }
EP1=$(mn_json n2 /v1/health "next(p['endpoint_ip'] for p in j['peers'] if p['name'] == 'n1')")

# the pod holds 3,000 connections to n1's responder, half to its node
# address, half to its health endpoint, for 14 s
cp "$top_srcdir/tests/security/health_flood.py" "$WORK/flood.py"
ip netns exec "$POD" python3 "$WORK/flood.py" "${MN_IP[n1]}" "$HPORT" 1500 14 "$WORK/flood-node.json" \
	idle "${SRCS[@]:0:40}" &
ATTACKER=$!
ip netns exec "$POD" python3 "$WORK/flood.py" "$EP1" "$HPORT" 1500 14 "$WORK/flood-ep.json" \
	slow "${SRCS[@]:40:40}" &
ATTACKER2=$!
mn_test_cleanup() { kill -KILL "$ATTACKER" "$ATTACKER2" 2>/dev/null || true; }
# the pod's connections are up first (as the pod sees them)
held() { [ "$(ip netns exec "$POD" ss -Htn state established "( dport = :$HPORT )" | wc -l)" -ge "$1" ]; }
check "the pod holds thousands of connections established to n1's responder" wait_for 10 held 2100

# from now on, 8 rounds: n2's HTTP probes of n1 must not fail once
failed_now() { mn_json n2 /v1/health "next(p for p in j['peers'] if p['name'] == 'n1')['targets']['node-http']['failed'] + next(p for p in j['peers'] if p['name'] == 'n1')['targets']['endpoint-http']['failed']"; }
f0=$(failed_now)
rounds0=$(mn_json n2 /v1/health "j['rounds']")
rounds_past() { [ "$(mn_json n2 /v1/health "j['rounds']")" -ge "$1" ]; }
wait_for 20 rounds_past $((rounds0 + 8)) || true
f1=$(failed_now)
check "during the attack none of n2's HTTP probes of n1 failed in 8 rounds (failed $f0 -> $f1)" test "$f0" = "$f1"
check "  n2 sees n1's node-http and endpoint-http reachable" \
	health_is n2 "tgt('n1', 'node-http')['reachable'] and tgt('n1', 'endpoint-http')['reachable']"
rc=0; out=$("$CLI" -s "${MN_DIR[n2]}/fibril.sock" health status) || rc=$?
check "  fibril health status on n2 exits 0 and shows n1 ok" \
	eval '[ $rc = 0 ] && grep -Eq "^n1 +${MN_IP[n1]} +ok .* +ok .* $EP1 +ok .* +ok " <<<"$out"' ||
	sed 's/^/    | /' <<<"$out"
check "  n1 still reaches itself over HTTP" health_is n1 "tgt('n1', 'node-http')['reachable']"
check "  n1's responder gave the pod at most three quarters of its slots, refused or shed the rest" \
	health_is n1 "j['responder']['not_from_nodes'] <= j['responder']['max'] * 3 // 4 and j['responder']['refused'] + j['responder']['shed'] > 0"
wait "$ATTACKER" "$ATTACKER2" 2>/dev/null || true
ATTACKER=""
ATTACKER2=""
mn_test_cleanup() { :; }
read -r est conns < <(python3 -c 'import json,sys; d=[json.load(open(f)) for f in sys.argv[1:]]; print(sum(x["established_max"] for x in d), sum(x["connects"] for x in d))' \
	"$WORK/flood-node.json" "$WORK/flood-ep.json")
check "the attack was real: $conns connections made, $est established at once (>= 3000 made)" test "$conns" -ge 3000
check "n1's agent is still running" kill -0 "${MN_PID[n1]}"
finish
