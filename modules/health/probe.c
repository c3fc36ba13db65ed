/* modules/health/probe.c - the prober: ICMP echo over one socket (an
 * unprivileged ICMP datagram socket where net.ipv4.ping_group_range allows
 * it, else a raw one) and HTTP GETs to the peers' health responders over
 * non-blocking TCP sockets, at most max-inflight at a time. Nothing here
 * waits: sockets are watched on the loop and a probe concludes when its
 * answer arrives or when the next round starts without one. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/ip.h>
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

static struct in_addr target_addr(const struct health_peer *p, enum health_target t)
{
	return t == HT_NODE_ICMP || t == HT_NODE_HTTP ? p->node_ip : p->ep_ip;
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

static void icmp_readable(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct health *h = ud;
	uint8_t buf[512];
	for (int n = 0; n < 4096; n++) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t r = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (r < 0)
			return; /* EAGAIN, or an error queued on the socket: nothing to match */
		const uint8_t *icmp = buf;
		size_t len = (size_t)r;
		if (h->icmp_raw) { /* a raw socket hands the IP header too */
			if (len < sizeof(struct iphdr))
				continue;
			size_t ihl = (size_t)(buf[0] & 0x0f) * 4;
			if (ihl < sizeof(struct iphdr) || ihl > len)
				continue;
			icmp += ihl;
			len -= ihl;
		}
		if (len < sizeof(struct icmphdr))
			continue;
		struct icmphdr ih;
		memcpy(&ih, icmp, sizeof(ih));
		if (ih.type != ICMP_ECHOREPLY || (h->icmp_raw && ntohs(ih.un.echo.id) != h->echo_id))
			continue;
		uint16_t seq = ntohs(ih.un.echo.sequence);
		struct health_seq_slot *slot = &h->seqmap[seq];
		struct health_peer *p = slot->p;
		if (!p)
			continue;
		enum health_target t = (enum health_target)slot->t;
		if (!p->st[t].in_flight || p->st[t].seq != seq ||
		    target_addr(p, t).s_addr != from.sin_addr.s_addr)
			continue;
		slot->p = NULL;
		health_probe_done(h, p, t, true, health_mono_us() - p->st[t].sent_us, NULL);
	}
}

int health_icmp_open(struct health *h, char *why, size_t len)
{
	h->icmp_raw = false;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMP);
	if (fd < 0) {
		h->icmp_raw = true;
		fd = socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMP);
	}
	if (fd < 0) {
		snprintf(why, len, "cannot open an ICMP socket (neither unprivileged, see "
			 "net.ipv4.ping_group_range, nor raw, which needs CAP_NET_RAW): %s",
			 strerror(errno));
		return -errno;
	}
	int rcv = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	h->icmp_fd = fd;
	h->echo_id = (uint16_t)(getpid() ^ (uintptr_t)h);
	h->icmp_io = fibril_io_watch(h->m, fd, FIBRIL_IO_READ, icmp_readable, h);
	if (!h->icmp_io) {
		snprintf(why, len, "cannot watch the ICMP socket");
		close(fd);
		h->icmp_fd = -1;
		return -ENOMEM;
	}
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
		struct icmphdr h;
		uint8_t payload[16];
	} pkt;
	memset(&pkt, 0, sizeof(pkt));
	pkt.h.type = ICMP_ECHO;
	pkt.h.un.echo.id = htons(h->echo_id); /* a datagram socket puts its own */
	pkt.h.un.echo.sequence = htons(seq);
	memcpy(pkt.payload, "fibril-health", 13);
	pkt.h.checksum = csum(&pkt, sizeof(pkt));
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr = target_addr(p, t)};
	s->seq = seq;
	s->in_flight = true;
	s->sent++;
	s->sent_us = health_mono_us();
	h->round_pending++;
	if (sendto(h->icmp_fd, &pkt, sizeof(pkt), MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to)) < 0) {
		char e[HEALTH_ERR_LEN];
		snprintf(e, sizeof(e), "cannot send an echo request: %s", strerror(errno));
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
	return t == HT_NODE_HTTP && health_matrix_on(h) ? "GET /row HTTP/1.1\r\nHost: fibril-health\r\nConnection: close\r\n\r\n"
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
	if (c->t == HT_NODE_HTTP && health_matrix_on(c->h)) {
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
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	char e[HEALTH_ERR_LEN];
	if (c->fd < 0) {
		snprintf(e, sizeof(e), "socket: %s", strerror(errno));
		free(c);
		health_probe_done(h, p, t, false, 0, e);
		return;
	}
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(h->port),
				 .sin_addr = target_addr(p, t)};
	if (connect(c->fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS) {
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
		enum health_target t;
		if (p->queued[HT_NODE_HTTP])
			t = HT_NODE_HTTP;
		else if (p->queued[HT_EP_HTTP])
			t = HT_EP_HTTP;
		else {
			h->queue_cursor = p->next;
			continue;
		}
		p->queued[t] = false;
		http_connect(h, p, t);
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
