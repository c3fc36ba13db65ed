/* fibril/log.h - logging from modules. One line per call, to the agent's
 * log (stderr), prefixed with the time, the level and the module's name. */
#ifndef FIBRIL_LOG_H
#define FIBRIL_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;

enum fibril_log_level {
	FIBRIL_LOG_ERROR = 0,
	FIBRIL_LOG_WARN,
	FIBRIL_LOG_INFO,
	FIBRIL_LOG_DEBUG,
};

void fibril_log(struct fibril_module *m, enum fibril_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define fibril_error(m, ...) fibril_log((m), FIBRIL_LOG_ERROR, __VA_ARGS__)
#define fibril_warn(m, ...) fibril_log((m), FIBRIL_LOG_WARN, __VA_ARGS__)
#define fibril_info(m, ...) fibril_log((m), FIBRIL_LOG_INFO, __VA_ARGS__)
#define fibril_debug(m, ...) fibril_log((m), FIBRIL_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
