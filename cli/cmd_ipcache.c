/* cli/cmd_ipcache.c - `fibril ipcache list [--all]`: the ipcache as the
 * nodes module keeps it (GET /v1/ipcache): each prefix, its identity, where
 * it comes from (this node's endpoints, the kvstore's other endpoints, the
 * nodes' IPs and pod CIDRs), its node and host IP, whether it is in the
 * datapath. By default only what is programmed (what the datapath uses: a
 * deleted node's pods whose kvstore records still wait for their lease to
 * expire are not); --all lists the rest too. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

static int render_ipcache_list(struct json_object *reply)
{
	struct json_object *entries = jarray_of_objects(reply, "entries");
	struct table t;

	if (!entries)
		return EXIT_FAIL;
	table_init(&t, 7);
	table_row(&t, "PREFIX", "IDENTITY", "SOURCE", "NODE", "HOST IP", "POD", "PROGRAMMED");
	for (size_t i = 0; i < json_object_array_length(entries); i++) {
		struct json_object *e = json_object_array_get_idx(entries, i);
		struct json_object *prog = jget(e, "programmed", json_type_boolean);
		double id = 0;
		char *idtext;

		if (!opt.all && prog && !json_object_get_boolean(prog))
			continue;
		jnum(e, "identity", &id);
		idtext = xasprintf("%.0f", id);
		table_row(&t, jstr(e, "prefix"), idtext, jstr(e, "source"), jstr(e, "node"),
			  jstr(e, "host-ip") ? jstr(e, "host-ip") : "-",
			  jstr(e, "pod") ? jstr(e, "pod") : "-",
			  prog ? (json_object_get_boolean(prog) ? "yes" : "no") : "-");
		free(idtext);
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

int cmd_ipcache(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("ipcache: missing subcommand (list)");
	if (strcmp(argv[0], "list"))
		return usage_error("ipcache: unknown subcommand '%s' (list)", argv[0]);
	if (argc > 1)
		return usage_error("ipcache list: unexpected argument '%s'", argv[1]);
	return show("ipcache", render_ipcache_list);
}
