#!/usr/bin/env bash
# tests/security/node_record_hijack.sh - the attack: anyone who can write
# the kvstore's node registry (any node's agent holds those credentials)
# puts node records that would take over the cluster's routing: pod CIDR
# 0.0.0.0/0 (and ::/0), a prefix shorter than the minimum (10.0.0.0/7), a
# CIDR overlapping this node's own pod CIDR, one overlapping another node's,
# one overlapping a connected network (the underlay), this node's IP as the
# record's IP, another known node's IP under a different name, and this
# node's IP as the tunnel endpoint.
# The promise: such a record is refused whole on the victim node: nothing
# installed (the routes of proto 242 and the datapath's ipcache exactly as
# before), the node not known, one log line naming the node and what was
# wrong, counted (records-refused); a good record still goes in.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.201.0.0/16 --set nodes.retry=300ms)
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of $n starts"; finish; }
done
for n in n1 n2; do check "$n knows and routes the other" wait_for 15 mn_routes_all "$n"; done
CIDR1=$(mn_json n1 /v1/nodes "[n for n in j['nodes'] if n['name'] == 'n1'][0]['pod-cidrs'][0]")
CIDR2=$(mn_json n1 /v1/nodes "[n for n in j['nodes'] if n['name'] == 'n2'][0]['pod-cidrs'][0]")
routes() { ip -n "$(mn_ns n1)" route show proto 242 | sed 's/ *$//' | sort; }
# the entries, sorted (not the dump's "N entries" line)
ipcache() { "$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump dp_ipcache 2>&1 | grep -Ev '^[0-9]+ entries$' | sort; }
refused() { mn_json n1 /v1/nodes "j['metrics'].get('records-refused', 0)"; }
# same WANT GOT : equal, else the difference printed
same() { [ "$1" = "$2" ] && return 0; diff <(echo "$1") <(echo "$2") | sed 's/^/  /'; return 1; }
ROUTES0=$(routes)
IPC0=$(ipcache)
REFUSED0=$(refused)

# record NAME IPV4 CIDR-LIST [TUNNEL-ENDPOINT]
record() {
	mn_etcdctl put "/fibril/state/nodes/v1/$1" \
		'{"name":"'"$1"'","ipv4":"'"$2"'","pod-cidrs":['"$3"'],"tunnel-endpoint":"'"${4:-$2}"'","updated":1}' >/dev/null
}
P=$MN_UNDERLAY_PREFIX
HOSTILE=(h-default h-default6 h-short h-own h-other h-underlay h-selfip h-otherip h-selftep)
record h-default "$P.91" '"0.0.0.0/0"'
record h-default6 "$P.92" '"10.250.2.0/24","::/0"'
record h-short "$P.93" '"10.0.0.0/7"'
record h-own "$P.94" "\"$CIDR1\""
record h-other "$P.95" "\"$CIDR2\""
record h-underlay "$P.96" "\"$P.128/25\""
record h-selfip "${MN_IP[n1]}" '"10.250.7.0/24"'
record h-otherip "${MN_IP[n2]}" '"10.250.8.0/24"'
record h-selftep "$P.99" '"10.250.9.0/24"' "${MN_IP[n1]}"
# a good record after them: once it is routed, the hostile ones were seen
record ok-node "$P.90" '"10.250.10.0/24"'
ok_routed() { [ "$(mn_json n1 /v1/nodes "any(n['name'] == 'ok-node' and n['routed'] for n in j['nodes'])")" = True ]; }
check "a good record is still accepted and routed" wait_for 10 ok_routed

want_routes=$(printf '%s\n%s\n' "$ROUTES0" "10.250.10.0/24 via $P.90 dev eth0" | sed '/^$/d' | sort)
check "the victim's routes are the ones before plus the good node's" same "$want_routes" "$(routes)"
ipc_now=$(ipcache | grep -v -e '^10\.250\.10\.0/24 ' -e "^$P\.90/32 ")
check "the victim's ipcache holds nothing of the hostile records (as before but the good node)" \
	same "$IPC0" "$ipc_now"
for h in "${HOSTILE[@]}"; do
	check "$h is not a known node" test "$(mn_json n1 /v1/nodes "any(n['name'] == '$h' for n in j['nodes'])")" = False
	check "$h: one log line naming the node, refused" \
		test "$(grep -c "nodes: node $h refused: " "${MN_DIR[n1]}/agent.log")" -ge 1
done
grep "refused: " "${MN_DIR[n1]}/agent.log" | sed 's/^/  log: /' || true
check "the refusals are counted (records-refused)" \
	test "$(refused)" -ge $((REFUSED0 + ${#HOSTILE[@]}))
check "n1's own pod CIDR is still its own" test "$(routes | grep -c "^$CIDR1 ")" = 0
finish
