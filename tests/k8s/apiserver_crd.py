# tests/k8s/apiserver_crd.py - what CRD mode needs from the fake
# kube-apiserver (tests/k8s/apiserver.py imports it; keep the two side by
# side): the garbage collector of objects whose ownerReferences all point at
# gone owners (background, asynchronous, as kube-controller-manager's),
# orphaning on delete, the validation of ownerReferences and Leases, the rule
# that a custom resource's update names a resourceVersion, and a random write
# latency so that concurrent writers land in the order chance decides.
import random
import threading
import time


class GcHooks:
    """What the collector calls back into apiserver.py (no import cycle: the
    server runs as __main__)."""

    def __init__(self, resources, by_kind, delete_object, update_object, api_error):
        self.resources = resources
        self.by_kind = by_kind
        self.delete_object = delete_object
        self.update_object = update_object
        self.api_error = api_error


def owner_refs(obj):
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return refs if isinstance(refs, list) else []


def validate_owner_refs(res, obj, invalid):
    """The real server's ObjectMeta validation of ownerReferences: apiVersion,
    kind, name and uid required; at most one controller."""
    controllers = 0
    for i, ref in enumerate((obj.get("metadata") or {}).get("ownerReferences") or []):
        where = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            invalid(res, obj, where, "Invalid value: must be an object")
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref.get(field), str) or not ref[field]:
                invalid(res, obj, f"{where}.{field}", "Invalid value: \"\": "
                        f"{field} must not be empty")
        if ref.get("controller") is True:
            controllers += 1
    if controllers > 1:
        invalid(res, obj, "metadata.ownerReferences", "Invalid value: Only one reference "
                "can have Controller set to true")


def validate_lease(res, obj, invalid):
    """coordination.k8s.io/v1 Lease validation: positive duration, transitions >= 0."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        invalid(res, obj, "spec", "Invalid value: must be an object")
    dur = spec.get("leaseDurationSeconds")
    if dur is not None and (not isinstance(dur, int) or isinstance(dur, bool) or dur <= 0):
        invalid(res, obj, "spec.leaseDurationSeconds",
                f"Invalid value: {dur}: must be greater than 0")
    tr = spec.get("leaseTransitions")
    if tr is not None and (not isinstance(tr, int) or isinstance(tr, bool) or tr < 0):
        invalid(res, obj, "spec.leaseTransitions",
                f"Invalid value: {tr}: must be greater than or equal to 0")
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        invalid(res, obj, "spec.holderIdentity", "Invalid value: must be a string")


def validate_crd(res, obj, invalid, served):
    """apiextensions.k8s.io/v1 CustomResourceDefinition: the real server's
    rules a manifest breaks (the name is <plural>.<group>, a scope, the
    names, one storage version, a structural schema of type object for each
    served version), and - this server's own - that a kind it serves is
    declared as it serves it (group, plural, kind, scope): a CRD that would
    not match the objects the agents write is refused."""
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    group, plural = spec.get("group"), names.get("plural")
    name = (obj.get("metadata") or {}).get("name")
    if not group or not plural or name != f"{plural}.{group}":
        invalid(res, obj, "metadata.name", f'Invalid value: "{name}": must be spec.names.plural'
                '+"."+spec.group')
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        invalid(res, obj, "spec.scope", "Unsupported value: must be Namespaced or Cluster")
    if not names.get("kind") or not names.get("listKind"):
        invalid(res, obj, "spec.names.kind", "Required value")
    versions = spec.get("versions") or []
    if not versions:
        invalid(res, obj, "spec.versions", "Invalid value: must have exactly one version marked "
                "as storage version")
    if sum(1 for v in versions if v.get("storage") is True) != 1:
        invalid(res, obj, "spec.versions", "Invalid value: must have exactly one version marked "
                "as storage version")
    for i, v in enumerate(versions):
        schema = ((v.get("schema") or {}).get("openAPIV3Schema")) if isinstance(v, dict) else None
        if v.get("served") and (not isinstance(schema, dict) or schema.get("type") != "object"):
            invalid(res, obj, f"spec.versions[{i}].schema.openAPIV3Schema.type",
                    'Required value: must be "object" at the root')
        mine = served.get((group, v.get("name")), {}).get(plural)
        if mine is not None and (mine.kind != names.get("kind") or
                                 mine.namespaced != (spec.get("scope") == "Namespaced")):
            invalid(res, obj, "spec.names.kind", f"Invalid value: {names.get('kind')} "
                    f"({spec.get('scope')}) is not the {mine.kind} this server serves")


def require_update_rv(res, key, rv, api_error):
    """A custom resource is never updated unconditionally (the CRD strategy's
    AllowUnconditionalUpdate is false): a PUT without metadata.resourceVersion
    is 422 Invalid, as on the real server."""
    if not rv and not res.builtin:
        raise api_error(422, "Invalid", f'{res.kind}.{res.group} "{key[1]}" is invalid: '
                        "metadata.resourceVersion: Invalid value: 0x0: must be specified "
                        "for an update")


def write_latency(config):
    """Sleep a random 0..write_delay seconds before a write takes the store's
    lock, so that racing clients commit in an order chance decides (the real
    server's handlers, admission and etcd round trips are not FIFO)."""
    delay = float(config.get("write_delay") or 0)
    if delay > 0:
        time.sleep(random.uniform(0, delay))  # sleep: the configured write latency


class OwnerGC:
    """Background cascading deletion: once an object's owners (each matched by
    apiVersion/kind, namespace, name and uid) are all gone, it is deleted
    gc_delay seconds later (the real collector works from its own watches: a
    dependent outlives its owner for a moment). A dependent naming an owner
    of a kind the server does not serve is kept, as the real collector cannot
    resolve it. Foreground deletion is treated as background. Like the real
    collector's graph, an index (owner uid -> dependents) keeps a sweep to
    the objects a change concerns: 100,000 owned objects cost nothing until
    their owners go."""

    def __init__(self, st, hooks):
        self.st, self.hooks = st, hooks
        self.by_name = {r.name: r for r in hooks.resources}
        self.dependents = {}      # owner uid -> {(resource name, key)}
        self.candidates = set()   # (resource name, key) whose owners may all be gone
        self.dirty = threading.Event()
        self.sweeps = 0
        self.collected = 0
        t = threading.Thread(target=self.run, name="owner-gc", daemon=True)
        t.start()

    def _index(self, res, key, obj, add):
        for ref in owner_refs(obj) if obj else ():
            uid = ref.get("uid") if isinstance(ref, dict) else None
            if not uid:
                continue
            deps = self.dependents.setdefault(uid, set()) if add else self.dependents.get(uid)
            if deps is None:
                continue
            if add:
                deps.add((res.name, key))
            else:
                deps.discard((res.name, key))
                if not deps:
                    del self.dependents[uid]

    def note(self, res, key, typ, obj, old):
        """Every committed change (the store's lock held): keep the index,
        and wake the collector when an owner went or an owned object came."""
        self._index(res, key, old, False)
        if typ == "DELETED":
            self._index(res, key, obj, False)
            gone = self.dependents.pop((obj.get("metadata") or {}).get("uid"), None)
            if gone:
                self.candidates |= gone
        else:
            self._index(res, key, obj, True)
            if owner_refs(obj):
                self.candidates.add((res.name, key))
        if self.candidates:
            self.dirty.set()

    def run(self):
        while True:
            self.dirty.wait()
            time.sleep(float(self.st.config.get("gc_delay") or 0))  # sleep: the collector acts after the DELETED event, not in its write
            with self.st.store.cond:
                self.dirty.clear()
                self.sweep()
                if self.candidates:
                    self.dirty.set()

    def owner_alive(self, dep_res, dep_key, ref):
        res = self.hooks.by_kind.get((ref.get("apiVersion"), ref.get("kind")))
        if res is None:
            return True                       # unresolvable: never collected
        ns = dep_key[0] if res.namespaced else ""
        if res.namespaced and not dep_res.namespaced:
            return False                      # a cluster-scoped object cannot have one
        e = self.st.store.objects[res.name].get((ns, ref.get("name")))
        return e is not None and e.obj["metadata"].get("uid") == ref.get("uid")

    def sweep(self):
        """Caller holds the store's lock. Deletes every candidate whose owners
        are all gone; each deletion makes its own dependents candidates
        (cascades, in the next sweep)."""
        self.sweeps += 1
        store = self.st.store
        todo, self.candidates = self.candidates, set()
        for name, key in sorted(todo):
            res = self.by_name[name]
            e = store.objects[name].get(key)
            refs = owner_refs(e.obj) if e else []
            if refs and not any(self.owner_alive(res, key, r) for r in refs):
                try:
                    self.hooks.delete_object(self.st, res, key)
                    self.collected += 1
                except self.hooks.api_error:
                    pass

    def orphan(self, owner):
        """propagationPolicy=Orphan: remove the owner from its dependents'
        ownerReferences before it goes. Caller holds the lock."""
        uid = owner["metadata"].get("uid")
        store = self.st.store
        for name, key in sorted(self.dependents.get(uid, ())):
            res = self.by_name[name]
            e = store.objects[name].get(key)
            if e is not None:
                refs = owner_refs(e.obj)
                new = dict(e.obj)
                md = dict(new["metadata"])
                kept = [r for r in refs if r.get("uid") != uid]
                if kept:
                    md["ownerReferences"] = kept
                else:
                    md.pop("ownerReferences", None)
                new["metadata"] = md
                self.hooks.update_object(self.st, res, key, new, force_rv_check=False)

    def stats(self):
        return {"sweeps": self.sweeps, "collected": self.collected,
                "owners": len(self.dependents)}
