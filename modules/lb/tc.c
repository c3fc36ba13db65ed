/* modules/lb/tc.c - the lb module's per-packet side: the tc programs
 * (bpf/fibril_lb.bpf.c fibril_lb_from_netdev / fibril_lb_to_netdev) on
 * [lb] nodeport-devices (clsact ingress and egress, fixed handle, replaced
 * in place at a restart) and, egress only, on the tunnel device
 * (FIBRIL_DATAPATH_TUNNEL_DEVICE) when it exists, so that a flow sent to a
 * backend on another node through the tunnel is SNATed there; lb_devices
 * (ifindex -> flags and the device's address per family, the SNAT source;
 * none with [lb] nodeport-snat off); the kernel's rtnetlink events (links,
 * IPv4 / IPv6 addresses, tc qdiscs and filters removed) on the agent's loop
 * re-attach to a device that appeared or was recreated (or lost our filter)
 * at once and follow its address changes, with every device checked again
 * when events were lost (ENOBUFS); and
 * lb_ct's GC: a timer every [lb] ct-gc-interval has the worker pool walk
 * lb_ct with batch operations (ctgc.c) and remove the flows idle past their
 * timeout, giving their clients' counts back in lb_ct_src (mapped by the
 * job); lb_node_addrs (the node's addresses, the only ones a NodePort
 * is served on at tc) synced at start and on every address event.
 * Metrics: fibril_lb_ct_gc_runs_total, fibril_lb_ct_gc_removed_total,
 * fibril_lb_ct_entries, fibril_lb_device_resyncs_total. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/rtnetlink.h>

#include <fibril/datapath.h>
#include <fibril/fibril.h>

#include "grow.h"
#include "libbpf_log.h"
#include "lb_mod.h"
#include "lb_tc.h"
#include "nl.h"
#include "node_addrs.h"

#define LB_TC_HANDLE 0xf1b2
/* after the datapath's filter (priority 1) on a device both use: the tc
 * order contract of bpf/README.md; an older agent's filter at 1 is removed */
#define LB_TC_PRIORITY 2
#define LB_TC_PRIORITY_OLD 1
#define LB_TC_DEV_MAX 16
#define LB_NL_RCVBUF (1 << 20)
#define DEVICES_ALL(t) ((1u << (t)->ndev) - 1) /* a devices_sync mask of every device */

struct lb_tc_dev {
	char name[IF_NAMESIZE];
	int ifindex;           /* 0: not there (yet) */
	bool tunnel;
	struct lb_device val;  /* as written to lb_devices */
};

struct lb_tc {
	struct fibril_module *m;
	int prog_from, prog_to, ct_fd, dev_fd, addrs_fd;
	int src_fd;            /* lb_ct_src (the registry's), -1: none */
	bool addrs_dirty;      /* an address event: lb_node_addrs is synced again */
	bool snat, started;
	struct lb_tc_dev dev[LB_TC_DEV_MAX + 1]; /* + the tunnel device */
	int ndev;
	struct mod_nl_events ev; /* the device events (not open without nodeport devices) */
	struct fibril_io *nl_io;
	uint32_t dirty;        /* devices an event batch concerns (bit i: dev[i]) */
	uint64_t resyncs;
	struct fibril_timer *gc_timer;
	bool gc_busy;
	struct lb_ctgc_params params;
	uint64_t gc_runs, gc_removed, gc_entries;
	struct fibril_metric *m_runs, *m_removed, *m_entries, *m_resyncs;
	struct fibril_series *s_runs, *s_removed, *s_entries, *s_resyncs;
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
	t->ct_fd = t->dev_fd = t->addrs_fd = t->prog_from = t->prog_to = t->src_fd = -1;
	t->m_runs = reg(t, FIBRIL_METRIC_COUNTER, "fibril_lb_ct_gc_runs_total",
			"Passes of the lb_ct garbage collector");
	t->m_removed = reg(t, FIBRIL_METRIC_COUNTER, "fibril_lb_ct_gc_removed_total",
			   "lb_ct entries (per-packet NAT flows) removed idle past their timeout");
	t->m_entries = reg(t, FIBRIL_METRIC_GAUGE, "fibril_lb_ct_entries",
			   "lb_ct entries left after the last GC pass");
	t->m_resyncs = reg(t, FIBRIL_METRIC_COUNTER, "fibril_lb_device_resyncs_total",
			   "Times every nodeport device was checked again after device events were "
			   "lost (rtnetlink socket buffer full)");
	if (!t->m_runs || !t->m_removed || !t->m_entries || !t->m_resyncs) {
		free(t);
		return -EINVAL;
	}
	t->s_resyncs = fibril_metric_series(t->m_resyncs, NULL);
	t->s_runs = fibril_metric_series(t->m_runs, NULL);
	t->s_removed = fibril_metric_series(t->m_removed, NULL);
	t->s_entries = fibril_metric_series(t->m_entries, NULL);
	*out = t;
	return 0;
}

/* ---- devices ------------------------------------------------------------------------ */

/* The device's first IPv4 and first global IPv6 address (the SNAT source)
 * among the node's addresses all[0..n). */
static void device_addrs(const struct mod_node_addr *all, size_t n, const char *name,
			 struct lb_device *d)
{
	memset(d->addr4, 0, sizeof(d->addr4));
	memset(d->addr6, 0, sizeof(d->addr6));
	bool have4 = false, have6 = false;
	for (const struct mod_node_addr *a = all; a < all + n; a++) {
		if (strcmp(a->ifname, name))
			continue;
		if (a->family == AF_INET && !have4) {
			d->addr4[10] = d->addr4[11] = 0xff;
			memcpy(d->addr4 + 12, &a->addr.v4, 4);
			have4 = true;
		} else if (a->family == AF_INET6 && !have6 && mod_node_addr_v6_global(a)) {
			memcpy(d->addr6, &a->addr.v6, 16);
			have6 = true;
		}
	}
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
		LIBBPF_OPTS(bpf_tc_opts, was, .handle = LB_TC_HANDLE, .priority = LB_TC_PRIORITY_OLD);
		old = modcommon_libbpf_quiet_begin();
		bpf_tc_detach(&hook, &was); /* usually not there: ENOENT */
		modcommon_libbpf_log_end(old);
	}
	return 0;
}

/* Is our egress program still on the device (a qdisc removed and added
 * back by someone else takes our filters with it)? */
static bool attached(int ifindex)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = LB_TC_HANDLE, .priority = LB_TC_PRIORITY);
	libbpf_print_fn_t old = modcommon_libbpf_quiet_begin();
	int rc = bpf_tc_query(&hook, &opts);
	modcommon_libbpf_log_end(old);
	return rc == 0; /* ENOENT: no such filter; EINVAL: no clsact any more */
}

/* Bring one device's attachment and lb_devices entry up to date (its SNAT
 * address from the node's addresses addrs[0..naddrs)). With strict, a
 * nodeport device missing or an attach failing is an error. */
static int device_sync(struct lb_tc *t, struct lb_tc_dev *d, const struct mod_node_addr *addrs,
		       size_t naddrs, bool strict, char *err, size_t len)
{
	int ifindex = (int)if_nametoindex(d->name);
	if (!ifindex) {
		if (strict && !d->tunnel) {
			snprintf(err, len, "[lb] nodeport-devices: no device '%.64s' here", d->name);
			return -ENODEV;
		}
		if (d->ifindex) {
			uint32_t k = (uint32_t)d->ifindex;
			bpf_map_delete_elem(t->dev_fd, &k);
			if (!strict)
				fibril_info(t->m, "%s (ifindex %d) is gone", d->name, d->ifindex);
			d->ifindex = 0;
		}
		return 0;
	}
	struct lb_device v = {.flags = d->tunnel ? LB_DEV_TUNNEL : LB_DEV_NODEPORT};
	if (t->snat && !d->tunnel)
		device_addrs(addrs, naddrs, d->name, &v);
	if (ifindex != d->ifindex || !attached(ifindex)) {
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
			if (rc == -ENODEV) /* gone meanwhile: its removal's event follows */
				fibril_debug(t->m, "%s", why);
			else
				fibril_warn(t->m, "%s", why);
			return 0;
		}
		if (old && old != ifindex) {
			uint32_t k = (uint32_t)old;
			bpf_map_delete_elem(t->dev_fd, &k);
		}
		if (!strict)
			fibril_info(t->m, "tc programs attached to %s (ifindex %d)", d->name, ifindex);
		memset(&d->val, 0xff, sizeof(d->val)); /* rewrite below */
	}
	if (memcmp(&v, &d->val, sizeof(v))) {
		uint32_t k = (uint32_t)ifindex;
		if (bpf_map_update_elem(t->dev_fd, &k, &v, BPF_ANY) < 0) {
			int e = errno;
			snprintf(err, len, "cannot write %s to " LB_MAP_DEVICES ": %s", d->name,
				 strerror(e));
			if (strict)
				return -e;
			fibril_warn(t->m, "%s", err);
			return 0;
		}
		d->val = v;
	}
	return 0;
}

/* The devices in mask (bit i: dev[i]; all of them at start and after lost
 * events), with one list of the node's addresses for them all (none when
 * it cannot be read: no SNAT address, as for a device without one). */
static int devices_sync(struct lb_tc *t, uint32_t mask, bool strict, char *err, size_t len)
{
	struct mod_node_addr *addrs = NULL;
	size_t naddrs = 0;
	if (t->snat && mask)
		(void)mod_node_addrs(&addrs, &naddrs);
	int rc = 0;
	for (int i = 0; i < t->ndev && rc == 0; i++)
		if (mask & (1u << i))
			rc = device_sync(t, &t->dev[i], addrs, naddrs, strict, err, len);
	free(addrs);
	return rc;
}

/* lb_node_addrs = the node's addresses now (every device's and [lb]
 * node-addresses): what a NodePort frontend may be at tc. Written before
 * the stale ones go, so an address that stays is never missing. */
static int addr_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct lb_addr));
}

static void node_addrs_sync(struct lb_tc *t)
{
	struct lb_addr *addrs = NULL;
	size_t n = 0;
	if (t->addrs_fd < 0 ||
	    lb_node_addrs_list(fibril_config_string(t->m, "node-addresses"), &addrs, &n) < 0)
		return;
	if (n) /* thousands of addresses: the stale ones are found by bsearch */
		qsort(addrs, n, sizeof(*addrs), addr_cmp);
	uint8_t one = 1;
	size_t failed = 0;
	for (size_t i = 0; i < n; i++)
		failed += bpf_map_update_elem(t->addrs_fd, addrs[i].a, &one, BPF_ANY) < 0;
	if (failed)
		fibril_warn(t->m, "%zu of the node's %zu addresses do not fit in " LB_MAP_NODE_ADDRS
				  ": NodePorts on them are not served at tc", failed, n);
	struct lb_addr key, next, *gone = NULL;
	void *cur = NULL;
	size_t ng = 0, cap = 0;
	while (bpf_map_get_next_key(t->addrs_fd, cur, next.a) == 0) {
		key = next;
		cur = key.a;
		if (n && bsearch(&key, addrs, n, sizeof(*addrs), addr_cmp))
			continue;
		struct lb_addr *g = mod_grow(gone, ng, &cap, sizeof(*g), 64);
		if (!g)
			break;
		gone = g;
		gone[ng++] = key;
	}
	for (size_t i = 0; i < ng; i++)
		bpf_map_delete_elem(t->addrs_fd, gone[i].a);
	free(gone);
	free(addrs);
	t->addrs_dirty = false;
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

/* ---- the kernel's events about the devices -------------------------------------------
 * An rtnetlink socket in RTNLGRP_LINK (a device created, removed, renamed,
 * up or down), RTNLGRP_IPV4_IFADDR / RTNLGRP_IPV6_IFADDR (an address added
 * or removed) and RTNLGRP_TC (a qdisc or filter removed: our programs may
 * have gone with it), read on the agent's loop. A batch of messages marks
 * the devices it concerns (by name for links, by ifindex otherwise); those
 * are synced once the socket is drained. When the kernel dropped messages
 * because the socket's buffer was full (ENOBUFS), nothing tells which
 * devices changed: every device is synced again. */

static void mark_ifindex(struct lb_tc *t, int ifindex)
{
	char name[IF_NAMESIZE] = "";
	bool named = false;
	for (int i = 0; i < t->ndev; i++) {
		struct lb_tc_dev *d = &t->dev[i];
		if (d->ifindex == ifindex) {
			t->dirty |= 1u << i;
			continue;
		}
		if (d->ifindex || d->tunnel)
			continue;
		/* a nodeport device not attached (yet): the event may be about
		 * it, if its attach failed or its link event was lost (the
		 * tunnel's addresses do not matter: its link events do) */
		if (!named) {
			named = true;
			if (!if_indextoname((unsigned)ifindex, name))
				name[0] = '\0';
		}
		if (name[0] && !strcmp(name, d->name))
			t->dirty |= 1u << i;
	}
}

static void nl_event(const struct mod_nl_event *e, void *ud)
{
	struct lb_tc *t = ud;
	switch (e->type) {
	case RTM_NEWLINK:
	case RTM_DELLINK:
		for (int i = 0; i < t->ndev; i++)
			if ((t->dev[i].ifindex && t->dev[i].ifindex == e->ifindex) ||
			    (e->ifname && !strncmp(e->ifname, t->dev[i].name, IF_NAMESIZE)))
				t->dirty |= 1u << i;
		break;
	case RTM_NEWADDR:
	case RTM_DELADDR:
		t->addrs_dirty = true;
		mark_ifindex(t, e->ifindex);
		break;
	case RTM_DELQDISC:
	case RTM_DELTFILTER:
		mark_ifindex(t, e->ifindex);
		break;
	default:
		break;
	}
}

#define LB_NL_READS_MAX 256 /* datagrams read per wake-up: the loop serves others too */

static void nl_readable(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	(void)fd;
	struct lb_tc *t = ud;
	bool lost = false;
	/* The overrun is reported as a socket error (POLLERR), after which the
	 * loop stops the watch: read what is there, and watch again. */
	if ((revents & FIBRIL_IO_ERROR) && fibril_io_update(io, FIBRIL_IO_READ) < 0)
		fibril_warn(t->m, "cannot watch the device events again: devices are no longer "
				  "followed");
	t->dirty = 0;
	for (int n = 0; n < LB_NL_READS_MAX; n++) {
		char why[128];
		int rc = mod_nl_events_read(&t->ev, why, sizeof(why));
		if (rc >= 0)
			continue;
		if (rc == -EAGAIN)
			break;
		lost = true; /* ENOBUFS: the kernel dropped events */
		if (rc != -ENOBUFS) {
			fibril_warn(t->m, "reading device events: %s", why);
			break;
		}
	}
	if (lost) {
		t->resyncs++;
		fibril_series_inc(t->s_resyncs);
		fibril_info(t->m, "device events were lost (socket buffer full): every device is "
				  "checked again");
		t->dirty = DEVICES_ALL(t);
		t->addrs_dirty = true;
	}
	char err[256];
	devices_sync(t, t->dirty, false, err, sizeof(err));
	t->dirty = 0;
	if (t->addrs_dirty)
		node_addrs_sync(t);
}

/* Subscribed before the first sync, so that no change between the two is
 * missed. */
static int nl_open(struct lb_tc *t, char *err, size_t len)
{
	static const unsigned int groups[] = {RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR,
					      RTNLGRP_TC};
	char why[128];
	/* room for bursts (capped by net.core.rmem_max) */
	int rc = mod_nl_events_open(&t->ev, groups, sizeof(groups) / sizeof(groups[0]), LB_NL_RCVBUF,
				    nl_event, t, why, sizeof(why));
	if (rc < 0)
		snprintf(err, len, "cannot listen to the kernel's device events (rtnetlink): %s", why);
	return rc;
}

int lb_tc_devices(const struct lb_tc *t)
{
	int n = 0;
	for (int i = 0; t && i < t->ndev; i++)
		n += !t->dev[i].tunnel && t->dev[i].ifindex;
	return n;
}

void lb_tc_set_src(struct lb_tc *t, int src_fd)
{
	t->src_fd = src_fd;
}

/* a job's own copy of lb_ct_src's fd (the module may stop meanwhile), -1 */
static int src_dup(const struct lb_tc *t)
{
	return t->src_fd < 0 ? -1 : fcntl(t->src_fd, F_DUPFD_CLOEXEC, 0);
}

/* lb_ct_src mapped for a job on the worker pool, NULL when it cannot be */
static uint64_t *src_map(int fd)
{
	if (fd < 0)
		return NULL;
	void *p = mmap(NULL, LB_CT_SRC_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void src_unmap(uint64_t *p)
{
	if (p)
		munmap(p, LB_CT_SRC_BYTES);
}

/* ---- the GC ------------------------------------------------------------------------- */
struct gc_job {
	struct lb_tc *t;
	int fd, src_fd;
	struct lb_ctgc_params params;
	size_t seen, removed, stamped;
	uint64_t syscalls;
	int rc;
};

static void gc_work(void *ud)
{
	struct gc_job *j = ud;
	j->params.src = src_map(j->src_fd);
	j->rc = lb_ctgc_pass(j->fd, &j->params, &j->seen, &j->removed, &j->stamped, &j->syscalls);
	src_unmap(j->params.src);
	j->params.src = NULL;
}

static void gc_done(void *ud, int status)
{
	struct gc_job *j = ud;
	struct lb_tc *t = j->t;
	close(j->fd);
	if (j->src_fd >= 0)
		close(j->src_fd);
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
	j->src_fd = src_dup(t);
	t->gc_busy = true;
	if (fibril_work_submit(t->m, gc_work, gc_done, j) < 0) {
		t->gc_busy = false;
		close(j->fd);
		if (j->src_fd >= 0)
			close(j->src_fd);
		free(j);
	}
}

/* ---- the purge of a removed UDP backend's flows ----------------------------------------- */
struct purge_job {
	struct lb_tc *t;
	int fd, src_fd;
	size_t n, seen, removed;
	uint64_t syscalls;
	int rc;
	struct lb_ct_purge gone[];
};

static void purge_work(void *ud)
{
	struct purge_job *j = ud;
	uint64_t *src = src_map(j->src_fd);
	j->rc = lb_ctgc_purge(j->fd, j->gone, j->n, src, &j->seen, &j->removed, &j->syscalls);
	src_unmap(src);
}

static void purge_done(void *ud, int status)
{
	struct purge_job *j = ud;
	close(j->fd);
	if (j->src_fd >= 0)
		close(j->src_fd);
	if (status == 0 && j->rc < 0)
		fibril_warn(j->t->m, "purge of removed UDP backends' flows in " LB_MAP_CT ": %s",
			    strerror(-j->rc));
	else if (status == 0 && j->removed)
		fibril_debug(j->t->m, LB_MAP_CT ": %zu entries of removed UDP backends' flows removed",
			     j->removed);
	free(j);
}

void lb_tc_purge_udp(struct lb_tc *t, const struct lb_ct_purge *gone, size_t n)
{
	if (!t || t->ct_fd < 0 || !n)
		return;
	struct purge_job *j = calloc(1, sizeof(*j) + n * sizeof(*gone));
	if (!j)
		return;
	j->t = t;
	j->n = n;
	memcpy(j->gone, gone, n * sizeof(*gone));
	j->fd = fcntl(t->ct_fd, F_DUPFD_CLOEXEC, 0);
	if (j->fd < 0) {
		free(j);
		return;
	}
	j->src_fd = src_dup(t);
	if (fibril_work_submit(t->m, purge_work, purge_done, j) < 0) {
		close(j->fd);
		if (j->src_fd >= 0)
			close(j->src_fd);
		free(j);
	}
}

static uint32_t secs(struct fibril_module *m, const char *key)
{
	return (uint32_t)((fibril_config_duration_ms(m, key) + 999) / 1000);
}

int lb_tc_start(struct lb_tc *t, int prog_from, int prog_to, int ct_fd, int devices_fd,
		int node_addrs_fd, char *err, size_t len)
{
	struct fibril_module *m = t->m;
	t->prog_from = prog_from;
	t->prog_to = prog_to;
	t->ct_fd = ct_fd;
	t->dev_fd = devices_fd;
	t->addrs_fd = node_addrs_fd;
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
	int rc = t->ndev ? nl_open(t, err, len) : 0;
	if (rc < 0)
		return rc;
	node_addrs_sync(t); /* before the programs are attached */
	if ((rc = devices_sync(t, DEVICES_ALL(t), true, err, len)) < 0)
		return rc;
	devices_prune(t);
	if (t->ev.sk)
		t->nl_io = fibril_io_watch(m, mod_nl_events_fd(&t->ev), FIBRIL_IO_READ, nl_readable, t);
	uint64_t every = fibril_config_duration_ms(m, "ct-gc-interval");
	t->gc_timer = fibril_timer_add(m, every, every, gc_tick, t);
	if ((t->ev.sk && !t->nl_io) || !t->gc_timer) {
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
	if (t->nl_io)
		fibril_io_remove(t->nl_io);
	if (t->gc_timer)
		fibril_timer_cancel(t->gc_timer);
	t->nl_io = NULL;
	t->gc_timer = NULL;
	mod_nl_events_close(&t->ev);
	t->started = false;
}

void lb_tc_free(struct lb_tc *t)
{
	if (!t)
		return;
	lb_tc_stop(t);
	free(t);
}
