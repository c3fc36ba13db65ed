/* modules/k8s/informer.c - one client-go style informer per resource: LIST
 * in pages (limit + continue), then WATCH from the list's resourceVersion
 * with bookmarks and a randomized timeoutSeconds; a clean end re-watches
 * from the last seen resourceVersion, an expired one (HTTP 410 or an ERROR
 * event with code 410) relists, so does a resourceVersion the server has
 * not reached (its history restarted lower), other errors back off 0.8 s doubling to
 * 30 s with jitter. The cache maps namespace/name to the object's JSON and
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
	free(o->key);
	free(o->ns);
	free(o->name);
	free(o->rv);
	free(o->json);
	free(o);
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
	struct k8s_obj *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->ns = strdup(ns ? ns : "");
	o->name = strdup(name);
	o->rv = strdup(rv ? rv : "");
	o->json = strdup(json_object_to_json_string_ext(item, JSON_C_TO_STRING_PLAIN));
	size_t kl = strlen(o->ns) + strlen(name) + 2;
	o->key = malloc(kl);
	if (!o->ns || !o->name || !o->rv || !o->json || !o->key) {
		obj_free(o);
		return NULL;
	}
	if (*o->ns)
		snprintf(o->key, kl, "%s/%s", o->ns, name);
	else
		snprintf(o->key, kl, "%s", name);
	return o;
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
	char *node = curl_easy_escape(NULL, r->k->node, 0);
	size_t l = strlen(path);
	snprintf(path + l, len - l, "&fieldSelector=%s%%3D%s",
		 r->def->selector == 1 ? "metadata.name" : "spec.nodeName", node ? node : "");
	curl_free(node);
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
	r->phase = PH_BACKOFF;
	fibril_warn(k->m, "watch %s: %s; retrying in %.1fs", r->def->name, why, (double)ms / 1000);
	if (!k->released && k->running)
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
		fail(r, q->errbuf, true);
		return;
	}
	struct json_object *doc = json_tokener_parse(q->buf ? q->buf : "");
	struct json_object *items = jget(doc, "items");
	if (!doc || !json_object_is_type(items, json_type_array)) {
		json_object_put(doc);
		fail(r, "list: malformed answer", true);
		return;
	}
	size_t n = json_object_array_length(items);
	for (size_t i = 0; i < n; i++) {
		struct k8s_obj *o = obj_from_json(json_object_array_get_idx(items, i));
		if (!o)
			continue;
		struct k8s_obj *dup = cache_take(&r->next, o->key);
		if (dup)
			obj_free(dup);
		cache_put(&r->next, o);
	}
	struct json_object *meta = jget(doc, "metadata");
	const char *cont = jstr(meta, "continue"), *rv = jstr(meta, "resourceVersion");
	free(r->cont);
	r->cont = cont && *cont ? strdup(cont) : NULL;
	if (rv) {
		free(r->rv);
		r->rv = strdup(rv);
	}
	json_object_put(doc);
	if (r->cont) {
		send_list_page(r);
		return;
	}
	r->failures = 0;
	apply_list(r);
	start_watch(r);
}

static void send_list_page(struct k8s_res *r)
{
	struct k8s *k = r->k;
	char path[4096];
	snprintf(path, sizeof(path), "%s?limit=%lld", r->def->path, (long long)k->page_size);
	if (r->cont) {
		char *c = curl_easy_escape(NULL, r->cont, 0);
		size_t l = strlen(path);
		snprintf(path + l, sizeof(path) - l, "&continue=%s", c ? c : "");
		curl_free(c);
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
static int handle_event(struct k8s_res *r, struct json_object *ev, char *why, size_t why_len)
{
	const char *type = jstr(ev, "type");
	struct json_object *obj = jget(ev, "object");
	if (!type || !obj)
		return 0;
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

static void on_watch_data(struct k8s_req *q)
{
	struct k8s_res *r = q->ud;
	if (r->failures || r->error[0]) { /* the stream is up again */
		r->failures = 0;
		r->error[0] = '\0';
		k8s_health_update(r);
	}
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
		rc = ev ? handle_event(r, ev, why, sizeof(why)) : 0;
		json_object_put(ev);
	}
	json_tokener_free(tok);
	if (!rc) {
		k8s_req_consume(q, at);
		return;
	}
	r->req = NULL;
	k8s_req_abort(q);
	if (rc > 0) {
		fibril_info(r->k->m, "watch %s: %s; relisting", r->def->name, why);
		free(r->rv);
		r->rv = NULL;
		begin_list(r);
	} else {
		fail(r, why, false);
	}
}

static void on_watch_done(struct k8s_req *q, int err)
{
	struct k8s_res *r = q->ud;
	r->req = NULL;
	if (err == -ECANCELED)
		return;
	struct json_object *st = q->status == 504 && q->buf ? json_tokener_parse(q->buf) : NULL;
	bool too_large = st && k8s_status_too_large(st);
	json_object_put(st);
	if (q->status == 410 || too_large) {
		fibril_info(r->k->m, "watch %s: resourceVersion %s %s; relisting", r->def->name,
			    r->rv ? r->rv : "", too_large ? "is ahead of the server" : "expired");
		free(r->rv);
		r->rv = NULL;
		begin_list(r);
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
	char *rv = curl_easy_escape(NULL, r->rv, 0);
	snprintf(path, sizeof(path),
		 "%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%u",
		 r->def->path, rv ? rv : "", timeout);
	curl_free(rv);
	append_selector(r, path, sizeof(path));
	struct k8s_req *q = k8s_req_new(k, "GET", path, NULL, NULL, on_watch_done, r);
	if (q)
		q->data = on_watch_data;
	if (!q || k8s_req_send(q, true, (uint64_t)(timeout + 60) * 1000)) {
		fail(r, "watch: cannot start the request", false);
		return;
	}
	r->req = q;
	r->watch_started_ms = fibril_now_ms();
	r->watches++;
	r->phase = PH_WATCHING;
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
	if (r->req)
		k8s_req_abort(r->req);
	r->req = NULL;
	if (r->timer && !r->k->released)
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
