/* cni/portmap.c - hostPort: the CNI portMappings capability. When the
 * configuration declares "capabilities": {"portMappings": true}, the
 * runtime (kubelet through containerd or CRI-O, libcni) puts the pod's
 * mappings in runtimeConfig.portMappings; ADD checks them before anything
 * is made and, once the endpoint exists, claims them from the agent's lb
 * module (PUT /v1/hostport/CONTAINERID:IFNAME), which maps
 * node-address:hostPort to pod:containerPort in the datapath. A hostPort
 * another pod holds is error 106 and the ADD is undone. DEL releases them
 * (DELETE /v1/hostport/..., idempotent). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fibril_cni.h"

#define PORTMAP_MAX 64

static int invalid_mapping(size_t i, const char *field, const char *why, const char *value)
{
	char where[96];
	snprintf(where, sizeof(where), "runtimeConfig.portMappings[%zu]%s%s", i, field[0] ? "." : "", field);
	return cni_error(CNI_ERR_INVALID_CONFIG, where, "invalid network configuration: %s: %s%s%s%s", where, why,
			 value ? " (got " : "", value ? value : "", value ? ")" : "");
}

static int port_field(struct json_object *m, const char *key, size_t i, int *out)
{
	struct json_object *v;
	if (!json_object_object_get_ex(m, key, &v))
		return invalid_mapping(i, key, "missing", NULL);
	if (!json_object_is_type(v, json_type_int))
		return invalid_mapping(i, key, "expected a port number", json_object_to_json_string(v));
	int64_t p = json_object_get_int64(v);
	if (p < 1 || p > 65535)
		return invalid_mapping(i, key, "not a port (1-65535)", json_object_to_json_string(v));
	*out = (int)p;
	return 0;
}

int portmap_parse(const struct netconf *conf, struct json_object **out)
{
	*out = NULL;
	struct json_object *caps, *v, *rc, *maps;
	if (!json_object_object_get_ex(conf->root, "capabilities", &caps) ||
	    !json_object_object_get_ex(caps, "portMappings", &v) || !json_object_get_boolean(v) ||
	    !json_object_object_get_ex(conf->root, "runtimeConfig", &rc) ||
	    !json_object_object_get_ex(rc, "portMappings", &maps) || json_object_is_type(maps, json_type_null))
		return 0; /* not asked for: nothing to do */
	if (!json_object_is_type(maps, json_type_array))
		return cni_error(CNI_ERR_INVALID_CONFIG, "runtimeConfig.portMappings",
				 "invalid network configuration: runtimeConfig.portMappings: expected a list");
	size_t n = json_object_array_length(maps);
	if (n > PORTMAP_MAX)
		return cni_error(CNI_ERR_INVALID_CONFIG, "runtimeConfig.portMappings",
				 "invalid network configuration: runtimeConfig.portMappings: %zu mappings, at most %d",
				 n, PORTMAP_MAX);
	if (!n)
		return 0;
	struct json_object *list = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		struct json_object *m = json_object_array_get_idx(maps, i), *o;
		int host, container;
		const char *proto = "tcp";
		if (!json_object_is_type(m, json_type_object)) {
			json_object_put(list);
			return invalid_mapping(i, "", "expected an object", NULL);
		}
		if (port_field(m, "hostPort", i, &host) < 0 || port_field(m, "containerPort", i, &container) < 0) {
			json_object_put(list);
			return -1;
		}
		if (json_object_object_get_ex(m, "protocol", &v) && !json_object_is_type(v, json_type_null)) {
			proto = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
			if (strcasecmp(proto, "tcp") && strcasecmp(proto, "udp")) {
				json_object_put(list);
				return invalid_mapping(i, "protocol", "fibril-cni maps tcp and udp",
						       json_object_to_json_string(v));
			}
		}
		o = json_object_new_object();
		json_object_object_add(o, "host-port", json_object_new_int(host));
		json_object_object_add(o, "container-port", json_object_new_int(container));
		json_object_object_add(o, "protocol", json_object_new_string(strcasecmp(proto, "udp") ? "tcp" : "udp"));
		if (json_object_object_get_ex(m, "hostIP", &v) && !json_object_is_type(v, json_type_null)) {
			unsigned char buf[16];
			const char *ip = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
			if (!ip || (*ip && inet_pton(AF_INET, ip, buf) != 1 && inet_pton(AF_INET6, ip, buf) != 1)) {
				json_object_put(o);
				json_object_put(list);
				return invalid_mapping(i, "hostIP", "not an IP address", json_object_to_json_string(v));
			}
			if (*ip)
				json_object_object_add(o, "host-ip", json_object_new_string(ip));
		}
		json_object_array_add(list, o);
	}
	*out = list;
	return 0;
}

static char *hostport_path(const struct cni_env *env)
{
	char ref[512];
	snprintf(ref, sizeof(ref), "%s:%s", env->container_id, env->ifname);
	char *esc = agent_escape(ref);
	if (!esc)
		return NULL;
	char *path = malloc(strlen(esc) + 16);
	if (path)
		sprintf(path, "/v1/hostport/%s", esc);
	free(esc);
	return path;
}

int portmap_claim(const struct cni_env *env, struct json_object *mappings, const char *const *addrs, int naddrs)
{
	struct json_object *body = json_object_new_object(), *list = json_object_new_array();
	for (int i = 0; i < naddrs; i++)
		json_object_array_add(list, json_object_new_string(addrs[i]));
	json_object_object_add(body, "addresses", list);
	json_object_object_add(body, "port-mappings", json_object_get(mappings));
	char *path = hostport_path(env);
	struct agent_reply reply;
	int rc = path ? agent_request("PUT", path, body, &reply) : cni_error(CNI_ERR_IO, NULL, "out of memory");
	free(path);
	json_object_put(body);
	if (rc < 0)
		return -1;
	if (reply.status == 409)
		rc = cni_error(FCNI_ERR_PORT_CONFLICT, "runtimeConfig.portMappings", "fibril-cni: the pod's hostPort cannot be mapped: %s",
			       reply.error);
	else if (reply.status == 400)
		rc = cni_error(CNI_ERR_INVALID_CONFIG, "runtimeConfig.portMappings",
			       "invalid network configuration: runtimeConfig.portMappings: %s", reply.error);
	else if (reply.status == 404)
		rc = cni_error(FCNI_ERR_AGENT, reply.error,
			       "fibril-cni: runtimeConfig.portMappings needs the agent's lb module (%s)", reply.error);
	else if (reply.status != 200)
		rc = cni_error(FCNI_ERR_AGENT, reply.error, "the agent refused the hostPorts of %s: %s (HTTP %ld)",
			       env->owner, reply.error, reply.status);
	agent_reply_free(&reply);
	return rc;
}

int portmap_release(const struct cni_env *env, bool strict)
{
	char *path = hostport_path(env);
	struct agent_reply reply;
	if (!path)
		return cni_error(CNI_ERR_IO, NULL, "out of memory");
	int rc = agent_request("DELETE", path, NULL, &reply);
	free(path);
	if (rc < 0)
		return strict ? -1 : 0;
	/* 404: no lb module, so no hostPort either */
	if (strict && reply.status != 200 && reply.status != 404)
		rc = cni_error(FCNI_ERR_AGENT, reply.error, "the agent could not release the hostPorts of %s: %s (HTTP %ld)",
			       env->owner, reply.error, reply.status);
	agent_reply_free(&reply);
	return rc;
}
