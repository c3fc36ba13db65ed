/* host/api.c - the agent's API server: HTTP/1.1 + JSON on a unix socket
 * (and an optional TCP listener for probes and scrapers), served by
 * libwebsockets on the agent's own libuv loop. Routes are registered by
 * method and path pattern ({name} matches one segment); websocket streams
 * push text messages to every connected client. */
#include "internal.h"

#include <errno.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_SEGMENTS 16
#define MAX_QUERY 32
#define WRITE_CHUNK 16384
#define STREAM_QUEUE_MAX 4096

struct route {
	struct fibril_module *owner;
	char *method;
	char *pattern;
	char *segs[MAX_SEGMENTS];
	size_t nsegs;
	uint32_t flags;
	fibril_route_fn cb;
	void *ud;
	bool tcp; /* served on the TCP listener instead of the unix socket */
	struct route *next;
};

struct stream_msg {
	struct stream_msg *next;
	size_t len;
	unsigned char buf[]; /* LWS_PRE + len */
};

struct stream_client {
	struct lws *wsi;
	struct fibril_stream *stream;
	struct stream_msg *head, *tail;
	size_t queued;
	uint64_t dropped;
	struct stream_client *next;
};

struct fibril_stream {
	struct fibril_module *owner;
	char *path;
	struct stream_client *clients;
	int nclients;
	struct fibril_stream *next;
};

struct fibril_request {
	const char *method;
	char path[1024];
	char path_split[1024];
	const char *param_names[MAX_SEGMENTS];
	const char *param_values[MAX_SEGMENTS];
	size_t nparams;
	char *query[MAX_QUERY][2];
	size_t nquery;
	char *body;
	size_t body_len;
};

struct fibril_response {
	int status;
	char *content_type;
	char *body;
	size_t len;
	bool answered;
	struct session *sess; /* a deferred answer: its connection (NULL once gone) */
};

/* Per-connection state (lws allocates and zeroes it). */
struct session {
	struct fibril_request req;
	struct fibril_response resp;
	size_t body_cap;
	size_t content_length;
	bool too_big;
	unsigned char *out; /* LWS_PRE + body */
	size_t out_len, out_off;
	bool responded;     /* the answer is queued: ignore the rest of the body */
	bool close_after;   /* close the connection once the answer is written */
	struct stream_client *client;
	struct lws *wsi;
	struct fibril_response *pending; /* deferred by the handler, not sent yet */
	bool deferred_ready;             /* ... sent: queue it when writeable */
	/* every live connection, so that api_close closes them itself */
	struct session *live_prev, *live_next;
	struct lws *live_wsi;
	bool live;
	char metric_route[128];          /* for /metrics: the matched pattern */
	double metric_t0;
};

static struct lws_context *g_ctx;
static struct lws_vhost *g_unix_vhost, *g_tcp_vhost;
static struct route *g_routes;
static struct fibril_stream *g_streams;
static size_t g_max_body = 1 << 20;
static char *g_socket_path;
static struct session *g_live; /* the connections lws has bound to our protocol */

/* ---- routes ---------------------------------------------------------------- */

static size_t split_path(char *path, char **segs)
{
	size_t n = 0;
	char *save = NULL;
	for (char *s = strtok_r(path, "/", &save); s && n < MAX_SEGMENTS; s = strtok_r(NULL, "/", &save))
		segs[n++] = s;
	return n;
}

static int add_route(struct fibril_module *m, const char *method, const char *pattern,
		     uint32_t flags, fibril_route_fn cb, void *ud, bool tcp)
{
	if (!method || !pattern || pattern[0] != '/' || !cb)
		return -EINVAL;
	struct route *r = xcalloc(1, sizeof(*r));
	r->owner = m;
	r->method = xstrdup(method);
	r->pattern = xstrdup(pattern);
	r->flags = flags;
	r->cb = cb;
	r->ud = ud;
	r->tcp = tcp;
	char *copy = xstrdup(pattern);
	char *segs[MAX_SEGMENTS];
	r->nsegs = split_path(copy, segs);
	for (size_t i = 0; i < r->nsegs; i++)
		r->segs[i] = xstrdup(segs[i]);
	free(copy);
	for (struct route *o = g_routes; o; o = o->next) {
		if (o->tcp == tcp && strcmp(o->method, r->method) == 0 &&
		    strcmp(o->pattern, r->pattern) == 0) {
			fibril_error(m, "route %s %s is already registered by %s", method, pattern,
				     o->owner ? o->owner->name : "the agent");
			for (size_t i = 0; i < r->nsegs; i++)
				free(r->segs[i]);
			free(r->method);
			free(r->pattern);
			free(r);
			return -EEXIST;
		}
	}
	r->next = g_routes;
	g_routes = r;
	return 0;
}

int fibril_api_route(struct fibril_module *m, const char *method, const char *pattern,
		     uint32_t flags, fibril_route_fn cb, void *ud)
{
	return add_route(m, method, pattern, flags, cb, ud, false);
}

int api_route_host(const char *method, const char *pattern, uint32_t flags, fibril_route_fn cb,
		   void *ud)
{
	return add_route(NULL, method, pattern, flags, cb, ud, false);
}

int api_route_tcp(const char *method, const char *pattern, fibril_route_fn cb, void *ud)
{
	return add_route(NULL, method, pattern, 0, cb, ud, true);
}

static void free_route(struct route *r)
{
	for (size_t i = 0; i < r->nsegs; i++)
		free(r->segs[i]);
	free(r->method);
	free(r->pattern);
	free(r);
}

static bool route_matches(const struct route *r, struct fibril_request *req, char **segs, size_t n)
{
	if (r->nsegs != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (r->segs[i][0] == '{')
			continue;
		if (strcmp(r->segs[i], segs[i]) != 0)
			return false;
	}
	req->nparams = 0;
	for (size_t i = 0; i < n; i++) {
		if (r->segs[i][0] != '{')
			continue;
		req->param_names[req->nparams] = r->segs[i];
		req->param_values[req->nparams++] = segs[i];
	}
	return true;
}

/* ---- request accessors ---------------------------------------------------- */

const char *fibril_req_method(const struct fibril_request *req)
{
	return req->method;
}

const char *fibril_req_path(const struct fibril_request *req)
{
	return req->path;
}

const char *fibril_req_query(const struct fibril_request *req, const char *name)
{
	for (size_t i = 0; i < req->nquery; i++)
		if (strcmp(req->query[i][0], name) == 0)
			return req->query[i][1];
	return NULL;
}

const char *fibril_req_param(const struct fibril_request *req, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; i < req->nparams; i++) {
		const char *p = req->param_names[i]; /* "{name}" */
		if (strncmp(p + 1, name, len) == 0 && p[len + 1] == '}' && p[len + 2] == '\0')
			return req->param_values[i];
	}
	return NULL;
}

const char *fibril_req_body(const struct fibril_request *req, size_t *len)
{
	if (len)
		*len = req->body_len;
	return req->body ? req->body : "";
}

/* ---- responses ------------------------------------------------------------- */

void fibril_resp_body(struct fibril_response *resp, int status, const char *content_type,
		      const void *body, size_t len)
{
	free(resp->body);
	free(resp->content_type);
	resp->status = status;
	resp->content_type = xstrdup(content_type ? content_type : "application/octet-stream");
	resp->body = malloc(len + 1);
	if (!resp->body)
		abort();
	if (len)
		memcpy(resp->body, body, len);
	resp->body[len] = '\0';
	resp->len = len;
	resp->answered = true;
}

void fibril_resp_json(struct fibril_response *resp, int status, const char *json)
{
	fibril_resp_body(resp, status, "application/json", json, strlen(json));
}

void api_resp_object(struct fibril_response *resp, int status, struct json_object *obj)
{
	const char *text = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE);
	fibril_resp_json(resp, status, text);
	json_object_put(obj);
}

static __attribute__((format(printf, 3, 0))) void resp_error_v(struct fibril_response *resp, int status,
								 const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "error", json_object_new_string(msg));
	json_object_object_add(o, "code", json_object_new_int(status));
	api_resp_object(resp, status, o);
}

void fibril_resp_error(struct fibril_response *resp, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	resp_error_v(resp, status, fmt, ap);
	va_end(ap);
}

/* Deferred answers (ABI 1.4): the handler keeps a response of its own and
 * sends it later; the connection waits meanwhile. */
struct fibril_response *fibril_resp_defer(struct fibril_response *resp)
{
	if (!resp || resp->sess || resp->answered)
		return NULL; /* not a handler's response, or answered already */
	struct session *s = (struct session *)((char *)resp - offsetof(struct session, resp));
	if (s->pending)
		return NULL;
	struct fibril_response *d = xcalloc(1, sizeof(*d));
	d->sess = s;
	s->pending = d;
	return d;
}

void fibril_resp_send(struct fibril_response *d)
{
	if (!d || !d->sess) { /* the client went away meanwhile */
		if (d) {
			free(d->body);
			free(d->content_type);
			free(d);
		}
		return;
	}
	struct session *s = d->sess;
	if (!d->answered)
		fibril_resp_error(d, 500, "a deferred handler for %s %s did not answer", s->req.method,
				  s->req.path);
	free(s->resp.body);
	free(s->resp.content_type);
	s->resp.status = d->status;
	s->resp.content_type = d->content_type;
	s->resp.body = d->body;
	s->resp.len = d->len;
	s->resp.answered = true;
	s->pending = NULL;
	free(d);
	s->deferred_ready = true;
	lws_callback_on_writable(s->wsi);
}

/* ---- request handling ------------------------------------------------------ */

/* Free what the request and its answer hold (the answer is copied to out). */
static void request_free(struct session *s)
{
	for (size_t i = 0; i < s->req.nquery; i++) {
		free(s->req.query[i][0]);
		free(s->req.query[i][1]);
	}
	s->req.nquery = 0;
	free(s->req.body);
	s->req.body = NULL;
	s->req.body_len = 0;
	s->body_cap = 0;
	free(s->resp.body);
	free(s->resp.content_type);
	s->resp.body = s->resp.content_type = NULL;
}

static void session_reset(struct session *s)
{
	if (s->pending) /* the handler answers a connection that is gone */
		s->pending->sess = NULL;
	request_free(s);
	free(s->out);
	struct stream_client *client = s->client;
	struct session *prev = s->live_prev, *next = s->live_next;
	struct lws *live_wsi = s->live_wsi;
	bool live = s->live;
	memset(s, 0, sizeof(*s));
	s->client = client;
	s->live_prev = prev;
	s->live_next = next;
	s->live_wsi = live_wsi;
	s->live = live;
}

static void session_link(struct session *s, struct lws *wsi)
{
	if (s->live)
		return;
	s->live = true;
	s->live_wsi = wsi;
	s->live_prev = NULL;
	s->live_next = g_live;
	if (g_live)
		g_live->live_prev = s;
	g_live = s;
}

static void session_unlink(struct session *s)
{
	if (!s->live)
		return;
	if (s->live_prev)
		s->live_prev->live_next = s->live_next;
	else
		g_live = s->live_next;
	if (s->live_next)
		s->live_next->live_prev = s->live_prev;
	s->live = false;
	s->live_prev = s->live_next = NULL;
	s->live_wsi = NULL;
}

static const struct {
	enum lws_token_indexes token;
	const char *name;
	bool has_body;
} http_methods[] = {
	{WSI_TOKEN_GET_URI, "GET", false},	   {WSI_TOKEN_POST_URI, "POST", true},
	{WSI_TOKEN_PUT_URI, "PUT", true},	   {WSI_TOKEN_PATCH_URI, "PATCH", true},
	{WSI_TOKEN_DELETE_URI, "DELETE", true},	   {WSI_TOKEN_OPTIONS_URI, "OPTIONS", false},
	{WSI_TOKEN_HEAD_URI, "HEAD", false},
};

static bool method_has_body(const char *method)
{
	for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++)
		if (strcmp(http_methods[i].name, method) == 0)
			return http_methods[i].has_body;
	return false;
}

static void parse_request_line(struct lws *wsi, struct session *s, const char *uri)
{
	s->req.method = "GET";
	for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++) {
		if (lws_hdr_total_length(wsi, http_methods[i].token) > 0) {
			s->req.method = http_methods[i].name;
			break;
		}
	}
	snprintf(s->req.path, sizeof(s->req.path), "%s", uri ? uri : "/");
	char frag[1024];
	for (int i = 0; s->req.nquery < MAX_QUERY; i++) {
		int n = lws_hdr_copy_fragment(wsi, frag, sizeof(frag), WSI_TOKEN_HTTP_URI_ARGS, i);
		if (n < 0)
			break;
		char *eq = strchr(frag, '=');
		if (eq)
			*eq = '\0';
		s->req.query[s->req.nquery][0] = xstrdup(frag);
		s->req.query[s->req.nquery][1] = xstrdup(eq ? eq + 1 : "");
		s->req.nquery++;
	}
	char cl[32];
	if (lws_hdr_copy(wsi, cl, sizeof(cl), WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0)
		s->content_length = strtoull(cl, NULL, 10);
}

static void dispatch(struct session *s, bool tcp)
{
	struct fibril_request *req = &s->req;
	struct fibril_response *resp = &s->resp;
	s->metric_t0 = mono_ms();
	snprintf(s->metric_route, sizeof(s->metric_route), "unmatched");
	if (s->too_big) {
		fibril_resp_error(resp, 413, "request body exceeds the limit of %zu bytes", g_max_body);
		return;
	}
	snprintf(req->path_split, sizeof(req->path_split), "%s", req->path);
	char *segs[MAX_SEGMENTS];
	size_t n = split_path(req->path_split, segs);
	bool path_known = false;
	char allowed[64] = "";
	for (struct route *r = g_routes; r; r = r->next) {
		if (r->tcp != tcp || !route_matches(r, req, segs, n))
			continue;
		path_known = true;
		if (strcmp(r->method, req->method) != 0) {
			size_t len = strlen(allowed);
			snprintf(allowed + len, sizeof(allowed) - len, "%s%s", len ? ", " : "", r->method);
			continue;
		}
		if ((r->flags & FIBRIL_ROUTE_JSON_BODY) && req->body_len) {
			struct json_tokener *tok = json_tokener_new();
			struct json_object *o = json_tokener_parse_ex(tok, req->body, (int)req->body_len);
			enum json_tokener_error jerr = json_tokener_get_error(tok);
			json_tokener_free(tok);
			if (!o || jerr != json_tokener_success) {
				json_object_put(o);
				fibril_resp_error(resp, 400, "malformed JSON body: %s",
						  json_tokener_error_desc(jerr));
				return;
			}
			json_object_put(o);
		}
		snprintf(s->metric_route, sizeof(s->metric_route), "%s", r->pattern);
		struct crash_ctx cc;
		crash_enter(&cc, r->owner, "API route handler for", r->pattern, -1);
		r->cb(req, resp, r->ud);
		crash_leave(&cc);
		if (s->pending)
			return; /* answered later: fibril_resp_send */
		if (!resp->answered)
			fibril_resp_error(resp, 500, "handler for %s %s did not answer", r->method, r->pattern);
		return;
	}
	if (path_known)
		fibril_resp_error(resp, 405, "method %s not allowed on %s (allowed: %s)", req->method,
				  req->path, allowed);
	else
		fibril_resp_error(resp, 404, "no such path: %s", req->path);
}

/* Queue the response: headers now, the body from the writeable callback. */
static int queue_response(struct lws *wsi, struct session *s)
{
	unsigned char hdr[LWS_PRE + 512];
	unsigned char *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof(hdr) - 1;
	if (lws_add_http_common_headers(wsi, (unsigned)s->resp.status, s->resp.content_type,
					s->resp.len, &p, end))
		return -1;
	if (lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	s->out = malloc(LWS_PRE + s->resp.len + 1);
	if (!s->out)
		return -1;
	memcpy(s->out + LWS_PRE, s->resp.body, s->resp.len);
	s->out_len = s->resp.len;
	s->out_off = 0;
	s->responded = true;
	metrics_api_request(s->req.method, s->metric_route, s->resp.status, mono_ms() - s->metric_t0);
	lws_callback_on_writable(wsi);
	return 0;
}

static int send_response(struct lws *wsi, struct session *s)
{
	if (s->pending)
		return 0; /* the handler deferred its answer */
	int rc = queue_response(wsi, s);
	request_free(s);
	return rc;
}

static int write_body(struct lws *wsi, struct session *s)
{
	if (!s->out)
		return 0;
	size_t left = s->out_len - s->out_off;
	size_t chunk = left > WRITE_CHUNK ? WRITE_CHUNK : left;
	bool last = chunk == left;
	/* The LWS_PRE bytes before each chunk are already-sent body: lws may
	 * scribble there. */
	if (lws_write(wsi, s->out + LWS_PRE + s->out_off, chunk,
		      last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)chunk)
		return -1;
	s->out_off += chunk;
	if (!last) {
		lws_callback_on_writable(wsi);
		return 0;
	}
	free(s->out);
	s->out = NULL;
	if (s->close_after)
		return -1;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* ---- websocket streams ------------------------------------------------------ */

static struct fibril_stream *stream_find(const char *path)
{
	for (struct fibril_stream *st = g_streams; st; st = st->next)
		if (strcmp(st->path, path) == 0)
			return st;
	return NULL;
}

struct fibril_stream *fibril_api_stream(struct fibril_module *m, const char *path)
{
	if (!path || path[0] != '/' || stream_find(path)) {
		errno = path && stream_find(path) ? EEXIST : EINVAL;
		return NULL;
	}
	struct fibril_stream *st = xcalloc(1, sizeof(*st));
	st->owner = m;
	st->path = xstrdup(path);
	st->next = g_streams;
	g_streams = st;
	return st;
}

int fibril_stream_clients(const struct fibril_stream *s)
{
	return s ? s->nclients : 0;
}

int fibril_stream_send(struct fibril_stream *s, const char *msg, size_t len)
{
	if (!s)
		return -EINVAL;
	for (struct stream_client *c = s->clients; c; c = c->next) {
		if (c->queued >= STREAM_QUEUE_MAX) {
			c->dropped++;
			continue;
		}
		struct stream_msg *m = malloc(sizeof(*m) + LWS_PRE + len);
		if (!m)
			return -ENOMEM;
		m->next = NULL;
		m->len = len;
		memcpy(m->buf + LWS_PRE, msg, len);
		if (c->tail)
			c->tail->next = m;
		else
			c->head = m;
		c->tail = m;
		c->queued++;
		lws_callback_on_writable(c->wsi);
	}
	return s->nclients;
}

static void client_free_queue(struct stream_client *c)
{
	while (c->head) {
		struct stream_msg *m = c->head;
		c->head = m->next;
		free(m);
	}
	c->tail = NULL;
	c->queued = 0;
}

static void client_detach(struct stream_client *c)
{
	struct fibril_stream *st = c->stream;
	if (!st)
		return;
	for (struct stream_client **pp = &st->clients; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			st->nclients--;
			break;
		}
	}
	c->stream = NULL;
}

static void stream_free(struct fibril_stream *st)
{
	while (st->clients) {
		struct stream_client *c = st->clients;
		client_detach(c);
		client_free_queue(c);
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
	free(st->path);
	free(st);
}

static int ws_established(struct lws *wsi, struct session *s)
{
	char uri[256];
	if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0)
		return -1;
	struct fibril_stream *st = stream_find(uri);
	if (!st)
		return -1;
	struct stream_client *c = xcalloc(1, sizeof(*c));
	c->wsi = wsi;
	c->stream = st;
	c->next = st->clients;
	st->clients = c;
	st->nclients++;
	s->client = c;
	return 0;
}

static int ws_writeable(struct lws *wsi, struct session *s)
{
	struct stream_client *c = s->client;
	if (!c || !c->head)
		return 0;
	struct stream_msg *m = c->head;
	if (lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT) < (int)m->len)
		return -1;
	c->head = m->next;
	if (!c->head)
		c->tail = NULL;
	c->queued--;
	free(m);
	if (c->head)
		lws_callback_on_writable(wsi);
	return 0;
}

static void ws_closed(struct session *s)
{
	struct stream_client *c = s->client;
	if (!c)
		return;
	client_detach(c);
	client_free_queue(c);
	free(c);
	s->client = NULL;
}

/* ---- the lws callback --------------------------------------------------- */

/* lws's header buffer per connection, and the limits under it past which a
 * request is answered 414 (request target) or 431 (header fields) instead
 * of lws dropping the connection ("Ran out of header data space"). */
#define API_HEADER_BUFFER 32768
#define API_MAX_REQUEST_LINE 8192
#define API_MAX_HEADERS 16384

static int oversized(struct lws *wsi, const char *uri)
{
	int line = (uri ? (int)strlen(uri) : 0) + lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS);
	if (line > API_MAX_REQUEST_LINE)
		return 414;
	int total = 0;
	for (int t = 0; t < (int)WSI_TOKEN_COUNT; t++) {
		int n = lws_hdr_total_length(wsi, (enum lws_token_indexes)t);
		total += n > 0 ? n : 0;
	}
	return total > API_MAX_HEADERS ? 431 : 0;
}

static int api_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			size_t len)
{
	struct session *s = user;
	bool tcp = lws_get_vhost(wsi) == g_tcp_vhost && g_tcp_vhost;
	if (!s) /* a connection that never got as far as a request */
		return lws_callback_http_dummy(wsi, reason, user, in, len);
	switch (reason) {
	case LWS_CALLBACK_HTTP_BIND_PROTOCOL:
		session_link(s, wsi);
		break;
	case LWS_CALLBACK_WSI_DESTROY:
		session_reset(s);
		session_unlink(s);
		break;
	case LWS_CALLBACK_HTTP: {
		session_link(s, wsi);
		session_reset(s);
		s->wsi = wsi;
		int big = oversized(wsi, in);
		parse_request_line(wsi, s, big == 414 ? "/" : in);
		if (big) {
			s->close_after = true;
			fibril_resp_error(&s->resp, big, "%s longer than %d bytes",
					  big == 414 ? "request target" : "request header fields",
					  big == 414 ? API_MAX_REQUEST_LINE : API_MAX_HEADERS);
			return send_response(wsi, s);
		}
		if (s->content_length > g_max_body) {
			/* Answer now and close: the body is never read. */
			s->too_big = true;
			s->close_after = true;
			dispatch(s, tcp);
			return send_response(wsi, s);
		}
		if (method_has_body(s->req.method) && s->content_length > 0)
			return 0; /* wait for LWS_CALLBACK_HTTP_BODY_COMPLETION */
		dispatch(s, tcp);
		return send_response(wsi, s);
	}
	case LWS_CALLBACK_HTTP_BODY:
		if (s->responded)
			return 0;
		if (s->too_big || s->req.body_len + len > g_max_body) {
			s->too_big = true;
			return 0;
		}
		if (s->req.body_len + len + 1 > s->body_cap) {
			s->body_cap = (s->req.body_len + len + 1) * 2;
			if (s->body_cap > g_max_body + 1)
				s->body_cap = g_max_body + 1;
			char *grown = realloc(s->req.body, s->body_cap);
			if (!grown)
				return -1;
			s->req.body = grown;
		}
		if (len) /* lws may call with no data (in NULL) */
			memcpy(s->req.body + s->req.body_len, in, len);
		s->req.body_len += len;
		s->req.body[s->req.body_len] = '\0';
		return 0;
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		if (s->responded)
			return 0;
		dispatch(s, tcp);
		return send_response(wsi, s);
	case LWS_CALLBACK_HTTP_WRITEABLE:
		if (s->deferred_ready) {
			s->deferred_ready = false;
			return send_response(wsi, s);
		}
		return write_body(wsi, s);
	case LWS_CALLBACK_CLOSED_HTTP:
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
		session_reset(s);
		session_unlink(s);
		break;
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
		char uri[256];
		if (tcp || lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 ||
		    !stream_find(uri))
			return 1; /* refuse the upgrade */
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED:
		session_link(s, wsi);
		return ws_established(wsi, s);
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return ws_writeable(wsi, s);
	case LWS_CALLBACK_CLOSED:
		ws_closed(s);
		session_unlink(s);
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols api_protocols[] = {
	{"fibril-api", api_callback, sizeof(struct session), 4096, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- setup and teardown ------------------------------------------------------ */

static void lws_log_to_host(int level, const char *line)
{
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	host_log(level == LLL_ERR ? FIBRIL_LOG_ERROR : FIBRIL_LOG_WARN, "api: %.*s", (int)n, line);
}

int api_init(void)
{
	lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_to_host);
	return 0;
}

/* Refuse to take over a socket a live agent is serving; remove a stale one. */
static int claim_socket_path(const char *path, char *err)
{
	struct stat st;
	if (lstat(path, &st))
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		errbuf_set(err, "[agent] socket %s exists and is not a socket", path);
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int rc = fd >= 0 ? connect(fd, (struct sockaddr *)&sa, sizeof(sa)) : -1;
	if (fd >= 0)
		close(fd);
	if (rc == 0) {
		errbuf_set(err, "[agent] socket %s is in use: another fibril-agent is running", path);
		return -1;
	}
	unlink(path);
	return 0;
}

static int parse_listen(const char *spec, char *host, size_t hostlen, int *port, char *err)
{
	const char *colon = strrchr(spec, ':');
	char *end = NULL;
	long p = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || colon == spec || !end || *end || p <= 0 || p > 65535 ||
	    (size_t)(colon - spec) >= hostlen) {
		errbuf_set(err, "[agent] api-tcp-listen '%s': expected HOST:PORT, e.g. 127.0.0.1:9876",
			   spec);
		return -1;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	*port = (int)p;
	return 0;
}

int api_listen(const struct api_options *opts, char *err)
{
	g_max_body = opts->max_body ? opts->max_body : g_max_body;
	if (strlen(opts->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		errbuf_set(err, "[agent] socket %s: path too long for a unix socket", opts->socket_path);
		return -1;
	}
	if (claim_socket_path(opts->socket_path, err))
		return -1;
	void *loops[1] = {loop_uv()};
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS |
		       LWS_SERVER_OPTION_UV_NO_SIGSEGV_SIGFPE_SPIN;
	info.foreign_loops = loops;
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.max_http_header_data = API_HEADER_BUFFER;
	info.protocols = api_protocols;
	g_ctx = lws_create_context(&info);
	if (!g_ctx) {
		errbuf_set(err, "api: cannot create the server context");
		return -1;
	}
	memset(&info, 0, sizeof(info));
	info.options = LWS_SERVER_OPTION_UNIX_SOCK;
	info.iface = opts->socket_path;
	info.port = 0;
	info.protocols = api_protocols;
	info.vhost_name = "unix";
	info.keepalive_timeout = 30;
	g_unix_vhost = lws_create_vhost(g_ctx, &info);
	if (!g_unix_vhost) {
		errbuf_set(err, "[agent] socket %s: cannot listen (see the log above)", opts->socket_path);
		return -1;
	}
	g_socket_path = xstrdup(opts->socket_path);
	if (chmod(opts->socket_path, opts->socket_mode)) {
		errbuf_set(err, "[agent] socket %s: chmod %04o: %s", opts->socket_path,
			   opts->socket_mode, strerror(errno));
		return -1;
	}
	if (opts->tcp_listen && *opts->tcp_listen) {
		char host[128];
		int port;
		if (parse_listen(opts->tcp_listen, host, sizeof(host), &port, err))
			return -1;
		memset(&info, 0, sizeof(info));
		info.iface = host;
		info.port = port;
		info.protocols = api_protocols;
		info.vhost_name = "tcp";
		g_tcp_vhost = lws_create_vhost(g_ctx, &info);
		if (!g_tcp_vhost) {
			errbuf_set(err, "[agent] api-tcp-listen %s: cannot listen (see the log above)",
				   opts->tcp_listen);
			return -1;
		}
	}
	return 0;
}

/* Close every client connection ourselves, each synchronously, before
 * the context is destroyed: a deferred answer still pending is detached
 * (its fibril_resp_send then only frees it), and the destroy finds only
 * its listeners. Connections accepted meanwhile are closed on the next
 * pass. */
static void close_connections(void)
{
	for (int pass = 0; pass < 3 && g_live; pass++) {
		while (g_live) {
			struct session *s = g_live;
			struct lws *wsi = s->live_wsi;
			if (s->pending) {
				s->pending->sess = NULL;
				s->pending = NULL;
			}
			session_unlink(s);
			/* lws calls CLOSED_HTTP (or CLOSED) and frees s */
			lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
		}
		for (int i = 0; i < 5; i++)
			loop_run_once(false);
	}
}

void api_close(void)
{
	if (!g_ctx)
		return;
	/* Let lws see what already happened on its connections (a client
	 * that just hung up) before the destroy tears them down: libuv aborts
	 * if a connection's fd is closed while a change to its watch is still
	 * queued, and a half-closed connection is where lws does that. */
	for (int i = 0; i < 5; i++)
		loop_run_once(false);
	close_connections();
	/* On a foreign loop the destroy is in two steps: lws closes its
	 * handles on our loop, and once those closes completed a second call
	 * frees the context. */
	lws_context_destroy(g_ctx);
	for (int i = 0; i < 10; i++)
		loop_run_once(false);
	lws_context_destroy(g_ctx);
	g_ctx = NULL;
	g_unix_vhost = g_tcp_vhost = NULL;
	if (g_socket_path) {
		unlink(g_socket_path);
		free(g_socket_path);
		g_socket_path = NULL;
	}
}

void api_release_owner(struct fibril_module *owner)
{
	struct route **pp = &g_routes;
	while (*pp) {
		struct route *r = *pp;
		if (r->owner == owner) {
			*pp = r->next;
			free_route(r);
			continue;
		}
		pp = &r->next;
	}
	struct fibril_stream **sp = &g_streams;
	while (*sp) {
		struct fibril_stream *st = *sp;
		if (st->owner == owner) {
			*sp = st->next;
			stream_free(st);
			continue;
		}
		sp = &st->next;
	}
}

void api_fini(void)
{
	api_close();
	api_release_owner(NULL);
	while (g_routes) {
		struct route *r = g_routes;
		g_routes = r->next;
		free_route(r);
	}
	while (g_streams) {
		struct fibril_stream *st = g_streams;
		g_streams = st->next;
		st->clients = NULL; /* connections are gone with the context */
		stream_free(st);
	}
}
