/* bpf/fibril_dp.h - the layouts shared by the datapath's BPF program
 * (bpf/fibril_dp.bpf.c) and the datapath module (modules/datapath/): map
 * names and sizes, map keys and values, metrics reasons, and the record the
 * program writes to the events ring buffer. Included by BPF C (clang
 * -target bpf) and by user space, so it uses only <linux/types.h>.
 *
 * Byte order: addresses and ports are in network order everywhere (as they
 * are in the packet); every other field is in host order. IPv4 addresses
 * take the first 4 bytes of a 16-byte address field, the rest is zero.
 * A layout change must change the map's size (or its name), so that the
 * host's map registry recreates a pin whose layout no longer fits. */
#ifndef FIBRIL_DP_H
#define FIBRIL_DP_H

#include <linux/types.h>

/* ---- map names (pins under [agent] bpffs-dir) and sizes ---------------- */
#define DP_MAP_ENDPOINTS "dp_endpoints"
#define DP_MAP_IPCACHE "dp_ipcache"
#define DP_MAP_CONNTRACK "dp_conntrack"
#define DP_MAP_METRICS "dp_metrics"
#define DP_MAP_EVENTS "dp_events"
#define DP_MAP_CONFIG "dp_config"

#define DP_ENDPOINTS_MAX 65536
#define DP_IPCACHE_MAX 65536
#define DP_CONNTRACK_MAX 131072
#define DP_METRICS_MAX 1024
#define DP_EVENTS_BYTES (1u << 20) /* ring buffer: power of 2, page multiple */

#define DP_FAMILY_IPV4 4
#define DP_FAMILY_IPV6 6

/* ---- dp_endpoints: HASH, one entry per local endpoint address ---------- */
struct dp_endpoint_key {
	__u8 family;  /* DP_FAMILY_IPV4 / DP_FAMILY_IPV6 */
	__u8 pad[3];
	__u8 addr[16]; /* network order */
};

struct dp_endpoint_info {
	__u32 ifindex;   /* the host-side veth */
	__u32 identity;  /* numeric security identity */
	__u16 ep_id;     /* local endpoint ID */
	__u16 flags;     /* reserved, 0 */
	__u8 mac[6];     /* the pod side's MAC */
	__u8 host_mac[6]; /* the host-side veth's MAC */
};

/* ---- dp_ipcache: LPM_TRIE (BPF_F_NO_PREALLOC), prefix -> identity ------
 * prefixlen counts the bits after the prefixlen field: 32 for family+pad,
 * then the address prefix (so 10.0.0.0/24 has prefixlen 32 + 24). */
#define DP_IPCACHE_PREFIX_HDR 32
struct dp_ipcache_key {
	__u32 prefixlen;
	__u8 family;
	__u8 pad[3];
	__u8 addr[16];
};

struct dp_ipcache_value {
	__u32 identity;
	__u32 flags; /* reserved, 0 */
};

/* Reserved identities the datapath writes itself (as <fibril/endpoint.h>). */
#define DP_IDENTITY_UNKNOWN 0
#define DP_IDENTITY_HOST 1
#define DP_IDENTITY_WORLD 2

/* ---- dp_conntrack: LRU_HASH, one entry per flow ------------------------
 * The key is the flow as its first packet went (the "forward" direction);
 * packets the other way update the same entry's reply counters. Non-first
 * IPv4 fragments and IPv6 packets with extension headers other than one
 * hop-by-hop header carry ports 0 (and their proto is the next header). */
struct dp_ct_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport; /* network order */
	__u16 dport; /* network order */
	__u8 proto;  /* IPPROTO_* */
	__u8 family;
	__u8 pad[2];
};

#define DP_CT_F_REPLY_SEEN 0x01 /* a packet went the other way */
#define DP_CT_F_CLOSING 0x02    /* a TCP FIN or RST was seen */

struct dp_ct_value {
	__u64 packets;       /* forward direction */
	__u64 bytes;
	__u64 rx_packets;    /* reply direction */
	__u64 rx_bytes;
	__u64 first_seen_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 last_seen_ns;
	__u32 ifindex;       /* the veth the first packet was seen on */
	__u16 src_ep_id;     /* endpoint that opened the flow, 0: the node */
	__u8 tcp_flags;      /* TCP flags seen, both directions OR-ed */
	__u8 flags;          /* DP_CT_F_* */
};

/* ---- dp_metrics: PERCPU_HASH, (reason, direction) -> packets, bytes ----- */
enum dp_direction {
	DP_DIR_FROM_ENDPOINT = 0, /* the host veth's ingress: sent by the pod */
	DP_DIR_TO_ENDPOINT = 1,   /* the host veth's egress: delivered to the pod */
};

/* Reasons below 128 are verdicts that let the packet go on; from 128 on
 * they are drops (as Cilium numbers its drop reasons). */
enum dp_reason {
	DP_REASON_FORWARDED = 1,      /* redirected to a local endpoint's veth peer */
	DP_REASON_TO_STACK = 2,       /* passed to the node's network stack */
	DP_REASON_ND_ANSWERED = 3,    /* an IPv6 neighbour solicitation for the
				       * gateway, answered by the program */
	DP_REASON_DELIVERED = 4,      /* to-endpoint: let out of the host veth to
				       * the pod (from the node's stack) */
	DP_REASON_DROP_SPOOFED_IP = 130,  /* source IP is not the endpoint's */
	DP_REASON_DROP_SPOOFED_ARP = 131, /* ARP sender IP is not the endpoint's */
	DP_REASON_DROP_INVALID = 132,     /* truncated or malformed header */
	DP_REASON_DROP_UNSUPPORTED_L3 = 133, /* neither IPv4, IPv6 nor ARP */
	DP_REASON_DROP_POLICY = 134,      /* the policy hook denied it */
	DP_REASON_DROP_REDIRECT = 135,    /* bpf_redirect_peer() refused */
};

struct dp_metrics_key {
	__u8 reason;    /* enum dp_reason */
	__u8 direction; /* enum dp_direction */
	__u16 pad;
};

struct dp_metrics_value {
	__u64 packets;
	__u64 bytes;
};

/* ---- dp_config: ARRAY of 1, read by the program per packet ------------- */
#define DP_CFG_F_TRACE 0x1 /* emit trace events, not only drops */

struct dp_config {
	__u32 flags; /* DP_CFG_F_* */
	__u32 pad;
};

/* ---- dp_events: RINGBUF of struct dp_event records ----------------------
 * One record per drop, and per forwarded / passed packet when tracing is on
 * ([datapath] trace-events). Consumers (the datapath module today, flow
 * export later) read whole records; `size` lets a reader skip a longer
 * record written by a newer program. */
enum dp_event_type {
	DP_EVENT_DROP = 1,  /* reason: a DP_REASON_DROP_* */
	DP_EVENT_TRACE = 2, /* reason: a verdict below 128 (forwarded, ...) */
};

struct dp_event {
	__u16 size;         /* sizeof(struct dp_event) as the program built it */
	__u8 type;          /* enum dp_event_type */
	__u8 reason;        /* enum dp_reason */
	__u16 src_ep_id;    /* the sending endpoint, 0 when unknown */
	__u16 dst_ep_id;    /* the local destination endpoint, 0 when none */
	__u32 src_identity;
	__u32 dst_identity;
	__u32 ifindex;      /* the host veth: where it came in (from-endpoint)
			     * or goes out (to-endpoint) */
	__u32 len;          /* packet length (skb->len) */
	__u64 ts_ns;        /* bpf_ktime_get_ns() */
	__u8 family;        /* DP_FAMILY_* or 0 for ARP/unknown */
	__u8 proto;         /* IPPROTO_*, 0 when none */
	__u16 sport;        /* network order */
	__u16 dport;        /* network order */
	__u8 direction;     /* enum dp_direction (older programs: 0) */
	__u8 pad;
	__u8 saddr[16];
	__u8 daddr[16];
};

#endif
