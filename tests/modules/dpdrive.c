/* tests/modules/dpdrive.c - a test module that drives the "datapath"
 * capability over the API, standing in for the endpoint module in
 * tests/integration/datapath.sh and tests/bench/bench_datapath.sh:
 *
 *   PUT    /v1/test/datapath/{name}   body {"host-ifname": "lxc1", "mac": "..",
 *          "host-mac": "..", "ipv4": "10.9.0.10", "ipv6": "fd00::10",
 *          "id": 17, "identity": 256}  -> endpoint_upsert (host-ifindex is
 *          looked up from host-ifname in the agent's netns)
 *   DELETE /v1/test/datapath/{name}   -> endpoint_remove with what PUT gave
 *   GET    /v1/test/datapath-node     -> node()
 *   PUT    /v1/test/datapath-ipcache?cidr=C&identity=N -> ipcache_upsert
 *   DELETE /v1/test/datapath-ipcache?cidr=C            -> ipcache_remove
 *   PUT    /v1/test/datapath-ipcache-batch?first=A&count=N&identity=K&tunnel=T[&bad=I]
 *          -> ipcache_upsert_batch of the N /32s from IPv4 address A on, each
 *          with tunnel endpoint T (entry I, when given, of family 9: refused)
 *          -> {"done": D}; &stride=S lays the entries out S bytes apart, as
 *          a module built against another SDK would (each sz = S; bytes past
 *          the struct zero, or with &junk=1 one non-zero byte at its end);
 *          &mismatch=I gives entry I an sz of S+8 (its stride stays S)
 * Errors: {"error": "<the datapath's reason>"} with 400/404/409/500. */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <fibril/fibril.h>

#define MAX_EPS 64

struct named_ep {
	char name[64];
	struct fibril_datapath_endpoint ep;
};

struct drive {
	struct fibril_module *m;
	const struct fibril_datapath_ops *dp;
	void *ctx;
	struct named_ep eps[MAX_EPS];
	int neps;
};

static struct drive g_drive;

static int status_of(int rc)
{
	switch (rc) {
	case -EINVAL:
		return 400;
	case -E2BIG:
		return 413;
	case -ENODEV:
	case -ENOENT:
		return 404;
	case -EEXIST:
		return 409;
	case -EAGAIN:
		return 503;
	default:
		return 500;
	}
}

static struct named_ep *find(struct drive *d, const char *name)
{
	for (int i = 0; i < d->neps; i++)
		if (!strcmp(d->eps[i].name, name))
			return &d->eps[i];
	return NULL;
}

static int parse_mac(const char *s, uint8_t *mac)
{
	unsigned v[6];
	char tail;
	if (!s || sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
			 &tail) != 6)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (v[i] > 255)
			return -1;
		mac[i] = (uint8_t)v[i];
	}
	return 0;
}

static const char *jstr(struct json_object *o, const char *k)
{
	struct json_object *v;
	return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string)
		       ? json_object_get_string(v)
		       : NULL;
}

static int64_t jint(struct json_object *o, const char *k, int64_t dflt)
{
	struct json_object *v;
	return json_object_object_get_ex(o, k, &v) ? json_object_get_int64(v) : dflt;
}

static void route_put(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct drive *d = ud;
	const char *name = fibril_req_param(req, "name");
	size_t len;
	const char *body = fibril_req_body(req, &len);
	struct json_object *o = body ? json_tokener_parse(body) : NULL;
	struct fibril_datapath_endpoint ep;
	char err[256] = "";

	if (!o) {
		fibril_resp_error(resp, 400, "body: expected a JSON object");
		return;
	}
	memset(&ep, 0, sizeof(ep));
	ep.sz = sizeof(ep);
	ep.id = (uint16_t)jint(o, "id", 0);
	ep.identity = (uint32_t)jint(o, "identity", 0);
	const char *ifname = jstr(o, "host-ifname");
	if (!ifname || strlen(ifname) >= sizeof(ep.host_ifname)) {
		fibril_resp_error(resp, 400, "body: host-ifname is required (at most 15 characters)");
		goto out;
	}
	snprintf(ep.host_ifname, sizeof(ep.host_ifname), "%s", ifname);
	ep.host_ifindex = (int)jint(o, "host-ifindex", (int64_t)if_nametoindex(ifname));
	if (parse_mac(jstr(o, "mac"), ep.mac) < 0 || parse_mac(jstr(o, "host-mac"), ep.host_mac) < 0) {
		fibril_resp_error(resp, 400, "body: mac and host-mac must be aa:bb:cc:dd:ee:ff");
		goto out;
	}
	const char *v4 = jstr(o, "ipv4"), *v6 = jstr(o, "ipv6");
	if (v4 && inet_pton(AF_INET, v4, &ep.ipv4) != 1) {
		fibril_resp_error(resp, 400, "body: ipv4 '%s' is not an IPv4 address", v4);
		goto out;
	}
	if (v6 && inet_pton(AF_INET6, v6, &ep.ipv6) != 1) {
		fibril_resp_error(resp, 400, "body: ipv6 '%s' is not an IPv6 address", v6);
		goto out;
	}
	ep.has_ipv4 = v4 != NULL;
	ep.has_ipv6 = v6 != NULL;
	struct named_ep *slot = find(d, name);
	if (!slot && d->neps == MAX_EPS) {
		fibril_resp_error(resp, 507, "dpdrive holds at most %d endpoints", MAX_EPS);
		goto out;
	}
	int rc = d->dp->endpoint_upsert(d->ctx, &ep, err, sizeof(err));
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s", err);
		goto out;
	}
	if (!slot) {
		slot = &d->eps[d->neps++];
		snprintf(slot->name, sizeof(slot->name), "%s", name);
	}
	slot->ep = ep;
	char reply[128];
	snprintf(reply, sizeof(reply), "{\"id\":%u,\"host-ifindex\":%d}", ep.id, ep.host_ifindex);
	fibril_resp_json(resp, 200, reply);
out:
	json_object_put(o);
}

static void route_delete(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct drive *d = ud;
	struct named_ep *slot = find(d, fibril_req_param(req, "name"));
	char err[256] = "";

	if (!slot) {
		fibril_resp_error(resp, 404, "no endpoint named '%s'", fibril_req_param(req, "name"));
		return;
	}
	int rc = d->dp->endpoint_remove(d->ctx, &slot->ep, err, sizeof(err));
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s", err);
		return;
	}
	*slot = d->eps[--d->neps];
	fibril_resp_json(resp, 200, "{\"removed\":true}");
}

static void route_node(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct drive *d = ud;
	struct fibril_datapath_node n;
	char g4[INET_ADDRSTRLEN] = "", g6[INET6_ADDRSTRLEN] = "", out[256];

	memset(&n, 0, sizeof(n));
	n.sz = sizeof(n);
	int rc = d->dp->node(d->ctx, &n);
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "node: %s", strerror(-rc));
		return;
	}
	if (n.has_ipv4)
		inet_ntop(AF_INET, &n.gateway4, g4, sizeof(g4));
	if (n.has_ipv6)
		inet_ntop(AF_INET6, &n.gateway6, g6, sizeof(g6));
	snprintf(out, sizeof(out),
		 "{\"host-ifindex\":%d,\"host-ifname\":\"%.16s\",\"gateway4\":\"%s\",\"gateway6\":\"%s\"}",
		 n.host_ifindex, n.host_ifname, g4, g6);
	fibril_resp_json(resp, 200, out);
}

static void route_ipcache(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct drive *d = ud;
	const char *cidr = fibril_req_query(req, "cidr");
	char addrtext[64], err[256] = "";
	unsigned plen;
	uint8_t addr[16];

	if (!cidr || sscanf(cidr, "%63[^/]/%u", addrtext, &plen) != 2) {
		fibril_resp_error(resp, 400, "query 'cidr': expected ADDRESS/LEN");
		return;
	}
	int family = strchr(addrtext, ':') ? 6 : 4;
	if (inet_pton(family == 4 ? AF_INET : AF_INET6, addrtext, addr) != 1) {
		fibril_resp_error(resp, 400, "query 'cidr': bad address '%s'", addrtext);
		return;
	}
	int rc;
	if (!strcmp(fibril_req_method(req), "DELETE")) {
		rc = d->dp->ipcache_remove(d->ctx, family, addr, plen, err, sizeof(err));
	} else {
		const char *id = fibril_req_query(req, "identity");
		rc = d->dp->ipcache_upsert(d->ctx, family, addr, plen,
					   id ? (uint32_t)strtoul(id, NULL, 10) : 0, err,
					   sizeof(err));
	}
	if (rc < 0)
		fibril_resp_error(resp, status_of(rc), "%s", err);
	else
		fibril_resp_json(resp, 200, "{\"ok\":true}");
}

static void route_ipcache_batch(struct fibril_request *req, struct fibril_response *resp,
				void *ud)
{
	struct drive *d = ud;
	const char *first = fibril_req_query(req, "first"), *count = fibril_req_query(req, "count");
	const char *id = fibril_req_query(req, "identity"), *tunnel = fibril_req_query(req, "tunnel");
	const char *bad = fibril_req_query(req, "bad");
	struct in_addr a, t;
	char err[256] = "", out[64];
	size_t n = count ? strtoul(count, NULL, 10) : 0, done = 0;

	if (!first || inet_pton(AF_INET, first, &a) != 1 || !tunnel ||
	    inet_pton(AF_INET, tunnel, &t) != 1 || n == 0 || n > 65536) {
		fibril_resp_error(resp, 400, "query: first=IPv4&count=1..65536&tunnel=IPv4 expected");
		return;
	}
	if (!FIBRIL_SERVICE_HAS(d->dp, ipcache_upsert_batch)) {
		fibril_resp_error(resp, 501, "the datapath has no ipcache_upsert_batch");
		return;
	}
	const char *stride_q = fibril_req_query(req, "stride"), *junk = fibril_req_query(req, "junk");
	const char *mismatch = fibril_req_query(req, "mismatch");
	size_t stride = stride_q ? strtoul(stride_q, NULL, 10) : sizeof(struct fibril_datapath_ipcache_entry);
	if (stride < offsetof(struct fibril_datapath_ipcache_entry, identity) + 4 || stride > 4096) {
		fibril_resp_error(resp, 400, "query: stride out of range");
		return;
	}
	size_t copy = stride < sizeof(struct fibril_datapath_ipcache_entry)
			      ? stride : sizeof(struct fibril_datapath_ipcache_entry);
	uint8_t *buf = calloc(n, stride);
	if (!buf) {
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t host = ntohl(a.s_addr) + (uint32_t)i, be = htonl(host);
		struct fibril_datapath_ipcache_entry e = {0};
		e.sz = (uint32_t)stride;
		if (mismatch && strtoul(mismatch, NULL, 10) == i)
			e.sz += 8;
		e.family = bad && strtoul(bad, NULL, 10) == i ? 9 : 4;
		e.prefix_len = 32;
		e.tunnel_family = stride > offsetof(struct fibril_datapath_ipcache_entry, tunnel_endpoint) ? 4 : 0;
		e.identity = id ? (uint32_t)strtoul(id, NULL, 10) : 0;
		memcpy(e.addr, &be, 4);
		memcpy(e.tunnel_endpoint, &t, 4);
		memcpy(buf + i * stride, &e, copy);
		if (junk && stride > sizeof(e))
			buf[i * stride + stride - 1] = 0x5a;
	}
	int rc = d->dp->ipcache_upsert_batch(d->ctx, (const void *)buf, n, &done, err, sizeof(err));
	free(buf);
	if (rc < 0) {
		fibril_resp_error(resp, status_of(rc), "%s (done %zu)", err, done);
		return;
	}
	snprintf(out, sizeof(out), "{\"done\":%zu}", done);
	fibril_resp_json(resp, 200, out);
}

static int drive_init(struct fibril_module *m)
{
	g_drive.m = m;
	int rc = fibril_api_route(m, "PUT", "/v1/test/datapath/{name}", FIBRIL_ROUTE_JSON_BODY,
				  route_put, &g_drive);
	if (!rc)
		rc = fibril_api_route(m, "DELETE", "/v1/test/datapath/{name}", 0, route_delete,
				      &g_drive);
	if (!rc)
		rc = fibril_api_route(m, "GET", "/v1/test/datapath-node", 0, route_node, &g_drive);
	if (!rc)
		rc = fibril_api_route(m, "PUT", "/v1/test/datapath-ipcache", 0, route_ipcache,
				      &g_drive);
	if (!rc)
		rc = fibril_api_route(m, "DELETE", "/v1/test/datapath-ipcache", 0, route_ipcache,
				      &g_drive);
	if (!rc)
		rc = fibril_api_route(m, "PUT", "/v1/test/datapath-ipcache-batch", 0,
				      route_ipcache_batch, &g_drive);
	return rc;
}

static int drive_start(struct fibril_module *m)
{
	g_drive.dp = (const struct fibril_datapath_ops *)fibril_service_lookup(
		m, FIBRIL_DATAPATH_CAPABILITY, FIBRIL_DATAPATH_VERSION, &g_drive.ctx);
	if (!g_drive.dp) {
		fibril_module_set_error(m, "no datapath capability");
		return -ENOENT;
	}
	return 0;
}

FIBRIL_MODULE(.name = "dpdrive", .version = "1.0",
	      .description = "test: drives the datapath capability over the API",
	      .requires = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY), .init = drive_init,
	      .start = drive_start);
