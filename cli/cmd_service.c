/* cli/cmd_service.c - `fibril service list|get ID|upsert FILE|-|delete ID|
 * apply -f FILE|-`:
 * the lb module's services (GET/PUT/DELETE /v1/service), as `cilium
 * service` has them. upsert sends the file's JSON (one service:
 * {"frontend": "10.96.0.10:80", "protocol": "TCP", "backends": [{"address":
 * "10.0.0.5:8080", "state": "active"}], ...}) and prints the service with
 * its ID; list prints one line per frontend with its backends, their
 * states and IDs. apply sends many services in one request (PUT
 * /v1/service with a JSON array: all or nothing), from a file holding a
 * JSON array or JSON lines (one service per line). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

#define SERVICE_MAX_FILE ((size_t)4 << 20)
#define SERVICE_MAX_BATCH_FILE ((size_t)64 << 20)

static void service_rows(struct table *t, struct json_object *s)
{
	char id[32];
	struct json_object *bes = jarray_of_objects(s, "backends");
	size_t n = bes ? json_object_array_length(bes) : 0;
	char *fe = xasprintf("%s/%s", jstr(s, "frontend") ? jstr(s, "frontend") : "?",
			     jstr(s, "protocol") ? jstr(s, "protocol") : "?");
	char *opts = xasprintf("%s%s", jstr(s, "algorithm") ? jstr(s, "algorithm") : "",
			       json_object_get_boolean(jget(s, "session-affinity", json_type_boolean))
				       ? ",affinity"
				       : "");
	const char *name = jstr(s, "name");
	for (size_t i = 0; i < (n ? n : 1); i++) {
		struct json_object *b = n ? json_object_array_get_idx(bes, i) : NULL;
		char bid[32];
		char *be = b ? xasprintf("%s (%s)", jstr(b, "address") ? jstr(b, "address") : "?",
					 jstr(b, "state") ? jstr(b, "state") : "?")
			     : NULL;
		if (i == 0)
			table_row(t, fmt_int(s, "id", id, sizeof(id)), fe, jstr(s, "type"), opts,
				  name && *name ? name : "-", b ? fmt_int(b, "id", bid, sizeof(bid)) : "-",
				  be ? be : "(no backends)");
		else
			table_row(t, "", "", "", "", "", fmt_int(b, "id", bid, sizeof(bid)), be);
		free(be);
	}
	free(fe);
	free(opts);
}

static int render_list(struct json_object *reply)
{
	struct json_object *svcs = jarray_of_objects(reply, "services");
	if (!svcs)
		return EXIT_FAIL;
	if (!json_object_array_length(svcs)) {
		puts("No services.");
		return 0;
	}
	struct table t;
	table_init(&t, 7);
	table_row(&t, "ID", "FRONTEND", "TYPE", "SELECTION", "NAME", "BACKEND ID", "BACKEND");
	for (size_t i = 0; i < json_object_array_length(svcs); i++)
		service_rows(&t, json_object_array_get_idx(svcs, i));
	table_print(&t);
	table_free(&t);
	return 0;
}

static int render_one(struct json_object *s)
{
	struct table t;
	table_init(&t, 7);
	table_row(&t, "ID", "FRONTEND", "TYPE", "SELECTION", "NAME", "BACKEND ID", "BACKEND");
	service_rows(&t, s);
	table_print(&t);
	table_free(&t);
	return 0;
}

static int service_upsert(const char *path)
{
	char *body;
	size_t len;
	struct json_object *reply;
	if (read_input("service upsert", path, SERVICE_MAX_FILE, &body, &len) < 0)
		return EXIT_FAIL;
	int rc = request_body("PUT", "service", body, len, &reply);
	free(body);
	if (rc < 0)
		return EXIT_FAIL;
	if (opt.json)
		print_json(reply);
	else
		render_one(reply);
	json_object_put(reply);
	return 0;
}

/* JSON lines (one service per line, blank lines skipped) -> a JSON array;
 * text that is already an array is kept. NULL (and a message) when a line
 * is not one JSON object. */
static char *batch_body(const char *path, char *text, size_t len, size_t *out_len)
{
	size_t first = 0;
	while (first < len && strchr(" \t\r\n", text[first]) && text[first])
		first++;
	if (first < len && text[first] == '[') {
		*out_len = len;
		return strdup(text);
	}
	char *body = malloc(len + 3), *o = body;
	if (!body)
		return NULL;
	*o++ = '[';
	size_t line = 0;
	for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		line++;
		while (*l == ' ' || *l == '\t' || *l == '\r')
			l++;
		size_t n = strlen(l);
		while (n && (l[n - 1] == ' ' || l[n - 1] == '\t' || l[n - 1] == '\r'))
			n--;
		if (!n)
			continue;
		if (l[0] != '{') {
			fprintf(stderr, "fibril: service apply: %s: line %zu is not a JSON object\n", path,
				line);
			free(body);
			return NULL;
		}
		if (o > body + 1)
			*o++ = ',';
		memcpy(o, l, n);
		o += n;
	}
	*o++ = ']';
	*o = '\0';
	*out_len = (size_t)(o - body);
	return body;
}

static int service_apply(int argc, char **argv)
{
	if (argc != 1 || !opt.file || !*opt.file)
		return usage_error("service apply: expected -f FILE (or -f - for stdin): a JSON array "
				   "of services or JSON lines");
	const char *path = opt.file;
	char *text, *body;
	size_t len, blen;
	struct json_object *reply;
	if (read_input("service apply", path, SERVICE_MAX_BATCH_FILE, &text, &len) < 0)
		return EXIT_FAIL;
	body = batch_body(path, text, len, &blen);
	free(text);
	if (!body)
		return EXIT_FAIL;
	int rc = request_body("PUT", "service", body, blen, &reply);
	free(body);
	if (rc < 0)
		return EXIT_FAIL;
	if (opt.json)
		print_json(reply);
	else
		printf("Applied %lld services\n",
		       (long long)json_object_get_int64(jget(reply, "applied", json_type_int)));
	json_object_put(reply);
	return 0;
}

static int id_arg(const char *sub, int argc, char **argv, char **path)
{
	if (argc != 2 || !*argv[1])
		return usage_error("service %s: expected one service ID", sub);
	for (const char *p = argv[1]; *p; p++)
		if (*p < '0' || *p > '9')
			return usage_error("service %s: '%s' is not a service ID (a number)", sub,
					   argv[1]);
	*path = xasprintf("service/%s", argv[1]);
	return 0;
}

int cmd_service(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("service: missing subcommand (list, get ID, upsert FILE, "
				   "apply -f FILE, delete ID)");
	const char *sub = argv[0];
	char *path = NULL;
	int rc;
	if (!strcmp(sub, "list")) {
		if (argc > 1)
			return usage_error("service list: unexpected argument '%s'", argv[1]);
		return show("service", render_list);
	}
	if (!strcmp(sub, "upsert")) {
		if (argc != 2 || !*argv[1])
			return usage_error("service upsert: expected one FILE (or - for stdin)");
		return service_upsert(argv[1]);
	}
	if (!strcmp(sub, "apply"))
		return service_apply(argc, argv);
	if (!strcmp(sub, "get")) {
		if ((rc = id_arg(sub, argc, argv, &path)))
			return rc;
		rc = show(path, render_one);
		free(path);
		return rc;
	}
	if (!strcmp(sub, "delete")) {
		if ((rc = id_arg(sub, argc, argv, &path)))
			return rc;
		struct json_object *reply;
		rc = request("DELETE", path, &reply) < 0 ? EXIT_FAIL : 0;
		free(path);
		if (!rc) {
			if (opt.json)
				print_json(reply);
			else
				printf("Deleted service %s\n", argv[1]);
			json_object_put(reply);
		}
		return rc;
	}
	return usage_error("service: unknown subcommand '%s' (list, get ID, upsert FILE, "
			   "apply -f FILE, delete ID)", sub);
}
