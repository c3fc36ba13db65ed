/* fibril/endpoint.h - the "endpoint" capability (interface version 1):
 * the endpoint manager as other modules (policy, lb, flow export) see it. An endpoint is one CNI attachment (container ID + interface name) on
 * this node: a local numeric ID, a state, its addresses, its labels and the
 * numeric security identity of that label set.
 *
 * Identities: the reserved ones below as Cilium numbers them, then one
 * local identity per distinct label set from FIBRIL_IDENTITY_LOCAL_MIN.
 * Labels are "source:key=value" texts ("k8s:app=web",
 * "k8s:io.kubernetes.pod.namespace=default"), sorted, no duplicates.
 *
 * The module publishes FIBRIL_ENDPOINT_TOPIC_* events (payload struct
 * fibril_endpoint_event, type version 1) after each change is on disk and
 * in the datapath. Every function runs on the loop thread. */
#ifndef FIBRIL_ENDPOINT_H
#define FIBRIL_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_ENDPOINT_CAPABILITY "endpoint"
#define FIBRIL_ENDPOINT_VERSION 1

/* Reserved identities (Cilium's numbers). */
enum fibril_reserved_identity {
	FIBRIL_IDENTITY_UNKNOWN = 0,
	FIBRIL_IDENTITY_HOST = 1,
	FIBRIL_IDENTITY_WORLD = 2,
	FIBRIL_IDENTITY_UNMANAGED = 3,
	FIBRIL_IDENTITY_HEALTH = 4,
	FIBRIL_IDENTITY_INIT = 5,
	FIBRIL_IDENTITY_REMOTE_NODE = 6,
	FIBRIL_IDENTITY_KUBE_APISERVER = 7,
	FIBRIL_IDENTITY_INGRESS = 8,
	FIBRIL_IDENTITY_WORLD_IPV4 = 9,
	FIBRIL_IDENTITY_WORLD_IPV6 = 10,
};
#define FIBRIL_IDENTITY_LOCAL_MIN 256
/* Since SDK 1.11: from this number on, CIDR identities (Cilium's local-scope
 * flag, 1 << 24): numbers a node gives an address range, never a pod. */
#define FIBRIL_IDENTITY_CIDR_MIN (1u << 24)

enum fibril_endpoint_state {
	FIBRIL_EP_WAITING_FOR_IDENTITY = 0,
	FIBRIL_EP_READY,
	FIBRIL_EP_REGENERATING,
	FIBRIL_EP_DISCONNECTING,
};

/* Bus topics. */
#define FIBRIL_ENDPOINT_TOPIC_CREATED "endpoint.created"
#define FIBRIL_ENDPOINT_TOPIC_UPDATED "endpoint.updated"
#define FIBRIL_ENDPOINT_TOPIC_DELETED "endpoint.deleted"
/* Since SDK 1.6: the identities of the whole cluster (cluster-wide
 * allocation through the kvstore: every id/<n> record, whichever node
 * allocated it), as the endpoint module learns and forgets them. Payload
 * struct fibril_identity_event, type version 1. An identity whose labels
 * change is announced again with IDENTITY_ADDED. */
#define FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED "endpoint.identity-added"
#define FIBRIL_ENDPOINT_TOPIC_IDENTITY_DELETED "endpoint.identity-deleted"

/* `labels`: offset from the start of the struct of its NUL-terminated
 * '\n'-separated labels in the same buffer (0: none, on DELETED). Read it
 * with FIBRIL_IDENTITY_LABELS(ev). */
struct fibril_identity_event {
	uint32_t sz; /* sizeof(struct fibril_identity_event) as published */
	uint32_t identity;
	uint32_t labels;
};

#define FIBRIL_IDENTITY_LABELS(ev) \
	((ev)->labels ? (const char *)(const void *)(ev) + (ev)->labels : "")

#define FIBRIL_ENDPOINT_CONTAINER_ID_LEN 128
/* The longest container ID (bytes) an endpoint can carry: the one limit of
 * the endpoint module and fibril-cni (whose ADD refuses a longer one and
 * whose DEL of one still succeeds). */
#define FIBRIL_ENDPOINT_CONTAINER_ID_MAX (FIBRIL_ENDPOINT_CONTAINER_ID_LEN - 1)

/* One endpoint, as events and lookups carry it. The bus copies payloads,
 * so it holds no pointers: `labels` is the offset, from the start of the
 * struct, of a NUL-terminated text in the same buffer holding the labels
 * separated by '\n' (0: none). Read it with FIBRIL_ENDPOINT_LABELS(ep). */
struct fibril_endpoint_event {
	uint32_t sz;            /* sizeof(struct fibril_endpoint_event) as published */
	uint16_t id;
	uint32_t state;         /* enum fibril_endpoint_state */
	uint32_t identity;
	uint32_t old_identity;  /* on UPDATED: the identity before, else = identity */
	int host_ifindex;
	char host_ifname[16];
	char ifname[16];
	char container_id[FIBRIL_ENDPOINT_CONTAINER_ID_LEN];
	char pod_namespace[64];
	char pod_name[254];
	uint8_t mac[6], host_mac[6];
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;
	struct in6_addr ipv6;
	uint32_t labels;
};

#define FIBRIL_ENDPOINT_LABELS(ev) \
	((ev)->labels ? (const char *)(const void *)(ev) + (ev)->labels : "")

/* Called per endpoint (the struct and its labels live during the call);
 * return non-zero to stop. */
typedef int (*fibril_endpoint_fn)(const struct fibril_endpoint_event *ep, void *ud);

struct fibril_endpoint_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_ENDPOINT_VERSION */
	int (*foreach)(void *ctx, fibril_endpoint_fn cb, void *ud);
	/* One endpoint by local ID: calls cb once, or returns -ENOENT. */
	int (*get)(void *ctx, uint16_t id, fibril_endpoint_fn cb, void *ud);
	/* The labels of an identity ('\n'-separated, valid until the loop runs
	 * again), or NULL when no such identity exists. With cluster-wide
	 * identities, those other nodes allocated are answered too. */
	const char *(*identity_labels)(void *ctx, uint32_t identity);
	/* Since SDK 1.11 (check FIBRIL_SERVICE_HAS): who gave identity its number,
	 * as a fixed text: "reserved" (below FIBRIL_IDENTITY_LOCAL_MIN), "cidr"
	 * (from FIBRIL_IDENTITY_CIDR_MIN), "cluster:kvstore" or "cluster:crd"
	 * (cluster-wide allocation: the same number on every node), "local"
	 * (this node's own counter). */
	const char *(*identity_scope)(void *ctx, uint32_t identity);
};

#ifdef __cplusplus
}
#endif
#endif
