/* modules/health/responder.c - the health responder: a small HTTP/1.1
 * server on [health] port of the node address and of the health endpoint
 * address, per address family the node has. GET /hello answers {"node": NAME}; GET /row answers this node's
 * row of the connectivity matrix as well, {"node": NAME, "peers": {NAME:
 * reachable, ...}}; anything else 404. One request per connection, then
 * close. Sockets are non-blocking and watched on the loop; at most
 * HEALTH_MAX_CONNS at once (more are closed at accept), each closed after
 * HEALTH_CONN_TIMEOUT_MS without finishing. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json.h>

#include <fibril/fibril.h>

#define HEALTH_MAX_CONNS 2048
#define HEALTH_REQ_MAX 2048
#define HEALTH_CONN_TIMEOUT_MS 5000

struct health_rconn {
	struct health *h;
	int fd;
	struct fibril_io *io;
	struct fibril_timer *timer;
	char req[HEALTH_REQ_MAX];
	size_t req_len;
	char *out;
	size_t out_len, out_off;
	struct health_rconn *prev, *next;
};

static void rconn_close(struct health_rconn *c)
{
	struct health *h = c->h;
	if (c->io)
		fibril_io_remove(c->io);
	if (c->timer)
		fibril_timer_cancel(c->timer);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		h->rconns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	h->n_rconns--;
	free(c->out);
	free(c);
}

char *health_responder_body(struct health *h, bool row, size_t *len)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "node", json_object_new_string(h->self));
	if (row) {
		struct json_object *peers = json_object_new_object();
		for (struct health_peer *p = h->peers; p; p = p->next) {
			bool ok = true, probed = false;
			for (int t = 0; t < HT_COUNT; t++) {
				if (p->st[t].probed) {
					probed = true;
					ok = ok && p->st[t].reachable;
				}
			}
			if (probed)
				json_object_object_add(peers, p->name, json_object_new_boolean(ok));
		}
		json_object_object_add(o, "peers", peers);
	}
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	char *dup = strdup(s);
	*len = dup ? strlen(dup) : 0;
	json_object_put(o);
	return dup;
}

static void rconn_answer(struct health_rconn *c)
{
	struct health *h = c->h;
	int status = 404;
	char *body = NULL;
	size_t blen = 0;
	if (!strncmp(c->req, "GET /hello ", 11) || !strncmp(c->req, "GET /row ", 9)) {
		body = health_responder_body(h, c->req[5] == 'r', &blen);
		status = body ? 200 : 500;
	}
	if (!body) {
		body = strdup("{\"error\":\"not found\"}");
		blen = body ? strlen(body) : 0;
	}
	const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Internal Server Error";
	char head[256];
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			  "Connection: close\r\n\r\n", status, reason, blen);
	c->out = malloc((size_t)hl + blen);
	if (!c->out) {
		free(body);
		rconn_close(c);
		return;
	}
	memcpy(c->out, head, (size_t)hl);
	if (blen)
		memcpy(c->out + hl, body, blen);
	free(body);
	c->out_len = (size_t)hl + blen;
	h->served++;
	fibril_series_inc(h->s_served);
	fibril_io_update(c->io, FIBRIL_IO_WRITE);
}

static void rconn_event(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct health_rconn *c = ud;
	if (!c->out) {
		ssize_t n = recv(fd, c->req + c->req_len, sizeof(c->req) - 1 - c->req_len, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
			rconn_close(c);
			return;
		}
		if (n < 0)
			return;
		c->req_len += (size_t)n;
		c->req[c->req_len] = '\0';
		if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n"))
			rconn_answer(c);
		else if (c->req_len >= sizeof(c->req) - 1)
			rconn_close(c); /* a request head this long is not a probe */
		return;
	}
	ssize_t n = send(fd, c->out + c->out_off, c->out_len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
		rconn_close(c);
		return;
	}
	if (n > 0)
		c->out_off += (size_t)n;
	if (c->out_off == c->out_len) {
		shutdown(fd, SHUT_WR);
		rconn_close(c);
	}
}

static void rconn_timeout(struct fibril_timer *t, void *ud)
{
	struct health_rconn *c = ud;
	c->timer = NULL; /* a one-shot timer frees itself */
	rconn_close(c);
}

static void accept_ready(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct health *h = ud;
	for (int i = 0; i < 256; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0)
			return;
		struct health_rconn *c = h->n_rconns < HEALTH_MAX_CONNS ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			h->refused++;
			close(cfd);
			continue;
		}
		c->h = h;
		c->fd = cfd;
		c->io = fibril_io_watch(h->m, cfd, FIBRIL_IO_READ, rconn_event, c);
		c->timer = fibril_timer_add(h->m, HEALTH_CONN_TIMEOUT_MS, 0, rconn_timeout, c);
		c->next = h->rconns;
		if (h->rconns)
			h->rconns->prev = c;
		h->rconns = c;
		h->n_rconns++;
		if (!c->io || !c->timer)
			rconn_close(c);
	}
}

int health_responder_open(struct health *h, struct health_addr addr, char *why, size_t len)
{
	if (h->n_listeners >= HEALTH_MAX_LISTENERS) {
		snprintf(why, len, "too many responder addresses");
		return -ENOSPC;
	}
	char a[INET6_ADDRSTRLEN];
	inet_ntop(addr.family, &addr.v6, a, sizeof(a));
	int fd = socket(addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(why, len, "cannot open the responder socket: %s", strerror(errno));
		return -errno;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	if (addr.family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(h->port);
		s6->sin6_addr = addr.v6;
		sl = sizeof(*s6);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		/* an address still in duplicate address detection is not
		 * bindable yet: bind anyway, it answers once it is usable */
		setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(h->port);
		s4->sin_addr = addr.v4;
		sl = sizeof(*s4);
	}
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 1024) < 0) {
		int e = errno;
		snprintf(why, len, addr.family == AF_INET6 ? "cannot listen on [%s]:%u: %s" : "cannot listen on %s:%u: %s",
			 a, h->port, strerror(e));
		close(fd);
		return -e;
	}
	struct fibril_io *io = fibril_io_watch(h->m, fd, FIBRIL_IO_READ, accept_ready, h);
	if (!io) {
		snprintf(why, len, "cannot watch the responder socket");
		close(fd);
		return -ENOMEM;
	}
	h->listeners[h->n_listeners].fd = fd;
	h->listeners[h->n_listeners].io = io;
	h->listeners[h->n_listeners].addr = addr;
	h->n_listeners++;
	return 0;
}

void health_responder_close_all(struct health *h)
{
	for (unsigned i = 0; i < h->n_listeners; i++) {
		fibril_io_remove(h->listeners[i].io);
		close(h->listeners[i].fd);
	}
	h->n_listeners = 0;
	while (h->rconns)
		rconn_close(h->rconns);
}
