/* host/loop.c - the agent's single event loop (libuv underneath): timers,
 * fd watches, signal watches, deferred calls from any thread, and jobs on
 * libuv's worker pool whose completions run back on the loop. Every handle
 * remembers the module that made it, so the host can undo all of a module's
 * handles before it unloads the module. What a module holds is a
 * generation-checked handle (handles.c), so releasing one twice, or after the
 * host released it, is harmless. Every call into module code is wrapped in a
 * crash record (crash.c). Nothing here runs the loop from inside a callback:
 * a module's running worker jobs are waited for on a condition variable, not
 * by running other modules' callbacks. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

enum handle_kind { KIND_TIMER, KIND_IO, KIND_SIGNAL };

/* Every live timer/io/signal handle, for release by owner. */
struct owned_handle {
	enum handle_kind kind;
	struct fibril_module *owner;
	void *h; /* what the module holds (handles.c) */
	struct owned_handle *prev, *next;
	bool closing;
};

struct fibril_timer {
	struct owned_handle link;
	uv_timer_t uv;
	fibril_timer_fn cb;
	void *ud;
	bool one_shot;
};

struct fibril_io {
	struct owned_handle link;
	uv_poll_t uv;
	fibril_io_fn cb;
	void *ud;
	int fd;
};

struct fibril_signal {
	struct owned_handle link;
	uv_signal_t uv;
	fibril_signal_fn cb;
	void *ud;
};

struct deferred_call {
	struct fibril_module *owner;
	fibril_call_fn cb;
	void *ud;
	struct deferred_call *next;
};

struct work_job {
	uv_work_t uv;
	struct fibril_module *owner;
	fibril_work_fn work;
	fibril_done_fn done;
	void *ud;
	struct work_job *prev, *next;
	/* under g_jobs_lock: */
	bool running, finished;
	/* loop thread only: */
	bool cancelled, draining, completed; /* completed: done() already ran */
};

static pthread_mutex_t g_jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_jobs_cond; /* on CLOCK_MONOTONIC */
static pthread_once_t g_jobs_cond_once = PTHREAD_ONCE_INIT;
static uv_loop_t g_loop;
static bool g_loop_ready;
static struct owned_handle *g_handles;
static struct work_job *g_jobs;
static uv_async_t g_defer_async;
static pthread_mutex_t g_defer_lock = PTHREAD_MUTEX_INITIALIZER;
static struct deferred_call *g_defer_head, *g_defer_tail;
static uv_signal_t g_stop_signals[2];
static unsigned g_in_timer_cb; /* > 0: inside libuv's timers phase */
/* stalls: how long each iteration kept the loop from its poll (see below) */
static uv_check_t g_stall_check;
static bool g_stall_on;
static uint64_t g_stall_last_ns, g_stall_idle_ns, g_stall_begin_ns;
static struct loop_stall_stats g_stall;
static pthread_t g_loop_thread;
static uint64_t g_iter_call_ns; /* the longest module call of this iteration */
static char g_iter_call[160];
static void (*g_stop_cb)(int signum);
static int g_stop_signal_count;

static const enum handle_type g_handle_types[] = {
	[KIND_TIMER] = HANDLE_TIMER, [KIND_IO] = HANDLE_IO, [KIND_SIGNAL] = HANDLE_SIGNAL};

static void link_handle(struct owned_handle *h, enum handle_kind kind, struct fibril_module *owner)
{
	h->h = handle_new(g_handle_types[kind], h);
	h->kind = kind;
	h->owner = owner;
	h->prev = NULL;
	h->next = g_handles;
	if (g_handles)
		g_handles->prev = h;
	g_handles = h;
}

static void unlink_handle(struct owned_handle *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else if (g_handles == h)
		g_handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;
}

static void free_on_close(uv_handle_t *h)
{
	free(h->data);
}

static void close_owned(struct owned_handle *h, uv_handle_t *uvh)
{
	if (h->closing)
		return;
	h->closing = true;
	handle_drop(h->h, g_handle_types[h->kind]);
	unlink_handle(h);
	uvh->data = h; /* the owned_handle is the first member: the whole object */
	uv_close(uvh, free_on_close);
}

static void drain_deferred(uv_async_t *a);

int loop_init(void)
{
	if (g_loop_ready)
		return 0;
	int rc = uv_loop_init(&g_loop);
	if (rc)
		return rc;
	rc = uv_async_init(&g_loop, &g_defer_async, drain_deferred);
	if (rc)
		return rc;
	uv_unref((uv_handle_t *)&g_defer_async);
	/* the time spent waiting in the poll, for the stall measurement */
	if ((rc = uv_loop_configure(&g_loop, UV_METRICS_IDLE_TIME)))
		return rc;
	if ((rc = uv_check_init(&g_loop, &g_stall_check)))
		return rc;
	uv_unref((uv_handle_t *)&g_stall_check);
	g_in_timer_cb = 0;
	g_stall_on = false;
	memset(&g_stall, 0, sizeof(g_stall));
	g_loop_thread = pthread_self();
	g_loop_ready = true;
	return 0;
}

void *loop_uv(void)
{
	return &g_loop;
}

int loop_run(void)
{
	uv_run(&g_loop, UV_RUN_DEFAULT);
	return 0;
}

void loop_run_once(bool block)
{
	uv_run(&g_loop, block ? UV_RUN_ONCE : UV_RUN_NOWAIT);
}

void loop_stop(void)
{
	uv_stop(&g_loop);
}

/* ---- stalls ---------------------------------------------------------------
 * A stall is the time the loop thread spent between two of its polls doing
 * anything but waiting in them: callbacks, a start hook run between two
 * iterations, a lock waited for. Measured after each poll (a check handle):
 * the wall time since the previous one less what the poll waited
 * (uv_metrics_idle_time). From loop_stall_begin() on, so a start's hooks
 * count, the loading of modules before it does not. */
bool loop_is_loop_thread(void)
{
	return g_loop_ready && pthread_equal(pthread_self(), g_loop_thread);
}

void loop_note_call(const struct fibril_module *m, const char *what, const char *detail,
		    uint64_t ns)
{
	if (!g_stall_on || ns <= g_iter_call_ns)
		return;
	g_iter_call_ns = ns;
	snprintf(g_iter_call, sizeof(g_iter_call), "module %s: %s%s%s%s (%.1f ms)", m->name, what,
		 detail ? " '" : "", detail ? detail : "", detail ? "'" : "", (double)ns / 1e6);
}

static void on_stall_check(uv_check_t *c)
{
	(void)c;
	uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(&g_loop);
	uint64_t wall = now - g_stall_last_ns, waited = idle - g_stall_idle_ns;
	double ms = wall > waited ? (double)(wall - waited) / 1e6 : 0;
	g_stall_last_ns = now;
	g_stall_idle_ns = idle;
	g_stall.iterations++;
	if (ms >= LOOP_STALL_SLOW_MS)
		g_stall.slow++;
	if (ms > g_stall.max_ms) {
		g_stall.max_ms = ms;
		g_stall.max_at_ms = (double)(now - g_stall_begin_ns) / 1e6;
		snprintf(g_stall.max_in, sizeof(g_stall.max_in), "%s", g_iter_call);
	}
	g_iter_call_ns = 0;
	g_iter_call[0] = '\0';
	metrics_loop_stall(ms / 1000.0);
}

void loop_stall_begin(void)
{
	if (!g_loop_ready || g_stall_on)
		return;
	g_stall_begin_ns = g_stall_last_ns = uv_hrtime();
	g_stall_idle_ns = uv_metrics_idle_time(&g_loop);
	g_iter_call_ns = 0;
	g_iter_call[0] = '\0';
	if (uv_check_start(&g_stall_check, on_stall_check) == 0)
		g_stall_on = true;
}

void loop_stall_end(void)
{
	if (g_stall_on)
		uv_check_stop(&g_stall_check);
	g_stall_on = false;
}

void loop_stall_stats(struct loop_stall_stats *out)
{
	*out = g_stall;
	if (!g_stall_on)
		return;
	/* the iteration running now (this call's own, or a stall in progress) */
	uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(&g_loop);
	uint64_t wall = now - g_stall_last_ns, waited = idle - g_stall_idle_ns;
	double ms = wall > waited ? (double)(wall - waited) / 1e6 : 0;
	if (ms > out->max_ms) {
		out->max_ms = ms;
		out->max_at_ms = (double)(now - g_stall_begin_ns) / 1e6;
		snprintf(out->max_in, sizeof(out->max_in), "%s", g_iter_call);
	}
}

uint64_t fibril_now_ms(void)
{
	/* the clock itself: the loop's cached time can be seconds old after
	 * a long callback (a deadline computed from it would be that much too
	 * early), and advancing it here would make timers come due in a
	 * timers phase that is running (see fresh_timeout) */
	return (uint64_t)mono_ms();
}

/* ---- timers ------------------------------------------------------------- */

static void timer_close(struct fibril_timer *t)
{
	if (t->link.closing)
		return;
	uv_timer_stop(&t->uv);
	close_owned(&t->link, (uv_handle_t *)&t->uv);
}

static void on_timer(uv_timer_t *uvt)
{
	struct fibril_timer *t = uvt->data;
	struct crash_ctx cc;
	crash_enter(&cc, t->link.owner, "timer callback", NULL, -1);
	g_in_timer_cb++;
	t->cb((struct fibril_timer *)t->link.h, t->ud);
	g_in_timer_cb--;
	crash_leave(&cc);
	/* a one-shot is freed after firing, unless its callback re-armed it */
	if (t->one_shot && !t->link.closing && !uv_is_active((uv_handle_t *)&t->uv))
		timer_close(t);
}

/* libuv counts a timer from the loop's cached "now", taken when the
 * iteration began: after a callback that held the loop for seconds, a
 * timeout armed from it would expire at once (a lease request given up after
 * 1 s of its 5), so a timer counts from the clock. Outside the timers phase
 * the cached time is simply advanced (uv_update_time). Inside it, libuv
 * (1.44) goes on running every timer due against the cached time until none
 * is: advanced there, two sliced jobs that each re-arm a 1 ms timer after a
 * 5 ms slice (the endpoint restore and the datapath's re-apply) handed the
 * loop to each other until both were done, never polling (seconds with
 * 10,000 endpoints). So there the cached time is left alone and the lag
 * behind the clock is added to the timeout, at least 1 ms: a timer armed in
 * a timer callback runs on a later turn of the loop, after its poll. It is
 * not waited for longer than asked either: with UV_METRICS_IDLE_TIME the
 * poll first looks without waiting, advances the cached time and takes
 * what passed off its timeout (tests/unit/test_loop_timers.c). */
static uint64_t fresh_timeout(uint64_t first_ms)
{
	if (!g_in_timer_cb) {
		uv_update_time(&g_loop);
		return first_ms;
	}
	double lag = (double)uv_hrtime() / 1e6 - (double)uv_now(&g_loop);
	uint64_t t = first_ms + (lag > 0 ? (uint64_t)lag : 0);
	return t ? t : 1;
}

struct fibril_timer *fibril_timer_add(struct fibril_module *m, uint64_t first_ms,
				      uint64_t repeat_ms, fibril_timer_fn cb, void *ud)
{
	if (!cb || !g_loop_ready) {
		errno = EINVAL;
		return NULL;
	}
	struct fibril_timer *t = xcalloc(1, sizeof(*t));
	t->cb = cb;
	t->ud = ud;
	t->one_shot = repeat_ms == 0;
	uv_timer_init(&g_loop, &t->uv);
	t->uv.data = t;
	link_handle(&t->link, KIND_TIMER, m);
	uv_timer_start(&t->uv, on_timer, fresh_timeout(first_ms), repeat_ms);
	return (struct fibril_timer *)t->link.h;
}

int fibril_timer_rearm(struct fibril_timer *h, uint64_t first_ms, uint64_t repeat_ms)
{
	struct fibril_timer *t = handle_get(h, HANDLE_TIMER);
	if (!t || t->link.closing)
		return -EINVAL;
	t->one_shot = repeat_ms == 0;
	return uv_timer_start(&t->uv, on_timer, fresh_timeout(first_ms), repeat_ms) ? -EINVAL : 0;
}

void fibril_timer_cancel(struct fibril_timer *h)
{
	struct fibril_timer *t = handle_get(h, HANDLE_TIMER);
	if (t)
		timer_close(t);
}

/* ---- fd watches ---------------------------------------------------------- */

static int to_uv_events(uint32_t events)
{
	return ((events & FIBRIL_IO_READ) ? UV_READABLE : 0) |
	       ((events & FIBRIL_IO_WRITE) ? UV_WRITABLE : 0) | UV_DISCONNECT;
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	struct fibril_io *io = p->data;
	uint32_t rev = 0;
	if (status < 0 || (events & UV_DISCONNECT))
		rev |= FIBRIL_IO_ERROR;
	if (events & UV_READABLE)
		rev |= FIBRIL_IO_READ;
	if (events & UV_WRITABLE)
		rev |= FIBRIL_IO_WRITE;
	struct crash_ctx cc;
	crash_enter(&cc, io->link.owner, "fd watch callback for fd", NULL, io->fd);
	io->cb((struct fibril_io *)io->link.h, io->fd, rev, io->ud);
	crash_leave(&cc);
}

struct fibril_io *fibril_io_watch(struct fibril_module *m, int fd, uint32_t events,
				  fibril_io_fn cb, void *ud)
{
	if (!cb || fd < 0 || !g_loop_ready) {
		errno = EINVAL;
		return NULL;
	}
	struct fibril_io *io = xcalloc(1, sizeof(*io));
	int rc = uv_poll_init(&g_loop, &io->uv, fd);
	if (rc) {
		free(io);
		errno = -rc;
		return NULL;
	}
	io->cb = cb;
	io->ud = ud;
	io->fd = fd;
	io->uv.data = io;
	link_handle(&io->link, KIND_IO, m);
	uv_poll_start(&io->uv, to_uv_events(events), on_poll);
	return (struct fibril_io *)io->link.h;
}

int fibril_io_update(struct fibril_io *h, uint32_t events)
{
	struct fibril_io *io = handle_get(h, HANDLE_IO);
	if (!io || io->link.closing)
		return -EINVAL;
	if (!events)
		return uv_poll_stop(&io->uv) ? -EINVAL : 0;
	return uv_poll_start(&io->uv, to_uv_events(events), on_poll) ? -EINVAL : 0;
}

static void io_close(struct fibril_io *io)
{
	if (io->link.closing)
		return;
	uv_poll_stop(&io->uv);
	close_owned(&io->link, (uv_handle_t *)&io->uv);
}

void fibril_io_remove(struct fibril_io *h)
{
	struct fibril_io *io = handle_get(h, HANDLE_IO);
	if (io)
		io_close(io);
}

/* ---- signal watches ------------------------------------------------------- */

static void on_signal(uv_signal_t *uvs, int signum)
{
	struct fibril_signal *s = uvs->data;
	struct crash_ctx cc;
	crash_enter(&cc, s->link.owner, "signal watch callback for signal", NULL, signum);
	s->cb((struct fibril_signal *)s->link.h, signum, s->ud);
	crash_leave(&cc);
}

struct fibril_signal *fibril_signal_watch(struct fibril_module *m, int signum,
					  fibril_signal_fn cb, void *ud)
{
	if (!cb || signum == SIGTERM || signum == SIGINT || !g_loop_ready) {
		errno = EINVAL;
		return NULL;
	}
	struct fibril_signal *s = xcalloc(1, sizeof(*s));
	uv_signal_init(&g_loop, &s->uv);
	s->cb = cb;
	s->ud = ud;
	s->uv.data = s;
	link_handle(&s->link, KIND_SIGNAL, m);
	if (uv_signal_start(&s->uv, on_signal, signum)) {
		close_owned(&s->link, (uv_handle_t *)&s->uv); /* freed on close */
		errno = EINVAL;
		return NULL;
	}
	return (struct fibril_signal *)s->link.h;
}

static void signal_close(struct fibril_signal *s)
{
	if (s->link.closing)
		return;
	uv_signal_stop(&s->uv);
	close_owned(&s->link, (uv_handle_t *)&s->uv);
}

void fibril_signal_remove(struct fibril_signal *h)
{
	struct fibril_signal *s = handle_get(h, HANDLE_SIGNAL);
	if (s)
		signal_close(s);
}

/* After the first stop signal the loop thread is busy stopping modules and
 * may be stuck in a hook, so the second signal is caught by a plain signal
 * handler, outside the loop, that ends the process at once. */
static void force_exit_handler(int signum)
{
	static const char msg[] = "fibril-agent: second signal: forcing exit\n";
	ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
	(void)ignored;
	_exit(128 + signum);
}

static void on_stop_signal(uv_signal_t *uvs, int signum)
{
	if (g_stop_signal_count++)
		force_exit_handler(signum); /* the second signal reached the loop first */
	struct sigaction sa = {.sa_handler = force_exit_handler};
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 2; i++)
		uv_signal_stop(&g_stop_signals[i]);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (g_stop_cb)
		g_stop_cb(signum);
}

int loop_watch_stop_signals(void (*cb)(int signum))
{
	static const int sigs[2] = {SIGTERM, SIGINT};
	g_stop_cb = cb;
	for (int i = 0; i < 2; i++) {
		uv_signal_init(&g_loop, &g_stop_signals[i]);
		uv_unref((uv_handle_t *)&g_stop_signals[i]);
		if (uv_signal_start(&g_stop_signals[i], on_stop_signal, sigs[i]))
			return -1;
	}
	return 0;
}

/* ---- deferred calls ----------------------------------------------------- */

static void drain_deferred(uv_async_t *a)
{
	pthread_mutex_lock(&g_defer_lock);
	struct deferred_call *list = g_defer_head;
	g_defer_head = g_defer_tail = NULL;
	pthread_mutex_unlock(&g_defer_lock);
	while (list) {
		struct deferred_call *next = list->next;
		struct crash_ctx cc;
		crash_enter(&cc, list->owner, "deferred call", NULL, -1);
		list->cb(list->ud);
		crash_leave(&cc);
		free(list);
		list = next;
	}
	bus_flush();
}

int fibril_defer(struct fibril_module *m, fibril_call_fn cb, void *ud)
{
	if (!cb || !g_loop_ready)
		return -EINVAL;
	struct deferred_call *d = xcalloc(1, sizeof(*d));
	d->owner = m;
	d->cb = cb;
	d->ud = ud;
	pthread_mutex_lock(&g_defer_lock);
	if (g_defer_tail)
		g_defer_tail->next = d;
	else
		g_defer_head = d;
	g_defer_tail = d;
	pthread_mutex_unlock(&g_defer_lock);
	uv_async_send(&g_defer_async);
	return 0;
}

void loop_wake(void)
{
	if (g_loop_ready)
		uv_async_send(&g_defer_async);
}

/* ---- worker pool --------------------------------------------------------- */

static void jobs_cond_init(void)
{
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&g_jobs_cond, &attr);
	pthread_condattr_destroy(&attr);
}

static void job_run(uv_work_t *w)
{
	struct work_job *j = w->data;
	crash_altstack_thread();
	pthread_mutex_lock(&g_jobs_lock);
	j->running = true;
	pthread_mutex_unlock(&g_jobs_lock);
	struct crash_ctx cc;
	crash_enter(&cc, j->owner, "worker job", NULL, -1);
	j->work(j->ud);
	crash_leave(&cc);
	pthread_mutex_lock(&g_jobs_lock);
	j->finished = true;
	pthread_cond_broadcast(&g_jobs_cond);
	pthread_mutex_unlock(&g_jobs_lock);
}

static void job_complete(struct work_job *j, int status)
{
	if (j->completed)
		return;
	j->completed = true;
	if (!j->done)
		return;
	struct crash_ctx cc;
	crash_enter(&cc, j->owner, "worker job completion", NULL, -1);
	j->done(j->ud, status);
	crash_leave(&cc);
}

static void job_done(uv_work_t *w, int status)
{
	struct work_job *j = w->data;
	if (j->prev)
		j->prev->next = j->next;
	else
		g_jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	job_complete(j, status == UV_ECANCELED || j->cancelled ? -ECANCELED : 0);
	free(j);
}

int fibril_work_submit(struct fibril_module *m, fibril_work_fn work, fibril_done_fn done, void *ud)
{
	if (!work || !g_loop_ready)
		return -EINVAL;
	struct work_job *j = xcalloc(1, sizeof(*j));
	j->owner = m;
	j->work = work;
	j->done = done;
	j->ud = ud;
	j->uv.data = j;
	int rc = uv_queue_work(&g_loop, &j->uv, job_run, job_done);
	if (rc) {
		free(j);
		return -EAGAIN;
	}
	j->next = g_jobs;
	if (g_jobs)
		g_jobs->prev = j;
	g_jobs = j;
	return 0;
}

unsigned loop_pending_work(struct fibril_module *owner)
{
	unsigned n = 0;
	for (struct work_job *j = g_jobs; j; j = j->next)
		if (j->owner == owner && !j->completed)
			n++;
	return n;
}

/* Caller holds g_jobs_lock. */
static unsigned jobs_still_running(const struct fibril_module *owner)
{
	unsigned n = 0;
	for (struct work_job *j = g_jobs; j; j = j->next)
		if (j->owner == owner && j->draining && !j->cancelled && !j->finished)
			n++;
	return n;
}

unsigned loop_drain_owner_jobs(struct fibril_module *owner, uint64_t timeout_ms)
{
	if (!g_loop_ready)
		return 0;
	pthread_once(&g_jobs_cond_once, jobs_cond_init);
	for (struct work_job *j = g_jobs; j; j = j->next) {
		if (j->owner != owner || j->completed)
			continue;
		j->draining = true;
		if (!j->cancelled && uv_cancel((uv_req_t *)&j->uv) == 0)
			j->cancelled = true; /* never ran; uv frees it later */
	}
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += (time_t)(timeout_ms / 1000);
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&g_jobs_lock);
	unsigned left;
	while ((left = jobs_still_running(owner)) &&
	       pthread_cond_timedwait(&g_jobs_cond, &g_jobs_lock, &deadline) != ETIMEDOUT)
		;
	left = jobs_still_running(owner);
	pthread_mutex_unlock(&g_jobs_lock);
	if (left)
		return left;
	/* Every collected job ran or was cancelled: run their completions
	 * here (libuv frees them later, without calling the module again). A
	 * completion may submit more jobs; those are not part of this drain. */
	for (;;) {
		struct work_job *j = g_jobs;
		while (j && !(j->owner == owner && j->draining && !j->completed))
			j = j->next;
		if (!j)
			break;
		job_complete(j, j->cancelled ? -ECANCELED : 0);
	}
	return 0;
}

/* ---- release ------------------------------------------------------------- */

static void release_deferred(struct fibril_module *owner)
{
	pthread_mutex_lock(&g_defer_lock);
	struct deferred_call **pp = &g_defer_head, *last = NULL;
	while (*pp) {
		struct deferred_call *d = *pp;
		if (d->owner == owner) {
			*pp = d->next;
			free(d);
			continue;
		}
		last = d;
		pp = &d->next;
	}
	g_defer_tail = last;
	pthread_mutex_unlock(&g_defer_lock);
}

void loop_release_owner(struct fibril_module *owner)
{
	if (!g_loop_ready)
		return;
	struct owned_handle *h = g_handles;
	while (h) {
		struct owned_handle *next = h->next;
		if (h->owner == owner) {
			switch (h->kind) {
			case KIND_TIMER:
				timer_close((struct fibril_timer *)h);
				break;
			case KIND_IO:
				io_close((struct fibril_io *)h);
				break;
			case KIND_SIGNAL:
				signal_close((struct fibril_signal *)h);
				break;
			}
		}
		h = next;
	}
	release_deferred(owner);
	/* Stopped handles call nothing any more; their closes complete (and
	 * free host memory only) the next time the loop runs. Queued jobs are
	 * cancelled and running ones waited for, with their completions run
	 * (the lifecycle has done so already, bounded by the stop-timeout); a
	 * job still left over never calls the module again. */
	loop_drain_owner_jobs(owner, 10000);
	for (struct work_job *j = g_jobs; j; j = j->next) {
		if (j->owner != owner)
			continue;
		if (!j->cancelled && uv_cancel((uv_req_t *)&j->uv) == 0)
			j->cancelled = true;
		j->completed = true;
	}
}

static void close_any(uv_handle_t *h, void *arg)
{
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void loop_fini(void)
{
	if (!g_loop_ready)
		return;
	loop_stall_end();
	loop_drain_owner_jobs(NULL, 60000);
	loop_release_owner(NULL);
	while (g_jobs)
		uv_run(&g_loop, UV_RUN_ONCE);
	release_deferred(NULL);
	uv_walk(&g_loop, close_any, NULL);
	uv_run(&g_loop, UV_RUN_DEFAULT);
	uv_loop_close(&g_loop);
	g_loop_ready = false;
	g_stop_cb = NULL;
	g_stop_signal_count = 0;
}
