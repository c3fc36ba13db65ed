#!/usr/bin/env bash
# tests/security/lb_source_ranges.sh - the attack: a client outside a
# LoadBalancer service's loadBalancerSourceRanges talks to its frontend
# from the underlay; the ranges were parsed nowhere and the client was
# served. The promise: a service's source ranges (the Service's
# spec.loadBalancerSourceRanges, the API's "source-ranges") are kept in a
# map the tc program checks; a packet from outside them to the frontend is
# dropped and counted (lb_metrics tc-source-range-drop), one from inside
# them is served; a bad range is a one-line 400 that changes nothing. The
# Kubernetes half runs the fake kube-apiserver (tests/k8s) in the node netns.
# Topology: tests/lib/lbtopo.sh (the outside netns on ext0 is the underlay;
# it routes the load-balancer addresses to the node).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
k8s_require
[ -f "$top_builddir/.libs/k8s.so" ] || { echo "FAIL: k8s.so is not built"; exit 1; }
LB_BACKENDS=2
. "$top_srcdir/tests/lib/lbtopo.sh"
start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 ||
	{ fail "the agent starts"; finish; }
ip -n "$OUTSIDE" route add 10.97.0.0/16 via 192.168.212.1
ip -n "$OUTSIDE" -6 route add fd00:97::/64 via fd00:213::1

# served JSON / not_served JSON: lbnet.py's report says so (else it is shown)
served() { test "$(jq_ "$1" 'sum(j["backends"].values())')" -gt 0 || { echo "  $1"; return 1; }; }
not_served() { test "$(jq_ "$1" 'sum(j["backends"].values())')" = 0 || { echo "  $1"; return 1; }; }
# served_soon ADDR PORT: a connection from outside is answered within 10 s
# (a retry covers the neighbour discovery of a first IPv6 exchange)
served_soon() { wait_for 10 _served_once "$1" "$2" || { outside tcp "$1" "$2" 1; return 1; }; }
_served_once() { served "$(outside tcp "$1" "$2" 1)" >/dev/null; }
drops() { fib map dump lb_metrics | awk '$1 == "tc-source-range-drop" { print $2 }'; }

lbsvc() { # lbsvc FRONTEND RANGES_JSON
	upsert '{"frontend":"'"$1"'","type":"LoadBalancer","source-ranges":'"$2"',"backends":'"$(be_json active 0 1)"'}'
}
lbsvc 10.97.0.20:80 '["192.168.213.0/24","10.1.0.0/16"]'
check "a LoadBalancer service with source ranges" test "$URC" = 0 || echo "  $UOUT"
check "... shown in its JSON" test "$(jq_ "$UOUT" 'j.get("source-ranges")')" = "['192.168.213.0/24', '10.1.0.0/16']"
out=$(outside tcp 10.97.0.20 80 2)
check "a client outside the source ranges is not served" not_served "$out"
check "... its packets are dropped and counted" test "$(drops)" -gt 0 2>/dev/null
lbsvc 10.97.0.20:80 '["192.168.213.0/24","192.168.212.2/32"]'
check "a client inside the ranges (after the update) is served" served_soon 10.97.0.20 80
upsert '{"frontend":"[fd00:97::20]:80","type":"LoadBalancer","source-ranges":["2001:db8::/32"],"backends":[{"address":"[fd00:212::10]:8080"}]}'
out=$(outside tcp fd00:97::20 80 2)
check "IPv6: a client outside the ranges is not served" not_served "$out"
upsert '{"frontend":"[fd00:97::20]:80","type":"LoadBalancer","source-ranges":["fd00:213::/64"],"backends":[{"address":"[fd00:212::10]:8080"}]}'
check "IPv6: a client inside them is served" served_soon fd00:97::20 80
lbsvc 10.97.0.20:80 '[]'
check "no ranges: every client is served" served_soon 10.97.0.20 80

before=$(api http://x/v1/service)
for bad in '["10.0.0.0/33"]' '["10.0.0.1"]' '["x/8"]' '"10.0.0.0/8"' '[1]'; do
	lbsvc 10.97.0.20:80 "$bad"
	check "refused with one line: source-ranges $bad" test "$URC" = 1 -a "$(wc -l <<<"$UOUT")" = 1 || echo "  $UOUT"
done
check "the refusals changed nothing" test "$(api http://x/v1/service)" = "$before"

# ---- from Kubernetes: spec.loadBalancerSourceRanges ---------------------------------------------
export K8S_NETNS=$NODE
k8s_start --service-cidr 10.96.0.0/16 || { fail "the fake apiserver starts"; finish; }
stop_agent || true
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/"
start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 \
	--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=n1 --set k8s.sync-timeout=20s ||
	{ fail "the agent starts with the k8s module"; finish; }
cat >"$WORK/svc.json" <<'EOF2'
{"apiVersion":"v1","kind":"Service","metadata":{"name":"lb","namespace":"default"},
 "spec":{"type":"LoadBalancer","loadBalancerSourceRanges":["192.168.213.0/24"],
         "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}]}}
EOF2
kc apply -f "$WORK/svc.json" >/dev/null || fail "kubectl apply the Service"
kc patch svc lb --subresource=status --type merge \
	-p '{"status":{"loadBalancer":{"ingress":[{"ip":"10.97.0.30"}]}}}' >/dev/null ||
	fail "kubectl patch the Service's status"
cat >"$WORK/slice.json" <<'EOF2'
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
 "metadata":{"name":"lb-1","namespace":"default","labels":{"kubernetes.io/service-name":"lb"}},
 "addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],
 "endpoints":[{"addresses":["10.212.0.10"],"conditions":{"ready":true}}]}
EOF2
kc apply -f "$WORK/slice.json" >/dev/null || fail "kubectl apply the EndpointSlice"
lb_ranges() { jq_ "$(api http://x/v1/service)" '[s.get("source-ranges") for s in j["services"] if s["frontend"] == "10.97.0.30:80"]'; }
check "the load-balancer frontend carries the Service's loadBalancerSourceRanges" \
	wait_for 10 output_is "[['192.168.213.0/24']]" lb_ranges || lb_ranges
out=$(outside tcp 10.97.0.30 80 2)
check "Kubernetes: a client outside loadBalancerSourceRanges is not served" not_served "$out"
kc patch svc lb --type merge -p '{"spec":{"loadBalancerSourceRanges":["192.168.212.0/24"]}}' >/dev/null
check "... the ranges changed in Kubernetes follow" wait_for 10 output_is "[['192.168.212.0/24']]" lb_ranges
check "Kubernetes: a client inside them is served" served_soon 10.97.0.30 80
finish
