#!/usr/bin/env bash
# tests/bench/bench_cluster.sh - the cluster figures (run by
# tests/bench/run.sh, or by hand as root with top_srcdir, top_builddir and
# CC set), on nodes of tests/lib/multinode.sh with one etcd:
#   1. propagation: a pod's CNI ADD on n1 until n2's datapath ipcache map
#      holds its address (tests/bench/bench_ipcache_watch walks the pinned
#      map every 200 us), p50/p99 over PODS pods, beside the ADD itself;
#   2. identity allocation for a new label set: p50/p99 of the times the
#      agent logs for each allocation ("identity N allocated ... in X ms",
#      from the request to the identity held), beside the same request (the
#      creating txn, whose failure branch reads the labels' value/ prefix)
#      sent straight to etcd by a client; the agent's histogram's bucket bounds; the CNI
#      ADD of a pod of new labels beside one of labels the node holds (the
#      local hit alone: tests/bench/bench_identity);
#   3. scale by simulation: a load generator writes SIM_NODES node records
#      and SIM_EPS ipcache records into etcd; one agent starts on them: the
#      time until it has every route and every ipcache entry in place, and
#      its RSS (VmRSS after, VmHWM the peak).
# BENCH_CLUSTER_PARTS (default "1 2 3") runs some of them only; the scale
# part runs SIM_ROUNDS rounds (default 1, a fresh node and agent each),
# each beside etcd serving the prefix to curl, with the agent's CPU time;
# SIM_BASE_BUILDDIR=<another build dir> starts that build's agent in
# alternate rounds on the same data (A B A B: before / after in one run);
# BENCH_PERF=<file> records each round's agent with perf; SIM_NEW_ARGS adds
# agent arguments to this build's rounds only (BENCH_AGENT_ARGS to all).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

PODS=${PODS:-200}
NEWIDS=${NEWIDS:-100}
SIM_NODES=${SIM_NODES:-1000}
SIM_EPS=${SIM_EPS:-100000}
PARTS=${BENCH_CLUSTER_PARTS:-1 2 3}
part() { [[ " $PARTS " == *" $1 "* ]]; }
MODS="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes"
# shellcheck disable=SC2086
mn_require $MODS
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
	[ -x "$f" ] && { AGENT=$f; break; }
done
# shellcheck disable=SC2046
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -o "$WORK/watch" "$top_srcdir/tests/bench/bench_ipcache_watch.c" \
	$(pkg-config --cflags --libs libbpf) || { echo "bench_cluster: cannot build the map watcher" >&2; exit 1; }
# shellcheck disable=SC2086
mn_modules "$WORK/mods" $MODS
mn_underlay_up
mn_etcd_start || { echo "bench_cluster: etcd does not start" >&2; exit 1; }
mn_node_add n1 1
mn_node_add n2 2
ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.203.0.0/16
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=22 --set nodes.lease-ttl=30s)
mn_agent_start n1 "$WORK/mods" "${ARGS[@]}" || exit 1
mn_agent_start n2 "$WORK/mods" "${ARGS[@]}" || exit 1
for i in $(seq 1 $((PODS + 2 * NEWIDS))); do MN_NETNS_LIST+=("$(mn_pod_ns "b$i")"); done

# pods.py FIRST COUNT NS-PATTERN : CNI ADDs on n1, one at a time; prints
# "ADDRESS T0 T1" (CLOCK_REALTIME ns before and after each ADD)
cat >"$WORK/pods.py" <<'PY'
import json, os, subprocess, sys, time
tag, node_ns, sock, builddir, first, count, nspat = sys.argv[1:8]
conf = json.dumps({"cniVersion": "1.0.0", "name": "fibril", "type": "fibril-cni", "agent-socket": sock})
for i in range(int(first), int(first) + int(count)):
    pod = "b%d" % i
    podns = "%s-p-%s" % (tag, pod)
    subprocess.run(["ip", "netns", "add", podns], check=True)
    subprocess.run(["ip", "-n", podns, "link", "set", "lo", "up"], check=True)
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": "ADD", "CNI_CONTAINERID": tag + pod,
           "CNI_NETNS": "/var/run/netns/" + podns, "CNI_IFNAME": "eth0", "CNI_PATH": builddir,
           "CNI_ARGS": "K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s" % (nspat.replace("%d", str(i)), pod)}
    t0 = time.time_ns()
    r = subprocess.run(["ip", "netns", "exec", node_ns, builddir + "/fibril-cni"], input=conf.encode(),
                       env=env, capture_output=True)
    t1 = time.time_ns()
    if r.returncode:
        sys.exit("ADD %s: %s" % (pod, r.stdout.decode()))
    print(json.loads(r.stdout)["ips"][0]["address"].split("/")[0], t0, t1, flush=True)
PY
pods() { python3 "$WORK/pods.py" "$MN_TAG" "$(mn_ns n1)" "${MN_DIR[n1]}/fibril.sock" "$top_builddir" "$@"; }
# pct P < numbers -> the P-th percentile
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.2f", v[i] }'; }

# ---- 1. propagation ------------------------------------------------------------------------
if part 1; then
pin=$(find "/sys/fs/bpf/$MN_TAG-n2" -name dp_ipcache | head -n 1)
[ -n "$pin" ] || { echo "bench_cluster: n2's dp_ipcache pin is not found" >&2; exit 1; }
"$WORK/watch" "$pin" "$PODS" 120 >"$WORK/seen" &
WATCH=$!
wait_for 5 grep -q ready "$WORK/seen" || true
pods 1 "$PODS" default >"$WORK/added" || exit 1
wait "$WATCH" || echo "  (the watcher saw $(($(wc -l <"$WORK/seen") - 1)) of $PODS pods)"
join <(sort "$WORK/added") <(grep -v ready "$WORK/seen" | sort) >"$WORK/joined"
echo "1. ipcache propagation: CNI ADD on n1 -> n2's dp_ipcache map holds the pod ($PODS pods, etcd on the underlay)"
printf '   %-48s %10s %10s\n' "" "p50 ms" "p99 ms"
prop() { awk '{ print ($4 - $2) / 1e6 }' "$WORK/joined"; }
add() { awk '{ print ($3 - $2) / 1e6 }' "$WORK/added"; }
p99=$(prop | pct 99)
printf '   %-48s %10s %10s\n' "ADD start -> in n2's map" "$(prop | pct 50)" "$p99"
printf '   %-48s %10s %10s\n' "reference: the CNI ADD itself on n1" "$(add | pct 50)" "$(add | pct 99)"
printf '   goal p99 < 100 ms: %s\n' "$(awk -v v="$p99" 'BEGIN { print (v < 100 ? "met" : "NOT met") }')"
fi

# ---- 2. identity allocation ---------------------------------------------------------------
if part 2; then
first=$((PODS + 1))
pods "$first" "$NEWIDS" "nid%d" >"$WORK/new" || exit 1
pods $((first + NEWIDS)) "$NEWIDS" "nid$first" >"$WORK/held" || exit 1
hist=$(mn_api n1 http://x/metrics | grep '^fibril_endpoint_cluster_identity_allocation_seconds_bucket')
# bucket_pct P: the upper bound of the bucket holding the P-th percentile, in ms
bucket_pct() { awk -v p="$1" '{ match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); n = $NF
	b[NR] = le; c[NR] = n; tot = n } END { for (i = 1; i <= NR; i++) if (c[i] >= tot * p / 100) {
	if (b[i] == "+Inf") print "> 5000"; else printf "<= %g", b[i] * 1000; exit } }' <<<"$hist"; }
count=$(awk 'END { print $NF }' <<<"$hist")
echo ""
# the agent's own time for each allocation of these labels
sed -n 's/.*identity [0-9]* allocated for labels k8s:io.kubernetes.pod.namespace=nid[0-9]* (cluster-wide, in \([0-9.]*\) ms).*/\1/p' \
	"${MN_DIR[n1]}/agent.log" >"$WORK/alloc_ms"
# reference: the allocation's request (one transaction: create, or read who
# holds the labels) straight to etcd, from a client in the underlay
ip netns exec "$MN_UNDERLAY_NS" python3 - "$MN_ETCD_ENDPOINT" "$NEWIDS" >"$WORK/etcd_ms" <<'PY' || exit 1
import base64, http.client, json, sys, time, urllib.parse
url = urllib.parse.urlparse(sys.argv[1]); n = int(sys.argv[2])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
b64 = lambda s: base64.b64encode(s.encode()).decode()
def post(path, body):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse(); r.read()
    if r.status != 200: sys.exit("etcd reference: %d" % r.status)
for i in range(n):
    labels = "k8s:io.kubernetes.pod.namespace=ref%d;" % i
    prefix = "/bench-ref/state/identities/v1/value/%s/" % labels
    idk = "/bench-ref/state/identities/v1/id/%d" % (100000 + i)
    t0 = time.perf_counter_ns()
    post("/v3/kv/txn", {"compare": [
        {"key": b64(idk), "target": "CREATE", "result": "EQUAL", "create_revision": 0},
        {"key": b64(prefix), "range_end": b64(prefix[:-1] + "0"), "target": "VERSION", "result": "EQUAL", "version": 0}],
        "success": [{"request_put": {"key": b64(idk), "value": b64(labels)}},
                    {"request_put": {"key": b64(prefix + "n1"), "value": b64(str(100000 + i))}}],
        "failure": [{"request_range": {"key": b64(prefix), "range_end": b64(prefix[:-1] + "0")}}]})
    print((time.perf_counter_ns() - t0) / 1e6)
PY
echo "2. identity allocation for a new label set (n1, through etcd; $count allocations)"
printf '   %-48s %10s %10s\n' "" "p50 ms" "p99 ms"
printf '   %-48s %10s %10s\n' "allocation (the agent's time for each, $(grep -c . "$WORK/alloc_ms"))" \
	"$(pct 50 <"$WORK/alloc_ms")" "$(pct 99 <"$WORK/alloc_ms")"
printf '   %-48s %10s %10s\n' "reference: its 1 request (txn) to etcd, a client" \
	"$(pct 50 <"$WORK/etcd_ms")" "$(pct 99 <"$WORK/etcd_ms")"
printf '   %-48s %10s %10s\n' "allocation (the agent's histogram, bucket bound)" "$(bucket_pct 50)" "$(bucket_pct 99)"
nadd() { awk '{ print ($3 - $2) / 1e6 }' "$1"; }
printf '   %-48s %10s %10s\n' "CNI ADD, a pod of new labels" "$(nadd "$WORK/new" | pct 50)" "$(nadd "$WORK/new" | pct 99)"
printf '   %-48s %10s %10s\n' "reference: CNI ADD, a pod of labels n1 holds" "$(nadd "$WORK/held" | pct 50)" "$(nadd "$WORK/held" | pct 99)"
echo "   goal p99 < 5 ms for the allocation; the local hit (goal < 50 us):"
"$top_builddir/tests/bench/bench_identity" 1000 100000 | sed '1d; s/^/   /'
fi
mn_agent_kill n1 TERM
mn_agent_kill n2 TERM

# ---- 3. scale by simulation -----------------------------------------------------------------
if part 3; then
SIM_ROUNDS=${SIM_ROUNDS:-1}
ip netns exec "$MN_UNDERLAY_NS" python3 - "$MN_ETCD_ENDPOINT" "$SIM_NODES" "$SIM_EPS" <<'PY' || exit 1
import base64, http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1]); nodes = int(sys.argv[2]); eps = int(sys.argv[3])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
b64 = lambda s: base64.b64encode(s.encode()).decode()
def node_ip(i): return "172.20.%d.%d" % (1 + i // 250, 2 + i % 250)
def put(kvs):
    for s in range(0, len(kvs), 128):
        ops = [{"request_put": {"key": b64(k), "value": b64(v)}} for k, v in kvs[s:s + 128]]
        conn.request("POST", "/v3/kv/txn", json.dumps({"success": ops}), {"Content-Type": "application/json"})
        r = conn.getresponse(); body = r.read()
        if r.status != 200: sys.exit("load generator: %d %s" % (r.status, body[:200]))
put([("/sim/state/nodes/v1/sim%d" % i, json.dumps({"name": "sim%d" % i, "ipv4": node_ip(i),
      "pod-cidrs": ["10.%d.%d.0/24" % (100 + i // 256, i % 256)], "updated": 1764050000}))
     for i in range(nodes)])
kvs = []
for e in range(eps):
    i = e % nodes; k = e // nodes
    ip = "10.%d.%d.%d" % (100 + i // 256, i % 256, 2 + k % 250)
    kvs.append(("/sim/state/ip/v1/default/" + ip, json.dumps({"IP": ip, "HostIP": node_ip(i), "ID": 256 + e % 500,
                "Node": "sim%d" % i, "K8sNamespace": "default", "K8sPodName": "pod-%d" % e})))
put(kvs)
PY
done_sim() {
	local m r
	m=$(mn_api "$1" http://x/metrics | awk '/^fibril_nodes_ipcache_entries /{ print $2 }')
	# (on stdin: with 1,000 nodes the answer is longer than one argument may be)
	r=$(mn_api "$1" http://x/v1/nodes | python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"]["routes-installed"])')
	[ "${m%.*}" -ge "$SIM_EPS" ] 2>/dev/null && [ "$r" -ge "$SIM_NODES" ]
}
echo ""
echo "3. scale by simulation: $SIM_NODES nodes and $SIM_EPS endpoints in etcd, one agent starts (a new node each round)"
# sim_round N NODE MODS LABEL [ARGS]: a fresh node NODE (index N) starts its
# agent (AGENT, LD_LIBRARY_PATH and MODS as set; ARGS added) on the
# simulated cluster
sim_round() {
	local round=$1 node=$2 mods=$3 label=$4 ref t0 t1 cpu rss hwm dp routes secs etcd0 etcd_cpu
	mn_node_add "$node" "$round"
	# (the log's path expanded now: the cleanup runs outside this function)
	[ -n "${BENCH_KEEP_LOG:-}" ] && eval "mn_test_cleanup() { cp '${MN_DIR[$node]}/agent.log' '$BENCH_KEEP_LOG' 2>/dev/null; }"
	ip -n "$(mn_ns "$node")" addr add 172.20.0.1/16 dev eth0 # the simulated nodes' IPs are on-link
	# the reference: etcd's JSON gateway serving that prefix once, to curl
	ref=$(ip netns exec "$MN_UNDERLAY_NS" curl -s -o /dev/null -w '%{time_total} %{size_download}' \
		-X POST "$MN_ETCD_ENDPOINT/v3/kv/range" -d "{\"key\":\"$(printf /sim/state/ip/v1/default/ | base64 -w0)\",\"range_end\":\"$(printf /sim/state/ip/v1/default0 | base64 -w0)\"}")
	etcd0=$(awk '{ print $14 + $15 }' "/proc/$MN_ETCD_PID/stat")
	t0=$(date +%s%N)
	# one read of the whole prefix: its answer may take longer than the default 5 s
	MN_START_NOWAIT=${BENCH_PERF:+1} mn_agent_start "$node" "$mods" "${ARGS[@]}" --set kvstore-etcd.prefix=/sim/ \
		--set kvstore-etcd.request-timeout=120s ${BENCH_AGENT_ARGS:-} ${5:-} >/dev/null || exit 1
	if [ -n "${BENCH_PERF:-}" ]; then perf record -g -o "$BENCH_PERF.$node" -p "${MN_PID[$node]}" >/dev/null 2>&1 & PERF_PID=$!; fi
	# polled cheaply (done_sim runs python and curl twice: polled every 50 ms
	# it took most of a core from the agent and etcd): the agent logs when
	# its ipcache read is complete, then done_sim confirms
	for _ in $(seq 1 6000); do
		grep -q "ipcache read at revision" "${MN_DIR[$node]}/agent.log" 2>/dev/null &&
			done_sim "$node" 2>/dev/null && break
		sleep 0.02 # sleep: the poll interval of a wait with a deadline (this one measures: 20 ms steps)
	done
	t1=$(date +%s%N)
	done_sim "$node" || echo "   (not complete after 120 s)"
	# the agent's CPU time so far (user + system): less noisy than the wall
	# time on a loaded machine
	cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/${MN_PID[$node]}/stat")
	etcd_cpu=$(awk -v hz="$(getconf CLK_TCK)" -v t0="$etcd0" '{ printf "%.2f", ($14 + $15 - t0) / hz }' "/proc/$MN_ETCD_PID/stat")
	rss=$(awk '/^VmRSS/ { print $2 }' "/proc/${MN_PID[$node]}/status")
	hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/${MN_PID[$node]}/status")
	# (the map dump API stops at 65,536 entries: the module's own counters)
	dp=$(mn_api "$node" http://x/v1/ipcache | python3 -c 'import json,sys; m = json.load(sys.stdin)["metrics"]; print("%d (errors %d)" % (m["programmed"], m["errors"]))')
	[ -n "${BENCH_PERF:-}" ] && { kill -TERM "$PERF_PID"; wait "$PERF_PID"; } 2>/dev/null || true
	routes=$(ip -n "$(mn_ns "$node")" route show proto 242 | wc -l)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
	echo "   $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	printf '   %-48s %10s s (goal < 2 s: %s)\n' "agent start -> every route and ipcache entry" "$secs" \
		"$(awk -v v="$secs" 'BEGIN { print (v < 2 ? "met" : "NOT met") }')"
	printf '   %-48s %10s s (%s MB of JSON)\n' "reference: etcd serves the ipcache prefix to curl" \
		"${ref% *}" "$(awk -v b="${ref#* }" 'BEGIN { printf "%.1f", b / 1048576 }')"
	printf '   %-48s %10s s (etcd meanwhile: %s s)\n' "the agent's CPU time (user + system) by then" "$cpu" "$etcd_cpu"
	printf '   %-48s %10s / %s\n' "routes (proto 242) / endpoint entries written" "$routes" "$dp"
	printf '   %-48s %10s MB (peak %s MB; goal < 64 MB: %s)\n' "agent RSS" "$((rss / 1024))" "$((hwm / 1024))" \
		"$(awk -v v="$hwm" 'BEGIN { print (v / 1024 < 64 ? "met" : "NOT met") }')"
	mn_agent_kill "$node" TERM
}
# SIM_BASE_BUILDDIR (another build, e.g. of main): its agent and modules
# start in alternate rounds on the same data (A B A B ...), for a before /
# after comparison in one run
if [ -n "${SIM_BASE_BUILDDIR:-}" ]; then
	mkdir -p "$WORK/mods-base"
	for m in $MODS; do install -m 0644 "$SIM_BASE_BUILDDIR/.libs/$m.so" "$WORK/mods-base/$m.so"; done
fi
NEW_AGENT=$AGENT NEW_LIBS=$LD_LIBRARY_PATH
for round in $(seq 1 "$SIM_ROUNDS"); do
	if [ -n "${SIM_BASE_BUILDDIR:-}" ]; then
		AGENT=$SIM_BASE_BUILDDIR/.libs/fibril-agent
		[ -x "$SIM_BASE_BUILDDIR/.libs/lt-fibril-agent" ] && AGENT=$SIM_BASE_BUILDDIR/.libs/lt-fibril-agent
		LD_LIBRARY_PATH=$SIM_BASE_BUILDDIR/.libs sim_round $((2 * round + 1)) "b$round" "$WORK/mods-base" "round $round, base build ($SIM_BASE_BUILDDIR)"
		AGENT=$NEW_AGENT
	fi
	LD_LIBRARY_PATH=$NEW_LIBS sim_round $((2 * round + 2)) "s$round" "$WORK/mods" "round $round${SIM_NEW_ARGS:+ ($SIM_NEW_ARGS)}" "${SIM_NEW_ARGS:-}"
done
fi
