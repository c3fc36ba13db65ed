/* modules/datapath/dp_pins.c - the tc programs' pins, so a restart reuses
 * what is in place instead of verifying it again: each program loaded is
 * pinned as <bpffs-dir>/dp_prog_<hash>_<hook>, <hash> being the embedded
 * object's (dp_prog.c hashes it: the skeleton is compiled in there only).
 * A pin is adopted only when it is that program, of type sched_cls, on
 * the registry's maps as they are now: one of our maps recreated since
 * (another spec) makes it stale. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include "datapath.h"

const struct dp_pin_def dp_pin_ingress = {"from_endpoint", "fibril_from_endpoint"};
const struct dp_pin_def dp_pin_egress = {"to_endpoint", "fibril_to_endpoint"};
const struct dp_pin_def dp_pin_overlay = {"from_overlay", "fibril_from_overlay"};
const struct dp_pin_def dp_pin_netdev = {"from_netdev", "fibril_from_netdev"};
const struct dp_pin_def dp_pin_to_netdev = {"to_netdev", "fibril_to_netdev"};
#define PIN_PREFIX "dp_prog_"

static const char *pin_dir(void)
{
	const char *dir = fibril_config_get("agent", "bpffs-dir");
	return dir && dir[0] ? dir : "/sys/fs/bpf/fibril";
}

static void pin_path(uint64_t hash, const struct dp_pin_def *d, char *out, size_t len)
{
	snprintf(out, len, "%s/" PIN_PREFIX "%016llx_%s", pin_dir(), (unsigned long long)hash,
		 d->suffix);
}

/* Is the pinned program fd what this object loads as d->name, on the
 * registry's maps as they are now? A map of ours it uses that is not the
 * registry's instance (recreated since) makes it stale; a map of another
 * name (libbpf's internal ones) is the program's own. */
static bool pinned_fits(int fd, const struct dp_pin_def *d, const int *map_fds)
{
	uint32_t ids[64] = {0}; /* written by the kernel: valgrind cannot tell */
	struct bpf_prog_info info;
	uint32_t len = sizeof(info);
	memset(&info, 0, sizeof(info));
	info.nr_map_ids = sizeof(ids) / sizeof(ids[0]);
	info.map_ids = (uint64_t)(uintptr_t)ids;
	dp_vg_quiet_begin();
	int rc = bpf_obj_get_info_by_fd(fd, &info, &len);
	dp_vg_quiet_end();
	if (rc < 0 || info.type != BPF_PROG_TYPE_SCHED_CLS ||
	    strncmp(info.name, d->name, sizeof(info.name) - 1) ||
	    info.nr_map_ids > sizeof(ids) / sizeof(ids[0]))
		return false;
	uint32_t ours[DPM_COUNT];
	char names[DPM_COUNT][BPF_OBJ_NAME_LEN];
	for (int i = 0; i < DPM_COUNT; i++) {
		struct bpf_map_info mi;
		uint32_t ml = sizeof(mi);
		memset(&mi, 0, sizeof(mi));
		dp_vg_quiet_begin();
		rc = bpf_obj_get_info_by_fd(map_fds[i], &mi, &ml);
		dp_vg_quiet_end();
		if (rc < 0)
			return false;
		ours[i] = mi.id;
		memcpy(names[i], mi.name, sizeof(names[i]));
	}
	for (uint32_t k = 0; k < info.nr_map_ids; k++) {
		bool known = false;
		for (int i = 0; i < DPM_COUNT && !known; i++)
			known = ids[k] == ours[i];
		if (known)
			continue;
		int mfd = bpf_map_get_fd_by_id(ids[k]);
		if (mfd < 0)
			return false;
		struct bpf_map_info mi;
		uint32_t ml = sizeof(mi);
		memset(&mi, 0, sizeof(mi));
		dp_vg_quiet_begin();
		rc = bpf_obj_get_info_by_fd(mfd, &mi, &ml);
		dp_vg_quiet_end();
		close(mfd);
		if (rc < 0)
			return false;
		for (int i = 0; i < DPM_COUNT; i++)
			if (!strncmp(mi.name, names[i], sizeof(mi.name)))
				return false; /* an older instance of one of our maps */
	}
	return true;
}

int dp_pin_adopt(uint64_t hash, const struct dp_pin_def *d, const int *map_fds)
{
	char path[4200];
	pin_path(hash, d, path, sizeof(path));
	int fd = bpf_obj_get(path);
	if (fd < 0)
		return -1;
	if (!pinned_fits(fd, d, map_fds)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Pin one loaded program (replacing a pin of that name); a failure is
 * logged: the next start loads again, nothing else is lost. */
void dp_pin_one(struct datapath *dp, uint64_t hash, const struct dp_pin_def *d, int fd)
{
	char path[4200];
	if (fd < 0)
		return;
	pin_path(hash, d, path, sizeof(path));
	unlink(path);
	if (bpf_obj_pin(fd, path) < 0)
		fibril_warn(dp->m, "cannot pin %s at %s: %s (the next start loads it again)", d->name,
			    path, strerror(errno));
}

void dp_pins_drop_others(uint64_t hash)
{
	char mine[64];
	snprintf(mine, sizeof(mine), PIN_PREFIX "%016llx_", (unsigned long long)hash);
	DIR *d = opendir(pin_dir());
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, PIN_PREFIX, strlen(PIN_PREFIX)) &&
		    strncmp(e->d_name, mine, strlen(mine)))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}
