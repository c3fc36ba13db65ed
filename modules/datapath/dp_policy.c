/* modules/datapath/dp_policy.c - the network policy maps (layouts in
 * bpf/fibril_dp.h): dp_policy, the LPM trie of (endpoint, direction,
 * remote identity, protocol, port prefix) -> allow / deny, and
 * dp_policy_ep, whether each endpoint's ingress / egress is enforced. The
 * policy module computes the entries; this file only validates and writes
 * them (the "datapath" capability's version 2 functions). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "datapath.h"
#include <fibril/compat.h>

static int policy_key(const struct fibril_datapath_policy_entry *e, struct dp_policy_key *k,
		      char *err, size_t len)
{
	if (!e || e->sz < FIBRIL_OFFSETOFEND(struct fibril_datapath_policy_entry, deny)) {
		dp_seterr(err, len, "policy entry: missing or too short (sz)");
		return -EINVAL;
	}
	if (e->endpoint_id == 0) {
		dp_seterr(err, len, "policy entry: endpoint ID 0");
		return -EINVAL;
	}
	if (e->direction != FIBRIL_DATAPATH_EGRESS && e->direction != FIBRIL_DATAPATH_INGRESS) {
		dp_seterr(err, len, "policy entry: direction %u is neither ingress nor egress",
			  e->direction);
		return -EINVAL;
	}
	if (e->port_bits > 16 || (e->proto == 0 && e->port_bits != 0)) {
		dp_seterr(err, len, "policy entry: port prefix /%u %s", e->port_bits,
			  e->proto ? "is longer than 16 bits" : "without a protocol");
		return -EINVAL;
	}
	uint16_t mask = e->port_bits ? (uint16_t)(0xffffu << (16 - e->port_bits)) : 0;
	if (e->port & (uint16_t)~mask) {
		dp_seterr(err, len, "policy entry: port %u is not aligned to a /%u block", e->port,
			  e->port_bits);
		return -EINVAL;
	}
	memset(k, 0, sizeof(*k));
	k->ep_id = e->endpoint_id;
	k->direction = e->direction == FIBRIL_DATAPATH_INGRESS ? DP_POLICY_INGRESS
							       : DP_POLICY_EGRESS;
	k->identity = e->identity;
	k->proto = e->proto;
	k->dport = htons(e->port);
	k->prefixlen = e->proto == 0 ? DP_POLICY_PREFIX_FIXED
				     : DP_POLICY_PREFIX_PROTO + e->port_bits;
	return 0;
}

int dp_policy_put(struct datapath *dp, const struct fibril_datapath_policy_entry *e, char *err,
		  size_t len)
{
	struct dp_policy_key k;
	int rc = policy_key(e, &k, err, len);
	if (rc < 0)
		return rc;
	struct dp_policy_value v = {.flags = e->deny ? DP_POLICY_F_DENY : 0};
	if (e->sz >= FIBRIL_OFFSETOFEND(struct fibril_datapath_policy_entry, rule_id))
		v.rule_id = e->rule_id;
	if (bpf_map_update_elem(fibril_map_fd(dp->maps[DPM_POLICY]), &k, &v, BPF_ANY) != 0) {
		int ec = errno;
		dp_seterr(err, len, "cannot write %s: %s", DP_MAP_POLICY, strerror(ec));
		return -ec;
	}
	return 0;
}

int dp_policy_del(struct datapath *dp, const struct fibril_datapath_policy_entry *e, char *err,
		  size_t len)
{
	struct dp_policy_key k;
	int rc = policy_key(e, &k, err, len);
	if (rc < 0)
		return rc;
	if (bpf_map_delete_elem(fibril_map_fd(dp->maps[DPM_POLICY]), &k) != 0 && errno != ENOENT) {
		int ec = errno;
		dp_seterr(err, len, "cannot delete from %s: %s", DP_MAP_POLICY, strerror(ec));
		return -ec;
	}
	return 0;
}

int dp_policy_enforce(struct datapath *dp, uint16_t ep_id, bool ingress, bool egress,
		      uint32_t revision, char *err, size_t len)
{
	if (ep_id == 0) {
		dp_seterr(err, len, "policy enforcement: endpoint ID 0");
		return -EINVAL;
	}
	__u32 idx = ep_id;
	struct dp_policy_ep v = {
		.flags = (ingress ? DP_POLICY_EP_F_INGRESS : 0) | (egress ? DP_POLICY_EP_F_EGRESS : 0),
		.revision = revision,
	};
	if (bpf_map_update_elem(fibril_map_fd(dp->maps[DPM_POLICY_EP]), &idx, &v, BPF_ANY) != 0) {
		int ec = errno;
		dp_seterr(err, len, "cannot write %s: %s", DP_MAP_POLICY_EP, strerror(ec));
		return -ec;
	}
	return 0;
}

int dp_policy_list(struct datapath *dp,
		   int (*cb)(const struct fibril_datapath_policy_entry *e, void *ud), void *ud)
{
	int fd = fibril_map_fd(dp->maps[DPM_POLICY]);
	struct dp_policy_key cur, next;
	size_t steps = 0;
	/* an LPM trie walks from a NULL key; dp_next_key takes a key, so ask
	 * with one whose prefix is invalid (the kernel then starts over) */
	memset(&cur, 0, sizeof(cur));
	cur.prefixlen = DP_POLICY_PREFIX_FULL + 1;
	while (steps++ <= DP_POLICY_MAX && dp_next_key(fd, &cur, &next) == 0) {
		cur = next;
		if (cur.prefixlen < DP_POLICY_PREFIX_FIXED || cur.prefixlen > DP_POLICY_PREFIX_FULL)
			continue;
		struct dp_policy_value v;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0)
			continue;
		struct fibril_datapath_policy_entry e = {
			.sz = sizeof(e),
			.endpoint_id = cur.ep_id,
			.direction = cur.direction == DP_POLICY_INGRESS ? FIBRIL_DATAPATH_INGRESS
									: FIBRIL_DATAPATH_EGRESS,
			.proto = cur.prefixlen >= DP_POLICY_PREFIX_PROTO ? cur.proto : 0,
			.identity = cur.identity,
			.port = cur.prefixlen > DP_POLICY_PREFIX_PROTO ? ntohs(cur.dport) : 0,
			.port_bits = (uint8_t)(cur.prefixlen > DP_POLICY_PREFIX_PROTO
						       ? cur.prefixlen - DP_POLICY_PREFIX_PROTO
						       : 0),
			.deny = (v.flags & DP_POLICY_F_DENY) != 0,
			.rule_id = v.rule_id,
		};
		if (cb(&e, ud))
			break;
	}
	return 0;
}

/* ---- dump texts ---------------------------------------------------------------- */

int dp_policy_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud)
{
	(void)ud;
	const struct dp_policy_key *k = key;
	const struct dp_policy_value *v = value;
	char ports[32];

	if (k->prefixlen < DP_POLICY_PREFIX_FIXED || k->prefixlen > DP_POLICY_PREFIX_FULL)
		return -EINVAL;
	if (k->prefixlen < DP_POLICY_PREFIX_PROTO)
		snprintf(ports, sizeof(ports), "any");
	else if (k->prefixlen == DP_POLICY_PREFIX_PROTO)
		snprintf(ports, sizeof(ports), "proto-%u/any", k->proto);
	else {
		unsigned bits = k->prefixlen - DP_POLICY_PREFIX_PROTO;
		unsigned first = ntohs(k->dport), last = first + (1u << (16 - bits)) - 1;
		if (first == last)
			snprintf(ports, sizeof(ports), "proto-%u/%u", k->proto, first);
		else
			snprintf(ports, sizeof(ports), "proto-%u/%u-%u", k->proto, first, last);
	}
	snprintf(ko, kl, "endpoint=%u %s identity=%u%s %s", k->ep_id,
		 k->direction == DP_POLICY_INGRESS ? "ingress" : "egress", k->identity,
		 k->identity ? "" : "(any)", ports);
	snprintf(vo, vl, "%s hits=%llu rule=%u", (v->flags & DP_POLICY_F_DENY) ? "deny" : "allow",
		 (unsigned long long)v->packets, v->rule_id);
	return 0;
}

int dp_policy_ep_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo,
		     size_t vl, void *ud)
{
	(void)ud;
	const struct dp_policy_ep *v = value;
	snprintf(ko, kl, "%u", *(const __u32 *)key);
	snprintf(vo, vl, "ingress=%s egress=%s revision=%u",
		 (v->flags & DP_POLICY_EP_F_INGRESS) ? "enforced" : "open",
		 (v->flags & DP_POLICY_EP_F_EGRESS) ? "enforced" : "open", v->revision);
	return 0;
}
