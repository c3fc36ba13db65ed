/* modules/policy/parse_cnp.c - the rules of a CiliumNetworkPolicy or a
 * CiliumClusterwideNetworkPolicy (cilium.io/v2): an endpointSelector and
 * its ingress / egress / ingressDeny / egressDeny sections, each element a
 * peer (fromEndpoints / toEndpoints, fromCIDR / toCIDR, fromCIDRSet /
 * toCIDRSet, fromEntities / toEntities, toPorts). Any other field (L7
 * rules, toFQDNs, toServices, nodeSelector, ...) is refused with its path. */
#include "parse_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

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
	return pol_fail(c, path, "unknown entity '%.40s'", t);
}

static bool parse_to_ports(struct pctx *c, struct pol_peer *p, struct json_object *tp,
			   const char *path)
{
	char sub[320];
	if (!json_object_is_type(tp, json_type_array))
		return pol_fail(c, path, "toPorts must be an array");
	for (size_t i = 0; i < json_object_array_length(tp); i++) {
		static const char *const pr_keys[] = {"ports", NULL};
		struct json_object *pr = json_object_array_get_idx(tp, i);
		snprintf(sub, sizeof(sub), "%.200s.toPorts[%zu]", path, i);
		if (!json_object_is_type(pr, json_type_object))
			return pol_fail(c, sub, "must be an object");
		if (!pol_keys_known(c, pr, sub, pr_keys))
			return false;
		struct json_object *ports = pol_field(pr, "ports");
		if (!ports || !json_object_is_type(ports, json_type_array))
			return pol_fail(c, sub, "ports: missing or not an array");
		for (size_t j = 0; j < json_object_array_length(ports); j++) {
			char ps[400];
			snprintf(ps, sizeof(ps), "%.200s.ports[%zu]", sub, j);
			if (!pol_port_entry(c, json_object_array_get_idx(ports, j), ps, false, p))
				return false;
		}
	}
	return true;
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
		return pol_fail(c, path, "must be an object");
	if (!pol_keys_known(c, o, path, ingress ? in_keys : out_keys))
		return false;
	struct json_object *eps = pol_field(o, ingress ? "fromEndpoints" : "toEndpoints");
	if (eps) {
		if (!json_object_is_type(eps, json_type_array))
			return pol_fail(c, path, "%s must be an array", ingress ? "fromEndpoints" : "toEndpoints");
		size_t n = json_object_array_length(eps);
		p->endpoints = calloc(n ? n : 1, sizeof(*p->endpoints));
		if (!p->endpoints)
			return pol_fail(c, path, "out of memory");
		for (size_t i = 0; i < n; i++) {
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path,
				 ingress ? "fromEndpoints" : "toEndpoints", i);
			p->nendpoints++;
			if (!pol_parse_selector(c, json_object_array_get_idx(eps, i), sub,
						&p->endpoints[i]))
				return false;
			pol_peer_selector_check(c, &p->endpoints[i], sub, deny);
		}
		p->any_l3 = true;
	}
	const char *cidr_names[2] = {ingress ? "fromCIDR" : "toCIDR",
				     ingress ? "fromCIDRSet" : "toCIDRSet"};
	for (int k = 0; k < 2; k++) {
		struct json_object *cs = pol_field(o, cidr_names[k]);
		if (!cs)
			continue;
		if (!json_object_is_type(cs, json_type_array))
			return pol_fail(c, path, "%s must be an array", cidr_names[k]);
		for (size_t i = 0; i < json_object_array_length(cs); i++) {
			struct json_object *v = json_object_array_get_idx(cs, i);
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path, cidr_names[k], i);
			if (k == 0 && !json_object_is_type(v, json_type_string))
				return pol_fail(c, sub, "must be a CIDR text");
			if (k == 1 && !json_object_is_type(v, json_type_object))
				return pol_fail(c, sub, "must be an object with cidr (and except)");
			if (!pol_cidr_add(c, p, v, sub))
				return false;
		}
		p->any_l3 = true;
	}
	struct json_object *ents = pol_field(o, ingress ? "fromEntities" : "toEntities");
	if (ents) {
		if (!json_object_is_type(ents, json_type_array))
			return pol_fail(c, path, "entities must be an array");
		for (size_t i = 0; i < json_object_array_length(ents); i++) {
			struct json_object *v = json_object_array_get_idx(ents, i);
			snprintf(sub, sizeof(sub), "%.200s.%s[%zu]", path,
				 ingress ? "fromEntities" : "toEntities", i);
			if (!json_object_is_type(v, json_type_string))
				return pol_fail(c, sub, "must be an entity name");
			if (!parse_entity(c, json_object_get_string(v), sub, &p->entities))
				return false;
		}
		p->any_l3 = true;
	}
	struct json_object *tp = pol_field(o, "toPorts");
	if (tp && !parse_to_ports(c, p, tp, path))
		return false;
	return true;
}

bool pol_parse_cnp_rule(struct pctx *c, struct json_object *o, const char *path, struct pol_rule *r)
{
	static const char *const keys[] = {"endpointSelector", "ingress", "egress", "ingressDeny",
					   "egressDeny", "description", "labels", NULL};
	static const char *const sections[] = {"ingress", "egress", "ingressDeny", "egressDeny"};
	char sub[320];

	memset(r, 0, sizeof(*r));
	if (!json_object_is_type(o, json_type_object))
		return pol_fail(c, path, "a rule must be an object");
	if (pol_field(o, "nodeSelector"))
		return pol_fail(c, path, "field 'nodeSelector' is not supported (host policies)");
	if (!pol_keys_known(c, o, path, keys))
		return false;
	struct json_object *es = pol_field(o, "endpointSelector");
	snprintf(sub, sizeof(sub), "%.200s.endpointSelector", path);
	if (!es)
		return pol_fail(c, path, "endpointSelector is missing");
	if (!pol_parse_selector(c, es, sub, &r->subject))
		return false;
	for (int s = 0; s < 4; s++) {
		struct json_object *sec = pol_field(o, sections[s]);
		if (!sec)
			continue;
		if (!json_object_is_type(sec, json_type_array))
			return pol_fail(c, path, "%s must be an array", sections[s]);
		bool ingress = s == 0 || s == 2;
		if (ingress)
			r->has_ingress = true;
		else
			r->has_egress = true;
		size_t n = json_object_array_length(sec);
		struct pol_peer *np = realloc(r->peers, (r->npeers + n + 1) * sizeof(*np));
		if (!np)
			return pol_fail(c, path, "out of memory");
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
