/* host/maps.c - the BPF map registry: opens (reuses, creates or recreates)
 * the pinned maps modules ask for under the agent's bpffs directory, mounts
 * bpffs when needed, keeps track of who owns which map, and lists and dumps
 * the maps for GET /v1/map and GET /v1/map/{name}.
 *
 * The registry is guarded by one mutex; a formatter runs with it held and
 * must not open or remove maps. */
#include "internal.h"
#include "struct_size.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/magic.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define MAPS_USE_VALGRIND_H 1
#endif
#endif

#define MAP_NAME_MAX 15
#define DUMP_MAX_ENTRIES 65536
#define FMT_KEY_LEN 256
#define FMT_VALUE_LEN 1024
#define BPFFS_ROOT "/sys/fs/bpf"

struct fibril_map {
	struct fibril_map_spec spec; /* spec.name points at name */
	char name[MAP_NAME_MAX + 1];
	char *pin;
	int fd;
	struct fibril_module *owner;
	enum fibril_map_origin origin;
	fibril_map_format_fn formatter;
	void *formatter_ud;
	struct fibril_map *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fibril_map *g_maps;
static char *g_pin_dir;
static bool g_pin_dir_ready;

/* ---- valgrind -------------------------------------------------------------
 * valgrind (3.19) checks the whole union bpf_attr of a bpf() call although
 * libbpf passes, and the kernel reads, only the leading fields it sets; and
 * it flags the NULL key that asks BPF_MAP_GET_NEXT_KEY for the first key.
 * Those reports are false positives, so the two calls that raise them (map
 * creation, which runs libbpf's feature probes, and get_next_key) run with
 * error reporting off. No-ops outside valgrind. */

static void vg_quiet_begin(void)
{
#ifdef MAPS_USE_VALGRIND_H
	VALGRIND_DISABLE_ERROR_REPORTING;
#endif
}

static void vg_quiet_end(void)
{
#ifdef MAPS_USE_VALGRIND_H
	VALGRIND_ENABLE_ERROR_REPORTING;
#endif
}

static int next_key(int fd, const void *key, void *next)
{
	vg_quiet_begin();
	int rc = bpf_map_get_next_key(fd, key, next);
	vg_quiet_end();
	return rc;
}

/* ---- map type classes --------------------------------------------------- */

enum map_class {
	CLASS_HASH,   /* iterate keys with get_next_key */
	CLASS_ARRAY,  /* keys are 0..max_entries-1, always all present */
	CLASS_OPAQUE, /* cannot be iterated from user space */
};

static enum map_class map_class_of(uint32_t type)
{
	switch (type) {
	case BPF_MAP_TYPE_HASH:
	case BPF_MAP_TYPE_LRU_HASH:
	case BPF_MAP_TYPE_PERCPU_HASH:
	case BPF_MAP_TYPE_LRU_PERCPU_HASH:
	case BPF_MAP_TYPE_LPM_TRIE:
		return CLASS_HASH;
	case BPF_MAP_TYPE_ARRAY:
	case BPF_MAP_TYPE_PERCPU_ARRAY:
		return CLASS_ARRAY;
	default:
		return CLASS_OPAQUE;
	}
}

static bool map_type_is_percpu(uint32_t type)
{
	return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
	       type == BPF_MAP_TYPE_LRU_PERCPU_HASH ||
	       type == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

/* Map types that take no key (ring buffers take no value either). */
static bool map_type_is_keyless(uint32_t type)
{
	return type == BPF_MAP_TYPE_RINGBUF || type == BPF_MAP_TYPE_USER_RINGBUF ||
	       type == BPF_MAP_TYPE_QUEUE || type == BPF_MAP_TYPE_STACK ||
	       type == BPF_MAP_TYPE_BLOOM_FILTER;
}

static bool map_type_is_valueless(uint32_t type)
{
	return type == BPF_MAP_TYPE_RINGBUF || type == BPF_MAP_TYPE_USER_RINGBUF;
}

static const char *map_type_name(uint32_t type)
{
	const char *s = libbpf_bpf_map_type_str((enum bpf_map_type)type);
	return s ? s : "unknown";
}

static const char *origin_name(enum fibril_map_origin o)
{
	switch (o) {
	case FIBRIL_MAP_CREATED:
		return "created";
	case FIBRIL_MAP_REUSED:
		return "reused";
	case FIBRIL_MAP_RECREATED:
		return "recreated";
	}
	return "unknown";
}

/* Bytes of one lookup buffer: per-CPU maps return one 8-byte aligned slot
 * per possible CPU. */
static size_t value_buf_size(const struct fibril_map_spec *spec)
{
	if (!map_type_is_percpu(spec->type))
		return spec->value_size;
	int ncpus = libbpf_num_possible_cpus();
	if (ncpus < 1)
		ncpus = 1;
	return (((size_t)spec->value_size + 7) & ~(size_t)7) * (size_t)ncpus;
}

/* ---- bpffs and the pin directory ---------------------------------------- */

int maps_init(const char *pin_dir)
{
	if (!pin_dir || pin_dir[0] != '/')
		return -EINVAL;
	pthread_mutex_lock(&g_lock);
	free(g_pin_dir);
	g_pin_dir = xstrdup(pin_dir);
	g_pin_dir_ready = false;
	pthread_mutex_unlock(&g_lock);
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

static struct fibril_map *registry_find(const char *name)
{
	for (struct fibril_map *m = g_maps; m; m = m->next)
		if (strcmp(m->name, name) == 0)
			return m;
	return NULL;
}

/* Take map out of the list; true when it was there. */
static bool registry_unlink(struct fibril_map *map)
{
	for (struct fibril_map **pp = &g_maps; *pp; pp = &(*pp)->next) {
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
	if (registry_find(spec->name)) {
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
	map->next = g_maps;
	g_maps = map;
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
	pthread_mutex_lock(&g_lock);
	rc = map_open_locked(m, &want, out);
	pthread_mutex_unlock(&g_lock);
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
	pthread_mutex_lock(&g_lock);
	map->formatter = fn;
	map->formatter_ud = ud;
	pthread_mutex_unlock(&g_lock);
}

/* ---- remove and release -------------------------------------------------- */

int fibril_map_remove(struct fibril_map *map)
{
	if (!map)
		return -EINVAL;
	pthread_mutex_lock(&g_lock);
	bool found = registry_unlink(map);
	pthread_mutex_unlock(&g_lock);
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
	pthread_mutex_lock(&g_lock);
	struct fibril_map **pp = &g_maps;
	while (*pp) {
		struct fibril_map *map = *pp;
		if (all || map->owner == owner) {
			*pp = map->next;
			map_free(map);
		} else {
			pp = &map->next;
		}
	}
	pthread_mutex_unlock(&g_lock);
}

void maps_release_owner(struct fibril_module *owner)
{
	release_maps(owner, false);
}

void maps_fini(void)
{
	release_maps(NULL, true);
	pthread_mutex_lock(&g_lock);
	free(g_pin_dir);
	g_pin_dir = NULL;
	g_pin_dir_ready = false;
	pthread_mutex_unlock(&g_lock);
}

/* ---- listing ------------------------------------------------------------- */

#define COUNT_BATCH 1024 /* entries per bpf_map_lookup_batch call when counting */

/* Count with bpf_map_lookup_batch: about n / COUNT_BATCH system calls
 * instead of n get_next_key calls (a full 128k-entry conntrack map: 128
 * calls, not 131072). -EINVAL/-ENOTSUP when the map type has no batch
 * operations (LPM tries), so that the caller walks the keys instead. */
static int64_t map_count_batch(const struct fibril_map *map)
{
	size_t vsz = value_buf_size(&map->spec);
	uint8_t *keys = xcalloc(COUNT_BATCH, map->spec.key_size);
	uint8_t *vals = xcalloc(COUNT_BATCH, vsz ? vsz : 1);
	uint64_t cursor = 0;
	bool first = true;
	int64_t n = 0;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	for (;;) {
		__u32 count = COUNT_BATCH;
		vg_quiet_begin();
		int rc = bpf_map_lookup_batch(map->fd, first ? NULL : &cursor, &cursor, keys, vals,
					      &count, &opts);
		vg_quiet_end();
		int e = rc < 0 ? errno : 0;
		first = false;
		n += count;
		if (rc < 0) {
			if (e != ENOENT) /* ENOENT: that was the last chunk */
				n = -e;
			break;
		}
	}
	free(keys);
	free(vals);
	return n;
}

/* Number of keys present, or -1 when the map cannot be iterated. */
static int64_t map_count_entries(const struct fibril_map *map)
{
	enum map_class cls = map_class_of(map->spec.type);
	if (cls == CLASS_ARRAY)
		return map->spec.max_entries;
	if (cls != CLASS_HASH)
		return -1;
	if (map->spec.type != BPF_MAP_TYPE_LPM_TRIE) {
		int64_t n = map_count_batch(map);
		if (n >= 0)
			return n;
	}
	uint8_t *cur = xcalloc(2, map->spec.key_size);
	uint8_t *next = cur + map->spec.key_size;
	int64_t n = 0;
	const void *prev = NULL;
	/* Bounded: concurrent deletes can restart the walk from the start. */
	while (n < (int64_t)map->spec.max_entries &&
	       next_key(map->fd, prev, next) == 0) {
		memcpy(cur, next, map->spec.key_size);
		prev = cur;
		n++;
	}
	free(cur);
	return n;
}

static int map_cmp_name(const void *a, const void *b)
{
	const struct fibril_map *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* The registry as an array sorted by name (caller frees); lock held. */
static struct fibril_map **maps_sorted(size_t *n)
{
	size_t count = 0;
	for (struct fibril_map *m = g_maps; m; m = m->next)
		count++;
	struct fibril_map **v = xcalloc(count, sizeof(*v));
	size_t i = 0;
	for (struct fibril_map *m = g_maps; m; m = m->next)
		v[i++] = m;
	qsort(v, count, sizeof(*v), map_cmp_name);
	*n = count;
	return v;
}

/* The map's description; "entries" is added by the caller. */
static struct json_object *map_to_json_uncounted(const struct fibril_map *map)
{
	struct json_object *o = json_object_new_object();
	const struct fibril_map_spec *s = &map->spec;
	json_object_object_add(o, "name", json_object_new_string(map->name));
	json_object_object_add(o, "type", json_object_new_int64(s->type));
	json_object_object_add(o, "type_name", json_object_new_string(map_type_name(s->type)));
	json_object_object_add(o, "key_size", json_object_new_int64(s->key_size));
	json_object_object_add(o, "value_size", json_object_new_int64(s->value_size));
	json_object_object_add(o, "max_entries", json_object_new_int64(s->max_entries));
	json_object_object_add(o, "flags", json_object_new_int64(s->map_flags));
	json_object_object_add(o, "pin", json_object_new_string(map->pin));
	json_object_object_add(o, "owner",
			       json_object_new_string(map->owner ? map->owner->name : "agent"));
	json_object_object_add(o, "origin", json_object_new_string(origin_name(map->origin)));
	return o;
}

static void add_entries(struct json_object *o, int64_t entries)
{
	json_object_object_add(o, "entries", entries < 0 ? NULL : json_object_new_int64(entries));
}

struct json_object *maps_list_json(void)
{
	struct json_object *arr = json_object_new_array();
	pthread_mutex_lock(&g_lock);
	size_t n;
	struct fibril_map **v = maps_sorted(&n);
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = map_to_json_uncounted(v[i]);
		add_entries(o, map_count_entries(v[i]));
		json_object_array_add(arr, o);
	}
	pthread_mutex_unlock(&g_lock);
	free(v);
	struct json_object *root = json_object_new_object();
	json_object_object_add(root, "maps", arr);
	return root;
}

/* GET /v1/map off the loop: the registry is copied on the loop (each map's
 * description, spec and a dup of its fd), the entries are counted on the
 * worker pool without the registry lock, and the answer is sent back on the
 * loop. A map walk (an LPM trie is walked key by key) never holds the loop
 * or the lock that fibril_map_open and fibril_map_remove take. */
struct map_count_job {
	struct fibril_response *resp; /* the deferred answer */
	size_t n;
	struct fibril_map *copies;    /* spec + dup'd fd, counted by the worker */
	struct json_object **descr;   /* each map's description */
	int64_t *entries;
};

static struct map_count_job *count_job_snapshot(void)
{
	struct map_count_job *j = xcalloc(1, sizeof(*j));
	pthread_mutex_lock(&g_lock);
	struct fibril_map **v = maps_sorted(&j->n);
	j->copies = xcalloc(j->n ? j->n : 1, sizeof(*j->copies));
	j->descr = xcalloc(j->n ? j->n : 1, sizeof(*j->descr));
	j->entries = xcalloc(j->n ? j->n : 1, sizeof(*j->entries));
	for (size_t i = 0; i < j->n; i++) {
		j->descr[i] = map_to_json_uncounted(v[i]);
		j->copies[i].spec = v[i]->spec;
		j->copies[i].spec.name = j->copies[i].name;
		memcpy(j->copies[i].name, v[i]->name, sizeof(j->copies[i].name));
		j->copies[i].fd = fcntl(v[i]->fd, F_DUPFD_CLOEXEC, 0);
	}
	pthread_mutex_unlock(&g_lock);
	free(v);
	return j;
}

static void count_job_work(void *ud)
{
	struct map_count_job *j = ud;
	for (size_t i = 0; i < j->n; i++)
		j->entries[i] = j->copies[i].fd < 0 ? -1 : map_count_entries(&j->copies[i]);
}

static void count_job_free(struct map_count_job *j)
{
	for (size_t i = 0; i < j->n; i++) {
		if (j->copies[i].fd >= 0)
			close(j->copies[i].fd);
		json_object_put(j->descr[i]);
	}
	free(j->copies);
	free(j->descr);
	free(j->entries);
	free(j);
}

static void count_job_done(void *ud, int status)
{
	struct map_count_job *j = ud;
	if (status) {
		fibril_resp_error(j->resp, 503, "the agent is stopping");
	} else {
		struct json_object *arr = json_object_new_array();
		for (size_t i = 0; i < j->n; i++) {
			add_entries(j->descr[i], j->entries[i]);
			json_object_array_add(arr, j->descr[i]);
			j->descr[i] = NULL; /* owned by arr */
		}
		struct json_object *root = json_object_new_object();
		json_object_object_add(root, "maps", arr);
		api_resp_object(j->resp, 200, root);
	}
	fibril_resp_send(j->resp);
	count_job_free(j);
}

/* ---- dumping ------------------------------------------------------------- */

/* Lowercase hex, bytes in groups of 4 separated by spaces; out holds at
 * least len * 9 / 4 + 2 bytes. */
static void hex_groups(const uint8_t *p, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";
	char *o = out;
	for (size_t i = 0; i < len; i++) {
		if (i && i % 4 == 0)
			*o++ = ' ';
		*o++ = digits[p[i] >> 4];
		*o++ = digits[p[i] & 0xf];
	}
	*o = '\0';
}

static struct json_object *hex_json(const uint8_t *p, size_t len)
{
	char *buf = xcalloc(1, len * 9 / 4 + 4);
	hex_groups(p, len, buf);
	struct json_object *s = json_object_new_string(buf);
	free(buf);
	return s;
}

/* A per-CPU value: each CPU's value_size bytes in hex, CPUs separated by
 * " | " (the 8-byte alignment padding is left out). */
static struct json_object *percpu_hex_json(const struct fibril_map_spec *spec, const uint8_t *p)
{
	size_t slot = ((size_t)spec->value_size + 7) & ~(size_t)7;
	size_t ncpus = value_buf_size(spec) / slot;
	size_t one = (size_t)spec->value_size * 9 / 4 + 4;
	char *buf = xcalloc(ncpus, one + 3);
	char *o = buf;
	for (size_t cpu = 0; cpu < ncpus; cpu++) {
		if (cpu)
			o = stpcpy(o, " | ");
		hex_groups(p + cpu * slot, spec->value_size, o);
		o += strlen(o);
	}
	struct json_object *s = json_object_new_string(buf);
	free(buf);
	return s;
}

static struct json_object *value_hex_json(const struct fibril_map_spec *spec, const uint8_t *v)
{
	if (map_type_is_percpu(spec->type))
		return percpu_hex_json(spec, v);
	return hex_json(v, spec->value_size);
}

static struct json_object *entry_json(const struct fibril_map *map, const uint8_t *key,
				      const uint8_t *value)
{
	struct json_object *e = json_object_new_object();
	if (map->formatter) {
		char k[FMT_KEY_LEN] = "", v[FMT_VALUE_LEN] = "";
		int rc = map->formatter(key, value, k, sizeof(k), v, sizeof(v), map->formatter_ud);
		if (rc >= 0) {
			k[sizeof(k) - 1] = '\0';
			v[sizeof(v) - 1] = '\0';
			json_object_object_add(e, "key", json_object_new_string(k));
			json_object_object_add(e, "value", json_object_new_string(v));
			return e;
		}
	}
	json_object_object_add(e, "key", hex_json(key, map->spec.key_size));
	json_object_object_add(e, "value", value_hex_json(&map->spec, value));
	return e;
}

struct dump_bufs {
	uint8_t *key, *next, *value;
};

/* Walk a hash-like map; returns true when capped. */
static bool dump_hash(const struct fibril_map *map, struct dump_bufs *b, struct json_object *arr)
{
	size_t ks = map->spec.key_size, n = 0, steps = 0;
	const void *prev = NULL;
	/* Bounded: concurrent deletes can restart the walk from the start. */
	while (steps++ < map->spec.max_entries &&
	       next_key(map->fd, prev, b->next) == 0) {
		if (n == DUMP_MAX_ENTRIES)
			return true;
		memcpy(b->key, b->next, ks);
		prev = b->key;
		if (bpf_map_lookup_elem(map->fd, b->key, b->value) != 0)
			continue; /* deleted meanwhile */
		json_object_array_add(arr, entry_json(map, b->key, b->value));
		n++;
	}
	return false;
}

static bool dump_array(const struct fibril_map *map, struct dump_bufs *b, struct json_object *arr)
{
	uint32_t max = map->spec.max_entries;
	for (uint32_t i = 0; i < max; i++) {
		if (i == DUMP_MAX_ENTRIES)
			return true;
		memcpy(b->key, &i, sizeof(i));
		if (bpf_map_lookup_elem(map->fd, b->key, b->value) != 0)
			continue;
		json_object_array_add(arr, entry_json(map, b->key, b->value));
	}
	return false;
}

static struct json_object *map_dump(const struct fibril_map *map)
{
	struct dump_bufs b;
	size_t ks = map->spec.key_size;
	b.key = xcalloc(2, ks);
	b.next = b.key + ks;
	b.value = xcalloc(1, value_buf_size(&map->spec));
	struct json_object *arr = json_object_new_array();
	bool truncated = map_class_of(map->spec.type) == CLASS_ARRAY ? dump_array(map, &b, arr)
								      : dump_hash(map, &b, arr);
	free(b.key);
	free(b.value);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(map->name));
	json_object_object_add(o, "formatted", json_object_new_boolean(map->formatter != NULL));
	json_object_object_add(o, "entries", arr);
	if (truncated)
		json_object_object_add(o, "truncated", json_object_new_boolean(1));
	return o;
}

int maps_dump_json(const char *name, struct json_object **out, char *err)
{
	*out = NULL;
	pthread_mutex_lock(&g_lock);
	const struct fibril_map *map = name ? registry_find(name) : NULL;
	int rc = 0;
	if (!map) {
		errbuf_set(err, "no map named '%s'", name ? name : "");
		rc = -ENOENT;
	} else if (map_class_of(map->spec.type) == CLASS_OPAQUE) {
		errbuf_set(err, "map '%s' (%s) cannot be dumped", name, map_type_name(map->spec.type));
		rc = -EOPNOTSUPP;
	} else {
		*out = map_dump(map);
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

/* ---- API routes ---------------------------------------------------------- */

static void route_map_list(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct fibril_response *d = fibril_resp_defer(resp);
	if (!d) {
		api_resp_object(resp, 200, maps_list_json());
		return;
	}
	struct map_count_job *j = count_job_snapshot();
	j->resp = d;
	if (fibril_work_submit(NULL, count_job_work, count_job_done, j)) {
		count_job_work(j); /* no worker pool: count here */
		count_job_done(j, 0);
	}
}

static void route_map_dump(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	char err[ERRBUF_LEN];
	struct json_object *obj;
	int rc = maps_dump_json(fibril_req_param(req, "name"), &obj, err);
	if (rc == 0)
		api_resp_object(resp, 200, obj);
	else
		fibril_resp_error(resp, rc == -ENOENT ? 404 : 400, "%s", err);
}

int maps_register_routes(void)
{
	int rc = api_route_host("GET", "/v1/map", 0, route_map_list, NULL);
	if (rc == 0)
		rc = api_route_host("GET", "/v1/map/{name}", 0, route_map_dump, NULL);
	return rc;
}
