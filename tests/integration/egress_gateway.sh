#!/usr/bin/env bash
# tests/integration/egress_gateway.sh - the egress gateway (issue 24,
# modules/egressgw) on three nodes, native routing (EGW_MODE=tunnel: VXLAN),
# with a "world" namespace on the underlay (masq_world.py: it tells each
# client the address it saw). The promises:
#   - a pod an egress gateway policy selects reaches the world with the
#     policy's egress IP, from a node that is not the gateway (sent to the
#     gateway with its own addresses, SNATed there) and from the gateway
#     node itself; a pod not selected, and a selected pod to an
#     excludedCIDR, leave through their own node (masqueraded to its
#     address, as without the policy), on the gateway node too;
#   - bad policies are refused with one line naming the field, and nothing
#     changes;
#   - a kill -9 and restart of the pod's node's agent changes nothing: a
#     connection through the gateway lives on, a new one goes through it
#     right away, and no datagram (one per millisecond) leaves with the
#     node's address;
#   - with two gateways, when the chosen one dies (its agent killed -9 and
#     its underlay link down) new connections succeed through the other
#     gateway within EGW_BOUND_S (default 2.5 s: two [health] intervals of
#     500 ms plus the rewrite and the probes' own pace, on a loaded
#     machine), and no connection is ever seen with the pod's node's
#     address meanwhile.
. "$top_srcdir/tests/lib/common.sh"
EGW_MODE=${EGW_MODE:-native}
[ "$EGW_MODE" = tunnel ] && MN_UNDERLAY_MTU=9000 # room for VXLAN around 1500-byte frames
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 3 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes health egressgw
NODES=(n1 n2 n3)

WORLD=$MN_UNDERLAY_PREFIX.200
WORLD_EXCL=$MN_UNDERLAY_PREFIX.201
mn_world_up "$WORLD" "$WORLD_EXCL"

# the egress IPs, on the gateways' underlay devices
declare -A EGRESS_IP=([n2]=$MN_UNDERLAY_PREFIX.102 [n3]=$MN_UNDERLAY_PREFIX.103)
for n in n2 n3; do ip -n "$(mn_ns "$n")" addr add "${EGRESS_IP[$n]}/32" dev eth0; done

AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.207.0.0/16
	--set nodes.retry=300ms --set "nodes.routing-mode=$EGW_MODE" --set nodes.lease-ttl=30s
	--set health.interval=500ms --set datapath.host-routing=bpf)
for n in "${NODES[@]}"; do
	mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of $n starts"; finish; }
done
for n in "${NODES[@]}"; do check "$n routes every other node" wait_for 15 mn_routes_all "$n"; done
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"

# pods: sel1 (selected) and other (not) on n1, sel2 (selected) and other2
# (not) on the gateway n2
mn_pod_add n1 sel1 || fail "pod sel1 on n1"
mn_pod_add n1 other || fail "pod other on n1"
mn_pod_add n2 sel2 || fail "pod sel2 on n2"
mn_pod_add n2 other2 || fail "pod other2 on n2"
label() { # NODE POD APP
	local code
	code=$(mn_api "$1" -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
		-d '{"labels":["k8s:app='"$3"'","k8s:io.kubernetes.pod.namespace=default"]}' \
		"http://x/v1/endpoint/container-id:$MN_TAG$2")
	[ "$code" = 200 ] || { fail "pod $2 is labelled app=$3"; cat "$WORK/patch.out"; }
}
label n1 sel1 egw
label n2 sel2 egw
label n1 other plain
label n2 other2 plain

in_pod() { local pod=$1; shift; ip netns exec "$(mn_pod_ns "$pod")" "$@"; }
seen_as() { # POD HOST EXPECTED : a new TCP connection is seen as EXPECTED
	local out
	out=$(in_pod "$1" /usr/bin/python3 "$top_srcdir/tests/integration/egress_gateway.py" seen "$2" "$PORT" 2>&1)
	[ "$out" = "$3" ] && return 0
	echo "  $1 -> $2: seen as '$out' (expected $3)"
	return 1
}
put_policy() { # NAME JSON : the HTTP status
	mn_api n1 -o "$WORK/put.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
		-d "$2" "http://x/v1/egress-gateway/$1"
}
put_all() { # NAME JSON : on every node; fail unless 200/201
	local n code
	for n in "${NODES[@]}"; do
		code=$(mn_api "$n" -o "$WORK/put.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
			-d "$2" "http://x/v1/egress-gateway/$1")
		[[ $code == 20[01] ]] || { echo "  $n: HTTP $code $(cat "$WORK/put.out")"; return 1; }
	done
}
SEL='"selectors":[{"namespace":"default","podSelector":{"matchLabels":{"app":"egw"}}}]'
DST="\"destinationCIDRs\":[\"$MN_UNDERLAY_PREFIX.0/24\"],\"excludedCIDRs\":[\"$WORLD_EXCL/32\"]"
GW2="{\"nodeName\":\"n2\",\"egressIP\":\"${EGRESS_IP[n2]}\"}"
GW3="{\"nodeName\":\"n3\",\"egressIP\":\"${EGRESS_IP[n3]}\"}"

check "before any policy: sel1 reaches the world as n1 (${MN_IP[n1]}, masqueraded)" seen_as sel1 "$WORLD" "${MN_IP[n1]}"

# ---- bad input: one line naming the field, nothing changes -------------------------
bad() { # WHAT JSON FIELD-IN-THE-ERROR
	local code
	code=$(put_policy bad "$2")
	if [ "$code" = 400 ] && grep -qF -- "$3" "$WORK/put.out"; then return 0; fi
	echo "  $1: HTTP $code $(cat "$WORK/put.out") (expected 400 naming $3)"
	return 1
}
check "a policy without gateways is refused, naming egressGateways" \
	bad "no gateways" "{$SEL,$DST}" "egressGateways"
check "an IPv6 destination is refused, naming destinationCIDRs[0]" \
	bad "ipv6" "{$SEL,\"destinationCIDRs\":[\"fd00::/8\"],\"egressGateways\":[$GW2]}" "destinationCIDRs[0]"
check "a CIDR with host bits is refused, naming it" \
	bad "host bits" "{$SEL,\"destinationCIDRs\":[\"10.1.2.3/8\"],\"egressGateways\":[$GW2]}" "host bits set"
check "a bad egress IP is refused, naming egressGateways[1].egressIP" \
	bad "egress ip" "{$SEL,$DST,\"egressGateways\":[$GW2,{\"nodeName\":\"n3\",\"egressIP\":\"1.2.3\"}]}" \
	"egressGateways[1].egressIP"
check "a gateway listed twice is refused" \
	bad "twice" "{$SEL,$DST,\"egressGateways\":[$GW2,$GW2]}" "listed twice"
check "an unknown field is refused, naming it" \
	bad "unknown" "{$SEL,$DST,\"egressGateways\":[$GW2],\"egressGateway\":{}}" "egressGateway: unknown field"
check "a matchExpressions selector is refused, naming it" \
	bad "expressions" "{\"selectors\":[{\"podSelector\":{\"matchExpressions\":[]}}],$DST,\"egressGateways\":[$GW2]}" \
	"selectors[0].podSelector.matchExpressions"
code=$(mn_api n1 -o "$WORK/get.out" -w '%{http_code}' "http://x/v1/egress-gateway/bad")
check "  and none of them was stored (GET answers 404)" test "$code" = 404
check "  and the table is still empty" \
	json_is "$(mn_api n1 http://x/v1/egress-gateway)" "j['entries'] == 0 and j['policies'] == []"

# ---- one gateway: n2 ---------------------------------------------------------------
check "the policy with gateway n2 is accepted on every node" put_all egw "{$SEL,$DST,\"egressGateways\":[$GW2]}"
check "$EGW_MODE: sel1 on n1 reaches the world as n2's egress IP ${EGRESS_IP[n2]}" \
	wait_for 10 seen_as sel1 "$WORLD" "${EGRESS_IP[n2]}"
check "$EGW_MODE: sel2 on the gateway n2 itself reaches the world as ${EGRESS_IP[n2]}" \
	seen_as sel2 "$WORLD" "${EGRESS_IP[n2]}"
check "$EGW_MODE: other (not selected) on n1 reaches the world as n1 (${MN_IP[n1]})" \
	seen_as other "$WORLD" "${MN_IP[n1]}"
check "$EGW_MODE: other2 (not selected) on the gateway n2 reaches the world as n2 (${MN_IP[n2]}), not the egress IP" \
	seen_as other2 "$WORLD" "${MN_IP[n2]}"
check "$EGW_MODE: sel1 to the excluded $WORLD_EXCL leaves through n1 (${MN_IP[n1]})" \
	seen_as sel1 "$WORLD_EXCL" "${MN_IP[n1]}"
check "  the world never saw sel1's own address ${MN_POD_IP[sel1]}" bash -c "! grep -qE ' ${MN_POD_IP[sel1]}( |\$)' '$WLOG'"
dp_is() { json_is "$(mn_api "$1" http://x/v1/datapath)" "$2"; }
check "n1 counted packets sent to the gateway (egress-gateway-redirect)" \
	dp_is n1 "j['packets-from-endpoints']['egress-gateway-redirect'] > 0"
check "n2 counted packets SNATed to its egress IP (egress-gateway-snat)" \
	dp_is n2 "j['packets-to-netdev']['egress-gateway-snat'] > 0"
dump=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump dp_egress 2>&1)
check "fibril map dump dp_egress on n1 decodes the entries (gateway n2, the excluded CIDR)" \
	bash -c "grep -q 'gateway ${MN_IP[n2]} egress-ip 0.0.0.0' <<<'$dump' && grep -q '$WORLD_EXCL/32 .*excluded' <<<'$dump'" ||
	echo "$dump" | head

# ---- a restart of n1's agent (kill -9) changes nothing for sel1 ----------------------
# a connection kept open across it, new ones right after it: all through n2,
# and the world sees no new packet with n1's address meanwhile
before=$(wc -l <"$WLOG")
in_pod sel1 /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" clients "$WORLD" "$PORT" 1 10 restart \
	>"$WORK/restart.out" 2>&1 &
cpid=$!
in_pod sel1 /usr/bin/python3 "$top_srcdir/tests/integration/egress_gateway.py" spray "$WORLD" "$PORT" 60 \
	>"$WORK/spray.out" 2>&1 &
spid=$!
mn_agent_kill n1 KILL
mn_agent_start n1 "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of n1 starts again"; finish; }
wait_for 10 mn_json n1 /v1/egress-gateway 'j["syncs"]' >/dev/null # the module's first table is written
kill "$spid" 2>/dev/null || true
check "$EGW_MODE: right after n1's restart, sel1's new connection is seen as ${EGRESS_IP[n2]}" \
	seen_as sel1 "$WORLD" "${EGRESS_IP[n2]}"
wait "$cpid" || true
check "  the connection open across the restart kept going through n2 ($(head -c 120 "$WORK/restart.out"))" \
	grep -q "^ok restart-0 seen=${EGRESS_IP[n2]} " "$WORK/restart.out"
check "  the world saw none of the datagrams sent every millisecond meanwhile from n1's address ($(tail -n +$((before + 1)) "$WLOG" | grep -c " ${MN_IP[n1]}\$" || true) of $(tail -n +$((before + 1)) "$WLOG" | grep -c '^udp ') did)" \
	bash -c "! tail -n +$((before + 1)) '$WLOG' | grep -q ' ${MN_IP[n1]}\$'"

# ---- two gateways, failover ---------------------------------------------------------
check "the policy with gateways n2 and n3 is accepted on every node" \
	put_all egw "{$SEL,$DST,\"egressGateways\":[$GW2,$GW3]}"
doc=$(mn_api n1 http://x/v1/egress-gateway/egw)
chosen=$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["selected"][0]["gateway"])' "$doc" 2>/dev/null)
case $chosen in
n2) spare=n3 ;;
n3) spare=n2 ;;
*) fail "n1 names the gateway chosen for sel1's identity ($doc)"; finish; exit 1 ;;
esac
echo "  sel1's gateway: $chosen, the spare: $spare"
check "$EGW_MODE: sel1 reaches the world as its chosen gateway $chosen (${EGRESS_IP[$chosen]})" \
	wait_for 10 seen_as sel1 "$WORLD" "${EGRESS_IP[$chosen]}"
agree() { # every node chose $chosen for sel1's identity
	local n
	for n in "${NODES[@]}"; do
		json_is "$(mn_api "$n" http://x/v1/egress-gateway/egw)" \
			"[s['gateway'] for s in j['selected']] == ['$chosen'] * len(j['selected'])" || return 1
	done
}
check "  every node chose $chosen for the selected identity" agree
since=$(date +%s.%N)
mn_agent_kill "$chosen" KILL
ip -n "$(mn_ns "$chosen")" link set eth0 down
out=$(in_pod sel1 /usr/bin/python3 "$top_srcdir/tests/integration/egress_gateway.py" until "$WORLD" "$PORT" \
	"${EGRESS_IP[$spare]}" "$since" 15) || true
echo "  failover: $out (bound ${EGW_BOUND_S:=2.5} s)"
secs=$(awk '$1 == "moved" {print $2}' <<<"$out")
check "$EGW_MODE: after $chosen died, a new connection of sel1 succeeds through $spare within ${EGW_BOUND_S} s" \
	awk -v s="$secs" -v b="$EGW_BOUND_S" 'BEGIN { exit !(s != "" && s + 0 <= b + 0) }' </dev/null
check "  no connection meanwhile was seen with another address (n1's: never leaked)" grep -q " other=0" <<<"$out"
ok=0
for _ in 1 2 3 4 5; do seen_as sel1 "$WORLD" "${EGRESS_IP[$spare]}" && ok=$((ok + 1)); done
check "  and the next 5 new connections all leave through $spare" test "$ok" = 5
check "n1 says $chosen is not alive" \
	json_is "$(mn_api n1 http://x/v1/egress-gateway/egw)" \
	"[g['alive'] for g in j['gateways'] if g['nodeName'] == '$chosen'] == [False]"
check "$EGW_MODE: other (not selected) still leaves as n1 (${MN_IP[n1]})" seen_as other "$WORLD" "${MN_IP[n1]}"
finish
