/* modules/ipam-cluster-pool/cluster_pool.c - the ipam-cluster-pool module:
 * Cilium's cluster-pool IPAM mode. Each node gets its own CIDR(s) of the
 * cluster pool, claimed through the kvstore when one is loaded (claim.c),
 * else as Leases through the API server when the k8s capability is there and
 * node-cidr is unset (CRD mode, claim_k8s.c), or pinned by node-cidr; pod addresses come from that CIDR and are recorded
 * on disk before they are returned (the SDK's allocation store, ops.c), so
 * they survive a crash and are restored in start, before the API serves.
 *
 * Restored allocations outside the node CIDR (the CIDR changed: node-cidr
 * edited, or another node took ours while this one was down past its
 * lease) are kept on disk and counted as "stale": they are logged, shown in
 * the summary, never handed out or listed, and a release of the address or
 * of the owner removes them. Keeping them means that should the old CIDR
 * come back, none of its addresses can be handed out twice. */
#include "cluster_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cp_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool all_settled(const struct cp *cp)
{
	for (int i = 0; i < CP_NFAM; i++) {
		const struct cp_fam *f = &cp->fam[i];
		if (f->enabled && f->claim != CP_CLAIM_HELD && f->claim != CP_CLAIM_EXHAUSTED)
			return false;
	}
	return true;
}

void cp_settled(struct cp *cp)
{
	if (!cp->start_pending || !all_settled(cp))
		return;
	cp->start_pending = false;
	if (cp->in_start)
		cp->start_done = true; /* start has not returned yet: it returns 0 */
	else
		fibril_module_start_done(cp->m, 0);
}

/* "12/254 allocated from 10.0.3.0/24" for one family, or why there is none. */
static int family_text(const struct cp_fam *f, bool first, char *buf, size_t len)
{
	char c[FIBRIL_IPAM_CIDR_LEN];
	switch (f->claim) {
	case CP_CLAIM_HELD:
		break;
	case CP_CLAIM_NONE:
		return snprintf(buf, len, "claiming an IPv%d node CIDR", f->family);
	default:
		return snprintf(buf, len, "%s", f->why);
	}
	struct fibril_ipamstore_family info = {.sz = sizeof(info)};
	fibril_ipamstore_family(f->cp->store, f->family, &info);
	int n = snprintf(buf, len, "%llu/%llu %sfrom %s", (unsigned long long)info.used,
			 (unsigned long long)info.capacity, first ? "allocated " : "",
			 fibril_cidr_format(&f->node, c, sizeof(c)));
	if (info.stale && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, " (%llu stale outside it)",
			      (unsigned long long)info.stale);
	return n;
}

int cp_summary_text(struct cp *cp, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < CP_NFAM && off < len; i++) {
		if (!cp->fam[i].enabled)
			continue;
		if (off)
			off += (size_t)snprintf(buf + off, len - off, ", ");
		if (off < len) {
			int n = family_text(&cp->fam[i], off == 0, buf + off, len - off);
			off += n > 0 ? (size_t)n : 0;
		}
	}
	return (int)(off < len ? off : len - 1);
}

void cp_report_pool(struct cp *cp)
{
	for (int i = 0; i < CP_NFAM; i++) {
		const struct cp_fam *f = &cp->fam[i];
		if (f->enabled && (f->claim == CP_CLAIM_EXHAUSTED || f->claim == CP_CLAIM_LOST)) {
			fibril_health_report(cp->m, "pool", FIBRIL_HEALTH_DEGRADED, "%s", f->why);
			return;
		}
	}
	char cidrs[2 * FIBRIL_IPAM_CIDR_LEN + 4] = "";
	for (int i = 0; i < CP_NFAM; i++) {
		const struct cp_fam *f = &cp->fam[i];
		char c[FIBRIL_IPAM_CIDR_LEN];
		if (!f->enabled)
			continue;
		if (f->claim != CP_CLAIM_HELD) {
			fibril_health_report(cp->m, "pool", FIBRIL_HEALTH_DEGRADED,
					     "claiming an IPv%d node CIDR", f->family);
			return;
		}
		size_t off = strlen(cidrs);
		snprintf(cidrs + off, sizeof(cidrs) - off, "%s%s", off ? ", " : "",
			 fibril_cidr_format(&f->node, c, sizeof(c)));
	}
	fibril_health_report(cp->m, "pool", FIBRIL_HEALTH_OK, "allocating from %s", cidrs);
}

static void cp_fini(struct fibril_module *m);

static int cp_init(struct fibril_module *m)
{
	struct cp *cp = calloc(1, sizeof(*cp));
	if (!cp)
		return -ENOMEM;
	cp->m = m;
	for (int i = 0; i < CP_NFAM; i++) {
		cp->fam[i].cp = cp;
		cp->fam[i].family = i ? 6 : 4;
	}
	fibril_module_set_data(m, cp);
	char why[CP_WHY_LEN];
	int rc = cp_config_read(cp, why, sizeof(why));
	if (rc)
		fibril_module_set_error(m, "%s", why);
	if (rc == 0)
		rc = cp_store_provide(cp);
	if (rc == 0)
		rc = cp_claim_subscribe(cp);
	if (rc) /* the host does not call fini after a failed init */
		cp_fini(m);
	return rc;
}

/* No kvstore: the node CIDRs are node-cidr's. */
static int start_static(struct cp *cp)
{
	for (int i = 0; i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		if (!f->enabled)
			continue;
		int rc = cp_fam_set_node(f, &f->pin);
		if (rc) {
			fibril_module_set_error(cp->m, "cannot allocate from node-cidr: %s", strerror(-rc));
			return rc;
		}
		f->claim = CP_CLAIM_HELD;
	}
	cp_report_pool(cp);
	char sum[512];
	cp_summary_text(cp, sum, sizeof(sum));
	fibril_info(cp->m, "node-cidr (no kvstore): %s", sum);
	return 0;
}

static int start_kvstore(struct cp *cp)
{
	cp->start_pending = true;
	cp->in_start = true;
	int rc = cp_claim_start(cp);
	cp->in_start = false;
	if (rc)
		return rc;
	return cp->start_done ? 0 : FIBRIL_START_PENDING;
}

/* CRD mode: no kvstore, no node-cidr, and the k8s capability with writes. */
static void find_k8s(struct cp *cp)
{
	void *ctx = NULL;
	const struct fibril_k8s_ops *k8s = (const struct fibril_k8s_ops *)fibril_service_lookup(
		cp->m, FIBRIL_K8S_CAPABILITY, FIBRIL_K8S_VERSION, &ctx);
	if (cp->kv || cp->fam[0].pinned || cp->fam[1].pinned || !k8s ||
	    !FIBRIL_SERVICE_HAS(k8s, request) || !k8s->request)
		return;
	cp->k8s = k8s;
	cp->k8sctx = ctx;
	const char *node = k8s->node_name ? k8s->node_name(ctx) : NULL;
	if (node && *node && strcmp(node, cp->node_name) != 0) { /* the GC judges by Node names */
		fibril_info(cp->m, "node CIDR claims made under the Kubernetes node name %s (not %s)",
			    node, cp->node_name);
		snprintf(cp->node_name, sizeof(cp->node_name), "%s", node);
	}
}

static int start_k8s(struct cp *cp)
{
	cp->start_pending = true;
	cp->in_start = true;
	int rc = cp_k8s_start(cp);
	cp->in_start = false;
	if (rc)
		return rc;
	return cp->start_done ? 0 : FIBRIL_START_PENDING;
}

static int cp_start(struct fibril_module *m)
{
	struct cp *cp = fibril_module_data(m);
	void *ctx = NULL;
	cp->kv = (const struct fibril_kvstore_ops *)fibril_service_lookup(
		m, FIBRIL_KVSTORE_CAPABILITY, FIBRIL_KVSTORE_VERSION, &ctx);
	cp->kvctx = ctx;
	find_k8s(cp);
	char why[CP_WHY_LEN];
	if (cp_config_mode_check(cp, why, sizeof(why))) {
		fibril_module_set_error(m, "%s", why);
		return -EINVAL;
	}
	int rc = cp_store_open(cp, why, sizeof(why));
	if (rc) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	fibril_info(m, "node %s, %s", cp->node_name,
		    cp->kv    ? "node CIDRs claimed through the kvstore"
		    : cp->k8s ? "node CIDRs claimed as Leases through the API server (no kvstore)"
			      : "node-cidr, no kvstore");
	return cp->kv ? start_kvstore(cp) : cp->k8s ? start_k8s(cp) : start_static(cp);
}

static void cp_stop(struct fibril_module *m)
{
	struct cp *cp = fibril_module_data(m);
	cp->stopping = true;
	cp_claim_stop(cp);
}

static void cp_fini(struct fibril_module *m)
{
	struct cp *cp = fibril_module_data(m);
	if (!cp)
		return;
	for (int i = 0; i < CP_NFAM; i++)
		free(cp->fam[i].taken);
	fibril_ipamstore_free(cp->store);
	free(cp);
	fibril_module_set_data(m, NULL);
}

static int cp_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct cp *cp = fibril_module_data(m);
	if (!cp || !len)
		return -EINVAL;
	return cp_summary_text(cp, buf, len);
}

FIBRIL_MODULE(.name = CP_MODULE, .version = "1.0.0",
	      .description = "cluster-pool IPAM: per-node CIDRs of a cluster pool, claimed "
			     "through the kvstore or the API server, or pinned; pod addresses persisted on disk",
	      .provides = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_KVSTORE_CAPABILITY, FIBRIL_K8S_CAPABILITY),
	      .config_keys = cp_config_keys,
	      .init = cp_init, .start = cp_start, .stop = cp_stop, .fini = cp_fini,
	      .summary = cp_summary);
