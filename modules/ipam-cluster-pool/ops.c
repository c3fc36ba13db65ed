/* modules/ipam-cluster-pool/ops.c - the "ipam" interface (fibril/ipam.h),
 * served by the SDK's allocation store (fibril/ipamstore.h): addresses of
 * the node CIDR, one per family per owner, each made durable on disk under
 * <state-dir>/ipam-cluster-pool/ before it is returned. What is this mode's
 * own: a family serves only while its node CIDR claim is held. */
#include "cluster_pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct cp_fam *cp_fam_of(struct cp *cp, int family)
{
	if (family == 4)
		return &cp->fam[0];
	if (family == 6)
		return &cp->fam[1];
	return NULL;
}

/* The store asks before handing out: only from a claimed node CIDR. */
static bool claim_held(void *ud, int family)
{
	const struct cp_fam *f = cp_fam_of(ud, family);
	return f && f->claim == CP_CLAIM_HELD;
}

int cp_store_provide(struct cp *cp)
{
	struct fibril_ipamstore_opts opts = {.sz = sizeof(opts), .strategy = cp->strategy,
					     .serving = claim_held, .ud = cp};
	int rc = fibril_ipamstore_new(cp->m, &opts, &cp->store);
	if (rc == 0)
		rc = fibril_service_provide(cp->m, FIBRIL_IPAM_CAPABILITY,
					    &fibril_ipamstore_ops(cp->store)->hdr, cp->store);
	return rc;
}

int cp_store_open(struct cp *cp, char *why, size_t len)
{
	unsigned families = (cp->fam[0].enabled ? FIBRIL_IPAMSTORE_IPV4 : 0) |
			    (cp->fam[1].enabled ? FIBRIL_IPAMSTORE_IPV6 : 0);
	int rc = fibril_ipamstore_open(cp->store, families, why, len);
	for (int i = 0; rc == 0 && i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		struct fibril_ipamstore_family info = {.sz = sizeof(info)};
		if (f->enabled && fibril_ipamstore_family(cp->store, f->family, &info) == 0) {
			f->have_saved = info.have_saved;
			f->saved = info.saved;
		}
	}
	return rc;
}

int cp_fam_set_node(struct cp_fam *f, const struct fibril_cidr *cidr)
{
	int rc = fibril_ipamstore_set_node(f->cp->store, cidr);
	if (rc)
		return rc;
	f->node = *cidr;
	f->have_node = true;
	return 0;
}
