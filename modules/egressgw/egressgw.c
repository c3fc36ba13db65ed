/* modules/egressgw/egressgw.c - the egress gateway module (issue 24):
 * Cilium's CiliumEgressGatewayPolicy with a LIST of gateways and failover.
 * It follows the cluster's identities (bus: endpoint.identity-*, and the
 * local endpoints), the nodes (the nodes capability and nodes.node) and
 * their reachability (health.node), and writes the datapath's dp_egress
 * table whole through the datapath's egress_sync (interface 7) each time
 * any of it changes: per selected identity and destination CIDR the live
 * gateway chosen by rendezvous hashing over the policy's live gateways
 * (every node computes the same choice; a dead gateway's identities move,
 * the others stay), this node's own egress IP where it is one of the
 * policy's gateways. A gateway is dead once health reports its node
 * unreachable (within two [health] intervals) or its node record is gone;
 * no live gateway: the flows are dropped, never leaked. Policies come
 * from the API (egw_api.c) and are saved under <state-dir>/egressgw/. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json.h>

#include <fibril/bus.h>
#include <fibril/compat.h>
#include <fibril/endpoint.h>
#include <fibril/health.h>
#include <fibril/log.h>
#include <fibril/loop.h>
#include <fibril/service.h>

#include "egressgw.h"

#define STATE_FILE "policies.json"

uint64_t egw_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- identities ------------------------------------------------------------------ */

static struct egw_identity *identity_find(struct egw *g, uint32_t id)
{
	for (size_t i = 0; i < g->n_ids; i++)
		if (g->ids[i].id == id)
			return &g->ids[i];
	return NULL;
}

/* 1 when it changed */
static int identity_set(struct egw *g, uint32_t id, const char *labels)
{
	struct egw_identity *e = identity_find(g, id);
	if (e) {
		if (!strcmp(e->labels, labels))
			return 0;
		char *l = strdup(labels);
		if (!l)
			return -ENOMEM;
		free(e->labels);
		e->labels = l;
		return 1;
	}
	if (g->n_ids == g->cap_ids) {
		size_t cap = g->cap_ids ? g->cap_ids * 2 : 64;
		struct egw_identity *v = realloc(g->ids, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		g->ids = v;
		g->cap_ids = cap;
	}
	char *l = strdup(labels);
	if (!l)
		return -ENOMEM;
	g->ids[g->n_ids++] = (struct egw_identity){.id = id, .labels = l};
	return 1;
}

void egw_adopted_clear(struct egw *g)
{
	free(g->adopted);
	g->adopted = NULL;
	g->n_adopted = g->cap_adopted = 0;
}

static int adopt(const struct fibril_datapath_egress_entry *e, void *ud)
{
	struct egw *g = ud;
	if (g->n_adopted == g->cap_adopted) {
		size_t cap = g->cap_adopted ? g->cap_adopted * 2 : 64;
		void *v = realloc(g->adopted, cap * sizeof(*g->adopted));
		if (!v)
			return 1;
		g->adopted = v;
		g->cap_adopted = cap;
	}
	g->adopted[g->n_adopted++] = *e;
	return 0;
}

/* an identity announced or gone: what an earlier run wrote for it no longer counts */
static void adopted_drop(struct egw *g, uint32_t id)
{
	for (size_t i = 0; i < g->n_adopted;)
		if (g->adopted[i].identity == id)
			g->adopted[i] = g->adopted[--g->n_adopted];
		else
			i++;
}

static void identity_drop(struct egw *g, uint32_t id)
{
	adopted_drop(g, id);
	struct egw_identity *e = identity_find(g, id);
	if (!e)
		return;
	free(e->labels);
	*e = g->ids[--g->n_ids];
}

static int on_identity(const struct fibril_event *ev, void *ud)
{
	struct egw *g = ud;
	const struct fibril_identity_event *ie = ev->payload;
	if (ev->payload_len < sizeof(*ie) || ie->labels >= ev->payload_len)
		return -EINVAL;
	if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_IDENTITY_DELETED)) {
		identity_drop(g, ie->identity);
		egw_sync_soon(g);
		return 0;
	}
	if (memchr((const char *)ie + ie->labels, '\0', ev->payload_len - ie->labels) == NULL)
		return -EINVAL;
	int rc = identity_set(g, ie->identity, FIBRIL_IDENTITY_LABELS(ie));
	if (rc > 0) {
		adopted_drop(g, ie->identity);
		egw_sync_soon(g);
	}
	return rc < 0 ? rc : 0;
}

/* local endpoints carry their identity's labels too (node-local
 * allocation announces no identity events) */
static int on_endpoint(const struct fibril_event *ev, void *ud)
{
	struct egw *g = ud;
	const struct fibril_endpoint_event *ep = ev->payload;
	if (ev->payload_len < sizeof(*ep) || ep->labels >= ev->payload_len || !ep->identity)
		return 0;
	if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_DELETED))
		return 0; /* the identity may live on elsewhere: identity-deleted says */
	if (memchr((const char *)ep + ep->labels, '\0', ev->payload_len - ep->labels) == NULL)
		return -EINVAL;
	int rc = identity_set(g, ep->identity, FIBRIL_ENDPOINT_LABELS(ep));
	if (rc > 0) {
		adopted_drop(g, ep->identity);
		egw_sync_soon(g);
	}
	return rc < 0 ? rc : 0;
}

/* ---- nodes and their reachability -------------------------------------------------- */

struct egw_node *egw_node_find(struct egw *g, const char *name)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (!strcmp(g->nodes_v[i].name, name))
			return &g->nodes_v[i];
	return NULL;
}

static struct egw_node *node_get(struct egw *g, const char *name)
{
	struct egw_node *n = egw_node_find(g, name);
	if (n)
		return n;
	if (g->n_nodes == g->cap_nodes) {
		size_t cap = g->cap_nodes ? g->cap_nodes * 2 : 16;
		struct egw_node *v = realloc(g->nodes_v, cap * sizeof(*v));
		if (!v)
			return NULL;
		g->nodes_v = v;
		g->cap_nodes = cap;
	}
	n = &g->nodes_v[g->n_nodes++];
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->since_ms = egw_now_ms();
	return n;
}

static void node_learn(struct egw *g, const struct fibril_node *fn, bool deleted)
{
	char name[FIBRIL_NODE_NAME_LEN];
	snprintf(name, sizeof(name), "%.*s", (int)sizeof(fn->name) - 1, fn->name);
	struct egw_node *n = node_get(g, name);
	if (!n)
		return;
	bool was = n->known;
	struct in_addr old = n->ip;
	n->known = !deleted;
	n->has_ip = fn->has_tunnel_endpoint || fn->has_ipv4;
	n->ip = fn->has_tunnel_endpoint ? fn->tunnel_endpoint : fn->ipv4;
	if (was != n->known) {
		n->since_ms = egw_now_ms();
		fibril_info(g->m, "node %s %s", name, n->known ? "known" : "gone");
	}
	if (was != n->known || old.s_addr != n->ip.s_addr)
		egw_sync_soon(g);
}

static int on_node(const struct fibril_event *ev, void *ud)
{
	const struct fibril_node_event *ne = ev->payload;
	if (ev->payload_len < sizeof(*ne))
		return -EINVAL;
	node_learn(ud, &ne->node, ne->type == FIBRIL_NODE_DELETED);
	return 0;
}

static int on_health(const struct fibril_event *ev, void *ud)
{
	struct egw *g = ud;
	const struct fibril_health_node_event *he = ev->payload;
	if (ev->payload_len < FIBRIL_OFFSETOFEND(struct fibril_health_node_event, reachable))
		return -EINVAL;
	char name[FIBRIL_NODE_NAME_LEN];
	snprintf(name, sizeof(name), "%.*s", (int)sizeof(he->name) - 1, he->name);
	struct egw_node *n = node_get(g, name);
	if (!n)
		return -ENOMEM;
	uint8_t r = he->removed ? EGW_REACH_UNKNOWN : he->reachable;
	if (r > EGW_REACH_FAILED)
		r = EGW_REACH_UNKNOWN;
	if (r != n->reach) {
		n->reach = r;
		n->since_ms = egw_now_ms();
		fibril_info(g->m, "node %s %s (health)", name,
			    r == EGW_REACH_FAILED ? "unreachable" : r == EGW_REACH_OK ? "reachable" : "not probed");
		egw_sync_soon(g);
	}
	return 0;
}

static int list_node(const struct fibril_node *fn, void *ud)
{
	node_learn(ud, fn, false);
	return 0;
}

bool egw_gateway_alive(struct egw *g, const char *node)
{
	if (!strcmp(node, g->self))
		return true; /* this agent runs */
	const struct egw_node *n = egw_node_find(g, node);
	return n && n->known && n->has_ip && n->reach != EGW_REACH_FAILED;
}

/* ---- the table --------------------------------------------------------------------- */

static uint64_t rendezvous(uint32_t id, const char *node)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (int i = 0; i < 4; i++) {
		h ^= (id >> (8 * i)) & 0xff;
		h *= 1099511628211ull;
	}
	for (const char *c = node; *c; c++) {
		h ^= (unsigned char)*c;
		h *= 1099511628211ull;
	}
	h ^= h >> 33; /* spread the last bytes */
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

const struct egw_gateway *egw_choose(struct egw *g, const struct egw_policy *p, uint32_t id)
{
	const struct egw_gateway *best = NULL;
	uint64_t best_h = 0;
	for (size_t i = 0; i < p->n_gw; i++) {
		if (!egw_gateway_alive(g, p->gw[i].node))
			continue;
		uint64_t h = rendezvous(id, p->gw[i].node);
		if (!best || h > best_h) {
			best = &p->gw[i];
			best_h = h;
		}
	}
	return best;
}

/* The table being computed: entries in policy order (by name), then
 * sorted by key with that order as the tie-break, so where two policies
 * give one (identity, prefix) the first policy's entry is kept. */
#define EGW_RAW_MAX (4 * 16384) /* before duplicates go: a bound on the memory */
struct slot {
	struct fibril_datapath_egress_entry e;
	size_t seq;
};
struct table {
	struct slot *s;
	size_t n, cap;
};

static int table_add(struct table *t, const struct fibril_datapath_egress_entry *x)
{
	if (t->n == EGW_RAW_MAX)
		return -E2BIG;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		void *v = realloc(t->s, cap * sizeof(*t->s));
		if (!v)
			return -ENOMEM;
		t->s = v;
		t->cap = cap;
	}
	t->s[t->n] = (struct slot){.e = *x, .seq = t->n};
	t->n++;
	return 0;
}

static int key_cmp(const struct fibril_datapath_egress_entry *a,
		   const struct fibril_datapath_egress_entry *b)
{
	if (a->identity != b->identity)
		return a->identity < b->identity ? -1 : 1;
	uint32_t x = ntohl(a->dst.s_addr), y = ntohl(b->dst.s_addr);
	if (x != y)
		return x < y ? -1 : 1;
	return (int)a->dst_len - (int)b->dst_len;
}

static int slot_cmp(const void *a, const void *b)
{
	const struct slot *x = a, *y = b;
	int c = key_cmp(&x->e, &y->e);
	return c ? c : x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int entry_cmp(const void *a, const void *b)
{
	return key_cmp(a, b);
}

/* sorted, one entry per key, as the plain array egress_sync takes */
static struct fibril_datapath_egress_entry *table_finish(struct table *t, size_t *n)
{
	if (t->n) /* an empty table has no array (qsort wants one) */
		qsort(t->s, t->n, sizeof(*t->s), slot_cmp);
	struct fibril_datapath_egress_entry *out = calloc(t->n ? t->n : 1, sizeof(*out));
	*n = 0;
	if (!out)
		return NULL;
	for (size_t i = 0; i < t->n; i++)
		if (!*n || key_cmp(&out[*n - 1], &t->s[i].e))
			out[(*n)++] = t->s[i].e;
	return out;
}

/* entries whose gateway changed since the last table (both sorted by
 * key): logged and counted */
static void count_moves(struct egw *g, const struct fibril_datapath_egress_entry *e, size_t n)
{
	for (size_t i = 0; i < n && g->table; i++) {
		const struct fibril_datapath_egress_entry *x = &e[i];
		const struct fibril_datapath_egress_entry *o =
			bsearch(x, g->table, g->n_table, sizeof(*x), entry_cmp);
		if (!o || x->excluded)
			continue;
		if (o->gateway.s_addr != x->gateway.s_addr || o->no_gateway != x->no_gateway) {
			char a[INET_ADDRSTRLEN], b[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &o->gateway, a, sizeof(a));
			inet_ntop(AF_INET, &x->gateway, b, sizeof(b));
			fibril_info(g->m, "identity %u: gateway %s -> %s", x->identity,
				    o->no_gateway ? "none" : a, x->no_gateway ? "none" : b);
			g->moves++;
		}
	}
}

int egw_sync(struct egw *g, char *err, size_t errlen)
{
	struct table t = {0};
	int rc = 0;
	for (size_t pi = 0; pi < g->n_pol && !rc; pi++) {
		const struct egw_policy *p = g->pol[pi];
		struct in_addr own = {0};
		for (size_t i = 0; i < p->n_gw; i++)
			if (!strcmp(p->gw[i].node, g->self))
				own = p->gw[i].egress_ip;
		for (size_t ii = 0; ii < g->n_ids && !rc; ii++) {
			const struct egw_identity *id = &g->ids[ii];
			if (!egw_policy_selects(p, id->labels))
				continue;
			const struct egw_gateway *gw = egw_choose(g, p, id->id);
			struct fibril_datapath_egress_entry x = {.sz = sizeof(x), .identity = id->id,
								 .egress_ip = own};
			if (gw) {
				const struct egw_node *n = egw_node_find(g, gw->node);
				x.gateway_local = !strcmp(gw->node, g->self);
				if (n && n->has_ip)
					x.gateway = n->ip;
				else if (!x.gateway_local)
					x.no_gateway = true;
			} else {
				x.no_gateway = true;
			}
			for (size_t c = 0; c < p->n_excl && !rc; c++) {
				struct fibril_datapath_egress_entry ex = x;
				ex.dst = p->excl[c].addr;
				ex.dst_len = p->excl[c].len;
				ex.excluded = true;
				rc = table_add(&t, &ex);
			}
			for (size_t c = 0; c < p->n_dst && !rc; c++) {
				x.dst = p->dst[c].addr;
				x.dst_len = p->dst[c].len;
				rc = table_add(&t, &x);
			}
		}
	}
	/* what a previous run wrote for identities not announced yet */
	for (size_t i = 0; i < g->n_adopted && !rc; i++)
		if (!identity_find(g, g->adopted[i].identity))
			rc = table_add(&t, &g->adopted[i]);
	struct fibril_datapath_egress_entry *e = NULL;
	size_t n = 0;
	if (!rc && !(e = table_finish(&t, &n)))
		rc = -ENOMEM;
	if (!rc && n > 16384)
		rc = -E2BIG;
	if (rc == -E2BIG)
		snprintf(err, errlen, "the policies make more than 16384 entries");
	else if (rc)
		snprintf(err, errlen, "%s", strerror(-rc));
	else
		rc = g->dp->egress_sync(g->dp_ctx, e, n, err, errlen);
	g->syncs++;
	g->last_sync_ms = egw_now_ms();
	if (rc) {
		g->sync_errors++;
		snprintf(g->last_error, sizeof(g->last_error), "%s", err);
		fibril_health_report(g->m, NULL, FIBRIL_HEALTH_DEGRADED, "dp_egress: %s", err);
	} else {
		if (g->last_error[0])
			fibril_health_report(g->m, NULL, FIBRIL_HEALTH_OK, "dp_egress written");
		g->last_error[0] = '\0';
		g->n_entries = n;
		count_moves(g, e, n);
		free(g->table);
		g->table = e; /* kept: the next sync counts the moves */
		g->n_table = n;
		e = NULL;
	}
	free(e);
	free(t.s);
	return rc;
}

static void sync_now(void *ud)
{
	struct egw *g = ud;
	g->sync_queued = false;
	if (!g->started)
		return;
	char err[EGW_ERR_LEN] = "";
	if (egw_sync(g, err, sizeof(err)))
		fibril_warn(g->m, "cannot write the egress gateway table: %s", err);
}

void egw_sync_soon(struct egw *g)
{
	if (g->sync_queued || !g->started)
		return;
	if (fibril_defer(g->m, sync_now, g) == 0)
		g->sync_queued = true;
}

/* ---- saved policies ----------------------------------------------------------------- */

int egw_save(struct egw *g)
{
	struct json_object *o = json_object_new_object();
	for (size_t i = 0; i < g->n_pol; i++)
		json_object_object_add(o, g->pol[i]->name, egw_policy_json(g->pol[i]));
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	int rc = fibril_state_write_atomic(g->state_fd, STATE_FILE, s, strlen(s), 0600);
	json_object_put(o);
	return rc;
}

static void load_saved(struct egw *g)
{
	int fd = openat(g->state_fd, STATE_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	char *buf = NULL;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (8 << 20) &&
	    (buf = malloc((size_t)st.st_size + 1)) &&
	    read(fd, buf, (size_t)st.st_size) == st.st_size) {
		buf[st.st_size] = '\0';
		struct json_object *o = json_tokener_parse(buf);
		if (o && json_object_is_type(o, json_type_object)) {
			json_object_object_foreach(o, name, val)
			{
				struct egw_policy *p = calloc(1, sizeof(*p));
				char why[EGW_ERR_LEN];
				const char *t = json_object_to_json_string(val);
				if (p && egw_name_valid(name) && g->n_pol < EGW_MAX_POLICIES) {
					snprintf(p->name, sizeof(p->name), "%s", name);
					if (egw_policy_parse(t, strlen(t), p, why, sizeof(why)) == 0) {
						g->pol[g->n_pol++] = p; /* saved in name order */
						continue;
					}
					fibril_warn(g->m, "%s: policy %s skipped: %s", STATE_FILE, name, why);
				}
				free(p);
			}
		} else {
			fibril_warn(g->m, "%s is not a JSON object: no policy restored", STATE_FILE);
		}
		json_object_put(o);
	}
	free(buf);
	close(fd);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static int egw_init(struct fibril_module *m)
{
	struct egw *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->m = m;
	g->state_fd = -1;
	fibril_module_set_data(m, g);
	static const char *const topics[] = {FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED,
					     FIBRIL_ENDPOINT_TOPIC_IDENTITY_DELETED};
	static const char *const ep_topics[] = {FIBRIL_ENDPOINT_TOPIC_CREATED,
						FIBRIL_ENDPOINT_TOPIC_UPDATED};
	for (size_t i = 0; i < 2; i++)
		if (!fibril_bus_subscribe(m, topics[i], 1, on_identity, g) ||
		    !fibril_bus_subscribe(m, ep_topics[i], 1, on_endpoint, g)) {
			fibril_module_set_error(m, "cannot subscribe to the endpoint topics");
			return -EIO;
		}
	if (!fibril_bus_subscribe(m, FIBRIL_NODES_TOPIC, 1, on_node, g) ||
	    !fibril_bus_subscribe(m, FIBRIL_HEALTH_NODE_TOPIC, FIBRIL_HEALTH_NODE_VERSION, on_health,
				  g)) {
		fibril_module_set_error(m, "cannot subscribe to %s / %s", FIBRIL_NODES_TOPIC,
					FIBRIL_HEALTH_NODE_TOPIC);
		return -EIO;
	}
	return egw_api_register(g);
}

static int egw_start(struct fibril_module *m)
{
	struct egw *g = fibril_module_data(m);
	void *ctx = NULL;
	const struct fibril_datapath_ops *dp = (const void *)fibril_service_lookup(
		m, FIBRIL_DATAPATH_CAPABILITY, 7, &ctx);
	if (!dp || !FIBRIL_SERVICE_HAS(dp, egress_sync) || !dp->egress_sync) {
		fibril_module_set_error(m, "the datapath has no egress_sync (interface 7 or newer needed)");
		return -EPROTO;
	}
	g->dp = dp;
	g->dp_ctx = ctx;
	const struct fibril_nodes_ops *nodes = (const void *)fibril_service_lookup(
		m, FIBRIL_NODES_CAPABILITY, 1, &ctx);
	if (!nodes) {
		fibril_module_set_error(m, "no nodes capability: the gateways are nodes");
		return -ENOENT;
	}
	g->nodes = nodes;
	g->nodes_ctx = ctx;
	struct fibril_node self = {.sz = sizeof(self)};
	int rc = nodes->self(ctx, &self);
	if (rc < 0) {
		fibril_module_set_error(m, "the nodes capability does not name this node: %s",
					strerror(-rc));
		return rc;
	}
	snprintf(g->self, sizeof(g->self), "%.*s", (int)sizeof(self.name) - 1, self.name);
	nodes->list(ctx, list_node, g);

	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/egressgw", fibril_state_dir());
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		fibril_module_set_error(m, "cannot create %s: %s", dir, strerror(-rc));
		return rc;
	}
	g->state_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (g->state_fd < 0) {
		rc = -errno;
		fibril_module_set_error(m, "cannot open %s: %s", dir, strerror(-rc));
		return rc;
	}
	load_saved(g);
	if (FIBRIL_SERVICE_HAS(dp, egress_list) && dp->egress_list) {
		int n = dp->egress_list(g->dp_ctx, adopt, g);
		if (n > 0)
			fibril_info(m, "dp_egress: %d entries of an earlier run kept until their identities are known",
				    n);
	}
	g->started = true;
	char err[EGW_ERR_LEN] = "";
	if ((rc = egw_sync(g, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "cannot write the egress gateway table: %s", err);
		return rc;
	}
	fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "%zu policies, %zu entries", g->n_pol,
			     g->n_entries);
	return 0;
}

static void egw_stop(struct fibril_module *m)
{
	struct egw *g = fibril_module_data(m);
	g->started = false; /* dp_egress stays: the datapath keeps forwarding */
}

static void egw_fini(struct fibril_module *m)
{
	struct egw *g = fibril_module_data(m);
	if (!g)
		return;
	for (size_t i = 0; i < g->n_pol; i++)
		free(g->pol[i]);
	for (size_t i = 0; i < g->n_ids; i++)
		free(g->ids[i].labels);
	free(g->ids);
	free(g->nodes_v);
	free(g->table);
	free(g->adopted);
	if (g->state_fd >= 0)
		close(g->state_fd);
	free(g);
	fibril_module_set_data(m, NULL);
}

static int egw_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct egw *g = fibril_module_data(m);
	return snprintf(buf, len, "%zu policies, %zu dp_egress entries, %llu gateway moves", g->n_pol,
			g->n_entries, (unsigned long long)g->moves);
}

FIBRIL_MODULE(.name = "egressgw", .version = "1.0.0",
	      .description = "egress gateway policies with several gateways and failover",
	      .requires = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY, FIBRIL_NODES_CAPABILITY),
	      .wants = FIBRIL_LIST("endpoint", "health"),
	      .init = egw_init, .start = egw_start, .stop = egw_stop, .fini = egw_fini,
	      .summary = egw_summary);
