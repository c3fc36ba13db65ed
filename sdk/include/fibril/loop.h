/* fibril/loop.h - the agent's event loop as modules see it: timers, fd
 * watches, signal watches, deferred calls and work on the worker pool.
 *
 * There is one loop thread. Every callback below runs on it, so module state
 * touched only from callbacks needs no locking. Work submitted to the pool
 * runs on a worker thread; its completion runs back on the loop. Nothing
 * here exposes the library underneath. */
#ifndef FIBRIL_LOOP_H
#define FIBRIL_LOOP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_timer;
struct fibril_io;
struct fibril_signal;

typedef void (*fibril_timer_fn)(struct fibril_timer *t, void *ud);
/* Fires first_ms after the call (counted from the clock), then every
 * repeat_ms (0: once, then freed). One armed or re-armed inside a timer
 * callback runs on a later turn of the loop, after its poll (at least 1 ms
 * later): a job that re-arms itself between slices lets I/O run. */
struct fibril_timer *fibril_timer_add(struct fibril_module *m, uint64_t first_ms,
				      uint64_t repeat_ms, fibril_timer_fn cb, void *ud);
/* Re-arm an existing timer. */
int fibril_timer_rearm(struct fibril_timer *t, uint64_t first_ms, uint64_t repeat_ms);
/* Stop and free; safe inside its own callback. */
void fibril_timer_cancel(struct fibril_timer *t);

#define FIBRIL_IO_READ 1u
#define FIBRIL_IO_WRITE 2u
#define FIBRIL_IO_ERROR 4u /* in revents only: error or hang-up; the watch is
			    * stopped after this callback (fibril_io_update
			    * starts it again) */
typedef void (*fibril_io_fn)(struct fibril_io *io, int fd, uint32_t revents, void *ud);
struct fibril_io *fibril_io_watch(struct fibril_module *m, int fd, uint32_t events,
				  fibril_io_fn cb, void *ud);
int fibril_io_update(struct fibril_io *io, uint32_t events);
/* Stop watching (the fd stays open; it is the caller's). */
void fibril_io_remove(struct fibril_io *io);

/* Run cb on the loop thread soon. Safe to call from any thread. */
typedef void (*fibril_call_fn)(void *ud);
int fibril_defer(struct fibril_module *m, fibril_call_fn cb, void *ud);

/* Run work(ud) on the worker pool, then done(ud, status) on the loop thread;
 * status is 0, or -ECANCELED when the job never ran (agent stopping). */
typedef void (*fibril_work_fn)(void *ud);
typedef void (*fibril_done_fn)(void *ud, int status);
int fibril_work_submit(struct fibril_module *m, fibril_work_fn work,
		       fibril_done_fn done, void *ud);

/* ABI 1.1: watch a signal (not SIGTERM/SIGINT, which stop the agent). */
typedef void (*fibril_signal_fn)(struct fibril_signal *s, int signum, void *ud);
struct fibril_signal *fibril_signal_watch(struct fibril_module *m, int signum,
					  fibril_signal_fn cb, void *ud);
void fibril_signal_remove(struct fibril_signal *s);

/* Monotonic milliseconds (CLOCK_MONOTONIC), read afresh. */
uint64_t fibril_now_ms(void);

#ifdef __cplusplus
}
#endif
#endif
