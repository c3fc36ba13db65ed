#!/usr/bin/env bash
# tests/security/endpointslice_backends.sh - the attack: whoever may write
# EndpointSlices (or call PUT /v1/service) names as a service's backend an
# address that is not a pod: loopback (the node's own 127.0.0.1 services),
# link-local (169.254.169.254, the cloud metadata service) or the node's
# own address (its kubelet, its agent), so that every client of the service
# is sent there with the node's privileges. The promise, as kube-proxy's:
# such backends are refused - from the k8s informers the endpoint is left
# out (the others are kept), logged once per slice with its name and
# counted (fibril_lb_backends_refused_total{reason}); through the API the
# upsert is a one-line 400 naming the backend and the reason, and changes
# nothing. The node: a network namespace of the test's with a device
# (10.55.0.1, fd00:55::1) and [lb] node-addresses 192.0.2.10; the fake
# kube-apiserver (tests/k8s) runs inside it.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
. "$top_srcdir/tests/lib/node.sh"

node_require "network namespaces, BPF" lb k8s
k8s_require
node_netns_up fesn
ip -n "$NODE" link add dummy0 type veth peer name dummy1
ip -n "$NODE" addr add 10.55.0.1/24 dev dummy0
ip -n "$NODE" addr add fd00:55::1/64 dev dummy0 nodad
ip -n "$NODE" link set dummy0 up
node_modules lb k8s

export K8S_NETNS=$NODE
k8s_start --service-cidr 10.96.0.0/16 || { fail "the fake apiserver starts"; finish; }
start_agent_netns "$NODE" "$mods" --set lb.socket-lb=false --set "k8s.kubeconfig=$K8S_KUBECONFIG" \
	--set k8s.node-name=n1 --set k8s.sync-timeout=20s --set lb.node-addresses=192.0.2.10 ||
	{ fail "the agent starts"; finish; }
fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
test_gt() { [ "$("$1")" -gt "$2" ]; }
jq_() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }

cat >"$WORK/svc.json" <<'EOF2'
{"apiVersion":"v1","kind":"Service","metadata":{"name":"evil","namespace":"default"},
 "spec":{"type":"ClusterIP","ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}]}}
EOF2
slice() { # slice NAME ADDRESS_TYPE ADDRESSES...
	local name=$1 type=$2 eps="" a
	shift 2
	for a in "$@"; do
		eps="$eps${eps:+,}{\"addresses\":[\"$a\"],\"conditions\":{\"ready\":true}}"
	done
	cat <<EOF2
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
 "metadata":{"name":"$name","namespace":"default","labels":{"kubernetes.io/service-name":"evil"}},
 "addressType":"$type","ports":[{"name":"http","port":8080,"protocol":"TCP"}],
 "endpoints":[$eps]}
EOF2
}
kc apply -f "$WORK/svc.json" >/dev/null || fail "kubectl apply the Service"
CIP=$(kc get svc evil -o jsonpath='{.spec.clusterIP}')
slice evil-4 IPv4 10.212.0.10 127.0.0.1 169.254.169.254 10.55.0.1 192.0.2.10 >"$WORK/s4.json"
slice evil-6 IPv6 fd00:212::10 ::1 fe80::1 fd00:55::1 >"$WORK/s6.json"
kc apply -f "$WORK/s4.json" >/dev/null || fail "kubectl apply the IPv4 EndpointSlice"
kc apply -f "$WORK/s6.json" >/dev/null || fail "kubectl apply the IPv6 EndpointSlice"
backends() { # the backends of the frontend $1
	api http://x/v1/service | python3 -c '
import json, sys
print(sorted(b["address"] for s in json.load(sys.stdin)["services"] if s["frontend"] == sys.argv[1] for b in s["backends"]))' "$1"
}
check "the Service is programmed" wait_for 10 output_isnt "[]" backends "$CIP:80"
check "only the pod backend is kept: loopback, link-local and the node's addresses are refused" \
	test "$(backends "$CIP:80")" = "['10.212.0.10:8080']" || backends "$CIP:80"
check "the refusal is logged naming the slice (IPv4)" \
	grep -q "endpointslice default/evil-4: .*refused.*169.254.169.254" "$WORK/agent.log" || grep "lb:" "$WORK/agent.log" | tail -5
check "the refusal is logged naming the slice (IPv6: ::1, fe80::1, fd00:55::1)" \
	grep -Eq "endpointslice default/evil-6: 3 .*refused.*fe80::1" "$WORK/agent.log" || grep "lb:" "$WORK/agent.log" | tail -5
# the same slice again (a resync): counted again, logged once
refused() { api http://x/metrics | awk '/^fibril_lb_backends_refused_total/ { n += $2 } END { print n + 0 }'; }
n0=$(refused)
kc label endpointslice evil-4 touched=yes >/dev/null
check "the slice's update is counted again" wait_for 10 test_gt refused "$n0"
check "... logged once per slice" test "$(grep -c "endpointslice default/evil-4: .*refused" "$WORK/agent.log")" = 1
metrics=$(api http://x/metrics)
for r in loopback link-local node-address; do
	check "refusals counted: $r" grep -Eq "^fibril_lb_backends_refused_total\{reason=\"$r\"\} [1-9]" <<<"$metrics" ||
		grep refused <<<"$metrics"
done

# ---- the API: a one-line 400, nothing changes ------------------------------------------------
before=$(api http://x/v1/service)
for bad in 127.0.0.1:80 127.1.2.3:80 169.254.169.254:80 '[::1]:80' '[fe80::1]:80' 10.55.0.1:80 '[fd00:55::1]:80' \
	192.0.2.10:80 0.0.0.0:80 '[::ffff:127.0.0.1]:80'; do
	code=$(api -o "$WORK/reply" -w '%{http_code}' -X PUT --data \
		'{"frontend":"10.96.99.1:80","backends":[{"address":"10.212.0.11:8080"},{"address":"'"$bad"'"}]}' http://x/v1/service)
	check "the API refuses backend $bad: 400, one line naming it" \
		test "$code" = 400 -a "$(wc -l <"$WORK/reply")" -le 1 && grep -qF "${bad%:80}" "$WORK/reply" ||
		{ echo "  $code $(cat "$WORK/reply")"; }
done
check "the refusals changed nothing" test "$(api http://x/v1/service)" = "$before"
code=$(api -o "$WORK/reply" -w '%{http_code}' -X PUT --data '{"frontend":"10.96.99.1:80","backends":[{"address":"10.212.0.11:8080"}]}' http://x/v1/service)
check "a pod backend is accepted" test "$code" = 200 || cat "$WORK/reply"
finish
