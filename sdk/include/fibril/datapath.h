/* fibril/datapath.h - the "datapath" capability (interface version 7):
 * what the endpoint manager asks of the eBPF datapath. The datapath module
 * loads one tc program for every endpoint, attaches it (clsact) to
 * each endpoint's host-side veth and keeps per-endpoint facts in pinned maps
 * (endpoints, ipcache, conntrack, metrics, events), so adding an endpoint is
 * an attach and a few map writes.
 *
 * Every function runs on the loop thread and answers synchronously: 0 or a
 * negative errno, with a one-line reason in err (errlen bytes) when err is
 * not NULL. Calls are idempotent: upserting an endpoint that is already in
 * place (a restart re-adopting its veth) replaces the attachment and the map
 * entries without a gap in traffic. Interface version 1. */
#ifndef FIBRIL_DATAPATH_H
#define FIBRIL_DATAPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_DATAPATH_CAPABILITY "datapath"
#define FIBRIL_DATAPATH_VERSION 7

/* One local endpoint as the datapath needs it. */
struct fibril_datapath_endpoint {
	uint32_t sz;            /* sizeof, set by the caller */
	uint16_t id;            /* local endpoint ID (1..65535) */
	uint32_t identity;      /* numeric security identity */
	int host_ifindex;       /* the host-side veth, in the agent's netns */
	char host_ifname[16];   /* IFNAMSIZ */
	uint8_t mac[6];         /* the pod side (CNI_IFNAME) MAC */
	uint8_t host_mac[6];    /* the host-side veth MAC */
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;
	struct in6_addr ipv6;
	/* appended in SDK 1.11 (read behind sz; an older caller's is 0) */
	uint32_t flags;         /* FIBRIL_DATAPATH_EP_F_* */
};

/* The endpoint's traffic leaving the cluster keeps its own address (no
 * masquerading): its pod carries the label network.fibril.io/masquerade
 * = "false" (the endpoint module sets it). */
#define FIBRIL_DATAPATH_EP_F_NO_MASQUERADE 0x1u

/* The node's gateway as the datapath set it up (the host device). */
struct fibril_datapath_node {
	uint32_t sz;
	int host_ifindex;       /* the host device (fibril_host) */
	char host_ifname[16];
	bool has_ipv4, has_ipv6;
	struct in_addr gateway4;  /* the router address of the IPv4 pod CIDR */
	struct in6_addr gateway6;
};

/* Interface version 2: one entry of an endpoint's network policy as the
 * datapath's policy map holds it (the module's map layout is Cilium's:
 * endpoint, direction, remote identity, protocol, port prefix). A port
 * range is several entries of power-of-two aligned blocks. */
enum fibril_datapath_policy_dir {
	FIBRIL_DATAPATH_EGRESS = 0,  /* what the endpoint sends */
	FIBRIL_DATAPATH_INGRESS = 1, /* what is delivered to the endpoint */
};

struct fibril_datapath_policy_entry {
	uint32_t sz;            /* sizeof, set by the caller */
	uint16_t endpoint_id;
	uint8_t direction;      /* enum fibril_datapath_policy_dir */
	uint8_t proto;          /* IPPROTO_*, 0: any protocol (then port_bits 0) */
	uint32_t identity;      /* the remote identity, 0: any */
	uint16_t port;          /* host order: the first port of the block */
	uint8_t port_bits;      /* leading bits of port that must match: 16 one
				 * port, 0 any port, n a block of 2^(16-n) */
	bool deny;              /* a deny entry (wins over any allow) */
	/* SDK 1.7 (appended: a provider reads it only when sz holds it) */
	uint32_t rule_id;       /* the policy module's ID of the rule the entry
				 * comes from, carried into verdict and drop
				 * events; 0: unknown */
};

/* Interface version 3: one ipcache entry with the node that hosts the
 * prefix (Cilium's ipcache value: identity + tunnel endpoint). In tunnel
 * mode a packet from a local endpoint to a prefix whose entry names a
 * tunnel endpoint is encapsulated (VXLAN) towards that node, its VNI the
 * sender's identity; in native mode the tunnel endpoint is kept but not
 * used. Grows by appending: the provider reads what the caller's sz
 * holds. */
struct fibril_datapath_ipcache_entry {
	uint32_t sz;            /* sizeof, set by the caller */
	uint8_t family;         /* 4 or 6 */
	uint8_t prefix_len;     /* 0..32 / 0..128 (host bits are cleared) */
	uint8_t tunnel_family;  /* 4 or 6: tunnel_endpoint is set; 0: none */
	uint8_t pad;
	uint8_t addr[16];       /* network order, IPv4 in the first 4 bytes */
	uint32_t identity;      /* numeric security identity */
	uint8_t tunnel_endpoint[16]; /* the host node's IP, network order */
	/* SDK 1.10 (appended): who claims the prefix, enum
	 * fibril_datapath_ipcache_source. A caller whose sz stops before it,
	 * or that names none (0), claims as FIBRIL_DATAPATH_IPCACHE_SOURCE_UNSPEC. */
	uint32_t source;
};

/* SDK 1.10: the ipcache keeps, per prefix, one claim per source and writes
 * the claim of the highest source (the larger value wins); a removal takes
 * only the remover's own claim, and a lower claim still there comes back.
 * So a CIDR policy naming a node's or a pod's address exactly neither
 * replaces nor, once deleted, removes its entry (as Cilium's ipcache's
 * resource owners and sources). The datapath's own entries (world /0)
 * outrank every source. */
enum fibril_datapath_ipcache_source {
	/* not named (an older caller: ipcache_upsert, ipcache_remove, an
	 * entry whose sz has no source): the lowest, below every named one;
	 * such callers among themselves: the last writer wins, as before */
	FIBRIL_DATAPATH_IPCACHE_SOURCE_UNSPEC = 0,
	FIBRIL_DATAPATH_IPCACHE_SOURCE_CIDR_POLICY = 1,     /* a policy's CIDR identity */
	FIBRIL_DATAPATH_IPCACHE_SOURCE_NODE = 2,            /* node IPs, pod CIDRs, host */
	FIBRIL_DATAPATH_IPCACHE_SOURCE_REMOTE_ENDPOINT = 3, /* another node's endpoint */
	FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT = 4,  /* this node's (endpoint_upsert's) */
};

/* Interface version 7: one entry of the egress gateway's table (IPv4, as
 * Cilium's): flows from `identity` to `dst`/`dst_len` leave the cluster
 * through `gateway` (a node IP), where they are source-NATed to that
 * node's egress IP; `egress_ip` is this node's own for the policy when it
 * is one of the policy's gateways (0.0.0.0: not one). `excluded`: an
 * excludedCIDR, left to the usual path. `no_gateway`: the policy has no
 * live gateway, its flows are dropped (never leaked). `gateway_local`:
 * the chosen gateway is this node. Grows by appending. */
struct fibril_datapath_egress_entry {
	uint32_t sz;            /* sizeof, set by the caller */
	uint32_t identity;      /* the source's security identity */
	struct in_addr dst;     /* network order */
	uint8_t dst_len;        /* 0..32 */
	bool excluded, no_gateway, gateway_local;
	struct in_addr gateway;
	struct in_addr egress_ip;
};

/* Interface version 3: the tunnel (routing-mode tunnel). */
enum fibril_datapath_tunnel_mode {
	FIBRIL_DATAPATH_TUNNEL_NONE = 0,  /* native routing: nothing encapsulated */
	FIBRIL_DATAPATH_TUNNEL_VXLAN = 1, /* a VXLAN device in external mode */
};

#define FIBRIL_DATAPATH_TUNNEL_PORT 8472 /* Cilium's (the Linux default) */
#define FIBRIL_DATAPATH_TUNNEL_DEVICE "fibril_vxlan"

struct fibril_datapath_tunnel {
	uint32_t sz;            /* sizeof, set by the caller */
	uint32_t mode;          /* enum fibril_datapath_tunnel_mode */
	uint16_t port;          /* UDP port, 0: FIBRIL_DATAPATH_TUNNEL_PORT */
	char ifname[16];        /* "": FIBRIL_DATAPATH_TUNNEL_DEVICE */
};

struct fibril_datapath_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_DATAPATH_VERSION */
	/* Attach the program to ep->host_ifindex (replacing what is there),
	 * write the endpoint's map entries and its ipcache entries (address/32
	 * and /128 -> identity), and route its addresses to its veth. */
	int (*endpoint_upsert)(void *ctx, const struct fibril_datapath_endpoint *ep,
			       char *err, size_t errlen);
	/* Undo endpoint_upsert; a veth that is already gone is not an error. */
	int (*endpoint_remove)(void *ctx, const struct fibril_datapath_endpoint *ep,
			       char *err, size_t errlen);
	/* ipcache: prefix -> identity (family 4 or 6, addr in network order),
	 * claimed as FIBRIL_DATAPATH_IPCACHE_SOURCE_UNSPEC (see above). */
	int (*ipcache_upsert)(void *ctx, int family, const void *addr, unsigned prefixlen,
			      uint32_t identity, char *err, size_t errlen);
	int (*ipcache_remove)(void *ctx, int family, const void *addr, unsigned prefixlen,
			      char *err, size_t errlen);
	/* The host device and gateway addresses (fills *out; sz set by caller). */
	int (*node)(void *ctx, struct fibril_datapath_node *out);
	/* --- interface version 2 (check FIBRIL_SERVICE_HAS) --- */
	/* Write (or replace) one policy entry; its hit counter restarts. */
	int (*policy_upsert)(void *ctx, const struct fibril_datapath_policy_entry *e, char *err,
			     size_t errlen);
	/* Remove one entry (deny is ignored); an absent one is not an error. */
	int (*policy_remove)(void *ctx, const struct fibril_datapath_policy_entry *e, char *err,
			     size_t errlen);
	/* Whether the endpoint's ingress / egress is enforced (only what its
	 * entries allow passes) or open (everything passes), and the policy
	 * revision its entries come from. */
	int (*policy_enforce)(void *ctx, uint16_t endpoint_id, bool ingress, bool egress,
			      uint32_t revision, char *err, size_t errlen);
	/* Every policy entry in place (e.g. left by the last run), one call of
	 * cb each (non-zero stops); 0 or a negative errno. */
	int (*policy_list)(void *ctx,
			   int (*cb)(const struct fibril_datapath_policy_entry *e, void *ud),
			   void *ud);
	/* --- interface version 3 (check FIBRIL_SERVICE_HAS) --- */
	/* ipcache: prefix -> identity and the node that hosts it. The
	 * version-1 ipcache_upsert writes an entry without a tunnel endpoint;
	 * ipcache_remove removes either. */
	int (*ipcache_upsert_entry)(void *ctx, const struct fibril_datapath_ipcache_entry *e,
				    char *err, size_t errlen);
	/* Tunnel mode on (mode VXLAN: create or adopt the device, attach the
	 * overlay program to it, encapsulate from now on) or off (mode NONE:
	 * encapsulate nothing; the device is left). Idempotent. */
	int (*tunnel_setup)(void *ctx, const struct fibril_datapath_tunnel *t, char *err,
			    size_t errlen);
	/* --- interface version 4 (check FIBRIL_SERVICE_HAS) --- */
	/* n ipcache_upsert_entry at once (a node reading 100,000 remote
	 * endpoints): one bpf(2) call where the kernel's LPM trie takes a
	 * batch. entries is an array of n entries of entries[0].sz bytes each
	 * (every entry's sz the same). An entry that is not valid refuses the
	 * whole batch (nothing written); a write that fails stops it: *done
	 * (when not NULL) is how many entries were written, in order. 0 or a
	 * negative errno with err. */
	int (*ipcache_upsert_batch)(void *ctx, const struct fibril_datapath_ipcache_entry *entries,
				    size_t n, size_t *done, char *err, size_t errlen);
	/* --- interface version 5 (SDK 1.10; check FIBRIL_SERVICE_HAS) --- */
	/* Take e->source's claim on the prefix e->family, e->addr,
	 * e->prefix_len (the other fields are not read) out of the ipcache:
	 * the entry then holds the highest claim left, or goes when none is
	 * left. A prefix nobody claims since the datapath started (a previous
	 * run's) is removed; a claim that is not there is not an error. The
	 * version-1 ipcache_remove takes the UNSPEC claim only. */
	int (*ipcache_remove_entry)(void *ctx, const struct fibril_datapath_ipcache_entry *e,
				    char *err, size_t errlen);
	/* --- interface version 6 (SDK 1.11; check FIBRIL_SERVICE_HAS) --- */
	/* The module that numbers identities (endpoint) says who gave one its
	 * number, for the map dumps (`map dump dp_ipcache`): fn(ud, identity)
	 * answers as the endpoint capability's identity_scope ("local",
	 * "cluster:kvstore", ...; NULL: unknown). fn NULL: forget it (call
	 * before ud goes). */
	void (*set_identity_scope)(void *ctx, const char *(*fn)(void *ud, uint32_t identity),
				   void *ud);
	/* --- interface version 7 (SDK 1.11; check FIBRIL_SERVICE_HAS) --- */
	/* The egress gateway's whole table (the egressgw module): entries is
	 * an array of n entries of entries[0].sz bytes each. Every entry is
	 * checked first (an invalid one refuses the call, naming it, and
	 * nothing changes); then each is written and what the table held
	 * beyond them is removed, so a flow sees the old entry or the new
	 * one, never none. n 0 empties it. */
	int (*egress_sync)(void *ctx, const struct fibril_datapath_egress_entry *entries, size_t n,
			   char *err, size_t errlen);
	/* The table as the datapath holds it (pinned: what an earlier run
	 * wrote), one call of cb per entry (sz set; valid during the call);
	 * non-zero from cb stops. Returns how many were listed or -errno. */
	int (*egress_list)(void *ctx, int (*cb)(const struct fibril_datapath_egress_entry *e, void *ud),
			   void *ud);
};

/* ---- events on the bus (SDK 1.5, additive) ---------------------------------
 * The datapath publishes every record of its ring buffer (drops, and traces
 * when [datapath] trace-events is on) on FIBRIL_DATAPATH_TOPIC_EVENT, type
 * version FIBRIL_DATAPATH_EVENT_VERSION, payload struct fibril_datapath_event.
 * `sz` is the size as published: fields are only ever appended, so a reader
 * takes what it knows (fields past sz read as absent). The datapath never
 * waits for room on the bus: an event that found the queue full is counted
 * and reported in the next one's lost_before. */
#define FIBRIL_DATAPATH_TOPIC_EVENT "datapath.event"
#define FIBRIL_DATAPATH_EVENT_VERSION 1

enum fibril_datapath_event_type {
	FIBRIL_DATAPATH_EVENT_DROP = 1,
	FIBRIL_DATAPATH_EVENT_TRACE = 2,
	/* SDK 1.7: an enforced policy allowed the first packet of a flow (one
	 * per enforcement point; [datapath] policy-verdict-events) */
	FIBRIL_DATAPATH_EVENT_POLICY_VERDICT = 3,
};

/* SDK 1.7: what the policy said (fibril_datapath_event.policy_match). */
enum fibril_datapath_policy_match {
	FIBRIL_DATAPATH_POLICY_NONE = 0,         /* no enforced policy decided it */
	FIBRIL_DATAPATH_POLICY_ALLOW = 1,        /* allowed by the rule policy_rule */
	FIBRIL_DATAPATH_POLICY_DENY = 2,         /* denied by the deny rule policy_rule */
	FIBRIL_DATAPATH_POLICY_DEFAULT_DENY = 3, /* enforced, and no rule allows it */
};

enum fibril_datapath_direction {
	FIBRIL_DATAPATH_FROM_ENDPOINT = 0, /* sent by the pod (its veth's ingress) */
	FIBRIL_DATAPATH_TO_ENDPOINT = 1,   /* delivered to the pod */
	FIBRIL_DATAPATH_FROM_OVERLAY = 2,  /* tunnel mode: from another node, seen on the
					    * VXLAN device (delivered to a pod or the node) */
};

struct fibril_datapath_event {
	uint32_t sz;            /* sizeof(struct fibril_datapath_event) as published */
	uint8_t type;           /* enum fibril_datapath_event_type */
	uint8_t reason;         /* the datapath's reason code: < 128 a verdict, >= 128 a drop */
	uint8_t direction;      /* enum fibril_datapath_direction */
	uint8_t family;         /* 4, 6, or 0 (ARP, unknown) */
	uint8_t proto;          /* IPPROTO_*, 0 when none */
	uint8_t tcp_flags;      /* TCP flags byte of a TCP packet (FIN 0x01 .. CWR 0x80), else 0 */
	uint16_t sport, dport;  /* host order */
	uint16_t src_ep_id;     /* local endpoint IDs, 0 when none */
	uint16_t dst_ep_id;
	uint32_t src_identity, dst_identity;
	uint32_t ifindex;       /* the host veth */
	uint32_t len;           /* packet length */
	uint64_t mono_ns;       /* CLOCK_MONOTONIC when the program saw it */
	uint64_t time_ns;       /* the same as CLOCK_REALTIME nanoseconds */
	uint64_t lost_before;   /* events dropped (bus full) since the previous one */
	uint8_t saddr[16], daddr[16]; /* network order; IPv4 in the first 4 bytes */
	char reason_name[48];   /* "forwarded", "drop:spoofed-source-ip", ... */
	/* SDK 1.7 (appended; absent, i.e. 0, when sz stops before them) */
	uint32_t policy_rule;   /* the deciding rule's ID (the "policy" capability's
				 * rule_lookup names it), 0: none / unknown */
	uint8_t policy_match;   /* enum fibril_datapath_policy_match */
	uint8_t policy_dir;     /* enum fibril_datapath_policy_dir of the deciding
				 * check (the sender's egress, the receiver's ingress) */
	uint8_t pad[2];
	/* round 3 (appended): an ICMP / ICMPv6 packet's type and code, when
	 * icmp_known (the program that saw it says them) */
	uint8_t icmp_type, icmp_code;
	uint8_t icmp_known;
	uint8_t pad2[5];
	/* SDK 1.11 (appended): a masqueraded packet's source after the
	 * translation, when xlated (saddr / sport are the pod's) */
	uint8_t saddr_xlated[16]; /* network order; IPv4 in the first 4 bytes */
	uint16_t sport_xlated;    /* host order; 0 for ICMP */
	uint8_t xlated;
	uint8_t pad3[5];
};

/* Drops the datapath saw but sent no event for, since the datapath module
 * started: `suppressed` over the event rate limit ([datapath]
 * drop-events-rate / drop-events-burst), `ring_lost` events the dp_events
 * ring had no room for. Published on this topic when they change (looked
 * at every 200 ms), so a reader of the events can say how much it did not
 * see (hubble-lite: lost_events in the stream, "sampled" in GET
 * /v1/flows). A new topic of round 3 (no new symbol). */
#define FIBRIL_DATAPATH_TOPIC_EVENTS_UNSENT "datapath.events_unsent"
#define FIBRIL_DATAPATH_EVENTS_UNSENT_VERSION 1

struct fibril_datapath_events_unsent {
	uint32_t sz;            /* sizeof as published; grows at the end */
	uint32_t pad;
	uint64_t suppressed;    /* drop events over the rate limit (total) */
	uint64_t ring_lost;     /* events the ring had no room for (total) */
};

#ifdef __cplusplus
}
#endif
#endif
