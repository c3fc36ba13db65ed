/* fibril/lb.h - the "lb" capability's service events (header only: no
 * symbols, so a module using it loads on any 1.x host). The lb module
 * publishes one event on FIBRIL_LB_TOPIC_SERVICE per service frontend it
 * programs or removes - at start for every frontend restored from the pins,
 * then on each upsert and delete from the API or Kubernetes - so that a
 * consumer (hubble-lite annotates flows with the service they went to) can
 * keep a lookup by frontend and by backend without asking the lb module.
 *
 * The socket-level LB translates at connect()/sendmsg(), so the packets a
 * consumer sees carry the backend's address: it matches them against the
 * backends here as Hubble matches a flow's addresses against its service
 * cache.
 *
 * Payload: struct fibril_lb_service_event, type version 1, followed in the
 * same buffer by `nbackends` struct fibril_lb_backend_addr at offset
 * `backends` (from the start of the struct; 0 when none). The struct grows
 * only at the end; check sz and read with FIBRIL_LB_BACKENDS(ev). */
#ifndef FIBRIL_LB_EVENTS_H
#define FIBRIL_LB_EVENTS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_LB_CAPABILITY "lb"
#define FIBRIL_LB_TOPIC_SERVICE "lb.service"
#define FIBRIL_LB_SERVICE_EVENT_VERSION 1

enum fibril_lb_service_op {
	FIBRIL_LB_SERVICE_UPSERTED = 0, /* new, or its backends/options changed */
	FIBRIL_LB_SERVICE_DELETED = 1,  /* gone; no backends in the event */
};

enum fibril_lb_service_source {
	FIBRIL_LB_SOURCE_API = 0,      /* PUT /v1/service, `fibril service upsert` */
	FIBRIL_LB_SOURCE_K8S = 1,      /* a Kubernetes Service */
	FIBRIL_LB_SOURCE_UNKNOWN = 2,  /* restored from the pins, origin not recorded */
};

/* An address as the LB maps hold it: 16 bytes, IPv4 as ::ffff:a.b.c.d. */
struct fibril_lb_backend_addr {
	uint8_t addr[16];
	uint16_t port;  /* host order */
	uint8_t state;  /* 0 active, 1 terminating, 2 not-ready, 3 maintenance */
	uint8_t reserved;
};

struct fibril_lb_service_event {
	uint32_t sz;          /* sizeof(struct fibril_lb_service_event) as published */
	uint32_t op;          /* enum fibril_lb_service_op */
	uint16_t id;          /* the service ID (1-65535, stable across restarts) */
	uint16_t port;        /* the frontend's port, host order */
	uint8_t proto;        /* IPPROTO_TCP, _UDP, _SCTP */
	uint8_t type;         /* 0 ClusterIP, 1 NodePort, 2 ExternalIP, 3 LoadBalancer */
	uint8_t source;       /* enum fibril_lb_service_source */
	uint8_t reserved;
	uint8_t addr[16];     /* the frontend, IPv4 as ::ffff:a.b.c.d */
	/* the name: a Kubernetes Service's namespace, name and port name; an
	 * API service's name split at its first '/' ("" when it has none) */
	char namespace_[64];
	char name[256];
	char port_name[64];
	uint32_t nbackends;
	uint32_t backends;    /* offset of the backends from the struct's start */
};

#define FIBRIL_LB_BACKENDS(ev)                                                      \
	((ev)->backends ? (const struct fibril_lb_backend_addr *)(const void *)(     \
				  (const char *)(const void *)(ev) + (ev)->backends)      \
			: (const struct fibril_lb_backend_addr *)0)

#ifdef __cplusplus
}
#endif
#endif
