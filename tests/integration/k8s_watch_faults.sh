#!/usr/bin/env bash
# tests/integration/k8s_watch_faults.sh - the k8s module's watches against
# faults of tests/k8s/apiserver.py that an informer must notice on its own:
# a watch that goes silent without closing (restarted within the idle
# deadline from its last resourceVersion, reported in the log, /v1/k8s and
# health), a retried watch the server does not answer (health stays
# Degraded until it does), bad watch lines (logged, counted, the cache left
# alone), a 410 that comes back right after each relist (backed off), and a
# start that fails naming why (the last error of each resource).
. "$top_srcdir/tests/lib/common.sh"

for tool in python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool missing"
done
[ "$(id -u)" = 0 ] || skip_or_fail "run as root (the agent only loads root-owned modules)"

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
K8S_SO=${K8S_SO:-$top_builddir/.libs/k8s.so}
[ -f "$K8S_SO" ] || { echo "FAIL: $K8S_SO not built"; exit 1; }
install -m 0644 "$K8S_SO" "$mods/k8s.so"

TOKEN=t0ken-$$
cp "$top_srcdir/tests/k8s/apiserver.py" "$top_srcdir/tests/k8s/apiserver_crd.py" "$WORK/"
python3 "$WORK/apiserver.py" --port 0 --token "$TOKEN" --bookmark-interval 1 \
	>"$WORK/api.out" 2>"$WORK/api.err" &
wait_alive "$!" 10 grep -q LISTENING "$WORK/api.out" || true
PORT=$(awk '/LISTENING/ {print $2; exit}' "$WORK/api.out")
[ -n "$PORT" ] || { echo "FAIL: the API server did not start"; cat "$WORK/api.err"; exit 1; }
SERVER=http://127.0.0.1:$PORT
kubeconfig() { # FILE TOKEN
	cat >"$1" <<EOF
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
    token: $2
EOF
}
kubeconfig "$WORK/kubeconfig" "$TOKEN"
kapi() { curl -sS --max-time 20 -H "Authorization: Bearer $TOKEN" "$@"; }
control() { curl -sS --max-time 20 -X POST "$SERVER/_control/$1" "${@:2}" >/dev/null; }
create_svc() { # NAME
	kapi -X POST -H 'Content-Type: application/json' "$SERVER/api/v1/namespaces/default/services" \
		-d "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"ports\":[{\"port\":80}]}}" >/dev/null
}
jfield() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
svc() { api http://x/v1/k8s/services | jfield "$1"; }
healthz() { api -o /dev/null -w '%{http_code}' http://x/v1/healthz; }
healthz_is() { [ "$(healthz)" = "$1" ]; }
svc_is() { [ "$(svc "$1")" = "$2" ]; } # EXPR VALUE
has_svc() { [ "$(svc "any(i['name']=='$1' for i in j['items'])")" = True ]; }
# the agent's services equal the server's (name and resourceVersion)
same_services() {
	kapi "$SERVER/api/v1/services" >"$WORK/server.json" || return 1
	api http://x/v1/k8s/services >"$WORK/agent.json" || return 1
	python3 - "$WORK/server.json" "$WORK/agent.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); a = json.load(open(sys.argv[2]))
want = {(o["metadata"]["namespace"], o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in s["items"]}
have = {(o["namespace"], o["name"], o["resourceVersion"]) for o in a["items"]}
if want != have:
    print("  server only:", sorted(want - have)[:5], "agent only:", sorted(have - want)[:5]); sys.exit(1)
EOF
}

for i in 1 2 3; do create_svc "svc-$i"; done
start_agent "$mods" --set "k8s.kubeconfig=$WORK/kubeconfig" --set k8s.node-name=node-a \
	--set k8s.resources=services --set k8s.watch-idle-timeout=3s
check "services synced" wait_for 10 same_services
check "healthz 200 once synced" [ "$(healthz)" = 200 ]

# ---- a watch that goes silent without closing -----------------------------------------
control stall-watches
t0=$SECONDS
create_svc svc-stall
check "a stalled watch is restarted within the idle deadline and catches up" wait_for 15 has_svc svc-stall
# bounded by the 3 s deadline (a slack for a loaded machine); without it the
# watch's own timeout (300-600 s + 60 s) is the only limit
check "  ... within 12 s ($((SECONDS - t0)) s)" [ $((SECONDS - t0)) -le 12 ]
check "  ... the stall is logged" grep -q "watch services: stalled: no data for 3.0s (a dead connection); restarting it from resourceVersion" "$WORK/agent.log"
check "  ... /v1/k8s counts it" [ "$(svc "j['stalls']")" -ge 1 ]
check "  ... resumed from the last resourceVersion (no relist)" [ "$(svc "j['relists']")" = 0 ]
check "  ... the cache equals the server's" same_services
# a server that stays silent: health is Degraded while the watches stall
control "config?stall_watches=1"
control stall-watches
stalled_503() { healthz_is 503 && svc_is "j['stalled']" True; }
wait_for 10 stalled_503 || true # (the idle deadline is 3 s)
check "a silent server: healthz 503" [ "$(healthz)" = 503 ]
check "  ... /v1/k8s says stalled" [ "$(svc "j['stalled']")" = True ]
check "  ... /v1/healthz names the stall" contains "$(api http://x/v1/healthz)" "stalled: no data for 3.0s"
control "config?stall_watches=0"
create_svc svc-after-stall
check "  ... the server talks again: caught up" wait_for 10 has_svc svc-after-stall
check "  ... healthz 200 again" wait_for 5 healthz_is 200
check "  ... stalled is false again" [ "$(svc "j['stalled']")" = False ]

# ---- health after a failed watch: OK only once the server answers the retry -----------------
control "config?stall_watches=1" # the retried watch gets no answer at all
control "watch-error?resource=services&code=500&message=injected"
sleep 2.5 # sleep: the window in which the retried watch (no answer) must not turn health OK
check "a retried watch with no answer: healthz stays 503" [ "$(healthz)" = 503 ]
check "  ... /v1/k8s keeps the error" contains "$(svc "j['error']")" "watch ERROR 500"
control "config?stall_watches=0"
check "  ... 200 once the server answers" wait_for 10 healthz_is 200
check "  ... the error is cleared" [ "$(svc "j['error']")" = None ]

# ---- bad watch lines: logged, counted, the cache untouched --------------------------------------
rv=$(kapi "$SERVER/api/v1/services" | jfield "j['metadata']['resourceVersion']")
obj() { printf '{"kind":"Service","apiVersion":"v1","metadata":{"name":"%s","namespace":"default","resourceVersion":"%s"}}' "$1" "$((rv + 1000))"; }
python3 - "$(obj ghost-malformed)" "$(obj ghost-frob)" "$(obj ghost-lower)" "$(obj ghost-trailing)" >"$WORK/lines.json" <<'EOF'
import json, sys
m, frob, lower, trailing = sys.argv[1:5]
print(json.dumps([
    '{"type":"ADDED","object":' + m + '\n',                          # malformed: unbalanced
    'this is not JSON\n',                                            # malformed
    '{"type":"ADDED","object":{"kind":"Service","metadata":{"namespace":"default"}}}\n',  # no name
    '{"type":"FROBNICATED","object":' + frob + '}\n',               # unknown type
    '{"type":"added","object":' + lower + '}\n',                    # unknown type (case)
    '{"type":"ADDED","object":' + trailing + '} garbage\n',         # trailing data
]))
EOF
control "inject-lines?resource=services" -H 'Content-Type: application/json' --data-binary "@$WORK/lines.json"
bad_logged() { [ "$(grep -c 'watch services: dropped a bad line (' "$WORK/agent.log")" -ge 6 ]; }
wait_for 10 bad_logged || true
bad() { svc "j['bad_lines']['$1']"; }
check "a malformed line is counted (2)" [ "$(bad malformed)" = 2 ]
check "an object without a name is counted" [ "$(bad no_name)" = 1 ]
check "unknown event types (FROBNICATED, added) are counted" [ "$(bad unknown_type)" = 2 ]
check "garbage after a valid event is counted" [ "$(bad trailing_data)" = 1 ]
check "bad lines are logged with their kind" \
	bash -c "grep -c 'watch services: dropped a bad line (' '$WORK/agent.log' | grep -qx 6"
check "  ... FROBNICATED named in the log" grep -q 'dropped a bad line (unknown_type.*FROBNICATED' "$WORK/agent.log"
check "no ghost object reached the cache" [ "$(svc "sum(i['name'].startswith('ghost') for i in j['items'])")" = 0 ]
check "  ... the cache equals the server's" same_services
check "  ... the resourceVersion did not move to the bad lines'" [ "$(svc "j['resource_version']")" != "$((rv + 1000))" ]
# a line cut by the end of the stream
python3 -c 'import json,sys; print(json.dumps([sys.argv[1]]))' "{\"type\":\"ADDED\",\"object\":$(obj ghost-cut | cut -c1-40)" >"$WORK/cut.json"
control "inject-lines?resource=services&end=1" -H 'Content-Type: application/json' --data-binary "@$WORK/cut.json"
check "a line cut by the end of the stream is counted" wait_for 5 svc_is "j['bad_lines']['truncated']" 1
create_svc svc-after-bad
check "  ... the watch goes on: later events arrive" wait_for 10 has_svc svc-after-bad
check "  ... no ghost object" [ "$(svc "sum(i['name'].startswith('ghost') for i in j['items'])")" = 0 ]

# ---- a 410 right after every relist: backed off --------------------------------------------
control "config?expire_every_watch=1&expired_watch=http"
control drop-watches
before=$(svc "j['relists']")
sleep 6 # sleep: the relists are counted over a window of 6 s (a rate)
after=$(svc "j['relists']")
control "config?expire_every_watch=0"
echo "  relists in 6 s with a 410 after each: $((after - before))"
check "a 410 after every relist: at most 6 relists in 6 s (a tight loop did ~13/s)" [ $((after - before)) -le 6 ]
check "  ... at least 2 (it still relists)" [ $((after - before)) -ge 2 ]
check "  ... the backoff is logged" grep -q "watch services: resourceVersion .* expired (forced relist [0-9]* within 2 min); relisting in" "$WORK/agent.log"
check "  ... back to watching afterwards" wait_for 40 svc_is "j['phase']" watching
# health and log give the same retry delay (the server unreachable)
control "pause?seconds=4"
says_retry() { api http://x/v1/healthz | grep -q "retrying in [0-9.]*s"; }
wait_for 4 says_retry || true
hmsg=$(api http://x/v1/healthz | grep -o "retrying in [0-9.]*s" | head -1 || true)
check "the server unreachable: health says when it retries ($hmsg)" [ -n "$hmsg" ]
check "  ... the same figure as the log line" grep -qF "$hmsg" "$WORK/agent.log"
wait_for 20 healthz_is 200 || true
stop_agent

# ---- the start failure says why ------------------------------------------------------------
kubeconfig "$WORK/kubeconfig-bad" wrong-token
run_agent "$mods" --set "k8s.kubeconfig=$WORK/kubeconfig-bad" --set k8s.node-name=node-a \
	--set k8s.resources=services --set k8s.sync-timeout=2s
check "a start that cannot sync fails" [ "$RC" != 0 ]
check "  ... naming the resource and its last error (HTTP 401)" \
	contains "$OUT" "caches not synced within 2s: services (GET /api/v1/services: HTTP 401"

kill "$(pgrep -f -- "$WORK/apiserver.py" | head -1)" 2>/dev/null || true
finish
