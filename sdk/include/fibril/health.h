/* fibril/health.h - module health, and (SDK 1.7) the health module's
 * connectivity view on the bus.
 *
 * A module reports OK, Degraded or Stopped with a message, for itself or for
 * a named sub-component ("etcd", "watch:pods"). The module's health is the
 * worst of its components. GET /v1/healthz answers 200 only while every
 * started module is OK. */
#ifndef FIBRIL_HEALTH_H
#define FIBRIL_HEALTH_H

#include <stdint.h>

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

/* Bus topic (SDK 1.7), published by the module providing the "health"
 * capability whenever its view of a node changes: payload struct
 * fibril_health_node_event, type version 1. A subscriber (the nodes module
 * shows it in `fibril node list`) needs no dependency on "health": without
 * it nothing is published and reachability stays unknown. */
#define FIBRIL_HEALTH_NODE_TOPIC "health.node"
#define FIBRIL_HEALTH_NODE_VERSION 1

enum fibril_reachability {
	FIBRIL_REACH_UNKNOWN = 0, /* not probed (yet), or no address of that family */
	FIBRIL_REACH_OK = 1,      /* every probed target answered its last probe */
	FIBRIL_REACH_FAILED = 2,  /* at least one did not */
};

struct fibril_health_node_event {
	uint32_t sz;        /* sizeof: fields may be appended */
	char name[64];      /* the node's name (FIBRIL_NODE_NAME_LEN) */
	uint8_t removed;    /* 1: no longer probed (the node left, or health stopped) */
	uint8_t reachable;  /* enum fibril_reachability, over every target */
	uint8_t ipv4;       /* the same over the IPv4 targets */
	uint8_t ipv6;       /* and over the IPv6 targets */
	uint32_t node_rtt_us; /* the last answered node ICMP probe (IPv4, else IPv6); 0: none */
};

#ifdef __cplusplus
}
#endif
#endif
