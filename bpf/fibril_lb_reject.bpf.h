/* bpf/fibril_lb_reject.bpf.h - the answer of the lb tc program to a new
 * flow for a service frontend without a backend (included by
 * fibril_lb_tc.bpf.h): as Cilium's service-no-backend-response "reject",
 * the packet is dropped (counted as tc-no-backend) and answered out of the
 * arrival device, from the frontend to the client: TCP with a RST (as the
 * node's stack answers a closed port; the client handles it even while
 * its socket is busy in connect(), where an ICMP error is only a soft
 * error until the SYN is retransmitted a second later), UDP with an ICMP
 * destination unreachable / port unreachable (ICMPv6 type 1 code 4)
 * quoting the dropped packet's IP header and first 8 bytes of L4, so that
 * a connect() or a connected UDP socket fails at once with ECONNREFUSED.
 * The packet itself never reaches the node's stack: a node process that
 * listens on the frontend's port (an external IP on :22, say) is not
 * reachable through a Service that lost its backends. Packets that cannot
 * be quoted simply (IPv4 options, IPv6 extension headers, fragments) are
 * dropped without an answer. */
#ifndef FIBRIL_LB_REJECT_BPF_H
#define FIBRIL_LB_REJECT_BPF_H

#define LB_ICMP_DEST_UNREACH 3
#define LB_ICMP_PORT_UNREACH 3
#define LB_ICMP6_DEST_UNREACH 1
#define LB_ICMP6_PORT_UNREACH 4

static __always_inline __u16 lb_csum_fold(__s64 sum)
{
	__u32 c = (__u32)sum;
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return (__u16)~c;
}

/* the ICMP / ICMPv6 message: header and quote (36 and 56 bytes) */
struct lb_icmp4_msg {
	__u8 type, code;
	__u16 csum;
	__u32 unused;
	__u8 quote[sizeof(struct iphdr) + 8];
};

struct lb_icmp6_msg {
	__u8 type, code;
	__u16 csum;
	__u32 unused;
	__u8 quote[sizeof(struct ipv6hdr) + 8];
};

/* the ICMPv6 checksum's pseudo header */
struct lb_pseudo6 {
	__u8 saddr[16], daddr[16];
	__u32 len;  /* network order */
	__u32 next; /* network order: 58 */
};

/* The packet becomes eth + l3 (l3_len bytes) + msg (msg_len bytes), sent
 * back out of the device it came in on. */
static __always_inline int lb_reject_send(struct __sk_buff *skb, struct ethhdr *eth, void *l3,
					  __u32 l3_len, void *msg, __u32 msg_len)
{
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	if (bpf_skb_change_tail(skb, ETH_HLEN + l3_len + msg_len, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, eth, ETH_HLEN, 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN, l3, l3_len, 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + l3_len, msg, msg_len, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int lb_reject4(struct __sk_buff *skb)
{
	struct lb_icmp4_msg m = {};
	struct iphdr ip = {};
	struct ethhdr eth;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, m.quote, sizeof(m.quote)) < 0)
		return TC_ACT_SHOT;
	const struct iphdr *in = (const struct iphdr *)(const void *)m.quote;
	eth.h_proto = bpf_htons(ETH_P_IP);
	ip.version = 4;
	ip.ihl = 5;
	ip.tot_len = bpf_htons(sizeof(ip) + sizeof(m));
	ip.ttl = 64;
	ip.protocol = IPPROTO_ICMP;
	ip.saddr = in->daddr; /* the frontend answers */
	ip.daddr = in->saddr;
	ip.check = lb_csum_fold(bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
	m.type = LB_ICMP_DEST_UNREACH;
	m.code = LB_ICMP_PORT_UNREACH;
	m.csum = lb_csum_fold(bpf_csum_diff(0, 0, (__be32 *)&m, sizeof(m), 0));
	return lb_reject_send(skb, &eth, &ip, sizeof(ip), &m, sizeof(m));
}

static __always_inline int lb_reject6(struct __sk_buff *skb)
{
	struct lb_icmp6_msg m = {};
	struct ipv6hdr ip6 = {};
	struct lb_pseudo6 ph = {};
	struct ethhdr eth;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, m.quote, sizeof(m.quote)) < 0)
		return TC_ACT_SHOT;
	const struct ipv6hdr *in = (const struct ipv6hdr *)(const void *)m.quote;
	eth.h_proto = bpf_htons(ETH_P_IPV6);
	ip6.version = 6;
	ip6.payload_len = bpf_htons(sizeof(m));
	ip6.nexthdr = PROTO_ICMPV6;
	ip6.hop_limit = 64;
	__builtin_memcpy(&ip6.saddr, &in->daddr, 16);
	__builtin_memcpy(&ip6.daddr, &in->saddr, 16);
	__builtin_memcpy(ph.saddr, &in->daddr, 16);
	__builtin_memcpy(ph.daddr, &in->saddr, 16);
	ph.len = bpf_htonl(sizeof(m));
	ph.next = bpf_htonl(PROTO_ICMPV6);
	m.type = LB_ICMP6_DEST_UNREACH;
	m.code = LB_ICMP6_PORT_UNREACH;
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	m.csum = lb_csum_fold(bpf_csum_diff(0, 0, (__be32 *)&m, sizeof(m), (__wsum)sum));
	return lb_reject_send(skb, &eth, &ip6, sizeof(ip6), &m, sizeof(m));
}

/* The RST a closed port answers a TCP segment with (RFC 9293 3.10.7.1):
 * an ACK is answered with <SEQ=its ACK><CTL=RST>, anything else with
 * <SEQ=0><ACK=its SEQ + its length (+1 for a SYN)><CTL=RST,ACK>. A RST is
 * never answered. 0: tcp filled in; -1: no answer. */
static __always_inline int lb_rst_of(struct __sk_buff *skb, const struct tc_pkt *p, __u32 l4_len,
				     struct tcphdr *tcp)
{
	struct tcphdr in;
	if (bpf_skb_load_bytes(skb, p->l4_off, &in, sizeof(in)) < 0 || in.rst)
		return -1;
	__builtin_memset(tcp, 0, sizeof(*tcp));
	tcp->source = in.dest;
	tcp->dest = in.source;
	tcp->doff = sizeof(*tcp) / 4;
	tcp->rst = 1;
	if (in.ack) {
		tcp->seq = in.ack_seq;
	} else {
		__u32 doff = (__u32)in.doff * 4;
		__u32 len = l4_len > doff ? l4_len - doff : 0;
		tcp->ack_seq = bpf_htonl(bpf_ntohl(in.seq) + len + in.syn + in.fin);
		tcp->ack = 1;
	}
	return 0;
}

static __always_inline int lb_rst4(struct __sk_buff *skb, const struct tc_pkt *p)
{
	struct iphdr in, ip = {};
	struct tcphdr tcp;
	struct ethhdr eth;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, &in, sizeof(in)) < 0)
		return TC_ACT_SHOT;
	__u32 tot = bpf_ntohs(in.tot_len);
	if (tot < sizeof(in) || lb_rst_of(skb, p, tot - sizeof(in), &tcp) < 0)
		return TC_ACT_SHOT;
	ip.version = 4;
	ip.ihl = 5;
	ip.tot_len = bpf_htons(sizeof(ip) + sizeof(tcp));
	ip.ttl = 64;
	ip.protocol = IPPROTO_TCP;
	ip.saddr = in.daddr;
	ip.daddr = in.saddr;
	ip.check = lb_csum_fold(bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
	__u32 ph[3] = {ip.saddr, ip.daddr, bpf_htonl((IPPROTO_TCP << 16) | sizeof(tcp))};
	__s64 sum = bpf_csum_diff(0, 0, ph, sizeof(ph), 0);
	tcp.check = lb_csum_fold(bpf_csum_diff(0, 0, (__be32 *)&tcp, sizeof(tcp), (__wsum)sum));
	eth.h_proto = bpf_htons(ETH_P_IP);
	return lb_reject_send(skb, &eth, &ip, sizeof(ip), &tcp, sizeof(tcp));
}

static __always_inline int lb_rst6(struct __sk_buff *skb, const struct tc_pkt *p)
{
	struct ipv6hdr in, ip6 = {};
	struct lb_pseudo6 ph = {};
	struct tcphdr tcp;
	struct ethhdr eth;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, &in, sizeof(in)) < 0 ||
	    lb_rst_of(skb, p, bpf_ntohs(in.payload_len), &tcp) < 0)
		return TC_ACT_SHOT;
	ip6.version = 6;
	ip6.payload_len = bpf_htons(sizeof(tcp));
	ip6.nexthdr = IPPROTO_TCP;
	ip6.hop_limit = 64;
	ip6.saddr = in.daddr;
	ip6.daddr = in.saddr;
	__builtin_memcpy(ph.saddr, &in.daddr, 16);
	__builtin_memcpy(ph.daddr, &in.saddr, 16);
	ph.len = bpf_htonl(sizeof(tcp));
	ph.next = bpf_htonl(IPPROTO_TCP);
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	tcp.check = lb_csum_fold(bpf_csum_diff(0, 0, (__be32 *)&tcp, sizeof(tcp), (__wsum)sum));
	eth.h_proto = bpf_htons(ETH_P_IPV6);
	return lb_reject_send(skb, &eth, &ip6, sizeof(ip6), &tcp, sizeof(tcp));
}

/* A new flow of p for a frontend without a backend: dropped, with a RST
 * (TCP) or a port unreachable (UDP) back to the client when p is one plain
 * IP + L4 packet. */
static __always_inline int lb_reject_no_backend(struct __sk_buff *skb, const struct tc_pkt *p)
{
	if (p->kind != PKT_PLAIN)
		return TC_ACT_SHOT;
	if (p->proto == IPPROTO_TCP)
		return !p->v6 ? (p->l4_off == ETH_HLEN + sizeof(struct iphdr) ? lb_rst4(skb, p) : TC_ACT_SHOT)
			      : (p->l4_off == ETH_HLEN + sizeof(struct ipv6hdr) ? lb_rst6(skb, p)
										: TC_ACT_SHOT);
	if (!p->v6)
		return p->l4_off == ETH_HLEN + sizeof(struct iphdr) ? lb_reject4(skb) : TC_ACT_SHOT;
	return p->l4_off == ETH_HLEN + sizeof(struct ipv6hdr) ? lb_reject6(skb) : TC_ACT_SHOT;
}

#endif
