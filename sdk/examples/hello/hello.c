/* placeholder */
#include <fibril/fibril.h>
FIBRIL_MODULE(.name = "hello", .version = "0.1");
