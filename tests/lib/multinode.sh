# shellcheck shell=bash
# tests/lib/multinode.sh - a cluster of "nodes" on one machine for
# integration tests (source after tests/lib/common.sh): an underlay network
# namespace with a bridge (and one etcd listening on the bridge), and per
# node a network namespace joined to the bridge by a veth, with its own
# agent, state dir, run dir, API socket and bpffs dir; pods added through
# fibril-cni. Everything is named with this run's pid and removed on exit,
# whatever happened.
#
#   mn_require MODULE...         root, iproute2, etcd, the plugin and modules
#   mn_underlay_up               the underlay namespace and its bridge
#   mn_etcd_start                etcd on the bridge (MN_ETCD_ENDPOINT)
#   mn_etcdctl ARGS...           etcdctl against it
#   mn_node_add NAME INDEX       node namespace, eth0 on the underlay
#                                (MN_UNDERLAY_PREFIX.(10+INDEX)), forwarding on;
#                                MN_UNDERLAY_MTU (default 1500) on the underlay
#                                links; MN_UNDERLAY_PREFIX6 (e.g. fd00:fb::,
#                                default none) makes the underlay dual-stack:
#                                eth0 gets MN_UNDERLAY_PREFIX6(10+INDEX)/64
#                                too (MN_IP6[NAME]), IPv6 forwarding on
#   mn_modules DIR MODULE...     a root-owned module dir
#   mn_agent_start NAME MODDIR [agent args...]  the node's agent, healthy
#                                (the etcd's endpoint set when one was started)
#                                (MN_START_NOWAIT=1: started, not waited for)
#   mn_agent_kill NAME [SIGNAL]  stop it (default KILL), wait for it
#   mn_api NAME CURL-ARGS...     the node's API
#   mn_pod_add NODE POD [K8S-NS] a pod namespace on NODE through fibril-cni
#                                (its pod namespace K8S-NS, default
#                                "default"); its IPv4 address in MN_POD_IP[POD],
#                                its IPv6 one (if any) in MN_POD_IP6[POD]
#   mn_pod_del NODE POD          CNI DEL of the pod on NODE
#   mn_label NODE POD            PATCH the pod's endpoint to the labels app=POD
#                                (an identity of its own); fail() when refused
#   mn_ns NAME / mn_pod_ns POD   namespace names
#   mn_probe_from NETNS PORT TARGET...  ping and TCP-connect to PORT of every
#                                target from NETNS (tests/cni/nettest.py probe);
#                                the failures are printed
#   mn_listening POD PORT        wait until a TCP server listens on PORT in POD
#   mn_stream_start FROM TO PORT a steady TCP stream from pod FROM to pod TO
#                                (tests/cni/nettest.py send / recv), established
#                                when it returns
#   mn_stream_flows_on BYTES     wait (30 s at most) until another BYTES of the
#                                stream have arrived (the sender's pace, at most
#                                6.4 MB/s, makes that a window of BYTES/6.4 MB s
#                                at least); 1 when they did not
#   mn_stream_stop               end it; its statuses are in
#                                $WORK/send.status ("... reset=0 error=" when
#                                never reset) and $WORK/recv.status
#   mn_capture_start             a capture of the underlay (tests/lib/vxlan_capture.py:
#                                VXLAN frames with their VNI and inner addresses)
#   mn_capture_stop              end it; its JSON in MN_CAP
#   mn_cluster_up COUNT MODULE...  mn_require, the modules in $WORK/mods, the
#                                underlay, etcd, and nodes n1..nCOUNT
#   mn_world_add NAME ADDR...    a namespace (mn_ns NAME) that is no node, on
#                                the underlay bridge (MN_UNDERLAY_MTU) with the
#                                addresses ADDR (IPv4 /24, IPv6 /64), no route
#                                to the pods: "the world" beyond the cluster
#   mn_world_up ADDR...          the world "world" (WORLD_NS) with ADDR...,
#                                tests/integration/masq_world.py serving
#                                on all of them at a random PORT (20000..39999)
#                                and logging to WLOG
#   mn_serve POD PORT            tests/cni/nettest.py's TCP server on PORT in
#                                POD (what mn_probe_from connects to), killed on
#                                exit; listening when it returns (1 if not in 5 s)
#   mn_tcp_get POD ADDR PORT     a TCP connection from POD to ADDR:PORT (1 s at
#                                most) that reads mn_serve's greeting: prints
#                                "ok", "bad" (another answer) or "fail"
#   mn_udp_log POD PORT FILE     a UDP server in POD on PORT appending a line
#                                "PAYLOAD SENDER-IP" to FILE (emptied first) per
#                                datagram, listening when it returns (1 when
#                                not within 5 s)
#   mn_bg NETNS CMD...           CMD in the background in NETNS, killed on exit
#                                (a test's server); its pid in MN_BG_PID
#   mn_json NODE PATH EXPR       print python EXPR over j = the node's GET PATH
#   mn_routes_all NODE           NODE knows and routes every other node
MN_TAG="fmn$$"
MN_UNDERLAY_NS="$MN_TAG-u"
MN_UNDERLAY_PREFIX=${MN_UNDERLAY_PREFIX:-172.31.250}
MN_UNDERLAY_MTU=${MN_UNDERLAY_MTU:-1500}
MN_UNDERLAY_PREFIX6=${MN_UNDERLAY_PREFIX6:-}
MN_ETCD_ENDPOINT=""
MN_ETCD_PID=""
MN_NETNS_LIST=()
MN_NODES=()
MN_BG_PIDS=() # helpers the lib started (stream ends)
MN_STREAM_SENDER=""
MN_STREAM_RECEIVER=""
MN_CAPTURE="" # the underlay capture's pid, MN_CAP its JSON
MN_CAP=""
MN_BG_PID=""
declare -A MN_PID MN_DIR MN_IP MN_IP6 MN_POD_IP MN_POD_IP6 MN_POD_NODE

_mn_cleanup() {
	local rc=$?
	set +e
	local n
	for n in "${MN_NODES[@]}"; do
		if [ -n "${MN_PID[$n]:-}" ] && kill -0 "${MN_PID[$n]}" 2>/dev/null; then
			kill -KILL "${MN_PID[$n]}" 2>/dev/null
			wait "${MN_PID[$n]}" 2>/dev/null
		fi
		rm -rf "/sys/fs/bpf/$MN_TAG-$n"
	done
	[ "$(type -t mn_test_cleanup)" = function ] && mn_test_cleanup
	local p
	for p in "${MN_BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	if [ -n "$MN_ETCD_PID" ]; then
		kill -KILL "$MN_ETCD_PID" 2>/dev/null
		wait "$MN_ETCD_PID" 2>/dev/null
	fi
	local ns
	for ns in "${MN_NETNS_LIST[@]}"; do ip netns del "$ns" 2>/dev/null; done
	(exit "$rc")
	cleanup
}
trap _mn_cleanup EXIT INT TERM

mn_require() {
	[ "$(id -u)" = 0 ] || skip_or_fail "needs root (network namespaces, root-owned modules)"
	local tool
	for tool in ip etcd etcdctl python3 curl nsenter; do
		command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
	done
	[ -x "$top_builddir/fibril-cni" ] || skip_or_fail "fibril-cni is not built"
	local m
	for m in "$@"; do
		[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built (it is needed here)"
	done
}

_mn_netns_add() {
	ip netns add "$1"
	MN_NETNS_LIST+=("$1")
	ip -n "$1" link set lo up
}

mn_ns() { echo "$MN_TAG-$1"; }
mn_pod_ns() { echo "$MN_TAG-p-$1"; }

mn_underlay_up() {
	_mn_netns_add "$MN_UNDERLAY_NS"
	ip -n "$MN_UNDERLAY_NS" link add br0 mtu "$MN_UNDERLAY_MTU" type bridge
	ip -n "$MN_UNDERLAY_NS" addr add "$MN_UNDERLAY_PREFIX.1/24" dev br0
	[ -z "$MN_UNDERLAY_PREFIX6" ] || ip -n "$MN_UNDERLAY_NS" addr add "${MN_UNDERLAY_PREFIX6}1/64" dev br0 nodad
	ip -n "$MN_UNDERLAY_NS" link set br0 up
}

mn_etcdctl() {
	ip netns exec "$MN_UNDERLAY_NS" env ETCDCTL_API=3 etcdctl --endpoints="$MN_ETCD_ENDPOINT" \
		--dial-timeout=2s --command-timeout=5s "$@"
}

mn_etcd_start() {
	local dir=$WORK/etcd
	mkdir -p "$dir"
	MN_ETCD_ENDPOINT="http://$MN_UNDERLAY_PREFIX.1:2379"
	local peer="http://127.0.0.1:2380"
	ip netns exec "$MN_UNDERLAY_NS" env -u ETCD_ENDPOINT -u ETCD_PID etcd --name mn \
		--data-dir "$dir/data" --logger zap --log-outputs stderr \
		--listen-client-urls "$MN_ETCD_ENDPOINT" --advertise-client-urls "$MN_ETCD_ENDPOINT" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
		--initial-cluster "mn=$peer" --initial-cluster-state new >"$dir/etcd.log" 2>&1 &
	MN_ETCD_PID=$!
	wait_alive "$MN_ETCD_PID" 20 _quietly mn_etcdctl endpoint health && return 0
	tail -20 "$dir/etcd.log"
	return 1
}

mn_node_add() {
	local name=$1 idx=$2 ns
	ns=$(mn_ns "$name")
	_mn_netns_add "$ns"
	MN_NODES+=("$name")
	MN_IP[$name]="$MN_UNDERLAY_PREFIX.$((10 + idx))"
	MN_DIR[$name]="$WORK/node-$name"
	mkdir -p "${MN_DIR[$name]}"
	ip -n "$ns" link add eth0 mtu "$MN_UNDERLAY_MTU" type veth peer name "u$idx" mtu "$MN_UNDERLAY_MTU" \
		netns "$MN_UNDERLAY_NS"
	ip -n "$MN_UNDERLAY_NS" link set "u$idx" master br0 up
	ip -n "$ns" addr add "${MN_IP[$name]}/24" dev eth0
	if [ -n "$MN_UNDERLAY_PREFIX6" ]; then
		MN_IP6[$name]="${MN_UNDERLAY_PREFIX6}$((10 + idx))"
		ip -n "$ns" addr add "${MN_IP6[$name]}/64" dev eth0 nodad
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.forwarding=1
	fi
	ip -n "$ns" link set eth0 up
	ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
}

mn_modules() {
	local dir=$1 m
	shift
	mkdir -p "$dir"
	chmod 0755 "$dir"
	for m in "$@"; do install -m 0644 "$top_builddir/.libs/$m.so" "$dir/$m.so"; done
}

mn_api() {
	local name=$1
	shift
	curl -sS --max-time 10 --unix-socket "${MN_DIR[$name]}/fibril.sock" "$@"
}

mn_agent_start() {
	local name=$1 mods=$2 dir=${MN_DIR[$1]}
	shift 2
	rm -f "$dir/fibril.sock"
	# nsenter --net keeps the host's mounts (the pins outlive the agent)
	nsenter --net=/run/netns/"$(mn_ns "$name")" "$AGENT" --set "agent.module-dir=$mods" \
		--set "agent.socket=$dir/fibril.sock" --set "agent.state-dir=$dir/state" \
		--set "agent.run-dir=$dir/run" --set "agent.bpffs-dir=/sys/fs/bpf/$MN_TAG-$name" \
		--set "agent.node-name=$name" \
		${MN_ETCD_ENDPOINT:+--set "kvstore-etcd.endpoints=$MN_ETCD_ENDPOINT"} \
		"$@" >>"$dir/agent.log" 2>&1 &
	MN_PID[$name]=$!
	# MN_START_NOWAIT=1: return once started (two agents whose health
	# needs each other)
	[ -n "${MN_START_NOWAIT:-}" ] && return 0
	# healthy once its tc programs are in (a first start verifies them)
	wait_alive "${MN_PID[$name]}" 60 mn_healthy "$name" && return 0
	kill -0 "${MN_PID[$name]}" 2>/dev/null && echo "the agent of $name did not become healthy within 60 s" >&2
	tail -30 "$dir/agent.log"
	return 1
}

# mn_healthy NAME : the node's agent answers healthz 200
mn_healthy() {
	[ -S "${MN_DIR[$1]}/fibril.sock" ] &&
		[ "$(mn_api "$1" -o /dev/null -w '%{http_code}' http://x/v1/healthz 2>/dev/null)" = 200 ]
}

mn_agent_kill() {
	local name=$1 sig=${2:-KILL}
	[ -n "${MN_PID[$name]:-}" ] || return 0
	kill -"$sig" "${MN_PID[$name]}" 2>/dev/null || true
	wait "${MN_PID[$name]}" 2>/dev/null || true
	MN_PID[$name]=""
}

mn_pod_add() {
	local node=$1 pod=$2 podns=${3:-default} ns out
	ns=$(mn_pod_ns "$pod")
	_mn_netns_add "$ns"
	out=$(printf '{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"%s"}' \
		"${MN_DIR[$node]}/fibril.sock" |
		ip netns exec "$(mn_ns "$node")" env -i PATH="$PATH" CNI_COMMAND=ADD \
			CNI_CONTAINERID="$MN_TAG$pod" CNI_NETNS="/var/run/netns/$ns" CNI_IFNAME=eth0 \
			CNI_PATH="$top_builddir" CNI_ARGS="K8S_POD_NAMESPACE=$podns;K8S_POD_NAME=$pod" \
			"$top_builddir/fibril-cni") || { echo "ADD $pod on $node: $out" >&2; return 1; }
	MN_POD_IP[$pod]=$(python3 -c 'import json,sys; print([a["address"].split("/")[0] for a in json.loads(sys.argv[1])["ips"] if ":" not in a["address"]][0])' "$out")
	MN_POD_IP6[$pod]=$(python3 -c 'import json,sys; print(" ".join(a["address"].split("/")[0] for a in json.loads(sys.argv[1])["ips"] if ":" in a["address"]))' "$out")
	MN_POD_NODE[$pod]=$node
}

mn_label() {
	local code
	code=$(mn_api "$1" -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
		-d '{"labels":["k8s:app='"$2"'"]}' "http://x/v1/endpoint/container-id:$MN_TAG$2")
	[ "$code" = 200 ] || { fail "pod $2 is labelled app=$2"; cat "$WORK/patch.out"; }
}

mn_pod_del() {
	local node=$1 pod=$2
	printf '{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"%s"}' \
		"${MN_DIR[$node]}/fibril.sock" |
		ip netns exec "$(mn_ns "$node")" env -i PATH="$PATH" CNI_COMMAND=DEL \
			CNI_CONTAINERID="$MN_TAG$pod" CNI_NETNS="/var/run/netns/$(mn_pod_ns "$pod")" \
			CNI_IFNAME=eth0 CNI_PATH="$top_builddir" "$top_builddir/fibril-cni"
}

mn_probe_from() {
	local ns=$1 port=$2
	shift 2
	ip netns exec "$ns" python3 "$top_srcdir/tests/cni/nettest.py" probe "$port" "$@" \
		>"$WORK/probe.out" 2>&1 || { sed 's/^/  /' "$WORK/probe.out"; return 1; }
}

mn_listening() { wait_for 5 _mn_ss "$1" -Hltn "sport = :$2"; }
# _mn_ss POD SS-ARGS... : ss in the pod's namespace lists a socket
_mn_ss() { local pod=$1; shift; ip netns exec "$(mn_pod_ns "$pod")" ss "$@" | grep -q .; }

mn_stream_start() {
	local from=$1 to=$2 port=$3
	ip netns exec "$(mn_pod_ns "$to")" python3 "$top_srcdir/tests/cni/nettest.py" recv "$port" "$WORK/recv.status" &
	MN_STREAM_RECEIVER=$!
	MN_BG_PIDS+=($!)
	mn_listening "$to" "$port"
	ip netns exec "$(mn_pod_ns "$from")" python3 "$top_srcdir/tests/cni/nettest.py" send "${MN_POD_IP[$to]}" "$port" "$WORK/send.status" &
	MN_STREAM_SENDER=$!
	MN_BG_PIDS+=("$MN_STREAM_SENDER")
	wait_for 10 _mn_ss "$to" -Htn state established "sport = :$port"
}

_mn_stream_bytes() { sed -n 's/.*bytes=\([0-9]*\).*/\1/p' "$WORK/recv.status" 2>/dev/null || echo 0; }
_mn_stream_past() { [ "$(_mn_stream_bytes)" -gt "$1" ]; }
mn_stream_flows_on() {
	local from
	from=$(_mn_stream_bytes)
	wait_for 30 _mn_stream_past $((${from:-0} + $1))
}

mn_stream_stop() {
	[ -n "$MN_STREAM_SENDER" ] || return 0
	kill "$MN_STREAM_SENDER" 2>/dev/null
	wait "$MN_STREAM_SENDER" 2>/dev/null || true
	MN_STREAM_SENDER=""
	# the receiver sees the end of the stream and writes its last status
	wait_gone "$MN_STREAM_RECEIVER" 5 || true
}

mn_capture_start() {
	rm -f "$WORK/cap.json" "$WORK/cap.stop" "$WORK/cap.stop.ready"
	ip netns exec "$MN_UNDERLAY_NS" python3 "$top_srcdir/tests/lib/vxlan_capture.py" "$WORK/cap.json" "$WORK/cap.stop" &
	MN_CAPTURE=$!
	MN_BG_PIDS+=("$MN_CAPTURE")
	wait_for 10 test -e "$WORK/cap.stop.ready"
}

mn_capture_stop() {
	touch "$WORK/cap.stop"
	wait "$MN_CAPTURE" 2>/dev/null || true
	MN_CAP=$(cat "$WORK/cap.json" 2>/dev/null || echo '{"vxlan": [], "plain": [], "plain6": [], "fragments": -1}')
}

mn_cluster_up() {
	local count=$1 i
	shift
	mn_require "$@"
	mn_modules "$WORK/mods" "$@"
	mn_underlay_up
	mn_etcd_start || { fail "etcd starts on the underlay"; finish; }
	for i in $(seq 1 "$count"); do mn_node_add "n$i" "$i"; done
}

mn_world_add() {
	local name=$1 ns addr
	shift
	ns=$(mn_ns "$name")
	_mn_netns_add "$ns"
	# the bridge's end: "u-" and the name, within IFNAMSIZ
	local port="u-${name:0:13}"
	ip -n "$ns" link add eth0 mtu "$MN_UNDERLAY_MTU" type veth peer name "$port" \
		mtu "$MN_UNDERLAY_MTU" netns "$MN_UNDERLAY_NS"
	ip -n "$MN_UNDERLAY_NS" link set "$port" master br0 up
	ip -n "$ns" link set eth0 up
	for addr in "$@"; do
		case $addr in
		*:*) ip -n "$ns" addr add "$addr/64" dev eth0 nodad ;;
		*) ip -n "$ns" addr add "$addr/24" dev eth0 ;;
		esac
	done
}

mn_world_up() {
	mn_world_add world "$@"
	WORLD_NS=$(mn_ns world)
	PORT=$((20000 + RANDOM % 20000))
	WLOG=$WORK/world.log
	mn_bg "$WORLD_NS" /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" serve "$PORT" "$WLOG" "$@"
}

mn_serve() {
	mn_bg "$(mn_pod_ns "$1")" python3 "$top_srcdir/tests/cni/nettest.py" serve "$2"
	mn_listening "$1" "$2"
}

mn_tcp_get() {
	ip netns exec "$(mn_pod_ns "$1")" python3 -c '
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1) as s:
        s.settimeout(1)
        print("ok" if s.recv(3) == b"ok\n" else "bad")
except OSError:
    print("fail")' "$2" "$3"
}

mn_udp_log() {
	local pod=$1 port=$2 file=$3
	: >"$file"
	mn_bg "$(mn_pod_ns "$pod")" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
with open(sys.argv[2], "a") as f:
    while True:
        data, peer = s.recvfrom(2048)
        f.write(data.decode(errors="replace") + " " + peer[0] + "\n")
        f.flush()
' "$port" "$file"
	wait_for 5 _mn_ss_udp "$pod" "$port"
}
_mn_ss_udp() { ip netns exec "$(mn_pod_ns "$1")" ss -Hlun "sport = :$2" | grep -q .; }

mn_bg() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@" &
	MN_BG_PID=$!
	MN_BG_PIDS+=("$MN_BG_PID")
}

mn_json() {
	python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' \
		"$(mn_api "$1" "http://x$2")" "$3"
}

mn_routes_all() {
	local n
	for n in "${MN_NODES[@]}"; do
		[ "$n" = "$1" ] && continue
		[ "$(mn_json "$1" /v1/nodes "any(x['name'] == '$n' and x['routed'] for x in j['nodes'])")" = True ] ||
			return 1
	done
}
