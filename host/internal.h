/* host/internal.h - what the parts of the host runtime (libfibril) share
 * with each other and with the agent's main; what the library helpers
 * (lib/) offer the host comes with lib/lib_int.h. Nothing here is public
 * SDK: modules see only the SDK headers. */
#ifndef FIBRIL_HOST_INTERNAL_H
#define FIBRIL_HOST_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

#include <fibril/fibril.h>

/* the library helpers (lib/): utilities, journal and metrics registry */
#include "lib_int.h"

/* ---- logging (log.c) -------------------------------------------------- */
HIDDEN void log_set_level(enum fibril_log_level level);
HIDDEN int log_parse_level(const char *s, enum fibril_log_level *out);
HIDDEN void host_log(enum fibril_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define host_error(...) host_log(FIBRIL_LOG_ERROR, __VA_ARGS__)
#define host_warn(...) host_log(FIBRIL_LOG_WARN, __VA_ARGS__)
#define host_info(...) host_log(FIBRIL_LOG_INFO, __VA_ARGS__)
#define host_debug(...) host_log(FIBRIL_LOG_DEBUG, __VA_ARGS__)

/* ---- the start, told beside the API socket (start_status.c) ----------- */
HIDDEN void start_status_begin(const char *socket_path);
HIDDEN void start_status_waiting(const char *what);
HIDDEN void start_status_failed(const char *cause);
HIDDEN void start_status_done(void);

/* ---- config (config.c) ------------------------------------------------ */
/* Lifecycle of the config store:
 *   config_reset(); config_declare("agent", agent_keys);
 *   config_load_file(path) (raw entries, remembered with file:line);
 *   config_set_override("section.key=value") for each --set;
 *   config_validate_section("agent") -> now [agent] values are readable;
 *   config_declare(module, its keys) for every loaded module;
 *   config_declare_dynamic("providers", capabilities) for [providers];
 *   config_validate_all() -> rejects unknown sections/keys, types, ranges.
 * Every error is one line "file:line: what is wrong" (or "--set ...: ...")
 * written to err (ERRBUF_LEN). */
HIDDEN void config_reset(void);
HIDDEN int config_declare(const char *section, const struct fibril_config_key *keys);
/* A loaded module's section: its config_keys array walked with the element
 * size its descriptor carries (the SDK's growth rule), copied. */
HIDDEN int config_declare_module(const struct fibril_module *m, char *err);
/* A section whose keys are the given names, each a free-form string value. */
HIDDEN int config_declare_dynamic(const char *section, const char *const *names, size_t n,
				  const char *help);
HIDDEN int config_load_file(const char *path, char *err);
/* PATH (when it exists, or always when required), then PATH.d/NAME.conf in
 * name order: a later file overrides what an earlier one set; a key twice
 * in one file is an error (host/config_sources.c). */
HIDDEN int config_load_with_dropins(const char *path, bool required, char *err);
HIDDEN int config_set_override(const char *spec, char *err);
HIDDEN int config_validate_section(const char *section, char *err);
HIDDEN int config_validate_all(char *err);
/* Effective value (file, --set, or default); NULL when unset. */
HIDDEN const char *config_value(const char *section, const char *key);
/* Where the effective value came from: "default", "file:line", "--set". */
HIDDEN const char *config_origin(const char *section, const char *key);
/* Whether a section appeared in the file or in --set. */
HIDDEN bool config_section_present(const char *section);
/* `fibril-agent --print-config`: every declared section and key with its
 * effective value, type, default and help, as a valid INI file. */
/* --check: one "warning: ..." line per site-specific key left at its
 * default (struct fibril_config_key.site_specific); how many. */
HIDDEN size_t config_warn_unset(FILE *out);
HIDDEN void config_print(FILE *out);
/* For GET /v1/config. */
HIDDEN struct json_object *config_to_json(void);
/* Parse helpers shared with the getters. */
HIDDEN int config_parse_bool(const char *s, bool *out);
HIDDEN int config_parse_int(const char *s, int64_t *out);
HIDDEN int config_parse_duration_ms(const char *s, int64_t *out);

/* ---- loop (loop.c) ---------------------------------------------------- */
HIDDEN int loop_init(void);
HIDDEN void *loop_uv(void); /* the uv_loop_t, for api_server.c only */
/* Run until loop_stop(); returns 0. */
HIDDEN int loop_run(void);
/* Run one non-blocking or blocking iteration. */
HIDDEN void loop_run_once(bool block);
HIDDEN void loop_stop(void);
/* Close every handle and free the loop (after all owners released). */
HIDDEN void loop_fini(void);
/* Undo every timer, io watch, signal watch and deferred call of an owner,
 * cancel its queued worker jobs and wait for running ones. */
HIDDEN void loop_release_owner(struct fibril_module *owner);
HIDDEN unsigned loop_pending_work(struct fibril_module *owner);
/* Wake the loop so it flushes the bus soon (from any thread). */
HIDDEN void loop_wake(void);
/* The agent's own SIGTERM/SIGINT handling. */
HIDDEN int loop_watch_stop_signals(void (*cb)(int signum));
/* Stalls: per iteration, the time the loop thread did not wait in its poll
 * (callbacks, hooks run between iterations), from loop_stall_begin() (the
 * start of the modules) to loop_stall_end(); each observed into
 * fibril_loop_stall_seconds. */
#define LOOP_STALL_SLOW_MS 50.0
struct loop_stall_stats {
	double max_ms;    /* the longest */
	double max_at_ms; /* when it ended, since loop_stall_begin() */
	uint64_t slow;    /* iterations of LOOP_STALL_SLOW_MS or more */
	uint64_t iterations;
	char max_in[160]; /* the longest call into a module in it, "" none */
};
/* From crash.c: a call into module code on the loop thread took ns. */
HIDDEN bool loop_is_loop_thread(void);
HIDDEN void loop_note_call(const struct fibril_module *m, const char *what, const char *detail,
			   uint64_t ns);
HIDDEN void loop_stall_begin(void);
HIDDEN void loop_stall_end(void);
HIDDEN void loop_stall_stats(struct loop_stall_stats *out);

/* ---- bus (bus.c) ------------------------------------------------------ */
HIDDEN int bus_init(void);
HIDDEN void bus_fini(void);
HIDDEN void bus_release_owner(struct fibril_module *owner);
/* Deliver everything queued so far (also run by the loop on its own). */
HIDDEN void bus_flush(void);
/* {"topics":[{"name","subscribers","published","delivered","failed","skipped"}],
 *  "queue":{"limit_bytes","held_bytes","held_max_bytes","waits","inline_flushes",
 *           "over_limit","refused"}} */
HIDDEN struct json_object *bus_to_json(void);
HIDDEN void bus_metrics(FILE *out);
/* The queue's bound in bytes (0: unbounded), and its figures. */
HIDDEN void bus_set_limit(size_t bytes);
struct bus_queue_stats { size_t limit, held, held_max; uint64_t waits, inline_flushes, over_limit, refused; };
HIDDEN void bus_queue_stats(struct bus_queue_stats *out);

/* ---- services (service.c) --------------------------------------------- */
HIDDEN void service_release_owner(struct fibril_module *owner);
HIDDEN void service_fini(void);

/* ---- BPF map registry (maps.c) ---------------------------------------- */
/* pin_dir: [agent] bpffs-dir, e.g. /sys/fs/bpf/fibril. Mounts bpffs on its
 * bpffs root when needed and creates the directory lazily on first open. */
HIDDEN int maps_init(const char *pin_dir);
/* Close the owner's fds (pins stay: the datapath keeps running). */
HIDDEN void maps_release_owner(struct fibril_module *owner);
HIDDEN void maps_fini(void);
/* {"maps":[{"name","type","type_name","key_size","value_size","max_entries",
 *   "flags","entries","pin","owner","origin"}]} */
HIDDEN struct json_object *maps_list_json(void);
/* {"name":..., "entries":[{"key":"...","value":"..."}], "formatted":bool}
 * Returns 0, or -ENOENT for an unknown map (err says so). */
HIDDEN int maps_dump_json(const char *name, struct json_object **out, char *err);
/* Registers GET /v1/map and GET /v1/map/{name}. */
HIDDEN int maps_register_routes(void);

/* ---- API server (api_server.c, api_http.c) ----------------------------------------------- */
struct api_options {
	const char *socket_path; /* unix socket */
	unsigned socket_mode;    /* e.g. 0660 */
	const char *tcp_listen;  /* "127.0.0.1:9876" or NULL: off */
	size_t max_body;         /* bytes */
	unsigned max_connections;     /* per TCP listener */
	unsigned max_per_source;      /* per TCP listener and peer address */
	unsigned idle_timeout_s;      /* a TCP connection idle or mid-request this long is closed */
	const char *remote_listen;    /* TLS with client certificates, or NULL/"": off */
	const char *remote_cert, *remote_key, *remote_client_ca; /* PEM files */
};
HIDDEN int api_init(void);
HIDDEN int api_listen(const struct api_options *opts, char *err);
HIDDEN void api_close(void);
HIDDEN void api_fini(void);
HIDDEN void api_release_owner(struct fibril_module *owner);
/* For host parts: routes owned by the agent itself. */
HIDDEN int api_route_host(const char *method, const char *pattern, uint32_t flags,
			  fibril_route_fn cb, void *ud);
/* Routes of the TCP listener (probes and metrics). */
HIDDEN int api_route_tcp(const char *method, const char *pattern, fibril_route_fn cb, void *ud);
/* Answer with a json-c object (takes ownership). */
HIDDEN void api_resp_object(struct fibril_response *resp, int status, struct json_object *obj);

/* ---- modules, graph and lifecycle (loader.c, graph.c, lifecycle.c) ---- */
enum module_state {
	MODULE_LOADED = 0,
	MODULE_INITIALIZED,
	MODULE_STARTING,
	MODULE_RUNNING,
	MODULE_STOPPING,
	MODULE_STOPPED,
	MODULE_FAILED,
};
HIDDEN const char *module_state_name(enum module_state s);

struct health_component {
	char *name; /* NULL: the module itself */
	enum fibril_health_level level;
	char message[256];
	struct health_component *next;
};

struct fibril_module {
	char *name;
	char *path;
	void *dl;
	struct fibril_module_desc desc; /* copy, zero-filled past desc_sz */
	uint32_t desc_sz;
	void *data;
	char error[ERRBUF_LEN];
	enum module_state state;
	bool initialized; /* init succeeded: fini must run */
	bool start_pending;
	int start_rc;
	double init_ms, start_ms, stop_ms, fini_ms;
	double start_began_ms; /* when a pending start began (STATUS=) */
	double start_hook_ms; /* of start_ms, the start hook itself (the loop waited for it) */
	struct health_component *health;
	/* graph */
	struct fibril_module **deps; /* modules this one starts after */
	size_t ndeps;
	int order;                   /* index in the start order, -1 unplaced */
	int mark;                    /* graph walk scratch */
};

struct module_set {
	struct fibril_module **mods;
	size_t n;
	struct fibril_module **order; /* start order after graph_resolve() */
	size_t norder;
};

/* Scan dir (or take the listed names only when `only` is non-NULL) and
 * dlopen each module, checking ownership, mode, symbol, ABI and duplicates.
 * On refusal: one line naming the file and the reason in err, -1. */
/* Build-time introspection only: skip the ownership and mode checks. */
HIDDEN void loader_trust_module_dir(void);
HIDDEN int loader_load_dir(struct module_set *set, const char *dir, const char *only, char *err);
/* Load one file (used by the directory scan). */
HIDDEN int loader_load_file(struct module_set *set, const char *path, char *err);
HIDDEN void loader_unload_all(struct module_set *set);
HIDDEN struct fibril_module *module_set_find(const struct module_set *set, const char *name);

/* Resolve capabilities to providers (choices from [providers]), build the
 * dependency edges and the start order. */
HIDDEN int graph_resolve(struct module_set *set, char *err);
/* Preview mode (--print-config, --graph): graph_resolve takes the first
 * provider of an ambiguous capability instead of failing, and
 * graph_ambiguities() lists each ("...; shown with X, a start would
 * refuse\n" lines; "" when none). */
HIDDEN void graph_set_preview(bool preview);
HIDDEN const char *graph_ambiguities(void);
/* The provider chosen for a capability (after graph_resolve). */
HIDDEN struct fibril_module *graph_provider(const char *capability);
/* Collect every capability the loaded modules provide (graph_resolve does
 * it too); then graph_capabilities lists them. */
HIDDEN void graph_collect_capabilities(const struct module_set *set);
HIDDEN const char *const *graph_capabilities(size_t *n); /* every provided capability */
HIDDEN void graph_print(const struct module_set *set, FILE *out, bool dot);
HIDDEN void graph_fini(void);

HIDDEN int lifecycle_init_all(struct module_set *set, uint64_t timeout_ms, char *err);
/* Start in order (running the loop while a start is pending); on failure
 * stop what started, in reverse, and return -1 with the reason in err. */
HIDDEN int lifecycle_start_all(struct module_set *set, uint64_t timeout_ms, char *err);
/* A stop signal during start: abandon the start and roll back. */
HIDDEN void lifecycle_interrupt_start(void);
/* [agent] write-cni-conf-when-ready (host/cni_conf.c): prepare reads and
 * checks the source before the start; write writes it after READY. */
HIDDEN int cni_conf_prepare(char *err);
HIDDEN int cni_conf_write(char *err);
HIDDEN void cni_conf_reset(void);
/* A state line for systemd (sd_notify; nothing without it). */
HIDDEN void host_notify(const char *state);
HIDDEN void lifecycle_stop_all(struct module_set *set, uint64_t timeout_ms);
HIDDEN void lifecycle_fini_all(struct module_set *set);
/* Release everything a module registered (before dlclose). */
HIDDEN void module_release_resources(struct fibril_module *m);

/* The running agent, for the built-in API routes. */
enum agent_phase { AGENT_PHASE_CONFIG, AGENT_PHASE_LOAD, AGENT_PHASE_INIT, AGENT_PHASE_START, AGENT_PHASES };
struct agent_state {
	double phase_ms[AGENT_PHASES];
	struct module_set modules;
	double started_at_ms; /* mono_ms() when the process started */
	double ready_at_ms;
	const char *version;
	char state[32];       /* "starting", "running", "stopping" */
};
HIDDEN extern struct agent_state g_agent;

/* ---- health (health.c) ------------------------------------------------ */
HIDDEN enum fibril_health_level health_of(const struct fibril_module *m, const char **why);
HIDDEN const char *health_level_name(enum fibril_health_level l);
HIDDEN struct json_object *health_to_json(const struct fibril_module *m);
HIDDEN void health_free(struct fibril_module *m);

/* ---- built-in routes (routes.c) --------------------------------------- */
/* /v1/healthz, /v1/status, /v1/config, /v1/modules, and on the TCP
 * listener /healthz, /livez and /metrics. */
HIDDEN int routes_register(void);

/* ---- releasable handles (handles.c) ------------------------------------ */
/* What a module holds for a timer, fd watch, signal watch or subscription is
 * an index + generation, not a pointer: releasing it twice, or after the
 * host released it, finds a stale generation and does nothing. */
enum handle_type { HANDLE_TIMER = 1, HANDLE_IO, HANDLE_SIGNAL, HANDLE_SUBSCRIPTION };
HIDDEN void *handle_new(enum handle_type type, void *obj);
/* The object of a live handle of that type, or NULL (stale, wrong type). */
HIDDEN void *handle_get(const void *h, enum handle_type type);
/* Invalidate (a stale handle is ignored). */
HIDDEN void handle_drop(const void *h, enum handle_type type);
HIDDEN unsigned handle_live_count(void);
HIDDEN void handles_fini(void);

/* ---- crash reporting (crash.c) ----------------------------------------- */
/* A record of "module code is running": pushed around every call into a
 * module (hooks, callbacks, route handlers, worker jobs), per thread, read
 * by the fatal-signal handler. `what` reads after "in module 'x' (", e.g.
 * "bus callback for topic" with detail "x.y", or "fd watch callback for fd"
 * with num 7 (num < 0 and detail NULL: nothing more). */
struct crash_ctx {
	const struct fibril_module *m; /* NULL: the host's own callback */
	const char *what;
	const char *detail;
	long num;
	struct crash_ctx *prev;
	uint64_t t0_ns; /* on the loop thread: when the call began (loop stalls) */
};
HIDDEN void crash_enter(struct crash_ctx *c, const struct fibril_module *m, const char *what,
			const char *detail, long num);
HIDDEN void crash_leave(struct crash_ctx *c);
/* Whether this thread is inside a call into module code. */
HIDDEN bool crash_in_module_code(void);
/* Install the handlers (and the loop thread's alternate stack). */
HIDDEN void crash_install(void);
/* An alternate signal stack for the calling thread (worker threads). */
HIDDEN void crash_altstack_thread(void);

/* ---- lifecycle and loop, re-entrancy (lifecycle.c, loop.c) -------------- */
/* Cancel the owner's queued worker jobs and wait, without running the loop,
 * up to timeout_ms for its running ones; then run their completions (and
 * the cancelled ones') directly. Returns how many jobs are still running
 * (0: none left). */
HIDDEN unsigned loop_drain_owner_jobs(struct fibril_module *owner, uint64_t timeout_ms);
/* The stop-timeout lifecycle_fini_all bounds its waits with. */
HIDDEN void lifecycle_set_stop_timeout(uint64_t timeout_ms);

/* ---- the host's metrics (metrics_host.c; the registry is lib/metrics.c) -- */
/* The host's own families (API requests, the journal's via
 * journal_metrics_init, the loop's lag, modules by state) and the loop-lag
 * timer (after loop_init). */
HIDDEN int metrics_init(void);
HIDDEN void metrics_fini(void);
/* process_* families as Prometheus client libraries export them
 * (host/metrics_process.c); called by metrics_init. */
HIDDEN int metrics_process_init(void);
/* GET /metrics: every family, each scrape callback run under a crash record
 * naming its module. */
HIDDEN void metrics_serve(FILE *out);
/* One iteration's stall (loop.c), in seconds. */
HIDDEN void metrics_loop_stall(double seconds);
/* One answered API request (route: the matched pattern, or "unmatched"). */
HIDDEN void metrics_api_request(const char *method, const char *route, int code, double ms);

#endif
