/* modules/lb/lb.c - the lb module (capability "lb"): service load
 * balancing without kube-proxy. At start it opens its maps through the
 * host's registry (map_specs.c), restores every service and backend with
 * its ID from the pins before anything is reprogrammed, loads the
 * socket-level programs (bpf/fibril_lb.bpf.c, embedded as a skeleton) with
 * the registry's maps and attaches them to [lb] cgroup through pinned BPF
 * links (hooks.c), so a kill -9 or a restart never leaves the cgroup
 * without them. The tc programs for traffic from outside the node
 * (NodePort) and lb_ct's GC are tc.c's. Services come from PUT/DELETE
 * /v1/service (api.c, `fibril service upsert|delete`) and from the k8s
 * module (k8s.c), both through lb_upsert / lb_delete here. This file: the
 * [lb] config keys, those operations, the metrics (fibril_lb_*) and the
 * module's lifecycle. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <fibril/fibril.h>
#include <fibril/lb.h>

#include "libbpf_log.h"
#include "lb_mod.h"
#include "node_addrs.h"
#include "lb_tc.h"
#include "fibril_lb.skel.h"

/* ---- config -------------------------------------------------------------------- */
static int check_algorithm(const char *value, char *why, size_t len)
{
	uint8_t a;
	if (lb_algorithm_parse(value, &a) == 0)
		return 0;
	snprintf(why, len, "expected random or maglev");
	return -EINVAL;
}

static int check_maglev(const char *value, char *why, size_t len)
{
	char *end;
	unsigned long long m = strtoull(value, &end, 10);
	if (*end || !lb_maglev_size_ok(m)) {
		snprintf(why, len, "expected a prime between 7 and %u (Cilium's sizes: 251, 509, "
				   "1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071)", LB_MAGLEV_MAX);
		return -EINVAL;
	}
	return 0;
}

static const struct fibril_config_key lb_config_keys[] = {
	{.name = "socket-lb", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "Translate connect()/sendmsg() to services with cgroup socket hooks (false: "
		 "the hooks are detached)"},
	{.name = "cgroup", .type = FIBRIL_CONFIG_PATH, .default_value = "/sys/fs/cgroup",
	 .help = "cgroup v2 directory the socket hooks are attached to (every process below it "
		 "is load-balanced)"},
	{.name = "algorithm", .type = FIBRIL_CONFIG_STRING, .default_value = "random",
	 .help = "Backend selection of services that do not choose: random or maglev",
	 .check = check_algorithm},
	{.name = "maglev-table-size", .type = FIBRIL_CONFIG_INT, .default_value = "16381",
	 .help = "Maglev table size M (a prime); a change recreates lb_maglev",
	 .min = 7, .max = LB_MAGLEV_MAX, .check = check_maglev},
	{.name = "service-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of lb_services (one per frontend plus one per backend of each)",
	 .min = 16, .max = 16777216},
	{.name = "backend-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of lb_backends: the most backends (distinct address, port, protocol)",
	 .min = 16, .max = 16777216},
	{.name = "maglev-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "1024",
	 .help = "Services with a Maglev table (each takes 4*M bytes, allocated on use)",
	 .min = 1, .max = 65535},
	{.name = "affinity-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of lb_affinity (client, service) for sessionAffinity ClientIP",
	 .min = 16, .max = 16777216},
	{.name = "nodeport-devices", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "Devices (in the agent's netns) whose traffic from outside the node is "
		 "load-balanced per packet at tc: NodePort, external and load-balancer IPs "
		 "(IPv4 and IPv6)"},
	{.name = "ct-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "131072",
	 .help = "Entries of lb_ct, the per-packet NAT's flows (two per flow, four with SNAT)",
	 .min = 16, .max = 16777216},
	{.name = "ct-source-max", .type = FIBRIL_CONFIG_INT, .default_value = "0",
	 .help = "New flows one client (an IPv4 address, an IPv6 /64) may hold in lb_ct at "
		 "once; its further ones are dropped (tc-ct-source-quota) until the GC removes "
		 "some. 0: ct-map-max / 16",
	 .min = 0, .max = 16777216},
	{.name = "nodeport-snat", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "SNAT traffic from outside to a backend on another node to the arrival "
		 "device's address, so the reply comes back through this node (Cilium's SNAT "
		 "mode; externalTrafficPolicy Local never does); false: DNAT only"},
	{.name = "ct-timeout-tcp", .type = FIBRIL_CONFIG_DURATION, .default_value = "6h",
	 .help = "Idle time after which an open TCP flow leaves lb_ct", .min = 1000,
	 .max = 604800000},
	{.name = "ct-timeout-tcp-syn", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "Idle time after which a TCP flow whose handshake did not complete leaves lb_ct",
	 .min = 1000, .max = 604800000},
	{.name = "ct-timeout-tcp-closing", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "Idle time after which a TCP flow that saw FIN or RST leaves lb_ct",
	 .min = 1000, .max = 604800000},
	{.name = "ct-timeout-other", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "Idle time after which a UDP flow leaves lb_ct", .min = 1000, .max = 604800000},
	{.name = "ct-gc-interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "30s",
	 .help = "How often the lb_ct garbage collector runs", .min = 100, .max = 3600000},
	{.name = "external-clusterip", .type = FIBRIL_CONFIG_BOOL, .default_value = "false",
	 .help = "Also balance ClusterIP frontends at tc, for clients outside the cluster that "
		 "route the service CIDR to a node (Cilium's bpf-lb-external-clusterip); off: only "
		 "NodePort, ExternalIP and LoadBalancer frontends are reachable from outside"},
	{.name = "node-addresses", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "This node's addresses: the frontends of a Kubernetes Service's NodePorts "
		 "(unset: the node's IPv4 and global IPv6 addresses at start)"},
	{.name = "sock-revnat-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "262144",
	 .help = "Entries of lb_sk_revnat (socket, backend) -> frontend, for recvmsg and "
		 "getpeername", .min = 16, .max = 16777216},
	{0},
};

/* ---- operations shared by the API and k8s -------------------------------------------- */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void lb_count_op(struct lb *lb, const char *op, int rc)
{
	const char *res = rc == 0 ? "ok" : rc == -EINVAL ? "invalid" : rc == -EEXIST ? "conflict"
		: rc == -ENOENT ? "not-found" : "error";
	fibril_series_inc(fibril_metric_labels(lb->m_ops, op, res));
}

void lb_count_refused(struct lb *lb, const char *reason)
{
	fibril_series_inc(fibril_metric_labels(lb->m_refused, reason));
}

bool lb_addr_in(const struct lb_addr *set, size_t n, const struct lb_addr *a)
{
	for (size_t i = 0; i < n; i++)
		if (!memcmp(&set[i], a, sizeof(*a)))
			return true;
	return false;
}

const char *lb_backend_refusal(const struct lb_addr *a, const struct lb_addr *addrs, size_t n)
{
	const char *why = lb_backend_addr_refusal(a);
	return why ? why : lb_addr_in(addrs, n, a) ? "node-address" : NULL;
}

int lb_node_addrs_list(const char *list, struct lb_addr **out, size_t *n)
{
	struct mod_node_addr *all = NULL;
	size_t nall = 0, cap, k = 0;
	(void)mod_node_addrs(&all, &nall); /* unreadable: [lb] node-addresses alone */
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	cap = nall + 1 + strlen(buf) / 2;
	struct lb_addr *v = calloc(cap, sizeof(*v));
	if (!v) {
		free(all);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nall; i++) {
		if (all[i].family == AF_INET) {
			v[k].a[10] = v[k].a[11] = 0xff;
			memcpy(v[k].a + 12, &all[i].addr.v4, 4);
		} else {
			memcpy(v[k].a, &all[i].addr.v6, 16);
		}
		k++;
	}
	free(all);
	for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w && k < cap;
	     w = strtok_r(NULL, ", ", &save)) {
		struct in_addr a4;
		if (inet_pton(AF_INET, w, &a4) == 1) {
			v[k].a[10] = v[k].a[11] = 0xff;
			memcpy(v[k].a + 12, &a4, 4);
			k++;
		} else if (inet_pton(AF_INET6, w, v[k].a) == 1) {
			k++;
		}
	}
	*out = v;
	*n = k;
	return 0;
}

/* The service's event on the bus (<fibril/lb.h>): its frontend, name and
 * backends, for hubble-lite's lookup; `gone` a deleted one's frontend. */
static void publish_service(struct lb *lb, const struct lb_svc *s, uint32_t op)
{
	size_t nbe = op == FIBRIL_LB_SERVICE_DELETED ? 0 : s->nbe;
	size_t len = sizeof(struct fibril_lb_service_event) + nbe * sizeof(struct fibril_lb_backend_addr);
	uint8_t *buf = calloc(1, len);
	if (!buf)
		return;
	struct fibril_lb_service_event *ev = (struct fibril_lb_service_event *)(void *)buf;
	ev->sz = sizeof(*ev);
	ev->op = op;
	ev->id = s->id;
	ev->port = s->port;
	ev->proto = s->proto;
	ev->type = s->type;
	ev->source = s->source == LB_SRC_API   ? FIBRIL_LB_SOURCE_API
		     : s->source == LB_SRC_K8S ? FIBRIL_LB_SOURCE_K8S
		     : s->source == LB_SRC_HOSTPORT ? FIBRIL_LB_SOURCE_HOSTPORT
					       : FIBRIL_LB_SOURCE_UNKNOWN;
	memcpy(ev->addr, s->addr.a, 16);
	/* "ns/name[:port]" (k8s), "ns/name" or "name" (API) */
	const char *slash = strchr(s->name, '/');
	if (slash) {
		snprintf(ev->namespace_, sizeof(ev->namespace_), "%.*s", (int)(slash - s->name), s->name);
		snprintf(ev->name, sizeof(ev->name), "%s", slash + 1);
	} else {
		snprintf(ev->name, sizeof(ev->name), "%s", s->name);
	}
	char *colon = s->source == LB_SRC_K8S ? strchr(ev->name, ':') : NULL;
	if (colon) {
		snprintf(ev->port_name, sizeof(ev->port_name), "%s", colon + 1);
		*colon = '\0';
	}
	ev->nbackends = (uint32_t)nbe;
	ev->backends = nbe ? (uint32_t)sizeof(*ev) : 0;
	ev->backend_sz = (uint32_t)sizeof(struct fibril_lb_backend_addr);
	struct fibril_lb_backend_addr *be = (struct fibril_lb_backend_addr *)(void *)(buf + sizeof(*ev));
	for (size_t i = 0; i < nbe; i++) {
		memcpy(be[i].addr, s->be[i].addr.a, 16);
		be[i].port = s->be[i].port;
		be[i].state = s->be[i].state;
	}
	int rc = fibril_bus_publish(lb->m, FIBRIL_LB_TOPIC_SERVICE, FIBRIL_LB_SERVICE_EVENT_VERSION,
				    buf, len);
	if (rc < 0)
		fibril_warn(lb->m, "service %u: cannot publish its event: %s", s->id, strerror(-rc));
	free(buf);
}

/* The UDP backends of `old` (its ID's flows) that `now` no longer serves
 * with (gone from it, or not ready / in maintenance; now NULL: the
 * service was deleted): their lb_ct flows are purged on the worker pool,
 * as kube-proxy clears a removed UDP endpoint's conntrack entries. */
static void purge_udp_backends(struct lb *lb, uint16_t id, const struct lb_be_spec *old, size_t nold,
			       const struct lb_svc *now)
{
	struct lb_ct_purge *gone = nold ? calloc(nold, sizeof(*gone)) : NULL;
	size_t n = 0;
	if (!gone)
		return;
	for (size_t i = 0; i < nold; i++) {
		bool serving = false;
		for (size_t k = 0; now && k < now->nbe && !serving; k++)
			serving = now->be[k].port == old[i].port &&
				  !memcmp(&now->be[k].addr, &old[i].addr, sizeof(old[i].addr)) &&
				  (now->be[k].state == LB_BE_ACTIVE || now->be[k].state == LB_BE_TERMINATING);
		if (serving)
			continue;
		memcpy(gone[n].addr, old[i].addr.a, 16);
		gone[n].port = htons(old[i].port);
		gone[n].svc_id = id;
		n++;
	}
	lb_tc_purge_udp(lb->tc, gone, n);
	free(gone);
}

/* A copy of a UDP service's backends before a change (*n = 0: none). */
static struct lb_be_spec *udp_backends_of(const struct lb_svc *s, size_t *n, uint16_t *id)
{
	*n = 0;
	if (!s || s->proto != IPPROTO_UDP || !s->nbe)
		return NULL;
	struct lb_be_spec *v = malloc(s->nbe * sizeof(*v));
	if (v) {
		memcpy(v, s->be, s->nbe * sizeof(*v));
		*n = s->nbe;
		*id = s->id;
	}
	return v;
}

int lb_upsert(struct lb *lb, struct lb_svc **spec, uint16_t *id, char *err, size_t len)
{
	if (!lb->table_ready) {
		snprintf(err, len, "the lb module is not started");
		return -EAGAIN;
	}
	double t0 = now_s();
	uint16_t got = 0, old_id = 0;
	size_t nold = 0;
	struct lb_be_spec *old = udp_backends_of(
		lb_table_find(&lb->t, &(*spec)->addr, (*spec)->port, (*spec)->proto), &nold, &old_id);
	int rc = lb_table_upsert(&lb->t, spec, &got, err, len);
	fibril_series_observe(lb->s_prog, now_s() - t0);
	lb_count_op(lb, "upsert", rc);
	if (id)
		*id = got;
	if (rc == 0) {
		lb_origin_set(lb->origin, lb->t.svc[got]);
		lb_origin_flush(lb->origin);
		publish_service(lb, lb->t.svc[got], FIBRIL_LB_SERVICE_UPSERTED);
		if (old)
			purge_udp_backends(lb, old_id, old, nold, old_id == got ? lb->t.svc[got] : NULL);
	}
	free(old);
	return rc;
}

int lb_delete(struct lb *lb, uint16_t id, char *err, size_t len)
{
	if (!lb->table_ready) {
		snprintf(err, len, "the lb module is not started");
		return -EAGAIN;
	}
	struct lb_svc *s = lb_table_get(&lb->t, id);
	struct lb_svc gone = {0};
	if (s) /* the frontend, for its record: the table frees s */
		gone = (struct lb_svc){.id = s->id, .addr = s->addr, .port = s->port,
				       .proto = s->proto, .type = s->type, .source = s->source};
	if (s)
		memcpy(gone.name, s->name, sizeof(gone.name));
	size_t nold = 0;
	uint16_t old_id = 0;
	struct lb_be_spec *old = udp_backends_of(s, &nold, &old_id);
	int rc = lb_table_delete(&lb->t, id, err, len);
	if (rc == 0 && old)
		purge_udp_backends(lb, old_id, old, nold, NULL);
	free(old);
	lb_count_op(lb, "delete", rc);
	if (rc == 0) {
		lb_origin_deleted(lb->origin, &gone);
		lb_origin_flush(lb->origin);
		publish_service(lb, &gone, FIBRIL_LB_SERVICE_DELETED);
	}
	return rc;
}

struct lb_table *lb_table_of(struct lb *lb)
{
	return lb->table_ready ? &lb->t : NULL;
}

struct fibril_module *lb_module_of(struct lb *lb)
{
	return lb->m;
}

/* ---- metrics -------------------------------------------------------------------------- */
static void scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	struct lb *lb = ud;
	if (!lb->table_ready)
		return;
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0 || !lb->maps[LB_MI_METRICS])
		return;
	uint64_t *v = calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return;
	for (uint32_t k = 0; k < LB_M_COUNT; k++) {
		if (bpf_map_lookup_elem(fibril_map_fd(lb->maps[LB_MI_METRICS]), &k, v) < 0)
			continue;
		uint64_t sum = 0;
		for (int c = 0; c < ncpu; c++)
			sum += v[c];
		fibril_series_set(fibril_metric_labels(lb->m_dp, lb_metric_names[k]), (double)sum);
	}
	free(v);
}

static struct fibril_metric *reg(struct lb *lb, enum fibril_metric_type type, const char *name,
				 const char *help, const char *const *labels)
{
	return fibril_metric_register(lb->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = type, .name = name, .help = help,
		.labels = labels});
}

static int register_metrics(struct lb *lb)
{
	static const char *const op_labels[] = {"op", "result", NULL};
	static const char *const ev_labels[] = {"event", NULL};
	static const double buckets[] = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 0.1};
	lb->m_services = reg(lb, FIBRIL_METRIC_GAUGE, "fibril_lb_services", "Services programmed",
			     NULL);
	lb->m_backends = reg(lb, FIBRIL_METRIC_GAUGE, "fibril_lb_backends",
			     "Distinct backends programmed", NULL);
	lb->m_ops = reg(lb, FIBRIL_METRIC_COUNTER, "fibril_lb_operations_total",
			"Service upserts and deletes by result", op_labels);
	lb->m_dp = reg(lb, FIBRIL_METRIC_COUNTER, "fibril_lb_socket_events_total",
		       "Socket-level LB events (lb_metrics summed over CPUs at scrape time)",
		       ev_labels);
	lb->m_prog_secs = fibril_metric_register(lb->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_lb_program_duration_seconds",
		.help = "Time to program one service upsert into the maps",
		.buckets = buckets, .nbuckets = sizeof(buckets) / sizeof(buckets[0])});
	static const char *const reason_labels[] = {"reason", NULL};
	lb->m_refused = reg(lb, FIBRIL_METRIC_COUNTER, "fibril_lb_backends_refused_total",
			    "EndpointSlice endpoints refused as backends (loopback, link-local, "
			    "unspecified, multicast, the node's own address)", reason_labels);
	if (!lb->m_services || !lb->m_backends || !lb->m_ops || !lb->m_dp || !lb->m_prog_secs ||
	    !lb->m_refused)
		return -EINVAL;
	lb->s_services = fibril_metric_series(lb->m_services, NULL);
	lb->s_backends = fibril_metric_series(lb->m_backends, NULL);
	lb->s_prog = fibril_metric_series(lb->m_prog_secs, NULL);
	return fibril_metrics_on_scrape(lb->m, scrape, lb);
}

/* ---- module ---------------------------------------------------------------------------- */
static int lb_init(struct fibril_module *m)
{
	struct lb *lb = calloc(1, sizeof(*lb));
	if (!lb) {
		fibril_module_set_error(m, "out of memory");
		return -ENOMEM;
	}
	modcommon_libbpf_log_off();
	lb->m = m;
	fibril_module_set_data(m, lb);
	int rc;
	if ((rc = lb_api_register(lb)) || (rc = lb_hostport_init(lb)))
		return rc;
	if ((rc = register_metrics(lb)) < 0 || (rc = lb_tc_init(m, &lb->tc)) < 0) {
		fibril_module_set_error(m, "cannot register the lb metrics: %s", strerror(-rc));
		return rc;
	}
	return lb_k8s_init(lb, &lb->k8s);
}

static int lb_start(struct fibril_module *m)
{
	struct lb *lb = fibril_module_data(m);
	char err[600] = "";
	uint8_t alg = LB_ALG_RANDOM;
	lb_algorithm_parse(fibril_config_string(m, "algorithm"), &alg);
	lb->maglev_m = (uint32_t)fibril_config_int(m, "maglev-table-size");
	snprintf(lb->cgroup, sizeof(lb->cgroup), "%s", fibril_config_string(m, "cgroup"));
	int rc = lb_table_init(&lb->t, (uint32_t)fibril_config_int(m, "backend-map-max"),
			       lb->maglev_m, alg);
	if (rc < 0) {
		fibril_module_set_error(m, "out of memory");
		return rc;
	}
	lb->table_ready = true;
	if ((rc = lb_open_maps(lb, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	/* restore before anything is programmed: same IDs, same slots */
	double t0 = now_s();
	rc = lb_table_restore(&lb->t, &lb->restore_skipped, err, sizeof(err));
	if (rc < 0) {
		fibril_module_set_error(m, "cannot restore the services from the maps: %s",
					strerror(-rc));
		return rc;
	}
	lb->restored = (size_t)rc;
	if (lb->restore_skipped)
		fibril_warn(m, "restore: %zu services skipped (first: %s)", lb->restore_skipped, err);
	if (fibril_map_origin(lb->maps[LB_MI_MAGLEV]) == FIBRIL_MAP_RECREATED) {
		/* a new table size: rebuild the restored services' tables */
		for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++) {
			struct lb_svc *s = lb->t.svc[id];
			if (!s || s->algorithm != LB_ALG_MAGLEV)
				continue;
			struct lb_svc same = *s;
			if (lb_maps_program(&lb->t, s, &same, err, sizeof(err)) < 0)
				fibril_warn(m, "service %u: %s", id, err);
		}
	}
	/* where each came from and its name: the journal beside the pins */
	if ((rc = lb_origin_open(m, &lb->origin, err, sizeof(err))) < 0)
		fibril_warn(m, "service origins and names are not kept across restarts: %s", err);
	lb->restored_known = lb_origin_apply(lb->origin, &lb->t, &lb->restored_k8s);
	fibril_info(m, "restored %zu services (%zu from Kubernetes, %zu of unknown origin) and "
		       "%zu backends from the maps in %.1f ms", lb->restored, lb->restored_k8s,
		    lb->restored - lb->restored_known, lb->t.nbe, (now_s() - t0) * 1e3);
	for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++)
		if (lb->t.svc[id])
			publish_service(lb, lb->t.svc[id], FIBRIL_LB_SERVICE_UPSERTED);
	if ((rc = lb_load_programs(lb, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	bool enable = fibril_config_bool(m, "socket-lb");
	if ((rc = lb_attach_hooks(lb, enable, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	lb_tc_set_src(lb->tc, fibril_map_fd(lb->maps[LB_MI_CT_SRC]));
	if ((rc = lb_tc_start(lb->tc, bpf_program__fd(lb->skel->progs.fibril_lb_from_netdev),
			      bpf_program__fd(lb->skel->progs.fibril_lb_to_netdev),
			      fibril_map_fd(lb->maps[LB_MI_CT]), fibril_map_fd(lb->maps[LB_MI_DEVICES]),
			      fibril_map_fd(lb->maps[LB_MI_NODE_ADDRS]), err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	if (enable)
		fibril_health_report(m, "socket-lb", FIBRIL_HEALTH_OK, "%d hooks on %s",
				     lb->hooks_attached, lb->cgroup);
	else
		fibril_health_report(m, "socket-lb", FIBRIL_HEALTH_OK, "off ([lb] socket-lb)");
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	return lb_k8s_start(lb->k8s, fibril_config_string(m, "node-addresses"));
}

static void lb_stop(struct fibril_module *m)
{
	struct lb *lb = fibril_module_data(m);
	lb_k8s_stop(lb->k8s);
	lb_tc_stop(lb->tc);
	lb_origin_close(lb->origin);
	lb->origin = NULL;
	/* the links stay pinned and hold the programs: sockets keep being
	 * balanced while the agent is down */
	fibril_lb__destroy(lb->skel);
	lb->skel = NULL;
	if (lb->table_ready)
		lb_table_free(&lb->t);
	lb->table_ready = false;
}

static void lb_fini(struct fibril_module *m)
{
	struct lb *lb = fibril_module_data(m);
	if (!lb)
		return;
	lb_k8s_free(lb->k8s);
	lb_tc_free(lb->tc);
	lb_origin_close(lb->origin);
	fibril_lb__destroy(lb->skel);
	if (lb->table_ready)
		lb_table_free(&lb->t);
	free(lb);
	fibril_module_set_data(m, NULL);
}

static int lb_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct lb *lb = fibril_module_data(m);
	return snprintf(buf, len, "%zu services, %zu backends, %d socket hooks", lb->t.nsvc,
			lb->t.nbe, lb->hooks_attached);
}

FIBRIL_MODULE(.name = "lb", .version = "1.0.0",
	      .description = "service load balancing without kube-proxy: socket-level LB "
			     "(cgroup hooks), Maglev, stable service IDs",
	      .provides = FIBRIL_LIST("lb"), .wants = FIBRIL_LIST(FIBRIL_K8S_CAPABILITY),
	      .config_keys = lb_config_keys, .init = lb_init, .start = lb_start, .stop = lb_stop,
	      .fini = lb_fini, .summary = lb_summary);
