/* host/bus.c - the event bus: named topics, versioned payloads, delivery in
 * publish order on the loop thread, per-topic counters. Publishing copies
 * the payload into a bounded queue (any thread may publish); the loop
 * drains the queue and calls every subscriber of the event's topic.
 *
 * The queue is a FIFO of blocks (BLOCK_SIZE bytes) into which events are
 * copied back to back, so a publish is a memcpy under the lock, not a
 * malloc. The blocks held by the queue (pending and being delivered) are
 * bounded by g_limit bytes: when the next block would pass it, a publisher
 * on the loop thread delivers the queue first (bus_flush), one inside a
 * subscriber (the loop is already delivering) goes past the bound, and one
 * on another thread waits until the loop has drained a block (or gets
 * -EAGAIN from fibril_bus_try_publish). A waiting publisher that sees no
 * progress for STALL_MS (the loop waits on it?) goes past the bound too,
 * with a warning, so nothing deadlocks and no event is ever dropped. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct topic;

struct fibril_subscription {
	struct fibril_module *owner;
	struct topic *topic;
	fibril_event_fn cb;
	void *ud;
	uint32_t min_version;
	void *h; /* the generation-checked handle the module holds */
	bool dead;
	uint64_t failures;
};

/* The topic list only grows at its head (until bus_fini) and a topic's
 * name and next never change once linked, so the loop reads the head under
 * the lock (topics_snapshot) and may then walk the list without it.
 * published and seq are written under the lock by any thread; subs,
 * has_dead and the delivery counters only on the loop thread. */
struct topic {
	char *name;
	struct fibril_subscription **subs;
	size_t nsubs, cap;
	uint64_t seq;
	uint64_t published, delivered, failed, skipped;
	bool has_dead;
	struct topic *next;
};

/* One event in a block; the payload follows, the record is padded to
 * RECORD_ALIGN so the next one (and every payload) stays aligned as
 * malloc's memory would be. */
struct queued_event {
	struct topic *topic;
	const char *publisher;
	uint64_t seq;
	size_t len;
	uint32_t type_version;
	alignas(max_align_t) unsigned char payload[];
};

#define RECORD_ALIGN alignof(max_align_t)
#define BLOCK_SIZE ((size_t)64 * 1024) /* bytes of events per block */
#define FREE_BLOCKS_KEPT 16            /* empty blocks kept for reuse */
#define DEFAULT_LIMIT ((size_t)4 * 1024 * 1024)
#define STALL_MS 2000

struct block {
	struct block *next;
	size_t size; /* bytes of data[] */
	size_t used; /* bytes of data[] holding events */
	alignas(max_align_t) unsigned char data[];
};

static pthread_mutex_t g_bus_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_room;          /* a block was released (CLOCK_MONOTONIC) */
static pthread_once_t g_room_once = PTHREAD_ONCE_INIT;
static struct topic *g_topics;
static struct block *g_queue_head, *g_queue_tail; /* pending, not yet taken */
static struct block *g_free_blocks;
static unsigned g_nfree_blocks;
static size_t g_limit = DEFAULT_LIMIT; /* 0: unbounded */
static size_t g_held;                  /* bytes of blocks pending or being delivered */
static size_t g_held_max;              /* high-water mark of g_held */
static uint64_t g_released;            /* blocks released by the loop, ever */
static unsigned g_waiting;             /* publishers waiting for room */
static uint64_t g_waits, g_inline_flushes, g_over_limit, g_refused;
static pthread_t g_loop_thread;
static bool g_have_loop_thread;
static bool g_flushing; /* loop thread only */

static void room_init(void)
{
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&g_room, &attr);
	pthread_condattr_destroy(&attr);
}

/* The thread calling bus_init is the loop thread (it runs bus_flush). */
int bus_init(void)
{
	pthread_once(&g_room_once, room_init);
	pthread_mutex_lock(&g_bus_lock);
	g_loop_thread = pthread_self();
	g_have_loop_thread = true;
	pthread_mutex_unlock(&g_bus_lock);
	return 0;
}

void bus_set_limit(size_t bytes)
{
	pthread_mutex_lock(&g_bus_lock);
	g_limit = bytes;
	pthread_mutex_unlock(&g_bus_lock);
	pthread_cond_broadcast(&g_room);
}

void bus_queue_stats(struct bus_queue_stats *out)
{
	pthread_mutex_lock(&g_bus_lock);
	*out = (struct bus_queue_stats){
		.limit = g_limit,
		.held = g_held,
		.held_max = g_held_max,
		.waits = g_waits,
		.inline_flushes = g_inline_flushes,
		.over_limit = g_over_limit,
		.refused = g_refused,
	};
	pthread_mutex_unlock(&g_bus_lock);
}

/* The head of the topic list, read under the lock: every topic reachable
 * from it was fully linked before, so the loop can walk it unlocked. */
static struct topic *topics_snapshot(void)
{
	pthread_mutex_lock(&g_bus_lock);
	struct topic *head = g_topics;
	pthread_mutex_unlock(&g_bus_lock);
	return head;
}

/* Topic names: 1-64 of [A-Za-z0-9._:-], so they are safe in metrics labels. */
static bool valid_topic(const char *name)
{
	if (!name)
		return false;
	size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-");
	return n > 0 && n <= 64 && name[n] == '\0';
}

/* Caller holds g_bus_lock. */
static struct topic *topic_get(const char *name, bool create)
{
	for (struct topic *t = g_topics; t; t = t->next)
		if (strcmp(t->name, name) == 0)
			return t;
	if (!create)
		return NULL;
	struct topic *t = xcalloc(1, sizeof(*t));
	t->name = xstrdup(name);
	t->next = g_topics;
	g_topics = t;
	return t;
}

struct fibril_subscription *fibril_bus_subscribe(struct fibril_module *m, const char *topic,
						 uint32_t min_type_version, fibril_event_fn cb,
						 void *ud)
{
	if (!valid_topic(topic) || !cb) {
		errno = EINVAL;
		return NULL;
	}
	struct fibril_subscription *s = xcalloc(1, sizeof(*s));
	s->owner = m;
	s->cb = cb;
	s->ud = ud;
	s->min_version = min_type_version;
	pthread_mutex_lock(&g_bus_lock);
	struct topic *t = topic_get(topic, true);
	if (t->nsubs == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 4;
		struct fibril_subscription **grown = realloc(t->subs, t->cap * sizeof(*grown));
		if (!grown)
			abort();
		t->subs = grown;
	}
	t->subs[t->nsubs++] = s;
	s->topic = t;
	s->h = handle_new(HANDLE_SUBSCRIPTION, s);
	pthread_mutex_unlock(&g_bus_lock);
	return s->h;
}

static void topic_compact(struct topic *t)
{
	size_t w = 0;
	for (size_t r = 0; r < t->nsubs; r++) {
		if (t->subs[r]->dead)
			free(t->subs[r]);
		else
			t->subs[w++] = t->subs[r];
	}
	t->nsubs = w;
	t->has_dead = false;
}

static void subscription_release(struct fibril_subscription *s)
{
	if (s->dead)
		return;
	handle_drop(s->h, HANDLE_SUBSCRIPTION);
	s->dead = true;
	s->topic->has_dead = true;
	if (!g_flushing)
		topic_compact(s->topic);
}

/* A handle already released (twice, or by the host) is ignored. */
void fibril_bus_unsubscribe(struct fibril_subscription *h)
{
	struct fibril_subscription *s = handle_get(h, HANDLE_SUBSCRIPTION);
	if (s)
		subscription_release(s);
}

static size_t record_size(size_t payload_len)
{
	size_t n = sizeof(struct queued_event) + payload_len;
	return (n + RECORD_ALIGN - 1) & ~(RECORD_ALIGN - 1);
}

/* Caller holds g_bus_lock. */
static bool on_loop_thread(void)
{
	/* Before bus_init (and after bus_fini) there is no loop to wait for. */
	return !g_have_loop_thread || pthread_equal(pthread_self(), g_loop_thread);
}

/* A block with room for size bytes of events. Caller holds g_bus_lock. */
static struct block *block_get(size_t size)
{
	struct block *b;
	if (size == BLOCK_SIZE && g_free_blocks) {
		b = g_free_blocks;
		g_free_blocks = b->next;
		g_nfree_blocks--;
	} else {
		b = malloc(sizeof(*b) + size);
		if (!b)
			return NULL;
		b->size = size;
	}
	b->next = NULL;
	b->used = 0;
	return b;
}

/* Caller holds g_bus_lock; frees outside the lock what it cannot keep. */
static struct block *block_put(struct block *b)
{
	if (b->size == BLOCK_SIZE && g_nfree_blocks < FREE_BLOCKS_KEPT) {
		b->next = g_free_blocks;
		g_free_blocks = b;
		g_nfree_blocks++;
		return NULL;
	}
	return b;
}

enum publish_mode { PUBLISH_WAIT, PUBLISH_TRY };

/* Wait for room as an off-loop publisher. Returns false once the loop has
 * released nothing for STALL_MS: the caller then goes past the bound.
 * Caller holds g_bus_lock. */
static bool wait_for_room(const char *publisher)
{
	uint64_t released = g_released;
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += STALL_MS / 1000;
	deadline.tv_nsec += (long)(STALL_MS % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	g_waiting++;
	int rc = pthread_cond_timedwait(&g_room, &g_bus_lock, &deadline);
	g_waiting--;
	if (rc == ETIMEDOUT && g_released == released) {
		static double last_warn_ms;
		double now = mono_ms();
		if (now - last_warn_ms > 10000) {
			last_warn_ms = now;
			host_warn("bus: the loop drained nothing for %d ms; %s publishes past the "
				  "queue bound of %zu bytes (is the loop waiting for this thread?)",
				  STALL_MS, publisher, g_limit);
		}
		return false;
	}
	return true;
}

static int publish(struct fibril_module *m, const char *topic, uint32_t type_version,
		   const void *payload, size_t payload_len, enum publish_mode mode)
{
	if (!valid_topic(topic) || (payload_len && !payload))
		return -EINVAL;
	if (payload_len > SIZE_MAX / 2)
		return -EMSGSIZE;
	const char *publisher = m ? m->name : "agent";
	size_t rec = record_size(payload_len);
	bool counted_wait = false;
	pthread_mutex_lock(&g_bus_lock);
	bool loop = on_loop_thread();
	struct block *tail = g_queue_tail;
	while (!tail || tail->size - tail->used < rec) {
		size_t size = rec <= BLOCK_SIZE ? BLOCK_SIZE : rec;
		/* An empty queue always takes one block, however large. */
		bool full = g_limit && g_held > 0 && g_held + size > g_limit;
		if (full && mode == PUBLISH_TRY) {
			g_refused++;
			pthread_mutex_unlock(&g_bus_lock);
			return -EAGAIN;
		}
		if (full && loop && !g_flushing) {
			/* Deliver what is queued now, then try again. */
			g_inline_flushes++;
			pthread_mutex_unlock(&g_bus_lock);
			bus_flush();
			pthread_mutex_lock(&g_bus_lock);
			tail = g_queue_tail;
			continue;
		}
		if (full && !loop) {
			if (!counted_wait) {
				g_waits++;
				counted_wait = true;
			}
			bool progress = wait_for_room(publisher);
			tail = g_queue_tail;
			if (progress || (tail && tail->size - tail->used >= rec))
				continue;
		}
		/* Room, or past the bound: published from a subscriber while the
		 * loop delivers, or the loop stalled. */
		if (g_limit && g_held > 0 && g_held + size > g_limit)
			g_over_limit++;
		tail = block_get(size);
		if (!tail) {
			pthread_mutex_unlock(&g_bus_lock);
			return -ENOMEM;
		}
		g_held += size;
		if (g_held > g_held_max)
			g_held_max = g_held;
		if (g_queue_tail)
			g_queue_tail->next = tail;
		else
			g_queue_head = tail;
		g_queue_tail = tail;
	}
	struct queued_event *ev = (struct queued_event *)(void *)(tail->data + tail->used);
	tail->used += rec;
	struct topic *t = topic_get(topic, true);
	ev->topic = t;
	ev->publisher = publisher;
	ev->type_version = type_version;
	ev->len = payload_len;
	ev->seq = ++t->seq;
	t->published++;
	if (payload_len)
		memcpy(ev->payload, payload, payload_len);
	/* The first event of a batch wakes the loop. */
	bool first = g_queue_head == tail && tail->used == rec;
	pthread_mutex_unlock(&g_bus_lock);
	if (first)
		loop_wake();
	return 0;
}

int fibril_bus_publish(struct fibril_module *m, const char *topic, uint32_t type_version,
		       const void *payload, size_t payload_len)
{
	return publish(m, topic, type_version, payload, payload_len, PUBLISH_WAIT);
}

int fibril_bus_try_publish(struct fibril_module *m, const char *topic, uint32_t type_version,
			   const void *payload, size_t payload_len)
{
	return publish(m, topic, type_version, payload, payload_len, PUBLISH_TRY);
}

static void deliver(struct queued_event *qe)
{
	struct topic *t = qe->topic;
	struct fibril_event ev = {
		.sz = sizeof(ev),
		.type_version = qe->type_version,
		.topic = t->name,
		.publisher = qe->publisher,
		.seq = qe->seq,
		.payload = qe->len ? qe->payload : NULL,
		.payload_len = qe->len,
	};
	/* Subscribers added during delivery see only later events. */
	size_t n = t->nsubs;
	for (size_t i = 0; i < n; i++) {
		struct fibril_subscription *s = t->subs[i];
		if (s->dead)
			continue;
		if (qe->type_version < s->min_version) {
			t->skipped++;
			continue;
		}
		struct crash_ctx cc;
		crash_enter(&cc, s->owner, "bus callback for topic", t->name, -1);
		int rc = s->cb(&ev, s->ud);
		crash_leave(&cc);
		t->delivered++;
		if (rc < 0) {
			t->failed++;
			if (s->failures++ % 1000 == 0)
				host_warn("bus: subscriber of '%s' in %s failed on event %llu: %s "
					  "(%llu failures so far)",
					  t->name, s->owner ? s->owner->name : "agent",
					  (unsigned long long)qe->seq, strerror(-rc),
					  (unsigned long long)s->failures);
		}
	}
}

/* Deliver the events of one block, then give its memory back and wake a
 * publisher waiting for room. */
static void deliver_block(struct block *b)
{
	for (size_t off = 0; off < b->used;) {
		struct queued_event *qe = (struct queued_event *)(void *)(b->data + off);
		deliver(qe);
		off += record_size(qe->len);
	}
	pthread_mutex_lock(&g_bus_lock);
	g_held -= b->size;
	g_released++;
	struct block *to_free = block_put(b);
	bool wake = g_waiting > 0;
	pthread_mutex_unlock(&g_bus_lock);
	if (wake)
		pthread_cond_broadcast(&g_room);
	free(to_free);
}

void bus_flush(void)
{
	if (g_flushing)
		return;
	g_flushing = true;
	for (;;) {
		pthread_mutex_lock(&g_bus_lock);
		struct block *batch = g_queue_head;
		g_queue_head = g_queue_tail = NULL;
		pthread_mutex_unlock(&g_bus_lock);
		if (!batch)
			break;
		while (batch) {
			struct block *next = batch->next;
			deliver_block(batch);
			batch = next;
		}
	}
	g_flushing = false;
	for (struct topic *t = topics_snapshot(); t; t = t->next)
		if (t->has_dead)
			topic_compact(t);
}

void bus_release_owner(struct fibril_module *owner)
{
	bus_flush();
	for (struct topic *t = topics_snapshot(); t; t = t->next) {
		/* backwards: unsubscribing outside a flush compacts the array */
		for (size_t i = t->nsubs; i-- > 0;)
			if (t->subs[i]->owner == owner)
				subscription_release(t->subs[i]);
	}
}

static void free_blocks(struct block *b)
{
	while (b) {
		struct block *next = b->next;
		free(b);
		b = next;
	}
}

void bus_fini(void)
{
	pthread_mutex_lock(&g_bus_lock);
	struct block *q = g_queue_head, *spare = g_free_blocks;
	g_queue_head = g_queue_tail = NULL;
	g_free_blocks = NULL;
	g_nfree_blocks = 0;
	g_held = g_held_max = 0;
	g_waits = g_inline_flushes = g_over_limit = g_refused = 0;
	g_limit = DEFAULT_LIMIT;
	g_have_loop_thread = false;
	struct topic *t = g_topics;
	g_topics = NULL;
	pthread_mutex_unlock(&g_bus_lock);
	free_blocks(q);
	free_blocks(spare);
	while (t) {
		struct topic *next = t->next;
		for (size_t i = 0; i < t->nsubs; i++) {
			handle_drop(t->subs[i]->h, HANDLE_SUBSCRIPTION);
			free(t->subs[i]);
		}
		free(t->subs);
		free(t->name);
		free(t);
		t = next;
	}
}

struct json_object *bus_to_json(void)
{
	struct json_object *arr = json_object_new_array();
	pthread_mutex_lock(&g_bus_lock);
	for (struct topic *t = g_topics; t; t = t->next) {
		size_t live = 0;
		for (size_t i = 0; i < t->nsubs; i++)
			live += !t->subs[i]->dead;
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "name", json_object_new_string(t->name));
		json_object_object_add(o, "subscribers", json_object_new_int64((int64_t)live));
		json_object_object_add(o, "published", json_object_new_int64((int64_t)t->published));
		json_object_object_add(o, "delivered", json_object_new_int64((int64_t)t->delivered));
		json_object_object_add(o, "failed", json_object_new_int64((int64_t)t->failed));
		json_object_object_add(o, "skipped", json_object_new_int64((int64_t)t->skipped));
		json_object_array_add(arr, o);
	}
	pthread_mutex_unlock(&g_bus_lock);
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	struct json_object *queue = json_object_new_object();
	json_object_object_add(queue, "limit_bytes", json_object_new_int64((int64_t)q.limit));
	json_object_object_add(queue, "held_bytes", json_object_new_int64((int64_t)q.held));
	json_object_object_add(queue, "held_max_bytes", json_object_new_int64((int64_t)q.held_max));
	json_object_object_add(queue, "waits", json_object_new_int64((int64_t)q.waits));
	json_object_object_add(queue, "inline_flushes", json_object_new_int64((int64_t)q.inline_flushes));
	json_object_object_add(queue, "over_limit", json_object_new_int64((int64_t)q.over_limit));
	json_object_object_add(queue, "refused", json_object_new_int64((int64_t)q.refused));
	struct json_object *root = json_object_new_object();
	json_object_object_add(root, "topics", arr);
	json_object_object_add(root, "queue", queue);
	return root;
}

void bus_metrics(FILE *out)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} counters[] = {
		{"fibril_bus_events_published_total", "Events published per topic.",
		 offsetof(struct topic, published)},
		{"fibril_bus_events_delivered_total", "Subscriber calls per topic.",
		 offsetof(struct topic, delivered)},
		{"fibril_bus_events_failed_total", "Subscriber calls that returned an error.",
		 offsetof(struct topic, failed)},
		{"fibril_bus_events_skipped_total", "Events older than a subscriber's version.",
		 offsetof(struct topic, skipped)},
	};
	pthread_mutex_lock(&g_bus_lock);
	for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
		fprintf(out, "# HELP %s %s\n# TYPE %s counter\n", counters[c].name, counters[c].help,
			counters[c].name);
		for (struct topic *t = g_topics; t; t = t->next) {
			uint64_t v = *(const uint64_t *)((const char *)t + counters[c].off);
			fprintf(out, "%s{topic=\"%s\"} %llu\n", counters[c].name, t->name,
				(unsigned long long)v);
		}
	}
	pthread_mutex_unlock(&g_bus_lock);
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	const struct {
		const char *name, *type, *help;
		uint64_t value;
	} queue[] = {
		{"fibril_bus_queue_limit_bytes", "gauge", "Bound of the bus queue (0: unbounded).", q.limit},
		{"fibril_bus_queue_bytes", "gauge", "Bytes the bus queue holds now.", q.held},
		{"fibril_bus_queue_max_bytes", "gauge", "Most bytes the bus queue ever held.", q.held_max},
		{"fibril_bus_publish_waits_total", "counter",
		 "Publishes off the loop that waited for room.", q.waits},
		{"fibril_bus_publish_inline_flushes_total", "counter",
		 "Publishes on the loop that delivered the full queue first.", q.inline_flushes},
		{"fibril_bus_publish_over_limit_total", "counter",
		 "Blocks queued past the bound (from a subscriber, or a stalled loop).", q.over_limit},
		{"fibril_bus_publish_refused_total", "counter",
		 "fibril_bus_try_publish calls refused with EAGAIN.", q.refused},
	};
	for (size_t i = 0; i < sizeof(queue) / sizeof(queue[0]); i++)
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", queue[i].name, queue[i].help,
			queue[i].name, queue[i].type, queue[i].name, (unsigned long long)queue[i].value);
}
