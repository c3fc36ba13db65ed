#!/usr/bin/env bash
# tests/integration/hostport.sh - hostPort end to end through libcni with
# the portMappings capability (tests/cni/driver passes it as kubelet and
# containerd do): an agent with ipam-cluster-pool, ipam-api, endpoint,
# datapath and lb in a node namespace whose device ext0 leads to an
# "outside" namespace (a client on the underlay, no route to any pod), the
# lb socket hooks on a cgroup of the test. Checked with real traffic: a
# pod's hostPort answers from outside (tc) and from the node (socket hooks),
# TCP and UDP, on every node address; a hostIP mapping answers on that
# address only; a second pod claiming a taken hostPort (same protocol,
# overlapping hostIP) gets CNI error 106 naming it and nothing changes
# (no link, no address, no endpoint, the first pod still served), while
# the same port over the other protocol is fine; bad mappings are error 7;
# the API cannot take a hostPort's frontend over (409); kill -9 and a
# restart keep the mappings and their owners; DEL releases them
# (connection refused after), and so does the endpoint's deletion.
# No portmap plugin, no iptables.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

MODS=(ipam-api ipam-cluster-pool endpoint datapath lb)
cni_prereqs "${MODS[@]}"
build_driver || { fail "the libcni driver builds"; finish; }
cni_modules "$WORK/mods" "${MODS[@]}"
find_cgroup2
CG="$CG2/fibril-hostport-$$"
OUTSIDE="fhpo-$$"
cni_test_cleanup() {
	local p
	for p in $(ip netns pids "$NODE_NS" 2>/dev/null) $(ip netns pids "$OUTSIDE" 2>/dev/null); do
		kill -KILL "$p" 2>/dev/null
	done
	for ns in "${CNI_NETNS_LIST[@]}"; do
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
ip -n "$NODE_NS" addr add 192.168.214.1/24 dev ext0
ip -n "$NODE_NS" link set ext0 up
ip -n "$OUTSIDE" addr add 192.168.214.2/24 dev eth0
ip -n "$OUTSIDE" link set eth0 up
ip netns exec "$NODE_NS" sysctl -qw net.ipv4.ip_forward=1
NODEIP=192.168.214.1
GW=10.244.9.1

agent() {
	start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.9.0/24 \
		--set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0
}
agent || { fail "the agent starts"; finish; }
SOCK=$WORK/fibril.sock
cat >"$WORK/hp.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "fibril",
 "plugins": [{"type": "fibril-cni", "agent-socket": "$SOCK", "capabilities": {"portMappings": true}}]}
EOF

LBNET="$top_srcdir/tests/lib/lbnet.py"
# from_outside PROTO ADDR PORT N / from_node ...: lbnet.py's JSON
from_outside() { ip netns exec "$OUTSIDE" python3 "$LBNET" "$@"; }
from_node() {
	nsenter --net="/run/netns/$NODE_NS" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" \
		python3 "$LBNET" "$@"
}
answered() { # answered JSON NAME N : all N answered by NAME, no error
	json_is "$1" "j['backends'] == {'$2': $3} and not j['errors']"
}
refused() { # refused JSON N : all N refused
	json_is "$1" "not j['backends'] and j['errors'].get('ECONNREFUSED', 0) == $2"
}
pod_add() { # pod_add NAME PORTMAP : ADD through libcni; the address in ADDR[NAME]
	netns_add "fhp-$$-$1"
	driver "$WORK/hp.conflist" -args "K8S_POD_NAMESPACE=default;K8S_POD_NAME=$1" -portmap "$2" \
		add "hp$$$1" "/var/run/netns/fhp-$$-$1" eth0
	[ "$PRC" = 0 ] || return 1
	ADDR[$1]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
}
serve() { # serve POD NAME : lbnet.py serve NAME 8080 (TCP and UDP) in the pod
	ip netns exec "fhp-$$-$1" python3 "$LBNET" serve "$2" 8080 >/dev/null 2>&1 &
	disown $!
	wait_for 10 _listening_in "fhp-$$-$1" 8080
}
hostports() { api http://x/v1/hostport; }
cni_code() { # cni_code CODE : the last driver run failed with CNI error CODE
	[ "$PRC:$PCODE" = "1:$1" ] && return 0
	echo "  exit $PRC, code '$PCODE': $(out) $(cat "$WORK/err")"
	return 1
}
cni_ok() { [ "$PRC" = 0 ] && return 0; echo "  exit $PRC: $(out) $(cat "$WORK/err")"; return 1; }
in_out() { grep -q "$1" "$WORK/out" && return 0; echo "  expected '$1' in: $(out)"; return 1; }
ep_count() { api http://x/v1/endpoint | python3 -c 'import json,sys; j=json.load(sys.stdin); print(len(j if isinstance(j, list) else j["endpoints"]))'; }
declare -A ADDR

# ---- a pod with TCP and UDP hostPorts on every node address ------------------------------
pod_add a "18080:8080/tcp,18081:8080/udp" ||
	{ fail "ADD of a pod with portMappings through libcni: $(out) $(cat "$WORK/err")"; finish; }
pass "ADD of a pod with portMappings (TCP 18080, UDP 18081) through libcni"
serve a pod-a || fail "pod a's server listens"
check "the lb module holds them, owned by the attachment" json_is "$(hostports)" \
	"sorted((f['frontend'], f['protocol'], f['backend'], f['owner']) for f in j['frontends']) == sorted([
	 ('$NODEIP:18080', 'TCP', '${ADDR[a]}:8080', 'hp$$a:eth0'), ('$GW:18080', 'TCP', '${ADDR[a]}:8080', 'hp$$a:eth0'),
	 ('$NODEIP:18081', 'UDP', '${ADDR[a]}:8080', 'hp$$a:eth0'), ('$GW:18081', 'UDP', '${ADDR[a]}:8080', 'hp$$a:eth0')]
	 + [(f['frontend'], f['protocol'], f['backend'], f['owner']) for f in j['frontends'] if f['frontend'].startswith('127.')])"
check "from outside the node: TCP hostPort answered by the pod (tc)" \
	answered "$(from_outside tcp $NODEIP 18080 10)" pod-a 10
check "from outside the node: UDP hostPort answered by the pod, replies from the node address" \
	json_is "$(from_outside udp $NODEIP 18081 10)" "j['backends'] == {'pod-a': 10} and j['peers'] == ['$NODEIP:18081']"
check "from the node: TCP hostPort on the node's address (socket hooks)" \
	answered "$(from_node tcp $NODEIP 18080 10)" pod-a 10
check "from the node: TCP hostPort on its other address (the pods' gateway)" \
	answered "$(from_node tcp $GW 18080 10)" pod-a 10
check "from the node: UDP hostPort" answered "$(from_node udp $NODEIP 18081 10)" pod-a 10

# ---- hostIP: served on that address only -------------------------------------------------
pod_add b "18090:8080/tcp@$NODEIP" || fail "ADD of a pod with a hostIP mapping: $(out)"
serve b pod-b || fail "pod b's server listens"
check "hostIP $NODEIP: answered from outside" answered "$(from_outside tcp $NODEIP 18090 5)" pod-b 5
check "hostIP $NODEIP: not mapped on the node's other address" refused "$(from_node tcp $GW 18090 3)" 3

# ---- conflicts: a clear CNI error, nothing changes -------------------------------------
before_links=$(node_lxc_links | sort)
before_ipam=$(ipam_allocations | sort)
before_eps=$(ep_count)
before_hp=$(hostports)
pod_add c "19000:8080/tcp,18080:9090/tcp" || :
check "a second pod claiming TCP 18080: CNI error 106" cni_code 106
check "  whose message names the hostPort and its holder" \
	in_out "hostPort [0-9.]*:18080/TCP is taken by the pod attachment hp$$a:eth0"
pod_add c2 "18090:8080/tcp" || :
check "a wildcard claim overlapping pod b's hostIP $NODEIP:18090: CNI error 106" cni_code 106
pod_add c3 "18080:8080/tcp@$NODEIP" || :
check "a hostIP claim overlapping pod a's wildcard: CNI error 106" cni_code 106
pod_add c4 "0:8080/tcp" || :
check "hostPort 0: CNI error 7" cni_code 7
check "  naming the field" in_out 'runtimeConfig.portMappings\[0\].hostPort: not a port'

pod_add c5 "18095:8080/tcp@192.0.2.9" || :
check "a hostIP that is not the node's: CNI error 7" cni_code 7
check "  naming it" in_out "host-ip: 192.0.2.9 is not an address of this node"
check "after the refused ADDs: no new link, address, endpoint or hostPort" test \
	"$(node_lxc_links | sort)|$(ipam_allocations | sort)|$(ep_count)|$(hostports)" = \
	"$before_links|$before_ipam|$before_eps|$before_hp"
check "pod a is still served on 18080" answered "$(from_outside tcp $NODEIP 18080 5)" pod-a 5
pod_add d "18080:8080/udp" || :
check "the same port over the other protocol (UDP 18080) is another pod's to take" cni_ok
code=$(api -o "$WORK/api.out" -w '%{http_code}' -X PUT -d \
	'{"frontend":"'$NODEIP':18080","backends":[{"address":"10.244.9.200:80"}]}' http://x/v1/service)
check "the API cannot take a hostPort's frontend over (409)" test "$code" = 409
echo "  $(cat "$WORK/api.out")"

# ---- kill -9 and a restart: kept, with their owners -------------------------------------
held=$(hostports)
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || : # 137: killed
AGENT_PID=""
check "while the agent is down: still answered from outside" answered "$(from_outside tcp $NODEIP 18080 5)" pod-a 5
agent || { fail "the agent restarts"; finish; }
check "after the restart: the same hostPorts and owners" test "$(hostports)" = "$held"
check "after the restart: TCP from outside" answered "$(from_outside tcp $NODEIP 18080 5)" pod-a 5
check "after the restart: UDP from the node" answered "$(from_node udp $NODEIP 18081 5)" pod-a 5

# ---- released on DEL and with the endpoint ------------------------------------------------
driver "$WORK/hp.conflist" -portmap "18080:8080/tcp,18081:8080/udp" del "hp$$a" "/var/run/netns/fhp-$$-a" eth0
check "DEL of pod a" cni_ok
check "after DEL: its hostPorts are gone" json_is "$(hostports)" \
	"not [f for f in j['frontends'] if f['owner'] == 'hp$$a:eth0']"
check "after DEL: TCP 18080 from outside is refused (nothing listens on the node)" \
	refused "$(from_outside tcp $NODEIP 18080 3)" 3
check "after DEL: TCP 18080 from the node is refused" refused "$(from_node tcp $NODEIP 18080 3)" 3
pod_add e "18080:8080/tcp" || :
check "a new pod takes the released TCP 18080" cni_ok
code=$(api -o /dev/null -w '%{http_code}' -X DELETE "http://x/v1/endpoint/container-id:hp$$b:eth0")
check "pod b's endpoint deleted through the API" test "$code" = 200
b_released() { ! hostports | grep -q "hp$$b:eth0"; }
check "  its hostPort goes with it (endpoint.deleted)" wait_for 5 b_released
for p in d e; do
	driver "$WORK/hp.conflist" del "hp$$$p" "/var/run/netns/fhp-$$-$p" eth0
done
check "after every DEL: no hostPort left" json_is "$(hostports)" "j['frontends'] == []"
finish
