#!/usr/bin/env bash
# tests/integration/datapath.sh - the datapath module end to end (as root):
# a "node" netns runs the agent with ipam-cluster-pool (static node-cidr),
# datapath and the dpdrive test module; three "pods" (netns) hang off it on
# veths made here, as fibril-cni would wire them, and are registered through
# dpdrive. Checked: the host device and its gateways, the two programs on
# every veth (ingress: from-endpoint, egress: to-endpoint), the routes,
# pod<->pod ping and TCP over IPv4 and IPv6 with the node's forwarding off
# (only the program can move them), pod->gateway ping and a pod<->node TCP
# exchange (to-endpoint metrics; one conntrack entry counting both
# directions), the metrics reasons, conntrack entries and their GC, a spoofed
# source dropped with its reason and a drop event, kill -9 with traffic
# flowing while the agent is down, a restart reusing the pins and
# re-adopting the veths without losing a packet, endpoint_remove (also of a
# veth that is gone), refused upserts, Degraded health when the host device
# cannot be set up, the kernel refusing the programs (seccomp: the agent
# stays up and says why, pods keep their filters), and a start/upsert/stop
# run under valgrind.
. "$top_srcdir/tests/lib/common.sh"

if [ "$(id -u)" != 0 ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: CI runs as root; not skipping"; exit 1; }
	echo "SKIP: run as root (network namespaces, BPF)"
	exit 77
fi
for tool in ip tc nsenter python3 curl pkg-config; do
	command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed"; exit 1; }
done
for so in datapath ipam-cluster-pool; do
	[ -f "$top_builddir/.libs/$so.so" ] || { echo "FAIL: $so.so is not built"; exit 1; }
done

# ---- namespaces (unique per run) and their cleanup ------------------------------
NODE=fdpn$$
PODS=(fdpa$$ fdpb$$ fdpc$$)
HOSTIF=(lxca lxcb lxcc)      # host-side veths, inside the node netns only
ADDR4=(10.201.0.10 10.201.0.11 10.201.0.12)
ADDR6=(fd00:201::10 fd00:201::11 fd00:201::12)
EPID=(10 11 12)
IDENT=(256 257 258)
BG_PIDS=()
dp_cleanup() {
	local rc=$? ns p
	set +e
	for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for ns in "${PODS[@]}" "$NODE"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	(exit "$rc")
	cleanup
}
trap dp_cleanup EXIT INT TERM

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in datapath ipam-cluster-pool; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done
# shellcheck disable=SC2046,SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
	-Wno-unused-parameter ${SAN_CFLAGS:-} -I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) \
	-o "$mods/dpdrive.so" "$top_srcdir/tests/modules/dpdrive.c" \
	-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
chmod 0644 "$mods/dpdrive.so"

# ---- helpers ------------------------------------------------------------------------------
ip netns add "$NODE"
ip -n "$NODE" link set lo up
innode() { nsenter --net="/run/netns/$NODE" "$@"; }
inpod() { local i=$1; shift; ip netns exec "${PODS[$i]}" "$@"; }
fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
jget() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null || echo "?"; }
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }
# wait_for SECONDS COMMAND... : here, tests/lib/common.sh's with the command's output discarded
wait_for() { wait_quiet "$@"; }

AGENT_OPTS=(--set ipam-cluster-pool.node-cidr=10.201.0.0/24,fd00:201::/120
	--set datapath.conntrack-timeout-other=20s --set datapath.conntrack-timeout-tcp=20s
	--set datapath.conntrack-timeout-tcp-closing=12s --set datapath.conntrack-gc-interval=300ms
	--set datapath.conntrack-refresh-interval=1s)
AGENT_WRAP=() # a command the agent runs under (section 8b)
# node_agent [args...] : the agent in the node netns (its mount namespace
# stays the host's, so the pins are on the real bpffs and outlive it)
node_agent() {
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	echo "--- start $*" >>"$WORK/agent.log"
	# nsenter execs the agent: $! is the agent itself
	nsenter --net="/run/netns/$NODE" "${AGENT_WRAP[@]}" "$AGENT" "${args[@]}" "${AGENT_OPTS[@]}" "$@" \
		>>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	# the API opens once the programs are in (a first start verifies them)
	wait_alive "$AGENT_PID" 120 test -S "$WORK/fibril.sock" && return 0
	cat "$WORK/agent.log"
	return 1
}

# make_pod I : netns, veth into the node, address/32 (/128) and routes as fibril-cni sets them
make_pod() {
	local i=$1 p=${PODS[$1]} h=${HOSTIF[$1]}
	ip netns add "$p"
	ip -n "$NODE" link add "$h" type veth peer name eth0 netns "$p"
	ip -n "$p" link set lo up
	ip -n "$p" link set eth0 up
	ip -n "$NODE" link set "$h" up
	ip -n "$p" addr add "${ADDR4[$i]}/32" dev eth0
	ip -n "$p" route add "$GW4" dev eth0 scope link
	ip -n "$p" route add default via "$GW4"
	ip -n "$p" addr add "${ADDR6[$i]}/128" dev eth0 nodad
	ip -n "$p" -6 route add "$GW6" dev eth0
	ip -n "$p" -6 route add default via "$GW6"
}

# upsert I [extra json] : register pod I through dpdrive; prints the HTTP status
upsert() {
	local i=$1 extra=${2:-}
	local mac hmac
	mac=$(mac_of eth0 -n "${PODS[$i]}")
	hmac=$(mac_of "${HOSTIF[$i]}" -n "$NODE")
	api -o "$WORK/upsert.out" -w '%{http_code}' -X PUT \
		-d "{\"host-ifname\":\"${HOSTIF[$i]}\",\"mac\":\"$mac\",\"host-mac\":\"$hmac\",\"ipv4\":\"${ADDR4[$i]}\",\"ipv6\":\"${ADDR6[$i]}\",\"id\":${EPID[$i]},\"identity\":${IDENT[$i]}$extra}" \
		"http://x/v1/test/datapath/${PODS[$i]}"
}

ping_ok() { inpod "$1" ping -c "${3:-2}" -i 0.2 -W 1 "$2" >/dev/null 2>&1; }
ping_fails() { ! inpod "$1" ping -c 2 -i 0.2 -W 1 "$2" >/dev/null 2>&1; }
metric() { # metric REASON -> packets from endpoints with that reason
	jget "$(api http://x/v1/datapath)" "j['packets-from-endpoints'].get('$1', 0)"
}
metric_to() { # metric_to REASON -> packets to endpoints with that reason
	jget "$(api http://x/v1/datapath)" "j['packets-to-endpoints'].get('$1', 0)"
}
filter_prog() { # filter_prog HOSTIF [ingress|egress] -> the program id of our filter there, or ""
	tc -n "$NODE" filter show dev "$1" "${2:-ingress}" 2>/dev/null |
		sed -n 's/.*handle 0xf1b1 .* id \([0-9]*\) .*/\1/p' | head -n 1
}
prog_id() { jget "$(api http://x/v1/datapath)" 'j["program-id"]'; }
prog_id_egress() { jget "$(api http://x/v1/datapath)" 'j["program-id-egress"]'; }
# prog_loaded : the agent's programs are loaded (a start loads them on a
# worker; an API call meanwhile waits for the load, which on a loaded
# machine may take longer than api's 10 s)
prog_loaded() { local p; p=$(prog_id); [ "$p" != "?" ] && [ "$p" != 0 ]; }
# ct_counts TUPLE -> "TX RX" packets of the conntrack entry whose key is TUPLE
ct_counts() {
	fib map dump dp_conntrack | grep -F -- "$1 " |
		sed -n 's/.* tx=\([0-9]*\) pkts.* rx=\([0-9]*\) pkts.*/\1 \2/p' | head -n 1
}
# contains_all HAYSTACK NEEDLE... : every needle is in it
contains_all() {
	local hay=$1 n
	shift
	for n in "$@"; do contains "$hay" "$n" || return 1; done
}

cat >"$WORK/tcp.py" <<'EOF'
# tcp.py server PORTFILE [v6] | client HOST PORT : one echo exchange
# tcp.py holdclient HOST PORT SECONDS : the exchange (3 round trips), then
# the connection stays open SECONDS before the client closes it
import socket, sys, time
if sys.argv[1] == "holdclient":
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=3)
    print(c.getsockname()[1], flush=True)
    for i in range(3):
        c.sendall(b"hold-%d" % i)
        c.recv(100)
    print("done", flush=True)
    time.sleep(float(sys.argv[4]))  # sleep: the connection is held open this long
    c.close()
    sys.exit(0)
if sys.argv[1] == "server":
    fam = socket.AF_INET6 if len(sys.argv) > 3 else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", 0))
    s.listen(4)
    open(sys.argv[2] + ".tmp", "w").write(str(s.getsockname()[1]))
    import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    while True:
        c, _ = s.accept()
        while True:  # echo until the client closes (one exchange: client/tcp.py)
            data = c.recv(100)
            if not data:
                break
            c.sendall(b"echo:" + data)
            if data == b"hello-datapath":
                break
        c.close()
else:
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=3)
    c.sendall(b"hello-datapath")
    print(c.recv(100).decode())
    c.close()
EOF
cat >"$WORK/spoof.py" <<'EOF'
# spoof.py IFNAME SRC_MAC DST_MAC SRC_IP DST_IP : one UDP frame with a forged source
import socket, struct, sys
ifname, smac, dmac, sip, dip = sys.argv[1:6]
mac = lambda m: bytes.fromhex(m.replace(":", ""))
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF
payload = b"spoofed!"
udp = struct.pack("!HHHH", 40000, 9, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                 socket.inet_aton(sip), socket.inet_aton(dip))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
s.send(mac(dmac) + mac(smac) + b"\x08\x00" + ip + udp)
EOF

# ---- 1. start: host device, gateways, maps ---------------------------------------------
node_agent
check "the agent starts with ipam-cluster-pool, datapath and dpdrive" kill -0 "$AGENT_PID"
NODEJ=$(api http://x/v1/test/datapath-node)
GW4=$(jget "$NODEJ" 'j["gateway4"]')
GW6=$(jget "$NODEJ" 'j["gateway6"]')
check "node(): gateways of both pools (got $GW4, $GW6)" test "$GW4" = 10.201.0.1 -a "$GW6" = fd00:201::1
HOSTDEV=$(ip -n "$NODE" -br addr show dev fibril_host 2>&1 || true)
check "fibril_host is up and holds 10.201.0.1/32 and fd00:201::1/128" \
	contains_all "$HOSTDEV" "UP" "10.201.0.1/32" "fd00:201::1/128"
MAPS=$(fib map list 2>&1)
for m in dp_endpoints dp_ipcache dp_conntrack dp_ct_any dp_frags dp_evlimit dp_metrics dp_events dp_config \
	dp_policy dp_policy_ep; do
	check "map $m is created and listed" contains "$MAPS" "$m"
done
check "ipcache: the gateway is the host" grep -Eq '^10\.201\.0\.1/32 +identity=1 \(host\)' <<<"$(fib map dump dp_ipcache)"
check "ipcache: 0.0.0.0/0 and ::/0 are world" \
	test "$(fib map dump dp_ipcache | grep -c 'identity=2 (world)')" -eq 2
# interface 4's batch: 3,000 /32s in one call, each with its tunnel endpoint;
# a batch with one bad entry writes nothing
BATCH=$(api -X PUT "http://x/v1/test/datapath-ipcache-batch?first=10.77.0.1&count=3000&identity=4242&tunnel=172.20.9.9")
check "ipcache_upsert_batch: 3,000 entries written ($BATCH)" test "$BATCH" = '{"done":3000}'
IPC=$(fib map dump dp_ipcache)
check "ipcache_upsert_batch: all 3,000 in dp_ipcache with identity and tunnel endpoint" test \
	"$(grep -cE '^10\.77\.[0-9]+\.[0-9]+/32 +identity=4242 .*tunnel-endpoint=172\.20\.9\.9' <<<"$IPC")" -eq 3000
check "ipcache_upsert_batch: the last one is 10.77.11.184" grep -q '^10\.77\.11\.184/32 ' <<<"$IPC"
CODE=$(api -o /dev/null -w '%{http_code}' -X PUT \
	"http://x/v1/test/datapath-ipcache-batch?first=10.78.0.1&count=10&identity=4243&tunnel=172.20.9.9&bad=5")
check "ipcache_upsert_batch: an entry of family 9 refuses the batch (got $CODE)" test "$CODE" = 400
check "ipcache_upsert_batch: nothing of the refused batch is written" \
	test -z "$(fib map dump dp_ipcache | grep '^10\.78\.')"
# the batch's structs grow by the SDK's rule, like ipcache_upsert_entry's
# (fibril_struct_copy_in): a caller built against a newer SDK (entries 8
# bytes longer) is taken while the bytes this datapath does not know are
# zero, refused (E2BIG, nothing written) when one is set; an older, shorter
# struct (up to identity: no tunnel endpoint) is read with the rest as zero;
# an entry whose sz differs from entry 0's refuses the batch
ESZ=48 # sizeof(struct fibril_datapath_ipcache_entry) (SDK 1.10: with its source)
BATCH=$(api -X PUT "http://x/v1/test/datapath-ipcache-batch?first=10.79.0.1&count=20&identity=4244&tunnel=172.20.9.9&stride=$((ESZ + 8))")
check "ipcache_upsert_batch: longer entries with zero tail bytes are taken ($BATCH)" test "$BATCH" = '{"done":20}'
OUT=$(api -w ' %{http_code}' -X PUT "http://x/v1/test/datapath-ipcache-batch?first=10.80.0.1&count=20&identity=4245&tunnel=172.20.9.9&stride=$((ESZ + 8))&junk=1")
check "ipcache_upsert_batch: a non-zero byte past the known struct refuses the batch (413, names it: $OUT)" \
	eval '[[ $OUT == *"non-zero byte"*" 413" ]]'
OUT=$(api -w ' %{http_code}' -X PUT "http://x/v1/test/datapath-ipcache-batch?first=10.81.0.1&count=20&identity=4246&tunnel=172.20.9.9&mismatch=7")
check "ipcache_upsert_batch: an entry whose sz differs from entry 0's refuses the batch ($OUT)" \
	eval '[[ $OUT == *"entry 7 of the batch has sz"*" 400" ]]'
check "ipcache_upsert_batch: nothing of the refused batches is written" \
	test -z "$(fib map dump dp_ipcache | grep -E '^10\.(80|81)\.')"
BATCH=$(api -X PUT "http://x/v1/test/datapath-ipcache-batch?first=10.82.0.1&count=20&identity=4247&tunnel=172.20.9.9&stride=28")
check "ipcache_upsert_batch: shorter (older) entries are taken ($BATCH)" test "$BATCH" = '{"done":20}'
IPC=$(fib map dump dp_ipcache)
check "ipcache_upsert_batch: the shorter entries read no tunnel endpoint, the longer ones theirs" \
	eval 'grep -qE "^10\.82\.0\.20/32 +identity=4247" <<<"$IPC" && ! grep -E "^10\.82\." <<<"$IPC" | grep -q tunnel-endpoint && grep -qE "^10\.79\.0\.20/32 +identity=4244 .*tunnel-endpoint=172\.20\.9\.9" <<<"$IPC"'
check "healthz is 200" test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200

# ---- 2. pods -----------------------------------------------------------------------------------
for i in 0 1 2; do
	make_pod "$i"
	code=$(upsert "$i")
	check "upsert ${PODS[$i]} -> 200 (got $code: $(cat "$WORK/upsert.out"))" test "$code" = 200
done
PROG=$(prog_id)
for i in 0 1 2; do
	check "${HOSTIF[$i]}: our filter runs the one loaded program (id $PROG)" \
		test "$(filter_prog "${HOSTIF[$i]}")" = "$PROG"
done
PROG_EG=$(prog_id_egress)
check "a second (to-endpoint) program is loaded (ids $PROG, $PROG_EG)" \
	test "$PROG_EG" != "?" -a "$PROG_EG" != 0 -a "$PROG_EG" != "$PROG"
for i in 0 1 2; do
	check "${HOSTIF[$i]}: tc filter show ... egress shows the to-endpoint program (id $PROG_EG)" \
		test "$(filter_prog "${HOSTIF[$i]}" egress)" = "$PROG_EG"
done
check "tc names the egress program fibril_to_endpoint" \
	contains "$(tc -n "$NODE" filter show dev lxca egress)" "fibril_to_endp"
check "GET /v1/datapath: each endpoint's attached egress program is the loaded one" \
	test "$(jget "$(api http://x/v1/datapath)" 'sorted(set(e["attached-program-egress"] for e in j["endpoints"]))')" = "[$PROG_EG]" 
check "route 10.201.0.10/32 dev lxca, src the gateway" \
	contains "$(ip -n "$NODE" route show 10.201.0.10)" "dev lxca proto 241 scope link src 10.201.0.1"
check "route fd00:201::11/128 dev lxcb" contains "$(ip -n "$NODE" -6 route show fd00:201::11)" "dev lxcb proto 241"
check "dp_endpoints decodes the endpoint" \
	contains "$(fib map dump dp_endpoints)" "id=11 identity=257 ifindex="
check "the node does not forward: only the program can move pod traffic" \
	test "$(innode cat /proc/sys/net/ipv4/ip_forward)" = 0

# ---- 3. traffic ----------------------------------------------------------------------------------
fwd0=$(metric forwarded)
check "pod a -> pod b ping (IPv4)" ping_ok 0 10.201.0.11 3
check "pod b -> pod c ping (IPv4)" ping_ok 1 10.201.0.12
check "pod c -> pod a ping (IPv6)" ping_ok 2 fd00:201::10
check "pod a -> gateway ping (IPv4)" ping_ok 0 "$GW4"
check "pod b -> gateway ping (IPv6: the program answers the solicitation)" ping_ok 1 "$GW6"
inpod 1 python3 "$WORK/tcp.py" server "$WORK/port4" &
BG_PIDS+=($!)
inpod 2 python3 "$WORK/tcp.py" server "$WORK/port6" v6 &
BG_PIDS+=($!)
wait_for 20 test -s "$WORK/port4" && wait_for 20 test -s "$WORK/port6" || true
P4=$(cat "$WORK/port4" 2>/dev/null || echo 0)
P6=$(cat "$WORK/port6" 2>/dev/null || echo 0)
check "TCP pod a -> pod b:$P4 (IPv4)" \
	test "$(inpod 0 python3 "$WORK/tcp.py" client 10.201.0.11 "$P4" 2>&1)" = "echo:hello-datapath"
check "TCP pod a -> pod c:$P6 (IPv6)" \
	test "$(inpod 0 python3 "$WORK/tcp.py" client fd00:201::12 "$P6" 2>&1)" = "echo:hello-datapath"
# the conntrack dump right after the flows (they close: 5 s to the GC)
ping_ok 0 10.201.0.11 1
CT_TCP=$(fib map dump dp_conntrack)
CT_ANY=$(fib map dump dp_ct_any)
CT="$CT_TCP
$CT_ANY"
fwd1=$(metric forwarded)
check "metrics: 'forwarded' rose by at least 10 ($fwd0 -> $fwd1)" test "$fwd1" -ge $((fwd0 + 10))
check "metrics: 'to-stack' counted the gateway pings" test "$(metric to-stack)" -ge 4
check "metrics: 'nd-answered' counted the IPv6 gateway solicitation" test "$(metric nd-answered)" -ge 1
check "fibril map dump dp_metrics decodes reasons" \
	contains "$(fib map dump dp_metrics)" "from-endpoint forwarded"
check "conntrack: the ICMP flow a -> b, replied" contains "$CT" "ICMP 10.201.0.10:0 -> 10.201.0.11:0"
check "conntrack: the ICMP flow is in dp_ct_any, not in the TCP map dp_conntrack" \
	test -n "$(grep -F "ICMP 10.201.0.10:0 -> 10.201.0.11:0" <<<"$CT_ANY")" -a -z "$(grep ICMP <<<"$CT_TCP")"
check "conntrack: dp_conntrack holds only TCP flows" test -z "$(grep -- '->' <<<"$CT_TCP" | grep -v TCP)"
check "conntrack: the TCP flow to :$P4 with its flags" contains "$CT" "-> 10.201.0.11:$P4"
check "conntrack: the IPv6 TCP flow" contains "$CT" "-> [fd00:201::12]:$P6"
check "conntrack: replies were seen" contains "$CT" "replied"

# ---- 3b. to-endpoint: the node's stack delivering to a pod ------------------------------------
check "metrics: pod -> gateway ping replies counted as to-endpoint 'delivered'" \
	test "$(metric_to delivered)" -ge 4
check "fibril map dump dp_metrics decodes the to-endpoint direction" \
	contains "$(fib map dump dp_metrics)" "to-endpoint delivered"
innode python3 "$WORK/tcp.py" server "$WORK/portn" &
BG_PIDS+=($!)
wait_for 20 test -s "$WORK/portn" || true
PN=$(cat "$WORK/portn" 2>/dev/null || echo 0)
del0=$(metric_to delivered)
inpod 0 python3 "$WORK/tcp.py" holdclient "$GW4" "$PN" 3 >"$WORK/hold.out" 2>&1 &
HOLD_PID=$!
BG_PIDS+=($HOLD_PID)
wait_for 20 grep -q done "$WORK/hold.out" || true
HOLD_PORT=$(head -n 1 "$WORK/hold.out")
read -r CT_TX CT_RX <<<"$(ct_counts "TCP 10.201.0.10:$HOLD_PORT -> 10.201.0.1:$PN")"
check "conntrack: one entry for pod a:$HOLD_PORT -> node:$PN counts both directions (tx=${CT_TX:-none} rx=${CT_RX:-none})" \
	test "${CT_TX:-0}" -ge 4 -a "${CT_RX:-0}" -ge 4
check "conntrack: no second entry for the node's side of that flow" \
	test -z "$(fib map dump dp_conntrack | grep -F "TCP 10.201.0.1:$PN -> 10.201.0.10:$HOLD_PORT ")"
check "conntrack: the pod<->node flow is marked replied" \
	contains "$(fib map dump dp_conntrack | grep -F "10.201.0.10:$HOLD_PORT ")" "replied"
del1=$(metric_to delivered)
check "metrics: the node's TCP replies counted as to-endpoint 'delivered' ($del0 -> $del1)" \
	test "$del1" -ge $((del0 + 4))
wait "$HOLD_PID" || true
# (the dumps are read whole first: under pipefail, grep -q leaving early
# makes the dump's SIGPIPE the pipeline's status and the negation true)
gc_flows_gone() {
	local d
	d=$(fib map dump dp_conntrack; fib map dump dp_ct_any) || return 1
	! grep -q '10.201.0.1[0-2]\|fd00:201::1[0-2]' <<<"$d"
}
check "conntrack GC removes the idle flows (timeouts 12-20 s + 1 s refresh, GC every 300 ms)" wait_for 60 gc_flows_gone
# the pass deletes on the worker pool and adds its count back on the loop a
# moment later: the flows can be gone before the count is
gc_counted() { test "$(jget "$(api http://x/v1/datapath)" 'j["conntrack"]["gc-removed"]')" -ge 4; }
check "GC counted its removals" wait_for 10 gc_counted

# ---- 4. a spoofed source -------------------------------------------------------------------------
spoof0=$(metric drop:spoofed-source-ip)
inpod 0 python3 "$WORK/spoof.py" eth0 "$(mac_of eth0 -n "${PODS[0]}")" "$(mac_of lxca -n "$NODE")" \
	10.201.0.99 10.201.0.11
spoof1=$(metric drop:spoofed-source-ip)
check "a forged source address is dropped (spoofed-source-ip $spoof0 -> $spoof1)" \
	test "$spoof1" -eq $((spoof0 + 1))
DROPS=$(api 'http://x/v1/datapath/events?type=drop')
LXCA_IDX=$(ip -n "$NODE" -j link show lxca | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["ifindex"])')
SPOOF_EV=$(jget "$DROPS" '[e for e in j["events"] if e["src"] == "10.201.0.99" and e["dst"] == "10.201.0.11" and e["reason"] == "drop:spoofed-source-ip" and e["proto"] == 17 and e["dport"] == 9 and e["sport"] == 40000][0]["ifindex"]')
check "a drop event names the reason, the 5-tuple and the veth (ifindex $SPOOF_EV)" \
	test "$SPOOF_EV" = "$LXCA_IDX"
check "the drop event names its direction (from-endpoint)" \
	test "$(jget "$DROPS" '[e for e in j["events"] if e["src"] == "10.201.0.99"][0]["direction"]')" = from-endpoint
check "no trace events with trace-events off" test "$(jget "$DROPS" 'j["traces"]')" = 0
PROM=$(api http://x/metrics)
check "/metrics: the spoofed drop is in fibril_datapath_packets_total" contains "$PROM" \
	"fibril_datapath_packets_total{direction=\"from-endpoint\",reason=\"drop:spoofed-source-ip\"} $spoof1"
prom_value() { # prom_value SAMPLE-WITH-LABELS -> its value from $PROM (0 when absent)
	printf '%s\n' "$PROM" | awk -v s="$1" '$1 == s { v = $2 } END { print v + 0 }'
}
check "/metrics: drop events read from the ring buffer are counted" \
	test "$(prom_value 'fibril_datapath_events_total{type="drop"}')" -ge 1
check "/metrics: the endpoints in place" test "$(prom_value fibril_datapath_endpoints)" -ge 2

# ---- 4b. a frame whose IP header is not in the skb's linear part ------------------------------
# AF_PACKET with a virtio-net header (hdr_len 14) puts only the Ethernet
# header in the linear part of a frame over a page long: the program must
# pull the headers (bpf_skb_pull_data) before it can read them.
cat >"$WORK/paged.py" <<'EOF'
# paged.py IFNAME SRC_MAC DST_MAC SRC_IP DST_IP SPORT DPORT : one 5000-byte UDP
# frame with only its Ethernet header linear
import socket, struct, sys
ifname, smac, dmac, sip, dip, sport, dport = sys.argv[1:8]
mac = lambda m: bytes.fromhex(m.replace(":", ""))
payload = b"p" * 5000
udp = struct.pack("!HHHH", int(sport), int(dport), 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 7, 0x4000, 64, 17, 0,
                 socket.inet_aton(sip), socket.inet_aton(dip))
s = sum(struct.unpack("!10H", ip))
s = (s >> 16) + (s & 0xFFFF); s += s >> 16
ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
PACKET_VNET_HDR = 15
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.setsockopt(263, PACKET_VNET_HDR, 1)  # SOL_PACKET
s.bind((ifname, 0))
# virtio_net_hdr: flags 0, gso none, hdr_len 14 (little endian), no csum
vnet = struct.pack("<BBHHHH", 0, 0, 14, 0, 0, 0)
s.send(vnet + mac(dmac) + mac(smac) + b"\x08\x00" + ip + udp)
EOF
ip -n "$NODE" link set lxca mtu 9000
inpod 0 ip link set eth0 mtu 9000
inv0=$(metric drop:invalid-packet)
inpod 0 python3 "$WORK/paged.py" eth0 "$(mac_of eth0 -n "${PODS[0]}")" "$(mac_of lxca -n "$NODE")" \
	10.201.0.10 10.201.0.11 40123 7777 2>"$WORK/paged.err" || true
paged_tracked() { fib map dump dp_ct_any | grep -qF "UDP 10.201.0.10:40123 -> 10.201.0.11:7777 "; }
check "a paged frame (14 linear bytes) from pod a is parsed: its UDP flow :40123 -> :7777 is tracked $(cat "$WORK/paged.err")" \
	wait_for 3 paged_tracked
check "the paged frame is not dropped as invalid ($inv0 -> $(metric drop:invalid-packet))" \
	test "$(metric drop:invalid-packet)" = "$inv0"
inpod 0 ip link set eth0 mtu 1500
ip -n "$NODE" link set lxca mtu 1500

# ---- 5. refused upserts -------------------------------------------------------------------------
code=$(api -o "$WORK/bad.out" -w '%{http_code}' -X PUT \
	-d '{"host-ifname":"nosuch0","mac":"02:00:00:00:00:01","host-mac":"02:00:00:00:00:02","ipv4":"10.201.0.50","id":50,"identity":300}' \
	http://x/v1/test/datapath/ghost)
check "upsert on a missing veth: 404 naming it ($(cat "$WORK/bad.out"))" \
	test "$code" = 404 -a -n "$(grep 'does not exist' "$WORK/bad.out")"
code=$(api -o "$WORK/bad.out" -w '%{http_code}' -X PUT \
	-d "{\"host-ifname\":\"lxcc\",\"mac\":\"02:00:00:00:00:01\",\"host-mac\":\"02:00:00:00:00:02\",\"ipv4\":\"10.201.0.10\",\"id\":99,\"identity\":300}" \
	http://x/v1/test/datapath/thief)
check "upsert of another endpoint's address: 409 ($(cat "$WORK/bad.out"))" \
	test "$code" = 409 -a -n "$(grep 'belongs to endpoint 10' "$WORK/bad.out")"
check "the refused upserts changed nothing" contains "$(fib map dump dp_endpoints)" "id=10 identity=256"

# ---- 6. kill -9: traffic keeps flowing; restart re-adopts ----------------------------------------
OLDPROG=$PROG
KILLED_PID=$AGENT_PID
stop_agent KILL || true
check "kill -9: the agent is gone" test ! -e "/proc/$KILLED_PID" 
check "agent down: pod a -> pod b still pings (IPv4)" ping_ok 0 10.201.0.11 5
check "agent down: pod b -> pod c still pings (IPv6)" ping_ok 1 fd00:201::12 3
check "agent down: pod a -> gateway still pings" ping_ok 0 "$GW4" 3
check "agent down: the filters stay" test "$(filter_prog lxca)" = "$OLDPROG"
check "agent down: the egress filter stays" test "$(filter_prog lxca egress)" = "$PROG_EG"
# the program pins removed: this start loads a new instance and swaps it in
# (a restart with the pins in place reuses them: section 6c)
rm -f "$BPFFS_DIR"/dp_prog_*
node_agent
check "the agent restarts" kill -0 "$AGENT_PID"
wait_for 60 prog_loaded || true
MAPS=$(fib map list 2>&1)
NPINS=$(printf '%s\n' "$MAPS" | grep -c '^dp_')
check "restart: all $NPINS pins are reused (the 11 of this datapath at least)" \
	test "$(printf '%s\n' "$MAPS" | grep -c '^dp_.* reused')" -eq "$NPINS" -a "$NPINS" -ge 11
NEWPROG=$(prog_id)
check "restart: a new program instance ($OLDPROG -> $NEWPROG)" test "$NEWPROG" != "$OLDPROG" -a "$NEWPROG" != "?"
NEWPROG_EG=$(prog_id_egress)
check "restart: a new to-endpoint program instance ($PROG_EG -> $NEWPROG_EG)" \
	test "$NEWPROG_EG" != "$PROG_EG" -a "$NEWPROG_EG" != "?" -a "$NEWPROG_EG" != "$NEWPROG"
check "restart: the 3 endpoints of the last run are known" \
	test "$(jget "$(api http://x/v1/datapath)" 'len(j["endpoints"])')" = 3
inpod 0 ping -i 0.02 -c 150 -W 1 10.201.0.11 >"$WORK/ping.out" 2>&1 &
PING_PID=$!
BG_PIDS+=($PING_PID)
wait_for 10 grep -q 'bytes from' "$WORK/ping.out" || true # the pings go through before the filters are replaced
for i in 0 1 2; do
	code=$(upsert "$i")
	check "restart: upsert re-adopts ${HOSTIF[$i]} (got $code)" test "$code" = 200
	check "restart: ${HOSTIF[$i]} now runs the new program" test "$(filter_prog "${HOSTIF[$i]}")" = "$NEWPROG"
	check "restart: ${HOSTIF[$i]} egress now runs the new to-endpoint program ($PROG_EG -> $NEWPROG_EG)" \
		test "$(filter_prog "${HOSTIF[$i]}" egress)" = "$NEWPROG_EG"
done
wait "$PING_PID" || true
check "no packet lost while the filters were replaced ($(grep -o '[0-9]*% packet loss' "$WORK/ping.out"))" \
	grep -q ' 0% packet loss' "$WORK/ping.out"
check "restart: pod c -> pod a TCP" \
	test "$(inpod 2 python3 "$WORK/tcp.py" client 10.201.0.11 "$P4" 2>&1)" = "echo:hello-datapath"

# ---- 6c. a restart with the program pins in place reuses them: nothing verified, same ids -----
RUNPROG=$(prog_id)
RUNPROG_EG=$(prog_id_egress)
LOG_FROM=$(($(wc -l <"$WORK/agent.log") + 1))
stop_agent KILL || true
node_agent
check "reuse: the restart adopts the pinned programs (no verifier)" \
	contains "$(tail -n "+$LOG_FROM" "$WORK/agent.log")" "tc programs reused from their pins"
check "reuse: the same program ids ($RUNPROG, $RUNPROG_EG)" \
	test "$(prog_id) $(prog_id_egress)" = "$RUNPROG $RUNPROG_EG"
code=$(upsert 0)
check "reuse: upsert re-adopts lxca (got $code), its filters on the same programs" \
	test "$code $(filter_prog lxca) $(filter_prog lxca egress)" = "200 $RUNPROG $RUNPROG_EG"
check "reuse: pod a -> pod b still pings" ping_ok 0 10.201.0.11 3

# ---- 6b. an older agent's dp_metrics pin (a per-CPU hash keyed by {reason,
# direction}; now a per-CPU array): recreated at start, counting again ----------------------------
# (bpftool: a build dependency, it generates the skeletons)
stop_agent TERM || true
rm -f "$BPFFS_DIR/dp_metrics"
bpftool map create "$BPFFS_DIR/dp_metrics" type percpu_hash key 4 value 16 entries 1024 name dp_metrics
check "old layout: a per-CPU hash is pinned as dp_metrics" \
	contains "$(bpftool map show pinned "$BPFFS_DIR/dp_metrics")" "percpu_hash"
node_agent
check "old layout: the agent starts" kill -0 "$AGENT_PID"
wait_for 60 prog_loaded || true
check "old layout: dp_metrics is recreated" grep -Eq '^dp_metrics .*recreated' <<<"$(fib map list 2>&1)"
check "old layout: the pin is a per-CPU array now" \
	contains "$(bpftool map show pinned "$BPFFS_DIR/dp_metrics")" "percpu_array"
check "old layout: the other pins are reused" \
	test "$(fib map list 2>&1 | grep '^dp_' | grep -vc 'reused')" = 1
# the old programs count into the old map until the endpoints are adopted
for i in 0 1 2; do
	check "old layout: upsert re-adopts ${HOSTIF[$i]}" test "$(upsert "$i")" = 200
done
fwd0=$(metric forwarded)
check "old layout: pod a -> pod b pings" ping_ok 0 10.201.0.11 3
check "old layout: 'forwarded' counts again ($fwd0 -> $(metric forwarded))" test "$(metric forwarded)" -ge $((fwd0 + 3))
DUMP=$(fib map dump dp_metrics)
check "old layout: the dump decodes the slots in use, and only those" \
	test -n "$(grep 'from-endpoint forwarded' <<<"$DUMP")" -a -z "$(grep 'packets=0 ' <<<"$DUMP")"
check "old layout: the Prometheus series are there" \
	grep -q 'direction="from-endpoint",reason="forwarded"' <<<"$(api http://x/metrics)"

# ---- 7. endpoint_remove ---------------------------------------------------------------------------
code=$(api -o /dev/null -w '%{http_code}' -X DELETE "http://x/v1/test/datapath/${PODS[2]}")
check "remove pod c -> 200" test "$code" = 200
check "remove: the filter is gone from lxcc" test -z "$(filter_prog lxcc)"
check "remove: no filter is left on lxcc's egress either" \
	test -z "$(tc -n "$NODE" filter show dev lxcc egress 2>&1)"
check "remove: the routes are gone" \
	test -z "$(ip -n "$NODE" route show 10.201.0.12)" -a -z "$(ip -n "$NODE" -6 route show fd00:201::12)"
check "remove: dp_endpoints and dp_ipcache forgot it" \
	test -z "$(fib map dump dp_endpoints | grep '10.201.0.12\|fd00:201::12')" -a \
	-z "$(fib map dump dp_ipcache | grep '10.201.0.12\|fd00:201::12')"
check "remove: pod a can no longer reach pod c" ping_fails 0 10.201.0.12
check "remove: pod a still reaches pod b" ping_ok 0 10.201.0.11
ip -n "$NODE" link del lxcb
code=$(api -o "$WORK/del.out" -w '%{http_code}' -X DELETE "http://x/v1/test/datapath/${PODS[1]}")
check "remove of an endpoint whose veth is gone -> 200 ($(cat "$WORK/del.out"))" test "$code" = 200
check "remove: pod b's entries are gone too" test -z "$(fib map dump dp_endpoints | grep '10.201.0.11')"
check "one endpoint left" test "$(jget "$(api http://x/v1/datapath)" 'len(j["endpoints"])')" = 1
check "healthz is still 200" test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200
rc=0; stop_agent TERM || rc=$?
check "the agent stops cleanly (exit $rc)" test "$rc" = 0
check "no agent of this test is left running" test -z "$(pgrep -f -- "agent.module-dir=$WORK/" || true)"
check "stopped: pod a -> gateway still pings" ping_ok 0 "$GW4"

# ---- 8. Degraded when the host device cannot be set up ------------------------------------------
ip -n "$NODE" link add fdpbr type bridge
node_agent --set datapath.host-device=fdpbr
HZ=$(api -w '\n%{http_code}' http://x/v1/healthz)
check "a host device that is a bridge: healthz 503 naming why" \
	contains_all "$HZ" "device fdpbr exists and is a bridge link" "503"
stop_agent TERM || true

# ---- 8b. the kernel refuses the programs: the agent stays up, says why, changes nothing ------
# deny_prog_load runs the agent under a seccomp filter that fails
# bpf(BPF_PROG_LOAD) with EPERM, as a container without CAP_BPF sees it;
# maps, pins and netlink still work. Pod a's filters (the programs of the
# run in section 7, left attached) must keep serving it.
$CC -std=gnu11 -Wall -Wextra -Werror -o "$WORK/deny_prog_load" "$top_srcdir/tests/lib/deny_prog_load.c"
OLD_ING=$(filter_prog lxca ingress)
check "before: lxca still has an ingress filter from the last run (id $OLD_ING)" test -n "$OLD_ING"
LOG_FROM=$(($(wc -l <"$WORK/agent.log") + 1))
rm -f "$BPFFS_DIR"/dp_prog_* # nothing to reuse: the start must load
AGENT_WRAP=("$WORK/deny_prog_load")
node_agent
AGENT_WRAP=()
check "programs refused: the agent starts and serves its API" kill -0 "$AGENT_PID"
# /v1/datapath answers once the load has ended
DPJ=$(api --max-time 30 http://x/v1/datapath)
PERR=$(jget "$DPJ" 'j.get("program-error", "")')
check "programs refused: /v1/datapath names why (program-error: $PERR)" \
	contains_all "$PERR" "refused to load the tc programs" "Operation not permitted" "CAP_BPF"
check "programs refused: no program id" test "$(jget "$DPJ" 'j["program-id"]')" = 0
HZ=$(api -w '\n%{http_code}' http://x/v1/healthz)
check "programs refused: healthz 503, datapath degraded naming why" \
	contains_all "$HZ" "503" "degraded" "Operation not permitted"
check "programs refused: the maps are created and listed" contains "$(fib map list 2>&1)" dp_ipcache
check "programs refused: pod a keeps the last run's programs and still pings the gateway" \
	ping_ok 0 "$GW4"
code=$(upsert 0) || true
check "programs refused: an upsert fails naming why (got $code: $(cat "$WORK/upsert.out"))" \
	contains_all "$code $(cat "$WORK/upsert.out")" "tc program is not loaded" "Operation not permitted"
check "programs refused: the failed upsert leaves lxca's filter alone (id $(filter_prog lxca ingress))" \
	test "$(filter_prog lxca ingress)" = "$OLD_ING"
check "programs refused: pod a still pings the gateway after the failed upsert" ping_ok 0 "$GW4"
RUNLOG=$(tail -n "+$LOG_FROM" "$WORK/agent.log")
check "programs refused: the log names why" contains "$RUNLOG" "error datapath: the kernel refused to load"
check "programs refused: libbpf's messages are in the module's log, not raw on stderr" \
	test -z "$(grep -E '^libbpf|libbpf: libbpf:' <<<"$RUNLOG" || true)"
rc=0; stop_agent TERM || rc=$?
check "programs refused: the agent stops cleanly (exit $rc)" test "$rc" = 0
# the same node without the filter: everything comes back
node_agent
code=$(upsert 0) || true
check "programs allowed again: the upsert of pod a -> 200 (got $code)" test "$code" = 200
DPJ=$(api http://x/v1/datapath)
check "programs allowed again: no program-error, a program id" \
	test "$(jget "$DPJ" '"program-error" not in j and j["program-id"] > 0')" = True
check "programs allowed again: lxca's filter is the new program" \
	test "$(filter_prog lxca ingress)" = "$(jget "$DPJ" 'j["program-id"]')"
check "programs allowed again: healthz 200" \
	test "$(api -o /dev/null -w '%{http_code}' http://x/v1/healthz)" = 200
check "programs allowed again: pod a pings the gateway" ping_ok 0 "$GW4"
rc=0; stop_agent TERM || rc=$?
check "programs allowed again: the agent stops cleanly (exit $rc)" test "$rc" = 0

# ---- 9. valgrind: start, re-adopt an endpoint, serve, stop ----------------------------------------
if command -v valgrind >/dev/null && [ -z "${SAN_CFLAGS:-}" ]; then
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	# not through a function: $! must be valgrind itself (nsenter and libtool exec)
	nsenter --net="/run/netns/$NODE" "$top_builddir/libtool" --mode=execute valgrind --leak-check=full \
		--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--error-exitcode=99 --log-file="$WORK/vg.%p" "$AGENT" "${args[@]}" "${AGENT_OPTS[@]}" \
		>>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_for 60 test -S "$WORK/fibril.sock" || true
	if [ ! -S "$WORK/fibril.sock" ] && grep -qs "debuginfo reader" "$WORK"/vg.*; then
		# valgrind 3.19 cannot read clang's DWARF 5: not this module's fault
		echo "valgrind cannot read this build's debug info (clang DWARF 5?): stage not run"
		kill -KILL "$AGENT_PID" 2>/dev/null || true
		wait "$AGENT_PID" 2>/dev/null || true
		AGENT_PID=""
	else
		code=$(upsert 0) || true
		check "valgrind: upsert re-adopts lxca (got $code)" test "$code" = 200
		check "valgrind: traffic flows" ping_ok 0 "$GW4"
		api http://x/v1/datapath >/dev/null || true
		api http://x/v1/map/dp_conntrack >/dev/null || true
		api http://x/v1/datapath/events >/dev/null || true
		api -o /dev/null -X DELETE "http://x/v1/test/datapath/${PODS[0]}" || true
		rc=0; stop_agent TERM || rc=$?
		check "valgrind: no leaks, no errors (exit $rc)" test "$rc" -eq 0
		grep -h -E "definitely lost|ERROR SUMMARY" "$WORK"/vg.* || true
		[ "$rc" -eq 0 ] || grep -h -A25 -E '^==[0-9]+== [A-Z]' "$WORK"/vg.* | head -n 60
	fi
else
	echo "valgrind stage not run (no valgrind or a sanitizer build)"
fi

if [ "$FAILED" -ne 0 ]; then
	echo "---- agent log"
	tail -n 60 "$WORK/agent.log"
fi
finish
