/* modules/health/probe.c - the prober: ICMP echo over one socket per
 * family (an unprivileged ICMP / ICMPv6 datagram socket where
 * net.ipv4.ping_group_range allows it, else a raw one; one sequence space
 * for both) and HTTP GETs (IPv4 or IPv6) to the peers' health responders over
 * non-blocking TCP sockets, at most max-inflight at a time. Nothing here
 * waits: sockets are watched on the loop and a probe concludes when its
 * answer arrives or when the next round starts without one. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/ip.h>
#include <netinet/icmp6.h>
#include <netinet/ip_icmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <fibril/fibril.h>

uint64_t health_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

bool health_target_has(const struct health_peer *p, enum health_target t)
{
	if (health_target_v6(t))
		return health_target_node(t) ? p->has_node_ip6 : p->has_ep_ip6;
	return health_target_node(t) ? p->has_node_ip : p->has_ep_ip;
}

socklen_t health_target_sockaddr(const struct health_peer *p, enum health_target t, uint16_t port,
				 struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (health_target_v6(t)) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		s6->sin6_addr = health_target_node(t) ? p->node_ip6 : p->ep_ip6;
		return sizeof(*s6);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)out;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(port);
	s4->sin_addr = health_target_node(t) ? p->node_ip : p->ep_ip;
	return sizeof(*s4);
}

/* Whether from is target t's address (ICMP replies are matched by it). */
static bool from_target(const struct health_peer *p, enum health_target t,
			const struct sockaddr_storage *from)
{
	struct sockaddr_storage want;
	health_target_sockaddr(p, t, 0, &want);
	if (from->ss_family != want.ss_family)
		return false;
	if (want.ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)from)->sin6_addr,
			       &((struct sockaddr_in6 *)&want)->sin6_addr, sizeof(struct in6_addr));
	return ((const struct sockaddr_in *)from)->sin_addr.s_addr ==
	       ((struct sockaddr_in *)&want)->sin_addr.s_addr;
}

/* ---- ICMP ------------------------------------------------------------------------------------- */

static uint16_t csum(const void *data, size_t len)
{
	const uint8_t *b = data;
	uint32_t sum = 0;
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (len & 1)
		sum += (uint32_t)(b[len - 1] << 8);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return htons((uint16_t)~sum);
}

/* A reply's sequence matched to its probe, which concludes. */
static void echo_reply(struct health *h, uint16_t seq, const struct sockaddr_storage *from, bool v6)
{
	struct health_seq_slot *slot = &h->seqmap[seq];
	struct health_peer *p = slot->p;
	if (!p)
		return;
	enum health_target t = (enum health_target)slot->t;
	if (health_target_v6(t) != v6 || !p->st[t].in_flight || p->st[t].seq != seq ||
	    !from_target(p, t, from))
		return;
	slot->p = NULL;
	health_probe_done(h, p, t, true, health_mono_us() - p->st[t].sent_us, NULL);
}

/* Echo replies on either ICMP socket. A raw IPv4 socket hands the IP
 * header too; no ICMPv6 socket does. */
static void icmp_readable(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct health *h = ud;
	bool v6 = fd == h->icmp6_fd;
	bool raw = v6 ? h->icmp6_raw : h->icmp_raw;
	uint8_t buf[512];
	for (int n = 0; n < 4096; n++) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t r = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (r < 0)
			return; /* EAGAIN, or an error queued on the socket: nothing to match */
		const uint8_t *icmp = buf;
		size_t len = (size_t)r;
		if (raw && !v6) {
			if (len < sizeof(struct iphdr))
				continue;
			size_t ihl = (size_t)(buf[0] & 0x0f) * 4;
			if (ihl < sizeof(struct iphdr) || ihl > len)
				continue;
			icmp += ihl;
			len -= ihl;
		}
		/* an ICMP and an ICMPv6 echo header have the same 8 bytes */
		if (len < sizeof(struct icmphdr))
			continue;
		struct icmphdr ih;
		memcpy(&ih, icmp, sizeof(ih));
		if (ih.type != (v6 ? ICMP6_ECHO_REPLY : ICMP_ECHOREPLY) ||
		    (raw && ntohs(ih.un.echo.id) != h->echo_id))
			continue;
		echo_reply(h, ntohs(ih.un.echo.sequence), &from, v6);
	}
}

/* One ICMP socket of a family: datagram, else raw; watched on the loop. */
static int icmp_socket(struct health *h, int family, bool *raw, struct fibril_io **io,
		       char *why, size_t len)
{
	int proto = family == AF_INET6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP;
	*raw = false;
	int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
	if (fd < 0) {
		*raw = true;
		fd = socket(family, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
	}
	if (fd < 0) {
		int e = errno;
		snprintf(why, len, "cannot open an %s socket (neither unprivileged, see "
			 "net.ipv4.ping_group_range, nor raw, which needs CAP_NET_RAW): %s",
			 family == AF_INET6 ? "ICMPv6" : "ICMP", strerror(e));
		return -e;
	}
	if (family == AF_INET6 && *raw) { /* only echo replies reach a raw socket */
		struct icmp6_filter f;
		ICMP6_FILTER_SETBLOCKALL(&f);
		ICMP6_FILTER_SETPASS(ICMP6_ECHO_REPLY, &f);
		setsockopt(fd, IPPROTO_ICMPV6, ICMP6_FILTER, &f, sizeof(f));
	}
	int rcv = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	if (family == AF_INET6)
		h->icmp6_fd = fd; /* before the first callback: it tells the family by fd */
	*io = fibril_io_watch(h->m, fd, FIBRIL_IO_READ, icmp_readable, h);
	if (!*io) {
		snprintf(why, len, "cannot watch the ICMP socket");
		close(fd);
		return -ENOMEM;
	}
	return fd;
}

int health_icmp_open(struct health *h, char *why, size_t len)
{
	h->echo_id = (uint16_t)(getpid() ^ (uintptr_t)h);
	int fd = icmp_socket(h, AF_INET, &h->icmp_raw, &h->icmp_io, why, len);
	if (fd < 0)
		return fd;
	h->icmp_fd = fd;
	/* IPv6 may be off in this kernel: then IPv6 targets fail with the reason */
	char why6[256];
	fd = icmp_socket(h, AF_INET6, &h->icmp6_raw, &h->icmp6_io, why6, sizeof(why6));
	if (fd < 0)
		fibril_log(h->m, FIBRIL_LOG_WARN, "no ICMPv6 probes: %s", why6);
	h->icmp6_fd = fd < 0 ? -1 : fd;
	return 0;
}

void health_icmp_close(struct health *h)
{
	if (h->icmp_io)
		fibril_io_remove(h->icmp_io);
	h->icmp_io = NULL;
	if (h->icmp_fd >= 0)
		close(h->icmp_fd);
	h->icmp_fd = -1;
	if (h->icmp6_io)
		fibril_io_remove(h->icmp6_io);
	h->icmp6_io = NULL;
	if (h->icmp6_fd >= 0)
		close(h->icmp6_fd);
	h->icmp6_fd = -1;
}

int health_icmp_send(struct health *h, struct health_peer *p, enum health_target t)
{
	struct health_probe_stat *s = &p->st[t];
	uint16_t seq = ++h->echo_seq;
	if (h->seqmap[seq].p) { /* a slot of a probe 65536 echoes ago: it is long over */
		struct health_peer *old = h->seqmap[seq].p;
		enum health_target ot = (enum health_target)h->seqmap[seq].t;
		h->seqmap[seq].p = NULL;
		if (old->st[ot].in_flight && old->st[ot].seq == seq)
			health_probe_done(h, old, ot, false, 0, "no echo reply");
	}
	struct {
		struct icmphdr h; /* the same 8 bytes as an ICMPv6 echo header */
		uint8_t payload[16];
	} pkt;
	memset(&pkt, 0, sizeof(pkt));
	bool v6 = health_target_v6(t);
	pkt.h.type = v6 ? ICMP6_ECHO_REQUEST : ICMP_ECHO;
	pkt.h.un.echo.id = htons(h->echo_id); /* a datagram socket puts its own */
	pkt.h.un.echo.sequence = htons(seq);
	memcpy(pkt.payload, "fibril-health", 13);
	if (!v6) /* the kernel sums ICMPv6 (it covers the pseudo-header) */
		pkt.h.checksum = csum(&pkt, sizeof(pkt));
	struct sockaddr_storage to;
	socklen_t tolen = health_target_sockaddr(p, t, 0, &to);
	s->seq = seq;
	s->in_flight = true;
	s->sent++;
	s->sent_us = health_mono_us();
	h->round_pending++;
	int fd = v6 ? h->icmp6_fd : h->icmp_fd;
	if (fd < 0 || sendto(fd, &pkt, sizeof(pkt), MSG_DONTWAIT, (struct sockaddr *)&to, tolen) < 0) {
		char e[HEALTH_ERR_LEN];
		snprintf(e, sizeof(e), "cannot send an echo request: %s",
			 fd < 0 ? "no ICMPv6 socket" : strerror(errno));
		health_probe_done(h, p, t, false, 0, e);
		return -1;
	}
	h->seqmap[seq].p = p;
	h->seqmap[seq].t = (uint8_t)t;
	return 0;
}

/* ---- HTTP --------------------------------------------------------------------------------------- */

struct health_http_conn {
	struct health *h;
	struct health_peer *p;
	enum health_target t;
	int fd;
	struct fibril_io *io;
	bool connected;
	size_t req_off;
	char *buf;
	size_t len, cap;
};

#define HEALTH_ROW_MAX 4096

bool health_matrix_on(const struct health *h)
{
	return h->n_peers <= h->matrix_max;
}

static const char *request_of(const struct health *h, enum health_target t)
{
	return (t == HT_NODE_HTTP || t == HT_NODE_HTTP6) && health_matrix_on(h) ? "GET /row HTTP/1.1\r\nHost: fibril-health\r\nConnection: close\r\n\r\n"
				 : "GET /hello HTTP/1.1\r\nHost: fibril-health\r\nConnection: close\r\n\r\n";
}

static void conn_free(struct health_http_conn *c)
{
	if (c->io)
		fibril_io_remove(c->io);
	if (c->fd >= 0)
		close(c->fd);
	c->p->http[c->t] = NULL;
	c->h->inflight--;
	free(c->buf);
	free(c);
}

static void pump_queue(struct health *h);

/* Conclude c's probe and free it; the queue gets its slot. */
static void conn_done(struct health_http_conn *c, bool ok, const char *error)
{
	struct health *h = c->h;
	struct health_peer *p = c->p;
	enum health_target t = c->t;
	conn_free(c);
	health_probe_done(h, p, t, ok, ok ? health_mono_us() - p->st[t].sent_us : 0, error);
	pump_queue(h);
}

static void conn_parse(struct health_http_conn *c, bool eof)
{
	struct health_reply r = {0};
	struct health_row_entry *row = NULL;
	if ((c->t == HT_NODE_HTTP || c->t == HT_NODE_HTTP6) && health_matrix_on(c->h)) {
		row = calloc(HEALTH_ROW_MAX, sizeof(*row));
		r.row = row;
		r.max_row = row ? HEALTH_ROW_MAX : 0;
	}
	char err[HEALTH_ERR_LEN];
	int rc = health_reply_parse(c->buf, c->len, eof, &r, err, sizeof(err));
	if (rc == 0) {
		free(row);
		return;
	}
	if (rc > 0 && row) {
		struct health_peer *p = c->p;
		free(p->row);
		p->row = r.n_row ? realloc(row, r.n_row * sizeof(*row)) : NULL;
		if (!p->row)
			free(row);
		p->n_row = p->row ? r.n_row : 0;
		p->row_at_ms = fibril_now_ms();
		row = NULL;
	}
	free(row);
	conn_done(c, rc > 0, rc > 0 ? NULL : err);
}

static void conn_event(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct health_http_conn *c = ud;
	if (!c->connected) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr) {
			char e[HEALTH_ERR_LEN];
			snprintf(e, sizeof(e), "connect: %s", strerror(soerr));
			conn_done(c, false, e);
			return;
		}
		c->connected = true;
	}
	const char *req = request_of(c->h, c->t);
	size_t rlen = strlen(req);
	if (c->req_off < rlen) {
		ssize_t n = send(fd, req + c->req_off, rlen - c->req_off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			char e[HEALTH_ERR_LEN];
			snprintf(e, sizeof(e), "send: %s", strerror(errno));
			conn_done(c, false, e);
			return;
		}
		if (n > 0)
			c->req_off += (size_t)n;
		if (c->req_off < rlen)
			return;
		fibril_io_update(c->io, FIBRIL_IO_READ);
		return;
	}
	for (;;) {
		if (c->cap - c->len < 4096) {
			size_t ncap = c->cap ? c->cap * 2 : 8192;
			if (ncap > HEALTH_REPLY_MAX + 1)
				ncap = HEALTH_REPLY_MAX + 1;
			if (ncap <= c->len) {
				conn_done(c, false, "the reply is too long");
				return;
			}
			char *nb = realloc(c->buf, ncap);
			if (!nb) {
				conn_done(c, false, "out of memory");
				return;
			}
			c->buf = nb;
			c->cap = ncap;
		}
		ssize_t n = recv(fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				conn_parse(c, false);
				return;
			}
			char e[HEALTH_ERR_LEN];
			snprintf(e, sizeof(e), "recv: %s", strerror(errno));
			conn_done(c, false, e);
			return;
		}
		if (n == 0) {
			conn_parse(c, true);
			return;
		}
		c->len += (size_t)n;
	}
}

/* Start one HTTP probe now (a slot is free). */
static void http_connect(struct health *h, struct health_peer *p, enum health_target t)
{
	struct health_probe_stat *s = &p->st[t];
	s->in_flight = true;
	s->sent++;
	s->sent_us = health_mono_us();
	struct health_http_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		health_probe_done(h, p, t, false, 0, "out of memory");
		return;
	}
	c->h = h;
	c->p = p;
	c->t = t;
	struct sockaddr_storage to;
	socklen_t tolen = health_target_sockaddr(p, t, h->port, &to);
	c->fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	char e[HEALTH_ERR_LEN];
	if (c->fd < 0) {
		snprintf(e, sizeof(e), "socket: %s", strerror(errno));
		free(c);
		health_probe_done(h, p, t, false, 0, e);
		return;
	}
	if (connect(c->fd, (struct sockaddr *)&to, tolen) < 0 && errno != EINPROGRESS) {
		snprintf(e, sizeof(e), "connect: %s", strerror(errno));
		close(c->fd);
		free(c);
		health_probe_done(h, p, t, false, 0, e);
		return;
	}
	c->io = fibril_io_watch(h->m, c->fd, FIBRIL_IO_WRITE, conn_event, c);
	if (!c->io) {
		close(c->fd);
		free(c);
		health_probe_done(h, p, t, false, 0, "cannot watch the socket");
		return;
	}
	p->http[t] = c;
	h->inflight++;
}

static void pump_queue(struct health *h)
{
	while (h->inflight < h->max_inflight && h->queue_cursor) {
		struct health_peer *p = h->queue_cursor;
		int t = 0;
		while (t < HT_COUNT && !p->queued[t])
			t++;
		if (t == HT_COUNT) {
			h->queue_cursor = p->next;
			continue;
		}
		p->queued[t] = false;
		http_connect(h, p, (enum health_target)t);
	}
}

void health_http_start(struct health *h, struct health_peer *p, enum health_target t)
{
	p->queued[t] = true;
	h->round_pending++;
	if (!h->queue_cursor)
		h->queue_cursor = p;
	pump_queue(h);
}

void health_http_abort(struct health *h, struct health_peer *p, enum health_target t)
{
	if (p->queued[t]) {
		p->queued[t] = false;
		if (h->round_pending)
			h->round_pending--;
	}
	if (p->http[t])
		conn_free(p->http[t]);
}
