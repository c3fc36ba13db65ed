/* tests/bench/bench_lb_ct_quota.c - the per-packet cost of the per-client
 * quota on lb_ct (issue 22, [lb] ct-source-max): fibril_lb_from_netdev run
 * with BPF_PROG_RUN on the first packet of new NodePort flows (each one
 * makes its two lb_ct entries), by a program loaded with the check
 * (ct_source_max set, never reached) beside the same program without it
 * (ct_source_max 0: the check is skipped, the code before the quota but
 * one branch), in interleaved rounds; the kernel's own time per run
 * (bpf_test_run_opts.duration), median of the rounds. The flows come from
 * CLIENTS addresses (default: one each, so each charges a slot of its own,
 * mostly a cache miss; 1: one hot slot, the check's own cost). Usage:
 * bench_lb_ct_quota [FLOWS [ROUNDS [CLIENTS]]] (root). Prints one line:
 *   new flow: with the check N ns/packet, without M ns/packet (+D ns) ... */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>

#include "fibril_lb.h"
#include "fibril_lb.skel.h"

#define ROUNDS_MAX 64

static struct fibril_lb *load(uint32_t quota, uint32_t ct_max)
{
	struct fibril_lb *s = fibril_lb__open();
	if (!s)
		return NULL;
	bpf_map__set_max_entries(s->maps.lb_services, 64);
	bpf_map__set_max_entries(s->maps.lb_backends, 64);
	bpf_map__set_max_entries(s->maps.lb_ct, ct_max);
	bpf_map__set_max_entries(s->maps.lb_devices, 16);
	bpf_map__set_max_entries(s->maps.lb_affinity, 16);
	bpf_map__set_max_entries(s->maps.lb_aff_match, 16);
	bpf_map__set_max_entries(s->maps.lb_sk_revnat, 16);
	bpf_map__set_max_entries(s->maps.lb_maglev, 1);
	bpf_map__set_max_entries(s->maps.lb_src_range, 64);
	bpf_map__set_max_entries(s->maps.lb_node_addrs, 64);
	s->rodata->ct_source_max = quota;
	if (fibril_lb__load(s) != 0) {
		fibril_lb__destroy(s);
		return NULL;
	}
	/* a NodePort 192.0.2.1:30080 with one backend on this node */
	struct lb_backend b = {.port = htons(8080), .proto = IPPROTO_TCP};
	uint32_t bid = 1;
	b.addr[10] = b.addr[11] = 0xff;
	inet_pton(AF_INET, "10.98.0.10", b.addr + 12);
	bpf_map_update_elem(bpf_map__fd(s->maps.lb_backends), &bid, &b, BPF_ANY);
	struct lb_svc_key k = {.port = htons(30080), .proto = IPPROTO_TCP};
	struct lb_svc_val v = {.count = 1, .rev_nat_id = 1, .flags = LB_SVC_NODE_PORT};
	k.addr[10] = k.addr[11] = 0xff;
	inet_pton(AF_INET, "192.0.2.1", k.addr + 12);
	bpf_map_update_elem(bpf_map__fd(s->maps.lb_services), &k, &v, BPF_ANY);
	k.slot = 1;
	memset(&v, 0, sizeof(v));
	v.backend_id = 1;
	v.rev_nat_id = 1;
	bpf_map_update_elem(bpf_map__fd(s->maps.lb_services), &k, &v, BPF_ANY);
	struct lb_node_addr_key nk;
	uint8_t one = 1;
	memcpy(nk.addr, k.addr, 16);
	bpf_map_update_elem(bpf_map__fd(s->maps.lb_node_addrs), &nk, &one, BPF_ANY);
	uint32_t zero = 0;
	uint64_t secret = 0x5eed5eed12345678ULL;
	bpf_map_update_elem(bpf_map__fd(s->maps.lb_ct_src), &zero, &secret, BPF_ANY);
	return s;
}

/* lb_ct and lb_ct_src emptied for the next round */
static void reset(struct fibril_lb *s)
{
	int fd = bpf_map__fd(s->maps.lb_ct);
	struct lb_ct_key k;
	while (bpf_map_get_next_key(fd, NULL, &k) == 0)
		bpf_map_delete_elem(fd, &k);
	void *m = mmap(NULL, (size_t)LB_CT_SRC_SLOTS * 8, PROT_READ | PROT_WRITE, MAP_SHARED,
		       bpf_map__fd(s->maps.lb_ct_src), 0);
	if (m != MAP_FAILED) {
		memset((uint64_t *)m + 1, 0, ((size_t)LB_CT_SRC_SLOTS - 1) * 8);
		munmap(m, (size_t)LB_CT_SRC_SLOTS * 8);
	}
}

/* the first packets of n new flows (from `clients` addresses 10.x.y.z,
 * ports 1024 + flow / clients): the program's mean time per packet in ns,
 * -1 on an error */
static double round_ns(struct fibril_lb *s, int n, int clients)
{
	uint8_t b[54];
	uint64_t total = 0;
	int prog = bpf_program__fd(s->progs.fibril_lb_from_netdev);
	for (int i = 0; i < n; i++) {
		memset(b, 0, sizeof(b));
		b[12] = 0x08;
		uint8_t *ip = b + 14, *l4 = ip + 20;
		ip[0] = 0x45;
		ip[3] = 40;
		ip[8] = 64;
		ip[9] = IPPROTO_TCP;
		ip[12] = 10;
		int c = i % clients, port = 1024 + i / clients;
		ip[13] = (uint8_t)(c >> 16);
		ip[14] = (uint8_t)(c >> 8);
		ip[15] = (uint8_t)c;
		inet_pton(AF_INET, "192.0.2.1", ip + 16);
		l4[0] = (uint8_t)(port >> 8);
		l4[1] = (uint8_t)port;
		l4[2] = 30080 >> 8;
		l4[3] = 30080 & 0xff;
		l4[12] = 5 << 4;
		l4[13] = 0x02;
		struct __sk_buff ctx;
		memset(&ctx, 0, sizeof(ctx));
		ctx.ifindex = ctx.ingress_ifindex = 1;
		LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = b, .data_size_in = sizeof(b),
			    .data_out = b, .data_size_out = sizeof(b), .ctx_in = &ctx,
			    .ctx_size_in = sizeof(ctx));
		if (bpf_prog_test_run_opts(prog, &o) != 0 || o.retval != TC_ACT_OK)
			return -1;
		total += o.duration;
	}
	return (double)total / n;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000, rounds = argc > 2 ? atoi(argv[2]) : 7;
	int clients = argc > 3 ? atoi(argv[3]) : n;
	if (n < 1 || n > 1 << 20 || rounds < 1 || rounds > ROUNDS_MAX || clients < 1 ||
	    clients > n || n / clients > 60000) {
		fprintf(stderr, "usage: bench_lb_ct_quota [FLOWS (1-1048576) [ROUNDS (1-%d) "
				"[CLIENTS (FLOWS / 60000 - FLOWS)]]]\n",
			ROUNDS_MAX);
		return 2;
	}
	if (unshare(CLONE_NEWNET) != 0) {
		fprintf(stderr, "bench_lb_ct_quota: needs root (a network namespace, BPF): %s\n",
			strerror(errno));
		return 1;
	}
	uint32_t ct_max = (uint32_t)n * 2 + 16;
	struct fibril_lb *with = load((uint32_t)n + 1, ct_max), *without = load(0, ct_max);
	if (!with || !without) {
		fprintf(stderr, "bench_lb_ct_quota: cannot load the lb programs: %s\n", strerror(errno));
		return 1;
	}
	double w[ROUNDS_MAX], wo[ROUNDS_MAX];
	for (int r = 0; r < rounds; r++) {
		struct fibril_lb *order[2] = {r % 2 ? with : without, r % 2 ? without : with};
		for (int i = 0; i < 2; i++) {
			reset(order[i]);
			double ns = round_ns(order[i], n, clients);
			if (ns < 0) {
				fprintf(stderr, "bench_lb_ct_quota: a new flow was not translated\n");
				return 1;
			}
			*(order[i] == with ? &w[r] : &wo[r]) = ns;
		}
	}
	qsort(w, (size_t)rounds, sizeof(double), cmp);
	qsort(wo, (size_t)rounds, sizeof(double), cmp);
	double mw = w[rounds / 2], mwo = wo[rounds / 2];
	printf("new flow (first packet, 2 lb_ct entries): with the per-client check %.0f ns/packet, "
	       "without %.0f ns/packet (%+.0f ns, %+.1f%%; median of %d interleaved rounds of %d "
	       "flows from %d clients, BPF_PROG_RUN)\n",
	       mw, mwo, mw - mwo, mwo > 0 ? (mw - mwo) * 100 / mwo : 0, rounds, n, clients);
	fibril_lb__destroy(with);
	fibril_lb__destroy(without);
	return 0;
}
