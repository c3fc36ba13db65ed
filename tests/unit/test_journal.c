/* tests/unit/test_journal.c - unit tests of the group-committed journal
 * (lib/journal.c, <fibril/journal.h>): append, sync and replay in order;
 * a torn tail and a record with a bad checksum dropped on replay (and the
 * file truncated so appends go on cleanly); compaction into a snapshot and
 * a stale journal beside a newer snapshot ignored; answers only once the
 * batch is on disk, with a slow flush (many syncs during one flush share
 * the next one); close flushing what is left; the journal's own flush
 * metrics. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_main.h"

extern atomic_uint journal_test_flush_delay_ms; /* lib/journal.c */

static char root[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void fresh_dir(void)
{
	if (root[0])
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(root, sizeof(root), "/tmp/test_journal.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
}

static int suite_setup(void)
{
	return loop_init();
}

static int suite_teardown(void)
{
	if (root[0])
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	loop_fini();
	return 0;
}

/* The owner's state in these tests: a list of the records replayed or
 * appended, in order (a key-value owner is below). */
struct seen {
	char rec[64][32];
	size_t n;
};

static int replay_into(void *ud, const void *rec, size_t len)
{
	struct seen *s = ud;
	if (s->n == 64 || len >= 32)
		return -E2BIG;
	memcpy(s->rec[s->n], rec, len);
	s->rec[s->n++][len] = '\0';
	return 0;
}

static struct fibril_journal *open_at(const char *name, struct seen *s, uint64_t compact,
				      fibril_journal_snapshot_fn snap, void *ud)
{
	struct fibril_journal_opts o = {.sz = sizeof(o), .dir = root, .name = name,
					.compact_bytes = compact, .replay = replay_into,
					.snapshot = snap, .ud = ud ? ud : s};
	struct fibril_journal *j = NULL;
	char why[256];
	int rc = fibril_journal_open(NULL, &o, &j, why, sizeof(why));
	if (rc)
		fprintf(stderr, "open: %s\n", why);
	CU_ASSERT_EQUAL(rc, 0);
	return j;
}

static void append_str(struct fibril_journal *j, const char *text)
{
	CU_ASSERT_EQUAL(fibril_journal_append(j, text, strlen(text)), 0);
}

struct done_flag {
	int calls, status;
	off_t size_at_done; /* the journal file's size when answered */
	char path[PATH_MAX];
};

static void on_done(void *ud, int status)
{
	struct done_flag *d = ud;
	d->calls++;
	d->status = status;
	struct stat st;
	if (d->path[0] && stat(d->path, &st) == 0)
		d->size_at_done = st.st_size;
}

static void run_until(const int *calls, int want)
{
	for (int i = 0; i < 2000 && *calls < want; i++)
		loop_run_once(true);
}

static void t_append_sync_replay(void)
{
	fresh_dir();
	struct seen s = {0};
	struct fibril_journal *j = open_at("state", &s, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL(s.n, 0);
	append_str(j, "one");
	append_str(j, "two");
	append_str(j, "");
	struct done_flag d = {0};
	CU_ASSERT_EQUAL(fibril_journal_sync(j, on_done, &d), 0);
	CU_ASSERT_EQUAL(d.calls, 0); /* never from inside sync */
	run_until(&d.calls, 1);
	CU_ASSERT_EQUAL(d.calls, 1);
	CU_ASSERT_EQUAL(d.status, 0);
	/* a sync with nothing new is answered too, later */
	struct done_flag d2 = {0};
	CU_ASSERT_EQUAL(fibril_journal_sync(j, on_done, &d2), 0);
	CU_ASSERT_EQUAL(d2.calls, 0);
	run_until(&d2.calls, 1);
	CU_ASSERT_EQUAL(d2.calls, 1);
	append_str(j, "four"); /* no sync: close flushes it */
	fibril_journal_close(j);

	struct seen r = {0};
	j = open_at("state", &r, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL_FATAL(r.n, 4);
	CU_ASSERT_STRING_EQUAL(r.rec[0], "one");
	CU_ASSERT_STRING_EQUAL(r.rec[1], "two");
	CU_ASSERT_STRING_EQUAL(r.rec[2], "");
	CU_ASSERT_STRING_EQUAL(r.rec[3], "four");
	struct fibril_journal_stats st = {.sz = sizeof(st)};
	CU_ASSERT_EQUAL(fibril_journal_stats(j, &st), 0);
	CU_ASSERT_EQUAL(st.replayed, 4);
	CU_ASSERT_EQUAL(st.dropped, 0);
	fibril_journal_close(j);
}

/* The exposition (lib/metrics.c) as a string (caller frees). */
static char *expose(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	metrics_write(out, NULL);
	fclose(out);
	return text;
}

/* The journal's own metrics: registered by journal_metrics_init (the
 * host's metrics_init calls it), one flush counted with its latency;
 * after journal_metrics_fini a flush updates nothing. */
static void t_flush_metrics(void)
{
	fresh_dir();
	CU_ASSERT_EQUAL_FATAL(journal_metrics_init(), 0);
	struct seen s = {0};
	struct fibril_journal *j = open_at("metered", &s, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	append_str(j, "one");
	struct done_flag d = {0};
	CU_ASSERT_EQUAL(fibril_journal_sync(j, on_done, &d), 0);
	run_until(&d.calls, 1);
	CU_ASSERT_EQUAL(d.status, 0);
	char *text = expose();
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE fibril_journal_flushes_total counter\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_journal_flushes_total{result=\"ok\"} 1\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_journal_flushes_total{result=\"error\"} 0\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_journal_flush_duration_seconds_count 1\n"));
	free(text);
	journal_metrics_fini();
	metrics_release_owner(NULL);
	append_str(j, "two");
	struct done_flag d2 = {0};
	CU_ASSERT_EQUAL(fibril_journal_sync(j, on_done, &d2), 0);
	run_until(&d2.calls, 1);
	CU_ASSERT_EQUAL(d2.status, 0);
	text = expose();
	CU_ASSERT_PTR_NULL(strstr(text, "fibril_journal_"));
	free(text);
	fibril_journal_close(j);
}

static void file_path(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", root, name);
}

static off_t file_size(const char *name)
{
	char p[PATH_MAX];
	struct stat st;
	file_path(p, sizeof(p), name);
	return stat(p, &st) ? -1 : st.st_size;
}

static void t_torn_tail_dropped(void)
{
	fresh_dir();
	struct seen s = {0};
	struct fibril_journal *j = open_at("torn", &s, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	append_str(j, "kept-1");
	append_str(j, "kept-2");
	fibril_journal_close(j);
	off_t good = file_size("torn.journal");
	/* a crash in the middle of a write: a header announcing 20 bytes, 5 there */
	char p[PATH_MAX];
	file_path(p, sizeof(p), "torn.journal");
	int fd = open(p, O_WRONLY | O_APPEND);
	CU_ASSERT_FATAL(fd >= 0);
	static const unsigned char torn[] = {20, 0, 0, 0, 1, 2, 3, 4, 'h', 'a', 'l', 'f', '!'};
	CU_ASSERT_EQUAL(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
	close(fd);

	struct seen r = {0};
	j = open_at("torn", &r, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL(r.n, 2);
	struct fibril_journal_stats st = {.sz = sizeof(st)};
	fibril_journal_stats(j, &st);
	CU_ASSERT_EQUAL(st.dropped, sizeof(torn));
	CU_ASSERT_EQUAL(file_size("torn.journal"), good); /* truncated */
	append_str(j, "after");
	fibril_journal_close(j);
	struct seen r2 = {0};
	j = open_at("torn", &r2, 0, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(r2.n, 3);
	CU_ASSERT_STRING_EQUAL(r2.rec[2], "after");
	fibril_journal_close(j);
}

static void t_bad_checksum_dropped(void)
{
	fresh_dir();
	struct seen s = {0};
	struct fibril_journal *j = open_at("crc", &s, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	append_str(j, "first");
	append_str(j, "second");
	append_str(j, "third");
	fibril_journal_close(j);
	/* flip one byte of "second" (header 16, "first" 8+5, then 8 of header) */
	char p[PATH_MAX];
	file_path(p, sizeof(p), "crc.journal");
	int fd = open(p, O_RDWR);
	CU_ASSERT_FATAL(fd >= 0);
	off_t at = 16 + 8 + 5 + 8 + 2;
	char c;
	CU_ASSERT_EQUAL(pread(fd, &c, 1, at), 1);
	CU_ASSERT_EQUAL(c, 'c');
	c = 'X';
	CU_ASSERT_EQUAL(pwrite(fd, &c, 1, at), 1);
	close(fd);
	struct seen r = {0};
	j = open_at("crc", &r, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL_FATAL(r.n, 1); /* "second" and all after it are gone */
	CU_ASSERT_STRING_EQUAL(r.rec[0], "first");
	CU_ASSERT_EQUAL(file_size("crc.journal"), 16 + 8 + 5);
	fibril_journal_close(j);
}

/* A key-value owner: records "k=v" (set) and "k" (delete) over 8 keys. */
struct kv {
	char val[8][16];
	bool set[8];
	int snapshots;
};

static int kv_apply(void *ud, const void *rec, size_t len)
{
	struct kv *kv = ud;
	char text[32];
	if (len == 0 || len >= sizeof(text))
		return -EINVAL;
	memcpy(text, rec, len);
	text[len] = '\0';
	int k = text[0] - '0';
	if (k < 0 || k > 7)
		return -EINVAL;
	if (text[1] == '=') {
		if (strlen(text + 2) >= sizeof(kv->val[k]))
			return -E2BIG;
		memcpy(kv->val[k], text + 2, strlen(text + 2) + 1);
		kv->set[k] = true;
	} else {
		kv->set[k] = false;
	}
	return 0;
}

static int kv_snapshot(void *ud, struct fibril_journal *j)
{
	struct kv *kv = ud;
	kv->snapshots++;
	for (int k = 0; k < 8; k++) {
		if (!kv->set[k])
			continue;
		char text[32];
		int n = snprintf(text, sizeof(text), "%d=%s", k, kv->val[k]);
		int rc = fibril_journal_snapshot_add(j, text, (size_t)n);
		if (rc)
			return rc;
	}
	return 0;
}

/* Change memory, then append (as an owner does). */
static void kv_do(struct kv *kv, struct fibril_journal *j, const char *rec)
{
	CU_ASSERT_EQUAL(kv_apply(kv, rec, strlen(rec)), 0);
	append_str(j, rec);
}

static struct fibril_journal *kv_open(struct kv *kv, uint64_t compact)
{
	memset(kv, 0, sizeof(*kv));
	struct fibril_journal_opts o = {.sz = sizeof(o), .dir = root, .name = "kv",
					.compact_bytes = compact, .replay = kv_apply,
					.snapshot = kv_snapshot, .ud = kv};
	struct fibril_journal *j = NULL;
	char why[256];
	int rc = fibril_journal_open(NULL, &o, &j, why, sizeof(why));
	if (rc)
		fprintf(stderr, "open: %s\n", why);
	CU_ASSERT_EQUAL(rc, 0);
	return j;
}

static void t_compaction(void)
{
	fresh_dir();
	struct kv kv;
	struct fibril_journal *j = kv_open(&kv, 200);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	struct done_flag d = {0};
	char rec[32];
	for (int i = 0; i < 40; i++) {
		snprintf(rec, sizeof(rec), "%d=v%d", i % 5, i);
		kv_do(&kv, j, rec);
		if (i % 7 == 6)
			kv_do(&kv, j, "3");
		CU_ASSERT_EQUAL(fibril_journal_sync(j, on_done, &d), 0);
		run_until(&d.calls, i + 1);
	}
	CU_ASSERT_EQUAL(d.calls, 40);
	CU_ASSERT_EQUAL(d.status, 0);
	struct fibril_journal_stats st = {.sz = sizeof(st)};
	fibril_journal_stats(j, &st);
	CU_ASSERT(st.compactions >= 2);
	CU_ASSERT(kv.snapshots >= 2);
	CU_ASSERT(st.bytes <= 200 + 64); /* kept small */
	CU_ASSERT(file_size("kv.snap") > 16);
	struct kv want = kv;
	/* a journal of the previous generation, as a crash between the new
	 * snapshot and the new journal leaves it: */
	char jp[PATH_MAX], old[PATH_MAX];
	file_path(jp, sizeof(jp), "kv.journal");
	file_path(old, sizeof(old), "kv.journal.old");
	fibril_journal_close(j);
	CU_ASSERT_EQUAL_FATAL(link(jp, old), 0);

	struct kv got;
	j = kv_open(&got, 200);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	for (int k = 0; k < 8; k++) {
		CU_ASSERT_EQUAL(got.set[k], want.set[k]);
		if (got.set[k] && want.set[k])
			CU_ASSERT_STRING_EQUAL(got.val[k], want.val[k]);
	}
	/* one more compaction, then put the older journal back */
	fibril_journal_compact(j);
	kv_do(&got, j, "7=last");
	struct done_flag d2 = {0};
	fibril_journal_sync(j, on_done, &d2);
	run_until(&d2.calls, 1);
	CU_ASSERT_EQUAL(d2.status, 0);
	fibril_journal_close(j);
	CU_ASSERT_EQUAL_FATAL(rename(old, jp), 0); /* generation G-1 beside snapshot G */
	struct kv again;
	j = kv_open(&again, 200);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT(again.set[7]);
	CU_ASSERT_STRING_EQUAL(again.val[7], "last");
	CU_ASSERT_EQUAL(again.set[3], got.set[3]);
	fibril_journal_close(j);
}

/* Answers come only once the batch is on disk: with a slow flush, nobody
 * is answered before it ends, and the syncs made during it share the
 * next flush. */
static void t_answers_after_durability(void)
{
	fresh_dir();
	struct seen s = {0};
	struct fibril_journal *j = open_at("slow", &s, 0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	atomic_store(&journal_test_flush_delay_ms, 300);
	struct done_flag first = {0}, later[10];
	file_path(first.path, sizeof(first.path), "slow.journal");
	off_t empty = file_size("slow.journal");
	append_str(j, "a");
	fibril_journal_sync(j, on_done, &first);
	double t0 = mono_ms();
	for (int i = 0; i < 10; i++) {
		memset(&later[i], 0, sizeof(later[i]));
		file_path(later[i].path, sizeof(later[i].path), "slow.journal");
		append_str(j, "b");
		fibril_journal_sync(j, on_done, &later[i]);
	}
	/* the loop turns while the worker is in the slow flush */
	while (mono_ms() - t0 < 150)
		loop_run_once(false);
	CU_ASSERT_EQUAL(first.calls, 0);
	run_until(&first.calls, 1);
	CU_ASSERT(mono_ms() - t0 >= 290);
	CU_ASSERT_EQUAL(first.status, 0);
	CU_ASSERT_EQUAL(first.size_at_done, empty + 8 + 1); /* "a" was on disk */
	for (int i = 0; i < 10; i++)
		CU_ASSERT_EQUAL(later[i].calls, 0); /* their batch is still flushing */
	run_until(&later[9].calls, 1);
	for (int i = 0; i < 10; i++) {
		CU_ASSERT_EQUAL(later[i].calls, 1);
		CU_ASSERT_EQUAL(later[i].size_at_done, empty + 11 * 9);
	}
	atomic_store(&journal_test_flush_delay_ms, 0);
	struct fibril_journal_stats st = {.sz = sizeof(st)};
	fibril_journal_stats(j, &st);
	CU_ASSERT_EQUAL(st.batches, 2); /* 11 syncs, 2 flushes */
	CU_ASSERT_EQUAL(st.records, 11);
	fibril_journal_close(j);
}

static void t_bad_arguments(void)
{
	fresh_dir();
	struct fibril_journal *j = (void *)1;
	char why[128];
	struct fibril_journal_opts o = {.sz = sizeof(o), .dir = root, .name = "x"};
	CU_ASSERT_EQUAL(fibril_journal_open(NULL, &o, &j, why, sizeof(why)), -EINVAL); /* no replay */
	CU_ASSERT_PTR_NULL(j);
	CU_ASSERT(strstr(why, "replay") != NULL);
	o.replay = replay_into;
	o.name = "a/b";
	CU_ASSERT_EQUAL(fibril_journal_open(NULL, &o, &j, why, sizeof(why)), -EINVAL);
	/* not a journal */
	char p[PATH_MAX];
	file_path(p, sizeof(p), "junk.journal");
	FILE *f = fopen(p, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs("this is not a journal at all\n", f);
	fclose(f);
	struct seen s = {0};
	o.name = "junk";
	o.ud = &s;
	CU_ASSERT_EQUAL(fibril_journal_open(NULL, &o, &j, why, sizeof(why)), -EBADMSG);
	CU_ASSERT(strstr(why, "junk.journal") != NULL);
	CU_ASSERT_EQUAL(fibril_journal_append(NULL, "x", 1), -EINVAL);
	fibril_journal_close(NULL);
}

FIBRIL_TEST_MAIN("journal", suite_setup, suite_teardown,
		 FIBRIL_TEST(t_append_sync_replay),
		 FIBRIL_TEST(t_flush_metrics),
		 FIBRIL_TEST(t_torn_tail_dropped),
		 FIBRIL_TEST(t_bad_checksum_dropped),
		 FIBRIL_TEST(t_compaction),
		 FIBRIL_TEST(t_answers_after_durability),
		 FIBRIL_TEST(t_bad_arguments))
