/* modules/k8s/k8s_mod.h - the k8s module's state: the connection, requests
 * over the modules' HTTP client on the loop (http.c,
 * modules/common/http_client.c), informers with their caches (informer.c) and
 * the module glue: config, service table, barrier, node annotations, API
 * routes and health (k8s.c), one-shot writes (write.c). Everything runs on the loop thread. */
#ifndef FIBRIL_K8S_MOD_H
#define FIBRIL_K8S_MOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <json-c/json.h>

#include <fibril/fibril.h>
#include <fibril/k8s.h>

#include "http_client.h"
#include "k8s_int.h"

/* the module's version, and the User-Agent of its requests to the API server */
#define K8S_MODULE_VERSION "0.1.0"
#define K8S_USER_AGENT "fibril-agent/k8s-module-" K8S_MODULE_VERSION

#define K8S_MAX_RESPONSE (256u << 20)
#define K8S_BACKOFF_MIN_MS 800u
#define K8S_BACKOFF_MAX_MS 30000u
#define K8S_RELIST_RESET_MS 120000u
#define K8S_NRES 14

struct k8s;
struct k8s_req;

typedef void (*k8s_done_fn)(struct k8s_req *r, int err);
typedef void (*k8s_data_fn)(struct k8s_req *r);

struct k8s_req {
	struct k8s *k;
	bool linked;               /* sent, not finished */
	struct mod_http_req *http; /* the transfer (NULL: the module is not running) */
	char *buf;
	size_t len, cap;
	char errbuf[MOD_HTTP_ERROR_SIZE + 256];
	char what[128]; /* "GET /api/v1/pods" */
	long status;
	bool stream, has_data;
	k8s_done_fn done;
	k8s_data_fn data; /* a stream's new bytes (answers 200 only) */
	k8s_data_fn head; /* the answer's headers are in (q->status), or NULL */
	void *ud;
};

/* One cached object. */
struct k8s_obj {
	struct k8s_obj *next;
	char *key; /* namespace/name or name */
	char *ns, *name, *rv, *json;
	bool seen; /* relist: present in the new list */
};

struct k8s_cache {
	struct k8s_obj **b;
	size_t nb, n;
};

struct k8s_resdef {
	const char *name;
	const char *path; /* collection path */
	int selector;     /* 0 none, 1 metadata.name=NODE, 2 spec.nodeName=NODE,
			   * 3 labelSelector=fibril.io/podcidr-claim */
};

enum k8s_phase { PH_IDLE, PH_LISTING, PH_WATCHING, PH_BACKOFF, PH_UNAVAILABLE };
/* a resource the API server does not serve (404 on the list: a CRD not
 * installed) is listed again this often */
#define K8S_UNAVAILABLE_RETRY_MS 60000u

struct k8s_res {
	struct k8s *k;
	const struct k8s_resdef *def;
	bool wanted, started, synced;
	bool unavailable; /* the last list was a 404: not served, empty */
	enum k8s_phase phase;
	struct k8s_cache cache;
	struct k8s_cache next; /* the list being read */
	char *rv;              /* last seen resourceVersion */
	char *cont;            /* list continue token */
	struct k8s_req *req;
	struct fibril_timer *timer;
	unsigned failures;
	uint64_t retry_ms;
	uint64_t watch_started_ms;
	char error[512];
	/* counters */
	uint64_t lists, relists, events_in, bookmarks, watches;
	uint64_t watch_restarts; /* watches started again without a new list */
	bool watch_after_list;   /* the next watch follows a list */
	uint64_t pub[3];   /* published added/updated/deleted */
	uint64_t deliv[3]; /* delivered to our own subscription */
	time_t last_event;
	char topic[64];
	struct k8s_watch_state ws; /* k8s_int.h: stalls, bad lines, relist backoff */
};

struct k8s_waiter;
struct k8s_annot;

struct k8s {
	struct fibril_module *m;
	struct fibril_k8s_ops ops;
	struct k8s_conn conn;
	char *file_token;
	struct timespec token_mtime;
	char node[256];
	uint64_t sync_timeout_ms;
	int64_t page_size;
	struct mod_http_client *http; /* the HTTP client on the loop (modules/common) */
	char *path_prefix;            /* the server URL's path, before every request's */
	bool running, start_pending;
	struct fibril_timer *start_timer;
	struct k8s_res res[K8S_NRES];
	struct k8s_waiter *waiters;
	struct k8s_annot *annots;
	uint32_t rng;
	uint64_t watch_idle_ms; /* [k8s] watch-idle-timeout */
};

/* metrics.c: events by kind and type, relists, watch restarts (mirrored
 * from the counters above at each scrape) */
int k8s_metrics_register(struct k8s *k);

/* http.c */
/* The client to the server of k->conn. 0, or a negative errno and why. */
int k8s_http_open(struct k8s *k, char *why, size_t len);
void k8s_http_close(struct k8s *k);
/* body (malloc'ed or NULL) is consumed. */
struct k8s_req *k8s_req_new(struct k8s *k, const char *method, const char *path, char *body,
			    const char *content_type, k8s_done_fn done, void *ud);
/* Queue (0) or free and return an errno (done never runs). */
int k8s_req_send(struct k8s_req *r, bool stream, uint64_t timeout_ms);
void k8s_req_abort(struct k8s_req *r);
void k8s_req_consume(struct k8s_req *r, size_t n);

/* informer.c */
extern const struct k8s_resdef k8s_resdefs[K8S_NRES];
struct k8s_res *k8s_res_find(struct k8s *k, const char *name);
void k8s_res_start(struct k8s_res *r);
void k8s_res_stop(struct k8s_res *r);
void k8s_res_free(struct k8s_res *r);
struct k8s_obj *k8s_cache_get(struct k8s_cache *c, const char *key);
void k8s_cache_replace(struct k8s_cache *c, struct k8s_obj *o);
/* list_scan.c: an object in one allocation (free() frees it); a LIST page
 * read in place into next (false: read it with json-c) */
struct k8s_obj *k8s_obj_new(const char *ns, size_t nsl, const char *name, size_t nl,
			    const char *rv, size_t rvl, const char *json, size_t jl);
bool k8s_list_page_scan(struct k8s_cache *next, const char *text, size_t len, char **cont,
			char **rv);
uint64_t k8s_jitter(struct k8s *k, uint64_t ms);
bool k8s_status_too_large(struct json_object *status);
const char *k8s_bad_line_name(int kind);

/* write.c: the `request` op (interface version 2) */
int k8s_op_request(void *ctx, const char *method, const char *resource, const char *namespace_,
		   const char *name, const char *body, fibril_k8s_reply_fn cb, void *ud);

/* k8s.c */
void k8s_synced_changed(struct k8s *k);
void k8s_health_update(struct k8s_res *r);

#endif
