/* modules/kvstore-etcd/codec.c - what goes over the wire to etcd's JSON
 * gateway: base64 keys and values (modules/common/b64.c), the module's key
 * prefix and prefix ranges, int64 fields (strings in the gateway's JSON),
 * key-value pairs and error documents mapped to errnos. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "etcd.h"
#include "grow.h"
#include "jscan.h"

char *etcd_full_key(const struct etcd *e, const char *key, size_t *len)
{
	size_t klen = strlen(key);
	char *full = malloc(e->prefix_len + klen + 1);
	if (!full)
		return NULL;
	memcpy(full, e->prefix, e->prefix_len);
	memcpy(full + e->prefix_len, key, klen + 1);
	*len = e->prefix_len + klen;
	return full;
}

/* etcd's prefix end: the key with its last byte below 0xff incremented and
 * what follows dropped; "\0" (every key) when there is no such byte. */
char *etcd_range_end(const char *key, size_t len, size_t *end_len)
{
	char *end = malloc(len + 1);
	if (!end)
		return NULL;
	memcpy(end, key, len);
	while (len && (unsigned char)end[len - 1] == 0xff)
		len--;
	if (!len) {
		end[0] = '\0';
		*end_len = 1;
		return end;
	}
	end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
	*end_len = len;
	return end;
}

int etcd_json_add_bytes(struct json_object *obj, const char *name, const void *data, size_t len)
{
	char *b64 = mod_b64_encode(data, len);
	if (!b64)
		return -ENOMEM;
	int rc = json_object_object_add(obj, name, json_object_new_string(b64));
	free(b64);
	return rc ? -ENOMEM : 0;
}

int etcd_json_add_key(const struct etcd *e, struct json_object *obj, const char *key, bool prefix)
{
	size_t len, end_len;
	char *full = etcd_full_key(e, key, &len);
	if (!full)
		return -ENOMEM;
	int rc;
	if (len == 0 && prefix) /* the whole keyspace: key "\0", range_end "\0" */
		rc = etcd_json_add_bytes(obj, "key", "", 1);
	else
		rc = etcd_json_add_bytes(obj, "key", full, len);
	if (!rc && prefix) {
		char *end = etcd_range_end(full, len, &end_len);
		rc = end ? etcd_json_add_bytes(obj, "range_end", end, end_len) : -ENOMEM;
		free(end);
	}
	free(full);
	return rc;
}

int64_t etcd_json_int(struct json_object *obj, const char *name)
{
	struct json_object *v;
	if (!obj || !json_object_object_get_ex(obj, name, &v))
		return 0;
	return json_object_get_int64(v); /* parses the gateway's strings too */
}

int64_t etcd_header_revision(struct json_object *resp)
{
	struct json_object *h;
	if (!resp || !json_object_object_get_ex(resp, "header", &h))
		return 0;
	return etcd_json_int(h, "revision");
}

struct json_object *etcd_json_parse(const char *text, size_t len)
{
	struct json_tokener *tok = json_tokener_new();
	if (!tok)
		return NULL;
	struct json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
	if (json_tokener_get_error(tok) != json_tokener_success ||
	    !json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		obj = NULL;
	}
	json_tokener_free(tok);
	return obj;
}

/* gRPC status codes as errnos. */
static int grpc_errno(int64_t code)
{
	switch (code) {
	case 3: /* InvalidArgument */
	case 9: /* FailedPrecondition */
		return -EINVAL;
	case 4: /* DeadlineExceeded */
		return -ETIMEDOUT;
	case 5: /* NotFound */
		return -ENOENT;
	case 7:  /* PermissionDenied */
	case 16: /* Unauthenticated */
		return -EACCES;
	case 8: /* ResourceExhausted */
		return -ENOSPC;
	case 11: /* OutOfRange: compacted */
		return -ERANGE;
	case 14: /* Unavailable */
		return -ENOTCONN;
	default:
		return -EIO;
	}
}

/* {"error":"...","message":"...","code":N} from unary calls, or
 * {"error":{"grpc_code":N,"message":"..."}} inside a stream. */
int etcd_json_error(struct json_object *resp, char *msg, size_t len)
{
	struct json_object *err = NULL, *m = NULL;
	int64_t code = 2;
	if (!json_object_object_get_ex(resp, "error", &err)) {
		snprintf(msg, len, "unexpected answer");
		return -EIO;
	}
	if (json_object_is_type(err, json_type_object)) {
		code = etcd_json_int(err, "grpc_code");
		json_object_object_get_ex(err, "message", &m);
	} else {
		code = etcd_json_int(resp, "code");
		if (!json_object_object_get_ex(resp, "message", &m))
			m = err;
	}
	snprintf(msg, len, "%s", m ? json_object_get_string(m) : "etcd error");
	return grpc_errno(code);
}

static int decode_field(struct json_object *obj, const char *name, char **out, size_t *len)
{
	struct json_object *v;
	if (!json_object_object_get_ex(obj, name, &v)) {
		*out = strdup("");
		*len = 0;
		return *out ? 0 : -ENOMEM;
	}
	return mod_b64_decode(json_object_get_string(v), out, len);
}

int etcd_kv_parse(const struct etcd *e, struct json_object *obj, struct fibril_kv *kv)
{
	char *key = NULL, *value = NULL;
	size_t klen = 0, vlen = 0;
	memset(kv, 0, sizeof(*kv));
	if (decode_field(obj, "key", &key, &klen) || decode_field(obj, "value", &value, &vlen)) {
		free(key);
		return -EIO;
	}
	if (klen >= e->prefix_len && memcmp(key, e->prefix, e->prefix_len) == 0)
		memmove(key, key + e->prefix_len, klen - e->prefix_len + 1);
	kv->key = key;
	kv->value = value;
	kv->value_len = vlen;
	kv->create_revision = etcd_json_int(obj, "create_revision");
	kv->mod_revision = etcd_json_int(obj, "mod_revision");
	kv->version = etcd_json_int(obj, "version");
	kv->lease = etcd_json_int(obj, "lease");
	return 0;
}

void etcd_kv_clear(struct fibril_kv *kv)
{
	free((char *)kv->key);
	free((char *)kv->value);
	memset(kv, 0, sizeof(*kv));
}

int etcd_kvs_append(const struct etcd *e, struct etcd_kvs *kvs, struct json_object *arr)
{
	if (arr && !json_object_is_type(arr, json_type_array))
		return -EIO; /* "kvs" that is not a list (json-c would assert) */
	size_t n = arr ? json_object_array_length(arr) : 0;
	if (kvs->n + n > kvs->cap) {
		struct fibril_kv *v = realloc(kvs->v, (kvs->n + n) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		kvs->v = v;
		kvs->cap = kvs->n + n;
	}
	for (size_t i = 0; i < n; i++) {
		if (etcd_kv_parse(e, json_object_array_get_idx(arr, i), &kvs->v[kvs->n]))
			return -EIO;
		kvs->n++;
	}
	return 0;
}

void etcd_kvs_free(struct etcd_kvs *kvs)
{
	for (size_t i = 0; !kvs->arena && i < kvs->n; i++)
		etcd_kv_clear(&kvs->v[i]);
	free(kvs->arena);
	free(kvs->v);
	memset(kvs, 0, sizeof(*kvs));
}

/* ---- range answers without json-c ---------------------------------------------------
 * A page of 1,000 keys is ~300 KB of JSON: json-c would build an object per
 * field and the pairs a malloc per key and value. The scanner walks the
 * text once and decodes every key and value into one buffer (the arena). */

/* a base64 string member into the arena: *out its text there */
static bool scan_b64(struct mod_jscan *s, char **arena_at, const char **out, size_t *len)
{
	const char *v;
	size_t vl;
	if (!mod_jscan_string(s, &v, &vl) || mod_b64_decode_into(v, vl, *arena_at, len))
		return false;
	*out = *arena_at;
	*arena_at += *len + 1;
	return true;
}

static bool scan_kv(const struct etcd *e, struct mod_jscan *s, char **arena_at, struct fibril_kv *kv)
{
	const char *k;
	size_t kl, klen = 0;
	int r;
	memset(kv, 0, sizeof(*kv));
	kv->key = kv->value = "";
	if (!mod_jscan_open(s, '{'))
		return false;
	while ((r = mod_jscan_member(s, &k, &kl)) == 1) {
		bool ok;
		if (MOD_JSCAN_IS(k, kl, "key"))
			ok = scan_b64(s, arena_at, &kv->key, &klen);
		else if (MOD_JSCAN_IS(k, kl, "value"))
			ok = scan_b64(s, arena_at, &kv->value, &kv->value_len);
		else if (MOD_JSCAN_IS(k, kl, "create_revision"))
			ok = mod_jscan_int(s, &kv->create_revision, NULL);
		else if (MOD_JSCAN_IS(k, kl, "mod_revision"))
			ok = mod_jscan_int(s, &kv->mod_revision, NULL);
		else if (MOD_JSCAN_IS(k, kl, "version"))
			ok = mod_jscan_int(s, &kv->version, NULL);
		else if (MOD_JSCAN_IS(k, kl, "lease"))
			ok = mod_jscan_int(s, &kv->lease, NULL);
		else
			ok = mod_jscan_skip(s);
		if (!ok)
			return false;
	}
	if (r)
		return false;
	if (klen >= e->prefix_len && memcmp(kv->key, e->prefix, e->prefix_len) == 0)
		kv->key += e->prefix_len;
	return true;
}

static bool scan_header(struct mod_jscan *s, int64_t *revision)
{
	const char *k;
	size_t kl;
	int r;
	if (!mod_jscan_open(s, '{'))
		return false;
	while ((r = mod_jscan_member(s, &k, &kl)) == 1)
		if (!(MOD_JSCAN_IS(k, kl, "revision") ? mod_jscan_int(s, revision, NULL)
						      : mod_jscan_skip(s)))
			return false;
	return r == 0;
}

static bool scan_range(const struct etcd *e, struct mod_jscan *s, struct etcd_kvs *kvs,
		       bool *more, int64_t *revision)
{
	const char *k;
	size_t kl;
	int r;
	bool seen_kvs = false, seen_header = false, seen_more = false;
	if (!mod_jscan_open(s, '{'))
		return false;
	while ((r = mod_jscan_member(s, &k, &kl)) == 1) {
		if (MOD_JSCAN_IS(k, kl, "kvs")) {
			if (seen_kvs || !mod_jscan_open(s, '['))
				return false; /* twice: json-c keeps the last one */
			seen_kvs = true;
			char *arena_at = kvs->arena;
			int er;
			while ((er = mod_jscan_element(s)) == 1) {
				struct fibril_kv *v = mod_grow(kvs->v, kvs->n, &kvs->cap, sizeof(*v), 64);
				if (!v)
					return false;
				kvs->v = v;
				if (!scan_kv(e, s, &arena_at, &kvs->v[kvs->n]))
					return false;
				kvs->n++;
			}
			if (er)
				return false;
		} else if (MOD_JSCAN_IS(k, kl, "header")) {
			if (seen_header || !scan_header(s, revision))
				return false;
			seen_header = true;
		} else if (MOD_JSCAN_IS(k, kl, "more")) {
			if (seen_more || !mod_jscan_bool(s, more))
				return false;
			seen_more = true;
		} else if (MOD_JSCAN_IS(k, kl, "error")) {
			return false; /* an error document: json-c reads it */
		} else if (!mod_jscan_skip(s)) {
			return false;
		}
	}
	return r == 0 && mod_jscan_at_end(s);
}

int etcd_range_scan(const struct etcd *e, const char *text, size_t len, struct etcd_kvs *kvs,
		    bool *more, int64_t *revision)
{
	struct mod_jscan s;
	memset(kvs, 0, sizeof(*kvs));
	*more = false;
	*revision = 0;
	/* every decoded string is shorter than its base64 text with its quotes */
	if (!(kvs->arena = malloc(len + 1)))
		return -ENOMEM;
	mod_jscan_init(&s, text, len);
	if (!scan_range(e, &s, kvs, more, revision)) {
		etcd_kvs_free(kvs);
		*more = false;
		*revision = 0;
		return -EAGAIN;
	}
	return 0;
}
