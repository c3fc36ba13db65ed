#!/usr/bin/env bash
# tests/security/lb_no_backend_listener.sh - the attack: a client on the
# underlay talks to a Service frontend on the node's address whose Service
# has no backend (all its pods gone, or not ready yet) on a port where a
# process of the node itself listens (an external IP or a NodePort on :22,
# a node-local admin port), hoping that the lb tc program hands the packet
# to the node's stack, where that process answers. The promise (issue 23,
# as Cilium's DROP_NO_SERVICE with service-no-backend-response=reject): a
# new flow to a frontend without a backend is dropped at tc, counted as
# tc-no-backend, and answered with an ICMP / ICMPv6 port unreachable, so
# the client fails at once (ECONNREFUSED) and never reaches the node's
# process; TCP and UDP, IPv4 and IPv6. A frontend with a backend is served
# as before. Topology: tests/lib/lbtopo.sh (a node netns, backend pods on a
# bridge, an "outside" netns on ext0 standing for the underlay).
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
LB_BACKENDS=1
. "$top_srcdir/tests/lib/lbtopo.sh"

start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 ||
	{ fail "the agent starts"; finish; }
wait_alive "$AGENT_PID" 60 agent_healthy || { fail "the agent is healthy"; finish; }

# the node's own process on 30081, TCP and UDP, IPv4 and IPv6: it answers "node"
nsenter --net="/run/netns/$NODE" python3 "$top_srcdir/tests/lib/lbnet.py" serve node 30081 >/dev/null 2>&1 &
BG_PIDS+=($!)
node_listens() { nsenter --net="/run/netns/$NODE" ss -Hltn "sport = :30081" | grep -q .; }
wait_for 10 node_listens || { fail "the node's process listens on 30081"; finish; }

for fe in 192.168.212.1 "[fd00:213::1]"; do
	upsert '{"frontend":"'$fe':30081","type":"NodePort","backends":[]}'
	check "a TCP NodePort $fe:30081 without backends" test "$URC" = 0
	upsert '{"frontend":"'$fe':30081","type":"NodePort","protocol":"UDP","backends":[]}'
	check "a UDP NodePort $fe:30081 without backends" test "$URC" = 0
done
no_backend() { # the tc-no-backend counter
	api http://x/metrics | awk '/^fibril_lb_socket_events_total\{event="tc-no-backend"\}/ {print $2}'
}
# refused JSON : every attempt refused at once, none answered by the node
refused() {
	json_is "$1" "not j['backends'] and sum(j['errors'].values()) == 3 and set(j['errors']) == {'ECONNREFUSED'} and j['max_s'] < 0.5"
}
n0=$(no_backend)
for addr in 192.168.212.1 fd00:213::1; do
	out=$(outside tcp $addr 30081 3)
	check "TCP to $addr:30081 from outside: refused at once, the node's process never answers" refused "$out"
done
# UDP: a connected socket sees the port unreachable as ECONNREFUSED
udp_probe() {
	nsenter --net="/run/netns/$OUTSIDE" python3 -c '
import socket, sys, time
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(2); s.connect((sys.argv[1], 30081))
t = time.monotonic(); s.send(b"q\n")
try: print("answered " + s.recv(100).decode().strip())
except ConnectionRefusedError: print("refused %.2f" % (time.monotonic() - t))
except socket.timeout: print("timeout")' "$1"
}
for addr in 192.168.212.1 fd00:213::1; do
	out=$(udp_probe $addr)
	check "UDP to $addr:30081 from outside: refused at once, not answered by the node" \
		grep -Eq '^refused 0\.[0-4]' <<<"$out"
	echo "  $out"
done
n1=$(no_backend)
check "every attempt counted as tc-no-backend ($n0 -> $n1)" test "$(( ${n1:-0} - ${n0:-0} ))" -ge 8

# a backend again: served by it, not by the node's process
upsert '{"frontend":"192.168.212.1:30081","type":"NodePort","backends":'"$(be_json active 0)"'}'
out=$(outside tcp 192.168.212.1 30081 3)
check "with a backend: served by it" json_is "$out" "j['backends'] == {'b0': 3}"
finish
