/* bpf/fibril_dp.bpf.c - the datapath's BPF object: five tc programs that
 * share the maps of lib/maps.h (layouts in fibril_dp.h); one loaded
 * instance of each serves every endpoint, what differs per endpoint is in
 * the maps. One file per hook:
 *   fibril_from_endpoint  from_endpoint.bpf.h  host veth, clsact ingress:
 *                                              what the pod sends
 *   fibril_to_endpoint    to_endpoint.bpf.h    host veth, clsact egress:
 *                                              what the stack delivers to it
 *   fibril_from_overlay   from_overlay.bpf.h   VXLAN device, clsact ingress
 *                                              (tunnel mode)
 *   fibril_from_netdev    from_netdev.bpf.h    underlay devices, clsact
 *                                              ingress (host-routing = bpf,
 *                                              masquerade's replies)
 *   fibril_to_netdev      to_netdev.bpf.h      external devices, clsact
 *                                              egress (masquerade)
 * All four are in section "tc" (libbpf 1.1 knows no "tc/<name>"
 * sections): the module tells them apart by name.
 *
 * The stages they are made of are in lib/ (parse, frag, identity, service,
 * policy, conntrack, forward, encap, fib, nd, metrics, events, verdict), each
 * header starting with its contract; bpf/README.md has them in one table.
 * This file is the one compilation unit: it includes the hook files, each
 * of which includes the stages it uses, so there is one object, one
 * skeleton (fibril_dp.skel.h) and one set of map declarations, as the
 * module's loader, the map registry and the tests expect. Every function
 * is static __always_inline: each program is one flat function (but for
 * nat_rev_icmp_error, a subprogram: bpf/README.md says why). The order
 * of the includes below is the programs' order in the section.
 * Only uapi headers and libbpf's helpers: no vmlinux.h, no CO-RE needed. */
#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* the programs, in their order in section tc */
#include "from_endpoint.bpf.h"
#include "to_endpoint.bpf.h"
#include "from_overlay.bpf.h"
#include "from_netdev.bpf.h"
#include "to_netdev.bpf.h"
