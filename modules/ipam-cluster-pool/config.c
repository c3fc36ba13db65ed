/* modules/ipam-cluster-pool/config.c - the [ipam-cluster-pool] keys, their
 * checks, and reading them into the module's state with the checks that
 * span keys (mask size against the pool, allocator limits, node-cidr
 * against the pool and the kvstore or the API server being there or not). */
#include "cluster_pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAX_HOST_BITS 24  /* the allocator's limit: 2^24 addresses */
#define MAX_INDEX_BITS 63 /* node CIDRs of a pool are indexed by a uint64 */

static int cidr_of_family(const char *value, int family, struct fibril_cidr *out, char *why,
			  size_t len)
{
	if (fibril_cidr_parse(value, out)) {
		snprintf(why, len, "'%s' is not a CIDR (e.g. %s; host bits must be zero)", value,
			 family == 6 ? "fd00::/104" : "10.0.0.0/16");
		return -EINVAL;
	}
	if (family && out->ip.family != family) {
		snprintf(why, len, "'%s' is not an IPv%d CIDR", value, family);
		return -EINVAL;
	}
	return 0;
}

static int check_cidr(const char *value, int family, char *why, size_t len)
{
	struct fibril_cidr c;
	return value[0] ? cidr_of_family(value, family, &c, why, len) : 0;
}

static int check_cidr4(const char *value, char *why, size_t len)
{
	return check_cidr(value, 4, why, len);
}

static int check_cidr6(const char *value, char *why, size_t len)
{
	return check_cidr(value, 6, why, len);
}

/* Calls fn on each comma-separated word of list (spaces trimmed). */
static int each_word(const char *list, int (*fn)(const char *word, void *ud), void *ud)
{
	char buf[1024];
	if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
		return -E2BIG;
	char *save = NULL;
	for (char *w = strtok_r(buf, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save)) {
		int rc = fn(w, ud);
		if (rc)
			return rc;
	}
	return 0;
}

struct pin_parse {
	struct fibril_cidr cidr[CP_NFAM];
	bool seen[CP_NFAM];
	char *why;
	size_t len;
};

static int pin_word(const char *word, void *ud)
{
	struct pin_parse *p = ud;
	struct fibril_cidr c;
	int rc = cidr_of_family(word, 0, &c, p->why, p->len);
	if (rc)
		return rc;
	int i = c.ip.family == 6;
	if (p->seen[i]) {
		snprintf(p->why, p->len, "more than one IPv%d CIDR (one per family)", c.ip.family);
		return -EINVAL;
	}
	p->seen[i] = true;
	p->cidr[i] = c;
	return 0;
}

static int parse_pins(const char *value, struct pin_parse *p, char *why, size_t len)
{
	memset(p, 0, sizeof(*p));
	p->why = why;
	p->len = len;
	int rc = each_word(value, pin_word, p);
	if (rc == -E2BIG)
		snprintf(why, len, "too long");
	return rc;
}

static int check_node_cidr(const char *value, char *why, size_t len)
{
	struct pin_parse p;
	return parse_pins(value, &p, why, len);
}

static int check_strategy(const char *value, char *why, size_t len)
{
	if (strcmp(value, "sequential") == 0 || strcmp(value, "random") == 0)
		return 0;
	snprintf(why, len, "'%s' is not an allocation strategy (sequential or random)", value);
	return -EINVAL;
}

static int check_node_name(const char *value, char *why, size_t len)
{
	if (strlen(value) < CP_NAME_LEN)
		return 0;
	snprintf(why, len, "longer than %d characters", CP_NAME_LEN - 1);
	return -EINVAL;
}

const struct fibril_config_key cp_config_keys[] = {
	{.name = "cluster-pool-ipv4-cidr", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "IPv4 pool node CIDRs are carved from (e.g. 10.0.0.0/16); empty: no IPv4 pool",
	 .check = check_cidr4},
	{.name = "cluster-pool-ipv4-mask-size", .type = FIBRIL_CONFIG_INT, .default_value = "24",
	 .help = "Prefix length of each node's IPv4 CIDR", .min = 1, .max = 32},
	{.name = "cluster-pool-ipv6-cidr", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "IPv6 pool node CIDRs are carved from (e.g. fd00::/104); empty: no IPv6 pool",
	 .check = check_cidr6},
	{.name = "cluster-pool-ipv6-mask-size", .type = FIBRIL_CONFIG_INT, .default_value = "112",
	 .help = "Prefix length of each node's IPv6 CIDR", .min = 1, .max = 128},
	{.name = "node-cidr", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "This node's CIDR(s), one per family, set by hand: required without a kvstore "
		 "or k8s (unset with k8s: claimed as Leases); with a kvstore, exactly these are "
		 "claimed",
	 .check = check_node_cidr},
	{.name = "allocation-strategy", .type = FIBRIL_CONFIG_STRING, .default_value = "sequential",
	 .help = "sequential (lowest free after the last) or random", .check = check_strategy},
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "Name node CIDR claims are made under; empty: [agent] node-name, else the host name",
	 .check = check_node_name},
	{.name = "lease-ttl", .type = FIBRIL_CONFIG_DURATION, .default_value = NULL,
	 .help = "TTL of the kvstore lease node CIDR claims are held under; unset: the "
		 "kvstore's own lease TTL", .min = 2000, .max = 3600000},
	{.name = "claim-retry", .type = FIBRIL_CONFIG_DURATION, .default_value = "3s",
	 .help = "How often a failed or exhausted node CIDR claim is retried", .min = 100,
	 .max = 600000},
	{0},
};

static int read_node_name(struct cp *cp, char *why, size_t len)
{
	const char *name = fibril_config_string(cp->m, "node-name");
	if (!name || !name[0])
		name = fibril_config_get("agent", "node-name");
	if (name && name[0]) {
		snprintf(cp->node_name, sizeof(cp->node_name), "%s", name);
		return 0;
	}
	if (gethostname(cp->node_name, sizeof(cp->node_name) - 1) == 0 && cp->node_name[0])
		return 0;
	snprintf(why, len, "no node name: set [agent] node-name or [ipam-cluster-pool] node-name");
	return -EINVAL;
}

/* The pool of one family: parses, then mask size against it. */
static int read_pool(struct cp *cp, struct cp_fam *f, char *why, size_t len)
{
	char key[64];
	snprintf(key, sizeof(key), "cluster-pool-ipv%d-cidr", f->family);
	const char *v = fibril_config_string(cp->m, key);
	snprintf(key, sizeof(key), "cluster-pool-ipv%d-mask-size", f->family);
	f->mask = (uint8_t)fibril_config_int(cp->m, key);
	if (!v || !v[0])
		return 0;
	if (cidr_of_family(v, f->family, &f->pool, why, len))
		return -EINVAL;
	f->have_pool = true;
	if (f->mask <= f->pool.prefix_len) {
		snprintf(why, len, "%s %u must be longer than the pool's prefix /%u (%s)", key, f->mask,
			 f->pool.prefix_len, v);
		return -EINVAL;
	}
	if (f->mask - f->pool.prefix_len > MAX_INDEX_BITS) {
		snprintf(why, len, "%s %u: %s holds 2^%d node CIDRs; at most 2^%d", key, f->mask, v,
			 f->mask - f->pool.prefix_len, MAX_INDEX_BITS);
		return -EINVAL;
	}
	return 0;
}

/* Whether the allocator takes node CIDRs of this size. */
static int check_node_size(const struct fibril_cidr *c, const char *what, char *why, size_t len)
{
	int bits = c->ip.family == 6 ? 128 : 32;
	int host = bits - c->prefix_len;
	if (host > MAX_HOST_BITS) {
		snprintf(why, len, "%s /%u holds 2^%d addresses; the allocator takes at most 2^%d "
			 "(a prefix of at least /%d)", what, c->prefix_len, host, MAX_HOST_BITS,
			 bits - MAX_HOST_BITS);
		return -EINVAL;
	}
	struct fibril_ipalloc *a = NULL;
	int rc = fibril_ipalloc_new(c, NULL, &a);
	if (rc == 0 && fibril_ipalloc_capacity(a) == 0)
		rc = -ENOSPC;
	if (a)
		fibril_ipalloc_free(a);
	if (rc) {
		snprintf(why, len, "%s /%u: the allocator cannot hand out addresses from it (%s)", what,
			 c->prefix_len, rc == -ENOSPC ? "no usable address" : strerror(-rc));
		return -EINVAL;
	}
	return 0;
}

static int read_pins(struct cp *cp, char *why, size_t len)
{
	struct pin_parse p;
	const char *v = fibril_config_string(cp->m, "node-cidr");
	if (parse_pins(v ? v : "", &p, why, len))
		return -EINVAL;
	for (int i = 0; i < CP_NFAM; i++) {
		cp->fam[i].pinned = p.seen[i];
		cp->fam[i].pin = p.cidr[i];
		if (p.seen[i] && check_node_size(&p.cidr[i], "node-cidr", why, len))
			return -EINVAL;
	}
	return 0;
}

static int read_family(struct cp *cp, struct cp_fam *f, char *why, size_t len)
{
	if (read_pool(cp, f, why, len))
		return -EINVAL;
	if (!f->have_pool)
		return 0;
	struct fibril_cidr first;
	if (fibril_cidr_subnet(&f->pool, f->mask, 0, &first)) {
		snprintf(why, len, "cluster-pool-ipv%d-mask-size %u does not fit the pool", f->family,
			 f->mask);
		return -EINVAL;
	}
	char what[64];
	snprintf(what, sizeof(what), "cluster-pool-ipv%d-mask-size", f->family);
	if (check_node_size(&first, what, why, len))
		return -EINVAL;
	f->nsubnets = (uint64_t)1 << (f->mask - f->pool.prefix_len);
	return 0;
}

/* Reads and checks every key; init calls it, so a bad value stops the agent
 * before anything starts. */
int cp_config_read(struct cp *cp, char *why, size_t len)
{
	if (read_node_name(cp, why, len))
		return -EINVAL;
	const char *s = fibril_config_string(cp->m, "allocation-strategy");
	cp->strategy = s && strcmp(s, "random") == 0 ? FIBRIL_IPALLOC_RANDOM
						      : FIBRIL_IPALLOC_SEQUENTIAL;
	cp->retry_ms = fibril_config_duration_ms(cp->m, "claim-retry");
	/* 0: the provider's own TTL */
	cp->lease_ttl_s = (int64_t)((fibril_config_duration_ms(cp->m, "lease-ttl") + 999) / 1000);
	for (int i = 0; i < CP_NFAM; i++)
		if (read_family(cp, &cp->fam[i], why, len))
			return -EINVAL;
	return read_pins(cp, why, len);
}

/* A pinned CIDR with a pool of its family: inside it, of the mask size. */
static int check_pin_in_pool(const struct cp_fam *f, char *why, size_t len)
{
	if (!f->pinned || !f->have_pool)
		return 0;
	char pin[FIBRIL_IPAM_CIDR_LEN], pool[FIBRIL_IPAM_CIDR_LEN];
	fibril_cidr_format(&f->pin, pin, sizeof(pin));
	fibril_cidr_format(&f->pool, pool, sizeof(pool));
	if (f->pin.prefix_len < f->pool.prefix_len || !fibril_cidr_contains(&f->pool, &f->pin.ip)) {
		snprintf(why, len, "node-cidr %s is outside cluster-pool-ipv%d-cidr %s", pin,
			 f->family, pool);
		return -EINVAL;
	}
	if (f->pin.prefix_len != f->mask) {
		snprintf(why, len, "node-cidr %s is not a /%u (cluster-pool-ipv%d-mask-size)", pin,
			 f->mask, f->family);
		return -EINVAL;
	}
	return 0;
}

static int check_static(struct cp *cp, char *why, size_t len)
{
	if (!cp->fam[0].pinned && !cp->fam[1].pinned) {
		snprintf(why, len, "no kvstore, no k8s and no node-cidr: set [ipam-cluster-pool] "
			 "node-cidr, or load kvstore-etcd or k8s");
		return -EINVAL;
	}
	for (int i = 0; i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		if (f->have_pool && !f->pinned) {
			snprintf(why, len, "cluster-pool-ipv%d-cidr is set but there is no kvstore to "
				 "claim an IPv%d node CIDR from it: add one to node-cidr or load "
				 "kvstore-etcd", f->family, f->family);
			return -EINVAL;
		}
		f->enabled = f->pinned;
	}
	return 0;
}

static int check_kvstore(struct cp *cp, char *why, size_t len)
{
	bool any = false;
	for (int i = 0; i < CP_NFAM; i++) {
		cp->fam[i].enabled = cp->fam[i].have_pool || cp->fam[i].pinned;
		any = any || cp->fam[i].enabled;
	}
	if (!any) {
		snprintf(why, len, "no pool: set cluster-pool-ipv4-cidr and/or cluster-pool-ipv6-cidr "
			 "(or node-cidr)");
		return -EINVAL;
	}
	return 0;
}

/* The checks that depend on whether a kvstore is there (start knows). */
int cp_config_mode_check(struct cp *cp, char *why, size_t len)
{
	for (int i = 0; i < CP_NFAM; i++)
		if (check_pin_in_pool(&cp->fam[i], why, len))
			return -EINVAL;
	return cp->kv || cp->k8s ? check_kvstore(cp, why, len) : check_static(cp, why, len);
}
