/* modules/health/endpoint_addr.c - the node's health endpoint address: the
 * last usable IPv4 address of the node's first IPv4 pod CIDR (so every
 * peer derives it from the node registry alone), put as a /32 on the
 * loopback device of the agent's network namespace through rtnetlink
 * (libnl), where the responder listens on it too. A probe of it travels
 * the path pod traffic takes: the route to the node's pod CIDR and the
 * node's forwarding, which a probe of the node address does not. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include <netlink/netlink.h>
#include <netlink/route/addr.h>

bool health_ep_addr_of(const struct fibril_node *n, struct in_addr *out)
{
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++) {
		const struct fibril_node_cidr *c = &n->cidrs[i];
		if (c->family != 4 || c->prefix_len > 30)
			continue;
		uint32_t base;
		memcpy(&base, c->addr, 4);
		uint32_t host_mask = c->prefix_len ? (1u << (32 - c->prefix_len)) - 1 : 0xffffffffu;
		uint32_t last = (ntohl(base) | host_mask) - 1; /* the broadcast address minus one */
		out->s_addr = htonl(last);
		return true;
	}
	return false;
}

static int addr_op(struct in_addr a, bool add, char *why, size_t len)
{
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	int rc = nl_connect(sk, NETLINK_ROUTE);
	struct rtnl_addr *ra = rc ? NULL : rtnl_addr_alloc();
	struct nl_addr *local = ra ? nl_addr_build(AF_INET, &a, 4) : NULL;
	if (rc || !ra || !local) {
		snprintf(why, len, "cannot open an rtnetlink socket: %s", rc ? nl_geterror(rc) : "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	nl_addr_set_prefixlen(local, 32);
	rtnl_addr_set_ifindex(ra, (int)if_nametoindex("lo"));
	rtnl_addr_set_family(ra, AF_INET);
	rtnl_addr_set_local(ra, local);
	rtnl_addr_set_scope(ra, RT_SCOPE_UNIVERSE);
	rc = add ? rtnl_addr_add(sk, ra, NLM_F_REPLACE) : rtnl_addr_delete(sk, ra, 0);
	if (rc == -NLE_EXIST)
		rc = 0;
	if (rc) {
		char s[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &a, s, sizeof(s));
		snprintf(why, len, "cannot %s %s/32 %s lo: %s", add ? "add" : "remove", s,
			 add ? "to" : "from", nl_geterror(rc));
		rc = -EIO;
	}
out:
	if (local)
		nl_addr_put(local);
	if (ra)
		rtnl_addr_put(ra);
	nl_socket_free(sk);
	return rc;
}

int health_ep_addr_add(struct in_addr a, char *why, size_t len)
{
	return addr_op(a, true, why, len);
}

void health_ep_addr_del(struct in_addr a)
{
	char why[128];
	addr_op(a, false, why, sizeof(why));
}
