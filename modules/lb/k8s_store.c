/* modules/lb/k8s_store.c - what the lb module keeps of the Kubernetes
 * objects it follows (k8s.c), kept small at 10,000 Services: an index of
 * its Services by "namespace/name" (open addressing, so an event finds its
 * Service in O(1), not by a walk of all of them), and projections - a
 * Service or EndpointSlice reduced to the fields lb reads (as client-go's
 * transform functions do), the rest (metadata, managed fields,
 * annotations, selectors) freed as soon as it arrives - kept as compact
 * JSON text between syncs (a json-c tree costs ten times its text), parsed
 * again for the sync of its Service. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fibril/fibril.h>

#include "lb_mod.h"

static size_t key_hash(const char *key)
{
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return (size_t)(h ^ (h >> 31));
}

size_t lb_k8s_index_get(const struct lb_k8s_index *x, const char *key, lb_k8s_key_at_fn key_at,
			const void *ud)
{
	if (!x->slot)
		return SIZE_MAX;
	for (size_t k = key_hash(key) & x->mask; x->slot[k]; k = (k + 1) & x->mask)
		if (!strcmp(key_at(ud, x->slot[k] - 1), key))
			return x->slot[k] - 1;
	return SIZE_MAX;
}

static void put(size_t *slot, size_t mask, const char *key, size_t i)
{
	size_t k = key_hash(key) & mask;
	while (slot[k])
		k = (k + 1) & mask;
	slot[k] = i + 1;
}

int lb_k8s_index_add(struct lb_k8s_index *x, const char *key, size_t i, lb_k8s_key_at_fn key_at,
		     const void *ud)
{
	if (2 * (x->n + 1) > x->mask + 1 || !x->slot) {
		size_t cap = x->slot ? 2 * (x->mask + 1) : 256;
		size_t *slot = calloc(cap, sizeof(*slot));
		if (!slot)
			return -1;
		for (size_t k = 0; x->slot && k <= x->mask; k++)
			if (x->slot[k])
				put(slot, cap - 1, key_at(ud, x->slot[k] - 1), x->slot[k] - 1);
		free(x->slot);
		x->slot = slot;
		x->mask = cap - 1;
	}
	put(x->slot, x->mask, key, i);
	x->n++;
	return 0;
}

void lb_k8s_index_free(struct lb_k8s_index *x)
{
	free(x->slot);
	memset(x, 0, sizeof(*x));
}

/* a new object with those of from's fields (shared, not copied) that exist */
static struct json_object *keep(struct json_object *from, const char *const *names)
{
	struct json_object *o = json_object_new_object(), *v;
	for (; o && *names; names++)
		if (from && json_object_object_get_ex(from, *names, &v) && v)
			json_object_object_add(o, *names, json_object_get(v));
	return o;
}

struct json_object *lb_k8s_project_service(struct json_object *svc)
{
	static const char *const spec_fields[] = {
		"type", "ports", "clusterIP", "clusterIPs", "externalIPs", "ipFamilies",
		"internalTrafficPolicy", "externalTrafficPolicy", "loadBalancerSourceRanges",
		"sessionAffinity", "sessionAffinityConfig", NULL};
	static const char *const status_fields[] = {"loadBalancer", NULL};
	struct json_object *spec = NULL, *status = NULL;
	if (!svc || !json_object_object_get_ex(svc, "spec", &spec) ||
	    !json_object_is_type(spec, json_type_object))
		return svc; /* the caller refuses it as it is */
	(void)json_object_object_get_ex(svc, "status", &status);
	struct json_object *o = json_object_new_object();
	struct json_object *ps = keep(spec, spec_fields);
	struct json_object *pst = status && json_object_is_type(status, json_type_object)
					  ? keep(status, status_fields) : NULL;
	if (!o || !ps) {
		json_object_put(o);
		json_object_put(ps);
		json_object_put(pst);
		return svc; /* out of memory: kept whole */
	}
	json_object_object_add(o, "spec", ps);
	if (pst)
		json_object_object_add(o, "status", pst);
	json_object_put(svc);
	return o;
}

struct json_object *lb_k8s_project_slice(struct json_object *slice)
{
	static const char *const fields[] = {"addressType", "endpoints", "ports", NULL};
	if (!slice || !json_object_is_type(slice, json_type_object))
		return slice;
	struct json_object *o = keep(slice, fields);
	if (!o)
		return slice;
	json_object_put(slice);
	return o;
}

char *lb_k8s_text_of(struct json_object *o)
{
	const char *t = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
	char *text = t ? strdup(t) : NULL;
	json_object_put(o);
	return text;
}

struct json_object *lb_k8s_slices_parse(struct json_object *texts)
{
	struct json_object *o = json_object_new_object();
	if (!o || !texts)
		return o;
	json_object_object_foreach(texts, name, text) {
		struct json_object *v = json_tokener_parse(json_object_get_string(text));
		if (v)
			json_object_object_add(o, name, v);
	}
	return o;
}

int lb_k8s_node_addrs_cached(struct fibril_module *m, struct lb_k8s_addr_cache *c,
			     struct lb_addr **out, size_t *n)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	if (!c->v || now - c->read_at >= 1.0) {
		struct lb_addr *v = NULL;
		size_t nv = 0;
		int rc = lb_node_addrs_list(fibril_config_string(m, "node-addresses"), &v, &nv);
		if (rc < 0)
			return rc;
		free(c->v);
		c->v = v;
		c->n = nv;
		c->read_at = now;
	}
	*out = c->v;
	*n = c->n;
	return 0;
}
