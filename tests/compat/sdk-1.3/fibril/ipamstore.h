/* fibril/ipamstore.h - the allocation store IPAM modes share (ABI 1.3): the
 * addresses a mode handed out, by address and by owner, kept on disk so they
 * survive the agent, and the whole "ipam" interface (<fibril/ipam.h>) served
 * from them. A mode only decides its node CIDR per family (from the kvstore,
 * the Node object, its config ...) and gives it to the store; the store
 * hands out addresses of that CIDR from the shared allocator
 * (<fibril/ipalloc.h>).
 *
 * On disk, under the store's directory (by default <state-dir>/<module>):
 *   4/<address>, 6/<address>  one file per allocation, holding its owner
 *   node-cidr                 "<family> <cidr>" lines: the last node CIDRs
 * Every write is atomic and durable before the caller hears of it (temp
 * file ".<name>.tmp", fsync, rename, fsync the directory); a release
 * unlinks and fsyncs the directory. On open, a leftover ".<name>.tmp" (a
 * write that never completed, so its address was never returned) is
 * removed; a file whose name is not a canonical address of its directory's
 * family is logged and left alone; an unreadable one is kept as allocated
 * with an unknown owner.
 *
 * Restored allocations outside the node CIDR (it changed since the last
 * run) are "stale": kept on disk, counted, logged, never handed out nor
 * listed; releasing the address or its owner removes them. So should the
 * old CIDR come back, none of its addresses can be handed out twice.
 *
 * Use: fibril_ipamstore_new in init and provide fibril_ipamstore_ops with
 * the store as ctx; fibril_ipamstore_open in start (restores); then
 * fibril_ipamstore_set_node per family once its node CIDR is known;
 * fibril_ipamstore_free in fini. Functions return 0 or a negative errno.
 * Not thread-safe: use it from the loop thread. */
#ifndef FIBRIL_IPAMSTORE_H
#define FIBRIL_IPAMSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fibril/ipalloc.h>
#include <fibril/ipam.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_ipamstore;

/* Families for fibril_ipamstore_open. */
#define FIBRIL_IPAMSTORE_IPV4 0x1u
#define FIBRIL_IPAMSTORE_IPV6 0x2u

struct fibril_ipamstore_opts {
	uint32_t sz;       /* sizeof(struct fibril_ipamstore_opts) */
	const char *dir;   /* the state directory; NULL: <state-dir>/<module name> */
	enum fibril_ipalloc_strategy strategy; /* for every node CIDR's allocator */
	uint64_t seed;     /* RANDOM: 0 seeds from the clock */
	/* Whether a family with a node CIDR serves allocations now (e.g. its
	 * claim is held); NULL: always. allocate_* answer -EAGAIN and pools()
	 * leaves the family out while it says no. */
	bool (*serving)(void *ud, int family);
	void *ud;
};

/* A store of module m (its name is in the log lines; m may be NULL outside
 * the agent). No I/O. opts may be NULL (sequential, default dir). Returns
 * 0 and *out, -EINVAL or -ENOMEM. */
int fibril_ipamstore_new(struct fibril_module *m, const struct fibril_ipamstore_opts *opts,
			 struct fibril_ipamstore **out);
/* Closes and frees everything (the files stay). NULL is fine. */
void fibril_ipamstore_free(struct fibril_ipamstore *s);

/* The ipam interface served by the store: provide it with the store as
 * ctx, fibril_service_provide(m, FIBRIL_IPAM_CAPABILITY,
 * &fibril_ipamstore_ops(s)->hdr, s). One owner holds at most one address
 * per family through allocate_next (asking again returns it); allocate_ip
 * is idempotent for the same named owner. A mode that needs to change one
 * function copies the table and calls the store's own from its wrapper. */
const struct fibril_ipam_ops *fibril_ipamstore_ops(const struct fibril_ipamstore *s);

/* Creates the directory and the families' subdirectories, reads the
 * node-cidr file and restores the families' allocations (logged). families
 * is FIBRIL_IPAMSTORE_IPV4 and/or _IPV6; only those are served. On error
 * a one-line reason naming the path is written to why. Call once. */
int fibril_ipamstore_open(struct fibril_ipamstore *s, unsigned families, char *why, size_t len);

/* cidr is (now) the node CIDR of its family: a fresh allocator over it,
 * the restored allocations placed in it (those outside are stale and
 * logged), and the node-cidr file rewritten (a failure to record it is
 * logged, not returned: nothing depends on it but the next run's hint).
 * -EAFNOSUPPORT when the family was not opened; the allocator's errors
 * (-E2BIG ...) otherwise, and then the family keeps its former CIDR. */
int fibril_ipamstore_set_node(struct fibril_ipamstore *s, const struct fibril_cidr *cidr);

/* Where a family stands (for summaries, health, annotations). */
struct fibril_ipamstore_family {
	uint32_t sz;              /* sizeof, set by the caller */
	int family;               /* 4 or 6 */
	bool open;                /* opened for this family */
	bool have_node;           /* a node CIDR is set */
	bool serving;             /* have_node and the serving callback agrees */
	struct fibril_cidr node;  /* the node CIDR (have_node) */
	struct fibril_ip router;  /* its router (gateway) address (have_node) */
	uint64_t used;            /* addresses handed out from it */
	uint64_t capacity;        /* addresses it can hand out */
	uint64_t stale;           /* restored allocations outside it */
	uint64_t restored;        /* allocations open() read from disk */
	bool have_saved;          /* the node-cidr file named one for this family */
	struct fibril_cidr saved; /* ... the node CIDR of the last run */
};

/* Fills out (out->sz set by the caller) -> 0, -EINVAL (bad family or
 * size). A family not opened reads as open = false. */
int fibril_ipamstore_family(const struct fibril_ipamstore *s, int family,
			    struct fibril_ipamstore_family *out);

/* The store's directory ("" before open), for messages. */
const char *fibril_ipamstore_dir(const struct fibril_ipamstore *s);

#ifdef __cplusplus
}
#endif
#endif
