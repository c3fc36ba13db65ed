#!/usr/bin/env bash
# tests/integration/ct_gc.sh - the datapath's conntrack GC walks the map in
# batches (bpf_map_lookup_batch / delete_batch on the worker pool), not
# with get_next_key + lookup per entry on the loop: the agent (datapath,
# GC every 300 ms) in a network namespace of its own, dp_conntrack filled
# with 100,000 flows of which 10% are idle past their timeout (by the
# filler of tests/bench/bench_ct_gc.c, built here), then:
#   - a pass removes exactly the expired flows and keeps the others;
#   - it took far fewer bpf() calls than entries (batches of thousands:
#     about 50 for 100k; the per-entry walk made about 200,000);
#   - GET /v1/healthz kept answering while the passes ran.
# The pass's cost at 100k and 1M flows beside the per-entry walk is in
# make bench (tests/bench/bench_ct_gc.sh).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/node.sh"

FLOWS=100000
[ "$(id -u)" = 0 ] || skip_or_fail "needs root (BPF maps, a network namespace)"
[ -d /sys/fs/bpf ] || skip_or_fail "no /sys/fs/bpf"
for so in datapath ipam-cluster-pool; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so is not built"
done
for tool in ip nsenter python3 pkg-config; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done

# the filler (bench_ct_gc fill PIN N PERCENT), built against the module's
# own conntrack layout
# shellcheck disable=SC2046,SC2086
$CC -std=gnu11 -O2 -D_GNU_SOURCE ${SAN_CFLAGS:-} -I"$top_srcdir/bpf" -I"$top_srcdir/modules/datapath" \
	-I"$top_srcdir/modules/common" -o "$WORK/fill" "$top_srcdir/tests/bench/bench_ct_gc.c" \
	"$top_srcdir/modules/datapath/dp_ctgc.c" "$top_srcdir/modules/common/bpf_gc.c" \
	$(pkg-config --cflags --libs libbpf) || skip_or_fail "cannot build the conntrack filler (libbpf-dev?)"

node_modules datapath ipam-cluster-pool
node_netns_up fctgc-
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$top_builddir/.libs/fibril-agent
[ -x "$bin" ] && ! grep -q libtool "$bin" 2>/dev/null || bin=$AGENT
mapfile -t args < <(agent_args "$mods")
nsenter --net="/run/netns/$NODE" "$bin" "${args[@]}" \
	--set ipam-cluster-pool.node-cidr=10.204.0.0/24 \
	--set datapath.conntrack-max-tcp=262144 --set datapath.conntrack-gc-interval=300ms \
	--set datapath.conntrack-timeout-other=10m >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
datapath_answers() { [ -S "$WORK/fibril.sock" ] && api http://x/v1/datapath >/dev/null 2>&1; }
rc=0
wait_alive "$AGENT_PID" 20 datapath_answers || rc=$?
[ "$rc" != 2 ] || { cat "$WORK/agent.log"; fail "the agent started"; finish; }

gc_state() { api http://x/v1/datapath | python3 -c 'import json,sys; c=json.load(sys.stdin)["conntrack"]
print(c["gc-runs"], c["last-gc-bpf-calls"], c["entries-after-last-gc"], c["gc-removed"])'; }
read -r runs0 _ _ removed0 <<<"$(gc_state)"
check "the filler wrote $FLOWS flows into the agent's dp_conntrack" \
	"$WORK/fill" fill "$BPFFS_DIR/dp_conntrack" "$FLOWS" 10
expired=$((FLOWS / 10))

# healthz on one keep-alive connection every 10 ms for 3 s, while passes run
python3 - "$WORK/fibril.sock" >"$WORK/health" <<'PY' &
import http.client, socket, sys, time
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(sys.argv[1])
c, ok, bad, end = C("x"), 0, 0, time.time() + 3
while time.time() < end:
    try:
        c.request("GET", "/v1/healthz")
        r = c.getresponse()
        r.read()
        ok += r.status == 200
        bad += r.status != 200
    except OSError:
        bad += 1
    time.sleep(0.01)  # sleep: paces the healthz requests (every 10 ms)
print(ok, bad)
PY
hpid=$!

# a pass that started after the fill: the runs counter moves twice
gc_done() {
	read -r runs calls left removed <<<"$(gc_state)"
	[ "$runs" -ge $((runs0 + 2)) ] && [ "$((removed - removed0))" -ge "$expired" ]
}
done_ok=0
wait_for 30 gc_done && done_ok=1
check "GC passes ran after the fill ($((runs - runs0)) passes)" test "$done_ok" = 1
check "they removed the $expired expired flows (removed $((removed - removed0)))" \
	test "$((removed - removed0))" = "$expired"
check "... and kept the $((FLOWS - expired)) others (left $left)" test "$left" = "$((FLOWS - expired))"
check "a pass over $FLOWS flows made $calls bpf() calls: batches, not one per entry" \
	test "$calls" -gt 0 -a "$calls" -lt 1000
wait "$hpid" || true
read -r hok hbad <"$WORK/health" || true
check "healthz answered throughout the passes ($hok answered, ${hbad:-?} failed)" \
	test "${hok:-0}" -gt 10 -a "${hbad:-1}" = 0
finish
