/* modules/endpoint/endpoint_int.h - what the files of the endpoint module
 * share: the endpoint and identity records, the module's state, and the
 * functions of each file (endpoint.c: lifecycle, table, events; labels.c:
 * label changes, k8s pods; identity.c: identities; spec.c: parsing and
 * validating endpoint JSON; store.c: the state journal; api.c, api_put.c:
 * the REST routes; restore.c: start-time restore; cluster*.c: cluster-wide
 * identities through the kvstore). Everything runs on the loop thread. */
#ifndef FIBRIL_ENDPOINT_INT_H
#define FIBRIL_ENDPOINT_INT_H

#include <limits.h>
#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json.h>

#include <fibril/fibril.h>

#include "cluster_record.h"

#define EP_MODULE "endpoint"
#define EP_ID_MAX 65535u
#define EP_IDENTITY_MAX 65535u      /* local identities: 256..65535 */
#define EP_IDENTITY_BLOCK 128u      /* identity numbers reserved on disk at a time */
#define EP_NS_LEN 64                /* pod namespace (DNS label) + NUL */
#define EP_POD_LEN 254              /* pod name (DNS subdomain) + NUL */
#define EP_LABEL_MAX 512            /* one label, bytes */
#define EP_LABELS_MAX 128           /* labels per endpoint */
#define EP_NETNS_MAX 1024           /* netns path, bytes with NUL */
#define EP_NAMESPACE_LABEL "k8s:io.kubernetes.pod.namespace="

/* One security identity: a numeric ID for a distinct label set. */
struct ep_identity {
	uint32_t id;
	uint32_t refs;     /* endpoints holding it */
	uint32_t hash;     /* of labels */
	bool reserved;
	char *labels;      /* sorted, '\n'-separated; never empty */
};

/* One endpoint: a CNI attachment on this node. */
struct ep_endpoint {
	uint16_t id;
	uint8_t state;              /* enum fibril_endpoint_state */
	bool datapath_pending;      /* the datapath did not take it yet: retried */
	bool k8s_pending;           /* its pod's labels could not be applied: retried */
	bool iface_gone;            /* its host veth went away: kept (not retried) until its DEL */
	int host_ifindex;
	struct ep_identity *identity;
	char host_ifname[IFNAMSIZ];
	char ifname[IFNAMSIZ];
	char container_id[FIBRIL_ENDPOINT_CONTAINER_ID_LEN];
	uint8_t mac[6], host_mac[6];
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;
	struct in6_addr ipv6;
	int64_t created;            /* unix seconds */
	char *netns;
	char *pod_namespace;        /* NULL when none */
	char *pod_name;             /* NULL when none */
};

/* An endpoint as a request or a state file describes it (validated text). */
struct ep_spec {
	char container_id[FIBRIL_ENDPOINT_CONTAINER_ID_LEN];
	char ifname[IFNAMSIZ];
	char host_ifname[IFNAMSIZ];
	char netns[EP_NETNS_MAX];
	int host_ifindex;
	uint8_t mac[6], host_mac[6];
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;
	struct in6_addr ipv6;
	char pod_namespace[EP_NS_LEN];
	char pod_name[EP_POD_LEN];
	char *labels;               /* sorted, '\n'-joined, malloc'd ("" when none) */
	/* state files only */
	uint32_t id, identity;
	int64_t created;
};

struct ep_manager {
	struct fibril_module *m;
	struct fibril_endpoint_ops ops;

	/* endpoints by local ID: eps[id], NULL when free */
	struct ep_endpoint **eps;
	size_t eps_cap;
	size_t count;

	/* identities: the reserved ones, and the local ones sorted by id */
	struct ep_identity reserved[FIBRIL_IDENTITY_WORLD_IPV6 + 1];
	struct ep_identity **idents;
	size_t nidents, idents_cap;
	uint32_t next_identity;     /* where the next search starts */
	uint32_t identity_resume;   /* on disk: the next run starts here */

	/* <state-dir>/endpoint */
	char dir[PATH_MAX];
	int dirfd;
	struct fibril_journal *journal; /* endpoints.journal (store.c) */
	char **stored;      /* replayed: stored[id] = its newest record (until restored) */
	size_t stored_bad;  /* replayed records naming no endpoint */
	bool store_live;    /* the table holds the whole state (compaction allowed) */

	/* the capabilities we use (NULL when absent) */
	const struct fibril_ipam_ops *ipam;
	void *ipam_ctx;
	const struct fibril_datapath_ops *dp;
	void *dp_ctx;
	const struct fibril_k8s_ops *k8s;
	void *k8s_ctx;

	struct fibril_timer *restore_timer;  /* retrying restore (IPAM not ready) */
	struct fibril_timer *retry_timer;    /* retrying datapath / k8s labels */
	struct ep_restore *restore;          /* restore in progress */
	bool started;

	/* cluster-wide identities (cluster*.c): cluster_state from init to fini,
	 * cluster the same while the kvstore allocates them (NULL: local) */
	struct ep_cluster *cluster_state;
	struct ep_cluster *cluster;
	/* called when a held identity's last reference goes (cluster mode) */
	void (*identity_released)(struct ep_manager *mg, uint32_t n, const char *labels);
	/* metrics.c */
	struct {
		struct fibril_series *s_regen[2]; /* [success] */
		struct fibril_series *s_regen_time;
		struct fibril_series *s_endpoints[4];
	} met;
};

/* ---- metrics.c ------------------------------------------------------------ */
enum ep_api_method { EP_API_PUT = 0, EP_API_PATCH, EP_API_DELETE };
int ep_metrics_register(struct ep_manager *mg);
double ep_metrics_now(void); /* monotonic seconds */
/* The latency of a changing API request that arrived at `started`. */
void ep_metrics_observe_api(enum ep_api_method method, double started);
void ep_metrics_forget(void); /* fini: the series are gone */

/* ---- endpoint.c --------------------------------------------------------- */
const char *ep_state_name(unsigned state);
void ep_owner(const struct ep_endpoint *ep, char *buf, size_t len); /* "CID/IFNAME" */
struct ep_endpoint *ep_find_attachment(struct ep_manager *mg, const char *cid, const char *ifname);
/* The lowest free local ID, or 0 when all are taken. */
uint16_t ep_free_id(struct ep_manager *mg);
int ep_table_insert(struct ep_manager *mg, struct ep_endpoint *ep);
void ep_table_remove(struct ep_manager *mg, struct ep_endpoint *ep);
void ep_free(struct ep_endpoint *ep);
/* The endpoint's datapath view. */
void ep_to_datapath(const struct ep_endpoint *ep, struct fibril_datapath_endpoint *out);
int ep_datapath_upsert(struct ep_manager *mg, const struct ep_endpoint *ep, char *err,
		       size_t errlen);
int ep_datapath_remove(struct ep_manager *mg, const struct ep_endpoint *ep, char *err,
		       size_t errlen);
void ep_publish(struct ep_manager *mg, const char *topic, const struct ep_endpoint *ep,
		uint32_t old_identity);
/* A growing text buffer (oom set when an allocation failed). */
struct ep_buf {
	char *p;
	size_t len, cap;
	bool oom;
};
void ep_buf_add(struct ep_buf *b, const char *s, size_t n);
/* The endpoint as JSON: the API's <endpoint>, or (for_file: no state) the state file. */
void ep_buf_endpoint(struct ep_buf *b, const struct ep_endpoint *ep, bool for_file);
/* Copies a validated spec's attachment fields into ep (not id/identity). */
int ep_apply_spec(struct ep_endpoint *ep, const struct ep_spec *spec);
/* Schedule the retry of pending datapath/k8s work. */
void ep_schedule_retry(struct ep_manager *mg);
/* Why ep's netns or host veth is gone (malloc'd), or NULL when both are
 * there (restore.c). */
char *ep_gone_reason(const struct ep_endpoint *ep);
void ep_ifname_close(void); /* the ioctl socket of ep_gone_reason */
/* After the datapath refused ep (why: its error): when its host veth or
 * netns is gone, that is recorded (iface_gone, logged once) and true: not
 * a failure to retry or to be unready for, its CNI DEL will come. */
bool ep_iface_gone(struct ep_manager *mg, struct ep_endpoint *ep, const char *why);
void ep_update_health(struct ep_manager *mg);

/* ---- labels.c ------------------------------------------------------------ */
/* New labels on an existing endpoint: identity, state file, datapath, event.
 * With rollback (the API), a failure leaves everything as it was; without
 * (k8s), a datapath failure leaves it regenerating and retried. */
int ep_set_labels(struct ep_manager *mg, struct ep_endpoint *ep, const char *labels,
		  bool rollback, char *err, size_t errlen);
/* Labels of the endpoint's pod from the k8s cache (malloc'd), or NULL. */
char *ep_pod_labels_cached(struct ep_manager *mg, const char *ns, const char *name);
/* The endpoint takes its pod's labels (k8s_pending set when they wait). */
void ep_apply_pod_labels(struct ep_manager *mg, struct ep_endpoint *ep, const char *labels);
/* Every endpoint whose pod is in the k8s cache takes the pod's labels. */
void ep_apply_cached_pods(struct ep_manager *mg);
/* The k8s.pods topic's handler: the pod's endpoints take its labels. */
int ep_on_pod_event(const struct fibril_event *ev, void *ud);

/* ---- identity.c ----------------------------------------------------------- */
void ep_identities_init(struct ep_manager *mg);
void ep_identities_free(struct ep_manager *mg);  /* everything (fini) */
void ep_identities_reset(struct ep_manager *mg); /* the local ones, reserved refs (stop) */
/* Cilium's default label filter: does this "source:key[=value]" label (LEN
 * bytes) count for the identity? Those that do not are left out of an
 * endpoint's labels (ep_labels_from_json). */
bool ep_label_counts_for_identity(const char *label, size_t len);
/* Take a reference on the identity of labels (a reserved one, an existing
 * one, or a new number); -ENOSPC when no number is free, -EIO when the
 * number block could not be recorded. */
int ep_identity_acquire(struct ep_manager *mg, const char *labels, struct ep_identity **out);
/* In cluster mode, labels this node does not hold yet answer -EINPROGRESS:
 * the caller waits for ep_cluster_allocate, then acquires again. */
/* A held identity of number n for labels, with no reference yet (cluster.c). */
int ep_identity_insert(struct ep_manager *mg, uint32_t n, const char *labels,
		       struct ep_identity **out);
/* Restore: the label set gets `wanted` when it is free and in range. */
int ep_identity_restore(struct ep_manager *mg, const char *labels, uint32_t wanted,
			struct ep_identity **out);
void ep_identity_release(struct ep_manager *mg, struct ep_identity *id);
struct ep_identity *ep_identity_find(struct ep_manager *mg, uint32_t id);
struct json_object *ep_identity_to_json(const struct ep_manager *mg, const struct ep_identity *id);
/* Who numbered identity n: "reserved", "cidr", "cluster:kvstore", "cluster:crd" or "local"
 * (the SDK's identity_scope). */
const char *ep_identity_scope(const struct ep_manager *mg, uint32_t n);
/* Read / write the resume point (<dir>/identities). */
void ep_identity_load_resume(struct ep_manager *mg);

/* ---- cluster*.c: cluster-wide identities --------------------------------- */
extern const struct fibril_config_key ep_config_keys[]; /* cluster_setup.c */
/* err 0: the identity of the labels is now held here (acquire it again). */
typedef void (*ep_cluster_done_fn)(struct ep_manager *mg, void *ud, int err);
/* cluster_setup.c */
int ep_cluster_init(struct ep_manager *mg);   /* init: metrics, topic */
int ep_cluster_start(struct ep_manager *mg);  /* start: by [endpoint] identity-allocation */
void ep_cluster_stop(struct ep_manager *mg);
void ep_cluster_free(struct ep_manager *mg);
/* cluster.c: get the labels an identity through the kvstore; fn runs once (bounded by
 * identity-timeout), on the loop, never from inside this call. */
int ep_cluster_allocate(struct ep_manager *mg, const char *labels, ep_cluster_done_fn fn, void *ud);
/* cluster_refs.c: the last local holder of identity n went: delete this
 * node's reference. */
void ep_cluster_unref(struct ep_manager *mg, uint32_t n, const char *labels);
/* cluster_ids.c: the labels of cluster identity n as its id/<n> record says
 * (any node's), or NULL (not known, or identities are local). */
const char *ep_cluster_labels(struct ep_manager *mg, uint32_t n);
/* endpoint.c: apply pending label changes now (an identity arrived) */
void ep_retry_pending(struct ep_manager *mg);

/* ---- what the cluster*.c files share ---------------------------------------- */
/* cluster.c: the allocations; cluster_refs.c: this node's references;
 * cluster_ids.c: the id/ prefix; cluster_gc.c: the GC; cluster_setup.c:
 * config, lifecycle, the lease. Keys and records: cluster_record.h. */
#define CL_WHY 256

struct cl_alloc;   /* an allocation in flight (cluster.c) */
struct cl_known;   /* an identity as its id/<n> says (cluster_ids.c) */
struct cl_gc_cand; /* an id/<n> seen unreferenced (cluster_gc.c) */
struct cl_crd_gc;  /* CRD mode's Lease and GC (cluster_crd_gc.c) */

struct ep_cluster {
	struct ep_manager *mg;
	const struct fibril_kvstore_ops *kv;
	void *kvctx;
	/* identity-allocation = crd (cluster_crd.c): CiliumIdentity objects
	 * through the k8s capability's writes instead of the kvstore */
	bool crd;
	const struct fibril_k8s_ops *k8s;
	void *k8sctx;
	/* ep_cluster_labels' answers in CRD mode, valid until the loop runs
	 * again (the SDK's promise): freed by a zero-delay timer */
	char **crd_answers;
	size_t ncrd_answers;
	struct fibril_timer *crd_answers_timer;
	struct fibril_subscription *crd_sub; /* k8s.ciliumidentities: identity events */
	struct cl_crd_gc *crd_gc; /* the GC leader's election and sweeps */
	char node[CL_NODE_MAX];
	int64_t ttl_s;
	uint64_t timeout_ms, gc_interval_ms, gc_grace_ms;
	int64_t lease;
	bool lease_pending, running;
	uint8_t used[(EP_IDENTITY_MAX + 1) / 8]; /* id/<n> keys as last seen */
	struct cl_known *known; /* every id/<n> -> labels, sorted by number */
	size_t nknown, known_cap;
	struct fibril_kv_watch *watch;
	bool reading;
	struct cl_alloc *allocs;
	unsigned deletes_inflight;
	struct fibril_timer *lease_retry, *gc_timer;
	struct cl_gc_cand *cands;
	size_t ncands;
	bool gc_running;
	struct fibril_subscription *sub;
	struct {
		struct fibril_metric *ops;  /* counter by result */
		struct fibril_metric *latency;
	} m;
	struct {
		uint64_t allocated, reused, races_lost, timeouts, errors, released, ensured,
			conflicts, gc_deleted, bad_records;
	} stats;
};

/* cluster.c */
void cl_count(struct ep_cluster *c, const char *result); /* the ops counter */
void cl_used_set(struct ep_cluster *c, uint32_t n, bool on); /* id/<n> in use */
void cl_id_key(char *buf, size_t len, uint32_t n);        /* id/<n> */
/* value/<enc>/ (node NULL) or value/<enc>/<node>, malloc'd */
char *cl_ref_key(const char *enc, const char *node);
void cl_shown_labels(const char *labels, char *buf, size_t len); /* a,b,c */
void cl_kick_all(struct ep_cluster *c); /* the allocations waiting go on */
void cl_allocs_cancel(struct ep_cluster *c); /* stop: every waiter hears -ECANCELED */
/* cluster_refs.c: every identity held here written again (a new lease) */
void cl_ensure_all(struct ep_cluster *c);
/* cluster_ids.c */
void cl_read_ids(struct ep_cluster *c); /* read id/ whole, then watch it */
void cl_known_clear(struct ep_cluster *c);
/* cluster_gc.c: the GC timer's tick */
void cl_on_gc_tick(struct fibril_timer *t, void *ud);
/* cluster_crd.c: CRD mode's CiliumIdentity objects */
int cl_crd_start(struct ep_cluster *c);          /* from ep_cluster_start */
uint32_t cl_crd_first(const char *labels);        /* where the labels' probing starts */
char *cl_crd_identity_body(uint32_t n, const char *labels); /* the object to create */
/* 1: the CiliumIdentity (JSON) holds exactly these labels, 0: others, -1: unreadable */
int cl_crd_labels_match(const char *json, const char *labels);
const char *cl_crd_labels(struct ep_cluster *c, uint32_t n); /* any node's identity n */
void cl_crd_answers_free(struct ep_cluster *c);
/* cluster_crd_gc.c: the GC without an operator (a Lease elects the agent
 * that collects), and this node's stale CiliumEndpoints after a restart */
int cl_crd_gc_start(struct ep_cluster *c);
void cl_crd_gc_stop(struct ep_cluster *c);
void cl_crd_gc_free(struct ep_cluster *c);
/* restore.c: every endpoint of the last run is back (or removed) */
void cl_crd_restored(struct ep_manager *mg);
/* cluster_ids.c: identity n of any node came (labels) or went (NULL): on the bus */
void cl_identity_event(struct ep_cluster *c, uint32_t n, const char *labels);

/* ---- spec.c --------------------------------------------------------------------- */
/* Fill spec from a PUT body or a state file; on error a one-line reason
 * naming the field in why, and -EINVAL. */
int ep_spec_parse(struct json_object *o, struct ep_spec *spec, bool state_file, char *why,
		  size_t len);
void ep_spec_clear(struct ep_spec *spec);
/* Labels from a JSON array (sorted, deduplicated, '\n'-joined, malloc'd),
 * plus the namespace label when ns is set. -EINVAL with why. */
int ep_labels_from_json(struct json_object *arr, const char *ns, char **out, char *why,
			size_t len);
/* Sort, deduplicate and join `n` label texts (malloc'd). */
char *ep_labels_join(char **labels, size_t n);
bool ep_valid_container_id(const char *s);
bool ep_valid_ifname(const char *s);
/* JSON array of the '\n'-separated labels. */
struct json_object *ep_labels_to_json(const char *labels);

/* ---- store.c ----------------------------------------------------------------- */
int ep_store_open(struct ep_manager *mg, char *why, size_t len);
void ep_store_close(struct ep_manager *mg);
int ep_store_write(struct ep_manager *mg, const struct ep_endpoint *ep);
int ep_store_remove(struct ep_manager *mg, uint16_t id);
/* A record of its own text (a migrated state file). */
int ep_store_write_text(struct ep_manager *mg, uint16_t id, const char *text, size_t len);
/* done(ud, status) on the loop once every record so far is on disk
 * (NULL: just start the flush). */
int ep_store_sync(struct ep_manager *mg, void (*done)(void *ud, int status), void *ud);
/* The old "<id>.json" files of these IDs go once their records are durable. */
int ep_store_migrated(struct ep_manager *mg, const uint16_t *ids, size_t n);
void ep_store_free_stored(struct ep_manager *mg);

/* ---- api.c, api_put.c --------------------------------------------------------- */
int ep_api_register(struct ep_manager *mg);
/* An endpoint ref as the routes take it: an ID, or container-id:CID[:IFNAME]. */
struct ep_ref {
	unsigned id;                       /* 0 when by container */
	char cid[FIBRIL_ENDPOINT_CONTAINER_ID_LEN];
	char ifname[IFNAMSIZ];             /* "" when not given */
};
/* false after answering 400 */
bool ep_api_parse_ref(const char *text, struct ep_ref *ref, struct fibril_response *resp);
/* Text safe to show in an error line (at most 80 bytes). */
const char *ep_api_shown(const char *s, char *buf, size_t len);
/* The JSON object of a body, or NULL after answering 400 (500: no memory). */
struct json_object *ep_api_parse_body(const char *body, size_t len, struct fibril_response *resp);
void ep_api_reply_endpoint(struct fibril_response *resp, int status, const struct ep_endpoint *ep);
/* Answer the deferred response once the endpoint journal (and IPAM's, when
 * it can say) has flushed what the handler wrote; the request's latency (it
 * arrived at `started`) is observed when the answer goes. */
void ep_api_answer_when_durable(struct ep_manager *mg, struct fibril_response *deferred,
				enum ep_api_method method, double started);
/* api_put.c: PUT /v1/endpoint/{ref} */
void ep_api_put(struct fibril_request *req, struct fibril_response *resp, void *ud);

/* ---- restore.c ------------------------------------------------------------- */
/* 0 done, FIBRIL_START_PENDING (finishes with fibril_module_start_done), or
 * a negative errno. */
int ep_restore_start(struct ep_manager *mg);
void ep_restore_abort(struct ep_manager *mg);

#endif
