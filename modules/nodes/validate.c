/* modules/nodes/validate.c - what a remote node may claim (issue 22): a
 * node record, from the kvstore registry or a Kubernetes Node, is outside
 * input that becomes routes and ipcache entries on every node, so before
 * it is installed it must not
 *   - carry a pod CIDR shorter than [nodes] min-pod-cidr-prefix-v4 / -v6
 *     (0.0.0.0/0 would route the whole world to it);
 *   - carry a pod CIDR overlapping this node's pod CIDRs, another known
 *     node's, or a network connected to this node (its interfaces'
 *     subnets, the underlay among them);
 *   - name this node's IP, or another known node's IP under its own name,
 *     as its IP or tunnel endpoint.
 * The first node to claim a prefix or an address keeps it; a record that
 * breaks a rule is refused whole (the caller logs the reason and counts
 * it) and what was known of that node stays as it was. Likewise a remote
 * ipcache record (ipcache.c) must carry a cluster identity and, its node
 * known, lie in that node's pod CIDRs with that node's HostIP. */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* whether a and b share an address (one holds the other) */
static bool cidr_overlap(const struct fibril_node_cidr *a, const struct fibril_node_cidr *b)
{
	if (a->family != b->family)
		return false;
	unsigned plen = a->prefix_len < b->prefix_len ? a->prefix_len : b->prefix_len;
	for (unsigned bit = 0; bit < plen; bit++) {
		uint8_t m = (uint8_t)(0x80u >> (bit % 8));
		if ((a->addr[bit / 8] & m) != (b->addr[bit / 8] & m))
			return false;
	}
	return true;
}

static const char *addr4_text(const struct in_addr *a, char *buf, size_t len)
{
	return inet_ntop(AF_INET, a, buf, (socklen_t)len) ? buf : "?";
}

static int refuse_overlap(const struct fibril_node_cidr *c, const char *whose,
			  const struct fibril_node_cidr *other, char *why, size_t len)
{
	char a[64], b[64];
	snprintf(why, len, "pod CIDR %s overlaps %s %s", nodes_cidr_text(c, a, sizeof(a)), whose,
		 nodes_cidr_text(other, b, sizeof(b)));
	return -EINVAL;
}

/* a network this node is connected to (an interface's subnet) */
static int check_connected(const struct fibril_node_cidr *c, char *why, size_t len)
{
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) != 0)
		return 0; /* the other rules still hold */
	int rc = 0;
	for (struct ifaddrs *i = ifa; i && !rc; i = i->ifa_next) {
		if (!i->ifa_addr || !i->ifa_netmask)
			continue;
		struct fibril_node_cidr net = {0};
		const uint8_t *addr, *mask;
		size_t bytes;
		if (i->ifa_addr->sa_family == AF_INET) {
			net.family = 4;
			addr = (const uint8_t *)&((const struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr;
			mask = (const uint8_t *)&((const struct sockaddr_in *)(void *)i->ifa_netmask)
				       ->sin_addr;
			bytes = 4;
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			net.family = 6;
			addr = (const uint8_t *)&((const struct sockaddr_in6 *)(void *)i->ifa_addr)
				       ->sin6_addr;
			mask = (const uint8_t *)&((const struct sockaddr_in6 *)(void *)i->ifa_netmask)
				       ->sin6_addr;
			bytes = 16;
		} else {
			continue;
		}
		for (size_t b = 0; b < bytes; b++) {
			net.addr[b] = addr[b] & mask[b];
			for (uint8_t m = mask[b]; m; m = (uint8_t)(m << 1))
				net.prefix_len++;
		}
		if (cidr_overlap(c, &net)) {
			char dev[IF_NAMESIZE + 24];
			snprintf(dev, sizeof(dev), "the connected network (%s)", i->ifa_name);
			rc = refuse_overlap(c, dev, &net, why, len);
		}
	}
	freeifaddrs(ifa);
	return rc;
}

static int check_cidr(struct nodes *s, const struct fibril_node *n, const struct fibril_node_cidr *c,
		      char *why, size_t len)
{
	char a[64];
	const char *key = c->family == 4 ? "min-pod-cidr-prefix-v4" : "min-pod-cidr-prefix-v6";
	int64_t min = fibril_config_int(s->m, key);
	if (c->prefix_len < min) {
		snprintf(why, len, "pod CIDR %s is shorter than /%lld ([nodes] %s)",
			 nodes_cidr_text(c, a, sizeof(a)), (long long)min, key);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < s->self.n_cidrs; i++)
		if (cidr_overlap(c, &s->self.cidrs[i]))
			return refuse_overlap(c, "this node's pod CIDR", &s->self.cidrs[i], why, len);
	for (struct node_entry *e = s->nodes; e; e = e->next) {
		if (!strcmp(e->n.name, n->name))
			continue;
		for (uint32_t i = 0; i < e->n.n_cidrs; i++)
			if (cidr_overlap(c, &e->n.cidrs[i])) {
				char whose[FIBRIL_NODE_NAME_LEN + 32];
				snprintf(whose, sizeof(whose), "node %s's pod CIDR", e->n.name);
				return refuse_overlap(c, whose, &e->n.cidrs[i], why, len);
			}
	}
	return check_connected(c, why, len);
}

/* whose the IPv4 address is: this node's (NULL name), another node's, or nobody's (0) */
static int owner4(struct nodes *s, const struct fibril_node *n, const struct in_addr *a,
		  const char **who)
{
	*who = NULL;
	if ((s->self.has_ipv4 && s->self.ipv4.s_addr == a->s_addr) ||
	    (s->self.has_tunnel_endpoint && s->self.tunnel_endpoint.s_addr == a->s_addr))
		return 1;
	for (struct node_entry *e = s->nodes; e; e = e->next) {
		if (!strcmp(e->n.name, n->name))
			continue;
		if ((e->n.has_ipv4 && e->n.ipv4.s_addr == a->s_addr) ||
		    (e->n.has_tunnel_endpoint && e->n.tunnel_endpoint.s_addr == a->s_addr)) {
			*who = e->n.name;
			return 1;
		}
	}
	return 0;
}

static int check_addr4(struct nodes *s, const struct fibril_node *n, const char *what,
		       const struct in_addr *a, char *why, size_t len)
{
	const char *who;
	char t[INET_ADDRSTRLEN];
	if (!owner4(s, n, a, &who))
		return 0;
	if (who)
		snprintf(why, len, "%s %s is node %s's", what, addr4_text(a, t, sizeof(t)), who);
	else
		snprintf(why, len, "%s %s is this node's", what, addr4_text(a, t, sizeof(t)));
	return -EINVAL;
}

static int check_addr6(struct nodes *s, const struct fibril_node *n, const struct in6_addr *a,
		       char *why, size_t len)
{
	char t[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, a, t, sizeof(t));
	if (s->self.has_ipv6 && !memcmp(&s->self.ipv6, a, sizeof(*a))) {
		snprintf(why, len, "IP %s is this node's", t);
		return -EINVAL;
	}
	for (struct node_entry *e = s->nodes; e; e = e->next)
		if (strcmp(e->n.name, n->name) && e->n.has_ipv6 && !memcmp(&e->n.ipv6, a, sizeof(*a))) {
			snprintf(why, len, "IP %s is node %s's", t, e->n.name);
			return -EINVAL;
		}
	return 0;
}

int nodes_validate(struct nodes *s, const struct fibril_node *n, char *why, size_t len)
{
	if (n->has_ipv4 && check_addr4(s, n, "IP", &n->ipv4, why, len))
		return -EINVAL;
	if (n->has_ipv6 && check_addr6(s, n, &n->ipv6, why, len))
		return -EINVAL;
	if (n->has_tunnel_endpoint &&
	    !(n->has_ipv4 && n->tunnel_endpoint.s_addr == n->ipv4.s_addr) &&
	    check_addr4(s, n, "tunnel endpoint", &n->tunnel_endpoint, why, len))
		return -EINVAL;
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++) {
		if (check_cidr(s, n, &n->cidrs[i], why, len))
			return -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (cidr_overlap(&n->cidrs[i], &n->cidrs[j]))
				return refuse_overlap(&n->cidrs[i], "its own pod CIDR", &n->cidrs[j],
						      why, len);
	}
	return 0;
}

/* ---- what a remote ipcache record may claim ---------------------------------------------------- */

int nodes_ip_identity_check(uint32_t id, char *why, size_t len)
{
	if (id >= FIBRIL_IDENTITY_LOCAL_MIN && id < NODES_CIDR_IDENTITY_BASE)
		return 0;
	snprintf(why, len, "identity %u is not a cluster identity (%u..%u)%s", id,
		 FIBRIL_IDENTITY_LOCAL_MIN, NODES_CIDR_IDENTITY_BASE - 1,
		 id < FIBRIL_IDENTITY_LOCAL_MIN ? ": a reserved one" : ": the CIDR range");
	return -EINVAL;
}

static bool addr_in(uint8_t family, const uint8_t *addr, const struct fibril_node_cidr *c)
{
	if (c->family != family)
		return false;
	for (unsigned bit = 0; bit < c->prefix_len; bit++) {
		uint8_t m = (uint8_t)(0x80u >> (bit % 8));
		if ((addr[bit / 8] & m) != (c->addr[bit / 8] & m))
			return false;
	}
	return true;
}

int nodes_ip_bound(const struct node_entry *n, const struct nodes_ip_compact *r, char *why,
		   size_t len)
{
	char a[INET6_ADDRSTRLEN];
	bool in = false;
	for (uint32_t i = 0; i < n->n.n_cidrs && i < FIBRIL_NODE_MAX_CIDRS && !in; i++)
		in = addr_in(r->family, r->addr, &n->n.cidrs[i]);
	if (!in) {
		if (why)
			snprintf(why, len, "IP %s is not in the pod CIDRs of node %s",
				 nodes_ip_text(r->family, r->addr, a, sizeof(a)), n->n.name);
		return -EINVAL;
	}
	bool host = (r->host_family == 4 &&
		     ((n->n.has_ipv4 && !memcmp(r->host, &n->n.ipv4, 4)) ||
		      (n->n.has_tunnel_endpoint && !memcmp(r->host, &n->n.tunnel_endpoint, 4)))) ||
		    (r->host_family == 6 && n->n.has_ipv6 && !memcmp(r->host, &n->n.ipv6, 16));
	if (!host) {
		if (why)
			snprintf(why, len, "HostIP %s is not node %s's",
				 r->host_family ? nodes_ip_text(r->host_family, r->host, a, sizeof(a))
						: "(none)",
				 n->n.name);
		return -EINVAL;
	}
	return 0;
}
