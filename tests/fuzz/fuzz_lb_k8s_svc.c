/* tests/fuzz/fuzz_lb_k8s_svc.c - fuzz target: the lb module's in-place
 * Service reader (modules/lb/k8s_scan.c) against json-c's path
 * (k8s_svc_project, modules/lb/k8s_proj.c). A text the scanner reads must
 * be one json-c reads as an object holding a valid Service, projected to
 * the very same bytes; a text it does not read leaves nothing allocated. */
#include "k8s_proj.h"

#include <json-c/json.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	if (!text)
		return 0;
	struct k8s_svc_proj *got = NULL;
	int rc = k8s_svc_scan(text, strlen(text), &got);
	if (rc != 0) {
		if (got)
			abort();
		free(text);
		return 0;
	}
	struct json_object *o = json_tokener_parse(text);
	if (!o || !json_object_is_type(o, json_type_object))
		abort(); /* read by the scanner, not by json-c */
	bool no_spec;
	struct k8s_svc_proj *want = k8s_svc_project(o, &no_spec);
	if (!want || want->invalid || !got || !k8s_svc_proj_same(want, got))
		abort();
	free(want);
	free(got);
	json_object_put(o);
	free(text);
	return 0;
}
