#!/usr/bin/env bash
# tests/integration/masq_optout.sh - a pod's opt-out of masquerading
# (issue 24): a node, pods pa and pb, and a "world" server on the underlay
# that logs the source of every UDP datagram. The promises: a pod labelled
# network.fibril.io/masquerade=false (PATCH of its endpoint's labels, as
# its Kubernetes pod's label arrives) leaves with its own address, the
# datapath's endpoint entry says so, and pa beside it is still seen as the
# node; with the label gone, pb is masqueraded again. And flows show the
# translated address (trace events on, hubble-lite): pa's flow to the
# world carries Hubble's IP.source_xlated = the node's address, in
# `fibril observe -o json` and in the gRPC Observer API (read by Debian's
# grpcio from the .proto).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes hubble-lite
/usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null ||
	skip_or_fail "python3-grpcio and python3-grpc-tools are not installed (scripts/deps.sh)"
export HUBBLE_PROTO_DIR="$top_srcdir/modules/hubble-lite/proto"
WORLD=$MN_UNDERLAY_PREFIX.200
mn_world_up "$WORLD"
world=("/usr/bin/python3" "$top_srcdir/tests/integration/masq_world.py")

mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
	--set nodes.retry=300ms --set datapath.trace-events=true \
	--set "hubble-lite.grpc-socket=$WORK/hubble.sock" || { fail "the agent of n1 starts"; finish; }
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"
mn_pod_add n1 pa || fail "pod pa"
mn_pod_add n1 pb || fail "pod pb"
NODE_IP=${MN_IP[n1]}
PB=${MN_POD_IP[pb]}

label() { # POD LABEL... : the endpoint's labels
	local pod=$1 code body
	shift
	body=$(printf '"%s",' "$@")
	code=$(mn_api n1 -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
		-d "{\"labels\":[${body%,}]}" "http://x/v1/endpoint/container-id:$MN_TAG$pod")
	[ "$code" = 200 ] || { echo "  PATCH $pod: $code $(cat "$WORK/patch.out")"; return 1; }
}
# SOURCE POD : a datagram of POD reaches the world from SOURCE (the
# world's count of datagrams from SOURCE goes up)
seen_as() {
	local before
	before=$(grep -c "^udp $1 " "$WLOG")
	ip netns exec "$(mn_pod_ns "$2")" "${world[@]}" send "$WORLD" "$PORT" >/dev/null 2>&1
	wait_for 3 test "$(grep -c "^udp $1 " "$WLOG")" -gt "$before"
}

check "pb is masqueraded before it opts out (the world sees $NODE_IP)" seen_as "$NODE_IP" pb
check "pb is labelled network.fibril.io/masquerade=false" \
	label pb "k8s:app=pb" "k8s:network.fibril.io/masquerade=false"
check "pb's traffic leaves with its own address $PB" wait_for 10 seen_as "$PB" pb
check "  pa beside it is still seen as the node ($NODE_IP)" seen_as "$NODE_IP" pa
PA=${MN_POD_IP[pa]}
# FLOWS-JSON-LINES SOURCE : the xlated sources of SOURCE's flows to the
# world ("none" for a flow without one: the pod's own egress trace)
xlated_of() {
	/usr/bin/python3 -c '
import json, sys
seen = set()
for line in open(sys.argv[1]):
    try:
        f = json.loads(line).get("flow", {})
    except ValueError:
        continue
    ip = f.get("IP", f.get("ip", {}))
    if ip.get("source") == sys.argv[2] and ip.get("destination") == sys.argv[3]:
        seen.add(ip.get("source_xlated", ip.get("sourceXlated")) or "none")
print(" ".join(sorted(seen)) or "no-flow")' "$1" "$2" "$WORLD"
}
# the events reach hubble-lite a moment after the packets: read again
# until pa's flow is in (or the wait ends)
cli_xlated() {
	"$CLI" -s "${MN_DIR[n1]}/fibril.sock" observe -o json --last 2000 >"$WORK/flows.json" 2>&1 || true
	grep -qw "${NODE_IP//./\\.}" <<<"$(xlated_of "$WORK/flows.json" "$PA")"
}
check "observe -o json: pa's flow to the world carries source_xlated $NODE_IP" wait_for 10 cli_xlated
echo "    observe -o json: pa's xlated sources: $(xlated_of "$WORK/flows.json" "$PA")"
/usr/bin/python3 "$top_srcdir/tests/integration/hubble_grpc_client.py" "unix://$WORK/hubble.sock" flows \
	--number 2000 >"$WORK/grpc.json" 2>&1 || true
check "gRPC GetFlows: pa's flow carries source_xlated $NODE_IP ($(xlated_of "$WORK/grpc.json" "$PA"))" \
	grep -qw "${NODE_IP//./\\.}" <<<"$(xlated_of "$WORK/grpc.json" "$PA")"
check "  dp_endpoints says so (fibril map dump)" bash -c \
	"'$CLI' -s '${MN_DIR[n1]}/fibril.sock' map dump dp_endpoints | grep -F '$PB' | grep -q no-masquerade"
check "the label taken away, pb is masqueraded again" label pb "k8s:app=pb"
check "  the world sees $NODE_IP again" wait_for 10 seen_as "$NODE_IP" pb
finish
