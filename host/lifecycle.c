/* host/lifecycle.c - runs the module lifecycle: init in start order, start
 * in dependency order (waiting on the loop for modules that finish their
 * start asynchronously), stop in reverse, fini. Each phase of each module is
 * timed. A failed start stops what already started, in reverse. A watchdog
 * thread ends the agent when a hook does not return within its timeout.
 *
 * Taking a module down (finish_module): wait - without running the loop, at
 * most the stop-timeout - for its running worker jobs and run their
 * completions; deliver what is queued on the bus and drop its
 * subscriptions; call its fini; then release whatever else it still holds
 * (routes, services, maps, timers, watches). Handles it releases itself in
 * stop or fini, even twice, are generation-checked (handles.c), so any order
 * is safe. Every hook runs inside a crash record (crash.c). */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- watchdog ------------------------------------------------------------ */

static pthread_mutex_t g_wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wd_cond; /* on CLOCK_MONOTONIC, made once */
static pthread_once_t g_wd_cond_once = PTHREAD_ONCE_INIT;
static pthread_t g_wd_thread;
static bool g_wd_running, g_wd_quit;
static double g_wd_deadline; /* mono_ms(); 0: disarmed */
static char g_wd_what[160];

static void watchdog_cond_init(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&g_wd_cond, &attr);
	pthread_condattr_destroy(&attr);
}

/* Sleeps while disarmed (no periodic wake-ups while the agent runs), and
 * until the deadline while armed; arming signals it to look again. */
static void *watchdog_main(void *arg)
{
	pthread_mutex_lock(&g_wd_lock);
	while (!g_wd_quit) {
		if (g_wd_deadline <= 0) {
			pthread_cond_wait(&g_wd_cond, &g_wd_lock);
			continue;
		}
		double left = g_wd_deadline - mono_ms();
		if (left <= 0) {
			host_error("%s did not return within its timeout; exiting", g_wd_what);
			_exit(1);
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		long long ns = (long long)ts.tv_nsec + (long long)(left * 1e6) + 1000000LL;
		ts.tv_sec += (time_t)(ns / 1000000000LL);
		ts.tv_nsec = (long)(ns % 1000000000LL);
		pthread_cond_timedwait(&g_wd_cond, &g_wd_lock, &ts);
	}
	pthread_mutex_unlock(&g_wd_lock);
	return NULL;
}

static void watchdog_arm(const struct fibril_module *m, const char *phase, uint64_t timeout_ms)
{
	pthread_once(&g_wd_cond_once, watchdog_cond_init);
	pthread_mutex_lock(&g_wd_lock);
	if (!g_wd_running) {
		g_wd_quit = false;
		if (pthread_create(&g_wd_thread, NULL, watchdog_main, NULL) == 0)
			g_wd_running = true;
	}
	snprintf(g_wd_what, sizeof(g_wd_what), "module %s: %s hook", m->name, phase);
	g_wd_deadline = timeout_ms ? mono_ms() + (double)timeout_ms : 0;
	pthread_cond_signal(&g_wd_cond);
	pthread_mutex_unlock(&g_wd_lock);
}

static void watchdog_disarm(void)
{
	pthread_mutex_lock(&g_wd_lock);
	g_wd_deadline = 0;
	pthread_mutex_unlock(&g_wd_lock);
}

static void watchdog_stop(void)
{
	pthread_once(&g_wd_cond_once, watchdog_cond_init);
	pthread_mutex_lock(&g_wd_lock);
	bool running = g_wd_running;
	g_wd_quit = true;
	g_wd_running = false;
	pthread_cond_signal(&g_wd_cond);
	pthread_mutex_unlock(&g_wd_lock);
	if (running)
		pthread_join(g_wd_thread, NULL);
}

/* ---- phases ---------------------------------------------------------------- */

static volatile bool g_start_interrupted;
static uint64_t g_stop_timeout_ms = 10000;

void lifecycle_set_stop_timeout(uint64_t timeout_ms)
{
	g_stop_timeout_ms = timeout_ms;
}

void lifecycle_interrupt_start(void)
{
	g_start_interrupted = true;
}

static const char *error_text(struct fibril_module *m, int rc)
{
	if (!m->error[0])
		snprintf(m->error, sizeof(m->error), "%s", strerror(rc < 0 ? -rc : EIO));
	return m->error;
}

/* Jobs still running after the stop-timeout run module code that is about
 * to be unloaded: nothing safe is left to do but say so and exit. */
static void drain_jobs_or_exit(struct fibril_module *m, const char *when)
{
	unsigned left = loop_drain_owner_jobs(m, g_stop_timeout_ms);
	if (!left)
		return;
	host_error("module %s: %u worker job%s still running %llu ms %s (stop-timeout); exiting "
		   "without unloading it", m->name, left, left == 1 ? "" : "s",
		   (unsigned long long)g_stop_timeout_ms, when);
	_exit(1);
}

void module_release_resources(struct fibril_module *m)
{
	drain_jobs_or_exit(m, "after its fini");
	api_release_owner(m);
	metrics_release_owner(m);
	bus_release_owner(m);
	service_release_owner(m);
	maps_release_owner(m);
	loop_release_owner(m);
}

static void run_fini(struct fibril_module *m)
{
	double t0 = mono_ms();
	struct crash_ctx cc;
	watchdog_arm(m, "fini", g_stop_timeout_ms);
	crash_enter(&cc, m, "fini hook", NULL, -1);
	m->desc.fini(m);
	crash_leave(&cc);
	watchdog_disarm();
	m->fini_ms = mono_ms() - t0;
}

/* fini first, then release what is left (see the top of the file). */
static void finish_module(struct fibril_module *m)
{
	drain_jobs_or_exit(m, "after its stop");
	bus_release_owner(m);
	if (m->initialized && m->desc.fini)
		run_fini(m);
	m->initialized = false;
	module_release_resources(m);
}

int lifecycle_init_all(struct module_set *set, uint64_t timeout_ms, char *err)
{
	for (size_t i = 0; i < set->norder; i++) {
		struct fibril_module *m = set->order[i];
		double t0 = mono_ms();
		int rc = 0;
		if (m->desc.init) {
			struct crash_ctx cc;
			watchdog_arm(m, "init", timeout_ms);
			crash_enter(&cc, m, "init hook", NULL, -1);
			rc = m->desc.init(m);
			crash_leave(&cc);
			watchdog_disarm();
		}
		m->init_ms = mono_ms() - t0;
		if (rc) {
			m->state = MODULE_FAILED;
			errbuf_set(err, "module %s (%s): init failed: %s", m->name, m->path,
				   error_text(m, rc));
			for (size_t j = i + 1; j-- > 0;)
				finish_module(set->order[j]); /* [i] failed: no fini */
			return -1;
		}
		m->state = MODULE_INITIALIZED;
		m->initialized = true;
	}
	return 0;
}

static void on_start_timeout(struct fibril_timer *t, void *ud)
{
	struct fibril_module *m = ud;
	if (m->start_pending) {
		fibril_module_set_error(m, "start did not complete within the start timeout");
		m->start_pending = false;
		m->start_rc = -ETIMEDOUT;
	}
}

/* While a module's start is pending, systemd's STATUS= says which module
 * the start waits for, for how long, and what the module reports (its
 * health message: "etcd: connecting to 127.0.0.1:2379: ..."), refreshed
 * every 2 s, so `systemctl status` shows why READY=1 has not come. */
static void on_start_status(struct fibril_timer *t, void *ud)
{
	(void)t;
	const struct fibril_module *m = ud;
	const char *why = NULL;
	health_of(m, &why);
	char status[512];
	snprintf(status, sizeof(status), "STATUS=starting module %s: waiting %.0f s%s%s", m->name,
		 (mono_ms() - m->start_began_ms) / 1000.0, why && *why ? ": " : "", why ? why : "");
	host_notify(status);
	start_status_waiting(status + strlen("STATUS=starting "));
}

/* Run one module's start, waiting on the loop when it completes later. */
static int start_one(struct fibril_module *m, uint64_t timeout_ms)
{
	if (!m->desc.start)
		return 0;
	m->start_pending = false;
	m->start_rc = 0;
	struct crash_ctx cc;
	watchdog_arm(m, "start", timeout_ms);
	crash_enter(&cc, m, "start hook", NULL, -1);
	double t0 = mono_ms();
	int rc = m->desc.start(m);
	m->start_hook_ms = mono_ms() - t0;
	crash_leave(&cc);
	watchdog_disarm();
	if (rc != FIBRIL_START_PENDING)
		return rc;
	m->start_pending = true;
	m->start_began_ms = mono_ms();
	struct fibril_timer *t = fibril_timer_add(NULL, timeout_ms, 0, on_start_timeout, m);
	struct fibril_timer *status = fibril_timer_add(NULL, 2000, 2000, on_start_status, m);
	/* The loop runs here, from the agent's main and never from inside a
	 * callback or hook (checked: libuv's loop is not re-entrant), so the
	 * modules already started keep working while this one finishes. */
	if (crash_in_module_code()) {
		host_error("module %s: the agent was started from inside module code", m->name);
		abort();
	}
	while (m->start_pending && !g_start_interrupted)
		loop_run_once(true);
	if (m->start_pending) {
		m->start_pending = false;
		fibril_module_set_error(m, "start interrupted by a stop signal");
		m->start_rc = -EINTR;
	}
	if (m->start_rc != -ETIMEDOUT)
		fibril_timer_cancel(t);
	fibril_timer_cancel(status);
	return m->start_rc;
}

static void stop_one(struct fibril_module *m, uint64_t timeout_ms)
{
	double t0 = mono_ms();
	m->state = MODULE_STOPPING;
	if (m->desc.stop) {
		struct crash_ctx cc;
		watchdog_arm(m, "stop", timeout_ms);
		crash_enter(&cc, m, "stop hook", NULL, -1);
		m->desc.stop(m);
		crash_leave(&cc);
		watchdog_disarm();
	}
	m->stop_ms = mono_ms() - t0;
	m->state = MODULE_STOPPED;
}

int lifecycle_start_all(struct module_set *set, uint64_t timeout_ms, char *err)
{
	for (size_t i = 0; i < set->norder; i++) {
		struct fibril_module *m = set->order[i];
		if (g_start_interrupted) {
			errbuf_set(err, "start interrupted by a stop signal before module %s", m->name);
			goto rollback;
		}
		m->state = MODULE_STARTING;
		double t0 = mono_ms();
		int rc = start_one(m, timeout_ms);
		m->start_ms = mono_ms() - t0;
		bus_flush();
		if (rc) {
			m->state = MODULE_FAILED;
			errbuf_set(err, "module %s failed to start: %s", m->name, error_text(m, rc));
			host_error("%s", err);
			goto rollback;
		}
		m->state = MODULE_RUNNING;
		host_debug("module %s started in %.3f ms", m->name, m->start_ms);
		/* one turn of the loop between two starts: what the modules
		 * started so far wait for (timers, sockets) never waits for the
		 * sum of the next hooks (from the agent's main, not a callback) */
		if (!crash_in_module_code())
			loop_run_once(false);
		continue;
rollback:;
		char stopped[ERRBUF_LEN] = "";
		size_t off = 0;
		for (size_t j = i; j-- > 0;) {
			stop_one(set->order[j], timeout_ms);
			off += (size_t)snprintf(stopped + off, off < sizeof(stopped) ? sizeof(stopped) - off : 0,
						"%s%s", off ? ", " : "", set->order[j]->name);
		}
		size_t len = strlen(err);
		snprintf(err + len, ERRBUF_LEN - len, "; %s%s", off ? "stopped: " : "nothing else was started",
			 stopped);
		watchdog_stop();
		return -1;
	}
	return 0;
}

void lifecycle_stop_all(struct module_set *set, uint64_t timeout_ms)
{
	for (size_t i = set->norder; i-- > 0;) {
		struct fibril_module *m = set->order[i];
		if (m->state == MODULE_RUNNING)
			stop_one(m, timeout_ms);
		bus_flush();
	}
	watchdog_stop();
}

void lifecycle_fini_all(struct module_set *set)
{
	bus_flush();
	for (size_t i = set->norder; i-- > 0;)
		finish_module(set->order[i]);
	watchdog_stop();
}
