/* modules/policy/trace.c - GET /v1/policy/trace?src=&dst=&dport=N/PROTO:
 * for each end, the policies that select it and the rules that allow or
 * deny the flow (resolved again from the repository as pol_resolve does),
 * and what the datapath decides from the entries in place (the lookup of
 * policy_check() in bpf/lib/policy.h) with the rule its events name; the
 * host's traffic allowed by allow-localhost says so, not a rule. An end
 * given by address that is another node's pod is resolved through the
 * nodes capability's ipcache_pod to the identity its packets carry (as the
 * datapath's ipcache lookup does); an end may also be identity:N (the CLI
 * resolves another node's ns/pod through GET /v1/ipcache to it). It only
 * reads the state. */
#include "policy_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>

#include <json-c/json.h>

struct trace_end {
	const struct pol_ep *ep; /* a local endpoint, or NULL */
	uint32_t identity;
	char desc[POL_NS_MAX + POL_NAME_MAX + 64];
};

static const char *identity_name(uint32_t id)
{
	switch (id) {
	case FIBRIL_IDENTITY_HOST: return "host";
	case FIBRIL_IDENTITY_WORLD: return "world";
	case FIBRIL_IDENTITY_REMOTE_NODE: return "remote-node";
	case FIBRIL_IDENTITY_HEALTH: return "health";
	case FIBRIL_IDENTITY_INIT: return "init";
	case FIBRIL_IDENTITY_KUBE_APISERVER: return "kube-apiserver";
	default: return id >= POL_CIDR_IDENTITY_BASE ? "cidr" : "endpoint";
	}
}

static void end_of_ep(struct trace_end *out, const struct pol_ep *ep)
{
	out->ep = ep;
	out->identity = ep->identity;
	if (ep->pod_name[0])
		snprintf(out->desc, sizeof(out->desc), "%s/%s (endpoint %u, identity %u)", ep->pod_ns,
			 ep->pod_name, ep->id, ep->identity);
	else
		snprintf(out->desc, sizeof(out->desc), "endpoint %u (identity %u)", ep->id, ep->identity);
}

/* "identity:N": a security identity itself, as a remote end holds it (the
 * CLI resolves another node's pod or address to it through the ipcache):
 * a local endpoint of that identity is not taken as this end. */
static bool trace_end_identity(const struct pol_state *st, const char *num, struct trace_end *out,
			       char *err, size_t errlen)
{
	char *end = NULL;
	unsigned long id = strtoul(num, &end, 10);
	if (!*num || *end || id == 0 || id > UINT32_MAX || strspn(num, "0123456789") != strlen(num)) {
		snprintf(err, errlen, "identity:%.20s: expected identity:N, N a number from 1 to %u", num,
			 UINT32_MAX);
		return false;
	}
	out->identity = (uint32_t)id;
	const char *labels = NULL;
	for (size_t i = 0; i < st->nrids; i++)
		if (st->rids[i].identity == id)
			labels = st->rids[i].labels;
	snprintf(out->desc, sizeof(out->desc), "identity %lu (%s%s%.120s)", id, identity_name(out->identity),
		 labels ? ": " : "", labels ? labels : "");
	return true;
}

/* "host", "world", "identity:N", an endpoint ID, "NAMESPACE/POD", or an
 * IPv4 or IPv6 address (a local endpoint's, else the identity of its
 * longest CIDR prefix, else world). */
static bool trace_end_parse(struct pol_state *st, const char *spec, struct trace_end *out,
			    char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	struct in_addr a;
	struct in6_addr a6;
	if (!spec || !*spec) {
		snprintf(err, errlen, "missing (an endpoint ID, NAMESPACE/POD, an IP address, identity:N, host or world)");
		return false;
	}
	if (!strncmp(spec, "identity:", 9))
		return trace_end_identity(st, spec + 9, out, err, errlen);
	if (!strcmp(spec, "host") || !strcmp(spec, "world")) {
		out->identity = spec[0] == 'h' ? FIBRIL_IDENTITY_HOST : FIBRIL_IDENTITY_WORLD;
		snprintf(out->desc, sizeof(out->desc), "%s (identity %u)", spec, out->identity);
		return true;
	}
	if (strspn(spec, "0123456789") == strlen(spec) && strlen(spec) <= 5) {
		long id = strtol(spec, NULL, 10);
		if (id > 0 && id < POL_EP_MAX && st->eps[id]) {
			end_of_ep(out, st->eps[id]);
			return true;
		}
		snprintf(err, errlen, "no local endpoint %.20s", spec);
		return false;
	}
	int family = inet_pton(AF_INET, spec, &a) == 1 ? 4 : inet_pton(AF_INET6, spec, &a6) == 1 ? 6 : 0;
	const void *addr = family == 4 ? (const void *)&a : &a6;
	if (family) {
		for (size_t i = 1; i < st->ep_hi; i++) {
			const struct pol_ep *ep = st->eps[i];
			if (ep && ((family == 4 && ep->has_ipv4 && ep->ipv4.s_addr == a.s_addr) ||
				   (family == 6 && ep->has_ipv6 && !memcmp(&ep->ipv6, &a6, sizeof(a6))))) {
				end_of_ep(out, ep);
				return true;
			}
		}
		/* another node's pod, as the ipcache has it (the identity its
		 * packets carry here) */
		struct fibril_nodes_ipcache_pod pod = {.sz = sizeof(pod)};
		if (st->nodes && st->nodes->ipcache_pod(st->nodes_ctx, family, addr, &pod) == 0 &&
		    pod.identity) {
			out->identity = pod.identity;
			snprintf(out->desc, sizeof(out->desc), "%s (%.64s/%.128s on node %.64s, identity %u)",
				 spec, pod.pod_namespace, pod.pod_name, pod.node, pod.identity);
			return true;
		}
		/* the longest CIDR identity holding it (as the ipcache's longest
		 * prefix decides), else world */
		out->identity = FIBRIL_IDENTITY_WORLD;
		int best = -1;
		for (size_t i = 0; i < st->ncidrs; i++)
			if (st->cidrs[i].cidr.family == family && (int)st->cidrs[i].cidr.plen > best &&
			    pol_addr_in(family, addr, &st->cidrs[i].cidr)) {
				best = st->cidrs[i].cidr.plen;
				out->identity = st->cidrs[i].identity;
			}
		snprintf(out->desc, sizeof(out->desc), "%s (identity %u, %s)", spec, out->identity,
			 identity_name(out->identity));
		return true;
	}
	const char *slash = strchr(spec, '/');
	if (slash)
		for (size_t i = 1; i < st->ep_hi; i++) {
			const struct pol_ep *ep = st->eps[i];
			if (ep && strlen(ep->pod_ns) == (size_t)(slash - spec) &&
			    !strncmp(ep->pod_ns, spec, (size_t)(slash - spec)) && !strcmp(ep->pod_name, slash + 1)) {
				end_of_ep(out, ep);
				return true;
			}
		}
	snprintf(err, errlen, "'%.100s' is no local endpoint, pod, IP address, identity:N, host or world%s", spec,
		 slash ? " (another node's pod: give its address, which the ipcache names)" : "");
	return false;
}

static bool entry_matches(const struct pol_entry *e, uint32_t id, uint8_t proto, uint16_t port)
{
	if (e->identity && e->identity != id)
		return false;
	if (!e->proto)
		return true;
	if (e->proto != proto)
		return false;
	uint16_t mask = e->bits ? (uint16_t)(0xffffu << (16 - e->bits)) : 0;
	return (port & mask) == e->port;
}

/* The entry the datapath's longest-prefix lookup finds for identity id
 * among the endpoint's entries in place (NULL: none). */
static const struct pol_entry *entry_lookup(const struct pol_ep *ep, uint8_t dir, uint32_t id,
					    uint8_t proto, uint16_t port)
{
	const struct pol_entry *best = NULL;
	int best_len = -1;
	for (size_t i = 0; i < ep->nentries; i++) {
		const struct pol_entry *e = &ep->entries[i];
		if (e->dir != dir || e->identity != id || !entry_matches(e, id, proto, port))
			continue;
		int len = e->proto ? 1 + e->bits : 0;
		if (len > best_len) {
			best = e;
			best_len = len;
		}
	}
	return best;
}

/* What the datapath decides from the entries in place, as policy_check()
 * in bpf/lib/policy.h: the remote identity's entry and the any-identity
 * entry are looked up, a deny found either way wins. Adds "match" and
 * "rule" (the rule the drop or verdict event names) to o. */
static void trace_decide(const struct pol_state *st, const struct pol_ep *ep, bool ingress,
			 uint32_t remote, uint8_t proto, uint16_t port, struct json_object *o)
{
	uint8_t dir = ingress ? FIBRIL_DATAPATH_INGRESS : FIBRIL_DATAPATH_EGRESS;
	const char *match = "open";
	const struct pol_entry *v = NULL;
	if (ep && (ingress ? ep->ingress : ep->egress)) {
		const struct pol_entry *exact = entry_lookup(ep, dir, remote, proto, port);
		const struct pol_entry *any = remote ? entry_lookup(ep, dir, 0, proto, port) : NULL;
		v = exact && exact->deny ? exact : any && any->deny ? any : exact ? exact : any;
		match = !v ? "default-deny" : v->deny ? "deny" : "allow";
	}
	json_object_object_add(o, "match", json_object_new_string(match));
	const struct pol_rule_rec *r = v ? rule_by_id(st, v->rule) : NULL;
	json_object_object_add(o, "rule", r ? rule_json(r) : NULL);
	/* the allow-localhost entry: the host's, any port, no rule */
	json_object_object_add(o, "allow_localhost",
			       json_object_new_boolean(v && !v->deny && !v->rule && ingress &&
						       v->identity == FIBRIL_IDENTITY_HOST && !v->proto &&
						       st->allow_localhost));
}

/* One direction at one end: the policies selecting it, the rules that match. */
static struct json_object *trace_dir(struct pol_state *st, const struct pol_ep *subject, bool ingress,
				     uint32_t remote, uint8_t proto, uint16_t port, bool *allowed)
{
	struct json_object *o = json_object_new_object(), *sel = json_object_new_array(),
			   *allow = json_object_new_array(), *deny = json_object_new_array();
	bool enforced = false;
	struct ids ids = {0};
	for (size_t p = 0; subject && p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		for (size_t r = 0; r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			if (!subject->subject_labels ||
			    !pol_selector_match(&rule->subject, subject->subject_labels, pol->ns) ||
			    !(ingress ? rule->has_ingress : rule->has_egress))
				continue;
			enforced = true;
			char name[POL_NS_MAX + POL_NAME_MAX + 96];
			snprintf(name, sizeof(name), "%s %s%s%s", pol_kind_name(pol->kind), pol->ns,
				 pol->ns[0] ? "/" : "", pol->name);
			json_object_array_add(sel, json_object_new_string(name));
			for (size_t k = 0; k < rule->npeers; k++) {
				const struct pol_peer *peer = &rule->peers[k];
				if (peer->ingress != ingress)
					continue;
				struct entry_vec vec = {0};
				ids.n = 0;
				peer_identities(st, pol, peer, &ids);
				peer_entries(st, subject, peer, &ids, &vec);
				bool hit = false;
				for (size_t i = 0; i < vec.n && !hit; i++)
					hit = entry_matches(&vec.v[i], remote, proto, port);
				free(vec.v);
				if (!hit)
					continue;
				char why[sizeof(name) + 64];
				snprintf(why, sizeof(why), "%s rule %zu %s%s peer %zu", name, r,
					 ingress ? "ingress" : "egress", peer->deny ? "Deny" : "", k);
				json_object_array_add(peer->deny ? deny : allow, json_object_new_string(why));
			}
		}
	}
	free(ids.v);
	/* allow-localhost: the host's traffic into an enforced endpoint */
	bool localhost = ingress && enforced && st->allow_localhost && remote == FIBRIL_IDENTITY_HOST;
	const char *reason;
	if (!subject) {
		*allowed = true;
		reason = "not a local endpoint: no policy applies here";
	} else if (!enforced) {
		*allowed = true;
		reason = ingress ? "no policy selects it for ingress (default allow)"
				 : "no policy selects it for egress (default allow)";
	} else if (json_object_array_length(deny)) {
		*allowed = false;
		reason = "denied by a deny rule (a deny always wins)";
	} else if (localhost) {
		*allowed = true;
		reason = "the node's own traffic (kubelet's probes) is always allowed in: "
			 "[policy] allow-localhost = always, not a rule";
		json_object_array_add(allow, json_object_new_string(
						     "allow-localhost (the node's own traffic; "
						     "[policy] allow-localhost = policy makes it an ordinary peer)"));
	} else if (json_object_array_length(allow)) {
		*allowed = true;
		reason = "allowed by a rule";
	} else {
		*allowed = false;
		reason = "selected, and no rule allows it (default deny)";
	}
	json_object_object_add(o, "enforced", json_object_new_boolean(enforced));
	json_object_object_add(o, "verdict", json_object_new_string(*allowed ? "allowed" : "denied"));
	json_object_object_add(o, "reason", json_object_new_string(reason));
	json_object_object_add(o, "selected_by", sel);
	json_object_object_add(o, "allowed_by", allow);
	json_object_object_add(o, "denied_by", deny);
	trace_decide(st, subject, ingress, remote, proto, port, o);
	return o;
}

void pol_get_trace(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct pol_state *st = ud;
	struct trace_end src, dst;
	char err[256];
	if (!trace_end_parse(st, fibril_req_query(req, "src"), &src, err, sizeof(err))) {
		fibril_resp_error(resp, 400, "src: %s", err);
		return;
	}
	if (!trace_end_parse(st, fibril_req_query(req, "dst"), &dst, err, sizeof(err))) {
		fibril_resp_error(resp, 400, "dst: %s", err);
		return;
	}
	const char *dport = fibril_req_query(req, "dport");
	char num[8] = "", pr[8] = "";
	long port = -1;
	if (dport && sscanf(dport, "%7[0-9]/%7s", num, pr) >= 1)
		port = strtol(num, NULL, 10);
	uint8_t proto = !pr[0] || !strcasecmp(pr, "tcp") ? IPPROTO_TCP
			: !strcasecmp(pr, "udp")	  ? IPPROTO_UDP
			: !strcasecmp(pr, "sctp")	  ? IPPROTO_SCTP
							  : 0;
	if (port < 0 || port > 65535 || !proto) {
		fibril_resp_error(resp, 400, "dport: '%.40s' is not PORT[/tcp|udp|sctp]", dport ? dport : "");
		return;
	}
	bool out_ok, in_ok;
	struct json_object *o = json_object_new_object(), *e;
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "src", json_object_new_string(src.desc));
	json_object_object_add(o, "dst", json_object_new_string(dst.desc));
	json_object_object_add(o, "protocol", json_object_new_string(proto == IPPROTO_TCP ? "TCP"
								 : proto == IPPROTO_UDP ? "UDP"
											: "SCTP"));
	json_object_object_add(o, "port", json_object_new_int((int)port));
	e = trace_dir(st, src.ep, false, dst.identity, proto, (uint16_t)port, &out_ok);
	json_object_object_add(o, "egress", e);
	e = trace_dir(st, dst.ep, true, src.identity, proto, (uint16_t)port, &in_ok);
	json_object_object_add(o, "ingress", e);
	json_object_object_add(o, "verdict", json_object_new_string(out_ok && in_ok ? "allowed" : "denied"));
	pol_reply(resp, 200, o);
}
