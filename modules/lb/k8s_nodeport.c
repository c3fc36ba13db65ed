/* modules/lb/k8s_nodeport.c - where a Kubernetes Service's NodePorts are
 * served: the node's own addresses when [lb] node-addresses is unset (as
 * kube-proxy and Cilium default), and only those of the Service's IP
 * families (a Service of one family gets no NodePort of the other); and
 * whether a Service's spec is one lb can program (lb_k8s_svc_valid). */
#include <arpa/inet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

#include "lb_mod.h"
#include "node_addrs.h"

/* The node's addresses for NodePorts: every IPv4 address and every global
 * IPv6 address (link-local and loopback left out) of a device that is not
 * a loopback, as the node has them when the module starts, deduplicated;
 * the first max into out. Returns their number (0: none or unreadable,
 * logged). */
size_t lb_k8s_default_node_addrs(struct fibril_module *m, struct lb_addr *out, size_t max)
{
	struct mod_node_addr *all = NULL;
	size_t nall = 0, n = 0;
	if (mod_node_addrs(&all, &nall) < 0) {
		fibril_warn(m, "the node's addresses are unreadable: no NodePorts from Kubernetes "
			       "(set [lb] node-addresses)");
		return 0;
	}
	char list[512] = "";
	size_t off = 0;
	for (size_t i = 0; i < nall && n < max; i++) {
		const struct mod_node_addr *a = &all[i];
		if ((a->flags & IFF_LOOPBACK) || (a->family == AF_INET6 && !mod_node_addr_v6_global(a)))
			continue;
		struct lb_addr la;
		memset(&la, 0, sizeof(la));
		if (a->family == AF_INET) {
			la.a[10] = la.a[11] = 0xff;
			memcpy(la.a + 12, &a->addr.v4, 4);
		} else {
			memcpy(la.a, &a->addr.v6, 16);
		}
		if (lb_addr_in(out, n, &la))
			continue;
		out[n++] = la;
		char txt[INET6_ADDRSTRLEN];
		inet_ntop(a->family, &a->addr, txt, sizeof(txt));
		if (off < sizeof(list)) {
			int w = snprintf(list + off, sizeof(list) - off, "%s%s", off ? " " : "", txt);
			off += w > 0 ? (size_t)w : 0;
		}
	}
	free(all);
	fibril_info(m, "NodePorts from Kubernetes on the node's addresses: %s", n ? list : "(none)");
	return n;
}

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

static bool is_ip(const char *s, struct lb_addr *a)
{
	char buf[80];
	uint16_t p;
	if (!s || strlen(s) > 60)
		return false;
	snprintf(buf, sizeof(buf), strchr(s, ':') ? "[%s]:1" : "%s:1", s);
	return lb_parse_addrport(buf, a, &p) == 0;
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
			if (!is_ip(ip, &a)) {
				snprintf(why, len, "spec.%s[%zu] '%.60s' is not an IP address", lists[l], i,
					 ip ? ip : "");
				return false;
			}
		}
	}
	return true;
}
