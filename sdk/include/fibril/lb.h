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
 * same buffer by `nbackends` backends at offset `backends` (from the start
 * of the struct; 0 when none), each `backend_sz` bytes (SDK 1.9): an array
 * carries its element size, so struct fibril_lb_backend_addr can grow. An
 * event whose sz does not cover backend_sz (published by a 1.7 or 1.8 lb
 * module), or whose backend_sz is 0, has elements of
 * FIBRIL_LB_BACKEND_ADDR_SZ_V1 bytes. Both structs grow only at the end.
 * Read backend i with fibril_lb_backend_get(), which applies the rule (a
 * longer element's unknown fields are ignored, a shorter one's read as
 * zero) and checks the bounds against the payload's length. */
#ifndef FIBRIL_LB_EVENTS_H
#define FIBRIL_LB_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
	FIBRIL_LB_SOURCE_HOSTPORT = 3, /* a pod's hostPort (the CNI portMappings); the name
					* is its attachment, CONTAINERID:IFNAME */
};

/* An address as the LB maps hold it: 16 bytes, IPv4 as ::ffff:a.b.c.d. */
struct fibril_lb_backend_addr {
	uint8_t addr[16];
	uint16_t port;  /* host order */
	uint8_t state;  /* 0 active, 1 terminating, 2 not-ready, 3 maintenance */
	uint8_t reserved;
};

/* The element size of the backends of an event that carries none
 * (SDK 1.7, 1.8): sizeof(struct fibril_lb_backend_addr) as it was then. */
#define FIBRIL_LB_BACKEND_ADDR_SZ_V1 20u

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
	/* --- SDK 1.9 --- */
	uint32_t backend_sz;  /* each backend's size: sizeof(struct fibril_lb_backend_addr) */
};

/* Deprecated (SDK 1.7): the backends as an array of this header's struct,
 * right only while the publisher's backend_sz equals its sizeof; kept so
 * that code written against 1.7 still compiles. Use fibril_lb_backend_get. */
#define FIBRIL_LB_BACKENDS(ev)                                                      \
	((ev)->backends ? (const struct fibril_lb_backend_addr *)(const void *)(     \
				  (const char *)(const void *)(ev) + (ev)->backends)      \
			: (const struct fibril_lb_backend_addr *)0)

/* The element size of ev's backends (ev: the event as published). */
static inline size_t fibril_lb_backend_stride(const struct fibril_lb_service_event *ev)
{
	size_t end = offsetof(struct fibril_lb_service_event, backend_sz) + sizeof(ev->backend_sz);
	return ev->sz >= end && ev->backend_sz ? ev->backend_sz : FIBRIL_LB_BACKEND_ADDR_SZ_V1;
}

/* Backend i of the event in payload (len bytes, as delivered) into *out
 * (fields the publisher's element lacks read as zero). Returns 0, or -1
 * when i is out of range or the element does not fit in the payload or is
 * shorter than the first version's. ev is the event header as copied out of
 * payload (at least its first version's fields). */
static inline int fibril_lb_backend_get(const struct fibril_lb_service_event *ev,
					const void *payload, size_t len, uint32_t i,
					struct fibril_lb_backend_addr *out)
{
	size_t stride = fibril_lb_backend_stride(ev);
	memset(out, 0, sizeof(*out));
	if (i >= ev->nbackends || stride < FIBRIL_LB_BACKEND_ADDR_SZ_V1 || stride > 4096 ||
	    ev->backends > len || (len - ev->backends) / stride <= i)
		return -1;
	memcpy(out, (const char *)payload + ev->backends + (size_t)i * stride,
	       stride < sizeof(*out) ? stride : sizeof(*out));
	return 0;
}

#ifdef __cplusplus
}
#endif
#endif
