/* modules/lb/lb.c - the lb module (capability "lb"): service load
 * balancing without kube-proxy. At start it opens its maps through the
 * host's registry (sized by [lb] config), restores every service and
 * backend with its ID from the pins before anything is reprogrammed, loads
 * the socket-level programs (bpf/fibril_lb.bpf.c, embedded as a skeleton)
 * with the registry's maps and attaches them to [lb] cgroup through pinned
 * BPF links (<bpffs-dir>/lb_link_*): a restarted agent swaps the new
 * programs into the same links (bpf_link_update), so a kill -9 or a
 * restart never leaves the cgroup without them. The tc programs for traffic
 * from outside the node (NodePort) and lb_ct's GC are tc.c's. Services come from
 * PUT/DELETE /v1/service (`fibril service upsert|delete`) and from the k8s
 * module (k8s.c). Metrics: fibril_lb_*. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <fibril/fibril.h>
#include <fibril/lb.h>

#include "libbpf_log.h"
#include "lb_mod.h"
#include "lb_tc.h"
#include "fibril_lb.skel.h"

/* ---- config -------------------------------------------------------------------- */
static int check_algorithm(const char *value, char *why, size_t len)
{
	uint8_t a;
	if (lb_algorithm_parse(value, &a) == 0)
		return 0;
	snprintf(why, len, "expected random or maglev");
	return -EINVAL;
}

static int check_maglev(const char *value, char *why, size_t len)
{
	char *end;
	unsigned long long m = strtoull(value, &end, 10);
	if (*end || !lb_maglev_size_ok(m)) {
		snprintf(why, len, "expected a prime between 7 and %u (Cilium's sizes: 251, 509, "
				   "1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071)", LB_MAGLEV_MAX);
		return -EINVAL;
	}
	return 0;
}

static const struct fibril_config_key lb_config_keys[] = {
	{.name = "socket-lb", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "Translate connect()/sendmsg() to services with cgroup socket hooks (false: "
		 "the hooks are detached)"},
	{.name = "cgroup", .type = FIBRIL_CONFIG_PATH, .default_value = "/sys/fs/cgroup",
	 .help = "cgroup v2 directory the socket hooks are attached to (every process below it "
		 "is load-balanced)"},
	{.name = "algorithm", .type = FIBRIL_CONFIG_STRING, .default_value = "random",
	 .help = "Backend selection of services that do not choose: random or maglev",
	 .check = check_algorithm},
	{.name = "maglev-table-size", .type = FIBRIL_CONFIG_INT, .default_value = "16381",
	 .help = "Maglev table size M (a prime); a change recreates lb_maglev",
	 .min = 7, .max = LB_MAGLEV_MAX, .check = check_maglev},
	{.name = "service-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of lb_services (one per frontend plus one per backend of each)",
	 .min = 16, .max = 16777216},
	{.name = "backend-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of lb_backends: the most backends (distinct address, port, protocol)",
	 .min = 16, .max = 16777216},
	{.name = "maglev-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "1024",
	 .help = "Services with a Maglev table (each takes 4*M bytes, allocated on use)",
	 .min = 1, .max = 65535},
	{.name = "affinity-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of lb_affinity (client, service) for sessionAffinity ClientIP",
	 .min = 16, .max = 16777216},
	{.name = "nodeport-devices", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "Devices (in the agent's netns) whose traffic from outside the node is "
		 "load-balanced per packet at tc: NodePort, external and load-balancer IPs "
		 "(IPv4 and IPv6)"},
	{.name = "ct-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "131072",
	 .help = "Entries of lb_ct, the per-packet NAT's flows (two per flow, four with SNAT)",
	 .min = 16, .max = 16777216},
	{.name = "nodeport-snat", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "SNAT traffic from outside to a backend on another node to the arrival "
		 "device's address, so the reply comes back through this node (Cilium's SNAT "
		 "mode; externalTrafficPolicy Local never does); false: DNAT only"},
	{.name = "ct-timeout-tcp", .type = FIBRIL_CONFIG_DURATION, .default_value = "6h",
	 .help = "Idle time after which an open TCP flow leaves lb_ct", .min = 1000,
	 .max = 604800000},
	{.name = "ct-timeout-tcp-syn", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "Idle time after which a TCP flow whose handshake did not complete leaves lb_ct",
	 .min = 1000, .max = 604800000},
	{.name = "ct-timeout-tcp-closing", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "Idle time after which a TCP flow that saw FIN or RST leaves lb_ct",
	 .min = 1000, .max = 604800000},
	{.name = "ct-timeout-other", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "Idle time after which a UDP flow leaves lb_ct", .min = 1000, .max = 604800000},
	{.name = "ct-gc-interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "30s",
	 .help = "How often the lb_ct garbage collector runs", .min = 100, .max = 3600000},
	{.name = "node-addresses", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "This node's addresses: the frontends of a Kubernetes Service's NodePorts"},
	{.name = "sock-revnat-map-max", .type = FIBRIL_CONFIG_INT, .default_value = "262144",
	 .help = "Entries of lb_sk_revnat (socket, backend) -> frontend, for recvmsg and "
		 "getpeername", .min = 16, .max = 16777216},
	{0},
};

/* ---- maps ------------------------------------------------------------------------- */
enum {
	M_SERVICES, M_BACKENDS, M_REVNAT, M_MAGLEV, M_AFFINITY, M_AFF_MATCH, M_SK_REVNAT,
	M_METRICS, M_CT, M_DEVICES, M_COUNT
};

static const char *const hook_names[] = {
	"connect4", "connect6", "sendmsg4", "sendmsg6", "recvmsg4", "recvmsg6",
	"getpeername4", "getpeername6",
};
static const enum bpf_attach_type hook_types[] = {
	BPF_CGROUP_INET4_CONNECT, BPF_CGROUP_INET6_CONNECT, BPF_CGROUP_UDP4_SENDMSG,
	BPF_CGROUP_UDP6_SENDMSG, BPF_CGROUP_UDP4_RECVMSG, BPF_CGROUP_UDP6_RECVMSG,
	BPF_CGROUP_INET4_GETPEERNAME, BPF_CGROUP_INET6_GETPEERNAME,
};
#define LB_HOOKS (sizeof(hook_names) / sizeof(hook_names[0]))

struct lb {
	struct fibril_module *m;
	struct lb_table t;
	bool table_ready;
	struct fibril_map *maps[M_COUNT];
	struct fibril_lb *skel;
	uint32_t maglev_m;
	char cgroup[4096];
	int hooks_attached;
	size_t restored, restore_skipped, restored_known, restored_k8s;
	struct lb_k8s *k8s;
	struct lb_tc *tc;
	struct lb_origin *origin;
	/* metrics */
	struct fibril_metric *m_services, *m_backends, *m_ops, *m_dp, *m_prog_secs;
	struct fibril_series *s_services, *s_backends, *s_prog;
};

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

static const char *const metric_names[LB_M_COUNT] = {
	[LB_M_TRANSLATED] = "translated", [LB_M_NO_BACKEND] = "no-backend",
	[LB_M_AFFINITY_HIT] = "affinity-hit", [LB_M_REVNAT] = "reverse-nat",
	[LB_M_BACKEND_MISSING] = "backend-missing", [LB_M_TC_DNAT] = "tc-dnat",
	[LB_M_TC_REVNAT] = "tc-reverse-nat", [LB_M_TC_NO_BACKEND] = "tc-no-backend",
	[LB_M_TC_SNAT] = "tc-snat", [LB_M_TC_SNAT_NO_PORT] = "tc-snat-no-port",
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
	snprintf(ko, kl, "%s", k < LB_M_COUNT ? metric_names[k] : "?");
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
	snprintf(vo, vl, "%s=%s service=%u idle=%s%s%s",
		 k->dir == LB_CT_EGRESS ? "source" : "destination", a, v->rev_nat_id, idle,
		 v->seen & LB_CT_F_SYN ? " syn" : "", v->seen & LB_CT_F_CLOSING ? " closing" : "");
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

static int open_maps(struct lb *lb, char *err, size_t len)
{
	struct fibril_module *m = lb->m;
	uint32_t m_size = lb->maglev_m;
	const struct fibril_map_spec specs[M_COUNT] = {
		[M_SERVICES] = {.name = LB_MAP_SERVICES, .type = BPF_MAP_TYPE_HASH,
				.key_size = sizeof(struct lb_svc_key),
				.value_size = sizeof(struct lb_svc_val),
				.max_entries = (uint32_t)fibril_config_int(m, "service-map-max")},
		[M_BACKENDS] = {.name = LB_MAP_BACKENDS, .type = BPF_MAP_TYPE_HASH,
				.key_size = sizeof(uint32_t), .value_size = sizeof(struct lb_backend),
				.max_entries = (uint32_t)fibril_config_int(m, "backend-map-max")},
		[M_REVNAT] = {.name = LB_MAP_REVNAT, .type = BPF_MAP_TYPE_HASH,
			      .key_size = sizeof(uint32_t), .value_size = sizeof(struct lb_revnat),
			      .max_entries = LB_SVC_ID_MAX + 1},
		[M_MAGLEV] = {.name = LB_MAP_MAGLEV, .type = BPF_MAP_TYPE_HASH,
			      .key_size = sizeof(uint32_t), .value_size = m_size * 4,
			      .max_entries = (uint32_t)fibril_config_int(m, "maglev-map-max"),
			      .map_flags = BPF_F_NO_PREALLOC},
		[M_AFFINITY] = {.name = LB_MAP_AFFINITY, .type = BPF_MAP_TYPE_LRU_HASH,
				.key_size = sizeof(struct lb_aff_key),
				.value_size = sizeof(struct lb_aff_val),
				.max_entries = (uint32_t)fibril_config_int(m, "affinity-map-max")},
		[M_AFF_MATCH] = {.name = LB_MAP_AFF_MATCH, .type = BPF_MAP_TYPE_HASH,
				 .key_size = sizeof(struct lb_aff_match_key),
				 .value_size = sizeof(uint8_t), .max_entries = 65536,
				 .map_flags = BPF_F_NO_PREALLOC},
		[M_SK_REVNAT] = {.name = LB_MAP_SK_REVNAT, .type = BPF_MAP_TYPE_LRU_HASH,
				 .key_size = sizeof(struct lb_sk_revnat_key),
				 .value_size = sizeof(struct lb_sk_revnat_val),
				 .max_entries = (uint32_t)fibril_config_int(m, "sock-revnat-map-max")},
		[M_METRICS] = {.name = LB_MAP_METRICS, .type = BPF_MAP_TYPE_PERCPU_ARRAY,
			       .key_size = sizeof(uint32_t), .value_size = sizeof(uint64_t),
			       .max_entries = LB_M_COUNT},
		[M_CT] = {.name = LB_MAP_CT, .type = BPF_MAP_TYPE_LRU_HASH,
			  .key_size = sizeof(struct lb_ct_key), .value_size = sizeof(struct lb_ct_val),
			  .max_entries = (uint32_t)fibril_config_int(m, "ct-map-max")},
		[M_DEVICES] = {.name = LB_MAP_DEVICES, .type = BPF_MAP_TYPE_HASH,
			       .key_size = sizeof(uint32_t), .value_size = sizeof(struct lb_device),
			       .max_entries = 64},
	};
	static const fibril_map_format_fn fmts[M_COUNT] = {
		fmt_services, fmt_backends, fmt_revnat, fmt_maglev, fmt_affinity, fmt_aff_match,
		fmt_sk_revnat, fmt_metrics, fmt_ct, fmt_devices,
	};
	for (int i = 0; i < M_COUNT; i++) {
		struct fibril_map_spec s = specs[i];
		s.sz = sizeof(s);
		int rc = fibril_map_open(m, &s, &lb->maps[i]);
		if (rc < 0) {
			snprintf(err, len, "cannot open map %s: %s", s.name, strerror(-rc));
			return rc;
		}
		if (fibril_map_origin(lb->maps[i]) == FIBRIL_MAP_RECREATED && i == M_SERVICES)
			fibril_warn(m, "%s was recreated (its spec changed): services are not restored",
				    s.name);
		fibril_map_set_formatter(lb->maps[i], fmts[i], lb);
	}
	lb->t.maps = (struct lb_maps){
		.services = fibril_map_fd(lb->maps[M_SERVICES]),
		.backends = fibril_map_fd(lb->maps[M_BACKENDS]),
		.revnat = fibril_map_fd(lb->maps[M_REVNAT]),
		.maglev = fibril_map_fd(lb->maps[M_MAGLEV]),
		.aff_match = fibril_map_fd(lb->maps[M_AFF_MATCH]),
	};
	return 0;
}

/* ---- programs and the cgroup ---------------------------------------------------------- */
static int load_programs(struct lb *lb, char *err, size_t len)
{
	libbpf_print_fn_t old = modcommon_libbpf_log_begin(lb->m);
	int rc = 0;
	struct fibril_lb *skel = fibril_lb__open();
	if (!skel) {
		rc = -errno;
		snprintf(err, len, "cannot open the BPF object: %s", strerror(-rc));
		goto out;
	}
	skel->rodata->maglev_m = lb->maglev_m;
	struct {
		struct bpf_map *map;
		int id;
	} reuse[] = {
		{skel->maps.lb_services, M_SERVICES}, {skel->maps.lb_backends, M_BACKENDS},
		{skel->maps.lb_maglev, M_MAGLEV},     {skel->maps.lb_affinity, M_AFFINITY},
		{skel->maps.lb_aff_match, M_AFF_MATCH}, {skel->maps.lb_sk_revnat, M_SK_REVNAT},
		{skel->maps.lb_metrics, M_METRICS}, {skel->maps.lb_ct, M_CT},
		{skel->maps.lb_devices, M_DEVICES},
	};
	for (size_t i = 0; i < sizeof(reuse) / sizeof(reuse[0]); i++)
		if ((rc = bpf_map__reuse_fd(reuse[i].map, fibril_map_fd(lb->maps[reuse[i].id]))) < 0) {
			snprintf(err, len, "map %s does not fit the program: %s",
				 bpf_map__name(reuse[i].map), strerror(-rc));
			goto out;
		}
	if ((rc = fibril_lb__load(skel)) < 0) {
		snprintf(err, len, "the kernel refused the socket programs: %s (the verifier log "
				   "is above)", strerror(-rc));
		goto out;
	}
out:
	modcommon_libbpf_log_end(old);
	if (rc < 0) {
		fibril_lb__destroy(skel);
		return rc;
	}
	lb->skel = skel;
	return 0;
}

static int hook_prog_fd(struct lb *lb, size_t i)
{
	struct bpf_program *progs[] = {
		lb->skel->progs.fibril_lb_connect4,    lb->skel->progs.fibril_lb_connect6,
		lb->skel->progs.fibril_lb_sendmsg4,    lb->skel->progs.fibril_lb_sendmsg6,
		lb->skel->progs.fibril_lb_recvmsg4,    lb->skel->progs.fibril_lb_recvmsg6,
		lb->skel->progs.fibril_lb_getpeername4, lb->skel->progs.fibril_lb_getpeername6,
	};
	return bpf_program__fd(progs[i]);
}

static void link_path(size_t i, char *out, size_t len)
{
	const char *dir = fibril_config_get("agent", "bpffs-dir");
	snprintf(out, len, "%s/lb_link_%s", dir ? dir : "/sys/fs/bpf/fibril", hook_names[i]);
}

/* Attach (or re-adopt) every hook; socket-lb off removes the links. */
static int attach_hooks(struct lb *lb, bool enable, char *err, size_t len)
{
	struct stat cg;
	int cgfd = -1;
	lb->hooks_attached = 0;
	if (enable) {
		cgfd = open(lb->cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0 || fstat(cgfd, &cg) < 0) {
			snprintf(err, len, "cannot open the cgroup %.300s: %s", lb->cgroup, strerror(errno));
			if (cgfd >= 0)
				close(cgfd);
			return -errno;
		}
		struct statfs fs;
		if (fstatfs(cgfd, &fs) == 0 && fs.f_type != CGROUP2_SUPER_MAGIC &&
		    !strcmp(lb->cgroup, "/sys/fs/cgroup")) {
			/* systemd's hybrid layout: the v2 hierarchy is "unified" below */
			int u = open("/sys/fs/cgroup/unified", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (u >= 0 && fstatfs(u, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC &&
			    fstat(u, &cg) == 0) {
				fibril_info(lb->m, "/sys/fs/cgroup is cgroup v1: using the v2 hierarchy "
						   "at /sys/fs/cgroup/unified");
				snprintf(lb->cgroup, sizeof(lb->cgroup), "/sys/fs/cgroup/unified");
				close(cgfd);
				cgfd = u;
			} else if (u >= 0) {
				close(u);
			}
		}
		if (fstatfs(cgfd, &fs) < 0 || fs.f_type != CGROUP2_SUPER_MAGIC) {
			snprintf(err, len, "[lb] cgroup %.300s is not in a cgroup v2 file system (mount "
					   "cgroup2 there, or set the path of the unified hierarchy)",
				 lb->cgroup);
			close(cgfd);
			return -ENOTDIR;
		}
	}
	int rc = 0;
	for (size_t i = 0; i < LB_HOOKS; i++) {
		char path[4200];
		link_path(i, path, sizeof(path));
		int lfd = bpf_obj_get(path);
		if (lfd >= 0) {
			struct bpf_link_info info;
			uint32_t il = sizeof(info);
			memset(&info, 0, sizeof(info));
			bool same = enable && bpf_obj_get_info_by_fd(lfd, &info, &il) == 0 &&
				    info.type == BPF_LINK_TYPE_CGROUP &&
				    info.cgroup.cgroup_id == (uint64_t)cg.st_ino &&
				    info.cgroup.attach_type == hook_types[i];
			if (same && bpf_link_update(lfd, hook_prog_fd(lb, i), NULL) == 0) {
				close(lfd);
				lb->hooks_attached++;
				continue;
			}
			/* another cgroup, or switched off: unpinning detaches it */
			unlink(path);
			close(lfd);
		}
		if (!enable)
			continue;
		lfd = bpf_link_create(hook_prog_fd(lb, i), cgfd, hook_types[i], NULL);
		if (lfd < 0) {
			rc = -errno;
			snprintf(err, len, "cannot attach %s to the cgroup %.300s: %s", hook_names[i],
				 lb->cgroup, strerror(-rc));
			break;
		}
		if (bpf_obj_pin(lfd, path) < 0) {
			rc = -errno;
			snprintf(err, len, "cannot pin the %s link at %.300s: %s", hook_names[i], path,
				 strerror(-rc));
			close(lfd);
			break;
		}
		close(lfd);
		lb->hooks_attached++;
	}
	if (cgfd >= 0)
		close(cgfd);
	return rc;
}

/* ---- operations shared by the API and k8s -------------------------------------------- */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void count_op(struct lb *lb, const char *op, int rc)
{
	const char *res = rc == 0 ? "ok" : rc == -EINVAL ? "invalid" : rc == -EEXIST ? "conflict"
		: rc == -ENOENT ? "not-found" : "error";
	fibril_series_inc(fibril_metric_labels(lb->m_ops, op, res));
}

/* The service's event on the bus (<fibril/lb.h>): its frontend, name and
 * backends, for hubble-lite's lookup; `gone` a deleted one's frontend. */
static void publish_service(struct lb *lb, const struct lb_svc *s, uint32_t op)
{
	size_t nbe = op == FIBRIL_LB_SERVICE_DELETED ? 0 : s->nbe;
	size_t len = sizeof(struct fibril_lb_service_event) + nbe * sizeof(struct fibril_lb_backend_addr);
	uint8_t *buf = calloc(1, len);
	if (!buf)
		return;
	struct fibril_lb_service_event *ev = (struct fibril_lb_service_event *)(void *)buf;
	ev->sz = sizeof(*ev);
	ev->op = op;
	ev->id = s->id;
	ev->port = s->port;
	ev->proto = s->proto;
	ev->type = s->type;
	ev->source = s->source == LB_SRC_API   ? FIBRIL_LB_SOURCE_API
		     : s->source == LB_SRC_K8S ? FIBRIL_LB_SOURCE_K8S
					       : FIBRIL_LB_SOURCE_UNKNOWN;
	memcpy(ev->addr, s->addr.a, 16);
	/* "ns/name[:port]" (k8s), "ns/name" or "name" (API) */
	const char *slash = strchr(s->name, '/');
	if (slash) {
		snprintf(ev->namespace_, sizeof(ev->namespace_), "%.*s", (int)(slash - s->name), s->name);
		snprintf(ev->name, sizeof(ev->name), "%s", slash + 1);
	} else {
		snprintf(ev->name, sizeof(ev->name), "%s", s->name);
	}
	char *colon = s->source == LB_SRC_K8S ? strchr(ev->name, ':') : NULL;
	if (colon) {
		snprintf(ev->port_name, sizeof(ev->port_name), "%s", colon + 1);
		*colon = '\0';
	}
	ev->nbackends = (uint32_t)nbe;
	ev->backends = nbe ? (uint32_t)sizeof(*ev) : 0;
	ev->backend_sz = (uint32_t)sizeof(struct fibril_lb_backend_addr);
	struct fibril_lb_backend_addr *be = (struct fibril_lb_backend_addr *)(void *)(buf + sizeof(*ev));
	for (size_t i = 0; i < nbe; i++) {
		memcpy(be[i].addr, s->be[i].addr.a, 16);
		be[i].port = s->be[i].port;
		be[i].state = s->be[i].state;
	}
	int rc = fibril_bus_publish(lb->m, FIBRIL_LB_TOPIC_SERVICE, FIBRIL_LB_SERVICE_EVENT_VERSION,
				    buf, len);
	if (rc < 0)
		fibril_warn(lb->m, "service %u: cannot publish its event: %s", s->id, strerror(-rc));
	free(buf);
}

int lb_upsert(struct lb *lb, struct lb_svc **spec, uint16_t *id, char *err, size_t len)
{
	if (!lb->table_ready) {
		snprintf(err, len, "the lb module is not started");
		return -EAGAIN;
	}
	double t0 = now_s();
	uint16_t got = 0;
	int rc = lb_table_upsert(&lb->t, spec, &got, err, len);
	fibril_series_observe(lb->s_prog, now_s() - t0);
	count_op(lb, "upsert", rc);
	if (id)
		*id = got;
	if (rc == 0) {
		lb_origin_set(lb->origin, lb->t.svc[got]);
		lb_origin_flush(lb->origin);
		publish_service(lb, lb->t.svc[got], FIBRIL_LB_SERVICE_UPSERTED);
	}
	return rc;
}

int lb_delete(struct lb *lb, uint16_t id, char *err, size_t len)
{
	if (!lb->table_ready) {
		snprintf(err, len, "the lb module is not started");
		return -EAGAIN;
	}
	struct lb_svc *s = lb_table_get(&lb->t, id);
	struct lb_svc gone = {0};
	if (s) /* the frontend, for its record: the table frees s */
		gone = (struct lb_svc){.id = s->id, .addr = s->addr, .port = s->port,
				       .proto = s->proto, .type = s->type, .source = s->source};
	if (s)
		memcpy(gone.name, s->name, sizeof(gone.name));
	int rc = lb_table_delete(&lb->t, id, err, len);
	count_op(lb, "delete", rc);
	if (rc == 0) {
		lb_origin_deleted(lb->origin, &gone);
		lb_origin_flush(lb->origin);
		publish_service(lb, &gone, FIBRIL_LB_SERVICE_DELETED);
	}
	return rc;
}

struct lb_table *lb_table_of(struct lb *lb)
{
	return lb->table_ready ? &lb->t : NULL;
}

struct fibril_module *lb_module_of(struct lb *lb)
{
	return lb->m;
}

/* ---- API ------------------------------------------------------------------------------- */
static void reply(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

static int status_of(int rc)
{
	switch (rc) {
	case -EINVAL: return 400;
	case -ENOENT: return 404;
	case -EEXIST: return 409;
	case -EAGAIN: return 503;
	case -ENOSPC: return 507;
	default: return 500;
	}
}

static bool parse_id(const char *s, uint16_t *id)
{
	char *end;
	if (!s || !*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || !v || v > LB_SVC_ID_MAX)
		return false;
	*id = (uint16_t)v;
	return true;
}

static void get_services(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct lb *lb = ud;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	if (lb->table_ready)
		for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++)
			if (lb->t.svc[id])
				json_object_array_add(arr, lb_svc_to_json(lb->t.svc[id]));
	json_object_object_add(o, "services", arr);
	json_object_object_add(o, "backends", json_object_new_int64((int64_t)lb->t.nbe));
	json_object_object_add(o, "maglev-table-size", json_object_new_int64(lb->maglev_m));
	json_object_object_add(o, "socket-lb-hooks", json_object_new_int(lb->hooks_attached));
	json_object_object_add(o, "cgroup", json_object_new_string(lb->cgroup));
	json_object_object_add(o, "nodeport-devices", json_object_new_int(lb_tc_devices(lb->tc)));
	json_object_object_add(o, "restored", json_object_new_int64((int64_t)lb->restored));
	json_object_object_add(o, "k8s-skipped", json_object_new_int64((int64_t)lb_k8s_skipped(lb->k8s)));
	json_object_object_add(o, "restored-k8s", json_object_new_int64((int64_t)lb->restored_k8s));
	json_object_object_add(o, "restored-unknown-origin",
			       json_object_new_int64((int64_t)(lb->restored - lb->restored_known)));
	json_object_object_add(o, "k8s-synced", json_object_new_boolean(lb_k8s_synced(lb->k8s)));
	json_object_object_add(o, "k8s-stale-removed",
			       json_object_new_int64((int64_t)lb_k8s_stale_removed(lb->k8s)));
	reply(resp, 200, o);
}

static void get_service(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	uint16_t id;
	const char *s = fibril_req_param(req, "id");
	if (!parse_id(s, &id)) {
		fibril_resp_error(resp, 400, "service id '%s' is not a number 1-%u", s ? s : "",
				  LB_SVC_ID_MAX);
		return;
	}
	struct lb_svc *svc = lb->table_ready ? lb_table_get(&lb->t, id) : NULL;
	if (!svc) {
		fibril_resp_error(resp, 404, "service %u does not exist", id);
		return;
	}
	reply(resp, 200, lb_svc_to_json(svc));
}

static void put_service(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	struct lb_svc *spec = NULL;
	char err[512];
	int rc = lb_svc_parse(body ? body : "", body ? len : 0, &spec, err, sizeof(err));
	if (rc < 0) {
		count_op(lb, "upsert", rc);
		fibril_resp_error(resp, 400, "%s", err);
		return;
	}
	spec->source = LB_SRC_API;
	uint16_t id = 0;
	rc = lb_upsert(lb, &spec, &id, err, sizeof(err));
	lb_svc_free(spec);
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s", err);
		return;
	}
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	reply(resp, 200, lb_svc_to_json(lb->t.svc[id]));
}

static void delete_service(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	uint16_t id;
	const char *s = fibril_req_param(req, "id");
	char err[512];
	if (!parse_id(s, &id)) {
		fibril_resp_error(resp, 400, "service id '%s' is not a number 1-%u", s ? s : "",
				  LB_SVC_ID_MAX);
		return;
	}
	int rc = lb_delete(lb, id, err, sizeof(err));
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s", err);
		return;
	}
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "deleted", json_object_new_int(id));
	reply(resp, 200, o);
}

/* ---- metrics -------------------------------------------------------------------------- */
static void scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	struct lb *lb = ud;
	if (!lb->table_ready)
		return;
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0 || !lb->maps[M_METRICS])
		return;
	uint64_t *v = calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return;
	for (uint32_t k = 0; k < LB_M_COUNT; k++) {
		if (bpf_map_lookup_elem(fibril_map_fd(lb->maps[M_METRICS]), &k, v) < 0)
			continue;
		uint64_t sum = 0;
		for (int c = 0; c < ncpu; c++)
			sum += v[c];
		fibril_series_set(fibril_metric_labels(lb->m_dp, metric_names[k]), (double)sum);
	}
	free(v);
}

static struct fibril_metric *reg(struct lb *lb, enum fibril_metric_type type, const char *name,
				 const char *help, const char *const *labels)
{
	return fibril_metric_register(lb->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = type, .name = name, .help = help,
		.labels = labels});
}

static int register_metrics(struct lb *lb)
{
	static const char *const op_labels[] = {"op", "result", NULL};
	static const char *const ev_labels[] = {"event", NULL};
	static const double buckets[] = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 0.1};
	lb->m_services = reg(lb, FIBRIL_METRIC_GAUGE, "fibril_lb_services", "Services programmed",
			     NULL);
	lb->m_backends = reg(lb, FIBRIL_METRIC_GAUGE, "fibril_lb_backends",
			     "Distinct backends programmed", NULL);
	lb->m_ops = reg(lb, FIBRIL_METRIC_COUNTER, "fibril_lb_operations_total",
			"Service upserts and deletes by result", op_labels);
	lb->m_dp = reg(lb, FIBRIL_METRIC_COUNTER, "fibril_lb_socket_events_total",
		       "Socket-level LB events (lb_metrics summed over CPUs at scrape time)",
		       ev_labels);
	lb->m_prog_secs = fibril_metric_register(lb->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_HISTOGRAM,
		.name = "fibril_lb_program_duration_seconds",
		.help = "Time to program one service upsert into the maps",
		.buckets = buckets, .nbuckets = sizeof(buckets) / sizeof(buckets[0])});
	if (!lb->m_services || !lb->m_backends || !lb->m_ops || !lb->m_dp || !lb->m_prog_secs)
		return -EINVAL;
	lb->s_services = fibril_metric_series(lb->m_services, NULL);
	lb->s_backends = fibril_metric_series(lb->m_backends, NULL);
	lb->s_prog = fibril_metric_series(lb->m_prog_secs, NULL);
	return fibril_metrics_on_scrape(lb->m, scrape, lb);
}

/* ---- module ---------------------------------------------------------------------------- */
static int lb_init(struct fibril_module *m)
{
	struct lb *lb = calloc(1, sizeof(*lb));
	if (!lb) {
		fibril_module_set_error(m, "out of memory");
		return -ENOMEM;
	}
	modcommon_libbpf_log_off();
	lb->m = m;
	fibril_module_set_data(m, lb);
	int rc;
	if ((rc = fibril_api_route(m, "GET", "/v1/service", 0, get_services, lb)) ||
	    (rc = fibril_api_route(m, "PUT", "/v1/service", 0, put_service, lb)) ||
	    (rc = fibril_api_route(m, "GET", "/v1/service/{id}", 0, get_service, lb)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/service/{id}", 0, delete_service, lb))) {
		fibril_module_set_error(m, "cannot register the /v1/service routes: %s",
					strerror(-rc));
		return rc;
	}
	if ((rc = register_metrics(lb)) < 0 || (rc = lb_tc_init(m, &lb->tc)) < 0) {
		fibril_module_set_error(m, "cannot register the lb metrics: %s", strerror(-rc));
		return rc;
	}
	return lb_k8s_init(lb, &lb->k8s);
}

static int lb_start(struct fibril_module *m)
{
	struct lb *lb = fibril_module_data(m);
	char err[600] = "";
	uint8_t alg = LB_ALG_RANDOM;
	lb_algorithm_parse(fibril_config_string(m, "algorithm"), &alg);
	lb->maglev_m = (uint32_t)fibril_config_int(m, "maglev-table-size");
	snprintf(lb->cgroup, sizeof(lb->cgroup), "%s", fibril_config_string(m, "cgroup"));
	int rc = lb_table_init(&lb->t, (uint32_t)fibril_config_int(m, "backend-map-max"),
			       lb->maglev_m, alg);
	if (rc < 0) {
		fibril_module_set_error(m, "out of memory");
		return rc;
	}
	lb->table_ready = true;
	if ((rc = open_maps(lb, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	/* restore before anything is programmed: same IDs, same slots */
	double t0 = now_s();
	rc = lb_table_restore(&lb->t, &lb->restore_skipped, err, sizeof(err));
	if (rc < 0) {
		fibril_module_set_error(m, "cannot restore the services from the maps: %s",
					strerror(-rc));
		return rc;
	}
	lb->restored = (size_t)rc;
	if (lb->restore_skipped)
		fibril_warn(m, "restore: %zu services skipped (first: %s)", lb->restore_skipped, err);
	if (fibril_map_origin(lb->maps[M_MAGLEV]) == FIBRIL_MAP_RECREATED) {
		/* a new table size: rebuild the restored services' tables */
		for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++) {
			struct lb_svc *s = lb->t.svc[id];
			if (!s || s->algorithm != LB_ALG_MAGLEV)
				continue;
			struct lb_svc same = *s;
			if (lb_maps_program(&lb->t, s, &same, err, sizeof(err)) < 0)
				fibril_warn(m, "service %u: %s", id, err);
		}
	}
	/* where each came from and its name: the journal beside the pins */
	if ((rc = lb_origin_open(m, &lb->origin, err, sizeof(err))) < 0)
		fibril_warn(m, "service origins and names are not kept across restarts: %s", err);
	lb->restored_known = lb_origin_apply(lb->origin, &lb->t, &lb->restored_k8s);
	fibril_info(m, "restored %zu services (%zu from Kubernetes, %zu of unknown origin) and "
		       "%zu backends from the maps in %.1f ms", lb->restored, lb->restored_k8s,
		    lb->restored - lb->restored_known, lb->t.nbe, (now_s() - t0) * 1e3);
	for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++)
		if (lb->t.svc[id])
			publish_service(lb, lb->t.svc[id], FIBRIL_LB_SERVICE_UPSERTED);
	if ((rc = load_programs(lb, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	bool enable = fibril_config_bool(m, "socket-lb");
	if ((rc = attach_hooks(lb, enable, err, sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	if ((rc = lb_tc_start(lb->tc, bpf_program__fd(lb->skel->progs.fibril_lb_from_netdev),
			      bpf_program__fd(lb->skel->progs.fibril_lb_to_netdev),
			      fibril_map_fd(lb->maps[M_CT]), fibril_map_fd(lb->maps[M_DEVICES]), err,
			      sizeof(err))) < 0) {
		fibril_module_set_error(m, "%s", err);
		return rc;
	}
	if (enable)
		fibril_health_report(m, "socket-lb", FIBRIL_HEALTH_OK, "%d hooks on %s",
				     lb->hooks_attached, lb->cgroup);
	else
		fibril_health_report(m, "socket-lb", FIBRIL_HEALTH_OK, "off ([lb] socket-lb)");
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	return lb_k8s_start(lb->k8s, fibril_config_string(m, "node-addresses"));
}

static void lb_stop(struct fibril_module *m)
{
	struct lb *lb = fibril_module_data(m);
	lb_k8s_stop(lb->k8s);
	lb_tc_stop(lb->tc);
	lb_origin_close(lb->origin);
	lb->origin = NULL;
	/* the links stay pinned and hold the programs: sockets keep being
	 * balanced while the agent is down */
	fibril_lb__destroy(lb->skel);
	lb->skel = NULL;
	if (lb->table_ready)
		lb_table_free(&lb->t);
	lb->table_ready = false;
}

static void lb_fini(struct fibril_module *m)
{
	struct lb *lb = fibril_module_data(m);
	if (!lb)
		return;
	lb_k8s_free(lb->k8s);
	lb_tc_free(lb->tc);
	lb_origin_close(lb->origin);
	fibril_lb__destroy(lb->skel);
	if (lb->table_ready)
		lb_table_free(&lb->t);
	free(lb);
	fibril_module_set_data(m, NULL);
}

static int lb_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct lb *lb = fibril_module_data(m);
	return snprintf(buf, len, "%zu services, %zu backends, %d socket hooks", lb->t.nsvc,
			lb->t.nbe, lb->hooks_attached);
}

FIBRIL_MODULE(.name = "lb", .version = "1.0.0",
	      .description = "service load balancing without kube-proxy: socket-level LB "
			     "(cgroup hooks), Maglev, stable service IDs",
	      .provides = FIBRIL_LIST("lb"), .wants = FIBRIL_LIST(FIBRIL_K8S_CAPABILITY),
	      .config_keys = lb_config_keys, .init = lb_init, .start = lb_start, .stop = lb_stop,
	      .fini = lb_fini, .summary = lb_summary);
