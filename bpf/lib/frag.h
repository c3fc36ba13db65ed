/* bpf/lib/frag.h - fragments: the first fragment of a TCP or UDP datagram
 * records its ports in dp_frags, the later ones (no L4 header) take them
 * from there, as Cilium's IPv4 fragment tracking (IPv6 fragments too).
 *
 * Contract of frag_resolve(p): reads p->frag, frag_id and the tuple as
 * parse left them; a first fragment (FRAG_FIRST) writes its ports
 * (BPF_ANY) and a later one (FRAG_LATER) takes the recorded ports into
 * p->tuple.sport / dport, both in the map of the packet's class: dp_frags
 * in fibril_from_endpoint, which calls this only after the source check,
 * dp_frags_out in the other hooks (what comes from the node, the underlay
 * or another node, which nobody vouches for), so a spoofer can neither
 * plant ports for the pods' datagrams nor evict their entries. Returns 0,
 * or -1 for a later fragment whose first one was not seen (its ports stay
 * 0): fibril_from_endpoint drops it (DP_REASON_DROP_FRAG_NOT_FOUND); the
 * other hooks ignore the -1 (the stack may have sent the first fragment
 * another way). Called before anything reads the ports (service, policy,
 * conntrack).
 */
#ifndef FIBRIL_BPF_LIB_FRAG_H
#define FIBRIL_BPF_LIB_FRAG_H

#include <linux/in.h>

#include "pkt.h"

static __always_inline void frag_key(const struct pkt *p, struct dp_frag_key *k)
{
	__builtin_memcpy(k->saddr, p->tuple.saddr, 16);
	__builtin_memcpy(k->daddr, p->tuple.daddr, 16);
	k->id = p->frag_id;
	k->proto = p->tuple.proto;
	k->family = p->tuple.family;
	k->pad[0] = 0;
	k->pad[1] = 0;
}

/* The first fragment records its ports, later ones take them: -1 when a
 * later fragment's first one was never seen. dp_frags only for what a
 * source-checked endpoint sent (from-endpoint), dp_frags_out for the rest. */
static __always_inline int frag_resolve(struct pkt *p)
{
	struct dp_frag_key k;

	if (p->frag == FRAG_NONE)
		return 0;
	if (p->tuple.proto != IPPROTO_TCP && p->tuple.proto != IPPROTO_UDP)
		return 0; /* no ports to carry */
	frag_key(p, &k);
	void *map = p->direction == DP_DIR_FROM_ENDPOINT ? (void *)&dp_frags : (void *)&dp_frags_out;
	if (p->frag == FRAG_FIRST) {
		struct dp_frag_ports v = {.sport = p->tuple.sport, .dport = p->tuple.dport};
		bpf_map_update_elem(map, &k, &v, BPF_ANY);
		return 0;
	}
	const struct dp_frag_ports *v = bpf_map_lookup_elem(map, &k);
	if (!v)
		return -1;
	p->tuple.sport = v->sport;
	p->tuple.dport = v->dport;
	return 0;
}

#endif /* FIBRIL_BPF_LIB_FRAG_H */
