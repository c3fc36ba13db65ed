/* modules/common/libbpf_log.c - libbpf's messages into a module's log
 * (libbpf_log.h). libbpf has one global print function; the module being
 * logged to is per thread: a module sets it on the loop thread around one
 * load, and a message libbpf prints meanwhile on another thread (a worker's
 * load, which keeps its verifier log in a buffer of its own) is dropped
 * rather than put in that module's log. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <fibril/fibril.h>

#include "libbpf_log.h"

static __thread struct fibril_module *g_print_module;

static __attribute__((format(printf, 2, 0))) int
print_to_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[1024];
	if (level == LIBBPF_DEBUG || !g_print_module)
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	size_t n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	/* libbpf starts most of its messages with its own "libbpf: " */
	const char *text = line;
	if (!strncmp(text, "libbpf: ", 8))
		text += 8;
	if (*text)
		fibril_warn(g_print_module, "libbpf: %s", text);
	return 0;
}

static int print_nothing(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	(void)level;
	(void)fmt;
	(void)ap;
	return 0;
}

libbpf_print_fn_t modcommon_libbpf_log_begin(struct fibril_module *m)
{
	g_print_module = m;
	return libbpf_set_print(print_to_log);
}

void modcommon_libbpf_log_end(libbpf_print_fn_t old)
{
	libbpf_set_print(old);
	g_print_module = NULL;
}

void modcommon_libbpf_log_off(void)
{
	libbpf_set_print(NULL);
}

libbpf_print_fn_t modcommon_libbpf_quiet_begin(void)
{
	return libbpf_set_print(print_nothing);
}
