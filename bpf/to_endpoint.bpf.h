/* bpf/to_endpoint.bpf.h - fibril_to_endpoint (section tc, attached to the
 * clsact EGRESS of every endpoint's host veth: what the node's stack
 * delivers to the pod - host->pod traffic and the replies to pod->host
 * flows; pod-to-pod traffic is redirected into the peer and never passes
 * here). Included once, by fibril_dp.bpf.c.
 *
 * Per packet:
 *   1. parse Ethernet, then IPv4 / IPv6 (ARP, neighbour discovery, MLD and
 *      other L3 protocols are let through: delivered, no conntrack);
 *   2. the destination endpoint (the one behind this very veth), the
 *      source's identity: a local sender's, else the one the overlay
 *      program left in skb->mark (from the VNI), else the ipcache's (only
 *      when the pod's ingress policy, a new flow or an event needs it:
 *      LAZY_SRC, lib/identity.h); for the policy, a local sender's address
 *      that came in by another device than its veth (the network, through
 *      the stack) is dropped (DP_REASON_DROP_SPOOFED_NETWORK);
 *   3. the hook point policy_verdict() with direction to-endpoint (the
 *      ingress-to-pod enforcement point, lib/policy.h);
 *   4. conntrack: the same dp_conntrack entry as the pod's own packets of
 *      that flow (reply counters when the pod opened it);
 *   5. metrics with direction to-endpoint, drop and trace events.
 * Never drops for lack of a verdict: only the policy hook (and a malformed
 * IP header) can drop. Returns TC_ACT_OK (delivered) or TC_ACT_SHOT.
 */
#ifndef FIBRIL_BPF_TO_ENDPOINT_BPF_H
#define FIBRIL_BPF_TO_ENDPOINT_BPF_H

#include <linux/if_ether.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/conntrack.h"
#include "lib/frag.h"
#include "lib/identity.h"
#include "lib/parse.h"
#include "lib/policy.h"
#include "lib/verdict.h"

static __always_inline int delivered(struct __sk_buff *skb, struct pkt *p)
{
	metrics_count(skb, p, DP_REASON_DELIVERED);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_DELIVERED);
	return TC_ACT_OK;
}

/* Steps 2-5 of the to-endpoint program once the tuple is known. */
static __always_inline int deliver_ip(struct __sk_buff *skb, struct pkt *p)
{
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (p->dst_ep && p->dst_ep->ifindex != skb->ifindex)
		p->dst_ep = 0; /* not the endpoint behind this veth */
	p->dst_identity = p->dst_ep ? p->dst_ep->identity
				    : identity_of(p->tuple.family, p->tuple.daddr);
	/* the sender (pkt_resolve_src) only when the pod's ingress policy
	 * needs it; else when a new flow, an event or the trace does */
	if (p->dst_ep && policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS)) {
		pkt_resolve_src(skb, p);
		/* a local endpoint's address comes in by that endpoint's own
		 * veth, or from the node itself (ingress_ifindex 0): the
		 * stack forwards what the network sends with it (host-routing
		 * legacy: no fibril_from_netdev source check), and the pod's
		 * identity must not be had that way */
		if (p->src_ep && skb->ingress_ifindex && skb->ingress_ifindex != p->src_ep->ifindex)
			return drop(skb, p, DP_REASON_DROP_SPOOFED_NETWORK);
	} else {
		p->lazy |= LAZY_SRC;
	}
	/* a later fragment whose first one was not seen here (the node's
	 * stack may have sent that one another way): ports stay 0 */
	frag_resolve(p);
	/* ---- POLICY HOOK (ingress to the pod): policy_verdict(), direction
	 * DP_DIR_TO_ENDPOINT (see lib/policy.h). ---- */
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	if (conntrack(skb, p) < 0)
		return drop(skb, p, DP_REASON_DROP_CT_FULL);
	return delivered(skb, p);
}

static __always_inline int to_ep_ipv4(struct __sk_buff *skb, struct pkt *p, void *l3,
				      void *data_end)
{
	if (ipv4_parse(skb, p, l3, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	return deliver_ip(skb, p);
}

static __always_inline int to_ep_ipv6(struct __sk_buff *skb, struct pkt *p, void *l3,
				      void *data_end)
{
	if (ipv6_parse(skb, p, l3, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	/* the node's neighbour discovery and MLD towards the pod: no flow */
	if (p->is_icmp6_nd)
		return delivered(skb, p);
	return deliver_ip(skb, p);
}

/* Section "tc" as the ingress program (libbpf 1.1 knows no "tc/<name>"
 * sections): the two are told apart by name, fibril_to_endpoint. */
SEC("tc")
int fibril_to_endpoint(struct __sk_buff *skb)
{
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	p.direction = DP_DIR_TO_ENDPOINT;
	pkt_config(&p);
	/* headers in a paged fragment (rare on egress) */
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return to_ep_ipv4(skb, &p, eth + 1, data_end);
	case bpf_htons(ETH_P_IPV6):
		return to_ep_ipv6(skb, &p, eth + 1, data_end);
	default:
		/* ARP (the node resolving the pod) and anything else the
		 * stack sends: no IP tuple, let through */
		return delivered(skb, &p);
	}
}

#endif /* FIBRIL_BPF_TO_ENDPOINT_BPF_H */
