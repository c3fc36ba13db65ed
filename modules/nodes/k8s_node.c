/* modules/nodes/k8s_node.c - a Kubernetes Node object (JSON, as the API
 * server sends it: outside input, every field checked) -> struct
 * fibril_node, for the nodes module's Kubernetes source (k8s_source.c):
 * metadata.name; status.addresses InternalIP (the first of each family);
 * spec.podCIDRs (else spec.podCIDR, else - annotations read, [nodes]
 * k8s-node-annotations - the network.fibril.io/ipv4-pod-cidr and
 * ipv6-pod-cidr annotations); the tunnel endpoint from the
 * network.fibril.io/tunnel-endpoint annotation (annotations read), else the
 * IPv4 InternalIP. A spec pod CIDR always wins over the annotations.
 * A Node that does not fit is refused whole, naming the field. */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json.h>

#define ANN_PREFIX "network.fibril.io/"

static struct json_object *path_get(struct json_object *o, const char *a, const char *b)
{
	struct json_object *x = NULL, *y = NULL;
	if (!json_object_object_get_ex(o, a, &x) || !json_object_is_type(x, json_type_object))
		return NULL;
	if (!b)
		return x;
	return json_object_object_get_ex(x, b, &y) ? y : NULL;
}

static int add_cidr(struct fibril_node *n, const char *text, const char *field, char *why,
		    size_t len)
{
	struct fibril_node_cidr c;
	if (nodes_cidr_parse(text, &c)) {
		snprintf(why, len, "%s: \"%.64s\" is not a CIDR (host bits zero)", field, text);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n->n_cidrs; i++)
		if (!memcmp(&n->cidrs[i], &c, sizeof(c)))
			return 0;
	if (n->n_cidrs >= FIBRIL_NODE_MAX_CIDRS) {
		snprintf(why, len, "%s: more than %d pod CIDRs", field, FIBRIL_NODE_MAX_CIDRS);
		return -EINVAL;
	}
	n->cidrs[n->n_cidrs++] = c;
	return 0;
}

int nodes_k8s_decode(const char *json, size_t len, bool annotations, struct fibril_node *out,
		     char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	out->sz = sizeof(*out);
	out->source = FIBRIL_NODE_SOURCE_K8S;
	struct json_tokener *tok = json_tokener_new();
	if (!tok) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	struct json_object *o = json_tokener_parse_ex(tok, json, (int)len);
	bool complete = json_tokener_get_error(tok) == json_tokener_success;
	json_tokener_free(tok);
	int rc = -EINVAL;
	if (!o || !complete || !json_object_is_type(o, json_type_object)) {
		snprintf(why, whylen, "not a JSON object");
		goto out;
	}
	struct json_object *x = path_get(o, "metadata", "name");
	const char *name = x && json_object_is_type(x, json_type_string) ? json_object_get_string(x) : NULL;
	if (!name || !nodes_name_valid(name)) {
		snprintf(why, whylen, "metadata.name: not a node name");
		goto out;
	}
	snprintf(out->name, sizeof(out->name), "%s", name);

	struct json_object *addrs = path_get(o, "status", "addresses");
	if (addrs && !json_object_is_type(addrs, json_type_array)) {
		snprintf(why, whylen, "status.addresses: not a list");
		goto out;
	}
	for (size_t i = 0; addrs && i < json_object_array_length(addrs); i++) {
		struct json_object *a = json_object_array_get_idx(addrs, i), *t = NULL, *v = NULL;
		if (!json_object_is_type(a, json_type_object) ||
		    !json_object_object_get_ex(a, "type", &t) ||
		    !json_object_object_get_ex(a, "address", &v) ||
		    !json_object_is_type(t, json_type_string) || !json_object_is_type(v, json_type_string)) {
			snprintf(why, whylen, "status.addresses[%zu]: needs type and address strings", i);
			goto out;
		}
		if (strcmp(json_object_get_string(t), "InternalIP") != 0)
			continue;
		const char *text = json_object_get_string(v);
		struct in6_addr a6;
		struct in_addr a4;
		if (inet_pton(AF_INET, text, &a4) == 1) {
			if (!out->has_ipv4) {
				out->ipv4 = a4;
				out->has_ipv4 = true;
			}
		} else if (inet_pton(AF_INET6, text, &a6) == 1) {
			if (!out->has_ipv6) {
				out->ipv6 = a6;
				out->has_ipv6 = true;
			}
		} else {
			snprintf(why, whylen, "status.addresses[%zu].address: \"%.64s\" is not an IP address",
				 i, text);
			goto out;
		}
	}

	struct json_object *cidrs = path_get(o, "spec", "podCIDRs");
	bool spec_cidrs = cidrs != NULL;
	if (cidrs) {
		if (!json_object_is_type(cidrs, json_type_array)) {
			snprintf(why, whylen, "spec.podCIDRs: not a list");
			goto out;
		}
		for (size_t i = 0; i < json_object_array_length(cidrs); i++) {
			struct json_object *c = json_object_array_get_idx(cidrs, i);
			char field[48];
			snprintf(field, sizeof(field), "spec.podCIDRs[%zu]", i);
			if (!json_object_is_type(c, json_type_string)) {
				snprintf(why, whylen, "%s: not a string", field);
				goto out;
			}
			if (add_cidr(out, json_object_get_string(c), field, why, whylen))
				goto out;
		}
	} else if ((x = path_get(o, "spec", "podCIDR")) && json_object_is_type(x, json_type_string)) {
		if (add_cidr(out, json_object_get_string(x), "spec.podCIDR", why, whylen))
			goto out;
		spec_cidrs = true;
	}
	struct json_object *ann = annotations ? path_get(o, "metadata", "annotations") : NULL;
	if (ann && json_object_is_type(ann, json_type_object)) {
		static const char *const keys[] = {ANN_PREFIX "ipv4-pod-cidr",
						   ANN_PREFIX "ipv6-pod-cidr"};
		for (size_t i = 0; i < 2 && !spec_cidrs; i++) {
			struct json_object *v = NULL;
			if (json_object_object_get_ex(ann, keys[i], &v) &&
			    json_object_is_type(v, json_type_string) &&
			    add_cidr(out, json_object_get_string(v), keys[i], why, whylen))
				goto out;
		}
		struct json_object *t = NULL;
		if (json_object_object_get_ex(ann, ANN_PREFIX "tunnel-endpoint", &t)) {
			if (!json_object_is_type(t, json_type_string) ||
			    inet_pton(AF_INET, json_object_get_string(t), &out->tunnel_endpoint) != 1) {
				snprintf(why, whylen, ANN_PREFIX "tunnel-endpoint: not an IPv4 address");
				goto out;
			}
			out->has_tunnel_endpoint = true;
		}
	}
	if (!out->has_tunnel_endpoint && out->has_ipv4) {
		out->tunnel_endpoint = out->ipv4;
		out->has_tunnel_endpoint = true;
	}
	out->last_seen_unix = (int64_t)time(NULL);
	rc = 0;
out:
	if (o)
		json_object_put(o);
	return rc;
}
