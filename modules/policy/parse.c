/* modules/policy/parse.c - the policy parser: CiliumNetworkPolicy and
 * CiliumClusterwideNetworkPolicy (cilium.io/v2) and Kubernetes NetworkPolicy
 * (networking.k8s.io/v1, translated into the same rules), in JSON or YAML,
 * into struct pol_policy. This file is its entry (pol_parse: one policy or
 * a list, JSON or YAML through yaml.c), each policy's envelope (kind,
 * metadata, spec or specs; the rules are parse_cnp.c's and parse_knp.c's,
 * selectors parse_selector.c's, CIDRs and ports parse_peer.c's), the
 * parse context's helpers they share (parse_int.h), and freeing the
 * parsed form. Everything it does not enforce (L7 rules, FQDN, toServices,
 * ...) is refused with the field's path, never ignored. */
#include "parse_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

bool pol_fail(struct pctx *c, const char *path, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!c->failed) {
		snprintf(c->err, c->errlen, "policy '%s': %s: %s", c->policy, path, msg);
		/* one line: a name or key quoted from the input may hold a
		 * control character (json-c takes a raw newline in a string) */
		for (char *p = c->err; p && *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				*p = '?';
	}
	c->failed = true;
	return false;
}

void pol_warn(struct pctx *c, const char *path, const char *fmt, ...)
{
	char msg[320], line[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	int n = snprintf(line, sizeof(line), "%s: %s", path, msg);
	if (n < 0)
		return;
	for (char *p = line; *p; p++) /* one line each */
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	size_t old = c->warnings ? strlen(c->warnings) : 0, add = strlen(line);
	if (old > 16384)
		return; /* enough said */
	char *w = realloc(c->warnings, old + add + 2);
	if (!w)
		return;
	if (old)
		w[old++] = '\n';
	memcpy(w + old, line, add + 1);
	c->warnings = w;
}

char *pol_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

/* Every key of o must be one of allowed; the first other one is refused
 * (unsupported names a field this agent does not enforce). */
bool pol_keys_known(struct pctx *c, struct json_object *o, const char *path,
		    const char *const *allowed)
{
	json_object_object_foreach(o, k, v)
	{
		(void)v;
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			ok = ok || !strcmp(*a, k);
		if (!ok)
			return pol_fail(c, path, "field '%s' is not supported (only L3/L4 policy is enforced)",
					k);
	}
	return true;
}

struct json_object *pol_field(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;
	return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static void peer_free(struct pol_peer *p)
{
	for (size_t i = 0; i < p->nendpoints; i++)
		pol_selector_free(&p->endpoints[i]);
	free(p->endpoints);
	for (size_t i = 0; i < p->ncidrs; i++)
		free(p->cidrs[i].except);
	free(p->cidrs);
	for (size_t i = 0; i < p->nports; i++)
		free(p->ports[i].name);
	free(p->ports);
}

static void rule_free(struct pol_rule *r)
{
	pol_selector_free(&r->subject);
	for (size_t i = 0; i < r->npeers; i++)
		peer_free(&r->peers[i]);
	free(r->peers);
}

void pol_policy_free(struct pol_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nrules; i++)
		rule_free(&p->rules[i]);
	free(p->rules);
	free(p->text);
	free(p->warnings);
	free(p);
}

void pol_policies_free(struct pol_policy **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		pol_policy_free(v[i]);
	free(v);
}

static bool name_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n >= max)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			return false;
	return true;
}

static struct pol_policy *parse_one(struct pctx *c, struct json_object *o, size_t idx)
{
	static const char *const keys[] = {"apiVersion", "kind", "metadata", "spec", "specs",
					   "status", NULL};
	char path[64];
	struct pol_policy *p = calloc(1, sizeof(*p));
	if (!p) {
		pol_fail(c, "policy", "out of memory");
		return NULL;
	}
	snprintf(path, sizeof(path), "item %zu", idx);
	c->policy = path;
	free(c->warnings);
	c->warnings = NULL;
	if (!json_object_is_type(o, json_type_object)) {
		pol_fail(c, "policy", "must be an object");
		goto bad;
	}
	struct json_object *kind = pol_field(o, "kind"), *md = pol_field(o, "metadata"),
			   *name = md ? pol_field(md, "name") : NULL,
			   *ns = md ? pol_field(md, "namespace") : NULL;
	if (!name || !json_object_is_type(name, json_type_string) ||
	    !name_ok(json_object_get_string(name), sizeof(p->name))) {
		pol_fail(c, "metadata.name", "missing or not a DNS name");
		goto bad;
	}
	snprintf(p->name, sizeof(p->name), "%s", json_object_get_string(name));
	c->policy = p->name;
	if (ns && (!json_object_is_type(ns, json_type_string) ||
		   !name_ok(json_object_get_string(ns), sizeof(p->ns)))) {
		pol_fail(c, "metadata.namespace", "not a DNS label");
		goto bad;
	}
	if (ns)
		snprintf(p->ns, sizeof(p->ns), "%s", json_object_get_string(ns));
	const char *ks = kind && json_object_is_type(kind, json_type_string)
				 ? json_object_get_string(kind)
				 : kind ? "?" : "CiliumNetworkPolicy";
	if (!strcmp(ks, "CiliumNetworkPolicy"))
		p->kind = POL_KIND_CNP;
	else if (!strcmp(ks, "CiliumClusterwideNetworkPolicy"))
		p->kind = POL_KIND_CCNP;
	else if (!strcmp(ks, "NetworkPolicy"))
		p->kind = POL_KIND_KNP;
	else {
		pol_fail(c, "kind", "'%.60s' is not CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy or "
				"NetworkPolicy",
		     ks);
		goto bad;
	}
	if (p->kind == POL_KIND_CCNP)
		p->ns[0] = '\0';
	if (!pol_keys_known(c, o, "policy", keys))
		goto bad;
	if (p->kind == POL_KIND_KNP) {
		/* namespaced: kubectl's default namespace when none is given */
		if (!p->ns[0])
			snprintf(p->ns, sizeof(p->ns), "default");
		if (pol_field(o, "specs")) {
			pol_fail(c, "specs", "a NetworkPolicy has one spec");
			goto bad;
		}
		if (!pol_field(o, "spec")) {
			pol_fail(c, "spec", "missing");
			goto bad;
		}
		if (!(p->rules = calloc(1, sizeof(*p->rules)))) {
			pol_fail(c, "spec", "out of memory");
			goto bad;
		}
		p->nrules = 1;
		if (!pol_parse_knp_spec(c, pol_field(o, "spec"), &p->rules[0]))
			goto bad;
		goto text;
	}
	struct json_object *spec = pol_field(o, "spec"), *specs = pol_field(o, "specs");
	size_t n = (spec ? 1 : 0) + (specs && json_object_is_type(specs, json_type_array)
					     ? json_object_array_length(specs)
					     : 0);
	if (specs && !json_object_is_type(specs, json_type_array)) {
		pol_fail(c, "specs", "must be an array");
		goto bad;
	}
	if (n == 0) {
		pol_fail(c, "spec", "missing (spec or specs)");
		goto bad;
	}
	p->rules = calloc(n, sizeof(*p->rules));
	if (!p->rules) {
		pol_fail(c, "spec", "out of memory");
		goto bad;
	}
	for (size_t i = 0; i < n; i++) {
		char rp[32];
		struct json_object *r = spec && i == 0 ? spec
						      : json_object_array_get_idx(specs, i - (spec ? 1 : 0));
		snprintf(rp, sizeof(rp), spec && i == 0 ? "spec" : "specs[%zu]", i - (spec ? 1 : 0));
		p->nrules++;
		if (!pol_parse_cnp_rule(c, r, rp, &p->rules[i]))
			goto bad;
	}
text:;
	const char *t = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	p->warnings = c->warnings;
	c->warnings = NULL;
	if (!(p->text = pol_strdup(t))) {
		pol_fail(c, "policy", "out of memory");
		goto bad;
	}
	return p;
bad:
	pol_policy_free(p);
	return NULL;
}

static int pol_parse_json(struct pctx *c, struct json_object *root, struct pol_policy ***out);

const char *pol_kind_name(enum pol_kind k)
{
	return k == POL_KIND_KNP ? "NetworkPolicy" : k == POL_KIND_CCNP ? "CiliumClusterwideNetworkPolicy"
									 : "CiliumNetworkPolicy";
}

int pol_parse(const char *text, size_t len, struct pol_policy ***out, char *err, size_t errlen)
{
	struct pctx c = {.err = err, .errlen = errlen, .policy = "?"};
	*out = NULL;
	size_t first = 0;
	while (first < len && strchr(" \t\r\n", text[first]) && text[first])
		first++;
	if (first < len && text[first] != '{' && text[first] != '[') {
		struct json_object *root = pol_yaml_to_json(text, len, err, errlen);
		if (!root)
			return -1;
		int n = pol_parse_json(&c, root, out);
		free(c.warnings); /* a failed policy's */
		json_object_put(root);
		return n;
	}
	struct json_tokener *tok = json_tokener_new_ex(64);
	if (!tok) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	struct json_object *root = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error je = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!root || je != json_tokener_success || used != len) {
		/* trailing whitespace is fine */
		bool trailing_ok = root && je == json_tokener_success;
		for (size_t i = used; trailing_ok && i < len; i++)
			trailing_ok = text[i] == ' ' || text[i] == '\n' || text[i] == '\t' ||
				      text[i] == '\r';
		if (!trailing_ok) {
			snprintf(err, errlen, "not valid JSON (at byte %zu)", used);
			json_object_put(root);
			return -1;
		}
	}
	int n = pol_parse_json(&c, root, out);
	free(c.warnings); /* a failed policy's */
	json_object_put(root);
	return n;
}

static int pol_parse_json(struct pctx *c, struct json_object *root, struct pol_policy ***out)
{
	char *err = c->err;
	size_t errlen = c->errlen;
	struct json_object *items = root;
	if (json_object_is_type(root, json_type_object) && pol_field(root, "items"))
		items = pol_field(root, "items");
	size_t n = json_object_is_type(items, json_type_array) ? json_object_array_length(items) : 1;
	if (json_object_is_type(items, json_type_array) && n == 0) {
		snprintf(err, errlen, "no policy in the input");
		return -1;
	}
	struct pol_policy **v = calloc(n, sizeof(*v));
	if (!v) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		struct json_object *o =
			json_object_is_type(items, json_type_array) ? json_object_array_get_idx(items, i)
								    : items;
		if (!(v[i] = parse_one(c, o, i))) {
			pol_policies_free(v, n);
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(v[j]->name, v[i]->name) && !strcmp(v[j]->ns, v[i]->ns) &&
			    (v[j]->kind == POL_KIND_KNP) == (v[i]->kind == POL_KIND_KNP)) {
				snprintf(err, errlen, "policy '%s': named twice in the input", v[i]->name);
				pol_policies_free(v, n);
				return -1;
			}
	}
	*out = v;
	return (int)n;
}
