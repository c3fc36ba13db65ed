/* modules/lb/table.c - the lb module's service table: stable service IDs
 * (1..65535, by frontend) and backend IDs (by address, port and protocol,
 * shared between services, reference-counted), upserts and deletes that
 * program the maps through maps.c (a failed write leaves the table as it
 * was where it can be undone), the adoption of services restored from the
 * maps, and the small open-addressing hash both lookups (and origin.c's)
 * use. Like model.c it uses no host function. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb_int.h"

/* ---- hash: 24-byte keys -> uint32, open addressing ------------------------- */
#define KEYSZ 24
struct lb_hash_slot {
	uint8_t key[KEYSZ];
	uint32_t val;
	uint8_t used; /* 0 empty, 1 used, 2 deleted */
};
struct lb_hash {
	struct lb_hash_slot *s;
	size_t cap, n, dead; /* cap: power of two */
};

static uint64_t hash_key(const uint8_t *k)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < KEYSZ; i++) {
		h ^= k[i];
		h *= 0x100000001b3ULL;
	}
	return h ^ (h >> 29);
}

struct lb_hash *lb_hash_new(size_t cap)
{
	struct lb_hash *h = calloc(1, sizeof(*h));
	size_t c = 16;
	while (c < cap * 2)
		c <<= 1;
	if (!h || !(h->s = calloc(c, sizeof(*h->s)))) {
		free(h);
		return NULL;
	}
	h->cap = c;
	return h;
}

void lb_hash_free(struct lb_hash *h)
{
	if (h)
		free(h->s);
	free(h);
}

static struct lb_hash_slot *hash_find(const struct lb_hash *h, const void *key)
{
	size_t i = hash_key(key) & (h->cap - 1);
	for (size_t probe = 0; probe < h->cap; probe++, i = (i + 1) & (h->cap - 1)) {
		struct lb_hash_slot *s = &h->s[i];
		if (!s->used)
			return NULL;
		if (s->used == 1 && !memcmp(s->key, key, KEYSZ))
			return s;
	}
	return NULL;
}

bool lb_hash_get(const struct lb_hash *h, const void *key, uint32_t *val)
{
	struct lb_hash_slot *s = hash_find(h, key);
	if (s && val)
		*val = s->val;
	return s != NULL;
}

static int hash_grow(struct lb_hash *h)
{
	struct lb_hash n = {.cap = h->cap * 2};
	if (!(n.s = calloc(n.cap, sizeof(*n.s))))
		return -ENOMEM;
	for (size_t i = 0; i < h->cap; i++) {
		if (h->s[i].used != 1)
			continue;
		size_t j = hash_key(h->s[i].key) & (n.cap - 1);
		while (n.s[j].used)
			j = (j + 1) & (n.cap - 1);
		n.s[j] = h->s[i];
		n.n++;
	}
	free(h->s);
	*h = n;
	return 0;
}

int lb_hash_put(struct lb_hash *h, const void *key, uint32_t val)
{
	struct lb_hash_slot *s = hash_find(h, key);
	if (s) {
		s->val = val;
		return 0;
	}
	if ((h->n + h->dead + 1) * 2 > h->cap) {
		int rc = hash_grow(h);
		if (rc)
			return rc;
		h->dead = 0;
	}
	size_t i = hash_key(key) & (h->cap - 1);
	while (h->s[i].used == 1)
		i = (i + 1) & (h->cap - 1);
	if (h->s[i].used == 2)
		h->dead--;
	memcpy(h->s[i].key, key, KEYSZ);
	h->s[i].val = val;
	h->s[i].used = 1;
	h->n++;
	return 0;
}

void lb_hash_del(struct lb_hash *h, const void *key)
{
	struct lb_hash_slot *s = hash_find(h, key);
	if (!s)
		return;
	s->used = 2;
	h->n--;
	h->dead++;
}

static void tuple_key(uint8_t key[KEYSZ], const struct lb_addr *a, uint16_t port, uint8_t proto)
{
	memset(key, 0, KEYSZ);
	memcpy(key, a->a, 16);
	memcpy(key + 16, &port, 2);
	key[18] = proto;
}

void lb_frontend_key(uint8_t key[KEYSZ], const struct lb_addr *a, uint16_t port, uint8_t proto)
{
	tuple_key(key, a, port, proto);
}

/* ---- the table ------------------------------------------------------------------ */
int lb_table_init(struct lb_table *t, uint32_t be_max, uint32_t maglev_m, uint8_t default_alg)
{
	memset(t, 0, sizeof(*t));
	t->maps = (struct lb_maps){-1, -1, -1, -1, -1, -1};
	t->be_max = be_max;
	t->maglev_m = maglev_m;
	t->default_algorithm = default_alg;
	t->next_be = 1;
	t->next_svc = 1;
	if (!(t->svc = calloc(LB_SVC_ID_MAX + 1, sizeof(*t->svc))) ||
	    !(t->be = calloc((size_t)be_max + 1, sizeof(*t->be))) || !(t->fe = lb_hash_new(1024)) ||
	    !(t->beh = lb_hash_new(1024)) ||
	    !(t->maglev_buf = calloc(maglev_m ? maglev_m : 1, sizeof(uint32_t))) ||
	    !(t->maglev_scratch = lb_maglev_scratch_new(LB_BACKENDS_PER_SVC_MAX)) ||
	    !(t->sel = calloc(LB_BACKENDS_PER_SVC_MAX, sizeof(*t->sel)))) {
		lb_table_free(t);
		return -ENOMEM;
	}
	return 0;
}

void lb_table_free(struct lb_table *t)
{
	if (t->svc)
		for (size_t i = 0; i <= LB_SVC_ID_MAX; i++)
			lb_svc_free(t->svc[i]);
	free(t->svc);
	free(t->be);
	lb_hash_free(t->fe);
	lb_hash_free(t->beh);
	free(t->maglev_buf);
	lb_maglev_scratch_free(t->maglev_scratch);
	free(t->sel);
	struct lb_maps maps = t->maps;
	memset(t, 0, sizeof(*t));
	t->maps = maps; /* the fds belong to the caller */
}

struct lb_svc *lb_table_get(const struct lb_table *t, uint16_t id)
{
	return id ? t->svc[id] : NULL;
}

struct lb_svc *lb_table_find(const struct lb_table *t, const struct lb_addr *a, uint16_t port,
			     uint8_t proto)
{
	uint8_t key[KEYSZ];
	uint32_t id;
	tuple_key(key, a, port, proto);
	return lb_hash_get(t->fe, key, &id) ? t->svc[id] : NULL;
}

/* A reference to the backend (addr, port, proto): its existing ID, or a
 * new one. Returns the ID, or 0 when the table is full. *created tells. */
static uint32_t backend_ref(struct lb_table *t, const struct lb_be_spec *b, uint8_t proto,
			    bool *created)
{
	uint8_t key[KEYSZ];
	uint32_t id;
	tuple_key(key, &b->addr, b->port, proto);
	*created = false;
	if (lb_hash_get(t->beh, key, &id)) {
		t->be[id].refs++;
		return id;
	}
	if (t->nbe >= t->be_max)
		return 0;
	for (uint32_t n = 0; n < t->be_max; n++) {
		id = t->next_be;
		t->next_be = t->next_be >= t->be_max ? 1 : t->next_be + 1;
		if (!t->be[id].refs)
			break;
	}
	if (lb_hash_put(t->beh, key, id) < 0)
		return 0;
	t->be[id] = (struct lb_be_ent){.addr = b->addr, .port = b->port, .proto = proto,
				       .state = b->state, .refs = 1};
	t->nbe++;
	*created = true;
	return id;
}

static void backend_unref(struct lb_table *t, uint32_t id, bool unprogram)
{
	struct lb_be_ent *e = &t->be[id];
	if (!id || !e->refs || --e->refs)
		return;
	uint8_t key[KEYSZ];
	tuple_key(key, &e->addr, e->port, e->proto);
	lb_hash_del(t->beh, key);
	if (unprogram)
		lb_maps_backend_del(t, id);
	memset(e, 0, sizeof(*e));
	t->nbe--;
}

static uint16_t free_svc_id(struct lb_table *t)
{
	for (uint32_t n = 0; n < LB_SVC_ID_MAX; n++) {
		uint16_t id = t->next_svc;
		t->next_svc = t->next_svc >= LB_SVC_ID_MAX ? 1 : (uint16_t)(t->next_svc + 1);
		if (!t->svc[id])
			return id;
	}
	return 0;
}

int lb_table_upsert(struct lb_table *t, struct lb_svc **specp, uint16_t *out_id, char *err,
		    size_t errlen)
{
	struct lb_svc *s = *specp;
	struct lb_svc *old = lb_table_find(t, &s->addr, s->port, s->proto);
	char fe[80];
	lb_format_addrport(&s->addr, s->port, fe, sizeof(fe));
	if (s->id && old && old->id != s->id) {
		lb_seterr(err, errlen, "frontend %s/%s is service %u's, not %u", fe,
		       lb_proto_name(s->proto), old->id, s->id);
		return -EEXIST;
	}
	if (s->id && !old && t->svc[s->id]) {
		char ofe[80];
		lb_format_addrport(&t->svc[s->id]->addr, t->svc[s->id]->port, ofe, sizeof(ofe));
		lb_seterr(err, errlen, "service id %u is taken by frontend %s/%s", s->id, ofe,
		       lb_proto_name(t->svc[s->id]->proto));
		return -EEXIST;
	}
	if (!s->algorithm_set)
		s->algorithm = old && old->restored ? old->algorithm : t->default_algorithm;
	if (s->algorithm == LB_ALG_MAGLEV && !t->maglev_m) {
		lb_seterr(err, errlen, "algorithm maglev: no Maglev table size configured");
		return -EINVAL;
	}
	uint16_t id = old ? old->id : s->id ? s->id : free_svc_id(t);
	if (!id) {
		lb_seterr(err, errlen, "no free service ID (all %u in use)", LB_SVC_ID_MAX);
		return -ENOSPC;
	}
	s->id = id;
	/* backend IDs: references taken on the new set first, the old set's
	 * released after the maps are written */
	size_t got = 0;
	int rc = 0;
	for (; got < s->nbe; got++) {
		bool created;
		uint32_t bid = backend_ref(t, &s->be[got], s->proto, &created);
		if (!bid) {
			lb_seterr(err, errlen, "no free backend ID (all %u in use)", t->be_max);
			rc = -ENOSPC;
			break;
		}
		s->be[got].id = bid;
		bool changed = t->be[bid].state != s->be[got].state;
		t->be[bid].state = s->be[got].state;
		if ((created || changed) && (rc = lb_maps_backend_put(t, bid, err, errlen)) < 0) {
			got++;
			break;
		}
	}
	if (!rc)
		rc = lb_maps_program(t, s, old, err, errlen);
	if (rc < 0) {
		for (size_t i = 0; i < got; i++)
			backend_unref(t, s->be[i].id, true);
		if (old) /* restore the states the old set had */
			for (size_t i = 0; i < old->nbe; i++)
				t->be[old->be[i].id].state = old->be[i].state;
		s->id = 0;
		return rc;
	}
	if (old) {
		for (size_t i = 0; i < old->nbe; i++)
			backend_unref(t, old->be[i].id, true);
		lb_svc_free(old);
	} else {
		uint8_t key[KEYSZ];
		tuple_key(key, &s->addr, s->port, s->proto);
		if (lb_hash_put(t->fe, key, id) < 0) {
			lb_seterr(err, errlen, "out of memory");
			return -ENOMEM; /* programmed, but unknown to the table: unreachable in practice */
		}
		t->nsvc++;
	}
	t->svc[id] = s;
	*specp = NULL;
	if (out_id)
		*out_id = id;
	return 0;
}

int lb_table_delete(struct lb_table *t, uint16_t id, char *err, size_t errlen)
{
	struct lb_svc *s = lb_table_get(t, id);
	if (!s) {
		lb_seterr(err, errlen, "service %u does not exist", id);
		return -ENOENT;
	}
	int rc = lb_maps_unprogram(t, s, err, errlen);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < s->nbe; i++)
		backend_unref(t, s->be[i].id, true);
	uint8_t key[KEYSZ];
	tuple_key(key, &s->addr, s->port, s->proto);
	lb_hash_del(t->fe, key);
	t->svc[id] = NULL;
	t->nsvc--;
	lb_svc_free(s);
	return 0;
}

/* used by maps.c's restore: adopt a service read from the maps as is */
int lb_table_adopt(struct lb_table *t, struct lb_svc *s, char *err, size_t errlen);
int lb_table_adopt(struct lb_table *t, struct lb_svc *s, char *err, size_t errlen)
{
	uint8_t key[KEYSZ];
	if (t->svc[s->id] || lb_table_find(t, &s->addr, s->port, s->proto)) {
		lb_seterr(err, errlen, "service %u: duplicate in the maps", s->id);
		return -EEXIST;
	}
	for (size_t i = 0; i < s->nbe; i++) {
		struct lb_be_spec *b = &s->be[i];
		struct lb_be_ent *e = &t->be[b->id];
		if (b->id > t->be_max) {
			lb_seterr(err, errlen, "service %u: backend ID %u is above the maximum %u", s->id,
			       b->id, t->be_max);
			for (size_t j = 0; j < i; j++)
				backend_unref(t, s->be[j].id, false);
			return -ERANGE;
		}
		if (!e->refs) {
			tuple_key(key, &b->addr, b->port, s->proto);
			if (lb_hash_put(t->beh, key, b->id) < 0)
				return -ENOMEM;
			*e = (struct lb_be_ent){.addr = b->addr, .port = b->port, .proto = s->proto,
						.state = b->state};
			t->nbe++;
		}
		e->refs++;
		if (b->id >= t->next_be)
			t->next_be = b->id >= t->be_max ? 1 : b->id + 1;
	}
	tuple_key(key, &s->addr, s->port, s->proto);
	if (lb_hash_put(t->fe, key, s->id) < 0)
		return -ENOMEM;
	t->svc[s->id] = s;
	t->nsvc++;
	if (s->id >= t->next_svc)
		t->next_svc = s->id >= LB_SVC_ID_MAX ? 1 : (uint16_t)(s->id + 1);
	return 0;
}
