#!/usr/bin/env bash
# tests/bench/bench_flows.sh - hubble-lite's figures (as root, by hand or
# from `make bench`; never by make check):
#   1. decoding and enrichment rate on one core (tests/bench/bench_flows),
#      beside copying each event into a ring slot (same run);
#   2. the agent (ipam, endpoint, datapath, policy, hubble-lite) in a node
#      namespace, pod a sending UDP to pod b at RATE packets/s (iperf3, 64
#      byte datagrams) for SECS seconds with a trace event per packet:
#      events that became flows, events lost (the BPF ring had no room:
#      dp_metrics event-lost; the bus: hubble's lost counter), the agent's
#      CPU; the reference is the same traffic with trace events off;
#   3. the same with 10 websocket followers of /v1/flows/stream
#      (tests/bench/bench_ws_follow: the CLI's client counting lines): what
#      each got and lost, frames per second, the age of a flow when a
#      follower reads it (p50, p99), and the CPU per flow: the
#      agent making it, the agent serving it to each follower, a follower
#      reading it;
#   4. the agent's RSS with the default ring of 4095, before any flow and
#      with the ring full.
# Nothing is asserted. Environment: top_srcdir, top_builddir; optional
# RATE (100000), SECS (5), FOLLOWERS (10).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/flowpods.sh"
RATE=${RATE:-100000}
SECS=${SECS:-5}
FOLLOWERS=${FOLLOWERS:-10}
for tool in iperf3 python3; do
	command -v "$tool" >/dev/null || { echo "bench_flows: $tool is not installed" >&2; exit 1; }
done
say() { printf '%s\n' "$*"; }
field() { sed -n "s/^$1=//p" "$2"; }
goal() { awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
	ok = (op == "<") ? (v + 0 < l + 0) : (op == "=") ? (v + 0 == l + 0) : (v + 0 > l + 0); print (ok ? "met" : "NOT met") }'; }

say "hubble-lite: flows (tests/bench/bench_flows.sh)"
# ---- 1. decoding on one core ----------------------------------------------------------------------
"$top_builddir/tests/bench/bench_flows" 5000000 >"$WORK/decode.out"
dec=$(field decode_per_s "$WORK/decode.out")
printf '   %-58s %14s\n' "decode + enrich into the ring (module code), events/s" "$dec"
printf '   %-58s %14s\n' "reference: copy each event into a ring slot, events/s" "$(field copy_per_s "$WORK/decode.out")"
printf '   %-58s %14s\n' "JSON of a flow for the stream ($(field json_bytes "$WORK/decode.out") bytes), flows/s" "$(field json_per_s "$WORK/decode.out")"
say "   goal >= 1,000,000 events/s on one core: $(goal "$dec" '>' 999999)"
printf '   %-58s %14s\n' "... naming services (1,000 services of the lb module), events/s" "$(field svc_decode_per_s "$WORK/decode.out")"
printf '   %-58s %14s\n' "reference: the same without services, interleaved, events/s" "$(field nosvc_decode_per_s "$WORK/decode.out")"
say "   cost of naming services: x$(field svc_ratio_median "$WORK/decode.out") median of 7 interleaved rounds (x$(field svc_ratio_min "$WORK/decode.out") .. x$(field svc_ratio_max "$WORK/decode.out")); flows named in the ring: $(field svc_named_in_ring "$WORK/decode.out")"

# ---- the agent under traffic ------------------------------------------------------------------------
ticks() { awk '{ print $14 + $15 }' "/proc/$AGENT_PID/stat"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$AGENT_PID/status"; }
metric_sum() { api http://x/metrics | awk -v re="$1" '$0 ~ re { s += $NF } END { printf "%.0f\n", s }'; }
seen() { api "http://x/v1/flows?last=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seen"])'; }
iperf_server() {
	ip netns exec "${NS[b]}" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
	BG+=($!)
	wait_for 5 _iperf_listening || true
}
_iperf_listening() { ip netns exec "${NS[b]}" ss -Hltn "sport = :5201" | grep -q .; }
# run_traffic NAME : SECS of UDP a -> b at RATE packets/s; key=value lines in $WORK/NAME
run_traffic() {
	local name=$1 t0 t1 s0 s1 l0 l1 h0 h1 w0 w1 u0 u1
	iperf_server
	s0=$(seen) l0=$(metric_sum '^fibril_datapath_packets_total.*reason="event-lost"') h0=$(metric_sum '^fibril_hubble_lost_events_total')
	u0=$(metric_sum '^fibril_hubble_flows_total.*protocol="UDP"')
	t0=$(ticks) w0=$(date +%s.%N)
	ip netns exec "${NS[a]}" iperf3 -c "$B" -p 5201 -u -l 64 -b "$((RATE * 64 * 8))" -t "$SECS" -J \
		>"$WORK/$name.iperf" 2>&1 || true
	sleep 1 # sleep: the agent drains the run's last events before its CPU time is read (a measurement's tail)
	t1=$(ticks) w1=$(date +%s.%N)
	s1=$(seen) l1=$(metric_sum '^fibril_datapath_packets_total.*reason="event-lost"') h1=$(metric_sum '^fibril_hubble_lost_events_total')
	u1=$(metric_sum '^fibril_hubble_flows_total.*protocol="UDP"')
	python3 - "$WORK/$name.iperf" "$SECS" >"$WORK/$name" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    p = j["end"]["sum"]["packets"]
except Exception:
    p = 0
print("packets=%d" % p)
print("pps=%.0f" % (p / float(sys.argv[2])))
PY
	{
		echo "flows=$((s1 - s0))"
		echo "udp_flows=$((u1 - u0))"
		echo "dp_lost=$((l1 - l0))"
		echo "bus_lost=$((h1 - h0))"
		echo "cpu_pct=$(awk -v t="$((t1 - t0))" -v w0="$w0" -v w1="$w1" -v hz="$(getconf CLK_TCK)" \
			'BEGIN { printf "%.1f", 100 * t / hz / (w1 - w0) }')"
		echo "cpu_s=$(awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", t / hz }')"
	} >>"$WORK/$name"
}

flowpods_start --set datapath.trace-events=false >"$WORK/setup.log" 2>&1 ||
	{ cat "$WORK/setup.log"; exit 1; }
run_traffic off
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.12.0/24 \
	--set datapath.trace-events=true --set agent.api-tcp-listen="127.0.0.1:$TCP_PORT" \
	>>"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log"; exit 1; }
sleep 1 # sleep: the agent settles before its RSS baseline is read
rss0=$(rss_kb)
run_traffic on
rss1=$(rss_kb)
# ---- 3. fan-out ----------------------------------------------------------------------------------------
pids=()
for i in $(seq 1 "$FOLLOWERS"); do
	"$top_builddir/tests/bench/bench_ws_follow" "$SOCK" "/v1/flows/stream?from-pod=team/a&protocol=udp" \
		"$WORK/follower$i.ready" $((SECS + 3)) >"$WORK/follower$i.json" &
	pids+=($!)
	BG+=($!)
done
for i in $(seq 1 "$FOLLOWERS"); do
	wait_for 5 test -e "$WORK/follower$i.ready" || true
done
run_traffic fanout
for p in "${pids[@]}"; do wait "$p" || true; done
fan=$(python3 - "$WORK" "$FOLLOWERS" "$(field udp_flows "$WORK/fanout")" "$SECS" <<'PY'
import json, sys
work, n, flows, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
got = [json.load(open("%s/follower%d.json" % (work, i + 1))) for i in range(n)]
# keeping up: nothing lost, and the UDP flows less at most 0.1% (the UDP
# flow count has the few datagrams iperf3's server sends back to a, which
# the followers' from-pod filter leaves out)
full = sum(1 for g in got if g["flows"] >= 0.999 * flows and g["lost"] == 0)
share = sorted(100.0 * g["flows"] / max(flows, 1) for g in got)
ns = sorted(g["cpu_ns"] / max(g["flows"], 1) for g in got)
p50 = sorted(g.get("lat_p50_us", -1) for g in got)
p99 = sorted(g.get("lat_p99_us", -1) for g in got)
print("min_got=%d max_lost=%d full=%d share_min=%.1f share_median=%.1f frames_per_s=%.0f "
      "reader_ns_per_flow=%.0f delivered=%d lat_p50_ms=%.1f lat_p99_ms=%.1f lat_p99_worst_ms=%.1f" % (
      min(g["flows"] for g in got), max(g["lost"] for g in got), full, share[0], share[n // 2],
      sorted(g["frames"] for g in got)[n // 2] / secs, ns[n // 2], sum(g["flows"] for g in got),
      p50[n // 2] / 1e3, p99[n // 2] / 1e3, p99[-1] / 1e3))
PY
)
# the agent's CPU per flow: making it (trace events, no follower) and, on
# top of that, serving it to each follower (the fan-out run's extra CPU over
# the flows the followers got)
per_flow=$(python3 - "$(field cpu_s "$WORK/on")" "$(field flows "$WORK/on")" "$(field cpu_s "$WORK/fanout")" \
	"$(field flows "$WORK/fanout")" "$(echo "$fan" | sed -n 's/.*delivered=\([0-9]*\).*/\1/p')" <<'PY'
import sys
cpu_on, flows_on, cpu_fan, flows_fan, delivered = (float(x or 0) for x in sys.argv[1:])
make = 1e9 * cpu_on / max(flows_on, 1)
serve = 1e9 * (cpu_fan - make * flows_fan / 1e9) / max(delivered, 1)
print("make_ns=%.0f serve_ns=%.0f" % (make, serve))
PY
)

say ""
say "   agent under UDP pod a -> pod b, 64-byte datagrams for ${SECS} s (iperf3 at $RATE/s)"
printf '   %-40s %10s %10s %10s %10s %10s\n' "case" "pkts/s" "flows" "bpf lost" "bus lost" "agent CPU%"
row() { printf '   %-40s %10s %10s %10s %10s %10s\n' "$1" "$(field pps "$WORK/$2")" "$(field flows "$WORK/$2")" \
	"$(field dp_lost "$WORK/$2")" "$(field bus_lost "$WORK/$2")" "$(field cpu_pct "$WORK/$2")"; }
row "reference: trace events off" off
row "a trace event per packet" on
row "... and $FOLLOWERS websocket followers" fanout
lost=$(($(field dp_lost "$WORK/on") + $(field bus_lost "$WORK/on")))
say "   goal no event lost at $RATE/s: $lost lost, $(goal "$lost" '=' 0); goal agent CPU < 10% of a core: $(field cpu_pct "$WORK/on")% $(goal "$(field cpu_pct "$WORK/on")" '<' 10)"
say "   followers (from-pod=team/a&protocol=udp): $fan (each of $FOLLOWERS should get the $(field udp_flows "$WORK/fanout") UDP flows but iperf3's replies from b, lose 0)"
get() { echo "$2" | sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p"; }
say "   each follower's share: min $(get share_min "$fan")%, median $(get share_median "$fan")%, $(get frames_per_s "$fan") frames/s (median); goal each keeping up: $(goal "$(get full "$fan")" '=' "$FOLLOWERS")"
say "   age of a flow when a follower reads it (packet's datapath stamp to the read: ring buffer, agent queue, socket, reader's pauses): p50 $(get lat_p50_ms "$fan") ms, p99 $(get lat_p99_ms "$fan") ms (medians of the followers), worst follower's p99 $(get lat_p99_worst_ms "$fan") ms"
say "   CPU per flow: the agent making it (trace event -> flow) $(get make_ns "$per_flow") ns; the agent serving it, per follower (filter, queue, frame, write) $(get serve_ns "$per_flow") ns; a follower reading it (bench_ws_follow) $(get reader_ns_per_flow "$fan") ns"
say "   load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
say "   agent RSS with the default ring (4095): $((rss0 / 1024)) MB before any flow, $((rss1 / 1024)) MB with the ring full"
