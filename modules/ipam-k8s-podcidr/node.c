/* modules/ipam-k8s-podcidr/node.c - this node's pod CIDRs from its Node
 * object, in Cilium's order of precedence: spec.podCIDRs (set by the
 * kube-controller-manager, one CIDR per family), else spec.podCIDR, and for
 * a family neither gave, the annotation network.fibril.io/ipv4-pod-cidr or
 * network.fibril.io/ipv6-pod-cidr. An invalid value is an error naming its
 * field: it is never skipped in favour of a lower source, so a typo cannot
 * silently move the node to another CIDR. */
#include "podcidr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#define MAX_HOST_BITS 24 /* the allocator's limit: 2^24 addresses */

static struct json_object *member(struct json_object *o, const char *key)
{
	struct json_object *v;
	return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v)
		       ? v
		       : NULL;
}

/* Parses one value found at `field` into out (family checked when want is
 * 4 or 6). */
static int parse_one(struct json_object *v, const char *field, int want, struct pc_node_cidrs *out,
		     char *why, size_t len)
{
	if (!json_object_is_type(v, json_type_string)) {
		snprintf(why, len, "%s is not a string", field);
		return -EINVAL;
	}
	const char *text = json_object_get_string(v);
	struct fibril_cidr c;
	if (fibril_cidr_parse(text, &c)) {
		snprintf(why, len,
			 "%s \"%s\" is not a valid CIDR (e.g. 10.0.1.0/24 or fd00:1::/112; host bits "
			 "must be zero)",
			 field, text);
		return -EINVAL;
	}
	if (want && c.ip.family != want) {
		snprintf(why, len, "%s \"%s\" is not an IPv%d CIDR", field, text, want);
		return -EINVAL;
	}
	int host_bits = (c.ip.family == 6 ? 128 : 32) - c.prefix_len;
	if (host_bits > MAX_HOST_BITS) {
		snprintf(why, len, "%s \"%s\" is too large: at most 2^%d addresses (/%d for IPv%d)",
			 field, text, MAX_HOST_BITS, (c.ip.family == 6 ? 128 : 32) - MAX_HOST_BITS,
			 c.ip.family);
		return -EINVAL;
	}
	if (host_bits < 2) {
		snprintf(why, len, "%s \"%s\" is too small: no address left for pods", field, text);
		return -EINVAL;
	}
	int i = c.ip.family == 6;
	if (out->have[i]) {
		snprintf(why, len, "%s \"%s\": a second IPv%d CIDR (%s already gave one)", field, text,
			 c.ip.family, out->source[i]);
		return -EINVAL;
	}
	out->have[i] = true;
	out->cidr[i] = c;
	snprintf(out->source[i], sizeof(out->source[i]), "%s", field);
	return 0;
}

int pc_node_cidrs(const char *node_json, struct pc_node_cidrs *out, char *why, size_t len)
{
	memset(out, 0, sizeof(*out));
	struct json_object *node = node_json ? json_tokener_parse(node_json) : NULL;
	if (!node) {
		snprintf(why, len, "the Node object is not valid JSON");
		return -EINVAL;
	}
	struct json_object *spec = member(node, "spec");
	struct json_object *cidrs = member(spec, "podCIDRs"), *single = member(spec, "podCIDR");
	int rc = 0;
	size_t n = cidrs && json_object_is_type(cidrs, json_type_array)
			   ? json_object_array_length(cidrs)
			   : 0;
	if (cidrs && !json_object_is_type(cidrs, json_type_array)) {
		snprintf(why, len, "spec.podCIDRs is not a list");
		rc = -EINVAL;
	} else if (n > PC_NFAM) {
		snprintf(why, len, "spec.podCIDRs has %zu entries (at most one per family)", n);
		rc = -EINVAL;
	} else if (n) {
		for (size_t i = 0; i < n && rc == 0; i++) {
			char field[32];
			snprintf(field, sizeof(field), "spec.podCIDRs[%zu]", i);
			rc = parse_one(json_object_array_get_idx(cidrs, i), field, 0, out, why, len);
		}
	} else if (single && !(json_object_is_type(single, json_type_string) &&
			       !*json_object_get_string(single))) {
		rc = parse_one(single, "spec.podCIDR", 0, out, why, len);
	}
	struct json_object *ann = member(member(node, "metadata"), "annotations");
	static const char *const keys[PC_NFAM] = {PC_ANNOT_V4_CIDR, PC_ANNOT_V6_CIDR};
	for (int i = 0; i < PC_NFAM && rc == 0; i++) {
		struct json_object *v = member(ann, keys[i]);
		if (out->have[i] || !v ||
		    (json_object_is_type(v, json_type_string) && !*json_object_get_string(v)))
			continue;
		char field[PC_SRC_LEN];
		snprintf(field, sizeof(field), "annotation %s", keys[i]);
		rc = parse_one(v, field, i ? 6 : 4, out, why, len);
	}
	json_object_put(node);
	if (rc) {
		memset(out->have, 0, sizeof(out->have));
		return rc;
	}
	return out->have[0] + out->have[1];
}
