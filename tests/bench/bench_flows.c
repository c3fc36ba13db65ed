/* tests/bench/bench_flows.c - hubble-lite's decoding and enrichment rate
 * on one core (`make bench`): the module's own bus callback
 * (on_datapath_event, compiled in from modules/hubble-lite/hubble.c) turns
 * prebuilt datapath events into flows in the default ring of 4095, with
 * 100 local endpoints to enrich from and the module's metric series
 * updated. Printed beside, from the same run: the reference, copying each
 * event into a ring slot (the floor of any decoder), and the JSON cost of a
 * flow (paid once per flow a follower's filter matches).
 *
 *   bench_flows [EVENTS]   (default 5,000,000)
 * Output: key=value lines. */
#include "../../modules/hubble-lite/hubble.c"

#include <time.h>

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
		flow_text(h, &h->ring[i % h->size], &len);
		bytes += len;
	}
	double json = cpu_s() - t0;
	printf("events=%ld\n", n);
	printf("decode_per_s=%.0f\n", (double)n / decode);
	printf("copy_per_s=%.0f\n", (double)n / copy);
	printf("json_per_s=%.0f\n", (double)nj / json);
	printf("json_bytes=%.0f\n", (double)bytes / (double)nj);
	printf("flows_seen=%llu\n", (unsigned long long)h->seq);
	return 0;
}
