/* modules/lb/origin.c - what the pinned maps cannot say about a service:
 * where its frontend came from (Kubernetes or the API) and its name. Kept
 * durably through the SDK journal in <state-dir>/lb/origins.journal (and
 * .snap), one record per upsert or delete (model.c's lb_origin_encode),
 * group-committed off the loop. The IDs still come from the pins: at start
 * the table is rebuilt from them first (traffic keeps flowing), then
 * lb_origin_apply gives each restored frontend the origin and name its last
 * record says - a record whose service ID differs from the pin's is stale
 * and ignored - and compacts the journal to the table as it now is. A
 * frontend without a record (pins from an older agent, or a crash between
 * an upsert and its flush) stays "restored": never swept as Kubernetes'. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fibril/fibril.h>

#include "grow.h"
#include "lb_mod.h"

#define ORIGIN_JOURNAL "origins"

struct lb_origin {
	struct fibril_module *m;
	struct fibril_journal *j;
	const struct lb_table *t; /* the snapshot's source, once applied */
	/* the records replayed at open, by frontend, until applied */
	struct lb_hash *h;
	struct lb_origin_rec *recs;
	size_t n, cap;
	uint64_t bad;
	char dir[4096];
	bool failed; /* an append or a flush failed (logged once) */
};

static int replay(void *ud, const void *rec, size_t len)
{
	struct lb_origin *o = ud;
	struct lb_origin_rec r;
	char err[160];
	if (lb_origin_decode(rec, len, &r, err, sizeof(err)) < 0) {
		if (!o->bad++)
			fibril_warn(o->m, "%s/%s.journal: record skipped: %s", o->dir, ORIGIN_JOURNAL,
				    err);
		return 0;
	}
	uint8_t key[24];
	uint32_t idx;
	lb_frontend_key(key, &r.addr, r.port, r.proto);
	if (lb_hash_get(o->h, key, &idx)) {
		o->recs[idx] = r; /* the newest says what the frontend became */
		return 0;
	}
	if (r.op == LB_ORIGIN_DELETED)
		return 0;
	struct lb_origin_rec *v = mod_grow(o->recs, o->n, &o->cap, sizeof(*v), 256);
	if (!v)
		return -ENOMEM;
	o->recs = v;
	if (lb_hash_put(o->h, key, (uint32_t)o->n) < 0)
		return -ENOMEM;
	o->recs[o->n++] = r;
	return 0;
}

static int rec_of(const struct lb_svc *s, uint8_t op, uint8_t *buf, size_t *len)
{
	struct lb_origin_rec r = {.op = op, .source = s->source, .proto = s->proto, .id = s->id,
				  .port = s->port, .addr = s->addr};
	if (op == LB_ORIGIN_SET && !LB_SRC_RECORDED(s->source))
		return -ENOENT; /* nothing known to keep */
	snprintf(r.name, sizeof(r.name), "%s", s->name);
	*len = lb_origin_encode(&r, buf);
	return 0;
}

static int snapshot(void *ud, struct fibril_journal *j)
{
	struct lb_origin *o = ud;
	uint8_t buf[LB_ORIGIN_HDR + LB_NAME_MAX];
	size_t len;
	if (!o->t || !o->t->svc)
		return -EAGAIN; /* not applied yet: the replayed records are the state */
	for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++) {
		const struct lb_svc *s = o->t->svc[id];
		if (s && rec_of(s, LB_ORIGIN_SET, buf, &len) == 0) {
			int rc = fibril_journal_snapshot_add(j, buf, len);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

int lb_origin_open(struct fibril_module *m, struct lb_origin **out, char *err, size_t len)
{
	const char *base = fibril_state_dir();
	*out = NULL;
	if (!base || !*base) {
		snprintf(err, len, "no [agent] state-dir");
		return -EINVAL;
	}
	struct lb_origin *o = calloc(1, sizeof(*o));
	if (!o || !(o->h = lb_hash_new(1024))) {
		free(o);
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	o->m = m;
	if (snprintf(o->dir, sizeof(o->dir), "%s/lb", base) >= (int)sizeof(o->dir)) {
		snprintf(err, len, "[agent] state-dir is too long");
		lb_origin_close(o);
		return -ENAMETOOLONG;
	}
	mkdir(base, 0755);
	struct fibril_journal_opts opts = {.sz = sizeof(opts), .dir = o->dir, .name = ORIGIN_JOURNAL,
					   .replay = replay, .snapshot = snapshot, .ud = o};
	int rc = fibril_journal_open(m, &opts, &o->j, err, len);
	if (rc < 0) {
		lb_origin_close(o);
		return rc;
	}
	*out = o;
	return 0;
}

size_t lb_origin_apply(struct lb_origin *o, const struct lb_table *t, size_t *kubernetes)
{
	size_t known = 0;
	*kubernetes = 0;
	if (!o)
		return 0;
	for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++) {
		struct lb_svc *s = t->svc[id];
		uint8_t key[24];
		uint32_t idx;
		if (!s)
			continue;
		lb_frontend_key(key, &s->addr, s->port, s->proto);
		if (!lb_hash_get(o->h, key, &idx) || o->recs[idx].op != LB_ORIGIN_SET ||
		    o->recs[idx].id != s->id)
			continue;
		s->source = o->recs[idx].source;
		snprintf(s->name, sizeof(s->name), "%s", o->recs[idx].name);
		known++;
		if (s->source == LB_SRC_K8S)
			(*kubernetes)++;
	}
	lb_hash_free(o->h);
	o->h = NULL;
	free(o->recs);
	o->recs = NULL;
	o->n = o->cap = 0;
	o->t = t;
	/* the journal now says what the table holds, nothing older */
	fibril_journal_compact(o->j);
	lb_origin_flush(o);
	return known;
}

static void flushed(void *ud, int status)
{
	struct lb_origin *o = ud;
	if (status < 0 && !o->failed) {
		o->failed = true;
		fibril_error(o->m, "cannot write %s/%s.journal: %s (service origins and names are "
				   "not kept across a restart)", o->dir, ORIGIN_JOURNAL, strerror(-status));
	}
}

void lb_origin_flush(struct lb_origin *o)
{
	if (o && o->j && !o->failed)
		fibril_journal_sync(o->j, flushed, o);
}

static void append(struct lb_origin *o, const struct lb_svc *s, uint8_t op)
{
	uint8_t buf[LB_ORIGIN_HDR + LB_NAME_MAX];
	size_t len;
	if (!o || !o->j || o->failed || rec_of(s, op, buf, &len) < 0)
		return;
	int rc = fibril_journal_append(o->j, buf, len);
	if (rc < 0)
		flushed(o, rc);
}

void lb_origin_set(struct lb_origin *o, const struct lb_svc *s)
{
	if (LB_SRC_RECORDED(s->source))
		append(o, s, LB_ORIGIN_SET);
	else
		append(o, s, LB_ORIGIN_DELETED); /* no origin known any more */
}

void lb_origin_deleted(struct lb_origin *o, const struct lb_svc *s)
{
	append(o, s, LB_ORIGIN_DELETED);
}

void lb_origin_close(struct lb_origin *o)
{
	if (!o)
		return;
	fibril_journal_close(o->j);
	lb_hash_free(o->h);
	free(o->recs);
	free(o);
}
