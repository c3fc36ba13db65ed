/* bpf/from_netdev.bpf.h - fibril_from_netdev, host-routing = bpf, the
 * receiving half (native mode): section tc, attached to the clsact INGRESS
 * of the node's underlay devices (those with an address) when [datapath]
 * host-routing = bpf. Included once, by fibril_dp.bpf.c.
 *
 * A packet addressed to this node (PACKET_HOST) for a local endpoint is
 * checked against that endpoint's ingress policy with the source's identity
 * from the ipcache (as fibril_to_endpoint would; looked up only when that
 * policy, a new flow or an event needs it: LAZY_SRC_ID, lib/identity.h),
 * counted in conntrack, its TTL decremented and redirected straight into
 * the pod (bpf_redirect_peer: the node's stack and the veth's egress are
 * skipped); everything else (the node's own traffic, ARP, ND, a TTL of 1)
 * goes on to the stack untouched and uncounted. With host-routing off (the
 * flag cleared in dp_config) it passes everything. Passing is
 * TC_ACT_UNSPEC, not TC_ACT_OK: the next filter on the device (the lb
 * module's NodePort program) still runs. Returns TC_ACT_UNSPEC, a redirect
 * into the pod or TC_ACT_SHOT (the policy).
 */
#ifndef FIBRIL_BPF_FROM_NETDEV_BPF_H
#define FIBRIL_BPF_FROM_NETDEV_BPF_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/conntrack.h"
#include "lib/forward.h"
#include "lib/frag.h"
#include "lib/identity.h"
#include "lib/parse.h"
#include "lib/policy.h"

static __always_inline int netdev_ip(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				     struct iphdr *ip4)
{
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (!p->dst_ep || *ttl <= 1)
		return TC_ACT_UNSPEC;
	p->dst_identity = p->dst_ep->identity;
	/* the source's identity (an ipcache walk) only when the pod's ingress
	 * policy needs it; else when a new flow or an event does */
	if (policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS))
		p->src_identity = identity_of(p->tuple.family, p->tuple.saddr);
	else
		p->lazy |= LAZY_SRC_ID;
	frag_resolve(p);
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	if (conntrack(skb, p) < 0)
		return drop(skb, p, DP_REASON_DROP_CT_FULL);
	ttl_decrement(ttl, ip4);
	return forward_local(skb, p);
}

SEC("tc")
int fibril_from_netdev(struct __sk_buff *skb)
{
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	p.direction = DP_DIR_FROM_NETDEV;
	pkt_config(&p);
	if (!p.host_routing || skb->pkt_type != 0 /* PACKET_HOST */)
		return TC_ACT_UNSPEC;
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return TC_ACT_UNSPEC;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if (ipv4_parse(skb, &p, ip, data_end) < 0)
			return TC_ACT_UNSPEC;
		return netdev_ip(skb, &p, &ip->ttl, ip);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (ipv6_parse(skb, &p, ip6, data_end) < 0 || p.is_icmp6_nd)
			return TC_ACT_UNSPEC;
		return netdev_ip(skb, &p, &ip6->hop_limit, 0);
	}
	return TC_ACT_UNSPEC;
}

#endif /* FIBRIL_BPF_FROM_NETDEV_BPF_H */
