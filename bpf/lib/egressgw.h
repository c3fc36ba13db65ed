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
 *   - egw_source(p, src_ep, addr): to_netdev's choice, before
 *     masquerading: 1 with addr the egress IP when the flow is a policy's
 *     and this node is its gateway (a local pod whose chosen gateway is
 *     this node, or another node's pod sent here: this node is one of the
 *     policy's gateways), 0 when masquerading decides as usual (not a
 *     policy's flow), -1 when the packet passes untouched (a local pod's
 *     flow on its way to another gateway, another node's pod's flow of
 *     which this node is not a gateway).
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
	const struct dp_ipcache_value *ic = ipcache_of(p->tuple.family, p->tuple.daddr);
	return !(ic && ((ic->flags & DP_IPCACHE_F_CLUSTER) || ic->identity == DP_IDENTITY_HOST ||
			ic->identity == DP_IDENTITY_REMOTE_NODE));
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

static __always_inline int egw_source(const struct pkt *p, const struct dp_endpoint_info *src_ep,
				      __u8 *addr)
{
	if (p->tuple.family != DP_FAMILY_IPV4)
		return 0;
	__u32 id = src_ep ? src_ep->identity : identity_of(DP_FAMILY_IPV4, p->tuple.saddr);
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
	__builtin_memset(addr, 0, 16);
	__builtin_memcpy(addr, v->egress_ip, 4);
	return 1;
}

#endif /* FIBRIL_BPF_LIB_EGRESSGW_H */
