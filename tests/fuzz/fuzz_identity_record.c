/* tests/fuzz/fuzz_identity_record.c - fuzz target: the kvstore records of
 * cluster-wide identities (modules/endpoint/cluster_record.c) other agents
 * write: the label set of id/<n> (";"-terminated), the number a value/ key
 * holds, and a value/<labels>/<node> key. Labels that decode must encode
 * back to the same text; numbers must be in range; every refusal names what
 * was wrong. Input: the first byte picks the parser, the rest is the text. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_record.h"
#include "fuzz.h"

static char labels[CL_LABELS_MAX], enc[CL_LABELS_MAX], node[CL_NODE_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256] = "";
	uint32_t n;

	if (size < 1)
		return 0;
	char *text = fuzz_strndup(data + 1, size - 1);
	size_t len = text ? strlen(text) : 0;
	int rc;

	if (!text)
		return 0;
	switch (data[0] % 3) {
	case 0:
		rc = cl_labels_decode(text, len, labels, sizeof(labels), why, sizeof(why));
		if (rc == 0) {
			why[0] = '\0';
			if (cl_labels_encode(labels, enc, sizeof(enc), why, sizeof(why)) ||
			    strcmp(enc, text))
				abort(); /* what was accepted does not read back */
		} else if (!why[0]) {
			abort();
		}
		break;
	case 1:
		rc = cl_number_parse(text, len, 256, 65535, &n);
		if (rc == 0 && (n < 256 || n > 65535))
			abort();
		if (rc && rc != -EINVAL && rc != -ERANGE)
			abort();
		break;
	default:
		rc = cl_ref_key_parse(text, len, labels, sizeof(labels), node, sizeof(node), why,
				      sizeof(why));
		if (rc == 0 && (!node[0] || strchr(node, '/')))
			abort();
		if (rc && !why[0])
			abort();
		break;
	}
	free(text);
	return 0;
}
