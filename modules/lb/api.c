/* modules/lb/api.c - the lb module's REST routes (docs/API.md):
 *
 *   GET    /v1/service        every service, and the module's state
 *   GET    /v1/service/{id}   one
 *   PUT    /v1/service        upsert one (its JSON form: model.c), or with a
 *                             JSON array many, all or nothing (api_batch.c)
 *   DELETE /v1/service/{id}   delete one
 *
 * A frontend that Kubernetes or a pod's hostPort holds is theirs: the API
 * answers 409 to an upsert or delete of it.
 *
 * (`fibril service list|get|upsert|delete`). Upserts and deletes go through
 * lb_upsert / lb_delete (lb.c), as Kubernetes' do. */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

#include "lb_mod.h"
#include "lb_tc.h"

static void reply(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

static int status_of(int rc)
{
	switch (rc) {
	case -EINVAL: return 400;
	case -ENOENT: return 404;
	case -EEXIST: return 409;
	case -EAGAIN: return 503;
	case -ENOSPC: return 507;
	default: return 500;
	}
}

static bool parse_id(const char *s, uint16_t *id)
{
	char *end;
	if (!s || !*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || !v || v > LB_SVC_ID_MAX)
		return false;
	*id = (uint16_t)v;
	return true;
}

static void get_services(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct lb *lb = ud;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	if (lb->table_ready)
		for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++)
			if (lb->t.svc[id])
				json_object_array_add(arr, lb_svc_to_json(lb->t.svc[id]));
	json_object_object_add(o, "services", arr);
	json_object_object_add(o, "backends", json_object_new_int64((int64_t)lb->t.nbe));
	json_object_object_add(o, "maglev-table-size", json_object_new_int64(lb->maglev_m));
	json_object_object_add(o, "socket-lb-hooks", json_object_new_int(lb->hooks_attached));
	json_object_object_add(o, "cgroup", json_object_new_string(lb->cgroup));
	json_object_object_add(o, "nodeport-devices", json_object_new_int(lb_tc_devices(lb->tc)));
	json_object_object_add(o, "restored", json_object_new_int64((int64_t)lb->restored));
	json_object_object_add(o, "k8s-skipped", json_object_new_int64((int64_t)lb_k8s_skipped(lb->k8s)));
	json_object_object_add(o, "k8s-held-slices",
			       json_object_new_int64((int64_t)lb_k8s_held_slices(lb->k8s)));
	json_object_object_add(o, "restored-k8s", json_object_new_int64((int64_t)lb->restored_k8s));
	json_object_object_add(o, "restored-unknown-origin",
			       json_object_new_int64((int64_t)(lb->restored - lb->restored_known)));
	json_object_object_add(o, "k8s-synced", json_object_new_boolean(lb_k8s_synced(lb->k8s)));
	json_object_object_add(o, "k8s-stale-removed",
			       json_object_new_int64((int64_t)lb_k8s_stale_removed(lb->k8s)));
	json_object_object_add(o, "k8s-parsed", json_object_new_int64((int64_t)lb_k8s_parsed(lb->k8s)));
	json_object_object_add(o, "k8s-scanned", json_object_new_int64((int64_t)lb_k8s_scanned(lb->k8s)));
	json_object_object_add(o, "k8s-bytes", json_object_new_int64((int64_t)lb_k8s_bytes(lb->k8s)));
	reply(resp, 200, o);
	/* the answer's tree (about 1 KB a service) is garbage now: at
	 * thousands of services its pages go back to the system instead of
	 * staying resident until something reuses them */
	if (lb->t.nsvc >= 1000)
		malloc_trim(0);
}

static void get_service(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	uint16_t id;
	const char *s = fibril_req_param(req, "id");
	if (!parse_id(s, &id)) {
		fibril_resp_error(resp, 400, "service id '%s' is not a number 1-%u", s ? s : "",
				  LB_SVC_ID_MAX);
		return;
	}
	struct lb_svc *svc = lb->table_ready ? lb_table_get(&lb->t, id) : NULL;
	if (!svc) {
		fibril_resp_error(resp, 404, "service %u does not exist", id);
		return;
	}
	reply(resp, 200, lb_svc_to_json(svc));
}

void lb_api_update_gauges(struct lb *lb)
{
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
}

static void put_service(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	size_t first = 0;
	while (body && first < len && body[first] && strchr(" \t\r\n", body[first]))
		first++;
	if (body && first < len && body[first] == '[') {
		lb_api_put_batch(lb, body, len, resp);
		return;
	}
	struct lb_svc *spec = NULL;
	char err[512];
	int rc = lb_svc_parse(body ? body : "", body ? len : 0, &spec, err, sizeof(err));
	if (rc < 0) {
		lb_count_op(lb, "upsert", rc);
		fibril_resp_error(resp, 400, "%s", err);
		return;
	}
	/* a backend on the node's own address (kube-proxy refuses it too):
	 * loopback and link-local ones the parser refused already */
	struct lb_addr *mine = NULL;
	size_t nmine = 0;
	if (spec->nbe && lb_node_addrs_list(fibril_config_string(lb_module_of(lb), "node-addresses"),
					    &mine, &nmine) < 0) {
		lb_svc_free(spec);
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	for (size_t i = 0; i < spec->nbe; i++) {
		if (!lb_addr_in(mine, nmine, &spec->be[i].addr))
			continue;
		char a[80];
		lb_format_addrport(&spec->be[i].addr, spec->be[i].port, a, sizeof(a));
		free(mine);
		lb_svc_free(spec);
		lb_count_op(lb, "upsert", -EINVAL);
		fibril_resp_error(resp, 400, "backends[%zu].address: '%s' is the node's own address, "
					     "not a backend", i, a);
		return;
	}
	free(mine);
	/* the API never takes over what Kubernetes or a pod's hostPort holds:
	 * the next sync would put it back, or a hostPort would lose its pod */
	const struct lb_svc *held = lb->table_ready ? lb_table_find(&lb->t, &spec->addr, spec->port,
								    spec->proto) : NULL;
	if (!held && spec->id && lb->table_ready)
		held = lb_table_get(&lb->t, spec->id);
	if (held && (held->source == LB_SRC_K8S || held->source == LB_SRC_HOSTPORT)) {
		char a[80];
		lb_format_addrport(&held->addr, held->port, a, sizeof(a));
		lb_count_op(lb, "upsert", -EEXIST);
		fibril_resp_error(resp, 409, "service %u (%s/%s, %s) comes from %s; the API does not "
					     "change it", held->id, a, lb_proto_name(held->proto),
				  held->name[0] ? held->name : "unnamed",
				  held->source == LB_SRC_K8S ? "Kubernetes" : "a pod's hostPort");
		lb_svc_free(spec);
		return;
	}
	spec->source = LB_SRC_API;
	uint16_t id = 0;
	rc = lb_upsert(lb, &spec, &id, err, sizeof(err));
	lb_svc_free(spec);
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s", err);
		return;
	}
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	reply(resp, 200, lb_svc_to_json(lb->t.svc[id]));
}

static void delete_service(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	uint16_t id;
	const char *s = fibril_req_param(req, "id");
	char err[512];
	if (!parse_id(s, &id)) {
		fibril_resp_error(resp, 400, "service id '%s' is not a number 1-%u", s ? s : "",
				  LB_SVC_ID_MAX);
		return;
	}
	const struct lb_svc *held = lb->table_ready ? lb_table_get(&lb->t, id) : NULL;
	if (held && (held->source == LB_SRC_K8S || held->source == LB_SRC_HOSTPORT)) {
		lb_count_op(lb, "delete", -EEXIST);
		fibril_resp_error(resp, 409, "service %u (%s) comes from %s; the API does not delete it",
				  id, held->name[0] ? held->name : "unnamed",
				  held->source == LB_SRC_K8S ? "Kubernetes" : "a pod's hostPort");
		return;
	}
	int rc = lb_delete(lb, id, err, sizeof(err));
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s", err);
		return;
	}
	fibril_series_set(lb->s_services, (double)lb->t.nsvc);
	fibril_series_set(lb->s_backends, (double)lb->t.nbe);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "deleted", json_object_new_int(id));
	reply(resp, 200, o);
}

int lb_api_register(struct lb *lb)
{
	struct fibril_module *m = lb->m;
	int rc;
	if ((rc = fibril_api_route(m, "GET", "/v1/service", 0, get_services, lb)) ||
	    (rc = fibril_api_route(m, "PUT", "/v1/service", 0, put_service, lb)) ||
	    (rc = fibril_api_route(m, "GET", "/v1/service/{id}", 0, get_service, lb)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/service/{id}", 0, delete_service, lb))) {
		fibril_module_set_error(m, "cannot register the /v1/service routes: %s",
					strerror(-rc));
		return rc;
	}
	return 0;
}
