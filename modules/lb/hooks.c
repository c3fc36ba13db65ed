/* modules/lb/hooks.c - the lb module's socket-level programs
 * (bpf/fibril_lb.bpf.c, embedded as a libbpf skeleton) loaded with the
 * registry's maps, and their hooks on [lb] cgroup (cgroup v2; systemd's
 * hybrid layout's unified hierarchy found) through pinned BPF links
 * (<bpffs-dir>/lb_link_*): a restarted agent swaps the new programs into
 * the same links (bpf_link_update), so the cgroup is never without them;
 * socket-lb off unpins them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <fibril/fibril.h>

#include "libbpf_log.h"
#include "lb_mod.h"
#include "fibril_lb.skel.h"

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

int lb_load_programs(struct lb *lb, char *err, size_t len)
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
	skel->rodata->external_clusterip = fibril_config_bool(lb->m, "external-clusterip");
	int64_t per_source = fibril_config_int(lb->m, "ct-source-max");
	if (!per_source) /* the default: a sixteenth of lb_ct's flows */
		per_source = fibril_config_int(lb->m, "ct-map-max") / 16;
	skel->rodata->ct_source_max = (uint32_t)(per_source > 0 ? per_source : 1);
	struct {
		struct bpf_map *map;
		int id;
	} reuse[] = {
		{skel->maps.lb_services, LB_MI_SERVICES}, {skel->maps.lb_backends, LB_MI_BACKENDS},
		{skel->maps.lb_maglev, LB_MI_MAGLEV},     {skel->maps.lb_affinity, LB_MI_AFFINITY},
		{skel->maps.lb_aff_match, LB_MI_AFF_MATCH}, {skel->maps.lb_sk_revnat, LB_MI_SK_REVNAT},
		{skel->maps.lb_metrics, LB_MI_METRICS}, {skel->maps.lb_ct, LB_MI_CT},
		{skel->maps.lb_devices, LB_MI_DEVICES}, {skel->maps.lb_src_range, LB_MI_SRC_RANGE},
		{skel->maps.lb_frag, LB_MI_FRAG}, {skel->maps.lb_node_addrs, LB_MI_NODE_ADDRS},
		{skel->maps.lb_ct_src, LB_MI_CT_SRC},
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
int lb_attach_hooks(struct lb *lb, bool enable, char *err, size_t len)
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
