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

#endif
