/* bpf/lib/egressgw.h - the egress gateway (issue 24, Cilium's
 * CiliumEgressGatewayPolicy with several gateways): dp_egress (layout in
 * ../fibril_dp.h, written by the egressgw module through the datapath's
 * egress_sync op), the way from a selected pod to its gateway node and
 * the gateway's choice of source address.
 *
 * Contract:
 *   - egw_lookup(identity, daddr): the policy's entry for a flow from
 *     that identity to that IPv4 destination, or NULL (none, or an
 *     excludedCIDR); reads dp_egress only;
 *   - egw_outside(p): 1 when the destination is outside the cluster (no
 *     ipcache entry flagged cluster, host or remote-node): the only
 *     destinations a policy sends to a gateway; reads dp_ipcache;
 *   - egw_from_endpoint(skb, p, ttl, ip4): from_endpoint, after policy
 *     and conntrack, for a destination that is no local endpoint: a
 *     selected flow (IPv4, outside the cluster) whose chosen gateway is
 *     another node leaves toward it with its addresses untouched (tunnel
 *     mode: VXLAN to the gateway, VNI the sender's identity; native: the
 *     FIB's device toward the gateway's IP, bpf_redirect_neigh with the
 *     gateway as next hop); no live gateway: dropped
 *     (DP_REASON_DROP_EGW_NO_GATEWAY). Returns -1 for what it leaves to
 *     the caller (not selected, the gateway is this node, a TTL of 1),
 *     EGW_TUNNEL with *tv the tunnel endpoint for the caller's own
 *     forward_tunnel() (one copy of it in the program), else the verdict.
 *     The TTL is decremented only when it redirects (native);
 *   - egw_source(skb, p, src_ep, addr): to_netdev's choice, before
 *     masquerading: 1 with addr the egress IP when the flow is a policy's
 *     and this node is its gateway (a local pod whose chosen gateway is
 *     this node, or another node's pod sent here: this node is one of the
 *     policy's gateways), 0 when masquerading decides as usual (not a
 *     policy's flow), -1 when the packet passes untouched (a local pod's
 *     flow on its way to another gateway, another node's pod's flow of
 *     which this node is not a gateway). Another node's pod's flow is
 *     this gateway's only when it came from the node that hosts the pod
 *     (skb->mark DP_MARK_MAGIC_FROM_NODE, left by the two below): else
 *     EGW_RELAY_REFUSED, which to_netdev drops (DP_REASON_DROP_EGW_RELAY):
 *     anyone on the underlay could otherwise have a gateway SNAT a forged
 *     source to its egress IP and send it to the world;
 *   - egw_relay_from_tunnel(skb, p, family, outer): from_overlay, for a
 *     destination that is no local endpoint: the mark becomes
 *     DP_MARK_MAGIC_FROM_NODE (the identity kept) when the inner IPv4
 *     source's ipcache entry names the outer source as its node; reads
 *     dp_ipcache;
 *   - egw_relay_from_link(skb, p): from_netdev, for a destination that is
 *     no local endpoint, from another node's pod (the ipcache's identity,
 *     neither world nor remote-node): the mark DP_MARK_MAGIC_LINK_SOURCE
 *     with the low 24 bits of the frame's source MAC (from_netdev has no
 *     stack left for a FIB lookup); egw_source() then compares them with
 *     the FIB's next hop from the device it came in by toward the pod's
 *     node (the ipcache's tunnel endpoint: its HostIP): the node itself on
 *     a shared link, else the router toward it, the way the pod's node
 *     sends it (egw_from_endpoint's bpf_redirect_neigh); a next hop not
 *     resolved yet is no match. Reads dp_ipcache; egw_source() the FIB.
 *
 * Why that is enough: the VXLAN outer source and the frame's source MAC
 * are what the node that hosts the pod puts on the wire; forging them
 * takes spoofing a node's underlay IP or MAC, which the operator's
 * underlay filtering must already stop (VXLAN only from node IPs).
 */
#ifndef FIBRIL_BPF_LIB_EGRESSGW_H
#define FIBRIL_BPF_LIB_EGRESSGW_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>

#include "encap.h"
#include "forward.h"
#include "identity.h"
#include "verdict.h"

static __always_inline const struct dp_egress_value *egw_lookup(__u32 identity, const __u8 *daddr)
{
	struct dp_egress_key k = {.prefixlen = DP_EGRESS_PREFIX_HDR + 32, .identity = identity};
	__builtin_memcpy(k.daddr, daddr, 4);
	const struct dp_egress_value *v = bpf_map_lookup_elem(&dp_egress, &k);
	if (!v || (v->flags & DP_EGRESS_F_EXCLUDED))
		return 0;
	return v;
}

static __always_inline int egw_outside(const struct pkt *p)
{
	return !ipcache_in_cluster(ipcache_of(p->tuple.family, p->tuple.daddr));
}

#define EGW_TUNNEL (-2) /* egw_from_endpoint: into the tunnel, toward *tv */

static __always_inline int egw_from_endpoint(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
					     struct iphdr *ip4, struct dp_ipcache_value *tv)
{
	if (p->tuple.family != DP_FAMILY_IPV4 || !p->src_ep)
		return -1;
	const struct dp_egress_value *v = egw_lookup(p->src_ep->identity, p->tuple.daddr);
	if (!v || (v->flags & DP_EGRESS_F_LOCAL) || !egw_outside(p))
		return -1;
	if (v->flags & DP_EGRESS_F_NO_GATEWAY)
		return drop(skb, p, DP_REASON_DROP_EGW_NO_GATEWAY);
	if (*ttl <= 1)
		return -1; /* the stack answers time exceeded */
	__u8 gw[4];
	__builtin_memcpy(gw, v->gateway, 4);
	if (p->tun_ifindex) {
		/* the caller's one forward_tunnel() takes it (inlined once) */
		__builtin_memset(tv, 0, sizeof(*tv));
		tv->tunnel_family = DP_FAMILY_IPV4;
		__builtin_memcpy(tv->tunnel_ip, gw, 4);
		metrics_count(skb, p, DP_REASON_EGW_REDIRECT);
		return EGW_TUNNEL;
	}
	struct bpf_fib_lookup fib;
	__builtin_memset(&fib, 0, sizeof(fib));
	fib.family = 2; /* AF_INET */
	fib.ifindex = skb->ifindex;
	fib.l4_protocol = p->tuple.proto;
	__builtin_memcpy(&fib.ipv4_dst, gw, 4);
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return drop(skb, p, DP_REASON_DROP_EGW_NO_GATEWAY);
	ttl_decrement(ttl, ip4);
	skb->mark = DP_MARK_MAGIC_FORWARDED; /* to its gateway: fibril_to_netdev passes it */
	struct bpf_redir_neigh nh;
	__builtin_memset(&nh, 0, sizeof(nh));
	nh.nh_family = 2;
	nh.ipv4_nh = fib.ipv4_dst; /* the gateway, or the router toward it */
	long out = bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	if (out != TC_ACT_REDIRECT)
		return drop(skb, p, DP_REASON_DROP_REDIRECT);
	metrics_count(skb, p, DP_REASON_EGW_REDIRECT);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_EGW_REDIRECT);
	return (int)out;
}

#define EGW_RELAY_REFUSED (-2) /* egw_source: not from the source pod's node */

static __always_inline void egw_relay_mark(struct __sk_buff *skb, __u32 identity)
{
	skb->mark = (identity << DP_MARK_IDENTITY_SHIFT) | DP_MARK_MAGIC_FROM_NODE;
}

static __always_inline void egw_relay_from_tunnel(struct __sk_buff *skb, const struct pkt *p,
						  __u8 outer_family, const __u8 *outer)
{
	if (p->tuple.family != DP_FAMILY_IPV4)
		return;
	const struct dp_ipcache_value *ic = ipcache_of(DP_FAMILY_IPV4, p->tuple.saddr);
	if (!ic || ic->tunnel_family != outer_family)
		return;
	/* word by word, through memcpy: outer is a byte array on the stack,
	 * where the verifier refuses a misaligned load */
	__u32 a[4], b[4];
	__builtin_memcpy(a, ic->tunnel_ip, 16);
	__builtin_memcpy(b, outer, 16);
	if (a[0] != b[0])
		return;
	if (outer_family == DP_FAMILY_IPV6 && (a[1] != b[1] || a[2] != b[2] || a[3] != b[3]))
		return;
	egw_relay_mark(skb, p->src_identity);
}

static __always_inline void egw_relay_from_link(struct __sk_buff *skb, const struct pkt *p)
{
	if (!p->egw_gateway || p->tuple.family != DP_FAMILY_IPV4)
		return;
	__u32 id = p->host_routing ? p->src_identity : identity_of(DP_FAMILY_IPV4, p->tuple.saddr);
	if (id <= DP_IDENTITY_WORLD || id == DP_IDENTITY_REMOTE_NODE)
		return;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return;
	__u32 mac24 = (__u32)eth->h_source[3] << 16 | (__u32)eth->h_source[4] << 8 | eth->h_source[5];
	skb->mark = (mac24 << DP_MARK_IDENTITY_SHIFT) | DP_MARK_MAGIC_LINK_SOURCE;
}

/* The packet of another node's pod (ic: its source's ipcache entry) came
 * from that pod's node: the overlay said so, or the frame's source MAC
 * (its low 24 bits, in the mark) is the FIB's next hop from the device it
 * came in by toward the node. */
static __always_inline int egw_relay_from_pod_node(struct __sk_buff *skb,
						   const struct dp_ipcache_value *ic)
{
	__u32 mark;

	/* one load at the context's own address (mark_identity() says why) */
	asm volatile("%0 = *(u32 *)(%1 + %2)"
		     : "=r"(mark)
		     : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, mark)));
	if ((mark & DP_MARK_MAGIC_MASK) == DP_MARK_MAGIC_FROM_NODE)
		return 1;
	if ((mark & DP_MARK_MAGIC_MASK) != DP_MARK_MAGIC_LINK_SOURCE ||
	    ic->tunnel_family != DP_FAMILY_IPV4)
		return 0;
	__u32 in = skb->ingress_ifindex;
	struct bpf_fib_lookup fib;
	__builtin_memset(&fib, 0, sizeof(fib));
	fib.family = 2; /* AF_INET */
	fib.ifindex = in;
	__builtin_memcpy(&fib.ipv4_dst, ic->tunnel_ip, 4);
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS ||
	    fib.ifindex != in)
		return 0;
	__u32 mac24 = (__u32)fib.dmac[3] << 16 | (__u32)fib.dmac[4] << 8 | fib.dmac[5];
	return mac24 == mark >> DP_MARK_IDENTITY_SHIFT;
}

static __always_inline int egw_source(struct __sk_buff *skb, const struct pkt *p,
				      const struct dp_endpoint_info *src_ep, __u8 *addr)
{
	if (p->tuple.family != DP_FAMILY_IPV4)
		return 0;
	const struct dp_ipcache_value *ic = 0;
	__u32 id;
	if (src_ep) {
		id = src_ep->identity;
	} else {
		ic = ipcache_of(DP_FAMILY_IPV4, p->tuple.saddr);
		id = ic ? ic->identity : DP_IDENTITY_WORLD;
	}
	if (id <= DP_IDENTITY_WORLD)
		return 0;
	const struct dp_egress_value *v = egw_lookup(id, p->tuple.daddr);
	if (!v || !egw_outside(p))
		return 0;
	if (src_ep && !(v->flags & DP_EGRESS_F_LOCAL))
		return -1; /* a local pod's, on its way to its gateway */
	__u32 e;
	__builtin_memcpy(&e, v->egress_ip, 4);
	if (!e)
		return -1; /* not one of the policy's gateways */
	if (ic && !egw_relay_from_pod_node(skb, ic))
		return EGW_RELAY_REFUSED; /* not from the pod's own node */
	__builtin_memset(addr, 0, 16);
	__builtin_memcpy(addr, v->egress_ip, 4);
	return 1;
}

#endif /* FIBRIL_BPF_LIB_EGRESSGW_H */
