/* modules/policy/parse_knp.c - a Kubernetes NetworkPolicy
 * (networking.k8s.io/v1) translated into the rules of a
 * CiliumNetworkPolicy: the podSelector is the subject, policyTypes the
 * enforced directions (when absent or empty: Ingress, plus Egress when the
 * egress list is non-empty, as the API server defaults it), each element
 * of from / to a peer with its rule's ports (no from / to: every peer), a
 * namespaceSelector matched against the namespace's labels the module adds
 * under POL_NS_LABELS_PREFIX, an ipBlock a CIDR with its excepts; a
 * podSelector peer on a label identities leave out is warned about. */
#include "parse_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

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
			return pol_fail(c, path, "out of memory");
		snprintf(k, n, "%s%s", POL_NS_LABELS_PREFIX, e->key);
		struct pol_expr *d = pol_expr_add(into);
		if (!d) {
			free(k);
			return pol_fail(c, path, "out of memory");
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
		return pol_fail(c, path, "ports must be an array");
	for (size_t j = 0; j < json_object_array_length(ports); j++) {
		snprintf(ps, sizeof(ps), "%.300s.ports[%zu]", path, j);
		if (!pol_port_entry(c, json_object_array_get_idx(ports, j), ps, true, p))
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
		return pol_fail(c, path, "must be an object");
	if (!pol_keys_known(c, o, path, keys))
		return false;
	struct json_object *ps = pol_field(o, "podSelector"), *ns = pol_field(o, "namespaceSelector"),
			   *ib = pol_field(o, "ipBlock");
	if (ib && (ps || ns))
		return pol_fail(c, path, "ipBlock cannot be combined with podSelector or namespaceSelector");
	if (!ib && !ps && !ns)
		return pol_fail(c, path, "needs podSelector, namespaceSelector or ipBlock");
	p->any_l3 = true;
	if (ib) {
		snprintf(sub, sizeof(sub), "%.300s.ipBlock", path);
		if (!json_object_is_type(ib, json_type_object))
			return pol_fail(c, sub, "must be an object with cidr (and except)");
		return pol_cidr_add(c, p, ib, sub);
	}
	if (!(p->endpoints = calloc(1, sizeof(*p->endpoints))))
		return pol_fail(c, path, "out of memory");
	p->nendpoints = 1;
	if (ps) {
		snprintf(sub, sizeof(sub), "%.300s.podSelector", path);
		if (!pol_parse_selector(c, ps, sub, &p->endpoints[0]))
			return false;
		pol_peer_selector_check(c, &p->endpoints[0], sub, false);
	}
	if (ns) {
		struct pol_selector nsel;
		snprintf(sub, sizeof(sub), "%.300s.namespaceSelector", path);
		bool ok = pol_parse_selector(c, ns, sub, &nsel) &&
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
		return pol_fail(c, path, "must be an object");
	if (!pol_keys_known(c, o, path, ingress ? in_keys : out_keys))
		return false;
	struct json_object *peers = pol_field(o, ingress ? "from" : "to"), *ports = pol_field(o, "ports");
	if (peers && !json_object_is_type(peers, json_type_array))
		return pol_fail(c, path, "%s must be an array", ingress ? "from" : "to");
	size_t n = peers ? json_object_array_length(peers) : 0;
	struct pol_peer *np = realloc(r->peers, (r->npeers + (n ? n : 1)) * sizeof(*np));
	if (!np)
		return pol_fail(c, path, "out of memory");
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

bool pol_parse_knp_spec(struct pctx *c, struct json_object *spec, struct pol_rule *r)
{
	static const char *const keys[] = {"podSelector", "policyTypes", "ingress", "egress", NULL};
	char sub[64];
	memset(r, 0, sizeof(*r));
	if (!json_object_is_type(spec, json_type_object))
		return pol_fail(c, "spec", "must be an object");
	if (!pol_keys_known(c, spec, "spec", keys))
		return false;
	struct json_object *ps = pol_field(spec, "podSelector"), *types = pol_field(spec, "policyTypes"),
			   *in = pol_field(spec, "ingress"), *eg = pol_field(spec, "egress");
	if (!ps)
		return pol_fail(c, "spec", "podSelector is missing");
	if (!pol_parse_selector(c, ps, "spec.podSelector", &r->subject))
		return false;
	/* policyTypes: given, or (absent, null or empty: the API server's
	 * SetDefaults_NetworkPolicy) Ingress, plus Egress when the egress list
	 * is non-empty: an empty egress list leaves egress open */
	if (types && !json_object_is_type(types, json_type_array))
		return pol_fail(c, "spec.policyTypes", "must be an array");
	if (types && json_object_array_length(types) > 0) {
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
				return pol_fail(c, sub, "'%.30s' is not Ingress or Egress", tn);
		}
	} else {
		r->has_ingress = true;
		r->has_egress = eg && json_object_is_type(eg, json_type_array) &&
				json_object_array_length(eg) > 0;
	}
	for (int d = 0; d < 2; d++) {
		struct json_object *sec = d == 0 ? in : eg;
		if (!sec)
			continue;
		if (!json_object_is_type(sec, json_type_array))
			return pol_fail(c, "spec", "%s must be an array", d == 0 ? "ingress" : "egress");
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
