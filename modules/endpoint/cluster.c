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
 * of them is written again (ensure).
 * This file: the allocations and the helpers the cluster files share;
 * cluster_refs.c: this node's references; cluster_ids.c: the id/ prefix
 * (numbers in use, every identity's labels); cluster_gc.c: the GC;
 * cluster_setup.c: the config keys, the lifecycle and the lease. */
#include "endpoint_int.h"
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CL_RETRY_MS 250
#define CL_MAX_ATTEMPTS 64

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

/* ---- helpers (the cl_ ones are shared by the cluster files) ----------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cl_count(struct ep_cluster *c, const char *result)
{
	fibril_series_inc(fibril_metric_labels(c->m.ops, result));
}

static bool used_get(const struct ep_cluster *c, uint32_t n)
{
	return n <= EP_IDENTITY_MAX && (c->used[n / 8] >> (n % 8)) & 1;
}

void cl_used_set(struct ep_cluster *c, uint32_t n, bool on)
{
	if (n > EP_IDENTITY_MAX)
		return;
	if (on)
		c->used[n / 8] |= (uint8_t)(1u << (n % 8));
	else
		c->used[n / 8] &= (uint8_t)~(1u << (n % 8));
}

void cl_id_key(char *buf, size_t len, uint32_t n)
{
	snprintf(buf, len, CL_ID_PREFIX "%u", n);
}

/* value/<enc>/ (node NULL) or value/<enc>/<node>, malloc'd */
char *cl_ref_key(const char *enc, const char *node)
{
	size_t len = strlen(CL_VALUE_PREFIX) + strlen(enc) + 2 + (node ? strlen(node) : 0);
	char *k = malloc(len);

	if (k)
		snprintf(k, len, CL_VALUE_PREFIX "%s/%s", enc, node ? node : "");
	return k;
}

void cl_shown_labels(const char *labels, char *buf, size_t len)
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

	cl_used_set(c, n, true);
	a->number = n;
	cl_shown_labels(a->labels, shown, sizeof(shown));
	if (id && strcmp(id->labels, a->labels)) {
		/* a restored endpoint holds n for other labels: keep it, refuse this */
		fibril_error(mg->m, "identity %u for labels %s: this node holds %u for other labels "
			     "(restored before the kvstore said otherwise)", n, shown, n);
		c->stats.conflicts++;
		cl_count(c, "conflict");
		alloc_finish(a, -EEXIST);
		return;
	}
	if (!id && ep_identity_insert(mg, n, a->labels, &id)) {
		alloc_finish(a, -ENOMEM);
		return;
	}
	if (reused) {
		c->stats.reused++;
		cl_count(c, "reused");
	} else {
		c->stats.allocated++;
		cl_count(c, "allocated");
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
	cl_count(c, "timeout");
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
static void crd_step_create(struct cl_alloc *a);

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
	cl_used_set(a->c, a->number, true);
	a->c->stats.races_lost++;
	cl_count(a->c, "race-lost");
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
	char *prefix = cl_ref_key(a->enc, NULL), *mine = cl_ref_key(a->enc, c->node);
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
	cl_id_key(idk, sizeof(idk), n);
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
	char *mine = cl_ref_key(a->enc, c->node);

	if (!mine) {
		alloc_finish(a, -ENOMEM);
		return;
	}
	a->number = n;
	cl_id_key(idk, sizeof(idk), n);
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

/* ---- CRD mode: CiliumIdentity objects (cluster_crd.c says how) ------------------------- */

static void crd_send(struct cl_alloc *a, const char *method, const char *body,
		     fibril_k8s_reply_fn cb)
{
	struct ep_cluster *c = a->c;
	char name[16];
	int rc;

	snprintf(name, sizeof(name), "%u", a->number);
	a->inflight = true;
	rc = c->k8s->request(c->k8sctx, method, FIBRIL_K8S_CILIUM_IDENTITIES, NULL,
			     strcmp(method, "POST") ? name : NULL, body, cb, a);
	if (rc) {
		a->inflight = false;
		alloc_retry_later(a, rc);
	}
}

/* An answer the allocation cannot use: say why, retry (the deadline bounds it). */
static void crd_unexpected(struct cl_alloc *a, int status, const char *reason, const char *message)
{
	if (status)
		fibril_warn(a->c->mg->m, "CiliumIdentity %u: HTTP %d %s; retrying", a->number, status,
			    reason);
	else
		fibril_warn(a->c->mg->m, "CiliumIdentity %u: %s; retrying", a->number, message);
	a->c->stats.errors++;
	alloc_retry_later(a, status ? -EPROTO : -ENOTCONN);
}

static void on_crd_get(void *ud, int status, const char *reason, const char *body, int err,
		       const char *message)
{
	struct cl_alloc *a = alloc_answer(ud, err);

	if (!a)
		return;
	if (status == 200) {
		int match = cl_crd_labels_match(body, a->labels);

		if (match > 0) {
			alloc_done(a, a->number, true);
			return;
		}
		if (match < 0)
			a->c->stats.bad_records++;
		/* the number names other labels: the next one of the sequence */
		a->c->stats.races_lost++;
		cl_count(a->c, "race-lost");
		if (++a->attempts >= CL_MAX_ATTEMPTS) {
			alloc_finish(a, -EAGAIN);
			return;
		}
		crd_step_create(a);
	} else if (status == 404) {
		crd_step_create(a); /* deleted since: create it again */
	} else {
		crd_unexpected(a, status, reason, message);
	}
}

static void on_crd_create(void *ud, int status, const char *reason, const char *body, int err,
			  const char *message)
{
	struct cl_alloc *a = alloc_answer(ud, err);

	(void)body;
	if (!a)
		return;
	if (status == 201)
		alloc_done(a, a->number, false);
	else if (status == 409 && !strcmp(reason, "AlreadyExists"))
		crd_send(a, "GET", NULL, on_crd_get); /* whose is it? */
	else if (status == 404) {
		/* the collection is not served: said once per allocation */
		if (a->last_err != -ENOENT)
			fibril_warn(a->c->mg->m, "identity-allocation = crd: the API server does not "
				    "serve ciliumidentities.cilium.io (its CustomResourceDefinition "
				    "is not installed: kubectl apply -f deploy/kubernetes/crds.yaml)");
		a->c->stats.errors++;
		alloc_retry_later(a, -ENOENT);
	} else
		crd_unexpected(a, status, reason, message);
}

/* Try the labels' next candidate number: their hash plus the attempts so
 * far, skipping numbers this node holds for other labels. */
static void crd_step_create(struct cl_alloc *a)
{
	const uint32_t range = EP_IDENTITY_MAX - FIBRIL_IDENTITY_LOCAL_MIN + 1;
	uint32_t first = cl_crd_first(a->labels), n = 0;

	for (; a->attempts < CL_MAX_ATTEMPTS; a->attempts++) {
		n = FIBRIL_IDENTITY_LOCAL_MIN + (first + a->attempts) % range;
		struct ep_identity *id = ep_identity_find(a->c->mg, n);

		if (!id || !strcmp(id->labels, a->labels))
			break;
	}
	if (a->attempts >= CL_MAX_ATTEMPTS) {
		alloc_finish(a, -EAGAIN);
		return;
	}
	a->number = n;
	char *body = cl_crd_identity_body(n, a->labels);

	if (!body) {
		alloc_finish(a, -ENOMEM);
		return;
	}
	crd_send(a, "POST", body, on_crd_create);
	free(body);
}

static void alloc_kick(struct cl_alloc *a)
{
	struct ep_cluster *c = a->c;

	if (a->inflight || a->retry || !c->running)
		return;
	if (c->crd) {
		crd_step_create(a);
		return;
	}
	if (!c->lease || c->deletes_inflight) {
		a->last_err = c->lease ? 0 : -ENOTCONN; /* waits for the lease / a release */
		return;
	}
	alloc_step_create(a);
}

void cl_kick_all(struct ep_cluster *c)
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

/* Stop: the waiters hear now; an allocation whose request runs goes with
 * its answer. */
void cl_allocs_cancel(struct ep_cluster *c)
{
	struct ep_manager *mg = c->mg;

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
}
