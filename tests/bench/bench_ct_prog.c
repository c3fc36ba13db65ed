/* tests/bench/bench_ct_prog.c - issue 22's conntrack figures, for two
 * builds of the datapath's BPF object side by side in one run (the one of
 * main's tree, the reference, and this tree's), each loaded with libbpf
 * from its file (no skeleton, so any build of bpf/fibril_dp.bpf.c loads)
 * with maps of its own, in a network namespace of its own where lo
 * (ifindex 1) is every endpoint's "veth":
 *   cost  - ns per packet (BPF_PROG_RUN, best of 5 x REPEAT) of the paths
 *           the per-point conntrack and the quota touch: established flows
 *           to the world and pod to pod, with and without policy, their
 *           replies, and a new flow (the charge);
 *   flood - pod a holds FLOWS TCP flows to pod b with a deny-all ingress
 *           (their replies pass by conntrack only); pod f then opens
 *           3 x the TCP table's size (TABLE) in new flows as fast as
 *           BPF_PROG_RUN takes them, each sent twice (the kernel's LRU
 *           keeps an entry looked up after its insertion on its active
 *           list: a flood of single packets would evict only itself),
 *           and then the outside (to-endpoint) as many to pod b from new
 *           sources: how many of a's flows still get their replies
 *           through, and the flood's rate in new flows per second.
 * Usage: bench_ct_prog BASE.o NEW.o [REPEAT] (root). Run by
 * tests/bench/bench_ct.sh, which builds BASE.o from main's tree. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>

#include "fibril_dp.h"

#define TABLE 4096
#define FLOWS 64
#define POD_A "10.9.0.10" /* endpoint 10, identity 256 */
#define POD_B "10.9.0.20" /* endpoint 20, identity 300 */
#define POD_F "10.9.0.30" /* endpoint 30, identity 400: the flooder */
#define WORLD "192.0.2.7"

struct obj {
	const char *path;
	struct bpf_object *o;
	int from, to; /* program fds */
};

static int map_fd(struct obj *b, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(b->o, name);
	return m ? bpf_map__fd(m) : -1;
}

static int load(struct obj *b, const char *path)
{
	memset(b, 0, sizeof(*b));
	b->path = path;
	b->o = bpf_object__open_file(path, NULL);
	if (!b->o)
		return -errno;
	struct bpf_map *ct = bpf_object__find_map_by_name(b->o, "dp_conntrack");
	if (ct)
		bpf_map__set_max_entries(ct, TABLE);
	struct bpf_program *p;
	bpf_object__for_each_program(p, b->o)
		bpf_program__set_autoload(p, !strcmp(bpf_program__name(p), "fibril_from_endpoint") ||
						     !strcmp(bpf_program__name(p), "fibril_to_endpoint"));
	int rc = bpf_object__load(b->o);
	if (rc < 0)
		return rc;
	b->from = bpf_program__fd(bpf_object__find_program_by_name(b->o, "fibril_from_endpoint"));
	b->to = bpf_program__fd(bpf_object__find_program_by_name(b->o, "fibril_to_endpoint"));
	return 0;
}

static void put_endpoint(struct obj *b, const char *addr, uint16_t id, uint32_t identity)
{
	struct dp_endpoint_key k;
	struct dp_endpoint_info v;
	memset(&k, 0, sizeof(k));
	memset(&v, 0, sizeof(v));
	k.family = DP_FAMILY_IPV4;
	inet_pton(AF_INET, addr, k.addr);
	v.ifindex = 1;
	v.identity = identity;
	v.ep_id = id;
	bpf_map_update_elem(map_fd(b, "dp_endpoints"), &k, &v, BPF_ANY);
}

/* dp_config as long as the object's (the reference's is shorter: no quotas) */
static void put_config(struct obj *b)
{
	struct bpf_map *m = bpf_object__find_map_by_name(b->o, "dp_config");
	struct dp_config c = {.ct_refresh_s = 1,
			      .ct_ep_max = {TABLE / 4, TABLE / 4},
			      .ct_outside_max = {TABLE / 2, TABLE / 2}};
	uint8_t buf[256];
	uint32_t zero = 0, sz = bpf_map__value_size(m);
	memset(buf, 0, sizeof(buf));
	memcpy(buf, &c, sz < sizeof(c) ? sz : sizeof(c));
	bpf_map_update_elem(bpf_map__fd(m), &zero, buf, BPF_ANY);
}

static void enforce(struct obj *b, uint16_t ep, bool ingress)
{
	uint32_t idx = ep;
	struct dp_policy_ep v = {.flags = ingress ? DP_POLICY_EP_F_INGRESS : 0};
	bpf_map_update_elem(map_fd(b, "dp_policy_ep"), &idx, &v, BPF_ANY);
}

static void allow(struct obj *b, uint16_t ep, uint32_t identity, uint16_t port)
{
	struct dp_policy_key k = {.prefixlen = DP_POLICY_PREFIX_FULL, .ep_id = ep,
				  .direction = DP_POLICY_INGRESS, .identity = identity,
				  .proto = 6, .dport = htons(port)};
	struct dp_policy_value v = {0};
	bpf_map_update_elem(map_fd(b, "dp_policy"), &k, &v, BPF_ANY);
}

struct frame {
	uint8_t b[128];
	uint32_t len;
};

/* Ethernet + IPv4 + TCP; ttl 1 sends a local destination to the stack
 * (BPF_PROG_RUN cannot redirect into a peer) after the verdict */
static void tcp_frame(struct frame *f, const char *src, const char *dst, uint16_t sport,
		      uint16_t dport, uint8_t flags, uint8_t ttl)
{
	static const uint8_t mac[6] = {0x02, 0, 0, 0, 0, 0x10};
	uint8_t *p = f->b;
	memset(f->b, 0, sizeof(f->b));
	memcpy(p, mac, 6);
	memcpy(p + 6, mac, 6);
	p[12] = 0x08;
	p += 14;
	p[0] = 0x45;
	p[3] = 40;
	p[8] = ttl;
	p[9] = 6;
	inet_pton(AF_INET, src, p + 12);
	inet_pton(AF_INET, dst, p + 16);
	p += 20;
	uint16_t s = htons(sport), d = htons(dport);
	memcpy(p, &s, 2);
	memcpy(p + 2, &d, 2);
	p[12] = 5 << 4;
	p[13] = flags;
	p[14] = 0x10;
	f->len = 14 + 20 + 20;
}

/* The verdict, and the run's ns per packet in *ns when asked */
static int run(int prog, struct frame *f, uint32_t repeat, double *ns)
{
	struct frame out;
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = f->b, .data_size_in = f->len,
		    .data_out = out.b, .data_size_out = sizeof(out.b), .repeat = repeat);
	if (bpf_prog_test_run_opts(prog, &o) != 0)
		return -1;
	if (ns)
		*ns = o.duration;
	return (int)o.retval;
}

static double best_of_5(int prog, struct frame *f, uint32_t repeat)
{
	double best = 1e12, ns;
	for (int i = 0; i < 5; i++)
		if (run(prog, f, repeat, &ns) >= 0 && ns < best)
			best = ns;
	return best;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- cost ---------------------------------------------------------------------------- */

#define CASES 7
static const char *case_names[CASES] = {
	"from-endpoint, established, pod a -> world",
	"from-endpoint, established, pod a -> pod b (no policy)",
	"from-endpoint, established, a -> b, b's ingress enforced",
	"from-endpoint, b's reply to a, a's deny-all ingress",
	"to-endpoint, the world's reply to a, a's deny-all ingress",
	"from-endpoint, a new flow a -> world (the charge)",
	"from-endpoint, a new flow a -> b, b's ingress enforced",
};

static void cost(struct obj *b, uint32_t repeat, double *ns)
{
	struct frame f;
	put_config(b);
	put_endpoint(b, POD_A, 10, 256);
	put_endpoint(b, POD_B, 20, 300);
	/* 0: a -> world */
	tcp_frame(&f, POD_A, WORLD, 40000, 80, 0x02, 64);
	run(b->from, &f, 1, NULL);
	tcp_frame(&f, POD_A, WORLD, 40000, 80, 0x10, 64);
	ns[0] = best_of_5(b->from, &f, repeat);
	/* 1: a -> b */
	tcp_frame(&f, POD_A, POD_B, 40001, 80, 0x02, 1);
	run(b->from, &f, 1, NULL);
	tcp_frame(&f, POD_A, POD_B, 40001, 80, 0x10, 1);
	ns[1] = best_of_5(b->from, &f, repeat);
	/* 2: b's ingress allows a on 80 */
	enforce(b, 20, true);
	allow(b, 20, 256, 80);
	tcp_frame(&f, POD_A, POD_B, 40002, 80, 0x02, 1);
	run(b->from, &f, 1, NULL);
	tcp_frame(&f, POD_A, POD_B, 40002, 80, 0x10, 1);
	ns[2] = best_of_5(b->from, &f, repeat);
	/* 3: a deny-all ingress; b's reply to a's flow */
	enforce(b, 20, false);
	enforce(b, 10, true);
	tcp_frame(&f, POD_A, POD_B, 40003, 80, 0x02, 1);
	run(b->from, &f, 1, NULL);
	tcp_frame(&f, POD_B, POD_A, 80, 40003, 0x10, 1);
	ns[3] = best_of_5(b->from, &f, repeat);
	/* 4: the world's reply through to-endpoint */
	tcp_frame(&f, POD_A, WORLD, 40004, 80, 0x02, 64);
	run(b->from, &f, 1, NULL);
	tcp_frame(&f, WORLD, POD_A, 80, 40004, 0x10, 64);
	ns[4] = best_of_5(b->to, &f, repeat);
	enforce(b, 10, false);
	/* 5, 6: a new flow each run (one run per port) */
	double sum = 0;
	int n = 0;
	for (uint16_t p = 0; p < 500; p++, n++) {
		double one;
		tcp_frame(&f, POD_A, WORLD, (uint16_t)(20000 + p), 443, 0x02, 64);
		run(b->from, &f, 1, &one);
		sum += one;
	}
	ns[5] = sum / n;
	enforce(b, 20, true);
	sum = 0;
	n = 0;
	for (uint16_t p = 0; p < 500; p++, n++) {
		double one;
		tcp_frame(&f, POD_A, POD_B, (uint16_t)(20000 + p), 80, 0x02, 1);
		run(b->from, &f, 1, &one);
		sum += one;
	}
	ns[6] = sum / n;
	enforce(b, 20, false);
}

/* ---- flood ----------------------------------------------------------------------------- */

struct flood_result {
	int before, after_pod, after_outside; /* a's flows whose replies pass */
	double pod_rate, outside_rate;        /* new flows per second */
};

static int replies_pass(struct obj *b)
{
	struct frame f;
	int ok = 0;
	for (uint16_t i = 0; i < FLOWS; i++) {
		tcp_frame(&f, POD_B, POD_A, 7000, (uint16_t)(30000 + i), 0x10, 1);
		ok += run(b->from, &f, 1, NULL) == TC_ACT_OK;
	}
	return ok;
}

static void flood(struct obj *b, struct flood_result *r)
{
	struct frame f;
	put_config(b);
	put_endpoint(b, POD_A, 10, 256);
	put_endpoint(b, POD_B, 20, 300);
	put_endpoint(b, POD_F, 30, 400);
	enforce(b, 10, true); /* a: deny-all ingress */
	for (uint16_t i = 0; i < FLOWS; i++) {
		tcp_frame(&f, POD_A, POD_B, (uint16_t)(30000 + i), 7000, 0x02, 1);
		run(b->from, &f, 1, NULL);
	}
	r->before = replies_pass(b);
	char dst[32];
	double t0 = now_s();
	for (uint32_t i = 0; i < 3 * TABLE; i++) {
		snprintf(dst, sizeof(dst), "198.51.%u.%u", (i >> 8) & 0xff, i & 0xff);
		tcp_frame(&f, POD_F, dst, (uint16_t)(1024 + (i & 0x3fff)), 9, 0x02, 64);
		run(b->from, &f, 1, NULL);
		run(b->from, &f, 1, NULL); /* a second look: the LRU keeps it as "used" */
	}
	r->pod_rate = 3 * TABLE / (now_s() - t0);
	r->after_pod = replies_pass(b);
	char src[32];
	t0 = now_s();
	for (uint32_t i = 0; i < 3 * TABLE; i++) {
		snprintf(src, sizeof(src), "198.18.%u.%u", (i >> 8) & 0xff, i & 0xff);
		tcp_frame(&f, src, POD_B, 1024, 9, 0x02, 64);
		run(b->to, &f, 1, NULL);
		run(b->to, &f, 1, NULL);
	}
	r->outside_rate = 3 * TABLE / (now_s() - t0);
	r->after_outside = replies_pass(b);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s BASE.o NEW.o [REPEAT]\n", argv[0]);
		return 2;
	}
	uint32_t repeat = argc > 3 ? (uint32_t)atoi(argv[3]) : 100000;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0) {
		fprintf(stderr, "bench_ct_prog: needs root (a network namespace and BPF)\n");
		return 1;
	}
	libbpf_set_print(NULL);
	double ns[2][CASES];
	struct flood_result fr[2];
	for (int i = 0; i < 2; i++) {
		struct obj b;
		int rc = load(&b, argv[1 + i]);
		if (rc < 0) {
			fprintf(stderr, "bench_ct_prog: cannot load %s: %s\n", argv[1 + i], strerror(-rc));
			return 1;
		}
		cost(&b, repeat, ns[i]);
		bpf_object__close(b.o);
		/* a fresh load: the flood starts from empty tables */
		if ((rc = load(&b, argv[1 + i])) < 0)
			return 1;
		flood(&b, &fr[i]);
		bpf_object__close(b.o);
	}
	printf("bench_ct_prog: BPF_PROG_RUN, ns per packet (best of 5 x %u; new flows: mean of "
	       "500)\n",
	       repeat);
	printf("%-58s %10s %10s %8s\n", "path", "reference", "this tree", "delta");
	for (int c = 0; c < CASES; c++)
		printf("%-58s %10.1f %10.1f %+8.1f\n", case_names[c], ns[0][c], ns[1][c],
		       ns[1][c] - ns[0][c]);
	printf("flood (TCP table %d, pod a's %d flows to b, a deny-all ingress; goal: all survive)\n",
	       TABLE, FLOWS);
	printf("%-58s %10s %10s\n", "", "reference", "this tree");
	printf("%-58s %7d/%d %7d/%d\n", "a's flows whose replies pass, before", fr[0].before, FLOWS,
	       fr[1].before, FLOWS);
	printf("%-58s %7d/%d %7d/%d\n", "  after pod f's 3 x table new flows", fr[0].after_pod, FLOWS,
	       fr[1].after_pod, FLOWS);
	printf("%-58s %7d/%d %7d/%d\n", "  after the outside's 3 x table to pod b",
	       fr[0].after_outside, FLOWS, fr[1].after_outside, FLOWS);
	printf("%-58s %10.0f %10.0f\n", "pod f's flood, new flows/s (BPF_PROG_RUN, one a call)",
	       fr[0].pod_rate, fr[1].pod_rate);
	printf("%-58s %10.0f %10.0f\n", "the outside's flood, new flows/s", fr[0].outside_rate,
	       fr[1].outside_rate);
	return 0;
}
