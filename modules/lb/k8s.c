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
 * spec.loadBalancerSourceRanges go with the load-balancer frontends.
 * What is kept of each object is its projection (k8s_proj.h: fixed
 * records, parsed once); an object whose text was already projected (the
 * informer's cache listed at the sync, then its queued event) is not
 * parsed again, and one whose projection is unchanged programs nothing. */
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

#include "grow.h"
#include "k8s_proj.h"
#include "lb_mod.h"

#define K8S_NODE_ADDRS_MAX 32

struct fe_key {
	struct lb_addr addr;
	uint16_t port;
	uint8_t proto;
};

struct k8s_svc {
	char *key;                      /* namespace/name */
	struct k8s_svc_proj *svc;       /* NULL: not seen (slices only), or deleted */
	struct k8s_slice_proj **slices; /* its EndpointSlices */
	size_t nslices, slices_cap;
	struct fe_key *fes;             /* frontends programmed */
	size_t nfes;
};

struct lb_k8s {
	struct lb *lb;
	struct fibril_module *m;
	const struct fibril_k8s_ops *ops;
	void *ctx;
	struct k8s_svc *svcs;
	size_t n, cap;
	struct lb_k8s_index index;   /* svcs by key */
	struct k8s_hash_set svc_texts, slice_texts; /* the texts the projections came from */
	struct lb_addr node_addrs[K8S_NODE_ADDRS_MAX]; /* a NodePort's frontend addresses */
	size_t nnode_addrs;
	char node[256];
	char **refused_logged;       /* "ns/name" of the slices whose refusals were logged */
	size_t nrefused_logged, refused_cap;
	uint64_t skipped;
	bool synced;                 /* the first list is applied, the stale swept */
	bool applying;               /* on_synced is programming every Service */
	uint64_t stale_removed;
	uint64_t parsed;             /* objects' texts parsed */
	uint64_t scanned;            /* of which read in place (k8s_scan.c) */
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
	if (!(s->key = strdup(key)))
		return NULL;
	if (lb_k8s_index_add(&k->index, s->key, k->n, svc_key_at, k) < 0) {
		free(s->key);
		s->key = NULL;
		return NULL;
	}
	k->n++;
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

/* the backends of one service port from every slice of the family */
static int backends_for(struct k8s_svc *s, const char *port_name, uint8_t proto, bool v4,
			bool local_only, struct lb_svc *out)
{
	size_t name_len = strlen(port_name), cap = 0;
	for (size_t si = 0; si < s->nslices; si++) {
		const struct k8s_slice_proj *sl = s->slices[si];
		if (sl->family != (v4 ? 4 : 6))
			continue;
		const struct k8s_port *ports = k8s_slice_ports(sl);
		const char *strs = k8s_slice_strings(sl);
		int32_t num = -1;
		for (size_t p = 0; p < sl->nports; p++)
			if (ports[p].port != -1 && ports[p].proto == proto &&
			    k8s_port_named(&ports[p], strs, port_name, name_len))
				num = ports[p].port;
		if (num < 1 || num > 65535)
			continue;
		const struct k8s_ep *eps = k8s_slice_eps(sl);
		for (size_t e = 0; e < sl->neps; e++) {
			if (local_only && !eps[e].local)
				continue;
			bool dup = false;
			for (size_t j = 0; j < out->nbe && !dup; j++)
				dup = !memcmp(&out->be[j].addr, &eps[e].addr, sizeof(eps[e].addr)) &&
				      out->be[j].port == (uint16_t)num;
			if (dup || out->nbe >= LB_BACKENDS_PER_SVC_MAX)
				continue;
			struct lb_be_spec *nb = mod_grow(out->be, out->nbe, &cap, sizeof(*nb), 4);
			if (!nb)
				return -ENOMEM;
			out->be = nb;
			memset(&nb[out->nbe], 0, sizeof(*nb));
			nb[out->nbe].addr = eps[e].addr;
			nb[out->nbe].port = (uint16_t)num;
			nb[out->nbe].state = eps[e].state;
			out->nbe++;
		}
	}
	return 0;
}

struct fe_list {
	struct fe_key *v;
	size_t n, cap;
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

static int add_frontend(struct lb_k8s *k, struct k8s_svc *s, struct fe_list *fl,
			const struct k8s_port *port, const struct lb_addr *ip, uint16_t fport,
			uint8_t type, bool local)
{
	const struct k8s_svc_proj *p = s->svc;
	char pname[K8S_PORT_NAME_MAX + 1];
	memcpy(pname, k8s_svc_strings(p) + port->name_off, port->name_len);
	pname[port->name_len] = '\0';
	struct lb_svc *sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	sv->addr = *ip;
	sv->port = fport;
	sv->proto = port->proto;
	sv->type = type;
	sv->source = LB_SRC_K8S;
	sv->affinity = p->affinity;
	sv->affinity_timeout = p->affinity_timeout;
	sv->ext_local = p->etp_local;
	sv->int_local = p->itp_local;
	snprintf(sv->name, sizeof(sv->name), "%.190s%s%.63s", s->key, *pname ? ":" : "", pname);
	int rc = backends_for(s, pname, port->proto, lb_addr_is_v4(ip), local, sv);
	if (!rc && type == LB_SVC_LOAD_BALANCER && p->nranges) {
		if ((sv->ranges = calloc(p->nranges, sizeof(*sv->ranges)))) {
			memcpy(sv->ranges, k8s_svc_ranges(p), p->nranges * sizeof(*sv->ranges));
			sv->nranges = p->nranges;
		} else {
			rc = -ENOMEM;
		}
	}
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
	struct fe_key *nv = mod_grow(fl->v, fl->n, &fl->cap, sizeof(*nv), 4);
	if (!nv)
		return -ENOMEM;
	fl->v = nv;
	nv[fl->n++] = (struct fe_key){.addr = *ip, .port = fport, .proto = port->proto};
	return 0;
}

/* Programs Service s from its projections: its frontends upserted, the ones
 * it no longer has removed. */
static void sync_service(struct lb_k8s *k, struct k8s_svc *s)
{
	/* Nothing is programmed before the first complete list of both
	 * Services and EndpointSlices (Cilium starts its service handler only
	 * once the caches are synced): a Service listed before its slices
	 * would replace its restored backends with none and refuse every
	 * connection (and renumber the backends) until they come. The events
	 * are recorded meanwhile; on_synced programs them all. */
	if (!k->synced && !k->applying)
		return;
	struct fe_list fl = {0};
	const struct k8s_svc_proj *p = s->svc;
	if (!p) {
		remove_gone(k, s, NULL);
		free(s->fes);
		s->fes = NULL;
		s->nfes = 0;
		return;
	}
	if (p->invalid) {
		k->skipped++;
		fibril_warn(k->m, "service %s skipped: %s (its frontends are left as they were)",
			    s->key, k8s_svc_strings(p));
		return;
	}
	const struct k8s_port *ports = k8s_svc_ports(p);
	const struct lb_addr *cips = k8s_svc_cips(p), *eips = k8s_svc_eips(p);
	const struct lb_addr *ingress = k8s_svc_ingress(p);
	for (size_t i = 0; i < p->nports; i++) {
		const struct k8s_port *port = &ports[i];
		uint16_t pnum = (uint16_t)port->port;
		for (size_t j = 0; j < p->ncips; j++)
			add_frontend(k, s, &fl, port, &cips[j], pnum, LB_SVC_CLUSTER_IP, p->itp_local);
		for (size_t j = 0; j < p->neips; j++)
			add_frontend(k, s, &fl, port, &eips[j], pnum, LB_SVC_EXTERNAL_IP, p->etp_local);
		for (size_t j = 0; p->lbtype && j < p->ningress; j++)
			add_frontend(k, s, &fl, port, &ingress[j], pnum, LB_SVC_LOAD_BALANCER,
				     p->etp_local);
		for (size_t j = 0; p->nodeport && port->node_port && j < k->nnode_addrs; j++)
			if (lb_addr_is_v4(&k->node_addrs[j]) ? p->want4 : p->want6)
				add_frontend(k, s, &fl, port, &k->node_addrs[j], port->node_port,
					     LB_SVC_NODE_PORT, p->etp_local);
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

/* s's Service projection becomes p (NULL: deleted), its text recorded */
static void set_svc(struct lb_k8s *k, struct k8s_svc *s, struct k8s_svc_proj *p)
{
	if (s->svc && s->svc->text_hash)
		k8s_hash_set_del(&k->svc_texts, s->svc->text_hash);
	free(s->svc);
	s->svc = p;
	if (p && k8s_hash_set_add(&k->svc_texts, p->text_hash) < 0)
		p->text_hash = 0; /* not recorded: its text is parsed again when met */
}

/* A Service added/updated (text, hash h, o: text parsed or NULL) or deleted
 * (text NULL). */
static void apply_service(struct lb_k8s *k, const char *ns, const char *name, const char *text,
			  uint64_t h, struct json_object *o)
{
	char *key = key_of(ns ? ns : "", name ? name : "");
	struct k8s_svc *s = key ? find(k, key, text != NULL) : NULL;
	free(key);
	if (!s)
		return;
	if (!text) {
		set_svc(k, s, NULL);
		sync_service(k, s);
		return;
	}
	if (s->svc && s->svc->text_hash == h)
		return; /* this very text is what lb has */
	/* read in place (k8s_scan.c); another text, or an invalid Service,
	 * through json-c, to the same projection */
	struct k8s_svc_proj *p = NULL;
	bool scanned = !o && k8s_svc_scan(text, strlen(text), &p) == 0;
	struct json_object *parsed = o || scanned ? NULL : json_tokener_parse(text);
	k->parsed += !o;
	k->scanned += scanned;
	bool no_spec = true;
	if (!scanned)
		p = k8s_svc_project(o ? o : parsed, &no_spec);
	json_object_put(parsed);
	if (!p) {
		k->skipped++;
		fibril_warn(k->m, "service %s skipped: %s", s->key,
			    no_spec ? "the object has no spec" : "out of memory");
		return;
	}
	p->text_hash = h;
	/* what lb reads of it is unchanged (a resync, a status or metadata
	 * change): nothing to program again */
	bool same = k8s_svc_proj_same(p, s->svc);
	set_svc(k, s, p);
	if (!same)
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

/* The n-th refused backend address of a slice: counted, and named in the
 * list its log line carries (cut at cap). */
static void note_refusal(struct lb_k8s *k, char *list, size_t cap, size_t *off, size_t n,
			 const char *text, const char *why)
{
	lb_count_refused(k->lb, why);
	if (*off < cap) {
		int w = snprintf(list + *off, cap - *off, "%s%s (%s)", n ? ", " : "", text, why);
		*off += w > 0 ? (size_t)w : 0;
	}
}

/* A slice's refusals in one warning, once per slice. */
static void log_refusals(struct lb_k8s *k, const char *ns, const char *name, size_t n,
			 const char *list)
{
	char key[LB_NAME_MAX + 1];
	snprintf(key, sizeof(key), "%.120s/%.120s", ns ? ns : "", name ? name : "");
	if (n && !refusal_logged(k, key))
		fibril_warn(k->m, "endpointslice %s: %zu endpoint addresses refused as backends: %s",
			    key, n, list);
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
			note_refusal(k, list, sizeof(list), &off, nref++, txt, why);
			json_object_array_del_idx(addrs, a, 1);
		}
	}
	log_refusals(k, ns, name, nref, list);
}

/* The refusals k8s_slice_scan found in slice ns/name: counted and logged
 * as refuse_backends does for the json-c path. */
static void report_refusals(struct lb_k8s *k, const char *ns, const char *name,
			    const struct k8s_refusal *rf, size_t n)
{
	char list[256] = "";
	size_t off = 0;
	for (size_t i = 0; i < n; i++)
		note_refusal(k, list, sizeof(list), &off, i, rf[i].text, rf[i].why);
	log_refusals(k, ns, name, n, list);
}

/* k8s_slice_scan's refuser: the node's addresses read at the first IP met */
struct slice_refuser {
	struct lb_k8s *k;
	bool read;
	int rc;
	struct lb_addr *mine;
	size_t nmine;
};

static const char *slice_refusal(const struct lb_addr *a, void *ud)
{
	struct slice_refuser *r = ud;
	if (!r->read) {
		r->read = true;
		r->rc = lb_k8s_node_addrs_cached(r->k->m, &r->k->mine, &r->mine, &r->nmine);
	}
	return r->rc < 0 ? NULL : lb_backend_refusal(a, r->mine, r->nmine);
}

/* the index in s->slices of the slice named name, or SIZE_MAX */
static size_t slice_at(const struct k8s_svc *s, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; i < s->nslices; i++)
		if (s->slices[i]->name_len == len &&
		    !memcmp(k8s_slice_strings(s->slices[i]), name, len))
			return i;
	return SIZE_MAX;
}

/* slice i of s becomes p (NULL: removed), its text recorded; false when
 * memory ran out (p freed) */
static bool set_slice(struct lb_k8s *k, struct k8s_svc *s, size_t i, struct k8s_slice_proj *p)
{
	if (i == SIZE_MAX && p) {
		struct k8s_slice_proj **v = mod_grow(s->slices, s->nslices, &s->slices_cap,
						     sizeof(*v), 1);
		if (!v) {
			free(p);
			return false;
		}
		s->slices = v;
		i = s->nslices++;
		s->slices[i] = NULL;
	} else if (i == SIZE_MAX) {
		return true;
	}
	if (s->slices[i] && s->slices[i]->text_hash)
		k8s_hash_set_del(&k->slice_texts, s->slices[i]->text_hash);
	free(s->slices[i]);
	if (p) {
		s->slices[i] = p;
		if (k8s_hash_set_add(&k->slice_texts, p->text_hash) < 0)
			p->text_hash = 0;
	} else {
		s->slices[i] = s->slices[--s->nslices];
	}
	return true;
}

/* An EndpointSlice added/updated or deleted (its text, hash h, o: parsed
 * or NULL). */
static void apply_slice(struct lb_k8s *k, const char *ns, const char *name, const char *text,
			uint64_t h, struct json_object *o, bool deleted)
{
	if (!deleted && k8s_hash_set_has(&k->slice_texts, h))
		return; /* this very text is what lb has (it names the slice) */
	/* read in place (k8s_scan.c); a text the scanner does not read goes
	 * through json-c, to the same projection */
	struct slice_refuser refuser = {.k = k};
	struct k8s_refuser rf = {slice_refusal, &refuser};
	struct k8s_slice_scanned sc = {0};
	bool scanned = !o && text && !deleted &&
		       k8s_slice_scan(text, strlen(text), name ? name : "", k->node, &rf, &sc) == 0;
	struct json_object *parsed = o || !text || scanned ? NULL : json_tokener_parse(text);
	k->parsed += !o && text;
	k->scanned += scanned;
	o = o ? o : parsed;
	const char *svcname = scanned ? (sc.has_service ? sc.service : NULL)
				      : str(path(o, "metadata", "labels"), "kubernetes.io/service-name");
	struct k8s_svc *s = NULL;
	if (!svcname) {
		k->skipped++;
		fibril_info(k->m, "endpointslice %s/%s skipped: no kubernetes.io/service-name label",
			    ns ? ns : "", name ? name : "");
	} else {
		char *key = key_of(ns ? ns : "", svcname);
		s = key ? find(k, key, !deleted) : NULL;
		free(key);
	}
	if (!s) {
		json_object_put(parsed);
		free(sc.proj);
		free(sc.refused);
		return;
	}
	size_t at = slice_at(s, name ? name : "");
	if (deleted) {
		json_object_put(parsed);
		if (at == SIZE_MAX)
			return;
		set_slice(k, s, at, NULL);
	} else {
		struct k8s_slice_proj *p = sc.proj;
		if (scanned) {
			report_refusals(k, ns, name, sc.refused, sc.nrefused);
			free(sc.refused);
		} else {
			refuse_backends(k, ns, name, o);
			p = k8s_slice_project(o, name ? name : "", k->node);
		}
		json_object_put(parsed);
		if (!p) {
			k->skipped++;
			fibril_warn(k->m, "endpointslice %s/%s skipped: out of memory", ns ? ns : "",
				    name ? name : "");
			return;
		}
		p->text_hash = h;
		bool same = at != SIZE_MAX && k8s_slice_proj_same(p, s->slices[at]);
		if (!set_slice(k, s, at, p) || same) /* same: what lb reads of it is unchanged */
			return;
	}
	if (!s->svc) { /* held, not skipped: applied when its Service arrives */
		if (!deleted && k->synced) /* before, slices first is the order of the lists */
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
	const char *text = e->type == FIBRIL_K8S_DELETED ? NULL : FIBRIL_K8S_STR(e, object);
	apply_service(k, FIBRIL_K8S_STR(e, namespace_), FIBRIL_K8S_STR(e, name), text,
		      text ? k8s_text_hash(text) : 0, NULL);
	return 0;
}

static int on_slice(const struct fibril_event *ev, void *ud)
{
	struct lb_k8s *k = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || !k->ops || !lb_table_of(k->lb))
		return 0;
	const char *text = FIBRIL_K8S_STR(e, object);
	apply_slice(k, FIBRIL_K8S_STR(e, namespace_), FIBRIL_K8S_STR(e, name), text,
		    text ? k8s_text_hash(text) : 0, NULL, e->type == FIBRIL_K8S_DELETED);
	return 0;
}

/* what the k8s module's caches already hold at our start (events published
 * before it were not ours to program), and at the sync: an object whose
 * text lb already has (from its event) is not parsed again */
struct cached {
	struct lb_k8s *k;
	bool slices;
};

static int on_cached(const char *json, void *ud)
{
	struct cached *c = ud;
	uint64_t h = k8s_text_hash(json);
	if (k8s_hash_set_has(c->slices ? &c->k->slice_texts : &c->k->svc_texts, h))
		return 0;
	/* its name read in place, then the text as its event's would be (in
	 * place, else through json-c) */
	char mns[LB_NAME_MAX + 1], mname[LB_NAME_MAX + 1];
	if (k8s_meta_scan(json, strlen(json), mns, sizeof(mns), mname, sizeof(mname))) {
		if (c->slices)
			apply_slice(c->k, mns, mname, json, h, NULL, false);
		else
			apply_service(c->k, mns, mname, json, h, NULL);
		return 0;
	}
	struct json_object *o = json_tokener_parse(json);
	c->k->parsed++;
	const char *ns = str(path(o, "metadata", NULL), "namespace");
	const char *name = str(path(o, "metadata", NULL), "name");
	if (name) {
		if (c->slices)
			apply_slice(c->k, ns, name, json, h, o, false);
		else
			apply_service(c->k, ns, name, json, h, o);
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
	return ks && ks->svc && ks->svc->invalid;
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
 * Their events may still be queued on the bus, so what the caches hold
 * that lb has not recorded yet is recorded here, then every Service is
 * programmed once (the same IDs: upserts by frontend; the queued events of
 * the same texts are then recognized and skipped), then every frontend
 * restored from the pins as Kubernetes' that no Service programmed is
 * removed, with the backends only it used. API services and frontends of
 * unknown origin stay. */
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
	apply_cache(k);
	k->applying = true;
	for (size_t i = 0; i < k->n; i++)
		if (k->svcs[i].svc)
			sync_service(k, &k->svcs[i]);
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
	size_t held = lb_k8s_held_slices(k);
	fibril_info(k->m, "Services and EndpointSlices synced: %zu known, %zu restored frontends "
			  "removed, %zu kept (their Service is invalid), %zu slices held (no Service)",
		    k->n, removed, kept, held);
	/* the lists' parse trees are gone: their freed pages go back to the
	 * system instead of staying resident for the agent's life */
	malloc_trim(0);
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
		struct k8s_svc *s = &k->svcs[i];
		free(s->key);
		free(s->svc);
		for (size_t j = 0; j < s->nslices; j++)
			free(s->slices[j]);
		free(s->slices);
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
	k8s_hash_set_free(&k->svc_texts);
	k8s_hash_set_free(&k->slice_texts);
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
		if (!k->svcs[i].svc)
			n += k->svcs[i].nslices;
	return n;
}

uint64_t lb_k8s_parsed(const struct lb_k8s *k)
{
	return k ? k->parsed : 0;
}

uint64_t lb_k8s_scanned(const struct lb_k8s *k)
{
	return k ? k->scanned : 0;
}

size_t lb_k8s_bytes(const struct lb_k8s *k)
{
	if (!k)
		return 0;
	size_t n = k->cap * sizeof(*k->svcs) + (k->index.slot ? (k->index.mask + 1) * sizeof(size_t) : 0) +
		   (k->svc_texts.slot ? (k->svc_texts.mask + 1) * sizeof(uint64_t) : 0) +
		   (k->slice_texts.slot ? (k->slice_texts.mask + 1) * sizeof(uint64_t) : 0);
	for (size_t i = 0; i < k->n; i++) {
		const struct k8s_svc *s = &k->svcs[i];
		n += strlen(s->key) + 1 + (s->svc ? s->svc->size : 0) +
		     s->slices_cap * sizeof(*s->slices) + s->nfes * sizeof(*s->fes);
		for (size_t j = 0; j < s->nslices; j++)
			n += s->slices[j]->size;
	}
	return n;
}
