/* modules/datapath/datapath.c - the datapath module: provides the
 * "datapath" capability (<fibril/datapath.h>) on top of two tc programs
 * (bpf/fibril_dp.bpf.c) attached to every endpoint's host veth (ingress and
 * egress), with
 * per-endpoint facts in pinned maps. Here: the descriptor and its config
 * keys, start/stop, the capability's functions, health and the summary.
 *
 * start: open the maps through the host's registry (pins reused across
 * restarts), load the program with those maps, find the endpoints of the
 * last run in dp_endpoints, set up the host device with the IPAM pools'
 * gateways (retried on a timer while that fails: health Degraded), start
 * the events reader and the conntrack GC. stop: let go of the program and
 * the maps but leave every attachment, route and pin in place, so pods
 * keep talking while the agent is down. */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include "libbpf_log.h"
#include "datapath.h"
#include <fibril/compat.h>

#define NODE_RETRY_MS 2000

static struct datapath g_dp; /* one instance per agent */

/* ---- config ------------------------------------------------------------------------------ */

static int check_ifname(const char *value, char *why, size_t len)
{
	size_t n = strlen(value);
	if (n == 0 || n >= IF_NAMESIZE) {
		snprintf(why, len, "an interface name is 1 to %d characters", IF_NAMESIZE - 1);
		return -EINVAL;
	}
	if (!strcmp(value, ".") || !strcmp(value, "..") || strpbrk(value, "/: \t")) {
		snprintf(why, len, "'%s' is not a valid interface name", value);
		return -EINVAL;
	}
	return 0;
}

static int check_dev_type(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "auto") || !strcmp(value, "dummy") || !strcmp(value, "veth"))
		return 0;
	snprintf(why, len, "expected auto, dummy or veth");
	return -EINVAL;
}

static int check_host_routing(const char *value, char *why, size_t len)
{
	if (!strcmp(value, "bpf") || !strcmp(value, "legacy"))
		return 0;
	snprintf(why, len, "expected bpf or legacy");
	return -EINVAL;
}

#define MS_WEEK 604800000LL

static int check_masqcfg_path(const char *value, char *why, size_t len)
{
	if (!value[0] || (value[0] == '/' && strlen(value) < sizeof(g_dp.masqcfg_path)))
		return 0;
	snprintf(why, len, "expected an absolute path (shorter than %zu characters) or nothing",
		 sizeof(g_dp.masqcfg_path));
	return -EINVAL;
}

static const struct fibril_config_key dp_config_keys[] = {
	{.name = "host-device", .type = FIBRIL_CONFIG_STRING, .default_value = "fibril_host",
	 .help = "Device in the node's netns holding each IPAM pool's gateway address",
	 .check = check_ifname},
	{.name = "host-device-type", .type = FIBRIL_CONFIG_STRING, .default_value = "auto",
	 .help = "dummy, veth (a pair with host-device-peer), or auto: dummy when the kernel "
		 "has it, else veth",
	 .check = check_dev_type},
	{.name = "host-routing", .type = FIBRIL_CONFIG_STRING, .default_value = "bpf",
	 .help = "bpf (the default, as Cilium's where the kernel supports it): a packet from "
		 "a pod to another node's pod (native routing) leaves by bpf_fib_lookup + "
		 "bpf_redirect_neigh instead of the node's stack, and one for a local pod "
		 "arriving on an underlay device is redirected into it (legacy, with a warning, "
		 "when the kernel lacks the helpers); legacy: the stack routes both",
	 .check = check_host_routing},
	{.name = "masquerade", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "Pods' flows to destinations outside the cluster leave with the address of "
		 "the device they leave by (BPF SNAT on the external devices' egress, "
		 "fibril_to_netdev); the replies are translated back and delivered through the "
		 "datapath"},
	{.name = "non-masquerade-cidrs", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "CIDRs a pod reaches with its own address, besides the cluster (all nodes' "
		 "pod CIDRs, node IPs) and link-local, separated by commas or spaces",
	 .check = dp_nat_check_cidrs},
	{.name = "ip-masq-agent-config", .type = FIBRIL_CONFIG_STRING, .default_value = "",
	 .help = "The ip-masq-agent's config file (YAML or JSON: nonMasqueradeCIDRs, "
		 "masqLinkLocal, masqLinkLocalIPv6), e.g. a mounted ConfigMap; read at start "
		 "and whenever it changes (checked every second); its CIDRs join "
		 "non-masquerade-cidrs; a bad file is refused, the last good one stays",
	 .check = check_masqcfg_path},
	{.name = "masquerade-port-min", .type = FIBRIL_CONFIG_INT, .default_value = "61000",
	 .help = "Lowest port (and ICMP echo identifier) a masqueraded flow gets; the default "
		 "range 61000-65535 stays clear of the NodePort range and of the kernel's "
		 "ephemeral ports (32768-60999) the node's own sockets take",
	 .min = 1024, .max = 65535},
	{.name = "masquerade-endpoint-max", .type = FIBRIL_CONFIG_INT, .default_value = "16384",
	 .help = "Masqueraded flows one endpoint may hold at once (a quarter of dp_nat's); a "
		 "new one over it is dropped (drop:masquerade-endpoint-quota), so one pod "
		 "cannot take the mappings the others need",
	 .min = 1, .max = DP_NAT_MAX / 2},
	{.name = "masquerade-port-max", .type = FIBRIL_CONFIG_INT, .default_value = "65535",
	 .help = "Highest port a masqueraded flow gets (at least masquerade-port-min)",
	 .min = 1024, .max = 65535},
	{.name = "host-device-peer", .type = FIBRIL_CONFIG_STRING, .default_value = "fibril_net",
	 .help = "Peer name when the host device is a veth pair", .check = check_ifname},
	{.name = "conntrack-timeout-tcp", .type = FIBRIL_CONFIG_DURATION, .default_value = "6h",
	 .help = "Idle time after which a TCP flow is removed from dp_conntrack",
	 .min = 100, .max = MS_WEEK},
	{.name = "conntrack-timeout-tcp-closing", .type = FIBRIL_CONFIG_DURATION,
	 .default_value = "10s",
	 .help = "Idle time after which a TCP flow that saw FIN or RST is removed",
	 .min = 100, .max = MS_WEEK},
	{.name = "conntrack-timeout-tcp-syn", .type = FIBRIL_CONFIG_DURATION,
	 .default_value = "60s",
	 .help = "Idle time after which a TCP flow no reply was seen for (a SYN flood's) is "
		 "removed",
	 .min = 100, .max = MS_WEEK},
	{.name = "conntrack-timeout-other", .type = FIBRIL_CONFIG_DURATION, .default_value = "60s",
	 .help = "Idle time after which a UDP, ICMP or other flow is removed",
	 .min = 100, .max = MS_WEEK},
	{.name = "conntrack-gc-interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "30s",
	 .help = "How often the conntrack garbage collector runs", .min = 100, .max = 3600000},
	{.name = "conntrack-max-tcp", .type = FIBRIL_CONFIG_INT, .default_value = "131072",
	 .help = "Entries of dp_conntrack (TCP flows; a flow has one per enforcement point "
		 "it passes); a change recreates the map",
	 .min = 1024, .max = 16777216},
	{.name = "conntrack-max-other", .type = FIBRIL_CONFIG_INT, .default_value = "65536",
	 .help = "Entries of dp_ct_any (UDP, ICMP and other flows, kept apart so that a flood "
		 "of them cannot evict TCP flows); a change recreates the map",
	 .min = 1024, .max = 16777216},
	{.name = "conntrack-endpoint-share", .type = FIBRIL_CONFIG_INT, .default_value = "25",
	 .help = "Percent of each conntrack map the flows one endpoint opens may hold, and "
		 "as much again for the flows opened to it from outside (the node, the "
		 "underlay, other nodes); a new flow over it is dropped (drop:conntrack-full)",
	 .min = 1, .max = 100},
	{.name = "conntrack-outside-share", .type = FIBRIL_CONFIG_INT, .default_value = "50",
	 .help = "Percent of each conntrack map all flows opened from outside together may "
		 "hold",
	 .min = 1, .max = 100},
	{.name = "conntrack-refresh-interval", .type = FIBRIL_CONFIG_DURATION,
	 .default_value = "5s",
	 .help = "A flow's last-seen time (whole seconds) is rewritten at most this often; the "
		 "GC adds it to every timeout",
	 .min = 1000, .max = 300000},
	{.name = "drop-events-rate", .type = FIBRIL_CONFIG_INT, .default_value = "1000",
	 .help = "Drop events sent to dp_events per second per CPU (0: no limit); the rest "
		 "are counted as drop-event-suppressed",
	 .min = 0, .max = 1000000},
	{.name = "drop-events-burst", .type = FIBRIL_CONFIG_INT, .default_value = "1000",
	 .help = "Drop events sent in a burst per CPU before drop-events-rate applies",
	 .min = 1, .max = 1000000},
	{.name = "events-ring-bytes", .type = FIBRIL_CONFIG_INT, .default_value = "8388608",
	 .help = "Size of the dp_events ring buffer in bytes (a power of 2, at least a page): "
		 "8 MiB holds about 0.9 s of trace events at 100,000 packets/s; a change "
		 "recreates the pin",
	 .min = 4096, .max = 1 << 30},
	{.name = "trace-events", .type = FIBRIL_CONFIG_BOOL, .default_value = "false",
	 .help = "Also send a trace event to dp_events for every forwarded or passed packet "
		 "(drops always are)"},
	{.name = "policy-verdict-events", .type = FIBRIL_CONFIG_BOOL, .default_value = "true",
	 .help = "Send a policy verdict event to dp_events for the first packet of every flow "
		 "an enforced policy allows, naming the rule (denials are drop events)"},
	{0},
};

static void config_read(struct datapath *dp)
{
	snprintf(dp->host_dev, sizeof(dp->host_dev), "%s",
		 fibril_config_string(dp->m, "host-device"));
	snprintf(dp->host_peer, sizeof(dp->host_peer), "%s",
		 fibril_config_string(dp->m, "host-device-peer"));
	snprintf(dp->host_dev_type, sizeof(dp->host_dev_type), "%s",
		 fibril_config_string(dp->m, "host-device-type"));
	dp->ct_tcp_ms = fibril_config_duration_ms(dp->m, "conntrack-timeout-tcp");
	dp->ct_closing_ms = fibril_config_duration_ms(dp->m, "conntrack-timeout-tcp-closing");
	dp->ct_other_ms = fibril_config_duration_ms(dp->m, "conntrack-timeout-other");
	dp->ct_syn_ms = fibril_config_duration_ms(dp->m, "conntrack-timeout-tcp-syn");
	dp->ct_endpoint_share = (uint32_t)fibril_config_int(dp->m, "conntrack-endpoint-share");
	dp->ct_outside_share = (uint32_t)fibril_config_int(dp->m, "conntrack-outside-share");
	dp->gc_interval_ms = fibril_config_duration_ms(dp->m, "conntrack-gc-interval");
	dp->trace = fibril_config_bool(dp->m, "trace-events");
	dp->policy_verdicts = fibril_config_bool(dp->m, "policy-verdict-events");
	dp->host_routing_bpf = !strcmp(fibril_config_string(dp->m, "host-routing"), "bpf");
	dp->masquerade = fibril_config_bool(dp->m, "masquerade");
	dp->nat_port_min = (uint16_t)fibril_config_int(dp->m, "masquerade-port-min");
	dp->nat_port_max = (uint16_t)fibril_config_int(dp->m, "masquerade-port-max");
	dp->nat_ep_max = (uint32_t)fibril_config_int(dp->m, "masquerade-endpoint-max");
	snprintf(dp->nomasq_cidrs, sizeof(dp->nomasq_cidrs), "%s",
		 fibril_config_string(dp->m, "non-masquerade-cidrs"));
	snprintf(dp->masqcfg_path, sizeof(dp->masqcfg_path), "%s",
		 fibril_config_string(dp->m, "ip-masq-agent-config"));
	/* the probes' verifier log is written by the kernel: valgrind cannot
	 * tell it is initialised */
	dp_vg_quiet_begin();
	bool helpers = dp->host_routing_bpf &&
		       libbpf_probe_bpf_helper(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_fib_lookup, NULL) == 1 &&
		       libbpf_probe_bpf_helper(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_redirect_neigh, NULL) == 1;
	dp_vg_quiet_end();
	if (dp->host_routing_bpf && !helpers) {
		fibril_warn(dp->m, "host-routing = bpf: the kernel lacks bpf_fib_lookup or "
				   "bpf_redirect_neigh for tc programs; using legacy host routing");
		dp->host_routing_bpf = false;
	}
	dp->ct_max_tcp = (uint32_t)fibril_config_int(dp->m, "conntrack-max-tcp");
	dp->ct_max_other = (uint32_t)fibril_config_int(dp->m, "conntrack-max-other");
	dp->events_bytes = (uint32_t)fibril_config_int(dp->m, "events-ring-bytes");
	dp->ct_refresh_s =
		(uint32_t)((fibril_config_duration_ms(dp->m, "conntrack-refresh-interval") + 999) /
			   1000);
	dp->event_rate = (uint32_t)fibril_config_int(dp->m, "drop-events-rate");
	dp->event_burst = (uint32_t)fibril_config_int(dp->m, "drop-events-burst");
}

/* ---- endpoints table ----------------------------------------------------------------------- */

/* Health of the "endpoints" component: Degraded while one failed. */
void dp_eps_health(struct datapath *dp)
{
	size_t failed = 0;
	const struct dp_ep *first = NULL;
	for (const struct dp_ep *e = dp->eps; e; e = e->next) {
		if (e->error[0]) {
			failed++;
			if (!first)
				first = e;
		}
	}
	if (!failed)
		fibril_health_report(dp->m, "endpoints", FIBRIL_HEALTH_OK, "%zu in place", dp->neps);
	else
		fibril_health_report(dp->m, "endpoints", FIBRIL_HEALTH_DEGRADED,
				     "%zu of %zu failed; endpoint %u: %s", failed, dp->neps,
				     first->ep.id, first->error);
}

/* ---- the capability ------------------------------------------------------------------------- */

/* Copy the caller's endpoint (of the size it was built with: shorter is
 * fine, unknown non-zero bytes are not) into *out and check it. */
static int ep_check(const struct fibril_datapath_endpoint *ep, struct fibril_datapath_endpoint *out,
		    char *err, size_t len)
{
	char why[DP_ERR_LEN];
	int rc = fibril_struct_copy_in(out, sizeof(*out), ep, ep ? ep->sz : 0,
				       FIBRIL_OFFSETOFEND(struct fibril_datapath_endpoint, sz),
				       "struct fibril_datapath_endpoint", why, sizeof(why));
	if (rc < 0) {
		dp_seterr(err, len, "%s", why);
		return rc;
	}
	out->sz = sizeof(*out);
	if (out->id == 0) {
		dp_seterr(err, len, "endpoint ID 0 is not valid (1..65535)");
		return -EINVAL;
	}
	return 0;
}

/* Take out what upsert put in for ep's addresses (only entries that are
 * this endpoint's); a veth that is gone is fine. */
static void ep_undo(struct datapath *dp, const struct fibril_datapath_endpoint *ep, bool detach)
{
	if (ep->has_ipv4 && dp_endpoint_owner(dp, 4, &ep->ipv4) == ep->id) {
		dp_endpoint_del(dp, ep->id, 4, &ep->ipv4);
		dp_ipc_unclaim(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 4, &ep->ipv4, 32,
			       NULL, 0);
	}
	if (ep->has_ipv6 && dp_endpoint_owner(dp, 6, &ep->ipv6) == ep->id) {
		dp_endpoint_del(dp, ep->id, 6, &ep->ipv6);
		dp_ipc_unclaim(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 6, &ep->ipv6, 128,
			       NULL, 0);
	}
	if (ep->has_ipv4)
		dp_route_del(dp, 4, &ep->ipv4, ep->host_ifindex, NULL, 0);
	if (ep->has_ipv6)
		dp_route_del(dp, 6, &ep->ipv6, ep->host_ifindex, NULL, 0);
	if (detach && ep->host_ifindex > 0)
		dp_prog_detach(dp, ep->host_ifindex, NULL, 0);
}

/* Remove what `old` had that `now` no longer has: an address that changed
 * (its entries and route), and the old veth's filter when the veth changed.
 * A kept address needs nothing: its entries and route were just rewritten. */
static void ep_drop_stale(struct datapath *dp, const struct fibril_datapath_endpoint *old,
			  const struct fibril_datapath_endpoint *now)
{
	struct fibril_datapath_endpoint stale = *old;
	stale.has_ipv4 = old->has_ipv4 && !(now->has_ipv4 && !memcmp(&old->ipv4, &now->ipv4, 4));
	stale.has_ipv6 = old->has_ipv6 && !(now->has_ipv6 && !memcmp(&old->ipv6, &now->ipv6, 16));
	ep_undo(dp, &stale, old->host_ifindex != now->host_ifindex);
}

static int upsert_steps(struct datapath *dp, const struct fibril_datapath_endpoint *ep, char *err,
			size_t len)
{
	int rc = 0;
	/* maps first: the (new) program finds the endpoint the moment it runs */
	if (ep->has_ipv4 &&
	    ((rc = dp_endpoint_put(dp, ep, 4, &ep->ipv4, err, len)) < 0 ||
	     (rc = dp_ipc_claim_tunnel(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 4, &ep->ipv4,
					32, ep->identity, 0, NULL, err, len)) < 0))
		return rc;
	if (ep->has_ipv6 &&
	    ((rc = dp_endpoint_put(dp, ep, 6, &ep->ipv6, err, len)) < 0 ||
	     (rc = dp_ipc_claim_tunnel(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 6, &ep->ipv6,
					128, ep->identity, 0, NULL, err, len)) < 0))
		return rc;
	if ((rc = dp_prog_attach(dp, ep->host_ifindex, err, len)) < 0)
		return rc;
	if (ep->has_ipv4 && (rc = dp_route_add(dp, 4, &ep->ipv4, ep->host_ifindex, err, len)) < 0)
		return rc;
	if (ep->has_ipv6 && (rc = dp_route_add(dp, 6, &ep->ipv6, ep->host_ifindex, err, len)) < 0)
		return rc;
	return 0;
}

static int addr_taken(struct datapath *dp, const struct fibril_datapath_endpoint *ep, int family,
		      const void *addr, char *err, size_t len)
{
	uint16_t owner = dp_endpoint_owner(dp, family, addr);
	if (owner && owner != ep->id) {
		char text[INET6_ADDRSTRLEN];
		inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, text, sizeof(text));
		dp_seterr(err, len, "endpoint %u: address %s belongs to endpoint %u", ep->id, text,
			  owner);
		return -EEXIST;
	}
	return 0;
}

static int op_endpoint_upsert(void *ctx, const struct fibril_datapath_endpoint *ep, char *err,
			      size_t errlen)
{
	struct datapath *dp = ctx;
	char why[DP_ERR_LEN] = "";
	struct fibril_datapath_endpoint given;
	int rc = ep_check(ep, &given, err, errlen);
	if (rc < 0)
		return rc;
	ep = &given;
	if (!ep->has_ipv4 && !ep->has_ipv6) {
		dp_seterr(err, errlen, "endpoint %u has neither an IPv4 nor an IPv6 address", ep->id);
		return -EINVAL;
	}
	char name[IF_NAMESIZE];
	if (ep->host_ifindex <= 0 || !dp_ifname(dp, ep->host_ifindex, name)) {
		dp_seterr(err, errlen, "endpoint %u: host veth ifindex %d does not exist", ep->id,
			  ep->host_ifindex);
		return -ENODEV;
	}
	if (ep->host_ifname[0] && strncmp(name, ep->host_ifname, sizeof(ep->host_ifname)) != 0) {
		dp_seterr(err, errlen, "endpoint %u: ifindex %d is %s, not %.16s", ep->id,
			  ep->host_ifindex, name, ep->host_ifname);
		return -EINVAL;
	}
	if ((ep->has_ipv4 && (rc = addr_taken(dp, ep, 4, &ep->ipv4, err, errlen)) < 0) ||
	    (ep->has_ipv6 && (rc = addr_taken(dp, ep, 6, &ep->ipv6, err, errlen)) < 0))
		return rc;

	struct dp_ep *known = dp_ep_find(dp, ep->id);
	if (dp_recheck_adopt(dp, known, ep, name, why, sizeof(why)) > 0)
		return 0; /* as the last run left it: re-applied in the background */
	dp_recheck_forget(dp, known); /* the full upsert below does it all */
	if (known)
		known->restored = false;
	rc = upsert_steps(dp, ep, why, sizeof(why));
	if (rc < 0) {
		if (!known) {
			ep_undo(dp, ep, true); /* nothing half-done stays behind */
			known = calloc(1, sizeof(*known));
			if (known) {
				known->ep = *ep;
				if (dp_ep_add(dp, known) < 0) {
					free(known);
					known = NULL;
				}
			}
		}
		if (known)
			snprintf(known->error, sizeof(known->error), "%s", why);
		dp_eps_health(dp);
		fibril_warn(dp->m, "endpoint %u (%s): %s", ep->id, name, why);
		dp_seterr(err, errlen, "endpoint %u (%s): %s", ep->id, name, why);
		return rc;
	}
	if (known) {
		ep_drop_stale(dp, &known->ep, ep);
	} else {
		known = calloc(1, sizeof(*known));
		if (known)
			known->ep.id = ep->id;
		if (!known || dp_ep_add(dp, known) < 0) {
			free(known);
			dp_seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
	}
	known->ep = *ep;
	known->ep.sz = sizeof(known->ep);
	snprintf(known->ep.host_ifname, sizeof(known->ep.host_ifname), "%s", name);
	known->error[0] = '\0';
	dp_eps_health(dp);
	fibril_debug(dp->m, "endpoint %u on %s (ifindex %d) in place", ep->id, name,
		     ep->host_ifindex);
	return 0;
}

static int op_endpoint_remove(void *ctx, const struct fibril_datapath_endpoint *ep, char *err,
			      size_t errlen)
{
	struct datapath *dp = ctx;
	struct fibril_datapath_endpoint given;
	int rc = ep_check(ep, &given, err, errlen);
	if (rc < 0)
		return rc;
	ep = &given;
	struct dp_ep *known = dp_ep_find(dp, ep->id);
	dp_recheck_forget(dp, known);
	if (known)
		ep_undo(dp, &known->ep, true);
	ep_undo(dp, ep, !known || known->ep.host_ifindex != ep->host_ifindex);
	dp_ep_forget(dp, ep->id);
	dp_gc_endpoint_removed(dp, ep->id);
	dp_eps_health(dp);
	fibril_debug(dp->m, "endpoint %u removed", ep->id);
	return 0;
}

static int op_node(void *ctx, struct fibril_datapath_node *out)
{
	struct datapath *dp = ctx;
	/* An output struct: fill as much as the caller's size holds. */
	if (!out || out->sz < FIBRIL_OFFSETOFEND(struct fibril_datapath_node, sz))
		return -EINVAL;
	if (!dp->node_ready)
		return -EAGAIN;
	uint32_t sz = out->sz;
	memcpy(out, &dp->node, sz < sizeof(dp->node) ? sz : sizeof(dp->node));
	out->sz = sz < sizeof(dp->node) ? sz : (uint32_t)sizeof(dp->node);
	return 0;
}

static int op_policy_upsert(void *ctx, const struct fibril_datapath_policy_entry *e, char *err,
			    size_t errlen)
{
	return dp_policy_put(ctx, e, err, errlen);
}

static int op_policy_remove(void *ctx, const struct fibril_datapath_policy_entry *e, char *err,
			    size_t errlen)
{
	return dp_policy_del(ctx, e, err, errlen);
}

static int op_policy_enforce(void *ctx, uint16_t endpoint_id, bool ingress, bool egress,
			     uint32_t revision, char *err, size_t errlen)
{
	return dp_policy_enforce(ctx, endpoint_id, ingress, egress, revision, err, errlen);
}

static int op_policy_list(void *ctx,
			  int (*cb)(const struct fibril_datapath_policy_entry *e, void *ud), void *ud)
{
	return dp_policy_list(ctx, cb, ud);
}

static int op_tunnel_setup(void *ctx, const struct fibril_datapath_tunnel *t, char *err,
			   size_t errlen)
{
	struct datapath *dp = ctx;
	struct fibril_datapath_tunnel given;
	char why[DP_ERR_LEN];
	int rc = fibril_struct_copy_in(&given, sizeof(given), t, t ? t->sz : 0,
				       FIBRIL_OFFSETOFEND(struct fibril_datapath_tunnel, mode),
				       "struct fibril_datapath_tunnel", why, sizeof(why));
	if (rc < 0) {
		dp_seterr(err, errlen, "%s", why);
		return rc;
	}
	if (given.mode == FIBRIL_DATAPATH_TUNNEL_NONE) {
		dp->tunnel_ifindex = 0;
		dp->tunnel_dev[0] = '\0';
		return dp_config_write(dp, err, errlen);
	}
	if (given.mode != FIBRIL_DATAPATH_TUNNEL_VXLAN) {
		dp_seterr(err, errlen, "tunnel mode %u is neither none (0) nor vxlan (1)", given.mode);
		return -EINVAL;
	}
	given.ifname[sizeof(given.ifname) - 1] = '\0';
	snprintf(dp->tunnel_dev, sizeof(dp->tunnel_dev), "%s",
		 given.ifname[0] ? given.ifname : FIBRIL_DATAPATH_TUNNEL_DEVICE);
	dp->tunnel_port = given.port ? given.port : FIBRIL_DATAPATH_TUNNEL_PORT;
	int ifindex = 0, how = 0;
	rc = dp_tunnel_device_setup(dp, &ifindex, &how, err, errlen);
	if (rc == 0)
		rc = dp_prog_attach_overlay(dp, ifindex, err, errlen);
	if (rc < 0) {
		snprintf(dp->tunnel_error, sizeof(dp->tunnel_error), "%s", err ? err : "");
		fibril_health_report(dp->m, "tunnel", FIBRIL_HEALTH_DEGRADED, "%s",
				     dp->tunnel_error);
		return rc;
	}
	if (how == 1)
		dp->tunnel_adopted++;
	else if (how == 2)
		dp->tunnel_replaced++;
	else
		dp->tunnel_created++;
	dp->tunnel_ifindex = (uint32_t)ifindex;
	dp->tunnel_error[0] = '\0';
	if ((rc = dp_config_write(dp, err, errlen)) < 0)
		return rc;
	fibril_health_report(dp->m, "tunnel", FIBRIL_HEALTH_OK, "%s (ifindex %d), vxlan port %u",
			     dp->tunnel_dev, ifindex, dp->tunnel_port);
	fibril_info(dp->m, "tunnel device %s (ifindex %d, vxlan external, port %u) %s",
		    dp->tunnel_dev, ifindex, dp->tunnel_port,
		    how == 1 ? "adopted" : how == 2 ? "replaced" : "created");
	return 0;
}

static void op_set_identity_scope(void *ctx, const char *(*fn)(void *ud, uint32_t identity),
				  void *ud)
{
	struct datapath *dp = ctx;

	dp->identity_scope = fn;
	dp->identity_scope_ud = fn ? ud : NULL;
}

static const struct fibril_datapath_ops dp_ops = {
	.hdr = {.sz = sizeof(struct fibril_datapath_ops), .version = FIBRIL_DATAPATH_VERSION},
	.endpoint_upsert = op_endpoint_upsert,
	.endpoint_remove = op_endpoint_remove,
	.ipcache_upsert = dp_op_ipcache_upsert,
	.ipcache_remove = dp_op_ipcache_remove,
	.node = op_node,
	.policy_upsert = op_policy_upsert,
	.policy_remove = op_policy_remove,
	.policy_enforce = op_policy_enforce,
	.policy_list = op_policy_list,
	.ipcache_upsert_entry = dp_op_ipcache_upsert_entry,
	.ipcache_upsert_batch = dp_op_ipcache_upsert_batch,
	.tunnel_setup = op_tunnel_setup,
	.ipcache_remove_entry = dp_op_ipcache_remove_entry,
	.set_identity_scope = op_set_identity_scope,
	.egress_sync = dp_op_egress_sync,
	.egress_list = dp_op_egress_list,
};

/* ---- the node (host device + gateways) ------------------------------------------------------ */

/* One attempt; true when the node is set up. */
static bool node_try(struct datapath *dp)
{
	struct fibril_ipam_pool pools[DP_MAX_POOLS];
	memset(pools, 0, sizeof(pools));
	for (size_t i = 0; i < DP_MAX_POOLS; i++)
		pools[i].sz = sizeof(pools[i]);
	int n = dp->ipam->pools(dp->ipam_ctx, pools, DP_MAX_POOLS);
	char err[DP_ERR_LEN] = "";
	if (n <= 0) {
		snprintf(err, sizeof(err), "the ipam mode has no pool yet%s%s", n < 0 ? ": " : "",
			 n < 0 ? strerror(-n) : "");
	} else {
		if (n > DP_MAX_POOLS)
			n = DP_MAX_POOLS;
		for (int i = 0; i < n; i++) {
			pools[i].cidr[sizeof(pools[i].cidr) - 1] = '\0';
			pools[i].gateway[sizeof(pools[i].gateway) - 1] = '\0';
		}
		dp_host_device_setup(dp, pools, (size_t)n, err, sizeof(err));
	}
	if (!dp->node_ready || err[0]) {
		if (strcmp(err, dp->node_error) != 0)
			fibril_warn(dp->m, "host device: %s (retrying every %d s)", err,
				    NODE_RETRY_MS / 1000);
		snprintf(dp->node_error, sizeof(dp->node_error), "%s", err);
		fibril_health_report(dp->m, "host-device", FIBRIL_HEALTH_DEGRADED, "%s", err);
		dp->node_ready = false;
		return false;
	}
	char g4[INET_ADDRSTRLEN] = "", g6[INET6_ADDRSTRLEN] = "";
	if (dp->node.has_ipv4)
		inet_ntop(AF_INET, &dp->node.gateway4, g4, sizeof(g4));
	if (dp->node.has_ipv6)
		inet_ntop(AF_INET6, &dp->node.gateway6, g6, sizeof(g6));
	dp->node_error[0] = '\0';
	fibril_health_report(dp->m, "host-device", FIBRIL_HEALTH_OK, "%s (ifindex %d): %s%s%s",
			     dp->host_dev, dp->node.host_ifindex, g4, g4[0] && g6[0] ? " " : "", g6);
	fibril_info(dp->m, "host device %s (ifindex %d) holds %s%s%s", dp->host_dev,
		    dp->node.host_ifindex, g4, g4[0] && g6[0] ? " and " : "", g6);
	return true;
}

static void node_retry(struct fibril_timer *t, void *ud)
{
	struct datapath *dp = ud;
	if (node_try(dp)) {
		fibril_timer_cancel(t);
		dp->node_timer = NULL;
	}
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

static int dp_init(struct fibril_module *m)
{
	memset(&g_dp, 0, sizeof(g_dp));
	g_dp.m = m;
	fibril_module_set_data(m, &g_dp);
	modcommon_libbpf_log_off();
	int rc = fibril_service_provide(m, FIBRIL_DATAPATH_CAPABILITY, &dp_ops.hdr, &g_dp);
	if (rc < 0) {
		fibril_module_set_error(m, "cannot provide %s: %s", FIBRIL_DATAPATH_CAPABILITY,
					strerror(-rc));
		return rc;
	}
	rc = dp_api_register(&g_dp);
	if (rc < 0)
		fibril_module_set_error(m, "cannot register the API routes: %s", strerror(-rc));
	return rc;
}

static void dp_release(struct datapath *dp)
{
	if (dp->node_timer)
		fibril_timer_cancel(dp->node_timer);
	dp->node_timer = NULL;
	if (dp->gc_timer)
		fibril_timer_cancel(dp->gc_timer);
	dp->gc_timer = NULL;
	if (dp->unsent_timer)
		fibril_timer_cancel(dp->unsent_timer);
	dp->unsent_timer = NULL;
	dp_masqcfg_stop(dp);
	dp_recheck_stop(dp);
	dp_events_stop(dp);
	dp->start_pending = false; /* a stop during the start: nothing to finish */
	dp_prog_unload(dp);
	dp_nl_close(dp);
	dp_ifname_close(dp);
	dp_eps_free(dp);
	dp_ipc_free(dp);
	dp->node_ready = false;
}

/* fibril_from_netdev on the underlay devices (host-routing = bpf, or
 * masquerade's replies) or off them (legacy, no masquerade), and
 * fibril_to_netdev on their egress (masquerade); a failure is logged, the
 * start goes on. */
static void netdevs_sync(struct datapath *dp)
{
	char err[DP_ERR_LEN] = "";
	int nnetdev = 0;
	bool on = dp->host_routing_bpf || dp->masquerade;
	if (dp_prog_netdevs_sync(dp, on, &nnetdev, err, sizeof(err)) < 0)
		fibril_warn(dp->m, "external devices: %s", err);
	else if (nnetdev)
		fibril_info(dp->m, "host-routing %s, masquerade %s: fibril_from_netdev %s %d "
				   "device(s), fibril_to_netdev on %d",
			    dp->host_routing_bpf ? "bpf" : "legacy", dp->masquerade ? "on" : "off",
			    on ? "attached to" : "detached from", nnetdev, dp->nat_devs);
	dp->netdevs = on ? nnetdev : 0;
}

void dp_programs_loaded(struct datapath *dp)
{
	if (dp->host_routing_bpf || dp->masquerade)
		netdevs_sync(dp);
}

static int dp_start(struct fibril_module *m)
{
	struct datapath *dp = fibril_module_data(m);
	char err[DP_ERR_LEN] = "";
	int rc;

	config_read(dp);
	long page = sysconf(_SC_PAGESIZE);
	if ((dp->events_bytes & (dp->events_bytes - 1)) || (page > 0 && dp->events_bytes < page)) {
		fibril_module_set_error(m, "[datapath] events-ring-bytes = %u: not a power of 2 of at "
					   "least a page (%ld bytes)", dp->events_bytes, page);
		return -EINVAL;
	}
	if (dp->nat_port_max < dp->nat_port_min) {
		fibril_module_set_error(m, "[datapath] masquerade-port-max = %u is below "
					   "masquerade-port-min = %u: no port to masquerade with",
					dp->nat_port_max, dp->nat_port_min);
		return -EINVAL;
	}
	dp->ipam = (const struct fibril_ipam_ops *)fibril_service_lookup(m, FIBRIL_IPAM_CAPABILITY,
									  1 /* the lowest it needs */,
									  &dp->ipam_ctx);
	if (!dp->ipam || !FIBRIL_SERVICE_HAS(dp->ipam, pools)) {
		fibril_module_set_error(m, "no usable ipam capability (for the pools' gateways)");
		return -ENOENT;
	}
	if ((rc = dp_nl_open(dp, err, sizeof(err))) < 0 ||
	    (rc = dp_maps_open(dp, err, sizeof(err))) < 0)
		goto fail;
	/* tunnel mode as the last run left it, until its consumer sets it up
	 * again: encapsulation does not pause over a restart */
	dp_config_restore(dp);
	if ((rc = dp_config_write(dp, err, sizeof(err))) < 0 ||
	    (rc = dp_nat_nomasq_write(dp, err, sizeof(err))) < 0)
		goto fail;
	dp_masqcfg_start(dp); /* the file's CIDRs join them, or a bad file is named */
	/* everything not more specific is the world */
	static const uint8_t any[16];
	if ((rc = dp_ipc_claim_tunnel(dp, DP_IPC_SRC_DATAPATH, 4, any, 0, DP_IDENTITY_WORLD, 0, NULL,
				      err, sizeof(err))) < 0 ||
	    (rc = dp_ipc_claim_tunnel(dp, DP_IPC_SRC_DATAPATH, 6, any, 0, DP_IDENTITY_WORLD, 0, NULL,
				      err, sizeof(err))) < 0)
		goto fail;
	/* the verifier's work runs on a worker while the agent goes on (the
	 * maps are what the next modules write); an attachment waits for it */
	if ((rc = dp_prog_load_start(dp, err, sizeof(err))) < 0)
		goto fail;
	dp_endpoints_restore(dp);
	dp_eps_health(dp);
	/* fibril_from_netdev: detached now (legacy), or attached once the
	 * programs are loaded (dp_programs_loaded) */
	if (!(dp->host_routing_bpf || dp->masquerade) || dp->prog)
		netdevs_sync(dp);
	if (!node_try(dp))
		dp->node_timer = fibril_timer_add(m, NODE_RETRY_MS, NODE_RETRY_MS, node_retry, dp);
	if (dp_events_start(dp, err, sizeof(err)) < 0) {
		fibril_warn(m, "%s", err);
		fibril_health_report(m, "events", FIBRIL_HEALTH_DEGRADED, "%s", err);
	} else {
		fibril_health_report(m, "events", FIBRIL_HEALTH_OK, "reading %s", DP_MAP_EVENTS);
	}
	if ((rc = dp_gc_start(dp)) < 0) {
		snprintf(err, sizeof(err), "cannot start the conntrack GC timer");
		goto fail;
	}
	if ((rc = dp_unsent_start(dp)) < 0) {
		snprintf(err, sizeof(err), "cannot start the timer of the unsent events' count");
		goto fail;
	}
	fibril_info(m, "tc programs %s; conntrack GC every %llu ms; trace events %s",
		    dp->prog ? (dp->prog_reused ? "reused" : "loaded") : "loading",
		    (unsigned long long)dp->gc_interval_ms, dp->trace ? "on" : "off");
	if (dp->prog_job) {
		/* ready means pods can be served: the start (and so the modules
		 * after it, the API and READY=1) ends when the programs are in,
		 * while the loop goes on serving what started before */
		dp->start_pending = true;
		return FIBRIL_START_PENDING;
	}
	return 0;
fail:
	fibril_module_set_error(m, "%s", err);
	dp_release(dp);
	return rc;
}

static void dp_stop(struct fibril_module *m)
{
	/* attachments, routes, the host device and the pins stay: traffic
	 * keeps flowing until the next agent re-adopts them */
	dp_release(fibril_module_data(m));
}

static int dp_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct datapath *dp = fibril_module_data(m);
	if (dp->prog_job) /* (the loop is not held for a summary) */
		return snprintf(buf, len, "%zu endpoint(s), programs loading, %s %s", dp->neps,
				dp->host_dev, dp->node_ready ? "ready" : "not ready");
	return snprintf(buf, len, "%zu endpoint(s), program id %d (egress %d), %s %s, %llu drop event(s)",
			dp->neps, dp_prog_id(dp, DP_HOOK_INGRESS), dp_prog_id(dp, DP_HOOK_EGRESS),
			dp->host_dev,
			dp->node_ready ? "ready" : "not ready", (unsigned long long)dp->events_drop);
}

FIBRIL_MODULE(.name = "datapath", .version = "1.0",
	      .description = "eBPF datapath: tc programs on every endpoint's veth, both ways",
	      .provides = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY),
	      .requires = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY), .config_keys = dp_config_keys,
	      .init = dp_init, .start = dp_start, .stop = dp_stop, .summary = dp_summary);
