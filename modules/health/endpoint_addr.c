/* modules/health/endpoint_addr.c - the node's health endpoint addresses:
 * the last usable IPv4 address of the node's first IPv4 pod CIDR, and on a
 * dual-stack node the last address but one of its first IPv6 pod CIDR (so
 * every peer derives them from the node registry alone), put as a /32
 * (/128) on the loopback device of the agent's network namespace through
 * rtnetlink (modules/common/nl.c), where the responder listens on it too.
 * A probe of it travels the path pod traffic takes: the route to the
 * node's pod CIDR and the node's forwarding, which a probe of the node
 * address does not. This file also sets them up: the reservation in the
 * local IPAM (owner fibril-health, so no pod gets them; tried again while
 * the IPAM answers -EAGAIN), the address, the responder on it. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include <linux/netlink.h>

#include <fibril/fibril.h>

#include "nl.h"

#define HEALTH_EP_OWNER "fibril-health"

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

/* ---- the set-up ---------------------------------------------------------------------------- */

/* One health endpoint address: reserve it in the local IPAM (so no pod
 * gets it), put it on the loopback, listen on it. */
static bool endpoint_addr_up(struct health *h, struct health_addr ep, const char *component,
			     bool *reserved, bool *again)
{
	char why[256], a[INET6_ADDRSTRLEN];
	inet_ntop(ep.family, &ep.v6, a, sizeof(a));
	void *ctx;
	const struct fibril_ipam_ops *ipam =
		(const struct fibril_ipam_ops *)fibril_service_lookup(h->m, FIBRIL_IPAM_CAPABILITY, 1, &ctx);
	if (ipam) {
		struct fibril_ipam_result r = {.sz = sizeof(r)};
		int rc = ipam->allocate_ip(ctx, a, HEALTH_EP_OWNER, &r);
		if (rc < 0) {
			/* -EAGAIN: the IPAM is busy (re-claiming its pool): try again */
			*again = *again || rc == -EAGAIN;
			fibril_health_report(h->m, component, FIBRIL_HEALTH_DEGRADED,
					     "cannot reserve the health endpoint address %s: %s%s", a, strerror(-rc),
					     rc == -EAGAIN ? " (retrying)" : "");
			return false;
		}
		*reserved = true;
	}
	if (health_ep_addr_add(ep, why, sizeof(why)) < 0) {
		fibril_health_report(h->m, component, FIBRIL_HEALTH_DEGRADED, "%s", why);
		return false;
	}
	if (health_responder_open(h, ep, why, sizeof(why)) < 0) {
		fibril_health_report(h->m, component, FIBRIL_HEALTH_DEGRADED, "%s", why);
		return true; /* the address is on lo: taken off at stop */
	}
	fibril_log(h->m, FIBRIL_LOG_INFO, ep.family == AF_INET6 ? "health endpoint [%s]:%u" : "health endpoint %s:%u",
		   a, h->port);
	return true;
}

static void endpoint_retry(struct fibril_timer *t, void *ud);

/* The health endpoints: per family of the node's pod CIDRs (those not up
 * yet); a reservation the IPAM could not make yet is tried again in 1 s. */
void health_endpoint_up(struct health *h, const struct fibril_node *self)
{
	bool again = false, was_retry = h->ep_retrying;
	if (!h->ep_wanted)
		return;
	h->ep_retrying = false;
	if (!health_ep_addr_of(self, &h->ep_ip)) {
		fibril_log(h->m, FIBRIL_LOG_WARN, "no IPv4 health endpoint: this node has no IPv4 pod CIDR of /30 or wider");
	} else if (!h->ep_added) {
		struct health_addr ep = {.family = AF_INET, .v4 = h->ep_ip};
		h->ep_added = endpoint_addr_up(h, ep, "endpoint", &h->ep_reserved, &again);
		if (h->ep_added && was_retry)
			fibril_health_report(h->m, "endpoint", FIBRIL_HEALTH_OK, "health endpoint up");
	}
	if (h->ipv6 && !h->ep6_added && health_ep_addr6_of(self, &h->ep_ip6)) {
		struct health_addr ep = {.family = AF_INET6, .v6 = h->ep_ip6};
		h->ep6_added = endpoint_addr_up(h, ep, "endpoint-ipv6", &h->ep6_reserved, &again);
		if (h->ep6_added && was_retry)
			fibril_health_report(h->m, "endpoint-ipv6", FIBRIL_HEALTH_OK, "health endpoint up");
	}
	if (again && !h->ep_timer) {
		h->ep_retrying = true;
		h->ep_timer = fibril_timer_add(h->m, 1000, 0, endpoint_retry, h);
	}
}

static void endpoint_retry(struct fibril_timer *t, void *ud)
{
	struct health *h = ud;
	(void)t;
	h->ep_timer = NULL; /* a one-shot timer frees itself */
	struct fibril_node self = {.sz = sizeof(self)};
	if (h->running && h->nodes->self(h->nodes_ctx, &self) == 0)
		health_endpoint_up(h, &self);
}
