/* modules/lb/map_specs.c - the lb module's BPF maps as it opens them
 * through the host's registry: each map's spec (type, key and value, sizes
 * from [lb] config), the formatters `fibril map dump` shows their entries
 * with, and the names of the datapath's lb_metrics counters. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <fibril/fibril.h>

#include "lb_mod.h"
#include "lb_tc.h"

static int fmt_proto_addr(const uint8_t addr[16], uint16_t port_be, char *out, size_t len)
{
	struct lb_addr a;
	memcpy(a.a, addr, 16);
	lb_format_addrport(&a, ntohs(port_be), out, len);
	return 0;
}

static int fmt_services(const void *key, const void *value, char *ko, size_t kl, char *vo,
			size_t vl, void *ud)
{
	(void)ud;
	const struct lb_svc_key *k = key;
	const struct lb_svc_val *v = value;
	char a[80];
	fmt_proto_addr(k->addr, k->port, a, sizeof(a));
	snprintf(ko, kl, "%s/%s slot=%u", a, lb_proto_name(k->proto), k->slot);
	if (k->slot)
		snprintf(vo, vl, "backend=%u service=%u", v->backend_id, v->rev_nat_id);
	else
		snprintf(vo, vl, "service=%u type=%s count=%u qcount=%u algorithm=%s%s%s%s%s "
				 "affinity-timeout=%u",
			 v->rev_nat_id, lb_type_name(v->flags & LB_SVC_TYPE_MASK), v->count, v->qcount,
			 lb_algorithm_name(v->algorithm), v->flags & LB_F_AFFINITY ? " affinity" : "",
			 v->flags & LB_F_EXT_LOCAL ? " ext-local" : "",
			 v->flags & LB_F_INT_LOCAL ? " int-local" : "",
			 v->flags & LB_F_FALLBACK ? " terminating-fallback" : "", v->affinity_timeout);
	return 0;
}

static int fmt_backends(const void *key, const void *value, char *ko, size_t kl, char *vo,
			size_t vl, void *ud)
{
	(void)ud;
	const struct lb_backend *b = value;
	char a[80];
	snprintf(ko, kl, "%u", *(const uint32_t *)key);
	fmt_proto_addr(b->addr, b->port, a, sizeof(a));
	snprintf(vo, vl, "%s/%s %s", a, lb_proto_name(b->proto), lb_state_name(b->state));
	return 0;
}

static int fmt_revnat(const void *key, const void *value, char *ko, size_t kl, char *vo,
		      size_t vl, void *ud)
{
	(void)ud;
	const struct lb_revnat *r = value;
	snprintf(ko, kl, "%u", *(const uint32_t *)key);
	return fmt_proto_addr(r->addr, r->port, vo, vl);
}

/* a Maglev table as "M=16381 backend:slots ..." (how many slots each holds) */
static int fmt_maglev(const void *key, const void *value, char *ko, size_t kl, char *vo,
		      size_t vl, void *ud)
{
	struct lb *lb = ud;
	const uint32_t *tbl = value;
	uint32_t ids[64], cnt[64];
	size_t n = 0, other = 0;
	snprintf(ko, kl, "%u", *(const uint32_t *)key);
	for (uint32_t i = 0; i < lb->maglev_m; i++) {
		size_t j = 0;
		while (j < n && ids[j] != tbl[i])
			j++;
		if (j == n) {
			if (n == 64) {
				other++;
				continue;
			}
			ids[n] = tbl[i];
			cnt[n++] = 0;
		}
		cnt[j]++;
	}
	int off = snprintf(vo, vl, "M=%u", lb->maglev_m);
	for (size_t j = 0; j < n && off > 0 && (size_t)off < vl; j++)
		off += snprintf(vo + off, vl - (size_t)off, " %u:%u", ids[j], cnt[j]);
	if (other && off > 0 && (size_t)off < vl)
		snprintf(vo + off, vl - (size_t)off, " others:%zu", other);
	return 0;
}

static int fmt_affinity(const void *key, const void *value, char *ko, size_t kl, char *vo,
			size_t vl, void *ud)
{
	(void)ud;
	const struct lb_aff_key *k = key;
	const struct lb_aff_val *v = value;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	snprintf(ko, kl, "client=%llu service=%u", (unsigned long long)k->client, k->rev_nat_id);
	snprintf(vo, vl, "backend=%u idle=%.1fs", v->backend_id,
		 now > v->last_used_ns ? (double)(now - v->last_used_ns) / 1e9 : 0.0);
	return 0;
}

static int fmt_aff_match(const void *key, const void *value, char *ko, size_t kl, char *vo,
			 size_t vl, void *ud)
{
	(void)ud;
	(void)value;
	const struct lb_aff_match_key *k = key;
	snprintf(ko, kl, "backend=%u service=%u", k->backend_id, k->rev_nat_id);
	snprintf(vo, vl, "selectable");
	return 0;
}

static int fmt_sk_revnat(const void *key, const void *value, char *ko, size_t kl, char *vo,
			 size_t vl, void *ud)
{
	(void)ud;
	const struct lb_sk_revnat_key *k = key;
	const struct lb_sk_revnat_val *v = value;
	char a[80], f[80];
	fmt_proto_addr(k->addr, k->port, a, sizeof(a));
	fmt_proto_addr(v->addr, v->port, f, sizeof(f));
	snprintf(ko, kl, "socket=%llu backend=%s", (unsigned long long)k->cookie, a);
	snprintf(vo, vl, "frontend=%s service=%u", f, v->rev_nat_id);
	return 0;
}

const char *const lb_metric_names[LB_M_COUNT] = {
	[LB_M_TRANSLATED] = "translated", [LB_M_NO_BACKEND] = "no-backend",
	[LB_M_AFFINITY_HIT] = "affinity-hit", [LB_M_REVNAT] = "reverse-nat",
	[LB_M_BACKEND_MISSING] = "backend-missing", [LB_M_TC_DNAT] = "tc-dnat",
	[LB_M_TC_REVNAT] = "tc-reverse-nat", [LB_M_TC_NO_BACKEND] = "tc-no-backend",
	[LB_M_TC_SNAT] = "tc-snat", [LB_M_TC_SNAT_NO_PORT] = "tc-snat-no-port",
	[LB_M_TC_CT_FULL] = "tc-ct-full", [LB_M_TC_SRC_RANGE_DROP] = "tc-source-range-drop",
	[LB_M_TC_REWRITE_FAIL] = "tc-rewrite-fail", [LB_M_TC_ICMP_REVNAT] = "tc-icmp-reverse-nat",
	[LB_M_TC_FRAG] = "tc-fragment", [LB_M_TC_CT_SRC_QUOTA] = "tc-ct-source-quota",
};

static int fmt_metrics(const void *key, const void *value, char *ko, size_t kl, char *vo,
		       size_t vl, void *ud)
{
	(void)ud;
	uint32_t k = *(const uint32_t *)key;
	int ncpu = libbpf_num_possible_cpus();
	uint64_t sum = 0;
	for (int c = 0; c < ncpu; c++) {
		uint64_t v;
		memcpy(&v, (const uint8_t *)value + (size_t)c * 8, 8);
		sum += v;
	}
	snprintf(ko, kl, "%s", k < LB_M_COUNT ? lb_metric_names[k] : "?");
	snprintf(vo, vl, "%" PRIu64, sum);
	return 0;
}

static int fmt_ct(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud)
{
	(void)ud;
	const struct lb_ct_key *k = key;
	const struct lb_ct_val *v = value;
	char s[80], d[80], a[80];
	fmt_proto_addr(k->saddr, k->sport, s, sizeof(s));
	fmt_proto_addr(k->daddr, k->dport, d, sizeof(d));
	fmt_proto_addr(v->addr, v->port, a, sizeof(a));
	snprintf(ko, kl, "%s %s -> %s %s", lb_proto_name(k->proto), s, d,
		 k->dir == LB_CT_EGRESS ? "egress" : "ingress");
	struct lb_ctgc_params now = {.now_s = lb_ctgc_now_s()};
	char idle[32] = "?";
	if (v->seen)
		snprintf(idle, sizeof(idle), "%us", lb_ctgc_idle(&now, v->seen));
	snprintf(vo, vl, "%s=%s service=%u idle=%s%s%s%s",
		 k->dir == LB_CT_EGRESS ? "source" : "destination", a, v->rev_nat_id, idle,
		 v->seen & LB_CT_F_SYN ? " syn" : "", v->seen & LB_CT_F_CLOSING ? " closing" : "",
		 v->seen & LB_CT_F_CHARGED ? " charged" : "");
	return 0;
}

static int fmt_devices(const void *key, const void *value, char *ko, size_t kl, char *vo,
		       size_t vl, void *ud)
{
	(void)ud;
	const struct lb_device *d = value;
	char name[IF_NAMESIZE] = "?", a4[80], a6[80];
	struct lb_addr a;
	if_indextoname(*(const uint32_t *)key, name);
	memcpy(a.a, d->addr4, 16);
	lb_format_addr(&a, a4, sizeof(a4));
	memcpy(a.a, d->addr6, 16);
	lb_format_addr(&a, a6, sizeof(a6));
	snprintf(ko, kl, "%u (%s)", *(const uint32_t *)key, name);
	snprintf(vo, vl, "%s snat4=%s snat6=%s", d->flags & LB_DEV_TUNNEL ? "tunnel" : "nodeport", a4,
		 a6);
	return 0;
}

static int fmt_src_range(const void *key, const void *value, char *ko, size_t kl, char *vo,
			 size_t vl, void *ud)
{
	(void)ud;
	(void)value;
	const struct lb_src_range_key *k = key;
	struct lb_cidr c = {.plen = (uint8_t)(k->prefixlen >= 32 ? k->prefixlen - 32 : 0)};
	char a[80];
	memcpy(c.addr.a, k->addr, 16);
	lb_format_cidr(&c, a, sizeof(a));
	snprintf(ko, kl, "service=%u %s", ntohs(k->rev_nat_id), a);
	snprintf(vo, vl, "allowed");
	return 0;
}

static int fmt_frag(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		    void *ud)
{
	(void)ud;
	const struct lb_frag_key *k = key;
	const struct lb_frag_val *v = value;
	struct lb_addr s, d;
	char sa[64], da[64];
	memcpy(s.a, k->saddr, 16);
	memcpy(d.a, k->daddr, 16);
	lb_format_addr(&s, sa, sizeof(sa));
	lb_format_addr(&d, da, sizeof(da));
	snprintf(ko, kl, "%s %s -> %s id=%u", lb_proto_name(k->proto), sa, da, k->id);
	snprintf(vo, vl, "ports %u -> %u", ntohs(v->sport), ntohs(v->dport));
	return 0;
}

static int fmt_node_addr(const void *key, const void *value, char *ko, size_t kl, char *vo,
			 size_t vl, void *ud)
{
	(void)ud;
	(void)value;
	struct lb_addr a;
	memcpy(a.a, key, 16);
	lb_format_addr(&a, ko, kl);
	snprintf(vo, vl, "node address");
	return 0;
}

/* lb_ct_src: the slots in use (slot 0, the secret, is not shown) */
static int fmt_ct_src(const void *key, const void *value, char *ko, size_t kl, char *vo,
		      size_t vl, void *ud)
{
	(void)ud;
	uint32_t k = *(const uint32_t *)key;
	uint64_t v;
	memcpy(&v, value, sizeof(v));
	if (!k || !v)
		return FIBRIL_MAP_FORMAT_SKIP;
	snprintf(ko, kl, "slot %u", k);
	snprintf(vo, vl, "flows=%" PRIu64, v);
	return 0;
}

/* lb_ct_src when lb_ct or it is new (no flow is charged to anyone): every
 * count 0 and a new secret in slot 0; a reused pair keeps both, so the
 * flows of the previous agent are given back to the slots they took. */
static int ct_src_init(struct lb *lb, char *err, size_t len)
{
	if (fibril_map_origin(lb->maps[LB_MI_CT]) == FIBRIL_MAP_REUSED &&
	    fibril_map_origin(lb->maps[LB_MI_CT_SRC]) == FIBRIL_MAP_REUSED)
		return 0;
	uint64_t *src = mmap(NULL, LB_CT_SRC_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
			     fibril_map_fd(lb->maps[LB_MI_CT_SRC]), 0);
	if (src == MAP_FAILED) {
		snprintf(err, len, "cannot map %s: %s", LB_MAP_CT_SRC, strerror(errno));
		return -errno;
	}
	uint64_t secret = 0;
	int rc = 0;
	if (getrandom(&secret, sizeof(secret), 0) != (ssize_t)sizeof(secret)) {
		rc = -errno;
		snprintf(err, len, "no random secret for %s: %s", LB_MAP_CT_SRC, strerror(errno));
	} else {
		memset(src, 0, LB_CT_SRC_BYTES);
		__atomic_store_n(&src[0], secret, __ATOMIC_RELAXED);
	}
	munmap(src, LB_CT_SRC_BYTES);
	return rc;
}

int lb_open_maps(struct lb *lb, char *err, size_t len)
{
	struct fibril_module *m = lb->m;
	uint32_t m_size = lb->maglev_m;
	const struct fibril_map_spec specs[LB_MI_COUNT] = {
		[LB_MI_SERVICES] = {.name = LB_MAP_SERVICES, .type = BPF_MAP_TYPE_HASH,
				.key_size = sizeof(struct lb_svc_key),
				.value_size = sizeof(struct lb_svc_val),
				.max_entries = (uint32_t)fibril_config_int(m, "service-map-max")},
		[LB_MI_BACKENDS] = {.name = LB_MAP_BACKENDS, .type = BPF_MAP_TYPE_HASH,
				.key_size = sizeof(uint32_t), .value_size = sizeof(struct lb_backend),
				.max_entries = (uint32_t)fibril_config_int(m, "backend-map-max")},
		[LB_MI_REVNAT] = {.name = LB_MAP_REVNAT, .type = BPF_MAP_TYPE_HASH,
			      .key_size = sizeof(uint32_t), .value_size = sizeof(struct lb_revnat),
			      .max_entries = LB_SVC_ID_MAX + 1},
		[LB_MI_MAGLEV] = {.name = LB_MAP_MAGLEV, .type = BPF_MAP_TYPE_HASH,
			      .key_size = sizeof(uint32_t), .value_size = m_size * 4,
			      .max_entries = (uint32_t)fibril_config_int(m, "maglev-map-max"),
			      .map_flags = BPF_F_NO_PREALLOC},
		[LB_MI_AFFINITY] = {.name = LB_MAP_AFFINITY, .type = BPF_MAP_TYPE_LRU_HASH,
				.key_size = sizeof(struct lb_aff_key),
				.value_size = sizeof(struct lb_aff_val),
				.max_entries = (uint32_t)fibril_config_int(m, "affinity-map-max")},
		[LB_MI_AFF_MATCH] = {.name = LB_MAP_AFF_MATCH, .type = BPF_MAP_TYPE_HASH,
				 .key_size = sizeof(struct lb_aff_match_key),
				 .value_size = sizeof(uint8_t), .max_entries = 65536,
				 .map_flags = BPF_F_NO_PREALLOC},
		[LB_MI_SK_REVNAT] = {.name = LB_MAP_SK_REVNAT, .type = BPF_MAP_TYPE_LRU_HASH,
				 .key_size = sizeof(struct lb_sk_revnat_key),
				 .value_size = sizeof(struct lb_sk_revnat_val),
				 .max_entries = (uint32_t)fibril_config_int(m, "sock-revnat-map-max")},
		[LB_MI_METRICS] = {.name = LB_MAP_METRICS, .type = BPF_MAP_TYPE_PERCPU_ARRAY,
			       .key_size = sizeof(uint32_t), .value_size = sizeof(uint64_t),
			       .max_entries = LB_M_COUNT},
		[LB_MI_CT] = {.name = LB_MAP_CT, .type = BPF_MAP_TYPE_HASH, /* never evicts */
			  .key_size = sizeof(struct lb_ct_key), .value_size = sizeof(struct lb_ct_val),
			  .max_entries = (uint32_t)fibril_config_int(m, "ct-map-max")},
		[LB_MI_DEVICES] = {.name = LB_MAP_DEVICES, .type = BPF_MAP_TYPE_HASH,
			       .key_size = sizeof(uint32_t), .value_size = sizeof(struct lb_device),
			       .max_entries = 64},
		[LB_MI_SRC_RANGE] = {.name = LB_MAP_SRC_RANGE, .type = BPF_MAP_TYPE_LPM_TRIE,
				 .key_size = sizeof(struct lb_src_range_key),
				 .value_size = sizeof(uint8_t), .max_entries = LB_SRC_RANGE_MAX,
				 .map_flags = BPF_F_NO_PREALLOC},
		[LB_MI_FRAG] = {.name = LB_MAP_FRAG, .type = BPF_MAP_TYPE_LRU_HASH,
			    .key_size = sizeof(struct lb_frag_key),
			    .value_size = sizeof(struct lb_frag_val), .max_entries = LB_FRAG_MAX},
		[LB_MI_NODE_ADDRS] = {.name = LB_MAP_NODE_ADDRS, .type = BPF_MAP_TYPE_HASH,
				  .key_size = sizeof(struct lb_node_addr_key),
				  .value_size = sizeof(uint8_t), .max_entries = LB_NODE_ADDRS_MAX},
		[LB_MI_CT_SRC] = {.name = LB_MAP_CT_SRC, .type = BPF_MAP_TYPE_ARRAY,
			      .key_size = sizeof(uint32_t), .value_size = sizeof(uint64_t),
			      .max_entries = LB_CT_SRC_SLOTS, .map_flags = BPF_F_MMAPABLE},
	};
	static const fibril_map_format_fn fmts[LB_MI_COUNT] = {
		fmt_services, fmt_backends, fmt_revnat, fmt_maglev, fmt_affinity, fmt_aff_match,
		fmt_sk_revnat, fmt_metrics, fmt_ct, fmt_devices, fmt_src_range, fmt_frag, fmt_node_addr,
		fmt_ct_src,
	};
	for (int i = 0; i < LB_MI_COUNT; i++) {
		struct fibril_map_spec s = specs[i];
		s.sz = sizeof(s);
		int rc = fibril_map_open(m, &s, &lb->maps[i]);
		if (rc < 0) {
			snprintf(err, len, "cannot open map %s: %s", s.name, strerror(-rc));
			return rc;
		}
		if (fibril_map_origin(lb->maps[i]) == FIBRIL_MAP_RECREATED && i == LB_MI_SERVICES)
			fibril_warn(m, "%s was recreated (its spec changed): services are not restored",
				    s.name);
		fibril_map_set_formatter(lb->maps[i], fmts[i], lb);
	}
	int rc = ct_src_init(lb, err, len);
	if (rc < 0)
		return rc;
	lb->t.maps = (struct lb_maps){
		.services = fibril_map_fd(lb->maps[LB_MI_SERVICES]),
		.backends = fibril_map_fd(lb->maps[LB_MI_BACKENDS]),
		.revnat = fibril_map_fd(lb->maps[LB_MI_REVNAT]),
		.maglev = fibril_map_fd(lb->maps[LB_MI_MAGLEV]),
		.aff_match = fibril_map_fd(lb->maps[LB_MI_AFF_MATCH]),
		.src_range = fibril_map_fd(lb->maps[LB_MI_SRC_RANGE]),
	};
	return 0;
}
