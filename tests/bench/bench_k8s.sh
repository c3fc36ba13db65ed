#!/bin/bash
# tests/bench/bench_k8s.sh - Kubernetes informer figures (printed, never
# asserted; run by hand: top_srcdir=... top_builddir=... bash bench_k8s.sh):
#   1. time for the k8s module to sync (its start: LIST of every resource in
#      pages of 500, cache built, ADDED published) with 10,000 pods on this
#      node, 5,000 services, 5,000 endpoint slices and 1,000 network policies
#      bulk-loaded into the test API server (tests/k8s/apiserver.py), and the
#      agent's RSS after it (goals: < 2 s, < 64 MB); side by side with the
#      time the server alone needs to serve the same LISTs to a plain client.
#   2. watch throughput: a burst of 50,000 pod updates, queued in the server
#      (config hold_watches) and released at once; events/s until the
#      k8sprobe test module (a bus subscriber) has seen them all; side by side
#      with the server alone streaming a same-sized burst to a plain client,
#      so a python bottleneck shows as such.
# Sizes: K8S_BENCH_PODS (10000), _SERVICES (5000), _SLICES (5000),
# _POLICIES (1000), _BURST (50000). Needs root (the agent loads root-owned
# modules), python3, the built agent and k8s module.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source=../lib/common.sh
. "$top_srcdir/tests/lib/common.sh" # $WORK, cleanup trap, agent_args
BPFFS_DIR="/sys/fs/bpf/fibril-bench-k8s-$$"
PODS=${K8S_BENCH_PODS:-10000}
SERVICES=${K8S_BENCH_SERVICES:-5000}
SLICES=${K8S_BENCH_SLICES:-5000}
POLICIES=${K8S_BENCH_POLICIES:-1000}
BURST=${K8S_BENCH_BURST:-50000}
NODE=node-0

die() { echo "bench_k8s: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the agent only loads root-owned modules)"
[ -f "$top_builddir/.libs/k8s.so" ] || die "the k8s module is not built"
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/k8s.so"
# shellcheck disable=SC2046
$CC -std=gnu11 -O2 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
	-Wno-unused-parameter -I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) \
	-o "$WORK/k8sprobe.so" "$top_srcdir/tests/modules/k8sprobe.c" \
	-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
install -m 0644 "$WORK/k8sprobe.so" "$mods/k8sprobe.so"
cp "$top_srcdir/tests/k8s/apiserver.py" "$top_srcdir/tests/k8s/apiserver_crd.py" "$top_srcdir/tests/k8s/control.py" "$WORK/"

# ---- the server, bulk-loaded (objects straight into its store, no kubectl) -----
python3 "$WORK/control.py" gen --pods "$PODS" --nodes 1 --namespaces 20 --services "$SERVICES" \
	--endpointslices "$SLICES" --netpols "$POLICIES" >"$WORK/objects.json"
TOKEN=bench-$$
t0=$(date +%s.%N)
python3 "$WORK/apiserver.py" --port 0 --token "$TOKEN" --history 200000 \
	--load "$WORK/objects.json" >"$WORK/api.out" 2>"$WORK/api.err" &
for _ in $(seq 1 1200); do
	grep -q LISTENING "$WORK/api.out" 2>/dev/null && break
	sleep 0.1 # sleep: the poll interval of a wait with a deadline
done
PORT=$(awk '/LISTENING/ {print $2; exit}' "$WORK/api.out")
[ -n "$PORT" ] || die "the API server did not start: $(cat "$WORK/api.err")"
SERVER=http://127.0.0.1:$PORT
load_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: b
clusters: [{name: f, cluster: {server: "$SERVER"}}]
contexts: [{name: b, context: {cluster: f, user: u}}]
users: [{name: u, user: {token: $TOKEN}}]
EOF

# bench.py: the plain client (reference) and the burst driver
cat >"$WORK/bench.py" <<'EOF'
import gzip, http.client, json, sys, time, urllib.request
sys.path.insert(0, sys.argv[1])
from control import Control
url, token, node = sys.argv[2], sys.argv[3], sys.argv[4]
ctl = Control(url)
PATHS = [f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}", "/api/v1/services",
         "/apis/discovery.k8s.io/v1/endpointslices", "/apis/networking.k8s.io/v1/networkpolicies"]

def get(path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token,
                                                      "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)

def list_all():
    """The server alone: the agent's LISTs (pages of 500, gzip), one after the other."""
    t0, n = time.monotonic(), 0
    for p in PATHS:
        cont = ""
        while True:
            sep = "&" if "?" in p else "?"
            d = get(f"{p}{sep}limit=500" + (f"&continue={cont}" if cont else ""))
            n += len(d["items"])
            cont = d["metadata"].get("continue")
            if not cont:
                break
    return n, time.monotonic() - t0

def burst_objects(round_):
    """BURST pod updates: each pod relabelled, round after round."""
    pods = get(PATHS[0])["items"]
    out, r = [], round_
    while len(out) < BURST:
        for o in pods:
            if len(out) >= BURST:
                break
            o = dict(o, kind="Pod", apiVersion="v1")
            md = dict(o["metadata"]); md.pop("resourceVersion", None)
            md["labels"] = dict(md.get("labels") or {}, burst=str(r))
            o["metadata"] = md
            out.append(o)
        r += 1
    return out

def load_held(objs):
    """Queue the burst in the server's open watches; returns the load time."""
    ctl.call("config", hold_watches="true")
    t0 = time.monotonic()
    ctl.call("load", body=objs)
    return time.monotonic() - t0

BURST = int(sys.argv[6]) if len(sys.argv) > 6 else 50000
what = sys.argv[5]
if what == "list":
    n, s = list_all()
    print(f"{n} {s:.3f}")
elif what == "burst-agent":
    import socket
    probe = sys.argv[7]
    class UnixConn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(probe)
    agent = UnixConn("x")
    def updated():
        agent.request("GET", "/v1/k8sprobe")     # the counts, not the 10,000 items
        return json.loads(agent.getresponse().read())["resources"]["pods"]["updated"]
    base = updated()
    gen_s = load_held(burst_objects(1))
    t0 = time.monotonic()
    ctl.call("config", hold_watches="false")
    while updated() < base + BURST:
        time.sleep(0.01)  # sleep: the poll interval of a wait (it measures the burst)
    print(f"{time.monotonic() - t0:.3f} {gen_s:.3f}")
elif what == "burst-plain":
    rv = get(PATHS[0] + "&limit=1")["metadata"]["resourceVersion"]
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("GET", f"{PATHS[0]}&watch=1&resourceVersion={rv}&timeoutSeconds=600",
                 headers={"Authorization": "Bearer " + token})
    resp = conn.getresponse()  # the server registers a watch before it answers
    gen_s = load_held(burst_objects(100))
    t0 = time.monotonic()
    ctl.call("config", hold_watches="false")
    n, buf = 0, b""
    while n < BURST:
        chunk = resp.read1(1 << 20)
        if not chunk:
            break
        n += chunk.count(b"\n")
    print(f"{time.monotonic() - t0:.3f} {gen_s:.3f} {n}")
EOF
bench() { python3 "$WORK/bench.py" "$WORK" "$SERVER" "$TOKEN" "$NODE" "$@"; }

echo "== fibril k8s benchmark: $PODS pods on this node, $SERVICES services, $SLICES endpoint slices, $POLICIES network policies =="
echo "server bulk load at start: ${load_s}s (not part of any figure below)"

# ---- 1. sync time and RSS ---------------------------------------------------------
read -r ref_n ref_s < <(bench list)
mapfile -t args < <(agent_args "$mods")
rm -f "$WORK/fibril.sock"
"$AGENT" "${args[@]}" --set "k8s.kubeconfig=$WORK/kubeconfig" --set "k8s.node-name=$NODE" \
	--set k8s.resources=pods,services,endpointslices,networkpolicies --set k8s.sync-timeout=110s \
	>"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 1 1200); do
	[ -S "$WORK/fibril.sock" ] && break
	kill -0 "$AGENT_PID" 2>/dev/null || die "the agent exited: $(tail -5 "$WORK/agent.log")"
	sleep 0.1 # sleep: the poll interval of a wait with a deadline
done
status=$(api http://x/v1/status)
sync_ms=$(python3 -c 'import json,sys; print([m for m in json.loads(sys.argv[1])["modules"] if m["name"]=="k8s"][0]["timings"]["start_ms"])' "$status")
objs=$(api http://x/v1/k8s | python3 -c 'import json,sys; print(sum(r["objects"] for r in json.load(sys.stdin)["resources"]))')
rss() { awk -v k="$1" '$1 == k":" { printf "%.1f", $2 / 1024 }' "/proc/$AGENT_PID/status"; }
rss_sync=$(rss VmRSS)
hwm_sync=$(rss VmHWM)
printf '\n%-44s %10s   %s\n' "" "agent" "reference (same run)"
printf '%-44s %9.3fs   server alone serving the same LISTs to a plain client: %.3fs (%s objects)\n' \
	"sync time, $objs objects (goal < 2 s)" "$(awk -v m="$sync_ms" 'BEGIN { print m / 1000 }')" "$ref_s" "$ref_n"
printf '%-44s %8s MB   peak (VmHWM) %s MB\n' "agent RSS after sync (goal < 64 MB)" "$rss_sync" "$hwm_sync"

# ---- 2. watch event throughput ---------------------------------------------------------
read -r agent_s agent_gen < <(bench burst-agent "$BURST" "$WORK/fibril.sock")
rss_burst=$(rss VmRSS)
hwm_burst=$(rss VmHWM)
kill -TERM "$AGENT_PID"
wait "$AGENT_PID" || true
AGENT_PID=""
read -r plain_s plain_gen plain_n < <(bench burst-plain "$BURST")
printf '%-44s %7.0f/s   server alone streaming %s events to a plain client: %.0f/s (%.3fs)\n' \
	"watch events processed ($BURST pod updates)" "$(awk -v n="$BURST" -v s="$agent_s" 'BEGIN { print n / s }')" \
	"$plain_n" "$(awk -v n="$plain_n" -v s="$plain_s" 'BEGIN { print n / s }')" "$plain_s"
printf '%-44s %9.3fs   (the server took %.1fs / %.1fs to generate each burst, held)\n' \
	"  time to deliver all to a bus subscriber" "$agent_s" "$agent_gen" "$plain_gen"
printf '%-44s %8s MB   peak (VmHWM) %s MB\n' "agent RSS after the burst" "$rss_burst" "$hwm_burst"
if awk -v a="$agent_s" -v p="$plain_s" 'BEGIN { exit !(p > 0.7 * a) }'; then
	echo "note: the python server alone needs about as long as the agent: it is the bottleneck"
fi
