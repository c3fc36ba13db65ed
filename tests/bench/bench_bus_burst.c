/* tests/bench/bench_bus_burst.c - the memory of the event bus under a
 * watch-like burst (run by tests/bench/run.sh through `make bench`). It
 * links the static host core and drives the bus directly: one subscriber
 * that, like a kvstore watcher, keeps a copy of the latest value of every
 * key. First the initial list: EVENTS keys ("kv/nodes/node-NNNNN") with
 * their values, 200-500 bytes in all, delivered 1024 at a time; VmRSS then
 * is the steady state. Then the burst: an update of every key, published
 * at once; VmHWM (the peak RSS, reset through /proc/self/clear_refs just
 * before the burst) against the steady state, and VmRSS after. The queue
 * bound is the second argument: 0 is the unbounded queue of SDK 1.0-1.3
 * (every event held until the loop runs), the reference.
 *
 * Modes: "loop" publishes the whole burst on the loop thread without
 * returning to the loop (as a watch callback handed a large batch does);
 * "thread" publishes from another thread while the loop thread delivers.
 *
 * Usage: bench_bus_burst loop|thread LIMIT_BYTES [EVENTS]   (default 50000)
 * Output, one key=value line:
 *   burst mode=loop limit=4194304 events=50000 payload_avg=350 rss_before_kb=...
 *     hwm_kb=... rss_after_kb=... peak_over_steady_kb=... hwm_reset=1 secs=...
 *     held_max=... waits=... inline_flushes=... over_limit=...
 */
#include "internal.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOPIC "kv.watch"
#define PAYLOAD_MIN 200
#define PAYLOAD_MAX 500

/* Payload: this header, the key (NUL-terminated), the value. */
struct kv_event {
	uint32_t sz;
	uint32_t key_len;   /* with its NUL */
	uint32_t value_len;
	uint32_t index;     /* the key's number, for the check */
};

struct cache {
	char **values; /* per key index: the latest value (a copy) */
	size_t n;
	uint64_t events, bad;
	uint32_t next; /* the index expected next (wraps after the list) */
};

static int on_event(const struct fibril_event *ev, void *ud)
{
	struct cache *c = ud;
	const struct kv_event *kv = ev->payload;
	if (ev->payload_len < sizeof(*kv) || kv->index >= c->n || kv->index != c->next ||
	    sizeof(*kv) + kv->key_len + kv->value_len != ev->payload_len) {
		c->bad++;
		return -1;
	}
	const char *value = (const char *)(kv + 1) + kv->key_len;
	char *copy = malloc(kv->value_len);
	if (!copy)
		return -1;
	memcpy(copy, value, kv->value_len);
	free(c->values[kv->index]);
	c->values[kv->index] = copy;
	c->next = kv->index + 1 == c->n ? 0 : kv->index + 1;
	c->events++;
	return 0;
}

static long status_kb(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	char line[256];
	long v = -1;
	size_t n = strlen(field);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

static bool reset_hwm(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (!f)
		return false;
	bool ok = fputs("5", f) >= 0;
	return fclose(f) == 0 && ok;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Event i of a round: the same lengths on every run (a fixed pseudo-random
 * sequence per round). */
static size_t make_event(unsigned char *buf, uint32_t i, uint32_t round)
{
	uint32_t x = i * 2654435761u + 12345u + round * 40503u;
	x ^= x >> 13;
	x *= 0x5bd1e995u;
	x ^= x >> 15;
	size_t total = PAYLOAD_MIN + x % (PAYLOAD_MAX - PAYLOAD_MIN + 1);
	struct kv_event *kv = (struct kv_event *)(void *)buf;
	char *key = (char *)(kv + 1);
	int klen = snprintf(key, 64, "kv/nodes/node-%05u", (unsigned)i) + 1;
	kv->sz = sizeof(*kv);
	kv->key_len = (uint32_t)klen;
	kv->value_len = (uint32_t)(total - sizeof(*kv) - (size_t)klen);
	kv->index = i;
	memset(key + klen, 'a' + (int)((i + round) % 26), kv->value_len);
	return total;
}

struct producer {
	uint32_t events;
	uint64_t bytes;
	int failures;
	atomic_bool done;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	unsigned char buf[PAYLOAD_MAX];
	for (uint32_t i = 0; i < p->events; i++) {
		size_t len = make_event(buf, i, 1);
		p->bytes += len;
		if (fibril_bus_publish(NULL, TOPIC, 1, buf, len) != 0)
			p->failures++;
	}
	atomic_store(&p->done, true);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "loop") != 0 && strcmp(argv[1], "thread") != 0)) {
		fprintf(stderr, "usage: bench_bus_burst loop|thread LIMIT_BYTES [EVENTS]\n");
		return 2;
	}
	bool threaded = strcmp(argv[1], "thread") == 0;
	size_t limit = strtoull(argv[2], NULL, 10);
	uint32_t events = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 50000;
	if (events == 0) {
		fprintf(stderr, "bench_bus_burst: EVENTS must be > 0\n");
		return 2;
	}
	log_set_level(FIBRIL_LOG_WARN);
	if (loop_init() != 0 || bus_init() != 0) {
		fprintf(stderr, "bench_bus_burst: cannot start the loop and the bus\n");
		return 1;
	}
	bus_set_limit(limit);
	struct cache c = {.values = calloc(events, sizeof(char *)), .n = events};
	if (!c.values || !fibril_bus_subscribe(NULL, TOPIC, 1, on_event, &c)) {
		fprintf(stderr, "bench_bus_burst: setup failed\n");
		return 1;
	}
	/* The initial list, delivered as it comes: the steady state. */
	unsigned char buf[PAYLOAD_MAX];
	for (uint32_t i = 0; i < events; i++) {
		size_t len = make_event(buf, i, 0);
		if (fibril_bus_publish(NULL, TOPIC, 1, buf, len) != 0) {
			fprintf(stderr, "bench_bus_burst: publish failed\n");
			return 1;
		}
		if ((i + 1) % 1024 == 0)
			bus_flush();
	}
	bus_flush();
	if (c.events != events || c.bad) {
		fprintf(stderr, "bench_bus_burst: the initial list was not delivered in order\n");
		return 1;
	}
	c.events = 0;
	malloc_trim(0);
	long rss_before = status_kb("VmRSS");
	bool hwm_reset = reset_hwm();

	struct producer p = {.events = events};
	atomic_init(&p.done, false);
	double t0 = now_s();
	if (threaded) {
		pthread_t th;
		if (pthread_create(&th, NULL, produce, &p) != 0) {
			fprintf(stderr, "bench_bus_burst: pthread_create failed\n");
			return 1;
		}
		while (!atomic_load(&p.done))
			bus_flush();
		pthread_join(th, NULL);
	} else {
		produce(&p); /* the loop thread publishes it all, then returns to the loop */
	}
	bus_flush();
	double secs = now_s() - t0;

	long hwm = status_kb("VmHWM"), rss_after = status_kb("VmRSS");
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	if (c.events != events || c.bad || p.failures) {
		fprintf(stderr, "bench_bus_burst: %llu of %u events delivered, %llu out of order, %d "
				"publish failures\n",
			(unsigned long long)c.events, events, (unsigned long long)c.bad, p.failures);
		return 1;
	}
	printf("burst mode=%s limit=%zu events=%u payload_avg=%.0f rss_before_kb=%ld hwm_kb=%ld "
	       "rss_after_kb=%ld peak_over_steady_kb=%ld hwm_reset=%d secs=%.4f held_max=%zu "
	       "waits=%llu inline_flushes=%llu over_limit=%llu\n",
	       threaded ? "thread" : "loop", limit, events, (double)p.bytes / events, rss_before,
	       hwm, rss_after, hwm - rss_before, hwm_reset ? 1 : 0, secs, q.held_max,
	       (unsigned long long)q.waits, (unsigned long long)q.inline_flushes,
	       (unsigned long long)q.over_limit);
	for (size_t i = 0; i < c.n; i++)
		free(c.values[i]);
	free(c.values);
	bus_fini();
	loop_fini();
	return 0;
}
