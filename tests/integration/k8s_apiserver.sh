#!/usr/bin/env bash
# tests/integration/k8s_apiserver.sh - the fake kube-apiserver of the tests
# (tests/k8s/apiserver.py) is faithful enough for the real kubectl: kubectl
# (with a bearer token over TLS, no extra flags) discovers every resource,
# creates, labels, annotates, patches, replaces and deletes Namespaces, Nodes,
# Pods, Services, EndpointSlices, NetworkPolicies and Cilium policies, and
# watches them; raw checks with curl cover 401, LIST pagination, WATCH from a
# resourceVersion, bookmarks, 410 Expired and the /_control/ fault injection.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require

kc_quiet() { kc "$@" >/dev/null; }

k8s_start
M=$WORK/manifests
mkdir -p "$M"

# -- auth and discovery --------------------------------------------------------
code=$(curl -sS -o "$WORK/unauth.json" -w '%{http_code}' --cacert "$K8S_CA" "$K8S_URL/api/v1/pods")
check "no token: 401" test "$code" = 401
check "no token: a Status with reason Unauthorized" contains "$(cat "$WORK/unauth.json")" '"reason":"Unauthorized"'
code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$K8S_CA" -H "Authorization: Bearer nope" "$K8S_URL/api")
check "wrong token: 401" test "$code" = 401
check "the right token: 200" test "$(k8s_api -o /dev/null -w '%{http_code}' /api/v1/pods)" = 200
check "/version needs no token (kubectl's version dispatcher asks first)" \
	contains "$(curl -sS --cacert "$K8S_CA" "$K8S_URL/version")" '"gitVersion":"v1.32.0"'
check "/api is APIVersions" contains "$(k8s_api /api)" '"kind":"APIVersions","versions":["v1"]'
check "/apis lists the groups" python3 - "$(k8s_api /apis)" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["kind"] == "APIGroupList"
assert {g["name"] for g in d["groups"]} == {"apps", "rbac.authorization.k8s.io", "discovery.k8s.io",
                                          "coordination.k8s.io", "apiextensions.k8s.io",
                                          "networking.k8s.io", "cilium.io"}, d
PY
resources=$(kc api-resources --no-headers 2>&1) || true
check "kubectl api-resources sees all eight resources" python3 - "$resources" <<'PY'
import sys
names = {l.split()[0] for l in sys.argv[1].splitlines() if l.strip()}
want = {"namespaces", "nodes", "pods", "services", "endpointslices", "networkpolicies",
        "ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies"}
assert want <= names, sys.argv[1]
PY
out=$(kc get nodes 2>&1) && rc=0 || rc=$?
check "kubectl get nodes: empty, exit 0" test "$rc:$out" = "0:No resources found"

# -- kubectl create -f ---------------------------------------------------------
cat >"$M/all.yaml" <<'EOF'
apiVersion: v1
kind: Namespace
metadata: {name: app}
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}
spec: {podCIDR: 10.0.1.0/24, podCIDRs: [10.0.1.0/24]}
status:
  addresses: [{type: InternalIP, address: 192.168.1.10}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: app, labels: {app: web}}
spec:
  nodeName: node-a
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: app, labels: {app: web}}
spec:
  nodeName: node-b
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: app, labels: {app: db}}
spec:
  nodeName: node-a
  containers: [{name: c, image: postgres}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-abc, namespace: app, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.0.1.5]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: app}
spec: {podSelector: {matchLabels: {app: web}}}
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: cnp1, namespace: app}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress: [{fromEndpoints: [{matchLabels: {app: db}}]}]
---
apiVersion: cilium.io/v2
kind: CiliumClusterwideNetworkPolicy
metadata: {name: ccnp1}
spec:
  endpointSelector: {}
EOF
# a watch from kubectl itself, running while everything below changes
kc get pods -n app --watch -o json >"$WORK/kubectl-watch.json" 2>"$WORK/kubectl-watch.err" &
KWATCH=$!
wait_for 5 k8s_watching 1 || true

out=$(kc create -f "$M/all.yaml" 2>&1) && rc=0 || rc=$?
check "kubectl create -f (no --validate flag) creates all ten objects" test "$rc:$(grep -c ' created$' <<<"$out")" = 0:10 ||
	echo "$out"
pods=$(kc get pods -A -o json)
check "kubectl get pods -A -o json shows the pods with server-set metadata" python3 - "$pods" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
names = sorted(p["metadata"]["name"] for p in d["items"])
assert names == ["db-1", "web-1", "web-2"], names
for p in d["items"]:
    md = p["metadata"]
    assert md["uid"] and md["creationTimestamp"].endswith("Z") and int(md["resourceVersion"]) > 0, md
    assert p["status"]["phase"] == "Pending", p["status"]
PY
check "kubectl sees the Service with an allocated ClusterIP" \
	grep -Eq '^10\.96\.[0-9]+\.[0-9]+$' <<<"$(kc get svc -n app web -o jsonpath='{.spec.clusterIP}')"
check "kubectl sees the EndpointSlice" test "$(kc get endpointslices -n app -o name)" = endpointslice.discovery.k8s.io/web-abc
check "kubectl sees the NetworkPolicy (short name netpol)" test "$(kc get netpol -n app -o name)" = networkpolicy.networking.k8s.io/deny
check "kubectl sees the CiliumNetworkPolicy (short name cnp)" test "$(kc get cnp -n app -o name)" = ciliumnetworkpolicy.cilium.io/cnp1
check "kubectl sees the CiliumClusterwideNetworkPolicy" test "$(kc get ccnp -o name)" = ciliumclusterwidenetworkpolicy.cilium.io/ccnp1
check "kubectl's table output works (server-side Table)" contains "$(kc get nodes)" "node-a   Ready"
check "the Node keeps the status given on create" test "$(kc get node node-a -o jsonpath='{.status.addresses[0].address}')" = 192.168.1.10
out=$(kc create -f "$M/all.yaml" 2>&1) && rc=0 || rc=$?
check "creating again fails with AlreadyExists" contains "$rc $out" 'pods "web-1" already exists'

# -- changes with kubectl ------------------------------------------------------
check "kubectl label pod" contains "$(kc label pod -n app web-1 tier=front 2>&1)" "pod/web-1 labeled"
check "the label is stored" test "$(kc get pod -n app web-1 -o jsonpath='{.metadata.labels.tier}')" = front
check "kubectl annotate node" contains "$(kc annotate node node-a fibril.io/note=hello 2>&1)" "node/node-a annotated"
check "the annotation is stored" test "$(kc get node node-a -o jsonpath='{.metadata.annotations.fibril\.io/note}')" = hello
check "kubectl patch --subresource=status sets the pod IP" \
	contains "$(kc patch pod -n app web-1 --subresource=status --type=merge \
		-p '{"status":{"phase":"Running","podIP":"10.0.1.5","podIPs":[{"ip":"10.0.1.5"}]}}' 2>&1)" "pod/web-1 patched"
check "a status write changes only .status" test \
	"$(kc get pod -n app web-1 -o jsonpath='{.status.podIP} {.metadata.labels.tier}')" = "10.0.1.5 front"
check "kubectl patch --type=json" contains "$(kc patch cnp -n app cnp1 --type=json \
	-p '[{"op":"add","path":"/metadata/labels","value":{"k":"v"}}]' 2>&1)" "patched"
gen=$(kc get netpol -n app deny -o jsonpath='{.metadata.generation}')
kc patch netpol -n app deny --type=merge -p '{"spec":{"policyTypes":["Ingress","Egress"]}}' >/dev/null
check "a spec change bumps metadata.generation" test "$gen:$(kc get netpol -n app deny -o jsonpath='{.metadata.generation}')" = 1:2
kc get svc -n app web -o json >"$M/svc-old.json"
kc label svc -n app web x=y >/dev/null
out=$(kc replace -f "$M/svc-old.json" 2>&1) && rc=0 || rc=$?
check "kubectl replace with a stale resourceVersion: 409 Conflict" contains "$rc $out" "the object has been modified"
kc get svc -n app web -o json | python3 -c '
import json, sys
d = json.load(sys.stdin); d["spec"]["ports"][0]["port"] = 81; json.dump(d, sys.stdout)' >"$M/svc-new.json"
check "kubectl replace with the current resourceVersion" contains "$(kc replace -f "$M/svc-new.json" 2>&1)" "service/web replaced"
check "kubectl get -l (label selector)" test "$(kc get pods -n app -l 'app in (web),tier' -o name)" = pod/web-1
check "kubectl get --field-selector spec.nodeName" test \
	"$(kc get pods -A --field-selector spec.nodeName=node-a -o name | sort | tr '\n' ' ')" = "pod/db-1 pod/web-1 "
check "kubectl delete pod (waits until it is gone)" contains "$(kc delete pod -n app web-2 2>&1)" 'pod "web-2" deleted'
out=$(kc get pod -n app web-2 2>&1) && rc=0 || rc=$?
check "the deleted pod is NotFound" contains "$rc $out" 'pods "web-2" not found'

# kubectl's watch has written the last change (the delete)
kwatch_caught_up() { grep -q "\"resourceVersion\": \"$(k8s_rv)\"" "$WORK/kubectl-watch.json"; }
wait_for 10 kwatch_caught_up || true
kill "$KWATCH" 2>/dev/null || true
wait "$KWATCH" 2>/dev/null || true
check "kubectl get --watch saw ADDED, the label, the status, the delete" python3 - "$WORK/kubectl-watch.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
dec, i, objs = json.JSONDecoder(), 0, []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    o, i = dec.raw_decode(text, i)
    objs.append(o)
web1 = [o for o in objs if o["metadata"]["name"] == "web-1"]
assert any(o["metadata"].get("labels", {}).get("tier") == "front" for o in web1), web1
assert any(o.get("status", {}).get("podIP") == "10.0.1.5" for o in web1), web1
rvs = [int(o["metadata"]["resourceVersion"]) for o in objs]
assert rvs == sorted(rvs), rvs
names = {o["metadata"]["name"] for o in objs}
assert names == {"web-1", "web-2", "db-1"}, names
PY

# -- raw API: LIST pagination ---------------------------------------------------
for i in 1 2 3 4 5; do
	printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p%s"},"spec":{"nodeName":"node-b","containers":[{"name":"c","image":"x"}]}}' "$i" |
		k8s_api -X POST -H 'Content-Type: application/json' --data-binary @- /api/v1/namespaces/default/pods >/dev/null
done
check "limit=2 + continue walks every pod exactly once" python3 - "$K8S_URL" "$K8S_TOKEN" "$K8S_CA" <<'PY'
import json, ssl, sys, urllib.request
url, tok, ca = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
def get(path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + tok})
    return json.load(urllib.request.urlopen(req, context=ctx))
full = get("/api/v1/pods")
want = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in full["items"]]
assert len(want) == 7, want
got, cont, pages, rvs = [], "", 0, set()
while True:
    d = get("/api/v1/pods?limit=2" + ("&continue=" + cont if cont else ""))
    assert d["kind"] == "PodList" and d["apiVersion"] == "v1"
    assert all("kind" not in p for p in d["items"]), "typed list items carry no kind"
    got += [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in d["items"]]
    rvs.add(d["metadata"]["resourceVersion"])
    pages += 1
    cont = d["metadata"].get("continue", "")
    if not cont:
        break
    assert len(d["items"]) == 2
assert got == want, (got, want)
assert pages == 4 and len(rvs) == 1, (pages, rvs)
PY
check "namespaced LIST + fieldSelector spec.nodeName" test "$(k8s_api '/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dnode-b' |
	python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')" = 5

# -- raw API: WATCH ------------------------------------------------------------
rv=$(k8s_api /api/v1/pods | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
kc label pod p1 round=1 >/dev/null
kc delete pod p2 >/dev/null
kc create -f - >/dev/null <<'EOF'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p6"},"spec":{"containers":[{"name":"c","image":"x"}]}}
EOF
k8s_api -N -D "$WORK/watch.hdr" "/api/v1/pods?watch=1&resourceVersion=$rv&timeoutSeconds=2" >"$WORK/watch.out"
check "WATCH is a chunked stream" grep -qi '^transfer-encoding: chunked' "$WORK/watch.hdr"
check "WATCH from an rv streams exactly the later events, in order" python3 - "$WORK/watch.out" "$rv" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["type"], e["object"]["metadata"]["name"]) for e in evs]
assert got == [("MODIFIED", "p1"), ("DELETED", "p2"), ("ADDED", "p6")], got
rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
assert rvs == sorted(rvs) and rvs[0] > int(sys.argv[2]), rvs
assert all(e["object"]["kind"] == "Pod" and e["object"]["apiVersion"] == "v1" for e in evs)
PY
k8s_api -N "/api/v1/namespaces/app/pods?watch=true&resourceVersion=$rv&allowWatchBookmarks=true&timeoutSeconds=3" >"$WORK/bookmark.out"
check "a quiet watch with allowWatchBookmarks gets BOOKMARK events carrying the rv" python3 - "$WORK/bookmark.out" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
bms = [e for e in evs if e["type"] == "BOOKMARK"]
assert bms and all(e["type"] == "BOOKMARK" for e in evs), evs
assert all(int(e["object"]["metadata"]["resourceVersion"]) > 0 and e["object"]["kind"] == "Pod" for e in bms)
PY
check "a label-selected watch turns a label removal into DELETED" python3 - "$K8S_URL" "$K8S_TOKEN" "$K8S_CA" <<'PY'
import json, ssl, subprocess, sys, threading, time, urllib.request
url, tok, ca = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
def req(path, method="GET", body=None, ctype="application/merge-patch+json"):
    r = urllib.request.Request(url + path, method=method, data=body,
                               headers={"Authorization": "Bearer " + tok, "Content-Type": ctype})
    return urllib.request.urlopen(r, context=ctx)
rv = json.load(req("/api/v1/namespaces/default/pods"))["metadata"]["resourceVersion"]
req("/api/v1/namespaces/default/pods/p3", "PATCH", b'{"metadata":{"labels":{"sel":"yes"}}}').read()
req("/api/v1/namespaces/default/pods/p3", "PATCH", b'{"metadata":{"labels":{"sel":null}}}').read()
s = req(f"/api/v1/pods?watch=1&labelSelector=sel%3Dyes&resourceVersion={rv}&timeoutSeconds=1")
got = [(e["type"], e["object"]["metadata"]["name"]) for e in map(json.loads, s)]
assert got == [("ADDED", "p3"), ("DELETED", "p3")], got
PY

# -- 410 Expired ---------------------------------------------------------------
old=$(k8s_api '/api/v1/pods?limit=1' | python3 -c 'import json,sys; d=json.load(sys.stdin)["metadata"]; print(d["resourceVersion"], d["continue"])')
kc label pod p1 round=2 --overwrite >/dev/null
k8s_ctl "expire?mode=event" >/dev/null
k8s_api -N "/api/v1/pods?watch=1&resourceVersion=${old% *}&timeoutSeconds=2" >"$WORK/expired.out"
check "after expire, a watch from the old rv gets an ERROR event with a 410 Status" python3 - "$WORK/expired.out" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
assert len(evs) == 1 and evs[0]["type"] == "ERROR", evs
st = evs[0]["object"]
assert st["kind"] == "Status" and st["code"] == 410 and st["reason"] == "Expired", st
PY
k8s_ctl "expire?mode=http" >/dev/null
check "mode=http: the watch itself is answered 410" test \
	"$(k8s_api -o /dev/null -w '%{http_code}' "/api/v1/pods?watch=1&resourceVersion=${old% *}")" = 410
check "a continue token older than the history: 410" test \
	"$(k8s_api -o /dev/null -w '%{http_code}' "/api/v1/pods?limit=1&continue=${old#* }")" = 410
k8s_ctl "config?expired_watch=event" >/dev/null
cur=$(k8s_api /api/v1/pods | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
k8s_ctl "restart-history?jump=100000" >/dev/null
new=$(k8s_api /api/v1/pods | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
check "restart-history jumps the resourceVersion" test "$new" -ge $((cur + 100000))
check "... and a watch from before the restart gets 410" contains \
	"$(k8s_api -N "/api/v1/pods?watch=1&resourceVersion=$cur&timeoutSeconds=1")" '"code":410'

# -- fault injection -----------------------------------------------------------
k8s_api -N "/api/v1/pods?watch=1&resourceVersion=$new&timeoutSeconds=30" >"$WORK/dropped.out" 2>&1 &
wpid=$!
wait_for 5 k8s_watching 1 || true
kc label pod p1 round=3 --overwrite >/dev/null
wait_for 5 grep -q '"round":"3"' "$WORK/dropped.out" || true
dropped=$(k8s_ctl drop-watches)
wrc=0
wait "$wpid" || wrc=$?
check "drop-watches cuts the stream mid-way (no terminating chunk)" test "$wrc" -ne 0
check "... after the event already sent" contains "$(cat "$WORK/dropped.out")" '"round":"3"'
check "drop-watches counted the watch" contains "$dropped" '"watches":1'
k8s_api -N "/api/v1/pods?watch=1&resourceVersion=$new&timeoutSeconds=30" >"$WORK/err.out" 2>&1 &
wpid=$!
wait_for 5 k8s_watching 1 || true
k8s_ctl "watch-error?code=410" >/dev/null
wrc=0
wait "$wpid" || wrc=$?
check "watch-error ends open watches with an ERROR 410 event, cleanly" python3 - "$WORK/err.out" "$wrc" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
assert sys.argv[2] == "0" and evs[-1]["type"] == "ERROR" and evs[-1]["object"]["code"] == 410, evs
PY
reach() { curl -sS -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$K8S_CA" "$K8S_URL/version" 2>/dev/null || true; }
k8s_ctl "pause?seconds=3" >/dev/null
reach_is() { [ "$(reach)" = "$1" ]; }
wait_for 2 reach_is 000 || true
check "pause: the server is unreachable (connection refused)" test "$(reach)" = 000
wait_for 10 reach_is 200 || true
check "... and back after the pause, on the same port" test "$(k8s_api -o /dev/null -w '%{http_code}' /api/v1/pods)" = 200

k8s_ctl "config?max_page=3" >/dev/null
check "config max_page serves a LIST in pages even without limit" python3 - "$(k8s_api /api/v1/namespaces/default/pods)" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert len(d["items"]) == 3 and d["metadata"].get("continue"), d["metadata"]
PY
k8s_ctl "config?max_page=0" >/dev/null
k8s_api -N "/api/v1/pods?watch=1&timeoutSeconds=30" >"$WORK/after.out" 2>&1 &
wpid=$!
wait_for 5 k8s_watching 1 || true
k8s_ctl "drop-watches?after=2" >/dev/null
for i in 1 2 3; do kc label pod p1 "after=$i" --overwrite >/dev/null; done
wrc=0
wait "$wpid" || wrc=$?
check "drop-watches?after=2 cuts each watch after two more events" python3 - "$WORK/after.out" "$wrc" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
evs = [json.loads(l) for l in lines if l.startswith("{")]
mods = [e for e in evs if e["type"] == "MODIFIED"]
assert sys.argv[2] != "0" and [e["object"]["metadata"]["labels"]["after"] for e in mods] == ["1", "2"], evs[-3:]
PY

# -- bulk load and speed -------------------------------------------------------
python3 "$top_srcdir/tests/k8s/control.py" gen --pods 10000 --nodes 100 --namespaces 10 >"$WORK/bulk.json"
check "bulk-load 10,000 pods" contains "$(k8s_ctl -H 'Content-Type: application/json' --data-binary @"$WORK/bulk.json" load)" '"loaded":10110'
check "LIST of 10,000+ pods in well under a second" python3 - "$K8S_URL" "$K8S_TOKEN" "$K8S_CA" <<'PY'
import json, ssl, sys, time, urllib.request
url, tok, ca = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
t = time.monotonic()
r = urllib.request.Request(url + "/api/v1/pods", headers={"Authorization": "Bearer " + tok})
raw = urllib.request.urlopen(r, context=ctx).read()
dt = time.monotonic() - t
d = json.loads(raw)
assert len(d["items"]) >= 10000 and dt < 1.0, (len(d["items"]), dt)
PY
check "a watch from rv 0 streams 10,000+ ADDED events quickly" python3 - "$K8S_URL" "$K8S_TOKEN" "$K8S_CA" <<'PY'
import ssl, sys, time, urllib.request
url, tok, ca = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
t = time.monotonic()
r = urllib.request.Request(url + "/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=1",
                           headers={"Authorization": "Bearer " + tok})
n = sum(1 for l in urllib.request.urlopen(r, context=ctx) if l.startswith(b'{"type":"ADDED"'))
assert n >= 10000 and time.monotonic() - t < 3.0, (n, time.monotonic() - t)
PY
check "kubectl get pods -A pages through 10,000+ pods (limit=500 chunks)" test \
	"$(kc get pods -A --no-headers | wc -l)" -ge 10000

# -- graceful pod deletion -----------------------------------------------------
k8s_ctl "config?pod_grace_seconds=1" >/dev/null
kc delete pod -n app db-1 --wait=false >/dev/null
check "with pod_grace_seconds a deleted pod first gets a deletionTimestamp" \
	test -n "$(kc get pod -n app db-1 -o jsonpath='{.metadata.deletionTimestamp}')"
check "... and is gone after the grace period (kubectl wait --for=delete)" \
	kc_quiet wait --for=delete pod/db-1 -n app --timeout=10s
k8s_ctl "config?pod_grace_seconds=0" >/dev/null

# -- namespace deletion --------------------------------------------------------
check "kubectl delete namespace" contains "$(kc delete ns app 2>&1)" 'namespace "app" deleted'
check "... takes its objects along" test -z "$(kc get pods,svc,netpol,cnp,endpointslices -n app -o name 2>&1)"

# -- a restart on the same port, loading a file at start ----------------------
port=$K8S_PORT
k8s_stop
k8s_start --load "$WORK/bulk.json" --no-default-namespaces
check "restarted on the same port" test "$K8S_PORT" = "$port"
check "--load FILE: the objects are there at start" python3 - "$(k8s_ctl stats)" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["objects"]["pods"] == 10000 and d["objects"]["nodes"] == 100 and d["objects"]["namespaces"] == 10, d
PY
check "kubectl works against the restarted server" test "$(kc get nodes --no-headers | wc -l)" = 100

k8s_stop
finish
