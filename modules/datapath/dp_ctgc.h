/* modules/datapath/dp_ctgc.h - one conntrack GC pass over a dp_conntrack /
 * dp_ct_any map with BPF batch operations (bpf_map_lookup_batch, then
 * bpf_map_delete_batch of what expired: modules/common/bpf_gc.c), free of the agent's loop and
 * state so that it runs on the worker pool and in tests/bench/bench_ct_gc. */
#ifndef FIBRIL_DP_CTGC_H
#define FIBRIL_DP_CTGC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fibril_dp.h"


struct dp_ctgc_params {
	uint32_t now_s;        /* CLOCK_MONOTONIC seconds */
	uint64_t tcp_ms;       /* idle timeout of an open TCP flow */
	uint64_t closing_ms;   /* of a TCP flow that saw FIN or RST */
	uint64_t other_ms;     /* of every other flow */
	uint64_t syn_ms;       /* of a TCP flow no reply was seen for (0: tcp_ms) */
	uint32_t slack_s;      /* conntrack refresh interval: added to every timeout */
	/* dp_ct_count mapped (NULL: none): what a removed entry was charged
	 * with is given back, atomically (the program adds to it meanwhile) */
	struct dp_ct_count *counts;
	unsigned map_index;    /* 0: dp_conntrack, 1: dp_ct_any (the counts' index) */
	int nat_fd;            /* dp_natgc_batch: the map, for the other half */
	uint32_t *nat_counts;  /* dp_nat_count mapped (NULL: none): a removed OUT
				* entry's charge is given back */
	uint64_t lookups;      /* dp_natgc_batch: bpf() calls of the other halves */
	size_t removed_now;    /* dp_natgc_batch: reply halves deleted at once */
};

struct dp_ctgc_stats {
	size_t seen;      /* entries looked at */
	size_t removed;   /* entries deleted */
	uint64_t syscalls; /* bpf() calls made */
};

/* Whether the entry is idle longer than its timeout (+ the slack). */
bool dp_ctgc_expired(const struct dp_ctgc_params *p, const struct dp_ct_key *k,
		     const struct dp_ct_value *v);

/* Give back the count an entry was charged with (DP_CT_F_CHARGED), never
 * below 0; counts NULL: nothing. */
void dp_ctgc_uncharge(struct dp_ct_count *counts, unsigned map_index, const struct dp_ct_value *v);

/* Whether the entry was made for, or charged to, an endpoint removed
 * since (its slot's gen moved on): the pass deletes it without giving a
 * charge back (dp_ctgc_release_slot already did). counts NULL: never. */
bool dp_ctgc_stale(const struct dp_ct_count *counts, const struct dp_ct_key *k,
		   const struct dp_ct_value *v);

/* Endpoint ep was removed: bump its slot's gen and zero its counts (its
 * outside ones taken off slot 0's total too), atomically against the
 * program, so the endpoint given this slot next starts uncharged. */
void dp_ctgc_release_slot(struct dp_ct_count *counts, uint16_t ep);

/* One pass over the map fd; adds to *st. 0, or a negative errno (what was
 * removed before the error stays removed). Each entry the pass removes has
 * its charge given back as it is chosen; the program never removes one, so
 * the counts stay exact unless a delete fails for another reason than the
 * entry being gone (then the pass stops and the next one finds it again:
 * its count is given back twice, floored at 0). */
int dp_ctgc_batch(int fd, const struct dp_ctgc_params *p, struct dp_ctgc_stats *st);

/* One pass over dp_nat (fd): a mapping goes when both its halves (the
 * OUT and the IN entry, looked up with one bpf_map_lookup_elem when this
 * one is idle) are idle past the timeout of its protocol (TCP closing,
 * TCP, the rest) + the slack; a half whose other half is gone goes too.
 * p->nat_fd must be fd. Adds to *st. */
int dp_natgc_batch(int fd, const struct dp_ctgc_params *p, struct dp_ctgc_stats *st);

/* CLOCK_MONOTONIC in whole seconds, as the program's bpf_ktime_get_ns()/1e9. */
uint32_t dp_ctgc_now_s(void);

#endif
