# shellcheck shell=bash
# shellcheck disable=SC2034 # A, B, ADDR, NS, SOCK, TCP_PORT are read by the tests
# tests/lib/flowpods.sh - the set-up the flow stream and web page tests
# share (sourced after tests/lib/common.sh and tests/cni/lib.sh): an agent
# in a node namespace with ipam, endpoint, datapath (trace events on),
# policy and hubble-lite, its TCP listener on 127.0.0.1:$TCP_PORT there;
# pods a and b (namespace team, labels app=a/app=b) through fibril-cni; a
# policy that lets b into a on UDP 7000 only; a UDP listener on a:7000;
# helpers for traffic of known shape. BG holds background pids killed on
# exit.

BG=()
cni_test_cleanup() {
	local p
	for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null; done
}

# flowpods_start [agent --set args...]
flowpods_start() {
	local mods=(ipam-api ipam-cluster-pool endpoint datapath policy hubble-lite) pod code
	cni_prereqs "${mods[@]}"
	command -v python3 >/dev/null || skip_or_fail "python3 is not installed"
	cni_modules "$WORK/mods" "${mods[@]}"
	netns_add "$NODE_NS"
	TCP_PORT=$((20000 + $$ % 20000))
	start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.12.0/24 \
		--set datapath.trace-events=true --set agent.api-tcp-listen="127.0.0.1:$TCP_PORT" "$@" ||
		{ fail "the agent starts"; finish; }
	SOCK=$WORK/fibril.sock
	local conf='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'$SOCK'"}'
	declare -gA ADDR NS
	for pod in a b; do
		NS[$pod]="fpod-$$-$pod"
		netns_add "${NS[$pod]}"
		ip netns exec "${NS[$pod]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null
		plugin ADD "$conf" CNI_CONTAINERID="fpod$$$pod" CNI_NETNS="/var/run/netns/${NS[$pod]}" \
			CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=team;K8S_POD_NAME=$pod"
		[ "$PRC" = 0 ] || { fail "ADD pod $pod: $(out) $(cat "$WORK/err")"; finish; }
		ADDR[$pod]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
		code=$(api -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
			-d '{"labels":["k8s:app='"$pod"'"]}' "http://x/v1/endpoint/container-id:fpod$$$pod")
		check "pod $pod is labelled app=$pod" test "$code" = 200 || cat "$WORK/patch.out"
	done
	A=${ADDR[a]} B=${ADDR[b]}
	cat >"$WORK/policy.json" <<'EOP'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "a-from-b-udp"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "a"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "b"}}],
                       "toPorts": [{"ports": [{"port": "7000", "protocol": "UDP"}]}]}]}}
EOP
	check "the policy is imported" contains "$("$CLI" --socket "$SOCK" policy import "$WORK/policy.json" 2>&1)" "Revision: 1"
	# a listens on UDP 7000 (else its ICMP port-unreachable answers would be flows too)
	ip netns exec "${NS[a]}" python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
s.bind(("0.0.0.0", 7000))
while True:
    s.recv(2048)' >/dev/null 2>&1 &
	BG+=($!)
	disown $!
	# a and b know each other's and the gateway's MAC before any follower
	# starts (so no ARP flow lands among the counted ones)
	ip netns exec "${NS[a]}" ping -c1 -W1 "$B" >/dev/null 2>&1 || true
	ip netns exec "${NS[b]}" ping -c1 -W1 "$A" >/dev/null 2>&1 || true
	# ... and so do the flows of those pings: the last of them (b's echo
	# request, dropped by a's policy) is in the ring before any follower
	# starts; a's listener is up
	wait_for 10 ring_has "protocol=icmp&from-pod=team/b&to-pod=team/a&verdict=DROPPED" ||
		fail "the flow of b's ping to a (dropped by policy) reaches the ring"
	wait_for 10 udp_listening a 7000 || fail "a listens on UDP 7000"
}

# ring_has QUERY : GET /v1/flows?QUERY has a flow
ring_has() { api "http://x/v1/flows?last=1&$1" 2>/dev/null | grep -q '"seq"'; }
# udp_listening POD PORT : a UDP socket is bound to PORT in the pod
udp_listening() { ip netns exec "${NS[$1]}" ss -Hlun "sport = :$2" | grep -q .; }

# udp FROM TO PORT [COUNT [RATE]] : datagrams from port 40000 + PORT % 1000
udp() {
	ip netns exec "${NS[$1]}" python3 -c '
import socket, sys, time
dst, port, n, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 40000 + port % 1000))
t0 = time.monotonic()
for i in range(n):
    s.sendto(b"x" * 16, (dst, port))
    if rate and i % 100 == 99:
        ahead = (i + 1) / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)  # sleep: paces the datagrams at RATE a second' "${ADDR[$2]}" "$3" "${4:-1}" "${5:-0}"
}

# tcp_dead FROM TO PORT : "refused" when nobody listens there
tcp_dead() {
	ip netns exec "${NS[$1]}" python3 -c '
import socket, sys
s = socket.socket(); s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print("error", e)' "${ADDR[$2]}" "$3"
}
