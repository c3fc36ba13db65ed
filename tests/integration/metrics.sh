#!/usr/bin/env bash
# tests/integration/metrics.sh - GET /metrics (unix socket and TCP listener)
# scraped and parsed with a real Prometheus text-format parser (Python's
# prometheus_client): every family has HELP and TYPE, names follow the
# conventions (fibril_ prefix, counters end in _total, base units), the
# host's own figures (API requests by route and code, their latency, the
# loop's lag, modules by state, bus queue) and a module's (ipam-api in front
# of the SDK's vendor-ipam example: allocations by result, pool gauges)
# move with what the test does; a module's families are gone once it is
# not loaded. Then an agent with kvstore-etcd (a real etcd on loopback),
# k8s (the fake API server), ipam-cluster-pool (claiming its node CIDR in
# etcd under a lease), nodes (watching the node registry) and endpoint: etcd requests by op and result, lease
# keepalives, watch restarts and errors after an etcd restart; k8s events
# by kind and type, watch restarts after the server cuts the watches, a
# relist after a 410; the endpoint API's latency by method and endpoints
# by state.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
[ -f "$top_builddir/.libs/ipam-api.so" ] || skip_or_fail "ipam-api is not built (configured without it?)"
prometheus_python

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/ipam-api.so" "$mods/ipam-api.so"
# shellcheck disable=SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror ${SAN_CFLAGS:-} \
	-I"$top_srcdir/sdk/include" -o "$mods/vendor-ipam.so" \
	"$top_srcdir/sdk/examples/vendor-ipam/vendor_ipam.c" -L"$top_builddir/.libs" -lfibril
chmod 0644 "$mods/vendor-ipam.so"
printf 'c1/eth0 10.0.3.5\n' >"$WORK/table"

port=$((20000 + ($$ + 7) % 20000))
start_agent "$mods" --set "vendor-ipam.table=$WORK/table" --set vendor-ipam.cidr=10.0.3.0/29 \
	--set agent.api-tcp-listen=127.0.0.1:$port

# parse FILE PYTHON-CHECKS : runs the checks with `fams` = {name: family}
# and `val(name, **labels)` = a sample's value (None when absent); each
# failed assert prints its message and fails the check.
cat >"$WORK/parse.py" <<'EOF'
import re, sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
fams = {}
for f in text_string_to_metric_families(text):
    assert f.name not in fams, "family %s twice" % f.name
    fams[f.name] = f
def val(name, **labels):
    for f in fams.values():
        for s in f.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None
exec(sys.argv[2])
EOF
parse() { "$PY" "$WORK/parse.py" "$1" "$2"; }

# ---- the format and the conventions --------------------------------------------------------
api -o /dev/null "http://x/v1/no-such-thing" || true
api -o /dev/null -X POST "http://x/v1/ipam?owner=c1/eth0&family=ipv4"
api -o /dev/null -X POST "http://x/v1/ipam?owner=nobody&family=ipv4" || true
api -D "$WORK/headers" -o "$WORK/unix.txt" http://x/metrics
check "/metrics over the socket answers in text format 0.0.4" \
	grep -qi '^content-type: text/plain; version=0.0.4' "$WORK/headers"
check "/metrics parses with prometheus_client and follows the naming rules" parse "$WORK/unix.txt" '
for n, f in fams.items():
    # fibril_*, and the process_* families every Prometheus client exports
    assert re.fullmatch(r"(fibril|process)_[a-z0-9_]+", n), "name %s" % n
    assert f.documentation, "no HELP for %s" % n
    assert f.type in ("counter", "gauge", "histogram"), "%s: type %s" % (n, f.type)
    if f.type == "histogram":
        buckets = [s for s in f.samples if s.name.endswith("_bucket")]
        assert buckets and buckets[-1].labels["le"] == "+Inf", n
for line in open(sys.argv[1]):
    if line.startswith("# TYPE ") and line.split()[3] == "counter":
        assert line.split()[2].endswith("_total"), line
'
check "every sample line has a HELP and TYPE before it" "$PY" - "$WORK/unix.txt" <<'EOF'
import sys
typed = set()
for line in open(sys.argv[1]):
    if line.startswith("# TYPE "):
        typed.add(line.split()[2])
    elif line.strip() and not line.startswith("#"):
        name = line.split("{")[0].split()[0]
        base = [t for t in typed if name == t or (name.startswith(t) and name[len(t):] in ("_bucket", "_sum", "_count"))]
        assert base, "sample %s before its TYPE" % name
EOF

# ---- the host's figures ----------------------------------------------------------------------
check "API requests by method, route and code (the allocation, the 404)" parse "$WORK/unix.txt" '
assert val("fibril_api_requests_total", method="POST", route="/v1/ipam", code="201") == 1
posts = [s for s in fams["fibril_api_requests"].samples if s.labels["route"] == "/v1/ipam" and s.labels["method"] == "POST"]
assert sum(s.value for s in posts) == 2 and len(posts) == 2, posts
assert val("fibril_api_requests_total", method="GET", route="unmatched", code="404") == 1
assert val("fibril_api_request_duration_seconds_count", route="/v1/ipam") == 2
'
check "modules by state" parse "$WORK/unix.txt" '
assert val("fibril_modules", state="running") == 2, val("fibril_modules", state="running")
assert val("fibril_modules", state="failed") == 0
'
check "the bus queue and the module health are there" parse "$WORK/unix.txt" '
assert val("fibril_bus_queue_bytes") is not None
assert val("fibril_module_health", module="ipam-api", level="ok") == 1
'
sleep 1.2 # sleep: the loop-lag timer ticks every 500 ms: 1.2 s holds two ticks (a scrape to poll would count itself)
api -o "$WORK/unix2.txt" http://x/metrics
check "the loop lag is observed every 500 ms" parse "$WORK/unix2.txt" '
assert val("fibril_loop_lag_seconds_count") >= 2, val("fibril_loop_lag_seconds_count")
assert val("fibril_api_requests_total", method="GET", route="/metrics", code="200") == 1
'

# ---- a module's figures ----------------------------------------------------------------------
check "ipam-api: allocations by family and result" parse "$WORK/unix.txt" '
assert val("fibril_ipam_allocations_total", family="ipv4", result="ok") == 1
assert val("fibril_ipam_allocations_total", family="ipv4", result="exhausted") == 1, [ (s.labels, s.value) for s in fams["fibril_ipam_allocations"].samples ]
'
check "ipam-api: the pool gauges at scrape time" parse "$WORK/unix.txt" '
assert val("fibril_ipam_pool_used_addresses", family="ipv4", cidr="10.0.3.0/29") == 1
assert val("fibril_ipam_pool_capacity_addresses", family="ipv4", cidr="10.0.3.0/29") >= 1
'
api -o /dev/null -X DELETE "http://x/v1/ipam?owner=c1/eth0"
api -o "$WORK/unix3.txt" http://x/metrics
check "ipam-api: releases counted, the pool gauge follows" parse "$WORK/unix3.txt" '
assert val("fibril_ipam_releases_total") == 1
assert val("fibril_ipam_pool_used_addresses", family="ipv4", cidr="10.0.3.0/29") == 0
'

# ---- the TCP listener ------------------------------------------------------------------------
curl -sS --max-time 10 -o "$WORK/tcp.txt" "http://127.0.0.1:$port/metrics"
check "/metrics over TCP has the modules' families too" parse "$WORK/tcp.txt" '
assert "fibril_ipam_allocations" in fams and "fibril_api_requests" in fams
'
stop_agent

# ---- released with the module ----------------------------------------------------------------
mkdir -p "$WORK/only"
chmod 0755 "$WORK/only"
cp -p "$mods/vendor-ipam.so" "$WORK/only/"
start_agent "$WORK/only" --set "vendor-ipam.table=$WORK/table" --set vendor-ipam.cidr=10.0.3.0/29
api -o "$WORK/only.txt" http://x/metrics
check "without ipam-api its families are not exposed" parse "$WORK/only.txt" '
assert "fibril_ipam_allocations" not in fams and "fibril_api_requests" in fams
'
stop_agent

# ---- endpoint, k8s and kvstore-etcd ------------------------------------------------------------
. "$top_srcdir/tests/lib/etcd.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
etcd_require
k8s_require
for m in kvstore-etcd k8s ipam-cluster-pool endpoint nodes; do
	[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built (configured without it?)"
done
mods2=$WORK/mods2
mkdir -p "$mods2"
chmod 0755 "$mods2"
for m in kvstore-etcd k8s ipam-cluster-pool ipam-api endpoint nodes; do
	install -m 0644 "$top_builddir/.libs/$m.so" "$mods2/$m.so"
done
etcd_start metrics || { fail "etcd starts"; finish; }
k8s_start || { fail "the fake API server starts"; finish; }
control() { curl -sS --max-time 20 --cacert "$K8S_CA" -X POST "$K8S_URL/_control/$1" >/dev/null; }
start_agent "$mods2" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" \
	--set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-m --set k8s.resources=services \
	--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.79.0.0/16 --set ipam-cluster-pool.node-name=node-m \
	--set ipam-cluster-pool.lease-ttl=3s --set nodes.node-ip=127.0.0.1 --set agent.node-name=node-m
api -o /dev/null http://x/v1/healthz || true
wait_for 20 agent_healthy || true
scrape() { api -o "$WORK/$1.txt" http://x/metrics; }
# scrape_until NAME SECONDS PYTHON-CHECKS : scrape into $WORK/NAME.txt until the checks hold
scrape_until() { wait_for "$2" _scrape_holds "$1" "$3" || true; }
_scrape_holds() { scrape "$1" && parse "$WORK/$1.txt" "$2" >/dev/null 2>&1; }
# the endpoint API: a PUT refused (no such netns) and a DELETE of nothing, both answered
api -o /dev/null -X PUT -H 'Content-Type: application/json' \
	-d '{"container-id":"c0ffee","ifname":"eth0","netns":"/nonexistent","host-ifname":"lxc0","host-ifindex":1,"mac":"02:00:00:00:00:01","host-mac":"02:00:00:00:00:02"}' \
	"http://x/v1/endpoint/container-id:c0ffee:eth0" || true
api -o /dev/null -X DELETE "http://x/v1/endpoint/container-id:c0ffee:eth0" || true
curl -sS --max-time 20 --cacert "$K8S_CA" -H "Authorization: Bearer $K8S_TOKEN" -X POST \
	-H 'Content-Type: application/json' "$K8S_URL/api/v1/namespaces/default/services" \
	-d '{"apiVersion":"v1","kind":"Service","metadata":{"name":"m1"},"spec":{"ports":[{"port":80}]}}' >/dev/null
# the lease keepalives (every ttl/3), the service's event
scrape_until m1 15 '
assert val("fibril_kvstore_etcd_lease_keepalives_total", result="ok") >= 1
assert val("fibril_k8s_events_total", kind="services", type="added") >= 1
'
check "the new families parse and follow the naming rules" parse "$WORK/m1.txt" '
for n in ("fibril_endpoint_regenerations", "fibril_endpoint_regeneration_duration_seconds",
          "fibril_endpoint_endpoints", "fibril_endpoint_api_request_duration_seconds",
          "fibril_k8s_events", "fibril_k8s_relists", "fibril_k8s_watch_restarts",
          "fibril_k8s_watch_events_received", "fibril_kvstore_etcd_requests",
          "fibril_kvstore_etcd_request_duration_seconds", "fibril_kvstore_etcd_errors",
          "fibril_kvstore_etcd_watch_restarts", "fibril_kvstore_etcd_lease_keepalives"):
    assert n in fams, "no family %s" % n
    assert fams[n].documentation, n
'
check "endpoint: the API latency of a PUT and a DELETE, endpoints by state" parse "$WORK/m1.txt" '
assert val("fibril_endpoint_api_request_duration_seconds_count", method="PUT") == 1, val("fibril_endpoint_api_request_duration_seconds_count", method="PUT")
assert val("fibril_endpoint_api_request_duration_seconds_count", method="DELETE") == 1
assert val("fibril_endpoint_api_request_duration_seconds_sum", method="PUT") > 0
assert val("fibril_endpoint_endpoints", state="ready") == 0
assert val("fibril_endpoint_regenerations_total", outcome="success") == 0
'
check "kvstore-etcd: requests by op and result (the CIDR claim), keepalives, latency" parse "$WORK/m1.txt" '
assert val("fibril_kvstore_etcd_requests_total", op="lease-grant", result="ok") >= 1
assert val("fibril_kvstore_etcd_requests_total", op="txn", result="ok") >= 1
assert val("fibril_kvstore_etcd_request_duration_seconds_count", op="txn") >= 1
assert val("fibril_kvstore_etcd_lease_keepalives_total", result="ok") >= 1, val("fibril_kvstore_etcd_lease_keepalives_total", result="ok")
assert val("fibril_kvstore_etcd_errors_total", kind="connection") == 0
'
check "k8s: the service added is counted by kind and type" parse "$WORK/m1.txt" '
assert val("fibril_k8s_events_total", kind="services", type="added") >= 1, val("fibril_k8s_events_total", kind="services", type="added")
assert val("fibril_k8s_relists_total", kind="services") == 0
assert val("fibril_k8s_watch_restarts_total", kind="services") == 0
'
# the API server cuts the watches: restarted from the last resourceVersion
control drop-watches
# the watch restarted, and open again on the server (answered, not a 410)
scrape_until m2 15 'assert val("fibril_k8s_watch_restarts_total", kind="services") >= 1'
wait_for 10 k8s_watching 1 services || true
scrape m2
check "k8s: a cut watch counts a watch restart, no relist" parse "$WORK/m2.txt" '
assert val("fibril_k8s_watch_restarts_total", kind="services") >= 1, val("fibril_k8s_watch_restarts_total", kind="services")
assert val("fibril_k8s_relists_total", kind="services") == 0
'
# a 410 Gone on the watch: the informer relists
control "watch-error?code=410&message=gone"
scrape_until m3 15 'assert val("fibril_k8s_relists_total", kind="services") >= 1'
check "k8s: a 410 counts a relist" parse "$WORK/m3.txt" '
assert val("fibril_k8s_relists_total", kind="services") >= 1, val("fibril_k8s_relists_total", kind="services")
'
# etcd restarts: its watch breaks and is started again
etcd_restart
scrape_until m4 20 '
assert val("fibril_kvstore_etcd_watch_restarts_total") >= 1
assert sum(val("fibril_kvstore_etcd_errors_total", kind=k) for k in ("timeout", "connection", "server")) >= 1
'
check "kvstore-etcd: an etcd restart counts watch restarts and errors" parse "$WORK/m4.txt" '
assert val("fibril_kvstore_etcd_watch_restarts_total") >= 1, val("fibril_kvstore_etcd_watch_restarts_total")
assert sum(val("fibril_kvstore_etcd_errors_total", kind=k) for k in ("timeout", "connection", "server")) >= 1
'
stop_agent
finish
