/* fibril/module.h - the module contract: the descriptor a module exports,
 * its lifecycle hooks and the FIBRIL_MODULE() macro that declares it.
 *
 * A module is a shared object exporting exactly one symbol,
 * `fibril_module_entry`, a struct fibril_module_desc. Everything else in the
 * module stays hidden (build with -fvisibility=hidden). The descriptor starts
 * with its own size so that a module built against an older minor SDK (a
 * shorter struct) still loads: the host reads only the fields it carries and
 * treats the rest as absent. */
#ifndef FIBRIL_MODULE_H
#define FIBRIL_MODULE_H

#include <stdint.h>
#include <stddef.h>
#include <fibril/version.h>
#include <fibril/config.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_EXPORT __attribute__((visibility("default")))

/* The one symbol every module exports. */
#define FIBRIL_MODULE_ENTRY_SYMBOL "fibril_module_entry"

/* Opaque handle the host gives each loaded module. Every registration a
 * module makes (timers, fd watches, subscriptions, routes, services, maps,
 * worker jobs) is owned by its handle and undone by the host before the
 * module is unloaded. */
struct fibril_module;

/* Lifecycle hooks. Return 0 on success or a negative errno; on failure set a
 * message with fibril_module_set_error() so the host can say why.
 *   init  - allocate, declare routes, subscriptions and services. No I/O.
 *   start - may do I/O; runs after every module it requires/wants started.
 *   stop  - undo start; runs in reverse start order. Never fails.
 *   fini  - free what init allocated. */
typedef int (*fibril_init_fn)(struct fibril_module *m);
typedef int (*fibril_start_fn)(struct fibril_module *m);
typedef void (*fibril_stop_fn)(struct fibril_module *m);
typedef void (*fibril_fini_fn)(struct fibril_module *m);
/* ABI 1.1: write a one-line human summary (e.g. "12/254 allocated") into
 * buf; return its length or a negative errno. */
typedef int (*fibril_summary_fn)(struct fibril_module *m, char *buf, size_t len);

struct fibril_module_desc {
	uint32_t sz;             /* sizeof(struct fibril_module_desc) as built */
	uint16_t abi_major;      /* FIBRIL_ABI_MAJOR as built */
	uint16_t abi_minor;      /* FIBRIL_ABI_MINOR as built */
	const char *signature;   /* FIBRIL_BUILD_SIGNATURE as built */
	const char *name;        /* unique, [a-z0-9-], also its config section */
	const char *version;
	const char *description;
	const char *const *provides; /* NULL-terminated capability names */
#ifdef __cplusplus
	/* `requires` is a keyword in C++20: the same member, another name. */
	const char *const *requires_; /* hard: capabilities that must be present */
#else
	const char *const *requires; /* hard: capabilities that must be present */
#endif
	const char *const *wants;    /* soft: started first when present */
	const struct fibril_config_key *config_keys; /* ends with a key whose name is NULL */
	fibril_init_fn init;
	fibril_start_fn start;
	fibril_stop_fn stop;
	fibril_fini_fn fini;
	/* --- ABI 1.1 --- */
	fibril_summary_fn summary;
	/* --- ABI 1.4 --- */
	/* sizeof(struct fibril_config_key) as built: the stride of config_keys.
	 * FIBRIL_MODULE() sets it. 0 (a descriptor of ABI 1.3 or older, which
	 * has no such field) means the key as of the descriptor's abi_minor. */
	uint32_t config_key_sz;
};

#ifndef __cplusplus
/* Declare the module. Use once per module, at file scope:
 *
 *   FIBRIL_MODULE(.name = "hello", .version = "1.0",
 *                 .description = "says hello",
 *                 .provides = FIBRIL_LIST("greeting"),
 *                 .init = hello_init, .start = hello_start);
 */
#define FIBRIL_MODULE(...)                                                   \
	FIBRIL_EXPORT const struct fibril_module_desc fibril_module_entry = { \
		.sz = sizeof(struct fibril_module_desc),                      \
		.abi_major = FIBRIL_ABI_MAJOR,                                \
		.abi_minor = FIBRIL_ABI_MINOR,                                \
		.signature = FIBRIL_BUILD_SIGNATURE,                          \
		.config_key_sz = sizeof(struct fibril_config_key),            \
		__VA_ARGS__}

/* A NULL-terminated list of strings for provides/requires/wants. */
#define FIBRIL_LIST(...) ((const char *const[]){__VA_ARGS__, NULL})
#else
/* C++ (see the end of this header): FIBRIL_MODULE(...) takes C++20
 * designated initializers, which must follow the member order (name,
 * version, description, provides, requires_, wants, config_keys, init,
 * start, stop, fini, summary). C++17 has none: write a constexpr function
 * that fills fibril_module_desc_init() and pass its call to
 * FIBRIL_MODULE_DESC(). C++ has no compound literals: declare the lists
 * with FIBRIL_DEFINE_LIST(). */
#define FIBRIL_LIST(...) FIBRIL_LIST_is_C_only__use_FIBRIL_DEFINE_LIST_in_Cxx
#endif

/* A named NULL-terminated list of strings, for C and C++ alike:
 *   FIBRIL_DEFINE_LIST(my_provides, "greeting", "hello");
 *   ... .provides = my_provides ... */
#define FIBRIL_DEFINE_LIST(name, ...) static const char *const name[] = {__VA_ARGS__, NULL}

/* A start hook that has to wait (for a server, a first list, a lease)
 * returns FIBRIL_START_PENDING and later calls fibril_module_start_done() on
 * the loop thread with 0 or a negative errno. The host keeps running the
 * loop meanwhile and fails the start when [agent] start-timeout passes. */
#define FIBRIL_START_PENDING 1
void fibril_module_start_done(struct fibril_module *m, int rc);

/* Module-private data, set in init, read anywhere. */
void fibril_module_set_data(struct fibril_module *m, void *data);
void *fibril_module_data(const struct fibril_module *m);
const char *fibril_module_name(const struct fibril_module *m);

/* Record why a hook failed; shown in the log and in /v1/status. */
void fibril_module_set_error(struct fibril_module *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Paths the agent was configured with ([agent] state-dir, run-dir, ...).
 * A module keeps its own files under <state-dir>/<module name>/. */
const char *fibril_state_dir(void);
const char *fibril_run_dir(void);

/* State files (SDK 1.3): `name` in the directory dirfd holds data durably,
 * or is as it was - a crash never leaves half a file: write a temp file
 * ".<name>.<6 random characters>.tmp" of its own (created with mode and
 * O_EXCL, so two writers of one name never share it; SDK 1.4), fsync it,
 * rename it over name, fsync the directory.
 * fibril_state_remove unlinks name (gone already is fine) and fsyncs the
 * directory. Both return 0 or a negative errno. */
int fibril_state_write_atomic(int dirfd, const char *name, const void *data, size_t len,
			      unsigned int mode);
int fibril_state_remove(int dirfd, const char *name);

#ifdef __cplusplus
}

/* The descriptor's fixed head, for C++ (constexpr, so the descriptor is
 * constant data as in C, read before any of the module's code runs). */
static constexpr fibril_module_desc fibril_module_desc_init()
{
	fibril_module_desc d{};
	d.sz = sizeof(fibril_module_desc);
	d.abi_major = FIBRIL_ABI_MAJOR;
	d.abi_minor = FIBRIL_ABI_MINOR;
	d.signature = FIBRIL_BUILD_SIGNATURE;
	d.config_key_sz = sizeof(fibril_config_key);
	return d;
}

/* Completes a C++20 designated descriptor (the head it may not repeat). */
static constexpr fibril_module_desc fibril_module_desc_finish(fibril_module_desc d)
{
	const fibril_module_desc head = fibril_module_desc_init();
	d.sz = head.sz;
	d.abi_major = head.abi_major;
	d.abi_minor = head.abi_minor;
	d.signature = head.signature;
	d.config_key_sz = head.config_key_sz;
	return d;
}

/* C++17 and C++20: the descriptor from a constant expression. */
#define FIBRIL_MODULE_DESC(expr)                                                      \
	extern "C" FIBRIL_EXPORT const fibril_module_desc fibril_module_entry;       \
	extern "C" const fibril_module_desc fibril_module_entry = (expr)

/* C++20: FIBRIL_MODULE(.name = "hello", .init = hello_init) - designated
 * initializers in member order, starting at .name. Members left out are
 * zero, as in C (g++ before 14 would warn about them under -Wextra). */
#define FIBRIL_MODULE(...)                                                              \
	_Pragma("GCC diagnostic push")                                                  \
	_Pragma("GCC diagnostic ignored \"-Wmissing-field-initializers\"")              \
	FIBRIL_MODULE_DESC(fibril_module_desc_finish(fibril_module_desc{.sz = 0, __VA_ARGS__})); \
	_Pragma("GCC diagnostic pop")
#endif
#endif
