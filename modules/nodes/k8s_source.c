/* modules/nodes/k8s_source.c - the nodes module's second source: the
 * Kubernetes Node objects (the k8s capability's "cluster-nodes" informer,
 * every Node of the cluster), as Cilium's k8s node watcher, so a cluster
 * without a kvstore gets node discovery too. From each Node:
 *   name             metadata.name
 *   node IPs         status.addresses, type InternalIP (one per family)
 *   pod CIDRs        spec.podCIDRs (else spec.podCIDR), else, with
 *                    [nodes] k8s-node-annotations, the
 *                    network.fibril.io/ipv4-pod-cidr / ipv6-pod-cidr
 *                    annotations ipam-k8s-podcidr writes
 *   tunnel endpoint  with k8s-node-annotations, the
 *                    network.fibril.io/tunnel-endpoint annotation, else
 *                    the IPv4 InternalIP
 * (a kubelet may set its own Node's annotations: they are not read by
 * default; what is read is checked by nodes_upsert's nodes_validate)
 * (the decoding: k8s_node.c). A Node that does not parse is refused whole (a log line naming the Node
 * and the field, counted as a bad record); what was known of it stays.
 * When both sources know a node, the kvstore registry's record wins (its
 * agent wrote it); the Node object takes over again when that record goes.
 * In CRD mode what a node's CiliumNode adds (pod CIDRs, tunnel endpoint,
 * an address of a family the Node lacks) is merged in (ciliumnode.c). */
#include "nodes_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fibril/k8s.h>

static bool annotations(struct nodes *s)
{
	return fibril_config_bool(s->m, "k8s-node-annotations");
}

/* One Node object (added or updated). */
static void node_put(struct nodes *s, const char *json, const char *what)
{
	struct fibril_node n;
	char why[NODES_WHY_LEN];
	if (nodes_k8s_decode(json, strlen(json), annotations(s), &n, why, sizeof(why))) {
		s->stats.bad_records++;
		fibril_warn(s->m, "Kubernetes Node %s: %s; ignored", what ? what : "?", why);
		return;
	}
	if (!strcmp(n.name, s->self.name))
		return;
	nodes_cn_merge(s, &n); /* CRD mode: what its CiliumNode adds */
	struct node_entry *e = nodes_find(s, n.name);
	if (e && e->n.source == FIBRIL_NODE_SOURCE_KVSTORE)
		return; /* the registry's record wins */
	nodes_upsert(s, &n);
}

int nodes_k8s_on_event(const struct fibril_event *ev, void *ud)
{
	struct nodes *s = ud;
	const struct fibril_k8s_event *k = ev->payload;
	if (s->stopping || !s->k8s || ev->payload_len < sizeof(*k))
		return 0;
	const char *name = FIBRIL_K8S_STR(k, name);
	if (k->type == FIBRIL_K8S_DELETED) {
		struct node_entry *e = name ? nodes_find(s, name) : NULL;
		if (e && e->n.source == FIBRIL_NODE_SOURCE_K8S)
			nodes_remove_entry(s, e);
		else if (!e && name) /* a lost node removed from the cluster */
			nodes_lost_remove_name(s, name, "its Kubernetes Node was deleted");
		return 0;
	}
	const char *obj = FIBRIL_K8S_STR(k, object);
	if (obj)
		node_put(s, obj, name);
	return 0;
}

void nodes_k8s_reread(struct nodes *s, const char *name)
{
	const char *json = s->k8s_synced ? s->k8s->get(s->k8sctx, FIBRIL_K8S_CLUSTER_NODES, "", name)
					 : NULL;
	if (json)
		node_put(s, json, name);
}

bool nodes_k8s_fallback(struct nodes *s, struct node_entry *e)
{
	if (!s->k8s || !s->k8s_synced)
		return false;
	const char *json = s->k8s->get(s->k8sctx, FIBRIL_K8S_CLUSTER_NODES, "", e->n.name);
	struct fibril_node n;
	char why[NODES_WHY_LEN];
	if (!json || nodes_k8s_decode(json, strlen(json), annotations(s), &n, why, sizeof(why)) ||
	    nodes_validate(s, &n, why, sizeof(why)))
		return false;
	fibril_info(s->m, "node %s: its registry record is gone, its Kubernetes Node stays",
		    e->n.name);
	e->n.source = FIBRIL_NODE_SOURCE_K8S; /* so the upsert below replaces it */
	nodes_upsert(s, &n);
	return true;
}

static int list_one(const char *json, void *ud)
{
	node_put(ud, json, NULL);
	return 0;
}

static void on_synced(void *ud, int err, const char *pending)
{
	struct nodes *s = ud;
	if (s->stopping || !s->k8s)
		return;
	if (err) {
		fibril_warn(s->m, "Kubernetes Nodes not listed yet (%s): %s", strerror(-err),
			    pending ? pending : "");
		fibril_health_report(s->m, "k8s-nodes", FIBRIL_HEALTH_DEGRADED,
				     "Nodes not listed yet");
		if (s->start_pending && !s->kv) {
			snprintf(s->why, sizeof(s->why), "the Kubernetes Nodes were not listed: %s",
				 pending ? pending : strerror(-err));
			fibril_module_set_error(s->m, "%s", s->why);
			nodes_start_finished(s, err);
		}
		return;
	}
	s->k8s_synced = true;
	s->k8s->list(s->k8sctx, FIBRIL_K8S_CLUSTER_NODES, list_one, s);
	fibril_info(s->m, "Kubernetes Nodes listed: %zu remote node(s)", s->n_nodes);
	fibril_health_report(s->m, "k8s-nodes", FIBRIL_HEALTH_OK, "watching the Nodes");
	if (!s->kv) {
		if (!s->synced && s->nl)
			nodes_routes_sweep_old(s);
		s->synced = true;
		if (s->start_pending)
			nodes_start_finished(s, 0);
	}
}

int nodes_k8s_start(struct nodes *s, char *why, size_t len)
{
	char cn_why[NODES_WHY_LEN] = "";
	if (nodes_ipcache_crd_wanted(s, cn_why, sizeof(cn_why)) && !cn_why[0] &&
	    nodes_cn_start(s, cn_why, sizeof(cn_why))) /* CRD mode: the CiliumNodes */
		fibril_warn(s->m, "%s", cn_why);
	int rc = s->k8s->watch_resource(s->k8sctx, FIBRIL_K8S_CLUSTER_NODES);
	if (rc) {
		snprintf(why, len, "the k8s capability cannot watch %s: %s (an older k8s module?)",
			 FIBRIL_K8S_CLUSTER_NODES, strerror(-rc));
		return rc;
	}
	/* CRD mode: the CiliumNodes too, so the first routing is complete */
	static const char *const res[] = {FIBRIL_K8S_CLUSTER_NODES, FIBRIL_K8S_CILIUM_NODES, NULL};
	static const char *const res_nodes[] = {FIBRIL_K8S_CLUSTER_NODES, NULL};
	rc = s->k8s->wait_synced(s->k8sctx, s->cn_enabled ? res : res_nodes,
				 (uint64_t)fibril_config_duration_ms(s->m, "k8s-sync-timeout"),
				 on_synced, s);
	if (rc)
		snprintf(why, len, "waiting for the Kubernetes Nodes: %s", strerror(-rc));
	return rc;
}
