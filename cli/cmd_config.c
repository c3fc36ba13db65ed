/* cli/cmd_config.c - `fibril config`: the effective configuration and
 * where each value came from, from GET /v1/config. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

int render_config(struct json_object *reply)
{
	struct json_object *sections = jarray_of_objects(reply, "sections");
	struct table t;

	if (!sections)
		return EXIT_FAIL;
	table_init(&t, 4);
	table_row(&t, "SECTION", "KEY", "VALUE", "ORIGIN");
	for (size_t i = 0; i < json_object_array_length(sections); i++) {
		struct json_object *s = json_object_array_get_idx(sections, i);
		struct json_object *keys = jget(s, "keys", json_type_array);

		for (size_t j = 0; keys && j < json_object_array_length(keys); j++) {
			struct json_object *k = json_object_array_get_idx(keys, j);
			const char *value = jstr(k, "value");

			table_row(&t, jstr(s, "name"), jstr(k, "name"), value && !*value ? "\"\"" : value,
				  jstr(k, "origin"));
		}
	}
	table_print(&t);
	table_free(&t);
	return 0;
}
