/* fibril/config.h - configuration keys a module declares, and how it reads
 * their effective values.
 *
 * The agent's config is an INI file: an [agent] section plus one section per
 * module, named after the module. A module lists its keys in its descriptor;
 * the host rejects unknown keys, wrong types and out-of-range values with
 * file:line before anything starts, so a module's start hook can read its
 * values without re-checking them. */
#ifndef FIBRIL_CONFIG_H
#define FIBRIL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;

enum fibril_config_type {
	FIBRIL_CONFIG_STRING = 1,
	FIBRIL_CONFIG_INT,      /* signed 64-bit, checked against min..max */
	FIBRIL_CONFIG_BOOL,     /* true/false, yes/no, on/off, 1/0 */
	FIBRIL_CONFIG_PATH,     /* absolute path */
	FIBRIL_CONFIG_DURATION, /* 250ms, 5s, 2m, 1h; read as milliseconds */
	FIBRIL_CONFIG_LIST,     /* comma-separated words */
};

/* Optional extra check. Return 0 to accept; otherwise write a short reason
 * (it is printed after "file:line: [section] key: ") and return -EINVAL. */
typedef int (*fibril_config_check_fn)(const char *value, char *why, size_t why_len);

/* One key. The array grows by appending fields: the host walks it with the
 * element size the descriptor carries (config_key_sz, which FIBRIL_MODULE()
 * sets), so a module built against an older SDK still loads; fields it
 * does not have read as zero. */
struct fibril_config_key {
	const char *name;          /* NULL ends the list */
	enum fibril_config_type type;
	const char *default_value; /* NULL: no default (the key is optional) */
	const char *help;
	int64_t min, max;          /* INT and DURATION(ms); both 0: unbounded */
	fibril_config_check_fn check;
	/* --- ABI 1.4 --- */
	/* A former name of this key (after a rename), still accepted in the
	 * file and in --set with a warning naming the new one; NULL: none. */
	const char *deprecated_alias;
	/* --- ABI 1.10 --- */
	/* The default rarely fits a real node (an etcd address, a table of
	 * one's own): `fibril-agent --check` and the packages' postinst warn
	 * while the key is not set. (A C++17 module that lists the fields
	 * positionally, as tests/modules/cxxmod.cpp does, names it too, or
	 * -Wextra's missing-field-initializers warns; designated initializers,
	 * in C and C++20, need nothing.) */
	bool site_specific;
};

/* Effective value of one of the calling module's keys: the file's value, a
 * --set override, or the declared default; NULL when unset with no default. */
const char *fibril_config_string(struct fibril_module *m, const char *key);
int64_t fibril_config_int(struct fibril_module *m, const char *key);
bool fibril_config_bool(struct fibril_module *m, const char *key);
uint64_t fibril_config_duration_ms(struct fibril_module *m, const char *key);
/* Any section's value, e.g. ("agent", "state-dir"). */
const char *fibril_config_get(const char *section, const char *key);

#ifdef __cplusplus
}
#endif
#endif
