#!/usr/bin/env bash
# tests/bench/bench_crd_scale.sh - CRD mode at scale, beside the kvstore
# mode, in one run (tests/bench/run.sh runs it; by hand: as root from a
# build directory with top_srcdir and top_builddir set): a generator
# preloads SIM_NODES Node objects (default 1,000) and SIM_EPS
# CiliumEndpoint objects (default 20,000 to stay near 3 minutes; the
# issue's figure is SIM_EPS=100000; spread over the nodes, each in
# its node's pod CIDR) into the API test server (tests/k8s/apiserver.py
# /_control/load, on the underlay of tests/lib/multinode.sh, no etcd); one agent
# (k8s, ipam-cluster-pool, endpoint, datapath, nodes: CRD mode) starts on a
# fresh node: the time from its exec until every route (routes-installed)
# and every ipcache entry (fibril_nodes_ipcache_entries) is in place, its
# CPU time, VmRSS and VmHWM (goal < 2 s and < 64 MB), beside the server
# serving the same CiliumEndpoints in the agent's pages (limit=500, one
# keep-alive connection: the floor the server sets). SIM_ROUNDS rounds
# (default 1, a fresh node and agent each). The kvstore mode's figures,
# the same SIM_NODES/SIM_EPS in etcd, are bench_cluster.sh's part 3, run
# after (BENCH_CRD_SCALE_KV=0: not run). SIM_BASE_BUILDDIR=<build dir> runs
# that build's agent in alternate rounds (A B A B, before / after);
# BENCH_KEEP_LOG=<path> keeps each round's agent log as <path>.<node>;
# BENCH_PERF=<path> records each round's agent with perf (<path>.<node>).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

SIM_NODES=${SIM_NODES:-1000}
SIM_EPS=${SIM_EPS:-20000} # the full size: SIM_EPS=100000
SIM_ROUNDS=${SIM_ROUNDS:-1}
k8s_require
MODS="k8s ipam-cluster-pool endpoint datapath nodes"
# shellcheck disable=SC2086
mn_require $MODS
die() { echo "bench_crd_scale: $*" >&2; exit 1; }
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
	[ -x "$f" ] && { AGENT=$f; break; }
done
# shellcheck disable=SC2086
mn_modules "$WORK/mods" $MODS
if [ -n "${SIM_BASE_BUILDDIR:-}" ]; then
	mkdir -p "$WORK/mods-base"
	for m in $MODS; do install -m 0644 "$SIM_BASE_BUILDDIR/.libs/$m.so" "$WORK/mods-base/$m.so"; done
fi
mn_underlay_up

K8S_NETNS=$MN_UNDERLAY_NS K8S_ADDRESS=$MN_UNDERLAY_PREFIX.1 k8s_start --history 1000 >/dev/null ||
	die "the API server does not start"
K8S_NETNS=$MN_UNDERLAY_NS
# the generator: Nodes sim0.. (pod CIDR 10.<100+i/256>.<i%256>.0/24, IP
# 172.20.<1+i/250>.<2+i%250>) and their CiliumEndpoints, as the agents
# publish them (modules/nodes/ipcache_crd.c), into the server by
# /_control/load, 10,000 at a time
t0=$(date +%s%N)
ip netns exec "$MN_UNDERLAY_NS" python3 - "$K8S_URL" "$K8S_CA" "$SIM_NODES" "$SIM_EPS" <<'PY' || die "the generator"
import http.client, json, ssl, sys, urllib.parse
url, ca, nodes, eps = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = http.client.HTTPSConnection(url.hostname, url.port, context=ssl.create_default_context(cafile=ca), timeout=300)
def load(items):
    c.request("POST", "/_control/load", json.dumps(items), {"Content-Type": "application/json"})
    r = c.getresponse(); body = r.read()
    if r.status != 200: sys.exit("load: %d %s" % (r.status, body[:200]))
def node_ip(i): return "172.20.%d.%d" % (1 + i // 250, 2 + i % 250)
load([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sim%d" % i},
       "spec": {"podCIDRs": ["10.%d.%d.0/24" % (100 + i // 256, i % 256)]},
       "status": {"addresses": [{"type": "InternalIP", "address": node_ip(i)}]}} for i in range(nodes)])
items = []
for e in range(eps):
    i = e % nodes; k = e // nodes
    items.append({"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
                  "metadata": {"name": "pod-%d" % e, "namespace": "default"},
                  "status": {"id": 1 + k, "identity": {"id": 256 + e % 500},
                             "networking": {"addressing": [{"ipv4": "10.%d.%d.%d" % (100 + i // 256, i % 256, 2 + k % 250)}],
                                            "node": node_ip(i), "node-name": "sim%d" % i},
                             "named-ports": [], "state": "ready"}})
    if len(items) == 10000:
        load(items); items = []
if items:
    load(items)
PY
t1=$(date +%s%N)
objs=$(k8s_ctl stats | python3 -c 'import json, sys; o = json.load(sys.stdin)["objects"]; print(o["nodes"], o["ciliumendpoints"])')
echo "CRD mode at scale: $SIM_NODES nodes and $SIM_EPS CiliumEndpoints preloaded into the API test server"
echo "   (server with objects: ${objs% *} Nodes, ${objs#* } CiliumEndpoints; generated and loaded in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }') s)"

# the reference: the CiliumEndpoints served in the agent's pages
serve_ref() {
	ip netns exec "$MN_UNDERLAY_NS" python3 - "$K8S_URL" "$K8S_TOKEN" "$K8S_CA" <<'PY'
import gzip, http.client, json, ssl, sys, time, urllib.parse
url, token, ca = urllib.parse.urlparse(sys.argv[1]), sys.argv[2], sys.argv[3]
c = http.client.HTTPSConnection(url.hostname, url.port, context=ssl.create_default_context(cafile=ca), timeout=120)
t, cont, n, size = time.monotonic(), "", 0, 0
while True:
    c.request("GET", "/apis/cilium.io/v2/ciliumendpoints?limit=500" + ("&continue=" + cont if cont else ""),
              headers={"Authorization": "Bearer " + token, "Accept-Encoding": "gzip"})
    r = c.getresponse(); body = r.read(); size += len(body)
    if r.getheader("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    j = json.loads(body); n += len(j["items"]); cont = j["metadata"].get("continue", "")
    if not cont:
        break
print("%.2f %d %.1f" % (time.monotonic() - t, n, size / 1048576))
PY
}
# the agent's counters: every ipcache entry and every route
done_sim() {
	local m r
	m=$(mn_api "$1" http://x/metrics | awk '/^fibril_nodes_ipcache_entries /{ print $2 }')
	r=$(mn_api "$1" http://x/v1/nodes | grep -o '"routes-installed": *[0-9]*' | grep -o '[0-9]*$')
	[ "${m%.*}" -ge "$SIM_EPS" ] 2>/dev/null && [ "${r:-0}" -ge "$SIM_NODES" ]
}
# sim_round N NODE MODS LABEL
sim_round() {
	local idx=$1 node=$2 mods=$3 label=$4 code ref t0 t1 cpu rss hwm secs k8scpu0 k8scpu
	mn_node_add "$node" "$idx"
	ip -n "$(mn_ns "$node")" addr add 172.20.0.1/16 dev eth0 # the simulated nodes' IPs are on-link
	code=$(k8s_api -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '{"apiVersion":"v1",
	  "kind":"Node","metadata":{"name":"'"$node"'"},"spec":{"podCIDRs":["10.250.'"$idx"'.0/24"]},
	  "status":{"addresses":[{"type":"InternalIP","address":"'"${MN_IP[$node]}"'"}]}}' /api/v1/nodes)
	[ "$code" = 201 ] || die "the Node $node: $code"
	ref=$(serve_ref) || die "the reference list"
	k8scpu0=$(awk '{ print $14 + $15 }' "/proc/$K8S_PID/stat")
	t0=$(date +%s%N)
	MN_START_NOWAIT=1 mn_agent_start "$node" "$mods" --set "k8s.kubeconfig=$K8S_KUBECONFIG" \
		--set "k8s.node-name=$node" --set "ipam-cluster-pool.node-cidr=10.250.$idx.0/24" \
		${BENCH_AGENT_ARGS:-} >/dev/null || die "the agent of $node"
	[ -z "${BENCH_PERF:-}" ] || { perf record ${BENCH_PERF_ARGS:--g} -o "$BENCH_PERF.$node" -p "${MN_PID[$node]}" >/dev/null 2>&1 & PERF_PID=$!; }
	for _ in $(seq 1 3000); do
		done_sim "$node" 2>/dev/null && break
		kill -0 "${MN_PID[$node]}" 2>/dev/null || die "the agent of $node died: $(tail -5 "${MN_DIR[$node]}/agent.log")"
		sleep 0.04 # sleep: the poll interval of a wait with a deadline (this one measures: 40 ms steps)
	done
	t1=$(date +%s%N)
	done_sim "$node" || echo "   (not complete after 120 s)"
	cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/${MN_PID[$node]}/stat")
	k8scpu=$(awk -v hz="$(getconf CLK_TCK)" -v t0="$k8scpu0" '{ printf "%.2f", ($14 + $15 - t0) / hz }' "/proc/$K8S_PID/stat")
	rss=$(awk '/^VmRSS/ { print $2 }' "/proc/${MN_PID[$node]}/status")
	hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/${MN_PID[$node]}/status")
	[ -z "${BENCH_PERF:-}" ] || { kill -INT "$PERF_PID"; wait "$PERF_PID"; } 2>/dev/null || true
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
	echo "   $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	printf '   %-52s %8s s (goal < 2 s: %s)\n' "agent start -> every route and ipcache entry" "$secs" \
		"$(awk -v v="$secs" 'BEGIN { print (v < 2 ? "met" : "NOT met") }')"
	printf '   %-52s %8s s (%s objects, %s MB gzipped)\n' "reference: the server serves the CEPs in 500s" \
		"$(cut -d' ' -f1 <<<"$ref")" "$(cut -d' ' -f2 <<<"$ref")" "$(cut -d' ' -f3 <<<"$ref")"
	printf '   %-52s %8s s (the server meanwhile: %s s)\n' "the agent's CPU time (user + system) by then" "$cpu" "$k8scpu"
	printf '   %-52s %8s MB (peak %s MB; goal < 64 MB: %s)\n' "agent RSS" "$((rss / 1024))" "$((hwm / 1024))" \
		"$(awk -v v="$hwm" 'BEGIN { print (v / 1024 < 64 ? "met" : "NOT met") }')"
	[ -z "${BENCH_KEEP_LOG:-}" ] || cp "${MN_DIR[$node]}/agent.log" "$BENCH_KEEP_LOG.$node"
	mn_agent_kill "$node" TERM
}
NEW_AGENT=$AGENT NEW_LIBS=$LD_LIBRARY_PATH
for round in $(seq 1 "$SIM_ROUNDS"); do
	if [ -n "${SIM_BASE_BUILDDIR:-}" ]; then
		AGENT=$SIM_BASE_BUILDDIR/.libs/fibril-agent
		[ -x "$SIM_BASE_BUILDDIR/.libs/lt-fibril-agent" ] && AGENT=$SIM_BASE_BUILDDIR/.libs/lt-fibril-agent
		LD_LIBRARY_PATH=$SIM_BASE_BUILDDIR/.libs sim_round $((2 * round + 1)) "b$round" "$WORK/mods-base" \
			"round $round, base build ($SIM_BASE_BUILDDIR)"
		AGENT=$NEW_AGENT
	fi
	LD_LIBRARY_PATH=$NEW_LIBS sim_round $((2 * round + 2)) "s$round" "$WORK/mods" "round $round, CRD mode"
done
k8s_stop
if [ "${BENCH_CRD_SCALE_KV:-1}" != 0 ]; then
	echo "   reference, kvstore mode (bench_cluster.sh part 3, same sizes, etcd):"
	BENCH_CLUSTER_PARTS=3 SIM_ROUNDS=$SIM_ROUNDS SIM_BASE_BUILDDIR='' SIM_NODES=$SIM_NODES SIM_EPS=$SIM_EPS \
		bash "$top_srcdir/tests/bench/bench_cluster.sh" 2>&1 | sed -n '/^3\./,$p' | sed '1d; s/^/   /' ||
		die "bench_cluster.sh part 3"
fi
