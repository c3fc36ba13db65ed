/* cli/ws.c - a small websocket client (RFC 6455) for the agent's streams
 * on its unix socket (or, through cli/remote.c's connection, on a TCP or
 * TLS listener): the upgrade request, then text messages handed to a
 * callback until the agent closes the stream. Client frames are masked as
 * the RFC asks; pings are answered. Enough for `fibril observe -f`. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define WS_MAX_MESSAGE (16u << 20)

/* The whole buffer written (out) or read, across short transfers and
 * signals: 0, or -1 on an error or the end of the stream. */
static int transfer_all(struct ws_conn *c, void *buf, size_t len, bool out)
{
	char *p = buf;
	while (len) {
		ssize_t n = out ? c->write(c, p, len) : c->read(c, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_all(struct ws_conn *c, const void *buf, size_t len)
{
	return transfer_all(c, (void *)buf, len, true);
}

static int read_full(struct ws_conn *c, void *buf, size_t len)
{
	return transfer_all(c, buf, len, false);
}

/* The unix socket's transport: the descriptor itself. */
static ssize_t fd_read(struct ws_conn *c, void *buf, size_t len)
{
	return read(c->fd, buf, len);
}

static ssize_t fd_write(struct ws_conn *c, const void *buf, size_t len)
{
	return write(c->fd, buf, len);
}

static void fd_close(struct ws_conn *c)
{
	close(c->fd);
}

static struct ws_conn fd_conn(int fd)
{
	return (struct ws_conn){.fd = fd, .read = fd_read, .write = fd_write, .close = fd_close};
}

/* One masked client frame (the mask need not be secret on a unix socket,
 * but the server must see one). */
static int send_frame(struct ws_conn *c, int opcode, const unsigned char *data, size_t len)
{
	unsigned char hdr[14];
	size_t h = 0;
	hdr[h++] = (unsigned char)(0x80 | opcode);
	if (len < 126) {
		hdr[h++] = (unsigned char)(0x80 | len);
	} else {
		hdr[h++] = 0x80 | 126;
		hdr[h++] = (unsigned char)(len >> 8);
		hdr[h++] = (unsigned char)len;
	}
	const unsigned char mask[4] = {0x12, 0x34, 0x56, 0x78};
	memcpy(hdr + h, mask, 4);
	h += 4;
	unsigned char body[125];
	if (len > sizeof(body))
		len = sizeof(body);
	for (size_t i = 0; i < len; i++)
		body[i] = data[i] ^ mask[i % 4];
	return write_all(c, hdr, h) || write_all(c, body, len) ? -1 : 0;
}

int ws_connect(const char *socket_path, const char *path_and_query)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", socket_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		print_error("cannot reach the agent at %s: %s", socket_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	struct ws_conn c = fd_conn(fd);
	if (ws_upgrade(&c, "localhost", path_and_query)) {
		close(fd);
		return -1;
	}
	return fd;
}

int ws_upgrade(struct ws_conn *c, const char *host, const char *path_and_query)
{
	char *req = xasprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
			      "Connection: Upgrade\r\nSec-WebSocket-Key: ZmlicmlsLW9ic2VydmUtZg==\r\n"
			      "Sec-WebSocket-Version: 13\r\n\r\n",
			      path_and_query, host);
	int rc = write_all(c, req, strlen(req));
	free(req);
	/* the answer's head, byte by byte so no frame byte is read with it */
	char head[4096];
	size_t n = 0;
	while (rc == 0 && n < sizeof(head) - 1) {
		if (read_full(c, head + n, 1)) {
			rc = -1;
			break;
		}
		n++;
		if (n >= 4 && !memcmp(head + n - 4, "\r\n\r\n", 4))
			break;
	}
	head[n] = '\0';
	if (rc || strncmp(head, "HTTP/1.1 101", 12) != 0) {
		char *line = clean_ndup(head, strcspn(head, "\r\n"));
		/* a 404, or no answer (the agent closes an upgrade to a path
		 * no module streams): is the module that streams it loaded? */
		const char *transport = !*line && c->why ? c->why(c) : NULL;
		const char *module = !c->why && (!strncmp(head, "HTTP/1.1 404", 12) || !*line)
					     ? module_serving_path(path_and_query)
					     : NULL;
		if (module && module_is_loaded(module))
			module = NULL;
		if (transport)
			print_error("%s", transport); /* a TLS refusal, say */
		else if (module)
			print_error("the agent refused the stream %s: %s: served by the %s module, which "
				    "this agent has not loaded; to enable it, %s",
				    path_and_query, *line ? line : "no answer", module, module_enable_hint());
		else
			print_error("the agent refused the stream %s: %s", path_and_query,
				    *line ? line : "no answer");
		free(line);
		return -1;
	}
	return 0;
}

/* The reader's buffer: one read takes all the agent has written (up to
 * the buffer), frames are parsed in place. A read that emptied the socket
 * is followed by a pause of WS_READ_PAUSE_NS before the next one: while
 * the reader sleeps it is not waiting on the socket, so the agent's
 * writes wake nobody and queue up in the socket (the agent gives a stream
 * connection a large send buffer for this), and the next read takes a
 * batch. A follower at 100,000 flows/s reads about 1000 / (pause in ms)
 * times a second, each read some tens of KiB, and no write of the agent
 * pays for a wake-up; a quiet stream still answers its first flow at once
 * (the read blocks) and adds at most the pause to the rest. A read that
 * filled the buffer goes on without a pause (more is waiting). */
#define WS_READ_BUF (1u << 20)
#define WS_READ_PAUSE_NS 2000000L

struct ws_rbuf {
	unsigned char *p;
	size_t start, end, cap;
	bool pause; /* the last read emptied the socket */
};

/* At least need bytes unread in rb (and one spare for a NUL): 0, or -1 at
 * the end of the stream or an error (a read timeout included). */
static int rbuf_fill(struct ws_conn *c, struct ws_rbuf *rb, size_t need)
{
	if (rb->end - rb->start >= need)
		return 0;
	/* the unread rest to the front when the frame would not fit, or when
	 * little room is left for the read (a batch, not a sliver) */
	if (rb->start && (rb->start + need + 1 > rb->cap || rb->cap - rb->end < rb->cap / 4)) {
		memmove(rb->p, rb->p + rb->start, rb->end - rb->start);
		rb->end -= rb->start;
		rb->start = 0;
	}
	if (need + 1 > rb->cap) {
		size_t cap = rb->cap;
		while (cap < need + 1)
			cap *= 2;
		rb->p = xrealloc(rb->p, cap);
		rb->cap = cap;
	}
	while (rb->end - rb->start < need) {
		if (rb->pause) {
			struct timespec ts = {0, WS_READ_PAUSE_NS};
			nanosleep(&ts, NULL);
		}
		size_t room = rb->cap - 1 - rb->end;
		ssize_t n = c->read(c, rb->p + rb->end, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		rb->end += (size_t)n;
		rb->pause = (size_t)n < room;
	}
	return 0;
}

int ws_read(int fd, const char *what, int (*on_message)(const char *text, size_t len, void *ud),
	    void *ud)
{
	struct ws_conn c = fd_conn(fd);
	return ws_read_conn(&c, what, on_message, ud);
}

int ws_read_conn(struct ws_conn *c, const char *what,
		 int (*on_message)(const char *text, size_t len, void *ud), void *ud)
{
	int rc = 0;
	struct ws_rbuf rb = {.p = xrealloc(NULL, WS_READ_BUF), .cap = WS_READ_BUF};
	unsigned char *msg = NULL; /* a message in fragments, joined */
	size_t msg_len = 0;
	for (;;) {
		if (rbuf_fill(c, &rb, 2))
			break; /* the agent went away */
		const unsigned char *h = rb.p + rb.start;
		int opcode = h[0] & 0x0f;
		bool fin = h[0] & 0x80;
		bool masked = h[1] & 0x80;
		uint64_t len = h[1] & 0x7f;
		size_t hlen = 2 + (len == 126 ? 2 : len == 127 ? 8 : 0) + (masked ? 4 : 0);
		if (rbuf_fill(c, &rb, hlen))
			break;
		h = rb.p + rb.start;
		if (len == 126) {
			len = (uint64_t)h[2] << 8 | h[3];
		} else if (len == 127) {
			len = 0;
			for (int i = 0; i < 8; i++)
				len = len << 8 | h[2 + i];
		}
		if (msg_len + len > WS_MAX_MESSAGE) {
			print_error("stream %s: a message over %u bytes", what, WS_MAX_MESSAGE);
			rc = -1;
			break;
		}
		if (rbuf_fill(c, &rb, hlen + (size_t)len))
			break;
		unsigned char *data = rb.p + rb.start + hlen;
		if (masked)
			for (uint64_t i = 0; i < len; i++)
				data[i] ^= rb.p[rb.start + hlen - 4 + i % 4];
		rb.start += hlen + (size_t)len;
		if (rb.start == rb.end)
			rb.start = rb.end = 0;
		if (opcode == 0x8) { /* close */
			send_frame(c, 0x8, data, len >= 2 ? 2 : 0);
			break;
		}
		if (opcode == 0x9) { /* ping */
			send_frame(c, 0xA, data, len);
			continue;
		}
		if (opcode == 0xA)
			continue;
		if (fin && !msg_len) {
			/* the usual case: one frame, handed over from the buffer
			 * (its spare byte after the data holds the NUL) */
			unsigned char keep = data[len];
			data[len] = '\0';
			int stop = on_message((const char *)data, (size_t)len, ud);
			data[len] = keep;
			if (stop) {
				rc = 1;
				break;
			}
			continue;
		}
		msg = xrealloc(msg, msg_len + len + 1);
		memcpy(msg + msg_len, data, len);
		msg_len += len;
		if (!fin)
			continue;
		msg[msg_len] = '\0';
		if (on_message((const char *)msg, msg_len, ud)) {
			rc = 1;
			break;
		}
		msg_len = 0;
	}
	free(msg);
	free(rb.p);
	c->close(c);
	return rc;
}

int ws_follow(const char *socket_path, const char *path_and_query,
	      int (*on_message)(const char *text, size_t len, void *ud), void *ud)
{
	int fd = ws_connect(socket_path, path_and_query);
	return fd < 0 ? -1 : ws_read(fd, path_and_query, on_message, ud);
}
