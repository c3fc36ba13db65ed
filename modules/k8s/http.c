/* modules/k8s/http.c - requests to the Kubernetes API server over the
 * modules' HTTP/1.1 client on the agent's loop (modules/common/
 * http_client.c, shared with kvstore-etcd: keep-alive connections, TLS
 * through OpenSSL, gzip answers inflated). This file adds the API server's
 * side: the server URL of the kubeconfig (with a path prefix, if any), any
 * method, the bearer token (re-read when its file changes), the CA and
 * client certificate as files or kubeconfig data, the answer buffered (a
 * watch's handed over as it comes), Kubernetes Status errors. Completions
 * and stream data come from loop callbacks, never inside k8s_req_send, so
 * a done function may start new requests. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "k8s_mod.h"

/* The client to the server without its path, and the path the API sits
 * under on it ("" mostly: a proxy may put it deeper). */
int k8s_http_open(struct k8s *k, char *why, size_t len)
{
	const char *server = k->conn.server;
	const char *host = strstr(server, "://");
	const char *path = host ? strchr(host + 3, '/') : NULL;
	size_t origin_len = path ? (size_t)(path - server) : strlen(server);
	char *origin = strndup(server, origin_len);
	free(k->path_prefix);
	k->path_prefix = strdup(path ? path : "");
	if (!origin || !k->path_prefix) {
		free(origin);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	size_t pl = strlen(k->path_prefix);
	while (pl && k->path_prefix[pl - 1] == '/')
		k->path_prefix[--pl] = '\0';
	const char *endpoints[] = {origin};
	const struct mod_http_client_config cfg = {
		.endpoints = endpoints,
		.nendpoints = 1,
		.tls = {
			.ca_file = k->conn.ca_file,
			.cert_file = k->conn.cert_file,
			.key_file = k->conn.key_file,
			.ca_pem = k->conn.ca_data,
			.ca_pem_len = k->conn.ca_len,
			.cert_pem = k->conn.cert_data,
			.cert_pem_len = k->conn.cert_len,
			.key_pem = k->conn.key_data,
			.key_pem_len = k->conn.key_len,
			.insecure = k->conn.insecure,
		},
		.connect_timeout_ms = 10000,
		.keepalive_idle_s = 30,
		.keepalive_intvl_s = 10,
		.max_idle = 8,
		.accept_gzip = true, /* the API server compresses large lists */
		.stopping = "the k8s module is stopping",
	};
	k->http = mod_http_client_new(k->m, &cfg, why, len);
	free(origin);
	return k->http ? 0 : -EINVAL;
}

static void req_free(struct k8s_req *r)
{
	free(r->buf);
	free(r);
}

/* The bearer token: fixed, or the file's (re-read when it changes). */
static const char *current_token(struct k8s *k)
{
	if (!k->conn.token_file)
		return k->conn.token;
	struct stat st;
	if (stat(k->conn.token_file, &st) == 0 &&
	    (st.st_mtim.tv_sec != k->token_mtime.tv_sec ||
	     st.st_mtim.tv_nsec != k->token_mtime.tv_nsec || !k->file_token)) {
		FILE *f = fopen(k->conn.token_file, "re");
		if (f) {
			char buf[16384];
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = '\0';
			while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
				buf[--n] = '\0';
			free(k->file_token);
			k->file_token = strdup(buf);
			k->token_mtime = st.st_mtim;
		}
	}
	return k->file_token ? k->file_token : k->conn.token;
}

/* ---- the client's callbacks ----------------------------------------------------- */

static int on_body(struct mod_http_req *h, const char *data, size_t n)
{
	struct k8s_req *r = h->ud;
	if (mod_http_buf_append(&r->buf, &r->len, &r->cap, 4096, K8S_MAX_RESPONSE, data, n))
		return -1;
	if (r->stream)
		r->has_data = true;
	return 0;
}

static void on_head(struct mod_http_req *h)
{
	struct k8s_req *r = h->ud;
	r->status = h->status;
	if (r->head)
		r->head(r);
}

/* A stream's new bytes, on a 200 answer. */
static void dispatch_data(struct k8s_req *r)
{
	if (!r->has_data)
		return;
	r->has_data = false;
	if (r->status == 200 && r->data)
		r->data(r);
}

static void on_data(struct mod_http_req *h)
{
	struct k8s_req *r = h->ud;
	r->status = h->status;
	dispatch_data(r); /* last in the client's callback: it may end the request */
}

static void on_done(struct mod_http_req *h, int err)
{
	struct k8s_req *r = h->ud;
	r->http = NULL; /* the client frees h after this call */
	r->status = h->status;
	/* what came with the end goes to the stream first; it may abort */
	r->linked = false;
	r->has_data = r->has_data && r->stream;
	if (r->has_data) {
		r->linked = true; /* an abort inside data frees r: see k8s_req_abort */
		dispatch_data(r);
		if (!r->linked) {
			req_free(r);
			return;
		}
		r->linked = false;
	}
	if (err) {
		snprintf(r->errbuf, sizeof(r->errbuf), "%s", h->errbuf);
		if (err != -ECANCELED && err != -ETIMEDOUT)
			err = -ENOTCONN;
	} else if (r->status < 200 || r->status >= 300) {
		err = -EPROTO;
		/* the API server's Status document says why */
		char msg[200] = "";
		struct json_object *st = r->buf ? json_tokener_parse(r->buf) : NULL;
		struct json_object *v;
		if (st && json_object_object_get_ex(st, "message", &v))
			snprintf(msg, sizeof(msg), ": %s", json_object_get_string(v));
		json_object_put(st);
		snprintf(r->errbuf, sizeof(r->errbuf), "%s: HTTP %ld%s", r->what, r->status, msg);
	}
	r->done(r, err);
	req_free(r);
}

/* ---- requests ------------------------------------------------------------------- */

struct k8s_req *k8s_req_new(struct k8s *k, const char *method, const char *path, char *body,
			    const char *content_type, k8s_done_fn done, void *ud)
{
	struct k8s_req *r = calloc(1, sizeof(*r));
	if (!r) {
		free(body);
		return NULL;
	}
	r->k = k;
	r->done = done;
	r->ud = ud;
	snprintf(r->what, sizeof(r->what), "%s %s", method, path);
	char *q = strchr(r->what, '?');
	if (q)
		*q = '\0';
	if (!k->http) { /* not running: k8s_req_send refuses it */
		free(body);
		return r;
	}
	char ctype[128] = "", *auth = NULL;
	const char *headers[5];
	size_t n = 0;
	headers[n++] = "Accept: application/json";
	/* named in the API server's audit log, as client-go names its clients */
	headers[n++] = "User-Agent: " K8S_USER_AGENT;
	if (content_type) {
		snprintf(ctype, sizeof(ctype), "Content-Type: %s", content_type);
		headers[n++] = ctype;
	}
	const char *tok = current_token(k);
	if (tok && *tok && asprintf(&auth, "Authorization: Bearer %s", tok) > 0)
		headers[n++] = auth;
	headers[n] = NULL;
	char *full = NULL;
	if (asprintf(&full, "%s%s", k->path_prefix ? k->path_prefix : "", path) < 0)
		full = NULL;
	r->http = full ? mod_http_req_new(k->http, method, full, headers, body,
					  body ? strlen(body) : 0)
		       : NULL;
	free(full);
	free(auth);
	free(body);
	if (!r->http) {
		req_free(r);
		return NULL;
	}
	r->http->done = on_done;
	r->http->body = on_body;
	r->http->head = on_head;
	r->http->ud = r;
	return r;
}

int k8s_req_send(struct k8s_req *r, bool stream, uint64_t timeout_ms)
{
	struct k8s *k = r->k;
	if (!k->running || !k->http || !r->http) {
		if (r->http)
			mod_http_req_abort(r->http);
		req_free(r);
		return -ECANCELED;
	}
	r->stream = stream;
	r->http->timeout_ms = timeout_ms;
	r->http->data = stream ? on_data : NULL;
	int rc = mod_http_req_send(r->http); /* frees it on failure */
	if (rc) {
		req_free(r);
		return rc;
	}
	r->linked = true;
	return 0;
}

void k8s_req_abort(struct k8s_req *r)
{
	if (!r || !r->linked)
		return;
	r->linked = false;
	if (!r->http)
		return; /* inside on_done's stream data: on_done frees it */
	mod_http_req_abort(r->http);
	req_free(r);
}

void k8s_req_consume(struct k8s_req *r, size_t n)
{
	if (n >= r->len) {
		r->len = 0;
	} else {
		memmove(r->buf, r->buf + n, r->len - n);
		r->len -= n;
	}
	if (r->buf)
		r->buf[r->len] = '\0';
}

void k8s_http_close(struct k8s *k)
{
	struct mod_http_client *c = k->http;
	k->http = NULL;
	mod_http_client_free(c); /* every request in flight: done(-ECANCELED) */
	free(k->path_prefix);
	k->path_prefix = NULL;
}
