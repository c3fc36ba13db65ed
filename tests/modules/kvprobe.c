/* tests/modules/kvprobe.c - a test module that drives the "kvstore"
 * capability over the API, for tests/integration/kvstore_etcd.sh. Every
 * kvstore call has a POST route that starts it and answers 202 {"op": N};
 * GET /v1/kvprobe/op/N answers {"op":N,"done":false} until the callback ran,
 * then the result (err, revision, kvs, succeeded, lease, ttl). Watch events
 * are collected for GET /v1/kvprobe/events, and the kvstore's bus topics are
 * counted for GET /v1/kvprobe/state.
 *
 *   POST /v1/kvprobe/put?key=K&value=V[&lease=ID]
 *   POST /v1/kvprobe/get?key=K[&prefix=1]      POST /v1/kvprobe/del?key=K[&prefix=1]
 *   POST /v1/kvprobe/getpaged?key=K&limit=N    (get_paged: every page's kvs, "pages",
 *        "revisions": each page's revision)
 *   POST /v1/kvprobe/getrange?key=K&end=E&rev=R&limit=N  (get_range, answered as getpaged)
 *   POST /v1/kvprobe/txn  {"compare":[{"key","target":"version|create|mod|value|lease",
 *        "result":"equal|greater|less|not_equal","number":N,"value":S,"prefix":B}],
 *        "success":[{"type":"put|del|get","key","value","lease","prefix","ignore_lease"}],
 *        "failure":[...]}  (a compare's prefix and an op's ignore_lease: SDK 1.4 builds)
 *   POST /v1/kvprobe/grant?ttl=S               POST /v1/kvprobe/revoke?id=ID
 *   POST /v1/kvprobe/watch?prefix=P[&rev=R] -> {"watch": N}
 *   POST /v1/kvprobe/unwatch?id=N */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <fibril/fibril.h>

#define MAX_OPS 1024
#define MAX_WATCHES 16

struct probe {
	struct fibril_module *m;
	const struct fibril_kvstore_ops *kv;
	void *ctx;
	int nops;
	struct json_object *results[MAX_OPS]; /* NULL while pending */
	struct fibril_kv_watch *watches[MAX_WATCHES];
	struct call *wcalls[MAX_WATCHES];
	int nwatches;
	struct json_object *events;
	int connected, disconnected;
	struct json_object *lost;
};

/* What a callback needs: the probe and which op it answers. */
struct call {
	struct probe *p;
	int op;
	const char *kind;
	struct json_object *pages_kvs, *page_revs; /* getpaged: so far */
};

/* ---- results ------------------------------------------------------------------ */

static struct json_object *result_new(struct call *c, int err, int64_t revision)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "op", json_object_new_int(c->op));
	json_object_object_add(o, "done", json_object_new_boolean(1));
	json_object_object_add(o, "kind", json_object_new_string(c->kind));
	json_object_object_add(o, "err", json_object_new_int(err));
	json_object_object_add(o, "error", json_object_new_string(err ? strerror(-err) : ""));
	json_object_object_add(o, "revision", json_object_new_int64(revision));
	return o;
}

static void result_store(struct call *c, struct json_object *o)
{
	c->p->results[c->op] = o;
	free(c);
}

static struct json_object *kv_json(const struct fibril_kv *kv)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "key", json_object_new_string(kv->key));
	json_object_object_add(o, "value", json_object_new_string_len(kv->value, (int)kv->value_len));
	json_object_object_add(o, "create_revision", json_object_new_int64(kv->create_revision));
	json_object_object_add(o, "mod_revision", json_object_new_int64(kv->mod_revision));
	json_object_object_add(o, "version", json_object_new_int64(kv->version));
	json_object_object_add(o, "lease", json_object_new_int64(kv->lease));
	return o;
}

static struct json_object *kvs_json(const struct fibril_kv *kvs, size_t n)
{
	struct json_object *arr = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(arr, kv_json(&kvs[i]));
	return arr;
}

/* ---- callbacks ---------------------------------------------------------------- */

static void on_get(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	struct json_object *o = result_new(ud, err, revision);
	json_object_object_add(o, "kvs", kvs_json(kvs, n));
	result_store(ud, o);
}

static void on_page(void *ud, int err, const struct fibril_kv *kvs, size_t n, bool more,
		    int64_t revision)
{
	struct call *c = ud;
	if (!c->pages_kvs) {
		c->pages_kvs = json_object_new_array();
		c->page_revs = json_object_new_array();
	}
	for (size_t i = 0; i < n; i++)
		json_object_array_add(c->pages_kvs, kv_json(&kvs[i]));
	if (!err)
		json_object_array_add(c->page_revs, json_object_new_int64(revision));
	if (more && !err)
		return;
	struct json_object *o = result_new(ud, err, revision);
	json_object_object_add(o, "kvs", c->pages_kvs);
	json_object_object_add(o, "pages", json_object_new_int((int)json_object_array_length(c->page_revs)));
	json_object_object_add(o, "revisions", c->page_revs);
	result_store(ud, o);
}

static void on_done(void *ud, int err, int64_t revision)
{
	result_store(ud, result_new(ud, err, revision));
}

static void on_txn(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
		   int64_t revision)
{
	struct json_object *o = result_new(ud, err, revision);
	json_object_object_add(o, "succeeded", json_object_new_boolean(succeeded));
	json_object_object_add(o, "kvs", kvs_json(kvs, n));
	result_store(ud, o);
}

static void on_lease(void *ud, int err, int64_t lease, int64_t ttl)
{
	struct json_object *o = result_new(ud, err, 0);
	json_object_object_add(o, "lease", json_object_new_int64(lease));
	json_object_object_add(o, "ttl", json_object_new_int64(ttl));
	result_store(ud, o);
}

static void on_watch(void *ud, int err, enum fibril_kv_event_type type, const struct fibril_kv *kv,
		     int64_t revision)
{
	struct call *c = ud; /* op holds the watch number */
	struct json_object *o = kv ? kv_json(kv) : json_object_new_object();
	json_object_object_add(o, "watch", json_object_new_int(c->op));
	json_object_object_add(o, "err", json_object_new_int(err));
	json_object_object_add(o, "type", json_object_new_string(err ? "error"
							 : type == FIBRIL_KV_EVENT_DELETE ? "delete"
											   : "put"));
	json_object_object_add(o, "revision", json_object_new_int64(revision));
	json_object_array_add(c->p->events, o);
}

static int on_topic(const struct fibril_event *ev, void *ud)
{
	struct probe *p = ud;
	const struct fibril_kvstore_event *kev = ev->payload;
	if (ev->payload_len < sizeof(*kev) || kev->sz < sizeof(*kev))
		return -EPROTO;
	if (strcmp(ev->topic, FIBRIL_KVSTORE_TOPIC_CONNECTED) == 0)
		p->connected++;
	else if (strcmp(ev->topic, FIBRIL_KVSTORE_TOPIC_DISCONNECTED) == 0)
		p->disconnected++;
	else
		json_object_array_add(p->lost, json_object_new_int64(kev->lease));
	return 0;
}

/* ---- routes ---------------------------------------------------------------------- */

static void answer(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

/* Start an op: the call context, or NULL with the answer sent. */
static struct call *op_begin(struct probe *p, const char *kind, struct fibril_response *resp)
{
	struct call *c = calloc(1, sizeof(*c));
	if (!p->kv || p->nops >= MAX_OPS || !c) {
		free(c);
		fibril_resp_error(resp, 503, "no kvstore, or too many operations");
		return NULL;
	}
	c->p = p;
	c->op = p->nops++;
	c->kind = kind;
	return c;
}

/* The call returned rc: 202 with the op, or an error (the op is void). */
static void op_end(struct call *c, int rc, struct fibril_response *resp)
{
	if (rc) {
		c->p->results[c->op] = result_new(c, rc, 0);
		free(c);
		fibril_resp_error(resp, 500, "call failed: %s", strerror(-rc));
		return;
	}
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "op", json_object_new_int(c->op));
	answer(resp, 202, o);
}

static bool query_flag(struct fibril_request *req, const char *name)
{
	const char *v = fibril_req_query(req, name);
	return v && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
}

static int64_t query_int(struct fibril_request *req, const char *name)
{
	const char *v = fibril_req_query(req, name);
	return v ? strtoll(v, NULL, 10) : 0;
}

static void route_put(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	const char *key = fibril_req_query(req, "key"), *value = fibril_req_query(req, "value");
	struct call *c = op_begin(p, "put", resp);
	if (c)
		op_end(c, p->kv->put(p->ctx, key, value ? value : "", 0, query_int(req, "lease"), on_done, c),
		       resp);
}

static void route_get(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct call *c = op_begin(p, "get", resp);
	if (c)
		op_end(c, p->kv->get(p->ctx, fibril_req_query(req, "key"), query_flag(req, "prefix"),
				     on_get, c), resp);
}

static void route_getpaged(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct call *c = op_begin(p, "getpaged", resp);
	if (c)
#if FIBRIL_ABI_MINOR >= 6 /* get_paged: SDK 1.6 */
		op_end(c, FIBRIL_SERVICE_HAS(p->kv, get_paged) && p->kv->get_paged
			  ? p->kv->get_paged(p->ctx, fibril_req_query(req, "key"),
					     (size_t)query_int(req, "limit"), on_page, c)
			  : -ENOSYS, resp);
#else
		op_end(c, -ENOSYS, resp);
	(void)on_page;
#endif
}

static void route_getrange(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct call *c = op_begin(p, "getpaged", resp);
	if (c)
#if FIBRIL_ABI_MINOR >= 7 /* get_range: SDK 1.7 (kvstore interface 4) */
		op_end(c, FIBRIL_SERVICE_HAS(p->kv, get_range) && p->kv->get_range
			  ? p->kv->get_range(p->ctx, fibril_req_query(req, "key"),
					     fibril_req_query(req, "end"), query_int(req, "rev"),
					     (size_t)query_int(req, "limit"), on_page, c)
			  : -ENOSYS, resp);
#else
		op_end(c, -ENOSYS, resp);
#endif
}

static void route_del(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct call *c = op_begin(p, "del", resp);
	if (c)
		op_end(c, p->kv->del(p->ctx, fibril_req_query(req, "key"), query_flag(req, "prefix"),
				     on_done, c), resp);
}

static void route_grant(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct call *c = op_begin(p, "grant", resp);
	if (c)
		op_end(c, p->kv->lease_grant(p->ctx, query_int(req, "ttl"), on_lease, c), resp);
}

static void route_revoke(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct call *c = op_begin(p, "revoke", resp);
	if (c)
		op_end(c, p->kv->lease_revoke(p->ctx, query_int(req, "id"), on_done, c), resp);
}

/* ---- txn from JSON ------------------------------------------------------------------ */

static const char *jstr(struct json_object *o, const char *name)
{
	struct json_object *v;
	return json_object_object_get_ex(o, name, &v) ? json_object_get_string(v) : NULL;
}

static int64_t jint(struct json_object *o, const char *name)
{
	struct json_object *v;
	return json_object_object_get_ex(o, name, &v) ? json_object_get_int64(v) : 0;
}

static int name_index(const char *s, const char *const *names, int n)
{
	for (int i = 0; s && i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

static int parse_compare(struct json_object *o, struct fibril_kv_compare *c)
{
	static const char *const targets[] = {"version", "create", "mod", "value", "lease"};
	static const char *const results[] = {"equal", "greater", "less", "not_equal"};
	int t = name_index(jstr(o, "target"), targets, 5), r = name_index(jstr(o, "result"), results, 4);
	if (t < 0 || r < 0 || !jstr(o, "key"))
		return -EINVAL;
	*c = (struct fibril_kv_compare){.key = jstr(o, "key"), .target = (enum fibril_kv_target)t,
					.result = (enum fibril_kv_result)r,
					.number = jint(o, "number"), .value = jstr(o, "value")};
#if FIBRIL_ABI_MINOR >= 4 /* built against SDK 1.4 or later; tests/compat/sdk-1.3 too */
	struct json_object *v;
	c->prefix = json_object_object_get_ex(o, "prefix", &v) && json_object_get_boolean(v);
#endif
	return 0;
}

static int parse_op(struct json_object *o, struct fibril_kv_op *op)
{
	static const char *const types[] = {"put", "del", "get"};
	int t = name_index(jstr(o, "type"), types, 3);
	struct json_object *v;
	if (t < 0 || !jstr(o, "key"))
		return -EINVAL;
	*op = (struct fibril_kv_op){.type = (enum fibril_kv_op_type)t, .key = jstr(o, "key"),
				    .value = jstr(o, "value"), .lease = jint(o, "lease"),
				    .prefix = json_object_object_get_ex(o, "prefix", &v) &&
					      json_object_get_boolean(v)};
#if FIBRIL_ABI_MINOR >= 4
	op->ignore_lease = json_object_object_get_ex(o, "ignore_lease", &v) &&
			   json_object_get_boolean(v);
#endif
	return 0;
}

/* Parse body[name] into a new array of n items of the given size. */
static int parse_list(struct json_object *body, const char *name, size_t size,
		      int (*fn)(struct json_object *, void *), void **out, size_t *n)
{
	struct json_object *arr;
	*out = NULL;
	*n = 0;
	if (!json_object_object_get_ex(body, name, &arr))
		return 0;
	*n = json_object_array_length(arr);
	*out = calloc(*n ? *n : 1, size);
	for (size_t i = 0; i < *n; i++)
		if (fn(json_object_array_get_idx(arr, i), (char *)*out + i * size))
			return -EINVAL;
	return 0;
}

static int compare_item(struct json_object *o, void *c)
{
	return parse_compare(o, c);
}

static int op_item(struct json_object *o, void *op)
{
	return parse_op(o, op);
}

static void route_txn(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	size_t len = 0, ncmp, nsucc, nfail;
	const char *text = fibril_req_body(req, &len);
	struct json_object *body = json_tokener_parse(text ? text : "");
	void *cmp = NULL, *succ = NULL, *fail = NULL;
	if (!body || parse_list(body, "compare", sizeof(struct fibril_kv_compare), compare_item, &cmp, &ncmp) ||
	    parse_list(body, "success", sizeof(struct fibril_kv_op), op_item, &succ, &nsucc) ||
	    parse_list(body, "failure", sizeof(struct fibril_kv_op), op_item, &fail, &nfail)) {
		fibril_resp_error(resp, 400, "bad txn body");
	} else {
		struct call *c = op_begin(p, "txn", resp);
		if (c)
			op_end(c, p->kv->txn(p->ctx, cmp, ncmp, succ, nsucc, fail, nfail, on_txn, c),
			       resp);
	}
	free(cmp);
	free(succ);
	free(fail);
	json_object_put(body);
}

/* ---- watches and state ------------------------------------------------------------- */

static void route_watch(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	const char *prefix = fibril_req_query(req, "prefix");
	struct call *c = calloc(1, sizeof(*c));
	if (!p->kv || !prefix || p->nwatches >= MAX_WATCHES || !c) {
		free(c);
		fibril_resp_error(resp, 400, "need ?prefix= (and at most %d watches)", MAX_WATCHES);
		return;
	}
	*c = (struct call){.p = p, .op = p->nwatches, .kind = "watch"};
	struct fibril_kv_watch *w = p->kv->watch(p->ctx, prefix, query_int(req, "rev"), on_watch, c);
	if (!w) {
		fibril_resp_error(resp, 500, "watch failed: %s", strerror(errno));
		free(c);
		return;
	}
	p->watches[p->nwatches++] = w;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "watch", json_object_new_int(c->op));
	p->wcalls[c->op] = c; /* freed in fini */
	answer(resp, 200, o);
}

static void route_unwatch(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	int64_t id = query_int(req, "id");
	if (id < 0 || id >= p->nwatches || !p->watches[id]) {
		fibril_resp_error(resp, 404, "no such watch");
		return;
	}
	p->kv->unwatch(p->ctx, p->watches[id]);
	p->watches[id] = NULL;
	fibril_resp_json(resp, 200, "{\"unwatched\":true}");
}

static void route_op(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	const char *s = fibril_req_param(req, "id");
	long id = s ? strtol(s, NULL, 10) : -1;
	if (id < 0 || id >= p->nops) {
		fibril_resp_error(resp, 404, "no such op");
		return;
	}
	if (p->results[id]) {
		fibril_resp_json(resp, 200, json_object_to_json_string_ext(p->results[id],
									     JSON_C_TO_STRING_PLAIN));
		return;
	}
	char body[64];
	snprintf(body, sizeof(body), "{\"op\":%ld,\"done\":false}", id);
	fibril_resp_json(resp, 200, body);
}

static void route_events(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "events", json_object_get(p->events));
	answer(resp, 200, o);
}

static void route_state(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct probe *p = ud;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "connected", json_object_new_boolean(p->kv && p->kv->connected(p->ctx)));
	json_object_object_add(o, "connected_events", json_object_new_int(p->connected));
	json_object_object_add(o, "disconnected_events", json_object_new_int(p->disconnected));
	json_object_object_add(o, "lost", json_object_get(p->lost));
	answer(resp, 200, o);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static const struct {
	const char *method, *path;
	fibril_route_fn fn;
} routes[] = {
	{"POST", "/v1/kvprobe/put", route_put},       {"POST", "/v1/kvprobe/get", route_get},
	{"POST", "/v1/kvprobe/getpaged", route_getpaged},
	{"POST", "/v1/kvprobe/getrange", route_getrange},
	{"POST", "/v1/kvprobe/del", route_del},       {"POST", "/v1/kvprobe/txn", route_txn},
	{"POST", "/v1/kvprobe/grant", route_grant},   {"POST", "/v1/kvprobe/revoke", route_revoke},
	{"POST", "/v1/kvprobe/watch", route_watch},   {"POST", "/v1/kvprobe/unwatch", route_unwatch},
	{"GET", "/v1/kvprobe/op/{id}", route_op},     {"GET", "/v1/kvprobe/events", route_events},
	{"GET", "/v1/kvprobe/state", route_state},
};

static int probe_init(struct fibril_module *m)
{
	struct probe *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->m = m;
	p->events = json_object_new_array();
	p->lost = json_object_new_array();
	fibril_module_set_data(m, p);
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		int rc = fibril_api_route(m, routes[i].method, routes[i].path, 0, routes[i].fn, p);
		if (rc)
			return rc;
	}
	const char *topics[] = {FIBRIL_KVSTORE_TOPIC_CONNECTED, FIBRIL_KVSTORE_TOPIC_DISCONNECTED,
				FIBRIL_KVSTORE_TOPIC_LEASE_LOST};
	for (size_t i = 0; i < 3; i++)
		if (!fibril_bus_subscribe(m, topics[i], 1, on_topic, p))
			return -errno;
	return 0;
}

static int probe_start(struct fibril_module *m)
{
	struct probe *p = fibril_module_data(m);
	p->kv = (const struct fibril_kvstore_ops *)fibril_service_lookup(
		m, FIBRIL_KVSTORE_CAPABILITY, FIBRIL_KVSTORE_VERSION, &p->ctx);
	if (!p->kv) {
		fibril_module_set_error(m, "no kvstore: %s", strerror(errno));
		return -errno;
	}
	fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "kvstore %s",
			     p->kv->connected(p->ctx) ? "connected" : "not connected");
	return 0;
}

/* Watches end with their consumer; pending ops get -ECANCELED later. */
static void probe_stop(struct fibril_module *m)
{
	struct probe *p = fibril_module_data(m);
	for (int i = 0; i < p->nwatches; i++) {
		if (p->watches[i])
			p->kv->unwatch(p->ctx, p->watches[i]);
		p->watches[i] = NULL;
	}
}

static void probe_fini(struct fibril_module *m)
{
	struct probe *p = fibril_module_data(m);
	if (!p)
		return;
	for (int i = 0; i < p->nops; i++)
		json_object_put(p->results[i]);
	for (int i = 0; i < p->nwatches; i++)
		free(p->wcalls[i]);
	json_object_put(p->events);
	json_object_put(p->lost);
	free(p);
}

FIBRIL_MODULE(.name = "kvprobe", .version = "1.0.0",
	      .description = "test module: drives the kvstore capability over the API",
	      .requires = FIBRIL_LIST(FIBRIL_KVSTORE_CAPABILITY), .init = probe_init,
	      .start = probe_start, .stop = probe_stop, .fini = probe_fini);
