/* tests/fuzz/fuzz_ipcache_record.c - fuzz target: the ipcache's record
 * (modules/nodes/record.c), the JSON every agent writes under
 * state/ip/v1/default/<ip> and every node reads into its datapath. A record
 * that decodes must encode to text that decodes to the same entry. Input:
 * the record; the key's address is its own "IP" when it has one that parses
 * (so the check that they agree is reached), else "10.0.0.1". */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "nodes_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char why[NODES_WHY_LEN] = "", key[INET6_ADDRSTRLEN] = "10.0.0.1";
	struct nodes_ip_record r, again;

	if (!text)
		return 0;
	/* the loose read of the key: whatever the record claims */
	if (nodes_ip_record_decode(text, size, NULL, &r, why, sizeof(why)) == 0)
		nodes_ip_text(r.family, r.addr, key, sizeof(key));
	why[0] = '\0';
	if (nodes_ip_record_decode(text, size, key, &r, why, sizeof(why)) == 0) {
		char *enc = nodes_ip_record_encode(&r);
		if (!enc || nodes_ip_record_decode(enc, strlen(enc), key, &again, why, sizeof(why)) ||
		    memcmp(&r, &again, sizeof(r)) != 0)
			abort(); /* what was accepted does not read back */
		free(enc);
	} else if (!why[0]) {
		abort(); /* a refusal names what was wrong */
	}
	free(text);
	return 0;
}
