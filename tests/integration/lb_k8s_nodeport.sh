#!/usr/bin/env bash
# tests/integration/lb_k8s_nodeport.sh - NodePorts and EndpointSlices from
# Kubernetes (issue 23, as root): an agent with the k8s and lb modules in a
# node netns of its own (a veth with 198.51.100.7 and 2001:db8:7::7, the
# fake kube-apiserver in the same netns). Promises: with [lb]
# node-addresses unset, a NodePort Service is served on the node's own
# addresses (no loopback, no link-local), and an explicit node-addresses
# still wins (after a restart: only that address, the others removed); an
# IPv4-only Service gets no IPv6 NodePort, an IPv6-only one no IPv4
# NodePort, a dual-stack one both; an EndpointSlice that arrives before its
# Service is held (k8s-held-slices), not counted in k8s-skipped, and its
# endpoints are the Service's backends once the Service arrives.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
. "$top_srcdir/tests/lib/node.sh"

node_require "network namespaces, BPF" lb k8s
k8s_require
node_netns_up flnp
ip -n "$NODE" link add np0 type veth peer name np1
ip -n "$NODE" addr add 198.51.100.7/24 dev np0
ip -n "$NODE" addr add 2001:db8:7::7/64 dev np0 nodad
ip -n "$NODE" link set np0 up
ip -n "$NODE" link set np1 up
node_modules lb k8s

export K8S_NETNS=$NODE
k8s_start --service-cidr 10.96.0.0/16 || { fail "the fake apiserver starts"; finish; }
AGENT_ARGS=(--set lb.socket-lb=false --set "k8s.kubeconfig=$K8S_KUBECONFIG"
	--set k8s.node-name=npnode --set k8s.sync-timeout=20s)
start_agent_netns "$NODE" "$mods" "${AGENT_ARGS[@]}" || { fail "the agent starts"; finish; }

# frontends NAME TYPE -> the sorted frontends of Service default/NAME's TYPE entries
frontends() {
	api http://x/v1/service | python3 -c '
import json, sys
print(" ".join(sorted(s["frontend"] for s in json.load(sys.stdin)["services"]
      if s.get("name", "").startswith("default/" + sys.argv[1] + ":") and s["type"] == sys.argv[2])))' "$1" "$2"
}
field() { api http://x/v1/service | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
# service NAME NODEPORT FAMILIES CLUSTERIPS: a NodePort Service, port "http" 80 -> 8080
service() {
	cat >"$WORK/$1.json" <<EOF
{"apiVersion":"v1","kind":"Service","metadata":{"name":"$1","namespace":"default"},
 "spec":{"type":"NodePort","clusterIP":$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])[0]))' "$4"),
         "clusterIPs":$4,"ipFamilies":$3,
         "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080,"nodePort":$2}]}}
EOF
	kc apply -f "$WORK/$1.json" >/dev/null
}

# ---- an EndpointSlice before its Service: held, not skipped ------------------------------------
cat >"$WORK/slice.json" <<'EOF'
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
 "metadata":{"name":"v4-abc","namespace":"default","labels":{"kubernetes.io/service-name":"v4"}},
 "addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],
 "endpoints":[{"addresses":["10.212.0.10"],"nodeName":"npnode","conditions":{"ready":true}}]}
EOF
kc apply -f "$WORK/slice.json" >/dev/null || fail "kubectl apply the EndpointSlice"
await "an EndpointSlice of a Service not known yet is held (k8s-held-slices 1)" 10 \
	output_is 1 field k8s-held-slices

# ---- NodePorts on the node's own addresses, per IP family ---------------------------------------
service v4 30080 '["IPv4"]' '["10.96.0.50"]' || fail "kubectl apply the IPv4 Service"
service v6 30081 '["IPv6"]' '["fd00:96::51"]' || fail "kubectl apply the IPv6 Service"
service ds 30082 '["IPv4","IPv6"]' '["10.96.0.52","fd00:96::52"]' || fail "kubectl apply the dual-stack Service"
await "node-addresses unset: an IPv4-only Service's NodePort is on the node's IPv4 address only" 10 \
	output_is "198.51.100.7:30080" frontends v4 NodePort
echo "  v4: $(frontends v4 NodePort)"
await "an IPv6-only Service's NodePort is on the node's global IPv6 address only" 10 \
	output_is "[2001:db8:7::7]:30081" frontends v6 NodePort
echo "  v6: $(frontends v6 NodePort)"
await "a dual-stack Service's NodePort is on both" 10 \
	output_is "198.51.100.7:30082 [2001:db8:7::7]:30082" frontends ds NodePort
echo "  ds: $(frontends ds NodePort)"
check "the held EndpointSlice's endpoint is the Service's backend once it arrives" \
	output_is "10.212.0.10:8080" python3 -c '
import json, subprocess, sys
j = json.loads(subprocess.check_output(sys.argv[1:]))
print(" ".join(sorted({b["address"] for s in j["services"] if s.get("name") == "default/v4:http"
      for b in s["backends"]})))' curl -sS --unix-socket "$WORK/fibril.sock" http://x/v1/service
check "no EndpointSlice is held once its Service is there" output_is 0 field k8s-held-slices
check "nothing was skipped (k8s-skipped 0)" output_is 0 field k8s-skipped

# ---- an explicit node-addresses wins -----------------------------------------------------------
stop_agent
start_agent_netns "$NODE" "$mods" "${AGENT_ARGS[@]}" --set lb.node-addresses=203.0.113.9 ||
	{ fail "the agent restarts with node-addresses"; finish; }
await "an explicit node-addresses wins: the dual-stack NodePort is on 203.0.113.9 only" 20 \
	output_is "203.0.113.9:30082" frontends ds NodePort
echo "  ds: $(frontends ds NodePort)"
check "the IPv6-only Service has no NodePort then" output_is "" frontends v6 NodePort
finish
