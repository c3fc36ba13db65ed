#!/usr/bin/env bash
# tests/bench/bench_crossnode.sh - cross-node pod-to-pod cost, measured (as
# root, by hand or from `make bench`; never by make check). Two nodes
# (network namespaces on an underlay bridge, tests/lib/multinode.sh, one
# etcd) run fibril; two more nodes on the same bridge run no fibril at all.
# A pod on each node; four setups, each between a pod of the first node
# and a pod of the second:
#   native       fibril, routing-mode native (a route per remote pod CIDR,
#                the tc programs on the pods' veths)
#   native-bpf   the same in routing-mode native with [datapath] host-routing
#                = bpf (the program sends a packet for the other node's pod
#                out of the underlay by bpf_fib_lookup + bpf_redirect(_neigh),
#                and fibril_from_netdev on the receiver's underlay redirects
#                it into the pod: neither node's stack routes it)
#   plain        no fibril: the kernel forwards between veths with /32
#                routes and a route per remote pod CIDR via the other node
#   tunnel       fibril, routing-mode tunnel (the same agents restarted: the
#                program encapsulates into the external VXLAN device, the
#                overlay program delivers)
#   plain-vxlan  no fibril: a kernel VXLAN device per node (VNI 42, the other
#                node as its remote), the remote pod CIDR routed into it;
#                like fibril's device and encapsulation: learning off, no
#                UDP checksum over IPv4 (fibril's program sets the key with
#                BPF_F_ZERO_CSUM_TX, as Cilium does; iproute2's default
#                would checksum and learn every packet's source)
# Figures: TCP request/response rate (1-byte ping-pong, bench_dp_rr) and bulk
# TCP throughput (iperf3), in REPEAT rounds of SECS-second runs; each round
# runs the fibril setup and its reference back to back (A B, B A, A B ...,
# so a shared machine's changing load hits both alike) and prints both and their
# ratio; the summary gives the medians, the median of the rounds' ratios and
# their spread (goal: within 5%), and the fibril programs' own cost from
# bpf_stats (run_time_ns / run_cnt of both nodes' programs over the fibril
# runs; the reference runs no program). Nothing is asserted.
# Environment: top_srcdir, top_builddir (as make sets them); optional
# REPEAT (10), SECS (2: short runs, many rounds, so a shared machine's load
# changes hit both sides alike), SETUPS (the fibril setups to run, default
# "native native-bpf tunnel"; e.g. SETUPS=tunnel runs tunnel vs plain-vxlan
# only), PIN_CPU (default the last CPU: both ends run there,
# so the figures measure the path, not the scheduler), CC.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_MTU=9000 # room for VXLAN's 50 bytes around 1500-byte pod frames
. "$top_srcdir/tests/lib/multinode.sh"

REPEAT=${REPEAT:-10}
SETUPS=" ${SETUPS:-native native-bpf tunnel} "
want() { [[ $SETUPS == *" $1 "* ]]; }
SECS=${SECS:-2}
PIN_CPU=${PIN_CPU:-$(($(nproc) - 1))}
PIN=(taskset -c "$PIN_CPU")
die() { echo "bench_crossnode: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (network namespaces, BPF)"
for tool in ip nsenter iperf3 python3 curl etcd taskset bpftool; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done
MODS="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes"
for so in $MODS; do [ -f "$top_builddir/.libs/$so.so" ] || die "$so.so is not built"; done
[ -x "$top_builddir/fibril-cni" ] || die "fibril-cni is not built"
RR=$top_builddir/tests/bench/bench_dp_rr
if [ ! -x "$RR" ]; then
	RR=$WORK/bench_dp_rr
	${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -o "$RR" "$top_srcdir/tests/bench/bench_dp_rr.c"
fi
# shellcheck disable=SC2086
mn_modules "$WORK/mods" $MODS

# ---- fibril nodes f1, f2 ----------------------------------------------------------------------
mn_underlay_up
mn_etcd_start || die "etcd does not start"
mn_node_add f1 1
mn_node_add f2 2
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 --set nodes.retry=300ms)
# Like with like: every pod, fibril's and the references', has MTU 1500 on
# the 9000-byte underlay. The pods are made once (in native mode) and keep
# their MTU across the agents' restarts, so [nodes] mtu (the underlay's MTU
# as the agent counts it) is 1500 in native mode and 1550 in tunnel mode:
# the pod MTU is 1500 both ways. Without it the pods would keep native
# mode's 9000 in tunnel mode, and 9000-byte frames plus VXLAN's 50 bytes do
# not fit the underlay (bulk then runs at about half the reference's rate).
start_mode() { # MODE [HOST-ROUTING] : both agents (again) in that routing mode
	local n mtu=1500
	[ "$1" = tunnel ] && mtu=1550
	for n in f1 f2; do
		mn_agent_kill "$n" TERM
		mn_agent_start "$n" "$WORK/mods" "${AGENT_ARGS[@]}" --set "nodes.routing-mode=$1" --set "nodes.mtu=$mtu" \
			--set "datapath.host-routing=${2:-legacy}" ||
			die "the agent of $n does not start in routing-mode $1"
	done
	local _
	for _ in $(seq 1 100); do
		for n in f1 f2; do
			mn_api "$n" http://x/v1/nodes | grep -q '"routed":true' || continue 2
		done
		return 0
	done
	die "the nodes do not see each other in routing-mode $1"
}
start_mode native
mn_pod_add f1 fa || die "a pod on f1"
mn_pod_add f2 fb || die "a pod on f2"

# ---- plain nodes p1, p2 (no fibril) -------------------------------------------------------------
mn_node_add p1 5
mn_node_add p2 6
GW=10.249.0.1 # each plain node's pod gateway (on lo, as fibril's host device holds it)
# plain_pod NODE POD ADDR : a pod wired as fibril-cni does, routed with a /32
plain_pod() {
	local node=$1 pod=$2 addr=$3 n p
	n=$(mn_ns "$node") p=$(mn_pod_ns "$pod")
	_mn_netns_add "$p"
	ip -n "$n" link add "lxc$pod" type veth peer name eth0 netns "$p"
	ip -n "$p" link set eth0 up
	ip -n "$n" link set "lxc$pod" up
	ip -n "$p" addr add "$addr/32" dev eth0
	ip -n "$p" route add "$GW" dev eth0 scope link
	ip -n "$p" route add default via "$GW"
	ip -n "$n" route add "$addr/32" dev "lxc$pod" scope link src "$GW"
	MN_POD_IP[$pod]=$addr
}
for i in 1 2; do
	n=$(mn_ns "p$i")
	ip -n "$n" addr add "$GW/32" dev lo
	plain_pod "p$i" "na$i" "10.240.$i.10"  # the native reference
	plain_pod "p$i" "va$i" "10.241.$i.10"  # the VXLAN reference
	o=$((3 - i))
	ip -n "$n" route add "10.240.$o.0/24" via "${MN_IP[p$o]}"
	ip -n "$n" link add vx0 mtu 1500 type vxlan id 42 local "${MN_IP[p$i]}" remote "${MN_IP[p$o]}" dstport 8472 \
		noudpcsum nolearning
	ip -n "$n" addr add "10.250.0.$i/24" dev vx0
	ip -n "$n" link set vx0 up
	ip -n "$n" route add "10.241.$o.0/24" via "10.250.0.$o" dev vx0
done

# ---- measurements -------------------------------------------------------------------------------
free_port() { ip netns exec "$1" python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
declare -A RRPORT IPERF_PORT
SERVERS=()
BPF_STATS_WAS=""
mn_test_cleanup() {
	local p
	for p in "${SERVERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	[ -n "$BPF_STATS_WAS" ] && echo "$BPF_STATS_WAS" >/proc/sys/kernel/bpf_stats_enabled
	return 0
}
serve() { # POD
	local ns
	ns=$(mn_pod_ns "$1")
	rm -f "$WORK/rrport.$1"
	ip netns exec "$ns" "${PIN[@]}" "$RR" server "$WORK/rrport.$1" &
	SERVERS+=($!)
	for _ in $(seq 1 100); do [ -s "$WORK/rrport.$1" ] && break; sleep 0.05; done
	RRPORT[$1]=$(cat "$WORK/rrport.$1")
	IPERF_PORT[$1]=$(free_port "$ns")
	ip netns exec "$ns" "${PIN[@]}" iperf3 -s -p "${IPERF_PORT[$1]}" >/dev/null 2>&1 &
	SERVERS+=($!)
}
rr_once() { # CLIENT SERVER -> transactions per second
	ip netns exec "$(mn_pod_ns "$1")" "${PIN[@]}" "$RR" client "${MN_POD_IP[$2]}" "${RRPORT[$2]}" "$SECS" |
		sed -n 's/.*rate=\([0-9.]*\).*/\1/p'
}
bulk_once() { # CLIENT SERVER -> Gbit/s received
	ip netns exec "$(mn_pod_ns "$1")" "${PIN[@]}" iperf3 -c "${MN_POD_IP[$2]}" -p "${IPERF_PORT[$2]}" -t "$SECS" -J |
		python3 -c 'import json, sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}
for p in fb na2 va2; do serve "$p"; done
sleep 0.3
declare -A CLIENT=([native]=fa [native-bpf]=fa [tunnel]=fa [plain]=na1 [plain-vxlan]=va1)
declare -A SERVER=([native]=fb [native-bpf]=fb [tunnel]=fb [plain]=na2 [plain-vxlan]=va2)
declare -A RRS BULKS RR_RATIOS BULK_RATIOS NSP
warm() { ip netns exec "$(mn_pod_ns "${CLIENT[$1]}")" ping -c 2 -i 0.2 -W 1 "${MN_POD_IP[${SERVER[$1]}]}" >/dev/null || die "$1: no path from ${CLIENT[$1]} to ${SERVER[$1]}"; }

# ---- the programs' own cost: bpf_stats (run_cnt, run_time_ns) of every fibril
# program on both nodes, read around each fibril run; the reference side
# runs no program at all
BPF_STATS_WAS=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo "")
echo 1 >/proc/sys/kernel/bpf_stats_enabled || die "cannot enable bpf_stats"
PROGS=()
prog_ids() { # the ids of both nodes' programs (veth ingress, egress, overlay)
	local n
	PROGS=()
	for n in f1 f2; do
		# shellcheck disable=SC2207
		PROGS+=($(mn_api "$n" http://x/v1/datapath | python3 -c '
import json, sys
d = json.load(sys.stdin)
ids = [d.get("program-id"), d.get("program-id-egress"), (d.get("tunnel") or {}).get("program-id")]
print(" ".join(str(i) for i in ids if i))'))
	done
}
prog_stats() { # -> "run_cnt run_time_ns" summed over PROGS
	local id c=0 t=0 cnt ns
	for id in "${PROGS[@]}"; do
		read -r cnt ns < <(bpftool -j prog show id "$id" | python3 -c 'import json, sys; j = json.load(sys.stdin); print(j.get("run_cnt", 0), j.get("run_time_ns", 0))')
		c=$((c + cnt)) t=$((t + ns))
	done
	echo "$c $t"
}
# timed SETUP KIND : one run of KIND (rr|bulk) of SETUP, its figure in V (no
# subshell: for a fibril setup the programs' runs and ns are added to
# NSP[SETUP.KIND])
timed() {
	local s=$1 kind=$2 c0 t0 c1 t1 c0x t0x v
	if [ "${FIBRIL[$s]}" = 1 ]; then read -r c0 t0 <<<"$(prog_stats)"; fi
	if [ "$kind" = rr ]; then v=$(rr_once "${CLIENT[$s]}" "${SERVER[$s]}"); else v=$(bulk_once "${CLIENT[$s]}" "${SERVER[$s]}"); fi
	if [ "${FIBRIL[$s]}" = 1 ]; then
		read -r c1 t1 <<<"$(prog_stats)"
		read -r c0x t0x <<<"${NSP[$s.$kind]:-0 0}"
		NSP[$s.$kind]="$((c0x + c1 - c0)) $((t0x + t1 - t0))"
	fi
	V=$v
}
declare -A FIBRIL=([native]=1 [native-bpf]=1 [tunnel]=1 [plain]=0 [plain-vxlan]=0)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
# pair SETUP-A SETUP-B KIND : one run of each, back to back, in VA / VB; the
# order alternates from round to round (A B, B A, ...) so neither side is
# always the one that runs first
pair() {
	if [ $((r % 2)) = 1 ]; then
		timed "$1" "$3"
		VA=$V
		timed "$2" "$3"
		VB=$V
	else
		timed "$2" "$3"
		VB=$V
		timed "$1" "$3"
		VA=$V
	fi
}
# measure FIBRIL-SETUP REFERENCE : REPEAT rounds, each one run of the fibril
# setup and one of the reference, request/response then bulk; the ratio of
# each round
measure() {
	local a=$1 b=$2 r
	warm "$a"
	warm "$b"
	prog_ids
	for r in $(seq 1 "$REPEAT"); do
		pair "$a" "$b" rr
		RRS[$a]="${RRS[$a]:-} $VA" RRS[$b]="${RRS[$b]:-} $VB"
		RR_RATIOS[$a]="${RR_RATIOS[$a]:-} $(ratio "$VA" "$VB")"
		printf '  round %d TCP_RR: %s %.0f/s, %s %.0f/s, ratio %s\n' "$r" "$a" "$VA" "$b" "$VB" "$(ratio "$VA" "$VB")"
		pair "$a" "$b" bulk
		BULKS[$a]="${BULKS[$a]:-} $VA" BULKS[$b]="${BULKS[$b]:-} $VB"
		BULK_RATIOS[$a]="${BULK_RATIOS[$a]:-} $(ratio "$VA" "$VB")"
		printf '  round %d bulk:   %s %s Gbit/s, %s %s Gbit/s, ratio %s\n' "$r" "$a" "$VA" "$b" "$VB" "$(ratio "$VA" "$VB")"
	done
}
echo "bench_crossnode: $REPEAT rounds of ${SECS}s runs, fibril and its reference interleaved; both ends on CPU $PIN_CPU; kernel $(uname -r), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
fib=- enc=-
if want native; then measure native plain; fi
if want native-bpf; then
	start_mode native bpf
	hr=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["host-routing"])')
	[ "$hr" = bpf ] || die "f1 does not use host-routing bpf after the restart ($hr)"
	measure native-bpf plain
	fib=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["packets-from-endpoints"]["to-fib"])')
fi
if want tunnel; then
	start_mode tunnel
	tun=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["tunnel"]["mode"])')
	[ "$tun" = vxlan ] || die "f1 is not in tunnel mode after the restart ($tun)"
	measure tunnel plain-vxlan
	enc=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["packets-from-endpoints"]["to-tunnel"])')
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
med() { printf '%s\n' $1 | median; }
spread() { printf '%s\n' $1 | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }
goal() { awk -v r="$1" 'BEGIN { print (r >= 0.95 ? "met" : "NOT met") }'; }
nsp() { # SETUP KIND -> ns/packet of the programs
	local c t
	read -r c t <<<"${NSP[$1.$2]:-0 0}"
	awk -v c="$c" -v t="$t" 'BEGIN { if (c > 0) printf "%.0f", t / c; else print "-" }'
}
row() { # LABEL FMT SETUP REF KIND
	local f r ratios
	if [ "$5" = rr ]; then f=${RRS[$3]} r=${RRS[$4]} ratios=${RR_RATIOS[$3]}; else f=${BULKS[$3]} r=${BULKS[$4]} ratios=${BULK_RATIOS[$3]}; fi
	printf "%-34s %10$2 %10$2 %7s %13s  %-8s %6s ns/pkt\n" "$1" "$(med "$f")" "$(med "$r")" "$(med "$ratios")" "$(spread "$ratios")" \
		"$(goal "$(med "$ratios")")" "$(nsp "$3" "$5")"
}
echo
printf '%-34s %10s %10s %7s %13s  %-8s %s\n' "median of $REPEAT rounds" "fibril" "reference" "ratio" "ratio spread" "goal>=.95" "fibril programs (bpf_stats; reference: none)"
if want native; then
	row "native TCP_RR (/s) vs plain" .0f native plain rr
	row "native bulk (Gbit/s) vs plain" .2f native plain bulk
fi
if want native-bpf; then
	row "native+bpf-hr TCP_RR (/s) vs plain" .0f native-bpf plain rr
	row "native+bpf-hr bulk (Gbit/s) vs plain" .2f native-bpf plain bulk
fi
if want tunnel; then
	row "tunnel TCP_RR (/s) vs kernel VXLAN" .0f tunnel plain-vxlan rr
	row "tunnel bulk (Gbit/s) vs kernel VXLAN" .2f tunnel plain-vxlan bulk
fi
echo "ratio: the median of the rounds' own ratios (each round: fibril and the reference back to back, the order alternating)"
echo "packets f1's program sent by the FIB (to-fib, host-routing bpf): $fib; encapsulated (to-tunnel): $enc; load average $(cut -d' ' -f1-3 /proc/loadavg)"
