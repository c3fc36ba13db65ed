/* modules/endpoint/store.c - the endpoint state under <state-dir>/endpoint/:
 * a group-committed write-ahead journal (<fibril/journal.h>)
 * "endpoints.journal" / "endpoints.snap" holding one record per change, and
 * "identities" (where the next run's identity search starts, identity.c).
 *
 * A record is JSON text: an endpoint's state (ep_buf_endpoint, for_file:
 * its "id" names it) when it was created or changed, or
 * {"id":N,"deleted":true} when it went. Writes append on the loop (no I/O);
 * the API answers a change only once its batch is flushed (ep_store_sync,
 * api.c). Compaction writes one record per endpoint of the table.
 *
 * Before the journal (fibril < SDK 1.5) each endpoint had its own
 * "<id>.json" file; restore.c moves such files into the journal on the
 * first start (ep_store_migrated removes them once that is durable). */
#include "endpoint_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fibril/journal.h>

#define EP_JOURNAL_NAME "endpoints"

/* The record's endpoint ID and whether it is a deletion, read without
 * parsing it (the journal's replay runs in the start hook, and each kept
 * record is parsed in full when it is restored, which checks its id
 * again): every record this module writes begins {"id":N, and a deletion
 * is exactly {"id":N,"deleted":true}. false: another shape, for json-c. */
static bool record_head(const char *rec, size_t len, int64_t *id, bool *deleted)
{
	static const char head[] = "{\"id\":", del[] = ",\"deleted\":true}";
	size_t at = sizeof(head) - 1, start = at;
	int64_t v = 0;

	if (len <= at || memcmp(rec, head, at) || rec[at] == '0')
		return false;
	while (at < len && at - start < 6 && rec[at] >= '0' && rec[at] <= '9')
		v = v * 10 + (rec[at++] - '0');
	if (at == start || at >= len || rec[at] != ',')
		return false;
	*id = v;
	*deleted = len - at == sizeof(del) - 1 && !memcmp(rec + at, del, sizeof(del) - 1);
	return true;
}

/* Replay: the newest text of each endpoint ID into mg->stored. */
static int replay_record(void *ud, const void *rec, size_t len)
{
	struct ep_manager *mg = ud;
	int64_t id = 0;
	bool deleted = false;

	if (!record_head(rec, len, &id, &deleted)) {
		struct json_tokener *tok = json_tokener_new();
		struct json_object *o = tok ? json_tokener_parse_ex(tok, rec, (int)len) : NULL;
		struct json_object *v;

		if (o && json_tokener_get_error(tok) == json_tokener_success &&
		    json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "id", &v) &&
		    json_object_is_type(v, json_type_int))
			id = json_object_get_int64(v);
		if (o && json_object_object_get_ex(o, "deleted", &v))
			deleted = json_object_get_boolean(v);
		json_object_put(o);
		json_tokener_free(tok);
	}
	if (id < 1 || id > EP_ID_MAX) {
		/* checksummed yet unreadable: nothing can say which endpoint it was */
		fibril_error(mg->m, "%s/%s.journal: a record names no endpoint ID: skipped", mg->dir,
			     EP_JOURNAL_NAME);
		mg->stored_bad++;
		return 0;
	}
	if (!mg->stored && !(mg->stored = calloc(EP_ID_MAX + 1, sizeof(*mg->stored))))
		return -ENOMEM;
	free(mg->stored[id]);
	mg->stored[id] = NULL;
	if (!deleted) {
		char *text = malloc(len + 1);

		if (!text)
			return -ENOMEM;
		memcpy(text, rec, len);
		text[len] = '\0';
		mg->stored[id] = text;
	}
	return 0;
}

/* Compaction: the table is the whole state (refused while a restore has
 * not put the stored endpoints back into it yet). */
static int snapshot_state(void *ud, struct fibril_journal *j)
{
	struct ep_manager *mg = ud;

	if (!mg->store_live)
		return -EAGAIN;
	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_buf b = { 0 };
		int rc;

		if (!mg->eps[i])
			continue;
		ep_buf_endpoint(&b, mg->eps[i], true);
		rc = b.oom ? -ENOMEM : fibril_journal_snapshot_add(j, b.p, b.len);
		free(b.p);
		if (rc)
			return rc;
	}
	return 0;
}

void ep_store_free_stored(struct ep_manager *mg)
{
	if (mg->stored)
		for (size_t i = 0; i <= EP_ID_MAX; i++)
			free(mg->stored[i]);
	free(mg->stored);
	mg->stored = NULL;
}

int ep_store_open(struct ep_manager *mg, char *why, size_t len)
{
	const char *base = fibril_state_dir();
	char path[PATH_MAX];

	if (!base || !*base) {
		snprintf(why, len, "no [agent] state-dir");
		return -EINVAL;
	}
	if (snprintf(path, sizeof(path), "%s/%s", base, EP_MODULE) >= (int)sizeof(path)) {
		snprintf(why, len, "state dir path too long");
		return -ENAMETOOLONG;
	}
	if (mkdir(base, 0755) && errno != EEXIST) {
		int err = errno;

		snprintf(why, len, "cannot create %s: %s", base, strerror(err));
		return -err;
	}
	if (mkdir(path, 0700) && errno != EEXIST) {
		int err = errno;

		snprintf(why, len, "cannot create %s: %s", path, strerror(err));
		return -err;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		int err = errno;

		snprintf(why, len, "cannot open %s: %s", path, strerror(err));
		return -err;
	}
	snprintf(mg->dir, sizeof(mg->dir), "%s", path);
	mg->dirfd = fd;
	mg->store_live = false;
	mg->stored_bad = 0;

	struct fibril_journal_opts o = {
		.sz = sizeof(o),
		.dir = mg->dir,
		.name = EP_JOURNAL_NAME,
		.replay = replay_record,
		.snapshot = snapshot_state,
		.ud = mg,
	};
	int rc = fibril_journal_open(mg->m, &o, &mg->journal, why, len);

	if (rc) {
		ep_store_free_stored(mg);
		ep_store_close(mg);
	}
	return rc;
}

void ep_store_close(struct ep_manager *mg)
{
	/* flushes and answers every waiter (they may still unlink in dirfd) */
	fibril_journal_close(mg->journal);
	mg->journal = NULL;
	mg->store_live = false;
	ep_store_free_stored(mg);
	if (mg->dirfd >= 0)
		close(mg->dirfd);
	mg->dirfd = -1;
}

static int append(struct ep_manager *mg, uint16_t id, const char *text, size_t len)
{
	int rc = mg->journal ? fibril_journal_append(mg->journal, text, len) : -EBADF;

	if (rc)
		fibril_error(mg->m, "endpoint %u: cannot journal its state in %s/%s.journal: %s", id,
			     mg->dir, EP_JOURNAL_NAME, strerror(-rc));
	return rc;
}

int ep_store_write(struct ep_manager *mg, const struct ep_endpoint *ep)
{
	struct ep_buf b = { 0 };

	ep_buf_endpoint(&b, ep, true);
	int rc = b.oom ? -ENOMEM : append(mg, ep->id, b.p, b.len);

	free(b.p);
	return rc;
}

int ep_store_write_text(struct ep_manager *mg, uint16_t id, const char *text, size_t len)
{
	return append(mg, id, text, len);
}

int ep_store_remove(struct ep_manager *mg, uint16_t id)
{
	char text[48];
	int n = snprintf(text, sizeof(text), "{\"id\":%u,\"deleted\":true}", id);

	return append(mg, id, text, (size_t)n);
}

int ep_store_sync(struct ep_manager *mg, void (*done)(void *ud, int status), void *ud)
{
	return mg->journal ? fibril_journal_sync(mg->journal, done, ud) : -EBADF;
}

/* ---- the per-endpoint files of before the journal ------------------------------------ */

struct migration {
	struct ep_manager *mg;
	size_t n;
	uint16_t ids[];
};

/* The migrated records are on disk: their old files go. Runs on the loop
 * (maybe inside ep_store_close, with dirfd still open). */
static void migrated(void *ud, int status)
{
	struct migration *mi = ud;
	struct ep_manager *mg = mi->mg;
	size_t gone = 0;

	if (status == 0 && mg->dirfd >= 0) {
		for (size_t i = 0; i < mi->n; i++) {
			char name[32];

			snprintf(name, sizeof(name), "%u.json", mi->ids[i]);
			if (unlinkat(mg->dirfd, name, 0) == 0 || errno == ENOENT)
				gone++;
			else
				fibril_warn(mg->m, "cannot remove the migrated state file %s/%s: %s",
					    mg->dir, name, strerror(errno));
		}
		if (fsync(mg->dirfd))
			fibril_warn(mg->m, "cannot fsync %s: %s", mg->dir, strerror(errno));
		fibril_info(mg->m, "moved %zu endpoint state files into %s/%s.journal", gone, mg->dir,
			    EP_JOURNAL_NAME);
	} else {
		fibril_warn(mg->m, "the migrated endpoint state is not durable (%s): the %zu state files "
			    "stay and are read again at the next start", strerror(status ? -status : EBADF),
			    mi->n);
	}
	free(mi);
}

int ep_store_migrated(struct ep_manager *mg, const uint16_t *ids, size_t n)
{
	struct migration *mi;
	int rc;

	if (!n)
		return 0;
	if (!(mi = malloc(sizeof(*mi) + n * sizeof(mi->ids[0]))))
		return -ENOMEM;
	mi->mg = mg;
	mi->n = n;
	memcpy(mi->ids, ids, n * sizeof(ids[0]));
	if ((rc = ep_store_sync(mg, migrated, mi)))
		free(mi);
	return rc;
}
