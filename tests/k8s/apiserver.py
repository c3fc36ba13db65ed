#!/usr/bin/env python3
# tests/k8s/apiserver.py - a fake kube-apiserver for the tests (python3 stdlib
# only). It speaks the real wire format: discovery (/api, /apis, /version),
# LIST with resourceVersion and limit/continue, chunked WATCH streams with
# bookmarks and 410 Expired, bearer-token auth, create/update/patch/delete,
# status subresources and server-side Table output, so the real kubectl works
# against it. Test-only fault injection and bulk loading live under
# /_control/ (see tests/k8s/README.md and tests/k8s/control.py).
#
#   apiserver.py --port 0 [--token T] [--tls-cert C --tls-key K] [--load FILE]
#
# prints "LISTENING <port>" as its first stdout line once it accepts connections.
import argparse
import base64
import bisect
import copy
import datetime
import gzip
import ipaddress
import json
import os
import re
import select
import socket
import ssl
import sys
import threading
import time
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import apiserver_crd

# ---------------------------------------------------------------- resources

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class Res:
    def __init__(self, group, version, name, kind, namespaced, short=(), status=True,
                 categories=(), builtin=True, generation=False):
        self.group, self.version, self.name, self.kind = group, version, name, kind
        self.namespaced, self.short, self.status = namespaced, list(short), status
        self.categories, self.builtin, self.generation = list(categories), builtin, generation
        self.api_version = f"{group}/{version}" if group else version
        self.singular = kind.lower()
        # items of a built-in typed list carry no kind/apiVersion; CR lists do
        self.list_kind = kind + "List"


RESOURCES = [
    Res("", "v1", "namespaces", "Namespace", False, ["ns"]),
    Res("", "v1", "nodes", "Node", False, ["no"]),
    Res("", "v1", "pods", "Pod", True, ["po"], categories=["all"]),
    Res("", "v1", "services", "Service", True, ["svc"], categories=["all"]),
    Res("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, status=False,
        generation=True),
    Res("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ["netpol"],
        status=False, generation=True),
    Res("cilium.io", "v2", "ciliumnetworkpolicies", "CiliumNetworkPolicy", True,
        ["cnp", "ciliumnp"], categories=["cilium", "ciliumpolicy"], builtin=False, generation=True),
    Res("cilium.io", "v2", "ciliumclusterwidenetworkpolicies", "CiliumClusterwideNetworkPolicy",
        False, ["ccnp"], categories=["cilium", "ciliumpolicy"], builtin=False, generation=True),
    # CRD mode (identity-allocation = crd): Cilium's kinds, as its CRDs declare them
    Res("cilium.io", "v2", "ciliumidentities", "CiliumIdentity", False, ["ciliumid"],
        status=False, categories=["cilium"], builtin=False),
    Res("cilium.io", "v2", "ciliumendpoints", "CiliumEndpoint", True, ["cep", "ciliumep"],
        status=False, categories=["cilium"], builtin=False),
    Res("cilium.io", "v2", "ciliumnodes", "CiliumNode", False, ["cn", "ciliumn"],
        categories=["cilium"], builtin=False),
    Res("coordination.k8s.io", "v1", "leases", "Lease", True, status=False),
    # the kinds of deploy/kubernetes/fibril.yaml (checked by k8s_rbac.sh)
    Res("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"], status=False),
    Res("", "v1", "configmaps", "ConfigMap", True, ["cm"], status=False),
    Res("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], generation=True),
    Res("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, status=False),
    Res("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False,
        status=False),
    Res("rbac.authorization.k8s.io", "v1", "roles", "Role", True, status=False),
    Res("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, status=False),
    # deploy/kubernetes/crds.yaml (validated against the kinds served above)
    Res("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        False, ["crd", "crds"], generation=True),
]
BY_GV = {}      # (group, version) -> {name: Res}
BY_KIND = {}    # (apiVersion, kind) -> Res
for _r in RESOURCES:
    BY_GV.setdefault((_r.group, _r.version), {})[_r.name] = _r
    BY_KIND[(_r.api_version, _r.kind)] = _r

GROUP_ORDER = ["apiextensions.k8s.io", "apps", "rbac.authorization.k8s.io", "discovery.k8s.io", "networking.k8s.io",
               "coordination.k8s.io", "cilium.io"]

# ---------------------------------------------------------------- helpers


def dumps(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def now_ts():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ts(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return None


def age(ts):
    t = parse_ts(ts)
    if t is None:
        return "<unknown>"
    s = int((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())
    if s < 120:
        return f"{max(s, 0)}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            st["details"] = self.details
        return st


def not_found(res, name):
    gr = res.name if not res.group else f"{res.name}.{res.group}"
    return ApiError(404, "NotFound", f'{gr} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.name})


def expired(msg):
    return ApiError(410, "Expired", msg)


NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def get_path(obj, dotted):
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


# ------------------------------------------------------------- selectors

def parse_field_selector(s):
    """[(path, op, value)] for 'a=b,c!=d' (op '=' or '!=')."""
    out = []
    if not s:
        return out
    for term in s.split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "==" in term:
            k, v = term.split("==", 1)
            out.append((k.strip(), "=", v.strip()))
        elif "=" in term:
            k, v = term.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        else:
            raise ApiError(400, "BadRequest", f'invalid field selector: "{s}"')
    return out


def field_match(obj, sel):
    for path, op, val in sel:
        got = get_path(obj, path)
        got = "" if got is None else str(got)
        if (got == val) != (op == "="):
            return False
    return True


def split_terms(s):
    terms, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


SET_RE = re.compile(r"^([A-Za-z0-9./_-]+)\s+(in|notin)\s*\((.*)\)$")


def parse_label_selector(s):
    out = []
    if not s:
        return out
    for t in split_terms(s):
        m = SET_RE.match(t)
        if m:
            vals = {v.strip() for v in m.group(3).split(",") if v.strip()}
            out.append((m.group(1), m.group(2), vals))
        elif t.startswith("!"):
            out.append((t[1:].strip(), "!exists", None))
        elif "!=" in t:
            k, v = t.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "==" in t:
            k, v = t.split("==", 1)
            out.append((k.strip(), "=", v.strip()))
        elif "=" in t:
            k, v = t.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif re.match(r"^[A-Za-z0-9./_-]+$", t):
            out.append((t, "exists", None))
        else:
            raise ApiError(400, "BadRequest", f'unable to parse requirement: "{t}"')
    return out


def label_match(obj, sel):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for k, op, v in sel:
        has = k in labels
        val = labels.get(k)
        if op == "=" and val != v:
            return False
        if op == "!=" and val == v:
            return False
        if op == "in" and val not in v:
            return False
        if op == "notin" and has and val in v:
            return False
        if op == "exists" and not has:
            return False
        if op == "!exists" and has:
            return False
    return True


class Filter:
    def __init__(self, ns, fsel, lsel):
        self.ns, self.fsel, self.lsel = ns, fsel, lsel
        self.trivial = not fsel and not lsel

    def match(self, key, obj):
        if self.ns is not None and key[0] != self.ns:
            return False
        if self.trivial:
            return True
        return field_match(obj, self.fsel) and label_match(obj, self.lsel)


# ------------------------------------------------------------- patches

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):       # strategic-merge-patch directives
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, list):
            cur = cur[int(p)]
        elif isinstance(cur, dict):
            cur = cur[p]
        else:
            raise KeyError(p)
    return cur


def json_patch(doc, ops):
    doc = copy.deepcopy(doc)
    try:
        for op in ops:
            kind, parts = op.get("op"), _ptr(op.get("path", ""))
            if kind in ("move", "copy"):
                src = _ptr(op["from"])
                val = copy.deepcopy(_walk(doc, src))
                if kind == "move":
                    par = _walk(doc, src[:-1])
                    if isinstance(par, list):
                        par.pop(int(src[-1]))
                    else:
                        del par[src[-1]]
                kind, op = "add", {"value": val}
            if kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ApiError(422, "Invalid", "json patch test operation failed")
                continue
            if not parts:
                if kind in ("add", "replace"):
                    doc = copy.deepcopy(op["value"])
                    continue
                raise ApiError(422, "Invalid", "cannot remove the document root")
            par = _walk(doc, parts[:-1])
            last = parts[-1]
            if kind == "add":
                if isinstance(par, list):
                    par.insert(len(par) if last == "-" else int(last), copy.deepcopy(op["value"]))
                else:
                    par[last] = copy.deepcopy(op["value"])
            elif kind == "replace":
                if isinstance(par, list):
                    par[int(last)] = copy.deepcopy(op["value"])
                else:
                    if last not in par:
                        raise KeyError(last)
                    par[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if isinstance(par, list):
                    par.pop(int(last))
                else:
                    del par[last]
            else:
                raise ApiError(422, "Invalid", f"unsupported json patch op {kind!r}")
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise ApiError(422, "Invalid", f"the json patch could not be applied: {e}")
    return doc


# ------------------------------------------------------------- storage

class Entry:
    __slots__ = ("obj", "item", "full", "rv")

    def __init__(self, res, obj):
        self.obj = obj
        self.rv = int(obj["metadata"]["resourceVersion"])
        rest = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        body = dumps(rest)
        prefix = b'{"kind":"%s","apiVersion":"%s"' % (res.kind.encode(), res.api_version.encode())
        self.full = prefix + (b"," + body[1:] if len(body) > 2 else b"}")
        self.item = body if res.builtin else self.full


class Event:
    __slots__ = ("rv", "type", "key", "obj", "old", "line")

    def __init__(self, rv, typ, key, entry, old):
        self.rv, self.type, self.key, self.obj, self.old = rv, typ, key, entry.obj, old
        self.line = b'{"type":"%s","object":%s}\n' % (typ.encode(), entry.full)


class Watcher:
    def __init__(self, res, flt):
        self.res, self.flt = res, flt
        self.queue = []
        self.dropped = False
        self.error = None          # Status dict to send as an ERROR event, then end
        self.drop_after = None     # drop abruptly after this many more events
        self.stalled = False       # a dead peer: write nothing more, never close
        self.raw = []              # raw lines to write as they are (bad-line faults)
        self.end_after_raw = False # end the stream cleanly once raw is written


class Store:
    def __init__(self, history):
        self.cond = threading.Condition()
        self.rv = 0
        self.objects = {r.name: {} for r in RESOURCES}
        self.sorted_keys = {r.name: None for r in RESOURCES}
        self.history = {r.name: deque() for r in RESOURCES}
        self.compacted = {r.name: 0 for r in RESOURCES}   # watch/list from rv < this -> 410
        self.history_max = history
        self.watchers = set()
        self.next_ip = None
        self.used_ips = set()
        self.next_nodeport = 30000
        self.gc = None             # apiserver_crd.OwnerGC: told of every change (commit)

    # -- all callers hold self.cond --
    def keys(self, res):
        ks = self.sorted_keys[res.name]
        if ks is None:
            ks = sorted(self.objects[res.name])
            self.sorted_keys[res.name] = ks
        return ks

    def commit(self, res, key, typ, obj, old):
        """Store obj (already carrying its new resourceVersion) and fan the event out."""
        objs = self.objects[res.name]
        entry = Entry(res, obj)
        if typ == "DELETED":
            objs.pop(key, None)
            self.sorted_keys[res.name] = None
        else:
            if key not in objs:
                self.sorted_keys[res.name] = None
            objs[key] = entry
        ev = Event(entry.rv, typ, key, entry, old)
        hist = self.history[res.name]
        hist.append(ev)
        while len(hist) > self.history_max:
            dropped = hist.popleft()
            self.compacted[res.name] = dropped.rv
        for w in self.watchers:
            if w.res is res:
                w.queue.append(ev)
        if self.gc:
            self.gc.note(res, key, typ, obj, old)
        self.cond.notify_all()
        return entry

    def next_rv(self):
        self.rv += 1
        return self.rv


# ------------------------------------------------------------- server state

class State:
    def __init__(self, args):
        self.args = args
        self.store = Store(args.history)
        self.config = {
            "bookmark_interval": args.bookmark_interval,
            "watch_timeout": args.watch_timeout,
            "expired_watch": "event",     # too-old watch: "event" (200 + ERROR 410) or "http" (410)
            "max_page": 0,                # cap every LIST page (0: no cap); forces continue tokens
            "list_delay": 0.0,            # seconds to sleep before answering a LIST
            "list_delay_endpointslices": 0.0,  # more of it for EndpointSlices only
            "lenient_status": args.lenient_status,
            "no_cilium": args.no_cilium,  # the cilium.io CRDs are not installed: 404
            "pod_grace_seconds": args.pod_grace_seconds,  # 0: pods go at once on delete
            "gzip": True,                 # gzip answers > 128 KiB to clients accepting gzip
            "hold_watches": False,        # open watches queue their events until set back
            "stall_watches": False,       # new watches answer nothing at all (no headers)
            "expire_every_watch": False,  # every watch from a resourceVersion is expired (410)
            "missing_crds": [],           # these custom resources' CRDs are not installed: 404
            "gc_delay": 0.05,             # seconds before the collector deletes orphaned dependents
            "write_delay": 0.0,           # each write waits a random 0..this before committing
        }
        self.paused_until = 0.0
        self.stopping = False
        self.server = None
        self.conns = set()
        self.conns_lock = threading.Lock()
        self.requests = 0
        self.service_net = ipaddress.ip_network(args.service_cidr)
        self.token = args.token
        # --record FILE, else $FIBRIL_K8S_REQUEST_LOG_DIR/requests-PID.log (tests/lib/common.sh)
        log_dir = os.environ.get("FIBRIL_K8S_REQUEST_LOG_DIR")
        self.record = args.record or (log_dir and os.path.join(log_dir, f"requests-{os.getpid()}.log"))
        self.record_lock = threading.Lock()


STATE = None


def _meta(obj):
    md = obj.get("metadata")
    if not isinstance(md, dict):
        md = {}
        obj["metadata"] = md
    return md


def apply_defaults(st, res, obj, old=None):
    """Server-side defaults of a new object (old is None) or an update."""
    md = _meta(obj)
    store = st.store
    if res.name == "namespaces":
        md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        if old is None:
            obj["status"] = {"phase": "Active"}
    elif res.name == "pods" and old is None:
        if not st.config["lenient_status"] or not obj.get("status"):
            obj["status"] = {"phase": "Pending"}
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
    elif res.name == "services":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            if "port" in p:
                p.setdefault("targetPort", p["port"])
            if spec["type"] in ("NodePort", "LoadBalancer") and "nodePort" not in p:
                p["nodePort"] = store.next_nodeport
                store.next_nodeport += 1
        if spec["type"] != "ExternalName":
            if old is not None and "clusterIP" not in spec:
                spec["clusterIP"] = old.get("spec", {}).get("clusterIP")
                if old.get("spec", {}).get("clusterIPs"):
                    spec["clusterIPs"] = old["spec"]["clusterIPs"]
            if not spec.get("clusterIP"):
                spec["clusterIP"] = alloc_ip(st)
            if spec["clusterIP"] != "None":
                store.used_ips.add(spec["clusterIP"])
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if old is None and (not st.config["lenient_status"] or not obj.get("status")):
            obj["status"] = {"loadBalancer": {}}
    elif res.name == "networkpolicies":
        spec = obj.setdefault("spec", {})
        if "policyTypes" not in spec:
            spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
    elif not res.builtin and res.status and old is None and not st.config["lenient_status"]:
        # a custom resource with a status subresource takes no status on
        # create; one without (CiliumEndpoint) keeps it, as the real server
        obj.pop("status", None)


def alloc_ip(st):
    store = st.store
    net = st.service_net
    if store.next_ip is None:
        store.next_ip = int(net.network_address) + 10
    while True:
        cand = ipaddress.ip_address(store.next_ip)
        store.next_ip += 1
        if cand not in net or store.next_ip >= int(net.broadcast_address):
            raise ApiError(500, "InternalError", "service IP range exhausted")
        if str(cand) not in store.used_ips:
            return str(cand)


def _invalid(res, obj, field, why):
    name = (obj.get("metadata") or {}).get("name", "")
    raise ApiError(422, "Invalid", f'{res.kind}.{res.group or "core"} "{name}" is invalid: '
                   f"{field}: {why}")


def validate_object(res, obj):
    """What the real server's validation refuses in the deploy kinds (a subset:
    the mistakes a manifest makes): DaemonSet selector vs template labels,
    containers' name/image, volumeMounts naming a declared volume, a
    ConfigMap key volume, RBAC rules and a binding's roleRef and subjects."""
    apiserver_crd.validate_owner_refs(res, obj, _invalid)
    spec = obj.get("spec") or {}
    if res.name == "leases":
        apiserver_crd.validate_lease(res, obj, _invalid)
    elif res.name == "daemonsets":
        sel = (spec.get("selector") or {}).get("matchLabels")
        if not sel:
            _invalid(res, obj, "spec.selector", "Required value")
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in sel.items()):
            _invalid(res, obj, "spec.template.metadata.labels",
                     "Invalid value: `selector` does not match template `labels`")
        pod = (spec.get("template") or {}).get("spec") or {}
        volumes = {v.get("name") for v in pod.get("volumes") or []}
        if not pod.get("containers"):
            _invalid(res, obj, "spec.template.spec.containers", "Required value")
        seen = set()
        for kind in ("initContainers", "containers"):
            for i, c in enumerate(pod.get(kind) or []):
                where = f"spec.template.spec.{kind}[{i}]"
                if not c.get("name") or c["name"] in seen:
                    _invalid(res, obj, where + ".name", "Required value or Duplicate value")
                seen.add(c["name"])
                if not c.get("image"):
                    _invalid(res, obj, where + ".image", "Required value")
                for j, m in enumerate(c.get("volumeMounts") or []):
                    if m.get("name") not in volumes:
                        _invalid(res, obj, f"{where}.volumeMounts[{j}].name",
                                 f'Not found: "{m.get("name")}"')
                    if not str(m.get("mountPath", "")).startswith("/"):
                        _invalid(res, obj, f"{where}.volumeMounts[{j}].mountPath", "Required value")
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    p = c.get(probe)
                    if p is not None and not any(k in p for k in ("httpGet", "tcpSocket", "exec", "grpc")):
                        _invalid(res, obj, f"{where}.{probe}", "Required value: must specify a handler type")
    elif res.name == "customresourcedefinitions":
        apiserver_crd.validate_crd(res, obj, _invalid, BY_GV)
    elif res.name in ("clusterroles", "roles"):
        for i, r in enumerate(obj.get("rules") or []):
            if not r.get("verbs"):
                _invalid(res, obj, f"rules[{i}].verbs", "Required value: verbs must contain at least one value")
            if not r.get("nonResourceURLs") and (r.get("apiGroups") is None or not r.get("resources")):
                _invalid(res, obj, f"rules[{i}].apiGroups", "Required value: resource rules must supply "
                         "at least one api group and resource")
    elif res.name in ("clusterrolebindings", "rolebindings"):
        ref = obj.get("roleRef") or {}
        if ref.get("kind") not in ("ClusterRole", "Role") or not ref.get("name") or \
                ref.get("apiGroup") != "rbac.authorization.k8s.io":
            _invalid(res, obj, "roleRef", "Invalid value")
        for i, sub in enumerate(obj.get("subjects") or []):
            if sub.get("kind") == "ServiceAccount" and not sub.get("namespace"):
                _invalid(res, obj, f"subjects[{i}].namespace", "Required value")


def new_object(st, res, ns, body, dry_run=False, check_ns=True, fresh=False):
    """Validate and create; returns the Entry. Caller holds the lock. fresh: body
    is ours to keep (no copy)."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
    if body.get("kind") and body["kind"] != res.kind:
        raise ApiError(400, "BadRequest",
                       f"the server could not create {body['kind']} in {res.name}")
    if body.get("apiVersion") and body["apiVersion"] != res.api_version:
        raise ApiError(400, "BadRequest",
                       f"the API version in the data ({body['apiVersion']}) does not match "
                       f"the expected API version ({res.api_version})")
    obj = body if fresh else copy.deepcopy(body)
    md = _meta(obj)
    if not md.get("name") and md.get("generateName"):
        md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
    name = md.get("name")
    if not name:
        raise ApiError(422, "Invalid", f"{res.kind} \"\" is invalid: metadata.name: "
                       "Required value: name or generateName is required")
    if not NAME_RE.match(name) or len(name) > 253:
        raise ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: metadata.name: '
                       f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist '
                       "of lower case alphanumeric characters, '-' or '.'")
    if res.namespaced:
        if md.get("namespace") and ns and md["namespace"] != ns:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not "
                           "match the namespace sent on the request")
        ns = ns or md.get("namespace") or "default"
        md["namespace"] = ns
        if check_ns and ("", ns) not in st.store.objects["namespaces"]:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                           {"name": ns, "kind": "namespaces"})
    else:
        md.pop("namespace", None)
        ns = ""
    key = (ns, name)
    store = st.store
    if key in store.objects[res.name]:
        gr = res.name if not res.group else f"{res.name}.{res.group}"
        raise ApiError(409, "AlreadyExists", f'{gr} "{name}" already exists',
                       {"name": name, "group": res.group, "kind": res.name})
    obj["kind"], obj["apiVersion"] = res.kind, res.api_version
    for f in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
        md.pop(f, None)
    md["uid"] = str(uuid.uuid4())
    md["creationTimestamp"] = now_ts()
    if res.generation:
        md["generation"] = 1
    apply_defaults(st, res, obj)
    validate_object(res, obj)
    if dry_run:
        md["resourceVersion"] = str(store.rv)
        return Entry(res, obj)
    md["resourceVersion"] = str(store.next_rv())
    return store.commit(res, key, "ADDED", obj, None)


def delete_object(st, res, key, dry_run=False, preconditions=None):
    store = st.store
    entry = store.objects[res.name].get(key)
    if entry is None:
        raise not_found(res, key[1])
    if preconditions:
        md = entry.obj["metadata"]
        if preconditions.get("uid") and preconditions["uid"] != md.get("uid"):
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: "
                           f"{preconditions['uid']}, UID in object meta: {md.get('uid')}")
        if preconditions.get("resourceVersion") and \
                preconditions["resourceVersion"] != md.get("resourceVersion"):
            raise ApiError(409, "Conflict", "Precondition failed: ResourceVersion in "
                           f"precondition: {preconditions['resourceVersion']}, "
                           f"ResourceVersion in object meta: {md.get('resourceVersion')}")
    if dry_run:
        return entry, False
    obj = copy.deepcopy(entry.obj)
    md = obj["metadata"]
    if md.get("finalizers"):
        if md.get("deletionTimestamp"):
            return entry, False
        md["deletionTimestamp"] = now_ts()
        md["deletionGracePeriodSeconds"] = 0
        md["resourceVersion"] = str(store.next_rv())
        return store.commit(res, key, "MODIFIED", obj, entry.obj), False
    grace = st.config["pod_grace_seconds"]
    if res.name == "pods" and grace > 0 and obj.get("spec", {}).get("nodeName"):
        # graceful: deletionTimestamp now (MODIFIED), the "kubelet" removes it after grace seconds
        if md.get("deletionTimestamp"):
            return entry, False
        md["deletionTimestamp"] = now_ts()
        md["deletionGracePeriodSeconds"] = int(grace) if grace == int(grace) else grace
        md["resourceVersion"] = str(store.next_rv())
        uid = md.get("uid")

        def finish():
            with store.cond:
                cur = store.objects[res.name].get(key)
                if cur is not None and cur.obj["metadata"].get("uid") == uid:
                    force_delete(st, res, key)
        t = threading.Timer(grace, finish)
        t.daemon = True
        t.start()
        return store.commit(res, key, "MODIFIED", obj, entry.obj), False
    if res.name == "namespaces":
        # the namespace controller's job, done at once: Terminating, content gone, namespace gone
        md["deletionTimestamp"] = now_ts()
        obj["status"] = {"phase": "Terminating"}
        md["resourceVersion"] = str(store.next_rv())
        prev = store.commit(res, key, "MODIFIED", obj, entry.obj)
        for r in RESOURCES:
            if r.namespaced:
                for k in [k for k in store.objects[r.name] if k[0] == key[1]]:
                    force_delete(st, r, k)
        obj = copy.deepcopy(prev.obj)
        obj["metadata"]["resourceVersion"] = str(store.next_rv())
        return store.commit(res, key, "DELETED", obj, prev.obj), True
    md["resourceVersion"] = str(store.next_rv())
    if res.name == "services":
        store.used_ips.discard(obj.get("spec", {}).get("clusterIP"))
    return store.commit(res, key, "DELETED", obj, entry.obj), True


def force_delete(st, res, key):
    store = st.store
    entry = store.objects[res.name][key]
    obj = copy.deepcopy(entry.obj)
    obj["metadata"]["resourceVersion"] = str(store.next_rv())
    store.commit(res, key, "DELETED", obj, entry.obj)


def update_object(st, res, key, new, sub=None, dry_run=False, force_rv_check=True):
    """Replace the object at key with new (a full object). Caller holds the lock."""
    store = st.store
    entry = store.objects[res.name].get(key)
    if entry is None:
        raise not_found(res, key[1])
    old = entry.obj
    if not isinstance(new, dict):
        raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
    if new.get("kind") and new["kind"] != res.kind:
        raise ApiError(400, "BadRequest", f"the kind {new['kind']} does not match {res.kind}")
    new = copy.deepcopy(new)
    md = _meta(new)
    if md.get("name") and md["name"] != key[1]:
        raise ApiError(400, "BadRequest", "the name of the object "
                       f"({md['name']}) does not match the name on the URL ({key[1]})")
    if res.namespaced and md.get("namespace") and md["namespace"] != key[0]:
        raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                       "the namespace sent on the request")
    rv = md.get("resourceVersion")
    if force_rv_check:
        apiserver_crd.require_update_rv(res, key, rv, ApiError)
    if rv and force_rv_check and rv != old["metadata"]["resourceVersion"]:
        gr = res.name if not res.group else f"{res.name}.{res.group}"
        raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {gr} "{key[1]}": the '
                       "object has been modified; please apply your changes to the latest "
                       "version and try again", {"name": key[1], "group": res.group,
                                                 "kind": res.name})
    omd = old["metadata"]
    if sub == "status":
        # a status write changes only .status
        obj = copy.deepcopy(old)
        if "status" in new:
            obj["status"] = new["status"]
        else:
            obj.pop("status", None)
    else:
        obj = new
        validate_object(res, obj)
        if res.status and not (res.name == "namespaces" and sub == "finalize"):
            if "status" in old:
                obj["status"] = copy.deepcopy(old["status"])
            else:
                obj.pop("status", None)
        if sub == "finalize":
            obj["status"] = copy.deepcopy(old.get("status"))
        nmd = obj["metadata"]
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generation"):
            if f in omd:
                nmd[f] = omd[f]
            else:
                nmd.pop(f, None)
        nmd["name"] = key[1]
        if res.namespaced:
            nmd["namespace"] = key[0]
        else:
            nmd.pop("namespace", None)
        apply_defaults(st, res, obj, old)
    obj["kind"], obj["apiVersion"] = res.kind, res.api_version
    obj["metadata"]["resourceVersion"] = omd["resourceVersion"]
    obj["metadata"].pop("managedFields", None)
    if obj == old:
        return entry                        # no-op: no new resourceVersion, no event
    if res.generation and sub != "status":
        def spec_of(o):
            return {k: v for k, v in o.items() if k not in ("metadata", "status")}
        if spec_of(obj) != spec_of(old):
            obj["metadata"]["generation"] = omd.get("generation", 1) + 1
    if dry_run:
        return Entry(res, obj)
    obj["metadata"]["resourceVersion"] = str(store.next_rv())
    if omd.get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
        return store.commit(res, key, "DELETED", obj, old)
    return store.commit(res, key, "MODIFIED", obj, old)


def load_objects(st, items, events=True):
    """Bulk-load objects (from /_control/load or --load); existing ones are replaced."""
    store = st.store
    n = 0
    with store.cond:
        for body in items:
            res = BY_KIND.get((body.get("apiVersion"), body.get("kind")))
            if res is None:
                raise ApiError(400, "BadRequest",
                               f"unknown kind {body.get('apiVersion')}/{body.get('kind')}")
            md = body.get("metadata") or {}
            key = (md.get("namespace", "default") if res.namespaced else "", md.get("name"))
            if res.namespaced and ("", key[0]) not in store.objects["namespaces"]:
                new_object(st, BY_KIND[("v1", "Namespace")], None,
                           {"metadata": {"name": key[0]}}, check_ns=False)
            if key in store.objects[res.name]:
                b = copy.deepcopy(body)
                b["metadata"].pop("resourceVersion", None)
                update_object(st, res, key, b, force_rv_check=False)
                if "status" in body:
                    update_object(st, res, key, {"status": body["status"]}, sub="status",
                                  force_rv_check=False)
            else:
                saved = st.config["lenient_status"]
                st.config["lenient_status"] = True      # bulk loads keep .status
                try:
                    new_object(st, res, key[0], body, check_ns=False, fresh=True)
                finally:
                    st.config["lenient_status"] = saved
            n += 1
    return n


# ------------------------------------------------------------- discovery docs

def missing_crd(group, version, rest):
    """The path names a custom resource whose CRD config missing_crds says is
    not installed (rest: the path after /apis/GROUP/VERSION)."""
    gv = BY_GV[(group, version)]
    parts = rest[1:] if rest[:1] == ["watch"] else rest
    if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] in gv:
        parts = parts[2:]
    res = gv.get(parts[0]) if parts else None
    return res is not None and not res.builtin and res.name in STATE.config["missing_crds"]


def api_resource_list(group, version):
    out = []
    for r in BY_GV[(group, version)].values():
        if r.name in STATE.config["missing_crds"] and not r.builtin:
            continue
        d = {"name": r.name, "singularName": r.singular, "namespaced": r.namespaced,
             "kind": r.kind, "verbs": VERBS}
        if r.short:
            d["shortNames"] = r.short
        if r.categories:
            d["categories"] = r.categories
        out.append(d)
        if r.status:
            out.append({"name": r.name + "/status", "singularName": "", "namespaced": r.namespaced,
                        "kind": r.kind, "verbs": ["get", "patch", "update"]})
        if r.name == "namespaces":
            out.append({"name": "namespaces/finalize", "singularName": "", "namespaced": False,
                        "kind": "Namespace", "verbs": ["update"]})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


def api_group(g):
    versions = sorted({v for (gg, v) in BY_GV if gg == g})
    vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs,
            "preferredVersion": vs[0]}


def api_group_list():
    groups = []
    for g in GROUP_ORDER:
        d = api_group(g)
        del d["kind"], d["apiVersion"]
        groups.append(d)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


# ------------------------------------------------------------- openapi v3
# Just enough for kubectl: the root lists every group-version; a group-version
# document has, per resource, a PATCH operation tagged with its GVK and the
# fieldValidation query parameter, so kubectl's default --validate=strict
# picks server-side field validation instead of downloading schemas. There are
# no schemas: the server accepts unknown fields (kubectl explain won't work).

def _gv_path(group, version):
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3(sub):
    if not sub:
        return {"paths": {_gv_path(g, v): {"serverRelativeURL":
                                          f"/openapi/v3/{_gv_path(g, v)}?hash=fibril{g}{v}"}
                          for (g, v) in BY_GV}}
    for (g, v), rs in BY_GV.items():
        if sub != _gv_path(g, v):
            continue
        params = [{"name": n, "in": "query", "schema": {"type": "string"}}
                  for n in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")]
        paths = {}
        for r in rs.values():
            base = "/" + sub + ("/namespaces/{namespace}" if r.namespaced else "") + "/" + r.name
            gvk = {"group": g, "version": v, "kind": r.kind}
            for suffix, action in (("/{name}", "patch"), ("/{name}/status", "patch")):
                if suffix.endswith("status") and not r.status:
                    continue
                paths[base + suffix] = {"patch": {
                    "operationId": f"patch{r.kind}", "x-kubernetes-action": action,
                    "parameters": params,
                    "x-kubernetes-group-version-kind": gvk,
                    "responses": {"200": {"description": "OK"}}}}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
                "paths": paths, "components": {"schemas": {}}}
    raise ApiError(404, "NotFound", "the server could not find the requested resource")


# ------------------------------------------------------------- tables

def _pod_cells(o):
    st = o.get("status") or {}
    cs = st.get("containerStatuses") or []
    ncont = len((o.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in cs)
    phase = st.get("phase", "Unknown")
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        phase = "Terminating"
    return ([f"{ready}/{ncont}", phase, restarts],
            [st.get("podIP") or "<none>", (o.get("spec") or {}).get("nodeName") or "<none>"])


def _node_cells(o):
    conds = (o.get("status") or {}).get("conditions") or []
    ready = [c for c in conds if c.get("type") == "Ready"]
    status = "Unknown" if not ready else ("Ready" if ready[0].get("status") == "True" else "NotReady")
    if (o.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = (o.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels
                   if k.startswith("node-role.kubernetes.io/")) or ["<none>"]
    ver = ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    addrs = (o.get("status") or {}).get("addresses") or []
    internal = [a.get("address") for a in addrs if a.get("type") == "InternalIP"]
    return [status, ",".join(roles)], [ver], [internal[0] if internal else "<none>"]


def _svc_cells(o):
    spec = o.get("spec") or {}
    ports = ",".join(
        (f"{p.get('port')}:{p['nodePort']}" if p.get("nodePort") else f"{p.get('port')}")
        + "/" + p.get("protocol", "TCP") for p in spec.get("ports") or []) or "<none>"
    ext = ",".join(spec.get("externalIPs") or []) or "<none>"
    return [spec.get("type", "ClusterIP"), spec.get("clusterIP", "<none>"), ext, ports]


COLUMNS = {
    "pods": [("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
             ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1),
             ("Node", "string", 1)],
    "nodes": [("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0),
              ("Age", "string", 0), ("Version", "string", 0), ("Internal-IP", "string", 1)],
    "namespaces": [("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
    "services": [("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0),
                 ("External-IP", "string", 0), ("Port(s)", "string", 0), ("Age", "string", 0)],
    "endpointslices": [("Name", "string", 0), ("AddressType", "string", 0),
                       ("Ports", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)],
    "networkpolicies": [("Name", "string", 0), ("Pod-Selector", "string", 0),
                        ("Age", "string", 0)],
}


def table_cells(res, o):
    md = o.get("metadata") or {}
    a = age(md.get("creationTimestamp"))
    n = md.get("name", "")
    if res.name == "pods":
        mid, wide = _pod_cells(o)
        return [n] + mid + [a] + wide
    if res.name == "nodes":
        mid, ver, wide = _node_cells(o)
        return [n] + mid + [a] + ver + wide
    if res.name == "namespaces":
        return [n, (o.get("status") or {}).get("phase", ""), a]
    if res.name == "services":
        return [n] + _svc_cells(o) + [a]
    if res.name == "endpointslices":
        ports = ",".join(str(p.get("port")) for p in o.get("ports") or []) or "<unset>"
        eps = [x for e in o.get("endpoints") or [] for x in e.get("addresses") or []]
        return [n, o.get("addressType", ""), ports, ",".join(eps[:3]) or "<unset>", a]
    if res.name == "networkpolicies":
        ml = ((o.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}
        return [n, ",".join(f"{k}={v}" for k, v in ml.items()) or "<none>", a]
    return [n, a]


def table_for(res, objs, list_meta, include):
    cols = COLUMNS.get(res.name, [("Name", "string", 0), ("Age", "date", 0)])
    rows = []
    for o in objs:
        if include == "None":
            ro = None
        elif include == "Object":
            ro = o
        else:
            ro = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                  "metadata": o.get("metadata", {})}
        row = {"cells": table_cells(res, o)}
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "",
                                   "description": n, "priority": p} for n, t, p in cols],
            "rows": rows}


def wants_table(accept):
    return "as=Table" in (accept or "")


# ------------------------------------------------------------- continue tokens

def make_continue(rv, key):
    raw = dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_continue(tok):
    try:
        raw = base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4))
        d = json.loads(raw)
        return int(d["rv"]), tuple(d["start"])
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid: incorrect encoded start "
                       "resourceVersion (version meta.k8s.io/v1)")


# ------------------------------------------------------------- HTTP layer

def q1(qs, name, default=None):
    v = qs.get(name)
    return v[-1] if v else default


def truthy(v):
    return v is not None and v.lower() in ("1", "true", "yes", "")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fibril-test-apiserver"
    sys_version = ""

    def log_message(self, fmt, *args):
        if STATE.args.verbose:
            sys.stderr.write("apiserver: " + (fmt % args) + "\n")

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        with STATE.conns_lock:
            STATE.conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        with STATE.conns_lock:
            STATE.conns.discard(self.connection)

    # -- low level --
    def send_bytes(self, code, body, ctype="application/json", extra=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        # like the real server (APIResponseCompression): gzip big answers when asked to
        if len(body) > 128 * 1024 and STATE.config["gzip"] and \
                "gzip" in (self.headers.get("Accept-Encoding") or ""):
            body = gzip.compress(body, compresslevel=1)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, code, obj, extra=None):
        self.send_bytes(code, dumps(obj), extra=extra)

    def send_error_status(self, err):
        extra = {}
        if err.code == 401:
            extra["WWW-Authenticate"] = 'Bearer realm="kubernetes"'
        self.send_json(err.code, err.status(), extra)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline().strip()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return data
        return self.rfile.read(n) if n else b""

    def json_body(self):
        raw = self._body
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {e}")

    def abort_connection(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def client_cert_ok(self):
        """A client certificate signed by --client-ca was presented (the TLS
        layer verified it; CERT_OPTIONAL lets clients without one in)."""
        try:
            return bool(self.connection.getpeercert())
        except (AttributeError, ValueError, OSError):
            return False

    # -- dispatch --
    def do_GET(self):
        self.dispatch("GET")

    def do_HEAD(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        STATE.requests += 1
        if time.monotonic() < STATE.paused_until:
            self.abort_connection()
            return
        # read the body first: an early error must not leave it in the connection
        try:
            self._body = self.read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        qs = parse_qs(url.query, keep_blank_values=True)
        try:
            if path.startswith("/_control/"):
                return self.control(method, path, qs)
            self.authenticate(path)
            if path in ("/healthz", "/livez", "/readyz"):
                return self.send_bytes(200, b"ok", "text/plain; charset=utf-8")
            if path == "/version":
                return self.send_json(200, {
                    "major": "1", "minor": "32", "gitVersion": "v1.32.0",
                    "gitCommit": "0000000000000000000000000000000000000000",
                    "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z",
                    "goVersion": "go1.23.4", "compiler": "gc", "platform": "linux/amd64"})
            if path == "/api":
                if method != "GET":
                    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
                port = self.server.server_address[1]
                return self.send_json(200, {
                    "kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                    "serverAddress": f"127.0.0.1:{port}"}]})
            if path == "/apis":
                return self.send_json(200, api_group_list())
            if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
                return self.send_json(200, openapi_v3(path[len("/openapi/v3"):].strip("/")))
            if path.startswith("/openapi/"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            parts = path.strip("/").split("/")
            if parts[0] == "api" and len(parts) >= 2 and parts[1] == "v1":
                group, version, rest = "", "v1", parts[2:]
            elif parts[0] == "apis" and len(parts) >= 2:
                if len(parts) == 2:
                    if parts[1] in GROUP_ORDER:
                        return self.send_json(200, api_group(parts[1]))
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                group, version, rest = parts[1], parts[2], parts[3:]
            else:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if (group, version) not in BY_GV or (group == "cilium.io" and STATE.config["no_cilium"]):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if missing_crd(group, version, rest):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if not rest:
                return self.send_json(200, api_resource_list(group, version))
            self.resource_request(method, group, version, rest, qs)
        except ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def record_request(self, method, group, rest, qs, watch_path):
        """--record / $FIBRIL_K8S_REQUEST_LOG_DIR: one line "VERB GROUP RESOURCE[/SUB]"
        per request of the fibril agent (User-Agent fibril-agent...), with the
        verb RBAC checks it against (get, list, watch, create, update, patch,
        delete, deletecollection); k8s_rbac.sh compares them with the
        ClusterRole of deploy/kubernetes/fibril.yaml."""
        if not STATE.record or not (self.headers.get("User-Agent") or "").startswith("fibril-agent"):
            return
        r = list(rest)
        gv = {name for (g, _v), rs in BY_GV.items() if g == group for name in rs}
        if len(r) >= 3 and r[0] == "namespaces" and r[2] in gv:
            r = r[2:]
        if not r:
            return
        resource, name = r[0], (r[1] if len(r) >= 2 else None)
        sub = r[2] if len(r) >= 3 else None
        watch = watch_path or (truthy(q1(qs, "watch", "false")) and q1(qs, "watch") is not None)
        verb = {"GET": "watch" if watch else ("get" if name else "list"),
                "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())
        line = f"{verb} {group or 'core'} {resource}{'/' + sub if sub else ''}\n"
        with STATE.record_lock:
            with open(STATE.record, "a") as f:
                f.write(line)

    def authenticate(self, path):
        tok = STATE.token
        if not tok:
            return
        if STATE.args.client_ca and self.client_cert_ok():
            return                      # x509 client certificate, as the real server
        auth = self.headers.get("Authorization")
        if auth is None and path in ("/healthz", "/livez", "/readyz", "/version"):
            return
        if auth != f"Bearer {tok}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def resource_request(self, method, group, version, rest, qs):
        watch_path = False
        if rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        gv = BY_GV[(group, version)]
        self.record_request(method, group, rest, qs, watch_path)
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in gv:
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in gv or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = gv[rest[0]]
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if ns is not None and not res.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub and not ((sub == "status" and res.status) or
                        (sub == "finalize" and res.name == "namespaces")):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if res.namespaced and name is not None and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        key = (ns or "", name) if name else None
        dry = bool(qs.get("dryRun"))
        if name is None:
            if method == "GET":
                if watch_path or truthy(q1(qs, "watch", "false")) and q1(qs, "watch") is not None:
                    return self.watch(res, ns, qs)
                return self.list(res, ns, qs)
            if method == "POST":
                if res.namespaced and ns is None:
                    raise ApiError(405, "MethodNotAllowed",
                                   "the server does not allow this method on the requested resource")
                body = self.json_body()
                apiserver_crd.write_latency(STATE.config)
                with STATE.store.cond:
                    e = new_object(STATE, res, ns, body, dry, fresh=True)
                return self.send_bytes(201, e.full)
            if method == "DELETE":
                return self.delete_collection(res, ns, qs, dry)
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                           "the requested resource")
        if watch_path:
            qs.setdefault("fieldSelector", []).append(f"metadata.name={name}")
            return self.watch(res, ns, qs)
        store = STATE.store
        if method == "GET":
            with store.cond:
                e = store.objects[res.name].get(key)
            if e is None:
                raise not_found(res, name)
            if wants_table(self.headers.get("Accept")):
                return self.send_json(200, table_for(
                    res, [e.obj], {"resourceVersion": str(e.rv)}, q1(qs, "includeObject")))
            return self.send_bytes(200, e.full)
        if method == "PUT":
            body = self.json_body()
            apiserver_crd.write_latency(STATE.config)
            with store.cond:
                e = update_object(STATE, res, key, body, sub, dry)
            return self.send_bytes(200, e.full)
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            patch = self.json_body()
            apiserver_crd.write_latency(STATE.config)
            with store.cond:
                cur = store.objects[res.name].get(key)
                if cur is None:
                    raise not_found(res, name)
                if ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                    if not isinstance(patch, dict):
                        raise ApiError(400, "BadRequest", "merge patch body must be an object")
                    new = merge_patch(cur.obj, patch)
                elif ctype == "application/json-patch+json":
                    if not isinstance(patch, list):
                        raise ApiError(400, "BadRequest", "json patch body must be a list")
                    new = json_patch(cur.obj, patch)
                else:
                    raise ApiError(415, "UnsupportedMediaType",
                                   f"the body of the request was in an unknown format - "
                                   f"accepted media types include: application/json-patch+json, "
                                   f"application/merge-patch+json, "
                                   f"application/strategic-merge-patch+json")
                if sub == "status":
                    e = update_object(STATE, res, key, new, "status", dry)
                else:
                    e = update_object(STATE, res, key, new, None, dry)
            return self.send_bytes(200, e.full)
        if method == "DELETE":
            body = self.json_body() or {}
            policy = q1(qs, "propagationPolicy") or body.get("propagationPolicy")
            if policy not in (None, "Orphan", "Background", "Foreground"):
                raise ApiError(400, "BadRequest", f"propagationPolicy: Unsupported value: "
                               f'"{policy}": supported values: "Foreground", "Background", "Orphan"')
            apiserver_crd.write_latency(STATE.config)
            with store.cond:
                cur = store.objects[res.name].get(key)
                if policy == "Orphan" and cur is not None and not dry and store.gc:
                    store.gc.orphan(cur.obj)
                e, gone = delete_object(STATE, res, key, dry, body.get("preconditions"))
            return self.send_bytes(200, e.full)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the "
                       "requested resource")

    def delete_collection(self, res, ns, qs, dry):
        flt = Filter(ns, parse_field_selector(q1(qs, "fieldSelector")),
                     parse_label_selector(q1(qs, "labelSelector")))
        store = STATE.store
        deleted = []
        with store.cond:
            for k in list(store.keys(res)):
                e = store.objects[res.name].get(k)
                if e and flt.match(k, e.obj):
                    d, _ = delete_object(STATE, res, k, dry)
                    deleted.append(d.obj)
            lst = {"kind": res.list_kind, "apiVersion": res.api_version,
                   "metadata": {"resourceVersion": str(store.rv)}, "items": deleted}
        self.send_json(200, lst)

    # -- LIST --
    def list(self, res, ns, qs):
        cfg = STATE.config
        if cfg["list_delay"]:
            time.sleep(cfg["list_delay"])  # sleep: a slow server is the fault injected
        if res.name == "endpointslices" and cfg["list_delay_endpointslices"]:
            time.sleep(cfg["list_delay_endpointslices"])  # sleep: a slow EndpointSlice list is the fault injected
        flt = Filter(ns, parse_field_selector(q1(qs, "fieldSelector")),
                     parse_label_selector(q1(qs, "labelSelector")))
        limit = int(q1(qs, "limit") or 0)
        if cfg["max_page"]:
            limit = min(limit, cfg["max_page"]) if limit else cfg["max_page"]
        cont = q1(qs, "continue")
        rv_param = q1(qs, "resourceVersion")
        match = q1(qs, "resourceVersionMatch")
        store = STATE.store
        table = wants_table(self.headers.get("Accept"))
        with store.cond:
            if cont:
                list_rv, start = parse_continue(cont)
                if list_rv < store.compacted[res.name]:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to "
                                   "display a consistent list result. You can start a new list "
                                   "without the continue parameter, or use the continue token in "
                                   "this response to retrieve the remainder of the results.")
            else:
                list_rv, start = store.rv, None
                if rv_param not in (None, "", "0"):
                    try:
                        want = int(rv_param)
                    except ValueError:
                        raise ApiError(400, "BadRequest", f"invalid resource version: {rv_param}")
                    if want > store.rv:
                        raise ApiError(504, "Timeout", f"Too large resource version: {want}, "
                                       f"current: {store.rv}",
                                       {"causes": [{"reason": "ResourceVersionTooLarge",
                                                    "message": "Too large resource version"}],
                                        "retryAfterSeconds": 1})
                    if match == "Exact":
                        if want < store.compacted[res.name]:
                            raise expired(f"The resourceVersion for the provided list is too "
                                          f"old. ({want})")
                        list_rv = want
            keys = store.keys(res)
            i = 0
            if start is not None:
                i = bisect.bisect_right(keys, start)
            objs = store.objects[res.name]
            items = []
            nxt = None
            n = len(keys)
            while i < n:
                k = keys[i]
                i += 1
                if not flt.match(k, objs[k].obj):
                    continue
                items.append(objs[k])
                if limit and len(items) >= limit:
                    if i < n:
                        nxt = k
                    break
            remaining = None
            if nxt is not None and flt.trivial and flt.ns is None:
                remaining = n - i
        meta = {"resourceVersion": str(list_rv)}
        if nxt is not None:
            meta["continue"] = make_continue(list_rv, nxt)
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        if table:
            return self.send_json(200, table_for(res, [e.obj for e in items], meta,
                                                 q1(qs, "includeObject")))
        head = b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
            res.list_kind.encode(), res.api_version.encode(), dumps(meta))
        body = head + b",".join(e.item for e in items) + b"]}"
        self.send_bytes(200, body)

    # -- WATCH --
    def watch(self, res, ns, qs):
        cfg = STATE.config
        flt = Filter(ns, parse_field_selector(q1(qs, "fieldSelector")),
                     parse_label_selector(q1(qs, "labelSelector")))
        rv_param = q1(qs, "resourceVersion")
        bookmarks = truthy(q1(qs, "allowWatchBookmarks", "false")) and \
            q1(qs, "allowWatchBookmarks") is not None
        send_initial = q1(qs, "sendInitialEvents") in ("true", "1")
        timeout = q1(qs, "timeoutSeconds")
        timeout = float(timeout) if timeout else float(cfg["watch_timeout"])
        table = wants_table(self.headers.get("Accept"))
        include = q1(qs, "includeObject")
        store = STATE.store
        w = Watcher(res, flt)
        initial = []
        err = None
        with store.cond:
            if rv_param in (None, "", "0") or send_initial:
                for k in store.keys(res):
                    e = store.objects[res.name][k]
                    if flt.match(k, e.obj):
                        initial.append(b'{"type":"ADDED","object":' + e.full + b"}\n")
                start_rv = store.rv
                if send_initial and bookmarks:
                    initial.append(dumps({"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(store.rv),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}}}) + b"\n")
            else:
                try:
                    start_rv = int(rv_param)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resource version: {rv_param}")
                if start_rv > store.rv:
                    # like the watch cache: wait up to 3 s for that rv to exist
                    end = time.monotonic() + 3.0
                    while start_rv > store.rv and time.monotonic() < end:
                        store.cond.wait(end - time.monotonic())
                if start_rv > store.rv:
                    err = ApiError(504, "Timeout", f"Too large resource version: {start_rv}, "
                                   f"current: {store.rv}",
                                   {"causes": [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1})
                elif start_rv < store.compacted[res.name] or cfg["expire_every_watch"]:
                    err = expired(f"too old resource version: {start_rv} "
                                  f"({store.compacted[res.name]})")
                else:
                    for ev in store.history[res.name]:
                        if ev.rv > start_rv:
                            line = self.event_line(ev, flt)
                            if line:
                                initial.append(line)
            if err is None:
                store.watchers.add(w)
        if err is not None:
            if cfg["expired_watch"] == "http":
                raise err
            self.start_stream()
            self.write_chunk(dumps({"type": "ERROR", "object": err.status()}) + b"\n")
            self.end_stream()
            return
        try:
            if cfg["stall_watches"]:
                w.stalled = True
                return self.stall(w)
            self.start_stream()
            if table:
                initial = [self.table_line(res, ln, include) for ln in initial]
            self.write_lines(initial)
            deadline = time.monotonic() + timeout
            last_bm = time.monotonic()
            while True:
                with store.cond:
                    while True:
                        now = time.monotonic()
                        # re-read: /_control/config changes apply to open watches too
                        next_bm = last_bm + float(cfg["bookmark_interval"])
                        hold = cfg["hold_watches"]     # queue events, send nothing
                        if w.stalled or w.raw:
                            break
                        if (w.queue and not hold) or w.dropped or w.error or now >= deadline or \
                                (bookmarks and now >= next_bm and not hold):
                            break
                        wake = deadline if not bookmarks else min(deadline, next_bm)
                        store.cond.wait(wake - now)
                    evs, w.queue = w.queue, []
                    raw, w.raw = w.raw, []
                    cur_rv = store.rv
                if w.stalled:
                    return self.stall(w)
                if raw:
                    self.write_chunk(b"".join(raw))
                    if w.end_after_raw:
                        self.end_stream()
                        return
                    continue
                if w.dropped:
                    self.abort_connection()
                    return
                lines = []
                for ev in evs:
                    line = self.event_line(ev, flt)
                    if line is None:
                        continue
                    if w.drop_after is not None:
                        if w.drop_after <= 0:
                            break
                        w.drop_after -= 1
                    lines.append(self.table_line(res, line, include) if table else line)
                self.write_lines(lines)
                if w.drop_after is not None and w.drop_after <= 0:
                    self.abort_connection()
                    return
                if w.error:
                    self.write_chunk(dumps({"type": "ERROR", "object": w.error}) + b"\n")
                    self.end_stream()
                    return
                now = time.monotonic()
                if now >= deadline:
                    self.end_stream()
                    return
                if lines:
                    last_bm = now
                elif bookmarks and now >= last_bm + float(cfg["bookmark_interval"]):
                    self.write_chunk(dumps({"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(cur_rv)}}}) + b"\n")
                    last_bm = now
        except OSError:
            self.close_connection = True
        finally:
            with store.cond:
                store.watchers.discard(w)

    def stall(self, w):
        """A silent peer: the connection stays open and nothing is written
        (no event, no bookmark, no end) until the client goes away or the
        watch is dropped."""
        store = STATE.store
        while not w.dropped:
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
            except (OSError, ValueError):
                break
            if readable:                     # the client closed (or wrote): it is gone
                break
            with store.cond:
                store.cond.wait(0.2)
        self.abort_connection()

    @staticmethod
    def event_line(ev, flt):
        if flt.trivial:
            return ev.line if flt.ns is None or ev.key[0] == flt.ns else None
        now = flt.match(ev.key, ev.obj)
        before = ev.old is not None and flt.match(ev.key, ev.old)
        if ev.type == "MODIFIED":
            if now and not before:
                return ev.line.replace(b'"MODIFIED"', b'"ADDED"', 1)
            if before and not now:
                return ev.line.replace(b'"MODIFIED"', b'"DELETED"', 1)
            return ev.line if now else None
        if ev.type == "DELETED":
            return ev.line if (before or now) else None
        return ev.line if now else None

    @staticmethod
    def table_line(res, line, include):
        ev = json.loads(line)
        t = table_for(res, [ev["object"]], {"resourceVersion":
                                           ev["object"]["metadata"]["resourceVersion"]}, include)
        return dumps({"type": ev["type"], "object": t}) + b"\n"

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def write_chunk(self, data):
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def write_lines(self, lines):
        buf, size = [], 0
        for ln in lines:
            buf.append(ln)
            size += len(ln)
            if size >= 256 * 1024:
                self.write_chunk(b"".join(buf))
                buf, size = [], 0
        if buf:
            self.write_chunk(b"".join(buf))

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")

    # -- control plane for the tests --
    def control(self, method, path, qs):
        store = STATE.store
        what = path[len("/_control/"):]
        if what == "stats" and method == "GET":
            with store.cond:
                # openWatchesByResource: the watches no fault is ending
                # (dropped, erroring, stalled: still listed until closed)
                out = {"resourceVersion": store.rv, "watches": len(store.watchers),
                       "watchesByResource": {}, "openWatchesByResource": {},
                       "objects": {}, "compacted": dict(store.compacted),
                       "history": {k: len(v) for k, v in store.history.items()},
                       "requests": STATE.requests, "config": STATE.config,
                       "gc": store.gc.stats() if store.gc else {}}
                for w in store.watchers:
                    out["watchesByResource"][w.res.name] = \
                        out["watchesByResource"].get(w.res.name, 0) + 1
                    if not (w.dropped or w.error or w.stalled):
                        out["openWatchesByResource"][w.res.name] = \
                            out["openWatchesByResource"].get(w.res.name, 0) + 1
                for r in RESOURCES:
                    out["objects"][r.name] = len(store.objects[r.name])
            return self.send_json(200, out)
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", "control endpoints take POST (stats: GET)")
        resources = self.control_resources(qs)
        if what == "load":
            body = self.json_body()
            items = body.get("items") if isinstance(body, dict) else body
            if not isinstance(items, list):
                raise ApiError(400, "BadRequest", "load wants a JSON list or a List object")
            t0 = time.monotonic()
            n = load_objects(STATE, items)
            return self.send_json(200, {"loaded": n, "resourceVersion": store.rv,
                                        "seconds": round(time.monotonic() - t0, 3)})
        if what == "drop-watches":
            after = q1(qs, "after")
            with store.cond:
                n = 0
                for w in store.watchers:
                    if w.res.name in resources:
                        if after is None:
                            w.dropped = True
                        else:
                            w.drop_after = int(after)
                        n += 1
                store.cond.notify_all()
            return self.send_json(200, {"watches": n})
        if what == "stall-watches":
            # the open watches go silent without closing (a dead peer)
            with store.cond:
                n = 0
                for w in store.watchers:
                    if w.res.name in resources:
                        w.stalled = True
                        n += 1
                store.cond.notify_all()
            return self.send_json(200, {"watches": n})
        if what == "inject-lines":
            # raw text written as it is to the open watches (a JSON list of
            # strings, each sent as given: add the newline yourself);
            # end=1 ends the stream cleanly right after
            body = self.json_body()
            if not isinstance(body, list) or not all(isinstance(x, str) for x in body):
                raise ApiError(400, "BadRequest", "inject-lines wants a JSON list of strings")
            with store.cond:
                n = 0
                for w in store.watchers:
                    if w.res.name in resources and not w.stalled:
                        w.raw.extend(x.encode() for x in body)
                        w.end_after_raw = truthy(q1(qs, "end", "0"))
                        n += 1
                store.cond.notify_all()
            return self.send_json(200, {"watches": n})
        if what == "watch-error":
            code = int(q1(qs, "code", "410"))
            reasons = {410: "Expired", 500: "InternalError", 503: "ServiceUnavailable",
                       504: "Timeout", 429: "TooManyRequests"}
            status = ApiError(code, reasons.get(code, "Unknown"),
                              q1(qs, "message", "too old resource version: injected")).status()
            with store.cond:
                n = 0
                for w in store.watchers:
                    if w.res.name in resources:
                        w.error = status
                        n += 1
                store.cond.notify_all()
            return self.send_json(200, {"watches": n})
        if what == "expire":
            mode = q1(qs, "mode")
            if mode:
                if mode not in ("event", "http"):
                    raise ApiError(400, "BadRequest", "mode is event or http")
                STATE.config["expired_watch"] = mode
            with store.cond:
                for r in resources:
                    store.history[r].clear()
                    store.compacted[r] = store.rv
            return self.send_json(200, {"compacted": store.rv,
                                        "expired_watch": STATE.config["expired_watch"]})
        if what == "restart-history":
            with store.cond:
                if q1(qs, "set") is not None:
                    store.rv = int(q1(qs, "set"))
                else:
                    store.rv += int(q1(qs, "jump", "1000000"))
                if truthy(q1(qs, "rewrite")) and q1(qs, "rewrite") is not None:
                    for r in RESOURCES:
                        for k, e in list(store.objects[r.name].items()):
                            o = copy.deepcopy(e.obj)
                            o["metadata"]["resourceVersion"] = str(store.rv)
                            store.objects[r.name][k] = Entry(r, o)
                for r in RESOURCES:
                    store.history[r.name].clear()
                    store.compacted[r.name] = store.rv
                for w in store.watchers:
                    w.dropped = True
                store.cond.notify_all()
            return self.send_json(200, {"resourceVersion": store.rv})
        if what == "token":
            # rotate the accepted bearer token (the old one stops working);
            # drop=1 also cuts the open watches so clients reconnect with it
            STATE.token = q1(qs, "value") or None
            if truthy(q1(qs, "drop")) and q1(qs, "drop") is not None:
                with store.cond:
                    for w in store.watchers:
                        w.dropped = True
                    store.cond.notify_all()
            return self.send_json(200, {"token": "set" if STATE.token else "none"})
        if what == "pause":
            secs = float(q1(qs, "seconds", "5"))
            self.send_json(200, {"paused": secs})
            threading.Thread(target=pause_server, args=(secs,), daemon=True).start()
            return
        if what == "config":
            body = self.json_body() or {}
            for k, v in list(body.items()) + [(k, v[-1]) for k, v in qs.items()]:
                k = k.replace("-", "_")
                if k not in STATE.config:
                    raise ApiError(400, "BadRequest", f"unknown config key {k}")
                cur = STATE.config[k]
                if isinstance(cur, bool):
                    v = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
                elif isinstance(cur, list) and not isinstance(v, list):
                    v = [x for x in str(v).split(",") if x]
                elif isinstance(cur, (int, float)) and not isinstance(v, (int, float)):
                    v = type(cur)(float(v)) if isinstance(cur, float) else int(v)
                STATE.config[k] = v
            with store.cond:
                store.cond.notify_all()         # e.g. hold_watches released
            return self.send_json(200, STATE.config)
        if what == "reset":
            with store.cond:
                for w in store.watchers:
                    w.dropped = True
                store.cond.notify_all()
            with store.cond:
                for r in RESOURCES:
                    store.objects[r.name].clear()
                    store.sorted_keys[r.name] = None
                    store.history[r.name].clear()
                    store.compacted[r.name] = store.rv
                store.used_ips.clear()
                if not STATE.args.no_default_namespaces:
                    create_default_namespaces(STATE)
            return self.send_json(200, {"resourceVersion": store.rv})
        raise ApiError(404, "NotFound", f"no control endpoint {what}")

    @staticmethod
    def control_resources(qs):
        r = q1(qs, "resource")
        if not r:
            return {x.name for x in RESOURCES}
        names = set(r.split(","))
        bad = names - {x.name for x in RESOURCES}
        if bad:
            raise ApiError(400, "BadRequest", f"unknown resource {sorted(bad)}")
        return names


# ------------------------------------------------------------- server loop

class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(st, port):
    last = None
    for _ in range(100):
        try:
            srv = Server((st.args.address, port), Handler)
            break
        except OSError as e:
            last = e
            time.sleep(0.05)  # sleep: a pause between the tries to bind the port again
    else:
        raise last
    if st.args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(st.args.tls_cert, st.args.tls_key)
        ctx.set_alpn_protocols(["http/1.1"])
        if st.args.client_ca:
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(st.args.client_ca)
        # the handshake happens in the connection's thread, not in accept()
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    return srv


def pause_server(secs):
    STATE.paused_until = time.monotonic() + secs
    store = STATE.store
    with store.cond:
        for w in store.watchers:
            w.dropped = True
        store.cond.notify_all()
    if STATE.server is not None:
        STATE.server.shutdown()          # the main loop closes the socket and waits
    with STATE.conns_lock:
        conns = list(STATE.conns)
    for c in conns:
        try:
            c.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def create_default_namespaces(st):
    ns = BY_KIND[("v1", "Namespace")]
    for n in st.args.namespaces.split(","):
        if n and ("", n) not in st.store.objects["namespaces"]:
            new_object(st, ns, None, {"metadata": {"name": n}}, check_ns=False)


def main():
    global STATE
    ap = argparse.ArgumentParser(description="fake kube-apiserver for the fibril tests")
    ap.add_argument("--port", type=int, default=0, help="TCP port (0: pick a free one)")
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--token", default=None, help="require Authorization: Bearer TOKEN")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca", help="also accept TLS client certificates signed by this CA "
                    "(in place of the token)")
    ap.add_argument("--load", action="append", default=[],
                    help="JSON file (list or List) of objects to load at start")
    ap.add_argument("--history", type=int, default=100000,
                    help="watch events kept per resource (older: 410 Expired)")
    ap.add_argument("--bookmark-interval", type=float, default=1.0,
                    help="seconds between BOOKMARK events on quiet watches")
    ap.add_argument("--watch-timeout", type=float, default=1800.0,
                    help="watch length when the client gives no timeoutSeconds")
    ap.add_argument("--service-cidr", default="10.96.0.0/12")
    ap.add_argument("--namespaces", default="default,kube-system",
                    help="namespaces that exist from the start (comma separated)")
    ap.add_argument("--no-default-namespaces", action="store_true")
    ap.add_argument("--no-cilium", action="store_true",
                    help="as a cluster without the cilium.io CRDs: their paths answer 404")
    ap.add_argument("--lenient-status", action="store_true",
                    help="keep .status given on create (real servers drop it for pods etc.)")
    ap.add_argument("--pod-grace-seconds", type=float, default=0.0,
                    help="delete pods on a node gracefully: deletionTimestamp first, gone "
                    "this many seconds later (0: at once)")
    ap.add_argument("--verbose", "-v", action="store_true", help="log requests to stderr")
    ap.add_argument("--record", help="append 'VERB GROUP RESOURCE' of each request of the fibril "
                    "agent (User-Agent fibril-agent...) to this file")
    args = ap.parse_args()
    if args.no_default_namespaces:
        args.namespaces = ""
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    if args.client_ca and not args.tls_cert:
        ap.error("--client-ca needs --tls-cert")
    STATE = State(args)
    STATE.store.gc = apiserver_crd.OwnerGC(STATE, apiserver_crd.GcHooks(
        RESOURCES, BY_KIND, delete_object, update_object, ApiError))
    with STATE.store.cond:
        create_default_namespaces(STATE)
    for f in args.load:
        with open(f, "rb") as fh:
            data = json.load(fh)
        load_objects(STATE, data.get("items") if isinstance(data, dict) else data)
    srv = make_server(STATE, args.port)
    port = srv.server_address[1]
    STATE.server = srv
    print(f"LISTENING {port}", flush=True)
    while True:
        try:
            srv.serve_forever(poll_interval=0.1)
        except KeyboardInterrupt:
            break
        srv.server_close()
        remaining = STATE.paused_until - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)  # sleep: the pause (unreachable this long) is the fault injected
        srv = make_server(STATE, port)
        STATE.server = srv


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
