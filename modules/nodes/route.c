/* modules/nodes/route.c - routing-mode native: for each remote node, one
 * route per pod CIDR via that node's IP (family by family) in the main
 * table, protocol NODES_ROUTE_PROTO, through libnl-route-3; and the
 * datapath's ipcache: the remote pod CIDRs (identity world until endpoints
 * of their own are published) and the node IP (/32, /128: remote-node).
 * routing-mode tunnel: each remote pod CIDR's ipcache entry names the
 * node's tunnel endpoint, and the datapath (which owns the VXLAN device
 * and its program, see nodes_tunnel_setup) encapsulates the pods' packets
 * towards it; for the node's own packets (kubelet and health probes, a
 * ping from the node) a route per remote pod CIDR through the VXLAN
 * device with a lightweight-tunnel encapsulation (RTA_ENCAP,
 * LWTUNNEL_ENCAP_IP: the node's tunnel endpoint as the outer destination,
 * VNI = remote-node), from this node's IP, with the pod MTU (mtu.c: room
 * for VXLAN's overhead); the same protocol, adopted and removed like the
 * native ones.
 *
 * Nothing is removed when the agent stops: the routes and the pinned
 * ipcache keep cross-node traffic flowing while it is down. At start the
 * routes of the previous run are read back from the kernel (their
 * protocol marks them; each names its CIDR and its node IP) and kept:
 * a node that still wants an identical route adopts it (no delete, no
 * re-add), and after the first full read of the registry the rest are
 * removed together with their ipcache entries. The rtnetlink requests
 * go through modules/common/nl.c (libnl-route-3). */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <net/if.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "nl.h"

#define NL_WHY 128 /* room for libnl's reason */

int nodes_nl_open(struct nodes *s, char *why, size_t len)
{
	struct nl_sock *sk;
	char reason[NL_WHY];
	int rc = mod_nl_open(&sk, reason, sizeof(reason));
	if (rc < 0) {
		snprintf(why, len, "cannot open an rtnetlink socket: %s", reason);
		return rc;
	}
	s->nl = sk;
	return 0;
}

void nodes_nl_close(struct nodes *s)
{
	mod_nl_close(s->nl);
	s->nl = NULL;
	free(s->old);
	s->old = NULL;
	s->n_old = 0;
}

static int alen(int family)
{
	return family == 4 ? 4 : 16;
}

static int af(int family)
{
	return family == 4 ? AF_INET : AF_INET6;
}

/* The route of the CIDR (via: its gateway, NULL in a delete), ours by its
 * protocol. */
static struct mod_nl_route route_of(const struct fibril_node_cidr *c, const void *via)
{
	return (struct mod_nl_route){
		.family = af(c->family),
		.dst = c->addr,
		.dst_len = c->prefix_len,
		.protocol = NODES_ROUTE_PROTO,
		/* a delete matches any scope (libnl would guess "link" for a
		 * route without a gateway, which ours never are) */
		.scope = via ? RT_SCOPE_UNIVERSE : RT_SCOPE_NOWHERE,
		.gateway = via,
	};
}

static int route_add(struct nodes *s, const struct fibril_node_cidr *c, const void *via)
{
	char t[64], g[INET6_ADDRSTRLEN], why[NL_WHY];
	struct mod_nl_route r = route_of(c, via);
	int rc = mod_nl_route_add(s->nl, &r, NLM_F_CREATE | NLM_F_REPLACE, why, sizeof(why));
	if (rc < 0) {
		s->stats.route_errors++;
		inet_ntop(af(c->family), via, g, sizeof(g));
		fibril_warn(s->m, "cannot add the route %s via %s: %s",
			    nodes_cidr_text(c, t, sizeof(t)), g, why);
		fibril_health_report(s->m, "routes", FIBRIL_HEALTH_DEGRADED,
				     "cannot add the route %s via %s: %s", t, g, why);
		return -EIO;
	}
	s->stats.routes_installed++;
	return 0;
}

static const void *node_ip(const struct fibril_node *n, int family)
{
	if (family == 4)
		return n->has_ipv4 ? (const void *)&n->ipv4 : NULL;
	return n->has_ipv6 ? (const void *)&n->ipv6 : NULL;
}

/* Routing-mode tunnel: the CIDR through the VXLAN device, encapsulated
 * towards tep with the VNI remote-node (the receiver's policy sees this
 * node as remote-node), from this node's IP of the CIDR's family, with the
 * pod MTU (the node's own packets leave room for VXLAN). */
static int route_add_tunnel(struct nodes *s, const struct fibril_node_cidr *c, int tep_family,
			    const void *tep)
{
	char t[64], g[INET6_ADDRSTRLEN], why[NL_WHY];
	struct mod_nl_route r = {
		.family = af(c->family),
		.dst = c->addr,
		.dst_len = c->prefix_len,
		.protocol = NODES_ROUTE_PROTO,
		.scope = RT_SCOPE_LINK,
		.oif = s->tunnel_ifindex,
		.pref_src = node_ip(&s->self, c->family),
		.mtu = (uint32_t)s->mtu.pod,
		.encap_family = af(tep_family),
		.encap_dst = tep,
		.encap_id = FIBRIL_IDENTITY_REMOTE_NODE,
		.encap_ttl = 64,
	};
	int rc = mod_nl_route_add(s->nl, &r, NLM_F_CREATE | NLM_F_REPLACE, why, sizeof(why));
	if (rc < 0) {
		s->stats.route_errors++;
		inet_ntop(af(tep_family), tep, g, sizeof(g));
		fibril_warn(s->m, "cannot add the route %s through %s to %s: %s",
			    nodes_cidr_text(c, t, sizeof(t)), FIBRIL_DATAPATH_TUNNEL_DEVICE, g, why);
		fibril_health_report(s->m, "routes", FIBRIL_HEALTH_DEGRADED,
				     "cannot add the route %s through %s to %s: %s", t,
				     FIBRIL_DATAPATH_TUNNEL_DEVICE, g, why);
		return -EIO;
	}
	s->stats.routes_installed++;
	return 0;
}

static void route_del(struct nodes *s, const struct fibril_node_cidr *c)
{
	char t[64], why[NL_WHY];
	struct mod_nl_route r = route_of(c, NULL);
	int rc = mod_nl_route_del(s->nl, &r, why, sizeof(why));
	if (rc < 0 && rc != -ENOENT && rc != -EADDRNOTAVAIL) {
		s->stats.route_errors++;
		fibril_warn(s->m, "cannot remove the route %s: %s",
			    nodes_cidr_text(c, t, sizeof(t)), why);
		return;
	}
	if (rc == 0)
		s->stats.routes_removed++;
}

/* ---- the previous run's routes ------------------------------------------------------- */

/* One route of the dump: ours (protocol, main table, a single next hop)
 * is remembered. */
static void scan_one(const struct mod_nl_route_entry *r, void *arg)
{
	struct nodes *s = arg;
	int family = r->family == AF_INET ? 4 : 6;
	if (r->protocol != NODES_ROUTE_PROTO || r->table != RT_TABLE_MAIN || r->multipath ||
	    !r->has_dst)
		return;
	struct nodes_old_route *grown = realloc(s->old, (s->n_old + 1) * sizeof(*grown));
	if (!grown)
		return; /* out of memory: not adopted (re-added) nor swept */
	s->old = grown;
	struct nodes_old_route *x = &s->old[s->n_old++];
	memset(x, 0, sizeof(*x));
	x->family = family;
	x->dst.family = (uint8_t)family;
	x->dst.prefix_len = (uint8_t)r->dst_len;
	memcpy(x->dst.addr, r->dst, (size_t)alen(family));
	if (r->has_gateway)
		memcpy(x->via, r->gateway, (size_t)alen(family));
	if (r->has_pref_src)
		memcpy(x->src, r->pref_src, (size_t)alen(family));
	x->mtu = r->mtu;
	/* tunnel mode: the outer destination of the encapsulation, of VNI remote-node */
	if (r->encap_family && r->encap_id == FIBRIL_IDENTITY_REMOTE_NODE) {
		x->tep_family = r->encap_family == AF_INET ? 4 : 6;
		memcpy(x->tep, r->encap_dst, (size_t)alen(x->tep_family));
	}
}

int nodes_routes_scan(struct nodes *s)
{
	char why[NL_WHY];
	if (mod_nl_route_dump(s->nl, AF_UNSPEC, scan_one, s, why, sizeof(why)) < 0) {
		fibril_warn(s->m, "cannot read the routes: %s", why);
		return -EIO;
	}
	if (s->n_old)
		fibril_info(s->m, "%zu route(s) of a previous run found; adopting what the "
			    "registry still wants", s->n_old);
	return 0;
}

/* a tunnel mode route: no gateway */
static bool nodes_via_none(const struct nodes_old_route *x)
{
	static const uint8_t zero[16];
	return !memcmp(x->via, zero, sizeof(zero));
}

static struct nodes_old_route *old_find(struct nodes *s, const struct fibril_node_cidr *c)
{
	for (size_t i = 0; i < s->n_old; i++)
		if (s->old[i].dst.family == c->family && s->old[i].dst.prefix_len == c->prefix_len &&
		    !memcmp(s->old[i].dst.addr, c->addr, (size_t)alen(c->family)))
			return &s->old[i];
	return NULL;
}

/* ---- the ipcache ------------------------------------------------------------------------ */

const char *nodes_routing_name(enum nodes_routing r)
{
	return r == NODES_ROUTING_NATIVE ? "native" : r == NODES_ROUTING_TUNNEL ? "tunnel" : "none";
}

int nodes_tunnel_setup(struct nodes *s, char *why, size_t len)
{
	if (!s->dp || !FIBRIL_SERVICE_HAS(s->dp, tunnel_setup)) {
		if (s->routing != NODES_ROUTING_TUNNEL)
			return 0; /* an older datapath: it never encapsulates */
		snprintf(why, len, "routing-mode tunnel needs a datapath of interface version 3 "
			 "(tunnel_setup)");
		return -ENOTSUP;
	}
	struct fibril_datapath_tunnel t = {
		.sz = sizeof(t),
		.mode = s->routing == NODES_ROUTING_TUNNEL ? FIBRIL_DATAPATH_TUNNEL_VXLAN
							   : FIBRIL_DATAPATH_TUNNEL_NONE,
		.port = s->tunnel_port,
	};
	char err[256] = "";
	int rc = s->dp->tunnel_setup(s->dpctx, &t, err, sizeof(err));
	if (rc) {
		snprintf(why, len, "tunnel: %s", err[0] ? err : strerror(-rc));
		return rc;
	}
	if (s->routing == NODES_ROUTING_TUNNEL) {
		s->tunnel_ifindex = (int)if_nametoindex(FIBRIL_DATAPATH_TUNNEL_DEVICE);
		if (!s->tunnel_ifindex) {
			snprintf(why, len, "tunnel: the device %s: %s",
				 FIBRIL_DATAPATH_TUNNEL_DEVICE, strerror(errno));
			return -ENODEV;
		}
	}
	return 0;
}

bool nodes_dp_owned(const struct nodes *s)
{
	return s->dp && FIBRIL_SERVICE_HAS(s->dp, ipcache_remove_entry) && s->dp->ipcache_remove_entry;
}

void nodes_dp_entry_init(const struct nodes *s, struct fibril_datapath_ipcache_entry *e,
			 uint32_t source)
{
	memset(e, 0, sizeof(*e));
	if (nodes_dp_owned(s)) {
		e->sz = sizeof(*e);
		e->source = source;
	} else { /* an older datapath (interface < 5) refuses a source it does not know */
		e->sz = FIBRIL_OFFSETOFEND(struct fibril_datapath_ipcache_entry, tunnel_endpoint);
	}
}

int nodes_dp_ipcache_put(struct nodes *s, uint32_t source, int family, const void *addr,
			 unsigned plen, uint32_t id, int tep_family, const void *tep)
{
	char err[256] = "";
	if (!s->dp)
		return 0;
	int rc;
	if ((tep_family || nodes_dp_owned(s)) && FIBRIL_SERVICE_HAS(s->dp, ipcache_upsert_entry)) {
		struct fibril_datapath_ipcache_entry e;
		nodes_dp_entry_init(s, &e, source);
		e.family = (uint8_t)family;
		e.prefix_len = (uint8_t)plen;
		e.tunnel_family = (uint8_t)tep_family;
		e.identity = id;
		memcpy(e.addr, addr, (size_t)(family == 4 ? 4 : 16));
		if (tep_family)
			memcpy(e.tunnel_endpoint, tep, (size_t)(tep_family == 4 ? 4 : 16));
		rc = s->dp->ipcache_upsert_entry(s->dpctx, &e, err, sizeof(err));
	} else {
		rc = s->dp->ipcache_upsert(s->dpctx, family, addr, plen, id, err, sizeof(err));
	}
	if (rc)
		fibril_warn(s->m, "ipcache: %s", err[0] ? err : strerror(-rc));
	return rc;
}

int nodes_dp_ipcache_del(struct nodes *s, uint32_t source, int family, const void *addr,
			 unsigned plen, char *err, size_t len)
{
	if (!s->dp)
		return 0;
	if (!nodes_dp_owned(s))
		return s->dp->ipcache_remove(s->dpctx, family, addr, plen, err, len);
	struct fibril_datapath_ipcache_entry e;
	nodes_dp_entry_init(s, &e, source);
	e.family = (uint8_t)family;
	e.prefix_len = (uint8_t)plen;
	memcpy(e.addr, addr, (size_t)(family == 4 ? 4 : 16));
	return s->dp->ipcache_remove_entry(s->dpctx, &e, err, len);
}

static void ipcache_put(struct nodes *s, int family, const void *addr, unsigned plen, uint32_t id)
{
	nodes_dp_ipcache_put(s, FIBRIL_DATAPATH_IPCACHE_SOURCE_NODE, family, addr, plen, id, 0, NULL);
}

/* The node's tunnel endpoint (its registered one, else its IPv4, else its
 * IPv6 address): its family, 0 when it has none. */
static int tunnel_endpoint(const struct fibril_node *n, const void **out)
{
	if (n->has_tunnel_endpoint) {
		*out = &n->tunnel_endpoint;
		return 4;
	}
	if (n->has_ipv4) {
		*out = &n->ipv4;
		return 4;
	}
	if (n->has_ipv6) {
		*out = &n->ipv6;
		return 6;
	}
	return 0;
}

static void ipcache_del(struct nodes *s, int family, const void *addr, unsigned plen)
{
	char err[256] = "";
	if (!s->dp)
		return;
	int rc = nodes_dp_ipcache_del(s, FIBRIL_DATAPATH_IPCACHE_SOURCE_NODE, family, addr, plen, err,
				      sizeof(err));
	if (rc && rc != -ENOENT)
		fibril_warn(s->m, "ipcache: %s", err[0] ? err : strerror(-rc));
}

static bool has_cidr(const struct fibril_node *n, const struct fibril_node_cidr *c)
{
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++)
		if (n->cidrs[i].family == c->family && n->cidrs[i].prefix_len == c->prefix_len &&
		    !memcmp(n->cidrs[i].addr, c->addr, (size_t)alen(c->family)))
			return true;
	return false;
}

/* whether another known remote node than `except` has this node IP */
static bool ip_in_use(struct nodes *s, int family, const void *ip, const struct node_entry *except)
{
	for (struct node_entry *e = s->nodes; e; e = e->next) {
		const void *x = e == except ? NULL : node_ip(&e->n, family);
		if (x && !memcmp(x, ip, (size_t)alen(family)))
			return true;
	}
	return false;
}

int nodes_node_program(struct nodes *s, struct node_entry *e, const struct fibril_node *old)
{
	const struct fibril_node *n = &e->n;
	int failed = 0;

	/* what the old version had and the new one has not */
	if (old) {
		for (uint32_t i = 0; i < old->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++) {
			const struct fibril_node_cidr *c = &old->cidrs[i];
			if (has_cidr(n, c) &&
			    (node_ip(n, c->family) || s->routing == NODES_ROUTING_TUNNEL))
				continue;
			if (s->nl)
				route_del(s, c);
			ipcache_del(s, c->family, c->addr, c->prefix_len);
		}
		for (int f = 4; f <= 6; f += 2) {
			const void *was = node_ip(old, f), *is = node_ip(n, f);
			if (was && (!is || memcmp(was, is, (size_t)alen(f))) && !ip_in_use(s, f, was, e))
				ipcache_del(s, f, was, f == 4 ? 32 : 128);
		}
	}
	for (int f = 4; f <= 6; f += 2) {
		const void *ip = node_ip(n, f);
		if (ip)
			ipcache_put(s, f, ip, f == 4 ? 32 : 128, FIBRIL_IDENTITY_REMOTE_NODE);
	}
	const void *tep = NULL;
	int tep_family = s->routing == NODES_ROUTING_TUNNEL ? tunnel_endpoint(n, &tep) : 0;
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++) {
		const struct fibril_node_cidr *c = &n->cidrs[i];
		if (s->routing == NODES_ROUTING_TUNNEL) {
			/* the datapath encapsulates the pods' packets towards
			 * tep; the route carries the node's own */
			if (!tep_family) {
				failed++;
				continue;
			}
			nodes_dp_ipcache_put(s, FIBRIL_DATAPATH_IPCACHE_SOURCE_NODE, c->family, c->addr,
					     c->prefix_len,
					     FIBRIL_IDENTITY_WORLD, tep_family, tep);
			if (!s->nl)
				continue;
			/* a previous run's identical route is adopted; any
			 * other (a native run's, another endpoint) is replaced
			 * in place (NLM_F_REPLACE) */
			struct nodes_old_route *x = old_find(s, c);
			const void *src = node_ip(&s->self, c->family);
			uint8_t want_src[16] = {0};
			if (src)
				memcpy(want_src, src, (size_t)alen(c->family));
			if (x && nodes_via_none(x) && x->tep_family == tep_family &&
			    !memcmp(x->tep, tep, (size_t)alen(tep_family)) &&
			    !memcmp(x->src, want_src, sizeof(want_src)) &&
			    x->mtu == (uint32_t)s->mtu.pod) {
				if (!x->wanted)
					s->stats.routes_adopted++;
				x->wanted = true;
				continue;
			}
			if (x)
				x->wanted = true;
			if (route_add_tunnel(s, c, tep_family, tep))
				failed++;
			continue;
		}
		const void *via = node_ip(n, c->family);
		if (!via)
			continue; /* no node IP of that family to route it through */
		ipcache_put(s, c->family, c->addr, c->prefix_len, FIBRIL_IDENTITY_WORLD);
		if (!s->nl)
			continue;
		struct nodes_old_route *x = old_find(s, c);
		if (x && !memcmp(x->via, via, (size_t)alen(c->family))) {
			if (!x->wanted)
				s->stats.routes_adopted++;
			x->wanted = true; /* in place since the last run: leave it */
			continue;
		}
		if (x)
			x->wanted = true; /* replaced below with the new next hop */
		if (route_add(s, c, via))
			failed++;
	}
	e->routed = failed == 0;
	return failed ? -EIO : 0;
}

void nodes_node_unprogram(struct nodes *s, const struct fibril_node *n)
{
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++) {
		const struct fibril_node_cidr *c = &n->cidrs[i];
		if (s->nl && (node_ip(n, c->family) || s->routing == NODES_ROUTING_TUNNEL))
			route_del(s, c);
		ipcache_del(s, c->family, c->addr, c->prefix_len);
	}
	for (int f = 4; f <= 6; f += 2) {
		const void *ip = node_ip(n, f);
		if (ip && !ip_in_use(s, f, ip, NULL))
			ipcache_del(s, f, ip, f == 4 ? 32 : 128);
	}
}

void nodes_routes_sweep_old(struct nodes *s)
{
	for (size_t i = 0; i < s->n_old; i++) {
		struct nodes_old_route *x = &s->old[i];
		char t[64];
		if (x->wanted)
			continue;
		fibril_info(s->m, "removing the route %s: its node is gone",
			    nodes_cidr_text(&x->dst, t, sizeof(t)));
		route_del(s, &x->dst);
		ipcache_del(s, x->family, x->dst.addr, x->dst.prefix_len);
		if (!nodes_via_none(x) && !ip_in_use(s, x->family, x->via, NULL))
			ipcache_del(s, x->family, x->via, x->family == 4 ? 32 : 128);
	}
	free(s->old);
	s->old = NULL;
	s->n_old = 0;
}
