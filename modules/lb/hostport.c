/* modules/lb/hostport.c - hostPort, as kubelet asks for it through the CNI
 * portMappings capability (fibril-cni passes a pod's mappings here): each
 * mapping is a service of source "hostport", type NodePort, on the node
 * address hostIP names (or on every node address when it names none), with
 * the pod's address and containerPort as its one backend. The socket hooks
 * translate it for the node's own processes, the tc programs for packets
 * from outside, as any NodePort; no iptables, no portmap plugin.
 *
 *   PUT    /v1/hostport/{owner}  claim an attachment's mappings (replacing
 *                                what it held); 409 when another holds one
 *   DELETE /v1/hostport/{owner}  release them (none is fine)
 *   GET    /v1/hostport          every claimed frontend and its owner
 *
 * The owner is the attachment, "CONTAINERID:IFNAME", kept as the services'
 * name; their source and name go to the origins journal and the services to
 * the pins, so a restarted agent still knows whose they are. An endpoint
 * deleted (endpoint.deleted on the bus) releases its attachment's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>
#include <fibril/endpoint.h>

#include "lb_mod.h"

#define HP_MAPPINGS_MAX 64u
#define HP_FRONTENDS_MAX 512u

struct hp_frontend {
	struct lb_addr addr; /* node address */
	uint16_t port;
	uint8_t proto;
	struct lb_addr be;   /* the pod's */
	uint16_t be_port;
};

static void reply(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

static bool is_owner(const struct lb_svc *s, const char *owner)
{
	return s && s->source == LB_SRC_HOSTPORT && !strcmp(s->name, owner);
}

/* "CONTAINERID:IFNAME": an interface name holds no ':' or '/' */
static bool owner_ok(const char *o)
{
	const char *colon = o ? strrchr(o, ':') : NULL;
	if (!colon || colon == o || !colon[1] || strlen(colon + 1) > 15 ||
	    strlen(o) > LB_NAME_MAX - 1)
		return false;
	for (const char *p = o; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == '/' || (unsigned char)*p >= 0x7f)
			return false;
	return true;
}

static bool parse_ip(const char *s, struct lb_addr *a)
{
	struct in_addr a4;
	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, s, &a4) == 1) {
		a->a[10] = a->a[11] = 0xff;
		memcpy(a->a + 12, &a4, 4);
		return true;
	}
	return inet_pton(AF_INET6, s, a->a) == 1;
}

static bool addr_unspecified(const struct lb_addr *a)
{
	static const uint8_t zero[16];
	return !memcmp(a->a, zero, 16) || (lb_addr_is_v4(a) && !memcmp(a->a + 12, zero, 4));
}

static bool v6_link_local(const struct lb_addr *a)
{
	return !lb_addr_is_v4(a) && a->a[0] == 0xfe && (a->a[1] & 0xc0) == 0x80;
}

static int port_of(struct json_object *m, const char *key, size_t i, uint16_t *out, char *err,
		   size_t len)
{
	struct json_object *v;
	if (!json_object_object_get_ex(m, key, &v) || !json_object_is_type(v, json_type_int)) {
		lb_seterr(err, len, "port-mappings[%zu].%s: expected a port number", i, key);
		return -EINVAL;
	}
	int64_t p = json_object_get_int64(v);
	if (p < 1 || p > 65535) {
		lb_seterr(err, len, "port-mappings[%zu].%s: %lld is not a port (1-65535)", i, key,
			  (long long)p);
		return -EINVAL;
	}
	*out = (uint16_t)p;
	return 0;
}

static int add_frontend(struct hp_frontend *fe, size_t *n, const struct hp_frontend *f, size_t i,
			char *err, size_t len)
{
	for (size_t k = 0; k < *n; k++)
		if (!memcmp(&fe[k].addr, &f->addr, sizeof(f->addr)) && fe[k].port == f->port &&
		    fe[k].proto == f->proto) {
			char a[80];
			lb_format_addrport(&f->addr, f->port, a, sizeof(a));
			lb_seterr(err, len, "port-mappings[%zu]: %s/%s is mapped twice", i, a,
				  lb_proto_name(f->proto));
			return -EINVAL;
		}
	if (*n >= HP_FRONTENDS_MAX) {
		lb_seterr(err, len, "port-mappings: more than %u frontends", HP_FRONTENDS_MAX);
		return -EINVAL;
	}
	fe[(*n)++] = *f;
	return 0;
}

/* The body {"addresses": [pod IPs], "port-mappings": [{"host-port",
 * "container-port", "protocol", "host-ip"}]} -> the frontends to claim. */
static int parse_request(struct lb *lb, const char *body, size_t blen, struct hp_frontend *fe,
			 size_t *n, char *err, size_t len)
{
	struct lb_addr pod4 = {{0}}, pod6 = {{0}};
	bool has4 = false, has6 = false;
	struct json_tokener *tok = json_tokener_new();
	struct json_object *root = tok ? json_tokener_parse_ex(tok, body, (int)blen) : NULL;
	bool whole = tok && json_tokener_get_error(tok) == json_tokener_success &&
		     (size_t)json_tokener_get_parse_end(tok) == blen;
	json_tokener_free(tok);
	int rc = -EINVAL;
	struct json_object *addrs, *maps;
	if (!root || !whole || !json_object_is_type(root, json_type_object)) {
		lb_seterr(err, len, "the body is not one JSON object");
		goto out;
	}
	if (!json_object_object_get_ex(root, "addresses", &addrs) ||
	    !json_object_is_type(addrs, json_type_array) || !json_object_array_length(addrs) ||
	    json_object_array_length(addrs) > 2) {
		lb_seterr(err, len, "addresses: expected the pod's one or two IP addresses");
		goto out;
	}
	for (size_t i = 0; i < json_object_array_length(addrs); i++) {
		struct json_object *a = json_object_array_get_idx(addrs, i);
		struct lb_addr x;
		const char *why;
		if (!json_object_is_type(a, json_type_string) || !parse_ip(json_object_get_string(a), &x)) {
			lb_seterr(err, len, "addresses[%zu]: not an IP address", i);
			goto out;
		}
		if ((why = lb_backend_addr_refusal(&x)) || addr_unspecified(&x)) {
			lb_seterr(err, len, "addresses[%zu]: '%s' cannot be a pod's address (%s)", i,
				  json_object_get_string(a), why ? why : "unspecified");
			goto out;
		}
		if (lb_addr_is_v4(&x) ? has4 : has6) {
			lb_seterr(err, len, "addresses[%zu]: a second address of one family", i);
			goto out;
		}
		*(lb_addr_is_v4(&x) ? &pod4 : &pod6) = x;
		*(lb_addr_is_v4(&x) ? &has4 : &has6) = true;
	}
	if (!json_object_object_get_ex(root, "port-mappings", &maps) ||
	    !json_object_is_type(maps, json_type_array)) {
		lb_seterr(err, len, "port-mappings: expected an array");
		goto out;
	}
	size_t nmaps = json_object_array_length(maps);
	if (nmaps > HP_MAPPINGS_MAX) {
		lb_seterr(err, len, "port-mappings: %zu is more than %u", nmaps, HP_MAPPINGS_MAX);
		goto out;
	}
	struct lb_addr *mine = NULL;
	size_t nmine = 0;
	if (lb_node_addrs_list(fibril_config_string(lb_module_of(lb), "node-addresses"), &mine,
			       &nmine) < 0) {
		lb_seterr(err, len, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nmaps; i++) {
		struct json_object *m = json_object_array_get_idx(maps, i), *v;
		struct hp_frontend f = {0};
		if (!json_object_is_type(m, json_type_object)) {
			lb_seterr(err, len, "port-mappings[%zu]: expected an object", i);
			goto bad;
		}
		if (port_of(m, "host-port", i, &f.port, err, len) < 0 ||
		    port_of(m, "container-port", i, &f.be_port, err, len) < 0)
			goto bad;
		f.proto = IPPROTO_TCP;
		if (json_object_object_get_ex(m, "protocol", &v)) {
			const char *p = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
			if (!strcasecmp(p, "tcp"))
				f.proto = IPPROTO_TCP;
			else if (!strcasecmp(p, "udp"))
				f.proto = IPPROTO_UDP;
			else {
				lb_seterr(err, len, "port-mappings[%zu].protocol: '%s' is not tcp or udp", i, p);
				goto bad;
			}
		}
		struct lb_addr hip = {{0}};
		int only = 0; /* a wildcard hostIP: 4 "0.0.0.0", 6 "::", 0 none given */
		bool any = true;
		if (json_object_object_get_ex(m, "host-ip", &v)) {
			const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
			if (!s || (*s && !parse_ip(s, &hip))) {
				lb_seterr(err, len, "port-mappings[%zu].host-ip: not an IP address", i);
				goto bad;
			}
			any = !*s || addr_unspecified(&hip);
			if (*s && any)
				only = lb_addr_is_v4(&hip) ? 4 : 6;
		}
		if (!any) {
			if (!lb_addr_in(mine, nmine, &hip)) {
				lb_seterr(err, len, "port-mappings[%zu].host-ip: %s is not an address of this "
						    "node", i, json_object_get_string(v));
				goto bad;
			}
			if (!(lb_addr_is_v4(&hip) ? has4 : has6)) {
				lb_seterr(err, len, "port-mappings[%zu].host-ip: %s, but the pod has no "
						    "address of that family", i, json_object_get_string(v));
				goto bad;
			}
			f.addr = hip;
			f.be = lb_addr_is_v4(&hip) ? pod4 : pod6;
			if (add_frontend(fe, n, &f, i, err, len) < 0)
				goto bad;
			continue;
		}
		/* every node address of a family the pod has */
		for (size_t k = 0; k < nmine; k++) {
			bool v4 = lb_addr_is_v4(&mine[k]);
			if ((v4 ? !has4 : !has6) || (only && only != (v4 ? 4 : 6)) ||
			    v6_link_local(&mine[k]) || addr_unspecified(&mine[k]) ||
			    lb_addr_in(mine, k, &mine[k])) /* listed on two devices */
				continue;
			f.addr = mine[k];
			f.be = v4 ? pod4 : pod6;
			if (add_frontend(fe, n, &f, i, err, len) < 0)
				goto bad;
		}
	}
	rc = 0;
bad:
	free(mine);
out:
	json_object_put(root);
	return rc;
}

/* Removes every service owner holds except those in keep[0..nkeep). */
static size_t release(struct lb *lb, const char *owner, const uint16_t *keep, size_t nkeep)
{
	size_t n = 0;
	char err[256];
	for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++) {
		if (!is_owner(lb->t.svc[id], owner))
			continue;
		bool kept = false;
		for (size_t k = 0; k < nkeep && !kept; k++)
			kept = keep[k] == id;
		if (kept)
			continue;
		if (lb_delete(lb, (uint16_t)id, err, sizeof(err)) < 0)
			fibril_warn(lb->m, "hostport %s: service %u: %s", owner, id, err);
		else
			n++;
	}
	return n;
}

static struct json_object *frontend_json(const struct lb_svc *s)
{
	char a[80];
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_int(s->id));
	lb_format_addrport(&s->addr, s->port, a, sizeof(a));
	json_object_object_add(o, "frontend", json_object_new_string(a));
	json_object_object_add(o, "protocol", json_object_new_string(lb_proto_name(s->proto)));
	if (s->nbe) {
		lb_format_addrport(&s->be[0].addr, s->be[0].port, a, sizeof(a));
		json_object_object_add(o, "backend", json_object_new_string(a));
	}
	json_object_object_add(o, "owner", json_object_new_string(s->name));
	return o;
}

static void put_hostport(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	const char *owner = fibril_req_param(req, "owner");
	char err[512];
	if (!owner_ok(owner)) {
		fibril_resp_error(resp, 400, "hostport owner '%s' is not CONTAINERID:IFNAME",
				  owner ? owner : "");
		return;
	}
	if (!lb->table_ready) {
		fibril_resp_error(resp, 503, "the lb module is not started");
		return;
	}
	size_t blen = 0, n = 0;
	const char *body = fibril_req_body(req, &blen);
	struct hp_frontend *fe = calloc(HP_FRONTENDS_MAX, sizeof(*fe));
	uint16_t *ids = calloc(HP_FRONTENDS_MAX, sizeof(*ids));
	bool *made = calloc(HP_FRONTENDS_MAX, sizeof(*made));
	if (!fe || !ids || !made) {
		fibril_resp_error(resp, 500, "out of memory");
		goto out;
	}
	int rc = parse_request(lb, body ? body : "", body ? blen : 0, fe, &n, err, sizeof(err));
	if (rc < 0) {
		lb_count_op(lb, "upsert", rc);
		fibril_resp_error(resp, rc == -EINVAL ? 400 : 500, "%s", err);
		goto out;
	}
	/* every frontend free or already this owner's, before anything changes */
	for (size_t i = 0; i < n; i++) {
		struct lb_svc *s = lb_table_find(&lb->t, &fe[i].addr, fe[i].port, fe[i].proto);
		if (!s || is_owner(s, owner))
			continue;
		char a[80];
		lb_format_addrport(&fe[i].addr, fe[i].port, a, sizeof(a));
		lb_count_op(lb, "upsert", -EEXIST);
		fibril_resp_error(resp, 409, "hostPort %s/%s is taken by %s %s", a,
				  lb_proto_name(fe[i].proto),
				  s->source == LB_SRC_HOSTPORT ? "the pod attachment" : "the service",
				  s->name[0] ? s->name : "(unnamed)");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct lb_svc *spec = calloc(1, sizeof(*spec));
		struct lb_be_spec *be = calloc(1, sizeof(*be));
		if (!spec || !be) {
			free(spec);
			free(be);
			snprintf(err, sizeof(err), "out of memory");
			rc = -ENOMEM;
			goto undo;
		}
		made[i] = !lb_table_find(&lb->t, &fe[i].addr, fe[i].port, fe[i].proto);
		*spec = (struct lb_svc){.addr = fe[i].addr, .port = fe[i].port, .proto = fe[i].proto,
					.type = LB_SVC_NODE_PORT, .source = LB_SRC_HOSTPORT,
					.algorithm = LB_ALG_RANDOM, .nbe = 1, .be = be};
		be->addr = fe[i].be;
		be->port = fe[i].be_port;
		be->state = LB_BE_ACTIVE;
		snprintf(spec->name, sizeof(spec->name), "%s", owner);
		rc = lb_upsert(lb, &spec, &ids[i], err, sizeof(err));
		lb_svc_free(spec);
		if (rc < 0)
			goto undo;
	}
	release(lb, owner, ids, n); /* what a former claim held and this one does not */
	fibril_info(lb->m, "hostport %s: %zu frontends", owner, n);
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(arr, frontend_json(lb->t.svc[ids[i]]));
	json_object_object_add(o, "frontends", arr);
	reply(resp, 200, o);
	goto out;
undo:
	for (size_t i = 0; i < n; i++) {
		char e2[256];
		if (made[i] && ids[i])
			(void)lb_delete(lb, ids[i], e2, sizeof(e2));
	}
	fibril_resp_error(resp, rc == -EEXIST ? 409 : rc == -ENOSPC ? 507 : 500, "%s", err);
out:
	free(fe);
	free(ids);
	free(made);
}

static void delete_hostport(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct lb *lb = ud;
	const char *owner = fibril_req_param(req, "owner");
	if (!owner_ok(owner)) {
		fibril_resp_error(resp, 400, "hostport owner '%s' is not CONTAINERID:IFNAME",
				  owner ? owner : "");
		return;
	}
	if (!lb->table_ready) {
		fibril_resp_error(resp, 503, "the lb module is not started");
		return;
	}
	size_t n = release(lb, owner, NULL, 0);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "released", json_object_new_int64((int64_t)n));
	reply(resp, 200, o);
}

static void get_hostports(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct lb *lb = ud;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	if (lb->table_ready)
		for (uint32_t id = 1; id <= LB_SVC_ID_MAX; id++)
			if (lb->t.svc[id] && lb->t.svc[id]->source == LB_SRC_HOSTPORT)
				json_object_array_add(arr, frontend_json(lb->t.svc[id]));
	json_object_object_add(o, "frontends", arr);
	reply(resp, 200, o);
}

/* endpoint.deleted: the attachment's hostPorts go with it */
static int on_endpoint_deleted(const struct fibril_event *ev, void *ud)
{
	struct lb *lb = ud;
	const struct fibril_endpoint_event *ep = ev->payload;
	if (!lb->table_ready || ev->payload_len < offsetof(struct fibril_endpoint_event, pod_namespace))
		return 0;
	char owner[LB_NAME_MAX + 1];
	snprintf(owner, sizeof(owner), "%.*s:%.*s", FIBRIL_ENDPOINT_CONTAINER_ID_MAX,
		 ep->container_id, 15, ep->ifname);
	if (!owner_ok(owner))
		return 0;
	size_t n = release(lb, owner, NULL, 0);
	if (n)
		fibril_info(lb->m, "hostport %s: %zu frontends released with the endpoint", owner, n);
	return 0;
}

int lb_hostport_init(struct lb *lb)
{
	struct fibril_module *m = lb->m;
	int rc;
	if ((rc = fibril_api_route(m, "GET", "/v1/hostport", 0, get_hostports, lb)) ||
	    (rc = fibril_api_route(m, "PUT", "/v1/hostport/{owner}", 0, put_hostport, lb)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/hostport/{owner}", 0, delete_hostport, lb))) {
		fibril_module_set_error(m, "cannot register the /v1/hostport routes: %s", strerror(-rc));
		return rc;
	}
	if (!fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_DELETED, 1, on_endpoint_deleted, lb)) {
		fibril_module_set_error(m, "cannot subscribe to %s", FIBRIL_ENDPOINT_TOPIC_DELETED);
		return -ENOMEM;
	}
	return 0;
}
