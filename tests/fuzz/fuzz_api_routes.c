/* tests/fuzz/fuzz_api_routes.c - fuzz target: the host's API request path:
 * route matching ({param} segments, 404, 405 with the allowed methods), the
 * JSON-body check of FIBRIL_ROUTE_JSON_BODY routes, the query arguments and
 * the agent's own routes (routes.c: healthz, status, modules, config, bus,
 * and /healthz, /livez, /metrics on the TCP listener). Besides the agent's
 * routes it registers the patterns the modules register, each answered by a
 * handler that reads every parameter, query and body accessor. Input: one or
 * more "METHOD /path?query\nbody" requests separated by "\n=====\n"; the
 * first byte 'T' sends them to the TCP listener's table instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#include "api_harness.h"
#include "fuzz.h"

static void echo(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	static const char *const params[] = {"ref", "ip", "id", "name", "resource", "x"};
	static const char *const queries[] = {"owner", "family", "watch", "limit", ""};
	char out[4096];
	size_t off = 0, len = 0;
	const char *body = fibril_req_body(req, &len);

	(void)ud;
	off += (size_t)snprintf(out + off, sizeof(out) - off, "%s %s", fibril_req_method(req),
				fibril_req_path(req));
	for (size_t i = 0; i < sizeof(params) / sizeof(params[0]) && off < sizeof(out); i++) {
		const char *v = fibril_req_param(req, params[i]);
		if (v)
			off += (size_t)snprintf(out + off, sizeof(out) - off, " {%s}=%s", params[i], v);
	}
	for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]) && off < sizeof(out); i++) {
		const char *v = fibril_req_query(req, queries[i]);
		if (v)
			off += (size_t)snprintf(out + off, sizeof(out) - off, " %s=%s", queries[i], v);
	}
	if (off < sizeof(out))
		snprintf(out + off, sizeof(out) - off, " body %zu %.16s", len, body);
	fibril_resp_body(resp, 200, "text/plain", out, strlen(out));
}

static void setup(void)
{
	static const struct {
		const char *method, *pattern;
		uint32_t flags;
	} routes[] = {
		{"GET", "/v1/endpoint", 0},
		{"GET", "/v1/endpoint/{ref}", 0},
		{"PUT", "/v1/endpoint/{ref}", FIBRIL_ROUTE_JSON_BODY},
		{"PATCH", "/v1/endpoint/{ref}", FIBRIL_ROUTE_JSON_BODY},
		{"DELETE", "/v1/endpoint/{ref}", 0},
		{"GET", "/v1/identity", 0},
		{"GET", "/v1/identity/{id}", 0},
		{"GET", "/v1/ipam", 0},
		{"POST", "/v1/ipam", 0},
		{"DELETE", "/v1/ipam", 0},
		{"POST", "/v1/ipam/{ip}", 0},
		{"DELETE", "/v1/ipam/{ip}", 0},
		{"GET", "/v1/k8s", 0},
		{"GET", "/v1/k8s/{resource}", 0},
		{"GET", "/v1/datapath/{x}/{name}", 0},
	};
	fuzz_quiet_logs();
	snprintf(g_agent.state, sizeof(g_agent.state), "running");
	g_agent.version = "fuzz"; /* what the agent sets before it serves */
	if (routes_register())
		abort();
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (api_route_host(routes[i].method, routes[i].pattern, routes[i].flags, echo, NULL))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	char *text = fuzz_strndup(data, size);
	if (size && text[0] == 'T') { /* the TCP listener's table, one request */
		char *nl = strchr(text + 1, '\n');
		if (nl)
			*nl = '\0';
		char *q = strchr(text + 1, '?');
		if (q)
			*q++ = '\0';
		fuzz_api_request("GET", text + 1, q, "", 0, true);
	} else {
		fuzz_api_requests(text);
	}
	free(text);
	return 0;
}
