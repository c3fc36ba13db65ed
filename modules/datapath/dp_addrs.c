/* modules/datapath/dp_addrs.c - the node's underlay addresses for the
 * netdev programs (host-routing bpf, masquerading), from one rtnetlink
 * address dump (mod_nl_addr_walk, modules/common/nl.c). getifaddrs(3) (modules/common/node_addrs.h) dumps every
 * link too, and the kernel fills a full ifinfo message (statistics, per
 * family configuration) for each endpoint's veth: with 1,000 endpoints two
 * of those held the datapath's start hook for tens of milliseconds. Here
 * only the addresses are dumped, the endpoints' veths (an IPv6 link-local
 * address each) are passed over, and the few devices left are named and
 * their flags read by ioctl. Also dp_ifname: if_indextoname(3) without a
 * socket opened and closed per call (two per endpoint in a restart). */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "datapath.h"
#include "nl.h"
#include "node_addrs.h"

struct addr_list {
	struct mod_node_addr *v;
	size_t n, cap;
	int ioctl_fd;
	int last_ifindex; /* the name and flags of the last device looked up */
	char last_name[IF_NAMESIZE];
	unsigned last_flags;
	bool last_ok;
	int rc; /* the first failure of the walk */
};

/* The device's name and flags (the previous address's device again: no
 * ioctl). false when it is gone. */
static bool device_of(struct addr_list *l, int ifindex)
{
	if (ifindex == l->last_ifindex)
		return l->last_ok;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_ifindex = ifindex;
	l->last_ifindex = ifindex;
	l->last_ok = ioctl(l->ioctl_fd, SIOCGIFNAME, &ifr) == 0 &&
		     ioctl(l->ioctl_fd, SIOCGIFFLAGS, &ifr) == 0;
	if (l->last_ok) {
		memcpy(l->last_name, ifr.ifr_name, IF_NAMESIZE);
		l->last_name[IF_NAMESIZE - 1] = '\0';
		l->last_flags = (unsigned)(unsigned short)ifr.ifr_flags;
	}
	return l->last_ok;
}

/* One address of the walk; an out-of-memory is kept for the end. */
static void add_addr(struct nl_sock *sk, const struct mod_nl_addr *na, void *ud)
{
	(void)sk;
	struct addr_list *l = ud;
	if (l->rc < 0)
		return;
	if (na->family == AF_INET6) {
		const struct in6_addr *a6 = (const void *)na->addr;
		if (IN6_IS_ADDR_LINKLOCAL(a6) || IN6_IS_ADDR_LOOPBACK(a6))
			return; /* never an underlay's (an endpoint veth has one) */
	}
	if (!device_of(l, na->ifindex))
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct mod_node_addr *v = realloc(l->v, cap * sizeof(*v));
		if (!v) {
			l->rc = -ENOMEM;
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	struct mod_node_addr *a = &l->v[l->n++];
	memset(a, 0, sizeof(*a));
	memcpy(a->ifname, l->last_name, IF_NAMESIZE);
	a->flags = l->last_flags;
	a->family = na->family;
	memcpy(&a->addr, na->addr, na->family == AF_INET ? 4 : 16);
}

int dp_underlay_addrs(struct mod_node_addr **out, size_t *n)
{
	struct addr_list l = {.ioctl_fd = -1, .last_ifindex = -1};
	struct nl_sock *sk = NULL;
	char why[128];
	*out = NULL;
	*n = 0;
	l.ioctl_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (l.ioctl_fd < 0)
		l.rc = -errno;
	else if ((l.rc = mod_nl_open(&sk, why, sizeof(why))) >= 0) {
		int rc = mod_nl_addr_walk(sk, add_addr, &l, why, sizeof(why));
		if (rc < 0 && l.rc >= 0)
			l.rc = rc;
	}
	mod_nl_close(sk);
	if (l.ioctl_fd >= 0)
		close(l.ioctl_fd);
	if (l.rc < 0) {
		free(l.v);
		return l.rc;
	}
	*out = l.v;
	*n = l.n;
	return 0;
}

char *dp_ifname(struct datapath *dp, int ifindex, char *name)
{
	if (dp->ioctl_fd <= 0)
		dp->ioctl_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (dp->ioctl_fd <= 0) {
		dp->ioctl_fd = 0;
		return if_indextoname((unsigned)ifindex, name);
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_ifindex = ifindex;
	if (ioctl(dp->ioctl_fd, SIOCGIFNAME, &ifr))
		return NULL;
	memcpy(name, ifr.ifr_name, IF_NAMESIZE);
	name[IF_NAMESIZE - 1] = '\0';
	return name;
}

void dp_ifname_close(struct datapath *dp)
{
	if (dp->ioctl_fd > 0)
		close(dp->ioctl_fd);
	dp->ioctl_fd = 0;
}
