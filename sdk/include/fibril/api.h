/* fibril/api.h - routes and websocket streams on the agent's API.
 *
 * The API is HTTP/1.1 + JSON on a unix socket. A module registers a handler
 * for a method and a path pattern; `{name}` segments match one path segment
 * and are read with fibril_req_param(). Handlers run on the loop thread and
 * answer before returning, or defer their answer (fibril_resp_defer). Bodies over the size limit are refused with 413
 * before the handler runs; with FIBRIL_ROUTE_JSON_BODY a body that is not
 * valid JSON gets 400. Errors are JSON: {"error": "...", "code": N}. */
#ifndef FIBRIL_API_H
#define FIBRIL_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_request;
struct fibril_response;
struct fibril_stream;

typedef void (*fibril_route_fn)(struct fibril_request *req, struct fibril_response *resp,
				void *ud);

#define FIBRIL_ROUTE_JSON_BODY 1u /* reject a body that is not JSON with 400 */

int fibril_api_route(struct fibril_module *m, const char *method, const char *pattern,
		     uint32_t flags, fibril_route_fn cb, void *ud);

const char *fibril_req_method(const struct fibril_request *req);
const char *fibril_req_path(const struct fibril_request *req);
/* Decoded query parameter, or NULL. */
const char *fibril_req_query(const struct fibril_request *req, const char *name);
/* A {name} segment of the pattern, or NULL. */
const char *fibril_req_param(const struct fibril_request *req, const char *name);
const char *fibril_req_body(const struct fibril_request *req, size_t *len);

/* Answer with a JSON document (text). */
void fibril_resp_json(struct fibril_response *resp, int status, const char *json);
/* Answer {"error": "<formatted>", "code": status}. */
void fibril_resp_error(struct fibril_response *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Any content type. */
void fibril_resp_body(struct fibril_response *resp, int status, const char *content_type,
		      const void *body, size_t len);

/* Deferred answers (ABI 1.4), for a handler whose answer must wait (e.g.
 * until its state is on disk, <fibril/journal.h>). Inside the handler,
 * fibril_resp_defer(resp) returns a response of the handler's own (NULL if
 * resp was answered or deferred already) and the handler returns without
 * answering; the request's accessors are valid only until it returns, so
 * copy what is needed. Later, on the loop, answer it with
 * fibril_resp_json/_error/_body and pass it to fibril_resp_send, which
 * sends it and frees it (unanswered: 500). If the client went away
 * meanwhile, fibril_resp_send just frees it. Send every deferred response,
 * at the latest in the module's fini. */
struct fibril_response *fibril_resp_defer(struct fibril_response *resp);
void fibril_resp_send(struct fibril_response *deferred);

/* Websocket streams: clients connect to ws+unix://.../<path>; the module
 * sends text messages to every connected client. */
struct fibril_stream *fibril_api_stream(struct fibril_module *m, const char *path);
/* Queue a message for every client; returns the number of clients. */
int fibril_stream_send(struct fibril_stream *s, const char *msg, size_t len);
int fibril_stream_clients(const struct fibril_stream *s);

#ifdef __cplusplus
}
#endif
#endif
