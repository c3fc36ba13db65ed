/* tests/modules/testmod.c - a configurable module for the host's tests and
 * benchmarks. Its identity (name, provides, requires, wants, ABI fields) is
 * set at compile time with -D (see tests/lib/common.sh: build_module); its
 * behaviour at run time through its config section: fail in init or start,
 * finish start asynchronously, hang, report degraded health, and append
 * "init|start|stop|fini NAME" lines to a trace file so tests can check the
 * order of the lifecycle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fibril/fibril.h>

#ifndef TM_NAME
#error "build with -DTM_NAME='\"name\"'"
#endif
#ifndef TM_PROVIDES
#define TM_PROVIDES NULL
#endif
#ifndef TM_REQUIRES
#define TM_REQUIRES NULL
#endif
#ifndef TM_WANTS
#define TM_WANTS NULL
#endif
#ifndef TM_DESC_EXTRA
#define TM_DESC_EXTRA
#endif

struct testmod {
	struct fibril_timer *timer;
};

static void trace(struct fibril_module *m, const char *what)
{
	const char *path = fibril_config_string(m, "trace");
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "%s %s\n", what, fibril_module_name(m));
	fclose(f);
}

/* POST /v1/tm/NAME/echo: answers with the (JSON) body it was given. */
static void echo(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	fibril_resp_body(resp, 200, "application/json", body, len);
}

static void tm_fini(struct fibril_module *m)
{
	trace(m, "fini");
	free(fibril_module_data(m));
}

static int tm_init(struct fibril_module *m)
{
	trace(m, "init");
	if (fibril_config_bool(m, "fail-init")) {
		fibril_module_set_error(m, "init failure requested by config");
		return -EINVAL;
	}
	struct testmod *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	fibril_module_set_data(m, t);
	return fibril_api_route(m, "POST", "/v1/tm/" TM_NAME "/echo", FIBRIL_ROUTE_JSON_BODY, echo, t);
}

static void finish_start(struct fibril_timer *timer, void *ud)
{
	struct fibril_module *m = ud;
	struct testmod *t = fibril_module_data(m);
	t->timer = NULL;
	if (fibril_config_bool(m, "fail-start")) {
		fibril_module_set_error(m, "asynchronous start failure requested by config");
		fibril_module_start_done(m, -EIO);
		return;
	}
	trace(m, "started");
	fibril_module_start_done(m, 0);
}

static int tm_start(struct fibril_module *m)
{
	struct testmod *t = fibril_module_data(m);
	trace(m, "start");
	if (fibril_config_bool(m, "hang-start"))
		for (;;)
			pause();
	uint64_t delay = fibril_config_duration_ms(m, "async-start");
	if (delay) {
		t->timer = fibril_timer_add(m, delay, 0, finish_start, m);
		return t->timer ? FIBRIL_START_PENDING : -ENOMEM;
	}
	if (fibril_config_bool(m, "fail-start")) {
		fibril_module_set_error(m, "start failure requested by config");
		return -EIO;
	}
	const char *degraded = fibril_config_string(m, "degraded");
	if (degraded && *degraded)
		fibril_health_report(m, "probe", FIBRIL_HEALTH_DEGRADED, "%s", degraded);
	else
		fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "running");
	return 0;
}

static void tm_stop(struct fibril_module *m)
{
	trace(m, "stop");
	if (fibril_config_bool(m, "hang-stop"))
		for (;;)
			pause();
}

static const struct fibril_config_key tm_keys[] = {
	{.name = "trace", .type = FIBRIL_CONFIG_PATH, .help = "append lifecycle lines here"},
	{.name = "fail-init", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "fail init"},
	{.name = "fail-start", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "fail start"},
	{.name = "hang-start", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "never return from start"},
	{.name = "hang-stop", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "never return from stop"},
	{.name = "async-start", .type = FIBRIL_CONFIG_DURATION, .default_value = "0",
	 .help = "finish start this much later, on the loop", .min = 0, .max = 3600000},
	{.name = "degraded", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "report this Degraded message after start"},
	{.name = "count", .type = FIBRIL_CONFIG_INT, .default_value = "1", .help = "a bounded integer",
	 .min = 1, .max = 100},
	{0},
};

FIBRIL_MODULE(.name = TM_NAME, .version = "0.0.1", .description = "test module",
	      .provides = TM_PROVIDES, .requires = TM_REQUIRES, .wants = TM_WANTS,
	      .config_keys = tm_keys, .init = tm_init, .start = tm_start, .stop = tm_stop,
	      .fini = tm_fini TM_DESC_EXTRA);
