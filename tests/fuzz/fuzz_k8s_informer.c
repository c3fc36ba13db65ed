/* tests/fuzz/fuzz_k8s_informer.c - fuzz target: Kubernetes objects as the
 * k8s module's informers decode them, for each resource they watch (Node,
 * Pod, Namespace, Service, EndpointSlice, NetworkPolicy, CNP, CCNP): a LIST
 * answer (items, metadata.continue/resourceVersion, each object's name,
 * namespace and resourceVersion, the diff against the cache) and then the
 * WATCH stream (one JSON event per line, ADDED/MODIFIED/DELETED/BOOKMARK/
 * ERROR with a Status, 410 and "too large resource version"), delivered in
 * chunks, and the end of the watch. modules/k8s/informer.c is compiled in
 * (its decoders are static); the HTTP layer and health are stubbed: no
 * request is ever sent. Input: byte 0 picks the resource, byte 1 the chunk
 * size of the stream, then the LIST body, a line "=====", the stream. */
#include "../../modules/k8s/informer.c"

#include "fuzz.h"

/* ---- http.c and k8s.c, stubbed ------------------------------------------------ */
struct k8s_req *k8s_req_new(struct k8s *k, const char *method, const char *path, char *body,
			    const char *content_type, k8s_done_fn done, void *ud)
{
	(void)k, (void)method, (void)path, (void)content_type, (void)done, (void)ud;
	free(body);
	return NULL; /* "cannot start the request": the informer backs off */
}

int k8s_req_send(struct k8s_req *r, bool stream, uint64_t timeout_ms)
{
	(void)r, (void)stream, (void)timeout_ms;
	abort(); /* never reached: k8s_req_new gave no request */
}

void k8s_req_abort(struct k8s_req *r)
{
	if (r)
		r->linked = false; /* the harness owns and frees it */
}

void k8s_req_consume(struct k8s_req *r, size_t n)
{
	if (n > r->len)
		abort(); /* consumed more than it had */
	memmove(r->buf, r->buf + n, r->len - n);
	r->len -= n;
	r->buf[r->len] = '\0';
}

void k8s_health_update(struct k8s_res *r)
{
	(void)r;
}

void k8s_synced_changed(struct k8s *k)
{
	(void)k;
}

static struct k8s_req *fake_req(struct k8s_res *r, const char *data, size_t len)
{
	struct k8s_req *q = calloc(1, sizeof(*q));
	if (!q || !(q->buf = malloc(len + 1)))
		abort();
	memcpy(q->buf, data, len);
	q->buf[len] = '\0';
	q->len = q->cap = len;
	q->k = r->k;
	q->ud = r;
	q->linked = true;
	q->status = 200;
	q->stream = true;
	return q;
}

static void free_req(struct k8s_req *q)
{
	free(q->buf);
	free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct k8s k;
	if (size < 2)
		return 0;
	if (!k.node[0]) {
		fuzz_quiet_logs();
		snprintf(k.node, sizeof(k.node), "node-1");
		k.page_size = 500;
		k.rng = 1;
	}
	struct k8s_res *r = &k.res[data[0] % K8S_NRES];
	size_t chunk = data[1] ? (size_t)data[1] * 32 : SIZE_MAX; /* 32..8160 bytes, or all at once */
	r->k = &k;
	r->def = &k8s_resdefs[data[0] % K8S_NRES];
	snprintf(r->topic, sizeof(r->topic), "k8s.%s", r->def->name);

	char *text = fuzz_strndup(data + 2, size - 2);
	char *stream = fuzz_split(text, "\n=====\n");

	/* the LIST answer */
	struct k8s_req *q = fake_req(r, text, strlen(text));
	q->stream = false;
	r->phase = PH_LISTING;
	on_list_done(q, 0);
	free_req(q);

	/* the WATCH stream, chunk by chunk as the HTTP client hands it over */
	if (stream) {
		size_t total = strlen(stream), at = 0;
		q = fake_req(r, "", 0);
		q->data = on_watch_data;
		r->req = q;
		while (at < total && q->linked) {
			size_t n = total - at < chunk ? total - at : chunk;
			char *nb = realloc(q->buf, q->len + n + 1);
			if (!nb)
				abort();
			q->buf = nb;
			memcpy(q->buf + q->len, stream + at, n);
			q->len += n;
			q->buf[q->len] = '\0';
			at += n;
			on_watch_data(q);
		}
		if (q->linked) {
			q->status = 200;
			on_watch_done(q, 0); /* the server ended the watch */
		}
		free_req(q);
	}
	r->req = NULL;
	fuzz_host_drain();
	k8s_res_free(r);
	r->synced = false;
	r->failures = 0;
	r->error[0] = '\0';
	free(text);
	return 0;
}
