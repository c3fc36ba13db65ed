/* modules/datapath/dp_recheck.c - a restart's endpoints: found in
 * dp_endpoints at the start (dp_endpoints_restore: one BPF_MAP_LOOKUP_BATCH
 * per 1,024 entries, not two bpf(2) calls per entry), then taken off the
 * critical path. An endpoint found so is already served when the programs were adopted from their pins: its
 * map entries are the ones the last run wrote, and its veth's filters and
 * its routes were put there by the last run. Its first endpoint_upsert with
 * exactly what the map holds (addresses, veth, identity, MACs) only claims
 * its ipcache entries again and returns: the restore, the API and READY=1
 * do not wait for two tc filters and two routes per endpoint. The filters
 * (BPF_TC_F_REPLACE: atomic, the same program again) and the routes
 * (NLM_F_REPLACE) are then re-applied on the loop in slices of
 * RECHECK_SLICE_MS, so that one removed by hand while the agent was down,
 * or a veth left on another program by a run killed in the middle of a
 * swap, is put right within moments; a step that fails there is the
 * endpoint's error (health component endpoints), as an upsert's would be.
 * Anything else (a new program, a changed endpoint, one the map did not
 * hold) takes the full upsert. The log says "re-applied the filters and
 * routes of N restored endpoints in X ms (M failed)". */
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>

#include "datapath.h"

#define RECHECK_SLICE_MS 5.0
#define RESTORE_BATCH 1024

/* ---- found in dp_endpoints ------------------------------------------------------------------ */

static struct dp_ep *restore_find_or_add(struct datapath *dp, const struct dp_endpoint_info *v)
{
	struct dp_ep *e = dp_ep_find(dp, v->ep_id);
	if (e)
		return e;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->ep.sz = sizeof(e->ep);
	e->restored = true;
	e->ep.id = v->ep_id;
	e->ep.identity = v->identity;
	e->ep.host_ifindex = (int)v->ifindex;
	e->ep.flags = (v->flags & DP_EP_F_NO_MASQUERADE) ? FIBRIL_DATAPATH_EP_F_NO_MASQUERADE : 0;
	memcpy(e->ep.mac, v->mac, 6);
	memcpy(e->ep.host_mac, v->host_mac, 6);
	if (dp_ep_add(dp, e) < 0) {
		free(e);
		return NULL;
	}
	return e;
}

/* One entry of dp_endpoints; false: out of memory. */
static bool restore_one(struct datapath *dp, const struct dp_endpoint_key *k,
			const struct dp_endpoint_info *v)
{
	if (v->ep_id == 0)
		return true;
	struct dp_ep *e = restore_find_or_add(dp, v);
	if (!e)
		return false;
	if (k->family == DP_FAMILY_IPV4) {
		e->ep.has_ipv4 = true;
		memcpy(&e->ep.ipv4, k->addr, 4);
	} else {
		e->ep.has_ipv6 = true;
		memcpy(&e->ep.ipv6, k->addr, 16);
	}
	return true;
}

/* Entry by entry (a kernel without batches on hash maps). */
static void restore_walk(struct datapath *dp, int fd)
{
	/* A key that is never written (family 0) asks for the first key
	 * without passing NULL (which valgrind flags). */
	struct dp_endpoint_key cur, next;
	struct dp_endpoint_info v;
	size_t steps = 0;
	memset(&cur, 0, sizeof(cur));
	while (steps++ < DP_ENDPOINTS_MAX && dp_next_key(fd, &cur, &next) == 0) {
		cur = next;
		if (bpf_map_lookup_elem(fd, &cur, &v) != 0)
			continue;
		if (!restore_one(dp, &cur, &v))
			break;
	}
}

/* Batches; false when the kernel refused one (the walk then reads them all
 * again: finding an endpoint twice changes nothing). */
static bool restore_batched(struct datapath *dp, int fd)
{
	struct dp_endpoint_key *keys = calloc(RESTORE_BATCH, sizeof(*keys));
	struct dp_endpoint_info *vals = calloc(RESTORE_BATCH, sizeof(*vals));
	__u32 in = 0, out = 0;
	bool first = true, ok = keys && vals;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	for (size_t total = 0; ok && total < DP_ENDPOINTS_MAX;) {
		__u32 count = RESTORE_BATCH;
		dp_vg_quiet_begin();
		int rc = bpf_map_lookup_batch(fd, first ? NULL : &in, &out, keys, vals, &count, &opts);
		int e = rc ? errno : 0;
		dp_vg_quiet_end();
		if (rc && e != ENOENT) {
			ok = false; /* no batches here (or ENOSPC): the walk, which is idempotent */
			break;
		}
		first = false;
		for (__u32 i = 0; i < count; i++)
			if (!restore_one(dp, &keys[i], &vals[i]))
				e = ENOENT; /* out of memory: stop as the walk does */
		total += count;
		if (e == ENOENT)
			break; /* the last batch */
		in = out;
	}
	free(keys);
	free(vals);
	return ok;
}

void dp_endpoints_restore(struct datapath *dp)
{
	int fd = fibril_map_fd(dp->maps[DPM_ENDPOINTS]);
	if (!restore_batched(dp, fd))
		restore_walk(dp, fd);
	/* their ipcache entries are theirs again (a claim of a lower source
	 * made before their endpoint_upsert does not replace them) */
	for (struct dp_ep *e = dp->eps; e; e = e->next) {
		if (e->ep.has_ipv4)
			dp_ipc_adopt(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 4, &e->ep.ipv4, 32);
		if (e->ep.has_ipv6)
			dp_ipc_adopt(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 6, &e->ep.ipv6,
				     128);
	}
	if (dp->neps)
		fibril_info(dp->m, "%zu endpoint(s) found in %s from the last run", dp->neps,
			    DP_MAP_ENDPOINTS);
}

/* ---- adopted as found, re-applied in the background ---------------------------------------- */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The endpoint is what the map said of it at the start. */
static bool same_endpoint(const struct fibril_datapath_endpoint *had,
			  const struct fibril_datapath_endpoint *ep)
{
	return had->has_ipv4 == ep->has_ipv4 && had->has_ipv6 == ep->has_ipv6 &&
	       (!ep->has_ipv4 || !memcmp(&had->ipv4, &ep->ipv4, sizeof(ep->ipv4))) &&
	       (!ep->has_ipv6 || !memcmp(&had->ipv6, &ep->ipv6, sizeof(ep->ipv6))) &&
	       had->host_ifindex == ep->host_ifindex && had->identity == ep->identity &&
	       had->flags == ep->flags && !memcmp(had->mac, ep->mac, sizeof(ep->mac)) &&
	       !memcmp(had->host_mac, ep->host_mac, sizeof(ep->host_mac));
}

static void recheck_tick(struct fibril_timer *t, void *ud);

static int recheck_arm(struct datapath *dp)
{
	if (dp->recheck_timer)
		return 0;
	/* 1 ms, not 0: a timer due at the loop's cached time runs in the
	 * same timers phase, and the loop would never turn between slices */
	dp->recheck_timer = fibril_timer_add(dp->m, 1, 0, recheck_tick, dp);
	return dp->recheck_timer ? 0 : -ENOMEM;
}

int dp_recheck_adopt(struct datapath *dp, struct dp_ep *known,
		     const struct fibril_datapath_endpoint *ep, const char *ifname, char *err,
		     size_t len)
{
	if (!known || !known->restored || !dp->prog_reused || !dp->prog ||
	    !same_endpoint(&known->ep, ep))
		return 0;
	int rc = 0;
	if (ep->has_ipv4)
		rc = dp_ipc_claim_tunnel(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 4,
					 &ep->ipv4, 32, ep->identity, 0, NULL, err, len);
	if (rc >= 0 && ep->has_ipv6)
		rc = dp_ipc_claim_tunnel(dp, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT, 6,
					 &ep->ipv6, 128, ep->identity, 0, NULL, err, len);
	if (rc < 0)
		return 0; /* the full upsert says what is wrong */
	if (!dp->recheck_started) {
		dp->recheck_started = true;
		dp->recheck_t0 = now_ms();
	}
	if (recheck_arm(dp) < 0)
		return 0; /* no timer: do it now */
	known->restored = false;
	known->recheck = true;
	known->ep = *ep;
	known->ep.sz = sizeof(known->ep);
	snprintf(known->ep.host_ifname, sizeof(known->ep.host_ifname), "%s", ifname);
	known->error[0] = '\0';
	dp->recheck_pending++;
	return 1;
}

/* The filters and routes of one endpoint, again. */
static int reapply(struct datapath *dp, struct dp_ep *e)
{
	char why[DP_ERR_LEN] = "";
	const struct fibril_datapath_endpoint *ep = &e->ep;
	int rc = dp_prog_attach(dp, ep->host_ifindex, why, sizeof(why));
	if (rc >= 0 && ep->has_ipv4)
		rc = dp_route_add(dp, 4, &ep->ipv4, ep->host_ifindex, why, sizeof(why));
	if (rc >= 0 && ep->has_ipv6)
		rc = dp_route_add(dp, 6, &ep->ipv6, ep->host_ifindex, why, sizeof(why));
	if (rc < 0) {
		char now[IF_NAMESIZE];
		if (!dp_ifname(dp, ep->host_ifindex, now) || strcmp(now, ep->host_ifname)) {
			/* a fact, not a failure: its endpoint's removal ends it */
			fibril_info(dp->m, "endpoint %u: its veth %s (ifindex %d) is gone", ep->id,
				    ep->host_ifname, ep->host_ifindex);
			return 0;
		}
		snprintf(e->error, sizeof(e->error), "%s", why);
		fibril_warn(dp->m, "endpoint %u (%s): %s", ep->id, ep->host_ifname, why);
	}
	return rc;
}

static void recheck_tick(struct fibril_timer *t, void *ud)
{
	struct datapath *dp = ud;
	(void)t;
	dp->recheck_timer = NULL;
	double t0 = now_ms();
	bool failed = false;
	for (struct dp_ep *e = dp->eps; e && dp->recheck_pending; e = e->next) {
		if (!e->recheck)
			continue;
		if (now_ms() - t0 >= RECHECK_SLICE_MS)
			break;
		e->recheck = false;
		dp->recheck_pending--;
		dp->rechecked++;
		if (reapply(dp, e) < 0) {
			dp->recheck_failed++;
			failed = true;
		}
	}
	if (failed)
		dp_eps_health(dp);
	if (dp->recheck_pending) {
		if (recheck_arm(dp) == 0)
			return;
		/* no timer: the rest now, whatever it costs the loop */
		for (struct dp_ep *e = dp->eps; e; e = e->next)
			if (e->recheck) {
				e->recheck = false;
				dp->rechecked++;
				if (reapply(dp, e) < 0)
					dp->recheck_failed++;
			}
		dp->recheck_pending = 0;
		dp_eps_health(dp);
	}
	fibril_info(dp->m, "re-applied the filters and routes of %zu restored endpoints in %.1f ms "
			   "(%zu failed)", dp->rechecked, now_ms() - dp->recheck_t0, dp->recheck_failed);
	dp->recheck_started = false; /* a later adoption counts on its own */
	dp->rechecked = dp->recheck_failed = 0;
}

void dp_recheck_forget(struct datapath *dp, struct dp_ep *e)
{
	if (e && e->recheck) {
		e->recheck = false;
		dp->recheck_pending--;
	}
}

void dp_recheck_stop(struct datapath *dp)
{
	if (dp->recheck_timer)
		fibril_timer_cancel(dp->recheck_timer);
	dp->recheck_timer = NULL;
	dp->recheck_pending = 0;
	dp->recheck_started = false;
	dp->rechecked = dp->recheck_failed = 0;
}
