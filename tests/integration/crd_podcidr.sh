#!/usr/bin/env bash
# tests/integration/crd_podcidr.sh - cluster-pool IPAM with no etcd (CRD
# mode, issue 27): each node claims its pod CIDR as a Lease of kube-system
# named after the CIDR (fibril-podcidr-v4-10-207-1-0-24, holderIdentity the
# node), created with POST, so the API server's concurrency control on that
# one object settles a race. Three agents, no node-cidr, the fake
# kube-apiserver on the underlay (tests/k8s/). Checked:
#   - hostile claims made before the agents start (a holder that is no node
#     name on the pool's first subnet, a CIDR outside the pool) are ignored
#     with one log line each, and nobody takes the first subnet;
#   - the three agents, started at the same moment, end with three distinct
#     CIDRs of the pool, each the holder of its claim Lease and in its
#     CiliumNode's spec.ipam.podCIDRs; their pods get addresses from their
#     CIDR and ping across nodes;
#   - an agent restarted keeps its CIDR (the claim under its name);
#   - a node's Node object deleted: the GC leader deletes its claim, the
#     live nodes' claims stay.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/k8scluster.sh"

mn_k8s_cluster_up 3 default,kube-system k8s ipam-cluster-pool ipam-api endpoint datapath nodes policy
POOL=10.207.0.0/22 # four /24s: the first is held by a hostile claim
code_of() { k8s_api -o /dev/null -w '%{http_code}' "$1"; }
LEASES=/apis/coordination.k8s.io/v1/namespaces/kube-system/leases
claim_json() { # NAME CIDR HOLDER
	echo '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"'"$1"'",
	  "namespace":"kube-system","labels":{"fibril.io/podcidr-claim":"v4"},
	  "annotations":{"fibril.io/podcidr":"'"$2"'"}},"spec":{"holderIdentity":"'"$3"'"}}'
}
mn_k8s_nodes # no spec.podCIDRs: cluster-pool IPAM
code=$(mn_k8s_post $LEASES "$(claim_json fibril-podcidr-v4-10-207-0-0-24 10.207.0.0/24 'Evil Node!')")
check "a hostile claim of 10.207.0.0/24 (holder 'Evil Node!') is created ($code)" test "$code" = 201
code=$(mn_k8s_post $LEASES "$(claim_json fibril-podcidr-v4-10-99-0-0-24 10.99.0.0/24 n9)")
check "a claim of 10.99.0.0/24 (outside the pool) is created ($code)" test "$code" = 201

start() {
	mn_agent_start "$1" "$WORK/mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$1" \
		--set "ipam-cluster-pool.cluster-pool-ipv4-cidr=$POOL" --set nodes.retry=300ms \
		--set endpoint.identity-timeout=5s --set endpoint.gc-lease-duration=3s \
		--set endpoint.identity-gc-interval=300ms
}
# all three at the same moment: they race for the same free subnets
for n in "${NODES[@]}"; do MN_START_NOWAIT=1 start "$n"; done
for n in "${NODES[@]}"; do
	if wait_alive "${MN_PID[$n]}" 60 mn_healthy "$n"; then
		pass "the agent of $n becomes healthy"
	else
		fail "the agent of $n becomes healthy (wait: $?)"
		mn_api "$n" http://x/v1/healthz
		tail -20 "${MN_DIR[$n]}/agent.log"
	fi
done

declare -A CIDR
cidr_of() { grep -o 'node CIDR [0-9./]* claimed' "${MN_DIR[$1]}/agent.log" | tail -1 | cut -d' ' -f3; }
for n in "${NODES[@]}"; do
	CIDR[$n]=$(cidr_of "$n")
	grep 'node CIDR [0-9./]* claimed' "${MN_DIR[$n]}/agent.log" | tail -1 | sed "s/^/  $n: /"
done
check "n1, n2, n3 claimed three distinct CIDRs (${CIDR[n1]} ${CIDR[n2]} ${CIDR[n3]})" bash -c '
	[ -n "$1" ] && [ -n "$2" ] && [ -n "$3" ] && [ "$1" != "$2" ] && [ "$1" != "$3" ] && [ "$2" != "$3" ]' \
	_ "${CIDR[n1]}" "${CIDR[n2]}" "${CIDR[n3]}"
in_pool() { /usr/bin/python3 -c 'import ipaddress, sys
c = ipaddress.ip_network(sys.argv[1]); p = ipaddress.ip_network(sys.argv[2])
sys.exit(0 if c.subnet_of(p) and c.prefixlen == 24 and str(c) != "10.207.0.0/24" else 1)' "$1" "$POOL"; }
lease_name() { echo "fibril-podcidr-v4-$(tr './' '--' <<<"$1")"; }
holder() { k8s_api "$LEASES/$(lease_name "$1")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["holderIdentity"])' 2>/dev/null; }
cn_cidrs() { k8s_api "/apis/cilium.io/v2/ciliumnodes/$1" | python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["spec"]["ipam"]["podCIDRs"]))' 2>/dev/null; }
cn_has() { [ "$(cn_cidrs "$1")" = "$2" ]; }
for n in "${NODES[@]}"; do
	check "$n's CIDR ${CIDR[$n]} is a /24 of $POOL other than the hostile claim's" in_pool "${CIDR[$n]:-x}"
	check "  its claim Lease $(lease_name "${CIDR[$n]}") is held by $n" test "$(holder "${CIDR[$n]}")" = "$n"
	check "  and its CiliumNode's spec.ipam.podCIDRs is [${CIDR[$n]}]" wait_for 10 cn_has "$n" "${CIDR[$n]}"
done
check "the hostile claim of 10.207.0.0/24 is still 'Evil Node!''s" test "$(holder 10.207.0.0/24)" = "Evil Node!"
said() { grep -q "pod CIDR claim Lease kube-system/$1 ignored: $2" "${MN_DIR[n1]}/agent.log"; }
check "n1 logs the hostile holder ignored" said fibril-podcidr-v4-10-207-0-0-24 "its spec.holderIdentity is no node name"
check "n1 logs the claim outside the pool ignored" said fibril-podcidr-v4-10-99-0-0-24 "its CIDR is outside the pool"

# ---- pods get addresses from their node's CIDR, and ping across nodes ----------------------
mn_pod_add n1 a || fail "a pod on n1"
mn_pod_add n2 b || fail "a pod on n2"
mn_pod_add n3 c || fail "a pod on n3"
in_cidr() { /usr/bin/python3 -c 'import ipaddress, sys
sys.exit(0 if ipaddress.ip_address(sys.argv[1]) in ipaddress.ip_network(sys.argv[2]) else 1)' "$1" "$2"; }
for p in a b c; do
	n=${MN_POD_NODE[$p]}
	check "pod $p on $n got ${MN_POD_IP[$p]:-nothing}, from $n's CIDR ${CIDR[$n]}" in_cidr "${MN_POD_IP[$p]:-0.0.0.0}" "${CIDR[$n]:-255.255.255.255/32}"
done
for n in "${NODES[@]}"; do check "$n knows and routes the two others" wait_for 15 mn_routes_all "$n"; done
pings() { ip netns exec "$(mn_pod_ns "$1")" ping -c1 -W1 "${MN_POD_IP[$2]}" >/dev/null 2>&1; }
check "pod a on n1 pings pod b on n2 (${MN_POD_IP[b]})" wait_for 10 pings a b
check "pod a on n1 pings pod c on n3 (${MN_POD_IP[c]})" wait_for 10 pings a c

# ---- a restart keeps the CIDR ---------------------------------------------------------------
mn_agent_kill n2 TERM
: >"${MN_DIR[n2]}/agent.log"
start n2 || fail "the agent of n2 starts again"
check "n2 restarted keeps ${CIDR[n2]} ($(cidr_of n2))" test "$(cidr_of n2)" = "${CIDR[n2]}"
check "  its claim is still n2's" test "$(holder "${CIDR[n2]}")" = n2
check "pod a on n1 still pings pod b on n2" wait_for 10 pings a b

# ---- a deleted node's claim is collected by the GC leader -----------------------------------
mn_agent_kill n3 KILL
check "n3's claim is there while its Node is" test "$(holder "${CIDR[n3]}")" = n3
k8s_api -o /dev/null -X DELETE /api/v1/nodes/n3
claim_gone() { [ "$(code_of "$LEASES/$(lease_name "$1")")" = 404 ]; }
check "Node n3 deleted: the GC leader deletes its claim $(lease_name "${CIDR[n3]}")" wait_for 15 claim_gone "${CIDR[n3]}"
said_gc() { grep -q "GC: deleted pod CIDR claim (its Node is gone) kube-system/$(lease_name "${CIDR[n3]}")" "${MN_DIR[n1]}/agent.log" "${MN_DIR[n2]}/agent.log"; }
check "  and the leader's log says so" said_gc
for n in n1 n2; do check "  $n's claim stays" test "$(holder "${CIDR[$n]}")" = "$n"; done
check "  the hostile holder's claim is not the GC's to judge (it stays)" test "$(holder 10.207.0.0/24)" = "Evil Node!"
finish
