/* fibril/policy.h - the "policy" capability (interface version 2): the
 * network policy module as other modules see it. The module keeps a
 * repository of CiliumNetworkPolicies (fed by the API: PUT/GET/DELETE
 * /v1/policy), whose revision goes up by one on every change, computes
 * each local endpoint's L3/L4 policy and programs the datapath's policy
 * map incrementally (<fibril/datapath.h> interface version 2). Every
 * function runs on the loop thread. */
#ifndef FIBRIL_POLICY_H
#define FIBRIL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_POLICY_CAPABILITY "policy"
#define FIBRIL_POLICY_VERSION 2

/* One endpoint's policy state (sz set by the caller). */
struct fibril_policy_endpoint_state {
	uint32_t sz;
	bool ingress_enforced;
	bool egress_enforced;
	uint32_t revision; /* the repository revision its map entries come from */
	uint32_t entries;  /* policy map entries in place */
};

/* Interface version 2 (SDK 1.7): one rule of a policy, as the rule ID in
 * the datapath's policy map entries and in its verdict and drop events
 * (<fibril/datapath.h> policy_rule) names it. A rule is one element of a
 * policy's ingress / egress / ingressDeny / egressDeny list (of spec, or
 * of specs[spec_index]); its ID stays the same while a policy of that
 * source, kind, namespace and name has a rule at that place, across
 * updates and restarts. sz is set by the caller; the provider fills what
 * it holds. */
struct fibril_policy_rule {
	uint32_t sz;
	uint32_t id;
	char kind[48];       /* "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy",
			      * "NetworkPolicy" */
	char source[8];      /* "api" or "k8s" */
	char namespace_[64]; /* "" for a cluster-wide policy */
	char name[254];
	char section[16];    /* "ingress", "egress", "ingressDeny", "egressDeny" */
	bool ingress;        /* else egress */
	bool deny;
	uint32_t spec_index; /* specs[N] of a policy with several, else 0 */
	uint32_t rule_index; /* the element of its section: ingress[rule_index] */
};

struct fibril_policy_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_POLICY_VERSION */
	/* The repository's current revision (0: no policy was ever added). */
	uint64_t (*revision)(void *ctx);
	/* One endpoint's state: 0, or -ENOENT when the module does not know it. */
	int (*endpoint_state)(void *ctx, uint16_t endpoint_id,
			      struct fibril_policy_endpoint_state *out);
	/* --- interface version 2 (check FIBRIL_SERVICE_HAS) --- */
	/* The rule of an ID: 0, -ENOENT when no policy in the repository has
	 * it now (0 is never a rule), -EINVAL when out is NULL or its sz too
	 * short for the fields up to rule_index. */
	int (*rule_lookup)(void *ctx, uint32_t rule_id, struct fibril_policy_rule *out);
};

#ifdef __cplusplus
}
#endif
#endif
