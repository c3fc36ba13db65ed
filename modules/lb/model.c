/* modules/lb/model.c - the lb module's service model: addresses, the JSON
 * form of a service (strict: an unknown field, a bad address or port, a
 * duplicate backend is refused with one line naming it), the table that
 * hands out stable service IDs (1..65535, by frontend) and backend IDs (by
 * address, port and protocol, shared between services), and the small
 * hash both lookups use. Programming the maps is in maps.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb_int.h"

static void seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
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

/* ---- hash: 24-byte keys -> uint32, open addressing ------------------------- */
#define KEYSZ 24
struct lb_hash_slot {
	uint8_t key[KEYSZ];
	uint32_t val;
	uint8_t used; /* 0 empty, 1 used, 2 deleted */
};
struct lb_hash {
	struct lb_hash_slot *s;
	size_t cap, n, dead; /* cap: power of two */
};

static uint64_t hash_key(const uint8_t *k)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < KEYSZ; i++) {
		h ^= k[i];
		h *= 0x100000001b3ULL;
	}
	return h ^ (h >> 29);
}

struct lb_hash *lb_hash_new(size_t cap)
{
	struct lb_hash *h = calloc(1, sizeof(*h));
	size_t c = 16;
	while (c < cap * 2)
		c <<= 1;
	if (!h || !(h->s = calloc(c, sizeof(*h->s)))) {
		free(h);
		return NULL;
	}
	h->cap = c;
	return h;
}

void lb_hash_free(struct lb_hash *h)
{
	if (h)
		free(h->s);
	free(h);
}

static struct lb_hash_slot *hash_find(const struct lb_hash *h, const void *key)
{
	size_t i = hash_key(key) & (h->cap - 1);
	for (size_t probe = 0; probe < h->cap; probe++, i = (i + 1) & (h->cap - 1)) {
		struct lb_hash_slot *s = &h->s[i];
		if (!s->used)
			return NULL;
		if (s->used == 1 && !memcmp(s->key, key, KEYSZ))
			return s;
	}
	return NULL;
}

bool lb_hash_get(const struct lb_hash *h, const void *key, uint32_t *val)
{
	struct lb_hash_slot *s = hash_find(h, key);
	if (s && val)
		*val = s->val;
	return s != NULL;
}

static int hash_grow(struct lb_hash *h)
{
	struct lb_hash n = {.cap = h->cap * 2};
	if (!(n.s = calloc(n.cap, sizeof(*n.s))))
		return -ENOMEM;
	for (size_t i = 0; i < h->cap; i++) {
		if (h->s[i].used != 1)
			continue;
		size_t j = hash_key(h->s[i].key) & (n.cap - 1);
		while (n.s[j].used)
			j = (j + 1) & (n.cap - 1);
		n.s[j] = h->s[i];
		n.n++;
	}
	free(h->s);
	*h = n;
	return 0;
}

int lb_hash_put(struct lb_hash *h, const void *key, uint32_t val)
{
	struct lb_hash_slot *s = hash_find(h, key);
	if (s) {
		s->val = val;
		return 0;
	}
	if ((h->n + h->dead + 1) * 2 > h->cap) {
		int rc = hash_grow(h);
		if (rc)
			return rc;
		h->dead = 0;
	}
	size_t i = hash_key(key) & (h->cap - 1);
	while (h->s[i].used == 1)
		i = (i + 1) & (h->cap - 1);
	if (h->s[i].used == 2)
		h->dead--;
	memcpy(h->s[i].key, key, KEYSZ);
	h->s[i].val = val;
	h->s[i].used = 1;
	h->n++;
	return 0;
}

void lb_hash_del(struct lb_hash *h, const void *key)
{
	struct lb_hash_slot *s = hash_find(h, key);
	if (!s)
		return;
	s->used = 2;
	h->n--;
	h->dead++;
}

static void tuple_key(uint8_t key[KEYSZ], const struct lb_addr *a, uint16_t port, uint8_t proto)
{
	memset(key, 0, KEYSZ);
	memcpy(key, a->a, 16);
	memcpy(key + 16, &port, 2);
	key[18] = proto;
}

void lb_frontend_key(uint8_t key[KEYSZ], const struct lb_addr *a, uint16_t port, uint8_t proto)
{
	tuple_key(key, a, port, proto);
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
		seterr(err, errlen, "a record of %zu bytes (expected %d to %d)", len, LB_ORIGIN_HDR,
		       LB_ORIGIN_HDR + LB_NAME_MAX);
		return -EINVAL;
	}
	if (p[0] != 1) {
		seterr(err, errlen, "record version %u (expected 1)", p[0]);
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
		seterr(err, errlen, "record op %u (expected 1 set or 2 deleted)", out->op);
		return -EINVAL;
	}
	if (out->op == LB_ORIGIN_SET && out->source != LB_SRC_API && out->source != LB_SRC_K8S) {
		seterr(err, errlen, "record source %u (expected 0 api or 1 k8s)", out->source);
		return -EINVAL;
	}
	if (!out->id || !out->port) {
		seterr(err, errlen, "record with service ID %u, port %u", out->id, out->port);
		return -EINVAL;
	}
	size_t n = len - LB_ORIGIN_HDR;
	for (size_t i = 0; i < n; i++)
		if (p[LB_ORIGIN_HDR + i] < 0x20 || p[LB_ORIGIN_HDR + i] == 0x7f) {
			seterr(err, errlen, "record name with a control character at %zu", i);
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
		seterr(err, errlen, "backends[%zu]: expected an object", i);
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
				seterr(err, errlen,
				       "backends[%zu].address: '%s' is not an IP:port (port 1-65535)", i,
				       a ? short_str(a, q, sizeof(q)) : "(not a string)");
				return -EINVAL;
			}
			have_addr = true;
		} else if (!strcmp(key, "state")) {
			const char *st = json_object_is_type(val, json_type_string)
						 ? json_object_get_string(val)
						 : "";
			int v = name_index(st, state_names, 4);
			if (v < 0) {
				seterr(err, errlen,
				       "backends[%zu].state: '%s' is not one of active, terminating, "
				       "not-ready, maintenance", i, short_str(st, q, sizeof(q)));
				return -EINVAL;
			}
			out->state = (uint8_t)v;
		} else if (!strcmp(key, "id")) {
			/* an ID as printed by list/get: ignored (the table assigns) */
		} else {
			seterr(err, errlen, "backends[%zu]: unknown field '%s'", i,
			       short_str(key, q, sizeof(q)));
			return -EINVAL;
		}
	}
	if (!have_addr) {
		seterr(err, errlen, "backends[%zu]: field 'address' is required", i);
		return -EINVAL;
	}
	if (lb_addr_is_v4(&out->addr) != lb_addr_is_v4(&s->addr)) {
		seterr(err, errlen, "backends[%zu].address: its family differs from the frontend's", i);
		return -EINVAL;
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
		seterr(err, errlen, "a service must be a JSON object");
		return -EINVAL;
	}
	struct lb_svc *s = calloc(1, sizeof(*s));
	if (!s) {
		seterr(err, errlen, "out of memory");
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
				seterr(err, errlen, "id: expected an integer 1-%u", LB_SVC_ID_MAX);
				goto bad;
			}
			s->id = (uint16_t)u;
		} else if (!strcmp(key, "frontend")) {
			const char *a = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: NULL;
			if (!a || lb_parse_addrport(a, &s->addr, &s->port) < 0) {
				seterr(err, errlen, "frontend: '%s' is not an IP:port (port 1-65535)",
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
				seterr(err, errlen, "protocol: '%s' is not TCP, UDP or SCTP",
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
		} else if (!strcmp(key, "type")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: "";
			int t = name_index(p, type_names, 4);
			if (t < 0) {
				seterr(err, errlen,
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
				seterr(err, errlen, "name: expected a string of at most %d printable "
						    "characters", LB_NAME_MAX);
				goto bad;
			}
			snprintf(s->name, sizeof(s->name), "%s", p);
		} else if (!strcmp(key, "algorithm")) {
			const char *p = json_object_is_type(val, json_type_string)
						? json_object_get_string(val)
						: "";
			if (lb_algorithm_parse(p, &s->algorithm) < 0) {
				seterr(err, errlen, "algorithm: '%s' is not random or maglev",
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
			s->algorithm_set = true;
		} else if (!strcmp(key, "session-affinity")) {
			if (!json_object_is_type(val, json_type_boolean)) {
				seterr(err, errlen, "session-affinity: expected true or false");
				goto bad;
			}
			s->affinity = json_object_get_boolean(val);
		} else if (!strcmp(key, "session-affinity-timeout")) {
			if (!get_uint(val, LB_AFFINITY_TIMEOUT_MAX, &u) || !u) {
				seterr(err, errlen, "session-affinity-timeout: expected seconds, 1-%u",
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
				seterr(err, errlen, "%s: '%s' is not Cluster or Local", key,
				       short_str(p, q, sizeof(q)));
				goto bad;
			}
			if (key[1] == 'x')
				s->ext_local = local;
			else
				s->int_local = local;
		} else if (!strcmp(key, "backends")) {
			if (!json_object_is_type(val, json_type_array)) {
				seterr(err, errlen, "backends: expected an array");
				goto bad;
			}
			backends = val;
		} else if (!strcmp(key, "source") || !strcmp(key, "backend-count")) {
			/* printed by get: ignored on input */
		} else {
			seterr(err, errlen, "unknown field '%s'", short_str(key, q, sizeof(q)));
			goto bad;
		}
	}
	if (!have_fe) {
		seterr(err, errlen, "field 'frontend' is required");
		goto bad;
	}
	size_t n = backends ? json_object_array_length(backends) : 0;
	if (n > LB_BACKENDS_PER_SVC_MAX) {
		seterr(err, errlen, "backends: %zu is more than %u", n, LB_BACKENDS_PER_SVC_MAX);
		goto bad;
	}
	if (n && !(s->be = calloc(n, sizeof(*s->be)))) {
		seterr(err, errlen, "out of memory");
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
				seterr(err, errlen, "backends[%zu]: %s is listed twice (also at [%zu])",
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
		seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	struct json_object *o = json_tokener_parse_ex(tok, text, (int)(len > INT32_MAX ? INT32_MAX : len));
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success) {
		seterr(err, errlen, "the body is not valid JSON: %s", json_tokener_error_desc(jerr));
		json_object_put(o);
		return -EINVAL;
	}
	for (; used < len; used++)
		if (text[used] != ' ' && text[used] != '\n' && text[used] != '\t' && text[used] != '\r') {
			seterr(err, errlen, "the body has data after the JSON value");
			json_object_put(o);
			return -EINVAL;
		}
	int rc = lb_svc_from_json(o, out, err, errlen);
	json_object_put(o);
	return rc;
}

struct json_object *lb_svc_to_json(const struct lb_svc *s)
{
	static const char *const src[] = {"api", "k8s", "restored"};
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
	json_object_object_add(o, "source", json_object_new_string(s->source < 3 ? src[s->source] : "?"));
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
	return o;
}

/* ---- the table ------------------------------------------------------------------ */
int lb_table_init(struct lb_table *t, uint32_t be_max, uint32_t maglev_m, uint8_t default_alg)
{
	memset(t, 0, sizeof(*t));
	t->maps = (struct lb_maps){-1, -1, -1, -1, -1};
	t->be_max = be_max;
	t->maglev_m = maglev_m;
	t->default_algorithm = default_alg;
	t->next_be = 1;
	t->next_svc = 1;
	if (!(t->svc = calloc(LB_SVC_ID_MAX + 1, sizeof(*t->svc))) ||
	    !(t->be = calloc((size_t)be_max + 1, sizeof(*t->be))) || !(t->fe = lb_hash_new(1024)) ||
	    !(t->beh = lb_hash_new(1024)) ||
	    !(t->maglev_buf = calloc(maglev_m ? maglev_m : 1, sizeof(uint32_t))) ||
	    !(t->maglev_scratch = lb_maglev_scratch_new(LB_BACKENDS_PER_SVC_MAX)) ||
	    !(t->sel = calloc(LB_BACKENDS_PER_SVC_MAX, sizeof(*t->sel)))) {
		lb_table_free(t);
		return -ENOMEM;
	}
	return 0;
}

void lb_table_free(struct lb_table *t)
{
	if (t->svc)
		for (size_t i = 0; i <= LB_SVC_ID_MAX; i++)
			lb_svc_free(t->svc[i]);
	free(t->svc);
	free(t->be);
	lb_hash_free(t->fe);
	lb_hash_free(t->beh);
	free(t->maglev_buf);
	lb_maglev_scratch_free(t->maglev_scratch);
	free(t->sel);
	struct lb_maps maps = t->maps;
	memset(t, 0, sizeof(*t));
	t->maps = maps; /* the fds belong to the caller */
}

struct lb_svc *lb_table_get(const struct lb_table *t, uint16_t id)
{
	return id ? t->svc[id] : NULL;
}

struct lb_svc *lb_table_find(const struct lb_table *t, const struct lb_addr *a, uint16_t port,
			     uint8_t proto)
{
	uint8_t key[KEYSZ];
	uint32_t id;
	tuple_key(key, a, port, proto);
	return lb_hash_get(t->fe, key, &id) ? t->svc[id] : NULL;
}

/* A reference to the backend (addr, port, proto): its existing ID, or a
 * new one. Returns the ID, or 0 when the table is full. *created tells. */
static uint32_t backend_ref(struct lb_table *t, const struct lb_be_spec *b, uint8_t proto,
			    bool *created)
{
	uint8_t key[KEYSZ];
	uint32_t id;
	tuple_key(key, &b->addr, b->port, proto);
	*created = false;
	if (lb_hash_get(t->beh, key, &id)) {
		t->be[id].refs++;
		return id;
	}
	if (t->nbe >= t->be_max)
		return 0;
	for (uint32_t n = 0; n < t->be_max; n++) {
		id = t->next_be;
		t->next_be = t->next_be >= t->be_max ? 1 : t->next_be + 1;
		if (!t->be[id].refs)
			break;
	}
	if (lb_hash_put(t->beh, key, id) < 0)
		return 0;
	t->be[id] = (struct lb_be_ent){.addr = b->addr, .port = b->port, .proto = proto,
				       .state = b->state, .refs = 1};
	t->nbe++;
	*created = true;
	return id;
}

static void backend_unref(struct lb_table *t, uint32_t id, bool unprogram)
{
	struct lb_be_ent *e = &t->be[id];
	if (!id || !e->refs || --e->refs)
		return;
	uint8_t key[KEYSZ];
	tuple_key(key, &e->addr, e->port, e->proto);
	lb_hash_del(t->beh, key);
	if (unprogram)
		lb_maps_backend_del(t, id);
	memset(e, 0, sizeof(*e));
	t->nbe--;
}

static uint16_t free_svc_id(struct lb_table *t)
{
	for (uint32_t n = 0; n < LB_SVC_ID_MAX; n++) {
		uint16_t id = t->next_svc;
		t->next_svc = t->next_svc >= LB_SVC_ID_MAX ? 1 : (uint16_t)(t->next_svc + 1);
		if (!t->svc[id])
			return id;
	}
	return 0;
}

int lb_table_upsert(struct lb_table *t, struct lb_svc **specp, uint16_t *out_id, char *err,
		    size_t errlen)
{
	struct lb_svc *s = *specp;
	struct lb_svc *old = lb_table_find(t, &s->addr, s->port, s->proto);
	char fe[80];
	lb_format_addrport(&s->addr, s->port, fe, sizeof(fe));
	if (s->id && old && old->id != s->id) {
		seterr(err, errlen, "frontend %s/%s is service %u's, not %u", fe,
		       lb_proto_name(s->proto), old->id, s->id);
		return -EEXIST;
	}
	if (s->id && !old && t->svc[s->id]) {
		char ofe[80];
		lb_format_addrport(&t->svc[s->id]->addr, t->svc[s->id]->port, ofe, sizeof(ofe));
		seterr(err, errlen, "service id %u is taken by frontend %s/%s", s->id, ofe,
		       lb_proto_name(t->svc[s->id]->proto));
		return -EEXIST;
	}
	if (!s->algorithm_set)
		s->algorithm = old && old->restored ? old->algorithm : t->default_algorithm;
	if (s->algorithm == LB_ALG_MAGLEV && !t->maglev_m) {
		seterr(err, errlen, "algorithm maglev: no Maglev table size configured");
		return -EINVAL;
	}
	uint16_t id = old ? old->id : s->id ? s->id : free_svc_id(t);
	if (!id) {
		seterr(err, errlen, "no free service ID (all %u in use)", LB_SVC_ID_MAX);
		return -ENOSPC;
	}
	s->id = id;
	/* backend IDs: references taken on the new set first, the old set's
	 * released after the maps are written */
	size_t got = 0;
	int rc = 0;
	for (; got < s->nbe; got++) {
		bool created;
		uint32_t bid = backend_ref(t, &s->be[got], s->proto, &created);
		if (!bid) {
			seterr(err, errlen, "no free backend ID (all %u in use)", t->be_max);
			rc = -ENOSPC;
			break;
		}
		s->be[got].id = bid;
		bool changed = t->be[bid].state != s->be[got].state;
		t->be[bid].state = s->be[got].state;
		if ((created || changed) && (rc = lb_maps_backend_put(t, bid, err, errlen)) < 0) {
			got++;
			break;
		}
	}
	if (!rc)
		rc = lb_maps_program(t, s, old, err, errlen);
	if (rc < 0) {
		for (size_t i = 0; i < got; i++)
			backend_unref(t, s->be[i].id, true);
		if (old) /* restore the states the old set had */
			for (size_t i = 0; i < old->nbe; i++)
				t->be[old->be[i].id].state = old->be[i].state;
		s->id = 0;
		return rc;
	}
	if (old) {
		for (size_t i = 0; i < old->nbe; i++)
			backend_unref(t, old->be[i].id, true);
		lb_svc_free(old);
	} else {
		uint8_t key[KEYSZ];
		tuple_key(key, &s->addr, s->port, s->proto);
		if (lb_hash_put(t->fe, key, id) < 0) {
			seterr(err, errlen, "out of memory");
			return -ENOMEM; /* programmed, but unknown to the table: unreachable in practice */
		}
		t->nsvc++;
	}
	t->svc[id] = s;
	*specp = NULL;
	if (out_id)
		*out_id = id;
	return 0;
}

int lb_table_delete(struct lb_table *t, uint16_t id, char *err, size_t errlen)
{
	struct lb_svc *s = lb_table_get(t, id);
	if (!s) {
		seterr(err, errlen, "service %u does not exist", id);
		return -ENOENT;
	}
	int rc = lb_maps_unprogram(t, s, err, errlen);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < s->nbe; i++)
		backend_unref(t, s->be[i].id, true);
	uint8_t key[KEYSZ];
	tuple_key(key, &s->addr, s->port, s->proto);
	lb_hash_del(t->fe, key);
	t->svc[id] = NULL;
	t->nsvc--;
	lb_svc_free(s);
	return 0;
}

/* used by maps.c's restore: adopt a service read from the maps as is */
int lb_table_adopt(struct lb_table *t, struct lb_svc *s, char *err, size_t errlen);
int lb_table_adopt(struct lb_table *t, struct lb_svc *s, char *err, size_t errlen)
{
	uint8_t key[KEYSZ];
	if (t->svc[s->id] || lb_table_find(t, &s->addr, s->port, s->proto)) {
		seterr(err, errlen, "service %u: duplicate in the maps", s->id);
		return -EEXIST;
	}
	for (size_t i = 0; i < s->nbe; i++) {
		struct lb_be_spec *b = &s->be[i];
		struct lb_be_ent *e = &t->be[b->id];
		if (b->id > t->be_max) {
			seterr(err, errlen, "service %u: backend ID %u is above the maximum %u", s->id,
			       b->id, t->be_max);
			for (size_t j = 0; j < i; j++)
				backend_unref(t, s->be[j].id, false);
			return -ERANGE;
		}
		if (!e->refs) {
			tuple_key(key, &b->addr, b->port, s->proto);
			if (lb_hash_put(t->beh, key, b->id) < 0)
				return -ENOMEM;
			*e = (struct lb_be_ent){.addr = b->addr, .port = b->port, .proto = s->proto,
						.state = b->state};
			t->nbe++;
		}
		e->refs++;
		if (b->id >= t->next_be)
			t->next_be = b->id >= t->be_max ? 1 : b->id + 1;
	}
	tuple_key(key, &s->addr, s->port, s->proto);
	if (lb_hash_put(t->fe, key, s->id) < 0)
		return -ENOMEM;
	t->svc[s->id] = s;
	t->nsvc++;
	if (s->id >= t->next_svc)
		t->next_svc = s->id >= LB_SVC_ID_MAX ? 1 : (uint16_t)(s->id + 1);
	return 0;
}
