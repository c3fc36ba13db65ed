/* host/maps.c - the BPF map registry's lifecycle half: opens (reuses,
 * creates or recreates) the pinned maps modules ask for under the agent's
 * bpffs directory, mounts bpffs when needed, keeps track of who owns which
 * map, and removes and releases them. Listing and dumping them for the API
 * is host/maps_view.c; what both share is host/maps_int.h. */
#include "maps_int.h"
#include <fibril/compat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#define BPFFS_ROOT "/sys/fs/bpf"

pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
struct fibril_map *maps_list;
static char *g_pin_dir;
static bool g_pin_dir_ready;

/* ---- bpffs and the pin directory ---------------------------------------- */

int maps_init(const char *pin_dir)
{
	if (!pin_dir || pin_dir[0] != '/')
		return -EINVAL;
	pthread_mutex_lock(&maps_lock);
	free(g_pin_dir);
	g_pin_dir = xstrdup(pin_dir);
	g_pin_dir_ready = false;
	pthread_mutex_unlock(&maps_lock);
	return 0;
}

/* The nearest existing directory at or above path. */
static void existing_ancestor(const char *path, char *out, size_t len)
{
	snprintf(out, len, "%s", path);
	struct stat st;
	while (stat(out, &st) != 0) {
		char *slash = strrchr(out, '/');
		if (!slash || slash == out) {
			snprintf(out, len, "/");
			return;
		}
		*slash = '\0';
	}
}

static bool is_bpffs(const char *path)
{
	struct statfs sfs;
	return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == (unsigned long)BPF_FS_MAGIC;
}

static bool under_bpffs_root(const char *path)
{
	size_t n = strlen(BPFFS_ROOT);
	return strncmp(path, BPFFS_ROOT, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int mount_bpffs(const char *where)
{
	if (mount("bpf", where, "bpf", 0, NULL) != 0) {
		int e = errno;
		host_error("cannot mount bpffs on %s: %s", where, strerror(e));
		return -e;
	}
	host_info("mounted bpffs on %s", where);
	/* A mount namespace of its own (`ip netns exec` makes one): this bpffs
	 * and every pin in it die with the agent. */
	struct stat self_ns, init_ns;
	if (stat("/proc/self/ns/mnt", &self_ns) == 0 && stat("/proc/1/ns/mnt", &init_ns) == 0 &&
	    (self_ns.st_ino != init_ns.st_ino || self_ns.st_dev != init_ns.st_dev))
		host_warn("the bpffs on %s is private to the agent's mount namespace (not PID 1's): "
			  "pinned maps will not outlive the agent; start it with the host's mounts "
			  "(e.g. nsenter --net=/run/netns/NAME, not ip netns exec)",
			  where);
	return 0;
}

/* Mount bpffs where the pin directory needs it, then create the directory. */
static int pin_dir_prepare(const char *dir)
{
	char ancestor[PATH_MAX];
	existing_ancestor(dir, ancestor, sizeof(ancestor));
	int rc = 0;
	if (!is_bpffs(ancestor)) {
		if (under_bpffs_root(dir)) {
			rc = mount_bpffs(BPFFS_ROOT);
		} else {
			rc = mkdir_p(dir, 0700);
			if (rc == 0)
				rc = mount_bpffs(dir);
		}
	}
	if (rc == 0)
		rc = mkdir_p(dir, 0700);
	if (rc < 0)
		host_error("cannot prepare the BPF pin directory %s: %s", dir, strerror(-rc));
	return rc;
}

static int pin_dir_ensure(void)
{
	if (!g_pin_dir) {
		host_error("BPF map registry used before maps_init()");
		return -ENODEV;
	}
	if (g_pin_dir_ready)
		return 0;
	int rc = pin_dir_prepare(g_pin_dir);
	g_pin_dir_ready = rc == 0;
	return rc;
}

/* ---- registry ------------------------------------------------------------ */

struct fibril_map *maps_registry_find(const char *name)
{
	for (struct fibril_map *m = maps_list; m; m = m->next)
		if (strcmp(m->name, name) == 0)
			return m;
	return NULL;
}

/* Take map out of the list; true when it was there. */
static bool registry_unlink(struct fibril_map *map)
{
	for (struct fibril_map **pp = &maps_list; *pp; pp = &(*pp)->next) {
		if (*pp == map) {
			*pp = map->next;
			return true;
		}
	}
	return false;
}

static void map_free(struct fibril_map *map)
{
	if (map->fd >= 0)
		close(map->fd);
	free(map->pin);
	free(map);
}

/* ---- open ---------------------------------------------------------------- */

static bool name_is_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > MAP_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_';
		if (!ok)
			return false;
	}
	return true;
}

/* NULL when the spec is usable, else what is wrong with it. */
static const char *spec_problem(const struct fibril_map_spec *spec)
{
	if (!spec->name || !name_is_valid(spec->name))
		return "name must be 1-15 characters of [A-Za-z0-9_]";
	if (spec->type == BPF_MAP_TYPE_UNSPEC)
		return "type is not set";
	if (spec->key_size == 0 && !map_type_is_keyless(spec->type))
		return "key_size is zero";
	if (spec->value_size == 0 && !map_type_is_valueless(spec->type))
		return "value_size is zero";
	if (spec->max_entries == 0)
		return "max_entries is zero";
	return NULL;
}

/* Copy the caller's spec (of the size it was built with) into *out by the
 * SDK's growth rule, then check it. 0, or -EINVAL / -E2BIG with a warning
 * naming the module and the map. */
static int spec_validate(const struct fibril_module *m, const struct fibril_map_spec *spec,
			 struct fibril_map_spec *out)
{
	const char *who = m ? fibril_module_name(m) : "(host)";
	char why[200];
	int rc = fibril_struct_copy_in(out, sizeof(*out), spec, spec ? spec->sz : 0,
				       FIBRIL_OFFSETOFEND(struct fibril_map_spec, sz),
				       "struct fibril_map_spec", why, sizeof(why));
	if (rc < 0) {
		host_warn("module %s: map open refused: %s", who, why);
		return rc;
	}
	out->sz = sizeof(*out);
	const char *problem = spec_problem(out);
	if (problem) {
		host_warn("module %s: map '%s' refused: %s", who, out->name ? out->name : "?", problem);
		return -EINVAL;
	}
	return 0;
}

static void spec_describe(const struct fibril_map_spec *s, char *buf, size_t len)
{
	snprintf(buf, len, "type=%s, key=%u, value=%u, max=%u, flags=0x%x, extra=%llu",
		 map_type_name(s->type), s->key_size, s->value_size, s->max_entries, s->map_flags,
		 (unsigned long long)s->map_extra);
}

/* Whether fd is a BPF map (a pin may also hold a program or a link). */
static bool fd_is_map(int fd)
{
	char link[64], target[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return true; /* no /proc: let the info query decide */
	target[n] = '\0';
	return strcmp(target, "anon_inode:bpf-map") == 0;
}

/* The spec of the map behind fd, read from the kernel. */
static int spec_of_fd(int fd, struct fibril_map_spec *out)
{
	if (!fd_is_map(fd))
		return -EEXIST;
	struct bpf_map_info info;
	uint32_t len = sizeof(info);
	memset(&info, 0, sizeof(info));
	int rc = bpf_obj_get_info_by_fd(fd, &info, &len);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	out->sz = sizeof(*out);
	out->type = info.type;
	out->key_size = info.key_size;
	out->value_size = info.value_size;
	out->max_entries = info.max_entries;
	out->map_flags = info.map_flags;
	out->map_extra = info.map_extra;
	return 0;
}

static bool spec_equal(const struct fibril_map_spec *a, const struct fibril_map_spec *b)
{
	return a->type == b->type && a->key_size == b->key_size &&
	       a->value_size == b->value_size && a->max_entries == b->max_entries &&
	       a->map_flags == b->map_flags && a->map_extra == b->map_extra;
}

static int map_create_pinned(const struct fibril_map_spec *spec, const char *path)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = spec->map_flags,
		    .map_extra = spec->map_extra);
	vg_quiet_begin();
	int fd = bpf_map_create((enum bpf_map_type)spec->type, spec->name, spec->key_size,
				spec->value_size, spec->max_entries, &opts);
	vg_quiet_end();
	if (fd < 0) {
		host_warn("map %s: cannot create: %s", spec->name, strerror(-fd));
		return fd;
	}
	int rc = bpf_obj_pin(fd, path);
	if (rc < 0) {
		host_warn("map %s: cannot pin at %s: %s", spec->name, path, strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

/* Reuse the pin at path when its spec matches, else replace it. Sets
 * *origin; returns the fd or a negative errno. */
static int map_reuse_or_recreate(const struct fibril_map_spec *want, const char *path, int fd,
				 enum fibril_map_origin *origin)
{
	struct fibril_map_spec have;
	int rc = spec_of_fd(fd, &have);
	if (rc < 0) {
		host_warn("map %s: pin %s is not a readable BPF map: %s", want->name, path,
			  rc == -EEXIST ? "another kind of object is pinned there" : strerror(-rc));
		close(fd);
		return rc;
	}
	if (spec_equal(&have, want)) {
		*origin = FIBRIL_MAP_REUSED;
		return fd;
	}
	char have_s[160], want_s[160];
	spec_describe(&have, have_s, sizeof(have_s));
	spec_describe(want, want_s, sizeof(want_s));
	host_warn("map %s: pinned spec (%s) differs from wanted (%s); recreating", want->name,
		  have_s, want_s);
	close(fd);
	if (unlink(path) != 0 && errno != ENOENT) {
		int e = errno;
		host_warn("map %s: cannot remove the old pin %s: %s", want->name, path, strerror(e));
		return -e;
	}
	*origin = FIBRIL_MAP_RECREATED;
	return map_create_pinned(want, path);
}

static int map_get_fd(const struct fibril_map_spec *spec, const char *path,
		      enum fibril_map_origin *origin)
{
	int fd = bpf_obj_get(path);
	if (fd >= 0)
		return map_reuse_or_recreate(spec, path, fd, origin);
	if (fd != -ENOENT) {
		host_warn("map %s: cannot open the pin %s: %s", spec->name, path, strerror(-fd));
		return fd;
	}
	*origin = FIBRIL_MAP_CREATED;
	return map_create_pinned(spec, path);
}

static struct fibril_map *map_new(struct fibril_module *owner, const struct fibril_map_spec *spec)
{
	struct fibril_map *map = xcalloc(1, sizeof(*map));
	map->spec = *spec;
	map->spec.sz = sizeof(map->spec);
	snprintf(map->name, sizeof(map->name), "%s", spec->name);
	map->spec.name = map->name;
	map->owner = owner;
	map->fd = -1;
	size_t len = strlen(g_pin_dir) + 1 + strlen(map->name) + 1;
	map->pin = xcalloc(1, len);
	snprintf(map->pin, len, "%s/%s", g_pin_dir, map->name);
	return map;
}

static int map_open_locked(struct fibril_module *owner, const struct fibril_map_spec *spec,
			   struct fibril_map **out)
{
	int rc = pin_dir_ensure();
	if (rc < 0)
		return rc;
	if (maps_registry_find(spec->name)) {
		host_warn("map %s: already opened in this agent", spec->name);
		return -EEXIST;
	}
	struct fibril_map *map = map_new(owner, spec);
	int fd = map_get_fd(&map->spec, map->pin, &map->origin);
	if (fd < 0) {
		map_free(map);
		return fd;
	}
	map->fd = fd;
	map->next = maps_list;
	maps_list = map;
	host_debug("map %s: %s at %s", map->name, origin_name(map->origin), map->pin);
	*out = map;
	return 0;
}

int fibril_map_open(struct fibril_module *m, const struct fibril_map_spec *spec,
		    struct fibril_map **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	struct fibril_map_spec want;
	int rc = spec_validate(m, spec, &want);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&maps_lock);
	rc = map_open_locked(m, &want, out);
	pthread_mutex_unlock(&maps_lock);
	return rc;
}

int fibril_map_fd(const struct fibril_map *map)
{
	return map ? map->fd : -EINVAL;
}

enum fibril_map_origin fibril_map_origin(const struct fibril_map *map)
{
	return map ? map->origin : (enum fibril_map_origin)0;
}

void fibril_map_set_formatter(struct fibril_map *map, fibril_map_format_fn fn, void *ud)
{
	if (!map)
		return;
	pthread_mutex_lock(&maps_lock);
	map->formatter = fn;
	map->formatter_ud = ud;
	pthread_mutex_unlock(&maps_lock);
}

/* ---- remove and release -------------------------------------------------- */

int fibril_map_remove(struct fibril_map *map)
{
	if (!map)
		return -EINVAL;
	pthread_mutex_lock(&maps_lock);
	bool found = registry_unlink(map);
	pthread_mutex_unlock(&maps_lock);
	if (!found)
		return -ENOENT;
	int rc = 0;
	if (unlink(map->pin) != 0 && errno != ENOENT) {
		rc = -errno;
		host_warn("map %s: cannot remove the pin %s: %s", map->name, map->pin,
			  strerror(errno));
	}
	map_free(map);
	return rc;
}

/* Drop every map of owner (all maps when all is true); pins stay. */
static void release_maps(struct fibril_module *owner, bool all)
{
	pthread_mutex_lock(&maps_lock);
	struct fibril_map **pp = &maps_list;
	while (*pp) {
		struct fibril_map *map = *pp;
		if (all || map->owner == owner) {
			*pp = map->next;
			map_free(map);
		} else {
			pp = &map->next;
		}
	}
	pthread_mutex_unlock(&maps_lock);
}

void maps_release_owner(struct fibril_module *owner)
{
	release_maps(owner, false);
}

void maps_fini(void)
{
	release_maps(NULL, true);
	pthread_mutex_lock(&maps_lock);
	free(g_pin_dir);
	g_pin_dir = NULL;
	g_pin_dir_ready = false;
	pthread_mutex_unlock(&maps_lock);
}

