/* modules/policy/program.c - bringing the datapath to the repository:
 * which endpoints a change can affect (marked dirty: the subjects of a
 * rule that came, went or whose peer selectors gained or lost an
 * identity), resolving them (pol_recompute) and writing each one's
 * difference into the policy map: new and changed entries first, then the
 * enforcement flags, then removals, so no window opens more than either
 * the old or the new policy allows. At start, the entries the last run
 * left in the map become the endpoints' entries in place (pol_adopt_map),
 * so the first update writes only differences. */
#include "policy_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void to_dp(const struct pol_ep *ep, const struct pol_entry *e,
		  struct fibril_datapath_policy_entry *d)
{
	memset(d, 0, sizeof(*d));
	d->sz = sizeof(*d);
	d->endpoint_id = ep->id;
	d->direction = e->dir;
	d->proto = e->proto;
	d->identity = e->identity;
	d->port = e->port;
	d->port_bits = e->bits;
	d->deny = e->deny;
	d->rule_id = e->rule;
}

void pol_dp_write(struct pol_state *st, const struct pol_ep *ep, const struct pol_entry *e,
		  bool remove)
{
	struct fibril_datapath_policy_entry d;
	char err[256] = "";
	to_dp(ep, e, &d);
	int rc = remove ? st->dp->policy_remove(st->dp_ctx, &d, err, sizeof(err))
			: st->dp->policy_upsert(st->dp_ctx, &d, err, sizeof(err));
	if (rc < 0) {
		st->map_errors++;
		snprintf(st->last_error, sizeof(st->last_error), "endpoint %u: %s", ep->id, err);
		fibril_warn(st->m, "%s", st->last_error);
		return;
	}
	if (remove)
		st->map_removes++;
	else
		st->map_writes++;
}

void pol_dp_enforce(struct pol_state *st, struct pol_ep *ep, bool ingress, bool egress)
{
	char err[256] = "";
	if (st->dp->policy_enforce(st->dp_ctx, ep->id, ingress, egress, (uint32_t)st->revision, err,
				   sizeof(err)) < 0) {
		st->map_errors++;
		snprintf(st->last_error, sizeof(st->last_error), "endpoint %u: %s", ep->id, err);
		fibril_warn(st->m, "%s", st->last_error);
	}
	ep->ingress = ingress;
	ep->egress = egress;
}

/* Bring one endpoint's map entries from what is in place to vec: new and
 * changed entries first, then enforcement, then removals. */
static void apply(struct pol_state *st, struct pol_ep *ep, struct entry_vec *vec, bool ingress,
		  bool egress)
{
	size_t i = 0, j = 0;
	bool changed = false;
	while (j < vec->n) {
		int c = i < ep->nentries ? pol_entry_cmp(&ep->entries[i], &vec->v[j]) : 1;
		if (i < ep->nentries && pol_entry_same_key(&ep->entries[i], &vec->v[j])) {
			if (ep->entries[i].deny != vec->v[j].deny || ep->entries[i].rule != vec->v[j].rule) {
				pol_dp_write(st, ep, &vec->v[j], false);
				changed = true;
			}
			i++, j++;
		} else if (c < 0) {
			i++; /* removed below */
		} else {
			pol_dp_write(st, ep, &vec->v[j], false);
			changed = true;
			j++;
		}
	}
	if (ingress != ep->ingress || egress != ep->egress || changed || ep->revision == 0)
		pol_dp_enforce(st, ep, ingress, egress);
	ep->revision = (uint32_t)st->revision;
	/* removals: what is in place and not in vec */
	for (i = 0, j = 0; i < ep->nentries; i++) {
		while (j < vec->n && pol_entry_cmp(&vec->v[j], &ep->entries[i]) < 0 &&
		       !pol_entry_same_key(&vec->v[j], &ep->entries[i]))
			j++;
		if (j < vec->n && pol_entry_same_key(&vec->v[j], &ep->entries[i]))
			continue;
		pol_dp_write(st, ep, &ep->entries[i], true);
	}
	free(ep->entries);
	ep->entries = vec->v;
	ep->nentries = vec->n;
	vec->v = NULL;
	vec->n = vec->cap = 0;
}

/* Whether a rule selects an endpoint. */
static bool rule_selects(const struct pol_policy *pol, const struct pol_rule *rule,
			 const struct pol_ep *ep)
{
	return ep->subject_labels && pol_selector_match(&rule->subject, ep->subject_labels, pol->ns);
}

void pol_mark_subjects(struct pol_state *st, const struct pol_policy *pol, const struct pol_rule *rule)
{
	for (size_t i = 1; i < st->ep_hi; i++)
		if (st->eps[i] && !st->eps[i]->dirty && rule_selects(pol, rule, st->eps[i]))
			st->eps[i]->dirty = true;
}

/* After endpoints or cluster identities joined or left the cache (generation st->sel_gen): the
 * endpoints selected by a rule whose peers changed are resolved again.
 * Peers that look at the endpoints themselves rather than through a
 * selector (a NetworkPolicy ipBlock's pods, the cluster entity, a named
 * port on egress) count as changed whenever an endpoint did. */
void pol_mark_dependents(struct pol_state *st)
{
	for (size_t p = 0; p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		for (size_t r = 0; pol->admitted && r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			bool affected = false;
			for (size_t k = 0; k < rule->npeers && !affected; k++) {
				const struct pol_peer *peer = &rule->peers[k];
				affected = (pol->kind == POL_KIND_KNP && peer->ncidrs) ||
					   (peer->entities & POL_ENT_CLUSTER);
				for (size_t e = 0; e < peer->nendpoints && !affected; e++) {
					const struct sel_entry *c = peer->endpoints[e].cached;
					affected = !c || c->changed == st->sel_gen;
				}
				for (size_t q = 0; q < peer->nports && !affected; q++)
					affected = !peer->ingress && peer->ports[q].name;
			}
			if (affected)
				pol_mark_subjects(st, pol, rule);
		}
	}
}

/* Resolve again the endpoints a change affects (every one after a start or
 * when the CIDR identities change) and write the differences. The others
 * enforce the new revision already: their policy is the same. */
void pol_recompute(struct pol_state *st)
{
	if (!st->started || !st->dp)
		return;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t p = 0; p < st->npols; p++)
		if (!st->pols[p]->admitted)
			pol_admit(st, st->pols[p]);
	uint64_t resolved = st->resolutions;
	bool full = cidrs_collect(st) || st->full;
	if (full)
		st->recomputes++;
	else
		st->incrementals++;
	st->full = false;
	for (size_t i = 1; i < st->ep_hi; i++) {
		struct pol_ep *ep = st->eps[i];
		if (!ep)
			continue;
		if (!full && !ep->dirty) {
			ep->revision = (uint32_t)st->revision;
			continue;
		}
		ep->dirty = false;
		st->resolutions++;
		struct entry_vec vec = {0};
		bool ingress, egress;
		pol_resolve(st, ep, &vec, &ingress, &egress);
		if (vec.oom) {
			free(vec.v);
			fibril_error(st->m, "endpoint %u: out of memory resolving its policy", ep->id);
			continue;
		}
		apply(st, ep, &vec, ingress, egress);
		free(vec.v);
	}
	cidrs_release(st);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	st->last_update_us = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000);
	st->last_update_eps = st->resolutions - resolved;
	if (full)
		fibril_info(st->m, "resolved %llu endpoints against %zu policies in %.1f ms",
			    (unsigned long long)st->last_update_eps, st->npols, st->last_update_us / 1e3);
}

/* What the last run left in the map becomes the endpoints' entries in
 * place (so the first recompute writes only differences, with no gap);
 * entries of endpoints that are gone are removed. */
struct adopt_ctx {
	struct pol_state *st;
	struct entry_vec stale;
	uint16_t *stale_ep;
};

static int adopt_entry(const struct fibril_datapath_policy_entry *e, void *ud)
{
	struct adopt_ctx *a = ud;
	/* an entry of a map older than rule IDs reads as rule 0 (unknown):
	 * the first recompute rewrites it with its rule */
	struct pol_entry pe = {.identity = e->identity, .dir = e->direction, .proto = e->proto,
			       .bits = e->port_bits, .deny = e->deny, .port = e->port,
			       .rule = e->sz >= FIBRIL_OFFSETOFEND(struct fibril_datapath_policy_entry,
								   rule_id)
					       ? e->rule_id
					       : 0};
	struct pol_ep *ep = a->st->eps[e->endpoint_id];
	if (!ep) {
		size_t n = a->stale.n;
		pol_entry_vec_add(&a->stale, pe);
		if (a->stale.n > n) {
			uint16_t *ids = realloc(a->stale_ep, a->stale.n * sizeof(*ids));
			if (!ids) {
				a->stale.n = n;
				return 0;
			}
			a->stale_ep = ids;
			ids[n] = e->endpoint_id;
		}
		return 0;
	}
	struct pol_entry *v = realloc(ep->entries, (ep->nentries + 1) * sizeof(*v));
	if (!v)
		return 0;
	ep->entries = v;
	ep->entries[ep->nentries++] = pe;
	return 0;
}

void pol_adopt_map(struct pol_state *st)
{
	struct adopt_ctx a = {.st = st};
	if (st->dp->policy_list(st->dp_ctx, adopt_entry, &a) < 0)
		fibril_warn(st->m, "cannot read the policy map in place");
	for (size_t i = 1; i < st->ep_hi; i++)
		if (st->eps[i] && st->eps[i]->nentries)
			qsort(st->eps[i]->entries, st->eps[i]->nentries, sizeof(struct pol_entry),
			      pol_entry_cmp);
	for (size_t i = 0; i < a.stale.n; i++) {
		struct pol_ep gone = {.id = a.stale_ep[i]};
		pol_dp_write(st, &gone, &a.stale.v[i], true);
	}
	free(a.stale.v);
	free(a.stale_ep);
}
