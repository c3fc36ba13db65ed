/* fibril/policy.h - the "policy" capability (interface version 1): the
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
#define FIBRIL_POLICY_VERSION 1

/* One endpoint's policy state (sz set by the caller). */
struct fibril_policy_endpoint_state {
	uint32_t sz;
	bool ingress_enforced;
	bool egress_enforced;
	uint32_t revision; /* the repository revision its map entries come from */
	uint32_t entries;  /* policy map entries in place */
};

struct fibril_policy_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_POLICY_VERSION */
	/* The repository's current revision (0: no policy was ever added). */
	uint64_t (*revision)(void *ctx);
	/* One endpoint's state: 0, or -ENOENT when the module does not know it. */
	int (*endpoint_state)(void *ctx, uint16_t endpoint_id,
			      struct fibril_policy_endpoint_state *out);
};

#ifdef __cplusplus
}
#endif
#endif
