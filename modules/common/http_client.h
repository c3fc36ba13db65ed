/* modules/common/http_client.h - the modules' HTTP/1.1 client on the
 * agent's loop (kvstore-etcd to etcd's JSON gateway, k8s to the API
 * server): non-blocking sockets as fibril_io watches, one request per
 * connection at a time, keep-alive connections reused, bodies by length,
 * chunked or up to the end (http_parse.c) handed over as they are decoded
 * (gzip inflated when asked for), streams (watches) told of new bytes after
 * each wakeup, TLS through OpenSSL (http_tls.c) with CA, certificate and
 * key as files or PEM text, host names looked up on the worker pool, unix
 * sockets or TCP. A client has one or more endpoints: a request that could
 * not reach one (no connection was made) is tried on the next, in order.
 * Callbacks never run inside mod_http_req_send: every completion comes from
 * a loop callback, so a done function may start new requests. Without
 * libcurl, which with everything it pulls in cost the agent about 6 MB.
 * Internal to the modules (compiled into each that uses it, hidden), not
 * part of the SDK. */
#ifndef FIBRIL_MODULES_HTTP_CLIENT_H
#define FIBRIL_MODULES_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fibril/fibril.h>

#include "http_parse.h"
#include "http_tls.h"

#define MOD_HTTP_ERROR_SIZE 512u
#define MOD_HTTP_MAX_ADDRS 4u /* addresses of one endpoint name tried in turn */

struct mod_http_client_config {
	/* "http://HOST[:PORT]", "https://HOST[:PORT]" ([v6] in brackets) or
	 * "unix:/PATH" (a unix socket, Host: localhost); no path */
	const char *const *endpoints;
	size_t nendpoints;
	struct mod_http_tls_config tls; /* for the https endpoints */
	uint64_t connect_timeout_ms;    /* a connection (and TLS handshake) */
	int keepalive_idle_s, keepalive_intvl_s; /* TCP keepalive; 0: the kernel's */
	size_t max_idle;   /* keep-alive connections kept open */
	bool accept_gzip;  /* ask for gzip bodies and inflate them */
	const char *stopping; /* errbuf of the requests cancelled by free */
};

struct mod_http_client;
struct mod_http_req;

/* Runs exactly once per request sent: err 0 when the whole answer is in
 * (r->status any), a negative errno: -ENOTCONN (r->reached false: no
 * endpoint could be reached; true: the connection broke), -ETIMEDOUT,
 * -EIO (a malformed answer, or the body callback refused it), -ECANCELED
 * (mod_http_client_free). r->errbuf says what went wrong. r is freed when
 * it returns. */
typedef void (*mod_http_done_fn)(struct mod_http_req *r, int err);
/* Decoded body bytes: 0 to go on, nonzero to fail the request (-EIO). */
typedef int (*mod_http_bytes_fn)(struct mod_http_req *r, const char *data, size_t n);
/* The final answer's headers are in (r->status); or a stream's new bytes
 * (called last in a loop callback, after the bytes of that wakeup): both
 * may abort the request. */
typedef void (*mod_http_event_fn)(struct mod_http_req *r);

struct mod_http_req {
	/* set by the caller between mod_http_req_new and _send */
	size_t endpoint;     /* the endpoint tried first */
	uint64_t timeout_ms; /* the whole request, connection included; 0: none */
	mod_http_done_fn done;
	mod_http_bytes_fn body;  /* or NULL: the body is dropped */
	mod_http_event_fn head;  /* or NULL */
	mod_http_event_fn data;  /* streams, or NULL */
	void *ud;
	/* the outcome */
	int status;    /* of the answer, 0 before its status line */
	bool reached;  /* a connection to the endpoint was made */
	char errbuf[MOD_HTTP_ERROR_SIZE];
	/* the rest is http_client.c's */
	struct mod_http_client *c;
	struct mod_http_req *prev, *next;
	struct mod_http_conn *conn;
	struct fibril_timer *timer;
	char *method, *path, *headers, *body_text;
	size_t body_len, tried, addr_tries;
	char *out; /* the request's bytes for the current endpoint */
	size_t out_len, out_off;
	uint64_t started_ms;
	bool waiting_resolve, retried_stale, fail_pending, has_data, head_told, completing;
	struct mod_http_inflate *inflate;
	const char *body_error;
	struct mod_http_parser parser;
};

/* The endpoints parsed, TLS set up when one is https. NULL with why set. */
struct mod_http_client *mod_http_client_new(struct fibril_module *m,
					    const struct mod_http_client_config *cfg, char *why,
					    size_t len);
/* Every request in flight ends with -ECANCELED (done runs, and may not
 * send), connections close, the client is freed. NULL is fine. */
void mod_http_client_free(struct mod_http_client *c);
/* The endpoint's text as configured. */
const char *mod_http_client_endpoint(const struct mod_http_client *c, size_t i);

/* A request: method, path (with its query), extra header lines ("Name:
 * value", NULL-terminated, or NULL; copied), and a body (copied; NULL:
 * none and no Content-Length). NULL on ENOMEM or a line break in a part. */
struct mod_http_req *mod_http_req_new(struct mod_http_client *c, const char *method,
				      const char *path, const char *const *headers,
				      const char *body, size_t body_len);
/* Start it (0), or free it and return a negative errno (done never runs). */
int mod_http_req_send(struct mod_http_req *r);
/* Drop a request without running its callback (a no-op inside its done). */
void mod_http_req_abort(struct mod_http_req *r);
/* The path without its query: what messages name. */
size_t mod_http_req_what(const struct mod_http_req *r, char *buf, size_t len);

/* Append n bytes to a NUL-terminated growing buffer (first size
 * first_cap, doubled), refusing to grow past max bytes. 0, or -1. */
int mod_http_buf_append(char **buf, size_t *len, size_t *cap, size_t first_cap, size_t max,
			const char *data, size_t n);

#endif
