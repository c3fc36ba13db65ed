# tests/lib/lbtopo.sh - the topology of the lb module's tests (sourced after
# tests/lib/common.sh, as root): a node netns with a bridge (10.212.0.1/24)
# and a device ext0 (192.168.212.1/24, fd00:213::1/64) to an "outside" netns
# (192.168.212.2, fd00:213::2: a client outside the node, for NodePort); the
# pods also have fd00:212::<n>/64 on the bridge,
# LB_BACKENDS backend pods (10.212.0.10+i, each running tests/lib/lbnet.py
# serve "b<i>" 8080 for TCP and UDP) and a client pod (10.212.0.100), and a
# cgroup v2 directory named with the test's pid that the client processes
# run in (the socket hooks are attached there, never to the root cgroup).
# All of it is removed on exit. Helpers:
#   client CMD...      lbnet.py CMD in the client pod, inside the cgroup
#   jq_ JSON EXPR      a Python expression over the parsed JSON (j)
#   upsert JSON        fibril service upsert; reply in UOUT, status in URC
#   be_json STATE I... a backends array of backend pods I...
#   fib ARGS...        the CLI on the test agent's socket
[ -f "$top_builddir/.libs/lb.so" ] || { echo "FAIL: lb.so is not built"; exit 1; }
find_cgroup2

NODE=flbn$$
CLIENT=flbc$$
OUTSIDE=flbo$$
BACKENDS=()
LB_BACKENDS=${LB_BACKENDS:-10}
for i in $(seq 0 $((LB_BACKENDS - 1))); do BACKENDS+=("flbb$i$$"); done
CG="$CG2/fibril-lb-test-$$"
BG_PIDS=()
lb_cleanup() {
	local rc=$? ns p
	set +e
	for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for ns in "$CLIENT" "$OUTSIDE" "${BACKENDS[@]}" "$NODE"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	if [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		wait_for 5 rmdir "$CG" 2>/dev/null # once the killed processes have left it
	fi
	[ -n "$CG2_MOUNTED" ] && umount "$CG2_MOUNTED"
	[ -n "$LB_EXTRA_CLEANUP" ] && $LB_EXTRA_CLEANUP
	(exit "$rc")
	cleanup
}
trap lb_cleanup EXIT INT TERM
LB_EXTRA_CLEANUP=${LB_EXTRA_CLEANUP:-}
mkdir "$CG"

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/lb.so" "$mods/"

# ---- the node, its bridge and the pods --------------------------------------------------
ip netns add "$NODE"
ip -n "$NODE" link set lo up
ip -n "$NODE" link add br0 type bridge
ip -n "$NODE" addr add 10.212.0.1/24 dev br0
ip -n "$NODE" addr add fd00:212::1/64 dev br0 nodad
ip -n "$NODE" link set br0 up
ip netns exec "$NODE" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$NODE" sysctl -qw net.ipv6.conf.all.forwarding=1
ip netns add "$OUTSIDE"
ip -n "$NODE" link add ext0 type veth peer name eth0 netns "$OUTSIDE"
ip -n "$NODE" addr add 192.168.212.1/24 dev ext0
ip -n "$NODE" addr add fd00:213::1/64 dev ext0 nodad
ip -n "$NODE" link set ext0 up
ip -n "$OUTSIDE" link set lo up
ip -n "$OUTSIDE" addr add 192.168.212.2/24 dev eth0
ip -n "$OUTSIDE" addr add fd00:213::2/64 dev eth0 nodad
ip -n "$OUTSIDE" link set eth0 up
declare -A ADDR
pod() { # pod NS ADDR
	ip netns add "$1"
	ip -n "$NODE" link add "v$2" type veth peer name eth0 netns "$1"
	ip -n "$NODE" link set "v$2" master br0 up
	ip -n "$1" link set lo up
	ip -n "$1" addr add "10.212.0.$2/24" dev eth0
	ip -n "$1" addr add "fd00:212::$2/64" dev eth0 nodad
	ip -n "$1" link set eth0 up
	ip -n "$1" route add default via 10.212.0.1
	ip -n "$1" -6 route add default via fd00:212::1
	ADDR[$1]=10.212.0.$2
}
pod "$CLIENT" 100
for i in $(seq 0 $((LB_BACKENDS - 1))); do
	pod "${BACKENDS[$i]}" $((10 + i))
	nsenter --net="/run/netns/${BACKENDS[$i]}" python3 "$top_srcdir/tests/lib/lbnet.py" serve "b$i" 8080 \
		>/dev/null 2>&1 &
	BG_PIDS+=($!)
	disown $!
done

SOCK=$WORK/fibril.sock
fib() { "$CLI" --socket "$SOCK" "$@"; }
# client CMD... : lbnet.py in the client pod, inside the test's cgroup
client() {
	nsenter --net="/run/netns/$CLIENT" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" \
		python3 "$top_srcdir/tests/lib/lbnet.py" "$@"
}
# outside CMD... : lbnet.py in the outside netns (not in the cgroup: only
# the tc programs can balance it)
outside() { nsenter --net="/run/netns/$OUTSIDE" python3 "$top_srcdir/tests/lib/lbnet.py" "$@"; }
jq_() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }
upsert() { # upsert JSON -> the reply (JSON) or the error on stdout; status in URC
	URC=0
	UOUT=$(printf '%s' "$1" | fib -o json service upsert - 2>&1) || URC=$?
}
be_json() { # be_json STATE IDX... -> the backends array
	local state=$1 out="" i
	shift
	for i in "$@"; do out="$out${out:+,}{\"address\":\"10.212.0.$((10 + i)):8080\",\"state\":\"$state\"}"; done
	printf '[%s]' "$out"
}
wait_listening() { wait_for 5 _listening_8080 "$1"; }
_listening_8080() { nsenter --net="/run/netns/$1" ss -Hltn "sport = :8080" | grep -q .; }
for ns in "${BACKENDS[@]}"; do wait_listening "$ns" || fail "backend $ns listens"; done

