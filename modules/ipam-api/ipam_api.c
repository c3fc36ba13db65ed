/* modules/ipam-api/ipam_api.c - serves the "ipam" capability on the agent's
 * API, whatever mode provides it (cluster-pool, a vendor's own):
 *
 *   POST   /v1/ipam?family=ipv4|ipv6|both&owner=X   the next free address(es)
 *   POST   /v1/ipam/{ip}?owner=X                    a given address
 *          (both: &durable=later answers before the flush, see below)
 *   DELETE /v1/ipam/{ip}                            release one address
 *   DELETE /v1/ipam?owner=X                         release all of X (idempotent)
 *   GET    /v1/ipam                                 pools and allocations
 *
 * The mode's negative errnos (fibril/ipam.h) become HTTP statuses with one
 * line that names the address, owner or pool concerned. Addresses are
 * parsed and written back in canonical form here, so the mode and the
 * replies always see the same text. Also the `fibril status` summary:
 * "12/253 allocated from 10.0.3.0/24". Routes in docs/API.md.
 *
 * A change (POST, DELETE) is answered only once it is on disk: with a mode
 * that makes its answers durable in batches (ipam interface 2,
 * wait_durable) the reply is deferred until its batch is flushed. An
 * allocation may ask for its answer before that (POST ...&durable=later):
 * its batch's flush starts at once, and the caller makes it durable with a
 * later durable write that waits for IPAM's batches (fibril-cni's endpoint
 * PUT), so a CNI ADD waits for one round of flushes, not two in series. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include <fibril/fibril.h>

#define MAX_POOLS 8   /* pools() asks for at most this many */
#define MAX_RESULTS 4 /* allocate_next with FIBRIL_IPAM_ANY: one per family */

struct ipam_api {
	struct fibril_module *m;
	const struct fibril_ipam_ops *ops; /* the chosen mode, from start */
	void *ctx;
	/* metrics: requests by family and result, addresses released, pools */
	struct fibril_metric *allocations, *releases, *pool_used, *pool_capacity;
};

/* What a failed call was about, for the error line. */
struct op_subject {
	int family;          /* 4, 6 or FIBRIL_IPAM_ANY */
	const char *address; /* canonical, or NULL */
	const char *owner;   /* or NULL */
};

/* ---- small helpers ---------------------------------------------------------- */

static const char *family_name(int family)
{
	return family == 4 ? "ipv4" : family == 6 ? "ipv6" : "any";
}

/* The ipam mode as the operator chose it ("the ipam mode (vendor-ipam)"),
 * or just "the ipam mode": the SDK does not name a capability's provider. */
static const char *mode_name(char *buf, size_t len)
{
	const char *chosen = fibril_config_get("providers", FIBRIL_IPAM_CAPABILITY);

	if (chosen && *chosen)
		snprintf(buf, len, "the ipam mode (%s)", chosen);
	else
		snprintf(buf, len, "the ipam mode");
	return buf;
}

/* Terminate every string a provider filled, whatever it wrote. */
static void seal_result(struct fibril_ipam_result *r)
{
	r->address[sizeof(r->address) - 1] = '\0';
	r->cidr[sizeof(r->cidr) - 1] = '\0';
	r->gateway[sizeof(r->gateway) - 1] = '\0';
}

static void seal_pool(struct fibril_ipam_pool *p)
{
	p->cidr[sizeof(p->cidr) - 1] = '\0';
	p->gateway[sizeof(p->gateway) - 1] = '\0';
}

/* The mode's pools, sealed; 0 when none (or not ready). */
static size_t read_pools(const struct ipam_api *api, struct fibril_ipam_pool *pools, size_t max)
{
	memset(pools, 0, max * sizeof(*pools));
	for (size_t i = 0; i < max; i++)
		pools[i].sz = sizeof(pools[i]);
	int n = api->ops->pools(api->ctx, pools, max);

	if (n <= 0)
		return 0;
	if ((size_t)n > max)
		n = (int)max;
	for (int i = 0; i < n; i++)
		seal_pool(&pools[i]);
	return (size_t)n;
}

/* ---- metrics ---------------------------------------------------------------- */

static const char *family_label(int family)
{
	return family == 4 ? "ipv4" : family == 6 ? "ipv6" : "any";
}

/* One allocation request's outcome: "ok" per address, else "exhausted"
 * (-ENOSPC: a full pool or nothing for this owner) or "error". */
static void count_allocation(struct ipam_api *api, int family, int rc)
{
	fibril_series_inc(fibril_metric_labels(api->allocations, family_label(family),
						rc >= 0 ? "ok" : rc == -ENOSPC ? "exhausted" : "error"));
}

static void metrics_scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	struct ipam_api *api = ud;
	struct fibril_ipam_pool pools[MAX_POOLS];
	size_t n = api->ops ? read_pools(api, pools, MAX_POOLS) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *fam = family_label(pools[i].family);
		fibril_series_set(fibril_metric_labels(api->pool_used, fam, pools[i].cidr),
				  (double)pools[i].used);
		fibril_series_set(fibril_metric_labels(api->pool_capacity, fam, pools[i].cidr),
				  (double)pools[i].total);
	}
}

static int metrics_register(struct ipam_api *api)
{
	static const char *const by_result[] = {"family", "result", NULL};
	static const char *const by_pool[] = {"family", "cidr", NULL};
	api->allocations = fibril_metric_register(api->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_ipam_allocations_total", .labels = by_result,
		.help = "Addresses requested over /v1/ipam, by family and result (ok, exhausted, error)."});
	api->releases = fibril_metric_register(api->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_COUNTER,
		.name = "fibril_ipam_releases_total", .help = "Addresses released over /v1/ipam."});
	api->pool_used = fibril_metric_register(api->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_ipam_pool_used_addresses", .labels = by_pool,
		.help = "Addresses handed out from each pool of the ipam mode."});
	api->pool_capacity = fibril_metric_register(api->m, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_GAUGE,
		.name = "fibril_ipam_pool_capacity_addresses", .labels = by_pool,
		.help = "Addresses each pool of the ipam mode can hand out."});
	if (!api->allocations || !api->releases || !api->pool_used || !api->pool_capacity)
		return -errno;
	return fibril_metrics_on_scrape(api->m, metrics_scrape, api);
}

static void reply_object(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status,
			 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

/* ---- reading the request -------------------------------------------------- */

/* The owner query parameter, or NULL after answering 400. */
static const char *read_owner(struct fibril_request *req, struct fibril_response *resp)
{
	const char *owner = fibril_req_query(req, "owner");

	if (!owner || !*owner) {
		fibril_resp_error(resp, 400, "query 'owner' is required");
		return NULL;
	}
	if (strlen(owner) >= FIBRIL_IPAM_OWNER_LEN) {
		fibril_resp_error(resp, 400, "query 'owner': at most %d bytes",
				  FIBRIL_IPAM_OWNER_LEN - 1);
		return NULL;
	}
	for (const unsigned char *c = (const unsigned char *)owner; *c; c++) {
		if (*c < 0x20 || *c == 0x7f) {
			fibril_resp_error(resp, 400, "query 'owner': control characters are not allowed");
			return NULL;
		}
	}
	return owner;
}

/* The family query parameter (default both); false after answering 400. */
static bool read_family(struct fibril_request *req, struct fibril_response *resp, int *family)
{
	const char *f = fibril_req_query(req, "family");

	if (!f || !*f || !strcmp(f, "both"))
		*family = FIBRIL_IPAM_ANY;
	else if (!strcmp(f, "ipv4"))
		*family = 4;
	else if (!strcmp(f, "ipv6"))
		*family = 6;
	else {
		fibril_resp_error(resp, 400, "query 'family': expected ipv4, ipv6 or both");
		return false;
	}
	return true;
}

/* The {ip} path segment in canonical form; false after answering 400. */
static bool read_address(struct fibril_request *req, struct fibril_response *resp,
			 struct fibril_ip *ip, char *canon, size_t len)
{
	const char *text = fibril_req_param(req, "ip");

	if (!text || strlen(text) >= FIBRIL_IPAM_ADDR_LEN || fibril_ip_parse(text, ip) != 0) {
		char shown[FIBRIL_IPAM_ADDR_LEN + 4];
		size_t n = text ? strlen(text) : 0;

		snprintf(shown, sizeof(shown), "%.*s%s", FIBRIL_IPAM_ADDR_LEN - 1, text ? text : "",
			 n >= FIBRIL_IPAM_ADDR_LEN ? "..." : "");
		for (char *c = shown; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		fibril_resp_error(resp, 400, "invalid address '%s': expected an IPv4 or IPv6 address",
				  shown);
		return false;
	}
	fibril_ip_format(ip, canon, len);
	return true;
}

/* False after answering 503 when no mode is bound (before start, after stop). */
static bool ready(const struct ipam_api *api, struct fibril_response *resp)
{
	if (api->ops)
		return true;
	fibril_resp_error(resp, 503, "ipam is not ready: no ipam mode is bound");
	return false;
}

/* ---- error replies ---------------------------------------------------------- */

struct holder_search {
	const char *address;
	char owner[FIBRIL_IPAM_OWNER_LEN];
	bool found;
};

static int find_holder(const char *address, const char *owner, void *ud)
{
	struct holder_search *s = ud;

	if (!address || !owner || strcmp(address, s->address) != 0)
		return 0;
	snprintf(s->owner, sizeof(s->owner), "%s", owner);
	s->found = true;
	return 1;
}

/* "10.0.3.0/24" or "10.0.3.0/24, 10.0.4.0/24": the pools of a family (all
 * with FIBRIL_IPAM_ANY; only the full ones when `full_only`). */
static void pool_cidrs(const struct fibril_ipam_pool *pools, size_t n, int family, bool full_only,
		       char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (family != FIBRIL_IPAM_ANY && pools[i].family != family)
			continue;
		if (full_only && pools[i].used < pools[i].total)
			continue;
		int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", pools[i].cidr);

		if (w < 0 || (size_t)w >= len - used)
			break;
		used += (size_t)w;
	}
}

static bool same_address(const char *text, const struct fibril_ip *ip)
{
	struct fibril_ip other;

	return fibril_ip_parse(text, &other) == 0 && other.family == ip->family &&
	       !memcmp(other.bytes, ip->bytes, ip->family == 4 ? 4 : 16);
}

/* True when every host bit of ip (those after prefix_len) equals bit. */
static bool host_bits_are(const struct fibril_ip *ip, unsigned prefix_len, int bit)
{
	unsigned bits = ip->family == 4 ? 32 : 128;

	for (unsigned i = prefix_len; i < bits; i++)
		if (((ip->bytes[i / 8] >> (7 - i % 8)) & 1) != bit)
			return false;
	return true;
}

/* Which reserved address of a pool ip is ("the gateway"), or NULL. */
static const char *reserved_role(const struct fibril_cidr *pool, const char *gateway,
				 const struct fibril_ip *ip)
{
	unsigned host_bits = (ip->family == 4 ? 32u : 128u) - pool->prefix_len;

	if (same_address(gateway, ip))
		return "the gateway";
	if (host_bits >= 2 && host_bits_are(ip, pool->prefix_len, 0))
		return "the network address";
	if (ip->family == 4 && host_bits >= 2 && host_bits_are(ip, pool->prefix_len, 1))
		return "the broadcast address";
	return NULL;
}

/* -ERANGE: outside every pool of its family, or inside one but reserved. */
static void reply_range(const struct ipam_api *api, struct fibril_response *resp,
			const struct op_subject *what)
{
	struct fibril_ipam_pool pools[MAX_POOLS];
	size_t n = read_pools(api, pools, MAX_POOLS);
	struct fibril_ip ip;
	char cidrs[512], mode[96];

	if (what->address && fibril_ip_parse(what->address, &ip) == 0) {
		for (size_t i = 0; i < n; i++) {
			struct fibril_cidr c;

			if (fibril_cidr_parse(pools[i].cidr, &c) != 0 || !fibril_cidr_contains(&c, &ip))
				continue;
			const char *role = reserved_role(&c, pools[i].gateway, &ip);

			if (role)
				fibril_resp_error(resp, 400, "address %s is %s of the pool %s",
						  what->address, role, pools[i].cidr);
			else
				fibril_resp_error(resp, 400,
						  "address %s is in the pool %s but not handed out by %s",
						  what->address, pools[i].cidr, mode_name(mode, sizeof(mode)));
			return;
		}
	}
	pool_cidrs(pools, n, what->family, false, cidrs, sizeof(cidrs));
	fibril_resp_error(resp, 400, "address %s is outside the pool %s",
			  what->address ? what->address : "?", *cidrs ? cidrs : "of the ipam mode");
}

/* -ENOSPC: a full pool, or a mode that has nothing for this owner. */
static void reply_nospace(const struct ipam_api *api, struct fibril_response *resp,
			  const struct op_subject *what)
{
	struct fibril_ipam_pool pools[MAX_POOLS];
	size_t n = read_pools(api, pools, MAX_POOLS);
	char cidrs[512], mode[96];

	pool_cidrs(pools, n, what->family, true, cidrs, sizeof(cidrs));
	if (*cidrs) {
		fibril_resp_error(resp, 503, "pool %s is exhausted", cidrs);
		return;
	}
	pool_cidrs(pools, n, what->family, false, cidrs, sizeof(cidrs));
	fibril_resp_error(resp, 503, "%s has no %saddress for owner %s%s%s%s",
			  mode_name(mode, sizeof(mode)),
			  what->family == FIBRIL_IPAM_ANY ? "" : what->family == 4 ? "ipv4 " : "ipv6 ",
			  what->owner ? what->owner : "?", *cidrs ? " (pool " : "", cidrs,
			  *cidrs ? ")" : "");
}

/* Answer a negative errno from the mode with its status and one line. */
static void reply_failure(const struct ipam_api *api, struct fibril_response *resp, int rc,
			  const struct op_subject *what)
{
	char mode[96];

	switch (rc) {
	case -EINVAL:
		if (what->address)
			fibril_resp_error(resp, 400, "%s refused address %s as invalid",
					  mode_name(mode, sizeof(mode)), what->address);
		else
			fibril_resp_error(resp, 400, "%s refused owner %s as invalid",
					  mode_name(mode, sizeof(mode)), what->owner ? what->owner : "?");
		break;
	case -EAFNOSUPPORT:
		fibril_resp_error(resp, 400, "family %s is not offered by %s",
				  family_name(what->family), mode_name(mode, sizeof(mode)));
		break;
	case -ENOSPC:
		reply_nospace(api, resp, what);
		break;
	case -EEXIST: {
		struct holder_search s = { .address = what->address };

		if (what->address)
			api->ops->list(api->ctx, find_holder, &s);
		if (s.found)
			fibril_resp_error(resp, 409, "address %s is taken by owner %s", what->address,
					  s.owner);
		else
			fibril_resp_error(resp, 409, "address %s is taken by another owner",
					  what->address ? what->address : "?");
		break;
	}
	case -ERANGE:
		reply_range(api, resp, what);
		break;
	case -ENOENT:
		if (what->address)
			fibril_resp_error(resp, 404, "address %s is not allocated", what->address);
		else
			fibril_resp_error(resp, 404, "owner %s holds no address",
					  what->owner ? what->owner : "?");
		break;
	case -EAGAIN:
		fibril_resp_error(resp, 503, "ipam is not ready: %s has no pool yet",
				  mode_name(mode, sizeof(mode)));
		break;
	default:
		fibril_resp_error(resp, 500, "%s failed: %s", mode_name(mode, sizeof(mode)),
				  strerror(rc < 0 ? -rc : EIO));
		break;
	}
}

/* ---- durable answers ------------------------------------------------------- */

/* A mode that makes its answers durable in batches (ipam interface 2,
 * wait_durable) is answered from memory; the reply waits for the batch
 * (fibril_resp_defer). A mode without it answers durably: reply at once. */
static bool answers_later(const struct ipam_api *api)
{
	return api->ops && FIBRIL_SERVICE_HAS(api->ops, wait_durable) && api->ops->wait_durable;
}

/* Touches nothing but the deferred response: it may run in the mode's fini. */
static void send_when_durable(void *ud, int status)
{
	struct fibril_response *d = ud;

	if (status)
		fibril_resp_error(d, 500, "the ipam mode could not make the change durable: %s",
				  strerror(-status));
	fibril_resp_send(d);
}

static void flush_started(void *ud, int status)
{
	(void)ud;
	(void)status; /* a failure fails the journal: every later wait says so */
}

/* ?durable=now (the default) or later; false (400 sent) on anything else. */
static bool read_durable_later(struct fibril_request *req, struct fibril_response *resp, bool *later)
{
	const char *v = fibril_req_query(req, "durable");

	*later = false;
	if (!v || !strcmp(v, "now"))
		return true;
	if (!strcmp(v, "later")) {
		*later = true;
		return true;
	}
	fibril_resp_error(resp, 400, "query 'durable': expected now or later");
	return false;
}

/* Runs a changing route's handler, replying once its change is on disk;
 * an allocation asked with durable=later (may_answer_early) is answered
 * from memory, its batch's flush started at once. Nothing waits for it
 * here: the caller's next durable write (an endpoint PUT waits for IPAM's
 * batches) is the one that promises it, so the answer to the runtime still
 * comes only once the address is on disk, and a crash before then loses
 * an allocation nobody was told of. */
static void run_durable_opt(struct fibril_request *req, struct fibril_response *resp, void *ud,
			    fibril_route_fn handler, bool may_answer_early)
{
	struct ipam_api *api = ud;
	bool later = false;

	if (may_answer_early && !read_durable_later(req, resp, &later))
		return;
	if (later && answers_later(api)) {
		handler(req, resp, ud);
		api->ops->wait_durable(api->ctx, flush_started, NULL);
		return;
	}

	struct fibril_response *d = answers_later(api) ? fibril_resp_defer(resp) : NULL;

	if (!d) {
		handler(req, resp, ud);
		return;
	}
	handler(req, d, ud);
	int rc = api->ops->wait_durable(api->ctx, send_when_durable, d);

	if (rc)
		send_when_durable(d, rc);
}

static void run_durable(struct fibril_request *req, struct fibril_response *resp, void *ud,
			fibril_route_fn handler)
{
	run_durable_opt(req, resp, ud, handler, false);
}

/* ---- routes ---------------------------------------------------------------- */

static struct json_object *result_json(const struct fibril_ipam_result *r)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "family", json_object_new_string(family_name(r->family)));
	json_object_object_add(o, "address", json_object_new_string(r->address));
	json_object_object_add(o, "cidr", json_object_new_string(r->cidr));
	json_object_object_add(o, "gateway", json_object_new_string(r->gateway));
	return o;
}

/* 201 {"owner":X,"addresses":[...]} */
static void reply_allocated(struct ipam_api *api, struct fibril_response *resp, const char *owner,
			    struct fibril_ipam_result *results, size_t n)
{
	struct json_object *o = json_object_new_object();
	struct json_object *list = json_object_new_array();

	json_object_object_add(o, "owner", json_object_new_string(owner));
	for (size_t i = 0; i < n; i++) {
		seal_result(&results[i]);
		json_object_array_add(list, result_json(&results[i]));
		fibril_info(api->m, "allocated %s to %s", results[i].address, owner);
	}
	json_object_object_add(o, "addresses", list);
	reply_object(resp, 201, o);
}

/* POST /v1/ipam?family=ipv4|ipv6|both&owner=X */
static void post_next_now(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ipam_api *api = ud;
	struct fibril_ipam_result results[MAX_RESULTS];
	const char *owner;
	int family;

	if (!ready(api, resp) || !(owner = read_owner(req, resp)) || !read_family(req, resp, &family))
		return;
	memset(results, 0, sizeof(results));
	for (size_t i = 0; i < MAX_RESULTS; i++)
		results[i].sz = sizeof(results[i]);

	int n = api->ops->allocate_next(api->ctx, family, owner, results, MAX_RESULTS);
	struct op_subject what = { .family = family, .owner = owner };

	if (n <= 0)
		count_allocation(api, family, n < 0 ? n : -EIO);
	for (int i = 0; i < n && i < MAX_RESULTS; i++)
		count_allocation(api, results[i].family, 0);
	if (n < 0)
		reply_failure(api, resp, n, &what);
	else if (n == 0 || n > MAX_RESULTS)
		fibril_resp_error(resp, 500, "the ipam mode answered %d addresses", n);
	else
		reply_allocated(api, resp, owner, results, (size_t)n);
}

/* POST /v1/ipam/{ip}?owner=X */
static void post_ip_now(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ipam_api *api = ud;
	struct fibril_ipam_result result = { .sz = sizeof(result) };
	char address[FIBRIL_IPAM_ADDR_LEN];
	struct fibril_ip ip;
	const char *owner;

	if (!ready(api, resp) || !read_address(req, resp, &ip, address, sizeof(address)) ||
	    !(owner = read_owner(req, resp)))
		return;

	int rc = api->ops->allocate_ip(api->ctx, address, owner, &result);
	struct op_subject what = { .family = ip.family, .address = address, .owner = owner };

	count_allocation(api, ip.family, rc);
	if (rc < 0)
		reply_failure(api, resp, rc, &what);
	else
		reply_allocated(api, resp, owner, &result, 1);
}

/* 200 {"released":[...]} (and "owner" when releasing by owner) */
static void reply_released(struct fibril_response *resp, const char *owner,
			   struct json_object *released)
{
	struct json_object *o = json_object_new_object();

	if (owner)
		json_object_object_add(o, "owner", json_object_new_string(owner));
	json_object_object_add(o, "released", released);
	reply_object(resp, 200, o);
}

/* Owners named "fibril-..." are the agent's own modules' (the health
 * module's endpoint address, fibril-health): the address is in use on
 * the node, so it is not released over the API, where another owner
 * could then be handed it while it stays on the node's loopback. */
#define AGENT_OWNER_PREFIX "fibril-"

static bool agent_owner(const char *owner)
{
	return !strncmp(owner, AGENT_OWNER_PREFIX, strlen(AGENT_OWNER_PREFIX));
}

static void reply_agent_owner(struct fibril_response *resp, const char *address, const char *owner)
{
	if (address)
		fibril_resp_error(resp, 409, "address %s is held by owner %s (the agent's own): "
				  "not released over the API", address, owner);
	else
		fibril_resp_error(resp, 409, "owner %s is the agent's own: its addresses are not "
				  "released over the API", owner);
}

/* DELETE /v1/ipam/{ip} */
static void delete_ip_now(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ipam_api *api = ud;
	char address[FIBRIL_IPAM_ADDR_LEN];
	struct fibril_ip ip;

	if (!ready(api, resp) || !read_address(req, resp, &ip, address, sizeof(address)))
		return;

	struct holder_search holder = { .address = address };

	api->ops->list(api->ctx, find_holder, &holder);
	if (holder.found && agent_owner(holder.owner)) {
		reply_agent_owner(resp, address, holder.owner);
		return;
	}

	int rc = api->ops->release_ip(api->ctx, address);
	struct op_subject what = { .family = ip.family, .address = address };

	if (rc < 0) {
		reply_failure(api, resp, rc, &what);
		return;
	}
	fibril_info(api->m, "released %s", address);
	fibril_series_inc(fibril_metric_series(api->releases, NULL));

	struct json_object *released = json_object_new_array();

	json_object_array_add(released, json_object_new_string(address));
	reply_released(resp, NULL, released);
}

struct owner_search {
	const char *owner;
	struct json_object *addresses;
};

static int collect_owner(const char *address, const char *owner, void *ud)
{
	struct owner_search *s = ud;

	if (address && owner && !strcmp(owner, s->owner))
		json_object_array_add(s->addresses, json_object_new_string(address));
	return 0;
}

/* DELETE /v1/ipam?owner=X: 200 even when X holds nothing (CNI DEL is
 * retried and must be idempotent). */
static void delete_owner_now(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ipam_api *api = ud;
	const char *owner;

	if (!ready(api, resp))
		return;
	if (!fibril_req_query(req, "owner")) {
		fibril_resp_error(resp, 400,
				  "query 'owner' is required (DELETE /v1/ipam/{ip} releases one address)");
		return;
	}
	if (!(owner = read_owner(req, resp)))
		return;
	if (agent_owner(owner)) {
		reply_agent_owner(resp, NULL, owner);
		return;
	}

	struct owner_search s = { .owner = owner, .addresses = json_object_new_array() };
	int rc = api->ops->list(api->ctx, collect_owner, &s);

	if (rc >= 0)
		rc = api->ops->release_owner(api->ctx, owner);
	if (rc < 0) {
		struct op_subject what = { .family = FIBRIL_IPAM_ANY, .owner = owner };

		json_object_put(s.addresses);
		reply_failure(api, resp, rc, &what);
		return;
	}
	if (rc > 0) {
		fibril_info(api->m, "released %d address%s of %s", rc, rc == 1 ? "" : "es", owner);
		fibril_series_add(fibril_metric_series(api->releases, NULL), rc);
	}
	reply_released(resp, owner, s.addresses);
}

static int collect_all(const char *address, const char *owner, void *ud)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "address", json_object_new_string(address ? address : ""));
	json_object_object_add(o, "owner", json_object_new_string(owner ? owner : ""));
	json_object_array_add(ud, o);
	return 0;
}

/* GET /v1/ipam */
static void post_next(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	run_durable_opt(req, resp, ud, post_next_now, true);
}

static void post_ip(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	run_durable_opt(req, resp, ud, post_ip_now, true);
}

static void delete_ip(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	run_durable(req, resp, ud, delete_ip_now);
}

static void delete_owner(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	run_durable(req, resp, ud, delete_owner_now);
}

static void get_ipam(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct ipam_api *api = ud;
	struct fibril_ipam_pool pools[MAX_POOLS];

	(void)req;
	if (!ready(api, resp))
		return;

	struct json_object *allocations = json_object_new_array();
	int rc = api->ops->list(api->ctx, collect_all, allocations);

	if (rc < 0) {
		struct op_subject what = { .family = FIBRIL_IPAM_ANY };

		json_object_put(allocations);
		reply_failure(api, resp, rc, &what);
		return;
	}

	size_t n = read_pools(api, pools, MAX_POOLS);
	struct json_object *list = json_object_new_array();

	for (size_t i = 0; i < n; i++) {
		struct json_object *p = json_object_new_object();

		json_object_object_add(p, "family", json_object_new_string(family_name(pools[i].family)));
		json_object_object_add(p, "cidr", json_object_new_string(pools[i].cidr));
		json_object_object_add(p, "gateway", json_object_new_string(pools[i].gateway));
		json_object_object_add(p, "used", json_object_new_int64((int64_t)pools[i].used));
		json_object_object_add(p, "total", json_object_new_int64((int64_t)pools[i].total));
		json_object_array_add(list, p);
	}

	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "pools", list);
	json_object_object_add(o, "allocations", allocations);
	reply_object(resp, 200, o);
}

/* ---- lifecycle ---------------------------------------------------------------- */

static int ipam_api_init(struct fibril_module *m)
{
	struct ipam_api *api = calloc(1, sizeof(*api));
	int rc;

	if (!api)
		return -ENOMEM;
	api->m = m;
	fibril_module_set_data(m, api);
	if ((rc = fibril_api_route(m, "GET", "/v1/ipam", 0, get_ipam, api)) ||
	    (rc = fibril_api_route(m, "POST", "/v1/ipam", 0, post_next, api)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/ipam", 0, delete_owner, api)) ||
	    (rc = fibril_api_route(m, "POST", "/v1/ipam/{ip}", 0, post_ip, api)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/ipam/{ip}", 0, delete_ip, api))) {
		fibril_module_set_error(m, "cannot register the /v1/ipam routes: %s", strerror(-rc));
		return rc;
	}
	if ((rc = metrics_register(api))) {
		fibril_module_set_error(m, "cannot register the ipam metrics: %s", strerror(-rc));
		return rc;
	}
	return 0;
}

/* Bind the mode the graph chose (it started before us: we require it). */
static int ipam_api_start(struct fibril_module *m)
{
	struct ipam_api *api = fibril_module_data(m);
	void *ctx = NULL;
	const struct fibril_service_header *hdr =
		fibril_service_lookup(m, FIBRIL_IPAM_CAPABILITY, 1 /* the lowest it needs */, &ctx);

	if (!hdr) {
		int err = errno ? errno : ENOENT;

		fibril_module_set_error(m, "no usable '%s' provider: %s", FIBRIL_IPAM_CAPABILITY,
					err == EPROTO ? "its interface is older than version 1" : strerror(err));
		return -err;
	}

	const struct fibril_ipam_ops *ops = (const struct fibril_ipam_ops *)hdr;

	if (!FIBRIL_SERVICE_HAS(ops, pools) || !ops->allocate_next || !ops->allocate_ip ||
	    !ops->release_ip || !ops->release_owner || !ops->list || !ops->pools) {
		fibril_module_set_error(m, "the '%s' provider's table is incomplete (%u bytes, version %u)",
					FIBRIL_IPAM_CAPABILITY, hdr->sz, hdr->version);
		return -EPROTO;
	}
	api->ops = ops;
	api->ctx = ctx;
	fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "serving /v1/ipam");
	return 0;
}

static void ipam_api_stop(struct fibril_module *m)
{
	struct ipam_api *api = fibril_module_data(m);

	api->ops = NULL;
	api->ctx = NULL;
}

static void ipam_api_fini(struct fibril_module *m)
{
	free(fibril_module_data(m));
	fibril_module_set_data(m, NULL);
}

/* "12/253 allocated from 10.0.3.0/24, 3/65533 from fd00::/112" */
static int ipam_api_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct ipam_api *api = fibril_module_data(m);
	struct fibril_ipam_pool pools[MAX_POOLS];
	size_t n = api && api->ops ? read_pools(api, pools, MAX_POOLS) : 0;
	size_t used = 0;

	if (len == 0)
		return -EINVAL;
	if (n == 0)
		return snprintf(buf, len, "%s", api && api->ops ? "no pool yet" : "not bound");
	buf[0] = '\0';
	for (size_t i = 0; i < n && used < len; i++) {
		int w = snprintf(buf + used, len - used, "%s%llu/%llu %sfrom %s", i ? ", " : "",
				 (unsigned long long)pools[i].used, (unsigned long long)pools[i].total,
				 i ? "" : "allocated ", pools[i].cidr);

		if (w < 0)
			return -EIO;
		used += (size_t)w;
	}
	return (int)(used < len ? used : len - 1);
}

FIBRIL_MODULE(.name = "ipam-api", .version = "1.0.0",
	      .description = "serves the ipam capability on /v1/ipam (and `fibril ipam`)",
	      .requires = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY),
	      .init = ipam_api_init, .start = ipam_api_start, .stop = ipam_api_stop,
	      .fini = ipam_api_fini, .summary = ipam_api_summary);
