/* bpf/lib/identity.h - who a packet's ends are: the local endpoint of an
 * address (dp_endpoints), the ipcache's longest prefix and its identity
 * (dp_ipcache), the identity another node's packet left in skb->mark, and
 * pkt_resolve(), which does the lookups a hook left lazy (see pkt.h).
 *
 * Contract:
 *   - endpoint_of(), ipcache_of(), identity_of(family, addr): map reads
 *     of a 16-byte address (IPv4 in its first 4 bytes); NULL when there is
 *     no entry, DP_IDENTITY_WORLD for identity_of(); nothing written;
 *   - mark_identity(skb): reads skb->mark (one load at the context's own
 *     address: see there why); 0 when the mark carries no identity
 *     (DP_MARK_MAGIC_IDENTITY or DP_MARK_MAGIC_FROM_NODE in its low
 *     byte);
 *   - pkt_resolve_src(skb, p): writes p->src_ep and p->src_identity (a
 *     local endpoint's own, else the mark's, else the ipcache's for the
 *     source) and clears LAZY_SRC;
 *   - pkt_resolve(skb, p): for each LAZY_* bit set in p->lazy the lookup
 *     it stands for (on the tuple as it is), then clears the bit; a second
 *     call does nothing. It may change p->src_ep, which the verifier then
 *     no longer knows to be set: a caller that needs p->src_ep after an
 *     event (which resolves) reads what it needs before.
 */
#ifndef FIBRIL_BPF_LIB_IDENTITY_H
#define FIBRIL_BPF_LIB_IDENTITY_H

#include "pkt.h"

static __always_inline const struct dp_endpoint_info *endpoint_of(__u8 family, const __u8 *addr)
{
	struct dp_endpoint_key key = {.family = family};

	__builtin_memcpy(key.addr, addr, 16);
	return bpf_map_lookup_elem(&dp_endpoints, &key);
}

/* The ipcache's longest prefix holding addr, or NULL. */
static __always_inline const struct dp_ipcache_value *ipcache_of(__u8 family, const __u8 *addr)
{
	struct dp_ipcache_key key = {
		.prefixlen = DP_IPCACHE_PREFIX_HDR + (family == DP_FAMILY_IPV4 ? 32 : 128),
		.family = family,
	};

	__builtin_memcpy(key.addr, addr, 16);
	return bpf_map_lookup_elem(&dp_ipcache, &key);
}

/* An ipcache entry inside the cluster (a pod CIDR, a node, this node):
 * never masqueraded, never an egress gateway's (lib/nat.h, lib/egressgw.h). */
static __always_inline int ipcache_in_cluster(const struct dp_ipcache_value *ic)
{
	return ic && ((ic->flags & DP_IPCACHE_F_CLUSTER) || ic->identity == DP_IDENTITY_HOST ||
		      ic->identity == DP_IDENTITY_REMOTE_NODE);
}

static __always_inline __u32 identity_of(__u8 family, const __u8 *addr)
{
	const struct dp_ipcache_value *v = ipcache_of(family, addr);
	return v ? v->identity : DP_IDENTITY_WORLD;
}

/* The source identity the overlay program left in the mark, 0 when none. */
static __always_inline __u32 mark_identity(const struct __sk_buff *skb)
{
	__u32 mark;

	/* one load at the context's own address: the compiler may otherwise
	 * keep &skb->mark (ctx + 8) in a register or on the stack when this
	 * is inlined into a lazy path, and the verifier refuses a load
	 * through a modified ctx pointer */
	asm volatile("%0 = *(u32 *)(%1 + %2)"
		     : "=r"(mark)
		     : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, mark)));
	if ((mark & DP_MARK_MAGIC_ANY_IDENTITY) != DP_MARK_MAGIC_IDENTITY)
		return 0; /* neither DP_MARK_MAGIC_IDENTITY nor _FROM_NODE */
	return mark >> DP_MARK_IDENTITY_SHIFT;
}

/* The to-endpoint program's sender: a local endpoint's own identity; else
 * the one another node's packet carried in its VNI (left in the mark by
 * fibril_from_overlay); only then the ipcache's answer for the source IP. */
static __always_inline void pkt_resolve_src(struct __sk_buff *skb, struct pkt *p)
{
	p->lazy &= ~LAZY_SRC;
	p->src_ep = endpoint_of(p->tuple.family, p->tuple.saddr);
	if (p->src_ep)
		p->src_identity = p->src_ep->identity;
	else if (!(p->src_identity = mark_identity(skb)))
		p->src_identity = identity_of(p->tuple.family, p->tuple.saddr);
}

/* Do the lookups the fast path left out (p->lazy). */
static __always_inline void pkt_resolve(struct __sk_buff *skb, struct pkt *p)
{
	if (p->lazy & LAZY_SRC)
		pkt_resolve_src(skb, p);
	if (p->lazy & LAZY_DST_ID) {
		p->lazy &= ~LAZY_DST_ID;
		p->dst_identity = identity_of(p->tuple.family, p->tuple.daddr);
	}
	if (p->lazy & LAZY_SRC_ID) {
		p->lazy &= ~LAZY_SRC_ID;
		p->src_identity = identity_of(p->tuple.family, p->tuple.saddr);
	}
}

#endif /* FIBRIL_BPF_LIB_IDENTITY_H */
