/* bpf/fibril_lb.bpf.c - socket-level service load balancing: cgroup v2
 * socket hooks (as Cilium's bpf_sock.c), attached by the lb module to
 * [lb] cgroup. A connect() or a UDP sendmsg() to a service frontend is
 * rewritten to one backend before the socket ever sends a packet, so
 * established service traffic pays no per-packet NAT; recvmsg() and
 * getpeername() rewrite the backend back to the frontend, so the
 * application only ever sees the address it asked for.
 *
 *   connect4/6, sendmsg4/6: look the destination up in lb_services (slot 0,
 *     the master); a service with no selectable backend fails the call at
 *     once with ECONNREFUSED (bpf_set_retval), not a timeout. Otherwise the
 *     backend comes from session affinity (lb_affinity, keyed by the
 *     client's netns cookie, still valid and still selectable per
 *     lb_aff_match), else from the Maglev table (lb_maglev, indexed by a
 *     hash of the socket cookie) or a random slot. The socket's reverse
 *     entry (socket cookie, backend) -> frontend goes to lb_sk_revnat.
 *   recvmsg4/6, getpeername4/6: the reverse entry, if any, replaces the
 *     backend address the kernel reports.
 *
 * fibril_lb_from_netdev / fibril_lb_to_netdev (tc, on [lb]
 * nodeport-devices, ingress / egress; the egress one on the tunnel device
 * too): per-packet DNAT for what the socket hooks cannot see - a packet
 * from outside the node to a frontend (NodePort on the node's address, an
 * external or load-balancer IP) - with reverse NAT of the replies through
 * lb_ct (IPv4 and IPv6, TCP and UDP). A backend on another node (the route
 * to it leaves through one of our devices) also gets SNAT: the arrival
 * device's address and a port of LB_SNAT_PORT_MIN..MAX as the source, so
 * its reply comes back here (Cilium's default NodePort mode);
 * externalTrafficPolicy Local keeps the client's address. Every lb_ct
 * entry carries the second of its flow's last packet and its TCP state,
 * for the module's GC.
 * Layouts in fibril_lb.h. Only uapi headers and libbpf's helpers. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stddef.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "fibril_lb.h"

#define ECONNREFUSED 111

/* the Maglev table size M, set by the module before load (read-only: the
 * verifier treats it as a constant and bounds the table index with it) */
const volatile __u32 maglev_m = LB_MAGLEV_DEFAULT;

/* max_entries here are placeholders: the module hands over the registry's
 * maps (sized by [lb] config) with bpf_map__reuse_fd before loading */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_svc_key);
	__type(value, struct lb_svc_val);
} lb_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_backend);
} lb_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, LB_MAGLEV_DEFAULT * sizeof(__u32));
} lb_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_aff_key);
	__type(value, struct lb_aff_val);
} lb_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_aff_match_key);
	__type(value, __u8);
} lb_aff_match SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_sk_revnat_key);
	__type(value, struct lb_sk_revnat_val);
} lb_sk_revnat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_M_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} lb_metrics SEC(".maps");

static __always_inline void count(__u32 what)
{
	__u64 *v = bpf_map_lookup_elem(&lb_metrics, &what);
	if (v)
		*v += 1;
}

static __always_inline __u32 mix64(__u64 x)
{
	/* murmur3's 64-bit finalizer */
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (__u32)x;
}

/* A backend for the service whose master entry is `svc` (key: its
 * frontend, slot 0). NULL with *refuse set when the service has none. */
static __always_inline const struct lb_backend *
select_backend(struct lb_svc_key *key, const struct lb_svc_val *svc, __u64 client,
	       __u64 sk_cookie, __u32 *backend_id)
{
	struct lb_aff_key akey = {.client = client, .rev_nat_id = svc->rev_nat_id};
	const struct lb_backend *be;
	__u32 id = 0;

	if (svc->flags & LB_F_AFFINITY) {
		struct lb_aff_val *a = bpf_map_lookup_elem(&lb_affinity, &akey);
		if (a && bpf_ktime_get_ns() - a->last_used_ns <=
				 (__u64)svc->affinity_timeout * 1000000000ULL) {
			struct lb_aff_match_key mk = {.backend_id = a->backend_id,
						      .rev_nat_id = svc->rev_nat_id};
			if (bpf_map_lookup_elem(&lb_aff_match, &mk)) {
				id = a->backend_id;
				count(LB_M_AFFINITY_HIT);
			}
		}
	}
	if (!id && svc->algorithm == LB_ALG_MAGLEV) {
		__u32 sid = svc->rev_nat_id;
		__u32 *tbl = bpf_map_lookup_elem(&lb_maglev, &sid);
		if (tbl) {
			__u32 idx = mix64(sk_cookie) % maglev_m;
			if (idx < maglev_m && idx < LB_MAGLEV_MAX)
				id = tbl[idx];
		}
	}
	if (!id) {
		struct lb_svc_val *slot;
		key->slot = (__u16)(bpf_get_prandom_u32() % svc->count) + 1;
		slot = bpf_map_lookup_elem(&lb_services, key);
		key->slot = 0;
		if (!slot)
			return 0;
		id = slot->backend_id;
	}
	be = bpf_map_lookup_elem(&lb_backends, &id);
	if (!be) {
		count(LB_M_BACKEND_MISSING);
		return 0;
	}
	if (svc->flags & LB_F_AFFINITY) {
		struct lb_aff_val a = {.last_used_ns = bpf_ktime_get_ns(), .backend_id = id};
		bpf_map_update_elem(&lb_affinity, &akey, &a, BPF_ANY);
	}
	*backend_id = id;
	return be;
}

/* Translate a connect()/sendmsg() destination in place. Returns 2 when
 * translated, 1 to let the call go on untouched (not a service), 0 to
 * refuse it. */
static __always_inline int xlate(struct bpf_sock_addr *ctx, __u8 addr[16], __u16 *port,
				 __u8 proto)
{
	struct lb_svc_key key = {.port = *port, .proto = proto};
	const struct lb_svc_val *svc;
	const struct lb_backend *be;
	__u32 id = 0;

	__builtin_memcpy(key.addr, addr, 16);
	svc = bpf_map_lookup_elem(&lb_services, &key);
	if (!svc)
		return 1;
	if (!svc->count) {
		count(LB_M_NO_BACKEND);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	be = select_backend(&key, svc, bpf_get_netns_cookie(ctx), bpf_get_socket_cookie(ctx), &id);
	if (!be) {
		count(LB_M_NO_BACKEND);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	struct lb_sk_revnat_key rk = {.cookie = bpf_get_socket_cookie(ctx), .port = be->port};
	struct lb_sk_revnat_val rv = {.port = *port, .rev_nat_id = svc->rev_nat_id};
	__builtin_memcpy(rk.addr, be->addr, 16);
	__builtin_memcpy(rv.addr, addr, 16);
	bpf_map_update_elem(&lb_sk_revnat, &rk, &rv, BPF_ANY);
	__builtin_memcpy(addr, be->addr, 16);
	*port = be->port;
	count(LB_M_TRANSLATED);
	return 2;
}

/* The frontend a backend address stands for on this socket: rewrite it. */
static __always_inline int revnat(struct bpf_sock_addr *ctx, __u8 addr[16], __u16 *port)
{
	struct lb_sk_revnat_key rk = {.cookie = bpf_get_socket_cookie(ctx), .port = *port};
	__builtin_memcpy(rk.addr, addr, 16);
	struct lb_sk_revnat_val *rv = bpf_map_lookup_elem(&lb_sk_revnat, &rk);
	if (!rv)
		return 0;
	__builtin_memcpy(addr, rv->addr, 16);
	*port = rv->port;
	count(LB_M_REVNAT);
	return 1;
}

static __always_inline void v4_to_addr(__u32 ip4, __u8 addr[16])
{
	__builtin_memset(addr, 0, 10);
	addr[10] = 0xff;
	addr[11] = 0xff;
	__builtin_memcpy(addr + 12, &ip4, 4);
}

static __always_inline int v4_translate(struct bpf_sock_addr *ctx, __u8 proto)
{
	__u8 addr[16];
	__u32 ip4 = ctx->user_ip4;
	__u16 port = (__u16)ctx->user_port;
	v4_to_addr(ip4, addr);
	int rc = xlate(ctx, addr, &port, proto);
	if (!rc)
		return 0;
	if (rc == 2) {
		__builtin_memcpy(&ip4, addr + 12, 4);
		ctx->user_ip4 = ip4;
		ctx->user_port = (__u32)port;
	}
	return 1;
}

static __always_inline void v6_load(struct bpf_sock_addr *ctx, __u8 addr[16])
{
	__u32 w[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
	__builtin_memcpy(addr, w, 16);
}

static __always_inline void v6_store(struct bpf_sock_addr *ctx, const __u8 addr[16])
{
	__u32 w[4];
	__builtin_memcpy(w, addr, 16);
	ctx->user_ip6[0] = w[0];
	ctx->user_ip6[1] = w[1];
	ctx->user_ip6[2] = w[2];
	ctx->user_ip6[3] = w[3];
}

static __always_inline int v6_translate(struct bpf_sock_addr *ctx, __u8 proto)
{
	__u8 addr[16];
	__u16 port = (__u16)ctx->user_port;
	v6_load(ctx, addr);
	int rc = xlate(ctx, addr, &port, proto);
	if (!rc)
		return 0;
	if (rc == 2) {
		v6_store(ctx, addr);
		ctx->user_port = (__u32)port;
	}
	return 1;
}

static __always_inline __u8 sock_proto(struct bpf_sock_addr *ctx)
{
	return (__u8)ctx->protocol;
}

SEC("cgroup/connect4")
int fibril_lb_connect4(struct bpf_sock_addr *ctx)
{
	return v4_translate(ctx, sock_proto(ctx));
}

SEC("cgroup/connect6")
int fibril_lb_connect6(struct bpf_sock_addr *ctx)
{
	return v6_translate(ctx, sock_proto(ctx));
}

SEC("cgroup/sendmsg4")
int fibril_lb_sendmsg4(struct bpf_sock_addr *ctx)
{
	return v4_translate(ctx, sock_proto(ctx));
}

SEC("cgroup/sendmsg6")
int fibril_lb_sendmsg6(struct bpf_sock_addr *ctx)
{
	return v6_translate(ctx, sock_proto(ctx));
}

static __always_inline int v4_revnat(struct bpf_sock_addr *ctx)
{
	__u8 addr[16];
	__u32 ip4 = ctx->user_ip4;
	__u16 port = (__u16)ctx->user_port;
	v4_to_addr(ip4, addr);
	if (revnat(ctx, addr, &port)) {
		__builtin_memcpy(&ip4, addr + 12, 4);
		ctx->user_ip4 = ip4;
		ctx->user_port = (__u32)port;
	}
	return 1;
}

static __always_inline int v6_revnat(struct bpf_sock_addr *ctx)
{
	__u8 addr[16];
	__u16 port = (__u16)ctx->user_port;
	v6_load(ctx, addr);
	if (revnat(ctx, addr, &port)) {
		v6_store(ctx, addr);
		ctx->user_port = (__u32)port;
	}
	return 1;
}

SEC("cgroup/recvmsg4")
int fibril_lb_recvmsg4(struct bpf_sock_addr *ctx)
{
	return v4_revnat(ctx);
}

SEC("cgroup/recvmsg6")
int fibril_lb_recvmsg6(struct bpf_sock_addr *ctx)
{
	return v6_revnat(ctx);
}

SEC("cgroup/getpeername4")
int fibril_lb_getpeername4(struct bpf_sock_addr *ctx)
{
	return v4_revnat(ctx);
}

SEC("cgroup/getpeername6")
int fibril_lb_getpeername6(struct bpf_sock_addr *ctx)
{
	return v6_revnat(ctx);
}

/* ---- per-packet NAT at tc (NodePort from outside the node) ---------------- */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_ct_key);
	__type(value, struct lb_ct_val);
} lb_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_device);
} lb_devices SEC(".maps");

#define AF_INET 2
#define AF_INET6 10
#define TCP_FL_FIN 0x01
#define TCP_FL_SYN 0x02
#define TCP_FL_RST 0x04
#define TCP_FL_ACK 0x10
#define IP_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP_SRC_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define IP_DST_OFF (ETH_HLEN + offsetof(struct iphdr, daddr))
#define IP6_SRC_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))
#define IP6_DST_OFF (ETH_HLEN + offsetof(struct ipv6hdr, daddr))
/* Ethernet + IPv6 + the TCP header up to its flags */
#define TC_PULL_LEN (ETH_HLEN + sizeof(struct ipv6hdr) + 14)

struct tc_pkt {
	__u8 saddr[16], daddr[16]; /* IPv4 mapped */
	__u16 sport, dport;        /* network order */
	__u8 proto;
	__u8 v6;
	__u8 tcp_flags;
	__u32 l4_off;
};

/* IPv4 without options (first fragment or unfragmented) or IPv6 whose next
 * header is the L4 one, TCP or UDP; anything else passes untouched. */
static __always_inline int tc_parse(struct __sk_buff *skb, struct tc_pkt *p)
{
	if (skb->data_end - skb->data < TC_PULL_LEN && skb->len > skb->data_end - skb->data)
		bpf_skb_pull_data(skb, skb->len < TC_PULL_LEN ? skb->len : TC_PULL_LEN);
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u8 *l4;
	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
			return 0;
		p->proto = ip->protocol;
		v4_to_addr(ip->saddr, p->saddr);
		v4_to_addr(ip->daddr, p->daddr);
		p->v6 = 0;
		p->l4_off = ETH_HLEN + sizeof(struct iphdr);
		l4 = (void *)(ip + 1);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		p->proto = ip6->nexthdr;
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		p->v6 = 1;
		p->l4_off = ETH_HLEN + sizeof(struct ipv6hdr);
		l4 = (void *)(ip6 + 1);
	} else {
		return 0;
	}
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return 0;
	if ((void *)(l4 + 4) > end)
		return 0;
	p->sport = *(__u16 *)l4;
	p->dport = *(__u16 *)(l4 + 2);
	p->tcp_flags = 0;
	if (p->proto == IPPROTO_TCP) {
		if ((void *)(l4 + 14) > end)
			return 0;
		p->tcp_flags = l4[13];
	}
	return 1;
}

/* Rewrite the source (src = 1) or destination address and port, with the
 * L4 checksum (pseudo header) and, for IPv4, the header checksum. */
static __always_inline void tc_rewrite(struct __sk_buff *skb, const struct tc_pkt *p, int src,
				       const __u8 addr[16], __u16 port)
{
	__u32 l4_csum = p->l4_off + (p->proto == IPPROTO_TCP ? offsetof(struct tcphdr, check)
							     : offsetof(struct udphdr, check));
	__u64 mangled = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u8 old[16], new[16];
	__builtin_memcpy(old, src ? p->saddr : p->daddr, 16);
	__builtin_memcpy(new, addr, 16);
	__u16 old_port = src ? p->sport : p->dport;
	if (p->v6) {
		__s64 diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)new, 16, 0);
		bpf_l4_csum_replace(skb, l4_csum, 0, (__u64)diff, BPF_F_PSEUDO_HDR | mangled);
		bpf_skb_store_bytes(skb, src ? IP6_SRC_OFF : IP6_DST_OFF, new, 16, 0);
	} else {
		__u32 o, n;
		__builtin_memcpy(&o, old + 12, 4);
		__builtin_memcpy(&n, new + 12, 4);
		bpf_l4_csum_replace(skb, l4_csum, o, n, BPF_F_PSEUDO_HDR | mangled | sizeof(n));
		bpf_l3_csum_replace(skb, IP_CSUM_OFF, o, n, sizeof(n));
		bpf_skb_store_bytes(skb, src ? IP_SRC_OFF : IP_DST_OFF, &n, sizeof(n), 0);
	}
	bpf_l4_csum_replace(skb, l4_csum, old_port, port, mangled | sizeof(port));
	bpf_skb_store_bytes(skb, p->l4_off + (src ? 0 : 2), &port, sizeof(port), 0);
}

/* The flow's `seen` after this packet: the second (never 0, which marks an
 * older program's entry) and the TCP state - FIN or RST: closing; a SYN
 * alone: a (new) handshake; the handshake's last ACK or data: open. */
static __always_inline __u32 ct_seen(__u32 old, const struct tc_pkt *p)
{
	__u32 f = old & (LB_CT_F_SYN | LB_CT_F_CLOSING);
	if (p->proto == IPPROTO_TCP) {
		__u8 fl = p->tcp_flags;
		if (fl & (TCP_FL_FIN | TCP_FL_RST))
			f = LB_CT_F_CLOSING;
		else if ((fl & TCP_FL_SYN) && !(fl & TCP_FL_ACK))
			f = LB_CT_F_SYN;
		else if (!(fl & TCP_FL_SYN) && !(f & LB_CT_F_CLOSING))
			f = 0;
	}
	__u32 t = (__u32)(bpf_ktime_get_ns() / 1000000000ULL) & LB_CT_SEEN_MASK;
	return (t ? t : 1) | f;
}

/* A packet matched (k, v): stamp it and, when that changed anything, its
 * partner (see fibril_lb.h), so both directions of a flow age together. */
static __always_inline void ct_touch(const struct lb_ct_key *k, struct lb_ct_val *v,
				     const struct tc_pkt *p)
{
	__u32 seen = ct_seen(v->seen, p);
	if (seen == v->seen)
		return;
	v->seen = seen;
	struct lb_ct_key pk = {.proto = k->proto};
	if (k->dir == LB_CT_INGRESS) {
		__builtin_memcpy(pk.saddr, v->addr, 16);
		__builtin_memcpy(pk.daddr, k->saddr, 16);
		pk.sport = v->port;
		pk.dport = k->sport;
		pk.dir = LB_CT_EGRESS;
	} else {
		__builtin_memcpy(pk.saddr, k->daddr, 16);
		__builtin_memcpy(pk.daddr, v->addr, 16);
		pk.sport = k->dport;
		pk.dport = v->port;
		pk.dir = LB_CT_INGRESS;
	}
	struct lb_ct_val *pv = bpf_map_lookup_elem(&lb_ct, &pk);
	if (pv)
		pv->seen = seen;
}

static __always_inline int addr_zero(const __u8 a[16])
{
	__u64 w[2];
	__builtin_memcpy(w, a, 16);
	return !(w[0] | w[1]);
}

/* Whether a new flow from the client in p to backend be needs SNAT: the
 * route to the backend leaves through a device of ours (a nodeport device
 * or the tunnel: the backend is on another node, whose reply would not
 * come back here). Then out = the address of the arrival device. */
static __always_inline int snat_needed(struct __sk_buff *skb, const struct tc_pkt *p,
				       const struct lb_backend *be, __u8 out[16])
{
	__u32 in = skb->ingress_ifindex;
	const struct lb_device *dev = bpf_map_lookup_elem(&lb_devices, &in);
	if (!dev || !(dev->flags & LB_DEV_NODEPORT))
		return 0;
	const __u8 *a = p->v6 ? dev->addr6 : dev->addr4;
	if (addr_zero(a))
		return 0;
	struct bpf_fib_lookup fib = {};
	fib.ifindex = in;
	fib.l4_protocol = p->proto;
	fib.sport = p->sport;
	fib.dport = be->port;
	if (p->v6) {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, p->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, be->addr, 16);
	} else {
		fib.family = AF_INET;
		__builtin_memcpy(&fib.ipv4_src, p->saddr + 12, 4);
		__builtin_memcpy(&fib.ipv4_dst, be->addr + 12, 4);
	}
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	int remote = 0;
	if (rc == BPF_FIB_LKUP_RET_UNSUPP_LWT) {
		remote = 1; /* an encapsulating route: the tunnel to another node */
	} else if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ||
		   rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		__u32 o = fib.ifindex;
		remote = bpf_map_lookup_elem(&lb_devices, &o) != 0;
	}
	if (!remote)
		return 0;
	__builtin_memcpy(out, a, 16);
	return 1;
}

/* Claim a free SNAT port for (backend, snat address): the ingress entry
 * (backend -> snat:port) -> client goes in with BPF_NOEXIST. Returns the
 * port (network order) or 0. */
static __always_inline __u16 snat_claim(const struct tc_pkt *p, const struct lb_backend *be,
					const __u8 snat[16], __u16 rev_nat_id, __u32 seen)
{
	struct lb_ct_key k = {.sport = be->port, .proto = p->proto, .dir = LB_CT_INGRESS};
	struct lb_ct_val v = {.port = p->sport, .rev_nat_id = rev_nat_id, .seen = seen};
	__builtin_memcpy(k.saddr, be->addr, 16);
	__builtin_memcpy(k.daddr, snat, 16);
	__builtin_memcpy(v.addr, p->saddr, 16);
	__u32 range = LB_SNAT_PORT_MAX - LB_SNAT_PORT_MIN + 1;
	__u16 port = bpf_ntohs(p->sport); /* the client's own port first */
	for (int i = 0; i < LB_SNAT_RETRIES; i++) {
		if (port < LB_SNAT_PORT_MIN)
			port = (__u16)(LB_SNAT_PORT_MIN + bpf_get_prandom_u32() % range);
		k.dport = bpf_htons(port);
		if (bpf_map_update_elem(&lb_ct, &k, &v, BPF_NOEXIST) == 0)
			return k.dport;
		port = 0;
	}
	return 0;
}

SEC("tc")
int fibril_lb_from_netdev(struct __sk_buff *skb)
{
	struct tc_pkt p = {};
	if (!tc_parse(skb, &p))
		return TC_ACT_UNSPEC; /* nothing to do: the next filter runs */
	struct lb_ct_key ck = {.sport = p.sport, .dport = p.dport, .proto = p.proto,
			       .dir = LB_CT_INGRESS};
	__builtin_memcpy(ck.saddr, p.saddr, 16);
	__builtin_memcpy(ck.daddr, p.daddr, 16);
	struct lb_ct_val *cv = bpf_map_lookup_elem(&lb_ct, &ck);
	if (cv) {
		ct_touch(&ck, cv, &p);
		tc_rewrite(skb, &p, 0, cv->addr, cv->port);
		count(LB_M_TC_DNAT);
		return TC_ACT_OK;
	}
	struct lb_svc_key key = {.port = p.dport, .proto = p.proto};
	__builtin_memcpy(key.addr, p.daddr, 16);
	const struct lb_svc_val *svc = bpf_map_lookup_elem(&lb_services, &key);
	if (!svc)
		return TC_ACT_UNSPEC;
	__u32 id = 0, s4, d4;
	__builtin_memcpy(&s4, p.saddr + 12, 4);
	__builtin_memcpy(&d4, p.daddr + 12, 4);
	if (p.v6) { /* fold the addresses' other words in too */
		__u64 w[4];
		__builtin_memcpy(w, p.saddr, 16);
		__builtin_memcpy(w + 2, p.daddr, 16);
		s4 ^= (__u32)(w[0] ^ (w[0] >> 32) ^ w[1]);
		d4 ^= (__u32)(w[2] ^ (w[2] >> 32) ^ w[3]);
	}
	const struct lb_backend *be = 0;
	if (svc->count)
		be = select_backend(&key, svc, (__u64)s4,
				    ((__u64)s4 << 32 | d4) ^
					    ((__u64)p.sport << 24 | (__u64)p.dport << 8 | p.proto),
				    &id);
	if (!be) {
		/* to the node's own stack: nothing listens on the frontend's
		 * port there, so the client gets a RST (TCP) or an ICMP / ICMPv6
		 * port unreachable (UDP) at once, not a timeout */
		count(LB_M_TC_NO_BACKEND);
		return TC_ACT_OK;
	}
	__u16 rev_nat_id = svc->rev_nat_id;
	__u32 seen = ct_seen(0, &p);
	__u8 snat[16];
	__u16 snat_port = 0;
	if (!(svc->flags & LB_F_EXT_LOCAL) && snat_needed(skb, &p, be, snat)) {
		snat_port = snat_claim(&p, be, snat, rev_nat_id, seen);
		if (!snat_port) {
			count(LB_M_TC_SNAT_NO_PORT);
			return TC_ACT_SHOT; /* the client retransmits */
		}
	}
	struct lb_ct_val nv = {.port = be->port, .rev_nat_id = rev_nat_id, .seen = seen};
	__builtin_memcpy(nv.addr, be->addr, 16);
	bpf_map_update_elem(&lb_ct, &ck, &nv, BPF_ANY);
	struct lb_ct_key rk = {.sport = be->port, .dport = p.sport, .proto = p.proto,
			       .dir = LB_CT_EGRESS};
	struct lb_ct_val rv = {.port = p.dport, .rev_nat_id = rev_nat_id, .seen = seen};
	__builtin_memcpy(rk.saddr, be->addr, 16);
	__builtin_memcpy(rk.daddr, p.saddr, 16);
	__builtin_memcpy(rv.addr, p.daddr, 16);
	bpf_map_update_elem(&lb_ct, &rk, &rv, BPF_ANY);
	if (snat_port) {
		/* what leaves towards the backend gets the node's address */
		struct lb_ct_key sk = {.sport = p.sport, .dport = be->port, .proto = p.proto,
				       .dir = LB_CT_EGRESS};
		struct lb_ct_val sv = {.port = snat_port, .rev_nat_id = rev_nat_id, .seen = seen};
		__builtin_memcpy(sk.saddr, p.saddr, 16);
		__builtin_memcpy(sk.daddr, be->addr, 16);
		__builtin_memcpy(sv.addr, snat, 16);
		bpf_map_update_elem(&lb_ct, &sk, &sv, BPF_ANY);
		count(LB_M_TC_SNAT);
	}
	tc_rewrite(skb, &p, 0, nv.addr, nv.port);
	count(LB_M_TC_DNAT);
	return TC_ACT_OK;
}

SEC("tc")
int fibril_lb_to_netdev(struct __sk_buff *skb)
{
	struct tc_pkt p = {};
	if (!tc_parse(skb, &p))
		return TC_ACT_UNSPEC; /* nothing to do: the next filter runs */
	struct lb_ct_key rk = {.sport = p.sport, .dport = p.dport, .proto = p.proto,
			       .dir = LB_CT_EGRESS};
	__builtin_memcpy(rk.saddr, p.saddr, 16);
	__builtin_memcpy(rk.daddr, p.daddr, 16);
	struct lb_ct_val *rv = bpf_map_lookup_elem(&lb_ct, &rk);
	if (!rv)
		return TC_ACT_UNSPEC;
	ct_touch(&rk, rv, &p);
	tc_rewrite(skb, &p, 1, rv->addr, rv->port);
	count(LB_M_TC_REVNAT);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
