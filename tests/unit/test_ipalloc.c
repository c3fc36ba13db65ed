/* tests/unit/test_ipalloc.c - unit tests of the shared address allocator
 * and the address helpers (lib/ipalloc.c, <fibril/ipalloc.h>): parse and
 * format, CIDR parsing and subnet math, sequential and random allocation,
 * reserved addresses, error codes, sizes, and a check against a naive model. */
#include "lib_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"

static struct fibril_ip ip_of(const char *s)
{
	struct fibril_ip ip;
	memset(&ip, 0, sizeof(ip));
	CU_ASSERT_EQUAL_FATAL(fibril_ip_parse(s, &ip), 0);
	return ip;
}

static struct fibril_cidr cidr_of(const char *s)
{
	struct fibril_cidr c;
	memset(&c, 0, sizeof(c));
	CU_ASSERT_EQUAL_FATAL(fibril_cidr_parse(s, &c), 0);
	return c;
}

static const char *fmt(const struct fibril_ip *ip)
{
	static char buf[4][64];
	static int n;
	n = (n + 1) % 4;
	return fibril_ip_format(ip, buf[n], sizeof(buf[n]));
}

static struct fibril_ipalloc *new_pool(const char *cidr, enum fibril_ipalloc_strategy st,
				       uint64_t seed)
{
	struct fibril_cidr c = cidr_of(cidr);
	struct fibril_ipalloc_opts o = {.sz = sizeof(o), .strategy = st, .seed = seed};
	struct fibril_ipalloc *a = NULL;
	CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_new(&c, &o, &a), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	return a;
}

static void expect_next(struct fibril_ipalloc *a, const char *want)
{
	struct fibril_ip ip;
	int rc = fibril_ipalloc_next(a, &ip);
	CU_ASSERT_EQUAL(rc, 0);
	if (rc == 0) {
		CU_ASSERT_STRING_EQUAL(fmt(&ip), want);
	}
}

/* The host offset of ip in a pool (the last 3 bytes suffice up to /8). */
static uint32_t off_of(const struct fibril_ip *ip)
{
	const uint8_t *e = ip->bytes + (ip->family == 4 ? 4 : 16);
	return (uint32_t)e[-3] << 16 | (uint32_t)e[-2] << 8 | e[-1];
}

static void roundtrip(const char *s)
{
	struct fibril_ip ip;
	char buf[64];
	CU_ASSERT_EQUAL(fibril_ip_parse(s, &ip), 0);
	CU_ASSERT_STRING_EQUAL(fibril_ip_format(&ip, buf, sizeof(buf)), s);
}

static void t_ip_parse_format(void)
{
	roundtrip("10.1.2.3");
	roundtrip("0.0.0.0");
	roundtrip("255.255.255.255");
	roundtrip("fd00::1");
	roundtrip("::");
	roundtrip("2001:db8:1:2:3:4:5:6");
	roundtrip("::ffff:10.0.0.1");

	struct fibril_ip ip;
	CU_ASSERT_EQUAL(fibril_ip_parse("192.168.1.20", &ip), 0);
	CU_ASSERT_EQUAL(ip.family, 4);
	CU_ASSERT(ip.bytes[0] == 192 && ip.bytes[1] == 168 && ip.bytes[2] == 1 && ip.bytes[3] == 20);
	CU_ASSERT_EQUAL(ip.bytes[4], 0);
	CU_ASSERT_EQUAL(fibril_ip_parse("FD00::AB", &ip), 0);
	CU_ASSERT_EQUAL(ip.family, 6);
	CU_ASSERT_EQUAL(ip.bytes[0], 0xfd);
	CU_ASSERT_EQUAL(ip.bytes[15], 0xab);
	CU_ASSERT_STRING_EQUAL(fmt(&ip), "fd00::ab");

	static const char *const bad[] = {
		"", "10.0.0", "10.0.0.256", "10.0.0.1 ", " 10.0.0.1", "10.0.0.1/32", "fd00:::1",
		"fd00::g", "abc", "1.2.3.4.5", "::1::2", "-1.0.0.0",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CU_ASSERT_EQUAL(fibril_ip_parse(bad[i], &ip), -EINVAL);
	CU_ASSERT_EQUAL(fibril_ip_parse(NULL, &ip), -EINVAL);

	/* A short buffer is truncated, not overrun. */
	char small[6];
	memset(small, 'x', sizeof(small));
	ip = ip_of("10.200.30.4");
	fibril_ip_format(&ip, small, 5);
	CU_ASSERT_STRING_EQUAL(small, "10.2");
	CU_ASSERT_EQUAL(small[5], 'x');
}

static void t_cidr_parse(void)
{
	struct fibril_cidr c;
	char buf[80];
	CU_ASSERT_EQUAL(fibril_cidr_parse("10.0.0.0/16", &c), 0);
	CU_ASSERT_EQUAL(c.ip.family, 4);
	CU_ASSERT_EQUAL(c.prefix_len, 16);
	CU_ASSERT_STRING_EQUAL(fibril_cidr_format(&c, buf, sizeof(buf)), "10.0.0.0/16");
	CU_ASSERT_EQUAL(fibril_cidr_parse("fd00:1::/64", &c), 0);
	CU_ASSERT_EQUAL(c.ip.family, 6);
	CU_ASSERT_EQUAL(c.prefix_len, 64);
	CU_ASSERT_STRING_EQUAL(fibril_cidr_format(&c, buf, sizeof(buf)), "fd00:1::/64");
	CU_ASSERT_EQUAL(fibril_cidr_parse("0.0.0.0/0", &c), 0);
	CU_ASSERT_EQUAL(fibril_cidr_parse("10.0.0.1/32", &c), 0);
	CU_ASSERT_EQUAL(fibril_cidr_parse("::/0", &c), 0);
	CU_ASSERT_EQUAL(fibril_cidr_parse("fd00::1/128", &c), 0);

	static const char *const bad[] = {
		"10.0.0.1/24", "10.0.0.0/33", "fd00::/129", "fd00::1/64", "10.0.0.0", "10.0.0.0/",
		"/24", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/ 8", "10.0.0.0/08", "10.0.0.0/24x",
		"10.0.0.0/1000", "junk/8", "10.0.0.0/16/16", "", "10.0.0.0//16", "10.0.0.0/0x10",
		"0.0.0.1/0",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = fibril_cidr_parse(bad[i], &c);
		CU_ASSERT_EQUAL(rc, -EINVAL);
		if (rc != -EINVAL)
			fprintf(stderr, "cidr_parse(\"%s\") = %d\n", bad[i], rc);
	}
	CU_ASSERT_EQUAL(fibril_cidr_parse(NULL, &c), -EINVAL);

	c = cidr_of("10.1.0.0/16");
	struct fibril_ip in = ip_of("10.1.255.255"), out4 = ip_of("10.2.0.0"), v6 = ip_of("::a01:0");
	CU_ASSERT_TRUE(fibril_cidr_contains(&c, &in));
	CU_ASSERT_FALSE(fibril_cidr_contains(&c, &out4));
	CU_ASSERT_FALSE(fibril_cidr_contains(&c, &v6));
	c = cidr_of("10.1.2.0/23");
	in = ip_of("10.1.3.7");
	out4 = ip_of("10.1.4.0");
	CU_ASSERT_TRUE(fibril_cidr_contains(&c, &in));
	CU_ASSERT_FALSE(fibril_cidr_contains(&c, &out4));
	c = cidr_of("fd00:1::/33");
	in = ip_of("fd00:1:7fff::1");
	out4 = ip_of("fd00:1:8000::");
	CU_ASSERT_TRUE(fibril_cidr_contains(&c, &in));
	CU_ASSERT_FALSE(fibril_cidr_contains(&c, &out4));
}

static void expect_subnet(const char *parent, uint8_t len, uint64_t index, const char *want)
{
	struct fibril_cidr c = cidr_of(parent), out;
	char buf[80];
	int rc = fibril_cidr_subnet(&c, len, index, &out);
	CU_ASSERT_EQUAL(rc, 0);
	if (rc == 0) {
		CU_ASSERT_STRING_EQUAL(fibril_cidr_format(&out, buf, sizeof(buf)), want);
		if (strcmp(buf, want) != 0)
			fprintf(stderr, "subnet %s /%u #%llu: %s, want %s\n", parent, (unsigned)len,
				(unsigned long long)index, buf, want);
	}
}

static void expect_subnet_err(const char *parent, uint8_t len, uint64_t index, int err)
{
	struct fibril_cidr c = cidr_of(parent), out;
	CU_ASSERT_EQUAL(fibril_cidr_subnet(&c, len, index, &out), err);
}

static void t_subnet_v4(void)
{
	expect_subnet("10.0.0.0/16", 24, 0, "10.0.0.0/24");
	expect_subnet("10.0.0.0/16", 24, 2, "10.0.2.0/24"); /* the 3rd /24 */
	expect_subnet("10.0.0.0/16", 24, 255, "10.0.255.0/24");
	expect_subnet_err("10.0.0.0/16", 24, 256, -ERANGE);
	expect_subnet_err("10.0.0.0/16", 24, UINT64_MAX, -ERANGE);
	expect_subnet_err("10.0.0.0/16", 8, 0, -ERANGE);
	expect_subnet_err("10.0.0.0/16", 33, 0, -EINVAL);
	expect_subnet("10.0.0.0/16", 16, 0, "10.0.0.0/16");
	expect_subnet_err("10.0.0.0/16", 16, 1, -ERANGE);
	expect_subnet("10.0.0.0/16", 32, 65535, "10.0.255.255/32");
	expect_subnet_err("10.0.0.0/16", 32, 65536, -ERANGE);
	expect_subnet("10.0.0.0/16", 26, 5, "10.0.1.64/26");
	expect_subnet("0.0.0.0/0", 32, 0xffffffffULL, "255.255.255.255/32");
	expect_subnet_err("0.0.0.0/0", 32, 0x100000000ULL, -ERANGE);
	expect_subnet("0.0.0.0/0", 1, 1, "128.0.0.0/1");
	expect_subnet("10.128.0.0/9", 10, 1, "10.192.0.0/10");
}

static void t_subnet_v6(void)
{
	expect_subnet("fd00::/48", 64, 5, "fd00:0:0:5::/64");
	expect_subnet("fd00::/48", 64, 65535, "fd00:0:0:ffff::/64");
	expect_subnet_err("fd00::/48", 64, 65536, -ERANGE);
	expect_subnet_err("fd00::/48", 40, 0, -ERANGE);
	expect_subnet_err("fd00::/48", 129, 0, -EINVAL);
	expect_subnet("fd00::/96", 104, 3, "fd00::300:0/104");
	expect_subnet("fd00::/96", 120, 0xffff, "fd00::ff:ff00/120");
	expect_subnet("fd00::/64", 128, UINT64_MAX, "fd00::ffff:ffff:ffff:ffff/128");
	expect_subnet("fd00::/64", 128, 1, "fd00::1/128");
	expect_subnet("fd00::/64", 127, (1ULL << 63) - 1, "fd00::ffff:ffff:ffff:fffe/127");
	expect_subnet_err("fd00::/64", 127, 1ULL << 63, -ERANGE);
	expect_subnet("::/0", 64, UINT64_MAX, "ffff:ffff:ffff:ffff::/64");
	expect_subnet("::/0", 65, UINT64_MAX, "7fff:ffff:ffff:ffff:8000::/65");
	expect_subnet("::/0", 100, 0x123456789ULL, "::1234:5678:9000:0/100");
	expect_subnet("fd00:0:0:1::/64", 80, 0xbeef, "fd00:0:0:1:beef::/80");
	expect_subnet_err("fd00:0:0:1::/64", 80, 0x10000, -ERANGE);
}

static void t_sequential_29(void)
{
	struct fibril_ipalloc *a = new_pool("10.0.0.0/29", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 5);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 0);
	struct fibril_ip r;
	fibril_ipalloc_router(a, &r);
	CU_ASSERT_STRING_EQUAL(fmt(&r), "10.0.0.1");
	char buf[80];
	CU_ASSERT_STRING_EQUAL(fibril_cidr_format(fibril_ipalloc_cidr(a), buf, sizeof(buf)),
			       "10.0.0.0/29");
	expect_next(a, "10.0.0.2");
	expect_next(a, "10.0.0.3");
	expect_next(a, "10.0.0.4");
	expect_next(a, "10.0.0.5");
	expect_next(a, "10.0.0.6");
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 5);
	struct fibril_ip ip;
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 5);
	fibril_ipalloc_free(a);

	/* opts NULL: sequential too. */
	struct fibril_cidr c = cidr_of("192.168.7.0/24");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), 0);
	expect_next(a, "192.168.7.2");
	expect_next(a, "192.168.7.3");
	fibril_ipalloc_free(a);
}

static void t_release_reallocate(void)
{
	struct fibril_ipalloc *a = new_pool("10.0.0.0/29", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	struct fibril_ip ip;
	for (int i = 0; i < 5; i++)
		CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), 0);
	ip = ip_of("10.0.0.4");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 4);
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip));
	expect_next(a, "10.0.0.4");
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);

	/* Sequential continues after the last one handed out, wrapping. */
	ip = ip_of("10.0.0.3");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	ip = ip_of("10.0.0.6");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	expect_next(a, "10.0.0.6"); /* after .4 */
	expect_next(a, "10.0.0.3"); /* wrapped */
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	fibril_ipalloc_free(a);

	/* A released address is not reused before the scan comes round. */
	a = new_pool("10.0.0.0/24", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	expect_next(a, "10.0.0.2");
	expect_next(a, "10.0.0.3");
	ip = ip_of("10.0.0.2");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	expect_next(a, "10.0.0.4");
	fibril_ipalloc_free(a);
}

static void t_claim_release_errors(void)
{
	struct fibril_ipalloc *a = new_pool("10.0.0.0/29", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	struct fibril_ip ip = ip_of("10.0.0.3");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), -EEXIST);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 1);
	static const char *const reserved_or_outside[] = {
		"10.0.0.0", "10.0.0.1", "10.0.0.7", "10.0.0.8", "10.0.1.3", "9.255.255.255", "::3",
		"fd00::3",
	};
	for (size_t i = 0; i < sizeof(reserved_or_outside) / sizeof(reserved_or_outside[0]); i++) {
		ip = ip_of(reserved_or_outside[i]);
		CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), -ERANGE);
		CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), -ERANGE);
		CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip));
	}
	ip = ip_of("10.0.0.5");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), -ENOENT);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 1);
	ip = ip_of("10.0.0.2");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), 0);
	expect_next(a, "10.0.0.4"); /* .2 and .3 are claimed */
	ip = ip_of("10.0.0.3");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), -ENOENT);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 2);
	fibril_ipalloc_free(a);
}

static void t_is_allocated(void)
{
	struct fibril_ipalloc *a = new_pool("fd00:5::/120", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	struct fibril_ip ip = ip_of("fd00:5::2"), other = ip_of("fd00:5::3");
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip));
	expect_next(a, "fd00:5::2");
	CU_ASSERT_TRUE(fibril_ipalloc_is_allocated(a, &ip));
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &other));
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &other), 0);
	CU_ASSERT_TRUE(fibril_ipalloc_is_allocated(a, &other));
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip));
	ip = ip_of("fd00:5::");
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip)); /* reserved */
	ip = ip_of("fd00:5::1");
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip)); /* router */
	ip = ip_of("fd00:5::1:3");
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip)); /* outside */
	ip = ip_of("0.0.0.3");
	CU_ASSERT_FALSE(fibril_ipalloc_is_allocated(a, &ip)); /* other family */
	fibril_ipalloc_free(a);
}

/* Fill a pool with RANDOM(seed), recording the order; checks distinctness,
 * no reserved address, exactly capacity addresses, then -ENOSPC. */
static void random_fill(const char *cidr, uint64_t seed, uint32_t *order, size_t n)
{
	struct fibril_ipalloc *a = new_pool(cidr, FIBRIL_IPALLOC_RANDOM, seed);
	struct fibril_cidr c = cidr_of(cidr);
	uint64_t size = 1ULL << ((c.ip.family == 4 ? 32 : 128) - c.prefix_len);
	CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_capacity(a), n);
	unsigned char *seen = calloc(size, 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
	struct fibril_ip ip;
	size_t dup = 0, bad = 0;
	for (size_t i = 0; i < n; i++) {
		CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_next(a, &ip), 0);
		uint32_t off = off_of(&ip) & (uint32_t)(size - 1);
		if (!fibril_cidr_contains(&c, &ip) || off < 2 || (c.ip.family == 4 && off == size - 1))
			bad++;
		if (seen[off]++)
			dup++;
		order[i] = off;
	}
	CU_ASSERT_EQUAL(dup, 0);
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), n);
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	free(seen);
	fibril_ipalloc_free(a);
}

static void t_random(void)
{
	enum { N = 1021 }; /* a /22: 1024 - 3 */
	static uint32_t o1[N], o2[N], o3[N], o4[N];
	random_fill("10.4.0.0/22", 42, o1, N);
	random_fill("10.4.0.0/22", 42, o2, N);
	random_fill("10.4.0.0/22", 43, o3, N);
	random_fill("10.4.0.0/22", 0, o4, N); /* clock seed */
	CU_ASSERT_EQUAL(memcmp(o1, o2, sizeof(o1)), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(o1, o3, sizeof(o1)), 0);
	/* Not sequential: the first ten are not in order. */
	bool sorted = true;
	for (int i = 1; i < 10; i++)
		if (o1[i] < o1[i - 1])
			sorted = false;
	CU_ASSERT_FALSE(sorted);

}

static void t_random_v6_fill(void) /* IPv6: no broadcast, 254 usable in a /120 */
{
	static uint32_t order[254];
	random_fill("fd00:9::/120", 7, order, 254);
}

static void t_ipv6_sizes(void)
{
	struct fibril_ipalloc *a = new_pool("fd00:1::/120", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 254);
	struct fibril_ip r, ip;
	fibril_ipalloc_router(a, &r);
	CU_ASSERT_STRING_EQUAL(fmt(&r), "fd00:1::1");
	expect_next(a, "fd00:1::2");
	for (int i = 0; i < 252; i++)
		CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), 0);
	CU_ASSERT_STRING_EQUAL(fmt(&ip), "fd00:1::fe");
	expect_next(a, "fd00:1::ff"); /* no broadcast in IPv6 */
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 254);
	fibril_ipalloc_free(a);

	a = new_pool("fd00:2::/104", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), (1u << 24) - 2);
	expect_next(a, "fd00:2::2");
	ip = ip_of("fd00:2::ff:ffff");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), 0);
	ip = ip_of("fd00:2::100:0");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), -ERANGE);
	ip = ip_of("fd00:2::ab:cdef");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), 0);
	CU_ASSERT_TRUE(fibril_ipalloc_is_allocated(a, &ip));
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 3);
	fibril_ipalloc_free(a);

	a = new_pool("10.0.0.0/8", FIBRIL_IPALLOC_RANDOM, 1);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), (1u << 24) - 3);
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), 0);
	CU_ASSERT_TRUE(fibril_ipalloc_is_allocated(a, &ip));
	fibril_ipalloc_free(a);
}

static void t_new_errors(void)
{
	struct fibril_ipalloc *a = (struct fibril_ipalloc *)&a;
	struct fibril_cidr c = cidr_of("10.0.0.0/7");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -E2BIG);
	CU_ASSERT_PTR_NULL(a);
	c = cidr_of("0.0.0.0/0");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -E2BIG);
	c = cidr_of("fd00::/103");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -E2BIG);
	c = cidr_of("fd00::/64");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -E2BIG);

	/* Host bits set, bad family, bad prefix, bad opts. */
	c = cidr_of("10.0.0.0/24");
	c.ip.bytes[3] = 1;
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -EINVAL);
	c = cidr_of("10.0.0.0/24");
	c.ip.family = 5;
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -EINVAL);
	c = cidr_of("10.0.0.0/24");
	c.prefix_len = 33;
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), -EINVAL);
	c = cidr_of("10.0.0.0/24");
	struct fibril_ipalloc_opts o = {.sz = 0, .strategy = FIBRIL_IPALLOC_RANDOM};
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, &o, &a), -EINVAL);
	o.sz = sizeof(o);
	o.strategy = (enum fibril_ipalloc_strategy)7;
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, &o, &a), -EINVAL);
	/* The growth rule: shorter opts are fine (the rest reads as zero)... */
	o.strategy = FIBRIL_IPALLOC_RANDOM;
	o.seed = 99;
	o.sz = offsetof(struct fibril_ipalloc_opts, strategy) + sizeof(o.strategy);
	CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_new(&c, &o, &a), 0);
	fibril_ipalloc_free(a);
	a = NULL;
	/* ... longer ones too while the bytes this SDK does not know are zero ... */
	struct {
		struct fibril_ipalloc_opts o;
		uint64_t future;
	} big = {.o = {.sz = sizeof(big), .strategy = FIBRIL_IPALLOC_SEQUENTIAL}};
	CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_new(&c, &big.o, &a), 0);
	fibril_ipalloc_free(a);
	a = NULL;
	/* ... and refused (-E2BIG) when one is set. */
	big.future = 1;
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, &big.o, &a), -E2BIG);
	CU_ASSERT_PTR_NULL(a);
	CU_ASSERT_EQUAL(fibril_ipalloc_new(NULL, NULL, &a), -EINVAL);
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, NULL), -EINVAL);
	CU_ASSERT_PTR_NULL(a);

	/* The largest ones are accepted. */
	c = cidr_of("fd00::/104");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), 0);
	fibril_ipalloc_free(a);
	c = cidr_of("10.0.0.0/8");
	CU_ASSERT_EQUAL(fibril_ipalloc_new(&c, NULL, &a), 0);
	fibril_ipalloc_free(a);
	fibril_ipalloc_free(NULL);
}

static void t_small_prefixes(void)
{
	struct fibril_ip ip, r;
	/* /30: network, router, broadcast reserved: one address. */
	struct fibril_ipalloc *a = new_pool("10.9.0.4/30", FIBRIL_IPALLOC_RANDOM, 3);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 1);
	expect_next(a, "10.9.0.6");
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	fibril_ipalloc_free(a);

	/* /31 (RFC 3021): the first is the router, the second usable. */
	a = new_pool("10.9.0.4/31", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 1);
	fibril_ipalloc_router(a, &r);
	CU_ASSERT_STRING_EQUAL(fmt(&r), "10.9.0.4");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &r), -ERANGE);
	expect_next(a, "10.9.0.5");
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	ip = ip_of("10.9.0.5");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	expect_next(a, "10.9.0.5");
	fibril_ipalloc_free(a);

	/* /32: capacity 0; the address is the router. */
	a = new_pool("10.9.0.4/32", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	fibril_ipalloc_router(a, &r);
	CU_ASSERT_STRING_EQUAL(fmt(&r), "10.9.0.4");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &r), -ERANGE);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 0);
	fibril_ipalloc_free(a);

	/* IPv6 /126: network and router reserved, no broadcast. */
	a = new_pool("fd00::4/126", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 2);
	expect_next(a, "fd00::6");
	expect_next(a, "fd00::7");
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	fibril_ipalloc_free(a);

	a = new_pool("fd00::4/127", FIBRIL_IPALLOC_RANDOM, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 1);
	fibril_ipalloc_router(a, &r);
	CU_ASSERT_STRING_EQUAL(fmt(&r), "fd00::4");
	expect_next(a, "fd00::5");
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	fibril_ipalloc_free(a);

	a = new_pool("fd00::4/128", FIBRIL_IPALLOC_RANDOM, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	fibril_ipalloc_router(a, &r);
	CU_ASSERT_STRING_EQUAL(fmt(&r), "fd00::4");
	fibril_ipalloc_free(a);
}

static void t_counts(void)
{
	struct fibril_ipalloc *a = new_pool("10.2.0.0/24", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 253);
	struct fibril_ip ip;
	for (int i = 0; i < 100; i++)
		CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 100);
	ip = ip_of("10.2.0.200");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 101);
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), -EEXIST);
	ip = ip_of("10.2.0.255");
	CU_ASSERT_EQUAL(fibril_ipalloc_claim(a, &ip), -ERANGE);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 101);
	ip = ip_of("10.2.0.50");
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_release(a, &ip), -ENOENT);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 100);
	CU_ASSERT_EQUAL(fibril_ipalloc_capacity(a), 253);
	int n = 0;
	while (fibril_ipalloc_next(a, &ip) == 0)
		n++;
	CU_ASSERT_EQUAL(n, 153);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), 253);
	fibril_ipalloc_free(a);
}

/* A /16 filled to 100%, then every address released and allocated again:
 * next() must find the one free address wherever it is. */
static void full_16(enum fibril_ipalloc_strategy st)
{
	struct fibril_ipalloc *a = new_pool("10.7.0.0/16", st, 99);
	const uint64_t cap = 65533;
	CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_capacity(a), cap);
	struct fibril_ip ip, got;
	for (uint64_t i = 0; i < cap; i++)
		CU_ASSERT_EQUAL_FATAL(fibril_ipalloc_next(a, &ip), 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), cap);
	CU_ASSERT_EQUAL(fibril_ipalloc_next(a, &ip), -ENOSPC);
	size_t fails = 0;
	for (uint32_t off = 2; off < 65535; off++) {
		ip = ip_of("10.7.0.0");
		ip.bytes[2] = (uint8_t)(off >> 8);
		ip.bytes[3] = (uint8_t)off;
		if (fibril_ipalloc_release(a, &ip) != 0 || fibril_ipalloc_next(a, &got) != 0 ||
		    memcmp(&ip, &got, sizeof(ip)) != 0 || fibril_ipalloc_next(a, &got) != -ENOSPC)
			fails++;
	}
	CU_ASSERT_EQUAL(fails, 0);
	CU_ASSERT_EQUAL(fibril_ipalloc_used(a), cap);
	fibril_ipalloc_free(a);
}

static void t_full_16_sequential(void)
{
	full_16(FIBRIL_IPALLOC_SEQUENTIAL);
}

static void t_full_16_random(void)
{
	full_16(FIBRIL_IPALLOC_RANDOM);
}

/* Random operations on a /21 against a plain bool array: sequential must
 * return exactly the first free address after the previous one. */
static void t_model(void)
{
	enum { SIZE = 2048, OPS = 300000 };
	static bool model[SIZE];
	memset(model, 0, sizeof(model));
	struct fibril_ipalloc *a = new_pool("10.8.0.0/21", FIBRIL_IPALLOC_SEQUENTIAL, 0);
	uint64_t rng = 12345, used = 0, cursor = 2;
	size_t mismatches = 0;
	struct fibril_ip ip;
	for (int i = 0; i < OPS; i++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t r = (uint32_t)(rng >> 33);
		/* Drift the fill level up and down over time. */
		bool want_alloc = (r % 100) < ((i / 20000) % 2 ? 30u : 70u);
		if (want_alloc) {
			int rc = fibril_ipalloc_next(a, &ip);
			if (used == SIZE - 3) {
				mismatches += rc != -ENOSPC;
				continue;
			}
			uint32_t exp = (uint32_t)cursor;
			while (exp < 2 || exp == SIZE - 1 || model[exp])
				exp = (exp + 1) % SIZE;
			if (rc != 0 || (off_of(&ip) & (SIZE - 1)) != exp) {
				mismatches++;
				continue;
			}
			model[exp] = true;
			used++;
			cursor = (exp + 1) % SIZE;
		} else {
			uint32_t off = (r >> 8) % SIZE;
			ip = ip_of("10.8.0.0");
			ip.bytes[2] |= (uint8_t)(off >> 8);
			ip.bytes[3] = (uint8_t)off;
			int rc = fibril_ipalloc_release(a, &ip);
			int exp = (off < 2 || off == SIZE - 1) ? -ERANGE : model[off] ? 0 : -ENOENT;
			mismatches += rc != exp;
			if (exp == 0) {
				model[off] = false;
				used--;
			}
		}
		if (fibril_ipalloc_used(a) != used)
			mismatches++;
	}
	CU_ASSERT_EQUAL(mismatches, 0);
	fibril_ipalloc_free(a);
}

FIBRIL_TEST_MAIN("ipalloc", NULL, NULL, FIBRIL_TEST(t_ip_parse_format), FIBRIL_TEST(t_cidr_parse),
		 FIBRIL_TEST(t_subnet_v4), FIBRIL_TEST(t_subnet_v6), FIBRIL_TEST(t_sequential_29),
		 FIBRIL_TEST(t_release_reallocate), FIBRIL_TEST(t_claim_release_errors),
		 FIBRIL_TEST(t_is_allocated), FIBRIL_TEST(t_random), FIBRIL_TEST(t_random_v6_fill),
		 FIBRIL_TEST(t_ipv6_sizes), FIBRIL_TEST(t_new_errors), FIBRIL_TEST(t_small_prefixes),
		 FIBRIL_TEST(t_counts), FIBRIL_TEST(t_full_16_sequential),
		 FIBRIL_TEST(t_full_16_random), FIBRIL_TEST(t_model))
