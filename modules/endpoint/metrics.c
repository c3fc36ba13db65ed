/* modules/endpoint/metrics.c - the endpoint module's Prometheus metrics
 * (<fibril/metrics.h>): regenerations (datapath programming of an
 * endpoint) by outcome and their duration, endpoints by state (mirrored at
 * scrape), and the latency of the endpoint API's changing requests (PUT,
 * PATCH, DELETE: what the CNI plugin calls) as the API sees it, from the
 * request's arrival to its answer, the wait for durability included. */
#include "endpoint_int.h"

#include <errno.h>
#include <time.h>

#include <fibril/fibril.h>

double ep_metrics_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The API latency series outlive nothing: a durable answer may go from
 * another module's fini (IPAM's), after this module's metrics were
 * released, so they are reached through here and forgotten in fini. */
static struct fibril_series *api_latency[3];

void ep_metrics_observe_api(enum ep_api_method method, double started)
{
	if ((unsigned)method < 3)
		fibril_series_observe(api_latency[method], ep_metrics_now() - started);
}

void ep_metrics_forget(void)
{
	for (int i = 0; i < 3; i++)
		api_latency[i] = NULL;
}

static const unsigned states[] = {FIBRIL_EP_WAITING_FOR_IDENTITY, FIBRIL_EP_READY,
				  FIBRIL_EP_REGENERATING, FIBRIL_EP_DISCONNECTING};
#define NSTATES (sizeof(states) / sizeof(states[0]))

static void on_scrape(struct fibril_module *m, void *ud)
{
	struct ep_manager *mg = ud;
	size_t n[NSTATES] = {0};
	for (size_t i = 0; i < mg->eps_cap; i++) {
		const struct ep_endpoint *ep = mg->eps ? mg->eps[i] : NULL;
		if (!ep)
			continue;
		for (size_t k = 0; k < NSTATES; k++)
			if (ep->state == states[k])
				n[k]++;
	}
	for (size_t k = 0; k < NSTATES; k++)
		fibril_series_set(mg->met.s_endpoints[k], (double)n[k]);
}

int ep_metrics_register(struct ep_manager *mg)
{
	static const char *const outcome[] = {"outcome", NULL};
	static const char *const state[] = {"state", NULL};
	static const char *const method[] = {"method", NULL};
	static const double regen_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
					       0.1, 0.25, 0.5, 1, 2.5};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	struct fibril_metric *regen = fibril_metric_register(mg->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_endpoint_regenerations_total", .labels = outcome,
		.help = "Endpoint regenerations (its datapath state written), by outcome (success, failure)."));
	struct fibril_metric *regen_t = fibril_metric_register(mg->m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_endpoint_regeneration_duration_seconds", .buckets = regen_buckets,
		.nbuckets = sizeof(regen_buckets) / sizeof(regen_buckets[0]),
		.help = "Time an endpoint regeneration took."));
	struct fibril_metric *eps = fibril_metric_register(mg->m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_endpoint_endpoints", .labels = state,
		.help = "Endpoints on this node, by state."));
	struct fibril_metric *api = fibril_metric_register(mg->m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_endpoint_api_request_duration_seconds", .labels = method,
		.help = "Latency of the endpoint API's changing requests (the CNI plugin's), from arrival to answer, durability included, by method."));
#undef OPTS
	if (!regen || !regen_t || !eps || !api)
		return -errno;
	mg->met.s_regen[0] = fibril_metric_labels(regen, "failure");
	mg->met.s_regen[1] = fibril_metric_labels(regen, "success");
	mg->met.s_regen_time = fibril_metric_series(regen_t, NULL);
	for (size_t k = 0; k < NSTATES; k++)
		mg->met.s_endpoints[k] = fibril_metric_labels(eps, ep_state_name(states[k]));
	api_latency[EP_API_PUT] = fibril_metric_labels(api, "PUT");
	api_latency[EP_API_PATCH] = fibril_metric_labels(api, "PATCH");
	api_latency[EP_API_DELETE] = fibril_metric_labels(api, "DELETE");
	return fibril_metrics_on_scrape(mg->m, on_scrape, mg);
}
