/* tests/fuzz/fuzz_k8s_node.c - fuzz target: a Node object as the
 * ipam-k8s-podcidr module decodes it (pc_node_cidrs: spec.podCIDRs, then
 * spec.podCIDR, then the network.fibril.io/ipv4-pod-cidr and ipv6-pod-cidr
 * annotations, each CIDR parsed and checked). Input: the Node's JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podcidr.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	struct pc_node_cidrs c;
	char why[PC_WHY_LEN];

	memset(&c, 0, sizeof(c));
	if (pc_node_cidrs(text, &c, why, sizeof(why)) >= 0) {
		for (int i = 0; i < PC_NFAM; i++) {
			char buf[FIBRIL_IPAM_CIDR_LEN];
			if (c.have[i] && (!fibril_cidr_format(&c.cidr[i], buf, sizeof(buf)) || !c.source[i][0]))
				abort(); /* a CIDR that was found has a text form and a source */
		}
	}
	free(text);
	return 0;
}
