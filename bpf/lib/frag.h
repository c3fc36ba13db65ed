/* bpf/lib/frag.h - fragments: the first fragment of a TCP or UDP datagram
 * records its ports, the later ones (no L4 header) take them, as Cilium's
 * IPv4 fragment tracking (IPv6 fragments too).
 *
 * Contract of frag_resolve_sent(p) (fibril_from_endpoint, after the source
 * check) and frag_resolve(p) (the other hooks): read p->frag, frag_id and
 * the tuple as parse left them; a first fragment (FRAG_FIRST) writes its
 * ports and a later one (FRAG_LATER) takes the recorded ports into
 * p->tuple.sport / dport. Each in a map of its own: dp_frags for what a
 * source-checked pod sent, dp_frags_out for what comes from the node, the
 * underlay or another node (which nobody vouches for), so a spoofer can
 * neither plant ports for the pods' datagrams nor evict their entries.
 * Both hold slots, not datagrams: an entry is keyed by the sender's
 * address and one of DP_FRAGS_SLOTS slots (a hash of the IP ID and the
 * destination), the datagram's tag (that hash) kept with the ports and
 * compared. So a pod that sends first fragments of ever new datagrams as
 * fast as it can overwrites only its own slots and never pushes another
 * pod's entries out (the LRU evicts only when more than DP_FRAGS_MAX /
 * (2 * DP_FRAGS_SLOTS) pod addresses fragment at once, two protocols
 * each); in dp_frags_out the same holds for one outside source address
 * (a sender that forges ever new source addresses still fills it, but
 * only it: the pods' entries are in dp_frags).
 * Both return 0, or -1 for a later fragment whose first one was not seen
 * (or whose slot another datagram of the same sender took since; its
 * ports stay 0): fibril_from_endpoint drops it
 * (DP_REASON_DROP_FRAG_NOT_FOUND); the other hooks ignore the -1 (the
 * stack may have sent the first fragment another way). Called before
 * anything reads the ports (service, policy, conntrack).
 * frag_sent_ports(p, &ports): for fibril_to_netdev, what the first
 * fragment of p's datagram recorded in dp_frags. frag_resolve (in
 * fibril_from_netdev, whose stack has 8 bytes left) is the one that adds
 * nothing to the stack.
 */
#ifndef FIBRIL_BPF_LIB_FRAG_H
#define FIBRIL_BPF_LIB_FRAG_H

#include <linux/in.h>

#include "pkt.h"

/* The key of both maps: the sender's address and the datagram's slot
 * among its DP_FRAGS_SLOTS; returns the datagram's tag. */
static __always_inline __u32 frag_slot_key(const struct pkt *p, struct dp_frag_key *k)
{
	const __u32 *d = (const __u32 *)p->tuple.daddr;
	__u32 tag = (d[0] ^ d[1] ^ d[2] ^ d[3]) * 0xcc9e2d51u ^ p->frag_id;

	__builtin_memcpy(k->saddr, p->tuple.saddr, 16);
	__builtin_memset(k->daddr, 0, 16);
	k->id = ((tag * 0x9e3779b1u) >> 16) & (DP_FRAGS_SLOTS - 1);
	k->proto = p->tuple.proto;
	k->family = p->tuple.family;
	k->pad[0] = 0;
	k->pad[1] = 0;
	return tag;
}

/* The first fragment records its ports in map (dp_frags or
 * dp_frags_out), at its sender's slot; a later one takes them. */
static __always_inline int frag_resolve_in(struct pkt *p, void *map)
{
	struct dp_frag_key k;

	if (p->frag == FRAG_NONE)
		return 0;
	if (p->tuple.proto != IPPROTO_TCP && p->tuple.proto != IPPROTO_UDP)
		return 0; /* no ports to carry */
	__u32 tag = frag_slot_key(p, &k);
	if (p->frag == FRAG_FIRST) {
		struct dp_frag_ports v = {.sport = p->tuple.sport, .dport = p->tuple.dport, .tag = tag};
		bpf_map_update_elem(map, &k, &v, BPF_ANY);
		return 0;
	}
	const struct dp_frag_ports *v = bpf_map_lookup_elem(map, &k);
	if (!v || v->tag != tag)
		return -1;
	p->tuple.sport = v->sport;
	p->tuple.dport = v->dport;
	return 0;
}

/* What fibril_from_endpoint's pod sent: dp_frags, its own slots. */
static __always_inline int frag_resolve_sent(struct pkt *p) { return frag_resolve_in(p, &dp_frags); }

/* What came from outside: dp_frags_out, the sender's own slots as in
 * dp_frags (nobody vouches for the sender, but one source address still
 * takes only its own DP_FRAGS_SLOTS per protocol). */
static __always_inline int frag_resolve(struct pkt *p) { return frag_resolve_in(p, &dp_frags_out); }

/* fibril_to_netdev: the ports the first fragment of p's datagram (which
 * p's source, a source-checked pod, sent) recorded in dp_frags; -1 when
 * there are none. */
static __always_inline int frag_sent_ports(const struct pkt *p, struct dp_frag_ports *out)
{
	struct dp_frag_key k;
	__u32 tag = frag_slot_key(p, &k);
	const struct dp_frag_ports *v = bpf_map_lookup_elem(&dp_frags, &k);

	if (!v || v->tag != tag)
		return -1;
	*out = *v;
	return 0;
}

#endif /* FIBRIL_BPF_LIB_FRAG_H */
