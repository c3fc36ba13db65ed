/* tests/fuzz/fuzz_flows_query.c - fuzz target: the GET /v1/flows query
 * string (modules/hubble-lite/filter.c): percent-decoding, every filter
 * key's value (pods, labels, CIDRs, identities, ports, protocol, verdict,
 * drop reason, times, last), and matching the parsed filter against a few
 * flows. A rejected query must say why; an accepted one must match without
 * faults. The same bytes are also applied as an lb.service event
 * (modules/hubble-lite/services.c) to a lookup holding one service, which
 * must then answer lookups without faults. */
#include "hubble.h"

#include "fuzz.h"

#include <errno.h>
#include <stdio.h>

#include <fibril/lb.h>

static void service_event(const uint8_t *data, size_t size)
{
	struct hl_svcmap *m = hl_svcmap_new();
	if (!m)
		abort();
	struct {
		struct fibril_lb_service_event ev;
		struct fibril_lb_backend_addr be[2];
	} one;
	memset(&one, 0, sizeof(one));
	one.ev.sz = sizeof(one.ev);
	one.ev.id = 1;
	one.ev.port = 80;
	one.ev.proto = 6;
	memcpy(one.ev.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\x60\0\x01", 16);
	snprintf(one.ev.name, sizeof(one.ev.name), "web");
	one.ev.nbackends = 2;
	one.ev.backends = sizeof(one.ev);
	one.be[0].port = one.be[1].port = 8080;
	memcpy(one.be[0].addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\xd4\0\x0a", 16);
	memcpy(one.be[1].addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\xd4\0\x0b", 16);
	if (hl_svcmap_apply(m, &one, sizeof(one)) || hl_svcmap_count(m) != 1 ||
	    !hl_svcmap_lookup(m, 4, (const uint8_t *)"\x0a\x60\0\x01", 80, 6))
		abort();
	/* a second service sharing backend 0 (10.212.0.10:8080) names it while
	 * it exists; then the first does again */
	static const uint8_t be0[4] = {10, 212, 0, 10};
	one.ev.id = 2;
	one.ev.addr[15] = 2;
	snprintf(one.ev.name, sizeof(one.ev.name), "api");
	one.ev.nbackends = 1;
	const struct hl_service *hit;
	if (hl_svcmap_apply(m, &one, sizeof(one) - sizeof(one.be[1])) || hl_svcmap_count(m) != 2 ||
	    !(hit = hl_svcmap_lookup(m, 4, be0, 8080, 6)) || strcmp(hit->name, "api"))
		abort();
	one.ev.op = FIBRIL_LB_SERVICE_DELETED;
	one.ev.nbackends = 0;
	one.ev.backends = 0;
	if (hl_svcmap_apply(m, &one, sizeof(one.ev)) || hl_svcmap_count(m) != 1 ||
	    !(hit = hl_svcmap_lookup(m, 4, be0, 8080, 6)) || strcmp(hit->name, "web") ||
	    hl_svcmap_lookup(m, 4, (const uint8_t *)"\x0a\x60\0\x02", 80, 6))
		abort();
	/* the fuzzed event, whatever its sizes and offsets claim */
	int rc = hl_svcmap_apply(m, data, size);
	if (rc && rc != -EINVAL)
		abort();
	for (uint8_t fam = 4; fam <= 6; fam += 2)
		(void)hl_svcmap_lookup(m, fam, size >= 40 ? data + 24 : (const uint8_t *)"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 80, 6);
	hl_svcmap_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	service_event(data, size);
	char *query = fuzz_strndup(data, size);
	struct hl_filter f;
	char err[HL_ERR_LEN] = "";
	hl_filter_init(&f);
	if (hl_filter_parse_query(&f, query, 1764054000ULL * 1000000000ULL, err, sizeof(err))) {
		if (!err[0])
			abort(); /* a refusal names what was wrong */
	} else {
		struct hl_flow fl[3];
		memset(fl, 0, sizeof(fl));
		fl[0].family = 4;
		fl[0].proto = 6;
		fl[0].verdict = HL_FORWARDED;
		fl[0].type = HL_TYPE_TRACE;
		memcpy(fl[0].src.addr, "\x0a\xc9\x00\x0b", 4);
		snprintf(fl[0].src.pod, sizeof(fl[0].src.pod), "a");
		snprintf(fl[0].src.ns, sizeof(fl[0].src.ns), "default");
		snprintf(fl[0].src.labels, sizeof(fl[0].src.labels), "k8s:app=web\nk8s:tier=front");
		fl[1] = fl[0];
		fl[1].family = 6;
		fl[1].verdict = HL_DROPPED;
		snprintf(fl[1].reason_name, sizeof(fl[1].reason_name), "spoofed-source-ip");
		fl[2].src.labels[0] = '\0';
		for (int i = 0; i < 3; i++)
			(void)hl_filter_match(&f, &fl[i]);
	}
	free(query);
	return 0;
}
