/* bpf/lib/policy.h - network policy: policy_verdict(), the hook at both
 * enforcement points, over dp_policy (an LPM trie of (endpoint, direction,
 * remote identity, protocol, port)) and dp_policy_ep (the directions each
 * endpoint enforces). p->direction says which point:
 *   DP_DIR_FROM_ENDPOINT (host veth ingress): the EGRESS policy of the
 *     sending endpoint p->src_ep towards p->dst_identity, and, when the
 *     destination is a local endpoint p->dst_ep (its packets are
 *     redirected into that pod and never pass fibril_to_endpoint), that
 *     endpoint's INGRESS policy from the sender's identity;
 *   DP_DIR_TO_ENDPOINT (host veth egress), and likewise
 *   DP_DIR_FROM_OVERLAY and DP_DIR_FROM_NETDEV (redirected into the pod):
 *     the INGRESS policy of p->dst_ep from p->src_identity.
 * A packet whose reverse flow this same enforcement point recorded in
 * conntrack (lib/conntrack.h: the entries are per point) is the reply of a
 * flow that point allowed: it passes that point (a one-way policy does not
 * break TCP); an entry made anywhere else for the same addresses - a
 * spoofed packet delivered to another pod - is no reply here.
 * A direction no policy selects (dp_policy_ep) allows everything.
 *
 * Contract of policy_verdict(skb, p):
 *   - expects the tuple final (it may call ct_lookup(), which caches),
 *     p->src_ep (from-endpoint) and p->dst_ep set as the hook found them,
 *     and the identity an enforced check reads not lazy: p->dst_identity
 *     for a sender's egress check, p->src_identity for an ingress check
 *     (the hooks look them up first when policy_enforced() says so);
 *   - reads dp_policy_ep and, only when a direction is enforced, that
 *     point's conntrack (ct_lookup(p, dir)), p->tuple (protocol, destination port, ICMP type) and
 *     dp_policy;
 *   - writes p->policy_match, policy_dir and policy_rule of the deciding
 *     check, the deciding entry's hit counter (atomic) and, for an allowed
 *     new flow when dp_config asks (DP_CFG_F_POLICY_VERDICT), a
 *     DP_EVENT_POLICY (which resolves p's lazy fields);
 *   - returns 0 to allow or DP_REASON_DROP_POLICY, which the caller drops
 *     with (the drop event then carries the policy fields).
 */
#ifndef FIBRIL_BPF_LIB_POLICY_H
#define FIBRIL_BPF_LIB_POLICY_H

#include <linux/in.h>
#include <linux/in6.h>

#include "conntrack.h"
#include "events.h"

/* The entry of (ep, dir, identity) that matches the packet, or NULL. */
static __always_inline struct dp_policy_value *policy_lookup(__u16 ep_id, __u8 dir,
							    __u32 identity, const struct pkt *p)
{
	struct dp_policy_key k = {
		.prefixlen = DP_POLICY_PREFIX_FULL,
		.ep_id = ep_id,
		.direction = dir,
		.identity = identity,
		.proto = p->tuple.proto,
		.dport = p->tuple.dport,
	};
	return bpf_map_lookup_elem(&dp_policy, &k);
}

/* 1 when endpoint ep_id enforces a policy in direction dir (one array
 * lookup: an endpoint no policy selects pays nothing more). */
static __always_inline int policy_enforced(__u16 ep_id, __u8 dir)
{
	__u32 idx = ep_id;
	const struct dp_policy_ep *pe = bpf_map_lookup_elem(&dp_policy_ep, &idx);
	__u32 need = dir == DP_POLICY_INGRESS ? DP_POLICY_EP_F_INGRESS : DP_POLICY_EP_F_EGRESS;

	return pe && (pe->flags & need);
}

/* 1 when dp_config asks for policy verdict events of allowed new flows. */
static __always_inline int policy_verdicts_enabled(void)
{
	__u32 zero = 0;
	const struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);

	return cfg && (cfg->flags & DP_CFG_F_POLICY_VERDICT);
}

/* One endpoint's policy in one direction towards (or from) remote. What
 * decided goes into p (policy_match, policy_dir, policy_rule: the drop or
 * trace event names it); an allowed new flow (new_flow) also sends a
 * DP_EVENT_POLICY when dp_config asks for them. */
static __always_inline int policy_check(struct __sk_buff *skb, struct pkt *p, __u16 ep_id,
					__u8 dir, __u32 remote, int new_flow)
{
	if (!policy_enforced(ep_id, dir))
		return 0;
	struct dp_policy_value *exact = policy_lookup(ep_id, dir, remote, p);
	struct dp_policy_value *any = remote ? policy_lookup(ep_id, dir, 0, p) : 0;
	struct dp_policy_value *v;

	p->policy_dir = dir;
	/* a deny found either way wins */
	if (exact && (exact->flags & DP_POLICY_F_DENY))
		v = exact;
	else if (any && (any->flags & DP_POLICY_F_DENY))
		v = any;
	else
		v = exact ? exact : any;
	if (!v) {
		p->policy_match = DP_POLICY_MATCH_DEFAULT_DENY;
		p->policy_rule = 0;
		return DP_REASON_DROP_POLICY;
	}
	__sync_fetch_and_add(&v->packets, 1);
	p->policy_rule = v->rule_id;
	if (v->flags & DP_POLICY_F_DENY) {
		p->policy_match = DP_POLICY_MATCH_DENY;
		return DP_REASON_DROP_POLICY;
	}
	p->policy_match = DP_POLICY_MATCH_ALLOW;
	if (new_flow && policy_verdicts_enabled())
		event_send(skb, p, DP_EVENT_POLICY, DP_REASON_POLICY_ALLOWED);
	return 0;
}

#define FLOW_NEW 0
#define FLOW_ESTABLISHED 1 /* this point has the packet's own flow */
#define FLOW_REPLY 2       /* this point recorded the reverse flow only */

/* Whether the packet opens a flow at enforcement point dir, belongs to one
 * that point knows, or goes the reverse way of one that point recorded (a
 * reply: endpoint E's ingress honours X -> E only if E's egress opened
 * E -> X, E's egress honours E -> X only if E's ingress admitted X -> E,
 * never an entry some other hook made for the same addresses). An ICMP
 * echo request is never a reply: ICMP flows carry no ports, so pod b's ping
 * of pod c would otherwise let every ping from c to b through as its
 * "reply". */
static __always_inline int policy_flow_state(struct pkt *p, __u8 dir)
{
	ct_lookup(p, dir); /* conntrack() then uses the same answer */
	if (p->ct_state[dir] == CT_FORWARD)
		return FLOW_ESTABLISHED;
	if ((p->tuple.proto == IPPROTO_ICMP && p->icmp_type == 8) ||
	    (p->tuple.proto == IPPROTO_ICMPV6 && p->icmp_type == 128))
		return FLOW_NEW;
	return p->ct_state[dir] == CT_REPLY ? FLOW_REPLY : FLOW_NEW;
}

static __always_inline int policy_verdict(struct __sk_buff *skb, struct pkt *p)
{
	int reason, flow;

	if (p->direction == DP_DIR_FROM_ENDPOINT) {
		if (!p->src_ep)
			return 0;
		/* read before policy_check(): its event may resolve the packet's
		 * lazy fields, and the verifier then cannot tell src_ep is set */
		__u32 src_identity = p->src_ep->identity;
		__u16 src_id = p->src_ep->ep_id;
		/* no conntrack lookups for a point no policy concerns */
		if (policy_enforced(src_id, DP_POLICY_EGRESS)) {
			flow = policy_flow_state(p, CT_EGRESS);
			if (flow != FLOW_REPLY) {
				reason = policy_check(skb, p, src_id, DP_POLICY_EGRESS,
						      p->dst_identity, flow == FLOW_NEW);
				if (reason)
					return reason;
			}
		}
		if (!p->dst_ep || !policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS))
			return 0;
		ct_lookup(p, CT_EGRESS); /* conntrack() needs it anyway; it orders
					  * the ingress point's lookups */
		flow = policy_flow_state(p, CT_INGRESS);
		if (flow == FLOW_REPLY || !p->dst_ep)
			return 0;
		return policy_check(skb, p, p->dst_ep->ep_id, DP_POLICY_INGRESS, src_identity,
				    flow == FLOW_NEW);
	}
	if (!p->dst_ep || !policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS))
		return 0;
	flow = policy_flow_state(p, CT_INGRESS);
	if (flow == FLOW_REPLY || !p->dst_ep)
		return 0;
	return policy_check(skb, p, p->dst_ep->ep_id, DP_POLICY_INGRESS, p->src_identity,
			    flow == FLOW_NEW);
}

#endif /* FIBRIL_BPF_LIB_POLICY_H */
