/* cli/cmd_k8s.c - `fibril k8s status`: the k8s module's informers, from
 * GET /v1/k8s: per watched resource whether its cache synced, how many
 * objects it holds, when the last event came, how many relists there were
 * and what the informer is doing (watching, listing, or backing off with
 * the error). -o json prints the agent's document as is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* "2026-11-22T04:16:06Z (12s ago)", or "-" when there was no event. */
static void fmt_event_time(const char *iso, char *buf, size_t len)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	if (!iso || !strptime(iso, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
		snprintf(buf, len, "-");
		return;
	}
	long ago = (long)difftime(time(NULL), timegm(&tm));
	if (ago < 0)
		ago = 0;
	if (ago < 120)
		snprintf(buf, len, "%s (%lds ago)", iso, ago);
	else if (ago < 7200)
		snprintf(buf, len, "%s (%ldm ago)", iso, ago / 60);
	else
		snprintf(buf, len, "%s (%ldh ago)", iso, ago / 3600);
}

static int render_k8s_status(struct json_object *doc)
{
	struct json_object *res = jarray_of_objects(doc, "resources");
	char *node = clean_dup(jstr(doc, "node") ? jstr(doc, "node") : "-");
	char *server = clean_dup(jstr(doc, "server") ? jstr(doc, "server") : "-");

	printf("Node:    %s\nServer:  %s\n\n", node, server);
	free(node);
	free(server);
	if (!res)
		return EXIT_FAIL;
	if (json_object_array_length(res) == 0) {
		puts("No resources watched (no module asked for any; see [k8s] resources).");
		return 0;
	}

	struct table t;

	table_init(&t, 6);
	table_row(&t, "RESOURCE", "SYNCED", "OBJECTS", "LAST EVENT", "RELISTS", "STATE");
	for (size_t i = 0; i < json_object_array_length(res); i++) {
		struct json_object *r = json_object_array_get_idx(res, i);
		struct json_object *synced = jget(r, "synced", json_type_boolean);
		char objects[32], relists[32], when[96];
		const char *phase = jstr(r, "phase"), *err = jstr(r, "error");
		char *state = err && *err ? xasprintf("backoff: %s", err)
					  : xasprintf("%s", phase ? phase : "-");
		char *clean = clean_dup(state);

		fmt_event_time(jstr(r, "last_event"), when, sizeof(when));
		table_row(&t, jstr(r, "name"), synced && json_object_get_boolean(synced) ? "yes" : "no",
			  fmt_int(r, "objects", objects, sizeof(objects)), when,
			  fmt_int(r, "relists", relists, sizeof(relists)), clean);
		free(state);
		free(clean);
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

int cmd_k8s(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("k8s: missing subcommand (status)");
	if (strcmp(argv[0], "status") != 0)
		return usage_error("k8s: unknown subcommand '%s' (expected status)", argv[0]);
	if (argc > 1)
		return usage_error("k8s status: unexpected argument '%s'", argv[1]);
	return show("k8s", render_k8s_status);
}
