/* modules/ipam-k8s-podcidr/ops.c - the "ipam" interface (fibril/ipam.h),
 * served by the SDK's allocation store (fibril/ipamstore.h): addresses of
 * the node's pod CIDR(s), one per family per owner, each made durable on
 * disk under <state-dir>/ipam-k8s-podcidr/ before it is returned. A family
 * serves as soon as the Node gave its CIDR (make_ready in podcidr.c). */
#include "podcidr.h"

#include <errno.h>
#include <string.h>

int pc_store_provide(struct pc *pc)
{
	const char *strategy = fibril_config_string(pc->m, "allocation-strategy");
	pc->strategy = strategy && strcmp(strategy, "random") == 0 ? FIBRIL_IPALLOC_RANDOM
								    : FIBRIL_IPALLOC_SEQUENTIAL;
	struct fibril_ipamstore_opts opts = {.sz = sizeof(opts), .strategy = pc->strategy};
	int rc = fibril_ipamstore_new(pc->m, &opts, &pc->store);
	if (rc == 0)
		rc = fibril_service_provide(pc->m, FIBRIL_IPAM_CAPABILITY,
					    &fibril_ipamstore_ops(pc->store)->hdr, pc->store);
	return rc;
}

int pc_fam_set_node(struct pc_fam *f, const struct fibril_cidr *cidr)
{
	int rc = fibril_ipamstore_set_node(f->pc->store, cidr);
	if (rc)
		return rc;
	f->node = *cidr;
	f->have_node = true;
	return 0;
}

void pc_fam_info(const struct pc_fam *f, struct fibril_ipamstore_family *out)
{
	*out = (struct fibril_ipamstore_family){.sz = sizeof(*out)};
	fibril_ipamstore_family(f->pc->store, f->family, out);
}
