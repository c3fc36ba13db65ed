/* tests/fuzz/fuzz_node_k8s.c - fuzz target: a Kubernetes Node object as the
 * nodes module's Kubernetes source reads it (modules/nodes/k8s_node.c):
 * outside input from the API server. A Node that decodes has a valid name,
 * at most FIBRIL_NODE_MAX_CIDRS pod CIDRs with their host bits zero, and a
 * tunnel endpoint whenever it has an IPv4 address; a refusal names what
 * was wrong. */
#include <stdlib.h>
#include <string.h>

#include "nodes_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char why[NODES_WHY_LEN] = "";
	struct fibril_node n;

	if (!text)
		return 0;
	if (nodes_k8s_decode(text, size, size % 2 == 0, &n, why, sizeof(why)) == 0) {
		if (!nodes_name_valid(n.name) || n.n_cidrs > FIBRIL_NODE_MAX_CIDRS ||
		    n.source != FIBRIL_NODE_SOURCE_K8S || (n.has_ipv4 && !n.has_tunnel_endpoint))
			abort();
		for (uint32_t i = 0; i < n.n_cidrs; i++) {
			char t[64];
			struct fibril_node_cidr c;
			/* each CIDR prints as text that parses back to itself */
			if (nodes_cidr_parse(nodes_cidr_text(&n.cidrs[i], t, sizeof(t)), &c) ||
			    memcmp(&c, &n.cidrs[i], sizeof(c)) != 0)
				abort();
		}
	} else if (!why[0]) {
		abort();
	}
	free(text);
	return 0;
}
