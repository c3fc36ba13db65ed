/* modules/endpoint/identity.c - numeric security identities: the reserved
 * ones (Cilium's numbers, labels "reserved:<name>"), and one local identity
 * per distinct label set from FIBRIL_IDENTITY_LOCAL_MIN, reference-counted
 * by the endpoints holding it. A released number is not handed out again
 * until the search has gone round the whole range: numbers are searched
 * upwards from where the last search stopped, and the point the next run
 * starts from is kept on disk (<state-dir>/endpoint/identities, advanced in
 * blocks of EP_IDENTITY_BLOCK), so a restart does not reuse the numbers of
 * the previous run either. Labels that say nothing about what a pod is
 * (Cilium's default label filter: pod-template-hash,
 * controller-revision-hash, the kubernetes.io / k8s.io domains...) are left
 * out of an endpoint's labels (ep_label_counts_for_identity), so the pods of
 * one workload share an identity across rollouts. */
#include "endpoint_int.h"
#include "grow.h"
#include "label_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RESUME_FILE "identities"

static const char *const reserved_names[] = {
	[FIBRIL_IDENTITY_HOST] = "host",
	[FIBRIL_IDENTITY_WORLD] = "world",
	[FIBRIL_IDENTITY_UNMANAGED] = "unmanaged",
	[FIBRIL_IDENTITY_HEALTH] = "health",
	[FIBRIL_IDENTITY_INIT] = "init",
	[FIBRIL_IDENTITY_REMOTE_NODE] = "remote-node",
	[FIBRIL_IDENTITY_KUBE_APISERVER] = "kube-apiserver",
	[FIBRIL_IDENTITY_INGRESS] = "ingress",
	[FIBRIL_IDENTITY_WORLD_IPV4] = "world-ipv4",
	[FIBRIL_IDENTITY_WORLD_IPV6] = "world-ipv6",
};

static uint32_t label_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* ---- which labels count for the identity: Cilium's default filter, shared
 * with the policy module (label_filter.h) ------------------------------------ */

bool ep_label_counts_for_identity(const char *label, size_t len)
{
	return mod_label_counts_for_identity(label, len);
}

void ep_identities_init(struct ep_manager *mg)
{
	for (uint32_t i = FIBRIL_IDENTITY_HOST; i <= FIBRIL_IDENTITY_WORLD_IPV6; i++) {
		struct ep_identity *id = &mg->reserved[i];
		char buf[64];

		snprintf(buf, sizeof(buf), "reserved:%s", reserved_names[i]);
		id->id = i;
		id->reserved = true;
		id->refs = 0;
		id->labels = strdup(buf);
		id->hash = id->labels ? label_hash(id->labels) : 0;
	}
	mg->next_identity = FIBRIL_IDENTITY_LOCAL_MIN;
	mg->identity_resume = FIBRIL_IDENTITY_LOCAL_MIN;
}

void ep_identities_reset(struct ep_manager *mg)
{
	for (size_t i = 0; i < mg->nidents; i++) {
		free(mg->idents[i]->labels);
		free(mg->idents[i]);
	}
	free(mg->idents);
	mg->idents = NULL;
	mg->nidents = mg->idents_cap = 0;
	for (size_t i = 0; i < sizeof(mg->reserved) / sizeof(mg->reserved[0]); i++)
		mg->reserved[i].refs = 0;
	mg->next_identity = FIBRIL_IDENTITY_LOCAL_MIN;
	mg->identity_resume = FIBRIL_IDENTITY_LOCAL_MIN;
}

void ep_identities_free(struct ep_manager *mg)
{
	ep_identities_reset(mg);
	for (size_t i = 0; i < sizeof(mg->reserved) / sizeof(mg->reserved[0]); i++) {
		free(mg->reserved[i].labels);
		mg->reserved[i].labels = NULL;
	}
}

/* Index of the first local identity with id >= n. */
static size_t lower_bound(const struct ep_manager *mg, uint32_t n)
{
	size_t lo = 0, hi = mg->nidents;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (mg->idents[mid]->id < n)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct ep_identity *ep_identity_find(struct ep_manager *mg, uint32_t n)
{
	if (n >= FIBRIL_IDENTITY_HOST && n <= FIBRIL_IDENTITY_WORLD_IPV6)
		return &mg->reserved[n];
	size_t i = lower_bound(mg, n);

	return i < mg->nidents && mg->idents[i]->id == n ? mg->idents[i] : NULL;
}

static struct ep_identity *find_labels(struct ep_manager *mg, const char *labels, uint32_t hash)
{
	for (uint32_t i = FIBRIL_IDENTITY_HOST; i <= FIBRIL_IDENTITY_WORLD_IPV6; i++)
		if (mg->reserved[i].hash == hash && !strcmp(mg->reserved[i].labels, labels))
			return &mg->reserved[i];
	for (size_t i = 0; i < mg->nidents; i++)
		if (mg->idents[i]->hash == hash && !strcmp(mg->idents[i]->labels, labels))
			return mg->idents[i];
	return NULL;
}

static int insert_local(struct ep_manager *mg, uint32_t n, const char *labels, uint32_t hash,
			struct ep_identity **out)
{
	struct ep_identity **v = mod_grow(mg->idents, mg->nidents, &mg->idents_cap, sizeof(*v), 64);

	if (!v)
		return -ENOMEM;
	mg->idents = v;
	struct ep_identity *id = calloc(1, sizeof(*id));

	if (!id || !(id->labels = strdup(labels))) {
		free(id);
		return -ENOMEM;
	}
	id->id = n;
	id->hash = hash;
	id->refs = 1;
	size_t at = lower_bound(mg, n);

	memmove(&mg->idents[at + 1], &mg->idents[at], (mg->nidents - at) * sizeof(*mg->idents));
	mg->idents[at] = id;
	mg->nidents++;
	*out = id;
	return 0;
}

static uint32_t wrap_identity(uint32_t n)
{
	const uint32_t span = EP_IDENTITY_MAX - FIBRIL_IDENTITY_LOCAL_MIN + 1;

	if (n < FIBRIL_IDENTITY_LOCAL_MIN)
		n = FIBRIL_IDENTITY_LOCAL_MIN;
	return FIBRIL_IDENTITY_LOCAL_MIN + (n - FIBRIL_IDENTITY_LOCAL_MIN) % span;
}

static int write_resume(struct ep_manager *mg, uint32_t resume)
{
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "next %u\n", resume);

	return fibril_state_write_atomic(mg->dirfd, RESUME_FILE, buf, (size_t)n, 0600);
}

void ep_identity_load_resume(struct ep_manager *mg)
{
	char buf[64] = "";
	int fd = openat(mg->dirfd, RESUME_FILE, O_RDONLY | O_CLOEXEC);
	unsigned v;

	if (fd < 0)
		return; /* first run */
	ssize_t n = read(fd, buf, sizeof(buf) - 1);

	close(fd);
	if (n > 0)
		buf[n] = '\0';
	if (n <= 0 || sscanf(buf, "next %u", &v) != 1 || v < FIBRIL_IDENTITY_LOCAL_MIN ||
	    v > EP_IDENTITY_MAX) {
		fibril_warn(mg->m, "%s/%s is not \"next <n>\" (%u..%u): starting the identity search at %u",
			    mg->dir, RESUME_FILE, FIBRIL_IDENTITY_LOCAL_MIN, EP_IDENTITY_MAX,
			    FIBRIL_IDENTITY_LOCAL_MIN);
		return;
	}
	mg->next_identity = v;
	mg->identity_resume = v;
}

/* A free local number, searching upwards from next_identity; records a
 * new resume point first when the search passes the recorded one. */
static int new_number(struct ep_manager *mg, uint32_t *out)
{
	const uint32_t span = EP_IDENTITY_MAX - FIBRIL_IDENTITY_LOCAL_MIN + 1;
	uint32_t n = wrap_identity(mg->next_identity);
	uint32_t resume = mg->identity_resume;
	bool moved = false;

	if (mg->nidents >= span)
		return -ENOSPC;
	for (uint32_t tries = 0; tries < span; tries++, n = wrap_identity(n + 1)) {
		if (n == resume) {
			resume = wrap_identity(n + EP_IDENTITY_BLOCK);
			moved = true;
		}
		if (ep_identity_find(mg, n))
			continue;
		if (moved) {
			int rc = write_resume(mg, resume);

			if (rc) {
				fibril_error(mg->m, "cannot record the identity resume point in %s/%s: %s",
					     mg->dir, RESUME_FILE, strerror(-rc));
				return -EIO;
			}
			mg->identity_resume = resume;
		}
		mg->next_identity = wrap_identity(n + 1);
		*out = n;
		return 0;
	}
	return -ENOSPC;
}

int ep_identity_acquire(struct ep_manager *mg, const char *labels, struct ep_identity **out)
{
	uint32_t hash = label_hash(labels);
	struct ep_identity *id = find_labels(mg, labels, hash);
	uint32_t n;
	int rc;

	if (id) {
		id->refs++;
		*out = id;
		return 0;
	}
	if (mg->cluster)
		return -EINPROGRESS; /* the kvstore gives the number (cluster.c) */
	if ((rc = new_number(mg, &n)))
		return rc;
	if ((rc = insert_local(mg, n, labels, hash, out)))
		return rc;
	/* the label set is kept one label per line: one log line, comma-separated */
	char *shown = strdup(labels);
	for (char *c = shown; c && *c; c++)
		if (*c == '\n')
			*c = ',';
	fibril_info(mg->m, "identity %u allocated for labels %s", n, shown ? shown : labels);
	free(shown);
	return 0;
}

int ep_identity_insert(struct ep_manager *mg, uint32_t n, const char *labels,
		       struct ep_identity **out)
{
	int rc = insert_local(mg, n, labels, label_hash(labels), out);

	if (rc == 0)
		(*out)->refs = 0;
	return rc;
}

int ep_identity_restore(struct ep_manager *mg, const char *labels, uint32_t wanted,
			struct ep_identity **out)
{
	uint32_t hash = label_hash(labels);
	struct ep_identity *id = find_labels(mg, labels, hash);

	if (id) {
		if (id->id != wanted)
			fibril_warn(mg->m, "restored labels %s had identity %u, but the set already has %u",
				    labels, wanted, id->id);
		id->refs++;
		*out = id;
		return 0;
	}
	if (wanted >= FIBRIL_IDENTITY_LOCAL_MIN && wanted <= EP_IDENTITY_MAX &&
	    !ep_identity_find(mg, wanted))
		return insert_local(mg, wanted, labels, hash, out);
	fibril_warn(mg->m, "restored identity %u for labels %s is taken or out of range: allocating another",
		    wanted, labels);
	return ep_identity_acquire(mg, labels, out);
}

void ep_identity_release(struct ep_manager *mg, struct ep_identity *id)
{
	if (!id || id->refs == 0)
		return;
	if (--id->refs > 0 || id->reserved)
		return;
	size_t at = lower_bound(mg, id->id);

	if (at < mg->nidents && mg->idents[at] == id) {
		memmove(&mg->idents[at], &mg->idents[at + 1],
			(mg->nidents - at - 1) * sizeof(*mg->idents));
		mg->nidents--;
	}
	fibril_info(mg->m, "identity %u released (no endpoint left)", id->id);
	if (mg->cluster && mg->identity_released)
		mg->identity_released(mg, id->id, id->labels);
	free(id->labels);
	free(id);
}

const char *ep_identity_scope(const struct ep_manager *mg, uint32_t n)
{
	if (n < FIBRIL_IDENTITY_LOCAL_MIN)
		return "reserved";
	if (n >= FIBRIL_IDENTITY_CIDR_MIN)
		return "cidr";
	if (mg->cluster)
		return mg->cluster->crd ? "cluster:crd" : "cluster:kvstore";
	return "local";
}

struct json_object *ep_identity_to_json(const struct ep_manager *mg, const struct ep_identity *id)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_int64(id->id));
	json_object_object_add(o, "labels", ep_labels_to_json(id->labels));
	json_object_object_add(o, "reserved", json_object_new_boolean(id->reserved));
	json_object_object_add(o, "scope", json_object_new_string(ep_identity_scope(mg, id->id)));
	json_object_object_add(o, "endpoints", json_object_new_int64(id->refs));
	return o;
}
