/* tests/fuzz/fuzz_log.c - fuzz_quiet_logs() and fuzz_host_drain() for the
 * targets linked with the host runtime (libfibril_core): the log level and
 * the bus queue are host internals. */
#include <stdlib.h>

#include "internal.h"

#include "fuzz.h"

void fuzz_quiet_logs(void)
{
	log_set_level(getenv("FUZZ_VERBOSE") ? FIBRIL_LOG_DEBUG : FIBRIL_LOG_ERROR);
}

void fuzz_host_drain(void)
{
	bus_flush();
}
