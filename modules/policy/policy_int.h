/* modules/policy/policy_int.h - the policy module's internals: the parsed
 * form of a CiliumNetworkPolicy (rules, selectors, peers, ports), the
 * parser (parse.c and the parse_*.c files it names, also compiled into the
 * unit test and the fuzz target) and the label matching it needs. The module itself (policy_state.h and the files it lists)
 * keeps the repository, computes each endpoint's entries and programs the
 * datapath's policy map. */
#ifndef FIBRIL_POLICY_INT_H
#define FIBRIL_POLICY_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POL_NAME_MAX 254
#define POL_NS_MAX 64

enum pol_op { POL_OP_IN, POL_OP_NOT_IN, POL_OP_EXISTS, POL_OP_NOT_EXISTS };

struct pol_expr {
	char *key;
	enum pol_op op;
	char **values;
	size_t nvalues;
};

/* A label selector; matchLabels become In expressions of one value. An
 * empty selector ({}) selects every endpoint. */
struct pol_selector {
	struct pol_expr *exprs;
	size_t nexprs;
	/* a NetworkPolicy peer with a namespaceSelector: not limited to the
	 * policy's namespace (its namespace expressions test the
	 * POL_NS_LABELS_PREFIX labels) */
	bool any_namespace;
	/* the policy module's selector cache entry (selector_cache.c), NULL until
	 * the policy is admitted */
	void *cached;
};

/* The labels of an endpoint's namespace, as the policy module adds them to
 * the endpoint's own (Cilium's prefix): "k8s:io.cilium.k8s.namespace.labels.KEY=V". */
#define POL_NS_LABELS_PREFIX "io.cilium.k8s.namespace.labels."
#define POL_NS_LABEL "io.kubernetes.pod.namespace"

struct pol_cidr {
	int family; /* 4 or 6 */
	uint8_t addr[16];
	unsigned plen;
};

struct pol_cidr_rule {
	struct pol_cidr cidr;
	struct pol_cidr *except;
	size_t nexcept;
};

/* reserved entities (fromEntities / toEntities) */
#define POL_ENT_WORLD 0x01
#define POL_ENT_ALL 0x02
#define POL_ENT_HOST 0x04
#define POL_ENT_CLUSTER 0x08
#define POL_ENT_REMOTE_NODE 0x10
#define POL_ENT_HEALTH 0x20
#define POL_ENT_INIT 0x40
#define POL_ENT_KUBE_APISERVER 0x80

struct pol_port {
	uint8_t proto; /* IPPROTO_TCP / UDP / SCTP */
	uint16_t port; /* 0: any port (or a named port) */
	uint16_t end_port; /* >= port: a range */
	char *name; /* a named port (resolved per pod from its container ports), else NULL */
};

/* One element of ingress / egress / ingressDeny / egressDeny. */
struct pol_peer {
	bool ingress; /* else egress */
	bool deny;
	bool any_l3;  /* fromEndpoints/CIDR/entities given (else: L4-only) */
	bool all_peers; /* every peer (a NetworkPolicy rule with no from/to) */
	struct pol_selector *endpoints;
	size_t nendpoints;
	struct pol_cidr_rule *cidrs;
	size_t ncidrs;
	uint32_t entities; /* POL_ENT_* */
	struct pol_port *ports; /* none: every port of every protocol */
	size_t nports;
	/* its element in its section (ingress[index], ...; a NetworkPolicy
	 * rule's peers share their rule's index) */
	uint32_t index;
	/* the policy module's stable ID of that rule (rule_ids.c), 0 until set */
	uint32_t rule_id;
};

/* One rule of a policy's spec / specs. */
struct pol_rule {
	struct pol_selector subject; /* endpointSelector */
	bool has_ingress, has_egress; /* the sections were present: enforced */
	struct pol_peer *peers;
	size_t npeers;
};

enum pol_kind { POL_KIND_CNP = 0, POL_KIND_CCNP, POL_KIND_KNP };

struct pol_policy {
	enum pol_kind kind;
	bool from_k8s; /* fed by the k8s informers (else by the API) */
	char name[POL_NAME_MAX];
	char ns[POL_NS_MAX]; /* "" when the policy has no namespace */
	struct pol_rule *rules;
	size_t nrules;
	char *text; /* the policy as imported (JSON), for GET */
	/* what the parser flagged and enforces otherwise than written ('\n'-
	 * separated lines "PATH: why"; NULL: none): a peer selector naming a
	 * label that identities leave out (pol_peer_selector_check) */
	char *warnings;
	bool admitted; /* its selectors are in the module's selector cache */
};

/* Parse CiliumNetworkPolicies, CiliumClusterwideNetworkPolicies and
 * Kubernetes NetworkPolicies (networking.k8s.io/v1, translated into the same
 * rules), one or a list of them (an array or an object with "items"), in
 * JSON or YAML (input not starting with '{' or '['; several documents make
 * a list). Returns the number of policies in *out (array of
 * pointers, free with pol_policies_free), or -1 with a one-line error
 * naming the policy and the field. */
int pol_parse(const char *text, size_t len, struct pol_policy ***out, char *err, size_t errlen);
void pol_policy_free(struct pol_policy *p);
const char *pol_kind_name(enum pol_kind k);

/* YAML (libyaml) into json-c: one document, or an array of several; NULL
 * with a one-line error naming the line. Scalars: plain integers, true,
 * false and null take their JSON types, everything else is a string. */
struct json_object *pol_yaml_to_json(const char *text, size_t len, char *err, size_t errlen);

/* Whether a name is a valid named port (IANA service name: 1-15 of a-z,
 * 0-9 and '-', at least one letter, no leading/trailing/double '-'). */
bool pol_port_name_ok(const char *s);
/* inner lies within outer (same family, at least as long a prefix) */
bool pol_cidr_within(const struct pol_cidr *inner, const struct pol_cidr *outer);
void pol_policies_free(struct pol_policy **v, size_t n);
/* Does a selector key ("key" or "source:key") name a Kubernetes label
 * that the endpoint module leaves out of identities (label_filter.h:
 * pod-template-hash, statefulset.kubernetes.io/pod-name, ...)? */
bool pol_key_filtered(const char *key);
/* Free a selector's expressions (the selector itself is the caller's). */
void pol_selector_free(struct pol_selector *s);

/* Whether a label set ('\n'-separated "source:key=value") matches sel. A
 * selector key "k" matches a label of any source; "src:k" that source
 * only. ns, when not "" and the selector names no namespace, must be the
 * endpoint's namespace label (a namespaced policy selects its own). */
bool pol_selector_match(const struct pol_selector *sel, const char *labels, const char *ns);

/* A port range as power-of-two aligned blocks: calls fn(port, bits) per
 * block (bits: leading bits that match, 16: one port). */
void pol_port_blocks(uint16_t first, uint16_t last, void (*fn)(uint16_t port, unsigned bits, void *ud),
		     void *ud);

#endif
