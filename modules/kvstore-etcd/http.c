/* modules/kvstore-etcd/http.c - POST requests to etcd's JSON gateway over
 * the modules' HTTP/1.1 client on the agent's loop
 * (modules/common/http_client.c: keep-alive connections, bodies by length
 * or chunked, TLS through OpenSSL for https endpoints, names looked up on
 * the worker pool, a request that could not reach an endpoint retried on
 * the next, in order). This file adds etcd's side: the endpoint requests go
 * to first, the answer's body buffered (a watch's handed over as it comes),
 * the JSON answer or etcd's error, and what each outcome says about the
 * connection to etcd. Callbacks never run inside etcd_req_send. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"

int etcd_http_open(struct etcd *e)
{
	char why[ETCD_ERROR_SIZE];
	const struct mod_http_client_config cfg = {
		.endpoints = (const char *const *)e->endpoints,
		.nendpoints = e->nendpoints,
		.tls = {.ca_file = e->ca_file, .cert_file = e->cert_file, .key_file = e->key_file},
		.connect_timeout_ms = e->dial_timeout_ms,
		.keepalive_idle_s = 10,
		.keepalive_intvl_s = 5,
		.max_idle = ETCD_MAX_IDLE_CONNS,
		.stopping = "the kvstore is stopping",
	};
	if (!(e->http = mod_http_client_new(e->m, &cfg, why, sizeof(why)))) {
		fibril_module_set_error(e->m, "%s", why);
		return -EINVAL;
	}
	return 0;
}

void etcd_http_close(struct etcd *e)
{
	struct mod_http_client *c = e->http;
	mod_http_client_free(c); /* the requests' callbacks get -ECANCELED */
	e->http = NULL;
}

static void req_free(struct etcd_req *r)
{
	free(r->body);
	free(r->buf);
	free(r);
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
	r->t0_us = etcd_metrics_now_us();
	r->done = done;
	r->ud = ud;
	r->body = strdup(json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
	json_object_put(body);
	if (!r->body) {
		free(r);
		return NULL;
	}
	r->body_len = strlen(r->body);
	return r;
}

/* ---- completion ---------------------------------------------------------------- */

/* An HTTP answer: 0 and the document, or etcd's error as an errno. */
static int answer_result(struct etcd_req *r, int status, struct json_object **resp)
{
	/* a stream's messages went to data(); a raw answer is read by done */
	bool stream_ok = (r->stream || r->raw) && status == 200;
	*resp = stream_ok ? NULL : etcd_json_parse(r->buf ? r->buf : "", r->len);
	if (status == 200) {
		if (*resp || stream_ok)
			return 0;
		snprintf(r->errbuf, sizeof(r->errbuf), "malformed answer from %s", r->path);
		return -EIO;
	}
	int err = *resp ? etcd_json_error(*resp, r->errbuf, sizeof(r->errbuf)) : -EIO;
	if (!*resp)
		snprintf(r->errbuf, sizeof(r->errbuf), "HTTP %d from %s", status, r->path);
	return err;
}

/* What a finished request says about the connection. */
enum conn_news { NEWS_NONE, NEWS_UP, NEWS_DOWN, NEWS_SUSPECT };

/* The client's done: run the callback, then act on the news, then free.
 * The callback runs first so that a watch lets go of its request before a
 * disconnection breaks every watch. */
static void on_http_done(struct mod_http_req *h, int err)
{
	struct etcd_req *r = h->ud;
	struct etcd *e = r->e;
	bool probe = e->probe == r;
	if (probe)
		e->probe = NULL;
	r->http = NULL; /* the client frees h after this call */
	r->endpoint = h->endpoint;
	struct json_object *resp = NULL;
	enum conn_news news;
	if (err == 0) {
		err = answer_result(r, h->status, &resp);
		news = r->stream ? NEWS_SUSPECT : NEWS_UP; /* a stream that ended: is etcd still there? */
	} else {
		snprintf(r->errbuf, sizeof(r->errbuf), "%.*s", (int)sizeof(r->errbuf) - 1, h->errbuf);
		if (err == -ECANCELED)
			news = NEWS_NONE;
		else if (!h->reached) /* no endpoint could be reached */
			news = NEWS_DOWN;
		else /* it broke after reaching etcd */
			news = probe ? NEWS_DOWN : NEWS_SUSPECT;
	}
	etcd_metrics_request(r, err);
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

static int on_http_body(struct mod_http_req *h, const char *data, size_t n)
{
	struct etcd_req *r = h->ud;
	return mod_http_buf_append(&r->buf, &r->len, &r->cap, 1024, ETCD_MAX_RESPONSE, data, n);
}

static void on_http_data(struct mod_http_req *h)
{
	struct etcd_req *r = h->ud;
	r->data(r); /* last: it may end the request */
}

/* ---- sending ------------------------------------------------------------------- */

int etcd_req_send(struct etcd_req *r)
{
	struct etcd *e = r->e;
	static const char *const headers[] = {"Content-Type: application/json", NULL};
	if (!e->running || !e->http) {
		req_free(r);
		return -ECANCELED;
	}
	struct mod_http_req *h = mod_http_req_new(e->http, "POST", r->path, headers, r->body,
						  r->body_len);
	if (!h) {
		req_free(r);
		return -ENOMEM;
	}
	h->endpoint = e->cur;
	h->timeout_ms = r->stream ? 0 : e->request_timeout_ms; /* a watch runs as long as it may */
	h->done = on_http_done;
	h->body = on_http_body;
	h->data = r->stream ? on_http_data : NULL;
	h->ud = r;
	r->endpoint = e->cur;
	r->http = h;
	int rc = mod_http_req_send(h); /* frees h on failure */
	if (rc) {
		r->http = NULL;
		req_free(r);
	}
	return rc;
}

void etcd_req_abort(struct etcd_req *r)
{
	if (!r || !r->http)
		return; /* none, or finishing: on_http_done frees it */
	if (r->e->probe == r)
		r->e->probe = NULL;
	mod_http_req_abort(r->http);
	req_free(r);
}
