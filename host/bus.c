/* host/bus.c - the event bus: named topics, versioned payloads, delivery in
 * publish order on the loop thread, per-topic counters. Publishing copies
 * the payload into a queue (any thread may publish); the loop drains the
 * queue and calls every subscriber of the event's topic. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

struct topic {
	char *name;
	struct fibril_subscription **subs;
	size_t nsubs, cap;
	uint64_t seq;
	uint64_t published, delivered, failed, skipped;
	bool has_dead;
	struct topic *next;
};

struct queued_event {
	struct queued_event *next;
	struct topic *topic;
	const char *publisher;
	uint32_t type_version;
	uint64_t seq;
	size_t len;
	unsigned char payload[];
};

static pthread_mutex_t g_bus_lock = PTHREAD_MUTEX_INITIALIZER;
static struct topic *g_topics;
static struct queued_event *g_queue_head, *g_queue_tail;
static bool g_flushing;

int bus_init(void)
{
	return 0;
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

int fibril_bus_publish(struct fibril_module *m, const char *topic, uint32_t type_version,
		       const void *payload, size_t payload_len)
{
	if (!valid_topic(topic) || (payload_len && !payload))
		return -EINVAL;
	struct queued_event *ev = malloc(sizeof(*ev) + payload_len);
	if (!ev)
		return -ENOMEM;
	ev->next = NULL;
	ev->publisher = m ? m->name : "agent";
	ev->type_version = type_version;
	ev->len = payload_len;
	if (payload_len)
		memcpy(ev->payload, payload, payload_len);
	pthread_mutex_lock(&g_bus_lock);
	struct topic *t = topic_get(topic, true);
	ev->topic = t;
	ev->seq = ++t->seq;
	t->published++;
	bool was_empty = g_queue_head == NULL;
	if (g_queue_tail)
		g_queue_tail->next = ev;
	else
		g_queue_head = ev;
	g_queue_tail = ev;
	pthread_mutex_unlock(&g_bus_lock);
	if (was_empty)
		loop_wake();
	return 0;
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

void bus_flush(void)
{
	if (g_flushing)
		return;
	g_flushing = true;
	for (;;) {
		pthread_mutex_lock(&g_bus_lock);
		struct queued_event *batch = g_queue_head;
		g_queue_head = g_queue_tail = NULL;
		pthread_mutex_unlock(&g_bus_lock);
		if (!batch)
			break;
		while (batch) {
			struct queued_event *next = batch->next;
			deliver(batch);
			free(batch);
			batch = next;
		}
	}
	g_flushing = false;
	for (struct topic *t = g_topics; t; t = t->next)
		if (t->has_dead)
			topic_compact(t);
}

void bus_release_owner(struct fibril_module *owner)
{
	bus_flush();
	for (struct topic *t = g_topics; t; t = t->next) {
		/* backwards: unsubscribing outside a flush compacts the array */
		for (size_t i = t->nsubs; i-- > 0;)
			if (t->subs[i]->owner == owner)
				subscription_release(t->subs[i]);
	}
}

void bus_fini(void)
{
	pthread_mutex_lock(&g_bus_lock);
	struct queued_event *q = g_queue_head;
	g_queue_head = g_queue_tail = NULL;
	struct topic *t = g_topics;
	g_topics = NULL;
	pthread_mutex_unlock(&g_bus_lock);
	while (q) {
		struct queued_event *next = q->next;
		free(q);
		q = next;
	}
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
	struct json_object *root = json_object_new_object();
	json_object_object_add(root, "topics", arr);
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
}
