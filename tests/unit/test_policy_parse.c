/* tests/unit/test_policy_parse.c - unit tests of the policy module's parser
 * (modules/policy/parse*.c, yaml.c): a Kubernetes NetworkPolicy translated
 * into rules (policyTypes defaults: every rule of the API server's
 * defaulting, absent / null / empty x each shape of ingress and egress;
 * one peer per from/to element with the rule's ports, empty from meaning every peer, namespaceSelector as
 * namespace-label expressions, ipBlock, named ports, endPort, protocol
 * TCP by default), YAML input (several documents, plain scalars typed),
 * the one-line refusals naming the policy and the field, selector
 * matching with namespace labels, and the warnings on peer selectors
 * naming labels that identities leave out. */
#include "cunit_main.h"
#include "policy_int.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static struct pol_policy **parse_ok(const char *text, int want)
{
	struct pol_policy **v = NULL;
	char err[512] = "";
	int n = pol_parse(text, strlen(text), &v, err, sizeof(err));
	if (n != want)
		fprintf(stderr, "parse: %d (%s)\n", n, err);
	CU_ASSERT_EQUAL_FATAL(n, want);
	return v;
}

static void refused(const char *text, const char *want_err)
{
	struct pol_policy **v = NULL;
	char err[512] = "";
	int n = pol_parse(text, strlen(text), &v, err, sizeof(err));
	CU_ASSERT_EQUAL(n, -1);
	if (!strstr(err, want_err))
		fprintf(stderr, "error '%s' does not hold '%s'\n", err, want_err);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, want_err));
	CU_ASSERT_PTR_NULL(strchr(err, '\n'));
}

static void test_knp_translation(void)
{
	struct pol_policy **v = parse_ok(
		"{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\","
		"\"metadata\":{\"name\":\"p\",\"namespace\":\"x\"},"
		"\"spec\":{\"podSelector\":{\"matchLabels\":{\"pod\":\"a\"}},"
		"\"ingress\":[{\"from\":[{\"namespaceSelector\":{\"matchLabels\":{\"ns\":\"y\"}},"
		"\"podSelector\":{\"matchLabels\":{\"pod\":\"c\"}}},{\"podSelector\":{}}],"
		"\"ports\":[{\"port\":80,\"endPort\":81},{\"protocol\":\"UDP\",\"port\":\"serve-81-udp\"}]},"
		"{}]}}",
		1);
	struct pol_policy *p = v[0];
	CU_ASSERT_EQUAL(p->kind, POL_KIND_KNP);
	CU_ASSERT_STRING_EQUAL(p->ns, "x");
	CU_ASSERT_EQUAL_FATAL(p->nrules, 1);
	struct pol_rule *r = &p->rules[0];
	CU_ASSERT_TRUE(r->has_ingress);
	CU_ASSERT_FALSE(r->has_egress); /* no egress rules, no policyTypes */
	CU_ASSERT_EQUAL_FATAL(r->npeers, 3);
	/* peer 0: pod=c in namespaces ns=y */
	CU_ASSERT_TRUE(r->peers[0].ingress);
	CU_ASSERT_EQUAL_FATAL(r->peers[0].nendpoints, 1);
	CU_ASSERT_TRUE(r->peers[0].endpoints[0].any_namespace);
	CU_ASSERT_TRUE(pol_selector_match(&r->peers[0].endpoints[0],
					  "k8s:pod=c\nk8s:io.kubernetes.pod.namespace=y\n"
					  "k8s:" POL_NS_LABELS_PREFIX "ns=y",
					  "x"));
	CU_ASSERT_FALSE(pol_selector_match(&r->peers[0].endpoints[0],
					   "k8s:pod=c\nk8s:io.kubernetes.pod.namespace=x\n"
					   "k8s:" POL_NS_LABELS_PREFIX "ns=x",
					   "x"));
	/* its ports: TCP 80-81 and a named UDP port */
	CU_ASSERT_EQUAL_FATAL(r->peers[0].nports, 2);
	CU_ASSERT_EQUAL(r->peers[0].ports[0].proto, IPPROTO_TCP);
	CU_ASSERT_EQUAL(r->peers[0].ports[0].port, 80);
	CU_ASSERT_EQUAL(r->peers[0].ports[0].end_port, 81);
	CU_ASSERT_EQUAL(r->peers[0].ports[1].proto, IPPROTO_UDP);
	CU_ASSERT_STRING_EQUAL(r->peers[0].ports[1].name, "serve-81-udp");
	/* peer 1: podSelector {} = every pod of the policy's namespace only */
	CU_ASSERT_FALSE(r->peers[1].endpoints[0].any_namespace);
	CU_ASSERT_TRUE(pol_selector_match(&r->peers[1].endpoints[0],
					  "k8s:io.kubernetes.pod.namespace=x", "x"));
	CU_ASSERT_FALSE(pol_selector_match(&r->peers[1].endpoints[0],
					   "k8s:io.kubernetes.pod.namespace=y", "x"));
	CU_ASSERT_EQUAL(r->peers[1].nports, 2);
	/* peer 2: the empty rule allows every peer on every port */
	CU_ASSERT_TRUE(r->peers[2].all_peers);
	CU_ASSERT_EQUAL(r->peers[2].nports, 0);
	pol_policies_free(v, 1);
}

static void test_knp_policy_types(void)
{
	/* egress rules make Egress a type; policyTypes [Egress] drops ingress rules */
	struct pol_policy **v = parse_ok(
		"{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},"
		"\"spec\":{\"podSelector\":{},\"egress\":[{\"to\":[{\"ipBlock\":{\"cidr\":\"10.0.0.0/8\","
		"\"except\":[\"10.1.0.0/16\"]}}],\"ports\":[{\"protocol\":\"SCTP\"}]}]}}",
		1);
	CU_ASSERT_STRING_EQUAL(v[0]->ns, "default");
	CU_ASSERT_TRUE(v[0]->rules[0].has_ingress);
	CU_ASSERT_TRUE(v[0]->rules[0].has_egress);
	CU_ASSERT_EQUAL_FATAL(v[0]->rules[0].npeers, 1);
	CU_ASSERT_EQUAL(v[0]->rules[0].peers[0].ncidrs, 1);
	CU_ASSERT_EQUAL(v[0]->rules[0].peers[0].cidrs[0].nexcept, 1);
	CU_ASSERT_EQUAL(v[0]->rules[0].peers[0].ports[0].proto, IPPROTO_SCTP);
	CU_ASSERT_EQUAL(v[0]->rules[0].peers[0].ports[0].port, 0);
	pol_policies_free(v, 1);
	v = parse_ok("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\",\"namespace\":\"x\"},"
		     "\"spec\":{\"podSelector\":{},\"policyTypes\":[\"Egress\"],"
		     "\"ingress\":[{}],\"egress\":[{}]}}",
		     1);
	CU_ASSERT_FALSE(v[0]->rules[0].has_ingress);
	CU_ASSERT_TRUE(v[0]->rules[0].has_egress);
	CU_ASSERT_EQUAL(v[0]->rules[0].npeers, 1);
	CU_ASSERT_FALSE(v[0]->rules[0].peers[0].ingress);
	pol_policies_free(v, 1);
}

/* Every defaulting rule of policyTypes, as the API server's
 * SetDefaults_NetworkPolicy: when policyTypes is absent, null or empty it
 * is [Ingress], plus Egress when the egress list is non-empty (an empty or
 * null egress list adds nothing); an explicit policyTypes is taken as is.
 * Each type x each shape of ingress and egress: the directions enforced
 * and which sections' rules apply. */
static void test_knp_policy_types_defaulting(void)
{
	static const char *const types[] = {NULL, "null", "[]", "[\"Ingress\"]", "[\"Egress\"]",
					    "[\"Ingress\",\"Egress\"]", "[\"Egress\",\"Ingress\"]"};
	/* a section: absent, null, empty, one rule */
	static const char *const sections[] = {NULL, "null", "[]", "[{}]"};
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		for (size_t i = 0; i < 4; i++)
			for (size_t e = 0; e < 4; e++) {
				char text[512];
				int n = snprintf(text, sizeof(text),
						 "{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\","
						 "\"namespace\":\"x\"},\"spec\":{\"podSelector\":{}");
				if (types[t])
					n += snprintf(text + n, sizeof(text) - (size_t)n,
						      ",\"policyTypes\":%s", types[t]);
				if (sections[i])
					n += snprintf(text + n, sizeof(text) - (size_t)n, ",\"ingress\":%s",
						      sections[i]);
				if (sections[e])
					n += snprintf(text + n, sizeof(text) - (size_t)n, ",\"egress\":%s",
						      sections[e]);
				snprintf(text + n, sizeof(text) - (size_t)n, "}}");
				bool defaulted = t < 3, egress_rules = e == 3, ingress_rules = i == 3;
				bool want_in = defaulted || strstr(types[t], "Ingress");
				bool want_eg = defaulted ? egress_rules : strstr(types[t], "Egress") != NULL;
				struct pol_policy **v = parse_ok(text, 1);
				const struct pol_rule *r = &v[0]->rules[0];
				size_t want_in_peers = want_in && ingress_rules, want_eg_peers = want_eg && egress_rules;
				size_t in_peers = 0, eg_peers = 0;
				for (size_t k = 0; k < r->npeers; k++)
					*(r->peers[k].ingress ? &in_peers : &eg_peers) += 1;
				if (r->has_ingress != want_in || r->has_egress != want_eg ||
				    in_peers != want_in_peers || eg_peers != want_eg_peers)
					fprintf(stderr,
						"%s: ingress %d egress %d (want %d %d), peers %zu/%zu (want %zu/%zu)\n",
						text, r->has_ingress, r->has_egress, want_in, want_eg, in_peers,
						eg_peers, want_in_peers, want_eg_peers);
				CU_ASSERT_EQUAL(r->has_ingress, want_in);
				CU_ASSERT_EQUAL(r->has_egress, want_eg);
				CU_ASSERT_EQUAL(in_peers, want_in_peers);
				CU_ASSERT_EQUAL(eg_peers, want_eg_peers);
				pol_policies_free(v, 1);
			}
}

/* Selectors on labels the endpoint module leaves out of identities: a
 * peer selector naming one is warned about (path and label), a subject
 * selector is not (the module matches it against the pod's own labels),
 * nor are namespace labels or other sources. */
static void test_filtered_label_warnings(void)
{
	CU_ASSERT_TRUE(pol_key_filtered("pod-template-hash"));
	CU_ASSERT_TRUE(pol_key_filtered("k8s:statefulset.kubernetes.io/pod-name"));
	CU_ASSERT_TRUE(pol_key_filtered("controller-revision-hash"));
	CU_ASSERT_FALSE(pol_key_filtered("app"));
	CU_ASSERT_FALSE(pol_key_filtered("app.kubernetes.io/name"));
	CU_ASSERT_FALSE(pol_key_filtered("io.kubernetes.pod.namespace"));
	CU_ASSERT_FALSE(pol_key_filtered(POL_NS_LABELS_PREFIX "kubernetes.io/metadata.name"));
	CU_ASSERT_FALSE(pol_key_filtered("container:pod-template-hash"));
	struct pol_policy **v = parse_ok(
		"{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\",\"namespace\":\"s\"},"
		"\"spec\":{\"podSelector\":{\"matchLabels\":{\"statefulset.kubernetes.io/pod-name\":\"web-0\"}},"
		"\"ingress\":[{\"from\":[{\"namespaceSelector\":{\"matchLabels\":"
		"{\"kubernetes.io/metadata.name\":\"s\"}}},{\"podSelector\":{\"matchLabels\":"
		"{\"app\":\"c\",\"pod-template-hash\":\"h1\"}}}]}]}}",
		1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(v[0]->warnings);
	CU_ASSERT_PTR_NOT_NULL(strstr(v[0]->warnings, "spec.ingress[0].from[1].podSelector: label "
						       "'pod-template-hash' is left out of identities"));
	CU_ASSERT_PTR_NOT_NULL(strstr(v[0]->warnings, "allows nothing (fail closed)"));
	CU_ASSERT_PTR_NULL(strchr(v[0]->warnings, '\n')); /* the one peer: the subject is fine */
	pol_policies_free(v, 1);
	v = parse_ok("{\"kind\":\"CiliumNetworkPolicy\",\"metadata\":{\"name\":\"c\",\"namespace\":\"s\"},"
		     "\"spec\":{\"endpointSelector\":{},\"ingressDeny\":[{\"fromEndpoints\":[{"
		     "\"matchExpressions\":[{\"key\":\"k8s:statefulset.kubernetes.io/pod-name\","
		     "\"operator\":\"NotIn\",\"values\":[\"web-0\"]}]}]}]}}",
		     1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(v[0]->warnings);
	CU_ASSERT_PTR_NOT_NULL(strstr(v[0]->warnings, "spec.ingressDeny[0].fromEndpoints[0]: "));
	CU_ASSERT_PTR_NOT_NULL(strstr(v[0]->warnings, "holds for every pod: it denies every pod"));
	pol_policies_free(v, 1);
	v = parse_ok("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"q\",\"namespace\":\"s\"},"
		     "\"spec\":{\"podSelector\":{\"matchLabels\":{\"pod-template-hash\":\"h\"}},"
		     "\"ingress\":[{\"from\":[{\"podSelector\":{\"matchLabels\":{\"app\":\"c\"}}}]}]}}",
		     1);
	CU_ASSERT_PTR_NULL(v[0]->warnings);
	pol_policies_free(v, 1);
}

static void test_yaml(void)
{
	struct pol_policy **v = parse_ok("apiVersion: networking.k8s.io/v1\n"
					 "kind: NetworkPolicy\n"
					 "metadata: {name: a, namespace: x}\n"
					 "spec:\n"
					 "  podSelector: {}\n"
					 "  ingress:\n"
					 "  - ports:\n"
					 "    - port: 80\n"
					 "      endPort: 90\n"
					 "---\n"
					 "kind: CiliumNetworkPolicy\n"
					 "metadata: {name: b}\n"
					 "spec:\n"
					 "  endpointSelector: {}\n"
					 "  ingress:\n"
					 "  - toPorts:\n"
					 "    - ports:\n"
					 "      - {port: \"81\", protocol: UDP}\n",
					 2);
	CU_ASSERT_EQUAL(v[0]->kind, POL_KIND_KNP);
	CU_ASSERT_EQUAL(v[0]->rules[0].peers[0].ports[0].end_port, 90);
	CU_ASSERT_EQUAL(v[1]->kind, POL_KIND_CNP);
	CU_ASSERT_EQUAL(v[1]->rules[0].peers[0].ports[0].port, 81);
	CU_ASSERT_EQUAL(v[1]->rules[0].peers[0].ports[0].proto, IPPROTO_UDP);
	pol_policies_free(v, 2);
	/* a quoted "80" stays a string: endPort must be a number */
	refused("kind: NetworkPolicy\nmetadata: {name: a}\nspec:\n  podSelector: {}\n"
		"  ingress: [{ports: [{port: 80, endPort: \"90\"}]}]\n",
		"policy 'a': spec.ingress[0].ports[0]: endPort must be a number");
	refused("kind: NetworkPolicy\nmetadata: {name: a\n", "not valid YAML (line");
}

static void test_refusals(void)
{
	refused("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"podSelector\":{},"
		"\"ingress\":[{\"from\":[{\"podSelector\":{\"matchExpressions\":[{\"key\":\"a\","
		"\"operator\":\"Near\"}]}}]}]}}",
		"policy 'p': spec.ingress[0].from[0].podSelector.matchExpressions[0]: operator 'Near'");
	refused("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"podSelector\":{},"
		"\"ingress\":[{\"from\":[{\"ipBlock\":{\"cidr\":\"10.0.0.0/8\"},\"podSelector\":{}}]}]}}",
		"ipBlock cannot be combined");
	refused("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"podSelector\":{},"
		"\"ingress\":[{\"ports\":[{\"port\":\"http\",\"endPort\":90}]}]}}",
		"endPort needs a numeric port");
	refused("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"podSelector\":{},"
		"\"ingress\":[{\"ports\":[{\"protocol\":\"ICMP\"}]}]}}",
		"protocol 'ICMP' is not TCP, UDP, SCTP");
	refused("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"podSelector\":{},"
		"\"policyTypes\":[\"Both\"]}}",
		"spec.policyTypes[0]: 'Both' is not Ingress or Egress");
	refused("{\"kind\":\"NetworkPolicy\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"podSelector\":{},"
		"\"ingress\":[{\"ports\":[{\"port\":\"Not_A_Name\"}]}]}}",
		"neither a number 0-65535 nor a port name");
	refused("{\"kind\":\"Service\",\"metadata\":{\"name\":\"p\"},\"spec\":{}}", "kind: 'Service'");
}

static void test_port_names(void)
{
	CU_ASSERT_TRUE(pol_port_name_ok("http"));
	CU_ASSERT_TRUE(pol_port_name_ok("serve-80-tcp"));
	CU_ASSERT_FALSE(pol_port_name_ok("80"));
	CU_ASSERT_FALSE(pol_port_name_ok("-http"));
	CU_ASSERT_FALSE(pol_port_name_ok("a--b"));
	CU_ASSERT_FALSE(pol_port_name_ok("abcdefghijklmnop")); /* 16 */
	CU_ASSERT_FALSE(pol_port_name_ok("Http"));
}

FIBRIL_TEST_MAIN("policy_parse", NULL, NULL, FIBRIL_TEST(test_knp_translation),
		 FIBRIL_TEST(test_knp_policy_types),
		 FIBRIL_TEST(test_knp_policy_types_defaulting), FIBRIL_TEST(test_yaml),
		 FIBRIL_TEST(test_refusals),
		 FIBRIL_TEST(test_filtered_label_warnings), FIBRIL_TEST(test_port_names))
