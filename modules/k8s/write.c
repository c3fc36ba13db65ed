/* modules/k8s/write.c - the k8s capability's `request` (interface version 2,
 * SDK 1.11): one GET/POST/PUT/PATCH/DELETE of an object of a known
 * resource, sent once, answered with the HTTP status, the Status reason
 * (AlreadyExists, Conflict, ...) and the body, so that a caller can resolve
 * optimistic-concurrency races (CRD mode's identities, endpoints, nodes and
 * its GC Lease) by reading the winner. */
#include "k8s_mod.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#define K8S_WRITE_TIMEOUT_MS 30000

struct k8s_write {
	fibril_k8s_reply_fn cb;
	void *ud;
};

/* An RFC 1123 subdomain (what the API server accepts as a name). */
static bool good_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && !((c == '-' || c == '.') && i > 0 && i + 1 < n))
			return false;
	}
	return true;
}

static void on_write_done(struct k8s_req *q, int err)
{
	struct k8s_write *w = q->ud;
	char reason[64] = "";
	const char *body = q->buf && q->len ? q->buf : NULL;
	int status = (int)q->status;
	if (err == -EPROTO && status) {
		/* the server answered with an error: its Status names the reason */
		struct json_object *st = body ? json_tokener_parse(body) : NULL, *v;
		if (st && json_object_object_get_ex(st, "reason", &v) && json_object_is_type(v, json_type_string))
			snprintf(reason, sizeof(reason), "%s", json_object_get_string(v));
		json_object_put(st);
		err = 0;
	} else if (err) {
		status = 0;
		body = NULL;
	}
	w->cb(w->ud, status, reason, body, err, err ? q->errbuf : "");
	free(w);
}

int k8s_op_request(void *ctx, const char *method, const char *resource, const char *namespace_,
		   const char *name, const char *body, fibril_k8s_reply_fn cb, void *ud)
{
	struct k8s *k = ctx;
	if (!cb || !method || !resource)
		return -EINVAL;
	struct k8s_res *r = k8s_res_find(k, resource);
	if (!r)
		return -ENOENT;
	bool create = strcmp(method, "POST") == 0;
	const char *ctype = NULL;
	if (create || strcmp(method, "PUT") == 0)
		ctype = "application/json";
	else if (strcmp(method, "PATCH") == 0)
		ctype = "application/merge-patch+json";
	else if (strcmp(method, "DELETE") == 0)
		ctype = body ? "application/json" : NULL;
	else if (strcmp(method, "GET") != 0)
		return -EINVAL;
	if ((ctype && strcmp(method, "DELETE") != 0 && !body) || (!ctype && body))
		return -EINVAL;
	if (namespace_ && *namespace_ && !good_name(namespace_))
		return -EINVAL;
	if (create ? name != NULL : !name || !good_name(name))
		return -EINVAL;
	if (!k->running)
		return -EAGAIN;
	/* the collection path is PREFIX/PLURAL: insert namespaces/NS, append the name */
	const char *path = r->def->path, *plural = strrchr(path, '/');
	char full[1024];
	int n = snprintf(full, sizeof(full), "%.*s%s%s/%s%s%s", (int)(plural - path), path,
			 namespace_ && *namespace_ ? "/namespaces/" : "",
			 namespace_ && *namespace_ ? namespace_ : "", plural + 1, name ? "/" : "",
			 name ? name : "");
	if (n < 0 || (size_t)n >= sizeof(full))
		return -EINVAL;
	struct k8s_write *w = calloc(1, sizeof(*w));
	char *copy = body ? strdup(body) : NULL;
	if (!w || (body && !copy)) {
		free(w);
		free(copy);
		return -ENOMEM;
	}
	w->cb = cb;
	w->ud = ud;
	struct k8s_req *q = k8s_req_new(k, method, full, copy, ctype, on_write_done, w);
	if (!q) {
		free(w);
		return -ENOMEM;
	}
	int rc = k8s_req_send(q, false, K8S_WRITE_TIMEOUT_MS);
	if (rc) {
		free(w);
		return rc;
	}
	return 0;
}
