/* bpf/lib/nat.h - masquerading (BPF SNAT): the dp_nat mappings (layout in
 * ../fibril_dp.h), the port allocation and the packet rewrites.
 *
 * Contract:
 *   - nat_wanted(p, ep): whether a packet of the tuple in p, from local
 *     endpoint ep, leaving the node, is masqueraded: not when the
 *     destination is inside the cluster (an ipcache entry flagged
 *     DP_IPCACHE_F_CLUSTER: a node, a pod CIDR, an endpoint; or identity
 *     host / remote-node) or in dp_nomasq (link-local, [datapath]
 *     non-masquerade-cidrs), not when it answers a flow opened towards the
 *     pod (its ingress conntrack entry: a NodePort / hostPort backend's
 *     reply keeps its address for lb to translate); reads only maps;
 *   - nat_key_of(p, l4_off, skb, key, dir): the dp_nat key of the packet as
 *     it is (ICMP: only echo request / reply, the identifier as the port);
 *     0, or -1 for what is not translated (other ICMP, a later fragment);
 *   - nat_snat(p, key, addr, ep, cfg, out): the OUT entry of the flow or
 *     a new mapping to addr (the pod's own port first when it is inside
 *     cfg's [min, max], as the kernel's masquerade keeps it, then ports
 *     at random in the range, NAT_PORT_TRIES tries in all; the IN entry
 *     claimed first with BPF_NOEXIST, then the OUT one). Keeping the port
 *     keeps the world's view one TCP conversation per pod 4-tuple: the
 *     world's TIME_WAIT of a finished flow accepts the pod's next SYN on
 *     that 4-tuple (its sequence number and timestamp follow on), where a
 *     port taken at random lands on another 4-tuple's TIME_WAIT whose
 *     timestamp the SYN may not beat (PAWS: refused, a 1 s retransmit).
 *     A found OUT entry has its IN half checked on a SYN and once per
 *     refresh interval (put back when the GC took it: it works one half
 *     at a time); a flow without OUT whose IN half is still there takes
 *     that IN back. Charged to ep in dp_nat_count against cfg's
 *     nat_ep_max; 0 with *out the translation, -1 no free port or the
 *     table full (the hook drops: DP_REASON_DROP_NAT_NO_PORT), -2 ep holds
 *     its quota (DP_REASON_DROP_NAT_QUOTA). The
 *     address is an argument: a gateway node's egress IP is one more
 *     caller of the same helper;
 *   - nat_rewrite(skb, family, proto, l4_off, is_src, old, new, oldp, newp,
 *     l4): one address and port of the packet, with the IPv4 header
 *     checksum and the L4 checksum (pseudo header: TCP, UDP, ICMPv6; the
 *     ICMP echo identifier); l4 0 (a later fragment, no L4 header): the
 *     address alone. Every packet pointer is invalid afterwards. 0 / -1;
 *   - nat_touch(e, p, now): last_seen_s once it is p->ct_refresh_s old,
 *     the closing flag on a TCP FIN / RST, cleared by a SYN without ACK
 *     (a new connection on the same 4-tuple: its mapping is live again,
 *     not the GC's after the closing timeout).
 */
#ifndef FIBRIL_BPF_LIB_NAT_H
#define FIBRIL_BPF_LIB_NAT_H

#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "identity.h"

#define NAT_PORT_TRIES 32
#define NAT_TCP_SYN 0x02
#define NAT_TCP_ACK 0x10
#define ICMP_ECHO_REQUEST 8
#define ICMP_ECHO_REPLY 0
#define ICMP6_ECHO_REQUEST 128
#define ICMP6_ECHO_REPLY 129

static __always_inline int nat_wanted(const struct pkt *p, __u16 ep)
{
	if (ipcache_in_cluster(ipcache_of(p->tuple.family, p->tuple.daddr)))
		return 0;
	struct dp_ipcache_key nk = {.family = p->tuple.family};
	nk.prefixlen = DP_IPCACHE_PREFIX_HDR + (p->tuple.family == DP_FAMILY_IPV4 ? 32 : 128);
	__builtin_memcpy(nk.addr, p->tuple.daddr, 16);
	if (bpf_map_lookup_elem(&dp_nomasq, &nk))
		return 0;
	/* a reply of a flow the pod's ingress admitted (lb's backends) */
	struct dp_ct_key r;
	__builtin_memset(&r, 0, sizeof(r));
	__builtin_memcpy(r.saddr, p->tuple.daddr, 16);
	__builtin_memcpy(r.daddr, p->tuple.saddr, 16);
	r.sport = p->tuple.dport;
	r.dport = p->tuple.sport;
	r.proto = p->tuple.proto;
	r.family = p->tuple.family;
	r.ep_id = ep;
	r.dir = DP_POLICY_INGRESS;
	void *ct = p->tuple.proto == IPPROTO_TCP ? (void *)&dp_conntrack : (void *)&dp_ct_any;
	if (bpf_map_lookup_elem(ct, &r))
		return 0;
	return 1;
}

static __always_inline int nat_is_icmp(__u8 proto)
{
	return proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6;
}

/* The echo identifier's offset in the ICMP header, and whether the type is
 * the request (1) or the reply (0); -1 for any other ICMP message. */
static __always_inline int nat_echo_kind(__u8 proto, __u8 type)
{
	if (proto == IPPROTO_ICMP)
		return type == ICMP_ECHO_REQUEST ? 1 : type == ICMP_ECHO_REPLY ? 0 : -1;
	return type == ICMP6_ECHO_REQUEST ? 1 : type == ICMP6_ECHO_REPLY ? 0 : -1;
}

static __always_inline int nat_key_of(struct __sk_buff *skb, const struct pkt *p,
				      struct dp_nat_key *k, __u8 dir)
{
	/* a later fragment: TCP / UDP with the ports its first fragment left
	 * (lib/frag.h, the caller resolved them); no ICMP echo */
	if (p->frag == FRAG_LATER && (nat_is_icmp(p->tuple.proto) || !p->tuple.sport))
		return -1;
	__builtin_memset(k, 0, sizeof(*k));
	__builtin_memcpy(k->saddr, p->tuple.saddr, 16);
	__builtin_memcpy(k->daddr, p->tuple.daddr, 16);
	k->proto = p->tuple.proto;
	k->family = p->tuple.family;
	k->dir = dir;
	if (p->tuple.proto == IPPROTO_TCP || p->tuple.proto == IPPROTO_UDP) {
		k->sport = p->tuple.sport;
		k->dport = p->tuple.dport;
		return 0;
	}
	if (!nat_is_icmp(p->tuple.proto))
		return -1;
	/* the request goes out (OUT), the reply comes in (IN) */
	if (nat_echo_kind(p->tuple.proto, p->icmp_type) != (dir == DP_NAT_OUT ? 1 : 0))
		return -1;
	__u16 id;
	if (bpf_skb_load_bytes(skb, p->l4_off + 4, &id, 2) < 0)
		return -1;
	if (dir == DP_NAT_OUT)
		k->sport = id;
	else
		k->dport = id;
	return 0;
}

static __always_inline void nat_touch(struct dp_nat_entry *e, const struct pkt *p, __u32 now)
{
	if (p->tuple.proto == IPPROTO_TCP) {
		if ((p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) && !(e->flags & DP_NAT_F_CLOSING))
			e->flags |= DP_NAT_F_CLOSING;
		else if ((p->tcp_flags & (NAT_TCP_SYN | NAT_TCP_ACK | TCP_FLAG_FIN | TCP_FLAG_RST)) ==
				 NAT_TCP_SYN &&
			 (e->flags & DP_NAT_F_CLOSING))
			e->flags &= ~DP_NAT_F_CLOSING;
	}
	if (now - e->last_seen_s >= p->ct_refresh_s)
		e->last_seen_s = now;
}

static __always_inline __u32 nat_now_s(void)
{
	return (__u32)(bpf_ktime_get_coarse_ns() / 1000000000ull);
}

/* Whether the IN entry v is the reply half of the pod flow k (from ep):
 * a half the GC has not reached yet (it takes one half at a time), taken
 * back as it is. */
static __always_inline int nat_in_is_ours(const struct dp_nat_entry *v, const struct dp_nat_key *k,
					  __u16 ep)
{
	__u64 x[2], y[2];
	__builtin_memcpy(x, v->addr, 16);
	__builtin_memcpy(y, k->saddr, 16);
	return v->port == k->sport && v->ep_id == ep && x[0] == y[0] && x[1] == y[1];
}

/* The flow's mapping to addr, made when it has none; *out its OUT entry.
 * A found OUT entry has its IN half checked on a SYN and once per refresh
 * interval: the GC works on one half at a time, so a flow coming back
 * just as its idle pair is collected can find OUT without IN; IN is put
 * back (the same port), or, when another flow holds that port now, the
 * flow gets a new mapping in place of its stale OUT. */
static __always_inline int nat_snat(const struct pkt *p, const struct dp_nat_key *k,
				    const __u8 *addr, __u16 ep, const struct dp_config *cfg,
				    struct dp_nat_entry *out)
{
	__u32 now = nat_now_s();
	struct dp_nat_key in;
	__builtin_memset(&in, 0, sizeof(in));
	__builtin_memcpy(in.saddr, k->daddr, 16);
	in.sport = k->dport;
	in.proto = k->proto;
	in.family = k->family;
	in.dir = DP_NAT_IN;
	struct dp_nat_entry back = {.port = k->sport, .ep_id = ep, .created_s = now,
				    .last_seen_s = now};
	__builtin_memcpy(back.addr, k->saddr, 16);
	int stale_out = 0;
	struct dp_nat_entry *e = bpf_map_lookup_elem(&dp_nat, k);
	if (e) {
		int check = (p->tuple.proto == IPPROTO_TCP &&
			     (p->tcp_flags & (NAT_TCP_SYN | NAT_TCP_ACK)) == NAT_TCP_SYN) ||
			    now - e->last_seen_s >= p->ct_refresh_s;
		nat_touch(e, p, now);
		__builtin_memcpy(out, e, sizeof(*out));
		if (!check)
			return 0;
		__builtin_memcpy(in.daddr, out->addr, 16);
		in.dport = out->port;
		struct dp_nat_entry *in_e = bpf_map_lookup_elem(&dp_nat, &in);
		if (in_e) {
			/* touched too: the GC takes a reply half from a
			 * fresh read, so a flow back on its port keeps it */
			if (in_e->last_seen_s != now)
				in_e->last_seen_s = now;
			return 0;
		}
		if (bpf_map_update_elem(&dp_nat, &in, &back, BPF_NOEXIST) == 0)
			return 0;
		stale_out = 1; /* its port is another flow's now: a new one */
	}
	__builtin_memcpy(in.daddr, addr, 16);
	__u32 slot = ep;
	__u32 *held = bpf_map_lookup_elem(&dp_nat_count, &slot);
	if (!held)
		return -1;
	if (!stale_out && cfg->nat_ep_max && *held >= cfg->nat_ep_max)
		return -2;
	__u16 min = cfg->nat_port_min, max = cfg->nat_port_max;
	if (min == 0 || max < min) {
		min = 61000;
		max = 65535;
	}
	__u32 range = (__u32)max - min + 1;
	__u32 start = bpf_get_prandom_u32() % range;
	__u16 own = bpf_ntohs(k->sport);
	__u16 port = 0;
	int found = 0, adopted = 0;
	/* the pod's own port first (kept, as the kernel's masquerade); its
	 * reply half may still be there, this flow's own, left by the GC */
	if (own >= min && own <= max) {
		in.dport = k->sport;
		if (bpf_map_update_elem(&dp_nat, &in, &back, BPF_NOEXIST) == 0) {
			found = 1;
		} else {
			struct dp_nat_entry *left = bpf_map_lookup_elem(&dp_nat, &in);
			if (left && nat_in_is_ours(left, k, ep)) {
				left->last_seen_s = now;
				left->flags = 0;
				found = adopted = 1;
			}
		}
		port = k->sport;
	}
	for (int i = 0; !found && i < NAT_PORT_TRIES; i++) {
		port = bpf_htons((__u16)(min + (start + (__u32)i * 7919u) % range));
		in.dport = port;
		/* taken: another flow to that destination holds it (or full) */
		if (bpf_map_update_elem(&dp_nat, &in, &back, BPF_NOEXIST) == 0)
			found = 1;
	}
	if (!found)
		return -1;
	in.dport = port;
	struct dp_nat_entry fwd = {.port = port, .ep_id = ep, .created_s = now, .last_seen_s = now};
	__builtin_memcpy(fwd.addr, addr, 16);
	if (bpf_map_update_elem(&dp_nat, k, &fwd, stale_out ? BPF_ANY : BPF_NOEXIST) != 0) {
		/* another CPU mapped this flow meanwhile (or the table is full):
		 * give the port back, take that one */
		if (!adopted)
			bpf_map_delete_elem(&dp_nat, &in);
		e = bpf_map_lookup_elem(&dp_nat, k);
		if (!e)
			return -1;
		__builtin_memcpy(out, e, sizeof(*out));
		return 0;
	}
	if (!stale_out) /* a stale OUT was charged already */
		__sync_fetch_and_add(held, 1);
	__builtin_memcpy(out, &fwd, sizeof(*out));
	return 0;
}

/* Offsets of the L4 checksum and of the port (identifier) rewritten. */
static __always_inline int nat_l4_offsets(__u8 proto, __u32 l4_off, int is_src, __u32 *csum_off,
					  __u32 *port_off)
{
	if (proto == IPPROTO_TCP) {
		*csum_off = l4_off + 16;
		*port_off = l4_off + (is_src ? 0 : 2);
	} else if (proto == IPPROTO_UDP) {
		*csum_off = l4_off + 6;
		*port_off = l4_off + (is_src ? 0 : 2);
	} else if (nat_is_icmp(proto)) {
		*csum_off = l4_off + 2;
		*port_off = l4_off + 4;
	} else {
		return -1;
	}
	return 0;
}

static __always_inline int nat_rewrite(struct __sk_buff *skb, __u8 family, __u8 proto,
				       __u32 l4_off, int is_src, const __u8 *old_addr,
				       const __u8 *new_addr, __u16 old_port, __u16 new_port, int l4)
{
	__u32 csum_off = 0, port_off = 0;
	if (l4 && nat_l4_offsets(proto, l4_off, is_src, &csum_off, &port_off) < 0)
		return -1;
	__u64 mangled = proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (family == DP_FAMILY_IPV4) {
		__u32 off = ETH_HLEN + (is_src ? __builtin_offsetof(struct iphdr, saddr)
					       : __builtin_offsetof(struct iphdr, daddr));
		__u32 o, n;
		__builtin_memcpy(&o, old_addr, 4);
		__builtin_memcpy(&n, new_addr, 4);
		if (l4 && proto != IPPROTO_ICMP &&
		    bpf_l4_csum_replace(skb, csum_off, o, n, BPF_F_PSEUDO_HDR | mangled | 4) < 0)
			return -1;
		if (bpf_l3_csum_replace(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, check), o, n, 4) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, off, &n, 4, 0) < 0)
			return -1;
	} else {
		__u32 off = ETH_HLEN + (is_src ? __builtin_offsetof(struct ipv6hdr, saddr)
					       : __builtin_offsetof(struct ipv6hdr, daddr));
		__u8 o[16], n[16];
		__builtin_memcpy(o, old_addr, 16);
		__builtin_memcpy(n, new_addr, 16);
		__s64 diff = bpf_csum_diff((__be32 *)o, 16, (__be32 *)n, 16, 0);
		if (l4 &&
		    bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR | mangled) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, off, n, 16, 0) < 0)
			return -1;
	}
	if (l4 && old_port != new_port) {
		if (bpf_l4_csum_replace(skb, csum_off, old_port, new_port, mangled | 2) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, port_off, &new_port, 2, 0) < 0)
			return -1;
	}
	return 0;
}

/* The reply of a masqueraded flow, arriving (any hook that sees the
 * underlay's ingress): its IN entry, refreshed, and the packet's
 * destination restored to the pod's. 1 translated (p->tuple too: the
 * pod's address and port), 0 not a masqueraded flow's, -1 the rewrite
 * failed. Only a destination port in cfg's range is looked up (the
 * established pod-to-pod path pays a compare, not a hash lookup). */
static __always_inline int nat_rev(struct __sk_buff *skb, struct pkt *p,
				   const struct dp_config *cfg)
{
	struct dp_nat_key k;
	if (p->tuple.proto == IPPROTO_TCP || p->tuple.proto == IPPROTO_UDP) {
		__u16 port = bpf_ntohs(p->tuple.dport);
		if (port < cfg->nat_port_min || port > cfg->nat_port_max)
			return 0;
	}
	if (nat_key_of(skb, p, &k, DP_NAT_IN) < 0)
		return 0;
	struct dp_nat_entry *e = bpf_map_lookup_elem(&dp_nat, &k);
	if (!e)
		return 0;
	nat_touch(e, p, nat_now_s());
	const __u8 *pod = e->addr; /* a map value: valid across the rewrite */
	__u16 pod_port = e->port;
	__u16 old_port = k.dport;
	if (nat_rewrite(skb, p->tuple.family, p->tuple.proto, p->l4_off, 0, p->tuple.daddr, pod,
			old_port, pod_port, p->frag != FRAG_LATER) < 0)
		return -1;
	__builtin_memcpy(p->tuple.daddr, pod, 16);
	if (!nat_is_icmp(p->tuple.proto))
		p->tuple.dport = pod_port;
	return 1;
}

/* A BPF subprogram, not inlined: its own stack frame (fibril_from_netdev
 * has no room left in its own), and every packet pointer of the caller is
 * invalid after the call.
 * An ICMP error (destination unreachable, fragmentation needed / packet
 * too big, time exceeded) about a masqueraded flow, arriving for the node
 * address: its inner packet is the flow's as it left (node address:port
 * -> world), so the inner source address and port (echo identifier) and
 * the outer destination go back to the pod's, with the inner IPv4 header
 * checksum and the ICMP checksum (the inner TCP / UDP checksum is left:
 * nobody checks it in an error). 1 translated, 0 not such an error. */
static __noinline int nat_rev_icmp_error(struct __sk_buff *skb, struct pkt *p)
{
	int v4 = p->tuple.family == DP_FAMILY_IPV4;
	__u8 t = p->icmp_type;
	if (p->frag != FRAG_NONE || !nat_is_icmp(p->tuple.proto) ||
	    !(v4 ? (t == 3 || t == 11) : (t >= 1 && t <= 3)))
		return 0;
	__u32 inner = p->l4_off + 8, il4;
	struct dp_nat_key k;
	__builtin_memset(&k, 0, sizeof(k));
	__u8 iproto, hdr[2];
	/* the inner header's first bytes, then its addresses straight into
	 * the key (the stack is near its limit here) */
	if (bpf_skb_load_bytes(skb, inner, hdr, 2) < 0)
		return 0;
	if (v4) {
		if ((hdr[0] & 0xf) < 5 ||
		    bpf_skb_load_bytes(skb, inner + 9, &iproto, 1) < 0 ||
		    bpf_skb_load_bytes(skb, inner + 12, k.daddr, 4) < 0 ||
		    bpf_skb_load_bytes(skb, inner + 16, k.saddr, 4) < 0)
			return 0;
		il4 = inner + (hdr[0] & 0xf) * 4;
	} else {
		if (bpf_skb_load_bytes(skb, inner + 6, &iproto, 1) < 0 ||
		    bpf_skb_load_bytes(skb, inner + 8, k.daddr, 16) < 0 ||
		    bpf_skb_load_bytes(skb, inner + 24, k.saddr, 16) < 0)
			return 0;
		il4 = inner + 40;
	}
	/* the inner source is the node address the error came to */
	for (int i = 0; i < 16; i++)
		if (k.daddr[i] != p->tuple.daddr[i])
			return 0;
	__u8 l4[8];
	if (bpf_skb_load_bytes(skb, il4, l4, 8) < 0)
		return 0;
	__u32 port_off;
	if (iproto == IPPROTO_TCP || iproto == IPPROTO_UDP) {
		__builtin_memcpy(&k.sport, l4 + 2, 2);
		__builtin_memcpy(&k.dport, l4, 2);
		port_off = il4;
	} else if (iproto == (v4 ? IPPROTO_ICMP : IPPROTO_ICMPV6) &&
		   nat_echo_kind(iproto, l4[0]) == 1) {
		__builtin_memcpy(&k.dport, l4 + 4, 2);
		port_off = il4 + 4;
	} else {
		return 0;
	}
	k.proto = iproto;
	k.family = p->tuple.family;
	k.dir = DP_NAT_IN;
	struct dp_nat_entry *e = bpf_map_lookup_elem(&dp_nat, &k);
	if (!e)
		return 0;
	const __u8 *node = k.daddr, *pod = e->addr; /* e stays valid: a map value */
	__u16 pod_port = e->port, nat_port = k.dport;
	__u32 csum = p->l4_off + 2;
	if (v4) {
		__u32 o, n;
		__u16 ic_old, ic_new;
		__builtin_memcpy(&o, node, 4);
		__builtin_memcpy(&n, pod, 4);
		if (bpf_skb_load_bytes(skb, inner + 10, &ic_old, 2) < 0 ||
		    bpf_l3_csum_replace(skb, inner + 10, o, n, 4) < 0 ||
		    bpf_skb_load_bytes(skb, inner + 10, &ic_new, 2) < 0 ||
		    bpf_l4_csum_replace(skb, csum, o, n, 4) < 0 ||
		    bpf_l4_csum_replace(skb, csum, ic_old, ic_new, 2) < 0 ||
		    bpf_skb_store_bytes(skb, inner + 12, &n, 4, 0) < 0)
			return -1;
		if (bpf_l4_csum_replace(skb, csum, nat_port, pod_port, 2) < 0 ||
		    bpf_skb_store_bytes(skb, port_off, &pod_port, 2, 0) < 0)
			return -1;
		if (bpf_l3_csum_replace(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, check), o, n,
					4) < 0 ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, daddr), &n, 4,
					0) < 0)
			return -1;
	} else {
		__s64 diff = bpf_csum_diff((__be32 *)node, 16, (__be32 *)pod, 16, 0);
		if (bpf_l4_csum_replace(skb, csum, 0, (__u32)diff, 0) < 0 ||
		    bpf_skb_store_bytes(skb, inner + __builtin_offsetof(struct ipv6hdr, saddr), pod, 16,
					0) < 0)
			return -1;
		if (bpf_l4_csum_replace(skb, csum, nat_port, pod_port, 2) < 0 ||
		    bpf_skb_store_bytes(skb, port_off, &pod_port, 2, 0) < 0)
			return -1;
		if (bpf_l4_csum_replace(skb, csum, 0, (__u32)diff, BPF_F_PSEUDO_HDR) < 0 ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + __builtin_offsetof(struct ipv6hdr, daddr), pod,
					16, 0) < 0)
			return -1;
	}
	__builtin_memcpy(p->tuple.daddr, pod, 16);
	return 1;
}

#endif /* FIBRIL_BPF_LIB_NAT_H */
