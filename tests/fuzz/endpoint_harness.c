/* tests/fuzz/endpoint_harness.c - the endpoint module set up for fuzzing:
 * modules/endpoint/api.c is compiled in (its handlers are static) and its
 * routes registered; the other files of the module are linked as they are.
 * State files go to a directory of its own under the current directory,
 * removed at exit. IPAM answers from an empty pool that takes any address;
 * Kubernetes knows one pod (default/web) whose JSON the target chooses. */
#include "../../modules/endpoint/api.c"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "endpoint_harness.h"
#include "fuzz.h"

const char *fuzz_ep_pod_json;

/* State files are written as the agent writes them, but need not be durable
 * here: fsync (a disk flush per input) would make the fuzzer 10x slower. */
int fsync(int fd)
{
	(void)fd;
	return 0;
}

static int ipam_next(void *ctx, int family, const char *owner, struct fibril_ipam_result *out, size_t max)
{
	(void)ctx, (void)family, (void)owner, (void)out, (void)max;
	return -ENOSPC;
}

static int ipam_ip(void *ctx, const char *address, const char *owner, struct fibril_ipam_result *out)
{
	(void)ctx, (void)owner;
	out->family = strchr(address, ':') ? 6 : 4;
	snprintf(out->address, sizeof(out->address), "%s", address);
	return 0;
}

static int ipam_release_ip(void *ctx, const char *address)
{
	(void)ctx, (void)address;
	return 0;
}

static int ipam_release_owner(void *ctx, const char *owner)
{
	(void)ctx, (void)owner;
	return 0;
}

static int ipam_list(void *ctx, fibril_ipam_list_fn cb, void *ud)
{
	(void)ctx;
	cb("10.0.3.9", "other/eth0", ud);
	return 0;
}

static int ipam_pools(void *ctx, struct fibril_ipam_pool *out, size_t max)
{
	(void)ctx, (void)out, (void)max;
	return 0;
}

static const struct fibril_ipam_ops fuzz_ipam = {
	.hdr = {.sz = sizeof(fuzz_ipam), .version = FIBRIL_IPAM_VERSION},
	.allocate_next = ipam_next,
	.allocate_ip = ipam_ip,
	.release_ip = ipam_release_ip,
	.release_owner = ipam_release_owner,
	.list = ipam_list,
	.pools = ipam_pools,
};

static const char *k8s_get(void *ctx, const char *resource, const char *ns, const char *name)
{
	(void)ctx;
	if (strcmp(resource, FIBRIL_K8S_PODS) || strcmp(ns, "default") || strcmp(name, "web"))
		return NULL;
	return fuzz_ep_pod_json;
}

static struct fibril_k8s_ops fuzz_k8s = {
	.hdr = {.sz = sizeof(fuzz_k8s), .version = FIBRIL_K8S_VERSION},
	.get = k8s_get,
};

static char state_dir[64];

static void remove_state_dir(void)
{
	DIR *d = opendir(state_dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(state_dir);
}

static void add_base_endpoint(struct ep_manager *mg)
{
	struct ep_endpoint *ep = calloc(1, sizeof(*ep));
	if (!ep)
		abort();
	ep->id = 1;
	ep->state = FIBRIL_EP_READY;
	ep->host_ifindex = 999999;
	snprintf(ep->host_ifname, sizeof(ep->host_ifname), "lxc0123456789ab");
	snprintf(ep->ifname, sizeof(ep->ifname), "eth0");
	snprintf(ep->container_id, sizeof(ep->container_id), "c0ffee");
	ep->has_ipv4 = true;
	inet_pton(AF_INET, "10.0.3.7", &ep->ipv4);
	ep->netns = strdup("/run/netns/web");
	ep->pod_namespace = strdup("default");
	ep->pod_name = strdup("web");
	if (!ep->netns || !ep->pod_namespace || !ep->pod_name ||
	    ep_identity_acquire(mg, EP_NAMESPACE_LABEL "default", &ep->identity) || ep_table_insert(mg, ep))
		abort();
}

struct ep_manager *fuzz_ep_manager(void)
{
	static struct ep_manager *mg;
	if (!mg) {
		fuzz_quiet_logs();
		snprintf(state_dir, sizeof(state_dir), "fuzz-endpoint-state.XXXXXX");
		if (!mkdtemp(state_dir))
			abort();
		atexit(remove_state_dir);
		mg = calloc(1, sizeof(*mg));
		if (!mg)
			abort();
		snprintf(mg->dir, sizeof(mg->dir), "%s", state_dir);
		mg->dirfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (mg->dirfd < 0)
			abort();
		ep_identities_init(mg);
		mg->ipam = &fuzz_ipam;
		mg->k8s = &fuzz_k8s;
		mg->started = true;
		if (ep_api_register(mg))
			abort();
	}
	/* only endpoint 1, as it was */
	for (size_t i = 1; i < mg->eps_cap; i++) {
		struct ep_endpoint *ep = mg->eps[i];
		if (!ep)
			continue;
		ep_table_remove(mg, ep);
		ep_identity_release(mg, ep->identity);
		ep_free(ep);
	}
	add_base_endpoint(mg);
	fuzz_host_drain();
	return mg;
}
