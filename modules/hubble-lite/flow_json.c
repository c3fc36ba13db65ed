/* modules/hubble-lite/flow_json.c - the JSON of a flow, written straight
 * into a growing buffer (no DOM: the stream writes one per flow a follower
 * matches, up to hundreds of thousands a second), for GET /v1/flows and
 * /v1/flows/stream alike. Field names follow Hubble's flow JSON; the shape
 * is in modules/hubble-lite/README.md. */
#include "hubble.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool reserve(struct hl_buf *b, size_t more)
{
	if (b->failed)
		return false;
	if (b->len + more + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 1024;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void hl_buf_add(struct hl_buf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void hl_buf_str(struct hl_buf *b, const char *s)
{
	hl_buf_add(b, s, strlen(s));
}

/* Can fast_format write fmt? Only %s, %%, and integers (d i u with h l ll
 * z; a width only zero-padded and unsigned) - what the flow's JSON uses. */
static bool fast_format_ok(const char *fmt)
{
	for (const char *p = fmt; (p = strchr(p, '%')); p++) {
		p++;
		if (*p == '%' || *p == 's')
			continue;
		bool zero = *p == '0', width = false;
		if (zero)
			p++;
		for (; *p >= '0' && *p <= '9'; p++)
			width = true;
		if (width && !zero)
			return false;
		while (*p == 'l' || *p == 'h' || *p == 'z')
			p++;
		if (*p != 'u' && (zero || (*p != 'd' && *p != 'i')))
			return false;
	}
	return true;
}

/* An unsigned integer in decimal, at least width digits (zero-padded). */
static void add_uint(struct hl_buf *b, unsigned long long v, bool neg, unsigned width)
{
	char tmp[24];
	char *e = tmp + sizeof(tmp), *o = e;
	do {
		*--o = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while ((unsigned)(e - o) < width && o > tmp + 1)
		*--o = '0';
	if (neg)
		*--o = '-';
	hl_buf_add(b, o, (size_t)(e - o));
}

/* printf for the stream's hot path: vfprintf costs about a microsecond a
 * flow, most of the JSON's time; the formats used here are written
 * directly, anything else goes through vsnprintf. */
static void fast_format(struct hl_buf *b, const char *fmt, va_list ap)
{
	const char *p = fmt;
	while (*p) {
		const char *pct = strchr(p, '%');
		if (!pct) {
			hl_buf_add(b, p, strlen(p));
			return;
		}
		if (pct > p)
			hl_buf_add(b, p, (size_t)(pct - p));
		p = pct + 1;
		if (*p == '%') {
			hl_buf_add(b, "%", 1);
			p++;
			continue;
		}
		if (*p == 's') {
			const char *v = va_arg(ap, const char *);
			hl_buf_str(b, v ? v : "(null)");
			p++;
			continue;
		}
		unsigned width = 0;
		if (*p == '0')
			p++;
		while (*p >= '0' && *p <= '9')
			width = width * 10 + (unsigned)(*p++ - '0');
		int longs = 0;
		bool size = false;
		for (; *p == 'l' || *p == 'h' || *p == 'z'; p++) {
			if (*p == 'l')
				longs++;
			else if (*p == 'z')
				size = true;
		}
		bool is_signed = *p != 'u';
		p++;
		if (is_signed) {
			long long v = size ? (long long)va_arg(ap, ssize_t)
				      : longs >= 2 ? va_arg(ap, long long)
				      : longs ? va_arg(ap, long) : va_arg(ap, int);
			add_uint(b, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v, v < 0,
				 width);
		} else {
			unsigned long long v = size ? va_arg(ap, size_t)
					       : longs >= 2 ? va_arg(ap, unsigned long long)
					       : longs ? va_arg(ap, unsigned long) : va_arg(ap, unsigned);
			add_uint(b, v, false, width);
		}
	}
}

void hl_buf_printf(struct hl_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (fast_format_ok(fmt)) {
		fast_format(b, fmt, ap);
		va_end(ap);
		return;
	}
	char tmp[256];
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		hl_buf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string of s (at most n bytes): quotes, backslashes and control
 * characters escaped; other bytes as they are (as json-c does). */
static void add_jstr_n(struct hl_buf *b, const char *s, size_t n)
{
	if (!reserve(b, n * 6 + 2))
		return;
	char *o = b->p + b->len;
	*o++ = '"';
	for (size_t i = 0; i < n && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c < 0x20) {
			static const char hex[] = "0123456789abcdef";
			memcpy(o, "\\u00", 4);
			o[4] = hex[c >> 4];
			o[5] = hex[c & 15];
			o += 6;
		} else {
			*o++ = (char)c;
		}
	}
	*o++ = '"';
	b->len = (size_t)(o - b->p);
	b->p[b->len] = '\0';
}

void hl_buf_jstr(struct hl_buf *b, const char *s)
{
	add_jstr_n(b, s, strlen(s));
}

void hl_buf_jstr_n(struct hl_buf *b, const char *s, size_t max)
{
	add_jstr_n(b, s, max);
}

/* A string literal, its length known at compile time. */
#define ADD_LIT(b, lit) hl_buf_add((b), (lit), sizeof(lit) - 1)

static void add_u(struct hl_buf *b, unsigned long long v)
{
	add_uint(b, v, false, 0);
}

/* "2026-11-25T07:40:01.123456789Z"; the part up to the seconds is kept for
 * the next flow of the same second. */
static void add_time(struct hl_buf *b, uint64_t ns)
{
	static __thread time_t cached = -1;
	static __thread char base[32];
	static __thread size_t base_len;
	time_t s = (time_t)(ns / 1000000000ULL);
	if (s != cached) {
		struct tm tm;
		gmtime_r(&s, &tm);
		/* with the quote before and the dot after */
		base_len = strftime(base, sizeof(base), "\"%Y-%m-%dT%H:%M:%S.", &tm);
		cached = s;
	}
	hl_buf_add(b, base, base_len);
	add_uint(b, ns % 1000000000ULL, false, 9);
	ADD_LIT(b, "Z\"");
}

const char *hl_tcp_flags_text(uint8_t fl, char *buf, size_t len)
{
	static const char *const names[] = {"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"};
	size_t off = 0;
	if (!len)
		return buf;
	for (int i = 0; i < 8; i++) {
		if (!(fl & (1u << i)))
			continue;
		size_t n = strlen(names[i]) + (off ? 1 : 0);
		if (off + n >= len)
			break;
		if (off)
			buf[off++] = ',';
		memcpy(buf + off, names[i], strlen(names[i]));
		off += strlen(names[i]);
	}
	buf[off] = '\0';
	return buf;
}

/* inet_ntop, without its sprintf for IPv4 (a third of a flow's JSON time) */
void hl_addr_text(int af, const uint8_t *addr, char *out)
{
	if (af != AF_INET) {
		inet_ntop(af, addr, out, INET6_ADDRSTRLEN);
		return;
	}
	char *o = out;
	for (int i = 0; i < 4; i++) {
		unsigned v = addr[i];
		if (v >= 100)
			*o++ = (char)('0' + v / 100);
		if (v >= 10)
			*o++ = (char)('0' + v / 10 % 10);
		*o++ = (char)('0' + v % 10);
		*o++ = i < 3 ? '.' : '\0';
	}
}

static void add_peer(struct hl_buf *b, const struct hl_peer *p)
{
	ADD_LIT(b, "{\"ID\":");
	add_u(b, p->ep_id);
	ADD_LIT(b, ",\"identity\":");
	add_u(b, p->identity);
	if (p->pod[0]) {
		hl_buf_str(b, ",\"namespace\":");
		add_jstr_n(b, p->ns, sizeof(p->ns));
		hl_buf_str(b, ",\"pod_name\":");
		add_jstr_n(b, p->pod, sizeof(p->pod));
	}
	ADD_LIT(b, ",\"labels\":[");
	bool first = true;
	for (const char *l = p->labels; *l;) {
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		if (!first)
			hl_buf_add(b, ",", 1);
		first = false;
		add_jstr_n(b, l, n);
		if (!end)
			break;
		l = end + 1;
	}
	ADD_LIT(b, "]}");
}

/* Hubble's source_service / destination_service: {"name","namespace"} */
static void add_service(struct hl_buf *b, const char *field, const struct hl_service *s)
{
	if (!s->name[0])
		return;
	ADD_LIT(b, ",\"");
	hl_buf_str(b, field);
	ADD_LIT(b, "\":{\"name\":");
	add_jstr_n(b, s->name, sizeof(s->name));
	hl_buf_str(b, ",\"namespace\":");
	add_jstr_n(b, s->ns, sizeof(s->ns));
	hl_buf_add(b, "}", 1);
}

/* "policy": the verdict's match, the policy direction that decided and
 * its rule (name, namespace, kind, section and index) when known. */
static void add_policy(struct hl_buf *b, const struct hl_policy *p)
{
	static const char *const match[] = {"", "allow", "deny", "default-deny"};
	if (!p->match || p->match > HL_POLICY_DEFAULT_DENY)
		return;
	ADD_LIT(b, ",\"policy\":{\"match\":\"");
	hl_buf_str(b, match[p->match]);
	if (p->ingress)
		ADD_LIT(b, "\",\"direction\":\"ingress\"");
	else
		ADD_LIT(b, "\",\"direction\":\"egress\"");
	if (p->rule_id) {
		ADD_LIT(b, ",\"rule_id\":");
		add_u(b, p->rule_id);
	}
	if (p->known) {
		hl_buf_str(b, ",\"name\":");
		add_jstr_n(b, p->name, sizeof(p->name));
		hl_buf_str(b, ",\"namespace\":");
		add_jstr_n(b, p->ns, sizeof(p->ns));
		hl_buf_str(b, ",\"kind\":");
		add_jstr_n(b, p->kind, sizeof(p->kind));
		hl_buf_str(b, ",\"source\":");
		add_jstr_n(b, p->source, sizeof(p->source));
		hl_buf_str(b, ",\"section\":");
		add_jstr_n(b, p->section, sizeof(p->section));
		ADD_LIT(b, ",\"spec\":");
		add_u(b, p->spec);
		ADD_LIT(b, ",\"rule_index\":");
		add_u(b, p->index);
	}
	hl_buf_add(b, "}", 1);
}

void hl_flow_json(struct hl_buf *b, const struct hl_flow *f, const char *node)
{
	/* literals and integers written directly: no format to read per flow */
	char buf[64];
	ADD_LIT(b, "{\"time\":");
	add_time(b, f->time_ns);
	ADD_LIT(b, ",\"seq\":");
	add_u(b, f->seq);
	if (f->verdict == HL_DROPPED)
		ADD_LIT(b, ",\"verdict\":\"DROPPED\",\"drop_reason_desc\":");
	else
		ADD_LIT(b, ",\"verdict\":\"FORWARDED\",\"trace_reason\":");
	add_jstr_n(b, f->reason_name, sizeof(f->reason_name));
	/* Hubble's names beside fibril's, for printers that speak Hubble's
	 * (the CLI's compact TYPE column): the DropReason number, the
	 * TraceObservationPoint */
	if (f->verdict == HL_DROPPED) {
		ADD_LIT(b, ",\"drop_reason\":");
		add_u(b, hl_drop_reason_hubble(f->reason_name, f->policy.match));
	}
	const char *point = f->type == HL_TYPE_TRACE ? hl_trace_point(f->reason_name, NULL) : NULL;
	if (point) {
		ADD_LIT(b, ",\"trace_observation_point\":\"");
		hl_buf_str(b, point);
		ADD_LIT(b, "\"");
	}
	ADD_LIT(b, ",\"type\":\"");
	hl_buf_str(b, f->type == HL_TYPE_DROP ? "drop" : f->type == HL_TYPE_POLICY ? "policy-verdict" : "trace");
	if (f->direction)
		ADD_LIT(b, "\",\"traffic_direction\":\"ingress\",\"node_name\":");
	else
		ADD_LIT(b, "\",\"traffic_direction\":\"egress\",\"node_name\":");
	hl_buf_jstr(b, node);
	ADD_LIT(b, ",\"observation_point\":\"");
	hl_buf_str(b, hl_observation_point_name(f->direction));
	ADD_LIT(b, "\"");
	if (f->family == 4 || f->family == 6) {
		char src[INET6_ADDRSTRLEN] = "", dst[INET6_ADDRSTRLEN] = "";
		int af = f->family == 4 ? AF_INET : AF_INET6;
		hl_addr_text(af, f->src.addr, src);
		hl_addr_text(af, f->dst.addr, dst);
		ADD_LIT(b, ",\"IP\":{\"source\":\"");
		hl_buf_str(b, src);
		ADD_LIT(b, "\",\"destination\":\"");
		hl_buf_str(b, dst);
		if (f->family == 4)
			ADD_LIT(b, "\",\"ipVersion\":\"IPv4\"}");
		else
			ADD_LIT(b, "\",\"ipVersion\":\"IPv6\"}");
	} else if (!f->family && (memcmp(f->src.addr, "\0\0\0\0", 4) || memcmp(f->dst.addr, "\0\0\0\0", 4))) {
		/* ARP: the sender's and the target's IPv4 addresses */
		char src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN];
		hl_addr_text(AF_INET, f->src.addr, src);
		hl_addr_text(AF_INET, f->dst.addr, dst);
		ADD_LIT(b, ",\"arp\":{\"sender\":\"");
		hl_buf_str(b, src);
		ADD_LIT(b, "\",\"target\":\"");
		hl_buf_str(b, dst);
		ADD_LIT(b, "\"}");
	}
	if (f->proto) {
		const char *pname = hl_proto_name(f->proto);
		ADD_LIT(b, ",\"l4\":{\"protocol\":");
		if (pname) {
			ADD_LIT(b, "\"");
			hl_buf_str(b, pname);
			ADD_LIT(b, "\"");
		} else {
			add_u(b, f->proto);
		}
		if (f->proto == 6 || f->proto == 17 || f->proto == 132) {
			ADD_LIT(b, ",\"source_port\":");
			add_u(b, f->src.port);
			ADD_LIT(b, ",\"destination_port\":");
			add_u(b, f->dst.port);
		}
		if ((f->proto == 1 || f->proto == 58) && f->icmp_known) {
			ADD_LIT(b, ",\"type\":");
			add_u(b, f->icmp_type);
			ADD_LIT(b, ",\"code\":");
			add_u(b, f->icmp_code);
		}
		if (f->proto == 6) {
			ADD_LIT(b, ",\"flags\":\"");
			hl_buf_str(b, hl_tcp_flags_text(f->tcp_flags, buf, sizeof(buf)));
			ADD_LIT(b, "\"");
		}
		ADD_LIT(b, "}");
	}
	ADD_LIT(b, ",\"source\":");
	add_peer(b, &f->src);
	ADD_LIT(b, ",\"destination\":");
	add_peer(b, &f->dst);
	add_service(b, "source_service", &f->src.service);
	add_service(b, "destination_service", &f->dst.service);
	add_policy(b, &f->policy);
	ADD_LIT(b, ",\"length\":");
	add_u(b, f->len);
	ADD_LIT(b, "}");
}
