/* tests/unit/test_grow.c - unit tests of the modules' growable-array helper
 * (modules/common/grow.h, mod_grow), which the lb, policy, endpoint,
 * hubble-lite, kvstore-etcd and ipam-cluster-pool modules use for their
 * lists: no reallocation while there is room, the first size, doubling
 * with the contents kept, and refusal - the array and its capacity left as
 * they were - when the new capacity or its size in bytes would overflow. */
#include "cunit_main.h"
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_first_size_then_doubling(void)
{
	uint32_t *v = NULL;
	size_t n = 0, cap = 0;
	for (uint32_t i = 0; i < 1000; i++) {
		uint32_t *g = mod_grow(v, n, &cap, sizeof(*g), 16);
		CU_ASSERT_PTR_NOT_NULL_FATAL(g);
		v = g;
		v[n++] = i;
		if (n <= 16)
			CU_ASSERT_EQUAL(cap, 16);
	}
	CU_ASSERT_EQUAL(cap, 1024); /* 16 doubled six times */
	for (uint32_t i = 0; i < 1000; i++)
		CU_ASSERT_EQUAL(v[i], i);
	free(v);
}

static void test_room_left_returns_the_same_array(void)
{
	size_t cap = 8;
	char *v = malloc(cap);
	CU_ASSERT_PTR_NOT_NULL_FATAL(v);
	for (size_t n = 0; n < 8; n++)
		CU_ASSERT_PTR_EQUAL(mod_grow(v, n, &cap, 1, 4), v);
	CU_ASSERT_EQUAL(cap, 8);
	free(v);
}

static void test_first_zero_means_one(void)
{
	size_t cap = 0;
	int *v = mod_grow(NULL, 0, &cap, sizeof(int), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(v);
	CU_ASSERT_EQUAL(cap, 1);
	free(v);
}

/* A capacity whose double does not fit in a size_t: refused, nothing
 * changed (the open-coded "cap * 2" wrapped to a tiny allocation). */
static void test_capacity_overflow_refused(void)
{
	char buf[4];
	size_t cap = SIZE_MAX / 2 + 1;
	CU_ASSERT_PTR_NULL(mod_grow(buf, cap, &cap, 1, 64));
	CU_ASSERT_EQUAL(cap, SIZE_MAX / 2 + 1);
}

/* A capacity that fits but whose size in bytes does not ("cap *
 * sizeof(*v)" wrapped). */
static void test_bytes_overflow_refused(void)
{
	char buf[4];
	size_t cap = SIZE_MAX / 64 + 1; /* doubled: fits; times 32 bytes: does not */
	CU_ASSERT_PTR_NULL(mod_grow(buf, cap, &cap, 32, 64));
	CU_ASSERT_EQUAL(cap, SIZE_MAX / 64 + 1);
	cap = 0;
	CU_ASSERT_PTR_NULL(mod_grow(NULL, 0, &cap, SIZE_MAX / 2, 4));
	CU_ASSERT_EQUAL(cap, 0);
}

FIBRIL_TEST_MAIN("grow", NULL, NULL, FIBRIL_TEST(test_first_size_then_doubling),
		 FIBRIL_TEST(test_room_left_returns_the_same_array), FIBRIL_TEST(test_first_zero_means_one),
		 FIBRIL_TEST(test_capacity_overflow_refused), FIBRIL_TEST(test_bytes_overflow_refused))
