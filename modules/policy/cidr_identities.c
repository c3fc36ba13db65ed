/* modules/policy/cidr_identities.c - the local CIDR identities (from
 * POL_CIDR_IDENTITY_BASE, 2^24, as Cilium): each prefix (and except) the
 * policies name gets one, the lowest free number (a released one is used
 * again), written to the datapath's ipcache when the prefix first appears
 * (/0 is world already) as a claim of source CIDR_POLICY: the datapath's
 * ipcache keeps a node's, a pod's or an endpoint's entry over it, and the
 * release takes only that claim (<fibril/datapath.h> interface 5; an
 * older datapath: the version-1 calls). cidrs_admit caps the prefixes one
 * namespace's policies may name ([policy] cidr-identities-per-namespace):
 * a policy that would pass it is refused whole. Around an update, cidrs_collect marks the prefixes in use and
 * says whether the set changed (then every endpoint is resolved again);
 * cidrs_release, once the entries are in place, removes the others. Also
 * the prefix arithmetic the resolution and the trace share. */
#include "policy_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool cidr_eq(const struct pol_cidr *a, const struct pol_cidr *b)
{
	return a->family == b->family && a->plen == b->plen && !memcmp(a->addr, b->addr, 16);
}

/* Whether an address (family 4 or 6, network order) is inside c. */
bool pol_addr_in(int family, const void *addr, const struct pol_cidr *c)
{
	struct pol_cidr host = {.family = family, .plen = family == 4 ? 32 : 128};
	memcpy(host.addr, addr, family == 4 ? 4 : 16);
	return pol_cidr_within(&host, c);
}

/* the ipcache claim of one prefix, put or taken */
static int cidr_dp(struct pol_state *st, const struct pol_cidr *c, uint32_t identity, bool put,
		   char *err, size_t len)
{
	if (!st->dp)
		return 0;
	if (!FIBRIL_SERVICE_HAS(st->dp, ipcache_remove_entry) || !st->dp->ipcache_remove_entry)
		return put ? st->dp->ipcache_upsert(st->dp_ctx, c->family, c->addr, c->plen, identity,
						    err, len)
			   : st->dp->ipcache_remove(st->dp_ctx, c->family, c->addr, c->plen, err, len);
	struct fibril_datapath_ipcache_entry e = {.sz = sizeof(e), .family = (uint8_t)c->family,
						  .prefix_len = (uint8_t)c->plen, .identity = identity,
						  .source = FIBRIL_DATAPATH_IPCACHE_SOURCE_CIDR_POLICY};
	memcpy(e.addr, c->addr, sizeof(e.addr));
	return put ? st->dp->ipcache_upsert_entry(st->dp_ctx, &e, err, len)
		   : st->dp->ipcache_remove_entry(st->dp_ctx, &e, err, len);
}

/* a released CIDR identity, else the next never handed out */
static uint32_t cidr_free_identity(struct pol_state *st)
{
	if (st->nfree_cidr_ids)
		return st->free_cidr_ids[--st->nfree_cidr_ids];
	return POL_CIDR_IDENTITY_BASE + st->next_cidr_id++;
}

/* a released identity, to be handed out again (kept when out of memory:
 * a number lost, never one held twice) */
static void cidr_identity_release(struct pol_state *st, uint32_t identity)
{
	if (st->nfree_cidr_ids == st->free_cidr_cap) {
		size_t cap = st->free_cidr_cap ? st->free_cidr_cap * 2 : 64;
		uint32_t *n = realloc(st->free_cidr_ids, cap * sizeof(*n));
		if (!n)
			return;
		st->free_cidr_ids = n;
		st->free_cidr_cap = cap;
	}
	st->free_cidr_ids[st->nfree_cidr_ids++] = identity;
}

/* Mark (or allocate, writing the ipcache) the identity of one prefix. */
static bool cidr_use(struct pol_state *st, const struct pol_cidr *c)
{
	if (c->plen == 0)
		return false; /* 0.0.0.0/0 and ::/0 are world already */
	for (size_t i = 0; i < st->ncidrs; i++)
		if (cidr_eq(&st->cidrs[i].cidr, c)) {
			st->cidrs[i].used = true;
			return false;
		}
	struct pol_cidr_id *n = realloc(st->cidrs, (st->ncidrs + 1) * sizeof(*n));
	if (!n)
		return false;
	st->cidrs = n;
	uint32_t identity = cidr_free_identity(st);
	struct pol_cidr_id *e = &st->cidrs[st->ncidrs++];
	e->cidr = *c;
	e->identity = identity;
	e->used = true;
	char err[256] = "";
	if (cidr_dp(st, c, e->identity, true, err, sizeof(err)) < 0) {
		st->map_errors++;
		fibril_warn(st->m, "ipcache: %s", err);
	}
	return true;
}

/* Mark the prefixes the policies name; true when the set of CIDR
 * identities changes (one allocated now, or one no longer used). */
bool cidrs_collect(struct pol_state *st)
{
	bool changed = false;
	for (size_t i = 0; i < st->ncidrs; i++)
		st->cidrs[i].used = false;
	for (size_t p = 0; p < st->npols; p++)
		for (size_t r = 0; r < st->pols[p]->nrules; r++) {
			const struct pol_rule *rule = &st->pols[p]->rules[r];
			for (size_t k = 0; k < rule->npeers; k++)
				for (size_t c = 0; c < rule->peers[k].ncidrs; c++) {
					const struct pol_cidr_rule *cr = &rule->peers[k].cidrs[c];
					changed |= cidr_use(st, &cr->cidr);
					for (size_t e = 0; e < cr->nexcept; e++)
						changed |= cidr_use(st, &cr->except[e]);
				}
		}
	for (size_t i = 0; i < st->ncidrs; i++)
		changed = changed || !st->cidrs[i].used;
	return changed;
}

/* After the entries are in place: forget the prefixes no policy names. */
void cidrs_release(struct pol_state *st)
{
	size_t o = 0;
	for (size_t i = 0; i < st->ncidrs; i++) {
		if (st->cidrs[i].used) {
			st->cidrs[o++] = st->cidrs[i];
			continue;
		}
		char err[256] = "";
		const struct pol_cidr *c = &st->cidrs[i].cidr;
		if (cidr_dp(st, c, st->cidrs[i].identity, false, err, sizeof(err)) < 0) {
			st->map_errors++;
			fibril_warn(st->m, "ipcache: %s", err);
		}
		cidr_identity_release(st, st->cidrs[i].identity);
	}
	st->ncidrs = o;
}

/* Add c to the distinct prefixes in *set (at most cap + 1 kept); false
 * once there are more than cap. */
static bool count_prefix(const struct pol_cidr *c, struct pol_cidr *set, size_t *n, size_t cap)
{
	if (c->plen == 0)
		return true; /* world: no identity of its own */
	for (size_t i = 0; i < *n; i++)
		if (cidr_eq(&set[i], c))
			return true;
	set[(*n)++] = *c;
	return *n <= cap;
}

static bool count_policy(const struct pol_policy *p, struct pol_cidr *set, size_t *n, size_t cap)
{
	for (size_t r = 0; r < p->nrules; r++)
		for (size_t k = 0; k < p->rules[r].npeers; k++)
			for (size_t c = 0; c < p->rules[r].peers[k].ncidrs; c++) {
				const struct pol_cidr_rule *cr = &p->rules[r].peers[k].cidrs[c];
				if (!count_prefix(&cr->cidr, set, n, cap))
					return false;
				for (size_t e = 0; e < cr->nexcept; e++)
					if (!count_prefix(&cr->except[e], set, n, cap))
						return false;
			}
	return true;
}

static bool same_policy(const struct pol_policy *a, const struct pol_policy *b)
{
	return (a->kind == POL_KIND_KNP) == (b->kind == POL_KIND_KNP) && a->from_k8s == b->from_k8s &&
	       !strcmp(a->name, b->name) && !strcmp(a->ns, b->ns);
}

int cidrs_admit(struct pol_state *st, struct pol_policy *const *add, size_t nadd, char *err,
		size_t len)
{
	size_t cap = (size_t)fibril_config_int(st->m, "cidr-identities-per-namespace");
	struct pol_cidr *set = malloc((cap + 1) * sizeof(*set));
	if (!set) {
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	int rc = 0;
	for (size_t a = 0; a < nadd && !rc; a++) {
		const char *ns = add[a]->ns;
		size_t n = 0;
		bool ok = true;
		/* the namespace's policies as they would be: the ones kept ... */
		for (size_t p = 0; p < st->npols && ok; p++) {
			bool replaced = false;
			for (size_t b = 0; b < nadd && !replaced; b++)
				replaced = same_policy(st->pols[p], add[b]);
			if (!replaced && !strcmp(st->pols[p]->ns, ns))
				ok = count_policy(st->pols[p], set, &n, cap);
		}
		/* ... and the new ones */
		for (size_t b = 0; b < nadd && ok; b++)
			if (!strcmp(add[b]->ns, ns))
				ok = count_policy(add[b], set, &n, cap);
		if (!ok) {
			snprintf(err, len, "%s%s%s: namespace \"%s\" would name more than %zu CIDR prefixes "
				 "([policy] cidr-identities-per-namespace); refused", ns, ns[0] ? "/" : "",
				 add[a]->name, ns, cap);
			rc = -ENOSPC;
		}
	}
	free(set);
	return rc;
}
