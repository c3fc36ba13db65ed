/* tests/bpf/lb_prog_test.c - BPF_PROG_RUN tests of the lb module's tc
 * programs (bpf/fibril_lb.bpf.c fibril_lb_from_netdev / _to_netdev): the
 * skeleton is loaded with maps of its own (not pinned), the test writes a
 * service, its backends and lb_devices, feeds crafted frames with
 * bpf_prog_test_run_opts and checks the rewritten frames (addresses,
 * ports, IPv4 header, TCP and UDP checksums recomputed from scratch) and
 * lb_ct (entries, timestamps, TCP state):
 *   - IPv6 NodePort: DNAT of a TCP SYN and of a UDP datagram, reverse NAT
 *     of the replies; a FIN marks both entries of the flow closing;
 *   - SNAT: a frontend on a veth of the test's netns whose backend
 *     is routed out of that same device (another node): the four entries,
 *     a source port of LB_SNAT_PORT_MIN..MAX, then the whole round trip
 *     (client -> backend with the node's address, the reply back to the
 *     client from the frontend); a backend routed elsewhere (this node) and
 *     a service with externalTrafficPolicy Local get no SNAT;
 *   - issue 22: a ClusterIP and a NodePort off the node's addresses are not
 *     translated, an ExternalIP is; loadBalancerSourceRanges drop (and
 *     count) a client outside them; IPv4 options; IPv4 and IPv6 fragments
 *     (the later ones through lb_frag, the reassembled UDP checksum right);
 *     ICMP frag-needed and ICMPv6 packet-too-big about a DNATed and a
 *     SNATed flow translated back (outer, inner, every checksum); a rewrite
 *     whose helper fails drops the packet and counts it.
 * Runs in a network namespace of its own (unshare) whose devices and routes
 * it sets up with iproute2. Needs root and BPF: without them it skips (exit
 * 77), and fails in CI (CI=true). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>

#include "fibril_lb.h"
#include "fibril_lb.skel.h"
#include "prog_check.h"

static struct fibril_lb *g_skel;
static int g_from, g_to;
static int g_dev, g_local; /* ifindex of the nodeport device, of a "pod" device */

/* ---- addresses, the maps ------------------------------------------------------------- */
static void addr_of(const char *s, uint8_t out[16])
{
	memset(out, 0, 16);
	if (strchr(s, ':')) {
		inet_pton(AF_INET6, s, out);
	} else {
		out[10] = out[11] = 0xff;
		inet_pton(AF_INET, s, out + 12);
	}
}

static void put_backend(uint32_t id, const char *addr, uint16_t port, uint8_t proto)
{
	struct lb_backend b = {.port = htons(port), .proto = proto};
	addr_of(addr, b.addr);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_backends), &id, &b, BPF_ANY);
}

/* a service with one backend (ID = backend_id) */
static void put_service(const char *addr, uint16_t port, uint8_t proto, uint16_t id,
			uint32_t backend_id, uint8_t flags)
{
	struct lb_svc_key k = {.port = htons(port), .proto = proto};
	struct lb_svc_val v = {.count = 1, .rev_nat_id = id, .flags = flags};
	addr_of(addr, k.addr);
	int fd = bpf_map__fd(g_skel->maps.lb_services);
	bpf_map_update_elem(fd, &k, &v, BPF_ANY);
	k.slot = 1;
	memset(&v, 0, sizeof(v));
	v.backend_id = backend_id;
	v.rev_nat_id = id;
	bpf_map_update_elem(fd, &k, &v, BPF_ANY);
}

static bool ct_get(const char *s, uint16_t sport, const char *d, uint16_t dport, uint8_t proto,
		   uint8_t dir, struct lb_ct_val *v)
{
	struct lb_ct_key k = {.sport = htons(sport), .dport = htons(dport), .proto = proto, .dir = dir};
	addr_of(s, k.saddr);
	addr_of(d, k.daddr);
	return bpf_map_lookup_elem(bpf_map__fd(g_skel->maps.lb_ct), &k, v) == 0;
}

static size_t ct_count(void)
{
	struct lb_ct_key k, n, *cur = NULL;
	size_t c = 0;
	while (bpf_map_get_next_key(bpf_map__fd(g_skel->maps.lb_ct), cur, &n) == 0) {
		k = n;
		cur = &k;
		c++;
	}
	return c;
}

static bool addr_is(const uint8_t a[16], const char *s)
{
	uint8_t b[16];
	addr_of(s, b);
	return !memcmp(a, b, 16);
}

/* ---- frames ----------------------------------------------------------------------------- */
struct frame {
	uint8_t b[256];
	size_t len;
	bool v6;
	uint8_t proto;
	size_t ext6; /* IPv6: bytes of extension headers before L4 */
};

static uint32_t sum16(const uint8_t *p, size_t n, uint32_t s)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)p[i] << 8 | p[i + 1];
	if (n & 1)
		s += (uint32_t)p[n - 1] << 8;
	return s;
}

static uint16_t fold(uint32_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* the L3 header's length: IPv4 with its options (IHL), IPv6 with the
 * extension headers the frame was made with */
static size_t l3len(const struct frame *f)
{
	return f->v6 ? 40 + f->ext6 : (size_t)(f->b[14] & 0xf) * 4;
}

/* the L4 checksum over the pseudo header and the segment: 0 when right */
static uint16_t l4_check(const struct frame *f)
{
	const uint8_t *ip = f->b + 14, *l4 = ip + l3len(f);
	size_t n = f->len - 14 - l3len(f);
	uint32_t s = f->v6 ? sum16(ip + 8, 32, 0) : sum16(ip + 12, 8, 0);
	s += f->proto + (uint32_t)n;
	return fold(sum16(l4, n, s));
}

static void set_l4_check(struct frame *f)
{
	uint8_t *l4 = f->b + 14 + l3len(f);
	size_t off = f->proto == IPPROTO_TCP ? 16 : 6;
	l4[off] = l4[off + 1] = 0;
	uint16_t c = l4_check(f);
	l4[off] = (uint8_t)(c >> 8);
	l4[off + 1] = (uint8_t)c;
}

/* src/dst "addr", ports in host order; TCP flags or UDP */
static void mkframe(struct frame *f, const char *src, uint16_t sport, const char *dst,
		    uint16_t dport, uint8_t proto, uint8_t tcp_flags)
{
	memset(f, 0, sizeof(*f));
	f->v6 = strchr(src, ':') != NULL;
	f->proto = proto;
	uint8_t *b = f->b;
	memcpy(b, "\x02\0\0\0\0\x01\x02\0\0\0\0\x02", 12);
	b[12] = f->v6 ? 0x86 : 0x08;
	b[13] = f->v6 ? 0xdd : 0x00;
	size_t l4len = proto == IPPROTO_TCP ? 20 + 4 : 8 + 4; /* + 4 bytes payload */
	uint8_t *ip = b + 14;
	if (f->v6) {
		ip[0] = 0x60;
		ip[4] = (uint8_t)(l4len >> 8);
		ip[5] = (uint8_t)l4len;
		ip[6] = proto;
		ip[7] = 64;
		inet_pton(AF_INET6, src, ip + 8);
		inet_pton(AF_INET6, dst, ip + 24);
	} else {
		ip[0] = 0x45;
		ip[2] = (uint8_t)((20 + l4len) >> 8);
		ip[3] = (uint8_t)(20 + l4len);
		ip[8] = 64;
		ip[9] = proto;
		inet_pton(AF_INET, src, ip + 12);
		inet_pton(AF_INET, dst, ip + 16);
		uint16_t c = fold(sum16(ip, 20, 0));
		ip[10] = (uint8_t)(c >> 8);
		ip[11] = (uint8_t)c;
	}
	uint8_t *l4 = ip + l3len(f);
	l4[0] = (uint8_t)(sport >> 8);
	l4[1] = (uint8_t)sport;
	l4[2] = (uint8_t)(dport >> 8);
	l4[3] = (uint8_t)dport;
	if (proto == IPPROTO_TCP) {
		l4[12] = 5 << 4;
		l4[13] = tcp_flags;
		l4[14] = 0xff;
		memcpy(l4 + 20, "data", 4);
	} else {
		l4[4] = (uint8_t)(l4len >> 8);
		l4[5] = (uint8_t)l4len;
		memcpy(l4 + 8, "data", 4);
	}
	f->len = 14 + l3len(f) + l4len;
	set_l4_check(f);
}

static int run(int prog, struct frame *f, int ifindex)
{
	struct __sk_buff ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.ifindex = (uint32_t)ifindex;
	ctx.ingress_ifindex = (uint32_t)ifindex;
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = f->b, .data_size_in = (uint32_t)f->len,
		    .data_out = f->b, .data_size_out = sizeof(f->b), .ctx_in = &ctx,
		    .ctx_size_in = sizeof(ctx));
	if (bpf_prog_test_run_opts(prog, &o) != 0) {
		printf("  BPF_PROG_RUN: %s\n", strerror(errno));
		return INT32_MIN;
	}
	return (int)o.retval;
}

/* does the frame go from src:sport to dst:dport, with right checksums? */
static bool frame_is(const struct frame *f, const char *src, uint16_t sport, const char *dst,
		     uint16_t dport)
{
	uint8_t s[16], d[16], a[16], b[16];
	const uint8_t *ip = f->b + 14, *l4 = ip + l3len(f);
	if (f->v6) {
		memcpy(s, ip + 8, 16);
		memcpy(d, ip + 24, 16);
	} else {
		memset(s, 0, 16);
		memset(d, 0, 16);
		s[10] = s[11] = d[10] = d[11] = 0xff;
		memcpy(s + 12, ip + 12, 4);
		memcpy(d + 12, ip + 16, 4);
		if (fold(sum16(ip, l3len(f), 0)) != 0) {
			printf("  the IPv4 header checksum is wrong\n");
			return false;
		}
	}
	addr_of(src, a);
	addr_of(dst, b);
	bool ok = !memcmp(s, a, 16) && !memcmp(d, b, 16) &&
		  (l4[0] << 8 | l4[1]) == sport && (l4[2] << 8 | l4[3]) == dport;
	if (!ok) {
		char x[64], y[64];
		inet_ntop(AF_INET6, s, x, sizeof(x));
		inet_ntop(AF_INET6, d, y, sizeof(y));
		printf("  the frame goes %s:%u -> %s:%u\n", x, l4[0] << 8 | l4[1], y, l4[2] << 8 | l4[3]);
	}
	if (l4_check(f) != 0) {
		printf("  the %s checksum is wrong\n", f->proto == IPPROTO_TCP ? "TCP" : "UDP");
		return false;
	}
	return ok;
}

/* ---- tests ------------------------------------------------------------------------------ */
#define CLIENT6 "2001:db8::2"
#define FE6 "fd00:213::1"
#define BE6 "fd00:212::10"

static void test_ipv6_nodeport(void)
{
	struct frame f;
	struct lb_ct_val v, r;
	put_backend(1, BE6, 8080, IPPROTO_TCP);
	put_service(FE6, 30080, IPPROTO_TCP, 1, 1, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT6, 40000, FE6, 30080, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, 1) == TC_ACT_OK, "IPv6 NodePort: the SYN passes");
	check(frame_is(&f, CLIENT6, 40000, BE6, 8080), "IPv6: DNAT to [" BE6 "]:8080, checksum right");
	check(ct_get(CLIENT6, 40000, FE6, 30080, IPPROTO_TCP, LB_CT_INGRESS, &v) &&
		      addr_is(v.addr, BE6) && v.port == htons(8080) && v.rev_nat_id == 1,
	      "IPv6: lb_ct ingress (client, frontend) -> backend");
	check(ct_get(BE6, 8080, CLIENT6, 40000, IPPROTO_TCP, LB_CT_EGRESS, &r) &&
		      addr_is(r.addr, FE6) && r.port == htons(30080),
	      "IPv6: lb_ct egress (backend, client) -> frontend");
	check((v.seen & LB_CT_SEEN_MASK) && (v.seen & LB_CT_F_SYN) && !(v.seen & LB_CT_F_CLOSING),
	      "the entry is stamped, state handshake (seen=%#x)", v.seen);
	mkframe(&f, BE6, 8080, CLIENT6, 40000, IPPROTO_TCP, 0x12);
	check(run(g_to, &f, 1) == TC_ACT_OK && frame_is(&f, FE6, 30080, CLIENT6, 40000),
	      "IPv6: the SYN-ACK leaves from the frontend, checksum right");
	mkframe(&f, CLIENT6, 40000, FE6, 30080, IPPROTO_TCP, 0x10);
	run(g_from, &f, 1);
	ct_get(CLIENT6, 40000, FE6, 30080, IPPROTO_TCP, LB_CT_INGRESS, &v);
	check(!(v.seen & (LB_CT_F_SYN | LB_CT_F_CLOSING)), "the handshake's ACK: open (seen=%#x)", v.seen);
	mkframe(&f, CLIENT6, 40000, FE6, 30080, IPPROTO_TCP, 0x11);
	run(g_from, &f, 1);
	ct_get(CLIENT6, 40000, FE6, 30080, IPPROTO_TCP, LB_CT_INGRESS, &v);
	ct_get(BE6, 8080, CLIENT6, 40000, IPPROTO_TCP, LB_CT_EGRESS, &r);
	check((v.seen & LB_CT_F_CLOSING) && (r.seen & LB_CT_F_CLOSING),
	      "a FIN marks both entries of the flow closing (%#x, %#x)", v.seen, r.seen);

	put_backend(2, BE6, 8080, IPPROTO_UDP);
	put_service(FE6, 30053, IPPROTO_UDP, 2, 2, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT6, 40001, FE6, 30053, IPPROTO_UDP, 0);
	check(run(g_from, &f, 1) == TC_ACT_OK && frame_is(&f, CLIENT6, 40001, BE6, 8080),
	      "IPv6 UDP: DNAT, UDP checksum right");
	mkframe(&f, BE6, 8080, CLIENT6, 40001, IPPROTO_UDP, 0);
	check(run(g_to, &f, 1) == TC_ACT_OK && frame_is(&f, FE6, 30053, CLIENT6, 40001),
	      "IPv6 UDP: the reply from the frontend, UDP checksum right");
	mkframe(&f, CLIENT6, 40002, "fd00:213::99", 30053, IPPROTO_UDP, 0);
	check(run(g_from, &f, 1) == TC_ACT_UNSPEC && frame_is(&f, CLIENT6, 40002, "fd00:213::99", 30053),
	      "not a frontend: untouched, handed on to the next filter (TC_ACT_UNSPEC)");
}

#define NODE "192.0.2.1"   /* the nodeport device's address */
#define CLIENT "198.51.100.9"
#define REMOTE_BE "10.99.0.5" /* routed out of the nodeport device: another node */
#define LOCAL_BE "10.98.0.5"  /* routed to a local device: a pod of this node */

static void test_snat(void)
{
	struct frame f;
	struct lb_ct_val sv, nv;
	struct lb_device d = {.flags = LB_DEV_NODEPORT};
	uint32_t k = (uint32_t)g_dev;
	addr_of(NODE, d.addr4);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_devices), &k, &d, BPF_ANY);
	put_backend(10, REMOTE_BE, 8080, IPPROTO_TCP);
	put_service(NODE, 30090, IPPROTO_TCP, 10, 10, LB_SVC_NODE_PORT);
	size_t before = ct_count();
	mkframe(&f, CLIENT, 40000, NODE, 30090, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, g_dev) == TC_ACT_OK && frame_is(&f, CLIENT, 40000, REMOTE_BE, 8080),
	      "SNAT flow: DNAT to the remote backend (the source is SNATed on the way out)");
	check(ct_count() == before + 4, "a SNATed flow has four lb_ct entries (%zu)", ct_count() - before);
	bool have = ct_get(CLIENT, 40000, REMOTE_BE, 8080, IPPROTO_TCP, LB_CT_EGRESS, &sv);
	uint16_t port = ntohs(sv.port);
	check(have && addr_is(sv.addr, NODE) && port >= LB_SNAT_PORT_MIN,
	      "egress (client, backend) -> the node's address " NODE ":%u", port);
	check(ct_get(REMOTE_BE, 8080, NODE, port, IPPROTO_TCP, LB_CT_INGRESS, &nv) &&
		      addr_is(nv.addr, CLIENT) && nv.port == htons(40000),
	      "ingress (backend, node:%u) -> the client", port);
	/* the DNATed frame leaves through the device: SNAT */
	check(run(g_to, &f, g_dev) == TC_ACT_OK && frame_is(&f, NODE, port, REMOTE_BE, 8080),
	      "egress: the source becomes " NODE ":%u, checksums right", port);
	/* the backend's reply comes back to the node */
	mkframe(&f, REMOTE_BE, 8080, NODE, port, IPPROTO_TCP, 0x12);
	check(run(g_from, &f, g_dev) == TC_ACT_OK && frame_is(&f, REMOTE_BE, 8080, CLIENT, 40000),
	      "the reply's destination is restored to the client");
	check(run(g_to, &f, g_dev) == TC_ACT_OK && frame_is(&f, NODE, 30090, CLIENT, 40000),
	      "... and leaves from the frontend");
	/* a second client flow from the same port to the same backend: another SNAT port
	 * (the client's is taken) */
	mkframe(&f, "198.51.100.10", port, NODE, 30090, IPPROTO_TCP, 0x02);
	run(g_from, &f, g_dev);
	have = ct_get("198.51.100.10", port, REMOTE_BE, 8080, IPPROTO_TCP, LB_CT_EGRESS, &sv);
	check(have && ntohs(sv.port) != port && ntohs(sv.port) >= LB_SNAT_PORT_MIN,
	      "a port already taken for that backend is not reused (%u -> %u)", port, ntohs(sv.port));

	/* a backend of this node: no SNAT */
	put_backend(11, LOCAL_BE, 8080, IPPROTO_TCP);
	put_service(NODE, 30091, IPPROTO_TCP, 11, 11, LB_SVC_NODE_PORT);
	before = ct_count();
	mkframe(&f, CLIENT, 40001, NODE, 30091, IPPROTO_TCP, 0x02);
	run(g_from, &f, g_dev);
	check(ct_count() == before + 2 && frame_is(&f, CLIENT, 40001, LOCAL_BE, 8080),
	      "a backend on this node: DNAT only, two entries");
	/* externalTrafficPolicy Local: never SNAT */
	put_service(NODE, 30092, IPPROTO_TCP, 12, 10, LB_SVC_NODE_PORT | LB_F_EXT_LOCAL);
	before = ct_count();
	mkframe(&f, CLIENT, 40002, NODE, 30092, IPPROTO_TCP, 0x02);
	run(g_from, &f, g_dev);
	check(ct_count() == before + 2, "externalTrafficPolicy Local: no SNAT (the client's address kept)");
	/* SNAT off (no address in lb_devices): DNAT only */
	memset(d.addr4, 0, 16);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_devices), &k, &d, BPF_ANY);
	before = ct_count();
	mkframe(&f, CLIENT, 40003, NODE, 30090, IPPROTO_TCP, 0x02);
	run(g_from, &f, g_dev);
	check(ct_count() == before + 2, "without a SNAT address ([lb] nodeport-snat off): DNAT only");
}

/* ---- frames with IPv4 options, fragments, ICMP errors ---------------------------------- */
static void ip4_fix(struct frame *f)
{
	uint8_t *ip = f->b + 14;
	size_t tot = f->len - 14;
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[10] = ip[11] = 0;
	uint16_t c = fold(sum16(ip, l3len(f), 0));
	ip[10] = (uint8_t)(c >> 8);
	ip[11] = (uint8_t)c;
}

/* four bytes of IPv4 options (NOPs) between the header and L4 */
static void add_ip4_options(struct frame *f)
{
	uint8_t *ip = f->b + 14;
	memmove(ip + 24, ip + 20, f->len - 14 - 20);
	memset(ip + 20, 1, 4);
	ip[0] = 0x46;
	f->len += 4;
	ip4_fix(f);
}

/* Splits the UDP datagram f (made by mkframe: 8 bytes of header, 4 of
 * data) into two fragments with the same id: a holds the UDP header, b the
 * data (offset 8); IPv6 ones with a fragment header. */
static void fragment(const struct frame *f, struct frame *a, struct frame *b, uint16_t id)
{
	size_t l3 = l3len(f), l4n = f->len - 14 - l3; /* 12: 8 header + 4 data */
	const uint8_t *l4 = f->b + 14 + l3;
	*a = *f;
	*b = *f;
	if (!f->v6) {
		/* a: the UDP header (8 bytes), offset 0, MF; b: the 4 bytes of data at offset 8 */
		a->len = 14 + l3 + 8;
		a->b[14 + 4] = b->b[14 + 4] = (uint8_t)(id >> 8);
		a->b[14 + 5] = b->b[14 + 5] = (uint8_t)id;
		a->b[14 + 6] = 0x20; /* MF */
		a->b[14 + 7] = 0;
		memcpy(b->b + 14 + l3, l4 + 8, l4n - 8);
		b->len = 14 + l3 + (l4n - 8);
		b->b[14 + 6] = 0;
		b->b[14 + 7] = 1; /* offset 8 bytes */
		ip4_fix(a);
		ip4_fix(b);
		return;
	}
	/* IPv6: a fragment header (8 bytes) after the fixed header */
	for (int i = 0; i < 2; i++) {
		struct frame *x = i ? b : a;
		uint8_t *ip = x->b + 14, *fh = ip + 40;
		size_t n = i ? l4n - 8 : 8;
		memcpy(fh + 8, l4 + (i ? 8 : 0), n);
		memset(fh, 0, 8);
		fh[0] = IPPROTO_UDP;
		fh[2] = 0;
		fh[3] = i ? (uint8_t)(1 << 3) : 1; /* offset 1 (x 8 bytes), M */
		fh[4] = fh[5] = 0;
		fh[6] = (uint8_t)(id >> 8);
		fh[7] = (uint8_t)id;
		ip[6] = 44;
		ip[4] = (uint8_t)((8 + n) >> 8);
		ip[5] = (uint8_t)(8 + n);
		x->ext6 = 8;
		x->len = 14 + 40 + 8 + n;
	}
}

/* the addresses of a (fragment) frame, its IPv4 header checksum right */
static bool addrs_are(const struct frame *f, const char *src, const char *dst)
{
	const uint8_t *ip = f->b + 14;
	uint8_t s[16], d[16];
	addr_of(src, s);
	addr_of(dst, d);
	if (f->v6)
		return !memcmp(ip + 8, s, 16) && !memcmp(ip + 24, d, 16);
	return !memcmp(ip + 12, s + 12, 4) && !memcmp(ip + 16, d + 12, 4) &&
	       fold(sum16(ip, l3len(f), 0)) == 0;
}

/* the UDP checksum of the datagram the two fragments make: 0 when right */
static uint16_t reassembled_udp_check(const struct frame *a, const struct frame *b)
{
	struct frame w = *a;
	size_t l3 = l3len(a), bl3 = l3len(b);
	memcpy(w.b + 14 + l3 + 8, b->b + 14 + bl3, b->len - 14 - bl3);
	w.len = a->len + (b->len - 14 - bl3);
	w.proto = IPPROTO_UDP;
	if (w.v6) { /* the checksum is over L4 only: drop the fragment header */
		memmove(w.b + 14 + 40, w.b + 14 + 48, w.len - 14 - 48);
		w.len -= 8;
		w.ext6 = 0;
	}
	return l4_check(&w);
}

/* An ICMP error (IPv4 type/code, or ICMPv6) from src to dst about the
 * packet `about` (its IP header and the first 8 bytes of L4) */
static void mkicmp(struct frame *f, const char *src, const char *dst, uint8_t type, uint8_t code,
		   const struct frame *about)
{
	struct frame in = *about;
	mkframe(f, src, 0, dst, 0, IPPROTO_UDP, 0);
	size_t l3 = l3len(f), n = l3len(&in) + 8;
	uint8_t *icmp = f->b + 14 + l3;
	memset(icmp, 0, 8);
	icmp[0] = type;
	icmp[1] = code;
	if (type == 3 && code == 4)
		icmp[7] = 0xdc, icmp[6] = 0x05; /* MTU 1500 */
	if (f->v6 && type == 2)
		icmp[6] = 0x05, icmp[7] = 0xdc;
	memcpy(icmp + 8, in.b + 14, n);
	f->len = 14 + l3 + 8 + n;
	f->proto = f->v6 ? 58 : IPPROTO_ICMP;
	uint8_t *ip = f->b + 14;
	if (f->v6) {
		ip[6] = 58;
		ip[4] = 0;
		ip[5] = (uint8_t)(8 + n);
		uint32_t s = sum16(ip + 8, 32, 0) + 58 + (uint32_t)(8 + n);
		uint16_t c = fold(sum16(icmp, 8 + n, s));
		icmp[2] = (uint8_t)(c >> 8);
		icmp[3] = (uint8_t)c;
	} else {
		ip[9] = IPPROTO_ICMP;
		ip4_fix(f);
		uint16_t c = fold(sum16(icmp, 8 + n, 0));
		icmp[2] = (uint8_t)(c >> 8);
		icmp[3] = (uint8_t)c;
	}
}

/* The ICMP error f: its outer addresses, the inner packet's addresses and
 * ports, every checksum (outer IPv4 header, ICMP / ICMPv6 with its pseudo
 * header, the inner IPv4 header) right. */
static bool icmp_is(const struct frame *f, const char *osrc, const char *odst, const char *isrc,
		    uint16_t isport, const char *idst, uint16_t idport)
{
	const uint8_t *ip = f->b + 14, *icmp = ip + l3len(f), *in = icmp + 8;
	size_t n = f->len - 14 - l3len(f);
	bool ok = addrs_are(f, osrc, odst);
	if (!ok)
		printf("  the outer addresses are not %s -> %s\n", osrc, odst);
	uint32_t s = f->v6 ? sum16(ip + 8, 32, 0) + 58 + (uint32_t)n : 0;
	if (fold(sum16(icmp, n, s)) != 0) {
		printf("  the ICMP checksum is wrong\n");
		ok = false;
	}
	struct frame inner = {.v6 = f->v6};
	memcpy(inner.b + 14, in, n - 8);
	inner.len = 14 + n - 8;
	size_t il3 = f->v6 ? 40 : (size_t)(in[0] & 0xf) * 4;
	if (!addrs_are(&inner, isrc, idst)) {
		printf("  the inner packet's addresses (or its IPv4 header checksum) are wrong\n");
		ok = false;
	}
	const uint8_t *l4 = in + il3;
	if ((l4[0] << 8 | l4[1]) != isport || (l4[2] << 8 | l4[3]) != idport) {
		printf("  the inner ports are %u -> %u\n", l4[0] << 8 | l4[1], l4[2] << 8 | l4[3]);
		ok = false;
	}
	return ok;
}

static uint64_t metric(uint32_t which)
{
	uint64_t v[256] = {0}, sum = 0;
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu > 256 ||
	    bpf_map_lookup_elem(bpf_map__fd(g_skel->maps.lb_metrics), &which, v) != 0)
		return 0;
	for (int c = 0; c < ncpu; c++)
		sum += v[c];
	return sum;
}

static void node_addr(const char *a)
{
	uint8_t k[16], one = 1;
	addr_of(a, k);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_node_addrs), k, &one, BPF_ANY);
}

/* which service types tc translates, and where */
static void test_types(void)
{
	struct frame f;
	put_backend(25, LOCAL_BE, 8080, IPPROTO_TCP);
	put_service(NODE, 30105, IPPROTO_TCP, 25, 25, LB_SVC_CLUSTER_IP);
	mkframe(&f, CLIENT, 43010, NODE, 30105, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, g_dev) == TC_ACT_UNSPEC && frame_is(&f, CLIENT, 43010, NODE, 30105),
	      "a ClusterIP frontend is not translated at tc (from outside): handed on");
	put_service("10.98.0.99", 30106, IPPROTO_TCP, 26, 25, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT, 43011, "10.98.0.99", 30106, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, g_dev) == TC_ACT_UNSPEC && frame_is(&f, CLIENT, 43011, "10.98.0.99", 30106),
	      "a NodePort on an address that is not the node's is not translated: handed on");
	put_service("10.98.0.99", 30107, IPPROTO_TCP, 27, 25, LB_SVC_EXTERNAL_IP);
	mkframe(&f, CLIENT, 43012, "10.98.0.99", 30107, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, g_dev) == TC_ACT_OK && frame_is(&f, CLIENT, 43012, LOCAL_BE, 8080),
	      "an ExternalIP frontend is translated");
}

static void test_source_ranges(void)
{
	struct frame f;
	struct lb_src_range_key k = {.prefixlen = 32 + 96 + 25, .rev_nat_id = htons(28)};
	uint8_t one = 1;
	addr_of("198.51.100.0", k.addr);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_src_range), &k, &one, BPF_ANY);
	put_backend(28, LOCAL_BE, 8080, IPPROTO_TCP);
	put_service("10.98.0.98", 80, IPPROTO_TCP, 28, 28, LB_SVC_LOAD_BALANCER | LB_F_SRC_RANGES);
	mkframe(&f, CLIENT, 43013, "10.98.0.98", 80, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, g_dev) == TC_ACT_OK && frame_is(&f, CLIENT, 43013, LOCAL_BE, 8080),
	      "a client inside loadBalancerSourceRanges (198.51.100.0/25) is served");
	uint64_t before = metric(LB_M_TC_SRC_RANGE_DROP);
	mkframe(&f, "198.51.100.200", 43014, "10.98.0.98", 80, IPPROTO_TCP, 0x02);
	check(run(g_from, &f, g_dev) == TC_ACT_SHOT && metric(LB_M_TC_SRC_RANGE_DROP) == before + 1,
	      "a client outside them is dropped and counted");
}

static void test_ip_options(void)
{
	struct frame f;
	put_backend(20, LOCAL_BE, 8080, IPPROTO_TCP);
	put_service(NODE, 30100, IPPROTO_TCP, 20, 20, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT, 43000, NODE, 30100, IPPROTO_TCP, 0x02);
	add_ip4_options(&f);
	check(run(g_from, &f, g_dev) == TC_ACT_OK && frame_is(&f, CLIENT, 43000, LOCAL_BE, 8080),
	      "IPv4 with options: DNAT (L4 found past the options), checksums right");
	mkframe(&f, LOCAL_BE, 8080, CLIENT, 43000, IPPROTO_TCP, 0x12);
	add_ip4_options(&f);
	check(run(g_to, &f, g_dev) == TC_ACT_OK && frame_is(&f, NODE, 30100, CLIENT, 43000),
	      "IPv4 with options: the reply leaves from the frontend");
}

static void test_fragments(void)
{
	struct frame f, a, b;
	put_backend(21, LOCAL_BE, 8080, IPPROTO_UDP);
	put_service(NODE, 30101, IPPROTO_UDP, 21, 21, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT, 43001, NODE, 30101, IPPROTO_UDP, 0);
	fragment(&f, &a, &b, 0x4242);
	check(run(g_from, &a, g_dev) == TC_ACT_OK && addrs_are(&a, CLIENT, LOCAL_BE) &&
		      (a.b[14 + 20 + 2] << 8 | a.b[14 + 20 + 3]) == 8080,
	      "IPv4 first fragment: DNAT to " LOCAL_BE ":8080");
	check(run(g_from, &b, g_dev) == TC_ACT_OK && addrs_are(&b, CLIENT, LOCAL_BE),
	      "IPv4 later fragment (no L4 header): the same backend, header checksum right");
	check(reassembled_udp_check(&a, &b) == 0, "... the reassembled datagram's UDP checksum is right");
	mkframe(&f, LOCAL_BE, 8080, CLIENT, 43001, IPPROTO_UDP, 0);
	fragment(&f, &a, &b, 0x4343);
	check(run(g_to, &a, g_dev) == TC_ACT_OK && run(g_to, &b, g_dev) == TC_ACT_OK &&
		      addrs_are(&a, NODE, CLIENT) && addrs_are(&b, NODE, CLIENT) &&
		      reassembled_udp_check(&a, &b) == 0,
	      "IPv4 fragmented reply: both fragments from the frontend, UDP checksum right");
	/* IPv6: a fragment header */
	mkframe(&f, CLIENT6, 43002, FE6, 30053, IPPROTO_UDP, 0);
	fragment(&f, &a, &b, 0x77);
	check(run(g_from, &a, 1) == TC_ACT_OK && addrs_are(&a, CLIENT6, BE6) &&
		      (a.b[14 + 48 + 2] << 8 | a.b[14 + 48 + 3]) == 8080,
	      "IPv6 first fragment (fragment header): DNAT to [" BE6 "]:8080");
	check(run(g_from, &b, 1) == TC_ACT_OK && addrs_are(&b, CLIENT6, BE6),
	      "IPv6 later fragment: the same backend");
	check(reassembled_udp_check(&a, &b) == 0, "... the reassembled datagram's UDP checksum is right");
}

static void test_icmp_errors(void)
{
	struct frame f, e;
	/* DNAT only: the backend (this node) tells the client "fragmentation needed" */
	put_backend(22, LOCAL_BE, 8080, IPPROTO_TCP);
	put_service(NODE, 30102, IPPROTO_TCP, 22, 22, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT, 43003, NODE, 30102, IPPROTO_TCP, 0x02);
	run(g_from, &f, g_dev);
	mkicmp(&e, LOCAL_BE, CLIENT, 3, 4, &f); /* about the DNATed SYN */
	check(run(g_to, &e, g_dev) == TC_ACT_OK &&
		      icmp_is(&e, NODE, CLIENT, CLIENT, 43003, NODE, 30102),
	      "ICMP frag needed from the backend: outer source and inner destination are the "
	      "frontend again, checksums right");
	/* SNAT: a router on the way to the remote backend tells the node */
	struct lb_device d = {.flags = LB_DEV_NODEPORT};
	uint32_t k = (uint32_t)g_dev;
	addr_of(NODE, d.addr4);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_devices), &k, &d, BPF_ANY);
	put_service(NODE, 30103, IPPROTO_TCP, 23, 10, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT, 43004, NODE, 30103, IPPROTO_TCP, 0x02);
	run(g_from, &f, g_dev);
	run(g_to, &f, g_dev); /* SNATed on the way out */
	uint16_t port = (uint16_t)(f.b[14 + 20] << 8 | f.b[14 + 21]);
	mkicmp(&e, "192.0.2.2", NODE, 3, 4, &f);
	check(run(g_from, &e, g_dev) == TC_ACT_OK &&
		      icmp_is(&e, "192.0.2.2", CLIENT, CLIENT, 43004, REMOTE_BE, 8080),
	      "ICMP about a SNATed flow (node port %u): to the client, inner source the client", port);
	check(run(g_to, &e, g_dev) == TC_ACT_OK &&
		      icmp_is(&e, "192.0.2.2", CLIENT, CLIENT, 43004, NODE, 30103),
	      "... and on the way out the inner destination is the frontend (the router stays)");
	memset(d.addr4, 0, 16);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_devices), &k, &d, BPF_ANY);
	/* ICMPv6 packet too big from the backend about a UDP flow */
	mkframe(&f, CLIENT6, 43005, FE6, 30053, IPPROTO_UDP, 0);
	run(g_from, &f, 1);
	mkicmp(&e, BE6, CLIENT6, 2, 0, &f);
	check(run(g_to, &e, 1) == TC_ACT_OK && icmp_is(&e, FE6, CLIENT6, CLIENT6, 43005, FE6, 30053),
	      "ICMPv6 packet too big from the backend: translated back, ICMPv6 checksum right");
	/* an ICMP error about no flow of ours: untouched */
	mkframe(&f, CLIENT, 43999, "10.98.0.77", 80, IPPROTO_TCP, 0x02);
	mkicmp(&e, "10.98.0.77", CLIENT, 3, 3, &f);
	struct frame copy = e;
	check(run(g_to, &e, g_dev) == TC_ACT_UNSPEC && !memcmp(copy.b, e.b, e.len),
	      "an ICMP error about another flow passes untouched: handed on");
}

static void test_rewrite_failure(void)
{
	struct frame f;
	put_backend(24, LOCAL_BE, 8080, IPPROTO_UDP);
	put_service(NODE, 30104, IPPROTO_UDP, 24, 24, LB_SVC_NODE_PORT);
	mkframe(&f, CLIENT, 43006, NODE, 30104, IPPROTO_UDP, 0);
	f.len = 14 + 20 + 4; /* the datagram cut after its ports: no room for the checksum */
	ip4_fix(&f);
	uint64_t before = metric(LB_M_TC_REWRITE_FAIL);
	int rc = run(g_from, &f, g_dev);
	check(rc == TC_ACT_SHOT, "a rewrite that fails (the checksum beyond the packet) drops it (%d)", rc);
	check(metric(LB_M_TC_REWRITE_FAIL) == before + 1, "... counted as tc-rewrite-fail");
}

static int sh(const char *cmd)
{
	int rc = system(cmd);
	if (rc != 0)
		printf("  '%s' failed\n", cmd);
	return rc;
}

int main(void)
{
	int rc = prog_test_netns();
	if (rc)
		return rc;
	/* the node: a nodeport device with a route to "another node"'s pods, a
	 * device for this node's pods */
	if (sh("ip link set lo up && ip link add lbt0 type veth peer name lbt0p && ip link set lbt0p up && ip link set lbt0 up && "
	       "ip addr add " NODE "/24 dev lbt0 && ip route add 10.99.0.0/24 via 192.0.2.2 dev lbt0 && "
	       "ip neigh replace 192.0.2.2 lladdr 02:00:00:00:00:02 dev lbt0 && "
	       "ip link add lbt1 type veth peer name lbt1p && ip link set lbt1p up && ip link set lbt1 up && "
	       "ip route add 10.98.0.0/24 dev lbt1 && ip route add 198.51.100.0/24 via 192.0.2.3 dev lbt0 && "
	       "ip addr add " FE6 "/64 dev lbt1 nodad && sysctl -qw net.ipv4.ip_forward=1") != 0) {
		printf("%s: cannot set up the test's network namespace (iproute2?)\n", g_ci ? "FAIL" : "SKIP");
		return g_ci ? 1 : 77;
	}
	g_dev = (int)if_nametoindex("lbt0");
	g_local = (int)if_nametoindex("lbt1");
	g_skel = fibril_lb__open();
	if (g_skel) {
		bpf_map__set_max_entries(g_skel->maps.lb_services, 1024);
		bpf_map__set_max_entries(g_skel->maps.lb_backends, 1024);
		bpf_map__set_max_entries(g_skel->maps.lb_ct, 1024);
		bpf_map__set_max_entries(g_skel->maps.lb_devices, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_affinity, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_aff_match, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_sk_revnat, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_maglev, 1);
		bpf_map__set_max_entries(g_skel->maps.lb_src_range, 64);
		bpf_map__set_max_entries(g_skel->maps.lb_node_addrs, 64);
	}
	if (!g_skel || fibril_lb__load(g_skel) != 0) {
		printf("%s: cannot load the lb programs: %s\n", g_ci ? "FAIL" : "SKIP", strerror(errno));
		return g_ci ? 1 : 77;
	}
	g_from = bpf_program__fd(g_skel->progs.fibril_lb_from_netdev);
	g_to = bpf_program__fd(g_skel->progs.fibril_lb_to_netdev);
	node_addr(NODE); /* what the module keeps in lb_node_addrs */
	node_addr(FE6);

	test_ipv6_nodeport();
	test_snat();
	test_types();
	test_source_ranges();
	test_ip_options();
	test_fragments();
	test_icmp_errors();
	test_rewrite_failure();

	fibril_lb__destroy(g_skel);
	printf("%d passed, %d failed\n", g_passed, g_failed);
	return g_failed ? 1 : 0;
}
