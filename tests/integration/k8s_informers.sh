#!/usr/bin/env bash
# tests/integration/k8s_informers.sh - the k8s module against the fake API
# server (tests/k8s/apiserver.py): paged LIST then WATCH, the agent's cache
# compared object by object with the server's after every fault (watches
# dropped mid-stream, a watch ERROR 410, an expired resourceVersion answered
# with HTTP 410, a history restart, the server paused for 10 s), events
# counted so each change is delivered exactly once, the start failing when
# the caches cannot sync, and a start/stop under valgrind.
. "$top_srcdir/tests/lib/common.sh"

for tool in python3 curl pkg-config; do
	command -v "$tool" >/dev/null || { echo "SKIP: $tool missing"; exit 77; }
done
if [ "$(id -u)" != 0 ]; then # the agent only loads root-owned modules
	[ "${CI:-}" = true ] && { echo "FAIL: CI runs as root; not skipping"; exit 1; }
	echo "SKIP: run as root"
	exit 77
fi

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
K8S_SO=${K8S_SO:-$top_builddir/.libs/k8s.so}
if [ -f "$K8S_SO" ]; then
	install -m 0644 "$K8S_SO" "$mods/k8s.so"
else # not in the build yet: compile it here
	# shellcheck disable=SC2046
	$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Wformat=2 -Wshadow \
		-Wstrict-prototypes -Wmissing-prototypes -Werror -Wno-unused-parameter -D_GNU_SOURCE \
		-I"$top_srcdir/sdk/include" $(pkg-config --cflags libcurl json-c yaml-0.1) \
		-o "$WORK/k8s.so" "$top_srcdir"/modules/k8s/*.c -L"$top_builddir/.libs" -lfibril \
		$(pkg-config --libs libcurl json-c yaml-0.1)
	install -m 0644 "$WORK/k8s.so" "$mods/k8s.so"
fi

# k8sprobe (tests/modules/k8sprobe.c): a consumer of the "k8s" capability
# that rebuilds each resource from the bus events alone and counts events
# that cannot be right (a change delivered twice, an ADDED for an object it
# has, an UPDATED/DELETED for one it has not, a malformed payload); it can
# also watch/wait for resources and annotate the node in its start.
# shellcheck disable=SC2046,SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
	-Wno-unused-parameter ${SAN_CFLAGS:-} -I"$top_srcdir/sdk/include" $(pkg-config --cflags json-c) \
	-o "$WORK/k8sprobe.so" "$top_srcdir/tests/modules/k8sprobe.c" \
	-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
install -m 0644 "$WORK/k8sprobe.so" "$mods/k8sprobe.so"

# ---- the API server ---------------------------------------------------------
TOKEN=t0ken-$$
cp "$top_srcdir/tests/k8s/apiserver.py" "$top_srcdir/tests/k8s/apiserver_crd.py" "$WORK/"
# start_server [args] : the API server on $PORT (0 at first: a free port)
start_server() {
	python3 "$WORK/apiserver.py" --port "${PORT:-0}" --token "$TOKEN" --bookmark-interval 1 "$@" \
		>"$WORK/api.out" 2>>"$WORK/api.err" &
	API_PID=$!
	wait_alive "$API_PID" 10 grep -q LISTENING "$WORK/api.out" || true
	PORT=$(awk '/LISTENING/ {print $2; exit}' "$WORK/api.out")
	[ -n "$PORT" ] || { echo "FAIL: the API server did not start"; cat "$WORK/api.err"; exit 1; }
}
PORT=0
start_server
SERVER=http://127.0.0.1:$PORT
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: test
clusters:
- name: fake
  cluster:
    server: $SERVER
contexts:
- name: test
  context:
    cluster: fake
    user: tester
users:
- name: tester
  user:
    token: $TOKEN
EOF

kapi() { curl -sS --max-time 20 -H "Authorization: Bearer $TOKEN" "$@"; }
control() { curl -sS --max-time 20 -X POST "$SERVER/_control/$1" >/dev/null; }
NODE=node-a
# expected deliveries per resource: added updated deleted
declare -A ADDED=([pods]=0 [services]=0 [nodes]=0) UPDATED=([pods]=0 [services]=0 [nodes]=0) \
	DELETED=([pods]=0 [services]=0 [nodes]=0)

create_pod() { # NAME NODE
	kapi -X POST -H 'Content-Type: application/json' "$SERVER/api/v1/namespaces/default/pods" \
		-d "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}" >/dev/null
	[ "$2" = "$NODE" ] && ADDED[pods]=$((ADDED[pods] + 1))
	return 0
}
create_svc() { # NAME
	kapi -X POST -H 'Content-Type: application/json' "$SERVER/api/v1/namespaces/default/services" \
		-d "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"ports\":[{\"port\":80}]}}" >/dev/null
	ADDED[services]=$((ADDED[services] + 1))
}
label_svc() { # NAME VALUE
	kapi -X PATCH -H 'Content-Type: application/merge-patch+json' \
		"$SERVER/api/v1/namespaces/default/services/$1" -d "{\"metadata\":{\"labels\":{\"v\":\"$2\"}}}" >/dev/null
	UPDATED[services]=$((UPDATED[services] + 1))
}
delete_svc() {
	kapi -X DELETE "$SERVER/api/v1/namespaces/default/services/$1" >/dev/null
	DELETED[services]=$((DELETED[services] + 1))
}
delete_pod() {
	kapi -X DELETE "$SERVER/api/v1/namespaces/default/pods/$1" >/dev/null
	DELETED[pods]=$((DELETED[pods] + 1))
}

# same_cache RESOURCE : the agent's cache equals the server's (namespace, name, resourceVersion)
same_cache() {
	local res=$1 sel=""
	case $res in
	pods) sel="?fieldSelector=spec.nodeName%3D$NODE" ;;
	nodes) sel="?fieldSelector=metadata.name%3D$NODE" ;;
	esac
	kapi "$SERVER/api/v1/$res$sel" >"$WORK/server.json" || return 1
	api "http://x/v1/k8s/$res" >"$WORK/agent.json" || return 1
	python3 - "$WORK/server.json" "$WORK/agent.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); a = json.load(open(sys.argv[2]))
want = {(o["metadata"].get("namespace", ""), o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in s["items"]}
have = {(o["namespace"], o["name"], o["resourceVersion"]) for o in a["items"]}
if want != have or not a["synced"]:
    print("  server only:", sorted(want - have)[:5], "agent only:", sorted(have - want)[:5], "synced:", a["synced"])
    sys.exit(1)
EOF
}
# counts_ok RESOURCE : published and delivered events equal the changes made
counts_ok() {
	local res=$1
	api "http://x/v1/k8s/$res" >"$WORK/agent.json" || return 1
	python3 - "$WORK/agent.json" "${ADDED[$res]}" "${UPDATED[$res]}" "${DELETED[$res]}" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1])); want = {"added": int(sys.argv[2]), "updated": int(sys.argv[3]), "deleted": int(sys.argv[4])}
if a["published"] != want or a["delivered"] != want:
    print("  want", want, "published", a["published"], "delivered", a["delivered"]); sys.exit(1)
EOF
}
# probe_same RESOURCE : what the handlers saw (k8sprobe's copy, rebuilt from
# the bus events alone) equals the server's state, and no event was one that
# cannot be right (the same change twice, ADDED of a known object, ...)
probe_same() {
	local res=$1 sel=""
	case $res in
	pods) sel="?fieldSelector=spec.nodeName%3D$NODE" ;;
	nodes) sel="?fieldSelector=metadata.name%3D$NODE" ;;
	esac
	kapi "$SERVER/api/v1/$res$sel" >"$WORK/server-p.json" || return 1
	api "http://x/v1/k8sprobe/$res" >"$WORK/probe.json" || return 1
	python3 - "$WORK/server-p.json" "$WORK/probe.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
want = {(o["metadata"].get("namespace", ""), o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in s["items"]}
have = {(o["namespace"], o["name"], o["resourceVersion"]) for o in p["items"]}
if want != have or p["violations"]:
    print("  server only:", sorted(want - have)[:5], "handlers only:", sorted(have - want)[:5],
          "violations:", p["violations"], p["last_violation"])
    sys.exit(1)
EOF
}
all_consistent() {
	local r
	for r in pods services nodes; do
		same_cache "$r" >/dev/null && counts_ok "$r" >/dev/null && probe_same "$r" >/dev/null || return 1
	done
}
# watched RESOURCE... : the server holds an open watch of each (none a fault is ending)
watched() {
	curl -sS --max-time 5 "$SERVER/_control/stats" | python3 -c 'import json, sys
w = json.load(sys.stdin)["openWatchesByResource"]
sys.exit(0 if all(w.get(r, 0) >= 1 for r in sys.argv[1:]) else 1)' "$@"
}
# relisted RESOURCE N : RESOURCE was listed again since it counted N relists
relisted() { [ "$(res_field "$1" relists)" -gt "$2" ]; }
# service_lists : the LIST requests of services the agent made (the server's record)
service_lists() {
	local n
	n=$(grep -c '^list core services$' "$FIBRIL_K8S_REQUEST_LOG_DIR/requests-$API_PID.log" 2>/dev/null) || true
	echo "${n:-0}"
}
lists_past() { [ "$(service_lists)" -gt "$1" ]; }
# verify WHAT : wait for the caches to converge, then check and explain
verify() {
	wait_for 20 all_consistent || true
	local r
	for r in pods services nodes; do
		check "$1: $r cache equals the server's" same_cache "$r"
		check "$1: $r events delivered exactly once" counts_ok "$r"
		check "$1: $r as the handlers saw it equals the server's, no change twice" probe_same "$r"
	done
}
jfield() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
res_field() { api "http://x/v1/k8s/$1" | jfield "j[\"$2\"]"; }
healthz() { api -o /dev/null -w '%{http_code}' http://x/v1/healthz; }

# ---- objects before the agent starts (LIST in pages of 7) ---------------------
kapi -X POST -H 'Content-Type: application/json' "$SERVER/api/v1/nodes" \
	-d "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$NODE\"}}" >/dev/null
kapi -X POST -H 'Content-Type: application/json' "$SERVER/api/v1/nodes" \
	-d '{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-b"}}' >/dev/null
ADDED[nodes]=1
for i in $(seq 1 20); do create_svc "svc-$i"; done
for i in $(seq 1 9); do create_pod "pod-a$i" "$NODE"; create_pod "pod-b$i" node-b; done

# shellcheck disable=SC2054
K8S_ARGS=(--set "k8s.kubeconfig=$WORK/kubeconfig" --set "k8s.node-name=$NODE"
	--set k8s.resources=pods,services,nodes --set k8s.page-size=7)
start_agent "$mods" "${K8S_ARGS[@]}"
check "the start waited for the first lists" grep -q 'services synced: 20 objects' "$WORK/agent.log"
status=$(api http://x/v1/k8s)
check "/v1/k8s lists the three resources, synced and watching" \
	python3 -c 'import json,sys; j=json.loads(sys.argv[1]); r=j["resources"]; sys.exit(0 if sorted(x["name"] for x in r)==["nodes","pods","services"] and all(x["synced"] and x["watching"] for x in r) else 1)' "$status"
check "pods are only this node's (9)" [ "$(res_field pods objects)" = 9 ]
check "nodes is only this node" [ "$(res_field nodes objects)" = 1 ]
check "healthz 200 once synced" [ "$(healthz)" = 200 ]
verify "initial list (paged)"

# ---- watch: changes arrive once ----------------------------------------------
create_svc svc-new; label_svc svc-1 one; delete_svc svc-2; create_pod pod-a10 "$NODE"
create_pod pod-b10 node-b; delete_pod pod-a1
verify "watch events"

# ---- fault: watches dropped mid-stream -----------------------------------------
control drop-watches
check "drop-watches: the agent watches the three again" wait_for 10 watched pods services nodes
create_svc svc-d1; label_svc svc-3 drop; delete_pod pod-a2
verify "after drop-watches"
check "drop-watches: no relist (resumed from the last resourceVersion)" [ "$(res_field services relists)" = 0 ]

# ---- fault: watch ERROR 410 -> relist ------------------------------------------
control "watch-error?resource=services&code=410"
create_svc svc-e1; label_svc svc-4 err
verify "after a watch ERROR 410"
check "ERROR 410 event logged" grep -q "watch services: watch ERROR 410" "$WORK/agent.log"
check "ERROR 410: services relisted" [ "$(res_field services relists)" -ge 1 ]

# ---- fault: expired resourceVersion answered with HTTP 410 -----------------------
# no bookmarks, so the pods watch stays at its last pod while the store moves on
control "config?bookmark_interval=3600"
control "drop-watches?resource=pods"
wait_for 10 watched pods || fail "the agent watches the pods again"
create_svc svc-x1
control "expire?resource=pods&mode=http"
control "drop-watches?resource=pods"
wait_for 10 grep -q "watch pods: .*expired; relisting" "$WORK/agent.log" || true
create_pod pod-a11 "$NODE"; delete_pod pod-a3
control "config?bookmark_interval=1"
verify "after expire (HTTP 410)"
check "expire: the watch got HTTP 410 and relisted" grep -q "watch pods: .*expired; relisting" "$WORK/agent.log"
check "expire: pods relisted" [ "$(res_field pods relists)" -ge 1 ]

# ---- fault: a watch cut in the middle of a burst of events ---------------------------
before=$(res_field services relists)
control "drop-watches?resource=services&after=5"
for i in $(seq 1 20); do create_svc "svc-burst-$i"; done
verify "after a watch cut mid-burst"
check "mid-burst cut: resumed from the last resourceVersion, no relist" \
	[ "$(res_field services relists)" = "$before" ]

# ---- fault: the history restarts (every watch dropped, every rv too old) -----------
before=$(res_field nodes relists)
before_pods=$(res_field pods relists) before_services=$(res_field services relists)
control restart-history
wait_for 10 relisted nodes "$before" || true
wait_for 10 relisted pods "$before_pods" || true
wait_for 10 relisted services "$before_services" || true
create_svc svc-r1; label_svc svc-5 restart; delete_svc svc-6
verify "after restart-history"
check "restart-history: nodes relisted" [ "$(res_field nodes relists)" -gt "$before" ]

# ---- fault: the server paused 10 s -------------------------------------------------
control "pause?seconds=10"
paused_seen() { [ "$(healthz)" = 503 ] && api http://x/v1/healthz | grep -q "retrying in"; }
wait_for 3 paused_seen || true # (within 3 s of the pause)
check "paused: healthz 503" [ "$(healthz)" = 503 ]
health=$(api http://x/v1/healthz || true)
check "paused: health names the watch and the retry" contains "$health" "retrying in"
wait_for 30 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $TOKEN' $SERVER/api/v1/nodes)\" = 200 ]" || true
create_svc svc-p1; label_svc svc-7 pause; create_pod pod-a12 "$NODE"
verify "after a 10 s pause"
check "after the pause: healthz 200" wait_for 40 bash -c '[ "$(curl -s -o /dev/null -w "%{http_code}" --unix-socket '"$WORK"'/fibril.sock http://x/v1/healthz)" = 200 ]'
summary=$(api http://x/v1/status || true)
check "status summary counts resources and objects" contains "$summary" "3 resources synced"

# ---- many objects: LIST pages of 500 on a relist ----------------------------------
python3 - "$WORK/load.json" <<'EOF'
import json, sys
items = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bulk-%d" % i, "namespace": "default"},
          "spec": {"ports": [{"port": 80}]}} for i in range(600)]
json.dump({"items": items}, open(sys.argv[1], "w"))
EOF
curl -sS -X POST -H 'Content-Type: application/json' --data-binary @"$WORK/load.json" \
	"$SERVER/_control/load" >/dev/null
ADDED[services]=$((ADDED[services] + 600))
verify "600 objects loaded"
control "watch-error?resource=services&code=410"
verify "relist of 600+ objects in pages"

# ---- the server pages every LIST itself (max_page below the client's limit) ----------
reqs_before=$(curl -sS "$SERVER/_control/stats" | jfield 'j["requests"]')
before=$(res_field services relists)
control "config?max_page=3"
control "watch-error?resource=services&code=410"
relisted() { [ "$(res_field services relists)" -gt "$1" ]; }
wait_for 30 relisted "$before" || true
control "config?max_page=0"
verify "a relist served by the server in pages of 3"
reqs=$(curl -sS "$SERVER/_control/stats" | jfield 'j["requests"]')
check "pages of 3: 200+ LIST requests for 620+ services" [ $((reqs - reqs_before)) -ge 200 ]

# ---- a continue token that expires in the middle of a paged LIST -----------------------
before=$(res_field services relists)
control "config?list_delay=0.3"
control "watch-error?resource=services&code=410"
# the relist may wait out its backoff first (forced relists within 2 min)
services_listing() { [ "$(res_field services phase)" = listing ]; }
lists0=$(service_lists)
wait_for 40 services_listing || true
wait_for 10 lists_past $((lists0 + 2)) || true # a few pages of 7 into the relist
create_svc svc-midlist
control "expire?resource=services&mode=event"
check "continue token expired mid-list: the list starts again" \
	wait_for 20 grep -q "list services: continue token expired; listing again" "$WORK/agent.log"
control "config?list_delay=0"
verify "a continue token expired mid-list"
check "the restarted list counts as one relist" [ "$(res_field services relists)" = $((before + 1)) ]

# ---- fault: the API server restarts with a new resourceVersion history --------------------
# (its etcd restored from a backup: fewer objects, resourceVersions counting
# from 1 again, far below the agent's: a watch from the agent's rv gets
# "Too large resource version" and the informer must relist, not wait)
for r in pods services nodes; do
	api "http://x/v1/k8s/$r" >"$WORK/before-$r.json"
	kapi "$SERVER/api/v1/$r" >"$WORK/all-$r.json"
done
python3 - "$WORK" >"$WORK/restore.json" <<'EOF'
import json, sys
w = sys.argv[1]
kinds = {"pods": "Pod", "services": "Service", "nodes": "Node"}
out = []
for res, kind in kinds.items():
    for o in json.load(open(f"{w}/all-{res}.json"))["items"]:
        name = o["metadata"]["name"]
        if res == "services" and (name.startswith("bulk-") or name in ("svc-8", "svc-9")):
            continue                      # gone in the restored state
        if res == "pods" and name == "pod-a4":
            continue
        o["kind"], o["apiVersion"] = kind, "v1"
        for f in ("resourceVersion", "uid", "creationTimestamp"):
            o["metadata"].pop(f, None)
        out.append(o)
out.append({"kind": "Service", "apiVersion": "v1",
            "metadata": {"name": "svc-restored", "namespace": "default"},
            "spec": {"ports": [{"port": 80}]}})
json.dump(out, sys.stdout)
EOF
kill "$API_PID" 2>/dev/null || true
wait "$API_PID" 2>/dev/null || true
rm -f "$WORK/api.out"
start_server --load "$WORK/restore.json"
new_rv=$(curl -sS "$SERVER/_control/stats" | jfield 'j["resourceVersion"]')
check "the restarted server's resourceVersion ($new_rv) is below the agent's" \
	[ "$new_rv" -lt "$(res_field services resource_version)" ]
# the events the relist owes: the diff of the agent's cache and the new state
for r in pods services nodes; do
	sel=""
	case $r in
	pods) sel="?fieldSelector=spec.nodeName%3D$NODE" ;;
	nodes) sel="?fieldSelector=metadata.name%3D$NODE" ;;
	esac
	kapi "$SERVER/api/v1/$r$sel" >"$WORK/after-$r.json"
	read -r a u d < <(python3 - "$WORK/before-$r.json" "$WORK/after-$r.json" <<'EOF'
import json, sys
b = {(o["namespace"], o["name"]): o["resourceVersion"] for o in json.load(open(sys.argv[1]))["items"]}
a = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
     for o in json.load(open(sys.argv[2]))["items"]}
print(len(a.keys() - b.keys()), sum(1 for k in a.keys() & b.keys() if a[k] != b[k]), len(b.keys() - a.keys()))
EOF
)
	ADDED[$r]=$((ADDED[$r] + a)) UPDATED[$r]=$((UPDATED[$r] + u)) DELETED[$r]=$((DELETED[$r] + d))
done
verify "after the API server restarted with a new resourceVersion history"
check "restart: the watch from an rv the server has not reached relisted" \
	grep -q "Too large resource version.*relisting" "$WORK/agent.log"
rc=0
stop_agent TERM || rc=$?
check "stop: exit 0 (got $rc)" [ "$rc" = 0 ] || tail -n 40 "$WORK/agent.log"

# ---- a consumer module: watch_resource, wait_synced, get, annotate_node, payloads ----
start_agent "$mods" "${K8S_ARGS[@]}" --set k8sprobe.wait=namespaces \
	--set k8sprobe.annotate=fibril.io/probe=yes
probe_is() { api http://x/v1/k8sprobe | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if eval(sys.argv[1]) else 1)' "$1"; }
check "probe: namespaces synced for the consumer" wait_for 10 probe_is 'j["synced_err"] == 0 and j["get_default"]'
kapi -X POST -H 'Content-Type: application/json' "$SERVER/api/v1/namespaces" \
	-d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"probe-ns"}}' >/dev/null
kapi -X PATCH -H 'Content-Type: application/merge-patch+json' "$SERVER/api/v1/namespaces/probe-ns" \
	-d '{"metadata":{"labels":{"a":"b"}}}' >/dev/null
kapi -X DELETE "$SERVER/api/v1/namespaces/probe-ns" >/dev/null
nsn=$(kapi "$SERVER/api/v1/namespaces" | jfield 'len(j["items"])')
check "probe: payload offsets valid in every event" wait_for 10 probe_is "j['bad_events'] == 0 and j['events'] >= $nsn + 2"
check "probe: node annotated (merge patch)" wait_for 10 probe_is 'j["annotated"] == 0'
ann=$(kapi "$SERVER/api/v1/nodes/$NODE" | jfield 'j["metadata"].get("annotations", {}).get("fibril.io/probe")')
check "probe: the annotation is on the Node" [ "$ann" = yes ]
check "probe: stop exit 0" stop_agent TERM

# ---- the start fails when the caches do not sync -----------------------------------
# a server that does not answer: a port nobody listens on (not a paused
# server: its pause could end before a slow start, valgrind's, tries it)
DOWN_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|server: .*|server: http://127.0.0.1:$DOWN_PORT|" "$WORK/kubeconfig" >"$WORK/kubeconfig-down"
DOWN_ARGS=(--set "k8s.kubeconfig=$WORK/kubeconfig-down" --set "k8s.node-name=$NODE"
	--set k8s.resources=pods,services,nodes --set k8s.page-size=7)
run_agent "$mods" "${DOWN_ARGS[@]}" --set k8s.sync-timeout=2s
check "unsynced start: exit 1" [ "$RC" = 1 ]
check "unsynced start: names the resources, each with its last error" \
	python3 -c 'import re,sys; sys.exit(0 if re.search(r"k8s: caches not synced within 2s: nodes \(.*connect.*\), pods \(.*\), services \(.*\)", sys.argv[1]) else 1)' "$OUT"

# ---- a start that fails: bad kubeconfig; unsynced caches under valgrind ----------
run_agent "$mods" --set "k8s.kubeconfig=$WORK/missing.yaml" --set "k8s.node-name=$NODE"
check "missing kubeconfig: exit 1 naming the file" contains "$OUT" "kubeconfig $WORK/missing.yaml: No such file"
printf 'current-context: nope\ncontexts: []\n' >"$WORK/kubeconfig-bad"
run_agent "$mods" --set "k8s.kubeconfig=$WORK/kubeconfig-bad" --set "k8s.node-name=$NODE"
check "kubeconfig without its context: exit 1" contains "$OUT" 'no context "nope"'
if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "NOTE: sanitizer build: valgrind runs in the plain build"
elif ! command -v valgrind >/dev/null; then
	if [ "${CI:-}" = true ]; then fail "valgrind is not installed"; else echo "NOTE: no valgrind"; fi
else
	mapfile -t args < <(agent_args "$mods")
	rc=0
	valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--log-file="$WORK/vg-fail.log" "$AGENT" "${args[@]}" "${DOWN_ARGS[@]}" \
		--set k8s.sync-timeout=2s >"$WORK/agent-fail.log" 2>&1 || rc=$?
	check "valgrind: an unsynced start exits 1, clean" [ "$rc" = 1 ] || tail -40 "$WORK/vg-fail.log"
fi

# ---- TLS: kubeconfig with certificate-authority-data; in-cluster service account ----
if command -v openssl >/dev/null; then
	mkdir -p "$WORK/tls" "$WORK/sa"
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=fake-apiserver \
		-addext "subjectAltName=IP:127.0.0.1" -keyout "$WORK/tls/server.key" \
		-out "$WORK/tls/server.pem" 2>/dev/null
	# a client CA and a client certificate it signed; another from an unknown CA
	for ca in client-ca other-ca; do
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
			-subj "/CN=$ca" -keyout "$WORK/tls/$ca.key" -out "$WORK/tls/$ca.pem" 2>/dev/null
	done
	for c in agent:client-ca stranger:other-ca; do
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-subj "/CN=system:node:${c%%:*}" -keyout "$WORK/tls/${c%%:*}.key" \
			-out "$WORK/tls/${c%%:*}.csr" 2>/dev/null
		openssl x509 -req -in "$WORK/tls/${c%%:*}.csr" -CA "$WORK/tls/${c#*:}.pem" \
			-CAkey "$WORK/tls/${c#*:}.key" -CAcreateserial -days 1 \
			-out "$WORK/tls/${c%%:*}.pem" 2>/dev/null
	done
	python3 "$WORK/apiserver.py" --port 0 --token "$TOKEN" --tls-cert "$WORK/tls/server.pem" \
		--tls-key "$WORK/tls/server.key" --client-ca "$WORK/tls/client-ca.pem" \
		>"$WORK/api-tls.out" 2>"$WORK/api-tls.err" &
	TLS_PID=$!
	wait_alive "$TLS_PID" 10 grep -q LISTENING "$WORK/api-tls.out" || true
	TPORT=$(awk '/LISTENING/ {print $2; exit}' "$WORK/api-tls.out")
	curl -sS --cacert "$WORK/tls/server.pem" -H "Authorization: Bearer $TOKEN" -X POST \
		-H 'Content-Type: application/json' "https://127.0.0.1:$TPORT/api/v1/nodes" \
		-d "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$NODE\"}}" >/dev/null
	sed -e "s|server: .*|server: https://127.0.0.1:$TPORT|" "$WORK/kubeconfig" >"$WORK/kubeconfig-tls"
	CA64=$(base64 -w0 <"$WORK/tls/server.pem")
	sed -i "s|^    server: \(.*\)|    server: \1\n    certificate-authority-data: $CA64|" "$WORK/kubeconfig-tls"
	start_agent "$mods" --set "k8s.kubeconfig=$WORK/kubeconfig-tls" --set "k8s.node-name=$NODE" \
		--set k8s.resources=nodes --set k8s.sync-timeout=5s
	check "TLS (certificate-authority-data): nodes synced" [ "$(res_field nodes objects)" = 1 ]
	stop_agent TERM || true
	# without the CA the server is not trusted: TLS is verified by default
	grep -v certificate-authority-data "$WORK/kubeconfig-tls" >"$WORK/kubeconfig-noca"
	run_agent "$mods" --set "k8s.kubeconfig=$WORK/kubeconfig-noca" --set "k8s.node-name=$NODE" \
		--set k8s.resources=nodes --set k8s.sync-timeout=3s
	check "TLS without the CA: start fails naming nodes" contains "$OUT" "caches not synced within 3s: nodes"
	check "TLS without the CA: the certificate error is logged" contains "$OUT" "certificate"
	# client certificates instead of a token: files (relative to the
	# kubeconfig, as kubectl resolves them), then inline -data
	TURL=https://127.0.0.1:$TPORT
	tapi() { curl -sS --max-time 20 --cacert "$WORK/tls/server.pem" -H "Authorization: Bearer $1" "${@:2}"; }
	cat >"$WORK/tls/kubeconfig-cert" <<EOF
apiVersion: v1
kind: Config
current-context: c
clusters: [{name: f, cluster: {server: "$TURL", certificate-authority: server.pem}}]
contexts: [{name: c, context: {cluster: f, user: agent}}]
users: [{name: agent, user: {client-certificate: agent.pem, client-key: agent.key}}]
EOF
	code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$WORK/tls/server.pem" "$TURL/api/v1/nodes")
	check "client certs: without a token or a certificate the server answers 401" [ "$code" = 401 ]
	start_agent "$mods" --set "k8s.kubeconfig=$WORK/tls/kubeconfig-cert" --set "k8s.node-name=$NODE" \
		--set k8s.resources=nodes --set k8s.sync-timeout=5s
	check "kubeconfig with client-certificate/client-key files: nodes synced" [ "$(res_field nodes objects)" = 1 ]
	stop_agent TERM || true
	cat >"$WORK/kubeconfig-certdata" <<EOF
apiVersion: v1
kind: Config
current-context: c
clusters: [{name: f, cluster: {server: "$TURL", certificate-authority-data: $CA64}}]
contexts: [{name: c, context: {cluster: f, user: agent}}]
users: [{name: agent, user: {client-certificate-data: $(base64 -w0 <"$WORK/tls/agent.pem"), client-key-data: $(base64 -w0 <"$WORK/tls/agent.key")}}]
EOF
	start_agent "$mods" --set "k8s.kubeconfig=$WORK/kubeconfig-certdata" --set "k8s.node-name=$NODE" \
		--set k8s.resources=nodes --set k8s.sync-timeout=5s
	check "kubeconfig with client-certificate-data/client-key-data: nodes synced" [ "$(res_field nodes objects)" = 1 ]
	stop_agent TERM || true
	sed -e 's/agent\.pem/stranger.pem/; s/agent\.key/stranger.key/' "$WORK/tls/kubeconfig-cert" \
		>"$WORK/tls/kubeconfig-stranger"
	run_agent "$mods" --set "k8s.kubeconfig=$WORK/tls/kubeconfig-stranger" --set "k8s.node-name=$NODE" \
		--set k8s.resources=nodes --set k8s.sync-timeout=3s
	check "a client certificate from an unknown CA: the start fails naming nodes" \
		contains "$OUT" "caches not synced within 3s: nodes"
	# in-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account dir
	printf '%s\n' "$TOKEN" >"$WORK/sa/token"
	cp "$WORK/tls/server.pem" "$WORK/sa/ca.crt"
	KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=$TPORT KUBECONFIG='' \
		start_agent "$mods" --set "k8s.serviceaccount-dir=$WORK/sa" --set "k8s.node-name=$NODE" \
		--set k8s.resources=nodes --set k8s.sync-timeout=5s
	check "in-cluster (service account token + ca.crt): nodes synced" [ "$(res_field nodes objects)" = 1 ]
	check "in-cluster: the server is the service's" contains "$(api http://x/v1/k8s)" "https:\/\/127.0.0.1:$TPORT"
	# the token rotates (kubelet rewrites the projected file; the server stops
	# taking the old one and cuts the watches): the agent carries on with the new one
	NEWTOKEN=rotated-$$-$RANDOM
	printf '%s\n' "$NEWTOKEN" >"$WORK/sa/.token.new"
	mv "$WORK/sa/.token.new" "$WORK/sa/token"
	curl -sS --cacert "$WORK/tls/server.pem" -X POST "$TURL/_control/token?value=$NEWTOKEN&drop=1" >/dev/null
	code=$(tapi "$TOKEN" -o /dev/null -w '%{http_code}' "$TURL/api/v1/nodes")
	check "rotation: the old token is refused now (401)" [ "$code" = 401 ]
	tapi "$NEWTOKEN" -X PATCH -H 'Content-Type: application/merge-patch+json' \
		"$TURL/api/v1/nodes/$NODE" -d '{"metadata":{"labels":{"rotated":"yes"}}}' >/dev/null
	want_rv=$(tapi "$NEWTOKEN" "$TURL/api/v1/nodes/$NODE" | jfield 'j["metadata"]["resourceVersion"]')
	node_rv_is() { [ "$(api http://x/v1/k8s/nodes | jfield 'j["items"][0]["resourceVersion"] if j["items"] else ""')" = "$1" ]; }
	check "rotation: the agent re-read the token file and saw the change" wait_for 20 node_rv_is "$want_rv"
	check "rotation: the nodes watch is up again" wait_for 10 bash -c \
		"curl -sS --unix-socket $WORK/fibril.sock http://x/v1/k8s/nodes | grep -q '\"watching\":true'"
	stop_agent TERM || true
	kill "$TLS_PID" 2>/dev/null || true
	wait "$TLS_PID" 2>/dev/null || true
else
	echo "SKIP: openssl not installed (TLS)"
fi

# ---- valgrind: start, sync, a few events, stop -------------------------------------
if command -v valgrind >/dev/null; then
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--log-file="$WORK/vg.log" "$AGENT" "${args[@]}" "${K8S_ARGS[@]}" >"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_for 60 test -S "$WORK/fibril.sock" || true
	# a new agent: its counters start with the initial list
	n=$(kapi "$SERVER/api/v1/services" | jfield 'len(j["items"])')
	ADDED[services]=$n UPDATED[services]=0 DELETED[services]=0
	create_svc vg-1; label_svc vg-1 x; delete_svc vg-1
	wait_for 60 counts_ok services >/dev/null || true
	check "valgrind: cache consistent" same_cache services
	check "valgrind: events delivered exactly once" counts_ok services
	rc=0
	stop_agent TERM || rc=$?
	check "valgrind: clean exit (no errors, no definite leaks)" [ "$rc" = 0 ] || tail -40 "$WORK/vg.log"
else
	echo "SKIP: valgrind not installed"
fi

kill "$API_PID" 2>/dev/null || true
wait "$API_PID" 2>/dev/null || true
finish
