/* modules/policy/policy.c - the policy module (capability "policy"): a
 * repository of CiliumNetworkPolicies, CiliumClusterwideNetworkPolicies and
 * Kubernetes NetworkPolicies fed by the API and by the k8s module's
 * informers (bus events k8s.networkpolicies, k8s.ciliumnetworkpolicies,
 * k8s.ciliumclusterwidenetworkpolicies), the local endpoints and their
 * labels (from the endpoint module's bus events) with their namespace's
 * labels and their pod's named ports (k8s caches), CIDR
 * identities in the ipcache, and each endpoint's resolved L3/L4 policy
 * programmed into the datapath's policy map (<fibril/datapath.h> v2).
 *
 * A selector cache holds each distinct label selector (subjects and peers
 * of every rule) with the identities it selects now, updated incrementally
 * as endpoints and the cluster's identities appear, change or go. A change re-resolves only the
 * endpoints it can affect: those a changed policy's old or new version
 * selects, the endpoint that changed, and those selected by a rule whose
 * peer selectors gained or lost an identity (a new or released CIDR
 * identity, or the module's start, resolves every endpoint). Each
 * re-resolved endpoint's entries are compared with what is in place and
 * only the difference is written: entries that appear are written before
 * enforcement is switched on, entries that go are removed after, so no
 * window opens more than either the old or the new policy allows.
 *
 * Each rule (an element of ingress / egress / ingressDeny / egressDeny)
 * has a stable ID, saved with the policies; every map entry carries the ID
 * of the rule it comes from, so the datapath's verdict and drop events name
 * it (rule_lookup in the capability, for hubble-lite).
 *
 *   GET    /v1/policy              revision, policies, endpoints, counters
 *   PUT    /v1/policy              import (a CNP, a list, or {"items": []})
 *   DELETE /v1/policy/{name}       one (?namespace=NS for a namespaced one)
 *   DELETE /v1/policy              every policy
 *   GET    /v1/policy/trace        ?src=&dst=&dport=N/PROTO: which rule allows or denies
 *   GET    /v1/policy/selectors    each distinct selector, its users and identities
 *
 * This file is the module's descriptor and lifecycle (the routes, the bus
 * subscriptions, the metric; start, stop) and the capability's functions;
 * policy_state.h lists the files that do the rest, one concern each. */
#include "policy_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t op_revision(void *ctx)
{
	return ((struct pol_state *)ctx)->revision;
}

static int op_endpoint_state(void *ctx, uint16_t id, struct fibril_policy_endpoint_state *out)
{
	struct pol_state *st = ctx;
	if (!out || out->sz < offsetof(struct fibril_policy_endpoint_state, entries) +
				      sizeof(out->entries))
		return -EINVAL;
	const struct pol_ep *ep = st->eps[id];
	if (!ep)
		return -ENOENT;
	out->ingress_enforced = ep->ingress;
	out->egress_enforced = ep->egress;
	out->revision = ep->revision;
	out->entries = (uint32_t)ep->nentries;
	return 0;
}

static int op_rule_lookup(void *ctx, uint32_t rule_id, struct fibril_policy_rule *out)
{
	struct pol_state *st = ctx;
	if (!out || out->sz < FIBRIL_OFFSETOFEND(struct fibril_policy_rule, rule_index))
		return -EINVAL;
	const struct pol_rule_rec *r = rule_by_id(st, rule_id);
	if (!r)
		return -ENOENT;
	uint32_t sz = out->sz;
	memset(out, 0, FIBRIL_OFFSETOFEND(struct fibril_policy_rule, rule_index));
	out->sz = sz;
	out->id = r->id;
	snprintf(out->kind, sizeof(out->kind), "%s", pol_kind_name(r->kind));
	snprintf(out->source, sizeof(out->source), "%s", r->from_k8s ? "k8s" : "api");
	snprintf(out->namespace_, sizeof(out->namespace_), "%s", r->ns);
	snprintf(out->name, sizeof(out->name), "%s", r->name);
	snprintf(out->section, sizeof(out->section), "%s", pol_section_name(r->ingress, r->deny));
	out->ingress = r->ingress;
	out->deny = r->deny;
	out->spec_index = r->spec;
	out->rule_index = r->index;
	return 0;
}

static int policy_init(struct fibril_module *m)
{
	struct pol_state *st = calloc(1, sizeof(*st));
	if (!st || !(st->eps = calloc(POL_EP_MAX, sizeof(*st->eps)))) {
		free(st);
		fibril_module_set_error(m, "out of memory");
		return -ENOMEM;
	}
	st->m = m;
	st->dirfd = -1;
	fibril_module_set_data(m, st);
	st->ops.hdr.sz = sizeof(st->ops);
	st->ops.hdr.version = FIBRIL_POLICY_VERSION;
	st->ops.revision = op_revision;
	st->ops.endpoint_state = op_endpoint_state;
	st->ops.rule_lookup = op_rule_lookup;
	int rc;
	if ((rc = fibril_service_provide(m, FIBRIL_POLICY_CAPABILITY, &st->ops.hdr, st))) {
		fibril_module_set_error(m, "cannot provide '%s': %s", FIBRIL_POLICY_CAPABILITY,
					strerror(-rc));
		return rc;
	}
	if ((rc = fibril_api_route(m, "GET", "/v1/policy", 0, pol_get_policy, st)) ||
	    (rc = fibril_api_route(m, "PUT", "/v1/policy", 0, pol_put_policy, st)) ||
	    (rc = fibril_api_route(m, "GET", "/v1/policy/trace", 0, pol_get_trace, st)) ||
	    (rc = fibril_api_route(m, "GET", "/v1/policy/selectors", 0, pol_get_selectors, st)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/policy", 0, pol_delete_all, st)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/policy/{name}", 0, pol_delete_one, st))) {
		fibril_module_set_error(m, "cannot register the /v1/policy routes: %s", strerror(-rc));
		return rc;
	}
	const char *topics[] = {FIBRIL_ENDPOINT_TOPIC_CREATED, FIBRIL_ENDPOINT_TOPIC_UPDATED,
				FIBRIL_ENDPOINT_TOPIC_DELETED};
	for (size_t i = 0; i < 3; i++)
		if (!fibril_bus_subscribe(m, topics[i], 1, pol_on_endpoint_event, st)) {
			fibril_module_set_error(m, "cannot subscribe to %s", topics[i]);
			return -ENOMEM;
		}
	const char *id_topics[] = {FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED,
				   FIBRIL_ENDPOINT_TOPIC_IDENTITY_DELETED};
	for (size_t i = 0; i < 2; i++)
		if (!fibril_bus_subscribe(m, id_topics[i], 1, pol_on_identity_event, st)) {
			fibril_module_set_error(m, "cannot subscribe to %s", id_topics[i]);
			return -ENOMEM;
		}
	const char *k8s_topics[] = {FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_NETWORKPOLICIES,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CNPS,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CCNPS,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_NAMESPACES,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_PODS};
	for (size_t i = 0; i < 5; i++)
		if (!fibril_bus_subscribe(m, k8s_topics[i], 1, i < 3 ? pol_on_k8s_policy : pol_on_k8s_scope, st)) {
			fibril_module_set_error(m, "cannot subscribe to %s", k8s_topics[i]);
			return -ENOMEM;
		}
	static const char *const labels[] = {"resource", "result", NULL};
	struct fibril_metric_opts mo = {.sz = sizeof(mo), .type = FIBRIL_METRIC_COUNTER,
					.name = "fibril_policy_k8s_objects_total",
					.help = "Kubernetes policy objects by resource and result "
						"(applied, invalid, deleted)",
					.labels = labels};
	st->m_k8s_invalid = fibril_metric_register(m, &mo);
	static const char *const wlabels[] = {"reason", NULL};
	struct fibril_metric_opts wo = {.sz = sizeof(wo), .type = FIBRIL_METRIC_COUNTER,
					.name = "fibril_policy_selector_warnings_total",
					.help = "Policies taken in with a selector enforced otherwise than "
						"written, by reason (filtered-label: a peer selector on a "
						"label identities leave out); each is logged and shown by "
						"fibril policy get",
					.labels = wlabels};
	st->m_sel_warnings = fibril_metric_register(m, &wo);
	const char *al = fibril_config_string(m, "allow-localhost");
	st->allow_localhost = !al || strcmp(al, "policy");
	return 0;
}

static int policy_start(struct fibril_module *m)
{
	struct pol_state *st = fibril_module_data(m);
	errno = 0;
	st->dp = (const struct fibril_datapath_ops *)fibril_service_lookup(
		m, FIBRIL_DATAPATH_CAPABILITY, 2, &st->dp_ctx);
	if (!st->dp || !FIBRIL_SERVICE_HAS(st->dp, policy_list) || !st->dp->policy_upsert ||
	    !st->dp->policy_remove || !st->dp->policy_enforce || !st->dp->policy_list) {
		fibril_module_set_error(m, "no usable '%s' provider (interface version 2 with the "
					   "policy functions): %s",
					FIBRIL_DATAPATH_CAPABILITY,
					errno == EPROTO ? "its interface is too old" : "missing");
		st->dp = NULL;
		return -EPROTO;
	}
	st->epops = (const struct fibril_endpoint_ops *)fibril_service_lookup(
		m, FIBRIL_ENDPOINT_CAPABILITY, 1, &st->ep_ctx);
	st->nodes = (const struct fibril_nodes_ops *)fibril_service_lookup(m, FIBRIL_NODES_CAPABILITY, 2,
									    &st->nodes_ctx);
	if (st->nodes && !FIBRIL_SERVICE_HAS(st->nodes, ipcache_pod))
		st->nodes = NULL;
	char why[512];
	int rc = state_open(st, why, sizeof(why));
	if (rc < 0) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	state_load(st);
	st->started = true;
	k8s_start(st);
	if (st->epops && st->epops->foreach)
		st->epops->foreach(st->ep_ctx, ep_seen, st);
	pol_adopt_map(st);
	st->full = true;
	pol_recompute(st);
	fibril_info(m, "policy enforcement on; %s", st->epops ? "endpoints followed"
							      : "no endpoint module");
	return 0;
}

static void policy_stop(struct fibril_module *m)
{
	struct pol_state *st = fibril_module_data(m);
	/* the datapath keeps enforcing what is in place */
	st->started = false;
	st->dp = NULL;
	st->epops = NULL;
	st->k8s = NULL;
	st->k8s_synced = false;
	if (st->dirfd >= 0)
		close(st->dirfd);
	st->dirfd = -1;
	pol_policies_free(st->pols, st->npols);
	st->pols = NULL;
	st->npols = 0;
	sel_cache_clear(st);
	for (size_t i = 0; i < POL_EP_MAX; i++) {
		ep_free(st->eps[i]);
		st->eps[i] = NULL;
	}
	free(st->cidrs);
	st->cidrs = NULL;
	st->ncidrs = 0;
	rules_free(st);
	st->next_rule_id = 0;
}

static void policy_fini(struct fibril_module *m)
{
	struct pol_state *st = fibril_module_data(m);
	if (!st)
		return;
	for (size_t i = 0; st->eps && i < POL_EP_MAX; i++)
		ep_free(st->eps[i]);
	free(st->eps);
	rids_free(st);
	pol_policies_free(st->pols, st->npols);
	sel_cache_clear(st);
	free(st->cidrs);
	free(st->free_cidr_ids);
	rules_free(st);
	if (st->dirfd >= 0)
		close(st->dirfd);
	free(st);
	fibril_module_set_data(m, NULL);
}

static int policy_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct pol_state *st = fibril_module_data(m);
	size_t n = 0;
	for (size_t i = 1; i < st->ep_hi; i++)
		n += st->eps[i] && (st->eps[i]->ingress || st->eps[i]->egress);
	return snprintf(buf, len, "%zu policies, revision %llu, %zu endpoints enforced", st->npols,
			(unsigned long long)st->revision, n);
}

static int check_allow_localhost(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "always") || !strcmp(value, "policy"))
		return 0;
	snprintf(why, len, "expected always or policy");
	return -EINVAL;
}

static const struct fibril_config_key pol_config_keys[] = {
	{.name = "cidr-identities-per-namespace", .type = FIBRIL_CONFIG_INT, .default_value = "256",
	 .help = "The most distinct CIDR prefixes (each a local CIDR identity and an ipcache "
		 "entry) the policies of one namespace may name; a policy that would name more "
		 "is refused", .min = 1, .max = 65536},
	{.name = "allow-localhost", .type = FIBRIL_CONFIG_STRING, .default_value = "always",
	 .help = "always (the default, as Kubernetes requires and Cilium's allow-localhost): the "
		 "node's own traffic (kubelet's liveness and readiness probes) is allowed into its "
		 "endpoints whatever the policy, unless a deny rule names the host; policy: the "
		 "host is an ordinary peer, which only a rule allows",
	 .check = check_allow_localhost},
	{0},
};

FIBRIL_MODULE(.name = POL_MODULE, .version = "1.0.0",
	      .description = "network policy: NetworkPolicy and CiliumNetworkPolicy at L3/L4 in the eBPF datapath",
	      .provides = FIBRIL_LIST(FIBRIL_POLICY_CAPABILITY),
	      .requires = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_ENDPOINT_CAPABILITY, FIBRIL_K8S_CAPABILITY,
				   FIBRIL_NODES_CAPABILITY),
	      .config_keys = pol_config_keys, .init = policy_init,
	      .start = policy_start, .stop = policy_stop, .fini = policy_fini,
	      .summary = policy_summary);
