/* modules/datapath/datapath.h - the datapath module's internals shared by
 * its files: the module state, the pinned maps, the host device and
 * routes (libnl), the tc program (libbpf skeleton), the conntrack GC and
 * the events reader. Map layouts are in bpf/fibril_dp.h. */
#ifndef FIBRIL_DATAPATH_INT_H
#define FIBRIL_DATAPATH_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include <fibril/fibril.h>

#include "fibril_dp.h"

#define DP_ERR_LEN 256
#define DP_PROG_WAITERS 16 /* API answers waiting for the programs' load; more wait on the loop */
#define DP_EVENT_RING 256 /* recent events kept for GET /v1/datapath/events */
#define DP_MAX_POOLS 4
#define DP_ROUTE_PROTO 0xf1 /* rtm_protocol of the routes this module adds */

enum dp_map_id {
	DPM_ENDPOINTS,
	DPM_IPCACHE,
	DPM_CONNTRACK, /* TCP flows */
	DPM_METRICS,
	DPM_EVENTS,
	DPM_CONFIG,
	DPM_CT_ANY,    /* every other flow */
	DPM_FRAGS,
	DPM_EVLIMIT,
	DPM_POLICY,    /* network policy entries */
	DPM_POLICY_EP, /* per-endpoint enforcement */
	DPM_FRAGS_OUT, /* fragments from outside */
	DPM_CT_COUNT,  /* conntrack entries charged to each endpoint */
	DPM_NAT,       /* masquerading: the flows' mappings */
	DPM_NAT_DEVS,  /* the external devices' addresses */
	DPM_NOMASQ,    /* destinations never masqueraded */
	DPM_NAT_COUNT, /* masqueraded flows charged to each endpoint */
	DPM_EGRESS,    /* egress gateway: (identity, destination) -> gateway */
	DPM_COUNT
};

/* One endpoint the datapath has in place. */
struct dp_ep {
	struct fibril_datapath_endpoint ep;
	char error[DP_ERR_LEN]; /* last failed step, "" when in place */
	struct dp_ep *next;
	bool restored; /* found in dp_endpoints at the start, not upserted since */
	bool recheck;  /* adopted as found: filters and routes re-applied soon (dp_recheck.c) */
};

struct dp_prog;     /* dp_prog.c */
struct dp_prog_job; /* dp_prog.c */
struct nl_sock;
struct dp_ring; /* dp_gc.c: the dp_events reader */

struct datapath {
	struct fibril_module *m;
	/* who numbered an identity, as the endpoint module says (set_identity_scope) */
	const char *(*identity_scope)(void *ud, uint32_t identity);
	void *identity_scope_ud;
	/* config */
	char host_dev[16];
	char host_peer[16];
	char host_dev_type[16]; /* auto, dummy, veth */
	uint64_t ct_tcp_ms, ct_closing_ms, ct_other_ms, ct_syn_ms, gc_interval_ms;
	uint32_t ct_max_tcp, ct_max_other, ct_refresh_s;
	uint32_t ct_endpoint_share, ct_outside_share; /* percent of each conntrack map */
	uint32_t events_bytes; /* dp_events ring buffer size ([datapath] events-ring-bytes) */
	int64_t events_mono_ns, events_real_ns; /* the clocks at the batch being read */
	struct dp_event events_pending; /* read, refused by a full bus: published first next time */
	bool events_has_pending;
	unsigned events_read; /* records read by this dp_events_consume (DP_EVENTS_BATCH) */
	uint32_t event_rate, event_burst;
	bool trace;
	bool policy_verdicts; /* [datapath] policy-verdict-events */
	int netdevs;           /* devices fibril_from_netdev is attached to */
	bool host_routing_bpf; /* [datapath] host-routing = bpf and the kernel has
				* bpf_fib_lookup + bpf_redirect_neigh */
	/* masquerading (dp_nat.c) */
	bool masquerade;        /* [datapath] masquerade */
	bool egw_gateway;       /* dp_egress gives this node an egress IP
				 * (DP_CFG_F_EGW_GATEWAY) */
	uint16_t nat_port_min, nat_port_max; /* [datapath] masquerade-port-min / -max */
	uint32_t nat_ep_max;    /* [datapath] masquerade-endpoint-max */
	char nomasq_cidrs[1024]; /* [datapath] non-masquerade-cidrs as given */
	/* [datapath] ip-masq-agent-config (dp_masqcfg.c) */
	char masqcfg_path[4096];
	struct dp_masqcfg *masqcfg; /* the last good file's, NULL: none */
	struct dp_masqcfg_sig {
		uint64_t dev, ino;
		int64_t size, mtime_ns, ctime_ns;
	} masqcfg_sig;              /* the file as last seen */
	struct fibril_timer *masqcfg_timer;
	char masqcfg_error[320];    /* why the last read was refused, "" if good */
	uint64_t masqcfg_loads, masqcfg_errors;
	int nat_devs;           /* devices fibril_to_netdev is attached to */
	size_t gc_last_nat;     /* dp_nat entries the last GC pass kept */
	/* ipam, for the gateways */
	const struct fibril_ipam_ops *ipam;
	void *ipam_ctx;
	/* maps, program, netlink */
	struct fibril_map *maps[DPM_COUNT];
	struct dp_prog *prog;
	struct dp_prog_job *prog_job; /* the load running on the worker pool (dp_prog.c) */
	char prog_error[DP_ERR_LEN];  /* why no program is loaded, "" when it is */
	double prog_load_ms;          /* the last load, open to verified */
	bool stopping;                /* in stop: what waited for the load is not done */
	bool prog_reused;             /* the programs were adopted from their pins */
	bool start_pending;           /* start returned FIBRIL_START_PENDING: the load's end finishes it */
	/* GET /v1/datapath requests deferred until the load is done (dp_api.c) */
	struct fibril_response *prog_waiters[DP_PROG_WAITERS];
	size_t n_prog_waiters;
	struct nl_sock *nl;
	bool ipcache_no_batch; /* the kernel's LPM trie refused BPF_MAP_UPDATE_BATCH */
	struct dp_ipc_table *ipc; /* the ipcache's owners (dp_ipc_owner.c) */
	/* the node: the host device and the gateways on it */
	struct fibril_datapath_node node;
	bool node_ready;
	char node_error[DP_ERR_LEN];
	struct fibril_timer *node_timer;
	/* conntrack GC */
	struct fibril_timer *gc_timer;
	bool gc_busy; /* a pass is running on the worker pool */
	bool gc_again; /* an endpoint was removed while it ran: one more pass */
	uint64_t gc_runs, gc_removed, gc_last_ms;
	uint64_t gc_last_us, gc_last_syscalls; /* the last pass: time, bpf() calls */
	size_t gc_last_entries, gc_last_tcp, gc_last_other;
	/* events */
	struct dp_ring *rb;
	struct fibril_io *rb_io;
	struct fibril_timer *rb_timer; /* reads what no wakeup announced */
	struct dp_event ring[DP_EVENT_RING];
	unsigned ring_head, ring_count;
	uint64_t events_drop, events_trace, events_bad, events_policy;
	/* metrics (dp_api.c): series updated on the loop, the rest read at scrape */
	struct fibril_metric *m_packets, *m_bytes, *m_ct_entries, *m_endpoints;
	struct fibril_series *m_events[4]; /* drop, trace, malformed, policy-verdict */
	struct fibril_series *m_gc_runs, *m_gc_removed, *m_gc_seconds;
	struct fibril_series *m_events_lost; /* not published: the bus was full */
	/* fibril_policy_verdicts_total by [direction egress/ingress][match] */
	struct fibril_series *m_verdicts[2][4];
	uint64_t events_unpublished;         /* ... since the last one published */
	/* events the programs did not send (rate limit, ring full): the
	 * counters at start and as last published (dp_gc.c) */
	struct fibril_timer *unsent_timer;
	uint64_t unsent_base[2], unsent_sent[2]; /* [suppressed, ring lost] */
	bool unsent_base_set; /* the maps were there to read the base */
	/* tunnel mode (set up by a consumer through tunnel_setup) */
	uint32_t tunnel_ifindex;        /* in dp_config; 0: native */
	char tunnel_dev[16];
	uint16_t tunnel_port;
	uint64_t tunnel_created, tunnel_adopted, tunnel_replaced;
	char tunnel_error[DP_ERR_LEN];
	/* endpoints in place */
	struct dp_ep *eps;
	size_t neps;
	struct dp_ep **ep_by_id; /* [65536], calloc'd (pages touched only for IDs in use) */
	/* restored endpoints adopted as found, re-applied in slices (dp_recheck.c) */
	struct fibril_timer *recheck_timer;
	size_t recheck_pending, rechecked, recheck_failed;
	bool recheck_started;
	double recheck_t0;
	int ioctl_fd; /* dp_ifname's socket, 0: not open */
};

/* ---- masquerading (dp_nat.c) ---- */
/* One CIDR ("10.0.0.0/8", "fd00::/8", a bare address) into a dp_nomasq
 * key; 0 or -EINVAL with why */
int dp_nat_cidr_key(const char *text, struct dp_ipcache_key *k, char *why, size_t len);
/* the ip-masq-agent's config as read from [datapath] ip-masq-agent-config */
#define DP_MASQCFG_MAX_CIDRS 1024
struct dp_masqcfg {
	bool masq_link_local, masq_link_local6; /* masqLinkLocal, masqLinkLocalIPv6 */
	size_t ncidrs;
	struct dp_ipcache_key cidrs[DP_MASQCFG_MAX_CIDRS]; /* nonMasqueradeCIDRs */
};
/* text (YAML or JSON) into cfg; -EINVAL with why naming the field */
int dp_masqcfg_parse(const char *text, size_t size, struct dp_masqcfg *cfg, char *why, size_t len);
/* read the file (if set) and check it for changes every second; stop */
void dp_masqcfg_start(struct datapath *dp);
void dp_masqcfg_stop(struct datapath *dp);
/* dp_nomasq from the config: link-local (unless the ip-masq-agent file
 * says masqLinkLocal / masqLinkLocalIPv6), [datapath] non-masquerade-cidrs
 * (checked by the config key's check) and the file's nonMasqueradeCIDRs;
 * the new set is written before what it dropped is removed */
int dp_nat_nomasq_write(struct datapath *dp, char *err, size_t len);
/* dp_nat_devs: ifindex's addresses (the first IPv4 and global IPv6 of the
 * device), or its entry removed (attach false) */
int dp_nat_dev_write(struct datapath *dp, int ifindex, const char *ifname, bool attach);
/* fibril map dump's decoders of dp_nat, dp_nat_devs, dp_nomasq */
int dp_nat_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
	       void *ud);
int dp_nat_devs_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		    void *ud);
int dp_nomasq_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud);
/* the config key's check: a list of CIDRs separated by commas or spaces */
int dp_nat_check_cidrs(const char *value, char *why, size_t len);

/* ---- util (dp_util.c) ---- */
void dp_seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void dp_fmt_mac(const uint8_t *mac, char *out, size_t len);
/* family DP_FAMILY_IPV4/6, addr 16 bytes (IPv4 in the first 4) */
void dp_fmt_addr(int family, const uint8_t *addr, char *out, size_t len);
uint64_t dp_mono_ns(void);
void dp_vg_quiet_begin(void);
void dp_vg_quiet_end(void);
/* bpf_map_get_next_key() without valgrind's false reports */
int dp_next_key(int fd, const void *key, void *next);

/* ---- maps (dp_maps.c) ---- */
int dp_maps_open(struct datapath *dp, char *err, size_t len);
int dp_config_write(struct datapath *dp, char *err, size_t len);
/* a previous run's dp_config: its tunnel device into dp->tunnel_ifindex
 * (0: none) and dp->tunnel_port, whether this node was an egress gateway
 * into dp->egw_gateway */
void dp_config_restore(struct datapath *dp);
/* the map's key and value of one ipcache entry (0 or -EINVAL with err) */
int dp_ipcache_entry_kv(const struct fibril_datapath_ipcache_entry *e, struct dp_ipcache_key *k,
			struct dp_ipcache_value *v, char *err, size_t len);
int dp_ipcache_key_of(int family, const void *addr, unsigned plen, struct dp_ipcache_key *k,
		      char *err, size_t len);
/* the map itself, as dp_ipc_owner.c decides: n entries at once (*done
 * written, in order), one, or one deleted (absent is fine) */
int dp_ipcache_write_batch(struct datapath *dp, const struct dp_ipcache_key *keys,
			   const struct dp_ipcache_value *values, size_t n, size_t *done, char *err,
			   size_t len);
int dp_ipcache_write(struct datapath *dp, const struct dp_ipcache_key *k,
		     const struct dp_ipcache_value *v, char *err, size_t len);
int dp_ipcache_delete(struct datapath *dp, const struct dp_ipcache_key *k, char *err, size_t len);

/* ---- the ipcache's owners (dp_ipc_owner.c) ----
 * Per prefix one claim per source, the highest written to the map. The
 * sources are enum fibril_datapath_ipcache_source (UNSPEC lowest) and,
 * above them all, the datapath's own (world /0). */
#define DP_IPC_SRC_DATAPATH 5
#define DP_IPC_SRC_COUNT 6
struct dp_ipc_prefix;
struct dp_ipc_table {
	struct dp_ipc_prefix **buckets; /* by key hash; nbuckets a power of two */
	size_t nbuckets, count;
	uint64_t writes, writes_skipped, deletes; /* map writes made / not needed */
};
/* e's claim (e->source; sz already the full struct's) */
int dp_ipc_claim(struct datapath *dp, const struct fibril_datapath_ipcache_entry *e, char *err,
		 size_t len);
int dp_ipc_claim_tunnel(struct datapath *dp, unsigned source, int family, const void *addr,
			unsigned plen, uint32_t identity, int tunnel_family, const void *tunnel_ip,
			char *err, size_t len);
/* n full entries (stride bytes apart): every one checked first (a bad one
 * refuses the batch), then one map batch of the writes needed; *done: how
 * many entries are in place, in order */
int dp_ipc_claim_batch(struct datapath *dp, const struct fibril_datapath_ipcache_entry *entries,
		       size_t n, size_t stride, size_t *done, char *err, size_t len);
int dp_ipc_unclaim(struct datapath *dp, unsigned source, int family, const void *addr,
		   unsigned plen, char *err, size_t len);
/* the map's entry for the prefix (a previous run's), claimed by source as
 * it is, without a write; nothing when the map has none */
void dp_ipc_adopt(struct datapath *dp, unsigned source, int family, const void *addr,
		  unsigned plen);
void dp_ipc_free(struct datapath *dp);
/* the ops of <fibril/datapath.h> that write the ipcache */
int dp_op_ipcache_upsert(void *ctx, int family, const void *addr, unsigned prefixlen,
			 uint32_t identity, char *err, size_t errlen);
int dp_op_ipcache_remove(void *ctx, int family, const void *addr, unsigned prefixlen, char *err,
			 size_t errlen);
int dp_op_ipcache_upsert_entry(void *ctx, const struct fibril_datapath_ipcache_entry *e, char *err,
			       size_t errlen);
int dp_op_ipcache_remove_entry(void *ctx, const struct fibril_datapath_ipcache_entry *e, char *err,
			       size_t errlen);
/* the egress gateway (dp_egress.c): the op and `map dump dp_egress` */
int dp_op_egress_sync(void *ctx, const struct fibril_datapath_egress_entry *entries, size_t n,
		      char *err, size_t errlen);
int dp_op_egress_list(void *ctx, int (*cb)(const struct fibril_datapath_egress_entry *e, void *ud),
		      void *ud);
int dp_egress_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud);
int dp_op_ipcache_upsert_batch(void *ctx, const struct fibril_datapath_ipcache_entry *entries,
			       size_t n, size_t *done, char *err, size_t errlen);
int dp_endpoint_put(struct datapath *dp, const struct fibril_datapath_endpoint *ep, int family,
		    const void *addr, char *err, size_t len);
/* Deletes the entry only if it belongs to endpoint id; 0 also when absent. */
int dp_endpoint_del(struct datapath *dp, uint16_t id, int family, const void *addr);
/* The endpoint ID that holds addr in dp_endpoints, or 0. */
uint16_t dp_endpoint_owner(struct datapath *dp, int family, const void *addr);
/* dp->eps and its index by ID: find, add one made (calloc'd), forget
 * (free) one, free them all. */
struct dp_ep *dp_ep_find(struct datapath *dp, uint16_t id);
int dp_ep_add(struct datapath *dp, struct dp_ep *e);
void dp_ep_forget(struct datapath *dp, uint16_t id);
/* health component endpoints from the endpoints' errors (datapath.c) */
void dp_eps_health(struct datapath *dp);
/* ---- a restart's endpoints (dp_recheck.c) ---- */
/* endpoint_upsert of a restored endpoint as the map holds it, with the
 * programs adopted from their pins: its ipcache claims now, its filters
 * and routes re-applied soon on the loop. 1 adopted (known updated), 0 not
 * such an endpoint (the full upsert follows). */
int dp_recheck_adopt(struct datapath *dp, struct dp_ep *known,
		     const struct fibril_datapath_endpoint *ep, const char *ifname, char *err,
		     size_t len);
void dp_recheck_forget(struct datapath *dp, struct dp_ep *e); /* before it is freed */
void dp_recheck_stop(struct datapath *dp);
/* ---- the underlay's addresses (dp_addrs.c) ---- */
struct mod_node_addr; /* node_addrs.h */
/* Every IPv4 and non-link-local IPv6 address of the node with its
 * device's name and flags, in the kernel's order, from one address dump
 * (no link dump): *out malloc'd (free() it), *n entries. 0 or -errno. */
int dp_underlay_addrs(struct mod_node_addr **out, size_t *n);
/* if_indextoname over one socket kept open (dp->ioctl_fd, 0: none yet);
 * name is IF_NAMESIZE. dp_ifname_close in the release. */
char *dp_ifname(struct datapath *dp, int ifindex, char *name);
void dp_ifname_close(struct datapath *dp);
void dp_eps_free(struct datapath *dp);
/* Rebuild dp->eps from dp_endpoints (a restart). */
void dp_endpoints_restore(struct datapath *dp);
/* Every (direction, reason) slot of dp_metrics summed over the CPUs, in
 * sums[DP_METRICS_INDEX(reason, direction)] (DP_METRICS_MAX of them). */
int dp_metrics_snapshot(struct datapath *dp, struct dp_metrics_value *sums);
/* Sum of one metrics slot over the CPUs. */
int dp_metrics_read(struct datapath *dp, uint8_t reason, uint8_t dir,
		    struct dp_metrics_value *out);
const char *dp_reason_name(unsigned reason);
/* "from-endpoint", "to-endpoint" (enum dp_direction), "?" otherwise */
const char *dp_direction_name(unsigned dir);
/* "host", "world", "reserved", "cidr", or the scope of an allocated identity
 * as the endpoint module says ("local", "cluster:kvstore", "cluster:crd";
 * "allocated" when no module told, set_identity_scope) */
const char *dp_identity_name(const struct datapath *dp, uint32_t identity);

/* ---- policy (dp_policy.c) ---- */
int dp_policy_put(struct datapath *dp, const struct fibril_datapath_policy_entry *e, char *err,
		  size_t len);
int dp_policy_del(struct datapath *dp, const struct fibril_datapath_policy_entry *e, char *err,
		  size_t len);
int dp_policy_enforce(struct datapath *dp, uint16_t ep_id, bool ingress, bool egress,
		      uint32_t revision, char *err, size_t len);
int dp_policy_list(struct datapath *dp,
		   int (*cb)(const struct fibril_datapath_policy_entry *e, void *ud), void *ud);
/* The map dump texts of dp_policy and dp_policy_ep. */
int dp_policy_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo, size_t vl,
		  void *ud);
int dp_policy_ep_fmt(const void *key, const void *value, char *ko, size_t kl, char *vo,
		     size_t vl, void *ud);

/* ---- programs (dp_prog.c) ---- */
/* Where on the host veth: ingress runs fibril_from_endpoint (what the pod
 * sends), egress fibril_to_endpoint (what the stack delivers to the pod). */
enum dp_hook { DP_HOOK_INGRESS, DP_HOOK_EGRESS, DP_HOOK_COUNT };
int dp_prog_load(struct datapath *dp, char *err, size_t len);
/* The same load on the worker pool (start goes on meanwhile); whatever
 * needs the programs waits for it in dp_prog_wait(), which is 0 once they
 * are loaded, else -ENOENT with why. */
int dp_prog_load_start(struct datapath *dp, char *err, size_t len);
int dp_prog_wait(struct datapath *dp, char *err, size_t len);
/* datapath.c: what waited for the programs of a load on the worker (not
 * called in stop) */
void dp_programs_loaded(struct datapath *dp);
/* dp_api.c: answer the requests that waited for the load (any outcome) */
void dp_api_programs_loaded(struct datapath *dp);
void dp_prog_unload(struct datapath *dp);
/* The loaded instance's program id for that hook (after the load: it
 * waits for it), 0 when not loaded. */
int dp_prog_id(struct datapath *dp, enum dp_hook h);
/* Both filters (ingress, then egress), each replaced atomically. */
int dp_prog_attach(struct datapath *dp, int ifindex, char *err, size_t len);
/* Both filters; 0 also when the device or a filter is already gone. */
int dp_prog_detach(struct datapath *dp, int ifindex, char *err, size_t len);
/* The overlay program (fibril_from_overlay) on the VXLAN device's ingress. */
int dp_prog_attach_overlay(struct datapath *dp, int ifindex, char *err, size_t len);
int dp_prog_overlay_id(struct datapath *dp);
/* host-routing: attach fibril_from_netdev to the underlay devices' ingress
 * (attach) or detach it where it is (!attach); *count: devices done */
int dp_prog_netdevs_sync(struct datapath *dp, bool attach, int *count, char *err, size_t len);
/* The id of the program attached by us to ifindex at h, 0 none, <0 error. */
int dp_prog_attached_id(int ifindex, enum dp_hook h);

/* ---- the programs' pins (dp_pins.c) ---- */
struct dp_pin_def {
	const char *suffix, *name; /* the pin's suffix, the program's name */
};
extern const struct dp_pin_def dp_pin_ingress, dp_pin_egress, dp_pin_overlay, dp_pin_netdev,
	dp_pin_to_netdev;
/* The pin of d for the object of `hash` when it fits the maps (map_fds by
 * enum dp_map_id): its fd; else -1. */
int dp_pin_adopt(uint64_t hash, const struct dp_pin_def *d, const int *map_fds);
/* Pin fd as d (replacing it); a failure is logged. */
void dp_pin_one(struct datapath *dp, uint64_t hash, const struct dp_pin_def *d, int fd);
/* Remove the program pins of every other object (an older agent's). */
void dp_pins_drop_others(uint64_t hash);

/* ---- netlink (dp_netlink.c) ---- */
int dp_nl_open(struct datapath *dp, char *err, size_t len);
void dp_nl_close(struct datapath *dp);
/* Create/adopt the host device and put the gateways on it; fills dp->node. */
int dp_host_device_setup(struct datapath *dp, const struct fibril_ipam_pool *pools, size_t n,
			 char *err, size_t len);
/* The /32 (/128) route of addr to ifindex (src: the gateway of the family). */
int dp_route_add(struct datapath *dp, int family, const void *addr, int ifindex, char *err,
		 size_t len);
/* 0 also when it is already gone. */
int dp_route_del(struct datapath *dp, int family, const void *addr, int ifindex, char *err,
		 size_t len);

/* Create or adopt the VXLAN device (external / collect-metadata, UDP
 * port dp->tunnel_port) named dp->tunnel_dev, up; *ifindex set. *how:
 * 0 created, 1 adopted (there with the same settings), 2 replaced. */
int dp_tunnel_device_setup(struct datapath *dp, int *ifindex, int *how, char *err, size_t len);

/* ---- conntrack GC and events (dp_gc.c) ---- */
int dp_gc_start(struct datapath *dp);
/* Publish the counts of events the programs did not send (rate limit,
 * ring full) on FIBRIL_DATAPATH_TOPIC_EVENTS_UNSENT as they change. */
int dp_unsent_start(struct datapath *dp);
/* Start one GC pass on the worker pool (none if one is running); its
 * figures land in dp on the loop when it is done. 0, or -EBUSY. */
int dp_gc_kick(struct datapath *dp);
/* Endpoint id was removed: its dp_ct_count slot is zeroed and its gen
 * bumped (dp_ctgc_release_slot), and a GC pass (another one after the
 * running one) takes out the entries made for it or charged to it. */
void dp_gc_endpoint_removed(struct datapath *dp, uint16_t id);
int dp_events_start(struct datapath *dp, char *err, size_t len);
void dp_events_stop(struct datapath *dp);
void dp_events_consume(struct datapath *dp); /* read what waits in dp_events, a batch at most */
void dp_events_drain(struct datapath *dp);   /* ... all of it (an answer that shows the last events) */

/* ---- API (dp_api.c) ---- */
/* The routes and the metrics (fibril_datapath_* in /metrics). */
int dp_api_register(struct datapath *dp);

#endif
