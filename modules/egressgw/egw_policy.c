/* modules/egressgw/egw_policy.c - an egress gateway policy as JSON, in the
 * shape of Cilium's CiliumEgressGatewayPolicy spec with a list of
 * gateways:
 *   {"selectors": [{"namespace": "default",
 *                   "podSelector": {"matchLabels": {"app": "a"}}}],
 *    "destinationCIDRs": ["203.0.113.0/24"], "excludedCIDRs": [],
 *    "egressGateways": [{"nodeName": "n2", "egressIP": "192.0.2.10"}, ...]}
 * Parsing is strict (everything from outside is hostile): an unknown
 * field, a wrong type, a bad CIDR or address, a duplicate gateway, too
 * many of anything is refused with one line naming the field. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "egressgw.h"

bool egw_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > EGW_NAME_MAX || !isalnum((unsigned char)name[0]) ||
	    !isalnum((unsigned char)name[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)name[i]) || isdigit((unsigned char)name[i]) ||
		      name[i] == '-' || name[i] == '.'))
			return false;
	return true;
}

static bool label_chars(const char *s, size_t max, bool slash, bool empty_ok)
{
	size_t n = strlen(s);
	if ((n == 0 && !empty_ok) || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '-' || s[i] == '_' || s[i] == '.' ||
		      (slash && s[i] == '/')))
			return false;
	return true;
}

#define BAD(...)                                   \
	do {                                       \
		snprintf(why, wl, __VA_ARGS__);    \
		return -EINVAL;                    \
	} while (0)

static int parse_cidr(struct json_object *o, const char *field, size_t i, struct egw_cidr *c,
		      char *why, size_t wl)
{
	if (!json_object_is_type(o, json_type_string))
		BAD("%s[%zu]: must be a string (an IPv4 CIDR)", field, i);
	const char *s = json_object_get_string(o);
	char a[INET6_ADDRSTRLEN + 8];
	if (strlen(s) >= sizeof(a))
		BAD("%s[%zu]: \"%.40s...\" is not a CIDR", field, i, s);
	snprintf(a, sizeof(a), "%s", s);
	char *slash = strchr(a, '/');
	if (!slash)
		BAD("%s[%zu]: \"%s\" has no prefix length (ADDRESS/LEN)", field, i, s);
	*slash = '\0';
	struct in6_addr a6;
	if (inet_pton(AF_INET6, a, &a6) == 1)
		BAD("%s[%zu]: \"%s\" is IPv6; the egress gateway is IPv4 only", field, i, s);
	if (inet_pton(AF_INET, a, &c->addr) != 1)
		BAD("%s[%zu]: \"%s\" is not an IPv4 CIDR", field, i, s);
	char *end;
	const char *ls = slash + 1;
	long len = strtol(ls, &end, 10);
	if (!*ls || *end || !isdigit((unsigned char)*ls) || len < 0 || len > 32)
		BAD("%s[%zu]: \"%s\": the prefix length must be 0..32", field, i, s);
	c->len = (uint8_t)len;
	uint32_t mask = len ? htonl(0xffffffffu << (32 - len)) : 0;
	if (c->addr.s_addr & ~mask)
		BAD("%s[%zu]: \"%s\" has host bits set", field, i, s);
	return 0;
}

static int parse_cidrs(struct json_object *arr, const char *field, struct egw_cidr *out,
		       size_t *n, bool required, char *why, size_t wl)
{
	*n = 0;
	if (!arr) {
		if (required)
			BAD("%s: missing (a list of IPv4 CIDRs)", field);
		return 0;
	}
	if (!json_object_is_type(arr, json_type_array))
		BAD("%s: must be a list of IPv4 CIDRs", field);
	size_t len = json_object_array_length(arr);
	if (required && len == 0)
		BAD("%s: must not be empty", field);
	if (len > EGW_MAX_CIDRS)
		BAD("%s: %zu CIDRs, at most %d", field, len, EGW_MAX_CIDRS);
	for (size_t i = 0; i < len; i++) {
		int rc = parse_cidr(json_object_array_get_idx(arr, i), field, i, &out[i], why, wl);
		if (rc)
			return rc;
	}
	*n = len;
	return 0;
}

static int parse_selector(struct json_object *o, size_t i, struct egw_selector *s, char *why,
			  size_t wl)
{
	if (!json_object_is_type(o, json_type_object))
		BAD("selectors[%zu]: must be an object", i);
	bool has_pod = false;
	json_object_object_foreach(o, key, val)
	{
		if (!strcmp(key, "namespace")) {
			if (!json_object_is_type(val, json_type_string) ||
			    !label_chars(json_object_get_string(val), sizeof(s->ns) - 1, false, false))
				BAD("selectors[%zu].namespace: must be a namespace name", i);
			snprintf(s->ns, sizeof(s->ns), "%s", json_object_get_string(val));
		} else if (!strcmp(key, "podSelector")) {
			if (!json_object_is_type(val, json_type_object))
				BAD("selectors[%zu].podSelector: must be an object", i);
			has_pod = true;
			json_object_object_foreach(val, pk, pv)
			{
				if (strcmp(pk, "matchLabels"))
					BAD("selectors[%zu].podSelector.%.64s: not supported (matchLabels only)",
					    i, pk);
				if (!json_object_is_type(pv, json_type_object))
					BAD("selectors[%zu].podSelector.matchLabels: must be an object", i);
				json_object_object_foreach(pv, lk, lv)
				{
					if (s->n_labels == EGW_MAX_LABELS)
						BAD("selectors[%zu].podSelector.matchLabels: more than %d labels",
						    i, EGW_MAX_LABELS);
					if (!label_chars(lk, EGW_LABEL_KEY_MAX, true, false))
						BAD("selectors[%zu].podSelector.matchLabels: \"%.64s\" is not a label key",
						    i, lk);
					if (!json_object_is_type(lv, json_type_string) ||
					    !label_chars(json_object_get_string(lv), EGW_LABEL_VALUE_MAX,
							 false, true))
						BAD("selectors[%zu].podSelector.matchLabels.%s: must be a label value (string)",
						    i, lk);
					snprintf(s->key[s->n_labels], sizeof(s->key[0]), "%s", lk);
					snprintf(s->value[s->n_labels], sizeof(s->value[0]), "%s",
						 json_object_get_string(lv));
					s->n_labels++;
				}
			}
		} else {
			BAD("selectors[%zu].%.64s: unknown field (namespace, podSelector)", i, key);
		}
	}
	if (!has_pod)
		BAD("selectors[%zu].podSelector: missing", i);
	return 0;
}

static int parse_gateway(struct json_object *o, size_t i, struct egw_gateway *gw, char *why,
			 size_t wl)
{
	if (!json_object_is_type(o, json_type_object))
		BAD("egressGateways[%zu]: must be an object", i);
	bool node = false, ip = false;
	json_object_object_foreach(o, key, val)
	{
		if (!strcmp(key, "nodeName")) {
			const char *s = json_object_is_type(val, json_type_string) ? json_object_get_string(val) : "";
			if (!egw_name_valid(s) || strlen(s) >= sizeof(gw->node))
				BAD("egressGateways[%zu].nodeName: must be a node name (1..%zu of a-z 0-9 . -)",
				    i, sizeof(gw->node) - 1);
			snprintf(gw->node, sizeof(gw->node), "%s", s);
			node = true;
		} else if (!strcmp(key, "egressIP")) {
			const char *s = json_object_is_type(val, json_type_string) ? json_object_get_string(val) : "";
			if (inet_pton(AF_INET, s, &gw->egress_ip) != 1)
				BAD("egressGateways[%zu].egressIP: \"%.64s\" is not an IPv4 address", i, s);
			uint32_t h = ntohl(gw->egress_ip.s_addr);
			if (h == 0 || h == 0xffffffffu || (h >> 28) == 0xe || (h >> 24) == 127)
				BAD("egressGateways[%zu].egressIP: %s cannot be a source address", i, s);
			ip = true;
		} else {
			BAD("egressGateways[%zu].%.64s: unknown field (nodeName, egressIP)", i, key);
		}
	}
	if (!node)
		BAD("egressGateways[%zu].nodeName: missing", i);
	if (!ip)
		BAD("egressGateways[%zu].egressIP: missing", i);
	return 0;
}

int egw_policy_parse(const char *text, size_t len, struct egw_policy *p, char *why, size_t wl)
{
	char name[sizeof(p->name)];
	memcpy(name, p->name, sizeof(name));
	memset(p, 0, sizeof(*p));
	memcpy(p->name, name, sizeof(name));
	struct json_tokener *tok = json_tokener_new();
	if (!tok)
		BAD("out of memory");
	struct json_object *o = json_tokener_parse_ex(tok, text, (int)len);
	bool complete = json_tokener_get_error(tok) == json_tokener_success &&
			json_tokener_get_parse_end(tok) == len;
	json_tokener_free(tok);
	int rc = -EINVAL;
	if (!o || !complete) {
		snprintf(why, wl, "the body is not one JSON document");
		goto out;
	}
	if (!json_object_is_type(o, json_type_object)) {
		snprintf(why, wl, "the body must be a JSON object");
		goto out;
	}
	json_object_object_foreach(o, key, val)
	{
		(void)val;
		if (strcmp(key, "selectors") && strcmp(key, "destinationCIDRs") &&
		    strcmp(key, "excludedCIDRs") && strcmp(key, "egressGateways")) {
			snprintf(why, wl,
				 "%.64s: unknown field (selectors, destinationCIDRs, excludedCIDRs, egressGateways)",
				 key);
			goto out;
		}
	}
	struct json_object *sel = NULL, *gws = NULL, *dst = NULL, *excl = NULL;
	json_object_object_get_ex(o, "selectors", &sel);
	json_object_object_get_ex(o, "egressGateways", &gws);
	json_object_object_get_ex(o, "destinationCIDRs", &dst);
	json_object_object_get_ex(o, "excludedCIDRs", &excl);
	if (!sel || !json_object_is_type(sel, json_type_array) || !json_object_array_length(sel)) {
		snprintf(why, wl, "selectors: must be a non-empty list of pod selectors");
		goto out;
	}
	if (json_object_array_length(sel) > EGW_MAX_SELECTORS) {
		snprintf(why, wl, "selectors: %zu selectors, at most %d",
			 json_object_array_length(sel), EGW_MAX_SELECTORS);
		goto out;
	}
	for (size_t i = 0; i < json_object_array_length(sel); i++) {
		if (parse_selector(json_object_array_get_idx(sel, i), i, &p->sel[i], why, wl))
			goto out;
		p->n_sel = i + 1;
	}
	if (parse_cidrs(dst, "destinationCIDRs", p->dst, &p->n_dst, true, why, wl) ||
	    parse_cidrs(excl, "excludedCIDRs", p->excl, &p->n_excl, false, why, wl))
		goto out;
	if (!gws || !json_object_is_type(gws, json_type_array) || !json_object_array_length(gws)) {
		snprintf(why, wl, "egressGateways: must be a non-empty list of {nodeName, egressIP}");
		goto out;
	}
	if (json_object_array_length(gws) > EGW_MAX_GATEWAYS) {
		snprintf(why, wl, "egressGateways: %zu gateways, at most %d",
			 json_object_array_length(gws), EGW_MAX_GATEWAYS);
		goto out;
	}
	for (size_t i = 0; i < json_object_array_length(gws); i++) {
		if (parse_gateway(json_object_array_get_idx(gws, i), i, &p->gw[i], why, wl))
			goto out;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(p->gw[j].node, p->gw[i].node)) {
				snprintf(why, wl, "egressGateways[%zu].nodeName: %s is listed twice", i,
					 p->gw[i].node);
				goto out;
			}
		p->n_gw = i + 1;
	}
	rc = 0;
out:
	json_object_put(o);
	return rc;
}

static struct json_object *cidrs_json(const struct egw_cidr *c, size_t n)
{
	struct json_object *a = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		char s[INET_ADDRSTRLEN + 4], ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &c[i].addr, ip, sizeof(ip));
		snprintf(s, sizeof(s), "%s/%u", ip, c[i].len);
		json_object_array_add(a, json_object_new_string(s));
	}
	return a;
}

struct json_object *egw_policy_json(const struct egw_policy *p)
{
	struct json_object *o = json_object_new_object(), *sel = json_object_new_array();
	for (size_t i = 0; i < p->n_sel; i++) {
		struct json_object *s = json_object_new_object(), *ps = json_object_new_object(),
				   *ml = json_object_new_object();
		if (p->sel[i].ns[0])
			json_object_object_add(s, "namespace", json_object_new_string(p->sel[i].ns));
		for (size_t l = 0; l < p->sel[i].n_labels; l++)
			json_object_object_add(ml, p->sel[i].key[l],
					       json_object_new_string(p->sel[i].value[l]));
		json_object_object_add(ps, "matchLabels", ml);
		json_object_object_add(s, "podSelector", ps);
		json_object_array_add(sel, s);
	}
	json_object_object_add(o, "selectors", sel);
	json_object_object_add(o, "destinationCIDRs", cidrs_json(p->dst, p->n_dst));
	json_object_object_add(o, "excludedCIDRs", cidrs_json(p->excl, p->n_excl));
	struct json_object *gws = json_object_new_array();
	for (size_t i = 0; i < p->n_gw; i++) {
		struct json_object *g = json_object_new_object();
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &p->gw[i].egress_ip, ip, sizeof(ip));
		json_object_object_add(g, "nodeName", json_object_new_string(p->gw[i].node));
		json_object_object_add(g, "egressIP", json_object_new_string(ip));
		json_object_array_add(gws, g);
	}
	json_object_object_add(o, "egressGateways", gws);
	return o;
}

/* labels holds "key=value" under any source ("k8s:key=value" or bare) */
static bool has_label(const char *labels, const char *key, const char *value)
{
	size_t kl = strlen(key), vl = strlen(value);
	for (const char *l = labels; l && *l;) {
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		const char *c = memchr(l, ':', n);
		const char *k = c ? c + 1 : l;
		size_t rest = (size_t)(l + n - k);
		if (rest == kl + 1 + vl && !strncmp(k, key, kl) && k[kl] == '=' &&
		    !strncmp(k + kl + 1, value, vl))
			return true;
		l = end ? end + 1 : NULL;
	}
	return false;
}

bool egw_policy_selects(const struct egw_policy *p, const char *labels)
{
	for (size_t i = 0; i < p->n_sel; i++) {
		const struct egw_selector *s = &p->sel[i];
		bool ok = !s->ns[0] || has_label(labels, "io.kubernetes.pod.namespace", s->ns);
		for (size_t l = 0; ok && l < s->n_labels; l++)
			ok = has_label(labels, s->key[l], s->value[l]);
		if (ok)
			return true;
	}
	return false;
}
