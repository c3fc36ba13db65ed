/* cli/help.c - per-command help of the fibril CLI (`fibril help COMMAND`,
 * `fibril COMMAND --help`), and which module serves which API path, so a
 * 404 from an agent without that module says which module to enable
 * (cli/client.c). The general usage is in cli/fibril.c. */

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "../lib/names.h"

const char *closest_command(const char *word);

struct command_help {
	const char *name;
	const char *module; /* the module that serves it; NULL: the host */
	const char *text;
};

static const struct command_help helps[] = {
	{"status", NULL,
	 "Usage: fibril status\n"
	 "\n"
	 "The agent's state (starting, running, stopping, failed), its uptime and\n"
	 "health, and each module's state, health and start timings. While the\n"
	 "agent starts it says what it is waiting for.\n"},
	{"modules", NULL,
	 "Usage: fibril modules\n"
	 "\n"
	 "The loaded modules: version, ABI, start order and dependencies.\n"},
	{"config", NULL,
	 "Usage: fibril config\n"
	 "\n"
	 "The effective configuration and where each value came from (default,\n"
	 "file, drop-in or --set).\n"},
	{"map", NULL,
	 "Usage: fibril map list\n"
	 "       fibril map dump NAME\n"
	 "\n"
	 "The BPF maps known to the agent, or the entries of one of them.\n"},
	{"health", "health",
	 "Usage: fibril health\n"
	 "       fibril health status\n"
	 "\n"
	 "health: readiness; prints \"ok\" (exit 0) or why not (exit 1).\n"
	 "health status: connectivity to every node, latency and the matrix\n"
	 "(served by the health module).\n"},
	{"node", "nodes",
	 "Usage: fibril node list\n"
	 "\n"
	 "The nodes of the cluster: IPs, pod CIDRs, source, last seen (served by\n"
	 "the nodes module).\n"},
	{"ipcache", "nodes",
	 "Usage: fibril ipcache list [--all]\n"
	 "\n"
	 "The ipcache: prefix -> identity, source, node, host IP. What is\n"
	 "programmed in the datapath; with --all, what is known too (served by the\n"
	 "nodes module).\n"},
	{"ipam", "ipam-api",
	 "Usage: fibril ipam list\n"
	 "       fibril ipam allocate [--family ipv4|ipv6|both] OWNER\n"
	 "       fibril ipam allocate --ip ADDR OWNER\n"
	 "       fibril ipam release ADDR | --owner OWNER\n"
	 "\n"
	 "Allocated addresses and their owners, and the pools; allocate the next\n"
	 "free address(es) (default: both families) or a given one; release one\n"
	 "address or everything an owner holds (served by the ipam-api module).\n"},
	{"endpoint", "endpoint",
	 "Usage: fibril endpoint list\n"
	 "       fibril endpoint get ID | container-id:CID[:IFNAME]\n"
	 "\n"
	 "The endpoints on this node: ID, state, identity, addresses, pod and\n"
	 "container (cut to the shortest prefix, at least 12 characters, that\n"
	 "tells them apart); get shows one whole, its creation time in RFC 3339,\n"
	 "and its policy (served by the endpoint module).\n"},
	{"identity", "endpoint",
	 "Usage: fibril identity list\n"
	 "       fibril identity get ID\n"
	 "\n"
	 "Security identities, reserved and allocated, with their labels (served\n"
	 "by the endpoint module).\n"},
	{"k8s", "k8s",
	 "Usage: fibril k8s status\n"
	 "\n"
	 "Kubernetes resources: synced, objects, last event, relists (served by\n"
	 "the k8s module).\n"},
	{"policy", "policy",
	 "Usage: fibril policy import FILE|-\n"
	 "       fibril policy get\n"
	 "       fibril policy delete [NAMESPACE/]NAME\n"
	 "       fibril policy delete-all\n"
	 "       fibril policy trace --src S --dst D --dport N[/PROTO]\n"
	 "       fibril policy selectors\n"
	 "\n"
	 "import: add or replace NetworkPolicies, CiliumNetworkPolicies and\n"
	 "  CiliumClusterwideNetworkPolicies (JSON or YAML; - reads stdin).\n"
	 "get: the policies, the revision, each endpoint's enforcement.\n"
	 "trace: which rule allows or denies a flow. S and D: an endpoint ID,\n"
	 "  an IP address, NAMESPACE/POD or an identity (identity:N); addresses\n"
	 "  of other nodes are resolved through the ipcache. Exits 0 when the\n"
	 "  flow is ALLOWED, 1 when it is DENIED (or on error).\n"
	 "selectors: each selector of the policies and the identities it selects.\n"
	 "\n"
	 "Served by the policy module.\n"},
	{"service", "lb",
	 "Usage: fibril service list\n"
	 "       fibril service get ID\n"
	 "       fibril service delete ID\n"
	 "       fibril service upsert FILE|-\n"
	 "       fibril service apply -f FILE|-\n"
	 "\n"
	 "Services: frontends, backends with their states, IDs; upsert adds or\n"
	 "changes one (JSON; see fibril-service(8)); apply adds or changes many in\n"
	 "one request, all or nothing (a JSON array, or JSON lines: one service a\n"
	 "line; a bad one is named by its index and nothing changes). Served by\n"
	 "the lb module.\n"},
	{"observe", "hubble-lite", NULL /* its own: fibril observe --help */},
	{"version", NULL,
	 "Usage: fibril version\n"
	 "\n"
	 "The versions of this CLI and of the agent (fibril --version: the CLI's\n"
	 "alone, without asking the agent).\n"},
	{"help", NULL,
	 "Usage: fibril help [COMMAND]\n"
	 "\n"
	 "The general help, or one command's.\n"},
};

#define NHELPS (sizeof(helps) / sizeof(helps[0]))

static const struct command_help *find_help(const char *name)
{
	for (size_t i = 0; i < NHELPS; i++)
		if (!strcmp(helps[i].name, name))
			return &helps[i];
	return NULL;
}

int print_command_help(const char *name)
{
	const struct command_help *h = find_help(name);

	if (!h) {
		const char *near = closest_command(name);
		if (near)
			return usage_error("help: unknown command '%s'; did you mean '%s'?", name, near);
		return usage_error("help: unknown command '%s'", name);
	}
	if (!h->text) { /* observe keeps its help next to its options */
		char prog[] = "fibril", cmd[] = "observe", flag[] = "--help";
		char *argv[] = {prog, cmd, flag, NULL};
		return cmd_observe_main(3, argv, 1);
	}
	fputs(h->text, stdout);
	return 0;
}

/* API path prefixes (after /v1/) and the module that serves them. */
static const struct {
	const char *prefix, *module;
} path_modules[] = {
	{"service", "lb"},         {"endpoint", "endpoint"}, {"identity", "endpoint"},
	{"policy", "policy"},      {"ipam", "ipam-api"},     {"nodes", "nodes"},
	{"ipcache", "nodes"},      {"mtu", "nodes"},         {"health", "health"},
	{"k8s", "k8s"},            {"flows", "hubble-lite"}, {"datapath", "datapath"},
};

const char *module_serving_path(const char *path)
{
	while (*path == '/')
		path++;
	if (!strncmp(path, "v1/", 3))
		path += 3;
	for (size_t i = 0; i < sizeof(path_modules) / sizeof(path_modules[0]); i++) {
		size_t n = strlen(path_modules[i].prefix);
		if (!strncmp(path, path_modules[i].prefix, n) && strchr("/?", path[n]))
			return path_modules[i].module;
	}
	return NULL;
}

const char *module_enable_hint(void)
{
	return "install it (./configure --enable-modules=... or its package) and load it: "
	       "list it in [agent] modules, or leave modules unset to load every module in "
	       "[agent] module-dir, then restart the agent";
}

const char *closest_command(const char *word)
{
	const char *best = NULL;
	size_t best_d = 3; /* at most two edits away */

	for (size_t i = 0; i < NHELPS; i++) {
		size_t d = edit_distance(word, helps[i].name);
		if (d < best_d) {
			best_d = d;
			best = helps[i].name;
		}
	}
	return best;
}
