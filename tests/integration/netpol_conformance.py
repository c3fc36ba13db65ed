#!/usr/bin/env python3
"""tests/integration/netpol_conformance.py - the driver of
netpol_conformance.sh, in the style of the upstream Kubernetes
network-policy e2e tests: namespaces x, y, z with pods a, b, c (labels
pod=a|b|c, containers with named ports serve-80-tcp, serve-80-udp,
serve-81-tcp, serve-81-udp), each serving TCP and UDP on 80 and 81
(netpol_pod.py). For every scenario the policies go in through the test API
server (REST, as kubectl sends them) or `fibril policy import` (JSON or
YAML); the driver waits until the agent reports them in force, probes every
source on every pod, port and protocol at once (short timeouts, in
parallel), and compares the whole reachability matrix with the one the
scenario writes down. A mismatch is probed again (policies apply
asynchronously, as upstream's probes retry) before it fails. This file
holds the scenarios and runs them; netpol_lib.py the machinery.

Runs inside the node's network namespace. Environment: AGENT_SOCK, CLI,
K8S_URL, K8S_CA, K8S_TOKEN, CTL_DIR (the pods' control sockets:
CTL_DIR/NS-POD.sock, host.sock, world.sock), WORLD2_SRC, CNI_PLUGIN,
CNI_CONF, NEW_POD_NETNS (the namespace of pod x/d, created after a policy),
SUBSET (run only these scenario numbers, comma separated: ASan).

  netpol_conformance.py setup   namespaces and pods on the API server
  netpol_conformance.py run     every scenario; PASS:/FAIL: lines
  netpol_conformance.py probe SRC DST PORT PROTO   "ok" or "fail"
  netpol_conformance.py policies                  the k8s policies in force"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse

from netpol_lib import (  # the machinery: agent, API server, probes, matrices
    T80, T81, U81, Cluster, Reach, UnixHTTP, World, agent, ccnp, cli, cnp, compare, knp, kube,
    pod_object, probe_all, probe_row, relabel, render, sel, setup, wait_labels)


# ---- the scenarios -----------------------------------------------------------------------------

SCENARIOS = []


def scenario(title):
    def reg(fn):
        SCENARIOS.append((title, fn))
        return fn
    return reg


def pod_cidr(w):
    return ".".join(w.ips["x/a"].split(".")[:3]) + ".0/24"


DENY_ALL_IN = {"podSelector": {}, "policyTypes": ["Ingress"]}
DENY_ALL_OUT = {"podSelector": {}, "policyTypes": ["Egress"]}


def x_a_from(peers, ports=None):
    rule = {"from": peers}
    if ports:
        rule["ports"] = ports
    return knp("x", "x-a-in", {"podSelector": sel(pod="a"), "ingress": [rule]})


@scenario("no policy: every pod reaches every pod on every port")
def s_none(w, cl):
    return Reach(w)


@scenario("deny-all ingress in x")
def s_deny_in(w, cl):
    cl.apply(knp("x", "deny-in", DENY_ALL_IN))
    return Reach(w).deny(dsts="x/")


@scenario("deny-all egress in x")
def s_deny_out(w, cl):
    cl.apply(knp("x", "deny-out", DENY_ALL_OUT))
    return Reach(w).deny(srcs="x/")


@scenario("deny-all ingress and egress in x (YAML through fibril policy import)")
def s_deny_both(w, cl):
    cl.import_("""apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-both
  namespace: x
spec:
  podSelector: {}
  policyTypes:
  - Ingress
  - Egress
""")
    return Reach(w).deny(dsts="x/").deny(srcs="x/")


@scenario("allow-all ingress in x (ingress: [{}])")
def s_allow_all(w, cl):
    cl.apply(knp("x", "allow-in", {"podSelector": {}, "ingress": [{}]}))
    return Reach(w)


@scenario("deny-all and allow-all ingress in x unioned: allowed")
def s_union_allow(w, cl):
    cl.apply(knp("x", "deny-in", DENY_ALL_IN))
    cl.apply(knp("x", "allow-in", {"podSelector": {}, "ingress": [{}]}))
    return Reach(w)


@scenario("deny-all and allow-all egress in x unioned: allowed")
def s_union_allow_out(w, cl):
    cl.apply(knp("x", "deny-out", DENY_ALL_OUT))
    cl.apply(knp("x", "allow-out", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}))
    return Reach(w)


@scenario("x/a from pods pod=b of its namespace (podSelector)")
def s_pod_sel(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    return Reach(w).deny(dsts="x/a").allow(srcs="x/b", dsts="x/a")


@scenario("x/a from namespace ns=y (namespaceSelector)")
def s_ns_sel(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": sel(ns="y")}]))
    return Reach(w).deny(dsts="x/a").allow(srcs="y/", dsts="x/a")


@scenario("x/a from pod=c in namespace y (both selectors in one peer)")
def s_ns_and_pod(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": sel(ns="y"), "podSelector": sel(pod="c")}]))
    return Reach(w).deny(dsts="x/a").allow(srcs="y/c", dsts="x/a")


@scenario("x/a from namespace y or from pod=c of x (two peers)")
def s_ns_or_pod(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": sel(ns="y")}, {"podSelector": sel(pod="c")}]))
    return Reach(w).deny(dsts="x/a").allow(srcs=["y/", "x/c"], dsts="x/a")


@scenario("matchExpressions In: x/a from namespaces ns In [y, z]")
def s_expr_in(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": {"matchExpressions": [
        {"key": "ns", "operator": "In", "values": ["y", "z"]}]}}]))
    return Reach(w).deny(dsts="x/a").allow(srcs=["y/", "z/"], dsts="x/a")


@scenario("matchExpressions NotIn: x/a from pods of x with pod NotIn [b]")
def s_expr_notin(w, cl):
    cl.apply(x_a_from([{"podSelector": {"matchExpressions": [
        {"key": "pod", "operator": "NotIn", "values": ["b"]}]}}]))
    return Reach(w).deny(dsts="x/a").allow(srcs="x/c", dsts="x/a")


@scenario("matchExpressions Exists: x/a from namespaces that have a team label (y)")
def s_expr_exists(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "Exists"}]}}]))
    return Reach(w).deny(dsts="x/a").allow(srcs="y/", dsts="x/a")


@scenario("matchExpressions DoesNotExist and Exists together: namespaces without team")
def s_expr_dne(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "DoesNotExist"}]},
        "podSelector": {"matchExpressions": [{"key": "pod", "operator": "Exists"}]}}]))
    return Reach(w).deny(dsts="x/a").allow(srcs=["x/", "z/"], dsts="x/a")


@scenario("ports: x/a only on TCP 80 (protocol defaults to TCP)")
def s_port_tcp(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"), "ingress": [{"ports": [{"port": 80}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[T80])


@scenario("ports: x/a only on UDP 81")
def s_port_udp(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"),
                                 "ingress": [{"ports": [{"protocol": "UDP", "port": 81}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[U81])


@scenario("named port: x/a only on serve-81-udp (from its container ports)")
def s_named_in(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"), "ingress": [
        {"ports": [{"protocol": "UDP", "port": "serve-81-udp"}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[U81])


@scenario("named port egress: x/a reaches others only on serve-80-tcp (resolved per peer pod)")
def s_named_out(w, cl):
    cl.apply(knp("x", "x-a-out", {"podSelector": sel(pod="a"), "policyTypes": ["Egress"],
                                  "egress": [{"ports": [{"port": "serve-80-tcp"}]}]}))
    return Reach(w).deny(srcs="x/a").allow(srcs="x/a", ports=[T80])


@scenario("endPort: x/a on TCP 80-81")
def s_endport(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"), "ingress": [
        {"ports": [{"protocol": "TCP", "port": 80, "endPort": 81}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[T80, T81])


@scenario("endPort: x/a on TCP 81-1000 (80 stays out)")
def s_endport2(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"), "ingress": [
        {"ports": [{"protocol": "TCP", "port": 81, "endPort": 1000}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[T81])


@scenario("ipBlock with except: x/a from the pod CIDR except y/b")
def s_ipblock(w, cl):
    cl.apply(x_a_from([{"ipBlock": {"cidr": pod_cidr(w), "except": [w.ips["y/b"] + "/32"]}}]))
    return Reach(w).deny(srcs="y/b", dsts="x/a")


@scenario("ipBlock egress with except: x/a to the pod CIDR except z/c")
def s_ipblock_out(w, cl):
    cl.apply(knp("x", "x-a-out", {"podSelector": sel(pod="a"), "policyTypes": ["Egress"],
                                  "egress": [{"to": [{"ipBlock": {"cidr": pod_cidr(w), "except": [
                                      w.ips["z/c"] + "/32"]}}]}]}))
    return Reach(w).deny(srcs="x/a", dsts="z/c")


@scenario("two policies unioned: x/a from x/b and from namespace z")
def s_union(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    cl.apply(knp("x", "x-a-in-z", {"podSelector": sel(pod="a"),
                                   "ingress": [{"from": [{"namespaceSelector": sel(ns="z")}]}]}))
    return Reach(w).deny(dsts="x/a").allow(srcs=["x/b", "z/"], dsts="x/a")


@scenario("ingress and egress in one policy: x/a from x/b, to x/c")
def s_both(w, cl):
    cl.apply(knp("x", "x-a", {"podSelector": sel(pod="a"), "policyTypes": ["Ingress", "Egress"],
                              "ingress": [{"from": [{"podSelector": sel(pod="b")}]}],
                              "egress": [{"to": [{"podSelector": sel(pod="c")}]}]}))
    return Reach(w).deny(dsts="x/a").allow(srcs="x/b", dsts="x/a") \
        .deny(srcs="x/a").allow(srcs="x/a", dsts="x/c")


@scenario("policyTypes [Egress] leaves ingress open: its ingress rules do not apply")
def s_types(w, cl):
    cl.apply(knp("x", "x-a", {"podSelector": sel(pod="a"), "policyTypes": ["Egress"],
                              "ingress": [{"from": [{"podSelector": sel(pod="b")}]}],
                              "egress": [{}]}))
    return Reach(w)


@scenario("update: x/a from x/b becomes from x/c")
def s_update(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    cl.wait()
    cl.apply(x_a_from([{"podSelector": sel(pod="c")}]))
    return Reach(w).deny(dsts="x/a").allow(srcs="x/c", dsts="x/a")


@scenario("delete: the deny-all of x goes, every pod reachable again")
def s_delete(w, cl):
    cl.apply(knp("x", "deny-in", DENY_ALL_IN))
    cl.wait()
    if probe_all(w, ["y/a"]).get(("y/a", "x/b", 80, "tcp")) is not False:
        raise RuntimeError("the deny-all was not in force before the delete")
    cl.delete("NetworkPolicy", "x", "deny-in")
    return Reach(w)


@scenario("a pod relabelled into a selector: x/c becomes pod=b and reaches x/a")
def s_relabel_in(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    relabel_pod("x", "c", "b")
    return Reach(w).deny(dsts="x/a").allow(srcs=["x/b", "x/c"], dsts="x/a")


def relabel_pod(ns, pod, value):
    relabel("Pod", ns, pod, {"pod": value})
    wait_labels(ns, pod, f"k8s:pod={value}")


def label_back(ns, pod):
    """A cleanup giving ns/pod its own pod=POD label back."""
    return lambda w, cl: relabel_pod(ns, pod, pod)


s_relabel_in.cleanup = label_back("x", "c")


@scenario("a pod relabelled out of a selector: x/b becomes pod=e and loses x/a")
def s_relabel_out(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    cl.wait()
    relabel_pod("x", "b", "e")
    return Reach(w).deny(dsts="x/a")


s_relabel_out.cleanup = label_back("x", "b")


@scenario("a namespace relabelled into a selector: z gets team=blue")
def s_ns_relabel(w, cl):
    cl.apply(x_a_from([{"namespaceSelector": sel(team="blue")}]))
    cl.wait()
    relabel("Namespace", None, "z", {"team": "blue"})
    return Reach(w).deny(dsts="x/a").allow(srcs=["y/", "z/"], dsts="x/a")


def unlabel_z(w, cl):
    relabel("Namespace", None, "z", {"team": None})


s_ns_relabel.cleanup = unlabel_z


@scenario("SCTP only: x/a allows SCTP 80, so TCP and UDP are dropped")
def s_sctp(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"),
                                 "ingress": [{"ports": [{"protocol": "SCTP", "port": 80}]}]}))
    return Reach(w).deny(dsts="x/a")


@scenario("an empty from list means every source: x/a from [] on TCP 80")
def s_empty_from(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"),
                                 "ingress": [{"from": [], "ports": [{"port": 80}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[T80])


@scenario("several ports in one rule: x/a on TCP 80 and UDP 81")
def s_multi_ports(w, cl):
    cl.apply(knp("x", "x-a-in", {"podSelector": sel(pod="a"), "ingress": [
        {"ports": [{"protocol": "TCP", "port": 80}, {"protocol": "UDP", "port": 81}]}]}))
    return Reach(w).deny(dsts="x/a").allow(dsts="x/a", ports=[T80, U81])


@scenario("egress from x only to namespace y")
def s_egress_ns(w, cl):
    cl.apply(knp("x", "x-out", {"podSelector": {}, "policyTypes": ["Egress"],
                                "egress": [{"to": [{"namespaceSelector": sel(ns="y")}]}]}))
    return Reach(w).deny(srcs="x/").allow(srcs="x/", dsts="y/")


@scenario("YAML import: y/b from x/a only (namespaceSelector and podSelector)")
def s_yaml(w, cl):
    cl.import_("""kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: y-b-in, namespace: y}
spec:
  podSelector:
    matchLabels: {pod: b}
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {ns: x}
      podSelector:
        matchExpressions:
        - {key: pod, operator: In, values: [a]}
""")
    return Reach(w).deny(dsts="y/b").allow(srcs="x/a", dsts="y/b")


def wait_invalid_counted(before):
    """Until GET /v1/policy counts one more refused Kubernetes object."""
    for _ in range(100):
        _, after = agent("GET", "/v1/policy")
        if after["stats"]["k8s_invalid"] > before["stats"]["k8s_invalid"]:
            return
        time.sleep(0.05)  # sleep: the poll interval of a wait with a deadline
    raise RuntimeError("the invalid object was not counted (stats.k8s_invalid)")


@scenario("an invalid NetworkPolicy is refused and counted; the others keep applying")
def s_invalid(w, cl):
    _, before = agent("GET", "/v1/policy")
    kube("POST", "NetworkPolicy", "y", body=knp("y", "broken", {
        "podSelector": {"matchExpressions": [{"key": "pod", "operator": "Near", "values": ["a"]}]},
        "policyTypes": ["Ingress"]}))
    cl.apply(knp("x", "deny-in", DENY_ALL_IN))
    cl.wait()
    wait_invalid_counted(before)
    c = UnixHTTP(os.environ["AGENT_SOCK"])
    c.request("GET", "/metrics")
    metrics = c.getresponse().read().decode()
    c.close()
    if not re.search(r'^fibril_policy_k8s_objects_total\{resource="networkpolicies",'
                     r'result="invalid"\} [1-9]', metrics, re.M):
        raise RuntimeError("/metrics does not count the invalid policy")
    return Reach(w).deny(dsts="x/")


def delete_broken(w, cl):
    kube("DELETE", "NetworkPolicy", "y", "broken")


s_invalid.cleanup = delete_broken


@scenario("an update that makes a policy invalid keeps its previous version in force")
def s_invalid_update(w, cl):
    cl.apply(knp("x", "deny-in", DENY_ALL_IN))
    cl.wait()
    cur = kube("GET", "NetworkPolicy", "x", "deny-in")
    bad = knp("x", "deny-in", {"podSelector": {}, "policyTypes": ["Sideways"]})
    bad["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
    _, before = agent("GET", "/v1/policy")
    kube("PUT", "NetworkPolicy", "x", "deny-in", bad)  # cl.k8s keeps the valid version's rv
    wait_invalid_counted(before)
    return Reach(w).deny(dsts="x/")


@scenario("a pod created after the policy: x/d (pod=a) is selected at once")
def s_new_pod(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    cl.wait()
    kube("POST", "Pod", "x", body=pod_object("x", "d", {"pod": "a"}))
    conf = os.environ["CNI_CONF"]
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "netpol-x-d",
           "CNI_NETNS": "/var/run/netns/" + os.environ["NEW_POD_NETNS"], "CNI_IFNAME": "eth0",
           "CNI_ARGS": "K8S_POD_NAMESPACE=x;K8S_POD_NAME=d",
           "CNI_PATH": os.path.dirname(os.environ["CNI_PLUGIN"])}
    r = subprocess.run([os.environ["CNI_PLUGIN"]], input=conf, env=env, capture_output=True,
                       text=True)
    if r.returncode:
        raise RuntimeError("CNI ADD of x/d: " + r.stdout + r.stderr)
    wait_labels("x", "d", "k8s:pod=a")
    w.refresh()
    w.sources["x/d"] = (os.environ["CTL_DIR"] + "/x-d.sock", None)
    return Reach(w).deny(dsts=["x/a", "x/d"]).allow(srcs="x/b", dsts=["x/a", "x/d"])


s_new_pod.cleanup = label_back("x", "d")


# ---- CiliumNetworkPolicy / CCNP: also from the node (host) and from outside (world) ----------

@scenario("CNP fromEntities world: x/a only from outside the cluster")
def c_world(w, cl):
    cl.apply(cnp("x", "x-a-world", {"endpointSelector": sel(pod="a"),
                                    "ingress": [{"fromEntities": ["world"]}]}))
    return Reach(w, extra=True).deny(dsts="x/a").allow(srcs=["world", "world2"], dsts="x/a")


@scenario("CNP fromEntities host: x/a only from its node")
def c_host(w, cl):
    cl.apply(cnp("x", "x-a-host", {"endpointSelector": sel(pod="a"),
                                   "ingress": [{"fromEntities": ["host"]}]}))
    return Reach(w, extra=True).deny(dsts="x/a").allow(srcs="host", dsts="x/a")


@scenario("CNP fromEntities cluster: x/a from pods and the node, not from outside")
def c_cluster(w, cl):
    cl.apply(cnp("x", "x-a-cluster", {"endpointSelector": sel(pod="a"),
                                      "ingress": [{"fromEntities": ["cluster"]}]}))
    return Reach(w, extra=True).deny(srcs=["world", "world2"], dsts="x/a")


@scenario("CNP fromCIDRSet with except: x/a from the outside /24 except one address")
def c_cidrset(w, cl):
    net = os.environ["WORLD_NET"]
    cl.apply(cnp("x", "x-a-cidr", {"endpointSelector": sel(pod="a"), "ingress": [{"fromCIDRSet": [
        {"cidr": net, "except": [os.environ["WORLD2_SRC"] + "/32"]}]}]}))
    return Reach(w, extra=True).deny(dsts="x/a").allow(srcs="world", dsts="x/a")


@scenario("CNP L4-only (YAML import): x/a on TCP 80 from anyone, pods, node and outside")
def c_l4(w, cl):
    cl.import_("""apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata:
  name: x-a-l4
  namespace: x
spec:
  endpointSelector:
    matchLabels:
      pod: a
  ingress:
  - toPorts:
    - ports:
      - port: "80"
        protocol: TCP
""")
    return Reach(w, extra=True).deny(dsts="x/a").allow(dsts="x/a", ports=[T80])


@scenario("CNP deny over allow, ingress: x/a allows all, denies x/b")
def c_deny_in(w, cl):
    cl.apply(cnp("x", "x-a", {"endpointSelector": sel(pod="a"),
                              "ingress": [{"fromEntities": ["all"]}],
                              "ingressDeny": [{"fromEndpoints": [sel(pod="b")]}]}))
    return Reach(w, extra=True).deny(srcs="x/b", dsts="x/a")


@scenario("CNP deny over allow, egress: x/a reaches all but namespace y")
def c_deny_out(w, cl):
    cl.apply(cnp("x", "x-a", {"endpointSelector": sel(pod="a"),
                              "egress": [{"toEntities": ["all"]}],
                              "egressDeny": [{"toEndpoints": [
                                  {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "y"}}]}]}))
    return Reach(w, extra=True).deny(srcs="x/a", dsts="y/")


@scenario("CCNP: pod=a of every namespace only from pod=c of any namespace")
def c_ccnp(w, cl):
    cl.apply(ccnp("a-from-c", {"endpointSelector": sel(pod="a"),
                               "ingress": [{"fromEndpoints": [sel(pod="c")]}]}))
    return Reach(w, extra=True).deny(dsts=["x/a", "y/a", "z/a"]) \
        .allow(srcs=["x/c", "y/c", "z/c"], dsts=["x/a", "y/a", "z/a"])


@scenario("CNP named port: x/a on serve-81-tcp only")
def c_named(w, cl):
    cl.apply(cnp("x", "x-a-named", {"endpointSelector": sel(pod="a"), "ingress": [
        {"toPorts": [{"ports": [{"port": "serve-81-tcp", "protocol": "TCP"}]}]}]}))
    return Reach(w, extra=True).deny(dsts="x/a").allow(dsts="x/a", ports=[T81])


@scenario("NetworkPolicy allow and CNP deny of the same peer: the deny wins")
def c_mixed(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}]))
    cl.apply(cnp("x", "x-a-deny", {"endpointSelector": sel(pod="a"),
                                   "ingressDeny": [{"fromEndpoints": [sel(pod="b")]}]}))
    return Reach(w, extra=True).deny(dsts="x/a")


@scenario("CCNP through fibril policy import and CNP from the API server unioned")
def c_union(w, cl):
    cl.import_(json.dumps(ccnp("z-from-y", {"endpointSelector": sel(pod="b"), "ingress": [
        {"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "y"}}]}]})),
        suffix=".json")
    cl.apply(cnp("z", "z-b-host", {"endpointSelector": sel(pod="b"),
                                   "ingress": [{"fromEntities": ["host"]}]}))
    return Reach(w, extra=True).deny(dsts=["x/b", "y/b", "z/b"]) \
        .allow(srcs=["y/", "host"], dsts="z/b").allow(srcs="y/", dsts=["x/b", "y/b"])


# ---- the node's own traffic (allow-localhost) ------------------------------------------------

@scenario("deny-all ingress in x: the node still reaches every pod of x (kubelet probes)")
def h_deny_in(w, cl):
    cl.apply(knp("x", "deny-in", DENY_ALL_IN))
    return Reach(w, extra=True).deny(dsts="x/")


@scenario("x/a only from x/b on TCP 80: the node still reaches x/a on every port")
def h_from_b(w, cl):
    cl.apply(x_a_from([{"podSelector": sel(pod="b")}], [{"port": 80}]))
    return Reach(w, extra=True).deny(dsts="x/a").allow(srcs="x/b", dsts="x/a", ports=[T80])


@scenario("CNP ingressDeny fromEntities host: a deny naming the node wins over allow-localhost")
def h_deny_host(w, cl):
    cl.apply(cnp("x", "x-a-no-host", {"endpointSelector": sel(pod="a"),
                                      "ingress": [{"fromEntities": ["all"]}],
                                      "ingressDeny": [{"fromEntities": ["host"],
                                                       "toPorts": [{"ports": [
                                                           {"port": "81", "protocol": "ANY"}]}]}]}))
    return Reach(w, extra=True).deny_host(dsts="x/a", ports=[T81, U81])


# ---- policyTypes defaulting (SetDefaults_NetworkPolicy): absent or empty policyTypes is
# [Ingress], plus Egress only when the egress list is non-empty --------------------------------

@scenario("policyTypes [] and egress [] (API server): ingress isolated, egress open")
def d_empty_types(w, cl):
    cl.apply(knp("x", "pt-empty", {"podSelector": {}, "policyTypes": [], "egress": []}))
    return Reach(w).deny(dsts="x/")


@scenario("no policyTypes, egress [] (JSON import): only ingress from x/b, egress open")
def d_egress_empty_import(w, cl):
    cl.import_(json.dumps(knp("x", "pt-eg-empty", {
        "podSelector": {}, "ingress": [{"from": [{"podSelector": sel(pod="b")}]}],
        "egress": []})), suffix=".json")
    return Reach(w).deny(dsts="x/").allow(srcs="x/b", dsts="x/")


@scenario("no policyTypes, egress [] and ingress [] (YAML import): ingress isolated, egress open")
def d_both_empty_yaml(w, cl):
    cl.import_("""apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: pt-both-empty
  namespace: y
spec:
  podSelector:
    matchLabels:
      pod: a
  ingress: []
  egress: []
""")
    return Reach(w).deny(dsts="y/a")


@scenario("no policyTypes, ingress absent, egress to y (YAML import): both directions isolated")
def d_egress_rules_yaml(w, cl):
    cl.import_("""apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: pt-egress-y
  namespace: x
spec:
  podSelector:
    matchLabels:
      pod: a
  egress:
  - to:
    - namespaceSelector:
        matchLabels:
          ns: y
""")
    return Reach(w).deny(dsts="x/a").deny(srcs="x/a").allow(srcs="x/a", dsts="y/")


@scenario("policyTypes [] with egress rules (API server): Ingress and Egress")
def d_empty_types_egress(w, cl):
    cl.apply(knp("x", "pt-empty-eg", {"podSelector": sel(pod="a"), "policyTypes": [],
                                      "egress": [{"to": [{"podSelector": sel(pod="b")}]}]}))
    return Reach(w).deny(dsts="x/a").deny(srcs="x/a").allow(srcs="x/a", dsts="x/b")


@scenario("explicit policyTypes [Ingress] with egress rules (JSON import): egress open")
def d_explicit_ingress(w, cl):
    cl.import_(json.dumps(knp("x", "pt-in", {
        "podSelector": sel(pod="a"), "policyTypes": ["Ingress"],
        "egress": [{"to": [{"podSelector": sel(pod="b")}]}]})), suffix=".json")
    return Reach(w).deny(dsts="x/a")


def trace_disagreements(world, got):
    """`fibril policy trace` (GET /v1/policy/trace) on every cell probed: its
    verdict must be what the probe saw."""
    ends = {"host": "host", "world": "198.18.0.2", "world2": os.environ.get("WORLD2_SRC")}
    wrong = []
    for (src, dst, port, proto), ok in sorted(got.items()):
        if src == dst:
            continue
        q = urllib.parse.urlencode({"src": ends.get(src, src), "dst": dst,
                                    "dport": f"{port}/{proto}"})
        status, j = agent("GET", "/v1/policy/trace?" + q)
        verdict = j.get("verdict") if status == 200 else f"HTTP {status}: {j}"
        if verdict != ("allowed" if ok else "denied"):
            wrong.append(f"{src} -> {dst} {port}/{proto}: probe {'ok' if ok else 'dropped'}, "
                         f"trace {verdict}")
    # and the CLI's rendering of one cell
    r = cli("policy", "trace", "--src", "x/b", "--dst", "x/a", "--dport", "81/udp")
    want = "ALLOWED" if got.get(("x/b", "x/a", 81, "udp")) else "DENIED"
    if f"Final verdict: {want}" not in r.stdout:
        wrong.append(f"fibril policy trace x/b -> x/a 81/udp: want {want}, got: {r.stdout}{r.stderr}")
    return wrong


def run():
    world = World()
    cl = Cluster(world)
    subset = {int(n) for n in os.environ.get("SUBSET", "").split(",") if n}
    passed = failed = 0
    t0 = time.time()
    for i, (title, fn) in enumerate(SCENARIOS, 1):
        if subset and i not in subset:
            continue
        ts = time.time()
        try:
            exp = fn(world, cl)
            ok = cl.wait()
            world.refresh()
            for attempt in range(3):
                got = probe_all(world, exp.sources)
                wrong = compare(exp, got)
                if not wrong:
                    break
                time.sleep(0.5)  # sleep: a pause between the 3 tries of the probes (a poll with a deadline)
            if ok and not wrong and getattr(fn, "trace", False):
                tw = trace_disagreements(world, got)
                if tw:
                    failed += 1
                    print(f"FAIL: trace of scenario {i}: {title}: fibril policy trace disagrees "
                          f"with the probes on {len(tw)} cells")
                    for line in tw[:20]:
                        print("#   " + line)
                    continue
                print(f"PASS: trace of scenario {i}: fibril policy trace agrees with the probes on "
                      f"every cell")
            if ok and not wrong:
                passed += 1
                print(f"PASS: scenario {i}: {title} ({len(exp.m)} probes, "
                      f"{time.time() - ts:.1f}s)")
            else:
                failed += 1
                print(f"FAIL: scenario {i}: {title}: {len(wrong)} of {len(exp.m)} cells wrong "
                      "(X below; . reachable, - not; per cell TCP80 TCP81 UDP80 UDP81)")
                print(render(exp, got))
                # what the agent says of the first wrong cell
                (src, dst, port, proto), _, _ = wrong[0]
                ends = {"host": "host", "world": "198.18.0.2", "world2": os.environ.get("WORLD2_SRC")}
                r = cli("policy", "trace", "--src", ends.get(src, src), "--dst", dst, "--dport",
                        f"{port}/{proto}")
                for line in (r.stdout + r.stderr).splitlines():
                    print("#   " + line)
        except Exception as e:  # a scenario that cannot run is a failure, the rest go on
            failed += 1
            print(f"FAIL: scenario {i}: {title}: {type(e).__name__}: {e}")
        finally:
            try:
                cl.reset()
                post = getattr(fn, "cleanup", None)
                if post:
                    post(world, cl)
            except Exception as e:
                print(f"# cleanup after scenario {i}: {e}")
        sys.stdout.flush()
    print(f"# {passed} scenarios passed, {failed} failed in {time.time() - t0:.1f}s")
    return 1 if failed else 0


# `fibril policy trace` is checked against the probes of these
h_deny_in.trace = True
h_deny_host.trace = True
s_both.trace = True
s_named_out.trace = True
c_deny_in.trace = True
c_cidrset.trace = True
s_ipblock.trace = True


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1] == "setup":
        setup()
    elif sys.argv[1] == "run":
        sys.exit(run())
    elif sys.argv[1] == "probe":
        src, dst, port, proto = sys.argv[2:6]
        w = World()
        out = {}
        probe_row((w.sources.get(src) or w.extra[src])[0], None, [(dst, w.ips[dst], int(port), proto)], out, src)
        print("ok" if out.get((src, dst, int(port), proto)) else "fail")
    elif sys.argv[1] == "policies":
        _, j = agent("GET", "/v1/policy")
        print(" ".join(sorted(f"{p['namespace']}/{p['name']}" for p in j["policies"]
                              if p.get("source") == "k8s")))
