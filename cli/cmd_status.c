/* cli/cmd_status.c - `fibril status`: the agent's state, uptime, health,
 * bootstrap time and each module's state and summary, from GET /v1/status. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

static void fmt_uptime(double s, char *buf, size_t len)
{
	long t = (long)s;

	if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (t < 3600)
		snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, len, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%ldd%02ldh%02ldm", t / 86400, t / 3600 % 24, t / 60 % 60);
}

/* The SUMMARY/MESSAGE cell of a module: its error, its health message and
 * its summary, whichever are present, joined with "; ". Malloc'd. */
static char *module_message(struct json_object *m)
{
	const char *parts[3] = { jstr(m, "error"), jstr(jget(m, "health", json_type_object), "message"),
				 jstr(m, "summary") };
	const char *prefix[3] = { "error: ", "", "" };
	char *out = NULL;

	for (int i = 0; i < 3; i++) {
		if (!parts[i] || !*parts[i])
			continue;
		char *more = xasprintf("%s%s%s%s", out ? out : "", out ? "; " : "", prefix[i], parts[i]);

		free(out);
		out = more;
	}
	return out ? out : xasprintf("-");
}

/* The summary of module `want` in a status reply, or NULL. */
static const char *module_summary(struct json_object *mods, const char *want)
{
	for (size_t i = 0; i < json_object_array_length(mods); i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		const char *name = jstr(m, "name"), *summary = jstr(m, "summary");

		if (name && !strcmp(name, want) && summary && *summary)
			return summary;
	}
	return NULL;
}

/* The summary of the ipam-api module in a status reply, or NULL. */
static const char *ipam_summary(struct json_object *mods)
{
	return module_summary(mods, "ipam-api");
}

int render_status(struct json_object *st)
{
	struct json_object *mods = jarray_of_objects(st, "modules");
	struct json_object *boot = jget(st, "bootstrap", json_type_object);
	char buf[64];
	double d;

	if (!mods)
		return EXIT_FAIL;
	printf("Version:    %s\n", jstr(st, "version") ? jstr(st, "version") : "-");
	printf("State:      %s\n", jstr(st, "state") ? jstr(st, "state") : "-");
	if (jnum(st, "uptime_seconds", &d))
		fmt_uptime(d, buf, sizeof(buf));
	else
		strcpy(buf, "-");
	printf("Uptime:     %s\n", buf);
	printf("Health:     %s\n", jstr(st, "health") ? jstr(st, "health") : "-");
	if (ipam_summary(mods)) {
		char *ipam = clean_dup(ipam_summary(mods));

		printf("IPAM:       %s\n", ipam);
		free(ipam);
	}
	if (module_summary(mods, "k8s")) {
		char *k8s = clean_dup(module_summary(mods, "k8s"));

		printf("Kubernetes: %s\n", k8s);
		free(k8s);
	}
	if (jnum(boot, "total_ms", &d)) {
		char c[32], l[32], i[32], s[32];

		printf("Bootstrap:  %.2fms (config %s, load %s, init %s, start %s)\n", d,
		       fmt_ms(boot, "config_ms", c, sizeof(c)), fmt_ms(boot, "load_ms", l, sizeof(l)),
		       fmt_ms(boot, "init_ms", i, sizeof(i)), fmt_ms(boot, "start_ms", s, sizeof(s)));
	}
	struct json_object *lp = jget(st, "loop", json_type_object);
	double at, slow;

	if (jnum(lp, "longest_stall_ms", &d) && jnum(lp, "longest_stall_at_ms", &at))
	{
		const char *in = jstr(lp, "longest_stall_in");

		printf("Loop:       longest stall %.1fms (%.1fs after the start began%s%s), %.0f of 50ms or more\n",
		       d, at / 1000.0, in && *in ? "; longest call: " : "", in && *in ? in : "",
		       jnum(lp, "stalls_over_50ms", &slow) ? slow : 0.0);
	}
	putchar('\n');

	size_t n = json_object_array_length(mods);

	if (n == 0) {
		puts("No modules loaded.");
		return 0;
	}

	struct table t;

	table_init(&t, 6);
	table_row(&t, "NAME", "STATE", "HEALTH", "INIT", "START", "SUMMARY/MESSAGE");
	for (size_t i = 0; i < n; i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		struct json_object *health = jget(m, "health", json_type_object);
		struct json_object *timings = jget(m, "timings", json_type_object);
		struct json_object *comps = jget(health, "components", json_type_array);
		char init[32], start[32];
		char *msg = module_message(m);

		table_row(&t, jstr(m, "name"), jstr(m, "state"), jstr(health, "level"),
			  fmt_ms(timings, "init_ms", init, sizeof(init)),
			  fmt_ms(timings, "start_ms", start, sizeof(start)), msg);
		free(msg);
		for (size_t j = 0; comps && j < json_object_array_length(comps); j++) {
			struct json_object *c = json_object_array_get_idx(comps, j);
			const char *cname = jstr(c, "name"), *cmsg = jstr(c, "message");
			char *name = xasprintf("  %s", cname ? cname : "?");

			table_row(&t, name, "", jstr(c, "level"), "", "", cmsg && *cmsg ? cmsg : "");
			free(name);
		}
	}
	table_print(&t);
	table_free(&t);
	return 0;
}
