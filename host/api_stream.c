/* host/api_stream.c - websocket streams on the API (<fibril/api.h>): a
 * module registers a path; each client connecting there gets its own queue
 * of text messages, written as its connection can take them. A broadcast
 * (fibril_stream_send) queues for every client; a stream with ops
 * (fibril_api_stream_ops, ABI 1.6) knows each client from its open with its
 * own query and sends to each on its own. A full queue drops that client's
 * new messages and counts them: the sender never waits and the other
 * clients never notice; once the queue has room again the module's lost
 * callback tells how many went. */
#include "api_internal.h"
#include <fibril/compat.h>

#include <errno.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_QUEUE_MAX 4096
#define STREAM_FRAME_MAX 65536 /* FIBRIL_STREAM_LINES: a frame joins lines up to this */
#define STREAM_FRAME_MIN 16384 /* ... and starts with room for this much */

struct stream_msg {
	struct stream_msg *next;
	size_t len, cap;
	size_t lines; /* messages joined in it */
	unsigned char buf[]; /* LWS_PRE + cap */
};

struct fibril_stream_client {
	struct lws *wsi;
	struct fibril_stream *stream;
	struct stream_msg *head, *tail;
	size_t queued;          /* messages (lines) queued */
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

int fibril_stream_client_send(struct fibril_stream_client *c, const char *msg, size_t len)
{
	if (!c || !c->stream || c->closing)
		return -EINVAL;
	struct fibril_stream *st = c->stream;
	if (c->queued >= st->max_queue) {
		c->dropped++;
		c->lost_untold++;
		return -ENOBUFS;
	}
	struct stream_msg *t = c->tail;
	if ((st->ops.flags & FIBRIL_STREAM_LINES) && t &&
	    t->len + 1 + len <= STREAM_FRAME_MAX) {
		if (t->len + 1 + len > t->cap) {
			size_t cap = t->cap * 2;
			while (cap < t->len + 1 + len)
				cap *= 2;
			struct stream_msg *g = realloc(t, sizeof(*g) + LWS_PRE + cap);
			if (!g)
				return -ENOMEM;
			g->cap = cap;
			if (c->head == t)
				c->head = g;
			for (struct stream_msg *p = c->head; p && p != g; p = p->next)
				if (p->next == t)
					p->next = g;
			c->tail = t = g;
		}
		t->buf[LWS_PRE + t->len] = '\n';
		memcpy(t->buf + LWS_PRE + t->len + 1, msg, len);
		t->len += 1 + len;
		t->lines++;
		c->queued++;
		return 0;
	}
	size_t cap = (st->ops.flags & FIBRIL_STREAM_LINES) && len < STREAM_FRAME_MIN ? STREAM_FRAME_MIN : len;
	struct stream_msg *m = malloc(sizeof(*m) + LWS_PRE + cap);
	if (!m)
		return -ENOMEM;
	m->next = NULL;
	m->len = len;
	m->cap = cap;
	m->lines = 1;
	memcpy(m->buf + LWS_PRE, msg, len);
	if (c->tail)
		c->tail->next = m;
	else
		c->head = m;
	c->tail = m;
	c->queued++;
	lws_callback_on_writable(c->wsi);
	return 0;
}

int fibril_stream_send(struct fibril_stream *s, const char *msg, size_t len)
{
	if (!s)
		return -EINVAL;
	for (struct fibril_stream_client *c = s->clients; c; c = c->next)
		if (fibril_stream_client_send(c, msg, len) == -ENOMEM)
			return -ENOMEM;
	return s->nclients;
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
	while (c->head) {
		struct stream_msg *m = c->head;
		c->head = m->next;
		free(m);
	}
	c->tail = NULL;
	c->queued = 0;
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

int api_stream_writeable(struct lws *wsi, struct session *s)
{
	struct fibril_stream_client *c = s->client;
	if (!c)
		return 0;
	if (!c->head) {
		if (c->closing) {
			lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION,
					 (unsigned char *)"refused", 7);
			return -1;
		}
		return 0;
	}
	struct stream_msg *m = c->head;
	if (lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT) < (int)m->len)
		return -1;
	struct fibril_stream *st = c->stream;
	c->head = m->next;
	if (!c->head)
		c->tail = NULL;
	c->queued -= m->lines <= c->queued ? m->lines : c->queued;
	free(m);
	if (st && c->lost_untold && st->ops.lost && c->queued < st->max_queue / 2) {
		uint64_t n = c->lost_untold;
		c->lost_untold = 0;
		struct crash_ctx cc;
		crash_enter(&cc, st->owner, "stream lost callback for", st->path, -1);
		st->ops.lost(c, n, st->ud);
		crash_leave(&cc);
	}
	if (c->head || c->closing)
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
