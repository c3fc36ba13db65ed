/* tests/unit/test_flow_json.c - unit tests of hubble-lite's JSON plumbing
 * (modules/hubble-lite/flow_json.c): hl_buf_printf's own formatter writes
 * exactly what vsnprintf would for the formats it takes (strings, integers
 * of every length with a zero-padded width, %%) and hands the others to
 * vsnprintf; a flow's addresses read as inet_ntop writes them, and the
 * whole JSON of a flow parses with json-c; the lb module's service events
 * (modules/hubble-lite/services.c) are read by their backends' element
 * size, whatever SDK the publisher was built against; a flow in Hubble's
 * JSON (modules/hubble-lite/flow_hubble.c): a deny rule's drop names the
 * rule under ingress_denied_by with POLICY_DENY, an allowed policy
 * verdict its rule under egress_allowed_by, protojson's time and enums. */
#include "cunit_main.h"
#include "hubble.h"

#include <fibril/lb.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAME(fmt, ...)                                                                   \
	do {                                                                             \
		struct hl_buf b = {0};                                                   \
		char want[512];                                                          \
		hl_buf_printf(&b, fmt, __VA_ARGS__);                                     \
		snprintf(want, sizeof(want), fmt, __VA_ARGS__);                          \
		CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);                                       \
		if (strcmp(b.p, want))                                                   \
			fprintf(stderr, "'%s': got '%s', want '%s'\n", fmt, b.p, want);  \
		CU_ASSERT_STRING_EQUAL(b.p, want);                                       \
		CU_ASSERT_EQUAL(b.len, strlen(want));                                    \
		free(b.p);                                                               \
	} while (0)

static void test_printf_like_vsnprintf(void)
{
	SAME("%s", "plain");
	SAME("a%sb%sc", "", "x\"y");
	SAME("%u/%d/%i", 0u, -1, 2147483647);
	SAME("%d", (int)-2147483647 - 1);
	SAME("%lu %ld %llu %lld", 18446744073709551615UL, -9223372036854775807L - 1,
	     12345678901234567890ULL, -5LL);
	SAME("%" PRIu64 ",%" PRIu32 ",%" PRIu16, (uint64_t)1 << 63, (uint32_t)4000000000u,
	     (uint16_t)65535);
	SAME("%zu %hu", (size_t)42, (unsigned short)7);
	SAME("\"%s.%09lluZ\"", "2026-11-25T07:40:01", 1234ULL);
	SAME("%09llu|%3u|%05d", 999999999ULL, 7u, -42);
	SAME("100%% %s", "sure");
	SAME("no directive at all%s", "");
	/* not its own: through vsnprintf */
	SAME("%x %.2f %c %-4s|", 255u, 1.5, 'z', "ab");
}

static void test_flow_addresses(void)
{
	static const uint8_t v4[][4] = {{0, 0, 0, 0}, {10, 244, 12, 9}, {100, 99, 1, 255},
					{255, 255, 255, 255}, {192, 168, 0, 10}};
	for (size_t i = 0; i < sizeof(v4) / sizeof(v4[0]); i++) {
		struct hl_flow f = {.seq = 1, .type = HL_TYPE_TRACE, .verdict = HL_FORWARDED,
				    .family = 4, .proto = 17, .len = 64};
		memcpy(f.src.addr, v4[i], 4);
		memcpy(f.dst.addr, v4[(i + 1) % 5], 4);
		f.src.port = 1234;
		f.dst.port = 7000;
		struct hl_buf b = {0};
		hl_flow_json(&b, &f, "node-1");
		CU_ASSERT_FALSE_FATAL(b.failed);
		struct json_object *o = json_tokener_parse(b.p);
		CU_ASSERT_PTR_NOT_NULL_FATAL(o);
		struct json_object *ip, *src, *dst, *l4, *port;
		CU_ASSERT_TRUE_FATAL(json_object_object_get_ex(o, "IP", &ip));
		CU_ASSERT_TRUE_FATAL(json_object_object_get_ex(ip, "source", &src));
		CU_ASSERT_TRUE_FATAL(json_object_object_get_ex(ip, "destination", &dst));
		char want[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, f.src.addr, want, sizeof(want));
		CU_ASSERT_STRING_EQUAL(json_object_get_string(src), want);
		inet_ntop(AF_INET, f.dst.addr, want, sizeof(want));
		CU_ASSERT_STRING_EQUAL(json_object_get_string(dst), want);
		CU_ASSERT_TRUE_FATAL(json_object_object_get_ex(o, "l4", &l4));
		CU_ASSERT_TRUE_FATAL(json_object_object_get_ex(l4, "destination_port", &port));
		CU_ASSERT_EQUAL(json_object_get_int(port), 7000);
		json_object_put(o);
		free(b.p);
	}
	/* IPv6 still through inet_ntop */
	struct hl_flow f = {.seq = 2, .type = HL_TYPE_DROP, .verdict = HL_DROPPED, .family = 6,
			    .proto = 58};
	inet_pton(AF_INET6, "fd00::1", f.src.addr);
	inet_pton(AF_INET6, "fd00::2:0:0:3", f.dst.addr);
	struct hl_buf b = {0};
	hl_flow_json(&b, &f, "node-1");
	CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\"source\":\"fd00::1\",\"destination\":\"fd00::2:0:0:3\""));
	free(b.p);
}

/* An lb.service event with three backends laid out `stride` bytes apart;
 * `hdr_sz` is the event's sz (a 1.8 publisher's ends before backend_sz). */
static size_t lb_event(uint8_t *buf, size_t cap, uint16_t id, uint32_t hdr_sz, uint32_t stride,
		       uint32_t backend_sz)
{
	struct fibril_lb_service_event ev = {.sz = hdr_sz, .op = FIBRIL_LB_SERVICE_UPSERTED,
					     .id = id, .port = 80, .proto = 6};
	memcpy(ev.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\x60\x00", 15);
	ev.addr[15] = (uint8_t)id;
	snprintf(ev.namespace_, sizeof(ev.namespace_), "ns");
	snprintf(ev.name, sizeof(ev.name), "svc%u", id);
	ev.nbackends = 3;
	ev.backends = hdr_sz;
	ev.backend_sz = backend_sz;
	size_t len = hdr_sz + 3 * (size_t)stride;
	CU_ASSERT_FATAL(len <= cap);
	memset(buf, 0, cap);
	memcpy(buf, &ev, hdr_sz < sizeof(ev) ? hdr_sz : sizeof(ev));
	for (int i = 0; i < 3; i++) {
		struct fibril_lb_backend_addr b = {.port = (uint16_t)(8000 + i)};
		memcpy(b.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\x61\x00", 15);
		b.addr[15] = (uint8_t)(id * 10 + i);
		uint8_t *at = buf + hdr_sz + (size_t)i * stride;
		memcpy(at, &b, sizeof(b) < stride ? sizeof(b) : stride);
		for (size_t k = sizeof(b); k < stride; k++)
			at[k] = 0xee; /* a newer SDK's fields: ignored */
	}
	return len;
}

static void test_lb_service_backend_stride(void)
{
	uint8_t buf[1024];
	struct hl_svcmap *m = hl_svcmap_new();
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);
	const uint32_t full = sizeof(struct fibril_lb_service_event);
	const uint32_t v18 = offsetof(struct fibril_lb_service_event, backend_sz);
	/* 1: this SDK; 2: a 1.8 publisher (no backend_sz, 20-byte elements);
	 * 3: a newer SDK whose backend grew by 12 bytes */
	size_t len = lb_event(buf, sizeof(buf), 1, full, sizeof(struct fibril_lb_backend_addr),
			      sizeof(struct fibril_lb_backend_addr));
	CU_ASSERT_EQUAL(hl_svcmap_apply(m, buf, len), 0);
	len = lb_event(buf, sizeof(buf), 2, v18, FIBRIL_LB_BACKEND_ADDR_SZ_V1, 0);
	CU_ASSERT_EQUAL(hl_svcmap_apply(m, buf, len), 0);
	len = lb_event(buf, sizeof(buf), 3, full, sizeof(struct fibril_lb_backend_addr) + 12,
		       sizeof(struct fibril_lb_backend_addr) + 12);
	CU_ASSERT_EQUAL(hl_svcmap_apply(m, buf, len), 0);
	for (unsigned id = 1; id <= 3; id++) {
		for (unsigned i = 0; i < 3; i++) {
			uint8_t a[4] = {10, 97, 0, (uint8_t)(id * 10 + i)};
			const struct hl_service *s = hl_svcmap_lookup(m, 4, a, (uint16_t)(8000 + i), 6);
			if (!s)
				fprintf(stderr, "service %u: backend %u not found\n", id, i);
			CU_ASSERT_PTR_NOT_NULL(s);
		}
	}
	/* the element size is checked against the payload: 3 elements of 64
	 * bytes do not fit in what is there */
	len = lb_event(buf, sizeof(buf), 4, full, sizeof(struct fibril_lb_backend_addr), 64);
	CU_ASSERT_EQUAL(hl_svcmap_apply(m, buf, len), -EINVAL);
	/* an element shorter than the first version's is refused */
	len = lb_event(buf, sizeof(buf), 5, full, 8, 8);
	CU_ASSERT_EQUAL(hl_svcmap_apply(m, buf, len), -EINVAL);
	hl_svcmap_free(m);
}

static struct json_object *hubble_json_of(const struct hl_flow *f)
{
	static const uint64_t seed[2] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
	struct hl_buf b = {0};
	hl_flow_hubble_json(&b, f, "node-1", seed);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
	struct json_object *o = json_tokener_parse(b.p);
	if (!o)
		fprintf(stderr, "not JSON: %s\n", b.p);
	free(b.p);
	return o;
}

static const char *path_str(struct json_object *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", path);
	char *save = NULL;
	for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
		struct json_object *v = NULL;
		if (json_object_is_type(o, json_type_array))
			v = json_object_array_get_idx(o, (size_t)atoi(k));
		else if (!json_object_object_get_ex(o, k, &v))
			v = NULL;
		o = v;
	}
	return o ? json_object_get_string(o) : NULL;
}

#define HAS(o, path, want)                                                                 \
	do {                                                                               \
		const char *got_ = path_str((o), (path));                                  \
		if (!got_ || strcmp(got_, (want)))                                         \
			fprintf(stderr, "%s: got %s, want %s\n", (path), got_ ? got_ : "(none)", \
				(want));                                                   \
		CU_ASSERT(got_ && !strcmp(got_, (want)));                                   \
	} while (0)

static void test_hubble_json(void)
{
	struct hl_flow f = {0};
	f.seq = 7;
	f.time_ns = 1795000000ULL * 1000000000ULL + 123000000ULL; /* .123: 3 digits */
	f.type = HL_TYPE_DROP;
	f.verdict = HL_DROPPED;
	f.direction = 1;
	f.family = 4;
	f.proto = 6;
	f.tcp_flags = 0x02; /* SYN */
	snprintf(f.reason_name, sizeof(f.reason_name), "policy-denied");
	f.src = (struct hl_peer){.ep_id = 3, .identity = 300, .port = 41000, .addr = {10, 0, 0, 2}};
	f.dst = (struct hl_peer){.ep_id = 4, .identity = 400, .port = 80, .addr = {10, 0, 0, 3}};
	snprintf(f.dst.ns, sizeof(f.dst.ns), "team");
	snprintf(f.dst.pod, sizeof(f.dst.pod), "web");
	snprintf(f.dst.labels, sizeof(f.dst.labels), "k8s:app=web\nk8s:tier=front");
	f.policy = (struct hl_policy){.match = HL_POLICY_DENY, .ingress = true, .known = true,
				      .rule_id = 9};
	snprintf(f.policy.kind, sizeof(f.policy.kind), "CiliumNetworkPolicy");
	snprintf(f.policy.ns, sizeof(f.policy.ns), "team");
	snprintf(f.policy.name, sizeof(f.policy.name), "deny-b");
	struct json_object *o = hubble_json_of(&f);
	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	HAS(o, "node_name", "node-1");
	HAS(o, "time", "2026-11-18T11:06:40.123Z");
	HAS(o, "flow.time", "2026-11-18T11:06:40.123Z");
	HAS(o, "flow.verdict", "DROPPED");
	HAS(o, "flow.drop_reason_desc", "POLICY_DENY");
	HAS(o, "flow.drop_reason", "181");
	HAS(o, "flow.event_type.type", "1");
	HAS(o, "flow.event_type.sub_type", "181");
	HAS(o, "flow.l4.TCP.source_port", "41000");
	HAS(o, "flow.l4.TCP.flags.SYN", "true");
	HAS(o, "flow.IP.ipVersion", "IPv4");
	HAS(o, "flow.source.identity", "300");
	HAS(o, "flow.source.ID", "3");
	HAS(o, "flow.destination.pod_name", "web");
	HAS(o, "flow.destination.labels.1", "k8s:tier=front");
	HAS(o, "flow.traffic_direction", "INGRESS");
	HAS(o, "flow.is_reply", "false");
	HAS(o, "flow.Type", "L3_L4");
	HAS(o, "flow.Summary", "TCP Flags: SYN");
	HAS(o, "flow.ingress_denied_by.0.name", "deny-b");
	HAS(o, "flow.ingress_denied_by.0.namespace", "team");
	HAS(o, "flow.ingress_denied_by.0.kind", "CiliumNetworkPolicy");
	HAS(o, "flow.ingress_denied_by.0.labels.1", "k8s:io.cilium.k8s.policy.name=deny-b");
	CU_ASSERT_PTR_NULL(path_str(o, "flow.source.pod_name")); /* empty: left out */
	CU_ASSERT_PTR_NULL(path_str(o, "flow.trace_observation_point"));
	const char *uuid = path_str(o, "flow.uuid");
	CU_ASSERT(uuid && strlen(uuid) == 36 && uuid[14] == '4');
	char first_uuid[40];
	snprintf(first_uuid, sizeof(first_uuid), "%s", uuid ? uuid : "");
	json_object_put(o);
	/* the same flow read again: the same UUID; another: another */
	o = hubble_json_of(&f);
	HAS(o, "flow.uuid", first_uuid);
	json_object_put(o);
	f.seq = 8;
	o = hubble_json_of(&f);
	CU_ASSERT(strcmp(path_str(o, "flow.uuid"), first_uuid) != 0);
	json_object_put(o);

	/* an allowed policy verdict at the sender's egress; ICMP; 9 digits */
	f.type = HL_TYPE_POLICY;
	f.verdict = HL_FORWARDED;
	f.proto = 1;
	f.time_ns += 456789;
	snprintf(f.reason_name, sizeof(f.reason_name), "policy-allowed");
	f.policy.match = HL_POLICY_ALLOW;
	f.policy.ingress = false;
	o = hubble_json_of(&f);
	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	HAS(o, "flow.time", "2026-11-18T11:06:40.123456789Z");
	HAS(o, "flow.verdict", "FORWARDED");
	HAS(o, "flow.event_type.type", "5");
	HAS(o, "flow.egress_allowed_by.0.name", "deny-b");
	HAS(o, "flow.traffic_direction", "EGRESS");
	HAS(o, "flow.Summary", "ICMPv4");
	CU_ASSERT_PTR_NOT_NULL(path_str(o, "flow.l4.ICMPv4"));
	CU_ASSERT_PTR_NULL(path_str(o, "flow.drop_reason_desc"));
	json_object_put(o);

	/* a trace to the stack: its observation point and sub-type */
	f.type = HL_TYPE_TRACE;
	f.policy.match = HL_POLICY_NONE;
	f.proto = 17;
	snprintf(f.reason_name, sizeof(f.reason_name), "to-stack");
	o = hubble_json_of(&f);
	HAS(o, "flow.trace_observation_point", "TO_STACK");
	HAS(o, "flow.event_type.sub_type", "3");
	HAS(o, "flow.l4.UDP.destination_port", "80");
	CU_ASSERT_PTR_NULL(path_str(o, "flow.is_reply"));
	json_object_put(o);
}

static void test_drop_reason_names(void)
{
	CU_ASSERT_EQUAL(hl_drop_reason_by_hubble_name("POLICY_DENIED"), 133);
	CU_ASSERT_EQUAL(hl_drop_reason_by_hubble_name("policy_denied"), 133);
	CU_ASSERT_EQUAL(hl_drop_reason_by_hubble_name("NO_SUCH_REASON"), -1);
	CU_ASSERT_EQUAL(hl_drop_reason_hubble("spoofed-source-ip", 0), 132);
	CU_ASSERT_EQUAL(hl_drop_reason_hubble("no-such", 0), 0);
	/* the egress gateway's and masquerading's drops in Cilium's words */
	CU_ASSERT_EQUAL(hl_drop_reason_hubble("egress-gateway-none-alive", 0), 194);
	CU_ASSERT_EQUAL(hl_drop_reason_hubble("egress-gateway-relay", 0), 132);
	CU_ASSERT_EQUAL(hl_drop_reason_hubble("masquerade-no-port", 0), 167);
	struct hl_filter flt;
	char err[HL_ERR_LEN];
	hl_filter_init(&flt);
	CU_ASSERT_EQUAL(hl_filter_set(&flt, "drop-reason", "foo", 0, err, sizeof(err)), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "'foo'"));
	CU_ASSERT_EQUAL(hl_filter_set(&flt, "drop-reason", "POLICY_DENIED", 0, err, sizeof(err)), 0);
	struct hl_flow fl = {.verdict = HL_DROPPED, .type = HL_TYPE_DROP, .family = 4};
	snprintf(fl.reason_name, sizeof(fl.reason_name), "policy-denied");
	CU_ASSERT(hl_filter_match(&flt, &fl));
	snprintf(fl.reason_name, sizeof(fl.reason_name), "spoofed-source-ip");
	CU_ASSERT(!hl_filter_match(&flt, &fl));
}

FIBRIL_TEST_MAIN("flow_json", NULL, NULL, {"hubble json", test_hubble_json},
		 {"drop reason names", test_drop_reason_names}, {"printf as vsnprintf", test_printf_like_vsnprintf},
		 {"flow addresses", test_flow_addresses},
		 {"lb.service backends by element size", test_lb_service_backend_stride})
