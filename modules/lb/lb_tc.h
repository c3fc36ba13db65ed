/* modules/lb/lb_tc.h - the lb module's per-packet side: the lb_ct GC's
 * verdict (ctgc.c, free of host functions so that tests and benchmarks
 * link it alone) and the tc programs' devices and GC job (tc.c). */
#ifndef FIBRIL_LB_TC_H
#define FIBRIL_LB_TC_H

#include <stdbool.h>
#include <stdint.h>

#include "fibril_lb.h"

/* ---- ctgc.c ---------------------------------------------------------------- */
struct lb_ctgc_params {
	uint32_t now_s;     /* CLOCK_MONOTONIC seconds (the programs' clock) */
	uint32_t tcp_s;     /* [lb] ct-timeout-tcp: an open TCP flow */
	uint32_t syn_s;     /* ct-timeout-tcp-syn: a handshake not completed */
	uint32_t closing_s; /* ct-timeout-tcp-closing: after FIN or RST */
	uint32_t other_s;   /* ct-timeout-other: UDP (and the rest) */
	uint64_t *src;      /* lb_ct_src mapped (NULL: none): a removed charged
			     * entry's count is given back there */
};

/* One flow less for the client of a charged entry (LB_CT_F_CHARGED) that
 * is being removed, in src (lb_ct_src mapped; never below 0). */
void lb_ctgc_uncharge(uint64_t *src, const struct lb_ct_key *k, const struct lb_ct_val *v);
/* lb_ct_src's length in bytes, to map it */
#define LB_CT_SRC_BYTES ((size_t)LB_CT_SRC_SLOTS * sizeof(uint64_t))

/* Seconds the entry has been idle (0 when it was stamped after now_s). */
uint32_t lb_ctgc_idle(const struct lb_ctgc_params *p, uint32_t seen);
/* Its state's timeout. */
uint32_t lb_ctgc_timeout(const struct lb_ctgc_params *p, const struct lb_ct_key *k,
			 const struct lb_ct_val *v);
/* One GC pass over lb_ct: entries idle longer than their timeout are
 * removed; entries of older programs (seen = 0) are stamped now, so they
 * expire like the others. 0 or a negative errno; counts added to *removed,
 * *stamped, *seen, *syscalls. */
int lb_ctgc_pass(int fd, const struct lb_ctgc_params *p, size_t *seen, size_t *removed,
		 size_t *stamped, uint64_t *syscalls);
uint32_t lb_ctgc_now_s(void);

/* A UDP backend that left a service (or stopped being ready): the flows of
 * lb_ct that still lead to it go, as kube-proxy clears a removed UDP
 * endpoint's conntrack entries, so that a client that keeps sending from
 * one socket is not held on a backend that is gone. */
struct lb_ct_purge {
	uint8_t addr[16];
	uint16_t port;   /* network order */
	uint16_t svc_id; /* the flows' rev_nat_id */
};
/* One pass removing every UDP entry of those flows (the client's, the
 * reply's and the SNAT pair's: each names the backend and the service).
 * 0 or a negative errno; counts added to *seen, *removed, *syscalls. */
int lb_ctgc_purge(int fd, const struct lb_ct_purge *gone, size_t n, uint64_t *src,
		  size_t *seen, size_t *removed, uint64_t *syscalls);

/* ---- tc.c ------------------------------------------------------------------ */
struct fibril_module;
struct lb_tc;

/* init: metrics */
int lb_tc_init(struct fibril_module *m, struct lb_tc **out);
/* start: the devices ([lb] nodeport-devices and the tunnel device when it
 * exists, followed through the kernel's rtnetlink events), lb_devices,
 * lb_node_addrs (the node's addresses, followed too), and the GC timer. */
int lb_tc_start(struct lb_tc *t, int prog_from, int prog_to, int ct_fd, int devices_fd,
		int node_addrs_fd, char *err, size_t len);
void lb_tc_stop(struct lb_tc *t);
void lb_tc_free(struct lb_tc *t);
int lb_tc_devices(const struct lb_tc *t); /* nodeport devices attached */
/* lb_ct_src, whose counts the GC gives back (before lb_tc_start; the fd
 * is the registry's, not taken over) */
void lb_tc_set_src(struct lb_tc *t, int src_fd);
/* lb_ctgc_purge of gone[0..n) on the worker pool (the list is copied) */
void lb_tc_purge_udp(struct lb_tc *t, const struct lb_ct_purge *gone, size_t n);

#endif
