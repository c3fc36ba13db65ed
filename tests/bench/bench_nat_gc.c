/* tests/bench/bench_nat_gc.c - masquerading's GC cost (run by
 * tests/bench/bench_nat_gc.sh from `make bench`, as root):
 *
 *   bench_nat_gc compare N [EXPIRED_PERCENT]
 *       a HASH of N entries laid out as dp_nat (N/2 masqueraded flows, an
 *       OUT and an IN entry each), EXPIRED_PERCENT (default 10) of the
 *       flows idle past their timeout; one pass with a per-entry walk
 *       (get_next_key + lookup per entry, the other half's lookup for an
 *       idle one, a delete per expired entry) and one with the batch pass
 *       the module makes on the worker pool (dp_natgc_batch,
 *       modules/datapath/dp_ctgc.c), each on a freshly filled map, both
 *       with the module's rule that a reply half (IN) goes only once its
 *       flow's half (OUT) is gone; prints time and bpf() calls of each
 *       first pass and their ratio; exits 1 when the two ways removed
 *       different counts after a second pass each (an IN half whose OUT
 *       the first pass took may wait for the next). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "dp_ctgc.h"

#define TIMEOUT_MS 60000

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* flow i: pod 10.x.y.z:40000 -> 1.1.1.1:53 as node 172.31.0.1:port */
static void pair_of(uint32_t i, uint32_t now, int idle, struct dp_nat_key *out,
		    struct dp_nat_entry *ov, struct dp_nat_key *in, struct dp_nat_entry *iv)
{
	memset(out, 0, sizeof(*out));
	memset(in, 0, sizeof(*in));
	memset(ov, 0, sizeof(*ov));
	memset(iv, 0, sizeof(*iv));
	out->family = in->family = DP_FAMILY_IPV4;
	out->proto = in->proto = IPPROTO_UDP;
	out->saddr[0] = 10;
	memcpy(out->saddr + 1, &i, 3);
	out->daddr[0] = out->daddr[1] = out->daddr[2] = out->daddr[3] = 1;
	out->sport = htons(40000);
	out->dport = htons(53);
	out->dir = DP_NAT_OUT;
	uint8_t node[4] = {172, 31, 0, (uint8_t)(1 + (i >> 16))};
	memcpy(ov->addr, node, 4);
	ov->port = htons((uint16_t)(i & 0xffff));
	memcpy(in->saddr, out->daddr, 4);
	memcpy(in->daddr, node, 4);
	in->sport = out->dport;
	in->dport = ov->port;
	in->dir = DP_NAT_IN;
	memcpy(iv->addr, out->saddr, 4);
	iv->port = out->sport;
	uint32_t seen = idle ? (now > 3600 ? now - 3600 : 0) : now;
	ov->created_s = iv->created_s = seen;
	ov->last_seen_s = iv->last_seen_s = seen;
}

static int fill(int fd, uint32_t n, unsigned pct)
{
	enum { CHUNK = 8192 };
	struct dp_nat_key *keys = calloc(CHUNK, sizeof(*keys));
	struct dp_nat_entry *vals = calloc(CHUNK, sizeof(*vals));
	uint32_t now = dp_ctgc_now_s(), every = pct ? 100 / pct : 0;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	for (uint32_t base = 0; base < n / 2; base += CHUNK / 2) {
		uint32_t cnt = 0;
		for (uint32_t i = base; i < n / 2 && cnt < CHUNK; i++, cnt += 2)
			pair_of(i, now, every && i % every == 0, &keys[cnt], &vals[cnt],
				&keys[cnt + 1], &vals[cnt + 1]);
		if (bpf_map_update_batch(fd, keys, vals, &cnt, &opts) != 0) {
			fprintf(stderr, "bench_nat_gc: update_batch: %s\n", strerror(errno));
			return -1;
		}
	}
	free(keys);
	free(vals);
	return 0;
}

static bool idle(const struct dp_ctgc_params *p, const struct dp_nat_entry *v)
{
	return p->now_s > v->last_seen_s &&
	       (uint64_t)(p->now_s - v->last_seen_s) * 1000 > p->other_ms + p->slack_s * 1000ull;
}

/* the per-entry walk: get_next_key, lookup, the other half when idle */
static void gc_per_entry(int fd, const struct dp_ctgc_params *p, struct dp_ctgc_stats *st)
{
	struct dp_nat_key cur, next, o;
	struct dp_nat_entry v, ov;
	size_t cap = 1024, n = 0;
	struct dp_nat_key *doomed = malloc(cap * sizeof(*doomed));
	bool first = true;
	while (bpf_map_get_next_key(fd, first ? NULL : &cur, &next) == 0) {
		first = false;
		st->syscalls += 2;
		cur = next;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0)
			continue;
		st->seen++;
		if (!idle(p, &v))
			continue;
		memset(&o, 0, sizeof(o));
		o.proto = cur.proto;
		o.family = cur.family;
		if (cur.dir == DP_NAT_OUT) {
			memcpy(o.saddr, cur.daddr, 16);
			memcpy(o.daddr, v.addr, 16);
			o.sport = cur.dport;
			o.dport = v.port;
			o.dir = DP_NAT_IN;
		} else {
			memcpy(o.saddr, v.addr, 16);
			memcpy(o.daddr, cur.saddr, 16);
			o.sport = v.port;
			o.dport = cur.sport;
			o.dir = DP_NAT_OUT;
		}
		st->syscalls++;
		int partner = bpf_map_lookup_elem(fd, &o, &ov) == 0;
		if (cur.dir == DP_NAT_IN ? partner && ov.port == cur.dport &&
						   !memcmp(ov.addr, cur.daddr, sizeof(ov.addr))
					 : partner && !idle(p, &ov))
			continue;
		if (n == cap)
			doomed = realloc(doomed, (cap *= 2) * sizeof(*doomed));
		doomed[n++] = cur;
	}
	st->syscalls++;
	for (size_t i = 0; i < n; i++) {
		st->syscalls++;
		if (bpf_map_delete_elem(fd, &doomed[i]) == 0)
			st->removed++;
	}
	free(doomed);
}

static int new_map(uint32_t n)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "bench_nat", sizeof(struct dp_nat_key),
				sizeof(struct dp_nat_entry), n, NULL);
	if (fd < 0)
		fprintf(stderr, "bench_nat_gc: cannot create a map of %u: %s\n", n, strerror(-fd));
	return fd;
}

static int compare(uint32_t n, unsigned pct)
{
	struct dp_ctgc_params p = {.tcp_ms = TIMEOUT_MS, .closing_ms = TIMEOUT_MS,
				   .other_ms = TIMEOUT_MS, .slack_s = 5};
	struct dp_ctgc_stats old = {0}, batch = {0};
	int fd = new_map(n);
	if (fd < 0 || fill(fd, n, pct) < 0)
		return 1;
	p.now_s = dp_ctgc_now_s();
	double t0 = now_ms();
	gc_per_entry(fd, &p, &old);
	double t_old = now_ms() - t0;
	struct dp_ctgc_stats again = {0};
	gc_per_entry(fd, &p, &again);
	size_t old_removed = old.removed + again.removed;
	close(fd);
	fd = new_map(n);
	if (fd < 0 || fill(fd, n, pct) < 0)
		return 1;
	p.now_s = dp_ctgc_now_s();
	t0 = now_ms();
	int rc = dp_natgc_batch(fd, &p, &batch);
	double t_batch = now_ms() - t0;
	memset(&again, 0, sizeof(again));
	if (rc >= 0)
		rc = dp_natgc_batch(fd, &p, &again);
	size_t batch_removed = batch.removed + again.removed;
	close(fd);
	if (rc < 0) {
		fprintf(stderr, "bench_nat_gc: batch pass: %s\n", strerror(-rc));
		return 1;
	}
	printf("dp_nat entries=%u expired=%u%% per-entry: ms=%.1f syscalls=%llu removed=%zu (%zu "
	       "after a second pass) | batch: ms=%.1f syscalls=%llu removed=%zu (%zu) | "
	       "time-ratio=%.1fx syscall-ratio=%.0fx\n",
	       n, pct, t_old, (unsigned long long)old.syscalls, old.removed, old_removed, t_batch,
	       (unsigned long long)batch.syscalls, batch.removed, batch_removed,
	       t_old / (t_batch > 0 ? t_batch : 1),
	       (double)old.syscalls / (double)(batch.syscalls ? batch.syscalls : 1));
	return old_removed == batch_removed ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "compare"))
		return compare((uint32_t)strtoul(argv[2], NULL, 10),
			       argc > 3 ? (unsigned)atoi(argv[3]) : 10);
	fprintf(stderr, "usage: bench_nat_gc compare N [EXPIRED%%]\n");
	return 2;
}
