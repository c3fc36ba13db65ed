#!/usr/bin/env bash
# tests/bench/bench_datapath.sh - the datapath's cost, measured (as root,
# by hand or from `make bench`; never by make check): two pods on veths
# into a node netns, twice in the same run with the same addresses:
#   datapath - the agent with ipam-cluster-pool, datapath and dpdrive; the
#              tc program on both host veths redirects pod to pod;
#   plain    - no agent, no program: the node's kernel forwards between
#              the veths with /32 routes (ip_forward=1), the gateway on lo.
# Figures: TCP request/response rate (1-byte ping-pong, bench_dp_rr) and
# bulk TCP throughput (iperf3), each the median of REPEAT runs of SECS
# seconds, alternating the two setups; printed side by side with the
# ratio datapath/plain (goal: within 5%). Nothing is asserted.
# Environment: top_srcdir, top_builddir (as make sets them); optional
# REPEAT (3), SECS (5), PIN_CPU (the CPU both ends run on; default the
# last), CC.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
BPFFS_DIR="/sys/fs/bpf/fibril-bench-dp-$$"

REPEAT=${REPEAT:-3}
SECS=${SECS:-5}
# client and server share one CPU (PIN_CPU, default the last one): the
# figures then measure the path, not where the scheduler put the two ends
PIN_CPU=${PIN_CPU:-$(($(nproc) - 1))}
PIN=(taskset -c "$PIN_CPU")
[ "$(id -u)" = 0 ] || { echo "bench_datapath: run as root (network namespaces, BPF)" >&2; exit 1; }
for tool in ip nsenter iperf3 python3 curl pkg-config taskset; do
	command -v "$tool" >/dev/null || { echo "bench_datapath: $tool is not installed" >&2; exit 1; }
done
for so in datapath ipam-cluster-pool; do
	[ -f "$top_builddir/.libs/$so.so" ] || { echo "bench_datapath: $so.so is not built" >&2; exit 1; }
done

# ---- namespaces and cleanup -----------------------------------------------------------
SETUPS=(datapath plain)
declare -A NODE PODA PODB
for s in "${SETUPS[@]}"; do
	NODE[$s]=fbn${s:0:1}$$
	PODA[$s]=fba${s:0:1}$$
	PODB[$s]=fbb${s:0:1}$$
done
bench_cleanup() {
	local rc=$? ns p s
	set +e
	for s in "${SETUPS[@]}"; do
		for ns in "${PODA[$s]}" "${PODB[$s]}" "${NODE[$s]}"; do
			[ -e "/run/netns/$ns" ] || continue
			for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
			ip netns del "$ns" 2>/dev/null
		done
	done
	(exit "$rc")
	cleanup
}
trap bench_cleanup EXIT INT TERM

# ---- build ------------------------------------------------------------------------------------
RR=$top_builddir/tests/bench/bench_dp_rr
if [ ! -x "$RR" ]; then
	RR=$WORK/bench_dp_rr
	$CC -std=gnu11 -O2 -Wall -Wextra -o "$RR" "$top_srcdir/tests/bench/bench_dp_rr.c"
fi
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in datapath ipam-cluster-pool; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done
# shellcheck disable=SC2046
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
	-Wno-unused-parameter -I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) \
	-o "$mods/dpdrive.so" "$top_srcdir/tests/modules/dpdrive.c" \
	-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
chmod 0644 "$mods/dpdrive.so"

GW=10.202.0.1
A=10.202.0.10
B=10.202.0.11
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }

# pods SETUP : node + two pods wired as fibril-cni does
pods() {
	local s=$1 n=${NODE[$1]} p h addr
	ip netns add "$n"
	ip -n "$n" link set lo up
	for p in a b; do
		if [ $p = a ]; then ns=${PODA[$s]} addr=$A; else ns=${PODB[$s]} addr=$B; fi
		h=lxc$p
		ip netns add "$ns"
		ip -n "$n" link add "$h" type veth peer name eth0 netns "$ns"
		ip -n "$ns" link set lo up
		ip -n "$ns" link set eth0 up
		ip -n "$n" link set "$h" up
		ip -n "$ns" addr add "$addr/32" dev eth0
		ip -n "$ns" route add "$GW" dev eth0 scope link
		ip -n "$ns" route add default via "$GW"
	done
}

setup_plain() {
	local n=${NODE[plain]}
	pods plain
	ip -n "$n" addr add "$GW/32" dev lo
	ip -n "$n" route add "$A/32" dev lxca scope link src "$GW"
	ip -n "$n" route add "$B/32" dev lxcb scope link src "$GW"
	ip netns exec "$n" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
}

setup_datapath() {
	local n=${NODE[datapath]} p ns h addr id code
	pods datapath
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	nsenter --net="/run/netns/$n" "$AGENT" "${args[@]}" \
		--set ipam-cluster-pool.node-cidr=10.202.0.0/24 >"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 10 test -S "$WORK/fibril.sock" || true
	[ -S "$WORK/fibril.sock" ] || { cat "$WORK/agent.log"; echo "bench_datapath: the agent did not start" >&2; exit 1; }
	for p in a b; do
		if [ $p = a ]; then ns=${PODA[datapath]} addr=$A id=10; else ns=${PODB[datapath]} addr=$B id=11; fi
		h=lxc$p
		code=$(api -o "$WORK/put.out" -w '%{http_code}' -X PUT \
			-d "{\"host-ifname\":\"$h\",\"mac\":\"$(mac_of eth0 -n "$ns")\",\"host-mac\":\"$(mac_of "$h" -n "$n")\",\"ipv4\":\"$addr\",\"id\":$id,\"identity\":$((256 + id))}" \
			"http://x/v1/test/datapath/$h")
		[ "$code" = 200 ] || { echo "bench_datapath: upsert $h: $code $(cat "$WORK/put.out")" >&2; exit 1; }
	done
}

# ---- measurements -----------------------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
free_port() { ip netns exec "$1" python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

start_servers() {
	local s=$1 b=${PODB[$1]}
	rm -f "$WORK/rrport.$s"
	ip netns exec "$b" "${PIN[@]}" "$RR" server "$WORK/rrport.$s" &
	wait_for 5 test -s "$WORK/rrport.$s" || true
	IPERF_PORT[$s]=$(free_port "$b")
	ip netns exec "$b" "${PIN[@]}" iperf3 -s -p "${IPERF_PORT[$s]}" >/dev/null 2>&1 &
	wait_for 5 _listening "$b" "${IPERF_PORT[$s]}" || true
}
_listening() { ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .; }

rr_once() { # -> transactions per second
	local s=$1
	ip netns exec "${PODA[$s]}" "${PIN[@]}" "$RR" client "$B" "$(cat "$WORK/rrport.$s")" "$SECS" |
		sed -n 's/.*rate=\([0-9.]*\).*/\1/p'
}

bulk_once() { # -> Gbit/s received
	local s=$1
	ip netns exec "${PODA[$s]}" "${PIN[@]}" iperf3 -c "$B" -p "${IPERF_PORT[$s]}" -t "$SECS" -J |
		python3 -c 'import json, sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}

declare -A IPERF_PORT
setup_plain
setup_datapath
for s in "${SETUPS[@]}"; do start_servers "$s"; done
# a first exchange on each path (neighbours resolved, program warm)
for s in "${SETUPS[@]}"; do ip netns exec "${PODA[$s]}" ping -c 2 -i 0.2 -W 1 "$B" >/dev/null; done

echo "bench_datapath: $REPEAT x ${SECS}s per figure and setup, alternating; both ends on CPU $PIN_CPU; kernel $(uname -r), $(nproc) CPUs"
declare -A RRS BULKS
for r in $(seq 1 "$REPEAT"); do
	for s in "${SETUPS[@]}"; do
		v=$(rr_once "$s")
		RRS[$s]="${RRS[$s]:-} $v"
		echo "  run $r $s: TCP_RR $v/s"
	done
	for s in "${SETUPS[@]}"; do
		v=$(bulk_once "$s")
		BULKS[$s]="${BULKS[$s]:-} $v"
		echo "  run $r $s: bulk $v Gbit/s"
	done
done

fwd=$(api http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["packets-from-endpoints"]["forwarded"])')
med() { printf '%s\n' $1 | median; }
rr_dp=$(med "${RRS[datapath]}") rr_pl=$(med "${RRS[plain]}")
bk_dp=$(med "${BULKS[datapath]}") bk_pl=$(med "${BULKS[plain]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
goal() { awk -v r="$1" 'BEGIN { print (r >= 0.95 ? "met" : "NOT met") }'; }
echo
printf '%-28s %14s %14s %8s  %s\n' "median of $REPEAT" "datapath" "plain kernel" "ratio" "goal >= 0.95"
printf '%-28s %14.0f %14.0f %8s  %s\n' "TCP_RR (transactions/s)" "$rr_dp" "$rr_pl" "$(ratio "$rr_dp" "$rr_pl")" "$(goal "$(ratio "$rr_dp" "$rr_pl")")"
printf '%-28s %14.2f %14.2f %8s  %s\n' "bulk TCP (Gbit/s, iperf3)" "$bk_dp" "$bk_pl" "$(ratio "$bk_dp" "$bk_pl")" "$(goal "$(ratio "$bk_dp" "$bk_pl")")"
echo "packets the program forwarded pod to pod: $fwd"
