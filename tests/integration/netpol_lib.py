#!/usr/bin/env python3
"""tests/integration/netpol_lib.py - the machinery of the network policy
conformance driver (netpol_conformance.py, which holds the scenarios and
runs them): the agent over its Unix socket and the CLI, the test API
server (objects applied as kubectl sends them), the pods and their
probes (netpol_pod.py's control sockets, every cell at once), the
expected reachability matrix (Reach: the node's own traffic always
allowed, allow-localhost, unless a deny names it) compared and rendered
as upstream prints it, and the policies of a scenario applied, waited
for and reset (Cluster). Environment: as netpol_conformance.py."""
import http.client
import json
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

NAMESPACES = ["x", "y", "z"]
PODS = ["a", "b", "c"]
PORTS = [(80, "tcp"), (81, "tcp"), (80, "udp"), (81, "udp")]
NAMED = {f"serve-{p}-{pr}": (p, pr) for p, pr in PORTS}
TIMEOUT = float(os.environ.get("PROBE_TIMEOUT", "0.6"))
NODE = os.environ.get("NODE_NAME", "node-a")


# ---- the agent (HTTP over its Unix socket) ---------------------------------------------------

class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=20)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(self.path)


def agent(method, path, body=None):
    c = UnixHTTP(os.environ["AGENT_SOCK"])
    c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None)


def cli(*args):
    return subprocess.run([os.environ["CLI"], "--socket", os.environ["AGENT_SOCK"], *args],
                          capture_output=True, text=True)


# ---- the API server ------------------------------------------------------------------------

CTX = ssl.create_default_context(cafile=os.environ.get("K8S_CA")) if os.environ.get("K8S_CA") \
    else None

KINDS = {
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "CiliumNetworkPolicy": ("/apis/cilium.io/v2", "ciliumnetworkpolicies", True),
    "CiliumClusterwideNetworkPolicy": ("/apis/cilium.io/v2", "ciliumclusterwidenetworkpolicies",
                                       False),
    "Pod": ("/api/v1", "pods", True),
    "Namespace": ("/api/v1", "namespaces", False),
}
API_VERSION = {"NetworkPolicy": "networking.k8s.io/v1", "CiliumNetworkPolicy": "cilium.io/v2",
               "CiliumClusterwideNetworkPolicy": "cilium.io/v2", "Pod": "v1", "Namespace": "v1"}


def kube(method, kind, ns, name=None, body=None, patch=False):
    base, res, namespaced = KINDS[kind]
    url = os.environ["K8S_URL"] + base + (f"/namespaces/{ns}" if namespaced else "") + "/" + res
    if name:
        url += "/" + name
    data = json.dumps(body).encode() if body is not None else None
    ct = "application/merge-patch+json" if patch else "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": "Bearer " + os.environ["K8S_TOKEN"], "Content-Type": ct})
    with urllib.request.urlopen(req, context=CTX, timeout=20) as r:
        return json.loads(r.read() or b"null")


def pod_object(ns, name, labels):
    ports = [{"name": n, "containerPort": p, "protocol": pr.upper()} for n, (p, pr) in NAMED.items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": NODE, "containers": [{"name": "srv", "image": "srv",
                                                        "ports": ports}]}}


def setup():
    for ns in NAMESPACES:
        labels = {"ns": ns}
        if ns == "y":
            labels["team"] = "blue"
        kube("POST", "Namespace", None, body={"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns, "labels": labels}})
        for p in PODS:
            kube("POST", "Pod", ns, body=pod_object(ns, p, {"pod": p}))


# ---- probing ------------------------------------------------------------------------------

class World:
    """Pods (name -> ip), the probe sources (name -> control socket, source address)."""

    def __init__(self):
        self.ips = {}
        self.sources = {}
        self.refresh()
        ctl = os.environ["CTL_DIR"]
        for k in self.ips:
            self.sources[k] = (f"{ctl}/{k.replace('/', '-')}.sock", None)
        self.extra = {"host": (f"{ctl}/host.sock", None), "world": (f"{ctl}/world.sock", None),
                      "world2": (f"{ctl}/world.sock", os.environ.get("WORLD2_SRC"))}

    def refresh(self):
        cache = os.path.join(os.environ["CTL_DIR"], "ips.json")
        try:
            _, eps = agent("GET", "/v1/endpoint")
        except OSError:  # the agent is down: the addresses seen last
            with open(cache) as f:
                self.ips = json.load(f)
            return
        eps = eps.get("endpoints", eps) if isinstance(eps, dict) else eps
        for e in eps:
            if e.get("pod-namespace") and e.get("pod-name") and e.get("ipv4"):
                self.ips[f"{e['pod-namespace']}/{e['pod-name']}"] = e["ipv4"]
        with open(cache + ".tmp", "w") as f:
            json.dump(self.ips, f)
        os.rename(cache + ".tmp", cache)

    def pods(self):
        return sorted(self.ips)


def probe_row(sock, source, targets, out, key):
    probes = [[ip, port, proto] for (_, ip, port, proto) in targets]
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(sock)
        s.sendall((json.dumps({"probes": probes, "timeout": TIMEOUT, "source": source}) +
                   "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        s.close()
        res = json.loads(buf)
    except (OSError, ValueError) as e:
        print(f"# probe from {key}: {e}")
        res = [None] * len(probes)
    for (dst, _, port, proto), ok in zip(targets, res):
        out[(key, dst, port, proto)] = ok


def probe_all(world, sources):
    targets = [(d, world.ips[d], p, pr) for d in world.pods() for p, pr in PORTS]
    out = {}
    threads = []
    for src in sources:
        sock, source = world.sources.get(src) or world.extra[src]
        t = threading.Thread(target=probe_row, args=(sock, source, targets, out, src))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return out


# ---- expected reachability ---------------------------------------------------------------------

class Reach:
    """The expected matrix: (source, destination pod, port, proto) -> bool."""

    def __init__(self, world, extra=False, default=True):
        self.sources = world.pods() + (["host", "world", "world2"] if extra else [])
        self.dests = world.pods()
        self.m = {(s, d, p, pr): default for s in self.sources for d in self.dests
                  for p, pr in PORTS}
        # Kubernetes: traffic from the pod's own node (kubelet's probes) is
        # always allowed in ([policy] allow-localhost = always, the agent's
        # default); only a deny rule naming the host (deny_host) stops it
        self.host_denied = set()

    def deny_host(self, dsts=None, ports=None):
        """A deny rule names the node: these cells from "host" are dropped."""
        self.deny(srcs="host", dsts=dsts, ports=ports)
        self.host_denied |= {k for k, v in self.m.items() if k[0] == "host" and not v}
        return self

    def set(self, srcs=None, dsts=None, ports=None, value=False):
        """srcs/dsts: None (all), a list, or a namespace "x/" prefix; ports: None
        or a list of (port, proto)."""
        def pick(spec, universe):
            if spec is None:
                return universe
            if isinstance(spec, str):
                spec = [spec]
            return [u for u in universe if any(u == s or (s.endswith("/") and u.startswith(s))
                                               for s in spec)]
        for s in pick(srcs, self.sources):
            for d in pick(dsts, self.dests):
                for p, pr in (ports or PORTS):
                    self.m[(s, d, p, pr)] = value
        return self

    def allow(self, srcs=None, dsts=None, ports=None):
        return self.set(srcs, dsts, ports, True)

    def deny(self, srcs=None, dsts=None, ports=None):
        return self.set(srcs, dsts, ports, False)


def compare(exp, got):
    wrong = []
    for k, v in exp.m.items():
        if k[0] == k[1]:
            v = True  # a pod always reaches itself (never leaves its namespace)
        if k[0] == "host" and k not in exp.host_denied:
            v = True  # allow-localhost: the node reaches its pods whatever the policy
        if got.get(k) is not v:
            wrong.append((k, v, got.get(k)))
    return wrong


def render(exp, got):
    """The matrix as upstream prints it: X where a cell is wrong."""
    lines = ["    " + " ".join(f"{d:>4}" for d in exp.dests)]
    for s in exp.sources:
        row = []
        for d in exp.dests:
            cell = ""
            for p, pr in PORTS:
                v = True if s == d or (s == "host" and (s, d, p, pr) not in exp.host_denied) \
                    else exp.m[(s, d, p, pr)]
                g = got.get((s, d, p, pr))
                cell += ("." if v else "-") if g is v else "X"
            row.append(cell)
        lines.append(f"{s:>6} " + " ".join(row))
    return "\n".join("# " + l for l in lines)


# ---- policies ------------------------------------------------------------------------------

class Cluster:
    def __init__(self, world):
        self.world = world
        self.k8s = {}   # (kind, ns, name) -> resourceVersion
        self.api = set()  # (kind, ns, name) imported through the CLI
        self.invalid_before = 0

    def apply(self, obj):
        kind = obj["kind"]
        obj.setdefault("apiVersion", API_VERSION[kind])
        md = obj["metadata"]
        ns = md.get("namespace") if KINDS[kind][2] else None
        key = (kind, ns or "", md["name"])
        if key in self.k8s:
            cur = kube("GET", kind, ns, md["name"])
            obj["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            got = kube("PUT", kind, ns, md["name"], obj)
        else:
            got = kube("POST", kind, ns, body=obj)
        self.k8s[key] = got["metadata"]["resourceVersion"]

    def delete(self, kind, ns, name):
        kube("DELETE", kind, ns if KINDS[kind][2] else None, name)
        self.k8s.pop((kind, ns or "", name), None)

    def import_(self, text, suffix=".yaml"):
        with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as f:
            f.write(text)
        r = cli("policy", "import", f.name)
        os.unlink(f.name)
        if r.returncode:
            raise RuntimeError("policy import: " + (r.stderr or r.stdout).strip())
        for line in r.stdout.splitlines():
            if line.startswith("Imported:"):
                for full in line.split(":", 1)[1].split(","):
                    full = full.strip()
                    ns, _, name = full.rpartition("/")
                    self.api.add((ns, name))

    def wait(self, timeout=15):
        """Until the agent enforces exactly what was applied, everywhere."""
        deadline = time.time() + timeout
        while True:
            _, j = agent("GET", "/v1/policy")
            k8s = {(p["kind"], p["namespace"], p["name"]):
                   p["policy"].get("metadata", {}).get("resourceVersion")
                   for p in j["policies"] if p.get("source") == "k8s"}
            api = {(p["namespace"], p["name"]) for p in j["policies"] if p.get("source") == "api"}
            revs = {e["revision"] for e in j["endpoints"]}
            if k8s == self.k8s and api == self.api and revs <= {j["revision"]}:
                return True
            if time.time() > deadline:
                print(f"# the agent did not converge: k8s {k8s} (want {self.k8s}), api {api} "
                      f"(want {self.api}), endpoint revisions {revs} vs {j['revision']}")
                return False
            time.sleep(0.05)  # sleep: the poll interval of a wait with a deadline

    def reset(self):
        for (kind, ns, name) in list(self.k8s):
            self.delete(kind, ns, name)
        if self.api:
            cli("policy", "delete-all")
            self.api = set()
        self.wait()


def relabel(kind, ns, name, labels):
    kube("PATCH", kind, ns, name, {"metadata": {"labels": labels}}, patch=True)


def wait_labels(ns, pod, label):
    """Until the agent's endpoint of ns/pod carries the label (k8s:KEY=VALUE)."""
    for _ in range(200):
        _, eps = agent("GET", "/v1/endpoint")
        eps = eps.get("endpoints", eps) if isinstance(eps, dict) else eps
        for e in eps:
            if e.get("pod-namespace") == ns and e.get("pod-name") == pod and label in e["labels"]:
                return True
        time.sleep(0.05)  # sleep: the poll interval of a wait with a deadline
    print(f"# endpoint {ns}/{pod} never got {label}")
    return False


def knp(ns, name, spec):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def cnp(ns, name, spec):
    return {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def ccnp(name, spec):
    return {"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy",
            "metadata": {"name": name}, "spec": spec}


def sel(**labels):
    return {"matchLabels": labels}


ALL_SEL = {}
T80, T81, U80, U81 = (80, "tcp"), (81, "tcp"), (80, "udp"), (81, "udp")
