/* bpf/lib/fib.h - host-routing = bpf, the sending half: forward_fib()
 * sends a packet for another node's pod out of the underlay device the
 * kernel's FIB names, toward its next hop, without the node's stack.
 *
 * Contract of forward_fib(skb, p, ttl, ip4, in_cluster): p->tuple final;
 * in_cluster: the destination's ipcache entry is inside the cluster
 * (ipcache_in_cluster: then the packet is marked DP_MARK_MAGIC_FORWARDED
 * for fibril_to_netdev); ttl and ip4
 * as ttl_decrement() (forward.h) takes them, not yet decremented. Reads
 * p->tuple, skb->ifindex, skb->len, skb->gso_size and the IPv4 TOS, and
 * asks bpf_fib_lookup(). Returns -1, having written nothing, when the FIB does
 * not forward it out of another device (the caller goes on to the stack's
 * way); else decrements the TTL, writes the MACs and bpf_redirect()s
 * (resolved neighbour) or lets bpf_redirect_neigh() resolve them, counts
 * DP_REASON_TO_FIB (a trace event when p->trace) and returns
 * TC_ACT_REDIRECT, or drops (DP_REASON_DROP_INVALID,
 * DP_REASON_DROP_REDIRECT).
 */
#ifndef FIBRIL_BPF_LIB_FIB_H
#define FIBRIL_BPF_LIB_FIB_H

#include <linux/if_ether.h>
#include <linux/ip.h>

#include "forward.h"

/* host-routing = bpf (Cilium's BPF host routing): a packet for another
 * node's pod leaves by the FIB's answer, out of the underlay device toward
 * the next hop, without the node's stack (routing, netfilter) after the
 * program. Resolved neighbour: the MACs are written here and bpf_redirect;
 * unresolved: bpf_redirect_neigh resolves it. Anything the FIB does not
 * forward (local, blackhole, needs fragmenting...) goes to the stack, which
 * answers it as before. Returns -1 for "to the stack", else the verdict;
 * the TTL is decremented only when the packet is redirected. */
static __always_inline int forward_fib(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				       struct iphdr *ip4, int in_cluster)
{
	struct bpf_fib_lookup fib;

	__builtin_memset(&fib, 0, sizeof(fib));
	fib.ifindex = skb->ifindex;
	fib.l4_protocol = p->tuple.proto;
	/* tot_len is the L3 length the kernel compares with the route's MTU
	 * (a non-zero one asks for that check): skb->len less the Ethernet
	 * header. A GSO packet's length is its segments' together, so it
	 * leaves tot_len 0: the kernel then checks the device as the stack's
	 * forwarding does (is_skb_forwardable(): a GSO packet is segmented on
	 * the way out), else every TSO packet would fail the MTU check and
	 * take the slow way */
	fib.tot_len = skb->gso_size ? 0 : (__u16)(skb->len - ETH_HLEN);
	if (p->tuple.family == DP_FAMILY_IPV4) {
		fib.family = 2; /* AF_INET */
		__builtin_memcpy(&fib.ipv4_src, p->tuple.saddr, 4);
		__builtin_memcpy(&fib.ipv4_dst, p->tuple.daddr, 4);
		if (ip4)
			fib.tos = ip4->tos;
	} else {
		fib.family = 10; /* AF_INET6 */
		__builtin_memcpy(fib.ipv6_src, p->tuple.saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, p->tuple.daddr, 16);
	}
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -1;
	if (fib.ifindex == skb->ifindex)
		return -1;
	ttl_decrement(ttl, ip4);
	/* inside the cluster fibril_to_netdev has nothing to do with it: it
	 * passes it at once; anything else the FIB sends out (a CIDR
	 * identity's destination) is still to-netdev's to masquerade */
	if (in_cluster)
		skb->mark = DP_MARK_MAGIC_FORWARDED;
	long out;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		void *data = (void *)(long)skb->data;
		void *data_end = (void *)(long)skb->data_end;
		struct ethhdr *eth = data;
		if ((void *)(eth + 1) > data_end)
			return drop(skb, p, DP_REASON_DROP_INVALID);
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		out = bpf_redirect(fib.ifindex, 0);
	} else {
		struct bpf_redir_neigh nh;
		__builtin_memset(&nh, 0, sizeof(nh));
		if (fib.family == 2) {
			nh.nh_family = 2;
			nh.ipv4_nh = fib.ipv4_dst; /* the FIB's next hop */
		} else {
			nh.nh_family = 10;
			__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		}
		out = bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	if (out != TC_ACT_REDIRECT)
		return drop(skb, p, DP_REASON_DROP_REDIRECT);
	metrics_count(skb, p, DP_REASON_TO_FIB);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_TO_FIB);
	return (int)out;
}

#endif /* FIBRIL_BPF_LIB_FIB_H */
