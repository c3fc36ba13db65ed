/* host/crash.c - names the module whose code was running when the agent
 * dies of a fatal signal. The host pushes a record (module, what is running,
 * which topic/route/fd) on a per-thread stack around every call into module
 * code; a SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT handler, on an alternate
 * signal stack, writes one line with write(2) and re-raises the signal with
 * its default action, so the exit status and the core dump stay what they
 * would have been. Everything the handler touches is async-signal-safe. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t mono_ns_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static __thread struct crash_ctx *g_crash_top __attribute__((tls_model("initial-exec")));
static __thread bool g_altstack_set __attribute__((tls_model("initial-exec")));

void crash_enter(struct crash_ctx *c, const struct fibril_module *m, const char *what,
		 const char *detail, long num)
{
	c->m = m;
	c->what = what;
	c->detail = detail;
	c->num = num;
	c->prev = g_crash_top;
	c->t0_ns = m && loop_is_loop_thread() ? mono_ns_now() : 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	g_crash_top = c;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

void crash_leave(struct crash_ctx *c)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	g_crash_top = c->prev;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (c->t0_ns)
		loop_note_call(c->m, c->what, c->detail, mono_ns_now() - c->t0_ns);
}

bool crash_in_module_code(void)
{
	for (const struct crash_ctx *c = g_crash_top; c; c = c->prev)
		if (c->m)
			return true;
	return false;
}

/* ---- the handler ------------------------------------------------------- */

struct line {
	char buf[512];
	size_t len;
};

static void put(struct line *l, const char *s, size_t max)
{
	for (size_t i = 0; s && s[i] && i < max && l->len < sizeof(l->buf) - 2; i++)
		l->buf[l->len++] = s[i];
}

static void put_num(struct line *l, long v)
{
	char tmp[24];
	size_t n = 0;
	unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u && n < sizeof(tmp));
	if (v < 0)
		put(l, "-", 1);
	while (n && l->len < sizeof(l->buf) - 2)
		l->buf[l->len++] = tmp[--n];
}

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGFPE: return "SIGFPE";
	case SIGILL: return "SIGILL";
	case SIGABRT: return "SIGABRT";
	default: return "signal";
	}
}

static const int g_fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static void fatal_handler(int sig)
{
	int saved = errno;
	struct line l = {.len = 0};
	put(&l, "fibril-agent: fatal signal ", 32);
	put(&l, signal_name(sig), 16);
	const struct crash_ctx *c = g_crash_top;
	while (c && !c->m)
		c = c->prev; /* host code running for a module (e.g. a host timer) */
	if (c) {
		put(&l, " in module '", 16);
		put(&l, c->m->name, 64);
		put(&l, "' (", 4);
		put(&l, c->what, 64);
		if (c->detail) {
			put(&l, " '", 2);
			put(&l, c->detail, 128);
			put(&l, "'", 1);
		} else if (c->num >= 0) {
			put(&l, " ", 1);
			put_num(&l, c->num);
		}
		put(&l, ")", 1);
	} else {
		put(&l, " in the agent (no module code was running)", 64);
	}
	l.buf[l.len++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, l.buf, l.len);
	(void)ignored;
	/* Default action, unblocked: raise ends the process now (the exit
	 * status and core are the signal's); for a fault, returning would
	 * re-run the faulting instruction under the default action anyway. */
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	errno = saved;
}

/* Alternate signal stacks, static so nothing is allocated (or reported as
 * lost) for them: one for the loop thread, a few for worker threads (a
 * thread beyond them runs the handler on its own stack, which fails only on
 * a stack overflow). */
#define ALTSTACK_SIZE (64 * 1024)
#define ALTSTACKS 17
static char g_altstacks[ALTSTACKS][ALTSTACK_SIZE] __attribute__((aligned(16)));
static unsigned g_altstacks_used;

void crash_altstack_thread(void)
{
	if (g_altstack_set)
		return;
	g_altstack_set = true;
	/* One is set already (ASan sets its own on every thread, and unmaps
	 * it at thread exit): keep it. */
	stack_t cur;
	if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE))
		return;
	unsigned i = __atomic_fetch_add(&g_altstacks_used, 1, __ATOMIC_RELAXED);
	if (i >= ALTSTACKS)
		return;
	stack_t ss = {.ss_sp = g_altstacks[i], .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
	sigaltstack(&ss, NULL);
}

void crash_install(void)
{
	crash_altstack_thread();
	for (size_t i = 0; i < sizeof(g_fatal) / sizeof(g_fatal[0]); i++) {
		struct sigaction sa = {.sa_handler = fatal_handler, .sa_flags = SA_ONSTACK | SA_NODEFER};
		sigemptyset(&sa.sa_mask);
		sigaction(g_fatal[i], &sa, NULL);
	}
}
