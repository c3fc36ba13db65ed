/* bpf/fibril_dp.bpf.c - the datapath's tc programs: two attached (clsact)
 * to every endpoint's host-side veth and, in tunnel mode, a third on the
 * VXLAN device (fibril_from_overlay, at the end of this file), sharing the
 * same maps (layouts in fibril_dp.h). One loaded instance of each serves every endpoint; what
 * differs per endpoint is in the maps.
 *
 * fibril_from_endpoint (section tc, the veth's INGRESS: what the pod sends),
 * per packet:
 *   0. headers in a paged fragment are pulled into the linear part first
 *      (bpf_skb_pull_data), as in fibril_to_endpoint;
 *   1. parse Ethernet, then ARP, IPv4 or IPv6 (anything else: dropped); the
 *      IPv6 extension header chain (hop-by-hop, routing, destination
 *      options, fragment, AH; at most DP_IPV6_MAX_EXTHDRS) is walked to the
 *      L4 header, read with bpf_skb_load_bytes (paged data too); later
 *      fragments take their ports from dp_frags, filled by the first;
 *   2. ARP: the sender IP must be the endpoint's (or 0.0.0.0) and the
 *      sender MAC and the Ethernet source the endpoint's MAC, then it goes
 *      to the stack, which answers for the gateway (a local address);
 *   3. IP: the source must be an address of the endpoint behind this veth
 *      (IPv6 link-local/unspecified sources may only send neighbour
 *      discovery and MLD, to the stack); a neighbour solicitation for the
 *      IPv6 gateway is answered here (nd_answer);
 *   4. the hook points: service_translate() then policy_verdict() (the
 *      sender's egress policy and, for a local destination, that pod's
 *      ingress policy: dp_policy, dp_policy_ep; replies pass);
 *   5. conntrack (dp_conntrack for TCP, dp_ct_any for the rest: looked up
 *      once, ct_lookup(), and the policy's reply check shares it) and the
 *      destination's identity (dp_ipcache: in tunnel mode or with an egress
 *      policy; otherwise only when an event or a new flow needs it, see
 *      pkt_resolve() - the established flow's fast path skips it);
 *   6. a local endpoint destination: MACs rewritten, TTL / hop limit
 *      decremented and bpf_redirect_peer() into that pod; in tunnel mode
 *      a destination whose ipcache entry names a tunnel endpoint (another
 *      node's pod CIDR): TTL decremented, bpf_skb_set_tunnel_key (the
 *      node, VNI = the sender's identity) and bpf_redirect() into the VXLAN
 *      device; anything else goes to the stack (the host, native routes,
 *      the world);
 *   7. metrics per (reason, direction), drop events (rate-limited by a
 *      per-CPU token bucket, dp_evlimit; what it holds back is counted) and
 *      trace events when dp_config says so, to the dp_events ring buffer.
 *
 * fibril_to_endpoint (section tc too, the veth's EGRESS: what the
 * node's stack delivers to the pod — host->pod traffic and the replies to
 * pod->host flows; pod-to-pod traffic is redirected into the peer and never
 * passes here), per packet:
 *   1. parse Ethernet, then IPv4 / IPv6 (ARP, neighbour discovery, MLD and
 *      other L3 protocols are let through: delivered, no conntrack);
 *   2. the destination endpoint (the one behind this very veth), the
 *      source's identity: a local sender's, else the one the overlay
 *      program left in skb->mark (from the VNI), else the ipcache's (only
 *      when the pod's ingress policy, a new flow or an event needs it);
 *   3. the hook point policy_verdict() with direction to-endpoint (the
 *      ingress-to-pod enforcement point);
 *   4. conntrack: the same dp_conntrack entry as the pod's own packets of
 *      that flow (reply counters when the pod opened it);
 *   5. metrics with direction to-endpoint, drop and trace events.
 * Only uapi headers and libbpf's helpers: no vmlinux.h, no CO-RE needed. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmpv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "fibril_dp.h"

char LICENSE[] SEC("license") = "GPL";

/* ---- maps (the module opens each through the host's registry and hands
 * the fd over with bpf_map__reuse_fd before load) --------------------------- */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_ENDPOINTS_MAX);
	__type(key, struct dp_endpoint_key);
	__type(value, struct dp_endpoint_info);
} dp_endpoints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_IPCACHE_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dp_ipcache_key);
	__type(value, struct dp_ipcache_value);
} dp_ipcache SEC(".maps");

/* The module sizes both conntrack maps from its config: reuse_fd takes
 * the pinned map's max_entries. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_CONNTRACK_MAX);
	__type(key, struct dp_ct_key);
	__type(value, struct dp_ct_value);
} dp_conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_CT_ANY_MAX);
	__type(key, struct dp_ct_key);
	__type(value, struct dp_ct_value);
} dp_ct_any SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_FRAGS_MAX);
	__type(key, struct dp_frag_key);
	__type(value, struct dp_frag_ports);
} dp_frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_evlimit);
} dp_evlimit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_METRICS_MAX);
	__type(key, __u32); /* DP_METRICS_INDEX(reason, direction) */
	__type(value, struct dp_metrics_value);
} dp_metrics SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DP_EVENTS_BYTES);
} dp_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_config);
} dp_config SEC(".maps");

/* network policy (policy_verdict below) */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_POLICY_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dp_policy_key);
	__type(value, struct dp_policy_value);
} dp_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_POLICY_EP_MAX);
	__type(key, __u32);
	__type(value, struct dp_policy_ep);
} dp_policy_ep SEC(".maps");

/* ---- what one packet is ------------------------------------------------------ */

struct pkt {
	struct dp_ct_key tuple;          /* family 0: ARP (no IP tuple) */
	const struct dp_endpoint_info *src_ep;
	const struct dp_endpoint_info *dst_ep;
	struct dp_ct_value *ct;          /* the flow's conntrack entry once
					  * ct_lookup() found it, else NULL */
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
	__u8 policy_match;               /* enum dp_policy_match: what policy_check() found */
	__u8 policy_dir;                 /* enum dp_policy_direction of that check */
	__u32 policy_rule;               /* the deciding entry's rule ID */
	__u8 trace;                      /* dp_config says: trace events */
	__u8 ct_state;                   /* CT_* : what ct_lookup() found */
	__u8 lazy;                       /* LAZY_*: what is not looked up yet */
	__u8 host_routing;               /* dp_config says: host-routing = bpf */
};

/* ct_state: conntrack is looked up once per packet (ct_lookup), the policy's
 * "is it a reply?" and the counting share the answer. */
#define CT_UNKNOWN 0 /* not looked up yet */
#define CT_NEW 1     /* no entry either way */
#define CT_FORWARD 2 /* p->ct is the flow's entry, this packet goes its way */
#define CT_REPLY 3   /* p->ct is the entry of the reverse flow */

/* lazy: lookups the fast path does without, done only when something needs
 * their answer (a policy, a new conntrack entry, an event): see
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
	p->host_routing = (cfg->flags & DP_CFG_F_HOST_ROUTING) != 0;
	p->ct_refresh_s = cfg->ct_refresh_s ? cfg->ct_refresh_s : 1;
}

#define FRAG_NONE 0
#define FRAG_FIRST 1 /* offset 0, more fragments: carries the ports */
#define FRAG_LATER 2 /* offset > 0: no L4 header */

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_RST 0x04

/* ---- metrics and events -------------------------------------------------------- */

/* One packet in its (direction, reason) slot: a per-CPU array, so the
 * lookup is inlined by the verifier and nothing is ever inserted. */
static __always_inline void metrics_count(struct __sk_buff *skb, const struct pkt *p,
					 __u8 reason)
{
	__u32 index = DP_METRICS_INDEX(reason, p->direction);
	struct dp_metrics_value *v = bpf_map_lookup_elem(&dp_metrics, &index);

	if (v) {
		/* per-CPU: no other writer on this CPU while we run */
		v->packets += 1;
		v->bytes += skb->len;
	}
}

static __always_inline void pkt_resolve(struct __sk_buff *skb, struct pkt *p);

static __always_inline void event_send(struct __sk_buff *skb, struct pkt *p, __u8 type,
				       __u8 reason)
{
	pkt_resolve(skb, p); /* an event names both identities */
	struct dp_event *e = bpf_ringbuf_reserve(&dp_events, sizeof(*e), 0);

	if (!e) { /* full: the reader is behind; the packet is counted anyway */
		metrics_count(skb, p, DP_REASON_EVENT_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->size = sizeof(*e);
	e->type = type;
	e->reason = reason;
	e->src_ep_id = p->src_ep ? p->src_ep->ep_id : 0;
	e->dst_ep_id = p->dst_ep ? p->dst_ep->ep_id : 0;
	e->src_identity = p->src_ep ? p->src_ep->identity : p->src_identity;
	e->dst_identity = p->dst_identity;
	e->ifindex = skb->ifindex;
	e->len = skb->len;
	e->ts_ns = bpf_ktime_get_ns();
	e->family = p->tuple.family;
	e->proto = p->tuple.proto;
	e->sport = p->tuple.sport;
	e->dport = p->tuple.dport;
	e->direction = p->direction;
	e->tcp_flags = p->tuple.proto == IPPROTO_TCP ? p->tcp_flags : 0;
	__builtin_memcpy(e->saddr, p->tuple.saddr, sizeof(e->saddr));
	__builtin_memcpy(e->daddr, p->tuple.daddr, sizeof(e->daddr));
	/* the policy's verdict: in its own event and in a policy drop (a
	 * trace, or another drop after the policy allowed, does not repeat it) */
	if (type == DP_EVENT_POLICY || reason == DP_REASON_DROP_POLICY) {
		e->policy_rule = p->policy_rule;
		e->policy_match = p->policy_match;
		e->policy_dir = p->policy_dir;
	}
	/* a wakeup per record would cost the reader a syscall per packet */
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&dp_events, BPF_RB_AVAIL_DATA) >= DP_EVENTS_WAKEUP_BYTES
				      ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* The per-CPU token bucket of drop events: 1 when this one may go. */
static __always_inline int drop_event_allowed(void)
{
	__u32 zero = 0;
	const struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg || cfg->event_rate == 0)
		return 1;
	struct dp_evlimit *b = bpf_map_lookup_elem(&dp_evlimit, &zero);
	if (!b)
		return 1;
	__u64 cost = 1000000000ull / cfg->event_rate;
	__u64 burst = cfg->event_burst ? cfg->event_burst : 1;
	__u64 cap = cost * burst;
	__u64 now = bpf_ktime_get_ns();
	__u64 credit = b->credit_ns;
	__u64 elapsed = now - b->last_ns;
	/* per-CPU: no other writer on this CPU while we run */
	b->last_ns = now;
	credit = elapsed >= cap || credit + elapsed >= cap ? cap : credit + elapsed;
	if (credit >= cost) {
		b->credit_ns = credit - cost;
		return 1;
	}
	b->credit_ns = credit;
	return 0;
}

static __always_inline int drop(struct __sk_buff *skb, struct pkt *p, __u8 reason)
{
	metrics_count(skb, p, reason);
	if (drop_event_allowed())
		event_send(skb, p, DP_EVENT_DROP, reason);
	else
		metrics_count(skb, p, DP_REASON_EVENT_SUPPRESSED);
	return TC_ACT_SHOT;
}

static __always_inline int to_stack(struct __sk_buff *skb, struct pkt *p)
{
	metrics_count(skb, p, DP_REASON_TO_STACK);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_TO_STACK);
	return TC_ACT_OK;
}

/* ---- hook points ------------------------------------------------------------------
 * service_translate() is called for every IP packet from an endpoint, after
 * the source was checked; policy_verdict() for every IP packet from an
 * endpoint (after service_translate) AND for every IP packet delivered to an
 * endpoint by the node's stack (fibril_to_endpoint); both before conntrack
 * and forwarding. service_translate() is empty today (the lb issue fills it
 * in); policy_verdict() is the network policy section further down. */

/* HOOK service_translate: the service load balancer goes here. It may
 * rewrite the destination (and, for the reply path, the source) of the
 * packet and of p->tuple, then return 0; or return a DP_REASON_DROP_* to
 * drop (e.g. a service without backends). Today: no services, no change. */
static __always_inline int service_translate(struct __sk_buff *skb, struct pkt *p)
{
	(void)skb;
	(void)p;
	return 0;
}

/* ---- lookups -------------------------------------------------------------------- */

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
	if ((mark & DP_MARK_MAGIC_MASK) != DP_MARK_MAGIC_IDENTITY)
		return 0;
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

/* ---- conntrack ----------------------------------------------------------------- */

static __always_inline void reverse_tuple(const struct dp_ct_key *t, struct dp_ct_key *r)
{
	__builtin_memcpy(r->saddr, t->daddr, 16);
	__builtin_memcpy(r->daddr, t->saddr, 16);
	r->sport = t->dport;
	r->dport = t->sport;
	r->proto = t->proto;
	r->family = t->family;
	r->pad[0] = 0;
	r->pad[1] = 0;
}

/* now_s: seconds; last_seen_s is rewritten only when it is refresh_s old */
static __always_inline void ct_touch(struct dp_ct_value *ct, const struct pkt *p, __u32 len,
				     int reply, __u32 now_s, __u32 refresh_s)
{
	if (reply) {
		__sync_fetch_and_add(&ct->rx_packets, 1);
		__sync_fetch_and_add(&ct->rx_bytes, len);
		if (!(ct->flags & DP_CT_F_REPLY_SEEN))
			ct->flags |= DP_CT_F_REPLY_SEEN;
	} else {
		__sync_fetch_and_add(&ct->packets, 1);
		__sync_fetch_and_add(&ct->bytes, len);
	}
	if (now_s - ct->last_seen_s >= refresh_s)
		ct->last_seen_s = now_s;
	if ((ct->tcp_flags | p->tcp_flags) != ct->tcp_flags)
		ct->tcp_flags |= p->tcp_flags;
	if ((p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) && !(ct->flags & DP_CT_F_CLOSING))
		ct->flags |= DP_CT_F_CLOSING;
}

/* The flow's map: TCP flows and the rest live in separate maps (Cilium's
 * ct / ct_any). */
static __always_inline void *ct_map(const struct pkt *p)
{
	return p->tuple.proto == IPPROTO_TCP ? (void *)&dp_conntrack : (void *)&dp_ct_any;
}

/* Look the packet's flow up once: its own direction first, then the
 * reverse (the packet is a reply); the policy and the counting share the
 * answer (p->ct, p->ct_state). */
static __always_inline void ct_lookup(struct pkt *p)
{
	if (p->ct_state != CT_UNKNOWN)
		return;
	void *map = ct_map(p);
	struct dp_ct_value *ct = bpf_map_lookup_elem(map, &p->tuple);
	if (ct) {
		p->ct = ct;
		p->ct_state = CT_FORWARD;
		return;
	}
	struct dp_ct_key rev;
	reverse_tuple(&p->tuple, &rev);
	ct = bpf_map_lookup_elem(map, &rev);
	if (ct) {
		p->ct = ct;
		p->ct_state = CT_REPLY;
		return;
	}
	p->ct_state = CT_NEW;
}

/* Count the packet in its flow's entry, creating it on the first packet.
 * Seconds from the coarse clock (CLOCK_MONOTONIC_COARSE: the same clock a
 * tick behind at most, without reading the clock source per packet). */
static __always_inline void conntrack(struct __sk_buff *skb, struct pkt *p)
{
	__u32 now_s = (__u32)(bpf_ktime_get_coarse_ns() / 1000000000ull);

	ct_lookup(p);
	struct dp_ct_value *ct = p->ct;
	if (ct) {
		ct_touch(ct, p, skb->len, p->ct_state == CT_REPLY, now_s, p->ct_refresh_s);
		return;
	}
	/* a new flow: the entry names the endpoint that opened it */
	pkt_resolve(skb, p);
	void *map = ct_map(p);
	struct dp_ct_value fresh = {
		.packets = 1,
		.bytes = skb->len,
		.first_seen_s = now_s,
		.last_seen_s = now_s,
		.ifindex = skb->ifindex,
		.src_ep_id = p->src_ep ? p->src_ep->ep_id : 0,
		.tcp_flags = p->tcp_flags,
		.flags = (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) ? DP_CT_F_CLOSING : 0,
	};
	if (bpf_map_update_elem(map, &p->tuple, &fresh, BPF_NOEXIST) != 0) {
		/* another CPU created it meanwhile */
		ct = bpf_map_lookup_elem(map, &p->tuple);
		if (ct)
			ct_touch(ct, p, skb->len, 0, now_s, p->ct_refresh_s);
	}
}

/* ---- network policy ----------------------------------------------------------------
 * policy_verdict() is the hook at both enforcement points; p->direction
 * says which:
 *   DP_DIR_FROM_ENDPOINT (host veth ingress): the EGRESS policy of the
 *     sending endpoint p->src_ep towards p->dst_identity, and, when the
 *     destination is a local endpoint p->dst_ep (its packets are
 *     redirected into that pod and never pass fibril_to_endpoint), that
 *     endpoint's INGRESS policy from the sender's identity;
 *   DP_DIR_TO_ENDPOINT (host veth egress): the INGRESS policy of
 *     p->dst_ep from p->src_identity.
 * A packet whose reverse flow is in conntrack is the reply of a flow
 * that policy allowed: it passes (a one-way policy does not break TCP).
 * A direction no policy selects (dp_policy_ep) allows everything.
 * Returns 0 to allow or DP_REASON_DROP_POLICY. */

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
#define FLOW_ESTABLISHED 1 /* conntrack has the packet's own flow */
#define FLOW_REPLY 2       /* conntrack has the reverse flow only */

/* Whether the packet opens a flow, belongs to one conntrack knows, or
 * goes the reverse way of one (a reply). An ICMP echo request is never a
 * reply: ICMP flows carry no ports, so pod b's ping of pod c would
 * otherwise let every ping from c to b through as its "reply". */
static __always_inline int policy_flow_state(struct pkt *p)
{
	ct_lookup(p); /* conntrack() then uses the same answer */
	if (p->ct_state == CT_FORWARD)
		return FLOW_ESTABLISHED;
	if ((p->tuple.proto == IPPROTO_ICMP && p->icmp_type == 8) ||
	    (p->tuple.proto == IPPROTO_ICMPV6 && p->icmp_type == 128))
		return FLOW_NEW;
	return p->ct_state == CT_REPLY ? FLOW_REPLY : FLOW_NEW;
}

static __always_inline int policy_verdict(struct __sk_buff *skb, struct pkt *p)
{
	int reason = 0, flow;

	if (p->direction == DP_DIR_FROM_ENDPOINT) {
		if (!p->src_ep)
			return 0;
		/* no conntrack lookups for traffic no policy concerns */
		if (!policy_enforced(p->src_ep->ep_id, DP_POLICY_EGRESS) &&
		    !(p->dst_ep && policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS)))
			return 0;
		flow = policy_flow_state(p);
		if (flow == FLOW_REPLY)
			return 0;
		/* read before policy_check(): its event may resolve the packet's
		 * lazy fields, and the verifier then cannot tell src_ep is set */
		__u32 src_identity = p->src_ep->identity;
		reason = policy_check(skb, p, p->src_ep->ep_id, DP_POLICY_EGRESS, p->dst_identity,
				      flow == FLOW_NEW);
		if (!reason && p->dst_ep)
			reason = policy_check(skb, p, p->dst_ep->ep_id, DP_POLICY_INGRESS,
					      src_identity, flow == FLOW_NEW);
		return reason;
	}
	if (!p->dst_ep || !policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS))
		return 0;
	flow = policy_flow_state(p);
	if (flow == FLOW_REPLY)
		return 0;
	return policy_check(skb, p, p->dst_ep->ep_id, DP_POLICY_INGRESS, p->src_identity,
			    flow == FLOW_NEW);
}

/* ---- L4 ports and fragments --------------------------------------------------------
 * Read with bpf_skb_load_bytes: the L4 header may sit after a long IPv6
 * extension chain, past what was pulled into the linear part. */

static __always_inline int parse_l4(struct __sk_buff *skb, struct pkt *p)
{
	__u8 l4[14];

	if (p->frag == FRAG_LATER)
		return 0; /* no L4 header: dp_frags has the ports */
	if (p->tuple.proto == IPPROTO_TCP) {
		/* the common case, the header in the linear part: read in place
		 * (no helper call) */
		__u32 off = p->l4_off;
		if (off <= 255) {
			const __u8 *h = (const void *)(long)skb->data + off;
			if ((const void *)(h + 14) <= (const void *)(long)skb->data_end) {
				__builtin_memcpy(&p->tuple.sport, h, 2);
				__builtin_memcpy(&p->tuple.dport, h + 2, 2);
				p->tcp_flags = h[13];
				return 0;
			}
		}
		if (bpf_skb_load_bytes(skb, p->l4_off, l4, 14) < 0)
			return -1;
		__builtin_memcpy(&p->tuple.sport, l4, 2);
		__builtin_memcpy(&p->tuple.dport, l4 + 2, 2);
		p->tcp_flags = l4[13];
	} else if (p->tuple.proto == IPPROTO_UDP) {
		if (bpf_skb_load_bytes(skb, p->l4_off, l4, 4) < 0)
			return -1;
		__builtin_memcpy(&p->tuple.sport, l4, 2);
		__builtin_memcpy(&p->tuple.dport, l4 + 2, 2);
	} else if (p->tuple.proto == IPPROTO_ICMPV6 || p->tuple.proto == IPPROTO_ICMP) {
		if (bpf_skb_load_bytes(skb, p->l4_off, l4, 4) < 0)
			return -1;
		p->icmp_type = l4[0];
	}
	return 0;
}

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
 * later fragment's first one was never seen. Called once the source is
 * known to be genuine (from-endpoint), so a spoofer cannot fill dp_frags. */
static __always_inline int frag_resolve(struct pkt *p)
{
	struct dp_frag_key k;

	if (p->frag == FRAG_NONE)
		return 0;
	if (p->tuple.proto != IPPROTO_TCP && p->tuple.proto != IPPROTO_UDP)
		return 0; /* no ports to carry */
	frag_key(p, &k);
	if (p->frag == FRAG_FIRST) {
		struct dp_frag_ports v = {.sport = p->tuple.sport, .dport = p->tuple.dport};
		bpf_map_update_elem(&dp_frags, &k, &v, BPF_ANY);
		return 0;
	}
	const struct dp_frag_ports *v = bpf_map_lookup_elem(&dp_frags, &k);
	if (!v)
		return -1;
	p->tuple.sport = v->sport;
	p->tuple.dport = v->dport;
	return 0;
}

struct ipv6_opt_hdr_min {
	__u8 nexthdr;
	__u8 hdrlen; /* in 8-byte units, not counting the first 8 (AH: 4-byte units - 2) */
};

struct ipv6_frag_hdr_min {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, M flag in bit 0 */
	__be32 id;
};

#define IPV6_FRAG_OFFSET_MASK 0xfff8
#define IPV6_FRAG_MORE 0x0001

/* Walk the IPv6 extension headers from off (just after the fixed header)
 * with p->tuple.proto the fixed header's next header; leaves the upper
 * layer protocol in p->tuple.proto and its offset in p->l4_off. As
 * Cilium's ipv6_hdrlen: bounded, -1 on a truncated header or a chain
 * longer than DP_IPV6_MAX_EXTHDRS. */
static __always_inline int ipv6_walk(struct __sk_buff *skb, struct pkt *p, __u32 off)
{
	__u8 nh = p->tuple.proto;

#pragma unroll
	for (int i = 0; i < DP_IPV6_MAX_EXTHDRS; i++) {
		struct ipv6_opt_hdr_min opt;
		struct ipv6_frag_hdr_min fh;

		switch (nh) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
			if (bpf_skb_load_bytes(skb, off, &opt, sizeof(opt)) < 0)
				return -1;
			nh = opt.nexthdr;
			off += ((__u32)opt.hdrlen + 1) * 8;
			break;
		case IPPROTO_AH:
			if (bpf_skb_load_bytes(skb, off, &opt, sizeof(opt)) < 0)
				return -1;
			nh = opt.nexthdr;
			off += ((__u32)opt.hdrlen + 2) * 4;
			break;
		case IPPROTO_FRAGMENT:
			if (bpf_skb_load_bytes(skb, off, &fh, sizeof(fh)) < 0)
				return -1;
			nh = fh.nexthdr;
			off += sizeof(fh);
			p->frag_id = bpf_ntohl(fh.id);
			if (bpf_ntohs(fh.frag_off) & IPV6_FRAG_OFFSET_MASK)
				p->frag = FRAG_LATER;
			else if (bpf_ntohs(fh.frag_off) & IPV6_FRAG_MORE)
				p->frag = FRAG_FIRST;
			break;
		default:
			p->tuple.proto = nh;
			p->l4_off = off;
			return 0;
		}
	}
	switch (nh) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_AH:
	case IPPROTO_FRAGMENT:
		return -1; /* more extension headers than we walk */
	}
	p->tuple.proto = nh;
	p->l4_off = off;
	return 0;
}

/* IPv4: the tuple, the fragment state and the L4 offset; -1 if malformed. */
static __always_inline int ipv4_parse(struct __sk_buff *skb, struct pkt *p, struct iphdr *ip,
				      void *data_end)
{
	if ((void *)(ip + 1) > data_end || ip->ihl < 5 || ip->version != 4)
		return -1;
	p->tuple.family = DP_FAMILY_IPV4;
	p->tuple.proto = ip->protocol;
	__builtin_memcpy(p->tuple.saddr, &ip->saddr, 4);
	__builtin_memcpy(p->tuple.daddr, &ip->daddr, 4);
	p->l4_off = ETH_HLEN + ip->ihl * 4;
	__u16 frag = bpf_ntohs(ip->frag_off);
	if (frag & 0x1fff)
		p->frag = FRAG_LATER;
	else if (frag & 0x2000)
		p->frag = FRAG_FIRST;
	p->frag_id = bpf_ntohs(ip->id);
	return parse_l4(skb, p);
}

/* IPv6: the tuple, the extension chain, the fragment state and the L4
 * offset; -1 if malformed. */
static __always_inline int ipv6_parse(struct __sk_buff *skb, struct pkt *p, struct ipv6hdr *ip6,
				      void *data_end)
{
	if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
		return -1;
	p->tuple.family = DP_FAMILY_IPV6;
	p->tuple.proto = ip6->nexthdr;
	__builtin_memcpy(p->tuple.saddr, &ip6->saddr, 16);
	__builtin_memcpy(p->tuple.daddr, &ip6->daddr, 16);
	if (ipv6_walk(skb, p, ETH_HLEN + sizeof(struct ipv6hdr)) < 0)
		return -1;
	if (parse_l4(skb, p) < 0)
		return -1;
	if (p->tuple.proto == IPPROTO_ICMPV6 && p->frag != FRAG_LATER) {
		/* MLD (130-132, 143) and ND (133-137) */
		__u8 t = p->icmp_type;
		p->is_icmp6_nd = (t >= 130 && t <= 137) || t == 143;
	}
	return 0;
}

/* ---- forwarding ------------------------------------------------------------------- */

/* Deliver to a local endpoint: MACs of the destination's link, then
 * straight into its netns. TTL / hop limit were decremented by the caller. */
static __always_inline int forward_local(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__builtin_memcpy(eth->h_dest, p->dst_ep->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->dst_ep->host_mac, ETH_ALEN);
	int rc = bpf_redirect_peer(p->dst_ep->ifindex, 0);
	if (rc != TC_ACT_REDIRECT)
		return drop(skb, p, DP_REASON_DROP_REDIRECT);
	metrics_count(skb, p, DP_REASON_FORWARDED);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_FORWARDED);
	return rc;
}

/* A hop: the TTL / hop limit (ttl points into the packet) minus one; IPv4
 * (ip4 set) as the kernel's ip_decrease_ttl(): incremental checksum. */
static __always_inline void ttl_decrement(__u8 *ttl, struct iphdr *ip4)
{
	if (ip4) {
		__u32 check = ip4->check;
		check += bpf_htons(0x0100);
		ip4->check = (__u16)(check + (check >= 0xFFFF));
	}
	*ttl -= 1;
}

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
	int rc = bpf_redirect(tun_ifindex, 0);
	metrics_count(skb, p, DP_REASON_TO_TUNNEL);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_TO_TUNNEL);
	return rc;
}

/* host-routing = bpf (Cilium's BPF host routing): a packet for another
 * node's pod leaves by the FIB's answer, out of the underlay device toward
 * the next hop, without the node's stack (routing, netfilter) after the
 * program. Resolved neighbour: the MACs are written here and bpf_redirect;
 * unresolved: bpf_redirect_neigh resolves it. Anything the FIB does not
 * forward (local, blackhole, needs fragmenting...) goes to the stack, which
 * answers it as before. Returns -1 for "to the stack", else the verdict;
 * the TTL is decremented only when the packet is redirected. */
static __always_inline int forward_fib(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				       struct iphdr *ip4)
{
	struct bpf_fib_lookup fib;

	__builtin_memset(&fib, 0, sizeof(fib));
	fib.ifindex = skb->ifindex;
	fib.l4_protocol = p->tuple.proto;
	fib.tot_len = (__u16)skb->len;
	if (p->tuple.family == DP_FAMILY_IPV4) {
		fib.family = 2; /* AF_INET */
		__builtin_memcpy(&fib.ipv4_src, p->tuple.saddr, 4);
		__builtin_memcpy(&fib.ipv4_dst, p->tuple.daddr, 4);
		if (ip4)
			fib.tos = ip4->tos;
	} else {
		fib.family = 10; /* AF_INET6 */
		__builtin_memcpy(fib.ipv6_src, p->tuple.saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, p->tuple.daddr, 16);
	}
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -1;
	if (fib.ifindex == skb->ifindex)
		return -1;
	ttl_decrement(ttl, ip4);
	long out;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		void *data = (void *)(long)skb->data;
		void *data_end = (void *)(long)skb->data_end;
		struct ethhdr *eth = data;
		if ((void *)(eth + 1) > data_end)
			return drop(skb, p, DP_REASON_DROP_INVALID);
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		out = bpf_redirect(fib.ifindex, 0);
	} else {
		struct bpf_redir_neigh nh;
		__builtin_memset(&nh, 0, sizeof(nh));
		if (fib.family == 2) {
			nh.nh_family = 2;
			nh.ipv4_nh = fib.ipv4_dst; /* the FIB's next hop */
		} else {
			nh.nh_family = 10;
			__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		}
		out = bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	if (out != TC_ACT_REDIRECT)
		return drop(skb, p, DP_REASON_DROP_REDIRECT);
	metrics_count(skb, p, DP_REASON_TO_FIB);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_TO_FIB);
	return (int)out;
}

/* Steps 4-6 once the tuple is known and the source checked. ttl points at
 * the TTL / hop limit byte (inside the packet, bounds-checked). */
static __always_inline int route_ip(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				    struct iphdr *ip4)
{
	if (frag_resolve(p) < 0)
		return drop(skb, p, DP_REASON_DROP_FRAG_NOT_FOUND);
	int reason = service_translate(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	/* a local destination carries its identity; only others need the
	 * ipcache's longest-prefix walk (which also says which node hosts it) */
	const struct dp_ipcache_value *dst_ic = 0;
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (p->dst_ep) {
		p->dst_identity = p->dst_ep->identity;
	} else if (p->tun_ifindex || p->host_routing ||
		   policy_enforced(p->src_ep->ep_id, DP_POLICY_EGRESS)) {
		dst_ic = ipcache_of(p->tuple.family, p->tuple.daddr);
		p->dst_identity = dst_ic ? dst_ic->identity : DP_IDENTITY_WORLD;
	} else {
		/* native mode, no egress policy: the stack routes it and
		 * nothing asks who the destination is (an event would) */
		p->lazy |= LAZY_DST_ID;
	}
	reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	conntrack(skb, p);

	/* tunnel mode: a prefix another node hosts goes into the tunnel */
	__u32 tun = 0;
	if (!p->dst_ep && dst_ic && (dst_ic->flags & DP_IPCACHE_F_TUNNEL))
		tun = p->tun_ifindex;
	/* host-routing = bpf: another node's pod (the ipcache knows it, not
	 * world nor this node) leaves by the FIB's answer */
	if (!p->dst_ep && !tun && p->host_routing && *ttl > 1 && dst_ic &&
	    dst_ic->identity > DP_IDENTITY_WORLD) {
		int verdict = forward_fib(skb, p, ttl, ip4);
		if (verdict >= 0)
			return verdict;
	}
	/* not local nor tunnelled, or expiring here: the stack routes it (and
	 * sends ICMP) */
	if ((!p->dst_ep && !tun) || *ttl <= 1)
		return to_stack(skb, p);
	ttl_decrement(ttl, ip4);
	if (!p->dst_ep)
		return forward_tunnel(skb, p, dst_ic, tun);
	return forward_local(skb, p);
}

/* ---- per family ------------------------------------------------------------------- */

static __always_inline int handle_ipv4(struct __sk_buff *skb, struct pkt *p, void *l3,
				       void *data_end)
{
	struct iphdr *ip = l3;

	if (ipv4_parse(skb, p, ip, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	p->src_ep = endpoint_of(DP_FAMILY_IPV4, p->tuple.saddr);
	if (!p->src_ep || p->src_ep->ifindex != skb->ifindex) {
		p->src_ep = 0; /* not this veth's endpoint */
		return drop(skb, p, DP_REASON_DROP_SPOOFED_IP);
	}
	return route_ip(skb, p, &ip->ttl, ip);
}

/* ---- IPv6 neighbour discovery for the gateway -------------------------------------
 * The kernel answers a neighbour solicitation only for addresses on the
 * receiving device, and the gateway lives on the host device: so the
 * program answers a pod's solicitation for a host address (identity host
 * in the ipcache) itself, with the host veth's MAC, as Cilium does. */

#define ICMP6_NS 135
#define ICMP6_NA 136
#define ND_OPT_TARGET_LL 2

struct nd_msg6 {
	struct icmp6hdr hdr; /* for NA: flags in icmp6_dataun */
	__u8 target[16];
};

struct na_packet {
	struct ethhdr eth;
	struct ipv6hdr ip6;
	struct nd_msg6 nd;
	__u8 opt_type;
	__u8 opt_len; /* in units of 8 bytes */
	__u8 opt_mac[ETH_ALEN];
} __attribute__((packed));

static __always_inline __u16 csum_fold32(__s64 sum)
{
	__u64 s = (__u64)sum;
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Turn the solicitation into the advertisement and send it back out of
 * the veth it came in on. */
static __always_inline int nd_answer(struct __sk_buff *skb, struct pkt *p, const __u8 *target)
{
	__u8 pod_mac[ETH_ALEN], tgt[16];
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__builtin_memcpy(pod_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(tgt, target, 16);
	/* exactly one NA with one target link-layer option */
	if (bpf_skb_change_tail(skb, sizeof(struct na_packet), 0) != 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	struct na_packet *na = data;
	if ((void *)(na + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__builtin_memcpy(na->eth.h_dest, pod_mac, ETH_ALEN);
	__builtin_memcpy(na->eth.h_source, p->src_ep->host_mac, ETH_ALEN);
	na->eth.h_proto = bpf_htons(ETH_P_IPV6);
	na->ip6.version = 6;
	na->ip6.priority = 0;
	na->ip6.flow_lbl[0] = 0;
	na->ip6.flow_lbl[1] = 0;
	na->ip6.flow_lbl[2] = 0;
	na->ip6.payload_len = bpf_htons(sizeof(struct nd_msg6) + 8);
	na->ip6.nexthdr = IPPROTO_ICMPV6;
	na->ip6.hop_limit = 255;
	__builtin_memcpy(&na->ip6.daddr, p->tuple.saddr, 16);
	__builtin_memcpy(&na->ip6.saddr, tgt, 16);
	na->nd.hdr.icmp6_type = ICMP6_NA;
	na->nd.hdr.icmp6_code = 0;
	na->nd.hdr.icmp6_cksum = 0;
	/* router, solicited, override */
	na->nd.hdr.icmp6_dataun.un_data32[0] = bpf_htonl(0xe0000000);
	__builtin_memcpy(na->nd.target, tgt, 16);
	na->opt_type = ND_OPT_TARGET_LL;
	na->opt_len = 1;
	__builtin_memcpy(na->opt_mac, p->src_ep->host_mac, ETH_ALEN);

	/* checksum: the pseudo header, then the 32 bytes of ICMPv6 */
	struct {
		__u8 saddr[16];
		__u8 daddr[16];
		__be32 len;
		__be32 nexthdr;
	} ph;
	__builtin_memcpy(ph.saddr, tgt, 16);
	__builtin_memcpy(ph.daddr, p->tuple.saddr, 16);
	ph.len = bpf_htonl(sizeof(struct nd_msg6) + 8);
	ph.nexthdr = bpf_htonl(IPPROTO_ICMPV6);
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	if (sum < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	void *icmp = (__u8 *)na + sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
	sum = bpf_csum_diff(0, 0, icmp, sizeof(struct nd_msg6) + 8, (__u32)sum);
	if (sum < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	na->nd.hdr.icmp6_cksum = csum_fold32(sum);
	metrics_count(skb, p, DP_REASON_ND_ANSWERED);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_ND_ANSWERED);
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int addr6_is_linklocal_or_unspec(const __u8 *a)
{
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return 1;
	__u64 hi, lo;
	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	return hi == 0 && lo == 0;
}

static __always_inline int handle_ipv6(struct __sk_buff *skb, struct pkt *p, void *l3,
				       void *data_end)
{
	struct ipv6hdr *ip6 = l3;

	if (ipv6_parse(skb, p, ip6, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	/* a solicitation whose message sits in the linear part (they carry no
	 * extension headers; one that does goes to the stack) */
	struct nd_msg6 *nd = 0;
	if (p->is_icmp6_nd && p->icmp_type == ICMP6_NS &&
	    p->l4_off == ETH_HLEN + sizeof(struct ipv6hdr)) {
		struct nd_msg6 *m = (void *)(ip6 + 1);
		if ((void *)(m + 1) <= data_end)
			nd = m;
	}
	p->src_ep = endpoint_of(DP_FAMILY_IPV6, p->tuple.saddr);
	if (!p->src_ep || p->src_ep->ifindex != skb->ifindex) {
		p->src_ep = 0;
		/* the pod's link-local (or, during DAD, ::) address finds its
		 * neighbours: only neighbour discovery and MLD, only to the stack */
		if (p->is_icmp6_nd && addr6_is_linklocal_or_unspec(p->tuple.saddr))
			return to_stack(skb, p);
		return drop(skb, p, DP_REASON_DROP_SPOOFED_IP);
	}
	if (nd && identity_of(DP_FAMILY_IPV6, nd->target) == DP_IDENTITY_HOST)
		return nd_answer(skb, p, nd->target);
	if (p->is_icmp6_nd)
		return to_stack(skb, p);
	return route_ip(skb, p, &ip6->hop_limit, 0);
}

/* Ethernet/IPv4 ARP (<linux/if_arp.h> drags in libc headers, so the
 * layout is spelled out here). */
struct arp_eth_ipv4 {
	__be16 hrd; /* 1: Ethernet */
	__be16 pro; /* ETH_P_IP */
	__u8 hln;   /* 6 */
	__u8 pln;   /* 4 */
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

#define ARP_HRD_ETHER 1

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] &&
	       a[5] == b[5];
}

/* ARP from the pod: its sender IP must be the endpoint's (0.0.0.0: a probe),
 * and then the sender MAC and the frame's Ethernet source the endpoint's
 * MAC (as Cilium's arp_validate), so a pod cannot poison the node's
 * neighbour entry of its own address with another MAC. */
static __always_inline int handle_arp(struct __sk_buff *skb, struct pkt *p, void *l3,
				      void *data_end)
{
	struct arp_eth_ipv4 *arp = l3;

	if ((void *)(arp + 1) > data_end)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	if (arp->hrd != bpf_htons(ARP_HRD_ETHER) || arp->pro != bpf_htons(ETH_P_IP) ||
	    arp->hln != ETH_ALEN || arp->pln != 4)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	__u32 spa;
	__builtin_memcpy(&spa, arp->spa, 4);
	__builtin_memcpy(p->tuple.saddr, arp->spa, 4);
	__builtin_memcpy(p->tuple.daddr, arp->tpa, 4);
	if (spa != 0) {
		p->src_ep = endpoint_of(DP_FAMILY_IPV4, p->tuple.saddr);
		if (!p->src_ep || p->src_ep->ifindex != skb->ifindex) {
			p->src_ep = 0;
			return drop(skb, p, DP_REASON_DROP_SPOOFED_ARP);
		}
		const struct ethhdr *eth = (const void *)(long)skb->data;
		if ((void *)(eth + 1) > data_end)
			return drop(skb, p, DP_REASON_DROP_INVALID);
		if (!mac_eq(arp->sha, p->src_ep->mac) || !mac_eq(eth->h_source, p->src_ep->mac))
			return drop(skb, p, DP_REASON_DROP_SPOOFED_MAC);
	}
	return to_stack(skb, p);
}

/* The headers both programs read and write in place: Ethernet, the
 * largest IPv4 header (or the IPv6 header with a neighbour discovery
 * message), and a TCP header; what lies further (a long IPv6 extension
 * chain, the L4 header after it) is read with bpf_skb_load_bytes. */
#define DP_PULL_BYTES (14 + 60 + 20)
/* What must be linear before a pull is worth it: IPv4, its fixed header
 * (the TTL and checksum written in place; the ports and options are read
 * in place when linear, else with bpf_skb_load_bytes); IPv6, its fixed
 * header, and with an ICMPv6 next header a neighbour discovery message
 * after it; anything else (ARP) fits in that too. */
#define DP_PULL_NEED_IPV4 (14 + 20)
#define DP_PULL_NEED_IPV6 (14 + 40)
#define DP_PULL_NEED_OTHER (14 + 40 + 24)

/* Headers in a paged fragment: make them linear, only when what the
 * program reads in place is not. A pull past the linear part copies the
 * head of a cloned skb (every TCP segment a pod sends is a clone of the one
 * its socket keeps): doing it for every packet whose linear part ends at
 * its TCP header (a TCP socket puts the payload in pages) cost more than
 * the rest of the program. The caller reloads data / data_end after. */
static __always_inline void pull_headers(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 linear = skb->data_end - skb->data;

	if (linear >= DP_PULL_BYTES || skb->len <= linear)
		return;
	__u32 need = DP_PULL_NEED_OTHER;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) <= data_end) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (eth->h_proto == bpf_htons(ETH_P_IP))
			need = DP_PULL_NEED_IPV4;
		else if (eth->h_proto == bpf_htons(ETH_P_IPV6) && (void *)(ip6 + 1) <= data_end &&
			 ip6->nexthdr != IPPROTO_ICMPV6)
			need = DP_PULL_NEED_IPV6;
	}
	if (linear < need)
		bpf_skb_pull_data(skb, skb->len < DP_PULL_BYTES ? skb->len : DP_PULL_BYTES);
}

/* The headers pulled, the Ethernet header bounds-checked: the header and
 * the end of the linear data (in *data_end), or NULL when the frame is
 * shorter than an Ethernet header. */
static __always_inline struct ethhdr *eth_header(struct __sk_buff *skb, void **data_end)
{
	pull_headers(skb);
	struct ethhdr *eth = (void *)(long)skb->data;
	*data_end = (void *)(long)skb->data_end;
	if ((void *)(eth + 1) > *data_end)
		return 0;
	return eth;
}

SEC("tc")
int fibril_from_endpoint(struct __sk_buff *skb)
{
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	pkt_config(&p);
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return handle_ipv4(skb, &p, eth + 1, data_end);
	case bpf_htons(ETH_P_IPV6):
		return handle_ipv6(skb, &p, eth + 1, data_end);
	case bpf_htons(ETH_P_ARP):
		return handle_arp(skb, &p, eth + 1, data_end);
	default:
		return drop(skb, &p, DP_REASON_DROP_UNSUPPORTED_L3);
	}
}

/* ---- to-endpoint: what the node's stack delivers to a pod ----------------------------
 * Attached to the host veth's clsact EGRESS. Never drops for lack of a
 * verdict: only the policy hook (and a malformed IP header) can drop. */

static __always_inline int delivered(struct __sk_buff *skb, struct pkt *p)
{
	metrics_count(skb, p, DP_REASON_DELIVERED);
	if (p->trace)
		event_send(skb, p, DP_EVENT_TRACE, DP_REASON_DELIVERED);
	return TC_ACT_OK;
}

/* Steps 2-5 of the to-endpoint program once the tuple is known. */
static __always_inline int deliver_ip(struct __sk_buff *skb, struct pkt *p)
{
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (p->dst_ep && p->dst_ep->ifindex != skb->ifindex)
		p->dst_ep = 0; /* not the endpoint behind this veth */
	p->dst_identity = p->dst_ep ? p->dst_ep->identity
				    : identity_of(p->tuple.family, p->tuple.daddr);
	/* the sender (pkt_resolve_src) only when the pod's ingress policy
	 * needs it; else when a new flow, an event or the trace does */
	if (p->dst_ep && policy_enforced(p->dst_ep->ep_id, DP_POLICY_INGRESS))
		pkt_resolve_src(skb, p);
	else
		p->lazy |= LAZY_SRC;
	/* a later fragment whose first one was not seen here (the node's
	 * stack may have sent that one another way): ports stay 0 */
	frag_resolve(p);
	/* ---- POLICY HOOK (ingress to the pod): policy_verdict(), direction
	 * DP_DIR_TO_ENDPOINT (see "network policy" above). ---- */
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	conntrack(skb, p);
	return delivered(skb, p);
}

static __always_inline int to_ep_ipv4(struct __sk_buff *skb, struct pkt *p, void *l3,
				      void *data_end)
{
	if (ipv4_parse(skb, p, l3, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	return deliver_ip(skb, p);
}

static __always_inline int to_ep_ipv6(struct __sk_buff *skb, struct pkt *p, void *l3,
				      void *data_end)
{
	if (ipv6_parse(skb, p, l3, data_end) < 0)
		return drop(skb, p, DP_REASON_DROP_INVALID);
	/* the node's neighbour discovery and MLD towards the pod: no flow */
	if (p->is_icmp6_nd)
		return delivered(skb, p);
	return deliver_ip(skb, p);
}

/* Section "tc" as the ingress program (libbpf 1.1 knows no "tc/<name>"
 * sections): the two are told apart by name, fibril_to_endpoint. */
SEC("tc")
int fibril_to_endpoint(struct __sk_buff *skb)
{
	struct pkt p;

	__builtin_memset(&p, 0, sizeof(p));
	p.direction = DP_DIR_TO_ENDPOINT;
	pkt_config(&p);
	/* headers in a paged fragment (rare on egress) */
	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return to_ep_ipv4(skb, &p, eth + 1, data_end);
	case bpf_htons(ETH_P_IPV6):
		return to_ep_ipv6(skb, &p, eth + 1, data_end);
	default:
		/* ARP (the node resolving the pod) and anything else the
		 * stack sends: no IP tuple, let through */
		return delivered(skb, &p);
	}
}

/* ---- from-overlay: what another node sent through the tunnel ------------------------
 * Attached to the VXLAN device's clsact INGRESS (tunnel mode), after the
 * kernel took the outer headers off: the tunnel key (bpf_skb_get_tunnel_key)
 * holds the VNI, which the sending node's program set to the sender's
 * security identity. That identity goes into skb->mark (DP_MARK_*) for
 * the rest of this node; a destination that is a local endpoint is
 * checked against its ingress policy with that identity (never with the
 * ipcache's answer for the source IP), counted in conntrack and
 * redirected straight into the pod; anything else goes to the stack (as
 * for this host, its type set to PACKET_HOST: the inner frame's MAC is not
 * the VXLAN device's). */

static __always_inline int overlay_to_stack(struct __sk_buff *skb, struct pkt *p)
{
	bpf_skb_change_type(skb, 0 /* PACKET_HOST */);
	return to_stack(skb, p);
}

static __always_inline int overlay_ip(struct __sk_buff *skb, struct pkt *p, __u8 *ttl,
				      struct iphdr *ip4)
{
	p->dst_ep = endpoint_of(p->tuple.family, p->tuple.daddr);
	if (!p->dst_ep)
		return overlay_to_stack(skb, p);
	p->dst_identity = p->dst_ep->identity;
	frag_resolve(p);
	int reason = policy_verdict(skb, p);
	if (reason)
		return drop(skb, p, (__u8)reason);
	conntrack(skb, p);
	if (*ttl <= 1)
		return overlay_to_stack(skb, p);
	ttl_decrement(ttl, ip4);
	return forward_local(skb, p);
}

SEC("tc")
int fibril_from_overlay(struct __sk_buff *skb)
{
	struct pkt p;
	struct bpf_tunnel_key key;

	__builtin_memset(&p, 0, sizeof(p));
	__builtin_memset(&key, 0, sizeof(key));
	p.direction = DP_DIR_FROM_OVERLAY;
	pkt_config(&p);
	if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0) < 0 &&
	    bpf_skb_get_tunnel_key(skb, &key, sizeof(key), BPF_F_TUNINFO_IPV6) < 0)
		return drop(skb, &p, DP_REASON_DROP_NO_TUNNEL_KEY);
	p.src_identity = key.tunnel_id & DP_VNI_MAX;
	skb->mark = (p.src_identity << DP_MARK_IDENTITY_SHIFT) | DP_MARK_MAGIC_IDENTITY;

	void *data_end;
	struct ethhdr *eth = eth_header(skb, &data_end);
	if (!eth)
		return drop(skb, &p, DP_REASON_DROP_INVALID);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if (ipv4_parse(skb, &p, ip, data_end) < 0)
			return drop(skb, &p, DP_REASON_DROP_INVALID);
		return overlay_ip(skb, &p, &ip->ttl, ip);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (ipv6_parse(skb, &p, ip6, data_end) < 0)
			return drop(skb, &p, DP_REASON_DROP_INVALID);
		if (p.is_icmp6_nd)
			return overlay_to_stack(skb, &p);
		return overlay_ip(skb, &p, &ip6->hop_limit, 0);
	}
	return overlay_to_stack(skb, &p);
}

/* ---- from-netdev: host-routing = bpf, the receiving half (native mode) ------------
 * Attached to the clsact INGRESS of the node's underlay devices (those with
 * an address) when [datapath] host-routing = bpf. A packet addressed to
 * this node (PACKET_HOST) for a local endpoint is checked against that
 * endpoint's ingress policy with the source's identity from the ipcache
 * (as fibril_to_endpoint would; looked up only when that policy, a new
 * flow or an event needs it), counted in conntrack, its TTL decremented
 * and redirected straight into the pod (bpf_redirect_peer: the node's
 * stack and the veth's egress are skipped); everything else (the node's own
 * traffic, ARP, ND, a TTL of 1) goes on to the stack untouched and
 * uncounted. With host-routing off (the flag cleared in dp_config) it
 * passes everything. Passing is TC_ACT_UNSPEC, not TC_ACT_OK: the next
 * filter on the device (the lb module's NodePort program) still runs. */
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
	conntrack(skb, p);
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
