/* cli/cmd_map.c - `fibril map list` and `fibril map dump NAME`: the BPF
 * maps known to the agent (GET /v1/map) and the entries of one
 * (GET /v1/map/NAME). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json.h>

#include "cli.h"

static int cmd_map_list(struct json_object *reply)
{
	struct json_object *maps = jarray_of_objects(reply, "maps");
	struct table t;

	if (!maps)
		return EXIT_FAIL;
	if (json_object_array_length(maps) == 0) {
		puts("No maps.");
		return 0;
	}
	table_init(&t, 8);
	table_row(&t, "NAME", "TYPE", "KEY", "VALUE", "MAX", "ENTRIES", "OWNER", "ORIGIN");
	for (size_t i = 0; i < json_object_array_length(maps); i++) {
		struct json_object *m = json_object_array_get_idx(maps, i);
		char type[32], key[32], value[32], max[32], entries[32];
		const char *tname = jstr(m, "type_name");

		table_row(&t, jstr(m, "name"), tname ? tname : fmt_int(m, "type", type, sizeof(type)),
			  fmt_int(m, "key_size", key, sizeof(key)),
			  fmt_int(m, "value_size", value, sizeof(value)),
			  fmt_int(m, "max_entries", max, sizeof(max)),
			  fmt_int(m, "entries", entries, sizeof(entries)), jstr(m, "owner"),
			  jstr(m, "origin"));
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int cmd_map_dump(struct json_object *reply)
{
	struct json_object *entries = jarray_of_objects(reply, "entries");
	size_t n;
	struct table t;

	if (!entries)
		return EXIT_FAIL;
	n = json_object_array_length(entries);
	if (n > 0) {
		table_init(&t, 2);
		table_row(&t, "KEY", "VALUE");
		for (size_t i = 0; i < n; i++) {
			struct json_object *e = json_object_array_get_idx(entries, i);

			table_row(&t, jstr(e, "key"), jstr(e, "value"));
		}
		table_print(&t);
		table_free(&t);
	}
	printf("%zu %s\n", n, n == 1 ? "entry" : "entries");
	return 0;
}

int cmd_map(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("map: missing subcommand (list or dump NAME)");
	if (!strcmp(argv[0], "list")) {
		if (argc > 1)
			return usage_error("map list: unexpected argument '%s'", argv[1]);
		return show("map", cmd_map_list);
	}
	if (!strcmp(argv[0], "dump")) {
		if (argc < 2 || !*argv[1])
			return usage_error("map dump: missing map NAME");
		if (argc > 2)
			return usage_error("map dump: unexpected argument '%s'", argv[2]);

		CURL *curl = curl_easy_init();
		char *name = curl ? curl_easy_escape(curl, argv[1], 0) : NULL;
		char *path = NULL;
		int rc = EXIT_FAIL;

		if (!name) {
			print_error("out of memory");
		} else {
			path = xasprintf("map/%s", name);
			rc = show(path, cmd_map_dump);
		}
		free(path);
		curl_free(name);
		curl_easy_cleanup(curl);
		return rc;
	}
	return usage_error("map: unknown subcommand '%s' (expected list or dump NAME)", argv[0]);
}
