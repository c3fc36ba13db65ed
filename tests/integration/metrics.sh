#!/usr/bin/env bash
# tests/integration/metrics.sh - GET /metrics (unix socket and TCP listener)
# scraped and parsed with a real Prometheus text-format parser (Python's
# prometheus_client): every family has HELP and TYPE, names follow the
# conventions (fibril_ prefix, counters end in _total, base units), the
# host's own figures (API requests by route and code, their latency, the
# loop's lag, modules by state, bus queue) and a module's (ipam-api in front
# of the SDK's vendor-ipam example: allocations by result, pool gauges)
# move with what the test does; a module's families are gone once it is
# not loaded.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
[ -f "$top_builddir/.libs/ipam-api.so" ] || skip_or_fail "ipam-api is not built (configured without it?)"
# Debian's python3-prometheus-client lives in the system python (a python3
# earlier in PATH, e.g. pyenv's, may not see it)
PY=python3
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import prometheus_client.parser' 2>/dev/null; then PY=$p; break; fi
done
"$PY" -c 'import prometheus_client.parser' 2>/dev/null ||
	skip_or_fail "python3-prometheus-client is missing (scripts/deps.sh installs it)"

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
    assert re.fullmatch(r"fibril_[a-z0-9_]+", n), "name %s" % n
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
sleep 1.2 # the loop-lag timer ticks every 500 ms
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
finish
