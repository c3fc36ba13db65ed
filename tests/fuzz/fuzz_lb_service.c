/* tests/fuzz/fuzz_lb_service.c - fuzz target: the lb module's service JSON
 * (modules/lb/model.c: frontend and backend addresses, protocol, type,
 * states, affinity, algorithm; strict about unknown fields), then the
 * table (table.c: IDs, backend references; no maps) and a Maglev table of the
 * parsed backends. A refusal must be one line; an accepted service must
 * print back to JSON that parses to the same frontend and backends, its
 * upsert must give it an ID, the Maglev table may only hold its backends'
 * IDs, and a delete must leave the table empty. The same bytes are also
 * read as a record of the origins journal (modules/lb/origin.c): refused
 * with one line, or encoded back to the very same bytes. */
#include "lb_int.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define FUZZ_MAGLEV_M 251u

static void origin_record(const uint8_t *data, size_t size)
{
	struct lb_origin_rec r;
	char err[200] = "";
	if (lb_origin_decode(data, size, &r, err, sizeof(err)) < 0) {
		if (!err[0] || strchr(err, '\n'))
			abort();
		return;
	}
	uint8_t again[LB_ORIGIN_HDR + LB_NAME_MAX];
	size_t n = lb_origin_encode(&r, again);
	/* a deleted record drops its name; a set one keeps every byte */
	if (r.op == LB_ORIGIN_SET && (n != size || memcmp(again, data, size)))
		abort();
	if (n > size || memcmp(again, data, LB_ORIGIN_HDR))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	origin_record(data, size);
	char *text = fuzz_strndup(data, size);
	struct lb_svc *s = NULL;
	char err[512] = "";
	if (lb_svc_parse(text, size, &s, err, sizeof(err)) < 0) {
		if (!err[0] || strchr(err, '\n'))
			abort(); /* a refusal says why, in one line */
		free(text);
		return 0;
	}
	/* the printed form parses back to the same service */
	struct json_object *o = lb_svc_to_json(s);
	const char *printed = json_object_to_json_string(o);
	struct lb_svc *again = NULL;
	if (lb_svc_parse(printed, strlen(printed), &again, err, sizeof(err)) < 0 ||
	    memcmp(&again->addr, &s->addr, sizeof(s->addr)) || again->port != s->port ||
	    again->proto != s->proto || again->nbe != s->nbe)
		abort();
	for (size_t i = 0; i < s->nbe; i++)
		if (memcmp(&again->be[i].addr, &s->be[i].addr, sizeof(s->be[i].addr)) ||
		    again->be[i].port != s->be[i].port || again->be[i].state != s->be[i].state)
			abort();
	lb_svc_free(again);
	json_object_put(o);

	struct lb_table t;
	if (lb_table_init(&t, 1024, FUZZ_MAGLEV_M, LB_ALG_MAGLEV) < 0)
		abort();
	size_t nbe = s->nbe;
	uint16_t id = 0;
	struct lb_svc *spec = s;
	if (lb_table_upsert(&t, &spec, &id, err, sizeof(err)) == 0) {
		if (!id || spec || lb_table_get(&t, id) != s || t.nbe != nbe)
			abort();
		if (nbe) {
			const struct lb_be_spec **be = calloc(nbe, sizeof(*be));
			for (size_t i = 0; i < nbe; i++)
				be[i] = &s->be[i];
			if (lb_maglev_build(be, nbe, FUZZ_MAGLEV_M, t.maglev_buf, t.maglev_scratch) < 0)
				abort();
			for (uint32_t j = 0; j < FUZZ_MAGLEV_M; j++) {
				bool found = false;
				for (size_t i = 0; i < nbe && !found; i++)
					found = t.maglev_buf[j] == s->be[i].id;
				if (!found)
					abort();
			}
			free(be);
		}
		if (lb_table_delete(&t, id, err, sizeof(err)) < 0 || t.nsvc || t.nbe)
			abort();
	} else {
		if (!err[0] || strchr(err, '\n'))
			abort();
		lb_svc_free(spec);
	}
	lb_table_free(&t);
	free(text);
	return 0;
}
