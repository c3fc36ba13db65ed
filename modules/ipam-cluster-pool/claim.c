/* modules/ipam-cluster-pool/claim.c - the node CIDR claim through the
 * kvstore. Each family's CIDR is the key ipam/cluster-pool/<family>/<cidr
 * with / as _> holding the node name, put under the module's lease:
 *   1. read every claim of the family (one range get);
 *   2. pick: node-cidr if pinned; else a claim already ours (a restart);
 *      else the CIDR of the last run (state file) if nobody holds it; else
 *      the lowest subnet index nobody holds;
 *   3. one transaction settles races: compare create_revision == 0 (free)
 *      or value == node (ours) -> put with our lease, else get the key;
 *      losing moves on to the next free index, none left = exhausted
 *      (retried every claim-retry).
 * Once held, a CIDR never moves while the agent runs: a lost lease or a
 * reconnect re-claims the same one (value == node or absent); if another
 * node took it meanwhile, allocations stop (-EAGAIN) and health says so. */
#include "cluster_pool.h"
#include "grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_ROOT "ipam/cluster-pool/"
#define MAX_ROUNDS 64 /* transactions per attempt before waiting for the retry */

static void kick(struct cp *cp);
static void claim_txn(struct cp_fam *f, bool ours);

static bool running(const struct cp *cp)
{
	return (cp->kv || cp->k8s) && !cp->stopping;
}

void cp_claim_key(const struct cp_fam *f, const struct fibril_cidr *c, char *buf, size_t len)
{
	if (f->cp->k8s) {
		int n = snprintf(buf, len, FIBRIL_K8S_PODCIDR_CLAIM_NS "/");
		if (n > 0 && (size_t)n < len)
			cp_k8s_lease_name(f, c, buf + n, len - (size_t)n);
		return;
	}
	char text[FIBRIL_IPAM_CIDR_LEN];
	fibril_cidr_format(c, text, sizeof(text));
	char *slash = strchr(text, '/');
	if (slash)
		*slash = '_';
	snprintf(buf, len, KEY_ROOT "%d/%s", f->family, text);
}

static bool key_cidr(const struct cp_fam *f, const char *key, struct fibril_cidr *out)
{
	char prefix[32], text[FIBRIL_IPAM_CIDR_LEN];
	int n = snprintf(prefix, sizeof(prefix), KEY_ROOT "%d/", f->family);
	if (strncmp(key, prefix, (size_t)n) != 0 ||
	    snprintf(text, sizeof(text), "%s", key + n) >= (int)sizeof(text))
		return false;
	char *us = strrchr(text, '_');
	if (us)
		*us = '/';
	return us && fibril_cidr_parse(text, out) == 0 && out->ip.family == f->family;
}

/* The subnet index of c in the family's pool, or false. */
bool cp_cidr_index(const struct cp_fam *f, const struct fibril_cidr *c, uint64_t *idx)
{
	if (!f->have_pool || c->prefix_len != f->mask || !fibril_cidr_contains(&f->pool, &c->ip))
		return false;
	uint64_t v = 0;
	for (unsigned b = f->pool.prefix_len; b < f->mask; b++)
		v = (v << 1) | ((c->ip.bytes[b / 8] >> (7 - b % 8)) & 1u);
	*idx = v;
	return true;
}

bool cp_cidr_equal(const struct fibril_cidr *a, const struct fibril_cidr *b)
{
	return a->prefix_len == b->prefix_len && a->ip.family == b->ip.family &&
	       memcmp(a->ip.bytes, b->ip.bytes, a->ip.family == 6 ? 16 : 4) == 0;
}

/* ---- the taken set: sorted subnet indexes other nodes hold ---------------- */

void cp_taken_add(struct cp_fam *f, uint64_t idx)
{
	size_t i = 0;
	while (i < f->ntaken && f->taken[i] < idx)
		i++;
	if (i < f->ntaken && f->taken[i] == idx)
		return;
	uint64_t *t = mod_grow(f->taken, f->ntaken, &f->taken_cap, sizeof(*t), 64);
	if (!t)
		return; /* the transaction still refuses a taken CIDR */
	f->taken = t;
	memmove(&f->taken[i + 1], &f->taken[i], (f->ntaken - i) * sizeof(*f->taken));
	f->taken[i] = idx;
	f->ntaken++;
}

bool cp_is_taken(const struct cp_fam *f, uint64_t idx)
{
	for (size_t i = 0; i < f->ntaken && f->taken[i] <= idx; i++)
		if (f->taken[i] == idx)
			return true;
	return false;
}

bool cp_first_free(const struct cp_fam *f, struct fibril_cidr *out)
{
	uint64_t idx = 0;
	for (size_t j = 0; j < f->ntaken && f->taken[j] <= idx; j++)
		if (f->taken[j] == idx)
			idx++;
	return idx < f->nsubnets && fibril_cidr_subnet(&f->pool, f->mask, idx, out) == 0;
}

/* ---- outcomes --------------------------------------------------------------- */

static void retry_fire(struct fibril_timer *t, void *ud)
{
	struct cp *cp = ud;
	(void)t;
	cp->retry = NULL;
	kick(cp);
}

static void schedule_retry(struct cp *cp)
{
	if (running(cp) && !cp->retry)
		cp->retry = fibril_timer_add(cp->m, cp->retry_ms, 0, retry_fire, cp);
}

/* Health of the "kvstore" component from the families' state. */
static void report_kv(struct cp *cp)
{
	const char *comp = cp->k8s ? "k8s" : "kvstore";
	for (int i = 0; i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		if (f->enabled && f->why[0] && f->claim != CP_CLAIM_EXHAUSTED) {
			fibril_health_report(cp->m, comp, FIBRIL_HEALTH_DEGRADED, "%s", f->why);
			return;
		}
	}
	if (cp->k8s)
		fibril_health_report(cp->m, comp, FIBRIL_HEALTH_OK,
				     "node CIDR claims held as Leases in " FIBRIL_K8S_PODCIDR_CLAIM_NS);
	else if (!cp->connected)
		fibril_health_report(cp->m, "kvstore", FIBRIL_HEALTH_DEGRADED,
				     "kvstore disconnected: node CIDR claims unverified until it is back");
	else
		fibril_health_report(cp->m, "kvstore", FIBRIL_HEALTH_OK,
				     "node CIDR claims held under lease %lld", (long long)cp->lease);
}

static void report(struct cp *cp)
{
	report_kv(cp);
	cp_report_pool(cp);
}

void cp_claim_fail(struct cp_fam *f, int err, const char *what)
{
	struct cp *cp = f->cp;
	f->busy = false;
	char why[CP_WHY_LEN];
	snprintf(why, sizeof(why), "IPv%d node CIDR claim: %s: %s; retrying every %llu ms",
		 f->family, what, strerror(-err), (unsigned long long)cp->retry_ms);
	if (strcmp(why, f->why) != 0) /* log changes only */
		fibril_warn(cp->m, "%s", why);
	snprintf(f->why, sizeof(f->why), "%s", why);
	report(cp);
	schedule_retry(cp);
}

/* A transaction failed otherwise than by the store being unreachable: maybe
 * the lease is gone, so every claim is put under a fresh one. The old lease
 * (if alive) then holds nothing; it is not revoked, as that would drop a
 * claim still under it before the new put. */
static void lease_suspect(struct cp *cp, int err)
{
	if (err == -ENOTCONN || err == -ETIMEDOUT || !cp->lease)
		return;
	cp->lease = 0;
	for (int i = 0; i < CP_NFAM; i++)
		cp->fam[i].reclaim = cp->fam[i].have_node;
}

void cp_claim_exhausted(struct cp_fam *f, const char *fmt_other)
{
	struct cp *cp = f->cp;
	char pool[FIBRIL_IPAM_CIDR_LEN], why[CP_WHY_LEN];
	f->busy = false;
	if (fmt_other) {
		snprintf(why, sizeof(why), "%s", fmt_other);
	} else {
		fibril_cidr_format(&f->pool, pool, sizeof(pool));
		snprintf(why, sizeof(why), "no free node CIDR in %s with mask /%u: all %llu are taken",
			 pool, f->mask, (unsigned long long)f->nsubnets);
	}
	if (f->claim != CP_CLAIM_EXHAUSTED || strcmp(why, f->why) != 0) /* log changes only */
		fibril_warn(cp->m, "%s; retrying every %llu ms", why, (unsigned long long)cp->retry_ms);
	f->claim = CP_CLAIM_EXHAUSTED;
	snprintf(f->why, sizeof(f->why), "%s", why);
	report(cp);
	schedule_retry(cp);
	cp_settled(cp);
}

void cp_claim_lost(struct cp_fam *f, const char *holder)
{
	struct cp *cp = f->cp;
	char c[FIBRIL_IPAM_CIDR_LEN], why[CP_WHY_LEN];
	f->busy = false;
	f->claim = CP_CLAIM_LOST;
	snprintf(why, sizeof(why), "node CIDR %s is now claimed by %s: not allocating; "
		 "retrying every %llu ms (restart the agent to claim another)",
		 fibril_cidr_format(&f->node, c, sizeof(c)), holder, (unsigned long long)cp->retry_ms);
	if (strcmp(why, f->why) != 0) /* log changes only */
		fibril_error(cp->m, "%s", why);
	snprintf(f->why, sizeof(f->why), "%s", why);
	report(cp);
	schedule_retry(cp);
}

void cp_claim_held(struct cp_fam *f)
{
	struct cp *cp = f->cp;
	char c[FIBRIL_IPAM_CIDR_LEN], key[128];
	fibril_cidr_format(&f->cand, c, sizeof(c));
	cp_claim_key(f, &f->cand, key, sizeof(key));
	f->busy = false;
	if (f->have_node && cp_cidr_equal(&f->node, &f->cand)) {
		if ((f->claim != CP_CLAIM_HELD || f->why[0]) && cp->k8s)
			fibril_info(cp->m, "node CIDR %s re-claimed (Lease %s)", c, key);
		else if (f->claim != CP_CLAIM_HELD || f->why[0])
			fibril_info(cp->m, "node CIDR %s re-claimed under lease %lld", c,
				    (long long)cp->lease);
	} else {
		int rc = cp_fam_set_node(f, &f->cand);
		if (rc) {
			cp_claim_fail(f, rc, "creating the allocator");
			return;
		}
		if (cp->k8s)
			fibril_info(cp->m, "node CIDR %s claimed in %.3f ms (%s; Lease %s)", c,
				    cp_mono_ms() - f->claim_t0, f->cand_src ? f->cand_src : "?", key);
		else
			fibril_info(cp->m, "node CIDR %s claimed in %.3f ms (%s; key %s, lease %lld)",
				    c, cp_mono_ms() - f->claim_t0, f->cand_src ? f->cand_src : "?",
				    key, (long long)cp->lease);
	}
	f->claim = CP_CLAIM_HELD;
	f->reclaim = false;
	f->why[0] = '\0';
	report(cp);
	cp_settled(cp);
}

/* ---- the transaction ---------------------------------------------------------- */

void cp_claim_other_holds(struct cp_fam *f, const char *holder)
{
	struct cp *cp = f->cp;
	uint64_t idx;
	if (f->have_node) {
		cp_claim_lost(f, holder);
		return;
	}
	if (f->pinned) {
		char c[FIBRIL_IPAM_CIDR_LEN], why[CP_WHY_LEN];
		snprintf(why, sizeof(why), "node-cidr %s is claimed by %s",
			 fibril_cidr_format(&f->pin, c, sizeof(c)), holder);
		cp_claim_exhausted(f, why);
		return;
	}
	if (cp_cidr_index(f, &f->cand, &idx))
		cp_taken_add(f, idx);
	if (!cp_first_free(f, &f->cand)) {
		cp_claim_exhausted(f, NULL);
		return;
	}
	f->cand_src = "the first free one";
	if (cp->k8s)
		cp_k8s_next(f);
	else
		claim_txn(f, false);
}

static void on_txn(void *ud, int err, bool succeeded, const struct fibril_kv *kvs, size_t n,
		   int64_t revision)
{
	struct cp_fam *f = ud;
	(void)revision;
	f->busy = false;
	if (!running(f->cp) || err == -ECANCELED) /* stopping */
		return;
	if (err) {
		lease_suspect(f->cp, err);
		cp_claim_fail(f, err, "transaction");
		return;
	}
	if (succeeded) {
		cp_claim_held(f);
		return;
	}
	if (++f->rounds > MAX_ROUNDS) {
		f->rounds = 0;
		cp_claim_fail(f, -EAGAIN, "too many conflicting claims");
		return;
	}
	if (n == 0 || !kvs[0].value) /* gone meanwhile: claim it as free */
		claim_txn(f, false);
	else if (strcmp(kvs[0].value, f->cp->node_name) == 0)
		claim_txn(f, true);
	else
		cp_claim_other_holds(f, kvs[0].value);
}

/* Put f->cand under our lease if it is free (ours == false) or ours. */
static void claim_txn(struct cp_fam *f, bool ours)
{
	struct cp *cp = f->cp;
	char key[128];
	cp_claim_key(f, &f->cand, key, sizeof(key));
	struct fibril_kv_compare cmp = {.key = key};
	if (ours) {
		cmp.target = FIBRIL_KV_TARGET_VALUE;
		cmp.value = cp->node_name;
	} else {
		cmp.target = FIBRIL_KV_TARGET_CREATE;
		cmp.number = 0;
	}
	cmp.result = FIBRIL_KV_EQUAL;
	struct fibril_kv_op put = {.type = FIBRIL_KV_OP_PUT, .key = key, .value = cp->node_name,
				   .value_len = strlen(cp->node_name), .lease = cp->lease};
	struct fibril_kv_op get = {.type = FIBRIL_KV_OP_GET, .key = key};
	f->busy = true;
	int rc = cp->kv->txn(cp->kvctx, &cmp, 1, &put, 1, &get, 1, on_txn, f);
	if (rc)
		cp_claim_fail(f, rc, "transaction");
}

/* ---- choosing a candidate from every claim of the family ------------------------ */

/* Reads the claims: fills taken, returns the holder of `want` (or NULL) and
 * the best claim already ours in *mine. */
static const char *scan(struct cp_fam *f, const struct fibril_kv *kvs, size_t n,
			const struct fibril_cidr *want, struct fibril_cidr *mine, bool *have_mine)
{
	const char *holder = NULL;
	*have_mine = false;
	f->ntaken = 0;
	for (size_t i = 0; i < n; i++) {
		struct fibril_cidr c;
		uint64_t idx;
		if (!kvs[i].value || !key_cidr(f, kvs[i].key, &c))
			continue;
		bool ours = strcmp(kvs[i].value, f->cp->node_name) == 0;
		if (want && cp_cidr_equal(&c, want))
			holder = kvs[i].value;
		if (!ours && cp_cidr_index(f, &c, &idx))
			cp_taken_add(f, idx);
		if (ours && cp_cidr_index(f, &c, &idx) &&
		    (!*have_mine || (f->have_saved && cp_cidr_equal(&c, &f->saved)))) {
			*mine = c;
			*have_mine = true;
		}
	}
	return holder;
}

static bool saved_usable(const struct cp_fam *f)
{
	uint64_t idx;
	return f->have_saved && cp_cidr_index(f, &f->saved, &idx) && !cp_is_taken(f, idx);
}

static void on_scan(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	struct cp_fam *f = ud;
	(void)revision;
	f->busy = false;
	if (!running(f->cp) || err == -ECANCELED) /* stopping */
		return;
	if (err) {
		cp_claim_fail(f, err, "reading the claims");
		return;
	}
	struct fibril_cidr mine;
	bool have_mine;
	const char *holder = scan(f, kvs, n, f->pinned ? &f->pin : NULL, &mine, &have_mine);
	f->rounds = 0;
	if (f->pinned) {
		f->cand = f->pin;
		f->cand_src = "pinned by node-cidr";
		if (holder && strcmp(holder, f->cp->node_name) != 0)
			cp_claim_other_holds(f, holder);
		else
			claim_txn(f, holder != NULL);
	} else if (have_mine) {
		f->cand = mine;
		f->cand_src = "already claimed under this node's name";
		claim_txn(f, true);
	} else if (saved_usable(f)) {
		f->cand = f->saved;
		f->cand_src = "the last run's, from the state file";
		claim_txn(f, false);
	} else if (cp_first_free(f, &f->cand)) {
		f->cand_src = "the first free one";
		claim_txn(f, false);
	} else {
		cp_claim_exhausted(f, NULL);
	}
}

/* ---- driving ---------------------------------------------------------------------- */

static void step(struct cp_fam *f)
{
	struct cp *cp = f->cp;
	if (f->busy || (f->claim == CP_CLAIM_HELD && !f->reclaim))
		return;
	if (f->have_node) { /* never move a held CIDR: re-claim it */
		f->cand = f->node;
		f->rounds = 0;
		claim_txn(f, true);
		return;
	}
	char prefix[32];
	snprintf(prefix, sizeof(prefix), KEY_ROOT "%d/", f->family);
	f->busy = true;
	int rc = cp->kv->get(cp->kvctx, prefix, true, on_scan, f);
	if (rc)
		cp_claim_fail(f, rc, "reading the claims");
}

static void on_lease(void *ud, int err, int64_t lease, int64_t ttl)
{
	struct cp *cp = ud;
	(void)ttl;
	cp->lease_pending = false;
	if (!running(cp) || err == -ECANCELED) /* stopping */
		return;
	if (err) {
		for (int i = 0; i < CP_NFAM; i++)
			if (cp->fam[i].enabled)
				snprintf(cp->fam[i].why, sizeof(cp->fam[i].why),
					 "node CIDR claim: lease grant: %s; retrying every %llu ms",
					 strerror(-err), (unsigned long long)cp->retry_ms);
		fibril_warn(cp->m, "lease grant: %s", strerror(-err));
		report(cp);
		schedule_retry(cp);
		return;
	}
	cp->lease = lease;
	kick(cp);
}

void cp_claim_kick(struct cp *cp)
{
	kick(cp);
}

static void kick(struct cp *cp)
{
	if (!running(cp))
		return;
	if (cp->k8s) {
		cp_k8s_kick(cp);
		return;
	}
	if (!cp->lease) {
		if (cp->lease_pending)
			return;
		cp->lease_pending = true;
		int rc = cp->kv->lease_grant(cp->kvctx, cp->lease_ttl_s, on_lease, cp);
		if (rc)
			on_lease(cp, rc, 0, 0);
		return;
	}
	for (int i = 0; i < CP_NFAM; i++)
		if (cp->fam[i].enabled)
			step(&cp->fam[i]);
}

/* ---- kvstore events ------------------------------------------------------------------ */

static void reclaim_all(struct cp *cp, bool lease_gone)
{
	for (int i = 0; i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		if (!f->have_node)
			continue;
		f->reclaim = true;
		if (lease_gone && f->claim == CP_CLAIM_HELD) {
			f->claim = CP_CLAIM_LOST; /* the key is gone: no allocations until it is back */
			snprintf(f->why, sizeof(f->why), "lease lost: re-claiming the node CIDR");
		}
	}
}

static int on_lease_lost(const struct fibril_event *ev, void *ud)
{
	struct cp *cp = ud;
	const struct fibril_kvstore_event *e = ev->payload;
	if (!running(cp) || ev->payload_len < FIBRIL_OFFSETOFEND(struct fibril_kvstore_event, lease) ||
	    e->sz < FIBRIL_OFFSETOFEND(struct fibril_kvstore_event, lease))
		return 0;
	if (e->lease && e->lease != cp->lease)
		return 0;
	fibril_warn(cp->m, "lease %lld lost: re-claiming the node CIDR(s)", (long long)e->lease);
	cp->lease = 0;
	reclaim_all(cp, true);
	report(cp);
	kick(cp);
	return 0;
}

static int on_connected(const struct fibril_event *ev, void *ud)
{
	struct cp *cp = ud;
	(void)ev;
	if (!running(cp))
		return 0;
	cp->connected = true;
	reclaim_all(cp, false);
	report(cp);
	kick(cp);
	return 0;
}

static int on_disconnected(const struct fibril_event *ev, void *ud)
{
	struct cp *cp = ud;
	(void)ev;
	if (!running(cp))
		return 0;
	cp->connected = false;
	report(cp);
	return 0;
}

int cp_claim_subscribe(struct cp *cp)
{
	static const char *const topics[] = {FIBRIL_KVSTORE_TOPIC_LEASE_LOST,
					     FIBRIL_KVSTORE_TOPIC_CONNECTED,
					     FIBRIL_KVSTORE_TOPIC_DISCONNECTED};
	static const fibril_event_fn fns[] = {on_lease_lost, on_connected, on_disconnected};
	for (int i = 0; i < 3; i++) {
		cp->subs[i] = fibril_bus_subscribe(cp->m, topics[i], 1, fns[i], cp);
		if (!cp->subs[i])
			return -errno;
	}
	return 0;
}

int cp_claim_start(struct cp *cp)
{
	cp->connected = !cp->kv->connected || cp->kv->connected(cp->kvctx);
	for (int i = 0; i < CP_NFAM; i++)
		cp->fam[i].claim_t0 = cp_mono_ms();
	kick(cp);
	return 0;
}

void cp_claim_stop(struct cp *cp)
{
	if (cp->retry)
		fibril_timer_cancel(cp->retry);
	cp->retry = NULL;
}
