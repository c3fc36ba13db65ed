/* modules/common/libbpf_log.h - libbpf's messages into a module's log: the
 * modules that load BPF programs (datapath, lb) route libbpf's warnings (the
 * verifier log above all) to fibril_warn while they load, and silence it
 * around calls whose expected failures libbpf would print (a clsact qdisc
 * that already exists). Compiled into each of those modules (not into
 * libmodcommon, whose users do not link libbpf); not SDK. */
#ifndef FIBRIL_MODCOMMON_LIBBPF_LOG_H
#define FIBRIL_MODCOMMON_LIBBPF_LOG_H

#include <bpf/libbpf.h>

struct fibril_module;

/* libbpf prints nothing outside a module's begin / end: its default
 * printer would write raw lines to stderr (those of a load on a worker
 * thread, say). Called by each module that loads programs, at init. */
void modcommon_libbpf_log_off(void);
/* From now on libbpf's non-debug messages printed on this thread go to m's
 * log (those of other threads are dropped); returns the previous print
 * function for modcommon_libbpf_log_end. */
libbpf_print_fn_t modcommon_libbpf_log_begin(struct fibril_module *m);
void modcommon_libbpf_log_end(libbpf_print_fn_t old);
/* libbpf prints nothing until modcommon_libbpf_log_end(old). */
libbpf_print_fn_t modcommon_libbpf_quiet_begin(void);

#endif
