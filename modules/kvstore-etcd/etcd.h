/* modules/kvstore-etcd/etcd.h - internals shared by the files of the
 * kvstore-etcd module: the module state, requests to etcd's JSON gateway
 * (http.c, over the modules' HTTP/1.1 client on the loop:
 * modules/common/http_client.c), the base64/JSON codec (codec.c),
 * the key-value calls (kv.c), watches (watch.c), leases (lease.c) and the
 * connection state machine (kvstore_etcd.c). Everything runs on the loop
 * thread. */
#ifndef KVSTORE_ETCD_H
#define KVSTORE_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <json-c/json.h>

#include <fibril/fibril.h>

#include "http_client.h"

#define ETCD_BACKOFF_MIN_MS 200u
#define ETCD_BACKOFF_MAX_MS 10000u
#define ETCD_MAX_RESPONSE (64u << 20) /* bytes buffered for one answer */
#define ETCD_MAX_IDLE_CONNS 8u        /* keep-alive connections kept open */
#define ETCD_ERROR_SIZE 256u

struct etcd_req;
struct etcd_lease;

struct etcd {
	struct fibril_module *m;
	struct fibril_kvstore_ops ops;
	/* configuration, read in start */
	char **endpoints;
	size_t nendpoints;
	size_t cur; /* the endpoint requests go to first */
	char *prefix;
	size_t prefix_len;
	char *ca_file, *cert_file, *key_file;
	uint64_t dial_timeout_ms, request_timeout_ms, lease_ttl_ms, health_interval_ms;
	/* the HTTP client on the loop (http.c, modules/common/http_client.c) */
	struct mod_http_client *http;
	/* connection state */
	bool running;       /* between start and stop: requests may be sent */
	bool start_pending; /* start waits for the first answer */
	bool connected;
	char error[ETCD_ERROR_SIZE + 64];
	time_t down_since;
	uint64_t backoff_ms;
	struct fibril_timer *probe_timer;
	struct etcd_req *probe;
	struct fibril_timer *health_timer;
	uint32_t rng;
	/* leases kept alive and watches */
	struct etcd_lease *leases;
	size_t nleases;
	struct fibril_kv_watch *watches;
	size_t nwatches;
};

/* ---- requests (http.c) ---------------------------------------------------- */

/* Runs exactly once per request: err 0 with the parsed answer, a negative
 * errno (resp may then hold etcd's error document, or be NULL), or
 * -ECANCELED when the module stops. r->errbuf says what went wrong. */
typedef void (*etcd_done_fn)(struct etcd_req *r, int err, struct json_object *resp);
/* Streams: new body bytes arrived in r->buf (called last in a loop callback). */
typedef void (*etcd_data_fn)(struct etcd_req *r);
/* A caller's callback, stored untyped and cast back by the done function. */
typedef void (*etcd_user_fn)(void);

struct etcd_req {
	struct etcd *e;
	const char *path; /* "/v3/kv/range" */
	char *body;
	size_t body_len;
	char *buf; /* the answer's body so far (decoded), NUL-terminated */
	size_t len, cap;
	char errbuf[ETCD_ERROR_SIZE];
	size_t endpoint; /* the one that answered, or was tried last */
	struct mod_http_req *http; /* the transfer, while it runs */
	bool stream;   /* watch: no total timeout, data delivered as it comes */
	bool raw;      /* a 200 answer goes to done unparsed (resp NULL, r->buf) */
	uint64_t t0_us; /* when it was made (metrics.c) */
	etcd_done_fn done;
	etcd_data_fn data;
	void *ud;
	etcd_user_fn user_cb;
	void *user_ud;
	int64_t id; /* lease requests: the lease */
};

/* The client: the endpoints parsed, TLS set up when one is https. 0, or a
 * negative errno with the module's error set. */
int etcd_http_open(struct etcd *e);
/* Cancel every request (callbacks get -ECANCELED), close connections. */
void etcd_http_close(struct etcd *e);
/* A request for path with a JSON body (consumed). NULL on ENOMEM. */
struct etcd_req *etcd_req_new(struct etcd *e, const char *path, struct json_object *body,
			      etcd_done_fn done, void *ud);
/* Queue it (0) or free it and return a negative errno (done never runs). */
int etcd_req_send(struct etcd_req *r);
/* Drop a request in flight without running its callback. */
void etcd_req_abort(struct etcd_req *r);

/* ---- connection state (kvstore_etcd.c) -------------------------------------- */

void etcd_conn_up(struct etcd *e, size_t endpoint);
void etcd_conn_down(struct etcd *e, const char *why);
/* A request broke after reaching etcd: check the connection now. */
void etcd_conn_suspect(struct etcd *e);
uint64_t etcd_jitter(struct etcd *e, uint64_t ms);
uint64_t etcd_backoff_next(uint64_t ms);

/* ---- codec (codec.c) ------------------------------------------------------- */

/* prefix + key, and the end of the range of every key under prefix + key. */
char *etcd_full_key(const struct etcd *e, const char *key, size_t *len);
char *etcd_range_end(const char *key, size_t len, size_t *end_len);
/* Add "name": base64(data) to obj. */
int etcd_json_add_bytes(struct json_object *obj, const char *name, const void *data, size_t len);
/* Add the key (and range_end when prefix) of a relative key. */
int etcd_json_add_key(const struct etcd *e, struct json_object *obj, const char *key, bool prefix);
int64_t etcd_json_int(struct json_object *obj, const char *name);
int64_t etcd_header_revision(struct json_object *resp);
/* The revision after rev, saturating: a server's INT64_MAX must not overflow. */
static inline int64_t etcd_rev_next(int64_t rev)
{
	return rev < INT64_MAX ? rev + 1 : INT64_MAX;
}
/* A JSON document, or NULL. */
struct json_object *etcd_json_parse(const char *text, size_t len);
/* The negative errno for an error answer; message copied into msg. */
int etcd_json_error(struct json_object *resp, char *msg, size_t len);

struct etcd_kvs {
	struct fibril_kv *v;
	size_t n, cap;
	char *arena; /* etcd_range_scan's: every key and value lives in it */
};
/* Decode one mvccpb.KeyValue (keys made relative to the prefix). */
int etcd_kv_parse(const struct etcd *e, struct json_object *obj, struct fibril_kv *kv);
void etcd_kv_clear(struct fibril_kv *kv);
/* Append every pair of a "kvs" array. */
int etcd_kvs_append(const struct etcd *e, struct etcd_kvs *kvs, struct json_object *arr);
void etcd_kvs_free(struct etcd_kvs *kvs);
/* A range answer (its "kvs", "more" and header revision) read by the
 * scanner of jscan.h: 0, -ENOMEM, or -EAGAIN when the text is beyond the
 * scanner (escapes, an error document...): read it with json-c then. */
int etcd_range_scan(const struct etcd *e, const char *text, size_t len, struct etcd_kvs *kvs,
		    bool *more, int64_t *revision);

/* ---- the kvstore calls (kv.c, watch.c, lease.c) ------------------------------ */

int etcd_op_get(void *ctx, const char *key, bool prefix, fibril_kv_get_fn cb, void *ud);
int etcd_op_get_paged(void *ctx, const char *prefix, size_t limit, fibril_kv_page_fn cb, void *ud);
int etcd_op_get_range(void *ctx, const char *start, const char *end, int64_t revision,
		      size_t limit, fibril_kv_page_fn cb, void *ud);
int etcd_op_put(void *ctx, const char *key, const char *value, size_t value_len, int64_t lease,
		fibril_kv_done_fn cb, void *ud);
int etcd_op_del(void *ctx, const char *key, bool prefix, fibril_kv_done_fn cb, void *ud);
int etcd_op_txn(void *ctx, const struct fibril_kv_compare *cmp, size_t ncmp,
		const struct fibril_kv_op *success, size_t nsuccess, const struct fibril_kv_op *failure,
		size_t nfailure, fibril_kv_txn_fn cb, void *ud);
/* Interface 1's txn: the arrays in the SDK 1.2 layouts. */
int etcd_op_txn_v1(void *ctx, const void *cmp, size_t ncmp, const void *success, size_t nsuccess,
		   const void *failure, size_t nfailure, fibril_kv_txn_fn cb, void *ud);

struct fibril_kv_watch *etcd_op_watch(void *ctx, const char *prefix, int64_t start_revision,
				      fibril_kv_watch_fn cb, void *ud);
void etcd_op_unwatch(void *ctx, struct fibril_kv_watch *w);
/* Restart every watch without a stream (the store is back). */
void etcd_watch_kick_all(struct etcd *e);
/* Every stream is dead: report it and wait for the store. */
void etcd_watch_break_all(struct etcd *e);
/* stop: end the streams, keep the handles for unwatch; fini: free them. */
void etcd_watch_stop_all(struct etcd *e);
void etcd_watch_free_all(struct etcd *e);

int etcd_op_lease_grant(void *ctx, int64_t ttl_seconds, fibril_kv_lease_fn cb, void *ud);
int etcd_op_lease_revoke(void *ctx, int64_t lease, fibril_kv_done_fn cb, void *ud);
/* Send a keepalive for every lease now (the store is back). */
void etcd_lease_kick_all(struct etcd *e);
/* Stop keeping leases alive (they expire on their own). */
void etcd_lease_free_all(struct etcd *e);

/* ---- metrics (metrics.c) ------------------------------------------------------ */

int etcd_metrics_register(struct etcd *e);
void etcd_metrics_forget(void); /* fini: the series are gone */
uint64_t etcd_metrics_now_us(void);
/* A request concluded (err as its done callback got it). */
void etcd_metrics_request(const struct etcd_req *r, int err);
void etcd_metrics_watch_restart(void);
void etcd_metrics_keepalive(bool ok);

#endif
