/* tests/bench/bench_lb_ct_gc.c - the lb_ct GC's cost (run by
 * tests/bench/bench_lb.sh from `make bench`, as root):
 *
 *   bench_lb_ct_gc N ROUNDS
 *       an unpinned HASH of N lb_ct entries (bpf/fibril_lb.h, as lb_ct), of
 *       which 10% are idle past their timeout; per round, one pass with a
 *       per-entry walk (get_next_key + lookup per entry, delete per expired
 *       entry: the reference) and one with the module's batch pass
 *       (modules/lb/ctgc.c over modules/common/bpf_gc.c), each on a
 *       freshly filled map, interleaved; prints both times, their bpf()
 *       calls, and the median ratio with its spread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "lb_tc.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fill(uint32_t n)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "bench_lb_ct", sizeof(struct lb_ct_key),
				sizeof(struct lb_ct_val), n, NULL);
	if (fd < 0) {
		fprintf(stderr, "bench_lb_ct_gc: cannot create a map of %u: %s\n", n, strerror(-fd));
		return -1;
	}
	uint32_t now = lb_ctgc_now_s() & LB_CT_SEEN_MASK;
	for (uint32_t i = 0; i < n; i++) {
		struct lb_ct_key k = {.proto = IPPROTO_TCP, .dport = htons(30080)};
		struct lb_ct_val v = {.port = htons(8080), .rev_nat_id = 1};
		k.saddr[10] = k.saddr[11] = k.daddr[10] = k.daddr[11] = 0xff;
		k.saddr[12] = 198;
		memcpy(k.saddr + 13, &i, 3);
		k.sport = htons((uint16_t)(1024 + (i >> 24)));
		k.daddr[12] = 192;
		v.seen = (i % 10 == 0 ? now - 100000 : now) & LB_CT_SEEN_MASK;
		if (bpf_map_update_elem(fd, &k, &v, BPF_ANY) < 0) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

static size_t per_entry(int fd, const struct lb_ctgc_params *p, uint64_t *calls)
{
	struct lb_ct_key cur, next, *doomed = NULL;
	struct lb_ct_val v;
	size_t n = 0, cap = 0, removed = 0;
	int c = 0;
	while (bpf_map_get_next_key(fd, c ? &cur : NULL, &next) == 0) {
		(*calls) += 2;
		cur = next;
		c = 1;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0)
			continue;
		if (lb_ctgc_idle(p, v.seen) > lb_ctgc_timeout(p, &cur, &v)) {
			if (n == cap) {
				cap = cap ? cap * 2 : 1024;
				doomed = realloc(doomed, cap * sizeof(*doomed));
			}
			doomed[n++] = cur;
		}
	}
	for (size_t i = 0; i < n; i++, (*calls)++)
		removed += bpf_map_delete_elem(fd, &doomed[i]) == 0;
	free(doomed);
	return removed;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 100000;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	if (rounds < 1 || rounds > 50)
		rounds = 3;
	double ratio[50], tw = 0, tb = 0;
	uint64_t cw = 0, cb = 0;
	struct lb_ctgc_params p = {.tcp_s = 21600, .syn_s = 60, .closing_s = 10, .other_s = 60};
	for (int r = 0; r < rounds; r++) {
		int fd = fill(n);
		if (fd < 0)
			return 1;
		p.now_s = lb_ctgc_now_s();
		uint64_t calls = 0;
		double t0 = now_ms();
		size_t rw = per_entry(fd, &p, &calls);
		double a = now_ms() - t0;
		close(fd);
		cw = calls;
		if ((fd = fill(n)) < 0)
			return 1;
		size_t seen = 0, removed = 0, stamped = 0;
		calls = 0;
		p.now_s = lb_ctgc_now_s();
		t0 = now_ms();
		int rc = lb_ctgc_pass(fd, &p, &seen, &removed, &stamped, &calls);
		double b = now_ms() - t0;
		close(fd);
		cb = calls;
		if (rc < 0 || removed != rw) {
			fprintf(stderr, "bench_lb_ct_gc: the passes disagree (%zu / %zu, %d)\n", rw, removed, rc);
			return 1;
		}
		ratio[r] = a / (b > 0 ? b : 1e-3);
		tw += a;
		tb += b;
	}
	qsort(ratio, (size_t)rounds, sizeof(ratio[0]), cmp);
	printf("lb_ct entries=%u expired=10%% rounds=%d | per-entry walk: %.1f ms, %llu bpf calls | "
	       "batch pass: %.1f ms, %llu bpf calls | ratio median %.1fx (min %.1fx, max %.1fx)\n",
	       n, rounds, tw / rounds, (unsigned long long)cw, tb / rounds, (unsigned long long)cb,
	       ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
	return 0;
}
