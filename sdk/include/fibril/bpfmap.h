/* fibril/bpfmap.h - the BPF map registry.
 *
 * Modules open their pinned maps through the host: the host pins each map
 * under <bpffs-dir>/<name> (mounting bpffs if needed), reuses an existing pin
 * whose spec matches, and recreates one whose spec differs (logged, as
 * Cilium's Recreate). Every map opened here is listed by GET /v1/map and
 * `fibril map list`, and its entries dumped by `fibril map dump NAME`, in
 * hex unless the module registers a formatter. */
#ifndef FIBRIL_BPFMAP_H
#define FIBRIL_BPFMAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_map;

/* A spec grows by appending fields (see "Compatibility rules for vendors" in
 * docs/ARCHITECTURE.md): set sz to sizeof as you built it; a field your
 * SDK does not have reads as zero on a newer host, and a newer field you set
 * on an older host is refused with -E2BIG. */
struct fibril_map_spec {
	uint32_t sz;          /* sizeof(struct fibril_map_spec) */
	const char *name;     /* pin name: [A-Za-z0-9_], at most 15 chars */
	uint32_t type;        /* enum bpf_map_type */
	uint32_t key_size;
	uint32_t value_size;
	uint32_t max_entries;
	uint32_t map_flags;   /* BPF_F_* */
	/* --- ABI 1.4 --- */
	uint64_t map_extra;   /* the kernel's map_extra: a bloom filter's number of
			       * hash functions (1-15, 0: 5), an arena's address;
			       * part of the spec a reused pin must match */
};

/* Result of an open: whether the pin was reused, created or recreated. */
enum fibril_map_origin {
	FIBRIL_MAP_CREATED = 1,
	FIBRIL_MAP_REUSED,
	FIBRIL_MAP_RECREATED,
};

/* Open or create; returns 0 and *out, or a negative errno. */
int fibril_map_open(struct fibril_module *m, const struct fibril_map_spec *spec,
		    struct fibril_map **out);
int fibril_map_fd(const struct fibril_map *map);
enum fibril_map_origin fibril_map_origin(const struct fibril_map *map);
/* Unpin and close (e.g. a map the module no longer uses). */
int fibril_map_remove(struct fibril_map *map);

/* Render one entry for dumps. Write NUL-terminated text into key_out and
 * value_out; return 0, FIBRIL_MAP_FORMAT_SKIP to leave the entry out of
 * the dump (e.g. an array slot never used; SDK 1.8, a macro, no symbol:
 * a host older than 1.8 refuses a module built with it), or a negative
 * errno to fall back to hex. */
#define FIBRIL_MAP_FORMAT_SKIP 1
typedef int (*fibril_map_format_fn)(const void *key, const void *value,
				    char *key_out, size_t key_len,
				    char *value_out, size_t value_len, void *ud);
void fibril_map_set_formatter(struct fibril_map *map, fibril_map_format_fn fn, void *ud);

#ifdef __cplusplus
}
#endif
#endif
