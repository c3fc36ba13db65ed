/* modules/lb/lb_mod.h - what the lb module's files share beyond the model
 * (lb_int.h): the module state (lb.c), its maps (map_specs.c), programs and
 * cgroup hooks (hooks.c), routes (api.c), and the operations every source
 * of services goes through, so that the metrics and the timing are counted
 * in one place. */
#ifndef FIBRIL_LB_MOD_H
#define FIBRIL_LB_MOD_H

#include "lb_int.h"

struct fibril_lb; /* the skeleton (fibril_lb.skel.h) */
struct fibril_map;
struct fibril_metric;
struct fibril_module;
struct fibril_series;
struct lb_k8s;
struct lb_origin;
struct lb_tc;

/* the module's maps: the index of each in struct lb's maps[] */
enum lb_map_index {
	LB_MI_SERVICES, LB_MI_BACKENDS, LB_MI_REVNAT, LB_MI_MAGLEV, LB_MI_AFFINITY, LB_MI_AFF_MATCH,
	LB_MI_SK_REVNAT, LB_MI_METRICS, LB_MI_CT, LB_MI_DEVICES, LB_MI_SRC_RANGE, LB_MI_FRAG,
	LB_MI_NODE_ADDRS, LB_MI_CT_SRC, LB_MI_COUNT
};

/* the module's state */
struct lb {
	struct fibril_module *m;
	struct lb_table t;
	bool table_ready;
	struct fibril_map *maps[LB_MI_COUNT];
	struct fibril_lb *skel;
	uint32_t maglev_m;
	char cgroup[4096];
	int hooks_attached;
	size_t restored, restore_skipped, restored_known, restored_k8s;
	struct lb_k8s *k8s;
	struct lb_tc *tc;
	struct lb_origin *origin;
	/* metrics */
	struct fibril_metric *m_services, *m_backends, *m_ops, *m_dp, *m_prog_secs, *m_refused;
	struct fibril_series *s_services, *s_backends, *s_prog;
};

/* lb.c: the operations */
int lb_upsert(struct lb *lb, struct lb_svc **spec, uint16_t *id, char *err, size_t len);
int lb_delete(struct lb *lb, uint16_t id, char *err, size_t len);
struct lb_table *lb_table_of(struct lb *lb);
struct fibril_module *lb_module_of(struct lb *lb);
/* fibril_lb_operations_total{op, result of rc} */
void lb_count_op(struct lb *lb, const char *op, int rc);
/* The node's own addresses: every device's and [lb] node-addresses (list,
 * comma or space separated). 0 and *out (free it), or -ENOMEM. */
int lb_node_addrs_list(const char *list, struct lb_addr **out, size_t *n);
bool lb_addr_in(const struct lb_addr *set, size_t n, const struct lb_addr *a);
/* Why a backend address is refused (lb_backend_addr_refusal, or
 * "node-address" when it is one of the node's own, addrs[0..n)), or NULL. */
const char *lb_backend_refusal(const struct lb_addr *a, const struct lb_addr *addrs, size_t n);
/* fibril_lb_backends_refused_total{reason} */
void lb_count_refused(struct lb *lb, const char *reason);

/* map_specs.c: every map opened through the registry (sized by [lb]
 * config), with its formatter; lb->t.maps set. 0 or a negative errno with err. */
int lb_open_maps(struct lb *lb, char *err, size_t len);
/* the lb_metrics counters' names, by index */
extern const char *const lb_metric_names[LB_M_COUNT];

/* hooks.c: the skeleton loaded with the registry's maps (lb->skel) */
int lb_load_programs(struct lb *lb, char *err, size_t len);
/* Attach (or re-adopt) every cgroup hook; enable false removes the links. */
int lb_attach_hooks(struct lb *lb, bool enable, char *err, size_t len);

/* api.c: the /v1/service routes (init) */
int lb_api_register(struct lb *lb);
/* hostport.c: the /v1/hostport routes and the endpoint.deleted subscription (init) */
int lb_hostport_init(struct lb *lb);

/* origin.c: each frontend's origin and name, kept through the SDK journal */
int lb_origin_open(struct fibril_module *m, struct lb_origin **out, char *err, size_t len);
/* Gives the restored services of t the origin and name their records say;
 * returns how many had one (*kubernetes of them from k8s). Compacts. */
size_t lb_origin_apply(struct lb_origin *o, const struct lb_table *t, size_t *kubernetes);
void lb_origin_set(struct lb_origin *o, const struct lb_svc *s);
void lb_origin_deleted(struct lb_origin *o, const struct lb_svc *s);
void lb_origin_flush(struct lb_origin *o); /* group commit of what was appended */
void lb_origin_close(struct lb_origin *o);

/* api.c / api_batch.c: the gauges of services and backends set again;
 * PUT /v1/service with a JSON array (all or nothing) */
void lb_api_update_gauges(struct lb *lb);
struct fibril_response;
void lb_api_put_batch(struct lb *lb, const char *body, size_t len, struct fibril_response *resp);

/* k8s.c: Services and EndpointSlices from the k8s module's informers */
int lb_k8s_init(struct lb *lb, struct lb_k8s **out);    /* init: bus subscriptions */
int lb_k8s_start(struct lb_k8s *k, const char *node_addrs); /* start: watch, if k8s is there */
void lb_k8s_stop(struct lb_k8s *k);
void lb_k8s_free(struct lb_k8s *k);
uint64_t lb_k8s_skipped(const struct lb_k8s *k);
/* EndpointSlices held: their Service is not known yet (applied when it arrives) */
size_t lb_k8s_held_slices(const struct lb_k8s *k);
/* k8s_store.c: an index of k8s.c's Services by "namespace/name" (entry
 * index i + 1 per slot; key_at(ud, i) gives entry i's key) */
struct lb_k8s_index {
	size_t *slot;
	size_t mask, n;
};
typedef const char *(*lb_k8s_key_at_fn)(const void *ud, size_t i);
size_t lb_k8s_index_get(const struct lb_k8s_index *x, const char *key, lb_k8s_key_at_fn key_at,
			const void *ud); /* SIZE_MAX: none */
int lb_k8s_index_add(struct lb_k8s_index *x, const char *key, size_t i, lb_k8s_key_at_fn key_at,
		     const void *ud);
void lb_k8s_index_free(struct lb_k8s_index *x);
/* The node's addresses (lb_node_addrs_list of [lb] node-addresses) read
 * again when c is older than a second: a burst of EndpointSlices does not
 * dump every link and address once per slice. *out points into c. */
struct lb_k8s_addr_cache {
	struct lb_addr *v;
	size_t n;
	double read_at;
};
int lb_k8s_node_addrs_cached(struct fibril_module *m, struct lb_k8s_addr_cache *c,
			     struct lb_addr **out, size_t *n);
/* k8s_nodeport.c: the node's addresses for NodePorts when [lb]
 * node-addresses is unset (their number, the first max into out); a
 * Service's IP families (spec.ipFamilies, else its clusterIPs', else both) */
size_t lb_k8s_default_node_addrs(struct fibril_module *m, struct lb_addr *out, size_t max);
struct json_object;
bool lb_k8s_svc_valid(struct json_object *spec, char *why, size_t len);
void lb_k8s_svc_families(struct json_object *spec, struct json_object *cips, bool *v4, bool *v6);
/* Has the first list of Services and EndpointSlices been applied (and the
 * restored frontends Kubernetes no longer has been removed)? */
bool lb_k8s_synced(const struct lb_k8s *k);
uint64_t lb_k8s_stale_removed(const struct lb_k8s *k);
/* Objects' texts parsed so far (each distinct text once); the bytes lb
 * keeps for the Kubernetes objects (projections, records, indexes) */
uint64_t lb_k8s_parsed(const struct lb_k8s *k);
/* of those, read in place (k8s_scan.c), not through json-c */
uint64_t lb_k8s_scanned(const struct lb_k8s *k);
size_t lb_k8s_bytes(const struct lb_k8s *k);

#endif
