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
 *     a service with externalTrafficPolicy Local get no SNAT.
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

static size_t l3len(const struct frame *f) { return f->v6 ? 40 : 20; }

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
		if (fold(sum16(ip, 20, 0)) != 0) {
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
	       "sysctl -qw net.ipv4.ip_forward=1") != 0) {
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
	}
	if (!g_skel || fibril_lb__load(g_skel) != 0) {
		printf("%s: cannot load the lb programs: %s\n", g_ci ? "FAIL" : "SKIP", strerror(errno));
		return g_ci ? 1 : 77;
	}
	g_from = bpf_program__fd(g_skel->progs.fibril_lb_from_netdev);
	g_to = bpf_program__fd(g_skel->progs.fibril_lb_to_netdev);

	test_ipv6_nodeport();
	test_snat();

	fibril_lb__destroy(g_skel);
	printf("%d passed, %d failed\n", g_passed, g_failed);
	return g_failed ? 1 : 0;
}
