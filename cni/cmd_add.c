/* cni/cmd_add.c - CNI ADD: an address from the agent's IPAM for the owner
 * CONTAINERID/IFNAME, a veth pair (host side lxc<hash>, the peer created as
 * tmp<hash> right inside CNI_NETNS and renamed CNI_IFNAME there), the
 * address as /32 (/128), a scope-link route to the gateway and the default
 * route via it in the pod (the veth ends and the routes get the
 * configuration's "mtu", else the agent's pod MTU: GET /v1/mtu), then
 * PUT /v1/endpoint/container-id:CID:IFNAME, whose answer means the
 * address and the endpoint are both on disk (the address was asked for
 * with durable=later, so one round of flushes), then the pod's hostPorts
 * when the runtime passed portMappings (portmap.c).
 * Any failure undoes every step done so far (veth deleted, endpoint and
 * IPAM owner released), so a failed ADD leaves nothing behind. Prints the
 * CNI result, merged after a prevResult when fibril-cni is not first in a
 * chain. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fibril_cni.h"

struct pod_address {
	char family[8];
	char address[64];
	char gateway[64];
};

struct add_state {
	bool ipam_requested;
	bool veth_created;
	bool endpoint_requested;
	bool hostport_requested;
};

/* POST /v1/ipam: fills ADDRS (at most 2). */
static int ipam_allocate(const struct cni_env *env, const struct netconf *conf, struct pod_address *addrs,
			 int *naddrs, struct add_state *st)
{
	static const char *const family_names[] = {"", "ipv4", "ipv6", "both"};
	char path[1024];
	char *owner = agent_escape(env->owner);
	if (!owner)
		return cni_error(CNI_ERR_IO, NULL, "out of memory");
	/* durable=later: the agent answers before IPAM's flush, which runs while
	 * the veth is set up; the endpoint PUT below waits for it (and for the
	 * endpoint journal's, at once), so the result printed to the runtime
	 * still comes only once both are on disk. */
	snprintf(path, sizeof(path), "/v1/ipam?family=%s&owner=%s&durable=later", family_names[conf->family],
		 owner);
	free(owner);
	struct agent_reply reply;
	st->ipam_requested = true;
	if (agent_request("POST", path, NULL, &reply) < 0)
		return -1;
	int rc = 0;
	if (reply.status != 201 && reply.status != 200) {
		rc = cni_error(reply.status == 503 ? FCNI_ERR_NO_ADDRESS : FCNI_ERR_AGENT, reply.error,
			       "IPAM gave no address for %s: %s (HTTP %ld)", env->owner, reply.error, reply.status);
		goto out;
	}
	struct json_object *list;
	*naddrs = 0;
	if (!json_object_object_get_ex(reply.json, "addresses", &list) ||
	    !json_object_is_type(list, json_type_array) || json_object_array_length(list) == 0) {
		rc = cni_error(FCNI_ERR_AGENT, NULL, "IPAM's reply for %s holds no address", env->owner);
		goto out;
	}
	for (size_t i = 0; i < json_object_array_length(list) && *naddrs < 2; i++) {
		struct json_object *e = json_object_array_get_idx(list, i);
		const char *fam = json_str(e, "family"), *addr = json_str(e, "address"),
			   *gw = json_str(e, "gateway");
		if (!fam || !addr || !gw || strlen(addr) >= 64 || strlen(gw) >= 64) {
			rc = cni_error(FCNI_ERR_AGENT, NULL,
				       "IPAM's reply for %s lacks family, address or gateway", env->owner);
			goto out;
		}
		struct pod_address *a = &addrs[(*naddrs)++];
		snprintf(a->family, sizeof(a->family), "%s", fam);
		snprintf(a->address, sizeof(a->address), "%s", addr);
		snprintf(a->gateway, sizeof(a->gateway), "%s", gw);
	}
out:
	agent_reply_free(&reply);
	return rc;
}

/* No "mtu" in the configuration: the agent's pod MTU (GET /v1/mtu, the
 * nodes module: the underlay's MTU less the tunnel's overhead in tunnel
 * mode), else (an agent without the nodes module: 404) DEFAULT_MTU. */
static int agent_mtu(struct netconf *conf)
{
	if (conf->mtu_set)
		return 0;
	struct agent_reply reply;
	if (agent_request("GET", "/v1/mtu", NULL, &reply) < 0)
		return -1;
	int rc = 0;
	struct json_object *v;
	if (reply.status == 200 && json_object_object_get_ex(reply.json, "pod-mtu", &v) &&
	    json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 68 &&
	    json_object_get_int64(v) <= 65535)
		conf->mtu = (int)json_object_get_int64(v);
	else if (reply.status != 404)
		rc = cni_error(FCNI_ERR_AGENT, reply.error, "the agent gave no pod MTU: %s (HTTP %ld)",
			       reply.error[0] ? reply.error : "no pod-mtu in its answer", reply.status);
	agent_reply_free(&reply);
	return rc;
}

static char *endpoint_path(const struct cni_env *env)
{
	char ref[512];
	snprintf(ref, sizeof(ref), "container-id:%s:%s", env->container_id, env->ifname);
	char *esc = agent_escape(ref);
	if (!esc)
		return NULL;
	char *path = malloc(strlen(esc) + 16);
	if (path)
		sprintf(path, "/v1/endpoint/%s", esc);
	free(esc);
	return path;
}

static int endpoint_put(const struct cni_env *env, const struct link_info *host, const struct link_info *pod,
			const struct pod_address *addrs, int naddrs, struct add_state *st)
{
	struct json_object *body = json_object_new_object();
	json_object_object_add(body, "container-id", json_object_new_string(env->container_id));
	json_object_object_add(body, "ifname", json_object_new_string(env->ifname));
	json_object_object_add(body, "netns", json_object_new_string(env->netns));
	json_object_object_add(body, "host-ifname", json_object_new_string(env->host_ifname));
	json_object_object_add(body, "host-ifindex", json_object_new_int(host->ifindex));
	json_object_object_add(body, "mac", json_object_new_string(pod->mac));
	json_object_object_add(body, "host-mac", json_object_new_string(host->mac));
	for (int i = 0; i < naddrs; i++)
		json_object_object_add(body, addrs[i].family, json_object_new_string(addrs[i].address));
	if (env->pod_namespace[0])
		json_object_object_add(body, "pod-namespace", json_object_new_string(env->pod_namespace));
	if (env->pod_name[0])
		json_object_object_add(body, "pod-name", json_object_new_string(env->pod_name));
	char *path = endpoint_path(env);
	struct agent_reply reply;
	st->endpoint_requested = true;
	int rc = path ? agent_request("PUT", path, body, &reply) : cni_error(CNI_ERR_IO, NULL, "out of memory");
	free(path);
	json_object_put(body);
	if (rc < 0)
		return -1;
	if (reply.status != 200 && reply.status != 201)
		rc = cni_error(FCNI_ERR_AGENT, reply.error, "the agent refused the endpoint %s: %s (HTTP %ld)",
			       env->owner, reply.error, reply.status);
	agent_reply_free(&reply);
	return rc;
}

/* Undo what an ADD did; every step is best effort (the first error is kept). */
static void rollback(const struct cni_env *env, struct nl_sock *hsk, const struct add_state *st)
{
	struct agent_reply reply;
	if (st->hostport_requested)
		(void)portmap_release(env, false);
	if (st->endpoint_requested) {
		char *path = endpoint_path(env);
		if (path && agent_request("DELETE", path, NULL, &reply) == 0)
			agent_reply_free(&reply);
		free(path);
	}
	if (st->veth_created && hsk) {
		/* Deleting one end deletes the pair, wherever the peer is. */
		link_delete(hsk, env->host_ifname);
		link_delete(hsk, env->tmp_ifname);
	}
	if (st->ipam_requested) {
		char path[1024];
		char *owner = agent_escape(env->owner);
		if (owner) {
			snprintf(path, sizeof(path), "/v1/ipam?owner=%s", owner);
			if (agent_request("DELETE", path, NULL, &reply) == 0)
				agent_reply_free(&reply);
		}
		free(owner);
	}
}

static void add_interface(struct json_object *list, const char *name, const char *mac, const char *sandbox,
			  int mtu, const struct netconf *conf)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(name));
	if (mac && *mac)
		json_object_object_add(o, "mac", json_object_new_string(mac));
	if (conf->version >= CNI_V110)
		json_object_object_add(o, "mtu", json_object_new_int(mtu));
	if (sandbox)
		json_object_object_add(o, "sandbox", json_object_new_string(sandbox));
	json_object_array_add(list, o);
}

static struct json_object *array_member(struct json_object *result, const char *key)
{
	struct json_object *list;
	if (json_object_object_get_ex(result, key, &list) && json_object_is_type(list, json_type_array))
		return list;
	list = json_object_new_array();
	json_object_object_add(result, key, list);
	return list;
}

static bool route_listed(struct json_object *routes, const char *dst, const char *gw)
{
	for (size_t i = 0; i < json_object_array_length(routes); i++) {
		struct json_object *r = json_object_array_get_idx(routes, i);
		const char *d = json_str(r, "dst"), *g = json_str(r, "gw");
		if (d && g && strcmp(d, dst) == 0 && strcmp(g, gw) == 0)
			return true;
	}
	return false;
}

/* The CNI result in the configuration's version, after prevResult if any. */
static struct json_object *build_result(const struct cni_env *env, const struct netconf *conf,
					const struct link_info *host, const struct link_info *pod,
					const struct pod_address *addrs, int naddrs)
{
	struct json_object *result = NULL;
	if (conf->prev_result)
		json_object_deep_copy(conf->prev_result, &result, NULL);
	if (!result)
		result = json_object_new_object();
	json_object_object_add(result, "cniVersion", json_object_new_string(conf->version_name));
	struct json_object *ifaces = array_member(result, "interfaces");
	int pod_index = (int)json_object_array_length(ifaces) + 1;
	add_interface(ifaces, env->host_ifname, host->mac, NULL, conf->mtu, conf);
	add_interface(ifaces, env->ifname, pod->mac, env->netns, conf->mtu, conf);
	struct json_object *ips = array_member(result, "ips");
	struct json_object *routes = array_member(result, "routes");
	for (int i = 0; i < naddrs; i++) {
		bool v6 = strcmp(addrs[i].family, "ipv6") == 0;
		char cidr[80];
		snprintf(cidr, sizeof(cidr), "%s/%d", addrs[i].address, v6 ? 128 : 32);
		struct json_object *ip = json_object_new_object();
		if (conf->version < CNI_V100)
			json_object_object_add(ip, "version", json_object_new_string(v6 ? "6" : "4"));
		json_object_object_add(ip, "address", json_object_new_string(cidr));
		json_object_object_add(ip, "gateway", json_object_new_string(addrs[i].gateway));
		json_object_object_add(ip, "interface", json_object_new_int(pod_index));
		json_object_array_add(ips, ip);
		const char *dst = v6 ? "::/0" : "0.0.0.0/0";
		if (!route_listed(routes, dst, addrs[i].gateway)) {
			struct json_object *r = json_object_new_object();
			json_object_object_add(r, "dst", json_object_new_string(dst));
			json_object_object_add(r, "gw", json_object_new_string(addrs[i].gateway));
			json_object_array_add(routes, r);
		}
	}
	if (conf->dns) {
		struct json_object *dns = NULL;
		json_object_deep_copy(conf->dns, &dns, NULL);
		json_object_object_add(result, "dns", dns);
	}
	return result;
}

/* egressRate would need the bandwidth plugin's ingress qdisc on the host
 * veth, whose clsact the datapath holds: refused before anything is made. */
static int refuse_egress_rate(const struct netconf *conf)
{
	struct json_object *v = conf->egress_rate;
	if (!v || ((json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) &&
		   json_object_get_double(v) == 0))
		return 0;
	return cni_error(CNI_ERR_INVALID_CONFIG, "runtimeConfig.bandwidth.egressRate",
			 "invalid network configuration: runtimeConfig.bandwidth.egressRate: fibril-cni does not "
			 "support an egress rate limit (%s): the datapath owns the clsact qdisc of the host veth, "
			 "so the bandwidth plugin cannot add its ingress qdisc; only ingressRate is supported",
			 json_object_to_json_string(v));
}

/* A second interface of the same network in one pod would clash on the
 * gateway routes: refused when a pod link N has its host end
 * lxc<hash(CID/N)> in the node, i.e. this container is attached already. */
static int refuse_second_interface(const struct cni_env *env, const struct netconf *conf, struct nl_sock *hsk,
				   struct nl_sock *psk)
{
	char **names = link_name_list(psk);
	if (!names)
		return -1;
	int rc = 0;
	for (char **n = names; *n && rc == 0; n++) {
		if (strcmp(*n, env->ifname) == 0)
			continue;
		char host[16];
		host_ifname_for(env->container_id, *n, host);
		int found = cni_link_lookup(hsk, host, NULL);
		if (found < 0)
			rc = -1;
		else if (found)
			rc = cni_error(FCNI_ERR_IFNAME_EXISTS, env->ifname,
				       "fibril-cni: container %s already has an interface of network %s (%s); a "
				       "second interface of the same network is not supported",
				       env->container_id, conf->name, *n);
	}
	free_strv(names);
	return rc;
}

int cmd_add(struct cni_env *env, struct netconf *conf)
{
	struct add_state st = {0};
	struct pod_address addrs[2];
	int naddrs = 0;
	struct link_info host = {0}, pod = {0};
	struct nl_sock *hsk = NULL, *psk = NULL;
	int rc = -1;
	struct json_object *mappings = NULL;

	if (refuse_egress_rate(conf) < 0 || portmap_parse(conf, &mappings) < 0)
		return -1;
	int pod_ns = netns_open_path(env->netns);
	if (pod_ns < 0) {
		json_object_put(mappings);
		return -1;
	}
	if (!(hsk = nl_open()) || !(psk = nl_open_in(pod_ns, env->netns)))
		goto out;

	/* Leftovers of this very attachment (an ADD killed half-way, retried
	 * without a DEL) are ours: the host side lxc<hash> is named after this
	 * container ID and ifname, and deleting it takes its pod side (CNI_IFNAME
	 * or tmp<hash>) with it, so the retry converges. */
	if (link_delete_present(hsk, env->host_ifname) < 0 || link_delete_present(hsk, env->tmp_ifname) < 0)
		goto out;

	int exists = cni_link_lookup(psk, env->ifname, NULL);
	if (exists < 0)
		goto out;
	if (exists) {
		cni_error(FCNI_ERR_IFNAME_EXISTS, env->ifname,
			  "interface %s already exists in the network namespace %s", env->ifname, env->netns);
		goto out;
	}
	if (refuse_second_interface(env, conf, hsk, psk) < 0 || agent_mtu(conf) < 0)
		goto out;
	if (ipam_allocate(env, conf, addrs, &naddrs, &st) < 0)
		goto fail;
	for (int i = 0; i < naddrs; i++)
		if (strcmp(addrs[i].family, "ipv6") == 0 && conf->mtu < 1280) {
			cni_error(CNI_ERR_INVALID_CONFIG, "mtu",
				  "invalid network configuration: mtu: IPAM gave the IPv6 address %s but the "
				  "MTU %d is below IPv6's minimum of 1280",
				  addrs[i].address, conf->mtu);
			goto fail;
		}

	/* The peer is born inside the pod under its temporary name, then
	 * renamed there: no name clash with the node's own links, and no
	 * move afterwards. */
	if (veth_create(hsk, env->host_ifname, env->tmp_ifname, conf->mtu, pod_ns) < 0)
		goto fail;
	st.veth_created = true;
	char sysctl[128];
	snprintf(sysctl, sizeof(sysctl), "/proc/sys/net/ipv4/conf/%s/rp_filter", env->host_ifname);
	if (sysctl_write(sysctl, "0") < 0 || link_rename_up(psk, env->tmp_ifname, env->ifname) < 0)
		goto fail;
	if (cni_link_lookup(psk, env->ifname, &pod) != 1 || cni_link_lookup(hsk, env->host_ifname, &host) != 1) {
		cni_error(FCNI_ERR_LINK, env->ifname, "the veth pair %s/%s vanished while being set up",
			  env->host_ifname, env->ifname);
		goto fail;
	}
	for (int i = 0; i < naddrs; i++)
		if (addr_add_host(psk, pod.ifindex, addrs[i].address) < 0 ||
		    route_add_gateway_link(psk, pod.ifindex, addrs[i].gateway, conf->mtu) < 0 ||
		    route_add_default(psk, pod.ifindex, addrs[i].gateway, conf->mtu) < 0)
			goto fail;

	if (endpoint_put(env, &host, &pod, addrs, naddrs, &st) < 0)
		goto fail;
	if (mappings) {
		const char *ips[2];
		for (int i = 0; i < naddrs; i++)
			ips[i] = addrs[i].address;
		st.hostport_requested = true;
		if (portmap_claim(env, mappings, ips, naddrs) < 0)
			goto fail;
	}

	struct json_object *result = build_result(env, conf, &host, &pod, addrs, naddrs);
	printf("%s\n", json_object_to_json_string_ext(result, JSON_C_TO_STRING_PLAIN |
								      JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(result);
	rc = 0;
	goto out;
fail:
	rollback(env, hsk, &st);
out:
	cni_nl_close(psk);
	cni_nl_close(hsk);
	close(pod_ns);
	json_object_put(mappings);
	return rc;
}
