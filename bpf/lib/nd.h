/* bpf/lib/nd.h - IPv6 neighbour discovery for the gateway: nd_answer()
 * turns a pod's neighbour solicitation into the advertisement.
 *
 * The kernel answers a neighbour solicitation only for addresses on the
 * receiving device, and the gateway lives on the host device: so the
 * program answers a pod's solicitation for a host address (identity host
 * in the ipcache) itself, with the host veth's MAC, as Cilium does.
 *
 * Contract:
 *   - nd_answer(skb, p, target): the caller checked the sender (p->src_ep
 *     set, p->tuple.saddr the soliciting address) and that target is a
 *     host address; target may point into the packet (it is copied before
 *     the packet changes). Rewrites the whole frame (bpf_skb_change_tail:
 *     every packet pointer the caller holds is invalid after) into one
 *     neighbour advertisement (router, solicited, override; the host veth's
 *     MAC as source and target link-layer address) with its ICMPv6
 *     checksum; counts DP_REASON_ND_ANSWERED (a trace event when p->trace)
 *     and returns bpf_redirect() back out of the veth it came in on (to
 *     the pod), or drops (DP_REASON_DROP_INVALID);
 *   - nd_gateway_solicitation(p, ip6, data_end): the neighbour solicitation
 *     for a host address that nd_answer() may answer: ICMPv6 type 135,
 *     not fragmented, no extension headers, hop limit 255, to a link-local
 *     or multicast address (parse.h's is_icmp6_nd) or to its target itself
 *     (the pod's unicast probe of its gateway); returns the message in the
 *     packet or NULL. The caller still checks that the target is a host
 *     address. (addr6_is_linklocal_or_unspec() is parse.h's.)
 */
#ifndef FIBRIL_BPF_LIB_ND_H
#define FIBRIL_BPF_LIB_ND_H

#include <linux/icmpv6.h>
#include <linux/if_ether.h>
#include <linux/in6.h>
#include <linux/ipv6.h>

#include <bpf/bpf_endian.h>

#include "verdict.h"

#define ICMP6_NS 135
#define ICMP6_NA 136
#define ND_OPT_TARGET_LL 2

struct nd_msg6 {
	struct icmp6hdr hdr; /* for NA: flags in icmp6_dataun */
	__u8 target[16];
};

struct na_packet {
	struct ethhdr eth;
	struct ipv6hdr ip6;
	struct nd_msg6 nd;
	__u8 opt_type;
	__u8 opt_len; /* in units of 8 bytes */
	__u8 opt_mac[ETH_ALEN];
} __attribute__((packed));

static __always_inline struct nd_msg6 *nd_gateway_solicitation(const struct pkt *p,
								struct ipv6hdr *ip6, void *data_end)
{
	if (p->tuple.proto != IPPROTO_ICMPV6 || p->icmp_type != ICMP6_NS ||
	    p->frag != FRAG_NONE || ip6->hop_limit != 255 ||
	    p->l4_off != ETH_HLEN + sizeof(struct ipv6hdr))
		return 0;
	struct nd_msg6 *m = (void *)(ip6 + 1);
	if ((void *)(m + 1) > data_end)
		return 0;
	if (p->is_icmp6_nd)
		return m;
	__u64 d[2], t[2];
	__builtin_memcpy(d, p->tuple.daddr, 16);
	__builtin_memcpy(t, m->target, 16);
	return d[0] == t[0] && d[1] == t[1] ? m : 0;
}

static __always_inline __u16 csum_fold32(__s64 sum)
{
	__u64 s = (__u64)sum;
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Turn the solicitation into the advertisement and send it back out of
 * the veth it came in on. */
static __always_inline int nd_answer(struct __sk_buff *skb, struct pkt *p, const __u8 *target)
{
	__u8 pod_mac[ETH_ALEN], tgt[16];
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__builtin_memcpy(pod_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(tgt, target, 16);
	/* exactly one NA with one target link-layer option */
	if (bpf_skb_change_tail(skb, sizeof(struct na_packet), 0) != 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	struct na_packet *na = data;
	if ((void *)(na + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__builtin_memcpy(na->eth.h_dest, pod_mac, ETH_ALEN);
	__builtin_memcpy(na->eth.h_source, p->src_ep->host_mac, ETH_ALEN);
	na->eth.h_proto = bpf_htons(ETH_P_IPV6);
	na->ip6.version = 6;
	na->ip6.priority = 0;
	na->ip6.flow_lbl[0] = 0;
	na->ip6.flow_lbl[1] = 0;
	na->ip6.flow_lbl[2] = 0;
	na->ip6.payload_len = bpf_htons(sizeof(struct nd_msg6) + 8);
	na->ip6.nexthdr = IPPROTO_ICMPV6;
	na->ip6.hop_limit = 255;
	__builtin_memcpy(&na->ip6.daddr, p->tuple.saddr, 16);
	__builtin_memcpy(&na->ip6.saddr, tgt, 16);
	na->nd.hdr.icmp6_type = ICMP6_NA;
	na->nd.hdr.icmp6_code = 0;
	na->nd.hdr.icmp6_cksum = 0;
	/* router, solicited, override */
	na->nd.hdr.icmp6_dataun.un_data32[0] = bpf_htonl(0xe0000000);
	__builtin_memcpy(na->nd.target, tgt, 16);
	na->opt_type = ND_OPT_TARGET_LL;
	na->opt_len = 1;
	__builtin_memcpy(na->opt_mac, p->src_ep->host_mac, ETH_ALEN);

	/* checksum: the pseudo header, then the 32 bytes of ICMPv6 */
	struct {
		__u8 saddr[16];
		__u8 daddr[16];
		__be32 len;
		__be32 nexthdr;
	} ph;
	__builtin_memcpy(ph.saddr, tgt, 16);
	__builtin_memcpy(ph.daddr, p->tuple.saddr, 16);
	ph.len = bpf_htonl(sizeof(struct nd_msg6) + 8);
	ph.nexthdr = bpf_htonl(IPPROTO_ICMPV6);
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	if (sum < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	void *icmp = (__u8 *)na + sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
	sum = bpf_csum_diff(0, 0, icmp, sizeof(struct nd_msg6) + 8, (__u32)sum);
	if (sum < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	na->nd.hdr.icmp6_cksum = csum_fold32(sum);
	metrics_count(skb, p, DP_REASON_ND_ANSWERED);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_ND_ANSWERED);
	return bpf_redirect(skb->ifindex, 0);
}

#endif /* FIBRIL_BPF_LIB_ND_H */
