/* bpf/lib/metrics.h - metrics_count(): one packet into dp_metrics.
 *
 * Contract: reads p->direction and skb->len; adds one packet and skb->len
 * bytes to this CPU's slot DP_METRICS_INDEX(reason, p->direction) (plain
 * adds: a per-CPU array has no other writer while the program runs, and a
 * lookup never inserts); returns nothing. A verdict counts its packet once
 * under its reason; the events' own accounting (DP_REASON_EVENT_SUPPRESSED,
 * DP_REASON_EVENT_LOST) comes on top.
 */
#ifndef FIBRIL_BPF_LIB_METRICS_H
#define FIBRIL_BPF_LIB_METRICS_H

#include "pkt.h"

/* One packet in its (direction, reason) slot: a per-CPU array, so the
 * lookup is inlined by the verifier and nothing is ever inserted. */
static __always_inline void metrics_count(struct __sk_buff *skb, const struct pkt *p,
					 __u8 reason)
{
	__u32 index = DP_METRICS_INDEX(reason, p->direction);
	struct dp_metrics_value *v = bpf_map_lookup_elem(&dp_metrics, &index);

	if (v) {
		/* per-CPU: no other writer on this CPU while we run */
		v->packets += 1;
		v->bytes += skb->len;
	}
}

#endif /* FIBRIL_BPF_LIB_METRICS_H */
