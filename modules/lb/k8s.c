/* modules/lb/k8s.c - services from Kubernetes: the lb module follows the
 * k8s module's informers for v1 Services and discovery.k8s.io/v1
 * EndpointSlices (bus topics k8s.services, k8s.endpointslices) and turns
 * each Service port into frontends - every clusterIP, externalIP and
 * load-balancer ingress IP, and NodePorts on [lb] node-addresses (by
 * default the node's own addresses; only those of the Service's IP
 * families: spec.ipFamilies, else its clusterIPs') - whose
 * backends are the endpoints of the Service's slices for that port (by the
 * port's name: a targetPort given by name is resolved per endpoint in the
 * slice, as kube-proxy reads it). States: ready -> active; serving and
 * terminating -> terminating; else not-ready. internalTrafficPolicy Local
 * keeps only this node's endpoints for the cluster frontends,
 * externalTrafficPolicy Local for the others. A bad Service (an invalid
 * address or port) is a logged skip that touches nothing else; an
 * EndpointSlice whose Service is not known yet is held (no skip), and used
 * once its Service arrives. Each change reprograms only that Service's frontends,
 * keeping their IDs (the table's frontend -> ID). An endpoint on a
 * loopback, link-local or the node's own address is no backend (as
 * kube-proxy): taken out of its slice, counted, logged once per slice.
 * spec.loadBalancerSourceRanges go with the load-balancer frontends. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

#include "grow.h"
#include "lb_mod.h"

#define K8S_NODE_ADDRS_MAX 32

struct fe_key {
	struct lb_addr addr;
	uint16_t port;
	uint8_t proto;
};

struct k8s_svc {
	char key[LB_NAME_MAX + 1];   /* namespace/name */
	char *svc_text;              /* its projection as JSON text; NULL: not seen (slices only) */
	struct json_object *slices;  /* slice name -> its projection as a JSON string */
	struct json_object *svc;     /* while it is synced: svc_text parsed */
	struct json_object *parsed;  /* while it is synced: slice name -> object */
	struct fe_key *fes;          /* frontends programmed */
	size_t nfes;
	bool invalid;                /* skipped: its frontends were left as they were */
};

struct lb_k8s {
	struct lb *lb;
	struct fibril_module *m;
	const struct fibril_k8s_ops *ops;
	void *ctx;
	struct k8s_svc *svcs;
	size_t n, cap;
	struct lb_k8s_index index;   /* svcs by key */
	struct lb_addr node_addrs[K8S_NODE_ADDRS_MAX]; /* a NodePort's frontend addresses */
	size_t nnode_addrs;
	char node[256];
	char **refused_logged;       /* "ns/name" of the slices whose refusals were logged */
	size_t nrefused_logged, refused_cap;
	uint64_t skipped;
	bool synced;                 /* the first list is applied, the stale swept */
	bool applying;               /* on_synced is applying the caches */
	uint64_t stale_removed;
	struct lb_k8s_addr_cache mine; /* the node's addresses, read at most once a second */
};

static const char *svc_key_at(const void *ud, size_t i)
{
	return ((const struct lb_k8s *)ud)->svcs[i].key;
}

static struct k8s_svc *find(struct lb_k8s *k, const char *key, bool create)
{
	size_t i = lb_k8s_index_get(&k->index, key, svc_key_at, k);
	if (i != SIZE_MAX)
		return &k->svcs[i];
	if (!create || strlen(key) > LB_NAME_MAX)
		return NULL;
	struct k8s_svc *v = mod_grow(k->svcs, k->n, &k->cap, sizeof(*v), 64);
	if (!v)
		return NULL;
	k->svcs = v;
	struct k8s_svc *s = &k->svcs[k->n];
	memset(s, 0, sizeof(*s));
	snprintf(s->key, sizeof(s->key), "%s", key);
	if (lb_k8s_index_add(&k->index, s->key, k->n, svc_key_at, k) < 0)
		return NULL;
	k->n++;
	s->slices = json_object_new_object();
	return s;
}

static struct json_object *path(struct json_object *o, const char *a, const char *b)
{
	struct json_object *v = NULL;
	if (!o || !json_object_object_get_ex(o, a, &v))
		return NULL;
	if (b && (!v || !json_object_object_get_ex(v, b, &v)))
		return NULL;
	return v;
}

static const char *str(struct json_object *o, const char *k)
{
	struct json_object *v = path(o, k, NULL);
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static uint8_t proto_of(const char *p)
{
	if (!p || !strcmp(p, "TCP"))
		return IPPROTO_TCP;
	if (!strcmp(p, "UDP"))
		return IPPROTO_UDP;
	if (!strcmp(p, "SCTP"))
		return IPPROTO_SCTP;
	return 0;
}

static bool ip_of(const char *s, struct lb_addr *a)
{
	char buf[80];
	if (!s || strlen(s) > 60)
		return false;
	if (strchr(s, ':'))
		snprintf(buf, sizeof(buf), "[%s]:1", s);
	else
		snprintf(buf, sizeof(buf), "%s:1", s);
	uint16_t p;
	return lb_parse_addrport(buf, a, &p) == 0;
}

static bool is_true(struct json_object *o, const char *k, bool dflt)
{
	struct json_object *v = path(o, k, NULL);
	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* the backends of one service port from every slice of the family */
static int backends_for(struct lb_k8s *k, struct k8s_svc *s, const char *port_name,
			uint8_t proto, bool v4, bool local_only, struct lb_svc *out)
{
	json_object_object_foreach(s->parsed, sname, slice) {
		(void)sname;
		const char *at = str(slice, "addressType");
		if (!at || strcmp(at, v4 ? "IPv4" : "IPv6"))
			continue;
		struct json_object *ports = path(slice, "ports", NULL), *eps = path(slice, "endpoints", NULL);
		if (!ports || !eps || !json_object_is_type(ports, json_type_array) ||
		    !json_object_is_type(eps, json_type_array))
			continue;
		int64_t num = -1;
		for (size_t p = 0; p < json_object_array_length(ports); p++) {
			struct json_object *po = json_object_array_get_idx(ports, p);
			const char *n = str(po, "name");
			if (strcmp(n ? n : "", port_name) || proto_of(str(po, "protocol")) != proto)
				continue;
			struct json_object *pn = path(po, "port", NULL);
			if (pn && json_object_is_type(pn, json_type_int))
				num = json_object_get_int64(pn);
		}
		if (num < 1 || num > 65535)
			continue;
		for (size_t e = 0; e < json_object_array_length(eps); e++) {
			struct json_object *ep = json_object_array_get_idx(eps, e);
			struct json_object *cond = path(ep, "conditions", NULL);
			bool ready = is_true(cond, "ready", true);
			bool serving = is_true(cond, "serving", ready);
			bool terminating = is_true(cond, "terminating", false);
			const char *node = str(ep, "nodeName");
			if (local_only && (!node || strcmp(node, k->node)))
				continue;
			uint8_t state = ready && !terminating ? LB_BE_ACTIVE
					: serving && terminating ? LB_BE_TERMINATING
								 : LB_BE_NOT_READY;
			struct json_object *addrs = path(ep, "addresses", NULL);
			for (size_t a = 0; addrs && json_object_is_type(addrs, json_type_array) &&
					   a < json_object_array_length(addrs);
			     a++) {
				struct lb_addr ad;
				if (!ip_of(json_object_get_string(json_object_array_get_idx(addrs, a)), &ad) ||
				    lb_addr_is_v4(&ad) != v4)
					continue;
				bool dup = false;
				for (size_t j = 0; j < out->nbe && !dup; j++)
					dup = !memcmp(&out->be[j].addr, &ad, sizeof(ad)) &&
					      out->be[j].port == (uint16_t)num;
				if (dup || out->nbe >= LB_BACKENDS_PER_SVC_MAX)
					continue;
				struct lb_be_spec *nb = realloc(out->be, (out->nbe + 1) * sizeof(*nb));
				if (!nb)
					return -ENOMEM;
				out->be = nb;
				memset(&nb[out->nbe], 0, sizeof(*nb));
				nb[out->nbe].addr = ad;
				nb[out->nbe].port = (uint16_t)num;
				nb[out->nbe].state = state;
				out->nbe++;
			}
		}
	}
	return 0;
}

struct fe_list {
	struct fe_key *v;
	size_t n;
};

static void remove_gone(struct lb_k8s *k, struct k8s_svc *s, const struct fe_list *keep)
{
	for (size_t i = 0; i < s->nfes; i++) {
		bool kept = false;
		for (size_t j = 0; keep && j < keep->n && !kept; j++)
			kept = !memcmp(&s->fes[i].addr, &keep->v[j].addr, sizeof(struct lb_addr)) &&
			       s->fes[i].port == keep->v[j].port && s->fes[i].proto == keep->v[j].proto;
		if (kept)
			continue;
		struct lb_table *t = lb_table_of(k->lb);
		struct lb_svc *cur = t ? lb_table_find(t, &s->fes[i].addr, s->fes[i].port,
						       s->fes[i].proto)
				       : NULL;
		char err[256];
		if (cur && lb_delete(k->lb, cur->id, err, sizeof(err)) < 0)
			fibril_warn(k->m, "service %s: cannot remove a frontend: %s", s->key, err);
	}
}

/* spec.loadBalancerSourceRanges (checked by svc_valid) into sv */
static int source_ranges(struct json_object *spec, struct lb_svc *sv)
{
	struct json_object *r = path(spec, "loadBalancerSourceRanges", NULL);
	size_t n = r && json_object_is_type(r, json_type_array) ? json_object_array_length(r) : 0;
	if (!n)
		return 0;
	if (!(sv->ranges = calloc(n, sizeof(*sv->ranges))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (lb_parse_cidr(json_object_get_string(json_object_array_get_idx(r, i)),
				  &sv->ranges[sv->nranges]) == 0)
			sv->nranges++;
	return 0;
}

static int add_frontend(struct lb_k8s *k, struct k8s_svc *s, struct fe_list *fl,
			struct json_object *port, const struct lb_addr *ip, uint16_t fport,
			uint8_t type, bool local)
{
	struct json_object *spec = path(s->svc, "spec", NULL);
	const char *pname = str(port, "name");
	uint8_t proto = proto_of(str(port, "protocol"));
	struct lb_svc *sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	sv->addr = *ip;
	sv->port = fport;
	sv->proto = proto;
	sv->type = type;
	sv->source = LB_SRC_K8S;
	const char *aff = str(spec, "sessionAffinity");
	sv->affinity = aff && !strcmp(aff, "ClientIP");
	struct json_object *to = path(path(spec, "sessionAffinityConfig", "clientIP"), "timeoutSeconds", NULL);
	sv->affinity_timeout = to && json_object_is_type(to, json_type_int) &&
					       json_object_get_int64(to) > 0 &&
					       json_object_get_int64(to) <= LB_AFFINITY_TIMEOUT_MAX
				       ? (uint32_t)json_object_get_int64(to)
				       : LB_AFFINITY_TIMEOUT_DEFAULT;
	const char *etp = str(spec, "externalTrafficPolicy"), *itp = str(spec, "internalTrafficPolicy");
	sv->ext_local = etp && !strcmp(etp, "Local");
	sv->int_local = itp && !strcmp(itp, "Local");
	snprintf(sv->name, sizeof(sv->name), "%.190s%s%.63s", s->key, pname && *pname ? ":" : "",
		 pname ? pname : "");
	int rc = backends_for(k, s, pname ? pname : "", proto, lb_addr_is_v4(ip), local, sv);
	if (!rc && type == LB_SVC_LOAD_BALANCER)
		rc = source_ranges(spec, sv);
	char err[512];
	uint16_t id;
	if (!rc)
		rc = lb_upsert(k->lb, &sv, &id, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "out of memory");
	lb_svc_free(sv);
	if (rc < 0) {
		k->skipped++;
		fibril_warn(k->m, "service %s: frontend skipped: %s", s->key, err);
		return 0;
	}
	struct fe_key *nv = realloc(fl->v, (fl->n + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	fl->v = nv;
	nv[fl->n++] = (struct fe_key){.addr = *ip, .port = fport, .proto = proto};
	return 0;
}


static void sync_parsed(struct lb_k8s *k, struct k8s_svc *s);

/* Programs Service s from its projections (parsed for this sync only:
 * between syncs, they are kept as JSON text, a tenth of the memory). */
static void sync_service(struct lb_k8s *k, struct k8s_svc *s)
{
	if (!k->synced && !k->applying)
		return;
	s->svc = s->svc_text ? json_tokener_parse(s->svc_text) : NULL;
	s->parsed = lb_k8s_slices_parse(s->slices);
	sync_parsed(k, s);
	json_object_put(s->svc);
	json_object_put(s->parsed);
	s->svc = s->parsed = NULL;
}

static void sync_parsed(struct lb_k8s *k, struct k8s_svc *s)
{
	struct fe_list fl = {0};
	/* Nothing is programmed before the first complete list of both
	 * Services and EndpointSlices (Cilium starts its service handler only
	 * once the caches are synced): a Service listed before its slices
	 * would replace its restored backends with none and refuse every
	 * connection (and renumber the backends) until they come. The events
	 * are recorded meanwhile; on_synced programs them all. */
	if (!k->synced && !k->applying)
		return;
	if (!s->svc) {
		remove_gone(k, s, NULL);
		free(s->fes);
		s->fes = NULL;
		s->nfes = 0;
		return;
	}
	struct json_object *spec = path(s->svc, "spec", NULL);
	char why[200];
	s->invalid = !lb_k8s_svc_valid(spec, why, sizeof(why));
	if (s->invalid) {
		k->skipped++;
		fibril_warn(k->m, "service %s skipped: %s (its frontends are left as they were)",
			    s->key, why);
		return;
	}
	const char *type = str(spec, "type");
	bool nodeport = type && (!strcmp(type, "NodePort") || !strcmp(type, "LoadBalancer"));
	bool lbtype = type && !strcmp(type, "LoadBalancer");
	bool itp_local = false, etp_local = false;
	const char *itp = str(spec, "internalTrafficPolicy"), *etp = str(spec, "externalTrafficPolicy");
	itp_local = itp && !strcmp(itp, "Local");
	etp_local = etp && !strcmp(etp, "Local");
	struct json_object *ports = path(spec, "ports", NULL);
	struct json_object *cips = path(spec, "clusterIPs", NULL);
	struct json_object *eips = path(spec, "externalIPs", NULL);
	struct json_object *ingress = path(path(s->svc, "status", "loadBalancer"), "ingress", NULL);
	if (!cips) { /* older objects: clusterIP only */
		const char *cip = str(spec, "clusterIP");
		cips = json_object_new_array();
		if (cip)
			json_object_array_add(cips, json_object_new_string(cip));
		json_object_object_add(spec, "clusterIPs", cips);
	}
	bool want4, want6;
	lb_k8s_svc_families(spec, cips, &want4, &want6);
	for (size_t p = 0; p < json_object_array_length(ports); p++) {
		struct json_object *port = json_object_array_get_idx(ports, p);
		uint16_t pnum = (uint16_t)json_object_get_int64(path(port, "port", NULL));
		struct lb_addr a;
		for (size_t i = 0; json_object_is_type(cips, json_type_array) &&
				   i < json_object_array_length(cips);
		     i++)
			if (ip_of(json_object_get_string(json_object_array_get_idx(cips, i)), &a))
				add_frontend(k, s, &fl, port, &a, pnum, LB_SVC_CLUSTER_IP, itp_local);
		for (size_t i = 0; eips && json_object_is_type(eips, json_type_array) &&
				   i < json_object_array_length(eips);
		     i++)
			if (ip_of(json_object_get_string(json_object_array_get_idx(eips, i)), &a))
				add_frontend(k, s, &fl, port, &a, pnum, LB_SVC_EXTERNAL_IP, etp_local);
		for (size_t i = 0; lbtype && ingress && json_object_is_type(ingress, json_type_array) &&
				   i < json_object_array_length(ingress);
		     i++)
			if (ip_of(str(json_object_array_get_idx(ingress, i), "ip"), &a))
				add_frontend(k, s, &fl, port, &a, pnum, LB_SVC_LOAD_BALANCER, etp_local);
		struct json_object *np = path(port, "nodePort", NULL);
		int64_t npv = np && json_object_is_type(np, json_type_int) ? json_object_get_int64(np) : 0;
		if (nodeport && npv > 0 && npv <= 65535)
			for (size_t i = 0; i < k->nnode_addrs; i++)
				if (lb_addr_is_v4(&k->node_addrs[i]) ? want4 : want6)
						add_frontend(k, s, &fl, port, &k->node_addrs[i],
						     (uint16_t)npv, LB_SVC_NODE_PORT, etp_local);
	}
	remove_gone(k, s, &fl);
	free(s->fes);
	s->fes = fl.v;
	s->nfes = fl.n;
}

static char *key_of(const char *ns, const char *name)
{
	size_t n = strlen(ns) + strlen(name) + 2;
	char *key = malloc(n);
	if (key)
		snprintf(key, n, "%s/%s", ns, name);
	return key;
}

/* A Service added/updated (json) or deleted (json NULL). */
static void apply_service(struct lb_k8s *k, const char *ns, const char *name, const char *json)
{
	char *key = key_of(ns ? ns : "", name ? name : "");
	struct k8s_svc *s = key ? find(k, key, json != NULL) : NULL;
	free(key);
	if (!s)
		return;
	char *text = NULL;
	if (json) {
		struct json_object *o = lb_k8s_project_service(json_tokener_parse(json));
		if (!o || !path(o, "spec", NULL)) {
			k->skipped++;
			fibril_warn(k->m, "service %s skipped: the object has no spec", s->key);
			json_object_put(o);
			return;
		}
		text = lb_k8s_text_of(o);
	}
	/* what lb reads of it is unchanged (a resync, a status or metadata
	 * change): nothing to program again */
	bool same = text && s->svc_text && !strcmp(text, s->svc_text) && k->synced && !k->applying;
	free(s->svc_text);
	s->svc_text = text;
	if (same)
		return;
	sync_service(k, s);
}

/* Has the refusal in slice key been logged (and note it now)? */
static bool refusal_logged(struct lb_k8s *k, const char *key)
{
	for (size_t i = 0; i < k->nrefused_logged; i++)
		if (!strcmp(k->refused_logged[i], key))
			return true;
	char **v = mod_grow(k->refused_logged, k->nrefused_logged, &k->refused_cap, sizeof(*v), 16);
	char *dup = v ? strdup(key) : NULL;
	if (v)
		k->refused_logged = v;
	if (dup)
		k->refused_logged[k->nrefused_logged++] = dup;
	return false;
}

/* Takes out of the slice o every endpoint address that must not be a
 * backend, as kube-proxy refuses them: loopback, link-local (the cloud
 * metadata service), the node's own addresses. Each is counted
 * (fibril_lb_backends_refused_total{reason}); the first time a slice has
 * some, they are logged with its name. */
static void refuse_backends(struct lb_k8s *k, const char *ns, const char *name,
			    struct json_object *o)
{
	struct json_object *eps = path(o, "endpoints", NULL);
	if (!eps || !json_object_is_type(eps, json_type_array))
		return;
	struct lb_addr *mine = NULL;
	size_t nmine = 0, nref = 0;
	char list[256] = "";
	size_t off = 0;
	if (lb_k8s_node_addrs_cached(k->m, &k->mine, &mine, &nmine) < 0)
		return;
	for (size_t e = 0; e < json_object_array_length(eps); e++) {
		struct json_object *addrs = path(json_object_array_get_idx(eps, e), "addresses", NULL);
		if (!addrs || !json_object_is_type(addrs, json_type_array))
			continue;
		for (size_t a = json_object_array_length(addrs); a-- > 0;) {
			const char *txt = json_object_get_string(json_object_array_get_idx(addrs, a));
			struct lb_addr ad;
			const char *why = ip_of(txt, &ad) ? lb_backend_refusal(&ad, mine, nmine) : NULL;
			if (!why)
				continue;
			lb_count_refused(k->lb, why);
			if (off < sizeof(list)) {
				int w = snprintf(list + off, sizeof(list) - off, "%s%s (%s)", nref ? ", " : "",
						 txt, why);
				off += w > 0 ? (size_t)w : 0;
			}
			nref++;
			json_object_array_del_idx(addrs, a, 1);
		}
	}
	char key[LB_NAME_MAX + 1];
	snprintf(key, sizeof(key), "%.120s/%.120s", ns ? ns : "", name ? name : "");
	if (nref && !refusal_logged(k, key))
		fibril_warn(k->m, "endpointslice %s: %zu endpoint addresses refused as backends: %s",
			    key, nref, list);
}

static void apply_slice(struct lb_k8s *k, const char *ns, const char *name, const char *json,
			bool deleted)
{
	struct json_object *o = json ? json_tokener_parse(json) : NULL;
	struct json_object *lbl = path(o, "metadata", "labels");
	const char *svcname = str(lbl, "kubernetes.io/service-name");
	if (!svcname) {
		k->skipped++;
		fibril_info(k->m, "endpointslice %s/%s skipped: no kubernetes.io/service-name label",
			    ns ? ns : "", name ? name : "");
		json_object_put(o);
		return;
	}
	char *key = key_of(ns ? ns : "", svcname);
	struct k8s_svc *s = key ? find(k, key, !deleted) : NULL;
	free(key);
	if (!s) {
		json_object_put(o);
		return;
	}
	if (deleted) {
		json_object_object_del(s->slices, name ? name : "");
		json_object_put(o);
	} else {
		refuse_backends(k, ns, name, o);
		char *text = lb_k8s_text_of(lb_k8s_project_slice(o));
		struct json_object *had = NULL;
		bool same = text && k->synced && !k->applying &&
			    json_object_object_get_ex(s->slices, name ? name : "", &had) &&
			    !strcmp(json_object_get_string(had), text);
		if (text && !same)
			json_object_object_add(s->slices, name ? name : "", json_object_new_string(text));
		free(text);
		if (same) /* what lb reads of it is unchanged */
			return;
	}
	if (!s->svc_text) { /* held, not skipped: applied when its Service arrives */
		if (!deleted)
			fibril_info(k->m, "endpointslice %s/%s held: service %s is not known yet "
					  "(applied when it arrives)", ns ? ns : "", name ? name : "", s->key);
		return;
	}
	sync_service(k, s);
}

static int on_service(const struct fibril_event *ev, void *ud)
{
	struct lb_k8s *k = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || !k->ops || !lb_table_of(k->lb))
		return 0;
	apply_service(k, FIBRIL_K8S_STR(e, namespace_), FIBRIL_K8S_STR(e, name),
		      e->type == FIBRIL_K8S_DELETED ? NULL : FIBRIL_K8S_STR(e, object));
	return 0;
}

static int on_slice(const struct fibril_event *ev, void *ud)
{
	struct lb_k8s *k = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || !k->ops || !lb_table_of(k->lb))
		return 0;
	apply_slice(k, FIBRIL_K8S_STR(e, namespace_), FIBRIL_K8S_STR(e, name),
		    FIBRIL_K8S_STR(e, object), e->type == FIBRIL_K8S_DELETED);
	return 0;
}

/* what the k8s module's caches already hold at our start (events published
 * before it were not ours to program) */
struct cached {
	struct lb_k8s *k;
	bool slices;
};

static int on_cached(const char *json, void *ud)
{
	struct cached *c = ud;
	struct json_object *o = json_tokener_parse(json);
	const char *ns = str(path(o, "metadata", NULL), "namespace");
	const char *name = str(path(o, "metadata", NULL), "name");
	if (name) {
		if (c->slices)
			apply_slice(c->k, ns, name, json, false);
		else
			apply_service(c->k, ns, name, json);
	}
	json_object_put(o);
	return 0;
}

/* ---- after the first list: Cilium's SyncWithK8sFinished ------------------------------- */

/* Is this restored frontend one of a Service Kubernetes still has but that
 * is skipped as invalid (whose frontends are left as they were)? */
static bool of_invalid_service(struct lb_k8s *k, const struct lb_svc *s)
{
	char key[LB_NAME_MAX + 1];
	snprintf(key, sizeof(key), "%s", s->name);
	char *colon = strchr(key, ':');
	if (colon)
		*colon = '\0';
	struct k8s_svc *ks = find(k, key, false);
	return ks && ks->svc_text && ks->invalid;
}

static void apply_cache(struct lb_k8s *k)
{
	struct cached c = {.k = k, .slices = true};
	k->ops->list(k->ctx, FIBRIL_K8S_ENDPOINTSLICES, on_cached, &c);
	c.slices = false;
	k->ops->list(k->ctx, FIBRIL_K8S_SERVICES, on_cached, &c);
}

static void wait_for_sync(struct lb_k8s *k);

/* The informers' first lists are done: the caches are what Kubernetes has.
 * Their events may still be queued on the bus, so the caches are applied
 * here (the same IDs: upserts by frontend), then every frontend restored
 * from the pins as Kubernetes' that no Service programmed is removed, with
 * the backends only it used. API services and frontends of unknown origin
 * stay. */
static void on_synced(void *ud, int err, const char *pending)
{
	struct lb_k8s *k = ud;
	if (!k->ops || err == -ECANCELED)
		return;
	if (err < 0) {
		fibril_warn(k->m, "Services and EndpointSlices not synced yet (%s): restored "
				  "frontends are kept until they are", pending ? pending : "?");
		wait_for_sync(k);
		return;
	}
	struct lb_table *t = lb_table_of(k->lb);
	if (!t)
		return;
	k->applying = true;
	apply_cache(k);
	k->applying = false;
	size_t removed = 0, kept = 0;
	for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++) {
		struct lb_svc *s = t->svc[id];
		if (!s || !s->restored || s->source != LB_SRC_K8S)
			continue;
		if (of_invalid_service(k, s)) {
			kept++;
			continue;
		}
		char fe[80], name[LB_NAME_MAX + 1], e[256];
		lb_format_addrport(&s->addr, s->port, fe, sizeof(fe));
		snprintf(name, sizeof(name), "%s", s->name);
		if (lb_delete(k->lb, (uint16_t)id, e, sizeof(e)) < 0) {
			fibril_warn(k->m, "service %u (%s, %s): cannot remove it: %s", id, fe, name, e);
			continue;
		}
		fibril_info(k->m, "service %u (%s, %s) removed: Kubernetes no longer has it", id, fe,
			    name);
		removed++;
	}
	k->stale_removed += removed;
	k->synced = true;
	fibril_info(k->m, "Services and EndpointSlices synced: %zu known, %zu restored frontends "
			  "removed, %zu kept (their Service is invalid)", k->n, removed, kept);
}

static void wait_for_sync(struct lb_k8s *k)
{
	static const char *const res[] = {FIBRIL_K8S_SERVICES, FIBRIL_K8S_ENDPOINTSLICES, NULL};
	int rc = k->ops->wait_synced(k->ctx, res, 120000, on_synced, k);
	if (rc < 0)
		fibril_warn(k->m, "cannot wait for the Services' first list: %s (restored frontends "
				  "are kept)", strerror(-rc));
}

bool lb_k8s_synced(const struct lb_k8s *k)
{
	return k && k->synced;
}

uint64_t lb_k8s_stale_removed(const struct lb_k8s *k)
{
	return k ? k->stale_removed : 0;
}

int lb_k8s_init(struct lb *lb, struct lb_k8s **out)
{
	struct fibril_module *m = lb_module_of(lb);
	struct lb_k8s *k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->lb = lb;
	k->m = m;
	*out = k;
	if (!fibril_bus_subscribe(m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_SERVICES, 1, on_service, k) ||
	    !fibril_bus_subscribe(m, FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_ENDPOINTSLICES, 1, on_slice, k)) {
		fibril_module_set_error(m, "cannot subscribe to the k8s topics");
		return -ENOMEM;
	}
	return 0;
}

int lb_k8s_start(struct lb_k8s *k, const char *node_addrs)
{
	k->nnode_addrs = 0;
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", node_addrs ? node_addrs : "");
	for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save))
		if (k->nnode_addrs < K8S_NODE_ADDRS_MAX && ip_of(w, &k->node_addrs[k->nnode_addrs]))
			k->nnode_addrs++;
	if (!k->nnode_addrs)
		k->nnode_addrs = lb_k8s_default_node_addrs(k->m, k->node_addrs, K8S_NODE_ADDRS_MAX);
	errno = 0;
	k->ops = (const struct fibril_k8s_ops *)fibril_service_lookup(k->m, FIBRIL_K8S_CAPABILITY, 1,
								       &k->ctx);
	if (!k->ops)
		return 0; /* no Kubernetes: services come from the API only */
	snprintf(k->node, sizeof(k->node), "%s", k->ops->node_name(k->ctx));
	int rc;
	if ((rc = k->ops->watch_resource(k->ctx, FIBRIL_K8S_SERVICES)) < 0 ||
	    (rc = k->ops->watch_resource(k->ctx, FIBRIL_K8S_ENDPOINTSLICES)) < 0) {
		fibril_module_set_error(k->m, "cannot watch services and endpointslices: %s",
					strerror(-rc));
		return rc;
	}
	if (!k->ops->list || !k->ops->wait_synced) {
		fibril_warn(k->m, "the '%s' provider cannot list or wait: no Services from Kubernetes",
			    FIBRIL_K8S_CAPABILITY);
		k->ops = NULL;
		return 0;
	}
	apply_cache(k);
	wait_for_sync(k);
	fibril_info(k->m, "following Services and EndpointSlices of node %s (%zu known)", k->node,
		    k->n);
	return 0;
}

void lb_k8s_stop(struct lb_k8s *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k->n; i++) {
		free(k->svcs[i].svc_text);
		json_object_put(k->svcs[i].slices);
		free(k->svcs[i].fes);
	}
	for (size_t i = 0; i < k->nrefused_logged; i++)
		free(k->refused_logged[i]);
	free(k->refused_logged);
	k->refused_logged = NULL;
	k->nrefused_logged = k->refused_cap = 0;
	free(k->svcs);
	k->svcs = NULL;
	k->n = k->cap = 0;
	lb_k8s_index_free(&k->index);
	free(k->mine.v);
	memset(&k->mine, 0, sizeof(k->mine));
	k->ops = NULL;
	k->synced = false;
}

void lb_k8s_free(struct lb_k8s *k)
{
	lb_k8s_stop(k);
	free(k);
}

uint64_t lb_k8s_skipped(const struct lb_k8s *k)
{
	return k ? k->skipped : 0;
}

size_t lb_k8s_held_slices(const struct lb_k8s *k)
{
	size_t n = 0;
	for (size_t i = 0; k && i < k->n; i++)
		if (!k->svcs[i].svc_text && k->svcs[i].slices)
			n += (size_t)json_object_object_length(k->svcs[i].slices);
	return n;
}
