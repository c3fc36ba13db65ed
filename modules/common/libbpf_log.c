/* modules/common/libbpf_log.c - libbpf's messages into a module's log
 * (libbpf_log.h). libbpf has one global print function, so the module being
 * logged to is a global too: a module sets it only on the loop thread,
 * around one load. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <fibril/fibril.h>

#include "libbpf_log.h"

static struct fibril_module *g_print_module;

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
	if (n)
		fibril_warn(g_print_module, "libbpf: %s", line);
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

libbpf_print_fn_t modcommon_libbpf_quiet_begin(void)
{
	return libbpf_set_print(print_nothing);
}
