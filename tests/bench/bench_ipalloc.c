/* tests/bench/bench_ipalloc.c - address allocator throughput benchmark (for
 * tests/bench/run.sh through `make bench`, not make check). It links the
 * static host core and drives lib/ipalloc.c directly: a /16 pool is
 * pre-filled to a given level, then each op allocates one address with
 * fibril_ipalloc_next() and releases a random allocated one, so the fill
 * stays constant. Timed with CLOCK_MONOTONIC; figures are printed, not
 * asserted.
 *
 * Usage: bench_ipalloc [OPS]   (default: 5000000 per case)
 * Output: one key=value line per case, then a table against the goals:
 *   ipalloc strategy=sequential fill=50 ops=5000000 secs=0.21 ops_per_s=2.4e7
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL "10.32.0.0/16"

struct result {
	const char *strategy;
	unsigned fill;
	double goal;
	double ops_per_s;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t xorshift64s(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

/* Returns ops/s, or a negative value on error. */
static double run_case(enum fibril_ipalloc_strategy st, unsigned fill_pct, uint64_t ops)
{
	struct fibril_cidr cidr;
	if (fibril_cidr_parse(POOL, &cidr) < 0)
		return -1;
	struct fibril_ipalloc_opts opts = {.sz = sizeof(opts), .strategy = st, .seed = 0x5eed};
	struct fibril_ipalloc *a;
	int rc = fibril_ipalloc_new(&cidr, &opts, &a);
	if (rc < 0) {
		fprintf(stderr, "bench_ipalloc: new: %s\n", strerror(-rc));
		return -1;
	}
	uint64_t cap = fibril_ipalloc_capacity(a);
	size_t n = (size_t)(cap * fill_pct / 100);
	struct fibril_ip *held = calloc(n ? n : 1, sizeof(*held));
	if (!held) {
		fibril_ipalloc_free(a);
		return -1;
	}
	/* Pre-fill, then release and re-allocate randomly for a while, so the
	 * free addresses are scattered as in a long-running node. */
	for (size_t i = 0; i < n; i++) {
		if (fibril_ipalloc_next(a, &held[i]) < 0)
			goto fail;
	}
	uint64_t rng = 0x9e3779b97f4a7c15ULL;
	for (uint64_t i = 0; i < cap; i++) {
		size_t k = (size_t)(xorshift64s(&rng) % n);
		if (fibril_ipalloc_release(a, &held[k]) < 0 || fibril_ipalloc_next(a, &held[k]) < 0)
			goto fail;
	}

	struct fibril_ip ip;
	double t0 = now_s();
	for (uint64_t i = 0; i < ops; i++) {
		if (fibril_ipalloc_next(a, &ip) < 0)
			goto fail;
		size_t k = (size_t)(xorshift64s(&rng) % n);
		if (fibril_ipalloc_release(a, &held[k]) < 0)
			goto fail;
		held[k] = ip;
	}
	double secs = now_s() - t0;
	if (fibril_ipalloc_used(a) != n)
		goto fail;
	printf("ipalloc strategy=%s fill=%u ops=%llu secs=%.4f ops_per_s=%.0f\n",
	       st == FIBRIL_IPALLOC_RANDOM ? "random" : "sequential", fill_pct,
	       (unsigned long long)ops, secs, (double)ops / secs);
	fflush(stdout);
	free(held);
	fibril_ipalloc_free(a);
	return (double)ops / secs;
fail:
	fprintf(stderr, "bench_ipalloc: allocator error (used %llu of %llu)\n",
		(unsigned long long)fibril_ipalloc_used(a), (unsigned long long)cap);
	free(held);
	fibril_ipalloc_free(a);
	return -1;
}

int main(int argc, char **argv)
{
	uint64_t ops = 5000000;
	if (argc > 1) {
		char *end;
		ops = strtoull(argv[1], &end, 10);
		if (*end || ops == 0) {
			fprintf(stderr, "usage: bench_ipalloc [OPS]\n");
			return 2;
		}
	}
	struct result res[] = {
		{"sequential", 50, 10e6, 0},
		{"random", 50, 10e6, 0},
		{"sequential", 99, 1e6, 0},
		{"random", 99, 1e6, 0},
	};
	size_t nres = sizeof(res) / sizeof(res[0]);
	for (size_t i = 0; i < nres; i++) {
		enum fibril_ipalloc_strategy st = strcmp(res[i].strategy, "random") == 0
							  ? FIBRIL_IPALLOC_RANDOM
							  : FIBRIL_IPALLOC_SEQUENTIAL;
		res[i].ops_per_s = run_case(st, res[i].fill, ops);
		if (res[i].ops_per_s < 0)
			return 1;
	}
	printf("\nip allocator, %s pool, %llu ops per case (op = allocate one + release a random one)\n",
	       POOL, (unsigned long long)ops);
	printf("%-12s %5s %16s %14s  %s\n", "strategy", "fill", "ops/s", "goal", "");
	for (size_t i = 0; i < nres; i++)
		printf("%-12s %4u%% %16.0f %14s  %s\n", res[i].strategy, res[i].fill,
		       res[i].ops_per_s, res[i].goal >= 10e6 ? "> 10,000,000" : "> 1,000,000",
		       res[i].ops_per_s > res[i].goal ? "met" : "NOT met");
	return 0;
}
