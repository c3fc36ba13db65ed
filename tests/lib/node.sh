# shellcheck shell=bash
# tests/lib/node.sh - one "node" for the single-node tests (source after
# tests/lib/common.sh): a network namespace NODE that the test's agent runs
# in (start_agent_netns "$NODE" ...), removed on exit with everything in it.
#
#   node_require WHY MODULE...  root (else skip_or_fail "run as root (WHY)"),
#                               ip, nsenter, python3 and curl, the modules
#                               built (a FAIL: they are this tree's), the
#                               bpffs mounted
#   node_netns_up PREFIX        NODE=PREFIX<pid> with lo up; on exit the
#                               agent and every process in NODE are killed,
#                               NODE deleted, then common.sh's cleanup
#   node_uplink ADDR/LEN        NODE's eth0 (a veth whose peer eth0p stays in
#                               NODE, both up) with ADDR: its link to the
#                               other nodes, which are on-link there
#   node_modules MODULE...      mods=$WORK/mods, a module dir holding them
NODE=""

node_require() {
	local why=$1 tool so
	shift
	[ "$(id -u)" = 0 ] || skip_or_fail "run as root ($why)"
	for tool in ip nsenter python3 curl; do
		command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
	done
	for so in "$@"; do
		[ -f "$top_builddir/.libs/$so.so" ] || { echo "FAIL: $so.so is not built"; exit 1; }
	done
	mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
}

_node_cleanup() {
	local rc=$? p
	set +e
	if [ -n "${AGENT_PID:-}" ]; then
		kill -KILL "$AGENT_PID" 2>/dev/null
		wait "$AGENT_PID" 2>/dev/null
		AGENT_PID=""
	fi
	if [ -n "$NODE" ] && [ -e "/run/netns/$NODE" ]; then
		for p in $(ip netns pids "$NODE" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$NODE" 2>/dev/null
	fi
	cleanup "$rc"
}

node_netns_up() {
	NODE=$1$$
	trap _node_cleanup EXIT INT TERM
	ip netns add "$NODE"
	ip -n "$NODE" link set lo up
}

node_uplink() {
	ip -n "$NODE" link add eth0 type veth peer name eth0p
	ip -n "$NODE" addr add "$1" dev eth0
	ip -n "$NODE" link set eth0 up
	ip -n "$NODE" link set eth0p up
}

node_modules() {
	local so
	mods=$WORK/mods
	mkdir -p "$mods"
	chmod 0755 "$mods"
	for so in "$@"; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done
}
