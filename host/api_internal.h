/* host/api_internal.h - what the two halves of the API server share:
 * api_http.c (routes, requests, responses, dispatch: what a request means),
 * api_server.c (libwebsockets: listeners, connections, reading a request,
 * writing its answer) and api_stream.c (websocket streams). */
#ifndef FIBRIL_API_INTERNAL_H
#define FIBRIL_API_INTERNAL_H

#include "internal.h"

#include <stdbool.h>
#include <stddef.h>

#define MAX_SEGMENTS 16
#define MAX_QUERY 32

struct lws;
struct fibril_stream_client;

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

/* Per-connection state (lws allocates and zeroes it). */struct session {
	struct fibril_request req;
	struct fibril_response resp;
	size_t body_cap;
	size_t content_length;
	bool too_big;
	bool foreign_host; /* TCP: the Host header names neither an address nor localhost */
	unsigned char *out; /* LWS_PRE + body */
	size_t out_len, out_off;
	bool responded;     /* the answer is queued: ignore the rest of the body */
	bool close_after;   /* close the connection once the answer is written */
	struct fibril_stream_client *client;
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

/* The request body limit ([agent] api-max-body), set by api_listen. */
HIDDEN extern size_t api_max_body;

/* api_limits.c: the TCP listeners' connection limits */
#define API_LISTENERS 2 /* api-tcp-listen, api-remote-listen */
enum { API_LISTENER_TCP, API_LISTENER_REMOTE };
HIDDEN void api_limits_set(unsigned max_conns, unsigned max_per_source);
/* A connection accepted on listener from descriptor fd: counted, or false
 * (the caller closes it) past a limit. */
HIDDEN bool api_conn_admit(int listener, const char *listener_name, int fd);
HIDDEN unsigned api_limits_count(int listener);
HIDDEN void api_limits_free(void);

/* api_http.c */
/* Match the request to a route and run its handler (or answer 404/405/413). */
HIDDEN void api_dispatch(struct session *s, bool tcp);
/* Free what the request and its answer hold (the answer is copied to out). */
HIDDEN void api_request_free(struct session *s);
/* Forget the request (a deferred answer still pending is detached); the
 * connection's links (stream client, live list) stay. */
HIDDEN void api_session_reset(struct session *s);
HIDDEN void api_routes_release_owner(struct fibril_module *owner);
/* What lws parsed of a request, checked: 414 (the target) or 431 (the
 * fields it knows) past the limits, else 0; a control character in the
 * decoded target, another HTTP version than 1.0/1.1 (true and the error
 * line in msg). */
HIDDEN int api_oversized(struct lws *wsi, const char *uri);
HIDDEN bool api_target_refused(struct lws *wsi, const struct session *s, char *msg, size_t len);
HIDDEN bool api_version_refused(struct lws *wsi, char *msg, size_t len);
HIDDEN void api_routes_free(void);

/* api_stream.c */
/* Whether a websocket upgrade to path is taken (on the TCP listener: a
 * stream that asked for it). */
HIDDEN bool api_stream_accepts(const char *path, bool tcp);
/* The upgrade is done; s->req holds its path and query. */
HIDDEN int api_stream_established(struct lws *wsi, struct session *s, bool tcp);
HIDDEN int api_stream_writeable(struct lws *wsi, struct session *s);
HIDDEN void api_stream_closed(struct session *s);
HIDDEN void api_streams_release_owner(struct fibril_module *owner);
HIDDEN void api_streams_free(void);

/* api_head.c: the check of a request head before libwebsockets parses it.
 * The limits past which a request is answered 414 (request target) or 431
 * (header fields, the head); lws's header buffer per connection (API_HEADER_BUFFER,
 * api_server.c) holds a head within them with room to spare. */
#define API_MAX_REQUEST_LINE 8192
#define API_MAX_HEADERS 16384 /* of the fields lws knows, checked after its parse */
/* the whole head (request line and every field), checked before: within
 * lws's 32 KiB buffer with room for its per-field bookkeeping */
#define API_MAX_HEAD 28672
#define API_MAX_HEADER_FIELDS 128
enum api_head_result { API_HEAD_MORE, API_HEAD_OK, API_HEAD_REFUSED };
struct api_head_verdict {
	int status;      /* refused: 400, 414, 431, 501, 505 */
	char method[16]; /* the request line's method ("-" before one is read) */
	char msg[160];   /* refused: the one-line error */
	size_t head_len; /* OK: the bytes up to and with the empty line */
	size_t body_len;   /* OK: its Content-Length (0 without one) */
	bool body_unknown; /* OK: where its body ends is not known (chunked, a bad length) */
};
/* The head in buf[0..len): complete and acceptable (OK), refused, or not
 * complete yet (MORE). */
HIDDEN enum api_head_result api_head_check(const char *buf, size_t len, struct api_head_verdict *v);

/* api_accept.c: a new connection on the unix socket or the TCP listener is
 * taken from lws at accept (fd is lws's, which it closes when this returns
 * non-zero), its head read and checked, answered and closed if refused,
 * else handed back to lws on vhost with the bytes read. listener: the
 * limits it is counted in (api_conn_admit), -1 for none. 1: taken; -1:
 * refused (past a limit); 0: not taken (lws serves it unchecked). */
struct lws_vhost;
HIDDEN int api_accept_take(struct lws_vhost *vhost, int fd, int listener, unsigned idle_s);
/* Take connections (api_listen), or no more, closing every one still
 * being read (api_close: the agent stops). */
HIDDEN void api_accept_open(void);
HIDDEN void api_accept_close_all(void);
/* A kept-alive connection's answer is written and lws waits for its next
 * request: pause lws's reading and read and check the head first (a good
 * one resumes lws, a refused one is answered and the connection closed). */
HIDDEN void api_keepalive_pause(struct lws *wsi, unsigned idle_s);
/* Whether lws may hold bytes of a next request nobody checked (they came
 * with this one's head or are waiting unread): answer it with
 * `connection: close` then. Asked once per request. */
HIDDEN bool api_keepalive_pipelined(struct lws *wsi);
/* The connection is closing: stop reading its next head. */
HIDDEN void api_keepalive_forget(struct lws *wsi);
/* A JSON error written straight to a connection about to be closed. */
HIDDEN void api_send_error_now(int fd, int status, const char *msg);

/* api_server.c */
/* A deferred answer is ready: write it when the connection can take it. */
HIDDEN void api_session_wake(struct session *s);
/* The method's canonical name ("GET" for one lws does not know), and
 * whether its body is read. */
HIDDEN const char *api_method_name(const char *method);
HIDDEN bool api_method_has_body(const char *method);

#endif
