#!/usr/bin/env bash
# tests/integration/lb_ct_gc.sh - lb_ct (the tc programs' NodePort NAT
# flows) is garbage-collected: the lb module's agent in a node netns
# (tests/lib/lbtopo.sh, two backends, a client outside the node on ext0)
# with short timeouts (TCP open 8 s, after FIN/RST 5 s, UDP 5 s) and a GC
# every 300 ms. Checked with real traffic:
#   - finished TCP NodePort flows (IPv4 and IPv6) are in lb_ct, then gone
#     once their closing timeout passed; fibril_lb_ct_gc_removed_total
#     counts them;
#   - a UDP flow is gone after the UDP timeout;
#   - a long connection that keeps talking outlives every timeout (its
#     entries are refreshed by either direction) and is never disturbed;
#   - an entry written by an older program (no timestamp) is stamped by the
#     GC and then expires like the others;
#   - the tc programs are attached again when their qdisc is removed.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl bpftool tc; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
LB_BACKENDS=2
. "$top_srcdir/tests/lib/lbtopo.sh"

start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 \
	--set lb.ct-gc-interval=300ms --set lb.ct-timeout-tcp=8s --set lb.ct-timeout-tcp-closing=5s \
	--set lb.ct-timeout-tcp-syn=8s --set lb.ct-timeout-other=5s || { fail "the agent starts"; finish; }

ct() { fib map dump lb_ct 2>&1; }
ct_count() { ct | grep -c "$1" || true; }
removed() { api http://x/metrics | awk '$1 == "fibril_lb_ct_gc_removed_total" {print $2}'; }

upsert '{"frontend":"192.168.212.1:30080","type":"NodePort","backends":'"$(be_json active 0 1)"'}'
check "a NodePort service" test "$URC" = 0 || echo "  $UOUT"
upsert '{"frontend":"[fd00:213::1]:30080","type":"NodePort","backends":[{"address":"[fd00:212::10]:8080"}]}'
check "an IPv6 NodePort service" test "$URC" = 0 || echo "  $UOUT"
upsert '{"frontend":"192.168.212.1:30053","type":"NodePort","protocol":"UDP","backends":'"$(be_json active 1)"'}'
check "a UDP NodePort service" test "$URC" = 0 || echo "  $UOUT"

# a long connection that keeps talking, started first
: >"$WORK/hold"
nsenter --net="/run/netns/$OUTSIDE" python3 "$top_srcdir/tests/lib/lbnet.py" hold 192.168.212.1 30080 "$WORK/hold" &
BG_PIDS+=($!)
wait_for 10 grep -q ok "$WORK/hold" || fail "a long connection through the NodePort"
hold_start=$SECONDS
hold_port=$(ct | awk '/ingress/ && /192.168.212.2:/ {print $2; exit}')

removed0=$(removed)
removed0=${removed0%%.*}
out=$(outside tcp 192.168.212.1 30080 10)
check "10 finished TCP connections over the NodePort" \
	test "$(jq_ "$out" 'sum(j["backends"].values())')" = 10 || echo "  $out"
dump=$(ct)
n=$(grep -c "^TCP 192.168.212.2:.* ingress .* closing" <<<"$dump" || true)
check "lb_ct holds them, marked closing ($n of 10 ingress entries)" test "$n" -ge 10 || echo "$dump" | head -5
out=$(outside tcp fd00:213::1 30080 5)
check "5 over the IPv6 NodePort" test "$(jq_ "$out" 'sum(j["backends"].values())')" = 5 || echo "  $out"
n=$(ct_count "^TCP \[fd00:213::2\]:.* ingress")
check "lb_ct holds the IPv6 flows ($n of 5)" test "$n" -ge 5
out=$(outside udp 192.168.212.1 30053 3)
check "3 UDP requests answered" test "$(jq_ "$out" 'sum(j["backends"].values())')" = 3 || echo "  $out"
check "lb_ct holds the UDP flow" test "$(ct_count "^UDP .* ingress")" -ge 1
gone() { [ "$(ct_count ingress)" -le 1 ]; }
check "the finished TCP flows and the UDP flow are gone after their timeouts" wait_for 15 gone ||
	ct | head
removed1=$(removed)
check "fibril_lb_ct_gc_removed_total counts them (>= 32: $removed0 -> $removed1)" \
	test "$(( ${removed1%%.*} - ${removed0:-0} ))" -ge 32
check "the long connection's entries are still there" test "$(ct | grep -c "$hold_port")" -ge 2
while [ $((SECONDS - hold_start)) -lt 10 ]; do sleep 0.5; done # sleep: the connection must live 10 s, past every timeout
n_ok=$(grep -c ok "$WORK/hold")
check "the long connection kept going past every timeout, never broken ($n_ok answers)" \
	test -z "$(grep error "$WORK/hold")" -a "$n_ok" -gt 40

# an older program's entry (seen = 0): stamped, then removed
key="$(printf '0 %.0s' $(seq 1 10)) 255 255 198 51 100 7 $(printf '0 %.0s' $(seq 1 10)) 255 255 192 168 212 1 0 80 0 81 6 0 0 0"
val="$(printf '0 %.0s' $(seq 1 10)) 255 255 10 212 0 10 31 144 1 0 0 0 0 0"
bpftool map update pinned "$BPFFS_DIR/lb_ct" key $key value $val >/dev/null 2>&1 ||
	fail "an entry without a timestamp written with bpftool"
stamped() { ct | grep -Eq '198\.51\.100\.7:80 .*idle=[0-9]+s'; }
check "the GC stamps it" wait_for 5 stamped
legacy_gone() { ! ct | grep -q 198.51.100.7; }
check "... and removes it after the TCP timeout" wait_for 15 legacy_gone

# someone removes the qdisc (and our filters with it): put back within seconds
ip netns exec "$NODE" tc qdisc del dev ext0 clsact
np_ok() { [ "$(jq_ "$(outside tcp 192.168.212.1 30080 2)" 'sum(j["backends"].values())')" = 2 ]; }
check "the tc programs are put back when their qdisc was removed" wait_for 10 np_ok
finish
