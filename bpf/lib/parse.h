/* bpf/lib/parse.h - the packet's headers into struct pkt: the header
 * pull (pull_headers(), eth_header()), IPv4 (ipv4_parse()), IPv6 and its
 * extension header chain (ipv6_parse(), ipv6_walk()) and the L4 ports,
 * TCP flags and ICMP type (parse_l4()).
 *
 * Contract:
 *   - eth_header(skb, &data_end): pulls headers that sit in a paged
 *     fragment into the linear part when what is read in place is not
 *     linear (bpf_skb_pull_data: every packet pointer taken before is
 *     invalid, so it comes first); returns the bounds-checked Ethernet
 *     header and the end of the linear data, or NULL for a frame shorter
 *     than an Ethernet header; writes nothing of p;
 *   - ipv4_parse(skb, p, ip, data_end), ipv6_parse(skb, p, ip6, data_end):
 *     ip / ip6 points just after the Ethernet header (not yet
 *     bounds-checked), p is zeroed (pkt.h). They read the IP header in
 *     place and the extension headers and L4 header with
 *     bpf_skb_load_bytes (a TCP header in the linear part in place), and
 *     write p->tuple (family, the upper layer protocol, addresses, ports),
 *     l4_off, frag and frag_id, tcp_flags, icmp_type and (IPv6)
 *     is_icmp6_nd (1 only for ND / MLD that stays on the link: type, hop
 *     limit and addresses, icmp6_is_nd()). A later fragment (FRAG_LATER)
 *     has no L4 header and ends the IPv6 walk: its ports stay 0 for
 *     frag_resolve(). They write neither the packet nor a
 *     map. Return 0, or -1 for a truncated or malformed header (or an IPv6
 *     chain longer than DP_IPV6_MAX_EXTHDRS), which the hook drops
 *     (fibril_from_netdev passes it on).
 */
#ifndef FIBRIL_BPF_LIB_PARSE_H
#define FIBRIL_BPF_LIB_PARSE_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>

#include <bpf/bpf_endian.h>

#include "pkt.h"

/* The L4 header is read with bpf_skb_load_bytes: it may sit after a long
 * IPv6 extension chain, past what was pulled into the linear part. */

static __always_inline int parse_l4(struct __sk_buff *skb, struct pkt *p)
{
	__u8 l4[14];

	if (p->frag == FRAG_LATER)
		return 0; /* no L4 header: dp_frags has the ports */
	if (p->tuple.proto == IPPROTO_TCP) {
		/* the common case, the header in the linear part: read in place
		 * (no helper call) */
		__u32 off = p->l4_off;
		if (off <= 255) {
			const __u8 *h = (const void *)(long)skb->data + off;
			if ((const void *)(h + 14) <= (const void *)(long)skb->data_end) {
				__builtin_memcpy(&p->tuple.sport, h, 2);
				__builtin_memcpy(&p->tuple.dport, h + 2, 2);
				p->tcp_flags = h[13];
				return 0;
			}
		}
		if (bpf_skb_load_bytes(skb, p->l4_off, l4, 14) < 0)
			return -1;
		__builtin_memcpy(&p->tuple.sport, l4, 2);
		__builtin_memcpy(&p->tuple.dport, l4 + 2, 2);
		p->tcp_flags = l4[13];
	} else if (p->tuple.proto == IPPROTO_UDP) {
		if (bpf_skb_load_bytes(skb, p->l4_off, l4, 4) < 0)
			return -1;
		__builtin_memcpy(&p->tuple.sport, l4, 2);
		__builtin_memcpy(&p->tuple.dport, l4 + 2, 2);
	} else if (p->tuple.proto == IPPROTO_ICMPV6 || p->tuple.proto == IPPROTO_ICMP) {
		if (bpf_skb_load_bytes(skb, p->l4_off, l4, 4) < 0)
			return -1;
		p->icmp_type = l4[0];
		p->icmp_code = l4[1];
	}
	return 0;
}

struct ipv6_opt_hdr_min {
	__u8 nexthdr;
	__u8 hdrlen; /* in 8-byte units, not counting the first 8 (AH: 4-byte units - 2) */
};

struct ipv6_frag_hdr_min {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, M flag in bit 0 */
	__be32 id;
};

#define IPV6_FRAG_OFFSET_MASK 0xfff8
#define IPV6_FRAG_MORE 0x0001

/* Walk the IPv6 extension headers from off (just after the fixed header)
 * with p->tuple.proto the fixed header's next header; leaves the upper
 * layer protocol in p->tuple.proto and its offset in p->l4_off. As
 * Cilium's ipv6_hdrlen: bounded, -1 on a truncated header or a chain
 * longer than DP_IPV6_MAX_EXTHDRS. A fragment header with an offset
 * (a later fragment) ends the walk: the rest is the datagram's data, so
 * p->tuple.proto is that header's next header (the first header of the
 * fragmentable part: the upper layer protocol unless the first fragment
 * had extension headers after its fragment header) and p->l4_off where
 * the data starts. */
static __always_inline int ipv6_walk(struct __sk_buff *skb, struct pkt *p, __u32 off)
{
	__u8 nh = p->tuple.proto;

#pragma unroll
	for (int i = 0; i < DP_IPV6_MAX_EXTHDRS; i++) {
		struct ipv6_opt_hdr_min opt;
		struct ipv6_frag_hdr_min fh;

		switch (nh) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
			if (bpf_skb_load_bytes(skb, off, &opt, sizeof(opt)) < 0)
				return -1;
			nh = opt.nexthdr;
			off += ((__u32)opt.hdrlen + 1) * 8;
			break;
		case IPPROTO_AH:
			if (bpf_skb_load_bytes(skb, off, &opt, sizeof(opt)) < 0)
				return -1;
			nh = opt.nexthdr;
			off += ((__u32)opt.hdrlen + 2) * 4;
			break;
		case IPPROTO_FRAGMENT:
			if (bpf_skb_load_bytes(skb, off, &fh, sizeof(fh)) < 0)
				return -1;
			nh = fh.nexthdr;
			off += sizeof(fh);
			p->frag_id = bpf_ntohl(fh.id);
			if (bpf_ntohs(fh.frag_off) & IPV6_FRAG_OFFSET_MASK) {
				/* a later fragment: what follows is data, not
				 * headers (whatever it looks like): stop here */
				p->frag = FRAG_LATER;
				p->tuple.proto = nh;
				p->l4_off = off;
				return 0;
			}
			if (bpf_ntohs(fh.frag_off) & IPV6_FRAG_MORE)
				p->frag = FRAG_FIRST;
			break;
		default:
			p->tuple.proto = nh;
			p->l4_off = off;
			return 0;
		}
	}
	switch (nh) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_AH:
	case IPPROTO_FRAGMENT:
		return -1; /* more extension headers than we walk */
	}
	p->tuple.proto = nh;
	p->l4_off = off;
	return 0;
}

/* IPv4: the tuple, the fragment state and the L4 offset; -1 if malformed. */
static __always_inline int ipv4_parse(struct __sk_buff *skb, struct pkt *p, struct iphdr *ip,
				      void *data_end)
{
	if ((void *)(ip + 1) > data_end || ip->ihl < 5 || ip->version != 4)
		return -1;
	p->tuple.family = DP_FAMILY_IPV4;
	p->tuple.proto = ip->protocol;
	__builtin_memcpy(p->tuple.saddr, &ip->saddr, 4);
	__builtin_memcpy(p->tuple.daddr, &ip->daddr, 4);
	p->l4_off = ETH_HLEN + ip->ihl * 4;
	__u16 frag = bpf_ntohs(ip->frag_off);
	if (frag & 0x1fff)
		p->frag = FRAG_LATER;
	else if (frag & 0x2000)
		p->frag = FRAG_FIRST;
	p->frag_id = bpf_ntohs(ip->id);
	return parse_l4(skb, p);
}

static __always_inline int addr6_is_linklocal_or_unspec(const __u8 *a)
{
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return 1;
	__u64 hi, lo;
	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	return hi == 0 && lo == 0;
}

/* Is this ICMPv6 message (not fragmented) neighbour discovery or MLD that
 * never leaves the link? By its type alone any sender could make a
 * payload-carrying "solicitation" to a global address that the node's
 * stack forwards; so, as RFC 4861 and 2710/3810 receivers check it, ND
 * (133-137) only with hop limit 255 (no router forwarded it) and MLD
 * (130-132, 143) only with hop limit 1 (none will), and only to a
 * link-local or link-scope multicast destination (ND; solicited-node is
 * ff02::1:ffXX:XXXX) or any multicast one (MLD reports go to the group),
 * or from a link-local / unspecified source (the node's own unicast
 * solicitation of a pod comes from the host veth's link-local address;
 * the stack never forwards a link-local source). Everything else of
 * these types is ordinary ICMPv6: policy, conntrack, redirects. The
 * gateway's unicast solicitations are the hook's to recognise (it knows
 * the host addresses: fibril_from_endpoint answers them). */
static __always_inline __u8 icmp6_is_nd(const struct pkt *p, __u8 hop_limit)
{
	__u8 t = p->icmp_type;
	const __u8 *d = p->tuple.daddr;
	int dst_ll = d[0] == 0xfe && (d[1] & 0xc0) == 0x80;

	if (t >= 133 && t <= 137)
		return hop_limit == 255 &&
		       (dst_ll || (d[0] == 0xff && (d[1] & 0x0f) == 0x02) ||
			addr6_is_linklocal_or_unspec(p->tuple.saddr));
	if ((t >= 130 && t <= 132) || t == 143)
		return hop_limit == 1 && (dst_ll || d[0] == 0xff);
	return 0;
}

/* IPv6: the tuple, the extension chain, the fragment state and the L4
 * offset; -1 if malformed. */
static __always_inline int ipv6_parse(struct __sk_buff *skb, struct pkt *p, struct ipv6hdr *ip6,
				      void *data_end)
{
	if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
		return -1;
	p->tuple.family = DP_FAMILY_IPV6;
	p->tuple.proto = ip6->nexthdr;
	__builtin_memcpy(p->tuple.saddr, &ip6->saddr, 16);
	__builtin_memcpy(p->tuple.daddr, &ip6->daddr, 16);
	if (ipv6_walk(skb, p, ETH_HLEN + sizeof(struct ipv6hdr)) < 0)
		return -1;
	if (parse_l4(skb, p) < 0)
		return -1;
	if (p->tuple.proto == IPPROTO_ICMPV6 && p->frag == FRAG_NONE)
		p->is_icmp6_nd = icmp6_is_nd(p, ip6->hop_limit);
	return 0;
}

/* The headers the programs read and write in place: Ethernet, the
 * largest IPv4 header (or the IPv6 header with a neighbour discovery
 * message), and a TCP header; what lies further (a long IPv6 extension
 * chain, the L4 header after it) is read with bpf_skb_load_bytes. */
#define DP_PULL_BYTES (14 + 60 + 20)
/* What must be linear before a pull is worth it: IPv4, its fixed header
 * (the TTL and checksum written in place; the ports and options are read
 * in place when linear, else with bpf_skb_load_bytes); IPv6, its fixed
 * header, and with an ICMPv6 next header a neighbour discovery message
 * after it; anything else (ARP) fits in that too. */
#define DP_PULL_NEED_IPV4 (14 + 20)
#define DP_PULL_NEED_IPV6 (14 + 40)
#define DP_PULL_NEED_OTHER (14 + 40 + 24)

/* Headers in a paged fragment: make them linear, only when what the
 * program reads in place is not. A pull past the linear part copies the
 * head of a cloned skb (every TCP segment a pod sends is a clone of the one
 * its socket keeps): doing it for every packet whose linear part ends at
 * its TCP header (a TCP socket puts the payload in pages) cost more than
 * the rest of the program. The caller reloads data / data_end after. */
static __always_inline void pull_headers(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 linear = skb->data_end - skb->data;

	if (linear >= DP_PULL_BYTES || skb->len <= linear)
		return;
	__u32 need = DP_PULL_NEED_OTHER;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) <= data_end) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (eth->h_proto == bpf_htons(ETH_P_IP))
			need = DP_PULL_NEED_IPV4;
		else if (eth->h_proto == bpf_htons(ETH_P_IPV6) && (void *)(ip6 + 1) <= data_end &&
			 ip6->nexthdr != IPPROTO_ICMPV6)
			need = DP_PULL_NEED_IPV6;
	}
	if (linear < need)
		bpf_skb_pull_data(skb, skb->len < DP_PULL_BYTES ? skb->len : DP_PULL_BYTES);
}

/* The headers pulled, the Ethernet header bounds-checked: the header and
 * the end of the linear data (in *data_end), or NULL when the frame is
 * shorter than an Ethernet header. */
static __always_inline struct ethhdr *eth_header(struct __sk_buff *skb, void **data_end)
{
	pull_headers(skb);
	struct ethhdr *eth = (void *)(long)skb->data;
	*data_end = (void *)(long)skb->data_end;
	if ((void *)(eth + 1) > *data_end)
		return 0;
	return eth;
}

#endif /* FIBRIL_BPF_LIB_PARSE_H */
