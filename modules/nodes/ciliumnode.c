/* modules/nodes/ciliumnode.c - this node's CiliumNode (cilium.io/v2,
 * cluster-scoped, named after the node) in CRD mode (issue 27), and what
 * peers read from the others': what a Kubernetes Node does not carry.
 *
 * Written (POST; AlreadyExists or Conflict: a live GET, then a PUT at its
 * resourceVersion, CN_TRIES times; again when it is deleted):
 *   spec.addresses[]      {"type": "InternalIP", "ip": the node IPs} and
 *                         {"type": "TunnelEndpoint", "ip": the VXLAN
 *                         underlay address} (fibril's type)
 *   spec.health.ipv4/ipv6 the health endpoint's addresses (the health
 *                         module's: the last usable address of the first
 *                         pod CIDR of each family, the last but one in IPv6)
 *   spec.ipam.podCIDRs    the active IPAM's pools (e.g. ipam-cluster-pool's
 *                         node CIDR)
 * Read (k8s_source.c merges it into the node of the same name): the pod
 * CIDRs when the Node has none (cluster-pool IPAM: Kubernetes allocates
 * none), an InternalIP of a family the Node lacks, the tunnel endpoint when
 * the Node gives none of its own. A CiliumNode is written by a possibly
 * hostile node: what it adds goes through nodes_validate as a kvstore
 * record does (no 0.0.0.0/0, no overlap, no other node's or this node's
 * IP); a CiliumNode that does not parse or is refused is logged, counted,
 * and the Node alone is used. */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#define CN_TRIES 5

static struct json_object *field(struct json_object *o, const char *a, const char *b)
{
	struct json_object *x = NULL, *y = NULL;

	if (!o || !json_object_object_get_ex(o, a, &x))
		return NULL;
	if (!b)
		return x;
	return json_object_is_type(x, json_type_object) && json_object_object_get_ex(x, b, &y) ? y
											     : NULL;
}

/* ---- read: a peer's CiliumNode into its node ------------------------------------------------ */

/* 1: n took something from the CiliumNode, 0: nothing to take, -EINVAL (why) */
static int merge(const char *json, struct fibril_node *n, char *why, size_t len)
{
	struct json_object *o = json_tokener_parse(json);
	struct json_object *spec = field(o, "spec", NULL);
	struct json_object *addrs = field(spec, "addresses", NULL);
	struct json_object *ipam = field(spec, "ipam", NULL);
	struct json_object *cidrs = field(ipam, "podCIDRs", NULL);
	bool node_tep = n->has_tunnel_endpoint &&
			!(n->has_ipv4 && n->tunnel_endpoint.s_addr == n->ipv4.s_addr);
	int took = 0, rc = 0;

	if (!o || !json_object_is_type(o, json_type_object) ||
	    (spec && !json_object_is_type(spec, json_type_object))) {
		snprintf(why, len, "not a JSON object with an object spec");
		rc = -EINVAL;
		goto out;
	}
	if (addrs && !json_object_is_type(addrs, json_type_array)) {
		snprintf(why, len, "spec.addresses: not a list");
		rc = -EINVAL;
		goto out;
	}
	for (size_t i = 0; addrs && i < json_object_array_length(addrs); i++) {
		struct json_object *a = json_object_array_get_idx(addrs, i);
		struct json_object *t = field(a, "type", NULL), *ip = field(a, "ip", NULL);
		struct in_addr a4;
		struct in6_addr a6;
		const char *text = ip && json_object_is_type(ip, json_type_string) ?
				   json_object_get_string(ip) : NULL;
		bool v4 = text && inet_pton(AF_INET, text, &a4) == 1;
		bool v6 = text && !v4 && inet_pton(AF_INET6, text, &a6) == 1;

		if (!t || !json_object_is_type(t, json_type_string) || (!v4 && !v6)) {
			snprintf(why, len, "spec.addresses[%zu]: needs a type and an IP address", i);
			rc = -EINVAL;
			goto out;
		}
		const char *type = json_object_get_string(t);

		if (!strcmp(type, "InternalIP") && v4 && !n->has_ipv4) {
			n->ipv4 = a4;
			n->has_ipv4 = true;
			took = 1;
		} else if (!strcmp(type, "InternalIP") && v6 && !n->has_ipv6) {
			n->ipv6 = a6;
			n->has_ipv6 = true;
			took = 1;
		} else if (!strcmp(type, "TunnelEndpoint") && v4 && !node_tep &&
			   (!n->has_tunnel_endpoint || n->tunnel_endpoint.s_addr != a4.s_addr)) {
			n->tunnel_endpoint = a4;
			n->has_tunnel_endpoint = true;
			took = 1;
		}
	}
	if (cidrs && !json_object_is_type(cidrs, json_type_array)) {
		snprintf(why, len, "spec.ipam.podCIDRs: not a list");
		rc = -EINVAL;
		goto out;
	}
	if (cidrs && !n->n_cidrs) {
		for (size_t i = 0; i < json_object_array_length(cidrs); i++) {
			struct json_object *c = json_object_array_get_idx(cidrs, i);
			struct fibril_node_cidr pc;

			if (!json_object_is_type(c, json_type_string) ||
			    nodes_cidr_parse(json_object_get_string(c), &pc)) {
				snprintf(why, len, "spec.ipam.podCIDRs[%zu]: not a CIDR (host bits zero)", i);
				rc = -EINVAL;
				goto out;
			}
			if (n->n_cidrs >= FIBRIL_NODE_MAX_CIDRS) {
				snprintf(why, len, "spec.ipam.podCIDRs: more than %d", FIBRIL_NODE_MAX_CIDRS);
				rc = -EINVAL;
				goto out;
			}
			n->cidrs[n->n_cidrs++] = pc;
			took = 1;
		}
	}
	if (!n->has_tunnel_endpoint && n->has_ipv4) {
		n->tunnel_endpoint = n->ipv4;
		n->has_tunnel_endpoint = true;
	}
	rc = took;
out:
	json_object_put(o);
	return rc;
}

void nodes_cn_merge(struct nodes *s, struct fibril_node *n)
{
	char why[NODES_WHY_LEN];
	const char *json;

	if (!s->cn_enabled || !(json = s->k8s->get(s->k8sctx, FIBRIL_K8S_CILIUM_NODES, "", n->name)))
		return;
	struct fibril_node merged = *n;
	int rc = merge(json, &merged, why, sizeof(why));

	if (rc > 0 && nodes_validate(s, &merged, why, sizeof(why)))
		rc = -EINVAL;
	if (rc < 0) {
		s->stats.records_refused++;
		fibril_warn(s->m, "CiliumNode %s refused: %s; its Kubernetes Node alone is used", n->name,
			    why);
		return;
	}
	if (rc > 0)
		*n = merged;
}

int nodes_cn_on_event(const struct fibril_event *ev, void *ud)
{
	struct nodes *s = ud;
	const struct fibril_k8s_event *k = ev->payload;
	const char *name;

	if (s->stopping || !s->cn_enabled || ev->payload_len < sizeof(*k) ||
	    !(name = FIBRIL_K8S_STR(k, name)))
		return 0;
	if (!strcmp(name, s->self.name)) {
		if (k->type == FIBRIL_K8S_DELETED) /* ours goes back */
			nodes_cn_publish(s);
		return 0;
	}
	nodes_k8s_reread(s, name); /* its Node again, with what this adds or no longer adds */
	return 0;
}

/* ---- write: this node's ----------------------------------------------------------------------- */

static void add_addr(struct json_object *arr, const char *type, int family, const void *addr)
{
	char text[INET6_ADDRSTRLEN];
	struct json_object *a = json_object_new_object();

	inet_ntop(family, addr, text, sizeof(text));
	json_object_object_add(a, "type", json_object_new_string(type));
	json_object_object_add(a, "ip", json_object_new_string(text));
	json_object_array_add(arr, a);
}

/* the health module's endpoint address of the first pod CIDR of family f */
static bool health_addr(const struct fibril_node *n, int f, uint8_t out[16])
{
	for (uint32_t i = 0; i < n->n_cidrs; i++) {
		const struct fibril_node_cidr *c = &n->cidrs[i];

		if (c->family != f || c->prefix_len > (f == 4 ? 30 : 126))
			continue;
		memcpy(out, c->addr, 16);
		for (unsigned bit = c->prefix_len; bit < (f == 4 ? 32u : 128u); bit++)
			out[bit / 8] |= (uint8_t)(0x80u >> (bit % 8));
		out[f == 4 ? 3 : 15] &= 0xfe; /* broadcast - 1; IPv6: ...fffe */
		return true;
	}
	return false;
}

static char *cn_body(struct nodes *s, const char *rv)
{
	const struct fibril_node *n = &s->self;
	struct json_object *doc = json_object_new_object(), *md = json_object_new_object();
	struct json_object *spec = json_object_new_object(), *addrs = json_object_new_array();
	struct json_object *health = json_object_new_object(), *ipam = json_object_new_object();
	struct json_object *cidrs = json_object_new_array();
	char text[64];
	uint8_t h[16];

	json_object_object_add(doc, "apiVersion", json_object_new_string("cilium.io/v2"));
	json_object_object_add(doc, "kind", json_object_new_string("CiliumNode"));
	json_object_object_add(md, "name", json_object_new_string(n->name));
	if (rv)
		json_object_object_add(md, "resourceVersion", json_object_new_string(rv));
	json_object_object_add(doc, "metadata", md);
	if (n->has_ipv4)
		add_addr(addrs, "InternalIP", AF_INET, &n->ipv4);
	if (n->has_ipv6)
		add_addr(addrs, "InternalIP", AF_INET6, &n->ipv6);
	if (n->has_tunnel_endpoint)
		add_addr(addrs, "TunnelEndpoint", AF_INET, &n->tunnel_endpoint);
	json_object_object_add(spec, "addresses", addrs);
	if (health_addr(n, 4, h))
		json_object_object_add(health, "ipv4", json_object_new_string(
			inet_ntop(AF_INET, h, text, sizeof(text))));
	if (health_addr(n, 6, h))
		json_object_object_add(health, "ipv6", json_object_new_string(
			inet_ntop(AF_INET6, h, text, sizeof(text))));
	json_object_object_add(spec, "health", health);
	for (uint32_t i = 0; i < n->n_cidrs; i++)
		json_object_array_add(cidrs, json_object_new_string(
			nodes_cidr_text(&n->cidrs[i], text, sizeof(text))));
	json_object_object_add(ipam, "podCIDRs", cidrs);
	json_object_object_add(spec, "ipam", ipam);
	json_object_object_add(doc, "spec", spec);
	char *out = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));

	json_object_put(doc);
	return out;
}

static void cn_send(struct nodes *s, const char *method, const char *rv);

static void on_cn_write(void *ud, int status, const char *reason, const char *body, int err,
			const char *message)
{
	struct nodes *s = ud;
	bool reading = s->cn_reading;

	(void)err;
	s->cn_inflight = false;
	s->cn_reading = false;
	if (s->stopping)
		return;
	if (reading && status == 200) {
		struct json_object *o = json_tokener_parse(body), *rv = field(o, "metadata", "resourceVersion");

		if (rv && json_object_is_type(rv, json_type_string))
			cn_send(s, "PUT", json_object_get_string(rv));
		json_object_put(o);
		return;
	}
	if (reading && status == 404) { /* gone meanwhile: create it */
		cn_send(s, "POST", NULL);
		return;
	}
	if (status == 200 || status == 201) {
		if (!s->cn_published)
			fibril_info(s->m, "CiliumNode %s written (addresses, health, pod CIDRs)",
				    s->self.name);
		s->cn_published = true;
		s->cn_tries = 0;
		return;
	}
	if (status == 404 && body && strstr(body, "could not find the requested resource")) {
		fibril_warn(s->m, "CiliumNode %s: not written: the API server does not serve "
			    "ciliumnodes.cilium.io (its CustomResourceDefinition is not installed: "
			    "kubectl apply -f deploy/kubernetes/crds.yaml)", s->self.name);
		return;
	}
	if (status == 409 && ++s->cn_tries <= CN_TRIES) { /* AlreadyExists or Conflict: read it */
		s->cn_reading = true;
		cn_send(s, "GET", NULL);
		return;
	}
	s->ipc.stats.errors++;
	fibril_warn(s->m, "CiliumNode %s: not written: %d %s%s", s->self.name, status,
		    status ? reason : "", status ? "" : message);
}

static void cn_send(struct nodes *s, const char *method, const char *rv)
{
	char *body = strcmp(method, "GET") ? cn_body(s, rv) : NULL;

	if (strcmp(method, "GET") && !body)
		return;
	s->cn_inflight = true;
	if (s->k8s->request(s->k8sctx, method, FIBRIL_K8S_CILIUM_NODES, NULL,
			    strcmp(method, "POST") ? s->self.name : NULL, body, on_cn_write, s)) {
		s->cn_inflight = s->cn_reading = false;
		s->ipc.stats.errors++;
	}
	free(body);
}

void nodes_cn_publish(struct nodes *s)
{
	if (!s->cn_enabled || s->cn_inflight || s->stopping)
		return;
	s->cn_tries = 0;
	cn_send(s, "POST", NULL);
}

int nodes_cn_start(struct nodes *s, char *why, size_t len)
{
	int rc = s->k8s->watch_resource(s->k8sctx, FIBRIL_K8S_CILIUM_NODES);

	if (rc) {
		snprintf(why, len, "CRD mode: cannot watch %s: %s", FIBRIL_K8S_CILIUM_NODES,
			 strerror(-rc));
		return rc;
	}
	if (!s->cn_sub)
		s->cn_sub = fibril_bus_subscribe(s->m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CILIUM_NODES,
						 1, nodes_cn_on_event, s);
	if (!s->cn_sub) {
		snprintf(why, len, "CRD mode: out of memory");
		return -ENOMEM;
	}
	s->cn_enabled = true;
	return 0;
}

void nodes_cn_free(struct nodes *s)
{
	if (s->cn_sub)
		fibril_bus_unsubscribe(s->cn_sub);
	s->cn_sub = NULL;
	s->cn_enabled = false;
}
