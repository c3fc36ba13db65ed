/* tests/fuzz/fuzz_ipam_api.c - fuzz target: the ipam-api module's request
 * parsing and answers (owner and family queries, the {ip} segment, every
 * errno a mode returns turned into a status and one line), through the
 * host's real dispatch (api_harness.c). modules/ipam-api/ipam_api.c is
 * compiled in (its handlers are static) and bound to a small in-memory mode
 * over 10.0.3.0/24 and fd00:3::/120, reset for each input; an owner "E<n>"
 * makes the mode fail with -n so every error answer is reachable. Input: one
 * or more "METHOD /v1/ipam...\nbody" requests separated by "\n=====\n". */
#include "../../modules/ipam-api/ipam_api.c"

#include "api_harness.h"
#include "fuzz.h"

#define FAKE_MAX 16

static struct {
	char address[FIBRIL_IPAM_ADDR_LEN];
	char owner[FIBRIL_IPAM_OWNER_LEN];
} fake[FAKE_MAX];
static size_t nfake;

static const char *const fake_cidr[2] = {"10.0.3.0/24", "fd00:3::/120"};
static const char *const fake_gw[2] = {"10.0.3.1", "fd00:3::1"};

static int owner_errno(const char *owner)
{
	return owner[0] == 'E' && owner[1] >= '1' && owner[1] <= '9' ? -atoi(owner + 1) : 0;
}

static void fill(struct fibril_ipam_result *r, int fi, const char *address)
{
	r->family = fi ? 6 : 4;
	snprintf(r->address, sizeof(r->address), "%s", address);
	snprintf(r->cidr, sizeof(r->cidr), "%s", fake_cidr[fi]);
	snprintf(r->gateway, sizeof(r->gateway), "%s", fake_gw[fi]);
}

static int fake_find(const char *address)
{
	for (size_t i = 0; i < nfake; i++)
		if (strcmp(fake[i].address, address) == 0)
			return (int)i;
	return -1;
}

static int fake_add(const char *address, const char *owner)
{
	if (nfake == FAKE_MAX)
		return -ENOSPC;
	snprintf(fake[nfake].address, sizeof(fake[nfake].address), "%s", address);
	snprintf(fake[nfake].owner, sizeof(fake[nfake].owner), "%s", owner);
	nfake++;
	return 0;
}

static int fake_next_one(int fi, const char *owner, struct fibril_ipam_result *out)
{
	struct fibril_cidr pool;
	char text[FIBRIL_IPAM_ADDR_LEN];
	fibril_cidr_parse(fake_cidr[fi], &pool);
	for (size_t i = 0; i < nfake; i++) {
		struct fibril_ip ip;
		if (strcmp(fake[i].owner, owner) == 0 && fibril_ip_parse(fake[i].address, &ip) == 0 &&
		    fibril_cidr_contains(&pool, &ip)) {
			fill(out, fi, fake[i].address);
			return 1;
		}
	}
	for (uint64_t n = 2; n < 200; n++) {
		struct fibril_cidr host;
		if (fibril_cidr_subnet(&pool, fi ? 128 : 32, n, &host))
			break;
		fibril_ip_format(&host.ip, text, sizeof(text));
		if (fake_find(text) >= 0)
			continue;
		int rc = fake_add(text, owner);
		if (rc)
			return rc;
		fill(out, fi, text);
		return 1;
	}
	return -ENOSPC;
}

static int fake_allocate_next(void *ctx, int family, const char *owner, struct fibril_ipam_result *out,
			      size_t max)
{
	(void)ctx;
	if (owner_errno(owner))
		return owner_errno(owner);
	if (family != 4 && family != 6 && family != FIBRIL_IPAM_ANY)
		return -EINVAL;
	int n = 0;
	for (int fi = 0; fi < 2 && (size_t)n < max; fi++) {
		if (family != FIBRIL_IPAM_ANY && family != (fi ? 6 : 4))
			continue;
		int rc = fake_next_one(fi, owner, &out[n]);
		if (rc < 0)
			return rc;
		n++;
	}
	return n;
}

static int fake_allocate_ip(void *ctx, const char *address, const char *owner, struct fibril_ipam_result *out)
{
	struct fibril_ip ip;
	struct fibril_cidr pool;
	(void)ctx;
	if (owner_errno(owner))
		return owner_errno(owner);
	if (fibril_ip_parse(address, &ip))
		return -EINVAL;
	int fi = ip.family == 6;
	fibril_cidr_parse(fake_cidr[fi], &pool);
	if (!fibril_cidr_contains(&pool, &ip))
		return -ERANGE;
	if (strcmp(address, fake_gw[fi]) == 0)
		return -EEXIST;
	int at = fake_find(address);
	if (at >= 0 && strcmp(fake[at].owner, owner) != 0)
		return -EEXIST;
	if (at < 0) {
		int rc = fake_add(address, owner);
		if (rc)
			return rc;
	}
	fill(out, fi, address);
	return 0;
}

static int fake_release_ip(void *ctx, const char *address)
{
	(void)ctx;
	int at = fake_find(address);
	if (at < 0)
		return -ENOENT;
	fake[at] = fake[--nfake];
	return 0;
}

static int fake_release_owner(void *ctx, const char *owner)
{
	int n = 0;
	(void)ctx;
	if (owner_errno(owner))
		return owner_errno(owner);
	for (size_t i = 0; i < nfake;) {
		if (strcmp(fake[i].owner, owner) == 0) {
			fake[i] = fake[--nfake];
			n++;
		} else {
			i++;
		}
	}
	return n;
}

static int fake_list(void *ctx, fibril_ipam_list_fn cb, void *ud)
{
	(void)ctx;
	for (size_t i = 0; i < nfake; i++)
		if (cb(fake[i].address, fake[i].owner, ud))
			break;
	return 0;
}

static int fake_pools(void *ctx, struct fibril_ipam_pool *out, size_t max)
{
	(void)ctx;
	int n = 0;
	for (int fi = 0; fi < 2 && (size_t)n < max; fi++, n++) {
		out[n].family = fi ? 6 : 4;
		snprintf(out[n].cidr, sizeof(out[n].cidr), "%s", fake_cidr[fi]);
		snprintf(out[n].gateway, sizeof(out[n].gateway), "%s", fake_gw[fi]);
		out[n].total = fi ? 254 : 253;
		out[n].used = 0;
		for (size_t i = 0; i < nfake; i++)
			out[n].used += (strchr(fake[i].address, ':') != NULL) == (fi == 1);
	}
	return n;
}

static const struct fibril_ipam_ops fake_ops = {
	.hdr = {.sz = sizeof(fake_ops), .version = FIBRIL_IPAM_VERSION},
	.allocate_next = fake_allocate_next,
	.allocate_ip = fake_allocate_ip,
	.release_ip = fake_release_ip,
	.release_owner = fake_release_owner,
	.list = fake_list,
	.pools = fake_pools,
};

static struct ipam_api fuzz_api = {.ops = &fake_ops};

static void setup(void)
{
	fuzz_quiet_logs();
	if (fibril_api_route(NULL, "GET", "/v1/ipam", 0, get_ipam, &fuzz_api) ||
	    fibril_api_route(NULL, "POST", "/v1/ipam", 0, post_next, &fuzz_api) ||
	    fibril_api_route(NULL, "DELETE", "/v1/ipam", 0, delete_owner, &fuzz_api) ||
	    fibril_api_route(NULL, "POST", "/v1/ipam/{ip}", 0, post_ip, &fuzz_api) ||
	    fibril_api_route(NULL, "DELETE", "/v1/ipam/{ip}", 0, delete_ip, &fuzz_api))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	nfake = 0;
	fake_add("10.0.3.9", "other/eth0");
	char *text = fuzz_strndup(data, size);
	fuzz_api_requests(text);
	free(text);
	return 0;
}
