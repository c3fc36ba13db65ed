/* modules/policy/parse_selector.c - label selectors: parsed (matchLabels,
 * matchExpressions with In, NotIn, Exists and DoesNotExist, keys and
 * values checked) into struct pol_selector, freed, and matched against a
 * label set (pol_selector_match, which the module runs for endpoints and
 * identities: a namespaced policy's selector matches in its own namespace
 * only, unless it names the namespace label or is a NetworkPolicy peer's
 * with a namespaceSelector); a peer selector naming a label that
 * identities leave out is warned about (pol_peer_selector_check). */
#include "parse_int.h"
#include "../common/label_filter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

void pol_selector_free(struct pol_selector *s)
{
	for (size_t i = 0; i < s->nexprs; i++) {
		free(s->exprs[i].key);
		for (size_t j = 0; j < s->exprs[i].nvalues; j++)
			free(s->exprs[i].values[j]);
		free(s->exprs[i].values);
	}
	free(s->exprs);
	memset(s, 0, sizeof(*s));
}

struct pol_expr *pol_expr_add(struct pol_selector *s)
{
	struct pol_expr *e = realloc(s->exprs, (s->nexprs + 1) * sizeof(*e));
	if (!e)
		return NULL;
	s->exprs = e;
	e = &s->exprs[s->nexprs++];
	memset(e, 0, sizeof(*e));
	return e;
}

static bool value_add(struct pol_expr *e, const char *v)
{
	char **n = realloc(e->values, (e->nvalues + 1) * sizeof(*n));
	if (!n)
		return false;
	e->values = n;
	if (!(e->values[e->nvalues] = pol_strdup(v)))
		return false;
	e->nvalues++;
	return true;
}

static bool label_key_ok(const char *k)
{
	size_t n = strlen(k);
	if (n == 0 || n > 317)
		return false;
	for (const char *p = k; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '=' || *p == '\n')
			return false;
	return true;
}

static bool label_value_ok(const char *v)
{
	if (strlen(v) > 63)
		return false;
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '\n')
			return false;
	return true;
}

bool pol_parse_selector(struct pctx *c, struct json_object *o, const char *path,
			struct pol_selector *s)
{
	static const char *const keys[] = {"matchLabels", "matchExpressions", NULL};
	char sub[320];

	memset(s, 0, sizeof(*s));
	if (!json_object_is_type(o, json_type_object))
		return pol_fail(c, path, "a label selector must be an object");
	if (!pol_keys_known(c, o, path, keys))
		return false;
	struct json_object *ml = pol_field(o, "matchLabels");
	if (ml) {
		if (!json_object_is_type(ml, json_type_object))
			return pol_fail(c, path, "matchLabels must be an object");
		json_object_object_foreach(ml, k, v)
		{
			snprintf(sub, sizeof(sub), "%.200s.matchLabels.%.60s", path, k);
			if (!label_key_ok(k))
				return pol_fail(c, sub, "not a valid label key");
			if (!json_object_is_type(v, json_type_string) ||
			    !label_value_ok(json_object_get_string(v)))
				return pol_fail(c, sub, "the value must be a label value (string)");
			struct pol_expr *e = pol_expr_add(s);
			if (!e || !(e->key = pol_strdup(k)) || !value_add(e, json_object_get_string(v)))
				return pol_fail(c, sub, "out of memory");
			e->op = POL_OP_IN;
		}
	}
	struct json_object *me = pol_field(o, "matchExpressions");
	if (me) {
		if (!json_object_is_type(me, json_type_array))
			return pol_fail(c, path, "matchExpressions must be an array");
		for (size_t i = 0; i < json_object_array_length(me); i++) {
			static const char *const ekeys[] = {"key", "operator", "values", NULL};
			struct json_object *x = json_object_array_get_idx(me, i);
			snprintf(sub, sizeof(sub), "%.200s.matchExpressions[%zu]", path, i);
			if (!json_object_is_type(x, json_type_object))
				return pol_fail(c, sub, "must be an object");
			if (!pol_keys_known(c, x, sub, ekeys))
				return false;
			struct json_object *k = pol_field(x, "key"), *op = pol_field(x, "operator"),
					   *vals = pol_field(x, "values");
			if (!k || !json_object_is_type(k, json_type_string) ||
			    !label_key_ok(json_object_get_string(k)))
				return pol_fail(c, sub, "key: missing or not a label key");
			const char *ops = op && json_object_is_type(op, json_type_string)
						  ? json_object_get_string(op)
						  : "";
			enum pol_op eop;
			if (!strcmp(ops, "In"))
				eop = POL_OP_IN;
			else if (!strcmp(ops, "NotIn"))
				eop = POL_OP_NOT_IN;
			else if (!strcmp(ops, "Exists"))
				eop = POL_OP_EXISTS;
			else if (!strcmp(ops, "DoesNotExist"))
				eop = POL_OP_NOT_EXISTS;
			else
				return pol_fail(c, sub, "operator '%.40s' is not In, NotIn, Exists or DoesNotExist",
						ops);
			size_t nv = vals && json_object_is_type(vals, json_type_array)
					    ? json_object_array_length(vals)
					    : 0;
			if (vals && !json_object_is_type(vals, json_type_array))
				return pol_fail(c, sub, "values must be an array");
			if ((eop == POL_OP_IN || eop == POL_OP_NOT_IN) && nv == 0)
				return pol_fail(c, sub, "operator %s needs values", ops);
			if ((eop == POL_OP_EXISTS || eop == POL_OP_NOT_EXISTS) && nv)
				return pol_fail(c, sub, "operator %s takes no values", ops);
			struct pol_expr *e = pol_expr_add(s);
			if (!e || !(e->key = pol_strdup(json_object_get_string(k))))
				return pol_fail(c, sub, "out of memory");
			e->op = eop;
			for (size_t j = 0; j < nv; j++) {
				struct json_object *v = json_object_array_get_idx(vals, j);
				if (!json_object_is_type(v, json_type_string) ||
				    !label_value_ok(json_object_get_string(v)))
					return pol_fail(c, sub, "values[%zu] is not a label value", j);
				if (!value_add(e, json_object_get_string(v)))
					return pol_fail(c, sub, "out of memory");
			}
		}
	}
	return true;
}

/* label "src:key=value" against a selector key "key" or "src:key" */
static const char *label_value_of(const char *labels, const char *key)
{
	const char *colon = strchr(key, ':');
	size_t klen = strlen(key);
	for (const char *l = labels; l && *l;) {
		const char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		const char *eq = memchr(l, '=', len);
		size_t namelen = eq ? (size_t)(eq - l) : len;
		const char *lc = memchr(l, ':', namelen);
		/* "src:key" compares whole; "key" compares after the source */
		const char *name = colon ? l : (lc ? lc + 1 : l);
		size_t nlen = colon ? namelen : namelen - (size_t)(name - l);
		if (nlen == klen && !memcmp(name, key, klen)) {
			static char val[128];
			size_t vl = eq ? len - namelen - 1 : 0;
			if (vl >= sizeof(val))
				vl = sizeof(val) - 1;
			memcpy(val, eq ? eq + 1 : "", vl);
			val[vl] = '\0';
			return val;
		}
		l = end ? end + 1 : NULL;
	}
	return NULL;
}

#define NS_LABEL POL_NS_LABEL

bool pol_selector_match(const struct pol_selector *sel, const char *labels, const char *ns)
{
	bool names_ns = false;
	for (size_t i = 0; i < sel->nexprs; i++) {
		const struct pol_expr *e = &sel->exprs[i];
		const char *k = strchr(e->key, ':') ? strchr(e->key, ':') + 1 : e->key;
		names_ns = names_ns || !strcmp(k, NS_LABEL);
		const char *v = label_value_of(labels, e->key);
		bool in = false;
		for (size_t j = 0; v && j < e->nvalues; j++)
			in = in || !strcmp(v, e->values[j]);
		switch (e->op) {
		case POL_OP_IN:
			if (!in)
				return false;
			break;
		case POL_OP_NOT_IN:
			if (in)
				return false;
			break;
		case POL_OP_EXISTS:
			if (!v)
				return false;
			break;
		case POL_OP_NOT_EXISTS:
			if (v)
				return false;
			break;
		}
	}
	if (ns && ns[0] && !names_ns && !sel->any_namespace) {
		const char *v = label_value_of(labels, NS_LABEL);
		if (!v || strcmp(v, ns))
			return false;
	}
	return true;
}

bool pol_key_filtered(const char *key)
{
	const char *colon = strchr(key, ':');
	if (colon && strncmp(key, "k8s:", 4) && strncmp(key, "any:", 4))
		return false; /* another source: not a Kubernetes label */
	const char *k = colon ? colon + 1 : key;
	if (!strncmp(k, POL_NS_LABELS_PREFIX, strlen(POL_NS_LABELS_PREFIX)))
		return false; /* the namespace's labels, which the module adds */
	char label[320];
	int n = snprintf(label, sizeof(label), "k8s:%s=", k);
	return n > 0 && (size_t)n < sizeof(label) && !mod_label_counts_for_identity(label, (size_t)n);
}

void pol_peer_selector_check(struct pctx *c, const struct pol_selector *s, const char *path,
			     bool deny)
{
	for (size_t i = 0; i < s->nexprs; i++) {
		const struct pol_expr *e = &s->exprs[i];
		if (!pol_key_filtered(e->key))
			continue;
		bool never = e->op == POL_OP_IN || e->op == POL_OP_EXISTS;
		pol_warn(c, path,
			 "label '%.100s' is left out of identities (it differs per pod or per rollout) "
			 "and peers are matched by identity, so this %s %s: it %s",
			 e->key, never ? "selector" : "expression", never ? "selects no pod" : "holds for every pod",
			 never ? (deny ? "denies nothing" : "allows nothing (fail closed)")
			       : (deny ? "denies every pod the rest selects"
				       : "allows every pod the rest selects"));
	}
}
