#!/usr/bin/env bash
# tests/security/crd_forged_endpoint.sh - the attack: whoever may write
# CiliumEndpoint objects (a compromised node's credentials, a careless RBAC
# grant) publishes endpoints that claim addresses that are not its node's
# to give: an address of another node's pod CIDR, another node's own IP, an
# outside address, a HostIP that is not the named node's, the reserved
# identity `host`. Programmed, the victim node would send that traffic to
# the forger or let it in as the claimed identity.
# The promise: in CRD mode an ipcache entry from a CiliumEndpoint is bound
# to its writer (as a kvstore record is): its IP lies in the pod CIDRs of
# the node it names, its HostIP is that node's, its identity a cluster one;
# anything else is refused with a log line naming the object and what was
# wrong, counted, and never reaches the victim's datapath ipcache; a bound
# one still goes in.
# Setup: two nodes in CRD mode (no etcd) behind the fake kube-apiserver on
# the underlay; the forged objects are written straight to the API server.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/lib/k8scluster.sh"

mn_k8s_cluster_up 2 default,kube-system,bad k8s ipam-cluster-pool ipam-api endpoint datapath nodes policy
mn_k8s_nodes 10.206
for n in n1 n2; do
	i=${n#n}
	mn_agent_start "$n" "$WORK/mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$n" \
		--set "ipam-cluster-pool.node-cidr=10.206.$i.0/24" --set nodes.retry=300ms ||
		{ fail "the agent of $n starts"; finish; }
done
for n in n1 n2; do check "$n knows and routes the other" wait_for 15 mn_routes_all "$n"; done

# the victim: n2; the forger speaks for n1 (IP .11, pod CIDR 10.206.1.0/24)
N1=$MN_UNDERLAY_PREFIX.11
N2=$MN_UNDERLAY_PREFIX.12
ID=$((0x10000 + 77)) # a cluster identity (the range a kvstore allocates from)
ipc() { # the victim's ipcache entries from CiliumEndpoints: "ip=identity" ...
	mn_json n2 /v1/ipcache "' '.join(sorted('%s=%s' % (e['prefix'].split('/')[0], e['identity']) for e in j['entries'] if e.get('source') == 'crd' and e.get('programmed')))"
}
# dp_has IP IDENTITY : n2's datapath ipcache maps IP to IDENTITY
dp_has() { "$CLI" -s "${MN_DIR[n2]}/fibril.sock" map dump dp_ipcache | grep -q "^$1/32 .*identity=$2 "; }
refused_count() { mn_json n2 /v1/ipcache "j['metrics']['records-refused']"; }
cep() { # NAME IP HOSTIP NODE-NAME IDENTITY : create the object, print the code
	mn_k8s_post /apis/cilium.io/v2/namespaces/bad/ciliumendpoints '{"apiVersion":"cilium.io/v2",
	  "kind":"CiliumEndpoint","metadata":{"name":"'"$1"'","namespace":"bad"},
	  "status":{"identity":{"id":'"$5"'},"networking":{"addressing":[{"ipv4":"'"$2"'"}],
	  "node":"'"$3"'","node-name":"'"$4"'"}}}'
}
said() { grep -q "CiliumEndpoint bad/$1: .*$2.*refused" "${MN_DIR[n2]}/agent.log"; }

# forged NAME IP HOSTIP IDENTITY WHY : n1 claims IP; n2 refuses it, saying WHY
forged() {
	local name=$1 ip=$2 host=$3 id=$4 why=$5 code
	code=$(cep "$name" "$ip" "$host" n1 "$id")
	[ "$code" = 201 ] || { fail "$name: the API server takes the object ($code)"; return; }
	check "$name ($ip, HostIP $host, identity $id): n2 refuses it, saying '$why'" wait_for 10 said "$name" "$why"
	check "  and $ip is not in n2's ipcache" eval '! ipc | grep -q "$ip="'
	check "  nor in its datapath's dp_ipcache with that identity" eval '! dp_has "$ip" "$id"'
}
r0=$(refused_count)
forged another-nodes-pod 10.206.2.250 "$N1" "$ID" "IP 10.206.2.250 is not in the pod CIDRs of node n1"
forged another-nodes-ip "$N2" "$N1" "$ID" "IP $N2 is not in the pod CIDRs of node n1"
forged outside-ip 203.0.113.7 "$N1" "$ID" "IP 203.0.113.7 is not in the pod CIDRs of node n1"
forged foreign-hostip 10.206.1.240 "$N2" "$ID" "HostIP $N2 is not node n1's"
forged identity-host 10.206.1.241 "$N1" 1 "identity 1 is not a cluster identity"
r1=$(refused_count)
check "n2 counts what it refused ($r0 -> $r1, 5 more at least)" test "$r1" != "?" -a "$r1" -ge $((r0 + 5))

# a bound one (n1's CIDR, n1's IP, a cluster identity) still goes in
code=$(cep bound 10.206.1.242 "$N1" n1 "$ID")
check "a bound CiliumEndpoint is taken by the API server" test "$code" = 201
_bound_in() { ipc | grep -q "10.206.1.242=$ID" && dp_has 10.206.1.242 "$ID"; }
check "  and n2 programs it (ipcache and dp_ipcache)" wait_for 10 _bound_in
finish
