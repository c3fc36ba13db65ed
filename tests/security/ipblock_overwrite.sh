#!/usr/bin/env bash
# tests/security/ipblock_overwrite.sh - the attack: a tenant's
# NetworkPolicy whose ipBlock CIDRs are exactly the cluster's own ipcache
# prefixes (a node's IP /32, its pod CIDR, a local pod's /32 and a remote
# pod's /32), created on every node and then deleted. Before the ipcache
# had owners the policy's CIDR identities overwrote those entries (the
# last writer won) and its deletion removed them, on every node.
# The promise: the ipcache keeps a claim per source for each prefix and
# writes the winner (local endpoint > remote endpoint > node > CIDR
# policy); a CIDR policy's claim never replaces a higher one and its
# removal only takes its own claim: with the policy in place and after its
# deletion, the node and pod entries of every node are exactly as before
# (a prefix the policy alone names gets its CIDR identity and loses it).
# Also: CIDR identities are handed out again once released (the same policy
# imported again reuses the numbers of the first import), and one
# namespace's policies may name at most [policy]
# cidr-identities-per-namespace prefixes (256 by default): a policy past it
# is refused whole, naming the namespace.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.205.0.0/16 --set nodes.retry=300ms)
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of $n starts"; finish; }
done
for n in n1 n2; do check "$n knows and routes the other" wait_for 15 mn_routes_all "$n"; done
mn_pod_add n1 pa || { fail "a pod on n1"; finish; }
mn_pod_add n2 pb || { fail "a pod on n2"; finish; }
cidr_of() { mn_json n1 /v1/nodes "[n for n in j['nodes'] if n['name'] == '$1'][0]['pod-cidrs'][0]"; }
CIDR1=$(cidr_of n1)
CIDR2=$(cidr_of n2)
ipcache() { "$CLI" -s "${MN_DIR[$1]}/fibril.sock" map dump dp_ipcache 2>&1; }
has() { grep -q "^$2 " <<<"$(ipcache "$1")"; }
check "n1's ipcache has pb (${MN_POD_IP[pb]}/32)" wait_for 10 has n1 "${MN_POD_IP[pb]}/32"
check "n2's ipcache has pa (${MN_POD_IP[pa]}/32)" wait_for 10 has n2 "${MN_POD_IP[pa]}/32"
PREFIXES=("${MN_IP[n1]}/32" "${MN_IP[n2]}/32" "${MN_POD_IP[pa]}/32" "${MN_POD_IP[pb]}/32" "$CIDR1" "$CIDR2")
# entries NODE [PREFIX...] : NODE's entries of the cluster's own prefixes
# (those it has; a node has no entry of its own pod CIDR, where the policy's
# CIDR identity is free to go: its pods' own /32s win there), or of PREFIX...
entries() {
	local node=$1 all p
	shift
	all=$(ipcache "$node")
	for p in "${@:-${PREFIXES[@]}}"; do grep "^$p " <<<"$all" || true; done
}
# the prefixes of NODE's entries before
had() { awk '{ print $1 }' <<<"${BEFORE[$1]}"; }
# same WANT GOT : equal, else the difference printed
same() { [ "$1" = "$2" ] && return 0; diff <(echo "$1") <(echo "$2") | sed 's/^/  /'; return 1; }
declare -A BEFORE
for n in n1 n2; do
	BEFORE[$n]=$(entries "$n")
	echo "  $n before:"; sed 's/^/    /' <<<"${BEFORE[$n]}"
done

blocks=""
for p in "${PREFIXES[@]}" 192.0.2.0/24; do blocks="$blocks${blocks:+,}{\"ipBlock\":{\"cidr\":\"$p\"}}"; done
cat >"$WORK/np.json" <<EOF2
{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
 "metadata": {"name": "tenant-ipblock", "namespace": "default"},
 "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [$blocks]}]}}
EOF2
cidr_id_in() { grep -Eq '^192\.0\.2\.0/24 +identity=1677[0-9]{4} ' <<<"$(ipcache "$1")"; }
cidr_gone() { ! grep -q '^192\.0\.2\.0/24 ' <<<"$(ipcache "$1")"; }
for n in n1 n2; do
	out=$("$CLI" -s "${MN_DIR[$n]}/fibril.sock" policy import "$WORK/np.json" 2>&1) || true
	check "$n imports the tenant's NetworkPolicy" contains "$out" "Revision:"
done
for n in n1 n2; do
	check "$n: the policy's own prefix (192.0.2.0/24) has its CIDR identity" wait_for 10 cidr_id_in "$n"
	mapfile -t mine < <(had "$n")
	now=$(entries "$n" "${mine[@]}")
	check "$n: with the policy in place, the node and pod entries are as before" \
		same "${BEFORE[$n]}" "$now"
done
for n in n1 n2; do
	out=$("$CLI" -s "${MN_DIR[$n]}/fibril.sock" policy delete default/tenant-ipblock 2>&1) || true
	echo "  $n: $out"
	check "$n deletes the policy (its own prefix leaves the ipcache)" wait_for 10 cidr_gone "$n"
done
for n in n1 n2; do
	mapfile -t mine < <(had "$n")
	now=$(entries "$n" "${mine[@]}")
	check "$n: after the deletion, the node and pod entries are as before" \
		same "${BEFORE[$n]}" "$now"
done

# ---- released identities are used again; a namespace's prefixes are capped -------------------
cidr_id() { sed -n 's/^192\.0\.2\.0\/24 *identity=\([0-9]*\).*/\1/p' <<<"$(ipcache n1)"; }
"$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/np.json" >/dev/null 2>&1 || true
check "n1: the policy imported again gives 192.0.2.0/24 a CIDR identity" wait_for 10 cidr_id_in n1
# the first import took 2^24 .. 2^24+6 (7 prefixes): a number past them is not a reused one
check "  a released number, reused (got $(cidr_id); the first import used 16777216..16777222)" \
	test "$(cidr_id)" -le 16777222
blocks=""
for i in $(seq 0 255) 256; do
	if [ "$i" -lt 256 ]; then c=203.0.113.$i/32; else c=198.51.100.0/24; fi
	blocks="$blocks${blocks:+,}{\"ipBlock\":{\"cidr\":\"$c\"}}"
done
cat >"$WORK/big.json" <<EOF2
{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
 "metadata": {"name": "many-blocks", "namespace": "other"},
 "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [$blocks]}]}}
EOF2
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/big.json" 2>&1) || true
check "a policy naming 257 prefixes in one namespace (cap 256) is refused, naming it" \
	contains "$out" 'namespace "other" would name more than 256 CIDR prefixes'
check "  none of its prefixes reached the ipcache" \
	bash -c '! grep -q -e "^198\.51\.100\.0/24 " -e "^203\.0\.113\." <<<"$1"' _ "$(ipcache n1)"
finish
