/* modules/lb/k8s_proj.c - the projections of k8s_proj.h: a Service or an
 * EndpointSlice (a json-c tree, freed by the caller) reduced to the fixed
 * records lb programs from, in one zeroed allocation; the keyed hash of an
 * object's text; and a multiset of those hashes (open addressing, deletion
 * by backward shift). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "k8s_proj.h"
#include "lb_mod.h"

/* ---- reading the JSON ------------------------------------------------------ */

static struct json_object *field(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;
	return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, k, &v)
		       ? v : NULL;
}

static const char *text(struct json_object *o, const char *k)
{
	struct json_object *v = field(o, k);
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static size_t arr_len(struct json_object *a)
{
	return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

static bool is(const char *s, const char *want)
{
	return s && !strcmp(s, want);
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

bool k8s_ip_of(const char *s, struct lb_addr *a)
{
	char buf[80];
	uint16_t p;
	if (!s || strlen(s) > 60)
		return false;
	snprintf(buf, sizeof(buf), strchr(s, ':') ? "[%s]:1" : "%s:1", s);
	return lb_parse_addrport(buf, a, &p) == 0;
}

static bool flag(struct json_object *o, const char *k, bool dflt)
{
	struct json_object *v = field(o, k);
	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* ---- building: parts gathered, then copied into one allocation ----------- */

struct strs {
	char *v;
	size_t n, cap;
};

/* appends s (len bytes) to st; its offset, or UINT32_MAX when out of memory */
static uint32_t strs_add(struct strs *st, const char *s, size_t len)
{
	if (st->n + len > st->cap) {
		size_t cap = st->cap ? st->cap : 64;
		while (cap < st->n + len)
			cap *= 2;
		char *v = realloc(st->v, cap);
		if (!v)
			return UINT32_MAX;
		st->v = v;
		st->cap = cap;
	}
	memcpy(st->v + st->n, s, len);
	st->n += len;
	return (uint32_t)(st->n - len);
}

/* the parsed addresses of a JSON array of strings (those that are IPs); key:
 * read each element's field key instead (ingress[].ip) */
static struct lb_addr *addrs_of(struct json_object *arr, const char *key, size_t *n)
{
	size_t len = arr_len(arr);
	struct lb_addr *v = calloc(len ? len : 1, sizeof(*v));
	*n = 0;
	for (size_t i = 0; v && i < len; i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);
		const char *s = key ? text(e, key)
				    : json_object_is_type(e, json_type_string) ? json_object_get_string(e)
									       : NULL;
		if (k8s_ip_of(s, &v[*n]))
			(*n)++;
	}
	return v;
}

#define SVC_HDR sizeof(struct k8s_svc_proj)
#define SLICE_HDR sizeof(struct k8s_slice_proj)

const struct k8s_port *k8s_svc_ports(const struct k8s_svc_proj *p)
{
	return (const struct k8s_port *)(const void *)((const char *)p + SVC_HDR);
}

const struct lb_addr *k8s_svc_cips(const struct k8s_svc_proj *p)
{
	return (const struct lb_addr *)(const void *)(k8s_svc_ports(p) + p->nports);
}

const struct lb_addr *k8s_svc_eips(const struct k8s_svc_proj *p)
{
	return k8s_svc_cips(p) + p->ncips;
}

const struct lb_addr *k8s_svc_ingress(const struct k8s_svc_proj *p)
{
	return k8s_svc_eips(p) + p->neips;
}

const struct lb_cidr *k8s_svc_ranges(const struct k8s_svc_proj *p)
{
	return (const struct lb_cidr *)(const void *)(k8s_svc_ingress(p) + p->ningress);
}

const char *k8s_svc_strings(const struct k8s_svc_proj *p)
{
	return (const char *)(k8s_svc_ranges(p) + p->nranges);
}

const struct k8s_port *k8s_slice_ports(const struct k8s_slice_proj *p)
{
	return (const struct k8s_port *)(const void *)((const char *)p + SLICE_HDR);
}

const struct k8s_ep *k8s_slice_eps(const struct k8s_slice_proj *p)
{
	return (const struct k8s_ep *)(const void *)(k8s_slice_ports(p) + p->nports);
}

const char *k8s_slice_strings(const struct k8s_slice_proj *p)
{
	return (const char *)(k8s_slice_eps(p) + p->neps);
}

bool k8s_port_named(const struct k8s_port *q, const char *strs, const char *name, size_t len)
{
	return q->name_len == len && !memcmp(strs + q->name_off, name, len);
}

/* a port's name (NULL: none) into st; false when longer than a DNS label */
static bool port_name(struct k8s_port *q, const char *name, struct strs *st)
{
	size_t len = name ? strlen(name) : 0;
	if (len > K8S_PORT_NAME_MAX)
		return false;
	q->name_len = (uint8_t)len;
	q->name_off = len ? strs_add(st, name, len) : 0;
	return q->name_off != UINT32_MAX;
}

struct k8s_svc_proj *k8s_svc_project(struct json_object *svc, bool *no_spec)
{
	struct json_object *spec = field(svc, "spec");
	*no_spec = !spec || !json_object_is_type(spec, json_type_object);
	if (*no_spec)
		return NULL;
	struct k8s_svc_proj h;
	memset(&h, 0, sizeof(h));
	char why[200] = "";
	h.invalid = !lb_k8s_svc_valid(spec, why, sizeof(why));
	struct json_object *ports = field(spec, "ports"), *cips = field(spec, "clusterIPs");
	struct json_object *own_cips = NULL;
	if (!cips) { /* older objects: clusterIP only */
		const char *cip = text(spec, "clusterIP");
		cips = own_cips = json_object_new_array();
		if (cip && own_cips)
			json_object_array_add(own_cips, json_object_new_string(cip));
	}
	size_t np = h.invalid ? 0 : arr_len(ports), nc = 0, ne = 0, ni = 0, nr = 0;
	struct strs st = {0};
	struct k8s_port *pv = calloc(np ? np : 1, sizeof(*pv));
	struct lb_addr *cv = addrs_of(cips, NULL, &nc);
	struct lb_addr *ev = addrs_of(field(spec, "externalIPs"), NULL, &ne);
	struct lb_addr *iv = addrs_of(field(field(field(svc, "status"), "loadBalancer"), "ingress"),
				      "ip", &ni);
	struct json_object *ranges = field(spec, "loadBalancerSourceRanges");
	size_t nrj = h.invalid ? 0 : arr_len(ranges);
	struct lb_cidr *rv = calloc(nrj ? nrj : 1, sizeof(*rv));
	bool ok = pv && cv && ev && iv && rv;
	for (size_t i = 0; ok && i < np; i++) {
		struct json_object *po = json_object_array_get_idx(ports, i);
		struct json_object *nodep = field(po, "nodePort");
		int64_t npv = nodep && json_object_is_type(nodep, json_type_int)
				      ? json_object_get_int64(nodep) : 0;
		pv[i].port = (int32_t)json_object_get_int64(field(po, "port")); /* checked: 1-65535 */
		pv[i].node_port = npv > 0 && npv <= 65535 ? (uint16_t)npv : 0;
		pv[i].proto = proto_of(text(po, "protocol"));
		const char *pname = text(po, "name");
		if (pname && strlen(pname) > K8S_PORT_NAME_MAX) {
			h.invalid = 1;
			snprintf(why, sizeof(why), "spec.ports[%zu].name is longer than %d characters", i,
				 K8S_PORT_NAME_MAX);
			np = 0;
		} else {
			ok = port_name(&pv[i], pname, &st);
		}
	}
	for (size_t i = 0; ok && i < nrj; i++)
		if (lb_parse_cidr(json_object_get_string(json_object_array_get_idx(ranges, i)),
				  &rv[nr]) == 0)
			nr++;
	if (ok) {
		bool want4, want6;
		lb_k8s_svc_families(spec, cips, &want4, &want6);
		h.want4 = want4;
		h.want6 = want6;
		const char *type = text(spec, "type");
		h.nodeport = is(type, "NodePort") || is(type, "LoadBalancer");
		h.lbtype = is(type, "LoadBalancer");
		h.itp_local = is(text(spec, "internalTrafficPolicy"), "Local");
		h.etp_local = is(text(spec, "externalTrafficPolicy"), "Local");
		h.affinity = is(text(spec, "sessionAffinity"), "ClientIP");
		struct json_object *to =
			field(field(field(spec, "sessionAffinityConfig"), "clientIP"), "timeoutSeconds");
		int64_t tv = to && json_object_is_type(to, json_type_int) ? json_object_get_int64(to) : 0;
		h.affinity_timeout = tv > 0 && tv <= LB_AFFINITY_TIMEOUT_MAX ? (uint32_t)tv
									      : LB_AFFINITY_TIMEOUT_DEFAULT;
		if (h.invalid) {
			np = nc = ne = ni = nr = 0;
			st.n = 0; /* the reason is the only string */
			size_t wl = strlen(why);
			h.why_len = (uint16_t)wl;
			ok = strs_add(&st, why, wl + 1) != UINT32_MAX;
		}
	}
	json_object_put(own_cips);
	struct k8s_svc_proj *p = NULL;
	size_t size = SVC_HDR + np * sizeof(*pv) + (nc + ne + ni) * sizeof(struct lb_addr) +
		      nr * sizeof(*rv) + st.n;
	if (ok && size <= UINT32_MAX && np <= UINT16_MAX && nc <= UINT16_MAX && ne <= UINT16_MAX &&
	    ni <= UINT16_MAX && nr <= UINT16_MAX && (p = calloc(1, size))) {
		h.size = (uint32_t)size;
		h.nports = (uint16_t)np;
		h.ncips = (uint16_t)nc;
		h.neips = (uint16_t)ne;
		h.ningress = (uint16_t)ni;
		h.nranges = (uint16_t)nr;
		memcpy(p, &h, sizeof(h));
		memcpy((void *)k8s_svc_ports(p), pv, np * sizeof(*pv));
		memcpy((void *)k8s_svc_cips(p), cv, nc * sizeof(*cv));
		memcpy((void *)k8s_svc_eips(p), ev, ne * sizeof(*ev));
		memcpy((void *)k8s_svc_ingress(p), iv, ni * sizeof(*iv));
		memcpy((void *)k8s_svc_ranges(p), rv, nr * sizeof(*rv));
		if (st.n)
			memcpy((void *)k8s_svc_strings(p), st.v, st.n);
	}
	free(pv);
	free(cv);
	free(ev);
	free(iv);
	free(rv);
	free(st.v);
	return p;
}

struct k8s_slice_proj *k8s_slice_project(struct json_object *slice, const char *name,
					 const char *node)
{
	struct k8s_slice_proj h;
	memset(&h, 0, sizeof(h));
	const char *at = text(slice, "addressType");
	h.family = is(at, "IPv4") ? 4 : is(at, "IPv6") ? 6 : 0;
	struct json_object *ports = field(slice, "ports"), *eps = field(slice, "endpoints");
	size_t np = arr_len(ports), ne = 0, cap = 0;
	struct strs st = {0};
	size_t name_len = strlen(name ? name : "");
	if (name_len > UINT16_MAX)
		name_len = UINT16_MAX;
	bool ok = strs_add(&st, name ? name : "", name_len) != UINT32_MAX;
	struct k8s_port *pv = calloc(np ? np : 1, sizeof(*pv));
	struct k8s_ep *ev = NULL;
	ok = ok && pv;
	for (size_t i = 0; ok && i < np; i++) {
		struct json_object *po = json_object_array_get_idx(ports, i), *pn = field(po, "port");
		int64_t v = pn && json_object_is_type(pn, json_type_int) ? json_object_get_int64(pn) : -1;
		pv[i].port = v == -1 ? -1 : v >= 1 && v <= 65535 ? (int32_t)v : 0;
		pv[i].proto = proto_of(text(po, "protocol"));
		if (!port_name(&pv[i], text(po, "name"), &st)) /* no such Service port: never matches */
			pv[i] = (struct k8s_port){.port = -1};
	}
	for (size_t e = 0; ok && h.family && e < arr_len(eps); e++) {
		struct json_object *ep = json_object_array_get_idx(eps, e);
		struct json_object *cond = field(ep, "conditions"), *addrs = field(ep, "addresses");
		bool ready = flag(cond, "ready", true);
		bool serving = flag(cond, "serving", ready);
		bool terminating = flag(cond, "terminating", false);
		uint8_t state = ready && !terminating ? LB_BE_ACTIVE
				: serving && terminating ? LB_BE_TERMINATING
							 : LB_BE_NOT_READY;
		const char *on = text(ep, "nodeName");
		for (size_t a = 0; ok && a < arr_len(addrs); a++) {
			struct json_object *ao = json_object_array_get_idx(addrs, a);
			struct k8s_ep x = {.state = state, .local = on && node && !strcmp(on, node)};
			if (!json_object_is_type(ao, json_type_string) ||
			    !k8s_ip_of(json_object_get_string(ao), &x.addr) ||
			    lb_addr_is_v4(&x.addr) != (h.family == 4))
				continue;
			if (ne == cap) {
				cap = cap ? 2 * cap : 4;
				struct k8s_ep *nv = realloc(ev, cap * sizeof(*nv));
				if (!nv) {
					ok = false;
					break;
				}
				ev = nv;
			}
			memset(&ev[ne], 0, sizeof(ev[ne]));
			ev[ne++] = x;
		}
	}
	struct k8s_slice_proj *p = NULL;
	size_t size = SLICE_HDR + np * sizeof(*pv) + ne * sizeof(*ev) + st.n;
	if (ok && np <= UINT16_MAX && size <= UINT32_MAX && (p = calloc(1, size))) {
		h.size = (uint32_t)size;
		h.name_len = (uint16_t)name_len;
		h.nports = (uint16_t)np;
		h.neps = (uint32_t)ne;
		memcpy(p, &h, sizeof(h));
		memcpy((void *)k8s_slice_ports(p), pv, np * sizeof(*pv));
		if (ne)
			memcpy((void *)k8s_slice_eps(p), ev, ne * sizeof(*ev));
		memcpy((void *)k8s_slice_strings(p), st.v, st.n);
	}
	free(pv);
	free(ev);
	free(st.v);
	return p;
}

bool k8s_svc_proj_same(const struct k8s_svc_proj *a, const struct k8s_svc_proj *b)
{
	return a && b && a->size == b->size &&
	       !memcmp((const char *)a + sizeof(a->text_hash), (const char *)b + sizeof(b->text_hash),
		       a->size - sizeof(a->text_hash));
}

bool k8s_slice_proj_same(const struct k8s_slice_proj *a, const struct k8s_slice_proj *b)
{
	return a && b && a->size == b->size &&
	       !memcmp((const char *)a + sizeof(a->text_hash), (const char *)b + sizeof(b->text_hash),
		       a->size - sizeof(a->text_hash));
}

/* ---- the text hash ------------------------------------------------------------ */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ull;
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ull;
	return x ^ (x >> 32);
}

uint64_t k8s_text_hash(const char *t)
{
	static uint64_t key[2];
	static bool keyed;
	if (!keyed) {
		if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
			key[0] = (uint64_t)(uintptr_t)&key ^ 0x9e3779b97f4a7c15ull, key[1] = ~key[0];
		keyed = true;
	}
	size_t len = strlen(t);
	uint64_t h = key[0] ^ len, g = key[1];
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, t + i, 8);
		h = mix(h ^ w) + g;
		g = (g << 7 | g >> 57) ^ w;
	}
	uint64_t w = 0;
	memcpy(&w, t + i, len - i);
	h = mix(h ^ w ^ (g * 0x9e3779b97f4a7c15ull));
	return h ? h : 1;
}

/* ---- the multiset of hashes ------------------------------------------------------ */

static void set_put(uint64_t *slot, size_t mask, uint64_t h)
{
	size_t k = (size_t)h & mask;
	while (slot[k])
		k = (k + 1) & mask;
	slot[k] = h;
}

int k8s_hash_set_add(struct k8s_hash_set *s, uint64_t h)
{
	if (!s->slot || 2 * (s->n + 1) > s->mask + 1) {
		size_t cap = s->slot ? 2 * (s->mask + 1) : 256;
		uint64_t *slot = calloc(cap, sizeof(*slot));
		if (!slot)
			return -1;
		for (size_t k = 0; s->slot && k <= s->mask; k++)
			if (s->slot[k])
				set_put(slot, cap - 1, s->slot[k]);
		free(s->slot);
		s->slot = slot;
		s->mask = cap - 1;
	}
	set_put(s->slot, s->mask, h);
	s->n++;
	return 0;
}

bool k8s_hash_set_has(const struct k8s_hash_set *s, uint64_t h)
{
	for (size_t k = s->slot ? (size_t)h & s->mask : 0; s->slot && s->slot[k]; k = (k + 1) & s->mask)
		if (s->slot[k] == h)
			return true;
	return false;
}

void k8s_hash_set_del(struct k8s_hash_set *s, uint64_t h)
{
	if (!h)
		return; /* 0 marks an empty slot, never a member */
	size_t k = s->slot ? (size_t)h & s->mask : 0;
	for (; s->slot && s->slot[k] != h; k = (k + 1) & s->mask)
		if (!s->slot[k])
			return;
	if (!s->slot)
		return;
	/* backward shift: the entries after the hole that belong before it move up */
	size_t hole = k;
	s->slot[hole] = 0;
	s->n--;
	for (size_t j = (hole + 1) & s->mask; s->slot[j]; j = (j + 1) & s->mask) {
		size_t home = (size_t)s->slot[j] & s->mask;
		bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
		if (between)
			continue;
		s->slot[hole] = s->slot[j];
		s->slot[j] = 0;
		hole = j;
	}
}

void k8s_hash_set_free(struct k8s_hash_set *s)
{
	free(s->slot);
	memset(s, 0, sizeof(*s));
}
