/* modules/egressgw/egw_api.c - the egress gateway's API:
 *   PUT    /v1/egress-gateway/NAME   a policy (JSON, egw_policy.c), saved
 *                                    before the answer, then in dp_egress
 *   GET    /v1/egress-gateway/NAME   it, with its gateways' state and the
 *                                    identities it selects, each with the
 *                                    gateway chosen for it
 *   GET    /v1/egress-gateway        every policy so, and the module's state
 *   DELETE /v1/egress-gateway/NAME
 * A bad request is answered with one line naming what was wrong and
 * changes nothing. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include <fibril/api.h>
#include <fibril/log.h>

#include "egressgw.h"

static void reply(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

static const char *reach_text(uint8_t r)
{
	return r == EGW_REACH_OK ? "reachable" : r == EGW_REACH_FAILED ? "unreachable" : "unknown";
}

static struct json_object *policy_status(struct egw *g, const struct egw_policy *p)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(p->name));
	json_object_object_add(o, "spec", egw_policy_json(p));
	struct json_object *gws = json_object_new_array();
	uint64_t now = egw_now_ms();
	for (size_t i = 0; i < p->n_gw; i++) {
		struct json_object *x = json_object_new_object();
		const struct egw_node *n = egw_node_find(g, p->gw[i].node);
		char ip[INET_ADDRSTRLEN] = "";
		if (n && n->has_ip)
			inet_ntop(AF_INET, &n->ip, ip, sizeof(ip));
		json_object_object_add(x, "nodeName", json_object_new_string(p->gw[i].node));
		json_object_object_add(x, "nodeIP", json_object_new_string(ip));
		json_object_object_add(x, "alive",
				       json_object_new_boolean(egw_gateway_alive(g, p->gw[i].node)));
		json_object_object_add(x, "known", json_object_new_boolean(
						    !strcmp(p->gw[i].node, g->self) || (n && n->known)));
		json_object_object_add(x, "health", json_object_new_string(n ? reach_text(n->reach)
									     : "unknown"));
		json_object_object_add(x, "since_ms", json_object_new_int64(
							      n ? (int64_t)(now - n->since_ms) : 0));
		json_object_array_add(gws, x);
	}
	json_object_object_add(o, "gateways", gws);
	struct json_object *sel = json_object_new_array();
	for (size_t i = 0; i < g->n_ids; i++) {
		if (!egw_policy_selects(p, g->ids[i].labels))
			continue;
		const struct egw_gateway *gw = egw_choose(g, p, g->ids[i].id);
		struct json_object *x = json_object_new_object();
		json_object_object_add(x, "identity", json_object_new_int64(g->ids[i].id));
		json_object_object_add(x, "gateway", gw ? json_object_new_string(gw->node) : NULL);
		json_object_array_add(sel, x);
	}
	json_object_object_add(o, "selected", sel);
	return o;
}

static ssize_t policy_index(struct egw *g, const char *name)
{
	for (size_t i = 0; i < g->n_pol; i++)
		if (!strcmp(g->pol[i]->name, name))
			return (ssize_t)i;
	return -1;
}

static void get_all(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct egw *g = ud;
	struct json_object *o = json_object_new_object(), *a = json_object_new_array();
	for (size_t i = 0; i < g->n_pol; i++)
		json_object_array_add(a, policy_status(g, g->pol[i]));
	json_object_object_add(o, "node", json_object_new_string(g->self));
	json_object_object_add(o, "policies", a);
	json_object_object_add(o, "entries", json_object_new_int64((int64_t)g->n_entries));
	json_object_object_add(o, "syncs", json_object_new_int64((int64_t)g->syncs));
	json_object_object_add(o, "sync_errors", json_object_new_int64((int64_t)g->sync_errors));
	json_object_object_add(o, "gateway_moves", json_object_new_int64((int64_t)g->moves));
	json_object_object_add(o, "last_error", json_object_new_string(g->last_error));
	reply(resp, 200, o);
}

static const char *name_param(struct fibril_request *req, struct fibril_response *resp)
{
	const char *name = fibril_req_param(req, "name");
	if (!egw_name_valid(name)) {
		fibril_resp_error(resp, 400,
				  "policy name \"%.64s\": must be 1..%d of a-z 0-9 . - (alphanumeric at both ends)",
				  name ? name : "", EGW_NAME_MAX);
		return NULL;
	}
	return name;
}

static void get_one(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct egw *g = ud;
	const char *name = name_param(req, resp);
	if (!name)
		return;
	ssize_t i = policy_index(g, name);
	if (i < 0) {
		fibril_resp_error(resp, 404, "no egress gateway policy %s", name);
		return;
	}
	reply(resp, 200, policy_status(g, g->pol[i]));
}

static void put_one(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct egw *g = ud;
	const char *name = name_param(req, resp);
	if (!name)
		return;
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	if (!body || !len) {
		fibril_resp_error(resp, 400, "the body must be a policy (JSON)");
		return;
	}
	if (len > EGW_BODY_MAX) {
		fibril_resp_error(resp, 413, "the policy is %zu bytes, at most %u", len, EGW_BODY_MAX);
		return;
	}
	struct egw_policy *p = calloc(1, sizeof(*p));
	if (!p) {
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	snprintf(p->name, sizeof(p->name), "%s", name);
	char why[EGW_ERR_LEN];
	if (egw_policy_parse(body, len, p, why, sizeof(why))) {
		fibril_resp_error(resp, 400, "policy %s: %s", name, why);
		free(p);
		return;
	}
	ssize_t at = policy_index(g, name);
	struct egw_policy *old = at >= 0 ? g->pol[at] : NULL;
	size_t pos = 0;
	if (old) {
		g->pol[at] = p;
	} else {
		if (g->n_pol == EGW_MAX_POLICIES) {
			fibril_resp_error(resp, 409, "policy %s: %d policies already", name,
					  EGW_MAX_POLICIES);
			free(p);
			return;
		}
		while (pos < g->n_pol && strcmp(g->pol[pos]->name, name) < 0)
			pos++;
		memmove(&g->pol[pos + 1], &g->pol[pos], (g->n_pol - pos) * sizeof(g->pol[0]));
		g->pol[pos] = p;
		g->n_pol++;
	}
	char err[EGW_ERR_LEN] = "";
	int rc = egw_save(g);
	egw_adopted_clear(g); /* the policies an earlier run followed changed */
	if (rc == 0 && (rc = egw_sync(g, err, sizeof(err))) == 0) {
		free(old);
		fibril_info(g->m, "policy %s %s", name, old ? "replaced" : "added");
		reply(resp, old ? 200 : 201, policy_status(g, p));
		return;
	}
	/* undo: nothing changes */
	if (old) {
		g->pol[at] = old;
	} else {
		memmove(&g->pol[pos], &g->pol[pos + 1], (g->n_pol - pos - 1) * sizeof(g->pol[0]));
		g->n_pol--;
	}
	free(p);
	egw_save(g);
	char e2[EGW_ERR_LEN];
	egw_sync(g, e2, sizeof(e2));
	fibril_resp_error(resp, 500, "policy %s: %s", name, err[0] ? err : strerror(-rc));
}

static void delete_one(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct egw *g = ud;
	const char *name = name_param(req, resp);
	if (!name)
		return;
	ssize_t at = policy_index(g, name);
	if (at < 0) {
		fibril_resp_error(resp, 404, "no egress gateway policy %s", name);
		return;
	}
	struct egw_policy *p = g->pol[at];
	memmove(&g->pol[at], &g->pol[at + 1], (g->n_pol - (size_t)at - 1) * sizeof(g->pol[0]));
	g->n_pol--;
	int rc = egw_save(g);
	if (rc) {
		memmove(&g->pol[at + 1], &g->pol[at], (g->n_pol - (size_t)at) * sizeof(g->pol[0]));
		g->pol[at] = p;
		g->n_pol++;
		fibril_resp_error(resp, 500, "policy %s: cannot save: %s", name, strerror(-rc));
		return;
	}
	free(p);
	egw_adopted_clear(g);
	char err[EGW_ERR_LEN] = "";
	if (egw_sync(g, err, sizeof(err)))
		fibril_warn(g->m, "policy %s deleted; dp_egress: %s", name, err);
	fibril_info(g->m, "policy %s deleted", name);
	fibril_resp_json(resp, 200, "{}");
}

int egw_api_register(struct egw *g)
{
	int rc;
	if ((rc = fibril_api_route(g->m, "GET", "/v1/egress-gateway", 0, get_all, g)) ||
	    (rc = fibril_api_route(g->m, "GET", "/v1/egress-gateway/{name}", 0, get_one, g)) ||
	    (rc = fibril_api_route(g->m, "PUT", "/v1/egress-gateway/{name}", FIBRIL_ROUTE_JSON_BODY,
				   put_one, g)) ||
	    (rc = fibril_api_route(g->m, "DELETE", "/v1/egress-gateway/{name}", 0, delete_one, g))) {
		fibril_module_set_error(g->m, "cannot register the /v1/egress-gateway routes: %s",
					strerror(-rc));
		return rc;
	}
	return 0;
}
