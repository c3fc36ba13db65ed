/* modules/policy/cluster_identities.c - the identities of the whole
 * cluster, which other nodes' pods may hold (the endpoint module's
 * identity-added/-deleted events): st->rids, sorted by number, each with
 * its labels and what it is matched with (they and its namespace's). Peer
 * selectors match them as they match local endpoints; a change goes
 * through the selector cache, so only the endpoints of the rules whose
 * peers it affects are resolved again. */
#include "policy_state.h"

#include "grow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t rid_at(const struct pol_state *st, uint32_t n)
{
	return pol_u32_lower_bound(st->rids, st->nrids, sizeof(*st->rids),
				   offsetof(struct pol_rid, identity), n);
}

/* Rebuild what identity i is matched with; true when it changed. */
bool rid_refresh(struct pol_state *st, struct pol_rid *r)
{
	char ns[POL_NS_MAX];
	char *ml = pol_match_labels_of(st, r->labels, pol_labels_namespace(r->labels, ns, sizeof(ns)));
	if (!ml)
		return false;
	bool changed = !r->match_labels || strcmp(ml, r->match_labels);
	free(r->match_labels);
	r->match_labels = ml;
	return changed;
}

void rids_free(struct pol_state *st)
{
	for (size_t i = 0; i < st->nrids; i++) {
		free(st->rids[i].labels);
		free(st->rids[i].match_labels);
	}
	free(st->rids);
	st->rids = NULL;
	st->nrids = st->rids_cap = 0;
}

/* Identity n has labels now (NULL: it is gone); true when that changed. */
static bool rid_set(struct pol_state *st, uint32_t n, const char *labels)
{
	size_t i = rid_at(st, n);
	bool found = i < st->nrids && st->rids[i].identity == n;
	if (!labels) {
		if (!found)
			return false;
		free(st->rids[i].labels);
		free(st->rids[i].match_labels);
		memmove(&st->rids[i], &st->rids[i + 1], (st->nrids - i - 1) * sizeof(*st->rids));
		st->nrids--;
		return true;
	}
	if (found && !strcmp(st->rids[i].labels, labels))
		return false;
	char *l = strdup(labels);
	if (!l)
		return false;
	if (!found) {
		struct pol_rid *v = mod_grow(st->rids, st->nrids, &st->rids_cap, sizeof(*v), 64);
		if (!v) {
			free(l);
			return false;
		}
		st->rids = v;
		memmove(&st->rids[i + 1], &st->rids[i], (st->nrids - i) * sizeof(*st->rids));
		st->rids[i] = (struct pol_rid){.identity = n};
		st->nrids++;
	}
	free(st->rids[i].labels);
	st->rids[i].labels = l;
	rid_refresh(st, &st->rids[i]);
	return true;
}

int pol_on_identity_event(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	const struct fibril_identity_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) || e->sz > ev->payload_len ||
	    (e->labels && (e->labels < e->sz || e->labels >= ev->payload_len ||
			   memchr((const char *)e + e->labels, '\0', ev->payload_len - e->labels) == NULL)))
		return -EINVAL;
	bool added = !strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED);
	const char *labels = added ? FIBRIL_IDENTITY_LABELS(e) : NULL;
	size_t i = rid_at(st, e->identity);
	bool found = i < st->nrids && st->rids[i].identity == e->identity;
	if ((!found && !labels) || (found && labels && !strcmp(st->rids[i].labels, labels)))
		return 0; /* nothing changes */
	/* through the selector cache: only the selectors its old or new labels
	 * match change, only the endpoints of rules using them are resolved */
	st->sel_gen++;
	st->rid_updates++;
	if (found)
		sel_cache_rid(st, &st->rids[i], -1);
	rid_set(st, e->identity, labels);
	i = rid_at(st, e->identity);
	if (i < st->nrids && st->rids[i].identity == e->identity)
		sel_cache_rid(st, &st->rids[i], 1);
	pol_mark_dependents(st);
	pol_recompute(st);
	return 0;
}
