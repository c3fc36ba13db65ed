/* tests/fuzz/fuzz_ipcache_record.c - fuzz target: the ipcache's record
 * (modules/nodes/record.c), the JSON every agent writes under
 * state/ip/v1/default/<ip> and every node reads into its datapath. A record
 * that decodes must encode to text that decodes to the same entry. Input:
 * the record; the key's address is its own "IP" when it has one that parses
 * (so the check that they agree is reached), else "10.0.0.1". The decode
 * (a scanner first, json-c when the scanner does not answer) must give what
 * json-c alone gives. */
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
	struct nodes_ip_record slow;
	char slow_why[NODES_WHY_LEN] = "";
	int slow_rc = nodes_ip_record_decode_json(text, size, key, &slow, slow_why, sizeof(slow_why));
	int rc = nodes_ip_record_decode(text, size, key, &r, why, sizeof(why));
	if (rc != slow_rc || (rc == 0 && memcmp(&r, &slow, sizeof(r)) != 0) ||
	    (rc && strcmp(why, slow_why)))
		abort(); /* the scanner read it otherwise than json-c */
	if (rc == 0) {
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
