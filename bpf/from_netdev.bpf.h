/* bpf/from_netdev.bpf.h - fibril_from_netdev, host-routing = bpf, the
 * receiving half (native mode): section tc, attached to the clsact INGRESS
 * of the node's underlay devices (those with an address) when [datapath]
 * host-routing = bpf. Included once, by fibril_dp.bpf.c.
 *
 * In tunnel mode the node's own VXLAN traffic (UDP to dp_config's
 * tunnel_port) goes to the stack first of all, unchecked
 * (netdev_own_tunnel4() says why that is safe).
 *
 * Then the source (every IP packet addressed to this node, PACKET_HOST):
 * what comes from the network never carries this node's own address (the
 * ipcache's identity host: its IPs, the gateways) nor a local endpoint's
 * (dp_endpoints); such a packet is dropped (DP_REASON_DROP_SPOOFED_NETWORK,
 * counted, a drop event), before anything takes an identity from it: the
 * redirect below skips the stack and its rp_filter. What remains is a
 * remote node, another node's pod or the world.
 *
 * A packet for a local endpoint is then checked against that endpoint's
 * ingress policy with the source's identity from the ipcache (as
 * fibril_to_endpoint would), counted in conntrack, its TTL decremented and
 * redirected straight into the pod (bpf_redirect_peer: the node's stack
 * and the veth's egress are skipped); everything else (the node's own
 * traffic, ARP, ND / MLD that stays on the link, a TTL of 1) goes on to the
 * stack untouched and uncounted. What goes on through the stack (with
 * host-routing legacy too) from another node's pod (the ipcache says)
 * gets the mark DP_MARK_MAGIC_LINK_SOURCE with its source MAC's low 24
 * bits (only on an egress gateway: DP_CFG_F_EGW_GATEWAY; elsewhere nothing
 * reads it and the source's ipcache walk is saved): fibril_to_netdev SNATs
 * such a packet to an egress gateway's IP
 * only when they are the FIB's next hop toward that pod's node
 * (lib/egressgw.h). With host-routing off (the flag cleared
 * in dp_config) it passes everything but the replies of masqueraded flows.
 *
 * Masquerading ([datapath] masquerade, DP_CFG_F_MASQUERADE; the program is
 * attached then even with host-routing legacy): first of all, a reply of a
 * flow fibril_to_netdev masqueraded (dp_nat's IN entry, lib/nat.h; its
 * later fragments by the ports the first left in dp_frags_out; an ICMP
 * error about it by its inner packet) has its destination address and
 * port restored to the pod's (counted
 * DP_REASON_REV_NAT); with host-routing = bpf it then goes the way above
 * (source check, the pod's ingress policy, conntrack, the redirect), else
 * to the stack (TC_ACT_OK), which routes it into the pod's veth, where
 * fibril_to_endpoint checks policy and conntrack.
 *
 * The device's ingress is shared (the tc order contract, bpf/README.md):
 * this filter is at priority 1 (DP_TC_PRIORITY, modules/datapath), lb's
 * NodePort program after it at priority 2, so the source check and the
 * pods' redirect come first whichever module attached first. Passing is
 * TC_ACT_UNSPEC, never TC_ACT_OK: the next filter still runs. Returns
 * TC_ACT_UNSPEC, a redirect into the pod or TC_ACT_SHOT (the source check,
 * the policy).
 */
#ifndef FIBRIL_BPF_FROM_NETDEV_BPF_H
#define FIBRIL_BPF_FROM_NETDEV_BPF_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/conntrack.h"
#include "lib/egressgw.h"
#include "lib/forward.h"
#include "lib/frag.h"
#include "lib/identity.h"
#include "lib/nat.h"
#include "lib/parse.h"
#include "lib/policy.h"

/* From the network: not this node's address, not a local endpoint's.
 * Leaves the source's identity in p->src_identity; 0 or a drop. */
static __always_inline int netdev_source_check(struct __sk_buff *skb, struct pkt *p)
{
	if (endpoint_of(p->tuple.family, p->tuple.saddr))
		return drop(skb, p, DP_REASON_DROP_SPOOFED_NETWORK);
	p->src_identity = identity_of(p->tuple.family, p->tuple.saddr);
	if (p->src_identity == DP_IDENTITY_HOST)
		return drop(skb, p, DP_REASON_DROP_SPOOFED_NETWORK);
	return 0;
}

/* The node's own VXLAN traffic (tunnel mode: UDP to p->tun_port, whatever
 * the destination address) goes to the stack before any check: the stack
 * decapsulates it and fibril_from_overlay believes only known nodes' outer
 * sources; a spoofed source the stack forwards to a pod instead meets the
 * kernel's martian check (this node's addresses) or fibril_to_endpoint's
 * (a local endpoint's: not from its veth). No masqueraded flow holds the
 * port (dp_config has it 0 then). This reads IPv4 in place before the
 * parse: an unfragmented UDP packet without options; the rest (IPv6,
 * options) is caught after the parse. */
static __always_inline int netdev_own_tunnel4(const struct pkt *p, struct ethhdr *eth,
					      void *data_end)
{
	if (!p->tun_port || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end || ip->version != 4 || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(0x3fff) /* MF, offset */))
		return 0;
	return udp->dest == p->tun_port;
}

/* A packet for a local endpoint (p->dst_ep set). */
static __always_inline int netdev_ip(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				     struct iphdr *ip4)
{
	if (*ttl <= 1)
		return TC_ACT_UNSPEC;
	p->dst_identity = p->dst_ep->identity;
	frag_resolve(p);
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	if (conntrack(skb, p) < 0)
		return drop(skb, p, DP_REASON_DROP_CT_FULL);
	ttl_decrement(ttl, ip4);
	return forward_local(skb, p);
}

SEC("tc")
int fibril_from_netdev(struct __sk_buff *skb)
{
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	p.direction = DP_DIR_FROM_NETDEV;
	pkt_config(&p);
	if ((!p.host_routing && !p.masquerade) || skb->pkt_type != 0 /* PACKET_HOST */)
		return TC_ACT_UNSPEC;
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return TC_ACT_UNSPEC;
	if (netdev_own_tunnel4(&p, eth, data_end))
		return TC_ACT_UNSPEC;
	/* one path after the parse for both families: each stage below is
	 * inlined once (the verifier walks it once) */
	__u8 *ttl;
	struct iphdr *ip4 = 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if (ipv4_parse(skb, &p, ip, data_end) < 0)
			return TC_ACT_UNSPEC;
		ttl = &ip->ttl;
		ip4 = ip;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (ipv6_parse(skb, &p, ip6, data_end) < 0)
			return TC_ACT_UNSPEC;
		ttl = &ip6->hop_limit;
	} else {
		return TC_ACT_UNSPEC;
	}
	/* the rest of the node's own VXLAN traffic (IPv6, IP options) */
	if (p.tun_port && p.tuple.dport == p.tun_port && p.tuple.proto == IPPROTO_UDP &&
	    p.frag == FRAG_NONE)
		return TC_ACT_UNSPEC;
	/* a reply of a masqueraded flow: its destination back to the pod's,
	 * then delivered as any packet for the pod (the stack and
	 * fibril_to_endpoint, or the redirect below: policy and conntrack) */
	__u32 zero = 0;
	const struct dp_config *cfg = p.masquerade ? bpf_map_lookup_elem(&dp_config, &zero) : 0;
	if (cfg) {
		/* fragments: the first records its ports (dp_frags_out, as the
		 * addresses came), the later ones take them */
		frag_resolve(&p);
		int t = nat_rev(skb, &p, cfg);
		/* a subprogram (its own stack frame: this one has no room
		 * left); a call may change the packet, so it leaves every
		 * packet pointer invalid */
		if (t == 0 && nat_is_icmp(p.tuple.proto))
			t = nat_rev_icmp_error(skb, &p);
		if (t < 0)
			return drop(skb, &p, DP_REASON_DROP_INVALID);
		if (t > 0) {
			metrics_count(skb, &p, DP_REASON_REV_NAT);
			if (!p.host_routing)
				return TC_ACT_OK;
		}
		/* the rewrite (or the call) invalidated the packet pointers:
		 * taken again, whatever happened (the verifier cannot tell) */
		void *data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (p.tuple.family == DP_FAMILY_IPV4) {
			struct iphdr *ip = data + ETH_HLEN;
			if ((void *)(ip + 1) > data_end)
				return TC_ACT_OK;
			ttl = &ip->ttl;
			ip4 = ip;
		} else {
			struct ipv6hdr *ip6 = data + ETH_HLEN;
			if ((void *)(ip6 + 1) > data_end)
				return TC_ACT_OK;
			ttl = &ip6->hop_limit;
			ip4 = 0;
		}
	}
	if (p.host_routing) {
		if (netdev_source_check(skb, &p))
			return TC_ACT_SHOT;
		if (p.is_icmp6_nd)
			return TC_ACT_UNSPEC; /* ND / MLD on the link: the stack's */
		p.dst_ep = endpoint_of(p.tuple.family, p.tuple.daddr);
		if (p.dst_ep)
			return netdev_ip(skb, &p, ttl, ip4);
	}
	/* on its way through the stack: an egress gateway relays another
	 * node's pod's flow only if that pod's node sent it (lib/egressgw.h:
	 * the source MAC in the mark, to_netdev checks it) */
	egw_relay_from_link(skb, &p);
	return TC_ACT_UNSPEC;
}

#endif /* FIBRIL_BPF_FROM_NETDEV_BPF_H */
