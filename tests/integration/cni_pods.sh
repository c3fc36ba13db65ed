#!/usr/bin/env bash
# tests/integration/cni_pods.sh - fibril-cni end to end, driven by libcni
# the way a container runtime drives it (tests/cni/driver): an agent with
# ipam-cluster-pool, ipam-api, endpoint and datapath in a node network
# namespace; 20 pods added from a conflist; every pod pings and opens a
# TCP connection to every other pod and to the node (the gateway), all
# pods at once; the result JSON and the agent's endpoints match what is in
# the pods; CHECK passes, and fails once an address is removed behind the
# plugin's back; DEL twice; GC (run directly: libcni 1.1.2 has no GC)
# collects an attachment dropped from the valid list and nothing else;
# a chain with Debian's bandwidth plugin after fibril-cni through
# ADD/CHECK/DEL; STATUS; at the end nothing is left.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

PODS=20
cni_prereqs ipam-api ipam-cluster-pool endpoint datapath
[ -x "$CNI_REF_DIR/bandwidth" ] || skip_or_fail "$CNI_REF_DIR/bandwidth is missing (containernetworking-plugins)"
command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
build_driver || { fail "the libcni driver builds"; finish; }
cni_modules "$WORK/mods" ipam-api ipam-cluster-pool endpoint datapath
netns_add "$NODE_NS"
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.8.0/24
SOCK=$WORK/fibril.sock
GW=10.244.8.1
PORT=$((20000 + RANDOM % 20000))

cat >"$WORK/fibril.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "fibril",
 "plugins": [{"type": "fibril-cni", "agent-socket": "$SOCK", "mtu": 1500,
              "dns": {"nameservers": ["10.96.0.10"], "search": ["default.svc.cluster.local"]}}]}
EOF
cat >"$WORK/chain.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "fibril-chain",
 "plugins": [{"type": "fibril-cni", "agent-socket": "$SOCK"},
             {"type": "bandwidth", "ingressRate": 100000000, "ingressBurst": 1000000}]}
EOF
GCCONF='{"cniVersion":"1.1.0","name":"fibril","type":"fibril-cni","agent-socket":"'$SOCK'"'

pod_ns() { echo "fcni-p$$-$1"; }
pod_id() { echo "fcni$$pod$1"; }
declare -A ADDR

# ---- 20 pods --------------------------------------------------------------------
added=0
for i in $(seq 1 $PODS); do
	ns=$(pod_ns "$i")
	netns_add "$ns"
	driver "$WORK/fibril.conflist" -args "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-$i" \
		add "$(pod_id "$i")" "/var/run/netns/$ns" eth0
	if [ "$PRC" = 0 ]; then
		added=$((added + 1))
		cp "$WORK/out" "$WORK/result-$i.json"
		ADDR[$i]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
	else
		echo "  ADD pod $i: $(out) $(cat "$WORK/err")"
	fi
done
check "ADD of $PODS pods through libcni" test "$added" = "$PODS"
[ "$added" = "$PODS" ] || { tail -20 "$WORK/agent.log"; finish; }

# The result of pod 1 against what is in its namespace.
mac1=$(ip -n "$(pod_ns 1)" -o link show eth0 | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
host1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["interfaces"][0]["name"])' "$WORK/result-1.json")
cp "$WORK/result-1.json" "$WORK/out"
check "the result: host veth (no sandbox), pod eth0 with sandbox and its MAC" outjson "
len(j['interfaces']) == 2 and 'sandbox' not in j['interfaces'][0]
and j['interfaces'][0]['name'].startswith('lxc') and len(j['interfaces'][0]['name']) <= 15
and j['interfaces'][1] == {'name': 'eth0', 'mac': '$mac1', 'sandbox': '/var/run/netns/$(pod_ns 1)'}"
check "the result: the address /32 on interface 1 with the gateway, the default route, the dns" outjson "
j['ips'] == [{'address': '${ADDR[1]}/32', 'gateway': '$GW', 'interface': 1}]
and j['routes'] == [{'dst': '0.0.0.0/0', 'gw': '$GW'}]
and j['dns'] == {'nameservers': ['10.96.0.10'], 'search': ['default.svc.cluster.local']}"
check "the host veth is in the node, up, with rp_filter 0" test \
	"$(ip -n "$NODE_NS" -o link show "$host1" | grep -c 'UP'):$(ip netns exec "$NODE_NS" cat "/proc/sys/net/ipv4/conf/$host1/rp_filter")" = "1:0"
check "in the pod: address/32, the gateway scope link, default via the gateway" test \
	"$(ip -n "$(pod_ns 1)" -o -4 addr show eth0 | awk '{print $4}') $(ip -n "$(pod_ns 1)" route show | sed 's/ *$//' | tr '\n' ';')" = \
	"${ADDR[1]}/32 default via $GW dev eth0 proto static mtu 1500;$GW dev eth0 proto static scope link mtu 1500;"
uniq=$(printf '%s\n' "${ADDR[@]}" | sort -u | wc -l)
check "every pod has its own address" test "$uniq" = "$PODS"
api http://x/v1/endpoint >"$WORK/out"
check "the agent has $PODS endpoints with the pods' addresses, names and host veths" outjson "
len(j['endpoints']) == $PODS and [{k: e.get(k) for k in ('ipv4', 'pod-name', 'pod-namespace', 'host-ifname', 'mac', 'ifname', 'netns')}
  for e in j['endpoints'] if e['container-id'] == '$(pod_id 1)'] == [{'ipv4': '${ADDR[1]}', 'pod-name': 'web-1',
  'pod-namespace': 'default', 'host-ifname': '$host1', 'mac': '$mac1', 'ifname': 'eth0',
  'netns': '/var/run/netns/$(pod_ns 1)'}]"

# ---- the full mesh: every pod to every pod and to the node, all at once ---------
SERVERS=()
ip netns exec "$NODE_NS" python3 "$top_srcdir/tests/cni/nettest.py" serve "$PORT" &
SERVERS+=($!)
for i in $(seq 1 $PODS); do
	ip netns exec "$(pod_ns "$i")" python3 "$top_srcdir/tests/cni/nettest.py" serve "$PORT" &
	SERVERS+=($!)
done
cni_test_cleanup() { local p; for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done; }
# every server listening before any probe (python starts slowly on a busy machine)
for ns in "$NODE_NS" $(for i in $(seq 1 $PODS); do pod_ns "$i"; done); do
	wait_listening "$ns" "$PORT"
done
PROBES=()
for i in $(seq 1 $PODS); do
	targets=("$GW")
	for k in $(seq 1 $PODS); do [ "$k" = "$i" ] || targets+=("${ADDR[$k]}"); done
	ip netns exec "$(pod_ns "$i")" python3 "$top_srcdir/tests/cni/nettest.py" probe "$PORT" "${targets[@]}" \
		>"$WORK/probe-$i.out" 2>&1 &
	PROBES+=($!)
done
mesh_fail=0
for i in $(seq 1 $PODS); do
	if ! wait "${PROBES[$((i - 1))]}"; then
		mesh_fail=$((mesh_fail + 1))
		sed "s/^/  pod $i: /" "$WORK/probe-$i.out" | head -5
	fi
done
check "full mesh: each of $PODS pods pings and connects to the $((PODS - 1)) others and the node" test "$mesh_fail" = 0

# ---- CHECK ---------------------------------------------------------------------------
check_fail=0
for i in $(seq 1 $PODS); do
	driver "$WORK/fibril.conflist" check "$(pod_id "$i")" "/var/run/netns/$(pod_ns "$i")" eth0
	[ "$PRC" = 0 ] || { check_fail=$((check_fail + 1)); echo "  CHECK pod $i: $(out)"; }
done
check "CHECK passes for every pod" test "$check_fail" = 0
ip -n "$NODE_NS" link set "$host1" down
driver "$WORK/fibril.conflist" check "$(pod_id 1)" "/var/run/netns/$(pod_ns 1)" eth0
check "CHECK fails when the host veth is down" test "$PRC:$PCODE" = "1:104"
check "  naming it" contains "$(out)" "the host veth $host1 of $(pod_id 1)/eth0 is down"
ip -n "$NODE_NS" link set "$host1" up
ip -n "$(pod_ns 1)" addr del "${ADDR[1]}/32" dev eth0
driver "$WORK/fibril.conflist" check "$(pod_id 1)" "/var/run/netns/$(pod_ns 1)" eth0
check "CHECK fails once the address is removed behind the plugin's back" \
	test "$PRC:$PCODE" = "1:104"
check "  naming it" contains "$(out)" "address ${ADDR[1]}/32 is missing on eth0"

# ---- DEL twice --------------------------------------------------------------------------
driver "$WORK/fibril.conflist" del "$(pod_id 1)" "/var/run/netns/$(pod_ns 1)" eth0
check "DEL succeeds" test "$PRC" = 0
driver "$WORK/fibril.conflist" del "$(pod_id 1)" "/var/run/netns/$(pod_ns 1)" eth0
check "DEL again succeeds" test "$PRC" = 0
check "  the host veth is gone" test -z "$(ip -n "$NODE_NS" -o link show "$host1" 2>/dev/null)"
check "  eth0 is gone from the pod" test -z "$(ip -n "$(pod_ns 1)" -o link show eth0 2>/dev/null)"
check "  the endpoint is gone" test "$(api -o /dev/null -w '%{http_code}' "http://x/v1/endpoint/container-id:$(pod_id 1):eth0")" = 404
check "  the address is released" test -z "$(ipam_allocations | grep "^$(pod_id 1)/eth0 " || true)"

# ---- GC: pod 2 is dropped from the valid list -----------------------------------------
valid=""
for i in $(seq 3 $PODS); do valid="$valid${valid:+,}{\"containerID\":\"$(pod_id "$i")\",\"ifname\":\"eth0\"}"; done
host2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["interfaces"][0]["name"])' "$WORK/result-2.json")
before_eps=$(api http://x/v1/endpoint | python3 -c 'import json,sys; print(sorted((e["id"], e["container-id"], e.get("ipv4")) for e in json.load(sys.stdin)["endpoints"] if e["container-id"] != "'"$(pod_id 2)"'"))')
plugin GC "$GCCONF,\"cni.dev/valid-attachments\":[$valid]}"
check "GC succeeds" test "$PRC:$(out)" = "0:"
check "  pod 2's endpoint is gone" test "$(api -o /dev/null -w '%{http_code}' "http://x/v1/endpoint/container-id:$(pod_id 2):eth0")" = 404
check "  pod 2's address is released" test -z "$(ipam_allocations | grep "^$(pod_id 2)/eth0 " || true)"
check "  pod 2's host veth is gone" test -z "$(ip -n "$NODE_NS" -o link show "$host2" 2>/dev/null)"
after_eps=$(api http://x/v1/endpoint | python3 -c 'import json,sys; print(sorted((e["id"], e["container-id"], e.get("ipv4")) for e in json.load(sys.stdin)["endpoints"]))')
check "  the other endpoints are untouched" test "$before_eps" = "$after_eps"
check "  the other pods' addresses are held" test "$(ipam_allocations | wc -l)" = $((PODS - 2))
check "  the other pods' veths are there" test "$(node_lxc_links | wc -l)" = $((PODS - 2))
check "  pod 3 still reaches pod 4 and the node" \
	ip netns exec "$(pod_ns 3)" python3 "$top_srcdir/tests/cni/nettest.py" probe "$PORT" "${ADDR[4]}" "$GW"

# ---- a chain: fibril-cni then bandwidth ------------------------------------------------
CH=$((PODS + 1))
netns_add "$(pod_ns $CH)"
driver "$WORK/chain.conflist" add "$(pod_id $CH)" "/var/run/netns/$(pod_ns $CH)" eth0
check "chain ADD (fibril-cni, bandwidth)" test "$PRC" = 0
hostc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["interfaces"][0]["name"])' "$WORK/out" 2>/dev/null || true)
check "  bandwidth shaped the host veth fibril-cni made (tbf)" contains "$(tc -n "$NODE_NS" qdisc show dev "$hostc" 2>&1)" "qdisc tbf"
driver "$WORK/chain.conflist" check "$(pod_id $CH)" "/var/run/netns/$(pod_ns $CH)" eth0
check "chain CHECK" test "$PRC:$(out)" = "0:"
driver "$WORK/chain.conflist" del "$(pod_id $CH)" "/var/run/netns/$(pod_ns $CH)" eth0
check "chain DEL" test "$PRC" = 0
driver "$WORK/chain.conflist" del "$(pod_id $CH)" "/var/run/netns/$(pod_ns $CH)" eth0
check "chain DEL again" test "$PRC" = 0
check "  the chain's veth is gone" test -z "$(ip -n "$NODE_NS" -o link show "$hostc" 2>/dev/null)"

# ---- STATUS, and the rest goes -------------------------------------------------------------
plugin STATUS "$GCCONF}"
check "STATUS is 0" test "$PRC" = 0
del_fail=0
for i in $(seq 3 $PODS); do
	driver "$WORK/fibril.conflist" del "$(pod_id "$i")" "/var/run/netns/$(pod_ns "$i")" eth0
	[ "$PRC" = 0 ] || del_fail=$((del_fail + 1))
done
driver "$WORK/fibril.conflist" del "$(pod_id 2)" "/var/run/netns/$(pod_ns 2)" eth0
check "DEL of every pod (and of the GC'd one) succeeds" test "$del_fail:$PRC" = "0:0"
check "no lxc link is left" test -z "$(node_lxc_links)"
check "no address is left" test -z "$(ipam_allocations)"
check "no endpoint is left" test "$(api http://x/v1/endpoint | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["endpoints"]))')" = 0
rc=0
stop_agent TERM || rc=$?
check "the agent stops cleanly (exit $rc)" test "$rc" = 0

finish
