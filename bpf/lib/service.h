/* bpf/lib/service.h - the service hook point, service_translate().
 *
 * Contract: fibril_from_endpoint calls it for every IP packet from an
 * endpoint, after the source check and frag_resolve(), before the
 * destination's lookup, policy_verdict() and conntrack (so all three would
 * see a translation; no ct_lookup() has run yet). It may rewrite the
 * destination (and, for the reply path, the source) of the packet and of
 * p->tuple, then return 0; or return a DP_REASON_DROP_* for the caller to
 * drop with. Today it reads and writes nothing and returns 0: there is no
 * NAT in this object, the lb module translates in its own programs (the
 * socket hooks and the NodePort tc programs, bpf/fibril_lb.bpf.c).
 */
#ifndef FIBRIL_BPF_LIB_SERVICE_H
#define FIBRIL_BPF_LIB_SERVICE_H

#include "pkt.h"

/* HOOK service_translate: the service load balancer goes here. It may
 * rewrite the destination (and, for the reply path, the source) of the
 * packet and of p->tuple, then return 0; or return a DP_REASON_DROP_* to
 * drop (e.g. a service without backends). Today: no services, no change. */
static __always_inline int service_translate(struct __sk_buff *skb, struct pkt *p)
{
	(void)skb;
	(void)p;
	return 0;
}

#endif /* FIBRIL_BPF_LIB_SERVICE_H */
