/* tests/fuzz/fuzz_health_reply.c - fuzz target: a peer health responder's
 * HTTP reply as the prober reads it (modules/health/peer_reply.c): status
 * line, headers, Content-Length, the JSON body with the node name and the
 * peer's matrix row. Parsed whole, then fed in two pieces as the network
 * may deliver it: a refusal names what was wrong, the split never changes
 * the outcome. */
#include "health.h"

#include "fuzz.h"

static int parse(const char *buf, size_t len, bool eof, struct health_reply *r, char *err, size_t el)
{
	memset(r->row, 0, r->max_row * sizeof(*r->row));
	err[0] = '\0';
	int rc = health_reply_parse(buf, len, eof, r, err, el);
	if (rc < 0 && !err[0])
		abort(); /* a refusal says why */
	if (rc > 0 && (!r->node[0] || r->n_row > r->max_row || strlen(r->node) >= sizeof(r->node)))
		abort();
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct health_row_entry row[8];
	struct health_reply r = {.row = row, .max_row = 8};
	char err[HEALTH_ERR_LEN];
	const char *buf = (const char *)data;
	/* at the end of the stream a reply is complete or refused */
	if (parse(buf, size, true, &r, err, sizeof(err)) == 0)
		abort();
	/* the first half as the network may deliver it, then the whole */
	(void)parse(buf, size / 2, false, &r, err, sizeof(err));
	(void)parse(buf, size, false, &r, err, sizeof(err));
	return 0;
}
