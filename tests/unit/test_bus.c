/* tests/unit/test_bus.c - unit tests of the event bus (host/bus.c) and of
 * the event loop as modules see it (host/loop.c): delivery order, payload
 * copies, failures, counters, versions, (un)subscribing and publishing from
 * callbacks and threads, release by owner; timers, fd watches, deferred
 * calls, worker jobs and loop_release_owner. Each test starts from a fresh
 * loop and an empty bus. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cunit_main.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* ---- per-test setup --------------------------------------------------------- */

#define MAX_RECORDS 4096

/* One delivered event as a subscriber saw it. */
struct record {
	int sub;
	char topic[72];
	char publisher[32];
	uint64_t seq;
	uint32_t type_version;
	char payload[64];
	size_t payload_len;
	bool payload_null;
	pthread_t thread;
};

static struct record records[MAX_RECORDS];
static size_t nrecords;
static pthread_t main_thread;

static void begin(void)
{
	/* Also cleans up after a previous test that stopped on a fatal assert. */
	bus_fini();
	loop_fini();
	CU_ASSERT_EQUAL_FATAL(loop_init(), 0);
	CU_ASSERT_EQUAL_FATAL(bus_init(), 0);
	memset(records, 0, sizeof(records));
	nrecords = 0;
	main_thread = pthread_self();
}

static void finish(void)
{
	bus_fini();
	loop_fini();
}

static struct fibril_module *fake_module(const char *name)
{
	struct fibril_module *m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(name);
	m->order = -1;
	return m;
}

static void free_fake_module(struct fibril_module *m)
{
	free(m->name);
	free(m);
}

/* What a subscriber does when called. */
struct sub_ctx {
	int id;
	int rc;                             /* returned from the callback */
	struct fibril_subscription *self;   /* its own subscription */
	struct fibril_subscription *victim; /* unsubscribed on the first call */
	bool unsubscribe_self;              /* on the first call */
	unsigned calls;
	/* publish on the first call */
	const char *publish_topic;
	const char *publish_payload;
	/* subscribe on the first call */
	const char *subscribe_topic;
	struct sub_ctx *subscribe_ctx;
	/* bus_flush() on the first call; records seen right after it */
	bool nested_flush;
	size_t records_after_nested_flush;
};

static int record_cb(const struct fibril_event *ev, void *ud);

static int record_cb(const struct fibril_event *ev, void *ud)
{
	struct sub_ctx *c = ud;
	CU_ASSERT_FATAL(nrecords < MAX_RECORDS);
	struct record *r = &records[nrecords++];
	r->sub = c->id;
	snprintf(r->topic, sizeof(r->topic), "%s", ev->topic ? ev->topic : "(null)");
	snprintf(r->publisher, sizeof(r->publisher), "%s", ev->publisher ? ev->publisher : "(null)");
	r->seq = ev->seq;
	r->type_version = ev->type_version;
	r->payload_len = ev->payload_len;
	r->payload_null = ev->payload == NULL;
	if (ev->payload)
		memcpy(r->payload, ev->payload,
		       ev->payload_len < sizeof(r->payload) ? ev->payload_len : sizeof(r->payload));
	r->thread = pthread_self();
	CU_ASSERT_EQUAL(ev->sz, sizeof(struct fibril_event));

	bool first = c->calls++ == 0;
	if (first && c->victim)
		fibril_bus_unsubscribe(c->victim);
	if (first && c->unsubscribe_self)
		fibril_bus_unsubscribe(c->self);
	if (first && c->publish_topic)
		CU_ASSERT_EQUAL(fibril_bus_publish(NULL, c->publish_topic, 1, c->publish_payload,
						   strlen(c->publish_payload) + 1),
				0);
	if (first && c->subscribe_topic) {
		c->subscribe_ctx->self = fibril_bus_subscribe(NULL, c->subscribe_topic, 0, record_cb,
							      c->subscribe_ctx);
		CU_ASSERT_PTR_NOT_NULL(c->subscribe_ctx->self);
	}
	if (first && c->nested_flush) {
		size_t before = nrecords;
		bus_flush();
		c->records_after_nested_flush = nrecords - before;
	}
	return c->rc;
}

static struct fibril_subscription *sub(struct fibril_module *m, const char *topic, uint32_t minv,
				       struct sub_ctx *c)
{
	c->self = fibril_bus_subscribe(m, topic, minv, record_cb, c);
	CU_ASSERT_PTR_NOT_NULL(c->self);
	return c->self;
}

static void pub(struct fibril_module *m, const char *topic, uint32_t version, const char *payload)
{
	CU_ASSERT_EQUAL(fibril_bus_publish(m, topic, version, payload, strlen(payload) + 1), 0);
}

/* Checks records[i] is (sub, topic, payload). */
static void expect(size_t i, int subid, const char *topic, const char *payload)
{
	CU_ASSERT_FATAL(i < nrecords);
	const struct record *r = &records[i];
	if (r->sub != subid || strcmp(r->topic, topic) != 0 || strcmp(r->payload, payload) != 0)
		fprintf(stderr, "\n  record %zu: expected sub %d %s '%s', got sub %d %s '%s'\n", i,
			subid, topic, payload, r->sub, r->topic, r->payload);
	CU_ASSERT_EQUAL(r->sub, subid);
	CU_ASSERT_STRING_EQUAL(r->topic, topic);
	CU_ASSERT_STRING_EQUAL(r->payload, payload);
}

/* A counter of bus_to_json() for a topic; -1 when the topic is absent. */
static int64_t counter(const char *topic, const char *field)
{
	struct json_object *root = bus_to_json();
	struct json_object *topics = NULL;
	int64_t v = -1;
	if (json_object_object_get_ex(root, "topics", &topics)) {
		for (size_t i = 0; i < json_object_array_length(topics); i++) {
			struct json_object *t = json_object_array_get_idx(topics, i), *name, *val;
			if (json_object_object_get_ex(t, "name", &name) &&
			    strcmp(json_object_get_string(name), topic) == 0 &&
			    json_object_object_get_ex(t, field, &val))
				v = json_object_get_int64(val);
		}
	}
	json_object_put(root);
	return v;
}

static size_t topic_count(void)
{
	struct json_object *root = bus_to_json();
	struct json_object *topics = NULL;
	size_t n = json_object_object_get_ex(root, "topics", &topics)
			   ? json_object_array_length(topics)
			   : (size_t)-1;
	json_object_put(root);
	return n;
}

/* ---- bus: delivery ------------------------------------------------------------ */

static void t_bus_order_several_subscribers(void)
{
	begin();
	struct sub_ctx a = {.id = 1}, b = {.id = 2}, c = {.id = 3};
	sub(NULL, "test.order", 0, &a);
	sub(NULL, "test.order", 0, &b);
	sub(NULL, "test.order", 0, &c);
	static const char *const payloads[] = {"e0", "e1", "e2", "e3", "e4"};
	for (size_t i = 0; i < 5; i++)
		pub(NULL, "test.order", 1, payloads[i]);
	/* Nothing is delivered at publish time. */
	CU_ASSERT_EQUAL(nrecords, 0);
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 15);
	for (size_t i = 0; i < 5; i++) {
		for (int s = 0; s < 3; s++) {
			expect(i * 3 + (size_t)s, s + 1, "test.order", payloads[i]);
			CU_ASSERT_EQUAL(records[i * 3 + (size_t)s].seq, i + 1);
			CU_ASSERT(pthread_equal(records[i * 3 + (size_t)s].thread, main_thread));
		}
	}
	/* A second flush delivers nothing again. */
	bus_flush();
	CU_ASSERT_EQUAL(nrecords, 15);
	finish();
}

static void t_bus_payload_copied(void)
{
	begin();
	struct sub_ctx a = {.id = 1};
	sub(NULL, "copy", 0, &a);
	char buf[16] = "original";
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "copy", 1, buf, strlen(buf) + 1), 0);
	strcpy(buf, "mutated!");
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "copy", 1, buf, strlen(buf) + 1), 0);
	memset(buf, 'Z', sizeof(buf) - 1);
	/* Empty payload: NULL and length 0. */
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "copy", 1, NULL, 0), 0);
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "copy", 1, "ignored", 0), 0);
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 4);
	expect(0, 1, "copy", "original");
	CU_ASSERT_EQUAL(records[0].payload_len, 9);
	expect(1, 1, "copy", "mutated!");
	CU_ASSERT_EQUAL(records[1].payload_len, 9);
	CU_ASSERT_EQUAL(records[2].payload_len, 0);
	CU_ASSERT(records[2].payload_null);
	CU_ASSERT_EQUAL(records[3].payload_len, 0);
	CU_ASSERT(records[3].payload_null);
	finish();
}

static void t_bus_failing_subscriber(void)
{
	begin();
	struct sub_ctx a = {.id = 1}, b = {.id = 2, .rc = -EIO}, c = {.id = 3};
	sub(NULL, "fail", 0, &a);
	sub(NULL, "fail", 0, &b);
	sub(NULL, "fail", 0, &c);
	pub(NULL, "fail", 1, "x");
	pub(NULL, "fail", 1, "y");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 6);
	expect(0, 1, "fail", "x");
	expect(1, 2, "fail", "x");
	expect(2, 3, "fail", "x");
	expect(3, 1, "fail", "y");
	expect(4, 2, "fail", "y");
	expect(5, 3, "fail", "y");
	CU_ASSERT_EQUAL(counter("fail", "published"), 2);
	CU_ASSERT_EQUAL(counter("fail", "delivered"), 6);
	CU_ASSERT_EQUAL(counter("fail", "failed"), 2);
	CU_ASSERT_EQUAL(counter("fail", "skipped"), 0);
	CU_ASSERT_EQUAL(counter("fail", "subscribers"), 3);
	finish();
}

static void t_bus_counters(void)
{
	begin();
	struct sub_ctx a = {.id = 1}, b = {.id = 2};
	sub(NULL, "count.me", 0, &a);
	sub(NULL, "count.me", 0, &b);
	CU_ASSERT_EQUAL(counter("count.me", "subscribers"), 2);
	CU_ASSERT_EQUAL(counter("count.me", "published"), 0);
	pub(NULL, "count.me", 1, "1");
	pub(NULL, "count.me", 1, "2");
	pub(NULL, "count.me", 1, "3");
	/* published counts at publish time, delivered at delivery */
	CU_ASSERT_EQUAL(counter("count.me", "published"), 3);
	CU_ASSERT_EQUAL(counter("count.me", "delivered"), 0);
	bus_flush();
	CU_ASSERT_EQUAL(counter("count.me", "published"), 3);
	CU_ASSERT_EQUAL(counter("count.me", "delivered"), 6);
	CU_ASSERT_EQUAL(counter("count.me", "failed"), 0);
	CU_ASSERT_EQUAL(counter("count.me", "skipped"), 0);
	fibril_bus_unsubscribe(a.self);
	CU_ASSERT_EQUAL(counter("count.me", "subscribers"), 1);
	pub(NULL, "count.me", 1, "4");
	bus_flush();
	CU_ASSERT_EQUAL(counter("count.me", "delivered"), 7);
	CU_ASSERT_EQUAL(nrecords, 7);
	/* A topic nobody listens to still counts what was published. */
	pub(NULL, "nobody.listens", 1, "x");
	bus_flush();
	CU_ASSERT_EQUAL(counter("nobody.listens", "published"), 1);
	CU_ASSERT_EQUAL(counter("nobody.listens", "delivered"), 0);
	CU_ASSERT_EQUAL(counter("nobody.listens", "subscribers"), 0);
	CU_ASSERT_EQUAL(topic_count(), 2);

	/* The Prometheus text carries the same numbers. */
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(out);
	bus_metrics(out);
	fclose(out);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_bus_events_published_total{topic=\"count.me\"} 4\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "fibril_bus_events_delivered_total{topic=\"count.me\"} 7\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE fibril_bus_events_failed_total counter\n"));
	free(text);
	finish();
}

static void t_bus_min_version(void)
{
	begin();
	struct sub_ctx v1 = {.id = 1}, v2 = {.id = 2};
	sub(NULL, "ver", 1, &v1);
	sub(NULL, "ver", 2, &v2);
	pub(NULL, "ver", 1, "old");
	pub(NULL, "ver", 2, "same");
	pub(NULL, "ver", 3, "newer");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 5);
	expect(0, 1, "ver", "old");
	CU_ASSERT_EQUAL(records[0].type_version, 1);
	expect(1, 1, "ver", "same");
	expect(2, 2, "ver", "same");
	CU_ASSERT_EQUAL(records[2].type_version, 2);
	expect(3, 1, "ver", "newer");
	expect(4, 2, "ver", "newer");
	CU_ASSERT_EQUAL(records[4].type_version, 3);
	CU_ASSERT_EQUAL(counter("ver", "skipped"), 1);
	CU_ASSERT_EQUAL(counter("ver", "delivered"), 5);
	CU_ASSERT_EQUAL(counter("ver", "published"), 3);
	finish();
}

static void t_bus_seq_per_topic(void)
{
	begin();
	struct sub_ctx a = {.id = 1}, b = {.id = 2};
	sub(NULL, "seq.a", 0, &a);
	sub(NULL, "seq.b", 0, &b);
	pub(NULL, "seq.a", 1, "a1");
	pub(NULL, "seq.a", 1, "a2");
	pub(NULL, "seq.b", 1, "b1");
	pub(NULL, "seq.a", 1, "a3");
	pub(NULL, "seq.b", 1, "b2");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 5);
	/* Delivered across topics in publish order, numbered per topic. */
	static const struct {
		int sub;
		const char *topic, *payload;
		uint64_t seq;
	} want[] = {
		{1, "seq.a", "a1", 1}, {1, "seq.a", "a2", 2}, {2, "seq.b", "b1", 1},
		{1, "seq.a", "a3", 3}, {2, "seq.b", "b2", 2},
	};
	for (size_t i = 0; i < 5; i++) {
		expect(i, want[i].sub, want[i].topic, want[i].payload);
		CU_ASSERT_EQUAL(records[i].seq, want[i].seq);
	}
	/* Sequence numbers keep counting after a flush. */
	pub(NULL, "seq.a", 1, "a4");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 6);
	CU_ASSERT_EQUAL(records[5].seq, 4);
	finish();
}

static void t_bus_publisher_name(void)
{
	begin();
	struct fibril_module *m = fake_module("ipam-host");
	struct sub_ctx a = {.id = 1};
	sub(NULL, "who", 0, &a);
	pub(NULL, "who", 1, "from agent");
	pub(m, "who", 1, "from module");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 2);
	CU_ASSERT_STRING_EQUAL(records[0].publisher, "agent");
	CU_ASSERT_STRING_EQUAL(records[1].publisher, "ipam-host");
	CU_ASSERT_STRING_EQUAL(records[1].topic, "who");
	finish();
	free_fake_module(m);
}

static void t_bus_invalid_topics(void)
{
	begin();
	char long65[66], long64[65];
	memset(long65, 'a', 65);
	long65[65] = '\0';
	memset(long64, 'b', 64);
	long64[64] = '\0';
	const char *const bad[] = {"", "has space", long65, "slash/topic", "tab\there", "caf\xc3\xa9",
				   "new\nline", "quote\"", "brace{"};
	struct sub_ctx a = {.id = 1};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		CU_ASSERT_PTR_NULL(fibril_bus_subscribe(NULL, bad[i], 0, record_cb, &a));
		CU_ASSERT_EQUAL(errno, EINVAL);
		CU_ASSERT_EQUAL(fibril_bus_publish(NULL, bad[i], 1, "x", 1), -EINVAL);
	}
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_bus_subscribe(NULL, NULL, 0, record_cb, &a));
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, NULL, 1, "x", 1), -EINVAL);
	/* No callback; a length without a payload. */
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_bus_subscribe(NULL, "fine", 0, NULL, NULL));
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "fine", 1, NULL, 4), -EINVAL);
	/* Nothing of that created a topic. */
	CU_ASSERT_EQUAL(topic_count(), 0);

	/* 64 characters and every allowed character class are fine. */
	sub(NULL, long64, 0, &a);
	pub(NULL, long64, 1, "ok");
	struct sub_ctx b = {.id = 2};
	sub(NULL, "Aa0._:-z", 0, &b);
	pub(NULL, "Aa0._:-z", 1, "ok2");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 2);
	expect(0, 1, long64, "ok");
	expect(1, 2, "Aa0._:-z", "ok2");
	finish();
}

/* ---- bus: changes from inside callbacks ------------------------------------------ */

static void t_bus_unsubscribe_self_in_callback(void)
{
	begin();
	struct sub_ctx a = {.id = 1}, b = {.id = 2, .unsubscribe_self = true}, c = {.id = 3};
	sub(NULL, "self", 0, &a);
	sub(NULL, "self", 0, &b);
	sub(NULL, "self", 0, &c);
	pub(NULL, "self", 1, "e1");
	pub(NULL, "self", 1, "e2");
	pub(NULL, "self", 1, "e3");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 7);
	expect(0, 1, "self", "e1");
	expect(1, 2, "self", "e1");
	expect(2, 3, "self", "e1");
	expect(3, 1, "self", "e2");
	expect(4, 3, "self", "e2");
	expect(5, 1, "self", "e3");
	expect(6, 3, "self", "e3");
	CU_ASSERT_EQUAL(b.calls, 1);
	CU_ASSERT_EQUAL(counter("self", "subscribers"), 2);
	/* Later events too. */
	pub(NULL, "self", 1, "e4");
	bus_flush();
	CU_ASSERT_EQUAL(nrecords, 9);
	CU_ASSERT_EQUAL(b.calls, 1);
	finish();
}

static void t_bus_unsubscribe_other_in_callback(void)
{
	begin();
	/* A removes C (after it) on its first call; B removes A (before it). */
	struct sub_ctx a = {.id = 1}, b = {.id = 2}, c = {.id = 3};
	sub(NULL, "other", 0, &a);
	sub(NULL, "other", 0, &b);
	sub(NULL, "other", 0, &c);
	a.victim = c.self;
	b.victim = a.self;
	pub(NULL, "other", 1, "e1");
	pub(NULL, "other", 1, "e2");
	bus_flush();
	/* e1: A, B (C was removed before its turn); e2: B only. */
	CU_ASSERT_EQUAL_FATAL(nrecords, 3);
	expect(0, 1, "other", "e1");
	expect(1, 2, "other", "e1");
	expect(2, 2, "other", "e2");
	CU_ASSERT_EQUAL(c.calls, 0);
	CU_ASSERT_EQUAL(counter("other", "subscribers"), 1);
	/* Unsubscribing an already removed subscription is harmless. */
	pub(NULL, "other", 1, "e3");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 4);
	expect(3, 2, "other", "e3");
	finish();
}

static void t_bus_subscribe_in_callback(void)
{
	begin();
	/* A subscribes D on its first call: D does not get the current event,
	 * only the later ones. Several new subscriptions grow the array while
	 * it is being walked. */
	struct sub_ctx d = {.id = 4};
	struct sub_ctx a = {.id = 1, .subscribe_topic = "grow", .subscribe_ctx = &d};
	struct sub_ctx b = {.id = 2}, c = {.id = 3};
	sub(NULL, "grow", 0, &a);
	sub(NULL, "grow", 0, &b);
	sub(NULL, "grow", 0, &c);
	struct sub_ctx e = {.id = 5};
	sub(NULL, "grow", 0, &e); /* 4 subscribers: the array is full */
	pub(NULL, "grow", 1, "e1");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 4);
	for (size_t i = 0; i < 4; i++)
		CU_ASSERT_NOT_EQUAL(records[i].sub, 4);
	pub(NULL, "grow", 1, "e2");
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 9);
	expect(8, 4, "grow", "e2");
	finish();
}

static void t_bus_publish_in_callback(void)
{
	begin();
	/* A publishes "inner" on the same topic and "side" on another when it
	 * sees x1: both are delivered after everything queued before them. */
	struct sub_ctx a = {.id = 1, .publish_topic = "chain", .publish_payload = "inner"};
	struct sub_ctx b = {.id = 2};
	struct sub_ctx s = {.id = 3};
	sub(NULL, "chain", 0, &a);
	sub(NULL, "chain", 0, &b);
	sub(NULL, "chain.side", 0, &s);
	pub(NULL, "chain", 1, "x1");
	pub(NULL, "chain", 1, "x2");
	bus_flush(); /* one flush delivers what the callbacks publish too */
	CU_ASSERT_EQUAL_FATAL(nrecords, 6);
	expect(0, 1, "chain", "x1");
	expect(1, 2, "chain", "x1");
	expect(2, 1, "chain", "x2");
	expect(3, 2, "chain", "x2");
	expect(4, 1, "chain", "inner");
	expect(5, 2, "chain", "inner");
	CU_ASSERT_EQUAL(records[4].seq, 3);
	finish();
}

static void t_bus_nested_flush_is_noop(void)
{
	begin();
	/* bus_flush() from inside a callback must not deliver re-entrantly. */
	struct sub_ctx a = {.id = 1, .publish_topic = "nest", .publish_payload = "inner",
			    .nested_flush = true};
	sub(NULL, "nest", 0, &a);
	pub(NULL, "nest", 1, "outer");
	pub(NULL, "nest", 1, "outer2");
	bus_flush();
	CU_ASSERT_EQUAL(a.records_after_nested_flush, 0);
	CU_ASSERT_EQUAL_FATAL(nrecords, 3);
	expect(0, 1, "nest", "outer");
	expect(1, 1, "nest", "outer2");
	expect(2, 1, "nest", "inner");
	finish();
}

/* ---- bus: threads ----------------------------------------------------------------- */

#define THREAD_EVENTS 500

struct publisher_arg {
	const char *topic;
	int id;
	int failures;
};

static void *publisher_thread(void *p)
{
	struct publisher_arg *arg = p;
	for (int i = 0; i < THREAD_EVENTS; i++) {
		char payload[32];
		snprintf(payload, sizeof(payload), "%d:%d", arg->id, i);
		if (fibril_bus_publish(NULL, arg->topic, 1, payload, strlen(payload) + 1))
			arg->failures++;
	}
	return NULL;
}

/* Per publisher, payloads "id:i" arrive with i = 0, 1, 2...; seq 1..n overall. */
static void check_thread_records(size_t nthreads)
{
	int next[4] = {0, 0, 0, 0};
	for (size_t i = 0; i < nrecords; i++) {
		int id = -1, idx = -1;
		CU_ASSERT_EQUAL(sscanf(records[i].payload, "%d:%d", &id, &idx), 2);
		CU_ASSERT_FATAL(id >= 0 && (size_t)id < nthreads);
		CU_ASSERT_EQUAL(idx, next[id]);
		next[id] = idx + 1;
		CU_ASSERT_EQUAL(records[i].seq, i + 1);
		CU_ASSERT(pthread_equal(records[i].thread, main_thread));
	}
	for (size_t t = 0; t < nthreads; t++)
		CU_ASSERT_EQUAL(next[t], THREAD_EVENTS);
}

static void t_bus_publish_from_threads(void)
{
	begin();
	struct sub_ctx a = {.id = 1};
	sub(NULL, "threads", 0, &a);
	struct publisher_arg args[2] = {{"threads", 0, 0}, {"threads", 1, 0}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, publisher_thread, &args[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CU_ASSERT_EQUAL(args[0].failures + args[1].failures, 0);
	CU_ASSERT_EQUAL(nrecords, 0);
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, 2 * THREAD_EVENTS);
	check_thread_records(2);
	CU_ASSERT_EQUAL(counter("threads", "published"), 2 * THREAD_EVENTS);
	CU_ASSERT_EQUAL(counter("threads", "delivered"), 2 * THREAD_EVENTS);
	finish();
}

static void t_bus_flush_while_publishing(void)
{
	begin();
	/* The main thread flushes while a thread is still publishing. */
	struct sub_ctx a = {.id = 1};
	sub(NULL, "live", 0, &a);
	struct publisher_arg arg = {"live", 0, 0};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, publisher_thread, &arg), 0);
	double deadline = mono_ms() + 5000;
	while (nrecords < THREAD_EVENTS && mono_ms() < deadline)
		bus_flush();
	pthread_join(th, NULL);
	bus_flush();
	CU_ASSERT_EQUAL_FATAL(nrecords, THREAD_EVENTS);
	check_thread_records(1);
	finish();
}

/* ---- bus: release by owner ------------------------------------------------------------ */

static void t_bus_release_owner(void)
{
	begin();
	struct fibril_module *ma = fake_module("mod-a"), *mb = fake_module("mod-b");
	/* mod-a has two subscriptions next to each other on one topic, one on
	 * another topic, and one more after mod-b's. */
	struct sub_ctx a1 = {.id = 1}, a2 = {.id = 2}, a3 = {.id = 3}, a4 = {.id = 4};
	struct sub_ctx b1 = {.id = 5}, g1 = {.id = 6};
	sub(ma, "rel.one", 0, &a1);
	sub(ma, "rel.one", 0, &a2);
	sub(mb, "rel.one", 0, &b1);
	sub(ma, "rel.one", 0, &a4);
	sub(NULL, "rel.one", 0, &g1);
	sub(ma, "rel.two", 0, &a3);
	/* Queued before the release: still delivered to mod-a (release flushes). */
	pub(NULL, "rel.one", 1, "before");
	bus_release_owner(ma);
	CU_ASSERT_EQUAL_FATAL(nrecords, 5);
	expect(0, 1, "rel.one", "before");
	expect(1, 2, "rel.one", "before");
	expect(2, 5, "rel.one", "before");
	expect(3, 4, "rel.one", "before");
	expect(4, 6, "rel.one", "before");
	CU_ASSERT_EQUAL(counter("rel.one", "subscribers"), 2);
	CU_ASSERT_EQUAL(counter("rel.two", "subscribers"), 0);

	pub(NULL, "rel.one", 1, "after");
	pub(NULL, "rel.two", 1, "after");
	bus_flush();
	CU_ASSERT_EQUAL(a1.calls, 1);
	CU_ASSERT_EQUAL(a2.calls, 1);
	CU_ASSERT_EQUAL(a3.calls, 0);
	CU_ASSERT_EQUAL(a4.calls, 1);
	CU_ASSERT_EQUAL(b1.calls, 2);
	CU_ASSERT_EQUAL(g1.calls, 2);
	CU_ASSERT_EQUAL(nrecords, 7);

	/* Releasing mod-b leaves the agent's own subscription. */
	bus_release_owner(mb);
	pub(NULL, "rel.one", 1, "last");
	bus_flush();
	CU_ASSERT_EQUAL(b1.calls, 2);
	CU_ASSERT_EQUAL(g1.calls, 3);
	finish();
	free_fake_module(ma);
	free_fake_module(mb);
}

/* ---- bus: threads creating topics while the loop walks them ------------------------------ */

#define RACE_THREADS 4
#define RACE_TOPICS 200 /* new topics per thread */

struct race_arg {
	int id;
	int failures;
	atomic_bool done;
};

/* Each event on "race.all" is "id:i"; a new topic "race.<id>.<i>" comes
 * first, so the topic list grows under the loop's feet all the time. */
static void *race_publisher(void *p)
{
	struct race_arg *arg = p;
	for (int i = 0; i < RACE_TOPICS; i++) {
		char topic[32], payload[32];
		snprintf(topic, sizeof(topic), "race.%d.%d", arg->id, i);
		snprintf(payload, sizeof(payload), "%d:%d", arg->id, i);
		if (fibril_bus_publish(NULL, topic, 1, payload, strlen(payload) + 1) ||
		    fibril_bus_publish(NULL, "race.all", 1, payload, strlen(payload) + 1))
			arg->failures++;
	}
	atomic_store(&arg->done, true);
	return NULL;
}

struct race_sub {
	int next[RACE_THREADS];
	unsigned events, out_of_order;
};

static int race_cb(const struct fibril_event *ev, void *ud)
{
	struct race_sub *rs = ud;
	int id = -1, idx = -1;
	if (sscanf(ev->payload, "%d:%d", &id, &idx) != 2 || id < 0 || id >= RACE_THREADS) {
		rs->out_of_order++;
		return 0;
	}
	if (idx != rs->next[id])
		rs->out_of_order++;
	rs->next[id] = idx + 1;
	rs->events++;
	return 0;
}

static int race_ignore(const struct fibril_event *ev, void *ud)
{
	(*(unsigned *)ud)++;
	return 0;
}

static void t_bus_threads_create_topics_while_loop_walks(void)
{
	begin();
	struct race_sub all;
	memset(&all, 0, sizeof(all));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_bus_subscribe(NULL, "race.all", 0, race_cb, &all));
	struct race_arg args[RACE_THREADS];
	pthread_t th[RACE_THREADS];
	for (int i = 0; i < RACE_THREADS; i++) {
		args[i].id = i;
		args[i].failures = 0;
		atomic_init(&args[i].done, false);
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, race_publisher, &args[i]), 0);
	}
	/* The loop: flush, and subscribe and release short-lived owners (each
	 * release walks every topic), until every publisher is done. */
	unsigned rounds = 0, transient_calls = 0;
	double deadline = mono_ms() + 20000;
	for (;;) {
		bool done = true;
		for (int i = 0; i < RACE_THREADS; i++)
			done = done && atomic_load(&args[i].done);
		struct fibril_module *m = fake_module("transient");
		CU_ASSERT_PTR_NOT_NULL(fibril_bus_subscribe(m, "race.all", 0, race_ignore, &transient_calls));
		bus_flush();
		bus_release_owner(m);
		free_fake_module(m);
		rounds++;
		if (done || mono_ms() > deadline)
			break;
	}
	for (int i = 0; i < RACE_THREADS; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(args[i].failures, 0);
	}
	bus_flush();
	CU_ASSERT(rounds > 0);
	CU_ASSERT_EQUAL(all.out_of_order, 0);
	CU_ASSERT_EQUAL(all.events, RACE_THREADS * RACE_TOPICS);
	for (int i = 0; i < RACE_THREADS; i++)
		CU_ASSERT_EQUAL(all.next[i], RACE_TOPICS);
	CU_ASSERT_EQUAL(topic_count(), RACE_THREADS * RACE_TOPICS + 1);
	CU_ASSERT_EQUAL(counter("race.all", "subscribers"), 1);
	CU_ASSERT_EQUAL(counter("race.all", "published"), RACE_THREADS * RACE_TOPICS);
	finish();
}

/* ---- bus: bounded queue under bursts ------------------------------------------------------ */

#define BURST_LIMIT ((size_t)256 * 1024) /* four 64 KiB blocks */
#define BURST_EVENTS 20000               /* x ~300 bytes: ~6 MB, 24x the bound */
#define BURST_PAYLOAD 300
#define BURST_THREADS 2

/* Payload "id:i" padded to BURST_PAYLOAD bytes. */
static void burst_payload(char *buf, int id, int i)
{
	memset(buf, 'p', BURST_PAYLOAD);
	int n = snprintf(buf, BURST_PAYLOAD, "%d:%d", id, i);
	buf[n] = '\0';
}

struct burst_sub {
	int next[BURST_THREADS + 1];
	uint64_t last_seq;
	unsigned events, bad;
	/* publish this many events from inside the first call (a subscriber
	 * publishing while the loop delivers) */
	int republish;
};

static int burst_cb(const struct fibril_event *ev, void *ud)
{
	struct burst_sub *bs = ud;
	int id = -1, idx = -1;
	if (ev->payload_len != BURST_PAYLOAD || sscanf(ev->payload, "%d:%d", &id, &idx) != 2 ||
	    id < 0 || id > BURST_THREADS || idx != bs->next[id] || ev->seq != bs->last_seq + 1 ||
	    ((uintptr_t)ev->payload % alignof(max_align_t)) != 0) {
		if (bs->bad++ < 5)
			fprintf(stderr, "\n  burst: event seq %llu '%.20s' (len %zu) out of order "
					"(expected seq %llu)\n",
				(unsigned long long)ev->seq, (const char *)ev->payload, ev->payload_len,
				(unsigned long long)bs->last_seq + 1);
	}
	if (id >= 0 && id <= BURST_THREADS)
		bs->next[id] = idx + 1;
	bs->last_seq = ev->seq;
	bs->events++;
	if (bs->republish > 0) {
		int n = bs->republish;
		bs->republish = 0;
		char buf[BURST_PAYLOAD];
		for (int i = 0; i < n; i++) {
			burst_payload(buf, BURST_THREADS, i);
			CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "burst", 1, buf, sizeof(buf)), 0);
		}
	}
	return 0;
}

static void t_bus_burst_from_loop_thread(void)
{
	begin();
	bus_set_limit(BURST_LIMIT);
	struct burst_sub bs;
	memset(&bs, 0, sizeof(bs));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_bus_subscribe(NULL, "burst", 0, burst_cb, &bs));
	char buf[BURST_PAYLOAD];
	/* The loop thread publishes far more than the bound without returning
	 * to the loop: the bus delivers inline instead of growing. */
	for (int i = 0; i < BURST_EVENTS; i++) {
		burst_payload(buf, 0, i);
		CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "burst", 1, buf, sizeof(buf)), 0);
	}
	CU_ASSERT(bs.events > 0); /* some were delivered inside publish */
	bus_flush();
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	CU_ASSERT_EQUAL(bs.events, BURST_EVENTS);
	CU_ASSERT_EQUAL(bs.next[0], BURST_EVENTS);
	CU_ASSERT_EQUAL(bs.bad, 0);
	CU_ASSERT(q.inline_flushes > 0);
	CU_ASSERT(q.held_max <= BURST_LIMIT);
	CU_ASSERT_EQUAL(q.held, 0);
	CU_ASSERT_EQUAL(q.over_limit, 0);
	CU_ASSERT_EQUAL(counter("burst", "delivered"), BURST_EVENTS);
	finish();
}

struct burst_publisher {
	int id, failures;
	atomic_bool done;
};

static void *burst_thread(void *p)
{
	struct burst_publisher *bp = p;
	char buf[BURST_PAYLOAD];
	for (int i = 0; i < BURST_EVENTS; i++) {
		burst_payload(buf, bp->id, i);
		if (fibril_bus_publish(NULL, "burst", 1, buf, sizeof(buf)) != 0)
			bp->failures++;
	}
	atomic_store(&bp->done, true);
	return NULL;
}

static void t_bus_burst_from_threads(void)
{
	begin();
	bus_set_limit(BURST_LIMIT);
	struct burst_sub bs;
	memset(&bs, 0, sizeof(bs));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_bus_subscribe(NULL, "burst", 0, burst_cb, &bs));
	struct burst_publisher bp[BURST_THREADS];
	pthread_t th[BURST_THREADS];
	for (int i = 0; i < BURST_THREADS; i++) {
		bp[i].id = i;
		bp[i].failures = 0;
		atomic_init(&bp[i].done, false);
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, burst_thread, &bp[i]), 0);
	}
	/* A slow loop: publishers fill the bound and must wait for it. */
	double deadline = mono_ms() + 30000;
	for (;;) {
		bool done = true;
		for (int i = 0; i < BURST_THREADS; i++)
			done = done && atomic_load(&bp[i].done);
		bus_flush();
		if (done || mono_ms() > deadline)
			break;
		usleep(2000);
	}
	for (int i = 0; i < BURST_THREADS; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(bp[i].failures, 0);
	}
	bus_flush();
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	CU_ASSERT_EQUAL(bs.events, BURST_THREADS * BURST_EVENTS);
	for (int i = 0; i < BURST_THREADS; i++)
		CU_ASSERT_EQUAL(bs.next[i], BURST_EVENTS);
	CU_ASSERT_EQUAL(bs.bad, 0);
	CU_ASSERT(q.waits > 0);
	CU_ASSERT(q.held_max <= BURST_LIMIT);
	CU_ASSERT_EQUAL(q.over_limit, 0);
	CU_ASSERT_EQUAL(q.inline_flushes, 0);
	finish();
}

static void t_bus_burst_publish_from_subscriber(void)
{
	begin();
	bus_set_limit(BURST_LIMIT);
	struct burst_sub bs;
	memset(&bs, 0, sizeof(bs));
	/* The first delivery publishes 3x the bound: it cannot wait (it is the
	 * loop) nor deliver (the loop is delivering), so it goes past. */
	bs.republish = 3 * (int)(BURST_LIMIT / BURST_PAYLOAD);
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_bus_subscribe(NULL, "burst", 0, burst_cb, &bs));
	char buf[BURST_PAYLOAD];
	burst_payload(buf, 0, 0);
	CU_ASSERT_EQUAL(fibril_bus_publish(NULL, "burst", 1, buf, sizeof(buf)), 0);
	bus_flush();
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	CU_ASSERT_EQUAL(bs.events, 1 + 3 * (BURST_LIMIT / BURST_PAYLOAD));
	CU_ASSERT_EQUAL(bs.next[BURST_THREADS], 3 * (int)(BURST_LIMIT / BURST_PAYLOAD));
	CU_ASSERT_EQUAL(bs.bad, 0);
	CU_ASSERT(q.over_limit > 0);
	CU_ASSERT_EQUAL(q.held, 0);
	finish();
}

struct try_ctx {
	int accepted, refused_rc;
};

static void *try_thread(void *p)
{
	struct try_ctx *tc = p;
	char buf[BURST_PAYLOAD];
	for (int i = 0; i < BURST_EVENTS; i++) {
		burst_payload(buf, 1, tc->accepted);
		int rc = fibril_bus_try_publish(NULL, "burst", 1, buf, sizeof(buf));
		if (rc != 0) {
			tc->refused_rc = rc;
			break;
		}
		tc->accepted++;
	}
	return NULL;
}

static void t_bus_try_publish_eagain(void)
{
	begin();
	bus_set_limit(BURST_LIMIT);
	struct burst_sub bs;
	memset(&bs, 0, sizeof(bs));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_bus_subscribe(NULL, "burst", 0, burst_cb, &bs));
	/* On the loop thread: fills the bound, then EAGAIN, nothing delivered. */
	char buf[BURST_PAYLOAD];
	int accepted = 0, rc = 0;
	for (int i = 0; i < BURST_EVENTS && rc == 0; i++) {
		burst_payload(buf, 0, accepted);
		rc = fibril_bus_try_publish(NULL, "burst", 1, buf, sizeof(buf));
		if (rc == 0)
			accepted++;
	}
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	CU_ASSERT(accepted > 0 && (size_t)accepted * BURST_PAYLOAD <= BURST_LIMIT);
	CU_ASSERT_EQUAL(bs.events, 0);
	/* Another thread is refused too (it does not wait). */
	struct try_ctx tc = {0, 0};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, try_thread, &tc), 0);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(tc.accepted, 0);
	CU_ASSERT_EQUAL(tc.refused_rc, -EAGAIN);
	bus_flush();
	CU_ASSERT_EQUAL(bs.events, (unsigned)accepted);
	CU_ASSERT_EQUAL(bs.next[0], accepted);
	/* Room again once the loop delivered. */
	CU_ASSERT_EQUAL(fibril_bus_try_publish(NULL, "burst", 1, NULL, 0), 0);
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	CU_ASSERT_EQUAL(q.refused, 2);
	CU_ASSERT_EQUAL(fibril_bus_try_publish(NULL, "bad topic", 1, NULL, 0), -EINVAL);
	finish();
}

/* A publisher thread the loop is waiting for (here: joining it) must not
 * deadlock on a full queue: after the stall time it goes past the bound. */
static void *stalled_thread(void *p)
{
	int *failures = p;
	char buf[BURST_PAYLOAD];
	int n = (int)(BURST_LIMIT / BURST_PAYLOAD) + 300; /* a bit over the bound */
	for (int i = 0; i < n; i++) {
		burst_payload(buf, 1, i);
		if (fibril_bus_publish(NULL, "burst", 1, buf, sizeof(buf)) != 0)
			(*failures)++;
	}
	return NULL;
}

static void t_bus_stalled_loop_no_deadlock(void)
{
	begin();
	bus_set_limit(BURST_LIMIT);
	struct burst_sub bs;
	memset(&bs, 0, sizeof(bs));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_bus_subscribe(NULL, "burst", 0, burst_cb, &bs));
	int failures = 0;
	pthread_t th;
	double t0 = mono_ms();
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, stalled_thread, &failures), 0);
	pthread_join(th, NULL); /* the loop does not flush meanwhile */
	double waited = mono_ms() - t0;
	CU_ASSERT(waited >= 1500); /* it did wait for the loop first */
	CU_ASSERT_EQUAL(failures, 0);
	struct bus_queue_stats q;
	bus_queue_stats(&q);
	CU_ASSERT(q.over_limit > 0);
	CU_ASSERT(q.waits > 0);
	bus_flush();
	CU_ASSERT_EQUAL(bs.events, (unsigned)(BURST_LIMIT / BURST_PAYLOAD) + 300);
	CU_ASSERT_EQUAL(bs.bad, 0);
	finish();
}

/* ---- loop helpers ------------------------------------------------------------------------ */

static void set_flag(struct fibril_timer *t, void *ud)
{
	*(bool *)ud = true;
}

/* Run blocking iterations until *flag or ms pass. A guard timer keeps the
 * loop alive (and so blocking) and bounds the wait. Returns *flag. */
static bool run_until(const volatile bool *flag, uint64_t ms)
{
	bool timed_out = false;
	struct fibril_timer *guard = fibril_timer_add(NULL, ms, 0, set_flag, &timed_out);
	CU_ASSERT_PTR_NOT_NULL_FATAL(guard);
	while (!*flag && !timed_out)
		loop_run_once(true);
	if (!timed_out)
		fibril_timer_cancel(guard);
	loop_run_once(false); /* let the close complete */
	return *flag;
}

/* Run the loop for about ms, whatever happens. */
static void run_for(uint64_t ms)
{
	bool done = false;
	CU_ASSERT_FATAL(run_until(&done, ms) == false);
}

struct timer_ctx {
	unsigned fired;
	unsigned cancel_at; /* cancel itself on this call (0: never) */
	unsigned rearm_until; /* rearm one-shot itself until fired == this */
	double first_at;
	bool done;
	pthread_t thread;
};

static void count_timer(struct fibril_timer *t, void *ud)
{
	struct timer_ctx *c = ud;
	c->fired++;
	if (c->fired == 1)
		c->first_at = mono_ms();
	c->thread = pthread_self();
	if (c->cancel_at && c->fired == c->cancel_at) {
		fibril_timer_cancel(t);
		fibril_timer_cancel(t); /* twice is harmless */
		c->done = true;
	}
	if (c->rearm_until) {
		if (c->fired < c->rearm_until) {
			CU_ASSERT_EQUAL(fibril_timer_rearm(t, 5, 0), 0);
		} else {
			c->done = true;
		}
	}
	if (!c->cancel_at && !c->rearm_until)
		c->done = true;
}

/* ---- loop: timers --------------------------------------------------------------------------- */

static void t_timer_one_shot(void)
{
	begin();
	struct timer_ctx c = {0};
	loop_run_once(false); /* updates the loop's notion of now */
	double t0 = mono_ms();
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 30, 0, count_timer, &c));
	loop_run_once(false);
	CU_ASSERT_EQUAL(c.fired, 0); /* not yet */
	CU_ASSERT(run_until(&c.done, 2000));
	CU_ASSERT_EQUAL(c.fired, 1);
	CU_ASSERT(c.first_at - t0 >= 20.0);
	CU_ASSERT(pthread_equal(c.thread, main_thread));
	run_for(80);
	CU_ASSERT_EQUAL(c.fired, 1); /* once only */
	finish();
}

static void t_timer_repeating(void)
{
	begin();
	struct timer_ctx c = {.cancel_at = 1000};
	struct fibril_timer *t = fibril_timer_add(NULL, 5, 5, count_timer, &c);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	double deadline = mono_ms() + 2000;
	while (c.fired < 3 && mono_ms() < deadline)
		loop_run_once(true); /* the timer keeps the loop alive */
	CU_ASSERT(c.fired >= 3);
	/* Cancelled from outside: no more calls. */
	fibril_timer_cancel(t);
	unsigned fired = c.fired;
	run_for(50);
	CU_ASSERT_EQUAL(c.fired, fired);
	finish();
}

static void t_timer_cancel_in_callback(void)
{
	begin();
	/* A repeating timer that cancels itself on its third call. */
	struct timer_ctx rep = {.cancel_at = 3};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 2, 2, count_timer, &rep));
	/* A one-shot timer that cancels itself in its only call. */
	struct timer_ctx once = {.cancel_at = 1};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 2, 0, count_timer, &once));
	CU_ASSERT(run_until(&rep.done, 2000));
	CU_ASSERT(run_until(&once.done, 2000));
	run_for(40);
	CU_ASSERT_EQUAL(rep.fired, 3);
	CU_ASSERT_EQUAL(once.fired, 1);
	finish();
}

static void t_timer_rearm_in_callback(void)
{
	begin();
	/* A one-shot timer that re-arms itself (e.g. a retry with backoff)
	 * must fire again rather than be freed when its callback returns. */
	struct timer_ctx c = {.rearm_until = 3};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 2, 0, count_timer, &c));
	run_until(&c.done, 500);
	CU_ASSERT_EQUAL(c.fired, 3);
	finish();
}

static void t_timer_rearm(void)
{
	begin();
	/* Re-arm from outside: a long timer brought forward, a repeating one
	 * turned into a one-shot. */
	struct timer_ctx c = {0};
	struct fibril_timer *t = fibril_timer_add(NULL, 60000, 0, count_timer, &c);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	CU_ASSERT_EQUAL(fibril_timer_rearm(t, 5, 0), 0);
	CU_ASSERT(run_until(&c.done, 2000));
	CU_ASSERT_EQUAL(c.fired, 1);
	CU_ASSERT_EQUAL(fibril_timer_rearm(NULL, 1, 0), -EINVAL);

	struct timer_ctx r = {.cancel_at = 1000};
	struct fibril_timer *rt = fibril_timer_add(NULL, 2, 2, count_timer, &r);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CU_ASSERT_EQUAL(fibril_timer_rearm(rt, 5, 0), 0);
	run_for(60);
	CU_ASSERT_EQUAL(r.fired, 1);
	finish();
}

static void io_cb(struct fibril_io *io, int fd, uint32_t revents, void *ud);
static void deferred_cb(void *ud);

static void t_loop_invalid_args(void)
{
	begin();
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_timer_add(NULL, 1, 0, NULL, NULL));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_io_watch(NULL, -1, FIBRIL_IO_READ, io_cb, NULL));
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(fibril_defer(NULL, NULL, NULL), -EINVAL);
	CU_ASSERT_EQUAL(fibril_work_submit(NULL, NULL, NULL, NULL), -EINVAL);
	fibril_timer_cancel(NULL); /* harmless */
	fibril_io_remove(NULL);
	finish();
	/* Without a loop nothing can be added. */
	struct timer_ctx c = {0};
	errno = 0;
	CU_ASSERT_PTR_NULL(fibril_timer_add(NULL, 1, 0, count_timer, &c));
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(fibril_defer(NULL, deferred_cb, NULL), -EINVAL);
}

/* ---- loop: deferred calls and the worker pool ----------------------------------------------- */

struct thread_ctx {
	volatile bool ran;
	pthread_t thread;
	unsigned calls;
	unsigned seqno; /* order among deferred calls */
	int status;
	bool work_ran_first;
	volatile bool work_ran;
	pthread_t work_thread;
	struct fibril_module *owner;
};

static unsigned g_defer_seq;

static void deferred_cb(void *ud)
{
	struct thread_ctx *c = ud;
	c->seqno = ++g_defer_seq;
	c->thread = pthread_self();
	c->calls++;
	c->ran = true;
}

static void *defer_thread(void *p)
{
	struct thread_ctx *c = p;
	fibril_defer(c->owner, deferred_cb, c);
	return NULL;
}

static void t_defer_from_thread(void)
{
	begin();
	struct thread_ctx c = {0};
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, defer_thread, &c), 0);
	pthread_join(th, NULL);
	CU_ASSERT(!c.ran); /* not run on the calling thread */
	CU_ASSERT(run_until(&c.ran, 2000));
	CU_ASSERT_EQUAL(c.calls, 1);
	CU_ASSERT(pthread_equal(c.thread, main_thread));
	CU_ASSERT(!pthread_equal(c.thread, th));
	finish();
}

static void t_defer_order(void)
{
	begin();
	/* Deferred calls run in the order they were made. */
	struct thread_ctx c[3] = {{0}};
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(fibril_defer(NULL, deferred_cb, &c[i]), 0);
	CU_ASSERT(run_until(&c[2].ran, 2000));
	CU_ASSERT(c[0].ran && c[1].ran);
	CU_ASSERT(c[0].seqno < c[1].seqno && c[1].seqno < c[2].seqno);
	CU_ASSERT_EQUAL(c[0].calls + c[1].calls + c[2].calls, 3);
	finish();
}

static void *bus_publisher_one(void *p)
{
	fibril_bus_publish(NULL, "via.loop", 1, "woken", 6);
	return NULL;
}

static volatile bool g_delivered;

static int flag_cb(const struct fibril_event *ev, void *ud)
{
	int rc = record_cb(ev, ud);
	g_delivered = true;
	return rc;
}

static void t_bus_delivered_by_loop(void)
{
	begin();
	/* A publish from another thread wakes the loop, which delivers it on
	 * the loop thread without an explicit bus_flush(). */
	g_delivered = false;
	struct sub_ctx a = {.id = 1};
	CU_ASSERT_PTR_NOT_NULL(fibril_bus_subscribe(NULL, "via.loop", 0, flag_cb, &a));
	pthread_t th;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, bus_publisher_one, NULL), 0);
	pthread_join(th, NULL);
	CU_ASSERT(run_until(&g_delivered, 2000));
	CU_ASSERT_EQUAL_FATAL(nrecords, 1);
	expect(0, 1, "via.loop", "woken");
	CU_ASSERT(pthread_equal(records[0].thread, main_thread));
	finish();
}

static void work_fn(void *ud)
{
	struct thread_ctx *c = ud;
	c->work_thread = pthread_self();
	usleep(10000);
	c->work_ran = true;
}

static void done_fn(void *ud, int status)
{
	struct thread_ctx *c = ud;
	c->work_ran_first = c->work_ran;
	c->thread = pthread_self();
	c->status = status;
	c->calls++;
	c->ran = true;
}

static void t_work_submit(void)
{
	begin();
	struct fibril_module *m = fake_module("worker");
	struct thread_ctx c = {0};
	CU_ASSERT_EQUAL_FATAL(fibril_work_submit(m, work_fn, done_fn, &c), 0);
	CU_ASSERT_EQUAL(loop_pending_work(m), 1);
	CU_ASSERT_EQUAL(loop_pending_work(NULL), 0);
	CU_ASSERT(run_until(&c.ran, 5000));
	CU_ASSERT_EQUAL(c.calls, 1);
	CU_ASSERT_EQUAL(c.status, 0);
	CU_ASSERT(c.work_ran_first);
	CU_ASSERT(!pthread_equal(c.work_thread, main_thread));
	CU_ASSERT(pthread_equal(c.thread, main_thread));
	CU_ASSERT_EQUAL(loop_pending_work(m), 0);
	/* Without a done callback. */
	struct thread_ctx c2 = {0};
	CU_ASSERT_EQUAL_FATAL(fibril_work_submit(m, work_fn, NULL, &c2), 0);
	double deadline = mono_ms() + 5000;
	while (loop_pending_work(m) && mono_ms() < deadline)
		loop_run_once(true);
	CU_ASSERT_EQUAL(loop_pending_work(m), 0);
	CU_ASSERT(c2.work_ran);
	finish();
	free_fake_module(m);
}

/* ---- loop: fd watches -------------------------------------------------------------------------- */

struct io_ctx {
	unsigned calls;
	uint32_t revents;
	int fd;
	char byte;
	volatile bool ran;
	struct fibril_io *io;
	bool remove;
};

static void io_cb(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct io_ctx *c = ud;
	c->calls++;
	c->revents = revents;
	c->fd = fd;
	CU_ASSERT_PTR_EQUAL(io, c->io);
	if (revents & FIBRIL_IO_READ)
		CU_ASSERT_EQUAL(read(fd, &c->byte, 1), 1);
	if (c->remove)
		fibril_io_remove(io);
	c->ran = true;
}

static void t_io_watch_pipe(void)
{
	begin();
	int p[2];
	CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
	struct io_ctx c = {.fd = -1, .remove = true};
	c.io = fibril_io_watch(NULL, p[0], FIBRIL_IO_READ, io_cb, &c);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c.io);
	/* Nothing to read yet. */
	loop_run_once(false);
	CU_ASSERT_EQUAL(c.calls, 0);
	CU_ASSERT_EQUAL(write(p[1], "k", 1), 1);
	CU_ASSERT(run_until(&c.ran, 2000));
	CU_ASSERT_EQUAL(c.calls, 1);
	CU_ASSERT(c.revents & FIBRIL_IO_READ);
	CU_ASSERT_FALSE(c.revents & FIBRIL_IO_WRITE);
	CU_ASSERT_EQUAL(c.fd, p[0]);
	CU_ASSERT_EQUAL(c.byte, 'k');
	/* Removed inside its callback: more data is not reported. */
	CU_ASSERT_EQUAL(write(p[1], "z", 1), 1);
	run_for(30);
	CU_ASSERT_EQUAL(c.calls, 1);
	/* The fd stays open: it is the caller's. */
	char z = 0;
	CU_ASSERT_EQUAL(read(p[0], &z, 1), 1);
	CU_ASSERT_EQUAL(z, 'z');
	close(p[0]);
	close(p[1]);
	finish();
}

static void t_io_watch_write_and_update(void)
{
	begin();
	int p[2];
	CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
	struct io_ctx c = {.fd = -1};
	c.io = fibril_io_watch(NULL, p[1], FIBRIL_IO_WRITE, io_cb, &c);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c.io);
	CU_ASSERT(run_until(&c.ran, 2000));
	CU_ASSERT(c.revents & FIBRIL_IO_WRITE);
	CU_ASSERT_EQUAL(c.fd, p[1]);
	/* Stop watching for now (events 0), then remove. */
	CU_ASSERT_EQUAL(fibril_io_update(c.io, 0), 0);
	unsigned calls = c.calls;
	run_for(20);
	CU_ASSERT_EQUAL(c.calls, calls);
	fibril_io_remove(c.io);
	CU_ASSERT_EQUAL(fibril_io_update(c.io, FIBRIL_IO_READ), -EINVAL); /* closing */
	loop_run_once(false);
	close(p[0]);
	close(p[1]);
	finish();
}

/* ---- loop: release by owner ---------------------------------------------------------------------- */

static void t_loop_release_owner(void)
{
	begin();
	struct fibril_module *m = fake_module("leaving"), *other = fake_module("staying");
	struct timer_ctx once = {0}, rep = {.cancel_at = 1000}, kept = {0};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(m, 10, 0, count_timer, &once));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(m, 5, 5, count_timer, &rep));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(other, 30, 0, count_timer, &kept));
	int p[2];
	CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
	struct io_ctx ioc = {.fd = -1};
	ioc.io = fibril_io_watch(m, p[0], FIBRIL_IO_READ, io_cb, &ioc);
	CU_ASSERT_PTR_NOT_NULL_FATAL(ioc.io);
	struct thread_ctx deferred = {0}, other_deferred = {0};
	CU_ASSERT_EQUAL(fibril_defer(m, deferred_cb, &deferred), 0);
	CU_ASSERT_EQUAL(fibril_defer(other, deferred_cb, &other_deferred), 0);
	struct thread_ctx job = {0};
	CU_ASSERT_EQUAL(fibril_work_submit(m, work_fn, done_fn, &job), 0);

	loop_release_owner(m);
	/* Jobs are finished (run or cancelled) when release returns. */
	CU_ASSERT_EQUAL(loop_pending_work(m), 0);
	CU_ASSERT_EQUAL(job.calls, 1);
	CU_ASSERT(job.status == 0 || job.status == -ECANCELED);

	CU_ASSERT_EQUAL(write(p[1], "k", 1), 1);
	CU_ASSERT(run_until(&kept.done, 2000));
	run_for(30);
	CU_ASSERT_EQUAL(once.fired, 0);
	CU_ASSERT_EQUAL(rep.fired, 0);
	CU_ASSERT_EQUAL(ioc.calls, 0);
	CU_ASSERT_EQUAL(deferred.calls, 0);
	/* Another owner's handles are untouched. */
	CU_ASSERT_EQUAL(kept.fired, 1);
	CU_ASSERT_EQUAL(other_deferred.calls, 1);
	close(p[0]);
	close(p[1]);
	finish();
	free_fake_module(m);
	free_fake_module(other);
}

static void t_loop_release_owner_deferred_tail(void)
{
	begin();
	/* Dropping the last deferred call keeps the queue usable: a call made
	 * after the release still runs. */
	struct fibril_module *m = fake_module("tail");
	struct thread_ctx first = {0}, dropped = {0}, after = {0};
	CU_ASSERT_EQUAL(fibril_defer(NULL, deferred_cb, &first), 0);
	CU_ASSERT_EQUAL(fibril_defer(m, deferred_cb, &dropped), 0);
	loop_release_owner(m);
	CU_ASSERT_EQUAL(fibril_defer(NULL, deferred_cb, &after), 0);
	CU_ASSERT(run_until(&after.ran, 2000));
	CU_ASSERT(first.ran);
	CU_ASSERT_EQUAL(dropped.calls, 0);
	finish();
	free_fake_module(m);
}

FIBRIL_TEST_MAIN("bus", NULL, NULL,
		 FIBRIL_TEST(t_bus_order_several_subscribers),
		 FIBRIL_TEST(t_bus_payload_copied),
		 FIBRIL_TEST(t_bus_failing_subscriber),
		 FIBRIL_TEST(t_bus_counters),
		 FIBRIL_TEST(t_bus_min_version),
		 FIBRIL_TEST(t_bus_seq_per_topic),
		 FIBRIL_TEST(t_bus_publisher_name),
		 FIBRIL_TEST(t_bus_invalid_topics),
		 FIBRIL_TEST(t_bus_unsubscribe_self_in_callback),
		 FIBRIL_TEST(t_bus_unsubscribe_other_in_callback),
		 FIBRIL_TEST(t_bus_subscribe_in_callback),
		 FIBRIL_TEST(t_bus_publish_in_callback),
		 FIBRIL_TEST(t_bus_nested_flush_is_noop),
		 FIBRIL_TEST(t_bus_publish_from_threads),
		 FIBRIL_TEST(t_bus_flush_while_publishing),
		 FIBRIL_TEST(t_bus_release_owner),
		 FIBRIL_TEST(t_bus_threads_create_topics_while_loop_walks),
		 FIBRIL_TEST(t_bus_burst_from_loop_thread),
		 FIBRIL_TEST(t_bus_burst_from_threads),
		 FIBRIL_TEST(t_bus_burst_publish_from_subscriber),
		 FIBRIL_TEST(t_bus_try_publish_eagain),
		 FIBRIL_TEST(t_bus_stalled_loop_no_deadlock),
		 FIBRIL_TEST(t_bus_delivered_by_loop),
		 FIBRIL_TEST(t_timer_one_shot),
		 FIBRIL_TEST(t_timer_repeating),
		 FIBRIL_TEST(t_timer_cancel_in_callback),
		 FIBRIL_TEST(t_timer_rearm_in_callback),
		 FIBRIL_TEST(t_timer_rearm),
		 FIBRIL_TEST(t_loop_invalid_args),
		 FIBRIL_TEST(t_defer_from_thread),
		 FIBRIL_TEST(t_defer_order),
		 FIBRIL_TEST(t_work_submit),
		 FIBRIL_TEST(t_io_watch_pipe),
		 FIBRIL_TEST(t_io_watch_write_and_update),
		 FIBRIL_TEST(t_loop_release_owner),
		 FIBRIL_TEST(t_loop_release_owner_deferred_tail))
