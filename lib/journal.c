/* lib/journal.c - the group-committed write-ahead journal of
 * <fibril/journal.h>: records appended on the loop into a memory batch,
 * written and fdatasync'd on the worker pool one batch at a time (the
 * waiters of a batch all answered by its one flush), replayed on open with
 * a torn or corrupt tail dropped, and compacted into a snapshot file by the
 * worker when the journal grows. */
#include "lib_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fibril/journal.h>

#define HDR_LEN 16
#define REC_HDR 8
#define MAX_RECORD (1u << 20)
#define DEFAULT_COMPACT (4u << 20)
#define JOURNAL_MAGIC "FBJRNL01"
#define SNAP_MAGIC "FBSNAP01"

struct waiter {
	uint64_t seq; /* answered once durable >= seq */
	fibril_journal_done_fn done;
	void *ud;
	struct waiter *next;
};

struct buf {
	char *p;
	size_t len, cap;
};

/* One flush on the worker: append `recs` to the journal and fdatasync, or
 * (compact) write the snapshot and start a new journal. Self-contained:
 * the worker touches nothing of the journal but these fields. */
struct batch {
	struct fibril_journal *j; /* NULL once the journal was closed */
	int fd, dirfd;
	char jname[NAME_MAX + 1], sname[NAME_MAX + 1];
	struct buf recs;
	uint64_t seq; /* the records up to this one are in it */
	bool compact;
	struct buf snap;
	uint64_t gen; /* compact: the new generation */
	int status, newfd;
	atomic_bool finished;
};

struct fibril_journal {
	struct fibril_module *m;
	char dir[PATH_MAX];
	char jname[NAME_MAX + 1], sname[NAME_MAX + 1];
	int dirfd, fd;
	uint64_t gen, compact_bytes, file_bytes;
	fibril_journal_snapshot_fn snapshot;
	void *ud;
	struct buf pending;
	uint64_t appended, durable;
	struct waiter *waiters, *waiters_tail;
	struct batch *inflight;
	bool failed, want_compact;
	struct buf *snap_into; /* inside the snapshot callback */
	struct fibril_journal_stats st;
};

/* ---- CRC-32C (Castagnoli), byte at a time -------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, crc_init);
	const uint8_t *p = data;
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- buffers and framing ------------------------------------------------------------- */

static int buf_reserve(struct buf *b, size_t more)
{
	if (b->len + more <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static void buf_free(struct buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static int frame(struct buf *b, const void *rec, size_t len)
{
	if (!rec && len)
		return -EINVAL;
	if (len > MAX_RECORD)
		return -E2BIG;
	if (buf_reserve(b, REC_HDR + len))
		return -ENOMEM;
	uint8_t *h = (uint8_t *)b->p + b->len;
	put32(h, (uint32_t)len);
	uint32_t crc = crc32c(0, h, 4);
	put32(h + 4, crc32c(crc, rec, len));
	if (len)
		memcpy(h + REC_HDR, rec, len);
	b->len += REC_HDR + len;
	return 0;
}

static void header(uint8_t *h, const char *magic, uint64_t gen)
{
	memcpy(h, magic, 8);
	put32(h + 8, (uint32_t)gen);
	put32(h + 12, (uint32_t)(gen >> 32));
}

/* Walks the records of data[HDR_LEN..len): each to replay; returns the
 * offset where the good records end (len when all are good). */
static size_t walk(const uint8_t *data, size_t len, fibril_journal_replay_fn replay, void *ud,
		   uint64_t *count, int *rc)
{
	size_t off = HDR_LEN;
	*rc = 0;
	while (len - off >= REC_HDR) {
		uint32_t n = get32(data + off);
		if (n > MAX_RECORD || len - off - REC_HDR < n)
			break;
		uint32_t crc = crc32c(crc32c(0, data + off, 4), data + off + REC_HDR, n);
		if (crc != get32(data + off + 4))
			break;
		if ((*rc = replay(ud, data + off + REC_HDR, n)))
			return off;
		(*count)++;
		off += REC_HDR + n;
	}
	return off;
}

/* ---- files ------------------------------------------------------------------------------ */

/* A whole file into memory: 0, -ENOENT, or an error. */
static int slurp(int dirfd, const char *name, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st)) {
		int e = -errno;
		close(fd);
		return e;
	}
	size_t cap = (size_t)st.st_size + 1, got = 0;
	uint8_t *p = malloc(cap);
	if (!p) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		if (got == cap) {
			uint8_t *q = realloc(p, cap * 2);
			if (!q) {
				free(p);
				close(fd);
				return -ENOMEM;
			}
			p = q;
			cap *= 2;
		}
		ssize_t r = read(fd, p + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			free(p);
			close(fd);
			return e;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	*out = p;
	*len = got;
	return 0;
}

/* name := header(magic, gen) + body, durably (temp, fdatasync, rename,
 * fsync the directory); returns a write fd on the new file (O_APPEND) when
 * keep_fd, else 0. */
static int write_file(int dirfd, const char *name, const char *magic, uint64_t gen,
		      const struct buf *body, bool keep_fd)
{
	char tmp[NAME_MAX + 1];
	if (snprintf(tmp, sizeof(tmp), ".%s.tmp", name) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_APPEND,
			0600);
	if (fd < 0)
		return -errno;
	uint8_t h[HDR_LEN];
	header(h, magic, gen);
	int rc = write_all(fd, h, sizeof(h));
	if (rc == 0 && body && body->len)
		rc = write_all(fd, body->p, body->len);
	if (rc == 0 && fdatasync(fd))
		rc = -errno;
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name))
		rc = -errno;
	if (rc == 0 && fsync(dirfd))
		rc = -errno;
	if (rc) {
		close(fd);
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	if (keep_fd)
		return fd;
	close(fd);
	return 0;
}

/* ---- the test crash point ------------------------------------------------------------ */

static atomic_long crash_at; /* 0: off */
static atomic_long crash_count;

/* Read on the loop at open, before any batch of this journal runs. */
static void crash_point_init(void)
{
	const char *v = getenv("FIBRIL_TEST_CRASH_POINT");
	long n = 0;
	if (v && strncmp(v, "journal-write:", 14) == 0)
		n = strtol(v + 14, NULL, 10);
	atomic_store(&crash_at, n > 0 ? n : 0);
}

static void crash_point_after_write(void)
{
	long at = atomic_load(&crash_at);
	if (at > 0 && atomic_fetch_add(&crash_count, 1) + 1 == at)
		raise(SIGKILL);
}

/* Unit tests only (tests/unit/test_journal.c): a slow disk, slept by the
 * worker between the write and the flush. */
HIDDEN atomic_uint journal_test_flush_delay_ms;

/* ---- the journal's metrics ----------------------------------------------------------- */

/* Series of the agent's families (journal_metrics_init); NULL before and
 * after, where updating one does nothing. Updated from the worker. */
static struct {
	struct fibril_series *ok, *error, *latency;
} g_flush_metrics;

int journal_metrics_init(void)
{
	static const char *const result[] = {"result", NULL};
	static const double flush_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
					       0.05,   0.1,   0.25,   0.5,   1,    5};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	struct fibril_metric *flushes = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_journal_flushes_total", .labels = result,
		.help = "Journal batches written and fdatasync'd, by result."));
	struct fibril_metric *latency = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_journal_flush_duration_seconds", .buckets = flush_buckets,
		.nbuckets = sizeof(flush_buckets) / sizeof(flush_buckets[0]),
		.help = "Time a journal batch took to write and fdatasync."));
#undef OPTS
	if (!flushes || !latency)
		return -1;
	g_flush_metrics.ok = fibril_metric_labels(flushes, "ok");
	g_flush_metrics.error = fibril_metric_labels(flushes, "error");
	g_flush_metrics.latency = fibril_metric_series(latency, NULL);
	return 0;
}

void journal_metrics_fini(void)
{
	memset(&g_flush_metrics, 0, sizeof(g_flush_metrics));
}

/* One batch flushed (on the worker). */
static void flush_observed(bool ok, double seconds)
{
	fibril_series_inc(ok ? g_flush_metrics.ok : g_flush_metrics.error);
	fibril_series_observe(g_flush_metrics.latency, seconds);
}

/* ---- batches ----------------------------------------------------------------------------- */

static void batch_work(void *ud)
{
	struct batch *b = ud;
	if (b->compact) {
		b->status = write_file(b->dirfd, b->sname, SNAP_MAGIC, b->gen, &b->snap, false);
		if (b->status == 0) {
			int fd = write_file(b->dirfd, b->jname, JOURNAL_MAGIC, b->gen, NULL, true);
			if (fd < 0)
				b->status = fd;
			else
				b->newfd = fd;
		}
	} else if (b->recs.len) {
		double t0 = mono_ms();
		b->status = write_all(b->fd, b->recs.p, b->recs.len);
		crash_point_after_write();
		unsigned delay = atomic_load(&journal_test_flush_delay_ms);
		if (delay)
			nanosleep(&(struct timespec){.tv_sec = delay / 1000,
						     .tv_nsec = (long)(delay % 1000) * 1000000},
				  NULL);
		if (b->status == 0 && fdatasync(b->fd))
			b->status = -errno;
		flush_observed(b->status == 0, (mono_ms() - t0) / 1000.0);
	}
	atomic_store(&b->finished, true);
}

static void batch_free(struct batch *b)
{
	buf_free(&b->recs);
	buf_free(&b->snap);
	free(b);
}

/* Answers the waiters whose records are durable (all of them, with status,
 * when the journal failed). A done callback may append and sync again. */
static void answer(struct fibril_journal *j, int status)
{
	while (j->waiters && (status || j->waiters->seq <= j->durable)) {
		struct waiter *w = j->waiters;
		j->waiters = w->next;
		if (!j->waiters)
			j->waiters_tail = NULL;
		if (w->done)
			w->done(w->ud, status);
		free(w);
	}
}

/* The outcome of a finished batch into the journal. */
static int absorb(struct fibril_journal *j, struct batch *b)
{
	j->inflight = NULL;
	if (b->status) {
		fibril_error(j->m, "journal %s/%s: %s failed: %s; refusing further writes", j->dir,
			     b->compact ? j->sname : j->jname, b->compact ? "compaction" : "flush",
			     strerror(-b->status));
		j->failed = true;
		return b->status;
	}
	if (b->compact) {
		close(j->fd);
		j->fd = b->newfd;
		b->newfd = -1;
		j->gen = b->gen;
		j->file_bytes = HDR_LEN;
		j->st.compactions++;
	} else if (b->recs.len) {
		j->file_bytes += b->recs.len;
		j->st.batches++;
	}
	j->durable = b->seq;
	return 0;
}

static void start_batch(struct fibril_journal *j);

static void batch_done(void *ud, int status)
{
	struct batch *b = ud;
	if (status == -ECANCELED && !atomic_load(&b->finished))
		batch_work(b); /* the agent is stopping: flush here */
	struct fibril_journal *j = b->j;
	if (!j) { /* closed meanwhile: close() took its outcome */
		if (b->newfd >= 0)
			close(b->newfd);
		batch_free(b);
		return;
	}
	int rc = absorb(j, b);
	batch_free(b);
	answer(j, rc ? -EIO : 0);
	start_batch(j);
}

static bool due_for_compaction(const struct fibril_journal *j)
{
	return j->snapshot && (j->want_compact || j->file_bytes + j->pending.len > j->compact_bytes);
}

/* The next batch, when there is none in flight and something waits. */
static void start_batch(struct fibril_journal *j)
{
	if (j->inflight || j->failed || (!j->waiters && !j->pending.len))
		return;
	struct batch *b = calloc(1, sizeof(*b));
	if (!b)
		return; /* tried again at the next sync */
	b->j = j;
	b->fd = j->fd;
	b->dirfd = j->dirfd;
	b->newfd = -1;
	memcpy(b->jname, j->jname, sizeof(b->jname));
	memcpy(b->sname, j->sname, sizeof(b->sname));
	b->seq = j->appended;
	atomic_init(&b->finished, false);
	if (due_for_compaction(j)) {
		/* the owner's state already holds every appended record */
		j->snap_into = &b->snap;
		int rc = j->snapshot(j->ud, j);
		j->snap_into = NULL;
		if (rc == 0) {
			b->compact = true;
			b->gen = j->gen + 1;
			j->want_compact = false;
			buf_free(&j->pending);
		} else {
			buf_free(&b->snap);
			fibril_warn(j->m, "journal %s/%s: the snapshot failed (%s): not compacted",
				    j->dir, j->sname, strerror(-rc));
			j->want_compact = false;
		}
	}
	if (!b->compact) {
		b->recs = j->pending;
		memset(&j->pending, 0, sizeof(j->pending));
	}
	j->inflight = b;
	if (fibril_work_submit(j->m, batch_work, batch_done, b)) {
		/* no worker pool (outside the agent's loop): flush here */
		batch_work(b);
		int rc = absorb(j, b);
		if (b->newfd >= 0)
			close(b->newfd);
		batch_free(b);
		answer(j, rc ? -EIO : 0);
	}
}

/* ---- the API ------------------------------------------------------------------------------- */

struct replay_ctx {
	fibril_journal_replay_fn fn;
	void *ud;
};

static int open_files(struct fibril_journal *j, fibril_journal_replay_fn replay, void *ud,
		      char *why, size_t len)
{
	uint8_t *data;
	size_t n;
	int rc = slurp(j->dirfd, j->sname, &data, &n);
	bool have_snap = rc == 0;
	uint64_t snap_gen = 0;
	if (rc && rc != -ENOENT) {
		snprintf(why, len, "cannot read %s/%s: %s", j->dir, j->sname, strerror(-rc));
		return rc;
	}
	if (have_snap) {
		if (n < HDR_LEN || memcmp(data, SNAP_MAGIC, 8)) {
			snprintf(why, len, "%s/%s: not a fibril journal snapshot", j->dir, j->sname);
			free(data);
			return -EBADMSG;
		}
		snap_gen = get64(data + 8);
		size_t end = walk(data, n, replay, ud, &j->st.replayed, &rc);
		free(data);
		if (rc) {
			snprintf(why, len, "%s/%s: a record was refused: %s", j->dir, j->sname,
				 strerror(rc < 0 ? -rc : rc));
			return rc < 0 ? rc : -EINVAL;
		}
		if (end != n) {
			snprintf(why, len, "%s/%s: corrupt record at offset %zu (the snapshot is "
				 "written whole: refusing to guess)", j->dir, j->sname, end);
			return -EBADMSG;
		}
	}
	rc = slurp(j->dirfd, j->jname, &data, &n);
	if (rc && rc != -ENOENT) {
		snprintf(why, len, "cannot read %s/%s: %s", j->dir, j->jname, strerror(-rc));
		return rc;
	}
	bool fresh = rc == -ENOENT;
	if (!fresh && (n < HDR_LEN || memcmp(data, JOURNAL_MAGIC, 8))) {
		snprintf(why, len, "%s/%s: not a fibril journal", j->dir, j->jname);
		free(data);
		return -EBADMSG;
	}
	if (!fresh) {
		uint64_t gen = get64(data + 8);
		if (gen > snap_gen && (have_snap || gen > 0)) {
			snprintf(why, len, "%s/%s: generation %llu is newer than the snapshot's (%llu)",
				 j->dir, j->jname, (unsigned long long)gen,
				 (unsigned long long)snap_gen);
			free(data);
			return -EBADMSG;
		}
		if (gen < snap_gen) {
			/* a crash after the snapshot and before the new journal:
			 * the snapshot holds all of it */
			fibril_info(j->m, "journal %s/%s: generation %llu is older than the snapshot: "
				    "started afresh", j->dir, j->jname, (unsigned long long)gen);
			fresh = true;
		}
	}
	if (!fresh) {
		size_t end = walk(data, n, replay, ud, &j->st.replayed, &rc);
		free(data);
		if (rc) {
			snprintf(why, len, "%s/%s: a record was refused: %s", j->dir, j->jname,
				 strerror(rc < 0 ? -rc : rc));
			return rc < 0 ? rc : -EINVAL;
		}
		j->fd = openat(j->dirfd, j->jname, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
		if (j->fd < 0) {
			rc = -errno;
			snprintf(why, len, "cannot open %s/%s: %s", j->dir, j->jname, strerror(-rc));
			return rc;
		}
		if (end != n) {
			j->st.dropped = n - end;
			fibril_warn(j->m, "journal %s/%s: dropped a torn or corrupt tail of %zu bytes at "
				    "offset %zu (never acknowledged)", j->dir, j->jname, n - end, end);
			if (ftruncate(j->fd, (off_t)end) || fdatasync(j->fd)) {
				rc = -errno;
				snprintf(why, len, "cannot truncate %s/%s: %s", j->dir, j->jname,
					 strerror(-rc));
				return rc;
			}
		}
		j->gen = snap_gen;
		j->file_bytes = end;
		return 0;
	}
	free(data);
	j->fd = write_file(j->dirfd, j->jname, JOURNAL_MAGIC, snap_gen, NULL, true);
	if (j->fd < 0) {
		rc = j->fd;
		snprintf(why, len, "cannot create %s/%s: %s", j->dir, j->jname, strerror(-rc));
		return rc;
	}
	j->gen = snap_gen;
	j->file_bytes = HDR_LEN;
	return 0;
}

int fibril_journal_open(struct fibril_module *m, const struct fibril_journal_opts *opts,
			struct fibril_journal **out, char *why, size_t len)
{
	char scratch[8];
	if (!why || !len) {
		why = scratch;
		len = sizeof(scratch);
	}
	why[0] = '\0';
	if (out)
		*out = NULL;
	if (!out || !opts || opts->sz < offsetof(struct fibril_journal_opts, ud) + sizeof(opts->ud) ||
	    !opts->dir || !opts->dir[0] || !opts->name || !opts->name[0] || !opts->replay ||
	    strchr(opts->name, '/') || strlen(opts->name) > NAME_MAX - 16 ||
	    strlen(opts->dir) >= PATH_MAX) {
		snprintf(why, len, "journal: bad options (dir, name and replay are required)");
		return -EINVAL;
	}
	struct fibril_journal *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	crash_point_init();
	j->m = m;
	j->fd = j->dirfd = -1;
	snprintf(j->dir, sizeof(j->dir), "%s", opts->dir);
	snprintf(j->jname, sizeof(j->jname), "%s.journal", opts->name);
	snprintf(j->sname, sizeof(j->sname), "%s.snap", opts->name);
	j->compact_bytes = opts->compact_bytes ? opts->compact_bytes : DEFAULT_COMPACT;
	j->snapshot = opts->snapshot;
	j->ud = opts->ud;
	int rc = mkdir_p(j->dir, 0755);
	if (rc == 0 && (j->dirfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc) {
		snprintf(why, len, "cannot open %s: %s", j->dir, strerror(-rc));
		fibril_journal_close(j);
		return rc;
	}
	rc = open_files(j, opts->replay, opts->ud, why, len);
	if (rc) {
		fibril_journal_close(j);
		return rc;
	}
	*out = j;
	return 0;
}

int fibril_journal_append(struct fibril_journal *j, const void *rec, size_t len)
{
	if (!j)
		return -EINVAL;
	if (j->failed)
		return -EIO;
	int rc = frame(&j->pending, rec, len);
	if (rc == 0) {
		j->appended++;
		j->st.records++;
	}
	return rc;
}

int fibril_journal_sync(struct fibril_journal *j, fibril_journal_done_fn done, void *ud)
{
	if (!j)
		return -EINVAL;
	if (j->failed)
		return -EIO;
	if (done) {
		struct waiter *w = calloc(1, sizeof(*w));
		if (!w)
			return -ENOMEM;
		w->seq = j->appended;
		w->done = done;
		w->ud = ud;
		if (j->waiters_tail)
			j->waiters_tail->next = w;
		else
			j->waiters = w;
		j->waiters_tail = w;
	}
	start_batch(j);
	return 0;
}

int fibril_journal_snapshot_add(struct fibril_journal *j, const void *rec, size_t len)
{
	if (!j || !j->snap_into)
		return -EINVAL;
	return frame(j->snap_into, rec, len);
}

int fibril_journal_compact(struct fibril_journal *j)
{
	if (!j || !j->snapshot)
		return -EINVAL;
	j->want_compact = true;
	return 0;
}

int fibril_journal_stats(const struct fibril_journal *j, struct fibril_journal_stats *out)
{
	if (!j || !out || out->sz < sizeof(uint32_t))
		return -EINVAL;
	struct fibril_journal_stats st = j->st;
	st.sz = out->sz;
	st.bytes = j->file_bytes;
	st.generation = j->gen;
	memcpy(out, &st, out->sz < sizeof(st) ? out->sz : sizeof(st));
	return 0;
}

void fibril_journal_close(struct fibril_journal *j)
{
	if (!j)
		return;
	int status = j->failed ? -EIO : 0;
	struct batch *b = j->inflight;
	if (b) {
		/* wait for the worker (bounded), take its outcome, leave the
		 * batch to its completion to free */
		for (int i = 0; i < 60000 && !atomic_load(&b->finished); i++)
			nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
		if (atomic_load(&b->finished)) {
			status = absorb(j, b) ? -EIO : 0;
		} else {
			status = -ETIMEDOUT;
			j->failed = true;
			j->fd = -1; /* still the worker's */
		}
		b->j = NULL;
		j->inflight = NULL;
	}
	if (status == 0 && !j->failed && j->pending.len && j->fd >= 0) {
		int rc = write_all(j->fd, j->pending.p, j->pending.len);
		if (rc == 0 && fdatasync(j->fd))
			rc = -errno;
		if (rc) {
			fibril_error(j->m, "journal %s/%s: the last flush failed: %s", j->dir,
				     j->jname, strerror(-rc));
			status = -EIO;
		} else {
			j->durable = j->appended;
		}
	}
	answer(j, status);
	answer(j, -EIO); /* none should be left; never leave one unanswered */
	buf_free(&j->pending);
	if (j->fd >= 0)
		close(j->fd);
	if (j->dirfd >= 0)
		close(j->dirfd);
	free(j);
}
