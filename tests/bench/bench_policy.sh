#!/usr/bin/env bash
# tests/bench/bench_policy.sh - the policy module with 1,000 endpoints and
# 1,000 CiliumNetworkPolicies (as root, by hand or from `make bench`; never
# by make check). A node netns holds 1,000 veth pairs (the endpoints' host
# sides) and runs the agent with ipam-cluster-pool, ipam-api, endpoint,
# datapath and policy; tests/bench/bench_policy.py attaches the endpoints
# through the endpoint API (no pod processes: the figures are the agent's)
# and prints, each beside its reference from the same run: one policy
# change -> map written (p50/p99, goal p99 < 10 ms), the 1,000 policies
# computed over the 1,000 endpoints (goal < 1 s), the agent's RSS (goal
# < 64 MB), and the per-packet cost: TCP request/response between two pods
# with the 1,000 policies in force vs none, interleaved in RR_REPEAT rounds
# (5) of RR_SECS (3) s, each round's ratio and the programs' ns/packet
# (bpf_stats), the median ratio and its spread. Figures are printed, never
# asserted. From a build dir:
#   top_srcdir=/work/main top_builddir=$PWD bash tests/bench/bench_policy.sh
# Environment: ENDPOINTS (1000), CHANGES (200).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
BPFFS_DIR="/sys/fs/bpf/fibril-bench-pol-$$"
N=${ENDPOINTS:-1000}
CHANGES=${CHANGES:-200}
# shellcheck source=bench_lib.sh
BENCH_NAME=bench_policy . "$top_srcdir/tests/bench/bench_lib.sh"
MODS=(ipam-cluster-pool ipam-api endpoint datapath policy)
bench_require ip python3
bench_require_modules "${MODS[@]}"
bench_find_agent

NODE=fbp-$$-node
PODA=fbp-$$-a
PODB=fbp-$$-b
bench_cleanup() {
	local rc=$?
	set +e
	bench_kill_netns "$NODE" "$PODA" "$PODB"
	(exit "$rc")
	cleanup
}
trap bench_cleanup EXIT INT TERM
for ns in "$NODE" "$PODA" "$PODB"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
done
RR=$top_builddir/tests/bench/bench_dp_rr
if ! "${MAKE:-make}" -s -C "$top_builddir" tests/bench/bench_dp_rr >/dev/null 2>&1; then
	RR=$WORK/bench_dp_rr
	${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -o "$RR" "$top_srcdir/tests/bench/bench_dp_rr.c" ||
		bench_die "cannot build bench_dp_rr"
fi
mkdir -p "$BPFFS_DIR" "$WORK/state" "$WORK/run"
bench_install_modules "$WORK/mods" "${MODS[@]}"
# endpoints 0 and 1 are two pods (their own netns: the request/response
# figure); the MACs are the ones bench_policy.py gives the endpoint API
mac() { printf '02:%s:00:00:%02x:%02x' "$1" $(($2 >> 8)) $(($2 & 255)); }
printf 'link add fbp0 address %s type veth peer name eth0 address %s netns %s\n' "$(mac fb 0)" "$(mac fe 0)" "$PODA" >"$WORK/links.batch"
printf 'link add fbp1 address %s type veth peer name eth0 address %s netns %s\n' "$(mac fb 1)" "$(mac fe 1)" "$PODB" >>"$WORK/links.batch"
printf 'link set fbp0 up\nlink set fbp1 up\n' >>"$WORK/links.batch"
for i in $(seq 2 $((N - 1))); do
	printf 'link add fbp%d type veth peer name fbq%d\nlink set fbp%d up\nlink set fbq%d up\n' "$i" "$i" "$i" "$i"
done >>"$WORK/links.batch"
ip -n "$NODE" -batch "$WORK/links.batch" || bench_die "cannot create the veths"

ip -n "$PODA" link set eth0 up
ip -n "$PODB" link set eth0 up
[ -w /proc/sys/kernel/bpf_stats_enabled ] && BPF_STATS_WAS=$(cat /proc/sys/kernel/bpf_stats_enabled) || BPF_STATS_WAS=""
ip netns exec "$NODE" env RR="$RR" PODS="$PODA $PODB" RR_SECS="${RR_SECS:-3}" RR_REPEAT="${RR_REPEAT:-5}" \
	python3 "$top_srcdir/tests/bench/bench_policy.py" "$WORK" "$N" "$CHANGES" "$NODE" \
	"$AGENT_BIN" --set "agent.module-dir=$WORK/mods" --set "agent.socket=$WORK/run/fibril.sock" \
	--set "agent.state-dir=$WORK/state" --set "agent.run-dir=$WORK/run" \
	--set "agent.bpffs-dir=$BPFFS_DIR" --set "ipam-cluster-pool.node-cidr=10.98.0.0/20" \
	>"$WORK/out" || bench_die "the driver failed: $(tail -n 5 "$WORK/out")"
[ -n "$BPF_STATS_WAS" ] && echo "$BPF_STATS_WAS" >/proc/sys/kernel/bpf_stats_enabled
v() { sed -n "s/^$1=//p" "$WORK/out"; }
goal() { awk -v v="$1" -v l="$2" 'BEGIN { print (v + 0 < l + 0) ? "met" : "NOT met" }'; }
read -r c50 c99 cmax m50 m99 <<<"$(v change_ms)"
read -r r50 r99 rm50 rm99 <<<"$(v change_ref_ms)"
read -r ims ius ieps iwrites <<<"$(v import_ms)"
read -r rms rus <<<"$(v import_ref_ms)"
read -r rss hwm <<<"$(v rss)"
read -r rss0 hwm0 <<<"$(v rss_ref)"
read -r rss2 hwm2 <<<"$(v rss_restart)"
read -r sus seps <<<"$(v restart)"
echo "-- policy: $N endpoints (one identity each), $N CNPs (endpoints attached in $(v endpoints_s) s)"
printf '   one policy changed -> map written: the module p50 %s ms, p99 %s ms (goal p99 < 10 ms: %s); each re-resolved 1 endpoint\n' \
	"$m50" "$m99" "$(goal "$m99" 10)"
printf '     the PUT round trip (with the state file fsynced): p50 %s ms, p99 %s ms, max %s ms over %d changes (goal: %s)\n' \
	"$c50" "$c99" "$cmax" "$CHANGES" "$(goal "$c99" 10)"
printf '     reference: the same change with nothing loaded: module p50 %s ms, p99 %s ms; PUT p50 %s ms, p99 %s ms\n' \
	"$rm50" "$rm99" "$r50" "$r99"
printf '   %d policies imported over %d endpoints: %s ms (PUT reply), computation %.1f ms for %d endpoints, %d map writes (goal < 1 s: %s)\n' \
	"$N" "$N" "$ims" "$(awk -v u="$ius" 'BEGIN { print u / 1000 }')" "$ieps" "$iwrites" "$(goal "$ius" 1000000)"
printf '     reference: the same import with no endpoint: %s ms (computation %.1f ms)\n' "$rms" "$(awk -v u="$rus" 'BEGIN { print u / 1000 }')"
printf '   after kill -9 and start: full computation %.1f ms for %d endpoints\n' "$(awk -v u="$sus" 'BEGIN { print u / 1000 }')" "$seps"
read -r rr_pol rr_none ns_pol ns_none <<<"$(v rr)"
read -r rr_ratio rr_lo rr_hi <<<"$(v rr_ratio)"
printf '   TCP request/response between two pods, rounds of: with the %d policies in force (pod b selected), then with none\n' "$N"
v rr_round | while read -r r a b q na nb load; do
	printf '     round %s: %s/s with, %s/s without, ratio %s; program %s / %s ns/packet; load %s\n' "$r" "$a" "$b" "$q" "$na" "$nb" "$load"
done
printf '     median: %s/s with, %s/s without; median ratio %s (spread %s-%s; goal >= 0.95: %s)\n' \
	"$rr_pol" "$rr_none" "$rr_ratio" "$rr_lo" "$rr_hi" "$(awk -v r="$rr_ratio" 'BEGIN { print (r >= 0.95 ? "met" : "NOT met") }')"
printf '     the program (bpf_stats, both hooks): %s ns/packet with the policies, %s ns/packet without\n' "$ns_pol" "$ns_none"
printf '   agent RSS: %d kB (peak %d kB) loaded, %d kB after the restart (goal < 64 MB: %s); reference: %d kB right after start\n' \
	"$rss" "$hwm" "$rss2" "$(goal "$hwm" 65536)" "$rss0"
