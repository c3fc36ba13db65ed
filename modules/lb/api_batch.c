/* modules/lb/api_batch.c - PUT /v1/service with a JSON array: many services
 * in one request (`fibril service apply -f FILE`), all or nothing. Every
 * entry is checked first (its JSON, a backend on the node's own address, a
 * frontend twice in the batch, a frontend Kubernetes or a hostPort holds,
 * an ID another frontend holds, enough free IDs): the first bad one is a
 * 400 (409, 507) naming its index and field, and nothing is applied. Then
 * the entries are upserted in one pass; should the maps refuse one
 * midway, those already applied are put back as they were (a new frontend
 * deleted, a changed one upserted again from its copy) and the reply names
 * the entry. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

#include "lb_mod.h"

#define BATCH_MAX LB_SVC_ID_MAX

static struct lb_svc *svc_clone(const struct lb_svc *s)
{
	struct lb_svc *c = malloc(sizeof(*c));
	if (!c)
		return NULL;
	*c = *s;
	c->be = s->nbe ? malloc(s->nbe * sizeof(*c->be)) : NULL;
	c->ranges = s->nranges ? malloc(s->nranges * sizeof(*c->ranges)) : NULL;
	if ((s->nbe && !c->be) || (s->nranges && !c->ranges)) {
		free(c->be);
		free(c->ranges);
		free(c);
		return NULL;
	}
	if (s->nbe)
		memcpy(c->be, s->be, s->nbe * sizeof(*c->be));
	if (s->nranges)
		memcpy(c->ranges, s->ranges, s->nranges * sizeof(*c->ranges));
	return c;
}

struct batch {
	struct lb_svc **spec; /* parsed entries (NULL once applied: the table owns them) */
	struct lb_svc **old;  /* a copy of the service each replaced (NULL: new frontend) */
	uint16_t *id;         /* the ID each got */
	size_t n;
	size_t *fe_slot;      /* open addressing: entry index + 1 by frontend, 0 empty */
	size_t fe_mask;
	uint32_t *id_owner;   /* entry index + 1 by the "id" it asks for, 0 none */
};

static size_t fe_hash(const struct lb_svc *s)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < sizeof(s->addr.a); i++)
		h = (h ^ s->addr.a[i]) * 1099511628211ull;
	h = (h ^ s->port) * 1099511628211ull;
	h = (h ^ s->proto) * 1099511628211ull;
	return (size_t)(h ^ (h >> 29));
}

/* The earlier entry with entry i's frontend (and i noted), or SIZE_MAX. */
static size_t fe_seen(struct batch *b, size_t i)
{
	const struct lb_svc *s = b->spec[i];
	for (size_t k = fe_hash(s) & b->fe_mask;; k = (k + 1) & b->fe_mask) {
		if (!b->fe_slot[k]) {
			b->fe_slot[k] = i + 1;
			return SIZE_MAX;
		}
		const struct lb_svc *o = b->spec[b->fe_slot[k] - 1];
		if (o->port == s->port && o->proto == s->proto &&
		    !memcmp(&o->addr, &s->addr, sizeof(o->addr)))
			return b->fe_slot[k] - 1;
	}
}

static void batch_free(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		lb_svc_free(b->spec[i]);
		lb_svc_free(b->old[i]);
	}
	free(b->spec);
	free(b->old);
	free(b->id);
	free(b->fe_slot);
	free(b->id_owner);
}

/* Checks entry i against the table and the entries before it; 0, or an
 * HTTP status with the message in err. */
static int check_entry(struct lb *lb, struct batch *b, size_t i, const struct lb_addr *mine,
		       size_t nmine, char *err, size_t len)
{
	struct lb_svc *s = b->spec[i];
	char fe[80];
	lb_format_addrport(&s->addr, s->port, fe, sizeof(fe));
	for (size_t k = 0; k < s->nbe; k++)
		if (lb_addr_in(mine, nmine, &s->be[k].addr)) {
			char a[80];
			lb_format_addrport(&s->be[k].addr, s->be[k].port, a, sizeof(a));
			snprintf(err, len, "services[%zu].backends[%zu].address: '%s' is the node's own "
					   "address, not a backend", i, k, a);
			return 400;
		}
	size_t j = fe_seen(b, i);
	if (j != SIZE_MAX) {
		snprintf(err, len, "services[%zu].frontend: %s/%s is also services[%zu]'s", i, fe,
			 lb_proto_name(s->proto), j);
		return 400;
	}
	if (s->id && b->id_owner[s->id]) {
		snprintf(err, len, "services[%zu].id: %u is also services[%u]'s", i, s->id,
			 b->id_owner[s->id] - 1);
		return 400;
	}
	if (s->id)
		b->id_owner[s->id] = (uint32_t)i + 1;
	if (s->algorithm_set && s->algorithm == LB_ALG_MAGLEV && !lb->maglev_m) {
		snprintf(err, len, "services[%zu].algorithm: maglev, but no Maglev table size is "
				   "configured", i);
		return 400;
	}
	struct lb_table *t = lb_table_of(lb);
	const struct lb_svc *held = lb_table_find(t, &s->addr, s->port, s->proto);
	const struct lb_svc *by_id = s->id ? lb_table_get(t, s->id) : NULL;
	const struct lb_svc *theirs = held ? held : by_id;
	if (theirs && (theirs->source == LB_SRC_K8S || theirs->source == LB_SRC_HOSTPORT)) {
		snprintf(err, len, "services[%zu]: service %u (%s) comes from %s; the API does not "
				   "change it", i, theirs->id, theirs->name[0] ? theirs->name : "unnamed",
			 theirs->source == LB_SRC_K8S ? "Kubernetes" : "a pod's hostPort");
		return 409;
	}
	if (s->id && held && held->id != s->id) {
		snprintf(err, len, "services[%zu].id: frontend %s/%s is service %u's, not %u", i, fe,
			 lb_proto_name(s->proto), held->id, s->id);
		return 409;
	}
	if (s->id && !held && by_id) {
		snprintf(err, len, "services[%zu].id: %u is taken by another frontend", i, s->id);
		return 409;
	}
	if (held && !(b->old[i] = svc_clone(held))) {
		snprintf(err, len, "out of memory");
		return 500;
	}
	return 0;
}

/* Puts back the entries before `upto` as they were, newest first. */
static void roll_back(struct lb *lb, struct batch *b, size_t upto)
{
	char err[256];
	for (size_t i = upto; i-- > 0;) {
		if (b->old[i]) {
			if (lb_upsert(lb, &b->old[i], NULL, err, sizeof(err)) < 0)
				fibril_warn(lb_module_of(lb), "batch roll-back of services[%zu]: %s", i, err);
		} else if (lb_delete(lb, b->id[i], err, sizeof(err)) < 0) {
			fibril_warn(lb_module_of(lb), "batch roll-back of services[%zu]: %s", i, err);
		}
	}
}

void lb_api_put_batch(struct lb *lb, const char *body, size_t len, struct fibril_response *resp)
{
	char err[512];
	if (!lb_table_of(lb)) {
		fibril_resp_error(resp, 503, "the lb module is not started");
		return;
	}
	struct json_tokener *tok = json_tokener_new();
	struct json_object *arr =
		tok ? json_tokener_parse_ex(tok, body, (int)(len > INT32_MAX ? INT32_MAX : len)) : NULL;
	bool whole = tok && json_tokener_get_error(tok) == json_tokener_success;
	const char *jerr = tok ? json_tokener_error_desc(json_tokener_get_error(tok)) : "out of memory";
	json_tokener_free(tok);
	if (!arr || !whole || !json_object_is_type(arr, json_type_array)) {
		json_object_put(arr);
		fibril_resp_error(resp, 400, "the body is not a JSON array of services%s%s",
				  whole ? "" : ": ", whole ? "" : jerr);
		return;
	}
	size_t n = json_object_array_length(arr);
	if (n > BATCH_MAX) {
		json_object_put(arr);
		fibril_resp_error(resp, 400, "the batch has %zu services, more than %u", n, BATCH_MAX);
		return;
	}
	struct batch b = {.spec = calloc(n ? n : 1, sizeof(*b.spec)),
			  .old = calloc(n ? n : 1, sizeof(*b.old)),
			  .id = calloc(n ? n : 1, sizeof(*b.id)), .n = n,
			  .id_owner = calloc((size_t)LB_SVC_ID_MAX + 1, sizeof(*b.id_owner))};
	size_t slots = 16;
	while (slots < 2 * n)
		slots *= 2;
	b.fe_slot = calloc(slots, sizeof(*b.fe_slot));
	b.fe_mask = slots - 1;
	struct lb_addr *mine = NULL;
	size_t nmine = 0, nnew = 0;
	int status = 0;
	if (!b.spec || !b.old || !b.id || !b.id_owner || !b.fe_slot ||
	    lb_node_addrs_list(fibril_config_string(lb_module_of(lb), "node-addresses"), &mine,
			       &nmine) < 0) {
		snprintf(err, sizeof(err), "out of memory");
		status = 500;
	}
	for (size_t i = 0; !status && i < n; i++) {
		char why[400];
		int rc = lb_svc_from_json(json_object_array_get_idx(arr, i), &b.spec[i], why, sizeof(why));
		if (rc < 0) {
			snprintf(err, sizeof(err), "services[%zu]: %s", i, why);
			status = rc == -ENOMEM ? 500 : 400;
			break;
		}
		b.spec[i]->source = LB_SRC_API;
		status = check_entry(lb, &b, i, mine, nmine, err, sizeof(err));
		nnew += !b.old[i];
	}
	free(mine);
	json_object_put(arr);
	struct lb_table *t = lb_table_of(lb);
	if (!status && nnew > (size_t)LB_SVC_ID_MAX - t->nsvc) {
		snprintf(err, sizeof(err), "the batch adds %zu frontends, %zu service IDs are free", nnew,
			 (size_t)LB_SVC_ID_MAX - t->nsvc);
		status = 507;
	}
	size_t done = 0;
	for (; !status && done < n; done++) {
		char why[400];
		int rc = lb_upsert(lb, &b.spec[done], &b.id[done], why, sizeof(why));
		if (rc < 0) {
			snprintf(err, sizeof(err), "services[%zu]: %s (nothing applied)", done, why);
			status = rc == -EINVAL ? 400 : rc == -EEXIST ? 409 : rc == -ENOSPC ? 507 : 500;
			roll_back(lb, &b, done);
			break;
		}
	}
	if (status) {
		lb_count_op(lb, "batch", status == 400 ? -EINVAL : status == 409 ? -EEXIST : -EIO);
		fibril_resp_error(resp, status, "%s", err);
		batch_free(&b);
		return;
	}
	lb_count_op(lb, "batch", 0);
	lb_api_update_gauges(lb);
	struct json_object *o = json_object_new_object(), *ids = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(ids, json_object_new_int(b.id[i]));
	json_object_object_add(o, "applied", json_object_new_int64((int64_t)n));
	json_object_object_add(o, "ids", ids);
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	batch_free(&b);
}
