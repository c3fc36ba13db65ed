/* modules/endpoint/cluster_refs.c - this node's references to the
 * cluster-wide identities it holds (value/<labels>/<node>, under this
 * module's lease): the last local holder's going deletes the reference
 * (ep_cluster_unref), and when the lease is (re)granted every identity held
 * here is written again (ensure: its id/<n> when it is missing, then the
 * reference when id/<n> names the same labels; a conflict is reported, the
 * endpoints keep their number). The scheme is in cluster.c. */
#include "endpoint_int.h"
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		cl_kick_all(c);
}

void ep_cluster_unref(struct ep_manager *mg, uint32_t n, const char *labels)
{
	struct ep_cluster *c = mg->cluster;
	char enc[CL_LABELS_MAX], why[CL_WHY];

	if (!c || !c->running || !c->lease)
		return;
	if (cl_labels_encode(labels, enc, sizeof(enc), why, sizeof(why)))
		return;
	char *k = cl_ref_key(enc, c->node);

	if (!k)
		return;
	c->stats.released++;
	cl_count(c, "released");
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
	cl_shown_labels(e->labels, shown, sizeof(shown));
	if (!succeeded) {
		/* id/<n> names other labels: the endpoints keep their number here */
		c->stats.conflicts++;
		cl_count(c, "conflict");
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
	cl_id_key(idk, sizeof(idk), e->number);
	snprintf(num, sizeof(num), "%u", e->number);
	char *mine = cl_ref_key(e->enc, c->node);

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
	cl_used_set(c, id->id, true);
	cl_id_key(idk, sizeof(idk), id->id);
	struct fibril_kv_compare cmp[1] = {
		{.key = idk, .target = FIBRIL_KV_TARGET_CREATE, .result = FIBRIL_KV_EQUAL, .number = 0},
	};
	struct fibril_kv_op ok[1] = {{.type = FIBRIL_KV_OP_PUT, .key = idk, .value = e->enc}};

	if (c->kv->txn(c->kvctx, cmp, 1, ok, 1, NULL, 0, on_ensure_id, e))
		ensure_free(e);
}

void cl_ensure_all(struct ep_cluster *c)
{
	struct ep_manager *mg = c->mg;

	for (size_t i = 0; i < mg->nidents; i++)
		if (mg->idents[i]->refs > 0)
			ensure_one(c, mg->idents[i]);
}
