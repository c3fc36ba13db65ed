/* tests/fuzz/fuzz_k8s_pod.c - fuzz target: a Pod object as the endpoint
 * module decodes it from the Kubernetes cache: its metadata.labels become
 * the endpoint's labels ("k8s:key=value" plus the namespace label, each
 * checked, sorted, deduplicated) and its identity (ep_pod_labels_cached,
 * then ep_apply_cached_pods applying them to endpoint 1, whose pod is
 * default/web). Input: the Pod's JSON, as the informer caches it. */
#include "endpoint_int.h"

#include "endpoint_harness.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ep_manager *mg = fuzz_ep_manager();
	char *text = fuzz_strndup(data, size);

	fuzz_ep_pod_json = text;
	free(ep_pod_labels_cached(mg, "default", "web"));
	ep_apply_cached_pods(mg);
	fuzz_ep_pod_json = NULL;
	free(text);
	return 0;
}
