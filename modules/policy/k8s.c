/* modules/policy/k8s.c - what the module takes from Kubernetes (the k8s
 * module's informers and caches): NetworkPolicies, CiliumNetworkPolicies
 * and CiliumClusterwideNetworkPolicies added, updated or deleted, parsed
 * as an import and kept apart from the API's (source "k8s"; an invalid
 * one is refused and counted, its previous version stays in force); once
 * the first lists are in, the k8s policies of the last run no longer in
 * the caches go. A namespace relabelled or a pod changed refreshes the
 * endpoints and cluster identities it concerns. */
#include "policy_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static const char *const k8s_policy_resources[] = {FIBRIL_K8S_NETWORKPOLICIES, FIBRIL_K8S_CNPS,
						   FIBRIL_K8S_CCNPS, NULL};

static const char *resource_of(enum pol_kind k)
{
	return k == POL_KIND_KNP ? FIBRIL_K8S_NETWORKPOLICIES : k == POL_KIND_CCNP ? FIBRIL_K8S_CCNPS
										    : FIBRIL_K8S_CNPS;
}

static void k8s_count(struct pol_state *st, const char *res, const char *result)
{
	fibril_series_inc(fibril_metric_labels(st->m_k8s_invalid, res, result));
}

struct k8s_strs {
	const char *res, *ns, *name, *obj;
};

/* A k8s bus event's payload and texts; NULL when it is not one to act on. */
static const struct fibril_k8s_event *k8s_event(const struct pol_state *st,
						const struct fibril_event *ev, struct k8s_strs *out)
{
	const struct fibril_k8s_event *e = ev->payload;
	if (!st->started || ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) ||
	    e->sz > ev->payload_len)
		return NULL;
	out->res = FIBRIL_K8S_STR(e, resource);
	out->ns = FIBRIL_K8S_STR(e, namespace_);
	out->name = FIBRIL_K8S_STR(e, name);
	out->obj = FIBRIL_K8S_STR(e, object);
	return out->res && out->name ? e : NULL;
}

/* One object of a policy informer added, updated (deleted: remove). */
static void k8s_apply(struct pol_state *st, const char *res, const char *ns, const char *name,
		      const char *obj, bool deleted)
{
	bool knp = !strcmp(res, FIBRIL_K8S_NETWORKPOLICIES), ccnp = !strcmp(res, FIBRIL_K8S_CCNPS);
	if (!ns || ccnp)
		ns = "";
	ssize_t at = pol_find(st, true, knp, name, ns);
	if (deleted) {
		if (at < 0)
			return;
		pol_remove_at(st, (size_t)at);
		st->k8s_deleted++;
		k8s_count(st, res, "deleted");
		repo_changed(st);
		fibril_info(st->m, "%s %s%s%s deleted, revision %llu", res, ns, ns[0] ? "/" : "", name,
			    (unsigned long long)st->revision);
		return;
	}
	/* list items may come without kind: the informer says what it is */
	struct json_object *o = obj ? json_tokener_parse(obj) : NULL;
	if (o && json_object_is_type(o, json_type_object) && !json_object_object_get_ex(o, "kind", NULL))
		json_object_object_add(o, "kind",
				       json_object_new_string(knp ? "NetworkPolicy"
							      : ccnp ? "CiliumClusterwideNetworkPolicy"
								     : "CiliumNetworkPolicy"));
	const char *text = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : "";
	struct pol_policy **v = NULL;
	char err[512] = "";
	int n = pol_parse(text, strlen(text), &v, err, sizeof(err));
	json_object_put(o);
	if (n == 1 && strcmp(resource_of(v[0]->kind), res)) {
		snprintf(err, sizeof(err), "kind: a %s in the %s informer", pol_kind_name(v[0]->kind), res);
		n = -1;
	}
	if (n == 1) { /* a k8s policy is not yet from_k8s here: set it for the cap's match */
		v[0]->from_k8s = true;
		if (cidrs_admit(st, v, 1, err, sizeof(err)))
			n = -1;
		if (n != 1)
			pol_policies_free(v, 1);
		if (n != 1)
			v = NULL;
	}
	if (n != 1) {
		pol_policies_free(v, n > 0 ? (size_t)n : 0);
		st->k8s_invalid++;
		k8s_count(st, res, "invalid");
		snprintf(st->last_error, sizeof(st->last_error), "%s %s/%s: %s", res, ns, name, err);
		fibril_warn(st->m, "%s %s%s%s is refused: %s (%s; the other policies keep applying)", res,
			    ns, ns[0] ? "/" : "", name, err,
			    at >= 0 ? "its previous version stays in force" : "not applied");
		return;
	}
	struct pol_policy *p = v[0];
	free(v);
	p->from_k8s = true;
	if (at >= 0 && !strcmp(st->pols[at]->text, p->text)) {
		pol_policy_free(p);
		return;
	}
	pol_take_ids(st, p); /* before the old version lets go of them */
	if (at >= 0) {
		pol_retire(st, st->pols[at]);
		st->pols[at] = p;
	} else {
		struct pol_policy **grown = realloc(st->pols, (st->npols + 1) * sizeof(*grown));
		if (!grown) {
			pol_drop_ids(st, p);
			pol_policy_free(p);
			fibril_error(st->m, "%s %s/%s: out of memory", res, ns, name);
			return;
		}
		st->pols = grown;
		st->pols[st->npols++] = p;
	}
	st->k8s_applied++;
	k8s_count(st, res, "applied");
	repo_changed(st);
	fibril_info(st->m, "%s %s%s%s applied, revision %llu", res, ns, ns[0] ? "/" : "", name,
		    (unsigned long long)st->revision);
}

int pol_on_k8s_policy(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	struct k8s_strs k;
	if (!st->started) {
		st->k8s_missed++; /* caught up from the caches once they sync */
		return 0;
	}
	const struct fibril_k8s_event *e = k8s_event(st, ev, &k);
	if (e)
		k8s_apply(st, k.res, k.ns, k.name, k.obj, e->type == FIBRIL_K8S_DELETED);
	return 0;
}

struct catch_up {
	struct pol_state *st;
	const char *res;
};

static int catch_up_one(const char *json, void *ud)
{
	struct catch_up *cu = ud;
	struct json_object *o = json_tokener_parse(json), *md, *ns = NULL, *name = NULL;
	if (o && json_object_object_get_ex(o, "metadata", &md)) {
		json_object_object_get_ex(md, "namespace", &ns);
		json_object_object_get_ex(md, "name", &name);
	}
	if (name && json_object_is_type(name, json_type_string))
		k8s_apply(cu->st, cu->res, ns ? json_object_get_string(ns) : "",
			  json_object_get_string(name), json, false);
	json_object_put(o);
	return 0;
}

/* The first lists are in: the k8s policies kept from the last run that
 * are no longer in the caches go. */
static void on_k8s_synced(void *ud, int err, const char *pending)
{
	struct pol_state *st = ud;
	if (!st->started || !st->k8s)
		return;
	if (err) {
		fibril_warn(st->m, "k8s policy caches not synced (%s): the policies of the last run stay "
				   "until they are",
			    pending ? pending : "?");
		return;
	}
	st->k8s_synced = true;
	/* events that came before this module started: from the caches */
	for (size_t r = 0; st->k8s_missed && k8s_policy_resources[r]; r++) {
		struct catch_up cu = {.st = st, .res = k8s_policy_resources[r]};
		st->k8s->list(st->k8s_ctx, cu.res, catch_up_one, &cu);
	}
	st->k8s_missed = 0;
	size_t gone = 0;
	for (size_t i = st->npols; i-- > 0;) {
		const struct pol_policy *p = st->pols[i];
		if (!p->from_k8s || st->k8s->get(st->k8s_ctx, resource_of(p->kind), p->ns, p->name))
			continue;
		pol_remove_at(st, i);
		gone++;
	}
	if (gone) {
		st->k8s_deleted += gone;
		repo_changed(st);
	}
	fibril_info(st->m, "k8s policy caches synced; %zu polic%s of the last run gone", gone,
		    gone == 1 ? "y" : "ies");
}

/* A namespace relabelled or a pod changed: the endpoints it concerns. */
int pol_on_k8s_scope(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	struct k8s_strs k;
	if (!k8s_event(st, ev, &k))
		return 0;
	const char *res = k.res, *ns = k.ns, *name = k.name;
	bool namespaces = !strcmp(res, FIBRIL_K8S_NAMESPACES), changed = false;
	st->sel_gen++;
	for (size_t i = 1; i < st->ep_hi; i++) {
		struct pol_ep *ep = st->eps[i];
		if (!ep || (namespaces ? strcmp(ep->pod_ns, name)
				       : (!ns || strcmp(ep->pod_ns, ns) || strcmp(ep->pod_name, name))))
			continue;
		sel_cache_ep(st, ep, -1);
		if (ep_refresh(st, ep))
			changed = ep->dirty = true;
		sel_cache_ep(st, ep, 1);
	}
	/* a cluster identity of that namespace: its namespace labels changed */
	for (size_t i = 0; namespaces && i < st->nrids; i++) {
		char rns[POL_NS_MAX];
		if (strcmp(pol_labels_namespace(st->rids[i].labels, rns, sizeof(rns)), name))
			continue;
		sel_cache_rid(st, &st->rids[i], -1);
		if (rid_refresh(st, &st->rids[i]))
			changed = true;
		sel_cache_rid(st, &st->rids[i], 1);
	}
	if (changed) {
		pol_mark_dependents(st);
		pol_recompute(st);
	}
	return 0;
}

void k8s_start(struct pol_state *st)
{
	st->k8s = (const struct fibril_k8s_ops *)fibril_service_lookup(st->m, FIBRIL_K8S_CAPABILITY,
								       FIBRIL_K8S_VERSION, &st->k8s_ctx);
	if (st->k8s && (!FIBRIL_SERVICE_HAS(st->k8s, get) || !st->k8s->watch_resource ||
			!st->k8s->wait_synced)) {
		fibril_warn(st->m, "the '%s' provider's table is incomplete: no policy from Kubernetes",
			    FIBRIL_K8S_CAPABILITY);
		st->k8s = NULL;
	}
	if (!st->k8s)
		return;
	const char *watched[] = {FIBRIL_K8S_NETWORKPOLICIES, FIBRIL_K8S_CNPS, FIBRIL_K8S_CCNPS,
				 FIBRIL_K8S_NAMESPACES, FIBRIL_K8S_PODS};
	for (size_t i = 0; i < sizeof(watched) / sizeof(watched[0]); i++) {
		int rc = st->k8s->watch_resource(st->k8s_ctx, watched[i]);
		if (rc < 0)
			fibril_warn(st->m, "k8s: cannot watch %s: %s", watched[i], strerror(-rc));
	}
	int rc = st->k8s->wait_synced(st->k8s_ctx, k8s_policy_resources, 120000, on_k8s_synced, st);
	if (rc < 0)
		fibril_warn(st->m, "k8s: cannot wait for the policy caches: %s", strerror(-rc));
}
