/* modules/lb/k8s_scan.c - an EndpointSlice's or a Service's text
 * projected in place (modules/common/jscan.h), without a json-c tree: at
 * 10,000 of each the tree of each object (built, walked, freed) was about
 * 40 % of the agent's CPU from its start to all programmed. The scanner reads only the shape the API
 * server writes: a field lb reads must have its documented type (or be
 * null), appear once in its object, and be a string without escapes or a
 * plain integer; anything else - an escape, a fraction, a field twice, a
 * port given as a string, and any Service lb would refuse as invalid -
 * answers "cannot scan" and the caller projects the text through json-c
 * as before (k8s_slice_project, k8s_svc_project, which also words the
 * reason), so the projection never depends on which path read it
 * (tests/unit/test_lb_k8s_scan.c and the fuzz targets lb_k8s_slice and
 * lb_k8s_svc compare the two). Fields lb does not read are skipped, escapes and
 * fractions included. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "jscan.h"
#include "k8s_proj.h"

/* a value's text: [p, p + len) */
struct span {
	const char *p;
	size_t len;
};

/* Skip a string, escapes allowed (each one json-c reads). */
static bool skip_string(struct mod_jscan *s)
{
	if (!mod_jscan_eat(s, '"'))
		return false;
	while (s->p < s->end && *s->p != '"') {
		unsigned char c = (unsigned char)*s->p++;
		if (c < 0x20)
			return false;
		if (c != '\\')
			continue;
		if (s->p >= s->end)
			return false;
		c = (unsigned char)*s->p++;
		if (c == 'u') {
			for (int i = 0; i < 4; i++, s->p++)
				if (s->p >= s->end || !strchr("0123456789abcdefABCDEF", *s->p) || !*s->p)
					return false;
		} else if (!strchr("\"\\/bfnrt", c) || !c) {
			return false;
		}
	}
	if (s->p >= s->end)
		return false;
	s->p++;
	return true;
}

/* Skip a number, fractions and exponents allowed. */
static bool skip_number(struct mod_jscan *s)
{
	const char *p = s->p;
	if (p < s->end && *p == '-')
		p++;
	const char *digits = p;
	while (p < s->end && *p >= '0' && *p <= '9')
		p++;
	if (p == digits || (*digits == '0' && p - digits > 1))
		return false;
	if (p < s->end && *p == '.') {
		const char *f = ++p;
		while (p < s->end && *p >= '0' && *p <= '9')
			p++;
		if (p == f)
			return false;
	}
	if (p < s->end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < s->end && (*p == '+' || *p == '-'))
			p++;
		const char *e = p;
		while (p < s->end && *p >= '0' && *p <= '9')
			p++;
		if (p == e)
			return false;
	}
	s->p = p;
	return true;
}

/* Skip one value of a field lb does not read. */
static bool skip_value(struct mod_jscan *s, int depth)
{
	const char *k;
	size_t kl;
	int r;
	if (depth > 32)
		return false;
	mod_jscan_ws(s);
	if (s->p >= s->end)
		return false;
	switch (*s->p) {
	case '"':
		return skip_string(s);
	case '{':
		mod_jscan_open(s, '{');
		while ((r = mod_jscan_member(s, &k, &kl)) == 1)
			if (!skip_value(s, depth + 1))
				return false;
		return r == 0;
	case '[':
		mod_jscan_open(s, '[');
		while ((r = mod_jscan_element(s)) == 1)
			if (!skip_value(s, depth + 1))
				return false;
		return r == 0;
	case 't':
		return mod_jscan_word(s, "true");
	case 'f':
		return mod_jscan_word(s, "false");
	case 'n':
		return mod_jscan_word(s, "null");
	default:
		return skip_number(s);
	}
}

/* A value kept for later: its span (skipped now). */
static bool keep(struct mod_jscan *s, struct span *v)
{
	mod_jscan_ws(s);
	const char *start = s->p;
	if (!skip_value(s, 1))
		return false;
	v->p = start;
	v->len = (size_t)(s->p - start);
	return true;
}

static bool is_null(const struct span *v)
{
	return v->p && v->len == 4 && !memcmp(v->p, "null", 4);
}

/* a kept value that is a string without escapes: [*t, *t + *tl) (*present
 * false for absent or null); false: another type, or an escape */
static bool span_str(const struct span *v, const char **t, size_t *tl, bool *present)
{
	*present = false;
	*t = "";
	*tl = 0;
	if (!v->p || is_null(v))
		return true;
	struct mod_jscan s;
	mod_jscan_init(&s, v->p, v->len);
	if (!mod_jscan_string(&s, t, tl) || memchr(*t, '\0', *tl))
		return false;
	*present = true;
	return true;
}

/* [t, t + tl) is lit */
static bool same(const char *t, size_t tl, const char *lit)
{
	return tl == strlen(lit) && !memcmp(t, lit, tl);
}

/* the members of the object at s named in names[] (each at most once)
 * into spans[]; others skipped */
static bool members(struct mod_jscan *s, const char *const *names, struct span *spans, size_t n)
{
	const char *k;
	size_t kl;
	int r;
	if (!mod_jscan_open(s, '{'))
		return false;
	while ((r = mod_jscan_member(s, &k, &kl)) == 1) {
		size_t i = 0;
		while (i < n && !(strlen(names[i]) == kl && !memcmp(names[i], k, kl)))
			i++;
		if (i == n) {
			if (!skip_value(s, 1))
				return false;
			continue;
		}
		if (spans[i].p || !keep(s, &spans[i])) /* twice: json-c keeps the last */
			return false;
	}
	return r == 0;
}

/* the members of a kept value that must be an object (absent or null:
 * none) */
static bool span_members(const struct span *v, const char *const *names, struct span *spans,
			 size_t n)
{
	memset(spans, 0, n * sizeof(*spans));
	if (!v->p || is_null(v))
		return true;
	struct mod_jscan s;
	mod_jscan_init(&s, v->p, v->len);
	return members(&s, names, spans, n) && mod_jscan_at_end(&s);
}

/* a kept boolean (absent or null: dflt) */
static bool span_flag(const struct span *v, bool dflt, bool *out)
{
	*out = dflt;
	if (!v->p || is_null(v))
		return true;
	struct mod_jscan s;
	mod_jscan_init(&s, v->p, v->len);
	return mod_jscan_bool(&s, out) && mod_jscan_at_end(&s);
}

/* opens a kept array (absent or null: *none) */
static bool span_array(const struct span *v, struct mod_jscan *s, bool *none)
{
	*none = !v->p || is_null(v);
	if (*none)
		return true;
	mod_jscan_init(s, v->p, v->len);
	return mod_jscan_open(s, '[');
}

struct parts {
	struct k8s_port *pv;
	size_t np, pcap;
	struct k8s_ep *ev;
	size_t ne, ecap;
	char *st;
	size_t stn, stcap;
	struct k8s_refusal *rf;
	size_t nrf, rfcap;
};

static bool grow(void **v, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return true;
	size_t c = *cap ? *cap * 2 : 4;
	void *nv = realloc(*v, c * size);
	if (!nv)
		return false;
	*v = nv;
	*cap = c;
	return true;
}

static bool strs_put(struct parts *pt, const char *t, size_t len, uint32_t *off)
{
	if (pt->stn + len > pt->stcap) {
		size_t cap = pt->stcap ? pt->stcap : 64;
		while (cap < pt->stn + len)
			cap *= 2;
		char *v = realloc(pt->st, cap);
		if (!v)
			return false;
		pt->st = v;
		pt->stcap = cap;
	}
	if (len)
		memcpy(pt->st + pt->stn, t, len);
	*off = (uint32_t)pt->stn;
	pt->stn += len;
	return true;
}

static bool scan_port(struct parts *pt, struct mod_jscan *s)
{
	static const char *const names[] = {"port", "protocol", "name"};
	struct span f[3] = {{0}};
	if (!members(s, names, f, 3) || !grow((void **)&pt->pv, pt->np, &pt->pcap, sizeof(*pt->pv)))
		return false;
	struct k8s_port *q = &pt->pv[pt->np];
	memset(q, 0, sizeof(*q));
	int64_t v = -1;
	if (f[0].p && !is_null(&f[0])) { /* an integer (json-c: another type is -1) */
		struct mod_jscan n;
		mod_jscan_init(&n, f[0].p, f[0].len);
		if (*f[0].p == '"' || !mod_jscan_int(&n, &v, NULL) || !mod_jscan_at_end(&n))
			return false;
	}
	const char *proto, *name;
	size_t plen, nlen;
	bool has_proto, has_name;
	if (!span_str(&f[1], &proto, &plen, &has_proto) || !span_str(&f[2], &name, &nlen, &has_name))
		return false;
	q->port = v == -1 ? -1 : v >= 1 && v <= 65535 ? (int32_t)v : 0;
	q->proto = !has_proto || same(proto, plen, "TCP") ? IPPROTO_TCP
		   : same(proto, plen, "UDP")              ? IPPROTO_UDP
		   : same(proto, plen, "SCTP")             ? IPPROTO_SCTP
							   : 0;
	if (nlen > K8S_PORT_NAME_MAX) { /* no such Service port: never matches */
		*q = (struct k8s_port){.port = -1};
	} else if (nlen) {
		q->name_len = (uint8_t)nlen;
		if (!strs_put(pt, name, nlen, &q->name_off))
			return false;
	}
	pt->np++;
	return true;
}

/* the addresses of one endpoint, in the order json-c's path refuses them
 * (last first), then kept in order */
static bool scan_endpoint(struct parts *pt, const struct span *ep, uint8_t family,
			  const char *node, const struct k8s_refuser *rf)
{
	static const char *const names[] = {"conditions", "addresses", "nodeName"};
	static const char *const cnames[] = {"ready", "serving", "terminating"};
	struct span f[3], c[3];
	if (!span_members(ep, names, f, 3) || !span_members(&f[0], cnames, c, 3))
		return false;
	bool ready, serving, terminating;
	if (!span_flag(&c[0], true, &ready) || !span_flag(&c[1], ready, &serving) ||
	    !span_flag(&c[2], false, &terminating))
		return false;
	uint8_t state = ready && !terminating ? LB_BE_ACTIVE
			: serving && terminating ? LB_BE_TERMINATING
						 : LB_BE_NOT_READY;
	const char *on;
	size_t onl;
	bool has_on;
	if (!span_str(&f[2], &on, &onl, &has_on))
		return false;
	bool local = has_on && node && same(on, onl, node);
	struct mod_jscan s;
	bool none;
	int r;
	if (!span_array(&f[1], &s, &none))
		return false;
	size_t first_rf = pt->nrf;
	while (!none && (r = mod_jscan_element(&s)) == 1) {
		const char *t;
		size_t tl;
		char txt[64];
		if (!mod_jscan_string(&s, &t, &tl) || memchr(t, '\0', tl))
			return false;
		struct k8s_ep x = {.state = state, .local = local};
		if (tl >= sizeof(txt))
			continue; /* no IP */
		memcpy(txt, t, tl);
		txt[tl] = '\0';
		if (!k8s_ip_of(txt, &x.addr))
			continue;
		const char *why = rf && rf->refusal ? rf->refusal(&x.addr, rf->ud) : NULL;
		if (why) {
			if (!grow((void **)&pt->rf, pt->nrf, &pt->rfcap, sizeof(*pt->rf)))
				return false;
			pt->rf[pt->nrf].addr = x.addr;
			pt->rf[pt->nrf].why = why;
			memcpy(pt->rf[pt->nrf].text, txt, tl + 1);
			pt->nrf++;
			continue;
		}
		if (!family || lb_addr_is_v4(&x.addr) != (family == 4))
			continue;
		if (!grow((void **)&pt->ev, pt->ne, &pt->ecap, sizeof(*pt->ev)))
			return false;
		memset(&pt->ev[pt->ne], 0, sizeof(pt->ev[pt->ne]));
		pt->ev[pt->ne++] = x;
	}
	if (!none && r != 0)
		return false;
	for (size_t a = first_rf, b = pt->nrf; a + 1 < b; a++, b--) { /* last first */
		struct k8s_refusal t = pt->rf[a];
		pt->rf[a] = pt->rf[b - 1];
		pt->rf[b - 1] = t;
	}
	return true;
}

int k8s_slice_scan(const char *text, size_t len, const char *name, const char *node,
		   const struct k8s_refuser *rf, struct k8s_slice_scanned *out)
{
	static const char *const top[] = {"metadata", "addressType", "ports", "endpoints"};
	static const char *const meta[] = {"labels"};
	static const char *const labels[] = {"kubernetes.io/service-name"};
	memset(out, 0, sizeof(*out));
	struct span f[4] = {{0}}, m[1], l[1];
	struct mod_jscan s;
	mod_jscan_init(&s, text, len);
	if (!members(&s, top, f, 4) || !mod_jscan_at_end(&s) || !span_members(&f[0], meta, m, 1) ||
	    !span_members(&m[0], labels, l, 1))
		return -1;
	const char *svc, *at;
	size_t sl, atl;
	bool has_svc, has_at;
	if (!span_str(&l[0], &svc, &sl, &has_svc) || sl >= sizeof(out->service) ||
	    !span_str(&f[1], &at, &atl, &has_at))
		return -1;
	memcpy(out->service, svc, sl);
	out->service[sl] = '\0';
	out->has_service = has_svc;
	struct k8s_slice_proj h;
	memset(&h, 0, sizeof(h));
	h.family = has_at && same(at, atl, "IPv4") ? 4 : has_at && same(at, atl, "IPv6") ? 6 : 0;
	struct parts pt = {0};
	size_t name_len = strlen(name ? name : "");
	if (name_len > UINT16_MAX)
		name_len = UINT16_MAX;
	uint32_t off;
	int rc = -1;
	bool none;
	int r = 0;
	if (!strs_put(&pt, name ? name : "", name_len, &off))
		goto out;
	struct mod_jscan a;
	if (!span_array(&f[2], &a, &none))
		goto out;
	while (!none && (r = mod_jscan_element(&a)) == 1)
		if (!scan_port(&pt, &a))
			goto out;
	if (!none && r != 0)
		goto out;
	if (!span_array(&f[3], &a, &none))
		goto out;
	while (!none && (r = mod_jscan_element(&a)) == 1) {
		struct span ep;
		mod_jscan_ws(&a);
		if (a.p >= a.end || *a.p != '{' || !keep(&a, &ep) ||
		    !scan_endpoint(&pt, &ep, h.family, node, rf))
			goto out;
	}
	if (!none && r != 0)
		goto out;
	size_t size = sizeof(h) + pt.np * sizeof(*pt.pv) + pt.ne * sizeof(*pt.ev) + pt.stn;
	rc = -ENOMEM;
	struct k8s_slice_proj *p = NULL;
	if (pt.np > UINT16_MAX || size > UINT32_MAX || !(p = calloc(1, size)))
		goto out;
	h.size = (uint32_t)size;
	h.name_len = (uint16_t)name_len;
	h.nports = (uint16_t)pt.np;
	h.neps = (uint32_t)pt.ne;
	memcpy(p, &h, sizeof(h));
	if (pt.np)
		memcpy((void *)k8s_slice_ports(p), pt.pv, pt.np * sizeof(*pt.pv));
	if (pt.ne)
		memcpy((void *)k8s_slice_eps(p), pt.ev, pt.ne * sizeof(*pt.ev));
	memcpy((void *)k8s_slice_strings(p), pt.st, pt.stn);
	out->proj = p;
	out->refused = pt.rf;
	out->nrefused = pt.nrf;
	pt.rf = NULL;
	rc = 0;
out:
	free(pt.pv);
	free(pt.ev);
	free(pt.st);
	free(pt.rf);
	return rc;
}

/* [t, t + tl) as a C string in buf (false: too long) */
static bool cstr(const char *t, size_t tl, char *buf, size_t size)
{
	if (tl >= size)
		return false;
	memcpy(buf, t, tl);
	buf[tl] = '\0';
	return true;
}

/* ---- an object's name ------------------------------------------------------------ */

bool k8s_meta_scan(const char *text, size_t len, char *ns, size_t ns_size, char *name,
		   size_t name_size)
{
	static const char *const top[] = {"metadata"}, *const mn[] = {"name", "namespace"};
	struct span f[1] = {{0}}, m[2];
	struct mod_jscan s;
	const char *t, *u;
	size_t tl, ul;
	bool has_name, has_ns;
	mod_jscan_init(&s, text, len);
	if (!members(&s, top, f, 1) || !mod_jscan_at_end(&s) || !span_members(&f[0], mn, m, 2) ||
	    !span_str(&m[0], &t, &tl, &has_name) || !span_str(&m[1], &u, &ul, &has_ns) ||
	    !has_name || !cstr(t, tl, name, name_size) || !cstr(u, ul, ns, ns_size))
		return false;
	return true;
}

/* ---- Services ----------------------------------------------------------------- */

/* the strings of a kept array (absent or null: none) into v[] (at most max;
 * false: more, another type, an escape) */
static bool span_strs(const struct span *a, struct span *v, size_t max, size_t *n)
{
	struct mod_jscan s;
	bool none;
	int r;
	*n = 0;
	if (!span_array(a, &s, &none))
		return false;
	while (!none && (r = mod_jscan_element(&s)) == 1) {
		if (*n == max || !mod_jscan_string(&s, &v[*n].p, &v[*n].len) ||
		    memchr(v[*n].p, '\0', v[*n].len))
			return false;
		(*n)++;
	}
	return none || r == 0;
}

/* addresses that must each be an IP or "None" (clusterIPs, externalIPs:
 * json-c's path calls another one invalid); the IPs into out */
static bool checked_ips(const struct span *v, size_t nv, struct lb_addr *out, size_t *n)
{
	*n = 0;
	for (size_t i = 0; i < nv; i++) {
		char buf[64];
		if (same(v[i].p, v[i].len, "None"))
			continue;
		if (!cstr(v[i].p, v[i].len, buf, sizeof(buf)) || !k8s_ip_of(buf, &out[*n]))
			return false;
		(*n)++;
	}
	return true;
}

#define SVC_LIST_MAX 64 /* addresses or families of a list; more: json-c's path */

struct svc_parts {
	struct span cips[SVC_LIST_MAX], eips[SVC_LIST_MAX], fams[SVC_LIST_MAX];
	struct lb_addr c[SVC_LIST_MAX], e[SVC_LIST_MAX], in[SVC_LIST_MAX];
	struct lb_cidr ranges[LB_SRC_RANGES_PER_SVC_MAX];
	struct span rtext[LB_SRC_RANGES_PER_SVC_MAX];
	size_t ncips, neips, nfams, nc, ne, ni, nr;
};

/* status.loadBalancer.ingress[].ip into sp->in */
static bool scan_ingress(const struct span *status, struct svc_parts *sp)
{
	static const char *const st[] = {"loadBalancer"}, *const lbn[] = {"ingress"}, *const ipn[] = {"ip"};
	struct span lb[1], ing[1];
	struct mod_jscan s;
	bool none;
	int r;
	if (!span_members(status, st, lb, 1) || !span_members(&lb[0], lbn, ing, 1) ||
	    !span_array(&ing[0], &s, &none))
		return false;
	while (!none && (r = mod_jscan_element(&s)) == 1) {
		struct span e, ip[1];
		const char *t;
		size_t tl;
		bool has;
		char buf[64];
		mod_jscan_ws(&s);
		if (s.p >= s.end || *s.p != '{' || !keep(&s, &e) || !span_members(&e, ipn, ip, 1) ||
		    !span_str(&ip[0], &t, &tl, &has))
			return false;
		if (has && sp->ni == SVC_LIST_MAX)
			return false;
		if (has && cstr(t, tl, buf, sizeof(buf)) && k8s_ip_of(buf, &sp->in[sp->ni]))
			sp->ni++;
	}
	return none || r == 0;
}

enum {
	SP_PORTS, SP_CIPS, SP_CIP, SP_EIPS, SP_RANGES, SP_FAMS, SP_TYPE, SP_ITP, SP_ETP,
	SP_AFF, SP_AFFCFG, SP_N
};

int k8s_svc_scan(const char *text, size_t len, struct k8s_svc_proj **out)
{
	static const char *const top[] = {"spec", "status"};
	static const char *const specn[SP_N] = {
		"ports", "clusterIPs", "clusterIP", "externalIPs", "loadBalancerSourceRanges",
		"ipFamilies", "type", "internalTrafficPolicy", "externalTrafficPolicy",
		"sessionAffinity", "sessionAffinityConfig"};
	static const char *const cfgn[] = {"clientIP"}, *const cipn[] = {"timeoutSeconds"};
	*out = NULL;
	struct span f[2] = {{0}}, sp_[SP_N], cfg[1], cip[1];
	struct mod_jscan s;
	mod_jscan_init(&s, text, len);
	if (!members(&s, top, f, 2) || !mod_jscan_at_end(&s) || !f[0].p || *f[0].p != '{' ||
	    !span_members(&f[0], specn, sp_, SP_N) || !sp_[SP_PORTS].p || *sp_[SP_PORTS].p != '[')
		return -1; /* no spec, no ports: json-c's path says why */
	struct svc_parts *sp = calloc(1, sizeof(*sp));
	struct parts pt = {0};
	int rc = -1;
	if (!sp)
		return -ENOMEM;
	struct k8s_svc_proj h;
	memset(&h, 0, sizeof(h));
	/* the ports: each valid, else json-c's path (the reason) */
	struct mod_jscan a;
	bool none;
	int r;
	if (!span_array(&sp_[SP_PORTS], &a, &none))
		goto out;
	while ((r = mod_jscan_element(&a)) == 1) {
		static const char *const pn[] = {"port", "protocol", "name", "nodePort"};
		struct span p[4] = {{0}};
		int64_t port, np = 0;
		const char *proto, *name;
		size_t plen, nlen;
		bool has_proto, has_name;
		struct mod_jscan n;
		mod_jscan_ws(&a);
		if (a.p >= a.end || *a.p != '{' || !members(&a, pn, p, 4) || !p[0].p || *p[0].p == '"')
			goto out;
		mod_jscan_init(&n, p[0].p, p[0].len);
		if (!mod_jscan_int(&n, &port, NULL) || !mod_jscan_at_end(&n) || port < 1 || port > 65535)
			goto out;
		if (p[3].p && !is_null(&p[3])) {
			mod_jscan_init(&n, p[3].p, p[3].len);
			if (*p[3].p == '"' || !mod_jscan_int(&n, &np, NULL) || !mod_jscan_at_end(&n))
				goto out;
		}
		if (!span_str(&p[1], &proto, &plen, &has_proto) ||
		    !span_str(&p[2], &name, &nlen, &has_name) || nlen > K8S_PORT_NAME_MAX ||
		    !grow((void **)&pt.pv, pt.np, &pt.pcap, sizeof(*pt.pv)))
			goto out;
		struct k8s_port *q = &pt.pv[pt.np];
		memset(q, 0, sizeof(*q));
		q->port = (int32_t)port;
		q->node_port = np > 0 && np <= 65535 ? (uint16_t)np : 0;
		q->proto = !has_proto || same(proto, plen, "TCP") ? IPPROTO_TCP
			   : same(proto, plen, "UDP")              ? IPPROTO_UDP
			   : same(proto, plen, "SCTP")             ? IPPROTO_SCTP
								   : 0;
		if (!q->proto)
			goto out; /* invalid */
		q->name_len = (uint8_t)nlen;
		if (nlen && !strs_put(&pt, name, nlen, &q->name_off))
			goto out;
		pt.np++;
	}
	if (r != 0)
		goto out;
	/* source ranges, each a CIDR */
	if (!span_strs(&sp_[SP_RANGES], sp->rtext, LB_SRC_RANGES_PER_SVC_MAX, &sp->nr))
		goto out;
	for (size_t i = 0; i < sp->nr; i++) {
		char buf[64];
		if (!cstr(sp->rtext[i].p, sp->rtext[i].len, buf, sizeof(buf)) ||
		    lb_parse_cidr(buf, &sp->ranges[i]) < 0)
			goto out;
	}
	/* addresses: clusterIPs (else [clusterIP], not checked), externalIPs */
	const char *t;
	size_t tl;
	bool has;
	bool own = !sp_[SP_CIPS].p || is_null(&sp_[SP_CIPS]);
	if (own) {
		if (!span_str(&sp_[SP_CIP], &t, &tl, &has))
			goto out;
		char buf[64];
		if (has) {
			sp->cips[0] = (struct span){t, tl};
			sp->ncips = 1;
			if (cstr(t, tl, buf, sizeof(buf)) && k8s_ip_of(buf, &sp->c[0]))
				sp->nc = 1;
		}
	} else if (!span_strs(&sp_[SP_CIPS], sp->cips, SVC_LIST_MAX, &sp->ncips) ||
		   !checked_ips(sp->cips, sp->ncips, sp->c, &sp->nc)) {
		goto out;
	}
	if (!span_strs(&sp_[SP_EIPS], sp->eips, SVC_LIST_MAX, &sp->neips) ||
	    !checked_ips(sp->eips, sp->neips, sp->e, &sp->ne) || !scan_ingress(&f[1], sp))
		goto out;
	/* families: ipFamilies, else the clusterIPs', else both */
	bool v4 = false, v6 = false;
	if (!span_strs(&sp_[SP_FAMS], sp->fams, SVC_LIST_MAX, &sp->nfams))
		goto out;
	for (size_t i = 0; i < sp->nfams; i++) {
		v4 |= same(sp->fams[i].p, sp->fams[i].len, "IPv4");
		v6 |= same(sp->fams[i].p, sp->fams[i].len, "IPv6");
	}
	for (size_t i = 0; !v4 && !v6 && i < sp->ncips; i++) {
		char buf[64];
		struct in6_addr a6;
		struct in_addr a4;
		if (!cstr(sp->cips[i].p, sp->cips[i].len, buf, sizeof(buf)))
			continue;
		if (inet_pton(AF_INET, buf, &a4) == 1)
			v4 = true;
		else if (inet_pton(AF_INET6, buf, &a6) == 1)
			v6 = true;
	}
	if (!v4 && !v6)
		v4 = v6 = true;
	h.want4 = v4;
	h.want6 = v6;
	/* type, policies, affinity */
	const char *ty, *itp, *etp, *aff;
	size_t tyl, itpl, etpl, affl;
	bool has_ty, has_itp, has_etp, has_aff;
	if (!span_str(&sp_[SP_TYPE], &ty, &tyl, &has_ty) ||
	    !span_str(&sp_[SP_ITP], &itp, &itpl, &has_itp) ||
	    !span_str(&sp_[SP_ETP], &etp, &etpl, &has_etp) ||
	    !span_str(&sp_[SP_AFF], &aff, &affl, &has_aff) ||
	    !span_members(&sp_[SP_AFFCFG], cfgn, cfg, 1) || !span_members(&cfg[0], cipn, cip, 1))
		goto out;
	h.nodeport = same(ty, tyl, "NodePort") || same(ty, tyl, "LoadBalancer");
	h.lbtype = same(ty, tyl, "LoadBalancer");
	h.itp_local = same(itp, itpl, "Local");
	h.etp_local = same(etp, etpl, "Local");
	h.affinity = same(aff, affl, "ClientIP");
	int64_t tv = 0;
	if (cip[0].p && !is_null(&cip[0])) {
		struct mod_jscan n;
		mod_jscan_init(&n, cip[0].p, cip[0].len);
		if (*cip[0].p == '"' || !mod_jscan_int(&n, &tv, NULL) || !mod_jscan_at_end(&n))
			goto out;
	}
	h.affinity_timeout = tv > 0 && tv <= LB_AFFINITY_TIMEOUT_MAX ? (uint32_t)tv
								     : LB_AFFINITY_TIMEOUT_DEFAULT;
	size_t size = sizeof(h) + pt.np * sizeof(*pt.pv) +
		      (sp->nc + sp->ne + sp->ni) * sizeof(struct lb_addr) +
		      sp->nr * sizeof(struct lb_cidr) + pt.stn;
	rc = -ENOMEM;
	struct k8s_svc_proj *p = NULL;
	if (pt.np > UINT16_MAX || size > UINT32_MAX || !(p = calloc(1, size)))
		goto out;
	h.size = (uint32_t)size;
	h.nports = (uint16_t)pt.np;
	h.ncips = (uint16_t)sp->nc;
	h.neips = (uint16_t)sp->ne;
	h.ningress = (uint16_t)sp->ni;
	h.nranges = (uint16_t)sp->nr;
	memcpy(p, &h, sizeof(h));
	if (pt.np)
		memcpy((void *)k8s_svc_ports(p), pt.pv, pt.np * sizeof(*pt.pv));
	memcpy((void *)k8s_svc_cips(p), sp->c, sp->nc * sizeof(struct lb_addr));
	memcpy((void *)k8s_svc_eips(p), sp->e, sp->ne * sizeof(struct lb_addr));
	memcpy((void *)k8s_svc_ingress(p), sp->in, sp->ni * sizeof(struct lb_addr));
	memcpy((void *)k8s_svc_ranges(p), sp->ranges, sp->nr * sizeof(struct lb_cidr));
	if (pt.stn)
		memcpy((void *)k8s_svc_strings(p), pt.st, pt.stn);
	*out = p;
	rc = 0;
out:
	free(sp);
	free(pt.pv);
	free(pt.st);
	return rc;
}
