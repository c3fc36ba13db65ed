#!/usr/bin/env bash
# tests/bench/bench_lb.sh - the lb module's figures beside kube-proxy's
# layouts built here (run by tests/bench/run.sh, or by hand as root with
# top_srcdir/top_builddir set):
#   - tests/bench/bench_lb_ct_gc: the lb_ct GC's batch pass beside a
#     per-entry walk, interleaved rounds;
#   - tests/bench/bench_lb_ct_quota: a new flow's first packet with lb_ct's
#     per-client check beside without it (BPF_PROG_RUN), interleaved rounds;
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
LNS=fblbl$$ CLNS=fblbc$$ BENS=fblbb$$
CG2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
CG=${CG2:+$CG2/fibril-bench-lb-$$}
bench_lb_cleanup() {
	local rc=$? ns p
	set +e
	[ -n "$AGENT_PID" ] && kill -KILL "$AGENT_PID" 2>/dev/null
	for ns in "$NS" "$LNS" "$CLNS" "$BENS"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	if [ -n "$CG" ] && [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		wait_for 5 rmdir "$CG" 2>/dev/null # once the killed processes have left it
	fi
	(exit "$rc")
	cleanup
}
trap bench_lb_cleanup EXIT INT TERM
field() { local name=$1; shift; printf '%s\n' "$*" | tr ' ' '\n' | sed -n "s/^$name=//p" | head -n 1; }

"$top_builddir/tests/bench/bench_lb" "$N" >"$WORK/core.out" || bench_die "bench_lb failed"
"$top_builddir/tests/bench/bench_lb_ct_gc" 100000 5 >"$WORK/ctgc.out" || bench_die "bench_lb_ct_gc failed"
"$top_builddir/tests/bench/bench_lb_ct_quota" 20000 7 >"$WORK/quota.out" || bench_die "bench_lb_ct_quota failed"
"$top_builddir/tests/bench/bench_lb_ct_quota" 20000 7 1 >"$WORK/quota1.out" || bench_die "bench_lb_ct_quota failed"
core=$(cat "$WORK/core.out")
say() { printf '%s\n' "$*"; }
say "11. service load balancing (module lb; tests/bench/bench_lb.sh)"
say "   Maglev table build, 100 backends, M=16381: p50 $(field maglev_build_p50_us "$core") us, p99 $(field maglev_build_p99_us "$core") us (goal < 1000 us p50)"
say "   Maglev 10 -> 9 backends: $(field maglev_moved "$core") of the flows moved (ideal 0.10), $(field maglev_moved_others "$core") of flows on the remaining ones (ideal 0); slots per backend $(field slots_min "$core")-$(field slots_max "$core")"
say "   program $N services x 2 backends from cold (module table + map writes): $(field program_cold_ms "$core") ms (goal < 1000 ms)"
say "   one service update at $(field at "$core"): p50 $(field update_p50_us "$core") us, p99 $(field update_p99_us "$core") us (goal < 1000 us)"
say "   lb_ct GC, 100k NodePort NAT entries (10% expired), batch pass vs a per-entry walk: $(cat "$WORK/ctgc.out")"
say "   lb_ct per-client quota ([lb] ct-source-max), $(cat "$WORK/quota.out")"
say "   ... $(cat "$WORK/quota1.out")"

# ---- the references: kube-proxy's layouts for the same N services ----------------------------
ip netns add "$NS"
# gen_rules N iptables|nft: kube-proxy's layouts for N services x 2
# backends; the last service's backends are the bench's real ones
# (10.213.2.2 and .3:8080), the others' are addresses nothing answers
gen_rules() { # gen_rules N iptables|nft
python3 - "$1" "$2" <<'PY'
import sys
n, kind = int(sys.argv[1]), sys.argv[2]
def be(i, o):
    if i == n - 1:
        return "10.213.2.%d" % (1 + o)
    return "10.%d.%d.%d" % (1 + (i // 65536), (i // 256) % 256, (i % 127) * 2 + o)
def vip(i):
    return "10.96.%d.%d" % (i // 256, i % 256)
if kind == "iptables":
    print("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]")
    for i in range(n):
        print(":KUBE-SVC-%06d - [0:0]\n:KUBE-SEP-%06dA - [0:0]\n:KUBE-SEP-%06dB - [0:0]" % (i, i, i))
    print("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    print("-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
    for i in range(n):
        print("-A KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"ns/svc%d:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-%06d" % (vip(i), i, i))
        print("-A KUBE-SVC-%06d -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-%06dA" % (i, i))
        print("-A KUBE-SVC-%06d -j KUBE-SEP-%06dB" % (i, i))
        for s, o in (("A", 1), ("B", 2)):
            print("-A KUBE-SEP-%06d%s -p tcp -m tcp -j DNAT --to-destination %s:8080" % (i, s, be(i, o)))
    print("COMMIT")
else:
    print("table ip kube-proxy {")
    print("  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }")
    for i in range(n):
        print("  chain svc-%06d { numgen random mod 2 vmap { 0 : goto sep-%06da, 1 : goto sep-%06db }; }" % (i, i, i))
        for s, o in (("a", 1), ("b", 2)):
            print("  chain sep-%06d%s { meta l4proto tcp dnat ip to %s:8080; }" % (i, s, be(i, o)))
    print("  chain services { ip daddr . meta l4proto . th dport vmap @service-ips; }")
    print("  chain prerouting { type nat hook prerouting priority dstnat; jump services; }")
    print("}")
    for i in range(n):
        print("add element ip kube-proxy service-ips { %s . tcp . 80 : goto svc-%06d }" % (vip(i), i))
PY
}
gen_rules "$N" iptables >"$WORK/iptables.rules"
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
	gen_rules "$N" nft >"$WORK/nft.rules"
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

# program_api N K [last-real] : N services with K backends each through
# PUT /v1/service on one keep-alive connection; with last-real the last
# service's backends are the latency test's real ones (10.213.2.2, .3)
program_api() {
	python3 - "$WORK/fibril.sock" "$@" <<'PY'
import http.client, json, socket, sys
class UC(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)
n, k = int(sys.argv[2]), int(sys.argv[3])
last_real = len(sys.argv) > 4
c = UC(sys.argv[1])
for i in range(n):
    if last_real and i == n - 1:
        be = [{"address": "10.213.2.%d:8080" % (2 + b)} for b in range(k)]
    else:
        be = [{"address": "10.%d.%d.%d:8080" % (1 + (i * k + b) // 65536, ((i * k + b) // 256) % 256, (i * k + b) % 256)} for b in range(k)]
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
PY
}

# ---- agent RSS with N services and 5N backends, through the API -------------------------------
mods=$WORK/mods
bench_install_modules "$mods" lb
mkdir -p "$WORK/cg" # not a cgroup: socket-lb off, the maps and the table are what is measured
mapfile -t args < <(agent_args "$mods")
nsenter --net="/run/netns/$NS" "$AGENT_BIN" "${args[@]}" --set lb.socket-lb=false \
	--set lb.service-map-max=131072 --set lb.backend-map-max=65536 >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
wait_alive "$AGENT_PID" 10 test -S "$WORK/fibril.sock" || true
rss0=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
t0=$(date +%s.%N)
program_api "$N" 5 || bench_die "programming through the API failed"
api_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
rss1=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
say "   agent with $N services / $((N * 5)) backends: RSS $((rss1 / 1024)) MiB (at start: $((rss0 / 1024)) MiB); $N PUT /v1/service took ${api_s} s"
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
AGENT_PID=""

# ---- TCP connect latency to the last of N services: fibril, iptables, nftables, direct -----
# A node netns routing between a client netns (10.213.1.2) and a backend
# netns (10.213.2.2 and .3, a server on 8080); the references' rules and the
# agent live in the node netns; fibril's client runs in a cgroup of its own.
ip netns add "$LNS"
ip netns add "$CLNS"
ip netns add "$BENS"
ip netns exec "$LNS" sysctl -qw net.ipv4.ip_forward=1
for pair in "$CLNS:1" "$BENS:2"; do
	ns=${pair%:*} n=${pair#*:}
	ip -n "$LNS" link add "l$n" type veth peer name eth0 netns "$ns"
	ip -n "$LNS" addr add "10.213.$n.1/24" dev "l$n"
	ip -n "$LNS" link set "l$n" up
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "10.213.$n.2/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route add default via "10.213.$n.1"
done
ip -n "$BENS" addr add 10.213.2.3/24 dev eth0
nsenter --net="/run/netns/$BENS" python3 "$top_srcdir/tests/lib/lbnet.py" serve b 8080 >/dev/null 2>&1 &
for _ in $(seq 1 100); do
	nsenter --net="/run/netns/$BENS" ss -Hltn "sport = :8080" | grep -q . && break
	sleep 0.1 # sleep: the poll interval of a wait with a deadline
done
LAT_N=${LB_BENCH_CONNECTS:-400}
# latency ADDR [CGROUP] -> "p50 p99" of connect() in microseconds
latency() {
	local cg=${2:-}
	nsenter --net="/run/netns/$CLNS" sh -c '[ -z "$0" ] || echo $$ >"$0/cgroup.procs"; exec "$@"' "$cg" \
		python3 - "$1" "$LAT_N" <<'PY'
import socket, struct, sys, time
addr, n = sys.argv[1], int(sys.argv[2])
ts = []
for _ in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    t0 = time.perf_counter_ns()
    s.connect((addr, 80 if addr.startswith("10.96.") else 8080))
    ts.append(time.perf_counter_ns() - t0)
    s.close()
ts.sort()
print("%.0f %.0f" % (ts[len(ts) // 2] / 1e3, ts[len(ts) * 99 // 100] / 1e3))
PY
}
vip_of() { echo "10.96.$((($1 - 1) / 256)).$((($1 - 1) % 256))"; }
direct=$(latency 10.213.2.2)
say "   TCP connect latency to the last of N services (p50 / p99 us, $LAT_N connects; direct to the backend: ${direct% *} / ${direct#* }):"
say "   N        fibril        iptables      nftables"
for n in ${LB_BENCH_LATENCY_N:-10 1000 10000}; do
	vip=$(vip_of "$n")
	f="-" i="-" t="-"
	if [ -n "$CG" ] && mkdir -p "$CG"; then
		rm -f "$WORK/fibril.sock"
		mapfile -t args < <(agent_args "$mods")
		nsenter --net="/run/netns/$LNS" "$AGENT_BIN" "${args[@]}" --set "lb.cgroup=$CG" \
			--set lb.service-map-max=131072 >"$WORK/agent-lat.log" 2>&1 &
		AGENT_PID=$!
		wait_alive "$AGENT_PID" 10 test -S "$WORK/fibril.sock" || true
		if program_api "$n" 2 last-real; then f=$(latency "$vip" "$CG" | tr ' ' /); fi
		kill -TERM "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true
		AGENT_PID=""
		rm -rf "$BPFFS_DIR" # unpins the links: the hooks go
	fi
	if command -v iptables-restore >/dev/null; then
		gen_rules "$n" iptables | nsenter --net="/run/netns/$LNS" iptables-restore &&
			i=$(latency "$vip" | tr ' ' /)
		printf '*nat\nCOMMIT\n' | nsenter --net="/run/netns/$LNS" iptables-restore
	fi
	if command -v nft >/dev/null; then
		gen_rules "$n" nft >"$WORK/nft-lat.rules"
		timeout 120 nsenter --net="/run/netns/$LNS" nft -f "$WORK/nft-lat.rules" 2>/dev/null &&
			t=$(latency "$vip" | tr ' ' /)
		nsenter --net="/run/netns/$LNS" nft delete table ip kube-proxy 2>/dev/null || true
	fi
	printf '   %-8s %-13s %-13s %s\n' "$n" "$f" "$i" "$t"
done
