/* tests/unit/cunit_main.h - the shared main() of the CUnit test programs:
 * each test file defines its suites with FIBRIL_TEST_SUITES and gets a main
 * that runs them verbosely and exits non-zero on any failure. */
#ifndef FIBRIL_CUNIT_MAIN_H
#define FIBRIL_CUNIT_MAIN_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdlib.h>

struct fibril_test {
	const char *name;
	void (*fn)(void);
};

/* FIBRIL_TEST_MAIN("suite", setup_or_NULL, teardown_or_NULL, tests...) */
#define FIBRIL_TEST_MAIN(suite_name, setup, teardown, ...)                          \
	int main(void)                                                              \
	{                                                                           \
		static const struct fibril_test tests[] = {__VA_ARGS__};            \
		if (CU_initialize_registry() != CUE_SUCCESS)                        \
			return 2;                                                   \
		CU_pSuite suite = CU_add_suite(suite_name, setup, teardown);        \
		for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)       \
			CU_add_test(suite, tests[i].name, tests[i].fn);             \
		CU_basic_set_mode(CU_BRM_VERBOSE);                                  \
		CU_basic_run_tests();                                               \
		unsigned failed = CU_get_number_of_failures() +                     \
				  CU_get_number_of_tests_failed();                  \
		unsigned ran = CU_get_number_of_tests_run();                        \
		CU_cleanup_registry();                                              \
		return (failed || ran == 0) ? 1 : 0;                                \
	}

#define FIBRIL_TEST(fn) {#fn, fn}

#endif
