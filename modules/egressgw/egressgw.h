/* modules/egressgw/egressgw.h - the egress gateway module's shared types:
 * a policy as the API takes it (egw_policy.c parses and prints it), the
 * identities and nodes the module follows, and the module's state
 * (egressgw.c: lifecycle, events, the table it computes; egw_api.c: the
 * /v1/egress-gateway routes). */
#ifndef FIBRIL_MODULES_EGRESSGW_H
#define FIBRIL_MODULES_EGRESSGW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include <fibril/datapath.h>
#include <fibril/module.h>
#include <fibril/nodes.h>

#define EGW_NAME_MAX 253     /* a Kubernetes object name (DNS subdomain) */
#define EGW_MAX_POLICIES 256
#define EGW_MAX_SELECTORS 8
#define EGW_MAX_LABELS 8
#define EGW_LABEL_KEY_MAX 127
#define EGW_LABEL_VALUE_MAX 63
#define EGW_MAX_CIDRS 32
#define EGW_MAX_GATEWAYS 8
#define EGW_ERR_LEN 256
#define EGW_BODY_MAX (64u << 10)

struct egw_cidr {
	struct in_addr addr; /* network order, host bits zero */
	uint8_t len;
};

struct egw_selector {
	char ns[64];          /* "" : any namespace */
	size_t n_labels;
	char key[EGW_MAX_LABELS][EGW_LABEL_KEY_MAX + 1];
	char value[EGW_MAX_LABELS][EGW_LABEL_VALUE_MAX + 1];
};

struct egw_gateway {
	char node[FIBRIL_NODE_NAME_LEN];
	struct in_addr egress_ip;
};

struct egw_policy {
	char name[EGW_NAME_MAX + 1];
	size_t n_sel, n_dst, n_excl, n_gw;
	struct egw_selector sel[EGW_MAX_SELECTORS];
	struct egw_cidr dst[EGW_MAX_CIDRS];
	struct egw_cidr excl[EGW_MAX_CIDRS];
	struct egw_gateway gw[EGW_MAX_GATEWAYS];
};

/* ---- egw_policy.c ---- */
/* A policy name: 1..253 of [a-z0-9.-], starting and ending alphanumeric. */
bool egw_name_valid(const char *name);
/* Parse a policy's JSON text (the PUT body or a saved one) into *p (its
 * name set by the caller). 0, or -EINVAL with a one-line reason naming
 * the field in why. */
int egw_policy_parse(const char *text, size_t len, struct egw_policy *p, char *why, size_t wl);
/* The policy as JSON (the shape egw_policy_parse takes); a json-c object. */
struct json_object *egw_policy_json(const struct egw_policy *p);
/* Whether an identity's labels ('\n'-separated, "source:key=value")
 * are selected by the policy. */
bool egw_policy_selects(const struct egw_policy *p, const char *labels);

/* ---- the module (egressgw.c) ---- */
struct egw_identity {
	uint32_t id;
	char *labels;
};

enum egw_reach { EGW_REACH_UNKNOWN = 0, EGW_REACH_OK = 1, EGW_REACH_FAILED = 2 };

struct egw_node {
	char name[FIBRIL_NODE_NAME_LEN];
	bool known;            /* in the nodes capability's view */
	bool has_ip;
	struct in_addr ip;     /* the node IP (its tunnel endpoint when it has one) */
	uint8_t reach;         /* enum egw_reach, from health.node */
	uint64_t since_ms;     /* when known / reach last changed (monotonic) */
};

struct egw {
	struct fibril_module *m;
	const struct fibril_datapath_ops *dp;
	void *dp_ctx;
	const struct fibril_nodes_ops *nodes;
	void *nodes_ctx;
	char self[FIBRIL_NODE_NAME_LEN];
	int state_fd;
	struct egw_policy *pol[EGW_MAX_POLICIES]; /* sorted by name */
	size_t n_pol;
	struct egw_identity *ids;
	size_t n_ids, cap_ids;
	struct egw_node *nodes_v;
	size_t n_nodes, cap_nodes;
	bool sync_queued, started;
	/* entries a previous run left in dp_egress, kept for identities not
	 * (yet) announced since the start: a restart changes nothing */
	struct fibril_datapath_egress_entry *adopted;
	size_t n_adopted, cap_adopted;
	/* the table as last written */
	struct fibril_datapath_egress_entry *table;
	size_t n_table, n_entries;
	uint64_t syncs, sync_errors, moves;
	uint64_t last_sync_ms;
	char last_error[EGW_ERR_LEN];
};

/* Recompute the table and write it (now). */
int egw_sync(struct egw *g, char *err, size_t errlen);
/* Queue a sync on the loop (coalesced). */
void egw_sync_soon(struct egw *g);
/* The live gateway of policy p for identity id (NULL: none alive). */
const struct egw_gateway *egw_choose(struct egw *g, const struct egw_policy *p, uint32_t id);
bool egw_gateway_alive(struct egw *g, const char *node);
struct egw_node *egw_node_find(struct egw *g, const char *name);
/* Forget the adopted entries (a policy changed through the API). */
void egw_adopted_clear(struct egw *g);
/* Save every policy (<state-dir>/egressgw/policies.json); 0 or -errno. */
int egw_save(struct egw *g);
uint64_t egw_now_ms(void);

/* ---- egw_api.c ---- */
int egw_api_register(struct egw *g);

#endif
