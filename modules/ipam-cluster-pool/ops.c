/* modules/ipam-cluster-pool/ops.c - the "ipam" interface (fibril/ipam.h):
 * addresses of the node CIDR from the shared allocator, one per family per
 * owner (an owner asking again gets what it holds), each made durable on
 * disk before it is returned. Also placing restored allocations when a
 * family's node CIDR becomes known. */
#include "cluster_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cp_fam *cp_fam_of(struct cp *cp, int family)
{
	if (family == 4)
		return &cp->fam[0];
	if (family == 6)
		return &cp->fam[1];
	return NULL;
}

static bool fam_ready(const struct cp_fam *f)
{
	return f->alloc && f->claim == CP_CLAIM_HELD;
}

static bool owner_ok(const char *owner)
{
	return !owner || strlen(owner) < FIBRIL_IPAM_OWNER_LEN;
}

static void fill_result(const struct cp_fam *f, const struct cp_alloc *a,
			struct fibril_ipam_result *out)
{
	struct fibril_ip gw;
	out->family = f->family;
	snprintf(out->address, sizeof(out->address), "%s", a->addr);
	fibril_cidr_format(&f->node, out->cidr, sizeof(out->cidr));
	fibril_ipalloc_router(f->alloc, &gw);
	fibril_ip_format(&gw, out->gateway, sizeof(out->gateway));
}

/* Records ip (already claimed in the allocator) for owner: file first,
 * then the table. On failure the caller gives the address back. */
static int commit(struct cp *cp, struct cp_fam *f, const struct fibril_ip *ip, const char *owner,
		  struct cp_alloc **out)
{
	struct cp_alloc *a = cp_alloc_new(ip, owner);
	if (!a)
		return -ENOMEM;
	int rc = cp_store_put(f, a->addr, a->owner);
	if (rc) {
		fibril_error(cp->m, "cannot record %s for '%s' in %s/%d: %s", a->addr, a->owner,
			     cp->base, f->family, strerror(-rc));
		cp_alloc_free(a);
		return rc;
	}
	a->placed = true;
	cp_table_insert(&cp->table, a);
	*out = a;
	return 0;
}

/* Forgets an allocation: file first (durably), then memory. */
static int drop(struct cp *cp, struct cp_fam *f, struct cp_alloc *a)
{
	int rc = cp_store_del(f, a->addr);
	if (rc) {
		fibril_error(cp->m, "cannot remove %s/%d/%s: %s", cp->base, f->family, a->addr,
			     strerror(-rc));
		return rc;
	}
	if (a->placed)
		fibril_ipalloc_release(f->alloc, &a->ip);
	else if (f->stale)
		f->stale--;
	cp_table_remove(&cp->table, a);
	cp_alloc_free(a);
	return 0;
}

/* One family's address for owner: the one it holds, or the next free one.
 * *fresh tells whether it was handed out now. */
static int next_one(struct cp *cp, struct cp_fam *f, const char *owner,
		    struct fibril_ipam_result *out, struct cp_alloc **fresh)
{
	*fresh = NULL;
	if (!fam_ready(f))
		return -EAGAIN;
	struct cp_alloc *a = cp_table_find_owner(&cp->table, owner, f->family);
	if (!a) {
		struct fibril_ip ip;
		int rc = fibril_ipalloc_next(f->alloc, &ip);
		if (rc)
			return rc;
		rc = commit(cp, f, &ip, owner, &a);
		if (rc) {
			fibril_ipalloc_release(f->alloc, &ip);
			return rc;
		}
		*fresh = a;
	}
	fill_result(f, a, out);
	return 0;
}

static bool result_ok(const struct fibril_ipam_result *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (out[i].sz < sizeof(out[i]))
			return false;
	return true;
}

static int allocate_next(void *ctx, int family, const char *owner,
			 struct fibril_ipam_result *out, size_t max)
{
	struct cp *cp = ctx;
	struct cp_fam *want[CP_NFAM];
	size_t n = 0;
	for (int i = 0; i < CP_NFAM; i++)
		if (cp->fam[i].enabled && (family == FIBRIL_IPAM_ANY || cp->fam[i].family == family))
			want[n++] = &cp->fam[i];
	if ((family != FIBRIL_IPAM_ANY && family != 4 && family != 6) || !owner_ok(owner))
		return -EINVAL;
	if (n == 0)
		return -EAFNOSUPPORT;
	if (!out || max < n || !result_ok(out, n))
		return -EINVAL;
	struct cp_alloc *fresh[CP_NFAM] = {0};
	for (size_t i = 0; i < n; i++) {
		int rc = next_one(cp, want[i], owner, &out[i], &fresh[i]);
		if (rc) { /* all or nothing: give back what this call handed out */
			for (size_t j = 0; j < i; j++)
				if (fresh[j])
					drop(cp, want[j], fresh[j]);
			return rc;
		}
	}
	return (int)n;
}

/* A given address for owner; idempotent for the same (named) owner. */
static int allocate_ip(void *ctx, const char *address, const char *owner,
		       struct fibril_ipam_result *out)
{
	struct cp *cp = ctx;
	struct fibril_ip ip;
	if (!address || fibril_ip_parse(address, &ip) || !owner_ok(owner) || !out ||
	    !result_ok(out, 1))
		return -EINVAL;
	struct cp_fam *f = cp_fam_of(cp, ip.family);
	if (!f || !f->enabled)
		return -EAFNOSUPPORT;
	if (!fam_ready(f))
		return -EAGAIN;
	struct cp_alloc *a = cp_table_find_ip(&cp->table, &ip);
	if (a && a->placed && owner && owner[0] && strcmp(a->owner, owner) == 0) {
		fill_result(f, a, out);
		return 0;
	}
	if (a)
		return a->placed ? -EEXIST : -ERANGE;
	if (!fibril_cidr_contains(&f->node, &ip))
		return -ERANGE;
	int rc = fibril_ipalloc_claim(f->alloc, &ip);
	if (rc)
		return rc;
	rc = commit(cp, f, &ip, owner, &a);
	if (rc) {
		fibril_ipalloc_release(f->alloc, &ip);
		return rc;
	}
	fill_result(f, a, out);
	return 0;
}

static int release_ip(void *ctx, const char *address)
{
	struct cp *cp = ctx;
	struct fibril_ip ip;
	if (!address || fibril_ip_parse(address, &ip))
		return -EINVAL;
	struct cp_fam *f = cp_fam_of(cp, ip.family);
	if (!f || !f->enabled)
		return -EAFNOSUPPORT;
	struct cp_alloc *a = cp_table_find_ip(&cp->table, &ip);
	if (a) /* placed, or stale (outside the node CIDR): both go */
		return drop(cp, f, a);
	if (f->have_node && !fibril_cidr_contains(&f->node, &ip))
		return -ERANGE;
	return -ENOENT;
}

static int release_owner(void *ctx, const char *owner)
{
	struct cp *cp = ctx;
	if (!owner || !owner[0] || !owner_ok(owner))
		return -EINVAL;
	size_t n;
	struct cp_alloc **v = cp_table_sorted(&cp->table, &n);
	if (!v)
		return -ENOMEM;
	int count = 0, rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i]->owner, owner) != 0)
			continue;
		int r = drop(cp, cp_fam_of(cp, v[i]->ip.family), v[i]);
		if (r)
			rc = r;
		else
			count++;
	}
	free(v);
	return rc ? rc : count;
}

/* Placed allocations, by family then address; returns how many. */
static int list(void *ctx, fibril_ipam_list_fn cb, void *ud)
{
	struct cp *cp = ctx;
	if (!cb)
		return -EINVAL;
	size_t n;
	struct cp_alloc **v = cp_table_sorted(&cp->table, &n);
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

static int pools(void *ctx, struct fibril_ipam_pool *out, size_t max)
{
	struct cp *cp = ctx;
	if (max && !out)
		return -EINVAL;
	size_t n = 0;
	for (int i = 0; i < CP_NFAM && n < max; i++) {
		struct cp_fam *f = &cp->fam[i];
		if (!f->enabled || !f->alloc || f->claim != CP_CLAIM_HELD)
			continue;
		if (out[n].sz < sizeof(out[n]))
			return -EINVAL;
		struct fibril_ip gw;
		out[n].family = f->family;
		fibril_cidr_format(&f->node, out[n].cidr, sizeof(out[n].cidr));
		fibril_ipalloc_router(f->alloc, &gw);
		fibril_ip_format(&gw, out[n].gateway, sizeof(out[n].gateway));
		out[n].used = fibril_ipalloc_used(f->alloc);
		out[n].total = fibril_ipalloc_capacity(f->alloc);
		n++;
	}
	return (int)n;
}

void cp_ops_fill(struct cp *cp)
{
	cp->ops = (struct fibril_ipam_ops){
		.hdr = {.sz = sizeof(cp->ops), .version = FIBRIL_IPAM_VERSION},
		.allocate_next = allocate_next,
		.allocate_ip = allocate_ip,
		.release_ip = release_ip,
		.release_owner = release_owner,
		.list = list,
		.pools = pools,
	};
}

/* Puts each restored allocation of the family into the allocator; those
 * outside the node CIDR (or on a reserved address) stay as stale. */
static void place_all(struct cp *cp, struct cp_fam *f)
{
	size_t n;
	struct cp_alloc **v = cp_table_sorted(&cp->table, &n);
	char c[FIBRIL_IPAM_CIDR_LEN];
	fibril_cidr_format(&f->node, c, sizeof(c));
	f->stale = 0;
	for (size_t i = 0; v && i < n; i++) {
		struct cp_alloc *a = v[i];
		if (a->ip.family != f->family)
			continue;
		a->placed = fibril_ipalloc_claim(f->alloc, &a->ip) == 0;
		if (a->placed)
			continue;
		if (f->stale++ < 5)
			fibril_warn(cp->m, "allocation %s of '%s' is outside node CIDR %s: kept in "
				    "%s/%d (release it to remove it)", a->addr, a->owner, c, cp->base,
				    f->family);
	}
	if (f->stale > 5)
		fibril_warn(cp->m, "%zu allocations in all are outside node CIDR %s", f->stale, c);
	free(v);
}

int cp_fam_set_node(struct cp_fam *f, const struct fibril_cidr *cidr)
{
	struct cp *cp = f->cp;
	struct fibril_ipalloc_opts opts = {.sz = sizeof(opts), .strategy = cp->strategy};
	struct fibril_ipalloc *a = NULL;
	int rc = fibril_ipalloc_new(cidr, &opts, &a);
	if (rc)
		return rc;
	fibril_ipalloc_free(f->alloc);
	f->alloc = a;
	f->node = *cidr;
	f->have_node = true;
	for (size_t i = 0; i < cp->table.nbuckets; i++)
		for (struct cp_alloc *e = cp->table.by_ip[i]; e; e = e->next_ip)
			if (e->ip.family == f->family)
				e->placed = false;
	place_all(cp, f);
	return 0;
}
