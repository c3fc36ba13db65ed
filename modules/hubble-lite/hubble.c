/* modules/hubble-lite/hubble.c - the hubble-lite module (capability
 * "flows"): every datapath event from the bus (datapath.event) becomes a
 * flow enriched with the endpoints at both ends (pod, namespace, labels,
 * identity, from the endpoint module's endpoint.* events) and the node
 * name and the service (the lb module's lb.service events, services.c),
 * kept in a ring of the last N ([hubble-lite] ring-size, 4095 as
 * Hubble's default). GET /v1/flows answers them with filters (filter.c);
 * /metrics gets flows by verdict, type and protocol, drops by reason, and
 * the events lost on the way. The stream's followers are in stream.c, the
 * gRPC Observer API in grpc_*.c. */
#include "hubble_int.h"
#include "grpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const struct fibril_config_key hl_config_keys[] = {
	{.name = "ring-size", .type = FIBRIL_CONFIG_INT, .default_value = "4095",
	 .help = "Flows kept in memory (the oldest is overwritten)", .min = 1, .max = 1 << 20},
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "Node name put on every flow (empty: [agent] node-name, else the host name)"},
	{.name = "grpc-socket", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "Unix socket of Hubble's Observer gRPC API (mode 0660; empty: <run-dir>/hubble.sock, "
		 "off: none)"},
	{.name = "grpc-listen", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "ADDRESS:PORT of the Observer gRPC API for remote readers, TLS with client "
		 "certificates only (empty: off)"},
	{.name = "grpc-tls-cert", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "PEM certificate (chain) of the grpc-listen server"},
	{.name = "grpc-tls-key", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "PEM private key of grpc-tls-cert"},
	{.name = "grpc-tls-client-ca", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "PEM CA bundle that grpc-listen clients' certificates must chain to"},
	{.name = "grpc-max-connections", .type = FIBRIL_CONFIG_INT, .default_value = "64",
	 .help = "gRPC connections at once per listener; more are closed at accept", .min = 1,
	 .max = 4096},
	{.name = "grpc-max-streams", .type = FIBRIL_CONFIG_INT, .default_value = "16",
	 .help = "Concurrent gRPC calls per connection", .min = 1, .max = 1024},
	{.name = "grpc-max-message", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Largest gRPC request message in bytes", .min = 64, .max = 4 << 20},
	{.name = "grpc-stream-queue", .type = FIBRIL_CONFIG_INT, .default_value = "8388608",
	 .help = "Answer bytes queued per gRPC call before a slow reader loses flows", .min = 65536,
	 .max = 1 << 30},
	{.name = "grpc-queue-total", .type = FIBRIL_CONFIG_INT, .default_value = "67108864",
	 .help = "Answer bytes queued on all gRPC calls at once (past it, followers lose flows)",
	 .min = 65536, .max = (int64_t)1 << 34},
	{.name = "grpc-idle-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "5m",
	 .help = "Close a gRPC connection with no call for this long"},
	{.name = "follow-queue", .type = FIBRIL_CONFIG_INT, .default_value = "32768",
	 .help = "Flows queued per websocket follower before it loses them", .min = 16,
	 .max = 1 << 20},
	{0},
};

/* ---- endpoints ------------------------------------------------------------------------------ */

static struct hl_ep *ep_find(struct hubble *h, uint16_t id)
{
	for (struct hl_ep *e = h->eps; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

static struct hl_ep *ep_by_addr(struct hubble *h, uint8_t family, const uint8_t *addr)
{
	for (struct hl_ep *e = h->eps; e; e = e->next)
		if ((family == 4 && e->has4 && !memcmp(e->ip4, addr, 4)) ||
		    (family == 6 && e->has6 && !memcmp(e->ip6, addr, 16)))
			return e;
	return NULL;
}

static int on_endpoint(const struct fibril_event *ev, void *ud)
{
	struct hubble *h = ud;
	const struct fibril_endpoint_event *e = ev->payload;
	if (ev->payload_len < FIBRIL_OFFSETOFEND(struct fibril_endpoint_event, labels) ||
	    e->sz < FIBRIL_OFFSETOFEND(struct fibril_endpoint_event, labels) || e->sz > ev->payload_len ||
	    (e->labels && (e->labels >= ev->payload_len ||
			   !memchr((const char *)e + e->labels, '\0', ev->payload_len - e->labels))))
		return -EINVAL;
	struct hl_ep *x = ep_find(h, e->id);
	if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_DELETED)) {
		for (struct hl_ep **pp = &h->eps; *pp; pp = &(*pp)->next) {
			if (*pp == x) {
				*pp = x->next;
				free(x);
				break;
			}
		}
		return 0;
	}
	if (!x) {
		x = calloc(1, sizeof(*x));
		if (!x)
			return -ENOMEM;
		x->next = h->eps;
		h->eps = x;
	}
	x->id = e->id;
	x->identity = e->identity;
	hl_copy_str(x->ns, sizeof(x->ns), e->pod_namespace, sizeof(e->pod_namespace));
	hl_copy_str(x->pod, sizeof(x->pod), e->pod_name, sizeof(e->pod_name));
	hl_copy_str(x->labels, sizeof(x->labels), FIBRIL_ENDPOINT_LABELS(e),
		 e->labels ? ev->payload_len - e->labels : 1);
	x->has4 = e->has_ipv4;
	x->has6 = e->has_ipv6;
	memcpy(x->ip4, &e->ipv4, 4);
	memcpy(x->ip6, &e->ipv6, 16);
	return 0;
}

/* ---- services ------------------------------------------------------------------------------ */

static int on_lb_service(const struct fibril_event *ev, void *ud)
{
	struct hubble *h = ud;
	return hl_svcmap_apply(h->svcs, ev->payload, ev->payload_len);
}

static void fill_service(struct hubble *h, struct hl_peer *p, uint8_t family, uint8_t proto)
{
	const struct hl_service *s = hl_svcmap_lookup(h->svcs, family, p->addr, p->port, proto);
	if (s)
		p->service = *s;
}

/* ---- flows ---------------------------------------------------------------------------------- */

static int proto_index(uint8_t proto)
{
	return proto == 6 ? 0 : proto == 17 ? 1 : proto == 1 ? 2 : proto == 58 ? 3 : 4;
}

/* A peer that is no endpoint of ours: another node's pod when the ipcache
 * names one at its address, with the labels of its identity. */
static void fill_remote_pod(struct hubble *h, struct hl_peer *p, uint8_t family, const uint8_t *addr)
{
	struct fibril_nodes_ipcache_pod pod = {.sz = sizeof(pod)};
	if (!h->nodes || h->nodes->ipcache_pod(h->nodes_ctx, family, addr, &pod) != 0)
		return;
	if (!p->identity)
		p->identity = pod.identity;
	hl_copy_str(p->ns, sizeof(p->ns), pod.pod_namespace, sizeof(pod.pod_namespace));
	hl_copy_str(p->pod, sizeof(p->pod), pod.pod_name, sizeof(pod.pod_name));
	const char *labels = h->idents ? h->idents->identity_labels(h->idents_ctx, p->identity) : NULL;
	if (labels)
		hl_copy_str(p->labels, sizeof(p->labels), labels, strlen(labels) + 1);
}

static void fill_peer(struct hubble *h, struct hl_peer *p, uint16_t ep_id, uint32_t identity,
		      uint8_t family, const uint8_t *addr, uint16_t port)
{
	p->ep_id = ep_id;
	p->identity = identity;
	p->port = port;
	memcpy(p->addr, addr, 16);
	struct hl_ep *e = ep_id ? ep_find(h, ep_id) : NULL;
	/* an ARP event (family 0) carries the sender and target IPv4 */
	static const uint8_t none[4];
	if (!e && (family || memcmp(addr, none, 4)))
		e = ep_by_addr(h, family ? family : 4, addr);
	if (!e) {
		if (family)
			fill_remote_pod(h, p, family, addr);
		return;
	}
	p->ep_id = e->id;
	if (!p->identity)
		p->identity = e->identity;
	hl_copy_str(p->ns, sizeof(p->ns), e->ns, sizeof(e->ns));
	hl_copy_str(p->pod, sizeof(p->pod), e->pod, sizeof(e->pod));
	hl_copy_str(p->labels, sizeof(p->labels), e->labels, sizeof(e->labels));
}

/* The policy's verdict and its rule, named now (the rule may be gone by
 * the time the flow is read). */
static void fill_policy(struct hubble *h, struct hl_policy *p, const struct fibril_datapath_event *d)
{
	if (d->policy_match == FIBRIL_DATAPATH_POLICY_NONE || d->policy_match > HL_POLICY_DEFAULT_DENY)
		return;
	p->match = d->policy_match;
	p->ingress = d->policy_dir == FIBRIL_DATAPATH_INGRESS;
	p->rule_id = d->policy_rule;
	struct fibril_policy_rule r = {.sz = sizeof(r)};
	if (!d->policy_rule || !h->pol || h->pol->rule_lookup(h->pol_ctx, d->policy_rule, &r) != 0)
		return;
	p->known = true;
	p->spec = r.spec_index;
	p->index = r.rule_index;
	snprintf(p->kind, sizeof(p->kind), "%.*s", (int)sizeof(p->kind) - 1, r.kind);
	snprintf(p->source, sizeof(p->source), "%.*s", (int)sizeof(p->source) - 1, r.source);
	snprintf(p->ns, sizeof(p->ns), "%.*s", (int)sizeof(p->ns) - 1, r.namespace_);
	snprintf(p->name, sizeof(p->name), "%.*s", (int)sizeof(p->name) - 1, r.name);
	snprintf(p->section, sizeof(p->section), "%.*s", (int)sizeof(p->section) - 1, r.section);
}

static int on_datapath_event(const struct fibril_event *ev, void *ud)
{
	struct hubble *h = ud;
	struct fibril_datapath_event d = {0};
	size_t need = offsetof(struct fibril_datapath_event, reason_name);
	const struct fibril_datapath_event *in = ev->payload;
	if (ev->payload_len < need || in->sz < need || in->sz > ev->payload_len) {
		h->malformed++;
		fibril_series_inc(h->s_lost);
		return -EINVAL;
	}
	memcpy(&d, in, in->sz < sizeof(d) ? in->sz : sizeof(d));
	if (d.lost_before) {
		h->lost += d.lost_before;
		fibril_series_add(h->s_lost, (double)d.lost_before);
		hl_follow_lost(h, "DATAPATH", d.lost_before);
		if (h->grpc)
			hl_grpc_lost(h->grpc, d.lost_before);
	}
	struct hl_flow *f = &h->ring[h->head];
	if (h->count == h->size) {
		h->overwritten++;
		fibril_series_inc(h->s_overwritten);
	} else {
		h->count++;
	}
	h->head = (h->head + 1) % h->size;
	memset(f, 0, sizeof(*f));
	f->seq = ++h->seq;
	f->time_ns = d.time_ns;
	f->type = d.type == FIBRIL_DATAPATH_EVENT_DROP		 ? HL_TYPE_DROP
		  : d.type == FIBRIL_DATAPATH_EVENT_POLICY_VERDICT ? HL_TYPE_POLICY
								   : HL_TYPE_TRACE;
	f->verdict = d.reason >= 128 ? HL_DROPPED : HL_FORWARDED;
	f->direction = d.direction;
	f->family = d.family;
	f->proto = d.proto;
	f->tcp_flags = d.tcp_flags;
	f->reason = d.reason;
	f->len = d.len;
	d.reason_name[sizeof(d.reason_name) - 1] = '\0';
	const char *rn = in->sz > need && d.reason_name[0] ? d.reason_name : "";
	if (!strncmp(rn, "drop:", 5))
		rn += 5;
	if (*rn) {
		/* a copy, not snprintf: this runs for every event */
		size_t rl = strnlen(rn, sizeof(f->reason_name) - 1);
		memcpy(f->reason_name, rn, rl);
		f->reason_name[rl] = '\0';
	} else
		snprintf(f->reason_name, sizeof(f->reason_name), "reason-%u", d.reason);
	fill_peer(h, &f->src, d.src_ep_id, d.src_identity, d.family, d.saddr, d.sport);
	fill_peer(h, &f->dst, d.dst_ep_id, d.dst_identity, d.family, d.daddr, d.dport);
	if (hl_svcmap_count(h->svcs)) {
		fill_service(h, &f->src, d.family, d.proto);
		fill_service(h, &f->dst, d.family, d.proto);
	}
	if (in->sz >= FIBRIL_OFFSETOFEND(struct fibril_datapath_event, policy_dir))
		fill_policy(h, &f->policy, &d);
	if (in->sz >= FIBRIL_OFFSETOFEND(struct fibril_datapath_event, icmp_known) && d.icmp_known) {
		f->icmp_known = true;
		f->icmp_type = d.icmp_type;
		f->icmp_code = d.icmp_code;
	}
	if (in->sz >= FIBRIL_OFFSETOFEND(struct fibril_datapath_event, xlated) && d.xlated &&
	    (d.family == 4 || d.family == 6)) {
		f->xlated = true;
		memcpy(f->src_xlated, d.saddr_xlated, sizeof(f->src_xlated));
		f->sport_xlated = d.sport_xlated;
	}
	fibril_series_inc(h->s_flows[f->verdict][f->type][proto_index(f->proto)]);
	if (f->verdict == HL_DROPPED) {
		if (!h->s_drops[f->reason])
			h->s_drops[f->reason] = fibril_metric_labels(h->m_drops, f->reason_name);
		fibril_series_inc(h->s_drops[f->reason]);
	}
	if (h->followers)
		hl_follow_flow(h, f);
	if (h->grpc)
		hl_grpc_flow(h->grpc, f);
	return 0;
}

/* ---- the ring, for the gRPC server ------------------------------------------ */

size_t hl_ring_len(const struct hubble *h) { return h->count; }

const struct hl_flow *hl_ring_get(const struct hubble *h, size_t i)
{
	return &h->ring[(h->head + h->size - h->count + i) % h->size];
}

void hl_ring_stats(const struct hubble *h, struct hl_ring_stats *st)
{
	st->num = h->count;
	st->max = h->size;
	st->seen = h->seq;
	st->lost = h->lost + h->malformed;
}

/* The datapath's count of events it did not send: the increase since its
 * last count goes to the followers as lost events with its cause. */
static int on_events_unsent(const struct fibril_event *ev, void *ud)
{
	struct hubble *h = ud;
	struct fibril_datapath_events_unsent u = {0};
	const struct fibril_datapath_events_unsent *in = ev->payload;
	size_t need = FIBRIL_OFFSETOFEND(struct fibril_datapath_events_unsent, ring_lost);
	if (ev->payload_len < need || in->sz < need || in->sz > ev->payload_len)
		return -EINVAL;
	memcpy(&u, in, sizeof(u));
	if (u.suppressed > h->sampled) {
		uint64_t n = u.suppressed - h->sampled;
		h->sampled_total += n;
		fibril_series_add(h->s_sampled, (double)n);
		hl_follow_lost(h, "EVENT_RATE_LIMIT", n);
	}
	if (u.ring_lost > h->ring_lost) {
		uint64_t n = u.ring_lost - h->ring_lost;
		h->lost += n;
		fibril_series_add(h->s_lost, (double)n);
		hl_follow_lost(h, "DATAPATH_RING", n);
	}
	/* (a datapath restarted from 0 starts the counts over) */
	h->sampled = u.suppressed;
	h->ring_lost = u.ring_lost;
	return 0;
}

/* ---- GET /v1/flows --------------------------------------------------------------------------- */

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The query's format: 0 fibril's flat flow JSON (the default, "flat"), 1
 * Hubble's ("hubble": a GetFlowsResponse per flow); -1 with err. */
int hl_format_of(const struct fibril_request *req, char *err, size_t errlen)
{
	const char *v = fibril_req_query(req, "format");
	if (!v || !strcmp(v, "flat"))
		return 0;
	if (!strcmp(v, "hubble"))
		return 1;
	snprintf(err, errlen, "query 'format': expected flat or hubble, not '%.64s'", v);
	return -1;
}

/* The filter of a request's query (GET /v1/flows, the stream's open). */
int hl_filter_from_request(struct hl_query *q, const struct fibril_request *req, char *err,
			   size_t errlen)
{
	hl_filter_init(&q->f);
	hl_filter_init(&q->exclude);
	q->has_not = false;
	uint64_t now = realtime_ns();
	for (const char *const *k = hl_filter_keys; *k; k++) {
		/* every value of a repeated key: they are ORed (hubble observe
		 * --verdict DROPPED --verdict FORWARDED) */
		const char *v;
		for (size_t i = 0; (v = fibril_req_query_n(req, *k, i)); i++)
			if (hl_filter_set(&q->f, *k, v, now, err, errlen))
				return -1;
		/* not-KEY: the flows matching every not- key are left out
		 * (hubble observe --not) */
		char nk[64];
		snprintf(nk, sizeof(nk), "not-%s", *k);
		for (size_t i = 0; (v = fibril_req_query_n(req, nk, i)); i++) {
			if (!strcmp(*k, "since") || !strcmp(*k, "until") || !strcmp(*k, "last")) {
				snprintf(err, errlen, "query '%s': %s cannot be negated", nk, *k);
				return -1;
			}
			if (hl_filter_set(&q->exclude, *k, v, now, err, errlen))
				return -1;
			q->has_not = true;
		}
	}
	return 0;
}

/* The ring's flows matching f (at most f->last of the newest), oldest
 * first, as indexes into the ring; *n of them. NULL: out of memory. */
size_t *hl_ring_matches(const struct hubble *h, const struct hl_query *q, size_t *n)
{
	const struct hl_filter *f = &q->f;
	size_t *hits = malloc((h->count ? h->count : 1) * sizeof(*hits));
	size_t nhits = 0;
	/* newest first to honour last=N */
	for (size_t i = 0; hits && i < h->count && (!f->last || nhits < f->last); i++) {
		size_t idx = (h->head + h->size - 1 - i) % h->size;
		if (hl_query_match(q, &h->ring[idx]))
			hits[nhits++] = idx;
	}
	for (size_t i = 0; hits && i < nhits / 2; i++) {
		size_t x = hits[i];
		hits[i] = hits[nhits - 1 - i];
		hits[nhits - 1 - i] = x;
	}
	*n = nhits;
	return hits;
}

static void route_flows(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct hubble *h = ud;
	struct hl_query *f = malloc(sizeof(*f));
	char err[HL_ERR_LEN];
	if (!f) {
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	int hubble = hl_format_of(req, err, sizeof(err));
	if (hubble < 0 || hl_filter_from_request(f, req, err, sizeof(err))) {
		free(f);
		fibril_resp_error(resp, 400, "%s", err);
		return;
	}
	size_t nhits = 0;
	size_t *hits = hl_ring_matches(h, f, &nhits);
	struct hl_buf b = {0};
	hl_buf_str(&b, "{\"flows\":[");
	for (size_t i = 0; hits && i < nhits; i++) {
		if (i)
			hl_buf_add(&b, ",", 1);
		if (hubble)
			hl_flow_hubble_json(&b, &h->ring[hits[i]], h->node, h->uuid_seed);
		else
			hl_flow_json(&b, &h->ring[hits[i]], h->node);
	}
	hl_buf_str(&b, "],\"node_name\":");
	hl_buf_jstr(&b, h->node);
	hl_buf_printf(&b, ",\"ring_size\":%zu,\"seen\":%llu,\"lost\":%llu,\"overwritten\":%llu,"
		      "\"sampled\":%llu}", h->size,
		      (unsigned long long)h->seq, (unsigned long long)(h->lost + h->malformed),
		      (unsigned long long)h->overwritten, (unsigned long long)h->sampled_total);
	if (!hits || b.failed)
		fibril_resp_error(resp, 500, "out of memory");
	else
		fibril_resp_json(resp, 200, b.p);
	free(b.p);
	free(hits);
	free(f);
}

/* ---- metrics ---------------------------------------------------------------------------------- */

static int metrics_register(struct hubble *h)
{
	static const char *const flow_labels[] = {"verdict", "type", "protocol", NULL};
	static const char *const drop_labels[] = {"reason", NULL};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	h->m_flows = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_hubble_flows_total", .labels = flow_labels,
		.help = "Flows made from datapath events, by verdict, type and protocol."));
	h->m_drops = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_hubble_drops_total", .labels = drop_labels,
		.help = "Dropped flows by drop reason."));
	struct fibril_metric *lost = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_hubble_lost_events_total",
		.help = "Datapath events that never became flows (bus full at the datapath, malformed)."));
	struct fibril_metric *over = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_hubble_ring_overwritten_total",
		.help = "Flows overwritten in the ring by newer ones."));
	struct fibril_metric *followers = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_hubble_followers",
		.help = "Websocket clients following the flows (/v1/flows/stream)."));
	struct fibril_metric *flost = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_hubble_follower_lost_flows_total",
		.help = "Flows a websocket follower lost by reading too slowly (its queue was full)."));
	struct fibril_metric *sampled = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_hubble_sampled_drops_total",
		.help = "Drops the datapath sent no event for (over [datapath] drop-events-rate): no flow."));
#undef OPTS
	if (!h->m_flows || !h->m_drops || !lost || !over || !followers || !flost || !sampled)
		return -errno;
	h->s_sampled = fibril_metric_series(sampled, NULL);
	h->s_followers = fibril_metric_series(followers, NULL);
	h->s_follower_lost = fibril_metric_series(flost, NULL);
	static const char *const verdicts[] = {"", "FORWARDED", "DROPPED"};
	static const char *const types[] = {"", "drop", "trace", "policy-verdict"};
	static const char *const protos[NPROTO] = {"TCP", "UDP", "ICMPv4", "ICMPv6", "other"};
	for (int v = 1; v <= 2; v++)
		for (int t = 1; t <= 3; t++)
			for (int p = 0; p < NPROTO; p++)
				h->s_flows[v][t][p] = fibril_metric_labels(h->m_flows, verdicts[v], types[t], protos[p]);
	h->s_lost = fibril_metric_series(lost, NULL);
	h->s_overwritten = fibril_metric_series(over, NULL);
	return 0;
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

static int hl_init(struct fibril_module *m)
{
	struct hubble *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->m = m;
	fibril_module_set_data(m, h);
	h->size = (size_t)fibril_config_int(m, "ring-size");
	h->ring = calloc(h->size, sizeof(*h->ring));
	if (!h->ring) {
		fibril_module_set_error(m, "cannot allocate a ring of %zu flows", h->size);
		return -ENOMEM;
	}
	const char *node = fibril_config_string(m, "node-name");
	if (!node || !*node)
		node = fibril_config_get("agent", "node-name");
	if (node && *node)
		snprintf(h->node, sizeof(h->node), "%s", node);
	else if (gethostname(h->node, sizeof(h->node) - 1))
		snprintf(h->node, sizeof(h->node), "%s", "unknown");
	if (getrandom(h->uuid_seed, sizeof(h->uuid_seed), 0) != (ssize_t)sizeof(h->uuid_seed)) {
		/* the UUIDs only need to differ between runs */
		h->uuid_seed[0] = realtime_ns();
		h->uuid_seed[1] = (uint64_t)getpid() << 32 ^ h->uuid_seed[0];
	}
	if (!(h->svcs = hl_svcmap_new())) {
		fibril_module_set_error(m, "cannot allocate the service lookup");
		return -ENOMEM;
	}
	int rc = metrics_register(h);
	if (rc) {
		fibril_module_set_error(m, "cannot register the flow metrics: %s", strerror(-rc));
		return rc;
	}
	if (!fibril_bus_subscribe(m, FIBRIL_DATAPATH_TOPIC_EVENT, FIBRIL_DATAPATH_EVENT_VERSION,
				  on_datapath_event, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_CREATED, 1, on_endpoint, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_UPDATED, 1, on_endpoint, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_DELETED, 1, on_endpoint, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_LB_TOPIC_SERVICE, FIBRIL_LB_SERVICE_EVENT_VERSION,
				  on_lb_service, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_DATAPATH_TOPIC_EVENTS_UNSENT,
				  FIBRIL_DATAPATH_EVENTS_UNSENT_VERSION, on_events_unsent, h)) {
		fibril_module_set_error(m, "cannot subscribe to the datapath, endpoint and service events");
		return -ENOMEM;
	}
	rc = fibril_api_route(m, "GET", "/v1/flows", FIBRIL_ROUTE_TCP, route_flows, h);
	if (rc) {
		fibril_module_set_error(m, "cannot register GET /v1/flows: %s", strerror(-rc));
		return rc;
	}
	const struct fibril_stream_ops ops = {
		.sz = sizeof(struct fibril_stream_ops),
		.flags = FIBRIL_STREAM_TCP | FIBRIL_STREAM_LINES,
		.max_queue = (uint32_t)fibril_config_int(m, "follow-queue"),
		.open = hl_stream_open, .close = hl_stream_close, .lost = hl_stream_lost,
	};
	h->stream = fibril_api_stream_ops(m, "/v1/flows/stream", &ops, h);
	if (!h->stream) {
		fibril_module_set_error(m, "cannot register the stream /v1/flows/stream: %s", strerror(errno));
		return -errno;
	}
	rc = hl_web_register(m);
	if (rc) {
		fibril_module_set_error(m, "cannot register the page GET /flows: %s", strerror(-rc));
		return rc;
	}
	h->start_ns = realtime_ns();
	return 0;
}

/* The policy module (wanted: started before this one, stopped after). */
static int hl_start(struct fibril_module *m)
{
	struct hubble *h = fibril_module_data(m);
	h->pol = (const struct fibril_policy_ops *)fibril_service_lookup(m, FIBRIL_POLICY_CAPABILITY, 2,
									 &h->pol_ctx);
	if (h->pol && !FIBRIL_SERVICE_HAS(h->pol, rule_lookup))
		h->pol = NULL;
	h->nodes = (const struct fibril_nodes_ops *)fibril_service_lookup(m, FIBRIL_NODES_CAPABILITY, 2,
									   &h->nodes_ctx);
	if (h->nodes && !FIBRIL_SERVICE_HAS(h->nodes, ipcache_pod))
		h->nodes = NULL;
	h->idents = (const struct fibril_endpoint_ops *)fibril_service_lookup(
		m, FIBRIL_ENDPOINT_CAPABILITY, FIBRIL_ENDPOINT_VERSION, &h->idents_ctx);
	if (h->idents && !FIBRIL_SERVICE_HAS(h->idents, identity_labels))
		h->idents = NULL;
	/* Hubble's Observer API on its listeners (off when both are off) */
	struct hl_grpc_source src = {.h = h, .node = h->node, .start_ns = h->start_ns};
	char err[HL_ERR_LEN];
	h->grpc = hl_grpc_new(m, &src, err, sizeof(err));
	if (!h->grpc && err[0]) {
		fibril_module_set_error(m, "%s", err);
		return -EINVAL;
	}
	return 0;
}

static void hl_stop(struct fibril_module *m)
{
	struct hubble *h = fibril_module_data(m);
	h->pol = NULL;
	h->pol_ctx = NULL;
	h->nodes = NULL;
	h->idents = NULL;
	hl_grpc_free(h->grpc);
	h->grpc = NULL;
}

static void hl_fini(struct fibril_module *m)
{
	struct hubble *h = fibril_module_data(m);
	if (!h)
		return;
	for (struct hl_ep *e = h->eps, *next; e; e = next) {
		next = e->next;
		free(e);
	}
	for (struct hl_follower *fw = h->followers, *next; fw; fw = next) {
		next = fw->next;
		fibril_stream_client_set_data(fw->c, NULL);
		free(fw);
	}
	free(h->line.p);
	free(h->ring);
	hl_svcmap_free(h->svcs);
	free(h);
}

static int hl_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct hubble *h = fibril_module_data(m);
	return snprintf(buf, len,
			"%zu/%zu flows, %llu seen, %llu lost, %llu drops sampled away, %d following, %u on gRPC",
			h->count, h->size, (unsigned long long)h->seq,
			(unsigned long long)(h->lost + h->malformed), (unsigned long long)h->sampled_total,
			h->nfollowers, hl_grpc_followers(h->grpc));
}

FIBRIL_MODULE(.name = HL_MODULE, .version = "1.0.0",
	      .description = "Flows from the datapath's events, enriched with pods and labels",
	      .provides = FIBRIL_LIST(HL_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY, FIBRIL_ENDPOINT_CAPABILITY,
				   FIBRIL_POLICY_CAPABILITY, FIBRIL_NODES_CAPABILITY),
	      .config_keys = hl_config_keys, .init = hl_init, .start = hl_start, .stop = hl_stop,
	      .fini = hl_fini,
	      .summary = hl_summary);
