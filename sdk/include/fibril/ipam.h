/* fibril/ipam.h - the "ipam" capability: what every IP address management
 * mode provides (cluster-pool, k8s-podcidr, a vendor's own). A mode fills a
 * struct fibril_ipam_ops and registers it with fibril_service_provide(m,
 * FIBRIL_IPAM_CAPABILITY, &ops.hdr, ctx). The ipam-api module serves it on
 * the API (/v1/ipam) and the CLI (`fibril ipam`), whatever the mode.
 *
 * Addresses cross this interface as text ("10.0.3.7", "fd00::7"). An owner
 * is the caller's name for whoever holds an address (the CNI attachment:
 * "<container id>/<ifname>"); a mode hands an owner that asks again the
 * address(es) it already holds. Every function runs on the loop thread and
 * answers synchronously; it returns 0 (or a count) or a negative errno:
 *   -EINVAL bad argument, -EAFNOSUPPORT family not offered by this mode,
 *   -ENOSPC pool exhausted, -EEXIST address taken, -ERANGE address outside
 *   the pool, -ENOENT no such allocation, -EAGAIN not ready (no pool yet).
 *
 * Durability (interface version 2, SDK 1.4): a mode may answer from memory
 * and make its answers durable later, in batches (the shared store does,
 * through <fibril/journal.h>). Such a mode provides wait_durable, and a
 * consumer that tells anyone of an answer (an API reply, a CNI result)
 * first waits for it: wait_durable(ctx, done, ud) calls done(ud, 0) on the
 * loop once every answer given so far is on disk (a negative errno: it is
 * not, and will not be; report an error). A version 1 mode, or one whose
 * table is too short to hold it (FIBRIL_SERVICE_HAS(ops, wait_durable)) or
 * leaves it NULL, answers durably: use its answers at once. */
#ifndef FIBRIL_IPAM_H
#define FIBRIL_IPAM_H

#include <stddef.h>
#include <stdint.h>
#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_IPAM_CAPABILITY "ipam"
#define FIBRIL_IPAM_VERSION 2

/* Families: 4, 6, or FIBRIL_IPAM_ANY for every family the mode offers. */
#define FIBRIL_IPAM_ANY 0

#define FIBRIL_IPAM_ADDR_LEN 46  /* INET6_ADDRSTRLEN */
#define FIBRIL_IPAM_CIDR_LEN 50
#define FIBRIL_IPAM_OWNER_LEN 256

/* One address handed out. */
struct fibril_ipam_result {
	uint32_t sz;                             /* sizeof, set by the caller */
	int family;                              /* 4 or 6 */
	char address[FIBRIL_IPAM_ADDR_LEN];
	char cidr[FIBRIL_IPAM_CIDR_LEN];         /* the pool it came from */
	char gateway[FIBRIL_IPAM_ADDR_LEN];      /* the router address of that pool */
};

/* One pool (per family). */
struct fibril_ipam_pool {
	uint32_t sz;
	int family;
	char cidr[FIBRIL_IPAM_CIDR_LEN];
	char gateway[FIBRIL_IPAM_ADDR_LEN];
	uint64_t used;   /* addresses handed out */
	uint64_t total;  /* addresses that can be handed out (capped at 2^63) */
};

/* list() calls this per allocation; return non-zero to stop. */
typedef int (*fibril_ipam_list_fn)(const char *address, const char *owner, void *ud);
/* wait_durable's answer: 0, or a negative errno. */
typedef void (*fibril_ipam_done_fn)(void *ud, int status);

struct fibril_ipam_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_IPAM_VERSION */
	/* Next free address of `family` (or one per offered family with
	 * FIBRIL_IPAM_ANY) for owner; fills out[0..n), returns n. */
	int (*allocate_next)(void *ctx, int family, const char *owner,
			     struct fibril_ipam_result *out, size_t max);
	/* A given address for owner (idempotent for the same owner). */
	int (*allocate_ip)(void *ctx, const char *address, const char *owner,
			   struct fibril_ipam_result *out);
	int (*release_ip)(void *ctx, const char *address);
	/* Release everything owner holds; returns how many. */
	int (*release_owner)(void *ctx, const char *owner);
	int (*list)(void *ctx, fibril_ipam_list_fn cb, void *ud);
	/* Describe the pools; fills out[0..n), returns n (0: no pool yet). */
	int (*pools)(void *ctx, struct fibril_ipam_pool *out, size_t max);
	/* Version 2 (SDK 1.4): done(ud, status) on the loop, never from
	 * inside this call, once every answer given so far is durable;
	 * returns 0 (done will be called) or a negative errno (it will not). */
	int (*wait_durable)(void *ctx, fibril_ipam_done_fn done, void *ud);
};

#ifdef __cplusplus
}
#endif
#endif
