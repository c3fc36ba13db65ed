/* cli/cmd_version.c - `fibril version`: this CLI's version and, when it
 * answers, the agent's (GET /v1/status). */

#include <stdio.h>
#include <stdlib.h>

#include <json.h>

#include "cli.h"

#ifndef FIBRIL_VERSION
#define FIBRIL_VERSION "unknown"
#endif

int cmd_version(void)
{
	struct json_object *st = NULL;
	const char *agent;

	/* The agent is optional here: its absence is reported, not fatal. */
	agent = get("status", &st) == 0 ? jstr(st, "version") : NULL;
	if (opt.json) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "client", json_object_new_string(FIBRIL_VERSION));
		json_object_object_add(o, "agent", agent ? json_object_new_string(agent) : NULL);
		print_json(o);
		json_object_put(o);
	} else {
		char *a = clean_dup(agent ? agent : "unknown (agent unreachable)");

		printf("fibril  %s\n", FIBRIL_VERSION);
		printf("agent   %s\n", a);
		free(a);
	}
	json_object_put(st);
	return 0;
}
