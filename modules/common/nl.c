/* modules/common/nl.c - the one wrapper over libnl-route-3 (see nl.h): the
 * links, addresses, routes and events of the modules and fibril-cni, each
 * libnl failure turned into a negative errno and libnl's words in the
 * caller's buffer. What each function sends is what its callers sent
 * before it was shared (the same objects, flags and order), so a caller
 * chooses only values: which device, which address, which protocol mark. */
#include "nl.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/if_addr.h>
#include <linux/lwtunnel.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/link/vxlan.h>
#include <netlink/route/route.h>

static int alen(int family)
{
	return family == AF_INET ? 4 : 16;
}

int mod_nl_errno(int nlerr)
{
	switch (nlerr < 0 ? -nlerr : nlerr) {
	case NLE_EXIST:
		return -EEXIST;
	case NLE_OBJ_NOTFOUND:
		return -ENOENT;
	case NLE_NODEV:
		return -ENODEV;
	case NLE_NOADDR:
		return -EADDRNOTAVAIL;
	case NLE_OPNOTSUPP:
		return -EOPNOTSUPP;
	case NLE_PERM:
		return -EPERM;
	case NLE_NOMEM:
		return -ENOMEM;
	case NLE_INVAL:
		return -EINVAL;
	case NLE_AGAIN:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* libnl's error into err; its errno. */
static int fail(int nlerr, char *err, size_t len)
{
	if (err && len)
		snprintf(err, len, "%s", nl_geterror(nlerr));
	return mod_nl_errno(nlerr);
}

static int out_of_memory(char *err, size_t len)
{
	if (err && len)
		snprintf(err, len, "out of memory");
	return -ENOMEM;
}

int mod_nl_open(struct nl_sock **out, char *err, size_t len)
{
	*out = NULL;
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk)
		return out_of_memory(err, len);
	int rc = nl_connect(sk, NETLINK_ROUTE);
	if (rc < 0) {
		nl_socket_free(sk);
		return fail(rc, err, len);
	}
	*out = sk;
	return 0;
}

void mod_nl_close(struct nl_sock *sk)
{
	if (sk)
		nl_socket_free(sk);
}

/* ---- links ------------------------------------------------------------------------ */

static void link_view(struct rtnl_link *link, struct mod_nl_link *l)
{
	memset(l, 0, sizeof(*l));
	l->ifindex = rtnl_link_get_ifindex(link);
	l->flags = rtnl_link_get_flags(link);
	l->mtu = rtnl_link_get_mtu(link);
	const char *name = rtnl_link_get_name(link), *kind = rtnl_link_get_type(link);
	snprintf(l->name, sizeof(l->name), "%s", name ? name : "");
	snprintf(l->kind, sizeof(l->kind), "%s", kind ? kind : "");
	struct nl_addr *mac = rtnl_link_get_addr(link);
	if (mac)
		nl_addr2str(mac, l->mac, sizeof(l->mac));
	if (kind && !strcmp(kind, "vxlan")) {
		uint32_t port = 0;
		l->vxlan_external = rtnl_link_vxlan_get_collect_metadata(link) == 1;
		if (rtnl_link_vxlan_get_port(link, &port) == 0)
			l->vxlan_port = (uint16_t)port;
	}
	l->obj = link;
}

int mod_nl_link_get(struct nl_sock *sk, const char *name, struct mod_nl_link *out, char *err,
		    size_t len)
{
	struct rtnl_link *link = NULL;
	memset(out, 0, sizeof(*out));
	int rc = rtnl_link_get_kernel(sk, 0, name, &link);
	if (rc < 0) {
		int e = fail(rc, err, len);
		return rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV ? 0 : e;
	}
	link_view(link, out);
	return 1;
}

void mod_nl_link_release(struct mod_nl_link *l)
{
	if (l->obj)
		rtnl_link_put(l->obj);
	l->obj = NULL;
}

int mod_nl_link_change(struct nl_sock *sk, const struct mod_nl_link *l, const char *rename,
		       unsigned int flags, char *err, size_t len)
{
	struct rtnl_link *change = rtnl_link_alloc();
	if (!change)
		return out_of_memory(err, len);
	if (rename)
		rtnl_link_set_name(change, rename);
	if (flags)
		rtnl_link_set_flags(change, flags);
	int rc = rtnl_link_change(sk, l->obj, change, 0);
	rtnl_link_put(change);
	return rc < 0 ? fail(rc, err, len) : 0;
}

int mod_nl_link_set_flags(struct nl_sock *sk, const struct mod_nl_link *l, unsigned int flags,
			  char *err, size_t len)
{
	if ((rtnl_link_get_flags(l->obj) & flags) == flags)
		return 0;
	return mod_nl_link_change(sk, l, NULL, flags, err, len);
}

int mod_nl_link_del(struct nl_sock *sk, const char *name, char *err, size_t len)
{
	struct rtnl_link *link = rtnl_link_alloc();
	if (!link)
		return out_of_memory(err, len);
	rtnl_link_set_name(link, name);
	int rc = rtnl_link_delete(sk, link);
	rtnl_link_put(link);
	if (rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV)
		return 0;
	return rc < 0 ? fail(rc, err, len) : 1;
}

int mod_nl_link_walk(struct nl_sock *sk, void (*fn)(const struct mod_nl_link *l, void *ud), void *ud,
		     char *err, size_t len)
{
	struct nl_cache *cache = NULL;
	int rc = rtnl_link_alloc_cache(sk, AF_UNSPEC, &cache);
	if (rc < 0)
		return fail(rc, err, len);
	for (struct nl_object *o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
		struct mod_nl_link l;
		link_view((struct rtnl_link *)o, &l);
		fn(&l, ud);
	}
	nl_cache_free(cache);
	return 0;
}

/* rtnl_link_add of a new link, the link put. */
static int link_add(struct nl_sock *sk, struct rtnl_link *link, unsigned int flags, char *err,
		    size_t len)
{
	if (flags)
		rtnl_link_set_flags(link, flags);
	int rc = rtnl_link_add(sk, link, NLM_F_CREATE | NLM_F_EXCL);
	rtnl_link_put(link);
	return rc < 0 ? fail(rc, err, len) : 0;
}

int mod_nl_veth_add(struct nl_sock *sk, const char *name, const char *peer, int mtu,
		    int peer_netns_fd, unsigned int flags, char *err, size_t len)
{
	struct rtnl_link *link = rtnl_link_veth_alloc();
	if (!link)
		return out_of_memory(err, len);
	struct rtnl_link *p = rtnl_link_veth_get_peer(link);
	rtnl_link_set_name(link, name);
	rtnl_link_set_name(p, peer);
	if (mtu > 0) {
		rtnl_link_set_mtu(link, (unsigned int)mtu);
		rtnl_link_set_mtu(p, (unsigned int)mtu);
	}
	if (peer_netns_fd >= 0)
		rtnl_link_set_ns_fd(p, peer_netns_fd);
	rtnl_link_put(p); /* the pair goes with link */
	return link_add(sk, link, flags, err, len);
}

int mod_nl_dummy_add(struct nl_sock *sk, const char *name, unsigned int flags, char *err,
		     size_t len)
{
	struct rtnl_link *link = rtnl_link_alloc();
	if (!link)
		return out_of_memory(err, len);
	rtnl_link_set_name(link, name);
	int rc = rtnl_link_set_type(link, "dummy");
	if (rc < 0) {
		rtnl_link_put(link);
		return fail(rc, err, len);
	}
	return link_add(sk, link, flags, err, len);
}

int mod_nl_vxlan_external_add(struct nl_sock *sk, const char *name, uint16_t port,
			      unsigned int flags, char *err, size_t len)
{
	struct rtnl_link *link = rtnl_link_vxlan_alloc();
	if (!link)
		return out_of_memory(err, len);
	rtnl_link_set_name(link, name);
	int rc = rtnl_link_vxlan_set_collect_metadata(link, 1);
	if (rc == 0)
		rc = rtnl_link_vxlan_set_port(link, port);
	if (rc == 0)
		rc = rtnl_link_vxlan_set_learning(link, 0);
	if (rc < 0) {
		rtnl_link_put(link);
		return fail(rc, err, len);
	}
	return link_add(sk, link, flags, err, len);
}

/* ---- addresses ------------------------------------------------------------------- */

/* The address object of an add or a delete; NULL when out of memory. */
static struct rtnl_addr *addr_build(int ifindex, int family, const void *addr,
				    unsigned int prefixlen, int *rc)
{
	struct nl_addr *local = nl_addr_build(family, addr, (size_t)alen(family));
	struct rtnl_addr *a = rtnl_addr_alloc();
	*rc = -NLE_NOMEM;
	if (local && a) {
		nl_addr_set_prefixlen(local, (int)prefixlen);
		rtnl_addr_set_ifindex(a, ifindex);
		rtnl_addr_set_family(a, family);
		*rc = rtnl_addr_set_local(a, local);
		if (*rc == 0) {
			rtnl_addr_set_prefixlen(a, (int)prefixlen);
			if (family == AF_INET6)
				rtnl_addr_set_flags(a, IFA_F_NODAD);
			rtnl_addr_set_scope(a, RT_SCOPE_UNIVERSE);
		}
	}
	if (local)
		nl_addr_put(local);
	if (*rc < 0 && a) {
		rtnl_addr_put(a);
		a = NULL;
	}
	return a;
}

int mod_nl_addr_add(struct nl_sock *sk, int ifindex, int family, const void *addr,
		    unsigned int prefixlen, int nlm_flags, char *err, size_t len)
{
	int rc;
	struct rtnl_addr *a = addr_build(ifindex, family, addr, prefixlen, &rc);
	if (a) {
		rc = rtnl_addr_add(sk, a, nlm_flags);
		rtnl_addr_put(a);
	}
	return rc < 0 ? fail(rc, err, len) : 0;
}

int mod_nl_addr_del(struct nl_sock *sk, int ifindex, int family, const void *addr,
		    unsigned int prefixlen, char *err, size_t len)
{
	int rc;
	struct rtnl_addr *a = addr_build(ifindex, family, addr, prefixlen, &rc);
	if (a) {
		rc = rtnl_addr_delete(sk, a, 0);
		rtnl_addr_put(a);
	}
	return rc < 0 ? fail(rc, err, len) : 0;
}

int mod_nl_addr_walk(struct nl_sock *sk, void (*fn)(struct nl_sock *sk, const struct mod_nl_addr *a,
						    void *ud),
		     void *ud, char *err, size_t len)
{
	struct nl_cache *cache = NULL;
	int rc = rtnl_addr_alloc_cache(sk, &cache);
	if (rc < 0)
		return fail(rc, err, len);
	for (struct nl_object *o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
		struct rtnl_addr *obj = (struct rtnl_addr *)o;
		struct nl_addr *local = rtnl_addr_get_local(obj);
		int family = local ? nl_addr_get_family(local) : AF_UNSPEC;
		if ((family != AF_INET && family != AF_INET6) ||
		    nl_addr_get_len(local) != (unsigned int)alen(family))
			continue;
		struct mod_nl_addr a = {
			.ifindex = rtnl_addr_get_ifindex(obj),
			.family = family,
			.prefixlen = (unsigned int)rtnl_addr_get_prefixlen(obj),
			.scope = rtnl_addr_get_scope(obj),
			.obj = obj,
		};
		memcpy(a.addr, nl_addr_get_binary_addr(local), (size_t)alen(family));
		fn(sk, &a, ud);
	}
	nl_cache_free(cache);
	return 0;
}

int mod_nl_addr_remove(struct nl_sock *sk, const struct mod_nl_addr *a, char *err, size_t len)
{
	int rc = rtnl_addr_delete(sk, a->obj, 0);
	return rc < 0 ? fail(rc, err, len) : 0;
}

int mod_nl_addr_parse(const char *text, int *family, uint8_t out[16])
{
	struct nl_addr *a = NULL;
	int fam = strchr(text, ':') ? AF_INET6 : AF_INET;
	if (nl_addr_parse(text, fam, &a) < 0)
		return -EINVAL;
	bool ok = nl_addr_get_family(a) == fam && nl_addr_get_len(a) == (unsigned int)alen(fam);
	if (ok)
		memcpy(out, nl_addr_get_binary_addr(a), (size_t)alen(fam));
	nl_addr_put(a);
	if (!ok)
		return -EINVAL;
	*family = fam;
	return 0;
}

/* ---- routes ------------------------------------------------------------------------ */

/* The route object of an add or a delete through libnl; NULL when out of
 * memory. */
static struct rtnl_route *route_build(const struct mod_nl_route *r)
{
	size_t n = (size_t)alen(r->family);
	struct rtnl_route *route = rtnl_route_alloc();
	struct nl_addr *dst = nl_addr_build(r->family, r->dst, n);
	struct nl_addr *gw = r->gateway ? nl_addr_build(r->family, r->gateway, n) : NULL;
	struct nl_addr *src = r->pref_src ? nl_addr_build(r->family, r->pref_src, n) : NULL;
	struct rtnl_nexthop *nh = r->oif || r->gateway ? rtnl_route_nh_alloc() : NULL;
	bool ok = route && dst && (gw || !r->gateway) && (src || !r->pref_src) &&
		  (nh || !(r->oif || r->gateway));
	if (ok) {
		nl_addr_set_prefixlen(dst, (int)r->dst_len);
		rtnl_route_set_family(route, (uint8_t)r->family);
		rtnl_route_set_dst(route, dst);
		rtnl_route_set_table(route, RT_TABLE_MAIN);
		rtnl_route_set_scope(route, r->scope);
		rtnl_route_set_type(route, RTN_UNICAST);
		rtnl_route_set_protocol(route, r->protocol);
		if (r->mtu)
			rtnl_route_set_metric(route, RTAX_MTU, r->mtu);
		if (nh) {
			if (r->oif)
				rtnl_route_nh_set_ifindex(nh, r->oif);
			if (gw)
				rtnl_route_nh_set_gateway(nh, gw);
			rtnl_route_add_nexthop(route, nh);
			nh = NULL;
		}
		if (src)
			rtnl_route_set_pref_src(route, src);
	}
	if (nh)
		rtnl_route_nh_free(nh);
	if (dst)
		nl_addr_put(dst);
	if (gw)
		nl_addr_put(gw);
	if (src)
		nl_addr_put(src);
	if (!ok && route) {
		rtnl_route_put(route);
		route = NULL;
	}
	return route;
}

/* A route with an IP tunnel encapsulation: libnl (3.7) has no helper for
 * one, the message is built here. */
static int route_add_encap(struct nl_sock *sk, const struct mod_nl_route *r, int nlm_flags)
{
	struct rtmsg rtm = {
		.rtm_family = (uint8_t)r->family,
		.rtm_dst_len = (uint8_t)r->dst_len,
		.rtm_table = RT_TABLE_MAIN,
		.rtm_protocol = r->protocol,
		.rtm_scope = r->scope,
		.rtm_type = RTN_UNICAST,
	};
	int n = alen(r->family), en = alen(r->encap_family);
	if (r->gateway)
		return -NLE_INVAL;
	struct nl_msg *msg = nlmsg_alloc_simple(RTM_NEWROUTE, nlm_flags | NLM_F_CREATE);
	if (!msg)
		return -NLE_NOMEM;
	struct nlattr *encap = NULL;
	int rc = nlmsg_append(msg, &rtm, sizeof(rtm), NLMSG_ALIGNTO);
	if (rc == 0)
		rc = nla_put(msg, RTA_DST, n, r->dst);
	if (rc == 0 && r->oif)
		rc = nla_put_u32(msg, RTA_OIF, (uint32_t)r->oif);
	if (rc == 0 && r->pref_src)
		rc = nla_put(msg, RTA_PREFSRC, n, r->pref_src);
	if (rc == 0 && r->mtu) {
		struct nlattr *metrics = nla_nest_start(msg, RTA_METRICS);
		if (!metrics)
			rc = -NLE_NOMEM;
		else if (!(rc = nla_put_u32(msg, RTAX_MTU, r->mtu)))
			nla_nest_end(msg, metrics);
	}
	bool v4 = r->encap_family == AF_INET;
	if (rc == 0)
		rc = nla_put_u16(msg, RTA_ENCAP_TYPE, v4 ? LWTUNNEL_ENCAP_IP : LWTUNNEL_ENCAP_IP6);
	if (rc == 0 && !(encap = nla_nest_start(msg, RTA_ENCAP)))
		rc = -NLE_NOMEM;
	if (rc == 0) {
		uint64_t id = htobe64(r->encap_id); /* tunnel ids are 64-bit, big-endian */
		rc = nla_put(msg, v4 ? LWTUNNEL_IP_ID : LWTUNNEL_IP6_ID, sizeof(id), &id);
		if (rc == 0)
			rc = nla_put(msg, v4 ? LWTUNNEL_IP_DST : LWTUNNEL_IP6_DST, en, r->encap_dst);
		if (rc == 0)
			rc = nla_put_u8(msg, v4 ? LWTUNNEL_IP_TTL : LWTUNNEL_IP6_HOPLIMIT, r->encap_ttl);
	}
	if (rc == 0) {
		nla_nest_end(msg, encap);
		rc = nl_send_auto(sk, msg);
	}
	if (rc >= 0)
		rc = nl_wait_for_ack(sk);
	nlmsg_free(msg);
	return rc < 0 ? rc : 0;
}

int mod_nl_route_add(struct nl_sock *sk, const struct mod_nl_route *r, int nlm_flags, char *err,
		     size_t len)
{
	int rc;
	if (r->encap_family) {
		rc = route_add_encap(sk, r, nlm_flags);
	} else {
		struct rtnl_route *route = route_build(r);
		if (!route)
			return out_of_memory(err, len);
		rc = rtnl_route_add(sk, route, nlm_flags);
		rtnl_route_put(route);
	}
	return rc < 0 ? fail(rc, err, len) : 0;
}

int mod_nl_route_del(struct nl_sock *sk, const struct mod_nl_route *r, char *err, size_t len)
{
	struct rtnl_route *route = route_build(r);
	if (!route)
		return out_of_memory(err, len);
	int rc = rtnl_route_delete(sk, route, 0);
	rtnl_route_put(route);
	return rc < 0 ? fail(rc, err, len) : 0;
}

struct route_dump {
	void (*fn)(const struct mod_nl_route_entry *r, void *ud);
	void *ud;
};

/* Copy attribute a into out when it is n bytes long. */
static bool attr_copy(const struct nlattr *a, void *out, int n)
{
	if (!a || nla_len(a) != n)
		return false;
	memcpy(out, nla_data(a), (size_t)n);
	return true;
}

static int route_msg(struct nl_msg *msg, void *arg)
{
	struct route_dump *d = arg;
	struct nlmsghdr *h = nlmsg_hdr(msg);
	struct nlattr *tb[RTA_MAX + 1];
	if (h->nlmsg_type != RTM_NEWROUTE || nlmsg_parse(h, sizeof(struct rtmsg), tb, RTA_MAX, NULL) < 0)
		return NL_OK;
	const struct rtmsg *rtm = nlmsg_data(h);
	if (rtm->rtm_family != AF_INET && rtm->rtm_family != AF_INET6)
		return NL_OK;
	int n = alen(rtm->rtm_family);
	if ((tb[RTA_DST] && nla_len(tb[RTA_DST]) != n) ||
	    (tb[RTA_GATEWAY] && nla_len(tb[RTA_GATEWAY]) != n))
		return NL_OK;
	struct mod_nl_route_entry e = {
		.family = rtm->rtm_family,
		.dst_len = rtm->rtm_dst_len,
		.table = tb[RTA_TABLE] ? nla_get_u32(tb[RTA_TABLE]) : rtm->rtm_table,
		.protocol = rtm->rtm_protocol,
		.scope = rtm->rtm_scope,
		.type = rtm->rtm_type,
		.oif = tb[RTA_OIF] ? (int)nla_get_u32(tb[RTA_OIF]) : 0,
		.multipath = tb[RTA_MULTIPATH] != NULL,
	};
	e.has_dst = attr_copy(tb[RTA_DST], e.dst, n);
	e.has_gateway = attr_copy(tb[RTA_GATEWAY], e.gateway, n);
	e.has_pref_src = attr_copy(tb[RTA_PREFSRC], e.pref_src, n);
	if (e.multipath) {
		e.nexthops = nla_data(tb[RTA_MULTIPATH]);
		e.nexthops_len = (size_t)nla_len(tb[RTA_MULTIPATH]);
	}
	struct nlattr *mx[RTAX_MAX + 1];
	if (tb[RTA_METRICS] && nla_parse_nested(mx, RTAX_MAX, tb[RTA_METRICS], NULL) == 0 &&
	    mx[RTAX_MTU] && nla_len(mx[RTAX_MTU]) >= 4)
		e.mtu = nla_get_u32(mx[RTAX_MTU]);
	if (tb[RTA_ENCAP] && tb[RTA_ENCAP_TYPE]) {
		uint16_t type = nla_get_u16(tb[RTA_ENCAP_TYPE]);
		struct nlattr *x[LWTUNNEL_IP_MAX + 1];
		if ((type == LWTUNNEL_ENCAP_IP || type == LWTUNNEL_ENCAP_IP6) &&
		    nla_parse_nested(x, LWTUNNEL_IP_MAX, tb[RTA_ENCAP], NULL) == 0) {
			/* LWTUNNEL_IP_ID/DST == LWTUNNEL_IP6_ID/DST */
			int ef = type == LWTUNNEL_ENCAP_IP ? AF_INET : AF_INET6;
			uint64_t id = 0;
			if (attr_copy(x[LWTUNNEL_IP_ID], &id, sizeof(id)))
				e.encap_id = be64toh(id);
			if (attr_copy(x[LWTUNNEL_IP_DST], e.encap_dst, alen(ef)))
				e.encap_family = ef;
		}
	}
	d->fn(&e, d->ud);
	return NL_OK;
}

int mod_nl_route_dump(struct nl_sock *sk, int family,
		      void (*fn)(const struct mod_nl_route_entry *r, void *ud), void *ud, char *err,
		      size_t len)
{
	struct route_dump d = {.fn = fn, .ud = ud};
	struct rtmsg rtm = {.rtm_family = (uint8_t)family};
	struct nl_cb *cb = nl_cb_alloc(NL_CB_DEFAULT);
	if (!cb)
		return out_of_memory(err, len);
	nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, route_msg, &d);
	int rc = nl_send_simple(sk, RTM_GETROUTE, NLM_F_DUMP, &rtm, sizeof(rtm));
	if (rc >= 0)
		rc = nl_recvmsgs(sk, cb);
	nl_cb_put(cb);
	return rc < 0 ? fail(rc, err, len) : 0;
}

bool mod_nl_route_through(const struct mod_nl_route_entry *r, int oif, const void *gateway)
{
	size_t n = (size_t)alen(r->family);
	if (!r->multipath)
		return r->oif == oif && (!gateway || (r->has_gateway && !memcmp(r->gateway, gateway, n)));
	int rest = (int)r->nexthops_len;
	for (const struct rtnexthop *nh = r->nexthops; RTNH_OK(nh, rest);
	     rest -= (int)RTNH_ALIGN(nh->rtnh_len), nh = RTNH_NEXT(nh)) {
		if (nh->rtnh_ifindex != oif)
			continue;
		if (!gateway)
			return true;
		struct nlattr *tb[RTA_MAX + 1];
		uint8_t via[16];
		if (nla_parse(tb, RTA_MAX, (struct nlattr *)RTNH_DATA(nh),
			      (int)(nh->rtnh_len - sizeof(*nh)), NULL) == 0 &&
		    attr_copy(tb[RTA_GATEWAY], via, (int)n) && !memcmp(via, gateway, n))
			return true;
	}
	return false;
}

/* ---- the kernel's events ------------------------------------------------------------ */

static int event_msg(struct nl_msg *msg, void *arg)
{
	struct mod_nl_events *ev = arg;
	struct nlmsghdr *h = nlmsg_hdr(msg);
	struct mod_nl_event e = {.type = h->nlmsg_type};
	char name[IF_NAMESIZE] = "";
	switch (h->nlmsg_type) {
	case RTM_NEWLINK:
	case RTM_DELLINK: {
		if (!nlmsg_valid_hdr(h, sizeof(struct ifinfomsg)))
			return NL_OK;
		const struct ifinfomsg *ifi = nlmsg_data(h);
		struct nlattr *tb[IFLA_MAX + 1];
		e.ifindex = ifi->ifi_index;
		if (nlmsg_parse(h, sizeof(*ifi), tb, IFLA_MAX, NULL) == 0 && tb[IFLA_IFNAME]) {
			snprintf(name, sizeof(name), "%.*s", nla_len(tb[IFLA_IFNAME]),
				 (const char *)nla_data(tb[IFLA_IFNAME]));
			e.ifname = name;
		}
		break;
	}
	case RTM_NEWADDR:
	case RTM_DELADDR:
		if (!nlmsg_valid_hdr(h, sizeof(struct ifaddrmsg)))
			return NL_OK;
		e.ifindex = (int)((const struct ifaddrmsg *)nlmsg_data(h))->ifa_index;
		break;
	case RTM_NEWQDISC:
	case RTM_DELQDISC:
	case RTM_NEWTCLASS:
	case RTM_DELTCLASS:
	case RTM_NEWTFILTER:
	case RTM_DELTFILTER:
		if (!nlmsg_valid_hdr(h, sizeof(struct tcmsg)))
			return NL_OK;
		e.ifindex = ((const struct tcmsg *)nlmsg_data(h))->tcm_ifindex;
		break;
	default:
		return NL_OK;
	}
	ev->fn(&e, ev->ud);
	return NL_OK;
}

int mod_nl_events_open(struct mod_nl_events *ev, const unsigned int *groups, size_t n, int rcvbuf,
		       void (*fn)(const struct mod_nl_event *e, void *ud), void *ud, char *err,
		       size_t len)
{
	ev->fn = fn;
	ev->ud = ud;
	ev->sk = nl_socket_alloc();
	if (!ev->sk)
		return out_of_memory(err, len);
	/* the kernel's notifications carry no sequence number of ours */
	nl_socket_disable_seq_check(ev->sk);
	nl_socket_modify_cb(ev->sk, NL_CB_VALID, NL_CB_CUSTOM, event_msg, ev);
	int rc = nl_connect(ev->sk, NETLINK_ROUTE);
	if (rc == 0)
		rc = nl_socket_set_nonblocking(ev->sk);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = nl_socket_add_membership(ev->sk, (int)groups[i]);
	if (rc == 0 && rcvbuf > 0)
		nl_socket_set_buffer_size(ev->sk, rcvbuf, 0);
	if (rc < 0) {
		mod_nl_events_close(ev);
		return fail(rc, err, len);
	}
	return 0;
}

int mod_nl_events_read(struct mod_nl_events *ev, char *err, size_t len)
{
	int rc = nl_recvmsgs_default(ev->sk);
	if (rc >= 0)
		return 0;
	if (rc == -NLE_AGAIN)
		return -EAGAIN;
	if (rc == -NLE_NOMEM) { /* libnl's word for ENOBUFS */
		fail(rc, err, len);
		return -ENOBUFS;
	}
	return fail(rc, err, len);
}

void mod_nl_events_close(struct mod_nl_events *ev)
{
	mod_nl_close(ev->sk);
	ev->sk = NULL;
}

int mod_nl_events_fd(const struct mod_nl_events *ev)
{
	return nl_socket_get_fd(ev->sk);
}
