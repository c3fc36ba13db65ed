/* modules/nodes/ipcache_crd.c - the ipcache through the Kubernetes API
 * (ipcache-source = crd, Cilium's CRD mode): each local endpoint is
 * published as a cilium.io/v2 CiliumEndpoint named after its pod
 * (ownerReferences: the Pod, so the API server's garbage collector takes
 * it with the pod), created with POST, replaced with PUT at the
 * resourceVersion just read (AlreadyExists or Conflict: read again, up to
 * CEP_TRIES times), deleted with the endpoint. Status fields as Cilium's:
 *   status.id                          the local endpoint ID
 *   status.identity.id                 the security identity
 *   status.networking.addressing[0]    {"ipv4": .., "ipv6": ..}
 *   status.networking.node             the node IP (HostIP)
 *   status.networking.node-name        the node's name (fibril's: what
 *                                      binds the record to its writer)
 *   status.named-ports                 the Pod's named container ports
 * Every agent watches the CiliumEndpoints (the k8s capability's informer)
 * and feeds each address to nodes_ipcache_apply, the kvstore source's
 * checks and programming (a cluster identity, in the named node's pod
 * CIDRs, that node's IP). */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include <fibril/k8s.h>

#define CEP_TRIES 5

struct cep_write {
	struct nodes *s;
	char ns[64], name[254];
	char *body; /* the object without metadata.resourceVersion; NULL: a delete */
	unsigned tries;
	bool reading; /* the request in flight is the GET before a PUT */
};

static struct json_object *get_path(struct json_object *o, const char *const *path)
{
	for (; o && *path; path++) {
		struct json_object *x;
		if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, *path, &x))
			return NULL;
		o = x;
	}
	return o;
}

/* ---- decode: a CiliumEndpoint -> up to two records -------------------------------------------- */

static int addr_parse(const char *text, uint8_t want, uint8_t *family, uint8_t *addr)
{
	memset(addr, 0, 16);
	if (want == 4 && inet_pton(AF_INET, text, addr) == 1)
		return *family = 4, 0;
	if (want == 6 && inet_pton(AF_INET6, text, addr) == 1)
		return *family = 6, 0;
	if (want == 0 && inet_pton(AF_INET, text, addr) == 1)
		return *family = 4, 0;
	if (want == 0 && inet_pton(AF_INET6, text, addr) == 1)
		return *family = 6, 0;
	return -EINVAL;
}

/* 0 and n records (0..2), or -EINVAL with why */
static int cep_decode(const char *json, struct nodes_ip_record out[2], unsigned *n, char *why,
		      size_t len)
{
	struct json_object *o = json ? json_tokener_parse(json) : NULL;
	static const char *const p_ns[] = {"metadata", "namespace", NULL};
	static const char *const p_name[] = {"metadata", "name", NULL};
	static const char *const p_id[] = {"status", "identity", "id", NULL};
	static const char *const p_node[] = {"status", "networking", "node-name", NULL};
	static const char *const p_host[] = {"status", "networking", "node", NULL};
	static const char *const p_addr[] = {"status", "networking", "addressing", NULL};
	struct json_object *ns = get_path(o, p_ns), *name = get_path(o, p_name);
	struct json_object *id = get_path(o, p_id), *node = get_path(o, p_node);
	struct json_object *host = get_path(o, p_host), *addrs = get_path(o, p_addr);
	int rc = -EINVAL;
	*n = 0;
	if (!o)
		snprintf(why, len, "not a JSON object");
	else if (!ns || !name || !json_object_is_type(ns, json_type_string) ||
		 !json_object_is_type(name, json_type_string))
		snprintf(why, len, "no metadata.namespace/name");
	else if (!id || !json_object_is_type(id, json_type_int) || json_object_get_int64(id) < 0 ||
		 json_object_get_int64(id) > UINT32_MAX)
		snprintf(why, len, "status.identity.id is missing or not a number");
	else if (!node || !json_object_is_type(node, json_type_string) ||
		 !json_object_get_string_len(node) ||
		 json_object_get_string_len(node) >= FIBRIL_NODE_NAME_LEN)
		snprintf(why, len, "status.networking.node-name is missing or too long");
	else if (!addrs || !json_object_is_type(addrs, json_type_array) ||
		 json_object_array_length(addrs) < 1 ||
		 !json_object_is_type(json_object_array_get_idx(addrs, 0), json_type_object))
		snprintf(why, len, "status.networking.addressing[0] is missing");
	else
		rc = 0;
	struct nodes_ip_record base = {0};
	if (rc == 0) {
		base.identity = (uint32_t)json_object_get_int64(id);
		snprintf(base.node, sizeof(base.node), "%s", json_object_get_string(node));
		snprintf(base.pod_namespace, sizeof(base.pod_namespace), "%s", json_object_get_string(ns));
		snprintf(base.pod_name, sizeof(base.pod_name), "%s", json_object_get_string(name));
		if (host && (!json_object_is_type(host, json_type_string) ||
			     addr_parse(json_object_get_string(host), 0, &base.host_family, base.host))) {
			snprintf(why, len, "status.networking.node is not an IP address");
			rc = -EINVAL;
		}
	}
	static const char *const fams[] = {"ipv4", "ipv6"};
	for (unsigned f = 0; rc == 0 && f < 2; f++) {
		struct json_object *a;
		if (!json_object_object_get_ex(json_object_array_get_idx(addrs, 0), fams[f], &a))
			continue;
		struct nodes_ip_record *r = &out[*n];
		*r = base;
		if (!json_object_is_type(a, json_type_string) ||
		    addr_parse(json_object_get_string(a), f ? 6 : 4, &r->family, r->addr)) {
			snprintf(why, len, "status.networking.addressing[0].%s is not an IPv%c address",
				 fams[f], f ? '6' : '4');
			rc = -EINVAL;
			break;
		}
		(*n)++;
	}
	if (rc == 0 && !*n) {
		snprintf(why, len, "status.networking.addressing[0] holds no address");
		rc = -EINVAL;
	}
	json_object_put(o);
	return rc;
}

/* the addresses of old that new does not hold any more leave the ipcache */
static void cep_forget(struct nodes *s, const char *old_json, const struct nodes_ip_record *keep,
		       unsigned nkeep)
{
	struct nodes_ip_record old[2];
	unsigned n;
	char why[NODES_WHY_LEN];
	if (!old_json || cep_decode(old_json, old, &n, why, sizeof(why)))
		return;
	for (unsigned i = 0; i < n; i++) {
		bool kept = false;
		for (unsigned k = 0; k < nkeep; k++)
			kept |= keep[k].family == old[i].family && !memcmp(keep[k].addr, old[i].addr, 16);
		struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, old[i].family, old[i].addr);
		if (!kept && e && !e->local && !strcmp(e->r.node, old[i].node))
			nodes_ipcache_forget(s, old[i].family, old[i].addr);
	}
}

int nodes_ipcache_crd_on_event(const struct fibril_event *ev, void *ud)
{
	struct nodes *s = ud;
	const struct fibril_k8s_event *k = ev->payload;
	if (s->stopping || !s->ipc_crd || ev->payload_len < sizeof(*k))
		return 0;
	const char *obj = FIBRIL_K8S_STR(k, object);
	const char *ns = FIBRIL_K8S_STR(k, namespace_), *name = FIBRIL_K8S_STR(k, name);
	struct nodes_ip_record r[2];
	unsigned n = 0;
	char why[NODES_WHY_LEN], what[400];
	snprintf(what, sizeof(what), "CiliumEndpoint %.64s/%.253s", ns ? ns : "?", name ? name : "?");
	if (k->type == FIBRIL_K8S_DELETED) {
		cep_forget(s, obj, NULL, 0);
		return 0;
	}
	if (cep_decode(obj, r, &n, why, sizeof(why))) {
		s->ipc.stats.bad_records++;
		fibril_warn(s->m, "ipcache %s: %s; ignored", what, why);
		return 0;
	}
	if (k->type == FIBRIL_K8S_UPDATED)
		cep_forget(s, FIBRIL_K8S_STR(k, old_object), r, n);
	for (unsigned i = 0; i < n; i++)
		nodes_ipcache_apply(s, &r[i], what);
	return 0;
}

/* ---- publish: this node's endpoints as CiliumEndpoints ---------------------------------------- */

/* the Pod's named container ports, as Cilium's named-ports */
static struct json_object *named_ports(struct json_object *pod)
{
	static const char *const p_cont[] = {"spec", "containers", NULL};
	struct json_object *arr = json_object_new_array(), *cs = get_path(pod, p_cont);
	size_t nc = cs && json_object_is_type(cs, json_type_array) ? json_object_array_length(cs) : 0;
	for (size_t i = 0; arr && i < nc; i++) {
		struct json_object *ports, *c = json_object_array_get_idx(cs, i);
		if (!json_object_is_type(c, json_type_object) ||
		    !json_object_object_get_ex(c, "ports", &ports) ||
		    !json_object_is_type(ports, json_type_array))
			continue;
		for (size_t j = 0; j < json_object_array_length(ports); j++) {
			struct json_object *p = json_object_array_get_idx(ports, j), *nm, *port, *proto;
			if (!json_object_is_type(p, json_type_object) ||
			    !json_object_object_get_ex(p, "name", &nm) ||
			    !json_object_is_type(nm, json_type_string) ||
			    !json_object_object_get_ex(p, "containerPort", &port) ||
			    !json_object_is_type(port, json_type_int))
				continue;
			struct json_object *np = json_object_new_object();
			json_object_object_add(np, "name", json_object_new_string(json_object_get_string(nm)));
			json_object_object_add(np, "port", json_object_new_int(json_object_get_int(port)));
			json_object_object_add(np, "protocol", json_object_new_string(
				json_object_object_get_ex(p, "protocol", &proto) &&
				json_object_is_type(proto, json_type_string) ? json_object_get_string(proto) : "TCP"));
			json_object_array_add(arr, np);
		}
	}
	return arr;
}

static char *cep_body(struct nodes *s, const struct fibril_endpoint_event *ev)
{
	char a[INET6_ADDRSTRLEN];
	const char *podjson = s->k8s->get(s->k8sctx, FIBRIL_K8S_PODS, ev->pod_namespace, ev->pod_name);
	struct json_object *pod = podjson ? json_tokener_parse(podjson) : NULL, *uid = NULL;
	static const char *const p_uid[] = {"metadata", "uid", NULL};
	struct json_object *doc = json_object_new_object(), *md = json_object_new_object();
	struct json_object *st = json_object_new_object(), *net = json_object_new_object();
	struct json_object *addr = json_object_new_object(), *addrs = json_object_new_array();
	struct json_object *idn = json_object_new_object();
	json_object_object_add(doc, "apiVersion", json_object_new_string("cilium.io/v2"));
	json_object_object_add(doc, "kind", json_object_new_string("CiliumEndpoint"));
	json_object_object_add(md, "name", json_object_new_string(ev->pod_name));
	json_object_object_add(md, "namespace", json_object_new_string(ev->pod_namespace));
	if ((uid = get_path(pod, p_uid)) && json_object_is_type(uid, json_type_string)) {
		struct json_object *refs = json_object_new_array(), *ref = json_object_new_object();
		json_object_object_add(ref, "apiVersion", json_object_new_string("v1"));
		json_object_object_add(ref, "kind", json_object_new_string("Pod"));
		json_object_object_add(ref, "name", json_object_new_string(ev->pod_name));
		json_object_object_add(ref, "uid", json_object_new_string(json_object_get_string(uid)));
		json_object_object_add(ref, "blockOwnerDeletion", json_object_new_boolean(1));
		json_object_array_add(refs, ref);
		json_object_object_add(md, "ownerReferences", refs);
	}
	json_object_object_add(doc, "metadata", md);
	json_object_object_add(st, "id", json_object_new_int(ev->id));
	json_object_object_add(idn, "id", json_object_new_int64(ev->identity));
	json_object_object_add(st, "identity", idn);
	if (ev->has_ipv4)
		json_object_object_add(addr, "ipv4", json_object_new_string(
			inet_ntop(AF_INET, &ev->ipv4, a, sizeof(a))));
	if (ev->has_ipv6)
		json_object_object_add(addr, "ipv6", json_object_new_string(
			inet_ntop(AF_INET6, &ev->ipv6, a, sizeof(a))));
	json_object_array_add(addrs, addr);
	json_object_object_add(net, "addressing", addrs);
	if (s->self.has_ipv4)
		json_object_object_add(net, "node", json_object_new_string(
			inet_ntop(AF_INET, &s->self.ipv4, a, sizeof(a))));
	else if (s->self.has_ipv6)
		json_object_object_add(net, "node", json_object_new_string(
			inet_ntop(AF_INET6, &s->self.ipv6, a, sizeof(a))));
	json_object_object_add(net, "node-name", json_object_new_string(s->self.name));
	json_object_object_add(st, "networking", net);
	json_object_object_add(st, "named-ports", named_ports(pod));
	json_object_object_add(st, "state", json_object_new_string("ready"));
	json_object_object_add(doc, "status", st);
	char *out = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
	json_object_put(doc);
	json_object_put(pod);
	return out;
}

static void write_free(struct cep_write *w)
{
	if (w->s->ipc.crd_inflight)
		w->s->ipc.crd_inflight--;
	free(w->body);
	free(w);
}

static void on_write(void *ud, int status, const char *reason, const char *body, int err,
		     const char *message);

static void write_send(struct cep_write *w, const char *method, const char *name, const char *body)
{
	struct nodes *s = w->s;
	int rc = s->k8s->request(s->k8sctx, method, FIBRIL_K8S_CILIUM_ENDPOINTS, w->ns, name, body,
				 on_write, w);
	if (rc) {
		s->ipc.stats.errors++;
		fibril_warn(s->m, "CiliumEndpoint %s/%s: %s: %s", w->ns, w->name, method, strerror(-rc));
		write_free(w);
	}
}

/* the live object's resourceVersion into our body: PUT it */
static void put_at(struct cep_write *w, const char *live)
{
	struct json_object *o = live ? json_tokener_parse(live) : NULL, *rv = NULL;
	static const char *const p_rv[] = {"metadata", "resourceVersion", NULL};
	struct json_object *doc = json_tokener_parse(w->body), *md;
	rv = get_path(o, p_rv);
	if (!rv || !doc || !json_object_object_get_ex(doc, "metadata", &md)) {
		w->s->ipc.stats.errors++;
		fibril_warn(w->s->m, "CiliumEndpoint %s/%s: the live object has no resourceVersion",
			    w->ns, w->name);
		json_object_put(o);
		json_object_put(doc);
		write_free(w);
		return;
	}
	json_object_object_add(md, "resourceVersion", json_object_get(rv));
	char *text = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	json_object_put(doc);
	if (text)
		write_send(w, "PUT", w->name, text);
	else
		write_free(w);
	free(text);
}

static void on_write(void *ud, int status, const char *reason, const char *body, int err,
		     const char *message)
{
	struct cep_write *w = ud;
	struct nodes *s = w->s;
	if (s->stopping) {
		write_free(w);
		return;
	}
	if (w->reading) {
		w->reading = false;
		if (status == 200) {
			put_at(w, body);
			return;
		}
	}
	if (status >= 200 && status < 300) {
		if (w->body)
			s->ipc.stats.published++;
		write_free(w);
		return;
	}
	if (!w->body) { /* a delete: gone already is gone */
		if (status != 404) {
			s->ipc.stats.errors++;
			fibril_warn(s->m, "CiliumEndpoint %s/%s: delete: %d %s", w->ns, w->name, status,
				    status ? reason : message);
		}
		write_free(w);
		return;
	}
	if (status == 404 && body && strstr(body, "the server could not find the requested resource")) {
		s->ipc.stats.errors++;
		fibril_warn(s->m, "CiliumEndpoint %s/%s: not published: the API server does not serve "
			    "ciliumendpoints.cilium.io (its CustomResourceDefinition is not installed: "
			    "kubectl apply -f deploy/kubernetes/crds.yaml)", w->ns, w->name);
		write_free(w);
		return;
	}
	/* AlreadyExists (created before: a restart, an update) or Conflict
	 * (a stale resourceVersion): read it again and PUT at its version;
	 * a GET's answer carries the live object */
	if (status == 409 && ++w->tries <= CEP_TRIES) {
		w->reading = true;
		write_send(w, "GET", w->name, NULL);
		return;
	}
	s->ipc.stats.errors++;
	fibril_warn(s->m, "CiliumEndpoint %s/%s: %d %s%s%s", w->ns, w->name, status,
		    status ? (reason ? reason : "") : "", status ? "" : message, err ? " (no answer)" : "");
	write_free(w);
}

void nodes_ipcache_crd_endpoint(struct nodes *s, const struct fibril_endpoint_event *ev,
				bool deleted)
{
	if (!ev->pod_name[0] || !ev->pod_namespace[0])
		return; /* not a pod's: nothing to name the object by */
	struct cep_write *w = calloc(1, sizeof(*w));
	if (!w)
		return;
	w->s = s;
	s->ipc.crd_inflight++;
	snprintf(w->ns, sizeof(w->ns), "%s", ev->pod_namespace);
	snprintf(w->name, sizeof(w->name), "%s", ev->pod_name);
	if (deleted) {
		s->ipc.stats.unpublished++;
		write_send(w, "DELETE", w->name, NULL);
		return;
	}
	if (!(w->body = cep_body(s, ev))) {
		write_free(w);
		return;
	}
	write_send(w, "POST", NULL, w->body);
}

/* ---- lifecycle ---------------------------------------------------------------------------------- */

bool nodes_ipcache_crd_wanted(struct nodes *s, char *why, size_t len)
{
	const char *src = fibril_config_string(s->m, "ipcache-source");
	bool can = s->k8s && FIBRIL_SERVICE_HAS(s->k8s, request) && s->k8s->request;
	if (!src || !strcmp(src, "auto"))
		return can && !s->kv;
	if (strcmp(src, "crd"))
		return false;
	if (!can)
		snprintf(why, len, "ipcache-source = crd: no k8s module with writes (k8s interface 2, "
			 "SDK 1.11) is loaded");
	return true;
}

int nodes_ipcache_crd_start(struct nodes *s, char *why, size_t len)
{
	int rc = s->k8s->watch_resource(s->k8sctx, FIBRIL_K8S_CILIUM_ENDPOINTS);
	if (rc == 0)
		rc = s->k8s->watch_resource(s->k8sctx, FIBRIL_K8S_PODS); /* owners, named ports */
	if (rc) {
		snprintf(why, len, "ipcache-source = crd: cannot watch %s: %s",
			 FIBRIL_K8S_CILIUM_ENDPOINTS, strerror(-rc));
		return rc;
	}
	s->ipc_crd = true;
	if (s->self.has_ipv4)
		nodes_ipcache_host(s, 4, &s->self.ipv4);
	if (s->self.has_ipv6)
		nodes_ipcache_host(s, 6, &s->self.ipv6);
	fibril_info(s->m, "the ipcache comes from CiliumEndpoint objects (the Kubernetes API)");
	return 0;
}
