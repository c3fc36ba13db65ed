/* tests/bpf/prog_check.h - what the BPF_PROG_RUN tests (dp_prog_test.c,
 * lb_prog_test.c) share: check() prints one PASS/FAIL line per check and
 * counts it in g_passed / g_failed; prog_test_netns() moves the test into
 * a network namespace of its own (root needed: else a skip, a failure in
 * CI). Included by one test program each, after _GNU_SOURCE. */
#ifndef FIBRIL_TESTS_PROG_CHECK_H
#define FIBRIL_TESTS_PROG_CHECK_H

#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_passed, g_failed;
static bool g_ci; /* CI=true: what cannot run fails */

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s: ", ok ? "PASS" : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	if (ok)
		g_passed++;
	else
		g_failed++;
}

/* 0 in a new network namespace, else the exit status (77: skip, 1 in CI) */
static int prog_test_netns(void)
{
	g_ci = getenv("CI") && !strcmp(getenv("CI"), "true");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0) {
		printf("%s: needs root (a network namespace and BPF)\n", g_ci ? "FAIL" : "SKIP");
		return g_ci ? 1 : 77;
	}
	return 0;
}

#endif
