/* tests/fuzz/fuzz_cidr.c - fuzz target: address and CIDR parsing of the
 * SDK (lib/ipalloc.c: fibril_ip_parse, fibril_cidr_parse and their
 * formatting, fibril_cidr_contains, fibril_cidr_subnet, and an allocator
 * over a parsed CIDR), which every module uses on outside text (API paths,
 * Node pod CIDRs, pool config). A parsed value must format back to text
 * that parses to the same value. Input: lines, each parsed as both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/ipalloc.h>

#include "fuzz.h"

static void one(const char *text)
{
	struct fibril_ip ip, ip2;
	struct fibril_cidr cidr, cidr2, sub;
	char buf[64];

	if (fibril_ip_parse(text, &ip) == 0) {
		if (!fibril_ip_format(&ip, buf, sizeof(buf)) || fibril_ip_parse(buf, &ip2) ||
		    memcmp(&ip, &ip2, sizeof(ip)) != 0)
			abort(); /* the canonical text does not read back */
	}
	if (fibril_cidr_parse(text, &cidr) == 0) {
		if (!fibril_cidr_format(&cidr, buf, sizeof(buf)) || fibril_cidr_parse(buf, &cidr2) ||
		    memcmp(&cidr, &cidr2, sizeof(cidr)) != 0)
			abort();
		if (!fibril_cidr_contains(&cidr, &cidr.ip))
			abort(); /* a CIDR holds its own base address */
		unsigned bits = cidr.ip.family == 4 ? 32 : 128;
		for (unsigned len = cidr.prefix_len; len <= bits && len <= cidr.prefix_len + 3u; len++)
			for (uint64_t i = 0; i < 3; i++)
				if (fibril_cidr_subnet(&cidr, (uint8_t)len, i, &sub) == 0 &&
				    !fibril_cidr_contains(&cidr, &sub.ip))
					abort(); /* a subnet lies inside its CIDR */
		if (bits - cidr.prefix_len <= 16) {
			struct fibril_ipalloc *a = NULL;
			if (fibril_ipalloc_new(&cidr, NULL, &a) == 0 && a) {
				struct fibril_ip got;
				for (int i = 0; i < 4 && fibril_ipalloc_next(a, &got) == 0; i++)
					if (!fibril_cidr_contains(&cidr, &got) || !fibril_ipalloc_is_allocated(a, &got))
						abort();
				fibril_ipalloc_free(a);
			}
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		one(line);
	free(text);
	return 0;
}
