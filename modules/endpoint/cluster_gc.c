/* modules/endpoint/cluster_gc.c - the GC of cluster-wide identities:
 * every identity-gc-interval, every agent reads state/identities/v1/ whole;
 * an id/<n> that no node references (and this node does not hold) becomes
 * a candidate, and one still unreferenced, unchanged, after
 * identity-gc-grace is deleted in a transaction that requires both (so
 * agents racing to delete it, or a node referencing it meanwhile, are
 * safe). */
#include "endpoint_int.h"
#include "cluster_record.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* an id/<n> seen unreferenced by the GC */
struct cl_gc_cand {
	uint32_t number;
	int64_t mod_revision;
	uint64_t since_ms;
	bool seen;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

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
		cl_count(c, "gc-deleted");
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
		char *prefix = cl_ref_key(kv->value, NULL);

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

			cl_id_key(idk, sizeof(idk), num);
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

void cl_on_gc_tick(struct fibril_timer *t, void *ud)
{
	struct ep_cluster *c = ud;

	(void)t;
	if (!c->running || c->gc_running || !c->kv->connected(c->kvctx))
		return;
	c->gc_running = true;
	if (c->kv->get(c->kvctx, "state/identities/v1/", true, on_gc_read, c))
		c->gc_running = false;
}
