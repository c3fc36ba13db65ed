/* modules/policy/selector_cache.c - the selector cache: each distinct
 * label selector of the repository (rule subjects and peers, keyed by
 * kubectl's form and the namespace it is limited to, shared and counted by
 * the rules that use it) with the identities it selects now and how many
 * holders of each (local endpoints, the cluster's identities). A holder
 * that comes, changes or goes is tested against each cached selector once
 * (sel_cache_ep, sel_cache_rid: -1 with its old labels, +1 with its new);
 * a selector whose identity set changed records the update generation
 * (st->sel_gen) that pol_mark_dependents compares. Also GET
 * /v1/policy/selectors. */
#include "policy_state.h"

#include "grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* kubectl's form: "k=v", "k in (a,b)", "k notin (a)", "k", "!k"; "{}" when empty,
 * then the namespace the policy limits it to. */
static size_t selector_text(const struct pol_selector *sel, const char *ns, char *out, size_t len)
{
	size_t n = 0;
	out[0] = '\0';
#define PUT(...)                                                                  \
	do {                                                                      \
		int w = snprintf(out + n, n < len ? len - n : 0, __VA_ARGS__);   \
		n += w > 0 ? (size_t)w : 0;                                       \
	} while (0)
	for (size_t i = 0; i < sel->nexprs; i++) {
		const struct pol_expr *e = &sel->exprs[i];
		PUT("%s", i ? "," : "");
		if (e->op == POL_OP_EXISTS)
			PUT("%s", e->key);
		else if (e->op == POL_OP_NOT_EXISTS)
			PUT("!%s", e->key);
		else if (e->op == POL_OP_IN && e->nvalues == 1)
			PUT("%s=%s", e->key, e->values[0]);
		else {
			PUT("%s %s (", e->key, e->op == POL_OP_IN ? "in" : "notin");
			for (size_t j = 0; j < e->nvalues; j++)
				PUT("%s%s", j ? "," : "", e->values[j]);
			PUT(")");
		}
	}
	if (!sel->nexprs)
		PUT("{}");
	if (ns && ns[0] && !sel->any_namespace)
		PUT(" in namespace %s", ns);
#undef PUT
	if (n >= len && len > 4)
		memcpy(out + len - 4, "...", 4);
	return n;
}

static char *sel_key(const struct pol_selector *sel, const char *ns)
{
	char small[256];
	size_t n = selector_text(sel, ns, small, sizeof(small));
	char *k = malloc(n + 1);
	if (k)
		selector_text(sel, ns, k, n + 1);
	return k;
}

static bool sel_copy(struct pol_selector *d, const struct pol_selector *s)
{
	memset(d, 0, sizeof(*d));
	d->any_namespace = s->any_namespace;
	if (!s->nexprs)
		return true;
	if (!(d->exprs = calloc(s->nexprs, sizeof(*d->exprs))))
		return false;
	for (size_t i = 0; i < s->nexprs; i++, d->nexprs++) {
		struct pol_expr *de = &d->exprs[i];
		const struct pol_expr *se = &s->exprs[i];
		de->op = se->op;
		if (!(de->key = strdup(se->key)) ||
		    (se->nvalues && !(de->values = calloc(se->nvalues, sizeof(char *))))) {
			d->nexprs++;
			pol_selector_free(d);
			return false;
		}
		for (size_t j = 0; j < se->nvalues; j++, de->nvalues++)
			if (!(de->values[j] = strdup(se->values[j]))) {
				d->nexprs++;
				pol_selector_free(d);
				return false;
			}
	}
	return true;
}

static void sel_entry_free(struct sel_entry *e)
{
	if (!e)
		return;
	free(e->key);
	pol_selector_free(&e->sel);
	free(e->ids);
	free(e);
}

/* One more (delta 1) or one fewer (-1) local endpoint of identity id
 * matches e; its identity set changes when the first comes or the last goes. */
static void sel_ids_adjust(struct pol_state *st, struct sel_entry *e, uint32_t id, int delta)
{
	size_t lo = pol_u32_lower_bound(e->ids, e->nids, sizeof(*e->ids), offsetof(struct sel_id, identity), id);
	bool found = lo < e->nids && e->ids[lo].identity == id;
	if (delta > 0) {
		if (found) {
			e->ids[lo].endpoints++;
			return;
		}
		struct sel_id *n = mod_grow(e->ids, e->nids, &e->cap, sizeof(*n), 4);
		if (!n)
			return;
		e->ids = n;
		memmove(&e->ids[lo + 1], &e->ids[lo], (e->nids - lo) * sizeof(*e->ids));
		e->ids[lo] = (struct sel_id){.identity = id, .endpoints = 1};
		e->nids++;
		e->changed = st->sel_gen;
	} else if (found && --e->ids[lo].endpoints == 0) {
		memmove(&e->ids[lo], &e->ids[lo + 1], (e->nids - lo - 1) * sizeof(*e->ids));
		e->nids--;
		e->changed = st->sel_gen;
	}
}

/* A holder of identity id matched with match_labels (a local endpoint, or
 * a cluster identity other nodes' pods may hold: each counts once) joins
 * (delta 1) or leaves (-1) the cache. */
static void sel_cache_labels(struct pol_state *st, const char *match_labels, uint32_t id, int delta)
{
	if (!match_labels)
		return;
	for (size_t i = 0; i < st->nsels; i++)
		if (pol_selector_match(&st->sels[i]->sel, match_labels, st->sels[i]->ns))
			sel_ids_adjust(st, st->sels[i], id, delta);
}

void sel_cache_ep(struct pol_state *st, const struct pol_ep *ep, int delta)
{
	sel_cache_labels(st, ep->match_labels, ep->identity, delta);
}

void sel_cache_rid(struct pol_state *st, const struct pol_rid *r, int delta)
{
	sel_cache_labels(st, r->match_labels, r->identity, delta);
}

void sel_register(struct pol_state *st, struct pol_selector *s, const char *ns)
{
	char *key = sel_key(s, ns);
	if (!key)
		return;
	for (size_t i = 0; i < st->nsels; i++)
		if (!strcmp(st->sels[i]->key, key)) {
			free(key);
			st->sels[i]->users++;
			s->cached = st->sels[i];
			return;
		}
	struct sel_entry *e = calloc(1, sizeof(*e));
	struct sel_entry **v = realloc(st->sels, (st->nsels + 1) * sizeof(*v));
	if (v)
		st->sels = v;
	if (!e || !v || !sel_copy(&e->sel, s)) {
		free(key);
		free(e);
		return; /* this selector is matched at each resolution instead */
	}
	e->key = key;
	snprintf(e->ns, sizeof(e->ns), "%s", ns);
	e->users = 1;
	for (size_t i = 1; i < st->ep_hi; i++)
		if (st->eps[i] && st->eps[i]->match_labels &&
		    pol_selector_match(&e->sel, st->eps[i]->match_labels, e->ns))
			sel_ids_adjust(st, e, st->eps[i]->identity, 1);
	for (size_t i = 0; i < st->nrids; i++)
		if (st->rids[i].match_labels && pol_selector_match(&e->sel, st->rids[i].match_labels, e->ns))
			sel_ids_adjust(st, e, st->rids[i].identity, 1);
	st->sels[st->nsels++] = e;
	s->cached = e;
}

void sel_unregister(struct pol_state *st, struct pol_selector *s)
{
	struct sel_entry *e = s->cached;
	s->cached = NULL;
	if (!e || --e->users)
		return;
	for (size_t i = 0; i < st->nsels; i++)
		if (st->sels[i] == e) {
			st->sels[i] = st->sels[--st->nsels];
			break;
		}
	sel_entry_free(e);
}

void sel_cache_clear(struct pol_state *st)
{
	for (size_t i = 0; i < st->nsels; i++)
		sel_entry_free(st->sels[i]);
	free(st->sels);
	st->sels = NULL;
	st->nsels = 0;
}

static void selector_add(struct pol_state *st, struct json_object *arr, const struct pol_selector *sel,
			 const char *ns, const char *user)
{
	char text[1024];
	selector_text(sel, ns, text, sizeof(text));
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *o = json_object_array_get_idx(arr, i), *t, *users;
		json_object_object_get_ex(o, "selector", &t);
		if (strcmp(json_object_get_string(t), text))
			continue;
		json_object_object_get_ex(o, "users", &users);
		bool seen = false;
		for (size_t j = 0; j < json_object_array_length(users); j++)
			seen = seen || !strcmp(json_object_get_string(json_object_array_get_idx(users, j)), user);
		if (!seen)
			json_object_array_add(users, json_object_new_string(user));
		return;
	}
	struct json_object *o = json_object_new_object(), *users = json_object_new_array();
	struct ids ids = {0};
	const struct sel_entry *c = sel->cached;
	for (size_t i = 0; c && i < c->nids; i++)
		pol_ids_add(&ids, c->ids[i].identity);
	for (size_t i = 1; !c && i < st->ep_hi; i++)
		if (st->eps[i] && pol_selector_match(sel, st->eps[i]->match_labels, ns))
			pol_ids_add(&ids, st->eps[i]->identity);
	for (size_t i = 0; i < st->nrids; i++)
		if (pol_selector_match(sel, st->rids[i].match_labels, ns))
			pol_ids_add(&ids, st->rids[i].identity);
	struct json_object *idarr = json_object_new_array();
	for (size_t i = 0; i < ids.n; i++)
		json_object_array_add(idarr, json_object_new_int64(ids.v[i]));
	free(ids.v);
	json_object_array_add(users, json_object_new_string(user));
	json_object_object_add(o, "selector", json_object_new_string(text));
	json_object_object_add(o, "identities", idarr);
	json_object_object_add(o, "users", users);
	json_object_array_add(arr, o);
}

void pol_get_selectors(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct pol_state *st = ud;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	for (size_t p = 0; p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		char user[POL_NS_MAX + POL_NAME_MAX + 48];
		snprintf(user, sizeof(user), "%s %s%s%s", pol_kind_name(pol->kind), pol->ns,
			 pol->ns[0] ? "/" : "", pol->name);
		for (size_t r = 0; r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			selector_add(st, arr, &rule->subject, pol->ns, user);
			for (size_t k = 0; k < rule->npeers; k++)
				for (size_t e = 0; e < rule->peers[k].nendpoints; e++)
					selector_add(st, arr, &rule->peers[k].endpoints[e], pol->ns, user);
		}
	}
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "selectors", arr);
	pol_reply(resp, 200, o);
}
