/* modules/datapath/dp_ctgc.c - one conntrack GC pass with BPF batch
 * operations: the map is read DP_CTGC_CHUNK entries per
 * bpf_map_lookup_batch call and the expired keys of each chunk are deleted
 * with one bpf_map_delete_batch call, so a pass over N flows costs about
 * 2 * N / DP_CTGC_CHUNK system calls (the per-entry walk it replaces made
 * 2 * N: get_next_key and lookup for each). Deleting while walking is safe:
 * the batch cursor is a hash bucket, the deleted keys lie behind it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "dp_ctgc.h"

bool dp_ctgc_expired(const struct dp_ctgc_params *p, const struct dp_ct_key *k,
		     const struct dp_ct_value *v)
{
	uint64_t ms;
	if (k->proto == IPPROTO_TCP)
		ms = (v->flags & DP_CT_F_CLOSING) ? p->closing_ms : p->tcp_ms;
	else
		ms = p->other_ms;
	if (p->now_s <= v->last_seen_s)
		return false;
	uint64_t idle_ms = (uint64_t)(p->now_s - v->last_seen_s) * 1000;
	return idle_ms > ms + (uint64_t)p->slack_s * 1000;
}

uint32_t dp_ctgc_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)ts.tv_sec;
}

int dp_ctgc_batch(int fd, const struct dp_ctgc_params *p, struct dp_ctgc_stats *st)
{
	struct dp_ct_key *keys = calloc(DP_CTGC_CHUNK, sizeof(*keys));
	struct dp_ct_value *vals = calloc(DP_CTGC_CHUNK, sizeof(*vals));
	struct dp_ct_key *doomed = calloc(DP_CTGC_CHUNK, sizeof(*doomed));
	uint64_t cursor = 0; /* the hash map's batch token: a bucket index */
	bool first = true, done = false;
	int rc = 0;

	if (!keys || !vals || !doomed) {
		rc = -ENOMEM;
		goto out;
	}
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	while (!done) {
		__u32 count = DP_CTGC_CHUNK;
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
		__u32 ndoomed = 0;
		for (__u32 i = 0; i < count; i++) {
			st->seen++;
			if (dp_ctgc_expired(p, &keys[i], &vals[i]))
				doomed[ndoomed++] = keys[i];
		}
		/* the kernel stops a delete batch at the first key that fails:
		 * one the LRU evicted meanwhile (ENOENT) is skipped, the rest
		 * goes in the next call */
		for (__u32 off = 0; off < ndoomed && rc == 0;) {
			__u32 n = ndoomed - off;
			r = bpf_map_delete_batch(fd, doomed + off, &n, &opts);
			st->syscalls++;
			st->removed += n;
			off += n;
			if (r < 0) {
				if (errno != ENOENT)
					rc = -errno;
				off++;
			}
		}
		if (rc < 0)
			break;
	}
out:
	free(keys);
	free(vals);
	free(doomed);
	return rc;
}
