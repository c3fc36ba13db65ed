/* modules/kvstore-etcd/http.c - POST requests to etcd's JSON gateway with
 * the module's own small HTTP/1.1 client on the agent's loop (it replaced
 * libcurl, which with everything it pulls in cost the agent about 6 MB):
 * non-blocking sockets as fibril_io watches, one request per connection at
 * a time, keep-alive connections reused, bodies by length or chunked (the
 * /v3/watch stream, handed to the watch as it comes), TLS through OpenSSL
 * (tls.c) for https endpoints, host names looked up on the worker pool. A
 * request that could not reach an endpoint (no connection was made) is
 * retried on the next endpoint, in order. Callbacks never run inside
 * etcd_req_send: every completion comes from a loop callback, so done
 * functions may start new requests. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd.h"

enum conn_phase { CONN_CONNECTING, CONN_HANDSHAKE, CONN_READY };

struct etcd_conn {
	struct etcd *e;
	struct etcd_conn *next; /* in e->idle */
	int fd;
	struct fibril_io *io;
	uint32_t events;
	size_t endpoint;
	enum conn_phase phase;
	bool reused;
	struct etcd_tls_conn *tls;
	struct etcd_req *req; /* NULL while idle */
};

/* A host name looked up on the worker pool; orphaned (e NULL) at close. */
struct etcd_resolve {
	struct etcd *e;
	struct etcd_resolve *next;
	size_t endpoint;
	char host[256], port[8];
	struct sockaddr_storage addrs[ETCD_MAX_ADDRS];
	socklen_t addrlens[ETCD_MAX_ADDRS];
	size_t naddrs;
	int gai_err;
};

static void on_conn_io(struct fibril_io *io, int fd, uint32_t revents, void *ud);
static void on_req_timer(struct fibril_timer *t, void *ud);
static void resolve_start(struct etcd *e, size_t endpoint);

/* ---- endpoints -------------------------------------------------------------- */

/* "http://host:port" or "https://[v6]:port", no path. */
static int endpoint_parse(const char *url, struct etcd_endpoint *ep, char *why, size_t len)
{
	memset(ep, 0, sizeof(*ep));
	const char *s;
	if (strncmp(url, "http://", 7) == 0)
		s = url + 7;
	else if (strncmp(url, "https://", 8) == 0)
		s = url + 8, ep->tls = true;
	else
		goto bad;
	const char *host = s, *host_end, *port = NULL;
	if (*s == '[') {
		host = s + 1;
		if (!(host_end = strchr(host, ']')))
			goto bad;
		s = host_end + 1;
	} else {
		host_end = s + strcspn(s, ":/");
		s = host_end;
	}
	if (*s == ':')
		port = ++s, s += strspn(s, "0123456789");
	if (*s || host_end == host || (size_t)(host_end - host) >= sizeof(ep->host) ||
	    (port && (s == port || s - port > 5 || atoi(port) < 1 || atoi(port) > 65535)))
		goto bad;
	memcpy(ep->host, host, (size_t)(host_end - host));
	if (port)
		snprintf(ep->port, sizeof(ep->port), "%.*s", (int)(s - port), port);
	else
		snprintf(ep->port, sizeof(ep->port), "%s", ep->tls ? "443" : "80");
	bool v6 = strchr(ep->host, ':') != NULL;
	snprintf(ep->host_header, sizeof(ep->host_header), "%s%s%s:%s", v6 ? "[" : "", ep->host,
		 v6 ? "]" : "", ep->port);
	/* a numeric address needs no lookup */
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	if (getaddrinfo(ep->host, ep->port, &hints, &res) == 0 && res &&
	    res->ai_addrlen <= sizeof(ep->addrs[0])) {
		memcpy(&ep->addrs[0], res->ai_addr, res->ai_addrlen);
		ep->addrlens[0] = res->ai_addrlen;
		ep->naddrs = 1;
		ep->numeric = true;
	}
	if (res)
		freeaddrinfo(res);
	return 0;
bad:
	snprintf(why, len, "endpoint '%s' is not http(s)://HOST[:PORT] without a path", url);
	return -EINVAL;
}

int etcd_http_open(struct etcd *e)
{
	char why[ETCD_ERROR_SIZE];
	bool any_tls = false;
	e->eps = calloc(e->nendpoints, sizeof(*e->eps));
	if (!e->eps)
		return -ENOMEM;
	for (size_t i = 0; i < e->nendpoints; i++) {
		if (endpoint_parse(e->endpoints[i], &e->eps[i], why, sizeof(why))) {
			fibril_module_set_error(e->m, "%s", why);
			goto fail;
		}
		any_tls |= e->eps[i].tls;
	}
	if (any_tls && !(e->tls = etcd_tls_new(e->ca_file, e->cert_file, e->key_file, why, sizeof(why)))) {
		fibril_module_set_error(e->m, "TLS: %s", why);
		goto fail;
	}
	e->http_open = true;
	return 0;
fail:
	free(e->eps);
	e->eps = NULL;
	return -EINVAL;
}

/* ---- connections -------------------------------------------------------------- */

static void conn_close(struct etcd_conn *c)
{
	fibril_io_remove(c->io);
	etcd_tls_conn_free(c->tls);
	close(c->fd);
	free(c);
}

static void conn_set_events(struct etcd_conn *c, uint32_t events)
{
	if (c->events != events && fibril_io_update(c->io, events) == 0)
		c->events = events;
}

static void idle_remove(struct etcd_conn *c)
{
	struct etcd *e = c->e;
	for (struct etcd_conn **p = &e->idle; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			e->nidle--;
			return;
		}
	}
}

static void idle_close_endpoint(struct etcd *e, size_t endpoint)
{
	for (struct etcd_conn **p = &e->idle; *p;) {
		struct etcd_conn *c = *p;
		if (c->endpoint != endpoint) {
			p = &c->next;
			continue;
		}
		*p = c->next;
		e->nidle--;
		conn_close(c);
	}
}

/* A new connection for r to its endpoint's address. 0 or a negative errno
 * (r->errbuf says why). */
static int conn_open(struct etcd_req *r)
{
	struct etcd *e = r->e;
	struct etcd_endpoint *ep = &e->eps[r->endpoint];
	const struct sockaddr_storage *addr = &ep->addrs[ep->addr_cur];
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		snprintf(r->errbuf, sizeof(r->errbuf), "socket: %s", strerror(err));
		return -err;
	}
	int one = 1, idle = 10, intvl = 5;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	if (connect(fd, (const struct sockaddr *)addr, ep->addrlens[ep->addr_cur]) &&
	    errno != EINPROGRESS) {
		int err = errno;
		snprintf(r->errbuf, sizeof(r->errbuf), "connect to %s: %s", e->endpoints[r->endpoint],
			 strerror(err));
		close(fd);
		return -err;
	}
	struct etcd_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		snprintf(r->errbuf, sizeof(r->errbuf), "out of memory");
		return -ENOMEM;
	}
	c->e = e;
	c->fd = fd;
	c->endpoint = r->endpoint;
	c->phase = CONN_CONNECTING;
	c->events = FIBRIL_IO_WRITE;
	c->io = fibril_io_watch(e->m, fd, c->events, on_conn_io, c);
	if (!c->io) {
		free(c);
		close(fd);
		snprintf(r->errbuf, sizeof(r->errbuf), "cannot watch the socket");
		return -ENOMEM;
	}
	c->req = r;
	r->conn = c;
	return 0;
}

/* ---- requests ------------------------------------------------------------------ */

static void req_free(struct etcd_req *r)
{
	fibril_timer_cancel(r->timer);
	free(r->body);
	free(r->out);
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

static bool req_linked(const struct etcd_req *r)
{
	return r->prev || r->e->reqs == r;
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

/* (Re)arm r's one timer; 0 ms still goes through the loop. */
static void req_arm(struct etcd_req *r, uint64_t ms)
{
	if (r->timer && fibril_timer_rearm(r->timer, ms, 0) == 0)
		return;
	fibril_timer_cancel(r->timer);
	r->timer = fibril_timer_add(r->e->m, ms, 0, on_req_timer, r);
}

static void req_disarm(struct etcd_req *r)
{
	fibril_timer_cancel(r->timer);
	r->timer = NULL;
}

/* A failure found while launching is reported from the loop. */
static void req_fail_soon(struct etcd_req *r)
{
	r->fail_pending = true;
	req_arm(r, 0);
}

/* Let go of r's connection: kept for the next request, or closed. */
static void req_drop_conn(struct etcd_req *r, bool keep)
{
	struct etcd_conn *c = r->conn;
	if (!c)
		return;
	r->conn = NULL;
	c->req = NULL;
	struct etcd *e = r->e;
	if (keep && e->running && e->nidle < ETCD_MAX_IDLE_CONNS) {
		c->reused = true;
		c->next = e->idle;
		e->idle = c;
		e->nidle++;
		conn_set_events(c, FIBRIL_IO_READ); /* anything now is the server closing it */
		return;
	}
	conn_close(c);
}

/* Start the transfer to r->endpoint: a kept-alive connection, a new one, or
 * a name lookup first. Failures are reported from the loop. */
static void req_launch(struct etcd_req *r)
{
	struct etcd *e = r->e;
	struct etcd_endpoint *ep = &e->eps[r->endpoint];
	r->len = 0;
	if (r->buf)
		r->buf[0] = '\0';
	r->errbuf[0] = '\0';
	r->has_data = r->fail_pending = r->waiting_resolve = false;
	r->started_ms = fibril_now_ms();
	mod_http_parser_init(&r->parser);
	free(r->out);
	r->out_off = 0;
	int n = asprintf(&r->out,
			 "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 r->path, ep->host_header, r->body_len, r->body);
	if (n < 0) {
		r->out = NULL;
		snprintf(r->errbuf, sizeof(r->errbuf), "out of memory");
		req_fail_soon(r);
		return;
	}
	r->out_len = (size_t)n;
	for (struct etcd_conn *c = e->idle; c; c = c->next) {
		if (c->endpoint != r->endpoint)
			continue;
		idle_remove(c);
		c->req = r;
		r->conn = c;
		conn_set_events(c, FIBRIL_IO_WRITE);
		if (r->stream)
			req_disarm(r);
		else
			req_arm(r, e->request_timeout_ms);
		return;
	}
	req_arm(r, e->dial_timeout_ms);
	if (!ep->naddrs) {
		r->waiting_resolve = true;
		resolve_start(e, r->endpoint);
		return;
	}
	if (conn_open(r))
		req_fail_soon(r);
}

int etcd_req_send(struct etcd_req *r)
{
	struct etcd *e = r->e;
	if (!e->running || !e->http_open) {
		req_free(r);
		return -ECANCELED;
	}
	r->endpoint = e->cur;
	r->tried = 0;
	r->next = e->reqs;
	if (e->reqs)
		e->reqs->prev = r;
	e->reqs = r;
	req_launch(r);
	return 0;
}

void etcd_req_abort(struct etcd_req *r)
{
	if (!r || !req_linked(r))
		return; /* none, or finishing: req_complete frees it */
	req_unlink(r);
	req_drop_conn(r, false);
	req_free(r);
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

/* Run the callback, then act on the news, then free: the request is off
 * its connection and the list. The callback runs first so that a watch lets
 * go of its request before a disconnection breaks every watch. */
static void req_complete(struct etcd_req *r, int err, struct json_object *resp,
			 enum conn_news news)
{
	struct etcd *e = r->e;
	req_disarm(r);
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

/* The whole answer is in: keep the connection if it may serve another. */
static void req_succeed(struct etcd_req *r, bool keep)
{
	req_drop_conn(r, keep);
	struct json_object *resp = NULL;
	int err = answer_result(r, r->parser.status, &resp);
	req_unlink(r);
	/* a stream that ended: is etcd still there? */
	req_complete(r, err, resp, r->stream ? NEWS_SUSPECT : NEWS_UP);
}

/* No connection to the endpoint (nothing was sent): the next one, or down. */
static void req_fail_connect(struct etcd_req *r)
{
	struct etcd *e = r->e;
	struct etcd_endpoint *ep = &e->eps[r->endpoint];
	req_drop_conn(r, false);
	if (!r->errbuf[0])
		snprintf(r->errbuf, sizeof(r->errbuf), "cannot connect to %s", e->endpoints[r->endpoint]);
	if (ep->naddrs > 1 && ++r->addr_tries < ep->naddrs && e->running) {
		/* a name with several addresses (localhost: ::1, 127.0.0.1): the next */
		fibril_debug(e->m, "%s: %s; trying its next address", e->endpoints[r->endpoint], r->errbuf);
		ep->addr_cur = (ep->addr_cur + 1) % ep->naddrs;
		req_launch(r);
		return;
	}
	r->addr_tries = 0;
	if (!ep->numeric && !ep->resolving)
		ep->naddrs = 0; /* look the name up again next time */
	if (++r->tried < e->nendpoints && e->running) {
		fibril_debug(e->m, "%s: %s; trying the next endpoint", e->endpoints[r->endpoint],
			     r->errbuf);
		r->endpoint = (r->endpoint + 1) % e->nendpoints;
		req_launch(r);
		return;
	}
	req_unlink(r);
	req_complete(r, -ENOTCONN, NULL, NEWS_DOWN);
}

/* The transfer broke after the connection was made. */
static void req_fail_transfer(struct etcd_req *r, int err)
{
	struct etcd *e = r->e;
	bool probe = e->probe == r;
	req_drop_conn(r, false);
	req_unlink(r);
	req_complete(r, err, NULL, probe ? NEWS_DOWN : NEWS_SUSPECT);
}

static void on_req_timer(struct fibril_timer *t, void *ud)
{
	struct etcd_req *r = ud;
	struct etcd *e = r->e;
	(void)t;
	r->timer = NULL; /* a one-shot: the host frees it after this call */
	if (r->fail_pending) {
		req_fail_connect(r);
		return;
	}
	if (!r->conn || r->conn->phase != CONN_READY) {
		r->waiting_resolve = false;
		snprintf(r->errbuf, sizeof(r->errbuf), "connecting to %s timed out after %llu ms",
			 e->endpoints[r->endpoint], (unsigned long long)e->dial_timeout_ms);
		req_fail_connect(r);
		return;
	}
	snprintf(r->errbuf, sizeof(r->errbuf), "%s on %s timed out after %llu ms", r->path,
		 e->endpoints[r->endpoint], (unsigned long long)e->request_timeout_ms);
	req_fail_transfer(r, -ETIMEDOUT);
}

/* ---- the transfer on the loop ----------------------------------------------------- */

static int on_body(void *ud, const char *data, size_t n)
{
	struct etcd_req *r = ud;
	if (r->len + n > ETCD_MAX_RESPONSE)
		return -1;
	if (r->len + n + 1 > r->cap) {
		size_t cap = r->cap ? r->cap : 1024;
		while (cap < r->len + n + 1)
			cap *= 2;
		char *grown = realloc(r->buf, cap);
		if (!grown)
			return -1;
		r->buf = grown;
		r->cap = cap;
	}
	memcpy(r->buf + r->len, data, n);
	r->len += n;
	r->buf[r->len] = '\0';
	if (r->stream)
		r->has_data = true;
	return 0;
}

static long conn_write(struct etcd_conn *c, const void *buf, size_t n, char *why, size_t len)
{
	if (c->tls)
		return etcd_tls_write(c->tls, buf, n, why, len);
	ssize_t w = send(c->fd, buf, n, MSG_NOSIGNAL);
	if (w >= 0)
		return (long)w;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return ETCD_TLS_WANT_WRITE;
	snprintf(why, len, "send: %s", strerror(errno));
	return ETCD_TLS_ERROR;
}

static long conn_read(struct etcd_conn *c, void *buf, size_t n, char *why, size_t len)
{
	if (c->tls)
		return etcd_tls_read(c->tls, buf, n, why, len);
	ssize_t got = recv(c->fd, buf, n, 0);
	if (got >= 0)
		return (long)got;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return ETCD_TLS_WANT_READ;
	snprintf(why, len, "recv: %s", strerror(errno));
	return ETCD_TLS_ERROR;
}

static uint32_t want_events(long rc)
{
	return rc == ETCD_TLS_WANT_WRITE ? FIBRIL_IO_WRITE : FIBRIL_IO_READ;
}

/* TCP (and TLS) are up: the dial timer becomes the request's. */
static void req_connected(struct etcd_req *r)
{
	struct etcd *e = r->e;
	if (r->stream) {
		req_disarm(r);
		return;
	}
	uint64_t spent = fibril_now_ms() - r->started_ms;
	req_arm(r, spent < e->request_timeout_ms ? e->request_timeout_ms - spent : 1);
}

/* The connection closed or broke before an answer: was it a kept-alive one
 * the server had already closed? Then once more on a new one. */
static bool retry_stale(struct etcd_req *r)
{
	struct etcd_conn *c = r->conn;
	if (!c->reused || r->retried_stale || r->parser.status || r->parser.line_len ||
	    !r->e->running)
		return false;
	r->retried_stale = true;
	req_drop_conn(r, false);
	idle_close_endpoint(r->e, r->endpoint);
	req_launch(r);
	return true;
}

/* Connect, handshake, send, receive: as far as the socket lets us. */
static void conn_step(struct etcd_conn *c)
{
	struct etcd_req *r = c->req;
	struct etcd *e = c->e;
	long rc;
	if (c->phase == CONN_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == EINPROGRESS)
			return;
		if (err) {
			snprintf(r->errbuf, sizeof(r->errbuf), "connect to %s: %s",
				 e->endpoints[r->endpoint], strerror(err));
			req_fail_connect(r);
			return;
		}
		c->phase = e->eps[c->endpoint].tls ? CONN_HANDSHAKE : CONN_READY;
		if (c->phase == CONN_HANDSHAKE &&
		    !(c->tls = etcd_tls_conn_new(e->tls, c->fd, e->eps[c->endpoint].host))) {
			snprintf(r->errbuf, sizeof(r->errbuf), "cannot create a TLS session");
			req_fail_connect(r);
			return;
		}
		if (c->phase == CONN_READY)
			req_connected(r);
	}
	if (c->phase == CONN_HANDSHAKE) {
		rc = etcd_tls_handshake(c->tls, r->errbuf, sizeof(r->errbuf));
		if (rc == ETCD_TLS_ERROR) {
			req_fail_connect(r);
			return;
		}
		if (rc) {
			conn_set_events(c, want_events(rc));
			return;
		}
		c->phase = CONN_READY;
		req_connected(r);
	}
	while (r->out_off < r->out_len) {
		rc = conn_write(c, r->out + r->out_off, r->out_len - r->out_off, r->errbuf,
				sizeof(r->errbuf));
		if (rc == ETCD_TLS_ERROR) {
			if (!retry_stale(r))
				req_fail_transfer(r, -ENOTCONN);
			return;
		}
		if (rc < 0) {
			conn_set_events(c, want_events(rc));
			return;
		}
		r->out_off += (size_t)rc;
	}
	conn_set_events(c, FIBRIL_IO_READ);
	char buf[16384];
	/* a few reads per wakeup, so that a watch burst is parsed as it comes
	 * rather than buffered whole (the watch is level-triggered; TLS bytes
	 * already decrypted are read on, the socket would not wake us for them) */
	for (int reads = 0; reads < 4 || (c->tls && etcd_tls_pending(c->tls)); reads++) {
		rc = conn_read(c, buf, sizeof(buf), r->errbuf, sizeof(r->errbuf));
		if (rc == ETCD_TLS_WANT_READ || rc == ETCD_TLS_WANT_WRITE) {
			conn_set_events(c, want_events(rc));
			break;
		}
		if (rc == ETCD_TLS_ERROR) {
			if (!retry_stale(r))
				req_fail_transfer(r, -ENOTCONN);
			return;
		}
		if (rc == 0) {
			if (mod_http_parser_eof(&r->parser) == 1) {
				req_succeed(r, false);
			} else if (!retry_stale(r)) {
				snprintf(r->errbuf, sizeof(r->errbuf), "%s: %s", e->endpoints[r->endpoint],
					 r->parser.error);
				req_fail_transfer(r, -ENOTCONN);
			}
			return;
		}
		size_t used = 0;
		int prc = mod_http_parser_feed(&r->parser, buf, (size_t)rc, &used, on_body, r);
		if (prc < 0) {
			snprintf(r->errbuf, sizeof(r->errbuf), "bad answer from %s to %s: %s",
				 e->endpoints[r->endpoint], r->path, r->parser.error);
			req_fail_transfer(r, -EIO);
			return;
		}
		if (prc == 1) {
			req_succeed(r, !r->parser.close && used == (size_t)rc);
			return;
		}
	}
	if (r->stream && r->has_data) {
		r->has_data = false;
		r->data(r); /* last: it may end the request */
	}
}

static void on_conn_io(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct etcd_conn *c = ud;
	(void)io;
	(void)fd;
	(void)revents;
	if (!c->req) { /* idle: the server closed it (or sent what nobody asked) */
		idle_remove(c);
		conn_close(c);
		return;
	}
	conn_step(c);
}

/* ---- host names on the worker pool ----------------------------------------------- */

static void resolve_work(void *ud)
{
	struct etcd_resolve *j = ud;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	j->gai_err = getaddrinfo(j->host, j->port, &hints, &res);
	for (struct addrinfo *a = j->gai_err ? NULL : res; a && j->naddrs < ETCD_MAX_ADDRS; a = a->ai_next) {
		if (a->ai_addrlen > sizeof(j->addrs[0]))
			continue;
		memcpy(&j->addrs[j->naddrs], a->ai_addr, a->ai_addrlen);
		j->addrlens[j->naddrs++] = a->ai_addrlen;
	}
	if (j->gai_err == 0 && !j->naddrs)
		j->gai_err = EAI_NONAME;
	if (res)
		freeaddrinfo(res);
}

static void resolve_done(void *ud, int status)
{
	struct etcd_resolve *j = ud;
	struct etcd *e = j->e;
	if (!e) { /* the module stopped meanwhile */
		free(j);
		return;
	}
	for (struct etcd_resolve **p = &e->resolving; *p; p = &(*p)->next) {
		if (*p == j) {
			*p = j->next;
			break;
		}
	}
	struct etcd_endpoint *ep = &e->eps[j->endpoint];
	ep->resolving = false;
	if (status == 0 && j->gai_err == 0) {
		memcpy(ep->addrs, j->addrs, sizeof(ep->addrs));
		memcpy(ep->addrlens, j->addrlens, sizeof(ep->addrlens));
		ep->naddrs = j->naddrs;
		ep->addr_cur = 0;
	}
	/* every request waiting for this name: connect, or fail over */
	for (;;) {
		struct etcd_req *r = e->reqs;
		while (r && !(r->waiting_resolve && r->endpoint == j->endpoint))
			r = r->next;
		if (!r)
			break;
		r->waiting_resolve = false;
		if (!ep->naddrs) {
			snprintf(r->errbuf, sizeof(r->errbuf), "cannot resolve %.200s: %s", ep->host,
				 status ? strerror(-status) : gai_strerror(j->gai_err));
			req_fail_connect(r);
		} else if (conn_open(r)) {
			req_fail_connect(r);
		}
	}
	free(j);
}

static void resolve_start(struct etcd *e, size_t endpoint)
{
	struct etcd_endpoint *ep = &e->eps[endpoint];
	if (ep->resolving)
		return;
	struct etcd_resolve *j = calloc(1, sizeof(*j));
	if (j) {
		j->e = e;
		j->endpoint = endpoint;
		snprintf(j->host, sizeof(j->host), "%s", ep->host);
		snprintf(j->port, sizeof(j->port), "%s", ep->port);
	}
	if (!j || fibril_work_submit(e->m, resolve_work, resolve_done, j)) {
		free(j);
		/* fail the waiting requests from the loop */
		for (struct etcd_req *r = e->reqs; r; r = r->next) {
			if (r->waiting_resolve && r->endpoint == endpoint) {
				r->waiting_resolve = false;
				snprintf(r->errbuf, sizeof(r->errbuf), "cannot look up %.200s", ep->host);
				req_fail_soon(r);
			}
		}
		return;
	}
	ep->resolving = true;
	j->next = e->resolving;
	e->resolving = j;
}

/* ---- shutdown ------------------------------------------------------------------- */

void etcd_http_close(struct etcd *e)
{
	if (!e->http_open)
		return;
	while (e->reqs) {
		struct etcd_req *r = e->reqs;
		req_unlink(r);
		req_drop_conn(r, false);
		snprintf(r->errbuf, sizeof(r->errbuf), "the kvstore is stopping");
		req_complete(r, -ECANCELED, NULL, NEWS_NONE);
	}
	while (e->idle) {
		struct etcd_conn *c = e->idle;
		e->idle = c->next;
		conn_close(c);
	}
	e->nidle = 0;
	while (e->resolving) { /* their completions free them */
		struct etcd_resolve *j = e->resolving;
		e->resolving = j->next;
		j->e = NULL;
	}
	etcd_tls_free(e->tls);
	e->tls = NULL;
	free(e->eps);
	e->eps = NULL;
	e->http_open = false;
}
