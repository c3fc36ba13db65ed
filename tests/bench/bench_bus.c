/* tests/bench/bench_bus.c - event bus throughput benchmark (run by
 * tests/bench/run.sh through `make bench`, not by make check). It links the
 * static host core and drives the bus directly: N subscribers on one topic,
 * M publishes of a 16-byte payload with fibril_bus_publish(NULL, ...),
 * bus_flush() every 1024 publishes, timed with CLOCK_MONOTONIC. A second
 * run publishes from another thread while the main (loop) thread flushes.
 *
 * Usage: bench_bus [EVENTS] [SUBSCRIBERS...]   (default: 2000000 1 10)
 * Output, one line per case, key=value:
 *   bus mode=inline subs=1 events=2000000 secs=0.31 events_per_s=6.4e6 deliveries_per_s=6.4e6
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOPIC "bench.event"
#define FLUSH_EVERY 1024

struct payload {
	uint32_t sz;
	uint32_t pad;
	uint64_t n;
};

static uint64_t g_delivered;
static uint64_t g_checksum;

static int on_event(const struct fibril_event *ev, void *ud)
{
	const struct payload *p = ev->payload;
	g_delivered++;
	g_checksum += p->n;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int subscribe_n(unsigned nsubs)
{
	for (unsigned i = 0; i < nsubs; i++) {
		if (!fibril_bus_subscribe(NULL, TOPIC, 1, on_event, NULL)) {
			fprintf(stderr, "bench_bus: subscribe: %s\n", strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void report(const char *mode, unsigned nsubs, uint64_t events, double secs)
{
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	printf("bus mode=%s subs=%u events=%llu secs=%.4f events_per_s=%.0f deliveries_per_s=%.0f "
	       "queue_max_bytes=%zu publish_waits=%llu\n",
	       mode, nsubs, (unsigned long long)events, secs, (double)events / secs,
	       (double)g_delivered / secs, q.held_max, (unsigned long long)q.waits);
	fflush(stdout);
}

static int check(const char *mode, unsigned nsubs, uint64_t events)
{
	if (g_delivered != events * nsubs) {
		fprintf(stderr, "bench_bus: %s/%u: delivered %llu, expected %llu\n", mode, nsubs,
			(unsigned long long)g_delivered, (unsigned long long)(events * nsubs));
		return -1;
	}
	return 0;
}

/* Publish and flush on the same thread, as a module on the loop would. */
static int run_inline(uint64_t events, unsigned nsubs)
{
	if (loop_init() != 0 || bus_init() != 0 || subscribe_n(nsubs) != 0)
		return -1;
	g_delivered = g_checksum = 0;
	struct payload p = {.sz = sizeof(p), .pad = 0, .n = 0};
	double t0 = now_s();
	for (uint64_t i = 0; i < events; i++) {
		p.n = i;
		if (fibril_bus_publish(NULL, TOPIC, 1, &p, sizeof(p)) != 0) {
			fprintf(stderr, "bench_bus: publish failed\n");
			return -1;
		}
		if ((i + 1) % FLUSH_EVERY == 0)
			bus_flush();
	}
	bus_flush();
	double secs = now_s() - t0;
	int rc = check("inline", nsubs, events);
	if (rc == 0)
		report("inline", nsubs, events, secs);
	bus_fini();
	loop_fini();
	return rc;
}

struct producer {
	uint64_t events;
	atomic_bool done;
	int rc;
};

static void *produce(void *arg)
{
	struct producer *pr = arg;
	struct payload p = {.sz = sizeof(p), .pad = 0, .n = 0};
	for (uint64_t i = 0; i < pr->events; i++) {
		p.n = i;
		if (fibril_bus_publish(NULL, TOPIC, 1, &p, sizeof(p)) != 0) {
			pr->rc = -1;
			break;
		}
	}
	atomic_store(&pr->done, true);
	return NULL;
}

/* Publish from a second thread while this thread (the "loop") flushes. */
static int run_threaded(uint64_t events, unsigned nsubs)
{
	if (loop_init() != 0 || bus_init() != 0 || subscribe_n(nsubs) != 0)
		return -1;
	g_delivered = g_checksum = 0;
	struct producer pr = {.events = events, .rc = 0};
	atomic_init(&pr.done, false);
	pthread_t th;
	double t0 = now_s();
	if (pthread_create(&th, NULL, produce, &pr) != 0) {
		fprintf(stderr, "bench_bus: pthread_create failed\n");
		return -1;
	}
	for (;;) {
		bool done = atomic_load(&pr.done);
		uint64_t before = g_delivered;
		bus_flush();
		if (done)
			break; /* everything published before `done` is now delivered */
		if (g_delivered == before)
			sched_yield();
	}
	double secs = now_s() - t0;
	pthread_join(th, NULL);
	int rc = pr.rc != 0 ? -1 : check("threaded", nsubs, events);
	if (rc == 0)
		report("threaded", nsubs, events, secs);
	bus_fini();
	loop_fini();
	return rc;
}

int main(int argc, char **argv)
{
	uint64_t events = 2000000;
	if (argc > 1)
		events = strtoull(argv[1], NULL, 10);
	if (events == 0) {
		fprintf(stderr, "usage: bench_bus [EVENTS] [SUBSCRIBERS...]\n");
		return 2;
	}
	static const unsigned default_subs[] = {1, 10};
	unsigned subs[16];
	size_t nsubs_cases = 0;
	for (int i = 2; i < argc && nsubs_cases < 16; i++)
		subs[nsubs_cases++] = (unsigned)strtoul(argv[i], NULL, 10);
	if (nsubs_cases == 0) {
		memcpy(subs, default_subs, sizeof(default_subs));
		nsubs_cases = sizeof(default_subs) / sizeof(default_subs[0]);
	}
	log_set_level(FIBRIL_LOG_WARN);
	int rc = 0;
	for (size_t i = 0; i < nsubs_cases; i++)
		rc |= run_inline(events, subs[i]);
	for (size_t i = 0; i < nsubs_cases; i++)
		rc |= run_threaded(events, subs[i]);
	/* keep the checksum live so the callback cannot be optimised away */
	if (g_checksum == 1)
		fprintf(stderr, "\n");
	return rc ? 1 : 0;
}
