/* modules/health/responder.c - the health responder: a small HTTP/1.1
 * server on [health] port of the node address and of the health endpoint
 * address, per address family the node has. GET /hello answers {"node": NAME}; GET /row answers this node's
 * row of the connectivity matrix as well, {"node": NAME, "peers": {NAME:
 * reachable, ...}}; anything else 404. One request per connection, then
 * close. Sockets are non-blocking and watched on the loop.
 *
 * Anyone who reaches the port may connect (a pod reaches its node's
 * addresses), so its slots are shared out so that no one who is not a
 * node can make this node look unreachable (issue 22): at most
 * rconn_max connections at once (HEALTH_MAX_CONNS, a quarter of the fd
 * limit when that is lower), of which sources that are not a known node's address
 * (the nodes capability's node addresses, this node's own addresses) may
 * hold all but a quarter, HEALTH_PER_SOURCE each; a connection from a node
 * that finds no free slot sheds the oldest idle one (no request yet) of
 * another source; and each connection has HEALTH_CONN_TIMEOUT_MS for its
 * whole exchange (a probe's takes a round trip); a refused connection is
 * held a while before its close (park()), so that a client opening again
 * whatever is closed gets no faster turn of the loop. The listeners defer the
 * accept until the request's first bytes arrive (TCP_DEFER_ACCEPT), so a
 * connection held idle stays in the kernel and costs the loop nothing. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json.h>

#include <fibril/fibril.h>

#define HEALTH_MAX_CONNS 2048
#define HEALTH_PER_SOURCE 16 /* from one address that is not a node's */
#define HEALTH_REQ_MAX 2048
#define HEALTH_CONN_TIMEOUT_MS 2000
#define HEALTH_PARK_MS 2000 /* how long a refused connection is held before its close */

struct health_rconn {
	struct health *h;
	int fd;
	struct fibril_io *io;
	struct fibril_timer *timer;
	struct health_addr src;
	bool node;      /* from a known node's address */
	char req[HEALTH_REQ_MAX];
	size_t req_len;
	char *out;
	size_t out_len, out_off;
	struct health_rconn *prev, *next; /* oldest first */
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
	else
		h->rconns_tail = c->prev;
	h->n_rconns--;
	if (!c->node)
		h->n_rconns_other--;
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

static bool addr_is(const struct health_addr *a, int family, const void *addr)
{
	if (a->family != family)
		return false;
	return family == AF_INET ? !memcmp(&a->v4, addr, 4) : !memcmp(&a->v6, addr, 16);
}

/* Whether a is a known node's address: a peer's node address, or one of
 * this node's own (it probes itself, from its node or endpoint address). */
static bool from_node(const struct health *h, const struct health_addr *a)
{
	for (unsigned i = 0; i < h->n_listeners; i++)
		if (addr_is(a, h->listeners[i].addr.family, &h->listeners[i].addr.v6))
			return true;
	for (const struct health_peer *p = h->peers; p; p = p->next) {
		if ((p->has_node_ip && addr_is(a, AF_INET, &p->node_ip)) ||
		    (p->has_node_ip6 && addr_is(a, AF_INET6, &p->node_ip6)) ||
		    (p->local && p->has_ep_ip && addr_is(a, AF_INET, &p->ep_ip)) ||
		    (p->local && p->has_ep_ip6 && addr_is(a, AF_INET6, &p->ep_ip6)))
			return true;
	}
	return false;
}

static unsigned conns_from(const struct health *h, const struct health_addr *a)
{
	unsigned n = 0;
	for (const struct health_rconn *c = h->rconns; c; c = c->next)
		n += addr_is(a, c->src.family, &c->src.v6);
	return n;
}

/* Close the oldest connection that is not a node's and has sent no
 * request yet; false when there is none. */
static bool shed_idle(struct health *h)
{
	for (struct health_rconn *c = h->rconns; c; c = c->next) {
		if (!c->node && !c->out) {
			rconn_close(c);
			h->shed++;
			return true;
		}
	}
	return false;
}

/* Whether a new connection from src (node: a known node's address) gets a
 * slot, shedding an idle one of another source if need be. */
static bool admit(struct health *h, const struct health_addr *src, bool node)
{
	if (!node) {
		if (conns_from(h, src) >= HEALTH_PER_SOURCE)
			return false;
		/* a quarter of the slots is the nodes' alone */
		if (h->n_rconns_other >= h->rconn_max - h->rconn_max / 4 && !shed_idle(h))
			return false;
	}
	return h->n_rconns < h->rconn_max || shed_idle(h);
}

/* A refused connection is held (unwatched, nothing read) for
 * HEALTH_PARK_MS before its close, up to rconn_max / 2 of them, so a
 * client that opens again whatever is closed does not make the loop
 * accept and close thousands a second (a tarpit); past that, closed. */
static void park(struct health *h, int fd)
{
	unsigned cap = h->rconn_max / 2;
	if (!h->parked || h->n_parked >= cap) {
		close(fd);
		return;
	}
	unsigned i = (h->parked_head + h->n_parked) % cap;
	h->parked[i].fd = fd;
	h->parked[i].until_ms = fibril_now_ms() + HEALTH_PARK_MS;
	h->n_parked++;
}

/* the parked connections whose time is up (oldest first) */
static void unpark(struct fibril_timer *t, void *ud)
{
	struct health *h = ud;
	(void)t;
	unsigned cap = h->rconn_max / 2;
	uint64_t now = fibril_now_ms();
	while (h->n_parked && h->parked[h->parked_head].until_ms <= now) {
		close(h->parked[h->parked_head].fd);
		h->parked_head = (h->parked_head + 1) % cap;
		h->n_parked--;
	}
}

static void accept_ready(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct health *h = ud;
	/* the whole queue (bounded): one that overflows drops SYNs, a node's too */
	for (int i = 0; i < 4096; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int cfd = accept4(fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0)
			return;
		struct health_addr src = {.family = ss.ss_family};
		if (ss.ss_family == AF_INET6)
			src.v6 = ((struct sockaddr_in6 *)&ss)->sin6_addr;
		else
			src.v4 = ((struct sockaddr_in *)&ss)->sin_addr;
		bool node = from_node(h, &src);
		struct health_rconn *c = admit(h, &src, node) ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			h->refused++;
			park(h, cfd);
			continue;
		}
		c->h = h;
		c->fd = cfd;
		c->src = src;
		c->node = node;
		c->io = fibril_io_watch(h->m, cfd, FIBRIL_IO_READ, rconn_event, c);
		c->timer = fibril_timer_add(h->m, HEALTH_CONN_TIMEOUT_MS, 0, rconn_timeout, c);
		c->prev = h->rconns_tail;
		if (h->rconns_tail)
			h->rconns_tail->next = c;
		else
			h->rconns = c;
		h->rconns_tail = c;
		h->n_rconns++;
		if (!node)
			h->n_rconns_other++;
		if (!c->io || !c->timer)
			rconn_close(c);
	}
}

int health_responder_open(struct health *h, struct health_addr addr, char *why, size_t len)
{
	if (!h->rconn_max) {
		/* two fds of the limit per slot at most: the agent has others */
		struct rlimit rl;
		h->rconn_max = HEALTH_MAX_CONNS;
		if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
		    rl.rlim_cur / 4 < h->rconn_max)
			h->rconn_max = rl.rlim_cur / 4 > 64 ? (unsigned)(rl.rlim_cur / 4) : 64;
		h->parked = calloc(h->rconn_max / 2, sizeof(*h->parked));
		h->park_timer = fibril_timer_add(h->m, 250, 250, unpark, h);
	}
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
	int one = 1, defer_s = HEALTH_CONN_TIMEOUT_MS / 1000;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* a connection reaches accept() only with its request (a probe sends it
	 * at once): one held idle never takes a slot, nor a turn of the loop */
	setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
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
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, SOMAXCONN) < 0) {
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
	for (; h->n_parked; h->n_parked--) {
		close(h->parked[h->parked_head].fd);
		h->parked_head = (h->parked_head + 1) % (h->rconn_max / 2);
	}
	if (h->park_timer)
		fibril_timer_cancel(h->park_timer);
	h->park_timer = NULL;
	free(h->parked);
	h->parked = NULL;
	h->rconn_max = 0; /* the next open sizes it again */
}
