/* tests/modules/testmod.c - a configurable module for the host's tests and
 * benchmarks. Its identity (name, provides, requires, wants, ABI fields) is
 * set at compile time with -D (see tests/lib/common.sh: build_module); its
 * behaviour at run time through its config section: fail in init or start,
 * finish start asynchronously, hang, report degraded health, and append
 * "init|start|stop|fini NAME" lines to a trace file so tests can check the
 * order of the lifecycle. Also: hold handles the natural way and release
 * them in stop and in fini, twice (handles=true; its one-shot timer's firing
 * is a "once NAME" line of the trace), crash in a hook or
 * callback (crash=start|timer|bus|job|stop|route), run a worker job that outlives
 * stop (stop-job=DURATION), tick a repeating timer into the trace, defer
 * the answers of GET /v1/tm/NAME/later until stop (ABI 1.4+); built
 * with -DTM_CTOR_FILE='"path"' or -DTM_CTOR_CRASH it has a constructor that
 * writes that file or crashes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
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
	/* handles=true: kept as a vendor would, never reset to NULL */
	struct fibril_subscription *sub;
	struct fibril_timer *once, *repeat;
	struct fibril_io *io;
	struct fibril_signal *sig;
	int pipe[2];
	struct fibril_timer *tick;
	struct fibril_module *m;
#if FIBRIL_ABI_MINOR >= 4
	/* GET /v1/tm/NAME/later: deferred answers, sent in stop */
	struct fibril_response *later[64];
	size_t nlater;
#endif
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
static void crash_now(void);
static bool crash_in(struct fibril_module *m, const char *where);

static void echo(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct testmod *t = ud;
	if (crash_in(t->m, "route"))
		crash_now();
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	fibril_resp_body(resp, 200, "application/json", body, len);
}

#if FIBRIL_ABI_MINOR >= 4
/* GET /v1/tm/NAME/later: the answer is deferred and sent only in stop (a
 * handler that answers from a worker or a watch, still pending when the
 * agent stops). 503 when 64 are pending already. Each one deferred is a
 * "later NAME" line of the trace. */
static void later(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct testmod *t = ud;
	(void)req;
	struct fibril_response *d = t->nlater < 64 ? fibril_resp_defer(resp) : NULL;
	if (!d) {
		fibril_resp_error(resp, 503, "too many deferred answers");
		return;
	}
	t->later[t->nlater++] = d;
	trace(t->m, "later");
}

static void later_answer_all(struct testmod *t)
{
	for (size_t i = 0; i < t->nlater; i++) {
		fibril_resp_json(t->later[i], 200, "{\"later\":true}");
		fibril_resp_send(t->later[i]);
	}
	t->nlater = 0;
}
#endif

static void crash_now(void)
{
	*(volatile int *)(uintptr_t)8 = 1; /* a NULL-pointer write, as a bug would do */
}

static bool crash_in(struct fibril_module *m, const char *where)
{
	const char *c = fibril_config_string(m, "crash");
	return c && strcmp(c, where) == 0;
}

/* Release every handle the natural way: no "already released" bookkeeping. */
static void release_handles(struct testmod *t)
{
	for (int i = 0; i < 2; i++) {
		fibril_bus_unsubscribe(t->sub);
		fibril_timer_cancel(t->once); /* fired and freed long ago */
		fibril_timer_cancel(t->repeat);
		fibril_io_remove(t->io);
#if FIBRIL_ABI_MINOR >= 1 /* signal watches are ABI 1.1 */
		fibril_signal_remove(t->sig);
#endif
	}
}

static void tm_fini(struct fibril_module *m)
{
	trace(m, "fini");
	struct testmod *t = fibril_module_data(m);
	if (t && fibril_config_bool(m, "handles")) {
		release_handles(t);
		close(t->pipe[0]);
		close(t->pipe[1]);
	}
	free(t);
}

static int on_event(const struct fibril_event *ev, void *ud)
{
	struct testmod *t = ud;
	if (crash_in(t->m, "bus"))
		crash_now();
	return 0;
}

static void on_once(struct fibril_timer *timer, void *ud)
{
	struct testmod *t = ud;
	if (crash_in(t->m, "timer"))
		crash_now();
	trace(t->m, "once");
}

static void on_repeat(struct fibril_timer *timer, void *ud)
{
}

static void on_tick(struct fibril_timer *timer, void *ud)
{
	trace(ud, "tick");
}

static void on_io(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
}

#if FIBRIL_ABI_MINOR >= 1
static void on_signal(struct fibril_signal *s, int signum, void *ud)
{
}
#endif

static void crash_job(void *ud)
{
	crash_now();
}

/* Set by the stop job once a pool thread runs it: stop waits for it, so
 * the host's wait sees a running job, not one it can still cancel (on a
 * loaded machine the pool may not have picked the job up yet). */
static volatile sig_atomic_t sleep_job_started;

static void sleep_job(void *ud)
{
	struct testmod *t = ud;
	__atomic_store_n(&sleep_job_started, 1, __ATOMIC_SEQ_CST);
	uint64_t ms = fibril_config_duration_ms(t->m, "stop-job");
	usleep((useconds_t)(ms * 1000));
}

static void sleep_job_done(void *ud, int status)
{
	struct testmod *t = ud;
	trace(t->m, status ? "job-cancelled" : "job-done");
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
	t->m = m;
	fibril_module_set_data(m, t);
	if (fibril_config_bool(m, "handles") || fibril_config_string(m, "crash")[0]) {
		if (pipe(t->pipe))
			return -errno;
		t->sub = fibril_bus_subscribe(m, "tm." TM_NAME, 1, on_event, t);
		t->once = fibril_timer_add(m, 1, 0, on_once, t);
		t->repeat = fibril_timer_add(m, 60000, 60000, on_repeat, t);
		t->io = fibril_io_watch(m, t->pipe[0], FIBRIL_IO_READ, on_io, t);
#if FIBRIL_ABI_MINOR >= 1
		t->sig = fibril_signal_watch(m, SIGUSR2, on_signal, t);
		if (!t->sig)
			return -ENOMEM;
#endif
		if (!t->sub || !t->once || !t->repeat || !t->io)
			return -ENOMEM;
	}
	if (fibril_config_duration_ms(m, "tick"))
		t->tick = fibril_timer_add(m, fibril_config_duration_ms(m, "tick"),
					   fibril_config_duration_ms(m, "tick"), on_tick, m);
#if FIBRIL_ABI_MINOR >= 4
	if (fibril_api_route(m, "GET", "/v1/tm/" TM_NAME "/later", 0, later, t))
		return -ENOMEM;
#endif
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
	const char *waiting = fibril_config_string(m, "degraded");
	if (waiting && *waiting)
		fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "running");
	fibril_module_start_done(m, 0);
}

static int tm_start(struct fibril_module *m)
{
	struct testmod *t = fibril_module_data(m);
	trace(m, "start");
	if (crash_in(m, "start"))
		crash_now();
	if (crash_in(m, "bus"))
		fibril_bus_publish(m, "tm." TM_NAME, 1, "boom", 4);
	if (crash_in(m, "job"))
		fibril_work_submit(m, crash_job, NULL, t);
	if (fibril_config_bool(m, "hang-start"))
		for (;;)
			pause();
	uint64_t delay = fibril_config_duration_ms(m, "async-start");
	if (delay) {
		/* what the pending start waits for, as a real module says it */
		const char *waiting = fibril_config_string(m, "degraded");
		if (waiting && *waiting)
			fibril_health_report(m, NULL, FIBRIL_HEALTH_DEGRADED, "%s", waiting);
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
	struct testmod *t = fibril_module_data(m);
	if (crash_in(m, "stop"))
		crash_now();
#if FIBRIL_ABI_MINOR >= 4
	later_answer_all(t);
#endif
	if (fibril_config_bool(m, "handles"))
		release_handles(t);
	if (fibril_config_duration_ms(m, "stop-job")) {
		__atomic_store_n(&sleep_job_started, 0, __ATOMIC_SEQ_CST);
		if (fibril_work_submit(m, sleep_job, sleep_job_done, t) == 0)
			for (int i = 0; i < 10000 && !__atomic_load_n(&sleep_job_started, __ATOMIC_SEQ_CST); i++)
				usleep(1000);
	}
	if (fibril_config_bool(m, "hang-stop"))
		for (;;)
			pause();
}

/* For the loader's tests: constructors that must never run in a module
 * the loader refuses (it reads the descriptor from the file first). */
#ifdef TM_CTOR_FILE
__attribute__((constructor)) static void tm_ctor_write(void)
{
	FILE *f = fopen(TM_CTOR_FILE, "w");
	if (f)
		fclose(f);
}
#endif
#ifdef TM_CTOR_CRASH
__attribute__((constructor)) static void tm_ctor_crash(void)
{
	crash_now();
}
#endif

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
	{.name = "handles", .type = FIBRIL_CONFIG_BOOL, .default_value = "false",
	 .help = "hold a subscription, timers, an fd and a signal watch; release them in stop and fini, twice"},
	{.name = "crash", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "crash in: start, timer, bus, job, stop or route (its echo route handler)"},
	{.name = "stop-job", .type = FIBRIL_CONFIG_DURATION, .default_value = "0",
	 .help = "in stop, submit a worker job that runs this long", .min = 0, .max = 3600000},
	{.name = "tick", .type = FIBRIL_CONFIG_DURATION, .default_value = "0",
	 .help = "append 'tick NAME' to the trace this often", .min = 0, .max = 3600000},
	{.name = "count", .type = FIBRIL_CONFIG_INT, .default_value = "1", .help = "a bounded integer",
	 .min = 1, .max = 100},
	{0},
};

FIBRIL_MODULE(.name = TM_NAME, .version = "0.0.1", .description = "test module",
	      .provides = TM_PROVIDES, .requires = TM_REQUIRES, .wants = TM_WANTS,
	      .config_keys = tm_keys, .init = tm_init, .start = tm_start, .stop = tm_stop,
	      .fini = tm_fini TM_DESC_EXTRA);
