/* modules/datapath/dp_netlink.c - what the datapath sets up in the node's
 * network namespace through rtnetlink (libnl-route-3): the host device
 * (fibril_host: a dummy link, or a veth pair fibril_host/fibril_net where
 * the kernel has no dummy driver, as Cilium's cilium_host/cilium_net) that
 * holds each IPAM pool's gateway (/32, /128), and the /32 (/128) route of
 * each endpoint address to its host veth. Routes carry rtm_protocol
 * DP_ROUTE_PROTO so they can be told apart (`ip route show proto 241`). */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/link/vxlan.h>
#include <netlink/route/route.h>

#include "datapath.h"

int dp_nl_open(struct datapath *dp, char *err, size_t len)
{
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk) {
		dp_seterr(err, len, "out of memory");
		return -ENOMEM;
	}
	int rc = nl_connect(sk, NETLINK_ROUTE);
	if (rc < 0) {
		dp_seterr(err, len, "cannot open an rtnetlink socket: %s", nl_geterror(rc));
		nl_socket_free(sk);
		return -EIO;
	}
	dp->nl = sk;
	return 0;
}

void dp_nl_close(struct datapath *dp)
{
	if (dp->nl)
		nl_socket_free(dp->nl);
	dp->nl = NULL;
}

/* libnl's -NLE_* as a negative errno, for callers that speak errno. */
static int nl_errno(int nlerr)
{
	switch (-nlerr) {
	case NLE_EXIST:
		return -EEXIST;
	case NLE_OBJ_NOTFOUND:
		return -ENOENT;
	case NLE_NODEV:
		return -ENODEV;
	case NLE_OPNOTSUPP:
		return -EOPNOTSUPP;
	case NLE_PERM:
		return -EPERM;
	case NLE_NOMEM:
		return -ENOMEM;
	case NLE_INVAL:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* ---- the host device ------------------------------------------------------------------ */

/* Set the flags (IFF_*) the link lacks. */
static int link_set_flags(struct nl_sock *sk, struct rtnl_link *link, unsigned flags)
{
	if ((rtnl_link_get_flags(link) & flags) == flags)
		return 0;
	struct rtnl_link *change = rtnl_link_alloc();
	if (!change)
		return -NLE_NOMEM;
	rtnl_link_set_flags(change, flags);
	int rc = rtnl_link_change(sk, link, change, 0);
	rtnl_link_put(change);
	return rc;
}

static int link_up(struct nl_sock *sk, struct rtnl_link *link)
{
	return link_set_flags(sk, link, IFF_UP);
}

static int create_dummy(struct datapath *dp)
{
	struct rtnl_link *link = rtnl_link_alloc();
	if (!link)
		return -NLE_NOMEM;
	rtnl_link_set_name(link, dp->host_dev);
	int rc = rtnl_link_set_type(link, "dummy");
	if (rc == 0) {
		rtnl_link_set_flags(link, IFF_UP);
		rc = rtnl_link_add(dp->nl, link, NLM_F_CREATE | NLM_F_EXCL);
	}
	rtnl_link_put(link);
	return rc;
}

/* Make sure the veth peer is up too (a pair from the last run). */
static void peer_up(struct datapath *dp)
{
	struct rtnl_link *peer = NULL;
	if (rtnl_link_get_kernel(dp->nl, 0, dp->host_peer, &peer) == 0) {
		link_up(dp->nl, peer);
		rtnl_link_put(peer);
	}
}

static int create_veth_pair(struct datapath *dp)
{
	struct rtnl_link *link = rtnl_link_veth_alloc();
	if (!link)
		return -NLE_NOMEM;
	struct rtnl_link *peer = rtnl_link_veth_get_peer(link);
	rtnl_link_set_name(link, dp->host_dev);
	rtnl_link_set_flags(link, IFF_UP);
	rtnl_link_set_name(peer, dp->host_peer); /* flags on the peer: the kernel refuses */
	int rc = rtnl_link_add(dp->nl, link, NLM_F_CREATE | NLM_F_EXCL);
	rtnl_link_put(peer);
	rtnl_link_veth_release(link); /* puts the pair: link and peer */
	if (rc == 0)
		peer_up(dp);
	return rc;
}

/* An existing link of another kind than wanted: refused (the link is put). */
static int refuse_kind(struct rtnl_link *link, const char *name, const char *kind,
		       const char *want, const char *hint, char *err, size_t len)
{
	dp_seterr(err, len, "device %s exists and is a %s link, not %s: %s", name,
		  kind ? kind : "plain", want, hint);
	rtnl_link_put(link);
	return -EEXIST;
}

/* An adopted link set up (and its veth peer when veth_peer); the link is put. */
static int adopt_up(struct datapath *dp, struct rtnl_link *link, const char *name, bool veth_peer,
		    char *err, size_t len)
{
	int rc = link_up(dp->nl, link);
	if (rc == 0 && veth_peer)
		peer_up(dp);
	rtnl_link_put(link);
	if (rc < 0) {
		dp_seterr(err, len, "cannot set %s up: %s", name, nl_geterror(rc));
		return nl_errno(rc);
	}
	return 0;
}

/* Adopt or create the host device; returns its ifindex or a negative errno. */
static int host_device_ensure(struct datapath *dp, char *err, size_t len)
{
	struct rtnl_link *link = NULL;
	int rc = rtnl_link_get_kernel(dp->nl, 0, dp->host_dev, &link);
	if (rc == 0) {
		const char *kind = rtnl_link_get_type(link);
		if (!kind || (strcmp(kind, "dummy") != 0 && strcmp(kind, "veth") != 0))
			return refuse_kind(link, dp->host_dev, kind, "dummy or veth",
					   "rename it or set [datapath] host-device", err, len);
		rc = adopt_up(dp, link, dp->host_dev, !strcmp(kind, "veth"), err, len);
		if (rc < 0)
			return rc;
	} else {
		bool want_veth = !strcmp(dp->host_dev_type, "veth");
		rc = want_veth ? -NLE_OPNOTSUPP : create_dummy(dp);
		if (rc == -NLE_OPNOTSUPP && strcmp(dp->host_dev_type, "dummy") != 0) {
			if (!want_veth)
				fibril_info(dp->m,
					    "the kernel has no dummy links: %s is a veth pair with %s",
					    dp->host_dev, dp->host_peer);
			rc = create_veth_pair(dp);
		}
		if (rc < 0) {
			dp_seterr(err, len, "cannot create the host device %s (%s): %s", dp->host_dev,
				  dp->host_dev_type, nl_geterror(rc));
			return nl_errno(rc);
		}
		fibril_info(dp->m, "created the host device %s", dp->host_dev);
	}
	unsigned idx = if_nametoindex(dp->host_dev);
	if (!idx) {
		int e = errno;
		dp_seterr(err, len, "host device %s: %s", dp->host_dev, strerror(e));
		return -e;
	}
	return (int)idx;
}

/* ---- its addresses ------------------------------------------------------------------------ */

struct wanted_addr {
	int af;
	uint8_t bytes[16];
};

static int addr_add(struct datapath *dp, int ifindex, const struct wanted_addr *w)
{
	struct nl_addr *local = nl_addr_build(w->af, w->bytes, w->af == AF_INET ? 4 : 16);
	struct rtnl_addr *a = rtnl_addr_alloc();
	int rc = -NLE_NOMEM;
	if (local && a) {
		nl_addr_set_prefixlen(local, w->af == AF_INET ? 32 : 128);
		rtnl_addr_set_ifindex(a, ifindex);
		rtnl_addr_set_family(a, w->af);
		rc = rtnl_addr_set_local(a, local);
		if (rc == 0) {
			rtnl_addr_set_prefixlen(a, w->af == AF_INET ? 32 : 128);
			if (w->af == AF_INET6)
				rtnl_addr_set_flags(a, IFA_F_NODAD);
			rtnl_addr_set_scope(a, RT_SCOPE_UNIVERSE);
			rc = rtnl_addr_add(dp->nl, a, NLM_F_REPLACE);
		}
	}
	if (a)
		rtnl_addr_put(a);
	if (local)
		nl_addr_put(local);
	return rc == -NLE_EXIST ? 0 : rc;
}

/* Remove global addresses of the device that are not gateways any more
 * (a pool changed since the last run), and their ipcache entries. */
static void addr_prune(struct datapath *dp, int ifindex, const struct wanted_addr *w, size_t n)
{
	struct nl_cache *cache = NULL;
	if (rtnl_addr_alloc_cache(dp->nl, &cache) < 0)
		return;
	for (struct nl_object *o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
		struct rtnl_addr *a = (struct rtnl_addr *)o;
		if (rtnl_addr_get_ifindex(a) != ifindex || rtnl_addr_get_scope(a) != RT_SCOPE_UNIVERSE)
			continue;
		struct nl_addr *local = rtnl_addr_get_local(a);
		if (!local)
			continue;
		int af = nl_addr_get_family(local);
		const uint8_t *bytes = nl_addr_get_binary_addr(local);
		size_t blen = nl_addr_get_len(local);
		bool keep = false;
		for (size_t i = 0; i < n && !keep; i++)
			keep = w[i].af == af && blen == (af == AF_INET ? 4u : 16u) &&
			       !memcmp(w[i].bytes, bytes, blen);
		if (keep || (af != AF_INET && af != AF_INET6))
			continue;
		char text[INET6_ADDRSTRLEN];
		inet_ntop(af, bytes, text, sizeof(text));
		int rc = rtnl_addr_delete(dp->nl, a, 0);
		fibril_info(dp->m, "removed %s from %s (no pool's gateway any more)%s%s", text,
			    dp->host_dev, rc < 0 ? ": " : "", rc < 0 ? nl_geterror(rc) : "");
		dp_ipcache_del(dp, af == AF_INET ? 4 : 6, bytes, af == AF_INET ? 32 : 128, NULL, 0);
	}
	nl_cache_free(cache);
}

int dp_host_device_setup(struct datapath *dp, const struct fibril_ipam_pool *pools, size_t n,
			 char *err, size_t len)
{
	struct wanted_addr want[DP_MAX_POOLS];
	size_t nwant = 0;
	struct fibril_datapath_node node;

	memset(&node, 0, sizeof(node));
	node.sz = sizeof(node);
	for (size_t i = 0; i < n && nwant < DP_MAX_POOLS; i++) {
		int af = pools[i].family == 6 ? AF_INET6 : AF_INET;
		struct wanted_addr *w = &want[nwant];
		memset(w, 0, sizeof(*w));
		w->af = af;
		if (inet_pton(af, pools[i].gateway, w->bytes) != 1) {
			dp_seterr(err, len, "pool %s: gateway '%s' is not an IPv%d address",
				  pools[i].cidr, pools[i].gateway, pools[i].family);
			return -EINVAL;
		}
		if (af == AF_INET && !node.has_ipv4) {
			node.has_ipv4 = true;
			memcpy(&node.gateway4, w->bytes, 4);
		} else if (af == AF_INET6 && !node.has_ipv6) {
			node.has_ipv6 = true;
			memcpy(&node.gateway6, w->bytes, 16);
		}
		nwant++;
	}
	int ifindex = host_device_ensure(dp, err, len);
	if (ifindex < 0)
		return ifindex;
	for (size_t i = 0; i < nwant; i++) {
		char text[INET6_ADDRSTRLEN];
		inet_ntop(want[i].af, want[i].bytes, text, sizeof(text));
		int rc = addr_add(dp, ifindex, &want[i]);
		if (rc < 0) {
			dp_seterr(err, len, "cannot add the gateway %s to %s: %s", text, dp->host_dev,
				  nl_geterror(rc));
			return nl_errno(rc);
		}
		int fam = want[i].af == AF_INET ? 4 : 6;
		rc = dp_ipcache_put(dp, fam, want[i].bytes, fam == 4 ? 32 : 128, DP_IDENTITY_HOST,
				    err, len);
		if (rc < 0)
			return rc;
	}
	addr_prune(dp, ifindex, want, nwant);
	node.host_ifindex = ifindex;
	snprintf(node.host_ifname, sizeof(node.host_ifname), "%s", dp->host_dev);
	dp->node = node;
	dp->node_ready = true;
	return 0;
}

/* ---- endpoint routes ------------------------------------------------------------------------- */

static struct rtnl_route *route_build(struct datapath *dp, int family, const void *addr,
				      int ifindex, bool with_src)
{
	int af = family == 4 ? AF_INET : AF_INET6;
	struct rtnl_route *r = rtnl_route_alloc();
	struct nl_addr *dst = nl_addr_build(af, addr, family == 4 ? 4 : 16);
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	if (!r || !dst || !nh) {
		if (r)
			rtnl_route_put(r);
		if (dst)
			nl_addr_put(dst);
		if (nh)
			rtnl_route_nh_free(nh);
		return NULL;
	}
	nl_addr_set_prefixlen(dst, family == 4 ? 32 : 128);
	rtnl_route_set_family(r, (uint8_t)af);
	rtnl_route_set_dst(r, dst);
	nl_addr_put(dst);
	rtnl_route_set_table(r, RT_TABLE_MAIN);
	rtnl_route_set_scope(r, RT_SCOPE_LINK);
	rtnl_route_set_type(r, RTN_UNICAST);
	rtnl_route_set_protocol(r, DP_ROUTE_PROTO);
	rtnl_route_nh_set_ifindex(nh, ifindex);
	rtnl_route_add_nexthop(r, nh);
	/* the node answers its pods from the gateway, as a router would */
	if (with_src && dp->node_ready && ((family == 4 && dp->node.has_ipv4) ||
					   (family == 6 && dp->node.has_ipv6))) {
		const void *gw = family == 4 ? (const void *)&dp->node.gateway4
					     : (const void *)&dp->node.gateway6;
		struct nl_addr *src = nl_addr_build(af, gw, family == 4 ? 4 : 16);
		if (src) {
			rtnl_route_set_pref_src(r, src);
			nl_addr_put(src);
		}
	}
	return r;
}

int dp_route_add(struct datapath *dp, int family, const void *addr, int ifindex, char *err,
		 size_t len)
{
	char text[INET6_ADDRSTRLEN];
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, text, sizeof(text));
	struct rtnl_route *r = route_build(dp, family, addr, ifindex, true);
	if (!r) {
		dp_seterr(err, len, "out of memory");
		return -ENOMEM;
	}
	int rc = rtnl_route_add(dp->nl, r, NLM_F_REPLACE);
	rtnl_route_put(r);
	if (rc < 0) {
		dp_seterr(err, len, "cannot add the route %s/%d dev ifindex %d: %s", text,
			  family == 4 ? 32 : 128, ifindex, nl_geterror(rc));
		return nl_errno(rc);
	}
	return 0;
}

int dp_route_del(struct datapath *dp, int family, const void *addr, int ifindex, char *err,
		 size_t len)
{
	char text[INET6_ADDRSTRLEN];
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, text, sizeof(text));
	struct rtnl_route *r = route_build(dp, family, addr, ifindex, false);
	if (!r) {
		dp_seterr(err, len, "out of memory");
		return -ENOMEM;
	}
	int rc = rtnl_route_delete(dp->nl, r, 0);
	rtnl_route_put(r);
	/* gone with its veth, or never there */
	if (rc < 0 && rc != -NLE_OBJ_NOTFOUND && rc != -NLE_NODEV && rc != -NLE_NOADDR) {
		dp_seterr(err, len, "cannot remove the route %s/%d: %s", text,
			  family == 4 ? 32 : 128, nl_geterror(rc));
		return nl_errno(rc);
	}
	return 0;
}

/* ---- the tunnel device (routing-mode tunnel) ---------------------------------------------
 * A kernel VXLAN device in external (collect-metadata) mode: it holds no
 * VNI and no remote of its own; the programs set both per packet
 * (bpf_skb_set_tunnel_key) and read them on receive. Cilium's cilium_vxlan.
 * NOARP: the node's own packets reach it through routes with a tunnel
 * encapsulation (the nodes module's, "encap ip id 6 dst <node>"), and a
 * neighbour lookup there could never be answered (an ARP request carries
 * no tunnel key: the device drops it); the receiving overlay program
 * delivers by IP, whatever the inner destination MAC.
 * Created here, where the programs that use it are attached; left in place
 * when the agent stops (the attached overlay program keeps decapsulated
 * traffic flowing), adopted by the next run when its settings match. */

static int vxlan_create(struct datapath *dp)
{
	struct rtnl_link *link = rtnl_link_vxlan_alloc();
	if (!link)
		return -NLE_NOMEM;
	rtnl_link_set_name(link, dp->tunnel_dev);
	int rc = rtnl_link_vxlan_set_collect_metadata(link, 1);
	if (rc == 0)
		rc = rtnl_link_vxlan_set_port(link, dp->tunnel_port);
	if (rc == 0)
		rc = rtnl_link_vxlan_set_learning(link, 0);
	if (rc == 0) {
		rtnl_link_set_flags(link, IFF_UP | IFF_NOARP);
		rc = rtnl_link_add(dp->nl, link, NLM_F_CREATE | NLM_F_EXCL);
	}
	rtnl_link_put(link);
	return rc;
}

static int link_delete(struct datapath *dp, const char *name)
{
	struct rtnl_link *link = rtnl_link_alloc();
	if (!link)
		return -NLE_NOMEM;
	rtnl_link_set_name(link, name);
	int rc = rtnl_link_delete(dp->nl, link);
	rtnl_link_put(link);
	return rc;
}

int dp_tunnel_device_setup(struct datapath *dp, int *ifindex, int *how, char *err, size_t len)
{
	struct rtnl_link *link = NULL;
	int rc = rtnl_link_get_kernel(dp->nl, 0, dp->tunnel_dev, &link);
	*how = 0;
	if (rc == 0) {
		const char *kind = rtnl_link_get_type(link);
		uint32_t port = 0;
		bool is_vxlan = kind && !strcmp(kind, "vxlan");
		bool external = is_vxlan && rtnl_link_vxlan_get_collect_metadata(link) == 1;
		if (is_vxlan && rtnl_link_vxlan_get_port(link, &port) != 0)
			port = 0;
		bool fits = external && port == dp->tunnel_port;
		if (!is_vxlan)
			return refuse_kind(link, dp->tunnel_dev, kind, "vxlan",
					   "rename or remove it", err, len);
		if (fits) {
			rc = link_set_flags(dp->nl, link, IFF_NOARP);
			if (rc < 0) {
				rtnl_link_put(link);
				dp_seterr(err, len, "cannot set %s noarp: %s", dp->tunnel_dev,
					  nl_geterror(rc));
				return nl_errno(rc);
			}
			rc = adopt_up(dp, link, dp->tunnel_dev, false, err, len);
			if (rc < 0)
				return rc;
			*how = 1;
		} else {
			/* another port, or not external: replaced (a VXLAN
			 * device's settings cannot change in place) */
			rtnl_link_put(link);
			fibril_info(dp->m, "%s is a vxlan device of other settings (port %u%s): "
				    "replacing it", dp->tunnel_dev, port,
				    external ? "" : ", not external");
			rc = link_delete(dp, dp->tunnel_dev);
			if (rc < 0 && rc != -NLE_NODEV && rc != -NLE_OBJ_NOTFOUND) {
				dp_seterr(err, len, "cannot remove %s: %s", dp->tunnel_dev,
					  nl_geterror(rc));
				return nl_errno(rc);
			}
			*how = 2;
		}
	}
	if (*how != 1) {
		rc = vxlan_create(dp);
		if (rc < 0) {
			dp_seterr(err, len,
				  "cannot create the VXLAN device %s (external, port %u): %s",
				  dp->tunnel_dev, dp->tunnel_port, nl_geterror(rc));
			return nl_errno(rc);
		}
	}
	unsigned idx = if_nametoindex(dp->tunnel_dev);
	if (!idx) {
		int e = errno;
		dp_seterr(err, len, "tunnel device %s: %s", dp->tunnel_dev, strerror(e));
		return -e;
	}
	*ifindex = (int)idx;
	return 0;
}
