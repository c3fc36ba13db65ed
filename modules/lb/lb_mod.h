/* modules/lb/lb_mod.h - what the lb module's files share beyond the model
 * (lb_int.h): the module state (lb.c) and the operations every source of
 * services goes through, so that the metrics and the timing are counted
 * in one place. */
#ifndef FIBRIL_LB_MOD_H
#define FIBRIL_LB_MOD_H

#include "lb_int.h"

struct lb;
struct fibril_module;

int lb_upsert(struct lb *lb, struct lb_svc **spec, uint16_t *id, char *err, size_t len);
int lb_delete(struct lb *lb, uint16_t id, char *err, size_t len);
struct lb_table *lb_table_of(struct lb *lb);
struct fibril_module *lb_module_of(struct lb *lb);

/* k8s.c: Services and EndpointSlices from the k8s module's informers */
struct lb_k8s;
int lb_k8s_init(struct lb *lb, struct lb_k8s **out);    /* init: bus subscriptions */
int lb_k8s_start(struct lb_k8s *k, const char *node_addrs); /* start: watch, if k8s is there */
void lb_k8s_stop(struct lb_k8s *k);
void lb_k8s_free(struct lb_k8s *k);
uint64_t lb_k8s_skipped(const struct lb_k8s *k);

#endif
