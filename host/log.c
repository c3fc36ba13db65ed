/* host/log.c - the agent's log: one line per message on stderr with a UTC
 * timestamp, the level and the module ("agent" for the host itself). */
#include "internal.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static enum fibril_log_level g_level = FIBRIL_LOG_INFO;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_level(enum fibril_log_level level)
{
	g_level = level;
}

int log_parse_level(const char *s, enum fibril_log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*out = (enum fibril_log_level)i;
			return 0;
		}
	}
	return -1;
}

static __attribute__((format(printf, 3, 0))) void log_line(const char *who, enum fibril_log_level level,
							   const char *fmt, va_list ap)
{
	if (level > g_level)
		return;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	char msg[2048];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	pthread_mutex_lock(&g_log_lock);
	fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s: %s\n", tm.tm_year + 1900,
		tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		(long)(tv.tv_usec / 1000), level_names[level], who, msg);
	pthread_mutex_unlock(&g_log_lock);
}

void host_log(enum fibril_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_line("agent", level, fmt, ap);
	va_end(ap);
}

void fibril_log(struct fibril_module *m, enum fibril_log_level level, const char *fmt, ...)
{
	if ((int)level < 0 || level > FIBRIL_LOG_DEBUG)
		level = FIBRIL_LOG_INFO;
	va_list ap;
	va_start(ap, fmt);
	log_line(m ? m->name : "agent", level, fmt, ap);
	va_end(ap);
}
