#!/usr/bin/env bash
# tests/bench/bench_crossnode.sh - cross-node pod-to-pod cost, measured (as
# root, by hand or from `make bench`; never by make check). Two nodes
# (network namespaces on an underlay bridge, tests/lib/multinode.sh, one
# etcd) run fibril; two more nodes on the same bridge run no fibril at all.
# A pod on each node; four setups, each between a pod of the first node
# and a pod of the second:
#   native       fibril, routing-mode native (a route per remote pod CIDR,
#                the tc programs on the pods' veths) with [datapath]
#                host-routing = legacy (set: the default is bpf)
#   native-bpf   the same with [datapath] host-routing = bpf, the default
#                (the program sends a packet for the other node's pod
#                out of the underlay by bpf_fib_lookup + bpf_redirect(_neigh),
#                and fibril_from_netdev on the receiver's underlay redirects
#                it into the pod: neither node's stack routes it)
#   plain        no fibril: the kernel forwards between veths with /32
#                routes and a route per remote pod CIDR via the other node
#   tunnel       fibril, routing-mode tunnel (the same agents restarted: the
#                program encapsulates into the external VXLAN device, the
#                overlay program delivers), host-routing legacy
#   tunnel-bpf   the same with host-routing = bpf, the default: nothing
#                changes for the pods' packets (encapsulated either way),
#                but fibril_from_netdev's source check runs on the outer
#                packets the underlay delivers
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
# their spread (goal: within 5%). The ratio rounds run with
# kernel.bpf_stats_enabled off, as production does: with it on, every
# program run reads the clock twice, a cost only fibril's side pays (the
# reference runs no program). The fibril programs' own cost is measured
# apart: after the ratio rounds of a setup, one more fibril-only round (one
# TCP_RR and one bulk run) with bpf_stats on gives run_time_ns / run_cnt of
# both nodes' programs (and that round's rate, not part of any ratio).
# A kernel.bpf_stats_enabled found on (left so by another run) is switched
# off for the run and restored at its end. Nothing is asserted.
# Environment: top_srcdir, top_builddir (as make sets them); optional
# REPEAT (10), SECS (2: short runs, many rounds, so a shared machine's load
# changes hit both sides alike), SETUPS (the fibril setups to run, default
# "native native-bpf tunnel tunnel-bpf"; e.g. SETUPS=tunnel runs tunnel vs
# plain-vxlan only), PIN_CPU (default the last CPU: both ends run there,
# so the figures measure the path, not the scheduler), CC, STATS_IN_RATIO=1
# (keep bpf_stats on during the ratio rounds too, as this bench once did: to
# show what the stats cost the ratio).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_MTU=9000 # room for VXLAN's 50 bytes around 1500-byte pod frames
. "$top_srcdir/tests/lib/multinode.sh"

REPEAT=${REPEAT:-10}
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
mn_test_cleanup() {
	local p
	for p in "${SERVERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	stats_off
	[ -z "${SYSCTL_WAS:-}" ] || echo "$SYSCTL_WAS" >/proc/sys/kernel/bpf_stats_enabled
	return 0
}
serve() { # POD
	local ns
	ns=$(mn_pod_ns "$1")
	rm -f "$WORK/rrport.$1"
	ip netns exec "$ns" "${PIN[@]}" "$RR" server "$WORK/rrport.$1" &
	SERVERS+=($!)
	wait_for 5 test -s "$WORK/rrport.$1" || true
	RRPORT[$1]=$(cat "$WORK/rrport.$1")
	IPERF_PORT[$1]=$(free_port "$ns")
	ip netns exec "$ns" "${PIN[@]}" iperf3 -s -p "${IPERF_PORT[$1]}" >/dev/null 2>&1 &
	SERVERS+=($!)
	wait_for 5 _listening "$ns" "${IPERF_PORT[$1]}" || true
}
_listening() { ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .; }
rr_once() { # CLIENT SERVER -> transactions per second
	ip netns exec "$(mn_pod_ns "$1")" "${PIN[@]}" "$RR" client "${MN_POD_IP[$2]}" "${RRPORT[$2]}" "$SECS" |
		sed -n 's/.*rate=\([0-9.]*\).*/\1/p'
}
bulk_once() { # CLIENT SERVER -> Gbit/s received
	ip netns exec "$(mn_pod_ns "$1")" "${PIN[@]}" iperf3 -c "${MN_POD_IP[$2]}" -p "${IPERF_PORT[$2]}" -t "$SECS" -J |
		python3 -c 'import json, sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}
for p in fb na2 va2; do serve "$p"; done
declare -A CLIENT=([native]=fa [native-bpf]=fa [tunnel]=fa [tunnel-bpf]=fa [plain]=na1 [plain-vxlan]=va1)
declare -A SERVER=([native]=fb [native-bpf]=fb [tunnel]=fb [tunnel-bpf]=fb [plain]=na2 [plain-vxlan]=va2)
declare -A RRS BULKS RR_RATIOS BULK_RATIOS
warm() { ip netns exec "$(mn_pod_ns "${CLIENT[$1]}")" ping -c 2 -i 0.2 -W 1 "${MN_POD_IP[${SERVER[$1]}]}" >/dev/null || die "$1: no path from ${CLIENT[$1]} to ${SERVER[$1]}"; }

# ---- the programs' own cost, measured apart from the ratios: bpf_stats
# (run_cnt, run_time_ns) of every tc program attached in both fibril nodes'
# namespaces, over one extra fibril-only round per setup. bpf_stats is
# switched on by BPF_ENABLE_STATS (a file descriptor held by a helper
# process: counted by the kernel, so it neither clobbers nor is clobbered by
# anyone else's kernel.bpf_stats_enabled), and only for that round.
STATS_PID=""
stats_on() {
	rm -f "$WORK/stats.on"
	python3 -c '
import ctypes, os, sys
nr = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)
if nr is None:
    sys.exit("bpf(2) number unknown on this machine")
libc = ctypes.CDLL(None, use_errno=True)
attr = ctypes.create_string_buffer(128)  # BPF_ENABLE_STATS { type = BPF_STATS_RUN_TIME (0) }
fd = libc.syscall(nr, 32, attr, 128)
if fd < 0:
    sys.exit("BPF_ENABLE_STATS: " + os.strerror(ctypes.get_errno()))
open(sys.argv[1], "w").close()
sys.stdin.read()' "$WORK/stats.on" < <(sleep 100000) & # sleep: a stdin that stays open: the stats stay on while it reads
	STATS_PID=$!
	local _
	wait_for 5 test -e "$WORK/stats.on" && return 0
	die "cannot enable bpf_stats (BPF_ENABLE_STATS)"
}
stats_off() {
	[ -n "$STATS_PID" ] || return 0
	kill "$STATS_PID" 2>/dev/null
	wait "$STATS_PID" 2>/dev/null || true
	STATS_PID=""
}
stats_sysctl() { cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo "?"; }
# kernel.bpf_stats_enabled left on (by someone else, or a run that died
# before restoring it) would bias every ratio round: off for this run,
# restored at its end
SYSCTL_WAS=""
if [ "${STATS_IN_RATIO:-0}" != 1 ] && [ "$(stats_sysctl)" = 1 ]; then
	SYSCTL_WAS=1
	echo 0 >/proc/sys/kernel/bpf_stats_enabled || die "cannot switch kernel.bpf_stats_enabled off"
	echo "bench_crossnode: kernel.bpf_stats_enabled was 1: 0 for this run (restored at its end)" >&2
fi
# prog_stats -> one line per program name: "name run_cnt run_time_ns", summed
# over both fibril nodes (every tc program attached in their namespaces)
prog_stats() {
	local n
	for n in f1 f2; do
		ip netns exec "$(mn_ns "$n")" bpftool -j net show
	done | python3 -c '
import json, subprocess, sys
ids = set()
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    for d in json.loads(line):
        for t in d.get("tc", []):
            ids.add(t["id"])
tot = {}
for i in sorted(ids):
    j = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(i)], capture_output=True, text=True).stdout)
    c, t = tot.get(j["name"], (0, 0))
    tot[j["name"]] = (c + j.get("run_cnt", 0), t + j.get("run_time_ns", 0))
for k, (c, t) in sorted(tot.items()):
    print(k, c, t)'
}
# cost_round SETUP : one TCP_RR and one bulk run of the fibril setup with
# bpf_stats on; prints the programs' ns/packet (all together and per
# program) and keeps the totals in NSP[SETUP.KIND]
declare -A NSP STATS_RATE
cost_round() {
	local s=$1 kind before after v
	stats_on
	for kind in rr bulk; do
		before=$(prog_stats)
		if [ "$kind" = rr ]; then v=$(rr_once "${CLIENT[$s]}" "${SERVER[$s]}"); else v=$(bulk_once "${CLIENT[$s]}" "${SERVER[$s]}"); fi
		after=$(prog_stats)
		STATS_RATE[$s.$kind]=$v
		NSP[$s.$kind]=$(python3 -c '
import sys
def parse(t):
    return {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in t.splitlines() if l.strip()}
b, a = parse(sys.argv[1]), parse(sys.argv[2])
c = t = 0
parts = []
for k in sorted(a):
    dc = a[k][0] - b.get(k, (0, 0))[0]
    dt = a[k][1] - b.get(k, (0, 0))[1]
    if dc > 0:
        parts.append("%s %.0f ns x %d" % (k, dt / dc, dc))
    c += dc
    t += dt
print(c, t, "; ".join(parts))' "$before" "$after")
		printf '  bpf_stats round (fibril only, stats on, not in any ratio) %s: %s; programs: %s\n' "$kind" "$v" "$(cut -d' ' -f3- <<<"${NSP[$s.$kind]}")"
	done
	stats_off
}
# timed SETUP KIND : one run of KIND (rr|bulk) of SETUP, its figure in V
timed() {
	if [ "$2" = rr ]; then V=$(rr_once "${CLIENT[$1]}" "${SERVER[$1]}"); else V=$(bulk_once "${CLIENT[$1]}" "${SERVER[$1]}"); fi
}
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
# each round; then the fibril setup's bpf_stats round
measure() {
	local a=$1 b=$2 r
	warm "$a"
	warm "$b"
	[ "${STATS_IN_RATIO:-0}" = 1 ] && stats_on
	local sysctl_before
	sysctl_before=$(stats_sysctl)
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
	stats_off
	# someone else's kernel.bpf_stats_enabled (another bench) biases the
	# rounds it covers: say so
	if [ "$sysctl_before$(stats_sysctl)" != 00 ]; then
		SYSCTL_ON="${SYSCTL_ON:-}$a "
		echo "  WARNING: kernel.bpf_stats_enabled was on (someone else's) during the $a rounds: their ratios are biased against fibril" >&2
	fi
	cost_round "$a"
}
SETUPS=${SETUPS:-native native-bpf tunnel tunnel-bpf}
has_setup() { [[ " $SETUPS " == *" $1 "* ]]; }
stats_mode="off (bpf_stats on only in the separate bpf_stats rounds)"
[ "${STATS_IN_RATIO:-0}" = 1 ] && stats_mode="ON (STATS_IN_RATIO=1: biased against fibril)"
echo "bench_crossnode: $REPEAT rounds of ${SECS}s runs, fibril and its reference interleaved; both ends on CPU $PIN_CPU; kernel $(uname -r), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench_crossnode: bpf_stats in the ratio rounds: $stats_mode; kernel.bpf_stats_enabled (someone else's) is $(stats_sysctl)"
fib=- enc=-
if has_setup native; then
	measure native plain
fi
if has_setup native-bpf; then
	start_mode native bpf
	hr=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["host-routing"])')
	[ "$hr" = bpf ] || die "f1 does not use host-routing bpf after the restart ($hr)"
	measure native-bpf plain
	fib=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["packets-from-endpoints"]["to-fib"])')
fi
if has_setup tunnel; then
	start_mode tunnel
	tun=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["tunnel"]["mode"])')
	[ "$tun" = vxlan ] || die "f1 is not in tunnel mode after the restart ($tun)"
	measure tunnel plain-vxlan
	enc=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; print(json.load(sys.stdin)["packets-from-endpoints"]["to-tunnel"])')
fi
if has_setup tunnel-bpf; then
	start_mode tunnel bpf
	hr=$(mn_api f1 http://x/v1/datapath | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["tunnel"]["mode"], d["host-routing"])')
	[ "$hr" = "vxlan bpf" ] || die "f1 is not in tunnel mode with host-routing bpf after the restart ($hr)"
	measure tunnel-bpf plain-vxlan
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
med() { printf '%s\n' $1 | median; }
spread() { printf '%s\n' $1 | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }
goal() { awk -v r="$1" 'BEGIN { print (r >= 0.95 ? "met" : "NOT met") }'; }
nsp() { # SETUP KIND -> ns/packet of the programs in the bpf_stats round
	local c t
	read -r c t _ <<<"${NSP[$1.$2]:-0 0}"
	awk -v c="$c" -v t="$t" 'BEGIN { if (c > 0) printf "%.0f", t / c; else print "-" }'
}
row() { # LABEL FMT SETUP REF KIND
	local f r ratios
	has_setup "$3" || return 0
	if [ "$5" = rr ]; then f=${RRS[$3]} r=${RRS[$4]} ratios=${RR_RATIOS[$3]}; else f=${BULKS[$3]} r=${BULKS[$4]} ratios=${BULK_RATIOS[$3]}; fi
	printf "%-34s %10$2 %10$2 %7s %13s  %-8s %6s ns/pkt (at %s)\n" "$1" "$(med "$f")" "$(med "$r")" "$(med "$ratios")" "$(spread "$ratios")" \
		"$(goal "$(med "$ratios")")" "$(nsp "$3" "$5")" "${STATS_RATE[$3.$5]:-}"
}
echo
printf '%-34s %10s %10s %7s %13s  %-8s %s\n' "median of $REPEAT rounds" "fibril" "reference" "ratio" "ratio spread" "goal>=.95" "programs' cost (bpf_stats round, apart; reference: none)"
row "native TCP_RR (/s) vs plain" .0f native plain rr
row "native bulk (Gbit/s) vs plain" .2f native plain bulk
row "native+bpf-hr TCP_RR (/s) vs plain" .0f native-bpf plain rr
row "native+bpf-hr bulk (Gbit/s) vs plain" .2f native-bpf plain bulk
row "tunnel TCP_RR (/s) vs kernel VXLAN" .0f tunnel plain-vxlan rr
row "tunnel bulk (Gbit/s) vs kernel VXLAN" .2f tunnel plain-vxlan bulk
row "tunnel+bpf-hr TCP_RR (/s) vs VXLAN" .0f tunnel-bpf plain-vxlan rr
row "tunnel+bpf-hr bulk (Gbit/s) vs VXLAN" .2f tunnel-bpf plain-vxlan bulk
echo "ratio: the median of the rounds' own ratios (each round: fibril and the reference back to back, the order alternating); bpf_stats in the ratio rounds: $stats_mode"
[ -z "${SYSCTL_ON:-}" ] || echo "WARNING: kernel.bpf_stats_enabled was on (someone else's) during the rounds of: $SYSCTL_ON"
echo "programs' cost: ns per program run summed over both nodes' programs in one extra fibril-only round with bpf_stats on (its own rate in brackets, not in any ratio)"
echo "packets f1's program sent by the FIB (to-fib, host-routing bpf): $fib; encapsulated (to-tunnel): $enc; load average $(cut -d' ' -f1-3 /proc/loadavg)"
