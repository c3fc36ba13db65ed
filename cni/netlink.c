/* cni/netlink.c - fibril-cni's kernel side: the veth pair, moving and
 * renaming links, addresses and routes, reading them back for CHECK,
 * listing host veths for GC (through modules/common/nl.c, the wrapper over
 * libnl-route-3 the agent's modules use too), switching network
 * namespaces with setns(), and /proc/sys writes. A netlink socket belongs
 * to the namespace it was opened in, so each namespace gets its own
 * (nl_open after the switch). Failures are reported as CNI error 100
 * naming the step. */
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

#include "fibril_cni.h"
#include "nl.h"

static int nl_fail(const char *why, const char *what, const char *name)
{
	return cni_error(FCNI_ERR_LINK, name, "%s %s: %s", what, name, why);
}

struct nl_sock *nl_open(void)
{
	struct nl_sock *sk;
	char why[128];
	if (mod_nl_open(&sk, why, sizeof(why)) < 0) {
		cni_error(FCNI_ERR_LINK, NULL, "cannot open a netlink socket: %s", why);
		return NULL;
	}
	return sk;
}

void cni_nl_close(struct nl_sock *sk)
{
	mod_nl_close(sk);
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

int cni_link_lookup(struct nl_sock *sk, const char *name, struct link_info *info)
{
	struct mod_nl_link l;
	char why[128];
	int rc = mod_nl_link_get(sk, name, &l, why, sizeof(why));
	if (rc < 0)
		return nl_fail(why, "cannot look up link", name);
	if (rc == 0)
		return 0;
	if (info) {
		memset(info, 0, sizeof(*info));
		info->ifindex = l.ifindex;
		info->up = (l.flags & IFF_UP) != 0;
		info->mtu = (int)l.mtu;
		snprintf(info->mac, sizeof(info->mac), "%.*s", (int)sizeof(info->mac) - 1, l.mac);
		snprintf(info->kind, sizeof(info->kind), "%.*s", (int)sizeof(info->kind) - 1, l.kind);
	}
	mod_nl_link_release(&l);
	return 1;
}

/* The host end is created up (one netlink request less under the RTNL
 * lock, which every concurrent ADD contends for); the peer stays down, as
 * a link must be to be renamed. */
int veth_create(struct nl_sock *sk, const char *host, const char *peer, int mtu, int peer_netns_fd)
{
	char why[128];
	if (mod_nl_veth_add(sk, host, peer, mtu, peer_netns_fd, IFF_UP, why, sizeof(why)) < 0)
		return cni_error(FCNI_ERR_LINK, host, "cannot create the veth pair %s/%s: %s", host, peer,
				 why);
	return 0;
}

int link_rename_up(struct nl_sock *sk, const char *from, const char *to)
{
	static const char what[] = "cannot rename and bring up the link";
	struct mod_nl_link l;
	char why[128];
	int rc = mod_nl_link_get(sk, from, &l, why, sizeof(why));
	if (rc <= 0)
		return nl_fail(why, what, from);
	/* The kernel renames first, then applies the flags (do_setlink). */
	rc = mod_nl_link_change(sk, &l, to, IFF_UP, why, sizeof(why));
	mod_nl_link_release(&l);
	return rc < 0 ? nl_fail(why, what, from) : 0;
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
	char why[128];
	int rc = mod_nl_link_del(sk, name, why, sizeof(why));
	return rc < 0 ? nl_fail(why, "cannot delete the link", name) : rc;
}

/* ADDR's bytes and family; -1 with the error set. */
static int parse_addr(const char *addr, int *family, uint8_t bytes[16])
{
	if (mod_nl_addr_parse(addr, family, bytes) < 0)
		return cni_error(FCNI_ERR_AGENT, addr, "the agent sent an invalid address '%s'", addr);
	return 0;
}

int addr_add_host(struct nl_sock *sk, int ifindex, const char *addr)
{
	int family;
	uint8_t bytes[16];
	char why[128];
	if (parse_addr(addr, &family, bytes) < 0)
		return -1;
	/* IPv6: usable at once, no DAD on a veth */
	if (mod_nl_addr_add(sk, ifindex, family, bytes, family == AF_INET ? 32 : 128, 0, why,
			    sizeof(why)) < 0)
		return cni_error(FCNI_ERR_LINK, addr, "cannot add the address %s in the pod: %s", addr, why);
	return 0;
}

/* A host route to the gateway (dst NULL: the default route via it). */
static int route_add(struct nl_sock *sk, int ifindex, const char *dst, const char *gw, bool scope_link, int mtu)
{
	static const uint8_t any[16];
	uint8_t d[16], g[16];
	int family;
	if (parse_addr(dst ? dst : gw, &family, dst ? d : g) < 0)
		return -1;
	struct mod_nl_route r = {
		.family = family,
		.dst = dst ? d : any,
		.dst_len = dst ? (family == AF_INET ? 32 : 128) : 0,
		.protocol = RTPROT_STATIC,
		.scope = scope_link ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE,
		.oif = ifindex,
		.gateway = dst ? NULL : g,
		.mtu = mtu > 0 ? (uint32_t)mtu : 0,
	};
	char why[128];
	if (mod_nl_route_add(sk, &r, NLM_F_EXCL, why, sizeof(why)) < 0)
		return cni_error(FCNI_ERR_LINK, dst ? dst : gw, "cannot add the %s route in the pod: %s",
				 dst ? "gateway" : "default", why);
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

/* TEXT's family and bytes (no prefix); false when it is no address. */
static bool text_addr(const char *text, int *family, uint8_t bin[16])
{
	*family = strchr(text, ':') ? AF_INET6 : AF_INET;
	return inet_pton(*family, text, bin) == 1;
}

struct addr_match {
	int ifindex, prefix, family;
	uint8_t bin[16];
	bool found;
};

static void match_addr(struct nl_sock *sk, const struct mod_nl_addr *a, void *ud)
{
	struct addr_match *m = ud;
	if (a->ifindex == m->ifindex && (int)a->prefixlen == m->prefix && a->family == m->family &&
	    !memcmp(a->addr, m->bin, a->family == AF_INET ? 4 : 16))
		m->found = true;
}

int addr_present(struct nl_sock *sk, int ifindex, const char *addr, int prefix)
{
	struct addr_match m = {.ifindex = ifindex, .prefix = prefix};
	bool valid = text_addr(addr, &m.family, m.bin);
	char why[128];
	if (mod_nl_addr_walk(sk, match_addr, &m, why, sizeof(why)) < 0)
		return cni_error(FCNI_ERR_LINK, NULL, "cannot list the addresses: %s", why);
	return valid && m.found;
}

struct route_match {
	int ifindex, prefix, family;
	bool scope_link, has_gw;
	uint8_t dst[16], gw[16];
	bool found;
};

static void match_route(const struct mod_nl_route_entry *r, void *ud)
{
	struct route_match *m = ud;
	if (r->table != RT_TABLE_MAIN || (int)r->dst_len != m->prefix)
		return;
	if (m->prefix && !(r->has_dst && !memcmp(r->dst, m->dst, m->family == AF_INET ? 4 : 16)))
		return;
	if (m->scope_link && r->scope != RT_SCOPE_LINK)
		return;
	if (mod_nl_route_through(r, m->ifindex, m->has_gw ? m->gw : NULL))
		m->found = true;
}

int route_present(struct nl_sock *sk, int ifindex, const char *dst, int prefix, const char *gw,
		  bool scope_link)
{
	struct route_match m = {.ifindex = ifindex, .prefix = prefix, .scope_link = scope_link};
	bool valid = text_addr(dst, &m.family, m.dst) || !prefix;
	int gw_family = m.family;
	if (gw) {
		m.has_gw = true;
		valid = valid && text_addr(gw, &gw_family, m.gw) && gw_family == m.family;
	}
	char why[128];
	if (mod_nl_route_dump(sk, m.family, match_route, &m, why, sizeof(why)) < 0)
		return cni_error(FCNI_ERR_LINK, NULL, "cannot list the routes: %s", why);
	return valid && m.found ? 1 : 0;
}

struct name_list {
	char **names;
	size_t n, cap;
	bool veths_only, oom;
};

static void add_name(const struct mod_nl_link *l, void *ud)
{
	struct name_list *list = ud;
	if (!l->name[0] || list->oom)
		return;
	if (list->veths_only && (strcmp(l->kind, "veth") != 0 || !is_fibril_host_ifname(l->name)))
		return;
	if (list->n + 1 >= list->cap) {
		size_t cap = list->cap ? list->cap * 2 : 16;
		char **grown = realloc(list->names, cap * sizeof(*grown));
		if (!grown) {
			list->oom = true;
			return;
		}
		list->names = grown;
		list->cap = cap;
	}
	if (!(list->names[list->n] = strdup(l->name))) {
		list->oom = true;
		return;
	}
	list->names[++list->n] = NULL;
}

/* The names of the namespace's links (only fibril's host veths with
 * veths_only), NULL-terminated; NULL after reporting the error. */
static char **name_list(struct nl_sock *sk, bool veths_only)
{
	struct name_list list = {.veths_only = veths_only};
	char why[128];
	if (mod_nl_link_walk(sk, add_name, &list, why, sizeof(why)) < 0) {
		cni_error(FCNI_ERR_LINK, NULL, "cannot list the links: %s", why);
		return NULL;
	}
	if (!list.names && !list.oom)
		list.names = calloc(1, sizeof(*list.names));
	if (list.oom || !list.names) {
		for (size_t i = 0; i < list.n; i++)
			free(list.names[i]);
		free(list.names);
		cni_error(CNI_ERR_IO, NULL, "out of memory");
		return NULL;
	}
	return list.names;
}

char **host_veth_list(struct nl_sock *sk)
{
	return name_list(sk, true);
}

char **link_name_list(struct nl_sock *sk)
{
	return name_list(sk, false);
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
