#!/usr/bin/env bash
# tests/bench/bench_masq.sh - masquerading's cost against the kernel's own
# (as root, by hand or from `make bench`; never by make check): the same
# topology twice in one run, pod ns -> node ns -> world ns, the world on a
# /30 of its own with no route to the pod:
#   fibril - the agent (ipam-cluster-pool, datapath, dpdrive standing in for
#            the endpoint module); fibril_to_netdev SNATs the pod to the
#            node's world0 address, fibril_from_netdev translates replies;
#   kernel - no agent, no program: the node's kernel forwards and an
#            nftables `masquerade` rule (conntrack NAT) on world0 does it.
# Figures: TCP request/response rate (1-byte ping-pong), bulk TCP
# throughput (iperf3) and new connections per second (connect, one byte
# there and back, close: TCP_CRR), each the median of REPEAT runs
# alternating the two setups, side by side with the ratio fibril/kernel
# (goal: >= 1.0 for RR and bulk, > 1.0 for new connections). Nothing is
# asserted; the packets each setup translated are printed after.
# For TCP_CRR the fibril setup masquerades to ports 1024-65535 with a 2 s
# closing timeout (the defaults, 61000-65535 and 10 s, hold ~450 closed
# flows a second per destination; the kernel's masquerade keeps the pod's
# port): the settings are printed with the figures.
# Environment: top_srcdir, top_builddir (as make sets them); optional
# REPEAT (5), SECS (5), CRR_SECS (2), PIN_CPU (default the last CPU), CC.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
BPFFS_DIR="/sys/fs/bpf/fibril-bench-masq-$$"

REPEAT=${REPEAT:-5}
SECS=${SECS:-5}
CRR_SECS=${CRR_SECS:-2}
# client and server share one CPU: the figures measure the path, not
# where the scheduler put the two ends
PIN_CPU=${PIN_CPU:-$(($(nproc) - 1))}
PIN=(taskset -c "$PIN_CPU")
[ "$(id -u)" = 0 ] || { echo "bench_masq: run as root (network namespaces, BPF, nftables)" >&2; exit 1; }
for tool in ip nsenter iperf3 python3 curl pkg-config taskset nft; do
	command -v "$tool" >/dev/null || { echo "bench_masq: $tool is not installed" >&2; exit 1; }
done
for so in datapath ipam-cluster-pool; do
	[ -f "$top_builddir/.libs/$so.so" ] || { echo "bench_masq: $so.so is not built" >&2; exit 1; }
done

# ---- namespaces and cleanup ---------------------------------------------------
SETUPS=(fibril kernel)
declare -A NODE POD WORLD
for s in "${SETUPS[@]}"; do
	NODE[$s]=fbmn${s:0:1}$$
	POD[$s]=fbmp${s:0:1}$$
	WORLD[$s]=fbmw${s:0:1}$$
done
bench_cleanup() {
	local rc=$? ns p s
	set +e
	for s in "${SETUPS[@]}"; do
		for ns in "${POD[$s]}" "${WORLD[$s]}" "${NODE[$s]}"; do
			[ -e "/run/netns/$ns" ] || continue
			for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
			ip netns del "$ns" 2>/dev/null
		done
	done
	(exit "$rc")
	cleanup
}
trap bench_cleanup EXIT INT TERM

# ---- build --------------------------------------------------------------------
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

GW=10.204.0.1
POD_IP=10.204.0.10
NODE_W=172.30.0.1 # the node's end of the world link: what the world sees
WORLD_IP=172.30.0.2
FIBRIL_SETTINGS=(--set datapath.masquerade-port-min=1024 --set datapath.masquerade-endpoint-max=65536
	--set datapath.conntrack-timeout-tcp-closing=2s --set datapath.conntrack-gc-interval=1s)
mac_of() { ip "${@:2}" -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["address"])'; }

# topology SETUP : node, pod (wired as fibril-cni does) and world
topology() {
	local s=$1 n=${NODE[$1]} p=${POD[$1]} w=${WORLD[$1]}
	ip netns add "$n"
	ip netns add "$p"
	ip netns add "$w"
	ip -n "$n" link set lo up
	ip -n "$p" link set lo up
	ip -n "$w" link set lo up
	ip -n "$n" link add lxca type veth peer name eth0 netns "$p"
	ip -n "$p" link set eth0 up
	ip -n "$n" link set lxca up
	ip -n "$p" addr add "$POD_IP/32" dev eth0
	ip -n "$p" route add "$GW" dev eth0 scope link
	ip -n "$p" route add default via "$GW"
	ip -n "$n" link add world0 type veth peer name eth0 netns "$w"
	ip -n "$n" addr add "$NODE_W/30" dev world0
	ip -n "$n" link set world0 up
	ip -n "$w" addr add "$WORLD_IP/30" dev eth0
	ip -n "$w" link set eth0 up
	ip -n "$n" route add "$POD_IP/32" dev lxca scope link
	ip netns exec "$n" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
}

setup_kernel() {
	local n=${NODE[kernel]}
	topology kernel
	ip -n "$n" addr add "$GW/32" dev lo
	ip netns exec "$n" nft -f - <<NFT
table ip benchmasq {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "world0" ip saddr $POD_IP masquerade
	}
}
NFT
}

setup_fibril() {
	local n=${NODE[fibril]} p=${POD[fibril]} code
	topology fibril
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	nsenter --net="/run/netns/$n" "$AGENT" "${args[@]}" "${FIBRIL_SETTINGS[@]}" \
		--set ipam-cluster-pool.node-cidr=10.204.0.0/24 >"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || true
	[ -S "$WORK/fibril.sock" ] || { cat "$WORK/agent.log"; echo "bench_masq: the agent did not start" >&2; exit 1; }
	code=$(api -o "$WORK/put.out" -w '%{http_code}' -X PUT \
		-d "{\"host-ifname\":\"lxca\",\"mac\":\"$(mac_of eth0 -n "$p")\",\"host-mac\":\"$(mac_of lxca -n "$n")\",\"ipv4\":\"$POD_IP\",\"id\":10,\"identity\":266}" \
		"http://x/v1/test/datapath/lxca")
	[ "$code" = 200 ] || { echo "bench_masq: upsert lxca: $code $(cat "$WORK/put.out")" >&2; exit 1; }
	wait_for 30 masq_on || { cat "$WORK/agent.log"; echo "bench_masq: fibril_to_netdev is not on world0" >&2; exit 1; }
}
masq_on() { api http://x/v1/datapath | python3 -c 'import json, sys; sys.exit(json.load(sys.stdin).get("masquerade-devices", 0) < 1)'; }

# ---- measurements -------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
_listening() { ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .; }
declare -A RRPORT CRRPORT IPERF_PORT
start_servers() {
	local s=$1 w=${WORLD[$1]}
	rm -f "$WORK/rrport.$s" "$WORK/crrport.$s"
	ip netns exec "$w" "${PIN[@]}" "$RR" server "$WORK/rrport.$s" &
	ip netns exec "$w" "${PIN[@]}" "$RR" crr-server "$WORK/crrport.$s" &
	wait_for 5 test -s "$WORK/rrport.$s" -a -s "$WORK/crrport.$s" || true
	RRPORT[$s]=$(cat "$WORK/rrport.$s")
	CRRPORT[$s]=$(cat "$WORK/crrport.$s")
	IPERF_PORT[$s]=$(ip netns exec "$w" python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
	ip netns exec "$w" "${PIN[@]}" iperf3 -s -p "${IPERF_PORT[$s]}" >/dev/null 2>&1 &
	wait_for 5 _listening "$w" "${IPERF_PORT[$s]}" || true
}
in_pod() { local s=$1; shift; ip netns exec "${POD[$s]}" "${PIN[@]}" "$@"; }
rr_once() { in_pod "$1" "$RR" client "$WORLD_IP" "${RRPORT[$1]}" "$SECS" | sed -n 's/.*rate=\([0-9.]*\).*/\1/p'; }
crr_once() { in_pod "$1" "$RR" crr "$WORLD_IP" "${CRRPORT[$1]}" "$CRR_SECS" | sed -n 's/.*rate=\([0-9.]*\).*/\1/p'; }
bulk_once() {
	in_pod "$1" iperf3 -c "$WORLD_IP" -p "${IPERF_PORT[$1]}" -t "$SECS" -J |
		python3 -c 'import json, sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}

setup_kernel
setup_fibril
for s in "${SETUPS[@]}"; do start_servers "$s"; done
for s in "${SETUPS[@]}"; do
	in_pod "$s" ping -c 2 -i 0.2 -W 1 "$WORLD_IP" >/dev/null ||
		{ echo "bench_masq: $s: the pod cannot reach the world" >&2; exit 1; }
	# while a connection is up, the world's side names the node's address
	in_pod "$s" "$RR" client "$WORLD_IP" "${RRPORT[$s]}" 2 >"$WORK/first.$s" 2>&1 &
	cpid=$!
	wait_for 5 bash -c "ip netns exec ${WORLD[$s]} ss -Htn state established '( sport = :${RRPORT[$s]} )' | grep -Eq '[^0-9]${NODE_W//./\\.}]?:'" ||
		{ echo "bench_masq: $s: the world does not see the node's address $NODE_W: $(ip netns exec "${WORLD[$s]}" ss -Htn) $(cat "$WORK/first.$s")" >&2; exit 1; }
	wait "$cpid" || { echo "bench_masq: $s: $(cat "$WORK/first.$s")" >&2; exit 1; }
done

echo "bench_masq: pod -> node -> world, fibril (BPF SNAT) vs the kernel (nftables masquerade); $REPEAT rounds alternating, ${SECS}s per RR/bulk run, ${CRR_SECS}s per TCP_CRR run; both ends on CPU $PIN_CPU; kernel $(uname -r), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "fibril settings: ${FIBRIL_SETTINGS[*]}"
declare -A RRS BULKS CRRS
for r in $(seq 1 "$REPEAT"); do
	for s in "${SETUPS[@]}"; do
		v=$(rr_once "$s")
		RRS[$s]="${RRS[$s]:-} $v"
		echo "  round $r $s: TCP_RR $v/s"
	done
	for s in "${SETUPS[@]}"; do
		v=$(bulk_once "$s")
		BULKS[$s]="${BULKS[$s]:-} $v"
		echo "  round $r $s: bulk $v Gbit/s"
	done
	for s in "${SETUPS[@]}"; do
		v=$(crr_once "$s")
		CRRS[$s]="${CRRS[$s]:-} $v"
		echo "  round $r $s: TCP_CRR $v conn/s"
	done
done

dp=$(api http://x/v1/datapath)
counter() { python3 -c 'import json, sys; j = json.load(sys.stdin); print(j.get(sys.argv[1], {}).get(sys.argv[2], 0))' "$1" "$2" <<<"$dp"; }
med() { printf '%s\n' $1 | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
goal() { awk -v r="$1" -v op="$2" 'BEGIN { ok = (op == ">=") ? (r >= 1.0) : (r > 1.0); print (ok ? "met" : "NOT met") }'; }
rr_f=$(med "${RRS[fibril]}") rr_k=$(med "${RRS[kernel]}")
bk_f=$(med "${BULKS[fibril]}") bk_k=$(med "${BULKS[kernel]}")
cr_f=$(med "${CRRS[fibril]}") cr_k=$(med "${CRRS[kernel]}")
echo
printf '%-30s %12s %12s %8s  %s\n' "median of $REPEAT" "fibril" "kernel nft" "ratio" "goal"
printf '%-30s %12.0f %12.0f %8s  %s\n' "TCP_RR (transactions/s)" "$rr_f" "$rr_k" "$(ratio "$rr_f" "$rr_k")" ">= 1.0 $(goal "$(ratio "$rr_f" "$rr_k")" ">=")"
printf '%-30s %12.2f %12.2f %8s  %s\n' "bulk TCP (Gbit/s, iperf3)" "$bk_f" "$bk_k" "$(ratio "$bk_f" "$bk_k")" ">= 1.0 $(goal "$(ratio "$bk_f" "$bk_k")" ">=")"
printf '%-30s %12.0f %12.0f %8s  %s\n' "TCP_CRR (new connections/s)" "$cr_f" "$cr_k" "$(ratio "$cr_f" "$cr_k")" "> 1.0 $(goal "$(ratio "$cr_f" "$cr_k")" ">")"
echo "fibril: masqueraded $(counter packets-to-netdev masqueraded), replies translated $(counter packets-to-netdev masquerade-reply)+$(counter packets-from-netdev masquerade-reply), dropped for want of a port $(counter packets-to-netdev drop:masquerade-no-port), over the quota $(counter packets-to-netdev drop:masquerade-endpoint-quota)"
echo "fibril drops (every non-zero drop counter of GET /v1/datapath): $(python3 -c 'import json, sys
j = json.load(sys.stdin)
print(" ".join("%s/%s=%s" % (s, k, v) for s, d in j.items() if isinstance(d, dict) for k, v in d.items() if k.startswith("drop") and isinstance(v, int) and v) or "none")' <<<"$dp")"
# what the new connections cost on the way: the world's SYNs refused on
# a TIME_WAIT (PAWS), the pod's SYN retransmits (each a 1 s stall)
tcpstat() { ip netns exec "$1" nstat -asz "$2" 2>/dev/null | awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }'; }
for s in "${SETUPS[@]}"; do
	echo "$s: world PAWSTimewait $(tcpstat "${WORLD[$s]}" TcpExtPAWSTimewait), world TW $(tcpstat "${WORLD[$s]}" TcpExtTW), pod SYN retransmits $(tcpstat "${POD[$s]}" TcpExtTCPSynRetrans)"
done
echo "kernel: conntrack entries now $(ip netns exec "${NODE[kernel]}" cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo '?')"
