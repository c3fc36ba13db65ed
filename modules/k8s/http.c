/* modules/k8s/http.c - requests to the Kubernetes API server with libcurl's
 * multi interface on the agent's loop (curl sockets are fibril_io watches,
 * its timeout a fibril timer). Completions and stream data run after
 * curl_multi_socket_action returns, never inside a curl callback, so a
 * done function may start new requests. The curl-on-the-loop glue is
 * modules/common/curl_loop.c, shared with kvstore-etcd; this file adds the
 * API server's side (any method, bearer token, TLS blobs, Status errors). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "k8s_mod.h"

static void http_process(void *ud);

int k8s_http_open(struct k8s *k)
{
	return mod_curl_loop_open(&k->curl, k->m, NULL, http_process, k);
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct k8s_req *r = ud;
	size_t n = size * nmemb;
	if (mod_curl_buf_append(&r->buf, &r->len, &r->cap, 4096, K8S_MAX_RESPONSE, ptr, n))
		return 0; /* CURLE_WRITE_ERROR */
	if (r->stream)
		r->has_data = true;
	return n;
}

static void req_free(struct k8s_req *r)
{
	if (r->easy)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->headers);
	free(r->body);
	free(r->buf);
	free(r);
}

static void req_unlink(struct k8s_req *r)
{
	struct k8s *k = r->k;
	if (r->prev)
		r->prev->next = r->next;
	else
		k->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	r->linked = false;
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
	r->body = body;
	r->easy = curl_easy_init();
	if (!r->easy) {
		req_free(r);
		return NULL;
	}
	CURL *c = r->easy;
	char url[4096];
	snprintf(url, sizeof(url), "%s%s", k->conn.server, path);
	snprintf(r->what, sizeof(r->what), "%s %s", method, path);
	char *q = strchr(r->what, '?');
	if (q)
		*q = '\0';
	r->headers = curl_slist_append(NULL, "Accept: application/json");
	if (content_type) {
		char h[128];
		snprintf(h, sizeof(h), "Content-Type: %s", content_type);
		r->headers = curl_slist_append(r->headers, h);
	}
	const char *tok = current_token(k);
	if (tok && *tok) {
		size_t hl = strlen(tok) + 32;
		char *h = malloc(hl);
		if (h) {
			snprintf(h, hl, "Authorization: Bearer %s", tok);
			r->headers = curl_slist_append(r->headers, h);
			free(h);
		}
	}
	r->headers = curl_slist_append(r->headers, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	/* named in the API server's audit log, as client-go names its clients */
	curl_easy_setopt(c, CURLOPT_USERAGENT, K8S_USER_AGENT);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_PRIVATE, r);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
	mod_curl_easy_defaults(c, 10000L, 30L, 10L);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
	if (k->conn.insecure) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (k->conn.ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, k->conn.ca_file);
	if (k->conn.ca_data) {
		struct curl_blob b = {k->conn.ca_data, k->conn.ca_len, CURL_BLOB_COPY};
		curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
	}
	if (k->conn.cert_file)
		curl_easy_setopt(c, CURLOPT_SSLCERT, k->conn.cert_file);
	if (k->conn.key_file)
		curl_easy_setopt(c, CURLOPT_SSLKEY, k->conn.key_file);
	if (k->conn.cert_data) {
		struct curl_blob b = {k->conn.cert_data, k->conn.cert_len, CURL_BLOB_COPY};
		curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &b);
	}
	if (k->conn.key_data) {
		struct curl_blob b = {k->conn.key_data, k->conn.key_len, CURL_BLOB_COPY};
		curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &b);
	}
	return r;
}

int k8s_req_send(struct k8s_req *r, bool stream, uint64_t timeout_ms)
{
	struct k8s *k = r->k;
	if (!k->running || !k->curl.multi) {
		req_free(r);
		return -ECANCELED;
	}
	r->stream = stream;
	curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	if (curl_multi_add_handle(k->curl.multi, r->easy) != CURLM_OK) {
		req_free(r);
		return -EIO;
	}
	r->next = k->reqs;
	if (k->reqs)
		k->reqs->prev = r;
	k->reqs = r;
	r->linked = true;
	return 0;
}

void k8s_req_abort(struct k8s_req *r)
{
	if (!r || !r->linked)
		return;
	req_unlink(r);
	curl_multi_remove_handle(r->k->curl.multi, r->easy);
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

static void req_finish(struct k8s_req *r, CURLcode cc)
{
	struct k8s *k = r->k;
	curl_multi_remove_handle(k->curl.multi, r->easy);
	req_unlink(r);
	long status = 0;
	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	int err = 0;
	if (cc != CURLE_OK) {
		if (!r->errbuf[0])
			snprintf(r->errbuf, sizeof(r->errbuf), "%s", curl_easy_strerror(cc));
		err = cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ENOTCONN;
	} else if (status < 200 || status >= 300) {
		err = -EPROTO;
		/* the API server's Status document says why */
		char msg[200] = "";
		struct json_object *st = r->buf ? json_tokener_parse(r->buf) : NULL;
		struct json_object *v;
		if (st && json_object_object_get_ex(st, "message", &v))
			snprintf(msg, sizeof(msg), ": %s", json_object_get_string(v));
		json_object_put(st);
		snprintf(r->errbuf, sizeof(r->errbuf), "%s: HTTP %ld%s", r->what, status, msg);
	}
	r->status = status;
	r->done(r, err);
	req_free(r);
}

static void finish_one(void *priv, CURLcode cc)
{
	req_finish(priv, cc);
}

static void dispatch_streams(struct k8s *k)
{
	for (;;) {
		struct k8s_req *r = k->reqs;
		while (r && !r->has_data)
			r = r->next;
		if (!r)
			return;
		r->has_data = false;
		long status = 0;
		curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status == 200 && r->data)
			r->data(r);
	}
}

static void http_process(void *ud)
{
	struct k8s *k = ud;
	dispatch_streams(k);
	mod_curl_loop_each_done(&k->curl, finish_one);
	dispatch_streams(k);
}

void k8s_http_close(struct k8s *k)
{
	if (!k->curl.multi)
		return;
	while (k->reqs) {
		struct k8s_req *r = k->reqs;
		req_unlink(r);
		curl_multi_remove_handle(k->curl.multi, r->easy);
		snprintf(r->errbuf, sizeof(r->errbuf), "the k8s module is stopping");
		r->done(r, -ECANCELED);
		req_free(r);
	}
	mod_curl_loop_close(&k->curl);
}
