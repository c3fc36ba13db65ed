/* modules/ipam-cluster-pool/table.c - the module's allocations, found by
 * address and by owner: two chained hash tables over the same entries,
 * doubled when they fill up. */
#include "cluster_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define INITIAL_BUCKETS 64

static uint64_t fnv1a(const void *data, size_t len, uint64_t h)
{
	const uint8_t *p = data;
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static size_t ip_bucket(const struct fibril_ip *ip, size_t n)
{
	uint64_t h = fnv1a(&ip->family, 1, 14695981039346656037ull);
	return (size_t)(fnv1a(ip->bytes, ip->family == 6 ? 16 : 4, h) & (n - 1));
}

static size_t owner_bucket(const char *owner, size_t n)
{
	return (size_t)(fnv1a(owner, strlen(owner), 14695981039346656037ull) & (n - 1));
}

static bool ip_equal(const struct fibril_ip *a, const struct fibril_ip *b)
{
	return a->family == b->family && memcmp(a->bytes, b->bytes, a->family == 6 ? 16 : 4) == 0;
}

int cp_table_init(struct cp_table *t)
{
	t->nbuckets = INITIAL_BUCKETS;
	t->count = 0;
	t->by_ip = calloc(t->nbuckets, sizeof(*t->by_ip));
	t->by_owner = calloc(t->nbuckets, sizeof(*t->by_owner));
	if (t->by_ip && t->by_owner)
		return 0;
	free(t->by_ip);
	free(t->by_owner);
	t->by_ip = t->by_owner = NULL;
	return -ENOMEM;
}

void cp_table_free(struct cp_table *t)
{
	for (size_t i = 0; t->by_ip && i < t->nbuckets; i++) {
		struct cp_alloc *a = t->by_ip[i];
		while (a) {
			struct cp_alloc *next = a->next_ip;
			cp_alloc_free(a);
			a = next;
		}
	}
	free(t->by_ip);
	free(t->by_owner);
	memset(t, 0, sizeof(*t));
}

struct cp_alloc *cp_alloc_new(const struct fibril_ip *ip, const char *owner)
{
	struct cp_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->owner = strdup(owner ? owner : "");
	if (!a->owner) {
		free(a);
		return NULL;
	}
	a->ip.family = ip->family; /* the bytes past an IPv4 address stay zero */
	memcpy(a->ip.bytes, ip->bytes, ip->family == 6 ? 16 : 4);
	fibril_ip_format(ip, a->addr, sizeof(a->addr));
	return a;
}

void cp_alloc_free(struct cp_alloc *a)
{
	if (!a)
		return;
	free(a->owner);
	free(a);
}

struct cp_alloc *cp_table_find_ip(const struct cp_table *t, const struct fibril_ip *ip)
{
	for (struct cp_alloc *a = t->by_ip[ip_bucket(ip, t->nbuckets)]; a; a = a->next_ip)
		if (ip_equal(&a->ip, ip))
			return a;
	return NULL;
}

struct cp_alloc *cp_table_find_owner(const struct cp_table *t, const char *owner, int family)
{
	if (!owner || !owner[0])
		return NULL;
	struct cp_alloc *best = NULL;
	for (struct cp_alloc *a = t->by_owner[owner_bucket(owner, t->nbuckets)]; a;
	     a = a->next_owner) {
		if (!a->placed || strcmp(a->owner, owner) != 0)
			continue;
		if (family && a->ip.family != family)
			continue;
		/* the lowest address, so an owner holding several gets a stable answer */
		if (!best || memcmp(a->ip.bytes, best->ip.bytes, 16) < 0)
			best = a;
	}
	return best;
}

static void link_entry(struct cp_table *t, struct cp_alloc *a)
{
	size_t bi = ip_bucket(&a->ip, t->nbuckets), bo = owner_bucket(a->owner, t->nbuckets);
	a->next_ip = t->by_ip[bi];
	t->by_ip[bi] = a;
	a->next_owner = t->by_owner[bo];
	t->by_owner[bo] = a;
}

/* Doubles the buckets; on no memory keeps the old ones (longer chains). */
static void grow(struct cp_table *t)
{
	size_t n = t->nbuckets * 2;
	struct cp_alloc **by_ip = calloc(n, sizeof(*by_ip)), **by_owner = calloc(n, sizeof(*by_owner));
	if (!by_ip || !by_owner) {
		free(by_ip);
		free(by_owner);
		return;
	}
	struct cp_alloc **old = t->by_ip;
	size_t oldn = t->nbuckets;
	free(t->by_owner);
	t->by_ip = by_ip;
	t->by_owner = by_owner;
	t->nbuckets = n;
	for (size_t i = 0; i < oldn; i++) {
		struct cp_alloc *a = old[i];
		while (a) {
			struct cp_alloc *next = a->next_ip;
			link_entry(t, a);
			a = next;
		}
	}
	free(old);
}

void cp_table_insert(struct cp_table *t, struct cp_alloc *a)
{
	if (t->count >= t->nbuckets)
		grow(t);
	link_entry(t, a);
	t->count++;
}

void cp_table_remove(struct cp_table *t, struct cp_alloc *a)
{
	struct cp_alloc **p = &t->by_ip[ip_bucket(&a->ip, t->nbuckets)];
	while (*p && *p != a)
		p = &(*p)->next_ip;
	if (*p)
		*p = a->next_ip;
	p = &t->by_owner[owner_bucket(a->owner, t->nbuckets)];
	while (*p && *p != a)
		p = &(*p)->next_owner;
	if (*p)
		*p = a->next_owner;
	t->count--;
}

static int cmp_alloc(const void *x, const void *y)
{
	const struct cp_alloc *a = *(const struct cp_alloc *const *)x;
	const struct cp_alloc *b = *(const struct cp_alloc *const *)y;
	if (a->ip.family != b->ip.family)
		return a->ip.family < b->ip.family ? -1 : 1;
	return memcmp(a->ip.bytes, b->ip.bytes, 16);
}

struct cp_alloc **cp_table_sorted(const struct cp_table *t, size_t *n)
{
	struct cp_alloc **v = malloc((t->count ? t->count : 1) * sizeof(*v));
	*n = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < t->nbuckets; i++)
		for (struct cp_alloc *a = t->by_ip[i]; a; a = a->next_ip)
			v[(*n)++] = a;
	qsort(v, *n, sizeof(*v), cmp_alloc);
	return v;
}
