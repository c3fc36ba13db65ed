/* modules/lb/maglev.c - Maglev consistent hashing (Eisenbud et al.,
 * NSDI 2016), as Cilium builds its lb_maglev tables: each backend gets a
 * permutation of the M slots from two hashes of its name (offset, skip),
 * and the backends take turns claiming their next free preferred slot
 * until the table is full. Removing one backend of N moves about 1/N of
 * the slots. The name is the backend's address and port, and the
 * backends are sorted by it first, so the same set always gives the same
 * table, whatever order it came in and across agent restarts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb_int.h"

struct maglev_scratch {
	size_t max;
	const struct lb_be_spec **sorted;
	uint32_t *offset, *skip, *pos;
};

bool lb_maglev_size_ok(uint64_t m)
{
	if (m < 7 || m > LB_MAGLEV_MAX)
		return false;
	for (uint64_t d = 2; d * d <= m; d++)
		if (m % d == 0)
			return false;
	return true;
}

void *lb_maglev_scratch_new(size_t max)
{
	struct maglev_scratch *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->max = max;
	s->sorted = calloc(max, sizeof(*s->sorted));
	s->offset = calloc(max, sizeof(uint32_t));
	s->skip = calloc(max, sizeof(uint32_t));
	s->pos = calloc(max, sizeof(uint32_t));
	if (!s->sorted || !s->offset || !s->skip || !s->pos) {
		lb_maglev_scratch_free(s);
		return NULL;
	}
	return s;
}

void lb_maglev_scratch_free(void *scratch)
{
	struct maglev_scratch *s = scratch;
	if (!s)
		return;
	free(s->sorted);
	free(s->offset);
	free(s->skip);
	free(s->pos);
	free(s);
}

/* 64-bit hash of the backend's name with a seed (FNV-1a, then murmur3's
 * finalizer to spread it) */
static uint64_t name_hash(const struct lb_be_spec *b, uint64_t seed)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;
	for (size_t i = 0; i < 16; i++) {
		h ^= b->addr.a[i];
		h *= 0x100000001b3ULL;
	}
	h ^= b->port & 0xff;
	h *= 0x100000001b3ULL;
	h ^= b->port >> 8;
	h *= 0x100000001b3ULL;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static int by_name(const void *a, const void *b)
{
	const struct lb_be_spec *x = *(const struct lb_be_spec *const *)a;
	const struct lb_be_spec *y = *(const struct lb_be_spec *const *)b;
	int c = memcmp(x->addr.a, y->addr.a, 16);
	return c ? c : (x->port > y->port) - (x->port < y->port);
}

#define EMPTY UINT32_MAX

int lb_maglev_build(const struct lb_be_spec *const *be, size_t n, uint32_t m, uint32_t *out,
		    void *scratch)
{
	struct maglev_scratch *s = scratch;
	if (!n || n > s->max || !m)
		return -EINVAL;
	memcpy(s->sorted, be, n * sizeof(*be));
	qsort(s->sorted, n, sizeof(*s->sorted), by_name);
	for (size_t i = 0; i < n; i++) {
		s->offset[i] = (uint32_t)(name_hash(s->sorted[i], 0x6d61676c6576ULL) % m);
		s->skip[i] = (uint32_t)(name_hash(s->sorted[i], 0x736b6970ULL) % (m - 1)) + 1;
		s->pos[i] = s->offset[i];
	}
	for (uint32_t j = 0; j < m; j++)
		out[j] = EMPTY;
	uint32_t filled = 0;
	for (;;) {
		for (size_t i = 0; i < n; i++) {
			uint32_t c = s->pos[i];
			while (out[c] != EMPTY) {
				c += s->skip[i];
				if (c >= m)
					c -= m;
			}
			out[c] = s->sorted[i]->id;
			c += s->skip[i];
			s->pos[i] = c >= m ? c - m : c;
			if (++filled == m)
				return 0;
		}
	}
}
