/* modules/datapath/dp_netlink.c - what the datapath sets up in the node's
 * network namespace through rtnetlink (modules/common/nl.c over
 * libnl-route-3): the host device
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

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "datapath.h"
#include "nl.h"

#define NL_WHY 128 /* room for libnl's reason */

int dp_nl_open(struct datapath *dp, char *err, size_t len)
{
	char why[NL_WHY];
	int rc = mod_nl_open(&dp->nl, why, sizeof(why));
	if (rc < 0)
		dp_seterr(err, len, "cannot open an rtnetlink socket: %s", why);
	return rc;
}

void dp_nl_close(struct datapath *dp)
{
	mod_nl_close(dp->nl);
	dp->nl = NULL;
}

/* ---- the host device ------------------------------------------------------------------ */

/* Make sure the veth peer is up too (a pair from the last run). */
static void peer_up(struct datapath *dp)
{
	struct mod_nl_link peer;
	char why[NL_WHY];
	if (mod_nl_link_get(dp->nl, dp->host_peer, &peer, why, sizeof(why)) == 1) {
		mod_nl_link_set_flags(dp->nl, &peer, IFF_UP, why, sizeof(why));
		mod_nl_link_release(&peer);
	}
}

static int create_veth_pair(struct datapath *dp, char *why, size_t len)
{
	/* flags on the host end only: the kernel refuses them on the peer */
	int rc = mod_nl_veth_add(dp->nl, dp->host_dev, dp->host_peer, 0, -1, IFF_UP, why, len);
	if (rc == 0)
		peer_up(dp);
	return rc;
}

/* An existing link of another kind than wanted: refused (the link is released). */
static int refuse_kind(struct mod_nl_link *l, const char *name, const char *want,
		       const char *hint, char *err, size_t len)
{
	dp_seterr(err, len, "device %s exists and is a %s link, not %s: %s", name,
		  l->kind[0] ? l->kind : "plain", want, hint);
	mod_nl_link_release(l);
	return -EEXIST;
}

/* An adopted link set up (and its veth peer when veth_peer); the link is released. */
static int adopt_up(struct datapath *dp, struct mod_nl_link *l, const char *name, bool veth_peer,
		    char *err, size_t len)
{
	char why[NL_WHY];
	int rc = mod_nl_link_set_flags(dp->nl, l, IFF_UP, why, sizeof(why));
	if (rc == 0 && veth_peer)
		peer_up(dp);
	mod_nl_link_release(l);
	if (rc < 0)
		dp_seterr(err, len, "cannot set %s up: %s", name, why);
	return rc;
}

/* Adopt or create the host device; returns its ifindex or a negative errno. */
static int host_device_ensure(struct datapath *dp, char *err, size_t len)
{
	struct mod_nl_link l;
	char why[NL_WHY];
	int rc = mod_nl_link_get(dp->nl, dp->host_dev, &l, why, sizeof(why));
	if (rc == 1) {
		if (strcmp(l.kind, "dummy") != 0 && strcmp(l.kind, "veth") != 0)
			return refuse_kind(&l, dp->host_dev, "dummy or veth",
					   "rename it or set [datapath] host-device", err, len);
		rc = adopt_up(dp, &l, dp->host_dev, !strcmp(l.kind, "veth"), err, len);
		if (rc < 0)
			return rc;
	} else {
		bool want_veth = !strcmp(dp->host_dev_type, "veth");
		rc = want_veth ? -EOPNOTSUPP : mod_nl_dummy_add(dp->nl, dp->host_dev, IFF_UP, why, sizeof(why));
		if (rc == -EOPNOTSUPP && strcmp(dp->host_dev_type, "dummy") != 0) {
			if (!want_veth)
				fibril_info(dp->m,
					    "the kernel has no dummy links: %s is a veth pair with %s",
					    dp->host_dev, dp->host_peer);
			rc = create_veth_pair(dp, why, sizeof(why));
		}
		if (rc < 0) {
			dp_seterr(err, len, "cannot create the host device %s (%s): %s", dp->host_dev,
				  dp->host_dev_type, why);
			return rc;
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

struct prune {
	struct datapath *dp;
	int ifindex;
	const struct wanted_addr *want;
	size_t n;
};

static void prune_one(struct nl_sock *sk, const struct mod_nl_addr *a, void *ud)
{
	const struct prune *p = ud;
	if (a->ifindex != p->ifindex || a->scope != RT_SCOPE_UNIVERSE)
		return;
	size_t blen = a->family == AF_INET ? 4 : 16;
	for (size_t i = 0; i < p->n; i++)
		if (p->want[i].af == a->family && !memcmp(p->want[i].bytes, a->addr, blen))
			return;
	char text[INET6_ADDRSTRLEN], why[NL_WHY];
	inet_ntop(a->family, a->addr, text, sizeof(text));
	int rc = mod_nl_addr_remove(sk, a, why, sizeof(why));
	fibril_info(p->dp->m, "removed %s from %s (no pool's gateway any more)%s%s", text,
		    p->dp->host_dev, rc < 0 ? ": " : "", rc < 0 ? why : "");
	dp_ipc_unclaim(p->dp, DP_IPC_SRC_DATAPATH, a->family == AF_INET ? 4 : 6, a->addr,
		       a->family == AF_INET ? 32 : 128, NULL, 0);
}

/* Remove global addresses of the device that are not gateways any more
 * (a pool changed since the last run), and their ipcache entries. */
static void addr_prune(struct datapath *dp, int ifindex, const struct wanted_addr *w, size_t n)
{
	struct prune p = {.dp = dp, .ifindex = ifindex, .want = w, .n = n};
	char why[NL_WHY];
	mod_nl_addr_walk(dp->nl, prune_one, &p, why, sizeof(why));
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
		char why[NL_WHY];
		int rc = mod_nl_addr_add(dp->nl, ifindex, want[i].af, want[i].bytes,
					 want[i].af == AF_INET ? 32 : 128, NLM_F_REPLACE, why, sizeof(why));
		if (rc < 0 && rc != -EEXIST) {
			dp_seterr(err, len, "cannot add the gateway %s to %s: %s", text, dp->host_dev, why);
			return rc;
		}
		int fam = want[i].af == AF_INET ? 4 : 6;
		rc = dp_ipc_claim_tunnel(dp, DP_IPC_SRC_DATAPATH, fam, want[i].bytes, fam == 4 ? 32 : 128,
					 DP_IDENTITY_HOST, 0, NULL, err, len);
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

/* The /32 (/128) route of addr out of ifindex, scope link, marked ours;
 * with_src: from the family's gateway (the node answers its pods from it,
 * as a router would). */
static struct mod_nl_route route_of(const struct datapath *dp, int family, const void *addr,
				    int ifindex, bool with_src)
{
	struct mod_nl_route r = {
		.family = family == 4 ? AF_INET : AF_INET6,
		.dst = addr,
		.dst_len = family == 4 ? 32 : 128,
		.protocol = DP_ROUTE_PROTO,
		.scope = RT_SCOPE_LINK,
		.oif = ifindex,
	};
	if (with_src && dp->node_ready && family == 4 && dp->node.has_ipv4)
		r.pref_src = &dp->node.gateway4;
	else if (with_src && dp->node_ready && family == 6 && dp->node.has_ipv6)
		r.pref_src = &dp->node.gateway6;
	return r;
}

int dp_route_add(struct datapath *dp, int family, const void *addr, int ifindex, char *err,
		 size_t len)
{
	char text[INET6_ADDRSTRLEN], why[NL_WHY];
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, text, sizeof(text));
	struct mod_nl_route r = route_of(dp, family, addr, ifindex, true);
	int rc = mod_nl_route_add(dp->nl, &r, NLM_F_REPLACE, why, sizeof(why));
	if (rc < 0)
		dp_seterr(err, len, "cannot add the route %s/%d dev ifindex %d: %s", text,
			  family == 4 ? 32 : 128, ifindex, why);
	return rc;
}

int dp_route_del(struct datapath *dp, int family, const void *addr, int ifindex, char *err,
		 size_t len)
{
	char text[INET6_ADDRSTRLEN], why[NL_WHY];
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, text, sizeof(text));
	struct mod_nl_route r = route_of(dp, family, addr, ifindex, false);
	int rc = mod_nl_route_del(dp->nl, &r, why, sizeof(why));
	/* gone with its veth, or never there */
	if (rc < 0 && rc != -ENOENT && rc != -ENODEV && rc != -EADDRNOTAVAIL) {
		dp_seterr(err, len, "cannot remove the route %s/%d: %s", text,
			  family == 4 ? 32 : 128, why);
		return rc;
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

int dp_tunnel_device_setup(struct datapath *dp, int *ifindex, int *how, char *err, size_t len)
{
	struct mod_nl_link l;
	char why[NL_WHY];
	int rc = mod_nl_link_get(dp->nl, dp->tunnel_dev, &l, why, sizeof(why));
	*how = 0;
	if (rc == 1) {
		bool is_vxlan = !strcmp(l.kind, "vxlan");
		bool external = is_vxlan && l.vxlan_external;
		uint16_t port = is_vxlan ? l.vxlan_port : 0;
		bool fits = external && port == dp->tunnel_port;
		if (!is_vxlan)
			return refuse_kind(&l, dp->tunnel_dev, "vxlan", "rename or remove it", err, len);
		if (fits) {
			rc = mod_nl_link_set_flags(dp->nl, &l, IFF_NOARP, why, sizeof(why));
			if (rc < 0) {
				mod_nl_link_release(&l);
				dp_seterr(err, len, "cannot set %s noarp: %s", dp->tunnel_dev, why);
				return rc;
			}
			rc = adopt_up(dp, &l, dp->tunnel_dev, false, err, len);
			if (rc < 0)
				return rc;
			*how = 1;
		} else {
			/* another port, or not external: replaced (a VXLAN
			 * device's settings cannot change in place) */
			mod_nl_link_release(&l);
			fibril_info(dp->m, "%s is a vxlan device of other settings (port %u%s): "
				    "replacing it", dp->tunnel_dev, port,
				    external ? "" : ", not external");
			rc = mod_nl_link_del(dp->nl, dp->tunnel_dev, why, sizeof(why));
			if (rc < 0) {
				dp_seterr(err, len, "cannot remove %s: %s", dp->tunnel_dev, why);
				return rc;
			}
			*how = 2;
		}
	}
	if (*how != 1) {
		rc = mod_nl_vxlan_external_add(dp->nl, dp->tunnel_dev, dp->tunnel_port,
					       IFF_UP | IFF_NOARP, why, sizeof(why));
		if (rc < 0) {
			dp_seterr(err, len,
				  "cannot create the VXLAN device %s (external, port %u): %s",
				  dp->tunnel_dev, dp->tunnel_port, why);
			return rc;
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
