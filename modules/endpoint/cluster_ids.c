/* modules/endpoint/cluster_ids.c - the id/ prefix of cluster-wide
 * identities, read whole when the lease is granted and then watched (a
 * compacted watch reads it again): which numbers are in use (the
 * allocations' first guess of a free one) and every identity's labels,
 * whichever node allocated it (ep_cluster_labels), each change published on
 * the bus (FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED / _DELETED). */
#include "endpoint_int.h"
#include "grow.h"
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* an identity of the cluster as its id/<n> record says (whichever node
 * allocated it) */
struct cl_known {
	uint32_t number;
	char *labels; /* '\n' form */
};

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
	if (c->crd)
		return cl_crd_labels(c, n);
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

void cl_identity_event(struct ep_cluster *c, uint32_t n, const char *labels)
{
	publish_identity(c, n, labels);
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

void cl_known_clear(struct ep_cluster *c)
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
	cl_used_set(c, n, present);
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
			cl_read_ids(c);
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

void cl_read_ids(struct ep_cluster *c)
{
	if (c->reading)
		return;
	c->reading = true;
	if (c->kv->get(c->kvctx, CL_ID_PREFIX, true, on_ids, c))
		c->reading = false;
}
