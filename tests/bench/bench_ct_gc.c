/* tests/bench/bench_ct_gc.c - the conntrack GC's cost (run by
 * tests/bench/bench_ct_gc.sh from `make bench`, as root):
 *
 *   bench_ct_gc compare N [EXPIRED_PERCENT]
 *       an unpinned LRU_HASH of N flows (the layout of dp_conntrack), of
 *       which EXPIRED_PERCENT (default 10) are idle past their timeout;
 *       one GC pass with the per-entry walk the module used to make on the
 *       loop (get_next_key + lookup per entry, delete per expired entry)
 *       and one with the batch pass it makes now on the worker pool
 *       (modules/datapath/dp_ctgc.c), each on a freshly filled map; prints
 *       time and bpf() calls of each, and their ratio;
 *   bench_ct_gc fill PIN N [EXPIRED_PERCENT]
 *       fill the pinned map PIN with N flows (for the agent test in
 *       bench_ct_gc.sh); prints how many it wrote. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "dp_ctgc.h"

#define TIMEOUT_MS 60000

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void key_of(uint32_t i, struct dp_ct_key *k)
{
	memset(k, 0, sizeof(*k));
	k->family = DP_FAMILY_IPV4;
	k->proto = IPPROTO_UDP;
	k->saddr[0] = 10;
	memcpy(k->saddr + 1, &i, 3);
	k->daddr[0] = 10;
	k->daddr[3] = 1;
	k->sport = htons((uint16_t)(i >> 24) + 1024);
	k->dport = htons(53);
}

/* N flows; every (100 / pct)-th one idle for an hour. */
static int fill(int fd, uint32_t n, unsigned pct)
{
	enum { CHUNK = 8192 };
	struct dp_ct_key *keys = calloc(CHUNK, sizeof(*keys));
	struct dp_ct_value *vals = calloc(CHUNK, sizeof(*vals));
	uint32_t now = dp_ctgc_now_s();
	uint32_t every = pct ? 100 / pct : 0;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	for (uint32_t base = 0; base < n; base += CHUNK) {
		uint32_t cnt = n - base < CHUNK ? n - base : CHUNK;
		for (uint32_t j = 0; j < cnt; j++) {
			uint32_t i = base + j;
			key_of(i, &keys[j]);
			memset(&vals[j], 0, sizeof(vals[j]));
			vals[j].packets = 1;
			/* (CLOCK_MONOTONIC may be younger than an hour: then 0) */
			vals[j].first_seen_s = now > 4000 ? now - 4000 : 0;
			vals[j].last_seen_s =
				(every && i % every == 0) ? (now > 3600 ? now - 3600 : 0) : now;
		}
		if (bpf_map_update_batch(fd, keys, vals, &cnt, &opts) != 0) {
			fprintf(stderr, "bench_ct_gc: update_batch: %s\n", strerror(errno));
			return -1;
		}
	}
	free(keys);
	free(vals);
	return 0;
}

/* The module's old pass (modules/datapath/dp_gc.c before the batch
 * version), without its cap of 1024 deletions per pass so that both passes
 * do the same work. */
static void gc_per_entry(int fd, const struct dp_ctgc_params *p, uint32_t max,
			 struct dp_ctgc_stats *st)
{
	struct dp_ct_key cur, next;
	struct dp_ct_value v;
	size_t cap = 1024, n = 0;
	struct dp_ct_key *doomed = malloc(cap * sizeof(*doomed));
	uint32_t steps = 0;
	memset(&cur, 0, sizeof(cur));
	while (steps++ < max && bpf_map_get_next_key(fd, &cur, &next) == 0) {
		st->syscalls++;
		cur = next;
		st->syscalls++;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0)
			continue;
		st->seen++;
		if (dp_ctgc_expired(p, &cur, &v)) {
			if (n == cap)
				doomed = realloc(doomed, (cap *= 2) * sizeof(*doomed));
			doomed[n++] = cur;
		}
	}
	st->syscalls++; /* the get_next_key that ended the walk */
	for (size_t i = 0; i < n; i++) {
		st->syscalls++;
		if (bpf_map_delete_elem(fd, &doomed[i]) == 0)
			st->removed++;
	}
	free(doomed);
}

static int new_map(uint32_t n)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "bench_ct", sizeof(struct dp_ct_key),
				sizeof(struct dp_ct_value), n, NULL);
	if (fd < 0)
		fprintf(stderr, "bench_ct_gc: cannot create a map of %u: %s\n", n, strerror(-fd));
	return fd;
}

static int compare(uint32_t n, unsigned pct)
{
	struct dp_ctgc_params p = {.tcp_ms = TIMEOUT_MS, .closing_ms = TIMEOUT_MS,
				   .other_ms = TIMEOUT_MS, .slack_s = 5};
	struct dp_ctgc_stats old = {0}, batch = {0};
	double t_old, t_batch;

	int fd = new_map(n);
	if (fd < 0 || fill(fd, n, pct) < 0)
		return 1;
	p.now_s = dp_ctgc_now_s();
	double t0 = now_ms();
	gc_per_entry(fd, &p, n, &old);
	t_old = now_ms() - t0;
	close(fd);

	fd = new_map(n);
	if (fd < 0 || fill(fd, n, pct) < 0)
		return 1;
	p.now_s = dp_ctgc_now_s();
	t0 = now_ms();
	int rc = dp_ctgc_batch(fd, &p, &batch);
	t_batch = now_ms() - t0;
	close(fd);
	if (rc < 0) {
		fprintf(stderr, "bench_ct_gc: batch pass: %s\n", strerror(-rc));
		return 1;
	}
	printf("flows=%u expired=%u%% per-entry: ms=%.1f syscalls=%llu removed=%zu | "
	       "batch: ms=%.1f syscalls=%llu removed=%zu | time-ratio=%.1fx syscall-ratio=%.0fx\n",
	       n, pct, t_old, (unsigned long long)old.syscalls, old.removed, t_batch,
	       (unsigned long long)batch.syscalls, batch.removed, t_old / (t_batch > 0 ? t_batch : 1),
	       (double)old.syscalls / (double)(batch.syscalls ? batch.syscalls : 1));
	return old.removed == batch.removed ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "compare"))
		return compare((uint32_t)strtoul(argv[2], NULL, 10),
			       argc > 3 ? (unsigned)atoi(argv[3]) : 10);
	if (argc >= 4 && !strcmp(argv[1], "fill")) {
		int fd = bpf_obj_get(argv[2]);
		if (fd < 0) {
			fprintf(stderr, "bench_ct_gc: %s: %s\n", argv[2], strerror(-fd));
			return 1;
		}
		uint32_t n = (uint32_t)strtoul(argv[3], NULL, 10);
		if (fill(fd, n, argc > 4 ? (unsigned)atoi(argv[4]) : 10) < 0)
			return 1;
		printf("filled %u\n", n);
		return 0;
	}
	fprintf(stderr, "usage: bench_ct_gc compare N [EXPIRED%%] | fill PIN N [EXPIRED%%]\n");
	return 2;
}
