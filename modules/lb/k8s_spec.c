/* modules/lb/k8s_spec.c - what lb reads of a Kubernetes Service's spec
 * (a json-c tree) besides its fields: its IP families
 * (lb_k8s_svc_families) and whether it is one lb can program
 * (lb_k8s_svc_valid: ports and protocols, source ranges, addresses; a
 * one-line reason when not). Pure functions of the JSON, so that the
 * projections (k8s_proj.c) build and test without the module's host side. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "k8s_proj.h"
#include "lb_mod.h"

/* The IP families of a Service (kube-proxy programs a Service only in the
 * proxier of its families): spec.ipFamilies ("IPv4", "IPv6"), else the
 * families of its clusterIPs (cips), else (neither says) both. */
void lb_k8s_svc_families(struct json_object *spec, struct json_object *cips, bool *v4, bool *v6)
{
	*v4 = *v6 = false;
	struct json_object *fams = NULL;
	if (spec && json_object_object_get_ex(spec, "ipFamilies", &fams) &&
	    json_object_is_type(fams, json_type_array))
		for (size_t i = 0; i < json_object_array_length(fams); i++) {
			const char *f = json_object_get_string(json_object_array_get_idx(fams, i));
			*v4 |= f && !strcmp(f, "IPv4");
			*v6 |= f && !strcmp(f, "IPv6");
		}
	for (size_t i = 0; !*v4 && !*v6 && cips && json_object_is_type(cips, json_type_array) &&
			   i < json_object_array_length(cips);
	     i++) {
		const char *ip = json_object_get_string(json_object_array_get_idx(cips, i));
		struct in6_addr a6;
		struct in_addr a4;
		if (ip && inet_pton(AF_INET, ip, &a4) == 1)
			*v4 = true;
		else if (ip && inet_pton(AF_INET6, ip, &a6) == 1)
			*v6 = true;
	}
	if (!*v4 && !*v6)
		*v4 = *v6 = true;
}

static struct json_object *field(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;
	return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static bool proto_ok(struct json_object *v)
{
	const char *p = v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
	return !p || !strcmp(p, "TCP") || !strcmp(p, "UDP") || !strcmp(p, "SCTP");
}

/* Checks a Service's spec: its ports and protocols, source ranges and
 * addresses; a one-line reason when bad. */
bool lb_k8s_svc_valid(struct json_object *spec, char *why, size_t len)
{
	struct json_object *ports = field(spec, "ports");
	if (!ports || !json_object_is_type(ports, json_type_array)) {
		snprintf(why, len, "spec.ports is missing");
		return false;
	}
	for (size_t i = 0; i < json_object_array_length(ports); i++) {
		struct json_object *p = json_object_array_get_idx(ports, i), *pn = field(p, "port");
		int64_t v = pn && json_object_is_type(pn, json_type_int) ? json_object_get_int64(pn) : 0;
		if (v < 1 || v > 65535) {
			snprintf(why, len, "spec.ports[%zu].port is not 1-65535", i);
			return false;
		}
		if (!proto_ok(field(p, "protocol"))) {
			snprintf(why, len, "spec.ports[%zu].protocol is not TCP, UDP or SCTP", i);
			return false;
		}
	}
	struct json_object *ranges = field(spec, "loadBalancerSourceRanges");
	size_t nr = ranges && json_object_is_type(ranges, json_type_array)
			    ? json_object_array_length(ranges) : 0;
	if (nr > LB_SRC_RANGES_PER_SVC_MAX) {
		snprintf(why, len, "spec.loadBalancerSourceRanges has more than %u entries",
			 LB_SRC_RANGES_PER_SVC_MAX);
		return false;
	}
	for (size_t i = 0; i < nr; i++) {
		struct lb_cidr c;
		const char *r = json_object_get_string(json_object_array_get_idx(ranges, i));
		if (lb_parse_cidr(r, &c) < 0) {
			snprintf(why, len, "spec.loadBalancerSourceRanges[%zu] '%.60s' is not a CIDR", i,
				 r ? r : "");
			return false;
		}
	}
	const char *lists[] = {"clusterIPs", "externalIPs"};
	for (size_t l = 0; l < 2; l++) {
		struct json_object *ips = field(spec, lists[l]);
		for (size_t i = 0; ips && json_object_is_type(ips, json_type_array) &&
				   i < json_object_array_length(ips);
		     i++) {
			const char *ip = json_object_get_string(json_object_array_get_idx(ips, i));
			struct lb_addr a;
			if (ip && !strcmp(ip, "None"))
				continue;
			if (!k8s_ip_of(ip, &a)) {
				snprintf(why, len, "spec.%s[%zu] '%.60s' is not an IP address", lists[l], i,
					 ip ? ip : "");
				return false;
			}
		}
	}
	return true;
}
