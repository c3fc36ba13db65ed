/* cli/cmd_health.c - `fibril health`: "ok" and exit 0 when the agent is
 * ready (GET /v1/healthz answers 200), else why not and exit 1. */

#include <stdio.h>
#include <stdlib.h>

#include <json.h>

#include "cli.h"

int cmd_health(void)
{
	struct json_object *reply;
	long status;
	int rc = EXIT_FAIL;

	if (fetch("GET", "healthz", &reply, &status) < 0)
		return EXIT_FAIL;
	if (opt.json) {
		print_json(reply);
		rc = status == 200 ? 0 : EXIT_FAIL;
	} else if (status == 200) {
		const char *s = jstr(reply, "status");

		if (s) {
			char *c = clean_dup(s);

			puts(c);
			free(c);
			rc = 0;
		} else {
			print_error("bad reply from agent: no \"status\" in %s", "/v1/healthz");
		}
	} else {
		report_http_error(reply, status);
	}
	json_object_put(reply);
	return rc;
}
