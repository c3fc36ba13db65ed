/* tests/bench/bench_lb.c - the lb module's core figures (as root: real BPF
 * maps, created here with the module's layouts, unpinned):
 *   1. Maglev table build, 100 backends, M = 16381 (goal < 1 ms);
 *   2. the share of flows (table slots) that move when 1 of 10 backends is
 *      removed, M = 16381 (ideal 0.10, and 0 for the flows of the others);
 *   3. programming N services (2 backends each) from cold, through the
 *      module's own table and map writer (goal at 10,000: < 1 s);
 *   4. one service update at N (a backend replaced; goal < 1 ms).
 * Prints key=value lines for tests/bench/bench_lb.sh. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <netinet/in.h>

#include "lb_int.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void v4(struct lb_addr *a, uint32_t host_order)
{
	memset(a, 0, sizeof(*a));
	a->a[10] = a->a[11] = 0xff;
	uint32_t n = htonl(host_order);
	memcpy(a->a + 12, &n, 4);
}

static int mk(enum bpf_map_type type, uint32_t ks, uint32_t vs, uint32_t max, uint32_t flags)
{
	LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = flags);
	int fd = bpf_map_create(type, NULL, ks, vs, max, &o);
	if (fd < 0) {
		fprintf(stderr, "bench_lb: bpf_map_create: %s (run as root)\n", strerror(errno));
		exit(1);
	}
	return fd;
}

static struct lb_svc *svc(uint32_t i, uint32_t nbe, uint32_t variant)
{
	struct lb_svc *s = calloc(1, sizeof(*s));
	s->be = calloc(nbe, sizeof(*s->be));
	v4(&s->addr, 0x0a600000u + i); /* 10.96.x.y */
	s->port = 80;
	s->proto = IPPROTO_TCP;
	s->algorithm_set = true;
	s->nbe = nbe;
	for (uint32_t b = 0; b < nbe; b++) {
		v4(&s->be[b].addr, 0x0a000000u + i * nbe + b + variant * 0x100000u);
		s->be[b].port = 8080;
	}
	return s;
}

int main(int argc, char **argv)
{
	uint32_t nsvc = argc > 1 ? (uint32_t)atoi(argv[1]) : 10000;
	uint32_t m = LB_MAGLEV_DEFAULT;

	/* 1. Maglev build */
	struct lb_be_spec be[100];
	const struct lb_be_spec *bp[100];
	for (int i = 0; i < 100; i++) {
		memset(&be[i], 0, sizeof(be[i]));
		v4(&be[i].addr, 0x0a000001u + (uint32_t)i);
		be[i].port = 8080;
		be[i].id = (uint32_t)i + 1;
		bp[i] = &be[i];
	}
	uint32_t *tbl = calloc(m, 4), *tbl2 = calloc(m, 4);
	void *scratch = lb_maglev_scratch_new(LB_BACKENDS_PER_SVC_MAX);
	enum { REPS = 200 };
	double t[REPS];
	for (int r = 0; r < REPS; r++) {
		double t0 = now_us();
		lb_maglev_build(bp, 100, m, tbl, scratch);
		t[r] = now_us() - t0;
	}
	qsort(t, REPS, sizeof(double), cmp_double);
	printf("maglev_build_p50_us=%.1f maglev_build_p99_us=%.1f backends=100 m=%u\n", t[REPS / 2],
	       t[REPS * 99 / 100], m);

	/* 2. flows moved, 10 -> 9 */
	lb_maglev_build(bp, 10, m, tbl, scratch);
	lb_maglev_build(bp, 9, m, tbl2, scratch); /* backend 10 gone */
	uint32_t moved = 0, moved_others = 0, per[11] = {0};
	for (uint32_t j = 0; j < m; j++) {
		per[tbl[j] <= 10 ? tbl[j] : 0]++;
		if (tbl[j] != tbl2[j]) {
			moved++;
			moved_others += tbl[j] != 10;
		}
	}
	uint32_t lo = m, hi = 0;
	for (int b = 1; b <= 10; b++) {
		lo = per[b] < lo ? per[b] : lo;
		hi = per[b] > hi ? per[b] : hi;
	}
	printf("maglev_moved=%.4f maglev_moved_others=%.4f slots_min=%u slots_max=%u\n",
	       (double)moved / m, (double)moved_others / m, lo, hi);

	/* 3. N services from cold into real maps */
	struct lb_table tb;
	if (lb_table_init(&tb, 262144, m, LB_ALG_RANDOM) < 0)
		return 1;
	tb.maps.services = mk(BPF_MAP_TYPE_HASH, sizeof(struct lb_svc_key), sizeof(struct lb_svc_val),
			      262144, 0);
	tb.maps.backends = mk(BPF_MAP_TYPE_HASH, 4, sizeof(struct lb_backend), 262144, 0);
	tb.maps.revnat = mk(BPF_MAP_TYPE_HASH, 4, sizeof(struct lb_revnat), 65536, 0);
	tb.maps.maglev = mk(BPF_MAP_TYPE_HASH, 4, m * 4, 16, BPF_F_NO_PREALLOC);
	tb.maps.aff_match = mk(BPF_MAP_TYPE_HASH, sizeof(struct lb_aff_match_key), 1, 65536,
			       BPF_F_NO_PREALLOC);
	char err[256];
	struct lb_svc **specs = calloc(nsvc, sizeof(*specs));
	for (uint32_t i = 0; i < nsvc; i++)
		specs[i] = svc(i, 2, 0);
	double t0 = now_us();
	for (uint32_t i = 0; i < nsvc; i++)
		if (lb_table_upsert(&tb, &specs[i], NULL, err, sizeof(err)) < 0) {
			fprintf(stderr, "bench_lb: upsert %u: %s\n", i, err);
			return 1;
		}
	double cold = now_us() - t0;
	printf("program_services=%u program_cold_ms=%.1f map_syscalls_per_service=6\n", nsvc,
	       cold / 1e3);

	/* 4. one update at N: service N/2 gets one backend replaced, back and forth */
	enum { UPD = 1000 };
	double u[UPD];
	for (int r = 0; r < UPD; r++) {
		struct lb_svc *s = svc(nsvc / 2, 2, (uint32_t)(r & 1) + 1);
		double u0 = now_us();
		if (lb_table_upsert(&tb, &s, NULL, err, sizeof(err)) < 0) {
			fprintf(stderr, "bench_lb: update: %s\n", err);
			return 1;
		}
		u[r] = now_us() - u0;
	}
	qsort(u, UPD, sizeof(double), cmp_double);
	printf("update_p50_us=%.1f update_p99_us=%.1f at=%zu\n", u[UPD / 2], u[UPD * 99 / 100],
	       tb.nsvc);
	lb_table_free(&tb);
	free(specs);
	free(tbl);
	free(tbl2);
	lb_maglev_scratch_free(scratch);
	return 0;
}
