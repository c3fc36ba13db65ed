#!/usr/bin/env bash
# tests/integration/lb_k8s_scale.sh - Services from Kubernetes in bulk
# (issue 23, as root): N Services and N EndpointSlices (3 endpoints each;
# default N 2,000) bulk-loaded into the fake kube-apiserver, an agent with
# the k8s and lb modules in a netns of its own. Promises: every Service is
# programmed with its slice's endpoints as backends; each object's text is
# parsed once (k8s-parsed = 2N: not again when the informer's cache is
# listed at the sync, nor for its queued event), each frontend upserted
# once (fibril_lb_operations_total{upsert,ok} = N); what lb keeps of the
# objects is compact (k8s-bytes under 400 bytes per Service with its slice);
# a restart re-syncs to the same service IDs, again parsing each object once.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
. "$top_srcdir/tests/lib/node.sh"

node_require "network namespaces, BPF" lb k8s
k8s_require
N=${LB_SCALE_SERVICES:-2000}
node_netns_up flsc
node_modules lb k8s

python3 "$top_srcdir/tests/k8s/control.py" gen --pods 0 --nodes 1 --namespaces 10 --services "$N" \
	--endpointslices "$N" >"$WORK/objects.json" || { fail "the objects are generated"; finish; }
export K8S_NETNS=$NODE
k8s_start --service-cidr 10.96.0.0/12 --load "$WORK/objects.json" ||
	{ fail "the fake apiserver starts"; finish; }
AGENT_ARGS=(--set lb.socket-lb=false --set "k8s.kubeconfig=$K8S_KUBECONFIG"
	--set k8s.node-name=node-0 --set k8s.sync-timeout=120s)
start_agent_netns "$NODE" "$mods" "${AGENT_ARGS[@]}" || { fail "the agent starts"; finish; }

field() { api http://x/v1/service | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
n_services() { api http://x/v1/service | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["services"]))'; }
is_n() { [ "$(n_services 2>/dev/null)" = "$N" ] && [ "$(field k8s-synced 2>/dev/null)" = True ]; }
upserts_ok() {
	api http://x/metrics | awk '/^fibril_lb_operations_total\{/ && /op="upsert"/ && /result="ok"/ {print $2}'
}
# every Service's backends are its slice's endpoints (by the generated objects)
backends_right() {
	api http://x/v1/service >"$WORK/services.json"
	python3 - "$WORK/objects.json" "$WORK/services.json" <<'PY'
import json, sys
objs = json.load(open(sys.argv[1]))
objs = objs.get("items", objs) if isinstance(objs, dict) else objs
want = {}
for o in objs:
    if o.get("kind") == "EndpointSlice":
        key = o["metadata"]["namespace"] + "/" + o["metadata"]["labels"]["kubernetes.io/service-name"]
        want[key] = sorted("%s:%d" % (a, o["ports"][0]["port"]) for e in o["endpoints"] for a in e["addresses"])
bad = 0
svcs = json.load(open(sys.argv[2]))["services"]
for s in svcs:
    got = sorted(b["address"] for b in s["backends"])
    if got != want.get(s["name"].split(":")[0]):
        bad += 1
        if bad <= 3:
            print("service %s: backends %s, want %s" % (s["name"], got, want.get(s["name"])))
print("%d services, %d wrong" % (len(svcs), bad))
sys.exit(1 if bad or len(svcs) != len(want) else 0)
PY
}
ids() { api http://x/v1/service | python3 -c '
import json, sys
print(" ".join(sorted("%s=%d" % (s["frontend"], s["id"]) for s in json.load(sys.stdin)["services"])))'; }

check "all $N Services programmed after the first sync" wait_alive "$AGENT_PID" 120 is_n
check "every Service's backends are its EndpointSlice's endpoints" backends_right
check "each object's text parsed once (k8s-parsed $((2 * N)))" output_is "$((2 * N))" field k8s-parsed
check "each frontend upserted once ($N upserts)" output_is "$N" upserts_ok
bytes=$(field k8s-bytes)
echo "k8s-bytes $bytes for $N Services + $N EndpointSlices ($((bytes / N)) bytes each)"
check "what lb keeps is compact (< 400 bytes per Service with its slice)" test "$((bytes / N))" -lt 400
ids >"$WORK/ids.before"

# ---- a restart: the same IDs, each object parsed once again --------------------------------------
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
start_agent_netns "$NODE" "$mods" "${AGENT_ARGS[@]}" || { fail "the agent restarts"; finish; }
check "after a restart, all $N Services synced again" wait_alive "$AGENT_PID" 120 is_n
ids >"$WORK/ids.after"
check "after a restart, the same service IDs" cmp -s "$WORK/ids.before" "$WORK/ids.after"
check "after a restart, each object's text parsed once" output_is "$((2 * N))" field k8s-parsed
finish
