/* tests/fuzz/endpoint_harness.h - an endpoint module manager for fuzz
 * targets (endpoint_harness.c): its API routes registered on the host's
 * real route table (api_harness.c), a state dir of its own, a small IPAM
 * mode and a Kubernetes cache holding one pod whose JSON the target sets. */
#ifndef FIBRIL_FUZZ_ENDPOINT_HARNESS_H
#define FIBRIL_FUZZ_ENDPOINT_HARNESS_H

struct ep_manager;

/* The manager (made on the first call), reset to hold only endpoint 1:
 * container-id c0ffee, ifname eth0, pod default/web. */
struct ep_manager *fuzz_ep_manager(void);

/* The object the Kubernetes cache answers for pod default/web (NULL: none). */
extern const char *fuzz_ep_pod_json;

#endif
