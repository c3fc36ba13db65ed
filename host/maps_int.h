/* host/maps_int.h - what the two halves of the BPF map registry share:
 * host/maps.c (open, pin, remove, release: the maps' lifecycle) and
 * host/maps_view.c (listing, counting and dumping them for the API). The
 * registry (maps_list) is guarded by maps_lock; a formatter runs with it
 * held and must not open or remove maps. Private to the host. */
#ifndef FIBRIL_HOST_MAPS_INT_H
#define FIBRIL_HOST_MAPS_INT_H

#include "internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

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

HIDDEN extern pthread_mutex_t maps_lock;
HIDDEN extern struct fibril_map *maps_list; /* guarded by maps_lock */

/* The registered map called name, or NULL; maps_lock held. */
HIDDEN struct fibril_map *maps_registry_find(const char *name);

/* ---- valgrind -------------------------------------------------------------
 * valgrind (3.19) checks the whole union bpf_attr of a bpf() call although
 * libbpf passes, and the kernel reads, only the leading fields it sets; and
 * it flags the NULL key that asks BPF_MAP_GET_NEXT_KEY for the first key.
 * Those reports are false positives, so the two calls that raise them (map
 * creation, which runs libbpf's feature probes, and get_next_key) run with
 * error reporting off. No-ops outside valgrind. */

static inline void vg_quiet_begin(void)
{
#ifdef MAPS_USE_VALGRIND_H
	VALGRIND_DISABLE_ERROR_REPORTING;
#endif
}

static inline void vg_quiet_end(void)
{
#ifdef MAPS_USE_VALGRIND_H
	VALGRIND_ENABLE_ERROR_REPORTING;
#endif
}

static inline int next_key(int fd, const void *key, void *next)
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

static inline enum map_class map_class_of(uint32_t type)
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

static inline bool map_type_is_percpu(uint32_t type)
{
	return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
	       type == BPF_MAP_TYPE_LRU_PERCPU_HASH ||
	       type == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

/* Map types that take no key (ring buffers take no value either). */
static inline bool map_type_is_keyless(uint32_t type)
{
	return type == BPF_MAP_TYPE_RINGBUF || type == BPF_MAP_TYPE_USER_RINGBUF ||
	       type == BPF_MAP_TYPE_QUEUE || type == BPF_MAP_TYPE_STACK ||
	       type == BPF_MAP_TYPE_BLOOM_FILTER;
}

static inline bool map_type_is_valueless(uint32_t type)
{
	return type == BPF_MAP_TYPE_RINGBUF || type == BPF_MAP_TYPE_USER_RINGBUF;
}

static inline const char *map_type_name(uint32_t type)
{
	const char *s = libbpf_bpf_map_type_str((enum bpf_map_type)type);
	return s ? s : "unknown";
}

static inline const char *origin_name(enum fibril_map_origin o)
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
static inline size_t value_buf_size(const struct fibril_map_spec *spec)
{
	if (!map_type_is_percpu(spec->type))
		return spec->value_size;
	int ncpus = libbpf_num_possible_cpus();
	if (ncpus < 1)
		ncpus = 1;
	return (((size_t)spec->value_size + 7) & ~(size_t)7) * (size_t)ncpus;
}

#endif
