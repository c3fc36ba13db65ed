#!/usr/bin/env python3
# tests/k8s/control.py - drive the test-only /_control/ endpoints of
# tests/k8s/apiserver.py, and generate bulk objects for it (stdlib only).
#
#   control.py --url URL [--cacert CA] stats
#   control.py --url URL load FILE.json            (a JSON list or a List object)
#   control.py --url URL drop-watches [--after N] [--resource pods]
#   control.py --url URL watch-error [--code 410] [--resource pods]
#   control.py --url URL expire [--mode event|http] [--resource pods]
#   control.py --url URL restart-history [--jump N | --set N] [--rewrite]
#   control.py --url URL pause --seconds N
#   control.py --url URL token --value NEW [--drop]  (rotate the accepted token)
#   control.py --url URL config key=value...       (bookmark_interval, max_page, ...)
#   control.py --url URL reset
#   control.py gen --pods N [--nodes M] [--namespaces K] [--services S]
#                  [--endpointslices E] [--netpols P] [--cnps C] [--ccnps G]
#                  > objs.json
#
# Also importable: Control(url, cacert).call(what, **params).
import argparse
import json
import ssl
import sys
import urllib.parse
import urllib.request


class Control:
    def __init__(self, url, cacert=None):
        self.url = url.rstrip("/")
        self.ctx = None
        if self.url.startswith("https:"):
            self.ctx = ssl.create_default_context(cafile=cacert) if cacert else \
                ssl._create_unverified_context()

    def call(self, what, body=None, **params):
        q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/_control/{what}" + (f"?{q}" if q else "")
        data = None if body is None else json.dumps(body).encode()
        method = "GET" if what == "stats" else "POST"
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.ctx, timeout=120) as r:
            return json.loads(r.read())


def gen(pods, nodes=1, namespaces=1, services=0, endpointslices=0, netpols=0, cnps=0, ccnps=0):
    out = []
    for n in range(namespaces):
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns-{n}"}})
    for n in range(nodes):
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": f"node-{n}", "labels": {"kubernetes.io/hostname": f"node-{n}"}},
                    "spec": {"podCIDR": f"10.{n // 256}.{n % 256}.0/24"},
                    "status": {"addresses": [{"type": "InternalIP",
                                              "address": f"192.168.{n // 256}.{n % 256}"}],
                               "conditions": [{"type": "Ready", "status": "True"}]}})
    for i in range(pods):
        node = i % nodes
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"pod-{i}", "namespace": f"ns-{i % namespaces}",
                                 "labels": {"app": f"app-{i % 50}"}},
                    "spec": {"nodeName": f"node-{node}",
                             "containers": [{"name": "c", "image": "busybox"}]},
                    "status": {"phase": "Running",
                               "podIP": f"10.{node // 256}.{node % 256}.{(i // nodes) % 250 + 2}"}})
    for i in range(services):
        out.append({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": f"svc-{i}", "namespace": f"ns-{i % namespaces}"},
                    "spec": {"selector": {"app": f"app-{i % 50}"}, "ports": [{"port": 80}]}})
    for i in range(endpointslices):
        svc = f"svc-{i % services}" if services else f"svc-{i}"
        out.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": f"{svc}-{i // max(services, 1)}",
                                 "namespace": f"ns-{i % services % namespaces if services else i % namespaces}",
                                 "labels": {"kubernetes.io/service-name": svc}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [f"10.{j}.{i // 250 % 250}.{i % 250 + 2}"],
                                   "conditions": {"ready": True}, "nodeName": f"node-{j % nodes}"}
                                  for j in range(3)],
                    "ports": [{"name": "", "port": 80, "protocol": "TCP"}]})
    for i in range(netpols):
        out.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": f"np-{i}", "namespace": f"ns-{i % namespaces}"},
                    "spec": {"podSelector": {"matchLabels": {"app": f"app-{i % 50}"}},
                             "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                                          "ports": [{"port": 80, "protocol": "TCP"}]}]}})
    for i in range(cnps):
        out.append({"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                    "metadata": {"name": f"cnp-{i}", "namespace": f"ns-{i % namespaces}"},
                    "spec": {"endpointSelector": {"matchLabels": {"app": f"app-{i % 50}"}},
                             "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "client"}}],
                                          "toPorts": [{"ports": [{"port": "80",
                                                                  "protocol": "TCP"}]}]}]}})
    for i in range(ccnps):
        out.append({"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy",
                    "metadata": {"name": f"ccnp-{i}"},
                    "spec": {"endpointSelector": {"matchLabels": {"app": f"app-{i % 50}"}},
                             "egress": [{"toEntities": ["cluster"]}]}})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url")
    ap.add_argument("--cacert")
    ap.add_argument("what")
    ap.add_argument("args", nargs="*")
    ap.add_argument("--after", type=int)
    ap.add_argument("--code", type=int)
    ap.add_argument("--mode")
    ap.add_argument("--resource")
    ap.add_argument("--jump", type=int)
    ap.add_argument("--set", type=int)
    ap.add_argument("--rewrite", action="store_true")
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--value")
    ap.add_argument("--drop", action="store_true")
    ap.add_argument("--pods", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--namespaces", type=int, default=1)
    ap.add_argument("--services", type=int, default=0)
    ap.add_argument("--endpointslices", type=int, default=0)
    ap.add_argument("--netpols", type=int, default=0)
    ap.add_argument("--cnps", type=int, default=0)
    ap.add_argument("--ccnps", type=int, default=0)
    a = ap.parse_args()
    if a.what == "gen":
        json.dump(gen(a.pods, a.nodes, a.namespaces, a.services, a.endpointslices, a.netpols,
                      a.cnps, a.ccnps), sys.stdout)
        return
    if not a.url:
        ap.error("--url is needed")
    c = Control(a.url, a.cacert)
    if a.what == "load":
        with open(a.args[0]) as f:
            out = c.call("load", body=json.load(f))
    elif a.what == "config":
        out = c.call("config", body=dict(kv.split("=", 1) for kv in a.args))
    else:
        params = {"after": a.after, "code": a.code, "mode": a.mode, "resource": a.resource,
                  "jump": a.jump, "set": a.set, "seconds": a.seconds,
                  "rewrite": "1" if a.rewrite else None, "value": a.value,
                  "drop": "1" if a.drop else None}
        out = c.call(a.what, **params)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
