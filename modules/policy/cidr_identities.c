/* modules/policy/cidr_identities.c - the local CIDR identities (from
 * POL_CIDR_IDENTITY_BASE, 2^24, as Cilium): each prefix (and except) the
 * policies name gets one, handed out in increasing order and written to
 * the datapath's ipcache when the prefix first appears (/0 is world
 * already). Around an update, cidrs_collect marks the prefixes in use and
 * says whether the set changed (then every endpoint is resolved again);
 * cidrs_release, once the entries are in place, removes the others. Also
 * the prefix arithmetic the resolution and the trace share. */
#include "policy_state.h"

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
	struct pol_cidr_id *e = &st->cidrs[st->ncidrs++];
	e->cidr = *c;
	e->identity = POL_CIDR_IDENTITY_BASE + st->next_cidr_id++;
	e->used = true;
	char err[256] = "";
	if (st->dp && st->dp->ipcache_upsert(st->dp_ctx, c->family, c->addr, c->plen, e->identity,
					     err, sizeof(err)) < 0) {
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
		if (st->dp && st->dp->ipcache_remove(st->dp_ctx, c->family, c->addr, c->plen, err,
						     sizeof(err)) < 0) {
			st->map_errors++;
			fibril_warn(st->m, "ipcache: %s", err);
		}
	}
	st->ncidrs = o;
}
