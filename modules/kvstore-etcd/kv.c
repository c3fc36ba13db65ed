/* modules/kvstore-etcd/kv.c - get, put, del and txn of the kvstore
 * capability as POSTs to /v3/kv/{range,put,deleterange,txn}, and their
 * answers handed to the caller's callback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include <fibril/compat.h>

/* Build, queue, and keep the caller's callback with the request. */
static int kv_send(struct etcd *e, const char *path, struct json_object *body, etcd_done_fn done,
		   etcd_user_fn cb, void *ud)
{
	if (!e->running)
		return -ECANCELED;
	struct etcd_req *r = etcd_req_new(e, path, body, done, NULL);
	if (!r)
		return -ENOMEM;
	r->user_cb = cb;
	r->user_ud = ud;
	return etcd_req_send(r);
}

static size_t op_value_len(const char *value, size_t len)
{
	return value && !len ? strlen(value) : len;
}

/* ---- get ----------------------------------------------------------------------- */

/* A range answer's pairs, "more" and revision: resp when http.c parsed it,
 * else (a raw request) the scanner on the text, or json-c when the text is
 * beyond the scanner. */
static int range_answer(struct etcd_req *r, struct json_object *resp, struct etcd_kvs *kvs,
			bool *more, int64_t *revision)
{
	struct json_object *own = NULL, *arr = NULL, *more_obj = NULL;
	*more = false;
	*revision = 0;
	if (!resp) {
		int rc = etcd_range_scan(r->e, r->buf ? r->buf : "", r->len, kvs, more, revision);
		if (rc != -EAGAIN)
			return rc;
		if (!(resp = own = etcd_json_parse(r->buf ? r->buf : "", r->len))) {
			snprintf(r->errbuf, sizeof(r->errbuf), "malformed answer from %s",
				 r->path ? r->path : "/v3/kv/range");
			return -EIO;
		}
	}
	int err = 0;
	json_object_object_get_ex(resp, "kvs", &arr);
	if (etcd_kvs_append(r->e, kvs, arr))
		err = -EIO;
	if (json_object_object_get_ex(resp, "more", &more_obj))
		*more = json_object_get_boolean(more_obj);
	*revision = etcd_header_revision(resp);
	json_object_put(own);
	return err;
}

static void get_done(struct etcd_req *r, int err, struct json_object *resp)
{
	fibril_kv_get_fn cb = (fibril_kv_get_fn)r->user_cb;
	struct etcd_kvs kvs = {0};
	bool more;
	int64_t revision = 0;
	if (!err)
		err = range_answer(r, resp, &kvs, &more, &revision);
	if (cb)
		cb(r->user_ud, err, err ? NULL : kvs.v, err ? 0 : kvs.n, err ? 0 : revision);
	etcd_kvs_free(&kvs);
}

int etcd_op_get(void *ctx, const char *key, bool prefix, fibril_kv_get_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!key)
		return -EINVAL;
	struct json_object *body = json_object_new_object();
	if (!body || etcd_json_add_key(e, body, key, prefix)) {
		json_object_put(body);
		return -ENOMEM;
	}
	if (!e->running) {
		json_object_put(body);
		return -ECANCELED;
	}
	struct etcd_req *r = etcd_req_new(e, "/v3/kv/range", body, get_done, NULL);
	if (!r)
		return -ENOMEM;
	r->user_cb = (etcd_user_fn)cb;
	r->user_ud = ud;
	r->raw = true;
	return etcd_req_send(r);
}

/* ---- get in pages ------------------------------------------------------------------ */

#define PAGE_DEFAULT 1000

/* A paged read: the next page starts at key, every page at revision. */
struct page_read {
	struct etcd *e;
	char *key, *end; /* full keys (with the prefix); key grows with each page */
	size_t key_len, end_len;
	int64_t limit, revision;
	fibril_kv_page_fn cb;
	void *ud;
};

static void page_free(struct page_read *p)
{
	free(p->key);
	free(p->end);
	free(p);
}

static void page_done(struct etcd_req *r, int err, struct json_object *resp);

static int page_send(struct page_read *p)
{
	struct etcd *e = p->e;
	if (!e->running)
		return -ECANCELED;
	struct json_object *body = json_object_new_object();
	if (!body || etcd_json_add_bytes(body, "key", p->key, p->key_len) ||
	    etcd_json_add_bytes(body, "range_end", p->end, p->end_len) ||
	    json_object_object_add(body, "limit", json_object_new_int64(p->limit)) ||
	    (p->revision &&
	     json_object_object_add(body, "revision", json_object_new_int64(p->revision)))) {
		json_object_put(body);
		return -ENOMEM;
	}
	struct etcd_req *r = etcd_req_new(e, "/v3/kv/range", body, page_done, p);
	if (!r)
		return -ENOMEM;
	r->raw = true;
	return etcd_req_send(r);
}

/* The next page starts just after the last key of this one (its full key
 * and a NUL byte). */
static int page_next(struct page_read *p, const struct fibril_kv *last)
{
	size_t len;
	char *full = etcd_full_key(p->e, last->key, &len);
	char *next = full ? realloc(full, len + 1) : NULL;
	if (!next) {
		free(full);
		return -ENOMEM;
	}
	next[len] = '\0';
	free(p->key);
	p->key = next;
	p->key_len = len + 1;
	return 0;
}

static void page_done(struct etcd_req *r, int err, struct json_object *resp)
{
	struct page_read *p = r->ud;
	struct etcd_kvs kvs = {0};
	bool more = false;
	int64_t revision = 0;
	if (!err) {
		err = range_answer(r, resp, &kvs, &more, &revision);
		if (!p->revision)
			p->revision = revision;
		if (!err && more && (!kvs.n || page_next(p, &kvs.v[kvs.n - 1])))
			err = kvs.n ? -ENOMEM : -EIO; /* "more" with nothing to go on from */
	}
	if (err) {
		etcd_kvs_free(&kvs);
		p->cb(p->ud, err, NULL, 0, false, 0);
		page_free(p);
		return;
	}
	/* the next page is asked for first: etcd serves it while this one is
	 * handed over */
	int send_err = more ? page_send(p) : 0;
	p->cb(p->ud, 0, kvs.v, kvs.n, more, p->revision);
	etcd_kvs_free(&kvs);
	if (send_err)
		p->cb(p->ud, send_err, NULL, 0, false, 0);
	if (!more || send_err)
		page_free(p);
}

static int page_start(struct etcd *e, struct page_read *p)
{
	int rc = page_send(p);
	if (rc)
		page_free(p); /* etcd_req_send freed the request: done never runs */
	return rc;
}

static struct page_read *page_new(struct etcd *e, size_t limit, int64_t revision,
				  fibril_kv_page_fn cb, void *ud)
{
	struct page_read *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->e = e;
	p->cb = cb;
	p->ud = ud;
	p->limit = limit ? (int64_t)limit : PAGE_DEFAULT;
	p->revision = revision;
	return p;
}

int etcd_op_get_paged(void *ctx, const char *prefix, size_t limit, fibril_kv_page_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!prefix || !cb)
		return -EINVAL;
	if (!e->running)
		return -ECANCELED;
	struct page_read *p = page_new(e, limit, 0, cb, ud);
	if (!p)
		return -ENOMEM;
	if (!(p->key = etcd_full_key(e, prefix, &p->key_len)) ||
	    !(p->end = etcd_range_end(p->key, p->key_len, &p->end_len))) {
		page_free(p);
		return -ENOMEM;
	}
	return page_start(e, p);
}

int etcd_op_get_range(void *ctx, const char *start, const char *end, int64_t revision,
		      size_t limit, fibril_kv_page_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!start || !cb || revision < 0)
		return -EINVAL;
	if (!e->running)
		return -ECANCELED;
	struct page_read *p = page_new(e, limit, revision, cb, ud);
	if (!p)
		return -ENOMEM;
	if (!(p->key = etcd_full_key(e, start, &p->key_len))) {
		page_free(p);
		return -ENOMEM;
	}
	if (end && *end) {
		p->end = etcd_full_key(e, end, &p->end_len);
	} else { /* to the end of the provider's prefix */
		size_t plen;
		char *prefix = etcd_full_key(e, "", &plen);
		p->end = prefix ? etcd_range_end(prefix, plen, &p->end_len) : NULL;
		free(prefix);
	}
	if (!p->end) {
		page_free(p);
		return -ENOMEM;
	}
	return page_start(e, p);
}

/* ---- put and del ------------------------------------------------------------------ */

static void revision_done(struct etcd_req *r, int err, struct json_object *resp)
{
	fibril_kv_done_fn cb = (fibril_kv_done_fn)r->user_cb;
	if (cb)
		cb(r->user_ud, err, err ? 0 : etcd_header_revision(resp));
}

static struct json_object *put_body(struct etcd *e, const char *key, const char *value,
				    size_t value_len, int64_t lease, bool ignore_lease)
{
	struct json_object *body = json_object_new_object();
	if (!body || etcd_json_add_key(e, body, key, false) ||
	    etcd_json_add_bytes(body, "value", value ? value : "", op_value_len(value, value_len)) ||
	    (lease && json_object_object_add(body, "lease", json_object_new_int64(lease))) ||
	    (ignore_lease &&
	     json_object_object_add(body, "ignore_lease", json_object_new_boolean(1)))) {
		json_object_put(body);
		return NULL;
	}
	return body;
}

int etcd_op_put(void *ctx, const char *key, const char *value, size_t value_len, int64_t lease,
		fibril_kv_done_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!key)
		return -EINVAL;
	struct json_object *body = put_body(e, key, value, value_len, lease, false);
	if (!body)
		return -ENOMEM;
	return kv_send(e, "/v3/kv/put", body, revision_done, (etcd_user_fn)cb, ud);
}

int etcd_op_del(void *ctx, const char *key, bool prefix, fibril_kv_done_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!key)
		return -EINVAL;
	struct json_object *body = json_object_new_object();
	if (!body || etcd_json_add_key(e, body, key, prefix)) {
		json_object_put(body);
		return -ENOMEM;
	}
	return kv_send(e, "/v3/kv/deleterange", body, revision_done, (etcd_user_fn)cb, ud);
}

/* ---- txn ------------------------------------------------------------------------ */

static const char *const target_names[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
static const char *const target_fields[] = {"version", "create_revision", "mod_revision", "value",
					    "lease"};
static const char *const result_names[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};

static struct json_object *compare_json(struct etcd *e, const struct fibril_kv_compare *c)
{
	if (!c->key || (unsigned)c->target > FIBRIL_KV_TARGET_LEASE ||
	    (unsigned)c->result > FIBRIL_KV_NOT_EQUAL)
		return NULL;
	struct json_object *o = json_object_new_object();
	if (!o || etcd_json_add_key(e, o, c->key, c->prefix))
		goto fail;
	json_object_object_add(o, "target", json_object_new_string(target_names[c->target]));
	json_object_object_add(o, "result", json_object_new_string(result_names[c->result]));
	const char *field = target_fields[c->target];
	if (c->target == FIBRIL_KV_TARGET_VALUE) {
		const char *v = c->value ? c->value : "";
		if (etcd_json_add_bytes(o, field, v, strlen(v)))
			goto fail;
	} else {
		json_object_object_add(o, field, json_object_new_int64(c->number));
	}
	return o;
fail:
	json_object_put(o);
	return NULL;
}

static struct json_object *op_json(struct etcd *e, const struct fibril_kv_op *op)
{
	struct json_object *req = NULL, *o = json_object_new_object();
	const char *name = NULL;
	if (!o || !op->key)
		goto fail;
	switch (op->type) {
	case FIBRIL_KV_OP_PUT:
		if (op->ignore_lease && op->lease)
			goto fail; /* etcd: ignore_lease with a lease is an error */
		name = "request_put";
		req = put_body(e, op->key, op->value, op->value_len, op->lease, op->ignore_lease);
		break;
	case FIBRIL_KV_OP_DELETE:
	case FIBRIL_KV_OP_GET:
		name = op->type == FIBRIL_KV_OP_GET ? "request_range" : "request_delete_range";
		req = json_object_new_object();
		if (req && etcd_json_add_key(e, req, op->key, op->prefix)) {
			json_object_put(req);
			req = NULL;
		}
		break;
	}
	if (!req)
		goto fail;
	json_object_object_add(o, name, req);
	return o;
fail:
	json_object_put(o);
	return NULL;
}

/* How the caller laid out an array: the distance between elements and how
 * many bytes of each it knows (the rest of ours reads as zero). */
struct item_layout {
	size_t stride, size;
};

/* The 1.2 layouts, which interface 1's txn_v1 takes. */
#define OP_V1_SIZE FIBRIL_OFFSETOFEND(struct fibril_kv_op, prefix)
#define OP_V1_STRIDE ((OP_V1_SIZE + _Alignof(struct fibril_kv_op) - 1) & \
		      ~(_Alignof(struct fibril_kv_op) - 1))
#define CMP_V1_SIZE FIBRIL_OFFSETOFEND(struct fibril_kv_compare, value)
static const struct item_layout cmp_v1 = {CMP_V1_SIZE, CMP_V1_SIZE};
static const struct item_layout op_v1 = {OP_V1_STRIDE, OP_V1_SIZE};
static const struct item_layout cmp_v2 = {sizeof(struct fibril_kv_compare),
					  sizeof(struct fibril_kv_compare)};
static const struct item_layout op_v2 = {sizeof(struct fibril_kv_op), sizeof(struct fibril_kv_op)};

static struct json_object *compare_item(struct etcd *e, const void *p, size_t size)
{
	struct fibril_kv_compare c;
	char why[160];
	if (fibril_struct_copy_in(&c, sizeof(c), p, size, size, "struct fibril_kv_compare", why,
				  sizeof(why)) < 0)
		return NULL;
	return compare_json(e, &c);
}

static struct json_object *op_item(struct etcd *e, const void *p, size_t size)
{
	struct fibril_kv_op op;
	char why[160];
	if (fibril_struct_copy_in(&op, sizeof(op), p, size, size, "struct fibril_kv_op", why,
				  sizeof(why)) < 0)
		return NULL;
	return op_json(e, &op);
}

/* Add "name": [...] built by fn from n items; -EINVAL on a bad item. */
static int add_array(struct json_object *body, const char *name, size_t n,
		     struct json_object *(*fn)(struct etcd *, const void *, size_t), struct etcd *e,
		     const void *items, struct item_layout layout)
{
	struct json_object *arr = json_object_new_array();
	if (!arr)
		return -ENOMEM;
	json_object_object_add(body, name, arr);
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = fn(e, (const char *)items + i * layout.stride, layout.size);
		if (!o)
			return -EINVAL;
		json_object_array_add(arr, o);
	}
	return 0;
}

static void txn_done(struct etcd_req *r, int err, struct json_object *resp)
{
	fibril_kv_txn_fn cb = (fibril_kv_txn_fn)r->user_cb;
	struct etcd_kvs kvs = {0};
	struct json_object *v = NULL, *responses = NULL;
	bool succeeded = false;
	if (!err) {
		if (json_object_object_get_ex(resp, "succeeded", &v))
			succeeded = json_object_get_boolean(v);
		json_object_object_get_ex(resp, "responses", &responses);
		if (responses && !json_object_is_type(responses, json_type_array))
			err = -EIO; /* not a list (json-c would assert) */
		size_t n = responses && !err ? json_object_array_length(responses) : 0;
		for (size_t i = 0; i < n && !err; i++) {
			struct json_object *range = NULL, *arr = NULL;
			if (!json_object_object_get_ex(json_object_array_get_idx(responses, i),
						       "response_range", &range))
				continue;
			json_object_object_get_ex(range, "kvs", &arr);
			if (etcd_kvs_append(r->e, &kvs, arr))
				err = -EIO;
		}
	}
	if (cb)
		cb(r->user_ud, err, !err && succeeded, err ? NULL : kvs.v, err ? 0 : kvs.n,
		   err ? 0 : etcd_header_revision(resp));
	etcd_kvs_free(&kvs);
}

/* Both txn slots: the arrays in the layouts the slot defines. */
static int txn_send(struct etcd *e, const void *cmp, size_t ncmp, struct item_layout cmp_layout,
		    const void *success, size_t nsuccess, const void *failure, size_t nfailure,
		    struct item_layout op_layout, fibril_kv_txn_fn cb, void *ud)
{
	if ((ncmp && !cmp) || (nsuccess && !success) || (nfailure && !failure))
		return -EINVAL;
	struct json_object *body = json_object_new_object();
	if (!body)
		return -ENOMEM;
	int rc = add_array(body, "compare", ncmp, compare_item, e, cmp, cmp_layout);
	if (!rc)
		rc = add_array(body, "success", nsuccess, op_item, e, success, op_layout);
	if (!rc)
		rc = add_array(body, "failure", nfailure, op_item, e, failure, op_layout);
	if (rc) {
		json_object_put(body);
		return rc;
	}
	return kv_send(e, "/v3/kv/txn", body, txn_done, (etcd_user_fn)cb, ud);
}

int etcd_op_txn_v1(void *ctx, const void *cmp, size_t ncmp, const void *success, size_t nsuccess,
		   const void *failure, size_t nfailure, fibril_kv_txn_fn cb, void *ud)
{
	return txn_send(ctx, cmp, ncmp, cmp_v1, success, nsuccess, failure, nfailure, op_v1, cb,
			ud);
}

int etcd_op_txn(void *ctx, const struct fibril_kv_compare *cmp, size_t ncmp,
		const struct fibril_kv_op *success, size_t nsuccess, const struct fibril_kv_op *failure,
		size_t nfailure, fibril_kv_txn_fn cb, void *ud)
{
	return txn_send(ctx, cmp, ncmp, cmp_v2, success, nsuccess, failure, nfailure, op_v2, cb,
			ud);
}
