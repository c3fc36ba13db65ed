/* host/api_routes.c - the API's routes and what a handler sees: routes
 * registered by method and path pattern ({name} matches one segment), the
 * request accessors and the responses (fibril_req_*, fibril_resp_*). The
 * HTTP server that matches and calls them is host/api.c. */
#include "api_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct route *g_routes;

/* ---- routes ---------------------------------------------------------------- */

size_t split_path(char *path, char **segs)
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

void free_route(struct route *r)
{
	for (size_t i = 0; i < r->nsegs; i++)
		free(r->segs[i]);
	free(r->method);
	free(r->pattern);
	free(r);
}

bool route_matches(const struct route *r, struct fibril_request *req, char **segs, size_t n)
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
