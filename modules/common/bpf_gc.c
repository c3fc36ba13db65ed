/* modules/common/bpf_gc.c - one GC pass over a BPF hash map with batch
 * operations: the map is read MODCOMMON_GC_CHUNK entries per
 * bpf_map_lookup_batch call, and the keys of each chunk the verdict
 * removes go in one bpf_map_delete_batch call (those it rewrites in one
 * bpf_map_update_batch), so a pass over N entries costs
 * about 2 * N / MODCOMMON_GC_CHUNK system calls instead of the 2 * N of a
 * get_next_key + lookup walk. Deleting while walking is safe: the batch
 * cursor is a hash bucket, the deleted keys lie behind it. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "bpf_gc.h"

/* The kernel stops a delete / update batch at the first key that fails:
 * one the LRU evicted meanwhile (ENOENT) is skipped, the rest goes in the
 * next call. */
static int batch_apply(int fd, bool del, uint8_t *keys, uint8_t *vals, size_t key_size,
		       size_t value_size, uint32_t n, size_t *done, uint64_t *syscalls)
{
	/* (the update batch takes no BPF_EXIST: an entry removed meanwhile comes
	 * back with the verdict's value, and goes at a later pass) */
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	for (uint32_t off = 0; off < n;) {
		uint32_t cnt = n - off;
		int r = del ? bpf_map_delete_batch(fd, keys + (size_t)off * key_size, &cnt, &opts)
			    : bpf_map_update_batch(fd, keys + (size_t)off * key_size,
						   vals + (size_t)off * value_size, &cnt, &opts);
		(*syscalls)++;
		*done += cnt;
		off += cnt;
		if (r < 0) {
			if (errno != ENOENT)
				return -errno;
			off++;
		}
	}
	return 0;
}

int modcommon_gc_batch(int fd, size_t key_size, size_t value_size, modcommon_gc_fn verdict,
		       void *ud, struct modcommon_gc_stats *st)
{
	uint8_t *keys = calloc(MODCOMMON_GC_CHUNK, key_size);
	uint8_t *vals = calloc(MODCOMMON_GC_CHUNK, value_size);
	uint8_t *dkeys = calloc(MODCOMMON_GC_CHUNK, key_size);
	uint8_t *ukeys = calloc(MODCOMMON_GC_CHUNK, key_size);
	uint8_t *uvals = calloc(MODCOMMON_GC_CHUNK, value_size);
	uint64_t cursor = 0; /* the hash map's batch token: a bucket index */
	bool first = true, done = false;
	int rc = 0;

	if (!keys || !vals || !dkeys || !ukeys || !uvals) {
		rc = -ENOMEM;
		goto out;
	}
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	while (!done) {
		__u32 count = MODCOMMON_GC_CHUNK;
		int r = bpf_map_lookup_batch(fd, first ? NULL : &cursor, &cursor, keys, vals, &count,
					     &opts);
		st->syscalls++;
		first = false;
		if (r < 0) {
			r = -errno;
			if (r != -ENOENT) { /* ENOENT: the last chunk (count may be > 0) */
				rc = r;
				break;
			}
			done = true;
		}
		uint32_t nd = 0, nu = 0;
		for (uint32_t i = 0; i < count; i++) {
			uint8_t *k = keys + (size_t)i * key_size, *v = vals + (size_t)i * value_size;
			st->seen++;
			switch (verdict(k, v, ud)) {
			case MODCOMMON_GC_DELETE:
				memcpy(dkeys + (size_t)nd++ * key_size, k, key_size);
				break;
			case MODCOMMON_GC_UPDATE:
				memcpy(ukeys + (size_t)nu * key_size, k, key_size);
				memcpy(uvals + (size_t)nu++ * value_size, v, value_size);
				break;
			default:
				break;
			}
		}
		rc = batch_apply(fd, true, dkeys, NULL, key_size, value_size, nd, &st->removed,
				 &st->syscalls);
		if (rc == 0)
			rc = batch_apply(fd, false, ukeys, uvals, key_size, value_size, nu,
					 &st->updated, &st->syscalls);
		if (rc < 0)
			break;
	}
out:
	free(keys);
	free(vals);
	free(dkeys);
	free(ukeys);
	free(uvals);
	return rc;
}
