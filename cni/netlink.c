/* cni/netlink.c - fibril-cni's kernel side with libnl-route-3: the veth
 * pair, moving and renaming links, addresses and routes, reading them back
 * for CHECK, listing host veths for GC, switching network namespaces with
 * setns(), and /proc/sys writes. A netlink socket belongs to the namespace
 * it was opened in, so each namespace gets its own (nl_open after the
 * switch). Failures are reported as CNI error 100 naming the step. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h> /* before linux/if.h, which then defers to it */
#include <linux/if.h>
#include <linux/nsfs.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>

#include "fibril_cni.h"

static int nl_fail(int err, const char *what, const char *name)
{
	return cni_error(FCNI_ERR_LINK, name, "%s %s: %s", what, name, nl_geterror(err));
}

struct nl_sock *nl_open(void)
{
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk) {
		cni_error(FCNI_ERR_LINK, NULL, "cannot allocate a netlink socket");
		return NULL;
	}
	int err = nl_connect(sk, NETLINK_ROUTE);
	if (err < 0) {
		nl_socket_free(sk);
		cni_error(FCNI_ERR_LINK, NULL, "cannot open a netlink socket: %s", nl_geterror(err));
		return NULL;
	}
	return sk;
}

void nl_close(struct nl_sock *sk)
{
	if (sk)
		nl_socket_free(sk);
}

int netns_open_current(void)
{
	int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		cni_error(CNI_ERR_IO, NULL, "cannot open /proc/self/ns/net: %s", strerror(errno));
	return fd;
}

int netns_open_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cni_error(CNI_ERR_UNKNOWN_CONTAINER, path, "cannot open the network namespace %s: %s",
				 path, strerror(errno));
	int type = ioctl(fd, NS_GET_NSTYPE);
	if (type != CLONE_NEWNET) {
		close(fd);
		return cni_error(CNI_ERR_UNKNOWN_CONTAINER, path, "%s is not a network namespace%s", path,
				 type < 0 ? " (not a namespace file)" : "");
	}
	return fd;
}

int netns_switch(int fd, const char *what)
{
	if (setns(fd, CLONE_NEWNET) < 0)
		return cni_error(FCNI_ERR_LINK, what, "cannot enter the network namespace %s: %s", what,
				 strerror(errno));
	return 0;
}

struct nl_sock *nl_open_in(int ns_fd, const char *what)
{
	int here = netns_open_current();
	struct nl_sock *sk = NULL;
	if (here < 0)
		return NULL;
	if (netns_switch(ns_fd, what) == 0) {
		/* the socket stays bound to the namespace it was opened in */
		sk = nl_open();
		if (netns_switch(here, "of fibril-cni") < 0) {
			/* Cannot come back: nothing sane is left to do in this process. */
			fprintf(stderr, "fibril-cni: cannot return to the host network namespace\n");
			_exit(1);
		}
	}
	close(here);
	return sk;
}

static void fill_info(struct rtnl_link *link, struct link_info *info)
{
	memset(info, 0, sizeof(*info));
	info->ifindex = rtnl_link_get_ifindex(link);
	info->up = (rtnl_link_get_flags(link) & IFF_UP) != 0;
	info->mtu = (int)rtnl_link_get_mtu(link);
	struct nl_addr *mac = rtnl_link_get_addr(link);
	if (mac)
		nl_addr2str(mac, info->mac, sizeof(info->mac));
	const char *kind = rtnl_link_get_type(link);
	snprintf(info->kind, sizeof(info->kind), "%s", kind ? kind : "");
}

int link_lookup(struct nl_sock *sk, const char *name, struct link_info *info)
{
	struct rtnl_link *link = NULL;
	int err = rtnl_link_get_kernel(sk, 0, name, &link);
	if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV)
		return 0;
	if (err < 0)
		return nl_fail(err, "cannot look up link", name);
	if (info)
		fill_info(link, info);
	rtnl_link_put(link);
	return 1;
}

/* The host end is created up (one netlink request less under the RTNL
 * lock, which every concurrent ADD contends for); the peer stays down, as
 * a link must be to be renamed. */
int veth_create(struct nl_sock *sk, const char *host, const char *peer, int mtu, int peer_netns_fd)
{
	struct rtnl_link *link = rtnl_link_veth_alloc();
	if (!link)
		return cni_error(FCNI_ERR_LINK, host, "cannot allocate a veth link");
	struct rtnl_link *p = rtnl_link_veth_get_peer(link);
	rtnl_link_set_name(link, host);
	rtnl_link_set_mtu(link, (unsigned)mtu);
	rtnl_link_set_flags(link, IFF_UP);
	rtnl_link_set_name(p, peer);
	rtnl_link_set_mtu(p, (unsigned)mtu);
	if (peer_netns_fd >= 0)
		rtnl_link_set_ns_fd(p, peer_netns_fd);
	rtnl_link_put(p);
	int err = rtnl_link_add(sk, link, NLM_F_CREATE | NLM_F_EXCL);
	rtnl_link_put(link);
	if (err < 0)
		return cni_error(FCNI_ERR_LINK, host, "cannot create the veth pair %s/%s: %s", host, peer,
				 nl_geterror(err));
	return 0;
}

/* Apply CHANGES to the link NAME. */
static int link_change(struct nl_sock *sk, const char *name, struct rtnl_link *changes, const char *what)
{
	struct rtnl_link *orig = NULL;
	int err = rtnl_link_get_kernel(sk, 0, name, &orig);
	if (err < 0)
		return nl_fail(err, what, name);
	err = rtnl_link_change(sk, orig, changes, 0);
	rtnl_link_put(orig);
	if (err < 0)
		return nl_fail(err, what, name);
	return 0;
}

int link_rename_up(struct nl_sock *sk, const char *from, const char *to)
{
	/* The kernel renames first, then applies the flags (do_setlink). */
	struct rtnl_link *changes = rtnl_link_alloc();
	rtnl_link_set_name(changes, to);
	rtnl_link_set_flags(changes, IFF_UP);
	int rc = link_change(sk, from, changes, "cannot rename and bring up the link");
	rtnl_link_put(changes);
	return rc;
}

int link_delete_present(struct nl_sock *sk, const char *name)
{
	/* if_nametoindex is an RCU lookup: no RTNL lock when nothing is there. */
	if (if_nametoindex(name) == 0 && errno == ENODEV)
		return 0;
	return link_delete(sk, name);
}

int link_delete(struct nl_sock *sk, const char *name)
{
	struct rtnl_link *link = rtnl_link_alloc();
	rtnl_link_set_name(link, name);
	int err = rtnl_link_delete(sk, link);
	rtnl_link_put(link);
	if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV)
		return 0;
	if (err < 0)
		return nl_fail(err, "cannot delete the link", name);
	return 1;
}

/* ADDR as a host prefix (/32 or /128); NULL with the error set. */
static struct nl_addr *parse_host(const char *addr, int *family)
{
	struct nl_addr *a = NULL;
	int fam = strchr(addr, ':') ? AF_INET6 : AF_INET;
	if (nl_addr_parse(addr, fam, &a) < 0) {
		cni_error(FCNI_ERR_AGENT, addr, "the agent sent an invalid address '%s'", addr);
		return NULL;
	}
	nl_addr_set_prefixlen(a, fam == AF_INET ? 32 : 128);
	if (family)
		*family = fam;
	return a;
}

int addr_add_host(struct nl_sock *sk, int ifindex, const char *addr)
{
	int family;
	struct nl_addr *local = parse_host(addr, &family);
	if (!local)
		return -1;
	struct rtnl_addr *a = rtnl_addr_alloc();
	rtnl_addr_set_ifindex(a, ifindex);
	rtnl_addr_set_family(a, family);
	rtnl_addr_set_local(a, local);
	rtnl_addr_set_prefixlen(a, nl_addr_get_prefixlen(local));
	if (family == AF_INET6)
		rtnl_addr_set_flags(a, IFA_F_NODAD); /* usable at once: no DAD on a veth */
	int err = rtnl_addr_add(sk, a, 0);
	rtnl_addr_put(a);
	nl_addr_put(local);
	if (err < 0)
		return cni_error(FCNI_ERR_LINK, addr, "cannot add the address %s in the pod: %s", addr,
				 nl_geterror(err));
	return 0;
}

static int route_add(struct nl_sock *sk, int ifindex, const char *dst, const char *gw, bool scope_link, int mtu)
{
	int family;
	struct nl_addr *d = NULL, *g = NULL;
	if (dst) {
		d = parse_host(dst, &family);
		if (!d)
			return -1;
	} else {
		family = strchr(gw, ':') ? AF_INET6 : AF_INET;
		nl_addr_parse(family == AF_INET ? "0.0.0.0/0" : "::/0", family, &d);
		g = parse_host(gw, NULL);
		if (!g) {
			nl_addr_put(d);
			return -1;
		}
	}
	struct rtnl_route *r = rtnl_route_alloc();
	rtnl_route_set_family(r, (uint8_t)family);
	rtnl_route_set_table(r, RT_TABLE_MAIN);
	rtnl_route_set_dst(r, d);
	rtnl_route_set_scope(r, scope_link ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE);
	if (mtu > 0)
		rtnl_route_set_metric(r, RTAX_MTU, (uint32_t)mtu);
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	rtnl_route_nh_set_ifindex(nh, ifindex);
	if (g)
		rtnl_route_nh_set_gateway(nh, g);
	rtnl_route_add_nexthop(r, nh);
	int err = rtnl_route_add(sk, r, NLM_F_EXCL);
	rtnl_route_put(r);
	nl_addr_put(d);
	if (g)
		nl_addr_put(g);
	if (err < 0)
		return cni_error(FCNI_ERR_LINK, dst ? dst : gw, "cannot add the %s route in the pod: %s",
				 dst ? "gateway" : "default", nl_geterror(err));
	return 0;
}

int route_add_gateway_link(struct nl_sock *sk, int ifindex, const char *gateway, int mtu)
{
	return route_add(sk, ifindex, gateway, NULL, true, mtu);
}

int route_add_default(struct nl_sock *sk, int ifindex, const char *gateway, int mtu)
{
	return route_add(sk, ifindex, NULL, gateway, false, mtu);
}

/* Compare an nl_addr with a textual address (no prefix). */
static bool addr_equals(struct nl_addr *a, const char *text)
{
	unsigned char bin[16];
	int family = strchr(text, ':') ? AF_INET6 : AF_INET;
	size_t len = family == AF_INET ? 4 : 16;
	if (!a || nl_addr_get_family(a) != family || inet_pton(family, text, bin) != 1)
		return false;
	return nl_addr_get_len(a) == len && memcmp(nl_addr_get_binary_addr(a), bin, len) == 0;
}

int addr_present(struct nl_sock *sk, int ifindex, const char *addr, int prefix)
{
	struct nl_cache *cache = NULL;
	int err = rtnl_addr_alloc_cache(sk, &cache);
	if (err < 0)
		return cni_error(FCNI_ERR_LINK, NULL, "cannot list the addresses: %s", nl_geterror(err));
	int found = 0;
	for (struct nl_object *o = nl_cache_get_first(cache); o && !found; o = nl_cache_get_next(o)) {
		struct rtnl_addr *a = (struct rtnl_addr *)o;
		if (rtnl_addr_get_ifindex(a) == ifindex && rtnl_addr_get_prefixlen(a) == prefix &&
		    addr_equals(rtnl_addr_get_local(a), addr))
			found = 1;
	}
	nl_cache_free(cache);
	return found;
}

struct route_match {
	int ifindex;
	const char *gw;
	bool found;
};

static void match_nexthop(struct rtnl_nexthop *nh, void *ud)
{
	struct route_match *m = ud;
	if (rtnl_route_nh_get_ifindex(nh) != m->ifindex)
		return;
	if (m->gw && !addr_equals(rtnl_route_nh_get_gateway(nh), m->gw))
		return;
	m->found = true;
}

int route_present(struct nl_sock *sk, int ifindex, const char *dst, int prefix, const char *gw,
		  bool scope_link)
{
	struct nl_cache *cache = NULL;
	int family = strchr(dst, ':') ? AF_INET6 : AF_INET;
	int err = rtnl_route_alloc_cache(sk, family, 0, &cache);
	if (err < 0)
		return cni_error(FCNI_ERR_LINK, NULL, "cannot list the routes: %s", nl_geterror(err));
	struct route_match m = {.ifindex = ifindex, .gw = gw};
	for (struct nl_object *o = nl_cache_get_first(cache); o && !m.found; o = nl_cache_get_next(o)) {
		struct rtnl_route *r = (struct rtnl_route *)o;
		struct nl_addr *d = rtnl_route_get_dst(r);
		if (rtnl_route_get_table(r) != RT_TABLE_MAIN || !d || (int)nl_addr_get_prefixlen(d) != prefix)
			continue;
		if (prefix && !addr_equals(d, dst))
			continue;
		if (scope_link && rtnl_route_get_scope(r) != RT_SCOPE_LINK)
			continue;
		rtnl_route_foreach_nexthop(r, match_nexthop, &m);
	}
	nl_cache_free(cache);
	return m.found ? 1 : 0;
}

char **host_veth_list(struct nl_sock *sk)
{
	struct nl_cache *cache = NULL;
	int err = rtnl_link_alloc_cache(sk, AF_UNSPEC, &cache);
	if (err < 0) {
		cni_error(FCNI_ERR_LINK, NULL, "cannot list the links: %s", nl_geterror(err));
		return NULL;
	}
	size_t n = 0, cap = (size_t)nl_cache_nitems(cache) + 1;
	char **out = calloc(cap, sizeof(*out));
	for (struct nl_object *o = nl_cache_get_first(cache); out && o; o = nl_cache_get_next(o)) {
		struct rtnl_link *l = (struct rtnl_link *)o;
		const char *name = rtnl_link_get_name(l), *kind = rtnl_link_get_type(l);
		if (name && kind && strcmp(kind, "veth") == 0 && is_fibril_host_ifname(name) && n + 1 < cap)
			out[n++] = strdup(name);
	}
	nl_cache_free(cache);
	if (!out)
		cni_error(CNI_ERR_IO, NULL, "out of memory");
	return out;
}

char **link_name_list(struct nl_sock *sk)
{
	struct nl_cache *cache = NULL;
	int err = rtnl_link_alloc_cache(sk, AF_UNSPEC, &cache);
	if (err < 0) {
		cni_error(FCNI_ERR_LINK, NULL, "cannot list the links: %s", nl_geterror(err));
		return NULL;
	}
	size_t n = 0, cap = (size_t)nl_cache_nitems(cache) + 1;
	char **out = calloc(cap, sizeof(*out));
	for (struct nl_object *o = nl_cache_get_first(cache); out && o; o = nl_cache_get_next(o)) {
		const char *name = rtnl_link_get_name((struct rtnl_link *)o);
		if (name && n + 1 < cap)
			out[n++] = strdup(name);
	}
	nl_cache_free(cache);
	if (!out)
		cni_error(CNI_ERR_IO, NULL, "out of memory");
	return out;
}

int sysctl_write(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return cni_error(FCNI_ERR_LINK, path, "cannot open %s: %s", path, strerror(errno));
	ssize_t n = write(fd, value, strlen(value));
	int e = errno;
	close(fd);
	if (n != (ssize_t)strlen(value))
		return cni_error(FCNI_ERR_LINK, path, "cannot write %s: %s", path, strerror(n < 0 ? e : EIO));
	return 0;
}
