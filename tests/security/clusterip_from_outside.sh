#!/usr/bin/env bash
# tests/security/clusterip_from_outside.sh - the attack: a client on the
# underlay routes the service CIDR (and any other address) to a node and
# talks to a ClusterIP, or to a NodePort frontend on an address that is not
# the node's, expecting the node's tc program (fibril_lb_from_netdev on
# [lb] nodeport-devices) to translate it to a backend pod. The promise: at
# tc only NodePort, ExternalIP and LoadBalancer frontends are translated
# (a ClusterIP only with [lb] external-clusterip, Cilium's
# bpf-lb-external-clusterip, default off), and a NodePort only on one of
# the node's own addresses; what is refused is not translated (the node's
# stack has no route for it). The same services stay served from a pod
# (socket hooks) and the NodePort on the node's address from outside.
# Topology: tests/lib/lbtopo.sh (a node netns, backend pods on a bridge, an
# "outside" netns on ext0 standing for the underlay).
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
LB_BACKENDS=2
. "$top_srcdir/tests/lib/lbtopo.sh"

node_agent() {
	start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 "$@"
}
node_agent || { fail "the agent starts"; finish; }
# the attacker on the underlay routes the service CIDR and another range to the node
ip -n "$OUTSIDE" route add 10.96.0.0/16 via 192.168.212.1
ip -n "$OUTSIDE" route add 10.97.0.0/16 via 192.168.212.1
ip -n "$OUTSIDE" -6 route add fd00:96::/64 via fd00:213::1

upsert '{"frontend":"10.96.30.1:80","name":"default/internal","backends":'"$(be_json active 0 1)"'}'
upsert '{"frontend":"[fd00:96::30]:80","name":"default/internal6","backends":[{"address":"[fd00:212::10]:8080"}]}'
upsert '{"frontend":"10.96.30.2:53","protocol":"UDP","backends":'"$(be_json active 0)"'}'
upsert '{"frontend":"192.168.212.1:30080","type":"NodePort","backends":'"$(be_json active 0 1)"'}'
upsert '{"frontend":"10.97.0.5:30080","type":"NodePort","backends":'"$(be_json active 0 1)"'}'
upsert '{"frontend":"10.97.0.9:80","type":"ExternalIP","backends":'"$(be_json active 1)"'}'

# served JSON / not_served JSON: lbnet.py's report says so (else it is shown)
served() { test "$(jq_ "$1" 'sum(j["backends"].values())')" -gt 0 || { echo "  $1"; return 1; }; }
not_served() { test "$(jq_ "$1" 'sum(j["backends"].values())')" = 0 || { echo "  $1"; return 1; }; }

out=$(client tcp 10.96.30.1 80 4)
check "a pod reaches the ClusterIP (socket hooks)" served "$out"
out=$(outside tcp 10.96.30.1 80 2)
check "a ClusterIP is not served to a client on the underlay (TCP)" not_served "$out"
out=$(outside tcp fd00:96::30 80 2)
check "a ClusterIP is not served to a client on the underlay (IPv6)" not_served "$out"
out=$(outside udp 10.96.30.2 53 2)
check "a ClusterIP is not served to a client on the underlay (UDP)" not_served "$out"
out=$(outside tcp 192.168.212.1 30080 6)
check "a NodePort on the node's address is served from the underlay" served "$out"
out=$(outside tcp 10.97.0.5 30080 2)
check "a NodePort on an address that is not the node's is not served" not_served "$out"
out=$(outside tcp 10.97.0.9 80 4)
check "an ExternalIP is served from the underlay" served "$out"
check "lb_ct holds no flow to the refused frontends" \
	bash -c '! "$0" --socket "$1" map dump lb_ct | grep -Eq "10\.96\.30\.|fd00:96::30|10\.97\.0\.5"' "$CLI" "$SOCK"

# [lb] external-clusterip (Cilium's bpf-lb-external-clusterip) opts in
stop_agent || true
node_agent --set lb.external-clusterip=true || { fail "the agent starts with external-clusterip"; finish; }
out=$(outside tcp 10.96.30.1 80 4)
check "with [lb] external-clusterip = true the ClusterIP is served from outside" served "$out"
out=$(outside tcp 10.97.0.5 30080 2)
check "... a NodePort on a foreign address still is not" not_served "$out"
finish
