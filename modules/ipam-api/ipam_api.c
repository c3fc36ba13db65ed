/* modules/ipam-api/ipam_api.c - placeholder until the module lands */
#include <fibril/fibril.h>
FIBRIL_MODULE(.name = "ipam-api", .version = "0.0.0");
