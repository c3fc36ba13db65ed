/* modules/hubble-lite/grpc_flow.c - one hubble-lite flow as Hubble's
 * GetFlowsResponse{flow, node_name, time}, encoded with protobuf-c: the
 * verdict, Cilium's event type (drop 1, trace 4, policy verdict 5), the
 * trace observation point, the traffic direction, IP and L4 (ports, TCP
 * flags), both endpoints (ID, security identity, namespace, pod, labels),
 * their services and the drop reason both as Hubble's number and enum
 * (fibril's reason names mapped to Hubble's DropReason). */
#include "grpc.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "observer.pb-c.h"

#define MAX_LABELS 32

/* Hubble's DropReason of a dropped flow: flow_hubble.c's one mapping, the
 * same the JSON lines carry (Hubble's enum numbers are the wire values). */
static Flow__DropReason drop_reason(const struct hl_flow *f)
{
	if (f->verdict != HL_DROPPED)
		return FLOW__DROP_REASON__DROP_REASON_UNKNOWN;
	return (Flow__DropReason)hl_drop_reason_hubble(f->reason_name, f->policy.match);
}

struct ep_pb {
	Flow__Endpoint ep;
	char *labels[MAX_LABELS];
	char text[HL_LABELS_LEN];
	Flow__Service svc;
};

/* labels are "source:key=value" lines: Hubble's labels are the same text */
static Flow__Endpoint *endpoint(struct ep_pb *e, const struct hl_peer *p, Flow__Service **svc)
{
	flow__endpoint__init(&e->ep);
	e->ep.id = p->ep_id;
	e->ep.identity = p->identity;
	e->ep.namespace_ = (char *)p->ns;
	e->ep.pod_name = (char *)p->pod;
	memcpy(e->text, p->labels, sizeof(e->text));
	e->text[sizeof(e->text) - 1] = '\0';
	size_t n = 0;
	for (char *line = e->text, *nl; line && *line && n < MAX_LABELS; line = nl) {
		nl = strchr(line, '\n');
		if (nl)
			*nl++ = '\0';
		if (*line)
			e->labels[n++] = line;
	}
	e->ep.labels = e->labels;
	e->ep.n_labels = n;
	*svc = NULL;
	if (p->service.name[0]) {
		flow__service__init(&e->svc);
		e->svc.name = (char *)p->service.name;
		e->svc.namespace_ = (char *)p->service.ns;
		*svc = &e->svc;
	}
	return &e->ep;
}

/* Flow keeps Hubble's deprecated fields (drop_reason, reply, Summary):
 * protobuf-c marks them, and clang warns on their mere initialisation */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
const uint8_t *hl_flow_pb(struct hl_flow_pb *pb, const struct hl_flow *f, const char *node,
			  size_t *len)
{
	pb->heap = NULL;
	Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
	ts.seconds = (int64_t)(f->time_ns / 1000000000ULL);
	ts.nanos = (int32_t)(f->time_ns % 1000000000ULL);

	Flow__Flow fl = FLOW__FLOW__INIT;
	fl.time = &ts;
	fl.verdict = f->verdict == HL_DROPPED ? FLOW__VERDICT__DROPPED : FLOW__VERDICT__FORWARDED;
	fl.type = FLOW__FLOW_TYPE__L3_L4;
	fl.node_name = (char *)node;
	fl.traffic_direction = f->direction == 0 ? FLOW__TRAFFIC_DIRECTION__EGRESS
						 : FLOW__TRAFFIC_DIRECTION__INGRESS;
	Flow__CiliumEventType et = FLOW__CILIUM_EVENT_TYPE__INIT;
	et.type = f->type == HL_TYPE_DROP ? 1 : f->type == HL_TYPE_POLICY ? 5 : 4;
	fl.event_type = &et;
	if (f->type == HL_TYPE_TRACE)
		fl.trace_observation_point = f->direction == 0 ? FLOW__TRACE_OBSERVATION_POINT__FROM_ENDPOINT
					     : f->direction == 2 ? FLOW__TRACE_OBSERVATION_POINT__FROM_OVERLAY
								 : FLOW__TRACE_OBSERVATION_POINT__TO_ENDPOINT;
	if (f->verdict == HL_DROPPED) {
		fl.drop_reason_desc = drop_reason(f);
		/* Hubble still fills its deprecated number beside the enum */
		fl.drop_reason = (uint32_t)fl.drop_reason_desc;
		et.sub_type = (int32_t)fl.drop_reason_desc;
	}
	if (f->policy.match)
		fl.policy_match_type = f->policy.match;

	char src[INET6_ADDRSTRLEN] = "", dst[INET6_ADDRSTRLEN] = "", xl[INET6_ADDRSTRLEN] = "";
	Flow__IP ip = FLOW__IP__INIT;
	if (f->family == 4 || f->family == 6) {
		int af = f->family == 4 ? AF_INET : AF_INET6;
		inet_ntop(af, f->src.addr, src, sizeof(src));
		inet_ntop(af, f->dst.addr, dst, sizeof(dst));
		ip.source = src;
		ip.destination = dst;
		if (f->xlated) { /* the masqueraded source (source_xlated, 5) */
			inet_ntop(af, f->src_xlated, xl, sizeof(xl));
			ip.source_xlated = xl;
		}
		ip.ipversion = f->family == 4 ? FLOW__IPVERSION__IPv4 : FLOW__IPVERSION__IPv6;
		fl.ip = &ip;
	}

	Flow__Layer4 l4 = FLOW__LAYER4__INIT;
	Flow__TCP tcp = FLOW__TCP__INIT;
	Flow__TCPFlags flags = FLOW__TCPFLAGS__INIT;
	Flow__UDP udp = FLOW__UDP__INIT;
	Flow__SCTP sctp = FLOW__SCTP__INIT;
	Flow__ICMPv4 icmp4 = FLOW__ICMPV4__INIT;
	Flow__ICMPv6 icmp6 = FLOW__ICMPV6__INIT;
	switch (f->proto) {
	case 6:
		tcp.source_port = f->src.port;
		tcp.destination_port = f->dst.port;
		flags.fin = !!(f->tcp_flags & 0x01), flags.syn = !!(f->tcp_flags & 0x02);
		flags.rst = !!(f->tcp_flags & 0x04), flags.psh = !!(f->tcp_flags & 0x08);
		flags.ack = !!(f->tcp_flags & 0x10), flags.urg = !!(f->tcp_flags & 0x20);
		flags.ece = !!(f->tcp_flags & 0x40), flags.cwr = !!(f->tcp_flags & 0x80);
		tcp.flags = &flags;
		l4.protocol_case = FLOW__LAYER4__PROTOCOL_TCP;
		l4.tcp = &tcp;
		break;
	case 17:
		udp.source_port = f->src.port;
		udp.destination_port = f->dst.port;
		l4.protocol_case = FLOW__LAYER4__PROTOCOL_UDP;
		l4.udp = &udp;
		break;
	case 132:
		sctp.source_port = f->src.port;
		sctp.destination_port = f->dst.port;
		l4.protocol_case = FLOW__LAYER4__PROTOCOL_SCTP;
		l4.sctp = &sctp;
		break;
	case 1:
		l4.protocol_case = FLOW__LAYER4__PROTOCOL_ICMPV4;
		l4.icmpv4 = &icmp4;
		break;
	case 58:
		l4.protocol_case = FLOW__LAYER4__PROTOCOL_ICMPV6;
		l4.icmpv6 = &icmp6;
		break;
	}
	if (l4.protocol_case != FLOW__LAYER4__PROTOCOL__NOT_SET)
		fl.l4 = &l4;

	struct ep_pb se, de;
	fl.source = endpoint(&se, &f->src, &fl.source_service);
	fl.destination = endpoint(&de, &f->dst, &fl.destination_service);

	Observer__GetFlowsResponse r = OBSERVER__GET_FLOWS_RESPONSE__INIT;
	r.response_types_case = OBSERVER__GET_FLOWS_RESPONSE__RESPONSE_TYPES_FLOW;
	r.flow = &fl;
	r.node_name = (char *)node;
	r.time = &ts;
	size_t n = protobuf_c_message_get_packed_size(&r.base);
	uint8_t *buf = pb->stack;
	if (n > sizeof(pb->stack) && !(buf = pb->heap = malloc(n)))
		return NULL;
	*len = protobuf_c_message_pack(&r.base, buf);
	return buf;
}
#pragma GCC diagnostic pop

void hl_flow_pb_done(struct hl_flow_pb *pb)
{
	free(pb->heap);
	pb->heap = NULL;
}
