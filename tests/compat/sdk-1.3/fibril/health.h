/* fibril/health.h - module health.
 *
 * A module reports OK, Degraded or Stopped with a message, for itself or for
 * a named sub-component ("etcd", "watch:pods"). The module's health is the
 * worst of its components. GET /v1/healthz answers 200 only while every
 * started module is OK. */
#ifndef FIBRIL_HEALTH_H
#define FIBRIL_HEALTH_H

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;

enum fibril_health_level {
	FIBRIL_HEALTH_OK = 0,
	FIBRIL_HEALTH_DEGRADED = 1,
	FIBRIL_HEALTH_STOPPED = 2,
};

/* component NULL means the module itself. */
void fibril_health_report(struct fibril_module *m, const char *component,
			  enum fibril_health_level level, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif
