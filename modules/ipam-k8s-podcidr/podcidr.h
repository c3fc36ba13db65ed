/* modules/ipam-k8s-podcidr/podcidr.h - the ipam-k8s-podcidr module's state
 * and what its files share: reading this node's pod CIDRs from its Node
 * object (node.c), the allocation store and the ipam interface it serves
 * (ops.c, over <fibril/ipamstore.h>) and the lifecycle, the wait for the
 * Node, the node annotation and health (podcidr.c).
 * Everything runs on the loop thread. */
#ifndef PODCIDR_H
#define PODCIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fibril/fibril.h>
#include <fibril/k8s.h>

#define PC_MODULE "ipam-k8s-podcidr"
#define PC_NFAM 2       /* [0] IPv4, [1] IPv6 */
#define PC_WHY_LEN 512
#define PC_SRC_LEN 96   /* "spec.podCIDRs[1]", "annotation network.fibril.io/ipv4-pod-cidr" */

/* The node annotations this module reads (fallback) and writes. */
#define PC_ANNOT_PREFIX "network.fibril.io/"
#define PC_ANNOT_V4_CIDR PC_ANNOT_PREFIX "ipv4-pod-cidr"
#define PC_ANNOT_V6_CIDR PC_ANNOT_PREFIX "ipv6-pod-cidr"
#define PC_ANNOT_V4_HOST PC_ANNOT_PREFIX "ipv4-host-ip"
#define PC_ANNOT_V6_HOST PC_ANNOT_PREFIX "ipv6-host-ip"

struct pc;

/* One address family. */
struct pc_fam {
	struct pc *pc;
	int family;               /* 4 or 6 */
	bool enabled;             /* the Node gave a CIDR of this family */
	char source[PC_SRC_LEN];  /* where it came from */
	bool have_node;
	struct fibril_cidr node;  /* the node CIDR allocations come from (the store's) */
};

/* The pod CIDRs a Node object names, per family, and where each came from. */
struct pc_node_cidrs {
	bool have[PC_NFAM];
	struct fibril_cidr cidr[PC_NFAM];
	char source[PC_NFAM][PC_SRC_LEN];
};

struct pc {
	struct fibril_module *m;
	struct fibril_ipamstore *store; /* allocations, on disk under <state>/ipam-k8s-podcidr */
	const struct fibril_k8s_ops *k8s;
	void *k8sctx;
	char node_name[256];
	enum fibril_ipalloc_strategy strategy;
	uint64_t node_timeout_ms;
	bool annotate;
	struct pc_fam fam[PC_NFAM];
	/* lifecycle */
	bool in_start, start_pending, start_done, ready, stopping;
	int start_rc;
	bool synced;     /* the nodes cache finished its first list */
	bool node_seen;  /* the Node object exists */
	struct fibril_timer *deadline;
	/* annotation */
	int annot_state; /* 0 not asked, 1 in flight, 2 done, <0 errno */
	char why[PC_WHY_LEN]; /* the current problem (health), "" when none */
};

/* node.c: the node's pod CIDRs from its JSON. spec.podCIDRs (one per
 * family) if non-empty, else spec.podCIDR; a family still without one
 * takes the annotation network.fibril.io/ipvN-pod-cidr. Returns how many
 * families were found (0..2), or -EINVAL with a message naming the field
 * in why (an invalid value is refused, never skipped). */
int pc_node_cidrs(const char *node_json, struct pc_node_cidrs *out, char *why, size_t len);

/* ops.c */
/* The store (no I/O) and the ipam capability it serves; in init. */
int pc_store_provide(struct pc *pc);
/* The family's node CIDR is (now) cidr: a fresh allocator, restored
 * allocations placed in it, the node-cidr file rewritten. */
int pc_fam_set_node(struct pc_fam *f, const struct fibril_cidr *cidr);
/* Where the family's allocations stand (see <fibril/ipamstore.h>). */
void pc_fam_info(const struct pc_fam *f, struct fibril_ipamstore_family *out);

#endif
