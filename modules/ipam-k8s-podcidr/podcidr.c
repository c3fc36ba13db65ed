/* modules/ipam-k8s-podcidr/podcidr.c - the ipam-k8s-podcidr module: Cilium's
 * "kubernetes" IPAM mode. The node CIDR(s) are the ones Kubernetes gave this
 * node (spec.podCIDRs / spec.podCIDR of its Node, else this module's node
 * annotations; node.c), read through the k8s capability's nodes informer.
 * Start waits for the Node (cache-sync barrier, then node events) up to
 * [ipam-k8s-podcidr] node-timeout and fails naming the node and where it
 * looked when there is none; an invalid CIDR fails the start naming its
 * field. Pod addresses come from the SDK's allocation store, which records
 * them on disk before they are returned (ops.c). Once ready the module
 * writes network.fibril.io/ipvN-pod-cidr and ipvN-host-ip (the router
 * address) on the Node. A CIDR that changes while the agent runs is not
 * followed (the addresses handed out stay valid): health turns Degraded and
 * says to restart the agent. */
#include "podcidr.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static void finish_start(struct pc *pc, int rc)
{
	if (!pc->start_pending)
		return;
	pc->start_pending = false;
	if (pc->deadline)
		fibril_timer_cancel(pc->deadline);
	pc->deadline = NULL;
	if (pc->in_start) {
		pc->start_done = true; /* start has not returned yet: it returns rc */
		pc->start_rc = rc;
	} else {
		fibril_module_start_done(pc->m, rc);
	}
}

static void set_health(struct pc *pc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Degraded with a reason (logged once per new reason), or OK when fmt is NULL. */
static void set_health(struct pc *pc, const char *fmt, ...)
{
	char why[PC_WHY_LEN] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
	}
	bool same = strcmp(why, pc->why) == 0;
	snprintf(pc->why, sizeof(pc->why), "%s", why);
	if (why[0]) {
		if (!same)
			fibril_warn(pc->m, "%s", why);
		fibril_health_report(pc->m, "node-cidr", FIBRIL_HEALTH_DEGRADED, "%s", why);
		return;
	}
	char text[2 * (FIBRIL_IPAM_CIDR_LEN + PC_SRC_LEN) + 32] = "";
	for (int i = 0; i < PC_NFAM; i++) {
		const struct pc_fam *f = &pc->fam[i];
		char c[FIBRIL_IPAM_CIDR_LEN];
		if (!f->enabled)
			continue;
		size_t off = strlen(text);
		snprintf(text + off, sizeof(text) - off, "%s%s (%s)", off ? ", " : "",
			 fibril_cidr_format(&f->node, c, sizeof(c)), f->source);
	}
	fibril_health_report(pc->m, "node-cidr", FIBRIL_HEALTH_OK, "allocating from %s", text);
}

/* ---- the node annotation --------------------------------------------------- */

static void on_annotated(void *ud, int err, const char *message)
{
	struct pc *pc = ud;
	if (err == -ECANCELED)
		return; /* the k8s module is stopping */
	pc->annot_state = err ? err : 2;
	if (err)
		fibril_warn(pc->m, "annotating node %s failed: %s", pc->node_name, message);
}

/* The annotations this module writes, for the enabled families. */
static size_t wanted_annotations(struct pc *pc, const char *keys[4], char vals[4][64])
{
	size_t n = 0;
	for (int i = 0; i < PC_NFAM; i++) {
		const struct pc_fam *f = &pc->fam[i];
		if (!f->enabled || !f->have_node)
			continue;
		struct fibril_ipamstore_family info;
		pc_fam_info(f, &info);
		keys[n] = i ? PC_ANNOT_V6_CIDR : PC_ANNOT_V4_CIDR;
		fibril_cidr_format(&f->node, vals[n], sizeof(vals[n]));
		n++;
		keys[n] = i ? PC_ANNOT_V6_HOST : PC_ANNOT_V4_HOST;
		fibril_ip_format(&info.router, vals[n], sizeof(vals[n]));
		n++;
	}
	return n;
}

static void annotate(struct pc *pc)
{
	if (!pc->annotate || pc->annot_state == 1)
		return;
	const char *keys[4];
	char vals[4][64];
	const char *v[4];
	size_t n = wanted_annotations(pc, keys, vals);
	for (size_t i = 0; i < n; i++)
		v[i] = vals[i];
	int rc = pc->k8s->annotate_node(pc->k8sctx, keys, v, n, on_annotated, pc);
	if (rc) {
		pc->annot_state = rc;
		fibril_warn(pc->m, "cannot annotate node %s: %s", pc->node_name, strerror(-rc));
		return;
	}
	pc->annot_state = 1;
}

/* Whether node_json lacks one of the annotations this module writes (or
 * holds another value). */
static bool annotations_differ(struct pc *pc, const char *node_json)
{
	const char *keys[4];
	char vals[4][64];
	size_t n = wanted_annotations(pc, keys, vals);
	struct json_object *node = json_tokener_parse(node_json), *meta, *ann, *v;
	bool differ = !node || !json_object_object_get_ex(node, "metadata", &meta) ||
		      !json_object_object_get_ex(meta, "annotations", &ann);
	for (size_t i = 0; i < n && !differ; i++)
		differ = !json_object_object_get_ex(ann, keys[i], &v) ||
			 !json_object_is_type(v, json_type_string) ||
			 strcmp(json_object_get_string(v), vals[i]) != 0;
	json_object_put(node);
	return differ;
}

/* ---- becoming ready ------------------------------------------------------------ */

static int make_ready(struct pc *pc, const struct pc_node_cidrs *c)
{
	char why[PC_WHY_LEN];
	for (int i = 0; i < PC_NFAM; i++) {
		struct pc_fam *f = &pc->fam[i];
		f->enabled = c->have[i];
		snprintf(f->source, sizeof(f->source), "%s", c->source[i]);
	}
	unsigned families = (c->have[0] ? FIBRIL_IPAMSTORE_IPV4 : 0) |
			    (c->have[1] ? FIBRIL_IPAMSTORE_IPV6 : 0);
	int rc = fibril_ipamstore_open(pc->store, families, why, sizeof(why));
	if (rc) {
		fibril_module_set_error(pc->m, "%s", why);
		return rc;
	}
	for (int i = 0; i < PC_NFAM; i++) {
		struct pc_fam *f = &pc->fam[i];
		char now[FIBRIL_IPAM_CIDR_LEN], before[FIBRIL_IPAM_CIDR_LEN];
		if (!f->enabled)
			continue;
		rc = pc_fam_set_node(f, &c->cidr[i]);
		if (rc) {
			fibril_module_set_error(pc->m, "node %s: cannot allocate from %s %s: %s",
						pc->node_name, f->source,
						fibril_cidr_format(&c->cidr[i], now, sizeof(now)),
						strerror(-rc));
			return rc;
		}
		struct fibril_ipamstore_family info;
		pc_fam_info(f, &info);
		fibril_cidr_format(&f->node, now, sizeof(now));
		if (info.have_saved && (info.saved.prefix_len != f->node.prefix_len ||
					memcmp(info.saved.ip.bytes, f->node.ip.bytes, 16) != 0))
			fibril_warn(pc->m, "the IPv%d node CIDR changed since the last run: %s -> %s",
				    f->family, fibril_cidr_format(&info.saved, before, sizeof(before)),
				    now);
		fibril_info(pc->m, "node %s: IPv%d pod CIDR %s from %s (%llu addresses, %llu in use)",
			    pc->node_name, f->family, now, f->source,
			    (unsigned long long)info.capacity, (unsigned long long)info.used);
	}
	pc->ready = true;
	set_health(pc, NULL);
	annotate(pc);
	return 0;
}

/* While start waits: is the Node there, with a CIDR? */
static void try_node(struct pc *pc)
{
	if (!pc->start_pending)
		return;
	const char *json = pc->k8s->get(pc->k8sctx, FIBRIL_K8S_NODES, "", pc->node_name);
	if (!json)
		return;
	pc->node_seen = true;
	struct pc_node_cidrs c;
	char why[PC_WHY_LEN];
	int n = pc_node_cidrs(json, &c, why, sizeof(why));
	if (n < 0) {
		fibril_module_set_error(pc->m, "node %s: %s", pc->node_name, why);
		finish_start(pc, n);
		return;
	}
	if (n == 0) {
		set_health(pc, "node %s has no pod CIDR yet (spec.podCIDRs, spec.podCIDR, annotations "
			       PC_ANNOT_V4_CIDR ", " PC_ANNOT_V6_CIDR ")", pc->node_name);
		return;
	}
	finish_start(pc, make_ready(pc, &c));
}

static void on_deadline(struct fibril_timer *t, void *ud)
{
	struct pc *pc = ud;
	pc->deadline = NULL; /* one-shot: the host frees it */
	if (!pc->start_pending)
		return;
	double s = (double)pc->node_timeout_ms / 1000;
	if (!pc->synced)
		fibril_module_set_error(pc->m, "node %s: the nodes cache did not sync within %gs "
					"(node-timeout)", pc->node_name, s);
	else if (!pc->node_seen)
		fibril_module_set_error(pc->m, "node %s not found within %gs (node-timeout): no Node "
					"object of that name", pc->node_name, s);
	else
		fibril_module_set_error(pc->m, "node %s has no pod CIDR after %gs (node-timeout): "
					"spec.podCIDRs and spec.podCIDR are empty and the annotations "
					PC_ANNOT_V4_CIDR " and " PC_ANNOT_V6_CIDR " are not set",
					pc->node_name, s);
	finish_start(pc, -ETIMEDOUT);
}

static void on_synced(void *ud, int err, const char *pending)
{
	struct pc *pc = ud;
	if (err || !pc->start_pending)
		return; /* a timeout is on_deadline's to report; -ECANCELED: stopping */
	pc->synced = true;
	try_node(pc);
}

/* ---- node changes while running --------------------------------------------------- */

static void check_node(struct pc *pc, uint32_t type, const char *json, const char *old_json)
{
	char c1[FIBRIL_IPAM_CIDR_LEN], c2[FIBRIL_IPAM_CIDR_LEN];
	const struct pc_fam *v4 = &pc->fam[0];
	const char *in_use = fibril_cidr_format(v4->enabled ? &v4->node : &pc->fam[1].node, c1,
						sizeof(c1));
	if (type == FIBRIL_K8S_DELETED) {
		set_health(pc, "node %s was deleted; still allocating from %s", pc->node_name, in_use);
		return;
	}
	struct pc_node_cidrs c;
	char why[PC_WHY_LEN];
	if (pc_node_cidrs(json, &c, why, sizeof(why)) < 0) {
		set_health(pc, "node %s: %s; still allocating from %s", pc->node_name, why, in_use);
		return;
	}
	for (int i = 0; i < PC_NFAM; i++) {
		const struct pc_fam *f = &pc->fam[i];
		if (f->enabled && !c.have[i]) {
			set_health(pc, "node %s no longer names an IPv%d pod CIDR; still allocating "
				       "from %s (restart the agent to follow the Node)",
				   pc->node_name, f->family, fibril_cidr_format(&f->node, c1, sizeof(c1)));
			return;
		}
		if (!c.have[i])
			continue;
		if (!f->enabled || f->node.prefix_len != c.cidr[i].prefix_len ||
		    memcmp(f->node.ip.bytes, c.cidr[i].ip.bytes, 16) != 0) {
			set_health(pc, "node %s: %s is now %s but %s is in use (restart the agent to "
				       "follow the Node)",
				   pc->node_name, c.source[i],
				   fibril_cidr_format(&c.cidr[i], c2, sizeof(c2)),
				   f->enabled ? fibril_cidr_format(&f->node, c1, sizeof(c1)) : "none");
			return;
		}
	}
	set_health(pc, NULL);
	/* an update that took them away (not an older event still in flight) */
	if (pc->annot_state == 2 && old_json && !annotations_differ(pc, old_json) &&
	    annotations_differ(pc, json)) {
		fibril_info(pc->m, "node %s lost its " PC_ANNOT_PREFIX " annotations: writing them "
			    "again", pc->node_name);
		annotate(pc);
	}
}

static int on_node_event(const struct fibril_event *ev, void *ud)
{
	struct pc *pc = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (ev->payload_len < FIBRIL_OFFSETOFEND(struct fibril_k8s_event, resource_version) || e->sz < FIBRIL_OFFSETOFEND(struct fibril_k8s_event, resource_version))
		return -EINVAL;
	const char *name = FIBRIL_K8S_STR(e, name), *obj = FIBRIL_K8S_STR(e, object);
	if (!name || !obj || strcmp(name, pc->node_name) != 0 || pc->stopping || !pc->k8s)
		return 0;
	if (pc->start_pending)
		try_node(pc);
	else if (pc->ready)
		check_node(pc, e->type, obj, FIBRIL_K8S_STR(e, old_object));
	return 0;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void pc_fini(struct fibril_module *m);

static int pc_init(struct fibril_module *m)
{
	struct pc *pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pc->m = m;
	for (int i = 0; i < PC_NFAM; i++) {
		pc->fam[i].pc = pc;
		pc->fam[i].family = i ? 6 : 4;
	}
	fibril_module_set_data(m, pc);
	int rc = pc_store_provide(pc);
	if (rc == 0 && !fibril_bus_subscribe(m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_NODES,
					     FIBRIL_K8S_VERSION, on_node_event, pc))
		rc = -ENOMEM;
	if (rc) /* the host does not call fini after a failed init */
		pc_fini(m);
	return rc;
}

static int pc_start(struct fibril_module *m)
{
	struct pc *pc = fibril_module_data(m);
	void *ctx = NULL;
	pc->k8s = (const struct fibril_k8s_ops *)fibril_service_lookup(m, FIBRIL_K8S_CAPABILITY,
								       FIBRIL_K8S_VERSION, &ctx);
	if (!pc->k8s) {
		fibril_module_set_error(m, "no k8s capability (load the k8s module)");
		return -ENOENT;
	}
	pc->k8sctx = ctx;
	pc->node_timeout_ms = fibril_config_duration_ms(m, "node-timeout");
	pc->annotate = fibril_config_bool(m, "annotate-node");
	snprintf(pc->node_name, sizeof(pc->node_name), "%s", pc->k8s->node_name(ctx));
	int rc = pc->k8s->watch_resource(ctx, FIBRIL_K8S_NODES);
	if (rc) {
		fibril_module_set_error(m, "k8s: cannot watch nodes: %s", strerror(-rc));
		return rc;
	}
	pc->start_pending = true;
	pc->in_start = true;
	pc->deadline = fibril_timer_add(m, pc->node_timeout_ms, 0, on_deadline, pc);
	rc = pc->k8s->wait_synced(ctx, FIBRIL_LIST(FIBRIL_K8S_NODES), pc->node_timeout_ms,
				  on_synced, pc);
	if (rc) {
		fibril_module_set_error(m, "k8s: cannot wait for the nodes cache: %s", strerror(-rc));
		finish_start(pc, rc); /* in_start: only records it */
	} else {
		try_node(pc);
	}
	pc->in_start = false;
	if (pc->start_done)
		return pc->start_rc;
	fibril_info(m, "waiting up to %gs for node %s and its pod CIDR",
		    (double)pc->node_timeout_ms / 1000, pc->node_name);
	return FIBRIL_START_PENDING;
}

static void pc_stop(struct fibril_module *m)
{
	struct pc *pc = fibril_module_data(m);
	pc->stopping = true;
	pc->start_pending = false;
	if (pc->deadline)
		fibril_timer_cancel(pc->deadline);
	pc->deadline = NULL;
}

static void pc_fini(struct fibril_module *m)
{
	struct pc *pc = fibril_module_data(m);
	if (!pc)
		return;
	fibril_ipamstore_free(pc->store);
	free(pc);
	fibril_module_set_data(m, NULL);
}

static int pc_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct pc *pc = fibril_module_data(m);
	if (!pc || !len)
		return -EINVAL;
	if (!pc->ready)
		return snprintf(buf, len, "waiting for node %s", pc->node_name);
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < PC_NFAM && off < len; i++) {
		const struct pc_fam *f = &pc->fam[i];
		char c[FIBRIL_IPAM_CIDR_LEN];
		if (!f->enabled)
			continue;
		struct fibril_ipamstore_family info;
		pc_fam_info(f, &info);
		int n = snprintf(buf + off, len - off, "%s%llu/%llu %sfrom %s (%s)", off ? ", " : "",
				 (unsigned long long)info.used, (unsigned long long)info.capacity,
				 off ? "" : "allocated ", fibril_cidr_format(&f->node, c, sizeof(c)),
				 f->source);
		off += n > 0 ? (size_t)n : 0;
		if (info.stale && off < len) {
			n = snprintf(buf + off, len - off, " [%llu stale]",
				     (unsigned long long)info.stale);
			off += n > 0 ? (size_t)n : 0;
		}
	}
	if (pc->why[0] && off < len) {
		int n = snprintf(buf + off, len - off, "; %s", pc->why);
		off += n > 0 ? (size_t)n : 0;
	}
	return (int)(off < len ? off : len - 1);
}

static int check_strategy(const char *value, char *why, size_t len)
{
	if (strcmp(value, "sequential") == 0 || strcmp(value, "random") == 0)
		return 0;
	snprintf(why, len, "'%s' is not sequential or random", value);
	return -EINVAL;
}

static const struct fibril_config_key pc_keys[] = {
	{.name = "node-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "How long start waits for this node's Node object and a pod CIDR on it",
	 .min = 100, .max = 3600000},
	{.name = "allocation-strategy", .type = FIBRIL_CONFIG_STRING,
	 .default_value = "sequential", .help = "sequential or random", .check = check_strategy},
	{.name = "annotate-node", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "Write network.fibril.io/ipvN-pod-cidr and ipvN-host-ip on the Node"},
	{0},
};

FIBRIL_MODULE(.name = PC_MODULE, .version = "1.0.0",
	      .description = "Kubernetes IPAM: the node CIDR from the Node's spec.podCIDRs "
			     "(or annotations); pod addresses persisted on disk",
	      .provides = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY),
	      .requires = FIBRIL_LIST(FIBRIL_K8S_CAPABILITY), .config_keys = pc_keys,
	      .init = pc_init, .start = pc_start, .stop = pc_stop, .fini = pc_fini,
	      .summary = pc_summary);
