/* modules/lb/maps.c - the lb module's BPF maps (layouts in
 * bpf/fibril_lb.h): writing a service (backends, slots, Maglev table,
 * reverse NAT, affinity matches, then the master entry last, then the
 * slots no longer used, so a lookup never meets a count larger than the
 * slots written), removing one (master first), and restoring the whole
 * table - services, backends, their IDs and states - from the pinned maps
 * at start, before anything is reprogrammed (Cilium's RestoreServices).
 * Entries no service refers to after a restore are removed. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "grow.h"
#include "lb_int.h"

int lb_table_adopt(struct lb_table *t, struct lb_svc *s, char *err, size_t errlen);

static int fail(char *err, size_t len, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t len, int rc, const char *fmt, ...)
{
	char what[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (err && len)
		snprintf(err, len, "%s: %s", what, strerror(rc < 0 ? -rc : rc));
	return -EIO;
}

void lb_svc_key_of(const struct lb_svc *s, uint16_t slot, struct lb_svc_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->addr, s->addr.a, 16);
	k->port = htons(s->port);
	k->slot = slot;
	k->proto = s->proto;
}

int lb_maps_backend_put(struct lb_table *t, uint32_t id, char *err, size_t errlen)
{
	const struct lb_be_ent *e = &t->be[id];
	struct lb_backend v = {.port = htons(e->port), .proto = e->proto, .state = e->state};
	memcpy(v.addr, e->addr.a, 16);
	if (t->maps.backends < 0)
		return 0;
	if (bpf_map_update_elem(t->maps.backends, &id, &v, BPF_ANY) < 0) {
		t->map_errors++;
		return fail(err, errlen, errno, "cannot write backend %u to " LB_MAP_BACKENDS, id);
	}
	return 0;
}

void lb_maps_backend_del(struct lb_table *t, uint32_t id)
{
	if (t->maps.backends >= 0 && bpf_map_delete_elem(t->maps.backends, &id) < 0 &&
	    errno != ENOENT)
		t->map_errors++;
}

static bool selectable(const struct lb_be_spec *b, bool fallback)
{
	return fallback ? b->state == LB_BE_TERMINATING : b->state == LB_BE_ACTIVE;
}

static void del_quiet(struct lb_table *t, int fd, const void *key)
{
	if (fd >= 0 && bpf_map_delete_elem(fd, key) < 0 && errno != ENOENT)
		t->map_errors++;
}

static void range_key(const struct lb_svc *s, const struct lb_cidr *c, struct lb_src_range_key *k)
{
	memset(k, 0, sizeof(*k));
	k->prefixlen = 32u + c->plen;
	k->rev_nat_id = htons(s->id);
	memcpy(k->addr, c->addr.a, 16);
}

static bool has_range(const struct lb_svc *s, const struct lb_cidr *c)
{
	for (size_t i = 0; i < s->nranges; i++)
		if (s->ranges[i].plen == c->plen && !memcmp(&s->ranges[i].addr, &c->addr, 16))
			return true;
	return false;
}

/* A failed update: the ranges s->ranges[0..n) written that old has not go. */
static void drop_new_ranges(struct lb_table *t, const struct lb_svc *s, const struct lb_svc *old,
			    size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct lb_src_range_key rk;
		if (old && has_range(old, &s->ranges[i]))
			continue;
		range_key(s, &s->ranges[i], &rk);
		del_quiet(t, t->maps.src_range, &rk);
	}
}

static bool in_selectable(const struct lb_svc *s, uint32_t id)
{
	for (size_t i = 0; i < s->nbe; i++)
		if (s->be[i].id == id)
			return selectable(&s->be[i], s->fallback);
	return false;
}

int lb_maps_program(struct lb_table *t, struct lb_svc *s, const struct lb_svc *old, char *err,
		    size_t errlen)
{
	char fe[80];
	lb_format_addrport(&s->addr, s->port, fe, sizeof(fe));
	size_t nact = 0, nterm = 0;
	for (size_t i = 0; i < s->nbe; i++) {
		nact += s->be[i].state == LB_BE_ACTIVE;
		nterm += s->be[i].state == LB_BE_TERMINATING;
	}
	s->fallback = !nact && nterm;
	/* slot order: the selectable ones, then the rest (kept for restore) */
	uint16_t slot = 0;
	const struct lb_be_spec **sel = t->sel;
	size_t nsel = 0;
	struct lb_svc_key k;
	struct lb_svc_val v;
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < s->nbe; i++) {
			if (selectable(&s->be[i], s->fallback) != (pass == 0))
				continue;
			if (pass == 0)
				sel[nsel++] = &s->be[i];
			slot++;
			lb_svc_key_of(s, slot, &k);
			memset(&v, 0, sizeof(v));
			v.backend_id = s->be[i].id;
			v.rev_nat_id = s->id;
			v.flags = s->be[i].state; /* this service's view of it, for restore */
			if (t->maps.services >= 0 &&
			    bpf_map_update_elem(t->maps.services, &k, &v, BPF_ANY) < 0) {
				t->map_errors++;
				return fail(err, errlen, errno, "service %s: cannot write slot %u", fe, slot);
			}
		}
	uint32_t id32 = s->id;
	if (s->algorithm == LB_ALG_MAGLEV && nsel && t->maps.maglev >= 0) {
		lb_maglev_build(sel, nsel, t->maglev_m, t->maglev_buf, t->maglev_scratch);
		if (bpf_map_update_elem(t->maps.maglev, &id32, t->maglev_buf, BPF_ANY) < 0) {
			t->map_errors++;
			return fail(err, errlen, errno, "service %s: cannot write its Maglev table "
							"(" LB_MAP_MAGLEV " full?)", fe);
		}
	} else if (old && old->algorithm == LB_ALG_MAGLEV) {
		del_quiet(t, t->maps.maglev, &id32);
	}
	struct lb_revnat rn = {.port = htons(s->port)};
	memcpy(rn.addr, s->addr.a, 16);
	if (t->maps.revnat >= 0 && bpf_map_update_elem(t->maps.revnat, &id32, &rn, BPF_ANY) < 0) {
		t->map_errors++;
		return fail(err, errlen, errno, "service %s: cannot write its reverse NAT entry", fe);
	}
	if (s->affinity && t->maps.aff_match >= 0) {
		uint8_t one = 1;
		for (size_t i = 0; i < nsel; i++) {
			struct lb_aff_match_key mk = {.backend_id = sel[i]->id, .rev_nat_id = s->id};
			if (bpf_map_update_elem(t->maps.aff_match, &mk, &one, BPF_ANY) < 0) {
				t->map_errors++;
				return fail(err, errlen, errno, "service %s: cannot write " LB_MAP_AFF_MATCH,
					    fe);
			}
		}
	}
	/* loadBalancerSourceRanges: in place before the master says to check them */
	for (size_t i = 0; i < s->nranges && t->maps.src_range >= 0; i++) {
		struct lb_src_range_key rk;
		uint8_t one = 1;
		range_key(s, &s->ranges[i], &rk);
		if (bpf_map_update_elem(t->maps.src_range, &rk, &one, BPF_ANY) < 0) {
			int e = errno;
			t->map_errors++;
			drop_new_ranges(t, s, old, i);
			return fail(err, errlen, e, "service %s: cannot write its source ranges "
							"(" LB_MAP_SRC_RANGE " full?)", fe);
		}
	}
	/* the master: from now on lookups use the new slots */
	lb_svc_key_of(s, 0, &k);
	memset(&v, 0, sizeof(v));
	v.count = (uint16_t)nsel;
	v.qcount = (uint16_t)(s->nbe - nsel);
	v.rev_nat_id = s->id;
	v.flags = (uint8_t)((s->type & LB_SVC_TYPE_MASK) | (s->affinity ? LB_F_AFFINITY : 0) |
			    (s->ext_local ? LB_F_EXT_LOCAL : 0) | (s->int_local ? LB_F_INT_LOCAL : 0) |
			    (s->fallback ? LB_F_FALLBACK : 0) | (s->nranges ? LB_F_SRC_RANGES : 0));
	v.algorithm = s->algorithm;
	v.affinity_timeout = s->affinity_timeout;
	if (t->maps.services >= 0 && bpf_map_update_elem(t->maps.services, &k, &v, BPF_ANY) < 0) {
		int e = errno;
		t->map_errors++;
		drop_new_ranges(t, s, old, s->nranges); /* the old version stays */
		return fail(err, errlen, e, "service %s: cannot write its master entry (" LB_MAP_SERVICES
					    " full?)", fe);
	}
	/* what the old version had and this one has not */
	if (old) {
		for (size_t i = 0; i < old->nranges; i++) {
			struct lb_src_range_key rk;
			if (has_range(s, &old->ranges[i]))
				continue;
			range_key(s, &old->ranges[i], &rk);
			del_quiet(t, t->maps.src_range, &rk);
		}
		for (uint16_t i = (uint16_t)(s->nbe + 1); i <= old->slots; i++) {
			lb_svc_key_of(s, i, &k);
			del_quiet(t, t->maps.services, &k);
		}
		if (old->affinity)
			for (size_t i = 0; i < old->nbe; i++) {
				if (!selectable(&old->be[i], old->fallback) ||
				    (s->affinity && in_selectable(s, old->be[i].id)))
					continue;
				struct lb_aff_match_key mk = {.backend_id = old->be[i].id,
							      .rev_nat_id = s->id};
				del_quiet(t, t->maps.aff_match, &mk);
			}
	}
	s->slots = (uint16_t)s->nbe;
	s->count = (uint16_t)nsel;
	return 0;
}

int lb_maps_unprogram(struct lb_table *t, const struct lb_svc *s, char *err, size_t errlen)
{
	struct lb_svc_key k;
	lb_svc_key_of(s, 0, &k);
	if (t->maps.services >= 0 && bpf_map_delete_elem(t->maps.services, &k) < 0 &&
	    errno != ENOENT) {
		t->map_errors++;
		char fe[80];
		lb_format_addrport(&s->addr, s->port, fe, sizeof(fe));
		return fail(err, errlen, errno, "service %s: cannot remove its master entry", fe);
	}
	for (uint16_t i = 1; i <= s->slots; i++) {
		lb_svc_key_of(s, i, &k);
		del_quiet(t, t->maps.services, &k);
	}
	uint32_t id32 = s->id;
	if (s->algorithm == LB_ALG_MAGLEV)
		del_quiet(t, t->maps.maglev, &id32);
	del_quiet(t, t->maps.revnat, &id32);
	for (size_t i = 0; i < s->nranges; i++) {
		struct lb_src_range_key rk;
		range_key(s, &s->ranges[i], &rk);
		del_quiet(t, t->maps.src_range, &rk);
	}
	if (s->affinity)
		for (size_t i = 0; i < s->nbe; i++) {
			struct lb_aff_match_key mk = {.backend_id = s->be[i].id, .rev_nat_id = s->id};
			del_quiet(t, t->maps.aff_match, &mk);
		}
	return 0;
}

/* ---- restore ---------------------------------------------------------------------- */
static struct lb_svc *restore_one(struct lb_table *t, const struct lb_svc_key *mk,
				  const struct lb_svc_val *mv, bool *damaged)
{
	struct lb_svc *s = calloc(1, sizeof(*s));
	size_t n = (size_t)mv->count + mv->qcount;
	if (!s || (n && !(s->be = calloc(n, sizeof(*s->be))))) {
		free(s);
		return NULL;
	}
	s->id = mv->rev_nat_id;
	memcpy(s->addr.a, mk->addr, 16);
	s->port = ntohs(mk->port);
	s->proto = mk->proto;
	s->type = mv->flags & LB_SVC_TYPE_MASK;
	s->affinity = mv->flags & LB_F_AFFINITY;
	s->ext_local = mv->flags & LB_F_EXT_LOCAL;
	s->int_local = mv->flags & LB_F_INT_LOCAL;
	s->fallback = mv->flags & LB_F_FALLBACK;
	s->algorithm = mv->algorithm == LB_ALG_MAGLEV ? LB_ALG_MAGLEV : LB_ALG_RANDOM;
	s->algorithm_set = true;
	s->affinity_timeout = mv->affinity_timeout ? mv->affinity_timeout
						   : LB_AFFINITY_TIMEOUT_DEFAULT;
	s->source = LB_SRC_RESTORED; /* until origin.c knows better */
	s->restored = true;
	s->slots = (uint16_t)n;
	s->count = mv->count;
	for (uint16_t i = 1; i <= n; i++) {
		struct lb_svc_key k = *mk;
		struct lb_svc_val v;
		struct lb_backend b;
		k.slot = i;
		if (bpf_map_lookup_elem(t->maps.services, &k, &v) < 0 || !v.backend_id ||
		    bpf_map_lookup_elem(t->maps.backends, &v.backend_id, &b) < 0 ||
		    b.proto != s->proto || v.backend_id > t->be_max) {
			*damaged = true;
			continue;
		}
		bool dup = false;
		for (size_t j = 0; j < s->nbe; j++)
			dup |= s->be[j].id == v.backend_id;
		if (dup) {
			*damaged = true;
			continue;
		}
		struct lb_be_spec *be = &s->be[s->nbe++];
		memcpy(be->addr.a, b.addr, 16);
		be->port = ntohs(b.port);
		be->state = v.flags <= LB_BE_MAINTENANCE ? v.flags : LB_BE_NOT_READY;
		be->id = v.backend_id;
	}
	return s;
}

/* Each restored service's source ranges from lb_src_range; the entries of
 * no service go. */
static void restore_ranges(struct lb_table *t)
{
	struct lb_src_range_key key, next, *cur = NULL, *gone = NULL;
	size_t ng = 0, gcap = 0;
	if (t->maps.src_range < 0)
		return;
	while (bpf_map_get_next_key(t->maps.src_range, cur, &next) == 0) {
		key = next;
		cur = &key;
		uint16_t id = ntohs(key.rev_nat_id);
		struct lb_svc *s = id ? t->svc[id] : NULL;
		struct lb_cidr c = {.plen = (uint8_t)(key.prefixlen - 32)};
		memcpy(c.addr.a, key.addr, 16);
		if (s && key.prefixlen >= 32 && key.prefixlen <= 160 &&
		    s->nranges < LB_SRC_RANGES_PER_SVC_MAX) {
			struct lb_cidr *r = realloc(s->ranges, (s->nranges + 1) * sizeof(*r));
			if (r) {
				s->ranges = r;
				s->ranges[s->nranges++] = c;
				continue;
			}
		}
		struct lb_src_range_key *g = mod_grow(gone, ng, &gcap, sizeof(*g), 16);
		if (!g)
			break;
		gone = g;
		gone[ng++] = key;
	}
	for (size_t i = 0; i < ng; i++)
		del_quiet(t, t->maps.src_range, &gone[i]);
	free(gone);
}

int lb_table_restore(struct lb_table *t, size_t *skipped, char *err, size_t errlen)
{
	int restored = 0;
	*skipped = 0;
	if (t->maps.services < 0 || t->maps.backends < 0)
		return 0;
	struct lb_svc_key key, next;
	struct lb_svc_key *cur = NULL;
	/* the masters first (the walk must not see the map change under it) */
	size_t nm = 0, cap = 0;
	struct lb_svc_key *masters = NULL;
	while (bpf_map_get_next_key(t->maps.services, cur, &next) == 0) {
		key = next;
		cur = &key;
		if (key.slot)
			continue;
		struct lb_svc_key *m = mod_grow(masters, nm, &cap, sizeof(*m), 256);
		if (!m) {
			free(masters);
			return -ENOMEM;
		}
		masters = m;
		masters[nm++] = key;
	}
	for (size_t i = 0; i < nm; i++) {
		struct lb_svc_val mv;
		bool damaged = false;
		if (bpf_map_lookup_elem(t->maps.services, &masters[i], &mv) < 0)
			continue;
		struct lb_svc *s = mv.rev_nat_id ? restore_one(t, &masters[i], &mv, &damaged) : NULL;
		char e[200] = "";
		if (!s || lb_table_adopt(t, s, e, sizeof(e)) < 0) {
			if (!*skipped && err)
				snprintf(err, errlen, "%s", e[0] ? e : "a master entry without an ID");
			(*skipped)++;
			lb_svc_free(s);
			/* leave no orphan master behind: its frontend is unusable */
			del_quiet(t, t->maps.services, &masters[i]);
			continue;
		}
		if (damaged) { /* rewrite what is left, consistently */
			struct lb_svc copy = *s;
			copy.be = NULL;
			copy.nbe = 0;
			lb_maps_program(t, s, &copy, e, sizeof(e));
		}
		restored++;
	}
	free(masters);
	restore_ranges(t);
	/* entries nothing refers to: backends, reverse NAT, Maglev tables */
	uint32_t id, nid, *cid = NULL;
	uint32_t *gone = NULL;
	size_t ng = 0, gcap = 0;
	for (int map = 0; map < 3; map++) {
		int fd = map == 0 ? t->maps.backends : map == 1 ? t->maps.revnat : t->maps.maglev;
		if (fd < 0)
			continue;
		ng = 0;
		cid = NULL;
		while (bpf_map_get_next_key(fd, cid, &nid) == 0) {
			id = nid;
			cid = &id;
			bool used = map == 0 ? id <= t->be_max && t->be[id].refs
					     : id <= LB_SVC_ID_MAX && t->svc[id] &&
						       (map == 1 || t->svc[id]->algorithm == LB_ALG_MAGLEV);
			if (used)
				continue;
			uint32_t *g = mod_grow(gone, ng, &gcap, sizeof(*g), 64);
			if (!g)
				break;
			gone = g;
			gone[ng++] = id;
		}
		for (size_t i = 0; i < ng; i++)
			del_quiet(t, fd, &gone[i]);
	}
	free(gone);
	return restored;
}
