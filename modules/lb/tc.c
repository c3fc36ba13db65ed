/* modules/lb/tc.c - the lb module's per-packet side: the tc programs
 * (bpf/fibril_lb.bpf.c fibril_lb_from_netdev / fibril_lb_to_netdev) on
 * [lb] nodeport-devices (clsact ingress and egress, fixed handle, replaced
 * in place at a restart) and, egress only, on the tunnel device
 * (FIBRIL_DATAPATH_TUNNEL_DEVICE) when it exists, so that a flow sent to a
 * backend on another node through the tunnel is SNATed there; lb_devices
 * (ifindex -> flags and the device's address per family, the SNAT source;
 * none with [lb] nodeport-snat off); a check every second re-attaches to a
 * device that appeared or was recreated (or lost our filter) and follows
 * address changes; and
 * lb_ct's GC: a timer every [lb] ct-gc-interval has the worker pool walk
 * lb_ct with batch operations (ctgc.c) and remove the flows idle past their
 * timeout. Metrics: fibril_lb_ct_gc_runs_total, fibril_lb_ct_gc_removed_total,
 * fibril_lb_ct_entries. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <fibril/datapath.h>
#include <fibril/fibril.h>

#include "libbpf_log.h"
#include "lb_tc.h"

#define LB_TC_HANDLE 0xf1b2
#define LB_TC_PRIORITY 1
#define LB_TC_DEV_MAX 16
#define LB_TC_CHECK_MS 1000

struct lb_tc_dev {
	char name[IF_NAMESIZE];
	int ifindex;           /* 0: not there (yet) */
	bool tunnel;
	struct lb_device val;  /* as written to lb_devices */
};

struct lb_tc {
	struct fibril_module *m;
	int prog_from, prog_to, ct_fd, dev_fd;
	bool snat, started;
	struct lb_tc_dev dev[LB_TC_DEV_MAX + 1]; /* + the tunnel device */
	int ndev;
	struct fibril_timer *check_timer, *gc_timer;
	bool gc_busy;
	struct lb_ctgc_params params;
	uint64_t gc_runs, gc_removed, gc_entries;
	struct fibril_metric *m_runs, *m_removed, *m_entries;
	struct fibril_series *s_runs, *s_removed, *s_entries;
};

static struct fibril_metric *reg(struct lb_tc *t, enum fibril_metric_type type, const char *name,
				 const char *help)
{
	return fibril_metric_register(t->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = type, .name = name, .help = help});
}

int lb_tc_init(struct fibril_module *m, struct lb_tc **out)
{
	struct lb_tc *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->m = m;
	t->ct_fd = t->dev_fd = t->prog_from = t->prog_to = -1;
	t->m_runs = reg(t, FIBRIL_METRIC_COUNTER, "fibril_lb_ct_gc_runs_total",
			"Passes of the lb_ct garbage collector");
	t->m_removed = reg(t, FIBRIL_METRIC_COUNTER, "fibril_lb_ct_gc_removed_total",
			   "lb_ct entries (per-packet NAT flows) removed idle past their timeout");
	t->m_entries = reg(t, FIBRIL_METRIC_GAUGE, "fibril_lb_ct_entries",
			   "lb_ct entries left after the last GC pass");
	if (!t->m_runs || !t->m_removed || !t->m_entries) {
		free(t);
		return -EINVAL;
	}
	t->s_runs = fibril_metric_series(t->m_runs, NULL);
	t->s_removed = fibril_metric_series(t->m_removed, NULL);
	t->s_entries = fibril_metric_series(t->m_entries, NULL);
	*out = t;
	return 0;
}

/* ---- devices ------------------------------------------------------------------------ */

/* The device's first IPv4 and first global IPv6 address (the SNAT source). */
static void device_addrs(const char *name, struct lb_device *d)
{
	struct ifaddrs *ifa = NULL;
	memset(d->addr4, 0, sizeof(d->addr4));
	memset(d->addr6, 0, sizeof(d->addr6));
	if (getifaddrs(&ifa) < 0)
		return;
	bool have4 = false, have6 = false;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || strcmp(i->ifa_name, name))
			continue;
		if (i->ifa_addr->sa_family == AF_INET && !have4) {
			d->addr4[10] = d->addr4[11] = 0xff;
			memcpy(d->addr4 + 12, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
			have4 = true;
		} else if (i->ifa_addr->sa_family == AF_INET6 && !have6) {
			const struct in6_addr *a = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
			if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_LOOPBACK(a))
				continue;
			memcpy(d->addr6, a, 16);
			have6 = true;
		}
	}
	freeifaddrs(ifa);
}

static int attach(struct lb_tc *t, struct lb_tc_dev *d, char *err, size_t len)
{
	for (int h = d->tunnel ? 1 : 0; h < 2; h++) {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = d->ifindex,
			    .attach_point = h ? BPF_TC_EGRESS : BPF_TC_INGRESS);
		libbpf_print_fn_t old = modcommon_libbpf_quiet_begin();
		int rc = bpf_tc_hook_create(&hook);
		modcommon_libbpf_log_end(old);
		if (rc < 0 && rc != -EEXIST) {
			snprintf(err, len, "cannot add the clsact qdisc to %.64s: %s", d->name,
				 strerror(-rc));
			return rc;
		}
		LIBBPF_OPTS(bpf_tc_opts, opts, .handle = LB_TC_HANDLE, .priority = LB_TC_PRIORITY,
			    .flags = BPF_TC_F_REPLACE, .prog_fd = h ? t->prog_to : t->prog_from);
		if ((rc = bpf_tc_attach(&hook, &opts)) < 0) {
			snprintf(err, len, "cannot attach the NodePort program to %.64s %s: %s", d->name,
				 h ? "egress" : "ingress", strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/* Is our egress program still on the device (a qdisc removed and added
 * back by someone else takes our filters with it)? */
static bool attached(const struct lb_tc_dev *d, int ifindex)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = LB_TC_HANDLE, .priority = LB_TC_PRIORITY);
	(void)d;
	libbpf_print_fn_t old = modcommon_libbpf_quiet_begin();
	int rc = bpf_tc_query(&hook, &opts);
	modcommon_libbpf_log_end(old);
	return rc == 0; /* ENOENT: no such filter; EINVAL: no clsact any more */
}

/* Bring every device's attachment and lb_devices entry up to date. With
 * strict, a nodeport device missing or an attach failing is an error. */
static int devices_sync(struct lb_tc *t, bool strict, char *err, size_t len)
{
	for (int i = 0; i < t->ndev; i++) {
		struct lb_tc_dev *d = &t->dev[i];
		int ifindex = (int)if_nametoindex(d->name);
		if (!ifindex) {
			if (strict && !d->tunnel) {
				snprintf(err, len, "[lb] nodeport-devices: no device '%.64s' here", d->name);
				return -ENODEV;
			}
			if (d->ifindex) {
				uint32_t k = (uint32_t)d->ifindex;
				bpf_map_delete_elem(t->dev_fd, &k);
				d->ifindex = 0;
			}
			continue;
		}
		struct lb_device v = {.flags = d->tunnel ? LB_DEV_TUNNEL : LB_DEV_NODEPORT};
		if (t->snat && !d->tunnel)
			device_addrs(d->name, &v);
		if (ifindex != d->ifindex || !attached(d, ifindex)) {
			char why[256];
			int old = d->ifindex;
			d->ifindex = ifindex;
			int rc = attach(t, d, why, sizeof(why));
			if (rc < 0) {
				d->ifindex = old;
				if (strict) {
					snprintf(err, len, "%s", why);
					return rc;
				}
				fibril_warn(t->m, "%s", why);
				continue;
			}
			if (old) {
				uint32_t k = (uint32_t)old;
				bpf_map_delete_elem(t->dev_fd, &k);
			}
			if (!strict)
				fibril_info(t->m, "tc programs attached to %s (ifindex %d)", d->name,
					    ifindex);
			memset(&d->val, 0xff, sizeof(d->val)); /* rewrite below */
		}
		if (memcmp(&v, &d->val, sizeof(v))) {
			uint32_t k = (uint32_t)ifindex;
			if (bpf_map_update_elem(t->dev_fd, &k, &v, BPF_ANY) < 0) {
				snprintf(err, len, "cannot write %s to " LB_MAP_DEVICES ": %s", d->name,
					 strerror(errno));
				if (strict)
					return -errno;
				continue;
			}
			d->val = v;
		}
	}
	return 0;
}

/* Entries of lb_devices no device of ours has (an earlier run's). */
static void devices_prune(struct lb_tc *t)
{
	uint32_t key, next, *cur = NULL, gone[64];
	size_t n = 0;
	while (bpf_map_get_next_key(t->dev_fd, cur, &next) == 0 && n < 64) {
		key = next;
		cur = &key;
		bool ours = false;
		for (int i = 0; i < t->ndev; i++)
			ours |= t->dev[i].ifindex == (int)key;
		if (!ours)
			gone[n++] = key;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(t->dev_fd, &gone[i]);
}

static void check_tick(struct fibril_timer *timer, void *ud)
{
	(void)timer;
	struct lb_tc *t = ud;
	char err[256];
	devices_sync(t, false, err, sizeof(err));
}

int lb_tc_devices(const struct lb_tc *t)
{
	int n = 0;
	for (int i = 0; t && i < t->ndev; i++)
		n += !t->dev[i].tunnel && t->dev[i].ifindex;
	return n;
}

/* ---- the GC ------------------------------------------------------------------------- */
struct gc_job {
	struct lb_tc *t;
	int fd;
	struct lb_ctgc_params params;
	size_t seen, removed, stamped;
	uint64_t syscalls;
	int rc;
};

static void gc_work(void *ud)
{
	struct gc_job *j = ud;
	j->rc = lb_ctgc_pass(j->fd, &j->params, &j->seen, &j->removed, &j->stamped, &j->syscalls);
}

static void gc_done(void *ud, int status)
{
	struct gc_job *j = ud;
	struct lb_tc *t = j->t;
	close(j->fd);
	t->gc_busy = false;
	if (status == 0) {
		t->gc_runs++;
		t->gc_removed += j->removed;
		t->gc_entries = j->seen - j->removed;
		fibril_series_inc(t->s_runs);
		fibril_series_add(t->s_removed, (double)j->removed);
		fibril_series_set(t->s_entries, (double)t->gc_entries);
		if (j->rc < 0)
			fibril_warn(t->m, "GC of " LB_MAP_CT ": %s", strerror(-j->rc));
		if (j->removed)
			fibril_debug(t->m, LB_MAP_CT " GC: %zu of %zu entries expired (%llu bpf calls)",
				     j->removed, j->seen, (unsigned long long)j->syscalls);
	}
	free(j);
}

static void gc_tick(struct fibril_timer *timer, void *ud)
{
	(void)timer;
	struct lb_tc *t = ud;
	if (t->gc_busy)
		return;
	struct gc_job *j = calloc(1, sizeof(*j));
	if (!j)
		return;
	j->t = t;
	j->fd = fcntl(t->ct_fd, F_DUPFD_CLOEXEC, 0);
	j->params = t->params;
	j->params.now_s = lb_ctgc_now_s();
	if (j->fd < 0) {
		free(j);
		return;
	}
	t->gc_busy = true;
	if (fibril_work_submit(t->m, gc_work, gc_done, j) < 0) {
		t->gc_busy = false;
		close(j->fd);
		free(j);
	}
}

static uint32_t secs(struct fibril_module *m, const char *key)
{
	return (uint32_t)((fibril_config_duration_ms(m, key) + 999) / 1000);
}

int lb_tc_start(struct lb_tc *t, int prog_from, int prog_to, int ct_fd, int devices_fd,
		char *err, size_t len)
{
	struct fibril_module *m = t->m;
	t->prog_from = prog_from;
	t->prog_to = prog_to;
	t->ct_fd = ct_fd;
	t->dev_fd = devices_fd;
	t->snat = fibril_config_bool(m, "nodeport-snat");
	t->params = (struct lb_ctgc_params){
		.tcp_s = secs(m, "ct-timeout-tcp"), .syn_s = secs(m, "ct-timeout-tcp-syn"),
		.closing_s = secs(m, "ct-timeout-tcp-closing"), .other_s = secs(m, "ct-timeout-other")};
	const char *list = fibril_config_string(m, "nodeport-devices");
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	t->ndev = 0;
	for (char *save = NULL, *dev = strtok_r(buf, ", ", &save); dev;
	     dev = strtok_r(NULL, ", ", &save)) {
		if (t->ndev == LB_TC_DEV_MAX || strlen(dev) >= IF_NAMESIZE) {
			snprintf(err, len, "[lb] nodeport-devices: '%.64s': %s", dev,
				 t->ndev == LB_TC_DEV_MAX ? "more than 16 devices" : "not a device name");
			return -EINVAL;
		}
		memset(&t->dev[t->ndev], 0, sizeof(t->dev[0]));
		snprintf(t->dev[t->ndev++].name, IF_NAMESIZE, "%s", dev);
	}
	if (t->ndev) { /* the tunnel (if any) only matters with nodeport devices */
		memset(&t->dev[t->ndev], 0, sizeof(t->dev[0]));
		snprintf(t->dev[t->ndev].name, IF_NAMESIZE, "%s", FIBRIL_DATAPATH_TUNNEL_DEVICE);
		t->dev[t->ndev++].tunnel = true;
	}
	int rc = devices_sync(t, true, err, len);
	if (rc < 0)
		return rc;
	devices_prune(t);
	if (t->ndev)
		t->check_timer = fibril_timer_add(m, LB_TC_CHECK_MS, LB_TC_CHECK_MS, check_tick, t);
	uint64_t every = fibril_config_duration_ms(m, "ct-gc-interval");
	t->gc_timer = fibril_timer_add(m, every, every, gc_tick, t);
	if ((t->ndev && !t->check_timer) || !t->gc_timer) {
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	t->started = true;
	return 0;
}

void lb_tc_stop(struct lb_tc *t)
{
	if (!t)
		return;
	if (t->check_timer)
		fibril_timer_cancel(t->check_timer);
	if (t->gc_timer)
		fibril_timer_cancel(t->gc_timer);
	t->check_timer = t->gc_timer = NULL;
	t->started = false;
}

void lb_tc_free(struct lb_tc *t)
{
	if (!t)
		return;
	lb_tc_stop(t);
	free(t);
}
