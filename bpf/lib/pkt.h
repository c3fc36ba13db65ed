/* bpf/lib/pkt.h - struct pkt, what the datapath knows about one packet,
 * and pkt_config(): the state every stage reads and writes, one on the
 * program's stack per run.
 *
 * Contract:
 *   - the program zeroes it, sets p.direction (enum dp_direction: which
 *     hook) and calls pkt_config() before any stage. The stages rely on the
 *     zeroes: an IPv4 address fills 4 of the tuple's 16 bytes and the tuple
 *     is a map key (the rest and the pad must be 0); frag starts FRAG_NONE,
 *     ct_state CT_UNKNOWN, lazy 0, src_ep / dst_ep / ct NULL, the
 *     identities DP_IDENTITY_UNKNOWN;
 *   - pkt_config() reads dp_config once and writes trace, tun_ifindex,
 *     tun_port, host_routing, masquerade, egw_gateway and ct_refresh_s (1 when the map has no entry);
 *   - parse (parse.h) writes the tuple, l4_off, frag, frag_id, tcp_flags,
 *     icmp_type and is_icmp6_nd; after it only frag_resolve() (frag.h) may
 *     change the tuple;
 *   - the conntrack cache (ct[], ct_state[], one per enforcement point:
 *     [CT_EGRESS] the sender's, [CT_INGRESS] the local receiver's):
 *     CT_UNKNOWN until ct_lookup() (conntrack.h), which looks up at most
 *     once per packet and point and answers for the tuple as it was then,
 *     so the tuple is final before the first ct_lookup() (policy_verdict()'s
 *     or conntrack()'s, whichever comes first). After it p->ct[d] is the
 *     entry exactly when ct_state[d] is CT_FORWARD or CT_REPLY; an entry
 *     conntrack() creates for a new flow is not cached (ct_state stays
 *     CT_NEW, ct NULL);
 *   - the lazy lookups (lazy, LAZY_*): a hook leaves out a lookup the
 *     established flow's fast path does not need by setting its bit instead
 *     of the field, which is then not valid (0 / NULL) until pkt_resolve()
 *     (identity.h) fills it and clears the bit. What reads a field that may
 *     be lazy calls pkt_resolve() first (event_send()); policy_verdict() reads the fields as they are, so a hook sets a
 *     bit only when policy_enforced() says no check will read that field;
 *   - src_ep, once set by fibril_from_endpoint's source check, is the
 *     endpoint behind this veth and stays so (that hook sets no LAZY_SRC);
 *   - policy_match, policy_dir, policy_rule: written by policy_check()
 *     (policy.h), read by event_send() for a policy event or a policy drop.
 */
#ifndef FIBRIL_BPF_LIB_PKT_H
#define FIBRIL_BPF_LIB_PKT_H

#include "maps.h"

struct pkt {
	struct dp_ct_key tuple;          /* family 0: ARP (no IP tuple) */
	const struct dp_endpoint_info *src_ep;
	const struct dp_endpoint_info *dst_ep;
	struct dp_ct_value *ct[2];       /* per enforcement point ([CT_EGRESS],
					  * [CT_INGRESS]): the flow's conntrack
					  * entry once ct_lookup() found it */
	__u32 dst_identity;
	__u32 src_identity;              /* when src_ep is not set (to-endpoint) */
	__u32 l4_off;                    /* offset of the L4 header in the skb */
	__u32 frag_id;                   /* when frag is set */
	__u32 tun_ifindex;               /* dp_config.tunnel_ifindex */
	__u32 ct_refresh_s;              /* dp_config.ct_refresh_s (0 counts as 1) */
	__u8 direction;                  /* enum dp_direction: which program */
	__u8 tcp_flags;
	__u8 is_icmp6_nd;                /* ICMPv6 neighbour discovery / MLD */
	__u8 frag;                       /* FRAG_* */
	__u8 icmp_type;                  /* ICMP / ICMPv6 type */
	__u8 icmp_code;                  /* ... and code */
	__u8 policy_match;               /* enum dp_policy_match: what policy_check() found */
	__u8 policy_dir;                 /* enum dp_policy_direction of that check */
	__u32 policy_rule;               /* the deciding entry's rule ID */
	__u8 trace;                      /* dp_config says: trace events */
	__u8 ct_state[2];                /* CT_* : what ct_lookup() found, per point */
	__u8 lazy;                       /* LAZY_*: what is not looked up yet */
	__u8 host_routing;               /* dp_config says: host-routing = bpf */
	__u8 masquerade;                 /* dp_config says: masquerade (from-netdev) */
	__u8 egw_gateway;                /* dp_config says: this node is an egress
					  * gateway (from-netdev) */
	__u16 tun_port;                  /* dp_config.tunnel_port (network order) */
};

/* ct_state: conntrack is looked up once per packet (ct_lookup), the policy's
 * "is it a reply?" and the counting share the answer. */
#define CT_UNKNOWN 0 /* not looked up yet */
#define CT_NEW 1     /* no entry either way */
#define CT_FORWARD 2 /* p->ct is the flow's entry, this packet goes its way */
#define CT_REPLY 3   /* p->ct is the entry of the reverse flow, as this
		      * same point recorded it */
#define CT_NONE 4    /* the packet has no such enforcement point */

/* lazy: lookups the fast path does without, done only when something needs
 * their answer (a policy, an event): see
 * pkt_resolve(). */
#define LAZY_SRC 0x1    /* src_ep / src_identity (to-endpoint) */
#define LAZY_DST_ID 0x2 /* dst_identity: the ipcache's (from-endpoint,
			 * native mode, no egress policy) */
#define LAZY_SRC_ID 0x4 /* src_identity: the ipcache's answer for the source
			 * (from-netdev, no ingress policy at the pod) */

/* The config the program reads per packet, once (dp_config). */
static __always_inline void pkt_config(struct pkt *p)
{
	__u32 zero = 0;
	const struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);

	if (!cfg) {
		p->ct_refresh_s = 1;
		return;
	}
	p->trace = (cfg->flags & DP_CFG_F_TRACE) != 0;
	p->tun_ifindex = cfg->tunnel_ifindex;
	p->tun_port = cfg->tunnel_port;
	p->host_routing = (cfg->flags & DP_CFG_F_HOST_ROUTING) != 0;
	p->masquerade = (cfg->flags & DP_CFG_F_MASQUERADE) != 0;
	p->egw_gateway = (cfg->flags & DP_CFG_F_EGW_GATEWAY) != 0;
	p->ct_refresh_s = cfg->ct_refresh_s ? cfg->ct_refresh_s : 1;
}

#define FRAG_NONE 0
#define FRAG_FIRST 1 /* offset 0, more fragments: carries the ports */
#define FRAG_LATER 2 /* offset > 0: no L4 header */

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_RST 0x04

#endif /* FIBRIL_BPF_LIB_PKT_H */
