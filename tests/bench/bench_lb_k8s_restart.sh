#!/usr/bin/env bash
# tests/bench/bench_lb_k8s_restart.sh - kill -9 with N Kubernetes Services
# (issue 23; default N 10,000): the fake kube-apiserver holds N Services
# (clusterIP, port 80 -> targetPort 8080) and N EndpointSlices of 3 ready
# endpoints each, every endpoint a distinct address that answers (3 backend
# pods, each owning a /16 through an "any IP" local route); an agent with
# the k8s and lb modules (socket LB on the client pod's cgroup,
# tests/lib/lbtopo.sh). A prober in the client pod (lb_restart_probe.py)
# connects round-robin to the clusterIPs of PROBED Services spread over
# all N while the agent is kill -9'd and started again, RESTARTS times, and
# again RESTARTS times with the EndpointSlice list answered SLOW_LIST s late
# (the server's list_delay_endpointslices), and RESTARTS times killed twice
# (the second time once healthy, while that list runs). Each run prints connections
# attempted, refused (any failed connect), the longest one Service
# refused, the agent's time from exec to /v1/healthz 200 and to its first
# complete sync (k8s-synced), and whether every service and backend ID
# survived; then the medians (goal: 0 refused). Beside it in the same run
# the reference: the same prober with no restart (the floor, 0 expected).
# Run by `make bench` (tests/bench/run.sh) or by hand as root with
# top_srcdir/top_builddir set.
BENCH_NAME=bench_lb_k8s_restart
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/bench/bench_lib.sh"
bench_require ip nsenter python3 curl
bench_require_modules lb k8s
bench_find_agent
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require

N=${LB_RESTART_SERVICES:-10000}
PROBED=${LB_RESTART_PROBED:-200}   # Services probed, spread over all N
RATE=${LB_RESTART_RATE:-1000}      # connects a second
RESTARTS=${LB_RESTART_RUNS:-3}
SLOW_LIST=${LB_RESTART_SLOW_LIST:-5}
AFTER=${LB_RESTART_AFTER:-3}       # seconds probed after the sync
CHECK=${LB_RESTART_CHECK:-}        # set: PASS/FAIL lines, exit 1 on a refusal (tests/integration/lb_k8s_kill9.sh)
REF_S=${LB_RESTART_REF_S:-10}      # seconds of the reference run
PROBE=$top_srcdir/tests/bench/lb_restart_probe.py

LB_BACKENDS=0 # the backend pods are ours (below)
. "$top_srcdir/tests/lib/lbtopo.sh"
install -m 0644 "$top_builddir/.libs/k8s.so" "$mods/"

# ---- 3 backend pods; pod j answers on all of 10.(220+j).0.0/16 ----------------------------------
for j in 0 1 2; do
	ns=flrb$j$$
	BACKENDS+=("$ns") # lbtopo's cleanup removes it
	pod "$ns" $((10 + j))
	ip -n "$ns" route add local "10.$((220 + j)).0.0/16" dev lo
	ip -n "$NODE" route add "10.$((220 + j)).0.0/16" via "10.212.0.$((10 + j))"
	nsenter --net="/run/netns/$ns" python3 "$PROBE" serve 8080 >/dev/null 2>&1 &
	BG_PIDS+=($!)
	disown $!
done
for ns in "${BACKENDS[@]}"; do wait_listening "$ns" || bench_die "backend $ns does not listen"; done

# ---- N Services + N EndpointSlices --------------------------------------------------------------
python3 - "$N" "$PROBED" "$WORK/objects.json" "$WORK/targets" <<'PY'
import json, sys
n, probed = int(sys.argv[1]), int(sys.argv[2])
nss = 20
out = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-%d" % k}} for k in range(nss)]
def cip(i):  # inside 10.96.0.0/12
    return "10.%d.%d.%d" % (100 + i // 62500, i // 250 % 250, i % 250 + 2)
for i in range(n):
    ns = "ns-%d" % (i % nss)
    out.append({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "svc-%d" % i, "namespace": ns},
                "spec": {"type": "ClusterIP", "clusterIP": cip(i), "selector": {"app": "a%d" % i},
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}})
    out.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "svc-%d-1" % i, "namespace": ns,
                             "labels": {"kubernetes.io/service-name": "svc-%d" % i}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.%d.%d.%d" % (220 + j, i // 250 % 250, i % 250 + 2)],
                               "conditions": {"ready": True}, "nodeName": "node-0"} for j in range(3)]})
json.dump(out, open(sys.argv[3], "w"))
with open(sys.argv[4], "w") as f:
    for k in range(min(probed, n)):
        f.write("%s:80\n" % cip(k * n // min(probed, n)))
PY
# loaded after the start: k8s_start gives the server 10 s to listen, too
# little for N objects on a loaded machine
k8s_start --service-cidr 10.96.0.0/12 || bench_die "the fake apiserver did not start"
k8s_ctl --max-time 600 -H "Content-Type: application/json" --data-binary "@$WORK/objects.json" load >/dev/null ||
	bench_die "the apiserver did not load the objects"

# ---- the agent ----------------------------------------------------------------------------------
mapfile -t ARGS < <(agent_args "$mods")
ARGS+=(--set "lb.cgroup=$CG" --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=node-0
	--set k8s.sync-timeout=120s --set agent.api-max-body=67108864)
exec_agent() { # the real binary (not libtool's wrapper): $! is the agent, for kill -9
	echo "--- exec" >>"$WORK/agent.log"
	"$AGENT_BIN" "${ARGS[@]}" >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
}
healthy() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --unix-socket "$SOCK" http://x/v1/healthz)" = 200 ]; }
synced() { [ "$(api http://x/v1/service 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["k8s-synced"])' 2>/dev/null)" = True ]; }
all_programmed() {
	api http://x/v1/service 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j["k8s-synced"] and sum(1 for s in j["services"] if len(s.get("backends", [])) == 3) == int(sys.argv[1]) else 1)' "$N" 2>/dev/null
}
# every service's ID, frontend and (backend ID, address) pairs, as a digest
ids_digest() {
	api http://x/v1/service | python3 -c 'import hashlib, json, sys
s = sorted((s["id"], s["frontend"], sorted((b["id"], b["address"]) for b in s.get("backends", [])))
           for s in json.load(sys.stdin)["services"])
print(len(s), hashlib.sha256(repr(s).encode()).hexdigest()[:16])'
}
ms_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%d", (b - a) * 1000}'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'; }
prober_start() {
	nsenter --net="/run/netns/$CLIENT" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" \
		python3 "$PROBE" probe "$WORK/targets" "$RATE" >"$WORK/probe.out" 2>"$WORK/probe.err" &
	PROBER_PID=$!
	BG_PIDS+=("$PROBER_PID")
}
prober_stop() { # -> its JSON summary in PROBE_JSON
	kill -TERM "$PROBER_PID"
	wait "$PROBER_PID" 2>/dev/null || true
	PROBE_JSON=$(cat "$WORK/probe.out")
	[ -n "$PROBE_JSON" ] || bench_die "the prober printed nothing: $(cat "$WORK/probe.err")"
}
pj() { jq_ "$PROBE_JSON" "j['$1']"; }

T0=$(date +%s.%N)
exec_agent
wait_alive "$AGENT_PID" 300 all_programmed || bench_die "lb did not program $N services: $(tail -5 "$WORK/agent.log")"
echo "lb: kill -9 with $N Kubernetes Services (tests/bench/bench_lb_k8s_restart.sh; this machine's load: $(cut -d' ' -f1-3 /proc/loadavg))"
echo "   first start: all $N programmed with 3 backends in $(ms_since "$T0") ms; probing $PROBED of them, $RATE connects/s"
IDS=$(ids_digest)

# ---- the reference: no restart --------------------------------------------------------------------
prober_start
sleep "$REF_S" # sleep: the reference run's length
prober_stop
printf '   reference, no restart, %ss: %s attempted, %s refused, longest %s ms (the floor: 0)\n' \
	"$REF_S" "$(pj attempted)" "$(pj refused)" "$(pj longest_ms)"
[ -z "$CHECK" ] || check "the reference (no restart): every connection served, $(pj attempted) attempted" \
	test "$(pj refused)" = 0 -a "$(pj attempted)" -gt 0

# restart_runs LABEL [twice] : RESTARTS kill -9 + exec, the prober running;
# twice: the restarted agent is killed again once healthy, while it lists
# (a crash loop), and the times are from the second exec
restart_runs() {
	local label=$1 twice=${2:-} r t0 ready synced_ms same refused=() longest=() readys=() syncs=() kept=0
	for r in $(seq 1 "$RESTARTS"); do
		prober_start
		sleep 1 # sleep: the prober's first second, before the kill
		kill -KILL "$AGENT_PID"
		wait "$AGENT_PID" 2>/dev/null || true
		if [ -n "$twice" ]; then
			exec_agent
			wait_alive "$AGENT_PID" 120 healthy || bench_die "the agent is not healthy: $(tail -5 "$WORK/agent.log")"
			! synced || bench_die "the agent synced before its second kill: the list is not slow enough"
			kill -KILL "$AGENT_PID"
			wait "$AGENT_PID" 2>/dev/null || true
		fi
		t0=$(date +%s.%N)
		exec_agent
		wait_alive "$AGENT_PID" 120 healthy || bench_die "the agent is not healthy: $(tail -5 "$WORK/agent.log")"
		ready=$(ms_since "$t0")
		wait_alive "$AGENT_PID" 300 synced || bench_die "the agent did not sync: $(tail -5 "$WORK/agent.log")"
		synced_ms=$(ms_since "$t0")
		wait_alive "$AGENT_PID" 120 all_programmed || bench_die "not all $N programmed after the sync"
		sleep "$AFTER" # sleep: probes go on after the sync, while the events replace the restored state
		prober_stop
		same=no
		[ "$(ids_digest)" = "$IDS" ] && same=yes && kept=$((kept + 1))
		printf '   %s, restart %d: %s attempted, %s refused (%s of %s Services), longest %s ms; healthz 200 after %s ms, synced after %s ms; every service and backend ID kept: %s\n' \
			"$label" "$r" "$(pj attempted)" "$(pj refused)" "$(pj refused_targets)" "$(pj targets)" \
			"$(pj longest_ms)" "$ready" "$synced_ms" "$same"
		refused+=("$(pj refused)") longest+=("$(pj longest_ms)") readys+=("$ready") syncs+=("$synced_ms")
		if [ -n "$CHECK" ]; then
			check "$label, restart $r: no connection refused ($(pj attempted) attempted)" \
				test "$(pj refused)" = 0 -a "$(pj attempted)" -gt 0
			check "$label, restart $r: every service and backend ID kept" test "$same" = yes
		fi
	done
	printf '   %s, median of %d: %s refused (goal: 0), longest refusal %s ms, healthz 200 after %s ms, synced after %s ms; IDs kept in %d of %d\n' \
		"$label" "$RESTARTS" "$(printf '%s\n' "${refused[@]}" | median)" "$(printf '%s\n' "${longest[@]}" | median)" \
		"$(printf '%s\n' "${readys[@]}" | median)" "$(printf '%s\n' "${syncs[@]}" | median)" "$kept" "$RESTARTS"
}
restart_runs "kill -9"
# the server's delay is per LIST request: spread SLOW_LIST over the pages
# the agent's EndpointSlice list took at its last start
pages=$(k8s_agent_requests list endpointslices)
pages=$(((pages + RESTARTS) / (RESTARTS + 1)))
[ "$pages" -ge 1 ] || pages=1
k8s_ctl "config?list_delay_endpointslices=$(awk -v s="$SLOW_LIST" -v p="$pages" 'BEGIN {printf "%.3f", s / p}')" >/dev/null ||
	bench_die "cannot slow the EndpointSlice list"
restart_runs "kill -9, EndpointSlices listed ${SLOW_LIST} s late ($pages pages)"
restart_runs "kill -9 twice, the second while the slow list runs" twice
k8s_ctl "config?list_delay_endpointslices=0" >/dev/null
[ -z "$CHECK" ] || finish
