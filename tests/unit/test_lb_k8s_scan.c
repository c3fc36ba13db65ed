/* tests/unit/test_lb_k8s_scan.c - unit tests of the lb module's in-place
 * EndpointSlice and Service readers (modules/lb/k8s_scan.c): every
 * Service it reads projects as json-c's path (k8s_svc_project) does, and
 * an invalid or odd one is left to that path; every slice it reads
 * projects to the very bytes json-c's path (k8s_slice_project) gives, with
 * the same kubernetes.io/service-name label; every text it does not read
 * (escapes in a field lb reads, a fraction, a field twice, a wrong type,
 * truncated, trailing text, a huge label) answers -1 with nothing
 * allocated, so the caller falls back to json-c; refused addresses are
 * left out and reported in json-c's order. */
#include "cunit_main.h"
#include "k8s_proj.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META "\"metadata\":{\"name\":\"s1\",\"namespace\":\"ns\",\"labels\":{\"kubernetes.io/service-name\":\"web\"}}"
#define EP(addr, cond, node) \
	"{\"addresses\":[" addr "],\"conditions\":{" cond "},\"nodeName\":\"" node "\"}"

/* json-c's path: the label and the projection (no refusals) */
static struct k8s_slice_proj *by_jsonc(const char *text, char *svc, size_t svc_len, bool *has)
{
	struct json_object *o = json_tokener_parse(text), *meta, *labels, *v;
	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	*has = json_object_object_get_ex(o, "metadata", &meta) &&
	       json_object_object_get_ex(meta, "labels", &labels) &&
	       json_object_object_get_ex(labels, "kubernetes.io/service-name", &v) &&
	       json_object_is_type(v, json_type_string);
	snprintf(svc, svc_len, "%s", *has ? json_object_get_string(v) : "");
	struct k8s_slice_proj *p = k8s_slice_project(o, "s1", "node-a");
	json_object_put(o);
	return p;
}

static void same_as_jsonc(const char *text)
{
	struct k8s_slice_scanned sc;
	int rc = k8s_slice_scan(text, strlen(text), "s1", "node-a", NULL, &sc);
	if (rc != 0)
		fprintf(stderr, "\nnot scanned: %s\n", text);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	char svc[300];
	bool has;
	struct k8s_slice_proj *want = by_jsonc(text, svc, sizeof(svc), &has);
	CU_ASSERT_PTR_NOT_NULL_FATAL(want);
	CU_ASSERT_PTR_NOT_NULL_FATAL(sc.proj);
	bool same = k8s_slice_proj_same(sc.proj, want);
	if (!same)
		fprintf(stderr, "\nprojections differ: %s\n", text);
	CU_ASSERT_TRUE(same);
	CU_ASSERT_EQUAL(sc.has_service, has);
	CU_ASSERT_STRING_EQUAL(sc.service, svc);
	CU_ASSERT_EQUAL(sc.nrefused, 0);
	free(want);
	free(sc.proj);
	free(sc.refused);
}

static void test_scanned_as_jsonc_reads(void)
{
	static const char *const texts[] = {
		/* as the API server writes them */
		"{\"kind\":\"EndpointSlice\",\"apiVersion\":\"discovery.k8s.io/v1\"," META ",\"addressType\":\"IPv4\","
		"\"endpoints\":[" EP("\"10.0.0.2\"", "\"ready\":true", "node-a") "," EP("\"10.1.0.2\"", "\"ready\":true", "node-b")
		"],\"ports\":[{\"name\":\"\",\"port\":80,\"protocol\":\"TCP\"}]}",
		/* fields in another order, white space, several ports and names */
		"{ \"ports\" : [ {\"port\":53,\"protocol\":\"UDP\",\"name\":\"dns\"}, {\"name\":\"dns-tcp\",\"port\":53} ,"
		"{\"port\":9,\"protocol\":\"SCTP\"},{\"port\":7,\"protocol\":\"ICMP\"}],\n\"endpoints\":[" EP("\"10.0.0.3\",\"10.0.0.4\"", "", "node-a")
		"], \"addressType\" : \"IPv4\" , " META " }",
		/* IPv6, states: serving and terminating, not ready, defaults */
		"{" META ",\"addressType\":\"IPv6\",\"endpoints\":["
		EP("\"fd00::1\"", "\"ready\":false,\"serving\":true,\"terminating\":true", "node-a") ","
		EP("\"fd00::2\"", "\"ready\":false", "node-b") ","
		EP("\"fd00::3\"", "\"ready\":false,\"serving\":false,\"terminating\":true", "node-a") ","
		EP("\"fd00::4\"", "\"terminating\":true", "node-a") ","
		EP("\"fd00::6\"", "\"ready\":false,\"terminating\":true", "node-a") ","
		EP("\"fd00::5\"", "\"serving\":null,\"ready\":null", "node-a") "],\"ports\":[{\"port\":443}]}",
		/* addresses of the other family, not IPs, too long; a FQDN slice */
		"{" META ",\"addressType\":\"IPv4\",\"endpoints\":[" EP("\"fd00::9\",\"web.example\",\"10.9.9.9\","
		"\"1234567890123456789012345678901234567890123456789012345678901234567890\"", "\"ready\":true", "n") "],\"ports\":[]}",
		"{" META ",\"addressType\":\"FQDN\",\"endpoints\":[" EP("\"web.example\"", "", "node-a") "],\"ports\":[{\"port\":80}]}",
		/* ports out of range, absent, null; a name longer than a DNS label */
		"{" META ",\"addressType\":\"IPv4\",\"endpoints\":[],\"ports\":[{\"port\":0},{\"port\":70000},{\"port\":-3},"
		"{\"protocol\":\"TCP\"},{\"port\":null},{\"port\":80,\"name\":"
		"\"a234567890123456789012345678901234567890123456789012345678901234\"}]}",
		/* null and absent lists, no label, no metadata; unread fields with escapes and fractions */
		"{\"metadata\":{\"name\":\"s1\",\"annotations\":{\"x\":\"{\\\"a\\\":\\\"\\u00e9\\\\n\\\"}\"},\"generation\":1.5e3},"
		"\"addressType\":\"IPv4\",\"endpoints\":null,\"ports\":null}",
		"{\"addressType\":\"IPv4\"}",
		"{\"metadata\":null,\"endpoints\":[{\"addresses\":null,\"conditions\":null,\"nodeName\":null,"
		"\"zone\":\"z\\\"1\",\"hints\":{\"forZones\":[{\"name\":\"a\"}]}}],\"addressType\":\"IPv4\"}",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		same_as_jsonc(texts[i]);
}

static void test_hostile_texts_are_not_scanned(void)
{
	char huge[2048];
	int n = snprintf(huge, sizeof(huge), "{\"metadata\":{\"labels\":{\"kubernetes.io/service-name\":\"");
	memset(huge + n, 'a', 600);
	snprintf(huge + n + 600, sizeof(huge) - (size_t)n - 600, "\"}},\"addressType\":\"IPv4\"}");
	const char *const texts[] = {
		"", "[]", "null", "{", "{\"addressType\":\"IPv4\"", "{\"addressType\":\"IPv4\"} x",
		"{\"addressType\":\"IPv4\",}", "{\"addressType\":IPv4}",
		/* escapes or control bytes in a field lb reads */
		"{\"addressType\":\"IPv\\u0034\"}",
		"{\"metadata\":{\"labels\":{\"kubernetes.io/service-name\":\"w\\u0000eb\"}}}",
		"{\"endpoints\":[{\"addresses\":[\"10.0.0.\\u0032\"]}],\"addressType\":\"IPv4\"}",
		/* a field twice (json-c keeps the last) */
		"{\"addressType\":\"IPv6\",\"addressType\":\"IPv4\"}",
		"{\"ports\":[{\"port\":80,\"port\":81}]}",
		/* wrong types */
		"{\"ports\":{\"port\":80}}", "{\"ports\":[80]}", "{\"ports\":[{\"port\":\"80\"}]}",
		"{\"ports\":[{\"port\":80.0}]}", "{\"ports\":[{\"port\":8e1}]}", "{\"ports\":[{\"port\":true}]}",
		"{\"ports\":[{\"port\":80,\"protocol\":6}]}", "{\"addressType\":4}",
		"{\"endpoints\":[7],\"addressType\":\"IPv4\"}",
		"{\"endpoints\":[{\"addresses\":[10]}],\"addressType\":\"IPv4\"}",
		"{\"endpoints\":[{\"addresses\":\"10.0.0.1\"}],\"addressType\":\"IPv4\"}",
		"{\"endpoints\":[{\"conditions\":{\"ready\":\"yes\"}}],\"addressType\":\"IPv4\"}",
		"{\"endpoints\":[{\"conditions\":[]}],\"addressType\":\"IPv4\"}",
		"{\"metadata\":{\"labels\":[]}}", "{\"metadata\":{\"labels\":{\"kubernetes.io/service-name\":1}}}",
		/* a number json-c reads, not the scanner: too long, a leading zero */
		"{\"ports\":[{\"port\":0080}]}", "{\"ports\":[{\"port\":1234567890123456789012}]}",
		/* unread fields that are not JSON */
		"{\"x\":\"\\q\",\"addressType\":\"IPv4\"}", "{\"x\":01,\"addressType\":\"IPv4\"}",
		"{\"x\":1.,\"addressType\":\"IPv4\"}", "{\"x\":\"\\u12\",\"addressType\":\"IPv4\"}",
		"{\"x\":tru,\"addressType\":\"IPv4\"}",
		huge,
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct k8s_slice_scanned sc;
		memset(&sc, 0x5a, sizeof(sc));
		int rc = k8s_slice_scan(texts[i], strlen(texts[i]), "s1", "node-a", NULL, &sc);
		if (rc != -1)
			fprintf(stderr, "\nscanned, not refused: %s\n", texts[i]);
		CU_ASSERT_EQUAL(rc, -1);
		CU_ASSERT_PTR_NULL(sc.proj);
		CU_ASSERT_PTR_NULL(sc.refused);
		CU_ASSERT_EQUAL(sc.nrefused, 0);
	}
	/* the same truncated at every byte: never read past its end */
	const char *full = "{" META ",\"addressType\":\"IPv4\",\"endpoints\":[" EP("\"10.0.0.2\"", "\"ready\":true", "node-a")
			   "],\"ports\":[{\"name\":\"http\",\"port\":80,\"protocol\":\"TCP\"}]}";
	size_t len = strlen(full);
	for (size_t cut = 0; cut < len; cut++) {
		char *copy = malloc(cut ? cut : 1); /* exactly cut bytes, no terminator */
		CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
		memcpy(copy, full, cut);
		struct k8s_slice_scanned sc;
		CU_ASSERT_EQUAL(k8s_slice_scan(copy, cut, "s1", "node-a", NULL, &sc), -1);
		CU_ASSERT_PTR_NULL(sc.proj);
		free(copy);
	}
}

static const char *refuse_loopback_linklocal(const struct lb_addr *a, void *ud)
{
	(*(int *)ud)++;
	if (!lb_addr_is_v4(a))
		return NULL;
	return a->a[12] == 127 ? "loopback" : a->a[12] == 169 && a->a[13] == 254 ? "link-local" : NULL;
}

static void test_refused_addresses_left_out_and_reported(void)
{
	const char *text = "{" META ",\"addressType\":\"IPv4\",\"endpoints\":["
			   EP("\"127.0.0.1\",\"10.0.0.2\",\"169.254.169.254\"", "", "node-a") ","
			   EP("\"127.0.0.2\",\"fd00::1\"", "", "node-b") "],\"ports\":[{\"port\":80}]}";
	int calls = 0;
	struct k8s_refuser rf = {refuse_loopback_linklocal, &calls};
	struct k8s_slice_scanned sc;
	CU_ASSERT_EQUAL_FATAL(k8s_slice_scan(text, strlen(text), "s1", "node-a", &rf, &sc), 0);
	CU_ASSERT_EQUAL(calls, 5);
	CU_ASSERT_EQUAL_FATAL(sc.nrefused, 3);
	/* json-c's path walks each endpoint's addresses last first */
	CU_ASSERT_STRING_EQUAL(sc.refused[0].text, "169.254.169.254");
	CU_ASSERT_STRING_EQUAL(sc.refused[0].why, "link-local");
	CU_ASSERT_STRING_EQUAL(sc.refused[1].text, "127.0.0.1");
	CU_ASSERT_STRING_EQUAL(sc.refused[2].text, "127.0.0.2");
	CU_ASSERT_EQUAL_FATAL(sc.proj->neps, 1);
	const struct k8s_ep *ep = k8s_slice_eps(sc.proj);
	CU_ASSERT_EQUAL(ep[0].addr.a[15], 2);
	CU_ASSERT_EQUAL(ep[0].local, 1);
	CU_ASSERT_EQUAL(ep[0].state, LB_BE_ACTIVE);
	CU_ASSERT_STRING_EQUAL(sc.service, "web");
	free(sc.proj);
	free(sc.refused);
}

/* ---- Services ---- */

static void svc_same_as_jsonc(const char *text)
{
	struct k8s_svc_proj *got;
	int rc = k8s_svc_scan(text, strlen(text), &got);
	if (rc != 0)
		fprintf(stderr, "\nservice not scanned: %s\n", text);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	struct json_object *o = json_tokener_parse(text);
	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	bool no_spec;
	struct k8s_svc_proj *want = k8s_svc_project(o, &no_spec);
	json_object_put(o);
	CU_ASSERT_PTR_NOT_NULL_FATAL(want);
	CU_ASSERT_FALSE(want->invalid);
	bool same = k8s_svc_proj_same(got, want);
	if (!same)
		fprintf(stderr, "\nservice projections differ: %s\n", text);
	CU_ASSERT_TRUE(same);
	free(got);
	free(want);
}

#define SVC_META "\"kind\":\"Service\",\"metadata\":{\"name\":\"web\",\"namespace\":\"ns\",\"annotations\":{\"a\":\"{\\\"x\\\":1.5}\"}}"

static void test_services_scanned_as_jsonc_reads(void)
{
	static const char *const texts[] = {
		/* as the test API server writes them */
		"{" SVC_META ",\"spec\":{\"selector\":{\"app\":\"a\"},\"ports\":[{\"port\":80,\"protocol\":\"TCP\","
		"\"targetPort\":80}],\"type\":\"ClusterIP\",\"clusterIP\":\"10.96.0.10\",\"clusterIPs\":[\"10.96.0.10\"],"
		"\"ipFamilies\":[\"IPv4\"],\"sessionAffinity\":\"None\"},\"status\":{\"loadBalancer\":{}}}",
		/* clusterIP only (no clusterIPs); dual stack; NodePort, LoadBalancer, policies, affinity */
		"{\"spec\":{\"ports\":[{\"port\":53,\"protocol\":\"UDP\",\"name\":\"dns\",\"nodePort\":30053},"
		"{\"port\":53,\"name\":\"dns-tcp\",\"nodePort\":70000}],\"clusterIP\":\"10.96.0.11\",\"type\":\"NodePort\"}}",
		"{\"spec\":{\"ports\":[{\"port\":443,\"protocol\":\"SCTP\",\"nodePort\":null}],\"clusterIPs\":[\"10.96.0.12\",\"fd00::12\"],"
		"\"ipFamilies\":[\"IPv4\",\"IPv6\"],\"type\":\"LoadBalancer\",\"externalTrafficPolicy\":\"Local\","
		"\"internalTrafficPolicy\":\"Local\",\"externalIPs\":[\"192.0.2.1\",\"2001:db8::1\"],"
		"\"loadBalancerSourceRanges\":[\"10.0.0.0/8\",\"2001:db8::/32\"],\"sessionAffinity\":\"ClientIP\","
		"\"sessionAffinityConfig\":{\"clientIP\":{\"timeoutSeconds\":60}}},"
		"\"status\":{\"loadBalancer\":{\"ingress\":[{\"ip\":\"198.51.100.7\"},{\"hostname\":\"lb.example\"},{\"ip\":\"x\"}]}}}",
		/* headless, no families (both), affinity timeouts out of range, nulls */
		"{\"spec\":{\"ports\":[],\"clusterIPs\":[\"None\"],\"sessionAffinityConfig\":{\"clientIP\":{\"timeoutSeconds\":0}}}}",
		"{\"spec\":{\"ports\":[{\"port\":1}],\"clusterIP\":\"garbage\",\"sessionAffinityConfig\":{\"clientIP\":{\"timeoutSeconds\":999999}}}}",
		"{\"spec\":{\"ports\":[{\"port\":65535,\"name\":null,\"protocol\":null}],\"clusterIPs\":null,\"clusterIP\":null,"
		"\"externalIPs\":null,\"loadBalancerSourceRanges\":null,\"ipFamilies\":null,\"type\":null,"
		"\"sessionAffinityConfig\":null},\"status\":null}",
		"{\"spec\":{\"ports\":[{\"port\":8080}],\"clusterIPs\":[\"fd00::20\"]},\"status\":{\"loadBalancer\":{\"ingress\":null}}}",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		svc_same_as_jsonc(texts[i]);
}

/* Not read in place: json-c's path reads them (and words why an invalid
 * one is refused) */
static void test_services_left_to_jsonc(void)
{
	static const char *const texts[] = {
		"", "{", "[]", "{\"spec\":{\"ports\":[]}} x", "{\"metadata\":{}}", "{\"spec\":null}", "{\"spec\":[]}",
		"{\"spec\":{}}", "{\"spec\":{\"ports\":{}}}", "{\"spec\":{\"ports\":[{}]}}",
		/* invalid: json-c's path says why */
		"{\"spec\":{\"ports\":[{\"port\":0}]}}", "{\"spec\":{\"ports\":[{\"port\":65536}]}}",
		"{\"spec\":{\"ports\":[{\"port\":80,\"protocol\":\"ICMP\"}]}}",
		"{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"a234567890123456789012345678901234567890123456789012345678901234\"}]}}",
		"{\"spec\":{\"ports\":[],\"clusterIPs\":[\"10.96.0.300\"]}}", "{\"spec\":{\"ports\":[],\"externalIPs\":[\"\"]}}",
		"{\"spec\":{\"ports\":[],\"loadBalancerSourceRanges\":[\"10.0.0.0\"]}}",
		/* escapes, fractions, strings for numbers, a field twice, wrong types */
		"{\"spec\":{\"ports\":[{\"port\":80}],\"type\":\"Node\\u0050ort\"}}",
		"{\"spec\":{\"ports\":[{\"port\":80.0}]}}", "{\"spec\":{\"ports\":[{\"port\":\"80\"}]}}",
		"{\"spec\":{\"ports\":[{\"port\":80,\"nodePort\":\"30000\"}]}}",
		"{\"spec\":{\"ports\":[{\"port\":80,\"port\":81}]}}", "{\"spec\":{\"ports\":[]},\"spec\":{\"ports\":[]}}",
		"{\"spec\":{\"ports\":[],\"type\":1}}", "{\"spec\":{\"ports\":[],\"clusterIPs\":\"10.96.0.1\"}}",
		"{\"spec\":{\"ports\":[],\"clusterIP\":7}}", "{\"spec\":{\"ports\":[],\"ipFamilies\":[4]}}",
		"{\"spec\":{\"ports\":[],\"sessionAffinityConfig\":{\"clientIP\":{\"timeoutSeconds\":\"60\"}}}}",
		"{\"spec\":{\"ports\":[]},\"status\":{\"loadBalancer\":{\"ingress\":[\"1.2.3.4\"]}}}",
		"{\"spec\":{\"ports\":[]},\"status\":[]}",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct k8s_svc_proj *p = (struct k8s_svc_proj *)(uintptr_t)1;
		int rc = k8s_svc_scan(texts[i], strlen(texts[i]), &p);
		if (rc != -1)
			fprintf(stderr, "\nservice scanned, not refused: %s\n", texts[i]);
		CU_ASSERT_EQUAL(rc, -1);
		CU_ASSERT_PTR_NULL(p);
	}
	const char *full = "{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"http\"}],\"clusterIPs\":[\"10.96.0.1\"]}}";
	for (size_t cut = 0; cut < strlen(full); cut++) {
		char *copy = malloc(cut ? cut : 1);
		CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
		memcpy(copy, full, cut);
		struct k8s_svc_proj *p;
		CU_ASSERT_EQUAL(k8s_svc_scan(copy, cut, &p), -1);
		CU_ASSERT_PTR_NULL(p);
		free(copy);
	}
}

/* an object's name and namespace, for the informer's cache listed at the sync */
static void test_meta_names(void)
{
	char ns[32], name[32];
	const char *ok = "{\"kind\":\"Service\",\"metadata\":{\"labels\":{\"a\":\"\\\"\"},\"namespace\":\"ns-1\",\"name\":\"web\"},\"spec\":{}}";
	CU_ASSERT_TRUE_FATAL(k8s_meta_scan(ok, strlen(ok), ns, sizeof(ns), name, sizeof(name)));
	CU_ASSERT_STRING_EQUAL(ns, "ns-1");
	CU_ASSERT_STRING_EQUAL(name, "web");
	const char *cluster = "{\"metadata\":{\"name\":\"n\",\"namespace\":null}}";
	CU_ASSERT_TRUE_FATAL(k8s_meta_scan(cluster, strlen(cluster), ns, sizeof(ns), name, sizeof(name)));
	CU_ASSERT_STRING_EQUAL(ns, "");
	static const char *const bad[] = {
		"{\"metadata\":{}}", "{\"metadata\":{\"name\":\"w\\u0065b\"}}", "{\"metadata\":{\"name\":1}}",
		"{\"metadata\":{\"name\":\"a\",\"name\":\"b\"}}", "{\"metadata\":[]}", "{\"metadata\":{\"name\":\"a\"}",
		"{\"metadata\":{\"name\":\"0123456789012345678901234567890123456789\"}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CU_ASSERT_FALSE(k8s_meta_scan(bad[i], strlen(bad[i]), ns, sizeof(ns), name, sizeof(name)));
}

FIBRIL_TEST_MAIN("lb_k8s_scan", NULL, NULL, FIBRIL_TEST(test_meta_names), FIBRIL_TEST(test_scanned_as_jsonc_reads),
		 FIBRIL_TEST(test_services_scanned_as_jsonc_reads), FIBRIL_TEST(test_services_left_to_jsonc),
		 FIBRIL_TEST(test_hostile_texts_are_not_scanned),
		 FIBRIL_TEST(test_refused_addresses_left_out_and_reported))
