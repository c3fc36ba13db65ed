/* modules/endpoint/cluster.c - cluster-wide identities through the
 * kvstore, with the semantics of Cilium's kvstore allocator
 * (state/identities/v1, records in cluster_record.c):
 *   - id/<n> -> labels is the identity itself (no lease); value/<labels>/
 *     <node> -> n is one node's reference to it, held by this module's lease,
 *     so a node that is gone stops referencing it when its lease expires;
 *   - a label set this node does not hold yet is created in one
 *     transaction, one round trip: a free number under compares that neither
 *     id/<n> nor any reference to the labels exists; when a compare fails,
 *     the same transaction's failure branch reads the labels' value/ prefix:
 *     some node holds them (a race lost, or labels older than this node's
 *     view) -> reference the same number, under a compare that id/<n> still
 *     names these labels; nobody does -> id/<n> was taken: the next free
 *     number;
 *   - the last local endpoint of an identity deletes this node's reference;
 *     an id/<n> no node references is deleted by the periodic GC (every
 *     agent runs it; a transaction makes it safe) once it stayed
 *     unreferenced for the grace period.
 * Allocation is asynchronous: ep_identity_acquire answers -EINPROGRESS for
 * labels not held here, the caller waits with ep_cluster_allocate (bounded
 * by identity-timeout; the kvstore being unreachable is a clear error, never
 * a local number). Identities held here (restored ones included) keep
 * working whatever the kvstore does; when the lease is (re)granted every one
 * of them is written again (ensure). */
#include "endpoint_int.h"
#include "grow.h"
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fibril/nodes.h>

#define CL_RETRY_MS 250
#define CL_MAX_ATTEMPTS 64
#define CL_WHY 256

struct cl_waiter {
	ep_cluster_done_fn fn;
	void *ud;
	struct cl_waiter *next;
};

struct cl_alloc {
	struct ep_cluster *c;
	char *labels;  /* '\n' form */
	char *enc;     /* ';' form */
	struct cl_waiter *waiters;
	struct fibril_timer *deadline, *retry;
	uint32_t number;
	unsigned attempts;
	int last_err;
	bool inflight, expired;
	uint64_t started_ns;
	struct cl_alloc *next;
};

/* an id/<n> seen unreferenced by the GC */
struct cl_gc_cand {
	uint32_t number;
	int64_t mod_revision;
	uint64_t since_ms;
	bool seen;
};

/* an identity of the cluster as its id/<n> record says (whichever node
 * allocated it) */
struct cl_known {
	uint32_t number;
	char *labels; /* '\n' form */
};

struct ep_cluster {
	struct ep_manager *mg;
	const struct fibril_kvstore_ops *kv;
	void *kvctx;
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

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void count(struct ep_cluster *c, const char *result)
{
	fibril_series_inc(fibril_metric_labels(c->m.ops, result));
}

static bool used_get(const struct ep_cluster *c, uint32_t n)
{
	return n <= EP_IDENTITY_MAX && (c->used[n / 8] >> (n % 8)) & 1;
}

static void used_set(struct ep_cluster *c, uint32_t n, bool on)
{
	if (n > EP_IDENTITY_MAX)
		return;
	if (on)
		c->used[n / 8] |= (uint8_t)(1u << (n % 8));
	else
		c->used[n / 8] &= (uint8_t)~(1u << (n % 8));
}

static void id_key(char *buf, size_t len, uint32_t n)
{
	snprintf(buf, len, CL_ID_PREFIX "%u", n);
}

/* value/<enc>/ (node NULL) or value/<enc>/<node>, malloc'd */
static char *ref_key(const char *enc, const char *node)
{
	size_t len = strlen(CL_VALUE_PREFIX) + strlen(enc) + 2 + (node ? strlen(node) : 0);
	char *k = malloc(len);

	if (k)
		snprintf(k, len, CL_VALUE_PREFIX "%s/%s", enc, node ? node : "");
	return k;
}

static void shown_labels(const char *labels, char *buf, size_t len)
{
	snprintf(buf, len, "%s", labels);
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ',';
}

/* ---- allocations -------------------------------------------------------------------- */

static void alloc_kick(struct cl_alloc *a);

static void alloc_unlink(struct cl_alloc *a)
{
	for (struct cl_alloc **p = &a->c->allocs; *p; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			break;
		}
}

static void alloc_free(struct cl_alloc *a)
{
	fibril_timer_cancel(a->deadline);
	fibril_timer_cancel(a->retry);
	while (a->waiters) {
		struct cl_waiter *w = a->waiters;

		a->waiters = w->next;
		free(w);
	}
	free(a->labels);
	free(a->enc);
	free(a);
}

/* Tell the waiters (err 0: the identity is now held here), then drop it
 * unless one of them took a reference. */
static void alloc_finish(struct cl_alloc *a, int err)
{
	struct ep_cluster *c = a->c;
	struct ep_manager *mg = c->mg;
	struct cl_waiter *w = a->waiters;

	a->waiters = NULL;
	alloc_unlink(a);
	fibril_timer_cancel(a->deadline);
	a->deadline = NULL;
	if (!err)
		fibril_series_observe(fibril_metric_series(c->m.latency, NULL),
				      (double)(now_ns() - a->started_ns) / 1e9);
	while (w) {
		struct cl_waiter *next = w->next;

		w->fn(mg, w->ud, err);
		free(w);
		w = next;
	}
	if (!err) {
		ep_retry_pending(mg); /* label changes waiting for it */
		struct ep_identity *id = ep_identity_find(mg, a->number);

		if (id && id->refs == 0 && !id->reserved) {
			id->refs = 1;
			ep_identity_release(mg, id);
		}
	}
	alloc_free(a);
}

/* The transaction made this node reference number n for the labels. */
static void alloc_done(struct cl_alloc *a, uint32_t n, bool reused)
{
	struct ep_cluster *c = a->c;
	struct ep_manager *mg = c->mg;
	struct ep_identity *id = ep_identity_find(mg, n);
	char shown[256];

	used_set(c, n, true);
	a->number = n;
	shown_labels(a->labels, shown, sizeof(shown));
	if (id && strcmp(id->labels, a->labels)) {
		/* a restored endpoint holds n for other labels: keep it, refuse this */
		fibril_error(mg->m, "identity %u for labels %s: this node holds %u for other labels "
			     "(restored before the kvstore said otherwise)", n, shown, n);
		c->stats.conflicts++;
		count(c, "conflict");
		alloc_finish(a, -EEXIST);
		return;
	}
	if (!id && ep_identity_insert(mg, n, a->labels, &id)) {
		alloc_finish(a, -ENOMEM);
		return;
	}
	if (reused) {
		c->stats.reused++;
		count(c, "reused");
	} else {
		c->stats.allocated++;
		count(c, "allocated");
	}
	/* the time is what tests/bench/bench_cluster.sh reads its p50/p99 from */
	fibril_info(mg->m, "identity %u %s for labels %s (cluster-wide, in %.3f ms)", n,
		    reused ? "referenced" : "allocated", shown,
		    (double)(now_ns() - a->started_ns) / 1e6);
	alloc_finish(a, 0);
}

static void on_alloc_deadline(struct fibril_timer *t, void *ud)
{
	struct cl_alloc *a = ud;
	struct ep_cluster *c = a->c;

	(void)t;
	a->deadline = NULL;
	c->stats.timeouts++;
	count(c, "timeout");
	fibril_timer_cancel(a->retry);
	a->retry = NULL;
	if (a->inflight) {
		/* its request still runs: the waiters hear now, the object goes with the answer */
		a->expired = true;
		struct cl_waiter *w = a->waiters;

		a->waiters = NULL;
		alloc_unlink(a);
		while (w) {
			struct cl_waiter *next = w->next;

			w->fn(c->mg, w->ud, a->last_err ? a->last_err : -ETIMEDOUT);
			free(w);
			w = next;
		}
		return;
	}
	alloc_finish(a, a->last_err ? a->last_err : -ETIMEDOUT);
}

/* an answer for an allocation the deadline (or stop) gave up on */
static bool alloc_gone(struct cl_alloc *a)
{
	a->inflight = false;
	if (!a->expired && a->c->running)
		return false;
	if (!a->expired)
		alloc_unlink(a);
	alloc_free(a);
	return true;
}

static void on_alloc_retry(struct fibril_timer *t, void *ud)
{
	struct cl_alloc *a = ud;

	(void)t;
	a->retry = NULL;
	alloc_kick(a);
}

static void alloc_retry_later(struct cl_alloc *a, int err)
{
	a->last_err = err;
	if (!a->retry)
		a->retry = fibril_timer_add(a->c->mg->m, CL_RETRY_MS, 0, on_alloc_retry, a);
}

/* The start of every answer of an allocation's request: NULL when it was
 * given up on, or failed (retried later). */
static struct cl_alloc *alloc_answer(void *ud, int err)
{
	struct cl_alloc *a = ud;

	if (alloc_gone(a))
		return NULL;
	if (err) {
		alloc_retry_later(a, err);
		return NULL;
	}
	return a;
}

/* Send one transaction of the allocation (its answer goes to cb). */
static void alloc_txn(struct cl_alloc *a, const struct fibril_kv_compare *cmp, size_t ncmp,
		      const struct fibril_kv_op *ok, size_t nok, const struct fibril_kv_op *failed,
		      size_t nfailed, fibril_kv_txn_fn cb)
{
	struct ep_cluster *c = a->c;
	int rc;

	a->inflight = true;
	rc = c->kv->txn(c->kvctx, cmp, ncmp, ok, nok, failed, nfailed, cb, a);
	if (rc) {
		a->inflight = false;
		alloc_retry_later(a, rc);
	}
}

/* The number some node references the labels with (the value/ prefix's
 * keys), 0: none. */
static uint32_t referenced_number(struct cl_alloc *a, const struct fibril_kv *kvs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t num;

		if (cl_number_parse(kvs[i].value, kvs[i].value_len, FIBRIL_IDENTITY_LOCAL_MIN,
				    EP_IDENTITY_MAX, &num)) {
			a->c->stats.bad_records++;
			fibril_warn(a->c->mg->m, "identity reference %s (revision %lld): not a number "
				    "in %u..%u; ignored", kvs[i].key, (long long)kvs[i].mod_revision,
				    FIBRIL_IDENTITY_LOCAL_MIN, EP_IDENTITY_MAX);
			continue;
		}
		return num;
	}
	return 0;
}

static void alloc_step_reuse(struct cl_alloc *a, uint32_t n);
static void alloc_step_create(struct cl_alloc *a);

static void on_create(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
		      int64_t revision)
{
	struct cl_alloc *a = alloc_answer(ud, err);

	(void)revision;
	if (!a)
		return;
	if (succeeded) {
		alloc_done(a, a->number, false);
		return;
	}
	/* the number is taken, or another node created these labels first:
	 * the failure branch read who references them */
	used_set(a->c, a->number, true);
	a->c->stats.races_lost++;
	count(a->c, "race-lost");
	if (++a->attempts >= CL_MAX_ATTEMPTS) {
		alloc_finish(a, -EAGAIN);
		return;
	}
	uint32_t held = referenced_number(a, kvs, n);
	if (held)
		alloc_step_reuse(a, held);
	else
		alloc_step_create(a);
}

static uint32_t pick_free(struct ep_cluster *c)
{
	for (uint32_t n = FIBRIL_IDENTITY_LOCAL_MIN; n <= EP_IDENTITY_MAX; n++)
		if (!used_get(c, n) && !ep_identity_find(c->mg, n))
			return n;
	return 0;
}

static void alloc_step_create(struct cl_alloc *a)
{
	struct ep_cluster *c = a->c;
	char idk[64], num[16];
	char *prefix = ref_key(a->enc, NULL), *mine = ref_key(a->enc, c->node);
	uint32_t n = pick_free(c);

	if (!prefix || !mine) {
		free(prefix);
		free(mine);
		alloc_finish(a, -ENOMEM);
		return;
	}
	if (!n) {
		free(prefix);
		free(mine);
		alloc_finish(a, -ENOSPC);
		return;
	}
	a->number = n;
	id_key(idk, sizeof(idk), n);
	snprintf(num, sizeof(num), "%u", n);
	struct fibril_kv_compare cmp[2] = {
		{.key = idk, .target = FIBRIL_KV_TARGET_CREATE, .result = FIBRIL_KV_EQUAL, .number = 0},
		{.key = prefix, .target = FIBRIL_KV_TARGET_VERSION, .result = FIBRIL_KV_EQUAL,
		 .number = 0, .prefix = true},
	};
	struct fibril_kv_op ok[2] = {
		{.type = FIBRIL_KV_OP_PUT, .key = idk, .value = a->enc},
		{.type = FIBRIL_KV_OP_PUT, .key = mine, .value = num, .lease = c->lease},
	};
	struct fibril_kv_op held[1] = {
		{.type = FIBRIL_KV_OP_GET, .key = prefix, .prefix = true},
	};
	alloc_txn(a, cmp, 2, ok, 2, held, 1, on_create);
	free(prefix);
	free(mine);
}

static void on_reuse(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
		     int64_t revision)
{
	struct cl_alloc *a = alloc_answer(ud, err);

	(void)kvs, (void)n, (void)revision;
	if (!a)
		return;
	if (succeeded)
		alloc_done(a, a->number, true);
	else
		alloc_step_create(a); /* id/<n> went (GC) or names other labels */
}

static void alloc_step_reuse(struct cl_alloc *a, uint32_t n)
{
	struct ep_cluster *c = a->c;
	char idk[64], num[16];
	char *mine = ref_key(a->enc, c->node);

	if (!mine) {
		alloc_finish(a, -ENOMEM);
		return;
	}
	a->number = n;
	id_key(idk, sizeof(idk), n);
	snprintf(num, sizeof(num), "%u", n);
	struct fibril_kv_compare cmp[1] = {
		{.key = idk, .target = FIBRIL_KV_TARGET_VALUE, .result = FIBRIL_KV_EQUAL, .value = a->enc},
	};
	struct fibril_kv_op ok[1] = {
		{.type = FIBRIL_KV_OP_PUT, .key = mine, .value = num, .lease = c->lease},
	};
	alloc_txn(a, cmp, 1, ok, 1, NULL, 0, on_reuse);
	free(mine);
}

static void alloc_kick(struct cl_alloc *a)
{
	struct ep_cluster *c = a->c;

	if (a->inflight || a->retry || !c->running)
		return;
	if (!c->lease || c->deletes_inflight) {
		a->last_err = c->lease ? 0 : -ENOTCONN; /* waits for the lease / a release */
		return;
	}
	alloc_step_create(a);
}

static void kick_all(struct ep_cluster *c)
{
	for (struct cl_alloc *a = c->allocs; a; a = a->next)
		alloc_kick(a);
}

int ep_cluster_allocate(struct ep_manager *mg, const char *labels, ep_cluster_done_fn fn, void *ud)
{
	struct ep_cluster *c = mg->cluster;
	struct cl_alloc *a;
	struct cl_waiter *w;
	char why[CL_WHY];

	if (!c || !c->running)
		return -ENOTCONN;
	for (a = c->allocs; a; a = a->next)
		if (!strcmp(a->labels, labels))
			break;
	if (!(w = calloc(1, sizeof(*w))))
		return -ENOMEM;
	w->fn = fn;
	w->ud = ud;
	if (!a) {
		char *enc = malloc(CL_LABELS_MAX);
		int rc;

		if (!enc || !(a = calloc(1, sizeof(*a)))) {
			free(enc);
			free(w);
			return -ENOMEM;
		}
		if ((rc = cl_labels_encode(labels, enc, CL_LABELS_MAX, why, sizeof(why)))) {
			fibril_warn(mg->m, "no cluster identity: %s", why);
			free(enc);
			free(a);
			free(w);
			return rc;
		}
		a->c = c;
		a->enc = enc;
		a->started_ns = now_ns();
		if (!(a->labels = strdup(labels))) {
			free(enc);
			free(a);
			free(w);
			return -ENOMEM;
		}
		a->deadline = fibril_timer_add(mg->m, c->timeout_ms, 0, on_alloc_deadline, a);
		a->next = c->allocs;
		c->allocs = a;
		a->waiters = w;
		alloc_kick(a);
		return 0;
	}
	w->next = a->waiters;
	a->waiters = w;
	return 0;
}

/* ---- references of identities held here -------------------------------------------- */

static void on_unref(void *ud, int err, int64_t revision)
{
	struct ep_cluster *c = ud;

	(void)revision;
	if (c->deletes_inflight)
		c->deletes_inflight--;
	if (err && err != -ECANCELED)
		fibril_warn(c->mg->m, "could not delete this node's identity reference: %s "
			    "(it goes with the lease)", strerror(-err));
	if (!c->deletes_inflight)
		kick_all(c);
}

void ep_cluster_unref(struct ep_manager *mg, uint32_t n, const char *labels)
{
	struct ep_cluster *c = mg->cluster;
	char enc[CL_LABELS_MAX], why[CL_WHY];

	if (!c || !c->running || !c->lease)
		return;
	if (cl_labels_encode(labels, enc, sizeof(enc), why, sizeof(why)))
		return;
	char *k = ref_key(enc, c->node);

	if (!k)
		return;
	c->stats.released++;
	count(c, "released");
	/* allocations wait for it: a reference put before the delete lands would go */
	if (c->kv->del(c->kvctx, k, false, on_unref, c) == 0)
		c->deletes_inflight++;
	free(k);
	(void)n;
}

struct cl_ensure {
	struct ep_cluster *c;
	uint32_t number;
	char *labels;
	char *enc;
	int64_t lease;
};

static void ensure_free(struct cl_ensure *e)
{
	free(e->labels);
	free(e->enc);
	free(e);
}

static void on_ensure_ref(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
			  int64_t revision)
{
	struct cl_ensure *e = ud;
	struct ep_cluster *c = e->c;
	char shown[256];

	(void)revision;
	if (err || !c->running) {
		ensure_free(e);
		return;
	}
	shown_labels(e->labels, shown, sizeof(shown));
	if (!succeeded) {
		/* id/<n> names other labels: the endpoints keep their number here */
		c->stats.conflicts++;
		count(c, "conflict");
		fibril_error(c->mg->m, "identity %u: this node holds it for labels %s, the kvstore for "
			     "%.*s; the endpoints keep it (delete them to re-allocate)", e->number,
			     shown, n && kvs[0].value_len < 200 ? (int)kvs[0].value_len : 0,
			     n ? kvs[0].value : "");
	} else {
		c->stats.ensured++;
	}
	ensure_free(e);
}

/* id/<n> = labels unless it exists; then this node's reference when id/<n>
 * names the labels (else report the conflict). */
static void on_ensure_id(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
			 int64_t revision)
{
	struct cl_ensure *e = ud;
	struct ep_cluster *c = e->c;
	char idk[64], num[16];

	(void)succeeded, (void)kvs, (void)n, (void)revision;
	if (err || !c->running || e->lease != c->lease) {
		ensure_free(e);
		return;
	}
	id_key(idk, sizeof(idk), e->number);
	snprintf(num, sizeof(num), "%u", e->number);
	char *mine = ref_key(e->enc, c->node);

	if (!mine) {
		ensure_free(e);
		return;
	}
	struct fibril_kv_compare cmp[1] = {
		{.key = idk, .target = FIBRIL_KV_TARGET_VALUE, .result = FIBRIL_KV_EQUAL, .value = e->enc},
	};
	struct fibril_kv_op ok[1] = {
		{.type = FIBRIL_KV_OP_PUT, .key = mine, .value = num, .lease = c->lease},
	};
	struct fibril_kv_op no[1] = {{.type = FIBRIL_KV_OP_GET, .key = idk}};

	if (c->kv->txn(c->kvctx, cmp, 1, ok, 1, no, 1, on_ensure_ref, e))
		ensure_free(e);
	free(mine);
}

static void ensure_one(struct ep_cluster *c, const struct ep_identity *id)
{
	struct cl_ensure *e = calloc(1, sizeof(*e));
	char why[CL_WHY], idk[64];

	if (!e || !(e->enc = malloc(CL_LABELS_MAX)) || !(e->labels = strdup(id->labels)) ||
	    cl_labels_encode(id->labels, e->enc, CL_LABELS_MAX, why, sizeof(why))) {
		if (e)
			ensure_free(e);
		return;
	}
	e->c = c;
	e->number = id->id;
	e->lease = c->lease;
	used_set(c, id->id, true);
	id_key(idk, sizeof(idk), id->id);
	struct fibril_kv_compare cmp[1] = {
		{.key = idk, .target = FIBRIL_KV_TARGET_CREATE, .result = FIBRIL_KV_EQUAL, .number = 0},
	};
	struct fibril_kv_op ok[1] = {{.type = FIBRIL_KV_OP_PUT, .key = idk, .value = e->enc}};

	if (c->kv->txn(c->kvctx, cmp, 1, ok, 1, NULL, 0, on_ensure_id, e))
		ensure_free(e);
}

static void ensure_all(struct ep_cluster *c)
{
	struct ep_manager *mg = c->mg;

	for (size_t i = 0; i < mg->nidents; i++)
		if (mg->idents[i]->refs > 0)
			ensure_one(c, mg->idents[i]);
}

/* ---- the id/ prefix: numbers in use, every identity's labels ------------------------ */

static void read_ids(struct ep_cluster *c);

/* Index of the first known identity with number >= n. */
static size_t known_at(const struct ep_cluster *c, uint32_t n)
{
	size_t lo = 0, hi = c->nknown;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (c->known[mid].number < n)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const char *ep_cluster_labels(struct ep_manager *mg, uint32_t n)
{
	struct ep_cluster *c = mg->cluster;
	size_t i;

	if (!c)
		return NULL;
	i = known_at(c, n);
	return i < c->nknown && c->known[i].number == n ? c->known[i].labels : NULL;
}

/* FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED (labels) or _DELETED (NULL) */
static void publish_identity(struct ep_cluster *c, uint32_t n, const char *labels)
{
	size_t ll = labels ? strlen(labels) + 1 : 0, len = sizeof(struct fibril_identity_event) + ll;
	struct fibril_identity_event *ev = calloc(1, len);

	if (!ev)
		return;
	ev->sz = sizeof(*ev);
	ev->identity = n;
	if (labels) {
		ev->labels = sizeof(*ev);
		memcpy((char *)ev + sizeof(*ev), labels, ll);
	}
	if (fibril_bus_publish(c->mg->m, labels ? FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED
						: FIBRIL_ENDPOINT_TOPIC_IDENTITY_DELETED,
			       1, ev, len))
		c->stats.errors++;
	free(ev);
}

static void known_forget(struct ep_cluster *c, size_t i)
{
	uint32_t n = c->known[i].number;

	free(c->known[i].labels);
	memmove(&c->known[i], &c->known[i + 1], (c->nknown - i - 1) * sizeof(*c->known));
	c->nknown--;
	publish_identity(c, n, NULL);
}

/* id/<n> names labels ('\n' form) now */
static void known_set(struct ep_cluster *c, uint32_t n, const char *labels)
{
	size_t i = known_at(c, n);

	if (i < c->nknown && c->known[i].number == n) {
		if (!strcmp(c->known[i].labels, labels))
			return;
		char *l = strdup(labels);

		if (!l)
			return;
		free(c->known[i].labels);
		c->known[i].labels = l;
	} else {
		struct cl_known *v = mod_grow(c->known, c->nknown, &c->known_cap, sizeof(*v), 64);

		if (!v)
			return;
		c->known = v;
		char *l = strdup(labels);

		if (!l)
			return;
		memmove(&c->known[i + 1], &c->known[i], (c->nknown - i) * sizeof(*c->known));
		c->known[i] = (struct cl_known){.number = n, .labels = l};
		c->nknown++;
	}
	publish_identity(c, n, labels);
}

static void known_clear(struct ep_cluster *c)
{
	for (size_t i = 0; i < c->nknown; i++)
		free(c->known[i].labels);
	free(c->known);
	c->known = NULL;
	c->nknown = c->known_cap = 0;
}

static void note_id_key(struct ep_cluster *c, const struct fibril_kv *kv, bool present)
{
	const char *rest = kv->key + strlen(CL_ID_PREFIX);
	char labels[CL_LABELS_MAX], why[CL_WHY];
	uint32_t n;

	if (strncmp(kv->key, CL_ID_PREFIX, strlen(CL_ID_PREFIX)) ||
	    cl_number_parse(rest, strlen(rest), 1, UINT32_MAX, &n)) {
		c->stats.bad_records++;
		return;
	}
	used_set(c, n, present);
	if (!present) {
		size_t i = known_at(c, n);

		if (i < c->nknown && c->known[i].number == n)
			known_forget(c, i);
		return;
	}
	if (n < FIBRIL_IDENTITY_LOCAL_MIN ||
	    cl_labels_decode(kv->value, kv->value_len, labels, sizeof(labels), why, sizeof(why))) {
		c->stats.bad_records++;
		fibril_warn(c->mg->m, "identity record %s (revision %lld): %s; ignored", kv->key,
			    (long long)kv->mod_revision,
			    n < FIBRIL_IDENTITY_LOCAL_MIN ? "a reserved number" : why);
		return;
	}
	known_set(c, n, labels);
}

static void on_id_watch(void *ud, int err, enum fibril_kv_event_type type, const struct fibril_kv *kv,
			int64_t revision)
{
	struct ep_cluster *c = ud;

	(void)revision;
	if (!c->running)
		return;
	if (err) {
		if (err == -ERANGE)
			read_ids(c);
		return;
	}
	note_id_key(c, kv, type == FIBRIL_KV_EVENT_PUT);
}

static void on_ids(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	struct ep_cluster *c = ud;

	c->reading = false;
	if (!c->running || err)
		return; /* the allocations find taken numbers by their compares */
	memset(c->used, 0, sizeof(c->used));
	/* the identities gone meanwhile (kvs is sorted by key, not number) */
	uint8_t *seen = calloc(c->nknown ? c->nknown : 1, 1);

	for (size_t i = 0; seen && i < n; i++) {
		const char *rest = kvs[i].key + strlen(CL_ID_PREFIX);
		uint32_t num;
		size_t at;

		if (!strncmp(kvs[i].key, CL_ID_PREFIX, strlen(CL_ID_PREFIX)) &&
		    !cl_number_parse(rest, strlen(rest), 1, UINT32_MAX, &num) &&
		    (at = known_at(c, num)) < c->nknown && c->known[at].number == num)
			seen[at] = 1;
	}
	for (size_t i = c->nknown; seen && i-- > 0;)
		if (!seen[i])
			known_forget(c, i);
	free(seen);
	for (size_t i = 0; i < n; i++)
		note_id_key(c, &kvs[i], true);
	if (!c->watch)
		c->watch = c->kv->watch(c->kvctx, CL_ID_PREFIX, revision + 1, on_id_watch, c);
}

static void read_ids(struct ep_cluster *c)
{
	if (c->reading)
		return;
	c->reading = true;
	if (c->kv->get(c->kvctx, CL_ID_PREFIX, true, on_ids, c))
		c->reading = false;
}

/* ---- the lease ---------------------------------------------------------------------------- */

static void lease_start(struct ep_cluster *c);

static void on_lease_retry(struct fibril_timer *t, void *ud)
{
	struct ep_cluster *c = ud;

	(void)t;
	c->lease_retry = NULL;
	lease_start(c);
}

static void on_lease(void *ud, int err, int64_t lease, int64_t ttl)
{
	struct ep_cluster *c = ud;

	(void)ttl;
	c->lease_pending = false;
	if (!c->running)
		return;
	if (err) {
		fibril_health_report(c->mg->m, "identities", FIBRIL_HEALTH_DEGRADED,
				     "no kvstore lease for the identity references: %s (retrying)",
				     strerror(-err));
		if (!c->lease_retry)
			c->lease_retry = fibril_timer_add(c->mg->m, 1000, 0, on_lease_retry, c);
		return;
	}
	c->lease = lease;
	fibril_health_report(c->mg->m, "identities", FIBRIL_HEALTH_OK,
			     "cluster-wide through the kvstore as node %s", c->node);
	ensure_all(c);
	read_ids(c);
	kick_all(c);
}

static void lease_start(struct ep_cluster *c)
{
	if (c->lease_pending || !c->running)
		return;
	c->lease = 0;
	c->lease_pending = true;
	if (c->kv->lease_grant(c->kvctx, c->ttl_s, on_lease, c)) {
		c->lease_pending = false;
		if (!c->lease_retry)
			c->lease_retry = fibril_timer_add(c->mg->m, 1000, 0, on_lease_retry, c);
	}
}

static int on_kv_event(const struct fibril_event *ev, void *ud)
{
	struct ep_cluster *c = ud;
	const struct fibril_kvstore_event *k = ev->payload;

	if (!c->running || !c->lease)
		return 0;
	if (ev->payload_len >= offsetof(struct fibril_kvstore_event, lease) + sizeof(k->lease) &&
	    k->lease == c->lease) {
		fibril_warn(c->mg->m, "the identity lease was lost: granting another and writing the "
			    "references again");
		lease_start(c);
	}
	return 0;
}

/* ---- GC ------------------------------------------------------------------------------------ */

static struct cl_gc_cand *cand_find(struct ep_cluster *c, uint32_t n)
{
	for (size_t i = 0; i < c->ncands; i++)
		if (c->cands[i].number == n)
			return &c->cands[i];
	return NULL;
}

static void on_gc_delete(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
			 int64_t revision)
{
	struct ep_cluster *c = ud;

	(void)kvs, (void)n, (void)revision;
	if (!err && succeeded) {
		c->stats.gc_deleted++;
		count(c, "gc-deleted");
	}
}

static int cmp_kv_key(const void *a, const void *b)
{
	return strcmp(((const struct fibril_kv *)a)->key, ((const struct fibril_kv *)b)->key);
}

static void on_gc_read(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	struct ep_cluster *c = ud;
	uint64_t now = now_ms();

	(void)revision;
	c->gc_running = false;
	if (err || !c->running)
		return;
	for (size_t i = 0; i < c->ncands; i++)
		c->cands[i].seen = false;
	/* the references, sorted by key, to find a label set's by prefix */
	struct fibril_kv *refs = calloc(n ? n : 1, sizeof(*refs));
	size_t nrefs = 0;

	if (!refs)
		return;
	for (size_t i = 0; i < n; i++)
		if (!strncmp(kvs[i].key, CL_VALUE_PREFIX, strlen(CL_VALUE_PREFIX)))
			refs[nrefs++] = kvs[i];
	qsort(refs, nrefs, sizeof(*refs), cmp_kv_key);
	for (size_t i = 0; i < n; i++) {
		const struct fibril_kv *kv = &kvs[i];
		const char *rest = kv->key + strlen(CL_ID_PREFIX);
		uint32_t num;

		if (strncmp(kv->key, CL_ID_PREFIX, strlen(CL_ID_PREFIX)) ||
		    cl_number_parse(rest, strlen(rest), 1, UINT32_MAX, &num))
			continue;
		char *prefix = ref_key(kv->value, NULL);

		if (!prefix)
			break;
		size_t plen = strlen(prefix), lo = 0, hi = nrefs;

		while (lo < hi) { /* first reference key >= prefix */
			size_t mid = (lo + hi) / 2;

			if (strcmp(refs[mid].key, prefix) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		bool referenced = lo < nrefs && !strncmp(refs[lo].key, prefix, plen);
		struct ep_identity *held = ep_identity_find(c->mg, num);

		if (referenced || (held && held->refs)) {
			free(prefix);
			continue;
		}
		struct cl_gc_cand *cand = cand_find(c, num);

		if (!cand || cand->mod_revision != kv->mod_revision) {
			if (!cand) {
				struct cl_gc_cand *v = realloc(c->cands, (c->ncands + 1) * sizeof(*v));

				if (!v) {
					free(prefix);
					break;
				}
				c->cands = v;
				cand = &c->cands[c->ncands++];
			}
			*cand = (struct cl_gc_cand){.number = num, .mod_revision = kv->mod_revision,
						    .since_ms = now};
		}
		cand->seen = true;
		if (now - cand->since_ms >= c->gc_grace_ms) {
			char idk[64];

			id_key(idk, sizeof(idk), num);
			struct fibril_kv_compare cmp[2] = {
				{.key = idk, .target = FIBRIL_KV_TARGET_MOD, .result = FIBRIL_KV_EQUAL,
				 .number = kv->mod_revision},
				{.key = prefix, .target = FIBRIL_KV_TARGET_VERSION,
				 .result = FIBRIL_KV_EQUAL, .number = 0, .prefix = true},
			};
			struct fibril_kv_op ok[1] = {{.type = FIBRIL_KV_OP_DELETE, .key = idk}};

			c->kv->txn(c->kvctx, cmp, 2, ok, 1, NULL, 0, on_gc_delete, c);
			cand->seen = false; /* forgotten: seen again if it is still there */
		}
		free(prefix);
	}
	free(refs);
	size_t o = 0;

	for (size_t i = 0; i < c->ncands; i++)
		if (c->cands[i].seen)
			c->cands[o++] = c->cands[i];
	c->ncands = o;
}

static void on_gc_tick(struct fibril_timer *t, void *ud)
{
	struct ep_cluster *c = ud;

	(void)t;
	if (!c->running || c->gc_running || !c->kv->connected(c->kvctx))
		return;
	c->gc_running = true;
	if (c->kv->get(c->kvctx, "state/identities/v1/", true, on_gc_read, c))
		c->gc_running = false;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static int check_mode(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "auto") || !strcmp(value, "local") || !strcmp(value, "kvstore"))
		return 0;
	snprintf(why, len, "'%s' is not an identity allocation mode: auto, local or kvstore", value);
	return -EINVAL;
}

const struct fibril_config_key ep_config_keys[] = {
	{.name = "identity-allocation", .type = FIBRIL_CONFIG_STRING, .default_value = "auto",
	 .help = "local: numbers of this node only; kvstore: cluster-wide through the kvstore; "
		 "auto: kvstore when the kvstore and nodes modules are loaded",
	 .check = check_mode},
	{.name = "identity-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "How long a new endpoint waits for the kvstore to give its labels an identity "
		 "before it is refused", .min = 100, .max = 600000},
	{.name = "identity-lease-ttl", .type = FIBRIL_CONFIG_DURATION, .default_value = "15s",
	 .help = "TTL of the lease this node's identity references are held by",
	 .min = 2000, .max = 3600000},
	{.name = "identity-gc-interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "1m",
	 .help = "How often the identities no node references are looked for", .min = 100,
	 .max = 86400000},
	{.name = "identity-gc-grace", .type = FIBRIL_CONFIG_DURATION, .default_value = "5m",
	 .help = "How long an identity stays unreferenced before the GC deletes it", .min = 0,
	 .max = 86400000},
	{0},
};

int ep_cluster_init(struct ep_manager *mg)
{
	struct ep_cluster *c = calloc(1, sizeof(*c));
	static const char *const result[] = {"result", NULL};
	static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005,
					 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5};

	if (!c)
		return -ENOMEM;
	c->mg = mg;
	c->m.ops = fibril_metric_register(mg->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_endpoint_cluster_identity_ops_total",
		.help = "Cluster-wide identity operations by result", .labels = result});
	c->m.latency = fibril_metric_register(mg->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_endpoint_cluster_identity_allocation_seconds",
		.help = "Time to get a cluster-wide identity for labels not held on this node",
		.buckets = buckets, .nbuckets = sizeof(buckets) / sizeof(buckets[0])});
	c->sub = fibril_bus_subscribe(mg->m, FIBRIL_KVSTORE_TOPIC_LEASE_LOST, 1, on_kv_event, c);
	mg->cluster_state = c;
	return c->sub ? 0 : -ENOMEM;
}

int ep_cluster_start(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;
	const char *mode = fibril_config_string(mg->m, "identity-allocation");
	void *kvctx = NULL, *nctx = NULL;
	const struct fibril_kvstore_ops *kv;
	const struct fibril_nodes_ops *nodes;

	if (!c || !mode || !strcmp(mode, "local"))
		return 0;
	kv = (const struct fibril_kvstore_ops *)fibril_service_lookup(mg->m, FIBRIL_KVSTORE_CAPABILITY,
								     2, &kvctx);
	nodes = (const struct fibril_nodes_ops *)fibril_service_lookup(mg->m, FIBRIL_NODES_CAPABILITY,
								       1, &nctx);
	if (!strcmp(mode, "auto") && (!kv || !nodes))
		return 0;
	if (!kv || !FIBRIL_SERVICE_HAS(kv, txn) || !kv->txn) {
		fibril_module_set_error(mg->m, "identity-allocation = kvstore: no kvstore (interface 2) "
					"is loaded");
		return -ENOENT;
	}
	struct fibril_node self = {.sz = sizeof(self)};
	const char *name = NULL;

	if (nodes && nodes->self(nctx, &self) == 0 && self.name[0])
		name = self.name;
	if (!name)
		name = fibril_config_get("agent", "node-name");
	char host[CL_NODE_MAX] = "";

	if (!name || !*name) {
		if (gethostname(host, sizeof(host) - 1))
			snprintf(host, sizeof(host), "node");
		name = host;
	}
	snprintf(c->node, sizeof(c->node), "%s", name);
	c->kv = kv;
	c->kvctx = kvctx;
	c->ttl_s = (int64_t)((fibril_config_duration_ms(mg->m, "identity-lease-ttl") + 999) / 1000);
	c->timeout_ms = fibril_config_duration_ms(mg->m, "identity-timeout");
	c->gc_interval_ms = fibril_config_duration_ms(mg->m, "identity-gc-interval");
	c->gc_grace_ms = fibril_config_duration_ms(mg->m, "identity-gc-grace");
	c->running = true;
	mg->cluster = c;
	mg->identity_released = ep_cluster_unref;
	c->gc_timer = fibril_timer_add(mg->m, c->gc_interval_ms, c->gc_interval_ms, on_gc_tick, c);
	fibril_info(mg->m, "identities are cluster-wide through the kvstore (node %s, lease TTL %llds)",
		    c->node, (long long)c->ttl_s);
	lease_start(c);
	return 0;
}

void ep_cluster_stop(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;

	if (!c || !c->running)
		return;
	c->running = false;
	mg->cluster = NULL;
	if (c->watch)
		c->kv->unwatch(c->kvctx, c->watch);
	c->watch = NULL;
	fibril_timer_cancel(c->gc_timer);
	fibril_timer_cancel(c->lease_retry);
	c->gc_timer = c->lease_retry = NULL;
	free(c->cands);
	c->cands = NULL;
	c->ncands = 0;
	known_clear(c);
	/* waiters hear now; an allocation whose request runs goes with its answer */
	while (c->allocs) {
		struct cl_alloc *a = c->allocs;

		if (a->inflight) {
			alloc_unlink(a);
			a->expired = true;
			struct cl_waiter *w = a->waiters;

			a->waiters = NULL;
			while (w) {
				struct cl_waiter *next = w->next;

				w->fn(mg, w->ud, -ECANCELED);
				free(w);
				w = next;
			}
			fibril_timer_cancel(a->deadline);
			fibril_timer_cancel(a->retry);
			a->deadline = a->retry = NULL;
		} else {
			alloc_finish(a, -ECANCELED);
		}
	}
	/* the references stay until the lease runs out: a restart keeps them */
	c->lease = 0;
	c->lease_pending = false;
}

void ep_cluster_free(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;

	if (!c)
		return;
	ep_cluster_stop(mg);
	if (c->sub)
		fibril_bus_unsubscribe(c->sub);
	free(c);
	mg->cluster_state = NULL;
}
