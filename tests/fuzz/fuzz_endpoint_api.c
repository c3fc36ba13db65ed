/* tests/fuzz/fuzz_endpoint_api.c - fuzz target: the endpoint module's API
 * (GET/PUT/PATCH/DELETE /v1/endpoint/{ref}, /v1/identity/{id}): the ref
 * (ID or container-id:CID[:IFNAME]), the PUT body (ep_spec_parse: every
 * field, addresses, MACs, labels), the PATCH labels, through the host's real
 * dispatch, against a manager holding endpoint 1 (c0ffee/eth0). Each body is
 * also parsed as a state file (what restore reads back). Input: one or more
 * "METHOD /v1/endpoint/REF\nbody" requests separated by "\n=====\n". */
#include "endpoint_int.h"

#include "api_harness.h"
#include "endpoint_harness.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ep_manager *mg = fuzz_ep_manager();
	char *text = fuzz_strndup(data, size);

	/* the first body as a state file */
	const char *body = strchr(text, '\n');
	struct json_object *o = body ? json_tokener_parse(body + 1) : NULL;
	if (o) {
		struct ep_spec spec = {0};
		char why[512];
		ep_spec_parse(o, &spec, true, why, sizeof(why));
		ep_spec_clear(&spec);
		json_object_put(o);
	}
	fuzz_api_requests(text);
	free(text);
	(void)mg;
	return 0;
}
