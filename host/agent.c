/* host/agent.c - fibril-agent's main: command line, the [agent] config
 * keys, then config -> load modules -> graph -> init -> start -> serve the
 * API -> tell systemd READY=1 -> run until SIGTERM/SIGINT -> STOPPING=1 ->
 * stop in reverse -> fini -> unload. */
#include "internal.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h" /* HAVE_LIBSYSTEMD */
#endif
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#ifndef FIBRIL_VERSION
#define FIBRIL_VERSION "0.0.0"
#endif

static int check_socket_mode(const char *value, char *why, size_t len)
{
	char *end = NULL;
	long mode = strtol(value, &end, 8);
	if (!*value || *end || mode < 0 || mode > 0777) {
		snprintf(why, len, "'%s' is not an octal file mode (e.g. 0660)", value);
		return -EINVAL;
	}
	return 0;
}

static int check_log_level(const char *value, char *why, size_t len)
{
	enum fibril_log_level l;
	if (log_parse_level(value, &l)) {
		snprintf(why, len, "'%s' is not a log level (error, warn, info, debug)", value);
		return -EINVAL;
	}
	return 0;
}

static const struct fibril_config_key agent_keys[] = {
	{.name = "module-dir", .type = FIBRIL_CONFIG_PATH, .default_value = FIBRIL_MODULE_DIR,
	 .help = "Directory the modules are loaded from (root-owned, not group/world-writable)"},
	{.name = "modules", .type = FIBRIL_CONFIG_LIST, .default_value = "",
	 .help = "Modules to load, by file name without .so; empty loads every module found"},
	{.name = "state-dir", .type = FIBRIL_CONFIG_PATH, .default_value = "/var/lib/fibril",
	 .help = "Persistent state; each module keeps its files in a folder named after it"},
	{.name = "run-dir", .type = FIBRIL_CONFIG_PATH, .default_value = "/run/fibril",
	 .help = "Runtime files"},
	{.name = "socket", .type = FIBRIL_CONFIG_PATH, .default_value = "/run/fibril/fibril.sock",
	 .help = "API unix socket"},
	{.name = "socket-mode", .type = FIBRIL_CONFIG_STRING, .default_value = "0660",
	 .help = "File mode of the API socket (octal)", .check = check_socket_mode},
	{.name = "bpffs-dir", .type = FIBRIL_CONFIG_PATH, .default_value = "/sys/fs/bpf/fibril",
	 .help = "Directory under bpffs where BPF maps are pinned"},
	{.name = "log-level", .type = FIBRIL_CONFIG_STRING, .default_value = "info",
	 .help = "error, warn, info or debug", .check = check_log_level},
	{.name = "api-tcp-listen", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "HOST:PORT for /healthz, /livez and /metrics over TCP; empty: off"},
	{.name = "api-max-body", .type = FIBRIL_CONFIG_INT, .default_value = "1048576",
	 .help = "Largest API request body in bytes", .min = 1024, .max = 64 * 1024 * 1024},
	{.name = "api-remote-listen", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "ADDRESS:PORT for remote readers of flows and /metrics: TLS, a client certificate "
		 "signed by api-remote-client-ca required; empty: off"},
	{.name = "api-remote-cert", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "The remote listener's certificate (PEM, with its chain)"},
	{.name = "api-remote-key", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "The remote listener's private key (PEM)"},
	{.name = "api-remote-client-ca", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "The CA (PEM) whose client certificates the remote listener accepts"},
	{.name = "api-max-connections", .type = FIBRIL_CONFIG_INT, .default_value = "256",
	 .help = "Connections a TCP listener holds at most (more are closed at once)", .min = 1,
	 .max = 65536},
	{.name = "api-max-connections-per-source", .type = FIBRIL_CONFIG_INT, .default_value = "32",
	 .help = "Connections a TCP listener holds at most from one address", .min = 1, .max = 65536},
	{.name = "api-idle-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "A TCP connection idle, or sending its request headers, this long is closed",
	 .min = 1000, .max = 3600 * 1000},
	{.name = "start-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "2m",
	 .help = "How long one module's start may take", .min = 1000, .max = 3600 * 1000},
	{.name = "stop-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "10s",
	 .help = "How long one module's stop may take", .min = 1000, .max = 3600 * 1000},
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "This node's name; empty: the host name"},
	{.name = "write-cni-conf-when-ready", .type = FIBRIL_CONFIG_PATH,
	 .help = "Where to write the CNI network configuration once the agent is ready (e.g. "
		 "/host/etc/cni/net.d/05-fibril.conflist); empty: never"},
	{.name = "read-cni-conf", .type = FIBRIL_CONFIG_PATH,
	 .help = "The CNI configuration written there; empty: a conflist of fibril-cni with this "
		 "agent's socket"},
	{0},
};

struct agent_args {
	const char *config_path;
	bool config_explicit;
	const char **sets;
	size_t nsets;
	int graph; /* 0 no, 1 text, 2 dot */
	bool print_config;
	bool check_only;
	bool list_modules;
	bool untrusted_module_dir;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: fibril-agent [options]\n"
		"  -c, --config FILE       config file (default " FIBRIL_SYSCONF_DIR "/fibril/fibril.conf),\n"
		"                          then FILE.d/*.conf in name order (later files override)\n"
		"  -s, --set SEC.KEY=VAL   override a config value (repeatable)\n"
		"      --graph[=dot]       print the resolved start order (or a Graphviz graph) and exit\n"
		"      --print-config      print the effective config with defaults and help and exit\n"
		"      --check             validate config and modules, then exit\n"
		"      --list-modules      print each module's name, provides, requires and wants, and exit\n"
		"      --untrusted-module-dir  with --list-modules or --print-config only: read a\n"
		"                          module directory not owned by root (a package build's tree)\n"
		"  -V, --version           print the version and exit\n"
		"  -h, --help              this help\n");
}

static int parse_args(int argc, char **argv, struct agent_args *a)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"set", required_argument, NULL, 's'},
		{"graph", optional_argument, NULL, 'g'},  {"print-config", no_argument, NULL, 'p'},
		{"check", no_argument, NULL, 'k'},	  {"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},	  {"list-modules", no_argument, NULL, 'l'},
		{"untrusted-module-dir", no_argument, NULL, 'u'},
		{0, 0, 0, 0},
	};
	a->config_path = FIBRIL_SYSCONF_DIR "/fibril/fibril.conf";
	a->sets = xcalloc((size_t)argc + 1, sizeof(*a->sets));
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "c:s:Vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			a->config_path = optarg;
			a->config_explicit = true;
			break;
		case 's':
			a->sets[a->nsets++] = optarg;
			break;
		case 'g':
			if (optarg && strcmp(optarg, "dot") != 0) {
				fprintf(stderr, "fibril-agent: --graph=%s: expected --graph or --graph=dot\n", optarg);
				return 2;
			}
			a->graph = optarg ? 2 : 1;
			break;
		case 'p':
			a->print_config = true;
			break;
		case 'k':
			a->check_only = true;
			break;
		case 'l':
			a->list_modules = true;
			break;
		case 'u':
			a->untrusted_module_dir = true;
			break;
		case 'V':
			printf("fibril-agent %s (ABI %d.%d, %s)\n", FIBRIL_VERSION, FIBRIL_ABI_MAJOR,
			       FIBRIL_ABI_MINOR, FIBRIL_BUILD_SIGNATURE);
			return 1;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fibril-agent: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	/* Loading modules from a directory anyone but root may write runs
	 * their code: allowed to look at a build tree, never to start. */
	if (a->untrusted_module_dir && !a->list_modules && !a->print_config) {
		fprintf(stderr, "fibril-agent: --untrusted-module-dir: only with --list-modules or "
				"--print-config (a start always checks the module directory)\n");
		return 2;
	}
	if (a->untrusted_module_dir)
		loader_trust_module_dir();
	return 0;
}

static int load_config(const struct agent_args *a, char *err)
{
	config_reset();
	if (config_declare("agent", agent_keys))
		return -1;
	if (config_load_with_dropins(a->config_path, a->config_explicit, err))
		return -1;
	for (size_t i = 0; i < a->nsets; i++)
		if (config_set_override(a->sets[i], err))
			return -1;
	if (config_validate_section("agent", err))
		return -1;
	enum fibril_log_level level = FIBRIL_LOG_INFO;
	log_parse_level(config_value("agent", "log-level"), &level);
	log_set_level(level);
	return 0;
}

static void print_list(FILE *out, const char *what, const char *const *names)
{
	fprintf(out, " %s=", what);
	for (size_t i = 0; names && names[i]; i++)
		fprintf(out, "%s%s", i ? "," : "", names[i]);
}

/* `--list-modules`: what each module file in module-dir declares, without
 * resolving the graph (packaging derives Depends from it: debian/). */
static int list_modules(char *err)
{
	struct module_set *set = &g_agent.modules;
	if (loader_load_dir(set, config_value("agent", "module-dir"), config_value("agent", "modules"),
			    err))
		return -1;
	for (size_t i = 0; i < set->n; i++) {
		const struct fibril_module_desc *d = &set->mods[i]->desc;
		printf("%s", set->mods[i]->name);
		print_list(stdout, "provides", d->provides);
		print_list(stdout, "requires", d->requires);
		print_list(stdout, "wants", d->wants);
		putchar('\n');
	}
	return 0;
}

/* Load the modules, declare their config sections, validate the whole
 * config and resolve the graph. */
static int load_modules(char *err)
{
	struct module_set *set = &g_agent.modules;
	const char *only = config_value("agent", "modules");
	if (loader_load_dir(set, config_value("agent", "module-dir"), only, err))
		return -1;
	for (size_t i = 0; i < set->n; i++) {
		if (strcmp(set->mods[i]->name, "agent") == 0 || strcmp(set->mods[i]->name, "providers") == 0) {
			errbuf_set(err, "module %s: the name '%s' is reserved", set->mods[i]->path,
				   set->mods[i]->name);
			return -1;
		}
		if (config_declare_module(set->mods[i], err))
			return -1;
	}
	/* [providers] takes any capability a loaded module offers. */
	size_t ncaps = 0;
	graph_collect_capabilities(set);
	const char *const *caps = graph_capabilities(&ncaps);
	int rc = config_declare_dynamic("providers", caps, ncaps,
					"Which module provides a capability several modules offer");
	if (rc)
		return -1;
	if (config_validate_all(err))
		return -1;
	return graph_resolve(set, err);
}

/* ---- systemd (Type=notify) ----------------------------------------------
 * READY=1 once every module has started (restore included: start_all waits
 * for asynchronous starts) and the API listens; STOPPING=1 once, when the
 * stop begins; WATCHDOG=1 from the loop at half of WatchdogSec, so a loop
 * that hangs gets the agent restarted. Without libsystemd or NOTIFY_SOCKET
 * these do nothing. */
static struct fibril_timer *g_watchdog;
static bool g_stopping_notified;

void host_notify(const char *state)
{
#ifdef HAVE_LIBSYSTEMD
	sd_notify(0, state);
#else
	(void)state;
#endif
}

static void notify(const char *state)
{
	host_notify(state);
}

#ifdef HAVE_LIBSYSTEMD
static void on_watchdog(struct fibril_timer *t, void *ud)
{
	(void)t;
	(void)ud;
	notify("WATCHDOG=1");
}
#endif

static void notify_ready(size_t nstarted, const char *socket_path)
{
	char state[512];
	snprintf(state, sizeof(state), "READY=1\nSTATUS=%zu modules started, API on %s", nstarted,
		 socket_path);
	notify(state);
#ifdef HAVE_LIBSYSTEMD
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec >= 2000)
		g_watchdog = fibril_timer_add(NULL, 0, usec / 2000, on_watchdog, NULL);
#endif
}

static void notify_stopping(void)
{
	if (g_stopping_notified)
		return;
	g_stopping_notified = true;
	notify("STOPPING=1");
}

static void on_stop_signal(int signum)
{
	notify_stopping();
	host_info("signal %d: stopping (send it again to force exit)", signum);
	if (strcmp(g_agent.state, "starting") == 0)
		lifecycle_interrupt_start();
	else
		loop_stop();
}

static int prepare_dirs(char *err)
{
	const char *dirs[] = {config_value("agent", "state-dir"), config_value("agent", "run-dir")};
	for (size_t i = 0; i < 2; i++) {
		int rc = mkdir_p(dirs[i], 0755);
		if (rc) {
			errbuf_set(err, "cannot create %s: %s", dirs[i], strerror(-rc));
			return -1;
		}
	}
	char sockdir[4096];
	snprintf(sockdir, sizeof(sockdir), "%s", config_value("agent", "socket"));
	char *slash = strrchr(sockdir, '/');
	if (slash && slash != sockdir) {
		*slash = '\0';
		int rc = mkdir_p(sockdir, 0755);
		if (rc) {
			errbuf_set(err, "cannot create %s: %s", sockdir, strerror(-rc));
			return -1;
		}
	}
	return 0;
}

static void shutdown_all(bool started)
{
	if (started)
		notify_stopping();
	if (g_watchdog) {
		fibril_timer_cancel(g_watchdog);
		g_watchdog = NULL;
	}
	snprintf(g_agent.state, sizeof(g_agent.state), "stopping");
	loop_stall_end();
	double t0 = mono_ms();
	api_close();
	if (started)
		lifecycle_stop_all(&g_agent.modules, (uint64_t)fibril_config_duration_ms(NULL, "stop-timeout"));
	lifecycle_fini_all(&g_agent.modules);
	metrics_fini();
	api_fini();
	maps_fini();
	bus_fini();
	service_fini();
	loop_fini();
	loader_unload_all(&g_agent.modules);
	handles_fini();
	graph_fini();
	if (started)
		host_info("agent stopped in %.1f ms", mono_ms() - t0);
	cni_conf_reset();
	config_reset();
}

static int run(void)
{
	char err[ERRBUF_LEN] = "";
	struct module_set *set = &g_agent.modules;
	double t = mono_ms();
	if (cni_conf_prepare(err)) {
		fprintf(stderr, "fibril-agent: %s\n", err);
		shutdown_all(false);
		return 1;
	}
	if (prepare_dirs(err)) {
		host_error("%s", err);
		shutdown_all(false);
		return 1;
	}
	start_status_begin(config_value("agent", "socket"));
	if (maps_init(config_value("agent", "bpffs-dir")) || api_init() || routes_register() ||
	    maps_register_routes() || bus_init()) {
		host_error("%s", err[0] ? err : "cannot set up the host runtime");
		start_status_failed(err[0] ? err : "cannot set up the host runtime");
		shutdown_all(false);
		return 1;
	}
	lifecycle_set_stop_timeout((uint64_t)fibril_config_duration_ms(NULL, "stop-timeout"));
	if (lifecycle_init_all(set, (uint64_t)fibril_config_duration_ms(NULL, "start-timeout"), err)) {
		host_error("%s", err);
		start_status_failed(err);
		shutdown_all(false);
		return 1;
	}
	g_agent.phase_ms[AGENT_PHASE_INIT] = mono_ms() - t;
	loop_watch_stop_signals(on_stop_signal);
	t = mono_ms();
	loop_stall_begin(); /* from here on, modules hold connections the loop serves */
	if (lifecycle_start_all(set, (uint64_t)fibril_config_duration_ms(NULL, "start-timeout"), err)) {
		host_error("start failed: %s", err);
		start_status_failed(err);
		shutdown_all(false);
		return 1;
	}
	g_agent.phase_ms[AGENT_PHASE_START] = mono_ms() - t;
	struct api_options api = {
		.socket_path = config_value("agent", "socket"),
		.socket_mode = (unsigned)strtoul(config_value("agent", "socket-mode"), NULL, 8),
		.tcp_listen = config_value("agent", "api-tcp-listen"),
		.max_body = (size_t)fibril_config_int(NULL, "api-max-body"),
		.max_connections = (unsigned)fibril_config_int(NULL, "api-max-connections"),
		.max_per_source = (unsigned)fibril_config_int(NULL, "api-max-connections-per-source"),
		.idle_timeout_s = (unsigned)((fibril_config_duration_ms(NULL, "api-idle-timeout") + 999) / 1000),
		.remote_listen = config_value("agent", "api-remote-listen"),
		.remote_cert = config_value("agent", "api-remote-cert"),
		.remote_key = config_value("agent", "api-remote-key"),
		.remote_client_ca = config_value("agent", "api-remote-client-ca"),
	};
	if (api_listen(&api, err)) {
		host_error("%s", err);
		start_status_failed(err);
		lifecycle_stop_all(set, (uint64_t)fibril_config_duration_ms(NULL, "stop-timeout"));
		shutdown_all(false);
		return 1;
	}
	start_status_done();
	g_agent.ready_at_ms = mono_ms();
	snprintf(g_agent.state, sizeof(g_agent.state), "running");
	notify_ready(set->norder, api.socket_path);
	/* (logged after READY=1 is sent: the log's order is the start's) */
	host_info("agent ready in %.1f ms: %zu modules started, API on %s", g_agent.ready_at_ms -
		  g_agent.started_at_ms, set->norder, api.socket_path);
	/* Only now may pods be scheduled here: the runtime looks for this file */
	if (cni_conf_write(err)) {
		host_error("%s", err);
		shutdown_all(true);
		return 1;
	}
	loop_run();
	shutdown_all(true);
	return 0;
}

int fibril_agent_main(int argc, char **argv);
int fibril_agent_main(int argc, char **argv)
{
	memset(&g_agent, 0, sizeof(g_agent));
	g_watchdog = NULL;
	g_stopping_notified = false;
	g_agent.started_at_ms = mono_ms();
	g_agent.version = FIBRIL_VERSION;
	snprintf(g_agent.state, sizeof(g_agent.state), "starting");
	umask(022);
	crash_install();
	struct agent_args args = {0};
	int rc = parse_args(argc, argv, &args);
	if (rc) {
		free(args.sets);
		return rc == 1 ? 0 : 2;
	}
	char err[ERRBUF_LEN] = "";
	double t = mono_ms();
	if (load_config(&args, err)) {
		fprintf(stderr, "fibril-agent: %s\n", err);
		config_reset();
		free(args.sets);
		return 1;
	}
	g_agent.phase_ms[AGENT_PHASE_CONFIG] = mono_ms() - t;
	t = mono_ms();
	if (loop_init()) {
		fprintf(stderr, "fibril-agent: cannot create the event loop\n");
		config_reset();
		free(args.sets);
		return 1;
	}
	if (args.list_modules) {
		rc = list_modules(err);
		if (rc)
			fprintf(stderr, "fibril-agent: %s\n", err);
		shutdown_all(false);
		free(args.sets);
		return rc ? 1 : 0;
	}
	/* --print-config/--graph show what they can of an ambiguous graph */
	graph_set_preview((args.graph || args.print_config) && !args.check_only);
	rc = load_modules(err);
	g_agent.phase_ms[AGENT_PHASE_LOAD] = mono_ms() - t;
	if (rc) {
		fprintf(stderr, "fibril-agent: %s\n", err);
		shutdown_all(false);
		free(args.sets);
		return 1;
	}
	free(args.sets);
	if (args.graph || args.print_config || args.check_only) {
		if (args.graph)
			graph_print(&g_agent.modules, stdout, args.graph == 2);
		if (args.print_config)
			config_print(stdout);
		/* each ambiguity on stderr, one line each, after what was shown */
		for (const char *a = graph_ambiguities(); *a;) {
			size_t n = strcspn(a, "\n");
			fprintf(stderr, "fibril-agent: warning: %.*s\n", (int)n, a);
			a += n + (a[n] == '\n');
		}
		if (args.check_only && cni_conf_prepare(err)) {
			fprintf(stderr, "fibril-agent: %s\n", err);
			shutdown_all(false);
			return 1;
		}
		if (args.check_only) {
			config_warn_unset(stdout);
			printf("config and modules OK: %zu modules to start\n", g_agent.modules.norder);
		}
		shutdown_all(false);
		return 0;
	}
	return run();
}
