/* tests/modules/k8sprobe.c - a test consumer of the "k8s" capability, for
 * tests/integration/k8s_informers.sh and tests/bench/bench_k8s.sh. It
 * subscribes to every k8s.<resource> topic and keeps, per resource, its own
 * copy of the objects built only from the events it received (key ->
 * resourceVersion), so a test can compare what the handlers saw with the
 * API server's state object by object. An event that cannot be right is a
 * violation: ADDED for an object it already has, UPDATED or DELETED for one
 * it does not, UPDATED to the resourceVersion it already has (one change
 * delivered twice), a malformed payload. In start it can also watch and wait
 * for resources and annotate the node ([k8sprobe] keys).
 *
 *   GET /v1/k8sprobe              {"synced_err","pending","annotated","node",
 *                                  "get_default","events","bad_events","last",
 *                                  "first_event_ms","last_event_ms",
 *                                  "resources":{"pods":{"events","added","updated",
 *                                  "deleted","violations","objects","last_violation"}}}
 *   GET /v1/k8sprobe/{resource}   the same counts plus
 *                                  "items":[{"namespace","name","resourceVersion"}]
 *
 *   POST /v1/k8sprobe/request?method=M&resource=R[&namespace=NS][&name=N]
 *                                 (body: the request's) calls `request` (SDK 1.11):
 *                                 202 {"op":N}, or 400 {"rc"} when it refused
 *   GET /v1/k8sprobe/op/{id}      {"done":false} until the reply came, then
 *                                 {"done":true,"status","reason","body","err","message"}
 *
 *   [k8sprobe] wait = namespaces        watch_resource + wait_synced in start
 *   [k8sprobe] annotate = key=value     annotate_node in start */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include <fibril/fibril.h>

#define NRES 12
#define MAX_OPS 4096

static const char *const res_names[NRES] = {
	FIBRIL_K8S_NODES,          FIBRIL_K8S_PODS,     FIBRIL_K8S_NAMESPACES,
	FIBRIL_K8S_SERVICES,       FIBRIL_K8S_ENDPOINTSLICES, FIBRIL_K8S_NETWORKPOLICIES,
	FIBRIL_K8S_CNPS,           FIBRIL_K8S_CCNPS,    FIBRIL_K8S_CILIUM_IDENTITIES,
	FIBRIL_K8S_CILIUM_ENDPOINTS, FIBRIL_K8S_CILIUM_NODES, FIBRIL_K8S_LEASES,
};

struct entry {
	struct entry *next;
	char *key; /* namespace/name, or name */
	char *rv;
};

struct res {
	const char *name;
	struct entry **b;
	size_t nb, n;
	uint64_t events, count[3], violations;
	char last_violation[512];
};

struct probe {
	struct fibril_module *m;
	const struct fibril_k8s_ops *ops;
	void *ctx;
	struct res res[NRES];
	int synced_err, annotated;
	char pending[256], last[512];
	uint64_t events, bad_events;
	double first_ms, last_ms;
	int nops;
	struct json_object *ops_done[MAX_OPS]; /* NULL while the reply is pending */
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t hash(const char *s)
{
	size_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct entry **find(struct res *r, const char *key)
{
	if (!r->nb)
		return NULL;
	struct entry **pp = &r->b[hash(key) & (r->nb - 1)];
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->key, key) == 0)
			return pp;
	return NULL;
}

static void grow(struct res *r)
{
	size_t nb = r->nb ? r->nb * 2 : 64;
	struct entry **b = calloc(nb, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < r->nb; i++)
		for (struct entry *e = r->b[i], *n; e; e = n) {
			n = e->next;
			size_t h = hash(e->key) & (nb - 1);
			e->next = b[h];
			b[h] = e;
		}
	free(r->b);
	r->b = b;
	r->nb = nb;
}

static void entry_free(struct entry *e)
{
	free(e->key);
	free(e->rv);
	free(e);
}

static struct probe P;

static void violation(struct res *r, const char *fmt, const char *a, const char *b)
{
	r->violations++;
	snprintf(r->last_violation, sizeof(r->last_violation), fmt, a, b);
}

/* A string field of the payload: absent (0) or inside it and terminated. */
static bool field_ok(const struct fibril_event *ev, uint32_t off)
{
	const char *base = ev->payload;
	return off == 0 ||
	       (off >= sizeof(struct fibril_k8s_event) && off < ev->payload_len &&
		memchr(base + off, '\0', ev->payload_len - off) != NULL);
}

static int on_event(const struct fibril_event *ev, void *ud)
{
	struct res *r = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (P.events++ == 0)
		P.first_ms = now_ms();
	P.last_ms = now_ms();
	r->events++;
	if (ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) || e->type > FIBRIL_K8S_DELETED ||
	    !field_ok(ev, e->resource) || !field_ok(ev, e->namespace_) || !field_ok(ev, e->name) ||
	    !field_ok(ev, e->object) || !field_ok(ev, e->old_object) ||
	    !field_ok(ev, e->resource_version)) {
		P.bad_events++;
		return -EINVAL;
	}
	const char *res = FIBRIL_K8S_STR(e, resource), *ns = FIBRIL_K8S_STR(e, namespace_),
		   *name = FIBRIL_K8S_STR(e, name), *obj = FIBRIL_K8S_STR(e, object),
		   *old = FIBRIL_K8S_STR(e, old_object), *rv = FIBRIL_K8S_STR(e, resource_version);
	if (!res || strcmp(res, r->name) || !ns || !name || !obj || !strstr(obj, name) || !rv ||
	    (e->type == FIBRIL_K8S_UPDATED) != (old != NULL)) {
		P.bad_events++;
		return -EINVAL;
	}
	r->count[e->type]++;
	snprintf(P.last, sizeof(P.last), "%u %s", e->type, name);
	char key[600];
	snprintf(key, sizeof(key), "%s%s%s", ns, *ns ? "/" : "", name);
	struct entry **pp = find(r, key);
	switch (e->type) {
	case FIBRIL_K8S_ADDED:
		if (pp) {
			violation(r, "ADDED %.300s (rv %.100s) which was already there", key, rv);
			char *dup = strdup(rv);
			if (dup) {
				free((*pp)->rv);
				(*pp)->rv = dup;
			}
			break;
		}
		if (r->n + 1 > r->nb)
			grow(r);
		struct entry *n = calloc(1, sizeof(*n));
		if (!n || !r->nb)
			return -ENOMEM;
		n->key = strdup(key);
		n->rv = strdup(rv);
		size_t h = hash(key) & (r->nb - 1);
		n->next = r->b[h];
		r->b[h] = n;
		r->n++;
		break;
	case FIBRIL_K8S_UPDATED:
		if (!pp) {
			violation(r, "UPDATED %.300s (rv %.100s) which was not there", key, rv);
			break;
		}
		if (strcmp((*pp)->rv, rv) == 0)
			violation(r, "UPDATED %.300s to rv %.100s twice", key, rv);
		free((*pp)->rv);
		(*pp)->rv = strdup(rv);
		break;
	default:
		if (!pp) {
			violation(r, "DELETED %.300s (rv %.100s) which was not there", key, rv);
			break;
		}
		struct entry *gone = *pp;
		*pp = gone->next;
		entry_free(gone);
		r->n--;
	}
	return 0;
}

static void add_counts(struct json_object *o, const struct res *r)
{
	json_object_object_add(o, "events", json_object_new_int64((int64_t)r->events));
	json_object_object_add(o, "added", json_object_new_int64((int64_t)r->count[0]));
	json_object_object_add(o, "updated", json_object_new_int64((int64_t)r->count[1]));
	json_object_object_add(o, "deleted", json_object_new_int64((int64_t)r->count[2]));
	json_object_object_add(o, "violations", json_object_new_int64((int64_t)r->violations));
	json_object_object_add(o, "objects", json_object_new_int64((int64_t)r->n));
	json_object_object_add(o, "last_violation", json_object_new_string(r->last_violation));
}

static void respond(struct fibril_response *resp, struct json_object *doc)
{
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
	json_object_put(doc);
}

static void on_route(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct json_object *doc = json_object_new_object(), *all = json_object_new_object();
	const char *got = P.ops ? P.ops->get(P.ctx, FIBRIL_K8S_NAMESPACES, "", "default") : NULL;
	json_object_object_add(doc, "synced_err", json_object_new_int(P.synced_err));
	json_object_object_add(doc, "pending", json_object_new_string(P.pending));
	json_object_object_add(doc, "annotated", json_object_new_int(P.annotated));
	json_object_object_add(doc, "node", json_object_new_string(P.ops ? P.ops->node_name(P.ctx) : ""));
	json_object_object_add(doc, "get_default", json_object_new_boolean(got != NULL));
	json_object_object_add(doc, "events", json_object_new_int64((int64_t)P.events));
	json_object_object_add(doc, "bad_events", json_object_new_int64((int64_t)P.bad_events));
	json_object_object_add(doc, "last", json_object_new_string(P.last));
	json_object_object_add(doc, "first_event_ms", json_object_new_double(P.first_ms));
	json_object_object_add(doc, "last_event_ms", json_object_new_double(P.last_ms));
	for (int i = 0; i < NRES; i++) {
		struct json_object *o = json_object_new_object();
		add_counts(o, &P.res[i]);
		json_object_object_add(all, P.res[i].name, o);
	}
	json_object_object_add(doc, "resources", all);
	respond(resp, doc);
}

static void on_route_res(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	const char *name = fibril_req_param(req, "resource");
	for (int i = 0; name && i < NRES; i++) {
		struct res *r = &P.res[i];
		if (strcmp(r->name, name))
			continue;
		struct json_object *doc = json_object_new_object(), *arr = json_object_new_array();
		add_counts(doc, r);
		for (size_t b = 0; b < r->nb; b++)
			for (struct entry *e = r->b[b]; e; e = e->next) {
				struct json_object *o = json_object_new_object();
				const char *slash = strchr(e->key, '/');
				json_object_object_add(o, "namespace",
						       json_object_new_string_len(e->key, slash ? (int)(slash - e->key) : 0));
				json_object_object_add(o, "name", json_object_new_string(slash ? slash + 1 : e->key));
				json_object_object_add(o, "resourceVersion", json_object_new_string(e->rv));
				json_object_array_add(arr, o);
			}
		json_object_object_add(doc, "items", arr);
		respond(resp, doc);
		return;
	}
	fibril_resp_error(resp, 404, "unknown resource %s", name ? name : "");
}

static void on_reply(void *ud, int status, const char *reason, const char *body, int err,
		     const char *message)
{
	int op = (int)(intptr_t)ud;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "done", json_object_new_boolean(1));
	json_object_object_add(o, "status", json_object_new_int(status));
	json_object_object_add(o, "reason", json_object_new_string(reason ? reason : "?"));
	json_object_object_add(o, "body", body ? json_tokener_parse(body) : NULL);
	json_object_object_add(o, "err", json_object_new_int(err));
	json_object_object_add(o, "message", json_object_new_string(message ? message : "?"));
	P.ops_done[op] = o;
}

static void on_route_request(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	if (!P.ops || !FIBRIL_SERVICE_HAS(P.ops, request) || !P.ops->request || P.nops >= MAX_OPS) {
		fibril_resp_error(resp, 503, "no request op (k8s interface < 2), or too many ops");
		return;
	}
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	char *copy = len ? strndup(body, len) : NULL;
	const char *ns = fibril_req_query(req, "namespace");
	int op = P.nops;
	int rc = P.ops->request(P.ctx, fibril_req_query(req, "method"),
				fibril_req_query(req, "resource"), ns, fibril_req_query(req, "name"),
				copy, on_reply, (void *)(intptr_t)op);
	free(copy);
	struct json_object *o = json_object_new_object();
	if (rc) {
		json_object_object_add(o, "rc", json_object_new_int(rc));
		fibril_resp_json(resp, 400, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
		return;
	}
	P.nops++;
	json_object_object_add(o, "op", json_object_new_int(op));
	fibril_resp_json(resp, 202, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

static void on_route_op(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	const char *id = fibril_req_param(req, "id");
	int op = id ? atoi(id) : -1;
	if (op < 0 || op >= P.nops) {
		fibril_resp_error(resp, 404, "no op %s", id ? id : "");
		return;
	}
	if (!P.ops_done[op]) {
		fibril_resp_json(resp, 200, "{\"done\":false}");
		return;
	}
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(P.ops_done[op], JSON_C_TO_STRING_PLAIN));
}

static void on_synced(void *ud, int err, const char *pending)
{
	P.synced_err = err;
	snprintf(P.pending, sizeof(P.pending), "%s", pending ? pending : "");
}

static void on_annotated(void *ud, int err, const char *msg)
{
	P.annotated = err;
}

static int probe_init(struct fibril_module *m)
{
	P.m = m;
	P.synced_err = 1;
	P.annotated = 1;
	for (int i = 0; i < NRES; i++) {
		char topic[80];
		P.res[i].name = res_names[i];
		snprintf(topic, sizeof(topic), "%s%s", FIBRIL_K8S_TOPIC_PREFIX, res_names[i]);
		if (!fibril_bus_subscribe(m, topic, FIBRIL_K8S_VERSION, on_event, &P.res[i]))
			return -ENOMEM;
	}
	int rc = fibril_api_route(m, "GET", "/v1/k8sprobe", 0, on_route, NULL);
	if (!rc)
		rc = fibril_api_route(m, "POST", "/v1/k8sprobe/request", 0, on_route_request, NULL);
	if (!rc)
		rc = fibril_api_route(m, "GET", "/v1/k8sprobe/op/{id}", 0, on_route_op, NULL);
	return rc ? rc : fibril_api_route(m, "GET", "/v1/k8sprobe/{resource}", 0, on_route_res, NULL);
}

static int probe_start(struct fibril_module *m)
{
	P.ops = (const struct fibril_k8s_ops *)fibril_service_lookup(m, FIBRIL_K8S_CAPABILITY,
								     FIBRIL_K8S_VERSION, &P.ctx);
	if (!P.ops) {
		fibril_module_set_error(m, "no k8s capability");
		return -ENOENT;
	}
	const char *wait = fibril_config_string(m, "wait");
	if (wait && *wait) {
		const char *list[NRES + 1] = {0};
		char buf[256], *save = NULL;
		size_t n = 0;
		snprintf(buf, sizeof(buf), "%s", wait);
		for (char *t = strtok_r(buf, ", ", &save); t && n < NRES; t = strtok_r(NULL, ", ", &save)) {
			if (P.ops->watch_resource(P.ctx, t)) {
				fibril_module_set_error(m, "cannot watch %s", t);
				return -EINVAL;
			}
			list[n++] = t;
		}
		int rc = P.ops->wait_synced(P.ctx, list, 10000, on_synced, NULL);
		if (rc)
			return rc;
	}
	const char *annot = fibril_config_string(m, "annotate");
	if (annot && *annot) {
		char key[256];
		snprintf(key, sizeof(key), "%s", annot);
		char *eq = strchr(key, '=');
		if (!eq) {
			fibril_module_set_error(m, "annotate: key=value");
			return -EINVAL;
		}
		*eq = '\0';
		const char *k[] = {key}, *v[] = {eq + 1};
		return P.ops->annotate_node(P.ctx, k, v, 1, on_annotated, NULL);
	}
	return 0;
}

static void probe_fini(struct fibril_module *m)
{
	for (int i = 0; i < NRES; i++) {
		struct res *r = &P.res[i];
		for (size_t b = 0; b < r->nb; b++)
			for (struct entry *e = r->b[b], *n; e; e = n) {
				n = e->next;
				entry_free(e);
			}
		free(r->b);
	}
	for (int i = 0; i < P.nops; i++)
		json_object_put(P.ops_done[i]);
	memset(&P, 0, sizeof(P));
}

static const struct fibril_config_key probe_keys[] = {
	{.name = "wait", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "resources to watch and wait for in start"},
	{.name = "annotate", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "key=value to put on the node in start"},
	{0},
};

FIBRIL_MODULE(.name = "k8sprobe", .version = "1", .requires = FIBRIL_LIST(FIBRIL_K8S_CAPABILITY),
	      .config_keys = probe_keys, .init = probe_init, .start = probe_start,
	      .fini = probe_fini);
