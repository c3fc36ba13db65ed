/* tests/fuzz/fuzz_lb_k8s_slice.c - fuzz target: the lb module's in-place
 * EndpointSlice reader (modules/lb/k8s_scan.c) against json-c's path
 * (k8s_slice_project, modules/lb/k8s_proj.c). A text the scanner reads
 * must be one json-c reads as an object, project to the very same bytes
 * with the same kubernetes.io/service-name label, and have every refused
 * address reported; a text it does not read must leave nothing allocated.
 * The refuser refuses 127.0.0.0/8, so refusals are fuzzed too. */
#include "k8s_proj.h"

#include <json-c/json.h>

#include "fuzz.h"

static const char *refuse_loopback(const struct lb_addr *a, void *ud)
{
	(void)ud;
	return lb_addr_is_v4(a) && a->a[12] == 127 ? "loopback" : NULL;
}

/* json-c's path, with the addresses the refuser refuses taken out as
 * lb's refuse_backends does; its number of refusals in *nref */
static struct k8s_slice_proj *by_jsonc(struct json_object *o, size_t *nref)
{
	struct json_object *eps;
	*nref = 0;
	if (json_object_object_get_ex(o, "endpoints", &eps) && json_object_is_type(eps, json_type_array))
		for (size_t e = 0; e < json_object_array_length(eps); e++) {
			struct json_object *addrs, *ep = json_object_array_get_idx(eps, e);
			if (!json_object_object_get_ex(ep, "addresses", &addrs) ||
			    !json_object_is_type(addrs, json_type_array))
				continue;
			for (size_t a = json_object_array_length(addrs); a-- > 0;) {
				struct lb_addr ad;
				const char *t = json_object_get_string(json_object_array_get_idx(addrs, a));
				if (!k8s_ip_of(t, &ad) || !refuse_loopback(&ad, NULL))
					continue;
				(*nref)++;
				json_object_array_del_idx(addrs, a, 1);
			}
		}
	return k8s_slice_project(o, "s", "node-a");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	if (!text)
		return 0;
	size_t len = strlen(text); /* the agent's texts are C strings */
	struct k8s_refuser rf = {refuse_loopback, NULL};
	struct k8s_slice_scanned sc;
	int rc = k8s_slice_scan(text, len, "s", "node-a", &rf, &sc);
	if (rc != 0) {
		if (sc.proj || sc.refused || sc.nrefused)
			abort();
		free(text);
		return 0;
	}
	struct json_object *o = json_tokener_parse(text);
	if (!o || !json_object_is_type(o, json_type_object))
		abort(); /* read by the scanner, not by json-c */
	struct json_object *meta, *labels, *v;
	bool has = json_object_object_get_ex(o, "metadata", &meta) &&
		   json_object_object_get_ex(meta, "labels", &labels) &&
		   json_object_object_get_ex(labels, "kubernetes.io/service-name", &v) &&
		   json_object_is_type(v, json_type_string);
	if (has != sc.has_service || (has && strcmp(json_object_get_string(v), sc.service)))
		abort();
	size_t nref;
	struct k8s_slice_proj *want = by_jsonc(o, &nref);
	if (!want || !sc.proj || !k8s_slice_proj_same(want, sc.proj) || nref != sc.nrefused)
		abort();
	for (size_t i = 0; i < sc.nrefused; i++)
		if (strcmp(sc.refused[i].why, "loopback"))
			abort();
	free(want);
	json_object_put(o);
	free(sc.proj);
	free(sc.refused);
	free(text);
	return 0;
}
