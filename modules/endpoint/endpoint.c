/* modules/endpoint/endpoint.c - the endpoint manager (capability
 * "endpoint"): the module descriptor and lifecycle, the table of endpoints
 * by local ID, the bus events (endpoint.created/updated/deleted), the
 * capability's ops (foreach, get, identity_labels, identity_scope), the calls into the
 * datapath (when loaded), the retry of pending datapath/label work, health
 * and the status summary. Label changes (the API's and Kubernetes pods')
 * are in labels.c, the REST routes in api.c and api_put.c, restore in
 * restore.c. */
#include "endpoint_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/nodes.h>

#define RETRY_MS 1000

const char *ep_state_name(unsigned state)
{
	switch (state) {
	case FIBRIL_EP_WAITING_FOR_IDENTITY:
		return "waiting-for-identity";
	case FIBRIL_EP_READY:
		return "ready";
	case FIBRIL_EP_REGENERATING:
		return "regenerating";
	case FIBRIL_EP_DISCONNECTING:
		return "disconnecting";
	}
	return "unknown";
}

void ep_owner(const struct ep_endpoint *ep, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", ep->container_id, ep->ifname);
}

/* ---- the table ------------------------------------------------------------------ */

struct ep_endpoint *ep_find_attachment(struct ep_manager *mg, const char *cid, const char *ifname)
{
	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];

		if (ep && !strcmp(ep->container_id, cid) && !strcmp(ep->ifname, ifname))
			return ep;
	}
	return NULL;
}

uint16_t ep_free_id(struct ep_manager *mg)
{
	for (size_t i = 1; i < mg->eps_cap; i++)
		if (!mg->eps[i])
			return (uint16_t)i;
	return mg->eps_cap <= EP_ID_MAX ? (uint16_t)(mg->eps_cap ? mg->eps_cap : 1) : 0;
}

int ep_table_insert(struct ep_manager *mg, struct ep_endpoint *ep)
{
	if (ep->id == 0)
		return -EINVAL;
	if (ep->id >= mg->eps_cap) {
		size_t cap = mg->eps_cap ? mg->eps_cap : 64;

		while (cap <= ep->id)
			cap *= 2;
		if (cap > EP_ID_MAX + 1)
			cap = EP_ID_MAX + 1;
		struct ep_endpoint **v = realloc(mg->eps, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		memset(v + mg->eps_cap, 0, (cap - mg->eps_cap) * sizeof(*v));
		mg->eps = v;
		mg->eps_cap = cap;
	}
	if (mg->eps[ep->id])
		return -EEXIST;
	mg->eps[ep->id] = ep;
	mg->count++;
	return 0;
}

void ep_table_remove(struct ep_manager *mg, struct ep_endpoint *ep)
{
	if (ep->id < mg->eps_cap && mg->eps[ep->id] == ep) {
		mg->eps[ep->id] = NULL;
		mg->count--;
	}
}

void ep_free(struct ep_endpoint *ep)
{
	if (!ep)
		return;
	free(ep->netns);
	free(ep->pod_namespace);
	free(ep->pod_name);
	free(ep);
}

int ep_apply_spec(struct ep_endpoint *ep, const struct ep_spec *spec)
{
	char *netns = strdup(spec->netns);
	char *ns = *spec->pod_namespace ? strdup(spec->pod_namespace) : NULL;
	char *pod = *spec->pod_name ? strdup(spec->pod_name) : NULL;

	if (!netns || (*spec->pod_namespace && !ns) || (*spec->pod_name && !pod)) {
		free(netns);
		free(ns);
		free(pod);
		return -ENOMEM;
	}
	free(ep->netns);
	free(ep->pod_namespace);
	free(ep->pod_name);
	ep->netns = netns;
	ep->pod_namespace = ns;
	ep->pod_name = pod;
	snprintf(ep->container_id, sizeof(ep->container_id), "%s", spec->container_id);
	snprintf(ep->ifname, sizeof(ep->ifname), "%s", spec->ifname);
	snprintf(ep->host_ifname, sizeof(ep->host_ifname), "%s", spec->host_ifname);
	ep->host_ifindex = spec->host_ifindex;
	memcpy(ep->mac, spec->mac, 6);
	memcpy(ep->host_mac, spec->host_mac, 6);
	ep->has_ipv4 = spec->has_ipv4;
	ep->has_ipv6 = spec->has_ipv6;
	ep->ipv4 = spec->ipv4;
	ep->ipv6 = spec->ipv6;
	return 0;
}

/* ---- JSON ------------------------------------------------------------------------ */

/* The endpoint is built as a json-c object and printed plain (no spaces,
 * '/' unescaped) into a growing text buffer, which the API concatenates for
 * a list and the store writes as the state file. */

static void buf_reserve(struct ep_buf *b, size_t more)
{
	if (b->oom || b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 1024;

	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);

	if (!p) {
		b->oom = true;
		return;
	}
	b->p = p;
	b->cap = cap;
}

void ep_buf_add(struct ep_buf *b, const char *s, size_t n)
{
	buf_reserve(b, n);
	if (b->oom)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void add_str(struct json_object *o, const char *key, const char *value)
{
	json_object_object_add(o, key, json_object_new_string(value));
}

static void add_mac(struct json_object *o, const char *key, const uint8_t *mac)
{
	char text[18];

	snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
		 mac[4], mac[5]);
	add_str(o, key, text);
}

/* The endpoint as the API shows it, or (for_file: no state) as its state file holds it. */
static struct json_object *ep_to_json(const struct ep_endpoint *ep, bool for_file)
{
	struct json_object *o = json_object_new_object();
	char addr[INET6_ADDRSTRLEN];

	if (!o)
		return NULL;
	json_object_object_add(o, "id", json_object_new_int64(ep->id));
	if (!for_file)
		add_str(o, "state", ep_state_name(ep->state));
	json_object_object_add(o, "identity", json_object_new_int64(ep->identity ? ep->identity->id : 0));
	add_str(o, "container-id", ep->container_id);
	add_str(o, "ifname", ep->ifname);
	add_str(o, "netns", ep->netns);
	add_str(o, "host-ifname", ep->host_ifname);
	json_object_object_add(o, "host-ifindex", json_object_new_int64(ep->host_ifindex));
	add_mac(o, "mac", ep->mac);
	add_mac(o, "host-mac", ep->host_mac);
	if (ep->has_ipv4)
		add_str(o, "ipv4", inet_ntop(AF_INET, &ep->ipv4, addr, sizeof(addr)));
	if (ep->has_ipv6)
		add_str(o, "ipv6", inet_ntop(AF_INET6, &ep->ipv6, addr, sizeof(addr)));
	if (ep->pod_namespace)
		add_str(o, "pod-namespace", ep->pod_namespace);
	if (ep->pod_name)
		add_str(o, "pod-name", ep->pod_name);
	json_object_object_add(o, "labels", ep_labels_to_json(ep->identity ? ep->identity->labels : ""));
	json_object_object_add(o, "created", json_object_new_int64((int64_t)ep->created));
	return o;
}

void ep_buf_endpoint(struct ep_buf *b, const struct ep_endpoint *ep, bool for_file)
{
	struct json_object *o = ep_to_json(ep, for_file);
	size_t len = 0;
	const char *text = o ? json_object_to_json_string_length(
				       o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
			     : NULL;

	if (text)
		ep_buf_add(b, text, len);
	else
		b->oom = true;
	json_object_put(o);
}

/* ---- events and the capability ----------------------------------------------------- */

/* The endpoint as the bus and the ops carry it (malloc'd; labels after it). */
static struct fibril_endpoint_event *event_new(const struct ep_endpoint *ep, uint32_t old_identity,
					       size_t *len)
{
	const char *labels = ep->identity ? ep->identity->labels : "";
	size_t ll = strlen(labels);
	struct fibril_endpoint_event *ev = calloc(1, sizeof(*ev) + ll + 1);

	if (!ev)
		return NULL;
	ev->sz = sizeof(*ev);
	ev->id = ep->id;
	ev->state = ep->state;
	ev->identity = ep->identity ? ep->identity->id : 0;
	ev->old_identity = old_identity;
	ev->host_ifindex = ep->host_ifindex;
	memcpy(ev->host_ifname, ep->host_ifname, sizeof(ev->host_ifname));
	memcpy(ev->ifname, ep->ifname, sizeof(ev->ifname));
	memcpy(ev->container_id, ep->container_id, sizeof(ev->container_id));
	if (ep->pod_namespace)
		snprintf(ev->pod_namespace, sizeof(ev->pod_namespace), "%s", ep->pod_namespace);
	if (ep->pod_name)
		snprintf(ev->pod_name, sizeof(ev->pod_name), "%s", ep->pod_name);
	memcpy(ev->mac, ep->mac, 6);
	memcpy(ev->host_mac, ep->host_mac, 6);
	ev->has_ipv4 = ep->has_ipv4;
	ev->has_ipv6 = ep->has_ipv6;
	ev->ipv4 = ep->ipv4;
	ev->ipv6 = ep->ipv6;
	ev->labels = ll ? (uint32_t)sizeof(*ev) : 0;
	memcpy((char *)ev + sizeof(*ev), labels, ll + 1);
	*len = sizeof(*ev) + ll + 1;
	return ev;
}

void ep_publish(struct ep_manager *mg, const char *topic, const struct ep_endpoint *ep,
		uint32_t old_identity)
{
	size_t len;
	struct fibril_endpoint_event *ev = event_new(ep, old_identity, &len);
	int rc = ev ? fibril_bus_publish(mg->m, topic, FIBRIL_ENDPOINT_VERSION, ev, len) : -ENOMEM;

	if (rc)
		fibril_error(mg->m, "cannot publish %s for endpoint %u: %s", topic, ep->id, strerror(-rc));
	free(ev);
}

static int call_with_event(const struct ep_endpoint *ep, fibril_endpoint_fn cb, void *ud)
{
	size_t len;
	uint32_t identity = ep->identity ? ep->identity->id : 0;
	struct fibril_endpoint_event *ev = event_new(ep, identity, &len);

	if (!ev)
		return -ENOMEM;
	int rc = cb(ev, ud);

	free(ev);
	return rc;
}

static int op_foreach(void *ctx, fibril_endpoint_fn cb, void *ud)
{
	struct ep_manager *mg = ctx;

	if (!cb)
		return -EINVAL;
	for (size_t i = 1; i < mg->eps_cap; i++) {
		if (!mg->eps[i])
			continue;
		int rc = call_with_event(mg->eps[i], cb, ud);

		if (rc)
			return rc < 0 ? rc : 0;
	}
	return 0;
}

static int op_get(void *ctx, uint16_t id, fibril_endpoint_fn cb, void *ud)
{
	struct ep_manager *mg = ctx;

	if (!cb)
		return -EINVAL;
	if (id == 0 || id >= mg->eps_cap || !mg->eps[id])
		return -ENOENT;
	int rc = call_with_event(mg->eps[id], cb, ud);

	return rc < 0 ? rc : 0;
}

static const char *op_identity_labels(void *ctx, uint32_t identity)
{
	struct ep_identity *id = ep_identity_find(ctx, identity);

	return id ? id->labels : ep_cluster_labels(ctx, identity);
}

static const char *op_identity_scope(void *ctx, uint32_t identity)
{
	return ep_identity_scope(ctx, identity);
}

/* ---- the datapath ---------------------------------------------------------------- */

#define EP_NO_MASQ_LABEL "network.fibril.io/masquerade=false"

/* Whether labels ('\n'-joined, "source:key=value") hold the masquerading
 * opt-out, from any source (k8s: from the pod, or the API's). */
static bool ep_labels_no_masquerade(const char *labels)
{
	for (const char *l = labels; l && *l;) {
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		const char *colon = memchr(l, ':', n);
		const char *kv = colon && colon < l + n ? colon + 1 : l;
		size_t kn = n - (size_t)(kv - l);
		if (kn == strlen(EP_NO_MASQ_LABEL) && !memcmp(kv, EP_NO_MASQ_LABEL, kn))
			return true;
		l = end ? end + 1 : l + n;
	}
	return false;
}

void ep_to_datapath(const struct ep_endpoint *ep, struct fibril_datapath_endpoint *out)
{
	memset(out, 0, sizeof(*out));
	out->sz = sizeof(*out);
	out->id = ep->id;
	out->identity = ep->identity ? ep->identity->id : 0;
	out->host_ifindex = ep->host_ifindex;
	memcpy(out->host_ifname, ep->host_ifname, sizeof(out->host_ifname));
	memcpy(out->mac, ep->mac, 6);
	memcpy(out->host_mac, ep->host_mac, 6);
	out->has_ipv4 = ep->has_ipv4;
	out->has_ipv6 = ep->has_ipv6;
	out->ipv4 = ep->ipv4;
	out->ipv6 = ep->ipv6;
	if (ep->identity && ep_labels_no_masquerade(ep->identity->labels))
		out->flags |= FIBRIL_DATAPATH_EP_F_NO_MASQUERADE;
}

/* One call of the datapath (upsert or remove) for ep; 0 without a datapath. */
static int ep_datapath_call(struct ep_manager *mg, const struct ep_endpoint *ep, bool upsert,
			    char *err, size_t errlen)
{
	struct fibril_datapath_endpoint d;

	if (!mg->dp)
		return 0;
	ep_to_datapath(ep, &d);
	if (err && errlen)
		err[0] = '\0';
	double t0 = ep_metrics_now();
	int rc = upsert ? mg->dp->endpoint_upsert(mg->dp_ctx, &d, err, errlen)
			: mg->dp->endpoint_remove(mg->dp_ctx, &d, err, errlen);
	if (upsert) {
		fibril_series_inc(mg->met.s_regen[rc == 0]);
		fibril_series_observe(mg->met.s_regen_time, ep_metrics_now() - t0);
	}

	if (rc && err && errlen && !err[0])
		snprintf(err, errlen, "%s", strerror(rc < 0 ? -rc : EIO));
	return rc < 0 ? rc : rc ? -EIO : 0;
}

int ep_datapath_upsert(struct ep_manager *mg, const struct ep_endpoint *ep, char *err, size_t errlen)
{
	return ep_datapath_call(mg, ep, true, err, errlen);
}

int ep_datapath_remove(struct ep_manager *mg, const struct ep_endpoint *ep, char *err, size_t errlen)
{
	return ep_datapath_call(mg, ep, false, err, errlen);
}

/* ---- health and retries ------------------------------------------------------------- */

bool ep_iface_gone(struct ep_manager *mg, struct ep_endpoint *ep, const char *why)
{
	char *gone = ep_gone_reason(ep);

	if (!gone)
		return false;
	if (!ep->iface_gone)
		fibril_warn(mg->m, "endpoint %u: %s (the datapath: %s): kept until its CNI DEL, "
			    "not retried", ep->id, gone, why);
	free(gone);
	ep->iface_gone = true;
	ep->datapath_pending = false;
	return true;
}

void ep_update_health(struct ep_manager *mg)
{
	size_t dp = 0, k8s = 0, gone = 0;

	for (size_t i = 1; i < mg->eps_cap; i++) {
		if (!mg->eps[i])
			continue;
		dp += mg->eps[i]->datapath_pending;
		k8s += mg->eps[i]->k8s_pending;
		gone += mg->eps[i]->iface_gone;
	}
	if (dp || k8s)
		fibril_health_report(mg->m, NULL, FIBRIL_HEALTH_DEGRADED,
				     "%zu endpoint(s) waiting for the datapath, %zu for their pod labels; retrying",
				     dp, k8s);
	else if (gone) /* a fact about those pods, not about this agent */
		fibril_health_report(mg->m, NULL, FIBRIL_HEALTH_OK,
				     "%zu endpoints (%zu whose interface is gone, until their DEL)",
				     mg->count, gone);
	else
		fibril_health_report(mg->m, NULL, FIBRIL_HEALTH_OK, "%zu endpoints", mg->count);
}

static void retry_pending(struct ep_manager *mg)
{
	bool pending = false;
	char err[256];

	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];

		if (!ep || ep->state == FIBRIL_EP_DISCONNECTING)
			continue;
		if (ep->k8s_pending && ep->pod_namespace && ep->pod_name) {
			char *labels = ep_pod_labels_cached(mg, ep->pod_namespace, ep->pod_name);

			ep->k8s_pending = false;
			if (labels)
				ep_apply_pod_labels(mg, ep, labels);
			free(labels);
		}
		if (ep->datapath_pending) {
			if (ep_datapath_upsert(mg, ep, err, sizeof(err)) == 0) {
				uint32_t identity = ep->identity->id;

				ep->datapath_pending = false;
				ep->state = FIBRIL_EP_READY;
				fibril_info(mg->m, "endpoint %u is in the datapath (retried)", ep->id);
				ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_UPDATED, ep, identity);
			} else if (!ep_iface_gone(mg, ep, err)) {
				fibril_debug(mg->m, "endpoint %u: datapath still refuses: %s", ep->id, err);
			}
		}
		pending |= ep->datapath_pending || ep->k8s_pending;
	}
	ep_update_health(mg);
	if (pending)
		ep_schedule_retry(mg);
}

static void retry_tick(struct fibril_timer *t, void *ud)
{
	struct ep_manager *mg = ud;

	(void)t;
	mg->retry_timer = NULL; /* one-shot: freed by the loop */
	retry_pending(mg);
}

void ep_retry_pending(struct ep_manager *mg)
{
	if (!mg->started)
		return;
	if (mg->retry_timer)
		fibril_timer_cancel(mg->retry_timer);
	mg->retry_timer = NULL;
	retry_pending(mg);
}

void ep_schedule_retry(struct ep_manager *mg)
{
	if (!mg->retry_timer && mg->started)
		mg->retry_timer = fibril_timer_add(mg->m, RETRY_MS, 0, retry_tick, mg);
	ep_update_health(mg);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void free_endpoints(struct ep_manager *mg)
{
	for (size_t i = 1; i < mg->eps_cap; i++)
		ep_free(mg->eps[i]);
	free(mg->eps);
	mg->eps = NULL;
	mg->eps_cap = 0;
	mg->count = 0;
}

static int endpoint_init(struct fibril_module *m)
{
	struct ep_manager *mg = calloc(1, sizeof(*mg));
	int rc;

	if (!mg)
		return -ENOMEM;
	mg->m = m;
	mg->dirfd = -1;
	mg->journal = NULL;
	fibril_module_set_data(m, mg);
	ep_identities_init(mg);
	if ((rc = ep_cluster_init(mg))) {
		fibril_module_set_error(m, "cannot set up cluster-wide identities: %s", strerror(-rc));
		return rc;
	}
	mg->ops.hdr.sz = sizeof(mg->ops);
	mg->ops.hdr.version = FIBRIL_ENDPOINT_VERSION;
	mg->ops.foreach = op_foreach;
	mg->ops.get = op_get;
	mg->ops.identity_labels = op_identity_labels;
	mg->ops.identity_scope = op_identity_scope;
	if ((rc = fibril_service_provide(m, FIBRIL_ENDPOINT_CAPABILITY, &mg->ops.hdr, mg))) {
		fibril_module_set_error(m, "cannot provide '%s': %s", FIBRIL_ENDPOINT_CAPABILITY,
					strerror(-rc));
		return rc;
	}
	if ((rc = ep_api_register(mg)))
		return rc;
	if ((rc = ep_metrics_register(mg))) {
		fibril_module_set_error(m, "cannot register the endpoint metrics: %s", strerror(-rc));
		return rc;
	}
	if (!fibril_bus_subscribe(m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_PODS, FIBRIL_K8S_VERSION,
				  ep_on_pod_event, mg)) {
		fibril_module_set_error(m, "cannot subscribe to %s", FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_PODS);
		return -ENOMEM;
	}
	return 0;
}

/* A soft dependency: the table, or NULL when absent (an unusable one is an error). */
static const struct fibril_service_header *lookup(struct fibril_module *m, const char *cap,
						  uint32_t version, void **ctx, bool required, int *err)
{
	const struct fibril_service_header *hdr;

	errno = 0;
	hdr = fibril_service_lookup(m, cap, version, ctx);
	*err = 0;
	if (!hdr && (required || errno == EPROTO)) {
		*err = errno ? errno : ENOENT;
		fibril_module_set_error(m, "no usable '%s' provider: %s", cap,
					*err == EPROTO ? "its interface is too old" : strerror(*err));
	}
	return hdr;
}

static int endpoint_start(struct fibril_module *m)
{
	struct ep_manager *mg = fibril_module_data(m);
	char why[512];
	int err, rc;

	mg->ipam = (const struct fibril_ipam_ops *)lookup(m, FIBRIL_IPAM_CAPABILITY, 1 /* the lowest it needs */,
							  &mg->ipam_ctx, true, &err);
	if (!mg->ipam)
		return -err;
	if (!FIBRIL_SERVICE_HAS(mg->ipam, release_owner) || !mg->ipam->allocate_ip ||
	    !mg->ipam->release_ip || !mg->ipam->release_owner || !mg->ipam->list) {
		fibril_module_set_error(m, "the '%s' provider's table is incomplete", FIBRIL_IPAM_CAPABILITY);
		return -EPROTO;
	}
	/* version 1: the endpoint calls only the 1.x ops (not policy's) */
	mg->dp = (const struct fibril_datapath_ops *)lookup(m, FIBRIL_DATAPATH_CAPABILITY,
							    1, &mg->dp_ctx,
							    false, &err);
	if (err)
		return -err;
	if (mg->dp && (!FIBRIL_SERVICE_HAS(mg->dp, endpoint_remove) || !mg->dp->endpoint_upsert ||
		       !mg->dp->endpoint_remove)) {
		fibril_module_set_error(m, "the '%s' provider's table is incomplete",
					FIBRIL_DATAPATH_CAPABILITY);
		return -EPROTO;
	}
	if (mg->dp && FIBRIL_SERVICE_HAS(mg->dp, set_identity_scope) && mg->dp->set_identity_scope)
		mg->dp->set_identity_scope(mg->dp_ctx, op_identity_scope, mg);
	mg->k8s = (const struct fibril_k8s_ops *)lookup(m, FIBRIL_K8S_CAPABILITY, FIBRIL_K8S_VERSION,
							&mg->k8s_ctx, false, &err);
	if (err)
		return -err;
	if (mg->k8s && (!FIBRIL_SERVICE_HAS(mg->k8s, get) || !mg->k8s->watch_resource)) {
		fibril_module_set_error(m, "the '%s' provider's table is incomplete", FIBRIL_K8S_CAPABILITY);
		return -EPROTO;
	}
	if ((rc = ep_store_open(mg, why, sizeof(why)))) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	ep_identity_load_resume(mg);
	if ((rc = ep_cluster_start(mg))) {
		ep_store_close(mg);
		return rc;
	}
	if (mg->k8s && (rc = mg->k8s->watch_resource(mg->k8s_ctx, FIBRIL_K8S_PODS)) < 0) {
		fibril_module_set_error(m, "k8s: cannot watch pods: %s", strerror(-rc));
		ep_cluster_stop(mg);
		ep_store_close(mg);
		return rc;
	}
	mg->started = true;
	fibril_info(m, "state in %s; datapath %s; kubernetes %s", mg->dir,
		    mg->dp ? "loaded" : "not loaded", mg->k8s ? "pods watched" : "not loaded");
	rc = ep_restore_start(mg);
	if (rc < 0) {
		mg->started = false;
		ep_cluster_stop(mg);
		ep_store_close(mg);
	}
	return rc;
}

static void endpoint_stop(struct fibril_module *m)
{
	struct ep_manager *mg = fibril_module_data(m);

	mg->started = false;
	ep_cluster_stop(mg); /* waiting PUTs are answered while the table is there */
	ep_restore_abort(mg);
	if (mg->retry_timer)
		fibril_timer_cancel(mg->retry_timer);
	mg->retry_timer = NULL;
	/* The datapath keeps the endpoints: the next agent adopts them. */
	free_endpoints(mg);
	ep_identities_reset(mg);
	ep_store_close(mg);
	if (mg->dp && FIBRIL_SERVICE_HAS(mg->dp, set_identity_scope) && mg->dp->set_identity_scope)
		mg->dp->set_identity_scope(mg->dp_ctx, NULL, NULL);
	mg->ipam = NULL;
	mg->dp = NULL;
	mg->k8s = NULL;
}

static void endpoint_fini(struct fibril_module *m)
{
	struct ep_manager *mg = fibril_module_data(m);

	if (!mg)
		return;
	free_endpoints(mg);
	ep_cluster_free(mg);
	ep_identities_free(mg);
	ep_store_close(mg);
	ep_ifname_close();
	ep_metrics_forget(); /* an answer sent later (IPAM's fini) observes nothing */
	free(mg);
	fibril_module_set_data(m, NULL);
}

/* "12 endpoints, 5 identities (2 waiting for the datapath)" */
static int endpoint_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct ep_manager *mg = fibril_module_data(m);
	size_t pending = 0;

	for (size_t i = 1; i < mg->eps_cap; i++)
		pending += mg->eps[i] && mg->eps[i]->datapath_pending;
	if (pending)
		return snprintf(buf, len, "%zu endpoints, %zu identities (%zu waiting for the datapath)",
				mg->count, mg->nidents, pending);
	return snprintf(buf, len, "%zu endpoints, %zu identities", mg->count, mg->nidents);
}

FIBRIL_MODULE(.name = EP_MODULE, .version = "1.0.0",
	      .description = "endpoint manager: local endpoints, security identities, state and restore",
	      .provides = FIBRIL_LIST(FIBRIL_ENDPOINT_CAPABILITY),
	      .requires = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY, FIBRIL_K8S_CAPABILITY,
				   FIBRIL_KVSTORE_CAPABILITY, FIBRIL_NODES_CAPABILITY),
	      .config_keys = ep_config_keys, .init = endpoint_init, .start = endpoint_start, .stop = endpoint_stop,
	      .fini = endpoint_fini, .summary = endpoint_summary);
