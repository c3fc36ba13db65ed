/* modules/kvstore-etcd/kvstore_etcd.c - the kvstore-etcd module: provides
 * the "kvstore" capability (<fibril/kvstore.h>) with a real etcd v3 server
 * behind it, spoken to through etcd's JSON gRPC gateway with the module's
 * own HTTP/1.1 client on the agent's loop (http.c; never blocking it).
 *
 * This file holds the descriptor, the config, the lifecycle and the
 * connection state machine:
 *   - start returns FIBRIL_START_PENDING and completes only once etcd has
 *     answered (POST /v3/maintenance/status), retrying with backoff until
 *     [agent] start-timeout fails the start: modules that require "kvstore"
 *     start with a reachable store.
 *   - While running, any answer means connected (health OK "connected to
 *     URL"); a request that cannot reach any endpoint, or a failed check,
 *     means unreachable (Degraded "etcd unreachable: <why>"), and a check is
 *     retried with backoff, 200 ms doubling to 10 s with jitter. Transitions
 *     publish kvstore.connected / kvstore.disconnected; streams are broken
 *     and resumed when etcd is back. While connected, etcd is checked every
 *     health-interval.
 *   - stop ends keepalives and watches and cancels every pending request
 *     (callbacks get -ECANCELED); it revokes nothing, so keys on leases
 *     survive a restart within their TTL. Consumers should unwatch in their
 *     own stop (which runs first); a handle unwatched later is still safe. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd.h"

/* ---- backoff --------------------------------------------------------------- */

uint64_t etcd_backoff_next(uint64_t ms)
{
	if (!ms)
		return ETCD_BACKOFF_MIN_MS;
	return ms * 2 > ETCD_BACKOFF_MAX_MS ? ETCD_BACKOFF_MAX_MS : ms * 2;
}

/* ms scaled by a random factor in [0.8, 1.2). */
uint64_t etcd_jitter(struct etcd *e, uint64_t ms)
{
	e->rng ^= e->rng << 13;
	e->rng ^= e->rng >> 17;
	e->rng ^= e->rng << 5;
	return ms * (800 + e->rng % 400) / 1000;
}

/* ---- the connection check ------------------------------------------------------ */

static void send_probe(struct etcd *e);

static void on_probe_timer(struct fibril_timer *t, void *ud)
{
	struct etcd *e = ud;
	e->probe_timer = NULL;
	send_probe(e);
}

static void schedule_probe(struct etcd *e)
{
	if (!e->running || e->probe || e->probe_timer)
		return;
	e->backoff_ms = etcd_backoff_next(e->backoff_ms);
	uint64_t delay = etcd_jitter(e, e->backoff_ms);
	fibril_warn(e->m, "etcd unreachable: %s; retrying in %llu ms", e->error,
		    (unsigned long long)delay);
	e->probe_timer = fibril_timer_add(e->m, delay, 0, on_probe_timer, e);
}

/* Success and failure are handled by the http layer (etcd_conn_up/down). */
static void probe_done(struct etcd_req *r, int err, struct json_object *resp)
{
}

static void send_probe(struct etcd *e)
{
	if (e->probe || !e->running)
		return;
	fibril_timer_cancel(e->probe_timer);
	e->probe_timer = NULL;
	struct etcd_req *r = etcd_req_new(e, "/v3/maintenance/status", json_object_new_object(),
					  probe_done, e);
	if (r && etcd_req_send(r) == 0) {
		e->probe = r;
		return;
	}
	snprintf(e->error, sizeof(e->error), "cannot send a request");
	schedule_probe(e);
}

static void on_health_tick(struct fibril_timer *t, void *ud)
{
	struct etcd *e = ud;
	if (e->connected)
		send_probe(e);
}

/* ---- connection state -------------------------------------------------------------- */

static void publish(struct etcd *e, const char *topic)
{
	struct fibril_kvstore_event ev = {.sz = sizeof(ev)};
	fibril_bus_publish(e->m, topic, 1, &ev, sizeof(ev));
}

void etcd_conn_up(struct etcd *e, size_t endpoint)
{
	if (!e->running)
		return;
	bool moved = endpoint != e->cur;
	e->cur = endpoint;
	const char *url = e->endpoints[endpoint];
	if (e->connected) {
		if (moved)
			fibril_health_report(e->m, NULL, FIBRIL_HEALTH_OK, "connected to %s", url);
		return;
	}
	e->connected = true;
	e->backoff_ms = 0;
	e->error[0] = '\0';
	fibril_timer_cancel(e->probe_timer);
	e->probe_timer = NULL;
	fibril_health_report(e->m, NULL, FIBRIL_HEALTH_OK, "connected to %s", url);
	fibril_info(e->m, "connected to %s", url);
	publish(e, FIBRIL_KVSTORE_TOPIC_CONNECTED);
	if (e->start_pending) {
		e->start_pending = false;
		fibril_module_start_done(e->m, 0);
	}
	etcd_watch_kick_all(e);
	etcd_lease_kick_all(e);
}

void etcd_conn_down(struct etcd *e, const char *why)
{
	if (!e->running)
		return;
	snprintf(e->error, sizeof(e->error), "%s", why);
	fibril_health_report(e->m, NULL, FIBRIL_HEALTH_DEGRADED, "etcd unreachable: %s", why);
	if (e->connected) {
		e->connected = false;
		e->down_since = time(NULL);
		publish(e, FIBRIL_KVSTORE_TOPIC_DISCONNECTED);
		etcd_watch_break_all(e);
	}
	schedule_probe(e);
}

void etcd_conn_suspect(struct etcd *e)
{
	if (e->running && e->connected && !e->probe)
		send_probe(e);
}

static bool op_connected(void *ctx)
{
	return ((struct etcd *)ctx)->connected;
}

/* ---- config ------------------------------------------------------------------- */

/* Split a list of URLs at commas and blanks; trailing slashes dropped. */
static int split_endpoints(const char *value, char ***out, size_t *n)
{
	char *copy = strdup(value ? value : ""), *save = NULL;
	char **list = NULL;
	size_t count = 0;
	if (!copy)
		return -ENOMEM;
	for (char *w = strtok_r(copy, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save)) {
		char **grown = realloc(list, (count + 1) * sizeof(*list));
		if (!grown)
			break;
		list = grown;
		size_t len = strlen(w);
		while (len > 1 && w[len - 1] == '/')
			w[--len] = '\0';
		if (!(list[count] = strdup(w)))
			break;
		count++;
	}
	free(copy);
	*out = list;
	*n = count;
	return 0;
}

static void free_endpoints(char **list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static int check_endpoints(const char *value, char *why, size_t len)
{
	char **list;
	size_t n;
	if (split_endpoints(value, &list, &n))
		return -EINVAL;
	int rc = n ? 0 : -EINVAL;
	if (!n)
		snprintf(why, len, "at least one endpoint is needed");
	for (size_t i = 0; i < n && !rc; i++) {
		const char *u = list[i];
		size_t skip = strncmp(u, "http://", 7) == 0 ? 7 : strncmp(u, "https://", 8) == 0 ? 8 : 0;
		if (!skip || !u[skip] || strlen(u) > 512) {
			snprintf(why, len, "'%s' is not an http:// or https:// URL", u);
			rc = -EINVAL;
		}
	}
	free_endpoints(list, n);
	return rc;
}

static char *dup_or_null(const char *s)
{
	return s && *s ? strdup(s) : NULL;
}

static int read_config(struct etcd *e)
{
	struct fibril_module *m = e->m;
	if (split_endpoints(fibril_config_string(m, "endpoints"), &e->endpoints, &e->nendpoints) ||
	    !e->nendpoints)
		return -EINVAL;
	const char *prefix = fibril_config_string(m, "prefix");
	e->prefix = strdup(prefix ? prefix : "");
	if (!e->prefix)
		return -ENOMEM;
	e->prefix_len = strlen(e->prefix);
	e->ca_file = dup_or_null(fibril_config_string(m, "ca-file"));
	e->cert_file = dup_or_null(fibril_config_string(m, "cert-file"));
	e->key_file = dup_or_null(fibril_config_string(m, "key-file"));
	e->dial_timeout_ms = fibril_config_duration_ms(m, "dial-timeout");
	e->request_timeout_ms = fibril_config_duration_ms(m, "request-timeout");
	e->lease_ttl_ms = fibril_config_duration_ms(m, "lease-ttl");
	e->health_interval_ms = fibril_config_duration_ms(m, "health-interval");
	if (e->key_file && !e->cert_file) {
		fibril_module_set_error(m, "key-file is set without cert-file");
		return -EINVAL;
	}
	return 0;
}

static void free_config(struct etcd *e)
{
	free_endpoints(e->endpoints, e->nendpoints);
	e->endpoints = NULL;
	e->nendpoints = 0;
	free(e->prefix);
	free(e->ca_file);
	free(e->cert_file);
	free(e->key_file);
	e->prefix = e->ca_file = e->cert_file = e->key_file = NULL;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static int kv_init(struct fibril_module *m)
{
	struct etcd *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->m = m;
	e->ops = (struct fibril_kvstore_ops){
		.hdr = {.sz = sizeof(e->ops), .version = FIBRIL_KVSTORE_VERSION},
		.get = etcd_op_get,
		.put = etcd_op_put,
		.del = etcd_op_del,
		.txn_v1 = etcd_op_txn_v1,
		.watch = etcd_op_watch,
		.unwatch = etcd_op_unwatch,
		.lease_grant = etcd_op_lease_grant,
		.lease_revoke = etcd_op_lease_revoke,
		.connected = op_connected,
		.txn = etcd_op_txn,
		.get_paged = etcd_op_get_paged,
		.get_range = etcd_op_get_range,
	};
	fibril_module_set_data(m, e);
	int rc = etcd_metrics_register(e);
	if (rc) {
		fibril_module_set_error(m, "cannot register the etcd metrics: %s", strerror(-rc));
		return rc;
	}
	return fibril_service_provide(m, FIBRIL_KVSTORE_CAPABILITY, &e->ops.hdr, e);
}

static int kv_start(struct fibril_module *m)
{
	struct etcd *e = fibril_module_data(m);
	int rc = read_config(e);
	if (rc)
		return rc;
	rc = etcd_http_open(e); /* sets the module's error */
	if (rc)
		return rc;
	e->rng = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16) ^ 0x9e3779b9u;
	e->running = true;
	e->start_pending = true;
	e->health_timer = fibril_timer_add(m, e->health_interval_ms, e->health_interval_ms,
					   on_health_tick, e);
	fibril_info(m, "connecting to %s%s (prefix \"%s\")", e->endpoints[0],
		    e->nendpoints > 1 ? " and more" : "", e->prefix);
	send_probe(e);
	return FIBRIL_START_PENDING;
}

/* End everything that talks to etcd; callbacks of pending requests run. */
static void kv_shutdown(struct etcd *e)
{
	e->running = false;
	e->start_pending = false;
	e->connected = false;
	fibril_timer_cancel(e->probe_timer);
	fibril_timer_cancel(e->health_timer);
	e->probe_timer = e->health_timer = NULL;
	etcd_watch_stop_all(e);
	etcd_lease_free_all(e);
	etcd_http_close(e);
}

static void kv_stop(struct fibril_module *m)
{
	struct etcd *e = fibril_module_data(m);
	kv_shutdown(e);
}

static void kv_fini(struct fibril_module *m)
{
	struct etcd *e = fibril_module_data(m);
	if (!e)
		return;
	if (e->http) /* the start failed: stop never ran */
		kv_shutdown(e);
	etcd_watch_free_all(e);
	free_config(e);
	free(e);
	fibril_module_set_data(m, NULL);
	etcd_metrics_forget();
}

static int kv_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct etcd *e = fibril_module_data(m);
	if (!e->running)
		return snprintf(buf, len, "stopped");
	if (e->start_pending)
		return snprintf(buf, len, "connecting to %s: %s", e->endpoints[e->cur],
				e->error[0] ? e->error : "waiting for an answer");
	if (e->connected)
		return snprintf(buf, len, "connected to %s, %zu leases, %zu watches",
				e->endpoints[e->cur], e->nleases, e->nwatches);
	char since[32];
	struct tm tm;
	gmtime_r(&e->down_since, &tm);
	strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return snprintf(buf, len, "unreachable since %s (%s), %zu leases, %zu watches", since,
			e->error, e->nleases, e->nwatches);
}

static const struct fibril_config_key kv_keys[] = {
	{.name = "endpoints", .type = FIBRIL_CONFIG_LIST, .default_value = "http://127.0.0.1:2379",
	 .help = "etcd client URLs (http:// or https://), tried in order on failure",
	 .check = check_endpoints, .site_specific = true},
	{.name = "prefix", .type = FIBRIL_CONFIG_STRING, .default_value = "/fibril/",
	 .help = "Prepended to every key"},
	{.name = "ca-file", .type = FIBRIL_CONFIG_PATH,
	 .help = "CA bundle to verify https endpoints (default: the system's)"},
	{.name = "cert-file", .type = FIBRIL_CONFIG_PATH,
	 .help = "Client certificate (PEM) for https endpoints"},
	{.name = "key-file", .type = FIBRIL_CONFIG_PATH,
	 .help = "Private key (PEM) of the client certificate"},
	{.name = "dial-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "2s",
	 .help = "Time to connect to one endpoint", .min = 100, .max = 60000},
	{.name = "request-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "5s",
	 .help = "Time for one request (watches have none)", .min = 100, .max = 600000},
	{.name = "lease-ttl", .type = FIBRIL_CONFIG_DURATION, .default_value = "15s",
	 .help = "TTL of leases granted without one; leases are kept alive every TTL/3",
	 .min = 2000, .max = 86400000},
	{.name = "health-interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "5s",
	 .help = "How often etcd is checked while connected", .min = 100, .max = 600000},
	{0},
};

FIBRIL_MODULE(.name = "kvstore-etcd", .version = "1.0.0",
	      .description = "kvstore capability backed by etcd v3 (JSON gateway over HTTP/1.1)",
	      .provides = FIBRIL_LIST(FIBRIL_KVSTORE_CAPABILITY), .config_keys = kv_keys,
	      .init = kv_init, .start = kv_start, .stop = kv_stop, .fini = kv_fini,
	      .summary = kv_summary);
