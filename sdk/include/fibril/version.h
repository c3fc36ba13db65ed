/* fibril/version.h - SDK ABI version numbers and the build signature.
 *
 * A module records the ABI it was compiled against in its descriptor. The
 * host loads it when the major matches and the module's minor is not newer
 * than the host's own. The signature string guards against modules built
 * for another data model or word size. */
#ifndef FIBRIL_VERSION_H
#define FIBRIL_VERSION_H

#define FIBRIL_ABI_MAJOR 1
/* Minor history:
 *   0 - first release of the module contract.
 *   1 - appends the descriptor's `summary` hook (a one-line status shown
 *       by `fibril status`) and adds fibril_signal_watch().
 *   2 - adds the shared address allocator (<fibril/ipalloc.h>) and the
 *       ipam and kvstore capability interfaces.
 *   3 - adds the shared IPAM allocation store (<fibril/ipamstore.h>):
 *       allocations by address and owner, persisted atomically, serving
 *       the ipam interface.
 *   4 - the growth rules made right (smaller structs are accepted, arrays
 *       carry their element size), group-committed state, bounded bus.
 *   5 - round 2: the cluster, policy, load balancing and flow
 *       interfaces, and per-module metrics.
 *   6 - tunnel mode: <fibril/datapath.h> interface version 3
 *       (ipcache_upsert_entry with the tunnel endpoint, tunnel_setup,
 *       direction FROM_OVERLAY), the k8s "cluster-nodes" resource;
 *       websocket streams with a state per client (fibril_api_stream_ops:
 *       own query, own queue, lost messages told), routes and streams
 *       also served on the TCP listener; the kvstore's paged prefix read
 *       (get_paged, interface 3), the endpoint module's cluster identity
 *       events.
 *   7 - shared stream messages (fibril_stream_msg_new,
 *       fibril_stream_client_send_msg, fibril_stream_msg_put), the
 *       dp_events ring size; deleting metric series (fibril_metric_delete,
 *       fibril_metric_delete_matching); the health module's bus topic
 *       "health.node" (<fibril/health.h>); <fibril/datapath.h> interface
 *       version 4 (ipcache_upsert_batch); <fibril/kvstore.h> interface
 *       version 4 (get_range); the lb module's "lb.service"
 *       bus topic (<fibril/lb.h>); policy verdicts name their rule:
 *       <fibril/policy.h> interface version 2 (rule_lookup, struct
 *       fibril_policy_rule); appended fields: fibril_datapath_policy_entry.
 *       rule_id, the datapath event's policy_rule / policy_match /
 *       policy_dir and its POLICY_VERDICT type.
 *   8 - a map formatter may answer FIBRIL_MAP_FORMAT_SKIP (<fibril/bpfmap.h>)
 *       to leave an entry out of dumps (a per-CPU array's unused slots);
 *       no new symbol, so no FIBRIL_1.8 node: a module that returns it
 *       declares minor 8 and so is refused by an older host, which would
 *       show such entries with empty text.
 *   9 - round 3: the lb.service event's backends carry their element size
 *       (fibril_lb_service_event.backend_sz, fibril_lb_backend_get in
 *       <fibril/lb.h>), so struct fibril_lb_backend_addr can grow; no new
 *       symbol.
 *  10 - round 3. Issue 22: the ipcache has owners:
 *       fibril_datapath_ipcache_entry.source (appended; enum
 *       fibril_datapath_ipcache_source), one claim per source and prefix,
 *       the highest written; <fibril/datapath.h> interface version 5
 *       (ipcache_remove_entry: a removal names its source). An older
 *       caller's entries claim as the lowest source (UNSPEC) and its
 *       removals take that claim only. Issue 25: struct fibril_config_key.
 *       site_specific (`--check` warns while such a key is unset). No new
 *       symbol.
 *  11 - round 3. Issue 27 (CRD mode): <fibril/k8s.h> interface version 2:
 *       fibril_k8s_ops.request (appended: one GET/POST/PUT/PATCH/DELETE
 *       answered with the HTTP status and the Status reason, so callers
 *       resolve AlreadyExists/Conflict races) and the resources
 *       ciliumidentities, ciliumendpoints, ciliumnodes, leases (and the
 *       FIBRIL_K8S_PODCIDR_CLAIM_* names of the pod CIDR claims). Issue
 *       26: fibril_endpoint_ops.identity_scope and
 *       FIBRIL_IDENTITY_CIDR_MIN (<fibril/endpoint.h>); <fibril/datapath.h>
 *       interface version 6: set_identity_scope (the endpoint module tells
 *       the datapath how its identities were numbered); <fibril/nodes.h>
 *       interface version 2: ipcache_pod (another node's pod by address,
 *       so flows name remote peers). Issue 24: <fibril/datapath.h>
 *       interface version 7: egress_sync, egress_list and struct
 *       fibril_datapath_egress_entry (the egress gateway's table); struct
 *       fibril_datapath_endpoint.flags (appended;
 *       FIBRIL_DATAPATH_EP_F_NO_MASQUERADE, a pod's opt-out of
 *       masquerading) and struct fibril_datapath_event.saddr_xlated /
 *       sport_xlated / xlated (appended: a masqueraded flow's translated
 *       source). One new symbol (node FIBRIL_1.11):
 *       fibril_req_query_n, every value of a repeated query key
 *       (<fibril/api.h>), so hubble-lite ORs `--verdict A --verdict B`.
 *
 * configure reads FIBRIL_ABI_MAJOR/MINOR from this file: the library's
 * soname version (libfibril.so.1.MINOR.0) and fibril-sdk.pc follow them. */
#define FIBRIL_ABI_MINOR 11

#define FIBRIL_STRINGIFY_(x) #x
#define FIBRIL_STRINGIFY(x) FIBRIL_STRINGIFY_(x)

#if defined(__LP64__)
#define FIBRIL_SIG_MODEL "lp64"
#else
#define FIBRIL_SIG_MODEL "ilp32"
#endif

/* "fibril:<major>:<data model>:<sizeof pointer>" - must equal the host's. */
#define FIBRIL_BUILD_SIGNATURE \
	"fibril:" FIBRIL_STRINGIFY(FIBRIL_ABI_MAJOR) ":" FIBRIL_SIG_MODEL ":" \
	FIBRIL_STRINGIFY(__SIZEOF_POINTER__)

#endif
