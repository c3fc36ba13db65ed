/* modules/datapath/dp_gc.c - the two loop-driven jobs of the datapath:
 * the conntrack garbage collector (a timer every [datapath]
 * conntrack-gc-interval removes flows idle longer than their timeout:
 * TCP, TCP after FIN/RST, everything else) and the events reader (the
 * dp_events ring buffer's epoll fd watched on the loop; each record is
 * counted and kept in a small ring for GET /v1/datapath/events). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>

#include "datapath.h"

#define GC_BATCH 1024 /* keys collected before deleting them */

/* ---- conntrack GC ---------------------------------------------------------------------- */

static uint64_t timeout_ns(const struct datapath *dp, const struct dp_ct_key *k,
			   const struct dp_ct_value *v)
{
	uint64_t ms;
	if (k->proto == IPPROTO_TCP)
		ms = (v->flags & DP_CT_F_CLOSING) ? dp->ct_closing_ms : dp->ct_tcp_ms;
	else
		ms = dp->ct_other_ms;
	return ms * 1000000ull;
}

size_t dp_gc_run(struct datapath *dp)
{
	int fd = fibril_map_fd(dp->maps[DPM_CONNTRACK]);
	struct dp_ct_key cur, next;
	struct dp_ct_value v;
	struct dp_ct_key *doomed = calloc(GC_BATCH, sizeof(*doomed));
	size_t ndoomed = 0, removed = 0, seen = 0, steps = 0;
	uint64_t now = dp_mono_ns();

	if (!doomed)
		return 0;
	/* family 0 is never a key: asks for the first one without NULL */
	memset(&cur, 0, sizeof(cur));
	while (steps++ < DP_CONNTRACK_MAX && dp_next_key(fd, &cur, &next) == 0) {
		cur = next;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0)
			continue;
		seen++;
		if (now > v.last_seen_ns && now - v.last_seen_ns > timeout_ns(dp, &cur, &v)) {
			doomed[ndoomed++] = cur;
			if (ndoomed == GC_BATCH)
				break; /* the rest next time */
		}
	}
	for (size_t i = 0; i < ndoomed; i++)
		if (bpf_map_delete_elem(fd, &doomed[i]) == 0)
			removed++;
	free(doomed);
	dp->gc_runs++;
	dp->gc_removed += removed;
	dp->gc_last_ms = fibril_now_ms();
	dp->gc_last_entries = seen - removed;
	if (removed)
		fibril_debug(dp->m, "conntrack GC: %zu of %zu flows expired", removed, seen);
	return removed;
}

static void gc_tick(struct fibril_timer *t, void *ud)
{
	(void)t;
	dp_gc_run(ud);
}

int dp_gc_start(struct datapath *dp)
{
	dp->gc_timer = fibril_timer_add(dp->m, dp->gc_interval_ms, dp->gc_interval_ms, gc_tick, dp);
	return dp->gc_timer ? 0 : -ENOMEM;
}

/* ---- events -------------------------------------------------------------------------------- */

static int on_event(void *ctx, void *data, size_t size)
{
	struct datapath *dp = ctx;
	const struct dp_event *e = data;

	/* a newer program may append fields: take what we know */
	if (size < sizeof(*e) || e->size < sizeof(*e)) {
		dp->events_bad++;
		return 0;
	}
	if (e->type == DP_EVENT_DROP)
		dp->events_drop++;
	else if (e->type == DP_EVENT_TRACE)
		dp->events_trace++;
	else {
		dp->events_bad++;
		return 0;
	}
	dp->ring[dp->ring_head] = *e;
	dp->ring_head = (dp->ring_head + 1) % DP_EVENT_RING;
	if (dp->ring_count < DP_EVENT_RING)
		dp->ring_count++;
	return 0;
}

static void on_ring_ready(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	(void)io;
	(void)fd;
	(void)revents;
	struct datapath *dp = ud;
	ring_buffer__consume(dp->rb);
}

int dp_events_start(struct datapath *dp, char *err, size_t len)
{
	dp->rb = ring_buffer__new(fibril_map_fd(dp->maps[DPM_EVENTS]), on_event, dp, NULL);
	if (!dp->rb) {
		int e = errno;
		dp_seterr(err, len, "cannot read the ring buffer %s: %s", DP_MAP_EVENTS, strerror(e));
		return -e;
	}
	dp->rb_io = fibril_io_watch(dp->m, ring_buffer__epoll_fd(dp->rb), FIBRIL_IO_READ,
				    on_ring_ready, dp);
	if (!dp->rb_io) {
		ring_buffer__free(dp->rb);
		dp->rb = NULL;
		dp_seterr(err, len, "cannot watch the ring buffer %s", DP_MAP_EVENTS);
		return -ENOMEM;
	}
	/* what the program wrote while no agent was reading */
	ring_buffer__consume(dp->rb);
	return 0;
}

void dp_events_stop(struct datapath *dp)
{
	if (dp->rb_io)
		fibril_io_remove(dp->rb_io);
	dp->rb_io = NULL;
	if (dp->rb)
		ring_buffer__free(dp->rb);
	dp->rb = NULL;
}
