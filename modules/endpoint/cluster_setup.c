/* modules/endpoint/cluster_setup.c - cluster-wide identities set up and
 * taken down: the [endpoint] identity-* config keys, init (metrics, the
 * lease-lost topic), start (by identity-allocation: the kvstore and this
 * node's name), stop and free, and the lease this node's references are
 * held by (granted again, and every reference written again, when the
 * kvstore says it was lost). */
#include "endpoint_int.h"
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fibril/k8s.h>
#include <fibril/nodes.h>

/* ---- the lease ---------------------------------------------------------------------------- */

static void lease_start(struct ep_cluster *c);

static void on_lease_retry(struct fibril_timer *t, void *ud)
{
	struct ep_cluster *c = ud;

	(void)t;
	c->lease_retry = NULL;
	lease_start(c);
}

static void on_lease(void *ud, int err, int64_t lease, int64_t ttl)
{
	struct ep_cluster *c = ud;

	(void)ttl;
	c->lease_pending = false;
	if (!c->running)
		return;
	if (err) {
		fibril_health_report(c->mg->m, "identities", FIBRIL_HEALTH_DEGRADED,
				     "no kvstore lease for the identity references: %s (retrying)",
				     strerror(-err));
		if (!c->lease_retry)
			c->lease_retry = fibril_timer_add(c->mg->m, 1000, 0, on_lease_retry, c);
		return;
	}
	c->lease = lease;
	fibril_health_report(c->mg->m, "identities", FIBRIL_HEALTH_OK,
			     "cluster-wide through the kvstore as node %s", c->node);
	cl_ensure_all(c);
	cl_read_ids(c);
	cl_kick_all(c);
}

static void lease_start(struct ep_cluster *c)
{
	if (c->lease_pending || !c->running)
		return;
	c->lease = 0;
	c->lease_pending = true;
	if (c->kv->lease_grant(c->kvctx, c->ttl_s, on_lease, c)) {
		c->lease_pending = false;
		if (!c->lease_retry)
			c->lease_retry = fibril_timer_add(c->mg->m, 1000, 0, on_lease_retry, c);
	}
}

static int on_kv_event(const struct fibril_event *ev, void *ud)
{
	struct ep_cluster *c = ud;
	const struct fibril_kvstore_event *k = ev->payload;

	if (!c->running || !c->lease)
		return 0;
	if (ev->payload_len >= offsetof(struct fibril_kvstore_event, lease) + sizeof(k->lease) &&
	    k->lease == c->lease) {
		fibril_warn(c->mg->m, "the identity lease was lost: granting another and writing the "
			    "references again");
		lease_start(c);
	}
	return 0;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static int check_mode(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "auto") || !strcmp(value, "local") || !strcmp(value, "kvstore") ||
	    !strcmp(value, "crd"))
		return 0;
	snprintf(why, len, "'%s' is not an identity allocation mode: auto, local, kvstore or crd",
		 value);
	return -EINVAL;
}

const struct fibril_config_key ep_config_keys[] = {
	{.name = "identity-allocation", .type = FIBRIL_CONFIG_STRING, .default_value = "auto",
	 .help = "local: numbers of this node only; kvstore: cluster-wide through the kvstore; "
		 "crd: cluster-wide through CiliumIdentity objects of the Kubernetes API; "
		 "auto: kvstore when the kvstore and nodes modules are loaded, crd when the nodes "
		 "and k8s modules are and no kvstore is",
	 .check = check_mode},
	{.name = "identity-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "How long a new endpoint waits for the kvstore to give its labels an identity "
		 "before it is refused", .min = 100, .max = 600000},
	{.name = "identity-lease-ttl", .type = FIBRIL_CONFIG_DURATION, .default_value = "15s",
	 .help = "TTL of the lease this node's identity references are held by",
	 .min = 2000, .max = 3600000},
	{.name = "identity-gc-interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "1m",
	 .help = "How often the identities no node references are looked for", .min = 100,
	 .max = 86400000},
	{.name = "identity-gc-grace", .type = FIBRIL_CONFIG_DURATION, .default_value = "5m",
	 .help = "How long an identity stays unreferenced before the GC deletes it", .min = 0,
	 .max = 86400000},
	{.name = "gc-lease-duration", .type = FIBRIL_CONFIG_DURATION, .default_value = "15s",
	 .help = "identity-allocation = crd: the duration of the Lease kube-system/fibril-gc that "
		 "elects the agent collecting unused CiliumIdentities and the objects of deleted "
		 "nodes; its holder renews it every third of it, another agent takes it over once "
		 "it went unrenewed this long", .min = 1000, .max = 3600000},
	{0},
};

int ep_cluster_init(struct ep_manager *mg)
{
	struct ep_cluster *c = calloc(1, sizeof(*c));
	static const char *const result[] = {"result", NULL};
	static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005,
					 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5};

	if (!c)
		return -ENOMEM;
	c->mg = mg;
	c->m.ops = fibril_metric_register(mg->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_endpoint_cluster_identity_ops_total",
		.help = "Cluster-wide identity operations by result", .labels = result});
	c->m.latency = fibril_metric_register(mg->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_endpoint_cluster_identity_allocation_seconds",
		.help = "Time to get a cluster-wide identity for labels not held on this node",
		.buckets = buckets, .nbuckets = sizeof(buckets) / sizeof(buckets[0])});
	c->sub = fibril_bus_subscribe(mg->m, FIBRIL_KVSTORE_TOPIC_LEASE_LOST, 1, on_kv_event, c);
	mg->cluster_state = c;
	return c->sub ? 0 : -ENOMEM;
}

int ep_cluster_start(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;
	const char *mode = fibril_config_string(mg->m, "identity-allocation");
	void *kvctx = NULL, *nctx = NULL;
	const struct fibril_kvstore_ops *kv;
	const struct fibril_nodes_ops *nodes;

	if (!c || !mode || !strcmp(mode, "local"))
		return 0;
	if (!strcmp(mode, "crd"))
		return cl_crd_start(c);
	kv = (const struct fibril_kvstore_ops *)fibril_service_lookup(mg->m, FIBRIL_KVSTORE_CAPABILITY,
								     2, &kvctx);
	nodes = (const struct fibril_nodes_ops *)fibril_service_lookup(mg->m, FIBRIL_NODES_CAPABILITY,
								       1, &nctx);
	if (!strcmp(mode, "auto") && !kv && nodes) {
		/* no kvstore: with the k8s capability (writes), CRD mode */
		void *k8sctx = NULL;
		const struct fibril_k8s_ops *k8s = (const struct fibril_k8s_ops *)
			fibril_service_lookup(mg->m, FIBRIL_K8S_CAPABILITY, FIBRIL_K8S_VERSION, &k8sctx);
		if (k8s && FIBRIL_SERVICE_HAS(k8s, request) && k8s->request)
			return cl_crd_start(c);
	}
	if (!strcmp(mode, "auto") && (!kv || !nodes))
		return 0;
	if (!kv || !FIBRIL_SERVICE_HAS(kv, txn) || !kv->txn) {
		fibril_module_set_error(mg->m, "identity-allocation = kvstore: no kvstore (interface 2) "
					"is loaded");
		return -ENOENT;
	}
	struct fibril_node self = {.sz = sizeof(self)};
	const char *name = NULL;

	if (nodes && nodes->self(nctx, &self) == 0 && self.name[0])
		name = self.name;
	if (!name)
		name = fibril_config_get("agent", "node-name");
	char host[CL_NODE_MAX] = "";

	if (!name || !*name) {
		if (gethostname(host, sizeof(host) - 1))
			snprintf(host, sizeof(host), "node");
		name = host;
	}
	snprintf(c->node, sizeof(c->node), "%s", name);
	c->kv = kv;
	c->kvctx = kvctx;
	c->ttl_s = (int64_t)((fibril_config_duration_ms(mg->m, "identity-lease-ttl") + 999) / 1000);
	c->timeout_ms = fibril_config_duration_ms(mg->m, "identity-timeout");
	c->gc_interval_ms = fibril_config_duration_ms(mg->m, "identity-gc-interval");
	c->gc_grace_ms = fibril_config_duration_ms(mg->m, "identity-gc-grace");
	c->running = true;
	mg->cluster = c;
	mg->identity_released = ep_cluster_unref;
	c->gc_timer = fibril_timer_add(mg->m, c->gc_interval_ms, c->gc_interval_ms, cl_on_gc_tick, c);
	fibril_info(mg->m, "identities are cluster-wide through the kvstore (node %s, lease TTL %llds)",
		    c->node, (long long)c->ttl_s);
	lease_start(c);
	return 0;
}

void ep_cluster_stop(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;

	if (!c || !c->running)
		return;
	c->running = false;
	mg->cluster = NULL;
	if (c->watch)
		c->kv->unwatch(c->kvctx, c->watch);
	c->watch = NULL;
	fibril_timer_cancel(c->gc_timer);
	fibril_timer_cancel(c->lease_retry);
	cl_crd_gc_stop(c);
	c->gc_timer = c->lease_retry = NULL;
	free(c->cands);
	c->cands = NULL;
	c->ncands = 0;
	cl_known_clear(c);
	/* waiters hear now; an allocation whose request runs goes with its answer */
	cl_allocs_cancel(c);
	cl_crd_answers_free(c);
	c->crd = false;
	/* the references stay until the lease runs out: a restart keeps them */
	c->lease = 0;
	c->lease_pending = false;
}

void ep_cluster_free(struct ep_manager *mg)
{
	struct ep_cluster *c = mg->cluster_state;

	if (!c)
		return;
	ep_cluster_stop(mg);
	cl_crd_gc_free(c);
	if (c->sub)
		fibril_bus_unsubscribe(c->sub);
	if (c->crd_sub)
		fibril_bus_unsubscribe(c->crd_sub);
	free(c);
	mg->cluster_state = NULL;
}
