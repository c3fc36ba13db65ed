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
#define DP_MAP_CONNTRACK "dp_conntrack" /* TCP flows */
#define DP_MAP_CT_ANY "dp_ct_any"        /* every other protocol (UDP, ICMP...) */
#define DP_MAP_FRAGS "dp_frags"         /* fragments endpoints sent (from-endpoint) */
#define DP_MAP_FRAGS_OUT "dp_frags_out" /* fragments from outside (to-endpoint, overlay, netdev) */
#define DP_MAP_CT_COUNT "dp_ct_count"   /* conntrack entries each endpoint holds */
#define DP_MAP_EVLIMIT "dp_evlimit"
#define DP_MAP_METRICS "dp_metrics"
#define DP_MAP_EVENTS "dp_events"
#define DP_MAP_CONFIG "dp_config"
#define DP_MAP_POLICY "dp_policy"
#define DP_MAP_POLICY_EP "dp_policy_ep"
#define DP_MAP_NAT "dp_nat"             /* masquerading: both directions of each flow */
#define DP_MAP_NAT_DEVS "dp_nat_devs"   /* the external devices' addresses */
#define DP_MAP_NOMASQ "dp_nomasq"       /* destinations never masqueraded */
#define DP_MAP_NAT_COUNT "dp_nat_count" /* masqueraded flows each endpoint holds */
#define DP_MAP_EGRESS "dp_egress"       /* egress gateway: (identity, destination) -> gateway */

#define DP_ENDPOINTS_MAX 65536
#define DP_IPCACHE_MAX 524288  /* Cilium's default: every endpoint of a large cluster (no prealloc) */
#define DP_CONNTRACK_MAX 131072 /* default of [datapath] conntrack-max-tcp */
#define DP_CT_ANY_MAX 65536     /* default of [datapath] conntrack-max-other */
#define DP_FRAGS_MAX 16384
#define DP_FRAGS_SLOTS 64 /* dp_frags slots of one pod address and protocol (lib/frag.h) */
#define DP_IPV6_MAX_EXTHDRS 8   /* extension headers walked before L4 (Cilium: 4) */
#define DP_METRICS_DIRECTIONS 5 /* enum dp_direction's values */
#define DP_METRICS_MAX (DP_METRICS_DIRECTIONS * 256) /* a slot per (direction, reason) */
#define DP_EVENTS_BYTES (8u << 20) /* ring buffer: power of 2, page multiple; the
				    * default, [datapath] events-ring-bytes sets it */
/* The reader is woken once this much is waiting (about 800 records), not
 * per record; it also reads every DP_EVENTS_POLL_MS (the datapath module's
 * timer), so a lone event waits at most that long. */
#define DP_EVENTS_WAKEUP_BYTES (64u << 10)
#define DP_EVENTS_POLL_MS 50
#define DP_POLICY_MAX 65536
#define DP_POLICY_EP_MAX 65536 /* one slot per local endpoint ID */
#define DP_CT_COUNT_MAX 65536  /* one slot per local endpoint ID (0: the outside's total) */
#define DP_NAT_MAX 131072      /* dp_nat: two entries per masqueraded flow */
#define DP_NAT_DEVS_MAX 256
#define DP_NOMASQ_MAX 16384
#define DP_EGRESS_MAX 16384

#define DP_FAMILY_IPV4 4
#define DP_FAMILY_IPV6 6

/* ---- dp_endpoints: HASH, one entry per local endpoint address ---------- */
struct dp_endpoint_key {
	__u8 family;  /* DP_FAMILY_IPV4 / DP_FAMILY_IPV6 */
	__u8 pad[3];
	__u8 addr[16]; /* network order */
};

/* the endpoint's traffic leaving the cluster is not masqueraded (its pod's
 * label network.fibril.io/masquerade=false) */
#define DP_EP_F_NO_MASQUERADE 0x1
struct dp_endpoint_info {
	__u32 ifindex;   /* the host-side veth */
	__u32 identity;  /* numeric security identity */
	__u16 ep_id;     /* local endpoint ID */
	__u16 flags;     /* DP_EP_F_* */
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

/* The value grew (8 -> 28 bytes) with the tunnel endpoint, so a pin of
 * the old layout is recreated (its size no longer fits). tunnel_ip is the
 * node that hosts the prefix (Cilium's tunnel_endpoint): in tunnel mode
 * (dp_config.tunnel_ifindex set) a packet from an endpoint to a prefix
 * whose entry has DP_IPCACHE_F_TUNNEL goes into the VXLAN device with that
 * node as the outer destination. */
#define DP_IPCACHE_F_TUNNEL 0x1 /* tunnel_family / tunnel_ip are set */
#define DP_IPCACHE_F_CLUSTER 0x2 /* inside the cluster (a node, a pod CIDR, an
				  * endpoint: the claim of the nodes module or
				  * an endpoint's, set by the datapath module):
				  * never masqueraded */

struct dp_ipcache_value {
	__u32 identity;
	__u32 flags;          /* DP_IPCACHE_F_* */
	__u8 tunnel_family;   /* DP_FAMILY_IPV4 / _IPV6, 0: none */
	__u8 pad[3];
	__u8 tunnel_ip[16];   /* network order, IPv4 in the first 4 bytes */
};

/* Reserved identities the datapath writes itself (as <fibril/endpoint.h>). */
#define DP_IDENTITY_UNKNOWN 0
#define DP_IDENTITY_HOST 1
#define DP_IDENTITY_WORLD 2
#define DP_IDENTITY_REMOTE_NODE 6 /* another node's IP (the nodes module writes it) */

/* ---- dp_conntrack (TCP) and dp_ct_any (the rest): HASH (not LRU: a full
 * table refuses new flows, it never evicts a live one), one entry per flow
 * and enforcement point. Two maps, as Cilium's ct4_global and
 * ct_any4_global. The key is the flow as its first packet went past that
 * point (the "forward" direction) plus the point itself, as Cilium keeps
 * the direction in its CT key: ep_id is the local endpoint, dir says
 * whether the entry is that endpoint's egress (it sent the first packet;
 * made only by fibril_from_endpoint, after the source check) or its
 * ingress (it received it). A packet is a reply at a point only when that
 * same point recorded the reverse flow: endpoint E's ingress takes X -> E
 * as a reply only if E's own egress opened E -> X, and E's egress takes
 * E -> X as one only if E's ingress admitted X -> E - so a packet spoofed
 * towards another pod plants nothing E's policy honours. A pod-to-pod flow
 * on one node has two entries (the sender's egress, the receiver's
 * ingress). Ports come from the L4 header after the whole IPv6 extension
 * header chain; non-first fragments (IPv4 and IPv6) take them from
 * dp_frags / dp_frags_out. The key grew (40 -> 44 bytes), so an older pin
 * is recreated. */
struct dp_ct_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport; /* network order */
	__u16 dport; /* network order */
	__u8 proto;  /* IPPROTO_* */
	__u8 family;
	__u16 ep_id; /* the local endpoint whose enforcement point this is; 0 in
		      * a packet's tuple */
	__u8 dir;    /* enum dp_policy_direction: its egress or its ingress */
	__u8 pad[3];
};

#define DP_CT_F_REPLY_SEEN 0x01 /* a packet went the other way */
#define DP_CT_F_CLOSING 0x02    /* a TCP FIN or RST was seen */
#define DP_CT_F_CHARGED 0x04    /* counted in dp_ct_count (slot charge_ep_id):
				 * the GC gives the count back when it removes it */
#define DP_CT_F_OUTSIDE 0x08    /* charged to that endpoint's "outside" count
				 * (and slot 0's total), else to its "own" */

/* Timestamps are whole seconds of CLOCK_MONOTONIC (bpf_ktime_get_ns() /
 * 1e9). last_seen_s is rewritten only when it is at least
 * dp_config.ct_refresh_s old (as Cilium's ct_update_timeout), so packets of
 * a busy flow on several CPUs do not write its cache line every time; the
 * GC adds that interval to every timeout. */
struct dp_ct_value {
	__u64 packets;       /* forward direction */
	__u64 bytes;
	__u64 rx_packets;    /* reply direction */
	__u64 rx_bytes;
	__u32 first_seen_s;
	__u32 last_seen_s;
	__u32 ifindex;       /* the veth the first packet was seen on */
	__u16 src_ep_id;     /* endpoint that opened the flow, 0: the node or
			      * outside (only a source-checked sender counts) */
	__u8 tcp_flags;      /* TCP flags seen, both directions OR-ed */
	__u8 flags;          /* DP_CT_F_* */
	__u16 charge_ep_id;  /* whose dp_ct_count slot holds it (DP_CT_F_CHARGED) */
	__u16 charge_gen;    /* that slot's gen (low 16 bits) when it was charged */
	__u16 ep_gen;        /* the gen of the key's ep_id slot when it was made: an
			      * entry whose endpoint (or charged one) was removed
			      * since is stale, and the GC takes it out uncounted */
	__u8 pad[2];
};

/* ---- dp_ct_count: ARRAY (mmapable) indexed by endpoint ID: how many
 * conntrack entries each endpoint is charged with, per map (0 dp_conntrack,
 * 1 dp_ct_any). An entry is charged to whoever made it: a flow a pod sends
 * (from-endpoint: its egress entry and, pod to pod, the receiver's ingress
 * entry) to the sender's "own" count; a flow from outside (the node's
 * stack, the underlay, another node: whatever no source check vouches for)
 * to the receiving endpoint's "outside" count and to slot 0's, the
 * outside's total. Before it creates an entry the program checks the count
 * against dp_config's limits (a new flow over them is dropped, ct-full);
 * the GC, which alone removes entries, gives the count back (atomically,
 * through the mapping). So one pod can hold at most ct_ep_max of a table,
 * the outside at most ct_ep_max towards one pod and ct_outside_max in all,
 * and none of it at anybody else's expense: nothing is ever evicted.
 * When an endpoint is removed the module zeroes its slot (and takes its
 * outside counts off slot 0's) and bumps gen: the entries made with the old
 * gen are no longer charged to anyone, the next GC pass deletes them, and a
 * pod given the same slot starts with an empty quota. */
struct dp_ct_count {
	__u32 own[2];     /* [0] dp_conntrack, [1] dp_ct_any */
	__u32 outside[2];
	__u32 gen;        /* bumped when the slot's endpoint is removed */
	__u32 pad;        /* (an mmapable array's values are 8-byte aligned) */
};

/* ---- dp_frags, dp_frags_out: LRU_HASH, a fragmented datagram -> its ports
 * Filled by the first fragment (offset 0, more-fragments set), read by
 * the later ones (which carry no L4 header), as Cilium's IPv4 fragment
 * tracking; IPv6 fragments (fragment extension header) too. dp_frags holds
 * what endpoints sent (fibril_from_endpoint, after the source check),
 * dp_frags_out what came from outside (the other three programs): a
 * spoofer outside can neither write nor evict the pods' entries. In both
 * the key is a slot, not a datagram (lib/frag.h): the sender's address,
 * daddr 0, id one of DP_FRAGS_SLOTS slots hashed from the IP ID and the
 * destination, whose hash (the tag) is in the value; so one pod (or one
 * outside source address) holds at most DP_FRAGS_SLOTS entries per
 * address and protocol and overwrites only its own. (dp_frags_out was
 * keyed by the datagram before; an older agent's entries there are not
 * found and age out.) */
struct dp_frag_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u32 id;    /* the slot (below DP_FRAGS_SLOTS) */
	__u8 proto;  /* the upper-layer protocol */
	__u8 family;
	__u8 pad[2];
};

struct dp_frag_ports {
	__u16 sport; /* network order */
	__u16 dport;
	__u32 tag;   /* the datagram's (IP ID, destination): compared */
};

/* ---- dp_metrics: PERCPU_HASH, (reason, direction) -> packets, bytes ----- */
enum dp_direction {
	DP_DIR_FROM_ENDPOINT = 0, /* the host veth's ingress: sent by the pod */
	DP_DIR_TO_ENDPOINT = 1,   /* the host veth's egress: delivered to the pod */
	DP_DIR_FROM_OVERLAY = 2,  /* the VXLAN device's ingress: from another node */
	DP_DIR_FROM_NETDEV = 3,   /* an underlay device's ingress (host-routing =
				   * bpf, native mode): from another node */
	DP_DIR_TO_NETDEV = 4,     /* an external device's egress (masquerade):
				   * leaving the node */
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
	DP_REASON_EVENT_SUPPRESSED = 5, /* not a verdict: a drop whose event the
					 * rate limit held back (the drop itself
					 * is counted under its own reason) */
	DP_REASON_TO_TUNNEL = 6,      /* encapsulated: redirected into the VXLAN
				       * device towards the remote node */
	DP_REASON_EVENT_LOST = 7,     /* not a verdict: an event dp_events had no
				       * room for (the reader was behind) */
	DP_REASON_TO_FIB = 9,         /* host-routing = bpf: redirected out of the
				       * FIB's device toward the next hop
				       * (bpf_redirect_neigh), skipping the stack */
	DP_REASON_MASQUERADED = 10,   /* to-netdev: source-NATed to the device's
				       * address (dp_nat) */
	DP_REASON_REV_NAT = 11,       /* from-netdev: a reply to a masqueraded flow,
				       * its destination restored */
	DP_REASON_EGW_REDIRECT = 20,  /* from-endpoint: an egress gateway policy's
				       * flow sent to its gateway node (dp_egress) */
	DP_REASON_EGW_SNAT = 21,      /* to-netdev: an egress gateway policy's flow
				       * source-NATed to this gateway's egress IP */
	DP_REASON_POLICY_ALLOWED = 8, /* not a packet verdict: the policy allowed the
				       * first packet of a flow (DP_EVENT_POLICY) */
	DP_REASON_DROP_SPOOFED_IP = 130,  /* source IP is not the endpoint's */
	DP_REASON_DROP_SPOOFED_ARP = 131, /* ARP sender IP is not the endpoint's */
	DP_REASON_DROP_INVALID = 132,     /* truncated or malformed header */
	DP_REASON_DROP_UNSUPPORTED_L3 = 133, /* neither IPv4, IPv6 nor ARP */
	DP_REASON_DROP_POLICY = 134,      /* the policy hook denied it */
	DP_REASON_DROP_REDIRECT = 135,    /* bpf_redirect_peer() refused */
	DP_REASON_DROP_FRAG_NOT_FOUND = 136, /* a later fragment whose first one
					      * was not seen (from-endpoint) */
	DP_REASON_DROP_SPOOFED_MAC = 137, /* ARP sender / Ethernet source MAC is
					   * not the endpoint's */
	DP_REASON_DROP_NO_TUNNEL_KEY = 138, /* from the overlay without tunnel
					     * metadata (not a VXLAN packet) */
	DP_REASON_DROP_TUNNEL = 139,      /* the tunnel key could not be set */
	DP_REASON_DROP_CT_FULL = 140,     /* a new flow over its conntrack quota
					   * (dp_ct_count) or the table full */
	DP_REASON_DROP_SPOOFED_NETWORK = 144, /* from-netdev: from the network with a
					       * source that is this node's (identity
					       * host) or a local endpoint's address;
					       * to-endpoint: a local endpoint's
					       * address not from its veth */
	DP_REASON_DROP_TUNNEL_SOURCE = 145, /* from-overlay: the outer source is not
					     * a known node (ipcache: remote-node) */
	DP_REASON_DROP_NAT_NO_PORT = 146, /* to-netdev: no free masquerading port for
					   * (destination, node address) (or dp_nat
					   * full): the flow is refused, never given
					   * a port another flow holds */
	DP_REASON_DROP_NAT_QUOTA = 147,   /* to-netdev: the endpoint holds
					   * dp_config.nat_ep_max masqueraded flows
					   * already (dp_nat_count) */
	DP_REASON_DROP_EGW_NO_GATEWAY = 150, /* from-endpoint: an egress gateway
					      * policy selects the flow and none of
					      * its gateways is alive: dropped,
					      * never leaked with another address */
	DP_REASON_DROP_EGW_RELAY = 151,   /* to-netdev: another node's pod's flow
					   * this gateway would SNAT to its egress
					   * IP that did not come from the pod's
					   * own node (DP_MARK_MAGIC_FROM_NODE):
					   * forged on the underlay or by another
					   * node, never relayed */
};

/* dp_metrics: PERCPU_ARRAY, one slot per (direction, reason) at
 * DP_METRICS_INDEX (an array lookup the verifier inlines; it was a per-CPU
 * hash keyed by {u8 reason, u8 direction, u16 pad}, whose pin the agent
 * recreates). A slot never hit holds zeros. */
#define DP_METRICS_INDEX(reason, direction) ((__u32)(direction) * 256 + (__u32)(reason))
#define DP_METRICS_REASON(index) ((__u8)((index) & 0xff))
#define DP_METRICS_DIRECTION(index) ((__u8)((index) >> 8))

struct dp_metrics_value {
	__u64 packets;
	__u64 bytes;
};

/* ---- dp_config: ARRAY of 1, read by the program per packet ------------- */
#define DP_CFG_F_TRACE 0x1 /* emit trace events, not only drops */
#define DP_CFG_F_POLICY_VERDICT 0x2 /* emit a DP_EVENT_POLICY for the first packet
				     * of each flow an enforced policy allows */
#define DP_CFG_F_HOST_ROUTING 0x4 /* [datapath] host-routing = bpf: a packet from
				   * an endpoint to another node's pod (native
				   * mode) leaves by bpf_fib_lookup +
				   * bpf_redirect_neigh, not through the stack */
#define DP_CFG_F_MASQUERADE 0x8 /* [datapath] masquerade: pods' flows to the
				 * world leave with the device's address */
#define DP_CFG_F_EGW_GATEWAY 0x10 /* this node is an egress gateway (an entry of
				   * dp_egress has its egress IP): from-netdev
				   * marks other nodes' pods' packets for
				   * to-netdev's relay check only then */

struct dp_config {
	__u32 flags;        /* DP_CFG_F_* */
	__u32 ct_refresh_s; /* conntrack last_seen_s is rewritten at most this
			     * often (0 counts as 1) */
	__u32 event_rate;   /* drop events per second per CPU, 0: no limit */
	__u32 event_burst;  /* drop events in a burst per CPU (0 counts as 1) */
	__u32 tunnel_ifindex; /* tunnel mode: the VXLAN device (external /
			       * collect-metadata), 0: no tunnel */
	__u16 tunnel_port;    /* tunnel mode: its UDP port, network order (was
			       * pad: 0 from an older agent, no early exit):
			       * fibril_from_netdev hands the node's own VXLAN
			       * traffic to the stack at once */
	__u16 pad;
	/* appended (24 -> 40 bytes: the pin is recreated): the conntrack
	 * quotas (dp_ct_count), [0] dp_conntrack, [1] dp_ct_any; 0: no limit */
	__u32 ct_ep_max[2];      /* entries one endpoint's own flows may hold, and
				  * as many for the flows opened to it from outside */
	__u32 ct_outside_max[2]; /* entries all flows from outside may hold */
	/* appended (40 -> 48 bytes: the pin is recreated): masquerading's
	 * port (and ICMP echo identifier) range, host order, inclusive, and
	 * the masqueraded flows one endpoint may hold (dp_nat_count; 0: no
	 * limit) */
	__u16 nat_port_min;
	__u16 nat_port_max;
	__u32 nat_ep_max;
};

/* ---- the source identity in the packet's metadata ----------------------
 * The overlay program (fibril_from_overlay) takes the sender's identity
 * from the VNI and writes it into skb->mark for whatever handles the
 * packet after it in this node (the to-endpoint program's policy uses it
 * instead of the ipcache's answer for the source IP), as Cilium's
 * MARK_MAGIC_IDENTITY: the low byte says the mark carries an identity, the
 * upper 24 bits are the identity (a VNI is 24 bits). */
#define DP_MARK_MAGIC_MASK 0xffu
#define DP_MARK_MAGIC_IDENTITY 0xf1u
/* The same, and the packet came from the node that hosts its source
 * (fibril_from_overlay: the VXLAN outer source is the node the ipcache
 * names for the inner source): with DP_MARK_MAGIC_LINK_SOURCE below, what
 * lets a gateway SNAT another node's pod's packet to its egress IP
 * (lib/egressgw.h). Its low
 * byte differs from DP_MARK_MAGIC_IDENTITY in one bit, which
 * DP_MARK_MAGIC_ANY_IDENTITY leaves out: both carry an identity. */
#define DP_MARK_MAGIC_FROM_NODE 0xf3u
#define DP_MARK_MAGIC_ANY_IDENTITY 0xfdu
/* fibril_from_netdev, for what another node's pod sent through this node
 * (not to a local endpoint): the upper 24 bits are the low 24 bits of the
 * frame's source MAC, which fibril_to_netdev compares with the FIB's next
 * hop toward the pod's node before an egress gateway SNATs it. No
 * identity (mark_identity() leaves it out). */
#define DP_MARK_MAGIC_LINK_SOURCE 0xf5u
/* fibril_from_endpoint, on a packet it sends out itself (by the FIB's
 * answer, or into the VXLAN device): fibril_to_netdev has nothing to do
 * with it (another node's pod, the tunnel's own outer packet, a flow on
 * its way to its egress gateway), so it passes it at once, the mark
 * cleared, instead of looking it up again. No identity. A pod cannot set
 * it: the kernel clears the mark of what crosses from the pod's namespace
 * (veth); a local process with CAP_NET_ADMIN (SO_MARK) could only skip
 * what to_netdev does to pods' packets, which its own are not. */
#define DP_MARK_MAGIC_FORWARDED 0xf7u
#define DP_MARK_IDENTITY_SHIFT 8
#define DP_VNI_MAX 0xffffffu

/* ---- dp_evlimit: PERCPU_ARRAY of 1, the drop events' token bucket ------
 * One bucket per CPU (no atomics): credit in nanoseconds of rate, one
 * event costs 1e9 / event_rate, the bucket holds event_burst events. */
struct dp_evlimit {
	__u64 credit_ns;
	__u64 last_ns;
};

/* ---- dp_events: RINGBUF of struct dp_event records ----------------------
 * One record per drop (at most dp_config.event_rate per second per CPU:
 * the rest are counted in dp_metrics as DP_REASON_EVENT_SUPPRESSED), and per forwarded / passed packet when tracing is on
 * ([datapath] trace-events). Consumers (the datapath module today, flow
 * export later) read whole records; `size` lets a reader skip a longer
 * record written by a newer program. */
enum dp_event_type {
	DP_EVENT_DROP = 1,  /* reason: a DP_REASON_DROP_* */
	DP_EVENT_TRACE = 2, /* reason: a verdict below 128 (forwarded, ...) */
	DP_EVENT_POLICY = 3, /* reason DP_REASON_POLICY_ALLOWED: an enforced policy
			      * allowed a new flow (dp_config DP_CFG_F_POLICY_VERDICT),
			      * one per enforcement point (sender's egress,
			      * receiver's ingress), as Cilium's policy verdicts */
};

/* What the policy said about the packet (dp_event.policy_match): the
 * deciding entry's rule (dp_policy_value.rule_id) is in policy_rule. */
enum dp_policy_match {
	DP_POLICY_MATCH_NONE = 0,    /* no enforced policy looked at it (or a reply) */
	DP_POLICY_MATCH_ALLOW = 1,   /* an allow entry matched */
	DP_POLICY_MATCH_DENY = 2,    /* a deny entry matched (a deny always wins) */
	DP_POLICY_MATCH_DEFAULT_DENY = 3, /* enforced, and no entry matched */
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
	__u8 tcp_flags;     /* the TCP header's flags byte (FIN 0x01 .. CWR 0x80);
			     * was padding, always zeroed: older programs: 0 */
	__u8 saddr[16];
	__u8 daddr[16];
	/* appended (size DP_EVENT_SIZE_V1 before): the policy's verdict */
	__u32 policy_rule;  /* the deciding entry's rule ID (0: none / unknown) */
	__u8 policy_match;  /* enum dp_policy_match */
	__u8 policy_dir;    /* enum dp_policy_direction of the deciding check */
	__u16 pad2;
	/* appended (size DP_EVENT_SIZE_V2 before): an ICMP packet's type and
	 * code (proto ICMP or ICMPv6; 0 otherwise) */
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 pad3[6];
	/* appended (size DP_EVENT_SIZE_V3 before): a masqueraded packet's
	 * source after the translation (fibril_to_netdev's trace, reason
	 * DP_REASON_MASQUERADED; saddr / sport above are the pod's) */
	__u8 saddr_xlated[16];
	__u16 sport_xlated; /* network order */
	__u8 xlated;        /* 1: the two fields above are set */
	__u8 pad4[5];
};

/* The record's size before the policy fields: readers accept both. */
#define DP_EVENT_SIZE_V1 72
/* ... and before the ICMP type and code: a record this long or shorter
 * says nothing of them. */
#define DP_EVENT_SIZE_V2 80
/* ... and before the translated source: a record this long or shorter
 * says nothing of it. */
#define DP_EVENT_SIZE_V3 88

/* ---- dp_policy: LPM_TRIE (BPF_F_NO_PREALLOC), one entry per (endpoint,
 * direction, remote identity, protocol, port prefix), as Cilium's policy
 * map. The endpoint, direction and identity are always matched whole; the
 * prefix then may stop before the protocol (any protocol, any port), after
 * it (any port) or inside the port (a power-of-two aligned port block: an
 * endPort range is several entries). identity 0 is "any identity". The
 * program looks up the remote identity and identity 0 and a deny found by
 * either wins; user space leaves out an allow that a deny of the same
 * identity covers (the trie returns only the longest match). */
#define DP_POLICY_PREFIX_FIXED 64 /* ep_id, direction, pad, identity */
#define DP_POLICY_PREFIX_PROTO 80 /* + proto, pad: any port */
#define DP_POLICY_PREFIX_FULL 96  /* + dport */

enum dp_policy_direction {
	DP_POLICY_EGRESS = 0,  /* what the endpoint sends */
	DP_POLICY_INGRESS = 1, /* what is delivered to the endpoint */
};

struct dp_policy_key {
	__u32 prefixlen;
	__u16 ep_id;
	__u8 direction; /* enum dp_policy_direction */
	__u8 pad1;
	__u32 identity; /* the remote identity, 0: any */
	__u8 proto;     /* IPPROTO_* */
	__u8 pad2;
	__u16 dport;    /* network order */
};

#define DP_POLICY_F_DENY 0x1

/* rule_id was padding (always 0), so the value's size did not change and
 * a pin of the older layout is adopted: its entries read as rule 0
 * (unknown) until the policy module rewrites them. */
struct dp_policy_value {
	__u32 flags;   /* DP_POLICY_F_* */
	__u32 rule_id; /* the policy module's ID of the rule it comes from, 0: unknown */
	__u64 packets; /* hits of this entry (the deciding entry of a verdict) */
};

/* ---- dp_policy_ep: ARRAY indexed by endpoint ID: whether a direction is
 * enforced (some policy selects the endpoint). A direction that is not
 * enforced allows everything; an enforced one allows only what dp_policy
 * allows. */
#define DP_POLICY_EP_F_INGRESS 0x1
#define DP_POLICY_EP_F_EGRESS 0x2

struct dp_policy_ep {
	__u32 flags;    /* DP_POLICY_EP_F_* */
	__u32 revision; /* the policy revision these entries come from */
};

/* ---- masquerading (BPF SNAT) ------------------------------------------
 * dp_nat: HASH (not LRU: a full table refuses a new flow, it never evicts
 * a live mapping), two entries per masqueraded flow, as Cilium's
 * snat_v4_external: DP_NAT_OUT keyed by the flow as the pod sent it (pod
 * -> world) holds the address and port it leaves with; DP_NAT_IN keyed by
 * the reply as it arrives (world -> node address:port) holds the pod's
 * address and port. Both are inserted with BPF_NOEXIST, the IN one first:
 * a port is taken only when no other flow to that (destination, node
 * address) holds it (the collision check of both directions), and never
 * reused while its entry lives. ICMP echo: the identifier is the port
 * (OUT: sport = the pod's identifier, dport 0; IN: sport 0, dport = the
 * node's). The helpers (bpf/lib/nat.h) take the address to translate to
 * as an argument, so another egress (a gateway node's egress IP) reuses
 * the map and the helpers as they are. The GC (modules/datapath) removes a
 * pair when both halves are idle past the conntrack timeouts. */
enum dp_nat_dir {
	DP_NAT_OUT = 0, /* the pod's flow, before translation */
	DP_NAT_IN = 1,  /* the reply, as it arrives */
};

struct dp_nat_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport; /* network order */
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u8 dir;    /* enum dp_nat_dir */
	__u8 pad;
};

#define DP_NAT_F_CLOSING 0x1 /* a TCP FIN or RST went past */

struct dp_nat_entry {
	__u8 addr[16];      /* OUT: the new source; IN: the pod's address */
	__u16 port;         /* network order: OUT the new source port, IN the pod's */
	__u16 ep_id;        /* the pod's endpoint */
	__u32 created_s;    /* CLOCK_MONOTONIC seconds */
	__u32 last_seen_s;  /* rewritten at most every dp_config.ct_refresh_s */
	__u8 flags;         /* DP_NAT_F_* */
	__u8 pad[3];
};

/* dp_nat_devs: HASH ifindex -> the external device's addresses (the
 * module writes one entry per device it attaches fibril_to_netdev to). */
#define DP_NAT_DEV_F_IPV4 0x1
#define DP_NAT_DEV_F_IPV6 0x2
struct dp_nat_dev {
	__u8 addr4[4];
	__u8 addr6[16];
	__u32 flags; /* DP_NAT_DEV_F_* */
};

/* dp_nat_count: ARRAY (mmapable) indexed by endpoint ID: the masqueraded
 * flows (OUT entries) the endpoint holds. The program checks it against
 * dp_config.nat_ep_max before it maps a new flow and adds one after; the
 * GC, which alone removes mappings, takes one off (atomically, through
 * the mapping). So a pod holds at most nat_ep_max of dp_nat and the rest
 * stays for the others: nothing is ever evicted. */

/* dp_nomasq: LPM_TRIE keyed as dp_ipcache (struct dp_ipcache_key):
 * destinations a pod reaches with its own address, besides what the
 * ipcache marks DP_IPCACHE_F_CLUSTER: link-local and [datapath]
 * non-masquerade-cidrs. The value is unused (1). */

/* ---- dp_egress: LPM_TRIE (BPF_F_NO_PREALLOC), the egress gateway ------
 * Written whole by the egressgw module (the datapath's egress_sync op).
 * The key is the source's security identity (all 32 bits always match)
 * then an IPv4 destination prefix: prefixlen = DP_EGRESS_PREFIX_HDR + the
 * CIDR's length. A policy's excludedCIDRs are entries with
 * DP_EGRESS_F_EXCLUDED (the longest prefix decides). IPv4 only, as
 * Cilium's egress gateway. On the pod's node a selected flow to a
 * destination outside the cluster goes to `gateway` (native: the FIB's
 * way toward it, bpf_redirect_neigh; tunnel: VXLAN to it) with its
 * addresses untouched; on the gateway, fibril_to_netdev source-NATs it to
 * `egress_ip` (this node's own for the policy; 0 when this node is none of
 * the policy's gateways). */
#define DP_EGRESS_PREFIX_HDR 32
struct dp_egress_key {
	__u32 prefixlen;
	__u32 identity;  /* host order */
	__u8 daddr[4];   /* network order */
};

#define DP_EGRESS_F_EXCLUDED 0x1   /* an excludedCIDR: not the policy's */
#define DP_EGRESS_F_LOCAL 0x2      /* the chosen gateway is this node */
#define DP_EGRESS_F_NO_GATEWAY 0x4 /* no live gateway: the flow is dropped */
struct dp_egress_value {
	__u8 gateway[4];   /* the chosen live gateway's node IP (network order) */
	__u8 egress_ip[4]; /* this node's egress IP for the policy, 0: not one of its gateways */
	__u32 flags;       /* DP_EGRESS_F_* */
};

#endif
