#!/usr/bin/env bash
# tests/integration/lb_k8s.sh - the lb module's services from Kubernetes (as
# root): the fake kube-apiserver (tests/k8s), an agent with the k8s and lb
# modules, three backend pods and a client pod (tests/lib/lbtopo.sh; the
# client runs in the test's own cgroup). A Service whose targetPort is a
# name, with an EndpointSlice (b0 ready on this node, b1 ready on another
# node, b2 serving and terminating): connections to its clusterIP reach b0
# and b1 only; all ready ones gone -> b2 (terminating) serves; kubectl
# patch internalTrafficPolicy=Local -> only this node's b0; kubectl patch
# of the port -> the frontend moves (new port served, old one gone, same
# service ID kept for the frontend that stays); a NodePort Service with
# externalTrafficPolicy Local reached on the node address gets only this
# node's endpoint while its clusterIP gets all; a restart with the objects
# in place keeps the IDs and goes on following them; a Service deleted and
# one changed while the agent is down are removed / reprogrammed once the
# restarted agent's informers have listed, while an unchanged Service and
# an API service (with its name) keep their IDs and serve throughout; an
# EndpointSlice of a Service not known yet is held (logged), used once the Service arrives; a
# Service with an invalid externalIP is a logged skip that leaves the other
# services alone; an API upsert or delete of a Kubernetes frontend is a 409
# that changes nothing; a restart while the EndpointSlices list is slow
# refuses nothing and keeps every service and backend ID; deleting the Service removes its frontends.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
k8s_require
[ -f "$top_builddir/.libs/k8s.so" ] || { echo "FAIL: k8s.so is not built"; exit 1; }
LB_BACKENDS=3
. "$top_srcdir/tests/lib/lbtopo.sh"
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/"

k8s_start --service-cidr 10.96.0.0/16 || { fail "the fake apiserver starts"; finish; }
NODE_NAME=lbnode$$
# the agent in the root netns (it reaches the apiserver on 127.0.0.1); the
# socket hooks act on the client pod's sockets through the cgroup wherever
# the agent runs
# 192.0.2.10 (TEST-NET-1) is "the node's address" for NodePorts: the socket
# hooks translate it before anything is routed
start_agent "$mods" --set "lb.cgroup=$CG" --set "k8s.kubeconfig=$K8S_KUBECONFIG" \
	--set "k8s.node-name=$NODE_NAME" --set k8s.sync-timeout=20s --set lb.node-addresses=192.0.2.10 ||
	{ fail "the agent starts"; finish; }

slice() { # slice NAME SERVICE ENDPOINTS_JSON
	cat <<EOF2
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
 "metadata":{"name":"$1","namespace":"default","labels":{"kubernetes.io/service-name":"$2"}},
 "addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],
 "endpoints":$3}
EOF2
}
ep() { # ep INDEX NODE ready serving terminating
	printf '{"addresses":["10.212.0.%d"],"nodeName":"%s","conditions":{"ready":%s,"serving":%s,"terminating":%s}}' \
		$((10 + $1)) "$2" "$3" "$4" "$5"
}
svc_id() { # svc_id FRONTEND -> the service ID, or ""
	api http://x/v1/service | python3 -c '
import json, sys
print("".join(str(s["id"]) for s in json.load(sys.stdin)["services"] if s["frontend"] == sys.argv[1]))' "$1"
}
wait_for() { wait_quiet "$@"; } # SECONDS CMD... : here with CMD's output discarded
k8s_synced() { jq_ "$(api http://x/v1/service)" 'j["k8s-synced"]'; }
backends_seen() { jq_ "$(client tcp "$1" "$2" "${3:-60}")" 'sorted(j["backends"]) if not j["errors"] else j'; }

# ---- an EndpointSlice before its Service: held, logged -------------------------------------
slice web-1 web "[$(ep 0 "$NODE_NAME" true true false),$(ep 1 other-node true true false),$(ep 2 "$NODE_NAME" false true true)]" >"$WORK/slice.json"
kc apply -f "$WORK/slice.json" >/dev/null || fail "kubectl apply the EndpointSlice"
check "an EndpointSlice of a Service not known yet is held (logged)" \
	wait_for 10 grep -q "endpointslice default/web-1 held: service default/web is not known yet" "$WORK/agent.log"

# ---- the Service (targetPort by name) -----------------------------------------------------------
cat >"$WORK/svc.json" <<'EOF2'
{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},
 "spec":{"type":"ClusterIP","selector":{"app":"web"},
         "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"web-port"}]}}
EOF2
kc apply -f "$WORK/svc.json" >/dev/null || fail "kubectl apply the Service"
CIP=$(kc get svc web -o jsonpath='{.spec.clusterIP}')
check "the Service got a clusterIP" test -n "$CIP"
check "its frontend is programmed" wait_for 10 output_isnt "" svc_id "$CIP:80"
ID=$(svc_id "$CIP:80")
check "the ready backends (b0 on this node, b1 elsewhere) serve; terminating b2 does not" \
	test "$(backends_seen "$CIP" 80)" = "['b0', 'b1']"
list=$(fib service list)
check "service list names it default/web:http, source k8s" grep -q "default/web:http" <<<"$list" || echo "$list"
check "... with b2 terminating" grep -q "10.212.0.12:8080 (terminating)" <<<"$list"

# ---- the API cannot take a Kubernetes Service over (issue 23): 409, nothing changes -------------
code=$(api -o "$WORK/put.out" -w '%{http_code}' -X PUT -d '{"frontend":"'"$CIP"':80","backends":[{"address":"10.212.0.12:8080"}]}' http://x/v1/service)
check "an API upsert of a Kubernetes Service's frontend: 409 naming it" \
	test "$code:$(grep -c "comes from Kubernetes" "$WORK/put.out")" = 409:1
code=$(api -o "$WORK/del.out" -w '%{http_code}' -X DELETE "http://x/v1/service/$ID")
check "an API delete of it: 409" test "$code" = 409
check "... and it is as Kubernetes says: same ID, b0 and b1 serve" \
	test "$(svc_id "$CIP:80") $(backends_seen "$CIP" 80)" = "$ID ['b0', 'b1']"

# ---- no ready endpoint left: the terminating one serves ------------------------------------------
slice web-1 web "[$(ep 0 "$NODE_NAME" false false true),$(ep 2 "$NODE_NAME" false true true)]" >"$WORK/slice.json"
kc apply -f "$WORK/slice.json" >/dev/null
check "only terminating endpoints: b2 serves" wait_for 10 output_is "['b2']" backends_seen "$CIP" 80 10

# ---- internalTrafficPolicy Local: only this node's endpoints ----------------------------------------
slice web-1 web "[$(ep 0 "$NODE_NAME" true true false),$(ep 1 other-node true true false)]" >"$WORK/slice.json"
kc apply -f "$WORK/slice.json" >/dev/null
wait_for 10 output_is "['b0', 'b1']" backends_seen "$CIP" 80 20 || fail "b0 and b1 ready again"
kc patch svc web --type merge -p '{"spec":{"internalTrafficPolicy":"Local"}}' >/dev/null
check "internalTrafficPolicy Local: only b0 (this node)" wait_for 10 output_is "['b0']" backends_seen "$CIP" 80 20  || { backends_seen "$CIP" 80 20; fib service list; grep lb: "$WORK/agent.log" | tail -5; }
check "the frontend kept its ID" test "$(svc_id "$CIP:80")" = "$ID" || { echo "  $ID -> $(svc_id "$CIP:80")"; grep "lb:" "$WORK/agent.log"; }

# ---- kubectl changes the port: reprogrammed ----------------------------------------------------------
kc patch svc web --type json -p '[{"op":"replace","path":"/spec/ports/0/port","value":81}]' >/dev/null
check "the port change is reprogrammed: :81 served" wait_for 10 output_is "['b0']" backends_seen "$CIP" 81 10
check "... and :80 is gone" test -z "$(svc_id "$CIP:80")"
ID81=$(svc_id "$CIP:81")

# ---- a bad Service is a logged skip; the others stay -------------------------------------------------
cat >"$WORK/bad.json" <<'EOF2'
{"apiVersion":"v1","kind":"Service","metadata":{"name":"bad","namespace":"default"},
 "spec":{"ports":[{"name":"http","port":80}],"externalIPs":["300.1.2.3"]}}
EOF2
kc apply -f "$WORK/bad.json" >/dev/null
check "an invalid externalIP is a logged skip naming it" \
	wait_for 10 grep -q "service default/bad skipped: spec.externalIPs\[0\] '300.1.2.3' is not an IP address" "$WORK/agent.log"
check "the other Service still serves" test "$(backends_seen "$CIP" 81 10)" = "['b0']"

# ---- NodePort with externalTrafficPolicy Local ---------------------------------------------------
cat >"$WORK/np.json" <<'EOF2'
{"apiVersion":"v1","kind":"Service","metadata":{"name":"np","namespace":"default"},
 "spec":{"type":"NodePort","externalTrafficPolicy":"Local",
         "ports":[{"name":"http","port":8000,"protocol":"TCP","targetPort":8080}]}}
EOF2
kc apply -f "$WORK/np.json" >/dev/null
slice np-1 np "[$(ep 0 "$NODE_NAME" true true false),$(ep 1 other-node true true false)]" >"$WORK/np-slice.json"
kc apply -f "$WORK/np-slice.json" >/dev/null
NP=$(kc get svc np -o jsonpath='{.spec.ports[0].nodePort}')
NPCIP=$(kc get svc np -o jsonpath='{.spec.clusterIP}')
check "the NodePort Service got a nodePort" test -n "$NP"
check "NodePort on the node address, externalTrafficPolicy Local: only this node's b0" \
	wait_for 10 output_is "['b0']" backends_seen 192.0.2.10 "$NP" 20
check "... while its clusterIP (internalTrafficPolicy Cluster) uses b0 and b1" \
	test "$(backends_seen "$NPCIP" 8000 30)" = "['b0', 'b1']"
check "service list shows the NodePort frontend" grep -q "192.0.2.10:$NP/TCP  *NodePort" <<<"$(fib service list)"

# ---- a restart with the objects in place: same ID, still followed -------------------------------
AGENT_ARGS=(--set "lb.cgroup=$CG" --set "k8s.kubeconfig=$K8S_KUBECONFIG"
	--set "k8s.node-name=$NODE_NAME" --set k8s.sync-timeout=20s --set lb.node-addresses=192.0.2.10)
check "the agent stops" stop_agent
start_agent "$mods" "${AGENT_ARGS[@]}" --set k8s.resources=services,endpointslices ||
	{ fail "the agent restarts"; finish; }
check "after a restart: the frontend keeps its ID" wait_for 10 output_is "$ID81" svc_id "$CIP:81"
check "... and still serves" test "$(backends_seen "$CIP" 81 10)" = "['b0']"
kc patch svc web --type merge -p '{"spec":{"internalTrafficPolicy":"Cluster"}}' >/dev/null
check "... and is still followed (policy back to Cluster: b0 and b1)" \
	wait_for 10 output_is "['b0', 'b1']" backends_seen "$CIP" 81 30

# ---- changes while the agent is down (Cilium's RestoreServices + SyncWithK8sFinished) ------------
# a Service deleted and one changed while the agent is down; an unchanged
# one and one from the API must keep their IDs and serve throughout
cat >"$WORK/keep.json" <<'EOF2'
{"apiVersion":"v1","kind":"Service","metadata":{"name":"keep","namespace":"default"},
 "spec":{"type":"ClusterIP","ports":[{"name":"http","port":90,"protocol":"TCP","targetPort":8080}]}}
EOF2
kc apply -f "$WORK/keep.json" >/dev/null
slice keep-1 keep "[$(ep 1 "$NODE_NAME" true true false)]" >"$WORK/keep-slice.json"
kc apply -f "$WORK/keep-slice.json" >/dev/null
KCIP=$(kc get svc keep -o jsonpath='{.spec.clusterIP}')
check "a third Service (keep) is served" wait_for 10 output_is "['b1']" backends_seen "$KCIP" 90 5
printf '{"frontend":"10.96.200.1:80","name":"ops/manual","backends":[{"address":"10.212.0.12:8080"}]}' |
	fib service upsert - >/dev/null || fail "an API service is upserted"
KID=$(svc_id "$KCIP:90") APIID=$(svc_id 10.96.200.1:80) NPID=$(svc_id "$NPCIP:8000")
check "the agent stops" stop_agent
kc delete svc np >/dev/null
kc patch svc web --type json -p '[{"op":"replace","path":"/spec/ports/0/port","value":82}]' >/dev/null
check "while the agent is down: the deleted Service's frontend still serves (pins)" \
	test "$(backends_seen "$NPCIP" 8000 10)" = "['b0', 'b1']"
check "... and the unchanged one too" test "$(backends_seen "$KCIP" 90 5)" = "['b1']"
# the informers start only when the lb module asks (no k8s.resources): the
# lb module restores from the pins, then waits for their first list
start_agent "$mods" "${AGENT_ARGS[@]}" || { fail "the agent restarts"; finish; }
check "after the restart, the first list applied" \
	wait_for 20 output_is True k8s_synced
svcs=$(api http://x/v1/service)
check "the Service deleted while down: its frontends are gone after the sync" \
	test -z "$(svc_id "$NPCIP:8000")" -a -z "$(svc_id "192.0.2.10:$NP")" || fib service list
check "... the agent says so" grep -q "service $NPID ($NPCIP:8000, default/np:http) removed: Kubernetes no longer has it" "$WORK/agent.log"
check "... 2 stale frontends removed (clusterIP, NodePort) plus web's old port" \
	test "$(jq_ "$svcs" 'j["k8s-stale-removed"]')" = 3 || echo "  $(jq_ "$svcs" 'j["k8s-stale-removed"]')"
check "... and gone from the maps (lb_services, lb_revnat)" \
	test -z "$(fib map dump lb_services | grep -e "$NPCIP:8000/" -e "192.0.2.10:$NP/")$(fib map dump lb_revnat | grep -e "$NPCIP:8000\$")"
check "the Service changed while down is reprogrammed: :82 served" \
	wait_for 10 output_is "['b0', 'b1']" backends_seen "$CIP" 82 30
check "... :81 gone" test -z "$(svc_id "$CIP:81")"
check "the unchanged Service kept its ID and serves" \
	test "$(svc_id "$KCIP:90")" = "$KID" -a "$(backends_seen "$KCIP" 90 5)" = "['b1']"
api_svc=$(fib -o json service get "$APIID")
check "the API service kept its ID, its name and its origin" \
	test "$(jq_ "$api_svc" 'j.get("name"), j["source"]')" = "('ops/manual', 'api')" || echo "  $api_svc"
check "... and serves" test "$(backends_seen 10.96.200.1 80 5)" = "['b2']"
check "the k8s services are named again, source k8s" \
	test "$(jq_ "$(fib -o json service get "$KID")" 'j.get("name"), j["source"]')" = "('default/keep:http', 'k8s')"
check "the stopped agent restored them with their origins" \
	grep -q "restored 5 services (4 from Kubernetes, 0 of unknown origin)" "$WORK/agent.log" ||
	grep "restored" "$WORK/agent.log"

# ---- a restart with a slow EndpointSlice list (issue 23): nothing refused, IDs kept ------------------
# Services are listed at once, EndpointSlices 5 s later: the restored
# backends must serve meanwhile, with the IDs they had
be_ids() {
	api http://x/v1/service | python3 -c 'import json, sys
print(sorted((s["id"], s["frontend"], sorted((b["id"], b["address"]) for b in s.get("backends", [])))
             for s in json.load(sys.stdin)["services"]))'
}
ids_before=$(be_ids)
k8s_ctl "config?list_delay_endpointslices=5" >/dev/null
check "the agent stops" stop_agent
start_agent "$mods" "${AGENT_ARGS[@]}" || { fail "the agent restarts"; finish; }
refused=0 probes=0
while [ "$(k8s_synced)" != True ] && [ "$probes" -lt 40 ]; do
	out=$(client tcp "$KCIP" 90 2)
	probes=$((probes + 1))
	[ "$(jq_ "$out" 'j["backends"] == {"b1": 2}')" = True ] || refused=$((refused + 1))
done
echo "  $probes probes of 2 connections before the sync, $refused with an error"
check "while the EndpointSlices are being listed: every connection served (restored backends)" \
	test "$refused" = 0 -a "$probes" -gt 0
check "the first list applied" wait_for 20 output_is True k8s_synced
same_ids() {
	local now
	now=$(be_ids)
	[ "$now" = "$ids_before" ] && return 0
	echo "  before: $ids_before"
	echo "  after:  $now"
	return 1
}
check "service and backend IDs as before the restart" same_ids
k8s_ctl "config?list_delay_endpointslices=0" >/dev/null

# ---- delete -------------------------------------------------------------------------------------------
kc delete svc web >/dev/null
check "deleting the Service removes its frontends" wait_for 10 output_is "" svc_id "$CIP:82"
check "k8s skips are counted (the invalid Service)" test "$(jq_ "$(api http://x/v1/service)" 'j["k8s-skipped"] >= 1')" = True
check "the agent stops cleanly" stop_agent
finish
