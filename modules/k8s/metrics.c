/* modules/k8s/metrics.c - the k8s module's Prometheus metrics
 * (<fibril/metrics.h>), mirrored at each scrape from the counters each
 * informer keeps (struct k8s_res): events published by kind (pods, nodes,
 * ...) and type (added, updated, deleted), watch events received, relists
 * (a list after the first: 410 Gone, a history restarted), watch restarts
 * (a watch started again from the last resourceVersion without a list:
 * the server closed it, a stall, an error) and stalls. */
#include "k8s_mod.h"

#include <errno.h>

#include <fibril/fibril.h>

struct k8s_metrics {
	struct fibril_metric *events, *received, *relists, *restarts, *stalls;
};
static struct k8s_metrics met; /* one k8s module per agent */

static void on_scrape(struct fibril_module *m, void *ud)
{
	struct k8s *k = ud;
	static const char *const types[3] = {"added", "updated", "deleted"};
	for (size_t i = 0; i < K8S_NRES; i++) {
		const struct k8s_res *r = &k->res[i];
		if (!r->wanted)
			continue;
		const char *kind = r->def->name;
		for (int t = 0; t < 3; t++)
			fibril_series_set(fibril_metric_labels(met.events, kind, types[t]), (double)r->pub[t]);
		fibril_series_set(fibril_metric_labels(met.received, kind), (double)r->events_in);
		fibril_series_set(fibril_metric_labels(met.relists, kind), (double)r->relists);
		fibril_series_set(fibril_metric_labels(met.restarts, kind), (double)r->watch_restarts);
		fibril_series_set(fibril_metric_labels(met.stalls, kind), (double)r->ws.stalls);
	}
}

int k8s_metrics_register(struct k8s *k)
{
	static const char *const kt[] = {"kind", "type", NULL};
	static const char *const kind[] = {"kind", NULL};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	met.events = fibril_metric_register(k->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_k8s_events_total", .labels = kt,
		.help = "Kubernetes object changes published on the bus, by kind and type (added, updated, deleted)."));
	met.received = fibril_metric_register(k->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_k8s_watch_events_received_total", .labels = kind,
		.help = "Watch events received from the API server (bookmarks and errors included), by kind."));
	met.relists = fibril_metric_register(k->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_k8s_relists_total", .labels = kind,
		.help = "Lists after the first (410 Gone, a history restarted lower), by kind."));
	met.restarts = fibril_metric_register(k->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_k8s_watch_restarts_total", .labels = kind,
		.help = "Watches started again from the last resourceVersion without a new list, by kind."));
	met.stalls = fibril_metric_register(k->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_k8s_watch_stalls_total", .labels = kind,
		.help = "Watches closed for sending nothing within [k8s] watch-idle-timeout, by kind."));
#undef OPTS
	if (!met.events || !met.received || !met.relists || !met.restarts || !met.stalls)
		return -errno;
	return fibril_metrics_on_scrape(k->m, on_scrape, k);
}
