# tests/integration/endpoint_common.sh - helpers of the endpoint module's
# tests (endpoint.sh, endpoint_restore.sh, endpoint_k8s.sh); source after
# tests/lib/common.sh. A "node" is a network namespace the agent runs in
# (ip netns exec); a "pod" is a namespace with eth0, whose veth peer (the
# host side, lxc...) is in the node namespace, so host-ifindex is real.
# Everything is named with the test's PID and removed on exit.

[ "$(id -u)" = 0 ] || skip_or_fail "needs root (network namespaces, root-owned modules)"
for tool in ip curl python3; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
for m in ipam-cluster-pool ipam-api endpoint; do
	[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built (configured without it?)"
done

NODE=fibep-$$-node
NODE_NETNS=/run/netns/$NODE
POD_NAMESPACES=()
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for m in ipam-cluster-pool ipam-api endpoint; do
	install -m 0644 "$top_builddir/.libs/$m.so" "$mods/$m.so"
done

ep_cleanup() {
	local rc=$? ns
	set +e # else "(exit $rc)" below ends a failed test here, its work dir left behind
	if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
		kill -KILL "$AGENT_PID" 2>/dev/null || true
		wait "$AGENT_PID" 2>/dev/null || true
	fi
	AGENT_PID=""
	for ns in "${POD_NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	ip netns del "$NODE" 2>/dev/null || true
	(exit "$rc")
	cleanup
}
trap ep_cleanup EXIT INT TERM

ip netns add "$NODE"
ip -n "$NODE" link set lo up

CIDR4=10.77.0.0/22
CIDR6=fd00:77::/112
NODE_ARGS=(--set "ipam-cluster-pool.node-cidr=$CIDR4,$CIDR6")

# start_node_agent [args...] : the agent in the node namespace; waits for its socket
start_node_agent() {
	local args
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	echo "---- agent start $(date +%T.%N)" >>"$WORK/agent.log"
	ip netns exec "$NODE" "$AGENT" "${args[@]}" "${NODE_ARGS[@]}" "$@" >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	local rc=0
	wait_alive "$AGENT_PID" 20 test -S "$WORK/fibril.sock" || rc=$?
	[ "$rc" = 0 ] && return 0
	if [ "$rc" = 2 ]; then AGENT_PID=""; else echo "agent did not open its socket within 20 s" >&2; fi
	tail -20 "$WORK/agent.log"
	return 1
}

# the log of the last agent run
last_log() { awk '/^---- agent start/ {buf=""; next} {buf = buf $0 "\n"} END {printf "%s", buf}' "$WORK/agent.log"; }

# make_pod NAME HOSTIF : a pod namespace fibep-$$-NAME with eth0, host side
# HOSTIF in the node; sets POD_NETNS, HOST_IFINDEX, HOST_MAC, POD_MAC
make_pod() {
	local ns=fibep-$$-$1 hostif=$2
	ip netns add "$ns"
	POD_NAMESPACES+=("$ns")
	ip -n "$NODE" link add "$hostif" type veth peer name eth0 netns "$ns"
	ip -n "$NODE" link set "$hostif" up
	ip -n "$ns" link set eth0 up
	POD_NETNS=/run/netns/$ns
	HOST_IFINDEX=$(ip netns exec "$NODE" cat "/sys/class/net/$hostif/ifindex")
	HOST_MAC=$(ip netns exec "$NODE" cat "/sys/class/net/$hostif/address")
	POD_MAC=$(ip netns exec "$ns" cat /sys/class/net/eth0/address)
}

# body CID NETNS HOSTIF IFINDEX MAC HOSTMAC IPV4 IPV6 PODNS PODNAME LABELS-JSON [IFNAME]
# (empty IPV4/IPV6/PODNS/PODNAME/LABELS are left out)
body() {
	python3 - "$@" <<'EOF'
import json, sys
a = sys.argv[1:] + [""] * 12
b = {"container-id": a[0], "ifname": a[11] or "eth0", "netns": a[1], "host-ifname": a[2],
     "host-ifindex": int(a[3]), "mac": a[4], "host-mac": a[5]}
if a[6]: b["ipv4"] = a[6]
if a[7]: b["ipv6"] = a[7]
if a[8]: b["pod-namespace"] = a[8]
if a[9]: b["pod-name"] = a[9]
if a[10]: b["labels"] = json.loads(a[10])
print(json.dumps(b))
EOF
}

# req METHOD PATH [curl args...] : prints the HTTP status; the body is in $WORK/body
req() {
	local method=$1 path=$2
	shift 2
	api -X "$method" -o "$WORK/body" -w '%{http_code}' "$@" "http://x$path" || true
}
resp() { cat "$WORK/body"; }

# expect WHAT METHOD PATH STATUS NEEDLE [curl args...]
expect() {
	local what=$1 method=$2 path=$3 status=$4 needle=$5 got
	shift 5
	got=$(req "$method" "$path" "$@")
	if [ "$got" = "$status" ] && { [ -z "$needle" ] || contains "$(resp)" "$needle"; }; then
		pass "$what"
	else
		fail "$what (HTTP $got, expected $status: $(resp))"
	fi
}

# jq_py EXPR : evaluates a python expression with j = the last body as JSON (prints it)
jq_py() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$WORK/body"; }
# json_ok EXPR : succeeds when EXPR is true for the last body
json_ok() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$WORK/body"; }

# the agent's RSS in kB
agent_rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$AGENT_PID/status"; }
