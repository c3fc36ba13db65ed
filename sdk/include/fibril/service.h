/* fibril/service.h - the capability registry.
 *
 * A module provides a capability ("ipam", "kvstore", ...) as a table of
 * functions. Every table starts with struct fibril_service_header: its size
 * and its interface version. Interfaces grow only by appending functions and
 * bumping the version, so a consumer asks for the lowest version it needs
 * and an older provider that lacks newer functions is still usable. The
 * module must list the capability in its descriptor's `provides`. */
#ifndef FIBRIL_SERVICE_H
#define FIBRIL_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;

struct fibril_service_header {
	uint32_t sz;      /* sizeof the whole table as the provider built it */
	uint32_t version; /* interface version */
};

/* Register a table (call from init). ctx is passed back to consumers. */
int fibril_service_provide(struct fibril_module *m, const char *capability,
			   const struct fibril_service_header *table, void *ctx);

/* Find the chosen provider of a capability with at least min_version.
 * Returns the table (and its ctx in *ctx) or NULL (errno set: ENOENT none,
 * EPROTO too old). Call from start or later: providers are started first. */
const struct fibril_service_header *fibril_service_lookup(struct fibril_module *m,
							  const char *capability,
							  uint32_t min_version, void **ctx);

/* True when a provider's table (whose first member is `hdr`) is long
 * enough to carry `member`: use before calling a function added later. */
#define FIBRIL_SERVICE_HAS(table, member)                                                   \
	((table)->hdr.sz >= (size_t)((const char *)&(table)->member - (const char *)(table)) + \
				    sizeof((table)->member))

#ifdef __cplusplus
}
#endif
#endif
