/* tests/bench/bench_identity.c - the local hit of identity allocation: an
 * endpoint whose label set this node already holds (modules/endpoint/
 * identity.c, ep_identity_acquire + ep_identity_release, the path a CNI
 * ADD takes for a workload already on the node, in local and cluster mode
 * alike) with N identities held, p50/p99 over many calls, beside its
 * reference: hashing and comparing the label text once (what any lookup
 * must do). Usage: bench_identity [N] [CALLS]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "endpoint_int.h"

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	printf("%-52s p50 %8.3f us  p99 %8.3f us\n", what, v[n / 2] / 1000, v[n * 99 / 100] / 1000);
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
	size_t calls = argc > 2 ? strtoul(argv[2], NULL, 10) : 100000;
	struct ep_manager mg;
	char **labels = calloc(n, sizeof(*labels));
	double *t = calloc(calls, sizeof(*t));
	volatile uint32_t sink = 0;

	memset(&mg, 0, sizeof(mg));
	ep_identities_init(&mg);
	for (size_t i = 0; i < n; i++) {
		struct ep_identity *id;

		if (asprintf(&labels[i], "k8s:app=workload-%zu\nk8s:io.kubernetes.pod.namespace=team-%zu\n"
			     "k8s:tier=backend", i, i % 37) < 0 ||
		    ep_identity_insert(&mg, (uint32_t)(FIBRIL_IDENTITY_LOCAL_MIN + i), labels[i], &id))
			return 1;
		id->refs = 1;
	}
	for (size_t i = 0; i < calls; i++) {
		const char *l = labels[(i * 7919) % n];
		struct ep_identity *id;
		double t0 = now_ns();

		if (ep_identity_acquire(&mg, l, &id))
			return 1;
		ep_identity_release(&mg, id);
		t[i] = now_ns() - t0;
	}
	printf("identity lookup, %zu identities held, %zu calls\n", n, calls);
	report("acquire+release of a held label set (local hit)", t, calls);
	for (size_t i = 0; i < calls; i++) {
		const char *l = labels[(i * 7919) % n];
		double t0 = now_ns();
		uint32_t h = 2166136261u;

		for (const char *s = l; *s; s++)
			h = (h ^ (uint8_t)*s) * 16777619u;
		sink += h + (uint32_t)strcmp(l, labels[(i * 31) % n]);
		t[i] = now_ns() - t0;
	}
	report("reference: hash + compare the label text once", t, calls);
	(void)sink;
	ep_identities_free(&mg);
	for (size_t i = 0; i < n; i++)
		free(labels[i]);
	free(labels);
	free(t);
	return 0;
}
