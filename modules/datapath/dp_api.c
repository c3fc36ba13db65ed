/* modules/datapath/dp_api.c - the datapath's API routes (docs in
 * modules/datapath/README.md):
 *
 *   GET /v1/datapath          the host device and gateways, the programs
 *                             (ingress and egress),
 *                             the endpoints in place, conntrack GC and
 *                             event counters, the effective settings
 *   GET /v1/datapath/events   the most recent events read from dp_events
 *                             (?type=drop|trace|policy-verdict to filter), oldest first */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <bpf/libbpf.h>
#include <json.h>

#include "datapath.h"

static void reply(struct fibril_response *resp, struct json_object *o)
{
	fibril_resp_json(resp, 200,
			 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

static void add_str(struct json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static void add_int(struct json_object *o, const char *k, int64_t v)
{
	json_object_object_add(o, k, json_object_new_int64(v));
}

static struct json_object *endpoint_json(const struct dp_ep *e)
{
	struct json_object *o = json_object_new_object();
	char buf[INET6_ADDRSTRLEN];
	add_int(o, "id", e->ep.id);
	add_int(o, "identity", e->ep.identity);
	add_int(o, "host-ifindex", e->ep.host_ifindex);
	if (e->ep.host_ifname[0])
		add_str(o, "host-ifname", e->ep.host_ifname);
	dp_fmt_mac(e->ep.mac, buf, sizeof(buf));
	add_str(o, "mac", buf);
	dp_fmt_mac(e->ep.host_mac, buf, sizeof(buf));
	add_str(o, "host-mac", buf);
	if (e->ep.has_ipv4) {
		inet_ntop(AF_INET, &e->ep.ipv4, buf, sizeof(buf));
		add_str(o, "ipv4", buf);
	}
	if (e->ep.has_ipv6) {
		inet_ntop(AF_INET6, &e->ep.ipv6, buf, sizeof(buf));
		add_str(o, "ipv6", buf);
	}
	/* what the kernel has on the veth right now, per hook */
	add_int(o, "attached-program", dp_prog_attached_id(e->ep.host_ifindex, DP_HOOK_INGRESS));
	add_int(o, "attached-program-egress",
		dp_prog_attached_id(e->ep.host_ifindex, DP_HOOK_EGRESS));
	if (e->error[0])
		add_str(o, "error", e->error);
	return o;
}

static void status_answer(struct datapath *dp, struct fibril_response *resp);

/* GET /v1/datapath while the programs load: answered once they are (the
 * answer names them), without holding the loop meanwhile */
static void route_status(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct datapath *dp = ud;
	if (dp->prog_job && dp->n_prog_waiters < DP_PROG_WAITERS) {
		struct fibril_response *later = fibril_resp_defer(resp);
		if (later) {
			dp->prog_waiters[dp->n_prog_waiters++] = later;
			return;
		}
	}
	status_answer(dp, resp);
}

void dp_api_programs_loaded(struct datapath *dp)
{
	while (dp->n_prog_waiters) {
		struct fibril_response *later = dp->prog_waiters[--dp->n_prog_waiters];
		status_answer(dp, later);
		fibril_resp_send(later);
	}
}

static void status_answer(struct datapath *dp, struct fibril_response *resp)
{
	struct json_object *o = json_object_new_object();
	char buf[INET6_ADDRSTRLEN];

	struct json_object *host = json_object_new_object();
	add_str(host, "name", dp->host_dev);
	json_object_object_add(host, "ready", json_object_new_boolean(dp->node_ready));
	if (dp->node_ready) {
		add_int(host, "ifindex", dp->node.host_ifindex);
		if (dp->node.has_ipv4) {
			inet_ntop(AF_INET, &dp->node.gateway4, buf, sizeof(buf));
			add_str(host, "gateway-ipv4", buf);
		}
		if (dp->node.has_ipv6) {
			inet_ntop(AF_INET6, &dp->node.gateway6, buf, sizeof(buf));
			add_str(host, "gateway-ipv6", buf);
		}
	} else if (dp->node_error[0]) {
		add_str(host, "error", dp->node_error);
	}
	json_object_object_add(o, "host-device", host);
	add_int(o, "program-id", dp_prog_id(dp, DP_HOOK_INGRESS));
	add_int(o, "program-id-egress", dp_prog_id(dp, DP_HOOK_EGRESS));
	/* the load's wall time (on a worker while the agent started) */
	json_object_object_add(o, "program-load-ms", json_object_new_double(dp->prog_load_ms));
	if (dp->prog_error[0])
		add_str(o, "program-error", dp->prog_error);

	struct json_object *tun = json_object_new_object();
	add_str(tun, "mode", dp->tunnel_ifindex ? "vxlan" : "none");
	if (dp->tunnel_ifindex) {
		add_str(tun, "device", dp->tunnel_dev);
		add_int(tun, "ifindex", dp->tunnel_ifindex);
		add_int(tun, "port", dp->tunnel_port);
		add_int(tun, "attached-program",
			dp_prog_attached_id((int)dp->tunnel_ifindex, DP_HOOK_INGRESS));
	}
	add_int(tun, "program-id", dp_prog_overlay_id(dp));
	add_int(tun, "created", (int64_t)dp->tunnel_created);
	add_int(tun, "adopted", (int64_t)dp->tunnel_adopted);
	add_int(tun, "replaced", (int64_t)dp->tunnel_replaced);
	if (dp->tunnel_error[0])
		add_str(tun, "error", dp->tunnel_error);
	json_object_object_add(o, "tunnel", tun);

	struct json_object *eps = json_object_new_array();
	for (const struct dp_ep *e = dp->eps; e; e = e->next)
		json_object_array_add(eps, endpoint_json(e));
	json_object_object_add(o, "endpoints", eps);

	struct json_object *ct = json_object_new_object();
	add_int(ct, "gc-runs", (int64_t)dp->gc_runs);
	add_int(ct, "gc-removed", (int64_t)dp->gc_removed);
	add_int(ct, "entries-after-last-gc", (int64_t)dp->gc_last_entries);
	add_int(ct, "tcp-entries-after-last-gc", (int64_t)dp->gc_last_tcp);
	add_int(ct, "other-entries-after-last-gc", (int64_t)dp->gc_last_other);
	add_int(ct, "last-gc-us", (int64_t)dp->gc_last_us);
	add_int(ct, "last-gc-bpf-calls", (int64_t)dp->gc_last_syscalls);
	add_int(ct, "max-tcp", dp->ct_max_tcp);
	add_int(ct, "max-other", dp->ct_max_other);
	add_int(ct, "refresh-interval-s", dp->ct_refresh_s);
	add_int(ct, "timeout-tcp-ms", (int64_t)dp->ct_tcp_ms);
	add_int(ct, "timeout-tcp-closing-ms", (int64_t)dp->ct_closing_ms);
	add_int(ct, "timeout-other-ms", (int64_t)dp->ct_other_ms);
	add_int(ct, "timeout-tcp-syn-ms", (int64_t)dp->ct_syn_ms);
	add_int(ct, "endpoint-share-percent", dp->ct_endpoint_share);
	add_int(ct, "outside-share-percent", dp->ct_outside_share);
	add_int(ct, "gc-interval-ms", (int64_t)dp->gc_interval_ms);
	json_object_object_add(o, "conntrack", ct);

	struct json_object *ev = json_object_new_object();
	add_int(ev, "drops", (int64_t)dp->events_drop);
	add_int(ev, "traces", (int64_t)dp->events_trace);
	add_int(ev, "policy-verdicts", (int64_t)dp->events_policy);
	add_int(ev, "malformed", (int64_t)dp->events_bad);
	add_int(ev, "drop-events-rate", dp->event_rate);
	add_int(ev, "drop-events-burst", dp->event_burst);
	json_object_object_add(ev, "trace-events", json_object_new_boolean(dp->trace));
	add_str(o, "host-routing", dp->host_routing_bpf ? "bpf" : "legacy");
	add_int(o, "host-routing-devices", dp->host_routing_bpf ? dp->netdevs : 0);
	json_object_object_add(o, "masquerade", json_object_new_boolean(dp->masquerade));
	add_int(o, "masquerade-devices", dp->nat_devs);
	add_int(o, "masquerade-entries", (int64_t)dp->gc_last_nat);
	if (dp->masqcfg_path[0]) {
		struct json_object *c = json_object_new_object();
		json_object_object_add(c, "path", json_object_new_string(dp->masqcfg_path));
		add_int(c, "loads", (int64_t)dp->masqcfg_loads);
		add_int(c, "errors", (int64_t)dp->masqcfg_errors);
		json_object_object_add(c, "error", json_object_new_string(dp->masqcfg_error));
		add_int(c, "non-masquerade-cidrs", dp->masqcfg ? (int64_t)dp->masqcfg->ncidrs : 0);
		json_object_object_add(o, "ip-masq-agent-config", c);
	}
	json_object_object_add(ev, "policy-verdict-events", json_object_new_boolean(dp->policy_verdicts));
	json_object_object_add(o, "events", ev);

	static const uint8_t reasons[] = {
		DP_REASON_FORWARDED,       DP_REASON_TO_STACK,
		DP_REASON_ND_ANSWERED,     DP_REASON_DELIVERED,
		DP_REASON_DROP_SPOOFED_IP, DP_REASON_DROP_SPOOFED_ARP,
		DP_REASON_DROP_INVALID,    DP_REASON_DROP_UNSUPPORTED_L3,
		DP_REASON_DROP_POLICY,     DP_REASON_DROP_REDIRECT,
		DP_REASON_DROP_FRAG_NOT_FOUND, DP_REASON_DROP_SPOOFED_MAC,
		DP_REASON_EVENT_SUPPRESSED, DP_REASON_EVENT_LOST, DP_REASON_TO_TUNNEL,
		DP_REASON_DROP_NO_TUNNEL_KEY, DP_REASON_DROP_TUNNEL,
		DP_REASON_TO_FIB,          DP_REASON_DROP_CT_FULL,
		DP_REASON_DROP_SPOOFED_NETWORK, DP_REASON_DROP_TUNNEL_SOURCE,
		DP_REASON_MASQUERADED,     DP_REASON_REV_NAT,
		DP_REASON_DROP_NAT_NO_PORT, DP_REASON_DROP_NAT_QUOTA,
		DP_REASON_EGW_REDIRECT,    DP_REASON_EGW_SNAT,
		DP_REASON_DROP_EGW_NO_GATEWAY, DP_REASON_DROP_EGW_RELAY,
	};
	/* packets per reason (summed over the CPUs), one object per direction */
	static const struct {
		uint8_t dir;
		const char *key;
	} dirs[] = {{DP_DIR_FROM_ENDPOINT, "packets-from-endpoints"},
		    {DP_DIR_TO_ENDPOINT, "packets-to-endpoints"},
		    {DP_DIR_FROM_OVERLAY, "packets-from-overlay"},
		    {DP_DIR_FROM_NETDEV, "packets-from-netdev"},
		    {DP_DIR_TO_NETDEV, "packets-to-netdev"}};
	for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		struct json_object *metrics = json_object_new_object();
		for (size_t i = 0; i < sizeof(reasons); i++) {
			struct dp_metrics_value v;
			if (dp_metrics_read(dp, reasons[i], dirs[d].dir, &v) == 0)
				add_int(metrics, dp_reason_name(reasons[i]), (int64_t)v.packets);
		}
		json_object_object_add(o, dirs[d].key, metrics);
	}
	reply(resp, o);
}

static struct json_object *event_json(const struct dp_event *e)
{
	struct json_object *o = json_object_new_object();
	char buf[INET6_ADDRSTRLEN];
	add_str(o, "type", e->type == DP_EVENT_DROP    ? "drop"
			   : e->type == DP_EVENT_POLICY ? "policy-verdict"
							: "trace");
	add_str(o, "direction", dp_direction_name(e->direction));
	add_str(o, "reason", dp_reason_name(e->reason));
	add_int(o, "reason-code", e->reason);
	add_int(o, "src-endpoint", e->src_ep_id);
	add_int(o, "dst-endpoint", e->dst_ep_id);
	add_int(o, "src-identity", e->src_identity);
	add_int(o, "dst-identity", e->dst_identity);
	add_int(o, "ifindex", e->ifindex);
	add_int(o, "len", e->len);
	add_int(o, "ts-ns", (int64_t)e->ts_ns);
	if (e->policy_match) {
		static const char *const match[] = {"none", "allow", "deny", "default-deny"};
		add_str(o, "policy-match", e->policy_match < 4 ? match[e->policy_match] : "unknown");
		add_str(o, "policy-direction", e->policy_dir == DP_POLICY_INGRESS ? "ingress" : "egress");
		add_int(o, "policy-rule", e->policy_rule);
	}
	if (e->family == DP_FAMILY_IPV4 || e->family == DP_FAMILY_IPV6) {
		add_int(o, "family", e->family);
		add_int(o, "proto", e->proto);
		dp_fmt_addr(e->family, e->saddr, buf, sizeof(buf));
		add_str(o, "src", buf);
		dp_fmt_addr(e->family, e->daddr, buf, sizeof(buf));
		add_str(o, "dst", buf);
		add_int(o, "sport", ntohs(e->sport));
		add_int(o, "dport", ntohs(e->dport));
	} else {
		/* ARP and unknown L3: the ARP sender / target IPs when known */
		dp_fmt_addr(DP_FAMILY_IPV4, e->saddr, buf, sizeof(buf));
		add_str(o, "src", buf);
		dp_fmt_addr(DP_FAMILY_IPV4, e->daddr, buf, sizeof(buf));
		add_str(o, "dst", buf);
	}
	return o;
}

static void route_events(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct datapath *dp = ud;
	const char *type = fibril_req_query(req, "type");
	int want = 0;
	if (type && !strcmp(type, "drop"))
		want = DP_EVENT_DROP;
	else if (type && !strcmp(type, "trace"))
		want = DP_EVENT_TRACE;
	else if (type && !strcmp(type, "policy-verdict"))
		want = DP_EVENT_POLICY;
	else if (type && *type) {
		fibril_resp_error(resp, 400, "query 'type': expected drop, trace or policy-verdict, not '%s'", type);
		return;
	}
	/* pick up what is waiting before answering */
	dp_events_drain(dp);
	struct json_object *arr = json_object_new_array();
	unsigned start = (dp->ring_head + DP_EVENT_RING - dp->ring_count) % DP_EVENT_RING;
	for (unsigned i = 0; i < dp->ring_count; i++) {
		const struct dp_event *e = &dp->ring[(start + i) % DP_EVENT_RING];
		if (!want || e->type == want)
			json_object_array_add(arr, event_json(e));
	}
	struct json_object *o = json_object_new_object();
	add_int(o, "drops", (int64_t)dp->events_drop);
	add_int(o, "traces", (int64_t)dp->events_trace);
	add_int(o, "policy-verdicts", (int64_t)dp->events_policy);
	json_object_object_add(o, "events", arr);
	reply(resp, o);
}

/* ---- metrics ----------------------------------------------------------------------------
 * Packets and bytes by direction and reason live in the per-CPU dp_metrics
 * map: they are summed at scrape time. Events and GC passes are counted as
 * they happen (dp_gc.c). */

static void metrics_scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	struct datapath *dp = ud;
	struct dp_metrics_value *sums = calloc(DP_METRICS_MAX, sizeof(*sums));
	if (sums && dp->maps[DPM_METRICS] && dp_metrics_snapshot(dp, sums) == 0) {
		for (__u32 i = 0; i < DP_METRICS_MAX; i++) {
			if (!sums[i].packets && !sums[i].bytes)
				continue; /* a slot never hit: no series */
			const char *dir = dp_direction_name(DP_METRICS_DIRECTION(i));
			const char *reason = dp_reason_name(DP_METRICS_REASON(i));
			fibril_series_set(fibril_metric_labels(dp->m_packets, dir, reason),
					  (double)sums[i].packets);
			fibril_series_set(fibril_metric_labels(dp->m_bytes, dir, reason),
					  (double)sums[i].bytes);
		}
	}
	free(sums);
	fibril_series_set(fibril_metric_labels(dp->m_ct_entries, "tcp"), (double)dp->gc_last_tcp);
	fibril_series_set(fibril_metric_labels(dp->m_ct_entries, "other"), (double)dp->gc_last_other);
	fibril_series_set(fibril_metric_series(dp->m_endpoints, NULL), (double)dp->neps);
}

static struct fibril_metric *reg(struct datapath *dp, enum fibril_metric_type type,
				 const char *name, const char *help, const char *const *labels)
{
	return fibril_metric_register(dp->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = type, .name = name, .help = help,
		.labels = labels});
}

static int metrics_register(struct datapath *dp)
{
	static const char *const dir_reason[] = {"direction", "reason", NULL};
	static const char *const type[] = {"type", NULL};
	static const char *const proto[] = {"protocol", NULL};
	static const double gc_buckets[] = {0.0001, 0.001, 0.01, 0.1, 1, 10};
	dp->m_packets = reg(dp, FIBRIL_METRIC_COUNTER, "fibril_datapath_packets_total",
			    "Packets seen by the tc programs, by direction and verdict or drop reason.",
			    dir_reason);
	dp->m_bytes = reg(dp, FIBRIL_METRIC_COUNTER, "fibril_datapath_bytes_total",
			  "Bytes seen by the tc programs, by direction and verdict or drop reason.",
			  dir_reason);
	dp->m_ct_entries = reg(dp, FIBRIL_METRIC_GAUGE, "fibril_datapath_conntrack_entries",
			       "Conntrack flows left after the last GC pass.", proto);
	dp->m_endpoints = reg(dp, FIBRIL_METRIC_GAUGE, "fibril_datapath_endpoints",
			      "Endpoints the datapath has in place.", NULL);
	struct fibril_metric *events = reg(dp, FIBRIL_METRIC_COUNTER, "fibril_datapath_events_total",
					   "Records read from the dp_events ring buffer, by type.", type);
	struct fibril_metric *runs = reg(dp, FIBRIL_METRIC_COUNTER,
					 "fibril_datapath_conntrack_gc_runs_total",
					 "Conntrack GC passes finished.", NULL);
	struct fibril_metric *removed = reg(dp, FIBRIL_METRIC_COUNTER,
					    "fibril_datapath_conntrack_gc_removed_total",
					    "Conntrack flows the GC removed (expired).", NULL);
	struct fibril_metric *secs = fibril_metric_register(dp->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_datapath_conntrack_gc_duration_seconds",
		.help = "Time a conntrack GC pass took on the worker pool.", .buckets = gc_buckets,
		.nbuckets = sizeof(gc_buckets) / sizeof(gc_buckets[0])});
	struct fibril_metric *lost = reg(dp, FIBRIL_METRIC_COUNTER, "fibril_datapath_events_lost_total",
					 "Events not published on the bus (its queue was full).", NULL);
	/* like Cilium's policy_verdict: the verdict events and policy drops the
	 * ring buffer gives (a drop past the event rate limit is not seen) */
	static const char *const verdict_labels[] = {"direction", "match", "action", NULL};
	struct fibril_metric *verdicts = reg(dp, FIBRIL_METRIC_COUNTER, "fibril_policy_verdicts_total",
					     "Policy verdicts seen in the datapath's events, by direction, "
					     "what matched and the action.", verdict_labels);
	if (!dp->m_packets || !dp->m_bytes || !dp->m_ct_entries || !dp->m_endpoints || !events ||
	    !runs || !removed || !secs || !lost || !verdicts)
		return -errno;
	static const char *const dirs[2] = {"egress", "ingress"};
	static const char *const matches[4][2] = {{"none", "allowed"}, {"rule", "allowed"},
						  {"deny-rule", "denied"}, {"default-deny", "denied"}};
	for (int d = 0; d < 2; d++)
		for (int k = 1; k < 4; k++) /* "none" is no verdict of a policy: not counted */
			dp->m_verdicts[d][k] = fibril_metric_labels(verdicts, dirs[d], matches[k][0],
								    matches[k][1]);
	dp->m_events_lost = fibril_metric_series(lost, NULL);
	dp->m_events[0] = fibril_metric_labels(events, "drop");
	dp->m_events[1] = fibril_metric_labels(events, "trace");
	dp->m_events[2] = fibril_metric_labels(events, "malformed");
	dp->m_events[3] = fibril_metric_labels(events, "policy-verdict");
	dp->m_gc_runs = fibril_metric_series(runs, NULL);
	dp->m_gc_removed = fibril_metric_series(removed, NULL);
	dp->m_gc_seconds = fibril_metric_series(secs, NULL);
	return fibril_metrics_on_scrape(dp->m, metrics_scrape, dp);
}

int dp_api_register(struct datapath *dp)
{
	int rc = fibril_api_route(dp->m, "GET", "/v1/datapath", 0, route_status, dp);
	if (rc == 0)
		rc = fibril_api_route(dp->m, "GET", "/v1/datapath/events", 0, route_events, dp);
	if (rc == 0)
		rc = metrics_register(dp);
	return rc;
}
