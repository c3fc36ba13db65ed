/* bpf/lib/verdict.h - the two verdicts any stage may end a packet with,
 * drop() and to_stack(). The redirects are in forward.h, encap.h, fib.h
 * and nd.h; each hook's own pass verdict is in its hook file.
 *
 * Contract: both take the packet as far as it was parsed (an early drop
 * names what is known), count it in dp_metrics and return the TC_ACT_*
 * value for the program to return unchanged:
 *   - drop(skb, p, reason): counts reason (a DP_REASON_DROP_*), then sends
 *     a DP_EVENT_DROP when drop_event_allowed(), else counts
 *     DP_REASON_EVENT_SUPPRESSED; returns TC_ACT_SHOT;
 *   - to_stack(skb, p): counts DP_REASON_TO_STACK, a DP_EVENT_TRACE when
 *     p->trace; returns TC_ACT_OK (the node's stack takes the packet as
 *     it is).
 */
#ifndef FIBRIL_BPF_LIB_VERDICT_H
#define FIBRIL_BPF_LIB_VERDICT_H

#include <linux/pkt_cls.h>

#include "events.h"

static __always_inline int drop(struct __sk_buff *skb, struct pkt *p, __u8 reason)
{
	metrics_count(skb, p, reason);
	if (drop_event_allowed())
		event_send(skb, p, DP_EVENT_DROP, reason);
	else
		metrics_count(skb, p, DP_REASON_EVENT_SUPPRESSED);
	return TC_ACT_SHOT;
}

static __always_inline int to_stack(struct __sk_buff *skb, struct pkt *p)
{
	metrics_count(skb, p, DP_REASON_TO_STACK);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_TO_STACK);
	return TC_ACT_OK;
}

#endif /* FIBRIL_BPF_LIB_VERDICT_H */
