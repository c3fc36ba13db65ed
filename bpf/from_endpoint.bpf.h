/* bpf/from_endpoint.bpf.h - fibril_from_endpoint (section tc, attached to
 * the clsact INGRESS of every endpoint's host veth: what the pod sends) and
 * the steps only it takes: the per-family source checks, ARP, route_ip().
 * Included once, by fibril_dp.bpf.c.
 *
 * Per packet:
 *   0. headers in a paged fragment are pulled into the linear part first
 *      (bpf_skb_pull_data), as in fibril_to_endpoint (lib/parse.h);
 *   1. parse Ethernet, then ARP, IPv4 or IPv6 (anything else: dropped); the
 *      IPv6 extension header chain (hop-by-hop, routing, destination
 *      options, fragment, AH; at most DP_IPV6_MAX_EXTHDRS) is walked to the
 *      L4 header, read with bpf_skb_load_bytes (paged data too); later
 *      fragments take their ports from dp_frags, filled by the first
 *      (lib/parse.h, lib/frag.h);
 *   2. ARP: the sender IP must be the endpoint's (or 0.0.0.0) and the
 *      sender MAC and the Ethernet source the endpoint's MAC, then it goes
 *      to the stack, which answers for the gateway (a local address);
 *   3. IP: the source must be an address of the endpoint behind this veth
 *      (IPv6 link-local/unspecified sources may only send neighbour
 *      discovery and MLD, to the stack); a neighbour solicitation for the
 *      IPv6 gateway is answered here (nd_answer, lib/nd.h); ND / MLD is
 *      only what stays on the link (hop limit 255 / 1, a link-local or
 *      multicast destination: lib/parse.h), any other ICMPv6 of those
 *      types goes through policy like the rest;
 *   4. policy_verdict() (lib/policy.h: the sender's egress policy and, for
 *      a local destination, that pod's ingress policy; replies pass);
 *      services are not translated here: the lb module's own programs do
 *      it at the socket and on the external devices (bpf/fibril_lb.bpf.c);
 *   5. conntrack (lib/conntrack.h: dp_conntrack for TCP, dp_ct_any for the
 *      rest, looked up once, ct_lookup(), and the policy's reply check
 *      shares it) and the destination's identity (dp_ipcache: in tunnel
 *      mode, with host-routing = bpf or with an egress policy; otherwise
 *      only when an event or a new flow needs it, see pkt_resolve() in
 *      lib/identity.h - the established flow's fast path skips it);
 *   6. a local endpoint destination: MACs rewritten, TTL / hop limit
 *      decremented and bpf_redirect_peer() into that pod (lib/forward.h);
 *      in tunnel mode a destination whose ipcache entry names a tunnel
 *      endpoint (another node's pod CIDR): TTL decremented,
 *      bpf_skb_set_tunnel_key (the node, VNI = the sender's identity) and
 *      bpf_redirect() into the VXLAN device (lib/encap.h); with
 *      host-routing = bpf, another node's pod by the FIB's answer
 *      (lib/fib.h); a flow an egress gateway policy selects (dp_egress)
 *      to a destination outside the cluster goes to its gateway node
 *      unchanged, by VXLAN or the FIB's way (lib/egressgw.h); anything
 *      else goes to the stack (the host, native routes, the world);
 *   7. metrics per (reason, direction), drop events (rate-limited by a
 *      per-CPU token bucket, dp_evlimit; what it holds back is counted) and
 *      trace events when dp_config says so, to the dp_events ring buffer
 *      (lib/metrics.h, lib/events.h, lib/verdict.h).
 * Returns TC_ACT_SHOT (dropped), TC_ACT_OK (to the stack) or a redirect
 * (into a pod, the VXLAN device or an underlay device; an ND answer back
 * to the pod).
 */
#ifndef FIBRIL_BPF_FROM_ENDPOINT_BPF_H
#define FIBRIL_BPF_FROM_ENDPOINT_BPF_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/conntrack.h"
#include "lib/egressgw.h"
#include "lib/encap.h"
#include "lib/fib.h"
#include "lib/forward.h"
#include "lib/frag.h"
#include "lib/identity.h"
#include "lib/nd.h"
#include "lib/parse.h"
#include "lib/policy.h"
#include "lib/verdict.h"

/* Steps 4-6 once the tuple is known and the source checked. ttl points at
 * the TTL / hop limit byte (inside the packet, bounds-checked). */
static __always_inline int route_ip(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				    struct iphdr *ip4)
{
	if (frag_resolve_sent(p) < 0)
		return drop(skb, p, DP_REASON_DROP_FRAG_NOT_FOUND);
	/* a local destination carries its identity; only others need the
	 * ipcache's longest-prefix walk (which also says which node hosts it) */
	const struct dp_ipcache_value *dst_ic = 0;
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (p->dst_ep) {
		p->dst_identity = p->dst_ep->identity;
	} else if (p->tun_ifindex || p->host_routing || p->masquerade ||
		   policy_enforced(p->src_ep->ep_id, DP_POLICY_EGRESS)) {
		dst_ic = ipcache_of(p->tuple.family, p->tuple.daddr);
		p->dst_identity = dst_ic ? dst_ic->identity : DP_IDENTITY_WORLD;
	} else {
		/* native mode, no egress policy: the stack routes it and
		 * nothing asks who the destination is (an event would) */
		p->lazy |= LAZY_DST_ID;
	}
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	if (conntrack(skb, p) < 0)
		return drop(skb, p, DP_REASON_DROP_CT_FULL);

	/* tunnel mode: a prefix another node hosts goes into the tunnel */
	__u32 tun = 0;
	if (!p->dst_ep && dst_ic && (dst_ic->flags & DP_IPCACHE_F_TUNNEL))
		tun = p->tun_ifindex;
	/* an egress gateway policy's flow to the world: to its gateway node
	 * (tunnel mode: the tunnel below, toward the gateway) */
	struct dp_ipcache_value egw_tv;
	if (!p->dst_ep && !tun) {
		int egw = egw_from_endpoint(skb, p, ttl, ip4, &egw_tv);
		if (egw == EGW_TUNNEL) {
			dst_ic = &egw_tv;
			tun = p->tun_ifindex;
		} else if (egw >= 0) {
			return egw;
		}
	}
	/* host-routing = bpf: another node's pod (the ipcache knows it, not
	 * world nor this node) leaves by the FIB's answer */
	if (!p->dst_ep && !tun && p->host_routing && *ttl > 1 && dst_ic &&
	    dst_ic->identity > DP_IDENTITY_WORLD) {
		int verdict = forward_fib(skb, p, ttl, ip4, ipcache_in_cluster(dst_ic));
		if (verdict >= 0)
			return verdict;
	}
	/* not local nor tunnelled, or expiring here: the stack routes it (and
	 * sends ICMP). Masquerading on: one for another node (its pods, its
	 * IP) is marked, as forward_fib does, so fibril_to_netdev passes it
	 * at once (it would walk dp_egress and the ipcache to find nothing
	 * to do); that walk is why this hook takes the ipcache's answer then */
	if ((!p->dst_ep && !tun) || *ttl <= 1) {
		if (!p->dst_ep && ipcache_in_cluster(dst_ic) && dst_ic->identity != DP_IDENTITY_HOST &&
		    p->masquerade)
			skb->mark = DP_MARK_MAGIC_FORWARDED;
		return to_stack(skb, p);
	}
	ttl_decrement(ttl, ip4);
	if (!p->dst_ep)
		return forward_tunnel(skb, p, dst_ic, tun);
	return forward_local(skb, p);
}

/* ---- per family ------------------------------------------------------------------- */

static __always_inline int handle_ipv4(struct __sk_buff *skb, struct pkt *p, void *l3,
				       void *data_end)
{
	struct iphdr *ip = l3;

	if (ipv4_parse(skb, p, ip, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	p->src_ep = endpoint_of(DP_FAMILY_IPV4, p->tuple.saddr);
	if (!p->src_ep || p->src_ep->ifindex != skb->ifindex) {
		p->src_ep = 0; /* not this veth's endpoint */
		return drop(skb, p, DP_REASON_DROP_SPOOFED_IP);
	}
	return route_ip(skb, p, &ip->ttl, ip);
}

static __always_inline int handle_ipv6(struct __sk_buff *skb, struct pkt *p, void *l3,
				       void *data_end)
{
	struct ipv6hdr *ip6 = l3;

	if (ipv6_parse(skb, p, ip6, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	/* a solicitation of the gateway, its message in the linear part (they
	 * carry no extension headers; one that does is no solicitation we
	 * answer) */
	struct nd_msg6 *nd = 0;
	if (p->is_icmp6_nd && p->icmp_type == ICMP6_NS &&
	    p->l4_off == ETH_HLEN + sizeof(struct ipv6hdr)) {
		struct nd_msg6 *m = (void *)(ip6 + 1);
		if ((void *)(m + 1) <= data_end)
			nd = m;
	}
	p->src_ep = endpoint_of(DP_FAMILY_IPV6, p->tuple.saddr);
	if (!p->src_ep || p->src_ep->ifindex != skb->ifindex) {
		p->src_ep = 0;
		/* the pod's link-local (or, during DAD, ::) address finds its
		 * neighbours: only neighbour discovery and MLD, only to the stack */
		if (p->is_icmp6_nd && addr6_is_linklocal_or_unspec(p->tuple.saddr))
			return to_stack(skb, p);
		return drop(skb, p, DP_REASON_DROP_SPOOFED_IP);
	}
	if (nd && identity_of(DP_FAMILY_IPV6, nd->target) == DP_IDENTITY_HOST)
		return nd_answer(skb, p, nd->target);
	/* neighbour discovery and MLD that stay on the link (parse.h): the
	 * stack's; any other ICMPv6 of those types is policy's like the rest */
	if (p->is_icmp6_nd)
		return to_stack(skb, p);
	/* the pod's unicast probe of its gateway (addressed to its target) */
	if (p->tuple.proto == IPPROTO_ICMPV6 && p->icmp_type == ICMP6_NS) {
		nd = nd_gateway_solicitation(p, ip6, data_end);
		if (nd && identity_of(DP_FAMILY_IPV6, nd->target) == DP_IDENTITY_HOST)
			return nd_answer(skb, p, nd->target);
	}
	return route_ip(skb, p, &ip6->hop_limit, 0);
}

/* Ethernet/IPv4 ARP (<linux/if_arp.h> drags in libc headers, so the
 * layout is spelled out here). */
struct arp_eth_ipv4 {
	__be16 hrd; /* 1: Ethernet */
	__be16 pro; /* ETH_P_IP */
	__u8 hln;   /* 6 */
	__u8 pln;   /* 4 */
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

#define ARP_HRD_ETHER 1

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] &&
	       a[5] == b[5];
}

/* ARP from the pod: its sender IP must be the endpoint's (0.0.0.0: a probe),
 * and then the sender MAC and the frame's Ethernet source the endpoint's
 * MAC (as Cilium's arp_validate), so a pod cannot poison the node's
 * neighbour entry of its own address with another MAC. */
static __always_inline int handle_arp(struct __sk_buff *skb, struct pkt *p, void *l3,
				      void *data_end)
{
	struct arp_eth_ipv4 *arp = l3;

	if ((void *)(arp + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	if (arp->hrd != bpf_htons(ARP_HRD_ETHER) || arp->pro != bpf_htons(ETH_P_IP) ||
	    arp->hln != ETH_ALEN || arp->pln != 4)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__u32 spa;
	__builtin_memcpy(&spa, arp->spa, 4);
	__builtin_memcpy(p->tuple.saddr, arp->spa, 4);
	__builtin_memcpy(p->tuple.daddr, arp->tpa, 4);
	if (spa != 0) {
		p->src_ep = endpoint_of(DP_FAMILY_IPV4, p->tuple.saddr);
		if (!p->src_ep || p->src_ep->ifindex != skb->ifindex) {
			p->src_ep = 0;
			return drop(skb, p, DP_REASON_DROP_SPOOFED_ARP);
		}
		const struct ethhdr *eth = (const void *)(long)skb->data;
		if ((void *)(eth + 1) > data_end)
			return drop(skb, p, DP_REASON_DROP_INVALID);
		if (!mac_eq(arp->sha, p->src_ep->mac) || !mac_eq(eth->h_source, p->src_ep->mac))
			return drop(skb, p, DP_REASON_DROP_SPOOFED_MAC);
	}
	return to_stack(skb, p);
}

SEC("tc")
int fibril_from_endpoint(struct __sk_buff *skb)
{
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	pkt_config(&p);
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return handle_ipv4(skb, &p, eth + 1, data_end);
	case bpf_htons(ETH_P_IPV6):
		return handle_ipv6(skb, &p, eth + 1, data_end);
	case bpf_htons(ETH_P_ARP):
		return handle_arp(skb, &p, eth + 1, data_end);
	default:
		return drop(skb, &p, DP_REASON_DROP_UNSUPPORTED_L3);
	}
}

#endif /* FIBRIL_BPF_FROM_ENDPOINT_BPF_H */
