/* tests/fuzz/fuzz_etcd.c - fuzz target: etcd's JSON gateway as the
 * kvstore-etcd module reads it: a unary answer (errors in both shapes, the
 * header revision, base64 keys and values under the module's prefix) given
 * to each call's completion (range, txn with response_range, put/del,
 * lease grant and revoke), and a /v3/watch stream (one JSON message per
 * line: created, events, canceled with compact_revision, progress, errors)
 * delivered in chunks, then its end. kv.c, lease.c and watch.c are compiled
 * in (their completions are static), codec.c is linked; the HTTP layer and
 * the connection state are stubbed: nothing is sent. Input: byte 0 is the
 * stream's chunk size, then the answer, a line "=====", the stream. A
 * range answer the fast scanner (etcd_range_scan) reads must read the same
 * through json-c (etcd_kvs_append): every pair, "more", the revision. */
#include "../../modules/kvstore-etcd/kv.c"
#include "../../modules/kvstore-etcd/lease.c"
#include "../../modules/kvstore-etcd/watch.c"

#include "fuzz.h"

/* ---- http.c and kvstore_etcd.c, stubbed ------------------------------------ */
struct etcd_req *etcd_req_new(struct etcd *e, const char *path, struct json_object *body,
			      etcd_done_fn done, void *ud)
{
	(void)e, (void)path, (void)done, (void)ud;
	json_object_put(body);
	return NULL;
}

int etcd_req_send(struct etcd_req *r)
{
	(void)r;
	abort(); /* never reached: etcd_req_new gave no request */
}

void etcd_req_abort(struct etcd_req *r)
{
	(void)r; /* the harness owns and frees it */
}

void etcd_conn_up(struct etcd *e, size_t endpoint)
{
	e->connected = true;
	(void)endpoint;
}

void etcd_conn_down(struct etcd *e, const char *why)
{
	e->connected = false;
	(void)why;
}

void etcd_conn_suspect(struct etcd *e)
{
	(void)e;
}

uint64_t etcd_jitter(struct etcd *e, uint64_t ms)
{
	(void)e;
	return ms;
}

uint64_t etcd_backoff_next(uint64_t ms)
{
	return ms ? ms * 2 : ETCD_BACKOFF_MIN_MS;
}

/* ---- what a caller checks ------------------------------------------------------- */
static void check_kvs(const struct fibril_kv *kvs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!kvs[i].key || !kvs[i].value || kvs[i].value[kvs[i].value_len] != '\0')
			abort();
}

static void on_get(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	(void)ud, (void)err, (void)revision;
	check_kvs(kvs, n);
}

static void on_txn(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	(void)ud, (void)err, (void)succeeded, (void)revision;
	check_kvs(kvs, n);
}

static void on_done(void *ud, int err, int64_t revision)
{
	(void)ud, (void)err, (void)revision;
}

static void on_lease(void *ud, int err, int64_t lease, int64_t ttl)
{
	(void)ud, (void)err, (void)lease, (void)ttl;
}

static void on_watch(void *ud, int err, enum fibril_kv_event_type type, const struct fibril_kv *kv,
		     int64_t revision)
{
	(void)ud, (void)err, (void)type, (void)revision;
	if (kv)
		check_kvs(kv, 1);
}

/* What http.c hands a completion: the parsed answer, or an error with
 * etcd's error document. */
static void complete(struct etcd *e, const char *text, etcd_done_fn done, etcd_user_fn cb)
{
	struct etcd_req r;
	memset(&r, 0, sizeof(r));
	r.e = e;
	r.user_cb = cb;
	struct json_object *resp = etcd_json_parse(text, strlen(text));
	int err = resp ? 0 : -EIO;
	if (resp && json_object_object_get_ex(resp, "error", NULL))
		err = etcd_json_error(resp, r.errbuf, sizeof(r.errbuf));
	done(&r, err, resp);
	json_object_put(resp);
}

/* the scanner and json-c agree on what the scanner accepts */
static void check_scan(struct etcd *e, const char *text)
{
	struct etcd_kvs fast, slow = {0};
	bool more;
	int64_t revision;
	if (etcd_range_scan(e, text, strlen(text), &fast, &more, &revision))
		return;
	struct json_object *resp = etcd_json_parse(text, strlen(text)), *arr = NULL, *m = NULL;
	if (!resp)
		abort(); /* the scanner read what is not a JSON object */
	json_object_object_get_ex(resp, "kvs", &arr);
	if (etcd_kvs_append(e, &slow, arr) || slow.n != fast.n ||
	    etcd_header_revision(resp) != revision ||
	    (json_object_object_get_ex(resp, "more", &m) ? json_object_get_boolean(m) : false) != more)
		abort();
	for (size_t i = 0; i < fast.n; i++) {
		const struct fibril_kv *a = &fast.v[i], *b = &slow.v[i];
		if (strcmp(a->key, b->key) || a->value_len != b->value_len ||
		    memcmp(a->value, b->value, a->value_len) || a->value[a->value_len] ||
		    a->create_revision != b->create_revision || a->mod_revision != b->mod_revision ||
		    a->version != b->version || a->lease != b->lease)
			abort();
	}
	etcd_kvs_free(&fast);
	etcd_kvs_free(&slow);
	json_object_put(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct etcd e;
	if (size < 1)
		return 0;
	if (!e.prefix) {
		fuzz_quiet_logs();
		e.prefix = "/fibril/";
		e.prefix_len = strlen(e.prefix);
		e.lease_ttl_ms = 15000;
	}
	size_t chunk = data[0] ? (size_t)data[0] * 16 : SIZE_MAX; /* 16..4080 bytes, or all */
	char *text = fuzz_strndup(data + 1, size - 1);
	char *stream = fuzz_split(text, "\n=====\n");

	check_scan(&e, text);
	complete(&e, text, get_done, (etcd_user_fn)on_get);
	complete(&e, text, txn_done, (etcd_user_fn)on_txn);
	complete(&e, text, revision_done, (etcd_user_fn)on_done);
	complete(&e, text, grant_done, (etcd_user_fn)on_lease);
	complete(&e, text, revoke_done, (etcd_user_fn)on_done);

	if (stream) {
		struct fibril_kv_watch *w = calloc(1, sizeof(*w));
		struct etcd_req *r = calloc(1, sizeof(*r));
		if (!w || !r || !(r->buf = calloc(1, 1)))
			abort();
		w->e = &e;
		w->cb = on_watch;
		w->req = r;
		r->e = &e;
		r->ud = w;
		r->stream = true;
		e.watches = w;
		e.nwatches = 1;
		size_t total = strlen(stream), at = 0;
		while (at < total && w->req == r) {
			size_t n = total - at < chunk ? total - at : chunk;
			char *nb = realloc(r->buf, r->len + n + 1);
			if (!nb)
				abort();
			r->buf = nb;
			memcpy(r->buf + r->len, stream + at, n);
			r->len += n;
			r->buf[r->len] = '\0';
			at += n;
			watch_data(r);
		}
		if (w->req == r)
			watch_done(r, 0, NULL); /* the gateway ended the stream */
		free(r->buf);
		free(r);
		etcd_watch_free_all(&e);
	}
	etcd_lease_free_all(&e);
	e.connected = false;
	free(text);
	return 0;
}
