/* modules/health/endpoint_addr.c - the node's health endpoint addresses:
 * the last usable IPv4 address of the node's first IPv4 pod CIDR, and on a
 * dual-stack node the last address but one of its first IPv6 pod CIDR (so
 * every peer derives them from the node registry alone), put as a /32
 * (/128) on the loopback device of the agent's network namespace through
 * rtnetlink (modules/common/nl.c), where the responder listens on it too.
 * A probe of it travels the path pod traffic takes: the route to the
 * node's pod CIDR and the node's forwarding, which a probe of the node
 * address does not. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include <linux/netlink.h>

#include "nl.h"

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
	struct nl_sock *sk;
	char reason[128];
	int rc = mod_nl_open(&sk, reason, sizeof(reason));
	if (rc < 0) {
		snprintf(why, len, "cannot open an rtnetlink socket: %s", reason);
		return rc;
	}
	bool v6 = a.family == AF_INET6;
	int lo = (int)if_nametoindex("lo"), plen = v6 ? 128 : 32;
	rc = add ? mod_nl_addr_add(sk, lo, a.family, &a.v6, (unsigned)plen, NLM_F_REPLACE, reason,
				   sizeof(reason))
		 : mod_nl_addr_del(sk, lo, a.family, &a.v6, (unsigned)plen, reason, sizeof(reason));
	if (rc < 0 && rc != -EEXIST) {
		char s[INET6_ADDRSTRLEN];
		inet_ntop(a.family, &a.v6, s, sizeof(s));
		snprintf(why, len, "cannot %s %s/%d %s lo: %s", add ? "add" : "remove", s, plen,
			 add ? "to" : "from", reason);
		rc = -EIO;
	} else {
		rc = 0;
	}
	mod_nl_close(sk);
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
