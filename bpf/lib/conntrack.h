/* bpf/lib/conntrack.h - conntrack: a flow's entries in dp_conntrack (TCP) or
 * dp_ct_any (every other protocol), one per enforcement point the flow
 * passes (the sender's egress in fibril_from_endpoint, a local receiver's
 * ingress), looked up once per packet and point, counted, and charged to
 * whoever made them (dp_ct_count).
 *
 * Contract:
 *   - the points: CT_EGRESS (DP_POLICY_EGRESS) exists only in
 *     fibril_from_endpoint, for p->src_ep (the source check vouched for
 *     it); CT_INGRESS (DP_POLICY_INGRESS) for p->dst_ep, a local endpoint
 *     (every hook). A packet outside both (to-endpoint without a local
 *     destination) has no conntrack;
 *   - ct_lookup(p, dir): the conntrack cache of struct pkt (see pkt.h) for
 *     point dir. Does nothing unless p->ct_state[dir] is CT_UNKNOWN; else
 *     looks up (tuple, ep, dir), then (reverse tuple, ep, the other dir) -
 *     a reply only against what this very point recorded - and writes
 *     p->ct[dir], p->ct_state[dir] (CT_FORWARD, CT_REPLY, CT_NEW, or
 *     CT_NONE without that point). The tuple must be final (after
 *     frag_resolve()). policy_verdict() calls it for an enforced point;
 *     conntrack() then uses the same answer;
 *   - conntrack(skb, p): for each point, ct_lookup(), then on a hit
 *     updates the entry (atomic packet and byte counters of the packet's
 *     direction, the reply-seen flag, the TCP flags OR-ed in, closing on
 *     FIN / RST, last_seen_s once it is p->ct_refresh_s old, from the
 *     coarse clock); on a miss charges dp_ct_count (the sender's "own"
 *     count in fibril_from_endpoint, else the receiver's "outside" count
 *     and the outside's total, slot 0) against dp_config's limits and
 *     creates the entry, stamped with the gens of its charged slot and of
 *     its endpoint's slot (a removed endpoint's entries are stale: the GC
 *     takes them out uncounted) (BPF_NOEXIST; if another CPU created it meanwhile,
 *     that one is updated and the charge given back). Returns 0, or -1
 *     when a new flow is over its quota or the table is full: the hook
 *     drops it (DP_REASON_DROP_CT_FULL). Reads skb->len and skb->ifindex;
 *     never changes the packet. Each hook calls it once, after
 *     policy_verdict() allowed the packet.
 */
#ifndef FIBRIL_BPF_LIB_CONNTRACK_H
#define FIBRIL_BPF_LIB_CONNTRACK_H

#include <linux/in.h>

#include "identity.h"

#define CT_EGRESS DP_POLICY_EGRESS
#define CT_INGRESS DP_POLICY_INGRESS

static __always_inline void reverse_tuple(const struct dp_ct_key *t, struct dp_ct_key *r)
{
	__builtin_memcpy(r->saddr, t->daddr, 16);
	__builtin_memcpy(r->daddr, t->saddr, 16);
	r->sport = t->dport;
	r->dport = t->sport;
	r->proto = t->proto;
	r->family = t->family;
	r->ep_id = 0;
	r->dir = 0;
	r->pad[0] = 0;
	r->pad[1] = 0;
	r->pad[2] = 0;
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

/* The endpoint whose point dir is, 0 when the packet has none there: an
 * egress entry only for a sender the source check vouched for. */
static __always_inline __u16 ct_point_ep(const struct pkt *p, __u8 dir)
{
	const struct dp_endpoint_info *ep;

	if (dir == CT_EGRESS) {
		if (p->direction != DP_DIR_FROM_ENDPOINT)
			return 0;
		ep = p->src_ep;
	} else {
		ep = p->dst_ep;
	}
	return ep ? ep->ep_id : 0;
}

/* Look the packet's flow up once at point dir: its own direction first,
 * then the reverse as this same point recorded it (the packet is a reply);
 * the policy and the counting share the answer. */
static __always_inline void ct_lookup(struct pkt *p, __u8 dir)
{
	if (p->ct_state[dir] != CT_UNKNOWN)
		return;
	__u16 ep = ct_point_ep(p, dir);
	if (!ep) {
		p->ct_state[dir] = CT_NONE;
		return;
	}
	void *map = ct_map(p);
	struct dp_ct_key fwd = p->tuple, rev;
	fwd.ep_id = ep;
	fwd.dir = dir;
	reverse_tuple(&p->tuple, &rev);
	rev.ep_id = ep;
	rev.dir = dir == CT_EGRESS ? CT_INGRESS : CT_EGRESS;
	/* pod to pod, the sender's point answered first: a reply there is
	 * most likely a reply here too, so that way is looked up first */
	int reply_first = dir == CT_INGRESS && p->ct_state[CT_EGRESS] == CT_REPLY;
	struct dp_ct_value *ct = bpf_map_lookup_elem(map, reply_first ? &rev : &fwd);
	if (ct) {
		p->ct[dir] = ct;
		p->ct_state[dir] = reply_first ? CT_REPLY : CT_FORWARD;
		return;
	}
	ct = bpf_map_lookup_elem(map, reply_first ? &fwd : &rev);
	if (ct) {
		p->ct[dir] = ct;
		p->ct_state[dir] = reply_first ? CT_FORWARD : CT_REPLY;
		return;
	}
	p->ct_state[dir] = CT_NEW;
}

/* The count of slot ep an entry of map tcp/other, own or outside, is
 * charged to. */
static __always_inline __u32 *ct_counter(struct dp_ct_count *c, int tcp, int outside)
{
	if (outside)
		return tcp ? &c->outside[0] : &c->outside[1];
	return tcp ? &c->own[0] : &c->own[1];
}

/* Charge a new entry to ep (its own flows, or outside ones towards it and
 * the outside's total in slot 0) if the limits allow: 0, else -1. A check
 * then an add, not one atomic step: CPUs racing at the limit may pass it by
 * one each, which bounds nothing less. */
static __always_inline int ct_charge(__u16 ep, int tcp, int outside, __u16 *gen)
{
	__u32 zero = 0, slot = ep;
	const struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	struct dp_ct_count *c = bpf_map_lookup_elem(&dp_ct_count, &slot);
	struct dp_ct_count *total = 0;

	if (!c)
		return -1;
	__u32 ep_max = cfg ? (tcp ? cfg->ct_ep_max[0] : cfg->ct_ep_max[1]) : 0;
	__u32 *n = ct_counter(c, tcp, outside);
	if (ep_max && *n >= ep_max)
		return -1;
	if (outside) {
		total = bpf_map_lookup_elem(&dp_ct_count, &zero);
		if (!total)
			return -1;
		__u32 out_max = cfg ? (tcp ? cfg->ct_outside_max[0] : cfg->ct_outside_max[1]) : 0;
		__u32 *t = ct_counter(total, tcp, 1);
		if (out_max && *t >= out_max)
			return -1;
		__sync_fetch_and_add(t, 1);
	}
	__sync_fetch_and_add(n, 1);
	*gen = (__u16)c->gen;
	return 0;
}

/* The gen of endpoint slot ep (dp_ct_count), 0 when there is none. */
static __always_inline __u16 ct_slot_gen(__u16 ep)
{
	__u32 slot = ep;
	const struct dp_ct_count *c = bpf_map_lookup_elem(&dp_ct_count, &slot);

	return c ? (__u16)c->gen : 0;
}

/* Give back what ct_charge() took (the entry was not created). */
static __always_inline void ct_uncharge(__u16 ep, int tcp, int outside)
{
	__u32 zero = 0, slot = ep;
	struct dp_ct_count *c = bpf_map_lookup_elem(&dp_ct_count, &slot);

	if (c)
		__sync_fetch_and_add(ct_counter(c, tcp, outside), -1);
	if (outside) {
		c = bpf_map_lookup_elem(&dp_ct_count, &zero);
		if (c)
			__sync_fetch_and_add(ct_counter(c, tcp, 1), -1);
	}
}

/* Count the packet at point dir, creating its entry on the flow's first
 * packet there: 0, or -1 when it could not (quota, table full). */
static __always_inline int ct_point(struct __sk_buff *skb, struct pkt *p, __u8 dir, __u32 now_s)
{
	ct_lookup(p, dir);
	if (p->ct_state[dir] == CT_NONE)
		return 0;
	struct dp_ct_value *ct = p->ct[dir];
	if (ct) {
		ct_touch(ct, p, skb->len, p->ct_state[dir] == CT_REPLY, now_s, p->ct_refresh_s);
		return 0;
	}
	/* a new flow: charged to the sender (from-endpoint) or, from outside,
	 * to the receiver's outside count */
	int outside = p->direction != DP_DIR_FROM_ENDPOINT;
	__u16 ep = ct_point_ep(p, dir);
	__u16 charge = outside ? ep : ct_point_ep(p, CT_EGRESS);
	int tcp = p->tuple.proto == IPPROTO_TCP;
	__u16 charge_gen = 0;
	if (!ep || !charge || ct_charge(charge, tcp, outside, &charge_gen) < 0)
		return -1;
	void *map = ct_map(p);
	struct dp_ct_key k = p->tuple;
	k.ep_id = ep;
	k.dir = dir;
	struct dp_ct_value fresh = {
		.packets = 1,
		.bytes = skb->len,
		.first_seen_s = now_s,
		.last_seen_s = now_s,
		.ifindex = skb->ifindex,
		.src_ep_id = outside ? 0 : charge,
		.tcp_flags = p->tcp_flags,
		.flags = ((p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) ? DP_CT_F_CLOSING : 0) |
			 DP_CT_F_CHARGED | (outside ? DP_CT_F_OUTSIDE : 0),
		.charge_ep_id = charge,
		.charge_gen = charge_gen,
		.ep_gen = ep == charge ? charge_gen : ct_slot_gen(ep),
	};
	if (bpf_map_update_elem(map, &k, &fresh, BPF_NOEXIST) == 0)
		return 0;
	ct_uncharge(charge, tcp, outside);
	/* another CPU created it meanwhile, or the table is full */
	ct = bpf_map_lookup_elem(map, &k);
	if (!ct)
		return -1;
	ct_touch(ct, p, skb->len, 0, now_s, p->ct_refresh_s);
	return 0;
}

/* Count the packet in its flow's entries, one per enforcement point.
 * Seconds from the coarse clock (CLOCK_MONOTONIC_COARSE: the same clock a
 * tick behind at most, without reading the clock source per packet). */
static __always_inline int conntrack(struct __sk_buff *skb, struct pkt *p)
{
	__u32 now_s = (__u32)(bpf_ktime_get_coarse_ns() / 1000000000ull);

	if (ct_point(skb, p, CT_EGRESS, now_s) < 0)
		return -1;
	return ct_point(skb, p, CT_INGRESS, now_s);
}

#endif /* FIBRIL_BPF_LIB_CONNTRACK_H */
