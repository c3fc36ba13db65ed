/* modules/datapath/dp_egress.c - the egress gateway's table, dp_egress
 * (layout in bpf/fibril_dp.h, used by bpf/lib/egressgw.h): the datapath
 * capability's egress_sync op (interface version 7), which the egressgw
 * module calls with the whole table each time it changes, and the
 * formatter behind `fibril map dump dp_egress`. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <fibril/compat.h>

#include "datapath.h"

static void egress_kv(const struct fibril_datapath_egress_entry *e, struct dp_egress_key *k,
		      struct dp_egress_value *v)
{
	memset(k, 0, sizeof(*k));
	memset(v, 0, sizeof(*v));
	k->prefixlen = DP_EGRESS_PREFIX_HDR + e->dst_len;
	k->identity = e->identity;
	uint32_t mask = e->dst_len ? htonl(0xffffffffu << (32 - e->dst_len)) : 0;
	uint32_t dst = e->dst.s_addr & mask;
	memcpy(k->daddr, &dst, 4);
	memcpy(v->gateway, &e->gateway.s_addr, 4);
	memcpy(v->egress_ip, &e->egress_ip.s_addr, 4);
	v->flags = (e->excluded ? DP_EGRESS_F_EXCLUDED : 0) |
		   (e->gateway_local ? DP_EGRESS_F_LOCAL : 0) |
		   (e->no_gateway ? DP_EGRESS_F_NO_GATEWAY : 0);
}

static int key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct dp_egress_key));
}

int dp_op_egress_sync(void *ctx, const struct fibril_datapath_egress_entry *entries, size_t n,
		      char *err, size_t errlen)
{
	struct datapath *dp = ctx;
	if (n > DP_EGRESS_MAX) {
		dp_seterr(err, errlen, "egress gateway: %zu entries, the table holds %u", n,
			  DP_EGRESS_MAX);
		return -E2BIG;
	}
	if (n && !entries) {
		dp_seterr(err, errlen, "struct fibril_datapath_egress_entry: array of %zu is NULL", n);
		return -EINVAL;
	}
	size_t stride = n ? entries[0].sz : 0;
	const size_t min = FIBRIL_OFFSETOFEND(struct fibril_datapath_egress_entry, egress_ip);
	if (n && (stride < min || stride > FIBRIL_STRUCT_SIZE_MAX)) {
		dp_seterr(err, errlen,
			  "struct fibril_datapath_egress_entry: sz %zu is not valid (at least %zu, at "
			  "most %u)", stride, min, FIBRIL_STRUCT_SIZE_MAX);
		return -EINVAL;
	}
	struct dp_egress_key *keys = calloc(n ? n : 1, sizeof(*keys));
	struct dp_egress_value *vals = calloc(n ? n : 1, sizeof(*vals));
	int rc = 0;
	if (!keys || !vals) {
		dp_seterr(err, errlen, "egress gateway: out of memory for %zu entries", n);
		rc = -ENOMEM;
		goto out;
	}
	/* every entry checked before anything is written */
	for (size_t i = 0; i < n; i++) {
		const struct fibril_datapath_egress_entry *given =
			(const void *)((const char *)entries + i * stride);
		struct fibril_datapath_egress_entry e;
		char what[64];
		snprintf(what, sizeof(what), "egress entry %zu", i);
		if (given->sz != stride) {
			dp_seterr(err, errlen, "%s: sz %u, entry 0 has %zu (one size for the array)",
				  what, given->sz, stride);
			rc = -EINVAL;
			goto out;
		}
		if ((rc = fibril_struct_copy_in(&e, sizeof(e), given, stride, min, what, err,
						errlen)) < 0)
			goto out;
		if (e.dst_len > 32) {
			dp_seterr(err, errlen, "%s: dst_len %u is not valid (0..32)", what, e.dst_len);
			rc = -EINVAL;
			goto out;
		}
		if (e.identity == 0) {
			dp_seterr(err, errlen, "%s: identity 0 is not valid", what);
			rc = -EINVAL;
			goto out;
		}
		egress_kv(&e, &keys[i], &vals[i]);
	}
	/* a gateway (an egress IP of this node's in the table): from-netdev
	 * marks other nodes' pods' packets for to-netdev's relay check then
	 * only. Set before the entries (a table with egress IPs), cleared
	 * after them (one without), so no relayed packet goes unmarked while
	 * an entry would SNAT it */
	bool gateway = false;
	for (size_t i = 0; i < n && !gateway; i++)
		gateway = vals[i].egress_ip[0] | vals[i].egress_ip[1] | vals[i].egress_ip[2] |
			  vals[i].egress_ip[3];
	if (gateway && !dp->egw_gateway) {
		dp->egw_gateway = true;
		if ((rc = dp_config_write(dp, err, errlen)) < 0)
			goto out;
	}
	int fd = fibril_map_fd(dp->maps[DPM_EGRESS]);
	for (size_t i = 0; i < n; i++) {
		if (bpf_map_update_elem(fd, &keys[i], &vals[i], BPF_ANY) < 0) {
			rc = -errno;
			dp_seterr(err, errlen, "egress gateway: cannot write entry %zu: %s", i,
				  strerror(-rc));
			goto out;
		}
	}
	/* then what the new table does not hold (keys sorted: a lookup is a
	 * binary search); the stale keys are gathered first, then deleted, so
	 * the walk never runs over a trie changing under it */
	qsort(keys, n, sizeof(*keys), key_cmp);
	struct dp_egress_key cur, last, *prev = NULL, *stale = NULL;
	size_t n_stale = 0, cap_stale = 0;
	while (dp_next_key(fd, prev, &cur) == 0) {
		if (!bsearch(&cur, keys, n, sizeof(*keys), key_cmp)) {
			if (n_stale == cap_stale) {
				size_t cap = cap_stale ? cap_stale * 2 : 64;
				void *v = realloc(stale, cap * sizeof(*stale));
				if (!v) {
					free(stale);
					dp_seterr(err, errlen, "egress gateway: out of memory");
					rc = -ENOMEM;
					goto out;
				}
				stale = v;
				cap_stale = cap;
			}
			stale[n_stale++] = cur;
		}
		if (n_stale > DP_EGRESS_MAX)
			break; /* cannot be: the trie holds at most that many */
		last = cur;
		prev = &last;
	}
	for (size_t i = 0; i < n_stale; i++)
		bpf_map_delete_elem(fd, &stale[i]);
	free(stale);
	if (!gateway && dp->egw_gateway) { /* after: see above */
		dp->egw_gateway = false;
		rc = dp_config_write(dp, err, errlen);
	}
out:
	free(keys);
	free(vals);
	return rc;
}

int dp_op_egress_list(void *ctx, int (*cb)(const struct fibril_datapath_egress_entry *e, void *ud),
		      void *ud)
{
	struct datapath *dp = ctx;
	int fd = fibril_map_fd(dp->maps[DPM_EGRESS]), n = 0;
	struct dp_egress_key cur, last, *prev = NULL;
	while (dp_next_key(fd, prev, &cur) == 0) {
		struct dp_egress_value v;
		last = cur;
		prev = &last;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0 || cur.prefixlen < DP_EGRESS_PREFIX_HDR ||
		    cur.prefixlen > DP_EGRESS_PREFIX_HDR + 32)
			continue;
		struct fibril_datapath_egress_entry e = {
			.sz = sizeof(e), .identity = cur.identity,
			.dst_len = (uint8_t)(cur.prefixlen - DP_EGRESS_PREFIX_HDR),
			.excluded = (v.flags & DP_EGRESS_F_EXCLUDED) != 0,
			.no_gateway = (v.flags & DP_EGRESS_F_NO_GATEWAY) != 0,
			.gateway_local = (v.flags & DP_EGRESS_F_LOCAL) != 0};
		memcpy(&e.dst.s_addr, cur.daddr, 4);
		memcpy(&e.gateway.s_addr, v.gateway, 4);
		memcpy(&e.egress_ip.s_addr, v.egress_ip, 4);
		n++;
		if (cb(&e, ud))
			break;
	}
	return n;
}

/* dp_egress: "identity 12345 -> 203.0.113.0/24" -> "gateway 10.0.0.12 egress-ip ..." */
int dp_egress_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud)
{
	(void)ud;
	const struct dp_egress_key *k = key;
	const struct dp_egress_value *v = value;
	char d[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN], e[INET_ADDRSTRLEN];
	if (k->prefixlen < DP_EGRESS_PREFIX_HDR || k->prefixlen > DP_EGRESS_PREFIX_HDR + 32)
		return -EINVAL;
	inet_ntop(AF_INET, k->daddr, d, sizeof(d));
	inet_ntop(AF_INET, v->gateway, g, sizeof(g));
	inet_ntop(AF_INET, v->egress_ip, e, sizeof(e));
	snprintf(ko, kl, "identity %u -> %s/%u", k->identity, d,
		 k->prefixlen - DP_EGRESS_PREFIX_HDR);
	if (v->flags & DP_EGRESS_F_EXCLUDED)
		snprintf(vo, vl, "excluded");
	else if (v->flags & DP_EGRESS_F_NO_GATEWAY)
		snprintf(vo, vl, "no live gateway (dropped)");
	else
		snprintf(vo, vl, "gateway %s%s egress-ip %s", g,
			 (v->flags & DP_EGRESS_F_LOCAL) ? " (this node)" : "", e);
	return 0;
}
