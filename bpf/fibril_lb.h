/* bpf/fibril_lb.h - the layouts shared by the service load balancer's BPF
 * programs (bpf/fibril_lb.bpf.c) and the lb module (modules/lb/): map names,
 * keys and values. Included by BPF C and by user space (<linux/types.h>
 * only).
 *
 * Addresses are 16 bytes in network order; an IPv4 address is stored
 * IPv4-mapped (::ffff:a.b.c.d), so one set of maps serves both families.
 * Ports are in network order, every other field in host order. A layout
 * change must change a map's size (or name), so that the host's registry
 * recreates a pin that no longer fits.
 *
 * The service map follows Cilium's lb4_services layout: per frontend
 * (address, port, protocol) slot 0 is the "master" entry (the service's
 * ID = its reverse-NAT index, how many backends are selectable, flags,
 * affinity timeout); slots 1..count hold the selectable backends' IDs and
 * slots count+1..count+qcount the service's other backends (terminating or
 * not ready while ready ones exist), kept so that a restarted agent
 * restores every service, backend and ID from the pins alone. */
#ifndef FIBRIL_LB_H
#define FIBRIL_LB_H

#include <linux/types.h>

#define LB_MAP_SERVICES "lb_services"
#define LB_MAP_BACKENDS "lb_backends"
#define LB_MAP_REVNAT "lb_revnat"
#define LB_MAP_MAGLEV "lb_maglev"
#define LB_MAP_AFFINITY "lb_affinity"
#define LB_MAP_AFF_MATCH "lb_aff_match"
#define LB_MAP_SK_REVNAT "lb_sk_revnat"
#define LB_MAP_METRICS "lb_metrics"
#define LB_MAP_CT "lb_ct"
#define LB_MAP_CT_SRC "lb_ct_src"
#define LB_MAP_DEVICES "lb_devices"
#define LB_MAP_SRC_RANGE "lb_src_range"
#define LB_MAP_FRAG "lb_frag"
#define LB_MAP_NODE_ADDRS "lb_node_addrs"

/* Cilium's default Maglev table size; [lb] maglev-table-size must be a
 * prime no larger than LB_MAGLEV_MAX. */
#define LB_MAGLEV_DEFAULT 16381
#define LB_MAGLEV_MAX 131071

/* service types (the low bits of lb_svc_val.flags) */
enum lb_svc_type {
	LB_SVC_CLUSTER_IP = 0,
	LB_SVC_NODE_PORT = 1,
	LB_SVC_EXTERNAL_IP = 2,
	LB_SVC_LOAD_BALANCER = 3,
};
#define LB_SVC_TYPE_MASK 0x03
#define LB_F_AFFINITY 0x04      /* sessionAffinity ClientIP */
#define LB_F_EXT_LOCAL 0x08     /* externalTrafficPolicy Local */
#define LB_F_INT_LOCAL 0x10     /* internalTrafficPolicy Local */
#define LB_F_FALLBACK 0x20      /* the selectable set is the terminating backends */
#define LB_F_SRC_RANGES 0x40    /* loadBalancerSourceRanges: lb_src_range says who may */

enum lb_algorithm {
	LB_ALG_RANDOM = 0,
	LB_ALG_MAGLEV = 1,
};

/* backend states (Cilium's BackendState) */
enum lb_backend_state {
	LB_BE_ACTIVE = 0,      /* ready */
	LB_BE_TERMINATING = 1, /* serving and terminating */
	LB_BE_NOT_READY = 2,   /* neither ready nor serving (Cilium: quarantined) */
	LB_BE_MAINTENANCE = 3,
};

/* ---- lb_services: HASH ------------------------------------------------- */
struct lb_svc_key {
	__u8 addr[16];
	__u16 port;   /* network order */
	__u16 slot;   /* 0: master */
	__u8 proto;   /* IPPROTO_TCP / UDP / SCTP */
	__u8 scope;   /* reserved, 0 */
	__u8 pad[2];
};

struct lb_svc_val {
	__u32 backend_id;       /* slots >= 1; 0 in the master */
	__u16 count;            /* master: selectable backends (slots 1..count) */
	__u16 qcount;           /* master: further backends (not selectable) */
	__u16 rev_nat_id;       /* the service ID */
	__u8 flags;             /* master: type | LB_F_*; slots: the backend's
				 * state in this service (enum lb_backend_state) */
	__u8 algorithm;         /* enum lb_algorithm */
	__u32 affinity_timeout; /* seconds (LB_F_AFFINITY) */
};

/* ---- lb_backends: HASH, backend ID -> address ---------------------------- */
struct lb_backend {
	__u8 addr[16];
	__u16 port;   /* network order */
	__u8 proto;
	__u8 state;   /* enum lb_backend_state, as last set (a backend shared
		       * by services has its state per service in their slots) */
	__u32 pad;
};

/* ---- lb_revnat: HASH, service ID -> frontend ----------------------------- */
struct lb_revnat {
	__u8 addr[16];
	__u16 port;   /* network order */
	__u16 pad;
};

/* ---- lb_maglev: HASH (no prealloc), service ID -> __u32[M] backend IDs --- */

/* ---- lb_affinity: LRU_HASH, (client, service) -> backend ----------------- */
struct lb_aff_key {
	__u64 client;     /* socket level: the client's netns cookie */
	__u32 rev_nat_id;
	__u32 pad;
};
struct lb_aff_val {
	__u64 last_used_ns; /* bpf_ktime_get_ns() */
	__u32 backend_id;
	__u32 pad;
};

/* ---- lb_aff_match: HASH, (backend, service) selectable for affinity ------ */
struct lb_aff_match_key {
	__u32 backend_id;
	__u32 rev_nat_id;
};

/* ---- lb_sk_revnat: LRU_HASH, (socket, backend) -> frontend --------------- */
struct lb_sk_revnat_key {
	__u64 cookie;   /* bpf_get_socket_cookie() */
	__u8 addr[16];  /* the backend */
	__u16 port;
	__u16 pad[3];
};
struct lb_sk_revnat_val {
	__u8 addr[16];  /* the frontend */
	__u16 port;
	__u16 rev_nat_id;
};

/* ---- lb_ct: HASH, the per-packet NAT's flows (tc, IPv4 and IPv6) ---------
 * Not an LRU: a live flow is never evicted to make room for a new one (a
 * SYN flood would push out established connections and free SNAT ports
 * still in use). When it is full a new flow is dropped (tc-ct-full); the
 * module's GC (modules/lb/ctgc.c) removes the idle ones.
 * dir 0 (LB_CT_INGRESS): a packet arriving on a nodeport device whose
 * (source, destination) is the key gets its destination rewritten to the
 * value; dir 1 (LB_CT_EGRESS): a packet leaving through a nodeport (or the
 * tunnel) device gets its source rewritten. A flow from client C to
 * frontend F sent to backend B has two entries:
 *   ingress (C, F) -> B        egress (B, C) -> F
 * and, when B is on another node and the node's address S (port s) is put
 * in as the source (SNAT, Cilium's default NodePort mode), two more:
 *   egress (C, B) -> S:s       ingress (B, S:s) -> C
 * so the reply comes back through this node and both addresses are
 * restored. Entries go in pairs, each one's partner named by its key and
 * value: an ingress entry's partner is egress (value, key.saddr), an egress
 * entry's is ingress (key.daddr, value). A packet refreshes the entry it
 * matched and, when its second changed, the partner: so each entry of a
 * flow lives as long as traffic in either direction.
 *
 * `seen` (the value's last word, 0 in entries of older programs) holds the
 * CLOCK_MONOTONIC second of the flow's last packet modulo 2^30 and the
 * flow's TCP state: the lb module's GC (modules/lb/ctgc.c) removes an entry
 * idle longer than its state's timeout ([lb] ct-timeout-*).
 * LB_CT_F_CHARGED marks the one entry of a flow (its ingress (client,
 * frontend) entry) that holds the flow's charge in lb_ct_src: the GC gives
 * the charge back when it removes that entry, and only then, so a flow
 * whose entries go in different passes is uncounted exactly once. */
#define LB_CT_INGRESS 0
#define LB_CT_EGRESS 1
struct lb_ct_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;  /* network order */
	__u16 dport;
	__u8 proto;
	__u8 dir;     /* LB_CT_INGRESS / LB_CT_EGRESS */
	__u8 pad[2];
};
struct lb_ct_val {
	__u8 addr[16]; /* the new destination (ingress) or source (egress) */
	__u16 port;
	__u16 rev_nat_id;
	__u32 seen;    /* LB_CT_SEEN_MASK: second; LB_CT_F_*: TCP state */
};
#define LB_CT_SEEN_MASK 0x1fffffffu
#define LB_CT_F_CHARGED 0x20000000u /* this entry holds its flow's lb_ct_src charge */
#define LB_CT_F_SYN 0x40000000u     /* TCP: only the handshake so far */
#define LB_CT_F_CLOSING 0x80000000u /* TCP: a FIN or RST was seen */

/* ---- lb_ct_src: ARRAY (mmapable) of LB_CT_SRC_SLOTS __u64 ------------------
 * The new flows of lb_ct each client holds, so that one source cannot fill
 * the table for everyone: a client is an IPv4 address or an IPv6 /64 (the
 * least an IPv6 site is given: per address, one host would have 2^64
 * quotas), hashed with a per-map secret (slot 0, written when the map is
 * made) to one of slots 1..LB_CT_SRC_SLOTS-1. tc's new_flow checks the
 * slot against [lb] ct-source-max before it makes any entry (over it: the
 * flow is dropped, tc-ct-source-quota) and adds one; the GC takes one off
 * (atomically, through the mapping) when it removes the flow's charged
 * entry (LB_CT_F_CHARGED). Two clients sharing a slot share its quota: one
 * chance in 65535 for a given pair, unpredictable without the secret. */
#define LB_CT_SRC_SLOTS 65536

/* the lb_ct_src slot of a client address (IPv4-mapped or IPv6) */
static inline __u32 lb_ct_src_slot(const __u8 addr[16], __u64 secret)
{
	__u64 hi, lo;
	__builtin_memcpy(&hi, addr, 8);
	__builtin_memcpy(&lo, addr + 8, 8);
	__u64 x = (hi ? hi : lo) ^ secret; /* IPv4: the address; IPv6: its /64 */
	for (int i = 0; i < 2; i++) {      /* murmur3's finalizer, twice, keyed */
		x ^= x >> 33;
		x *= 0xff51afd7ed558ccdULL;
		x ^= x >> 33;
		x *= 0xc4ceb9fe1a85ec53ULL;
		x ^= x >> 33;
		x += secret;
	}
	return 1 + (__u32)(x >> 32) % (LB_CT_SRC_SLOTS - 1);
}

/* NodePort SNAT source ports: above Linux's default ephemeral range
 * (32768-60999), so that a port is never one the node's own sockets use */
#define LB_SNAT_PORT_MIN 61000
#define LB_SNAT_PORT_MAX 65535
#define LB_SNAT_RETRIES 16  /* random ports tried for a new flow */

/* ---- lb_src_range: LPM_TRIE, (service ID, source prefix) -> 1 ------------
 * A service with LB_F_SRC_RANGES (loadBalancerSourceRanges) serves a new
 * flow from tc only when its source matches one of its prefixes. prefixlen
 * counts the 32 bits of rev_nat_id and pad, then the address's (an IPv4
 * prefix /n is stored IPv4-mapped: 96 + n). */
struct lb_src_range_key {
	__u32 prefixlen;
	__u16 rev_nat_id; /* network order (the trie matches bytes in order) */
	__u16 pad;
	__u8 addr[16];
};
#define LB_SRC_RANGE_MAX 65536

/* ---- lb_frag: LRU_HASH, a fragmented datagram's ports ---------------------
 * The first fragment of a translated datagram leaves its ports here under
 * (source, destination, protocol, IP id) as they arrived, so that the later
 * fragments (which carry no L4 header) find the same flow. */
struct lb_frag_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u32 id;     /* IPv4 id or IPv6 fragment identification */
	__u8 proto;
	__u8 pad[3];
};
struct lb_frag_val {
	__u16 sport;  /* network order */
	__u16 dport;
};
#define LB_FRAG_MAX 8192

/* ---- lb_node_addrs: HASH, an address of this node -> 1 ------------------
 * The node's own addresses (every device's, and [lb] node-addresses), kept
 * up to date by the module from rtnetlink: tc translates a NodePort only
 * when its destination is one of them. */
struct lb_node_addr_key {
	__u8 addr[16];
};
#define LB_NODE_ADDRS_MAX 4096

/* ---- lb_devices: HASH, ifindex -> a device the tc programs are on ------- */
#define LB_DEV_NODEPORT 0x1 /* [lb] nodeport-devices: traffic from outside */
#define LB_DEV_TUNNEL 0x2   /* the VXLAN device (egress only: SNAT) */
struct lb_device {
	__u8 addr4[16]; /* the SNAT address of each family (the device's first */
	__u8 addr6[16]; /* global address); all zero: no SNAT that family */
	__u32 flags;    /* LB_DEV_* */
	__u32 pad;
};

/* ---- lb_metrics: PERCPU_ARRAY of __u64, by enum lb_metric ---------------- */
enum lb_metric {
	LB_M_TRANSLATED = 0,   /* connect/sendmsg sent to a backend */
	LB_M_NO_BACKEND,       /* refused: the service has no backend */
	LB_M_AFFINITY_HIT,     /* the backend came from session affinity */
	LB_M_REVNAT,           /* recvmsg/getpeername answered the frontend */
	LB_M_BACKEND_MISSING,  /* a slot named a backend not in lb_backends */
	LB_M_TC_DNAT,          /* tc: a packet to a frontend sent to a backend */
	LB_M_TC_REVNAT,        /* tc: a backend's reply rewritten to the frontend */
	LB_M_TC_NO_BACKEND,    /* tc: dropped, the service has no backend */
	LB_M_TC_SNAT,          /* tc: a new flow to another node's backend, SNATed */
	LB_M_TC_SNAT_NO_PORT,  /* tc: no free SNAT port: dropped */
	LB_M_TC_CT_FULL,       /* tc: lb_ct full: a new flow dropped */
	LB_M_TC_SRC_RANGE_DROP, /* tc: a source outside loadBalancerSourceRanges: dropped */
	LB_M_TC_REWRITE_FAIL,  /* tc: a checksum or store helper failed: dropped */
	LB_M_TC_ICMP_REVNAT,   /* tc: an ICMP error about a flow translated */
	LB_M_TC_FRAG,          /* tc: a later fragment translated through lb_frag */
	LB_M_TC_CT_SRC_QUOTA,  /* tc: the client holds [lb] ct-source-max flows: dropped */
	LB_M_COUNT,
};

#endif
