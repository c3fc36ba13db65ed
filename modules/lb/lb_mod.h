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

/* origin.c: each frontend's origin and name, kept through the SDK journal */
struct lb_origin;
int lb_origin_open(struct fibril_module *m, struct lb_origin **out, char *err, size_t len);
/* Gives the restored services of t the origin and name their records say;
 * returns how many had one (*kubernetes of them from k8s). Compacts. */
size_t lb_origin_apply(struct lb_origin *o, const struct lb_table *t, size_t *kubernetes);
void lb_origin_set(struct lb_origin *o, const struct lb_svc *s);
void lb_origin_deleted(struct lb_origin *o, const struct lb_svc *s);
void lb_origin_flush(struct lb_origin *o); /* group commit of what was appended */
void lb_origin_close(struct lb_origin *o);

/* k8s.c: Services and EndpointSlices from the k8s module's informers */
struct lb_k8s;
int lb_k8s_init(struct lb *lb, struct lb_k8s **out);    /* init: bus subscriptions */
int lb_k8s_start(struct lb_k8s *k, const char *node_addrs); /* start: watch, if k8s is there */
void lb_k8s_stop(struct lb_k8s *k);
void lb_k8s_free(struct lb_k8s *k);
uint64_t lb_k8s_skipped(const struct lb_k8s *k);
/* Has the first list of Services and EndpointSlices been applied (and the
 * restored frontends Kubernetes no longer has been removed)? */
bool lb_k8s_synced(const struct lb_k8s *k);
uint64_t lb_k8s_stale_removed(const struct lb_k8s *k);

#endif
