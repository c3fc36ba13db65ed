/* cli/cmd_modules.c - `fibril modules`: the loaded modules with version,
 * ABI, start order and dependencies, from GET /v1/modules. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

int render_modules(struct json_object *reply)
{
	struct json_object *mods = jarray_of_objects(reply, "modules");
	struct table t;

	if (!mods)
		return EXIT_FAIL;
	table_init(&t, 9);
	table_row(&t, "NAME", "VERSION", "ABI", "ORDER", "STATE", "PROVIDES", "REQUIRES", "WANTS", "FILE");
	for (size_t i = 0; i < json_object_array_length(mods); i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		char order[32];
		char *provides = join_list(m, "provides"), *requires = join_list(m, "requires"),
		     *wants = join_list(m, "wants");

		table_row(&t, jstr(m, "name"), jstr(m, "version"), jstr(m, "abi"),
			  fmt_int(m, "order", order, sizeof(order)), jstr(m, "state"), provides, requires,
			  wants, jstr(m, "file"));
		free(provides);
		free(requires);
		free(wants);
	}
	if (t.nrows == 1)
		puts("No modules loaded.");
	else
		table_print(&t);
	table_free(&t);
	return 0;
}
