/* tests/unit/test_egw_policy.c - unit tests of the egress gateway's policy
 * parser and selector (modules/egressgw/egw_policy.c): every kind of bad
 * input is refused with one line naming the field; a good policy is read
 * whole and prints back to JSON that parses to the same policy; a
 * selector matches labels of any source, whole keys and values only, and
 * the namespace label when it names one. */
#include "cunit_main.h"
#include "egressgw.h"

#include <arpa/inet.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEL "\"selectors\":[{\"namespace\":\"default\",\"podSelector\":{\"matchLabels\":{\"app\":\"egw\"}}}]"
#define DST "\"destinationCIDRs\":[\"203.0.113.0/24\"]"
#define GW "\"egressGateways\":[{\"nodeName\":\"n2\",\"egressIP\":\"192.0.2.10\"}]"

static int parse(const char *text, struct egw_policy *p, char *why, size_t wl)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "t");
	why[0] = '\0';
	return egw_policy_parse(text, strlen(text), p, why, wl);
}

static void test_refusals_name_the_field(void)
{
	static const struct {
		const char *body, *named;
	} bad[] = {
		{"[]", "must be a JSON object"},
		{"{" SEL "," DST "," GW "} x", "not one JSON document"},
		{"{" SEL "," DST "}", "egressGateways: must be a non-empty list"},
		{"{" DST "," GW "}", "selectors: must be a non-empty list"},
		{"{" SEL "," GW "}", "destinationCIDRs: missing"},
		{"{" SEL ",\"destinationCIDRs\":[]," GW "}", "destinationCIDRs: must not be empty"},
		{"{" SEL ",\"destinationCIDRs\":[\"fd00::/8\"]," GW "}", "destinationCIDRs[0]: \"fd00::/8\" is IPv6"},
		{"{" SEL ",\"destinationCIDRs\":[\"10.1.2.3/8\"]," GW "}", "destinationCIDRs[0]: \"10.1.2.3/8\" has host bits set"},
		{"{" SEL ",\"destinationCIDRs\":[\"10.0.0.0/33\"]," GW "}", "destinationCIDRs[0]: \"10.0.0.0/33\": the prefix length"},
		{"{" SEL ",\"destinationCIDRs\":[\"10.0.0.0/+8\"]," GW "}", "the prefix length must be 0..32"},
		{"{" SEL ",\"destinationCIDRs\":[\"10.0.0.0\"]," GW "}", "has no prefix length"},
		{"{" SEL ",\"destinationCIDRs\":[7]," GW "}", "destinationCIDRs[0]: must be a string"},
		{"{" SEL "," DST ",\"excludedCIDRs\":\"10.0.0.0/8\"," GW "}", "excludedCIDRs: must be a list"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"nodeName\":\"n2\"}]}", "egressGateways[0].egressIP: missing"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"egressIP\":\"192.0.2.1\"}]}", "egressGateways[0].nodeName: missing"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"nodeName\":\"N2!\",\"egressIP\":\"192.0.2.1\"}]}",
		 "egressGateways[0].nodeName: must be a node name"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"nodeName\":\"n2\",\"egressIP\":\"0.0.0.0\"}]}",
		 "egressGateways[0].egressIP: 0.0.0.0 cannot be a source address"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"nodeName\":\"n2\",\"egressIP\":\"224.0.0.1\"}]}",
		 "cannot be a source address"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"nodeName\":\"n2\",\"egressIP\":\"192.0.2.1\",\"x\":1}]}",
		 "egressGateways[0].x: unknown field"},
		{"{" SEL "," DST ",\"egressGateways\":[{\"nodeName\":\"n2\",\"egressIP\":\"192.0.2.1\"},"
		 "{\"nodeName\":\"n2\",\"egressIP\":\"192.0.2.2\"}]}", "egressGateways[1].nodeName: n2 is listed twice"},
		{"{\"selectors\":[{}]," DST "," GW "}", "selectors[0].podSelector: missing"},
		{"{\"selectors\":[{\"podSelector\":{\"matchLabels\":{\"a\":1}}}]," DST "," GW "}",
		 "selectors[0].podSelector.matchLabels.a: must be a label value"},
		{"{\"selectors\":[{\"podSelector\":{\"matchLabels\":{\"a b\":\"c\"}}}]," DST "," GW "}",
		 "\"a b\" is not a label key"},
		{"{\"selectors\":[{\"podSelector\":{},\"nodeSelector\":{}}]," DST "," GW "}",
		 "selectors[0].nodeSelector: unknown field"},
		{"{" SEL "," DST "," GW ",\"egressGateway\":{}}", "egressGateway: unknown field"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct egw_policy p;
		char why[EGW_ERR_LEN];
		int rc = parse(bad[i].body, &p, why, sizeof(why));
		if (rc == 0 || !strstr(why, bad[i].named))
			fprintf(stderr, "case %zu: rc %d, why '%s', wanted '%s'\n", i, rc, why, bad[i].named);
		CU_ASSERT_EQUAL(rc, -EINVAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(why, bad[i].named));
		CU_ASSERT_PTR_NULL(strchr(why, '\n')); /* one line */
	}
}

static void test_limits(void)
{
	char body[8192];
	size_t n = (size_t)snprintf(body, sizeof(body), "{" SEL "," GW ",\"destinationCIDRs\":[");
	for (int i = 0; i <= EGW_MAX_CIDRS; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s\"10.%d.0.0/16\"", i ? "," : "", i);
	snprintf(body + n, sizeof(body) - n, "]}");
	struct egw_policy p;
	char why[EGW_ERR_LEN];
	CU_ASSERT_EQUAL(parse(body, &p, why, sizeof(why)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "destinationCIDRs: 33 CIDRs, at most 32"));
}

static void test_good_policy_round_trips(void)
{
	const char *text = "{\"selectors\":[{\"namespace\":\"prod\",\"podSelector\":{\"matchLabels\":"
			   "{\"app\":\"billing\",\"tier\":\"\"}}},{\"podSelector\":{}}],"
			   "\"destinationCIDRs\":[\"0.0.0.0/0\",\"203.0.113.0/24\"],"
			   "\"excludedCIDRs\":[\"203.0.113.7/32\"],\"egressGateways\":["
			   "{\"nodeName\":\"n2\",\"egressIP\":\"192.0.2.10\"},"
			   "{\"nodeName\":\"n3.example\",\"egressIP\":\"192.0.2.11\"}]}";
	struct egw_policy p, q;
	char why[EGW_ERR_LEN];
	CU_ASSERT_EQUAL_FATAL(parse(text, &p, why, sizeof(why)), 0);
	CU_ASSERT_EQUAL(p.n_sel, 2);
	CU_ASSERT_STRING_EQUAL(p.sel[0].ns, "prod");
	CU_ASSERT_EQUAL(p.sel[0].n_labels, 2);
	CU_ASSERT_EQUAL(p.n_dst, 2);
	CU_ASSERT_EQUAL(p.dst[0].len, 0);
	CU_ASSERT_EQUAL(p.n_excl, 1);
	CU_ASSERT_EQUAL(p.excl[0].len, 32);
	CU_ASSERT_EQUAL(p.n_gw, 2);
	CU_ASSERT_STRING_EQUAL(p.gw[1].node, "n3.example");
	struct json_object *o = egw_policy_json(&p);
	const char *back = json_object_to_json_string(o);
	CU_ASSERT_EQUAL(parse(back, &q, why, sizeof(why)), 0);
	CU_ASSERT_EQUAL(memcmp(&p, &q, sizeof(p)), 0);
	json_object_put(o);
}

static void test_selector(void)
{
	struct egw_policy p;
	char why[EGW_ERR_LEN];
	CU_ASSERT_EQUAL_FATAL(parse("{" SEL "," DST "," GW "}", &p, why, sizeof(why)), 0);
	CU_ASSERT(egw_policy_selects(&p, "k8s:app=egw\nk8s:io.kubernetes.pod.namespace=default"));
	CU_ASSERT(egw_policy_selects(&p, "k8s:io.kubernetes.pod.namespace=default\napp=egw"));
	CU_ASSERT(!egw_policy_selects(&p, "k8s:app=egw")); /* no namespace label */
	CU_ASSERT(!egw_policy_selects(&p, "k8s:app=egw\nk8s:io.kubernetes.pod.namespace=other"));
	CU_ASSERT(!egw_policy_selects(&p, "k8s:app=egw2\nk8s:io.kubernetes.pod.namespace=default"));
	CU_ASSERT(!egw_policy_selects(&p, "k8s:apps=egw\nk8s:io.kubernetes.pod.namespace=default"));
	CU_ASSERT(!egw_policy_selects(&p, "k8s:xapp=egw\nk8s:io.kubernetes.pod.namespace=defaults"));
	CU_ASSERT(!egw_policy_selects(&p, ""));
	CU_ASSERT(egw_name_valid("egw-1.prod"));
	CU_ASSERT(!egw_name_valid("Egw"));
	CU_ASSERT(!egw_name_valid("-egw"));
	CU_ASSERT(!egw_name_valid("egw/../x"));
	CU_ASSERT(!egw_name_valid(""));
}

FIBRIL_TEST_MAIN("egw_policy", NULL, NULL, FIBRIL_TEST(test_refusals_name_the_field),
		 FIBRIL_TEST(test_limits), FIBRIL_TEST(test_good_policy_round_trips),
		 FIBRIL_TEST(test_selector))
