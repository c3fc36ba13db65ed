/* modules/endpoint/labels.c - new labels on an existing endpoint, from
 * the API (PATCH, rolled back when the datapath refuses) or from its pod in
 * Kubernetes (k8s.pods events and the cache, when k8s is loaded; retried
 * when the datapath refuses): its identity (waiting for a cluster-wide one
 * when the kvstore gives them), its journal record, the datapath and the
 * endpoint.updated event. */
#include "endpoint_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- labels ---------------------------------------------------------------------- */

static void identity_arrived(struct ep_manager *mg, void *ud, int err)
{
	(void)mg, (void)ud, (void)err; /* ep_retry_pending runs after the waiters */
}

int ep_set_labels(struct ep_manager *mg, struct ep_endpoint *ep, const char *labels, bool rollback,
		  char *err, size_t errlen)
{
	struct ep_identity *old = ep->identity, *id = NULL;
	uint8_t old_state = ep->state;
	uint32_t old_number = old ? old->id : 0;
	int rc;

	if (old && !strcmp(old->labels, *labels ? labels : mg->reserved[FIBRIL_IDENTITY_INIT].labels))
		return 0;
	if ((rc = ep_identity_acquire(mg, *labels ? labels : mg->reserved[FIBRIL_IDENTITY_INIT].labels,
				      &id)) == -EINPROGRESS) {
		/* the kvstore gives the number; pending label changes run again then */
		int arc = ep_cluster_allocate(mg, *labels ? labels
					      : mg->reserved[FIBRIL_IDENTITY_INIT].labels,
					      identity_arrived, NULL);

		snprintf(err, errlen, "the labels' cluster-wide identity is %s",
			 arc ? "not available from the kvstore" : "being allocated in the kvstore: retry");
		return arc ? arc : rc;
	}
	if (rc) {
		snprintf(err, errlen, "no identity for the labels: %s",
			 rc == -ENOSPC ? "every local identity number is in use" : strerror(-rc));
		return rc;
	}
	ep->identity = id;
	ep->state = FIBRIL_EP_REGENERATING;
	if ((rc = ep_store_write(mg, ep))) {
		snprintf(err, errlen, "cannot journal the endpoint's state in %s: %s", mg->dir, strerror(-rc));
		ep->identity = old;
		ep->state = old_state;
		ep_identity_release(mg, id);
		return rc;
	}
	char dperr[256];

	if ((rc = ep_datapath_upsert(mg, ep, dperr, sizeof(dperr)))) {
		if (rollback) {
			snprintf(err, errlen, "datapath: %s", dperr);
			ep->identity = old;
			ep->state = old_state;
			if (ep_store_write(mg, ep))
				fibril_error(mg->m, "endpoint %u: its journal record keeps identity %u although the change failed",
					     ep->id, id->id);
			ep_identity_release(mg, id);
			return rc;
		}
		fibril_warn(mg->m, "endpoint %u: the datapath refused identity %u: %s; retrying", ep->id,
			    id->id, dperr);
		ep_store_sync(mg, NULL, NULL); /* nobody waits for it: flush it now */
		ep->datapath_pending = true;
		ep_identity_release(mg, old);
		ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_UPDATED, ep, old_number);
		ep_schedule_retry(mg);
		return 0;
	}
	ep_identity_release(mg, old);
	ep->state = FIBRIL_EP_READY;
	ep->datapath_pending = false;
	if (!rollback)
		ep_store_sync(mg, NULL, NULL); /* not the API's (which waits for it): flush it now */
	fibril_info(mg->m, "endpoint %u: identity %u -> %u", ep->id, old_number, id->id);
	ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_UPDATED, ep, old_number);
	return 0;
}

/* ---- Kubernetes ------------------------------------------------------------------- */

/* The labels of a pod object: "k8s:key=value" per metadata.labels entry
 * plus the namespace label (malloc'd), or NULL (logged) when unusable. */
static char *pod_labels(struct ep_manager *mg, const char *json, const char *ns, const char *name)
{
	struct json_object *pod = json ? json_tokener_parse(json) : NULL, *meta, *labels;
	struct json_object *arr = json_object_new_array();
	char why[256], *out = NULL;

	if (!pod) {
		fibril_warn(mg->m, "pod %s/%s: the object is not JSON", ns, name);
		json_object_put(arr);
		return NULL;
	}
	if (json_object_object_get_ex(pod, "metadata", &meta) &&
	    json_object_object_get_ex(meta, "labels", &labels) &&
	    json_object_is_type(labels, json_type_object)) {
		json_object_object_foreach(labels, key, value) {
			const char *v = json_object_is_type(value, json_type_string)
						? json_object_get_string(value)
						: "";
			size_t l = strlen(key) + strlen(v) + 6;
			char *text = malloc(l);

			if (!text)
				continue;
			snprintf(text, l, "k8s:%s=%s", key, v);
			json_object_array_add(arr, json_object_new_string(text));
			free(text);
		}
	}
	if (ep_labels_from_json(arr, ns, &out, why, sizeof(why)))
		fibril_warn(mg->m, "pod %s/%s: its labels are not usable: %s", ns, name, why);
	json_object_put(arr);
	json_object_put(pod);
	return out;
}

char *ep_pod_labels_cached(struct ep_manager *mg, const char *ns, const char *name)
{
	if (!mg->k8s || !ns || !name || !*ns || !*name)
		return NULL;
	const char *obj = mg->k8s->get(mg->k8s_ctx, FIBRIL_K8S_PODS, ns, name);

	return obj ? pod_labels(mg, obj, ns, name) : NULL;
}

void ep_apply_pod_labels(struct ep_manager *mg, struct ep_endpoint *ep, const char *labels)
{
	char err[256];

	if (ep->state == FIBRIL_EP_DISCONNECTING)
		return;
	int rc = ep_set_labels(mg, ep, labels, false, err, sizeof(err));

	if (rc == -EINPROGRESS) {
		ep->k8s_pending = true; /* applied when the identity arrives */
		return;
	}
	if (rc) {
		fibril_warn(mg->m, "endpoint %u: cannot apply the labels of pod %s/%s: %s; retrying",
			    ep->id, ep->pod_namespace, ep->pod_name, err);
		ep->k8s_pending = true;
		ep_schedule_retry(mg);
	}
}

int ep_on_pod_event(const struct fibril_event *ev, void *ud)
{
	struct ep_manager *mg = ud;
	const struct fibril_k8s_event *e = ev->payload;

	if (!mg->started || ev->payload_len < FIBRIL_OFFSETOFEND(struct fibril_k8s_event, resource_version) || e->sz < FIBRIL_OFFSETOFEND(struct fibril_k8s_event, resource_version))
		return 0;
	if (e->type != FIBRIL_K8S_ADDED && e->type != FIBRIL_K8S_UPDATED)
		return 0; /* a deleted pod's endpoint goes with CNI DEL */
	const char *ns = FIBRIL_K8S_STR(e, namespace_), *name = FIBRIL_K8S_STR(e, name);
	char *labels = NULL;

	if (!ns || !name)
		return 0;
	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];

		if (!ep || !ep->pod_namespace || !ep->pod_name || strcmp(ep->pod_namespace, ns) ||
		    strcmp(ep->pod_name, name))
			continue;
		if (!labels && !(labels = pod_labels(mg, FIBRIL_K8S_STR(e, object), ns, name)))
			return -EINVAL;
		ep_apply_pod_labels(mg, ep, labels);
	}
	free(labels);
	return 0;
}

/* Restored endpoints take their pods' labels when the cache has them. */
void ep_apply_cached_pods(struct ep_manager *mg)
{
	for (size_t i = 1; mg->k8s && i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];

		if (!ep || !ep->pod_namespace || !ep->pod_name)
			continue;
		char *labels = ep_pod_labels_cached(mg, ep->pod_namespace, ep->pod_name);

		if (labels)
			ep_apply_pod_labels(mg, ep, labels);
		free(labels);
	}
}
