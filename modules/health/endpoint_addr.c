/* modules/health/endpoint_addr.c - the node's health endpoint addresses:
 * the last usable IPv4 address of the node's first IPv4 pod CIDR, and on a
 * dual-stack node the last address but one of its first IPv6 pod CIDR (so
 * every peer derives them from the node registry alone), put as a /32
 * (/128) on the
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

bool health_ep_addr6_of(const struct fibril_node *n, struct in6_addr *out)
{
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++) {
		const struct fibril_node_cidr *c = &n->cidrs[i];
		if (c->family != 6 || c->prefix_len > 126)
			continue;
		uint8_t a[16];
		memcpy(a, c->addr, 16);
		for (unsigned bit = c->prefix_len; bit < 128; bit++) /* every host bit set */
			a[bit / 8] |= (uint8_t)(0x80u >> (bit % 8));
		a[15] &= 0xfe; /* ...ffff:fffe, as IPv4's broadcast minus one */
		memcpy(out, a, 16);
		return true;
	}
	return false;
}

static int addr_op(struct health_addr a, bool add, char *why, size_t len)
{
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	int rc = nl_connect(sk, NETLINK_ROUTE);
	struct rtnl_addr *ra = rc ? NULL : rtnl_addr_alloc();
	bool v6 = a.family == AF_INET6;
	struct nl_addr *local = ra ? nl_addr_build(a.family, &a.v6, v6 ? 16 : 4) : NULL;
	if (rc || !ra || !local) {
		snprintf(why, len, "cannot open an rtnetlink socket: %s", rc ? nl_geterror(rc) : "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	nl_addr_set_prefixlen(local, v6 ? 128 : 32);
	rtnl_addr_set_ifindex(ra, (int)if_nametoindex("lo"));
	rtnl_addr_set_family(ra, a.family);
	if (v6)
		rtnl_addr_set_flags(ra, IFA_F_NODAD);
	rtnl_addr_set_local(ra, local);
	rtnl_addr_set_scope(ra, RT_SCOPE_UNIVERSE);
	rc = add ? rtnl_addr_add(sk, ra, NLM_F_REPLACE) : rtnl_addr_delete(sk, ra, 0);
	if (rc == -NLE_EXIST)
		rc = 0;
	if (rc) {
		char s[INET6_ADDRSTRLEN];
		inet_ntop(a.family, &a.v6, s, sizeof(s));
		snprintf(why, len, "cannot %s %s/%d %s lo: %s", add ? "add" : "remove", s, v6 ? 128 : 32,
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

int health_ep_addr_add(struct health_addr a, char *why, size_t len)
{
	return addr_op(a, true, why, len);
}

void health_ep_addr_del(struct health_addr a)
{
	char why[128];
	addr_op(a, false, why, sizeof(why));
}
