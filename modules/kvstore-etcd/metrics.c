/* modules/kvstore-etcd/metrics.c - the kvstore-etcd module's Prometheus
 * metrics (<fibril/metrics.h>): requests to etcd by operation and result
 * (ok, error, canceled) with their latency (streams excluded), errors by
 * kind (timeout, connection, server), watch streams started again after a
 * break or a compaction, and lease keepalives by result. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "etcd.h"

enum { OP_GET, OP_PUT, OP_DELETE, OP_TXN, OP_LEASE_GRANT, OP_LEASE_KEEPALIVE, OP_LEASE_REVOKE,
       OP_WATCH, OP_STATUS, OP_OTHER, NOPS };
static const char *const op_names[NOPS] = {"get", "put", "delete", "txn", "lease-grant",
					   "lease-keepalive", "lease-revoke", "watch", "status",
					   "other"};
static const struct { const char *path; int op; } op_paths[] = {
	{"/v3/kv/range", OP_GET},           {"/v3/kv/put", OP_PUT},
	{"/v3/kv/deleterange", OP_DELETE},  {"/v3/kv/txn", OP_TXN},
	{"/v3/lease/grant", OP_LEASE_GRANT}, {"/v3/lease/keepalive", OP_LEASE_KEEPALIVE},
	{"/v3/lease/revoke", OP_LEASE_REVOKE}, {"/v3/watch", OP_WATCH},
	{"/v3/maintenance/status", OP_STATUS},
};
enum { RES_OK, RES_ERROR, RES_CANCELED, NRES };
static const char *const res_names[NRES] = {"ok", "error", "canceled"};
enum { ERR_TIMEOUT, ERR_CONNECTION, ERR_SERVER, NERR };
static const char *const err_names[NERR] = {"timeout", "connection", "server"};

struct etcd_metrics {
	struct fibril_series *requests[NOPS][NRES];
	struct fibril_series *latency[NOPS];
	struct fibril_series *errors[NERR];
	struct fibril_series *watch_restarts;
	struct fibril_series *keepalives[2]; /* [ok] */
};
static struct etcd_metrics met; /* one kvstore-etcd module per agent */

uint64_t etcd_metrics_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int op_of(const char *path)
{
	for (size_t i = 0; path && i < sizeof(op_paths) / sizeof(op_paths[0]); i++)
		if (!strcmp(path, op_paths[i].path))
			return op_paths[i].op;
	return OP_OTHER;
}

void etcd_metrics_request(const struct etcd_req *r, int err)
{
	int op = op_of(r->path);
	int res = err == -ECANCELED ? RES_CANCELED : err ? RES_ERROR : RES_OK;
	fibril_series_inc(met.requests[op][res]);
	if (res == RES_ERROR) {
		int kind = err == -ETIMEDOUT ? ERR_TIMEOUT
			 : (err == -ECONNREFUSED || err == -ECONNRESET || err == -ENOTCONN ||
			    err == -EPIPE || err == -EHOSTUNREACH || err == -ENETUNREACH ||
			    err == -ECONNABORTED) ? ERR_CONNECTION : ERR_SERVER;
		fibril_series_inc(met.errors[kind]);
	}
	if (op != OP_WATCH && res == RES_OK && r->t0_us)
		fibril_series_observe(met.latency[op], (double)(etcd_metrics_now_us() - r->t0_us) / 1e6);
}

void etcd_metrics_watch_restart(void)
{
	fibril_series_inc(met.watch_restarts);
}

void etcd_metrics_keepalive(bool ok)
{
	fibril_series_inc(met.keepalives[ok]);
}

void etcd_metrics_forget(void)
{
	memset(&met, 0, sizeof(met));
}

int etcd_metrics_register(struct etcd *e)
{
	static const char *const op_res[] = {"op", "result", NULL};
	static const char *const op[] = {"op", NULL};
	static const char *const kind[] = {"kind", NULL};
	static const char *const result[] = {"result", NULL};
	static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
					 0.25, 0.5, 1, 2.5, 5, 10};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	struct fibril_metric *req = fibril_metric_register(e->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_kvstore_etcd_requests_total", .labels = op_res,
		.help = "Requests to etcd concluded, by operation and result (ok, error, canceled)."));
	struct fibril_metric *lat = fibril_metric_register(e->m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_kvstore_etcd_request_duration_seconds", .labels = op,
		.buckets = buckets, .nbuckets = sizeof(buckets) / sizeof(buckets[0]),
		.help = "Latency of the requests etcd answered, by operation (watch streams excluded)."));
	struct fibril_metric *errs = fibril_metric_register(e->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_kvstore_etcd_errors_total", .labels = kind,
		.help = "Failed requests by kind (timeout, connection, server: an error answer)."));
	struct fibril_metric *wr = fibril_metric_register(e->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_kvstore_etcd_watch_restarts_total",
		.help = "Watch streams started again (after a break or a compaction)."));
	struct fibril_metric *ka = fibril_metric_register(e->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_kvstore_etcd_lease_keepalives_total", .labels = result,
		.help = "Lease keepalives answered, by result (ok, error)."));
#undef OPTS
	if (!req || !lat || !errs || !wr || !ka)
		return -errno;
	for (int o = 0; o < NOPS; o++) {
		for (int r = 0; r < NRES; r++)
			met.requests[o][r] = fibril_metric_labels(req, op_names[o], res_names[r]);
		met.latency[o] = fibril_metric_labels(lat, op_names[o]);
	}
	for (int k = 0; k < NERR; k++)
		met.errors[k] = fibril_metric_labels(errs, err_names[k]);
	met.watch_restarts = fibril_metric_series(wr, NULL);
	met.keepalives[0] = fibril_metric_labels(ka, "error");
	met.keepalives[1] = fibril_metric_labels(ka, "ok");
	return 0;
}
