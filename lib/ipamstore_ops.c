/* lib/ipamstore_ops.c - the "ipam" capability interface
 * (<fibril/ipam.h>) served over an allocation store (lib/ipamstore.c):
 * allocate the next or a given address for an owner, release by address or
 * owner, list, describe the pools, and wait until every answer so far is
 * durable. Output arrays are walked with the element size the caller was
 * built with. */
#include "ipamstore_int.h"
#include <fibril/compat.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ipam interface ------------------------------------------------------------------ */

static bool owner_ok(const char *owner)
{
	return !owner || strlen(owner) < FIBRIL_IPAM_OWNER_LEN;
}

static void fill_result(const struct fam *f, const struct entry *e, struct fibril_ipam_result *out)
{
	struct fibril_ip gw;
	out->family = f->family;
	snprintf(out->address, sizeof(out->address), "%s", e->addr);
	fibril_cidr_format(&f->node, out->cidr, sizeof(out->cidr));
	fibril_ipalloc_router(f->alloc, &gw);
	fibril_ip_format(&gw, out->gateway, sizeof(out->gateway));
}

/* Records ip (just claimed in the allocator) for owner: the journal's
 * record, then the table; on failure the address goes back to the
 * allocator. Durable once the journal's flush says so (wait_durable). */
static int commit(struct fibril_ipamstore *s, struct fam *f, const struct fibril_ip *ip,
		  const char *owner, struct entry **out)
{
	/* memory first: a flush started by ipamstore_record() may compact, and its
	 * snapshot must already hold this allocation */
	struct entry *e = ipamstore_entry_new(ip, owner);
	if (!e) {
		fibril_ipalloc_release(f->alloc, ip);
		return -ENOMEM;
	}
	e->placed = true;
	ipamstore_insert(s, e);
	int rc = ipamstore_record(s, e, true);
	if (rc) {
		fibril_error(s->m, "cannot record %s for '%s' in %s/%s.journal: %s", e->addr,
			     e->owner, s->dir, JOURNAL_NAME, strerror(-rc));
		ipamstore_unlink_entry(s, e);
		ipamstore_entry_free(e);
		fibril_ipalloc_release(f->alloc, ip);
		return rc;
	}
	*out = e;
	return 0;
}

/* Forgets an allocation: memory, then the journal's record (a compaction
 * that ipamstore_record() starts must not find it in the snapshot); put back if the
 * journal refuses the record. */
static int drop(struct fibril_ipamstore *s, struct fam *f, struct entry *e)
{
	ipamstore_unlink_entry(s, e);
	int rc = ipamstore_record(s, e, false);
	if (rc) {
		fibril_error(s->m, "cannot record the release of %s in %s/%s.journal: %s", e->addr,
			     s->dir, JOURNAL_NAME, strerror(-rc));
		ipamstore_insert(s, e);
		return rc;
	}
	if (e->placed)
		fibril_ipalloc_release(f->alloc, &e->ip);
	else if (f->stale)
		f->stale--;
	ipamstore_entry_free(e);
	return 0;
}

/* One family's address for owner: the one it holds, or the next free one.
 * *fresh tells whether it was handed out now. */
static int next_one(struct fibril_ipamstore *s, struct fam *f, const char *owner,
		    struct fibril_ipam_result *out, struct entry **fresh)
{
	*fresh = NULL;
	if (!ipamstore_serving(s, f))
		return -EAGAIN;
	struct entry *e = ipamstore_find_owner(s, owner, f->family);
	if (!e) {
		struct fibril_ip ip;
		int rc = fibril_ipalloc_next(f->alloc, &ip);
		if (rc == 0)
			rc = commit(s, f, &ip, owner, &e);
		if (rc)
			return rc;
		*fresh = e;
	}
	fill_result(f, e, out);
	return 0;
}

/* Output arrays carry their element size (docs/ARCHITECTURE.md): the
 * caller's element is out[0].sz bytes long and every element says the same.
 * At least the 1.0 layout (today's struct: neither has grown yet); a longer
 * element (a newer SDK's) is filled as far as this host knows and the rest
 * is left as the caller set it. Element i is at out + i * that size. */
#define IPAM_RESULT_MIN_SZ sizeof(struct fibril_ipam_result)
#define IPAM_POOL_MIN_SZ sizeof(struct fibril_ipam_pool)

static uint32_t elem_size(const void *out, size_t n, size_t min)
{
	uint32_t esz;
	memcpy(&esz, out, sizeof(esz));
	if (esz < min)
		return 0;
	for (size_t i = 1; i < n; i++) {
		uint32_t sz;
		memcpy(&sz, (const char *)out + i * esz, sizeof(sz));
		if (sz != esz)
			return 0;
	}
	return esz;
}

static struct fibril_ipam_result *result_at(struct fibril_ipam_result *out, uint32_t esz, size_t i)
{
	return (struct fibril_ipam_result *)(void *)((char *)out + i * esz);
}

static int store_allocate_next(void *ctx, int family, const char *owner,
			       struct fibril_ipam_result *out, size_t max)
{
	struct fibril_ipamstore *s = ctx;
	struct fam *want[NFAM];
	size_t n = 0;
	if ((family != FIBRIL_IPAM_ANY && family != 4 && family != 6) || !owner_ok(owner))
		return -EINVAL;
	for (int i = 0; i < NFAM; i++)
		if (s->fam[i].open && (family == FIBRIL_IPAM_ANY || s->fam[i].family == family))
			want[n++] = &s->fam[i];
	if (n == 0)
		return -EAFNOSUPPORT;
	uint32_t esz = out && max >= n ? elem_size(out, n, IPAM_RESULT_MIN_SZ) : 0;
	if (!esz)
		return -EINVAL;
	struct entry *fresh[NFAM] = {0};
	for (size_t i = 0; i < n; i++) {
		int rc = next_one(s, want[i], owner, result_at(out, esz, i), &fresh[i]);
		if (rc) { /* all or nothing: give back what this call handed out */
			for (size_t j = 0; j < i; j++)
				if (fresh[j])
					drop(s, want[j], fresh[j]);
			return rc;
		}
	}
	return (int)n;
}

/* A given address for owner; idempotent for the same (named) owner. */
static int store_allocate_ip(void *ctx, const char *address, const char *owner,
			     struct fibril_ipam_result *out)
{
	struct fibril_ipamstore *s = ctx;
	struct fibril_ip ip;
	if (!address || fibril_ip_parse(address, &ip) || !owner_ok(owner) || !out ||
	    !elem_size(out, 1, IPAM_RESULT_MIN_SZ))
		return -EINVAL;
	struct fam *f = ipamstore_fam_of(s, ip.family);
	if (!f || !f->open)
		return -EAFNOSUPPORT;
	if (!ipamstore_serving(s, f))
		return -EAGAIN;
	struct entry *e = ipamstore_find_ip(s, &ip);
	if (e && e->placed && owner && owner[0] && strcmp(e->owner, owner) == 0) {
		fill_result(f, e, out);
		return 0;
	}
	if (e)
		return e->placed ? -EEXIST : -ERANGE;
	if (!fibril_cidr_contains(&f->node, &ip))
		return -ERANGE;
	int rc = fibril_ipalloc_claim(f->alloc, &ip);
	if (rc == 0)
		rc = commit(s, f, &ip, owner, &e);
	if (rc == 0)
		fill_result(f, e, out);
	return rc;
}

static int store_release_ip(void *ctx, const char *address)
{
	struct fibril_ipamstore *s = ctx;
	struct fibril_ip ip;
	if (!address || fibril_ip_parse(address, &ip))
		return -EINVAL;
	struct fam *f = ipamstore_fam_of(s, ip.family);
	if (!f || !f->open)
		return -EAFNOSUPPORT;
	struct entry *e = ipamstore_find_ip(s, &ip);
	if (e) /* placed, or stale (outside the node CIDR): both go */
		return drop(s, f, e);
	if (f->have_node && !fibril_cidr_contains(&f->node, &ip))
		return -ERANGE;
	return -ENOENT;
}

static int store_release_owner(void *ctx, const char *owner)
{
	struct fibril_ipamstore *s = ctx;
	if (!owner || !owner[0] || !owner_ok(owner))
		return -EINVAL;
	size_t n;
	struct entry **v = ipamstore_sorted(s, &n);
	if (!v)
		return -ENOMEM;
	int count = 0, rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i]->owner, owner) != 0)
			continue;
		int r = drop(s, ipamstore_fam_of(s, v[i]->ip.family), v[i]);
		if (r)
			rc = r;
		else
			count++;
	}
	free(v);
	return rc ? rc : count;
}

/* Placed allocations, by family then address; returns how many. */
static int store_list(void *ctx, fibril_ipam_list_fn cb, void *ud)
{
	struct fibril_ipamstore *s = ctx;
	if (!cb)
		return -EINVAL;
	size_t n;
	struct entry **v = ipamstore_sorted(s, &n);
	if (!v)
		return -ENOMEM;
	int count = 0;
	for (size_t i = 0; i < n; i++) {
		if (!v[i]->placed)
			continue;
		count++;
		if (cb(v[i]->addr, v[i]->owner, ud))
			break;
	}
	free(v);
	return count;
}

static int store_pools(void *ctx, struct fibril_ipam_pool *out, size_t max)
{
	struct fibril_ipamstore *s = ctx;
	if (max && !out)
		return -EINVAL;
	size_t n = 0, want = 0;
	for (int i = 0; i < NFAM; i++)
		want += ipamstore_serving(s, &s->fam[i]);
	uint32_t esz = 0;
	if (want && max && !(esz = elem_size(out, want < max ? want : max, IPAM_POOL_MIN_SZ)))
		return -EINVAL;
	for (int i = 0; i < NFAM && n < max; i++) {
		struct fam *f = &s->fam[i];
		if (!ipamstore_serving(s, f))
			continue;
		struct fibril_ipam_pool *p = (struct fibril_ipam_pool *)(void *)((char *)out + n * esz);
		struct fibril_ip gw;
		p->family = f->family;
		fibril_cidr_format(&f->node, p->cidr, sizeof(p->cidr));
		fibril_ipalloc_router(f->alloc, &gw);
		fibril_ip_format(&gw, p->gateway, sizeof(p->gateway));
		p->used = fibril_ipalloc_used(f->alloc);
		p->total = fibril_ipalloc_capacity(f->alloc);
		n++;
	}
	return (int)n;
}

/* Interface version 2: done(ud, status) once every answer so far is on disk. */
static int store_wait_durable(void *ctx, fibril_ipam_done_fn done, void *ud)
{
	struct fibril_ipamstore *s = ctx;
	if (!s->j)
		return -EAGAIN; /* not opened */
	return fibril_journal_sync(s->j, done, ud);
}

const struct fibril_ipam_ops ipamstore_store_ops = {
	.hdr = {.sz = sizeof(ipamstore_store_ops), .version = FIBRIL_IPAM_VERSION},
	.allocate_next = store_allocate_next,
	.allocate_ip = store_allocate_ip,
	.release_ip = store_release_ip,
	.release_owner = store_release_owner,
	.list = store_list,
	.pools = store_pools,
	.wait_durable = store_wait_durable,
};
