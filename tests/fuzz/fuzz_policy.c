/* tests/fuzz/fuzz_policy.c - fuzz target: the policy module's parser
 * (modules/policy/parse*.c, yaml.c): CiliumNetworkPolicy (selectors,
 * CIDR/CIDRSet with except, entities, toPorts with endPort and named
 * ports, deny sections, refusal of unsupported fields) and Kubernetes
 * NetworkPolicy (podSelector, namespaceSelector, ipBlock, ports by number
 * or name, endPort, policyTypes), in JSON or YAML (libyaml: several
 * documents, aliases), then every parsed selector matched against a few
 * label sets and every port range split into blocks, which must cover
 * exactly the range. Input: the policy text (one, a list or
 * {"items": [...]}). A refusal must come with a one-line error. */
#include "policy_int.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

struct cover {
	uint32_t next;
	uint32_t last;
	bool bad;
};

static void block(uint16_t port, unsigned bits, void *ud)
{
	struct cover *c = ud;
	uint32_t size = 1u << (16 - bits);
	if (bits > 16 || port != c->next || (port & (size - 1)) || port + size - 1 > c->last)
		c->bad = true;
	c->next = port + size;
}

static const char *const label_sets[] = {
	"",
	"k8s:app=web",
	"k8s:app=db\nk8s:io.kubernetes.pod.namespace=default\nk8s:tier=backend",
	"container:app=web\nk8s:env",
	"k8s:pod=a\nk8s:io.kubernetes.pod.namespace=x\nk8s:io.cilium.k8s.namespace.labels.ns=x",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	struct pol_policy **v = NULL;
	char err[512] = "";
	int n = pol_parse(text, size, &v, err, sizeof(err));

	if (n < 0) {
		if (!err[0] || strchr(err, '\n'))
			abort(); /* a refusal says why, in one line */
		free(text);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		const struct pol_policy *p = v[i];
		if (!p->name[0] || !p->text || (p->kind == POL_KIND_KNP && !p->ns[0]) ||
		    (p->kind == POL_KIND_CCNP && p->ns[0]))
			abort();
		for (size_t r = 0; r < p->nrules; r++) {
			const struct pol_rule *rule = &p->rules[r];
			for (size_t l = 0; l < sizeof(label_sets) / sizeof(label_sets[0]); l++)
				(void)pol_selector_match(&rule->subject, label_sets[l], p->ns);
			for (size_t k = 0; k < rule->npeers; k++) {
				const struct pol_peer *peer = &rule->peers[k];
				for (size_t s = 0; s < peer->nendpoints; s++)
					for (size_t l = 0; l < sizeof(label_sets) / sizeof(label_sets[0]); l++)
						(void)pol_selector_match(&peer->endpoints[s], label_sets[l], p->ns);
				for (size_t q = 0; q < peer->nports; q++) {
					const struct pol_port *pp = &peer->ports[q];
					if (pp->end_port < pp->port || (pp->name && (pp->port || !pol_port_name_ok(pp->name))))
						abort(); /* a named port is a valid name and no number */
					if (!pp->port)
						continue;
					struct cover c = {.next = pp->port, .last = pp->end_port};
					pol_port_blocks(pp->port, pp->end_port, block, &c);
					if (c.bad || c.next != (uint32_t)pp->end_port + 1)
						abort();
				}
			}
		}
	}
	pol_policies_free(v, (size_t)n);
	free(text);
	return 0;
}
