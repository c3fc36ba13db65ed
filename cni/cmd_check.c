/* cni/cmd_check.c - CNI CHECK: from the prevResult, the pod interface
 * (CNI_IFNAME in CNI_NETNS) must exist, be up, have its MAC, every address
 * listed for it, the scope-link route to each gateway and the default route
 * via it; the host veth must exist and be up; the agent must hold the
 * endpoint with the same addresses. The first thing missing is the error
 * (code 104), named. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fibril_cni.h"

#define MAX_CHECK_ADDRS 8

struct expected_address {
	char address[64];
	int prefix;
	char gateway[64];
	bool v6;
};

static int missing(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int missing(const char *what, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cni_error(FCNI_ERR_CHECK, what, "CHECK failed: %s", msg);
}

static int int_member(struct json_object *o, const char *key, int dflt)
{
	struct json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return dflt;
	return json_object_get_int(v);
}

/* The prevResult's interface index of CNI_IFNAME in CNI_NETNS, its MAC, the
 * addresses on it, and whether it lists the host veth. */
static int read_prev_result(const struct cni_env *env, const struct netconf *conf, char mac[18],
			    struct expected_address *addrs, int *naddrs, bool *host_listed)
{
	struct json_object *ifaces, *ips;
	int index = -1;
	*naddrs = 0;
	*host_listed = false;
	mac[0] = '\0';
	if (json_object_object_get_ex(conf->prev_result, "interfaces", &ifaces))
		for (size_t i = 0; i < json_object_array_length(ifaces); i++) {
			struct json_object *o = json_object_array_get_idx(ifaces, i);
			const char *name = json_str(o, "name"), *sandbox = json_str(o, "sandbox");
			if (!name)
				continue;
			if (strcmp(name, env->host_ifname) == 0 && (!sandbox || !*sandbox))
				*host_listed = true;
			if (strcmp(name, env->ifname) == 0 && sandbox && strcmp(sandbox, env->netns) == 0) {
				index = (int)i;
				const char *m = json_str(o, "mac");
				snprintf(mac, 18, "%s", m ? m : "");
			}
		}
	if (index < 0)
		return missing("prevResult", "the prevResult lists no interface %s in %s", env->ifname, env->netns);
	if (json_object_object_get_ex(conf->prev_result, "ips", &ips))
		for (size_t i = 0; i < json_object_array_length(ips); i++) {
			struct json_object *o = json_object_array_get_idx(ips, i);
			const char *cidr = json_str(o, "address"), *gw = json_str(o, "gateway");
			if (!cidr || int_member(o, "interface", -1) != index || *naddrs >= MAX_CHECK_ADDRS)
				continue;
			struct expected_address *a = &addrs[(*naddrs)++];
			memset(a, 0, sizeof(*a));
			const char *slash = strchr(cidr, '/');
			size_t len = slash ? (size_t)(slash - cidr) : strlen(cidr);
			if (len >= sizeof(a->address))
				return cni_error(CNI_ERR_INVALID_CONFIG, "prevResult",
						 "invalid network configuration: prevResult: bad address %s", cidr);
			memcpy(a->address, cidr, len);
			a->v6 = strchr(a->address, ':') != NULL;
			a->prefix = slash ? atoi(slash + 1) : (a->v6 ? 128 : 32);
			snprintf(a->gateway, sizeof(a->gateway), "%s", gw ? gw : "");
		}
	if (*naddrs == 0)
		return missing("prevResult", "the prevResult lists no address for %s in %s", env->ifname,
			       env->netns);
	return 0;
}

static int check_pod(const struct cni_env *env, struct nl_sock *psk, const char *mac,
		     const struct expected_address *addrs, int naddrs)
{
	struct link_info info;
	int found = cni_link_lookup(psk, env->ifname, &info);
	if (found < 0)
		return -1;
	if (!found)
		return missing(env->ifname, "interface %s is missing in %s", env->ifname, env->netns);
	if (!info.up)
		return missing(env->ifname, "interface %s in %s is down", env->ifname, env->netns);
	if (*mac && strcasecmp(mac, info.mac) != 0)
		return missing(env->ifname, "interface %s has the MAC %s, not the one in the prevResult",
			       env->ifname, info.mac);
	for (int i = 0; i < naddrs; i++) {
		const struct expected_address *a = &addrs[i];
		char cidr[sizeof(a->address) + 8];
		snprintf(cidr, sizeof(cidr), "%.63s/%d", a->address, a->prefix);
		int r = addr_present(psk, info.ifindex, a->address, a->prefix);
		if (r < 0)
			return -1;
		if (!r)
			return missing(cidr, "address %s is missing on %s", cidr, env->ifname);
		if (!a->gateway[0])
			continue;
		r = route_present(psk, info.ifindex, a->gateway, a->v6 ? 128 : 32, NULL, true);
		if (r < 0)
			return -1;
		if (!r)
			return missing(a->gateway, "the scope-link route to the gateway %s via %s is missing",
				       a->gateway, env->ifname);
		r = route_present(psk, info.ifindex, a->v6 ? "::" : "0.0.0.0", 0, a->gateway, false);
		if (r < 0)
			return -1;
		if (!r)
			return missing(a->gateway, "the default route via %s dev %s is missing", a->gateway,
				       env->ifname);
	}
	return 0;
}

static int check_agent(const struct cni_env *env, const struct expected_address *addrs, int naddrs)
{
	char ref[512], path[1200];
	snprintf(ref, sizeof(ref), "container-id:%s:%s", env->container_id, env->ifname);
	char *eref = agent_escape(ref);
	if (!eref)
		return cni_error(CNI_ERR_IO, NULL, "out of memory");
	snprintf(path, sizeof(path), "/v1/endpoint/%s", eref);
	free(eref);
	struct agent_reply reply;
	if (agent_request("GET", path, NULL, &reply) < 0)
		return -1;
	int rc = 0;
	if (reply.status == 404) {
		rc = missing(ref, "the agent has no endpoint %s", ref);
	} else if (reply.status != 200) {
		rc = cni_error(FCNI_ERR_AGENT, reply.error, "the agent could not show the endpoint %s: %s (HTTP %ld)",
			       ref, reply.error, reply.status);
	} else {
		for (int i = 0; i < naddrs && rc == 0; i++) {
			const char *held = json_str(reply.json, addrs[i].v6 ? "ipv6" : "ipv4");
			if (!held || strcmp(held, addrs[i].address) != 0)
				rc = missing(ref, "the agent's endpoint %s does not hold the address %s", ref,
					     addrs[i].address);
		}
	}
	agent_reply_free(&reply);
	return rc;
}

int cmd_check(struct cni_env *env, struct netconf *conf)
{
	if (!conf->prev_result)
		return cni_error(CNI_ERR_INVALID_CONFIG, "prevResult",
				 "invalid network configuration: prevResult: is required for CHECK");
	char mac[18];
	struct expected_address addrs[MAX_CHECK_ADDRS];
	int naddrs = 0;
	bool host_listed;
	if (read_prev_result(env, conf, mac, addrs, &naddrs, &host_listed) < 0)
		return -1;
	if (!host_listed)
		return missing("prevResult", "the prevResult lists no host veth %s for %s", env->host_ifname,
			       env->owner);

	int pod_ns = netns_open_path(env->netns);
	if (pod_ns < 0)
		return -1;
	int rc = -1;
	struct nl_sock *psk = nl_open_in(pod_ns, env->netns), *hsk = NULL;
	if (!psk || !(hsk = nl_open()))
		goto out;
	if (check_pod(env, psk, mac, addrs, naddrs) < 0)
		goto out;

	struct link_info host;
	int found = cni_link_lookup(hsk, env->host_ifname, &host);
	if (found < 0)
		goto out;
	if (!found) {
		missing(env->host_ifname, "the host veth %s of %s is missing", env->host_ifname, env->owner);
		goto out;
	}
	if (!host.up) {
		missing(env->host_ifname, "the host veth %s of %s is down", env->host_ifname, env->owner);
		goto out;
	}
	rc = check_agent(env, addrs, naddrs);
out:
	cni_nl_close(psk);
	cni_nl_close(hsk);
	close(pod_ns);
	return rc;
}
