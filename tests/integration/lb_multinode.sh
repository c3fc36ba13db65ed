#!/usr/bin/env bash
# tests/integration/lb_multinode.sh - ClusterIP services whose backends are
# pods on other nodes (issue 11 across nodes), in both routing modes: run
# without LBMN_MODE it runs itself twice, LBMN_MODE=native then
# LBMN_MODE=tunnel, each a cluster of its own (tests/lib/multinode.sh: three
# node namespaces with their agents - kvstore-etcd, ipam, endpoint,
# datapath, nodes and lb - one etcd on the underlay bridge). Backends are
# pods (fibril-cni) on n1, n2 and n3 serving TCP and UDP
# (tests/lib/lbnet.py); a TCP and a UDP ClusterIP service are upserted with
# `fibril service upsert` on n1; a client pod on n1 runs its processes in a
# cgroup v2 directory this test creates (named with its pid; n1's socket
# hooks are attached there - never to the machine's root cgroup). Checked
# with real traffic: every backend, local and remote, is reached;
# getpeername() / recvfrom() report the frontend for remote backends too;
# UDP request/response to remote backends; a removed remote backend gets no
# new connections while an established connection to another remote backend
# goes on; in tunnel mode the service traffic crossed the VXLAN device
# (n1's to-tunnel counter), and the only routes to pod CIDRs are the node's
# own encapsulating ones through fibril_vxlan (none via the underlay), so the
# pods' translated traffic is delivered through the ipcache. NodePort from a
# client outside the nodes (a namespace on the underlay) to n1's address,
# whose backends are only on n2 and n3: per-packet DNAT at n1's tc with SNAT
# to n1's address (the backends see n1 as the source, their replies come
# back through n1, which restores both addresses: the client sees the
# frontend), through the underlay (native) or the tunnel device (tunnel);
# externalTrafficPolicy Local keeps the client's address.
if [ -z "${LBMN_MODE:-}" ]; then
	rc_native=0 rc_tunnel=0
	LBMN_MODE=native bash "$0" "$@" || rc_native=$?
	LBMN_MODE=tunnel bash "$0" "$@" || rc_tunnel=$?
	[ "$rc_native" = 77 ] && [ "$rc_tunnel" = 77 ] && exit 77
	for rc in "$rc_native" "$rc_tunnel"; do
		[ "$rc" = 0 ] || [ "$rc" = 77 ] || exit 1
	done
	exit 0
fi
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_MTU=9000 # room for the 50 bytes of VXLAN around 1500-byte pod frames
. "$top_srcdir/tests/lib/multinode.sh"
echo "=== routing mode $LBMN_MODE"

MODS="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes lb"
# shellcheck disable=SC2086
mn_require $MODS

# a cgroup v2 directory per node for its socket hooks (the client runs in n1's)
find_cgroup2
CG_BASE="$CG2/fibril-lbmn-test-$$"
SERVERS=()
mn_test_cleanup() {
	local p n
	for p in "${SERVERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for n in n1 n2 n3; do
		[ -d "$CG_BASE-$n" ] || continue
		for p in $(cat "$CG_BASE-$n/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		wait_for 5 rmdir "$CG_BASE-$n" 2>/dev/null # once the killed processes have left it
	done
	[ -n "$CG2_MOUNTED" ] && umount "$CG2_MOUNTED"
}
for n in n1 n2 n3; do mkdir "$CG_BASE-$n"; done

# shellcheck disable=SC2086
mn_modules "$WORK/mods" $MODS
mn_underlay_up
mn_etcd_start || { fail "etcd starts on the underlay"; finish; }
NODES=(n1 n2 n3)
for i in 1 2 3; do mn_node_add "n$i" "$i"; done
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16
	--set nodes.retry=300ms --set "nodes.routing-mode=$LBMN_MODE" --set nodes.lease-ttl=30s)
start() { mn_agent_start "$1" "$WORK/mods" "${AGENT_ARGS[@]}" --set "lb.cgroup=$CG_BASE-$1" \
	--set lb.nodeport-devices=eth0; }
knows_all() {
	QUIET_JSON=1 json_is "$(mn_api "$1" http://x/v1/nodes)" "sorted(n['name'] for n in j['nodes']) == ['n1', 'n2', 'n3'] and all(n.get('routed', True) for n in j['nodes'])"
}
for n in "${NODES[@]}"; do start "$n" || { fail "the agent of $n starts"; finish; }; done
for n in "${NODES[@]}"; do check "$n learns the other two nodes" wait_for 15 knows_all "$n"; done
check "n1's socket hooks are attached to n1's cgroup of this test" \
	json_is "$(mn_api n1 http://x/v1/service)" "j['socket-lb-hooks'] == 8 and j['cgroup'] == '$CG_BASE-n1'"

# ---- backends on every node, a client on n1 --------------------------------------------------
declare -A BACKEND_NODE=([b0]=n1 [b1]=n2 [b2]=n2 [b3]=n3 [b4]=n3)
BACKENDS=(b0 b1 b2 b3 b4)
for b in "${BACKENDS[@]}"; do
	mn_pod_add "${BACKEND_NODE[$b]}" "$b" || { fail "backend pod $b on ${BACKEND_NODE[$b]}"; finish; }
	ip netns exec "$(mn_pod_ns "$b")" python3 "$top_srcdir/tests/lib/lbnet.py" serve "$b" 8080 >/dev/null 2>&1 &
	SERVERS+=($!)
	disown $!
done
mn_pod_add n1 client || { fail "the client pod on n1"; finish; }
for b in "${BACKENDS[@]}"; do mn_listening "$b" 8080 || fail "backend $b listens"; done
echo "  backends: $(for b in "${BACKENDS[@]}"; do printf '%s=%s(%s) ' "$b" "${MN_POD_IP[$b]}" "${BACKEND_NODE[$b]}"; done)"

# client CMD... : lbnet.py in the client pod, inside n1's cgroup of this test
client() {
	# nsenter, not ip netns exec (which remounts /sys: no cgroup file system there)
	nsenter --net="/run/netns/$(mn_pod_ns client)" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG_BASE-n1" \
		python3 "$top_srcdir/tests/lib/lbnet.py" "$@"
}
jq_() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }
upsert() { # upsert JSON : on n1; the reply in UOUT, the status in URC
	URC=0
	UOUT=$(printf '%s' "$1" | "$CLI" -s "${MN_DIR[n1]}/fibril.sock" -o json service upsert - 2>&1) || URC=$?
}
be_json() { # be_json PORT BACKEND... -> the backends array
	local port=$1 out="" b
	shift
	for b in "$@"; do out="$out${out:+,}{\"address\":\"${MN_POD_IP[$b]}:$port\"}"; done
	printf '[%s]' "$out"
}
to_tunnel() { jq_ "$(mn_api n1 http://x/v1/datapath)" "j['packets-from-endpoints'].get('to-tunnel', 0)"; }
[ "$LBMN_MODE" = tunnel ] && TUNNEL_BEFORE=$(to_tunnel)

# ---- TCP: every backend on every node, getpeername() the frontend ---------------------------
upsert '{"frontend":"10.96.77.1:80","name":"default/web","backends":'"$(be_json 8080 "${BACKENDS[@]}")"'}'
check "upsert on n1: a ClusterIP service with 5 backends on 3 nodes" test "$URC" = 0 || echo "  $UOUT"
out=$(client tcp 10.96.77.1 80 200)
check "200 connections from the client on n1, no error" \
	test "$(jq_ "$out" 'sum(j["backends"].values()) == 200 and not j["errors"]')" = True || echo "  $out"
check "every backend reached: b0 on n1, b1 and b2 on n2, b3 and b4 on n3 (each 20% +- 12 points)" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b0", "b1", "b2", "b3", "b4"] and all(16 <= v <= 64 for v in j["backends"].values())')" = True ||
	echo "  $out"
echo "  spread: $(jq_ "$out" 'j["backends"]')"
check "getpeername() answers the frontend, for remote backends too" \
	test "$(jq_ "$out" 'j["peers"]')" = "['10.96.77.1:80']" || echo "  $out"

# ---- only remote backends (n1 has none), UDP request/response ---------------------------------
upsert '{"frontend":"10.96.77.2:53","protocol":"UDP","name":"default/dns","backends":'"$(be_json 8080 b1 b3)"'}'
check "a UDP service with backends on n2 and n3" test "$URC" = 0 || echo "  $UOUT"
out=$(client udp 10.96.77.2 53 40)
check "40 UDP requests answered by b1 (n2) and b3 (n3)" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b1", "b3"] and sum(j["backends"].values()) == 40')" = True ||
	echo "  $out"
check "recvfrom() reports the frontend for the remote backends' answers" \
	test "$(jq_ "$out" 'j["peers"]')" = "['10.96.77.2:53']" || echo "  $out"

if [ "$LBMN_MODE" = tunnel ]; then
	check "tunnel: the service traffic left n1 encapsulated (to-tunnel grew)" \
		test "$(to_tunnel)" -gt "${TUNNEL_BEFORE:-0}"
	check "tunnel: no route for a pod CIDR via the underlay on n1 (only fibril_vxlan's)" \
		test -z "$(ip -n "$(mn_ns n1)" route show proto 242 | grep -v 'dev fibril_vxlan')"
fi

# ---- a remote backend removed: no new connections, established ones go on ---------------------
upsert '{"frontend":"10.96.77.3:80","name":"default/held","backends":'"$(be_json 8080 b2)"'}'
: >"$WORK/hold"
client hold 10.96.77.3 80 "$WORK/hold" &
SERVERS+=($!)
disown $!
wait_for 10 grep -q ok "$WORK/hold" || fail "a long connection to b2 (n2) through a service"
upsert '{"frontend":"10.96.77.1:80","name":"default/web","backends":'"$(be_json 8080 b0 b1 b2 b4)"'}'
check "the update keeps the service's ID" test "$(jq_ "$UOUT" 'j["id"]')" = 1 || echo "  $UOUT"
out=$(client tcp 10.96.77.1 80 100)
check "100 new connections, none to the removed b3 (n3), b4 on n3 still reached" \
	test "$(jq_ "$out" '"b3" not in j["backends"] and "b4" in j["backends"] and sum(j["backends"].values()) == 100')" = True ||
	echo "  $out"
upsert '{"frontend":"10.96.77.3:80","name":"default/held","backends":'"$(be_json 8080 b1)"'}'
n_before=$(grep -c ok "$WORK/hold")
# 10 more answers after the updates (one each 100 ms: at least 1 s)
hold_goes_on() { grep -q error "$WORK/hold" || [ "$(grep -c ok "$WORK/hold")" -ge $((n_before + 10)) ]; }
wait_for 20 hold_goes_on || true
check "the established connection to b2 went on through both updates" \
	test -z "$(grep error "$WORK/hold")" -a "$(grep -c ok "$WORK/hold")" -ge $((n_before + 10)) -a "$(sort -u "$WORK/hold")" = "ok b2" ||
	tail -3 "$WORK/hold"
out=$(client tcp 10.96.77.3 80 10)
check "new connections to that service go to its new backend b1" \
	test "$(jq_ "$out" 'j["backends"]')" = "{'b1': 10}" || echo "  $out"
check "n1's socket LB translated them (metrics)" \
	grep -Eq '^fibril_lb_socket_events_total\{event="translated"\} [1-9]' <<<"$(mn_api n1 http://x/metrics)"

# ---- NodePort from outside the nodes to backends on other nodes: SNAT ------------------------
OUT_NS="$MN_TAG-out"
OUT_IP="$MN_UNDERLAY_PREFIX.100"
_mn_netns_add "$OUT_NS"
ip -n "$OUT_NS" link add eth0 mtu "$MN_UNDERLAY_MTU" type veth peer name uout mtu "$MN_UNDERLAY_MTU" \
	netns "$MN_UNDERLAY_NS"
ip -n "$MN_UNDERLAY_NS" link set uout master br0 up
ip -n "$OUT_NS" addr add "$OUT_IP/24" dev eth0
ip -n "$OUT_NS" link set eth0 up
outside() { ip netns exec "$OUT_NS" python3 "$top_srcdir/tests/lib/lbnet.py" "$@"; }
N1=${MN_IP[n1]}
upsert '{"frontend":"'"$N1"':30090","type":"NodePort","name":"default/np","backends":'"$(be_json 8080 b1 b3)"'}'
check "a NodePort on n1's address whose backends are on n2 and n3" test "$URC" = 0 || echo "  $UOUT"
out=$(outside tcpsrc "$N1" 30090 30)
check "NodePort from outside: 30 connections reach b1 (n2) and b3 (n3)" \
	test "$(jq_ "$out" 'sorted(j["backends"]) == ["b1", "b3"] and sum(j["backends"].values()) == 30')" = True ||
	echo "  $out"
check "... the backends see n1's address ($N1) as the source (SNAT)" \
	test "$(jq_ "$out" 'j["sources"]')" = "{'$N1': 30}" || echo "  $out"
check "... and the client sees the frontend answer" test "$(jq_ "$out" 'j["peers"]')" = "['$N1:30090']" ||
	echo "  $out"
check "n1 counted the SNATed flows (tc-snat)" \
	grep -Eq '^fibril_lb_socket_events_total\{event="tc-snat"\} [1-9]' <<<"$(mn_api n1 http://x/metrics)"
ctd=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump lb_ct 2>&1)
check "lb_ct on n1 holds the four entries of a SNATed flow (source=$N1:6xxxx towards the backend)" \
	grep -Eq "egress +source=$N1:(6[1-5][0-9]{3})" <<<"$ctd" || echo "$ctd" | head -8
if [ "$LBMN_MODE" = tunnel ]; then
	check "tunnel: n1's egress program is on fibril_vxlan too" \
		contains "$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump lb_devices 2>&1)" "tunnel"
fi
upsert '{"frontend":"'"$N1"':30091","type":"NodePort","external-traffic-policy":"Local","name":"default/np-local","backends":'"$(be_json 8080 b0)"'}'
out=$(outside tcpsrc "$N1" 30091 10)
check "externalTrafficPolicy Local: b0 (on n1) sees the client's own address ($OUT_IP)" \
	test "$(jq_ "$out" 'j["backends"] == {"b0": 10} and j["sources"] == {"'"$OUT_IP"'": 10} and j["peers"] == ["'"$N1"':30091"]')" = True ||
	echo "  $out"
finish
