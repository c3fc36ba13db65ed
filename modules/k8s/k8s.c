/* modules/k8s/k8s.c - the "k8s" capability: configuration (kubeconfig or
 * in-cluster service account), the service table (watch_resource,
 * wait_synced, list, get, annotate_node, node_name), a start that waits for
 * the requested caches to sync, node annotation with retries, the API
 * routes GET /v1/k8s and /v1/k8s/{resource}, health and summary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "k8s_mod.h"

/* ---- the barrier ---------------------------------------------------------- */

struct k8s_waiter {
	struct k8s_waiter *next;
	struct k8s *k;
	bool want[K8S_NRES];
	struct fibril_timer *timer;
	fibril_k8s_synced_fn cb;
	void *ud;
};

/* The resources of want not synced yet; with why, each with its last error
 * ("pods (GET /api/v1/pods: HTTP 401: Unauthorized)"). */
static void pending_names(struct k8s *k, const bool *want, char *buf, size_t len, bool why)
{
	size_t at = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < K8S_NRES; i++) {
		const struct k8s_res *r = &k->res[i];
		if (!want[i] || r->synced || at >= len)
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "", r->def->name);
		if (why && r->ws.last_error[0] && at < len)
			at += (size_t)snprintf(buf + at, len - at, " (%s)", r->ws.last_error);
	}
}

static bool all_synced(struct k8s *k, const bool *want)
{
	for (size_t i = 0; i < K8S_NRES; i++)
		if (want[i] && !k->res[i].synced)
			return false;
	return true;
}

static void waiter_unlink(struct k8s *k, struct k8s_waiter *w)
{
	for (struct k8s_waiter **pp = &k->waiters; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			return;
		}
}

static void on_waiter_timeout(struct fibril_timer *t, void *ud)
{
	struct k8s_waiter *w = ud;
	struct k8s *k = w->k;
	char names[512];
	w->timer = NULL;
	waiter_unlink(k, w);
	pending_names(k, w->want, names, sizeof(names), false);
	w->cb(w->ud, names[0] ? -ETIMEDOUT : 0, names);
	free(w);
}

static bool start_want(struct k8s *k, bool *want)
{
	bool any = false;
	for (size_t i = 0; i < K8S_NRES; i++) {
		want[i] = k->res[i].wanted;
		any |= want[i];
	}
	return any;
}

void k8s_synced_changed(struct k8s *k)
{
	if (k->start_pending) {
		bool want[K8S_NRES];
		start_want(k, want);
		if (all_synced(k, want)) {
			k->start_pending = false;
			if (k->start_timer)
				fibril_timer_cancel(k->start_timer);
			k->start_timer = NULL;
			fibril_module_start_done(k->m, 0);
		}
	}
	struct k8s_waiter **pp = &k->waiters;
	while (*pp) {
		struct k8s_waiter *w = *pp;
		if (!all_synced(k, w->want)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		if (w->timer)
			fibril_timer_cancel(w->timer);
		w->cb(w->ud, 0, "");
		free(w);
	}
}

/* ---- health ------------------------------------------------------------------ */

void k8s_health_update(struct k8s_res *r)
{
	char comp[80];
	snprintf(comp, sizeof(comp), "watch:%s", r->def->name);
	if (!r->k->running)
		return;
	if (r->unavailable) /* not an error: the cluster has no such kind */
		fibril_health_report(r->k->m, comp, FIBRIL_HEALTH_OK,
				     "watch %s: not served by the API server (404): none; listing again "
				     "every %us",
				     r->def->name, K8S_UNAVAILABLE_RETRY_MS / 1000);
	else if (r->phase == PH_BACKOFF) /* the same figure as the log line's */
		fibril_health_report(r->k->m, comp, FIBRIL_HEALTH_DEGRADED,
				     "watch %s: %s; retrying in %.1fs", r->def->name, r->error,
				     (double)r->retry_ms / 1000);
	else if (r->phase == PH_WATCHING && (r->error[0] || r->ws.stalled))
		/* a watch sent again after an error or a stall is OK only once
		 * the server answers it (200 headers, or data after a stall) */
		fibril_health_report(r->k->m, comp, FIBRIL_HEALTH_DEGRADED,
				     "watch %s: %s; watch sent again, no answer yet", r->def->name,
				     r->error);
	else if (!r->synced)
		fibril_health_report(r->k->m, comp, FIBRIL_HEALTH_DEGRADED, "watch %s: not synced",
				     r->def->name);
	else
		fibril_health_report(r->k->m, comp, FIBRIL_HEALTH_OK, "watching");
}

/* ---- the service table ----------------------------------------------------------- */

static int op_watch_resource(void *ctx, const char *resource)
{
	struct k8s *k = ctx;
	struct k8s_res *r = k8s_res_find(k, resource);
	if (!r)
		return -ENOENT;
	r->wanted = true;
	if (k->running)
		k8s_res_start(r);
	return 0;
}

static int op_wait_synced(void *ctx, const char *const *resources, uint64_t timeout_ms,
			  fibril_k8s_synced_fn cb, void *ud)
{
	struct k8s *k = ctx;
	if (!cb)
		return -EINVAL;
	struct k8s_waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->k = k;
	w->cb = cb;
	w->ud = ud;
	for (size_t i = 0; resources && resources[i]; i++) {
		struct k8s_res *r = k8s_res_find(k, resources[i]);
		if (!r) {
			free(w);
			return -ENOENT;
		}
		w->want[r - k->res] = true;
	}
	w->next = k->waiters;
	k->waiters = w;
	/* already synced: answer from the loop, not from inside this call */
	if (all_synced(k, w->want))
		timeout_ms = 0;
	w->timer = fibril_timer_add(k->m, timeout_ms, 0, on_waiter_timeout, w);
	return 0;
}

static int op_list(void *ctx, const char *resource, fibril_k8s_object_fn cb, void *ud)
{
	struct k8s *k = ctx;
	struct k8s_res *r = k8s_res_find(k, resource);
	if (!r)
		return -ENOENT;
	for (size_t i = 0; i < r->cache.nb; i++)
		for (struct k8s_obj *o = r->cache.b[i]; o; o = o->next)
			if (cb(o->json, ud))
				return 0;
	return 0;
}

static const char *op_get(void *ctx, const char *resource, const char *ns, const char *name)
{
	struct k8s *k = ctx;
	struct k8s_res *r = k8s_res_find(k, resource);
	if (!r || !name)
		return NULL;
	char key[1024];
	if (ns && *ns)
		snprintf(key, sizeof(key), "%s/%s", ns, name);
	else
		snprintf(key, sizeof(key), "%s", name);
	struct k8s_obj *o = k8s_cache_get(&r->cache, key);
	return o ? o->json : NULL;
}

static const char *op_node_name(void *ctx)
{
	struct k8s *k = ctx;
	return k->node;
}

/* ---- node annotations ------------------------------------------------------------- */

struct k8s_annot {
	struct k8s_annot *next;
	struct k8s *k;
	char *body;
	unsigned failures;
	struct fibril_timer *timer;
	struct k8s_req *req;
	fibril_k8s_done_fn cb;
	void *ud;
};

static void annot_send(struct k8s_annot *a);

static void annot_end(struct k8s_annot *a, int err, const char *msg)
{
	struct k8s *k = a->k;
	for (struct k8s_annot **pp = &k->annots; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	if (a->cb)
		a->cb(a->ud, err, msg);
	free(a->body);
	free(a);
}

static void on_annot_retry(struct fibril_timer *t, void *ud)
{
	struct k8s_annot *a = ud;
	a->timer = NULL;
	annot_send(a);
}

static void on_annot_done(struct k8s_req *q, int err)
{
	struct k8s_annot *a = q->ud;
	struct k8s *k = a->k;
	a->req = NULL;
	if (err == -ECANCELED)
		return; /* stop ends it */
	if (!err) {
		fibril_info(k->m, "annotated node %s", k->node);
		annot_end(a, 0, "");
		return;
	}
	uint64_t ms = K8S_BACKOFF_MIN_MS;
	for (unsigned i = 0; i < a->failures && ms < K8S_BACKOFF_MAX_MS; i++)
		ms *= 2;
	if (ms > K8S_BACKOFF_MAX_MS)
		ms = K8S_BACKOFF_MAX_MS;
	ms = k8s_jitter(k, ms);
	a->failures++;
	fibril_warn(k->m, "annotate node %s: %s; retrying in %.1fs", k->node, q->errbuf,
		    (double)ms / 1000);
	a->timer = fibril_timer_add(k->m, ms, 0, on_annot_retry, a);
}

static void annot_send(struct k8s_annot *a)
{
	struct k8s *k = a->k;
	char path[512];
	char *n = mod_http_escape(k->node);
	snprintf(path, sizeof(path), "/api/v1/nodes/%s", n ? n : "");
	free(n);
	char *body = strdup(a->body);
	struct k8s_req *q = body ? k8s_req_new(k, "PATCH", path, body,
					       "application/merge-patch+json", on_annot_done, a)
				 : NULL;
	if (!q || k8s_req_send(q, false, 30000)) {
		a->timer = fibril_timer_add(k->m, K8S_BACKOFF_MIN_MS, 0, on_annot_retry, a);
		return;
	}
	a->req = q;
}

static int op_annotate_node(void *ctx, const char *const *keys, const char *const *values,
			    size_t n, fibril_k8s_done_fn cb, void *ud)
{
	struct k8s *k = ctx;
	if (!k->running)
		return -EAGAIN;
	struct json_object *ann = json_object_new_object();
	for (size_t i = 0; i < n; i++)
		json_object_object_add(ann, keys[i],
				       values[i] ? json_object_new_string(values[i]) : NULL);
	struct json_object *meta = json_object_new_object(), *doc = json_object_new_object();
	json_object_object_add(meta, "annotations", ann);
	json_object_object_add(doc, "metadata", meta);
	struct k8s_annot *a = calloc(1, sizeof(*a));
	if (a)
		a->body = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
	json_object_put(doc);
	if (!a || !a->body) {
		free(a);
		return -ENOMEM;
	}
	a->k = k;
	a->cb = cb;
	a->ud = ud;
	a->next = k->annots;
	k->annots = a;
	annot_send(a);
	return 0;
}

/* ---- API routes ------------------------------------------------------------------- */

static struct json_object *res_json(struct k8s_res *r)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(r->def->name));
	json_object_object_add(o, "synced", json_object_new_boolean(r->synced));
	json_object_object_add(o, "objects", json_object_new_int64((int64_t)r->cache.n));
	char ts[40] = "";
	if (r->last_event) {
		struct tm tm;
		gmtime_r(&r->last_event, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	}
	json_object_object_add(o, "last_event", r->last_event ? json_object_new_string(ts) : NULL);
	json_object_object_add(o, "relists", json_object_new_int64((int64_t)r->relists));
	json_object_object_add(o, "watching", json_object_new_boolean(r->phase == PH_WATCHING));
	static const char *const phases[] = {"idle", "listing", "watching", "backoff", "unavailable"};
	json_object_object_add(o, "phase", json_object_new_string(phases[r->phase]));
	json_object_object_add(o, "resource_version", r->rv ? json_object_new_string(r->rv) : NULL);
	json_object_object_add(o, "watches", json_object_new_int64((int64_t)r->watches));
	json_object_object_add(o, "bookmarks", json_object_new_int64((int64_t)r->bookmarks));
	json_object_object_add(o, "error", r->error[0] ? json_object_new_string(r->error) : NULL);
	json_object_object_add(o, "stalled", json_object_new_boolean(r->ws.stalled));
	json_object_object_add(o, "stalls", json_object_new_int64((int64_t)r->ws.stalls));
	struct json_object *bad = json_object_new_object();
	for (int i = 0; i < K8S_BAD_NKINDS; i++)
		json_object_object_add(bad, k8s_bad_line_name(i),
				       json_object_new_int64((int64_t)r->ws.bad_lines[i]));
	json_object_object_add(o, "bad_lines", bad);
	static const char *names[3] = {"added", "updated", "deleted"};
	struct json_object *pub = json_object_new_object(), *del = json_object_new_object();
	for (int i = 0; i < 3; i++) {
		json_object_object_add(pub, names[i], json_object_new_int64((int64_t)r->pub[i]));
		json_object_object_add(del, names[i], json_object_new_int64((int64_t)r->deliv[i]));
	}
	json_object_object_add(o, "published", pub);
	json_object_object_add(o, "delivered", del);
	return o;
}

static void respond(struct fibril_response *resp, struct json_object *doc)
{
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
	json_object_put(doc);
}

static void on_route_status(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct k8s *k = ud;
	struct json_object *doc = json_object_new_object(), *arr = json_object_new_array();
	json_object_object_add(doc, "node", json_object_new_string(k->node));
	json_object_object_add(doc, "server", k->conn.server ? json_object_new_string(k->conn.server)
							     : NULL);
	for (size_t i = 0; i < K8S_NRES; i++)
		if (k->res[i].wanted)
			json_object_array_add(arr, res_json(&k->res[i]));
	json_object_object_add(doc, "resources", arr);
	respond(resp, doc);
}

static void on_route_res(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct k8s *k = ud;
	struct k8s_res *r = k8s_res_find(k, fibril_req_param(req, "resource"));
	if (!r) {
		fibril_resp_error(resp, 404, "unknown resource %s", fibril_req_param(req, "resource"));
		return;
	}
	struct json_object *doc = res_json(r), *arr = json_object_new_array();
	for (size_t i = 0; i < r->cache.nb; i++)
		for (struct k8s_obj *o = r->cache.b[i]; o; o = o->next) {
			struct json_object *e = json_object_new_object();
			json_object_object_add(e, "namespace", json_object_new_string(o->ns));
			json_object_object_add(e, "name", json_object_new_string(o->name));
			json_object_object_add(e, "resourceVersion", json_object_new_string(o->rv));
			json_object_array_add(arr, e);
		}
	json_object_object_add(doc, "items", arr);
	respond(resp, doc);
}

/* Our own subscriber: counts what the bus delivered, per event type. */
static int on_own_event(const struct fibril_event *ev, void *ud)
{
	struct k8s_res *r = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (ev->payload_len < FIBRIL_OFFSETOFEND(struct fibril_k8s_event, resource_version) || e->sz < FIBRIL_OFFSETOFEND(struct fibril_k8s_event, resource_version) ||
	    e->type > FIBRIL_K8S_DELETED)
		return -EINVAL;
	r->deliv[e->type]++;
	return 0;
}

/* ---- lifecycle -------------------------------------------------------------------- */

static int k8s_init(struct fibril_module *m)
{
	struct k8s *k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->m = m;
	k->page_size = 500;
	for (size_t i = 0; i < K8S_NRES; i++) {
		k->res[i].k = k;
		k->res[i].def = &k8s_resdefs[i];
		snprintf(k->res[i].topic, sizeof(k->res[i].topic), "%s%s", FIBRIL_K8S_TOPIC_PREFIX,
			 k8s_resdefs[i].name);
		fibril_bus_subscribe(m, k->res[i].topic, FIBRIL_K8S_VERSION, on_own_event,
				     &k->res[i]);
	}
	k->ops = (struct fibril_k8s_ops){
		.hdr = {.sz = sizeof(struct fibril_k8s_ops), .version = FIBRIL_K8S_VERSION},
		.watch_resource = op_watch_resource,
		.wait_synced = op_wait_synced,
		.list = op_list,
		.get = op_get,
		.annotate_node = op_annotate_node,
		.node_name = op_node_name,
		.request = k8s_op_request,
	};
	fibril_module_set_data(m, k);
	int rc = fibril_api_route(m, "GET", "/v1/k8s", 0, on_route_status, k);
	if (!rc)
		rc = fibril_api_route(m, "GET", "/v1/k8s/{resource}", 0, on_route_res, k);
	if (rc)
		return rc;
	if ((rc = k8s_metrics_register(k))) {
		fibril_module_set_error(m, "cannot register the k8s metrics: %s", strerror(-rc));
		return rc;
	}
	return fibril_service_provide(m, FIBRIL_K8S_CAPABILITY, &k->ops.hdr, k);
}

static int read_config(struct k8s *k)
{
	struct fibril_module *m = k->m;
	char why[512] = "";
	const char *node = fibril_config_string(m, "node-name");
	if (!node || !*node)
		node = fibril_config_get("agent", "node-name");
	if (node && *node) {
		snprintf(k->node, sizeof(k->node), "%s", node);
	} else if (gethostname(k->node, sizeof(k->node) - 1)) {
		fibril_module_set_error(m, "k8s: no node name and gethostname failed");
		return -EINVAL;
	}
	k->sync_timeout_ms = fibril_config_duration_ms(m, "sync-timeout");
	k->page_size = fibril_config_int(m, "page-size");
	k->watch_idle_ms = (uint64_t)fibril_config_duration_ms(m, "watch-idle-timeout");
	const char *kc = fibril_config_string(m, "kubeconfig");
	if (!kc || !*kc)
		kc = getenv("KUBECONFIG");
	int rc;
	if (kc && *kc) {
		char first[4096];
		snprintf(first, sizeof(first), "%s", kc);
		char *colon = strchr(first, ':'); /* $KUBECONFIG may be a list: use the first */
		if (colon)
			*colon = '\0';
		rc = k8s_kubeconfig_load(first, &k->conn, why, sizeof(why));
	} else {
		rc = k8s_incluster_load(fibril_config_string(m, "serviceaccount-dir"), &k->conn, why,
					sizeof(why));
	}
	if (rc) {
		fibril_module_set_error(m, "k8s: %s", why);
		return rc;
	}
	/* [k8s] resources: watched even if no module asks */
	const char *list = fibril_config_string(m, "resources");
	if (list && *list) {
		char *dup = strdup(list), *save = NULL;
		for (char *t = dup ? strtok_r(dup, ", ", &save) : NULL; t;
		     t = strtok_r(NULL, ", ", &save)) {
			struct k8s_res *r = k8s_res_find(k, t);
			if (!r) {
				fibril_module_set_error(m, "k8s: unknown resource \"%s\"", t);
				free(dup);
				k8s_conn_free(&k->conn);
				return -EINVAL;
			}
			r->wanted = true;
		}
		free(dup);
	}
	return 0;
}

static void on_start_timeout(struct fibril_timer *t, void *ud)
{
	struct k8s *k = ud;
	k->start_timer = NULL;
	if (!k->start_pending)
		return;
	bool want[K8S_NRES];
	char names[2048];
	start_want(k, want);
	pending_names(k, want, names, sizeof(names), true);
	k->start_pending = false;
	fibril_module_set_error(k->m, "k8s: caches not synced within %llus: %s",
				(unsigned long long)(k->sync_timeout_ms / 1000), names);
	fibril_module_start_done(k->m, -ETIMEDOUT);
}

static int k8s_start(struct fibril_module *m)
{
	struct k8s *k = fibril_module_data(m);
	int rc = read_config(k);
	if (rc)
		return rc;
	char why[512];
	rc = k8s_http_open(k, why, sizeof(why));
	if (rc) {
		fibril_module_set_error(m, "k8s: %s", why);
		return rc;
	}
	k->rng = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16) ^ 0x9e3779b9u;
	k->running = true;
	fibril_info(m, "API server %s, node %s", k->conn.server, k->node);
	bool want[K8S_NRES];
	if (!start_want(k, want)) {
		fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "no resources requested");
		return 0;
	}
	k->start_pending = true;
	k->start_timer = fibril_timer_add(m, k->sync_timeout_ms, 0, on_start_timeout, k);
	for (size_t i = 0; i < K8S_NRES; i++)
		if (k->res[i].wanted)
			k8s_res_start(&k->res[i]);
	return k->start_pending ? FIBRIL_START_PENDING : 0;
}

static void k8s_shutdown(struct k8s *k)
{
	k->running = false;
	k->start_pending = false;
	fibril_timer_cancel(k->start_timer);
	for (struct k8s_waiter *w = k->waiters; w; w = w->next)
		fibril_timer_cancel(w->timer);
	for (struct k8s_annot *a = k->annots; a; a = a->next)
		fibril_timer_cancel(a->timer);
	k->start_timer = NULL;
	for (struct k8s_waiter *w = k->waiters; w; w = w->next)
		w->timer = NULL;
	for (struct k8s_annot *a = k->annots; a; a = a->next)
		a->timer = NULL;
	for (size_t i = 0; i < K8S_NRES; i++)
		k8s_res_stop(&k->res[i]);
	k8s_http_close(k);
	while (k->waiters) {
		struct k8s_waiter *w = k->waiters;
		k->waiters = w->next;
		w->cb(w->ud, -ECANCELED, "");
		free(w);
	}
	while (k->annots)
		annot_end(k->annots, -ECANCELED, "the k8s module is stopping");
}

static void k8s_stop(struct fibril_module *m)
{
	k8s_shutdown(fibril_module_data(m));
}

static void k8s_fini(struct fibril_module *m)
{
	struct k8s *k = fibril_module_data(m);
	if (!k)
		return;
	if (k->http || k->running)
		k8s_shutdown(k);
	for (size_t i = 0; i < K8S_NRES; i++)
		k8s_res_free(&k->res[i]);
	k8s_conn_free(&k->conn);
	free(k->file_token);
	free(k);
	fibril_module_set_data(m, NULL);
}

static int k8s_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct k8s *k = fibril_module_data(m);
	if (!k->running)
		return snprintf(buf, len, "stopped");
	size_t synced = 0, wanted = 0, objs = 0;
	for (size_t i = 0; i < K8S_NRES; i++) {
		wanted += k->res[i].wanted;
		synced += k->res[i].synced;
		objs += k->res[i].cache.n;
	}
	if (synced < wanted)
		return snprintf(buf, len, "%zu/%zu resources synced, %zu objects", synced, wanted,
				objs);
	return snprintf(buf, len, "%zu resources synced, %zu objects", synced, objs);
}

static int check_resources(const char *value, char *why, size_t why_len)
{
	char *dup = strdup(value), *save = NULL;
	if (!dup)
		return -ENOMEM;
	for (char *t = strtok_r(dup, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		bool ok = false;
		for (size_t i = 0; i < K8S_NRES; i++)
			ok |= strcmp(k8s_resdefs[i].name, t) == 0;
		if (!ok) {
			snprintf(why, why_len, "unknown resource \"%s\"", t);
			free(dup);
			return -EINVAL;
		}
	}
	free(dup);
	return 0;
}

static const struct fibril_config_key k8s_keys[] = {
	{.name = "kubeconfig", .type = FIBRIL_CONFIG_PATH,
	 .help = "kubeconfig file (default: $KUBECONFIG, else the in-cluster service account)"},
	{.name = "serviceaccount-dir", .type = FIBRIL_CONFIG_PATH,
	 .default_value = "/var/run/secrets/kubernetes.io/serviceaccount",
	 .help = "In-cluster: directory of the service-account token and ca.crt"},
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING,
	 .help = "This node's name (default: [agent] node-name, else the hostname)"},
	{.name = "sync-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "How long start waits for the requested caches to sync", .min = 100,
	 .max = 3600000},
	{.name = "watch-idle-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "150s",
	 .help = "A watch that delivers no byte (event or bookmark) for this long is restarted "
		 "from its last resourceVersion (0: never); the API server sends a bookmark "
		 "about every minute", .min = 0, .max = 3600000},
	{.name = "resources", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "Resources to watch even if no module asks for them", .check = check_resources},
	{.name = "page-size", .type = FIBRIL_CONFIG_INT, .default_value = "500",
	 .help = "(hidden) LIST page size", .min = 1, .max = 100000},
	{0},
};

FIBRIL_MODULE(.name = "k8s", .version = K8S_MODULE_VERSION,
	      .description = "Kubernetes informers (LIST+WATCH, caches, bus events)",
	      .provides = FIBRIL_LIST(FIBRIL_K8S_CAPABILITY), .config_keys = k8s_keys,
	      .init = k8s_init, .start = k8s_start, .stop = k8s_stop, .fini = k8s_fini,
	      .summary = k8s_summary);
