/* tests/unit/test_loop_timers.c - unit tests of when the event loop
 * (host/loop.c) runs a timer armed inside a timer callback: two sliced jobs
 * that re-arm themselves must not hand the loop to each other within one
 * timers phase (each runs at most once per turn, and I/O runs in between), a
 * zero-delay timer re-armed in its callback waits for the next turn, and a
 * timer armed after a long callback counts from the clock (not early) and
 * is not waited for much longer than asked either. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cunit_main.h"
#include "internal.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static void begin(void)
{
	bus_fini();
	loop_fini();
	CU_ASSERT_EQUAL_FATAL(loop_init(), 0);
	CU_ASSERT_EQUAL_FATAL(bus_init(), 0);
}

static void finish(void)
{
	bus_fini();
	loop_fini();
}

static void busy_ms(double ms)
{
	double end = mono_ms() + ms;
	while (mono_ms() < end)
		;
}

/* ---- two sliced jobs ------------------------------------------------------------------------ */

struct slicer {
	unsigned slices_left;
	unsigned ran;       /* slices run in all */
	unsigned ran_turn;  /* slices run in the current turn of the loop */
	unsigned max_turn;  /* the most in one turn */
	unsigned *all_turn; /* both jobs' slices in the current turn */
};

/* One slice of a job: 3 ms of work, then the next slice 1 ms later (as the
 * endpoint restore and the datapath's re-apply do). */
static void slice(struct fibril_timer *t, void *ud)
{
	struct slicer *s = ud;
	(void)t;
	busy_ms(3);
	s->ran++;
	if (++s->ran_turn > s->max_turn)
		s->max_turn = s->ran_turn;
	(*s->all_turn)++;
	if (--s->slices_left)
		CU_ASSERT_PTR_NOT_NULL(fibril_timer_add(NULL, 1, 0, slice, s));
	(void)fibril_now_ms(); /* reading the time must not make the other due */
}

struct pipe_watch {
	unsigned fired;
	unsigned slices_before; /* timer slices run before the first read */
	const struct slicer *a, *b;
};

static void on_readable(struct fibril_io *io, int fd, uint32_t events, void *ud)
{
	struct pipe_watch *w = ud;
	char buf[16];
	(void)events;
	if (read(fd, buf, sizeof(buf)) <= 0)
		return;
	if (!w->fired++)
		w->slices_before = w->a->ran + w->b->ran;
	fibril_io_remove(io);
}

static void t_sliced_jobs_do_not_ping_pong(void)
{
	begin();
	unsigned turn = 0;
	struct slicer a = {.slices_left = 40, .all_turn = &turn};
	struct slicer b = {.slices_left = 40, .all_turn = &turn};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 1, 0, slice, &a));
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 1, 0, slice, &b));
	int p[2];
	CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
	struct pipe_watch w = {.a = &a, .b = &b};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_io_watch(NULL, p[0], FIBRIL_IO_READ, on_readable, &w));
	CU_ASSERT_EQUAL_FATAL(write(p[1], "x", 1), 1);
	busy_ms(5); /* both first slices are due at the first turn */
	double deadline = mono_ms() + 20000;
	unsigned max_turn_both = 0;
	while ((a.slices_left || b.slices_left) && mono_ms() < deadline) {
		a.ran_turn = b.ran_turn = turn = 0;
		loop_run_once(false); /* one timers phase (UV_RUN_ONCE has two) */
		if (turn > max_turn_both)
			max_turn_both = turn;
	}
	CU_ASSERT_EQUAL(a.ran, 40);
	CU_ASSERT_EQUAL(b.ran, 40);
	/* each job once per turn of the loop, never the two of them in turn
	 * until both are done */
	if (a.max_turn > 1 || b.max_turn > 1)
		fprintf(stderr, "\n  one turn ran %u slices of a and %u of b (at most 1 each)\n",
			a.max_turn, b.max_turn);
	CU_ASSERT(a.max_turn <= 1);
	CU_ASSERT(b.max_turn <= 1);
	CU_ASSERT(max_turn_both <= 2);
	/* the pipe was read while the jobs still had slices to run */
	CU_ASSERT_EQUAL(w.fired, 1);
	if (w.slices_before > 4)
		fprintf(stderr, "\n  the pipe was read after %u slices (at most 4)\n", w.slices_before);
	CU_ASSERT(w.slices_before <= 4);
	close(p[0]);
	close(p[1]);
	finish();
}

/* ---- a zero-delay timer re-armed in its callback -------------------------------------------- */

struct zero_rearm {
	unsigned fired, fired_turn, max_turn;
};

static void zero_again(struct fibril_timer *t, void *ud)
{
	struct zero_rearm *z = ud;
	z->fired++;
	if (++z->fired_turn > z->max_turn)
		z->max_turn = z->fired_turn;
	if (z->fired < 200)
		CU_ASSERT_EQUAL(fibril_timer_rearm(t, 0, 0), 0);
}

static void t_zero_delay_rearm_waits_for_next_turn(void)
{
	begin();
	struct zero_rearm z = {0};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 0, 0, zero_again, &z));
	double deadline = mono_ms() + 20000;
	while (z.fired < 200 && mono_ms() < deadline) {
		z.fired_turn = 0;
		loop_run_once(false); /* one timers phase, one poll */
	}
	CU_ASSERT_EQUAL(z.fired, 200);
	if (z.max_turn > 1)
		fprintf(stderr, "\n  one turn ran the timer %u times (at most 1)\n", z.max_turn);
	CU_ASSERT(z.max_turn <= 1);
	finish();
}

/* ---- a timer armed after a long callback ---------------------------------------------------- */

struct late_arm {
	double armed_at, fired_at;
	bool done;
};

static void late_fired(struct fibril_timer *t, void *ud)
{
	struct late_arm *l = ud;
	(void)t;
	l->fired_at = mono_ms();
	l->done = true;
	loop_stop();
}

/* Holds the loop 400 ms, then arms a 30 ms timer. */
static void long_callback(struct fibril_timer *t, void *ud)
{
	struct late_arm *l = ud;
	(void)t;
	busy_ms(400);
	l->armed_at = mono_ms();
	CU_ASSERT_PTR_NOT_NULL(fibril_timer_add(NULL, 30, 0, late_fired, l));
}

static void t_timer_after_long_callback_counts_from_clock(void)
{
	begin();
	struct late_arm l = {0};
	CU_ASSERT_PTR_NOT_NULL_FATAL(fibril_timer_add(NULL, 1, 0, long_callback, &l));
	/* a guard: the run ends in 5 s at the latest */
	struct late_arm guard = {0};
	struct fibril_timer *g = fibril_timer_add(NULL, 5000, 0, late_fired, &guard);
	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	/* due when the turn begins: the long callback runs in the timers phase
	 * before the poll, whose timeout is then computed (as in the agent,
	 * UV_RUN_DEFAULT) */
	busy_ms(5);
	loop_run();
	CU_ASSERT_FATAL(l.done);
	fibril_timer_cancel(g);
	double waited = l.fired_at - l.armed_at;
	fprintf(stderr, "\n  a 30 ms timer armed after a 400 ms callback fired after %.1f ms\n",
		waited);
	CU_ASSERT(waited >= 29.0); /* not early: from the clock, not the stale time */
	CU_ASSERT(waited < 300.0); /* not the callback's 400 ms late either */
	finish();
}

FIBRIL_TEST_MAIN("loop_timers", NULL, NULL,
		 FIBRIL_TEST(t_sliced_jobs_do_not_ping_pong),
		 FIBRIL_TEST(t_zero_delay_rearm_waits_for_next_turn),
		 FIBRIL_TEST(t_timer_after_long_callback_counts_from_clock))
