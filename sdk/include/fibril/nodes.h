/* fibril/nodes.h - the "nodes" capability (interface version 1, SDK 1.5):
 * the other nodes of the cluster as this agent knows them. The nodes module
 * registers this node in the kvstore's node registry (a key held by its
 * lease) and watches the registry; each node is known by its name, its
 * node IP(s), its pod CIDR(s) per family and, for tunnel mode, its tunnel
 * endpoint. Changes go on the bus (FIBRIL_NODES_TOPIC). Every function
 * runs on the loop thread and answers synchronously. */
#ifndef FIBRIL_NODES_H
#define FIBRIL_NODES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_NODES_CAPABILITY "nodes"
#define FIBRIL_NODES_VERSION 2

#define FIBRIL_NODE_NAME_LEN 64
#define FIBRIL_NODE_MAX_CIDRS 4

/* Where a node was learned from. */
enum fibril_node_source {
	FIBRIL_NODE_SOURCE_LOCAL = 0,   /* this node */
	FIBRIL_NODE_SOURCE_KVSTORE = 1, /* the kvstore's node registry */
	FIBRIL_NODE_SOURCE_K8S = 2,     /* a Kubernetes Node object */
};

/* One pod CIDR: family 4 or 6, the address in network order. */
struct fibril_node_cidr {
	uint8_t family;
	uint8_t prefix_len;
	uint8_t addr[16];
};

/* One node. No pointers: it is also the bus payload. */
struct fibril_node {
	uint32_t sz;                       /* sizeof, set by whoever fills it */
	char name[FIBRIL_NODE_NAME_LEN];
	uint32_t source;                   /* enum fibril_node_source */
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;               /* the node (InternalIP) addresses */
	struct in6_addr ipv6;
	uint32_t n_cidrs;
	struct fibril_node_cidr cidrs[FIBRIL_NODE_MAX_CIDRS];
	bool has_tunnel_endpoint;
	struct in_addr tunnel_endpoint;    /* tunnel mode: the VXLAN underlay address */
	int64_t last_seen_unix;            /* wall clock, seconds */
};

/* Bus topic: payload struct fibril_node_event, type version 1. */
#define FIBRIL_NODES_TOPIC "nodes.node"
enum fibril_node_event_type {
	FIBRIL_NODE_ADDED = 0,
	FIBRIL_NODE_UPDATED,
	FIBRIL_NODE_DELETED, /* node: its last known state */
};
struct fibril_node_event {
	uint32_t sz;
	uint32_t type; /* enum fibril_node_event_type */
	struct fibril_node node;
};

/* list() calls this per known node (this one first); non-zero stops. */
typedef int (*fibril_nodes_fn)(const struct fibril_node *node, void *ud);

/* SDK 1.11: a pod of another node as the ipcache knows it (its record from
 * the kvstore or its CiliumEndpoint). */
struct fibril_nodes_ipcache_pod {
	uint32_t sz; /* the caller's sizeof */
	uint32_t identity;
	char node[FIBRIL_NODE_NAME_LEN];
	char pod_namespace[64];
	char pod_name[254];
};

struct fibril_nodes_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_NODES_VERSION */
	/* This node (fills at most out->sz bytes); 0 or a negative errno. */
	int (*self)(void *ctx, struct fibril_node *out);
	/* Every node known, this one included; returns how many were listed. */
	int (*list)(void *ctx, fibril_nodes_fn cb, void *ud);
	/* --- interface version 2 (SDK 1.11; check FIBRIL_SERVICE_HAS) --- */
	/* The pod of another node at addr (family 4 or 6, network order), as
	 * the ipcache has it: 0 and *out filled (at most out->sz bytes), or
	 * -ENOENT (no such entry, or one without a pod name). A hash lookup:
	 * cheap enough to name the peers of every flow. */
	int (*ipcache_pod)(void *ctx, int family, const void *addr, struct fibril_nodes_ipcache_pod *out);
};

#ifdef __cplusplus
}
#endif
#endif
