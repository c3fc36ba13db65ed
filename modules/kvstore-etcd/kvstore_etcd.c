/* modules/kvstore-etcd/kvstore_etcd.c - placeholder until the module lands */
#include <fibril/fibril.h>
FIBRIL_MODULE(.name = "kvstore-etcd", .version = "0.0.0");
