/* host/routes.c - the agent's built-in API routes: health (readiness),
 * status with bootstrap timings, the effective config, the module list, bus
 * counters; and on the TCP listener the kubelet's probes (/livez: the loop
 * answers; /readyz, and /healthz as before: every started module OK) and
 * /metrics in the Prometheus text format. Another node's reachability is
 * in none of them: the health module reports it as information (GET
 * /v1/health), never as this agent's health. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct agent_state g_agent;

static struct json_object *json_ms(double ms, bool valid)
{
	return valid ? json_object_new_double(ms) : NULL;
}

static struct json_object *string_list(const char *const *list)
{
	struct json_object *arr = json_object_new_array();
	for (; list && *list; list++)
		json_object_array_add(arr, json_object_new_string(*list));
	return arr;
}

static bool is_started(const struct fibril_module *m)
{
	return m->state == MODULE_RUNNING || m->state == MODULE_STARTING;
}

/* Everything not OK among started modules, as one line and as JSON. */
static bool collect_unhealthy(char *line, size_t len, struct json_object *arr)
{
	bool all_ok = true;
	size_t off = 0;
	line[0] = '\0';
	for (size_t i = 0; i < g_agent.modules.norder; i++) {
		const struct fibril_module *m = g_agent.modules.order[i];
		const char *why = "";
		enum fibril_health_level level = health_of(m, &why);
		if (!is_started(m))
			level = FIBRIL_HEALTH_STOPPED, why = module_state_name(m->state);
		if (level == FIBRIL_HEALTH_OK)
			continue;
		all_ok = false;
		if (off < len)
			off += (size_t)snprintf(line + off, len - off, "%s%s (%s%s%s)", off ? "; " : "",
						m->name, health_level_name(level), *why ? ": " : "", why);
		if (arr) {
			struct json_object *o = json_object_new_object();
			json_object_object_add(o, "name", json_object_new_string(m->name));
			json_object_object_add(o, "health", json_object_new_string(health_level_name(level)));
			json_object_object_add(o, "message", json_object_new_string(why));
			json_object_array_add(arr, o);
		}
	}
	return all_ok;
}

static void healthz(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	char line[1024];
	struct json_object *arr = json_object_new_array();
	if (strcmp(g_agent.state, "running") != 0) {
		json_object_put(arr);
		fibril_resp_error(resp, 503, "not ready: agent is %s", g_agent.state);
		return;
	}
	if (collect_unhealthy(line, sizeof(line), arr)) {
		json_object_put(arr);
		fibril_resp_json(resp, 200, "{\"status\":\"ok\"}");
		return;
	}
	struct json_object *o = json_object_new_object();
	char msg[1100];
	snprintf(msg, sizeof(msg), "not ready: %s", line);
	json_object_object_add(o, "error", json_object_new_string(msg));
	json_object_object_add(o, "code", json_object_new_int(503));
	json_object_object_add(o, "modules", arr);
	api_resp_object(resp, 503, o);
}

/* Liveness: answered on the loop thread, so an answer means the loop runs
 * (a stuck loop answers nothing and the kubelet restarts the agent). */
static void livez(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	fibril_resp_body(resp, 200, "text/plain", "ok\n", 3);
}

static struct json_object *module_status(struct fibril_module *m)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(m->name));
	json_object_object_add(o, "version", json_object_new_string(m->desc.version ? m->desc.version : ""));
	json_object_object_add(o, "state", json_object_new_string(module_state_name(m->state)));
	json_object_object_add(o, "health", health_to_json(m));
	struct json_object *t = json_object_new_object();
	bool inited = m->state != MODULE_LOADED;
	json_object_object_add(t, "init_ms", json_ms(m->init_ms, inited));
	json_object_object_add(t, "start_ms", json_ms(m->start_ms, m->state >= MODULE_RUNNING));
	json_object_object_add(t, "start_hook_ms", json_ms(m->start_hook_ms, m->state >= MODULE_RUNNING));
	json_object_object_add(t, "stop_ms", json_ms(m->stop_ms, m->state == MODULE_STOPPED));
	json_object_object_add(t, "fini_ms", json_ms(m->fini_ms, false));
	json_object_object_add(o, "timings", t);
	if (m->desc.summary && m->state == MODULE_RUNNING) {
		char buf[256] = "";
		struct crash_ctx cc;
		crash_enter(&cc, m, "summary hook", NULL, -1);
		int n = m->desc.summary(m, buf, sizeof(buf));
		crash_leave(&cc);
		if (n >= 0)
			json_object_object_add(o, "summary", json_object_new_string(buf));
	}
	json_object_object_add(o, "error", json_object_new_string(m->error));
	return o;
}

static void status(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "version", json_object_new_string(g_agent.version));
	json_object_object_add(o, "state", json_object_new_string(g_agent.state));
	json_object_object_add(o, "uptime_seconds",
			       json_object_new_double((mono_ms() - g_agent.started_at_ms) / 1000.0));
	char line[1024];
	json_object_object_add(o, "health", json_object_new_string(
		collect_unhealthy(line, sizeof(line), NULL) ? "ok" : "degraded"));
	struct json_object *b = json_object_new_object();
	json_object_object_add(b, "total_ms", json_object_new_double(g_agent.ready_at_ms - g_agent.started_at_ms));
	json_object_object_add(b, "config_ms", json_object_new_double(g_agent.phase_ms[AGENT_PHASE_CONFIG]));
	json_object_object_add(b, "load_ms", json_object_new_double(g_agent.phase_ms[AGENT_PHASE_LOAD]));
	json_object_object_add(b, "init_ms", json_object_new_double(g_agent.phase_ms[AGENT_PHASE_INIT]));
	json_object_object_add(b, "start_ms", json_object_new_double(g_agent.phase_ms[AGENT_PHASE_START]));
	json_object_object_add(o, "bootstrap", b);
	struct loop_stall_stats ls;
	loop_stall_stats(&ls);
	struct json_object *lp = json_object_new_object();
	json_object_object_add(lp, "longest_stall_ms", json_object_new_double(ls.max_ms));
	json_object_object_add(lp, "longest_stall_at_ms", json_object_new_double(ls.max_at_ms));
	json_object_object_add(lp, "longest_stall_in", json_object_new_string(ls.max_in));
	json_object_object_add(lp, "stalls_over_50ms", json_object_new_int64((int64_t)ls.slow));
	json_object_object_add(lp, "iterations", json_object_new_int64((int64_t)ls.iterations));
	json_object_object_add(o, "loop", lp);
	struct json_object *mods = json_object_new_array();
	for (size_t i = 0; i < g_agent.modules.norder; i++)
		json_object_array_add(mods, module_status(g_agent.modules.order[i]));
	json_object_object_add(o, "modules", mods);
	api_resp_object(resp, 200, o);
}

static void modules(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct json_object *arr = json_object_new_array();
	for (size_t i = 0; i < g_agent.modules.n; i++) {
		const struct fibril_module *m = g_agent.modules.mods[i];
		struct json_object *o = json_object_new_object();
		char abi[32];
		snprintf(abi, sizeof(abi), "%u.%u", m->desc.abi_major, m->desc.abi_minor);
		json_object_object_add(o, "name", json_object_new_string(m->name));
		json_object_object_add(o, "version", json_object_new_string(m->desc.version ? m->desc.version : ""));
		json_object_object_add(o, "description",
				       json_object_new_string(m->desc.description ? m->desc.description : ""));
		json_object_object_add(o, "file", json_object_new_string(m->path));
		json_object_object_add(o, "abi", json_object_new_string(abi));
		json_object_object_add(o, "provides", string_list(m->desc.provides));
		json_object_object_add(o, "requires", string_list(m->desc.requires));
		json_object_object_add(o, "wants", string_list(m->desc.wants));
		struct json_object *after = json_object_new_array();
		for (size_t d = 0; d < m->ndeps; d++)
			json_object_array_add(after, json_object_new_string(m->deps[d]->name));
		json_object_object_add(o, "after", after);
		json_object_object_add(o, "order", json_object_new_int(m->order));
		json_object_object_add(o, "state", json_object_new_string(module_state_name(m->state)));
		json_object_array_add(arr, o);
	}
	struct json_object *root = json_object_new_object();
	json_object_object_add(root, "modules", arr);
	api_resp_object(resp, 200, root);
}

static void config(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	api_resp_object(resp, 200, config_to_json());
}

static void bus(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	api_resp_object(resp, 200, bus_to_json());
}

static void metrics(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	if (!out) {
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	fprintf(out, "# HELP fibril_uptime_seconds Seconds since the agent started.\n"
		     "# TYPE fibril_uptime_seconds gauge\nfibril_uptime_seconds %.3f\n",
		(mono_ms() - g_agent.started_at_ms) / 1000.0);
	fprintf(out, "# HELP fibril_ready 1 when every started module is healthy.\n"
		     "# TYPE fibril_ready gauge\n");
	char line[1024];
	fprintf(out, "fibril_ready %d\n", strcmp(g_agent.state, "running") == 0 &&
						  collect_unhealthy(line, sizeof(line), NULL));
	bus_metrics(out);
	fprintf(out, "# HELP fibril_module_health Current health level of each module (1 for the current level).\n"
		     "# TYPE fibril_module_health gauge\n");
	for (size_t i = 0; i < g_agent.modules.norder; i++) {
		const struct fibril_module *m = g_agent.modules.order[i];
		enum fibril_health_level level = health_of(m, NULL);
		for (int l = FIBRIL_HEALTH_OK; l <= FIBRIL_HEALTH_STOPPED; l++)
			fprintf(out, "fibril_module_health{module=\"%s\",level=\"%s\"} %d\n", m->name,
				health_level_name((enum fibril_health_level)l), (int)level == l);
	}
	fprintf(out, "# HELP fibril_module_phase_seconds Time each module spent in each lifecycle phase.\n"
		     "# TYPE fibril_module_phase_seconds gauge\n");
	for (size_t i = 0; i < g_agent.modules.norder; i++) {
		const struct fibril_module *m = g_agent.modules.order[i];
		fprintf(out, "fibril_module_phase_seconds{module=\"%s\",phase=\"init\"} %.6f\n", m->name,
			m->init_ms / 1000.0);
		fprintf(out, "fibril_module_phase_seconds{module=\"%s\",phase=\"start\"} %.6f\n", m->name,
			m->start_ms / 1000.0);
	}
	metrics_serve(out);
	fclose(out);
	fibril_resp_body(resp, 200, "text/plain; version=0.0.4", text, len);
	free(text);
}

int routes_register(void)
{
	int rc = 0;
	rc |= api_route_host("GET", "/v1/healthz", 0, healthz, NULL);
	rc |= api_route_host("GET", "/v1/status", 0, status, NULL);
	rc |= api_route_host("GET", "/v1/modules", 0, modules, NULL);
	rc |= api_route_host("GET", "/v1/config", 0, config, NULL);
	rc |= api_route_host("GET", "/v1/bus", 0, bus, NULL);
	rc |= api_route_tcp("GET", "/healthz", healthz, NULL);
	rc |= api_route_tcp("GET", "/readyz", healthz, NULL); /* the same: readiness */
	rc |= api_route_tcp("GET", "/livez", livez, NULL);
	rc |= api_route_tcp("GET", "/metrics", metrics, NULL);
	rc |= api_route_host("GET", "/metrics", 0, metrics, NULL);
	rc |= metrics_init();
	return rc ? -1 : 0;
}
