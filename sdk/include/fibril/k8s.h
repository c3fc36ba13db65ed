/* fibril/k8s.h - the "k8s" capability (interface version 2, SDK 1.11): the
 * Kubernetes API as modules see it. The k8s module runs client-go style
 * informers (LIST with pagination, then WATCH from the list's
 * resourceVersion with bookmarks; relist on 410; backoff on errors) for the
 * resources that loaded modules ask for, keeps an in-memory cache per
 * resource, and delivers add/update/delete on the bus.
 *
 * Objects cross this interface as JSON text (the API server's own
 * encoding); a consumer parses what it needs. Every function runs on the
 * loop thread. Interface version 1 (SDK 1.2): informers and the node's
 * annotations; version 2 (SDK 1.11): writes (`request`) and the resources
 * of CRD mode. */
#ifndef FIBRIL_K8S_H
#define FIBRIL_K8S_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_K8S_CAPABILITY "k8s"
#define FIBRIL_K8S_VERSION 2

/* Resource names the informers know. */
#define FIBRIL_K8S_NODES "nodes"                     /* only this agent's Node */
#define FIBRIL_K8S_PODS "pods"                       /* spec.nodeName = this node */
#define FIBRIL_K8S_NAMESPACES "namespaces"
#define FIBRIL_K8S_SERVICES "services"
#define FIBRIL_K8S_ENDPOINTSLICES "endpointslices"   /* discovery.k8s.io/v1 */
#define FIBRIL_K8S_NETWORKPOLICIES "networkpolicies" /* networking.k8s.io/v1 */
#define FIBRIL_K8S_CNPS "ciliumnetworkpolicies"      /* cilium.io/v2 */
#define FIBRIL_K8S_CCNPS "ciliumclusterwidenetworkpolicies"
/* SDK 1.6: every Node of the cluster (node discovery; "nodes" stays this
 * agent's own). A provider without it answers watch_resource -ENOENT. */
#define FIBRIL_K8S_CLUSTER_NODES "cluster-nodes"
/* SDK 1.11 (interface version 2): CRD mode's resources, every object of the
 * cluster (cilium.io/v2 custom resources; Leases of coordination.k8s.io/v1).
 * Watched like the others, and the names `request` takes. */
#define FIBRIL_K8S_CILIUM_IDENTITIES "ciliumidentities" /* cluster-scoped */
#define FIBRIL_K8S_CILIUM_ENDPOINTS "ciliumendpoints"   /* namespaced */
#define FIBRIL_K8S_CILIUM_NODES "ciliumnodes"           /* cluster-scoped */
#define FIBRIL_K8S_LEASES "leases"                      /* namespaced */
/* The node pod-CIDR claims of cluster-pool IPAM in CRD mode (issue 27):
 * the Leases of kube-system labelled fibril.io/podcidr-claim, watched only
 * (write them as FIBRIL_K8S_LEASES in namespace kube-system). */
#define FIBRIL_K8S_PODCIDR_CLAIMS "podcidr-claims"
#define FIBRIL_K8S_PODCIDR_CLAIM_NS "kube-system"
#define FIBRIL_K8S_PODCIDR_CLAIM_LABEL "fibril.io/podcidr-claim"

/* Bus topic of a resource's events: "k8s.<resource>", payload
 * struct fibril_k8s_event, type version 1. */
#define FIBRIL_K8S_TOPIC_PREFIX "k8s."

enum fibril_k8s_event_type {
	FIBRIL_K8S_ADDED = 0,
	FIBRIL_K8S_UPDATED,
	FIBRIL_K8S_DELETED,
};

/* The bus copies payloads, so the event carries no pointers: the struct is
 * followed, in the same buffer, by NUL-terminated strings, and each field
 * below is the offset of its string from the start of the payload (0 for
 * an absent string: old_object outside UPDATED). Read them with
 * FIBRIL_K8S_STR(ev, field); the texts live only during the callback. */
struct fibril_k8s_event {
	uint32_t sz;        /* sizeof(struct fibril_k8s_event) as published */
	uint32_t type;      /* enum fibril_k8s_event_type */
	uint32_t resource;
	uint32_t namespace_; /* "" for cluster-scoped objects */
	uint32_t name;
	uint32_t object;     /* JSON: the new object (the last state on DELETED) */
	uint32_t old_object; /* JSON: the previous object on UPDATED, else 0 */
	uint32_t resource_version; /* of object */
};

/* The string at offset `field` of an event payload, or NULL when absent. */
#define FIBRIL_K8S_STR(ev, field) \
	((ev)->field ? (const char *)(const void *)(ev) + (ev)->field : (const char *)0)

/* Called with a cached object; return non-zero to stop. */
typedef int (*fibril_k8s_object_fn)(const char *json, void *ud);
/* The barrier: err 0 when every resource finished its first list, or
 * -ETIMEDOUT with `pending` naming the ones that did not. */
typedef void (*fibril_k8s_synced_fn)(void *ud, int err, const char *pending);
typedef void (*fibril_k8s_done_fn)(void *ud, int err, const char *message);
/* The answer to a request (SDK 1.11). status: the HTTP status, or 0 when no
 * answer came (err: a negative errno, message says why). reason: the
 * Status document's reason on an error ("AlreadyExists", "Conflict",
 * "NotFound", "Invalid", ...; "" on success). body: the object written or
 * read, or the Status; NULL when none. The texts live only during the call. */
typedef void (*fibril_k8s_reply_fn)(void *ud, int status, const char *reason, const char *body,
				    int err, const char *message);

struct fibril_k8s_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_K8S_VERSION */
	/* Ask for a resource to be watched (call from the consumer's init or
	 * start); resources nobody asks for are never watched. */
	int (*watch_resource)(void *ctx, const char *resource);
	/* Wait for the first list of the named resources (NULL-terminated). */
	int (*wait_synced)(void *ctx, const char *const *resources, uint64_t timeout_ms,
			   fibril_k8s_synced_fn cb, void *ud);
	/* Iterate the cache of a resource. */
	int (*list)(void *ctx, const char *resource, fibril_k8s_object_fn cb, void *ud);
	/* One cached object (namespace "" for cluster-scoped); NULL if absent.
	 * The text is valid until the loop runs again. */
	const char *(*get)(void *ctx, const char *resource, const char *namespace_,
			   const char *name);
	/* Merge-patch this node's annotations (retried until it succeeds). */
	int (*annotate_node)(void *ctx, const char *const *keys, const char *const *values,
			     size_t n, fibril_k8s_done_fn cb, void *ud);
	/* This agent's node name. */
	const char *(*node_name)(void *ctx);
	/* --- interface version 2 (SDK 1.11; check FIBRIL_SERVICE_HAS) --- */
	/* One request to the API server, sent once (a retry is the caller's:
	 * a conflict needs a fresh read first). method: "GET" (a live read,
	 * not the cache), "POST" (create; name NULL: the body names it), "PUT"
	 * (replace; the body carries metadata.resourceVersion, or a custom
	 * resource is refused 422), "PATCH" (a JSON merge patch), "DELETE"
	 * (body NULL or DeleteOptions with preconditions). resource: one of
	 * the names above; namespace_ NULL or "" for a cluster-scoped one. cb
	 * runs exactly once, later on the loop (never inside this call), unless
	 * this returns an error: 0, -ENOENT (an unknown resource), -EINVAL
	 * (a bad method, or a name or namespace that is no RFC 1123 name),
	 * -EAGAIN (the module is not running), -ENOMEM. */
	int (*request)(void *ctx, const char *method, const char *resource, const char *namespace_,
		       const char *name, const char *body, fibril_k8s_reply_fn cb, void *ud);
};

#ifdef __cplusplus
}
#endif
#endif
