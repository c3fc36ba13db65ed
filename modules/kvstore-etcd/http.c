/* modules/kvstore-etcd/http.c - POST requests to etcd's JSON gateway with
 * libcurl's multi interface, driven by the agent's loop: curl's sockets are
 * fibril_io watches, its timeout a fibril timer, and completions run after
 * curl_multi_socket_action returns (never inside a curl callback), so done
 * functions may start new requests (the glue is modules/common/curl_loop.c,
 * shared with the k8s module). A request that could not reach an
 * endpoint (nothing was sent) is retried on the next endpoint, in order. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"

/* ---- curl <-> loop (modules/common/curl_loop.c) ------------------------ */

static void http_process(void *ud);

int etcd_http_open(struct etcd *e)
{
	return mod_curl_loop_open(&e->curl, e->m, &e->released, http_process, e);
}

/* ---- requests -------------------------------------------------------------- */

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct etcd_req *r = ud;
	size_t n = size * nmemb;
	if (mod_curl_buf_append(&r->buf, &r->len, &r->cap, 1024, ETCD_MAX_RESPONSE, ptr, n))
		return 0; /* CURLE_WRITE_ERROR */
	if (r->stream)
		r->has_data = true;
	return n;
}

static void req_free(struct etcd_req *r)
{
	if (r->easy)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->headers);
	free(r->body);
	free(r->buf);
	free(r);
}

static void req_unlink(struct etcd_req *r)
{
	struct etcd *e = r->e;
	if (r->prev)
		r->prev->next = r->next;
	else
		e->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	if (e->probe == r)
		e->probe = NULL;
}

static void req_set_tls(struct etcd *e, CURL *c)
{
	if (e->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, e->ca_file);
	if (e->cert_file)
		curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert_file);
	if (e->key_file)
		curl_easy_setopt(c, CURLOPT_SSLKEY, e->key_file);
}

static int req_setup(struct etcd_req *r)
{
	struct etcd *e = r->e;
	CURL *c = r->easy;
	r->headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (!r->headers)
		return -ENOMEM;
	struct curl_slist *h = curl_slist_append(r->headers, "Expect:");
	if (!h)
		return -ENOMEM;
	r->headers = h;
	curl_easy_setopt(c, CURLOPT_PRIVATE, r);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
	mod_curl_easy_defaults(c, (long)e->dial_timeout_ms, 10L, 5L);
	req_set_tls(e, c);
	return 0;
}

struct etcd_req *etcd_req_new(struct etcd *e, const char *path, struct json_object *body,
			      etcd_done_fn done, void *ud)
{
	struct etcd_req *r = calloc(1, sizeof(*r));
	if (!r || !body) {
		free(r);
		json_object_put(body);
		return NULL;
	}
	r->e = e;
	r->path = path;
	r->done = done;
	r->ud = ud;
	r->body = strdup(json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
	json_object_put(body);
	r->easy = curl_easy_init();
	if (!r->body || !r->easy || req_setup(r)) {
		req_free(r);
		return NULL;
	}
	return r;
}

/* Point the request at its current endpoint and hand it to curl. */
static int req_launch(struct etcd_req *r)
{
	struct etcd *e = r->e;
	char url[1024];
	snprintf(url, sizeof(url), "%s%s", e->endpoints[r->endpoint], r->path);
	curl_easy_setopt(r->easy, CURLOPT_URL, url);
	curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, r->stream ? 0L : (long)e->request_timeout_ms);
	r->len = 0;
	if (r->buf)
		r->buf[0] = '\0';
	r->errbuf[0] = '\0';
	r->has_data = false;
	return curl_multi_add_handle(e->curl.multi, r->easy) == CURLM_OK ? 0 : -EIO;
}

int etcd_req_send(struct etcd_req *r)
{
	struct etcd *e = r->e;
	if (!e->running || !e->curl.multi) {
		req_free(r);
		return -ECANCELED;
	}
	r->endpoint = e->cur;
	r->tried = 0;
	int rc = req_launch(r);
	if (rc) {
		req_free(r);
		return rc;
	}
	r->next = e->reqs;
	if (e->reqs)
		e->reqs->prev = r;
	e->reqs = r;
	return 0;
}

void etcd_req_abort(struct etcd_req *r)
{
	if (!r || (!r->prev && r->e->reqs != r))
		return; /* none, or finishing: req_complete frees it */
	req_unlink(r);
	curl_multi_remove_handle(r->e->curl.multi, r->easy);
	req_free(r);
}

/* ---- completion ---------------------------------------------------------------- */

/* An HTTP answer: 0 and the document, or etcd's error as an errno. */
static int answer_result(struct etcd_req *r, long status, struct json_object **resp)
{
	bool stream_ok = r->stream && status == 200; /* its messages went to data() */
	*resp = stream_ok ? NULL : etcd_json_parse(r->buf ? r->buf : "", r->len);
	if (status == 200) {
		if (*resp || stream_ok)
			return 0;
		snprintf(r->errbuf, sizeof(r->errbuf), "malformed answer from %s", r->path);
		return -EIO;
	}
	int err = *resp ? etcd_json_error(*resp, r->errbuf, sizeof(r->errbuf)) : -EIO;
	if (!*resp)
		snprintf(r->errbuf, sizeof(r->errbuf), "HTTP %ld from %s", status, r->path);
	return err;
}

/* What a finished request says about the connection. */
enum conn_news { NEWS_NONE, NEWS_UP, NEWS_DOWN, NEWS_SUSPECT };

/* Run the callback, then act on the news, then free: the request is off
 * curl and the list. The callback runs first so that a watch lets go of
 * its request before a disconnection breaks every watch. */
static void req_complete(struct etcd_req *r, int err, struct json_object *resp,
			 enum conn_news news)
{
	struct etcd *e = r->e;
	r->done(r, err, resp);
	json_object_put(resp);
	switch (news) {
	case NEWS_UP:
		etcd_conn_up(e, r->endpoint);
		break;
	case NEWS_DOWN:
		etcd_conn_down(e, r->errbuf);
		break;
	case NEWS_SUSPECT:
		etcd_conn_suspect(e);
		break;
	case NEWS_NONE:
		break;
	}
	req_free(r);
}

static void req_finish(struct etcd_req *r, CURLcode cc)
{
	struct etcd *e = r->e;
	bool probe = e->probe == r;
	curl_multi_remove_handle(e->curl.multi, r->easy);
	if (cc == CURLE_OK) {
		long status = 0;
		curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
		struct json_object *resp = NULL;
		int err = answer_result(r, status, &resp);
		req_unlink(r);
		/* a stream that ended: is etcd still there? */
		req_complete(r, err, resp, r->stream ? NEWS_SUSPECT : NEWS_UP);
		return;
	}
	curl_off_t sent = 0;
	curl_easy_getinfo(r->easy, CURLINFO_PRETRANSFER_TIME_T, &sent);
	if (!r->errbuf[0])
		snprintf(r->errbuf, sizeof(r->errbuf), "%s", curl_easy_strerror(cc));
	if (!sent && ++r->tried < e->nendpoints && e->running) {
		fibril_debug(e->m, "%s: %s; trying the next endpoint",
			     e->endpoints[r->endpoint], r->errbuf);
		r->endpoint = (r->endpoint + 1) % e->nendpoints;
		if (req_launch(r) == 0)
			return;
	}
	req_unlink(r);
	req_complete(r, cc == CURLE_OPERATION_TIMEDOUT && sent ? -ETIMEDOUT : -ENOTCONN, NULL,
		     !sent || probe ? NEWS_DOWN : NEWS_SUSPECT);
}

static void finish_one(void *priv, CURLcode cc)
{
	req_finish(priv, cc);
}

/* Hand new stream bytes over; rescans because data() may end requests. */
static void dispatch_streams(struct etcd *e)
{
	for (;;) {
		struct etcd_req *r = e->reqs;
		while (r && !r->has_data)
			r = r->next;
		if (!r)
			return;
		r->has_data = false;
		r->data(r);
	}
}

static void http_process(void *ud)
{
	struct etcd *e = ud;
	dispatch_streams(e);
	mod_curl_loop_each_done(&e->curl, finish_one);
	dispatch_streams(e);
}

/* ---- shutdown ------------------------------------------------------------------- */

void etcd_http_close(struct etcd *e)
{
	if (!e->curl.multi)
		return;
	while (e->reqs) {
		struct etcd_req *r = e->reqs;
		req_unlink(r);
		curl_multi_remove_handle(e->curl.multi, r->easy);
		snprintf(r->errbuf, sizeof(r->errbuf), "the kvstore is stopping");
		req_complete(r, -ECANCELED, NULL, NEWS_NONE);
	}
	mod_curl_loop_close(&e->curl);
}
