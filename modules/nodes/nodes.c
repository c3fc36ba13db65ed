/* modules/nodes/nodes.c - the nodes module (capability "nodes"): node
 * discovery through the kvstore's node registry (registry.c), as Cilium's
 * state/nodes/v1. Each agent puts its own record (name, node IPs, the pod
 * CIDRs of the active IPAM, tunnel endpoint; record.c) under
 * state/nodes/v1/<name>, held by a lease of lease-ttl: a node whose agent
 * is gone past that TTL disappears from the registry, and every other node
 * unroutes it when its watch sees the delete, keeping it listed as lost
 * for [nodes] lost-node-grace unless it was deleted on purpose (lost.c). The registry is read whole at
 * start (mark and sweep: the start finishes once every node known is
 * routed, before the API serves), then watched from that revision; a
 * compacted watch re-reads it whole. The Kubernetes Node objects are a
 * second source (k8s_source.c, with the k8s capability; either source
 * alone will do). Every change is an event on the bus (FIBRIL_NODES_TOPIC)
 * and, by routing-mode, routes (native) or tunnel endpoints (tunnel) and
 * ipcache entries (route.c). GET /v1/nodes lists the nodes and the
 * counters. This file: the config keys, the table of nodes both sources
 * write, this node's own record, the nodes interface, GET /v1/nodes, the
 * ipcache metrics and the lifecycle. */
#include "node_addrs.h"
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json.h>

/* ---- config -------------------------------------------------------------------------- */

static int check_routing(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "native") || !strcmp(value, "tunnel") || !strcmp(value, "none"))
		return 0;
	snprintf(why, len, "'%s' is not a routing mode: native, tunnel or none", value);
	return -EINVAL;
}

static int check_ipcache_source(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "auto") || !strcmp(value, "kvstore") || !strcmp(value, "crd"))
		return 0;
	snprintf(why, len, "'%s' is not an ipcache source: auto, kvstore or crd", value);
	return -EINVAL;
}

static int check_name(const char *value, char *why, size_t len)
{
	if (!*value || nodes_name_valid(value))
		return 0;
	snprintf(why, len, "'%s' is not a node name (1-63 of a-z A-Z 0-9 - . _)", value);
	return -EINVAL;
}

static int check_ips(const char *value, char *why, size_t len)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", value);
	int n4 = 0, n6 = 0;
	for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		struct in6_addr a;
		if (inet_pton(AF_INET, w, &a) == 1)
			n4++;
		else if (inet_pton(AF_INET6, w, &a) == 1)
			n6++;
		else {
			snprintf(why, len, "'%s' is not an IP address", w);
			return -EINVAL;
		}
	}
	if (n4 > 1 || n6 > 1) {
		snprintf(why, len, "at most one address per family");
		return -EINVAL;
	}
	return 0;
}

static const struct fibril_config_key nodes_config_keys[] = {
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "This node's name in the registry; empty: [agent] node-name, else the host name",
	 .check = check_name},
	{.name = "node-ip", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "This node's IP(s), at most one per family, other nodes route pod CIDRs through; "
		 "empty: the first global address of an interface that is up",
	 .check = check_ips},
	{.name = "routing-mode", .type = FIBRIL_CONFIG_STRING, .default_value = "native",
	 .help = "native: a route per remote pod CIDR via its node IP; tunnel: VXLAN (the "
		 "datapath's external-mode device, the sender's identity in the VNI) to the node's "
		 "tunnel endpoint; none: discovery only",
	 .check = check_routing},
	{.name = "ipcache-source", .type = FIBRIL_CONFIG_STRING, .default_value = "auto",
	 .help = "Where the remote endpoints of the ipcache come from. kvstore: the kvstore's "
		 "state/ip/v1 records; crd: cilium.io/v2 CiliumEndpoint objects through the k8s "
		 "capability (this node's endpoints published as such); auto: crd when the k8s "
		 "capability (with writes) is loaded and no kvstore is, else kvstore",
	 .check = check_ipcache_source},
	{.name = "tunnel-port", .type = FIBRIL_CONFIG_INT, .default_value = "8472",
	 .help = "routing-mode tunnel: the VXLAN UDP port (the same on every node)", .min = 1,
	 .max = 65535},
	{.name = "mtu", .type = FIBRIL_CONFIG_INT, .default_value = "0",
	 .help = "The underlay's MTU; 0: the MTU of the interface holding the node IP. Pods get "
		 "it less the tunnel's overhead in routing-mode tunnel (VXLAN: 50 over IPv4, 70 "
		 "over IPv6), as it is in the other modes (GET /v1/mtu, read by fibril-cni)",
	 .min = 0, .max = 65535},
	{.name = "lease-ttl", .type = FIBRIL_CONFIG_DURATION, .default_value = "15s",
	 .help = "TTL of the lease this node's registry key is held by: a node gone for longer "
		 "is removed everywhere", .min = 2000, .max = 3600000},
	{.name = "lost-node-grace", .type = FIBRIL_CONFIG_DURATION, .default_value = "10m",
	 .help = "A node whose registry record expired with its lease (its agent died) stays "
		 "listed as lost (not routed, probed by health, shown unreachable) until it comes "
		 "back, is removed (its record or Node deleted), or this long has passed; 0: it goes "
		 "at once", .min = 0, .max = 7 * 24 * 3600000LL},
	{.name = "k8s-sync-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "With the k8s capability: how long the start waits for the first list of the "
		 "Kubernetes Nodes (the Node source)", .min = 100, .max = 3600000},
	{.name = "ipcache-read-parts", .type = FIBRIL_CONFIG_INT, .default_value = "2",
	 .help = "Key ranges of the ipcache prefix read in parallel at start (one request "
		 "each, cut at the known nodes' pod CIDRs) with a kvstore that reads ranges",
	 .min = 1, .max = 16},
	/* A node's pod CIDR shorter than these is refused (validate.c): /8 is
	 * the largest pool any cluster hands one node (Kubernetes' own default
	 * is a /24 per node out of a /16; Cilium's cluster-pool a /24 out of a
	 * /8), /48 a whole IPv6 site (Kubernetes' node masks are /64../120). */
	{.name = "min-pod-cidr-prefix-v4", .type = FIBRIL_CONFIG_INT, .default_value = "8",
	 .help = "The shortest IPv4 pod CIDR a remote node may claim: a shorter one (0.0.0.0/0 "
		 "routes everything to it) refuses the node's record", .min = 1, .max = 32},
	{.name = "min-pod-cidr-prefix-v6", .type = FIBRIL_CONFIG_INT, .default_value = "48",
	 .help = "The shortest IPv6 pod CIDR a remote node may claim (see min-pod-cidr-prefix-v4)",
	 .min = 1, .max = 128},
	{.name = "k8s-node-annotations", .type = FIBRIL_CONFIG_BOOL, .default_value = "false",
	 .help = "Read a Kubernetes Node's network.fibril.io/ipvN-pod-cidr (when its spec has no "
		 "pod CIDR) and tunnel-endpoint annotations; off: a kubelet, which may set its own "
		 "Node's annotations, cannot steer routes through them"},
	{.name = "retry", .type = FIBRIL_CONFIG_DURATION, .default_value = "1s",
	 .help = "How soon a failed registration or read of the registry is retried",
	 .min = 100, .max = 600000},
	{0},
};

/* ---- the table of nodes -------------------------------------------------------------- */

void nodes_publish(struct nodes *s, enum fibril_node_event_type type, const struct fibril_node *n)
{
	struct fibril_node_event ev = {.sz = sizeof(ev), .type = type, .node = *n};
	fibril_bus_publish(s->m, FIBRIL_NODES_TOPIC, 1, &ev, sizeof(ev));
}

struct node_entry *nodes_find(struct nodes *s, const char *name)
{
	for (struct node_entry *e = s->nodes; e; e = e->next)
		if (!strcmp(e->n.name, name))
			return e;
	return NULL;
}

/* same addresses, CIDRs and tunnel endpoint (when it was seen does not count) */
static bool node_same(const struct fibril_node *a, const struct fibril_node *b)
{
	if (a->has_ipv4 != b->has_ipv4 || a->has_ipv6 != b->has_ipv6 || a->n_cidrs != b->n_cidrs ||
	    a->has_tunnel_endpoint != b->has_tunnel_endpoint)
		return false;
	if ((a->has_ipv4 && memcmp(&a->ipv4, &b->ipv4, sizeof(a->ipv4))) ||
	    (a->has_ipv6 && memcmp(&a->ipv6, &b->ipv6, sizeof(a->ipv6))) ||
	    (a->has_tunnel_endpoint &&
	     memcmp(&a->tunnel_endpoint, &b->tunnel_endpoint, sizeof(a->tunnel_endpoint))))
		return false;
	return !memcmp(a->cidrs, b->cidrs, a->n_cidrs * sizeof(a->cidrs[0]));
}

void nodes_remove_entry(struct nodes *s, struct node_entry *e)
{
	for (struct node_entry **p = &s->nodes; *p; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			break;
		}
	}
	s->n_nodes--;
	fibril_info(s->m, "node %s is gone", e->n.name);
	nodes_node_unprogram(s, &e->n);
	nodes_ipcache_node_changed(s, e->n.name); /* its endpoints leave the datapath */
	s->stats.deleted++;
	nodes_publish(s, FIBRIL_NODE_DELETED, &e->n);
	free(e);
}

void nodes_upsert(struct nodes *s, const struct fibril_node *np)
{
	const struct fibril_node n = *np;
	const char *name = n.name;
	struct node_entry *e = nodes_find(s, name);
	char why[NODES_WHY_LEN];
	if (nodes_validate(s, &n, why, sizeof(why))) {
		s->stats.records_refused++;
		fibril_warn(s->m, "node %s refused: %s (%s); nothing installed", name, why,
			    n.source == FIBRIL_NODE_SOURCE_K8S ? "its Kubernetes Node"
							       : "its registry record");
		if (e)
			e->mark = true; /* what was known of it stays */
		return;
	}
	if (!e) {
		e = nodes_lost_take(s, name); /* a lost node back: its health stays */
		if (!e)
			e = calloc(1, sizeof(*e));
		if (!e)
			return;
		e->n = n;
		e->next = s->nodes;
		s->nodes = e;
		s->n_nodes++;
		e->mark = true;
		fibril_info(s->m, "node %s joined", name);
		nodes_node_program(s, e, NULL);
		nodes_ipcache_node_changed(s, name);
		s->stats.added++;
		nodes_publish(s, FIBRIL_NODE_ADDED, &e->n);
		return;
	}
	e->mark = true;
	if (node_same(&e->n, &n)) {
		e->n.last_seen_unix = n.last_seen_unix;
		e->n.source = n.source; /* the registry took over from the Node object */
		if (!e->routed)
			nodes_node_program(s, e, NULL); /* a failed route: try again */
		return;
	}
	struct fibril_node old = e->n;
	e->n = n;
	fibril_info(s->m, "node %s changed", name);
	nodes_node_program(s, e, &old);
	nodes_ipcache_node_changed(s, name); /* its endpoints bound to its new CIDRs */
	s->stats.updated++;
	nodes_publish(s, FIBRIL_NODE_UPDATED, &e->n);
}

/* ---- this node ------------------------------------------------------------------------------ */

static bool skip_ifname(const char *name)
{
	return !strncmp(name, "lxc", 3) || !strncmp(name, "fibril_", 7) || !strcmp(name, "lo");
}

/* node-ip, else the first global address of an interface that is up */
static int self_ips(struct nodes *s, char *why, size_t len)
{
	const char *cfg = fibril_config_string(s->m, "node-ip");
	if (cfg && *cfg) {
		char buf[256];
		snprintf(buf, sizeof(buf), "%s", cfg);
		for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w;
		     w = strtok_r(NULL, ", ", &save)) {
			if (inet_pton(AF_INET, w, &s->self.ipv4) == 1)
				s->self.has_ipv4 = true;
			else if (inet_pton(AF_INET6, w, &s->self.ipv6) == 1)
				s->self.has_ipv6 = true;
		}
		return 0;
	}
	struct mod_node_addr *ifs;
	size_t nifs;
	int rc = mod_node_addrs(&ifs, &nifs);
	if (rc < 0) {
		snprintf(why, len, "cannot list the addresses (getifaddrs: %s)", strerror(-rc));
		return rc;
	}
	for (const struct mod_node_addr *i = ifs; i < ifs + nifs; i++) {
		if (!(i->flags & IFF_UP) || (i->flags & IFF_LOOPBACK) || skip_ifname(i->ifname))
			continue;
		if (i->family == AF_INET && !s->self.has_ipv4) {
			if ((ntohl(i->addr.v4.s_addr) >> 16) == 0xa9fe) /* 169.254/16 */
				continue;
			s->self.ipv4 = i->addr.v4;
			s->self.has_ipv4 = true;
		} else if (i->family == AF_INET6 && !s->self.has_ipv6) {
			if (!mod_node_addr_v6_global(i))
				continue;
			s->self.ipv6 = i->addr.v6;
			s->self.has_ipv6 = true;
		}
	}
	free(ifs);
	if (!s->self.has_ipv4 && !s->self.has_ipv6) {
		snprintf(why, len, "no node IP: no global address on an interface that is up; set "
				   "[nodes] node-ip");
		return -EADDRNOTAVAIL;
	}
	return 0;
}

static int self_build(struct nodes *s, char *why, size_t len)
{
	const char *name = fibril_config_string(s->m, "node-name");
	if (!name || !*name)
		name = fibril_config_get("agent", "node-name");
	char host[FIBRIL_NODE_NAME_LEN] = "";
	if (!name || !*name) {
		if (gethostname(host, sizeof(host) - 1))
			host[0] = '\0';
		name = host;
	}
	if (!nodes_name_valid(name)) {
		snprintf(why, len, "'%s' is not a node name: set [nodes] node-name", name);
		return -EINVAL;
	}
	s->self.sz = sizeof(s->self);
	s->self.source = FIBRIL_NODE_SOURCE_LOCAL;
	snprintf(s->self.name, sizeof(s->self.name), "%s", name);
	int rc = self_ips(s, why, len);
	if (rc)
		return rc;
	if (s->self.has_ipv4) {
		s->self.has_tunnel_endpoint = true;
		s->self.tunnel_endpoint = s->self.ipv4;
	}
	if (s->ipam) {
		struct fibril_ipam_pool pools[FIBRIL_NODE_MAX_CIDRS];
		for (size_t i = 0; i < FIBRIL_NODE_MAX_CIDRS; i++)
			pools[i] = (struct fibril_ipam_pool){.sz = sizeof(pools[i])};
		int n = s->ipam->pools(s->ipamctx, pools, FIBRIL_NODE_MAX_CIDRS);
		for (int i = 0; i < n && s->self.n_cidrs < FIBRIL_NODE_MAX_CIDRS; i++)
			if (!nodes_cidr_parse(pools[i].cidr, &s->self.cidrs[s->self.n_cidrs]))
				s->self.n_cidrs++;
		if (n <= 0)
			fibril_warn(s->m, "the IPAM has no pool yet: registering without pod CIDRs");
	}
	return 0;
}

/* ---- the nodes interface --------------------------------------------------------------------- */

static void copy_out(struct fibril_node *out, const struct fibril_node *n)
{
	uint32_t sz = out->sz && out->sz < sizeof(*n) ? out->sz : (uint32_t)sizeof(*n);
	memcpy(out, n, sz);
	out->sz = sz;
}

static int ops_self(void *ctx, struct fibril_node *out)
{
	struct nodes *s = ctx;
	if (!out || !out->sz)
		return -EINVAL;
	copy_out(out, &s->self);
	return 0;
}

static int ops_list(void *ctx, fibril_nodes_fn cb, void *ud)
{
	struct nodes *s = ctx;
	int n = 1;
	if (cb(&s->self, ud))
		return n;
	for (struct node_entry *e = s->nodes; e; e = e->next) {
		n++;
		if (cb(&e->n, ud))
			return n;
	}
	for (struct node_entry *e = s->lost; e; e = e->next) { /* still of the cluster */
		n++;
		if (cb(&e->n, ud))
			break;
	}
	return n;
}

/* Another node's pod by address, from the ipcache's table. */
static int ops_ipcache_pod(void *ctx, int family, const void *addr, struct fibril_nodes_ipcache_pod *out)
{
	struct nodes *s = ctx;
	if ((family != 4 && family != 6) || !addr || !out ||
	    out->sz < FIBRIL_OFFSETOFEND(struct fibril_nodes_ipcache_pod, pod_name))
		return -EINVAL;
	uint8_t a[16] = {0};
	memcpy(a, addr, family == 4 ? 4 : 16);
	const struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, (uint8_t)family, a);
	const char *slash = e && e->r.pod ? strchr(e->r.pod, '/') : NULL;
	if (!slash)
		return -ENOENT;
	out->identity = e->r.identity;
	snprintf(out->node, sizeof(out->node), "%s", e->r.node);
	snprintf(out->pod_namespace, sizeof(out->pod_namespace), "%.*s", (int)(slash - e->r.pod), e->r.pod);
	snprintf(out->pod_name, sizeof(out->pod_name), "%s", slash + 1);
	return 0;
}

static const struct fibril_nodes_ops nodes_ops = {
	.hdr = {.sz = sizeof(struct fibril_nodes_ops), .version = FIBRIL_NODES_VERSION},
	.self = ops_self,
	.list = ops_list,
	.ipcache_pod = ops_ipcache_pod,
};

/* ---- API ------------------------------------------------------------------------------------------ */

static const char *source_name(uint32_t source)
{
	switch (source) {
	case FIBRIL_NODE_SOURCE_LOCAL:
		return "local";
	case FIBRIL_NODE_SOURCE_KVSTORE:
		return "kvstore";
	case FIBRIL_NODE_SOURCE_K8S:
		return "k8s";
	default:
		return "?";
	}
}

/* "health": {"reachable": ..., "ipv4": ..., "ipv6": ...} as the health
 * module last published it (true, false; a family not probed is left out);
 * nothing without the health module. */
static void health_json(struct json_object *o, const struct fibril_health_node_event *h,
			int64_t since)
{
	if (!h->sz || h->reachable == FIBRIL_REACH_UNKNOWN)
		return;
	struct json_object *r = json_object_new_object();
	json_object_object_add(r, "reachable", json_object_new_boolean(h->reachable == FIBRIL_REACH_OK));
	if (h->ipv4 != FIBRIL_REACH_UNKNOWN)
		json_object_object_add(r, "ipv4", json_object_new_boolean(h->ipv4 == FIBRIL_REACH_OK));
	if (h->ipv6 != FIBRIL_REACH_UNKNOWN)
		json_object_object_add(r, "ipv6", json_object_new_boolean(h->ipv6 == FIBRIL_REACH_OK));
	if (h->node_rtt_us)
		json_object_object_add(r, "rtt-ms", json_object_new_double(h->node_rtt_us / 1000.0));
	if (since) /* since when "reachable" holds (wall clock) */
		json_object_object_add(r, "since", json_object_new_int64(since));
	json_object_object_add(o, "health", r);
}

static int on_health(const struct fibril_event *ev, void *ud)
{
	struct nodes *s = ud;
	const struct fibril_health_node_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) || !memchr(e->name, '\0', sizeof(e->name)))
		return -EINVAL;
	struct fibril_health_node_event *dst = NULL;
	struct node_entry *ne = NULL;
	if (!strcmp(e->name, s->self.name))
		dst = &s->self_health;
	for (struct node_entry *n = s->nodes; n && !dst; n = n->next)
		if (!strcmp(n->n.name, e->name))
			ne = n, dst = &n->health;
	for (struct node_entry *n = s->lost; n && !dst; n = n->next)
		if (!strcmp(n->n.name, e->name))
			ne = n, dst = &n->health;
	if (!dst)
		return 0; /* a node this module no longer knows */
	if (ne && (e->removed || !dst->sz || dst->reachable != e->reachable))
		ne->reach_since = e->removed ? 0 : (int64_t)time(NULL);
	if (e->removed)
		memset(dst, 0, sizeof(*dst));
	else
		*dst = *e;
	return 0;
}

static struct json_object *node_json(const struct fibril_node *n, bool routed,
				     const struct fibril_health_node_event *health,
				     const struct node_entry *e)
{
	struct json_object *o = json_object_new_object();
	char a[INET6_ADDRSTRLEN], c[64];
	json_object_object_add(o, "name", json_object_new_string(n->name));
	json_object_object_add(o, "source", json_object_new_string(source_name(n->source)));
	struct json_object *ips = json_object_new_array();
	if (n->has_ipv4)
		json_object_array_add(ips, json_object_new_string(inet_ntop(AF_INET, &n->ipv4, a, sizeof(a))));
	if (n->has_ipv6)
		json_object_array_add(ips, json_object_new_string(inet_ntop(AF_INET6, &n->ipv6, a, sizeof(a))));
	json_object_object_add(o, "ips", ips);
	struct json_object *cidrs = json_object_new_array();
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++)
		json_object_array_add(cidrs, json_object_new_string(nodes_cidr_text(&n->cidrs[i], c, sizeof(c))));
	json_object_object_add(o, "pod-cidrs", cidrs);
	if (n->has_tunnel_endpoint)
		json_object_object_add(o, "tunnel-endpoint", json_object_new_string(
			inet_ntop(AF_INET, &n->tunnel_endpoint, a, sizeof(a))));
	json_object_object_add(o, "last-seen", json_object_new_int64(n->last_seen_unix));
	if (n->source != FIBRIL_NODE_SOURCE_LOCAL)
		json_object_object_add(o, "routed", json_object_new_boolean(routed));
	if (e && e->lost_unix) { /* its record expired: listed, not routed */
		json_object_object_add(o, "lost", json_object_new_boolean(true));
		json_object_object_add(o, "lost-since", json_object_new_int64(e->lost_unix));
	} else if (n->source != FIBRIL_NODE_SOURCE_LOCAL) {
		json_object_object_add(o, "lost", json_object_new_boolean(false));
	}
	health_json(o, health, e ? e->reach_since : 0);
	return o;
}

static void get_nodes(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct nodes *s = ud;
	(void)req;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "self", json_object_new_string(s->self.name));
	json_object_object_add(o, "routing-mode", json_object_new_string(
		nodes_routing_name(s->routing)));
	json_object_object_add(o, "synced", json_object_new_boolean(s->synced));
	json_object_object_add(o, "lease", json_object_new_int64(s->lease));
	struct json_object *arr = json_object_new_array();
	json_object_array_add(arr, node_json(&s->self, true, &s->self_health, NULL));
	for (struct node_entry *e = s->nodes; e; e = e->next)
		json_object_array_add(arr, node_json(&e->n, e->routed, &e->health, e));
	for (struct node_entry *e = s->lost; e; e = e->next)
		json_object_array_add(arr, node_json(&e->n, false, &e->health, e));
	json_object_object_add(o, "lost-node-grace-ms", json_object_new_int64((int64_t)s->lost_grace_ms));
	json_object_object_add(o, "nodes", arr);
	json_object_object_add(o, "mtu", nodes_mtu_json(s));
	struct json_object *m = json_object_new_object();
#define STAT(k, v) json_object_object_add(m, k, json_object_new_int64((int64_t)s->stats.v))
	STAT("nodes-added", added);
	STAT("nodes-updated", updated);
	STAT("nodes-deleted", deleted);
	STAT("nodes-lost", lost);
	STAT("bad-records", bad_records);
	STAT("records-refused", records_refused);
	STAT("routes-installed", routes_installed);
	STAT("routes-adopted", routes_adopted);
	STAT("routes-removed", routes_removed);
	STAT("route-errors", route_errors);
	STAT("registrations", registrations);
	STAT("resyncs", resyncs);
#undef STAT
	json_object_object_add(o, "metrics", m);
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

/* ---- metrics ------------------------------------------------------------------------------------- */

static void on_scrape(struct fibril_module *m, void *ud)
{
	struct nodes *s = ud;
	(void)m;
	fibril_series_set(fibril_metric_series(s->m_entries, NULL), (double)s->ipc.count);
	fibril_series_set(fibril_metric_labels(s->m_events, "added"), (double)s->ipc.stats.added);
	fibril_series_set(fibril_metric_labels(s->m_events, "updated"), (double)s->ipc.stats.updated);
	fibril_series_set(fibril_metric_labels(s->m_events, "deleted"), (double)s->ipc.stats.deleted);
	fibril_series_set(fibril_metric_labels(s->m_events, "bad-record"),
			  (double)s->ipc.stats.bad_records);
	fibril_series_set(fibril_metric_labels(s->m_events, "published"),
			  (double)s->ipc.stats.published);
}

static int nodes_metrics_register(struct nodes *s)
{
	static const char *const event[] = {"event", NULL};
	s->m_entries = fibril_metric_register(s->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_nodes_ipcache_entries",
		.help = "Endpoint addresses in the kvstore's ipcache known to this node"});
	s->m_events = fibril_metric_register(s->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_nodes_ipcache_events_total",
		.help = "Changes of the kvstore's ipcache seen or made by this node", .labels = event});
	if (!s->m_entries || !s->m_events)
		return -ENOMEM;
	return fibril_metrics_on_scrape(s->m, on_scrape, s);
}

/* ---- lifecycle ----------------------------------------------------------------------------------- */

void nodes_start_finished(struct nodes *s, int err)
{
	s->start_pending = false;
	if (s->in_start)
		s->start_done = true;
	else
		fibril_module_start_done(s->m, err);
}

static void nodes_fini(struct fibril_module *m);

static int nodes_init(struct fibril_module *m)
{
	struct nodes *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->m = m;
	fibril_module_set_data(m, s);
	const char *mode = fibril_config_string(m, "routing-mode");
	s->routing = !mode || !strcmp(mode, "native") ? NODES_ROUTING_NATIVE
		     : !strcmp(mode, "tunnel")           ? NODES_ROUTING_TUNNEL
							 : NODES_ROUTING_NONE;
	s->tunnel_port = (uint16_t)fibril_config_int(m, "tunnel-port");
	s->ttl_s = (int64_t)((fibril_config_duration_ms(m, "lease-ttl") + 999) / 1000);
	s->lost_grace_ms = (uint64_t)fibril_config_duration_ms(m, "lost-node-grace");
	static const char *const topics[] = {FIBRIL_KVSTORE_TOPIC_LEASE_LOST,
					     FIBRIL_KVSTORE_TOPIC_CONNECTED};
	int rc = fibril_service_provide(m, FIBRIL_NODES_CAPABILITY, &nodes_ops.hdr, s);
	for (size_t i = 0; rc == 0 && i < sizeof(topics) / sizeof(topics[0]); i++) {
		s->subs[i] = fibril_bus_subscribe(m, topics[i], 1, nodes_registry_on_kv_event, s);
		if (!s->subs[i])
			rc = -ENOMEM;
	}
	if (rc == 0) {
		/* the Kubernetes Node source (events only come with the k8s module) */
		s->subs[2] = fibril_bus_subscribe(m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CLUSTER_NODES,
						  1, nodes_k8s_on_event, s);
		if (!s->subs[2])
			rc = -ENOMEM;
	}
	static const char *const ep_topics[] = {FIBRIL_ENDPOINT_TOPIC_CREATED,
						FIBRIL_ENDPOINT_TOPIC_UPDATED,
						FIBRIL_ENDPOINT_TOPIC_DELETED};
	for (size_t i = 0; rc == 0 && i < sizeof(ep_topics) / sizeof(ep_topics[0]); i++) {
		s->ep_subs[i] = fibril_bus_subscribe(m, ep_topics[i], 1, nodes_ipcache_on_endpoint, s);
		if (!s->ep_subs[i])
			rc = -ENOMEM;
	}
	if (rc == 0) {
		/* CiliumEndpoints (events only come once ipcache_crd.c watches them) */
		s->cep_sub = fibril_bus_subscribe(m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CILIUM_ENDPOINTS,
						  1, nodes_ipcache_crd_on_event, s);
		if (!s->cep_sub)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		/* reachability from the health module, when there is one */
		s->health_sub = fibril_bus_subscribe(m, FIBRIL_HEALTH_NODE_TOPIC, FIBRIL_HEALTH_NODE_VERSION,
						     on_health, s);
		if (!s->health_sub)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = fibril_api_route(m, "GET", "/v1/nodes", 0, get_nodes, s);
	if (rc == 0)
		rc = fibril_api_route(m, "GET", "/v1/ipcache", 0, nodes_ipcache_get, s);
	if (rc == 0)
		rc = fibril_api_route(m, "GET", "/v1/mtu", 0, nodes_mtu_get, s);
	if (rc == 0)
		rc = nodes_metrics_register(s);
	if (rc) {
		fibril_module_set_error(m, "cannot register the nodes service, topics or route");
		nodes_fini(m);
	}
	return rc;
}

static int nodes_start(struct fibril_module *m)
{
	struct nodes *s = fibril_module_data(m);
	void *ctx = NULL;
	s->kv = (const struct fibril_kvstore_ops *)fibril_service_lookup(
		m, FIBRIL_KVSTORE_CAPABILITY, 1, &ctx);
	s->kvctx = ctx;
	ctx = NULL;
	s->dp = (const struct fibril_datapath_ops *)fibril_service_lookup(
		m, FIBRIL_DATAPATH_CAPABILITY, 1, &ctx);
	s->dpctx = ctx;
	ctx = NULL;
	s->ipam = (const struct fibril_ipam_ops *)fibril_service_lookup(m, FIBRIL_IPAM_CAPABILITY, 1,
									&ctx);
	s->ipamctx = ctx;
	ctx = NULL;
	s->k8s = (const struct fibril_k8s_ops *)fibril_service_lookup(m, FIBRIL_K8S_CAPABILITY, 1,
								      &ctx);
	s->k8sctx = ctx;
	if (!s->kv && !s->k8s) {
		fibril_module_set_error(m, "no node source: needs a kvstore (the node registry) or "
					   "the k8s capability (the Node objects)");
		return -ENOENT;
	}
	char why[NODES_WHY_LEN];
	int rc = self_build(s, why, sizeof(why));
	if (rc) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	if (s->routing != NODES_ROUTING_NONE) {
		/* tunnel mode too: a native run's routes are found and removed */
		rc = nodes_nl_open(s, why, sizeof(why));
		if (rc) {
			fibril_module_set_error(m, "%s", why);
			return rc;
		}
		nodes_routes_scan(s);
	}
	rc = nodes_mtu_setup(s, why, sizeof(why));
	if (rc) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	rc = nodes_tunnel_setup(s, why, sizeof(why));
	if (rc) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	char a[INET6_ADDRSTRLEN] = "-", b[INET6_ADDRSTRLEN] = "-";
	if (s->self.has_ipv4)
		inet_ntop(AF_INET, &s->self.ipv4, a, sizeof(a));
	if (s->self.has_ipv6)
		inet_ntop(AF_INET6, &s->self.ipv6, b, sizeof(b));
	fibril_info(m, "node %s (IPv4 %s, IPv6 %s, %u pod CIDR(s)), routing %s, lease TTL %llds",
		    s->self.name, a, b, s->self.n_cidrs,
		    nodes_routing_name(s->routing), (long long)s->ttl_s);
	s->start_pending = true;
	s->in_start = true;
	if (s->k8s) {
		rc = nodes_k8s_start(s, why, sizeof(why));
		if (rc && !s->kv) {
			s->in_start = false;
			s->start_pending = false;
			fibril_module_set_error(m, "%s", why);
			return rc;
		}
		if (rc)
			fibril_warn(m, "%s: the kvstore registry only", why);
	}
	why[0] = '\0';
	if (nodes_ipcache_crd_wanted(s, why, sizeof(why))) {
		rc = why[0] ? -ENOENT : nodes_ipcache_crd_start(s, why, sizeof(why));
		nodes_cn_publish(s);
		if (rc) {
			s->in_start = false;
			s->start_pending = false;
			fibril_module_set_error(m, "%s", why);
			return rc;
		}
	}
	if (s->kv)
		nodes_registry_start(s);
	s->in_start = false;
	if (s->start_done)
		return s->why[0] && !s->synced ? -EIO : 0;
	return FIBRIL_START_PENDING;
}

static void nodes_stop(struct fibril_module *m)
{
	struct nodes *s = fibril_module_data(m);
	s->stopping = true;
	/* the key stays until its lease runs out, the routes and the ipcache
	 * stay: a restart within the TTL changes nothing anywhere */
	if (s->watch && s->kv)
		s->kv->unwatch(s->kvctx, s->watch);
	s->watch = NULL;
	fibril_timer_cancel(s->retry);
	s->retry = NULL;
	fibril_timer_cancel(s->lost_timer); /* the lost stay as they are */
	s->lost_timer = NULL;
	nodes_ipcache_stop(s);
}

static void nodes_fini(struct fibril_module *m)
{
	struct nodes *s = fibril_module_data(m);
	if (!s)
		return;
	for (size_t i = 0; i < sizeof(s->subs) / sizeof(s->subs[0]); i++)
		if (s->subs[i])
			fibril_bus_unsubscribe(s->subs[i]);
	if (s->health_sub)
		fibril_bus_unsubscribe(s->health_sub);
	s->health_sub = NULL;
	if (s->cep_sub)
		fibril_bus_unsubscribe(s->cep_sub);
	s->cep_sub = NULL;
	nodes_cn_free(s);
	for (size_t i = 0; i < sizeof(s->ep_subs) / sizeof(s->ep_subs[0]); i++)
		if (s->ep_subs[i])
			fibril_bus_unsubscribe(s->ep_subs[i]);
	nodes_ipcache_free(s);
	nodes_lost_free(s);
	fibril_timer_cancel(s->retry);
	while (s->nodes) {
		struct node_entry *e = s->nodes;
		s->nodes = e->next;
		free(e);
	}
	nodes_nl_close(s);
	free(s);
	fibril_module_set_data(m, NULL);
}

static int nodes_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct nodes *s = fibril_module_data(m);
	if (!s || !len)
		return -EINVAL;
	size_t lost = 0;
	for (const struct node_entry *e = s->lost; e; e = e->next)
		lost++;
	return snprintf(buf, len, "%s: %zu remote node(s) (%zu lost), routing %s%s", s->self.name,
			s->n_nodes, lost, nodes_routing_name(s->routing),
			s->synced ? "" : ", registry not read yet");
}

FIBRIL_MODULE(.name = NODES_MODULE, .version = "1.0.0",
	      .description = "node discovery (the kvstore's node registry, Kubernetes Node "
			     "objects); native or VXLAN tunnel routing of remote pod CIDRs and "
			     "their ipcache entries",
	      .provides = FIBRIL_LIST(FIBRIL_NODES_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_KVSTORE_CAPABILITY, FIBRIL_K8S_CAPABILITY,
				   FIBRIL_IPAM_CAPABILITY, FIBRIL_DATAPATH_CAPABILITY),
	      .config_keys = nodes_config_keys, .init = nodes_init, .start = nodes_start,
	      .stop = nodes_stop, .fini = nodes_fini, .summary = nodes_summary);
