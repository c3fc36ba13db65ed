#!/usr/bin/env bash
# tests/security/hostport_claim.sh - the attack: a pod spec (anyone who may
# create pods on the node) asks for a hostPort another pod already holds -
# the same port, a wildcard over another's hostIP mapping, a hostIP mapping
# inside another's wildcard - or the port of a Service frontend on the
# node's address, to take that port's traffic (and its clients' bytes)
# for itself.
# The promise: a hostPort is its holder's until the holder lets go; a
# claim over it is refused whole at CNI ADD (error 106 naming the hostPort
# and its holder), nothing of the claimer is left on the node (no link, no
# address, no endpoint, no frontend), and the holder is still the one
# that answers on the port; a free port is still taken.
# Setup: an agent (ipam, endpoint, datapath, lb) in a node namespace whose
# device ext0 leads to an "outside" namespace; pods through fibril-cni
# with runtimeConfig.portMappings (what kubelet's portMappings capability
# hands the plugin); lb's socket hooks on a cgroup of the test.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

MODS=(ipam-api ipam-cluster-pool endpoint datapath lb)
cni_prereqs "${MODS[@]}"
cni_modules "$WORK/mods" "${MODS[@]}"
find_cgroup2
CG="$CG2/fibril-hpclaim-$$"
OUTSIDE="fhpc-$$"
cni_test_cleanup() {
	local p ns
	for ns in "$NODE_NS" "$OUTSIDE" "${CNI_NETNS_LIST[@]}"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
	done
	if [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		wait_for 5 rmdir "$CG" 2>/dev/null # once the killed processes have left it
	fi
	[ -n "$CG2_MOUNTED" ] && umount "$CG2_MOUNTED"
}
mkdir "$CG"

netns_add "$NODE_NS"
netns_add "$OUTSIDE"
ip -n "$NODE_NS" link add ext0 type veth peer name eth0 netns "$OUTSIDE"
ip -n "$NODE_NS" addr add 192.168.215.1/24 dev ext0
ip -n "$NODE_NS" link set ext0 up
ip -n "$OUTSIDE" addr add 192.168.215.2/24 dev eth0
ip -n "$OUTSIDE" link set eth0 up
ip netns exec "$NODE_NS" sysctl -qw net.ipv4.ip_forward=1
NODEIP=192.168.215.1
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.19.0/24 \
	--set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 || { fail "the agent starts"; finish; }
SOCK=$WORK/fibril.sock

LBNET="$top_srcdir/tests/lib/lbnet.py"
from_outside() { ip netns exec "$OUTSIDE" python3 "$LBNET" "$@"; }
answered() { json_is "$1" "j['backends'] == {'$2': $3} and not j['errors']"; }
declare -A ADDR
# pod_add NAME MAPPINGS-JSON : CNI ADD with runtimeConfig.portMappings
pod_add() {
	netns_add "fhpc-$$-$1"
	plugin ADD '{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'"$SOCK"'",
	  "capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":'"$2"'}}' CNI_CONTAINERID="hpc$$$1" \
		CNI_NETNS="/var/run/netns/fhpc-$$-$1" CNI_IFNAME=eth0 \
		CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=$1"
	[ "$PRC" = 0 ] || return 1
	ADDR[$1]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
}
serve() { # serve POD : lbnet.py serve pod-POD 8080 (TCP and UDP) in the pod
	ip netns exec "fhpc-$$-$1" python3 "$LBNET" serve "pod-$1" 8080 >/dev/null 2>&1 &
	disown $!
	wait_for 10 _listening_in "fhpc-$$-$1" 8080
}
hostports() { api http://x/v1/hostport; }
services() { api http://x/v1/service; }
state() { echo "$(node_lxc_links | sort)|$(ipam_allocations | sort)|$(hostports)|$(services)"; }
refused_106() { # refused_106 HOLDER-REGEX : the last ADD failed with 106 naming the holder
	[ "$PRC:$PCODE" = "1:106" ] && grep -q "$1" "$WORK/out" && return 0
	echo "  exit $PRC, code '$PCODE': $(out) $(cat "$WORK/err")"
	return 1
}

pod_add a '[{"hostPort":18080,"containerPort":8080,"protocol":"tcp"}]' ||
	{ fail "pod a takes hostPort 18080/TCP: $(out) $(cat "$WORK/err")"; finish; }
pod_add b '[{"hostPort":18090,"containerPort":8080,"protocol":"tcp","hostIP":"'$NODEIP'"}]' ||
	{ fail "pod b takes hostPort $NODEIP:18090/TCP: $(out) $(cat "$WORK/err")"; finish; }
serve a || fail "pod a's server listens"
serve b || fail "pod b's server listens"
code=$(api -o "$WORK/api.out" -w '%{http_code}' -X PUT -d \
	'{"type":"NodePort","frontend":"'$NODEIP':18100","backends":[{"address":"'"${ADDR[a]}"':8080"}]}' \
	http://x/v1/service)
check "a Service frontend $NODEIP:18100 is in place" test "$code" = 200 -o "$code" = 201 ||
	cat "$WORK/api.out"
check "before: pod a answers on hostPort 18080" answered "$(from_outside tcp $NODEIP 18080 5)" pod-a 5
check "before: pod b answers on $NODEIP:18090" answered "$(from_outside tcp $NODEIP 18090 5)" pod-b 5
check "before: the Service answers on $NODEIP:18100" answered "$(from_outside tcp $NODEIP 18100 5)" pod-a 5

before=$(state)
pod_add m1 '[{"hostPort":18080,"containerPort":8080,"protocol":"tcp"}]' || :
check "a claim of pod a's hostPort 18080/TCP is refused (106, naming pod a)" \
	refused_106 "hostPort [0-9.]*:18080/TCP is taken by the pod attachment hpc$$a:eth0"
pod_add m2 '[{"hostPort":19001,"containerPort":8080,"protocol":"tcp"},{"hostPort":18090,"containerPort":8080,"protocol":"tcp"}]' || :
check "a wildcard claim over pod b's $NODEIP:18090 (with a free port first) is refused (106, naming pod b)" \
	refused_106 "hostPort $NODEIP:18090/TCP is taken by the pod attachment hpc$$b:eth0"
pod_add m3 '[{"hostPort":18080,"containerPort":8080,"protocol":"tcp","hostIP":"'$NODEIP'"}]' || :
check "a hostIP claim inside pod a's wildcard 18080 is refused (106, naming pod a)" \
	refused_106 "hostPort $NODEIP:18080/TCP is taken by the pod attachment hpc$$a:eth0"
pod_add m4 '[{"hostPort":18100,"containerPort":8080,"protocol":"tcp"}]' || :
check "a claim of the Service frontend's port $NODEIP:18100 is refused (106, naming the service)" \
	refused_106 "hostPort $NODEIP:18100/TCP is taken by the service"
check "after the refused claims: no new link, address, hostPort or frontend (19001 not half-taken)" \
	test "$(state)" = "$before"
check "pod a still answers on 18080" answered "$(from_outside tcp $NODEIP 18080 10)" pod-a 10
check "pod b still answers on $NODEIP:18090" answered "$(from_outside tcp $NODEIP 18090 10)" pod-b 10
check "the Service still answers on $NODEIP:18100" answered "$(from_outside tcp $NODEIP 18100 10)" pod-a 10
pod_add m5 '[{"hostPort":19002,"containerPort":8080,"protocol":"tcp"}]'
check "a free hostPort (19002) is still taken" test "$PRC" = 0
check "the agent still serves" agent_healthy
finish
