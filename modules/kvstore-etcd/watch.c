/* modules/kvstore-etcd/watch.c - prefix watches as long-lived POSTs to
 * /v3/watch. The gateway answers with one JSON message per line: "created",
 * then events, or "canceled" with compact_revision when the start revision
 * was compacted. A broken stream is reported once (-ENOTCONN) and resumed
 * from the last revision seen + 1 once etcd answers again; a compacted
 * revision is reported as -ERANGE and the watch goes on from the current
 * revision. A handle stays valid until unwatch (also after stop). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"

struct fibril_kv_watch {
	struct fibril_kv_watch *next;
	struct etcd *e;
	char *key, *end; /* the full key range */
	size_t key_len, end_len;
	fibril_kv_watch_fn cb;
	void *ud;
	int64_t next_rev;    /* resume from here (0: now) */
	int64_t created_rev; /* the store's revision when the stream was created */
	struct etcd_req *req;
	struct fibril_timer *retry;
	uint64_t backoff_ms;
	size_t parsed;  /* bytes of req->buf already handled */
	bool reported;  /* the break was reported; cleared when a stream is created */
	bool busy;      /* inside a callback: unwatch only marks it dead */
	bool dead;
	bool started; /* a stream was started before: the next is a restart */
};

enum { MSG_OK = 0, MSG_RESTART, MSG_BROKEN };

static int watch_start(struct fibril_kv_watch *w);

static void watch_free(struct fibril_kv_watch *w)
{
	struct etcd *e = w->e;
	for (struct fibril_kv_watch **p = &e->watches; *p; p = &(*p)->next) {
		if (*p == w) {
			*p = w->next;
			e->nwatches--;
			break;
		}
	}
	etcd_req_abort(w->req);
	fibril_timer_cancel(w->retry);
	free(w->key);
	free(w->end);
	free(w);
}

/* Call the watcher; false when it unwatched meanwhile. */
static bool watch_call(struct fibril_kv_watch *w, int err, enum fibril_kv_event_type type,
		       const struct fibril_kv *kv, int64_t revision)
{
	bool was_busy = w->busy;
	w->busy = true;
	w->cb(w->ud, err, type, kv, revision);
	w->busy = was_busy;
	return !w->dead;
}

static void on_retry(struct fibril_timer *t, void *ud)
{
	struct fibril_kv_watch *w = ud;
	w->retry = NULL;
	if (!w->req && w->e->running)
		watch_start(w);
}

/* No stream: retry with backoff while etcd answers, else wait for it. */
static void watch_wait(struct fibril_kv_watch *w)
{
	struct etcd *e = w->e;
	if (!e->running || !e->connected || w->retry || w->req)
		return;
	w->backoff_ms = etcd_backoff_next(w->backoff_ms);
	w->retry = fibril_timer_add(e->m, etcd_jitter(e, w->backoff_ms), 0, on_retry, w);
}

/* The stream is gone: report it once, then resume later. */
static void watch_broken(struct fibril_kv_watch *w, int err)
{
	if (!w->reported) {
		w->reported = true;
		if (!watch_call(w, err, FIBRIL_KV_EVENT_PUT, NULL, w->next_rev ? w->next_rev - 1 : 0)) {
			watch_free(w);
			return;
		}
	}
	watch_wait(w);
}

static int watch_events(struct fibril_kv_watch *w, struct json_object *events)
{
	size_t n = events ? json_object_array_length(events) : 0;
	for (size_t i = 0; i < n; i++) {
		struct json_object *ev = json_object_array_get_idx(events, i), *o = NULL;
		struct fibril_kv kv;
		if (!json_object_object_get_ex(ev, "kv", &o) || etcd_kv_parse(w->e, o, &kv))
			return MSG_BROKEN;
		enum fibril_kv_event_type type = FIBRIL_KV_EVENT_PUT;
		if (json_object_object_get_ex(ev, "type", &o) &&
		    strcmp(json_object_get_string(o), "DELETE") == 0)
			type = FIBRIL_KV_EVENT_DELETE;
		w->next_rev = etcd_rev_next(kv.mod_revision);
		bool alive = watch_call(w, 0, type, &kv, kv.mod_revision);
		etcd_kv_clear(&kv);
		if (!alive)
			return MSG_OK;
	}
	return MSG_OK;
}

static bool json_flag(struct json_object *obj, const char *name)
{
	struct json_object *v;
	return json_object_object_get_ex(obj, name, &v) && json_object_get_boolean(v);
}

/* The stream is up: resume from here if nothing was seen yet. */
static void watch_created(struct fibril_kv_watch *w, struct etcd_req *r, struct json_object *res)
{
	w->created_rev = etcd_header_revision(res);
	if (!w->next_rev)
		w->next_rev = etcd_rev_next(w->created_rev);
	w->reported = false;
	w->backoff_ms = 0;
	etcd_conn_up(w->e, r->endpoint);
}

/* Canceled by etcd: compacted (-ERANGE, go on from now) or broken. */
static int watch_canceled(struct fibril_kv_watch *w, struct json_object *res)
{
	int64_t compacted = etcd_json_int(res, "compact_revision");
	if (!compacted)
		return MSG_BROKEN;
	w->next_rev = w->created_rev ? etcd_rev_next(w->created_rev) : 0;
	return watch_call(w, -ERANGE, FIBRIL_KV_EVENT_PUT, NULL, compacted) ? MSG_RESTART : MSG_OK;
}

static int watch_message(struct fibril_kv_watch *w, struct etcd_req *r, struct json_object *msg)
{
	struct json_object *res = NULL, *events = NULL;
	if (!json_object_object_get_ex(msg, "result", &res))
		return MSG_BROKEN; /* {"error": ...} */
	if (json_flag(res, "created")) {
		watch_created(w, r, res);
		return MSG_OK;
	}
	if (json_flag(res, "canceled"))
		return watch_canceled(w, res);
	if (json_object_object_get_ex(res, "events", &events) && !json_object_is_type(events, json_type_array))
		return MSG_BROKEN; /* not a list (json-c would assert) */
	if (events && json_object_array_length(events))
		return watch_events(w, events);
	/* a progress notification: every event up to its revision was sent */
	int64_t rev = etcd_header_revision(res);
	if (w->created_rev && rev >= w->next_rev)
		w->next_rev = etcd_rev_next(rev);
	return MSG_OK;
}

/* Handle every complete line of r->buf. */
static int watch_parse(struct fibril_kv_watch *w, struct etcd_req *r)
{
	int rc = MSG_OK;
	while (rc == MSG_OK && !w->dead && w->parsed < r->len) {
		char *line = r->buf + w->parsed;
		char *nl = memchr(line, '\n', r->len - w->parsed);
		if (!nl)
			break;
		w->parsed += (size_t)(nl - line) + 1;
		struct json_object *msg = etcd_json_parse(line, (size_t)(nl - line));
		rc = msg ? watch_message(w, r, msg) : MSG_BROKEN;
		json_object_put(msg);
	}
	if (w->parsed && w->req == r) { /* drop what was handled */
		memmove(r->buf, r->buf + w->parsed, r->len - w->parsed + 1);
		r->len -= w->parsed;
		w->parsed = 0;
	}
	return rc;
}

/* Parse r's bytes, then act: free, restart or report a broken stream. */
static void watch_dispatch(struct fibril_kv_watch *w, struct etcd_req *r, bool ended, int err)
{
	w->busy = true;
	int rc = watch_parse(w, r);
	w->busy = false;
	if (w->dead) {
		watch_free(w);
		return;
	}
	if (rc == MSG_OK && !ended)
		return;
	etcd_req_abort(w->req); /* NULL when r already ended */
	w->req = NULL;
	if (rc == MSG_RESTART) {
		if (watch_start(w))
			watch_wait(w);
		return;
	}
	watch_broken(w, rc == MSG_BROKEN ? -EIO : err ? err : -ENOTCONN);
}

static void watch_data(struct etcd_req *r)
{
	watch_dispatch(r->ud, r, false, 0);
}

static void watch_done(struct etcd_req *r, int err, struct json_object *resp)
{
	struct fibril_kv_watch *w = r->ud;
	w->req = NULL; /* r is ending: the http layer frees it */
	if (err == -ECANCELED)
		return;
	if (err && err != -ENOTCONN && err != -ETIMEDOUT)
		fibril_warn(w->e->m, "watch: %s", r->errbuf);
	watch_dispatch(w, r, true, err == -ETIMEDOUT ? -ENOTCONN : err);
}

static struct json_object *watch_body(struct fibril_kv_watch *w)
{
	struct json_object *body = json_object_new_object(), *cr = json_object_new_object();
	if (!body || !cr || json_object_object_add(body, "create_request", cr)) {
		json_object_put(cr);
		json_object_put(body);
		return NULL;
	}
	if (etcd_json_add_bytes(cr, "key", w->key, w->key_len) ||
	    etcd_json_add_bytes(cr, "range_end", w->end, w->end_len) ||
	    json_object_object_add(cr, "progress_notify", json_object_new_boolean(1)) ||
	    (w->next_rev &&
	     json_object_object_add(cr, "start_revision", json_object_new_int64(w->next_rev)))) {
		json_object_put(body);
		return NULL;
	}
	return body;
}

static int watch_start(struct fibril_kv_watch *w)
{
	struct etcd_req *r = etcd_req_new(w->e, "/v3/watch", watch_body(w), watch_done, w);
	if (!r)
		return -ENOMEM;
	r->stream = true;
	r->data = watch_data;
	w->parsed = 0;
	w->created_rev = 0;
	int rc = etcd_req_send(r);
	if (rc == 0) {
		w->req = r;
		if (w->started)
			etcd_metrics_watch_restart();
		w->started = true;
	}
	return rc;
}

struct fibril_kv_watch *etcd_op_watch(void *ctx, const char *prefix, int64_t start_revision,
				      fibril_kv_watch_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!prefix || !cb || start_revision < 0) {
		errno = EINVAL;
		return NULL;
	}
	if (!e->running) {
		errno = ECANCELED;
		return NULL;
	}
	struct fibril_kv_watch *w = calloc(1, sizeof(*w));
	if (!w || !(w->key = etcd_full_key(e, prefix, &w->key_len)) ||
	    !(w->end = etcd_range_end(w->key, w->key_len, &w->end_len))) {
		if (w)
			free(w->key);
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	if (!w->key_len) { /* the whole keyspace */
		w->key[0] = '\0';
		w->key_len = 1;
	}
	w->e = e;
	w->cb = cb;
	w->ud = ud;
	w->next_rev = start_revision;
	w->next = e->watches;
	e->watches = w;
	e->nwatches++;
	if (e->connected && watch_start(w))
		watch_wait(w);
	return w;
}

void etcd_op_unwatch(void *ctx, struct fibril_kv_watch *w)
{
	if (!w)
		return;
	if (w->busy)
		w->dead = true;
	else
		watch_free(w);
}

void etcd_watch_kick_all(struct etcd *e)
{
	for (struct fibril_kv_watch *w = e->watches; w; w = w->next) {
		if (w->req || w->dead)
			continue;
		fibril_timer_cancel(w->retry);
		w->retry = NULL;
		w->backoff_ms = 0;
		if (watch_start(w))
			watch_wait(w);
	}
}

void etcd_watch_break_all(struct etcd *e)
{
	for (;;) { /* rescan: callbacks may unwatch */
		struct fibril_kv_watch *w = e->watches;
		while (w && (!w->req || w->busy || w->dead))
			w = w->next;
		if (!w)
			return;
		etcd_req_abort(w->req);
		w->req = NULL;
		watch_broken(w, -ENOTCONN);
	}
}

void etcd_watch_stop_all(struct etcd *e)
{
	for (struct fibril_kv_watch *w = e->watches; w; w = w->next) {
		etcd_req_abort(w->req);
		w->req = NULL;
		fibril_timer_cancel(w->retry);
		w->retry = NULL;
	}
}

void etcd_watch_free_all(struct etcd *e)
{
	while (e->watches)
		watch_free(e->watches);
}
