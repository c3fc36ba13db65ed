#!/usr/bin/env python3
# tests/integration/crd_apiserver.py - driven by crd_apiserver.sh: the
# concurrency behaviour CRD mode relies on, against the test API server
# (tests/k8s/apiserver.py) at URL with TOKEN and CA: racing creates end with
# one object (the rest 409 AlreadyExists), racing read-modify-writes lose no
# update (409 Conflict on a stale resourceVersion), a custom resource is never
# updated without a resourceVersion, ownerReferences are garbage-collected
# when the owner goes (Orphan keeps them), a Lease has one holder, and a
# missing CRD answers 404. Prints PASS:/FAIL: lines; exit 1 on any failure.
#
#   crd_apiserver.py URL TOKEN CA
import json
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request

URL, TOKEN, CA = sys.argv[1], sys.argv[2], sys.argv[3]
CTX = ssl.create_default_context(cafile=CA)
FAILED = []
CEPS = "/apis/cilium.io/v2/namespaces/default/ciliumendpoints"
IDS = "/apis/cilium.io/v2/ciliumidentities"
NODES = "/apis/cilium.io/v2/ciliumnodes"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
PODS = "/api/v1/namespaces/default/pods"


def call(method, path, body=None, ctype="application/json"):
    """(HTTP code, decoded JSON body or None)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, context=CTX, timeout=20) as r:
            raw, code = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, code = e.read(), e.code
    try:
        return code, json.loads(raw) if raw else None
    except ValueError:
        return code, None


def control(what, body=None):
    return call("POST", "/_control/" + what, body if body is not None else {})


def check(promise, ok, detail=""):
    print(("PASS: " if ok else "FAIL: ") + promise + ("" if ok else f" ({detail})"), flush=True)
    if not ok:
        FAILED.append(promise)


def race(n, fn):
    """Run fn(i) in n threads released at once; their results in order."""
    out = [None] * n
    gate = threading.Barrier(n)

    def run(i):
        gate.wait()
        out[i] = fn(i)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def wait_gone(path, secs=5.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if call("GET", path)[0] == 404:
            return True
        time.sleep(0.02)  # sleep: poll interval while the collector works
    return False


def pod(name):
    code, p = call("POST", PODS, {"metadata": {"name": name}, "spec": {
        "nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]}})
    assert code == 201, (code, p)
    return p


def owned_by(p):
    return [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
             "uid": p["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]


# ---------------------------------------------------------------- discovery
code, d = call("GET", "/apis/cilium.io/v2")
names = {r["name"] for r in (d or {}).get("resources", [])}
check("discovery: cilium.io/v2 serves ciliumidentities, ciliumendpoints, ciliumnodes(/status)",
      {"ciliumidentities", "ciliumendpoints", "ciliumnodes", "ciliumnodes/status"} <= names,
      names)
code, d = call("GET", "/apis/coordination.k8s.io/v1")
check("discovery: coordination.k8s.io/v1 serves leases",
      "leases" in {r["name"] for r in (d or {}).get("resources", [])}, (code, d))

# writes land in an order chance decides from here on
control("config", {"write_delay": 0.03})

# ------------------------------------------------- racing creates: one winner
N = 8


def create_identity(i):
    return call("POST", IDS, {"apiVersion": "cilium.io/v2", "kind": "CiliumIdentity",
                              "metadata": {"name": "70001"},
                              "security-labels": {"k8s:app": f"racer-{i}"}})


res = race(N, create_identity)
codes = sorted(c for c, _ in res)
check(f"{N} racing creates of one name: exactly one 201, the rest 409",
      codes == [201] + [409] * (N - 1), codes)
losers = [b for c, b in res if c == 409]
check("each loser gets reason AlreadyExists naming the object",
      len(losers) == N - 1 and all(b and b.get("reason") == "AlreadyExists" and
          b.get("details", {}).get("name") == "70001" for b in losers), losers[:1])
winner = ([b for c, b in res if c == 201] + [{}])[0]
code, got = call("GET", IDS + "/70001")
check("a loser reading the name finds the winner's labels",
      code == 200 and winner and got["security-labels"] == winner["security-labels"], (code, got))

# ------------------------------- racing read-modify-write: no lost update
code, _ = call("POST", NODES, {"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
                               "metadata": {"name": "counter"}, "spec": {"count": 0}})
assert code == 201, code
conflicts = [0] * N
ROUNDS = 5


def bump(i):
    done = 0
    while done < ROUNDS:
        _, cur = call("GET", NODES + "/counter")
        cur["spec"]["count"] += 1
        code, body = call("PUT", NODES + "/counter", cur)
        if code == 200:
            done += 1
        elif code == 409 and body.get("reason") == "Conflict":
            conflicts[i] += 1
        else:
            return f"unexpected {code} {body}"
    return None


errs = [e for e in race(N, bump) if e]
_, final = call("GET", NODES + "/counter")
check(f"{N} writers x {ROUNDS} read-modify-write increments retried on 409: count is "
      f"{N * ROUNDS}", not errs and final["spec"]["count"] == N * ROUNDS,
      (errs[:1], final["spec"]))
check("the race really happened: stale writes were refused with 409 Conflict",
      sum(conflicts) > 0, conflicts)

# ------------------------------------ stale, missing and conditional writes
_, cur = call("GET", NODES + "/counter")
stale = json.loads(json.dumps(cur))
stale["metadata"]["resourceVersion"] = str(int(cur["metadata"]["resourceVersion"]) - 1)
stale["spec"]["count"] = -1
code, body = call("PUT", NODES + "/counter", stale)
_, after = call("GET", NODES + "/counter")
check("PUT with a stale resourceVersion: 409 Conflict, object unchanged",
      code == 409 and (body or {}).get("reason") == "Conflict" and after == cur, (code, body))
norv = json.loads(json.dumps(cur))
del norv["metadata"]["resourceVersion"]
norv["spec"]["count"] = -2
code, body = call("PUT", NODES + "/counter", norv)
check("PUT of a custom resource without resourceVersion: 422 Invalid (no blind overwrite)",
      code == 422 and "metadata.resourceVersion" in (body or {}).get("message", ""),
      (code, body))
code, body = call("PATCH", NODES + "/counter",
                  {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]},
                   "spec": {"count": -3}}, "application/merge-patch+json")
check("merge patch naming a stale resourceVersion: 409 Conflict", code == 409, (code, body))
code, body = call("DELETE", NODES + "/counter",
                  {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {
                      "resourceVersion": stale["metadata"]["resourceVersion"]}})
check("DELETE with a stale resourceVersion precondition: 409, object kept",
      code == 409 and call("GET", NODES + "/counter")[0] == 200, (code, body))
code, _ = call("DELETE", NODES + "/counter",
               {"preconditions": {"resourceVersion": cur["metadata"]["resourceVersion"]}})
check("DELETE with the current resourceVersion precondition: 200", code == 200, code)

# ---------------------------------------------------------------- leases
code, body = call("POST", LEASES, {"metadata": {"name": "bad"},
                                   "spec": {"leaseDurationSeconds": 0}})
check("a Lease with leaseDurationSeconds 0: 422 naming the field",
      code == 422 and "spec.leaseDurationSeconds" in body.get("message", ""), (code, body))


def acquire(i):
    """client-go's leader election step: create the Lease, or take it over
    with the resourceVersion read when it has expired."""
    me = f"agent-{i}"
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    spec = {"holderIdentity": me, "leaseDurationSeconds": 15, "acquireTime": now,
            "renewTime": now, "leaseTransitions": 0}
    code, _ = call("POST", LEASES, {"metadata": {"name": "fibril-gc"}, "spec": spec})
    if code == 201:
        return me
    code, cur = call("GET", LEASES + "/fibril-gc")
    if code != 200 or cur["spec"].get("holderIdentity"):
        return None
    cur["spec"] = dict(spec, leaseTransitions=cur["spec"].get("leaseTransitions", 0) + 1)
    return me if call("PUT", LEASES + "/fibril-gc", cur)[0] == 200 else None


won = [w for w in race(N, acquire) if w]
_, lease = call("GET", LEASES + "/fibril-gc")
check(f"{N} agents racing for an absent Lease: one holder, the one the Lease names",
      len(won) == 1 and lease["spec"]["holderIdentity"] == won[0], (won, lease["spec"]))
lease["spec"]["holderIdentity"] = ""        # released: the next race is a takeover by update
call("PUT", LEASES + "/fibril-gc", lease)
won = [w for w in race(N, acquire) if w]
_, lease = call("GET", LEASES + "/fibril-gc")
check(f"{N} agents racing to take over a released Lease by update: one holder, transitions 1",
      len(won) == 1 and lease["spec"]["holderIdentity"] == won[0]
      and lease["spec"]["leaseTransitions"] == 1, (won, lease["spec"]))

control("config", {"write_delay": 0.0})

# ------------------------------------------------------ ownerReferences GC
p1 = pod("p1")
code, body = call("POST", CEPS, {"metadata": {"name": "p1", "ownerReferences": owned_by(p1)},
                                 "status": {"id": 1}})
check("a CiliumEndpoint owned by its Pod is created", code == 201, (code, body))
code, body = call("POST", CEPS, {"metadata": {"name": "bad", "ownerReferences": [
    {"apiVersion": "v1", "kind": "Pod", "name": "p1"}]}})
check("an ownerReference without uid: 422 naming the field",
      code == 422 and "ownerReferences[0].uid" in (body or {}).get("message", ""), (code, body))
call("DELETE", PODS + "/p1")
check("the Pod deleted: its CiliumEndpoint is collected", wait_gone(CEPS + "/p1"))

p2 = pod("p2")
call("POST", CEPS, {"metadata": {"name": "p2", "ownerReferences": owned_by(p2)}})
code, _ = call("DELETE", PODS + "/p2?propagationPolicy=Orphan")
time.sleep(0.5)  # sleep: give the collector (gc_delay 0.05 s) ten times its delay to act wrongly
code, cep = call("GET", CEPS + "/p2")
check("propagationPolicy=Orphan: the CiliumEndpoint stays, without the ownerReference",
      code == 200 and "ownerReferences" not in cep["metadata"], (code, cep))

p3 = pod("p3")
old_uid = p3["metadata"]["uid"]
call("POST", CEPS, {"metadata": {"name": "p3", "ownerReferences": owned_by(p3)}})
call("DELETE", PODS + "/p3")
p3b = pod("p3")
check("an owner recreated under the same name (new uid) does not adopt: collected",
      p3b["metadata"]["uid"] != old_uid and wait_gone(CEPS + "/p3"))

call("POST", CEPS, {"metadata": {"name": "dangling", "ownerReferences": [
    {"apiVersion": "v1", "kind": "Pod", "name": "nope", "uid": "0000-gone"}]}})
check("an object created owned by an absent owner is collected", wait_gone(CEPS + "/dangling"))

a, b = pod("pa"), pod("pb")
call("POST", CEPS, {"metadata": {"name": "two", "ownerReferences": owned_by(a) + [
    dict(owned_by(b)[0], controller=False)]}})
call("DELETE", PODS + "/pa")
time.sleep(0.5)  # sleep: ten times gc_delay for a wrong collection to show
check("with one of two owners left, the dependent stays", call("GET", CEPS + "/two")[0] == 200)
call("DELETE", PODS + "/pb")
check("with both owners gone, it is collected", wait_gone(CEPS + "/two"))

node = call("POST", "/api/v1/nodes", {"metadata": {"name": "gone-node"}})[1]
call("POST", NODES, {"metadata": {"name": "gone-node", "ownerReferences": [
    {"apiVersion": "v1", "kind": "Node", "name": "gone-node", "uid": node["metadata"]["uid"]}]}})
call("DELETE", "/api/v1/nodes/gone-node")
check("a cluster-scoped dependent (CiliumNode owned by its Node) is collected with it",
      wait_gone(NODES + "/gone-node"))

# ---------------------------------------------------------- missing CRDs
control("config", {"missing_crds": ["ciliumidentities"]})
code, _ = call("GET", IDS)
code_w, _ = call("GET", "/apis/cilium.io/v2/watch/ciliumidentities?timeoutSeconds=1")
_, d = call("GET", "/apis/cilium.io/v2")
names = {r["name"] for r in d.get("resources", [])}
check("missing_crds=ciliumidentities: LIST and WATCH 404, gone from discovery, others served",
      code == 404 and code_w == 404 and "ciliumidentities" not in names
      and call("GET", CEPS)[0] == 200, (code, code_w, names))
control("config", {"missing_crds": []})
check("the CRD installed again: served", call("GET", IDS)[0] == 200)

sys.exit(1 if FAILED else 0)
