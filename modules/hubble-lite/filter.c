/* modules/hubble-lite/filter.c - the flow filter of GET /v1/flows and
 * `fibril observe`: parsing its query parameters (outside input: every
 * error is one line naming the key) and matching a flow. Filters of
 * different keys are ANDed; repeated values of one key are ORed, as
 * hubble observe does. No SDK calls: tests/fuzz/fuzz_flows_query.c links
 * this file alone. */
#include "hubble.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const hl_filter_keys[] = {
	"pod", "from-pod", "to-pod", "namespace", "from-namespace", "to-namespace",
	"label", "from-label", "to-label", "ip", "from-ip", "to-ip",
	"identity", "from-identity", "to-identity", "port", "from-port", "to-port",
	"protocol", "verdict", "drop-reason", "type", "since", "until", "last",
	"service", "from-service", "to-service", "traffic-direction", "ip-version", "tcp-flags",
	NULL,
};

void hl_filter_init(struct hl_filter *f)
{
	memset(f, 0, sizeof(*f));
}

static int fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
	if (err && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int hl_proto_parse(const char *s)
{
	static const struct { const char *name; int num; } names[] = {
		{"tcp", 6}, {"udp", 17}, {"icmp", 1}, {"icmpv4", 1}, {"icmpv6", 58}, {"sctp", 132},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i].name) == 0)
			return names[i].num;
	char *end;
	errno = 0;
	long n = strtol(s, &end, 10);
	if (!*s || *end || errno || n < 0 || n > 255)
		return -1;
	return (int)n;
}

const char *hl_proto_name(int proto)
{
	switch (proto) {
	case 6: return "TCP";
	case 17: return "UDP";
	case 1: return "ICMPv4";
	case 58: return "ICMPv6";
	case 132: return "SCTP";
	default: return NULL;
	}
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	if (!*s || !isdigit((unsigned char)*s))
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno || v > max)
		return -1;
	*out = v;
	return 0;
}

static int parse_cidr(const char *s, struct hl_cidr *c)
{
	char buf[64];
	if (strlen(s) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", s);
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	memset(c, 0, sizeof(*c));
	if (inet_pton(AF_INET, buf, c->addr) == 1)
		c->family = 4, c->plen = 32;
	else if (inet_pton(AF_INET6, buf, c->addr) == 1)
		c->family = 6, c->plen = 128;
	else
		return -1;
	if (slash) {
		uint64_t p;
		if (parse_u64(slash + 1, c->plen, &p))
			return -1;
		c->plen = (unsigned)p;
	}
	return 0;
}

static bool cidr_contains(const struct hl_cidr *c, uint8_t family, const uint8_t *addr)
{
	if (c->family != family)
		return false;
	unsigned full = c->plen / 8, rest = c->plen % 8;
	if (memcmp(c->addr, addr, full))
		return false;
	if (!rest)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (c->addr[full] & mask) == (addr[full] & mask);
}

/* RFC 3339 UTC ("2026-11-25T07:00:00Z", optional fraction), a relative
 * time ago ("30s", "5m", "2h", "1d"), or Unix seconds. */
static int parse_time(const char *s, uint64_t now_ns, uint64_t *out)
{
	size_t n = strlen(s);
	if (n >= 2 && n < 20 && isdigit((unsigned char)s[0]) && strchr("smhd", s[n - 1])) {
		char num[24];
		memcpy(num, s, n - 1);
		num[n - 1] = '\0';
		uint64_t v;
		uint64_t unit = s[n - 1] == 's' ? 1 : s[n - 1] == 'm' ? 60 : s[n - 1] == 'h' ? 3600 : 86400;
		if (parse_u64(num, 100ULL * 365 * 86400 / unit, &v))
			return -1;
		uint64_t ago = v * unit * 1000000000ULL;
		*out = ago < now_ns ? now_ns - ago : 1;
		return 0;
	}
	uint64_t secs;
	if (parse_u64(s, 1ULL << 34, &secs) == 0) {
		*out = secs * 1000000000ULL;
		return 0;
	}
	struct tm tm = {0};
	char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!rest)
		return -1;
	uint64_t frac = 0;
	if (*rest == '.') {
		uint64_t scale = 100000000;
		for (rest++; isdigit((unsigned char)*rest); rest++, scale /= 10)
			frac += (uint64_t)(*rest - '0') * scale;
	}
	if (strcmp(rest, "Z") != 0)
		return -1;
	time_t t = timegm(&tm);
	if (t < 0)
		return -1;
	*out = (uint64_t)t * 1000000000ULL + frac;
	return 0;
}

static int add_str(struct hl_strs *l, const char *key, const char *v, char *err, size_t len)
{
	if (!*v)
		return fail(err, len, "query '%s': empty value", key);
	if (l->n == HL_FILTER_MAX)
		return fail(err, len, "query '%s': more than %d values", key, HL_FILTER_MAX);
	if (strlen(v) >= sizeof(l->v[0]))
		return fail(err, len, "query '%s': value longer than %zu bytes", key, sizeof(l->v[0]) - 1);
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return fail(err, len, "query '%s': value holds a control character", key);
	snprintf(l->v[l->n++], sizeof(l->v[0]), "%s", v);
	return 0;
}

#define ADD_NUM(arr, n, key, value, max, what)                                                     \
	do {                                                                                       \
		uint64_t v_;                                                                       \
		if (parse_u64(value, max, &v_))                                                    \
			return fail(err, errlen, "query '%s': '%.64s' is not %s", key, value, what);  \
		if (n == HL_FILTER_MAX)                                                            \
			return fail(err, errlen, "query '%s': more than %d values", key, HL_FILTER_MAX); \
		arr[n++] = (typeof(arr[0]))v_;                                                     \
	} while (0)

#define ADD_CIDR(arr, n, key, value)                                                               \
	do {                                                                                       \
		if (n == HL_FILTER_MAX)                                                            \
			return fail(err, errlen, "query '%s': more than %d values", key, HL_FILTER_MAX); \
		if (parse_cidr(value, &arr[n]))                                                    \
			return fail(err, errlen, "query '%s': '%.64s' is not an IP address or CIDR", key, value); \
		n++;                                                                               \
	} while (0)

/* Room for one more value of a list key (n its count), else return the error. */
#define ROOM(n, key)                                                                               \
	do {                                                                                       \
		if ((n) == HL_FILTER_MAX)                                                          \
			return fail(err, errlen, "query '%s': more than %d values", key, HL_FILTER_MAX); \
	} while (0)

int hl_filter_set(struct hl_filter *f, const char *key, const char *value, uint64_t now_ns,
		  char *err, size_t errlen)
{
	if (!strcmp(key, "pod")) return add_str(&f->pod, key, value, err, errlen);
	if (!strcmp(key, "from-pod")) return add_str(&f->from_pod, key, value, err, errlen);
	if (!strcmp(key, "to-pod")) return add_str(&f->to_pod, key, value, err, errlen);
	if (!strcmp(key, "namespace")) return add_str(&f->ns, key, value, err, errlen);
	if (!strcmp(key, "from-namespace")) return add_str(&f->from_ns, key, value, err, errlen);
	if (!strcmp(key, "to-namespace")) return add_str(&f->to_ns, key, value, err, errlen);
	if (!strcmp(key, "label")) return add_str(&f->label, key, value, err, errlen);
	if (!strcmp(key, "from-label")) return add_str(&f->from_label, key, value, err, errlen);
	if (!strcmp(key, "to-label")) return add_str(&f->to_label, key, value, err, errlen);
	if (!strcmp(key, "service")) return add_str(&f->service, key, value, err, errlen);
	if (!strcmp(key, "from-service")) return add_str(&f->from_service, key, value, err, errlen);
	if (!strcmp(key, "to-service")) return add_str(&f->to_service, key, value, err, errlen);
	if (!strcmp(key, "ip")) { ADD_CIDR(f->ip, f->nip, key, value); return 0; }
	if (!strcmp(key, "from-ip")) { ADD_CIDR(f->from_ip, f->nfrom_ip, key, value); return 0; }
	if (!strcmp(key, "to-ip")) { ADD_CIDR(f->to_ip, f->nto_ip, key, value); return 0; }
	if (!strcmp(key, "identity")) { ADD_NUM(f->identity, f->nidentity, key, value, UINT32_MAX, "an identity"); return 0; }
	if (!strcmp(key, "from-identity")) { ADD_NUM(f->from_identity, f->nfrom_identity, key, value, UINT32_MAX, "an identity"); return 0; }
	if (!strcmp(key, "to-identity")) { ADD_NUM(f->to_identity, f->nto_identity, key, value, UINT32_MAX, "an identity"); return 0; }
	if (!strcmp(key, "port")) { ADD_NUM(f->port, f->nport, key, value, 65535, "a port"); return 0; }
	if (!strcmp(key, "from-port")) { ADD_NUM(f->from_port, f->nfrom_port, key, value, 65535, "a port"); return 0; }
	if (!strcmp(key, "to-port")) { ADD_NUM(f->to_port, f->nto_port, key, value, 65535, "a port"); return 0; }
	if (!strcmp(key, "protocol")) {
		int proto = hl_proto_parse(value);
		if (proto < 0)
			return fail(err, errlen, "query 'protocol': '%.64s' is not tcp, udp, icmp, icmpv6, sctp or 0-255", value);
		ROOM(f->nproto, key);
		f->proto[f->nproto++] = (uint8_t)proto;
		return 0;
	}
	if (!strcmp(key, "verdict")) {
		int verdict;
		if (!strcasecmp(value, "forwarded"))
			verdict = HL_FORWARDED;
		else if (!strcasecmp(value, "dropped"))
			verdict = HL_DROPPED;
		else if (!strcasecmp(value, "error") || !strcasecmp(value, "audit") ||
			 !strcasecmp(value, "redirected") || !strcasecmp(value, "traced") ||
			 !strcasecmp(value, "translated"))
			verdict = HL_VERDICT_NEVER; /* Hubble's, never fibril's: no flow */
		else
			return fail(err, errlen, "query 'verdict': expected FORWARDED, DROPPED, ERROR, AUDIT, REDIRECTED, TRACED or TRANSLATED, not '%.64s'", value);
		ROOM(f->nverdict, key);
		f->verdict[f->nverdict++] = verdict;
		return 0;
	}
	if (!strcmp(key, "type")) {
		ROOM(f->ntype, key);
		struct hl_type_sel *t = &f->type[f->ntype];
		if (!strcasecmp(value, "drop"))
			t->type = HL_TYPE_DROP;
		else if (!strcasecmp(value, "trace"))
			t->type = HL_TYPE_TRACE;
		else if (!strcasecmp(value, "policy-verdict"))
			t->type = HL_TYPE_POLICY;
		else if (!strncasecmp(value, "trace:", 6)) {
			static const char *const points[] = {
				"to-endpoint", "to-stack", "to-overlay", "to-network", "to-proxy", "to-host",
				"from-endpoint", "from-stack", "from-overlay", "from-network", "from-proxy",
				"from-host", NULL};
			size_t i = 0;
			while (points[i] && strcasecmp(points[i], value + 6))
				i++;
			if (!points[i])
				return fail(err, errlen, "query 'type': trace sub-type '%.32s' is not one of to-endpoint, to-stack, to-overlay, to-network, to-proxy, to-host, from-endpoint, from-stack, from-overlay, from-network, from-proxy, from-host", value + 6);
			t->type = HL_TYPE_TRACE;
			for (size_t k = 0; points[i][k] && k < sizeof(t->trace_point) - 1; k++)
				t->trace_point[k] = points[i][k] == '-' ? '_' : (char)(points[i][k] & ~0x20);
		} else if (!strcasecmp(value, "capture") || !strcasecmp(value, "l7") ||
			   !strcasecmp(value, "trace-sock") || !strcasecmp(value, "agent") ||
			   !strcasecmp(value, "debug") || !strcasecmp(value, "recorder"))
			t->type = HL_TYPE_NEVER; /* Hubble's, never fibril's: no flow */
		else {
			memset(t, 0, sizeof(*t));
			return fail(err, errlen, "query 'type': expected drop, trace, trace:SUBTYPE, policy-verdict, capture, l7, trace-sock, agent, debug or recorder, not '%.64s'", value);
		}
		f->ntype++;
		return 0;
	}
	if (!strcmp(key, "drop-reason")) {
		const char *v = strncmp(value, "drop:", 5) ? value : value + 5;
		int code = hl_drop_reason_by_hubble_name(v);
		if (code < 0 && !hl_drop_reason_known(v))
			return fail(err, errlen, "query 'drop-reason': '%.64s' is neither a fibril drop reason (spoofed-source-ip, policy-denied, ...) nor a Hubble DropReason (POLICY_DENIED, ...)", v);
		ROOM(f->ndrop_reason, key);
		struct hl_reason_sel *r = &f->drop_reason[f->ndrop_reason++];
		if (code >= 0) /* Hubble's name: POLICY_DENIED */
			r->code = code;
		else
			snprintf(r->name, sizeof(r->name), "%s", v);
		return 0;
	}
	if (!strcmp(key, "traffic-direction")) {
		uint8_t dir;
		if (!strcasecmp(value, "ingress"))
			dir = 1;
		else if (!strcasecmp(value, "egress"))
			dir = 2;
		else
			return fail(err, errlen, "query 'traffic-direction': expected ingress or egress, not '%.64s'", value);
		ROOM(f->ndirection, key);
		f->direction[f->ndirection++] = dir;
		return 0;
	}
	if (!strcmp(key, "ip-version")) {
		uint8_t ver;
		if (!strcasecmp(value, "4") || !strcasecmp(value, "v4") || !strcasecmp(value, "ipv4"))
			ver = 4;
		else if (!strcasecmp(value, "6") || !strcasecmp(value, "v6") || !strcasecmp(value, "ipv6"))
			ver = 6;
		else if (!strcasecmp(value, "none"))
			ver = 1; /* not IP: ARP */
		else
			return fail(err, errlen, "query 'ip-version': expected v4, v6, none, 4 or 6, not '%.64s'", value);
		ROOM(f->nip_version, key);
		f->ip_version[f->nip_version++] = ver;
		return 0;
	}
	if (!strcmp(key, "tcp-flags")) {
		static const char *const names[] = {"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"};
		uint8_t set = 0;
		char tmp[64];
		if (strlen(value) >= sizeof(tmp) || f->ntcp_flags >= HL_FILTER_MAX)
			return fail(err, errlen, "query 'tcp-flags': too long or too many");
		snprintf(tmp, sizeof(tmp), "%s", value);
		char *save = NULL;
		for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			int i = 0;
			while (i < 8 && strcasecmp(names[i], t))
				i++;
			if (i == 8)
				return fail(err, errlen, "query 'tcp-flags': '%.16s' is not one of SYN, FIN, RST, PSH, ACK, URG, ECE, CWR", t);
			set |= (uint8_t)(1u << i);
		}
		if (!set)
			return fail(err, errlen, "query 'tcp-flags': expected flags such as SYN or SYN,ACK");
		f->tcp_flags[f->ntcp_flags++] = set;
		return 0;
	}
	if (!strcmp(key, "since") || !strcmp(key, "until")) {
		uint64_t *t = key[0] == 's' ? &f->since_ns : &f->until_ns;
		if (parse_time(value, now_ns, t))
			return fail(err, errlen, "query '%s': '%.64s' is not RFC 3339 UTC, a duration ago (30s, 5m, 2h, 1d) or Unix seconds", key, value);
		return 0;
	}
	if (!strcmp(key, "last")) {
		if (parse_u64(value, 1u << 24, &f->last) || f->last == 0)
			return fail(err, errlen, "query 'last': expected a count from 1 to %u, not '%.64s'", 1u << 24, value);
		return 0;
	}
	return fail(err, errlen, "unknown query '%.64s'", key);
}

static int unhex(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decode [s, s+n) into out (at most len-1 bytes); -1 on a bad escape,
 * an embedded NUL or an overlong value. */
static int decode(const char *s, size_t n, char *out, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (c == '+')
			c = ' ';
		else if (c == '%') {
			if (i + 2 >= n)
				return -1;
			int h = unhex((unsigned char)s[i + 1]), l = unhex((unsigned char)s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = h * 16 + l;
			i += 2;
		}
		if (c == 0 || o + 1 >= len)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}

int hl_filter_parse_query(struct hl_filter *f, const char *query, uint64_t now_ns, char *err,
			  size_t errlen)
{
	const char *p = query;
	while (p && *p) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		if (n) {
			const char *eq = memchr(p, '=', n);
			size_t kn = eq ? (size_t)(eq - p) : n;
			char key[32], value[512];
			if (decode(p, kn, key, sizeof(key)))
				return fail(err, errlen, "query: a malformed or overlong key");
			if (decode(eq ? eq + 1 : p + n, eq ? n - kn - 1 : 0, value, sizeof(value)))
				return fail(err, errlen, "query '%s': a malformed or overlong value", key);
			if (hl_filter_set(f, key, value, now_ns, err, errlen))
				return -1;
		}
		p = amp ? amp + 1 : NULL;
	}
	return 0;
}

/* ---- matching ------------------------------------------------------------------------------ */

/* "ns/pod" against both, or "pod" against the pod name. */
static bool pod_is(const struct hl_peer *p, const char *sel)
{
	if (!p->pod[0])
		return false;
	const char *slash = strchr(sel, '/');
	if (!slash)
		return strcmp(p->pod, sel) == 0;
	size_t nl = (size_t)(slash - sel);
	return strlen(p->ns) == nl && strncmp(p->ns, sel, nl) == 0 && strcmp(p->pod, slash + 1) == 0;
}

/* A label line "src:key=value" matches "src:key=value", "key=value", and
 * a bare "key" (any value). */
static bool label_is(const struct hl_peer *p, const char *sel)
{
	bool has_src = false, has_val = strchr(sel, '=') != NULL;
	const char *colon = strchr(sel, ':');
	if (colon && (!strchr(sel, '=') || colon < strchr(sel, '=')))
		has_src = true;
	for (const char *line = p->labels; *line;) {
		const char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line) : strlen(line);
		const char *cmp = line;
		size_t cn = n;
		if (!has_src) { /* drop the line's source */
			const char *c = memchr(line, ':', n);
			if (c) {
				cn = n - (size_t)(c + 1 - line);
				cmp = c + 1;
			}
		}
		if (!has_val) { /* compare the key only */
			const char *e = memchr(cmp, '=', cn);
			if (e)
				cn = (size_t)(e - cmp);
		}
		if (strlen(sel) == cn && strncmp(cmp, sel, cn) == 0)
			return true;
		if (!end)
			break;
		line = end + 1;
	}
	return false;
}

typedef bool (*peer_str_fn)(const struct hl_peer *p, const char *sel);

/* "ns/name" against both, or "name" against the service's name. */
static bool service_is(const struct hl_peer *p, const char *sel)
{
	if (!p->service.name[0])
		return false;
	const char *slash = strchr(sel, '/');
	if (!slash)
		return strcmp(p->service.name, sel) == 0;
	size_t nl = (size_t)(slash - sel);
	return strlen(p->service.ns) == nl && strncmp(p->service.ns, sel, nl) == 0 &&
	       strcmp(p->service.name, slash + 1) == 0;
}

static bool ns_is(const struct hl_peer *p, const char *sel)
{
	return p->pod[0] && strcmp(p->ns, sel) == 0;
}

/* Empty list: matches. Otherwise one of the values on the given sides. */
static bool strs_match(const struct hl_strs *l, peer_str_fn fn, const struct hl_peer *a,
		       const struct hl_peer *b)
{
	if (!l->n)
		return true;
	for (unsigned i = 0; i < l->n; i++)
		if (fn(a, l->v[i]) || (b && fn(b, l->v[i])))
			return true;
	return false;
}

static bool ip_match(const struct hl_cidr *c, unsigned n, uint8_t family, const struct hl_peer *a,
		     const struct hl_peer *b)
{
	if (!n)
		return true;
	for (unsigned i = 0; i < n; i++)
		if (cidr_contains(&c[i], family, a->addr) || (b && cidr_contains(&c[i], family, b->addr)))
			return true;
	return false;
}

static bool u32_match(const uint32_t *v, unsigned n, uint32_t x, const uint32_t *y)
{
	if (!n)
		return true;
	for (unsigned i = 0; i < n; i++)
		if (v[i] == x || (y && v[i] == *y))
			return true;
	return false;
}

static bool u16_match(const uint16_t *v, unsigned n, uint16_t x, const uint16_t *y)
{
	if (!n)
		return true;
	for (unsigned i = 0; i < n; i++)
		if (v[i] == x || (y && v[i] == *y))
			return true;
	return false;
}

/* Hubble's traffic_direction of a flow: 1 ingress, 2 egress (the policy's
 * when a policy decided it, else the program's side of the pod) */
static int flow_direction(const struct hl_flow *fl)
{
	bool ingress = fl->policy.match ? fl->policy.ingress : fl->direction != 0;
	return ingress ? 1 : 2;
}

static bool tcp_flags_match(const struct hl_filter *f, const struct hl_flow *fl)
{
	if (!f->ntcp_flags)
		return true;
	for (unsigned i = 0; fl->proto == 6 && i < f->ntcp_flags; i++)
		if ((fl->tcp_flags & f->tcp_flags[i]) == f->tcp_flags[i])
			return true;
	return false;
}

/* -t drop, -t trace, -t trace:to-stack (that observation point only), ... */
static bool type_is(const struct hl_type_sel *t, const struct hl_flow *fl)
{
	if (t->type != fl->type)
		return false;
	if (!t->trace_point[0])
		return true;
	const char *point = hl_trace_point(fl->reason_name, NULL);
	return point && !strcmp(point, t->trace_point);
}

/* A drop by fibril's reason name or by Hubble's DropReason number. */
static bool drop_reason_is(const struct hl_reason_sel *r, const struct hl_flow *fl)
{
	if (fl->verdict != HL_DROPPED)
		return false;
	if (r->name[0])
		return !strcmp(r->name, fl->reason_name);
	return hl_drop_reason_hubble(fl->reason_name, fl->policy.match) == (unsigned)r->code;
}

/* No values: true; else whether cond holds for one index i < n. */
#define ANY(n, cond)                                                                               \
	({                                                                                         \
		bool any_ = !(n);                                                                  \
		for (unsigned i = 0; !any_ && i < (n); i++)                                        \
			any_ = (cond);                                                             \
		any_;                                                                              \
	})

bool hl_filter_match(const struct hl_filter *f, const struct hl_flow *fl)
{
	const struct hl_peer *s = &fl->src, *d = &fl->dst;
	return strs_match(&f->pod, pod_is, s, d) && strs_match(&f->from_pod, pod_is, s, NULL) &&
	       strs_match(&f->to_pod, pod_is, d, NULL) && strs_match(&f->ns, ns_is, s, d) &&
	       strs_match(&f->from_ns, ns_is, s, NULL) && strs_match(&f->to_ns, ns_is, d, NULL) &&
	       strs_match(&f->label, label_is, s, d) && strs_match(&f->from_label, label_is, s, NULL) &&
	       strs_match(&f->to_label, label_is, d, NULL) &&
	       strs_match(&f->service, service_is, s, d) &&
	       strs_match(&f->from_service, service_is, s, NULL) &&
	       strs_match(&f->to_service, service_is, d, NULL) &&
	       ip_match(f->ip, f->nip, fl->family, s, d) &&
	       ip_match(f->from_ip, f->nfrom_ip, fl->family, s, NULL) &&
	       ip_match(f->to_ip, f->nto_ip, fl->family, d, NULL) &&
	       u32_match(f->identity, f->nidentity, s->identity, &d->identity) &&
	       u32_match(f->from_identity, f->nfrom_identity, s->identity, NULL) &&
	       u32_match(f->to_identity, f->nto_identity, d->identity, NULL) &&
	       u16_match(f->port, f->nport, s->port, &d->port) &&
	       u16_match(f->from_port, f->nfrom_port, s->port, NULL) &&
	       u16_match(f->to_port, f->nto_port, d->port, NULL) &&
	       ANY(f->nproto, f->proto[i] == fl->proto) && ANY(f->nverdict, f->verdict[i] == fl->verdict) &&
	       ANY(f->ntype, type_is(&f->type[i], fl)) &&
	       ANY(f->ndrop_reason, drop_reason_is(&f->drop_reason[i], fl)) &&
	       ANY(f->ndirection, f->direction[i] == flow_direction(fl)) &&
	       ANY(f->nip_version, f->ip_version[i] == 1 ? fl->family == 0 : f->ip_version[i] == fl->family) &&
	       tcp_flags_match(f, fl) &&
	       (!f->since_ns || fl->time_ns >= f->since_ns) && (!f->until_ns || fl->time_ns <= f->until_ns);
}

bool hl_query_match(const struct hl_query *q, const struct hl_flow *fl)
{
	return hl_filter_match(&q->f, fl) && !(q->has_not && hl_filter_match(&q->exclude, fl));
}
