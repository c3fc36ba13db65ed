/* fibril/bus.h - the publish/subscribe event bus.
 *
 * Topics are names ("endpoint.created"). A payload is opaque bytes with a
 * type version chosen by the publisher; the convention is a struct that
 * starts with its own size and grows only at the end, so a subscriber asks
 * for the lowest version it understands and gets every newer one too.
 * Publishing copies the payload and queues it; delivery happens on the loop
 * thread, in publish order, to every subscriber of the topic. A subscriber
 * that returns an error is counted and logged; the others still get the
 * event. */
#ifndef FIBRIL_BUS_H
#define FIBRIL_BUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_subscription;

struct fibril_event {
	uint32_t sz;           /* sizeof(struct fibril_event) as the host built it */
	uint32_t type_version; /* the publisher's payload version */
	const char *topic;
	const char *publisher; /* module name, or "agent" */
	uint64_t seq;          /* per-topic sequence number, from 1 */
	const void *payload;
	size_t payload_len;
};

/* Return 0, or a negative errno to have the failure counted and logged. */
typedef int (*fibril_event_fn)(const struct fibril_event *ev, void *ud);

/* Subscribe and unsubscribe on the loop thread (hooks and callbacks). */
struct fibril_subscription *fibril_bus_subscribe(struct fibril_module *m, const char *topic,
						 uint32_t min_type_version,
						 fibril_event_fn cb, void *ud);
void fibril_bus_unsubscribe(struct fibril_subscription *s);

/* Queue an event; safe from any thread. Returns 0 or a negative errno. */
int fibril_bus_publish(struct fibril_module *m, const char *topic, uint32_t type_version,
		       const void *payload, size_t payload_len);

#ifdef __cplusplus
}
#endif
#endif
