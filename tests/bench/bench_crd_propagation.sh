#!/usr/bin/env bash
# tests/bench/bench_crd_propagation.sh - CRD mode's cluster figures beside
# the kvstore mode's, in one run (tests/bench/run.sh runs it; by hand: as
# root from a build directory with top_srcdir and top_builddir set), on
# nodes of tests/lib/multinode.sh: two nodes A and B with the API test
# server (tests/k8s/apiserver.py) on the underlay and no etcd, then two
# other nodes with one etcd and no API server:
#   1. propagation: a pod's CNI ADD on A until B's pinned dp_ipcache map
#      holds its address (tests/bench/bench_ipcache_watch.c walks the map
#      every 200 us), p50/p99 over PODS pods (default 200) added one at a
#      time, beside the ADD itself, and from the ADD's end (what is left
#      once the ADD returned); goal p99 < 100 ms;
#   2. load per new pod, over the same adds: the agents' requests and
#      bytes (HTTP, both ways) and the watch events each node is sent per
#      pod change, counted by the API server (GET /_control/stats
#      "traffic"); in kvstore mode the agents' requests to etcd (their
#      fibril_kvstore_etcd_requests_total), etcd's gRPC bytes
#      (etcd_network_client_grpc_*_bytes_total: the JSON gateway's calls
#      included) and the watch events it sent
#      (etcd_debugging_mvcc_events_total); in both modes the bytes on the
#      two nodes' underlay links (TCP/TLS included), and the idle
#      background over IDLE seconds (default 5) before the adds.
# In CRD mode the Pod objects are created before the adds (as a scheduler
# would) and the agent on A has seen them when the adds start: their cost
# is Kubernetes', not the ipcache's, and is not counted. The server sends
# a BOOKMARK on a quiet watch every 60 s, as a real one's watch cache does.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

PODS=${PODS:-200}
IDLE=${IDLE:-5}
k8s_require
MODS_CRD="k8s ipam-cluster-pool ipam-api endpoint datapath nodes"
MODS_KV="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes"
# shellcheck disable=SC2086
mn_require $MODS_CRD kvstore-etcd
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
	[ -x "$f" ] && { AGENT=$f; break; }
done
# shellcheck disable=SC2046
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -o "$WORK/watch" "$top_srcdir/tests/bench/bench_ipcache_watch.c" \
	$(pkg-config --cflags --libs libbpf) || { echo "bench_crd_propagation: cannot build the map watcher" >&2; exit 1; }
# shellcheck disable=SC2086
mn_modules "$WORK/mods-crd" $MODS_CRD
# shellcheck disable=SC2086
mn_modules "$WORK/mods-kv" $MODS_KV
mn_underlay_up
for i in $(seq 1 "$PODS"); do MN_NETNS_LIST+=("$(mn_pod_ns "c$i")" "$(mn_pod_ns "k$i")"); done
die() { echo "bench_crd_propagation: $*" >&2; exit 1; }
# routes A B : A knows and routes B (mn_routes_all would ask for every node of the run)
routes() { [ "$(mn_json "$1" /v1/nodes "any(x['name'] == '$2' and x['routed'] for x in j['nodes'])")" = True ]; }

# pods.py NODE-NS SOCK PREFIX COUNT : CNI ADDs, one at a time, of pods
# PREFIX1..PREFIXCOUNT (namespace "default"); prints "ADDRESS T0 T1"
# (CLOCK_REALTIME ns before and after each ADD)
cat >"$WORK/pods.py" <<'PY'
import json, os, subprocess, sys, time
tag, node_ns, sock, builddir, prefix, count = sys.argv[1:7]
conf = json.dumps({"cniVersion": "1.0.0", "name": "fibril", "type": "fibril-cni", "agent-socket": sock})
for i in range(1, int(count) + 1):
    pod = "%s%d" % (prefix, i)
    podns = "%s-p-%s" % (tag, pod)
    subprocess.run(["ip", "netns", "add", podns], check=True)
    subprocess.run(["ip", "-n", podns, "link", "set", "lo", "up"], check=True)
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": "ADD", "CNI_CONTAINERID": tag + pod,
           "CNI_NETNS": "/var/run/netns/" + podns, "CNI_IFNAME": "eth0", "CNI_PATH": builddir,
           "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod}
    t0 = time.time_ns()
    r = subprocess.run(["ip", "netns", "exec", node_ns, builddir + "/fibril-cni"], input=conf.encode(),
                       env=env, capture_output=True)
    t1 = time.time_ns()
    if r.returncode:
        sys.exit("ADD %s: %s" % (pod, r.stdout.decode()))
    print(json.loads(r.stdout)["ips"][0]["address"].split("/")[0], t0, t1, flush=True)
PY
pods() { python3 "$WORK/pods.py" "$MN_TAG" "$(mn_ns "$1")" "${MN_DIR[$1]}/fibril.sock" "$top_builddir" "$2" "$PODS"; }
# pct P < numbers -> the P-th percentile
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.2f", v[i] }'; }
# wire NODE... -> the bytes their underlay links carried so far (rx + tx)
wire() {
	local n t=0
	for n in "$@"; do
		t=$((t + $(ip netns exec "$(mn_ns "$n")" cat /sys/class/net/eth0/statistics/rx_bytes) +
			$(ip netns exec "$(mn_ns "$n")" cat /sys/class/net/eth0/statistics/tx_bytes)))
	done
	echo "$t"
}
# propagate A B PREFIX OUT : PODS adds on A, B's map watched; OUT.joined
# holds "ADDRESS T0 T1 SEEN" per pod
propagate() {
	local pin watch
	pin=$(find "/sys/fs/bpf/$MN_TAG-$2" -name dp_ipcache | head -n 1)
	[ -n "$pin" ] || die "$2's dp_ipcache pin is not found"
	"$WORK/watch" "$pin" "$PODS" 120 >"$4.seen" &
	watch=$!
	wait_for 5 grep -q ready "$4.seen" || true
	pods "$1" "$3" >"$4.added" || die "the adds on $1 failed"
	wait "$watch" || echo "   (the watcher saw $(($(wc -l <"$4.seen") - 1)) of $PODS pods)"
	join <(sort "$4.added") <(grep -v ready "$4.seen" | sort) >"$4.joined"
}

# ---- CRD mode: nodes c1 (A) and c2 (B), the API server, no etcd -------------------------------
mn_node_add c1 1
mn_node_add c2 2
K8S_NETNS=$MN_UNDERLAY_NS K8S_ADDRESS=$MN_UNDERLAY_PREFIX.1 k8s_start --bookmark-interval 60 >/dev/null || die "the API server does not start"
K8S_NETNS=$MN_UNDERLAY_NS
post() { # PATH JSON : create, or die
	local code
	code=$(k8s_api -o "$WORK/post.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d "$2" "$1")
	[ "$code" = 201 ] || die "POST $1: $code $(cat "$WORK/post.out")"
}
for i in 1 2; do
	post /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"c'$i'"},
	  "spec":{"podCIDRs":["10.204.'$((2 * i))'.0/23"]},
	  "status":{"addresses":[{"type":"InternalIP","address":"'"$MN_UNDERLAY_PREFIX.$((10 + i))"'"}]}}'
done
for n in c1 c2; do
	i=${n#c}
	mn_agent_start "$n" "$WORK/mods-crd" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set "k8s.node-name=$n" \
		--set "ipam-cluster-pool.node-cidr=10.204.$((2 * i)).0/23" || die "the agent of $n does not start"
done
wait_for 30 routes c1 c2 && wait_for 30 routes c2 c1 || die "c1 and c2 do not route each other"
grep -q 'the ipcache comes from CiliumEndpoint objects' "${MN_DIR[c1]}/agent.log" || die "c1 is not in CRD mode"
# the Pod objects first (a scheduler's work), all at once
ip netns exec "$MN_UNDERLAY_NS" python3 - "$K8S_URL" "$K8S_TOKEN" "$K8S_CA" "$PODS" <<'PY' || die "the Pod objects"
import http.client, json, ssl, sys, urllib.parse
url, token, ca, n = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
c = http.client.HTTPSConnection(url.hostname, url.port, context=ssl.create_default_context(cafile=ca))
for i in range(1, n + 1):
    c.request("POST", "/api/v1/namespaces/default/pods", json.dumps({"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "c%d" % i, "namespace": "default", "labels": {"app": "bench"}},
              "spec": {"nodeName": "c1", "containers": [{"name": "c", "image": "x",
                       "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]}}),
              {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse(); body = r.read()
    if r.status != 201: sys.exit("Pod c%d: %d %s" % (i, r.status, body[:200]))
PY
stats() { k8s_ctl stats >"$1" || die "GET /_control/stats"; }
pods_seen() { stats "$WORK/s.json"; python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))["traffic"].get("agent", {})
sys.exit(0 if t.get("watchEvents", {}).get("pods", 0) >= int(sys.argv[2]) else 1)' "$WORK/s.json" "$PODS"; }
wait_for 30 pods_seen || die "c1 does not see its $PODS Pod objects"
stats "$WORK/crd.idle0"
w_idle0=$(wire c1 c2)
sleep "$IDLE" # sleep: the idle window whose background traffic is measured
stats "$WORK/crd.s0"
w0=$(wire c1 c2)
propagate c1 c2 c "$WORK/crd"
stats "$WORK/crd.s1"
w1=$(wire c1 c2)
crd_wire_idle=$((w0 - w_idle0)) crd_wire=$((w1 - w0))
mn_agent_kill c1 TERM
mn_agent_kill c2 TERM
k8s_stop

# ---- kvstore mode: nodes e1 (A) and e2 (B), one etcd, no API server --------------------------
mn_etcd_start || die "etcd does not start"
mn_node_add e1 3
mn_node_add e2 4
ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=22 --set nodes.lease-ttl=30s)
mn_agent_start e1 "$WORK/mods-kv" "${ARGS[@]}" || die "the agent of e1 does not start"
mn_agent_start e2 "$WORK/mods-kv" "${ARGS[@]}" || die "the agent of e2 does not start"
wait_for 30 routes e1 e2 && wait_for 30 routes e2 e1 || die "e1 and e2 do not route each other"
# etcd's metrics and the agents' requests to it, one file
kvstats() {
	{
		ip netns exec "$MN_UNDERLAY_NS" curl -sS --max-time 10 "$MN_ETCD_ENDPOINT/metrics"
		mn_api e1 http://x/metrics | sed 's/^/agent /'
		mn_api e2 http://x/metrics | sed 's/^/agent /'
	} >"$1" || die "the metrics of etcd and the agents"
}
kvstats "$WORK/kv.idle0"
w_idle0=$(wire e1 e2)
sleep "$IDLE" # sleep: the idle window whose background traffic is measured
kvstats "$WORK/kv.s0"
w0=$(wire e1 e2)
propagate e1 e2 k "$WORK/kv"
kvstats "$WORK/kv.s1"
w1=$(wire e1 e2)
kv_wire_idle=$((w0 - w_idle0)) kv_wire=$((w1 - w0))

# ---- the figures ------------------------------------------------------------------------------
prop() { awk '{ print ($4 - $2) / 1e6 }' "$1.joined"; }
after() { awk '{ print ($4 - $3) / 1e6 }' "$1.joined"; } # < 0: in B's map before A's ADD returned
add() { awk '{ print ($3 - $2) / 1e6 }' "$1.added"; }
echo "CRD mode beside kvstore mode: a pod's CNI ADD on node A -> node B's dp_ipcache map ($PODS pods,"
echo "one at a time; load average $(cut -d' ' -f1-3 /proc/loadavg), a shared machine: re-run before trusting a ratio)"
echo "1. propagation"
printf '   %-52s %10s %10s %8s\n' "" "p50 ms" "p99 ms" "pods"
crd99=$(prop "$WORK/crd" | pct 99)
printf '   %-52s %10s %10s %8s\n' "CRD mode: ADD start -> in B's map" "$(prop "$WORK/crd" | pct 50)" "$crd99" \
	"$(wc -l <"$WORK/crd.joined")"
printf '   %-52s %10s %10s %8s\n' "kvstore mode (reference): ADD start -> in B's map" "$(prop "$WORK/kv" | pct 50)" \
	"$(prop "$WORK/kv" | pct 99)" "$(wc -l <"$WORK/kv.joined")"
printf '   %-52s %10s %10s\n' "CRD mode: ADD end -> in B's map" "$(after "$WORK/crd" | pct 50)" "$(after "$WORK/crd" | pct 99)"
printf '   %-52s %10s %10s\n' "kvstore mode: ADD end -> in B's map" "$(after "$WORK/kv" | pct 50)" "$(after "$WORK/kv" | pct 99)"
printf '   %-52s %10s %10s\n' "the CNI ADD itself, CRD mode" "$(add "$WORK/crd" | pct 50)" "$(add "$WORK/crd" | pct 99)"
printf '   %-52s %10s %10s\n' "the CNI ADD itself, kvstore mode" "$(add "$WORK/kv" | pct 50)" "$(add "$WORK/kv" | pct 99)"
printf '   goal p99 < 100 ms (CRD mode): %s\n' "$(awk -v v="$crd99" 'BEGIN { print (v < 100 ? "met" : "NOT met") }')"
echo "2. load per new pod (2 nodes; over the adds, the idle background of $IDLE s apart)"
python3 - "$WORK" "$PODS" "$IDLE" "$crd_wire" "$crd_wire_idle" "$kv_wire" "$kv_wire_idle" <<'PY'
import json, re, sys
work, pods, idle = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
crd_wire, crd_wire_idle, kv_wire, kv_wire_idle = map(int, sys.argv[4:8])
def traffic(name):
    return json.load(open("%s/crd.%s" % (work, name)))["traffic"].get("agent", {})
def tdiff(a, b):
    x, y = traffic(a), traffic(b)
    ev = lambda t, r: t.get("watchEvents", {}).get(r, 0)
    verbs = {k: v - x.get("byVerb", {}).get(k, 0) for k, v in y.get("byVerb", {}).items()}
    return {"req": y.get("requests", 0) - x.get("requests", 0),
            "bytes": y.get("bytesIn", 0) + y.get("bytesOut", 0) - x.get("bytesIn", 0) - x.get("bytesOut", 0),
            "cep": ev(y, "ciliumendpoints") - ev(x, "ciliumendpoints"),
            "events": sum(y.get("watchEvents", {}).values()) - sum(x.get("watchEvents", {}).values()),
            "verbs": {k: v for k, v in verbs.items() if v}}
def metrics(name):
    out = {}
    for line in open("%s/kv.%s" % (work, name)):
        agent = line.startswith("agent ")
        line = line[6:] if agent else line
        m = re.match(r'^([a-z_]+)(\{[^}]*\})? ([0-9.e+]+)$', line.strip())
        if not m:
            continue
        key = ("agent " if agent else "") + m.group(1)
        if m.group(1) == "grpc_server_handled_total":
            key += re.search(r'grpc_method="([^"]*)"', m.group(2) or "").group(1)
        out[key] = out.get(key, 0) + float(m.group(3))
    return out
def mdiff(a, b):
    x, y = metrics(a), metrics(b)
    g = lambda k: y.get(k, 0) - x.get(k, 0)
    methods = {k[len("grpc_server_handled_total"):]: g(k) for k in y
               if k.startswith("grpc_server_handled_total") and g(k)}
    return {"req": g("agent fibril_kvstore_etcd_requests_total"),
            "bytes": g("etcd_network_client_grpc_received_bytes_total") + g("etcd_network_client_grpc_sent_bytes_total"),
            "events": g("etcd_debugging_mvcc_events_total"), "methods": methods}
c, ci = tdiff("s0", "s1"), tdiff("idle0", "s0")
k, ki = mdiff("s0", "s1"), mdiff("idle0", "s0")
row = lambda what, a, b: print("   %-52s %12s %12s" % (what, a, b))
row("", "CRD mode", "kvstore")
row("requests per new pod (agents -> server / etcd)", "%.2f" % (c["req"] / pods), "%.2f" % (k["req"] / pods))
row("bytes per new pod (CRD: HTTP; etcd: its gRPC)", "%.0f" % (c["bytes"] / pods), "%.0f" % (k["bytes"] / pods))
row("watch events per node per pod change", "%.2f" % (c["events"] / 2 / pods), "%.2f" % (k["events"] / 2 / pods))
row("  of which CiliumEndpoints (CRD)", "%.2f" % (c["cep"] / 2 / pods), "")
row("underlay bytes per new pod (A and B, TCP/TLS incl.)", "%.0f" % (crd_wire / pods), "%.0f" % (kv_wire / pods))
row("idle background: requests per s", "%.2f" % (ci["req"] / idle), "%.2f" % (ki["req"] / idle))
row("idle background: underlay bytes per s", "%.0f" % (crd_wire_idle / idle), "%.0f" % (kv_wire_idle / idle))
print("   CRD mode's requests over the adds: " + ", ".join("%s %d" % kv for kv in sorted(c["verbs"].items())))
print("   etcd's gRPC calls over the adds:   " + ", ".join("%s %d" % (m, v) for m, v in sorted(k["methods"].items())))
PY
