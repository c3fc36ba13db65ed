/* modules/nodes/nodes_int.h - what the nodes module's files share: the
 * module state (this node, the remote nodes known, the kvstore registry's
 * lease and watch), the registry record codec (record.c) and the native
 * routing of remote pod CIDRs through netlink plus their ipcache entries
 * (route.c). */
#ifndef FIBRIL_NODES_INT_H
#define FIBRIL_NODES_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fibril/datapath.h>
#include <fibril/endpoint.h>
#include <fibril/fibril.h>
#include <fibril/ipam.h>
#include <fibril/k8s.h>
#include <fibril/kvstore.h>
#include <fibril/nodes.h>

#define NODES_MODULE "nodes"
/* the registry, relative to the kvstore's prefix (Cilium's state/nodes/v1) */
#define NODES_KEY_PREFIX "state/nodes/v1/"
/* a key per node held by the same lease as its record (outside the
 * registry's prefix): present while the lease runs, so a record deleted
 * while its key is there was deleted on purpose, not expired */
#define NODES_ALIVE_PREFIX "state/nodes/alive/v1/"
/* rtm_protocol of the routes this module adds (the datapath's are 0xf1) */
#define NODES_ROUTE_PROTO 0xf2
#define NODES_WHY_LEN 256
/* the ipcache, relative to the kvstore's prefix (Cilium's state/ip/v1) */
#define NODES_IP_PREFIX "state/ip/v1/default/"
#define NODES_IP_PREFIX_END "state/ip/v1/default0" /* just past every key under it */
/* the underlay MTU when no interface holds the node IP; a pod's least */
#define NODES_DEFAULT_MTU 1500
#define NODES_MIN_POD_MTU 68
/* where the local CIDR identities start (the policy module's, as Cilium's):
 * a remote endpoint's identity is below it */
#define NODES_CIDR_IDENTITY_BASE (1u << 24)

enum nodes_routing { NODES_ROUTING_NONE = 0, NODES_ROUTING_NATIVE, NODES_ROUTING_TUNNEL };

const char *nodes_routing_name(enum nodes_routing r);

struct node_entry {
	struct fibril_node n;
	bool mark;   /* seen in the current full read */
	bool routed; /* its routes and ipcache entries are in place */
	struct fibril_health_node_event health; /* from the health module; sz 0: none */
	int64_t reach_since;  /* wall clock: since when health.reachable holds */
	int64_t lost_unix;    /* in s->lost: when its record went with its lease, */
	uint64_t lost_ms;     /* (monotonic) */
	struct node_entry *next;
};

/* A route found in the kernel at start (a previous run's): adopted when a
 * node still wants it, removed with its ipcache entries otherwise. */
struct nodes_old_route {
	struct fibril_node_cidr dst;
	int family;
	uint8_t via[16];       /* the gateway; all zero: a tunnel mode route */
	int tep_family;        /* tunnel mode: its encapsulation's destination, */
	uint8_t tep[16];       /* when its VNI is remote-node */
	uint8_t src[16];       /* its preferred source, all zero: none */
	uint32_t mtu;          /* its MTU metric, 0: none */
	bool wanted;
};

/* One ipcache record: an endpoint address -> identity, its node. */
struct nodes_ip_record {
	uint8_t family;        /* 4 or 6 */
	uint8_t addr[16];
	uint8_t host_family;   /* 0: no HostIP */
	uint8_t host[16];      /* the node IP of the endpoint's node */
	uint32_t identity;
	char node[FIBRIL_NODE_NAME_LEN];
	char pod_namespace[64];
	char pod_name[254];
};

/* What an entry keeps of its record: the pod's namespace and name in one
 * allocation of their own length, not the record's fixed 318 bytes (an
 * entry is ~130 bytes with it; 100,000 of them). */
struct nodes_ip_compact {
	uint8_t family, host_family;
	uint8_t addr[16], host[16];
	uint32_t identity;
	char node[FIBRIL_NODE_NAME_LEN];
	char *pod; /* "namespace/name" (malloc'd), NULL: none */
};

struct nodes_ip {
	struct nodes_ip_compact r;
	bool programmed;      /* in the datapath's ipcache */
	bool mark;            /* seen in the current full read */
	bool local;           /* one of ours, published */
	bool published;       /* ours: the put succeeded under the current lease */
	struct nodes_ip *next; /* hash chain */
};

/* ipcache.c's state */
struct nodes_ipcache {
	struct nodes_ip **buckets; /* by address; nbuckets a power of two */
	size_t nbuckets, count;
	struct fibril_kv_watch *watch;
	struct fibril_timer *retry;
	bool reading, synced, publish_failed;
	/* a read in parts (kvstore interface 4): key ranges read in parallel,
	 * all at one revision: the registry read's (the first read), else
	 * the first part's first answer's */
	unsigned parts_running;
	bool parts_started, parts_failed;
	int64_t read_revision;
	int64_t start_revision; /* the registry read's revision, for the first read */
	char **cuts;            /* where parts 2.. start (relative keys), ascending */
	size_t ncuts;
	int64_t lease_published; /* the lease our records were put under */
	unsigned puts_inflight;
	unsigned crd_inflight; /* CiliumEndpoint writes in flight (ipcache_crd.c) */
	struct node_entry **node_table; /* the known nodes by name hash (ipcache.c) */
	size_t node_slots;
	bool node_table_valid;
	/* a page being applied: its datapath writes gathered for one
	 * ipcache_upsert_batch (datapath interface 4) */
	bool batching;
	struct fibril_datapath_ipcache_entry *batch;
	struct nodes_ip **batch_of; /* the entry each one programs */
	size_t batch_n, batch_cap;
	struct {
		uint64_t added, updated, deleted, programmed, removed, published, unpublished,
			bad_records, refused, errors, resyncs;
	} stats;
};

struct nodes {
	struct fibril_module *m;
	const struct fibril_kvstore_ops *kv;
	void *kvctx;
	const struct fibril_datapath_ops *dp;
	void *dpctx;
	const struct fibril_ipam_ops *ipam;
	void *ipamctx;
	const struct fibril_k8s_ops *k8s; /* the Node objects source, optional */
	void *k8sctx;
	bool k8s_synced;

	struct fibril_node self;
	enum nodes_routing routing;
	int64_t ttl_s;
	uint16_t tunnel_port;
	int tunnel_ifindex; /* routing-mode tunnel: the VXLAN device */
	int64_t lease;
	int64_t lease_pending; /* a grant in flight */
	struct fibril_kv_watch *watch;
	struct fibril_subscription *subs[3];
	struct fibril_subscription *health_sub; /* health.node: reachability for GET /v1/nodes */
	struct fibril_health_node_event self_health;
	struct fibril_timer *retry;
	struct node_entry *nodes;
	size_t n_nodes;
	/* lost: nodes whose record expired with its lease (their agent died):
	 * not routed, still listed (and probed by health) until removed or
	 * [nodes] lost-node-grace passes (lost.c) */
	struct node_entry *lost;
	uint64_t lost_grace_ms;
	struct fibril_timer *lost_timer;

	bool synced, reading, start_pending, in_start, start_done, stopping;
	int generation; /* bumped by stop: stale callbacks do nothing */

	void *nl; /* struct nl_sock */
	struct nodes_old_route *old;
	size_t n_old;

	struct {
		int underlay;     /* [nodes] mtu, else the node IP's interface's */
		int overhead;     /* routing-mode tunnel: VXLAN's 50 (70 over IPv6) */
		int pod;          /* underlay - overhead: the pods' veths and routes */
		bool configured;  /* underlay from [nodes] mtu */
		char device[16];  /* else the interface it was read from */
	} mtu;

	struct nodes_ipcache ipc;
	struct fibril_subscription *ep_subs[3];
	struct fibril_subscription *cep_sub; /* k8s.ciliumendpoints (ipcache_crd.c) */
	bool ipc_crd; /* ipcache-source = crd: CiliumEndpoints, not the kvstore */
	/* CRD mode: this node's CiliumNode, the others' read (ciliumnode.c) */
	struct fibril_subscription *cn_sub;
	bool cn_enabled, cn_inflight, cn_reading, cn_published;
	unsigned cn_tries;
	struct fibril_metric *m_entries, *m_events;

	char why[NODES_WHY_LEN];
	struct {
		uint64_t added, updated, deleted, bad_records, records_refused;
		uint64_t routes_installed, routes_adopted, routes_removed, route_errors;
		uint64_t registrations, resyncs;
		uint64_t lost;
	} stats;
};

/* registry.c: the kvstore's node registry (start: the lease, then the record) */
void nodes_registry_start(struct nodes *s);
/* the kvstore's lease-lost and connected topics */
int nodes_registry_on_kv_event(const struct fibril_event *ev, void *ud);

/* nodes.c: the table both sources write */
struct node_entry *nodes_find(struct nodes *s, const char *name);
/* add, update or (the same) just mark the node n (not this one); a node
 * nodes_validate refuses is logged, counted and not installed */
void nodes_upsert(struct nodes *s, const struct fibril_node *n);
void nodes_remove_entry(struct nodes *s, struct node_entry *e);
/* the pending start is over (err 0: it went well) */
void nodes_start_finished(struct nodes *s, int err);
/* bus: the nodes.node event of n */
void nodes_publish(struct nodes *s, enum fibril_node_event_type type, const struct fibril_node *n);

/* lost.c: e's registry record went (deleted, or expired with its lease):
 * a deliberate delete removes it, an expiry keeps it listed as lost */
void nodes_record_gone(struct nodes *s, struct node_entry *e);
/* the lost node of that name, taken out of s->lost (it is back), or NULL */
struct node_entry *nodes_lost_take(struct nodes *s, const char *name);
/* the lost node of that name is removed from the cluster (its Node deleted) */
void nodes_lost_remove_name(struct nodes *s, const char *name, const char *why);
/* this node's alive key, under the registry lease (after its record) */
void nodes_alive_put(struct nodes *s);
void nodes_lost_free(struct nodes *s);

/* validate.c: whether a remote node's record may be installed: 0, or
 * -EINVAL with why (a pod CIDR too short or overlapping this node's,
 * another node's or a connected network; this node's or another node's IP) */
int nodes_validate(struct nodes *s, const struct fibril_node *n, char *why, size_t len);
/* validate.c: a remote ipcache record's identity is a cluster-allocated one
 * (256 .. 2^24-1: not reserved, not the CIDR range): 0 or -EINVAL with why */
int nodes_ip_identity_check(uint32_t id, char *why, size_t len);
struct nodes_ip_compact;
/* the record r is bound to the node n it names: its address in n's pod
 * CIDRs, its HostIP n's (IPv4, IPv6 or tunnel endpoint); 0 or -EINVAL with
 * why (when why is not NULL) */
int nodes_ip_bound(const struct node_entry *n, const struct nodes_ip_compact *r, char *why,
		   size_t len);

/* k8s_source.c: the Kubernetes Node objects; annotations: read the
 * network.fibril.io/ ones ([nodes] k8s-node-annotations) */
int nodes_k8s_decode(const char *json, size_t len, bool annotations, struct fibril_node *out,
		     char *why, size_t whylen);
int nodes_k8s_start(struct nodes *s, char *why, size_t len);
int nodes_k8s_on_event(const struct fibril_event *ev, void *ud);
/* e's registry record is gone: its Node object (if any) takes over; true then */
bool nodes_k8s_fallback(struct nodes *s, struct node_entry *e);

/* k8s_source.c: the Node of that name again (its CiliumNode changed) */
void nodes_k8s_reread(struct nodes *s, const char *name);
/* ciliumnode.c: CRD mode's CiliumNode objects: watch them (from
 * nodes_k8s_start, which then waits for their first list too); write this
 * node's; merge a peer's into the node its Node object gave (what the Node
 * lacks; refused whole when nodes_validate says no) */
int nodes_cn_start(struct nodes *s, char *why, size_t len);
void nodes_cn_publish(struct nodes *s);
void nodes_cn_merge(struct nodes *s, struct fibril_node *n);
int nodes_cn_on_event(const struct fibril_event *ev, void *ud);
void nodes_cn_free(struct nodes *s);

/* record.c: the registry's value (JSON) <-> struct fibril_node. */
char *nodes_record_encode(const struct fibril_node *n);
/* 0, or -EINVAL with why filled; key_name: the name the key says. */
int nodes_record_decode(const char *json, size_t len, const char *key_name,
			struct fibril_node *out, char *why, size_t whylen);
bool nodes_name_valid(const char *name);
/* "10.244.1.0/24" -> 0 (host bits must be zero), else -EINVAL */
int nodes_cidr_parse(const char *text, struct fibril_node_cidr *out);
const char *nodes_cidr_text(const struct fibril_node_cidr *c, char *buf, size_t len);

/* record.c: the ipcache's value (JSON) <-> struct nodes_ip_record; key_ip:
 * the address the key says (NULL: not checked). 0 or -EINVAL with why. */
char *nodes_ip_record_encode(const struct nodes_ip_record *r);
int nodes_ip_record_decode(const char *json, size_t len, const char *key_ip,
			   struct nodes_ip_record *out, char *why, size_t whylen);
/* The same through json-c alone (nodes_ip_record_decode reads a valid
 * record with a scanner first; the fuzz target compares the two). */
int nodes_ip_record_decode_json(const char *json, size_t len, const char *key_ip,
				struct nodes_ip_record *out, char *why, size_t whylen);
const char *nodes_ip_text(uint8_t family, const uint8_t *addr, char *buf, size_t len);

/* ipcache_table.c: the entries by address */
struct nodes_ip *nodes_ipc_lookup(struct nodes_ipcache *c, uint8_t family, const uint8_t *addr);
/* the entry of r's address: the one there, or a new one holding r (NULL: no memory) */
struct nodes_ip *nodes_ipc_insert(struct nodes_ipcache *c, const struct nodes_ip_record *r);
void nodes_ipc_unlink(struct nodes_ipcache *c, struct nodes_ip *e); /* out of the table */
void nodes_ipc_entry_free(struct nodes_ip *e);
void nodes_ipc_rec_set(struct nodes_ip_compact *d, const struct nodes_ip_record *r);
/* the whole record again (to publish ours) */
void nodes_ipc_rec_expand(const struct nodes_ip_compact *d, struct nodes_ip_record *r);

/* ipcache.c */
/* after the registry is read, at that read's revision */
void nodes_ipcache_start(struct nodes *s, int64_t revision);
void nodes_ipcache_publish(struct nodes *s); /* ours, under the current lease */
void nodes_ipcache_node_changed(struct nodes *s, const char *name); /* added/gone */
void nodes_ipcache_host(struct nodes *s, int family, const void *addr);
int nodes_ipcache_on_endpoint(const struct fibril_event *ev, void *ud);
void nodes_ipcache_stop(struct nodes *s);
/* ipcache.c: one remote record from either source (`what` names it in the
 * log): checked as bound to its node and programmed, or refused */
void nodes_ipcache_apply(struct nodes *s, const struct nodes_ip_record *r, const char *what);
/* ipcache.c: a remote address gone from its source */
void nodes_ipcache_forget(struct nodes *s, uint8_t family, const uint8_t *addr);
/* ipcache_crd.c: the ipcache through CiliumEndpoint objects */
bool nodes_ipcache_crd_wanted(struct nodes *s, char *why, size_t len);
int nodes_ipcache_crd_start(struct nodes *s, char *why, size_t len);
int nodes_ipcache_crd_on_event(const struct fibril_event *ev, void *ud);
struct fibril_endpoint_event;
void nodes_ipcache_crd_endpoint(struct nodes *s, const struct fibril_endpoint_event *ev,
				bool deleted);
void nodes_ipcache_free(struct nodes *s);
void nodes_ipcache_get(struct fibril_request *req, struct fibril_response *resp, void *ud);

struct json_object;

/* mtu.c: the pod MTU (s->mtu) from [nodes] mtu or the node IP's
 * interface, and the routing mode; GET /v1/mtu */
int nodes_mtu_setup(struct nodes *s, char *why, size_t len);
struct json_object *nodes_mtu_json(const struct nodes *s);
void nodes_mtu_get(struct fibril_request *req, struct fibril_response *resp, void *ud);

/* route.c */
int nodes_nl_open(struct nodes *s, char *why, size_t len);
void nodes_nl_close(struct nodes *s);
/* what a previous run left: our routes in the main table */
int nodes_routes_scan(struct nodes *s);
/* tunnel mode: the datapath's VXLAN device and overlay program (or, in
 * the other modes, no encapsulation) */
int nodes_tunnel_setup(struct nodes *s, char *why, size_t len);
/* One datapath ipcache entry: prefix -> identity and, tep_family 4 or 6,
 * the tunnel endpoint of the node that hosts it (0: none), claimed as
 * source (enum fibril_datapath_ipcache_source: NODE for node IPs and pod
 * CIDRs and this node's host entry, REMOTE_ENDPOINT for the kvstore's
 * endpoints). In tunnel mode an entry of another node's pod (or CIDR)
 * must name that node, or the datapath passes its packets to the stack
 * instead of the tunnel. */
int nodes_dp_ipcache_put(struct nodes *s, uint32_t source, int family, const void *addr,
			 unsigned plen, uint32_t id, int tep_family, const void *tep);
/* take source's claim on the prefix (an older datapath: remove it) */
int nodes_dp_ipcache_del(struct nodes *s, uint32_t source, int family, const void *addr,
			 unsigned plen, char *err, size_t len);
/* whether the datapath's ipcache has owners (interface version 5) */
bool nodes_dp_owned(const struct nodes *s);
/* an entry to fill: sz and source as the datapath takes them */
void nodes_dp_entry_init(const struct nodes *s, struct fibril_datapath_ipcache_entry *e,
			 uint32_t source);
/* install / remove a remote node's routes and ipcache entries */
int nodes_node_program(struct nodes *s, struct node_entry *e, const struct fibril_node *old);
void nodes_node_unprogram(struct nodes *s, const struct fibril_node *n);
/* after the first full read: remove what no node wants any more */
void nodes_routes_sweep_old(struct nodes *s);

#endif
