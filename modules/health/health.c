/* modules/health/health.c - the health module (capability "health"), the
 * connectivity checker as cilium-health is: every [health] interval it
 * probes every node the "nodes" capability knows, this one included, and
 * the health endpoint of each (endpoint_addr.c) over ICMP echo and HTTP to
 * the peer's health responder (probe.c, responder.c), keeps per target the
 * reachability and the latency (last, p50, p99 of the last HEALTH_HISTORY
 * answers), and the connectivity matrix (its own row, and each peer's row
 * as the peer's responder last reported it). GET /v1/health answers it as
 * JSON (`fibril health status`), the connectivity component's message
 * names the unreachable peers (information: it stays OK, another node's
 * death is not this agent's health), and /metrics exports it. A probe unanswered when
 * the next round starts has failed, so a dead peer shows within two
 * intervals. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json.h>

#include <fibril/fibril.h>

#define HEALTH_MODULE "health"
#define HEALTH_CAPABILITY "health"

const char *const health_target_names[HT_COUNT] = {
	"node-icmp",  "node-http",  "endpoint-icmp",  "endpoint-http",
	"node-icmp6", "node-http6", "endpoint-icmp6", "endpoint-http6"};

static const struct fibril_config_key health_config_keys[] = {
	{.name = "port", .type = FIBRIL_CONFIG_INT, .default_value = "4240",
	 .help = "TCP port of the health responder (every node uses the same)", .min = 1, .max = 65535},
	{.name = "interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "Time between probe rounds; a probe unanswered by the next round has failed",
	 .min = 100, .max = 3600 * 1000},
	{.name = "listen-address", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "IPv4 address the responder listens on (empty: the node address)"},
	{.name = "ipv6", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "On dual-stack nodes also answer and probe over IPv6 (the node's IPv6 address and "
		 "the health endpoint of its IPv6 pod CIDR)"},
	{.name = "endpoint", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "Serve and probe a health endpoint per node (the last address of its pod CIDR)"},
	{.name = "matrix-max-nodes", .type = FIBRIL_CONFIG_INT, .default_value = "128",
	 .help = "Fetch every peer's row of the connectivity matrix while the cluster has at most this "
		 "many nodes (above: this node's row only; the matrix grows as nodes squared)",
	 .min = 0, .max = 4096},
	{.name = "max-inflight", .type = FIBRIL_CONFIG_INT, .default_value = "256",
	 .help = "HTTP probes open at once (more wait their turn within the round)", .min = 1,
	 .max = 16384},
	{0},
};

/* ---- statistics ------------------------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

uint32_t health_percentile(const struct health_probe_stat *s, unsigned pct)
{
	if (!s->n_rtt)
		return 0;
	uint32_t v[HEALTH_HISTORY];
	memcpy(v, s->rtt_us, s->n_rtt * sizeof(v[0]));
	qsort(v, s->n_rtt, sizeof(v[0]), cmp_u32);
	/* nearest rank */
	size_t rank = (s->n_rtt * pct + 99) / 100;
	return v[rank ? rank - 1 : 0];
}

static bool peer_unreachable(const struct health_peer *p, char *what, size_t len)
{
	bool bad = false;
	size_t off = 0;
	if (len)
		what[0] = '\0';
	for (int t = 0; t < HT_COUNT; t++) {
		if (p->st[t].probed && !p->st[t].reachable) {
			if (off < len)
				off += (size_t)snprintf(what + off, len - off, "%s%s", bad ? ", " : "",
							health_target_names[t]);
			bad = true;
		}
	}
	return bad;
}

/* The unreachable peers, logged and in the connectivity component's
 * message. Remote reachability is information, never this agent's own
 * health: the component stays OK (so /v1/healthz, /readyz and the
 * kubelet's probes do not turn on another node's death); GET /v1/health
 * and `fibril health status` (exit 1) are where it shows. */
static void report_health(struct health *h)
{
	char msg[sizeof(h->unreachable_msg)] = "";
	size_t off = 0, n = 0;
	for (struct health_peer *p = h->peers; p; p = p->next) {
		char what[160];
		if (!peer_unreachable(p, what, sizeof(what)))
			continue;
		if (off < sizeof(msg))
			off += (size_t)snprintf(msg + off, sizeof(msg) - off, "%s%s (%s)", n ? ", " : "",
						p->name, what);
		n++;
	}
	if (off >= sizeof(msg))
		snprintf(msg + sizeof(msg) - 5, 5, "...");
	if (!strcmp(msg, h->unreachable_msg) && (n > 0) == (h->unreachable_msg[0] != '\0'))
		return;
	snprintf(h->unreachable_msg, sizeof(h->unreachable_msg), "%s", n ? msg : "");
	if (n) {
		fibril_health_report(h->m, "connectivity", FIBRIL_HEALTH_OK,
				     "%zu of %zu nodes unreachable (information, see GET /v1/health): %s", n,
				     h->n_peers, msg);
		fibril_log(h->m, FIBRIL_LOG_WARN, "unreachable: %s", msg);
	} else {
		fibril_health_report(h->m, "connectivity", FIBRIL_HEALTH_OK, "%zu nodes reachable", h->n_peers);
		fibril_log(h->m, FIBRIL_LOG_INFO, "every node is reachable (%zu)", h->n_peers);
	}
}

/* ---- the bus: health.node (<fibril/health.h>) --------------------------------------------- */

static uint8_t reach_of(const struct health_peer *p, int family /* 0 both, 4, 6 */)
{
	bool probed = false, ok = true;
	for (int t = 0; t < HT_COUNT; t++) {
		if (!p->st[t].probed || (family == 4 && health_target_v6(t)) ||
		    (family == 6 && !health_target_v6(t)))
			continue;
		probed = true;
		ok = ok && p->st[t].reachable;
	}
	return !probed ? FIBRIL_REACH_UNKNOWN : ok ? FIBRIL_REACH_OK : FIBRIL_REACH_FAILED;
}

/* Publish p's reachability when it changed (or removed). */
static void publish_peer(struct health *h, struct health_peer *p, bool removed)
{
	struct fibril_health_node_event e = {.sz = sizeof(e), .removed = removed};
	snprintf(e.name, sizeof(e.name), "%s", p->name);
	if (!removed) {
		e.reachable = reach_of(p, 0);
		e.ipv4 = reach_of(p, 4);
		e.ipv6 = reach_of(p, 6);
		if (p->ever_published && e.reachable == p->published[0] && e.ipv4 == p->published[1] &&
		    e.ipv6 == p->published[2])
			return;
		const struct health_probe_stat *st =
			p->st[HT_NODE_ICMP].n_rtt ? &p->st[HT_NODE_ICMP] : &p->st[HT_NODE_ICMP6];
		e.node_rtt_us = st->last_rtt_us > UINT32_MAX ? UINT32_MAX : (uint32_t)st->last_rtt_us;
	} else if (!p->ever_published) {
		return;
	}
	p->published[0] = e.reachable;
	p->published[1] = e.ipv4;
	p->published[2] = e.ipv6;
	p->ever_published = !removed;
	int rc = fibril_bus_publish(h->m, FIBRIL_HEALTH_NODE_TOPIC, FIBRIL_HEALTH_NODE_VERSION, &e, sizeof(e));
	if (rc < 0)
		fibril_log(h->m, FIBRIL_LOG_WARN, "cannot publish %s's reachability: %s", p->name, strerror(-rc));
}

void health_probe_done(struct health *h, struct health_peer *p, enum health_target t, bool ok,
		       uint64_t rtt_us, const char *error)
{
	struct health_probe_stat *s = &p->st[t];
	if (!s->in_flight)
		return;
	s->in_flight = false;
	if (h->round_pending)
		h->round_pending--;
	bool changed = !s->probed || s->reachable != ok;
	s->probed = true;
	s->reachable = ok;
	if (changed)
		s->changed_ms = fibril_now_ms();
	fibril_series_inc(h->s_probes[t][ok]);
	if (ok) {
		s->last_rtt_us = rtt_us;
		s->rtt_us[s->rtt_next] = rtt_us > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt_us;
		s->rtt_next = (s->rtt_next + 1) % HEALTH_HISTORY;
		if (s->n_rtt < HEALTH_HISTORY)
			s->n_rtt++;
		s->error[0] = '\0';
		fibril_series_observe(h->s_rtt[t], (double)rtt_us / 1e6);
	} else {
		s->failed++;
		snprintf(s->error, sizeof(s->error), "%s", error ? error : "failed");
	}
	uint8_t reach = reach_of(p, 0);
	if (reach != p->reach) { /* the node's own state: since when it holds */
		p->reach = reach;
		p->reach_ms = fibril_now_ms();
		p->reach_unix = (int64_t)time(NULL);
	}
	if (changed && h->running) {
		report_health(h);
		publish_peer(h, p, false);
	}
	if (h->round_open && !h->round_pending) {
		h->round_open = false;
		h->last_round_us = health_mono_us() - h->round_start_us;
		fibril_series_observe(h->s_round, (double)h->last_round_us / 1e6);
	}
}

/* ---- peers --------------------------------------------------------------------------------------- */

static struct health_peer *peer_find(struct health *h, const char *name)
{
	for (struct health_peer *p = h->peers; p; p = p->next)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

static void peer_conclude(struct health *h, struct health_peer *p, const char *why)
{
	for (int t = 0; t < HT_COUNT; t++) {
		health_http_abort(h, p, (enum health_target)t);
		if (p->st[t].in_flight)
			health_probe_done(h, p, (enum health_target)t, false, 0, why);
	}
}

static void peer_upsert(struct health *h, const struct fibril_node *n)
{
	if (!n->name[0] || memchr(n->name, '\0', sizeof(n->name)) == NULL)
		return;
	struct health_peer *p = peer_find(h, n->name);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			fibril_log(h->m, FIBRIL_LOG_ERROR, "out of memory: node %s is not probed", n->name);
			return;
		}
		snprintf(p->name, sizeof(p->name), "%s", n->name);
		/* this node first, the others in arrival order */
		if (!strcmp(n->name, h->self) || !h->peers) {
			p->next = h->peers;
			h->peers = p;
		} else {
			struct health_peer *q = h->peers;
			while (q->next)
				q = q->next;
			q->next = p;
		}
		h->n_peers++;
	}
	p->local = !strcmp(n->name, h->self);
	struct in_addr ep;
	bool has_ep = h->ep_wanted && health_ep_addr_of(n, &ep);
	if ((p->has_node_ip && (!n->has_ipv4 || p->node_ip.s_addr != n->ipv4.s_addr)) ||
	    (p->has_ep_ip && (!has_ep || p->ep_ip.s_addr != ep.s_addr)))
		peer_conclude(h, p, "the node's address changed");
	p->has_node_ip = n->has_ipv4;
	p->node_ip = n->ipv4;
	p->has_ep_ip = has_ep;
	if (has_ep)
		p->ep_ip = ep;
	struct in6_addr ep6;
	bool has_ep6 = h->ipv6 && h->ep_wanted && health_ep_addr6_of(n, &ep6);
	if ((p->has_node_ip6 && (!h->ipv6 || !n->has_ipv6 || memcmp(&p->node_ip6, &n->ipv6, sizeof(ep6)))) ||
	    (p->has_ep_ip6 && (!has_ep6 || memcmp(&p->ep_ip6, &ep6, sizeof(ep6)))))
		peer_conclude(h, p, "the node's address changed");
	p->has_node_ip6 = h->ipv6 && n->has_ipv6;
	p->node_ip6 = n->ipv6;
	p->has_ep_ip6 = has_ep6;
	if (has_ep6)
		p->ep_ip6 = ep6;
}

static void peer_remove(struct health *h, const char *name)
{
	for (struct health_peer **pp = &h->peers; *pp; pp = &(*pp)->next) {
		struct health_peer *p = *pp;
		if (strcmp(p->name, name))
			continue;
		bool was_running = h->running;
		h->running = false; /* no health report per target: one below */
		peer_conclude(h, p, "the node left");
		h->running = was_running;
		publish_peer(h, p, true);
		if (h->queue_cursor == p)
			h->queue_cursor = p->next;
		for (size_t i = 0; i < 65536; i++)
			if (h->seqmap[i].p == p)
				h->seqmap[i].p = NULL;
		*pp = p->next;
		h->n_peers--;
		/* its series leave /metrics with it */
		fibril_metric_delete_matching(h->m_peer_reach, "peer", p->name);
		fibril_metric_delete_matching(h->m_peer_rtt, "peer", p->name);
		free(p->row);
		free(p);
		if (h->running)
			report_health(h);
		return;
	}
}

static int on_node(const struct fibril_event *ev, void *ud)
{
	struct health *h = ud;
	const struct fibril_node_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) || e->node.sz < sizeof(e->node))
		return -EINVAL;
	if (e->type == FIBRIL_NODE_DELETED)
		peer_remove(h, e->node.name);
	else
		peer_upsert(h, &e->node);
	return 0;
}

static int list_one(const struct fibril_node *n, void *ud)
{
	peer_upsert(ud, n);
	return 0;
}

/* ---- rounds ---------------------------------------------------------------------------------------- */

static void round_run(struct fibril_timer *t, void *ud)
{
	struct health *h = ud;
	/* what the last round did not answer has failed */
	for (struct health_peer *p = h->peers; p; p = p->next)
		for (int i = 0; i < HT_COUNT; i++) {
			if (p->queued[i] || p->http[i]) {
				health_http_abort(h, p, (enum health_target)i);
				p->st[i].in_flight = true; /* concluded just below */
			}
			if (p->st[i].in_flight)
				health_probe_done(h, p, (enum health_target)i, false, 0,
						  health_target_http(i)
							  ? "no HTTP answer within the interval"
							  : "no echo reply within the interval");
		}
	if (!health_matrix_on(h))
		for (struct health_peer *p = h->peers; p; p = p->next) {
			free(p->row); /* the cluster outgrew the matrix: its rows go */
			p->row = NULL;
			p->n_row = 0;
			p->row_at_ms = 0;
		}
	h->round_open = true;
	h->round_pending = 0;
	h->round_start_us = health_mono_us();
	h->rounds++;
	h->queue_cursor = NULL;
	for (struct health_peer *p = h->peers; p; p = p->next)
		for (int i = 0; i < HT_COUNT; i++) {
			if (!health_target_has(p, (enum health_target)i))
				continue;
			if (health_target_http(i))
				health_http_start(h, p, (enum health_target)i);
			else
				health_icmp_send(h, p, (enum health_target)i);
		}
	if (!h->round_pending)
		h->round_open = false;
}

/* ---- GET /v1/health --------------------------------------------------------------------------------- */

static struct json_object *ms(uint64_t us)
{
	return json_object_new_double(round((double)us / 1000.0 * 1000.0) / 1000.0);
}

static struct json_object *target_json(const struct health_probe_stat *s, uint64_t now_ms)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "probed", json_object_new_boolean(s->probed));
	/* never probed: unknown, not failing */
	json_object_object_add(o, "reachable", s->probed ? json_object_new_boolean(s->reachable) : NULL);
	json_object_object_add(o, "state", json_object_new_string(!s->probed ? "unknown" : s->reachable ? "reachable" : "unreachable"));
	if (s->n_rtt) {
		json_object_object_add(o, "last_ms", ms(s->last_rtt_us));
		json_object_object_add(o, "p50_ms", ms(health_percentile(s, 50)));
		json_object_object_add(o, "p99_ms", ms(health_percentile(s, 99)));
	}
	json_object_object_add(o, "samples", json_object_new_int64(s->n_rtt));
	json_object_object_add(o, "sent", json_object_new_int64((int64_t)s->sent));
	json_object_object_add(o, "failed", json_object_new_int64((int64_t)s->failed));
	if (s->probed)
		json_object_object_add(o, "since_s", json_object_new_double(
			(double)(now_ms - s->changed_ms) / 1000.0));
	if (s->error[0] && s->probed && !s->reachable)
		json_object_object_add(o, "error", json_object_new_string(s->error));
	return o;
}

static void route_health(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct health *h = ud;
	uint64_t now = fibril_now_ms();
	char a[INET6_ADDRSTRLEN];
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "node", json_object_new_string(h->self));
	json_object_object_add(o, "port", json_object_new_int(h->port));
	json_object_object_add(o, "interval_ms", json_object_new_int64((int64_t)h->interval_ms));
	json_object_object_add(o, "icmp_socket", json_object_new_string(h->icmp_raw ? "raw" : "datagram"));
	if (h->ep_added)
		json_object_object_add(o, "endpoint_ip",
				       json_object_new_string(inet_ntop(AF_INET, &h->ep_ip, a, sizeof(a))));
	if (h->ep6_added)
		json_object_object_add(o, "endpoint_ip6",
				       json_object_new_string(inet_ntop(AF_INET6, &h->ep_ip6, a, sizeof(a))));
	json_object_object_add(o, "rounds", json_object_new_int64((int64_t)h->rounds));
	json_object_object_add(o, "last_round_ms", ms(h->last_round_us));
	json_object_object_add(o, "responder_served", json_object_new_int64((int64_t)h->served));
	struct json_object *rs = json_object_new_object();
	json_object_object_add(rs, "connections", json_object_new_int64(h->n_rconns));
	json_object_object_add(rs, "max", json_object_new_int64(h->rconn_max));
	json_object_object_add(rs, "not_from_nodes", json_object_new_int64(h->n_rconns_other));
	json_object_object_add(rs, "refused", json_object_new_int64((int64_t)h->refused));
	json_object_object_add(rs, "shed", json_object_new_int64((int64_t)h->shed));
	json_object_object_add(rs, "parked", json_object_new_int64(h->n_parked));
	json_object_object_add(o, "responder", rs);
	struct json_object *peers = json_object_new_array();
	struct json_object *unreach = json_object_new_array();
	struct json_object *unreach_since = json_object_new_object(); /* name: unix time */
	struct json_object *names = json_object_new_array();
	struct json_object *rows = json_object_new_object();
	struct json_object *self_row = json_object_new_object();
	for (struct health_peer *p = h->peers; p; p = p->next) {
		struct json_object *po = json_object_new_object();
		json_object_object_add(po, "name", json_object_new_string(p->name));
		json_object_object_add(po, "local", json_object_new_boolean(p->local));
		if (p->has_node_ip)
			json_object_object_add(po, "node_ip", json_object_new_string(
				inet_ntop(AF_INET, &p->node_ip, a, sizeof(a))));
		if (p->has_ep_ip)
			json_object_object_add(po, "endpoint_ip", json_object_new_string(
				inet_ntop(AF_INET, &p->ep_ip, a, sizeof(a))));
		if (p->has_node_ip6)
			json_object_object_add(po, "node_ip6", json_object_new_string(
				inet_ntop(AF_INET6, &p->node_ip6, a, sizeof(a))));
		if (p->has_ep_ip6)
			json_object_object_add(po, "endpoint_ip6", json_object_new_string(
				inet_ntop(AF_INET6, &p->ep_ip6, a, sizeof(a))));
		char what[128];
		bool bad = peer_unreachable(p, what, sizeof(what));
		bool probed = false;
		struct json_object *tg = json_object_new_object();
		/* per family: reachable when each of its probed targets is */
		bool fam_probed[2] = {false, false}, fam_ok[2] = {true, true};
		for (int t = 0; t < HT_COUNT; t++) {
			if (!health_target_has(p, (enum health_target)t) && !p->st[t].probed)
				continue;
			probed = probed || p->st[t].probed;
			if (p->st[t].probed) {
				fam_probed[health_target_v6(t)] = true;
				fam_ok[health_target_v6(t)] = fam_ok[health_target_v6(t)] && p->st[t].reachable;
			}
			json_object_object_add(tg, health_target_names[t], target_json(&p->st[t], now));
		}
		/* a node none of whose probes concluded yet is unknown, not failing */
		json_object_object_add(po, "reachable", probed ? json_object_new_boolean(!bad) : NULL);
		json_object_object_add(po, "state", json_object_new_string(!probed ? "unknown (not yet probed)" : bad ? "unreachable" : "reachable"));
		if (probed) { /* since when that state holds */
			json_object_object_add(po, "since_s", json_object_new_double((double)(now - p->reach_ms) / 1000.0));
			json_object_object_add(po, "since_unix", json_object_new_int64(p->reach_unix));
		}
		struct json_object *fams = json_object_new_object();
		for (int f = 0; f < 2; f++) {
			if (!fam_probed[f])
				continue;
			struct json_object *fo = json_object_new_object();
			json_object_object_add(fo, "reachable", json_object_new_boolean(fam_ok[f]));
			/* the node address's answered ICMP probe: the latency per family */
			const struct health_probe_stat *st = &p->st[f ? HT_NODE_ICMP6 : HT_NODE_ICMP];
			if (st->n_rtt)
				json_object_object_add(fo, "node_icmp_p50_ms", ms(health_percentile(st, 50)));
			json_object_object_add(fams, f ? "ipv6" : "ipv4", fo);
		}
		json_object_object_add(po, "families", fams);
		json_object_object_add(po, "targets", tg);
		json_object_array_add(peers, po);
		if (bad) {
			json_object_array_add(unreach, json_object_new_string(p->name));
			json_object_object_add(unreach_since, p->name, json_object_new_int64(p->reach_unix));
		}
		json_object_array_add(names, json_object_new_string(p->name));
		if (probed)
			json_object_object_add(self_row, p->name, json_object_new_boolean(!bad));
		/* a peer's row as of its last answer; none while it does not answer
		 * (its view now is unknown) */
		if (!p->local && p->row_at_ms && p->st[HT_NODE_HTTP].reachable) {
			struct json_object *r = json_object_new_object();
			for (size_t i = 0; i < p->n_row; i++)
				json_object_object_add(r, p->row[i].name,
						       json_object_new_boolean(p->row[i].reachable));
			json_object_object_add(rows, p->name, r);
		}
	}
	json_object_object_add(rows, h->self, self_row);
	json_object_object_add(o, "peers", peers);
	json_object_object_add(o, "unreachable", unreach);
	json_object_object_add(o, "unreachable_since", unreach_since);
	struct json_object *matrix = json_object_new_object();
	json_object_object_add(matrix, "peer_rows", json_object_new_boolean(health_matrix_on(h)));
	json_object_object_add(matrix, "nodes", names);
	json_object_object_add(matrix, "rows", rows);
	json_object_object_add(o, "matrix", matrix);
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								    JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

/* ---- metrics ------------------------------------------------------------------------------------------ */

static void on_scrape(struct fibril_module *m, void *ud)
{
	struct health *h = ud;
	size_t ok = 0, bad = 0;
	for (struct health_peer *p = h->peers; p; p = p->next) {
		char what[8];
		bool probed = false;
		for (int t = 0; t < HT_COUNT; t++) {
			if (!p->st[t].probed)
				continue;
			probed = true;
			fibril_series_set(fibril_metric_labels(h->m_peer_reach, p->name, health_target_names[t]),
					  p->st[t].reachable ? 1 : 0);
			if (p->st[t].n_rtt)
				fibril_series_set(fibril_metric_labels(h->m_peer_rtt, p->name, health_target_names[t]),
						  (double)p->st[t].last_rtt_us / 1e6);
		}
		if (probed)
			peer_unreachable(p, what, sizeof(what)) ? bad++ : ok++;
	}
	fibril_series_set(h->s_peers_ok, (double)ok);
	fibril_series_set(h->s_peers_bad, (double)bad);
}

static int metrics_register(struct health *h)
{
	static const char *const tr[] = {"target", "result", NULL};
	static const char *const tg[] = {"target", NULL};
	static const char *const pt[] = {"peer", "target", NULL};
	static const char *const st[] = {"state", NULL};
	static const double rtt_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
					     0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
#define OPTS(...) (&(struct fibril_metric_opts){.sz = sizeof(struct fibril_metric_opts), __VA_ARGS__})
	struct fibril_metric *probes = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_health_probes_total", .labels = tr,
		.help = "Connectivity probes concluded, by target (node-icmp, node-http, endpoint-icmp, endpoint-http; the same with a 6 over IPv6) and result."));
	struct fibril_metric *rtt = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_health_probe_rtt_seconds", .labels = tg, .buckets = rtt_buckets,
		.nbuckets = sizeof(rtt_buckets) / sizeof(rtt_buckets[0]),
		.help = "Round-trip time of the answered probes, by target."));
	struct fibril_metric *rounds = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_health_round_duration_seconds", .buckets = rtt_buckets,
		.nbuckets = sizeof(rtt_buckets) / sizeof(rtt_buckets[0]),
		.help = "Time from a round's start until its last probe concluded."));
	struct fibril_metric *peers = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_health_nodes", .labels = st,
		.help = "Nodes probed, by state (reachable: every target answered its last probe)."));
	struct fibril_metric *served = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_health_responder_requests_total",
		.help = "Requests the health responder answered."));
	h->m_peer_reach = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_health_node_reachable", .labels = pt,
		.help = "1 when the last probe of the node's target was answered, else 0."));
	h->m_peer_rtt = fibril_metric_register(h->m, OPTS(.type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_health_node_rtt_seconds", .labels = pt,
		.help = "Round-trip time of the node's target's last answered probe."));
#undef OPTS
	if (!probes || !rtt || !rounds || !peers || !served || !h->m_peer_reach || !h->m_peer_rtt)
		return -errno;
	for (int t = 0; t < HT_COUNT; t++) {
		h->s_probes[t][0] = fibril_metric_labels(probes, health_target_names[t], "fail");
		h->s_probes[t][1] = fibril_metric_labels(probes, health_target_names[t], "ok");
		h->s_rtt[t] = fibril_metric_labels(rtt, health_target_names[t]);
	}
	h->s_round = fibril_metric_series(rounds, NULL);
	h->s_peers_ok = fibril_metric_labels(peers, "reachable");
	h->s_peers_bad = fibril_metric_labels(peers, "unreachable");
	h->s_served = fibril_metric_series(served, NULL);
	return fibril_metrics_on_scrape(h->m, on_scrape, h);
}

/* ---- lifecycle ------------------------------------------------------------------------------------------ */

static int health_init(struct fibril_module *m)
{
	struct health *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->m = m;
	h->icmp_fd = h->icmp6_fd = -1;
	fibril_module_set_data(m, h);
	h->seqmap = calloc(65536, sizeof(*h->seqmap));
	if (!h->seqmap)
		return -ENOMEM;
	h->port = (uint16_t)fibril_config_int(m, "port");
	h->interval_ms = fibril_config_duration_ms(m, "interval");
	h->max_inflight = (unsigned)fibril_config_int(m, "max-inflight");
	h->matrix_max = (size_t)fibril_config_int(m, "matrix-max-nodes");
	h->ep_wanted = fibril_config_bool(m, "endpoint");
	h->ipv6 = fibril_config_bool(m, "ipv6");
	const char *la = fibril_config_string(m, "listen-address");
	struct in_addr tmp;
	if (la && *la && inet_pton(AF_INET, la, &tmp) != 1) {
		fibril_module_set_error(m, "[health] listen-address: '%s' is not an IPv4 address", la);
		return -EINVAL;
	}
	int rc = metrics_register(h);
	if (rc) {
		fibril_module_set_error(m, "cannot register the health metrics: %s", strerror(-rc));
		return rc;
	}
	if (!fibril_bus_subscribe(m, FIBRIL_NODES_TOPIC, 1, on_node, h)) {
		fibril_module_set_error(m, "cannot subscribe to %s", FIBRIL_NODES_TOPIC);
		return -ENOMEM;
	}
	rc = fibril_api_route(m, "GET", "/v1/health", 0, route_health, h);
	if (rc) {
		fibril_module_set_error(m, "cannot register GET /v1/health: %s", strerror(-rc));
		return rc;
	}
	return 0;
}

static int health_start(struct fibril_module *m)
{
	struct health *h = fibril_module_data(m);
	char why[256];
	h->nodes = (const struct fibril_nodes_ops *)fibril_service_lookup(m, FIBRIL_NODES_CAPABILITY,
									    FIBRIL_NODES_VERSION, &h->nodes_ctx);
	if (!h->nodes) {
		fibril_module_set_error(m, "no provider of the nodes capability");
		return -ENOENT;
	}
	struct fibril_node self = {.sz = sizeof(self)};
	int rc = h->nodes->self(h->nodes_ctx, &self);
	if (rc < 0) {
		fibril_module_set_error(m, "cannot read this node: %s", strerror(-rc));
		return rc;
	}
	snprintf(h->self, sizeof(h->self), "%s", self.name);
	struct health_addr listen = {.family = AF_INET, .v4 = self.ipv4};
	const char *la = fibril_config_string(m, "listen-address");
	if (la && *la)
		inet_pton(AF_INET, la, &listen.v4);
	else if (!self.has_ipv4) {
		fibril_module_set_error(m, "this node has no IPv4 address to answer on (set [health] listen-address)");
		return -EINVAL;
	}
	rc = health_responder_open(h, listen, why, sizeof(why));
	if (rc >= 0 && h->ipv6 && self.has_ipv6) { /* dual stack: answer on the IPv6 node address too */
		struct health_addr l6 = {.family = AF_INET6, .v6 = self.ipv6};
		rc = health_responder_open(h, l6, why, sizeof(why));
	}
	if (rc < 0 || (rc = health_icmp_open(h, why, sizeof(why))) < 0) {
		fibril_module_set_error(m, "%s", why);
		health_responder_close_all(h);
		return rc;
	}
	health_endpoint_up(h, &self);
	h->nodes->list(h->nodes_ctx, list_one, h);
	h->timer = fibril_timer_add(m, 50, h->interval_ms, round_run, h);
	if (!h->timer) {
		fibril_module_set_error(m, "cannot arm the probe timer");
		health_icmp_close(h);
		health_responder_close_all(h);
		return -ENOMEM;
	}
	h->running = true;
	fibril_health_report(m, "connectivity", FIBRIL_HEALTH_OK, "first round pending");
	return 0;
}

static void health_stop(struct fibril_module *m)
{
	struct health *h = fibril_module_data(m);
	h->running = false;
	if (h->timer)
		fibril_timer_cancel(h->timer);
	h->timer = NULL;
	if (h->ep_timer)
		fibril_timer_cancel(h->ep_timer);
	h->ep_timer = NULL;
	for (struct health_peer *p = h->peers; p; p = p->next) {
		peer_conclude(h, p, "stopping");
		publish_peer(h, p, true);
	}
	health_icmp_close(h);
	health_responder_close_all(h);
	if (h->ep_added)
		health_ep_addr_del((struct health_addr){.family = AF_INET, .v4 = h->ep_ip});
	if (h->ep6_added)
		health_ep_addr_del((struct health_addr){.family = AF_INET6, .v6 = h->ep_ip6});
	h->ep_added = h->ep6_added = false;
}

static void health_fini(struct fibril_module *m)
{
	struct health *h = fibril_module_data(m);
	if (!h)
		return;
	while (h->peers) {
		struct health_peer *p = h->peers;
		h->peers = p->next;
		free(p->row);
		free(p);
	}
	free(h->seqmap);
	free(h);
}

static int health_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct health *h = fibril_module_data(m);
	size_t bad = 0;
	for (struct health_peer *p = h->peers; p; p = p->next) {
		char w[4];
		bad += peer_unreachable(p, w, sizeof(w));
	}
	return snprintf(buf, len, "%zu/%zu nodes reachable, round %llu", h->n_peers - bad, h->n_peers,
			(unsigned long long)h->rounds);
}

FIBRIL_MODULE(.name = HEALTH_MODULE, .version = "1.0.0",
	      .description = "Node and health endpoint connectivity probing (ICMP and HTTP)",
	      .provides = FIBRIL_LIST(HEALTH_CAPABILITY),
	      .requires = FIBRIL_LIST(FIBRIL_NODES_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY),
	      .config_keys = health_config_keys, .init = health_init, .start = health_start,
	      .stop = health_stop, .fini = health_fini, .summary = health_summary);
