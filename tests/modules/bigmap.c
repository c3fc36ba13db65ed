/* tests/modules/bigmap.c - a test module that opens an LPM trie "tmbig"
 * (which has no batch operations, so it is counted key by key) and fills it
 * in start with `entries` /32 keys, for the tests of GET /v1/map's count
 * (tests/integration/map_count.sh). Built by the test itself. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/bpf.h>

#include <fibril/fibril.h>

static int bigmap_init(struct fibril_module *m)
{
	(void)m;
	return 0;
}

static int update(int fd, const void *key, const void *value)
{
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (uint32_t)fd;
	attr.key = (uint64_t)(uintptr_t)key;
	attr.value = (uint64_t)(uintptr_t)value;
	attr.flags = BPF_ANY;
	return (int)syscall(__NR_bpf, BPF_MAP_UPDATE_ELEM, &attr, sizeof(attr));
}

static int bigmap_start(struct fibril_module *m)
{
	int64_t n = fibril_config_int(m, "entries");
	struct fibril_map_spec spec = {.sz = sizeof(spec), .name = "tmbig", .type = BPF_MAP_TYPE_LPM_TRIE,
				       .key_size = 8, .value_size = 4, .max_entries = (uint32_t)n,
				       .map_flags = BPF_F_NO_PREALLOC};
	struct fibril_map *map;
	int rc = fibril_map_open(m, &spec, &map);
	if (rc)
		return rc;
	int fd = fibril_map_fd(map);
	for (int64_t i = 0; i < n; i++) {
		uint32_t key[2] = {32, (uint32_t)i}, value = 1;
		if (update(fd, key, &value))
			return -errno;
	}
	return 0;
}

static const struct fibril_config_key bigmap_keys[] = {
	{.name = "entries", .type = FIBRIL_CONFIG_INT, .default_value = "1000", .help = "keys to insert",
	 .min = 1, .max = 4000000},
	{0},
};

FIBRIL_MODULE(.name = "bigmap", .version = "0.0.1", .description = "a big LPM trie for map tests",
	      .config_keys = bigmap_keys, .init = bigmap_init, .start = bigmap_start);
