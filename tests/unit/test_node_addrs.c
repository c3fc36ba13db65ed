/* tests/unit/test_node_addrs.c - unit tests of the modules' list of the
 * node's addresses (modules/common/node_addrs.h, mod_node_addrs), which
 * lb, nodes and datapath walk instead of getifaddrs(3) each: the same
 * IPv4 / IPv6 entries as getifaddrs in the same order, with their device's
 * name and flags (here: the loopback's 127.0.0.1), and the IPv6 "global"
 * filter (no link-local, no loopback). */
#include "cunit_main.h"
#include "node_addrs.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <stdlib.h>
#include <string.h>

/* The list against a getifaddrs walk of its own; 1 when they agree. The
 * machine's addresses may change between the two reads: the caller tries
 * again. */
static int same_as_getifaddrs(void)
{
	struct mod_node_addr *v;
	size_t n;
	if (mod_node_addrs(&v, &n) != 0)
		return 0;
	struct ifaddrs *all;
	if (getifaddrs(&all) != 0) {
		free(v);
		return 0;
	}
	size_t k = 0;
	int same = 1;
	for (struct ifaddrs *i = all; i && same; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		if (k == n) {
			same = 0;
			break;
		}
		const struct mod_node_addr *a = &v[k++];
		same = !strcmp(a->ifname, i->ifa_name) && a->flags == i->ifa_flags &&
		       a->family == i->ifa_addr->sa_family &&
		       (a->family == AF_INET
				? !memcmp(&a->addr.v4, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, 4)
				: !memcmp(&a->addr.v6, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, 16));
	}
	freeifaddrs(all);
	free(v);
	return same && k == n;
}

static void test_same_entries_as_getifaddrs(void)
{
	int ok = 0;
	for (int try = 0; try < 3 && !ok; try++)
		ok = same_as_getifaddrs();
	CU_ASSERT_TRUE(ok);
}

static void test_loopback_listed(void)
{
	struct mod_node_addr *v;
	size_t n;
	CU_ASSERT_EQUAL_FATAL(mod_node_addrs(&v, &n), 0);
	int found = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i].family == AF_INET && v[i].addr.v4.s_addr == htonl(INADDR_LOOPBACK))
			found = !strcmp(v[i].ifname, "lo") && (v[i].flags & IFF_LOOPBACK);
	CU_ASSERT_TRUE(found);
	free(v);
}

static void test_v6_global(void)
{
	struct mod_node_addr a = {.family = AF_INET6};
	inet_pton(AF_INET6, "fe80::1", &a.addr.v6);
	CU_ASSERT_FALSE(mod_node_addr_v6_global(&a));
	inet_pton(AF_INET6, "::1", &a.addr.v6);
	CU_ASSERT_FALSE(mod_node_addr_v6_global(&a));
	inet_pton(AF_INET6, "fd00:213::1", &a.addr.v6);
	CU_ASSERT_TRUE(mod_node_addr_v6_global(&a));
	struct mod_node_addr b = {.family = AF_INET};
	CU_ASSERT_FALSE(mod_node_addr_v6_global(&b));
}

FIBRIL_TEST_MAIN("node_addrs", NULL, NULL, FIBRIL_TEST(test_same_entries_as_getifaddrs),
		 FIBRIL_TEST(test_loopback_listed), FIBRIL_TEST(test_v6_global))
