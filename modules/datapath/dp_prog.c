/* modules/datapath/dp_prog.c - the tc programs: loaded once per agent run
 * from the skeleton embedded at build time (bpf/fibril_dp.skel.h), with
 * every map handed over from the host's registry (bpf_map__reuse_fd before
 * load), then attached to each endpoint's host veth with clsact filters of
 * fixed handle and priority: fibril_from_endpoint on the ingress (what the
 * pod sends), fibril_to_endpoint on the egress (what the node's stack
 * delivers to the pod). Attaching with BPF_TC_F_REPLACE swaps the program
 * of an existing filter atomically, so a restarted agent re-adopts a veth
 * without a gap in traffic; stopping leaves the filters (and the programs
 * they hold) in place. */
#include <errno.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "datapath.h"
#include "libbpf_log.h"
#include "node_addrs.h"
#include "fibril_dp.skel.h"

#define DP_TC_HANDLE 0xf1b1
#define DP_TC_PRIORITY 1

struct dp_prog {
	struct fibril_dp *skel;
	int fd[DP_HOOK_COUNT]; /* by enum dp_hook */
	int id[DP_HOOK_COUNT];
	int overlay_fd, overlay_id; /* fibril_from_overlay (tunnel mode) */
	int netdev_fd, netdev_id;   /* fibril_from_netdev (host-routing = bpf) */
};

static const enum bpf_tc_attach_point hook_point[DP_HOOK_COUNT] = {
	[DP_HOOK_INGRESS] = BPF_TC_INGRESS,
	[DP_HOOK_EGRESS] = BPF_TC_EGRESS,
};
static const char *const hook_name[DP_HOOK_COUNT] = {
	[DP_HOOK_INGRESS] = "ingress",
	[DP_HOOK_EGRESS] = "egress",
};

static int prog_id_of(int fd)
{
	struct bpf_prog_info info;
	uint32_t info_len = sizeof(info);
	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(fd, &info, &info_len) == 0)
		return (int)info.id;
	return 0;
}

/* libbpf's messages (the verifier log above all) go to the agent's log
 * while this module loads its program (modules/common/libbpf_log.c). */

static int reuse(struct bpf_map *map, struct datapath *dp, enum dp_map_id id, char *err,
		 size_t len)
{
	int rc = bpf_map__reuse_fd(map, fibril_map_fd(dp->maps[id]));
	if (rc < 0)
		dp_seterr(err, len, "map %s does not fit the program: %s", bpf_map__name(map),
			  strerror(-rc));
	return rc;
}

int dp_prog_load(struct datapath *dp, char *err, size_t len)
{
	struct dp_prog *p = calloc(1, sizeof(*p));
	if (!p) {
		dp_seterr(err, len, "out of memory");
		return -ENOMEM;
	}
	libbpf_print_fn_t old = modcommon_libbpf_log_begin(dp->m);
	int rc = 0;
	p->skel = fibril_dp__open();
	if (!p->skel) {
		rc = -errno;
		dp_seterr(err, len, "cannot open the BPF object: %s", strerror(-rc));
		goto out;
	}
	if ((rc = reuse(p->skel->maps.dp_endpoints, dp, DPM_ENDPOINTS, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_ipcache, dp, DPM_IPCACHE, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_conntrack, dp, DPM_CONNTRACK, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_metrics, dp, DPM_METRICS, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_events, dp, DPM_EVENTS, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_config, dp, DPM_CONFIG, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_ct_any, dp, DPM_CT_ANY, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_frags, dp, DPM_FRAGS, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_evlimit, dp, DPM_EVLIMIT, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_policy, dp, DPM_POLICY, err, len)) < 0 ||
	    (rc = reuse(p->skel->maps.dp_policy_ep, dp, DPM_POLICY_EP, err, len)) < 0)
		goto out;
	dp_vg_quiet_begin();
	rc = fibril_dp__load(p->skel);
	dp_vg_quiet_end();
	if (rc < 0) {
		dp_seterr(err, len, "the kernel refused the tc program: %s (the verifier log is above)",
			  strerror(-rc));
		goto out;
	}
	p->fd[DP_HOOK_INGRESS] = bpf_program__fd(p->skel->progs.fibril_from_endpoint);
	p->fd[DP_HOOK_EGRESS] = bpf_program__fd(p->skel->progs.fibril_to_endpoint);
	for (int h = 0; h < DP_HOOK_COUNT; h++)
		p->id[h] = prog_id_of(p->fd[h]);
	p->overlay_fd = bpf_program__fd(p->skel->progs.fibril_from_overlay);
	p->overlay_id = prog_id_of(p->overlay_fd);
	p->netdev_fd = bpf_program__fd(p->skel->progs.fibril_from_netdev);
	p->netdev_id = prog_id_of(p->netdev_fd);
out:
	modcommon_libbpf_log_end(old);
	if (rc < 0) {
		fibril_dp__destroy(p->skel);
		free(p);
		return rc;
	}
	dp->prog = p;
	return 0;
}

void dp_prog_unload(struct datapath *dp)
{
	if (!dp->prog)
		return;
	/* the filters hold their own reference: attached copies keep running */
	fibril_dp__destroy(dp->prog->skel);
	free(dp->prog);
	dp->prog = NULL;
}

int dp_prog_id(const struct datapath *dp, enum dp_hook h)
{
	return dp->prog ? dp->prog->id[h] : 0;
}

int dp_prog_overlay_id(const struct datapath *dp)
{
	return dp->prog ? dp->prog->overlay_id : 0;
}

/* One filter: the clsact qdisc (created by the first hook), then ours. */
static int attach_fd(int prog_fd, int ifindex, enum dp_hook h, char *err, size_t len)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
	/* a clsact qdisc already there (EEXIST) is fine: keep libbpf from
	 * printing the kernel's "Exclusivity flag on" for it */
	libbpf_print_fn_t old = modcommon_libbpf_quiet_begin();
	dp_vg_quiet_begin(); /* libbpf's netlink reply parsing, see dp_util.c */
	int rc = bpf_tc_hook_create(&hook);
	dp_vg_quiet_end();
	modcommon_libbpf_log_end(old);
	if (rc < 0 && rc != -EEXIST) {
		dp_seterr(err, len, "cannot add the clsact qdisc to ifindex %d: %s", ifindex,
			  strerror(-rc));
		return rc;
	}
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY,
		    .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE);
	dp_vg_quiet_begin();
	rc = bpf_tc_attach(&hook, &opts);
	dp_vg_quiet_end();
	if (rc < 0) {
		dp_seterr(err, len, "cannot attach the tc program to ifindex %d %s: %s", ifindex,
			  hook_name[h], strerror(-rc));
		return rc;
	}
	return 0;
}

static int attach_one(struct datapath *dp, int ifindex, enum dp_hook h, char *err, size_t len)
{
	return attach_fd(dp->prog->fd[h], ifindex, h, err, len);
}

int dp_prog_attach_overlay(struct datapath *dp, int ifindex, char *err, size_t len)
{
	if (!dp->prog) {
		dp_seterr(err, len, "the tc program is not loaded");
		return -ENOENT;
	}
	return attach_fd(dp->prog->overlay_fd, ifindex, DP_HOOK_INGRESS, err, len);
}

int dp_prog_attach(struct datapath *dp, int ifindex, char *err, size_t len)
{
	if (!dp->prog) {
		dp_seterr(err, len, "the tc program is not loaded");
		return -ENOENT;
	}
	/* each filter is swapped on its own; the ingress one first, as before
	 * the egress program existed */
	for (int h = 0; h < DP_HOOK_COUNT; h++) {
		int rc = attach_one(dp, ifindex, (enum dp_hook)h, err, len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static bool gone(int rc)
{
	return rc == -ENOENT || rc == -ENODEV || rc == -EINVAL;
}

int dp_prog_detach(struct datapath *dp, int ifindex, char *err, size_t len)
{
	(void)dp;
	int first = 0;
	/* both, even when the first fails: leave as little behind as we can */
	for (int h = 0; h < DP_HOOK_COUNT; h++) {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
		LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY);
		dp_vg_quiet_begin();
		int rc = bpf_tc_detach(&hook, &opts);
		dp_vg_quiet_end();
		if (rc < 0 && !gone(rc) && !first) {
			dp_seterr(err, len, "cannot detach the tc program from ifindex %d %s: %s",
				  ifindex, hook_name[h], strerror(-rc));
			first = rc;
		}
	}
	return first;
}

int dp_prog_attached_id(int ifindex, enum dp_hook h)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY);
	dp_vg_quiet_begin();
	int rc = bpf_tc_query(&hook, &opts);
	dp_vg_quiet_end();
	if (rc < 0)
		return gone(rc) ? 0 : rc;
	return (int)opts.prog_id;
}

/* ---- host-routing = bpf: fibril_from_netdev on the underlay devices ---------------
 * The devices: every one that is up, not loopback, with an IPv4 or IPv6
 * address (getifaddrs: netlink, no shelling out), other than the host
 * device and the tunnel device; the endpoints' veths carry no address. */
static bool is_netdev_candidate(const struct datapath *dp, const struct mod_node_addr *a)
{
	if (!(a->flags & IFF_UP) || (a->flags & IFF_LOOPBACK))
		return false;
	return strcmp(a->ifname, dp->host_dev) && strcmp(a->ifname, dp->host_peer) &&
	       strcmp(a->ifname, dp->tunnel_dev);
}

/* Is the filter at our handle on ifindex's ingress fibril_from_netdev? */
static bool netdev_prog_attached(int ifindex)
{
	int id = dp_prog_attached_id(ifindex, DP_HOOK_INGRESS);
	if (id <= 0)
		return false;
	int fd = bpf_prog_get_fd_by_id((__u32)id);
	if (fd < 0)
		return false;
	struct bpf_prog_info info;
	__u32 len = sizeof(info);
	memset(&info, 0, sizeof(info));
	bool ours = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
		    !strncmp(info.name, "fibril_from_netdev", sizeof(info.name) - 1);
	close(fd);
	return ours;
}

int dp_prog_netdevs_sync(struct datapath *dp, bool attach, int *count, char *err, size_t len)
{
	struct mod_node_addr *all = NULL;
	size_t nall = 0;
	int done[64], ndone = 0, first = 0;
	*count = 0;
	if (attach && !dp->prog) {
		dp_seterr(err, len, "the tc program is not loaded");
		return -ENOENT;
	}
	int e = mod_node_addrs(&all, &nall);
	if (e < 0) {
		dp_seterr(err, len, "cannot list the node's addresses: %s", strerror(-e));
		return e;
	}
	for (const struct mod_node_addr *a = all; a < all + nall; a++) {
		if (!is_netdev_candidate(dp, a))
			continue;
		int ifindex = (int)if_nametoindex(a->ifname), seen = 0;
		for (int i = 0; i < ndone; i++)
			seen |= done[i] == ifindex;
		if (!ifindex || seen || ndone == (int)(sizeof(done) / sizeof(done[0])))
			continue;
		done[ndone++] = ifindex;
		int rc = 0;
		if (attach) {
			rc = attach_fd(dp->prog->netdev_fd, ifindex, DP_HOOK_INGRESS, err, len);
		} else if (netdev_prog_attached(ifindex)) {
			LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
			LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY);
			dp_vg_quiet_begin();
			rc = bpf_tc_detach(&hook, &opts);
			dp_vg_quiet_end();
			if (rc < 0 && !gone(rc))
				dp_seterr(err, len, "cannot detach fibril_from_netdev from %s: %s",
					  a->ifname, strerror(-rc));
		} else {
			continue;
		}
		if (rc < 0 && !first)
			first = rc;
		else if (rc == 0)
			(*count)++;
	}
	free(all);
	return first;
}
