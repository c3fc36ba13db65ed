/* lib/ipalloc.c - the shared address allocator of <fibril/ipalloc.h> and
 * the address helpers (parse, format, contains, subnet math).
 *
 * The allocator is a two-level bitmap over one CIDR of at most 2^24
 * addresses: `bits` has one bit per address (1 = allocated or reserved),
 * `full` has one bit per 64-bit word of `bits` (1 = that word is all ones).
 * A scan looks at the word under the start position, then walks `full`
 * 64 words at a time with __builtin_ctzll(~word), so even a nearly full
 * pool is searched in a few instructions per 4096 addresses. Padding bits
 * past the end of either level are kept set, so scans never return them.
 *
 * Strategies (as Kubernetes' allocator):
 *   SEQUENTIAL - the lowest free address at or after the one following the
 *                last address next() handed out, wrapping to the start (so a
 *                released address is not reused until the scan comes round).
 *                claim() does not move that position.
 *   RANDOM     - a random start offset (splitmix64), then the next free
 *                address from there, wrapping ("random scan").
 *
 * Reserved addresses (never handed out, not counted by used(), excluded
 * from capacity(), -ERANGE for claim() and release(), false for
 * is_allocated()):
 *   IPv4 prefix <= 30:  network, router (network+1), broadcast.
 *   IPv6 prefix <= 126: network (the subnet-router anycast), router
 *                       (network+1); IPv6 has no broadcast.
 *   IPv4 /31, IPv6 /127 (point-to-point, RFC 3021 / RFC 6164): there is no
 *                       network or broadcast address; the first address is
 *                       the router and the second the one usable address
 *                       (capacity 1).
 *   IPv4 /32, IPv6 /128: the single address is the router; capacity 0, so
 *                       next() always returns -ENOSPC.
 *
 * Not thread-safe, as the header says. */
#include "lib_int.h"
#include <fibril/compat.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_HOST_BITS 24 /* at most 2^24 addresses per allocator */

struct fibril_ipalloc {
	struct fibril_cidr cidr;
	enum fibril_ipalloc_strategy strategy;
	uint64_t size;     /* addresses in the CIDR, a power of two */
	uint64_t res_lo;   /* offsets [0, res_lo) are reserved */
	uint64_t res_hi;   /* offsets [size - res_hi, size) are reserved */
	uint64_t router;   /* offset of the router address */
	uint64_t capacity; /* size - res_lo - res_hi */
	uint64_t used;
	uint64_t cursor;   /* SEQUENTIAL: where the next scan starts */
	uint64_t rng;      /* RANDOM: splitmix64 state */
	size_t nwords;     /* words of bits */
	size_t nfull;      /* words of full */
	uint64_t *bits;
	uint64_t *full;
};

/* ---- address helpers ---------------------------------------------------- */

static unsigned family_bits(uint8_t family)
{
	return family == 4 ? 32 : family == 6 ? 128 : 0;
}

static unsigned family_bytes(uint8_t family)
{
	return family == 4 ? 4 : 16;
}

/* Whether the first `len` bits of a and b are equal. */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned len)
{
	unsigned whole = len / 8, rest = len % 8;
	if (whole && memcmp(a, b, whole) != 0)
		return false;
	if (rest) {
		uint8_t m = (uint8_t)(0xffu << (8 - rest));
		if ((a[whole] & m) != (b[whole] & m))
			return false;
	}
	return true;
}

/* Whether every bit from `len` on is zero. */
static bool host_bits_zero(const struct fibril_ip *ip, unsigned len)
{
	unsigned nbytes = family_bytes(ip->family);
	unsigned i = len / 8;
	if (len % 8) {
		if (ip->bytes[i] & (uint8_t)(0xffu >> (len % 8)))
			return false;
		i++;
	}
	for (; i < nbytes; i++)
		if (ip->bytes[i])
			return false;
	return true;
}

static bool cidr_valid(const struct fibril_cidr *c)
{
	unsigned bits = family_bits(c->ip.family);
	return bits && c->prefix_len <= bits && host_bits_zero(&c->ip, c->prefix_len);
}

/* The address as (hi, lo): IPv6 big-endian halves, IPv4 in lo. */
static void ip_load(const struct fibril_ip *ip, uint64_t *hi, uint64_t *lo)
{
	uint64_t h = 0, l = 0;
	if (ip->family == 4) {
		for (int i = 0; i < 4; i++)
			l = l << 8 | ip->bytes[i];
	} else {
		for (int i = 0; i < 8; i++)
			h = h << 8 | ip->bytes[i];
		for (int i = 8; i < 16; i++)
			l = l << 8 | ip->bytes[i];
	}
	*hi = h;
	*lo = l;
}

static void ip_store(struct fibril_ip *ip, uint64_t hi, uint64_t lo)
{
	if (ip->family == 4) {
		for (int i = 3; i >= 0; i--, lo >>= 8)
			ip->bytes[i] = (uint8_t)lo;
	} else {
		for (int i = 15; i >= 8; i--, lo >>= 8)
			ip->bytes[i] = (uint8_t)lo;
		for (int i = 7; i >= 0; i--, hi >>= 8)
			ip->bytes[i] = (uint8_t)hi;
	}
}

int fibril_ip_parse(const char *text, struct fibril_ip *out)
{
	if (!text || !out)
		return -EINVAL;
	struct fibril_ip ip;
	memset(&ip, 0, sizeof(ip));
	if (strchr(text, ':')) {
		if (inet_pton(AF_INET6, text, ip.bytes) != 1)
			return -EINVAL;
		ip.family = 6;
	} else {
		if (inet_pton(AF_INET, text, ip.bytes) != 1)
			return -EINVAL;
		ip.family = 4;
	}
	*out = ip;
	return 0;
}

const char *fibril_ip_format(const struct fibril_ip *ip, char *buf, size_t len)
{
	char tmp[INET6_ADDRSTRLEN];
	if (!buf || !len)
		return buf;
	const char *s = NULL;
	if (ip && ip->family == 4)
		s = inet_ntop(AF_INET, ip->bytes, tmp, sizeof(tmp));
	else if (ip && ip->family == 6)
		s = inet_ntop(AF_INET6, ip->bytes, tmp, sizeof(tmp));
	snprintf(buf, len, "%s", s ? s : "?");
	return buf;
}

int fibril_cidr_parse(const char *text, struct fibril_cidr *out)
{
	if (!text || !out)
		return -EINVAL;
	const char *slash = strchr(text, '/');
	if (!slash || slash == text)
		return -EINVAL;
	char addr[INET6_ADDRSTRLEN];
	size_t alen = (size_t)(slash - text);
	if (alen >= sizeof(addr))
		return -EINVAL;
	memcpy(addr, text, alen);
	addr[alen] = '\0';

	/* Prefix length: 1 to 3 decimal digits, no sign, space or leading zero. */
	const char *p = slash + 1;
	size_t plen = strlen(p);
	if (plen == 0 || plen > 3 || (plen > 1 && p[0] == '0'))
		return -EINVAL;
	unsigned len = 0;
	for (size_t i = 0; i < plen; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		len = len * 10 + (unsigned)(p[i] - '0');
	}

	struct fibril_cidr c;
	memset(&c, 0, sizeof(c));
	if (fibril_ip_parse(addr, &c.ip) < 0)
		return -EINVAL;
	if (len > family_bits(c.ip.family))
		return -EINVAL;
	c.prefix_len = (uint8_t)len;
	if (!host_bits_zero(&c.ip, len))
		return -EINVAL;
	*out = c;
	return 0;
}

const char *fibril_cidr_format(const struct fibril_cidr *cidr, char *buf, size_t len)
{
	char tmp[INET6_ADDRSTRLEN];
	if (!buf || !len)
		return buf;
	if (!cidr) {
		snprintf(buf, len, "?");
		return buf;
	}
	fibril_ip_format(&cidr->ip, tmp, sizeof(tmp));
	snprintf(buf, len, "%s/%u", tmp, (unsigned)cidr->prefix_len);
	return buf;
}

bool fibril_cidr_contains(const struct fibril_cidr *cidr, const struct fibril_ip *ip)
{
	if (!cidr || !ip || cidr->ip.family != ip->family)
		return false;
	unsigned bits = family_bits(ip->family);
	if (!bits || cidr->prefix_len > bits)
		return false;
	return prefix_equal(cidr->ip.bytes, ip->bytes, cidr->prefix_len);
}

int fibril_cidr_subnet(const struct fibril_cidr *cidr, uint8_t new_len, uint64_t index,
		       struct fibril_cidr *out)
{
	if (!cidr || !out || !cidr_valid(cidr))
		return -EINVAL;
	unsigned bits = family_bits(cidr->ip.family);
	if (new_len > bits)
		return -EINVAL;
	if (new_len < cidr->prefix_len)
		return -ERANGE;
	unsigned diff = new_len - cidr->prefix_len; /* 2^diff subnets */
	if (diff < 64 && index >> diff)
		return -ERANGE;

	/* base + index << (bits - new_len); the bits it lands on are zero in
	 * base, so adding is OR-ing. index < 2^diff keeps it inside the CIDR. */
	unsigned shift = bits - new_len;
	uint64_t hi, lo, add_hi = 0, add_lo = 0;
	ip_load(&cidr->ip, &hi, &lo);
	if (index) {
		if (shift == 0) {
			add_lo = index;
		} else if (shift < 64) {
			add_lo = index << shift;
			add_hi = index >> (64 - shift);
		} else if (shift < 128) {
			add_hi = index << (shift - 64);
		}
	}
	struct fibril_cidr c;
	memset(&c, 0, sizeof(c));
	c.ip.family = cidr->ip.family;
	c.prefix_len = new_len;
	ip_store(&c.ip, hi | add_hi, lo | add_lo);
	*out = c;
	return 0;
}

/* ---- the allocator -------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t clock_seed(const void *salt)
{
	struct timespec mono, real;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &real);
	uint64_t s = (uint64_t)real.tv_sec * 1000000000ULL + (uint64_t)real.tv_nsec;
	s ^= ((uint64_t)mono.tv_sec * 1000000000ULL + (uint64_t)mono.tv_nsec) << 17;
	s ^= (uint64_t)(uintptr_t)salt;
	uint64_t st = s;
	s = splitmix64(&st);
	return s ? s : 1;
}

static inline bool bit_get(const struct fibril_ipalloc *a, uint64_t off)
{
	return (a->bits[off >> 6] >> (off & 63)) & 1;
}

static inline void bit_set(struct fibril_ipalloc *a, uint64_t off)
{
	size_t w = (size_t)(off >> 6);
	a->bits[w] |= 1ULL << (off & 63);
	if (a->bits[w] == ~0ULL)
		a->full[w >> 6] |= 1ULL << (w & 63);
}

static inline void bit_clear(struct fibril_ipalloc *a, uint64_t off)
{
	size_t w = (size_t)(off >> 6);
	a->bits[w] &= ~(1ULL << (off & 63));
	a->full[w >> 6] &= ~(1ULL << (w & 63));
}

static inline bool is_reserved(const struct fibril_ipalloc *a, uint64_t off)
{
	return off < a->res_lo || off >= a->size - a->res_hi;
}

/* The first word at index >= start (wrapping) that is not full. The caller
 * knows there is one (used < capacity). */
static size_t find_open_word(const struct fibril_ipalloc *a, size_t start)
{
	size_t s = start >> 6;
	uint64_t m = ~a->full[s] & (~0ULL << (start & 63));
	if (m)
		return (s << 6) | (size_t)__builtin_ctzll(m);
	for (size_t i = s + 1; i < a->nfull; i++)
		if (~a->full[i])
			return (i << 6) | (size_t)__builtin_ctzll(~a->full[i]);
	for (size_t i = 0; i <= s; i++)
		if (~a->full[i])
			return (i << 6) | (size_t)__builtin_ctzll(~a->full[i]);
	return 0; /* not reached: used < capacity */
}

/* The first free offset at or after start (wrapping). */
static uint64_t find_free(const struct fibril_ipalloc *a, uint64_t start)
{
	size_t w = (size_t)(start >> 6);
	uint64_t m = ~a->bits[w] & (~0ULL << (start & 63));
	if (m)
		return ((uint64_t)w << 6) | (uint64_t)__builtin_ctzll(m);
	size_t next = w + 1 == a->nwords ? 0 : w + 1;
	/* Wrapping round to w itself finds its bits below start. */
	size_t ow = find_open_word(a, next);
	return ((uint64_t)ow << 6) | (uint64_t)__builtin_ctzll(~a->bits[ow]);
}

/* The offset of ip in a's CIDR, or -1 when outside. */
static int64_t offset_of(const struct fibril_ipalloc *a, const struct fibril_ip *ip)
{
	if (!ip || ip->family != a->cidr.ip.family ||
	    !prefix_equal(a->cidr.ip.bytes, ip->bytes, a->cidr.prefix_len))
		return -1;
	/* At most 24 host bits: the last three bytes hold the offset. */
	const uint8_t *e = ip->bytes + family_bytes(ip->family);
	uint64_t off = (uint64_t)e[-3] << 16 | (uint64_t)e[-2] << 8 | e[-1];
	return (int64_t)(off & (a->size - 1));
}

static void ip_at(const struct fibril_ipalloc *a, uint64_t off, struct fibril_ip *out)
{
	*out = a->cidr.ip;
	uint8_t *e = out->bytes + family_bytes(out->family);
	e[-1] |= (uint8_t)off;
	e[-2] |= (uint8_t)(off >> 8);
	e[-3] |= (uint8_t)(off >> 16);
}

int fibril_ipalloc_new(const struct fibril_cidr *cidr, const struct fibril_ipalloc_opts *opts,
		       struct fibril_ipalloc **out)
{
	if (out)
		*out = NULL;
	if (!cidr || !out || !cidr_valid(cidr))
		return -EINVAL;
	enum fibril_ipalloc_strategy strategy = FIBRIL_IPALLOC_SEQUENTIAL;
	uint64_t seed = 0;
	if (opts) {
		struct fibril_ipalloc_opts o;
		char why[200];
		int rc = fibril_struct_copy_in(&o, sizeof(o), opts, opts->sz,
					       FIBRIL_OFFSETOFEND(struct fibril_ipalloc_opts, sz),
					       "struct fibril_ipalloc_opts", why, sizeof(why));
		if (rc < 0) {
			fibril_warn(NULL, "fibril_ipalloc_new refused: %s", why);
			return rc;
		}
		strategy = o.strategy;
		seed = o.seed;
		if (strategy != FIBRIL_IPALLOC_SEQUENTIAL && strategy != FIBRIL_IPALLOC_RANDOM)
			return -EINVAL;
	}
	unsigned bits = family_bits(cidr->ip.family);
	unsigned host = bits - cidr->prefix_len;
	if (host > MAX_HOST_BITS)
		return -E2BIG;

	struct fibril_ipalloc *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cidr = *cidr;
	memset(a->cidr.ip.bytes + family_bytes(cidr->ip.family), 0,
	       sizeof(a->cidr.ip.bytes) - family_bytes(cidr->ip.family));
	a->strategy = strategy;
	a->size = 1ULL << host;
	if (host >= 2) { /* network + router, and the IPv4 broadcast */
		a->res_lo = 2;
		a->res_hi = cidr->ip.family == 4 ? 1 : 0;
		a->router = 1;
	} else { /* /31, /127: router + one; /32, /128: the router only */
		a->res_lo = 1;
		a->res_hi = 0;
		a->router = 0;
	}
	a->capacity = a->size - a->res_lo - a->res_hi;
	a->nwords = (size_t)((a->size + 63) / 64);
	a->nfull = (a->nwords + 63) / 64;
	a->bits = calloc(a->nwords, sizeof(uint64_t));
	a->full = calloc(a->nfull, sizeof(uint64_t));
	if (!a->bits || !a->full) {
		fibril_ipalloc_free(a);
		return -ENOMEM;
	}
	/* Padding past the end of each level is set: never found free. */
	if (a->size & 63)
		a->bits[a->nwords - 1] = ~0ULL << (a->size & 63);
	if (a->nwords & 63)
		a->full[a->nfull - 1] = ~0ULL << (a->nwords & 63);
	for (uint64_t off = 0; off < a->res_lo; off++)
		bit_set(a, off);
	for (uint64_t off = a->size - a->res_hi; off < a->size; off++)
		bit_set(a, off);

	a->cursor = a->res_lo;
	if (strategy == FIBRIL_IPALLOC_RANDOM)
		a->rng = seed ? seed : clock_seed(a);
	*out = a;
	return 0;
}

void fibril_ipalloc_free(struct fibril_ipalloc *a)
{
	if (!a)
		return;
	free(a->bits);
	free(a->full);
	free(a);
}

int fibril_ipalloc_next(struct fibril_ipalloc *a, struct fibril_ip *out)
{
	if (!a || !out)
		return -EINVAL;
	if (a->used >= a->capacity)
		return -ENOSPC;
	uint64_t off;
	if (a->strategy == FIBRIL_IPALLOC_RANDOM) {
		off = find_free(a, splitmix64(&a->rng) & (a->size - 1));
	} else {
		off = find_free(a, a->cursor);
		a->cursor = off + 1 == a->size ? 0 : off + 1;
	}
	bit_set(a, off);
	a->used++;
	ip_at(a, off, out);
	return 0;
}

int fibril_ipalloc_claim(struct fibril_ipalloc *a, const struct fibril_ip *ip)
{
	if (!a || !ip)
		return -EINVAL;
	int64_t off = offset_of(a, ip);
	if (off < 0 || is_reserved(a, (uint64_t)off))
		return -ERANGE;
	if (bit_get(a, (uint64_t)off))
		return -EEXIST;
	bit_set(a, (uint64_t)off);
	a->used++;
	return 0;
}

int fibril_ipalloc_release(struct fibril_ipalloc *a, const struct fibril_ip *ip)
{
	if (!a || !ip)
		return -EINVAL;
	int64_t off = offset_of(a, ip);
	if (off < 0 || is_reserved(a, (uint64_t)off))
		return -ERANGE;
	if (!bit_get(a, (uint64_t)off))
		return -ENOENT;
	bit_clear(a, (uint64_t)off);
	a->used--;
	return 0;
}

bool fibril_ipalloc_is_allocated(const struct fibril_ipalloc *a, const struct fibril_ip *ip)
{
	if (!a)
		return false;
	int64_t off = offset_of(a, ip);
	return off >= 0 && !is_reserved(a, (uint64_t)off) && bit_get(a, (uint64_t)off);
}

uint64_t fibril_ipalloc_used(const struct fibril_ipalloc *a)
{
	return a ? a->used : 0;
}

uint64_t fibril_ipalloc_capacity(const struct fibril_ipalloc *a)
{
	return a ? a->capacity : 0;
}

const struct fibril_cidr *fibril_ipalloc_cidr(const struct fibril_ipalloc *a)
{
	return a ? &a->cidr : NULL;
}

void fibril_ipalloc_router(const struct fibril_ipalloc *a, struct fibril_ip *out)
{
	if (!out)
		return;
	if (!a) {
		memset(out, 0, sizeof(*out));
		return;
	}
	ip_at(a, a->router, out);
}
