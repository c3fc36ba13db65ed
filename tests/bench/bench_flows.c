/* tests/bench/bench_flows.c - hubble-lite's decoding and enrichment rate
 * on one core (`make bench`): the module's own bus callback
 * (on_datapath_event, compiled in from modules/hubble-lite/hubble.c) turns
 * prebuilt datapath events into flows in the default ring of 4095, with
 * 100 local endpoints to enrich from and the module's metric series
 * updated. Printed beside, from the same run: the reference, copying each
 * event into a ring slot (the floor of any decoder), and the JSON cost of a
 * flow (paid once per flow a follower's filter matches). Then the cost of
 * naming services: the same decoding with 1,000 services of the lb module
 * (2 backends each, the endpoints' addresses on the events' port) against
 * none, interleaved (A B A B ..., 7 rounds): the median ratio and its
 * spread.
 *
 *   bench_flows [EVENTS]   (default 5,000,000)
 * Output: key=value lines. */
#include "../../modules/hubble-lite/hubble.c"
#include "../../modules/hubble-lite/stream.c"

#include <time.h>

#include <fibril/lb.h>

#define NEP 100
#define NEV 1024

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 5000000;
	struct hubble *h = calloc(1, sizeof(*h));
	h->size = 4095;
	h->ring = calloc(h->size, sizeof(*h->ring));
	snprintf(h->node, sizeof(h->node), "bench");
	/* the module's metric series, as in the agent (no scrape; registered
	 * as the host's since there is no module here) */
	h->m = NULL;
	if (metrics_register(h))
		fprintf(stderr, "bench_flows: metrics not registered, series updates left out\n");
	for (int i = 0; i < NEP; i++) {
		struct hl_ep *e = calloc(1, sizeof(*e));
		e->id = (uint16_t)(i + 1);
		e->identity = 256 + (uint32_t)i;
		snprintf(e->ns, sizeof(e->ns), "ns%d", i % 5);
		snprintf(e->pod, sizeof(e->pod), "pod-%d", i);
		snprintf(e->labels, sizeof(e->labels), "k8s:app=app%d\nk8s:io.kubernetes.pod.namespace=ns%d", i,
			 i % 5);
		e->has4 = true;
		e->ip4[0] = 10, e->ip4[1] = 0, e->ip4[2] = (uint8_t)(i / 250), e->ip4[3] = (uint8_t)(i % 250 + 1);
		e->next = h->eps;
		h->eps = e;
	}
	static struct fibril_datapath_event dev[NEV];
	static struct fibril_event ev[NEV];
	srand(42);
	for (int i = 0; i < NEV; i++) {
		struct fibril_datapath_event *d = &dev[i];
		int s = rand() % NEP, t = rand() % NEP;
		d->sz = sizeof(*d);
		d->type = i % 10 == 0 ? FIBRIL_DATAPATH_EVENT_DROP : FIBRIL_DATAPATH_EVENT_TRACE;
		d->reason = i % 10 == 0 ? 134 : 1;
		d->direction = (uint8_t)(i & 1);
		d->family = 4;
		d->proto = i % 3 ? 6 : 17;
		d->tcp_flags = d->proto == 6 ? 0x10 : 0;
		d->sport = (uint16_t)(30000 + i);
		d->dport = 80;
		d->src_ep_id = (uint16_t)(s + 1); /* the destination is found by address */
		d->len = 100;
		d->time_ns = 1795600000000000000ull + (uint64_t)i;
		d->saddr[0] = 10, d->saddr[2] = (uint8_t)(s / 250), d->saddr[3] = (uint8_t)(s % 250 + 1);
		d->daddr[0] = 10, d->daddr[2] = (uint8_t)(t / 250), d->daddr[3] = (uint8_t)(t % 250 + 1);
		snprintf(d->reason_name, sizeof(d->reason_name), "%s", i % 10 == 0 ? "drop:policy-denied" : "forwarded");
		ev[i] = (struct fibril_event){.sz = sizeof(ev[i]), .type_version = 1,
					      .topic = FIBRIL_DATAPATH_TOPIC_EVENT, .publisher = "datapath",
					      .payload = d, .payload_len = sizeof(*d)};
	}
	/* warm up, then the module's path */
	for (int i = 0; i < 100000; i++)
		on_datapath_event(&ev[i % NEV], h);
	double t0 = cpu_s();
	for (long i = 0; i < n; i++)
		on_datapath_event(&ev[i % NEV], h);
	double decode = cpu_s() - t0;
	/* reference: copy each event into a ring slot */
	static struct fibril_datapath_event ref_ring[4095];
	t0 = cpu_s();
	for (long i = 0; i < n; i++) {
		const struct fibril_event *e = &ev[i % NEV];
		memcpy(&ref_ring[i % 4095], e->payload, e->payload_len);
		__asm__ volatile("" : : "r"(ref_ring) : "memory");
	}
	double copy = cpu_s() - t0;
	/* JSON of a flow (once per flow a follower matches) */
	long nj = n / 10;
	size_t bytes = 0;
	t0 = cpu_s();
	for (long i = 0; i < nj; i++) {
		size_t len;
		flow_text(h, &h->ring[i % h->size], false, &len);
		bytes += len;
	}
	double json = cpu_s() - t0;
	/* the same flows as Hubble's JSON (format=hubble, fibril observe -o json) */
	size_t hbytes = 0;
	t0 = cpu_s();
	for (long i = 0; i < nj; i++) {
		size_t len;
		flow_text(h, &h->ring[i % h->size], true, &len);
		hbytes += len;
	}
	double hjson = cpu_s() - t0;
	/* naming services: 1,000 services over the endpoints' addresses */
	struct hl_svcmap *svcs = hl_svcmap_new();
	for (int i = 0; i < 1000; i++) {
		struct {
			struct fibril_lb_service_event ev;
			struct fibril_lb_backend_addr be[2];
		} one;
		memset(&one, 0, sizeof(one));
		one.ev.sz = sizeof(one.ev);
		one.ev.id = (uint16_t)(i + 1);
		one.ev.port = 80;
		one.ev.proto = 6;
		uint8_t fe[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 96, (uint8_t)(i / 250),
				  (uint8_t)(i % 250 + 1)};
		memcpy(one.ev.addr, fe, 16);
		snprintf(one.ev.namespace_, sizeof(one.ev.namespace_), "ns%d", i % 5);
		snprintf(one.ev.name, sizeof(one.ev.name), "svc-%d", i);
		one.ev.nbackends = 2;
		one.ev.backends = sizeof(one.ev);
		for (int b = 0; b < 2; b++) {
			int ep = (i + b) % NEP;
			uint8_t a[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, (uint8_t)(ep / 250),
					 (uint8_t)(ep % 250 + 1)};
			memcpy(one.be[b].addr, a, 16);
			one.be[b].port = 80;
		}
		hl_svcmap_apply(svcs, &one, sizeof(one));
	}
	double ratios[7];
	double with_s = 0, without_s = 0;
	long nr = n / 5;
	for (int r = 0; r < 7; r++) {
		double t[2];
		for (int side = 0; side < 2; side++) {
			h->svcs = side ? svcs : NULL;
			t0 = cpu_s();
			for (long i = 0; i < nr; i++)
				on_datapath_event(&ev[i % NEV], h);
			t[side] = cpu_s() - t0;
		}
		ratios[r] = t[1] / t[0];
		without_s += t[0];
		with_s += t[1];
	}
	h->svcs = NULL;
	for (int i = 0; i < 7; i++) /* sort the 7 ratios */
		for (int j = i + 1; j < 7; j++)
			if (ratios[j] < ratios[i]) {
				double x = ratios[i];
				ratios[i] = ratios[j];
				ratios[j] = x;
			}
	size_t named = 0;
	for (size_t i = 0; i < h->size; i++)
		named += h->ring[i].dst.service.name[0] || h->ring[i].src.service.name[0];
	hl_svcmap_free(svcs);
	printf("events=%ld\n", n);
	printf("decode_per_s=%.0f\n", (double)n / decode);
	printf("copy_per_s=%.0f\n", (double)n / copy);
	printf("json_per_s=%.0f\n", (double)nj / json);
	printf("json_bytes=%.0f\n", (double)bytes / (double)nj);
	printf("hubble_json_per_s=%.0f\n", (double)nj / hjson);
	printf("hubble_json_bytes=%.0f\n", (double)hbytes / (double)nj);
	printf("flows_seen=%llu\n", (unsigned long long)h->seq);
	printf("svc_decode_per_s=%.0f\n", (double)nr * 7 / with_s);
	printf("nosvc_decode_per_s=%.0f\n", (double)nr * 7 / without_s);
	printf("svc_ratio_median=%.3f\n", ratios[3]);
	printf("svc_ratio_min=%.3f\n", ratios[0]);
	printf("svc_ratio_max=%.3f\n", ratios[6]);
	printf("svc_named_in_ring=%zu\n", named);
	return 0;
}
