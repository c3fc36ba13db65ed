/* bpf/to_netdev.bpf.h - fibril_to_netdev, masquerading (BPF SNAT), the
 * leaving half: section tc, attached to the clsact EGRESS of the node's
 * external devices (those with an address, as fibril_from_netdev's) when
 * [datapath] masquerade is on. Included once, by fibril_dp.bpf.c.
 *
 * A packet whose source is a local endpoint (dp_endpoints), leaving by
 * this device towards a destination outside the non-masquerade set
 * (nat_wanted(), lib/nat.h), gets the device's address (dp_nat_devs, the
 * family's) as its source and a port of its own for the flow (dp_nat, a
 * random start in dp_config's range, checked both ways); the reply is
 * translated back by fibril_from_netdev on the device's ingress and
 * delivered to the pod through the datapath (its policy and conntrack, as
 * any delivery). When no port is free for (destination, device address)
 * the packet is dropped, DP_REASON_DROP_NAT_NO_PORT, counted and named;
 * no mapping is ever reused or evicted. A pod holding its quota of
 * masqueraded flows (dp_nat_count, dp_config.nat_ep_max) gets no new one:
 * DP_REASON_DROP_NAT_QUOTA. Egress gateway (lib/egressgw.h): a flow an
 * egress gateway policy selects gets this gateway's egress IP instead of
 * the device's when this node is its gateway (the pod is local, or
 * another node sent it here), and passes untouched when it is a local
 * pod's on its way to another gateway. Another node's pod's packet is
 * SNATed only when it came from that pod's own node (the mark
 * DP_MARK_MAGIC_FROM_NODE, which fibril_from_overlay / fibril_from_netdev
 * left); one forged on the underlay or sent by another node is dropped,
 * DP_REASON_DROP_EGW_RELAY, never relayed to the world with the egress IP. An endpoint flagged
 * DP_EP_F_NO_MASQUERADE (its pod's label network.fibril.io/masquerade=
 * false) is never masqueraded to the device's address (an egress gateway
 * policy, explicit, still applies). With trace events on, a translated
 * packet sends a trace (DP_REASON_MASQUERADED or DP_REASON_EGW_SNAT)
 * naming the pod's tuple and the translated source (dp_event's
 * saddr_xlated / sport_xlated). What fibril_from_endpoint sent out
 * itself (DP_MARK_MAGIC_FORWARDED: another node's pod by the FIB's answer,
 * the tunnel's outer packets, a flow on its way to its egress gateway)
 * passes at once, its mark cleared, nothing looked up. Anything else (the
 * node's own traffic, encapsulated packets, cluster destinations) passes untouched
 * with TC_ACT_UNSPEC, so lb's filter after it (priority 2) still runs.
 * Returns TC_ACT_UNSPEC, TC_ACT_OK (translated) or TC_ACT_SHOT.
 */
#ifndef FIBRIL_BPF_TO_NETDEV_BPF_H
#define FIBRIL_BPF_TO_NETDEV_BPF_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/egressgw.h"
#include "lib/events.h"
#include "lib/frag.h"
#include "lib/metrics.h"
#include "lib/nat.h"
#include "lib/parse.h"
#include "lib/verdict.h"

SEC("tc")
int fibril_to_netdev(struct __sk_buff *skb)
{
	/* what fibril_from_endpoint sent out itself (another node's pod by
	 * the FIB, the tunnel's outer packet, a flow on its way to its egress
	 * gateway): nothing here is for it */
	if (skb->mark == DP_MARK_MAGIC_FORWARDED) {
		skb->mark = 0;
		return TC_ACT_UNSPEC;
	}
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	p.direction = DP_DIR_TO_NETDEV;
	__u32 zero = 0;
	const struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg || !(cfg->flags & DP_CFG_F_MASQUERADE))
		return TC_ACT_UNSPEC;
	p.ct_refresh_s = cfg->ct_refresh_s ? cfg->ct_refresh_s : 1;
	p.trace = (cfg->flags & DP_CFG_F_TRACE) != 0;
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return TC_ACT_UNSPEC;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if (ipv4_parse(skb, &p, (void *)(eth + 1), data_end) < 0)
			return TC_ACT_UNSPEC;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if (ipv6_parse(skb, &p, (void *)(eth + 1), data_end) < 0)
			return TC_ACT_UNSPEC;
	} else {
		return TC_ACT_UNSPEC;
	}
	p.src_ep = endpoint_of(p.tuple.family, p.tuple.saddr);
	/* an egress gateway policy's flow: this gateway's egress IP, or
	 * untouched on its way to another gateway (lib/egressgw.h) */
	__u8 addr[16];
	__u8 reason;
	int egw = egw_source(skb, &p, p.src_ep, addr);
	if (egw == EGW_RELAY_REFUSED) {
		reason = DP_REASON_DROP_EGW_RELAY;
		goto refuse;
	}
	if (egw < 0)
		return TC_ACT_UNSPEC;
	if (!egw) {
		if (!p.src_ep)
			return TC_ACT_UNSPEC; /* the node's own, or already translated */
		if (p.src_ep->flags & DP_EP_F_NO_MASQUERADE)
			return TC_ACT_UNSPEC; /* the pod opted out: it leaves as itself */
		__u32 ifindex = skb->ifindex;
		const struct dp_nat_dev *dev = bpf_map_lookup_elem(&dp_nat_devs, &ifindex);
		if (!dev)
			return TC_ACT_UNSPEC;
		__builtin_memset(addr, 0, sizeof(addr));
		if (p.tuple.family == DP_FAMILY_IPV4) {
			if (!(dev->flags & DP_NAT_DEV_F_IPV4))
				return TC_ACT_UNSPEC;
			__builtin_memcpy(addr, dev->addr4, 4);
		} else {
			if (!(dev->flags & DP_NAT_DEV_F_IPV6))
				return TC_ACT_UNSPEC;
			__builtin_memcpy(addr, dev->addr6, 16);
		}
	}
	/* a later fragment: the ports fibril_from_endpoint recorded from the
	 * first (dp_frags: what source-checked pods sent), and only a mapping
	 * the first fragment made */
	if (p.frag == FRAG_LATER) {
		struct dp_frag_ports fp;
		if (frag_sent_ports(&p, &fp) < 0)
			return TC_ACT_UNSPEC;
		p.tuple.sport = fp.sport;
		p.tuple.dport = fp.dport;
	}
	struct dp_nat_key k;
	if (nat_key_of(skb, &p, &k, DP_NAT_OUT) < 0)
		return TC_ACT_UNSPEC;
	if (p.frag == FRAG_LATER && !bpf_map_lookup_elem(&dp_nat, &k))
		return TC_ACT_UNSPEC;
	/* another node's pod is charged to slot 0 (the outside's) */
	__u16 ep_id = p.src_ep ? p.src_ep->ep_id : 0;
	if (!egw && !nat_wanted(&p, ep_id))
		return TC_ACT_UNSPEC;
	struct dp_nat_entry to;
	int got = nat_snat(&p, &k, addr, ep_id, cfg, &to);
	if (got < 0) {
		reason = got == -2 ? DP_REASON_DROP_NAT_QUOTA : DP_REASON_DROP_NAT_NO_PORT;
		goto refuse;
	}
	if (nat_rewrite(skb, p.tuple.family, p.tuple.proto, p.l4_off, 1, p.tuple.saddr, to.addr,
			k.sport, to.port, p.frag != FRAG_LATER) < 0)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	metrics_count(skb, &p, egw ? DP_REASON_EGW_SNAT : DP_REASON_MASQUERADED);
	/* a trace (trace-events on) names the pod's flow and the source it
	 * leaves with (Hubble's IP.source_xlated) */
	if (p.trace)
		event_send_xlated(skb, &p, DP_EVENT_TRACE,
				  egw ? DP_REASON_EGW_SNAT : DP_REASON_MASQUERADED, to.addr,
				  nat_is_icmp(p.tuple.proto) ? 0 : to.port);
	return TC_ACT_OK;
refuse: /* one drop() inlined for the three refusals */
	return drop(skb, &p, reason);
}

#endif /* FIBRIL_BPF_TO_NETDEV_BPF_H */
