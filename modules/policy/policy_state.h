/* modules/policy/policy_state.h - the policy module's state and the
 * functions its files share: the repository (policies, rule IDs), the
 * local endpoints and the cluster's identities they are matched with, the
 * selector cache, the CIDR identities, the state file, and each
 * endpoint's entries in the datapath's policy map. One struct pol_state
 * per module, used on the agent's loop thread only (bus events, API
 * handlers, the k8s module's callbacks): no locking.
 *
 * Invariants the files keep between them:
 * - an endpoint's entries (struct pol_ep .entries) are what the module
 *   wrote to (or found in) the map for it, sorted by pol_entry_cmp, one
 *   per key (pol_entry_same_key);
 * - an admitted policy's selectors are in the selector cache (struct
 *   pol_selector .cached; NULL after an allocation failure: that selector
 *   is matched at each resolution instead), and each cache entry's
 *   identities are those of the local endpoints and cluster identities it
 *   matches now;
 * - a peer of a policy in the repository carries its rule's ID
 *   (pol_take_ids as the policy enters, pol_drop_ids as it leaves; 0 only
 *   when out of memory);
 * - an endpoint whose policy may have changed is marked dirty, and the
 *   next pol_recompute resolves it (every endpoint when st->full is set
 *   or the set of CIDR identities changed).
 *
 * The parsed form of a policy and the parser are in policy_int.h. */
#ifndef FIBRIL_POLICY_STATE_H
#define FIBRIL_POLICY_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <netinet/in.h>

#include <fibril/fibril.h>
#include <fibril/k8s.h>
#include <fibril/nodes.h>
#include <fibril/policy.h>

#include "policy_int.h"

struct json_object;

#define POL_MODULE "policy"
#define POL_CIDR_IDENTITY_BASE (1u << 24) /* local CIDR identities, as Cilium */
#define POL_EP_MAX 65536

struct pol_entry {
	uint32_t identity;
	uint8_t dir; /* FIBRIL_DATAPATH_* */
	uint8_t proto;
	uint8_t bits;
	uint8_t deny;
	uint16_t port;
	uint32_t rule; /* the rule it comes from (struct pol_rule_rec), 0: unknown */
};

struct pol_named_port {
	char name[16];
	uint8_t proto;
	uint16_t port;
};

struct pol_ep {
	uint16_t id;
	uint32_t identity;
	char *labels;
	char *match_labels; /* labels + its namespace's (POL_NS_LABELS_PREFIX) */
	/* what a policy's subject selector is matched with: match_labels + its
	 * pod's labels that identities leave out (label_filter.h; the policy
	 * map is per endpoint, so these cost no identity) */
	char *subject_labels;
	char pod_ns[64], pod_name[254];
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;
	struct in6_addr ipv6;
	struct pol_named_port *ports; /* its pod's container ports with a name */
	size_t nports;
	bool ingress, egress;     /* enforced, as in the datapath */
	uint32_t revision;
	struct pol_entry *entries; /* in the datapath, sorted */
	size_t nentries;
	bool dirty; /* to be resolved again at the next update */
};

/* One distinct selector of the cache and the identities it selects (with
 * how many local endpoints of each it matches). */
struct sel_id {
	uint32_t identity;
	uint32_t endpoints;
};

struct sel_entry {
	char *key; /* selector_text(): kubectl's form and the namespace it is limited to */
	struct pol_selector sel; /* a copy (the users' may go first) */
	char ns[POL_NS_MAX];
	size_t users; /* rule subjects and peers that use it */
	struct sel_id *ids;
	size_t nids, cap;
	uint64_t changed; /* the update generation its identity set last changed in */
};

/* An identity of the cluster that other nodes' pods may hold (from the
 * endpoint module's FIBRIL_ENDPOINT_TOPIC_IDENTITY_* events): matched by
 * peer selectors as a local endpoint is. */
struct pol_rid {
	uint32_t identity;
	char *labels;
	char *match_labels; /* labels + its namespace's */
};

/* One rule of the repository and its stable ID: an element of a policy's
 * ingress / egress / ingressDeny / egressDeny (of spec, or specs[spec]),
 * known by the policy's source, kind, namespace and name, the section and
 * the element's index. IDs are handed out in increasing order and never
 * reused; the table is saved with the policies, so a rule keeps its ID
 * across updates of its policy and across restarts (the map entries in
 * place keep naming the right rule). */
struct pol_rule_rec {
	uint32_t id;
	uint32_t refs; /* peers of the policies in the repository that carry it */
	uint32_t hash;
	bool from_k8s, ingress, deny;
	uint8_t kind; /* enum pol_kind */
	uint32_t spec, index;
	char ns[POL_NS_MAX];
	char name[POL_NAME_MAX];
};

struct pol_cidr_id {
	struct pol_cidr cidr;
	uint32_t identity;
	bool used; /* marked during a recompute */
};

struct pol_state {
	struct fibril_module *m;
	struct fibril_policy_ops ops;
	const struct fibril_datapath_ops *dp;
	void *dp_ctx;
	const struct fibril_endpoint_ops *epops;
	void *ep_ctx;
	/* the nodes capability (interface 2), to name another node's pod by
	 * its address in a trace; NULL without it */
	const struct fibril_nodes_ops *nodes;
	void *nodes_ctx;
	const struct fibril_k8s_ops *k8s;
	void *k8s_ctx;
	bool k8s_synced;
	bool started;
	struct pol_policy **pols;
	size_t npols;
	uint64_t revision;
	struct pol_ep **eps; /* by ID */
	struct pol_rid *rids; /* the cluster's identities, sorted by number */
	size_t nrids, rids_cap;
	size_t ep_hi; /* above the highest ID seen (the loops over eps stop there) */
	struct pol_cidr_id *cidrs;
	size_t ncidrs;
	uint32_t next_cidr_id;        /* CIDR identities ever handed out */
	uint32_t *free_cidr_ids;      /* released ones, handed out again first */
	size_t nfree_cidr_ids, free_cidr_cap;
	struct pol_rule_rec *rules; /* the rule IDs, sorted by ID */
	size_t nrules, rules_cap;
	uint32_t next_rule_id;
	struct sel_entry **sels; /* the selector cache */
	size_t nsels;
	uint64_t sel_gen;
	bool full; /* the next update resolves every endpoint */
	/* [policy] allow-localhost = always: the node's own traffic (kubelet's
	 * probes) is allowed into every endpoint whose ingress is enforced, as
	 * Cilium's allow-localhost (an allow entry for the host identity that
	 * only a deny naming the host overrides); policy: an ordinary peer */
	bool allow_localhost;
	/* counters */
	uint64_t imports, refused, deletes, recomputes, map_writes, map_removes, map_errors;
	uint64_t incrementals, resolutions;
	uint64_t rid_updates; /* cluster identities that came, changed or went */
	uint64_t last_update_us; /* how long the last update took, resolving last_update_eps */
	uint64_t last_update_eps;
	uint64_t k8s_applied, k8s_invalid, k8s_deleted, k8s_missed;
	struct fibril_metric *m_k8s_invalid;
	uint64_t sel_warnings; /* policies admitted with a warning (a peer selector on a filtered label) */
	struct fibril_metric *m_sel_warnings;
	char last_error[256];
	int dirfd; /* <state-dir>/policy, -1 when none */
};

#define POL_STATE_FILE "policies.json"
/* The sort key of the allow-localhost entry while pol_resolve merges (after
 * every rule's: a rule making the same entry names it), 0 in the map. */
#define POL_RULE_LOCALHOST UINT32_MAX

/* A set of entries being built (oom: one could not be added). */
struct entry_vec {
	struct pol_entry *v;
	size_t n, cap;
	bool oom;
};

/* A set of identities (each once). */
struct ids {
	uint32_t *v;
	size_t n, cap;
};

/* In an array of n elements of size sz sorted by a uint32_t at offset
 * off: the first index whose key is >= k (n when none). */
static inline size_t pol_u32_lower_bound(const void *base, size_t n, size_t sz, size_t off, uint32_t k)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		uint32_t v;
		memcpy(&v, (const char *)base + mid * sz + off, sizeof(v));
		if (v < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- resolve.c: entries (a set being built: sorted and made unique by
 * pol_resolve) and one endpoint's resolution */
int pol_entry_cmp(const void *a, const void *b);
bool pol_entry_same_key(const struct pol_entry *x, const struct pol_entry *y);
void pol_entry_vec_add(struct entry_vec *vec, struct pol_entry e);
void pol_ids_add(struct ids *s, uint32_t id);
void peer_identities(struct pol_state *st, const struct pol_policy *pol,
		     const struct pol_peer *peer, struct ids *out);
void peer_entries(struct pol_state *st, const struct pol_ep *subject,
		  const struct pol_peer *peer, const struct ids *ids, struct entry_vec *vec);
void pol_resolve(struct pol_state *st, const struct pol_ep *ep, struct entry_vec *vec,
		 bool *ingress, bool *egress);

/* ---- cidr_identities.c: the local CIDR identities of the prefixes the policies name */
bool pol_addr_in(int family, const void *addr, const struct pol_cidr *c);
bool cidrs_collect(struct pol_state *st);
/* 0 when the policies add (replacing those of the same kind, name and
 * namespace) keep every namespace within [policy]
 * cidr-identities-per-namespace prefixes; else -ENOSPC with err */
struct pol_policy;
int cidrs_admit(struct pol_state *st, struct pol_policy *const *add, size_t nadd, char *err,
		size_t len);
void cidrs_release(struct pol_state *st);

/* ---- rule_ids.c: rule IDs: st->rules sorted by ID, an ID never reused */
const char *pol_section_name(bool ingress, bool deny);
uint32_t rule_hash(const struct pol_rule_rec *r);
const struct pol_rule_rec *rule_by_id(const struct pol_state *st, uint32_t id);
bool rule_insert(struct pol_state *st, const struct pol_rule_rec *r);
void rules_free(struct pol_state *st);
void pol_take_ids(struct pol_state *st, struct pol_policy *pol);
void pol_drop_ids(struct pol_state *st, struct pol_policy *pol);
void rules_prune(struct pol_state *st);
struct json_object *rule_json(const struct pol_rule_rec *r);

/* ---- program.c: an update: which endpoints to resolve again, resolving them,
 * writing the differences into the policy map; the map in place at start */
void pol_dp_write(struct pol_state *st, const struct pol_ep *ep, const struct pol_entry *e,
		  bool remove);
void pol_dp_enforce(struct pol_state *st, struct pol_ep *ep, bool ingress, bool egress);
void pol_mark_subjects(struct pol_state *st, const struct pol_policy *pol, const struct pol_rule *rule);
void pol_mark_dependents(struct pol_state *st);
void pol_recompute(struct pol_state *st);
void pol_adopt_map(struct pol_state *st);

/* ---- selector_cache.c: the selector cache and GET /v1/policy/selectors */
void sel_cache_ep(struct pol_state *st, const struct pol_ep *ep, int delta);
void sel_cache_rid(struct pol_state *st, const struct pol_rid *r, int delta);
void sel_register(struct pol_state *st, struct pol_selector *s, const char *ns);
void sel_unregister(struct pol_state *st, struct pol_selector *s);
void sel_cache_clear(struct pol_state *st);
void pol_get_selectors(struct fibril_request *req, struct fibril_response *resp, void *ud);

/* ---- endpoints.c: the local endpoints and what they are matched with */
const char *pol_labels_namespace(const char *labels, char *buf, size_t len);
const char *ep_namespace(const struct pol_ep *ep, char *buf, size_t len);
void ep_free(struct pol_ep *ep);
char *pol_match_labels_of(struct pol_state *st, const char *labels, const char *ns);
bool ep_refresh(struct pol_state *st, struct pol_ep *ep);
int ep_seen(const struct fibril_endpoint_event *ev, void *ud);
int pol_on_endpoint_event(const struct fibril_event *ev, void *ud);

/* ---- cluster_identities.c: the cluster's identities (st->rids, sorted by number) */
bool rid_refresh(struct pol_state *st, struct pol_rid *r);
void rids_free(struct pol_state *st);
int pol_on_identity_event(const struct fibril_event *ev, void *ud);

/* ---- state.c: the state file */
int state_open(struct pol_state *st, char *why, size_t len);
int state_save(struct pol_state *st, struct pol_policy **pols, size_t n, uint64_t revision);
void state_load(struct pol_state *st);

/* ---- repository.c: the repository: policies in and out, /v1/policy */
ssize_t pol_find(struct pol_state *st, bool from_k8s, bool knp, const char *name,
		 const char *ns);
void pol_remove_at(struct pol_state *st, size_t at);
void pol_admit(struct pol_state *st, struct pol_policy *pol);
void pol_retire(struct pol_state *st, struct pol_policy *pol);
void repo_changed(struct pol_state *st);
void pol_reply(struct fibril_response *resp, int status, struct json_object *o);
void pol_get_policy(struct fibril_request *req, struct fibril_response *resp, void *ud);
void pol_put_policy(struct fibril_request *req, struct fibril_response *resp, void *ud);
void pol_delete_one(struct fibril_request *req, struct fibril_response *resp, void *ud);
void pol_delete_all(struct fibril_request *req, struct fibril_response *resp, void *ud);

/* ---- trace.c: GET /v1/policy/trace */
void pol_get_trace(struct fibril_request *req, struct fibril_response *resp, void *ud);

/* ---- k8s.c: policies, namespaces and pods from the k8s module */
int pol_on_k8s_policy(const struct fibril_event *ev, void *ud);
int pol_on_k8s_scope(const struct fibril_event *ev, void *ud);
void k8s_start(struct pol_state *st);

#endif
