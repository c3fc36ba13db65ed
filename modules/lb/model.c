/* modules/lb/model.c - the lb module's service model: addresses, the JSON
 * form of a service (strict: an unknown field, a bad address or port, a
 * duplicate backend is refused with one line naming it), the names of
 * protocols, types, states and algorithms, and the origin record's
 * encoding. The table that hands out stable IDs is in table.c, programming
 * the maps in maps.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb_int.h"

void lb_seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	for (char *p = err; *p; p++) /* one line, whatever the input quoted */
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* ---- origin records ------------------------------------------------------------ */
size_t lb_origin_encode(const struct lb_origin_rec *rec, uint8_t *out)
{
	size_t n = rec->op == LB_ORIGIN_SET ? strnlen(rec->name, LB_NAME_MAX) : 0;
	out[0] = 1;
	out[1] = rec->op;
	out[2] = rec->source;
	out[3] = rec->proto;
	memcpy(out + 4, &rec->id, 2);
	memcpy(out + 6, &rec->port, 2);
	memcpy(out + 8, rec->addr.a, 16);
	memcpy(out + LB_ORIGIN_HDR, rec->name, n);
	return LB_ORIGIN_HDR + n;
}

int lb_origin_decode(const void *buf, size_t len, struct lb_origin_rec *out, char *err,
		     size_t errlen)
{
	const uint8_t *p = buf;
	if (len < LB_ORIGIN_HDR || len > LB_ORIGIN_HDR + LB_NAME_MAX) {
		lb_seterr(err, errlen, "a record of %zu bytes (expected %d to %d)", len, LB_ORIGIN_HDR,
		       LB_ORIGIN_HDR + LB_NAME_MAX);
		return -EINVAL;
	}
	if (p[0] != 1) {
		lb_seterr(err, errlen, "record version %u (expected 1)", p[0]);
		return -EINVAL;
	}
	memset(out, 0, sizeof(*out));
	out->op = p[1];
	out->source = p[2];
	out->proto = p[3];
	memcpy(&out->id, p + 4, 2);
	memcpy(&out->port, p + 6, 2);
	memcpy(out->addr.a, p + 8, 16);
	if (out->op != LB_ORIGIN_SET && out->op != LB_ORIGIN_DELETED) {
		lb_seterr(err, errlen, "record op %u (expected 1 set or 2 deleted)", out->op);
		return -EINVAL;
	}
	if (out->op == LB_ORIGIN_SET && !LB_SRC_RECORDED(out->source)) {
		lb_seterr(err, errlen, "record source %u (expected 0 api, 1 k8s or 3 hostport)",
			  out->source);
		return -EINVAL;
	}
	if (!out->id || !out->port) {
		lb_seterr(err, errlen, "record with service ID %u, port %u", out->id, out->port);
		return -EINVAL;
	}
	size_t n = len - LB_ORIGIN_HDR;
	for (size_t i = 0; i < n; i++)
		if (p[LB_ORIGIN_HDR + i] < 0x20 || p[LB_ORIGIN_HDR + i] == 0x7f) {
			lb_seterr(err, errlen, "record name with a control character at %zu", i);
			return -EINVAL;
		}
	memcpy(out->name, p + LB_ORIGIN_HDR, n);
	out->name[n] = '\0';
	return 0;
}

/* ---- addresses --------------------------------------------------------------- */
static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool lb_addr_is_v4(const struct lb_addr *a)
{
	return !memcmp(a->a, v4_prefix, 12);
}

static int parse_addr(const char *s, struct lb_addr *out)
{
	struct in_addr v4;
	if (inet_pton(AF_INET, s, &v4) == 1) {
		memcpy(out->a, v4_prefix, 12);
		memcpy(out->a + 12, &v4, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, s, out->a) == 1 && !lb_addr_is_v4(out))
		return 0;
	return -EINVAL;
}

static bool addr_unusable(const struct lb_addr *a)
{
	static const uint8_t zero[16];
	if (lb_addr_is_v4(a))
		return !memcmp(a->a + 12, zero, 4) || a->a[12] >= 224; /* 0.0.0.0, multicast+ */
	return !memcmp(a->a, zero, 16) || a->a[0] == 0xff;
}

int lb_parse_addrport(const char *s, struct lb_addr *addr, uint16_t *port)
{
	char host[64];
	const char *colon;
	if (!s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(end - s - 1));
		host[end - s - 1] = '\0';
		colon = end + 1;
		if (strchr(host, '.') && !strchr(host, ':'))
			return -EINVAL;
	} else {
		colon = strrchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof(host) || memchr(s, ':', (size_t)(colon - s)))
			return -EINVAL;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
		if (strchr(host, ':'))
			return -EINVAL;
	}
	const char *p = colon + 1;
	if (!*p || strlen(p) > 5)
		return -EINVAL;
	unsigned v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v < 1 || v > 65535)
		return -EINVAL;
	if (parse_addr(host, addr) < 0 || addr_unusable(addr))
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

int lb_parse_cidr(const char *s, struct lb_cidr *out)
{
	char host[64];
	const char *slash = s ? strchr(s, '/') : NULL;
	if (!slash || (size_t)(slash - s) >= sizeof(host) || !slash[1] || strlen(slash + 1) > 3)
		return -EINVAL;
	memcpy(host, s, (size_t)(slash - s));
	host[slash - s] = '\0';
	unsigned v = 0;
	for (const char *p = slash + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(*p - '0');
	}
	memset(out, 0, sizeof(*out));
	if (parse_addr(host, &out->addr) < 0)
		return -EINVAL;
	bool v4 = lb_addr_is_v4(&out->addr) && !strchr(host, ':');
	if (v > (v4 ? 32u : 128u) || (!v4 && lb_addr_is_v4(&out->addr)))
		return -EINVAL;
	out->plen = (uint8_t)(v4 ? 96 + v : v);
	for (unsigned bit = out->plen; bit < 128; bit++) /* the host bits */
		out->addr.a[bit / 8] &= (uint8_t)~(0x80u >> (bit % 8));
	return 0;
}

void lb_format_cidr(const struct lb_cidr *c, char *out, size_t len)
{
	char buf[INET6_ADDRSTRLEN];
	bool v4 = lb_addr_is_v4(&c->addr) && c->plen >= 96;
	lb_format_addr(&c->addr, buf, sizeof(buf));
	snprintf(out, len, "%s/%u", buf, v4 ? c->plen - 96u : c->plen);
}

const char *lb_backend_addr_refusal(const struct lb_addr *a)
{
	static const uint8_t zero[16], loop6[16] = {[15] = 1};
	if (lb_addr_is_v4(a)) {
		const uint8_t *b = a->a + 12;
		if (b[0] == 127)
			return "loopback";
		if (b[0] == 169 && b[1] == 254)
			return "link-local";
		if (!memcmp(b, zero, 4))
			return "unspecified";
		if (b[0] >= 224)
			return "multicast";
		return NULL;
	}
	if (!memcmp(a->a, loop6, 16))
		return "loopback";
	if (a->a[0] == 0xfe && (a->a[1] & 0xc0) == 0x80)
		return "link-local";
	if (!memcmp(a->a, zero, 16))
		return "unspecified";
	if (a->a[0] == 0xff)
		return "multicast";
	return NULL;
}

void lb_format_addr(const struct lb_addr *a, char *out, size_t len)
{
	char buf[INET6_ADDRSTRLEN];
	if (lb_addr_is_v4(a))
		inet_ntop(AF_INET, a->a + 12, buf, sizeof(buf));
	else
		inet_ntop(AF_INET6, a->a, buf, sizeof(buf));
	snprintf(out, len, "%s", buf);
}

void lb_format_addrport(const struct lb_addr *a, uint16_t port, char *out, size_t len)
{
	char buf[INET6_ADDRSTRLEN];
	lb_format_addr(a, buf, sizeof(buf));
	if (lb_addr_is_v4(a))
		snprintf(out, len, "%s:%u", buf, port);
	else
		snprintf(out, len, "[%s]:%u", buf, port);
}

const char *lb_proto_name(uint8_t proto)
{
	switch (proto) {
	case IPPROTO_TCP: return "TCP";
	case IPPROTO_UDP: return "UDP";
	case IPPROTO_SCTP: return "SCTP";
	default: return "?";
	}
}

static const char *const type_names[] = {"ClusterIP", "NodePort", "ExternalIP", "LoadBalancer"};
static const char *const state_names[] = {"active", "terminating", "not-ready", "maintenance"};

const char *lb_type_name(uint8_t type)
{
	return type < 4 ? type_names[type] : "?";
}

const char *lb_state_name(uint8_t state)
{
	return state < 4 ? state_names[state] : "?";
}

const char *lb_algorithm_name(uint8_t alg)
{
	return alg == LB_ALG_MAGLEV ? "maglev" : "random";
}

int lb_algorithm_parse(const char *s, uint8_t *out)
{
	if (!strcmp(s, "random"))
		*out = LB_ALG_RANDOM;
	else if (!strcmp(s, "maglev"))
		*out = LB_ALG_MAGLEV;
	else
		return -EINVAL;
	return 0;
}

static int name_index(const char *s, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcasecmp(s, names[i]))
			return (int)i;
	return -1;
}

/* ---- JSON -------------------------------------------------------------------- */
void lb_svc_free(struct lb_svc *s)
{
	if (!s)
		return;
	free(s->be);
	free(s->ranges);
	free(s);
}

static const char *short_str(const char *s, char *buf, size_t len)
{
	snprintf(buf, len, "%s", s);
	if (strlen(s) >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
	return buf;
}

static int parse_backend(struct json_object *b, size_t i, const struct lb_svc *s,
			 struct lb_be_spec *out, char *err, size_t errlen)
{
	char q[80];
	if (!json_object_is_type(b, json_type_object)) {
		lb_seterr(err, errlen, "backends[%zu]: expected an object", i);
		return -EINVAL;
	}
	memset(out, 0, sizeof(*out));
	bool have_addr = false;
	json_object_object_foreach(b, key, val) {
		if (!strcmp(key, "address")) {
			const char *a = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: NULL;
			if (!a || lb_parse_addrport(a, &out->addr, &out->port) < 0) {
				lb_seterr(err, errlen,
				       "backends[%zu].address: '%s' is not an IP:port (port 1-65535)", i,
				       a ? short_str(a, q, sizeof(q)) : "(not a string)");
				return -EINVAL;
			}
			const char *why = lb_backend_addr_refusal(&out->addr);
			if (why) {
				lb_seterr(err, errlen, "backends[%zu].address: '%s' is a %s address, not a "
						       "backend", i, short_str(a, q, sizeof(q)), why);
				return -EINVAL;
			}
			have_addr = true;
		} else if (!strcmp(key, "state")) {
			const char *st = json_object_is_type(val, json_type_string)
						 ? json_object_get_string(val)
						 : "";
			int v = name_index(st, state_names, 4);
			if (v < 0) {
				lb_seterr(err, errlen,
				       "backends[%zu].state: '%s' is not one of active, terminating, "
				       "not-ready, maintenance", i, short_str(st, q, sizeof(q)));
				return -EINVAL;
			}
			out->state = (uint8_t)v;
		} else if (!strcmp(key, "id")) {
			/* an ID as printed by list/get: ignored (the table assigns) */
		} else {
			lb_seterr(err, errlen, "backends[%zu]: unknown field '%s'", i,
			       short_str(key, q, sizeof(q)));
			return -EINVAL;
		}
	}
	if (!have_addr) {
		lb_seterr(err, errlen, "backends[%zu]: field 'address' is required", i);
		return -EINVAL;
	}
	if (lb_addr_is_v4(&out->addr) != lb_addr_is_v4(&s->addr)) {
		lb_seterr(err, errlen, "backends[%zu].address: its family differs from the frontend's", i);
		return -EINVAL;
	}
	return 0;
}

/* "source-ranges": an array of CIDRs (loadBalancerSourceRanges) */
static int parse_ranges(struct json_object *v, struct lb_svc *s, char *err, size_t errlen)
{
	char q[80];
	if (!json_object_is_type(v, json_type_array)) {
		lb_seterr(err, errlen, "source-ranges: expected an array of CIDRs");
		return -EINVAL;
	}
	size_t n = json_object_array_length(v);
	if (n > LB_SRC_RANGES_PER_SVC_MAX) {
		lb_seterr(err, errlen, "source-ranges: %zu is more than %u", n, LB_SRC_RANGES_PER_SVC_MAX);
		return -EINVAL;
	}
	free(s->ranges);
	s->ranges = NULL;
	s->nranges = 0;
	if (n && !(s->ranges = calloc(n, sizeof(*s->ranges)))) {
		lb_seterr(err, errlen, "out of memory");
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(v, i);
		const char *c = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
		if (!c || lb_parse_cidr(c, &s->ranges[i]) < 0) {
			lb_seterr(err, errlen, "source-ranges[%zu]: '%s' is not a CIDR (address/prefix)", i,
				  c ? short_str(c, q, sizeof(q)) : "(not a string)");
			return -EINVAL;
		}
		s->nranges = i + 1;
	}
	return 0;
}

static bool get_uint(struct json_object *v, uint64_t max, uint64_t *out)
{
	if (!json_object_is_type(v, json_type_int))
		return false;
	errno = 0;
	int64_t x = json_object_get_int64(v);
	if (errno || x < 0 || (uint64_t)x > max)
		return false;
	*out = (uint64_t)x;
	return true;
}

int lb_svc_from_json(struct json_object *o, struct lb_svc **out, char *err, size_t errlen)
{
	char q[80];
	if (!json_object_is_type(o, json_type_object)) {
		lb_seterr(err, errlen, "a service must be a JSON object");
		return -EINVAL;
	}
	struct lb_svc *s = calloc(1, sizeof(*s));
	if (!s) {
		lb_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->proto = IPPROTO_TCP;
	s->affinity_timeout = LB_AFFINITY_TIMEOUT_DEFAULT;
	bool have_fe = false;
	struct json_object *backends = NULL;
	uint64_t u;
	json_object_object_foreach(o, key, val) {
		if (!strcmp(key, "id")) {
			if (!get_uint(val, LB_SVC_ID_MAX, &u) || !u) {
				lb_seterr(err, errlen, "id: expected an integer 1-%u", LB_SVC_ID_MAX);
				goto bad;
			}
			s->id = (uint16_t)u;
		} else if (!strcmp(key, "frontend")) {
			const char *a = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: NULL;
			if (!a || lb_parse_addrport(a, &s->addr, &s->port) < 0) {
				lb_seterr(err, errlen, "frontend: '%s' is not an IP:port (port 1-65535)",
				       a ? short_str(a, q, sizeof(q)) : "(not a string)");
				goto bad;
			}
			have_fe = true;
		} else if (!strcmp(key, "protocol")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: "";
			if (!strcasecmp(p, "TCP"))
				s->proto = IPPROTO_TCP;
			else if (!strcasecmp(p, "UDP"))
				s->proto = IPPROTO_UDP;
			else if (!strcasecmp(p, "SCTP"))
				s->proto = IPPROTO_SCTP;
			else {
				lb_seterr(err, errlen, "protocol: '%s' is not TCP, UDP or SCTP",
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
		} else if (!strcmp(key, "type")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: "";
			int t = name_index(p, type_names, 4);
			if (t < 0) {
				lb_seterr(err, errlen,
				       "type: '%s' is not ClusterIP, NodePort, ExternalIP or LoadBalancer",
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
			s->type = (uint8_t)t;
		} else if (!strcmp(key, "name")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: NULL;
			bool ok = p && strlen(p) <= LB_NAME_MAX;
			for (const char *c = p; ok && *c; c++)
				ok = (unsigned char)*c >= 0x20 && *c != 0x7f;
			if (!ok) {
				lb_seterr(err, errlen, "name: expected a string of at most %d printable "
						    "characters", LB_NAME_MAX);
				goto bad;
			}
			snprintf(s->name, sizeof(s->name), "%s", p);
		} else if (!strcmp(key, "algorithm")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: "";
			if (lb_algorithm_parse(p, &s->algorithm) < 0) {
				lb_seterr(err, errlen, "algorithm: '%s' is not random or maglev",
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
			s->algorithm_set = true;
		} else if (!strcmp(key, "session-affinity")) {
			if (!json_object_is_type(val, json_type_boolean)) {
				lb_seterr(err, errlen, "session-affinity: expected true or false");
				goto bad;
			}
			s->affinity = json_object_get_boolean(val);
		} else if (!strcmp(key, "session-affinity-timeout")) {
			if (!get_uint(val, LB_AFFINITY_TIMEOUT_MAX, &u) || !u) {
				lb_seterr(err, errlen, "session-affinity-timeout: expected seconds, 1-%u",
				       LB_AFFINITY_TIMEOUT_MAX);
				goto bad;
			}
			s->affinity_timeout = (uint32_t)u;
		} else if (!strcmp(key, "external-traffic-policy") ||
			   !strcmp(key, "internal-traffic-policy")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: "";
			bool local = !strcasecmp(p, "Local");
			if (!local && strcasecmp(p, "Cluster")) {
				lb_seterr(err, errlen, "%s: '%s' is not Cluster or Local", key,
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
			if (key[1] == 'x')
				s->ext_local = local;
			else
				s->int_local = local;
		} else if (!strcmp(key, "source-ranges")) {
			if (parse_ranges(val, s, err, errlen) < 0)
				goto bad;
		} else if (!strcmp(key, "backends")) {
			if (!json_object_is_type(val, json_type_array)) {
				lb_seterr(err, errlen, "backends: expected an array");
				goto bad;
			}
			backends = val;
		} else if (!strcmp(key, "source") || !strcmp(key, "backend-count")) {
			/* printed by get: ignored on input */
		} else {
			lb_seterr(err, errlen, "unknown field '%s'", short_str(key, q, sizeof(q)));
			goto bad;
		}
	}
	if (!have_fe) {
		lb_seterr(err, errlen, "field 'frontend' is required");
		goto bad;
	}
	size_t n = backends ? json_object_array_length(backends) : 0;
	if (n > LB_BACKENDS_PER_SVC_MAX) {
		lb_seterr(err, errlen, "backends: %zu is more than %u", n, LB_BACKENDS_PER_SVC_MAX);
		goto bad;
	}
	if (n && !(s->be = calloc(n, sizeof(*s->be)))) {
		lb_seterr(err, errlen, "out of memory");
		lb_svc_free(s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (parse_backend(json_object_array_get_idx(backends, i), i, s, &s->be[i], err,
				  errlen) < 0)
			goto bad;
		for (size_t j = 0; j < i; j++)
			if (!memcmp(&s->be[j].addr, &s->be[i].addr, sizeof(s->be[i].addr)) &&
			    s->be[j].port == s->be[i].port) {
				char a[64];
				lb_format_addrport(&s->be[i].addr, s->be[i].port, a, sizeof(a));
				lb_seterr(err, errlen, "backends[%zu]: %s is listed twice (also at [%zu])",
				       i, a, j);
				goto bad;
			}
		s->nbe = i + 1;
	}
	*out = s;
	return 0;
bad:
	lb_svc_free(s);
	return -EINVAL;
}

int lb_svc_parse(const char *text, size_t len, struct lb_svc **out, char *err, size_t errlen)
{
	struct json_tokener *tok = json_tokener_new();
	if (!tok) {
		lb_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	struct json_object *o = json_tokener_parse_ex(tok, text, (int)(len > INT32_MAX ? INT32_MAX : len));
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success) {
		lb_seterr(err, errlen, "the body is not valid JSON: %s", json_tokener_error_desc(jerr));
		json_object_put(o);
		return -EINVAL;
	}
	for (; used < len; used++)
		if (text[used] != ' ' && text[used] != '\n' && text[used] != '\t' && text[used] != '\r') {
			lb_seterr(err, errlen, "the body has data after the JSON value");
			json_object_put(o);
			return -EINVAL;
		}
	int rc = lb_svc_from_json(o, out, err, errlen);
	json_object_put(o);
	return rc;
}

struct json_object *lb_svc_to_json(const struct lb_svc *s)
{
	static const char *const src[] = {"api", "k8s", "restored", "hostport"};
	char buf[80];
	struct json_object *o = json_object_new_object();
	if (s->id)
		json_object_object_add(o, "id", json_object_new_int(s->id));
	lb_format_addrport(&s->addr, s->port, buf, sizeof(buf));
	json_object_object_add(o, "frontend", json_object_new_string(buf));
	json_object_object_add(o, "protocol", json_object_new_string(lb_proto_name(s->proto)));
	json_object_object_add(o, "type", json_object_new_string(lb_type_name(s->type)));
	if (s->name[0])
		json_object_object_add(o, "name", json_object_new_string(s->name));
	json_object_object_add(o, "source", json_object_new_string(s->source < 4 ? src[s->source] : "?"));
	json_object_object_add(o, "algorithm", json_object_new_string(lb_algorithm_name(s->algorithm)));
	json_object_object_add(o, "session-affinity", json_object_new_boolean(s->affinity));
	if (s->affinity)
		json_object_object_add(o, "session-affinity-timeout",
				       json_object_new_int64(s->affinity_timeout));
	json_object_object_add(o, "external-traffic-policy",
			       json_object_new_string(s->ext_local ? "Local" : "Cluster"));
	json_object_object_add(o, "internal-traffic-policy",
			       json_object_new_string(s->int_local ? "Local" : "Cluster"));
	struct json_object *arr = json_object_new_array();
	for (size_t i = 0; i < s->nbe; i++) {
		struct json_object *b = json_object_new_object();
		lb_format_addrport(&s->be[i].addr, s->be[i].port, buf, sizeof(buf));
		json_object_object_add(b, "id", json_object_new_int64(s->be[i].id));
		json_object_object_add(b, "address", json_object_new_string(buf));
		json_object_object_add(b, "state", json_object_new_string(lb_state_name(s->be[i].state)));
		json_object_array_add(arr, b);
	}
	json_object_object_add(o, "backends", arr);
	if (s->nranges) {
		struct json_object *r = json_object_new_array();
		for (size_t i = 0; i < s->nranges; i++) {
			lb_format_cidr(&s->ranges[i], buf, sizeof(buf));
			json_object_array_add(r, json_object_new_string(buf));
		}
		json_object_object_add(o, "source-ranges", r);
	}
	return o;
}
