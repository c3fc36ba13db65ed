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
 * from outside the node to a NodePort on the node's address, an external
 * or load-balancer IP (a ClusterIP only with [lb] external-clusterip) -
 * with reverse NAT of the replies, their fragments and the ICMP errors
 * about them through lb_ct, SNAT to a backend on another node, and
 * loadBalancerSourceRanges: bpf/fibril_lb_tc.bpf.h.
 * Layouts in fibril_lb.h. Only uapi headers and libbpf's helpers. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/in6.h>
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
#include "fibril_lb_tc.bpf.h"

char LICENSE[] SEC("license") = "GPL";
