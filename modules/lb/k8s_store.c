/* modules/lb/k8s_store.c - how the lb module finds what it keeps of the
 * Kubernetes objects it follows (k8s.c) at 10,000 Services: an index of
 * its Services by "namespace/name" (open addressing, so an event finds its
 * Service in O(1), not by a walk of all of them), and the node's addresses
 * read at most once a second. What is kept of each object is its
 * projection (k8s_proj.c). */
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
