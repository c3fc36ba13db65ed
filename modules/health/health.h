/* modules/health/health.h - what the health module's files share: a peer
 * (one node of the cluster) and its probe targets (four per address
 * family: ICMP and HTTP to the node address and to the health endpoint), the round state,
 * the peer HTTP reply parser (peer_reply.c, also built into a fuzz target),
 * the prober and responder (probe.c, responder.c) and the health endpoint
 * address (endpoint_addr.c). Everything runs on the loop thread. */
#ifndef FIBRIL_HEALTH_MODULE_H
#define FIBRIL_HEALTH_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fibril/nodes.h>

#define HEALTH_NAME_LEN FIBRIL_NODE_NAME_LEN
#define HEALTH_HISTORY 32          /* RTTs kept per target for p50/p99 */
#define HEALTH_REPLY_MAX (256 * 1024) /* a peer's HTTP reply, headers and body */
#define HEALTH_ERR_LEN 96

/* ---- peer_reply.c: a peer responder's HTTP reply --------------------------------------------- */

/* One row of the connectivity matrix as a peer reported it. */
struct health_row_entry {
	char name[HEALTH_NAME_LEN];
	bool reachable;
};

struct health_reply {
	int status;                      /* HTTP status code */
	char node[HEALTH_NAME_LEN];      /* "node" of the body */
	size_t n_row;                    /* "peers" of the body (GET /row), at most max_row */
	struct health_row_entry *row;    /* caller's array */
	size_t max_row;
};

/* Parse buf[0..len) as a whole HTTP/1.x reply of the health responder:
 * status line, headers (Content-Length honoured when present), a JSON body
 * {"node": NAME, "peers": {NAME: true|false, ...}}. Returns 1 when complete
 * and valid, 0 when more bytes are needed (eof false), -1 with a one-line
 * reason in err when it is not a valid reply. */
int health_reply_parse(const char *buf, size_t len, bool eof, struct health_reply *out,
		       char *err, size_t errlen);

/* ---- per-peer state ------------------------------------------------------------------------ */

enum health_target {
	HT_NODE_ICMP = 0,
	HT_NODE_HTTP,
	HT_EP_ICMP,
	HT_EP_HTTP,
	/* the same over IPv6 (dual-stack nodes) */
	HT_NODE_ICMP6,
	HT_NODE_HTTP6,
	HT_EP_ICMP6,
	HT_EP_HTTP6,
	HT_COUNT,
};
/* "node-icmp", ..., "node-icmp6", ... */
extern const char *const health_target_names[HT_COUNT];

static inline bool health_target_v6(int t) { return t >= HT_NODE_ICMP6; }
static inline bool health_target_http(int t) { return t % 2 == 1; }
static inline bool health_target_node(int t) { return t % 4 < 2; }

/* An address of either family. */
struct health_addr {
	int family; /* AF_INET, AF_INET6; 0: none */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	};
};

struct health_probe_stat {
	bool probed;          /* at least one probe concluded */
	bool reachable;       /* the last concluded probe succeeded */
	bool in_flight;
	uint64_t sent_us;     /* monotonic time the in-flight probe left */
	uint16_t seq;         /* ICMP: the in-flight echo's sequence */
	uint64_t last_rtt_us;
	uint32_t rtt_us[HEALTH_HISTORY];
	uint32_t n_rtt, rtt_next;
	uint64_t sent, failed;
	uint64_t changed_ms;  /* when reachable last changed (monotonic) */
	char error[HEALTH_ERR_LEN];
};

struct health_http_conn; /* probe.c */

struct health_peer {
	char name[HEALTH_NAME_LEN];
	bool local;
	bool has_node_ip, has_ep_ip;
	struct in_addr node_ip, ep_ip;
	bool has_node_ip6, has_ep_ip6;
	struct in6_addr node_ip6, ep_ip6;
	struct health_probe_stat st[HT_COUNT];
	struct health_http_conn *http[HT_COUNT]; /* the in-flight HTTP probes */
	bool queued[HT_COUNT];                   /* waiting for a free HTTP slot */
	uint8_t published[3];  /* reachable, ipv4, ipv6 last put on the bus */
	uint8_t reach;         /* FIBRIL_REACH_* over every target, */
	uint64_t reach_ms;     /* since when (monotonic ms, */
	int64_t reach_unix;    /* and wall clock) */
	bool ever_published;
	/* the peer's own row of the matrix, from its last GET /row answer */
	struct health_row_entry *row;
	size_t n_row;
	uint64_t row_at_ms;
	struct health_peer *next;
};

struct health;

/* probe.c */
/* Whether p has target t's address, and which (sockaddr of port). */
bool health_target_has(const struct health_peer *p, enum health_target t);
socklen_t health_target_sockaddr(const struct health_peer *p, enum health_target t, uint16_t port,
				 struct sockaddr_storage *out);
int health_icmp_open(struct health *h, char *why, size_t len);
void health_icmp_close(struct health *h);
int health_icmp_send(struct health *h, struct health_peer *p, enum health_target t);
void health_http_start(struct health *h, struct health_peer *p, enum health_target t);
void health_http_abort(struct health *h, struct health_peer *p, enum health_target t);
/* Whether node-http probes fetch the peers' rows (GET /row) now. */
bool health_matrix_on(const struct health *h);
/* A probe concluded: record it (rtt_us when ok). */
void health_probe_done(struct health *h, struct health_peer *p, enum health_target t, bool ok,
		       uint64_t rtt_us, const char *error);
uint64_t health_mono_us(void);

/* responder.c */
int health_responder_open(struct health *h, struct health_addr addr, char *why, size_t len);
void health_responder_close_all(struct health *h);
/* The body of GET /hello (row false) or GET /row (row true); malloc'd. */
char *health_responder_body(struct health *h, bool row, size_t *len);

/* endpoint_addr.c: the health endpoint addresses on the loopback */
int health_ep_addr_add(struct health_addr a, char *why, size_t len);
void health_ep_addr_del(struct health_addr a);
/* The last usable IPv4 address of the node's first IPv4 pod CIDR (false
 * if none: /31, /32). */
bool health_ep_addr_of(const struct fibril_node *n, struct in_addr *out);
/* The same for IPv6: the last address but one of the first IPv6 pod CIDR
 * (false if none, or /127, /128). */
bool health_ep_addr6_of(const struct fibril_node *n, struct in6_addr *out);

/* endpoint_addr.c: reserve, add and answer on this node's health endpoint
 * addresses (the families not up yet; -EAGAIN from the IPAM: again in 1 s) */
struct health;
void health_endpoint_up(struct health *h, const struct fibril_node *self);

/* stats */
uint32_t health_percentile(const struct health_probe_stat *s, unsigned pct);


/* ---- the module's state -------------------------------------------------------------------- */

struct fibril_module;
struct fibril_timer;
struct fibril_io;
struct fibril_metric;
struct fibril_series;
struct health_rconn; /* responder.c */

#define HEALTH_MAX_LISTENERS 4 /* node and endpoint, per family */

struct health {
	struct fibril_module *m;
	const struct fibril_nodes_ops *nodes;
	void *nodes_ctx;
	char self[HEALTH_NAME_LEN];
	uint16_t port;
	uint64_t interval_ms;
	unsigned max_inflight, inflight;
	size_t matrix_max;     /* peers' rows are fetched only up to this many nodes */
	bool running;
	bool ipv6;             /* [health] ipv6: answer and probe over IPv6 too */
	/* the health endpoint */
	bool ep_wanted, ep_added, ep_reserved, ep6_added, ep6_reserved;
	bool ep_retrying;                 /* a reservation the IPAM refused for now */
	struct fibril_timer *ep_timer;    /* its retry */
	struct in_addr ep_ip;
	struct in6_addr ep_ip6;
	/* peers, this node first */
	struct health_peer *peers;
	size_t n_peers;
	struct health_peer *queue_cursor; /* where the HTTP queue resumes */
	struct fibril_timer *timer;
	/* ICMP */
	int icmp_fd, icmp6_fd;
	bool icmp_raw, icmp6_raw;
	uint16_t echo_id, echo_seq;
	struct fibril_io *icmp_io, *icmp6_io;
	struct health_seq_slot { struct health_peer *p; uint8_t t; } *seqmap; /* [65536] */
	/* responder */
	struct { int fd; struct fibril_io *io; struct health_addr addr; } listeners[HEALTH_MAX_LISTENERS];
	unsigned n_listeners;
	struct health_rconn *rconns, *rconns_tail; /* oldest first */
	unsigned n_rconns, n_rconns_other, rconn_max; /* other: not from a node's address */
	struct { int fd; uint64_t until_ms; } *parked; /* refused, held a while: a ring */
	unsigned parked_head, n_parked;
	struct fibril_timer *park_timer;
	uint64_t served, refused, shed;
	/* rounds */
	uint64_t rounds;
	uint64_t round_start_us, last_round_us;
	unsigned round_pending;
	bool round_open;
	char unreachable_msg[512];
	/* metrics */
	struct fibril_metric *m_peer_reach, *m_peer_rtt;
	struct fibril_series *s_probes[HT_COUNT][2]; /* [target][ok] */
	struct fibril_series *s_rtt[HT_COUNT];
	struct fibril_series *s_round, *s_peers_ok, *s_peers_bad, *s_served;
};

#endif
