/* modules/nodes/ipcache_table.c - the ipcache's entries (ipcache.c) by
 * address: a chained hash table (buckets a power of two, doubled as it
 * fills) of struct nodes_ip, each keeping of its record what it needs (the
 * pod's namespace and name in one allocation of their own length: ~130
 * bytes an entry, at the 100,000 endpoints a cluster is measured at). */
#include "nodes_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nodes_ipc_rec_set(struct nodes_ip_compact *d, const struct nodes_ip_record *r)
{
	d->family = r->family;
	d->host_family = r->host_family;
	memcpy(d->addr, r->addr, sizeof(d->addr));
	memcpy(d->host, r->host, sizeof(d->host));
	d->identity = r->identity;
	memcpy(d->node, r->node, sizeof(d->node));
	free(d->pod);
	d->pod = NULL;
	if (r->pod_name[0]) {
		size_t ns = strlen(r->pod_namespace), name = strlen(r->pod_name);
		if ((d->pod = malloc(ns + name + 2))) {
			memcpy(d->pod, r->pod_namespace, ns);
			d->pod[ns] = '/';
			memcpy(d->pod + ns + 1, r->pod_name, name + 1);
		}
	}
}

/* the whole record again (to publish ours) */
void nodes_ipc_rec_expand(const struct nodes_ip_compact *d, struct nodes_ip_record *r)
{
	memset(r, 0, sizeof(*r));
	r->family = d->family;
	r->host_family = d->host_family;
	memcpy(r->addr, d->addr, sizeof(r->addr));
	memcpy(r->host, d->host, sizeof(r->host));
	r->identity = d->identity;
	memcpy(r->node, d->node, sizeof(r->node));
	const char *slash = d->pod ? strchr(d->pod, '/') : NULL;
	if (slash) {
		snprintf(r->pod_namespace, sizeof(r->pod_namespace), "%.*s", (int)(slash - d->pod),
			 d->pod);
		snprintf(r->pod_name, sizeof(r->pod_name), "%s", slash + 1);
	}
}

void nodes_ipc_entry_free(struct nodes_ip *e)
{
	free(e->r.pod);
	free(e);
}

static uint32_t ip_hash(uint8_t family, const uint8_t *addr)
{
	uint32_t h = 2166136261u ^ family;
	unsigned n = family == 4 ? 4 : 16;
	for (unsigned i = 0; i < n; i++)
		h = (h ^ addr[i]) * 16777619u;
	return h;
}

static struct nodes_ip **slot(struct nodes_ipcache *c, uint8_t family, const uint8_t *addr)
{
	struct nodes_ip **p = &c->buckets[ip_hash(family, addr) & (c->nbuckets - 1)];
	for (; *p; p = &(*p)->next)
		if ((*p)->r.family == family && !memcmp((*p)->r.addr, addr, 16))
			break;
	return p;
}

static int grow(struct nodes_ipcache *c)
{
	size_t n = c->nbuckets ? c->nbuckets * 2 : 1024;
	struct nodes_ip **b = calloc(n, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < c->nbuckets; i++) {
		for (struct nodes_ip *e = c->buckets[i], *next; e; e = next) {
			next = e->next;
			struct nodes_ip **p = &b[ip_hash(e->r.family, e->r.addr) & (n - 1)];
			e->next = *p;
			*p = e;
		}
	}
	free(c->buckets);
	c->buckets = b;
	c->nbuckets = n;
	return 0;
}

struct nodes_ip *nodes_ipc_lookup(struct nodes_ipcache *c, uint8_t family, const uint8_t *addr)
{
	return c->nbuckets ? *slot(c, family, addr) : NULL;
}

struct nodes_ip *nodes_ipc_insert(struct nodes_ipcache *c, const struct nodes_ip_record *r)
{
	if ((c->count + 1 > c->nbuckets) && grow(c))
		return NULL;
	struct nodes_ip **p = slot(c, r->family, r->addr);
	if (*p)
		return *p;
	struct nodes_ip *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	nodes_ipc_rec_set(&e->r, r);
	*p = e;
	c->count++;
	return e;
}

void nodes_ipc_unlink(struct nodes_ipcache *c, struct nodes_ip *e)
{
	struct nodes_ip **p = slot(c, e->r.family, e->r.addr);
	if (*p == e) {
		*p = e->next;
		c->count--;
	}
}
