/* tests/fuzz/fuzz_node_record.c - fuzz target: the node registry's record
 * (modules/nodes/record.c), the JSON other agents write under
 * state/nodes/v1/<name> and every node reads. A record that decodes must
 * encode to text that decodes to the same node. Input: the record; the
 * key's name is "n1". */
#include <stdlib.h>
#include <string.h>

#include "nodes_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char why[NODES_WHY_LEN];
	struct fibril_node n, again;

	if (!text)
		return 0;
	if (nodes_record_decode(text, size, "n1", &n, why, sizeof(why)) == 0) {
		char *enc = nodes_record_encode(&n);
		if (!enc || nodes_record_decode(enc, strlen(enc), "n1", &again, why, sizeof(why)) ||
		    memcmp(&n, &again, sizeof(n)) != 0)
			abort(); /* what was accepted does not read back */
		free(enc);
	} else if (!why[0]) {
		abort(); /* a refusal names what was wrong */
	}
	free(text);
	return 0;
}
