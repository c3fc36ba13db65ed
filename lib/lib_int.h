/* lib/lib_int.h - what the library helpers of libfibril (lib/: the IP
 * allocator, the IPAM store, the journal, the metrics registry, the small
 * utilities) share with each other and with the host, whose
 * host/internal.h includes this. Nothing here is public SDK: modules see
 * only the SDK headers.
 *
 * The dependency goes host/ -> lib/, never back: nothing in lib/ includes
 * a host/ header (tests/integration/module_boundary.sh checks). Where a
 * helper needs the running agent it goes through the public SDK (the log,
 * the loop's timers and worker pool, fibril_module_name, fibril_state_dir)
 * or through a hook the host passes in (metrics_write's scrape caller). */
#ifndef FIBRIL_LIB_INT_H
#define FIBRIL_LIB_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <fibril/fibril.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* ---- small utilities (util.c) ---------------------------------------- */

/* An error message buffer filled by functions that can fail with a reason. */
#define ERRBUF_LEN 512
HIDDEN void errbuf_set(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "did you mean" suggestions: edit_distance, nearest_name (names.c) */
#include "names.h"
HIDDEN double mono_ms(void);
/* Write a file atomically: temp file, fsync, rename, fsync the directory. */
HIDDEN int write_file_atomic(const char *path, const void *data, size_t len, unsigned mode);
/* mkdir -p with mode for the created components. */
HIDDEN int mkdir_p(const char *path, unsigned mode);
/* write(2) all of data, retrying on EINTR and short writes; -errno on error. */
HIDDEN int write_all(int fd, const void *data, size_t len);
HIDDEN char *xstrdup(const char *s);
HIDDEN void *xcalloc(size_t n, size_t sz);

/* ---- journal (journal.c, SDK <fibril/journal.h>) ---------------------- */
/* The journal's own metrics, owned by the agent: batches flushed by result
 * and their latency. The host registers them with its own families and
 * forgets them before it releases those. */
HIDDEN int journal_metrics_init(void);
HIDDEN void journal_metrics_fini(void);

/* ---- metrics registry (metrics.c, SDK <fibril/metrics.h>) ------------- */
/* How the exposition calls a scrape callback: cb(owner, ud), wrapped as
 * the caller sees fit (the host records that module code is running, for
 * its crash report). NULL: called directly. */
typedef void (*metrics_scrape_caller)(struct fibril_module *owner, fibril_metrics_scrape_fn cb,
				      void *ud);
/* Run the scrape callbacks (on the calling thread, in registration order),
 * then write every family (text format 0.0.4). */
HIDDEN void metrics_write(FILE *out, metrics_scrape_caller call);
/* Free the families and scrape callbacks of an owner (NULL: the agent's). */
HIDDEN void metrics_release_owner(struct fibril_module *owner);

#endif
