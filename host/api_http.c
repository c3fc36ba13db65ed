/* host/api_http.c - what an API request means: the route table (method
 * and path pattern, {name} matching one segment), the request accessors
 * and responses of <fibril/api.h>, deferred answers, and the dispatch of a
 * parsed request to its handler (404, 405, 413, a JSON body checked), and
 * the checks of what libwebsockets parsed of a request (its size, control
 * characters in the target, the HTTP version). The connections themselves
 * are api_server.c's. */
#include "api_internal.h"

#include <errno.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

struct route {
	struct fibril_module *owner;
	char *method;
	char *pattern;
	char *segs[MAX_SEGMENTS];
	size_t nsegs;
	uint32_t flags;
	fibril_route_fn cb;
	void *ud;
	bool on_unix, on_tcp; /* served on the unix socket, the TCP listener */
	struct route *next;
};

static struct route *g_routes;
size_t api_max_body = 1 << 20;

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
		     uint32_t flags, fibril_route_fn cb, void *ud, bool on_unix, bool on_tcp)
{
	if (!method || !pattern || pattern[0] != '/' || !cb ||
	    (flags & ~(FIBRIL_ROUTE_JSON_BODY | FIBRIL_ROUTE_TCP)))
		return -EINVAL;
	struct route *r = xcalloc(1, sizeof(*r));
	r->owner = m;
	r->method = xstrdup(method);
	r->pattern = xstrdup(pattern);
	r->flags = flags;
	r->cb = cb;
	r->ud = ud;
	r->on_unix = on_unix;
	r->on_tcp = on_tcp;
	char *copy = xstrdup(pattern);
	char *segs[MAX_SEGMENTS];
	r->nsegs = split_path(copy, segs);
	for (size_t i = 0; i < r->nsegs; i++)
		r->segs[i] = xstrdup(segs[i]);
	free(copy);
	for (struct route *o = g_routes; o; o = o->next) {
		if (((o->on_unix && on_unix) || (o->on_tcp && on_tcp)) && strcmp(o->method, r->method) == 0 &&
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
	return add_route(m, method, pattern, flags, cb, ud, true, (flags & FIBRIL_ROUTE_TCP) != 0);
}

int api_route_host(const char *method, const char *pattern, uint32_t flags, fibril_route_fn cb,
		   void *ud)
{
	return add_route(NULL, method, pattern, flags, cb, ud, true, (flags & FIBRIL_ROUTE_TCP) != 0);
}

int api_route_tcp(const char *method, const char *pattern, fibril_route_fn cb, void *ud)
{
	return add_route(NULL, method, pattern, 0, cb, ud, false, true);
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

const char *fibril_req_query_n(const struct fibril_request *req, const char *name, size_t index)
{
	for (size_t i = 0; i < req->nquery; i++)
		if (strcmp(req->query[i][0], name) == 0 && index-- == 0)
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
	api_session_wake(s);
}

/* ---- request state ---------------------------------------------------------- */

void api_request_free(struct session *s)
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

void api_session_reset(struct session *s)
{
	if (s->pending) /* the handler answers a connection that is gone */
		s->pending->sess = NULL;
	api_request_free(s);
	free(s->out);
	struct fibril_stream_client *client = s->client;
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

void api_dispatch(struct session *s, bool tcp)
{
	struct fibril_request *req = &s->req;
	struct fibril_response *resp = &s->resp;
	s->metric_t0 = mono_ms();
	snprintf(s->metric_route, sizeof(s->metric_route), "unmatched");
	if (s->too_big) {
		fibril_resp_error(resp, 413, "request body exceeds the limit of %zu bytes", api_max_body);
		return;
	}
	snprintf(req->path_split, sizeof(req->path_split), "%s", req->path);
	char *segs[MAX_SEGMENTS];
	size_t n = split_path(req->path_split, segs);
	bool path_known = false;
	char allowed[64] = "";
	for (struct route *r = g_routes; r; r = r->next) {
		if ((tcp ? !r->on_tcp : !r->on_unix) || !route_matches(r, req, segs, n))
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
		if (tcp && r->owner && s->foreign_host) {
			/* a name could be a DNS rebinding of a hostile page */
			fibril_resp_error(resp, 421, "%s on the TCP listener: use the listener's address "
					  "(or localhost) in the URL, not a host name", r->pattern);
			return;
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

void api_routes_release_owner(struct fibril_module *owner)
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
}

void api_routes_free(void)
{
	while (g_routes) {
		struct route *r = g_routes;
		g_routes = r->next;
		free_route(r);
	}
}

/* ---- the checks of what libwebsockets parsed ------------------------------ */

int api_oversized(struct lws *wsi, const char *uri)
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

/* A control character in the request target, after percent-decoding
 * (%0A, %0D, %09, %7F ...), is refused: libwebsockets ends the request
 * line at a decoded CR or LF and drops the rest, so "owner=a/eth0%0Ajunk"
 * reached a handler as "owner=a/eth0", another owner's name. Such a cut
 * line has no HTTP version left (lws skipped it with the rest); any other
 * control character is still in the decoded text. The one place every
 * route's path and query go through; "" when the target is clean, else
 * the error line naming the parameter. */
static bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

static bool has_control(const char *text)
{
	for (const unsigned char *c = (const unsigned char *)text; *c; c++)
		if (is_control(*c))
			return true;
	return false;
}

/* text with its control characters shown as '?' (for an error line) */
static void mask_controls(char *text)
{
	for (char *c = text; *c; c++)
		if (is_control((unsigned char)*c))
			*c = '?';
}

bool api_target_refused(struct lws *wsi, const struct session *s, char *msg, size_t len)
{
	const char *why = "control characters are not allowed";
	if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP) <= 0) {
		/* cut at a decoded CR or LF: in the last query parameter, else the path */
		if (s->req.nquery)
			snprintf(msg, len, "query '%s': %s", s->req.query[s->req.nquery - 1][0], why);
		else
			snprintf(msg, len, "request path: %s", why);
		return true;
	}
	if (has_control(s->req.path)) {
		snprintf(msg, len, "request path: %s", why);
		return true;
	}
	for (size_t i = 0; i < s->req.nquery; i++) {
		if (has_control(s->req.query[i][0]) || has_control(s->req.query[i][1])) {
			char name[64];
			snprintf(name, sizeof(name), "%s", s->req.query[i][0]);
			mask_controls(name);
			snprintf(msg, len, "query '%s': %s", name, why);
			return true;
		}
	}
	return false;
}

/* An HTTP version other than 1.0 and 1.1: lws serves "HTTP/3.0" as 1.0.
 * api_head.c refuses it first on the plain listeners; on the remote one
 * (TLS) lws parses the head, and this is where it is refused. */
bool api_version_refused(struct lws *wsi, char *msg, size_t len)
{
	char version[16];
	int n = lws_hdr_copy(wsi, version, sizeof(version), WSI_TOKEN_HTTP);
	if (n <= 0 || !strcmp(version, "HTTP/1.1") || !strcmp(version, "HTTP/1.0"))
		return false;
	mask_controls(version);
	snprintf(msg, len, "HTTP version %s not supported (HTTP/1.1)", version);
	return true;
}

