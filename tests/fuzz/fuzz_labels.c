/* tests/fuzz/fuzz_labels.c - fuzz target: endpoint labels, the label set
 * an identity is computed from (modules/endpoint/spec.c: each label's
 * "source:key[=value]" form, the namespace label, sorting and dedup; and
 * identity.c's label filter, ep_label_counts_for_identity). A joined set
 * must read back as the same set. Input: labels, one per line; a first line
 * "ns=NAME" sets the pod namespace (ignored unless a DNS label, as the
 * module validates it before). */
#include "endpoint_int.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char *rest = text, *save = NULL, why[512], *joined = NULL;
	const char *ns = NULL;
	struct json_object *arr = json_object_new_array();

	if (strncmp(text, "ns=", 3) == 0) {
		char *nl = strchr(text, '\n');
		ns = text + 3;
		rest = nl ? nl + 1 : text + size;
		if (nl)
			*nl = '\0';
		/* the module only passes a validated pod-namespace (a DNS label) */
		size_t n = strlen(ns);
		if (!n || n >= EP_NS_LEN || strspn(ns, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
			ns = NULL;
	}
	for (char *l = strtok_r(rest, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		ep_label_counts_for_identity(l, strlen(l));
		json_object_array_add(arr, json_object_new_string(l));
	}
	if (ep_labels_from_json(arr, ns, &joined, why, sizeof(why)) == 0) {
		/* the joined set, as JSON and back, is the same set */
		struct json_object *again = ep_labels_to_json(joined);
		char *joined2 = NULL;
		if (!again || ep_labels_from_json(again, ns, &joined2, why, sizeof(why)) ||
		    strcmp(joined, joined2) != 0)
			abort();
		free(joined2);
		json_object_put(again);
	}
	free(joined);
	json_object_put(arr);
	free(text);
	return 0;
}
