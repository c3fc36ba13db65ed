/* modules/common/node_addrs.h - the node's IPv4 and IPv6 addresses with
 * their devices, as getifaddrs(3) lists them (netlink dumps underneath, no
 * shelling out), in the kernel's order: per device, its primary address of
 * a family first. The modules that look for the node's devices and
 * addresses walk this one list - lb (a nodeport device's SNAT source),
 * nodes (the node IP, the device that holds it) and datapath (the
 * host-routing devices) - each with its own choice of entries.
 * Header-only (static inline): a module needs only -I modules/common.
 * Internal to the modules, not part of the SDK. */
#ifndef FIBRIL_MOD_NODE_ADDRS_H
#define FIBRIL_MOD_NODE_ADDRS_H

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct mod_node_addr {
	char ifname[IF_NAMESIZE];
	unsigned int flags; /* the device's IFF_UP, IFF_LOOPBACK, ... */
	int family;         /* AF_INET or AF_INET6 */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	} addr;
};

/* Every IPv4 and IPv6 address of the node into *out (malloc'd: free() it;
 * NULL when there is none), their number in *n. 0, or -errno
 * (getifaddrs' error, -ENOMEM); *out and *n are then NULL and 0. */
static inline int mod_node_addrs(struct mod_node_addr **out, size_t *n)
{
	struct ifaddrs *all = NULL;
	*out = NULL;
	*n = 0;
	if (getifaddrs(&all) != 0)
		return errno ? -errno : -EIO;
	size_t count = 0;
	for (struct ifaddrs *i = all; i; i = i->ifa_next)
		count += i->ifa_addr &&
			 (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6);
	struct mod_node_addr *v = count ? calloc(count, sizeof(*v)) : NULL;
	if (count && !v) {
		freeifaddrs(all);
		return -ENOMEM;
	}
	size_t k = 0;
	for (struct ifaddrs *i = all; i && k < count; i = i->ifa_next) {
		if (!i->ifa_addr ||
		    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		struct mod_node_addr *a = &v[k++];
		snprintf(a->ifname, sizeof(a->ifname), "%s", i->ifa_name);
		a->flags = i->ifa_flags;
		a->family = i->ifa_addr->sa_family;
		if (a->family == AF_INET)
			a->addr.v4 = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr;
		else
			a->addr.v6 = ((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr;
	}
	freeifaddrs(all);
	*out = v;
	*n = k;
	return 0;
}

/* An IPv6 address that is neither link-local nor loopback. */
static inline bool mod_node_addr_v6_global(const struct mod_node_addr *a)
{
	return a->family == AF_INET6 && !IN6_IS_ADDR_LINKLOCAL(&a->addr.v6) &&
	       !IN6_IS_ADDR_LOOPBACK(&a->addr.v6);
}

#endif
