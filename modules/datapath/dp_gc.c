/* modules/datapath/dp_gc.c - the two loop-driven jobs of the datapath:
 * the conntrack garbage collector (a timer every [datapath]
 * conntrack-gc-interval has the worker pool remove flows idle longer than
 * their timeout from dp_conntrack (TCP, TCP after FIN/RST) and dp_ct_any
 * (everything else), with batch operations (dp_ctgc.c)) and the events reader (the
 * dp_events map fd watched on the loop, its data pages mapped only while
 * events flow; each record is
 * counted and kept in a small ring for GET /v1/datapath/events). */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <time.h>

#include "datapath.h"
#include "dp_ctgc.h"

/* ---- conntrack GC ----------------------------------------------------------------------
 * Every tick submits one pass to the worker pool (none while one runs):
 * the job walks both conntrack maps with batch operations (dp_ctgc.c) on
 * its own copies of the maps' fds, and its figures are applied on the loop
 * in gc_done. The loop never walks a map. */

struct gc_job {
	struct datapath *dp;
	int fd[2]; /* dup()s of dp_conntrack and dp_ct_any: the job's own */
	int nat_fd; /* and of dp_nat (masquerading's mappings) */
	int nat_count_fd; /* and of dp_nat_count, which the job maps */
	struct dp_ctgc_stats nat_st;
	int nat_rc;
	int count_fd; /* and of dp_ct_count, which the job maps */
	struct dp_ctgc_params params;
	struct dp_ctgc_stats st[2];
	int rc[2];
	uint64_t us;
};

static void gc_work(void *ud)
{
	struct gc_job *j = ud;
	uint64_t t0 = dp_mono_ns();
	/* the job's own mapping of the counts: the module may stop meanwhile */
	size_t sz = (size_t)DP_CT_COUNT_MAX * sizeof(struct dp_ct_count);
	void *counts = j->count_fd < 0 ? MAP_FAILED
					: mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, j->count_fd, 0);
	j->params.counts = counts == MAP_FAILED ? NULL : counts;
	for (int i = 0; i < 2; i++) {
		j->params.map_index = (unsigned)i;
		j->rc[i] = j->fd[i] < 0 ? -EBADF : dp_ctgc_batch(j->fd[i], &j->params, &j->st[i]);
	}
	if (counts != MAP_FAILED)
		munmap(counts, sz);
	j->params.counts = NULL;
	size_t nsz = (size_t)DP_CT_COUNT_MAX * sizeof(uint32_t);
	void *nat_counts = j->nat_count_fd < 0 ? MAP_FAILED
					       : mmap(NULL, nsz, PROT_READ | PROT_WRITE, MAP_SHARED,
						      j->nat_count_fd, 0);
	j->params.nat_counts = nat_counts == MAP_FAILED ? NULL : nat_counts;
	j->nat_rc = j->nat_fd < 0 ? -EBADF : dp_natgc_batch(j->nat_fd, &j->params, &j->nat_st);
	if (nat_counts != MAP_FAILED)
		munmap(nat_counts, nsz);
	j->us = (dp_mono_ns() - t0) / 1000;
}

static void gc_done(void *ud, int status)
{
	struct gc_job *j = ud;
	struct datapath *dp = j->dp;
	for (int i = 0; i < 2; i++)
		if (j->fd[i] >= 0)
			close(j->fd[i]);
	if (j->count_fd >= 0)
		close(j->count_fd);
	if (j->nat_fd >= 0)
		close(j->nat_fd);
	if (j->nat_count_fd >= 0)
		close(j->nat_count_fd);
	dp->gc_busy = false;
	if (dp->gc_again) {
		dp->gc_again = false;
		dp_gc_kick(dp); /* the entries of an endpoint removed meanwhile */
	}
	if (status == 0) {
		size_t removed = j->st[0].removed + j->st[1].removed + j->nat_st.removed;
		dp->gc_last_nat = j->nat_st.seen - j->nat_st.removed;
		if (j->nat_rc < 0)
			fibril_warn(dp->m, "masquerading GC of %s: %s", DP_MAP_NAT,
				    strerror(-j->nat_rc));
		dp->gc_runs++;
		dp->gc_removed += removed;
		fibril_series_inc(dp->m_gc_runs);
		fibril_series_add(dp->m_gc_removed, (double)removed);
		fibril_series_observe(dp->m_gc_seconds, (double)j->us / 1e6);
		dp->gc_last_ms = fibril_now_ms();
		dp->gc_last_us = j->us;
		dp->gc_last_syscalls = j->st[0].syscalls + j->st[1].syscalls + j->nat_st.syscalls;
		dp->gc_last_tcp = j->st[0].seen - j->st[0].removed;
		dp->gc_last_other = j->st[1].seen - j->st[1].removed;
		dp->gc_last_entries = dp->gc_last_tcp + dp->gc_last_other;
		for (int i = 0; i < 2; i++)
			if (j->rc[i] < 0)
				fibril_warn(dp->m, "conntrack GC of %s: %s",
					    i ? DP_MAP_CT_ANY : DP_MAP_CONNTRACK, strerror(-j->rc[i]));
		if (removed)
			fibril_debug(dp->m, "conntrack GC: %zu of %zu flows expired (%llu us, %llu bpf calls)",
				     removed, j->st[0].seen + j->st[1].seen,
				     (unsigned long long)j->us,
				     (unsigned long long)dp->gc_last_syscalls);
	}
	free(j);
}

int dp_gc_kick(struct datapath *dp)
{
	if (dp->gc_busy)
		return -EBUSY;
	struct gc_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->dp = dp;
	j->fd[0] = fcntl(fibril_map_fd(dp->maps[DPM_CONNTRACK]), F_DUPFD_CLOEXEC, 0);
	j->fd[1] = fcntl(fibril_map_fd(dp->maps[DPM_CT_ANY]), F_DUPFD_CLOEXEC, 0);
	j->count_fd = fcntl(fibril_map_fd(dp->maps[DPM_CT_COUNT]), F_DUPFD_CLOEXEC, 0);
	j->nat_fd = fcntl(fibril_map_fd(dp->maps[DPM_NAT]), F_DUPFD_CLOEXEC, 0);
	j->nat_count_fd = fcntl(fibril_map_fd(dp->maps[DPM_NAT_COUNT]), F_DUPFD_CLOEXEC, 0);
	j->params.now_s = dp_ctgc_now_s();
	j->params.tcp_ms = dp->ct_tcp_ms;
	j->params.closing_ms = dp->ct_closing_ms;
	j->params.other_ms = dp->ct_other_ms;
	j->params.syn_ms = dp->ct_syn_ms;
	j->params.slack_s = dp->ct_refresh_s;
	dp->gc_busy = true;
	int rc = fibril_work_submit(dp->m, gc_work, gc_done, j);
	if (rc < 0) {
		dp->gc_busy = false;
		for (int i = 0; i < 2; i++)
			if (j->fd[i] >= 0)
				close(j->fd[i]);
		if (j->count_fd >= 0)
			close(j->count_fd);
		if (j->nat_fd >= 0)
			close(j->nat_fd);
		if (j->nat_count_fd >= 0)
			close(j->nat_count_fd);
		free(j);
	}
	return rc;
}

void dp_gc_endpoint_removed(struct datapath *dp, uint16_t id)
{
	if (!id || !dp->maps[DPM_CT_COUNT])
		return;
	size_t sz = (size_t)DP_CT_COUNT_MAX * sizeof(struct dp_ct_count);
	void *counts = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED,
			    fibril_map_fd(dp->maps[DPM_CT_COUNT]), 0);
	if (counts == MAP_FAILED) {
		fibril_warn(dp->m, "endpoint %u removed: cannot map %s to release its charges: %s",
			    id, DP_MAP_CT_COUNT, strerror(errno));
		return;
	}
	dp_ctgc_release_slot(counts, id);
	munmap(counts, sz);
	if (dp_gc_kick(dp) == -EBUSY)
		dp->gc_again = true; /* the running pass may have read the old gen */
}

static void gc_tick(struct fibril_timer *t, void *ud)
{
	(void)t;
	dp_gc_kick(ud);
}

int dp_gc_start(struct datapath *dp)
{
	dp->gc_timer = fibril_timer_add(dp->m, dp->gc_interval_ms, dp->gc_interval_ms, gc_tick, dp);
	return dp->gc_timer ? 0 : -ENOMEM;
}

/* ---- events the programs did not send ------------------------------------------------------ */

#define DP_UNSENT_INTERVAL_MS 200

/* The programs' counts of drop events over the rate limit and of events
 * the ring had no room for, over every direction. */
static int unsent_read(struct datapath *dp, uint64_t out[2])
{
	static const uint8_t reasons[2] = {DP_REASON_EVENT_SUPPRESSED, DP_REASON_EVENT_LOST};
	out[0] = out[1] = 0;
	if (!dp->maps[DPM_METRICS])
		return -ENOENT;
	for (int r = 0; r < 2; r++)
		for (uint8_t dir = 0; dir < DP_METRICS_DIRECTIONS; dir++) {
			struct dp_metrics_value v;
			int rc = dp_metrics_read(dp, reasons[r], dir, &v);
			if (rc < 0)
				return rc;
			out[r] += v.packets;
		}
	return 0;
}

static void unsent_tick(struct fibril_timer *t, void *ud)
{
	(void)t;
	struct datapath *dp = ud;
	uint64_t now[2];
	if (unsent_read(dp, now) < 0)
		return;
	if (!dp->unsent_base_set) { /* the programs came after the start */
		dp->unsent_base[0] = now[0];
		dp->unsent_base[1] = now[1];
		dp->unsent_base_set = true;
		return;
	}
	struct fibril_datapath_events_unsent ev = {.sz = sizeof(ev)};
	/* the counters live in a pinned map: count from this module's start */
	ev.suppressed = now[0] >= dp->unsent_base[0] ? now[0] - dp->unsent_base[0] : 0;
	ev.ring_lost = now[1] >= dp->unsent_base[1] ? now[1] - dp->unsent_base[1] : 0;
	if (ev.suppressed == dp->unsent_sent[0] && ev.ring_lost == dp->unsent_sent[1])
		return;
	if (fibril_bus_publish(dp->m, FIBRIL_DATAPATH_TOPIC_EVENTS_UNSENT,
			       FIBRIL_DATAPATH_EVENTS_UNSENT_VERSION, &ev, sizeof(ev)) == 0) {
		dp->unsent_sent[0] = ev.suppressed;
		dp->unsent_sent[1] = ev.ring_lost;
	}
}

int dp_unsent_start(struct datapath *dp)
{
	dp->unsent_base_set = unsent_read(dp, dp->unsent_base) == 0;
	dp->unsent_sent[0] = dp->unsent_sent[1] = 0;
	dp->unsent_timer = fibril_timer_add(dp->m, DP_UNSENT_INTERVAL_MS, DP_UNSENT_INTERVAL_MS,
					    unsent_tick, dp);
	return dp->unsent_timer ? 0 : -ENOMEM;
}

/* ---- events -------------------------------------------------------------------------------- */

/* Every record on the bus (hubble-lite turns them into flows). Never waits:
 * a full bus queue (-EAGAIN) leaves the record to the caller, which stops
 * reading so the rest waits in dp_events (sized for that) until the loop
 * has delivered the queue; any other failure counts the event as lost,
 * reported in the next one. */
static int dp_event_publish(struct datapath *dp, const struct dp_event *e)
{
	struct fibril_datapath_event ev = {.sz = sizeof(ev)};
	ev.type = e->type;
	ev.reason = e->reason;
	ev.direction = e->direction;
	ev.family = e->family == DP_FAMILY_IPV4 ? 4 : e->family == DP_FAMILY_IPV6 ? 6 : 0;
	ev.proto = e->proto;
	ev.tcp_flags = e->tcp_flags;
	ev.sport = ntohs(e->sport);
	ev.dport = ntohs(e->dport);
	ev.src_ep_id = e->src_ep_id;
	ev.dst_ep_id = e->dst_ep_id;
	ev.src_identity = e->src_identity;
	ev.dst_identity = e->dst_identity;
	ev.ifindex = e->ifindex;
	ev.len = e->len;
	ev.mono_ns = e->ts_ns;
	/* the event's monotonic stamp in wall-clock time: the clocks' offset
	 * is read once per batch (dp_events_consume), not per event */
	ev.time_ns = (uint64_t)((int64_t)e->ts_ns + dp->events_real_ns - dp->events_mono_ns);
	memcpy(ev.saddr, e->saddr, sizeof(ev.saddr));
	memcpy(ev.daddr, e->daddr, sizeof(ev.daddr));
	const char *rn = dp_reason_name(e->reason);
	size_t rl = strnlen(rn, sizeof(ev.reason_name) - 1);
	memcpy(ev.reason_name, rn, rl);
	ev.reason_name[rl] = '\0';
	ev.policy_rule = e->policy_rule;
	ev.policy_match = e->policy_match;
	ev.policy_dir = e->policy_dir == DP_POLICY_INGRESS ? FIBRIL_DATAPATH_INGRESS
							   : FIBRIL_DATAPATH_EGRESS;
	if (e->size > DP_EVENT_SIZE_V2 && (e->proto == IPPROTO_ICMP || e->proto == IPPROTO_ICMPV6)) {
		ev.icmp_type = e->icmp_type;
		ev.icmp_code = e->icmp_code;
		ev.icmp_known = 1;
	}
	if (e->size > DP_EVENT_SIZE_V3 && e->xlated) {
		memcpy(ev.saddr_xlated, e->saddr_xlated, sizeof(ev.saddr_xlated));
		ev.sport_xlated = ntohs(e->sport_xlated);
		ev.xlated = 1;
	}
	ev.lost_before = dp->events_unpublished;
	int rc = fibril_bus_try_publish(dp->m, FIBRIL_DATAPATH_TOPIC_EVENT,
					FIBRIL_DATAPATH_EVENT_VERSION, &ev, sizeof(ev));
	if (rc == 0)
		dp->events_unpublished = 0;
	else if (rc != -EAGAIN)
		dp->events_unpublished++, fibril_series_inc(dp->m_events_lost);
	return rc == -EAGAIN ? rc : 0;
}

#define DP_EVENTS_BATCH 1024 /* records read per dp_events_consume (below) */

static int on_event(void *ctx, void *data, size_t size)
{
	struct datapath *dp = ctx;
	const struct dp_event *in = data;
	struct dp_event copy, *e = &copy;

	/* a newer program may append fields: take what we know; an older one
	 * (still attached while this agent starts) wrote no policy fields */
	if (size < DP_EVENT_SIZE_V1 || in->size < DP_EVENT_SIZE_V1 || in->size > size) {
		dp->events_bad++;
		fibril_series_inc(dp->m_events[2]);
		return 0;
	}
	memset(&copy, 0, sizeof(copy));
	memcpy(&copy, in, in->size < sizeof(copy) ? in->size : sizeof(copy));
	if (e->type == DP_EVENT_DROP)
		dp->events_drop++, fibril_series_inc(dp->m_events[0]);
	else if (e->type == DP_EVENT_TRACE)
		dp->events_trace++, fibril_series_inc(dp->m_events[1]);
	else if (e->type == DP_EVENT_POLICY)
		dp->events_policy++, fibril_series_inc(dp->m_events[3]);
	else {
		dp->events_bad++;
		fibril_series_inc(dp->m_events[2]);
		return 0;
	}
	if ((e->type == DP_EVENT_POLICY || e->reason == DP_REASON_DROP_POLICY) &&
	    e->policy_match > DP_POLICY_MATCH_NONE && e->policy_match <= DP_POLICY_MATCH_DEFAULT_DENY &&
	    e->policy_dir < 2)
		fibril_series_inc(dp->m_verdicts[e->policy_dir][e->policy_match]);
	/* libbpf has moved past this record already: kept for the next read */
	int rc = dp_event_publish(dp, e);
	if (rc < 0) {
		dp->events_pending = *e;
		dp->events_has_pending = true;
	}
	dp->ring[dp->ring_head] = *e;
	dp->ring_head = (dp->ring_head + 1) % DP_EVENT_RING;
	if (dp->ring_count < DP_EVENT_RING)
		dp->ring_count++;
	if (rc == 0 && ++dp->events_read >= DP_EVENTS_BATCH)
		return -EINTR; /* enough for one trip round the loop (this one is published) */
	return rc; /* < 0: stop reading, the bus is full */
}

/* ---- the dp_events reader ------------------------------------------------------------------
 * The ring's pages are resident only while events flow: the consumer and
 * producer pages (one each) are mapped at start, the data area (mapped
 * twice by the kernel, 2 x events-ring-bytes: 16 MiB of resident pages by
 * default, as the kernel maps a ring's pages when it is mmap'ed) only when
 * the producer is ahead of us, and unmapped again after DP_RING_IDLE_MS
 * with nothing to read. The records are read as libbpf's ring_buffer does
 * (its header: length, busy and discard bits; 8-byte aligned). */
#define DP_RING_IDLE_MS 5000

struct dp_ring {
	int fd;
	size_t page, size;          /* size: the data area (a power of 2) */
	unsigned long *consumer;    /* RW page 0 */
	const unsigned long *producer; /* RO page 1 */
	unsigned char *data;        /* RO, 2 x size, NULL when unmapped */
	uint64_t last_data_ms;      /* when the data area was last needed */
};

static void ring_free(struct dp_ring *r)
{
	if (!r)
		return;
	if (r->data)
		munmap(r->data, 2 * r->size);
	if (r->producer)
		munmap((void *)r->producer, r->page);
	if (r->consumer)
		munmap(r->consumer, r->page);
	free(r);
}

static struct dp_ring *ring_open(int fd, uint32_t size)
{
	struct dp_ring *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->fd = fd;
	r->page = (size_t)sysconf(_SC_PAGESIZE);
	r->size = size;
	void *c = mmap(NULL, r->page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	void *pr = c == MAP_FAILED ? MAP_FAILED : mmap(NULL, r->page, PROT_READ, MAP_SHARED, fd, (off_t)r->page);
	if (c == MAP_FAILED || pr == MAP_FAILED) {
		int e = errno;
		if (c != MAP_FAILED)
			munmap(c, r->page);
		free(r);
		errno = e;
		return NULL;
	}
	r->consumer = c;
	r->producer = pr;
	return r;
}

static int ring_map_data(struct dp_ring *r)
{
	if (r->data)
		return 0;
	void *d = mmap(NULL, 2 * r->size, PROT_READ, MAP_SHARED, r->fd, (off_t)(2 * r->page));
	if (d == MAP_FAILED)
		return -errno;
	r->data = d;
	return 0;
}

/* Read what waits (as ring_buffer__consume; on_event < 0 stops, past the
 * record it refused); the data area unmapped once idle. */
static void ring_consume(struct datapath *dp)
{
	struct dp_ring *r = dp->rb;
	uint64_t now = fibril_now_ms();
	unsigned long cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
	for (;;) {
		unsigned long prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
		if (cons >= prod)
			break;
		if (ring_map_data(r) < 0) {
			dp->events_bad++;
			return;
		}
		r->last_data_ms = now;
		bool got = false;
		while (cons < prod) {
			const uint32_t *hdr = (const uint32_t *)(r->data + (cons & (r->size - 1)));
			uint32_t len = __atomic_load_n(hdr, __ATOMIC_ACQUIRE);
			if (len & BPF_RINGBUF_BUSY_BIT)
				goto out;
			got = true;
			uint32_t n = len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT);
			cons += (n + BPF_RINGBUF_HDR_SZ + 7) & ~7ul;
			int rc = 0;
			if (!(len & BPF_RINGBUF_DISCARD_BIT))
				rc = on_event(dp, (void *)(hdr + 2), n);
			__atomic_store_n(r->consumer, cons, __ATOMIC_RELEASE);
			if (rc < 0)
				return;
		}
		if (!got)
			break;
	}
out:
	if (r->data && now - r->last_data_ms >= DP_RING_IDLE_MS &&
	    __atomic_load_n(r->producer, __ATOMIC_ACQUIRE) == cons) {
		munmap(r->data, 2 * r->size);
		r->data = NULL;
	}
}

/* Read the records waiting in dp_events, the clocks read once for all:
 * at most DP_EVENTS_BATCH of them, so a backlog (the agent was off the CPU
 * for a while) does not become one long callback in which the loop serves
 * nobody else - the flow stream's followers, for one, whose queues would
 * overflow while nothing is written to them. What is left keeps the ring
 * readable, so the next trip round the loop reads on (the poll timer
 * below too). */
void dp_events_consume(struct datapath *dp)
{
	if (!dp->rb)
		return;
	dp->events_read = 0;
	struct timespec mono, real;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &real);
	dp->events_mono_ns = (int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec;
	dp->events_real_ns = (int64_t)real.tv_sec * 1000000000 + real.tv_nsec;
	/* the record the full bus refused last time goes first; while the bus
	 * is still full the records stay in dp_events (the loop delivers the
	 * bus's queue right after this callback, so this is brief) */
	if (dp->events_has_pending) {
		if (dp_event_publish(dp, &dp->events_pending) < 0)
			return;
		dp->events_has_pending = false;
	}
	ring_consume(dp);
}

void dp_events_drain(struct datapath *dp)
{
	do
		dp_events_consume(dp);
	while (dp->rb && dp->events_read >= DP_EVENTS_BATCH && !dp->events_has_pending);
}

static void on_ring_ready(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	(void)io;
	(void)fd;
	(void)revents;
	struct datapath *dp = ud;
	dp_events_consume(dp);
}

static void on_ring_poll(struct fibril_timer *t, void *ud)
{
	(void)t;
	struct datapath *dp = ud;
	dp_events_consume(dp);
}

int dp_events_start(struct datapath *dp, char *err, size_t len)
{
	dp->rb = ring_open(fibril_map_fd(dp->maps[DPM_EVENTS]), dp->events_bytes);
	if (!dp->rb) {
		int e = errno;
		dp_seterr(err, len, "cannot read the ring buffer %s: %s", DP_MAP_EVENTS, strerror(e));
		return -e;
	}
	/* the map's fd polls readable when the program wakes its reader */
	dp->rb_io = fibril_io_watch(dp->m, fibril_map_fd(dp->maps[DPM_EVENTS]), FIBRIL_IO_READ,
				    on_ring_ready, dp);
	if (!dp->rb_io) {
		ring_free(dp->rb);
		dp->rb = NULL;
		dp_seterr(err, len, "cannot watch the ring buffer %s", DP_MAP_EVENTS);
		return -ENOMEM;
	}
	/* the program wakes the reader only once DP_EVENTS_WAKEUP_BYTES wait:
	 * the rest is read on this timer */
	dp->rb_timer = fibril_timer_add(dp->m, DP_EVENTS_POLL_MS, DP_EVENTS_POLL_MS, on_ring_poll, dp);
	if (!dp->rb_timer) {
		dp_events_stop(dp);
		dp_seterr(err, len, "cannot add the ring buffer's poll timer");
		return -ENOMEM;
	}
	/* what the program wrote while no agent was reading */
	dp_events_consume(dp);
	return 0;
}

void dp_events_stop(struct datapath *dp)
{
	if (dp->rb_timer)
		fibril_timer_cancel(dp->rb_timer);
	dp->rb_timer = NULL;
	if (dp->rb_io)
		fibril_io_remove(dp->rb_io);
	dp->rb_io = NULL;
	ring_free(dp->rb);
	dp->rb = NULL;
}
