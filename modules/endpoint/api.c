/* modules/endpoint/api.c - the endpoint module's REST routes (contract:
 * the endpoint API brief, summed up in modules/endpoint/README.md):
 *
 *   GET    /v1/endpoint           every endpoint, sorted by ID
 *   GET    /v1/endpoint/{ref}     one (ref: ID, container-id:CID[:IFNAME])
 *   PUT    /v1/endpoint/{ref}     create (201) or update in place (200)
 *   PATCH  /v1/endpoint/{ref}     new labels (identity recomputed)
 *   DELETE /v1/endpoint/{ref}     remove: datapath, IPAM owner, journal record
 *   GET    /v1/identity[/{id}]    security identities
 *
 * The PUT (create or update: what a CNI ADD sends) is in api_put.c. PUT,
 * PATCH and DELETE answer once their batch is flushed
 * (ep_api_answer_when_durable, run_durable). Errors are one line naming
 * the field. */
#include "endpoint_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_PREFIX "container-id:"

static void reply_object(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status,
			 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

/* Text safe to show in an error line (at most 80 bytes). */
const char *ep_api_shown(const char *s, char *buf, size_t len)
{
	size_t n = s ? strlen(s) : 0, max = len > 84 ? 80 : len - 4, i;

	for (i = 0; i < n && i < max; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
	if (n > max)
		strcat(buf, "...");
	return buf;
}

/* ---- refs ---------------------------------------------------------------------- */

bool ep_api_parse_ref(const char *text, struct ep_ref *ref, struct fibril_response *resp)
{
	char buf[96];

	memset(ref, 0, sizeof(*ref));
	if (text && text[0] >= '1' && text[0] <= '9' && strspn(text, "0123456789") == strlen(text)) {
		unsigned long id = strlen(text) <= 5 ? strtoul(text, NULL, 10) : EP_ID_MAX + 1ul;

		if (id > EP_ID_MAX) {
			fibril_resp_error(resp, 400, "ref '%s': endpoint IDs are 1..%u",
					  ep_api_shown(text, buf, sizeof(buf)), EP_ID_MAX);
			return false;
		}
		ref->id = (unsigned)id;
		return true;
	}
	if (text && !strncmp(text, REF_PREFIX, strlen(REF_PREFIX))) {
		const char *cid = text + strlen(REF_PREFIX), *colon = strchr(cid, ':');
		size_t cl = colon ? (size_t)(colon - cid) : strlen(cid);

		if (cl < sizeof(ref->cid)) {
			memcpy(ref->cid, cid, cl);
			ref->cid[cl] = '\0';
		}
		if (cl >= sizeof(ref->cid) || !ep_valid_container_id(ref->cid)) {
			fibril_resp_error(resp, 400, "ref '%s': '%s' is not a container ID",
					  ep_api_shown(text, buf, sizeof(buf)), ep_api_shown(ref->cid, buf + 48, 48));
			return false;
		}
		if (colon) {
			if (strlen(colon + 1) >= sizeof(ref->ifname) || !ep_valid_ifname(colon + 1)) {
				fibril_resp_error(resp, 400, "ref '%s': '%s' is not an interface name",
						  ep_api_shown(text, buf, sizeof(buf)), ep_api_shown(colon + 1, buf + 48, 48));
				return false;
			}
			snprintf(ref->ifname, sizeof(ref->ifname), "%s", colon + 1);
		}
		return true;
	}
	fibril_resp_error(resp, 400,
			  "ref '%s': expected an endpoint ID (1..%u) or container-id:<container id>[:<ifname>]",
			  ep_api_shown(text, buf, sizeof(buf)), EP_ID_MAX);
	return false;
}

/* The endpoint a ref names, or NULL after answering 400/404. */
static struct ep_endpoint *resolve(struct ep_manager *mg, struct fibril_request *req,
				   struct fibril_response *resp)
{
	struct ep_ref ref;

	if (!ep_api_parse_ref(fibril_req_param(req, "ref"), &ref, resp))
		return NULL;
	if (ref.id) {
		if (ref.id < mg->eps_cap && mg->eps[ref.id])
			return mg->eps[ref.id];
		fibril_resp_error(resp, 404, "endpoint %u not found", ref.id);
		return NULL;
	}
	if (*ref.ifname) {
		struct ep_endpoint *ep = ep_find_attachment(mg, ref.cid, ref.ifname);

		if (!ep)
			fibril_resp_error(resp, 404, "no endpoint for container-id %s ifname %s", ref.cid,
					  ref.ifname);
		return ep;
	}
	struct ep_endpoint *found = NULL;
	size_t n = 0;
	char names[128] = "";

	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];

		if (!ep || strcmp(ep->container_id, ref.cid))
			continue;
		found = ep;
		if (strlen(names) + IFNAMSIZ + 3 < sizeof(names))
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
				 n ? ", " : "", ep->ifname);
		n++;
	}
	if (n == 0)
		fibril_resp_error(resp, 404, "no endpoint for container-id %s", ref.cid);
	else if (n > 1)
		fibril_resp_error(resp, 400,
				  "container-id %s has %zu endpoints (%s): name one with container-id:%s:<ifname>",
				  ref.cid, n, names, ref.cid);
	return n == 1 ? found : NULL;
}

/* ---- GET ------------------------------------------------------------------------- */

static void reply_buf(struct fibril_response *resp, int status, struct ep_buf *b)
{
	if (b->oom)
		fibril_resp_error(resp, 500, "out of memory");
	else
		fibril_resp_json(resp, status, b->p);
	free(b->p);
	b->p = NULL;
}

void ep_api_reply_endpoint(struct fibril_response *resp, int status, const struct ep_endpoint *ep)
{
	struct ep_buf b = { 0 };

	ep_buf_endpoint(&b, ep, false);
	reply_buf(resp, status, &b);
}

static void get_list(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ep_manager *mg = ud;
	struct ep_buf b = { 0 };
	bool first = true;

	(void)req;
	ep_buf_add(&b, "{\"endpoints\":[", strlen("{\"endpoints\":["));
	for (size_t i = 1; i < mg->eps_cap; i++) {
		if (!mg->eps[i])
			continue;
		if (!first)
			ep_buf_add(&b, ",", 1);
		ep_buf_endpoint(&b, mg->eps[i], false);
		first = false;
	}
	ep_buf_add(&b, "]}", 2);
	reply_buf(resp, 200, &b);
}

static void get_one(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ep_endpoint *ep = resolve(ud, req, resp);

	if (ep)
		ep_api_reply_endpoint(resp, 200, ep);
}

static void get_identities(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ep_manager *mg = ud;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();

	(void)req;
	for (uint32_t i = FIBRIL_IDENTITY_HOST; i <= FIBRIL_IDENTITY_WORLD_IPV6; i++)
		json_object_array_add(arr, ep_identity_to_json(mg, &mg->reserved[i]));
	for (size_t i = 0; i < mg->nidents; i++)
		json_object_array_add(arr, ep_identity_to_json(mg, mg->idents[i]));
	json_object_object_add(o, "identities", arr);
	reply_object(resp, 200, o);
}

static void get_identity(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ep_manager *mg = ud;
	const char *text = fibril_req_param(req, "id");
	char buf[96];
	unsigned long n = 0;

	if (!text || !*text || strspn(text, "0123456789") != strlen(text) || strlen(text) > 10 ||
	    (n = strtoul(text, NULL, 10)) == 0 || n > UINT32_MAX) {
		fibril_resp_error(resp, 400, "identity '%s': expected a number (1..%u)",
				  ep_api_shown(text, buf, sizeof(buf)), UINT32_MAX);
		return;
	}
	struct ep_identity *id = ep_identity_find(mg, (uint32_t)n);

	if (!id)
		fibril_resp_error(resp, 404, "identity %lu not found", n);
	else
		reply_object(resp, 200, ep_identity_to_json(mg, id));
}

/* ---- request bodies ------------------------------------------------------------- */

/* The parsed JSON body, or NULL after answering 400. */
static struct json_object *read_body(struct fibril_request *req, struct fibril_response *resp)
{
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);

	return ep_api_parse_body(body, len, resp);
}

struct json_object *ep_api_parse_body(const char *body, size_t len, struct fibril_response *resp)
{
	struct json_tokener *tok;
	struct json_object *o;

	if (!body || len == 0) {
		fibril_resp_error(resp, 400, "body: a JSON object is required");
		return NULL;
	}
	if (!(tok = json_tokener_new())) {
		fibril_resp_error(resp, 500, "out of memory");
		return NULL;
	}
	o = json_tokener_parse_ex(tok, body, (int)len);
	if (!o || json_tokener_get_error(tok) != json_tokener_success) {
		fibril_resp_error(resp, 400, "body: malformed JSON: %s",
				  json_tokener_error_desc(json_tokener_get_error(tok)));
		json_object_put(o);
		o = NULL;
	} else if (!json_object_is_type(o, json_type_object)) {
		fibril_resp_error(resp, 400, "body: expected a JSON object");
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

/* ---- PATCH ------------------------------------------------------------------------ */

/* A PATCH as it was asked: the endpoint's number and the new labels, so a
 * PATCH waiting for a cluster-wide identity runs again once it is here. */
struct patch_call {
	struct ep_manager *mg;
	uint16_t id;
	char *labels;
	struct fibril_response *resp; /* deferred, while waiting */
	double started;               /* arrival, for the latency metric */
};

static void patch_call_free(struct patch_call *pc)
{
	free(pc->labels);
	free(pc);
}

/* The labels of the PATCH's body (an array of strings), validated; NULL
 * when the answer is already given. */
static char *patch_labels(struct fibril_request *req, struct fibril_response *resp,
			  const struct ep_endpoint *ep)
{
	struct json_object *body, *labels = NULL;
	char why[512], *joined = NULL;

	if (!(body = read_body(req, resp)))
		return NULL;
	json_object_object_foreach(body, key, value) {
		(void)value;
		if (strcmp(key, "labels")) {
			char buf[96];

			fibril_resp_error(resp, 400, "%s: unknown field (PATCH changes only labels)",
					  ep_api_shown(key, buf, sizeof(buf)));
			json_object_put(body);
			return NULL;
		}
	}
	if (!json_object_object_get_ex(body, "labels", &labels) ||
	    !json_object_is_type(labels, json_type_array)) {
		fibril_resp_error(resp, 400, "labels: missing (expected an array of strings)");
		json_object_put(body);
		return NULL;
	}
	int rc = ep_labels_from_json(labels, ep->pod_namespace, &joined, why, sizeof(why));

	json_object_put(body);
	if (rc) {
		fibril_resp_error(resp, rc == -ENOMEM ? 500 : 400, "%s", rc == -ENOMEM ? "out of memory" : why);
		return NULL;
	}
	return joined;
}

/* Apply the labels and answer, or return -EINPROGRESS (no answer yet) while
 * their cluster-wide identity is being allocated. */
static int patch_apply(struct patch_call *pc, struct fibril_response *resp)
{
	struct ep_manager *mg = pc->mg;
	struct ep_endpoint *ep = pc->id < mg->eps_cap ? mg->eps[pc->id] : NULL;
	char why[512];
	int rc;

	if (!ep) {
		fibril_resp_error(resp, 404, "endpoint %u not found", pc->id);
		return 0;
	}
	if (ep->state == FIBRIL_EP_DISCONNECTING) {
		fibril_resp_error(resp, 409, "endpoint %u is being deleted", ep->id);
		return 0;
	}
	rc = ep_set_labels(mg, ep, pc->labels, true, why, sizeof(why));
	if (rc == -EINPROGRESS)
		return rc;
	if (rc)
		fibril_resp_error(resp, (rc == -ENOSPC || rc == -EAGAIN) ? 503 : 500, "%s", why);
	else
		ep_api_reply_endpoint(resp, 200, ep);
	return 0;
}

static void patch_run(struct patch_call *pc);

static void on_patch_identity(struct ep_manager *mg, void *ud, int err)
{
	struct patch_call *pc = ud;

	(void)mg;
	if (err) {
		fibril_resp_error(pc->resp, 503, "endpoint %u: no cluster-wide identity for its new labels from the kvstore: %s",
				  pc->id, err == -ETIMEDOUT ? "it did not answer in time ([endpoint] identity-timeout)"
				  : err == -ENOTCONN ? "it is unreachable ([endpoint] identity-timeout passed)"
				  : strerror(-err));
		fibril_resp_send(pc->resp);
		ep_metrics_observe_api(EP_API_PATCH, pc->started);
		patch_call_free(pc);
		return;
	}
	patch_run(pc);
}

/* Run the PATCH on its deferred response: answered once durable, or after
 * the identity of its labels has arrived (then run again). */
static void patch_run(struct patch_call *pc)
{
	struct ep_manager *mg = pc->mg;

	if (patch_apply(pc, pc->resp) == -EINPROGRESS) {
		int rc = ep_cluster_allocate(mg, pc->labels, on_patch_identity, pc);

		if (rc)
			on_patch_identity(mg, pc, rc);
		return;
	}
	struct fibril_response *deferred = pc->resp;
	double started = pc->started;

	patch_call_free(pc);
	ep_api_answer_when_durable(mg, deferred, EP_API_PATCH, started);
}

static void patch_endpoint(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ep_manager *mg = ud;
	struct ep_endpoint *ep = resolve(mg, req, resp);
	struct patch_call *pc;
	char *joined;

	if (!ep || !(joined = patch_labels(req, resp, ep)))
		return;
	if (!(pc = calloc(1, sizeof(*pc)))) {
		free(joined);
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	pc->mg = mg;
	pc->id = ep->id;
	pc->labels = joined;
	pc->started = ep_metrics_now();
	/* deferred when it waits for a flush or for the kvstore; else answered now */
	if ((!mg->journal && !mg->cluster) || !(pc->resp = fibril_resp_defer(resp))) {
		if (patch_apply(pc, resp) == -EINPROGRESS)
			fibril_resp_error(resp, 503, "labels: their cluster-wide identity is being allocated in the kvstore: retry");
		ep_metrics_observe_api(EP_API_PATCH, pc->started);
		patch_call_free(pc);
		return;
	}
	patch_run(pc);
}

/* ---- DELETE ----------------------------------------------------------------------- */

static void delete_endpoint_now(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ep_manager *mg = ud;
	struct ep_endpoint *ep = resolve(mg, req, resp);
	char owner[FIBRIL_IPAM_OWNER_LEN], err[256];
	int rc;

	if (!ep)
		return;
	ep_owner(ep, owner, sizeof(owner));
	ep->state = FIBRIL_EP_DISCONNECTING;
	if ((rc = ep_datapath_remove(mg, ep, err, sizeof(err)))) {
		fibril_resp_error(resp, 500, "endpoint %u: datapath: %s (still disconnecting; DELETE again)",
				  ep->id, err);
		return;
	}
	if ((rc = mg->ipam->release_owner(mg->ipam_ctx, owner)) < 0) {
		fibril_resp_error(resp, rc == -EAGAIN ? 503 : 500,
				  "endpoint %u: IPAM did not release owner %s: %s (still disconnecting; DELETE again)",
				  ep->id, owner, strerror(-rc));
		return;
	}
	if ((rc = ep_store_remove(mg, ep->id))) {
		fibril_resp_error(resp, 500,
				  "endpoint %u: cannot journal its removal in %s/endpoints.journal: %s (still disconnecting; DELETE again)",
				  ep->id, mg->dir, strerror(-rc));
		return;
	}
	uint16_t id = ep->id;
	uint32_t identity = ep->identity->id;

	ep_table_remove(mg, ep);
	ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_DELETED, ep, identity);
	ep_identity_release(mg, ep->identity);
	ep_free(ep);
	fibril_info(mg->m, "endpoint %u (%s) deleted", id, owner);
	ep_update_health(mg);

	char text[64];

	snprintf(text, sizeof(text), "{\"deleted\":%u}", id);
	fibril_resp_json(resp, 200, text);
}

/* ---- durable answers ---------------------------------------------------------------- */

/* A changing route answers only once its change is on disk: the endpoint
 * journal's batch (store.c) and, when IPAM makes its answers durable in
 * batches too (ipam interface 2, wait_durable), IPAM's. The handler runs
 * on a deferred response (fibril_resp_defer); both flushes run at once and
 * the later one sends it. Touches only this record and the response: it
 * may run in the IPAM mode's fini or in the journal's close. */
struct durable_reply {
	struct fibril_response *resp;
	enum ep_api_method method; /* its latency is observed when the answer goes */
	double started;
	int waiting;
	int status;
	const char *what; /* of the first failure */
};

static void durable_done(struct durable_reply *dr, int status, const char *what)
{
	if (status && !dr->status) {
		dr->status = status;
		dr->what = what;
	}
	if (--dr->waiting > 0)
		return;
	if (dr->status)
		fibril_resp_error(dr->resp, 500, "%s could not make the change durable: %s", dr->what,
				  strerror(-dr->status));
	fibril_resp_send(dr->resp);
	ep_metrics_observe_api(dr->method, dr->started);
	free(dr);
}

static void ipam_durable(void *ud, int status)
{
	durable_done(ud, status, "IPAM");
}

static void journal_durable(void *ud, int status)
{
	durable_done(ud, status, "the endpoint journal");
}

/* Answer the deferred response once the endpoint journal (and IPAM's,
 * when it can say) has flushed what the handler wrote; the request's
 * latency (it arrived at `started`) is observed when the answer goes. */
void ep_api_answer_when_durable(struct ep_manager *mg, struct fibril_response *deferred,
				enum ep_api_method method, double started)
{
	const struct fibril_ipam_ops *ipam = mg->ipam;
	bool ipam_waits = ipam && FIBRIL_SERVICE_HAS(ipam, wait_durable) && ipam->wait_durable;
	struct durable_reply *dr = mg->journal ? calloc(1, sizeof(*dr)) : NULL;

	if (!dr) {
		fibril_resp_send(deferred); /* no journal: the handler said so */
		ep_metrics_observe_api(method, started);
		return;
	}
	dr->resp = deferred;
	dr->method = method;
	dr->started = started;
	dr->waiting = ipam_waits ? 2 : 1;
	int rc = ipam_waits ? ipam->wait_durable(mg->ipam_ctx, ipam_durable, dr) : 0;

	if (rc)
		ipam_durable(dr, rc);
	rc = ep_store_sync(mg, journal_durable, dr);
	if (rc)
		journal_durable(dr, rc);
}

static void run_durable(struct fibril_request *req, struct fibril_response *resp, struct ep_manager *mg,
			fibril_route_fn handler, enum ep_api_method method)
{
	double started = ep_metrics_now();
	struct fibril_response *deferred = mg->journal ? fibril_resp_defer(resp) : NULL;

	if (!deferred) {
		handler(req, resp, mg); /* no journal: the handler says so */
		ep_metrics_observe_api(method, started);
		return;
	}
	handler(req, deferred, mg);
	ep_api_answer_when_durable(mg, deferred, method, started);
}

static void delete_endpoint(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	run_durable(req, resp, ud, delete_endpoint_now, EP_API_DELETE);
}

int ep_api_register(struct ep_manager *mg)
{
	int rc;

	if ((rc = fibril_api_route(mg->m, "GET", "/v1/endpoint", 0, get_list, mg)) ||
	    (rc = fibril_api_route(mg->m, "GET", "/v1/endpoint/{ref}", 0, get_one, mg)) ||
	    (rc = fibril_api_route(mg->m, "PUT", "/v1/endpoint/{ref}", FIBRIL_ROUTE_JSON_BODY,
				   ep_api_put, mg)) ||
	    (rc = fibril_api_route(mg->m, "PATCH", "/v1/endpoint/{ref}", FIBRIL_ROUTE_JSON_BODY,
				   patch_endpoint, mg)) ||
	    (rc = fibril_api_route(mg->m, "DELETE", "/v1/endpoint/{ref}", 0, delete_endpoint, mg)) ||
	    (rc = fibril_api_route(mg->m, "GET", "/v1/identity", 0, get_identities, mg)) ||
	    (rc = fibril_api_route(mg->m, "GET", "/v1/identity/{id}", 0, get_identity, mg))) {
		fibril_module_set_error(mg->m, "cannot register the endpoint routes: %s", strerror(-rc));
		return rc;
	}
	return 0;
}
