/* bpf/lib/forward.h - a hop: the TTL / hop limit (ttl_decrement()) and the
 * delivery into a local endpoint's pod (forward_local()).
 *
 * Contract:
 *   - ttl_decrement(ttl, ip4): ttl points at the TTL / hop limit byte in
 *     the bounds-checked packet (no helper that moves packet data called
 *     since) and the caller checked it is above 1; writes it minus one
 *     and, for IPv4 (ip4 set), the header checksum incrementally;
 *   - forward_local(skb, p): p->dst_ep set (the local destination), the
 *     TTL already decremented; rewrites the Ethernet header (destination:
 *     the pod's MAC, source: its host veth's) and bpf_redirect_peer()s the
 *     packet into the pod's netns; counts DP_REASON_FORWARDED (a trace
 *     event when p->trace) and returns TC_ACT_REDIRECT, or drops
 *     (DP_REASON_DROP_INVALID without an Ethernet header,
 *     DP_REASON_DROP_REDIRECT when the kernel refuses the redirect).
 */
#ifndef FIBRIL_BPF_LIB_FORWARD_H
#define FIBRIL_BPF_LIB_FORWARD_H

#include <linux/if_ether.h>
#include <linux/ip.h>

#include <bpf/bpf_endian.h>

#include "verdict.h"

/* Deliver to a local endpoint: MACs of the destination's link, then
 * straight into its netns. TTL / hop limit were decremented by the caller. */
static __always_inline int forward_local(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__builtin_memcpy(eth->h_dest, p->dst_ep->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->dst_ep->host_mac, ETH_ALEN);
	int rc = bpf_redirect_peer(p->dst_ep->ifindex, 0);
	if (rc != TC_ACT_REDIRECT)
		return drop(skb, p, DP_REASON_DROP_REDIRECT);
	metrics_count(skb, p, DP_REASON_FORWARDED);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_FORWARDED);
	return rc;
}

/* A hop: the TTL / hop limit (ttl points into the packet) minus one; IPv4
 * (ip4 set) as the kernel's ip_decrease_ttl(): incremental checksum. */
static __always_inline void ttl_decrement(__u8 *ttl, struct iphdr *ip4)
{
	if (ip4) {
		__u32 check = ip4->check;
		check += bpf_htons(0x0100);
		ip4->check = (__u16)(check + (check >= 0xFFFF));
	}
	*ttl -= 1;
}

#endif /* FIBRIL_BPF_LIB_FORWARD_H */
