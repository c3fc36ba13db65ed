/* bpf/lib/maps.h - the datapath's maps as the BPF side declares them
 * (names, sizes and layouts in ../fibril_dp.h).
 *
 * Contract: declarations only, no code. The object has no maps of its own:
 * the datapath module opens every one through the host's map registry
 * (pinned under [agent] bpffs-dir) and hands the fd over with
 * bpf_map__reuse_fd() before load, so each declaration here matches what
 * modules/datapath/dp_maps.c creates (type, key and value sizes; the pin's
 * max_entries wins: the module sizes the conntrack maps and dp_events from
 * its config). Their order here is the skeleton's order of its maps. Every
 * stage in bpf/lib/ reaches the maps through this header (via pkt.h).
 */
#ifndef FIBRIL_BPF_LIB_MAPS_H
#define FIBRIL_BPF_LIB_MAPS_H

#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

#include "fibril_dp.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_ENDPOINTS_MAX);
	__type(key, struct dp_endpoint_key);
	__type(value, struct dp_endpoint_info);
} dp_endpoints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_IPCACHE_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dp_ipcache_key);
	__type(value, struct dp_ipcache_value);
} dp_ipcache SEC(".maps");

/* The module sizes both conntrack maps from its config: reuse_fd takes
 * the pinned map's max_entries. Plain hashes, not LRU: a full table
 * refuses new flows and never evicts a live one (dp_ct_count bounds what
 * each endpoint and the outside may hold). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_CONNTRACK_MAX);
	__type(key, struct dp_ct_key);
	__type(value, struct dp_ct_value);
} dp_conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_CT_ANY_MAX);
	__type(key, struct dp_ct_key);
	__type(value, struct dp_ct_value);
} dp_ct_any SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_FRAGS_MAX);
	__type(key, struct dp_frag_key);
	__type(value, struct dp_frag_ports);
} dp_frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_evlimit);
} dp_evlimit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_METRICS_MAX);
	__type(key, __u32); /* DP_METRICS_INDEX(reason, direction) */
	__type(value, struct dp_metrics_value);
} dp_metrics SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DP_EVENTS_BYTES);
} dp_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_config);
} dp_config SEC(".maps");

/* network policy (policy_verdict(), lib/policy.h) */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_POLICY_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dp_policy_key);
	__type(value, struct dp_policy_value);
} dp_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_POLICY_EP_MAX);
	__type(key, __u32);
	__type(value, struct dp_policy_ep);
} dp_policy_ep SEC(".maps");

/* fragments from outside (lib/frag.h): apart from dp_frags, which only
 * source-checked endpoints fill */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_FRAGS_MAX);
	__type(key, struct dp_frag_key);
	__type(value, struct dp_frag_ports);
} dp_frags_out SEC(".maps");

/* conntrack entries charged to each endpoint (lib/conntrack.h); the GC
 * gives them back through the module's mapping of it */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_CT_COUNT_MAX);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct dp_ct_count);
} dp_ct_count SEC(".maps");

/* masquerading (lib/nat.h): the flows' mappings, the external devices'
 * addresses, the destinations left alone */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_NAT_MAX);
	__type(key, struct dp_nat_key);
	__type(value, struct dp_nat_entry);
} dp_nat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_NAT_DEVS_MAX);
	__type(key, __u32);
	__type(value, struct dp_nat_dev);
} dp_nat_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_NOMASQ_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dp_ipcache_key);
	__type(value, __u32);
} dp_nomasq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_CT_COUNT_MAX);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
} dp_nat_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_EGRESS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dp_egress_key);
	__type(value, struct dp_egress_value);
} dp_egress SEC(".maps");

#endif /* FIBRIL_BPF_LIB_MAPS_H */
