/* cli/fibril.c - fibril: the operator CLI for fibril-agent. It sends
 * requests over HTTP/1.1 to the agent's unix socket (routes and replies in
 * docs/API.md; GET, and POST/DELETE for `fibril ipam`) and prints the
 * replies as aligned tables, or the agent's own JSON (pretty-printed) with
 * -o json.
 * Exit status: 0 success, 1 agent unreachable or agent error, 2 usage error.
 * This file holds the options, the usage and the dispatch; the output
 * helpers are in cli/output.c, the HTTP client in cli/client.c and each
 * command in its own cli/cmd_*.c. */

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cli.h"

#ifndef FIBRIL_VERSION
#define FIBRIL_VERSION "unknown"
#endif

#define DEFAULT_SOCKET "/run/fibril/fibril.sock"


struct cli_options opt;

static const char usage_text[] =
	"Usage: fibril [--socket PATH] [-o json|table] COMMAND [ARGS]\n"
	"\n"
	"Query the fibril-agent running on this node.\n"
	"\n"
	"Commands:\n"
	"  status          agent state, uptime, health, and each module's state\n"
	"  modules         loaded modules: version, ABI, start order, dependencies\n"
	"  config          effective configuration and where each value came from\n"
	"  map list        BPF maps known to the agent\n"
	"  map dump NAME   the entries of one map\n"
	"  health          readiness: prints \"ok\" (exit 0) or why not (exit 1)\n"
	"  health status   connectivity to every node, latency, the matrix (health module)\n"
	"  node list       the nodes of the cluster: IPs, pod CIDRs, source, last seen\n"
	"  ipcache list    the ipcache: prefix -> identity, source, node, host IP\n"
	"                  (what is programmed; --all: what is known too)\n"
	"  ipam list       allocated addresses and their owners, and the pools\n"
	"  ipam allocate [--family ipv4|ipv6|both] OWNER\n"
	"                  the next free address(es) for OWNER (default: both)\n"
	"  ipam allocate --ip ADDR OWNER\n"
	"                  a given address for OWNER\n"
	"  ipam release ADDR | --owner OWNER\n"
	"                  release one address, or everything OWNER holds\n"
	"  endpoint list   endpoints on this node: ID, state, identity, addresses\n"
	"  endpoint get ID one endpoint (ID: number or container-id:CID[:IFNAME])\n"
	"  identity list   security identities: reserved and allocated, with labels\n"
	"  identity get ID one identity\n"
	"  k8s status      Kubernetes resources: synced, objects, last event, relists\n"
	"  policy import FILE|-  add or replace NetworkPolicies, CNPs, CCNPs (JSON or YAML)\n"
	"  policy get      policies, revision, each endpoint's enforcement\n"
	"  policy delete [NS/]NAME | policy delete-all\n"
	"  policy trace --src S --dst D --dport N/PROTO  which rule allows or denies a flow\n"
	"  policy selectors  each selector of the policies and the identities it selects\n"
	"  service list    services: frontends, backends with their states, IDs\n"
	"  service get ID | service delete ID\n"
	"  service upsert FILE|-  add or change a service (JSON; see fibril-service(8))\n"
	"  service apply -f FILE|-  many services at once, all or nothing (JSON array or lines)\n"
	"  observe [FILTERS] [-o compact|table|json]\n"
	"                  flows from hubble-lite (fibril observe --help)\n"
	"  version         versions of this CLI and of the agent\n"
	"  help [COMMAND]  this help, or one command's (also: fibril COMMAND --help)\n"
	"\n"
	"Options:\n"
	"  -s, --socket PATH     agent API socket (default: $FIBRIL_SOCKET,\n"
	"                        else " DEFAULT_SOCKET ")\n"
	"  -o, --output FORMAT   table (default) or json (the agent's reply)\n"
	"      --family F        ipam allocate: ipv4, ipv6 or both\n"
	"      --ip ADDR         ipam allocate: this address\n"
	"      --owner OWNER     ipam release: everything OWNER holds\n"
	"  -V, --version         this client's version (fibril version also asks the agent)\n"
	"  -h, --help            this help\n"
	"\n"
	"Exit status: 0 success, 1 agent unreachable or failed, 2 usage error.\n";

/* ---- main -------------------------------------------------------------------- */

static int no_args(const char *cmd, int argc, char **argv)
{
	if (argc > 0)
		return usage_error("%s: unexpected argument '%s'", cmd, argv[0]);
	return 0;
}

static int run(int argc, char **argv)
{
	const char *cmd = argv[0];
	int rc;

	if (!strcmp(cmd, "help")) {
		if (argc > 2)
			return usage_error("help: unexpected argument '%s'", argv[2]);
		if (argc == 2)
			return print_command_help(argv[1]);
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(cmd, "ipam"))
		return cmd_ipam(argc - 1, argv + 1);
	if (opt.family || opt.ip || opt.owner)
		return usage_error("--%s is only for 'fibril ipam'",
				   opt.family ? "family" : opt.ip ? "ip" : "owner");
	if (!strcmp(cmd, "map"))
		return cmd_map(argc - 1, argv + 1);
	if (!strcmp(cmd, "endpoint"))
		return cmd_endpoint(argc - 1, argv + 1);
	if (!strcmp(cmd, "identity"))
		return cmd_identity(argc - 1, argv + 1);
	if (!strcmp(cmd, "k8s"))
		return cmd_k8s(argc - 1, argv + 1);
	if (!strcmp(cmd, "node"))
		return cmd_node(argc - 1, argv + 1);
	if (!strcmp(cmd, "ipcache"))
		return cmd_ipcache(argc - 1, argv + 1);
	if (!strcmp(cmd, "policy"))
		return cmd_policy(argc - 1, argv + 1);
	if (!strcmp(cmd, "health"))
		return cmd_health(argc - 1, argv + 1);
	if (!strcmp(cmd, "service"))
		return cmd_service(argc - 1, argv + 1);
	if (strcmp(cmd, "status") && strcmp(cmd, "modules") && strcmp(cmd, "config") &&
	    strcmp(cmd, "version")) {
		const char *near = closest_command(cmd);
		if (near)
			return usage_error("unknown command '%s'; did you mean '%s'?", cmd, near);
		return usage_error("unknown command '%s'", cmd);
	}
	if ((rc = no_args(cmd, argc - 1, argv + 1)))
		return rc;
	if (!strcmp(cmd, "status"))
		return show("status", render_status);
	if (!strcmp(cmd, "modules"))
		return show("modules", render_modules);
	if (!strcmp(cmd, "config"))
		return show("config", render_config);
	return cmd_version();
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		/* this client's version alone (no agent asked): `fibril version`
		 * also asks the agent */
		{ "version", no_argument, NULL, 'V' },
		/* options of `fibril ipam`, accepted anywhere like -o */
		{ "family", required_argument, NULL, 'F' },
		{ "ip", required_argument, NULL, 'I' },
		{ "owner", required_argument, NULL, 'O' },
		/* options of `fibril policy trace` */
		{ "src", required_argument, NULL, 'S' },
		{ "dst", required_argument, NULL, 'D' },
		{ "dport", required_argument, NULL, 'P' },
		/* of `fibril service apply` */
		{ "file", required_argument, NULL, 'f' },
		/* of `fibril ipcache list` */
		{ "all", no_argument, NULL, 'A' },
		{ NULL, 0, NULL, 0 },
	};
	const char *env = getenv("FIBRIL_SOCKET");
	bool help = false;
	int c, rc;

	/* observe parses its own options (but `fibril help observe` is help) */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "observe") && strcmp(argv[i - 1], "help") != 0)
			return cmd_observe_main(argc, argv, i);
	opt.socket = env && *env ? env : DEFAULT_SOCKET;
	opterr = 0; /* our own one-line messages */
	while ((c = getopt_long(argc, argv, ":s:o:f:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!*optarg)
				return usage_error("--socket: empty path");
			opt.socket = optarg;
			break;
		case 'o':
			if (!strcmp(optarg, "json"))
				opt.json = true;
			else if (!strcmp(optarg, "table"))
				opt.json = false;
			else
				return usage_error("unknown output format '%s' (expected json or table)", optarg);
			break;
		case 'h': /* fibril --help, or COMMAND --help: that command's */
			help = true;
			break;
		case 'V':
			printf("fibril %s\n", FIBRIL_VERSION);
			return 0;
		case 'F':
			opt.family = optarg;
			break;
		case 'I':
			opt.ip = optarg;
			break;
		case 'O':
			opt.owner = optarg;
			break;
		case 'S':
			opt.src = optarg;
			break;
		case 'D':
			opt.dst = optarg;
			break;
		case 'P':
			opt.dport = optarg;
			break;
		case 'A':
			opt.all = true;
			break;
		case 'f':
			opt.file = optarg;
			break;
		case ':':
			return usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (help) {
		if (optind >= argc) {
			fputs(usage_text, stdout);
			return 0;
		}
		return print_command_help(argv[optind]);
	}
	if (optind >= argc)
		return usage_error("missing COMMAND");

	if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK) {
		print_error("cannot initialise libcurl");
		return EXIT_FAIL;
	}
	rc = run(argc - optind, argv + optind);
	curl_global_cleanup();

	if (fflush(stdout) != 0 || ferror(stdout)) {
		print_error("cannot write output: %s", strerror(errno));
		return EXIT_FAIL;
	}
	return rc;
}
