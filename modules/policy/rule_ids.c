/* modules/policy/rule_ids.c - the stable ID of each rule (an element of a
 * policy's ingress / egress / ingressDeny / egressDeny), known by the
 * policy's source, kind, namespace and name, the spec, the section and the
 * index (struct pol_rule_rec). The table st->rules is sorted by ID; IDs
 * are handed out in increasing order and never reused, counted by the
 * peers that carry them, and saved with the policies (state.c), so a rule
 * keeps its ID across updates of its policy and across restarts. */
#include "policy_state.h"

#include "grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

const char *pol_section_name(bool ingress, bool deny)
{
	return ingress ? (deny ? "ingressDeny" : "ingress") : (deny ? "egressDeny" : "egress");
}

uint32_t rule_hash(const struct pol_rule_rec *r)
{
	uint32_t h = 2166136261u;
#define MIX(b) (h = (h ^ (uint8_t)(b)) * 16777619u)
	MIX(r->from_k8s);
	MIX(r->ingress);
	MIX(r->deny);
	MIX(r->kind);
	for (int i = 0; i < 32; i += 8) {
		MIX(r->spec >> i);
		MIX(r->index >> i);
	}
	for (const char *c = r->ns; *c; c++)
		MIX(*c);
	MIX(0);
	for (const char *c = r->name; *c; c++)
		MIX(*c);
#undef MIX
	return h;
}

static bool rule_same(const struct pol_rule_rec *a, const struct pol_rule_rec *b)
{
	return a->hash == b->hash && a->from_k8s == b->from_k8s && a->ingress == b->ingress &&
	       a->deny == b->deny && a->kind == b->kind && a->spec == b->spec &&
	       a->index == b->index && !strcmp(a->ns, b->ns) && !strcmp(a->name, b->name);
}

static size_t rule_at(const struct pol_state *st, uint32_t id)
{
	return pol_u32_lower_bound(st->rules, st->nrules, sizeof(*st->rules),
				   offsetof(struct pol_rule_rec, id), id);
}

const struct pol_rule_rec *rule_by_id(const struct pol_state *st, uint32_t id)
{
	size_t i = rule_at(st, id);
	return id && i < st->nrules && st->rules[i].id == id ? &st->rules[i] : NULL;
}

/* Put r (its id set, not in the table) in its place; false: out of memory. */
bool rule_insert(struct pol_state *st, const struct pol_rule_rec *r)
{
	struct pol_rule_rec *v = mod_grow(st->rules, st->nrules, &st->rules_cap, sizeof(*v), 64);
	if (!v)
		return false;
	st->rules = v;
	size_t i = rule_at(st, r->id);
	memmove(&st->rules[i + 1], &st->rules[i], (st->nrules - i) * sizeof(*st->rules));
	st->rules[i] = *r;
	st->nrules++;
	if (r->id >= st->next_rule_id)
		st->next_rule_id = r->id + 1;
	return true;
}

void rules_free(struct pol_state *st)
{
	free(st->rules);
	st->rules = NULL;
	st->nrules = st->rules_cap = 0;
}

/* The policy's rules get their IDs: the ones they had, or new ones. */
void pol_take_ids(struct pol_state *st, struct pol_policy *pol)
{
	if (!st->next_rule_id)
		st->next_rule_id = 1;
	for (size_t r = 0; r < pol->nrules; r++)
		for (size_t k = 0; k < pol->rules[r].npeers; k++) {
			struct pol_peer *peer = &pol->rules[r].peers[k];
			struct pol_rule_rec key = {.from_k8s = pol->from_k8s, .ingress = peer->ingress,
						   .deny = peer->deny, .kind = (uint8_t)pol->kind,
						   .spec = (uint32_t)r, .index = peer->index};
			snprintf(key.ns, sizeof(key.ns), "%s", pol->ns);
			snprintf(key.name, sizeof(key.name), "%s", pol->name);
			key.hash = rule_hash(&key);
			peer->rule_id = 0;
			for (size_t i = 0; i < st->nrules && !peer->rule_id; i++)
				if (rule_same(&st->rules[i], &key)) {
					st->rules[i].refs++;
					peer->rule_id = st->rules[i].id;
				}
			if (peer->rule_id)
				continue;
			key.id = st->next_rule_id;
			key.refs = 1;
			if (rule_insert(st, &key))
				peer->rule_id = key.id;
		}
}

/* The policy leaves the repository: IDs nobody else carries go. */
void pol_drop_ids(struct pol_state *st, struct pol_policy *pol)
{
	for (size_t r = 0; r < pol->nrules; r++)
		for (size_t k = 0; k < pol->rules[r].npeers; k++) {
			uint32_t id = pol->rules[r].peers[k].rule_id;
			size_t i = rule_at(st, id);
			if (!id || i >= st->nrules || st->rules[i].id != id || !st->rules[i].refs ||
			    --st->rules[i].refs)
				continue;
			memmove(&st->rules[i], &st->rules[i + 1],
				(st->nrules - i - 1) * sizeof(*st->rules));
			st->nrules--;
		}
}

/* After a restore: the saved IDs no policy took go. */
void rules_prune(struct pol_state *st)
{
	size_t o = 0;
	for (size_t i = 0; i < st->nrules; i++)
		if (st->rules[i].refs)
			st->rules[o++] = st->rules[i];
	st->nrules = o;
}

struct json_object *rule_json(const struct pol_rule_rec *r)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "rule_id", json_object_new_int64(r->id));
	json_object_object_add(o, "kind", json_object_new_string(pol_kind_name(r->kind)));
	json_object_object_add(o, "namespace", json_object_new_string(r->ns));
	json_object_object_add(o, "name", json_object_new_string(r->name));
	json_object_object_add(o, "source", json_object_new_string(r->from_k8s ? "k8s" : "api"));
	json_object_object_add(o, "direction", json_object_new_string(r->ingress ? "ingress" : "egress"));
	json_object_object_add(o, "section", json_object_new_string(pol_section_name(r->ingress, r->deny)));
	json_object_object_add(o, "spec", json_object_new_int64(r->spec));
	json_object_object_add(o, "rule_index", json_object_new_int64(r->index));
	return o;
}
