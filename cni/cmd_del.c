/* cni/cmd_del.c - CNI DEL, idempotent: releases the endpoint (404 is fine)
 * and the IPAM owner CONTAINERID/IFNAME at the agent, deletes the pod's
 * veth in CNI_NETNS, releasing its hostPorts (portmap.c) first (when the namespace is still there) and the host side
 * lxc<hash> by name. Whatever is already gone is skipped. A container ID
 * longer than an endpoint can carry (ADD refuses it) has no endpoint to
 * release: DEL still succeeds. An agent that
 * cannot be reached is error 11 (the links are removed all the same), so
 * the runtime retries. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fibril_cni.h"

/* DELETE PATH; 200 and every status in OK_STATUS (or 0) count as done. */
static int agent_delete(const char *path, long ok_status, const char *what)
{
	struct agent_reply reply;
	if (agent_request("DELETE", path, NULL, &reply) < 0)
		return -1;
	int rc = 0;
	if (reply.status != 200 && reply.status != ok_status)
		rc = cni_error(FCNI_ERR_AGENT, reply.error, "the agent could not release %s: %s (HTTP %ld)", what,
			       reply.error, reply.status);
	agent_reply_free(&reply);
	return rc;
}

/* Deletes CNI_IFNAME inside CNI_NETNS when both exist and it is a veth. */
static int delete_pod_side(const struct cni_env *env)
{
	int pod_ns = netns_open_path(env->netns);
	if (pod_ns < 0) {
		cni_error_clear(); /* gone, or not a namespace: no links of ours in it */
		return 0;
	}
	int rc = -1;
	struct nl_sock *psk = nl_open_in(pod_ns, env->netns);
	if (!psk)
		goto out;
	struct link_info info;
	int found = cni_link_lookup(psk, env->ifname, &info);
	if (found < 0)
		goto out;
	rc = 0;
	if (found && strcmp(info.kind, "veth") == 0)
		rc = link_delete(psk, env->ifname) < 0 ? -1 : 0;
out:
	cni_nl_close(psk);
	close(pod_ns);
	return rc;
}

int cmd_del(struct cni_env *env, struct netconf *conf)
{
	char ref[512], path[1200];
	int rc = 0;
	snprintf(ref, sizeof(ref), "container-id:%s:%s", env->container_id, env->ifname);
	char *eref = agent_escape(ref), *eowner = agent_escape(env->owner);
	if (!eref || !eowner) {
		free(eref);
		free(eowner);
		return cni_error(CNI_ERR_IO, NULL, "out of memory");
	}
	snprintf(path, sizeof(path), "/v1/endpoint/%s", eref);
	/* 404: no such endpoint (or no endpoint module): nothing to release. */
	bool fits = strlen(env->container_id) <= FIBRIL_ENDPOINT_CONTAINER_ID_MAX;
	/* its hostPorts first: they name the pod's address */
	if (fits && portmap_release(env, true) < 0)
		rc = -1;
	if (rc == 0 && fits && agent_delete(path, 404, ref) < 0)
		rc = -1;
	snprintf(path, sizeof(path), "/v1/ipam?owner=%s", eowner);
	bool owner_whole = strlen(env->container_id) + 1 + strlen(env->ifname) < sizeof(env->owner);
	if (rc == 0 && owner_whole && agent_delete(path, 0, env->owner) < 0)
		rc = -1;
	free(eref);
	free(eowner);

	/* The links go whatever the agent said: a retried DEL finds them gone. */
	if (env->netns && delete_pod_side(env) < 0)
		rc = -1;
	struct nl_sock *hsk = nl_open();
	if (!hsk)
		return -1;
	if (link_delete_present(hsk, env->host_ifname) < 0 ||
	    link_delete_present(hsk, env->tmp_ifname) < 0)
		rc = -1;
	cni_nl_close(hsk);
	(void)conf;
	return rc;
}
