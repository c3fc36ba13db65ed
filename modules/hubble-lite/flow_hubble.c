/* modules/hubble-lite/flow_hubble.c - a flow as `hubble observe -o json`
 * prints it: one observer.GetFlowsResponse per line in protojson with
 * proto field names ({"flow":{...},"node_name":...,"time":...}), enum
 * values by name, empty fields left out, fields in the order flow.proto
 * declares them. The names and numbers are Hubble's (cilium/cilium
 * api/v1/flow/flow.proto, api/v1/observer/observer.proto; the list checked
 * by the tests is tests/integration/hubble_flow_fields.txt). Also the
 * mapping of fibril's drop reasons and observation points to Hubble's
 * enums, which the filter (filter.c) uses too. */
#include "hubble.h"
#include "icmp_names.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Hubble's DropReason enum (flow.proto), every value. */
static const struct {
	const char *name;
	unsigned code;
} hubble_drop_reasons[] = {
	{"DROP_REASON_UNKNOWN", 0}, {"INVALID_SOURCE_MAC", 130}, {"INVALID_DESTINATION_MAC", 131},
	{"INVALID_SOURCE_IP", 132}, {"POLICY_DENIED", 133}, {"INVALID_PACKET_DROPPED", 134},
	{"CT_TRUNCATED_OR_INVALID_HEADER", 135}, {"CT_MISSING_TCP_ACK_FLAG", 136},
	{"CT_UNKNOWN_L4_PROTOCOL", 137}, {"CT_CANNOT_CREATE_ENTRY_FROM_PACKET", 138},
	{"UNSUPPORTED_L3_PROTOCOL", 139}, {"MISSED_TAIL_CALL", 140}, {"ERROR_WRITING_TO_PACKET", 141},
	{"UNKNOWN_L4_PROTOCOL", 142}, {"UNKNOWN_ICMPV4_CODE", 143}, {"UNKNOWN_ICMPV4_TYPE", 144},
	{"UNKNOWN_ICMPV6_CODE", 145}, {"UNKNOWN_ICMPV6_TYPE", 146},
	{"ERROR_RETRIEVING_TUNNEL_KEY", 147}, {"ERROR_RETRIEVING_TUNNEL_OPTIONS", 148},
	{"INVALID_GENEVE_OPTION", 149}, {"UNKNOWN_L3_TARGET_ADDRESS", 150},
	{"STALE_OR_UNROUTABLE_IP", 151}, {"NO_MATCHING_LOCAL_CONTAINER_FOUND", 152},
	{"ERROR_WHILE_CORRECTING_L3_CHECKSUM", 153}, {"ERROR_WHILE_CORRECTING_L4_CHECKSUM", 154},
	{"CT_MAP_INSERTION_FAILED", 155}, {"INVALID_IPV6_EXTENSION_HEADER", 156},
	{"IP_FRAGMENTATION_NOT_SUPPORTED", 157}, {"SERVICE_BACKEND_NOT_FOUND", 158},
	{"NO_TUNNEL_OR_ENCAPSULATION_ENDPOINT", 160}, {"FAILED_TO_INSERT_INTO_PROXYMAP", 161},
	{"REACHED_EDT_RATE_LIMITING_DROP_HORIZON", 162}, {"UNKNOWN_CONNECTION_TRACKING_STATE", 163},
	{"LOCAL_HOST_IS_UNREACHABLE", 164},
	{"NO_CONFIGURATION_AVAILABLE_TO_PERFORM_POLICY_DECISION", 165},
	{"UNSUPPORTED_L2_PROTOCOL", 166}, {"NO_MAPPING_FOR_NAT_MASQUERADE", 167},
	{"UNSUPPORTED_PROTOCOL_FOR_NAT_MASQUERADE", 168}, {"FIB_LOOKUP_FAILED", 169},
	{"ENCAPSULATION_TRAFFIC_IS_PROHIBITED", 170}, {"INVALID_IDENTITY", 171},
	{"UNKNOWN_SENDER", 172}, {"NAT_NOT_NEEDED", 173}, {"IS_A_CLUSTERIP", 174},
	{"FIRST_LOGICAL_DATAGRAM_FRAGMENT_NOT_FOUND", 175}, {"FORBIDDEN_ICMPV6_MESSAGE", 176},
	{"DENIED_BY_LB_SRC_RANGE_CHECK", 177}, {"SOCKET_LOOKUP_FAILED", 178},
	{"SOCKET_ASSIGN_FAILED", 179}, {"PROXY_REDIRECTION_NOT_SUPPORTED_FOR_PROTOCOL", 180},
	{"POLICY_DENY", 181}, {"VLAN_FILTERED", 182}, {"INVALID_VNI", 183},
	{"INVALID_TC_BUFFER", 184}, {"NO_SID", 185}, {"MISSING_SRV6_STATE", 186}, {"NAT46", 187},
	{"NAT64", 188}, {"AUTH_REQUIRED", 189}, {"CT_NO_MAP_FOUND", 190}, {"SNAT_NO_MAP_FOUND", 191},
	{"INVALID_CLUSTER_ID", 192}, {"UNSUPPORTED_PROTOCOL_FOR_DSR_ENCAP", 193},
	{"NO_EGRESS_GATEWAY", 194}, {"TTL_EXCEEDED", 196}, {"NO_NODE_ID", 197},
	{"DROP_HOST_NOT_READY", 202}, {"DROP_EP_NOT_READY", 203},
};
#define N_HUBBLE_DROP (sizeof(hubble_drop_reasons) / sizeof(hubble_drop_reasons[0]))

/* fibril's drop reasons (the datapath's names, without "drop:") and the
 * Hubble reason each is reported as. */
static const struct {
	const char *fibril;
	unsigned hubble;
} drop_map[] = {
	{"spoofed-mac", 130},              /* INVALID_SOURCE_MAC */
	{"spoofed-source-ip", 132},        /* INVALID_SOURCE_IP */
	{"spoofed-arp-sender", 132},       /* INVALID_SOURCE_IP */
	{"spoofed-from-network", 132},     /* INVALID_SOURCE_IP */
	{"policy-denied", 133},            /* POLICY_DENIED (POLICY_DENY for a deny rule) */
	{"invalid-packet", 134},           /* INVALID_PACKET_DROPPED */
	{"unsupported-l3-protocol", 139},  /* UNSUPPORTED_L3_PROTOCOL */
	{"tunnel-key-refused", 141},       /* ERROR_WRITING_TO_PACKET */
	{"redirect-failed", 141},          /* ERROR_WRITING_TO_PACKET */
	{"conntrack-full", 155},           /* CT_MAP_INSERTION_FAILED */
	{"no-tunnel-key", 160},            /* NO_TUNNEL_OR_ENCAPSULATION_ENDPOINT */
	{"tunnel-from-unknown-node", 172}, /* UNKNOWN_SENDER */
	{"fragment-without-first", 175},   /* FIRST_LOGICAL_DATAGRAM_FRAGMENT_NOT_FOUND */
	{"masquerade-no-port", 167},       /* NO_MAPPING_FOR_NAT_MASQUERADE */
	{"masquerade-endpoint-quota", 167}, /* NO_MAPPING_FOR_NAT_MASQUERADE */
	{"egress-gateway-none-alive", 194}, /* NO_EGRESS_GATEWAY */
	{"egress-gateway-relay", 132},     /* INVALID_SOURCE_IP: a forged source */
};
#define N_DROP_MAP (sizeof(drop_map) / sizeof(drop_map[0]))

bool hl_drop_reason_known(const char *fibril_name)
{
	for (size_t i = 0; i < N_DROP_MAP; i++)
		if (!strcmp(drop_map[i].fibril, fibril_name))
			return true;
	return false;
}

unsigned hl_drop_reason_hubble(const char *fibril_name, uint8_t policy_match)
{
	if (!strcmp(fibril_name, "policy-denied") && policy_match == HL_POLICY_DENY)
		return 181; /* POLICY_DENY: a deny rule, as Cilium reports it */
	for (size_t i = 0; i < N_DROP_MAP; i++)
		if (!strcmp(drop_map[i].fibril, fibril_name))
			return drop_map[i].hubble;
	return 0;
}

int hl_drop_reason_by_hubble_name(const char *name)
{
	for (size_t i = 0; i < N_HUBBLE_DROP; i++)
		if (!strcasecmp(hubble_drop_reasons[i].name, name))
			return (int)hubble_drop_reasons[i].code;
	return -1;
}

const char *hl_drop_reason_hubble_name(unsigned code)
{
	for (size_t i = 0; i < N_HUBBLE_DROP; i++)
		if (hubble_drop_reasons[i].code == code)
			return hubble_drop_reasons[i].name;
	return "DROP_REASON_UNKNOWN";
}

/* Hubble's TraceObservationPoint of a trace: where fibril's program sent
 * the packet (its reason), as Cilium's trace points name it. */
static const struct {
	const char *reason;
	const char *point; /* TraceObservationPoint value name */
	unsigned sub_type; /* Cilium's TraceTo.. / TraceFrom.. number (event_type.sub_type) */
} trace_points[] = {
	{"forwarded", "TO_ENDPOINT", 0},  {"delivered", "TO_ENDPOINT", 0},
	{"nd-answered", "TO_ENDPOINT", 0}, {"to-stack", "TO_STACK", 3},
	{"to-tunnel", "TO_OVERLAY", 4},   {"to-fib", "TO_NETWORK", 11},
};

const char *hl_trace_point(const char *reason, unsigned *sub_type)
{
	for (size_t i = 0; i < sizeof(trace_points) / sizeof(trace_points[0]); i++)
		if (!strcmp(trace_points[i].reason, reason)) {
			if (sub_type)
				*sub_type = trace_points[i].sub_type;
			return trace_points[i].point;
		}
	if (sub_type)
		*sub_type = 0;
	return NULL;
}

const char *hl_observation_point_name(uint8_t direction)
{
	static const char *const names[] = {"from-endpoint", "to-endpoint", "from-overlay",
					    "from-network"};
	return direction < 4 ? names[direction] : "unknown";
}

/* protojson's Timestamp: RFC 3339 UTC with 0, 3, 6 or 9 fractional
 * digits; the part up to the seconds is kept for the next flow of the
 * same second (strftime costs more than the rest of the flow) */
static void add_pb_time(struct hl_buf *b, uint64_t ns)
{
	static __thread time_t cached = -1;
	static __thread char base[32];
	static __thread size_t base_len;
	time_t s = (time_t)(ns / 1000000000ULL);
	unsigned frac = (unsigned)(ns % 1000000000ULL);
	if (s != cached) {
		struct tm tm;
		gmtime_r(&s, &tm);
		base_len = strftime(base, sizeof(base), "\"%Y-%m-%dT%H:%M:%S", &tm);
		cached = s;
	}
	hl_buf_add(b, base, base_len);
	char t[16];
	int digits = !frac ? 0 : frac % 1000000 == 0 ? 3 : frac % 1000 == 0 ? 6 : 9;
	unsigned v = digits == 3 ? frac / 1000000 : digits == 6 ? frac / 1000 : frac;
	size_t n = 0;
	if (digits) {
		t[n++] = '.';
		for (int i = digits - 1; i >= 0; i--, v /= 10)
			t[n + (size_t)i] = (char)('0' + v % 10);
		n += (size_t)digits;
	}
	t[n++] = 'Z';
	t[n++] = '"';
	hl_buf_add(b, t, n);
}

/* A string field, left out when empty (protojson's default). */
static void add_str_field(struct hl_buf *b, bool *first, const char *name, const char *v, size_t max)
{
	if (!v[0])
		return;
	hl_buf_printf(b, "%s\"%s\":", *first ? "" : ",", name);
	hl_buf_jstr_n(b, v, max);
	*first = false;
}

static void add_uint_field(struct hl_buf *b, bool *first, const char *name, unsigned long long v)
{
	if (!v)
		return;
	hl_buf_printf(b, "%s\"%s\":%llu", *first ? "" : ",", name, v);
	*first = false;
}

/* Endpoint: ID, identity, namespace, labels, pod_name */
static void add_endpoint(struct hl_buf *b, const char *field, const struct hl_peer *p)
{
	bool first = true;
	hl_buf_printf(b, ",\"%s\":{", field);
	add_uint_field(b, &first, "ID", p->ep_id);
	add_uint_field(b, &first, "identity", p->identity);
	if (p->pod[0])
		add_str_field(b, &first, "namespace", p->ns, sizeof(p->ns));
	if (p->labels[0]) {
		hl_buf_str(b, first ? "\"labels\":[" : ",\"labels\":[");
		first = false;
		bool lfirst = true;
		for (const char *l = p->labels; *l;) {
			const char *end = strchr(l, '\n');
			size_t n = end ? (size_t)(end - l) : strlen(l);
			if (!lfirst)
				hl_buf_add(b, ",", 1);
			lfirst = false;
			hl_buf_jstr_n(b, l, n);
			if (!end)
				break;
			l = end + 1;
		}
		hl_buf_add(b, "]", 1);
	}
	if (p->pod[0])
		add_str_field(b, &first, "pod_name", p->pod, sizeof(p->pod));
	hl_buf_add(b, "}", 1);
}

static void add_service(struct hl_buf *b, const char *field, const struct hl_service *s)
{
	if (!s->name[0])
		return;
	bool first = true;
	hl_buf_printf(b, ",\"%s\":{", field);
	add_str_field(b, &first, "name", s->name, sizeof(s->name));
	add_str_field(b, &first, "namespace", s->ns, sizeof(s->ns));
	hl_buf_add(b, "}", 1);
}

/* The deciding rule as Hubble's Policy {name, namespace, labels, kind}
 * under egress/ingress_allowed_by or _denied_by. */
static void add_policy_refs(struct hl_buf *b, const struct hl_policy *p)
{
	if (p->match != HL_POLICY_ALLOW && p->match != HL_POLICY_DENY)
		return;
	const char *field = p->match == HL_POLICY_ALLOW
				    ? (p->ingress ? "ingress_allowed_by" : "egress_allowed_by")
				    : (p->ingress ? "ingress_denied_by" : "egress_denied_by");
	hl_buf_printf(b, ",\"%s\":[{", field);
	bool first = true;
	if (p->known) {
		add_str_field(b, &first, "name", p->name, sizeof(p->name));
		add_str_field(b, &first, "namespace", p->ns, sizeof(p->ns));
		char l1[128], l2[320], l3[128];
		snprintf(l1, sizeof(l1), "k8s:io.cilium.k8s.policy.derived-from=%.60s", p->kind);
		snprintf(l2, sizeof(l2), "k8s:io.cilium.k8s.policy.name=%.253s", p->name);
		snprintf(l3, sizeof(l3), "k8s:io.cilium.k8s.policy.namespace=%.63s", p->ns);
		hl_buf_str(b, first ? "\"labels\":[" : ",\"labels\":[");
		first = false;
		hl_buf_jstr(b, l1);
		hl_buf_add(b, ",", 1);
		hl_buf_jstr(b, l2);
		if (p->ns[0]) {
			hl_buf_add(b, ",", 1);
			hl_buf_jstr(b, l3);
		}
		hl_buf_add(b, "]", 1);
		add_str_field(b, &first, "kind", p->kind, sizeof(p->kind));
	} else {
		/* a rule deleted before its event came: only its number is known */
		char name[32];
		snprintf(name, sizeof(name), "rule-%u", p->rule_id);
		add_str_field(b, &first, "name", name, sizeof(name));
	}
	hl_buf_str(b, "}]");
}

/* Hubble's Summary of an L3/L4 flow: "TCP Flags: SYN, ACK", "UDP", ... */
static void summary_text(const struct hl_flow *f, char *out, size_t len)
{
	static const char *const names[] = {"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"};
	if (f->proto == 6) {
		size_t n = (size_t)snprintf(out, len, "TCP Flags:");
		bool first = true;
		for (int i = 0; i < 8 && n < len; i++)
			if (f->tcp_flags & (1u << i)) {
				n += (size_t)snprintf(out + n, len - n, "%s %s", first ? "" : ",", names[i]);
				first = false;
			}
		return;
	}
	const char *p = f->proto == 17 ? "UDP" : f->proto == 1 ? "ICMPv4" : f->proto == 58 ? "ICMPv6"
		      : f->proto == 132 ? "SCTP" : NULL;
	const char *icmp = (f->proto == 1 || f->proto == 58) && f->icmp_known
				   ? icmp_type_name(f->proto, f->icmp_type) : NULL;
	if (icmp)
		snprintf(out, len, "%s %s", p, icmp);
	else if (p)
		snprintf(out, len, "%s", p);
	else if (!f->family) {
		char s[INET6_ADDRSTRLEN], t[INET6_ADDRSTRLEN];
		hl_addr_text(AF_INET, f->src.addr, s);
		hl_addr_text(AF_INET, f->dst.addr, t);
		snprintf(out, len, "ARP %.15s -> %.15s", s, t); /* IPv4 */
	}
	else
		snprintf(out, len, "IPv%u protocol %u", f->family, f->proto);
}

/* A flow's UUID: version 4 layout, the agent's random seed and the flow's
 * sequence number, so a flow keeps its UUID however often it is read. */
static void add_uuid(struct hl_buf *b, const uint64_t seed[2], uint64_t seq)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t hi = (seed[0] & ~0xf000ULL) | 0x4000ULL;
	uint64_t lo = ((seed[1] ^ seq) & ~(3ULL << 62)) | (2ULL << 62);
	char u[48] = ",\"uuid\":\"";
	size_t n = 9;
	for (int i = 0; i < 32; i++) {
		if (i == 8 || i == 12 || i == 16 || i == 20)
			u[n++] = '-';
		uint64_t w = i < 16 ? hi : lo;
		u[n++] = hex[(w >> (60 - 4 * (i % 16))) & 15];
	}
	u[n++] = '"';
	hl_buf_add(b, u, n);
}

void hl_flow_hubble_json(struct hl_buf *b, const struct hl_flow *f, const char *node,
			 const uint64_t uuid_seed[2])
{
	unsigned drop = f->verdict == HL_DROPPED ? hl_drop_reason_hubble(f->reason_name, f->policy.match) : 0;
	hl_buf_str(b, "{\"flow\":{\"time\":");
	add_pb_time(b, f->time_ns);
	add_uuid(b, uuid_seed, f->seq);
	hl_buf_str(b, f->verdict == HL_DROPPED ? ",\"verdict\":\"DROPPED\"" : ",\"verdict\":\"FORWARDED\"");
	if (drop)
		hl_buf_printf(b, ",\"drop_reason\":%u", drop);
	if (f->family == 4 || f->family == 6) {
		char src[INET6_ADDRSTRLEN] = "", dst[INET6_ADDRSTRLEN] = "";
		int af = f->family == 4 ? AF_INET : AF_INET6;
		hl_addr_text(af, f->src.addr, src);
		hl_addr_text(af, f->dst.addr, dst);
		hl_buf_printf(b, ",\"IP\":{\"source\":\"%s\",\"destination\":\"%s\",\"ipVersion\":\"%s\"",
			      src, dst, f->family == 4 ? "IPv4" : "IPv6");
		if (f->xlated) { /* Hubble's IP.source_xlated: the masqueraded source */
			char xl[INET6_ADDRSTRLEN] = "";
			hl_addr_text(af, f->src_xlated, xl);
			hl_buf_printf(b, ",\"source_xlated\":\"%s\"", xl);
		}
		hl_buf_str(b, "}");
	}
	if (f->proto == 6 || f->proto == 17 || f->proto == 132) {
		bool first = true;
		hl_buf_printf(b, ",\"l4\":{\"%s\":{", f->proto == 6 ? "TCP" : f->proto == 17 ? "UDP" : "SCTP");
		add_uint_field(b, &first, "source_port", f->src.port);
		add_uint_field(b, &first, "destination_port", f->dst.port);
		if (f->proto == 6) {
			static const char *const names[] = {"FIN", "SYN", "RST", "PSH",
							    "ACK", "URG", "ECE", "CWR"};
			hl_buf_str(b, first ? "\"flags\":{" : ",\"flags\":{");
			bool ffirst = true;
			for (int i = 0; i < 8; i++)
				if (f->tcp_flags & (1u << i)) {
					hl_buf_printf(b, "%s\"%s\":true", ffirst ? "" : ",", names[i]);
					ffirst = false;
				}
			hl_buf_add(b, "}", 1);
		}
		hl_buf_str(b, "}}");
	} else if (f->proto == 1 || f->proto == 58) {
		bool first = true;
		hl_buf_str(b, f->proto == 1 ? ",\"l4\":{\"ICMPv4\":{" : ",\"l4\":{\"ICMPv6\":{");
		add_uint_field(b, &first, "type", f->icmp_type);
		add_uint_field(b, &first, "code", f->icmp_code);
		hl_buf_str(b, "}}");
	}
	add_endpoint(b, "source", &f->src);
	add_endpoint(b, "destination", &f->dst);
	hl_buf_str(b, ",\"Type\":\"L3_L4\",\"node_name\":");
	hl_buf_jstr(b, node);
	/* Cilium's monitor message types: drop 1, trace 4, policy verdict 5 */
	unsigned sub = 0;
	const char *point = f->type == HL_TYPE_TRACE ? hl_trace_point(f->reason_name, &sub) : NULL;
	if (f->type == HL_TYPE_DROP)
		hl_buf_printf(b, ",\"event_type\":{\"type\":1,\"sub_type\":%u}", drop);
	else if (f->type == HL_TYPE_POLICY)
		hl_buf_str(b, ",\"event_type\":{\"type\":5}");
	else if (sub)
		hl_buf_printf(b, ",\"event_type\":{\"type\":4,\"sub_type\":%u}", sub);
	else
		hl_buf_str(b, ",\"event_type\":{\"type\":4}");
	add_service(b, "source_service", &f->src.service);
	add_service(b, "destination_service", &f->dst.service);
	bool ingress = f->policy.match ? f->policy.ingress : f->direction != 0;
	hl_buf_str(b, ingress ? ",\"traffic_direction\":\"INGRESS\"" : ",\"traffic_direction\":\"EGRESS\"");
	if (point)
		hl_buf_printf(b, ",\"trace_observation_point\":\"%s\"", point);
	if (drop)
		hl_buf_printf(b, ",\"drop_reason_desc\":\"%s\"", hl_drop_reason_hubble_name(drop));
	/* known only for a connection's first packet: a policy verdict, a
	 * policy drop */
	if (f->type == HL_TYPE_POLICY || (f->verdict == HL_DROPPED && f->policy.match))
		hl_buf_str(b, ",\"is_reply\":false");
	char sum[96];
	summary_text(f, sum, sizeof(sum));
	hl_buf_str(b, ",\"Summary\":");
	hl_buf_jstr(b, sum);
	add_policy_refs(b, &f->policy);
	hl_buf_str(b, "},\"node_name\":");
	hl_buf_jstr(b, node);
	hl_buf_str(b, ",\"time\":");
	add_pb_time(b, f->time_ns);
	hl_buf_add(b, "}", 1);
}

const char *hl_lost_source_hubble(const char *fibril_source)
{
	/* a follower's own queue was full: Hubble's per-reader queue */
	if (!strcmp(fibril_source, "SLOW_READER"))
		return "OBSERVER_EVENTS_QUEUE";
	/* the datapath's ring or the bus was full, or drops over its event rate
	 * limit were never sent: lost between the datapath and the agent (as
	 * the gRPC server says it) */
	if (!strcmp(fibril_source, "DATAPATH_RING") || !strcmp(fibril_source, "EVENT_RATE_LIMIT") ||
	    !strcmp(fibril_source, "DATAPATH"))
		return "PERF_EVENT_RING_BUFFER";
	return "UNKNOWN_LOST_EVENT_SOURCE";
}

void hl_lost_hubble_json(struct hl_buf *b, const char *fibril_source, uint64_t n,
			 const char *node, uint64_t time_ns)
{
	/* protojson: the enum by name, uint64 as a string, cpu (unknown) left out */
	hl_buf_printf(b, "{\"lost_events\":{\"source\":\"%s\",\"num_events_lost\":\"%llu\"},"
			 "\"node_name\":", hl_lost_source_hubble(fibril_source), (unsigned long long)n);
	hl_buf_jstr(b, node);
	hl_buf_str(b, ",\"time\":");
	add_pb_time(b, time_ns);
	hl_buf_add(b, "}", 1);
}
