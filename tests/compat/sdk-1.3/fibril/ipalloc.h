/* fibril/ipalloc.h - the address allocator IPAM modes share (ABI 1.2): a
 * bitmap over one CIDR, scanned 64 bits at a time, with a sequential or a
 * random strategy (as Kubernetes' allocator). The network address, the IPv4
 * broadcast address and the router (gateway) address are never handed out.
 * It knows nothing of owners or persistence: a mode keeps those. Not
 * thread-safe: use it from the loop thread. Also the address helpers every
 * mode needs. */
#ifndef FIBRIL_IPALLOC_H
#define FIBRIL_IPALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An address: family 4 (first 4 bytes used) or 6. */
struct fibril_ip {
	uint8_t family;
	uint8_t bytes[16];
};

/* A prefix: address (host bits zero) and length. */
struct fibril_cidr {
	struct fibril_ip ip;
	uint8_t prefix_len;
};

/* "10.0.0.1" / "fd00::1" -> 0 or -EINVAL. */
int fibril_ip_parse(const char *text, struct fibril_ip *out);
/* Writes text into buf (at least 46 bytes); returns buf. */
const char *fibril_ip_format(const struct fibril_ip *ip, char *buf, size_t len);
/* "10.0.0.0/16" -> 0, -EINVAL (bad syntax or host bits set). */
int fibril_cidr_parse(const char *text, struct fibril_cidr *out);
const char *fibril_cidr_format(const struct fibril_cidr *cidr, char *buf, size_t len);
bool fibril_cidr_contains(const struct fibril_cidr *cidr, const struct fibril_ip *ip);
/* The index-th subnet of size new_len inside cidr (e.g. the 3rd /24 of a
 * /16) -> 0, or -ERANGE when there is no such subnet, -EINVAL. */
int fibril_cidr_subnet(const struct fibril_cidr *cidr, uint8_t new_len, uint64_t index,
		       struct fibril_cidr *out);

enum fibril_ipalloc_strategy {
	FIBRIL_IPALLOC_SEQUENTIAL = 0, /* lowest free address after the last one */
	FIBRIL_IPALLOC_RANDOM,         /* a random free address */
};

struct fibril_ipalloc_opts {
	uint32_t sz;                  /* sizeof(struct fibril_ipalloc_opts) */
	enum fibril_ipalloc_strategy strategy;
	uint64_t seed;                /* RANDOM: 0 seeds from the clock */
};

struct fibril_ipalloc;

/* A bitmap over cidr (at most 2^24 addresses: /8 for IPv4, /104 for IPv6);
 * the router address is the first usable one. Returns 0 and *out, -EINVAL,
 * -E2BIG (too large) or -ENOMEM. opts may be NULL (sequential). */
int fibril_ipalloc_new(const struct fibril_cidr *cidr, const struct fibril_ipalloc_opts *opts,
		       struct fibril_ipalloc **out);
void fibril_ipalloc_free(struct fibril_ipalloc *a);
/* Next free address -> 0, -ENOSPC when exhausted. */
int fibril_ipalloc_next(struct fibril_ipalloc *a, struct fibril_ip *out);
/* Take a given address -> 0, -EEXIST taken, -ERANGE outside the CIDR or
 * reserved (network, broadcast, router). */
int fibril_ipalloc_claim(struct fibril_ipalloc *a, const struct fibril_ip *ip);
/* Give it back -> 0, -ENOENT not allocated, -ERANGE outside. */
int fibril_ipalloc_release(struct fibril_ipalloc *a, const struct fibril_ip *ip);
bool fibril_ipalloc_is_allocated(const struct fibril_ipalloc *a, const struct fibril_ip *ip);
uint64_t fibril_ipalloc_used(const struct fibril_ipalloc *a);
uint64_t fibril_ipalloc_capacity(const struct fibril_ipalloc *a); /* usable addresses */
const struct fibril_cidr *fibril_ipalloc_cidr(const struct fibril_ipalloc *a);
/* The router (gateway) address. */
void fibril_ipalloc_router(const struct fibril_ipalloc *a, struct fibril_ip *out);

#ifdef __cplusplus
}
#endif
#endif
