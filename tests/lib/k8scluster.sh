# shellcheck shell=bash
# tests/lib/k8scluster.sh - a cluster of node namespaces (tests/lib/multinode.sh)
# whose agents read a fake kube-apiserver (tests/k8s/apiserver.sh) listening
# on the underlay bridge, with a Node object per node. Source after
# tests/lib/common.sh and tests/lib/multinode.sh (it sources apiserver.sh).
#
#   mn_k8s_cluster_up COUNT K8S-NAMESPACES MODULE...
#                                k8s_require, mn_require, the modules in
#                                $WORK/mods, the underlay, nodes n1..nCOUNT
#                                (NODES), and the API server on the bridge
#                                (serving the comma-separated K8S-NAMESPACES;
#                                K8S_NETNS the underlay's, where k8s_api and
#                                kc reach it); fail + finish when it does not
#                                start
#   mn_k8s_post PATH JSON        create an object; prints the HTTP code, the
#                                answer in $WORK/post.out
#   mn_k8s_nodes [CIDR-PREFIX]   a Node object for every node, its InternalIP
#                                its underlay address; with CIDR-PREFIX (e.g.
#                                10.204) spec.podCIDRs CIDR-PREFIX.I.0/24 for
#                                node nI; fail + finish when one is refused
. "$top_srcdir/tests/k8s/apiserver.sh"

mn_k8s_cluster_up() {
	local count=$1 namespaces=$2 i
	shift 2
	k8s_require
	mn_require "$@"
	mn_modules "$WORK/mods" "$@"
	mn_underlay_up
	NODES=()
	for i in $(seq 1 "$count"); do
		mn_node_add "n$i" "$i"
		NODES+=("n$i")
	done
	K8S_NETNS=$MN_UNDERLAY_NS K8S_ADDRESS=$MN_UNDERLAY_PREFIX.1 \
		k8s_start --namespaces "$namespaces" ||
		{ fail "the API server starts on the underlay"; finish; }
	# k8s_api and k8s_ctl reach it in the underlay namespace
	K8S_NETNS=$MN_UNDERLAY_NS
}

mn_k8s_post() {
	k8s_api -o "$WORK/post.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
		-d "$2" "$1"
}

mn_k8s_nodes() {
	local prefix=${1:-} n i spec code
	for n in "${MN_NODES[@]}"; do
		i=${n#n}
		spec=""
		[ -z "$prefix" ] || spec='"spec":{"podCIDRs":["'"$prefix.$i"'.0/24"]},'
		code=$(mn_k8s_post /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"'"$n"'"},'"$spec"'
		  "status":{"addresses":[{"type":"InternalIP","address":"'"${MN_IP[$n]}"'"}]}}')
		[ "$code" = 201 ] || { fail "Node $n is created ($code)"; cat "$WORK/post.out"; finish; }
	done
}
