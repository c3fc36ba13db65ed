/* cni/cmd_gc.c - CNI GC and STATUS (spec 1.1.0).
 * GC: every attachment not in cni.dev/valid-attachments loses its endpoint
 * (GET /v1/endpoint), its IPAM owner (GET /v1/ipam; owners of the form
 * CONTAINERID/IFNAME only) and its host veth (lxc<hash> links of this
 * namespace). It goes on past errors and reports them together (code 105).
 * STATUS: 0 when the agent answers and an IPAM pool has a free address,
 * else 50 with why. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fibril_cni.h"

struct attachments {
	char **owners; /* "CID/IFNAME" */
	char **hosts;  /* lxc<hash> */
	size_t n;
};

struct gc_report {
	char text[1536];
	int errors;
	int removed;
};

static void report(struct gc_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(struct gc_report *r, const char *fmt, ...)
{
	size_t len = strlen(r->text);
	if (len + 4 >= sizeof(r->text))
		return;
	snprintf(r->text + len, sizeof(r->text) - len, "%s", len ? "; " : "");
	len = strlen(r->text);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->text + len, sizeof(r->text) - len, fmt, ap);
	va_end(ap);
	r->errors++;
}

static bool listed(char **v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i], s) == 0)
			return true;
	return false;
}

static void attachments_free(struct attachments *a)
{
	for (size_t i = 0; i < a->n; i++) {
		free(a->owners[i]);
		free(a->hosts[i]);
	}
	free(a->owners);
	free(a->hosts);
}

static int parse_attachments(struct netconf *conf, struct attachments *out)
{
	struct json_object *list;
	memset(out, 0, sizeof(*out));
	if (!json_object_object_get_ex(conf->root, "cni.dev/valid-attachments", &list) &&
	    !json_object_object_get_ex(conf->root, "cni.dev/attachments", &list))
		return cni_error(CNI_ERR_INVALID_CONFIG, "cni.dev/valid-attachments",
				 "invalid network configuration: cni.dev/valid-attachments: is required for GC");
	if (!json_object_is_type(list, json_type_array))
		return cni_error(CNI_ERR_INVALID_CONFIG, "cni.dev/valid-attachments",
				 "invalid network configuration: cni.dev/valid-attachments: expected a list of "
				 "{\"containerID\", \"ifname\"}");
	size_t n = json_object_array_length(list);
	out->owners = calloc(n + 1, sizeof(char *));
	out->hosts = calloc(n + 1, sizeof(char *));
	if (!out->owners || !out->hosts)
		return cni_error(CNI_ERR_IO, NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(list, i);
		const char *cid = json_str(e, "containerID"), *ifname = json_str(e, "ifname");
		if (!cid || !ifname || !*cid || !*ifname)
			return cni_error(CNI_ERR_INVALID_CONFIG, "cni.dev/valid-attachments",
					 "invalid network configuration: cni.dev/valid-attachments[%zu]: expected "
					 "{\"containerID\", \"ifname\"}",
					 i);
		size_t len = strlen(cid) + strlen(ifname) + 2;
		out->owners[out->n] = malloc(len);
		out->hosts[out->n] = malloc(16);
		if (!out->owners[out->n] || !out->hosts[out->n]) {
			out->n++;
			return cni_error(CNI_ERR_IO, NULL, "out of memory");
		}
		snprintf(out->owners[out->n], len, "%s/%s", cid, ifname);
		host_ifname_for(cid, ifname, out->hosts[out->n]);
		out->n++;
	}
	return 0;
}

/* An IPAM owner fibril-cni made: CONTAINERID/IFNAME. */
static bool is_cni_owner(const char *owner)
{
	const char *slash = strchr(owner, '/');
	if (!slash || slash == owner || !slash[1] || strchr(slash + 1, '/') || strlen(slash + 1) > 15)
		return false;
	for (const char *p = owner; p < slash; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '.' || *p == '-'))
			return false;
	return true;
}

static int gc_endpoints(const struct attachments *valid, struct nl_sock *hsk, struct gc_report *r)
{
	struct agent_reply reply;
	if (agent_request("GET", "/v1/endpoint", NULL, &reply) < 0)
		return -1;
	struct json_object *list;
	if (reply.status == 404 && !json_object_object_get_ex(reply.json, "endpoints", &list)) {
		agent_reply_free(&reply); /* no endpoint module: nothing to collect */
		return 0;
	}
	if (reply.status != 200 || !json_object_object_get_ex(reply.json, "endpoints", &list) ||
	    !json_object_is_type(list, json_type_array)) {
		report(r, "cannot list the endpoints: %s", reply.error[0] ? reply.error : "bad reply");
		agent_reply_free(&reply);
		return 0;
	}
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		struct json_object *ep = json_object_array_get_idx(list, i), *id;
		const char *cid = json_str(ep, "container-id"), *ifname = json_str(ep, "ifname");
		const char *host = json_str(ep, "host-ifname");
		if (!cid || !ifname || !json_object_object_get_ex(ep, "id", &id))
			continue;
		char owner[512], path[64];
		snprintf(owner, sizeof(owner), "%s/%s", cid, ifname);
		if (listed(valid->owners, valid->n, owner))
			continue;
		snprintf(path, sizeof(path), "/v1/endpoint/%d", json_object_get_int(id));
		struct agent_reply del;
		if (agent_request("DELETE", path, NULL, &del) < 0) {
			agent_reply_free(&reply);
			return -1;
		}
		if (del.status == 200 || del.status == 404)
			r->removed++;
		else
			report(r, "endpoint of %s: %s", owner, del.error);
		agent_reply_free(&del);
		if (host && is_fibril_host_ifname(host) && !listed(valid->hosts, valid->n, host) &&
		    link_delete(hsk, host) < 0) {
			report(r, "veth %s: %s", host, cni_error_msg());
			cni_error_clear();
		}
	}
	agent_reply_free(&reply);
	return 0;
}

static int gc_ipam(const struct attachments *valid, struct gc_report *r)
{
	struct agent_reply reply;
	if (agent_request("GET", "/v1/ipam", NULL, &reply) < 0)
		return -1;
	struct json_object *list;
	if (reply.status != 200 || !json_object_object_get_ex(reply.json, "allocations", &list) ||
	    !json_object_is_type(list, json_type_array)) {
		report(r, "cannot list the IPAM allocations: %s", reply.error[0] ? reply.error : "bad reply");
		agent_reply_free(&reply);
		return 0;
	}
	char **done = calloc(json_object_array_length(list) + 1, sizeof(char *));
	size_t ndone = 0;
	for (size_t i = 0; done && i < json_object_array_length(list); i++) {
		const char *owner = json_str(json_object_array_get_idx(list, i), "owner");
		if (!owner || !is_cni_owner(owner) || listed(valid->owners, valid->n, owner) ||
		    listed(done, ndone, owner))
			continue;
		done[ndone++] = strdup(owner);
		char *esc = agent_escape(owner);
		char path[1024];
		snprintf(path, sizeof(path), "/v1/ipam?owner=%s", esc ? esc : "");
		free(esc);
		struct agent_reply del;
		if (agent_request("DELETE", path, NULL, &del) < 0) {
			free_strv(done);
			agent_reply_free(&reply);
			return -1;
		}
		if (del.status == 200)
			r->removed++;
		else
			report(r, "IPAM owner %s: %s", owner, del.error);
		agent_reply_free(&del);
	}
	free_strv(done);
	agent_reply_free(&reply);
	return 0;
}

static void gc_links(const struct attachments *valid, struct nl_sock *hsk, struct gc_report *r)
{
	char **links = host_veth_list(hsk);
	if (!links) {
		report(r, "%s", cni_error_msg());
		cni_error_clear();
		return;
	}
	for (char **l = links; *l; l++) {
		if (listed(valid->hosts, valid->n, *l))
			continue;
		if (link_delete(hsk, *l) < 0) {
			report(r, "veth %s: %s", *l, cni_error_msg());
			cni_error_clear();
		} else {
			r->removed++;
		}
	}
	free_strv(links);
}

int cmd_gc(struct netconf *conf)
{
	struct attachments valid;
	struct gc_report r = {0};
	int rc = -1;
	struct nl_sock *hsk = NULL;
	if (parse_attachments(conf, &valid) < 0)
		goto out;
	if (!(hsk = nl_open()))
		goto out;
	if (gc_endpoints(&valid, hsk, &r) < 0 || gc_ipam(&valid, &r) < 0)
		goto out;
	gc_links(&valid, hsk, &r);
	if (r.errors)
		cni_error(FCNI_ERR_GC, r.text, "GC could not remove everything (%d errors): %s", r.errors, r.text);
	else
		rc = 0;
out:
	cni_nl_close(hsk);
	attachments_free(&valid);
	return rc;
}

int cmd_status(struct netconf *conf)
{
	struct agent_reply reply;
	if (agent_request("GET", "/v1/ipam", NULL, &reply) < 0) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", cni_error_msg());
		cni_error_clear();
		return cni_error(CNI_ERR_STATUS_UNAVAILABLE, conf->socket, "%s", msg);
	}
	int rc = 0;
	struct json_object *pools;
	if (reply.status != 200) {
		rc = cni_error(CNI_ERR_STATUS_UNAVAILABLE, reply.error, "IPAM is not available at the agent: %s",
			       reply.error);
	} else if (!json_object_object_get_ex(reply.json, "pools", &pools) ||
		   !json_object_is_type(pools, json_type_array) || json_object_array_length(pools) == 0) {
		rc = cni_error(CNI_ERR_STATUS_UNAVAILABLE, NULL, "IPAM has no address pool yet");
	} else {
		bool free_found = false;
		char full[512] = "";
		for (size_t i = 0; i < json_object_array_length(pools); i++) {
			struct json_object *p = json_object_array_get_idx(pools, i), *used, *total;
			if (!json_object_object_get_ex(p, "used", &used) ||
			    !json_object_object_get_ex(p, "total", &total))
				continue;
			if (json_object_get_int64(used) < json_object_get_int64(total))
				free_found = true;
			else
				snprintf(full + strlen(full), sizeof(full) - strlen(full), "%s%s", full[0] ? ", " : "",
					 json_str(p, "cidr") ? json_str(p, "cidr") : "?");
		}
		if (!free_found)
			rc = cni_error(CNI_ERR_STATUS_UNAVAILABLE, full, "every IPAM pool is full: %s", full);
	}
	agent_reply_free(&reply);
	return rc;
}
