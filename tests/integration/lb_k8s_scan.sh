#!/usr/bin/env bash
# tests/integration/lb_k8s_scan.sh - Services and EndpointSlices read in
# place (issue 23, as root): N generated Services with their slices
# (default 300), plus a pair whose annotations hold escapes (fields lb
# does not read) and a pair whose port name holds a quote (written
# escaped, a field lb reads), bulk-loaded into the fake kube-apiserver; an
# agent with the k8s and lb modules in a netns of its own. Promises: every
# Service is programmed with its slice's endpoints, the odd pair too (its
# named port matched through json-c's path); every object is read in
# place (k8s-scanned) except the odd pair (k8s-parsed - k8s-scanned = 2),
# each text once; and after a restart, where the sync reads the
# informer's cache, the same again.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/wait.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
k8s_require
for so in lb k8s; do
	[ -f "$top_builddir/.libs/$so.so" ] || { echo "FAIL: $so.so is not built"; exit 1; }
done
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

N=${LB_SCAN_SERVICES:-300}
NODE=flsn$$
scan_cleanup() {
	local rc=$? p
	set +e
	if [ -e "/run/netns/$NODE" ]; then
		for p in $(ip netns pids "$NODE" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$NODE"
	fi
	(exit "$rc")
	cleanup
}
trap scan_cleanup EXIT INT TERM

ip netns add "$NODE"
ip -n "$NODE" link set lo up

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/lb.so" "$top_builddir/.libs/k8s.so" "$mods/"

python3 "$top_srcdir/tests/k8s/control.py" gen --pods 0 --nodes 1 --namespaces 5 --services "$N" \
	--endpointslices "$N" >"$WORK/gen.json" || { fail "the objects are generated"; finish; }
# the two pairs: escapes in fields lb skips; an escaped quote in a port name lb reads
python3 - "$WORK/gen.json" >"$WORK/objects.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
items = doc.get("items", doc) if isinstance(doc, dict) else doc
def pair(name, port_name, note, addr):
    meta = {"name": name, "namespace": "ns-0", "annotations": {"note": note}}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
           "spec": {"ports": [{"name": port_name, "port": 80, "protocol": "TCP"}]}}
    sl = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
          "metadata": {"name": name + "-1", "namespace": "ns-0", "annotations": {"note": note},
                       "labels": {"kubernetes.io/service-name": name}},
          "addressType": "IPv4",
          "endpoints": [{"addresses": [addr], "conditions": {"ready": True}, "nodeName": "node-0"}],
          "ports": [{"name": port_name, "port": 8080, "protocol": "TCP"}]}
    return [svc, sl]
items += pair("annotated", "http", "caf\u00e9 \"quoted\"\n", "10.250.0.4")
items += pair("odd", "h\"x", "plain", "10.250.0.5")
json.dump({"items": items} if isinstance(doc, dict) else items, sys.stdout)
PY
export K8S_NETNS=$NODE
k8s_start --service-cidr 10.96.0.0/12 --load "$WORK/objects.json" ||
	{ fail "the fake apiserver starts"; finish; }
AGENT_ARGS=(--set lb.socket-lb=false --set "k8s.kubeconfig=$K8S_KUBECONFIG"
	--set k8s.node-name=node-0 --set k8s.sync-timeout=120s)
start_agent_netns "$NODE" "$mods" "${AGENT_ARGS[@]}" || { fail "the agent starts"; finish; }

ALL=$((N + 2))
field() { api http://x/v1/service | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
n_services() { api http://x/v1/service | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["services"]))'; }
is_all() { [ "$(n_services 2>/dev/null)" = "$ALL" ] && [ "$(field k8s-synced 2>/dev/null)" = True ]; }
# every Service's backends are its slice's endpoints (port by the slice's port)
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
            print("service %s: backends %s, want %s" % (s["name"], got, want.get(s["name"].split(":")[0])))
print("%d services, %d wrong" % (len(svcs), bad))
sys.exit(1 if bad or len(svcs) != len(want) else 0)
PY
}
# parsed - scanned: the texts read through json-c
through_jsonc() { echo $(($(field k8s-parsed) - $(field k8s-scanned))); }

check "all $ALL Services programmed after the first sync" wait_alive "$AGENT_PID" 120 is_all
check "every Service's backends are its slice's endpoints, the odd pair's too" backends_right
check "each object's text parsed once (k8s-parsed $((2 * ALL)))" output_is "$((2 * ALL))" field k8s-parsed
check "all read in place but the pair with an escaped port name (2 through json-c)" output_is 2 through_jsonc

# ---- a restart: the sync reads the informer's cache, in place too ----------------------------
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
start_agent_netns "$NODE" "$mods" "${AGENT_ARGS[@]}" || { fail "the agent restarts"; finish; }
check "after a restart, all $ALL Services synced again" wait_alive "$AGENT_PID" 120 is_all
check "after a restart, the same backends" backends_right
check "after a restart, all read in place but the same 2" output_is 2 through_jsonc
finish
