/* modules/endpoint/api_put.c - PUT /v1/endpoint/container-id:CID:IFNAME,
 * the endpoint API's create (201) or update in place (200), what fibril-cni
 * sends for a CNI ADD. A PUT checks everything before it changes anything
 * (fields, the netns, the host veth's index and name, IPAM ownership of
 * each address) and answers only once its journal record (store.c) is on
 * disk and the datapath (when loaded) has the endpoint; any failure after
 * the first change is rolled back. Labels whose identity the kvstore gives
 * (cluster mode) make it wait for that identity and run again. The other
 * routes, refs and durable answers are api.c's. */
#include "endpoint_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif
#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

/* What the host says about the netns and the host veth; false after 400. */
static bool check_host(struct ep_manager *mg, const struct ep_spec *spec, const struct ep_endpoint *self,
		       struct fibril_response *resp)
{
	struct statfs sfs;
	char name[IF_NAMESIZE];

	if (statfs(spec->netns, &sfs)) {
		fibril_resp_error(resp, 400, "netns: %s: %s", spec->netns, strerror(errno));
		return false;
	}
	if (sfs.f_type != (typeof(sfs.f_type))NSFS_MAGIC &&
	    sfs.f_type != (typeof(sfs.f_type))PROC_SUPER_MAGIC) {
		fibril_resp_error(resp, 400, "netns: %s is not a network namespace", spec->netns);
		return false;
	}
	if (!if_indextoname((unsigned)spec->host_ifindex, name)) {
		fibril_resp_error(resp, 400,
				  "host-ifindex: no interface with index %d in the agent's network namespace",
				  spec->host_ifindex);
		return false;
	}
	if (strcmp(name, spec->host_ifname)) {
		fibril_resp_error(resp, 400, "host-ifindex: interface %d is %s, not host-ifname %s",
				  spec->host_ifindex, name, spec->host_ifname);
		return false;
	}
	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];

		if (ep && ep != self && ep->host_ifindex == spec->host_ifindex) {
			fibril_resp_error(resp, 400,
					  "host-ifindex: interface %d (%s) belongs to endpoint %u (container-id %s ifname %s)",
					  spec->host_ifindex, name, ep->id, ep->container_id, ep->ifname);
			return false;
		}
	}
	return true;
}

/* Who holds the addresses we care about, from one pass over IPAM. */
struct holders {
	size_t n;
	const char *address[4];
	char owner[4][FIBRIL_IPAM_OWNER_LEN];
};

static int collect_holders(const char *address, const char *owner, void *ud)
{
	struct holders *h = ud;

	for (size_t i = 0; address && owner && i < h->n; i++)
		if (!strcmp(address, h->address[i]))
			snprintf(h->owner[i], sizeof(h->owner[i]), "%s", owner);
	return 0;
}

static const char *holder_of(const struct holders *h, const char *address)
{
	for (size_t i = 0; i < h->n; i++)
		if (!strcmp(h->address[i], address))
			return h->owner[i];
	return "";
}

/* The canonical texts of an endpoint's addresses ("" when none). */
struct addr_texts {
	char v4[INET6_ADDRSTRLEN], v6[INET6_ADDRSTRLEN];
};

static void addr_texts(bool has4, const struct in_addr *a4, bool has6, const struct in6_addr *a6,
		       struct addr_texts *t)
{
	t->v4[0] = t->v6[0] = '\0';
	if (has4)
		inet_ntop(AF_INET, a4, t->v4, sizeof(t->v4));
	if (has6)
		inet_ntop(AF_INET6, a6, t->v6, sizeof(t->v6));
}

/* Answer an allocate_ip failure for the field. */
static void reply_ipam_error(struct fibril_response *resp, int rc, const char *field,
			     const char *address, const char *owner, const char *holder)
{
	switch (rc) {
	case -EEXIST:
		fibril_resp_error(resp, 400, "%s: address %s is held in IPAM by owner %s, not %s", field,
				  address, *holder ? holder : "another owner", owner);
		break;
	case -ERANGE:
		fibril_resp_error(resp, 400,
				  "%s: address %s is outside the IPAM pool (or its network, gateway or broadcast address)",
				  field, address);
		break;
	case -EAFNOSUPPORT:
		fibril_resp_error(resp, 400, "%s: the ipam mode offers no %s addresses", field,
				  field[3] == '4' ? "IPv4" : "IPv6");
		break;
	case -EINVAL:
		fibril_resp_error(resp, 400, "%s: IPAM refused address %s for owner %s", field, address,
				  owner);
		break;
	case -EAGAIN:
		fibril_resp_error(resp, 503, "%s: IPAM is not ready (no pool yet)", field);
		break;
	case -ENOSPC:
		fibril_resp_error(resp, 503, "%s: IPAM has no room for address %s", field, address);
		break;
	default:
		fibril_resp_error(resp, 500, "%s: IPAM failed for address %s: %s", field, address,
				  strerror(rc < 0 ? -rc : EIO));
		break;
	}
}

/* A PUT as it was asked (the request's texts are copied: a PUT waiting for
 * a cluster-wide identity runs again once the identity is here). */
struct put_call {
	struct ep_manager *mg;
	char *ref;
	char *body;
	size_t len;
	char *wait_labels;            /* set by put_endpoint_now: wait for these */
	struct fibril_response *resp; /* deferred, while waiting */
	double started;               /* arrival, for the latency metric */
};

static void put_call_free(struct put_call *pc)
{
	free(pc->ref);
	free(pc->body);
	free(pc->wait_labels);
	free(pc);
}

static void put_endpoint_now(struct put_call *pc, struct fibril_response *resp)
{
	struct ep_manager *mg = pc->mg;
	const char *reftext = pc->ref;
	struct ep_spec spec = { 0 };
	struct json_object *body = NULL;
	struct ep_endpoint *old, *nep = NULL;
	struct ep_identity *identity = NULL;
	struct ep_ref ref;
	char why[512], owner[FIBRIL_IPAM_OWNER_LEN], buf[96], dperr[256];
	const char *newly[2] = { NULL, NULL }; /* addresses this PUT took from IPAM */
	struct addr_texts want, had = { "", "" };
	bool removed_old_dp = false, file_written = false;
	struct holders h = { 0 };
	uint16_t id = 0;
	char *pod;
	int rc;

	if (!ep_api_parse_ref(reftext, &ref, resp))
		return;
	if (ref.id || !*ref.ifname) {
		fibril_resp_error(resp, 400, "ref '%s': PUT needs container-id:<container id>:<ifname>",
				  ep_api_shown(reftext, buf, sizeof(buf)));
		return;
	}
	if (!(body = ep_api_parse_body(pc->body, pc->len, resp)))
		return;
	rc = ep_spec_parse(body, &spec, false, why, sizeof(why));
	json_object_put(body);
	if (rc) {
		fibril_resp_error(resp, rc == -ENOMEM ? 500 : 400, "%s", rc == -ENOMEM ? "out of memory" : why);
		goto out;
	}
	if (strcmp(ref.cid, spec.container_id) || strcmp(ref.ifname, spec.ifname)) {
		fibril_resp_error(resp, 400,
				  "ref container-id:%s:%s does not match the body's container-id %s and ifname %s",
				  ref.cid, ref.ifname, spec.container_id, spec.ifname);
		goto out;
	}
	old = ep_find_attachment(mg, spec.container_id, spec.ifname);
	if (old && old->state == FIBRIL_EP_DISCONNECTING) {
		fibril_resp_error(resp, 409, "endpoint %u is being deleted: DELETE it again first", old->id);
		goto out;
	}
	if (!check_host(mg, &spec, old, resp))
		goto out;
	id = old ? old->id : ep_free_id(mg);

	if (!id) {
		fibril_resp_error(resp, 503, "no free endpoint ID (all %u are in use)", EP_ID_MAX);
		goto out;
	}
	/* Kubernetes knows the pod: its labels are the endpoint's. */
	pod = ep_pod_labels_cached(mg, spec.pod_namespace, spec.pod_name);

	if (pod) {
		free(spec.labels);
		spec.labels = pod;
	}

	/* IPAM: each address held by this owner, or free and taken now. */
	snprintf(owner, sizeof(owner), "%s/%s", spec.container_id, spec.ifname);
	addr_texts(spec.has_ipv4, &spec.ipv4, spec.has_ipv6, &spec.ipv6, &want);
	if (old)
		addr_texts(old->has_ipv4, &old->ipv4, old->has_ipv6, &old->ipv6, &had);
	const char *fields[2] = { "ipv4", "ipv6" }, *wanted[2] = { want.v4, want.v6 };

	for (int i = 0; i < 2; i++) {
		if (*wanted[i])
			h.address[h.n++] = wanted[i];
	}
	if (*had.v4)
		h.address[h.n++] = had.v4;
	if (*had.v6)
		h.address[h.n++] = had.v6;
	mg->ipam->list(mg->ipam_ctx, collect_holders, &h);
	for (int i = 0; i < 2; i++) {
		const char *holder = *wanted[i] ? holder_of(&h, wanted[i]) : "";

		if (*wanted[i] && *holder && strcmp(holder, owner)) {
			reply_ipam_error(resp, -EEXIST, fields[i], wanted[i], owner, holder);
			goto undo;
		}
	}
	for (int i = 0; i < 2; i++) {
		struct fibril_ipam_result res = { .sz = sizeof(res) };

		if (!*wanted[i])
			continue;
		rc = mg->ipam->allocate_ip(mg->ipam_ctx, wanted[i], owner, &res);
		if (rc < 0) {
			reply_ipam_error(resp, rc, fields[i], wanted[i], owner, holder_of(&h, wanted[i]));
			goto undo;
		}
		if (!*holder_of(&h, wanted[i]))
			newly[i] = wanted[i];
	}

	/* The identity of its labels. */
	rc = ep_identity_acquire(mg, *spec.labels ? spec.labels : mg->reserved[FIBRIL_IDENTITY_INIT].labels,
				 &identity);
	if (rc == -EINPROGRESS) {
		/* the kvstore gives the number: undo, wait for it, run again */
		pc->wait_labels = strdup(*spec.labels ? spec.labels
					 : mg->reserved[FIBRIL_IDENTITY_INIT].labels);
		if (!pc->wait_labels)
			fibril_resp_error(resp, 500, "out of memory");
		goto undo;
	}
	if (rc) {
		fibril_resp_error(resp, 503, "labels: no identity for them: %s",
				  rc == -ENOSPC ? "every local identity number is in use" : strerror(-rc));
		goto undo;
	}

	/* The new record; the old one (same ID) stays until everything worked. */
	if (!(nep = calloc(1, sizeof(*nep))) || ep_apply_spec(nep, &spec)) {
		fibril_resp_error(resp, 500, "out of memory");
		goto undo;
	}
	nep->id = id;
	nep->created = old ? old->created : (int64_t)time(NULL);
	nep->identity = identity;
	nep->state = FIBRIL_EP_REGENERATING;
	if ((rc = ep_store_write(mg, nep))) {
		fibril_resp_error(resp, 500, "cannot journal endpoint %u in %s/endpoints.journal: %s", id,
				  mg->dir, strerror(-rc));
		goto undo;
	}
	file_written = true;
	if (old && (old->host_ifindex != nep->host_ifindex || strcmp(had.v4, want.v4) ||
		    strcmp(had.v6, want.v6))) {
		/* a different veth or addresses: the old attachment goes first */
		if (ep_datapath_remove(mg, old, dperr, sizeof(dperr)))
			fibril_warn(mg->m, "endpoint %u: the datapath did not remove the old attachment: %s",
				    id, dperr);
		removed_old_dp = true;
	}
	if ((rc = ep_datapath_upsert(mg, nep, dperr, sizeof(dperr)))) {
		fibril_resp_error(resp, 500, "datapath: %s", dperr);
		goto undo;
	}

	/* Commit. */
	nep->state = FIBRIL_EP_READY;
	if (old) {
		uint32_t old_identity = old->identity->id;

		mg->eps[id] = nep;
		ep_identity_release(mg, old->identity);
		/* addresses the attachment no longer uses go back to IPAM */
		if (*had.v4 && strcmp(had.v4, want.v4) && !strcmp(holder_of(&h, had.v4), owner))
			mg->ipam->release_ip(mg->ipam_ctx, had.v4);
		if (*had.v6 && strcmp(had.v6, want.v6) && !strcmp(holder_of(&h, had.v6), owner))
			mg->ipam->release_ip(mg->ipam_ctx, had.v6);
		ep_free(old);
		fibril_info(mg->m, "endpoint %u (%s) updated: identity %u", id, owner, identity->id);
		ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_UPDATED, nep, old_identity);
	} else {
		if ((rc = ep_table_insert(mg, nep))) {
			fibril_resp_error(resp, 500, "cannot add endpoint %u: %s", id, strerror(-rc));
			goto undo;
		}
		fibril_info(mg->m, "endpoint %u (%s) created: identity %u, %s%s%s", id, owner,
			    identity->id, want.v4, *want.v4 && *want.v6 ? " " : "", want.v6);
		ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_CREATED, nep, identity->id);
	}
	ep_update_health(mg);
	ep_api_reply_endpoint(resp, old ? 200 : 201, nep);
	ep_spec_clear(&spec);
	return;

undo:
	if (file_written) {
		if (old) {
			if (ep_store_write(mg, old))
				fibril_error(mg->m, "endpoint %u: its old journal record could not be put back", id);
		} else {
			ep_store_remove(mg, id);
		}
	}
	if (removed_old_dp && ep_datapath_upsert(mg, old, dperr, sizeof(dperr)))
		fibril_error(mg->m, "endpoint %u: the datapath did not take the old attachment back: %s",
			     id, dperr);
	if (identity)
		ep_identity_release(mg, identity);
	for (int i = 0; i < 2; i++)
		if (newly[i])
			mg->ipam->release_ip(mg->ipam_ctx, newly[i]);
	ep_free(nep);
out:
	ep_spec_clear(&spec);
}

static void put_run(struct put_call *pc, struct fibril_response *deferred);

static void on_put_identity(struct ep_manager *mg, void *ud, int err)
{
	struct put_call *pc = ud;
	char shown[256];

	if (err) {
		bool crd = mg->cluster_state && mg->cluster_state->crd;

		snprintf(shown, sizeof(shown), "%s", pc->wait_labels);
		for (char *c = shown; *c; c++)
			if (*c == '\n')
				*c = ',';
		fibril_resp_error(pc->resp, 503, "labels %s: no cluster-wide identity from the %s: %s",
				  shown, crd ? "Kubernetes API (CiliumIdentity)" : "kvstore",
				  err == -ETIMEDOUT ? "it did not answer in time ([endpoint] identity-timeout)"
				  : err == -ENOTCONN ? "it is unreachable ([endpoint] identity-timeout passed)"
				  : crd && err == -ENOENT ? "the API server does not serve "
				  "ciliumidentities.cilium.io (its CustomResourceDefinition is not "
				  "installed: kubectl apply -f deploy/kubernetes/crds.yaml)"
				  : strerror(-err));
		fibril_resp_send(pc->resp);
		ep_metrics_observe_api(EP_API_PUT, pc->started);
		put_call_free(pc);
		return;
	}
	free(pc->wait_labels);
	pc->wait_labels = NULL;
	put_run(pc, pc->resp);
}

/* Run the PUT on a deferred response: it answers once durable, or waits
 * for the identity of its labels and runs again. */
static void put_run(struct put_call *pc, struct fibril_response *deferred)
{
	struct ep_manager *mg = pc->mg;
	double started = pc->started;

	pc->resp = deferred;
	put_endpoint_now(pc, deferred);
	if (pc->wait_labels) {
		int rc = ep_cluster_allocate(mg, pc->wait_labels, on_put_identity, pc);

		if (rc)
			on_put_identity(mg, pc, rc);
		return;
	}
	put_call_free(pc);
	ep_api_answer_when_durable(mg, deferred, EP_API_PUT, started);
}

void ep_api_put(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct put_call *pc = calloc(1, sizeof(*pc));
	const char *ref = fibril_req_param(req, "ref");
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	struct fibril_response *deferred;

	if (!pc || !(pc->ref = strdup(ref ? ref : "")) || !(pc->body = malloc(len + 1))) {
		if (pc)
			put_call_free(pc);
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	pc->mg = ud;
	pc->started = ep_metrics_now();
	if (len)
		memcpy(pc->body, body, len);
	pc->body[len] = '\0';
	pc->len = body ? len : 0;
	/* deferred when it waits for a flush or for the kvstore; else answered now */
	if ((!pc->mg->journal && !pc->mg->cluster) || !(deferred = fibril_resp_defer(resp))) {
		put_endpoint_now(pc, resp);
		if (pc->wait_labels)
			fibril_resp_error(resp, 503, "labels: their cluster-wide identity is not here yet: retry");
		ep_metrics_observe_api(EP_API_PUT, pc->started);
		put_call_free(pc);
		return;
	}
	put_run(pc, deferred);
}
