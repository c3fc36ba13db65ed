/* modules/ipam-cluster-pool/cluster_pool.c - placeholder until the module lands */
#include <fibril/fibril.h>
FIBRIL_MODULE(.name = "ipam-cluster-pool", .version = "0.0.0");
