/* modules/policy/parse.c - the policy parser: CiliumNetworkPolicy and
 * CiliumClusterwideNetworkPolicy (cilium.io/v2) and Kubernetes NetworkPolicy
 * (networking.k8s.io/v1, translated into the same rules), in JSON or YAML,
 * into struct pol_policy; label selector matching and port range splitting.
 * Everything it does not enforce (L7 rules, FQDN, toServices, ...) is
 * refused with the field's path, never ignored. */
#include "policy_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

struct pctx {
	char *err;
	size_t errlen;
	const char *policy; /* its name, for errors */
	bool failed;
};

static bool fail(struct pctx *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static bool fail(struct pctx *c, const char *path, const char *fmt, ...)
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

static char *dupstr(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

/* Every key of o must be one of allowed; the first other one is refused
 * (unsupported names a field this agent does not enforce). */
static bool keys_known(struct pctx *c, struct json_object *o, const char *path,
		       const char *const *allowed)
{
	json_object_object_foreach(o, k, v)
	{
		(void)v;
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			ok = ok || !strcmp(*a, k);
		if (!ok)
			return fail(c, path, "field '%s' is not supported (only L3/L4 policy is enforced)",
				    k);
	}
	return true;
}

static struct json_object *get(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;
	return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

/* ---- selectors ------------------------------------------------------------------- */

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

static struct pol_expr *expr_add(struct pol_selector *s)
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
	if (!(e->values[e->nvalues] = dupstr(v)))
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

static bool parse_selector(struct pctx *c, struct json_object *o, const char *path,
			   struct pol_selector *s)
{
	static const char *const keys[] = {"matchLabels", "matchExpressions", NULL};
	char sub[320];

	memset(s, 0, sizeof(*s));
	if (!json_object_is_type(o, json_type_object))
		return fail(c, path, "a label selector must be an object");
	if (!keys_known(c, o, path, keys))
		return false;
	struct json_object *ml = get(o, "matchLabels");
	if (ml) {
		if (!json_object_is_type(ml, json_type_object))
			return fail(c, path, "matchLabels must be an object");
		json_object_object_foreach(ml, k, v)
		{
			snprintf(sub, sizeof(sub), "%.200s.matchLabels.%.60s", path, k);
			if (!label_key_ok(k))
				return fail(c, sub, "not a valid label key");
			if (!json_object_is_type(v, json_type_string) ||
			    !label_value_ok(json_object_get_string(v)))
				return fail(c, sub, "the value must be a label value (string)");
			struct pol_expr *e = expr_add(s);
			if (!e || !(e->key = dupstr(k)) || !value_add(e, json_object_get_string(v)))
				return fail(c, sub, "out of memory");
			e->op = POL_OP_IN;
		}
	}
	struct json_object *me = get(o, "matchExpressions");
	if (me) {
		if (!json_object_is_type(me, json_type_array))
			return fail(c, path, "matchExpressions must be an array");
		for (size_t i = 0; i < json_object_array_length(me); i++) {
			static const char *const ekeys[] = {"key", "operator", "values", NULL};
			struct json_object *x = json_object_array_get_idx(me, i);
			snprintf(sub, sizeof(sub), "%.200s.matchExpressions[%zu]", path, i);
			if (!json_object_is_type(x, json_type_object))
				return fail(c, sub, "must be an object");
			if (!keys_known(c, x, sub, ekeys))
				return false;
			struct json_object *k = get(x, "key"), *op = get(x, "operator"),
					   *vals = get(x, "values");
			if (!k || !json_object_is_type(k, json_type_string) ||
			    !label_key_ok(json_object_get_string(k)))
				return fail(c, sub, "key: missing or not a label key");
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
				return fail(c, sub, "operator '%.40s' is not In, NotIn, Exists or DoesNotExist",
					    ops);
			size_t nv = vals && json_object_is_type(vals, json_type_array)
					    ? json_object_array_length(vals)
					    : 0;
			if (vals && !json_object_is_type(vals, json_type_array))
				return fail(c, sub, "values must be an array");
			if ((eop == POL_OP_IN || eop == POL_OP_NOT_IN) && nv == 0)
				return fail(c, sub, "operator %s needs values", ops);
			if ((eop == POL_OP_EXISTS || eop == POL_OP_NOT_EXISTS) && nv)
				return fail(c, sub, "operator %s takes no values", ops);
			struct pol_expr *e = expr_add(s);
			if (!e || !(e->key = dupstr(json_object_get_string(k))))
				return fail(c, sub, "out of memory");
			e->op = eop;
			for (size_t j = 0; j < nv; j++) {
				struct json_object *v = json_object_array_get_idx(vals, j);
				if (!json_object_is_type(v, json_type_string) ||
				    !label_value_ok(json_object_get_string(v)))
					return fail(c, sub, "values[%zu] is not a label value", j);
				if (!value_add(e, json_object_get_string(v)))
					return fail(c, sub, "out of memory");
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

/* ---- CIDRs, entities, ports ------------------------------------------------------ */

static bool parse_cidr_text(const char *t, struct pol_cidr *out)
{
	char buf[64];
	const char *slash = strchr(t, '/');
	if (!slash || (size_t)(slash - t) >= sizeof(buf))
		return false;
	memcpy(buf, t, (size_t)(slash - t));
	buf[slash - t] = '\0';
	memset(out, 0, sizeof(*out));
	unsigned max;
	if (inet_pton(AF_INET, buf, out->addr) == 1)
		out->family = 4, max = 32;
	else if (inet_pton(AF_INET6, buf, out->addr) == 1)
		out->family = 6, max = 128;
	else
		return false;
	const char *d = slash + 1;
	if (!*d || strspn(d, "0123456789") != strlen(d) || strlen(d) > 3)
		return false;
	out->plen = (unsigned)atoi(d);
	if (out->plen > max)
		return false;
	for (unsigned b = out->plen; b < max; b++)
		out->addr[b / 8] &= (uint8_t)~(0x80u >> (b % 8));
	return true;
}

static bool cidr_within(const struct pol_cidr *inner, const struct pol_cidr *outer)
{
	if (inner->family != outer->family || inner->plen < outer->plen)
		return false;
	for (unsigned b = 0; b < outer->plen; b++) {
		uint8_t m = (uint8_t)(0x80u >> (b % 8));
		if ((inner->addr[b / 8] & m) != (outer->addr[b / 8] & m))
			return false;
	}
	return true;
}

static bool cidr_add(struct pctx *c, struct pol_peer *p, struct json_object *v, const char *path)
{
	struct pol_cidr_rule *n = realloc(p->cidrs, (p->ncidrs + 1) * sizeof(*n));
	if (!n)
		return fail(c, path, "out of memory");
	p->cidrs = n;
	struct pol_cidr_rule *r = &p->cidrs[p->ncidrs];
	memset(r, 0, sizeof(*r));
	char sub[320];
	if (json_object_is_type(v, json_type_string)) {
		if (!parse_cidr_text(json_object_get_string(v), &r->cidr))
			return fail(c, path, "'%.60s' is not a CIDR", json_object_get_string(v));
		p->ncidrs++;
		return true;
	}
	static const char *const keys[] = {"cidr", "except", NULL};
	if (!json_object_is_type(v, json_type_object))
		return fail(c, path, "must be a CIDR text or an object");
	if (!keys_known(c, v, path, keys))
		return false;
	struct json_object *cidr = get(v, "cidr"), *ex = get(v, "except");
	if (!cidr || !json_object_is_type(cidr, json_type_string) ||
	    !parse_cidr_text(json_object_get_string(cidr), &r->cidr))
		return fail(c, path, "cidr: missing or not a CIDR");
	p->ncidrs++; /* owned from here: freed with the peer */
	if (ex) {
		if (!json_object_is_type(ex, json_type_array))
			return fail(c, path, "except must be an array");
		size_t ne = json_object_array_length(ex);
		r->except = calloc(ne ? ne : 1, sizeof(*r->except));
		if (!r->except)
			return fail(c, path, "out of memory");
		for (size_t i = 0; i < ne; i++) {
			struct json_object *e = json_object_array_get_idx(ex, i);
			snprintf(sub, sizeof(sub), "%.200s.except[%zu]", path, i);
			if (!json_object_is_type(e, json_type_string) ||
			    !parse_cidr_text(json_object_get_string(e), &r->except[i]))
				return fail(c, sub, "not a CIDR");
			if (!cidr_within(&r->except[i], &r->cidr))
				return fail(c, sub, "'%.60s' is not inside %.60s", json_object_get_string(e),
					    json_object_get_string(cidr));
			r->nexcept++;
		}
	}
	return true;
}

static bool parse_entity(struct pctx *c, const char *t, const char *path, uint32_t *out)
{
	static const struct {
		const char *name;
		uint32_t bit;
	} ents[] = {{"world", POL_ENT_WORLD},	      {"all", POL_ENT_ALL},
		    {"host", POL_ENT_HOST},	      {"cluster", POL_ENT_CLUSTER},
		    {"remote-node", POL_ENT_REMOTE_NODE}, {"health", POL_ENT_HEALTH},
		    {"init", POL_ENT_INIT},	      {"kube-apiserver", POL_ENT_KUBE_APISERVER}};
	for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]); i++)
		if (!strcmp(t, ents[i].name)) {
			*out |= ents[i].bit;
			return true;
		}
	return fail(c, path, "unknown entity '%.40s'", t);
}

static bool parse_port_number(const char *t, long *out)
{
	if (!*t || strlen(t) > 5 || strspn(t, "0123456789") != strlen(t))
		return false;
	*out = strtol(t, NULL, 10);
	return *out >= 0 && *out <= 65535;
}

bool pol_port_name_ok(const char *s)
{
	size_t n = strlen(s);
	bool letter = false;
	if (n == 0 || n > 15 || s[0] == '-' || s[n - 1] == '-' || strstr(s, "--"))
		return false;
	for (const char *p = s; *p; p++) {
		if (*p >= 'a' && *p <= 'z')
			letter = true;
		else if (!((*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	}
	return letter;
}

static bool port_add(struct pctx *c, struct pol_peer *p, uint8_t proto, long port, long end,
		     const char *name, const char *path)
{
	struct pol_port *n = realloc(p->ports, (p->nports + 1) * sizeof(*n));
	if (!n)
		return fail(c, path, "out of memory");
	p->ports = n;
	char *nm = name ? dupstr(name) : NULL;
	if (name && !nm)
		return fail(c, path, "out of memory");
	p->ports[p->nports++] = (struct pol_port){.proto = proto, .port = (uint16_t)port,
						  .end_port = (uint16_t)(end ? end : port), .name = nm};
	return true;
}

/* A port given as a number or a text: a number 0-65535, else a port name. */
static bool port_value(struct pctx *c, struct json_object *pv, const char *ps, long *port,
		       const char **name)
{
	*port = 0;
	*name = NULL;
	if (!pv)
		return true;
	if (json_object_is_type(pv, json_type_int)) {
		*port = json_object_get_int64(pv);
		if (*port < 0 || *port > 65535)
			return fail(c, ps, "port %ld is out of range 0-65535", *port);
		return true;
	}
	const char *t = json_object_is_type(pv, json_type_string) ? json_object_get_string(pv) : NULL;
	if (t && parse_port_number(t, port))
		return true;
	if (t && pol_port_name_ok(t)) {
		*name = t;
		return true;
	}
	return fail(c, ps, "port '%.40s' is neither a number 0-65535 nor a port name", t ? t : "?");
}

/* One port object: {port (number or name), endPort, protocol}. A CNP's
 * protocol defaults to ANY (TCP, UDP and SCTP), a NetworkPolicy's to TCP. */
static bool port_entry(struct pctx *c, struct json_object *po, const char *ps, bool knp,
		       struct pol_peer *p)
{
	static const char *const pkeys[] = {"port", "endPort", "protocol", NULL};
	if (!json_object_is_type(po, json_type_object))
		return fail(c, ps, "must be an object");
	if (!keys_known(c, po, ps, pkeys))
		return false;
	struct json_object *pv = get(po, "port"), *ev = get(po, "endPort"), *prv = get(po, "protocol");
	long port = 0, end = 0;
	const char *name = NULL;
	if (!port_value(c, pv, ps, &port, &name))
		return false;
	if (ev && name)
		return fail(c, ps, "endPort needs a numeric port");
	if (ev) {
		if (!json_object_is_type(ev, json_type_int))
			return fail(c, ps, "endPort must be a number");
		end = json_object_get_int64(ev);
		if (end < 1 || end > 65535 || end < port || port == 0)
			return fail(c, ps, "endPort %ld must be a port >= port", end);
	}
	const char *proto = prv && json_object_is_type(prv, json_type_string) ? json_object_get_string(prv)
			    : prv					      ? "?"
			    : knp					      ? "TCP"
									      : "ANY";
	if (!strcmp(proto, "TCP"))
		return port_add(c, p, IPPROTO_TCP, port, end, name, ps);
	if (!strcmp(proto, "UDP"))
		return port_add(c, p, IPPROTO_UDP, port, end, name, ps);
	if (!strcmp(proto, "SCTP"))
		return port_add(c, p, IPPROTO_SCTP, port, end, name, ps);
	if (!strcmp(proto, "ANY") && !knp)
		return port_add(c, p, IPPROTO_TCP, port, end, name, ps) &&
		       port_add(c, p, IPPROTO_UDP, port, end, name, ps) &&
		       port_add(c, p, IPPROTO_SCTP, port, end, name, ps);
	return fail(c, ps, "protocol '%.20s' is not TCP, UDP, SCTP%s", proto, knp ? "" : " or ANY");
}

static bool parse_to_ports(struct pctx *c, struct pol_peer *p, struct json_object *tp,
			   const char *path)
{
	char sub[320];
	if (!json_object_is_type(tp, json_type_array))
		return fail(c, path, "toPorts must be an array");
	for (size_t i = 0; i < json_object_array_length(tp); i++) {
		static const char *const pr_keys[] = {"ports", NULL};
		struct json_object *pr = json_object_array_get_idx(tp, i);
		snprintf(sub, sizeof(sub), "%.200s.toPorts[%zu]", path, i);
		if (!json_object_is_type(pr, json_type_object))
			return fail(c, sub, "must be an object");
		if (!keys_known(c, pr, sub, pr_keys))
			return false;
		struct json_object *ports = get(pr, "ports");
		if (!ports || !json_object_is_type(ports, json_type_array))
			return fail(c, sub, "ports: missing or not an array");
		for (size_t j = 0; j < json_object_array_length(ports); j++) {
			char ps[400];
			snprintf(ps, sizeof(ps), "%.200s.ports[%zu]", sub, j);
			if (!port_entry(c, json_object_array_get_idx(ports, j), ps, false, p))
				return false;
		}
	}
	return true;
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

static bool parse_peer(struct pctx *c, struct json_object *o, const char *path, bool ingress,
		       bool deny, struct pol_peer *p)
{
	static const char *const in_keys[] = {"fromEndpoints", "fromCIDR", "fromCIDRSet",
					      "fromEntities", "toPorts", NULL};
	static const char *const out_keys[] = {"toEndpoints", "toCIDR", "toCIDRSet",
					       "toEntities", "toPorts", NULL};
	char sub[320];

	memset(p, 0, sizeof(*p));
	p->ingress = ingress;
	p->deny = deny;
	if (!json_object_is_type(o, json_type_object))
		return fail(c, path, "must be an object");
	if (!keys_known(c, o, path, ingress ? in_keys : out_keys))
		return false;
	struct json_object *eps = get(o, ingress ? "fromEndpoints" : "toEndpoints");
	if (eps) {
		if (!json_object_is_type(eps, json_type_array))
			return fail(c, path, "%s must be an array", ingress ? "fromEndpoints" : "toEndpoints");
		size_t n = json_object_array_length(eps);
		p->endpoints = calloc(n ? n : 1, sizeof(*p->endpoints));
		if (!p->endpoints)
			return fail(c, path, "out of memory");
		for (size_t i = 0; i < n; i++) {
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path,
				 ingress ? "fromEndpoints" : "toEndpoints", i);
			p->nendpoints++;
			if (!parse_selector(c, json_object_array_get_idx(eps, i), sub,
					    &p->endpoints[i]))
				return false;
		}
		p->any_l3 = true;
	}
	const char *cidr_names[2] = {ingress ? "fromCIDR" : "toCIDR",
				     ingress ? "fromCIDRSet" : "toCIDRSet"};
	for (int k = 0; k < 2; k++) {
		struct json_object *cs = get(o, cidr_names[k]);
		if (!cs)
			continue;
		if (!json_object_is_type(cs, json_type_array))
			return fail(c, path, "%s must be an array", cidr_names[k]);
		for (size_t i = 0; i < json_object_array_length(cs); i++) {
			struct json_object *v = json_object_array_get_idx(cs, i);
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path, cidr_names[k], i);
			if (k == 0 && !json_object_is_type(v, json_type_string))
				return fail(c, sub, "must be a CIDR text");
			if (k == 1 && !json_object_is_type(v, json_type_object))
				return fail(c, sub, "must be an object with cidr (and except)");
			if (!cidr_add(c, p, v, sub))
				return false;
		}
		p->any_l3 = true;
	}
	struct json_object *ents = get(o, ingress ? "fromEntities" : "toEntities");
	if (ents) {
		if (!json_object_is_type(ents, json_type_array))
			return fail(c, path, "entities must be an array");
		for (size_t i = 0; i < json_object_array_length(ents); i++) {
			struct json_object *v = json_object_array_get_idx(ents, i);
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path,
				 ingress ? "fromEntities" : "toEntities", i);
			if (!json_object_is_type(v, json_type_string))
				return fail(c, sub, "must be an entity name");
			if (!parse_entity(c, json_object_get_string(v), sub, &p->entities))
				return false;
		}
		p->any_l3 = true;
	}
	struct json_object *tp = get(o, "toPorts");
	if (tp && !parse_to_ports(c, p, tp, path))
		return false;
	return true;
}

static bool parse_rule(struct pctx *c, struct json_object *o, const char *path, struct pol_rule *r)
{
	static const char *const keys[] = {"endpointSelector", "ingress", "egress", "ingressDeny",
					   "egressDeny", "description", "labels", NULL};
	static const char *const sections[] = {"ingress", "egress", "ingressDeny", "egressDeny"};
	char sub[320];

	memset(r, 0, sizeof(*r));
	if (!json_object_is_type(o, json_type_object))
		return fail(c, path, "a rule must be an object");
	if (get(o, "nodeSelector"))
		return fail(c, path, "field 'nodeSelector' is not supported (host policies)");
	if (!keys_known(c, o, path, keys))
		return false;
	struct json_object *es = get(o, "endpointSelector");
	snprintf(sub, sizeof(sub), "%.200s.endpointSelector", path);
	if (!es)
		return fail(c, path, "endpointSelector is missing");
	if (!parse_selector(c, es, sub, &r->subject))
		return false;
	for (int s = 0; s < 4; s++) {
		struct json_object *sec = get(o, sections[s]);
		if (!sec)
			continue;
		if (!json_object_is_type(sec, json_type_array))
			return fail(c, path, "%s must be an array", sections[s]);
		bool ingress = s == 0 || s == 2;
		if (ingress)
			r->has_ingress = true;
		else
			r->has_egress = true;
		size_t n = json_object_array_length(sec);
		struct pol_peer *np = realloc(r->peers, (r->npeers + n + 1) * sizeof(*np));
		if (!np)
			return fail(c, path, "out of memory");
		r->peers = np;
		for (size_t i = 0; i < n; i++) {
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path, sections[s], i);
			r->npeers++;
			if (!parse_peer(c, json_object_array_get_idx(sec, i), sub, ingress, s >= 2,
					&r->peers[r->npeers - 1]))
				return false;
			r->peers[r->npeers - 1].index = (uint32_t)i;
		}
	}
	return true;
}


/* ---- Kubernetes NetworkPolicy (networking.k8s.io/v1) ------------------------------- */

/* namespaceSelector expressions test the namespace's labels, which the
 * module adds to each endpoint under POL_NS_LABELS_PREFIX */
static bool ns_selector_merge(struct pctx *c, struct pol_selector *into, struct pol_selector *ns,
			      const char *path)
{
	for (size_t i = 0; i < ns->nexprs; i++) {
		struct pol_expr *e = &ns->exprs[i];
		size_t n = strlen(POL_NS_LABELS_PREFIX) + strlen(e->key) + 1;
		char *k = malloc(n);
		if (!k)
			return fail(c, path, "out of memory");
		snprintf(k, n, "%s%s", POL_NS_LABELS_PREFIX, e->key);
		struct pol_expr *d = expr_add(into);
		if (!d) {
			free(k);
			return fail(c, path, "out of memory");
		}
		*d = *e;
		d->key = k;
		free(e->key);
		e->key = NULL;
		e->values = NULL;
		e->nvalues = 0;
	}
	into->any_namespace = true;
	return true;
}

/* NetworkPolicyPort: protocol (TCP by default), port (number or name, none:
 * every port), endPort */
static bool knp_ports(struct pctx *c, struct json_object *ports, const char *path,
		      struct pol_peer *p)
{
	char ps[400];
	if (!json_object_is_type(ports, json_type_array))
		return fail(c, path, "ports must be an array");
	for (size_t j = 0; j < json_object_array_length(ports); j++) {
		snprintf(ps, sizeof(ps), "%.300s.ports[%zu]", path, j);
		if (!port_entry(c, json_object_array_get_idx(ports, j), ps, true, p))
			return false;
	}
	return true;
}

/* One NetworkPolicyPeer into p (its ports added by the caller). */
static bool knp_peer(struct pctx *c, struct json_object *o, const char *path, struct pol_peer *p)
{
	static const char *const keys[] = {"podSelector", "namespaceSelector", "ipBlock", NULL};
	char sub[400];
	if (!json_object_is_type(o, json_type_object))
		return fail(c, path, "must be an object");
	if (!keys_known(c, o, path, keys))
		return false;
	struct json_object *ps = get(o, "podSelector"), *ns = get(o, "namespaceSelector"),
			   *ib = get(o, "ipBlock");
	if (ib && (ps || ns))
		return fail(c, path, "ipBlock cannot be combined with podSelector or namespaceSelector");
	if (!ib && !ps && !ns)
		return fail(c, path, "needs podSelector, namespaceSelector or ipBlock");
	p->any_l3 = true;
	if (ib) {
		snprintf(sub, sizeof(sub), "%.300s.ipBlock", path);
		if (!json_object_is_type(ib, json_type_object))
			return fail(c, sub, "must be an object with cidr (and except)");
		return cidr_add(c, p, ib, sub);
	}
	if (!(p->endpoints = calloc(1, sizeof(*p->endpoints))))
		return fail(c, path, "out of memory");
	p->nendpoints = 1;
	if (ps) {
		snprintf(sub, sizeof(sub), "%.300s.podSelector", path);
		if (!parse_selector(c, ps, sub, &p->endpoints[0]))
			return false;
	}
	if (ns) {
		struct pol_selector nsel;
		snprintf(sub, sizeof(sub), "%.300s.namespaceSelector", path);
		bool ok = parse_selector(c, ns, sub, &nsel) &&
			  ns_selector_merge(c, &p->endpoints[0], &nsel, sub);
		pol_selector_free(&nsel);
		if (!ok)
			return false;
	}
	return true;
}

/* One ingress / egress rule: a peer per from/to element with the rule's
 * ports, or (no from/to, or an empty one) one peer meaning every peer. */
static bool knp_rule(struct pctx *c, struct json_object *o, const char *path, bool ingress,
		     struct pol_rule *r)
{
	static const char *const in_keys[] = {"from", "ports", NULL};
	static const char *const out_keys[] = {"to", "ports", NULL};
	char sub[400];
	if (!json_object_is_type(o, json_type_object))
		return fail(c, path, "must be an object");
	if (!keys_known(c, o, path, ingress ? in_keys : out_keys))
		return false;
	struct json_object *peers = get(o, ingress ? "from" : "to"), *ports = get(o, "ports");
	if (peers && !json_object_is_type(peers, json_type_array))
		return fail(c, path, "%s must be an array", ingress ? "from" : "to");
	size_t n = peers ? json_object_array_length(peers) : 0;
	struct pol_peer *np = realloc(r->peers, (r->npeers + (n ? n : 1)) * sizeof(*np));
	if (!np)
		return fail(c, path, "out of memory");
	r->peers = np;
	for (size_t i = 0; i < (n ? n : 1); i++) {
		struct pol_peer *p = &r->peers[r->npeers++];
		memset(p, 0, sizeof(*p));
		p->ingress = ingress;
		if (n) {
			snprintf(sub, sizeof(sub), "%.300s.%s[%zu]", path, ingress ? "from" : "to", i);
			if (!knp_peer(c, json_object_array_get_idx(peers, i), sub, p))
				return false;
		} else
			p->all_peers = true;
		if (ports && !knp_ports(c, ports, path, p))
			return false;
	}
	return true;
}

static bool parse_knp_spec(struct pctx *c, struct json_object *spec, struct pol_rule *r)
{
	static const char *const keys[] = {"podSelector", "policyTypes", "ingress", "egress", NULL};
	char sub[64];
	memset(r, 0, sizeof(*r));
	if (!json_object_is_type(spec, json_type_object))
		return fail(c, "spec", "must be an object");
	if (!keys_known(c, spec, "spec", keys))
		return false;
	struct json_object *ps = get(spec, "podSelector"), *types = get(spec, "policyTypes"),
			   *in = get(spec, "ingress"), *eg = get(spec, "egress");
	if (!ps)
		return fail(c, "spec", "podSelector is missing");
	if (!parse_selector(c, ps, "spec.podSelector", &r->subject))
		return false;
	/* policyTypes: given, or Ingress plus Egress when there are egress rules */
	if (types) {
		if (!json_object_is_type(types, json_type_array))
			return fail(c, "spec.policyTypes", "must be an array");
		for (size_t i = 0; i < json_object_array_length(types); i++) {
			struct json_object *t = json_object_array_get_idx(types, i);
			const char *tn = json_object_is_type(t, json_type_string) ? json_object_get_string(t)
										   : "?";
			snprintf(sub, sizeof(sub), "spec.policyTypes[%zu]", i);
			if (!strcmp(tn, "Ingress"))
				r->has_ingress = true;
			else if (!strcmp(tn, "Egress"))
				r->has_egress = true;
			else
				return fail(c, sub, "'%.30s' is not Ingress or Egress", tn);
		}
	} else {
		r->has_ingress = true;
		r->has_egress = eg != NULL;
	}
	for (int d = 0; d < 2; d++) {
		struct json_object *sec = d == 0 ? in : eg;
		if (!sec)
			continue;
		if (!json_object_is_type(sec, json_type_array))
			return fail(c, "spec", "%s must be an array", d == 0 ? "ingress" : "egress");
		if (!(d == 0 ? r->has_ingress : r->has_egress))
			continue; /* rules of a type policyTypes leaves out do not apply */
		for (size_t i = 0; i < json_object_array_length(sec); i++) {
			char rp[64];
			snprintf(rp, sizeof(rp), "spec.%s[%zu]", d == 0 ? "ingress" : "egress", i);
			size_t first = r->npeers;
			if (!knp_rule(c, json_object_array_get_idx(sec, i), rp, d == 0, r))
				return false;
			for (size_t k = first; k < r->npeers; k++)
				r->peers[k].index = (uint32_t)i;
		}
	}
	return true;
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
		fail(c, "policy", "out of memory");
		return NULL;
	}
	snprintf(path, sizeof(path), "item %zu", idx);
	c->policy = path;
	if (!json_object_is_type(o, json_type_object)) {
		fail(c, "policy", "must be an object");
		goto bad;
	}
	struct json_object *kind = get(o, "kind"), *md = get(o, "metadata"),
			   *name = md ? get(md, "name") : NULL, *ns = md ? get(md, "namespace") : NULL;
	if (!name || !json_object_is_type(name, json_type_string) ||
	    !name_ok(json_object_get_string(name), sizeof(p->name))) {
		fail(c, "metadata.name", "missing or not a DNS name");
		goto bad;
	}
	snprintf(p->name, sizeof(p->name), "%s", json_object_get_string(name));
	c->policy = p->name;
	if (ns && (!json_object_is_type(ns, json_type_string) ||
		   !name_ok(json_object_get_string(ns), sizeof(p->ns)))) {
		fail(c, "metadata.namespace", "not a DNS label");
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
		fail(c, "kind", "'%.60s' is not CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy or "
				"NetworkPolicy",
		     ks);
		goto bad;
	}
	if (p->kind == POL_KIND_CCNP)
		p->ns[0] = '\0';
	if (!keys_known(c, o, "policy", keys))
		goto bad;
	if (p->kind == POL_KIND_KNP) {
		/* namespaced: kubectl's default namespace when none is given */
		if (!p->ns[0])
			snprintf(p->ns, sizeof(p->ns), "default");
		if (get(o, "specs")) {
			fail(c, "specs", "a NetworkPolicy has one spec");
			goto bad;
		}
		if (!get(o, "spec")) {
			fail(c, "spec", "missing");
			goto bad;
		}
		if (!(p->rules = calloc(1, sizeof(*p->rules)))) {
			fail(c, "spec", "out of memory");
			goto bad;
		}
		p->nrules = 1;
		if (!parse_knp_spec(c, get(o, "spec"), &p->rules[0]))
			goto bad;
		goto text;
	}
	struct json_object *spec = get(o, "spec"), *specs = get(o, "specs");
	size_t n = (spec ? 1 : 0) + (specs && json_object_is_type(specs, json_type_array)
					     ? json_object_array_length(specs)
					     : 0);
	if (specs && !json_object_is_type(specs, json_type_array)) {
		fail(c, "specs", "must be an array");
		goto bad;
	}
	if (n == 0) {
		fail(c, "spec", "missing (spec or specs)");
		goto bad;
	}
	p->rules = calloc(n, sizeof(*p->rules));
	if (!p->rules) {
		fail(c, "spec", "out of memory");
		goto bad;
	}
	for (size_t i = 0; i < n; i++) {
		char rp[32];
		struct json_object *r = spec && i == 0 ? spec
						      : json_object_array_get_idx(specs, i - (spec ? 1 : 0));
		snprintf(rp, sizeof(rp), spec && i == 0 ? "spec" : "specs[%zu]", i - (spec ? 1 : 0));
		p->nrules++;
		if (!parse_rule(c, r, rp, &p->rules[i]))
			goto bad;
	}
text:;
	const char *t = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!(p->text = dupstr(t))) {
		fail(c, "policy", "out of memory");
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
	json_object_put(root);
	return n;
}

static int pol_parse_json(struct pctx *c, struct json_object *root, struct pol_policy ***out)
{
	char *err = c->err;
	size_t errlen = c->errlen;
	struct json_object *items = root;
	if (json_object_is_type(root, json_type_object) && get(root, "items"))
		items = get(root, "items");
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

void pol_port_blocks(uint16_t first, uint16_t last, void (*fn)(uint16_t port, unsigned bits, void *ud),
		     void *ud)
{
	uint32_t p = first, end = last;
	while (p <= end) {
		unsigned size_bits = 0; /* block of 2^size_bits ports */
		while (size_bits < 16 && (p & ((1u << (size_bits + 1)) - 1)) == 0 &&
		       p + (1u << (size_bits + 1)) - 1 <= end)
			size_bits++;
		fn((uint16_t)p, 16 - size_bits, ud);
		p += 1u << size_bits;
	}
}
