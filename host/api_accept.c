/* host/api_accept.c - the first look at a new API connection (the unix
 * socket, the TCP listener), before libwebsockets parses anything.
 * libwebsockets 4.1 drops a connection without an answer when the request
 * path holds a percent-encoded NUL or the header block outgrows its buffer
 * (nothing of ours runs first). So at accept (its
 * LWS_CALLBACK_FILTER_NETWORK_CONNECTION) the connection is taken from lws
 * (a dup of the descriptor; lws closes its own), its head looked at with
 * MSG_PEEK (nothing is consumed) and checked (api_head.c): a refused head
 * is answered with a JSON error and the connection closed after the
 * client's bytes are drained (so the answer is not lost to a reset); a good
 * one is handed back to lws (lws_adopt_socket_vhost), which reads the same
 * bytes from the socket as if it had accepted the connection itself. A head
 * not complete yet is looked at again after a growing pause (2 ms doubling
 * to 256 ms: peeked bytes stay readable, so the poll would fire at once);
 * one that does not come within the idle timeout closes the connection, as
 * lws's own header timeout did.
 *
 * Every later request of a kept-alive connection is looked at the same
 * way: once an answer is written and lws waits for the next request, its
 * reading is paused (lws_rx_flow_control) and a reader watches a dup of
 * the descriptor; a good head resumes lws, which reads it from the socket,
 * a refused one is answered and the connection closed (lws's side killed,
 * ours drained). What lws may already hold of a next request (the client
 * sent it before the answer: pipelining) is not ours to look at, so a
 * connection whose head came with more than its request is answered with
 * `connection: close` instead (api_keepalive_pipelined). */
#include "api_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

/* What is looked at before the head must be complete: past API_MAX_HEAD
 * api_head_check has refused it. */
#define HEAD_READ_MAX (API_MAX_HEAD + 1024)
#define PEEK_PAUSE_FIRST_MS 2
#define PEEK_PAUSE_MAX_MS 256
/* After a refusal: what of the client's request is read and dropped, and
 * for how long, before the close. */
#define DRAIN_MAX (1 << 20)
#define DRAIN_MS 2000

struct head_reader {
	uv_poll_t poll;
	uv_timer_t timer;
	int fd;
	struct lws_vhost *vhost;
	struct lws *wsi; /* a later request's: the connection lws serves, paused */
	bool pipelined; /* a later request's head came with more than its request */
	bool lws_turn;  /* a kept-alive connection's request is lws's to read now */
	size_t drained;
	bool draining;
	int handles_open;
	unsigned pause_ms;
	double t0, deadline;
	struct head_reader *prev, *next;
};

/* Set on a connection (lws's opaque user data) whose head came with bytes
 * past its request: lws holds a next request nobody looked at. */
#define PIPELINED ((void *)1)

static struct head_reader *g_readers;
static bool g_closed; /* the API is closing: no more connections taken */
static void on_readable(uv_poll_t *p, int status, int events);

static void reader_unlink(struct head_reader *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		g_readers = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

static void on_handle_closed(uv_handle_t *h)
{
	struct head_reader *r = h->data;
	if (--r->handles_open == 0) {
		free(r);
	}
}

/* A kept-alive connection's reader stops being its (lws's opaque user data
 * of the connection points to its reader); the connection, or NULL. */
static struct lws *reader_detach(struct head_reader *r)
{
	struct lws *wsi = r->wsi;
	r->wsi = NULL;
	if (wsi)
		lws_set_opaque_user_data(wsi, NULL);
	return wsi;
}

/* Stop watching (uv_close stops the poll at once: the descriptor can be
 * watched by lws right after) and forget the reader; the descriptor is
 * closed when close_fd. */
static void reader_end(struct head_reader *r, bool close_fd)
{
	reader_detach(r);
	reader_unlink(r);
	uv_close((uv_handle_t *)&r->poll, on_handle_closed);
	uv_close((uv_handle_t *)&r->timer, on_handle_closed);
	if (close_fd)
		close(r->fd);
	r->fd = -1;
}

/* End a later request's reader and the connection with it (lws closes
 * its side; ours is closed now). */
static void reader_drop(struct head_reader *r)
{
	struct lws *wsi = reader_detach(r);
	if (wsi)
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	reader_end(r, true);
}

void api_send_error_now(int fd, int status, const char *msg)
{
	static const struct {
		int status;
		const char *reason;
	} reasons[] = {{400, "Bad Request"}, {414, "URI Too Long"}, {431, "Request Header Fields Too Large"},
		       {501, "Not Implemented"}, {505, "HTTP Version Not Supported"}};
	const char *reason = "Error";
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (reasons[i].status == status)
			reason = reasons[i].reason;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "error", json_object_new_string(msg));
	json_object_object_add(o, "code", json_object_new_int(status));
	const char *body = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								     JSON_C_TO_STRING_NOSLASHESCAPE);
	char out[1024];
	int n = snprintf(out, sizeof(out), "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
			 "content-length: %zu\r\nconnection: close\r\n\r\n%s", status, reason,
			 strlen(body), body);
	if (n > 0 && (size_t)n < sizeof(out))
		(void)!send(fd, out, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	json_object_put(o);
}

static void look(struct head_reader *r);

static void on_timer(uv_timer_t *t)
{
	struct head_reader *r = t->data;
	if (r->draining || mono_ms() >= r->deadline)
		reader_drop(r); /* drained long enough, or no head in time */
	else
		look(r);
}

static void drain(struct head_reader *r)
{
	char sink[16384];
	for (;;) {
		ssize_t n = recv(r->fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n > 0 && (r->drained += (size_t)n) < DRAIN_MAX)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		reader_end(r, true); /* the end of the request, an error, or enough */
		return;
	}
}

/* Answer the refusal, end our side, and read what the client still sends
 * (up to DRAIN_MAX, for DRAIN_MS): closing with unread bytes would reset
 * the connection and could lose the answer. */
static void refuse(struct head_reader *r, const struct api_head_verdict *v)
{
	struct lws *wsi = reader_detach(r);
	if (wsi) /* lws's side of the connection goes; ours drains */
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	api_send_error_now(r->fd, v->status, v->msg);
	metrics_api_request(api_method_name(v->method), "unmatched", v->status, mono_ms() - r->t0);
	shutdown(r->fd, SHUT_WR);
	r->draining = true;
	uv_timer_stop(&r->timer);
	uv_timer_start(&r->timer, on_timer, DRAIN_MS, 0);
	uv_poll_start(&r->poll, UV_READABLE | UV_DISCONNECT, on_readable);
	drain(r);
}

/* The head is good: a new connection is handed to lws, a kept-alive one's
 * lws resumes reading (the head is still in the socket). pipelined: more
 * than this request came with it. */
static void hand_to_lws(struct head_reader *r, bool pipelined)
{
	struct lws *wsi = r->wsi;
	if (wsi) { /* the reader waits for the connection's next pause */
		/* the poll stays on: lws reads the head below, and stopping it
		 * would cost its registration (and a turn of the loop) each time */
		r->lws_turn = true;
		uv_timer_stop(&r->timer);
		r->pause_ms = 0;
		r->pipelined = pipelined;
		lws_rx_flow_control(wsi, 1);
		/* the head is in the socket: lws reads it now, not on the loop's
		 * next turn (what its own poll callback would do; r may be gone
		 * after: lws may close the connection) */
		struct lws_pollfd ready = {.fd = lws_get_socket_fd(wsi), .events = LWS_POLLIN,
					   .revents = LWS_POLLIN};
		lws_service_fd(lws_get_context(wsi), &ready);
		return;
	}
	int fd = r->fd;
	struct lws_vhost *vhost = r->vhost;
	reader_end(r, false);
	/* lws owns fd from here (it closes it on a failure too) */
	wsi = lws_adopt_socket_vhost(vhost, fd);
	if (wsi)
		lws_set_opaque_user_data(wsi, pipelined ? PIPELINED : NULL);
}

/* Look at what arrived of the head (a peek) and act on it. */
static void look(struct head_reader *r)
{
	static char buf[HEAD_READ_MAX]; /* the loop's thread only, used here alone */
	ssize_t n = recv(r->fd, buf, HEAD_READ_MAX, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		double left = r->deadline - mono_ms();
		uv_timer_start(&r->timer, on_timer, left > 0 ? (uint64_t)left : 0, 0);
		uv_poll_start(&r->poll, UV_READABLE | UV_DISCONNECT, on_readable);
		return;
	}
	if (n <= 0) { /* gone before its head was complete */
		reader_drop(r);
		return;
	}
	struct api_head_verdict v;
	switch (api_head_check(buf, (size_t)n, &v)) {
	case API_HEAD_OK:
		hand_to_lws(r, v.body_unknown || (size_t)n > v.head_len + v.body_len);
		return;
	case API_HEAD_REFUSED:
		refuse(r, &v);
		return;
	case API_HEAD_MORE:
		if ((size_t)n == HEAD_READ_MAX) { /* api_head_check refuses before */
			v.status = 431;
			snprintf(v.msg, sizeof(v.msg), "request head longer than %d bytes", HEAD_READ_MAX);
			refuse(r, &v);
			return;
		}
		/* the bytes stay readable: look again after a pause, not at once */
		r->pause_ms = r->pause_ms ? r->pause_ms * 2 : PEEK_PAUSE_FIRST_MS;
		if (r->pause_ms > PEEK_PAUSE_MAX_MS)
			r->pause_ms = PEEK_PAUSE_MAX_MS;
		uv_timer_start(&r->timer, on_timer, r->pause_ms, 0);
		return;
	}
}

static void on_readable(uv_poll_t *p, int status, int events)
{
	struct head_reader *r = p->data;
	(void)events;
	if (r->lws_turn) { /* bytes before the answer (pipelined): lws's */
		uv_poll_stop(p);
		return;
	}
	if (r->draining) {
		drain(r);
		return;
	}
	if (status < 0) {
		reader_drop(r);
		return;
	}
	uv_poll_stop(p);
	look(r);
}

static void reader_watch(struct head_reader *r, unsigned idle_s)
{
	r->t0 = mono_ms();
	r->deadline = r->t0 + (idle_s ? idle_s : 10) * 1000.0;
	uv_poll_start(&r->poll, UV_READABLE | UV_DISCONNECT, on_readable);
	uv_timer_start(&r->timer, on_timer, (uint64_t)(idle_s ? idle_s : 10) * 1000, 0);
}

/* A reader of the head on own (a descriptor of ours, closed with the
 * reader): a new connection's (for vhost) or a kept-alive one's (wsi,
 * which points to it until either ends). */
static struct head_reader *reader_start(int own, struct lws_vhost *vhost, struct lws *wsi,
					unsigned idle_s)
{
	int flags = fcntl(own, F_GETFL);
	if (flags < 0 || fcntl(own, F_SETFL, flags | O_NONBLOCK) < 0) {
		close(own);
		return NULL;
	}
	struct head_reader *r = xcalloc(1, sizeof(*r));
	r->fd = own;
	r->vhost = vhost;
	uv_loop_t *loop = loop_uv();
	if (uv_poll_init(loop, &r->poll, own)) {
		close(own);
		free(r);
		return NULL;
	}
	uv_timer_init(loop, &r->timer);
	r->poll.data = r->timer.data = r;
	r->handles_open = 2;
	r->next = g_readers;
	if (g_readers)
		g_readers->prev = r;
	g_readers = r;
	if (wsi) {
		r->wsi = wsi;
		lws_set_opaque_user_data(wsi, r);
	}
	reader_watch(r, idle_s);
	return r;
}

int api_accept_take(struct lws_vhost *vhost, int fd, int listener, unsigned idle_s)
{
	if (g_closed)
		return -1; /* a reader would outlive the vhost it hands to */
	int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (own < 0)
		return 0;
	if (listener >= 0 && !api_conn_admit(listener, "api-tcp-listen", own)) {
		close(own);
		return -1;
	}
	return reader_start(own, vhost, NULL, idle_s) ? 1 : -1;
}

/* The reader of a kept-alive connection (its first pause makes it, on a
 * dup of the descriptor, and it lasts as long as the connection): NULL
 * before. */
static struct head_reader *reader_of(struct lws *wsi)
{
	void *o = lws_get_opaque_user_data(wsi);
	return o == PIPELINED ? NULL : o;
}

void api_keepalive_pause(struct lws *wsi, unsigned idle_s)
{
	if (g_closed)
		return;
	struct head_reader *r = reader_of(wsi);
	if (r) {
		r->lws_turn = false;
		reader_watch(r, idle_s);
		lws_rx_flow_control(wsi, 0);
		return;
	}
	int own = fcntl(lws_get_socket_fd(wsi), F_DUPFD_CLOEXEC, 3);
	if (own < 0)
		return; /* lws reads the next head unchecked */
	if (reader_start(own, NULL, wsi, idle_s))
		lws_rx_flow_control(wsi, 0);
}

bool api_keepalive_pipelined(struct lws *wsi)
{
	bool pipelined;
	struct head_reader *r = reader_of(wsi);
	if (r) {
		pipelined = r->pipelined;
		r->pipelined = false;
	} else {
		pipelined = lws_get_opaque_user_data(wsi) == PIPELINED;
		lws_set_opaque_user_data(wsi, NULL);
	}
	int unread = 0;
	return pipelined || (ioctl(lws_get_socket_fd(wsi), FIONREAD, &unread) == 0 && unread > 0);
}

void api_keepalive_forget(struct lws *wsi)
{
	struct head_reader *r = reader_of(wsi);
	if (r)
		reader_end(r, true);
}

void api_accept_open(void)
{
	g_closed = false;
}

void api_accept_close_all(void)
{
	g_closed = true;
	while (g_readers) /* lws closes its connections itself */
		reader_end(g_readers, true);
}
