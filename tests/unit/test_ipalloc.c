/* placeholder */
#include "cunit_main.h"
static void t_nothing(void) { CU_ASSERT(1); }
FIBRIL_TEST_MAIN("ipalloc", NULL, NULL, FIBRIL_TEST(t_nothing))
