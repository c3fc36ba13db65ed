/* bpf/lib/encap.h - tunnel mode's way out: forward_tunnel() sends a packet
 * into the VXLAN device towards the node that hosts its destination.
 *
 * Contract of forward_tunnel(skb, p, ic, tun_ifindex): ic is the
 * destination's ipcache entry, with DP_IPCACHE_F_TUNNEL (tunnel_family and
 * tunnel_ip: the remote node), tun_ifindex the external VXLAN device
 * (dp_config.tunnel_ifindex), the TTL already decremented. Reads p->src_ep
 * (its identity is the VNI; 0 without one); sets the skb's tunnel key (the
 * packet's bytes, its MACs too, stay as they are) and bpf_redirect()s it
 * into tun_ifindex; counts DP_REASON_TO_TUNNEL (a trace event when
 * p->trace) and returns bpf_redirect()'s verdict, or drops
 * (DP_REASON_DROP_TUNNEL) when the key cannot be set.
 */
#ifndef FIBRIL_BPF_LIB_ENCAP_H
#define FIBRIL_BPF_LIB_ENCAP_H

#include <bpf/bpf_endian.h>

#include "verdict.h"

/* Tunnel mode: into the VXLAN device (external, collect-metadata) with
 * the remote node as the outer destination and the sender's identity as
 * the VNI (Cilium's encap_and_redirect). The inner frame keeps its MACs:
 * the receiving node's overlay program delivers by IP. */
static __always_inline int forward_tunnel(struct __sk_buff *skb, struct pkt *p,
					  const struct dp_ipcache_value *ic, __u32 tun_ifindex)
{
	struct bpf_tunnel_key key;
	__u64 flags = BPF_F_ZERO_CSUM_TX;

	__builtin_memset(&key, 0, sizeof(key));
	key.tunnel_id = (p->src_ep ? p->src_ep->identity : 0) & DP_VNI_MAX;
	key.tunnel_ttl = 64;
	if (ic->tunnel_family == DP_FAMILY_IPV6) {
		/* network order, as stored: bpf_skb_set_tunnel_key copies an
		 * IPv6 remote as it is (only remote_ipv4 is host order); the
		 * UDP checksum is computed (IPv6 forbids a zero one) */
		__builtin_memcpy(key.remote_ipv6, ic->tunnel_ip, 16);
		flags = BPF_F_TUNINFO_IPV6;
	} else {
		__u32 a;
		__builtin_memcpy(&a, ic->tunnel_ip, 4);
		key.remote_ipv4 = bpf_ntohl(a);
	}
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), flags) < 0)
		return drop(skb, p, DP_REASON_DROP_TUNNEL);
	skb->mark = DP_MARK_MAGIC_FORWARDED; /* the outer packet: fibril_to_netdev passes it */
	int rc = bpf_redirect(tun_ifindex, 0);
	metrics_count(skb, p, DP_REASON_TO_TUNNEL);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_TO_TUNNEL);
	return rc;
}

#endif /* FIBRIL_BPF_LIB_ENCAP_H */
