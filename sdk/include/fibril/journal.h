/* fibril/journal.h - group-committed durable state (ABI 1.4): a write-ahead
 * journal per state owner (an IPAM store, the endpoint module, a vendor's
 * module), so that nothing blocks the loop on fsync and a burst of writes
 * pays one flush.
 *
 * The owner changes its state in memory on the loop and appends a record
 * saying what changed (fibril_journal_append: a memory copy, no I/O). It
 * tells nobody of the change until fibril_journal_sync calls it back: the
 * records appended so far are written and fdatasync'd on the worker pool,
 * one batch at a time; every record appended while a batch is being flushed
 * goes into the next one, whose waiters are all answered by its single
 * flush (group commit).
 *
 * On disk, in the directory given at open:
 *   <name>.snap     the state as of generation G, as records (optional)
 *   <name>.journal  the records appended since, of generation G
 * Both start with a 16-byte header (magic, generation); each record is
 * framed as [u32 length][u32 CRC-32C of the length and the payload][payload]
 * (little-endian). fibril_journal_open replays the snapshot then the
 * journal through the replay callback. A torn tail (a crash in the middle of
 * a write) or a record whose checksum does not match ends the journal: it
 * and everything after it is dropped, logged, and the file truncated there.
 * Nobody was answered with a record that was not wholly flushed, so what is
 * dropped was never promised.
 *
 * Compaction: once the journal outgrows compact_bytes, the next flush asks
 * the owner for its whole state (the snapshot callback, on the loop: it
 * calls fibril_journal_snapshot_add per live record) and the worker writes
 * it as <name>.snap of generation G+1 (temp file, fdatasync, rename, fsync
 * the directory) then starts an empty <name>.journal of G+1 the same way.
 * A crash in between leaves a journal of generation G beside a snapshot of
 * G+1: open ignores it. Records should say what a key became ("address A
 * belongs to X", "A is free") rather than how it changed, as replay applies
 * them to whatever state the owner holds.
 *
 * Test hook: with FIBRIL_TEST_CRASH_POINT=journal-write:N in the
 * environment, the agent kills itself (SIGKILL) after writing its N-th
 * batch and before flushing it (N >= 1); tests/integration/crash_state.sh
 * uses it. Nothing else reads it.
 *
 * Use it from the loop thread only. Functions return 0 or a negative errno. */
#ifndef FIBRIL_JOURNAL_H
#define FIBRIL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_journal;

/* Called by open for each record, oldest first; non-zero stops the open
 * with that error. */
typedef int (*fibril_journal_replay_fn)(void *ud, const void *rec, size_t len);
/* Compaction: add the owner's whole state with fibril_journal_snapshot_add
 * (on the loop, inside this call); return 0 or a negative errno (then the
 * journal is not compacted this time). */
typedef int (*fibril_journal_snapshot_fn)(void *ud, struct fibril_journal *j);
/* A sync's answer, on the loop: 0 when every record appended before the
 * sync is on disk, else a negative errno (the journal is then failed: it
 * refuses further syncs and appends with -EIO). */
typedef void (*fibril_journal_done_fn)(void *ud, int status);

struct fibril_journal_opts {
	uint32_t sz;           /* sizeof(struct fibril_journal_opts) */
	const char *dir;       /* the directory of the files (created if missing) */
	const char *name;      /* the files' base name: "<name>.journal", "<name>.snap" */
	uint64_t compact_bytes; /* compact past this journal size; 0: 4 MiB */
	fibril_journal_replay_fn replay;     /* required */
	fibril_journal_snapshot_fn snapshot; /* NULL: never compacted */
	void *ud;
};

/* Opens (creating the files when missing) and replays into opts->replay.
 * m names the owner in log lines (NULL outside the agent). On error a
 * one-line reason naming the file is written to why. */
int fibril_journal_open(struct fibril_module *m, const struct fibril_journal_opts *opts,
			struct fibril_journal **out, char *why, size_t len);

/* Appends one record (at most 1 MiB) to the next batch. -EIO when failed. */
int fibril_journal_append(struct fibril_journal *j, const void *rec, size_t len);

/* done(ud, status) once every record appended so far is durable; called
 * later on the loop, never from inside this call (also when there is
 * nothing to flush). -EIO (done not called) when the journal failed. */
int fibril_journal_sync(struct fibril_journal *j, fibril_journal_done_fn done, void *ud);

/* Inside the snapshot callback only: one record of the state. */
int fibril_journal_snapshot_add(struct fibril_journal *j, const void *rec, size_t len);

/* Compacts at the next flush, whatever the journal's size. */
int fibril_journal_compact(struct fibril_journal *j);

struct fibril_journal_stats {
	uint32_t sz;          /* sizeof, set by the caller */
	uint64_t records;     /* appended since open */
	uint64_t batches;     /* flushes (one write + fdatasync each) */
	uint64_t compactions; /* snapshots written */
	uint64_t bytes;       /* the journal file's size */
	uint64_t replayed;    /* records replayed by open */
	uint64_t dropped;     /* bytes of a torn or corrupt tail dropped by open */
	uint64_t generation;
};
int fibril_journal_stats(const struct fibril_journal *j, struct fibril_journal_stats *out);

/* Flushes what is appended (waiting on this thread), answers every waiter
 * and frees the journal. NULL is fine. */
void fibril_journal_close(struct fibril_journal *j);

#ifdef __cplusplus
}
#endif
#endif
