/* modules/common/http_client.c - the modules' HTTP/1.1 client on the
 * agent's loop (see http_client.h): endpoints taken apart, connections
 * (TCP or unix, TLS on top for https) as fibril_io watches and kept alive
 * for the next request, the request's dial and total timeouts on one timer,
 * failover to the next address and endpoint while no connection was made,
 * one retry on a new connection when a kept-alive one turns out closed,
 * answers read with http_parse.c (gzip bodies inflated with zlib), host
 * names looked up on the worker pool. Everything runs on the loop thread. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <zlib.h>

#include "http_client.h"

/* One endpoint taken apart. */
struct mod_http_endpoint {
	bool tls;
	bool unix_socket;
	char host[256]; /* without the brackets of an IPv6 address */
	char port[8];
	char host_header[280];
	/* its addresses, looked up once, again after every address failed */
	struct sockaddr_storage addrs[MOD_HTTP_MAX_ADDRS];
	socklen_t addrlens[MOD_HTTP_MAX_ADDRS];
	size_t naddrs, addr_cur;
	bool numeric; /* an address (or a socket path), never looked up */
	bool resolving;
};

struct mod_http_client {
	struct fibril_module *m;
	char **urls;
	size_t nendpoints;
	struct mod_http_endpoint *eps;
	struct mod_http_tls *tls; /* OpenSSL's context, only with an https endpoint */
	uint64_t connect_timeout_ms;
	int keepidle_s, keepintvl_s;
	size_t max_idle;
	bool accept_gzip;
	char stopping[128];
	bool closing;
	struct mod_http_conn *idle; /* keep-alive connections without a request */
	size_t nidle;
	struct mod_http_resolve *resolving; /* name lookups on the worker pool */
	struct mod_http_req *reqs;          /* every request in flight */
};

enum conn_phase { CONN_CONNECTING, CONN_HANDSHAKE, CONN_READY };

struct mod_http_conn {
	struct mod_http_client *c;
	struct mod_http_conn *next; /* in c->idle */
	int fd;
	struct fibril_io *io;
	uint32_t events;
	size_t endpoint;
	enum conn_phase phase;
	bool reused;
	struct mod_http_tls_conn *tls;
	struct mod_http_req *req; /* NULL while idle */
};

/* A host name looked up on the worker pool; orphaned (c NULL) at free. */
struct mod_http_resolve {
	struct mod_http_client *c;
	struct mod_http_resolve *next;
	size_t endpoint;
	char host[256], port[8];
	struct sockaddr_storage addrs[MOD_HTTP_MAX_ADDRS];
	socklen_t addrlens[MOD_HTTP_MAX_ADDRS];
	size_t naddrs;
	int gai_err;
};

/* A gzip body being inflated. */
struct mod_http_inflate {
	z_stream z;
	bool ended;
};

static void on_conn_io(struct fibril_io *io, int fd, uint32_t revents, void *ud);
static void on_req_timer(struct fibril_timer *t, void *ud);
static void resolve_start(struct mod_http_client *c, size_t endpoint);

/* ---- endpoints -------------------------------------------------------------- */

/* "unix:/path" (or "unix:///path") */
static int endpoint_parse_unix(const char *path, struct mod_http_endpoint *ep)
{
	if (strncmp(path, "//", 2) == 0)
		path += 2;
	struct sockaddr_un *sa = (struct sockaddr_un *)&ep->addrs[0];
	if (!*path || strlen(path) >= sizeof(sa->sun_path))
		return -EINVAL;
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, strlen(path) + 1);
	ep->addrlens[0] = sizeof(*sa);
	ep->naddrs = 1;
	ep->numeric = ep->unix_socket = true;
	snprintf(ep->host, sizeof(ep->host), "localhost");
	snprintf(ep->host_header, sizeof(ep->host_header), "localhost");
	return 0;
}

/* "http://host:port" or "https://[v6]:port", no path. */
static int endpoint_parse(const char *url, struct mod_http_endpoint *ep, char *why, size_t len)
{
	memset(ep, 0, sizeof(*ep));
	const char *s;
	if (strncmp(url, "unix:", 5) == 0) {
		if (endpoint_parse_unix(url + 5, ep) == 0)
			return 0;
		snprintf(why, len, "endpoint '%s' is not unix:/PATH", url);
		return -EINVAL;
	}
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

struct mod_http_client *mod_http_client_new(struct fibril_module *m,
					    const struct mod_http_client_config *cfg, char *why,
					    size_t len)
{
	struct mod_http_client *c = calloc(1, sizeof(*c));
	if (!c || !cfg->nendpoints || !(c->eps = calloc(cfg->nendpoints, sizeof(*c->eps))) ||
	    !(c->urls = calloc(cfg->nendpoints, sizeof(*c->urls)))) {
		snprintf(why, len, cfg->nendpoints ? "out of memory" : "no endpoint");
		goto fail;
	}
	c->m = m;
	c->nendpoints = cfg->nendpoints;
	c->connect_timeout_ms = cfg->connect_timeout_ms;
	c->keepidle_s = cfg->keepalive_idle_s;
	c->keepintvl_s = cfg->keepalive_intvl_s;
	c->max_idle = cfg->max_idle;
	c->accept_gzip = cfg->accept_gzip;
	snprintf(c->stopping, sizeof(c->stopping), "%s", cfg->stopping ? cfg->stopping : "the client is stopping");
	bool any_tls = false;
	for (size_t i = 0; i < cfg->nendpoints; i++) {
		if (!(c->urls[i] = strdup(cfg->endpoints[i]))) {
			snprintf(why, len, "out of memory");
			goto fail;
		}
		if (endpoint_parse(cfg->endpoints[i], &c->eps[i], why, len))
			goto fail;
		any_tls |= c->eps[i].tls;
	}
	if (any_tls) {
		char tls_why[MOD_HTTP_ERROR_SIZE];
		if (!(c->tls = mod_http_tls_new(&cfg->tls, tls_why, sizeof(tls_why)))) {
			snprintf(why, len, "TLS: %s", tls_why);
			goto fail;
		}
	}
	return c;
fail:
	mod_http_client_free(c);
	return NULL;
}

const char *mod_http_client_endpoint(const struct mod_http_client *c, size_t i)
{
	return i < c->nendpoints ? c->urls[i] : "";
}

/* ---- connections -------------------------------------------------------------- */

static void conn_close(struct mod_http_conn *cn)
{
	fibril_io_remove(cn->io);
	mod_http_tls_conn_free(cn->tls);
	close(cn->fd);
	free(cn);
}

static void conn_set_events(struct mod_http_conn *cn, uint32_t events)
{
	if (cn->events != events && fibril_io_update(cn->io, events) == 0)
		cn->events = events;
}

static void idle_remove(struct mod_http_conn *cn)
{
	struct mod_http_client *c = cn->c;
	for (struct mod_http_conn **p = &c->idle; *p; p = &(*p)->next) {
		if (*p == cn) {
			*p = cn->next;
			c->nidle--;
			return;
		}
	}
}

static void idle_close_endpoint(struct mod_http_client *c, size_t endpoint)
{
	for (struct mod_http_conn **p = &c->idle; *p;) {
		struct mod_http_conn *cn = *p;
		if (cn->endpoint != endpoint) {
			p = &cn->next;
			continue;
		}
		*p = cn->next;
		c->nidle--;
		conn_close(cn);
	}
}

/* A new connection for r to its endpoint's address. 0 or a negative errno
 * (r->errbuf says why). */
static int conn_open(struct mod_http_req *r)
{
	struct mod_http_client *c = r->c;
	struct mod_http_endpoint *ep = &c->eps[r->endpoint];
	const struct sockaddr_storage *addr = &ep->addrs[ep->addr_cur];
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		snprintf(r->errbuf, sizeof(r->errbuf), "socket: %s", strerror(err));
		return -err;
	}
	if (!ep->unix_socket) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		if (c->keepidle_s > 0)
			setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &c->keepidle_s, sizeof(c->keepidle_s));
		if (c->keepintvl_s > 0)
			setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &c->keepintvl_s, sizeof(c->keepintvl_s));
	}
	if (connect(fd, (const struct sockaddr *)addr, ep->addrlens[ep->addr_cur]) &&
	    errno != EINPROGRESS) {
		int err = errno;
		snprintf(r->errbuf, sizeof(r->errbuf), "connect to %s: %s", c->urls[r->endpoint],
			 strerror(err));
		close(fd);
		return -err;
	}
	struct mod_http_conn *cn = calloc(1, sizeof(*cn));
	if (!cn) {
		close(fd);
		snprintf(r->errbuf, sizeof(r->errbuf), "out of memory");
		return -ENOMEM;
	}
	cn->c = c;
	cn->fd = fd;
	cn->endpoint = r->endpoint;
	cn->phase = CONN_CONNECTING;
	cn->events = FIBRIL_IO_WRITE;
	cn->io = fibril_io_watch(c->m, fd, cn->events, on_conn_io, cn);
	if (!cn->io) {
		free(cn);
		close(fd);
		snprintf(r->errbuf, sizeof(r->errbuf), "cannot watch the socket");
		return -ENOMEM;
	}
	cn->req = r;
	r->conn = cn;
	return 0;
}

/* ---- requests ------------------------------------------------------------------ */

static void inflate_free(struct mod_http_req *r)
{
	if (!r->inflate)
		return;
	inflateEnd(&r->inflate->z);
	free(r->inflate);
	r->inflate = NULL;
}

static void req_free(struct mod_http_req *r)
{
	fibril_timer_cancel(r->timer);
	inflate_free(r);
	free(r->method);
	free(r->path);
	free(r->headers);
	free(r->body_text);
	free(r->out);
	free(r);
}

static void req_unlink(struct mod_http_req *r)
{
	struct mod_http_client *c = r->c;
	if (r->prev)
		r->prev->next = r->next;
	else if (c->reqs == r)
		c->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

size_t mod_http_req_what(const struct mod_http_req *r, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%.*s", (int)strcspn(r->path, "?"), r->path);
	return n < 0 ? 0 : (size_t)n;
}

struct mod_http_req *mod_http_req_new(struct mod_http_client *c, const char *method,
				      const char *path, const char *const *headers,
				      const char *body, size_t body_len)
{
	struct mod_http_req *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->c = c;
	r->method = strdup(method);
	r->path = strdup(path);
	size_t hl = 1;
	for (const char *const *h = headers; h && *h; h++)
		hl += strlen(*h) + 1;
	r->headers = malloc(hl);
	if (r->headers) { /* one line after the other, each with its NUL */
		char *o = r->headers;
		for (const char *const *h = headers; h && *h; h++)
			o = stpcpy(o, *h) + 1;
		*o = '\0';
	}
	if (body) {
		r->body_text = malloc(body_len + 1);
		if (r->body_text) {
			memcpy(r->body_text, body, body_len);
			r->body_text[body_len] = '\0';
		}
		r->body_len = body_len;
	}
	if (!r->method || !r->path || !r->headers || (body && !r->body_text)) {
		req_free(r);
		return NULL;
	}
	/* a line break in a part would be refused at each launch: refuse it now */
	char *probe = NULL;
	size_t probe_len = 0;
	if (mod_http_write_head(&probe, &probe_len, method, path, "localhost", headers, false, 0)) {
		req_free(r);
		return NULL;
	}
	free(probe);
	return r;
}

/* (Re)arm r's one timer; 0 ms still goes through the loop. */
static void req_arm(struct mod_http_req *r, uint64_t ms)
{
	if (r->timer && fibril_timer_rearm(r->timer, ms, 0) == 0)
		return;
	fibril_timer_cancel(r->timer);
	r->timer = fibril_timer_add(r->c->m, ms, 0, on_req_timer, r);
}

static void req_disarm(struct mod_http_req *r)
{
	fibril_timer_cancel(r->timer);
	r->timer = NULL;
}

/* A failure found while launching is reported from the loop. */
static void req_fail_soon(struct mod_http_req *r)
{
	r->fail_pending = true;
	req_arm(r, 0);
}

/* Let go of r's connection: kept for the next request, or closed. */
static void req_drop_conn(struct mod_http_req *r, bool keep)
{
	struct mod_http_conn *cn = r->conn;
	if (!cn)
		return;
	r->conn = NULL;
	cn->req = NULL;
	struct mod_http_client *c = r->c;
	if (keep && !c->closing && c->nidle < c->max_idle) {
		cn->reused = true;
		cn->next = c->idle;
		c->idle = cn;
		c->nidle++;
		conn_set_events(cn, FIBRIL_IO_READ); /* anything now is the server closing it */
		return;
	}
	conn_close(cn);
}

/* The request's bytes for its endpoint: the head, then the body. */
static int req_write_out(struct mod_http_req *r)
{
	struct mod_http_endpoint *ep = &r->c->eps[r->endpoint];
	size_t nh = 0;
	for (const char *h = r->headers; *h; h += strlen(h) + 1)
		nh++;
	const char **lines = calloc(nh + 2, sizeof(*lines));
	if (!lines)
		return -ENOMEM;
	size_t i = 0;
	for (const char *h = r->headers; *h; h += strlen(h) + 1)
		lines[i++] = h;
	if (r->c->accept_gzip)
		lines[i++] = "Accept-Encoding: gzip";
	char *head = NULL;
	size_t head_len = 0;
	int rc = mod_http_write_head(&head, &head_len, r->method, r->path, ep->host_header, lines,
				     r->body_text != NULL, r->body_len);
	free(lines);
	if (rc)
		return rc;
	free(r->out);
	r->out = realloc(head, head_len + r->body_len + 1);
	if (!r->out) {
		free(head);
		return -ENOMEM;
	}
	if (r->body_len)
		memcpy(r->out + head_len, r->body_text, r->body_len);
	r->out_len = head_len + r->body_len;
	r->out_off = 0;
	return 0;
}

/* Start the transfer to r->endpoint: a kept-alive connection, a new one, or
 * a name lookup first. Failures are reported from the loop. */
static void req_launch(struct mod_http_req *r)
{
	struct mod_http_client *c = r->c;
	struct mod_http_endpoint *ep = &c->eps[r->endpoint];
	r->errbuf[0] = '\0';
	r->status = 0;
	r->reached = r->has_data = r->fail_pending = r->waiting_resolve = r->head_told = false;
	r->body_error = NULL;
	inflate_free(r);
	r->started_ms = fibril_now_ms();
	mod_http_parser_init(&r->parser);
	if (req_write_out(r)) {
		snprintf(r->errbuf, sizeof(r->errbuf), "out of memory");
		req_fail_soon(r);
		return;
	}
	for (struct mod_http_conn *cn = c->idle; cn; cn = cn->next) {
		if (cn->endpoint != r->endpoint)
			continue;
		idle_remove(cn);
		cn->req = r;
		r->conn = cn;
		r->reached = true;
		conn_set_events(cn, FIBRIL_IO_WRITE);
		if (r->timeout_ms)
			req_arm(r, r->timeout_ms);
		else
			req_disarm(r);
		return;
	}
	req_arm(r, c->connect_timeout_ms);
	if (!ep->naddrs) {
		r->waiting_resolve = true;
		resolve_start(c, r->endpoint);
		return;
	}
	if (conn_open(r))
		req_fail_soon(r);
}

int mod_http_req_send(struct mod_http_req *r)
{
	struct mod_http_client *c = r->c;
	if (c->closing || r->endpoint >= c->nendpoints || !r->done) {
		req_free(r);
		return c->closing ? -ECANCELED : -EINVAL;
	}
	r->tried = 0;
	r->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = r;
	c->reqs = r;
	req_launch(r);
	return 0;
}

void mod_http_req_abort(struct mod_http_req *r)
{
	if (!r || r->completing)
		return; /* none, or finishing: req_complete frees it */
	req_unlink(r);
	req_drop_conn(r, false);
	req_free(r);
}

/* ---- completion ---------------------------------------------------------------- */

/* Run the callback, then free: the request is off its connection and the
 * list. */
static void req_complete(struct mod_http_req *r, int err)
{
	req_unlink(r);
	req_disarm(r);
	r->completing = true;
	if (r->parser.status)
		r->status = r->parser.status;
	r->done(r, err);
	req_free(r);
}

/* No connection to the endpoint (nothing was sent): the next address or
 * endpoint, or the end. */
static void req_fail_connect(struct mod_http_req *r)
{
	struct mod_http_client *c = r->c;
	struct mod_http_endpoint *ep = &c->eps[r->endpoint];
	req_drop_conn(r, false);
	r->reached = false;
	if (!r->errbuf[0])
		snprintf(r->errbuf, sizeof(r->errbuf), "cannot connect to %s", c->urls[r->endpoint]);
	if (ep->naddrs > 1 && ++r->addr_tries < ep->naddrs && !c->closing) {
		/* a name with several addresses (localhost: ::1, 127.0.0.1): the next */
		fibril_debug(c->m, "%s: %s; trying its next address", c->urls[r->endpoint], r->errbuf);
		ep->addr_cur = (ep->addr_cur + 1) % ep->naddrs;
		req_launch(r);
		return;
	}
	r->addr_tries = 0;
	if (!ep->numeric && !ep->resolving)
		ep->naddrs = 0; /* look the name up again next time */
	if (++r->tried < c->nendpoints && !c->closing) {
		fibril_debug(c->m, "%s: %s; trying the next endpoint", c->urls[r->endpoint], r->errbuf);
		r->endpoint = (r->endpoint + 1) % c->nendpoints;
		req_launch(r);
		return;
	}
	req_complete(r, -ENOTCONN);
}

/* The transfer broke after the connection was made. */
static void req_fail_transfer(struct mod_http_req *r, int err)
{
	req_drop_conn(r, false);
	r->reached = true;
	req_complete(r, err);
}

/* The whole answer is in: keep the connection if it may serve another. */
static void req_succeed(struct mod_http_req *r, bool keep)
{
	if (r->inflate && !r->inflate->ended) {
		char what[256];
		mod_http_req_what(r, what, sizeof(what));
		snprintf(r->errbuf, sizeof(r->errbuf), "bad answer from %s to %s: a truncated gzip body",
			 r->c->urls[r->endpoint], what);
		req_fail_transfer(r, -EIO);
		return;
	}
	req_drop_conn(r, keep);
	req_complete(r, 0);
}

static void on_req_timer(struct fibril_timer *t, void *ud)
{
	struct mod_http_req *r = ud;
	struct mod_http_client *c = r->c;
	(void)t;
	r->timer = NULL; /* a one-shot: the host frees it after this call */
	if (r->fail_pending) {
		req_fail_connect(r);
		return;
	}
	if (!r->conn || r->conn->phase != CONN_READY) {
		r->waiting_resolve = false;
		snprintf(r->errbuf, sizeof(r->errbuf), "connecting to %s timed out after %llu ms",
			 c->urls[r->endpoint], (unsigned long long)c->connect_timeout_ms);
		req_fail_connect(r);
		return;
	}
	char what[256];
	mod_http_req_what(r, what, sizeof(what));
	snprintf(r->errbuf, sizeof(r->errbuf), "%s on %s timed out after %llu ms", what,
		 c->urls[r->endpoint], (unsigned long long)r->timeout_ms);
	req_fail_transfer(r, -ETIMEDOUT);
}

/* ---- the transfer on the loop ----------------------------------------------------- */

/* The final answer's headers are in: tell the owner once. */
static void tell_head(struct mod_http_req *r)
{
	if (r->head_told || !r->parser.head_done)
		return;
	r->head_told = true;
	r->status = r->parser.status;
	if (r->head)
		r->head(r);
}

static int deliver(struct mod_http_req *r, const char *data, size_t n)
{
	if (!n)
		return 0;
	if (r->body && r->body(r, data, n))
		return -1;
	if (r->data)
		r->has_data = true;
	return 0;
}

/* gzip bytes in, their inflated text to the owner. */
static int inflate_body(struct mod_http_req *r, const char *data, size_t n)
{
	if (!r->inflate) {
		r->inflate = calloc(1, sizeof(*r->inflate));
		if (!r->inflate || inflateInit2(&r->inflate->z, 16 + MAX_WBITS) != Z_OK) {
			free(r->inflate);
			r->inflate = NULL;
			r->body_error = "cannot inflate the gzip body";
			return -1;
		}
	}
	z_stream *z = &r->inflate->z;
	z->next_in = (Bytef *)(uintptr_t)data;
	z->avail_in = (uInt)n;
	char out[16384];
	while (z->avail_in && !r->inflate->ended) {
		z->next_out = (Bytef *)out;
		z->avail_out = sizeof(out);
		int zrc = inflate(z, Z_NO_FLUSH);
		if (zrc != Z_OK && zrc != Z_STREAM_END && zrc != Z_BUF_ERROR) {
			r->body_error = "a malformed gzip body";
			return -1;
		}
		if (deliver(r, out, sizeof(out) - z->avail_out))
			return -1;
		if (zrc == Z_STREAM_END)
			r->inflate->ended = true;
		else if (zrc == Z_BUF_ERROR && z->avail_out)
			break; /* no progress: needs more input */
	}
	return 0;
}

static int on_body(void *ud, const char *data, size_t n)
{
	struct mod_http_req *r = ud;
	tell_head(r);
	if (r->parser.gzip && r->c->accept_gzip)
		return inflate_body(r, data, n);
	return deliver(r, data, n);
}

static long conn_write(struct mod_http_conn *cn, const void *buf, size_t n, char *why, size_t len)
{
	if (cn->tls)
		return mod_http_tls_write(cn->tls, buf, n, why, len);
	ssize_t w = send(cn->fd, buf, n, MSG_NOSIGNAL);
	if (w >= 0)
		return (long)w;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return MOD_HTTP_TLS_WANT_WRITE;
	snprintf(why, len, "send: %s", strerror(errno));
	return MOD_HTTP_TLS_ERROR;
}

static long conn_read(struct mod_http_conn *cn, void *buf, size_t n, char *why, size_t len)
{
	if (cn->tls)
		return mod_http_tls_read(cn->tls, buf, n, why, len);
	ssize_t got = recv(cn->fd, buf, n, 0);
	if (got >= 0)
		return (long)got;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return MOD_HTTP_TLS_WANT_READ;
	snprintf(why, len, "recv: %s", strerror(errno));
	return MOD_HTTP_TLS_ERROR;
}

static uint32_t want_events(long rc)
{
	return rc == MOD_HTTP_TLS_WANT_WRITE ? FIBRIL_IO_WRITE : FIBRIL_IO_READ;
}

/* TCP (and TLS) are up: the dial timer becomes the request's. */
static void req_connected(struct mod_http_req *r)
{
	r->reached = true;
	if (!r->timeout_ms) {
		req_disarm(r);
		return;
	}
	uint64_t spent = fibril_now_ms() - r->started_ms;
	req_arm(r, spent < r->timeout_ms ? r->timeout_ms - spent : 1);
}

/* The connection closed or broke before an answer: was it a kept-alive one
 * the server had already closed? Then once more on a new one. */
static bool retry_stale(struct mod_http_req *r)
{
	struct mod_http_conn *cn = r->conn;
	if (!cn->reused || r->retried_stale || r->parser.status || r->parser.line_len ||
	    r->c->closing)
		return false;
	r->retried_stale = true;
	req_drop_conn(r, false);
	idle_close_endpoint(r->c, r->endpoint);
	req_launch(r);
	return true;
}

/* Connect, handshake, send, receive: as far as the socket lets us. */
static void conn_step(struct mod_http_conn *cn)
{
	struct mod_http_req *r = cn->req;
	struct mod_http_client *c = cn->c;
	long rc;
	if (cn->phase == CONN_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(cn->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == EINPROGRESS)
			return;
		if (err) {
			snprintf(r->errbuf, sizeof(r->errbuf), "connect to %s: %s", c->urls[r->endpoint],
				 strerror(err));
			req_fail_connect(r);
			return;
		}
		cn->phase = c->eps[cn->endpoint].tls ? CONN_HANDSHAKE : CONN_READY;
		if (cn->phase == CONN_HANDSHAKE &&
		    !(cn->tls = mod_http_tls_conn_new(c->tls, cn->fd, c->eps[cn->endpoint].host))) {
			snprintf(r->errbuf, sizeof(r->errbuf), "cannot create a TLS session");
			req_fail_connect(r);
			return;
		}
		if (cn->phase == CONN_READY)
			req_connected(r);
	}
	if (cn->phase == CONN_HANDSHAKE) {
		rc = mod_http_tls_handshake(cn->tls, r->errbuf, sizeof(r->errbuf));
		if (rc == MOD_HTTP_TLS_ERROR) {
			req_fail_connect(r);
			return;
		}
		if (rc) {
			conn_set_events(cn, want_events(rc));
			return;
		}
		cn->phase = CONN_READY;
		req_connected(r);
	}
	while (r->out_off < r->out_len) {
		rc = conn_write(cn, r->out + r->out_off, r->out_len - r->out_off, r->errbuf,
				sizeof(r->errbuf));
		if (rc == MOD_HTTP_TLS_ERROR) {
			if (!retry_stale(r))
				req_fail_transfer(r, -ENOTCONN);
			return;
		}
		if (rc < 0) {
			conn_set_events(cn, want_events(rc));
			return;
		}
		r->out_off += (size_t)rc;
	}
	conn_set_events(cn, FIBRIL_IO_READ);
	char buf[16384];
	/* a few reads per wakeup, so that a watch burst is parsed as it comes
	 * rather than buffered whole (the watch is level-triggered; TLS bytes
	 * already decrypted are read on, the socket would not wake us for them) */
	for (int reads = 0; reads < 4 || (cn->tls && mod_http_tls_pending(cn->tls)); reads++) {
		rc = conn_read(cn, buf, sizeof(buf), r->errbuf, sizeof(r->errbuf));
		if (rc == MOD_HTTP_TLS_WANT_READ || rc == MOD_HTTP_TLS_WANT_WRITE) {
			conn_set_events(cn, want_events(rc));
			break;
		}
		if (rc == MOD_HTTP_TLS_ERROR) {
			if (!retry_stale(r))
				req_fail_transfer(r, -ENOTCONN);
			return;
		}
		if (rc == 0) {
			if (mod_http_parser_eof(&r->parser) == 1) {
				req_succeed(r, false);
			} else if (!retry_stale(r)) {
				snprintf(r->errbuf, sizeof(r->errbuf), "%s: %s", c->urls[r->endpoint],
					 r->parser.error);
				req_fail_transfer(r, -ENOTCONN);
			}
			return;
		}
		size_t used = 0;
		int prc = mod_http_parser_feed(&r->parser, buf, (size_t)rc, &used, on_body, r);
		if (prc < 0) {
			char what[256];
			mod_http_req_what(r, what, sizeof(what));
			snprintf(r->errbuf, sizeof(r->errbuf), "bad answer from %s to %s: %s",
				 c->urls[r->endpoint], what,
				 r->body_error ? r->body_error : r->parser.error);
			req_fail_transfer(r, -EIO);
			return;
		}
		tell_head(r);
		if (prc == 1) {
			req_succeed(r, !r->parser.close && used == (size_t)rc);
			return;
		}
	}
	if (r->has_data) {
		r->has_data = false;
		r->data(r); /* last: it may end the request */
	}
}

static void on_conn_io(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct mod_http_conn *cn = ud;
	(void)io;
	(void)fd;
	(void)revents;
	if (!cn->req) { /* idle: the server closed it (or sent what nobody asked) */
		idle_remove(cn);
		conn_close(cn);
		return;
	}
	conn_step(cn);
}

/* ---- host names on the worker pool ----------------------------------------------- */

static void resolve_work(void *ud)
{
	struct mod_http_resolve *j = ud;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	j->gai_err = getaddrinfo(j->host, j->port, &hints, &res);
	for (struct addrinfo *a = j->gai_err ? NULL : res; a && j->naddrs < MOD_HTTP_MAX_ADDRS;
	     a = a->ai_next) {
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
	struct mod_http_resolve *j = ud;
	struct mod_http_client *c = j->c;
	if (!c) { /* the client was freed meanwhile */
		free(j);
		return;
	}
	for (struct mod_http_resolve **p = &c->resolving; *p; p = &(*p)->next) {
		if (*p == j) {
			*p = j->next;
			break;
		}
	}
	struct mod_http_endpoint *ep = &c->eps[j->endpoint];
	ep->resolving = false;
	if (status == 0 && j->gai_err == 0) {
		memcpy(ep->addrs, j->addrs, sizeof(ep->addrs));
		memcpy(ep->addrlens, j->addrlens, sizeof(ep->addrlens));
		ep->naddrs = j->naddrs;
		ep->addr_cur = 0;
	}
	/* every request waiting for this name: connect, or fail over */
	for (;;) {
		struct mod_http_req *r = c->reqs;
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

static void resolve_start(struct mod_http_client *c, size_t endpoint)
{
	struct mod_http_endpoint *ep = &c->eps[endpoint];
	if (ep->resolving)
		return;
	struct mod_http_resolve *j = calloc(1, sizeof(*j));
	if (j) {
		j->c = c;
		j->endpoint = endpoint;
		snprintf(j->host, sizeof(j->host), "%s", ep->host);
		snprintf(j->port, sizeof(j->port), "%s", ep->port);
	}
	if (!j || fibril_work_submit(c->m, resolve_work, resolve_done, j)) {
		free(j);
		/* fail the waiting requests from the loop */
		for (struct mod_http_req *r = c->reqs; r; r = r->next) {
			if (r->waiting_resolve && r->endpoint == endpoint) {
				r->waiting_resolve = false;
				snprintf(r->errbuf, sizeof(r->errbuf), "cannot look up %.200s", ep->host);
				req_fail_soon(r);
			}
		}
		return;
	}
	ep->resolving = true;
	j->next = c->resolving;
	c->resolving = j;
}

/* ---- shutdown ------------------------------------------------------------------- */

void mod_http_client_free(struct mod_http_client *c)
{
	if (!c)
		return;
	c->closing = true;
	while (c->reqs) {
		struct mod_http_req *r = c->reqs;
		req_drop_conn(r, false);
		snprintf(r->errbuf, sizeof(r->errbuf), "%s", c->stopping);
		req_complete(r, -ECANCELED);
	}
	while (c->idle) {
		struct mod_http_conn *cn = c->idle;
		c->idle = cn->next;
		conn_close(cn);
	}
	c->nidle = 0;
	while (c->resolving) { /* their completions free them */
		struct mod_http_resolve *j = c->resolving;
		c->resolving = j->next;
		j->c = NULL;
	}
	mod_http_tls_free(c->tls);
	for (size_t i = 0; c->urls && i < c->nendpoints; i++)
		free(c->urls[i]);
	free(c->urls);
	free(c->eps);
	free(c);
}

/* ---- the owners' body buffers ------------------------------------------------------ */

int mod_http_buf_append(char **buf, size_t *len, size_t *cap, size_t first_cap, size_t max,
			const char *data, size_t n)
{
	if (*len + n > max)
		return -1;
	if (*len + n + 1 > *cap) {
		size_t ncap = *cap ? *cap : first_cap;
		while (ncap < *len + n + 1)
			ncap *= 2;
		char *grown = realloc(*buf, ncap);
		if (!grown)
			return -1;
		*buf = grown;
		*cap = ncap;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}
