/* lib/ipamstore_int.h - what the two halves of the allocation store of
 * <fibril/ipamstore.h> share: lib/ipamstore.c (the table, its journal and
 * files, the node CIDR and the allocators: the store) and
 * lib/ipamstore_ops.c (the "ipam" interface served over it). Private to
 * them. */
#ifndef FIBRIL_LIB_IPAMSTORE_INT_H
#define FIBRIL_LIB_IPAMSTORE_INT_H

#include "lib_int.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define NFAM 2 /* [0] IPv4, [1] IPv6 */
#define INITIAL_BUCKETS 64
#define NODE_FILE "node-cidr"
#define STALE_LOGGED 5 /* stale allocations named one by one, per placement */

/* One address handed out (or restored from disk). */
struct entry {
	struct fibril_ip ip;
	char addr[FIBRIL_IPAM_ADDR_LEN]; /* canonical text, also the file name */
	char *owner;                     /* "" when anonymous */
	bool placed;                     /* claimed in the allocator; false: stale */
	bool legacy;                     /* read from a 1.3 allocation file */
	struct entry *next_ip, *next_owner;
};

struct fam {
	int family; /* 4 or 6 */
	bool open;
	int dirfd;  /* <dir>/<family> */
	bool have_node;
	struct fibril_cidr node;
	struct fibril_ipalloc *alloc;
	bool have_saved;
	struct fibril_cidr saved;
	uint64_t stale, restored;
};

struct fibril_ipamstore {
	struct fibril_module *m;
	struct fibril_journal *j;
	char dir[PATH_MAX];
	bool dir_given, opened;
	int basefd;
	enum fibril_ipalloc_strategy strategy;
	uint64_t seed;
	bool (*serving)(void *ud, int family);
	void *ud;
	struct fam fam[NFAM];
	struct entry **by_ip, **by_owner;
	size_t nbuckets, count;
};

#define JOURNAL_NAME "allocations"

/* The "ipam" interface over a store (the store is the ctx). */
HIDDEN extern const struct fibril_ipam_ops ipamstore_store_ops;

/* ---- the table (lib/ipamstore.c) ---- */
HIDDEN struct entry *ipamstore_entry_new(const struct fibril_ip *ip, const char *owner);
HIDDEN void ipamstore_entry_free(struct entry *e);
HIDDEN struct entry *ipamstore_find_ip(const struct fibril_ipamstore *s, const struct fibril_ip *ip);
/* owner's placed entry of family, or NULL */
HIDDEN struct entry *ipamstore_find_owner(const struct fibril_ipamstore *s, const char *owner,
					  int family);
HIDDEN void ipamstore_insert(struct fibril_ipamstore *s, struct entry *e);
HIDDEN void ipamstore_unlink_entry(struct fibril_ipamstore *s, struct entry *e);
/* Every entry sorted by address (free the array, not the entries). */
HIDDEN struct entry **ipamstore_sorted(const struct fibril_ipamstore *s, size_t *n);
HIDDEN struct fam *ipamstore_fam_of(struct fibril_ipamstore *s, int family);
/* Appends e's journal record (add or remove); durable once the journal's
 * flush says so. */
HIDDEN int ipamstore_record(struct fibril_ipamstore *s, const struct entry *e, bool add);
/* Whether f hands out addresses now (open, placed, and its mode serves it). */
HIDDEN bool ipamstore_serving(const struct fibril_ipamstore *s, const struct fam *f);

#endif
