/* modules/hubble-lite/hubble.h - hubble-lite's internals shared by its
 * files: a flow (one datapath event enriched with the endpoints at both
 * ends), the flow filter of GET /v1/flows and `fibril observe` (filter.c,
 * no SDK calls, so the fuzz target links it alone), the JSON of a flow
 * (flow_json.c) and the web page (web.c). */
#ifndef FIBRIL_HUBBLE_INT_H
#define FIBRIL_HUBBLE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HL_POD_LEN 128
#define HL_NS_LEN 64
#define HL_LABELS_LEN 256
#define HL_REASON_LEN 48
#define HL_ERR_LEN 256
#define HL_FILTER_MAX 8 /* values per filter key (repeated keys are ORed) */
#define HL_SVC_NAME_LEN 128

enum hl_verdict { HL_FORWARDED = 1, HL_DROPPED = 2,
		  HL_VERDICT_NEVER = 99 /* a Hubble verdict fibril never gives (AUDIT, ...) */ };
enum hl_type { HL_TYPE_DROP = 1, HL_TYPE_TRACE = 2, HL_TYPE_POLICY = 3,
	       HL_TYPE_NEVER = 99 /* a Hubble event type fibril never makes (l7, ...) */ };

/* What the policy said about a flow (datapath event policy_match), with
 * its rule as the policy module named it when the event came. */
enum hl_policy_match { HL_POLICY_NONE = 0, HL_POLICY_ALLOW = 1, HL_POLICY_DENY = 2,
		       HL_POLICY_DEFAULT_DENY = 3 };

struct hl_policy {
	uint8_t match;          /* enum hl_policy_match */
	bool ingress;           /* the receiver's ingress policy, else the sender's egress */
	bool known;             /* the rule fields below are set */
	uint32_t rule_id;
	uint32_t spec, index;
	char kind[48];
	char source[8];
	char ns[HL_NS_LEN];
	char name[254];
	char section[16];       /* "ingress", "egressDeny", ... */
};

/* A service (Hubble's Service: name and namespace); name "" when none. */
struct hl_service {
	char ns[HL_NS_LEN];
	char name[HL_SVC_NAME_LEN];
};

/* One end of a flow. */
struct hl_peer {
	uint16_t ep_id;         /* local endpoint, 0 when none */
	uint32_t identity;
	uint16_t port;
	uint8_t addr[16];       /* network order; IPv4 in the first 4 bytes */
	char ns[HL_NS_LEN];     /* "" when not a known pod */
	char pod[HL_POD_LEN];
	char labels[HL_LABELS_LEN]; /* "source:key=value" lines, '\n' separated */
	struct hl_service service; /* the service this end is a frontend or backend of */
};

struct hl_flow {
	uint64_t seq;           /* 1, 2, ... in arrival order */
	uint64_t time_ns;       /* CLOCK_REALTIME */
	uint8_t type;           /* enum hl_type */
	uint8_t verdict;        /* enum hl_verdict */
	uint8_t direction;      /* 0 from-endpoint (egress), 1 to-endpoint (ingress) */
	uint8_t family;         /* 4, 6, 0 */
	uint8_t proto;          /* IPPROTO_* */
	uint8_t tcp_flags;
	uint8_t reason;
	uint8_t icmp_type, icmp_code;
	bool icmp_known;        /* the datapath said the ICMP type and code */
	bool xlated;            /* masqueraded: the source it left with */
	uint8_t src_xlated[16];
	uint16_t sport_xlated;
	uint32_t len;
	char reason_name[HL_REASON_LEN]; /* "forwarded", "spoofed-source-ip" (no "drop:") */
	struct hl_peer src, dst;
	struct hl_policy policy;
};

struct hl_cidr {
	int family; /* 4 or 6 */
	uint8_t addr[16];
	unsigned plen;
};

/* One "either side / source only / destination only" string filter. */
struct hl_strs {
	char v[HL_FILTER_MAX][HL_POD_LEN + HL_NS_LEN];
	unsigned n;
};

struct hl_filter {
	struct hl_strs pod, from_pod, to_pod;       /* "ns/pod" or "pod" */
	struct hl_strs ns, from_ns, to_ns;
	struct hl_strs label, from_label, to_label; /* "key=value", "key", "src:key=value" */
	struct hl_strs service, from_service, to_service; /* "ns/name" or "name" */
	struct hl_cidr ip[HL_FILTER_MAX], from_ip[HL_FILTER_MAX], to_ip[HL_FILTER_MAX];
	unsigned nip, nfrom_ip, nto_ip;
	uint32_t identity[HL_FILTER_MAX], from_identity[HL_FILTER_MAX], to_identity[HL_FILTER_MAX];
	unsigned nidentity, nfrom_identity, nto_identity;
	uint16_t port[HL_FILTER_MAX], from_port[HL_FILTER_MAX], to_port[HL_FILTER_MAX];
	unsigned nport, nfrom_port, nto_port;
	/* Every key below is a list; a flow matches one of its values (none
	 * given: any flow). */
	uint8_t proto[HL_FILTER_MAX];
	unsigned nproto;
	int verdict[HL_FILTER_MAX]; /* HL_FORWARDED, HL_DROPPED, HL_VERDICT_NEVER */
	unsigned nverdict;
	struct hl_type_sel {
		int type;             /* HL_TYPE_*, HL_TYPE_NEVER */
		char trace_point[16]; /* -t trace:to-stack: Hubble's TO_STACK; "" any */
	} type[HL_FILTER_MAX];
	unsigned ntype;
	struct hl_reason_sel {
		char name[HL_REASON_LEN]; /* fibril's "policy-denied", or "" */
		int code;                 /* else a Hubble DropReason (POLICY_DENIED: 133) */
	} drop_reason[HL_FILTER_MAX];
	unsigned ndrop_reason;
	uint8_t direction[HL_FILTER_MAX];  /* 1 ingress, 2 egress (Hubble's traffic_direction) */
	unsigned ndirection;
	uint8_t ip_version[HL_FILTER_MAX]; /* 4, 6, 1 none (not IP: ARP) */
	unsigned nip_version;
	uint8_t tcp_flags[HL_FILTER_MAX]; /* a flow has all the flags of one of them */
	unsigned ntcp_flags;
	uint64_t since_ns, until_ns;     /* 0: open */
	uint64_t last;          /* 0: all in the ring */
};

/* A request's filter: the flows f matches, less those `exclude` matches when
 * has_not (not-KEY query parameters: hubble observe --not). */
struct hl_query {
	struct hl_filter f, exclude;
	bool has_not;
};

/* Keys of the filter, as query parameters (and `fibril observe` flags). */
extern const char *const hl_filter_keys[];

void hl_filter_init(struct hl_filter *f);
/* Apply one key=value; now_ns (CLOCK_REALTIME) for relative times. 0, or
 * -1 with a one-line reason naming the key in err. */
int hl_filter_set(struct hl_filter *f, const char *key, const char *value, uint64_t now_ns,
		  char *err, size_t errlen);
/* A whole query string "a=b&c=d" (percent-decoded, '+' is a blank). */
int hl_filter_parse_query(struct hl_filter *f, const char *query, uint64_t now_ns, char *err,
			  size_t errlen);
bool hl_filter_match(const struct hl_filter *f, const struct hl_flow *fl);
bool hl_query_match(const struct hl_query *q, const struct hl_flow *fl);

/* Protocol numbers and names: "tcp" -> 6; 6 -> "TCP" (NULL: unknown). */
int hl_proto_parse(const char *s);
const char *hl_proto_name(int proto);

/* flow_json.c: a growing text buffer and the JSON of a flow. */
struct hl_buf {
	char *p;
	size_t len, cap;
	bool failed; /* out of memory: the text is cut */
};
void hl_buf_add(struct hl_buf *b, const char *s, size_t n);
void hl_buf_str(struct hl_buf *b, const char *s);
void hl_buf_printf(struct hl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hl_buf_jstr(struct hl_buf *b, const char *s); /* as a JSON string */
void hl_buf_jstr_n(struct hl_buf *b, const char *s, size_t max); /* at most max bytes of s */
void hl_flow_json(struct hl_buf *b, const struct hl_flow *f, const char *node);
const char *hl_tcp_flags_text(uint8_t flags, char *buf, size_t len); /* "SYN,ACK" */
/* inet_ntop (out: INET6_ADDRSTRLEN bytes), IPv4 without its sprintf */
void hl_addr_text(int af, const uint8_t *addr, char *out);

/* flow_hubble.c: a flow as Hubble's GetFlowsResponse JSON line, and
 * fibril's names in Hubble's enums. */
void hl_flow_hubble_json(struct hl_buf *b, const struct hl_flow *f, const char *node,
			 const uint64_t uuid_seed[2]);
/* Lost events as Hubble's GetFlowsResponse JSON line ({"lost_events":{...},"node_name",
 * "time"}): fibril's source ("SLOW_READER", "DATAPATH", "DATAPATH_RING", "EVENT_RATE_LIMIT") as the
 * nearest LostEventSource (hl_lost_source_hubble), Hubble's JSON having no field for
 * fibril's own name. */
const char *hl_lost_source_hubble(const char *fibril_source);
void hl_lost_hubble_json(struct hl_buf *b, const char *fibril_source, uint64_t n,
			 const char *node, uint64_t time_ns);
bool hl_drop_reason_known(const char *fibril_name);           /* "policy-denied" */
unsigned hl_drop_reason_hubble(const char *fibril_name, uint8_t policy_match); /* 133, 0 */
int hl_drop_reason_by_hubble_name(const char *name);          /* "POLICY_DENIED" -> 133, -1 */
const char *hl_drop_reason_hubble_name(unsigned code);
/* A trace's TraceObservationPoint ("TO_STACK") by its reason, NULL unknown;
 * *sub_type Cilium's trace sub-type number. */
const char *hl_trace_point(const char *reason, unsigned *sub_type);
/* The program that saw it (flow direction): "from-endpoint", "to-endpoint",
 * "from-overlay", "from-network". */
const char *hl_observation_point_name(uint8_t direction);

/* services.c: the lb module's services by frontend and backend (the
 * lb.service events), to name a flow's service. */
struct hl_svcmap;
struct hl_svcmap *hl_svcmap_new(void);
void hl_svcmap_free(struct hl_svcmap *m);
/* One struct fibril_lb_service_event payload: 0, -EINVAL, -ENOMEM. */
int hl_svcmap_apply(struct hl_svcmap *m, const void *payload, size_t len);
/* The service (family, addr as a flow holds it, port, proto) is a frontend
 * of, else a backend of; NULL when none. */
const struct hl_service *hl_svcmap_lookup(const struct hl_svcmap *m, uint8_t family,
					  const uint8_t *addr, uint16_t port, uint8_t proto);
size_t hl_svcmap_count(const struct hl_svcmap *m);
/* Copy at most srclen bytes of src (up to its NUL: an event's fixed-size,
 * maybe unterminated field), cut to fit dst. */
void hl_copy_str(char *dst, size_t len, const char *src, size_t srclen);

/* web.c: the page at GET /flows (0 or -errno). */
struct fibril_module;
int hl_web_register(struct fibril_module *m);

#endif
