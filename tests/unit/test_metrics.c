/* tests/unit/test_metrics.c - unit tests of the metrics registry and the
 * Prometheus text exposition (lib/metrics.c, <fibril/metrics.h>): the exact
 * text for counters, gauges and histograms (cumulative buckets, +Inf,
 * _sum/_count), label escaping, number formatting, the refusals (names,
 * labels, buckets, duplicates), release by owner, scrape callbacks (called
 * through the caller the exposition is given; the host's, in
 * host/metrics_host.c, runs them under a crash record), the options' size
 * rule, lock-free updates from several threads, and deleting series (SDK
 * 1.7), also while other threads scrape and update. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cunit_main.h"
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct fibril_module *fake_module(const char *name)
{
	struct fibril_module *m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(name);
	m->order = -1;
	return m;
}

static void free_fake_module(struct fibril_module *m)
{
	metrics_release_owner(m);
	free(m->name);
	free(m);
}

/* The exposition as a string (caller frees). */
static char *expose(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	metrics_write(out, NULL);
	fclose(out);
	return text;
}

#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})

static void t_counter_gauge_text(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"pool", "family", NULL};
	struct fibril_metric *c = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_mod_allocations_total", .help = "Addresses handed out.", .labels = labels));
	struct fibril_metric *g = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_mod_free_addresses", .help = "Free addresses."));
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	struct fibril_series *a = fibril_metric_labels(c, "default", "ipv4");
	fibril_series_inc(a);
	fibril_series_add(a, 2);
	fibril_series_add(a, -5); /* a counter never goes down */
	fibril_series_inc(fibril_metric_labels(c, "default", "ipv6"));
	CU_ASSERT_PTR_EQUAL(fibril_metric_labels(c, "default", "ipv4"), a);
	struct fibril_series *gs = fibril_metric_series(g, NULL);
	fibril_series_set(gs, 250);
	fibril_series_add(gs, -0.5);
	CU_ASSERT_DOUBLE_EQUAL(fibril_series_value(a), 3, 1e-9);
	char *text = expose();
	const char *expect =
		"# HELP fibril_mod_allocations_total Addresses handed out.\n"
		"# TYPE fibril_mod_allocations_total counter\n"
		"fibril_mod_allocations_total{pool=\"default\",family=\"ipv4\"} 3\n"
		"fibril_mod_allocations_total{pool=\"default\",family=\"ipv6\"} 1\n"
		"# HELP fibril_mod_free_addresses Free addresses.\n"
		"# TYPE fibril_mod_free_addresses gauge\n"
		"fibril_mod_free_addresses 249.5\n";
	CU_ASSERT_STRING_EQUAL(text, expect);
	free(text);
	free_fake_module(m);
}

static void t_histogram_text(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"route", NULL};
	static const double b[] = {0.125, 0.5, 1};
	struct fibril_metric *h = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_mod_latency_seconds", .help = "Latency.", .labels = labels,
		.buckets = b, .nbuckets = 3));
	CU_ASSERT_PTR_NOT_NULL_FATAL(h);
	struct fibril_series *s = fibril_metric_labels(h, "/v1/x");
	fibril_series_observe(s, 0.0625);
	fibril_series_observe(s, 0.125); /* le is inclusive */
	fibril_series_observe(s, 0.75);
	fibril_series_observe(s, 3);
	fibril_series_observe(s, NAN); /* ignored */
	char *text = expose();
	const char *expect =
		"# HELP fibril_mod_latency_seconds Latency.\n"
		"# TYPE fibril_mod_latency_seconds histogram\n"
		"fibril_mod_latency_seconds_bucket{route=\"/v1/x\",le=\"0.125\"} 2\n"
		"fibril_mod_latency_seconds_bucket{route=\"/v1/x\",le=\"0.5\"} 2\n"
		"fibril_mod_latency_seconds_bucket{route=\"/v1/x\",le=\"1\"} 3\n"
		"fibril_mod_latency_seconds_bucket{route=\"/v1/x\",le=\"+Inf\"} 4\n"
		"fibril_mod_latency_seconds_sum{route=\"/v1/x\"} 3.9375\n"
		"fibril_mod_latency_seconds_count{route=\"/v1/x\"} 4\n";
	CU_ASSERT_STRING_EQUAL(text, expect);
	free(text);
	CU_ASSERT_DOUBLE_EQUAL(fibril_series_value(s), 4, 1e-9);
	free_fake_module(m);
}

static void t_escaping_and_numbers(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"v", NULL};
	struct fibril_metric *g = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_mod_x", .help = "Back\\slash.", .labels = labels));
	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	fibril_series_set(fibril_metric_labels(g, "a\"b\\c\nd"), INFINITY);
	fibril_series_set(fibril_metric_labels(g, "nan"), NAN);
	fibril_series_set(fibril_metric_labels(g, "big"), 12345678901234567.0);
	fibril_series_set(fibril_metric_labels(g, "tenth"), 0.1);
	char *text = expose();
	const char *expect =
		"# HELP fibril_mod_x Back\\\\slash.\n"
		"# TYPE fibril_mod_x gauge\n"
		"fibril_mod_x{v=\"a\\\"b\\\\c\\nd\"} +Inf\n"
		"fibril_mod_x{v=\"nan\"} NaN\n"
		"fibril_mod_x{v=\"big\"} 12345678901234568\n"
		"fibril_mod_x{v=\"tenth\"} 0.1\n";
	CU_ASSERT_STRING_EQUAL(text, expect);
	free(text);
	free_fake_module(m);
}

static void t_refusals(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const bad_label[] = {"9x", NULL};
	static const char *const reserved_label[] = {"__x", NULL};
	static const char *const le[] = {"le", NULL};
	static const char *const twice[] = {"a", "a", NULL};
	static const double unordered[] = {1, 0.5};
	static const double inf[] = {1, INFINITY};
	struct {
		struct fibril_metric_opts *o;
		int err;
	} cases[] = {
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "9bad"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "bad-name"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = ""), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = NULL), EINVAL},
		{OPTS(.type = 7, .name = "fibril_mod_t"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_COUNTER, .name = "fibril_mod_packets"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_packets_total"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_bus_mine"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_h", .help = "two\nlines"), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_l", .labels = bad_label), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_l", .labels = reserved_label), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_l", .labels = twice), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_HISTOGRAM, .name = "fibril_mod_l", .labels = le), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_HISTOGRAM, .name = "fibril_mod_b", .buckets = unordered, .nbuckets = 2), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_HISTOGRAM, .name = "fibril_mod_b", .buckets = inf, .nbuckets = 2), EINVAL},
		{OPTS(.type = FIBRIL_METRIC_HISTOGRAM, .name = "fibril_mod_b", .buckets = inf, .nbuckets = 0), EINVAL},
		{&(struct fibril_metric_opts){.sz = 4, .type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_s"}, EINVAL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		errno = 0;
		struct fibril_metric *f = fibril_metric_register(m, cases[i].o);
		CU_ASSERT_PTR_NULL(f);
		CU_ASSERT_EQUAL(errno, cases[i].err);
		if (f)
			fprintf(stderr, "case %zu was accepted\n", i);
	}
	CU_ASSERT_PTR_NULL(fibril_metric_register(m, NULL));
	/* a longer struct (a newer SDK's): its unknown bytes must be zero (the
	 * growth rule of <fibril/compat.h>), else it asked for something this
	 * host cannot do */
	struct {
		struct fibril_metric_opts o;
		uint64_t newer_field;
	} grown = {.o = {.sz = sizeof(grown), .type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_grown"},
		   .newer_field = 1};
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_metric_register(m, &grown.o));
	CU_ASSERT_EQUAL(errno, E2BIG);
	grown.newer_field = 0;
	CU_ASSERT_PTR_NOT_NULL(fibril_metric_register(m, &grown.o));
	/* a duplicate, also across modules */
	struct fibril_module *other = fake_module("other");
	CU_ASSERT_PTR_NOT_NULL(fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_g")));
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_metric_register(other, OPTS(.type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_g")));
	CU_ASSERT_EQUAL(errno, EEXIST);
	/* a missing label value */
	static const char *const two[] = {"a", "b", NULL};
	struct fibril_metric *f2 = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_mod_two", .labels = two));
	CU_ASSERT_PTR_NOT_NULL_FATAL(f2);
	const char *one[] = {"x", NULL};
	CU_ASSERT_PTR_NULL(fibril_metric_series(f2, one));
	CU_ASSERT_PTR_NULL(fibril_metric_series(f2, NULL));
	CU_ASSERT_PTR_NULL(fibril_metric_series(NULL, NULL));
	/* NULL series: ignored */
	fibril_series_inc(NULL);
	fibril_series_observe(NULL, 1);
	free_fake_module(other);
	free_fake_module(m);
}

static void t_release_by_owner(void)
{
	struct fibril_module *a = fake_module("a"), *b = fake_module("b");
	fibril_series_inc(fibril_metric_series(fibril_metric_register(a, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_a_x_total")), NULL));
	fibril_series_inc(fibril_metric_series(fibril_metric_register(b, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_b_x_total")), NULL));
	fibril_series_inc(fibril_metric_series(fibril_metric_register(a, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_a_y_total")), NULL));
	metrics_release_owner(a);
	char *text = expose();
	CU_ASSERT_PTR_NULL(strstr(text, "fibril_a_"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_b_x_total 1\n"));
	free(text);
	/* the name is free again, and registering after a release appends */
	CU_ASSERT_PTR_NOT_NULL(fibril_metric_register(a, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_a_z")));
	text = expose();
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_b_x_total 1\n# HELP fibril_a_z"));
	free(text);
	free_fake_module(a);
	free_fake_module(b);
	text = expose();
	CU_ASSERT_STRING_EQUAL(text, "");
	free(text);
}

static int scrapes;
static void on_scrape(struct fibril_module *m, void *ud)
{
	scrapes++;
	fibril_series_set(fibril_metric_labels(ud, fibril_module_name(m)), 42);
}

static void t_scrape_callback_and_old_opts(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"module", NULL};
	/* an options struct of an older, shorter layout (no buckets) */
	struct fibril_metric_opts o = {.sz = offsetof(struct fibril_metric_opts, buckets),
				       .type = FIBRIL_METRIC_GAUGE, .name = "fibril_mod_mirrored",
				       .help = "Mirrored.", .labels = labels, .nbuckets = 999};
	struct fibril_metric *g = fibril_metric_register(m, &o);
	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	CU_ASSERT_EQUAL(fibril_metrics_on_scrape(m, on_scrape, g), 0);
	CU_ASSERT_EQUAL(fibril_metrics_on_scrape(m, NULL, g), -EINVAL);
	scrapes = 0;
	char *text = expose();
	CU_ASSERT_EQUAL(scrapes, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_mod_mirrored{module=\"mod\"} 42\n"));
	free(text);
	free_fake_module(m);
	text = expose(); /* the callback went with its module */
	CU_ASSERT_EQUAL(scrapes, 1);
	free(text);
}

/* The exposition calls each scrape callback through the caller it is
 * given (lib/metrics.c's hook), in registration order; the host's
 * exposition (host/metrics_host.c) runs each under a crash record naming
 * its module, a direct call under none. */
static struct fibril_module *g_called_for[4];
static size_t g_ncalled;
static bool g_in_module_code[4];
static size_t g_nscraped;

static void recording_caller(struct fibril_module *owner, fibril_metrics_scrape_fn cb, void *ud)
{
	if (g_ncalled < 4)
		g_called_for[g_ncalled++] = owner;
	cb(owner, ud);
}

static void note_scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	(void)ud;
	if (g_nscraped < 4)
		g_in_module_code[g_nscraped++] = crash_in_module_code();
}

static char *expose_with(void (*write)(FILE *out))
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	write(out);
	fclose(out);
	return text;
}

static void write_recorded(FILE *out)
{
	metrics_write(out, recording_caller);
}

static void write_direct(FILE *out)
{
	metrics_write(out, NULL);
}

static void t_scrape_caller(void)
{
	struct fibril_module *a = fake_module("a"), *b = fake_module("b");
	CU_ASSERT_EQUAL(fibril_metrics_on_scrape(a, note_scrape, NULL), 0);
	CU_ASSERT_EQUAL(fibril_metrics_on_scrape(b, note_scrape, NULL), 0);
	g_ncalled = g_nscraped = 0;
	free(expose_with(write_recorded));
	CU_ASSERT_EQUAL(g_ncalled, 2);
	CU_ASSERT_PTR_EQUAL(g_called_for[0], a);
	CU_ASSERT_PTR_EQUAL(g_called_for[1], b);
	CU_ASSERT_EQUAL(g_nscraped, 2);
	g_nscraped = 0;
	free(expose_with(write_direct));
	CU_ASSERT_EQUAL(g_nscraped, 2);
	CU_ASSERT_FALSE(g_in_module_code[0] || g_in_module_code[1]);
	g_nscraped = 0;
	free(expose_with(metrics_serve));
	CU_ASSERT_EQUAL(g_nscraped, 2);
	CU_ASSERT_TRUE(g_in_module_code[0] && g_in_module_code[1]);
	CU_ASSERT_FALSE(crash_in_module_code());
	free_fake_module(a);
	free_fake_module(b);
}

#define THREADS 4
#define PER_THREAD 100000
static struct fibril_metric *g_shared_c, *g_shared_h;

static void *hammer(void *arg)
{
	(void)arg;
	struct fibril_series *c = fibril_metric_labels(g_shared_c, "x");
	struct fibril_series *h = fibril_metric_labels(g_shared_h, "x");
	for (int i = 0; i < PER_THREAD; i++) {
		fibril_series_inc(c);
		fibril_series_observe(h, 0.25);
	}
	return NULL;
}

static void t_threads(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"k", NULL};
	g_shared_c = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_mod_hits_total", .labels = labels));
	g_shared_h = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_mod_hit_seconds", .labels = labels));
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, hammer, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CU_ASSERT_DOUBLE_EQUAL(fibril_series_value(fibril_metric_labels(g_shared_c, "x")),
			       THREADS * PER_THREAD, 1e-9);
	char *text = expose();
	char want[128];
	snprintf(want, sizeof(want), "fibril_mod_hit_seconds_sum{k=\"x\"} %d\n", THREADS * PER_THREAD / 4);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
	snprintf(want, sizeof(want), "fibril_mod_hit_seconds_count{k=\"x\"} %d\n", THREADS * PER_THREAD);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
	free(text);
	free_fake_module(m);
}

static void t_delete(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"peer", "target", NULL};
	struct fibril_metric *g = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_mod_reachable", .labels = labels));
	struct fibril_metric *h = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_mod_rtt_seconds", .labels = labels, .buckets = (const double[]){1},
		.nbuckets = 1));
	struct fibril_metric *plain = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_mod_plain"));
	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	CU_ASSERT_PTR_NOT_NULL_FATAL(h);
	CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
	struct fibril_series *n1a = fibril_metric_labels(g, "n1", "icmp");
	fibril_series_set(n1a, 1);
	fibril_series_set(fibril_metric_labels(g, "n1", "http"), 1);
	fibril_series_set(fibril_metric_labels(g, "n2", "icmp"), 1);
	fibril_series_set(fibril_metric_labels(g, "n3", "icmp"), 0);
	fibril_series_observe(fibril_metric_labels(h, "n1", "icmp"), 0.5);
	fibril_series_set(fibril_metric_series(plain, NULL), 7);

	/* one series by its values */
	CU_ASSERT_EQUAL(fibril_metric_delete(g, (const char *const[]){"n3", "icmp"}), 1);
	CU_ASSERT_EQUAL(fibril_metric_delete(g, (const char *const[]){"n3", "icmp"}), 0);
	CU_ASSERT_EQUAL(fibril_metric_delete(g, (const char *const[]){"n9", "icmp"}), 0);
	CU_ASSERT_EQUAL(fibril_metric_delete(g, (const char *const[]){"n1", NULL}), -EINVAL);
	CU_ASSERT_EQUAL(fibril_metric_delete(NULL, NULL), -EINVAL);
	char *text = expose();
	CU_ASSERT_PTR_NULL(strstr(text, "peer=\"n3\""));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_mod_reachable{peer=\"n2\",target=\"icmp\"} 1\n"));
	free(text);

	/* every series of a label value, across label positions */
	CU_ASSERT_EQUAL(fibril_metric_delete_matching(g, "peer", "n1"), 2);
	CU_ASSERT_EQUAL(fibril_metric_delete_matching(g, "peer", "n1"), 0);
	CU_ASSERT_EQUAL(fibril_metric_delete_matching(h, "peer", "n1"), 1);
	CU_ASSERT_EQUAL(fibril_metric_delete_matching(g, "node", "n1"), -ENOENT);
	CU_ASSERT_EQUAL(fibril_metric_delete_matching(g, "peer", NULL), -EINVAL);
	CU_ASSERT_EQUAL(fibril_metric_delete_matching(NULL, "peer", "n1"), -EINVAL);
	text = expose();
	CU_ASSERT_PTR_NULL(strstr(text, "peer=\"n1\""));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE fibril_mod_rtt_seconds histogram\n# HELP")); /* no samples */
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_mod_reachable{peer=\"n2\",target=\"icmp\"} 1\n"));
	free(text);

	/* a pointer kept past the delete stays valid; its updates are not shown */
	fibril_series_set(n1a, 5);
	text = expose();
	CU_ASSERT_PTR_NULL(strstr(text, "peer=\"n1\""));
	free(text);
	/* the same values again: the same series, from zero */
	struct fibril_series *back = fibril_metric_labels(g, "n1", "icmp");
	CU_ASSERT_PTR_EQUAL(back, n1a);
	CU_ASSERT_DOUBLE_EQUAL(fibril_series_value(back), 0, 0);
	fibril_series_inc(back);
	struct fibril_series *hb = fibril_metric_labels(h, "n1", "icmp");
	CU_ASSERT_DOUBLE_EQUAL(fibril_series_value(hb), 0, 0);
	text = expose();
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_mod_reachable{peer=\"n1\",target=\"icmp\"} 1\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_mod_rtt_seconds_bucket{peer=\"n1\",target=\"icmp\",le=\"1\"} 0\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_mod_rtt_seconds_count{peer=\"n1\",target=\"icmp\"} 0\n"));
	free(text);

	/* a family without labels: its one series */
	CU_ASSERT_EQUAL(fibril_metric_delete(plain, NULL), 1);
	text = expose();
	CU_ASSERT_PTR_NULL(strstr(text, "\nfibril_mod_plain 7\n"));
	free(text);
	/* new series after deletes go to the end (the tail was kept right) */
	fibril_series_set(fibril_metric_labels(g, "n4", "icmp"), 4);
	text = expose();
	char *n2 = strstr(text, "peer=\"n2\""), *n4 = strstr(text, "peer=\"n4\"");
	CU_ASSERT(n2 && n4 && n2 < n4);
	free(text);
	free_fake_module(m); /* frees the retired series too (ASan: no leak) */
}

/* Deletes racing scrapes and updates (run under TSan by make check-unit). */
static struct fibril_metric *g_churn_g, *g_churn_h;
static _Atomic int g_churn_stop;
static _Atomic long g_churn_updates, g_churn_deletes;

static void *churn_update(void *arg)
{
	(void)arg;
	struct fibril_series *held = fibril_metric_labels(g_churn_g, "held", "x");
	while (!g_churn_stop) {
		char peer[16];
		for (int i = 0; i < 8; i++) {
			snprintf(peer, sizeof(peer), "n%d", i);
			fibril_series_inc(fibril_metric_labels(g_churn_g, peer, "icmp"));
			fibril_series_observe(fibril_metric_labels(g_churn_h, peer, "http"), 0.001 * i);
		}
		fibril_series_inc(held); /* deleted now and then under it */
		g_churn_updates++;
	}
	return NULL;
}

static void *churn_delete(void *arg)
{
	(void)arg;
	while (!g_churn_stop) {
		char peer[16];
		for (int i = 0; i < 8; i++) {
			snprintf(peer, sizeof(peer), "n%d", i);
			fibril_metric_delete_matching(g_churn_g, "peer", peer);
			fibril_metric_delete(g_churn_h, (const char *const[]){peer, "http"});
		}
		fibril_metric_delete(g_churn_g, (const char *const[]){"held", "x"});
		g_churn_deletes++;
	}
	return NULL;
}

/* Each churn histogram's _count equals its +Inf bucket in this text. */
__attribute__((noinline)) static bool histograms_whole(const char *text)
{
	static const char count[] = "fibril_mod_churn_seconds_count{";
	for (const char *c = strstr(text, count); c; c = strstr(c + 1, count)) {
		const char *labels = c + sizeof(count) - 1, *end = strchr(c, '}');
		const char *eol = strchr(c, '\n');
		if (!end || !eol)
			return false;
		char key[160];
		snprintf(key, sizeof(key), "fibril_mod_churn_seconds_bucket{%.*s,le=\"+Inf\"}%.*s\n",
			 (int)(end - labels), labels, (int)(eol - end - 1), end + 1);
		if (!strstr(text, key))
			return false;
	}
	return true;
}

static void t_delete_threads(void)
{
	struct fibril_module *m = fake_module("mod");
	static const char *const labels[] = {"peer", "target", NULL};
	g_churn_g = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_mod_churn_total", .labels = labels));
	g_churn_h = fibril_metric_register(m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_mod_churn_seconds", .labels = labels));
	CU_ASSERT_PTR_NOT_NULL_FATAL(g_churn_g);
	CU_ASSERT_PTR_NOT_NULL_FATAL(g_churn_h);
	g_churn_stop = 0;
	pthread_t t[4];
	pthread_create(&t[0], NULL, churn_update, NULL);
	pthread_create(&t[1], NULL, churn_update, NULL);
	pthread_create(&t[2], NULL, churn_delete, NULL);
	pthread_create(&t[3], NULL, churn_delete, NULL);
	/* this thread scrapes meanwhile; every histogram shown is whole */
	bool whole = true;
	g_churn_updates = g_churn_deletes = 0;
	/* at least 300 scrapes, and as long as it takes the others to go round
	 * 1000 times each (so they overlap, even on a busy machine) */
	for (int i = 0; i < 300 || g_churn_updates < 2000 || g_churn_deletes < 2000; i++) {
		char *text = expose();
		whole = whole && histograms_whole(text);
		free(text);
	}
	g_churn_stop = 1;
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CU_ASSERT(whole);
	free_fake_module(m);
}

FIBRIL_TEST_MAIN("metrics", NULL, NULL,
		 FIBRIL_TEST(t_counter_gauge_text),
		 FIBRIL_TEST(t_histogram_text),
		 FIBRIL_TEST(t_escaping_and_numbers),
		 FIBRIL_TEST(t_refusals),
		 FIBRIL_TEST(t_release_by_owner),
		 FIBRIL_TEST(t_scrape_callback_and_old_opts),
		 FIBRIL_TEST(t_scrape_caller),
		 FIBRIL_TEST(t_threads),
		 FIBRIL_TEST(t_delete),
		 FIBRIL_TEST(t_delete_threads))
