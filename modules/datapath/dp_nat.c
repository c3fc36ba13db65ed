/* modules/datapath/dp_nat.c - masquerading's maps as the module keeps them:
 * dp_nomasq (link-local and [datapath] non-masquerade-cidrs; the cluster's
 * own prefixes are flagged in the ipcache by dp_ipc_owner.c), dp_nat_devs
 * (the external devices' addresses, written as fibril_to_netdev is
 * attached) and the config key's check. The GC of dp_nat is in dp_ctgc.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "datapath.h"
#include "node_addrs.h"

int dp_nat_cidr_key(const char *text, struct dp_ipcache_key *k, char *why, size_t len)
{
	char addr[64];
	const char *slash = strchr(text, '/');
	size_t n = slash ? (size_t)(slash - text) : strlen(text);
	if (n == 0 || n >= sizeof(addr)) {
		snprintf(why, len, "'%s' is not a CIDR", text);
		return -EINVAL;
	}
	memcpy(addr, text, n);
	addr[n] = 0;
	uint8_t bytes[16] = {0};
	int family = inet_pton(AF_INET, addr, bytes) == 1 ? 4
		     : inet_pton(AF_INET6, addr, bytes) == 1 ? 6 : 0;
	if (!family) {
		snprintf(why, len, "'%s': '%s' is not an IPv4 or IPv6 address", text, addr);
		return -EINVAL;
	}
	unsigned bits = family == 4 ? 32 : 128, plen = bits;
	if (slash) {
		char *end = NULL;
		unsigned long v = strtoul(slash + 1, &end, 10);
		if (!slash[1] || *end || v > bits) {
			snprintf(why, len, "'%s': the prefix length is not 0..%u", text, bits);
			return -EINVAL;
		}
		plen = (unsigned)v;
	}
	char err[DP_ERR_LEN];
	if (dp_ipcache_key_of(family, bytes, plen, k, err, sizeof(err)) < 0) {
		snprintf(why, len, "'%s': %s", text, err);
		return -EINVAL;
	}
	return 0;
}

/* Calls fn for each CIDR of the list (commas or spaces between them). */
static int cidrs_each(const char *list, int (*fn)(const struct dp_ipcache_key *, void *), void *ud,
		      char *why, size_t len)
{
	char copy[1024];
	if (strlen(list) >= sizeof(copy)) {
		snprintf(why, len, "the list is longer than %zu characters", sizeof(copy) - 1);
		return -EINVAL;
	}
	snprintf(copy, sizeof(copy), "%s", list);
	char *save = NULL;
	for (char *tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		struct dp_ipcache_key k;
		int rc = dp_nat_cidr_key(tok, &k, why, len);
		if (rc == 0 && fn)
			rc = fn(&k, ud);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int dp_nat_check_cidrs(const char *value, char *why, size_t len)
{
	return cidrs_each(value, NULL, NULL, why, len);
}

/* the set dp_nomasq is to hold, gathered before it is written */
struct nomasq_set {
	size_t n;
	struct dp_ipcache_key keys[DP_NOMASQ_MAX];
};

static int nomasq_add(const struct dp_ipcache_key *k, void *ud)
{
	struct nomasq_set *set = ud;
	for (size_t i = 0; i < set->n; i++)
		if (!memcmp(&set->keys[i], k, sizeof(*k)))
			return 0;
	if (set->n == DP_NOMASQ_MAX)
		return -ENOSPC;
	set->keys[set->n++] = *k;
	return 0;
}

static bool nomasq_has(const struct nomasq_set *set, const struct dp_ipcache_key *k)
{
	for (size_t i = 0; i < set->n; i++)
		if (!memcmp(&set->keys[i], k, sizeof(*k)))
			return true;
	return false;
}

int dp_nat_nomasq_write(struct datapath *dp, char *err, size_t len)
{
	int fd = fibril_map_fd(dp->maps[DPM_NOMASQ]);
	struct nomasq_set *set = calloc(1, sizeof(*set));
	if (!set) {
		dp_seterr(err, len, "cannot write %s: out of memory", DP_MAP_NOMASQ);
		return -ENOMEM;
	}
	const struct dp_masqcfg *file = dp->masqcfg;
	char why[256] = "";
	/* link-local: the node's link, the cloud's metadata service (unless
	 * the ip-masq-agent file says to masquerade it) */
	char list[1200];
	snprintf(list, sizeof(list), "%s %s %s", file && file->masq_link_local ? "" : "169.254.0.0/16",
		 file && file->masq_link_local6 ? "" : "fe80::/10", dp->nomasq_cidrs);
	int rc = cidrs_each(list, nomasq_add, set, why, sizeof(why));
	for (size_t i = 0; rc == 0 && file && i < file->ncidrs; i++)
		rc = nomasq_add(&file->cidrs[i], set);
	/* the new set first, then what it no longer holds: a destination in
	 * both never sees a masqueraded packet in between */
	__u32 one = 1;
	for (size_t i = 0; rc == 0 && i < set->n; i++)
		if (bpf_map_update_elem(fd, &set->keys[i], &one, BPF_ANY) != 0)
			rc = -errno;
	struct dp_ipcache_key k, next;
	const void *prev = NULL;
	while (rc == 0 && dp_next_key(fd, prev, &next) == 0) {
		k = next;
		if (!nomasq_has(set, &k) && bpf_map_delete_elem(fd, &k) == 0)
			prev = NULL; /* deleted: walk again from the start */
		else
			prev = &k;
	}
	free(set);
	if (rc < 0) {
		if (!why[0])
			snprintf(why, sizeof(why), "%s", strerror(-rc));
		dp_seterr(err, len, "[datapath] non-masquerade-cidrs: cannot write %s: %s",
			  DP_MAP_NOMASQ, why);
	}
	return rc;
}

int dp_nat_dev_write(struct datapath *dp, int ifindex, const char *ifname, bool attach)
{
	int fd = fibril_map_fd(dp->maps[DPM_NAT_DEVS]);
	__u32 key = (__u32)ifindex;
	if (!attach) {
		if (bpf_map_delete_elem(fd, &key) != 0 && errno != ENOENT)
			return -errno;
		return 0;
	}
	struct dp_nat_dev dev;
	memset(&dev, 0, sizeof(dev));
	struct mod_node_addr *all = NULL;
	size_t nall = 0;
	int e = dp_underlay_addrs(&all, &nall); /* no link dump: one veth per endpoint */
	if (e < 0)
		return e;
	for (const struct mod_node_addr *i = all; i < all + nall; i++) {
		if (strcmp(i->ifname, ifname))
			continue;
		if (i->family == AF_INET && !(dev.flags & DP_NAT_DEV_F_IPV4)) {
			memcpy(dev.addr4, &i->addr.v4, 4);
			dev.flags |= DP_NAT_DEV_F_IPV4;
		} else if (i->family == AF_INET6 && !(dev.flags & DP_NAT_DEV_F_IPV6)) {
			memcpy(dev.addr6, &i->addr.v6, 16);
			dev.flags |= DP_NAT_DEV_F_IPV6;
		}
	}
	free(all);
	if (bpf_map_update_elem(fd, &key, &dev, BPF_ANY) != 0)
		return -errno;
	return 0;
}

/* ---- fibril map dump ---- */

static const char *nat_proto(unsigned proto)
{
	return proto == IPPROTO_TCP ? "TCP" : proto == IPPROTO_UDP ? "UDP"
	       : proto == IPPROTO_ICMP ? "ICMP" : proto == IPPROTO_ICMPV6 ? "ICMPv6" : "?";
}

/* dp_nat: "out TCP 10.0.0.5:41000 -> 1.2.3.4:443" -> "to 172.31.0.11:61234
 * endpoint=3 age=4s idle=0s [closing]"; "in TCP 1.2.3.4:443 ->
 * 172.31.0.11:61234" -> "to 10.0.0.5:41000 ..." (ICMP: the echo id) */
int dp_nat_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
	       void *ud)
{
	(void)ud;
	const struct dp_nat_key *k = key;
	const struct dp_nat_entry *v = value;
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN], t[INET6_ADDRSTRLEN];
	if (k->family != DP_FAMILY_IPV4 && k->family != DP_FAMILY_IPV6)
		return -EINVAL;
	dp_fmt_addr(k->family, k->saddr, s, sizeof(s));
	dp_fmt_addr(k->family, k->daddr, d, sizeof(d));
	dp_fmt_addr(k->family, v->addr, t, sizeof(t));
	const char *l = k->family == DP_FAMILY_IPV6 ? "[" : "", *r = k->family == DP_FAMILY_IPV6 ? "]" : "";
	snprintf(ko, kl, "%s %s %s%s%s:%u -> %s%s%s:%u", k->dir == DP_NAT_OUT ? "out" : "in",
		 nat_proto(k->proto), l, s, r, ntohs(k->sport), l, d, r, ntohs(k->dport));
	uint64_t now = dp_mono_ns() / 1000000000ull;
	snprintf(vo, vl, "to %s%s%s:%u endpoint=%u age=%llus idle=%llus%s", l, t, r, ntohs(v->port),
		 v->ep_id, (unsigned long long)(now > v->created_s ? now - v->created_s : 0),
		 (unsigned long long)(now > v->last_seen_s ? now - v->last_seen_s : 0),
		 (v->flags & DP_NAT_F_CLOSING) ? " closing" : "");
	return 0;
}

/* dp_nat_devs: "ifindex 2" -> "ipv4=172.31.0.11 ipv6=fd00::11" */
int dp_nat_devs_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		    void *ud)
{
	(void)ud;
	const struct dp_nat_dev *v = value;
	__u32 ifindex;
	memcpy(&ifindex, key, sizeof(ifindex));
	char a4[INET6_ADDRSTRLEN] = "-", a6[INET6_ADDRSTRLEN] = "-", name[IF_NAMESIZE] = "";
	if (v->flags & DP_NAT_DEV_F_IPV4)
		inet_ntop(AF_INET, v->addr4, a4, sizeof(a4));
	if (v->flags & DP_NAT_DEV_F_IPV6)
		inet_ntop(AF_INET6, v->addr6, a6, sizeof(a6));
	snprintf(ko, kl, "ifindex %u%s%s", ifindex, if_indextoname(ifindex, name) ? " " : "", name);
	snprintf(vo, vl, "ipv4=%s ipv6=%s", a4, a6);
	return 0;
}

/* dp_nomasq: "169.254.0.0/16" -> "" (the value is 1) */
int dp_nomasq_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud)
{
	(void)ud;
	(void)value;
	const struct dp_ipcache_key *k = key;
	char a[INET6_ADDRSTRLEN];
	if (k->family != DP_FAMILY_IPV4 && k->family != DP_FAMILY_IPV6)
		return -EINVAL;
	dp_fmt_addr(k->family, k->addr, a, sizeof(a));
	snprintf(ko, kl, "%s/%u", a, k->prefixlen - DP_IPCACHE_PREFIX_HDR);
	snprintf(vo, vl, "not masqueraded");
	return 0;
}
