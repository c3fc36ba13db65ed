#!/usr/bin/env bash
# tests/bench/bench_lb.sh - the lb module's figures beside kube-proxy's
# layouts built here (run by tests/bench/run.sh, or by hand as root with
# top_srcdir/top_builddir set):
#   - tests/bench/bench_lb: Maglev build (100 backends, M=16381), flows moved
#     10 -> 9 backends, programming 10,000 services from cold, one update;
#   - the reference in the same run: kube-proxy's iptables layout for the
#     same 10,000 services x 2 backends (KUBE-SERVICES -> KUBE-SVC-* with
#     statistic random -> KUBE-SEP-* DNAT), loaded with one iptables-restore
#     in a namespace of its own, and its nftables layout (a verdict map on
#     daddr . meta l4proto . th dport) with nft -f, when nft is installed;
#   - agent RSS with 10,000 services and 50,000 backends, programmed
#     through PUT /v1/service (and the time that took over the API).
BENCH_NAME=bench_lb
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/bench/bench_lib.sh"
bench_require python3 ip nsenter
bench_require_modules lb
bench_find_agent
N=${LB_BENCH_SERVICES:-10000}
NS=fblb$$
trap 'ip netns del "$NS" 2>/dev/null; cleanup' EXIT INT TERM
field() { local name=$1; shift; printf '%s\n' "$*" | tr ' ' '\n' | sed -n "s/^$name=//p" | head -n 1; }

"$top_builddir/tests/bench/bench_lb" "$N" >"$WORK/core.out" || bench_die "bench_lb failed"
core=$(cat "$WORK/core.out")
say() { printf '%s\n' "$*"; }
say "11. service load balancing (module lb; tests/bench/bench_lb.sh)"
say "   Maglev table build, 100 backends, M=16381: p50 $(field maglev_build_p50_us "$core") us, p99 $(field maglev_build_p99_us "$core") us (goal < 1000 us p50)"
say "   Maglev 10 -> 9 backends: $(field maglev_moved "$core") of the flows moved (ideal 0.10), $(field maglev_moved_others "$core") of flows on the remaining ones (ideal 0); slots per backend $(field slots_min "$core")-$(field slots_max "$core")"
say "   program $N services x 2 backends from cold (module table + map writes): $(field program_cold_ms "$core") ms (goal < 1000 ms)"
say "   one service update at $(field at "$core"): p50 $(field update_p50_us "$core") us, p99 $(field update_p99_us "$core") us (goal < 1000 us)"

# ---- the references: kube-proxy's layouts for the same N services ----------------------------
ip netns add "$NS"
python3 - "$N" >"$WORK/iptables.rules" <<'PY'
import sys
n = int(sys.argv[1])
print("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]")
rules = []
for i in range(n):
    print(":KUBE-SVC-%06d - [0:0]\n:KUBE-SEP-%06dA - [0:0]\n:KUBE-SEP-%06dB - [0:0]" % (i, i, i))
print("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
print("-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
for i in range(n):
    vip = "10.96.%d.%d" % (i // 256, i % 256)
    print("-A KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"ns/svc%d:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-%06d" % (vip, i, i))
    print("-A KUBE-SVC-%06d -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-%06dA" % (i, i))
    print("-A KUBE-SVC-%06d -j KUBE-SEP-%06dB" % (i, i))
    for s, o in (("A", 1), ("B", 2)):
        print("-A KUBE-SEP-%06d%s -p tcp -m tcp -j DNAT --to-destination 10.%d.%d.%d:8080" % (i, s, 1 + (i // 65536), (i // 256) % 256, (i % 127) * 2 + o))
print("COMMIT")
PY
if command -v iptables-restore >/dev/null; then
	t0=$(date +%s.%N)
	if nsenter --net="/run/netns/$NS" iptables-restore <"$WORK/iptables.rules" 2>"$WORK/ipt.err"; then
		t1=$(date +%s.%N)
		say "   reference, kube-proxy iptables layout, $N services: iptables-restore $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", (b - a) * 1000}') ms ($(wc -l <"$WORK/iptables.rules") lines)"
	else
		say "   reference, iptables layout: iptables-restore failed: $(head -n 1 "$WORK/ipt.err")"
	fi
else
	say "   reference, iptables layout: iptables-restore is not installed"
fi
if command -v nft >/dev/null; then
	python3 - "$N" >"$WORK/nft.rules" <<'PY'
import sys
n = int(sys.argv[1])
print("table ip kube-proxy {")
print("  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }")
for i in range(n):
    print("  chain svc-%06d { numgen random mod 2 vmap { 0 : goto sep-%06da, 1 : goto sep-%06db } }" % (i, i, i))
    for s, o in (("a", 1), ("b", 2)):
        print("  chain sep-%06d%s { dnat to 10.%d.%d.%d:8080 }" % (i, s, 1 + (i // 65536), (i // 256) % 256, (i % 127) * 2 + o))
print("  chain services { ip daddr . meta l4proto . th dport vmap @service-ips }")
print("  chain prerouting { type nat hook prerouting priority dstnat; jump services }")
print("}")
for i in range(n):
    print("add element ip kube-proxy service-ips { 10.96.%d.%d . tcp . 80 : goto svc-%06d }" % (i // 256, i % 256, i))
PY
	t0=$(date +%s.%N)
	if timeout 120 nsenter --net="/run/netns/$NS" nft -f "$WORK/nft.rules" 2>"$WORK/nft.err"; then
		t1=$(date +%s.%N)
		say "   reference, kube-proxy nftables layout, $N services: nft -f $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", (b - a) * 1000}') ms"
	else
		say "   reference, nftables layout: nft -f failed or took over 120 s: $(head -n 1 "$WORK/nft.err")"
	fi
else
	say "   reference, nftables layout: nft is not installed (apt-get install nftables)"
fi

# ---- agent RSS with N services and 5N backends, through the API -------------------------------
mods=$WORK/mods
bench_install_modules "$mods" lb
mkdir -p "$WORK/cg" # not a cgroup: socket-lb off, the maps and the table are what is measured
mapfile -t args < <(agent_args "$mods")
nsenter --net="/run/netns/$NS" "$AGENT_BIN" "${args[@]}" --set lb.socket-lb=false \
	--set lb.service-map-max=131072 --set lb.backend-map-max=65536 >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 1 200); do [ -S "$WORK/fibril.sock" ] && break; sleep 0.05; done
rss0=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
api_s=$(python3 - "$WORK/fibril.sock" "$N" <<'PY'
import http.client, json, socket, sys, time
class UC(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)
n = int(sys.argv[2])
c = UC(sys.argv[1])
t0 = time.monotonic()
for i in range(n):
    be = [{"address": "10.%d.%d.%d:8080" % (1 + (i * 5 + b) // 65536, ((i * 5 + b) // 256) % 256, (i * 5 + b) % 256)} for b in range(5)]
    body = json.dumps({"frontend": "10.96.%d.%d:80" % (i // 256, i % 256), "backends": be})
    for attempt in range(3):
        try:
            c.request("PUT", "/v1/service", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            break
        except (http.client.HTTPException, OSError):
            c.close()
            c = UC(sys.argv[1])
    if r.status != 200:
        sys.exit("PUT %d: %s" % (i, data))
print("%.2f" % (time.monotonic() - t0))
PY
) || bench_die "programming through the API failed: $api_s"
rss1=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
say "   agent with $N services / $((N * 5)) backends: RSS $((rss1 / 1024)) MiB (at start: $((rss0 / 1024)) MiB); $N PUT /v1/service took ${api_s} s"
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
AGENT_PID=""
