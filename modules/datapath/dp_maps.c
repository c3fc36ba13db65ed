/* modules/datapath/dp_maps.c - the datapath's pinned maps: their specs
 * (which must match the declarations in bpf/lib/maps.h), opening them
 * through the host's map registry, the text formatters behind
 * `fibril map dump`, and the writes the module makes (endpoints, ipcache,
 * config) plus reading them back (a restart, metrics). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <netinet/in.h>

#include "datapath.h"

/* max_entries of the two conntrack maps come from the config (dp_maps_open) */
static const struct fibril_map_spec dp_specs[DPM_COUNT] = {
	[DPM_ENDPOINTS] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_ENDPOINTS,
			   .type = BPF_MAP_TYPE_HASH, .key_size = sizeof(struct dp_endpoint_key),
			   .value_size = sizeof(struct dp_endpoint_info),
			   .max_entries = DP_ENDPOINTS_MAX},
	[DPM_IPCACHE] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_IPCACHE,
			 .type = BPF_MAP_TYPE_LPM_TRIE, .key_size = sizeof(struct dp_ipcache_key),
			 .value_size = sizeof(struct dp_ipcache_value),
			 .max_entries = DP_IPCACHE_MAX, .map_flags = BPF_F_NO_PREALLOC},
	[DPM_CONNTRACK] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_CONNTRACK,
			   .type = BPF_MAP_TYPE_HASH, .key_size = sizeof(struct dp_ct_key),
			   .value_size = sizeof(struct dp_ct_value),
			   .max_entries = DP_CONNTRACK_MAX},
	[DPM_METRICS] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_METRICS,
			 .type = BPF_MAP_TYPE_PERCPU_ARRAY, .key_size = sizeof(__u32),
			 .value_size = sizeof(struct dp_metrics_value),
			 .max_entries = DP_METRICS_MAX},
	[DPM_EVENTS] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_EVENTS,
			.type = BPF_MAP_TYPE_RINGBUF, .max_entries = DP_EVENTS_BYTES},
	[DPM_CONFIG] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_CONFIG,
			.type = BPF_MAP_TYPE_ARRAY, .key_size = sizeof(__u32),
			.value_size = sizeof(struct dp_config), .max_entries = 1},
	[DPM_CT_ANY] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_CT_ANY,
			.type = BPF_MAP_TYPE_HASH, .key_size = sizeof(struct dp_ct_key),
			.value_size = sizeof(struct dp_ct_value), .max_entries = DP_CT_ANY_MAX},
	[DPM_FRAGS] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_FRAGS,
		       .type = BPF_MAP_TYPE_LRU_HASH, .key_size = sizeof(struct dp_frag_key),
		       .value_size = sizeof(struct dp_frag_ports), .max_entries = DP_FRAGS_MAX},
	[DPM_EVLIMIT] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_EVLIMIT,
			 .type = BPF_MAP_TYPE_PERCPU_ARRAY, .key_size = sizeof(__u32),
			 .value_size = sizeof(struct dp_evlimit), .max_entries = 1},
	[DPM_POLICY] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_POLICY,
			.type = BPF_MAP_TYPE_LPM_TRIE, .key_size = sizeof(struct dp_policy_key),
			.value_size = sizeof(struct dp_policy_value), .max_entries = DP_POLICY_MAX,
			.map_flags = BPF_F_NO_PREALLOC},
	[DPM_POLICY_EP] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_POLICY_EP,
			   .type = BPF_MAP_TYPE_ARRAY, .key_size = sizeof(__u32),
			   .value_size = sizeof(struct dp_policy_ep),
			   .max_entries = DP_POLICY_EP_MAX},
	[DPM_FRAGS_OUT] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_FRAGS_OUT,
			   .type = BPF_MAP_TYPE_LRU_HASH, .key_size = sizeof(struct dp_frag_key),
			   .value_size = sizeof(struct dp_frag_ports), .max_entries = DP_FRAGS_MAX},
	[DPM_CT_COUNT] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_CT_COUNT,
			  .type = BPF_MAP_TYPE_ARRAY, .key_size = sizeof(__u32),
			  .value_size = sizeof(struct dp_ct_count), .max_entries = DP_CT_COUNT_MAX,
			  .map_flags = BPF_F_MMAPABLE},
	[DPM_NAT] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_NAT,
		     .type = BPF_MAP_TYPE_HASH, .key_size = sizeof(struct dp_nat_key),
		     .value_size = sizeof(struct dp_nat_entry), .max_entries = DP_NAT_MAX},
	[DPM_NAT_DEVS] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_NAT_DEVS,
			  .type = BPF_MAP_TYPE_HASH, .key_size = sizeof(__u32),
			  .value_size = sizeof(struct dp_nat_dev), .max_entries = DP_NAT_DEVS_MAX},
	[DPM_NOMASQ] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_NOMASQ,
			.type = BPF_MAP_TYPE_LPM_TRIE, .key_size = sizeof(struct dp_ipcache_key),
			.value_size = sizeof(__u32), .max_entries = DP_NOMASQ_MAX,
			.map_flags = BPF_F_NO_PREALLOC},
	[DPM_NAT_COUNT] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_NAT_COUNT,
			   .type = BPF_MAP_TYPE_ARRAY, .key_size = sizeof(__u32),
			   .value_size = sizeof(__u32), .max_entries = DP_CT_COUNT_MAX,
			   .map_flags = BPF_F_MMAPABLE},
	[DPM_EGRESS] = {.sz = sizeof(struct fibril_map_spec), .name = DP_MAP_EGRESS,
			.type = BPF_MAP_TYPE_LPM_TRIE, .key_size = sizeof(struct dp_egress_key),
			.value_size = sizeof(struct dp_egress_value), .max_entries = DP_EGRESS_MAX,
			.map_flags = BPF_F_NO_PREALLOC},
};

/* ---- names ----------------------------------------------------------------------- */

const char *dp_reason_name(unsigned reason)
{
	switch (reason) {
	case DP_REASON_FORWARDED:
		return "forwarded";
	case DP_REASON_TO_STACK:
		return "to-stack";
	case DP_REASON_ND_ANSWERED:
		return "nd-answered";
	case DP_REASON_DELIVERED:
		return "delivered";
	case DP_REASON_EVENT_SUPPRESSED:
		return "drop-event-suppressed";
	case DP_REASON_EVENT_LOST:
		return "event-lost";
	case DP_REASON_POLICY_ALLOWED:
		return "policy-allowed";
	case DP_REASON_DROP_FRAG_NOT_FOUND:
		return "drop:fragment-without-first";
	case DP_REASON_DROP_SPOOFED_MAC:
		return "drop:spoofed-mac";
	case DP_REASON_DROP_SPOOFED_IP:
		return "drop:spoofed-source-ip";
	case DP_REASON_DROP_SPOOFED_ARP:
		return "drop:spoofed-arp-sender";
	case DP_REASON_DROP_INVALID:
		return "drop:invalid-packet";
	case DP_REASON_DROP_UNSUPPORTED_L3:
		return "drop:unsupported-l3-protocol";
	case DP_REASON_DROP_POLICY:
		return "drop:policy-denied";
	case DP_REASON_DROP_REDIRECT:
		return "drop:redirect-failed";
	case DP_REASON_TO_TUNNEL:
		return "to-tunnel";
	case DP_REASON_TO_FIB:
		return "to-fib";
	case DP_REASON_DROP_NO_TUNNEL_KEY:
		return "drop:no-tunnel-key";
	case DP_REASON_DROP_TUNNEL:
		return "drop:tunnel-key-refused";
	case DP_REASON_DROP_CT_FULL:
		return "drop:conntrack-full";
	case DP_REASON_DROP_SPOOFED_NETWORK:
		return "drop:spoofed-from-network";
	case DP_REASON_DROP_TUNNEL_SOURCE:
		return "drop:tunnel-from-unknown-node";
	case DP_REASON_DROP_NAT_NO_PORT:
		return "drop:masquerade-no-port";
	case DP_REASON_DROP_NAT_QUOTA:
		return "drop:masquerade-endpoint-quota";
	case DP_REASON_MASQUERADED:
		return "masqueraded";
	case DP_REASON_REV_NAT:
		return "masquerade-reply";
	case DP_REASON_EGW_REDIRECT:
		return "egress-gateway-redirect";
	case DP_REASON_EGW_SNAT:
		return "egress-gateway-snat";
	case DP_REASON_DROP_EGW_NO_GATEWAY:
		return "drop:egress-gateway-none-alive";
	case DP_REASON_DROP_EGW_RELAY:
		return "drop:egress-gateway-relay";
	default:
		return "unknown";
	}
}

const char *dp_identity_name(const struct datapath *dp, uint32_t identity)
{
	switch (identity) {
	case DP_IDENTITY_UNKNOWN:
		return "unknown";
	case DP_IDENTITY_HOST:
		return "host";
	case DP_IDENTITY_WORLD:
		return "world";
	default:
		break;
	}
	if (identity < FIBRIL_IDENTITY_LOCAL_MIN)
		return "reserved";
	if (identity >= FIBRIL_IDENTITY_CIDR_MIN)
		return "cidr";
	/* local or cluster-wide: only the module that numbers them knows */
	const char *scope = dp->identity_scope ? dp->identity_scope(dp->identity_scope_ud, identity)
					       : NULL;

	return scope ? scope : "allocated";
}

const char *dp_direction_name(unsigned dir)
{
	return dir == DP_DIR_FROM_ENDPOINT ? "from-endpoint"
	       : dir == DP_DIR_TO_ENDPOINT ? "to-endpoint"
	       : dir == DP_DIR_FROM_OVERLAY ? "from-overlay"
	       : dir == DP_DIR_FROM_NETDEV ? "from-netdev"
	       : dir == DP_DIR_TO_NETDEV ? "to-netdev"
					   : "?";
}

static const char *proto_name(unsigned proto, char *buf, size_t len)
{
	switch (proto) {
	case IPPROTO_TCP:
		return "TCP";
	case IPPROTO_UDP:
		return "UDP";
	case IPPROTO_ICMP:
		return "ICMP";
	case IPPROTO_ICMPV6:
		return "ICMPv6";
	case IPPROTO_SCTP:
		return "SCTP";
	default:
		snprintf(buf, len, "proto-%u", proto);
		return buf;
	}
}

/* ---- formatters -------------------------------------------------------------------- */

static int fmt_endpoints(const void *key, const void *value, char *ko, size_t kl, char *vo,
			 size_t vl, void *ud)
{
	(void)ud;
	const struct dp_endpoint_key *k = key;
	const struct dp_endpoint_info *v = value;
	char mac[18], hmac[18];

	if (k->family != DP_FAMILY_IPV4 && k->family != DP_FAMILY_IPV6)
		return -EINVAL;
	dp_fmt_addr(k->family, k->addr, ko, kl);
	dp_fmt_mac(v->mac, mac, sizeof(mac));
	dp_fmt_mac(v->host_mac, hmac, sizeof(hmac));
	snprintf(vo, vl, "id=%u identity=%u ifindex=%u mac=%s host-mac=%s%s", v->ep_id, v->identity,
		 v->ifindex, mac, hmac, (v->flags & DP_EP_F_NO_MASQUERADE) ? " no-masquerade" : "");
	return 0;
}

static int fmt_ipcache(const void *key, const void *value, char *ko, size_t kl, char *vo,
		       size_t vl, void *ud)
{
	const struct dp_ipcache_key *k = key;
	const struct dp_ipcache_value *v = value;
	char addr[INET6_ADDRSTRLEN];

	if ((k->family != DP_FAMILY_IPV4 && k->family != DP_FAMILY_IPV6) ||
	    k->prefixlen < DP_IPCACHE_PREFIX_HDR)
		return -EINVAL;
	dp_fmt_addr(k->family, k->addr, addr, sizeof(addr));
	snprintf(ko, kl, "%s/%u", addr, k->prefixlen - DP_IPCACHE_PREFIX_HDR);
	int n = snprintf(vo, vl, "identity=%u (%s)", v->identity, dp_identity_name(ud, v->identity));
	if ((v->flags & DP_IPCACHE_F_TUNNEL) && n > 0 && (size_t)n < vl) {
		char t[INET6_ADDRSTRLEN];
		dp_fmt_addr(v->tunnel_family, v->tunnel_ip, t, sizeof(t));
		snprintf(vo + n, vl - (size_t)n, " tunnel-endpoint=%s", t);
	}
	return 0;
}

static void fmt_tcp_flags(uint8_t f, char *out, size_t len)
{
	static const char *const names[] = {"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"};
	size_t o = 0;
	out[0] = '\0';
	for (int i = 0; i < 8; i++) {
		if (f & (1u << i))
			o += (size_t)snprintf(out + o, o < len ? len - o : 0, "%s%s", o ? "|" : "",
					      names[i]);
		if (o >= len)
			break;
	}
	if (!out[0])
		snprintf(out, len, "-");
}

static int fmt_conntrack(const void *key, const void *value, char *ko, size_t kl, char *vo,
			 size_t vl, void *ud)
{
	(void)ud;
	const struct dp_ct_key *k = key;
	const struct dp_ct_value *v = value;
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN], pbuf[16], flags[40];
	bool v6 = k->family == DP_FAMILY_IPV6;

	if (k->family != DP_FAMILY_IPV4 && !v6)
		return -EINVAL;
	dp_fmt_addr(k->family, k->saddr, s, sizeof(s));
	dp_fmt_addr(k->family, k->daddr, d, sizeof(d));
	/* the flow, then the enforcement point the entry is */
	snprintf(ko, kl, "%s %s%s%s:%u -> %s%s%s:%u %s:%u", proto_name(k->proto, pbuf, sizeof(pbuf)),
		 v6 ? "[" : "", s, v6 ? "]" : "", ntohs(k->sport), v6 ? "[" : "", d, v6 ? "]" : "",
		 ntohs(k->dport), k->dir == DP_POLICY_EGRESS ? "egress" : "ingress", k->ep_id);
	uint64_t now = dp_mono_ns() / 1000000000ull;
	/* whole seconds; idle lags by up to [datapath] conntrack-refresh-interval */
	unsigned long long age = now > v->first_seen_s ? now - v->first_seen_s : 0;
	unsigned long long idle = now > v->last_seen_s ? now - v->last_seen_s : 0;
	fmt_tcp_flags(v->tcp_flags, flags, sizeof(flags));
	char charge[32] = "";
	if (v->flags & DP_CT_F_CHARGED)
		snprintf(charge, sizeof(charge), " charged=%u%s", v->charge_ep_id,
			 (v->flags & DP_CT_F_OUTSIDE) ? "/outside" : "");
	snprintf(vo, vl,
		 "tx=%llu pkts/%llu B rx=%llu pkts/%llu B age=%llus idle=%llus tcp=%s%s%s "
		 "endpoint=%u ifindex=%u%s",
		 (unsigned long long)v->packets, (unsigned long long)v->bytes,
		 (unsigned long long)v->rx_packets, (unsigned long long)v->rx_bytes, age, idle, flags,
		 (v->flags & DP_CT_F_REPLY_SEEN) ? " replied" : "",
		 (v->flags & DP_CT_F_CLOSING) ? " closing" : "", v->src_ep_id, v->ifindex, charge);
	return 0;
}

/* The registry hands per-CPU maps' values as one 8-byte aligned slot per
 * possible CPU. */
static void metrics_sum(const void *value, struct dp_metrics_value *sum)
{
	int ncpus = libbpf_num_possible_cpus();
	const struct dp_metrics_value *slot = value;
	memset(sum, 0, sizeof(*sum));
	for (int i = 0; i < (ncpus > 0 ? ncpus : 1); i++) {
		sum->packets += slot[i].packets;
		sum->bytes += slot[i].bytes;
	}
}

static int fmt_metrics(const void *key, const void *value, char *ko, size_t kl, char *vo,
		       size_t vl, void *ud)
{
	(void)ud;
	__u32 index;
	struct dp_metrics_value sum;

	memcpy(&index, key, sizeof(index));
	metrics_sum(value, &sum);
	if (!sum.packets && !sum.bytes)
		return FIBRIL_MAP_FORMAT_SKIP; /* a slot never hit */
	snprintf(ko, kl, "%s %s", dp_direction_name(DP_METRICS_DIRECTION(index)),
		 dp_reason_name(DP_METRICS_REASON(index)));
	snprintf(vo, vl, "packets=%llu bytes=%llu", (unsigned long long)sum.packets,
		 (unsigned long long)sum.bytes);
	return 0;
}

static int fmt_config(const void *key, const void *value, char *ko, size_t kl, char *vo,
		      size_t vl, void *ud)
{
	(void)ud;
	const struct dp_config *c = value;
	snprintf(ko, kl, "%u", *(const __u32 *)key);
	snprintf(vo, vl,
		 "trace-events=%s conntrack-refresh=%us drop-events-rate=%u/s drop-events-burst=%u "
		 "tunnel-ifindex=%u policy-verdict-events=%s conntrack-endpoint-max=%u/%u "
		 "conntrack-outside-max=%u/%u",
		 (c->flags & DP_CFG_F_TRACE) ? "true" : "false", c->ct_refresh_s, c->event_rate,
		 c->event_burst, c->tunnel_ifindex,
		 (c->flags & DP_CFG_F_POLICY_VERDICT) ? "true" : "false", c->ct_ep_max[0],
		 c->ct_ep_max[1], c->ct_outside_max[0], c->ct_outside_max[1]);
	return 0;
}

static int fmt_frags(const void *key, const void *value, char *ko, size_t kl, char *vo,
		     size_t vl, void *ud)
{
	(void)ud;
	const struct dp_frag_key *k = key;
	const struct dp_frag_ports *v = value;
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN], pbuf[16];

	if (k->family != DP_FAMILY_IPV4 && k->family != DP_FAMILY_IPV6)
		return -EINVAL;
	dp_fmt_addr(k->family, k->saddr, s, sizeof(s));
	dp_fmt_addr(k->family, k->daddr, d, sizeof(d));
	snprintf(ko, kl, "%s %s -> %s slot=%u", proto_name(k->proto, pbuf, sizeof(pbuf)), s, d,
		 k->id);
	snprintf(vo, vl, "sport=%u dport=%u tag=%08x", ntohs(v->sport), ntohs(v->dport), v->tag);
	return 0;
}

static int fmt_ct_count(const void *key, const void *value, char *ko, size_t kl, char *vo,
			size_t vl, void *ud)
{
	(void)ud;
	const struct dp_ct_count *c = value;
	__u32 slot;

	memcpy(&slot, key, sizeof(slot));
	if (!c->own[0] && !c->own[1] && !c->outside[0] && !c->outside[1])
		return FIBRIL_MAP_FORMAT_SKIP; /* an endpoint holding nothing */
	if (slot == 0)
		snprintf(ko, kl, "outside-total");
	else
		snprintf(ko, kl, "%u", slot);
	snprintf(vo, vl, "tcp=%u other=%u outside-tcp=%u outside-other=%u", c->own[0], c->own[1],
		 c->outside[0], c->outside[1]);
	return 0;
}

static const fibril_map_format_fn dp_formatters[DPM_COUNT] = {
	[DPM_ENDPOINTS] = fmt_endpoints, [DPM_IPCACHE] = fmt_ipcache,
	[DPM_CONNTRACK] = fmt_conntrack, [DPM_METRICS] = fmt_metrics,
	[DPM_CONFIG] = fmt_config,     [DPM_CT_ANY] = fmt_conntrack,
	[DPM_FRAGS] = fmt_frags,      [DPM_POLICY] = dp_policy_fmt,
	[DPM_POLICY_EP] = dp_policy_ep_fmt, [DPM_FRAGS_OUT] = fmt_frags,
	[DPM_CT_COUNT] = fmt_ct_count, [DPM_NAT] = dp_nat_fmt,
	[DPM_NAT_DEVS] = dp_nat_devs_fmt, [DPM_NOMASQ] = dp_nomasq_fmt,
	[DPM_EGRESS] = dp_egress_fmt,
};

/* ---- open ------------------------------------------------------------------------- */

static const char *origin_text(enum fibril_map_origin o)
{
	return o == FIBRIL_MAP_REUSED ? "reused" : o == FIBRIL_MAP_RECREATED ? "recreated" : "created";
}

int dp_maps_open(struct datapath *dp, char *err, size_t len)
{
	for (int i = 0; i < DPM_COUNT; i++) {
		struct fibril_map_spec spec = dp_specs[i];
		/* a size changed in the config recreates the pin (flows restart) */
		if (i == DPM_CONNTRACK)
			spec.max_entries = dp->ct_max_tcp;
		else if (i == DPM_CT_ANY)
			spec.max_entries = dp->ct_max_other;
		else if (i == DPM_EVENTS)
			spec.max_entries = dp->events_bytes;
		int rc = fibril_map_open(dp->m, &spec, &dp->maps[i]);
		if (rc < 0) {
			dp_seterr(err, len, "cannot open the pinned map %s: %s", dp_specs[i].name,
				  strerror(-rc));
			return rc;
		}
		if (dp_formatters[i])
			fibril_map_set_formatter(dp->maps[i], dp_formatters[i], dp);
		fibril_debug(dp->m, "map %s %s", dp_specs[i].name,
			     origin_text(fibril_map_origin(dp->maps[i])));
	}
	return 0;
}

/* percent of a map's entries, at least 1 */
static __u32 dp_share(uint32_t max, uint32_t percent)
{
	uint64_t n = (uint64_t)max * percent / 100;
	return n ? (__u32)n : 1;
}

/* The VXLAN port fibril_from_netdev hands to the stack at once (network
 * order), 0 for none: no tunnel, or one whose port a masqueraded flow may
 * take (its replies must meet nat_rev first). */
static __u16 dp_config_early_tunnel_port(const struct datapath *dp)
{
	if (!dp->tunnel_ifindex || !dp->tunnel_port)
		return 0;
	if (dp->masquerade && dp->tunnel_port >= dp->nat_port_min && dp->tunnel_port <= dp->nat_port_max)
		return 0;
	return htons(dp->tunnel_port);
}

int dp_config_write(struct datapath *dp, char *err, size_t len)
{
	__u32 zero = 0;
	struct dp_config c = {.flags = (dp->trace ? DP_CFG_F_TRACE : 0) |
				       (dp->policy_verdicts ? DP_CFG_F_POLICY_VERDICT : 0) |
				       (dp->host_routing_bpf ? DP_CFG_F_HOST_ROUTING : 0) |
				       (dp->masquerade ? DP_CFG_F_MASQUERADE : 0) |
				       (dp->egw_gateway ? DP_CFG_F_EGW_GATEWAY : 0),
			      .nat_port_min = dp->nat_port_min,
			      .nat_port_max = dp->nat_port_max,
			      .nat_ep_max = dp->nat_ep_max,
			      .ct_refresh_s = dp->ct_refresh_s,
			      .event_rate = dp->event_rate,
			      .event_burst = dp->event_burst,
			      .tunnel_ifindex = dp->tunnel_ifindex,
			      .tunnel_port = dp_config_early_tunnel_port(dp),
			      .ct_ep_max = {dp_share(dp->ct_max_tcp, dp->ct_endpoint_share),
					    dp_share(dp->ct_max_other, dp->ct_endpoint_share)},
			      .ct_outside_max = {dp_share(dp->ct_max_tcp, dp->ct_outside_share),
						 dp_share(dp->ct_max_other, dp->ct_outside_share)}};
	if (bpf_map_update_elem(fibril_map_fd(dp->maps[DPM_CONFIG]), &zero, &c, BPF_ANY) != 0) {
		int e = errno;
		dp_seterr(err, len, "cannot write %s: %s", DP_MAP_CONFIG, strerror(e));
		return -e;
	}
	return 0;
}

/* ---- ipcache --------------------------------------------------------------------------- */

static int ipcache_key(int family, const void *addr, unsigned plen, struct dp_ipcache_key *k,
		       char *err, size_t len)
{
	unsigned bits = family == 4 ? 32 : family == 6 ? 128 : 0;
	if (!bits) {
		dp_seterr(err, len, "ipcache: family %d is neither 4 nor 6", family);
		return -EINVAL;
	}
	if (plen > bits) {
		dp_seterr(err, len, "ipcache: prefix length /%u is longer than /%u", plen, bits);
		return -EINVAL;
	}
	memset(k, 0, sizeof(*k));
	k->family = family == 4 ? DP_FAMILY_IPV4 : DP_FAMILY_IPV6;
	k->prefixlen = DP_IPCACHE_PREFIX_HDR + plen;
	memcpy(k->addr, addr, bits / 8);
	/* clear the host bits: 10.0.0.7/24 is 10.0.0.0/24 */
	for (unsigned b = plen; b < bits; b++)
		k->addr[b / 8] &= (uint8_t)~(0x80u >> (b % 8));
	return 0;
}

/* What the last run left in dp_config that this one keeps until it knows
 * better: the tunnel (a restart keeps encapsulating until the nodes module
 * sets the tunnel up again) and whether this node is an egress gateway. */
void dp_config_restore(struct datapath *dp)
{
	__u32 zero = 0;
	struct dp_config c;
	memset(&c, 0, sizeof(c));
	dp->tunnel_ifindex = 0;
	if (bpf_map_lookup_elem(fibril_map_fd(dp->maps[DPM_CONFIG]), &zero, &c) != 0)
		return;
	dp->tunnel_ifindex = c.tunnel_ifindex;
	if (c.tunnel_ifindex && c.tunnel_port)
		dp->tunnel_port = ntohs(c.tunnel_port); /* until the tunnel is set up again */
	/* a gateway stays one until the egress table says otherwise: its
	 * relayed flows keep their mark across a restart */
	dp->egw_gateway = (c.flags & DP_CFG_F_EGW_GATEWAY) != 0;
}

static int ipcache_value(uint32_t identity, int tunnel_family, const void *tunnel_ip,
			 struct dp_ipcache_value *v, char *err, size_t len)
{
	memset(v, 0, sizeof(*v));
	v->identity = identity;
	if (tunnel_family) {
		if ((tunnel_family != 4 && tunnel_family != 6) || !tunnel_ip) {
			dp_seterr(err, len, "ipcache: tunnel endpoint family %d is neither 4 nor 6",
				  tunnel_family);
			return -EINVAL;
		}
		v->flags |= DP_IPCACHE_F_TUNNEL;
		v->tunnel_family = tunnel_family == 4 ? DP_FAMILY_IPV4 : DP_FAMILY_IPV6;
		memcpy(v->tunnel_ip, tunnel_ip, tunnel_family == 4 ? 4 : 16);
	}
	return 0;
}

static int ipcache_write_failed(const struct dp_ipcache_key *k, unsigned plen, int e, char *err,
				size_t len)
{
	char a[INET6_ADDRSTRLEN];
	dp_fmt_addr(k->family, k->addr, a, sizeof(a));
	dp_seterr(err, len, "cannot write %s/%u to %s: %s", a, plen, DP_MAP_IPCACHE, strerror(e));
	return -e;
}

int dp_ipcache_entry_kv(const struct fibril_datapath_ipcache_entry *e, struct dp_ipcache_key *k,
			struct dp_ipcache_value *v, char *err, size_t len)
{
	int rc = ipcache_key(e->family, e->addr, e->prefix_len, k, err, len);
	return rc ? rc : ipcache_value(e->identity, e->tunnel_family, e->tunnel_endpoint, v, err, len);
}

int dp_ipcache_key_of(int family, const void *addr, unsigned plen, struct dp_ipcache_key *k,
		      char *err, size_t len)
{
	return ipcache_key(family, addr, plen, k, err, len);
}

/* Many entries built by the caller: one BPF_MAP_UPDATE_BATCH when the
 * kernel's LPM trie takes it (else one update each). *done: how many were
 * written, in order. */
int dp_ipcache_write_batch(struct datapath *dp, const struct dp_ipcache_key *keys,
			   const struct dp_ipcache_value *values, size_t n, size_t *done, char *err,
			   size_t len)
{
	int rc = 0;
	*done = 0;
	if (!n)
		return 0;
	int fd = fibril_map_fd(dp->maps[DPM_IPCACHE]);
	if (!dp->ipcache_no_batch) {
		__u32 count = (__u32)n;
		LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = BPF_ANY);
		if (bpf_map_update_batch(fd, keys, values, &count, &opts) == 0) {
			*done = n;
		} else if (count == 0 && (errno == EINVAL || errno == ENOTSUP || errno == EOPNOTSUPP ||
					  errno == 524 /* ENOTSUPP */)) {
			dp->ipcache_no_batch = true; /* an older kernel: one at a time */
			fibril_info(dp->m, "%s takes no BPF_MAP_UPDATE_BATCH (%s): ipcache batches "
				    "are written one entry at a time", DP_MAP_IPCACHE, strerror(errno));
		} else {
			*done = count;
			rc = ipcache_write_failed(&keys[count < n ? count : n - 1],
						  keys[count < n ? count : n - 1].prefixlen -
							  DP_IPCACHE_PREFIX_HDR,
						  errno, err, len);
		}
	}
	if (!rc && dp->ipcache_no_batch) {
		for (; *done < n; ++*done)
			if (bpf_map_update_elem(fd, &keys[*done], &values[*done], BPF_ANY) != 0) {
				rc = ipcache_write_failed(&keys[*done],
							  keys[*done].prefixlen - DP_IPCACHE_PREFIX_HDR,
							  errno, err, len);
				break;
			}
	}
	return rc;
}

int dp_ipcache_write(struct datapath *dp, const struct dp_ipcache_key *k,
		     const struct dp_ipcache_value *v, char *err, size_t len)
{
	if (bpf_map_update_elem(fibril_map_fd(dp->maps[DPM_IPCACHE]), k, v, BPF_ANY) != 0)
		return ipcache_write_failed(k, k->prefixlen - DP_IPCACHE_PREFIX_HDR, errno, err, len);
	return 0;
}

int dp_ipcache_delete(struct datapath *dp, const struct dp_ipcache_key *k, char *err, size_t len)
{
	if (bpf_map_delete_elem(fibril_map_fd(dp->maps[DPM_IPCACHE]), k) != 0 && errno != ENOENT) {
		int e = errno;
		dp_seterr(err, len, "cannot delete from %s: %s", DP_MAP_IPCACHE, strerror(e));
		return -e;
	}
	return 0;
}

/* ---- endpoints --------------------------------------------------------------------------- */

static void endpoint_key(int family, const void *addr, struct dp_endpoint_key *k)
{
	memset(k, 0, sizeof(*k));
	k->family = family == 4 ? DP_FAMILY_IPV4 : DP_FAMILY_IPV6;
	memcpy(k->addr, addr, family == 4 ? 4 : 16);
}

int dp_endpoint_put(struct datapath *dp, const struct fibril_datapath_endpoint *ep, int family,
		    const void *addr, char *err, size_t len)
{
	struct dp_endpoint_key k;
	struct dp_endpoint_info v;

	endpoint_key(family, addr, &k);
	memset(&v, 0, sizeof(v));
	v.ifindex = (__u32)ep->host_ifindex;
	v.identity = ep->identity;
	v.ep_id = ep->id;
	v.flags = (ep->flags & FIBRIL_DATAPATH_EP_F_NO_MASQUERADE) ? DP_EP_F_NO_MASQUERADE : 0;
	memcpy(v.mac, ep->mac, 6);
	memcpy(v.host_mac, ep->host_mac, 6);
	if (bpf_map_update_elem(fibril_map_fd(dp->maps[DPM_ENDPOINTS]), &k, &v, BPF_ANY) != 0) {
		int e = errno;
		dp_seterr(err, len, "cannot write %s: %s", DP_MAP_ENDPOINTS, strerror(e));
		return -e;
	}
	return 0;
}

uint16_t dp_endpoint_owner(struct datapath *dp, int family, const void *addr)
{
	struct dp_endpoint_key k;
	struct dp_endpoint_info v;
	endpoint_key(family, addr, &k);
	if (bpf_map_lookup_elem(fibril_map_fd(dp->maps[DPM_ENDPOINTS]), &k, &v) != 0)
		return 0;
	return v.ep_id;
}

int dp_endpoint_del(struct datapath *dp, uint16_t id, int family, const void *addr)
{
	struct dp_endpoint_key k;
	endpoint_key(family, addr, &k);
	if (dp_endpoint_owner(dp, family, addr) != id)
		return 0;
	if (bpf_map_delete_elem(fibril_map_fd(dp->maps[DPM_ENDPOINTS]), &k) != 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/* The list's index by endpoint ID: a restart with 10,000 endpoints looks
 * each one up twice, and a walk of the list each time is quadratic. */
struct dp_ep *dp_ep_find(struct datapath *dp, uint16_t id)
{
	return dp->ep_by_id ? dp->ep_by_id[id] : NULL;
}

int dp_ep_add(struct datapath *dp, struct dp_ep *e)
{
	if (!dp->ep_by_id && !(dp->ep_by_id = calloc(65536, sizeof(*dp->ep_by_id))))
		return -ENOMEM;
	e->next = dp->eps;
	dp->eps = e;
	dp->neps++;
	dp->ep_by_id[e->ep.id] = e;
	return 0;
}

void dp_ep_forget(struct datapath *dp, uint16_t id)
{
	for (struct dp_ep **pp = &dp->eps; *pp; pp = &(*pp)->next) {
		if ((*pp)->ep.id == id) {
			struct dp_ep *e = *pp;
			*pp = e->next;
			free(e);
			dp->neps--;
			if (dp->ep_by_id)
				dp->ep_by_id[id] = NULL;
			return;
		}
	}
}

void dp_eps_free(struct datapath *dp)
{
	while (dp->eps) {
		struct dp_ep *e = dp->eps;
		dp->eps = e->next;
		free(e);
	}
	dp->neps = 0;
	free(dp->ep_by_id);
	dp->ep_by_id = NULL;
}

/* ---- metrics ---------------------------------------------------------------------------------- */

int dp_metrics_snapshot(struct datapath *dp, struct dp_metrics_value *sums)
{
	int ncpus = libbpf_num_possible_cpus();
	if (ncpus < 1)
		ncpus = 1;
	int fd = fibril_map_fd(dp->maps[DPM_METRICS]);
	__u32 *keys = calloc(DP_METRICS_MAX, sizeof(*keys));
	struct dp_metrics_value *vals = calloc((size_t)DP_METRICS_MAX * (size_t)ncpus, sizeof(*vals));
	int rc = 0;
	if (!keys || !vals) {
		rc = -ENOMEM;
		goto out;
	}
	memset(sums, 0, DP_METRICS_MAX * sizeof(*sums));
	/* one BPF_MAP_LOOKUP_BATCH for the whole array; slot by slot where
	 * the kernel has no batch for it */
	__u32 out_batch = 0, count = DP_METRICS_MAX;
	LIBBPF_OPTS(bpf_map_batch_opts, bo);
	if (bpf_map_lookup_batch(fd, NULL, &out_batch, keys, vals, &count, &bo) == 0 ||
	    (errno == ENOENT && count > 0)) {
		for (__u32 i = 0; i < count; i++)
			if (keys[i] < DP_METRICS_MAX)
				metrics_sum(vals + (size_t)i * (size_t)ncpus, &sums[keys[i]]);
		goto out;
	}
	for (__u32 i = 0; i < DP_METRICS_MAX; i++) {
		if (bpf_map_lookup_elem(fd, &i, vals) == 0) {
			metrics_sum(vals, &sums[i]);
		} else if (errno != ENOENT) {
			rc = -errno;
			break;
		}
	}
out:
	free(keys);
	free(vals);
	return rc;
}

int dp_metrics_read(struct datapath *dp, uint8_t reason, uint8_t dir, struct dp_metrics_value *out)
{
	memset(out, 0, sizeof(*out));
	if (dir >= DP_METRICS_DIRECTIONS)
		return 0; /* no such slot: nothing counted */
	int ncpus = libbpf_num_possible_cpus();
	if (ncpus < 1)
		ncpus = 1;
	struct dp_metrics_value *slots = calloc((size_t)ncpus, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	__u32 k = DP_METRICS_INDEX(reason, dir);
	int rc = 0;
	if (bpf_map_lookup_elem(fibril_map_fd(dp->maps[DPM_METRICS]), &k, slots) == 0)
		metrics_sum(slots, out);
	else if (errno != ENOENT)
		rc = -errno;
	free(slots);
	return rc;
}
