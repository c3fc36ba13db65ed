/* modules/endpoint/cluster_crd_gc.c - CRD mode's garbage collection without
 * an operator (issue 27). Cilium needs its operator to collect identities
 * and the objects of dead nodes; here the agents do it, one at a time:
 *
 *  - the leader holds the coordination.k8s.io/v1 Lease kube-system/fibril-gc
 *    (client-go's leader election: every agent reads it every third of
 *    gc-lease-duration; the holder renews it with a PUT at the
 *    resourceVersion it read; another agent takes it over - PUT at that
 *    resourceVersion, leaseTransitions + 1 - once the object has not changed
 *    for gc-lease-duration by this agent's own clock, so clocks need not
 *    agree; the API server's optimistic concurrency lets one taker win);
 *  - every identity-gc-interval the leader, from the informers' caches:
 *    deletes the CiliumEndpoints, CiliumNodes and pod CIDR claims
 *    (ipam-cluster-pool's Leases) whose node has no Node object any more, and the CiliumIdentities that no CiliumEndpoint and
 *    no local endpoint has referenced for identity-gc-grace; every delete
 *    carries the resourceVersion it judged as a precondition;
 *  - every agent, once its endpoints are restored and the CiliumEndpoints
 *    listed, deletes its own node's CiliumEndpoints that match no local
 *    endpoint (pods gone while it was down).
 * Nothing is judged before the caches of Nodes, CiliumEndpoints,
 * CiliumIdentities and CiliumNodes are listed: an empty cache is not an
 * empty cluster. */
#include "endpoint_int.h"
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include <fibril/k8s.h>

#define GC_LEASE_NS "kube-system"
#define GC_LEASE_NAME "fibril-gc"
#define GC_SYNC_TIMEOUT_MS 60000

struct gc_cand {
	uint32_t number;
	uint64_t since_ms;
};

struct cl_crd_gc {
	struct ep_cluster *c;
	uint64_t lease_ms, renew_ms;
	struct fibril_timer *lease_timer, *gc_timer;
	bool lease_inflight, leader, synced, restored, own_swept;
	uint64_t renewed_ms;      /* when our last successful write was sent */
	uint64_t sent_ms;         /* when the write in flight was sent */
	/* the Lease as last read, and since when (our clock) it is unchanged */
	char seen_rv[32];
	uint64_t seen_ms;
	struct gc_cand *cands;
	size_t ncands;
	unsigned deletes_inflight;
	struct {
		uint64_t identities, endpoints, nodes, own_endpoints, takeovers, errors, claims;
	} stats;
};

static const char *const SYNC_RES[] = {FIBRIL_K8S_CLUSTER_NODES, FIBRIL_K8S_CILIUM_ENDPOINTS,
				       FIBRIL_K8S_CILIUM_IDENTITIES, FIBRIL_K8S_CILIUM_NODES,
				       FIBRIL_K8S_PODCIDR_CLAIMS, NULL};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct json_object *path(struct json_object *o, const char *a, const char *b,
				const char *c)
{
	const char *p[] = {a, b, c};

	for (size_t i = 0; o && i < 3 && p[i]; i++) {
		struct json_object *x;

		if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, p[i], &x))
			return NULL;
		o = x;
	}
	return o;
}

static const char *str_at(struct json_object *o, const char *a, const char *b, const char *c)
{
	struct json_object *x = path(o, a, b, c);

	return x && json_object_is_type(x, json_type_string) ? json_object_get_string(x) : NULL;
}

/* ---- the Lease ------------------------------------------------------------------------------- */

static bool is_leader(struct cl_crd_gc *g)
{
	return g->leader && mono_ms() - g->renewed_ms < g->lease_ms;
}

static void micro_time(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);

	snprintf(buf + n, len - n, ".%06ldZ", ts.tv_nsec / 1000);
}

/* The Lease we write: held by this node from now; rv NULL: a create. */
static char *lease_body(struct cl_crd_gc *g, const char *rv, const char *acquired,
			int64_t transitions)
{
	struct json_object *doc = json_object_new_object(), *md = json_object_new_object();
	struct json_object *spec = json_object_new_object();
	char now[40];

	micro_time(now, sizeof(now));
	json_object_object_add(doc, "apiVersion", json_object_new_string("coordination.k8s.io/v1"));
	json_object_object_add(doc, "kind", json_object_new_string("Lease"));
	json_object_object_add(md, "name", json_object_new_string(GC_LEASE_NAME));
	json_object_object_add(md, "namespace", json_object_new_string(GC_LEASE_NS));
	if (rv)
		json_object_object_add(md, "resourceVersion", json_object_new_string(rv));
	json_object_object_add(doc, "metadata", md);
	json_object_object_add(spec, "holderIdentity", json_object_new_string(g->c->node));
	json_object_object_add(spec, "leaseDurationSeconds",
			       json_object_new_int((int)((g->lease_ms + 999) / 1000)));
	json_object_object_add(spec, "acquireTime", json_object_new_string(acquired ? acquired : now));
	json_object_object_add(spec, "renewTime", json_object_new_string(now));
	json_object_object_add(spec, "leaseTransitions", json_object_new_int64(transitions));
	json_object_object_add(doc, "spec", spec);
	char *out = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));

	json_object_put(doc);
	return out;
}

static void on_lease_write(void *ud, int status, const char *reason, const char *body, int err,
			   const char *message)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;

	(void)body;
	g->lease_inflight = false;
	if (!c->running)
		return;
	if (status == 200 || status == 201) {
		if (!g->leader) {
			g->stats.takeovers++;
			fibril_info(c->mg->m, "this node (%s) leads the garbage collection now (Lease "
				    GC_LEASE_NS "/" GC_LEASE_NAME ")", c->node);
		}
		g->leader = true;
		g->renewed_ms = g->sent_ms;
		return;
	}
	if (g->leader)
		fibril_warn(c->mg->m, "the GC Lease " GC_LEASE_NS "/" GC_LEASE_NAME " was not renewed: "
			    "%d %s%s", status, status ? reason : "", status ? "" : message);
	if (status == 409) /* another agent wrote it first */
		g->leader = false;
	else if (status)
		g->stats.errors++;
	(void)err;
}

static void lease_write(struct cl_crd_gc *g, const char *method, char *body)
{
	struct ep_cluster *c = g->c;

	if (!body)
		return;
	g->sent_ms = mono_ms();
	g->lease_inflight = true;
	if (c->k8s->request(c->k8sctx, method, FIBRIL_K8S_LEASES, GC_LEASE_NS,
			    strcmp(method, "POST") ? GC_LEASE_NAME : NULL, body, on_lease_write, g)) {
		g->lease_inflight = false;
		g->stats.errors++;
	}
	free(body);
}

static void on_lease_read(void *ud, int status, const char *reason, const char *body, int err,
			  const char *message)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;

	(void)err;
	g->lease_inflight = false;
	if (!c->running)
		return;
	if (status == 404 && body && strstr(body, "could not find the requested resource")) {
		fibril_warn(c->mg->m, "the GC cannot elect a leader: the API server does not serve "
			    "leases.coordination.k8s.io");
		return;
	}
	if (status == 404) {
		lease_write(g, "POST", lease_body(g, NULL, NULL, 0));
		return;
	}
	if (status != 200) {
		g->stats.errors++;
		fibril_warn(c->mg->m, "the GC Lease " GC_LEASE_NS "/" GC_LEASE_NAME ": %d %s%s", status,
			    status ? reason : "", status ? "" : message);
		return;
	}
	struct json_object *o = json_tokener_parse(body);
	const char *rv = str_at(o, "metadata", "resourceVersion", NULL);
	const char *holder = str_at(o, "spec", "holderIdentity", NULL);
	const char *acquired = str_at(o, "spec", "acquireTime", NULL);
	struct json_object *tr = path(o, "spec", "leaseTransitions", NULL);
	int64_t transitions = tr && json_object_is_type(tr, json_type_int) ? json_object_get_int64(tr) : 0;
	uint64_t now = mono_ms();

	if (!rv) {
		g->stats.errors++;
		json_object_put(o);
		return;
	}
	if (strcmp(rv, g->seen_rv)) { /* it changed: its holder is alive (as of now) */
		snprintf(g->seen_rv, sizeof(g->seen_rv), "%s", rv);
		g->seen_ms = now;
	}
	if (holder && !strcmp(holder, c->node)) {
		lease_write(g, "PUT", lease_body(g, rv, acquired, transitions));
	} else if (!holder || !*holder || now - g->seen_ms >= g->lease_ms) {
		if (holder && *holder)
			fibril_info(c->mg->m, "the GC Lease held by %s was not renewed for %llu ms: "
				    "taking it over", holder, (unsigned long long)(now - g->seen_ms));
		lease_write(g, "PUT", lease_body(g, rv, NULL, transitions + 1));
	} else if (g->leader) {
		g->leader = false;
		fibril_info(c->mg->m, "node %s leads the garbage collection now", holder);
	}
	json_object_put(o);
}

static void on_lease_tick(struct fibril_timer *t, void *ud)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;

	(void)t;
	if (!c->running || g->lease_inflight)
		return;
	g->lease_inflight = true;
	if (c->k8s->request(c->k8sctx, "GET", FIBRIL_K8S_LEASES, GC_LEASE_NS, GC_LEASE_NAME, NULL,
			    on_lease_read, g)) {
		g->lease_inflight = false;
		g->stats.errors++;
	}
}

/* ---- deletes ----------------------------------------------------------------------------- */

struct gc_delete {
	struct cl_crd_gc *g;
	const char *what; /* "CiliumEndpoint", ... */
	char name[320];
	uint64_t *counter;
};

static void on_delete(void *ud, int status, const char *reason, const char *body, int err,
		      const char *message)
{
	struct gc_delete *d = ud;
	struct cl_crd_gc *g = d->g;

	(void)body;
	(void)err;
	g->deletes_inflight--;
	if (status == 200 || status == 202) {
		(*d->counter)++;
		fibril_info(g->c->mg->m, "GC: deleted %s %s", d->what, d->name);
	} else if (status != 404 && status != 409) { /* gone, or changed since: not ours to judge */
		g->stats.errors++;
		fibril_warn(g->c->mg->m, "GC: %s %s not deleted: %d %s%s", d->what, d->name, status,
			    status ? reason : "", status ? "" : message);
	}
	free(d);
}

/* DELETE resource ns/name if it still is at resourceVersion rv */
static void gc_delete(struct cl_crd_gc *g, const char *resource, const char *what, const char *ns,
		      const char *name, const char *rv, uint64_t *counter)
{
	struct ep_cluster *c = g->c;
	struct gc_delete *d = calloc(1, sizeof(*d));
	char body[160];

	if (!d)
		return;
	d->g = g;
	d->what = what;
	d->counter = counter;
	snprintf(d->name, sizeof(d->name), "%s%s%s", ns && *ns ? ns : "", ns && *ns ? "/" : "", name);
	snprintf(body, sizeof(body), "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\","
		 "\"preconditions\":{\"resourceVersion\":\"%.40s\"}}", rv ? rv : "");
	g->deletes_inflight++;
	if (c->k8s->request(c->k8sctx, "DELETE", resource, ns, name, rv ? body : NULL, on_delete, d)) {
		g->deletes_inflight--;
		g->stats.errors++;
		free(d);
	}
}

/* ---- what the caches say ---------------------------------------------------------------- */

struct id_set {
	uint32_t *v;
	size_t n, cap;
};

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static bool id_set_has(const struct id_set *s, uint32_t n)
{
	return s->n && bsearch(&n, s->v, s->n, sizeof(*s->v), u32_cmp);
}

/* a local endpoint of pod ns/name? */
static bool local_pod(struct ep_manager *mg, const char *ns, const char *name)
{
	for (size_t i = 0; i < mg->eps_cap; i++) {
		const struct ep_endpoint *ep = mg->eps[i];

		if (ep && ep->pod_namespace && ep->pod_name && !strcmp(ep->pod_namespace, ns) &&
		    !strcmp(ep->pod_name, name))
			return true;
	}
	return false;
}

struct cep_walk {
	struct cl_crd_gc *g;
	struct id_set used;
	bool oom;
	bool own_only; /* the stale own sweep, not the leader's */
	size_t own_deleted;
};

/* one CiliumEndpoint: its identity is in use; its node gone -> delete it */
static int cep_one(const char *json, void *ud)
{
	struct cep_walk *w = ud;
	struct cl_crd_gc *g = w->g;
	struct ep_cluster *c = g->c;
	struct json_object *o = json_tokener_parse(json);
	struct json_object *id = path(o, "status", "identity", "id");
	const char *node = str_at(o, "status", "networking", "node-name");
	const char *ns = str_at(o, "metadata", "namespace", NULL);
	const char *name = str_at(o, "metadata", "name", NULL);
	const char *rv = str_at(o, "metadata", "resourceVersion", NULL);

	if (!w->own_only && id && json_object_is_type(id, json_type_int) &&
	    json_object_get_int64(id) > 0 && json_object_get_int64(id) <= UINT32_MAX) {
		if (w->used.n == w->used.cap) {
			size_t cap = w->used.cap ? w->used.cap * 2 : 256;
			uint32_t *v = realloc(w->used.v, cap * sizeof(*v));

			if (!v) {
				w->oom = true;
				json_object_put(o);
				return 1;
			}
			w->used.v = v;
			w->used.cap = cap;
		}
		w->used.v[w->used.n++] = (uint32_t)json_object_get_int64(id);
	}
	if (node && ns && name && w->own_only && !strcmp(node, c->node) &&
	    !local_pod(c->mg, ns, name)) {
		w->own_deleted++;
		gc_delete(g, FIBRIL_K8S_CILIUM_ENDPOINTS, "stale CiliumEndpoint of this node", ns, name,
			  rv, &g->stats.own_endpoints);
	} else if (node && ns && name && !w->own_only && strcmp(node, c->node) &&
		   !c->k8s->get(c->k8sctx, FIBRIL_K8S_CLUSTER_NODES, "", node)) {
		gc_delete(g, FIBRIL_K8S_CILIUM_ENDPOINTS, "CiliumEndpoint (its Node is gone)", ns, name,
			  rv, &g->stats.endpoints);
	}
	json_object_put(o);
	return 0;
}

static int ciliumnode_one(const char *json, void *ud)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;
	struct json_object *o = json_tokener_parse(json);
	const char *name = str_at(o, "metadata", "name", NULL);
	const char *rv = str_at(o, "metadata", "resourceVersion", NULL);

	if (name && strcmp(name, c->node) && !c->k8s->get(c->k8sctx, FIBRIL_K8S_CLUSTER_NODES, "", name))
		gc_delete(g, FIBRIL_K8S_CILIUM_NODES, "CiliumNode (its Node is gone)", "", name, rv,
			  &g->stats.nodes);
	json_object_put(o);
	return 0;
}

/* A Kubernetes node name: an RFC 1123 subdomain. */
static bool node_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 253 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '.'))
			return false;
	return true;
}

/* A pod CIDR claim (ipam-cluster-pool's Lease) whose holder has no Node
 * object any more. A holder that is no node name was never an agent's
 * claim: the claimers ignore it with a log line, the GC leaves it to the
 * operator. */
static int podcidr_claim_one(const char *json, void *ud)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;
	struct json_object *o = json_tokener_parse(json);
	const char *name = str_at(o, "metadata", "name", NULL);
	const char *rv = str_at(o, "metadata", "resourceVersion", NULL);
	const char *holder = str_at(o, "spec", "holderIdentity", NULL);

	if (name && rv && node_name_ok(holder) && strcmp(holder, c->node) &&
	    !c->k8s->get(c->k8sctx, FIBRIL_K8S_CLUSTER_NODES, "", holder))
		gc_delete(g, FIBRIL_K8S_LEASES, "pod CIDR claim (its Node is gone)",
			  FIBRIL_K8S_PODCIDR_CLAIM_NS, name, rv, &g->stats.claims);
	json_object_put(o);
	return 0;
}

struct id_walk {
	struct cl_crd_gc *g;
	const struct id_set *used;
	struct gc_cand *next;
	size_t n, cap;
	uint64_t now;
	bool oom;
};

static struct gc_cand *cand_old(struct cl_crd_gc *g, uint32_t n)
{
	for (size_t i = 0; i < g->ncands; i++)
		if (g->cands[i].number == n)
			return &g->cands[i];
	return NULL;
}

/* one CiliumIdentity: referenced, or unreferenced since when; past the grace: delete it */
static int identity_one(const char *json, void *ud)
{
	struct id_walk *w = ud;
	struct cl_crd_gc *g = w->g;
	struct ep_cluster *c = g->c;
	struct json_object *o = json_tokener_parse(json);
	const char *name = str_at(o, "metadata", "name", NULL);
	const char *rv = str_at(o, "metadata", "resourceVersion", NULL);
	uint32_t n;

	if (!name || cl_number_parse(name, strlen(name), FIBRIL_IDENTITY_LOCAL_MIN, EP_IDENTITY_MAX, &n) ||
	    id_set_has(w->used, n) || ep_identity_find(c->mg, n)) {
		json_object_put(o);
		return 0;
	}
	struct gc_cand *old = cand_old(g, n);
	uint64_t since = old ? old->since_ms : w->now;

	if (w->now - since >= c->gc_grace_ms) {
		gc_delete(g, FIBRIL_K8S_CILIUM_IDENTITIES, "CiliumIdentity (unused)", "", name, rv,
			  &g->stats.identities);
	} else {
		if (w->n == w->cap) {
			size_t cap = w->cap ? w->cap * 2 : 64;
			struct gc_cand *v = realloc(w->next, cap * sizeof(*v));

			if (!v) {
				w->oom = true;
				json_object_put(o);
				return 1;
			}
			w->next = v;
			w->cap = cap;
		}
		w->next[w->n++] = (struct gc_cand){.number = n, .since_ms = since};
	}
	json_object_put(o);
	return 0;
}

/* this node's CiliumEndpoints of pods it no longer has (once: after the restore) */
static void own_sweep(struct cl_crd_gc *g)
{
	struct ep_cluster *c = g->c;
	struct cep_walk w = {.g = g, .own_only = true};

	if (g->own_swept || !g->synced || !g->restored)
		return;
	g->own_swept = true;
	c->k8s->list(c->k8sctx, FIBRIL_K8S_CILIUM_ENDPOINTS, cep_one, &w);
	fibril_info(c->mg->m, "CiliumEndpoints of this node matching no local endpoint after the "
		    "restore: %zu, deleting them", w.own_deleted);
}

static void on_gc_tick(struct fibril_timer *t, void *ud)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;

	(void)t;
	if (!c->running || !g->synced || !is_leader(g) || g->deletes_inflight)
		return;
	struct cep_walk w = {.g = g};

	c->k8s->list(c->k8sctx, FIBRIL_K8S_CILIUM_ENDPOINTS, cep_one, &w);
	c->k8s->list(c->k8sctx, FIBRIL_K8S_CILIUM_NODES, ciliumnode_one, g);
	c->k8s->list(c->k8sctx, FIBRIL_K8S_PODCIDR_CLAIMS, podcidr_claim_one, g);
	/* no CiliumEndpoint at all: an empty cluster, or a CRD not served
	 * (the informer's cache is then empty and synced): no identity is
	 * judged unused on that */
	if (!w.oom && w.used.n) {
		qsort(w.used.v, w.used.n, sizeof(*w.used.v), u32_cmp);
		struct id_walk iw = {.g = g, .used = &w.used, .now = mono_ms()};

		c->k8s->list(c->k8sctx, FIBRIL_K8S_CILIUM_IDENTITIES, identity_one, &iw);
		if (!iw.oom) {
			free(g->cands);
			g->cands = iw.next;
			g->ncands = iw.n;
		} else {
			free(iw.next);
		}
	}
	free(w.used.v);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void on_synced(void *ud, int err, const char *pending)
{
	struct cl_crd_gc *g = ud;
	struct ep_cluster *c = g->c;

	if (!c->running)
		return;
	if (err) {
		fibril_warn(c->mg->m, "the CRD garbage collection waits for the first list of %s",
			    pending ? pending : "its resources");
		c->k8s->wait_synced(c->k8sctx, SYNC_RES, GC_SYNC_TIMEOUT_MS, on_synced, g);
		return;
	}
	g->synced = true;
	own_sweep(g);
}

void cl_crd_restored(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;

	if (!c || !c->running || !c->crd_gc)
		return;
	c->crd_gc->restored = true;
	own_sweep(c->crd_gc);
}

int cl_crd_gc_start(struct ep_cluster *c)
{
	struct cl_crd_gc *g = calloc(1, sizeof(*g));
	int rc = 0;

	if (!g)
		return -ENOMEM;
	g->c = c;
	g->lease_ms = fibril_config_duration_ms(c->mg->m, "gc-lease-duration");
	g->renew_ms = g->lease_ms / 3 ? g->lease_ms / 3 : 1;
	c->gc_grace_ms = fibril_config_duration_ms(c->mg->m, "identity-gc-grace");
	c->gc_interval_ms = fibril_config_duration_ms(c->mg->m, "identity-gc-interval");
	for (size_t i = 0; !rc && SYNC_RES[i]; i++)
		rc = c->k8s->watch_resource(c->k8sctx, SYNC_RES[i]);
	if (!rc)
		rc = c->k8s->wait_synced(c->k8sctx, SYNC_RES, GC_SYNC_TIMEOUT_MS, on_synced, g);
	if (rc) {
		fibril_module_set_error(c->mg->m, "identity-allocation = crd: the garbage collection "
					"cannot watch its resources: %s", strerror(-rc));
		free(g);
		return rc;
	}
	g->lease_timer = fibril_timer_add(c->mg->m, 0, g->renew_ms, on_lease_tick, g);
	g->gc_timer = fibril_timer_add(c->mg->m, c->gc_interval_ms, c->gc_interval_ms, on_gc_tick, g);
	c->crd_gc = g;
	return 0;
}

/* stop: timers go; answers still to come find c->running false (g lives until free) */
void cl_crd_gc_stop(struct ep_cluster *c)
{
	struct cl_crd_gc *g = c->crd_gc;

	if (!g)
		return;
	fibril_timer_cancel(g->lease_timer);
	fibril_timer_cancel(g->gc_timer);
	g->lease_timer = g->gc_timer = NULL;
	g->leader = false;
}

void cl_crd_gc_free(struct ep_cluster *c)
{
	struct cl_crd_gc *g = c->crd_gc;

	if (!g)
		return;
	cl_crd_gc_stop(c);
	free(g->cands);
	free(g);
	c->crd_gc = NULL;
}
