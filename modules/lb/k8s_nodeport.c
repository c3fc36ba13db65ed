/* modules/lb/k8s_nodeport.c - where a Kubernetes Service's NodePorts are
 * served: the node's own addresses when [lb] node-addresses is unset (as
 * kube-proxy and Cilium default), and only those of the Service's IP
 * families (a Service of one family gets no NodePort of the other; the
 * families are read by lb_k8s_svc_families, k8s_spec.c). */
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
