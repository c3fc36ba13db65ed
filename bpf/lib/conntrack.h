/* bpf/lib/conntrack.h - conntrack: a flow's entry in dp_conntrack (TCP) or
 * dp_ct_any (every other protocol), looked up once per packet and counted.
 *
 * Contract:
 *   - ct_lookup(p): the conntrack cache of struct pkt (see pkt.h). Does
 *     nothing unless p->ct_state is CT_UNKNOWN; else looks up p->tuple,
 *     then its reverse, and writes p->ct and p->ct_state (CT_FORWARD,
 *     CT_REPLY or CT_NEW). The tuple must be final (after frag_resolve()). policy_verdict() calls it when a policy
 *     concerns the packet; conntrack() then uses the same answer;
 *   - conntrack(skb, p): ct_lookup(), then on a hit updates the entry
 *     (atomic packet and byte counters of the packet's direction, the
 *     reply-seen flag, the TCP flags OR-ed in, closing on FIN / RST,
 *     last_seen_s once it is p->ct_refresh_s old, from the coarse clock);
 *     on a miss calls pkt_resolve() and creates the entry (BPF_NOEXIST:
 *     src_ep_id names the endpoint that opened the flow, ifindex is
 *     skb->ifindex; if another CPU created it meanwhile, that one is
 *     updated instead). Reads skb->len and skb->ifindex; never changes the
 *     packet nor the verdict; returns nothing. Each hook calls it once, after
 *     policy_verdict() allowed the packet.
 */
#ifndef FIBRIL_BPF_LIB_CONNTRACK_H
#define FIBRIL_BPF_LIB_CONNTRACK_H

#include <linux/in.h>

#include "identity.h"

static __always_inline void reverse_tuple(const struct dp_ct_key *t, struct dp_ct_key *r)
{
	__builtin_memcpy(r->saddr, t->daddr, 16);
	__builtin_memcpy(r->daddr, t->saddr, 16);
	r->sport = t->dport;
	r->dport = t->sport;
	r->proto = t->proto;
	r->family = t->family;
	r->pad[0] = 0;
	r->pad[1] = 0;
}

/* now_s: seconds; last_seen_s is rewritten only when it is refresh_s old */
static __always_inline void ct_touch(struct dp_ct_value *ct, const struct pkt *p, __u32 len,
				     int reply, __u32 now_s, __u32 refresh_s)
{
	if (reply) {
		__sync_fetch_and_add(&ct->rx_packets, 1);
		__sync_fetch_and_add(&ct->rx_bytes, len);
		if (!(ct->flags & DP_CT_F_REPLY_SEEN))
			ct->flags |= DP_CT_F_REPLY_SEEN;
	} else {
		__sync_fetch_and_add(&ct->packets, 1);
		__sync_fetch_and_add(&ct->bytes, len);
	}
	if (now_s - ct->last_seen_s >= refresh_s)
		ct->last_seen_s = now_s;
	if ((ct->tcp_flags | p->tcp_flags) != ct->tcp_flags)
		ct->tcp_flags |= p->tcp_flags;
	if ((p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) && !(ct->flags & DP_CT_F_CLOSING))
		ct->flags |= DP_CT_F_CLOSING;
}

/* The flow's map: TCP flows and the rest live in separate maps (Cilium's
 * ct / ct_any). */
static __always_inline void *ct_map(const struct pkt *p)
{
	return p->tuple.proto == IPPROTO_TCP ? (void *)&dp_conntrack : (void *)&dp_ct_any;
}

/* Look the packet's flow up once: its own direction first, then the
 * reverse (the packet is a reply); the policy and the counting share the
 * answer (p->ct, p->ct_state). */
static __always_inline void ct_lookup(struct pkt *p)
{
	if (p->ct_state != CT_UNKNOWN)
		return;
	void *map = ct_map(p);
	struct dp_ct_value *ct = bpf_map_lookup_elem(map, &p->tuple);
	if (ct) {
		p->ct = ct;
		p->ct_state = CT_FORWARD;
		return;
	}
	struct dp_ct_key rev;
	reverse_tuple(&p->tuple, &rev);
	ct = bpf_map_lookup_elem(map, &rev);
	if (ct) {
		p->ct = ct;
		p->ct_state = CT_REPLY;
		return;
	}
	p->ct_state = CT_NEW;
}

/* Count the packet in its flow's entry, creating it on the first packet.
 * Seconds from the coarse clock (CLOCK_MONOTONIC_COARSE: the same clock a
 * tick behind at most, without reading the clock source per packet). */
static __always_inline void conntrack(struct __sk_buff *skb, struct pkt *p)
{
	__u32 now_s = (__u32)(bpf_ktime_get_coarse_ns() / 1000000000ull);

	ct_lookup(p);
	struct dp_ct_value *ct = p->ct;
	if (ct) {
		ct_touch(ct, p, skb->len, p->ct_state == CT_REPLY, now_s, p->ct_refresh_s);
		return;
	}
	/* a new flow: the entry names the endpoint that opened it */
	pkt_resolve(skb, p);
	void *map = ct_map(p);
	struct dp_ct_value fresh = {
		.packets = 1,
		.bytes = skb->len,
		.first_seen_s = now_s,
		.last_seen_s = now_s,
		.ifindex = skb->ifindex,
		.src_ep_id = p->src_ep ? p->src_ep->ep_id : 0,
		.tcp_flags = p->tcp_flags,
		.flags = (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) ? DP_CT_F_CLOSING : 0,
	};
	if (bpf_map_update_elem(map, &p->tuple, &fresh, BPF_NOEXIST) != 0) {
		/* another CPU created it meanwhile */
		ct = bpf_map_lookup_elem(map, &p->tuple);
		if (ct)
			ct_touch(ct, p, skb->len, 0, now_s, p->ct_refresh_s);
	}
}

#endif /* FIBRIL_BPF_LIB_CONNTRACK_H */
