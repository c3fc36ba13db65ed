/* modules/hubble-lite/hubble.c - the hubble-lite module (capability
 * "flows"): every datapath event from the bus (datapath.event) becomes a
 * flow enriched with the endpoints at both ends (pod, namespace, labels,
 * identity, from the endpoint module's endpoint.* events) and the node
 * name, kept in a ring of the last N ([hubble-lite] ring-size, 4095 as
 * Hubble's default). GET /v1/flows answers them with filters (filter.c);
 * /metrics gets flows by verdict, type and protocol, drops by reason, and
 * the events lost on the way. */
#include "hubble.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json.h>

#include <fibril/fibril.h>

#define HL_MODULE "hubble-lite"
#define HL_CAPABILITY "flows"
#define NPROTO 5 /* TCP, UDP, ICMPv4, ICMPv6, other */

/* A local endpoint as the endpoint module announced it. */
struct hl_ep {
	uint16_t id;
	uint32_t identity;
	char ns[HL_NS_LEN], pod[HL_POD_LEN], labels[HL_LABELS_LEN];
	bool has4, has6;
	uint8_t ip4[4], ip6[16];
	struct hl_ep *next;
};

struct hubble {
	struct fibril_module *m;
	char node[256];
	struct hl_flow *ring;
	size_t size, head, count;
	uint64_t seq, lost, overwritten, malformed;
	struct hl_ep *eps;
	/* metrics */
	struct fibril_metric *m_flows, *m_drops;
	struct fibril_series *s_flows[3][3][NPROTO]; /* [verdict][type][proto] */
	struct fibril_series *s_drops[256];          /* by reason code, made on first drop */
	struct fibril_series *s_lost, *s_overwritten;
};

static const struct fibril_config_key hl_config_keys[] = {
	{.name = "ring-size", .type = FIBRIL_CONFIG_INT, .default_value = "4095",
	 .help = "Flows kept in memory (the oldest is overwritten)", .min = 1, .max = 1 << 20},
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "Node name put on every flow (empty: the host name)"},
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

/* Copy at most srclen bytes of src (up to its NUL), cut to fit dst. */
static void copy_str(char *dst, size_t len, const char *src, size_t srclen)
{
	size_t n = strnlen(src, srclen);
	if (n >= len)
		n = len - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
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
	copy_str(x->ns, sizeof(x->ns), e->pod_namespace, sizeof(e->pod_namespace));
	copy_str(x->pod, sizeof(x->pod), e->pod_name, sizeof(e->pod_name));
	copy_str(x->labels, sizeof(x->labels), FIBRIL_ENDPOINT_LABELS(e),
		 e->labels ? ev->payload_len - e->labels : 1);
	x->has4 = e->has_ipv4;
	x->has6 = e->has_ipv6;
	memcpy(x->ip4, &e->ipv4, 4);
	memcpy(x->ip6, &e->ipv6, 16);
	return 0;
}

/* ---- flows ---------------------------------------------------------------------------------- */

static int proto_index(uint8_t proto)
{
	return proto == 6 ? 0 : proto == 17 ? 1 : proto == 1 ? 2 : proto == 58 ? 3 : 4;
}

static void fill_peer(struct hubble *h, struct hl_peer *p, uint16_t ep_id, uint32_t identity,
		      uint8_t family, const uint8_t *addr, uint16_t port)
{
	p->ep_id = ep_id;
	p->identity = identity;
	p->port = port;
	memcpy(p->addr, addr, 16);
	struct hl_ep *e = ep_id ? ep_find(h, ep_id) : NULL;
	if (!e && family)
		e = ep_by_addr(h, family, addr);
	if (!e)
		return;
	p->ep_id = e->id;
	if (!p->identity)
		p->identity = e->identity;
	snprintf(p->ns, sizeof(p->ns), "%s", e->ns);
	snprintf(p->pod, sizeof(p->pod), "%s", e->pod);
	snprintf(p->labels, sizeof(p->labels), "%s", e->labels);
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
	f->type = d.type == FIBRIL_DATAPATH_EVENT_DROP ? HL_TYPE_DROP : HL_TYPE_TRACE;
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
	if (*rn)
		snprintf(f->reason_name, sizeof(f->reason_name), "%s", rn);
	else
		snprintf(f->reason_name, sizeof(f->reason_name), "reason-%u", d.reason);
	fill_peer(h, &f->src, d.src_ep_id, d.src_identity, d.family, d.saddr, d.sport);
	fill_peer(h, &f->dst, d.dst_ep_id, d.dst_identity, d.family, d.daddr, d.dport);
	fibril_series_inc(h->s_flows[f->verdict][f->type][proto_index(f->proto)]);
	if (f->verdict == HL_DROPPED) {
		if (!h->s_drops[f->reason])
			h->s_drops[f->reason] = fibril_metric_labels(h->m_drops, f->reason_name);
		fibril_series_inc(h->s_drops[f->reason]);
	}
	return 0;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000ULL);
	struct tm tm;
	gmtime_r(&s, &tm);
	char base[32];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%09lluZ", base, (unsigned long long)(ns % 1000000000ULL));
}

static void fmt_addr(uint8_t family, const uint8_t *a, char *buf, size_t len)
{
	if (!family || !inet_ntop(family == 4 ? AF_INET : AF_INET6, a, buf, (socklen_t)len))
		snprintf(buf, len, "%s", "");
}

static struct json_object *peer_json(const struct hl_peer *p)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "ID", json_object_new_int(p->ep_id));
	json_object_object_add(o, "identity", json_object_new_int64(p->identity));
	if (p->pod[0]) {
		json_object_object_add(o, "namespace", json_object_new_string(p->ns));
		json_object_object_add(o, "pod_name", json_object_new_string(p->pod));
	}
	struct json_object *labels = json_object_new_array();
	for (const char *l = p->labels; *l;) {
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		json_object_array_add(labels, json_object_new_string_len(l, (int)n));
		if (!end)
			break;
		l = end + 1;
	}
	json_object_object_add(o, "labels", labels);
	return o;
}

static const char *tcp_flags_text(uint8_t fl, char *buf, size_t len)
{
	static const char *const names[] = {"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"};
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < 8; i++)
		if (fl & (1u << i))
			off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "," : "", names[i]);
	return buf;
}

static struct json_object *flow_json(const struct hubble *h, const struct hl_flow *f)
{
	struct json_object *o = json_object_new_object();
	char buf[64], src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN];
	fmt_time(f->time_ns, buf, sizeof(buf));
	json_object_object_add(o, "time", json_object_new_string(buf));
	json_object_object_add(o, "seq", json_object_new_int64((int64_t)f->seq));
	json_object_object_add(o, "verdict", json_object_new_string(f->verdict == HL_DROPPED ? "DROPPED" : "FORWARDED"));
	if (f->verdict == HL_DROPPED)
		json_object_object_add(o, "drop_reason_desc", json_object_new_string(f->reason_name));
	else
		json_object_object_add(o, "trace_reason", json_object_new_string(f->reason_name));
	json_object_object_add(o, "type", json_object_new_string(f->type == HL_TYPE_DROP ? "drop" : "trace"));
	json_object_object_add(o, "traffic_direction",
			       json_object_new_string(f->direction ? "ingress" : "egress"));
	json_object_object_add(o, "node_name", json_object_new_string(h->node));
	fmt_addr(f->family, f->src.addr, src, sizeof(src));
	fmt_addr(f->family, f->dst.addr, dst, sizeof(dst));
	if (f->family) {
		struct json_object *ip = json_object_new_object();
		json_object_object_add(ip, "source", json_object_new_string(src));
		json_object_object_add(ip, "destination", json_object_new_string(dst));
		json_object_object_add(ip, "ipVersion", json_object_new_string(f->family == 4 ? "IPv4" : "IPv6"));
		json_object_object_add(o, "IP", ip);
	}
	const char *pname = hl_proto_name(f->proto);
	if (f->proto) {
		struct json_object *l4 = json_object_new_object();
		json_object_object_add(l4, "protocol", pname ? json_object_new_string(pname) : json_object_new_int(f->proto));
		if (f->proto == 6 || f->proto == 17 || f->proto == 132) {
			json_object_object_add(l4, "source_port", json_object_new_int(f->src.port));
			json_object_object_add(l4, "destination_port", json_object_new_int(f->dst.port));
		}
		if (f->proto == 6)
			json_object_object_add(l4, "flags", json_object_new_string(tcp_flags_text(f->tcp_flags, buf, sizeof(buf))));
		json_object_object_add(o, "l4", l4);
	}
	json_object_object_add(o, "source", peer_json(&f->src));
	json_object_object_add(o, "destination", peer_json(&f->dst));
	json_object_object_add(o, "length", json_object_new_int64(f->len));
	return o;
}

/* ---- GET /v1/flows --------------------------------------------------------------------------- */

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void route_flows(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct hubble *h = ud;
	struct hl_filter *f = malloc(sizeof(*f));
	if (!f) {
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	hl_filter_init(f);
	char err[HL_ERR_LEN];
	uint64_t now = realtime_ns();
	for (const char *const *k = hl_filter_keys; *k; k++) {
		const char *v = fibril_req_query(req, *k);
		if (v && hl_filter_set(f, *k, v, now, err, sizeof(err))) {
			free(f);
			fibril_resp_error(resp, 400, "%s", err);
			return;
		}
	}
	/* newest first to honour last=N, then answer oldest first */
	size_t *hits = malloc((h->count ? h->count : 1) * sizeof(*hits));
	size_t nhits = 0;
	for (size_t i = 0; hits && i < h->count && (!f->last || nhits < f->last); i++) {
		size_t idx = (h->head + h->size - 1 - i) % h->size;
		if (hl_filter_match(f, &h->ring[idx]))
			hits[nhits++] = idx;
	}
	struct json_object *arr = json_object_new_array();
	while (hits && nhits)
		json_object_array_add(arr, flow_json(h, &h->ring[hits[--nhits]]));
	free(hits);
	free(f);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "flows", arr);
	json_object_object_add(o, "node_name", json_object_new_string(h->node));
	json_object_object_add(o, "ring_size", json_object_new_int64((int64_t)h->size));
	json_object_object_add(o, "seen", json_object_new_int64((int64_t)h->seq));
	json_object_object_add(o, "lost", json_object_new_int64((int64_t)(h->lost + h->malformed)));
	json_object_object_add(o, "overwritten", json_object_new_int64((int64_t)h->overwritten));
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								    JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
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
#undef OPTS
	if (!h->m_flows || !h->m_drops || !lost || !over)
		return -errno;
	static const char *const verdicts[] = {"", "FORWARDED", "DROPPED"};
	static const char *const types[] = {"", "drop", "trace"};
	static const char *const protos[NPROTO] = {"TCP", "UDP", "ICMPv4", "ICMPv6", "other"};
	for (int v = 1; v <= 2; v++)
		for (int t = 1; t <= 2; t++)
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
	if (node && *node)
		snprintf(h->node, sizeof(h->node), "%s", node);
	else if (gethostname(h->node, sizeof(h->node) - 1))
		snprintf(h->node, sizeof(h->node), "%s", "unknown");
	int rc = metrics_register(h);
	if (rc) {
		fibril_module_set_error(m, "cannot register the flow metrics: %s", strerror(-rc));
		return rc;
	}
	if (!fibril_bus_subscribe(m, FIBRIL_DATAPATH_TOPIC_EVENT, FIBRIL_DATAPATH_EVENT_VERSION,
				  on_datapath_event, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_CREATED, 1, on_endpoint, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_UPDATED, 1, on_endpoint, h) ||
	    !fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_DELETED, 1, on_endpoint, h)) {
		fibril_module_set_error(m, "cannot subscribe to the datapath and endpoint events");
		return -ENOMEM;
	}
	rc = fibril_api_route(m, "GET", "/v1/flows", 0, route_flows, h);
	if (rc) {
		fibril_module_set_error(m, "cannot register GET /v1/flows: %s", strerror(-rc));
		return rc;
	}
	return 0;
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
	free(h->ring);
	free(h);
}

static int hl_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct hubble *h = fibril_module_data(m);
	return snprintf(buf, len, "%zu/%zu flows, %llu seen, %llu lost", h->count, h->size,
			(unsigned long long)h->seq, (unsigned long long)(h->lost + h->malformed));
}

FIBRIL_MODULE(.name = HL_MODULE, .version = "1.0.0",
	      .description = "Flows from the datapath's events, enriched with pods and labels",
	      .provides = FIBRIL_LIST(HL_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY, FIBRIL_ENDPOINT_CAPABILITY),
	      .config_keys = hl_config_keys, .init = hl_init, .fini = hl_fini,
	      .summary = hl_summary);
