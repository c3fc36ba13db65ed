/* modules/ipam-cluster-pool/cluster_pool.h - the ipam-cluster-pool module's
 * state and what its files share: config (config.c), the node CIDR claim
 * through the kvstore (claim.c), the allocation store and the ipam
 * interface it serves (ops.c, over <fibril/ipamstore.h>) and the lifecycle
 * (cluster_pool.c). Everything runs on the loop thread. */
#ifndef CLUSTER_POOL_H
#define CLUSTER_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fibril/fibril.h>
#include <fibril/k8s.h>

#define CP_MODULE "ipam-cluster-pool"
#define CP_NFAM 2          /* [0] IPv4, [1] IPv6 */
#define CP_NAME_LEN 256    /* node names */
#define CP_WHY_LEN 512

/* Where a family's node CIDR claim stands. */
enum cp_claim {
	CP_CLAIM_NONE = 0, /* not claimed yet */
	CP_CLAIM_HELD,     /* ours: allocations are served */
	CP_CLAIM_EXHAUSTED,/* no free node CIDR in the pool */
	CP_CLAIM_LOST,     /* ours before, now another node's (or unverified) */
};

struct cp;

/* One address family. */
struct cp_fam {
	struct cp *cp;
	int family; /* 4 or 6 */
	bool enabled;
	bool have_pool;
	struct fibril_cidr pool; /* cluster-pool-ipvX-cidr */
	uint8_t mask;            /* cluster-pool-ipvX-mask-size */
	bool pinned;
	struct fibril_cidr pin;  /* node-cidr */
	bool have_saved;
	struct fibril_cidr saved; /* node CIDR of the last run (state file) */
	bool have_node;
	struct fibril_cidr node;  /* the node CIDR allocations come from (the store's) */
	enum cp_claim claim;
	/* claim through the kvstore */
	bool busy;                /* a kvstore request is in flight */
	bool reclaim;             /* re-claim the held CIDR when idle */
	struct fibril_cidr cand;  /* the CIDR being claimed */
	const char *cand_src;     /* why that one (for the log) */
	uint64_t *taken;          /* subnet indexes other nodes hold, sorted */
	size_t ntaken, taken_cap;
	uint64_t nsubnets;
	int rounds;               /* conflicting transactions in this attempt */
	double claim_t0;          /* monotonic ms at the start of the claim */
	char why[CP_WHY_LEN];     /* the last problem, for health */
};

struct cp {
	struct fibril_module *m;
	struct fibril_ipamstore *store; /* allocations, on disk under <state>/ipam-cluster-pool */
	char node_name[CP_NAME_LEN];
	enum fibril_ipalloc_strategy strategy;
	uint64_t retry_ms;
	int64_t lease_ttl_s;
	struct cp_fam fam[CP_NFAM];
	/* the API server (CRD mode: no kvstore, no node-cidr; claim_k8s.c) */
	const struct fibril_k8s_ops *k8s;
	void *k8sctx;
	bool k8s_synced;          /* the claims' first list is in */
	struct fibril_subscription *claims_sub;
	/* kvstore (NULL: static node-cidr mode) */
	const struct fibril_kvstore_ops *kv;
	void *kvctx;
	int64_t lease;
	bool lease_pending;
	bool connected;
	struct fibril_timer *retry;
	struct fibril_subscription *subs[3];
	/* lifecycle */
	bool in_start, start_pending, start_done, stopping;
	int start_rc;
};

/* config.c */
extern const struct fibril_config_key cp_config_keys[];
int cp_config_read(struct cp *cp, char *why, size_t len);
int cp_config_mode_check(struct cp *cp, char *why, size_t len);

/* ops.c */
/* The store (no I/O) and the ipam capability it serves; in init. */
int cp_store_provide(struct cp *cp);
/* Opens the store for the enabled families (restores them) and reads the
 * last run's node CIDRs; in start. */
int cp_store_open(struct cp *cp, char *why, size_t len);
/* The family's node CIDR is (now) cidr: a fresh allocator, restored
 * allocations placed in it, the node-cidr file rewritten. */
int cp_fam_set_node(struct cp_fam *f, const struct fibril_cidr *cidr);
struct cp_fam *cp_fam_of(struct cp *cp, int family);

/* claim.c */
int cp_claim_start(struct cp *cp);
void cp_claim_stop(struct cp *cp);
int cp_claim_subscribe(struct cp *cp);
/* The kvstore key of a node CIDR: ipam/cluster-pool/<family>/<a.b.c.d_len>. */
void cp_claim_key(const struct cp_fam *f, const struct fibril_cidr *c, char *buf, size_t len);

/* claim.c, shared with claim_k8s.c */
bool cp_cidr_index(const struct cp_fam *f, const struct fibril_cidr *c, uint64_t *idx);
bool cp_cidr_equal(const struct fibril_cidr *a, const struct fibril_cidr *b);
void cp_taken_add(struct cp_fam *f, uint64_t idx);
bool cp_is_taken(const struct cp_fam *f, uint64_t idx);
bool cp_first_free(const struct cp_fam *f, struct fibril_cidr *out);
void cp_claim_fail(struct cp_fam *f, int err, const char *what);
void cp_claim_exhausted(struct cp_fam *f, const char *why_other);
void cp_claim_lost(struct cp_fam *f, const char *holder);
void cp_claim_held(struct cp_fam *f);
/* The candidate is held by another node: the next free one (or exhausted, lost). */
void cp_claim_other_holds(struct cp_fam *f, const char *holder);
void cp_claim_kick(struct cp *cp);

/* claim_k8s.c: the claim as a Lease kube-system/fibril-podcidr-v<F>-<cidr>
 * created with POST (AlreadyExists: someone's; read who). */
/* The Lease name of a node CIDR (fibril-podcidr-v4-10-244-1-0-24). */
void cp_k8s_lease_name(const struct cp_fam *f, const struct fibril_cidr *c, char *buf,
		       size_t len);
int cp_k8s_start(struct cp *cp);
void cp_k8s_kick(struct cp *cp);
/* Another holder of the candidate: try the next free one. */
void cp_k8s_next(struct cp_fam *f);

/* cluster_pool.c */
double cp_mono_ms(void);
/* A family settled (held, exhausted): finishes a pending start when all are. */
void cp_settled(struct cp *cp);
void cp_report_pool(struct cp *cp);
int cp_summary_text(struct cp *cp, char *buf, size_t len);

#endif
