/* host/metrics_host.c - the host's side of the Prometheus metrics (the
 * registry and the text format are lib/metrics.c): the agent's own
 * families (API requests by route and code with their latency, the loop's
 * lag and its stalls, modules by state, the process_* ones of
 * host/metrics_process.c; the journal's are lib/journal.c's, registered
 * here), and the exposition GET /metrics serves, where each module's
 * scrape callback runs under a crash record naming it. */
#include "internal.h"

#include <string.h>

static struct {
	struct fibril_metric *api_requests, *api_latency;
	struct fibril_metric *loop_lag, *loop_stall, *modules;
	struct fibril_series *lag, *stall;
	struct fibril_timer *lag_timer;
	uint64_t lag_expected_ms;
} g_host;

#define LAG_INTERVAL_MS 500

static void lag_tick(struct fibril_timer *t, void *ud)
{
	(void)t;
	(void)ud;
	uint64_t now = (uint64_t)mono_ms();
	if (g_host.lag_expected_ms && now > g_host.lag_expected_ms)
		fibril_series_observe(g_host.lag, (double)(now - g_host.lag_expected_ms) / 1000.0);
	else if (g_host.lag_expected_ms)
		fibril_series_observe(g_host.lag, 0);
	g_host.lag_expected_ms = now + LAG_INTERVAL_MS;
}

static void modules_scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	(void)ud;
	static const enum module_state states[] = {MODULE_LOADED,   MODULE_INITIALIZED, MODULE_STARTING,
						   MODULE_RUNNING,  MODULE_STOPPING,    MODULE_STOPPED,
						   MODULE_FAILED};
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		size_t n = 0;
		for (size_t j = 0; j < g_agent.modules.n; j++)
			n += g_agent.modules.mods[j]->state == states[i];
		fibril_series_set(fibril_metric_labels(g_host.modules, module_state_name(states[i])),
				  (double)n);
	}
}

int metrics_init(void)
{
	static const char *const route_labels[] = {"method", "route", "code", NULL};
	static const char *const route_only[] = {"route", NULL};
	static const char *const state[] = {"state", NULL};
	static const double lag_buckets[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	g_host.api_requests = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_api_requests_total", .labels = route_labels,
		.help = "API requests answered, by method, route pattern and status code."));
	g_host.api_latency = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_api_request_duration_seconds", .labels = route_only,
		.help = "Time from a request's dispatch to its answer (deferred answers included), by route."));
	int journal_rc = journal_metrics_init();
	g_host.loop_lag = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_loop_lag_seconds", .buckets = lag_buckets,
		.nbuckets = sizeof(lag_buckets) / sizeof(lag_buckets[0]),
		.help = "How late a 500 ms timer on the loop fired."));
	static const double stall_buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
	g_host.loop_stall = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_loop_stall_seconds", .buckets = stall_buckets,
		.nbuckets = sizeof(stall_buckets) / sizeof(stall_buckets[0]),
		.help = "Per loop iteration since the modules' start, the time the loop thread "
			"spent not waiting for events (callbacks, hooks): how long anything "
			"on the loop waited at worst."));
	g_host.modules = fibril_metric_register(NULL, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_modules", .labels = state, .help = "Loaded modules by state."));
#undef OPTS
	if (!g_host.api_requests || !g_host.api_latency || journal_rc || !g_host.loop_lag ||
	    !g_host.loop_stall || !g_host.modules || metrics_process_init())
		return -1;
	g_host.lag = fibril_metric_series(g_host.loop_lag, NULL);
	g_host.stall = fibril_metric_series(g_host.loop_stall, NULL);
	fibril_metrics_on_scrape(NULL, modules_scrape, NULL);
	g_host.lag_expected_ms = 0;
	g_host.lag_timer = fibril_timer_add(NULL, 0, LAG_INTERVAL_MS, lag_tick, NULL);
	return 0;
}

void metrics_fini(void)
{
	if (g_host.lag_timer)
		fibril_timer_cancel(g_host.lag_timer);
	journal_metrics_fini();
	metrics_release_owner(NULL);
	memset(&g_host, 0, sizeof(g_host));
}

void metrics_loop_stall(double seconds)
{
	if (g_host.stall)
		fibril_series_observe(g_host.stall, seconds);
}

void metrics_api_request(const char *method, const char *route, int code, double ms)
{
	if (!g_host.api_requests)
		return;
	char codebuf[16];
	snprintf(codebuf, sizeof(codebuf), "%d", code);
	fibril_series_inc(fibril_metric_labels(g_host.api_requests, method, route, codebuf));
	fibril_series_observe(fibril_metric_labels(g_host.api_latency, route), ms / 1000.0);
}

/* A scrape callback is module code: a fault in it names the module. */
static void scrape_in_crash_record(struct fibril_module *owner, fibril_metrics_scrape_fn cb, void *ud)
{
	struct crash_ctx cc;
	crash_enter(&cc, owner, "metrics scrape callback", NULL, -1);
	cb(owner, ud);
	crash_leave(&cc);
}

void metrics_serve(FILE *out)
{
	metrics_write(out, scrape_in_crash_record);
}
