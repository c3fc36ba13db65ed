#!/usr/bin/env bash
# tests/integration/crd_ciliumnode.sh - CRD mode's CiliumNode objects (issue
# 27): three agents, no etcd, Node objects that carry no pod CIDR (as with
# cluster-pool IPAM, where Kubernetes allocates none), the fake
# kube-apiserver on the underlay (tests/k8s/). Checked:
#   - each agent writes its CiliumNode: spec.addresses (InternalIP, the
#     TunnelEndpoint), spec.health.ipv4 (its health endpoint's address),
#     spec.ipam.podCIDRs (its cluster-pool CIDR);
#   - every node routes the others' pod CIDRs, which only the CiliumNodes
#     carry, and a pod on n1 reaches pods on n2 and n3;
#   - a CiliumNode deleted by hand is written again by its agent;
#   - a hostile CiliumNode (n3's, rewritten) claiming 0.0.0.0/0, n2's pod
#     CIDR, or n1's IP as its tunnel endpoint is refused by n1 with a log
#     line (the nodes module's checks, as for a kvstore record), and n1's
#     routes to n2 stay.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/k8scluster.sh"

mn_k8s_cluster_up 3 default,kube-system k8s ipam-cluster-pool ipam-api endpoint datapath nodes policy
mn_k8s_nodes # no spec.podCIDRs
start() {
	local i=${1#n}
	mn_agent_start "$1" "$WORK/mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$1" \
		--set "ipam-cluster-pool.node-cidr=10.206.$i.0/24" --set nodes.retry=300ms
}
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
pass "three agents start with no kvstore, Nodes without pod CIDRs"

cn() { k8s_api "/apis/cilium.io/v2/ciliumnodes/$1"; }
cn_is() { # NODE : its CiliumNode says what the brief says it must
	local i=${1#n}
	cn "$1" | python3 2>/dev/null -c 'import json, sys
o = json.load(sys.stdin); sp = o["spec"]
addrs = {(a["type"], a["ip"]) for a in sp["addresses"]}
ok = (("InternalIP", sys.argv[1]) in addrs and ("TunnelEndpoint", sys.argv[1]) in addrs
      and sp["health"]["ipv4"] == sys.argv[2] and sp["ipam"]["podCIDRs"] == [sys.argv[3]])
sys.exit(0 if ok else 1)' "${MN_IP[$1]}" "10.206.$i.254" "10.206.$i.0/24"
}
for n in "${NODES[@]}"; do
	check "$n's CiliumNode: InternalIP and TunnelEndpoint ${MN_IP[$n]}, health 10.206.${n#n}.254, pod CIDR 10.206.${n#n}.0/24" \
		wait_for 10 cn_is "$n" || cn "$n"
done
route_via() { # NODE CIDR VIA : NODE's route to CIDR goes via VIA
	ip -n "$(mn_ns "$1")" route show "$2" | grep -q "via $3"
}
for n in "${NODES[@]}"; do
	for o in "${NODES[@]}"; do
		[ "$n" = "$o" ] && continue
		check "$n routes $o's pod CIDR 10.206.${o#n}.0/24 via ${MN_IP[$o]} (only its CiliumNode has it)" \
			wait_for 15 route_via "$n" "10.206.${o#n}.0/24" "${MN_IP[$o]}"
	done
done

mn_pod_add n1 a || fail "a pod on n1"
mn_pod_add n2 b || fail "a pod on n2"
mn_pod_add n3 c || fail "a pod on n3"
pings() { ip netns exec "$(mn_pod_ns "$1")" ping -c1 -W1 "${MN_POD_IP[$2]}" >/dev/null 2>&1; }
check "pod a on n1 pings pod b on n2 (${MN_POD_IP[b]})" wait_for 10 pings a b
check "pod a on n1 pings pod c on n3 (${MN_POD_IP[c]})" wait_for 10 pings a c

# ---- deleted by hand: its agent writes it again ---------------------------------------------
k8s_api -o /dev/null -X DELETE /apis/cilium.io/v2/ciliumnodes/n2
check "n2's CiliumNode deleted by hand: n2 writes it again" wait_for 10 cn_is n2

# ---- a hostile CiliumNode: refused, nothing else moves --------------------------------------
put_cn3() { # SPEC-JSON : n3's CiliumNode replaced at its resourceVersion
	local rv
	rv=$(cn n3 | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
	k8s_api -o "$WORK/put.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
		-d '{"apiVersion":"cilium.io/v2","kind":"CiliumNode","metadata":{"name":"n3","resourceVersion":"'"$rv"'"},"spec":'"$1"'}' \
		/apis/cilium.io/v2/ciliumnodes/n3
}
refused() { grep -q "CiliumNode n3 refused: $1" "${MN_DIR[n1]}/agent.log"; }
code=$(put_cn3 '{"ipam":{"podCIDRs":["0.0.0.0/0"]}}')
check "n3's CiliumNode rewritten to claim 0.0.0.0/0 ($code)" test "$code" = 200
check "  n1 refuses it, saying why" wait_for 10 refused "pod CIDR 0.0.0.0/0 is shorter than"
check "  and routes no 0.0.0.0/0 via n3" eval '! ip -n "$(mn_ns n1)" route show proto 242 | grep -q "^default"'
code=$(put_cn3 '{"ipam":{"podCIDRs":["10.206.2.0/24"]}}')
check "n3's CiliumNode rewritten to claim n2's pod CIDR ($code)" test "$code" = 200
check "  n1 refuses it, saying why" wait_for 10 refused "pod CIDR 10.206.2.0/24 overlaps"
check "  and its route to 10.206.2.0/24 still goes via n2" route_via n1 10.206.2.0/24 "${MN_IP[n2]}"
code=$(put_cn3 '{"addresses":[{"type":"TunnelEndpoint","ip":"'"${MN_IP[n1]}"'"}],"ipam":{"podCIDRs":["10.206.3.0/24"]}}')
check "n3's CiliumNode rewritten to give n1's IP as its tunnel endpoint ($code)" test "$code" = 200
check "  n1 refuses it, saying why" wait_for 10 refused ".*${MN_IP[n1]}"
check "pod a on n1 still pings pod b on n2" pings a b
grep -o "CiliumNode n3 refused: .*" "${MN_DIR[n1]}/agent.log" | sed 's/^/  n1: /'
finish
