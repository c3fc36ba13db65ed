/* tests/modules/growmod.c - a module for tests/integration/abi_compat.sh
 * that exercises every growable SDK struct the host reads from a module:
 * its config_keys array (walked with the element size the module was built
 * with), a fibril_map_spec through fibril_map_open, and (SDK 1.4 builds) the
 * 1.4 fields map_extra and deprecated_alias. Built against the frozen
 * tests/compat/sdk-1.0 and sdk-1.3 headers as well as the current ones:
 *
 *   -DGM_NAME='"name"'  the module's name (and its route /v1/gm/NAME)
 *   -DGM_MAP='"name"'   the pin name of its map
 *   -DGM_MAP_TOO_BIG    hand fibril_map_open a spec longer than the host's,
 *                       with a non-zero byte the host does not know
 *   -DGM_KEYS_TOO_BIG   declare config keys longer than the host's, with a
 *                       non-zero byte the host does not know
 *
 * GET /v1/gm/NAME answers {"alpha","beta","gamma","map_rc","map_type",
 * "map_extra"}: the effective config values and what the map open gave. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/bpf.h>

#include <fibril/fibril.h>

#ifndef GM_NAME
#error "build with -DGM_NAME='\"name\"'"
#endif
#ifndef GM_MAP
#error "build with -DGM_MAP='\"name\"'"
#endif

static int g_map_rc = 1; /* 1: not opened yet */
static unsigned g_map_type;
static unsigned long long g_map_extra;

/* Three keys of three types: a host that walks the array with the wrong
 * element size reads the second and third from the wrong place. */
#if FIBRIL_ABI_MINOR >= 4 && defined(GM_KEYS_TOO_BIG)
struct big_key {
	struct fibril_config_key key;
	uint64_t future; /* a field of an SDK newer than the host */
};
static const struct big_key gm_big_keys[] = {
	{.key = {.name = "alpha", .type = FIBRIL_CONFIG_STRING, .default_value = "a-default"},
	 .future = 1},
	{.key = {.name = NULL}},
};
#define GM_KEYS (&gm_big_keys[0].key)
#define GM_KEY_SZ .config_key_sz = sizeof(struct big_key),
#else
static const struct fibril_config_key gm_keys[] = {
	{.name = "alpha", .type = FIBRIL_CONFIG_STRING, .default_value = "a-default",
	 .help = "a string"},
	{.name = "beta", .type = FIBRIL_CONFIG_INT, .default_value = "7", .min = 1, .max = 100,
	 .help = "an int"
#if FIBRIL_ABI_MINOR >= 4
	 , .deprecated_alias = "old-beta"
#endif
	},
	{.name = "gamma", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "a bool"},
	{.name = NULL},
};
#define GM_KEYS gm_keys
#define GM_KEY_SZ
#endif

/* The map's type and map_extra as the kernel has them. */
static int map_info(int fd)
{
	struct bpf_map_info info;
	union bpf_attr attr;
	memset(&info, 0, sizeof(info));
	memset(&attr, 0, sizeof(attr));
	attr.info.bpf_fd = (unsigned)fd;
	attr.info.info_len = sizeof(info);
	attr.info.info = (unsigned long)&info;
	if (syscall(__NR_bpf, BPF_OBJ_GET_INFO_BY_FD, &attr, sizeof(attr)) != 0)
		return -errno;
	g_map_type = info.type;
	g_map_extra = info.map_extra;
	return 0;
}

static void open_map(struct fibril_module *m)
{
	struct fibril_map *map = NULL;
#if defined(GM_MAP_TOO_BIG)
	struct {
		struct fibril_map_spec spec;
		uint64_t future; /* a field of an SDK newer than the host */
	} big = {.spec = {.sz = sizeof(big), .name = GM_MAP, .type = BPF_MAP_TYPE_HASH,
			  .key_size = 4, .value_size = 4, .max_entries = 16},
		 .future = 1};
	g_map_rc = fibril_map_open(m, &big.spec, &map);
#elif FIBRIL_ABI_MINOR >= 4
	/* A bloom filter with 3 hash functions: map_extra must reach the kernel. */
	struct fibril_map_spec spec = {.sz = sizeof(spec), .name = GM_MAP,
				       .type = BPF_MAP_TYPE_BLOOM_FILTER, .value_size = 4,
				       .max_entries = 64, .map_extra = 3};
	g_map_rc = fibril_map_open(m, &spec, &map);
#else
	struct fibril_map_spec spec = {.sz = sizeof(spec), .name = GM_MAP,
				       .type = BPF_MAP_TYPE_HASH, .key_size = 4, .value_size = 4,
				       .max_entries = 16};
	g_map_rc = fibril_map_open(m, &spec, &map);
#endif
	if (g_map_rc == 0)
		g_map_rc = map_info(fibril_map_fd(map));
}

static void state(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct fibril_module *m = ud;
	const char *alpha = fibril_config_string(m, "alpha");
	char buf[512];
#ifdef GM_KEYS_TOO_BIG
	long long beta = -1;
	int gamma = -1;
#else
	long long beta = (long long)fibril_config_int(m, "beta");
	int gamma = fibril_config_bool(m, "gamma");
#endif
	snprintf(buf, sizeof(buf),
		 "{\"alpha\":\"%s\",\"beta\":%lld,\"gamma\":%s,\"map_rc\":%d,\"map_type\":%u,"
		 "\"map_extra\":%llu}",
		 alpha ? alpha : "", beta, gamma ? "true" : "false", g_map_rc, g_map_type,
		 g_map_extra);
	fibril_resp_json(resp, 200, buf);
}

static int gm_init(struct fibril_module *m)
{
	return fibril_api_route(m, "GET", "/v1/gm/" GM_NAME, 0, state, m);
}

static int gm_start(struct fibril_module *m)
{
	open_map(m);
	return 0;
}

FIBRIL_MODULE(.name = GM_NAME, .version = "0.0.1", .description = "struct growth probe",
	      .config_keys = GM_KEYS, GM_KEY_SZ .init = gm_init, .start = gm_start);
