/* modules/policy/repository.c - the repository: policies known by their
 * source (API or k8s), kind (NetworkPolicy or Cilium), namespace and name.
 * A policy takes its rule IDs as it enters, is admitted at the next update
 * (its selectors join the cache, the endpoints it selects are marked) and
 * gives both back as it leaves (pol_retire); every change bumps the
 * revision, saves the state file and updates the datapath (repo_changed).
 * The /v1/policy routes: GET (revision, policies, endpoints, counters),
 * PUT (an import, all or nothing), DELETE one or all of the API's. */
#include "policy_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* A policy is known by its source (API or k8s), whether it is a
 * Kubernetes NetworkPolicy or a Cilium one, its namespace and its name. */
ssize_t pol_find(struct pol_state *st, bool from_k8s, bool knp, const char *name,
		 const char *ns)
{
	for (size_t i = 0; i < st->npols; i++)
		if (st->pols[i]->from_k8s == from_k8s && (st->pols[i]->kind == POL_KIND_KNP) == knp &&
		    !strcmp(st->pols[i]->name, name) && !strcmp(st->pols[i]->ns, ns))
			return (ssize_t)i;
	return -1;
}

void pol_remove_at(struct pol_state *st, size_t at)
{
	pol_retire(st, st->pols[at]);
	memmove(&st->pols[at], &st->pols[at + 1], (st->npols - at - 1) * sizeof(*st->pols));
	st->npols--;
}

/* A policy enters the repository: its selectors join the cache, the
 * endpoints it selects are resolved again. */
void pol_admit(struct pol_state *st, struct pol_policy *pol)
{
	if (pol->warnings) {
		for (const char *l = pol->warnings; l && *l;) {
			const char *end = strchr(l, '\n');
			int n = end ? (int)(end - l) : (int)strlen(l);
			fibril_warn(st->m, "%s %s%s%s: enforced otherwise than written: %.*s",
				    pol_kind_name(pol->kind), pol->ns, pol->ns[0] ? "/" : "", pol->name, n, l);
			l = end ? end + 1 : NULL;
		}
		st->sel_warnings++;
		fibril_series_inc(fibril_metric_labels(st->m_sel_warnings, "filtered-label"));
	}
	for (size_t r = 0; r < pol->nrules; r++) {
		struct pol_rule *rule = &pol->rules[r];
		sel_register(st, &rule->subject, pol->ns);
		for (size_t k = 0; k < rule->npeers; k++)
			for (size_t e = 0; e < rule->peers[k].nendpoints; e++)
				sel_register(st, &rule->peers[k].endpoints[e], pol->ns);
		pol_mark_subjects(st, pol, rule);
	}
	pol->admitted = true;
}

/* A policy leaves the repository (replaced or deleted): the endpoints it
 * selected are resolved again, its selectors leave the cache; freed. */
void pol_retire(struct pol_state *st, struct pol_policy *pol)
{
	pol_drop_ids(st, pol);
	for (size_t r = 0; pol->admitted && r < pol->nrules; r++) {
		struct pol_rule *rule = &pol->rules[r];
		pol_mark_subjects(st, pol, rule);
		sel_unregister(st, &rule->subject);
		for (size_t k = 0; k < rule->npeers; k++)
			for (size_t e = 0; e < rule->peers[k].nendpoints; e++)
				sel_unregister(st, &rule->peers[k].endpoints[e]);
	}
	pol_policy_free(pol);
}

/* After a change to the repository: revision, state file, datapath. */
void repo_changed(struct pol_state *st)
{
	st->revision++;
	int rc = state_save(st, st->pols, st->npols, st->revision);
	if (rc < 0)
		fibril_error(st->m, "cannot write %s: %s (the policies apply until a restart)",
			     POL_STATE_FILE, strerror(-rc));
	pol_recompute(st);
}

static struct json_object *state_json(struct pol_state *st)
{
	struct json_object *o = json_object_new_object(), *pols = json_object_new_array(),
			   *eps = json_object_new_array(), *stats = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	for (size_t i = 0; i < st->npols; i++) {
		struct json_object *p = json_object_new_object();
		json_object_object_add(p, "name", json_object_new_string(st->pols[i]->name));
		json_object_object_add(p, "namespace", json_object_new_string(st->pols[i]->ns));
		json_object_object_add(p, "rules", json_object_new_int((int)st->pols[i]->nrules));
		json_object_object_add(p, "kind", json_object_new_string(pol_kind_name(st->pols[i]->kind)));
		json_object_object_add(p, "source", json_object_new_string(st->pols[i]->from_k8s ? "k8s" : "api"));
		json_object_object_add(p, "policy", json_tokener_parse(st->pols[i]->text));
		struct json_object *w = json_object_new_array();
		for (const char *l = st->pols[i]->warnings; l && *l;) {
			const char *end = strchr(l, '\n');
			size_t n = end ? (size_t)(end - l) : strlen(l);
			json_object_array_add(w, json_object_new_string_len(l, (int)n));
			l = end ? end + 1 : NULL;
		}
		json_object_object_add(p, "warnings", w);
		json_object_array_add(pols, p);
	}
	json_object_object_add(o, "policies", pols);
	for (size_t i = 1; i < st->ep_hi; i++) {
		const struct pol_ep *ep = st->eps[i];
		if (!ep)
			continue;
		struct json_object *e = json_object_new_object();
		json_object_object_add(e, "id", json_object_new_int(ep->id));
		json_object_object_add(e, "identity", json_object_new_int64(ep->identity));
		json_object_object_add(e, "ingress",
				       json_object_new_string(ep->ingress ? "enforced" : "open"));
		json_object_object_add(e, "egress",
				       json_object_new_string(ep->egress ? "enforced" : "open"));
		json_object_object_add(e, "revision", json_object_new_int64(ep->revision));
		json_object_object_add(e, "entries", json_object_new_int((int)ep->nentries));
		json_object_array_add(eps, e);
	}
	json_object_object_add(o, "endpoints", eps);
#define STAT(n, v) json_object_object_add(stats, n, json_object_new_int64((int64_t)(v)))
	STAT("imports", st->imports);
	STAT("refused", st->refused);
	STAT("deletes", st->deletes);
	STAT("recomputes", st->recomputes);
	STAT("incremental_updates", st->incrementals);
	STAT("endpoint_resolutions", st->resolutions);
	STAT("cluster_identity_updates", st->rid_updates);
	STAT("selectors", st->nsels);
	STAT("last_update_us", st->last_update_us);
	STAT("last_update_endpoints", st->last_update_eps);
	STAT("map_writes", st->map_writes);
	STAT("map_removes", st->map_removes);
	STAT("map_errors", st->map_errors);
	STAT("cidr_identities", st->ncidrs);
	STAT("k8s_applied", st->k8s_applied);
	STAT("k8s_invalid", st->k8s_invalid);
	STAT("k8s_deleted", st->k8s_deleted);
	STAT("selector_warnings", st->sel_warnings);
#undef STAT
	json_object_object_add(o, "stats", stats);
	return o;
}

void pol_reply(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status,
			 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

void pol_get_policy(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	pol_reply(resp, 200, state_json(ud));
}

void pol_put_policy(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct pol_state *st = ud;
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	struct pol_policy **v = NULL;
	char err[512];
	int n = pol_parse(body ? body : "", len, &v, err, sizeof(err));
	if (n < 0 || (n > 0 && cidrs_admit(st, v, (size_t)n, err, sizeof(err)))) {
		if (n > 0)
			pol_policies_free(v, (size_t)n);
		st->refused++;
		fibril_resp_error(resp, 400, "%s", err);
		return;
	}
	/* all or nothing: make room first */
	struct pol_policy **grown = realloc(st->pols, (st->npols + (size_t)n) * sizeof(*grown));
	if (!grown) {
		pol_policies_free(v, (size_t)n);
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	st->pols = grown;
	struct json_object *names = json_object_new_array();
	for (int i = 0; i < n; i++) {
		ssize_t at = pol_find(st, false, v[i]->kind == POL_KIND_KNP, v[i]->name, v[i]->ns);
		char full[POL_NAME_MAX + POL_NS_MAX + 2];
		snprintf(full, sizeof(full), "%s%s%s", v[i]->ns, v[i]->ns[0] ? "/" : "", v[i]->name);
		json_object_array_add(names, json_object_new_string(full));
		pol_take_ids(st, v[i]); /* before the old version lets go of them */
		if (at >= 0) {
			pol_retire(st, st->pols[at]);
			st->pols[at] = v[i];
		} else
			st->pols[st->npols++] = v[i];
	}
	free(v);
	st->imports += (uint64_t)n;
	repo_changed(st);
	fibril_info(st->m, "%d polic%s imported, revision %llu", n, n == 1 ? "y" : "ies",
		    (unsigned long long)st->revision);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "imported", names);
	pol_reply(resp, 200, o);
}

void pol_delete_one(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct pol_state *st = ud;
	const char *name = fibril_req_param(req, "name");
	const char *ns = fibril_req_query(req, "namespace");
	int deleted = 0;
	/* the API's own (a NetworkPolicy and a Cilium policy of that name both go) */
	for (int knp = 0; knp < 2 && name; knp++) {
		ssize_t at = pol_find(st, false, knp, name, ns ? ns : "");
		if (at >= 0) {
			pol_remove_at(st, (size_t)at);
			deleted++;
		}
	}
	if (!deleted) {
		fibril_resp_error(resp, 404, "no policy '%.200s'%s%.60s imported through the API",
				  name ? name : "", ns ? " in namespace " : "", ns ? ns : "");
		return;
	}
	st->deletes += (uint64_t)deleted;
	repo_changed(st);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "deleted", json_object_new_int(deleted));
	pol_reply(resp, 200, o);
}

void pol_delete_all(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct pol_state *st = ud;
	size_t n = 0;
	/* the API's own: the k8s ones follow their objects */
	for (size_t i = st->npols; i-- > 0;)
		if (!st->pols[i]->from_k8s) {
			pol_remove_at(st, i);
			n++;
		}
	st->deletes += n;
	repo_changed(st);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "deleted", json_object_new_int((int)n));
	pol_reply(resp, 200, o);
}
