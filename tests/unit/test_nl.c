/* tests/unit/test_nl.c - unit tests of the modules' and fibril-cni's
 * libnl-route-3 wrapper (modules/common/nl.c), in a network namespace of
 * the test's own (as root, or unprivileged in a user namespace of its own
 * where the kernel allows one): libnl's errors as errno, text addresses,
 * links looked up, created (dummy, veth, external VXLAN), renamed, set up,
 * listed and deleted; addresses added, replaced, listed and removed; routes
 * with a protocol mark, a gateway, an MTU, a preferred source and an IP
 * tunnel encapsulation added, read back, refused twice and deleted; a
 * multipath route's next hops; and the link and address events. */
#include "cunit_main.h"
#include "nl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/if.h>
#include <linux/rtnetlink.h>
#include <netlink/errno.h>

#define PROTO_MARK 0xf1

static struct nl_sock *g_sk;
static char g_why[256];

static bool in_ci(void)
{
	const char *ci = getenv("CI");
	return ci && *ci && strcmp(ci, "false") != 0 && strcmp(ci, "0") != 0;
}

/* In CI: fail the suite. Elsewhere: skip the program. */
static int cannot_run(const char *why)
{
	if (in_ci()) {
		fprintf(stderr, "FAIL: test_nl: %s (CI=true: not skipping)\n", why);
		return 1;
	}
	printf("SKIP: test_nl: %s\n", why);
	exit(77);
}

static int suite_setup(void)
{
	if (unshare(CLONE_NEWNET) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
		return cannot_run("no network namespace of its own (not root, no user namespaces)");
	if (mod_nl_open(&g_sk, g_why, sizeof(g_why)) < 0)
		return cannot_run(g_why);
	return 0;
}

static int suite_teardown(void)
{
	mod_nl_close(g_sk);
	return 0;
}

static int ifindex_of(const char *name)
{
	struct mod_nl_link l;
	if (mod_nl_link_get(g_sk, name, &l, g_why, sizeof(g_why)) != 1)
		return 0;
	mod_nl_link_release(&l);
	return l.ifindex;
}

static void test_errno(void)
{
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_EXIST), -EEXIST);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_OBJ_NOTFOUND), -ENOENT);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_NODEV), -ENODEV);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_NOADDR), -EADDRNOTAVAIL);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_OPNOTSUPP), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_PERM), -EPERM);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_NOMEM), -ENOMEM);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_INVAL), -EINVAL);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_AGAIN), -EAGAIN);
	CU_ASSERT_EQUAL(mod_nl_errno(-NLE_MSGSIZE), -EIO);
}

static void test_addr_parse(void)
{
	uint8_t b[16], want6[16];
	int family = 0;
	CU_ASSERT_EQUAL(mod_nl_addr_parse("10.1.2.3", &family, b), 0);
	CU_ASSERT_EQUAL(family, AF_INET);
	CU_ASSERT(b[0] == 10 && b[1] == 1 && b[2] == 2 && b[3] == 3);
	CU_ASSERT_EQUAL(mod_nl_addr_parse("fd00::7", &family, b), 0);
	CU_ASSERT_EQUAL(family, AF_INET6);
	inet_pton(AF_INET6, "fd00::7", want6);
	CU_ASSERT(!memcmp(b, want6, 16));
	/* as libnl reads them: a prefix is accepted (and not returned) */
	CU_ASSERT_EQUAL(mod_nl_addr_parse("10.1.2.3/24", &family, b), 0);
	CU_ASSERT_EQUAL(mod_nl_addr_parse("10.1.2.x", &family, b), -EINVAL);
	CU_ASSERT_EQUAL(mod_nl_addr_parse("default", &family, b), -EINVAL);
	CU_ASSERT_EQUAL(mod_nl_addr_parse("fd00::zz", &family, b), -EINVAL);
}

static void test_loopback(void)
{
	struct mod_nl_link l;
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "lo", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT_EQUAL(l.ifindex, 1);
	CU_ASSERT_STRING_EQUAL(l.name, "lo");
	CU_ASSERT_STRING_EQUAL(l.kind, "");
	CU_ASSERT(l.flags & IFF_LOOPBACK);
	CU_ASSERT_FALSE(l.flags & IFF_UP); /* a new namespace's lo is down */
	CU_ASSERT_EQUAL(mod_nl_link_set_flags(g_sk, &l, IFF_UP, g_why, sizeof(g_why)), 0);
	mod_nl_link_release(&l);
	CU_ASSERT_PTR_NULL(l.obj);
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "lo", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT(l.flags & IFF_UP);
	mod_nl_link_release(&l);

	g_why[0] = '\0';
	CU_ASSERT_EQUAL(mod_nl_link_get(g_sk, "nosuch0", &l, g_why, sizeof(g_why)), 0);
	CU_ASSERT(g_why[0] != '\0'); /* says why, for a caller that needs the link */
	CU_ASSERT_EQUAL(mod_nl_link_del(g_sk, "nosuch0", g_why, sizeof(g_why)), 0);
}

struct seen_links {
	bool lo, dummy, veth, peer;
};

static void see_link(const struct mod_nl_link *l, void *ud)
{
	struct seen_links *s = ud;
	s->lo |= !strcmp(l->name, "lo") && l->ifindex == 1;
	s->dummy |= !strcmp(l->name, "t-dummy0") && l->kind[0];
	s->veth |= !strcmp(l->name, "t-veth0") && !strcmp(l->kind, "veth");
	s->peer |= !strcmp(l->name, "t-veth2") && !strcmp(l->kind, "veth");
}

/* The device of the address and route tests, t-dummy0: a dummy link, or
 * where the kernel has no dummy driver (as the datapath does) a veth pair
 * with t-dummy1. */
static void test_links(void)
{
	struct mod_nl_link l;
	int rc = mod_nl_dummy_add(g_sk, "t-dummy0", IFF_UP, g_why, sizeof(g_why));
	CU_ASSERT_FATAL(rc == 0 || rc == -EOPNOTSUPP);
	if (rc == 0) {
		CU_ASSERT_EQUAL(mod_nl_dummy_add(g_sk, "t-dummy0", IFF_UP, g_why, sizeof(g_why)), -EEXIST);
		CU_ASSERT_STRING_EQUAL(g_why, "Object exists");
	} else {
		CU_ASSERT_EQUAL_FATAL(mod_nl_veth_add(g_sk, "t-dummy0", "t-dummy1", 0, -1, IFF_UP, g_why,
						      sizeof(g_why)), 0);
		CU_ASSERT_EQUAL(mod_nl_veth_add(g_sk, "t-dummy0", "t-dummy1", 0, -1, IFF_UP, g_why,
						sizeof(g_why)), -EEXIST);
		CU_ASSERT_STRING_EQUAL(g_why, "Object exists");
	}
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "t-dummy0", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT_STRING_EQUAL(l.kind, rc == 0 ? "dummy" : "veth");
	CU_ASSERT(l.flags & IFF_UP);
	CU_ASSERT_EQUAL(strlen(l.mac), 17);
	mod_nl_link_release(&l);

	/* the host end up, the peer down (so that it can be renamed) */
	CU_ASSERT_EQUAL_FATAL(mod_nl_veth_add(g_sk, "t-veth0", "t-veth1", 1400, -1, IFF_UP, g_why,
					      sizeof(g_why)), 0);
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "t-veth0", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT_STRING_EQUAL(l.kind, "veth");
	CU_ASSERT_EQUAL(l.mtu, 1400);
	CU_ASSERT(l.flags & IFF_UP);
	mod_nl_link_release(&l);
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "t-veth1", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT_EQUAL(l.mtu, 1400);
	CU_ASSERT_FALSE(l.flags & IFF_UP);
	CU_ASSERT_EQUAL(mod_nl_link_change(g_sk, &l, "t-veth2", IFF_UP, g_why, sizeof(g_why)), 0);
	mod_nl_link_release(&l);
	CU_ASSERT_EQUAL(ifindex_of("t-veth1"), 0);
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "t-veth2", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT(l.flags & IFF_UP);
	mod_nl_link_release(&l);

	struct seen_links seen = {0};
	CU_ASSERT_EQUAL(mod_nl_link_walk(g_sk, see_link, &seen, g_why, sizeof(g_why)), 0);
	CU_ASSERT(seen.lo && seen.dummy && seen.veth && seen.peer);

	CU_ASSERT_EQUAL(mod_nl_link_del(g_sk, "t-veth0", g_why, sizeof(g_why)), 1);
	CU_ASSERT_EQUAL(ifindex_of("t-veth2"), 0); /* the pair goes together */
	CU_ASSERT_EQUAL(mod_nl_link_del(g_sk, "t-veth0", g_why, sizeof(g_why)), 0);
}

static void test_vxlan(void)
{
	struct mod_nl_link l;
	CU_ASSERT_EQUAL_FATAL(mod_nl_vxlan_external_add(g_sk, "t-vx0", 8472, IFF_UP | IFF_NOARP, g_why,
							sizeof(g_why)), 0);
	CU_ASSERT_EQUAL_FATAL(mod_nl_link_get(g_sk, "t-vx0", &l, g_why, sizeof(g_why)), 1);
	CU_ASSERT_STRING_EQUAL(l.kind, "vxlan");
	CU_ASSERT(l.vxlan_external);
	CU_ASSERT_EQUAL(l.vxlan_port, 8472);
	CU_ASSERT((l.flags & (IFF_UP | IFF_NOARP)) == (IFF_UP | IFF_NOARP));
	mod_nl_link_release(&l);
}

struct seen_addrs {
	int ifindex;
	int v4, v6, v4_scope, v4_prefix;
	bool remove_v4;
	int removed;
};

static void see_addr(struct nl_sock *sk, const struct mod_nl_addr *a, void *ud)
{
	struct seen_addrs *s = ud;
	static const uint8_t v4[4] = {10, 9, 0, 1};
	uint8_t v6[16];
	inet_pton(AF_INET6, "fd00:9::1", v6);
	if (a->ifindex != s->ifindex)
		return;
	if (a->family == AF_INET && !memcmp(a->addr, v4, 4)) {
		s->v4++;
		s->v4_scope = a->scope;
		s->v4_prefix = (int)a->prefixlen;
		if (s->remove_v4 && mod_nl_addr_remove(sk, a, g_why, sizeof(g_why)) == 0)
			s->removed++;
	}
	if (a->family == AF_INET6 && a->prefixlen == 128 && !memcmp(a->addr, v6, 16))
		s->v6++;
}

static void test_addrs(void)
{
	int dummy = ifindex_of("t-dummy0");
	CU_ASSERT_FATAL(dummy > 0);
	uint8_t v4[4] = {10, 9, 0, 1}, v6[16];
	inet_pton(AF_INET6, "fd00:9::1", v6);
	CU_ASSERT_EQUAL(mod_nl_addr_add(g_sk, dummy, AF_INET, v4, 32, 0, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(mod_nl_addr_add(g_sk, dummy, AF_INET, v4, 32, 0, g_why, sizeof(g_why)), -EEXIST);
	CU_ASSERT_EQUAL(mod_nl_addr_add(g_sk, dummy, AF_INET, v4, 32, NLM_F_REPLACE, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(mod_nl_addr_add(g_sk, dummy, AF_INET6, v6, 128, NLM_F_REPLACE, g_why, sizeof(g_why)), 0);

	struct seen_addrs s = {.ifindex = dummy};
	CU_ASSERT_EQUAL(mod_nl_addr_walk(g_sk, see_addr, &s, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(s.v4, 1);
	CU_ASSERT_EQUAL(s.v4_scope, RT_SCOPE_UNIVERSE);
	CU_ASSERT_EQUAL(s.v4_prefix, 32);
	CU_ASSERT_EQUAL(s.v6, 1);

	/* the v4 one removed as the walk lists it */
	s = (struct seen_addrs){.ifindex = dummy, .remove_v4 = true};
	CU_ASSERT_EQUAL(mod_nl_addr_walk(g_sk, see_addr, &s, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(s.removed, 1);
	s = (struct seen_addrs){.ifindex = dummy};
	CU_ASSERT_EQUAL(mod_nl_addr_walk(g_sk, see_addr, &s, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(s.v4, 0);
	CU_ASSERT_EQUAL(s.v6, 1);

	CU_ASSERT_EQUAL(mod_nl_addr_del(g_sk, dummy, AF_INET6, v6, 128, g_why, sizeof(g_why)), 0);
	CU_ASSERT(mod_nl_addr_del(g_sk, dummy, AF_INET6, v6, 128, g_why, sizeof(g_why)) < 0);
	/* back for the routes' preferred source */
	CU_ASSERT_EQUAL(mod_nl_addr_add(g_sk, dummy, AF_INET, v4, 32, NLM_F_REPLACE, g_why, sizeof(g_why)), 0);
}

/* The route of the dump to dst/dst_len in the main table, copied into *out. */
struct find_route {
	int family;
	uint8_t dst[16];
	unsigned int dst_len;
	int found;
	struct mod_nl_route_entry e;
};

static void find_one(const struct mod_nl_route_entry *r, void *ud)
{
	struct find_route *f = ud;
	if (r->family != f->family || r->dst_len != f->dst_len || r->table != RT_TABLE_MAIN)
		return;
	if (f->dst_len && (!r->has_dst || memcmp(r->dst, f->dst, f->family == AF_INET ? 4 : 16)))
		return;
	f->found++;
	f->e = *r;
	f->e.nexthops = NULL; /* the dump's message is gone after the call */
}

static int find_route(int family, const char *dst, unsigned int dst_len, struct mod_nl_route_entry *out)
{
	struct find_route f = {.family = family, .dst_len = dst_len};
	inet_pton(family, dst, f.dst);
	if (mod_nl_route_dump(g_sk, AF_UNSPEC, find_one, &f, g_why, sizeof(g_why)) < 0)
		return -1;
	*out = f.e;
	return f.found;
}

static void test_routes(void)
{
	int dummy = ifindex_of("t-dummy0"), vx = ifindex_of("t-vx0");
	CU_ASSERT_FATAL(dummy > 0 && vx > 0);
	uint8_t net[4] = {10, 77, 0, 0}, net2[4] = {10, 78, 0, 0}, gw[4] = {10, 77, 0, 5};
	uint8_t src[4] = {10, 9, 0, 1}, any[16] = {0}, net6[16], net3[4] = {10, 79, 0, 0};
	uint8_t tep[4] = {192, 0, 2, 7};
	struct mod_nl_route_entry e;

	/* out of a device, scope link, marked, with an MTU */
	struct mod_nl_route link = {.family = AF_INET, .dst = net, .dst_len = 24, .protocol = PROTO_MARK,
				    .scope = RT_SCOPE_LINK, .oif = dummy, .mtu = 1300};
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &link, NLM_F_REPLACE, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &link, NLM_F_EXCL, g_why, sizeof(g_why)), -EEXIST);
	CU_ASSERT_EQUAL_FATAL(find_route(AF_INET, "10.77.0.0", 24, &e), 1);
	CU_ASSERT_EQUAL(e.protocol, PROTO_MARK);
	CU_ASSERT_EQUAL(e.scope, RT_SCOPE_LINK);
	CU_ASSERT_EQUAL(e.type, RTN_UNICAST);
	CU_ASSERT_EQUAL(e.oif, dummy);
	CU_ASSERT_EQUAL(e.mtu, 1300);
	CU_ASSERT_FALSE(e.has_gateway || e.multipath || e.encap_family);
	CU_ASSERT(mod_nl_route_through(&e, dummy, NULL));
	CU_ASSERT_FALSE(mod_nl_route_through(&e, vx, NULL));
	CU_ASSERT_FALSE(mod_nl_route_through(&e, dummy, gw));

	/* via a gateway, no device named (nodes' routes) */
	struct mod_nl_route via = {.family = AF_INET, .dst = net2, .dst_len = 24, .protocol = PROTO_MARK + 1,
				   .gateway = gw};
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &via, NLM_F_CREATE | NLM_F_REPLACE, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL_FATAL(find_route(AF_INET, "10.78.0.0", 24, &e), 1);
	CU_ASSERT_EQUAL(e.protocol, PROTO_MARK + 1);
	CU_ASSERT(e.has_gateway && !memcmp(e.gateway, gw, 4));
	CU_ASSERT(mod_nl_route_through(&e, dummy, gw));
	/* deleted by destination and mark alone, in any scope */
	struct mod_nl_route gone = {.family = AF_INET, .dst = net2, .dst_len = 24,
				    .protocol = PROTO_MARK + 1, .scope = RT_SCOPE_NOWHERE};
	CU_ASSERT_EQUAL(mod_nl_route_del(g_sk, &gone, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(find_route(AF_INET, "10.78.0.0", 24, &e), 0);
	CU_ASSERT_EQUAL(mod_nl_route_del(g_sk, &gone, g_why, sizeof(g_why)), -ENOENT);

	/* the default route (fibril-cni's), from zeros */
	struct mod_nl_route def = {.family = AF_INET, .dst = any, .dst_len = 0, .protocol = RTPROT_STATIC,
				   .oif = dummy, .gateway = gw, .mtu = 1300};
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &def, NLM_F_EXCL, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL_FATAL(find_route(AF_INET, "0.0.0.0", 0, &e), 1);
	CU_ASSERT_EQUAL(e.protocol, RTPROT_STATIC);
	CU_ASSERT(mod_nl_route_through(&e, dummy, gw));

	/* IPv6, with the preferred source left out */
	inet_pton(AF_INET6, "fd00:77::", net6);
	struct mod_nl_route r6 = {.family = AF_INET6, .dst = net6, .dst_len = 64, .protocol = PROTO_MARK,
				  .scope = RT_SCOPE_LINK, .oif = dummy};
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &r6, NLM_F_REPLACE, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL_FATAL(find_route(AF_INET6, "fd00:77::", 64, &e), 1);
	CU_ASSERT_EQUAL(e.protocol, PROTO_MARK);
	CU_ASSERT_EQUAL(mod_nl_route_del(g_sk, &r6, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL(find_route(AF_INET6, "fd00:77::", 64, &e), 0);

	/* through the VXLAN device with an IP tunnel encapsulation, from src */
	struct mod_nl_route tun = {.family = AF_INET, .dst = net3, .dst_len = 24, .protocol = PROTO_MARK,
				   .scope = RT_SCOPE_LINK, .oif = vx, .pref_src = src, .mtu = 1450,
				   .encap_family = AF_INET, .encap_dst = tep, .encap_id = 6, .encap_ttl = 64};
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &tun, NLM_F_CREATE | NLM_F_REPLACE, g_why, sizeof(g_why)), 0);
	CU_ASSERT_EQUAL_FATAL(find_route(AF_INET, "10.79.0.0", 24, &e), 1);
	CU_ASSERT_EQUAL(e.encap_family, AF_INET);
	CU_ASSERT(!memcmp(e.encap_dst, tep, 4));
	CU_ASSERT_EQUAL(e.encap_id, 6);
	CU_ASSERT_EQUAL(e.mtu, 1450);
	CU_ASSERT(e.has_pref_src && !memcmp(e.pref_src, src, 4));
	CU_ASSERT_EQUAL(e.oif, vx);
	/* a gateway does not go with an encapsulation */
	tun.gateway = gw;
	CU_ASSERT_EQUAL(mod_nl_route_add(g_sk, &tun, NLM_F_REPLACE, g_why, sizeof(g_why)), -EINVAL);
}

/* RTA_MULTIPATH's payload as the kernel sends it: two next hops, the
 * second via a gateway. */
static void test_multipath(void)
{
	union {
		uint8_t bytes[64];
		struct rtnexthop align;
	} buf;
	memset(&buf, 0, sizeof(buf));
	struct rtnexthop *a = (struct rtnexthop *)buf.bytes;
	a->rtnh_len = sizeof(*a);
	a->rtnh_ifindex = 3;
	struct rtnexthop *b = RTNH_NEXT(a);
	b->rtnh_ifindex = 4;
	struct rtattr *gw = (struct rtattr *)RTNH_DATA(b);
	gw->rta_type = RTA_GATEWAY;
	gw->rta_len = RTA_LENGTH(4);
	uint8_t via[4] = {10, 0, 0, 9}, other[4] = {10, 0, 0, 8};
	memcpy(RTA_DATA(gw), via, 4);
	b->rtnh_len = (unsigned short)(sizeof(*b) + RTA_ALIGN(gw->rta_len));
	struct mod_nl_route_entry e = {.family = AF_INET, .multipath = true, .nexthops = buf.bytes,
				       .nexthops_len = RTNH_ALIGN(a->rtnh_len) + b->rtnh_len};
	CU_ASSERT(mod_nl_route_through(&e, 3, NULL));
	CU_ASSERT_FALSE(mod_nl_route_through(&e, 3, via));
	CU_ASSERT(mod_nl_route_through(&e, 4, via));
	CU_ASSERT_FALSE(mod_nl_route_through(&e, 4, other));
	CU_ASSERT_FALSE(mod_nl_route_through(&e, 5, NULL));
	/* a truncated payload is read no further */
	e.nexthops_len = RTNH_ALIGN(a->rtnh_len) + 4;
	CU_ASSERT_FALSE(mod_nl_route_through(&e, 4, NULL));
}

struct seen_events {
	int newlink, newaddr, other;
	int ifindex;
};

static void see_event(const struct mod_nl_event *e, void *ud)
{
	struct seen_events *s = ud;
	if (e->type == RTM_NEWLINK && e->ifname && !strcmp(e->ifname, "t-ev0")) {
		s->newlink++;
		s->ifindex = e->ifindex;
	} else if (e->type == RTM_NEWADDR && s->ifindex && e->ifindex == s->ifindex) {
		s->newaddr++;
	} else {
		s->other++;
	}
}

static void test_events(void)
{
	static const unsigned int groups[] = {RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR};
	struct mod_nl_events ev = {0};
	struct seen_events s = {0};
	CU_ASSERT_EQUAL_FATAL(mod_nl_events_open(&ev, groups, 2, 1 << 16, see_event, &s, g_why,
						 sizeof(g_why)), 0);
	CU_ASSERT(mod_nl_events_fd(&ev) >= 0);
	CU_ASSERT_EQUAL(mod_nl_events_read(&ev, g_why, sizeof(g_why)), -EAGAIN);
	CU_ASSERT_EQUAL_FATAL(mod_nl_veth_add(g_sk, "t-ev0", "t-ev1", 0, -1, IFF_UP, g_why,
					      sizeof(g_why)), 0);
	int ifindex = ifindex_of("t-ev0");
	uint8_t a[4] = {10, 66, 0, 1};
	CU_ASSERT_EQUAL(mod_nl_addr_add(g_sk, ifindex, AF_INET, a, 32, 0, g_why, sizeof(g_why)), 0);
	int reads = 0, rc;
	while ((rc = mod_nl_events_read(&ev, g_why, sizeof(g_why))) == 0 && reads < 64)
		reads++;
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	CU_ASSERT(s.newlink >= 1);
	CU_ASSERT_EQUAL(s.ifindex, ifindex);
	CU_ASSERT_EQUAL(s.newaddr, 1);
	mod_nl_events_close(&ev);
	CU_ASSERT_PTR_NULL(ev.sk);
	mod_nl_events_close(&ev); /* twice: nothing */
}

FIBRIL_TEST_MAIN("nl", suite_setup, suite_teardown,
		 FIBRIL_TEST(test_errno),
		 FIBRIL_TEST(test_addr_parse),
		 FIBRIL_TEST(test_loopback),
		 FIBRIL_TEST(test_links),
		 FIBRIL_TEST(test_vxlan),
		 FIBRIL_TEST(test_addrs),
		 FIBRIL_TEST(test_routes),
		 FIBRIL_TEST(test_multipath),
		 FIBRIL_TEST(test_events))
