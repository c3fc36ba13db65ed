#!/usr/bin/env bash
# tests/integration/policy_trace_cluster.sh - `fibril policy trace` knows
# the cluster (issue 26): two nodes (tests/lib/multinode.sh, etcd, native
# routing), a server pod on n1 that a CiliumNetworkPolicy opens only to
# pods of namespace "good"; a "good" and a "bad" pod on n2. On n1:
#   - the good pod's real TCP connection gets in, and hubble-lite's flow of
#     it says FORWARDED;
#   - that flow names the sender on n2 (good/good, its identity and labels,
#     from n1's ipcache), in GET /v1/flows and in observe -o json;
#   - `policy trace --src <good's IP>` resolves that address of another
#     node through the ipcache to good's real identity (not world), names
#     the pod, and answers ALLOWED by the rule, exit 0; the same with the
#     remote pod's name `good/good`;
#   - bad (by IP and by name) is DENIED with its own identity, exit 1, as
#     its connection is refused;
#   - an address no node holds stays world, DENIED, exit 1;
#   - GET /v1/policy/trace itself (curl, no CLI) resolves good's and bad's
#     addresses through the nodes capability's ipcache_pod the same way;
#   - hubble-lite's GetNodes on n1 (Hubble's gRPC, generated client) lists
#     n1 connected and n2 by name and node IP.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy hubble-lite
NODES=(n1 n2)
PORT=$((20000 + RANDOM % 20000))
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16
	--set nodes.retry=300ms --set endpoint.identity-timeout=5s
	--set kvstore-etcd.request-timeout=2s)
identity() { mn_json "${MN_POD_NODE[$1]}" "/v1/endpoint/container-id:$MN_TAG$1:eth0" "j['identity']"; }

for n in "${NODES[@]}"; do
	mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" || { fail "the agent of $n starts"; finish; }
done
for n in "${NODES[@]}"; do check "$n knows and routes the other" wait_for 15 mn_routes_all "$n"; done

mn_pod_add n1 srv srv || { fail "the server pod on n1"; finish; }
mn_serve srv "$PORT" || fail "the server listens"

cat >"$WORK/cnp.json" <<EOF2
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "srv-from-good", "namespace": "srv"},
 "spec": {"endpointSelector": {},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "good"}}],
                       "toPorts": [{"ports": [{"port": "$PORT", "protocol": "TCP"}]}]}]}}
EOF2
out=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy import "$WORK/cnp.json" 2>&1)
check "n1 imports the policy" contains "$out" "Revision: 1"

mn_pod_add n2 good good || fail "a pod in namespace good on n2"
mn_pod_add n2 bad bad || fail "a pod in namespace bad on n2"
GOOD=$(identity good) BAD=$(identity bad)
echo "  identities: good $GOOD, bad $BAD (allocated by n2); good ${MN_POD_IP[good]}, bad ${MN_POD_IP[bad]}"

# n1's ipcache has the remote pods (their records through etcd)
in_ipcache() { mn_json n1 /v1/ipcache "any(e.get('pod') == '$1' and e['source'] == 'kvstore' for e in j['entries'])" | grep -q True; }
check "n1's ipcache knows good/good and bad/bad from n2" eval 'wait_for 15 in_ipcache good/good && wait_for 15 in_ipcache bad/bad'

tcp() { mn_tcp_get "$1" "${MN_POD_IP[srv]}" "$PORT"; }
gets_in() { [ "$(tcp "$1")" = ok ]; }
check "good on n2 connects to n1's server (real TCP)" wait_for 10 gets_in good
check "bad on n2 does not" test "$(tcp bad)" = fail
forwarded() {
	mn_json n1 "/v1/flows?from-ip=${MN_POD_IP[good]}&to-port=$PORT" \
		"any(f.get('verdict') == 'FORWARDED' for f in (j['flows'] if isinstance(j, dict) else j))" | grep -q True
}
check "n1's flows say good -> srv:$PORT is FORWARDED" wait_for 5 forwarded ||
	mn_api n1 "http://x/v1/flows?from-ip=${MN_POD_IP[good]}" | head -c 600
# the sender on n2 is named from n1's ipcache, not shown as a bare address
named=$(mn_json n1 "/v1/flows?from-ip=${MN_POD_IP[good]}&to-port=$PORT" \
	"[(f['source'].get('namespace'), f['source'].get('pod_name'), f['source'].get('identity'), f['source'].get('labels')) for f in (j['flows'] if isinstance(j, dict) else j)][-1]")
check "  the flow names the remote sender good/good, identity $GOOD, with its labels ($named)" \
	eval 'contains "$named" "'"'"'good'"'"', '"'"'good'"'"', $GOOD" && contains "$named" "k8s:io.kubernetes.pod.namespace=good"'
hub=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" observe --last 50 --from-ip "${MN_POD_IP[good]}" -o json 2>/dev/null |
	tail -n 1)
check "  observe -o json: source.namespace/pod_name good/good" \
	eval 'contains "$hub" "\"namespace\":\"good\"" && contains "$hub" "\"pod_name\":\"good\""'

# trace SRC : `fibril policy trace` on n1, SRC -> srv/srv; output in $T, exit status in $TRC
trace() {
	TRC=0
	T=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" policy trace --src "$1" --dst srv/srv --dport "$PORT/tcp" 2>&1) ||
		TRC=$?
}
shows() { grep -Eq -- "$1" <<<"$T" || { echo "  no /$1/ in:"; sed 's/^/    /' <<<"$T"; return 1; }; }

trace "${MN_POD_IP[good]}"
check "trace from good's IP (on n2): ALLOWED, exit 0 ($TRC)" eval 'test "$TRC" = 0 && shows "Final verdict: ALLOWED"'
check "  the source is good's real identity $GOOD and its pod, from the ipcache (not world)" \
	eval 'shows "^Tracing ${MN_POD_IP[good]} \(good/good on node [^,]+, identity $GOOD, from the ipcache\) -> " && ! grep -q "identity 2, world" <<<"$T"'
check "  allowed by the rule the flows name" shows "allowed by: CiliumNetworkPolicy srv/srv-from-good rule 0 ingress peer 0"
trace good/good
check "trace from the remote pod's name good/good: ALLOWED, exit 0 ($TRC)" \
	eval 'test "$TRC" = 0 && shows "Final verdict: ALLOWED" && shows "identity $GOOD, from the ipcache"'
trace "${MN_POD_IP[bad]}"
check "trace from bad's IP: DENIED with its identity $BAD, exit 1 ($TRC)" \
	eval 'test "$TRC" = 1 && shows "Final verdict: DENIED" && shows "bad/bad on node [^,]+, identity $BAD"'
trace bad/bad
check "trace from bad/bad: DENIED, exit 1 ($TRC)" eval 'test "$TRC" = 1 && shows "Final verdict: DENIED"'
trace 198.51.100.7
check "trace from an address no node holds: world, DENIED, exit 1 ($TRC)" \
	eval 'test "$TRC" = 1 && shows "identity 2, world" && shows "Final verdict: DENIED"'
TRC=0
T=$("$CLI" -s "${MN_DIR[n1]}/fibril.sock" -o json policy trace --src "${MN_POD_IP[good]}" --dst srv/srv \
	--dport "$PORT/tcp" 2>&1) || TRC=$?
check "trace -o json from good's IP: allowed, the identity in src, exit 0 ($TRC)" \
	eval 'test "$TRC" = 0 && shows "\"verdict\": *\"allowed\"" && shows "identity $GOOD"'
# the API itself (curl on the socket, no CLI): an address of another node's
# pod is resolved by the policy module through the nodes capability's
# ipcache_pod
api_trace() { mn_json n1 "/v1/policy/trace?src=$1&dst=srv/srv&dport=$PORT/tcp" "j.get('verdict'), j.get('src'), j.get('error')"; }
A=$(api_trace "${MN_POD_IP[good]}")
check "GET /v1/policy/trace?src=<good's IP>: allowed, good/good with identity $GOOD from the ipcache ($A)" \
	eval 'contains "$A" "('"'"'allowed'"'"'" && contains "$A" "good/good on node" && contains "$A" "identity $GOOD)"'
A=$(api_trace "${MN_POD_IP[bad]}")
check "GET /v1/policy/trace?src=<bad's IP>: denied, bad/bad with identity $BAD ($A)" \
	eval 'contains "$A" "('"'"'denied'"'"'" && contains "$A" "bad/bad on node" && contains "$A" "identity $BAD)"'
A=$(api_trace 198.51.100.7)
check "GET /v1/policy/trace?src=<an address no node holds>: world, denied ($A)" \
	eval 'contains "$A" "('"'"'denied'"'"'" && contains "$A" "identity 2, world"'
A=$(api_trace good/good)
check "GET /v1/policy/trace?src=good/good (another node's pod by name): a 400 that says to give its address ($A)" \
	contains "$A" "give its address"
# Hubble's GetNodes on n1's gRPC socket (the generated client): this node
# connected, the other one by name and node IP, its state unknown (its
# hubble-lite is not asked; Hubble's agent without Relay answers
# UNIMPLEMENTED)
if /usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null; then
	GN=$(HUBBLE_PROTO_DIR="$top_srcdir/modules/hubble-lite/proto" /usr/bin/python3 \
		"$top_srcdir/tests/integration/hubble_grpc_client.py" "unix://${MN_DIR[n1]}/run/hubble.sock" nodes 2>&1 || true)
	echo "  GetNodes on n1: $GN"
	GNS=$(/usr/bin/python3 -c 'import json, sys
r = json.loads(sys.argv[1])
print(" ".join(sorted("%s=%s@%s" % (n["name"], n.get("state", "UNKNOWN_NODE_STATE"), n.get("address", "").split(":")[0]) for n in r["nodes"])))' "$GN" 2>&1 || true)
	N2IP=${MN_IP[n2]}
	check "GetNodes on n1 lists n1 connected and its peer n2 ($N2IP), state unknown ($GNS)" \
		eval 'contains "$GNS" "n1=NODE_CONNECTED@" && contains "$GNS" "n2=UNKNOWN_NODE_STATE@$N2IP"'
else
	fail "python3-grpcio and python3-grpc-tools are installed (scripts/deps.sh)"
fi
finish
