/* modules/nodes/record.c - the node registry's record: the JSON value of
 * state/nodes/v1/<name> in the kvstore, written by each agent for itself
 * and read by every other one (outside input: every field is checked and a
 * bad record is refused as a whole, naming what was wrong).
 *   {"name": "node-1", "ipv4": "192.168.7.11", "ipv6": "fd07::11",
 *    "pod-cidrs": ["10.244.1.0/24", "fd00:1::/112"],
 *    "tunnel-endpoint": "192.168.7.11", "updated": 1764050000} */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "jscan.h"

bool nodes_name_valid(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len >= FIBRIL_NODE_NAME_LEN)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || c == '_'))
			return false;
	}
	return true;
}

const char *nodes_cidr_text(const struct fibril_node_cidr *c, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";
	inet_ntop(c->family == 4 ? AF_INET : AF_INET6, c->addr, a, sizeof(a));
	snprintf(buf, len, "%s/%u", a, c->prefix_len);
	return buf;
}

char *nodes_record_encode(const struct fibril_node *n)
{
	struct json_object *o = json_object_new_object();
	char a[INET6_ADDRSTRLEN], c[64];
	if (!o)
		return NULL;
	json_object_object_add(o, "name", json_object_new_string(n->name));
	if (n->has_ipv4)
		json_object_object_add(o, "ipv4", json_object_new_string(
						  inet_ntop(AF_INET, &n->ipv4, a, sizeof(a))));
	if (n->has_ipv6)
		json_object_object_add(o, "ipv6", json_object_new_string(
						  inet_ntop(AF_INET6, &n->ipv6, a, sizeof(a))));
	struct json_object *cidrs = json_object_new_array();
	for (uint32_t i = 0; i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++)
		json_object_array_add(cidrs, json_object_new_string(
						     nodes_cidr_text(&n->cidrs[i], c, sizeof(c))));
	json_object_object_add(o, "pod-cidrs", cidrs);
	if (n->has_tunnel_endpoint)
		json_object_object_add(o, "tunnel-endpoint",
				       json_object_new_string(inet_ntop(AF_INET, &n->tunnel_endpoint,
									a, sizeof(a))));
	json_object_object_add(o, "updated", json_object_new_int64(n->last_seen_unix));
	char *out = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return out;
}

static int bad(char *why, size_t len, const char *what)
{
	snprintf(why, len, "%s", what);
	return -EINVAL;
}

/* an optional string member: NULL when absent; -EINVAL when not a string */
static int member_string(struct json_object *o, const char *key, const char **out)
{
	struct json_object *v;
	*out = NULL;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return 0;
	if (!json_object_is_type(v, json_type_string))
		return -EINVAL;
	*out = json_object_get_string(v);
	return 0;
}

int nodes_cidr_parse(const char *text, struct fibril_node_cidr *out)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(text, '/');
	if (!slash || (size_t)(slash - text) >= sizeof(addr))
		return -EINVAL;
	memcpy(addr, text, (size_t)(slash - text));
	addr[slash - text] = '\0';
	char *end;
	if (slash[1] < '0' || slash[1] > '9')
		return -EINVAL;
	unsigned long plen = strtoul(slash + 1, &end, 10);
	if (*end)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, addr, out->addr) == 1) {
		out->family = 4;
		if (plen > 32)
			return -EINVAL;
	} else if (inet_pton(AF_INET6, addr, out->addr) == 1) {
		out->family = 6;
		if (plen > 128)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	out->prefix_len = (uint8_t)plen;
	/* host bits must be zero (a route's destination is a network) */
	unsigned bytes = out->family == 4 ? 4 : 16;
	for (unsigned bit = (unsigned)plen; bit < bytes * 8; bit++)
		if (out->addr[bit / 8] & (0x80u >> (bit % 8)))
			return -EINVAL;
	return 0;
}

int nodes_record_decode(const char *json, size_t len, const char *key_name,
			struct fibril_node *out, char *why, size_t whylen)
{
	struct json_tokener *tok = json_tokener_new();
	if (!tok)
		return bad(why, whylen, "out of memory");
	struct json_object *o = json_tokener_parse_ex(tok, json, (int)(len > 1 << 20 ? 1 << 20 : len));
	bool complete = json_tokener_get_error(tok) == json_tokener_success;
	json_tokener_free(tok);
	int rc = 0;
	memset(out, 0, sizeof(*out));
	out->sz = sizeof(*out);
	out->source = FIBRIL_NODE_SOURCE_KVSTORE;
	if (!o || !complete || len > 1 << 20) {
		rc = bad(why, whylen, "not a JSON document");
		goto done;
	}
	if (!json_object_is_type(o, json_type_object)) {
		rc = bad(why, whylen, "not a JSON object");
		goto done;
	}
	const char *name, *v4, *v6, *tep;
	if (member_string(o, "name", &name) || !name || !nodes_name_valid(name)) {
		rc = bad(why, whylen, "\"name\": missing or not a node name");
		goto done;
	}
	if (key_name && strcmp(name, key_name)) {
		snprintf(why, whylen, "\"name\" is not the key's node name %s", key_name);
		rc = -EINVAL;
		goto done;
	}
	snprintf(out->name, sizeof(out->name), "%s", name);
	if (member_string(o, "ipv4", &v4) || (v4 && inet_pton(AF_INET, v4, &out->ipv4) != 1)) {
		rc = bad(why, whylen, "\"ipv4\": not an IPv4 address");
		goto done;
	}
	out->has_ipv4 = v4 != NULL;
	if (member_string(o, "ipv6", &v6) || (v6 && inet_pton(AF_INET6, v6, &out->ipv6) != 1)) {
		rc = bad(why, whylen, "\"ipv6\": not an IPv6 address");
		goto done;
	}
	out->has_ipv6 = v6 != NULL;
	if (member_string(o, "tunnel-endpoint", &tep) ||
	    (tep && inet_pton(AF_INET, tep, &out->tunnel_endpoint) != 1)) {
		rc = bad(why, whylen, "\"tunnel-endpoint\": not an IPv4 address");
		goto done;
	}
	out->has_tunnel_endpoint = tep != NULL;
	struct json_object *cidrs;
	if (json_object_object_get_ex(o, "pod-cidrs", &cidrs) &&
	    !json_object_is_type(cidrs, json_type_null)) {
		if (!json_object_is_type(cidrs, json_type_array)) {
			rc = bad(why, whylen, "\"pod-cidrs\": not an array");
			goto done;
		}
		size_t n = json_object_array_length(cidrs);
		if (n > FIBRIL_NODE_MAX_CIDRS) {
			rc = bad(why, whylen, "\"pod-cidrs\": more than 4 CIDRs");
			goto done;
		}
		for (size_t i = 0; i < n; i++) {
			struct json_object *c = json_object_array_get_idx(cidrs, i);
			if (!json_object_is_type(c, json_type_string) ||
			    nodes_cidr_parse(json_object_get_string(c), &out->cidrs[i])) {
				rc = bad(why, whylen, "\"pod-cidrs\": an entry is not a network CIDR");
				goto done;
			}
		}
		out->n_cidrs = (uint32_t)n;
	}
	struct json_object *upd;
	if (json_object_object_get_ex(o, "updated", &upd) && json_object_is_type(upd, json_type_int))
		out->last_seen_unix = json_object_get_int64(upd);
done:
	if (o)
		json_object_put(o);
	return rc;
}

/* ---- the ipcache's record: state/ip/v1/default/<ip> ---------------------------------------
 * {"IP": "10.244.1.5", "HostIP": "192.168.7.11", "ID": 257, "Node": "node-1",
 *  "K8sNamespace": "default", "K8sPodName": "web-0"} (Cilium's field names) */

static bool ip_parse(const char *text, uint8_t *family, uint8_t *addr)
{
	memset(addr, 0, 16);
	if (inet_pton(AF_INET, text, addr) == 1) {
		*family = 4;
		return true;
	}
	if (inet_pton(AF_INET6, text, addr) == 1) {
		*family = 6;
		return true;
	}
	return false;
}

const char *nodes_ip_text(uint8_t family, const uint8_t *addr, char *buf, size_t len)
{
	if (!inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

char *nodes_ip_record_encode(const struct nodes_ip_record *r)
{
	struct json_object *o = json_object_new_object();
	char a[INET6_ADDRSTRLEN];
	if (!o)
		return NULL;
	json_object_object_add(o, "IP", json_object_new_string(nodes_ip_text(r->family, r->addr, a,
									      sizeof(a))));
	if (r->host_family)
		json_object_object_add(o, "HostIP", json_object_new_string(
						    nodes_ip_text(r->host_family, r->host, a, sizeof(a))));
	json_object_object_add(o, "ID", json_object_new_int64(r->identity));
	json_object_object_add(o, "Node", json_object_new_string(r->node));
	if (r->pod_namespace[0])
		json_object_object_add(o, "K8sNamespace", json_object_new_string(r->pod_namespace));
	if (r->pod_name[0])
		json_object_object_add(o, "K8sPodName", json_object_new_string(r->pod_name));
	char *out = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return out;
}

/* a printable text of at most max-1 bytes */
static bool text_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n >= max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

int nodes_ip_record_decode_json(const char *json, size_t len, const char *key_ip,
				struct nodes_ip_record *out, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	if (len > 4096)
		return bad(why, whylen, "longer than 4096 bytes");
	struct json_tokener *tok = json_tokener_new();
	if (!tok)
		return bad(why, whylen, "out of memory");
	struct json_object *o = json_tokener_parse_ex(tok, json, (int)len), *id;
	bool complete = json_tokener_get_error(tok) == json_tokener_success;
	json_tokener_free(tok);
	const char *ip, *host, *node, *ns, *pod;
	int rc = 0;
	if (!o || !complete) {
		rc = bad(why, whylen, "not a JSON document");
		goto done;
	}
	if (!json_object_is_type(o, json_type_object)) {
		rc = bad(why, whylen, "not a JSON object");
		goto done;
	}
	if (member_string(o, "IP", &ip) || !ip || !ip_parse(ip, &out->family, out->addr)) {
		rc = bad(why, whylen, "\"IP\": missing or not an IP address");
		goto done;
	}
	if (key_ip) {
		uint8_t kf, ka[16];
		if (!ip_parse(key_ip, &kf, ka) || kf != out->family || memcmp(ka, out->addr, 16)) {
			rc = bad(why, whylen, "\"IP\" is not the key's address");
			goto done;
		}
	}
	if (member_string(o, "HostIP", &host) ||
	    (host && !ip_parse(host, &out->host_family, out->host))) {
		rc = bad(why, whylen, "\"HostIP\": not an IP address");
		goto done;
	}
	if (!json_object_object_get_ex(o, "ID", &id) || !json_object_is_type(id, json_type_int) ||
	    json_object_get_int64(id) < 1 || json_object_get_int64(id) > UINT32_MAX) {
		rc = bad(why, whylen, "\"ID\": missing or not an identity number (1..4294967295)");
		goto done;
	}
	out->identity = (uint32_t)json_object_get_int64(id);
	if (member_string(o, "Node", &node) || !node || !nodes_name_valid(node)) {
		rc = bad(why, whylen, "\"Node\": missing or not a node name");
		goto done;
	}
	snprintf(out->node, sizeof(out->node), "%s", node);
	if (member_string(o, "K8sNamespace", &ns) || (ns && !text_ok(ns, sizeof(out->pod_namespace)))) {
		rc = bad(why, whylen, "\"K8sNamespace\": not a namespace name");
		goto done;
	}
	if (member_string(o, "K8sPodName", &pod) || (pod && !text_ok(pod, sizeof(out->pod_name)))) {
		rc = bad(why, whylen, "\"K8sPodName\": not a pod name");
		goto done;
	}
	snprintf(out->pod_namespace, sizeof(out->pod_namespace), "%s", ns ? ns : "");
	snprintf(out->pod_name, sizeof(out->pod_name), "%s", pod ? pod : "");
done:
	if (o)
		json_object_put(o);
	return rc;
}

/* ---- the same without json-c -------------------------------------------------------------
 * 100,000 records at a node's start: the scanner (jscan.h) reads a record
 * in place. It answers only for a record that is valid throughout; anything
 * else (an escape, a bad field, an error to name) is read again by json-c
 * above, so what is accepted and every error message stay json-c's. */

struct ip_fields {
	const char *v[5]; /* IP, HostIP, Node, K8sNamespace, K8sPodName (NULL: absent) */
	size_t len[5];
	int64_t id;
	bool has_id;
};

/* text (len bytes, no NUL) into buf as a C string; false when it does not fit */
static bool field_copy(char *buf, size_t size, const char *text, size_t len)
{
	if (len >= size)
		return false;
	memcpy(buf, text, len);
	buf[len] = '\0';
	return true;
}

static bool scan_ip_fields(const char *json, size_t len, struct ip_fields *f)
{
	static const char *const names[5] = {"IP", "HostIP", "Node", "K8sNamespace", "K8sPodName"};
	struct mod_jscan s;
	const char *k;
	size_t kl;
	int r;
	memset(f, 0, sizeof(*f));
	mod_jscan_init(&s, json, len);
	if (!mod_jscan_open(&s, '{'))
		return false;
	while ((r = mod_jscan_member(&s, &k, &kl)) == 1) {
		int which = -1;
		for (int i = 0; i < 5; i++)
			if (kl == strlen(names[i]) && !memcmp(k, names[i], kl))
				which = i;
		bool quoted = false;
		if (which >= 0) {
			if (mod_jscan_word(&s, "null"))
				f->v[which] = NULL; /* as absent (the last one wins, as json-c's) */
			else if (!mod_jscan_string(&s, &f->v[which], &f->len[which]))
				return false;
		} else if (MOD_JSCAN_IS(k, kl, "ID")) {
			if (!mod_jscan_int(&s, &f->id, &quoted) || quoted)
				return false;
			f->has_id = true;
		} else if (!mod_jscan_skip(&s)) {
			return false;
		}
	}
	return r == 0 && mod_jscan_at_end(&s);
}

static bool ip_field(const struct ip_fields *f, int i, uint8_t *family, uint8_t *addr)
{
	char text[INET6_ADDRSTRLEN];
	return field_copy(text, sizeof(text), f->v[i], f->len[i]) && ip_parse(text, family, addr);
}

/* 0: read (valid throughout); -EAGAIN: let json-c read it */
static int ip_record_scan(const char *json, size_t len, const char *key_ip,
			  struct nodes_ip_record *out)
{
	struct ip_fields f;
	memset(out, 0, sizeof(*out));
	if (len > 4096 || !scan_ip_fields(json, len, &f))
		return -EAGAIN;
	if (!f.v[0] || !ip_field(&f, 0, &out->family, out->addr))
		return -EAGAIN;
	if (key_ip) {
		uint8_t kf, ka[16];
		if (!ip_parse(key_ip, &kf, ka) || kf != out->family || memcmp(ka, out->addr, 16))
			return -EAGAIN;
	}
	if (f.v[1] && !ip_field(&f, 1, &out->host_family, out->host))
		return -EAGAIN;
	if (!f.has_id || f.id < 1 || f.id > UINT32_MAX)
		return -EAGAIN;
	out->identity = (uint32_t)f.id;
	if (!f.v[2] || !field_copy(out->node, sizeof(out->node), f.v[2], f.len[2]) ||
	    !nodes_name_valid(out->node))
		return -EAGAIN;
	/* a namespace or pod name: printable, shorter than its field (the
	 * scanner's strings hold no control byte) */
	if ((f.v[3] && !field_copy(out->pod_namespace, sizeof(out->pod_namespace), f.v[3], f.len[3])) ||
	    (f.v[4] && !field_copy(out->pod_name, sizeof(out->pod_name), f.v[4], f.len[4])))
		return -EAGAIN;
	return 0;
}

int nodes_ip_record_decode(const char *json, size_t len, const char *key_ip,
			   struct nodes_ip_record *out, char *why, size_t whylen)
{
	if (ip_record_scan(json, len, key_ip, out) == 0)
		return 0;
	return nodes_ip_record_decode_json(json, len, key_ip, out, why, whylen);
}
