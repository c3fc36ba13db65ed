/* modules/hubble-lite/services.c - the services flows are annotated with:
 * a lookup by (address, port, protocol) built from the lb module's
 * service events (<fibril/lb.h>, topic lb.service), as Hubble keeps a
 * service cache to name a flow's service. The socket-level LB translates
 * at connect(), so a pod's packets carry the backend's address: an address
 * is looked up among the frontends first, then among the backends (a
 * backend several services share names the one updated last). No SDK
 * calls, so the fuzz target links it alone. */
#include "grow.h"
#include "hubble.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/lb.h>

#define KEY_LEN 20 /* addr 16, port 2, proto 1, a zero byte */

struct svc_ent {
	struct hl_service name;
	size_t nkeys;
	uint8_t (*keys)[KEY_LEN]; /* the frontend first, then the backends */
};

/* One per (address, port, protocol), so a lookup walks no duplicates: the
 * service it is the frontend of, and those it is a backend of (the last
 * updated last). */
struct addr_ent {
	uint8_t key[KEY_LEN];
	struct svc_ent *frontend_of;
	struct svc_ent **backend_of;
	size_t nbackend_of, cap;
	struct addr_ent *next;
};

struct hl_svcmap {
	struct svc_ent **by_id[256]; /* by ID: pages of 256, made on use */
	struct addr_ent **b;
	size_t nb, n, nsvc;
};

/* a multiply-xor mix of the key's three words (a lookup per flow end:
 * cheaper than a byte loop) */
static uint64_t hash_key(const uint8_t *k)
{
	uint64_t a, b;
	uint32_t c;
	memcpy(&a, k, 8);
	memcpy(&b, k + 8, 8);
	memcpy(&c, k + 16, 4);
	uint64_t h = (a ^ 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
	h = (h ^ b ^ (h >> 31)) * 0x94d049bb133111ebULL;
	h = (h ^ c ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 32);
}

static void make_key(uint8_t key[KEY_LEN], const uint8_t addr[16], uint16_t port, uint8_t proto)
{
	memcpy(key, addr, 16);
	memcpy(key + 16, &port, 2);
	key[18] = proto;
	key[19] = 0;
}

struct hl_svcmap *hl_svcmap_new(void)
{
	struct hl_svcmap *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->nb = 1024;
	m->b = calloc(m->nb, sizeof(*m->b));
	if (!m->b) {
		hl_svcmap_free(m);
		return NULL;
	}
	return m;
}

static struct addr_ent *find_addr(const struct hl_svcmap *m, const uint8_t *key)
{
	for (struct addr_ent *e = m->b[hash_key(key) & (m->nb - 1)]; e; e = e->next)
		if (!memcmp(e->key, key, KEY_LEN))
			return e;
	return NULL;
}

static void unlink_addr(struct hl_svcmap *m, const uint8_t *key, const struct svc_ent *svc)
{
	for (struct addr_ent **pp = &m->b[hash_key(key) & (m->nb - 1)]; *pp; pp = &(*pp)->next) {
		struct addr_ent *e = *pp;
		if (memcmp(e->key, key, KEY_LEN))
			continue;
		if (e->frontend_of == svc)
			e->frontend_of = NULL;
		for (uint32_t i = 0; i < e->nbackend_of; i++)
			if (e->backend_of[i] == svc) {
				memmove(&e->backend_of[i], &e->backend_of[i + 1],
					(e->nbackend_of - i - 1) * sizeof(e->backend_of[0]));
				e->nbackend_of--;
				break;
			}
		if (!e->frontend_of && !e->nbackend_of) {
			*pp = e->next;
			free(e->backend_of);
			free(e);
			m->n--;
		}
		return;
	}
}

static void remove_svc(struct hl_svcmap *m, uint16_t id)
{
	struct svc_ent *s = m->by_id[id >> 8] ? m->by_id[id >> 8][id & 255] : NULL;
	if (!s)
		return;
	for (size_t i = 0; i < s->nkeys; i++)
		unlink_addr(m, s->keys[i], s);
	free(s->keys);
	free(s);
	m->by_id[id >> 8][id & 255] = NULL;
	m->nsvc--;
}

static void grow(struct hl_svcmap *m)
{
	size_t nb = m->nb * 2;
	struct addr_ent **b = calloc(nb, sizeof(*b));
	if (!b)
		return; /* longer chains, still right */
	for (size_t i = 0; i < m->nb; i++)
		for (struct addr_ent *e = m->b[i], *next; e; e = next) {
			next = e->next;
			size_t j = hash_key(e->key) & (nb - 1);
			e->next = b[j];
			b[j] = e;
		}
	free(m->b);
	m->b = b;
	m->nb = nb;
}

static int link_addr(struct hl_svcmap *m, const uint8_t *key, struct svc_ent *svc, bool frontend)
{
	struct addr_ent *e = find_addr(m, key);
	if (!e) {
		if (!(e = calloc(1, sizeof(*e))))
			return -ENOMEM;
		if (m->n >= m->nb)
			grow(m);
		memcpy(e->key, key, KEY_LEN);
		size_t i = hash_key(key) & (m->nb - 1);
		e->next = m->b[i];
		m->b[i] = e;
		m->n++;
	}
	if (frontend) {
		e->frontend_of = svc;
		return 0;
	}
	struct svc_ent **v = mod_grow(e->backend_of, e->nbackend_of, &e->cap, sizeof(*v), 2);
	if (!v) {
		if (!e->frontend_of && !e->nbackend_of)
			unlink_addr(m, key, NULL);
		return -ENOMEM;
	}
	e->backend_of = v;
	e->backend_of[e->nbackend_of++] = svc; /* a shared backend names the last updated */
	return 0;
}

void hl_copy_str(char *dst, size_t len, const char *src, size_t srclen)
{
	size_t n = strnlen(src, srclen);
	if (n >= len)
		n = len - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

int hl_svcmap_apply(struct hl_svcmap *m, const void *payload, size_t len)
{
	struct fibril_lb_service_event ev;
	size_t need = offsetof(struct fibril_lb_service_event, backends) + sizeof(ev.backends);
	if (len < need)
		return -EINVAL;
	memset(&ev, 0, sizeof(ev));
	memcpy(&ev, payload, len < sizeof(ev) ? len : sizeof(ev));
	if (ev.sz < need || ev.sz > len || !ev.id ||
	    (ev.op != FIBRIL_LB_SERVICE_UPSERTED && ev.op != FIBRIL_LB_SERVICE_DELETED))
		return -EINVAL;
	size_t stride = fibril_lb_backend_stride(&ev); /* the array's element size */
	if (ev.nbackends && (ev.backends < ev.sz || ev.backends > len ||
			     stride < FIBRIL_LB_BACKEND_ADDR_SZ_V1 || stride > 4096 ||
			     ev.nbackends > (len - ev.backends) / stride))
		return -EINVAL;
	remove_svc(m, ev.id);
	if (ev.op == FIBRIL_LB_SERVICE_DELETED || !ev.name[0])
		return 0; /* a service without a name names no flow */
	if (!m->by_id[ev.id >> 8] && !(m->by_id[ev.id >> 8] = calloc(256, sizeof(struct svc_ent *))))
		return -ENOMEM;
	struct svc_ent *s = calloc(1, sizeof(*s));
	if (!s || !(s->keys = calloc((size_t)ev.nbackends + 1, KEY_LEN))) {
		free(s);
		return -ENOMEM;
	}
	hl_copy_str(s->name.ns, sizeof(s->name.ns), ev.namespace_, sizeof(ev.namespace_));
	hl_copy_str(s->name.name, sizeof(s->name.name), ev.name, sizeof(ev.name));
	m->by_id[ev.id >> 8][ev.id & 255] = s;
	m->nsvc++;
	make_key(s->keys[s->nkeys], ev.addr, ev.port, ev.proto);
	if (link_addr(m, s->keys[s->nkeys], s, true) == 0)
		s->nkeys++;
	size_t first_be = s->nkeys;
	for (uint32_t i = 0; i < ev.nbackends; i++) {
		struct fibril_lb_backend_addr b;
		if (fibril_lb_backend_get(&ev, payload, len, i, &b))
			break; /* cannot happen: the bounds were checked above */
		make_key(s->keys[s->nkeys], b.addr, b.port, ev.proto);
		bool dup = false;
		for (size_t j = first_be; j < s->nkeys && !dup; j++)
			dup = !memcmp(s->keys[j], s->keys[s->nkeys], KEY_LEN);
		if (!dup && link_addr(m, s->keys[s->nkeys], s, false) == 0)
			s->nkeys++;
	}
	return 0;
}

const struct hl_service *hl_svcmap_lookup(const struct hl_svcmap *m, uint8_t family,
					  const uint8_t *addr, uint16_t port, uint8_t proto)
{
	static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	uint8_t a[16], key[KEY_LEN];
	if (!m || !m->nsvc || (family != 4 && family != 6))
		return NULL;
	if (family == 4) {
		memcpy(a, v4_prefix, 12);
		memcpy(a + 12, addr, 4);
	} else {
		memcpy(a, addr, 16);
	}
	make_key(key, a, port, proto);
	const struct addr_ent *e = find_addr(m, key);
	if (!e)
		return NULL;
	if (e->frontend_of)
		return &e->frontend_of->name;
	return e->nbackend_of ? &e->backend_of[e->nbackend_of - 1]->name : NULL;
}

size_t hl_svcmap_count(const struct hl_svcmap *m)
{
	return m ? m->nsvc : 0;
}

void hl_svcmap_free(struct hl_svcmap *m)
{
	if (!m)
		return;
	for (size_t page = 0; page < 256; page++) {
		for (size_t i = 0; m->by_id[page] && i < 256; i++)
			if (m->by_id[page][i]) {
				free(m->by_id[page][i]->keys);
				free(m->by_id[page][i]);
			}
		free(m->by_id[page]);
	}
	if (m->b)
		for (size_t i = 0; i < m->nb; i++)
			for (struct addr_ent *e = m->b[i], *next; e; e = next) {
				next = e->next;
				free(e->backend_of);
				free(e);
			}
	free(m->b);
	free(m);
}
