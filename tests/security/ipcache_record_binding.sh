#!/usr/bin/env bash
# tests/security/ipcache_record_binding.sh - the attack: anyone who can
# write the kvstore's ipcache (state/ip/v1/default/<ip>; every node's agent
# can) puts records that would redirect or relabel traffic on every node:
# an address outside every pod CIDR (192.0.2.7), another node's pod address
# claimed by a third node, a record whose HostIP is not its node's, one
# with the reserved identity host (1), one with an identity of the local
# CIDR range (2^24 + 1).
# The promise: a remote ipcache entry is accepted only when its IP lies in
# the pod CIDRs of the node it names, its HostIP is that node's and its
# identity is a cluster-allocated one (256 .. 2^24-1); a hostile record is
# refused (a log line naming the key and what was wrong, records-refused
# counted) and never reaches the victim's datapath ipcache; a good record
# still does.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.201.0.0/16 --set nodes.retry=300ms)
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of $n starts"; finish; }
done
P=$MN_UNDERLAY_PREFIX
# a third node known through its registry record alone (no agent)
mn_etcdctl put /fibril/state/nodes/v1/n3 \
	'{"name":"n3","ipv4":"'"$P"'.13","pod-cidrs":["10.201.200.0/24"],"tunnel-endpoint":"'"$P"'.13","updated":1}' >/dev/null
n3_routed() { [ "$(mn_json n1 /v1/nodes "any(n['name'] == 'n3' and n['routed'] for n in j['nodes'])")" = True ]; }
check "n1 knows and routes n2" wait_for 15 mn_routes_all n1
check "n1 knows and routes n3" wait_for 10 n3_routed
CIDR2=$(mn_json n1 /v1/nodes "[n for n in j['nodes'] if n['name'] == 'n2'][0]['pod-cidrs'][0]")
B2=${CIDR2%.0/*} # n2's pod CIDR's first three bytes
ipcache() { "$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump dp_ipcache 2>&1; }
refused() { mn_json n1 /v1/ipcache "j['metrics'].get('records-refused', 0)"; }
REFUSED0=$(refused)

# rec IP NODE HOSTIP ID
rec() {
	mn_etcdctl put "/fibril/state/ip/v1/default/$1" \
		'{"IP":"'"$1"'","HostIP":"'"$3"'","ID":'"$4"',"Node":"'"$2"'","K8sNamespace":"default","K8sPodName":"x"}' >/dev/null
}
declare -A WHAT=(
	[192.0.2.7]="an outside address"
	[$B2.77]="n2's pod address claimed by n3"
	[$B2.78]="a HostIP that is not its node's"
	[$B2.79]="identity host (1)"
	[$B2.80]="an identity of the CIDR range (2^24 + 1)"
)
rec 192.0.2.7 n2 "${MN_IP[n2]}" 300
rec "$B2.77" n3 "$P.13" 300
rec "$B2.78" n2 "$P.13" 300
rec "$B2.79" n2 "${MN_IP[n2]}" 1
rec "$B2.80" n2 "${MN_IP[n2]}" 16777217
rec "$B2.81" n2 "${MN_IP[n2]}" 300 # a good one, after them: once it is in, they were seen
good_in() { grep -Eq "^$B2\.81/32 +identity=300 " <<<"$(ipcache)"; }
check "a good record ($B2.81 of n2, identity 300) reaches n1's ipcache" wait_for 10 good_in
IPC=$(ipcache)
for ip in "${!WHAT[@]}"; do
	check "${WHAT[$ip]} ($ip): not in n1's ipcache" bash -c '! grep "^$1/32 " <<<"$2"' _ "$ip" "$IPC"
	check "  refused with a log line naming the key" \
		grep -Eq "nodes: ipcache key state/ip/v1/default/$ip \(revision [0-9]+\): .*; refused" "${MN_DIR[n1]}/agent.log"
done
grep "; refused" "${MN_DIR[n1]}/agent.log" | sed 's/^/  log: /' || true
check "the refusals are counted (records-refused)" test "$(refused)" -ge $((REFUSED0 + ${#WHAT[@]}))
finish
