/* modules/datapath/dp_ctgc.c - one conntrack GC pass with BPF batch
 * operations (modules/common/bpf_gc.c: the map is read MODCOMMON_GC_CHUNK
 * entries per bpf_map_lookup_batch call and the expired keys of each chunk
 * are deleted with one bpf_map_delete_batch call, so a pass over N flows
 * costs about 2 * N / MODCOMMON_GC_CHUNK system calls; the per-entry walk
 * it replaces made 2 * N: get_next_key and lookup for each). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "bpf_gc.h"
#include "dp_ctgc.h"

bool dp_ctgc_expired(const struct dp_ctgc_params *p, const struct dp_ct_key *k,
		     const struct dp_ct_value *v)
{
	uint64_t ms;
	if (k->proto == IPPROTO_TCP && (v->flags & DP_CT_F_CLOSING))
		ms = p->closing_ms;
	else if (k->proto == IPPROTO_TCP && !(v->flags & DP_CT_F_REPLY_SEEN) && p->syn_ms &&
		 p->syn_ms < p->tcp_ms)
		ms = p->syn_ms; /* nobody answered: a SYN flood's half-open flows go soon */
	else if (k->proto == IPPROTO_TCP)
		ms = p->tcp_ms;
	else
		ms = p->other_ms;
	if (p->now_s <= v->last_seen_s)
		return false;
	uint64_t idle_ms = (uint64_t)(p->now_s - v->last_seen_s) * 1000;
	return idle_ms > ms + (uint64_t)p->slack_s * 1000;
}

uint32_t dp_ctgc_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)ts.tv_sec;
}

/* one count down, never below 0 */
static void count_down(uint32_t *n)
{
	uint32_t cur = __atomic_load_n(n, __ATOMIC_RELAXED);
	while (cur && !__atomic_compare_exchange_n(n, &cur, cur - 1, false, __ATOMIC_RELAXED,
						   __ATOMIC_RELAXED))
		;
}

void dp_ctgc_uncharge(struct dp_ct_count *counts, unsigned map_index, const struct dp_ct_value *v)
{
	if (!counts || !(v->flags & DP_CT_F_CHARGED) || map_index > 1)
		return;
	struct dp_ct_count *c = &counts[v->charge_ep_id];
	if (v->flags & DP_CT_F_OUTSIDE) {
		count_down(&c->outside[map_index]);
		count_down(&counts[0].outside[map_index]);
	} else {
		count_down(&c->own[map_index]);
	}
}

bool dp_ctgc_stale(const struct dp_ct_count *counts, const struct dp_ct_key *k,
		   const struct dp_ct_value *v)
{
	if (!counts)
		return false;
	if ((v->flags & DP_CT_F_CHARGED) &&
	    (uint16_t)__atomic_load_n(&counts[v->charge_ep_id].gen, __ATOMIC_RELAXED) != v->charge_gen)
		return true;
	return (uint16_t)__atomic_load_n(&counts[k->ep_id].gen, __ATOMIC_RELAXED) != v->ep_gen;
}

/* n = 0, returning what it was */
static uint32_t take(uint32_t *n)
{
	return __atomic_exchange_n(n, 0, __ATOMIC_RELAXED);
}

/* n -= by, never below 0 */
static void count_sub(uint32_t *n, uint32_t by)
{
	uint32_t cur = __atomic_load_n(n, __ATOMIC_RELAXED);
	while (cur && !__atomic_compare_exchange_n(n, &cur, cur > by ? cur - by : 0, false,
						   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

void dp_ctgc_release_slot(struct dp_ct_count *counts, uint16_t ep)
{
	if (!counts || !ep)
		return;
	struct dp_ct_count *c = &counts[ep];
	/* the gen first: an entry the program makes from now on carries the
	 * new one and is counted in the zeroed slot */
	__atomic_add_fetch(&c->gen, 1, __ATOMIC_RELAXED);
	take(&c->own[0]);
	take(&c->own[1]);
	count_sub(&counts[0].outside[0], take(&c->outside[0]));
	count_sub(&counts[0].outside[1], take(&c->outside[1]));
}

static enum modcommon_gc_verdict ct_verdict(const void *key, void *value, void *ud)
{
	const struct dp_ctgc_params *p = ud;
	if (dp_ctgc_stale(p->counts, key, value))
		return MODCOMMON_GC_DELETE; /* its endpoint is gone: charged to nobody */
	if (!dp_ctgc_expired(p, key, value))
		return MODCOMMON_GC_KEEP;
	dp_ctgc_uncharge(p->counts, p->map_index, value);
	return MODCOMMON_GC_DELETE;
}

/* ---- dp_nat ---- */

static bool nat_idle(const struct dp_ctgc_params *p, const struct dp_nat_key *k,
		     const struct dp_nat_entry *v)
{
	uint64_t ms = k->proto == IPPROTO_TCP ? ((v->flags & DP_NAT_F_CLOSING) ? p->closing_ms
									  : p->tcp_ms)
					      : p->other_ms;
	if (p->now_s <= v->last_seen_s)
		return false;
	return (uint64_t)(p->now_s - v->last_seen_s) * 1000 > ms + (uint64_t)p->slack_s * 1000;
}

/* the key of the other half of the mapping (k, v) */
static void nat_partner(const struct dp_nat_key *k, const struct dp_nat_entry *v,
			struct dp_nat_key *o)
{
	memset(o, 0, sizeof(*o));
	o->proto = k->proto;
	o->family = k->family;
	if (k->dir == DP_NAT_OUT) { /* pod -> world  =>  world -> node:port */
		memcpy(o->saddr, k->daddr, 16);
		memcpy(o->daddr, v->addr, 16);
		o->sport = k->dport;
		o->dport = v->port;
		o->dir = DP_NAT_IN;
	} else { /* world -> node:port  =>  pod -> world */
		memcpy(o->saddr, v->addr, 16);
		memcpy(o->daddr, k->saddr, 16);
		o->sport = v->port;
		o->dport = k->sport;
		o->dir = DP_NAT_OUT;
	}
}

/* Whether OUT entry ov (key o) is the flow half of IN entry k: it maps
 * to k's node address and port. */
static bool nat_out_is_partner(const struct dp_nat_key *k, const struct dp_nat_entry *ov)
{
	return ov->port == k->dport && !memcmp(ov->addr, k->daddr, sizeof(ov->addr));
}

/* A reply half (IN) goes only after its flow's half (OUT), and is deleted
 * at once, from a fresh read: the batch pass judges from a snapshot and
 * deletes at the chunk's end, milliseconds later, and a flow that came
 * back meanwhile on the same port (its pod port round again: the
 * datapath takes the mapping back, touching both halves) lost the half
 * the world's answer needs: that answer went to the node's stack, which
 * reset the connection. A flow's OUT half taken that way costs nothing:
 * its next packet finds the IN half and takes it back. */
static enum modcommon_gc_verdict nat_in_verdict(struct dp_ctgc_params *p,
						const struct dp_nat_key *k, const struct dp_nat_key *o)
{
	struct dp_nat_entry ov, cur;
	p->lookups++;
	if (bpf_map_lookup_elem(p->nat_fd, o, &ov) == 0 && nat_out_is_partner(k, &ov))
		return MODCOMMON_GC_KEEP; /* its flow's half first */
	p->lookups++;
	if (bpf_map_lookup_elem(p->nat_fd, k, &cur) != 0 || !nat_idle(p, k, &cur))
		return MODCOMMON_GC_KEEP; /* gone, or taken back meanwhile */
	p->lookups++;
	if (bpf_map_delete_elem(p->nat_fd, k) == 0)
		p->removed_now++;
	return MODCOMMON_GC_KEEP; /* deleted already */
}

static enum modcommon_gc_verdict nat_verdict(const void *key, void *value, void *ud)
{
	struct dp_ctgc_params *p = ud;
	if (!nat_idle(p, key, value))
		return MODCOMMON_GC_KEEP;
	const struct dp_nat_key *k = key;
	const struct dp_nat_entry *v = value;
	struct dp_nat_key o;
	struct dp_nat_entry ov;
	nat_partner(key, value, &o);
	if (k->dir == DP_NAT_IN)
		return nat_in_verdict(p, k, &o);
	p->lookups++;
	if (bpf_map_lookup_elem(p->nat_fd, &o, &ov) == 0 && !nat_idle(p, &o, &ov))
		return MODCOMMON_GC_KEEP; /* the other way is busy (the reply path) */
	if (k->dir == DP_NAT_OUT && p->nat_counts)
		count_down(&p->nat_counts[v->ep_id]);
	return MODCOMMON_GC_DELETE;
}

int dp_natgc_batch(int fd, const struct dp_ctgc_params *p, struct dp_ctgc_stats *st)
{
	struct modcommon_gc_stats gs = {0};
	struct dp_ctgc_params q = *p;
	q.nat_fd = fd;
	q.lookups = 0;
	q.removed_now = 0;
	int rc = modcommon_gc_batch(fd, sizeof(struct dp_nat_key), sizeof(struct dp_nat_entry),
				    nat_verdict, &q, &gs);
	st->seen += gs.seen;
	st->removed += gs.removed + q.removed_now;
	st->syscalls += gs.syscalls + q.lookups;
	return rc;
}

int dp_ctgc_batch(int fd, const struct dp_ctgc_params *p, struct dp_ctgc_stats *st)
{
	struct modcommon_gc_stats gs = {0};
	int rc = modcommon_gc_batch(fd, sizeof(struct dp_ct_key), sizeof(struct dp_ct_value),
				    ct_verdict, (void *)p, &gs);
	st->seen += gs.seen;
	st->removed += gs.removed;
	st->syscalls += gs.syscalls;
	return rc;
}
