/* modules/hubble-lite/grpc_server.c - the transport of hubble-lite's gRPC
 * server: a unix socket ([hubble-lite] grpc-socket, mode 0660) and, for
 * remote readers, a TCP listener (grpc-listen) that speaks only TLS with a
 * client certificate signed by grpc-tls-client-ca. Each connection is an
 * HTTP/2 server session (nghttp2) driven from the agent's loop (fd
 * watches, no threads); each stream one gRPC call whose request message
 * is collected and handed to the observer (grpc_observer.c), whose
 * answers are queued per stream and pulled by nghttp2 as the peer's flow
 * control allows. Limits: connections per listener, concurrent streams per
 * connection, request message size, queued answer bytes per stream and in
 * all (a slow follower loses flows, told in a LostEvent), idle and
 * handshake time. */
#include "grpc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fibril/fibril.h>

#define READ_CHUNK 16384
#define READS_PER_WAKE 8      /* then back to the loop: fairness */
#define HANDSHAKE_MS 10000

struct hl_grpc_stream {
	struct gconn *c;
	int32_t id;
	char path[96];
	bool bad_method, bad_type, path_too_long;
	uint8_t *in;
	size_t in_len;
	bool answered;              /* the request was handed over / refused */
	uint8_t *out;               /* framed messages not yet taken by nghttp2 */
	size_t out_len, out_off;
	bool headers_sent, deferred, done;
	int status;
	char message[256];
	struct hl_obs_call *call;
	struct hl_grpc_stream *next; /* on its connection */
};

struct gconn {
	struct hl_grpc *g;
	int fd;
	bool tcp;
	struct fibril_io *io;
	uint32_t events;
	SSL *ssl;
	bool handshaken;
	nghttp2_session *sess;
	uint8_t *wbuf; /* bytes from nghttp2 not yet written */
	size_t wlen, woff;
	uint64_t born_ms, active_ms;
	struct hl_grpc_stream *streams;
	unsigned nstreams;
	bool dead;
	struct gconn *next;
};

struct listener {
	int fd;
	bool tcp;
	struct fibril_io *io;
};

struct hl_grpc {
	struct fibril_module *m;
	struct hl_grpc_source src;
	struct listener unix_l, tcp_l;
	char sock_path[256];
	SSL_CTX *tls;
	struct gconn *conns;
	unsigned nconns, nconns_tcp; /* all, and those of the TCP listener */
	size_t queued;               /* answer bytes queued on all calls */
	struct fibril_timer *timer;
	struct hl_obs_list obs;
	char address[320];
	/* limits */
	unsigned max_conns, max_streams;
	size_t max_msg, stream_queue, queue_total;
	uint64_t idle_ms;
};

static void conn_close(struct gconn *c);
static void conn_want(struct gconn *c, uint32_t events);

const struct hl_grpc_source *hl_grpc_src(const struct hl_grpc *g) { return &g->src; }
struct fibril_module *hl_grpc_module(const struct hl_grpc *g) { return g->m; }
bool hl_grpc_tls(const struct hl_grpc *g) { return g->tls != NULL; }

/* ---- answers ------------------------------------------------------------- */

static ssize_t on_data_read(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
			    uint32_t *flags, nghttp2_data_source *source, void *ud);

static int send_trailers(struct hl_grpc_stream *s)
{
	char code[12];
	snprintf(code, sizeof(code), "%d", s->status);
	nghttp2_nv nv[2] = {
		{(uint8_t *)"grpc-status", (uint8_t *)code, 11, strlen(code), NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)"grpc-message", (uint8_t *)s->message, 12, strlen(s->message), NGHTTP2_NV_FLAG_NONE},
	};
	return nghttp2_submit_trailer(s->c->sess, s->id, nv, s->message[0] ? 2 : 1);
}

/* The response headers with a body to come (pulled by on_data_read). */
static int start_response(struct hl_grpc_stream *s)
{
	if (s->headers_sent)
		return 0;
	s->headers_sent = true;
	nghttp2_nv nv[] = {
		{(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
	};
	nghttp2_data_provider dp = {.source.ptr = s, .read_callback = on_data_read};
	return nghttp2_submit_response(s->c->sess, s->id, nv, 2, &dp);
}

static ssize_t on_data_read(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
			    uint32_t *flags, nghttp2_data_source *source, void *ud)
{
	(void)sess, (void)id, (void)ud;
	struct hl_grpc_stream *s = source->ptr;
	size_t avail = s->out_len - s->out_off;
	size_t n = avail < length ? avail : length;
	if (n) {
		memcpy(buf, s->out + s->out_off, n);
		s->out_off += n;
		s->c->g->queued -= n;
		if (s->out_off == s->out_len)
			s->out_off = s->out_len = 0;
	}
	if (s->out_len == s->out_off && s->done) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (send_trailers(s))
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		return (ssize_t)n;
	}
	if (!n) {
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

static void stream_kick(struct hl_grpc_stream *s)
{
	if (s->deferred) {
		s->deferred = false;
		nghttp2_session_resume_data(s->c->sess, s->id);
	}
	/* written from the loop (never from inside a caller's iteration) */
	conn_want(s->c, FIBRIL_IO_READ | FIBRIL_IO_WRITE);
}

int hl_grpc_send(struct hl_grpc_stream *s, const uint8_t *msg, size_t len)
{
	if (s->done || s->c->dead)
		return -EPIPE;
	size_t queued = s->out_len - s->out_off;
	struct hl_grpc *g = s->c->g;
	if ((queued && queued + len + 5 > g->stream_queue) || g->queued + len + 5 > g->queue_total)
		return -ENOBUFS;
	if (s->out_off && s->out_off == s->out_len)
		s->out_off = s->out_len = 0;
	size_t need = s->out_len + 5 + len;
	if (s->out_off > need / 2) { /* compact before growing */
		memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
		s->out_len -= s->out_off;
		s->out_off = 0;
		need = s->out_len + 5 + len;
	}
	uint8_t *p = realloc(s->out, need);
	if (!p)
		return -ENOMEM;
	s->out = p;
	p += s->out_len;
	p[0] = 0; /* not compressed */
	p[1] = (uint8_t)(len >> 24), p[2] = (uint8_t)(len >> 16), p[3] = (uint8_t)(len >> 8);
	p[4] = (uint8_t)len;
	if (len)
		memcpy(p + 5, msg, len);
	s->out_len = need;
	g->queued += len + 5;
	if (start_response(s))
		return -ENOMEM;
	stream_kick(s);
	return 0;
}

/* grpc-message is percent-encoded (the gRPC HTTP/2 spec). */
static void percent_encode(char *dst, size_t len, const char *src)
{
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)src; *p && o + 4 < len; p++) {
		if (*p >= 0x20 && *p < 0x7f && *p != '%')
			dst[o++] = (char)*p;
		else
			o += (size_t)snprintf(dst + o, len - o, "%%%02X", *p);
	}
	dst[o] = '\0';
}

void hl_grpc_finish(struct hl_grpc_stream *s, int status, const char *fmt, ...)
{
	if (s->done)
		return;
	s->done = true;
	s->status = status;
	s->message[0] = '\0';
	if (status != HL_GRPC_OK && fmt) {
		char text[200];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(text, sizeof(text), fmt, ap);
		va_end(ap);
		percent_encode(s->message, sizeof(s->message), text);
	}
	if (s->c->dead)
		return;
	if (!s->headers_sent && status != HL_GRPC_OK) {
		/* trailers-only: one HEADERS frame that ends the stream */
		s->headers_sent = true;
		char code[12];
		snprintf(code, sizeof(code), "%d", status);
		nghttp2_nv nv[] = {
			{(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
			{(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
			{(uint8_t *)"grpc-status", (uint8_t *)code, 11, strlen(code), NGHTTP2_NV_FLAG_NONE},
			{(uint8_t *)"grpc-message", (uint8_t *)s->message, 12, strlen(s->message),
			 NGHTTP2_NV_FLAG_NONE},
		};
		nghttp2_submit_response(s->c->sess, s->id, nv, s->message[0] ? 4 : 3, NULL);
		conn_want(s->c, FIBRIL_IO_READ | FIBRIL_IO_WRITE);
		return;
	}
	start_response(s);
	stream_kick(s);
}

void hl_grpc_set_call(struct hl_grpc_stream *s, struct hl_obs_call *call) { s->call = call; }
struct hl_obs_list *hl_grpc_obs(struct hl_grpc *g) { return &g->obs; }
const char *hl_grpc_address(const struct hl_grpc *g) { return g->address; }

void hl_grpc_send_headers(struct hl_grpc_stream *s)
{
	if (!s->done && !s->c->dead && !start_response(s))
		stream_kick(s);
}

/* ---- requests ------------------------------------------------------------ */

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *ud)
{
	struct gconn *c = ud;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct hl_grpc_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
	s->c = c;
	s->id = frame->hd.stream_id;
	s->next = c->streams;
	c->streams = s;
	c->nstreams++;
	nghttp2_session_set_stream_user_data(sess, s->id, s);
	return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	(void)flags, (void)ud;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct hl_grpc_stream *s = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
	if (!s)
		return 0;
	if (namelen == 5 && !memcmp(name, ":path", 5)) {
		if (valuelen >= sizeof(s->path))
			s->path_too_long = true;
		else {
			memcpy(s->path, value, valuelen);
			s->path[valuelen] = '\0';
		}
	} else if (namelen == 7 && !memcmp(name, ":method", 7)) {
		s->bad_method = !(valuelen == 4 && !memcmp(value, "POST", 4));
	} else if (namelen == 12 && !memcmp(name, "content-type", 12)) {
		/* application/grpc, application/grpc+proto, application/grpc;... */
		s->bad_type = !(valuelen >= 16 && !memcmp(value, "application/grpc", 16) &&
				(valuelen == 16 || value[16] == '+' || value[16] == ';'));
	}
	return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
			 size_t len, void *ud)
{
	(void)flags, (void)ud;
	struct hl_grpc_stream *s = nghttp2_session_get_stream_user_data(sess, id);
	if (!s || s->answered)
		return 0;
	size_t limit = s->c->g->max_msg + 5;
	if (s->in_len + len > limit) {
		s->answered = true;
		free(s->in);
		s->in = NULL;
		hl_grpc_finish(s, HL_GRPC_RESOURCE_EXHAUSTED,
			       "request message larger than %zu bytes ([hubble-lite] grpc-max-message)",
			       s->c->g->max_msg);
		return 0;
	}
	uint8_t *p = realloc(s->in, s->in_len + len);
	if (!p)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	s->in = p;
	memcpy(s->in + s->in_len, data, len);
	s->in_len += len;
	return 0;
}

/* The whole request is in: check it, hand its one message over. */
static void request_done(struct hl_grpc_stream *s)
{
	if (s->answered)
		return;
	s->answered = true;
	if (s->bad_method || s->bad_type || s->path_too_long || !s->path[0]) {
		hl_grpc_finish(s, HL_GRPC_INVALID_ARGUMENT, "%s",
			       s->bad_method ? "gRPC calls are POST" :
			       s->bad_type ? "content-type is not application/grpc" :
					     "missing or too long :path");
		return;
	}
	if (s->in_len < 5) {
		hl_grpc_finish(s, HL_GRPC_INVALID_ARGUMENT, "request has no gRPC message (%zu bytes)",
			       s->in_len);
		return;
	}
	uint32_t mlen = (uint32_t)s->in[1] << 24 | (uint32_t)s->in[2] << 16 | (uint32_t)s->in[3] << 8 |
			s->in[4];
	if (s->in[0] != 0) {
		hl_grpc_finish(s, HL_GRPC_UNIMPLEMENTED, "compressed messages are not accepted (flag %u)",
			       s->in[0]);
		return;
	}
	if ((size_t)mlen + 5 != s->in_len) {
		hl_grpc_finish(s, HL_GRPC_INVALID_ARGUMENT,
			       "gRPC frame says %u bytes, the request holds %zu (one message per call)",
			       mlen, s->in_len - 5);
		return;
	}
	hl_obs_request(s->c->g, s, s->path, s->in + 5, mlen);
	free(s->in);
	s->in = NULL;
	s->in_len = 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *ud)
{
	(void)ud;
	if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		struct hl_grpc_stream *s = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
		if (s)
			request_done(s);
	}
	return 0;
}

static void stream_free(struct hl_grpc *g, struct hl_grpc_stream *s)
{
	if (s->call)
		hl_obs_stream_gone(g, s->call);
	g->queued -= s->out_len - s->out_off;
	free(s->in);
	free(s->out);
	free(s);
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *ud)
{
	(void)error_code;
	struct gconn *c = ud;
	struct hl_grpc_stream *s = nghttp2_session_get_stream_user_data(sess, id);
	if (!s)
		return 0;
	for (struct hl_grpc_stream **pp = &c->streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			c->nstreams--;
			break;
		}
	}
	nghttp2_session_set_stream_user_data(sess, id, NULL);
	stream_free(c->g, s);
	return 0;
}

/* ---- connections --------------------------------------------------------- */

static void conn_want(struct gconn *c, uint32_t events)
{
	if (c->dead || c->events == events)
		return;
	c->events = events;
	fibril_io_update(c->io, events);
}

static void conn_close(struct gconn *c)
{
	struct hl_grpc *g = c->g;
	c->dead = true;
	for (struct hl_grpc_stream *s = c->streams, *next; s; s = next) {
		next = s->next;
		stream_free(g, s);
	}
	c->streams = NULL;
	if (c->sess)
		nghttp2_session_del(c->sess);
	if (c->ssl)
		SSL_free(c->ssl);
	fibril_io_remove(c->io);
	close(c->fd);
	for (struct gconn **pp = &g->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			g->nconns--;
			g->nconns_tcp -= c->tcp;
			break;
		}
	}
	free(c->wbuf);
	free(c);
}

/* Bytes in or out through TLS or the plain socket: >0, 0 at EOF, -EAGAIN
 * (watch again), -EIO. */
static ssize_t conn_read(struct gconn *c, uint8_t *buf, size_t len)
{
	if (!c->ssl) {
		ssize_t n = read(c->fd, buf, len);
		return n >= 0 ? n : (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -EIO;
	}
	int n = SSL_read(c->ssl, buf, (int)len);
	if (n > 0)
		return n;
	int e = SSL_get_error(c->ssl, n);
	if (e == SSL_ERROR_WANT_READ)
		return -EAGAIN;
	if (e == SSL_ERROR_WANT_WRITE) {
		conn_want(c, FIBRIL_IO_READ | FIBRIL_IO_WRITE);
		return -EAGAIN;
	}
	return e == SSL_ERROR_ZERO_RETURN ? 0 : -EIO;
}

static ssize_t conn_write(struct gconn *c, const uint8_t *buf, size_t len)
{
	if (!c->ssl) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
		return n >= 0 ? n : (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -EIO;
	}
	int n = SSL_write(c->ssl, buf, (int)len);
	if (n > 0)
		return n;
	int e = SSL_get_error(c->ssl, n);
	return e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? -EAGAIN : -EIO;
}

/* Write what nghttp2 has for the peer; -1 when the connection is to go. */
static int conn_flush(struct gconn *c)
{
	for (;;) {
		if (c->woff == c->wlen) {
			c->woff = c->wlen = 0;
			const uint8_t *data;
			ssize_t n = nghttp2_session_mem_send(c->sess, &data);
			if (n < 0)
				return -1;
			if (n == 0)
				break;
			uint8_t *p = realloc(c->wbuf, (size_t)n);
			if (!p)
				return -1;
			c->wbuf = p;
			memcpy(c->wbuf, data, (size_t)n);
			c->wlen = (size_t)n;
		}
		ssize_t w = conn_write(c, c->wbuf + c->woff, c->wlen - c->woff);
		if (w == -EAGAIN) {
			conn_want(c, FIBRIL_IO_READ | FIBRIL_IO_WRITE);
			return 0;
		}
		if (w < 0)
			return -1;
		c->woff += (size_t)w;
	}
	if (!nghttp2_session_want_read(c->sess) && !nghttp2_session_want_write(c->sess))
		return -1;
	conn_want(c, FIBRIL_IO_READ);
	return 0;
}

static void on_conn_io(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	(void)io, (void)fd;
	struct gconn *c = ud;
	if (revents & FIBRIL_IO_ERROR) {
		conn_close(c);
		return;
	}
	c->active_ms = fibril_now_ms();
	if (c->ssl && !c->handshaken) {
		int r = SSL_accept(c->ssl);
		if (r != 1) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ)
				conn_want(c, FIBRIL_IO_READ);
			else if (e == SSL_ERROR_WANT_WRITE)
				conn_want(c, FIBRIL_IO_READ | FIBRIL_IO_WRITE);
			else /* no or a bad client certificate, not TLS, ... */
				conn_close(c);
			return;
		}
		c->handshaken = true;
	}
	uint8_t buf[READ_CHUNK];
	/* TLS may hold decrypted bytes the fd's poll cannot show: read them too */
	for (int i = 0; i < READS_PER_WAKE || (c->ssl && SSL_pending(c->ssl) > 0); i++) {
		ssize_t n = conn_read(c, buf, sizeof(buf));
		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		/* garbage, a bad preface, a flood: nghttp2 answers GOAWAY */
		if (nghttp2_session_mem_recv(c->sess, buf, (size_t)n) < 0) {
			nghttp2_session_terminate_session(c->sess, NGHTTP2_PROTOCOL_ERROR);
			break;
		}
		if ((size_t)n < sizeof(buf) && !c->ssl)
			break;
	}
	if (conn_flush(c))
		conn_close(c);
}

static int session_new(struct gconn *c)
{
	struct hl_grpc *g = c->g;
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	if (nghttp2_session_callbacks_new(&cb))
		return -1;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	if (nghttp2_option_new(&opt)) {
		nghttp2_session_callbacks_del(cb);
		return -1;
	}
	/* streams past the limit the peer was told are refused by nghttp2 */
	nghttp2_option_set_max_settings(opt, 32);
	int rc = nghttp2_session_server_new2(&c->sess, cb, c, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	if (rc)
		return -1;
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, g->max_streams},
		{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
	};
	return nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 2) ? -1 : 0;
}

static void on_accept(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	(void)io, (void)revents;
	struct hl_grpc *g = ud;
	bool tcp = fd == g->tcp_l.fd;
	for (int i = 0; i < 16; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0)
			return;
		/* over [hubble-lite] grpc-max-connections: each listener counts
		 * its own, so remote handshakes never crowd out the unix socket */
		if ((tcp ? g->nconns_tcp : g->nconns - g->nconns_tcp) >= g->max_conns) {
			close(cfd);
			continue;
		}
		struct gconn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(cfd);
			continue;
		}
		c->g = g;
		c->fd = cfd;
		c->tcp = tcp;
		c->born_ms = c->active_ms = fibril_now_ms();
		if (tcp && (!(c->ssl = SSL_new(g->tls)) || SSL_set_fd(c->ssl, cfd) != 1)) {
			if (c->ssl)
				SSL_free(c->ssl);
			close(cfd);
			free(c);
			continue;
		}
		c->handshaken = !tcp;
		c->events = FIBRIL_IO_READ;
		if (session_new(c) || !(c->io = fibril_io_watch(g->m, cfd, c->events, on_conn_io, c))) {
			if (c->sess)
				nghttp2_session_del(c->sess);
			if (c->ssl)
				SSL_free(c->ssl);
			close(cfd);
			free(c);
			continue;
		}
		c->next = g->conns;
		g->conns = c;
		g->nconns++;
		g->nconns_tcp += tcp;
		if (!tcp && conn_flush(c)) /* our SETTINGS first */
			conn_close(c);
	}
}

/* Idle connections (no call, nothing heard for grpc-idle-timeout) and
 * TLS handshakes that take too long are closed. */
static void on_tick(struct fibril_timer *t, void *ud)
{
	(void)t;
	struct hl_grpc *g = ud;
	uint64_t now = fibril_now_ms();
	for (struct gconn *c = g->conns, *next; c; c = next) {
		next = c->next;
		if ((c->ssl && !c->handshaken && now - c->born_ms > HANDSHAKE_MS) ||
		    (!c->nstreams && now - c->active_ms > g->idle_ms))
			conn_close(c);
	}
}

/* ---- listeners ----------------------------------------------------------- */

struct hl_grpc *hl_grpc_new(struct fibril_module *m, const struct hl_grpc_source *src, char *err,
			    size_t errlen)
{
	err[0] = '\0';
	const char *sock = fibril_config_string(m, "grpc-socket");
	const char *listen_spec = fibril_config_string(m, "grpc-listen");
	char path[256];
	if (sock && !strcmp(sock, "off"))
		sock = "";
	else if (!sock || !*sock) {
		snprintf(path, sizeof(path), "%s/hubble.sock", fibril_run_dir());
		sock = path;
	}
	if (!*sock && (!listen_spec || !*listen_spec))
		return NULL;
	struct hl_grpc *g = calloc(1, sizeof(*g));
	if (!g) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	g->m = m;
	g->src = *src;
	g->unix_l.fd = g->tcp_l.fd = -1;
	g->max_conns = (unsigned)fibril_config_int(m, "grpc-max-connections");
	g->max_streams = (unsigned)fibril_config_int(m, "grpc-max-streams");
	g->max_msg = (size_t)fibril_config_int(m, "grpc-max-message");
	g->stream_queue = (size_t)fibril_config_int(m, "grpc-stream-queue");
	g->queue_total = (size_t)fibril_config_int(m, "grpc-queue-total");
	g->idle_ms = fibril_config_duration_ms(m, "grpc-idle-timeout");
	if (*sock) {
		if (hl_listen_unix(sock, &g->unix_l.fd, err, errlen))
			goto fail;
		snprintf(g->sock_path, sizeof(g->sock_path), "%s", sock);
		snprintf(g->address, sizeof(g->address), "unix://%s", sock);
	}
	if (listen_spec && *listen_spec) {
		if (!(g->tls = hl_tls_server_ctx(fibril_config_string(m, "grpc-tls-cert"),
						 fibril_config_string(m, "grpc-tls-key"),
						 fibril_config_string(m, "grpc-tls-client-ca"), err, errlen)) ||
		    hl_listen_tcp(listen_spec, &g->tcp_l.fd, err, errlen))
			goto fail;
		g->tcp_l.tcp = true;
		snprintf(g->address, sizeof(g->address), "%s", listen_spec);
	}
	if ((g->unix_l.fd >= 0 && !(g->unix_l.io = fibril_io_watch(m, g->unix_l.fd, FIBRIL_IO_READ,
								   on_accept, g))) ||
	    (g->tcp_l.fd >= 0 && !(g->tcp_l.io = fibril_io_watch(m, g->tcp_l.fd, FIBRIL_IO_READ,
								 on_accept, g))) ||
	    !(g->timer = fibril_timer_add(m, 1000, 1000, on_tick, g))) {
		snprintf(err, errlen, "cannot watch the gRPC listeners");
		goto fail;
	}
	return g;
fail:
	hl_grpc_free(g);
	return NULL;
}

void hl_grpc_free(struct hl_grpc *g)
{
	if (!g)
		return;
	while (g->conns)
		conn_close(g->conns);
	if (g->timer)
		fibril_timer_cancel(g->timer);
	struct listener *ls[] = {&g->unix_l, &g->tcp_l};
	for (int i = 0; i < 2; i++) {
		if (ls[i]->io)
			fibril_io_remove(ls[i]->io);
		if (ls[i]->fd >= 0)
			close(ls[i]->fd);
	}
	if (g->sock_path[0])
		unlink(g->sock_path);
	if (g->tls)
		SSL_CTX_free(g->tls);
	free(g);
}
