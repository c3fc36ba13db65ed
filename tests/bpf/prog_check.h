/* tests/bpf/prog_check.h - the PASS/FAIL line of the BPF_PROG_RUN tests
 * (dp_prog_test.c, lb_prog_test.c): check() prints one line per check and
 * counts it in g_passed / g_failed. Included by one test program each. */
#ifndef FIBRIL_TESTS_PROG_CHECK_H
#define FIBRIL_TESTS_PROG_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int g_passed, g_failed;

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

#endif
