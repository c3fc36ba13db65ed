/* cli/cmd_health.c - `fibril health`: "ok" and exit 0 when the agent is
 * ready (GET /v1/healthz answers 200), else why not and exit 1.
 * `fibril health status`: the health module's connectivity view (GET
 * /v1/health, as `cilium-health status`): every node with its node and
 * health endpoint addresses (a second row for IPv6 on a dual-stack node), each probe's result and latency (last, p50,
 * p99 in ms; "unknown" before its first probe), the connectivity matrix;
 * exit 1 when a node is unreachable, each named with since when. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json.h>

#include "cli.h"

static int cmd_health_ready(void)
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

/* "ok 0.12/0.10/0.30", "FAIL: why", "unknown" (not probed yet), "-" (no
 * such target) */
static char *target_cell(struct json_object *targets, const char *name)
{
	struct json_object *t = jget(targets, name, json_type_object);
	struct json_object *probed = t ? jget(t, "probed", json_type_boolean) : NULL;
	if (!probed)
		return xasprintf("-");
	if (!json_object_get_boolean(probed))
		return xasprintf("unknown");
	struct json_object *ok = jget(t, "reachable", json_type_boolean);
	if (!ok || !json_object_get_boolean(ok)) {
		char *why = clean_dup(jstr(t, "error") ? jstr(t, "error") : "unreachable");
		char *c = xasprintf("FAIL: %s", why);
		free(why);
		return c;
	}
	double last = 0, p50 = 0, p99 = 0;
	jnum(t, "last_ms", &last);
	jnum(t, "p50_ms", &p50);
	jnum(t, "p99_ms", &p99);
	return xasprintf("ok %.3f/%.3f/%.3f", last, p50, p99);
}

static int render_health_status(struct json_object *reply)
{
	struct json_object *peers = jarray_of_objects(reply, "peers");
	if (!peers)
		return EXIT_FAIL;
	char *node = clean_dup(jstr(reply, "node") ? jstr(reply, "node") : "?");
	double interval = 0, round_ms = 0, rounds = 0;
	jnum(reply, "interval_ms", &interval);
	jnum(reply, "last_round_ms", &round_ms);
	jnum(reply, "rounds", &rounds);
	printf("Node %s: probing every %.0f ms, round %.0f took %.3f ms", node, interval, rounds, round_ms);
	if (jstr(reply, "endpoint_ip")) {
		char *ep = clean_dup(jstr(reply, "endpoint_ip"));
		printf(", health endpoint %s", ep);
		free(ep);
	}
	printf("\nLatency in ms: last/p50/p99 of the recent probes\n\n");
	free(node);
	struct table t;
	table_init(&t, 7);
	table_row(&t, "NODE", "NODE IP", "ICMP", "HTTP", "ENDPOINT IP", "ENDPOINT ICMP", "ENDPOINT HTTP");
	for (size_t i = 0; i < json_object_array_length(peers); i++) {
		struct json_object *p = json_object_array_get_idx(peers, i);
		struct json_object *tg = jget(p, "targets", json_type_object);
		struct json_object *local = jget(p, "local", json_type_boolean);
		char *name = xasprintf("%s%s", jstr(p, "name") ? jstr(p, "name") : "?",
				       local && json_object_get_boolean(local) ? " (local)" : "");
		static const char *const names[2][4] = {
			{"node-icmp", "node-http", "endpoint-icmp", "endpoint-http"},
			{"node-icmp6", "node-http6", "endpoint-icmp6", "endpoint-http6"}};
		static const char *const ip_keys[2][2] = {{"node_ip", "endpoint_ip"},
							  {"node_ip6", "endpoint_ip6"}};
		for (int f = 0; f < 2; f++) {
			bool any = f == 0 || jstr(p, ip_keys[f][0]) || jstr(p, ip_keys[f][1]);
			for (int k = 0; k < 4 && !any; k++)
				any = jget(tg, names[f][k], json_type_object) != NULL;
			if (!any)
				continue; /* no IPv6 row for an IPv4-only node */
			char *c[4];
			for (int k = 0; k < 4; k++)
				c[k] = target_cell(tg, names[f][k]);
			table_row(&t, name, jstr(p, ip_keys[f][0]), c[0], c[1], jstr(p, ip_keys[f][1]), c[2],
				  c[3]);
			for (int k = 0; k < 4; k++)
				free(c[k]);
		}
		free(name);
	}
	table_print(&t);
	table_free(&t);
	/* the matrix: a row per node that reported one, a column per node */
	struct json_object *matrix = jget(reply, "matrix", json_type_object);
	struct json_object *names = matrix ? jget(matrix, "nodes", json_type_array) : NULL;
	struct json_object *rows = matrix ? jget(matrix, "rows", json_type_object) : NULL;
	size_t nnodes = names ? json_object_array_length(names) : 0;
	if (names && rows && nnodes > 32)
		printf("\nConnectivity matrix: %zu nodes, too wide for a table (-o json has it)\n", nnodes);
	else if (names && rows) {
		size_t n = nnodes;
		printf("\nConnectivity matrix (row: from, column: to)\n");
		struct table m;
		table_init(&m, n + 1);
		char **cells = calloc(n + 1, sizeof(*cells));
		for (ssize_t r = -1; cells && r < (ssize_t)n; r++) {
			const char *from = r < 0 ? "FROM \\ TO"
				: json_object_get_string(json_object_array_get_idx(names, (size_t)r));
			struct json_object *row = r < 0 ? NULL : jget(rows, from ? from : "", json_type_object);
			cells[0] = clean_dup(from ? from : "?");
			for (size_t c = 0; c < n; c++) {
				const char *to = json_object_get_string(json_object_array_get_idx(names, c));
				struct json_object *v = row && to ? jget(row, to, json_type_boolean) : NULL;
				cells[c + 1] = r < 0 ? clean_dup(to ? to : "?")
					: xasprintf("%s", !v ? "-" : json_object_get_boolean(v) ? "ok" : "FAIL");
			}
			/* table_row takes exactly ncols strings: add the row cell by cell */
			if (m.nrows + 1 > m.cap) {
				m.cap = m.cap ? m.cap * 2 : 8;
				m.cells = xrealloc(m.cells, m.cap * m.ncols * sizeof(*m.cells));
			}
			for (size_t c = 0; c <= n; c++)
				m.cells[m.nrows * m.ncols + c] = cells[c];
			m.nrows++;
		}
		free(cells);
		table_print(&m);
		table_free(&m);
	}
	struct json_object *unreach = jget(reply, "unreachable", json_type_array);
	size_t nu = unreach ? json_object_array_length(unreach) : 0;
	if (nu) {
		char *list = join_list(reply, "unreachable");
		char *c = clean_dup(list);
		printf("\nUnreachable: %s\n", c);
		free(c);
		free(list);
		/* since when, per node: "  n3 unreachable since 2026-11-28T02:14:07Z (12s)" */
		struct json_object *since = jget(reply, "unreachable_since", json_type_object);
		for (size_t i = 0; since && i < nu; i++) {
			const char *name = json_object_get_string(json_object_array_get_idx(unreach, i));
			double when = 0;
			if (!name || !jnum(since, name, &when) || when <= 0)
				continue;
			char at[32];
			double ago = difftime(time(NULL), (time_t)when);
			char *n = clean_dup(name);
			printf("  %s unreachable since %s (%.0fs)\n", n, fmt_time(since, name, at, sizeof(at)),
			       ago < 0 ? 0 : ago);
			free(n);
		}
	}
	return nu ? EXIT_FAIL : 0;
}

int cmd_health(int argc, char **argv)
{
	if (argc == 0)
		return cmd_health_ready();
	if (strcmp(argv[0], "status"))
		return usage_error("health: unknown subcommand '%s' (status)", argv[0]);
	if (argc > 1)
		return usage_error("health status: unexpected argument '%s'", argv[1]);
	return show("health", render_health_status);
}
