/* modules/datapath/dp_addrs.c - the node's underlay addresses for the
 * netdev programs (host-routing bpf, masquerading), from one rtnetlink
 * address dump. getifaddrs(3) (modules/common/node_addrs.h) dumps every
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

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "datapath.h"
#include "node_addrs.h"

#define DUMP_BUF 32768

struct addr_list {
	struct mod_node_addr *v;
	size_t n, cap;
	int ioctl_fd;
	int last_ifindex; /* the name and flags of the last device looked up */
	char last_name[IF_NAMESIZE];
	unsigned last_flags;
	bool last_ok;
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

static int add_addr(struct addr_list *l, const struct ifaddrmsg *ifa, const void *addr)
{
	if (ifa->ifa_family == AF_INET6) {
		const struct in6_addr *a6 = addr;
		if (IN6_IS_ADDR_LINKLOCAL(a6) || IN6_IS_ADDR_LOOPBACK(a6))
			return 0; /* never an underlay's (an endpoint veth has one) */
	}
	if (!device_of(l, (int)ifa->ifa_index))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct mod_node_addr *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	struct mod_node_addr *a = &l->v[l->n++];
	memset(a, 0, sizeof(*a));
	memcpy(a->ifname, l->last_name, IF_NAMESIZE);
	a->flags = l->last_flags;
	a->family = ifa->ifa_family;
	memcpy(&a->addr, addr, ifa->ifa_family == AF_INET ? 4 : 16);
	return 0;
}

/* One RTM_NEWADDR: its local address (IFA_LOCAL, else IFA_ADDRESS, as
 * getifaddrs takes it). */
static int parse_addr(struct addr_list *l, const struct nlmsghdr *nh)
{
	const struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(*ifa)) ||
	    (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6))
		return 0;
	size_t alen = ifa->ifa_family == AF_INET ? 4 : 16;
	const void *local = NULL, *address = NULL;
	int left = (int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(*ifa)));
	for (const struct rtattr *rta = IFA_RTA(ifa); RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
		if (RTA_PAYLOAD(rta) != alen)
			continue;
		if (rta->rta_type == IFA_LOCAL)
			local = RTA_DATA(rta);
		else if (rta->rta_type == IFA_ADDRESS)
			address = RTA_DATA(rta);
	}
	const void *addr = local ? local : address;
	return addr ? add_addr(l, ifa, addr) : 0;
}

static int dump(struct addr_list *l, int nl)
{
	struct {
		struct nlmsghdr nh;
		struct ifaddrmsg ifa;
	} req;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = sizeof(req);
	req.nh.nlmsg_type = RTM_GETADDR;
	req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.nh.nlmsg_seq = 1;
	req.ifa.ifa_family = AF_UNSPEC;
	if (send(nl, &req, sizeof(req), 0) < 0)
		return -errno;
	char *buf = malloc(DUMP_BUF);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (bool done = false; !done && rc == 0;) {
		ssize_t got = recv(nl, buf, DUMP_BUF, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			rc = got < 0 ? -errno : -EIO;
			break;
		}
		unsigned int left = (unsigned int)got;
		for (const struct nlmsghdr *nh = (const void *)buf; NLMSG_OK(nh, left) && rc == 0;
		     nh = NLMSG_NEXT(nh, left)) {
			if (nh->nlmsg_seq != 1)
				continue;
			if (nh->nlmsg_type == NLMSG_DONE) {
				done = true;
				break;
			}
			if (nh->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(nh);
				rc = e->error ? e->error : -EIO;
				break;
			}
			if (nh->nlmsg_type == RTM_NEWADDR)
				rc = parse_addr(l, nh);
		}
	}
	free(buf);
	return rc;
}

int dp_underlay_addrs(struct mod_node_addr **out, size_t *n)
{
	struct addr_list l = {.ioctl_fd = -1, .last_ifindex = -1};
	*out = NULL;
	*n = 0;
	int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	l.ioctl_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int rc = nl < 0 || l.ioctl_fd < 0 ? -errno : dump(&l, nl);
	if (nl >= 0)
		close(nl);
	if (l.ioctl_fd >= 0)
		close(l.ioctl_fd);
	if (rc < 0) {
		free(l.v);
		return rc;
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
