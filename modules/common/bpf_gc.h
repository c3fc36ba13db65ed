/* modules/common/bpf_gc.h - one garbage-collection pass over a BPF hash map
 * with batch operations (bpf_map_lookup_batch, then bpf_map_delete_batch of
 * what the caller's verdict removes and bpf_map_update_batch of what it
 * rewrites), shared by the datapath's conntrack GC and the lb module's
 * lb_ct GC. Free of the agent's loop: it runs on the worker pool and in
 * benchmarks. */
#ifndef FIBRIL_MODCOMMON_BPF_GC_H
#define FIBRIL_MODCOMMON_BPF_GC_H

#include <stddef.h>
#include <stdint.h>

#define MODCOMMON_GC_CHUNK 4096 /* entries per bpf_map_lookup_batch call */

enum modcommon_gc_verdict {
	MODCOMMON_GC_KEEP = 0,
	MODCOMMON_GC_DELETE = 1,
	MODCOMMON_GC_UPDATE = 2, /* the verdict changed *value: write it back */
};

/* Called for each entry; may change *value and answer MODCOMMON_GC_UPDATE. */
typedef enum modcommon_gc_verdict (*modcommon_gc_fn)(const void *key, void *value, void *ud);

struct modcommon_gc_stats {
	size_t seen;       /* entries looked at */
	size_t removed;    /* entries deleted */
	size_t updated;    /* entries rewritten */
	uint64_t syscalls; /* bpf() calls made */
};

/* One pass over the hash map fd (keys of key_size, values of value_size);
 * adds to *st. 0, or a negative errno (what was removed before the error
 * stays removed). */
int modcommon_gc_batch(int fd, size_t key_size, size_t value_size, modcommon_gc_fn verdict,
		       void *ud, struct modcommon_gc_stats *st);

#endif
