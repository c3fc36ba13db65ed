/* bpf/from_overlay.bpf.h - fibril_from_overlay (section tc, attached in
 * tunnel mode to the VXLAN device's clsact INGRESS: what another node sent
 * through the tunnel, after the kernel took the outer headers off).
 * Included once, by fibril_dp.bpf.c.
 *
 * The tunnel key (bpf_skb_get_tunnel_key) holds the outer source and the
 * VNI, which the sending node's program set to the sender's security
 * identity. The VNI is believed only from a known node: the outer source
 * must have the ipcache's identity remote-node (the nodes module writes
 * every node's IP so), else the packet is dropped
 * (DP_REASON_DROP_TUNNEL_SOURCE) whatever it carries: anyone who can
 * reach UDP 8472 could otherwise claim any identity. That identity goes
 * into skb->mark (DP_MARK_*) for the rest of this node; a destination that
 * is a local endpoint is checked against its ingress policy with that
 * identity (never with the ipcache's answer for the source IP), counted in
 * conntrack and redirected straight into the pod; anything else goes to
 * the stack (as for this host, its type set to PACKET_HOST: the inner
 * frame's MAC is not the VXLAN device's); when the ipcache names the
 * outer source as the node of the inner IPv4 source, the mark says so
 * (DP_MARK_MAGIC_FROM_NODE: an egress gateway SNATs only such packets of
 * another node's pod, lib/egressgw.h). Returns a redirect into the pod,
 * TC_ACT_OK (to the stack) or TC_ACT_SHOT (no tunnel key, an unknown
 * sender, malformed, the policy).
 */
#ifndef FIBRIL_BPF_FROM_OVERLAY_BPF_H
#define FIBRIL_BPF_FROM_OVERLAY_BPF_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/conntrack.h"
#include "lib/egressgw.h"
#include "lib/forward.h"
#include "lib/frag.h"
#include "lib/identity.h"
#include "lib/parse.h"
#include "lib/policy.h"
#include "lib/verdict.h"

static __always_inline int overlay_to_stack(struct __sk_buff *skb, struct pkt *p)
{
	bpf_skb_change_type(skb, 0 /* PACKET_HOST */);
	return to_stack(skb, p);
}

static __always_inline int overlay_ip(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				      struct iphdr *ip4, __u8 outer_family, const __u8 *outer)
{
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (!p->dst_ep) {
		/* an egress gateway relays it only if its source's own node
		 * sent it (lib/egressgw.h) */
		egw_relay_from_tunnel(skb, p, outer_family, outer);
		return overlay_to_stack(skb, p);
	}
	p->dst_identity = p->dst_ep->identity;
	frag_resolve(p);
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	if (conntrack(skb, p) < 0)
		return drop(skb, p, DP_REASON_DROP_CT_FULL);
	if (*ttl <= 1)
		return overlay_to_stack(skb, p);
	ttl_decrement(ttl, ip4);
	return forward_local(skb, p);
}

/* A frame from an outer source that is no known node: dropped, the
 * event naming the outer source and the VNI it claimed (as the source
 * identity; the inner packet is not parsed). */
static __always_inline int tunnel_source_drop(struct __sk_buff *skb, struct pkt *p, __u8 family,
					      const __u8 *outer, __u32 vni)
{
	p->tuple.family = family;
	__builtin_memcpy(p->tuple.saddr, outer, 16);
	p->src_identity = vni & DP_VNI_MAX;
	return drop(skb, p, DP_REASON_DROP_TUNNEL_SOURCE);
}

SEC("tc")
int fibril_from_overlay(struct __sk_buff *skb)
{
	struct pkt p;
	struct bpf_tunnel_key key;

	__builtin_memset(&p, 0, sizeof(p));
	__builtin_memset(&key, 0, sizeof(key));
	p.direction = DP_DIR_FROM_OVERLAY;
	pkt_config(&p);
	__u8 outer[16];
	__u8 outer_family = DP_FAMILY_IPV4;
	__builtin_memset(outer, 0, sizeof(outer));
	if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0) == 0) {
		__u32 a = bpf_htonl(key.remote_ipv4);
		__builtin_memcpy(outer, &a, 4);
	} else if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), BPF_F_TUNINFO_IPV6) == 0) {
		outer_family = DP_FAMILY_IPV6;
		__builtin_memcpy(outer, key.remote_ipv6, 16);
	} else {
		return drop(skb, &p, DP_REASON_DROP_NO_TUNNEL_KEY);
	}
	/* only a known node's VNI is an identity */
	if (identity_of(outer_family, outer) != DP_IDENTITY_REMOTE_NODE)
		return tunnel_source_drop(skb, &p, outer_family, outer, key.tunnel_id);
	p.src_identity = key.tunnel_id & DP_VNI_MAX;
	skb->mark = (p.src_identity << DP_MARK_IDENTITY_SHIFT) | DP_MARK_MAGIC_IDENTITY;

	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if (ipv4_parse(skb, &p, ip, data_end) < 0)
			return drop(skb, &p, DP_REASON_DROP_INVALID);
		return overlay_ip(skb, &p, &ip->ttl, ip, outer_family, outer);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (ipv6_parse(skb, &p, ip6, data_end) < 0)
			return drop(skb, &p, DP_REASON_DROP_INVALID);
		if (p.is_icmp6_nd)
			return overlay_to_stack(skb, &p);
		return overlay_ip(skb, &p, &ip6->hop_limit, 0, outer_family, outer);
	}
	return overlay_to_stack(skb, &p);
}

#endif /* FIBRIL_BPF_FROM_OVERLAY_BPF_H */
