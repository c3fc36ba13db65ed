/* bpf/lib/events.h - the dp_events ring buffer: event_send() writes one
 * struct dp_event; drop_event_allowed() is the per-CPU token bucket
 * (dp_evlimit) that rate-limits drop events.
 *
 * Contract:
 *   - event_send(skb, p, type, reason): calls pkt_resolve() first (an
 *     event names both ends: p->src_ep, src_identity, dst_identity may be
 *     filled in, p->lazy ends 0); reads skb->ifindex, skb->len, p's tuple,
 *     endpoints, identities, direction and tcp_flags and, for a
 *     DP_EVENT_POLICY or a DP_REASON_DROP_POLICY drop, the policy fields;
 *     writes one record (waking the reader only once
 *     DP_EVENTS_WAKEUP_BYTES are waiting) or, with the ring full, counts
 *     DP_REASON_EVENT_LOST instead; never changes the packet, returns
 *     nothing. Whether to send (p->trace, dp_config's policy-verdict flag,
 *     the drop rate) is the caller's decision;
 *   - event_send_xlated(skb, p, type, reason, addr, port): the same with
 *     the source a masquerade gave the packet (saddr_xlated, sport_xlated,
 *     xlated = 1); p's tuple stays the pod's;
 *   - drop_event_allowed(): reads dp_config (event_rate, event_burst) and
 *     updates this CPU's bucket; 1 when this drop's event may go (always
 *     with event_rate 0), 0 when the rate holds it back.
 */
#ifndef FIBRIL_BPF_LIB_EVENTS_H
#define FIBRIL_BPF_LIB_EVENTS_H

#include <linux/in.h>

#include "identity.h"
#include "metrics.h"

static __always_inline void event_send_xlated(struct __sk_buff *skb, struct pkt *p, __u8 type,
					      __u8 reason, const __u8 *xaddr, __u16 xport)
{
	pkt_resolve(skb, p); /* an event names both identities */
	struct dp_event *e = bpf_ringbuf_reserve(&dp_events, sizeof(*e), 0);

	if (!e) { /* full: the reader is behind; the packet is counted anyway */
		metrics_count(skb, p, DP_REASON_EVENT_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->size = sizeof(*e);
	e->type = type;
	e->reason = reason;
	e->src_ep_id = p->src_ep ? p->src_ep->ep_id : 0;
	e->dst_ep_id = p->dst_ep ? p->dst_ep->ep_id : 0;
	e->src_identity = p->src_ep ? p->src_ep->identity : p->src_identity;
	e->dst_identity = p->dst_identity;
	e->ifindex = skb->ifindex;
	e->len = skb->len;
	e->ts_ns = bpf_ktime_get_ns();
	e->family = p->tuple.family;
	e->proto = p->tuple.proto;
	e->sport = p->tuple.sport;
	e->dport = p->tuple.dport;
	e->direction = p->direction;
	e->tcp_flags = p->tuple.proto == IPPROTO_TCP ? p->tcp_flags : 0;
	if (p->tuple.proto == IPPROTO_ICMP || p->tuple.proto == IPPROTO_ICMPV6) {
		e->icmp_type = p->icmp_type;
		e->icmp_code = p->icmp_code;
	}
	__builtin_memcpy(e->saddr, p->tuple.saddr, sizeof(e->saddr));
	__builtin_memcpy(e->daddr, p->tuple.daddr, sizeof(e->daddr));
	/* the policy's verdict: in its own event and in a policy drop (a
	 * trace, or another drop after the policy allowed, does not repeat it) */
	if (type == DP_EVENT_POLICY || reason == DP_REASON_DROP_POLICY) {
		e->policy_rule = p->policy_rule;
		e->policy_match = p->policy_match;
		e->policy_dir = p->policy_dir;
	}
	if (xaddr) { /* the source after masquerading (fibril_to_netdev) */
		__builtin_memcpy(e->saddr_xlated, xaddr, sizeof(e->saddr_xlated));
		e->sport_xlated = xport;
		e->xlated = 1;
	}
	/* a wakeup per record would cost the reader a syscall per packet */
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&dp_events, BPF_RB_AVAIL_DATA) >= DP_EVENTS_WAKEUP_BYTES
				      ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void event_send(struct __sk_buff *skb, struct pkt *p, __u8 type,
				       __u8 reason)
{
	event_send_xlated(skb, p, type, reason, 0, 0);
}

/* The per-CPU token bucket of drop events: 1 when this one may go. */
static __always_inline int drop_event_allowed(void)
{
	__u32 zero = 0;
	const struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg || cfg->event_rate == 0)
		return 1;
	struct dp_evlimit *b = bpf_map_lookup_elem(&dp_evlimit, &zero);
	if (!b)
		return 1;
	__u64 cost = 1000000000ull / cfg->event_rate;
	__u64 burst = cfg->event_burst ? cfg->event_burst : 1;
	__u64 cap = cost * burst;
	__u64 now = bpf_ktime_get_ns();
	__u64 credit = b->credit_ns;
	__u64 elapsed = now - b->last_ns;
	/* per-CPU: no other writer on this CPU while we run */
	b->last_ns = now;
	credit = elapsed >= cap || credit + elapsed >= cap ? cap : credit + elapsed;
	if (credit >= cost) {
		b->credit_ns = credit - cost;
		return 1;
	}
	b->credit_ns = credit;
	return 0;
}

#endif /* FIBRIL_BPF_LIB_EVENTS_H */
