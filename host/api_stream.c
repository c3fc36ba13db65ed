/* host/api_stream.c - websocket streams on the API (<fibril/api.h>): a
 * module registers a path; each client connecting there gets its own queue
 * of text messages, written as its connection can take them. A broadcast
 * (fibril_stream_send) queues for every client; a stream with ops
 * (fibril_api_stream_ops, ABI 1.6) knows each client from its open with its
 * own query and sends to each on its own. A message is written once and
 * shared (fibril_stream_msg, ABI 1.7): a client's queue holds references,
 * not copies, and a FIBRIL_STREAM_LINES stream gathers what a client has
 * queued into one frame (up to STREAM_FRAME_MAX) each time its connection
 * is writeable - a frame per wake-up, not per message. A full queue drops
 * that client's new messages and counts them: the sender never waits and
 * the other clients never notice; once the queue has room again the
 * module's lost callback tells how many went. */
#include "api_internal.h"
#include <fibril/compat.h>

#include <errno.h>
#include <libwebsockets.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_QUEUE_MAX 4096
#define STREAM_QUEUE_START 64  /* a client's queue of references grows from this */
/* FIBRIL_STREAM_LINES: a frame joins lines up to this. A client gets one
 * frame per trip round the loop, so this is also what it can catch up by
 * in one trip when its queue is long (1 MiB: some 1,700 flows of
 * hubble-lite, more than the datapath hands over per trip) */
#define STREAM_FRAME_MAX (1 << 20)
#define STREAM_FRAME_KEEP (256 << 10) /* a larger frame buffer is freed once the queue is empty */
/* a stream connection's socket send buffer (the kernel doubles it): room
 * for some milliseconds of a busy stream while its reader sleeps between
 * reads (cli/ws.c reads in batches), so the reader is not woken by each
 * write and the agent's queue of the client stays short */
#define STREAM_SNDBUF (1 << 20)

/* One message, shared by every client it is queued for: written once by
 * the module, referenced by each queue, freed with its last reference. */
struct fibril_stream_msg {
	uint32_t refs;
	size_t len;
	char text[];
};

struct fibril_stream_client {
	struct lws *wsi;
	struct fibril_stream *stream;
	/* the queue: a ring of references to shared messages */
	struct fibril_stream_msg **q;
	size_t qcap, qhead, queued;
	/* the frame being written: LWS_PRE bytes, then the joined lines;
	 * kept between frames so a frame is one gather, not a malloc */
	unsigned char *frame;
	size_t frame_cap;
	uint64_t frames;        /* written, in all */
	uint64_t dropped;       /* in all */
	uint64_t lost_untold;   /* dropped since the last lost callback */
	bool closing;           /* close once the queue is written (open refused) */
	void *data;
	struct fibril_stream_client *next;
};

struct fibril_stream {
	struct fibril_module *owner;
	char *path;
	struct fibril_stream_ops ops; /* zero for a plain broadcast stream */
	void *ud;
	size_t max_queue;
	struct fibril_stream_client *clients;
	int nclients;
	struct fibril_stream *next;
};

static struct fibril_stream *g_streams;

static struct fibril_stream *stream_find(const char *path)
{
	for (struct fibril_stream *st = g_streams; st; st = st->next)
		if (strcmp(st->path, path) == 0)
			return st;
	return NULL;
}

static struct fibril_stream *stream_add(struct fibril_module *m, const char *path,
					const struct fibril_stream_ops *ops, void *ud)
{
	if (!path || path[0] != '/' || stream_find(path)) {
		errno = path && stream_find(path) ? EEXIST : EINVAL;
		return NULL;
	}
	struct fibril_stream *st = xcalloc(1, sizeof(*st));
	if (ops) {
		/* libbpf's rule: a shorter struct reads as zeros, a longer one
		 * only with zeros in what this host does not know */
		char why[160];
		int rc = fibril_struct_copy_in(&st->ops, sizeof(st->ops), ops, ops->sz,
					       FIBRIL_OFFSETOFEND(struct fibril_stream_ops, sz),
					       "fibril_stream_ops", why, sizeof(why));
		if (rc) {
			fibril_error(m, "stream %s: %s", path, why);
			free(st);
			errno = -rc;
			return NULL;
		}
	}
	st->ud = ud;
	st->max_queue = st->ops.max_queue ? st->ops.max_queue : STREAM_QUEUE_MAX;
	st->owner = m;
	st->path = xstrdup(path);
	st->next = g_streams;
	g_streams = st;
	return st;
}

struct fibril_stream *fibril_api_stream(struct fibril_module *m, const char *path)
{
	return stream_add(m, path, NULL, NULL);
}

struct fibril_stream *fibril_api_stream_ops(struct fibril_module *m, const char *path,
					    const struct fibril_stream_ops *ops, void *ud)
{
	if (!ops) {
		errno = EINVAL;
		return NULL;
	}
	return stream_add(m, path, ops, ud);
}

int fibril_stream_clients(const struct fibril_stream *s)
{
	return s ? s->nclients : 0;
}

/* ---- shared messages (ABI 1.7) ----------------------------------------------------------- */

struct fibril_stream_msg *fibril_stream_msg_new(const char *text, size_t len)
{
	if (!text && len) {
		errno = EINVAL;
		return NULL;
	}
	struct fibril_stream_msg *msg = malloc(sizeof(*msg) + len + 1);
	if (!msg)
		return NULL;
	msg->refs = 1;
	msg->len = len;
	if (len)
		memcpy(msg->text, text, len);
	msg->text[len] = '\0';
	return msg;
}

void fibril_stream_msg_put(struct fibril_stream_msg *msg)
{
	if (msg && --msg->refs == 0)
		free(msg);
}

static bool queue_grow(struct fibril_stream_client *c, size_t max)
{
	size_t cap = c->qcap ? c->qcap * 2 : STREAM_QUEUE_START;
	if (cap > max)
		cap = max;
	struct fibril_stream_msg **q = malloc(cap * sizeof(*q));
	if (!q)
		return false;
	for (size_t i = 0; i < c->queued; i++)
		q[i] = c->q[(c->qhead + i) % c->qcap];
	free(c->q);
	c->q = q;
	c->qcap = cap;
	c->qhead = 0;
	return true;
}

int fibril_stream_client_send_msg(struct fibril_stream_client *c, struct fibril_stream_msg *msg)
{
	if (!c || !c->stream || c->closing || !msg)
		return -EINVAL;
	struct fibril_stream *st = c->stream;
	if (c->queued >= st->max_queue) {
		c->dropped++;
		c->lost_untold++;
		return -ENOBUFS;
	}
	if (c->queued == c->qcap && !queue_grow(c, st->max_queue))
		return -ENOMEM;
	msg->refs++;
	c->q[(c->qhead + c->queued) % c->qcap] = msg;
	/* the writeable callback comes once the loop is back from the event
	 * that sent this (a batch of flows, say): a frame per wake-up */
	if (c->queued++ == 0)
		lws_callback_on_writable(c->wsi);
	return 0;
}

int fibril_stream_client_send(struct fibril_stream_client *c, const char *msg, size_t len)
{
	if (!c || !c->stream || c->closing)
		return -EINVAL;
	if (c->queued >= c->stream->max_queue) {
		c->dropped++;
		c->lost_untold++;
		return -ENOBUFS;
	}
	struct fibril_stream_msg *m = fibril_stream_msg_new(msg, len);
	if (!m)
		return -ENOMEM;
	int rc = fibril_stream_client_send_msg(c, m);
	fibril_stream_msg_put(m);
	return rc;
}

int fibril_stream_send(struct fibril_stream *s, const char *msg, size_t len)
{
	if (!s)
		return -EINVAL;
	if (!s->clients)
		return 0;
	struct fibril_stream_msg *m = fibril_stream_msg_new(msg, len);
	if (!m)
		return -ENOMEM;
	int rc = s->nclients;
	for (struct fibril_stream_client *c = s->clients; c; c = c->next)
		if (fibril_stream_client_send_msg(c, m) == -ENOMEM)
			rc = -ENOMEM;
	fibril_stream_msg_put(m);
	return rc;
}

void fibril_stream_client_set_data(struct fibril_stream_client *c, void *data)
{
	if (c)
		c->data = data;
}

void *fibril_stream_client_data(const struct fibril_stream_client *c)
{
	return c ? c->data : NULL;
}

uint64_t fibril_stream_client_dropped(const struct fibril_stream_client *c)
{
	return c ? c->dropped : 0;
}

static void client_free_queue(struct fibril_stream_client *c)
{
	for (size_t i = 0; i < c->queued; i++)
		fibril_stream_msg_put(c->q[(c->qhead + i) % c->qcap]);
	free(c->q);
	c->q = NULL;
	c->qcap = c->qhead = c->queued = 0;
	free(c->frame);
	c->frame = NULL;
	c->frame_cap = 0;
}

static void client_detach(struct fibril_stream_client *c)
{
	struct fibril_stream *st = c->stream;
	if (!st)
		return;
	for (struct fibril_stream_client **pp = &st->clients; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			st->nclients--;
			break;
		}
	}
	c->stream = NULL;
}

/* The module is gone (its fini freed what it kept per client): no
 * callback into it; the connections are closed. */
static void stream_free(struct fibril_stream *st, bool close_connections)
{
	while (st->clients) {
		struct fibril_stream_client *c = st->clients;
		client_detach(c);
		client_free_queue(c);
		if (close_connections)
			lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
	free(st->path);
	free(st);
}

bool api_stream_accepts(const char *path, bool tcp)
{
	struct fibril_stream *st = stream_find(path);
	return st && (!tcp || (st->ops.flags & FIBRIL_STREAM_TCP));
}

int api_stream_established(struct lws *wsi, struct session *s, bool tcp)
{
	struct fibril_stream *st = stream_find(s->req.path);
	if (!st || (tcp && !(st->ops.flags & FIBRIL_STREAM_TCP)))
		return -1;
	if (!tcp) {
		/* past net.core.wmem_max when the agent may (CAP_NET_ADMIN); a
		 * TCP connection keeps the kernel's autotuning */
		int fd = (int)lws_get_socket_fd(wsi), sz = STREAM_SNDBUF;
		if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
			setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	}
	struct fibril_stream_client *c = xcalloc(1, sizeof(*c));
	c->wsi = wsi;
	c->stream = st;
	c->next = st->clients;
	st->clients = c;
	st->nclients++;
	s->client = c;
	if (!st->ops.open)
		return 0;
	char err[256] = "";
	struct crash_ctx cc;
	crash_enter(&cc, st->owner, "stream open for", st->path, -1);
	int rc = st->ops.open(c, &s->req, st->ud, err, sizeof(err));
	crash_leave(&cc);
	if (rc == 0)
		return 0;
	/* refused: the reason as one message, then the close */
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "error", json_object_new_string(err[0] ? err : "refused"));
	json_object_object_add(o, "code", json_object_new_int(400));
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE);
	fibril_stream_client_send(c, text, strlen(text));
	json_object_put(o);
	c->closing = true;
	client_detach(c); /* no message and no close callback any more */
	return 0;
}

/* The next frame of c in c->frame (after LWS_PRE): its first message, and
 * on a FIBRIL_STREAM_LINES stream the next ones joined by '\n' up to
 * STREAM_FRAME_MAX. *lines: the messages in it. NULL: out of memory. */
static unsigned char *frame_gather(struct fibril_stream_client *c, size_t *len, size_t *lines)
{
	bool join = c->stream && (c->stream->ops.flags & FIBRIL_STREAM_LINES);
	size_t n = 0, bytes = 0;
	while (n < c->queued) {
		const struct fibril_stream_msg *m = c->q[(c->qhead + n) % c->qcap];
		size_t more = m->len + (n ? 1 : 0);
		if (n && (!join || bytes + more > STREAM_FRAME_MAX))
			break;
		bytes += more;
		n++;
	}
	if (LWS_PRE + bytes > c->frame_cap) {
		size_t cap = c->frame_cap ? c->frame_cap : 4096;
		while (cap < LWS_PRE + bytes)
			cap *= 2;
		unsigned char *f = realloc(c->frame, cap);
		if (!f)
			return NULL;
		c->frame = f;
		c->frame_cap = cap;
	}
	unsigned char *p = c->frame + LWS_PRE;
	for (size_t i = 0; i < n; i++) {
		const struct fibril_stream_msg *m = c->q[(c->qhead + i) % c->qcap];
		if (i)
			*p++ = '\n';
		memcpy(p, m->text, m->len);
		p += m->len;
	}
	*len = bytes;
	*lines = n;
	return c->frame + LWS_PRE;
}

int api_stream_writeable(struct lws *wsi, struct session *s)
{
	struct fibril_stream_client *c = s->client;
	if (!c)
		return 0;
	if (!c->queued) {
		if (c->closing) {
			lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION,
					 (unsigned char *)"refused", 7);
			return -1;
		}
		return 0;
	}
	size_t len = 0, lines = 0;
	unsigned char *frame = frame_gather(c, &len, &lines);
	if (!frame || lws_write(wsi, frame, len, LWS_WRITE_TEXT) < (int)len)
		return -1;
	c->frames++;
	for (size_t i = 0; i < lines; i++)
		fibril_stream_msg_put(c->q[(c->qhead + i) % c->qcap]);
	c->qhead = (c->qhead + lines) % c->qcap;
	c->queued -= lines;
	struct fibril_stream *st = c->stream;
	if (st && c->lost_untold && st->ops.lost && c->queued < st->max_queue / 2) {
		uint64_t n = c->lost_untold;
		c->lost_untold = 0;
		struct crash_ctx cc;
		crash_enter(&cc, st->owner, "stream lost callback for", st->path, -1);
		st->ops.lost(c, n, st->ud);
		crash_leave(&cc);
	}
	if (!c->queued && c->frame_cap > STREAM_FRAME_KEEP) {
		free(c->frame); /* a backlog's big frame: not kept for an idle client */
		c->frame = NULL;
		c->frame_cap = 0;
	}
	if (c->queued || c->closing)
		lws_callback_on_writable(wsi);
	return 0;
}

void api_stream_closed(struct session *s)
{
	struct fibril_stream_client *c = s->client;
	if (!c)
		return;
	struct fibril_stream *st = c->stream;
	if (st && st->ops.close) {
		struct crash_ctx cc;
		crash_enter(&cc, st->owner, "stream close for", st->path, -1);
		st->ops.close(c, st->ud);
		crash_leave(&cc);
	}
	client_detach(c);
	client_free_queue(c);
	free(c);
	s->client = NULL;
}

void api_streams_release_owner(struct fibril_module *owner)
{
	struct fibril_stream **sp = &g_streams;
	while (*sp) {
		struct fibril_stream *st = *sp;
		if (st->owner == owner) {
			*sp = st->next;
			stream_free(st, true);
			continue;
		}
		sp = &st->next;
	}
}

void api_streams_free(void)
{
	while (g_streams) {
		struct fibril_stream *st = g_streams;
		g_streams = st->next;
		stream_free(st, false); /* connections are gone with the context */
	}
}
