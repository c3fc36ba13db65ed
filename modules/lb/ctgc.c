/* modules/lb/ctgc.c - the lb_ct GC's verdict and pass: lb_ct (the tc
 * programs' NAT flows, layout in bpf/fibril_lb.h) is walked with the batch
 * walker of modules/common/bpf_gc.c; an entry idle longer than its TCP
 * state's timeout (Cilium's defaults: 6 h open, 60 s handshake, 10 s after
 * FIN/RST, 60 s for UDP) is removed. The entries of one flow are stamped
 * together by the programs, so they go in the same pass. The purge removes
 * the UDP flows of backends that left their service. Removing a flow's
 * charged entry (LB_CT_F_CHARGED, one per flow) gives its client's count
 * in lb_ct_src back, once, whichever pass takes the flow's other entries. */
#include <string.h>
#include <time.h>

#include <netinet/in.h>

#include "bpf_gc.h"
#include "lb_tc.h"

uint32_t lb_ctgc_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)ts.tv_sec;
}

uint32_t lb_ctgc_idle(const struct lb_ctgc_params *p, uint32_t seen)
{
	uint32_t idle = (p->now_s - (seen & LB_CT_SEEN_MASK)) & LB_CT_SEEN_MASK;
	/* stamped after the pass read the clock: "negative", modulo 2^30 */
	return idle > LB_CT_SEEN_MASK / 2 ? 0 : idle;
}

void lb_ctgc_uncharge(uint64_t *src, const struct lb_ct_key *k, const struct lb_ct_val *v)
{
	if (!src || !(v->seen & LB_CT_F_CHARGED) || k->dir != LB_CT_INGRESS)
		return;
	uint64_t *n = &src[lb_ct_src_slot(k->saddr, __atomic_load_n(&src[0], __ATOMIC_RELAXED))];
	uint64_t cur = __atomic_load_n(n, __ATOMIC_RELAXED);
	while (cur && !__atomic_compare_exchange_n(n, &cur, cur - 1, false, __ATOMIC_RELAXED,
						   __ATOMIC_RELAXED))
		;
}

uint32_t lb_ctgc_timeout(const struct lb_ctgc_params *p, const struct lb_ct_key *k,
			 const struct lb_ct_val *v)
{
	if (k->proto != IPPROTO_TCP)
		return p->other_s;
	if (v->seen & LB_CT_F_CLOSING)
		return p->closing_s;
	return (v->seen & LB_CT_F_SYN) ? p->syn_s : p->tcp_s;
}

static enum modcommon_gc_verdict verdict(const void *key, void *value, void *ud)
{
	const struct lb_ctgc_params *p = ud;
	struct lb_ct_val *v = value;
	if (!v->seen) { /* an older program's entry: its age starts now */
		uint32_t t = p->now_s & LB_CT_SEEN_MASK;
		v->seen = t ? t : 1;
		return MODCOMMON_GC_UPDATE;
	}
	if (lb_ctgc_idle(p, v->seen) <= lb_ctgc_timeout(p, key, v))
		return MODCOMMON_GC_KEEP;
	lb_ctgc_uncharge(p->src, key, v);
	return MODCOMMON_GC_DELETE;
}

int lb_ctgc_pass(int fd, const struct lb_ctgc_params *p, size_t *seen, size_t *removed,
		 size_t *stamped, uint64_t *syscalls)
{
	struct modcommon_gc_stats st = {0};
	int rc = modcommon_gc_batch(fd, sizeof(struct lb_ct_key), sizeof(struct lb_ct_val), verdict,
				    (void *)p, &st);
	*seen += st.seen;
	*removed += st.removed;
	*stamped += st.updated;
	*syscalls += st.syscalls;
	return rc;
}

struct purge_ud {
	const struct lb_ct_purge *gone;
	size_t n;
	uint64_t *src;
};

static bool names(const uint8_t a[16], uint16_t port, const struct lb_ct_purge *g)
{
	return port == g->port && !memcmp(a, g->addr, 16);
}

static enum modcommon_gc_verdict purge_verdict(const void *key, void *value, void *ud)
{
	const struct purge_ud *p = ud;
	const struct lb_ct_key *k = key;
	const struct lb_ct_val *v = value;
	if (k->proto != IPPROTO_UDP)
		return MODCOMMON_GC_KEEP;
	for (size_t i = 0; i < p->n; i++) {
		const struct lb_ct_purge *g = &p->gone[i];
		if (v->rev_nat_id == g->svc_id &&
		    (names(v->addr, v->port, g) || names(k->saddr, k->sport, g) ||
		     names(k->daddr, k->dport, g))) {
			lb_ctgc_uncharge(p->src, k, v);
			return MODCOMMON_GC_DELETE;
		}
	}
	return MODCOMMON_GC_KEEP;
}

int lb_ctgc_purge(int fd, const struct lb_ct_purge *gone, size_t n, uint64_t *src,
		  size_t *seen, size_t *removed, uint64_t *syscalls)
{
	struct purge_ud ud = {gone, n, src};
	struct modcommon_gc_stats st = {0};
	int rc = modcommon_gc_batch(fd, sizeof(struct lb_ct_key), sizeof(struct lb_ct_val),
				    purge_verdict, &ud, &st);
	*seen += st.seen;
	*removed += st.removed;
	*syscalls += st.syscalls;
	return rc;
}
