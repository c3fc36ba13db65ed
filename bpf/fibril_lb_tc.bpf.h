/* bpf/fibril_lb_tc.bpf.h - the lb programs' per-packet NAT at tc
 * (fibril_lb_from_netdev on the ingress of [lb] nodeport-devices,
 * fibril_lb_to_netdev on their egress and the tunnel's), included by
 * bpf/fibril_lb.bpf.c after the socket hooks, whose service lookup and
 * backend selection it shares. Layouts in fibril_lb.h.
 *
 * What is translated: a packet from outside the node to a NodePort on one
 * of the node's own addresses (lb_node_addrs), an ExternalIP or a
 * LoadBalancer frontend - a ClusterIP only with [lb] external-clusterip
 * (Cilium's bpf-lb-external-clusterip) - from a source its
 * loadBalancerSourceRanges allow (lb_src_range; others are dropped and
 * counted), and everything of the flows that made (lb_ct):
 *   - IPv4 with options (L4 found from the IHL), IPv6 past its extension
 *     headers (hop-by-hop, routing, destination options, AH, fragment);
 *   - fragments: the first one is translated like any packet and leaves
 *     its ports in lb_frag under (source, destination, protocol, id); the
 *     later ones find them there and get the same addresses;
 *   - ICMP / ICMPv6 errors (destination unreachable and fragmentation
 *     needed, packet too big, time exceeded, parameter problem) whose
 *     inner packet belongs to a flow of lb_ct: the inner packet's address
 *     and port and the outer address are translated back as the flow's
 *     own packets are, with the ICMP checksum (and the inner IPv4 header's).
 * lb_ct is a hash that never evicts: when full, a new flow is dropped
 * (tc-ct-full) and the live ones keep their entries; SNAT ports are
 * random (bpf_get_prandom_u32, LB_SNAT_RETRIES tries) and only ever taken
 * with BPF_NOEXIST, so a port whose flow is alive is never handed out. So
 * that one client cannot fill it for everyone, each client (an IPv4
 * address, an IPv6 /64) holds at most [lb] ct-source-max flows: counted in
 * lb_ct_src before any entry of a new flow is made (over it: dropped,
 * tc-ct-source-quota), given back by the GC (fibril_lb.h). A
 * checksum or store helper that fails drops the packet (tc-rewrite-fail)
 * rather than send it half rewritten. */

/* the verdict when the programs have nothing to do with a packet: hand it
 * on to the next filter (the tc order contract of bpf/README.md: lb is at
 * priority 2, after the datapath's 1, and never decides for a packet it
 * does not translate) */
#define LB_TC_PASS TC_ACT_UNSPEC

/* [lb] external-clusterip: translate ClusterIP frontends at tc too */
const volatile __u8 external_clusterip = 0;
/* [lb] ct-source-max: the flows one client may hold in lb_ct; 0: no limit */
const volatile __u32 ct_source_max = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_ct_key);
	__type(value, struct lb_ct_val);
} lb_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_CT_SRC_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} lb_ct_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_device);
} lb_devices SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb_src_range_key);
	__type(value, __u8);
} lb_src_range SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LB_FRAG_MAX);
	__type(key, struct lb_frag_key);
	__type(value, struct lb_frag_val);
} lb_frag SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_node_addr_key);
	__type(value, __u8);
} lb_node_addrs SEC(".maps");

#define AF_INET 2
#define AF_INET6 10
#define E2BIG 7
#define EEXIST 17
#define TCP_FL_FIN 0x01
#define TCP_FL_SYN 0x02
#define TCP_FL_RST 0x04
#define TCP_FL_ACK 0x10
#define IP_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP_SRC_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define IP_DST_OFF (ETH_HLEN + offsetof(struct iphdr, daddr))
#define IP6_SRC_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))
#define IP6_DST_OFF (ETH_HLEN + offsetof(struct ipv6hdr, daddr))
#define PROTO_ICMPV6 58
#define LB_IPV6_EXT_MAX 4 /* extension headers walked before giving up */

enum tc_pkt_kind {
	PKT_PLAIN = 0,  /* TCP / UDP, not fragmented */
	PKT_FRAG_FIRST, /* the first fragment: has the L4 header */
	PKT_FRAG_LATER, /* a later fragment: ports from lb_frag */
	PKT_ICMP_ERR,   /* an ICMP error: the tuple is its inner packet's, reversed */
};

struct tc_pkt {
	__u8 saddr[16], daddr[16]; /* IPv4 mapped; of an ICMP error: the inner
				    * packet's destination and source */
	__u16 sport, dport;        /* network order */
	__u8 proto;                /* TCP or UDP (an ICMP error's inner one) */
	__u8 v6;
	__u8 tcp_flags;
	__u8 kind;                 /* enum tc_pkt_kind */
	__u32 l4_off;              /* the L4 (or ICMP) header */
	__u32 in_l3_off;           /* ICMP error: the inner packet's IP header */
	__u32 frag_id;
};

#include "fibril_lb_reject.bpf.h"

/* An ICMP / ICMPv6 error at off (outer header parsed into p): its inner
 * packet (IPv4 without options, or IPv6 whose next header is TCP / UDP)
 * becomes the tuple, reversed: the inner packet went the other way. */
static __always_inline int icmp_parse(struct __sk_buff *skb, struct tc_pkt *p, __u32 off)
{
	__u8 type;
	if (bpf_skb_load_bytes(skb, off, &type, 1) < 0)
		return 0;
	if (p->v6 ? (type < 1 || type > 4) : (type != 3 && type != 11 && type != 12))
		return 0;
	__u32 in = off + 8, in_l4;
	__u8 proto;
	if (!p->v6) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, in, &ip, sizeof(ip)) < 0 || ip.ihl != 5 ||
		    (ip.frag_off & bpf_htons(0x1fff)))
			return 0;
		proto = ip.protocol;
		v4_to_addr(ip.daddr, p->saddr);
		v4_to_addr(ip.saddr, p->daddr);
		in_l4 = in + sizeof(ip);
	} else {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, in, &ip6, sizeof(ip6)) < 0)
			return 0;
		proto = ip6.nexthdr;
		__builtin_memcpy(p->saddr, &ip6.daddr, 16);
		__builtin_memcpy(p->daddr, &ip6.saddr, 16);
		in_l4 = in + sizeof(ip6);
	}
	__u16 ports[2];
	if ((proto != IPPROTO_TCP && proto != IPPROTO_UDP) ||
	    bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0)
		return 0;
	p->sport = ports[1];
	p->dport = ports[0];
	p->proto = proto;
	p->kind = PKT_ICMP_ERR;
	p->l4_off = off;
	p->in_l3_off = in;
	p->tcp_flags = 0;
	return 1;
}

/* Ethernet + IPv6 + the TCP header up to its flags: what the fast path
 * reads directly from the packet */
#define TC_PULL_LEN (ETH_HLEN + sizeof(struct ipv6hdr) + 14)

/* The ports (and TCP flags) at off: read directly when that part of the
 * packet is in its linear data, else copied out. */
static __always_inline int l4_ports(struct __sk_buff *skb, struct tc_pkt *p, __u32 off)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u8 buf[14];
	__u8 *l4 = buf;
	__u32 need = p->proto == IPPROTO_TCP ? 14 : 4;
	if (off <= TC_PULL_LEN && data + off + 14 <= end) {
		l4 = data + off;
		if ((void *)(l4 + 14) > end)
			return 0;
	} else if (bpf_skb_load_bytes(skb, off, buf, need) < 0) {
		return 0;
	}
	__builtin_memcpy(&p->sport, l4, 2);
	__builtin_memcpy(&p->dport, l4 + 2, 2);
	p->tcp_flags = p->proto == IPPROTO_TCP ? l4[13] : 0;
	return 1;
}

/* IPv6 extension headers from off (next header *nh): walked with copies,
 * the fragment header noted. The offset of the L4 header. */
static __always_inline int ipv6_exthdrs(struct __sk_buff *skb, struct tc_pkt *p, __u8 *nh,
					__u32 *off, int *frag, int *later)
{
#pragma unroll
	for (int i = 0; i < LB_IPV6_EXT_MAX; i++) {
		__u8 h[8];
		__u8 n = *nh;
		if (n != IPPROTO_HOPOPTS && n != IPPROTO_ROUTING && n != IPPROTO_DSTOPTS &&
		    n != IPPROTO_AH && n != IPPROTO_FRAGMENT)
			return 1;
		if (bpf_skb_load_bytes(skb, *off, h, sizeof(h)) < 0)
			return 0;
		if (n == IPPROTO_FRAGMENT) {
			__u16 fo = (__u16)(h[2] << 8 | h[3]);
			*frag = (fo & 0xfff9) != 0; /* an offset or M */
			*later = (fo & 0xfff8) != 0;
			p->frag_id = (__u32)h[4] << 24 | (__u32)h[5] << 16 | (__u32)h[6] << 8 | h[7];
			*off += 8;
		} else if (n == IPPROTO_AH) {
			*off += ((__u32)h[1] + 2) * 4;
		} else {
			*off += ((__u32)h[1] + 1) * 8;
		}
		*nh = h[0];
	}
	return 1;
}

/* IPv4 (with options) or IPv6 (past its extension headers) carrying TCP,
 * UDP (a fragment of either too) or an ICMP error; anything else: 0. The
 * common case (no options, no extension header) reads the packet
 * directly; the rest is copied out with bpf_skb_load_bytes. */
static __always_inline int tc_parse(struct __sk_buff *skb, struct tc_pkt *p)
{
	__u32 off = ETH_HLEN;
	__u8 nh;
	int frag = 0, later = 0;
	if (skb->data_end - skb->data < TC_PULL_LEN && skb->len > skb->data_end - skb->data)
		bpf_skb_pull_data(skb, skb->len < TC_PULL_LEN ? skb->len : TC_PULL_LEN);
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
			return 0;
		__u16 fo = bpf_ntohs(ip->frag_off);
		frag = (fo & 0x3fff) != 0; /* MF or an offset */
		later = (fo & 0x1fff) != 0;
		p->frag_id = bpf_ntohs(ip->id);
		nh = ip->protocol;
		v4_to_addr(ip->saddr, p->saddr);
		v4_to_addr(ip->daddr, p->daddr);
		p->v6 = 0;
		off += (__u32)ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		nh = ip6->nexthdr;
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		p->v6 = 1;
		off += sizeof(*ip6);
		if (!ipv6_exthdrs(skb, p, &nh, &off, &frag, &later))
			return 0;
	} else {
		return 0;
	}
	p->l4_off = off;
	p->proto = nh;
	p->tcp_flags = 0;
	if (nh == (p->v6 ? PROTO_ICMPV6 : IPPROTO_ICMP))
		return frag ? 0 : icmp_parse(skb, p, off);
	if (nh != IPPROTO_TCP && nh != IPPROTO_UDP)
		return 0;
	p->kind = later ? PKT_FRAG_LATER : frag ? PKT_FRAG_FIRST : PKT_PLAIN;
	if (later)
		return 1;
	return l4_ports(skb, p, off);
}

/* lb_frag's key for the fragments of p's datagram */
static __always_inline void frag_key(const struct tc_pkt *p, struct lb_frag_key *k)
{
	__builtin_memcpy(k->saddr, p->saddr, 16);
	__builtin_memcpy(k->daddr, p->daddr, 16);
	k->id = p->frag_id;
	k->proto = p->proto;
}

/* A later fragment: its datagram's ports, as the first fragment left
 * them; 0 when unknown (the first one not seen, or not translated). */
static __always_inline int frag_ports(struct tc_pkt *p)
{
	struct lb_frag_key k = {};
	frag_key(p, &k);
	struct lb_frag_val *v = bpf_map_lookup_elem(&lb_frag, &k);
	if (!v)
		return 0;
	p->sport = v->sport;
	p->dport = v->dport;
	return 1;
}

/* The first fragment of a datagram being translated: its ports for the
 * later ones. */
static __always_inline void frag_remember(const struct tc_pkt *p)
{
	if (p->kind != PKT_FRAG_FIRST)
		return;
	struct lb_frag_key k = {};
	struct lb_frag_val v = {.sport = p->sport, .dport = p->dport};
	frag_key(p, &k);
	bpf_map_update_elem(&lb_frag, &k, &v, BPF_ANY);
}

/* Rewrite the source (src = 1) or destination address and port, with the
 * L4 checksum (pseudo header) and, for IPv4, the header checksum; a later
 * fragment has no L4 header: its address only. 0, or -1 when a helper
 * failed (the packet must be dropped: it may be half rewritten). */
static __always_inline int tc_rewrite(struct __sk_buff *skb, const struct tc_pkt *p, int src,
				      const __u8 addr[16], __u16 port)
{
	int l4 = p->kind != PKT_FRAG_LATER;
	__u32 l4_csum = p->l4_off + (p->proto == IPPROTO_TCP ? offsetof(struct tcphdr, check)
							     : offsetof(struct udphdr, check));
	__u64 mangled = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u8 old[16], new[16];
	__builtin_memcpy(old, src ? p->saddr : p->daddr, 16);
	__builtin_memcpy(new, addr, 16);
	__u16 old_port = src ? p->sport : p->dport;
	if (p->v6) {
		__s64 diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)new, 16, 0);
		if (diff < 0)
			return -1;
		if (l4 && bpf_l4_csum_replace(skb, l4_csum, 0, (__u64)diff, BPF_F_PSEUDO_HDR | mangled) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, src ? IP6_SRC_OFF : IP6_DST_OFF, new, 16, 0) < 0)
			return -1;
	} else {
		__u32 o, n;
		__builtin_memcpy(&o, old + 12, 4);
		__builtin_memcpy(&n, new + 12, 4);
		if (l4 && bpf_l4_csum_replace(skb, l4_csum, o, n, BPF_F_PSEUDO_HDR | mangled | sizeof(n)) < 0)
			return -1;
		if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, o, n, sizeof(n)) < 0 ||
		    bpf_skb_store_bytes(skb, src ? IP_SRC_OFF : IP_DST_OFF, &n, sizeof(n), 0) < 0)
			return -1;
	}
	if (!l4)
		return 0;
	if (bpf_l4_csum_replace(skb, l4_csum, old_port, port, mangled | sizeof(port)) < 0 ||
	    bpf_skb_store_bytes(skb, p->l4_off + (src ? 0 : 2), &port, sizeof(port), 0) < 0)
		return -1;
	return 0;
}

/* Rewrite one address of the outer IPv4 / IPv6 header of an ICMP error
 * (with the IPv4 header checksum, or the ICMPv6 pseudo header's share of
 * its checksum) when it is `old`. 0 or -1. */
static __always_inline int icmp_outer(struct __sk_buff *skb, const struct tc_pkt *p, int src,
				      const __u8 old[16], const __u8 new[16])
{
	__u32 icmp_csum = p->l4_off + 2;
	if (!p->v6) {
		__u32 cur, o, n;
		if (bpf_skb_load_bytes(skb, src ? IP_SRC_OFF : IP_DST_OFF, &cur, 4) < 0)
			return -1;
		__builtin_memcpy(&o, old + 12, 4);
		__builtin_memcpy(&n, new + 12, 4);
		if (cur != o)
			return 0;
		if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, o, n, sizeof(n)) < 0 ||
		    bpf_skb_store_bytes(skb, src ? IP_SRC_OFF : IP_DST_OFF, &n, sizeof(n), 0) < 0)
			return -1;
		return 0;
	}
	__u64 cur[2], o[2], n[2];
	if (bpf_skb_load_bytes(skb, src ? IP6_SRC_OFF : IP6_DST_OFF, cur, 16) < 0)
		return -1;
	__builtin_memcpy(o, old, 16);
	__builtin_memcpy(n, new, 16);
	if (cur[0] != o[0] || cur[1] != o[1])
		return 0;
	__s64 diff = bpf_csum_diff((__be32 *)o, 16, (__be32 *)n, 16, 0);
	if (diff < 0 || bpf_l4_csum_replace(skb, icmp_csum, 0, (__u64)diff, BPF_F_PSEUDO_HDR) < 0 ||
	    bpf_skb_store_bytes(skb, src ? IP6_SRC_OFF : IP6_DST_OFF, n, 16, 0) < 0)
		return -1;
	return 0;
}

/* An ICMP error about a flow whose packets get their source (src = 1, at
 * egress) or destination rewritten to addr:port: its inner packet went the
 * other way, so the inner destination (egress) or source (ingress) is
 * rewritten, with the ICMP checksum (IPv4: the inner header's checksum
 * compensates its address change, so the ICMP checksum sees the port
 * only; ICMPv6: the address too), and the outer source (egress) or
 * destination when it is the address being replaced (a router on the way
 * keeps its own). The inner L4 checksum is left as it was (a truncated
 * copy no stack checks). 0 or -1. */
static __always_inline int icmp_rewrite(struct __sk_buff *skb, const struct tc_pkt *p, int src,
					const __u8 addr[16], __u16 port)
{
	__u32 icmp_csum = p->l4_off + 2;
	int inner_src = !src;
	__u8 old[16], new[16];
	__builtin_memcpy(old, src ? p->saddr : p->daddr, 16);
	__builtin_memcpy(new, addr, 16);
	__u16 old_port = src ? p->sport : p->dport;
	__u32 in_l4;
	if (!p->v6) {
		__u32 o, n;
		__builtin_memcpy(&o, old + 12, 4);
		__builtin_memcpy(&n, new + 12, 4);
		in_l4 = p->in_l3_off + sizeof(struct iphdr);
		if (bpf_l3_csum_replace(skb, p->in_l3_off + offsetof(struct iphdr, check), o, n,
					sizeof(n)) < 0 ||
		    bpf_skb_store_bytes(skb, p->in_l3_off + (inner_src ? offsetof(struct iphdr, saddr)
								       : offsetof(struct iphdr, daddr)),
					&n, sizeof(n), 0) < 0)
			return -1;
	} else {
		in_l4 = p->in_l3_off + sizeof(struct ipv6hdr);
		__s64 diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)new, 16, 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, icmp_csum, 0, (__u64)diff, 0) < 0 ||
		    bpf_skb_store_bytes(skb, p->in_l3_off + (inner_src ? offsetof(struct ipv6hdr, saddr)
								       : offsetof(struct ipv6hdr, daddr)),
					new, 16, 0) < 0)
			return -1;
	}
	if (bpf_l4_csum_replace(skb, icmp_csum, old_port, port, sizeof(port)) < 0 ||
	    bpf_skb_store_bytes(skb, in_l4 + (inner_src ? 0 : 2), &port, sizeof(port), 0) < 0)
		return -1;
	return icmp_outer(skb, p, src, old, new);
}

/* Translate p as the flow entry (addr, port) says: the packet itself, or
 * the ICMP error about one; a failure drops it (counted). */
static __always_inline int tc_translate(struct __sk_buff *skb, const struct tc_pkt *p, int src,
					const __u8 addr[16], __u16 port)
{
	int rc = p->kind == PKT_ICMP_ERR ? icmp_rewrite(skb, p, src, addr, port)
					 : tc_rewrite(skb, p, src, addr, port);
	if (rc < 0) {
		count(LB_M_TC_REWRITE_FAIL);
		return TC_ACT_SHOT;
	}
	if (p->kind == PKT_ICMP_ERR)
		count(LB_M_TC_ICMP_REVNAT);
	else if (p->kind == PKT_FRAG_LATER)
		count(LB_M_TC_FRAG);
	else
		frag_remember(p);
	return TC_ACT_OK;
}

/* The flow's `seen` after this packet: the second (never 0, which marks an
 * older program's entry), the entry's own LB_CT_F_CHARGED and the TCP
 * state - FIN or RST: closing; a SYN alone: a (new) handshake; the
 * handshake's last ACK or data: open. */
static __always_inline __u32 ct_seen(__u32 old, const struct tc_pkt *p)
{
	__u32 f = old & (LB_CT_F_SYN | LB_CT_F_CLOSING);
	__u32 charged = old & LB_CT_F_CHARGED;
	if (p->proto == IPPROTO_TCP) {
		__u8 fl = p->tcp_flags;
		if (fl & (TCP_FL_FIN | TCP_FL_RST))
			f = LB_CT_F_CLOSING;
		else if ((fl & TCP_FL_SYN) && !(fl & TCP_FL_ACK))
			f = LB_CT_F_SYN;
		else if (!(fl & TCP_FL_SYN) && !(f & LB_CT_F_CLOSING))
			f = 0;
	}
	__u32 t = (__u32)(bpf_ktime_get_ns() / 1000000000ULL) & LB_CT_SEEN_MASK;
	return (t ? t : 1) | f | charged;
}

/* A packet matched (k, v): stamp it and, when that changed anything, its
 * partner (see fibril_lb.h), so both directions of a flow age together.
 * ICMP errors and later fragments (no TCP flags) leave them alone. */
static __always_inline void ct_touch(const struct lb_ct_key *k, struct lb_ct_val *v,
				     const struct tc_pkt *p)
{
	if (p->kind == PKT_ICMP_ERR || p->kind == PKT_FRAG_LATER)
		return;
	__u32 seen = ct_seen(v->seen, p);
	if (seen == v->seen)
		return;
	v->seen = seen;
	struct lb_ct_key pk = {.proto = k->proto};
	if (k->dir == LB_CT_INGRESS) {
		__builtin_memcpy(pk.saddr, v->addr, 16);
		__builtin_memcpy(pk.daddr, k->saddr, 16);
		pk.sport = v->port;
		pk.dport = k->sport;
		pk.dir = LB_CT_EGRESS;
	} else {
		__builtin_memcpy(pk.saddr, k->daddr, 16);
		__builtin_memcpy(pk.daddr, v->addr, 16);
		pk.sport = k->dport;
		pk.dport = v->port;
		pk.dir = LB_CT_INGRESS;
	}
	struct lb_ct_val *pv = bpf_map_lookup_elem(&lb_ct, &pk);
	if (pv) /* the partner's charge is its own */
		pv->seen = (seen & ~LB_CT_F_CHARGED) | (pv->seen & LB_CT_F_CHARGED);
}

static __always_inline int addr_zero(const __u8 a[16])
{
	__u64 w[2];
	__builtin_memcpy(w, a, 16);
	return !(w[0] | w[1]);
}

/* Whether a new flow from the client in p to backend be needs SNAT: the
 * route to the backend leaves through a device of ours (a nodeport device
 * or the tunnel: the backend is on another node, whose reply would not
 * come back here). Then out = the address of the arrival device. */
static __always_inline int snat_needed(struct __sk_buff *skb, const struct tc_pkt *p,
				       const struct lb_backend *be, __u8 out[16])
{
	__u32 in = skb->ingress_ifindex;
	const struct lb_device *dev = bpf_map_lookup_elem(&lb_devices, &in);
	if (!dev || !(dev->flags & LB_DEV_NODEPORT))
		return 0;
	const __u8 *a = p->v6 ? dev->addr6 : dev->addr4;
	if (addr_zero(a))
		return 0;
	struct bpf_fib_lookup fib = {};
	fib.ifindex = in;
	fib.l4_protocol = p->proto;
	fib.sport = p->sport;
	fib.dport = be->port;
	if (p->v6) {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, p->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, be->addr, 16);
	} else {
		fib.family = AF_INET;
		__builtin_memcpy(&fib.ipv4_src, p->saddr + 12, 4);
		__builtin_memcpy(&fib.ipv4_dst, be->addr + 12, 4);
	}
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	int remote = 0;
	if (rc == BPF_FIB_LKUP_RET_UNSUPP_LWT) {
		remote = 1; /* an encapsulating route: the tunnel to another node */
	} else if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ||
		   rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		__u32 o = fib.ifindex;
		remote = bpf_map_lookup_elem(&lb_devices, &o) != 0;
	}
	if (!remote)
		return 0;
	__builtin_memcpy(out, a, 16);
	return 1;
}

/* Claim a free SNAT port for (backend, snat address): the ingress entry
 * (backend -> snat:port) -> client goes in with BPF_NOEXIST, so a port
 * whose entry is alive is never taken; the ports are random, never the
 * client's own by design. Returns the port (network order), 0 when
 * LB_SNAT_RETRIES ports were taken, or -1 when lb_ct is full. */
static __always_inline int snat_claim(const struct tc_pkt *p, const struct lb_backend *be,
				      const __u8 snat[16], __u16 rev_nat_id, __u32 seen)
{
	struct lb_ct_key k = {.sport = be->port, .proto = p->proto, .dir = LB_CT_INGRESS};
	struct lb_ct_val v = {.port = p->sport, .rev_nat_id = rev_nat_id, .seen = seen};
	__builtin_memcpy(k.saddr, be->addr, 16);
	__builtin_memcpy(k.daddr, snat, 16);
	__builtin_memcpy(v.addr, p->saddr, 16);
	__u32 range = LB_SNAT_PORT_MAX - LB_SNAT_PORT_MIN + 1;
	for (int i = 0; i < LB_SNAT_RETRIES; i++) {
		k.dport = bpf_htons((__u16)(LB_SNAT_PORT_MIN + bpf_get_prandom_u32() % range));
		long rc = bpf_map_update_elem(&lb_ct, &k, &v, BPF_NOEXIST);
		if (rc == 0)
			return k.dport;
		if (rc == -E2BIG)
			return -1;
	}
	return 0;
}

/* Is the destination of p one of the node's own addresses? */
static __always_inline int to_node(const struct tc_pkt *p)
{
	return bpf_map_lookup_elem(&lb_node_addrs, p->daddr) != 0;
}

/* May a new flow from p's source reach the service (its
 * loadBalancerSourceRanges, when it has some)? */
static __always_inline int source_allowed(const struct tc_pkt *p, const struct lb_svc_val *svc)
{
	if (!(svc->flags & LB_F_SRC_RANGES))
		return 1;
	struct lb_src_range_key k = {.prefixlen = 32 + 128, .rev_nat_id = bpf_htons(svc->rev_nat_id)};
	__builtin_memcpy(k.addr, p->saddr, 16);
	return bpf_map_lookup_elem(&lb_src_range, &k) != 0;
}

/* An entry of a new flow; -1 when lb_ct is full (or refuses it). */
static __always_inline int ct_put(const struct lb_ct_key *k, const struct lb_ct_val *v)
{
	return bpf_map_update_elem(&lb_ct, k, v, BPF_ANY) == 0 ? 0 : -1;
}

/* Charge a new flow to its client's lb_ct_src slot if the client holds
 * fewer than ct_source_max: the slot (to give back if the flow is not
 * made), NULL when there is no limit, or (void *)-1 over the quota. A
 * check then an add, as the datapath's ct_charge: CPUs racing at the
 * limit may pass it by one each. */
static __always_inline __u64 *src_charge(const struct tc_pkt *p)
{
	if (!ct_source_max)
		return 0;
	__u32 k = 0;
	const __u64 *secret = bpf_map_lookup_elem(&lb_ct_src, &k);
	if (!secret)
		return 0;
	k = lb_ct_src_slot(p->saddr, *secret);
	__u64 *n = bpf_map_lookup_elem(&lb_ct_src, &k);
	if (!n)
		return 0;
	if (*n >= ct_source_max)
		return (__u64 *)-1L;
	__sync_fetch_and_add(n, 1);
	return n;
}

/* Give back what src_charge() took (the flow was not made). */
static __always_inline void src_uncharge(__u64 *n)
{
	if (n)
		__sync_fetch_and_add(n, -1);
}

/* A new flow to a frontend: its backend, its lb_ct entries, its first
 * packet translated. */
static __always_inline int new_flow(struct __sk_buff *skb, struct tc_pkt *p,
				    const struct lb_ct_key *ck)
{
	struct lb_svc_key key = {.port = p->dport, .proto = p->proto};
	__builtin_memcpy(key.addr, p->daddr, 16);
	const struct lb_svc_val *svc = bpf_map_lookup_elem(&lb_services, &key);
	if (!svc)
		return LB_TC_PASS;
	__u8 type = svc->flags & LB_SVC_TYPE_MASK;
	if (type == LB_SVC_CLUSTER_IP && !external_clusterip)
		return LB_TC_PASS; /* inside the cluster only: the socket hooks' */
	if (type == LB_SVC_NODE_PORT && !to_node(p))
		return LB_TC_PASS; /* a NodePort is on the node's own addresses only */
	if (!source_allowed(p, svc)) {
		count(LB_M_TC_SRC_RANGE_DROP);
		return TC_ACT_SHOT;
	}
	__u32 id = 0, s4, d4;
	__builtin_memcpy(&s4, p->saddr + 12, 4);
	__builtin_memcpy(&d4, p->daddr + 12, 4);
	if (p->v6) { /* fold the addresses' other words in too */
		__u64 w[4];
		__builtin_memcpy(w, p->saddr, 16);
		__builtin_memcpy(w + 2, p->daddr, 16);
		s4 ^= (__u32)(w[0] ^ (w[0] >> 32) ^ w[1]);
		d4 ^= (__u32)(w[2] ^ (w[2] >> 32) ^ w[3]);
	}
	const struct lb_backend *be = 0;
	if (svc->count)
		be = select_backend(&key, svc, (__u64)s4,
				    ((__u64)s4 << 32 | d4) ^
					    ((__u64)p->sport << 24 | (__u64)p->dport << 8 | p->proto),
				    &id);
	if (!be) {
		/* dropped, never to the node's stack (where a node process may
		 * listen on the frontend's port); the client gets an ICMP /
		 * ICMPv6 port unreachable at once, not a timeout */
		count(LB_M_TC_NO_BACKEND);
		return lb_reject_no_backend(skb, p);
	}
	__u64 *charge = src_charge(p); /* before any entry is made */
	if (charge == (__u64 *)-1L) {
		count(LB_M_TC_CT_SRC_QUOTA);
		return TC_ACT_SHOT;
	}
	__u16 rev_nat_id = svc->rev_nat_id;
	__u32 seen = ct_seen(0, p);
	__u8 snat[16];
	int snat_port = 0;
	if (!(svc->flags & LB_F_EXT_LOCAL) && snat_needed(skb, p, be, snat)) {
		snat_port = snat_claim(p, be, snat, rev_nat_id, seen);
		if (snat_port <= 0) {
			src_uncharge(charge);
			count(snat_port < 0 ? LB_M_TC_CT_FULL : LB_M_TC_SNAT_NO_PORT);
			return TC_ACT_SHOT; /* the client retransmits */
		}
	}
	/* the client's entry carries the charge; made only where none is
	 * (BPF_NOEXIST): a flow made meanwhile on another CPU keeps its own */
	struct lb_ct_val nv = {.port = be->port, .rev_nat_id = rev_nat_id,
			       .seen = seen | (charge ? LB_CT_F_CHARGED : 0)};
	__builtin_memcpy(nv.addr, be->addr, 16);
	struct lb_ct_key rk = {.sport = be->port, .dport = p->sport, .proto = p->proto,
			       .dir = LB_CT_EGRESS};
	struct lb_ct_val rv = {.port = p->dport, .rev_nat_id = rev_nat_id, .seen = seen};
	__builtin_memcpy(rk.saddr, be->addr, 16);
	__builtin_memcpy(rk.daddr, p->saddr, 16);
	__builtin_memcpy(rv.addr, p->daddr, 16);
	struct lb_ct_key sk = {.sport = p->sport, .dport = be->port, .proto = p->proto,
			       .dir = LB_CT_EGRESS};
	__builtin_memcpy(sk.saddr, p->saddr, 16);
	__builtin_memcpy(sk.daddr, be->addr, 16);
	long made = bpf_map_update_elem(&lb_ct, ck, &nv, BPF_NOEXIST);
	int stage = made < 0 ? 0 : ct_put(&rk, &rv) < 0 ? 1 : 2;
	if (stage == 2 && snat_port) {
		struct lb_ct_val sv = {.port = (__u16)snat_port, .rev_nat_id = rev_nat_id,
				       .seen = seen};
		__builtin_memcpy(sv.addr, snat, 16);
		stage = ct_put(&sk, &sv) < 0 ? 2 : 3;
		if (stage == 3)
			count(LB_M_TC_SNAT);
	} else if (stage == 2) {
		stage = 3;
	}
	if (stage < 3) { /* lb_ct is full (or raced): none of the flow stays */
		src_uncharge(charge);
		if (stage >= 1)
			bpf_map_delete_elem(&lb_ct, ck);
		if (stage >= 2)
			bpf_map_delete_elem(&lb_ct, &rk);
		if (snat_port) {
			struct lb_ct_key pk = {.sport = be->port, .dport = (__u16)snat_port,
					       .proto = p->proto, .dir = LB_CT_INGRESS};
			__builtin_memcpy(pk.saddr, be->addr, 16);
			__builtin_memcpy(pk.daddr, snat, 16);
			bpf_map_delete_elem(&lb_ct, &pk);
		}
		if (made != -EEXIST)
			count(LB_M_TC_CT_FULL);
		return TC_ACT_SHOT; /* raced: the retransmission finds the flow */
	}
	int rc = tc_translate(skb, p, 0, nv.addr, nv.port);
	if (rc == TC_ACT_OK)
		count(LB_M_TC_DNAT);
	return rc;
}

/* the lb_ct key of p at the given direction */
static __always_inline void ct_key_of(const struct tc_pkt *p, __u8 dir, struct lb_ct_key *k)
{
	__builtin_memcpy(k->saddr, p->saddr, 16);
	__builtin_memcpy(k->daddr, p->daddr, 16);
	k->sport = p->sport;
	k->dport = p->dport;
	k->proto = p->proto;
	k->dir = dir;
}

SEC("tc")
int fibril_lb_from_netdev(struct __sk_buff *skb)
{
	struct tc_pkt p = {};
	if (!tc_parse(skb, &p))
		return LB_TC_PASS;
	if (p.kind == PKT_FRAG_LATER && !frag_ports(&p))
		return LB_TC_PASS;
	struct lb_ct_key ck = {};
	ct_key_of(&p, LB_CT_INGRESS, &ck);
	struct lb_ct_val *cv = bpf_map_lookup_elem(&lb_ct, &ck);
	if (cv) {
		ct_touch(&ck, cv, &p);
		int rc = tc_translate(skb, &p, 0, cv->addr, cv->port);
		if (rc == TC_ACT_OK && p.kind != PKT_ICMP_ERR)
			count(LB_M_TC_DNAT);
		return rc;
	}
	if (p.kind != PKT_PLAIN && p.kind != PKT_FRAG_FIRST)
		return LB_TC_PASS; /* only a flow's first packet makes it */
	return new_flow(skb, &p, &ck);
}

SEC("tc")
int fibril_lb_to_netdev(struct __sk_buff *skb)
{
	struct tc_pkt p = {};
	if (!tc_parse(skb, &p))
		return LB_TC_PASS;
	if (p.kind == PKT_FRAG_LATER && !frag_ports(&p))
		return LB_TC_PASS;
	struct lb_ct_key rk = {};
	ct_key_of(&p, LB_CT_EGRESS, &rk);
	struct lb_ct_val *rv = bpf_map_lookup_elem(&lb_ct, &rk);
	if (!rv)
		return LB_TC_PASS;
	ct_touch(&rk, rv, &p);
	int rc = tc_translate(skb, &p, 1, rv->addr, rv->port);
	if (rc == TC_ACT_OK && p.kind != PKT_ICMP_ERR)
		count(LB_M_TC_REVNAT);
	return rc;
}
