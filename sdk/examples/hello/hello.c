/* sdk/examples/hello/hello.c - the example fibril module. It shows every
 * part of the module contract a real module uses: a config key, a route,
 * a websocket stream, a timer, a bus topic it publishes and subscribes to,
 * a service it provides, health reports and the status summary. Copy it to
 * start a module of your own; its Makefile builds it against the installed
 * SDK with nothing but `pkg-config fibril-sdk`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

/* The capability this module offers other modules: version 1 of a tiny
 * "greeting" interface. Interfaces grow by appending and bumping version. */
struct greeting_service {
	struct fibril_service_header hdr;
	const char *(*greeting)(void *ctx);
};

/* The payload of the "hello.tick" topic, version 1. */
struct hello_tick {
	uint32_t sz;
	uint64_t count;
};

struct hello {
	struct fibril_module *m;
	const char *greeting;
	uint64_t interval_ms;
	uint64_t ticks, ticks_seen;
	struct fibril_timer *timer;
	struct fibril_stream *stream;
	struct greeting_service service;
};

static const char *hello_greeting(void *ctx)
{
	return ((struct hello *)ctx)->greeting;
}

static void on_tick(struct fibril_timer *t, void *ud)
{
	struct hello *h = ud;
	struct hello_tick tick = {.sz = sizeof(tick), .count = ++h->ticks};
	fibril_bus_publish(h->m, "hello.tick", 1, &tick, sizeof(tick));
	char msg[128];
	int n = snprintf(msg, sizeof(msg), "{\"tick\":%llu}", (unsigned long long)h->ticks);
	fibril_stream_send(h->stream, msg, (size_t)n);
}

static int on_tick_event(const struct fibril_event *ev, void *ud)
{
	struct hello *h = ud;
	const struct hello_tick *tick = ev->payload;
	if (ev->payload_len < sizeof(uint32_t) || tick->sz < sizeof(*tick))
		return -EPROTO;
	h->ticks_seen = tick->count;
	return 0;
}

static void get_hello(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct hello *h = ud;
	const char *who = fibril_req_query(req, "name");
	if (who && (strlen(who) > 64 || strpbrk(who, "\"\\<>"))) {
		fibril_resp_error(resp, 400, "query 'name': at most 64 characters, no quotes");
		return;
	}
	char body[256];
	snprintf(body, sizeof(body), "{\"greeting\":\"%s, %s\",\"ticks\":%llu}", h->greeting,
		 who ? who : "world", (unsigned long long)h->ticks_seen);
	fibril_resp_json(resp, 200, body);
}

static int hello_init(struct fibril_module *m)
{
	struct hello *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->m = m;
	h->service.hdr.sz = sizeof(h->service);
	h->service.hdr.version = 1;
	h->service.greeting = hello_greeting;
	fibril_module_set_data(m, h);
	int rc = fibril_api_route(m, "GET", "/v1/hello", 0, get_hello, h);
	if (rc)
		return rc;
	h->stream = fibril_api_stream(m, "/v1/hello/ticks");
	if (!h->stream)
		return -errno;
	if (!fibril_bus_subscribe(m, "hello.tick", 1, on_tick_event, h))
		return -errno;
	return fibril_service_provide(m, "greeting", &h->service.hdr, h);
}

static int hello_start(struct fibril_module *m)
{
	struct hello *h = fibril_module_data(m);
	h->greeting = fibril_config_string(m, "greeting");
	h->interval_ms = fibril_config_duration_ms(m, "interval");
	h->timer = fibril_timer_add(m, h->interval_ms, h->interval_ms, on_tick, h);
	if (!h->timer) {
		fibril_module_set_error(m, "cannot create the tick timer");
		return -errno;
	}
	fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "greeting every %llu ms",
			     (unsigned long long)h->interval_ms);
	fibril_info(m, "started: \"%s\" every %llu ms", h->greeting, (unsigned long long)h->interval_ms);
	return 0;
}

static void hello_stop(struct fibril_module *m)
{
	struct hello *h = fibril_module_data(m);
	fibril_timer_cancel(h->timer);
	h->timer = NULL;
}

static void hello_fini(struct fibril_module *m)
{
	free(fibril_module_data(m));
	fibril_module_set_data(m, NULL);
}

static int hello_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct hello *h = fibril_module_data(m);
	return snprintf(buf, len, "%llu ticks", (unsigned long long)h->ticks);
}

static const struct fibril_config_key hello_keys[] = {
	{.name = "greeting", .type = FIBRIL_CONFIG_STRING, .default_value = "hello",
	 .help = "What GET /v1/hello says"},
	{.name = "interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "1s",
	 .help = "How often the module ticks", .min = 10, .max = 3600000},
	{0},
};

FIBRIL_MODULE(.name = "hello", .version = "1.0.0",
	      .description = "example module: a route, a stream, a timer, the bus, a service",
	      .provides = FIBRIL_LIST("greeting"), .config_keys = hello_keys,
	      .init = hello_init, .start = hello_start, .stop = hello_stop, .fini = hello_fini,
	      .summary = hello_summary);
