/* cli/cmd_node.c - `fibril node list`: the nodes the agent knows (GET
 * /v1/nodes): name, node IPs, pod CIDRs, where it was learned, when it was
 * last seen, whether its routes are in place, its state (up, or lost: its
 * registry record expired with its lease, kept until it is removed or
 * [nodes] lost-node-grace passes), and whether the health module reaches
 * it (per family when one of them fails) and since how long. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json.h>

#include "cli.h"

static char *seen_text(struct json_object *n)
{
	double t;
	if (!jnum(n, "last-seen", &t) || t <= 0)
		return xasprintf("-");
	double ago = difftime(time(NULL), (time_t)t);
	return xasprintf("%.0fs ago", ago < 0 ? 0 : ago);
}

/* "yes", "no", "no (ipv6)" (dual stack, only that family fails), "-" (not probed) */
static char *reach_text(struct json_object *n)
{
	struct json_object *h = jget(n, "health", json_type_object);
	struct json_object *all = h ? jget(h, "reachable", json_type_boolean) : NULL;
	if (!all)
		return xasprintf("-");
	if (json_object_get_boolean(all))
		return xasprintf("yes");
	struct json_object *v4 = jget(h, "ipv4", json_type_boolean);
	struct json_object *v6 = jget(h, "ipv6", json_type_boolean);
	/* dual stack with one family failing: name it */
	if (v4 && v6 && json_object_get_boolean(v4) != json_object_get_boolean(v6))
		return xasprintf("no (%s)", json_object_get_boolean(v4) ? "ipv6" : "ipv4");
	return xasprintf("no");
}

/* how long the reachability shown has held: "12s", "-" */
static char *reach_since_text(struct json_object *n)
{
	struct json_object *h = jget(n, "health", json_type_object);
	double t;
	if (!h || !jnum(h, "since", &t) || t <= 0)
		return xasprintf("-");
	double ago = difftime(time(NULL), (time_t)t);
	return xasprintf("%.0fs", ago < 0 ? 0 : ago);
}

static int render_node_list(struct json_object *reply)
{
	struct json_object *nodes = jarray_of_objects(reply, "nodes");
	struct table t;

	if (!nodes)
		return EXIT_FAIL;
	table_init(&t, 9);
	table_row(&t, "NAME", "IPS", "POD CIDRS", "SOURCE", "LAST SEEN", "ROUTED", "STATE", "SINCE",
		  "REACHABLE");
	for (size_t i = 0; i < json_object_array_length(nodes); i++) {
		struct json_object *n = json_object_array_get_idx(nodes, i);
		struct json_object *routed = jget(n, "routed", json_type_boolean);
		char *ips = join_list(n, "ips"), *cidrs = join_list(n, "pod-cidrs");
		char *seen = seen_text(n), *reach = reach_text(n), *since = reach_since_text(n);
		struct json_object *lost = jget(n, "lost", json_type_boolean);

		table_row(&t, jstr(n, "name"), ips, cidrs, jstr(n, "source"), seen,
			  routed ? (json_object_get_boolean(routed) ? "yes" : "no") : "-",
			  lost && json_object_get_boolean(lost) ? "lost" : "up", since, reach);
		free(reach);
		free(since);
		free(ips);
		free(cidrs);
		free(seen);
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

int cmd_node(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("node: missing subcommand (list)");
	if (strcmp(argv[0], "list"))
		return usage_error("node: unknown subcommand '%s' (list)", argv[0]);
	if (argc > 1)
		return usage_error("node list: unexpected argument '%s'", argv[1]);
	return show("nodes", render_node_list);
}
