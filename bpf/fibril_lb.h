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

/* ---- lb_ct: LRU_HASH, the per-packet NAT's flows (tc, IPv4) -------------
 * dir 0: (client, frontend) -> the backend chosen; dir 1: (backend,
 * client) -> the frontend, for the reply. */
struct lb_ct_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;  /* network order */
	__u16 dport;
	__u8 proto;
	__u8 dir;     /* 0: to a frontend, 1: a reply from a backend */
	__u8 pad[2];
};
struct lb_ct_val {
	__u8 addr[16]; /* dir 0: the backend; dir 1: the frontend */
	__u16 port;
	__u16 rev_nat_id;
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
	LB_M_COUNT,
};

#endif
