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
/* ABI 1.6: also served on the agent's TCP listener ([agent] api-tcp-listen,
 * loopback unless the operator says otherwise), e.g. a web page and the
 * data it reads. The unix socket always serves the route. */
#define FIBRIL_ROUTE_TCP 2u

int fibril_api_route(struct fibril_module *m, const char *method, const char *pattern,
		     uint32_t flags, fibril_route_fn cb, void *ud);

const char *fibril_req_method(const struct fibril_request *req);
const char *fibril_req_path(const struct fibril_request *req);
/* Decoded query parameter, or NULL. A key given more than once
 * (?verdict=DROPPED&verdict=FORWARDED) answers its first value. */
const char *fibril_req_query(const struct fibril_request *req, const char *name);
/* ABI 1.11: the index-th (from 0) decoded value of a query key, in the
 * order the client sent them, or NULL past the last one; index 0 is
 * fibril_req_query's value. Read every value of a repeatable key with
 *     for (size_t i = 0; (v = fibril_req_query_n(req, "verdict", i)); i++)
 * (the host caps a request's query pairs, so the loop ends). */
const char *fibril_req_query_n(const struct fibril_request *req, const char *name, size_t index);
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

/* Streams with a state per client (ABI 1.6): each client connects with its
 * own query (ws+unix://.../<path>?key=value...), the module sends to each
 * client on its own, and a client that reads too slowly loses its own
 * messages - never anyone else's, and a send never waits. */
struct fibril_stream_client;
struct fibril_request;

#define FIBRIL_STREAM_TCP 1u   /* also served on the TCP listener */
#define FIBRIL_STREAM_LINES 2u /* messages queued while the client is busy go out
				* together, joined by '\n', in one frame of at
				* most 128 KiB: send each message as one line */

struct fibril_stream_ops {
	size_t sz; /* sizeof(struct fibril_stream_ops) */
	uint32_t flags; /* FIBRIL_STREAM_* */
	/* Messages queued per client past which new ones are dropped for
	 * that client (and counted); 0: 4096. */
	uint32_t max_queue;
	/* A client connected; req holds its path and query (valid during the
	 * call only). Return 0 to keep it; or write a one-line reason to err
	 * and return -1: the client gets {"error": reason, "code": 400} and
	 * the stream is closed. */
	int (*open)(struct fibril_stream_client *c, const struct fibril_request *req, void *ud,
		    char *err, size_t errlen);
	/* The client is gone (or the module is being unloaded): free its
	 * data. No send to it after this. */
	void (*close)(struct fibril_stream_client *c, void *ud);
	/* Messages to this client were dropped (its queue was full) and its
	 * queue has room again: lost messages since the last call. The module
	 * usually tells the client (fibril_stream_client_send). */
	void (*lost)(struct fibril_stream_client *c, uint64_t lost, void *ud);
};

struct fibril_stream *fibril_api_stream_ops(struct fibril_module *m, const char *path,
					    const struct fibril_stream_ops *ops, void *ud);
/* Queue one message for one client: 0, -ENOBUFS when its queue is full
 * (the message is dropped and counted for the lost callback), -ENOMEM. */
int fibril_stream_client_send(struct fibril_stream_client *c, const char *msg, size_t len);
void fibril_stream_client_set_data(struct fibril_stream_client *c, void *data);
void *fibril_stream_client_data(const struct fibril_stream_client *c);
/* Messages dropped for this client so far, in all. */
uint64_t fibril_stream_client_dropped(const struct fibril_stream_client *c);

/* Shared messages (ABI 1.7): a message written once and queued for many
 * clients by reference - the bytes are not copied per client. new: a
 * message holding a copy of text (one reference, the caller's; NULL when
 * out of memory). send_msg: queue it for one client (the queue takes its
 * own reference), the same answers as fibril_stream_client_send. put:
 * drop the caller's reference (the message goes with its last one). */
struct fibril_stream_msg;
struct fibril_stream_msg *fibril_stream_msg_new(const char *text, size_t len);
int fibril_stream_client_send_msg(struct fibril_stream_client *c, struct fibril_stream_msg *msg);
void fibril_stream_msg_put(struct fibril_stream_msg *msg);

#ifdef __cplusplus
}
#endif
#endif
