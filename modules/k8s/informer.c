/* modules/k8s/informer.c - one client-go style informer per resource: LIST
 * in pages (limit + continue), then WATCH from the list's resourceVersion
 * with bookmarks and a randomized timeoutSeconds; a clean end re-watches
 * from the last seen resourceVersion, an expired one (HTTP 410 or an ERROR
 * event with code 410) relists, so does a resourceVersion the server has
 * not reached (its history restarted lower), other errors back off 0.8 s doubling to
 * 30 s with jitter; a relist forced again within 2 minutes of the previous
 * list backs off the same way (client-go's reflector backoff). A watch that
 * delivers no byte for watch-idle-timeout (a dead peer, a stalled proxy) is
 * restarted from the last resourceVersion; a line that is not a valid event
 * is logged, counted and dropped without touching the cache. A list
 * answered 404 (a CRD that is not installed) makes the resource
 * "unavailable": synced and empty, said once, listed again every minute. The cache maps namespace/name to the object's JSON and
 * resourceVersion; a relist is diffed against it so each change is
 * published on "k8s.<resource>" exactly once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_mod.h"

const struct k8s_resdef k8s_resdefs[K8S_NRES] = {
	{FIBRIL_K8S_NODES, "/api/v1/nodes", 1},
	{FIBRIL_K8S_PODS, "/api/v1/pods", 2},
	{FIBRIL_K8S_NAMESPACES, "/api/v1/namespaces", 0},
	{FIBRIL_K8S_SERVICES, "/api/v1/services", 0},
	{FIBRIL_K8S_ENDPOINTSLICES, "/apis/discovery.k8s.io/v1/endpointslices", 0},
	{FIBRIL_K8S_NETWORKPOLICIES, "/apis/networking.k8s.io/v1/networkpolicies", 0},
	{FIBRIL_K8S_CNPS, "/apis/cilium.io/v2/ciliumnetworkpolicies", 0},
	{FIBRIL_K8S_CCNPS, "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies", 0},
	{FIBRIL_K8S_CLUSTER_NODES, "/api/v1/nodes", 0},
	{FIBRIL_K8S_CILIUM_IDENTITIES, "/apis/cilium.io/v2/ciliumidentities", 0},
	{FIBRIL_K8S_CILIUM_ENDPOINTS, "/apis/cilium.io/v2/ciliumendpoints", 0},
	{FIBRIL_K8S_CILIUM_NODES, "/apis/cilium.io/v2/ciliumnodes", 0},
	{FIBRIL_K8S_LEASES, "/apis/coordination.k8s.io/v1/leases", 0},
	{FIBRIL_K8S_PODCIDR_CLAIMS,
	 "/apis/coordination.k8s.io/v1/namespaces/" FIBRIL_K8S_PODCIDR_CLAIM_NS "/leases", 3},
};

struct k8s_res *k8s_res_find(struct k8s *k, const char *name)
{
	for (size_t i = 0; name && i < K8S_NRES; i++)
		if (strcmp(k->res[i].def->name, name) == 0)
			return &k->res[i];
	return NULL;
}

uint64_t k8s_jitter(struct k8s *k, uint64_t ms)
{
	k->rng = k->rng * 1103515245u + 12345u;
	return ms + (uint64_t)((k->rng >> 8) % (uint32_t)(ms / 5 + 1));
}

/* ---- the cache ---------------------------------------------------------- */

static size_t hash(const char *s)
{
	size_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

struct k8s_obj *k8s_cache_get(struct k8s_cache *c, const char *key)
{
	if (!c->nb)
		return NULL;
	for (struct k8s_obj *o = c->b[hash(key) & (c->nb - 1)]; o; o = o->next)
		if (strcmp(o->key, key) == 0)
			return o;
	return NULL;
}

static void obj_free(struct k8s_obj *o)
{
	free(o); /* one allocation: k8s_obj_new */
}

static int cache_grow(struct k8s_cache *c)
{
	size_t nb = c->nb ? c->nb * 2 : 64;
	struct k8s_obj **b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < c->nb; i++) {
		struct k8s_obj *o = c->b[i], *n;
		for (; o; o = n) {
			n = o->next;
			size_t h = hash(o->key) & (nb - 1);
			o->next = b[h];
			b[h] = o;
		}
	}
	free(c->b);
	c->b = b;
	c->nb = nb;
	return 0;
}

/* Insert o (no object with its key may be present). */
static void cache_put(struct k8s_cache *c, struct k8s_obj *o)
{
	if (c->n + 1 > c->nb && cache_grow(c)) {
		obj_free(o);
		return;
	}
	size_t h = hash(o->key) & (c->nb - 1);
	o->next = c->b[h];
	c->b[h] = o;
	c->n++;
}

static struct k8s_obj *cache_take(struct k8s_cache *c, const char *key);

/* Insert o in place of the object of its key, if any. */
void k8s_cache_replace(struct k8s_cache *c, struct k8s_obj *o)
{
	struct k8s_obj *dup = cache_take(c, o->key);
	if (dup)
		obj_free(dup);
	cache_put(c, o);
}

static struct k8s_obj *cache_take(struct k8s_cache *c, const char *key)
{
	if (!c->nb)
		return NULL;
	struct k8s_obj **pp = &c->b[hash(key) & (c->nb - 1)];
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->key, key) == 0) {
			struct k8s_obj *o = *pp;
			*pp = o->next;
			o->next = NULL;
			c->n--;
			return o;
		}
	return NULL;
}

static void cache_clear(struct k8s_cache *c)
{
	for (size_t i = 0; i < c->nb; i++) {
		struct k8s_obj *o = c->b[i], *n;
		for (; o; o = n) {
			n = o->next;
			obj_free(o);
		}
	}
	free(c->b);
	memset(c, 0, sizeof(*c));
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return NULL;
}

static struct json_object *jget(struct json_object *o, const char *key)
{
	struct json_object *v;
	return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* An object from its JSON, or NULL when it has no name. */
static struct k8s_obj *obj_from_json(struct json_object *item)
{
	struct json_object *meta = jget(item, "metadata");
	const char *name = jstr(meta, "name"), *ns = jstr(meta, "namespace"),
		   *rv = jstr(meta, "resourceVersion");
	if (!name)
		return NULL;
	size_t jl;
	/* "/" unescaped, as the API server writes it: a consumer that reads
	 * the text in place (lb's k8s_scan.c) meets "kubernetes.io/service-name",
	 * not an escape it leaves to json-c */
	const char *json = json_object_to_json_string_length(
		item, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jl);
	if (!ns)
		ns = "";
	if (!rv)
		rv = "";
	return json ? k8s_obj_new(ns, strlen(ns), name, strlen(name), rv, strlen(rv), json, jl) : NULL;
}

/* ---- events -------------------------------------------------------------- */

static void publish(struct k8s_res *r, enum fibril_k8s_event_type type, const struct k8s_obj *o,
		    const char *old_json)
{
	const char *strs[6] = {r->def->name, o->ns, o->name, o->json, old_json, o->rv};
	size_t lens[6], total = sizeof(struct fibril_k8s_event);
	for (int i = 0; i < 6; i++) {
		lens[i] = strs[i] ? strlen(strs[i]) + 1 : 0;
		total += lens[i];
	}
	char *buf = malloc(total);
	if (!buf)
		return;
	struct fibril_k8s_event *ev = (struct fibril_k8s_event *)(void *)buf;
	memset(ev, 0, sizeof(*ev));
	ev->sz = sizeof(*ev);
	ev->type = (uint32_t)type;
	uint32_t *offs[6] = {&ev->resource, &ev->namespace_, &ev->name,
			     &ev->object, &ev->old_object, &ev->resource_version};
	size_t at = sizeof(*ev);
	for (int i = 0; i < 6; i++) {
		if (!strs[i])
			continue;
		memcpy(buf + at, strs[i], lens[i]);
		*offs[i] = (uint32_t)at;
		at += lens[i];
	}
	int rc = fibril_bus_publish(r->k->m, r->topic, FIBRIL_K8S_VERSION, buf, total);
	free(buf);
	if (rc == 0)
		r->pub[type]++;
	r->last_event = time(NULL);
}

/* ---- the list ------------------------------------------------------------ */

static void begin_list(struct k8s_res *r);
static void start_watch(struct k8s_res *r);

static void append_selector(struct k8s_res *r, char *path, size_t len)
{
	if (!r->def->selector)
		return;
	if (r->def->selector == 3) { /* a label that exists */
		size_t l = strlen(path);
		snprintf(path + l, len - l, "&labelSelector=fibril.io%%2Fpodcidr-claim");
		return;
	}
	char *node = mod_http_escape(r->k->node);
	size_t l = strlen(path);
	snprintf(path + l, len - l, "&fieldSelector=%s%%3D%s",
		 r->def->selector == 1 ? "metadata.name" : "spec.nodeName", node ? node : "");
	free(node);
}

static void on_retry(struct fibril_timer *t, void *ud)
{
	struct k8s_res *r = ud;
	r->timer = NULL;
	if (!r->k->running)
		return;
	if (r->synced && r->rv)
		start_watch(r);
	else
		begin_list(r);
}

/* An error: back off, then watch again from the last resourceVersion (or
 * list when there is none). */
static void fail(struct k8s_res *r, const char *why, bool relist)
{
	struct k8s *k = r->k;
	if (relist) {
		free(r->rv);
		r->rv = NULL;
	}
	uint64_t ms = K8S_BACKOFF_MIN_MS;
	for (unsigned i = 0; i < r->failures && ms < K8S_BACKOFF_MAX_MS; i++)
		ms *= 2;
	if (ms > K8S_BACKOFF_MAX_MS)
		ms = K8S_BACKOFF_MAX_MS;
	ms = k8s_jitter(k, ms);
	r->failures++;
	r->retry_ms = ms;
	snprintf(r->error, sizeof(r->error), "%s", why);
	snprintf(r->ws.last_error, sizeof(r->ws.last_error), "%s", why);
	r->phase = PH_BACKOFF;
	fibril_warn(k->m, "watch %s: %s; retrying in %.1fs", r->def->name, why, (double)ms / 1000);
	if (k->running)
		r->timer = fibril_timer_add(k->m, ms, 0, on_retry, r);
	k8s_health_update(r);
}

/* Relist (the resourceVersion expired), backing off as client-go's
 * reflector does: 0.8 s doubling to 30 s (+0-20 % jitter), reset when no
 * relist was forced for 2 minutes; the first one of a streak goes at once. So
 * a 410 that comes back right after each relist does not loop. */
static void relist(struct k8s_res *r, const char *why)
{
	struct k8s *k = r->k;
	free(r->rv);
	r->rv = NULL;
	uint64_t now = fibril_now_ms();
	if (!r->ws.last_relist_ms || now - r->ws.last_relist_ms >= K8S_RELIST_RESET_MS)
		r->ws.relist_streak = 0;
	r->ws.last_relist_ms = now;
	if (r->ws.relist_streak++ == 0) {
		fibril_info(k->m, "watch %s: %s; relisting", r->def->name, why);
		begin_list(r);
		return;
	}
	uint64_t ms = K8S_BACKOFF_MIN_MS;
	for (unsigned i = 1; i < r->ws.relist_streak - 1 && ms < K8S_BACKOFF_MAX_MS; i++)
		ms *= 2;
	if (ms > K8S_BACKOFF_MAX_MS)
		ms = K8S_BACKOFF_MAX_MS;
	ms = k8s_jitter(k, ms);
	r->retry_ms = ms;
	snprintf(r->error, sizeof(r->error), "%s (forced relist %u within 2 min)", why,
		 r->ws.relist_streak);
	snprintf(r->ws.last_error, sizeof(r->ws.last_error), "%s", r->error);
	r->phase = PH_BACKOFF;
	fibril_warn(k->m, "watch %s: %s; relisting in %.1fs", r->def->name, r->error,
		    (double)ms / 1000);
	if (k->running)
		r->timer = fibril_timer_add(k->m, ms, 0, on_retry, r);
	k8s_health_update(r);
}

/* The list is complete: diff it against the cache, publish, swap. */
static void apply_list(struct k8s_res *r)
{
	for (size_t i = 0; i < r->next.nb; i++)
		for (struct k8s_obj *o = r->next.b[i]; o; o = o->next) {
			struct k8s_obj *old = k8s_cache_get(&r->cache, o->key);
			if (!old)
				publish(r, FIBRIL_K8S_ADDED, o, NULL);
			else if (strcmp(old->rv, o->rv) != 0)
				publish(r, FIBRIL_K8S_UPDATED, o, old->json);
		}
	for (size_t i = 0; i < r->cache.nb; i++)
		for (struct k8s_obj *o = r->cache.b[i]; o; o = o->next)
			if (!k8s_cache_get(&r->next, o->key))
				publish(r, FIBRIL_K8S_DELETED, o, NULL);
	cache_clear(&r->cache);
	r->cache = r->next;
	memset(&r->next, 0, sizeof(r->next));
	if (r->lists++)
		r->relists++;
	bool was = r->synced;
	r->synced = true;
	if (!was) {
		fibril_info(r->k->m, "%s synced: %zu objects", r->def->name, r->cache.n);
		k8s_synced_changed(r->k);
	}
}

static void send_list_page(struct k8s_res *r);

/* The API server does not serve the resource (404 on the list: its CRD is
 * not installed): an empty, synced cache (what it held is deleted), said
 * once in the log, listed again every K8S_UNAVAILABLE_RETRY_MS; health
 * stays OK. */
static void unavailable(struct k8s_res *r)
{
	struct k8s *k = r->k;
	cache_clear(&r->next);
	free(r->cont);
	r->cont = NULL;
	free(r->rv);
	r->rv = NULL;
	if (!r->unavailable) {
		/* "/apis/GROUP/VERSION/PLURAL" -> the CRD's name PLURAL.GROUP */
		const char *g = !strncmp(r->def->path, "/apis/", 6) ? r->def->path + 6 : NULL;
		const char *v = g ? strchr(g, '/') : NULL, *pl = strrchr(r->def->path, '/');
		bool ours = !strcmp(r->def->name, FIBRIL_K8S_CILIUM_IDENTITIES) ||
			    !strcmp(r->def->name, FIBRIL_K8S_CILIUM_ENDPOINTS) ||
			    !strcmp(r->def->name, FIBRIL_K8S_CILIUM_NODES);
		fibril_warn(k->m, "%s: not served by the API server (HTTP 404): its CustomResourceDefinition "
				  "%s%s%.*s is not installed%s; none until it is, listing again every %us",
			    r->def->name, pl && v ? pl + 1 : r->def->name, v ? "." : "",
			    v ? (int)(v - g) : 0, v ? g : "",
			    ours ? " (kubectl apply -f deploy/kubernetes/crds.yaml)" : "",
			    K8S_UNAVAILABLE_RETRY_MS / 1000);
	}
	r->unavailable = true;
	r->failures = 0;
	r->error[0] = '\0';
	apply_list(r);
	r->phase = PH_UNAVAILABLE;
	r->retry_ms = K8S_UNAVAILABLE_RETRY_MS;
	if (k->running)
		r->timer = fibril_timer_add(k->m, K8S_UNAVAILABLE_RETRY_MS, 0, on_retry, r);
	k8s_health_update(r);
}

static void on_list_done(struct k8s_req *q, int err)
{
	struct k8s_res *r = q->ud;
	r->req = NULL;
	if (err == -ECANCELED)
		return;
	if (err) {
		if (q->status == 410) { /* the continue token expired: list again */
			fibril_info(r->k->m, "list %s: continue token expired; listing again",
				    r->def->name);
			begin_list(r);
			return;
		}
		if (q->status == 404) {
			unavailable(r);
			return;
		}
		fail(r, q->errbuf, true);
		return;
	}
	/* in place (list_scan.c), else through json-c */
	char *cont = NULL, *rv = NULL;
	if (!q->buf || !k8s_list_page_scan(&r->next, q->buf, q->len, &cont, &rv)) {
		struct json_object *doc = json_tokener_parse(q->buf ? q->buf : "");
		struct json_object *items = jget(doc, "items"), *meta = jget(doc, "metadata");
		if (!doc || !json_object_is_type(items, json_type_array)) {
			json_object_put(doc);
			fail(r, "list: malformed answer", true);
			return;
		}
		for (size_t i = 0, n = json_object_array_length(items); i < n; i++) {
			struct k8s_obj *o = obj_from_json(json_object_array_get_idx(items, i));
			if (o)
				k8s_cache_replace(&r->next, o);
		}
		const char *c = jstr(meta, "continue"), *v = jstr(meta, "resourceVersion");
		cont = c && *c ? strdup(c) : NULL;
		rv = v ? strdup(v) : NULL;
		json_object_put(doc);
	}
	free(r->cont);
	r->cont = cont;
	if (rv) {
		free(r->rv);
		r->rv = rv;
	}
	if (r->cont) {
		send_list_page(r);
		return;
	}
	r->failures = 0;
	if (r->unavailable) {
		r->unavailable = false;
		fibril_info(r->k->m, "%s: now served by the API server", r->def->name);
	}
	apply_list(r);
	r->watch_after_list = true;
	start_watch(r);
}

static void send_list_page(struct k8s_res *r)
{
	struct k8s *k = r->k;
	char path[4096];
	snprintf(path, sizeof(path), "%s?limit=%lld", r->def->path, (long long)k->page_size);
	if (r->cont) {
		char *c = mod_http_escape(r->cont);
		size_t l = strlen(path);
		snprintf(path + l, sizeof(path) - l, "&continue=%s", c ? c : "");
		free(c);
	}
	append_selector(r, path, sizeof(path));
	struct k8s_req *q = k8s_req_new(k, "GET", path, NULL, NULL, on_list_done, r);
	if (!q || k8s_req_send(q, false, 60000)) {
		fail(r, "list: cannot start the request", true);
		return;
	}
	r->req = q;
}

static void begin_list(struct k8s_res *r)
{
	cache_clear(&r->next);
	free(r->cont);
	r->cont = NULL;
	r->phase = PH_LISTING;
	send_list_page(r);
}

/* ---- the watch ----------------------------------------------------------- */

/* A Status saying the resourceVersion asked for is ahead of the server's
 * (reason Timeout, cause ResourceVersionTooLarge). */
bool k8s_status_too_large(struct json_object *status)
{
	struct json_object *causes = jget(jget(status, "details"), "causes");
	size_t n = json_object_is_type(causes, json_type_array) ? json_object_array_length(causes) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *reason = jstr(json_object_array_get_idx(causes, i), "reason");
		if (reason && strcmp(reason, "ResourceVersionTooLarge") == 0)
			return true;
	}
	const char *msg = jstr(status, "message");
	return msg && strstr(msg, "Too large resource version") != NULL;
}

/* One watch event; returns 1 when the watch must be dropped and the
 * resource relisted (410), -1 on another ERROR, 0 otherwise. */
static const char *const bad_line_names[K8S_BAD_NKINDS] = {
	"malformed", "truncated", "no_name", "unknown_type", "trailing_data"};

const char *k8s_bad_line_name(int kind)
{
	return kind >= 0 && kind < K8S_BAD_NKINDS ? bad_line_names[kind] : "?";
}

/* A watch line that is not a valid event: logged, counted, dropped. */
static void bad_line(struct k8s_res *r, enum k8s_bad_line kind, const char *what,
		     const char *line, size_t len)
{
	r->ws.bad_lines[kind]++;
	char shown[81];
	size_t n = 0;
	for (size_t i = 0; i < len && n < sizeof(shown) - 1; i++)
		shown[n++] = line[i] >= 0x20 && line[i] < 0x7f ? line[i] : '?';
	shown[n] = '\0';
	fibril_warn(r->k->m, "watch %s: dropped a bad line (%s: %s): %s%s", r->def->name,
		    bad_line_names[kind], what, shown, len > n ? "..." : "");
}

static bool event_has_name(struct json_object *obj)
{
	const char *name = jstr(jget(obj, "metadata"), "name");
	return name && *name;
}

static int handle_event(struct k8s_res *r, struct json_object *ev, char *why, size_t why_len,
			const char *line, size_t len)
{
	const char *type = jstr(ev, "type");
	struct json_object *obj = jget(ev, "object");
	if (!type || !json_object_is_type(obj, json_type_object)) {
		bad_line(r, K8S_BAD_MALFORMED, "no type or no object", line, len);
		return 0;
	}
	bool change = strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 ||
		      strcmp(type, "DELETED") == 0;
	if (!change && strcmp(type, "BOOKMARK") != 0 && strcmp(type, "ERROR") != 0) {
		bad_line(r, K8S_BAD_UNKNOWN_TYPE, "unknown event type", line, len);
		return 0;
	}
	if (change && !event_has_name(obj)) {
		bad_line(r, K8S_BAD_NO_NAME, "object without metadata.name", line, len);
		return 0;
	}
	r->events_in++;
	if (strcmp(type, "ERROR") == 0) {
		struct json_object *code = jget(obj, "code");
		const char *msg = jstr(obj, "message");
		snprintf(why, why_len, "watch ERROR %d: %s", code ? json_object_get_int(code) : 0,
			 msg ? msg : "");
		/* 410: the rv is gone from the history; "too large": the server's
		 * history restarted below our rv (etcd restored): both relist, as
		 * client-go does, rather than wait for the old rv to come back */
		return (code && json_object_get_int(code) == 410) || k8s_status_too_large(obj) ? 1
											      : -1;
	}
	const char *rv = jstr(jget(obj, "metadata"), "resourceVersion");
	if (rv) {
		free(r->rv);
		r->rv = strdup(rv);
	}
	r->failures = 0;
	if (strcmp(type, "BOOKMARK") == 0) {
		r->bookmarks++;
		return 0;
	}
	struct k8s_obj *o = obj_from_json(obj);
	if (!o)
		return 0;
	if (strcmp(type, "DELETED") == 0) {
		struct k8s_obj *old = cache_take(&r->cache, o->key);
		if (old) {
			publish(r, FIBRIL_K8S_DELETED, o, NULL);
			obj_free(old);
		}
		obj_free(o);
		return 0;
	}
	/* ADDED or MODIFIED */
	struct k8s_obj *old = k8s_cache_get(&r->cache, o->key);
	if (old && strcmp(old->rv, o->rv) == 0) { /* already seen */
		obj_free(o);
		return 0;
	}
	old = cache_take(&r->cache, o->key);
	publish(r, old ? FIBRIL_K8S_UPDATED : FIBRIL_K8S_ADDED, o, old ? old->json : NULL);
	if (old)
		obj_free(old);
	cache_put(&r->cache, o);
	return 0;
}

static void idle_disarm(struct k8s_res *r)
{
	if (r->ws.idle_timer)
		fibril_timer_cancel(r->ws.idle_timer);
	r->ws.idle_timer = NULL;
}

static void on_watch_idle(struct fibril_timer *t, void *ud);

/* (Re)start the idle deadline of the watch: no byte until it fires means
 * the connection is dead although it was not closed. */
static void idle_arm(struct k8s_res *r)
{
	struct k8s *k = r->k;
	if (!k->watch_idle_ms || !k->running)
		return;
	if (r->ws.idle_timer && fibril_timer_rearm(r->ws.idle_timer, k->watch_idle_ms, 0) == 0)
		return;
	r->ws.idle_timer = fibril_timer_add(k->m, k->watch_idle_ms, 0, on_watch_idle, r);
}

static void on_watch_idle(struct fibril_timer *t, void *ud)
{
	struct k8s_res *r = ud;
	r->ws.idle_timer = NULL; /* one-shot: freed by the host after this call */
	if (!r->req || !r->k->running)
		return;
	struct k8s_req *q = r->req;
	r->req = NULL;
	k8s_req_abort(q);
	r->ws.stalls++;
	r->ws.stalled = true;
	snprintf(r->error, sizeof(r->error), "stalled: no data for %.1fs",
		 (double)r->k->watch_idle_ms / 1000);
	snprintf(r->ws.last_error, sizeof(r->ws.last_error), "%s", r->error);
	fibril_warn(r->k->m, "watch %s: %s (a dead connection); restarting it from resourceVersion %s",
		    r->def->name, r->error, r->rv ? r->rv : "");
	start_watch(r);
}

/* The server answered (200 headers or data): the watch is up. */
static void watch_answered(struct k8s_res *r, bool data)
{
	if (data)
		idle_arm(r);
	if (r->ws.stalled && !data)
		return; /* after a stall: healthy again once bytes flow */
	if (r->failures || r->error[0] || r->ws.stalled) {
		r->failures = 0;
		r->error[0] = '\0';
		r->ws.stalled = false;
		k8s_health_update(r);
	}
}

/* The answer's headers are in (q->status). */
static void on_watch_head(struct k8s_req *q)
{
	struct k8s_res *r = q->ud;
	if (q->status == 200 && r->req == q)
		watch_answered(r, false);
}

static void on_watch_data(struct k8s_req *q)
{
	struct k8s_res *r = q->ud;
	watch_answered(r, true);
	/* every complete line of the buffer, then one consume (a consume per
	 * line would move the rest of a 256 KiB chunk for each event) */
	size_t at = 0;
	int rc = 0;
	char why[300] = "";
	struct json_tokener *tok = json_tokener_new();
	while (q->buf && at < q->len && rc == 0) {
		char *line = q->buf + at;
		char *nl = memchr(line, '\n', q->len - at);
		if (!nl)
			break;
		at = (size_t)(nl - q->buf) + 1;
		struct json_object *ev = NULL;
		*nl = '\0'; /* parsed with its terminator: the text ends there */
		if (tok) {
			json_tokener_reset(tok);
			ev = json_tokener_parse_ex(tok, line, (int)(nl - line) + 1);
		}
		size_t len = (size_t)(nl - line);
		if (len && line[len - 1] == '\r')
			len--;
		size_t sp = 0;
		while (sp < len && (line[sp] == ' ' || line[sp] == '\t'))
			sp++;
		if (sp == len) { /* an empty line: nothing */
			json_object_put(ev);
			continue;
		}
		size_t end = ev ? json_tokener_get_parse_end(tok) : 0;
		while (ev && end < len && (line[end] == ' ' || line[end] == '\t' || line[end] == '\r'))
			end++;
		if (!ev || !json_object_is_type(ev, json_type_object))
			bad_line(r, K8S_BAD_MALFORMED, "not a JSON object", line, len);
		else if (end < len && line[end] != '\0')
			bad_line(r, K8S_BAD_TRAILING_DATA, "text after the event", line, len);
		else
			rc = handle_event(r, ev, why, sizeof(why), line, len);
		json_object_put(ev);
	}
	json_tokener_free(tok);
	if (!rc) {
		k8s_req_consume(q, at);
		return;
	}
	r->req = NULL;
	idle_disarm(r);
	k8s_req_abort(q);
	if (rc > 0) {
		relist(r, why);
	} else {
		fail(r, why, false);
	}
}

static void on_watch_done(struct k8s_req *q, int err)
{
	struct k8s_res *r = q->ud;
	r->req = NULL;
	idle_disarm(r);
	if (err == -ECANCELED)
		return;
	if (q->status == 200 && q->len && q->buf) /* the end of the stream cut a line */
		bad_line(r, K8S_BAD_TRUNCATED, "the stream ended inside a line", q->buf, q->len);
	struct json_object *st = q->status == 504 && q->buf ? json_tokener_parse(q->buf) : NULL;
	bool too_large = st && k8s_status_too_large(st);
	json_object_put(st);
	if (q->status == 410 || too_large) {
		char why[300];
		snprintf(why, sizeof(why), "resourceVersion %s %s", r->rv ? r->rv : "",
			 too_large ? "is ahead of the server" : "expired");
		relist(r, why);
		return;
	}
	if (!err) { /* the server ended the watch: resume from the last rv */
		fibril_debug(r->k->m, "watch %s ended; resuming at %s", r->def->name,
			     r->rv ? r->rv : "");
		start_watch(r);
		return;
	}
	if (q->status == 200 && fibril_now_ms() - r->watch_started_ms > 1000) {
		/* a stream that ran a while and broke: resume at once, as after a
		 * clean end (a watch that breaks at once backs off) */
		fibril_info(r->k->m, "watch %s broke (%s); resuming at %s", r->def->name, q->errbuf,
			    r->rv ? r->rv : "");
		start_watch(r);
		return;
	}
	fail(r, q->errbuf, false);
}

static void start_watch(struct k8s_res *r)
{
	struct k8s *k = r->k;
	if (!r->rv) {
		begin_list(r);
		return;
	}
	k->rng = k->rng * 1103515245u + 12345u;
	unsigned timeout = 300 + (k->rng >> 8) % 300;
	char path[4096];
	char *rv = mod_http_escape(r->rv);
	snprintf(path, sizeof(path),
		 "%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%u",
		 r->def->path, rv ? rv : "", timeout);
	free(rv);
	append_selector(r, path, sizeof(path));
	struct k8s_req *q = k8s_req_new(k, "GET", path, NULL, NULL, on_watch_done, r);
	if (q) {
		q->data = on_watch_data;
		q->head = on_watch_head;
	}
	if (!q || k8s_req_send(q, true, (uint64_t)(timeout + 60) * 1000)) {
		fail(r, "watch: cannot start the request", false);
		return;
	}
	r->req = q;
	r->watch_started_ms = fibril_now_ms();
	r->watches++;
	if (!r->watch_after_list)
		r->watch_restarts++; /* a watch started again without a new list */
	r->watch_after_list = false;
	r->phase = PH_WATCHING;
	idle_arm(r);
	k8s_health_update(r);
}

/* ---- lifecycle ------------------------------------------------------------ */

void k8s_res_start(struct k8s_res *r)
{
	if (r->started || !r->k->running)
		return;
	r->started = true;
	fibril_info(r->k->m, "watching %s", r->def->name);
	begin_list(r);
}

void k8s_res_stop(struct k8s_res *r)
{
	idle_disarm(r);
	if (r->req)
		k8s_req_abort(r->req);
	r->req = NULL;
	if (r->timer)
		fibril_timer_cancel(r->timer);
	r->timer = NULL;
	r->phase = PH_IDLE;
	r->started = false;
}

void k8s_res_free(struct k8s_res *r)
{
	cache_clear(&r->cache);
	cache_clear(&r->next);
	free(r->rv);
	free(r->cont);
	r->rv = r->cont = NULL;
}
