/* tests/bpf/lb_quota_test.c - BPF_PROG_RUN tests of the per-client quota
 * on lb_ct (issue 22: [lb] ct-source-max, the lb_ct_src counts): the lb
 * skeleton is loaded with maps of its own and ct_source_max = 3, and SYNs
 * to a NodePort whose backend is on this node (two lb_ct entries a flow,
 * no SNAT) check that
 *   - a client's fourth flow is dropped before any entry is made, and
 *     counted (tc-ct-source-quota); another client is served; a packet of
 *     a flow already made is not counted again;
 *   - an IPv6 client is its /64: a second address of that /64 is over the
 *     quota, another /64 is not;
 *   - only the flow's ingress (client, frontend) entry carries
 *     LB_CT_F_CHARGED; giving back a pair (lb_ctgc_uncharge) takes one
 *     off for the charged entry only, never below 0;
 *   - a GC pass (lb_ctgc_pass, the module's) that removes the expired
 *     flows gives their counts back, and the client is served again.
 * Root and BPF needed: without them it skips (exit 77), fails in CI. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>

#include "fibril_lb.h"
#include "fibril_lb.skel.h"
#include "lb_tc.h"
#include "prog_check.h"

#define NODE "192.0.2.1"
#define BACKEND "10.98.0.10"
#define NODE6 "fd00:213::1"
#define BACKEND6 "fd00:212::10"
#define QUOTA 3

static struct fibril_lb *g_skel;
static uint64_t *g_src; /* lb_ct_src mapped */

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

/* a NodePort service (node:port) with one backend on this node */
static void put_nodeport(const char *node, uint16_t port, uint16_t id, const char *be)
{
	struct lb_backend b = {.port = htons(8080), .proto = IPPROTO_TCP};
	uint32_t bid = id;
	addr_of(be, b.addr);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_backends), &bid, &b, BPF_ANY);
	struct lb_svc_key k = {.port = htons(port), .proto = IPPROTO_TCP};
	struct lb_svc_val v = {.count = 1, .rev_nat_id = id, .flags = LB_SVC_NODE_PORT};
	addr_of(node, k.addr);
	int fd = bpf_map__fd(g_skel->maps.lb_services);
	bpf_map_update_elem(fd, &k, &v, BPF_ANY);
	k.slot = 1;
	memset(&v, 0, sizeof(v));
	v.backend_id = bid;
	v.rev_nat_id = id;
	bpf_map_update_elem(fd, &k, &v, BPF_ANY);
	struct lb_node_addr_key nk;
	uint8_t one = 1;
	memset(&nk, 0, sizeof(nk));
	addr_of(node, nk.addr);
	bpf_map_update_elem(bpf_map__fd(g_skel->maps.lb_node_addrs), &nk, &one, BPF_ANY);
}

/* one TCP segment (flags) from src:sport to dst:dport through
 * fibril_lb_from_netdev: the program's verdict */
static int segment(const char *src, uint16_t sport, const char *dst, uint16_t dport, uint8_t flags)
{
	uint8_t b[128];
	memset(b, 0, sizeof(b));
	bool v6 = strchr(src, ':') != NULL;
	b[12] = v6 ? 0x86 : 0x08;
	b[13] = v6 ? 0xdd : 0x00;
	uint8_t *ip = b + 14, *l4;
	if (v6) {
		ip[0] = 0x60;
		ip[5] = 20;
		ip[6] = IPPROTO_TCP;
		ip[7] = 64;
		inet_pton(AF_INET6, src, ip + 8);
		inet_pton(AF_INET6, dst, ip + 24);
		l4 = ip + 40;
	} else {
		ip[0] = 0x45;
		ip[3] = 40;
		ip[8] = 64;
		ip[9] = IPPROTO_TCP;
		inet_pton(AF_INET, src, ip + 12);
		inet_pton(AF_INET, dst, ip + 16);
		l4 = ip + 20;
	}
	l4[0] = (uint8_t)(sport >> 8);
	l4[1] = (uint8_t)sport;
	l4[2] = (uint8_t)(dport >> 8);
	l4[3] = (uint8_t)dport;
	l4[12] = 5 << 4;
	l4[13] = flags;
	uint32_t len = (uint32_t)(l4 + 20 - b);
	struct __sk_buff ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.ifindex = ctx.ingress_ifindex = 1;
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = b, .data_size_in = len, .data_out = b,
		    .data_size_out = sizeof(b), .ctx_in = &ctx, .ctx_size_in = sizeof(ctx));
	if (bpf_prog_test_run_opts(bpf_program__fd(g_skel->progs.fibril_lb_from_netdev), &o) != 0) {
		printf("  BPF_PROG_RUN: %s\n", strerror(errno));
		return -1000;
	}
	return (int)o.retval;
}

static uint64_t metric(uint32_t k)
{
	uint64_t v[256] = {0}, sum = 0;
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu > 256 || bpf_map_lookup_elem(bpf_map__fd(g_skel->maps.lb_metrics), &k, v) != 0)
		return 0;
	for (int c = 0; c < ncpu; c++)
		sum += v[c];
	return sum;
}

/* what lb_ct_src holds for a client */
static uint64_t held(const char *client)
{
	uint8_t a[16];
	addr_of(client, a);
	return g_src[lb_ct_src_slot(a, g_src[0])];
}

static bool ct_get(const char *s, uint16_t sport, const char *d, uint16_t dport, uint8_t dir,
		   struct lb_ct_key *k, struct lb_ct_val *v)
{
	memset(k, 0, sizeof(*k));
	k->sport = htons(sport);
	k->dport = htons(dport);
	k->proto = IPPROTO_TCP;
	k->dir = dir;
	addr_of(s, k->saddr);
	addr_of(d, k->daddr);
	return bpf_map_lookup_elem(bpf_map__fd(g_skel->maps.lb_ct), k, v) == 0;
}

static void test_ipv4(void)
{
	const char *a = "203.0.113.7", *b = "203.0.113.8";
	for (uint16_t i = 0; i < QUOTA; i++)
		check(segment(a, 40000 + i, NODE, 30080, 0x02) == TC_ACT_OK,
		      "client %s, flow %u of %u: translated", a, i + 1, QUOTA);
	check(held(a) == QUOTA, "lb_ct_src holds %d flows for it (%llu)", QUOTA,
	      (unsigned long long)held(a));
	uint64_t before = metric(LB_M_TC_CT_SRC_QUOTA);
	struct lb_ct_key k;
	struct lb_ct_val v;
	check(segment(a, 40100, NODE, 30080, 0x02) == TC_ACT_SHOT,
	      "its flow %d (over [lb] ct-source-max) is dropped", QUOTA + 1);
	check(metric(LB_M_TC_CT_SRC_QUOTA) == before + 1, "... counted as tc-ct-source-quota");
	check(!ct_get(a, 40100, NODE, 30080, LB_CT_INGRESS, &k, &v) && held(a) == QUOTA,
	      "... before any lb_ct entry was made (and not charged)");
	check(segment(a, 40000, NODE, 30080, 0x10) == TC_ACT_OK && held(a) == QUOTA,
	      "a packet of a flow it already has is translated, not charged again");
	check(segment(b, 40000, NODE, 30080, 0x02) == TC_ACT_OK && held(b) == 1,
	      "another client %s is served", b);
	check(ct_get(a, 40000, NODE, 30080, LB_CT_INGRESS, &k, &v) && (v.seen & LB_CT_F_CHARGED),
	      "the flow's ingress (client, frontend) entry carries the charge");
	struct lb_ct_key rk;
	struct lb_ct_val rv;
	check(ct_get(BACKEND, 8080, a, 40000, LB_CT_EGRESS, &rk, &rv) &&
		      !(rv.seen & LB_CT_F_CHARGED),
	      "its egress (backend, client) entry does not");
	lb_ctgc_uncharge(g_src, &rk, &rv);
	check(held(a) == QUOTA, "giving back the uncharged entry changes nothing");
	lb_ctgc_uncharge(g_src, &k, &v);
	check(held(a) == QUOTA - 1, "giving back the charged entry takes one off");
	g_src[lb_ct_src_slot(k.saddr, g_src[0])] = QUOTA; /* as it was */
}

static void test_ipv6(void)
{
	for (uint16_t i = 0; i < QUOTA; i++)
		segment("2001:db8:1::1", 41000 + i, NODE6, 30080, 0x02);
	check(held("2001:db8:1::1") == QUOTA, "IPv6: client 2001:db8:1::1 holds %d flows", QUOTA);
	check(segment("2001:db8:1::2", 41000, NODE6, 30080, 0x02) == TC_ACT_SHOT,
	      "IPv6: another address of its /64 is over the same quota");
	check(segment("2001:db8:2::1", 41000, NODE6, 30080, 0x02) == TC_ACT_OK,
	      "IPv6: an address of another /64 is served");
}

static void test_gc_gives_back(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	struct lb_ctgc_params p = {.now_s = (uint32_t)ts.tv_sec + 22000, .tcp_s = 21600, .syn_s = 60,
				   .closing_s = 10, .other_s = 60, .src = g_src};
	size_t seen = 0, removed = 0, stamped = 0;
	uint64_t calls = 0;
	int rc = lb_ctgc_pass(bpf_map__fd(g_skel->maps.lb_ct), &p, &seen, &removed, &stamped, &calls);
	check(rc == 0 && removed == seen && seen > 0,
	      "a GC pass 22000 s later (past every timeout) removes every flow (%zu of %zu)",
	      removed, seen);
	check(held("203.0.113.7") == 0 && held("203.0.113.8") == 0 && held("2001:db8:1::1") == 0,
	      "... and gives every client's count back");
	check(segment("203.0.113.7", 40200, NODE, 30080, 0x02) == TC_ACT_OK,
	      "the client that was over its quota is served again");
}

int main(void)
{
	int rc = prog_test_netns();
	if (rc)
		return rc;
	g_skel = fibril_lb__open();
	if (g_skel) {
		bpf_map__set_max_entries(g_skel->maps.lb_services, 64);
		bpf_map__set_max_entries(g_skel->maps.lb_backends, 64);
		bpf_map__set_max_entries(g_skel->maps.lb_ct, 1024);
		bpf_map__set_max_entries(g_skel->maps.lb_devices, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_affinity, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_aff_match, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_sk_revnat, 16);
		bpf_map__set_max_entries(g_skel->maps.lb_maglev, 1);
		bpf_map__set_max_entries(g_skel->maps.lb_src_range, 64);
		bpf_map__set_max_entries(g_skel->maps.lb_node_addrs, 64);
		g_skel->rodata->ct_source_max = QUOTA;
	}
	if (!g_skel || fibril_lb__load(g_skel) != 0) {
		printf("%s: cannot load the lb programs: %s\n", g_ci ? "FAIL" : "SKIP", strerror(errno));
		return g_ci ? 1 : 77;
	}
	void *m = mmap(NULL, LB_CT_SRC_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
		       bpf_map__fd(g_skel->maps.lb_ct_src), 0);
	if (m == MAP_FAILED) {
		printf("FAIL: cannot map lb_ct_src: %s\n", strerror(errno));
		return 1;
	}
	g_src = m;
	g_src[0] = 0x5eed5eed12345678ULL; /* the key the module draws at random */
	put_nodeport(NODE, 30080, 1, BACKEND);
	put_nodeport(NODE6, 30080, 2, BACKEND6);

	test_ipv4();
	test_ipv6();
	test_gc_gives_back();

	munmap(m, LB_CT_SRC_BYTES);
	fibril_lb__destroy(g_skel);
	printf("%d passed, %d failed\n", g_passed, g_failed);
	return g_failed ? 1 : 0;
}
