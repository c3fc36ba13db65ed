#!/usr/bin/env bash
# scripts/run.sh - the main job: install the build dependencies, build and
# install fibril (under /usr/local), then run a node on this machine and
# give pods networking:
#   - a node network namespace (fibril-demo-node) holding a one-member etcd
#     on its loopback and fibril-agent with its default modules: kvstore-etcd,
#     ipam-cluster-pool (the node claims a /24 of 10.244.0.0/16 through etcd),
#     ipam-api, endpoint and datapath (the eBPF datapath), nodes (the node
#     registers itself in etcd), policy (CiliumNetworkPolicy in the
#     datapath) and hubble-lite (flows from the datapath's events);
#   - three pods, each a network namespace of its own, added with the
#     fibril-cni plugin exactly as a container runtime calls it (CNI_COMMAND=ADD,
#     the network config on stdin);
#   - then it shows the endpoints and identities, pings from pod to pod and
#     pod to node, the node list, a policy that lets only pod a reach pod b
#     (pod c's ping is dropped, `fibril policy trace` says why), the flows of all this, and the datapath's
#     maps;
#   - a "world" namespace (fibril-demo-world) outside the cluster, joined to
#     the node by a veth of its own /30 (no route to the pod CIDR), running a
#     small HTTP server: pod a fetches a page from it, the server's log shows
#     the node's address (the datapath masqueraded the pod, BPF SNAT on the
#     node's world0), and `fibril map dump dp_nat` shows the mapping.
# Nothing is added to this machine's own network namespace. The node keeps
# running until Ctrl-C (or SIGTERM); then the pods are deleted with CNI DEL
# while the agent still runs (etcd and the agent are in a session of their
# own, so the terminal's Ctrl-C reaches this script alone, which stops them
# after), and everything is removed: the namespaces, the pins, /run/fibril-demo
# and /var/lib/fibril-demo. FIBRIL_RUN_ONCE=1 stops right after the show;
# FIBRIL_INSTALL_ONLY=1 stops after the install (scripts/run-cluster.sh).
# FIBRIL_BUILD_DIR=DIR runs the programs of a tree already built in DIR as
# they are (DIR/fibril-agent, DIR/fibril, DIR/fibril-cni, the modules of
# DIR/.libs copied into the demo's own module dir): no dependencies, no
# build, no install, nothing written under /usr/local
# (tests/integration/run_demo_interrupt.sh).
# Run it as root (sudo is not needed, nor used).
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (the agent manages network namespaces, BPF and /run)"; exit 1; }
build_dir=${FIBRIL_BUILD_DIR:-}
if [ -z "$build_dir" ]; then
	scripts/deps.sh
	[ -x configure ] || autoreconf -fi >/dev/null 2>&1
	mkdir -p build/run
	[ -f build/run/Makefile ] || (cd build/run && ../../configure -q --prefix=/usr/local)
	make -C build/run -j"$(nproc)" >/dev/null
	make -C build/run install >/dev/null # quiet: the install's libtool runs with -Wnone
	ldconfig
	# scripts/run-cluster.sh reuses the steps above, then runs its own cluster
	[ -n "${FIBRIL_INSTALL_ONLY:-}" ] && exit 0
	fibril_cli=/usr/local/bin/fibril
	fibril_agent=/usr/local/sbin/fibril-agent
	cni_dir=/usr/local/lib/cni
	module_dir=""
else
	build_dir=$(cd "$build_dir" && pwd)
	for f in fibril fibril-agent fibril-cni; do
		[ -x "$build_dir/$f" ] || { echo "run.sh: FIBRIL_BUILD_DIR: no $build_dir/$f (build it first)"; exit 1; }
	done
	fibril_cli=$build_dir/fibril
	fibril_agent=$build_dir/fibril-agent
	cni_dir=$build_dir
	module_dir=""
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

node=fibril-demo-node
pods=(fibril-demo-pod-a fibril-demo-pod-b fibril-demo-pod-c)
world=fibril-demo-world
# the world's link: the node's end (world0) and the world's, a /30 of their own
world_node_ip=192.168.252.1
world_ip=192.168.252.2
world_port=8080
world_pid=""
demo=/var/lib/fibril-demo
run=/run/fibril-demo
pins=/sys/fs/bpf/fibril-demo
cni=$cni_dir/fibril-cni
sock=$run/fibril.sock
modules=(kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy hubble-lite)
etcd_pid=""
agent=""

in_node() { ip netns exec "$node" "$@"; }
fibril() { in_node "$fibril_cli" --socket "$sock" "$@"; }
netconf() {
	cat <<CONF
{"cniVersion": "1.0.0", "name": "fibril-demo", "type": "fibril-cni",
 "agent-socket": "$sock", "mtu": 1500}
CONF
}
# cni_call COMMAND POD : the plugin, called as a container runtime calls it
cni_call() {
	netconf | in_node env CNI_COMMAND="$1" CNI_CONTAINERID="demo-$2" \
		CNI_NETNS="/var/run/netns/$2" CNI_IFNAME=eth0 CNI_PATH="$cni_dir" \
		CNI_ARGS="K8S_POD_NAMESPACE=demo;K8S_POD_NAME=${2#fibril-demo-}" "$cni"
}

cleanup() {
	set +e
	local p out
	if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
		# the pods go first, through the plugin, while the agent answers
		# (an agent that cannot be reached makes DEL fail: error 11)
		for p in "${pods[@]}"; do
			ip netns pids "$p" >/dev/null 2>&1 || continue
			if out=$(cni_call DEL "$p" 2>&1); then
				echo "run.sh: CNI DEL $p: done"
			else
				echo "run.sh: CNI DEL $p failed: $out"
			fi
		done
		kill -TERM "$agent" 2>/dev/null
		wait "$agent" 2>/dev/null
		echo "run.sh: the agent stopped"
	fi
	[ -n "$etcd_pid" ] && kill -TERM "$etcd_pid" 2>/dev/null && wait "$etcd_pid" 2>/dev/null
	[ -n "$world_pid" ] && kill -TERM "$world_pid" 2>/dev/null && wait "$world_pid" 2>/dev/null
	for p in "${pods[@]}"; do ip netns del "$p" 2>/dev/null; done
	ip netns del "$world" 2>/dev/null
	ip netns del "$node" 2>/dev/null
	rm -rf "$pins" "$run" "$demo"
	[ -n "$agent" ] && echo "run.sh: removed the namespaces, $pins, $run and $demo"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A node left over from an interrupted run goes first (cleanup turns -e off).
cleanup
set -e
rm -rf "$demo/state"
mkdir -p "$demo" "$run"
ip netns add "$node"
in_node ip link set lo up
# the node's own address (a real node has it on its uplink; the nodes module
# registers it in etcd as this node's IP): a veth pair inside the node's
# namespace, as this kernel may have no dummy links
in_node ip link add eth0 type veth peer name eth0-peer
in_node ip addr add 192.168.251.10/24 dev eth0
in_node ip link set eth0-peer up
in_node ip link set eth0 up
# the world: a namespace outside the cluster, the node's world0 its only
# neighbour (a /30; no route to the pods, so it only ever answers the
# node's address). Before the agent starts: the datapath finds world0
# among the node's devices and puts fibril_to_netdev (SNAT) on it.
ip netns add "$world"
ip -n "$world" link set lo up
in_node ip link add world0 type veth peer name eth0 netns "$world"
in_node ip addr add "$world_node_ip/30" dev world0
in_node ip link set world0 up
ip -n "$world" addr add "$world_ip/30" dev eth0
ip -n "$world" link set eth0 up
# the node routes between its pods and the world (this namespace only)
in_node sysctl -qw net.ipv4.ip_forward=1
for p in "${pods[@]}"; do
	ip netns add "$p"
	ip netns exec "$p" ip link set lo up
done

rm -rf "$demo/etcd"
if [ -n "$build_dir" ]; then # the built modules, in a directory of the demo's own
	module_dir=$demo/modules
	mkdir -p "$module_dir"
	for m in "${modules[@]}"; do install -m 0644 "$build_dir/.libs/$m.so" "$module_dir/"; done
fi
# the world's server: a page to fetch; its log names each client's address
mkdir -p "$demo/world"
echo "hello from the world" >"$demo/world/index.html"
setsid ip netns exec "$world" /usr/bin/python3 -m http.server --bind "$world_ip" \
	--directory "$demo/world" "$world_port" >"$demo/world.log" 2>&1 &
world_pid=$!
# setsid: a session of its own, out of the terminal's reach (Ctrl-C is the
# script's, whose cleanup stops etcd and the agent in order)
setsid ip netns exec "$node" etcd --name fibril-demo --data-dir "$demo/etcd" \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster fibril-demo=http://127.0.0.1:2380 >"$demo/etcd.log" 2>&1 &
etcd_pid=$!
etcd_ok=""
for _ in $(seq 1 100); do
	in_node curl -s --max-time 1 http://127.0.0.1:2379/health 2>/dev/null | grep -q true && { etcd_ok=1; break; }
	sleep 0.1
done
[ -n "$etcd_ok" ] || { echo "run.sh: etcd did not start; its log:"; tail -n 20 "$demo/etcd.log"; exit 1; }

cat >"$demo/fibril.conf" <<CONF
# The demo node's config: the node claims a /24 of 10.244.0.0/16 through
# etcd, hands pod addresses out of it, and gives each pod an endpoint in the
# eBPF datapath.
[agent]
node-name = demo-node
modules = $(IFS=,; echo "${modules[*]}" | sed 's/,/, /g')
${module_dir:+module-dir = $module_dir}
state-dir = $demo/state
run-dir = $run
socket = $sock
bpffs-dir = $pins

[providers]
ipam = ipam-cluster-pool

[kvstore-etcd]
endpoints = http://127.0.0.1:2379

[ipam-cluster-pool]
cluster-pool-ipv4-cidr = 10.244.0.0/16
cluster-pool-ipv4-mask-size = 24

[datapath]
# a trace event per forwarded packet, so that the flows show the pings too
trace-events = true
CONF

# nsenter --net, not ip netns exec: the agent keeps the host's mounts (ip
# netns exec gives it a mount namespace and a /sys of its own, so its bpffs
# and the pinned maps would die with it), as on a node
setsid nsenter --net=/run/netns/"$node" "$fibril_agent" --config "$demo/fibril.conf" &
agent=$!
ready=""
# ready once its programs are verified and attached: seconds on an idle
# machine, much longer on a loaded one
for _ in $(seq 1 1200); do
	fibril health >/dev/null 2>&1 && { ready=1; break; }
	kill -0 "$agent" 2>/dev/null || { echo "run.sh: fibril-agent exited; see its log above"; exit 1; }
	sleep 0.1
done
[ -n "$ready" ] || { echo "run.sh: fibril-agent did not become ready in 120 s"; fibril status || true; exit 1; }

echo
fibril modules
for p in "${pods[@]}"; do
	echo
	echo "--- CNI ADD $p"
	cni_call ADD "$p" || { echo "run.sh: CNI ADD of $p failed"; exit 1; }
	echo
done
echo
fibril endpoint list
echo
fibril identity list
echo
addr() { ip -n "$1" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1; }
gateway=$(ip -n "${pods[0]}" -4 route show default | awk '{print $3}')
echo "--- ping: pod a -> pod b, pod b -> pod c, pod c -> node ($gateway)"
ip netns exec "${pods[0]}" ping -c 2 -W 2 "$(addr "${pods[1]}")"
ip netns exec "${pods[1]}" ping -c 2 -W 2 "$(addr "${pods[2]}")"
ip netns exec "${pods[2]}" ping -c 2 -W 2 "$gateway"
echo
fibril node list
echo
# each pod gets an app label (the API's PATCH; with Kubernetes they are the
# pod's labels), then a policy: pod b accepts traffic from app=a only
for p in "${pods[@]}"; do
	in_node curl -sS -o /dev/null --unix-socket "$sock" -X PATCH -H 'Content-Type: application/json' \
		-d '{"labels":["k8s:app='"${p#fibril-demo-pod-}"'"]}' "http://x/v1/endpoint/container-id:demo-$p"
done
cat >"$demo/policy.json" <<POLICY
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "b-from-a", "namespace": "demo"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "b"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "a"}}]}]}}
POLICY
echo "--- policy: pod b accepts traffic from app=a only"
fibril policy import "$demo/policy.json"
fibril policy get
echo "--- ping: pod a -> pod b (allowed), pod c -> pod b (dropped by the policy)"
ip netns exec "${pods[0]}" ping -c 2 -W 2 "$(addr "${pods[1]}")"
ip netns exec "${pods[2]}" ping -c 2 -W 1 "$(addr "${pods[1]}")" || echo "(pod c -> pod b: no answer, as the policy says)"
echo "--- why (fibril policy trace, from the policy in force): pod c -> pod b, TCP 80"
fibril policy trace --src "$(addr "${pods[2]}")" --dst "$(addr "${pods[1]}")" --dport 80/tcp || true
echo
echo "--- the flows (fibril observe): the pings above, and the policy's drops"
fibril observe --last 12
echo
echo "--- the world: pod a ($(addr "${pods[0]}")) fetches http://$world_ip:$world_port/ from $world"
fetched=""
for _ in $(seq 1 50); do # the server may still be starting
	page=$(ip netns exec "${pods[0]}" curl -sS --max-time 3 "http://$world_ip:$world_port/" 2>&1) &&
		{ fetched=1; break; }
	sleep 0.1 # sleep: the world's server binds its port
done
[ -n "$fetched" ] || { echo "run.sh: pod a cannot reach the world: $page"; tail -n 5 "$demo/world.log"; exit 1; }
echo "$page"
echo "--- the world's server saw the node's address ($world_node_ip), not the pod's:"
grep 'GET / ' "$demo/world.log" | tail -n 1
echo "--- the mapping (fibril map dump dp_nat): pod a's flow, translated to the node's address"
fibril map dump dp_nat
echo
echo "--- the datapath's counters (pod-to-pod packets were redirected by the tc program)"
fibril map dump dp_metrics
echo
fibril map list
echo
fibril status
echo
echo "the node is running (agent pid $agent, API on $sock inside netns $node);"
echo "try: ip netns exec $node fibril --socket $sock endpoint list. Ctrl-C stops it."
[ -n "${FIBRIL_RUN_ONCE:-}" ] && exit 0
# until Ctrl-C: the INT trap runs as soon as the signal comes (wait returns)
wait "$agent"
