/* modules/policy/policy.c - the policy module (capability "policy"): a
 * repository of CiliumNetworkPolicies, CiliumClusterwideNetworkPolicies and
 * Kubernetes NetworkPolicies fed by the API and by the k8s module's
 * informers (bus events k8s.networkpolicies, k8s.ciliumnetworkpolicies,
 * k8s.ciliumclusterwidenetworkpolicies), the local endpoints and their
 * labels (from the endpoint module's bus events) with their namespace's
 * labels and their pod's named ports (k8s caches), CIDR
 * identities in the ipcache, and each endpoint's resolved L3/L4 policy
 * programmed into the datapath's policy map (<fibril/datapath.h> v2).
 *
 * A selector cache holds each distinct label selector (subjects and peers
 * of every rule) with the identities it selects now, updated incrementally
 * as endpoints and the cluster's identities appear, change or go. A change re-resolves only the
 * endpoints it can affect: those a changed policy's old or new version
 * selects, the endpoint that changed, and those selected by a rule whose
 * peer selectors gained or lost an identity (a new or released CIDR
 * identity, or the module's start, resolves every endpoint). Each
 * re-resolved endpoint's entries are compared with what is in place and
 * only the difference is written: entries that appear are written before
 * enforcement is switched on, entries that go are removed after, so no
 * window opens more than either the old or the new policy allows.
 *
 * Each rule (an element of ingress / egress / ingressDeny / egressDeny)
 * has a stable ID, saved with the policies; every map entry carries the ID
 * of the rule it comes from, so the datapath's verdict and drop events name
 * it (rule_lookup in the capability, for hubble-lite).
 *
 *   GET    /v1/policy              revision, policies, endpoints, counters
 *   PUT    /v1/policy              import (a CNP, a list, or {"items": []})
 *   DELETE /v1/policy/{name}       one (?namespace=NS for a namespaced one)
 *   DELETE /v1/policy              every policy
 *   GET    /v1/policy/trace        ?src=&dst=&dport=N/PROTO: which rule allows or denies
 *   GET    /v1/policy/selectors    each distinct selector, its users and identities */
#include "grow.h"
#include "policy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>

#include <fibril/fibril.h>
#include <fibril/k8s.h>
#include <fibril/policy.h>
#include <json-c/json.h>

#define POL_MODULE "policy"
#define POL_CIDR_IDENTITY_BASE (1u << 24) /* local CIDR identities, as Cilium */
#define POL_EP_MAX 65536

struct pol_entry {
	uint32_t identity;
	uint8_t dir; /* FIBRIL_DATAPATH_* */
	uint8_t proto;
	uint8_t bits;
	uint8_t deny;
	uint16_t port;
	uint32_t rule; /* the rule it comes from (struct pol_rule_rec), 0: unknown */
};

struct pol_named_port {
	char name[16];
	uint8_t proto;
	uint16_t port;
};

struct pol_ep {
	uint16_t id;
	uint32_t identity;
	char *labels;
	char *match_labels; /* labels + its namespace's (POL_NS_LABELS_PREFIX) */
	char pod_ns[64], pod_name[254];
	bool has_ipv4, has_ipv6;
	struct in_addr ipv4;
	struct in6_addr ipv6;
	struct pol_named_port *ports; /* its pod's container ports with a name */
	size_t nports;
	bool ingress, egress;     /* enforced, as in the datapath */
	uint32_t revision;
	struct pol_entry *entries; /* in the datapath, sorted */
	size_t nentries;
	bool dirty; /* to be resolved again at the next update */
};

/* One distinct selector of the cache and the identities it selects (with
 * how many local endpoints of each it matches). */
struct sel_id {
	uint32_t identity;
	uint32_t endpoints;
};

struct sel_entry {
	char *key; /* selector_text(): kubectl's form and the namespace it is limited to */
	struct pol_selector sel; /* a copy (the users' may go first) */
	char ns[POL_NS_MAX];
	size_t users; /* rule subjects and peers that use it */
	struct sel_id *ids;
	size_t nids, cap;
	uint64_t changed; /* the update generation its identity set last changed in */
};

/* An identity of the cluster that other nodes' pods may hold (from the
 * endpoint module's FIBRIL_ENDPOINT_TOPIC_IDENTITY_* events): matched by
 * peer selectors as a local endpoint is. */
struct pol_rid {
	uint32_t identity;
	char *labels;
	char *match_labels; /* labels + its namespace's */
};

/* One rule of the repository and its stable ID: an element of a policy's
 * ingress / egress / ingressDeny / egressDeny (of spec, or specs[spec]),
 * known by the policy's source, kind, namespace and name, the section and
 * the element's index. IDs are handed out in increasing order and never
 * reused; the table is saved with the policies, so a rule keeps its ID
 * across updates of its policy and across restarts (the map entries in
 * place keep naming the right rule). */
struct pol_rule_rec {
	uint32_t id;
	uint32_t refs; /* peers of the policies in the repository that carry it */
	uint32_t hash;
	bool from_k8s, ingress, deny;
	uint8_t kind; /* enum pol_kind */
	uint32_t spec, index;
	char ns[POL_NS_MAX];
	char name[POL_NAME_MAX];
};

struct pol_cidr_id {
	struct pol_cidr cidr;
	uint32_t identity;
	bool used; /* marked during a recompute */
};

struct pol_state {
	struct fibril_module *m;
	struct fibril_policy_ops ops;
	const struct fibril_datapath_ops *dp;
	void *dp_ctx;
	const struct fibril_endpoint_ops *epops;
	void *ep_ctx;
	const struct fibril_k8s_ops *k8s;
	void *k8s_ctx;
	bool k8s_synced;
	bool started;
	struct pol_policy **pols;
	size_t npols;
	uint64_t revision;
	struct pol_ep **eps; /* by ID */
	struct pol_rid *rids; /* the cluster's identities, sorted by number */
	size_t nrids, rids_cap;
	size_t ep_hi; /* above the highest ID seen (the loops over eps stop there) */
	struct pol_cidr_id *cidrs;
	size_t ncidrs;
	uint32_t next_cidr_id;
	struct pol_rule_rec *rules; /* the rule IDs, sorted by ID */
	size_t nrules, rules_cap;
	uint32_t next_rule_id;
	struct sel_entry **sels; /* the selector cache */
	size_t nsels;
	uint64_t sel_gen;
	bool full; /* the next update resolves every endpoint */
	/* counters */
	uint64_t imports, refused, deletes, recomputes, map_writes, map_removes, map_errors;
	uint64_t incrementals, resolutions;
	uint64_t rid_updates; /* cluster identities that came, changed or went */
	uint64_t last_update_us; /* how long the last update took, resolving last_update_eps */
	uint64_t last_update_eps;
	uint64_t k8s_applied, k8s_invalid, k8s_deleted, k8s_missed;
	struct fibril_metric *m_k8s_invalid;
	char last_error[256];
	int dirfd; /* <state-dir>/policy, -1 when none */
};

#define POL_STATE_FILE "policies.json"

/* ---- entries ---------------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b)
{
	const struct pol_entry *x = a, *y = b;
#define CMP(f) \
	if (x->f != y->f) \
		return x->f < y->f ? -1 : 1;
	CMP(dir)
	CMP(identity)
	CMP(proto)
	CMP(bits)
	CMP(port)
	CMP(deny)
	CMP(rule)
#undef CMP
	return 0;
}

static bool same_key(const struct pol_entry *x, const struct pol_entry *y)
{
	return x->dir == y->dir && x->identity == y->identity && x->proto == y->proto &&
	       x->bits == y->bits && x->port == y->port;
}

struct entry_vec {
	struct pol_entry *v;
	size_t n, cap;
	bool oom;
};

static void vec_add(struct entry_vec *vec, struct pol_entry e)
{
	struct pol_entry *n = mod_grow(vec->v, vec->n, &vec->cap, sizeof(*n), 32);
	if (!n) {
		vec->oom = true;
		return;
	}
	vec->v = n;
	vec->v[vec->n++] = e;
}

struct ids {
	uint32_t *v;
	size_t n, cap;
};

static void ids_add(struct ids *s, uint32_t id)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == id)
			return;
	uint32_t *n = mod_grow(s->v, s->n, &s->cap, sizeof(*n), 16);
	if (!n)
		return;
	s->v = n;
	s->v[s->n++] = id;
}

/* ---- CIDR identities ------------------------------------------------------------- */

static bool cidr_eq(const struct pol_cidr *a, const struct pol_cidr *b)
{
	return a->family == b->family && a->plen == b->plen && !memcmp(a->addr, b->addr, 16);
}

static bool cidr_within(const struct pol_cidr *inner, const struct pol_cidr *outer)
{
	if (inner->family != outer->family || inner->plen < outer->plen)
		return false;
	for (unsigned b = 0; b < outer->plen; b++) {
		uint8_t m = (uint8_t)(0x80u >> (b % 8));
		if ((inner->addr[b / 8] & m) != (outer->addr[b / 8] & m))
			return false;
	}
	return true;
}

/* Mark (or allocate, writing the ipcache) the identity of one prefix. */
static bool cidr_use(struct pol_state *st, const struct pol_cidr *c)
{
	if (c->plen == 0)
		return false; /* 0.0.0.0/0 and ::/0 are world already */
	for (size_t i = 0; i < st->ncidrs; i++)
		if (cidr_eq(&st->cidrs[i].cidr, c)) {
			st->cidrs[i].used = true;
			return false;
		}
	struct pol_cidr_id *n = realloc(st->cidrs, (st->ncidrs + 1) * sizeof(*n));
	if (!n)
		return false;
	st->cidrs = n;
	struct pol_cidr_id *e = &st->cidrs[st->ncidrs++];
	e->cidr = *c;
	e->identity = POL_CIDR_IDENTITY_BASE + st->next_cidr_id++;
	e->used = true;
	char err[256] = "";
	if (st->dp && st->dp->ipcache_upsert(st->dp_ctx, c->family, c->addr, c->plen, e->identity,
					     err, sizeof(err)) < 0) {
		st->map_errors++;
		fibril_warn(st->m, "ipcache: %s", err);
	}
	return true;
}

/* Mark the prefixes the policies name; true when the set of CIDR
 * identities changes (one allocated now, or one no longer used). */
static bool cidrs_collect(struct pol_state *st)
{
	bool changed = false;
	for (size_t i = 0; i < st->ncidrs; i++)
		st->cidrs[i].used = false;
	for (size_t p = 0; p < st->npols; p++)
		for (size_t r = 0; r < st->pols[p]->nrules; r++) {
			const struct pol_rule *rule = &st->pols[p]->rules[r];
			for (size_t k = 0; k < rule->npeers; k++)
				for (size_t c = 0; c < rule->peers[k].ncidrs; c++) {
					const struct pol_cidr_rule *cr = &rule->peers[k].cidrs[c];
					changed |= cidr_use(st, &cr->cidr);
					for (size_t e = 0; e < cr->nexcept; e++)
						changed |= cidr_use(st, &cr->except[e]);
				}
		}
	for (size_t i = 0; i < st->ncidrs; i++)
		changed = changed || !st->cidrs[i].used;
	return changed;
}

/* After the entries are in place: forget the prefixes no policy names. */
static void cidrs_release(struct pol_state *st)
{
	size_t o = 0;
	for (size_t i = 0; i < st->ncidrs; i++) {
		if (st->cidrs[i].used) {
			st->cidrs[o++] = st->cidrs[i];
			continue;
		}
		char err[256] = "";
		const struct pol_cidr *c = &st->cidrs[i].cidr;
		if (st->dp && st->dp->ipcache_remove(st->dp_ctx, c->family, c->addr, c->plen, err,
						     sizeof(err)) < 0) {
			st->map_errors++;
			fibril_warn(st->m, "ipcache: %s", err);
		}
	}
	st->ncidrs = o;
}

/* ---- rule IDs ---------------------------------------------------------------------- */

static const char *section_name(bool ingress, bool deny)
{
	return ingress ? (deny ? "ingressDeny" : "ingress") : (deny ? "egressDeny" : "egress");
}

static uint32_t rule_hash(const struct pol_rule_rec *r)
{
	uint32_t h = 2166136261u;
#define MIX(b) (h = (h ^ (uint8_t)(b)) * 16777619u)
	MIX(r->from_k8s);
	MIX(r->ingress);
	MIX(r->deny);
	MIX(r->kind);
	for (int i = 0; i < 32; i += 8) {
		MIX(r->spec >> i);
		MIX(r->index >> i);
	}
	for (const char *c = r->ns; *c; c++)
		MIX(*c);
	MIX(0);
	for (const char *c = r->name; *c; c++)
		MIX(*c);
#undef MIX
	return h;
}

static bool rule_same(const struct pol_rule_rec *a, const struct pol_rule_rec *b)
{
	return a->hash == b->hash && a->from_k8s == b->from_k8s && a->ingress == b->ingress &&
	       a->deny == b->deny && a->kind == b->kind && a->spec == b->spec &&
	       a->index == b->index && !strcmp(a->ns, b->ns) && !strcmp(a->name, b->name);
}

/* In an array of n elements of size sz sorted by a uint32_t at offset
 * off: the first index whose key is >= k (n when none). */
static size_t u32_lower_bound(const void *base, size_t n, size_t sz, size_t off, uint32_t k)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		uint32_t v;
		memcpy(&v, (const char *)base + mid * sz + off, sizeof(v));
		if (v < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static size_t rule_at(const struct pol_state *st, uint32_t id)
{
	return u32_lower_bound(st->rules, st->nrules, sizeof(*st->rules),
			       offsetof(struct pol_rule_rec, id), id);
}

static const struct pol_rule_rec *rule_by_id(const struct pol_state *st, uint32_t id)
{
	size_t i = rule_at(st, id);
	return id && i < st->nrules && st->rules[i].id == id ? &st->rules[i] : NULL;
}

/* Put r (its id set, not in the table) in its place; false: out of memory. */
static bool rule_insert(struct pol_state *st, const struct pol_rule_rec *r)
{
	struct pol_rule_rec *v = mod_grow(st->rules, st->nrules, &st->rules_cap, sizeof(*v), 64);
	if (!v)
		return false;
	st->rules = v;
	size_t i = rule_at(st, r->id);
	memmove(&st->rules[i + 1], &st->rules[i], (st->nrules - i) * sizeof(*st->rules));
	st->rules[i] = *r;
	st->nrules++;
	if (r->id >= st->next_rule_id)
		st->next_rule_id = r->id + 1;
	return true;
}

static void rules_free(struct pol_state *st)
{
	free(st->rules);
	st->rules = NULL;
	st->nrules = st->rules_cap = 0;
}

/* The policy's rules get their IDs: the ones they had, or new ones. */
static void pol_take_ids(struct pol_state *st, struct pol_policy *pol)
{
	if (!st->next_rule_id)
		st->next_rule_id = 1;
	for (size_t r = 0; r < pol->nrules; r++)
		for (size_t k = 0; k < pol->rules[r].npeers; k++) {
			struct pol_peer *peer = &pol->rules[r].peers[k];
			struct pol_rule_rec key = {.from_k8s = pol->from_k8s, .ingress = peer->ingress,
						   .deny = peer->deny, .kind = (uint8_t)pol->kind,
						   .spec = (uint32_t)r, .index = peer->index};
			snprintf(key.ns, sizeof(key.ns), "%s", pol->ns);
			snprintf(key.name, sizeof(key.name), "%s", pol->name);
			key.hash = rule_hash(&key);
			peer->rule_id = 0;
			for (size_t i = 0; i < st->nrules && !peer->rule_id; i++)
				if (rule_same(&st->rules[i], &key)) {
					st->rules[i].refs++;
					peer->rule_id = st->rules[i].id;
				}
			if (peer->rule_id)
				continue;
			key.id = st->next_rule_id;
			key.refs = 1;
			if (rule_insert(st, &key))
				peer->rule_id = key.id;
		}
}

/* The policy leaves the repository: IDs nobody else carries go. */
static void pol_drop_ids(struct pol_state *st, struct pol_policy *pol)
{
	for (size_t r = 0; r < pol->nrules; r++)
		for (size_t k = 0; k < pol->rules[r].npeers; k++) {
			uint32_t id = pol->rules[r].peers[k].rule_id;
			size_t i = rule_at(st, id);
			if (!id || i >= st->nrules || st->rules[i].id != id || !st->rules[i].refs ||
			    --st->rules[i].refs)
				continue;
			memmove(&st->rules[i], &st->rules[i + 1],
				(st->nrules - i - 1) * sizeof(*st->rules));
			st->nrules--;
		}
}

/* After a restore: the saved IDs no policy took go. */
static void rules_prune(struct pol_state *st)
{
	size_t o = 0;
	for (size_t i = 0; i < st->nrules; i++)
		if (st->rules[i].refs)
			st->rules[o++] = st->rules[i];
	st->nrules = o;
}

static struct json_object *rule_json(const struct pol_rule_rec *r)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "rule_id", json_object_new_int64(r->id));
	json_object_object_add(o, "kind", json_object_new_string(pol_kind_name(r->kind)));
	json_object_object_add(o, "namespace", json_object_new_string(r->ns));
	json_object_object_add(o, "name", json_object_new_string(r->name));
	json_object_object_add(o, "source", json_object_new_string(r->from_k8s ? "k8s" : "api"));
	json_object_object_add(o, "direction", json_object_new_string(r->ingress ? "ingress" : "egress"));
	json_object_object_add(o, "section", json_object_new_string(section_name(r->ingress, r->deny)));
	json_object_object_add(o, "spec", json_object_new_int64(r->spec));
	json_object_object_add(o, "rule_index", json_object_new_int64(r->index));
	return o;
}

/* ---- resolving one endpoint's policy ------------------------------------------------ */

static const char *labels_namespace(const char *labels, char *buf, size_t len)
{
	const char *key = "io.kubernetes.pod.namespace=";
	buf[0] = '\0';
	for (const char *l = labels; l && *l;) {
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		const char *c = memchr(l, ':', n);
		const char *k = c ? c + 1 : l;
		size_t kl = strlen(key);
		if ((size_t)(l + n - k) > kl && !strncmp(k, key, kl)) {
			snprintf(buf, len, "%.*s", (int)(l + n - k - kl), k + kl);
			break;
		}
		l = end ? end + 1 : NULL;
	}
	return buf;
}

static const char *ep_namespace(const struct pol_ep *ep, char *buf, size_t len)
{
	return labels_namespace(ep->labels, buf, len);
}

/* Whether an address (family 4 or 6, network order) is inside c. */
static bool addr_in(int family, const void *addr, const struct pol_cidr *c)
{
	struct pol_cidr host = {.family = family, .plen = family == 4 ? 32 : 128};
	memcpy(host.addr, addr, family == 4 ? 4 : 16);
	return cidr_within(&host, c);
}

static bool ipblock_holds_addr(const struct pol_cidr_rule *cr, int family, const void *addr)
{
	if (cr->cidr.family != family || !addr_in(family, addr, &cr->cidr))
		return false;
	for (size_t e = 0; e < cr->nexcept; e++)
		if (addr_in(family, addr, &cr->except[e]))
			return false;
	return true;
}

/* An IPv4 block holds a pod by its IPv4 address, an IPv6 block by its IPv6 one. */
static bool ipblock_holds(const struct pol_cidr_rule *cr, const struct pol_ep *ep)
{
	return (ep->has_ipv4 && ipblock_holds_addr(cr, 4, &ep->ipv4)) ||
	       (ep->has_ipv6 && ipblock_holds_addr(cr, 6, &ep->ipv6));
}

/* A NetworkPolicy ipBlock also selects the local pods whose address it
 * holds (Kubernetes leaves pod addresses in an ipBlock to the
 * implementation; the datapath decides by identity, so an identity is
 * taken only when every local pod sharing it is inside the block). */
static void ipblock_pods(struct pol_state *st, const struct pol_cidr_rule *cr, struct ids *out)
{
	for (size_t i = 1; i < st->ep_hi; i++) {
		const struct pol_ep *ep = st->eps[i];
		if (!ep || !ipblock_holds(cr, ep))
			continue;
		bool all = true;
		for (size_t j = 1; j < st->ep_hi && all; j++)
			if (st->eps[j] && st->eps[j]->identity == ep->identity)
				all = ipblock_holds(cr, st->eps[j]);
		if (all)
			ids_add(out, ep->identity);
	}
}

static void peer_identities(struct pol_state *st, const struct pol_policy *pol,
			    const struct pol_peer *peer, struct ids *out)
{
	if (peer->all_peers) {
		ids_add(out, 0);
		return;
	}
	if (!peer->any_l3) {
		if (peer->nports)
			ids_add(out, 0); /* L4-only: every peer */
		return;
	}
	for (size_t s = 0; s < peer->nendpoints; s++) {
		const struct sel_entry *c = peer->endpoints[s].cached;
		for (size_t i = 0; c && i < c->nids; i++)
			ids_add(out, c->ids[i].identity);
		for (size_t i = 1; !c && i < st->ep_hi; i++) {
			const struct pol_ep *ep = st->eps[i];
			if (ep && pol_selector_match(&peer->endpoints[s], ep->match_labels, pol->ns))
				ids_add(out, ep->identity);
		}
		for (size_t i = 0; !c && i < st->nrids; i++) /* the cache holds them */
			if (pol_selector_match(&peer->endpoints[s], st->rids[i].match_labels, pol->ns))
				ids_add(out, st->rids[i].identity);
	}
	if (pol->kind == POL_KIND_KNP)
		for (size_t c = 0; c < peer->ncidrs; c++)
			ipblock_pods(st, &peer->cidrs[c], out);
	for (size_t c = 0; c < peer->ncidrs; c++) {
		const struct pol_cidr_rule *cr = &peer->cidrs[c];
		if (cr->cidr.plen == 0) {
			ids_add(out, FIBRIL_IDENTITY_WORLD);
			ids_add(out, cr->cidr.family == 4 ? FIBRIL_IDENTITY_WORLD_IPV4
							  : FIBRIL_IDENTITY_WORLD_IPV6);
		}
		for (size_t i = 0; i < st->ncidrs; i++) {
			const struct pol_cidr *k = &st->cidrs[i].cidr;
			if (!cidr_within(k, &cr->cidr))
				continue;
			bool excepted = false;
			for (size_t e = 0; e < cr->nexcept; e++)
				excepted = excepted || cidr_within(k, &cr->except[e]);
			if (!excepted)
				ids_add(out, st->cidrs[i].identity);
		}
	}
	uint32_t en = peer->entities;
	if (en & POL_ENT_ALL)
		ids_add(out, 0);
	if (en & POL_ENT_WORLD) {
		ids_add(out, FIBRIL_IDENTITY_WORLD);
		ids_add(out, FIBRIL_IDENTITY_WORLD_IPV4);
		ids_add(out, FIBRIL_IDENTITY_WORLD_IPV6);
		for (size_t i = 0; i < st->ncidrs; i++)
			ids_add(out, st->cidrs[i].identity);
	}
	if (en & (POL_ENT_HOST | POL_ENT_CLUSTER))
		ids_add(out, FIBRIL_IDENTITY_HOST);
	if (en & (POL_ENT_REMOTE_NODE | POL_ENT_CLUSTER))
		ids_add(out, FIBRIL_IDENTITY_REMOTE_NODE);
	if (en & (POL_ENT_HEALTH | POL_ENT_CLUSTER))
		ids_add(out, FIBRIL_IDENTITY_HEALTH);
	if (en & (POL_ENT_INIT | POL_ENT_CLUSTER))
		ids_add(out, FIBRIL_IDENTITY_INIT);
	if (en & (POL_ENT_KUBE_APISERVER | POL_ENT_CLUSTER))
		ids_add(out, FIBRIL_IDENTITY_KUBE_APISERVER);
	if (en & POL_ENT_CLUSTER) {
		for (size_t i = 1; i < st->ep_hi; i++)
			if (st->eps[i])
				ids_add(out, st->eps[i]->identity);
		for (size_t i = 0; i < st->nrids; i++)
			ids_add(out, st->rids[i].identity);
	}
}

struct block_ctx {
	struct entry_vec *vec;
	struct pol_entry tmpl;
};

static void add_block(uint16_t port, unsigned bits, void *ud)
{
	struct block_ctx *b = ud;
	struct pol_entry e = b->tmpl;
	e.port = port;
	e.bits = (uint8_t)bits;
	vec_add(b->vec, e);
}

/* The port a pod gives a name to (0: none). */
static uint16_t named_port(const struct pol_ep *ep, const char *name, uint8_t proto)
{
	for (size_t i = 0; ep && i < ep->nports; i++)
		if (ep->ports[i].proto == proto && !strcmp(ep->ports[i].name, name))
			return ep->ports[i].port;
	return 0;
}

/* A named port: ingress resolves it on the endpoint the rule selects;
 * egress on each peer pod (per identity: every local pod of it that has
 * the name; "every peer" becomes the pods that have it). */
static void named_entries(struct pol_state *st, const struct pol_ep *subject,
			  const struct pol_port *pp, struct pol_entry t, struct entry_vec *vec)
{
	t.proto = pp->proto;
	t.bits = 16;
	if (t.dir == FIBRIL_DATAPATH_INGRESS) {
		if ((t.port = named_port(subject, pp->name, pp->proto)))
			vec_add(vec, t);
		return;
	}
	uint32_t id = t.identity;
	for (size_t i = 1; i < st->ep_hi; i++) {
		const struct pol_ep *ep = st->eps[i];
		if (!ep || (id && ep->identity != id) || !(t.port = named_port(ep, pp->name, pp->proto)))
			continue;
		t.identity = ep->identity;
		vec_add(vec, t);
	}
}

static void peer_entries(struct pol_state *st, const struct pol_ep *subject,
			 const struct pol_peer *peer, const struct ids *ids, struct entry_vec *vec)
{
	for (size_t i = 0; i < ids->n; i++) {
		struct pol_entry t = {.identity = ids->v[i],
				      .dir = peer->ingress ? FIBRIL_DATAPATH_INGRESS
							   : FIBRIL_DATAPATH_EGRESS,
				      .deny = peer->deny,
				      .rule = peer->rule_id};
		if (!peer->nports) {
			vec_add(vec, t);
			continue;
		}
		for (size_t p = 0; p < peer->nports; p++) {
			if (peer->ports[p].name) {
				named_entries(st, subject, &peer->ports[p], t, vec);
				continue;
			}
			t.proto = peer->ports[p].proto;
			if (peer->ports[p].port == 0) {
				t.port = 0;
				t.bits = 0;
				vec_add(vec, t);
				continue;
			}
			struct block_ctx b = {.vec = vec, .tmpl = t};
			pol_port_blocks(peer->ports[p].port, peer->ports[p].end_port, add_block, &b);
		}
	}
}

/* d covers a: same direction and identity, d's protocol/port prefix holds a's */
static bool deny_covers(const struct pol_entry *d, const struct pol_entry *a)
{
	if (d->dir != a->dir || d->identity != a->identity)
		return false;
	if (d->proto == 0)
		return true;
	if (d->proto != a->proto || d->bits > a->bits)
		return false;
	uint16_t mask = d->bits ? (uint16_t)(0xffffu << (16 - d->bits)) : 0;
	return (a->port & mask) == d->port;
}

/* The endpoint's entries (sorted, unique, allows a deny covers left out). */
static void resolve(struct pol_state *st, const struct pol_ep *ep, struct entry_vec *vec,
		    bool *ingress, bool *egress)
{
	char ns[POL_NS_MAX];
	struct ids ids = {0};
	*ingress = *egress = false;
	ep_namespace(ep, ns, sizeof(ns));
	for (size_t p = 0; p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		for (size_t r = 0; r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			if (!pol_selector_match(&rule->subject, ep->match_labels, pol->ns))
				continue;
			*ingress = *ingress || rule->has_ingress;
			*egress = *egress || rule->has_egress;
			for (size_t k = 0; k < rule->npeers; k++) {
				ids.n = 0;
				peer_identities(st, pol, &rule->peers[k], &ids);
				peer_entries(st, ep, &rule->peers[k], &ids, vec);
			}
		}
	}
	free(ids.v);
	(void)ns;
	if (!vec->n)
		return;
	qsort(vec->v, vec->n, sizeof(*vec->v), entry_cmp);
	/* one entry per key: a deny of the same key wins (sorted after the
	 * allows) and names its rule; else the lowest rule ID (sorted first) */
	size_t o = 0;
	for (size_t i = 0; i < vec->n; i++) {
		if (o && same_key(&vec->v[o - 1], &vec->v[i])) {
			if (vec->v[i].deny && !vec->v[o - 1].deny) {
				vec->v[o - 1].deny = 1;
				vec->v[o - 1].rule = vec->v[i].rule;
			}
			continue;
		}
		vec->v[o++] = vec->v[i];
	}
	vec->n = o;
	/* the trie returns the longest match only: an allow inside a deny of
	 * the same identity would win there, so it goes */
	o = 0;
	for (size_t i = 0; i < vec->n; i++) {
		bool covered = false;
		if (!vec->v[i].deny)
			for (size_t j = 0; j < vec->n && !covered; j++)
				covered = vec->v[j].deny && deny_covers(&vec->v[j], &vec->v[i]);
		if (!covered)
			vec->v[o++] = vec->v[i];
	}
	vec->n = o;
}

/* ---- programming the datapath ---------------------------------------------------- */

static void to_dp(const struct pol_ep *ep, const struct pol_entry *e,
		  struct fibril_datapath_policy_entry *d)
{
	memset(d, 0, sizeof(*d));
	d->sz = sizeof(*d);
	d->endpoint_id = ep->id;
	d->direction = e->dir;
	d->proto = e->proto;
	d->identity = e->identity;
	d->port = e->port;
	d->port_bits = e->bits;
	d->deny = e->deny;
	d->rule_id = e->rule;
}

static void dp_write(struct pol_state *st, const struct pol_ep *ep, const struct pol_entry *e,
		     bool remove)
{
	struct fibril_datapath_policy_entry d;
	char err[256] = "";
	to_dp(ep, e, &d);
	int rc = remove ? st->dp->policy_remove(st->dp_ctx, &d, err, sizeof(err))
			: st->dp->policy_upsert(st->dp_ctx, &d, err, sizeof(err));
	if (rc < 0) {
		st->map_errors++;
		snprintf(st->last_error, sizeof(st->last_error), "endpoint %u: %s", ep->id, err);
		fibril_warn(st->m, "%s", st->last_error);
		return;
	}
	if (remove)
		st->map_removes++;
	else
		st->map_writes++;
}

static void dp_enforce(struct pol_state *st, struct pol_ep *ep, bool ingress, bool egress)
{
	char err[256] = "";
	if (st->dp->policy_enforce(st->dp_ctx, ep->id, ingress, egress, (uint32_t)st->revision, err,
				   sizeof(err)) < 0) {
		st->map_errors++;
		snprintf(st->last_error, sizeof(st->last_error), "endpoint %u: %s", ep->id, err);
		fibril_warn(st->m, "%s", st->last_error);
	}
	ep->ingress = ingress;
	ep->egress = egress;
}

/* Bring one endpoint's map entries from what is in place to vec: new and
 * changed entries first, then enforcement, then removals. */
static void apply(struct pol_state *st, struct pol_ep *ep, struct entry_vec *vec, bool ingress,
		  bool egress)
{
	size_t i = 0, j = 0;
	bool changed = false;
	while (j < vec->n) {
		int c = i < ep->nentries ? entry_cmp(&ep->entries[i], &vec->v[j]) : 1;
		if (i < ep->nentries && same_key(&ep->entries[i], &vec->v[j])) {
			if (ep->entries[i].deny != vec->v[j].deny || ep->entries[i].rule != vec->v[j].rule) {
				dp_write(st, ep, &vec->v[j], false);
				changed = true;
			}
			i++, j++;
		} else if (c < 0) {
			i++; /* removed below */
		} else {
			dp_write(st, ep, &vec->v[j], false);
			changed = true;
			j++;
		}
	}
	if (ingress != ep->ingress || egress != ep->egress || changed || ep->revision == 0)
		dp_enforce(st, ep, ingress, egress);
	ep->revision = (uint32_t)st->revision;
	/* removals: what is in place and not in vec */
	for (i = 0, j = 0; i < ep->nentries; i++) {
		while (j < vec->n && entry_cmp(&vec->v[j], &ep->entries[i]) < 0 &&
		       !same_key(&vec->v[j], &ep->entries[i]))
			j++;
		if (j < vec->n && same_key(&vec->v[j], &ep->entries[i]))
			continue;
		dp_write(st, ep, &ep->entries[i], true);
	}
	free(ep->entries);
	ep->entries = vec->v;
	ep->nentries = vec->n;
	vec->v = NULL;
	vec->n = vec->cap = 0;
}

/* ---- the selector cache ------------------------------------------------------------- */

static size_t selector_text(const struct pol_selector *sel, const char *ns, char *out, size_t len);

static char *sel_key(const struct pol_selector *sel, const char *ns)
{
	char small[256];
	size_t n = selector_text(sel, ns, small, sizeof(small));
	char *k = malloc(n + 1);
	if (k)
		selector_text(sel, ns, k, n + 1);
	return k;
}

static bool sel_copy(struct pol_selector *d, const struct pol_selector *s)
{
	memset(d, 0, sizeof(*d));
	d->any_namespace = s->any_namespace;
	if (!s->nexprs)
		return true;
	if (!(d->exprs = calloc(s->nexprs, sizeof(*d->exprs))))
		return false;
	for (size_t i = 0; i < s->nexprs; i++, d->nexprs++) {
		struct pol_expr *de = &d->exprs[i];
		const struct pol_expr *se = &s->exprs[i];
		de->op = se->op;
		if (!(de->key = strdup(se->key)) ||
		    (se->nvalues && !(de->values = calloc(se->nvalues, sizeof(char *))))) {
			d->nexprs++;
			pol_selector_free(d);
			return false;
		}
		for (size_t j = 0; j < se->nvalues; j++, de->nvalues++)
			if (!(de->values[j] = strdup(se->values[j]))) {
				d->nexprs++;
				pol_selector_free(d);
				return false;
			}
	}
	return true;
}

static void sel_entry_free(struct sel_entry *e)
{
	if (!e)
		return;
	free(e->key);
	pol_selector_free(&e->sel);
	free(e->ids);
	free(e);
}

/* One more (delta 1) or one fewer (-1) local endpoint of identity id
 * matches e; its identity set changes when the first comes or the last goes. */
static void sel_ids_adjust(struct pol_state *st, struct sel_entry *e, uint32_t id, int delta)
{
	size_t lo = u32_lower_bound(e->ids, e->nids, sizeof(*e->ids), offsetof(struct sel_id, identity), id);
	bool found = lo < e->nids && e->ids[lo].identity == id;
	if (delta > 0) {
		if (found) {
			e->ids[lo].endpoints++;
			return;
		}
		struct sel_id *n = mod_grow(e->ids, e->nids, &e->cap, sizeof(*n), 4);
		if (!n)
			return;
		e->ids = n;
		memmove(&e->ids[lo + 1], &e->ids[lo], (e->nids - lo) * sizeof(*e->ids));
		e->ids[lo] = (struct sel_id){.identity = id, .endpoints = 1};
		e->nids++;
		e->changed = st->sel_gen;
	} else if (found && --e->ids[lo].endpoints == 0) {
		memmove(&e->ids[lo], &e->ids[lo + 1], (e->nids - lo - 1) * sizeof(*e->ids));
		e->nids--;
		e->changed = st->sel_gen;
	}
}

/* A holder of identity id matched with match_labels (a local endpoint, or
 * a cluster identity other nodes' pods may hold: each counts once) joins
 * (delta 1) or leaves (-1) the cache. */
static void sel_cache_labels(struct pol_state *st, const char *match_labels, uint32_t id, int delta)
{
	if (!match_labels)
		return;
	for (size_t i = 0; i < st->nsels; i++)
		if (pol_selector_match(&st->sels[i]->sel, match_labels, st->sels[i]->ns))
			sel_ids_adjust(st, st->sels[i], id, delta);
}

static void sel_cache_ep(struct pol_state *st, const struct pol_ep *ep, int delta)
{
	sel_cache_labels(st, ep->match_labels, ep->identity, delta);
}

static void sel_cache_rid(struct pol_state *st, const struct pol_rid *r, int delta)
{
	sel_cache_labels(st, r->match_labels, r->identity, delta);
}

static void sel_register(struct pol_state *st, struct pol_selector *s, const char *ns)
{
	char *key = sel_key(s, ns);
	if (!key)
		return;
	for (size_t i = 0; i < st->nsels; i++)
		if (!strcmp(st->sels[i]->key, key)) {
			free(key);
			st->sels[i]->users++;
			s->cached = st->sels[i];
			return;
		}
	struct sel_entry *e = calloc(1, sizeof(*e));
	struct sel_entry **v = realloc(st->sels, (st->nsels + 1) * sizeof(*v));
	if (v)
		st->sels = v;
	if (!e || !v || !sel_copy(&e->sel, s)) {
		free(key);
		free(e);
		return; /* this selector is matched at each resolution instead */
	}
	e->key = key;
	snprintf(e->ns, sizeof(e->ns), "%s", ns);
	e->users = 1;
	for (size_t i = 1; i < st->ep_hi; i++)
		if (st->eps[i] && st->eps[i]->match_labels &&
		    pol_selector_match(&e->sel, st->eps[i]->match_labels, e->ns))
			sel_ids_adjust(st, e, st->eps[i]->identity, 1);
	for (size_t i = 0; i < st->nrids; i++)
		if (st->rids[i].match_labels && pol_selector_match(&e->sel, st->rids[i].match_labels, e->ns))
			sel_ids_adjust(st, e, st->rids[i].identity, 1);
	st->sels[st->nsels++] = e;
	s->cached = e;
}

static void sel_unregister(struct pol_state *st, struct pol_selector *s)
{
	struct sel_entry *e = s->cached;
	s->cached = NULL;
	if (!e || --e->users)
		return;
	for (size_t i = 0; i < st->nsels; i++)
		if (st->sels[i] == e) {
			st->sels[i] = st->sels[--st->nsels];
			break;
		}
	sel_entry_free(e);
}

static void sel_cache_clear(struct pol_state *st)
{
	for (size_t i = 0; i < st->nsels; i++)
		sel_entry_free(st->sels[i]);
	free(st->sels);
	st->sels = NULL;
	st->nsels = 0;
}

/* Whether a rule selects an endpoint. */
static bool rule_selects(const struct pol_policy *pol, const struct pol_rule *rule,
			 const struct pol_ep *ep)
{
	return ep->match_labels && pol_selector_match(&rule->subject, ep->match_labels, pol->ns);
}

static void mark_subjects(struct pol_state *st, const struct pol_policy *pol, const struct pol_rule *rule)
{
	for (size_t i = 1; i < st->ep_hi; i++)
		if (st->eps[i] && !st->eps[i]->dirty && rule_selects(pol, rule, st->eps[i]))
			st->eps[i]->dirty = true;
}

/* A policy enters the repository: its selectors join the cache, the
 * endpoints it selects are resolved again. */
static void pol_admit(struct pol_state *st, struct pol_policy *pol)
{
	for (size_t r = 0; r < pol->nrules; r++) {
		struct pol_rule *rule = &pol->rules[r];
		sel_register(st, &rule->subject, pol->ns);
		for (size_t k = 0; k < rule->npeers; k++)
			for (size_t e = 0; e < rule->peers[k].nendpoints; e++)
				sel_register(st, &rule->peers[k].endpoints[e], pol->ns);
		mark_subjects(st, pol, rule);
	}
	pol->admitted = true;
}

/* A policy leaves the repository (replaced or deleted): the endpoints it
 * selected are resolved again, its selectors leave the cache; freed. */
static void pol_retire(struct pol_state *st, struct pol_policy *pol)
{
	pol_drop_ids(st, pol);
	for (size_t r = 0; pol->admitted && r < pol->nrules; r++) {
		struct pol_rule *rule = &pol->rules[r];
		mark_subjects(st, pol, rule);
		sel_unregister(st, &rule->subject);
		for (size_t k = 0; k < rule->npeers; k++)
			for (size_t e = 0; e < rule->peers[k].nendpoints; e++)
				sel_unregister(st, &rule->peers[k].endpoints[e]);
	}
	pol_policy_free(pol);
}

/* After endpoints or cluster identities joined or left the cache (generation st->sel_gen): the
 * endpoints selected by a rule whose peers changed are resolved again.
 * Peers that look at the endpoints themselves rather than through a
 * selector (a NetworkPolicy ipBlock's pods, the cluster entity, a named
 * port on egress) count as changed whenever an endpoint did. */
static void mark_dependents(struct pol_state *st)
{
	for (size_t p = 0; p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		for (size_t r = 0; pol->admitted && r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			bool affected = false;
			for (size_t k = 0; k < rule->npeers && !affected; k++) {
				const struct pol_peer *peer = &rule->peers[k];
				affected = (pol->kind == POL_KIND_KNP && peer->ncidrs) ||
					   (peer->entities & POL_ENT_CLUSTER);
				for (size_t e = 0; e < peer->nendpoints && !affected; e++) {
					const struct sel_entry *c = peer->endpoints[e].cached;
					affected = !c || c->changed == st->sel_gen;
				}
				for (size_t q = 0; q < peer->nports && !affected; q++)
					affected = !peer->ingress && peer->ports[q].name;
			}
			if (affected)
				mark_subjects(st, pol, rule);
		}
	}
}

/* Resolve again the endpoints a change affects (every one after a start or
 * when the CIDR identities change) and write the differences. The others
 * enforce the new revision already: their policy is the same. */
static void recompute(struct pol_state *st)
{
	if (!st->started || !st->dp)
		return;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t p = 0; p < st->npols; p++)
		if (!st->pols[p]->admitted)
			pol_admit(st, st->pols[p]);
	uint64_t resolved = st->resolutions;
	bool full = cidrs_collect(st) || st->full;
	if (full)
		st->recomputes++;
	else
		st->incrementals++;
	st->full = false;
	for (size_t i = 1; i < st->ep_hi; i++) {
		struct pol_ep *ep = st->eps[i];
		if (!ep)
			continue;
		if (!full && !ep->dirty) {
			ep->revision = (uint32_t)st->revision;
			continue;
		}
		ep->dirty = false;
		st->resolutions++;
		struct entry_vec vec = {0};
		bool ingress, egress;
		resolve(st, ep, &vec, &ingress, &egress);
		if (vec.oom) {
			free(vec.v);
			fibril_error(st->m, "endpoint %u: out of memory resolving its policy", ep->id);
			continue;
		}
		apply(st, ep, &vec, ingress, egress);
		free(vec.v);
	}
	cidrs_release(st);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	st->last_update_us = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000);
	st->last_update_eps = st->resolutions - resolved;
	if (full)
		fibril_info(st->m, "resolved %llu endpoints against %zu policies in %.1f ms",
			    (unsigned long long)st->last_update_eps, st->npols, st->last_update_us / 1e3);
}

/* ---- endpoints ------------------------------------------------------------------------ */

static void ep_free(struct pol_ep *ep)
{
	if (!ep)
		return;
	free(ep->labels);
	free(ep->match_labels);
	free(ep->ports);
	free(ep->entries);
	free(ep);
}

/* ---- what Kubernetes adds to an endpoint: its namespace's labels, its pod's
 * named ports --------------------------------------------------------------------------- */

static struct json_object *k8s_object(struct pol_state *st, const char *res, const char *ns,
				      const char *name)
{
	const char *t = st->k8s && name[0] ? st->k8s->get(st->k8s_ctx, res, ns, name) : NULL;
	return t ? json_tokener_parse(t) : NULL;
}

static char *ns_labels_of(struct pol_state *st, const char *ns)
{
	size_t cap = 256, len = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	out[0] = '\0';
	/* as the API server adds it to every namespace */
	len += (size_t)snprintf(out, cap, "k8s:%skubernetes.io/metadata.name=%s", POL_NS_LABELS_PREFIX,
				ns);
	struct json_object *o = k8s_object(st, FIBRIL_K8S_NAMESPACES, "", ns), *md, *labels;
	if (o && json_object_object_get_ex(o, "metadata", &md) &&
	    json_object_object_get_ex(md, "labels", &labels) &&
	    json_object_is_type(labels, json_type_object)) {
		json_object_object_foreach(labels, k, v)
		{
			if (!strcmp(k, "kubernetes.io/metadata.name") || !json_object_is_type(v, json_type_string))
				continue;
			const char *val = json_object_get_string(v);
			size_t need = len + strlen(POL_NS_LABELS_PREFIX) + strlen(k) + strlen(val) + 8;
			if (need > cap) {
				char *n = realloc(out, need * 2);
				if (!n)
					break;
				out = n;
				cap = need * 2;
			}
			len += (size_t)snprintf(out + len, cap - len, "\nk8s:%s%s=%s", POL_NS_LABELS_PREFIX, k,
						val);
		}
	}
	json_object_put(o);
	return out;
}

static void pod_ports_of(struct pol_state *st, struct pol_ep *ep)
{
	free(ep->ports);
	ep->ports = NULL;
	ep->nports = 0;
	struct json_object *o = k8s_object(st, FIBRIL_K8S_PODS, ep->pod_ns, ep->pod_name), *spec,
			   *ctrs;
	if (!o || !json_object_object_get_ex(o, "spec", &spec) ||
	    !json_object_object_get_ex(spec, "containers", &ctrs) ||
	    !json_object_is_type(ctrs, json_type_array)) {
		json_object_put(o);
		return;
	}
	for (size_t i = 0; i < json_object_array_length(ctrs); i++) {
		struct json_object *ports, *c = json_object_array_get_idx(ctrs, i);
		if (!json_object_object_get_ex(c, "ports", &ports) ||
		    !json_object_is_type(ports, json_type_array))
			continue;
		for (size_t j = 0; j < json_object_array_length(ports); j++) {
			struct json_object *pt = json_object_array_get_idx(ports, j), *name, *num, *proto;
			if (!json_object_object_get_ex(pt, "name", &name) ||
			    !json_object_object_get_ex(pt, "containerPort", &num) ||
			    !pol_port_name_ok(json_object_get_string(name)))
				continue;
			int64_t n = json_object_get_int64(num);
			const char *pr = json_object_object_get_ex(pt, "protocol", &proto)
						 ? json_object_get_string(proto)
						 : "TCP";
			uint8_t p = !strcmp(pr, "TCP") ? IPPROTO_TCP : !strcmp(pr, "UDP") ? IPPROTO_UDP
				    : !strcmp(pr, "SCTP")				  ? IPPROTO_SCTP
											  : 0;
			if (n < 1 || n > 65535 || !p)
				continue;
			struct pol_named_port *v = realloc(ep->ports, (ep->nports + 1) * sizeof(*v));
			if (!v)
				break;
			ep->ports = v;
			snprintf(v[ep->nports].name, sizeof(v->name), "%s", json_object_get_string(name));
			v[ep->nports].proto = p;
			v[ep->nports].port = (uint16_t)n;
			ep->nports++;
		}
	}
	json_object_put(o);
}

/* What labels of namespace ns are matched with: they and the namespace's
 * (malloc'd, NULL: out of memory). */
static char *match_labels_of(struct pol_state *st, const char *labels, const char *ns)
{
	char *nsl = ns[0] ? ns_labels_of(st, ns) : NULL;
	size_t n = strlen(labels) + (nsl ? strlen(nsl) : 0) + 2;
	char *ml = malloc(n);
	if (ml)
		snprintf(ml, n, "%s%s%s", labels, nsl && labels[0] ? "\n" : "", nsl ? nsl : "");
	free(nsl);
	return ml;
}

/* Rebuild what the endpoint is matched with; true when it changed. */
static bool ep_refresh(struct pol_state *st, struct pol_ep *ep)
{
	char nsbuf[POL_NS_MAX];
	const char *ns = ep->pod_ns[0] ? ep->pod_ns : ep_namespace(ep, nsbuf, sizeof(nsbuf));
	char *ml = match_labels_of(st, ep->labels, ns);
	if (!ml)
		return false;
	size_t old_n = ep->nports;
	struct pol_named_port *old = ep->nports ? malloc(old_n * sizeof(*old)) : NULL;
	if (old)
		memcpy(old, ep->ports, old_n * sizeof(*old));
	pod_ports_of(st, ep);
	bool changed = !ep->match_labels || strcmp(ml, ep->match_labels) || old_n != ep->nports ||
		       (old_n && (!old || memcmp(old, ep->ports, old_n * sizeof(*old))));
	free(old);
	free(ep->match_labels);
	ep->match_labels = ml;
	return changed;
}

static void ep_forget(struct pol_state *st, uint16_t id)
{
	struct pol_ep *ep = st->eps[id];
	if (!ep)
		return;
	sel_cache_ep(st, ep, -1);
	if (st->dp) {
		dp_enforce(st, ep, false, false);
		for (size_t i = 0; i < ep->nentries; i++)
			dp_write(st, ep, &ep->entries[i], true);
	}
	ep_free(ep);
	st->eps[id] = NULL;
}

static int ep_seen(const struct fibril_endpoint_event *ev, void *ud)
{
	struct pol_state *st = ud;
	if (ev->id == 0)
		return 0;
	struct pol_ep *ep = st->eps[ev->id];
	const char *labels = FIBRIL_ENDPOINT_LABELS(ev);
	if (ep && ep->identity == ev->identity && !strcmp(ep->labels, labels) &&
	    ep->has_ipv4 == ev->has_ipv4 && ep->ipv4.s_addr == ev->ipv4.s_addr &&
	    ep->has_ipv6 == ev->has_ipv6 && !memcmp(&ep->ipv6, &ev->ipv6, sizeof(ep->ipv6)))
		return 0;
	if (!ep) {
		if (!(ep = calloc(1, sizeof(*ep))))
			return 0;
		ep->id = ev->id;
		st->eps[ev->id] = ep;
		if ((size_t)ev->id + 1 > st->ep_hi)
			st->ep_hi = (size_t)ev->id + 1;
	} else
		sel_cache_ep(st, ep, -1);
	char *l = strdup(labels);
	if (!l) {
		sel_cache_ep(st, ep, 1);
		return 0;
	}
	free(ep->labels);
	ep->labels = l;
	ep->identity = ev->identity;
	ep->has_ipv4 = ev->has_ipv4;
	ep->ipv4 = ev->ipv4;
	ep->has_ipv6 = ev->has_ipv6;
	ep->ipv6 = ev->ipv6;
	snprintf(ep->pod_ns, sizeof(ep->pod_ns), "%.*s", (int)sizeof(ev->pod_namespace),
		 ev->pod_namespace);
	snprintf(ep->pod_name, sizeof(ep->pod_name), "%.*s", (int)sizeof(ev->pod_name), ev->pod_name);
	ep_refresh(st, ep);
	sel_cache_ep(st, ep, 1);
	ep->dirty = true;
	return 0;
}

static int on_endpoint_event(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	const struct fibril_endpoint_event *e = ev->payload;
	if (ev->payload_len < sizeof(uint32_t) || e->sz < offsetof(struct fibril_endpoint_event, labels) +
							       sizeof(e->labels) ||
	    e->sz > ev->payload_len || (e->labels && e->labels >= ev->payload_len))
		return -EINVAL;
	st->sel_gen++;
	if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_DELETED))
		ep_forget(st, e->id);
	else
		ep_seen(e, st);
	mark_dependents(st);
	recompute(st);
	return 0;
}

/* ---- the cluster's identities ------------------------------------------------------- */

static size_t rid_at(const struct pol_state *st, uint32_t n)
{
	return u32_lower_bound(st->rids, st->nrids, sizeof(*st->rids),
			       offsetof(struct pol_rid, identity), n);
}

/* Rebuild what identity i is matched with; true when it changed. */
static bool rid_refresh(struct pol_state *st, struct pol_rid *r)
{
	char ns[POL_NS_MAX];
	char *ml = match_labels_of(st, r->labels, labels_namespace(r->labels, ns, sizeof(ns)));
	if (!ml)
		return false;
	bool changed = !r->match_labels || strcmp(ml, r->match_labels);
	free(r->match_labels);
	r->match_labels = ml;
	return changed;
}

static void rids_free(struct pol_state *st)
{
	for (size_t i = 0; i < st->nrids; i++) {
		free(st->rids[i].labels);
		free(st->rids[i].match_labels);
	}
	free(st->rids);
	st->rids = NULL;
	st->nrids = st->rids_cap = 0;
}

/* Identity n has labels now (NULL: it is gone); true when that changed. */
static bool rid_set(struct pol_state *st, uint32_t n, const char *labels)
{
	size_t i = rid_at(st, n);
	bool found = i < st->nrids && st->rids[i].identity == n;
	if (!labels) {
		if (!found)
			return false;
		free(st->rids[i].labels);
		free(st->rids[i].match_labels);
		memmove(&st->rids[i], &st->rids[i + 1], (st->nrids - i - 1) * sizeof(*st->rids));
		st->nrids--;
		return true;
	}
	if (found && !strcmp(st->rids[i].labels, labels))
		return false;
	char *l = strdup(labels);
	if (!l)
		return false;
	if (!found) {
		struct pol_rid *v = mod_grow(st->rids, st->nrids, &st->rids_cap, sizeof(*v), 64);
		if (!v) {
			free(l);
			return false;
		}
		st->rids = v;
		memmove(&st->rids[i + 1], &st->rids[i], (st->nrids - i) * sizeof(*st->rids));
		st->rids[i] = (struct pol_rid){.identity = n};
		st->nrids++;
	}
	free(st->rids[i].labels);
	st->rids[i].labels = l;
	rid_refresh(st, &st->rids[i]);
	return true;
}

static int on_identity_event(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	const struct fibril_identity_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) || e->sz > ev->payload_len ||
	    (e->labels && (e->labels < e->sz || e->labels >= ev->payload_len ||
			   memchr((const char *)e + e->labels, '\0', ev->payload_len - e->labels) == NULL)))
		return -EINVAL;
	bool added = !strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED);
	const char *labels = added ? FIBRIL_IDENTITY_LABELS(e) : NULL;
	size_t i = rid_at(st, e->identity);
	bool found = i < st->nrids && st->rids[i].identity == e->identity;
	if ((!found && !labels) || (found && labels && !strcmp(st->rids[i].labels, labels)))
		return 0; /* nothing changes */
	/* through the selector cache: only the selectors its old or new labels
	 * match change, only the endpoints of rules using them are resolved */
	st->sel_gen++;
	st->rid_updates++;
	if (found)
		sel_cache_rid(st, &st->rids[i], -1);
	rid_set(st, e->identity, labels);
	i = rid_at(st, e->identity);
	if (i < st->nrids && st->rids[i].identity == e->identity)
		sel_cache_rid(st, &st->rids[i], 1);
	mark_dependents(st);
	recompute(st);
	return 0;
}

/* ---- state file: the repository survives a restart -------------------------------- */

static int state_open(struct pol_state *st, char *why, size_t len)
{
	const char *base = fibril_state_dir();
	char path[PATH_MAX];
	st->dirfd = -1;
	if (!base || !*base) {
		snprintf(why, len, "no [agent] state-dir");
		return -EINVAL;
	}
	if (snprintf(path, sizeof(path), "%s/%s", base, POL_MODULE) >= (int)sizeof(path)) {
		snprintf(why, len, "state dir path too long");
		return -ENAMETOOLONG;
	}
	if ((mkdir(base, 0755) && errno != EEXIST) || (mkdir(path, 0700) && errno != EEXIST)) {
		int e = errno;
		snprintf(why, len, "cannot create %.300s: %s", path, strerror(e));
		return -e;
	}
	st->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dirfd < 0) {
		int e = errno;
		snprintf(why, len, "cannot open %.300s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

/* {"revision": N, "policies": [...], "k8s_policies": [...]}, atomically; 0
 * or a negative errno. Each policy's text is JSON already: it is copied,
 * not parsed again (a change with 1,000 policies loaded stays cheap). */
static int state_save(struct pol_state *st, struct pol_policy **pols, size_t n, uint64_t revision)
{
	if (st->dirfd < 0)
		return 0;
	size_t len = 160 + st->nrules * (64 + POL_NS_MAX + POL_NAME_MAX);
	for (size_t i = 0; i < n; i++)
		len += strlen(pols[i]->text) + 1;
	char *t = malloc(len), *w = t;
	if (!t)
		return -ENOMEM;
	w += sprintf(w, "{\"revision\":%llu,\"policies\":[", (unsigned long long)revision);
	/* the last state of the k8s ones: enforced from the start, until the
	 * informers' first list says what is gone */
	for (int k8s = 0; k8s < 2; k8s++) {
		bool first = true;
		if (k8s)
			w += sprintf(w, "],\"k8s_policies\":[");
		for (size_t i = 0; i < n; i++) {
			if (pols[i]->from_k8s != k8s)
				continue;
			size_t l = strlen(pols[i]->text);
			if (!first)
				*w++ = ',';
			memcpy(w, pols[i]->text, l);
			w += l;
			first = false;
		}
	}
	/* the rule IDs: [id, from k8s, kind, namespace, name, spec, ingress,
	 * deny, index] (names are DNS names: nothing to escape) */
	w += sprintf(w, "],\"rule_ids\":{\"next\":%u,\"rules\":[", st->next_rule_id);
	for (size_t i = 0; i < st->nrules; i++) {
		const struct pol_rule_rec *r = &st->rules[i];
		w += sprintf(w, "%s[%u,%d,%u,\"%s\",\"%s\",%u,%d,%d,%u]", i ? "," : "", r->id,
			     r->from_k8s, r->kind, r->ns, r->name, r->spec, r->ingress, r->deny, r->index);
	}
	w += sprintf(w, "]}}");
	int rc = fibril_state_write_atomic(st->dirfd, POL_STATE_FILE, t, (size_t)(w - t), 0600);
	free(t);
	return rc;
}

/* The rule IDs saved with the policies (none in a file of an older agent:
 * the policies get new ones, and the map entries are rewritten). */
static void rules_load(struct pol_state *st, struct json_object *o)
{
	struct json_object *t, *next, *arr;
	if (!json_object_object_get_ex(o, "rule_ids", &t) ||
	    !json_object_object_get_ex(t, "rules", &arr) || !json_object_is_type(arr, json_type_array))
		return;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *a = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) != 9)
			continue;
#define AT(k) json_object_array_get_idx(a, k)
		struct pol_rule_rec r = {
			.id = (uint32_t)json_object_get_int64(AT(0)),
			.from_k8s = json_object_get_int(AT(1)) != 0,
			.kind = (uint8_t)json_object_get_int(AT(2)),
			.spec = (uint32_t)json_object_get_int64(AT(5)),
			.ingress = json_object_get_int(AT(6)) != 0,
			.deny = json_object_get_int(AT(7)) != 0,
			.index = (uint32_t)json_object_get_int64(AT(8)),
		};
		snprintf(r.ns, sizeof(r.ns), "%s", json_object_get_string(AT(3)));
		snprintf(r.name, sizeof(r.name), "%s", json_object_get_string(AT(4)));
#undef AT
		if (!r.id || r.kind > POL_KIND_KNP || rule_by_id(st, r.id))
			continue;
		r.hash = rule_hash(&r);
		if (!rule_insert(st, &r))
			break;
	}
	if (json_object_object_get_ex(t, "next", &next) &&
	    (uint32_t)json_object_get_int64(next) > st->next_rule_id)
		st->next_rule_id = (uint32_t)json_object_get_int64(next);
}

static void state_load(struct pol_state *st)
{
	int fd = openat(st->dirfd, POL_STATE_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat sb;
	char *text = NULL;
	if (fstat(fd, &sb) == 0 && sb.st_size > 0 && sb.st_size < (64 << 20) &&
	    (text = malloc((size_t)sb.st_size + 1))) {
		ssize_t got = read(fd, text, (size_t)sb.st_size);
		text[got > 0 ? got : 0] = '\0';
	}
	close(fd);
	struct json_object *o = text ? json_tokener_parse(text) : NULL;
	struct json_object *arr = NULL, *rev = NULL;
	if (!o || !json_object_object_get_ex(o, "policies", &arr) ||
	    !json_object_object_get_ex(o, "revision", &rev)) {
		fibril_error(st->m, "%s/%s/%s is unreadable: starting with no policy",
			     fibril_state_dir(), POL_MODULE, POL_STATE_FILE);
		goto out;
	}
	st->revision = (uint64_t)json_object_get_int64(rev);
	rules_load(st, o);
	struct json_object *k8s = NULL;
	json_object_object_get_ex(o, "k8s_policies", &k8s);
	for (int from_k8s = 0; from_k8s < 2; from_k8s++) {
		struct json_object *a = from_k8s ? k8s : arr;
		if (!a || !json_object_is_type(a, json_type_array) || !json_object_array_length(a))
			continue;
		const char *t = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN);
		char err[512];
		struct pol_policy **v = NULL;
		int n = pol_parse(t, strlen(t), &v, err, sizeof(err));
		if (n < 0) {
			fibril_error(st->m, "%s: %s: starting without those policies", POL_STATE_FILE, err);
			continue;
		}
		struct pol_policy **all = realloc(st->pols, (st->npols + (size_t)n) * sizeof(*all));
		if (!all) {
			pol_policies_free(v, (size_t)n);
			continue;
		}
		st->pols = all;
		for (int i = 0; i < n; i++) {
			v[i]->from_k8s = from_k8s;
			pol_take_ids(st, v[i]);
			st->pols[st->npols++] = v[i];
		}
		free(v);
	}
	rules_prune(st);
	fibril_info(st->m, "%zu policies restored, revision %llu, %zu rule IDs", st->npols,
		    (unsigned long long)st->revision, st->nrules);
out:
	json_object_put(o);
	free(text);
}

/* What the last run left in the map becomes the endpoints' entries in
 * place (so the first recompute writes only differences, with no gap);
 * entries of endpoints that are gone are removed. */
struct adopt_ctx {
	struct pol_state *st;
	struct entry_vec stale;
	uint16_t *stale_ep;
};

static int adopt_entry(const struct fibril_datapath_policy_entry *e, void *ud)
{
	struct adopt_ctx *a = ud;
	/* an entry of a map older than rule IDs reads as rule 0 (unknown):
	 * the first recompute rewrites it with its rule */
	struct pol_entry pe = {.identity = e->identity, .dir = e->direction, .proto = e->proto,
			       .bits = e->port_bits, .deny = e->deny, .port = e->port,
			       .rule = e->sz >= FIBRIL_OFFSETOFEND(struct fibril_datapath_policy_entry,
								   rule_id)
					       ? e->rule_id
					       : 0};
	struct pol_ep *ep = a->st->eps[e->endpoint_id];
	if (!ep) {
		size_t n = a->stale.n;
		vec_add(&a->stale, pe);
		if (a->stale.n > n) {
			uint16_t *ids = realloc(a->stale_ep, a->stale.n * sizeof(*ids));
			if (!ids) {
				a->stale.n = n;
				return 0;
			}
			a->stale_ep = ids;
			ids[n] = e->endpoint_id;
		}
		return 0;
	}
	struct pol_entry *v = realloc(ep->entries, (ep->nentries + 1) * sizeof(*v));
	if (!v)
		return 0;
	ep->entries = v;
	ep->entries[ep->nentries++] = pe;
	return 0;
}

static void adopt_map(struct pol_state *st)
{
	struct adopt_ctx a = {.st = st};
	if (st->dp->policy_list(st->dp_ctx, adopt_entry, &a) < 0)
		fibril_warn(st->m, "cannot read the policy map in place");
	for (size_t i = 1; i < st->ep_hi; i++)
		if (st->eps[i] && st->eps[i]->nentries)
			qsort(st->eps[i]->entries, st->eps[i]->nentries, sizeof(struct pol_entry),
			      entry_cmp);
	for (size_t i = 0; i < a.stale.n; i++) {
		struct pol_ep gone = {.id = a.stale_ep[i]};
		dp_write(st, &gone, &a.stale.v[i], true);
	}
	free(a.stale.v);
	free(a.stale_ep);
}

/* ---- repository ------------------------------------------------------------------------ */

/* A policy is known by its source (API or k8s), whether it is a
 * Kubernetes NetworkPolicy or a Cilium one, its namespace and its name. */
static ssize_t pol_find(struct pol_state *st, bool from_k8s, bool knp, const char *name,
			const char *ns)
{
	for (size_t i = 0; i < st->npols; i++)
		if (st->pols[i]->from_k8s == from_k8s && (st->pols[i]->kind == POL_KIND_KNP) == knp &&
		    !strcmp(st->pols[i]->name, name) && !strcmp(st->pols[i]->ns, ns))
			return (ssize_t)i;
	return -1;
}

static void pol_remove_at(struct pol_state *st, size_t at)
{
	pol_retire(st, st->pols[at]);
	memmove(&st->pols[at], &st->pols[at + 1], (st->npols - at - 1) * sizeof(*st->pols));
	st->npols--;
}

/* After a change to the repository: revision, state file, datapath. */
static void repo_changed(struct pol_state *st)
{
	st->revision++;
	int rc = state_save(st, st->pols, st->npols, st->revision);
	if (rc < 0)
		fibril_error(st->m, "cannot write %s: %s (the policies apply until a restart)",
			     POL_STATE_FILE, strerror(-rc));
	recompute(st);
}

static struct json_object *state_json(struct pol_state *st)
{
	struct json_object *o = json_object_new_object(), *pols = json_object_new_array(),
			   *eps = json_object_new_array(), *stats = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	for (size_t i = 0; i < st->npols; i++) {
		struct json_object *p = json_object_new_object();
		json_object_object_add(p, "name", json_object_new_string(st->pols[i]->name));
		json_object_object_add(p, "namespace", json_object_new_string(st->pols[i]->ns));
		json_object_object_add(p, "rules", json_object_new_int((int)st->pols[i]->nrules));
		json_object_object_add(p, "kind", json_object_new_string(pol_kind_name(st->pols[i]->kind)));
		json_object_object_add(p, "source", json_object_new_string(st->pols[i]->from_k8s ? "k8s" : "api"));
		json_object_object_add(p, "policy", json_tokener_parse(st->pols[i]->text));
		json_object_array_add(pols, p);
	}
	json_object_object_add(o, "policies", pols);
	for (size_t i = 1; i < st->ep_hi; i++) {
		const struct pol_ep *ep = st->eps[i];
		if (!ep)
			continue;
		struct json_object *e = json_object_new_object();
		json_object_object_add(e, "id", json_object_new_int(ep->id));
		json_object_object_add(e, "identity", json_object_new_int64(ep->identity));
		json_object_object_add(e, "ingress",
				       json_object_new_string(ep->ingress ? "enforced" : "open"));
		json_object_object_add(e, "egress",
				       json_object_new_string(ep->egress ? "enforced" : "open"));
		json_object_object_add(e, "revision", json_object_new_int64(ep->revision));
		json_object_object_add(e, "entries", json_object_new_int((int)ep->nentries));
		json_object_array_add(eps, e);
	}
	json_object_object_add(o, "endpoints", eps);
#define STAT(n, v) json_object_object_add(stats, n, json_object_new_int64((int64_t)(v)))
	STAT("imports", st->imports);
	STAT("refused", st->refused);
	STAT("deletes", st->deletes);
	STAT("recomputes", st->recomputes);
	STAT("incremental_updates", st->incrementals);
	STAT("endpoint_resolutions", st->resolutions);
	STAT("cluster_identity_updates", st->rid_updates);
	STAT("selectors", st->nsels);
	STAT("last_update_us", st->last_update_us);
	STAT("last_update_endpoints", st->last_update_eps);
	STAT("map_writes", st->map_writes);
	STAT("map_removes", st->map_removes);
	STAT("map_errors", st->map_errors);
	STAT("cidr_identities", st->ncidrs);
	STAT("k8s_applied", st->k8s_applied);
	STAT("k8s_invalid", st->k8s_invalid);
	STAT("k8s_deleted", st->k8s_deleted);
#undef STAT
	json_object_object_add(o, "stats", stats);
	return o;
}

static void reply(struct fibril_response *resp, int status, struct json_object *o)
{
	fibril_resp_json(resp, status,
			 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

static void get_policy(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	reply(resp, 200, state_json(ud));
}

static void put_policy(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct pol_state *st = ud;
	size_t len = 0;
	const char *body = fibril_req_body(req, &len);
	struct pol_policy **v = NULL;
	char err[512];
	int n = pol_parse(body ? body : "", len, &v, err, sizeof(err));
	if (n < 0) {
		st->refused++;
		fibril_resp_error(resp, 400, "%s", err);
		return;
	}
	/* all or nothing: make room first */
	struct pol_policy **grown = realloc(st->pols, (st->npols + (size_t)n) * sizeof(*grown));
	if (!grown) {
		pol_policies_free(v, (size_t)n);
		fibril_resp_error(resp, 500, "out of memory");
		return;
	}
	st->pols = grown;
	struct json_object *names = json_object_new_array();
	for (int i = 0; i < n; i++) {
		ssize_t at = pol_find(st, false, v[i]->kind == POL_KIND_KNP, v[i]->name, v[i]->ns);
		char full[POL_NAME_MAX + POL_NS_MAX + 2];
		snprintf(full, sizeof(full), "%s%s%s", v[i]->ns, v[i]->ns[0] ? "/" : "", v[i]->name);
		json_object_array_add(names, json_object_new_string(full));
		pol_take_ids(st, v[i]); /* before the old version lets go of them */
		if (at >= 0) {
			pol_retire(st, st->pols[at]);
			st->pols[at] = v[i];
		} else
			st->pols[st->npols++] = v[i];
	}
	free(v);
	st->imports += (uint64_t)n;
	repo_changed(st);
	fibril_info(st->m, "%d polic%s imported, revision %llu", n, n == 1 ? "y" : "ies",
		    (unsigned long long)st->revision);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "imported", names);
	reply(resp, 200, o);
}

static void delete_one(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct pol_state *st = ud;
	const char *name = fibril_req_param(req, "name");
	const char *ns = fibril_req_query(req, "namespace");
	int deleted = 0;
	/* the API's own (a NetworkPolicy and a Cilium policy of that name both go) */
	for (int knp = 0; knp < 2 && name; knp++) {
		ssize_t at = pol_find(st, false, knp, name, ns ? ns : "");
		if (at >= 0) {
			pol_remove_at(st, (size_t)at);
			deleted++;
		}
	}
	if (!deleted) {
		fibril_resp_error(resp, 404, "no policy '%.200s'%s%.60s imported through the API",
				  name ? name : "", ns ? " in namespace " : "", ns ? ns : "");
		return;
	}
	st->deletes += (uint64_t)deleted;
	repo_changed(st);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "deleted", json_object_new_int(deleted));
	reply(resp, 200, o);
}

static void delete_all(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct pol_state *st = ud;
	size_t n = 0;
	/* the API's own: the k8s ones follow their objects */
	for (size_t i = st->npols; i-- > 0;)
		if (!st->pols[i]->from_k8s) {
			pol_remove_at(st, i);
			n++;
		}
	st->deletes += n;
	repo_changed(st);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "deleted", json_object_new_int((int)n));
	reply(resp, 200, o);
}




/* ---- selectors: each distinct selector and the identities it selects now ---------------- */

/* kubectl's form: "k=v", "k in (a,b)", "k notin (a)", "k", "!k"; "{}" when empty,
 * then the namespace the policy limits it to. */
static size_t selector_text(const struct pol_selector *sel, const char *ns, char *out, size_t len)
{
	size_t n = 0;
	out[0] = '\0';
#define PUT(...)                                                                  \
	do {                                                                      \
		int w = snprintf(out + n, n < len ? len - n : 0, __VA_ARGS__);   \
		n += w > 0 ? (size_t)w : 0;                                       \
	} while (0)
	for (size_t i = 0; i < sel->nexprs; i++) {
		const struct pol_expr *e = &sel->exprs[i];
		PUT("%s", i ? "," : "");
		if (e->op == POL_OP_EXISTS)
			PUT("%s", e->key);
		else if (e->op == POL_OP_NOT_EXISTS)
			PUT("!%s", e->key);
		else if (e->op == POL_OP_IN && e->nvalues == 1)
			PUT("%s=%s", e->key, e->values[0]);
		else {
			PUT("%s %s (", e->key, e->op == POL_OP_IN ? "in" : "notin");
			for (size_t j = 0; j < e->nvalues; j++)
				PUT("%s%s", j ? "," : "", e->values[j]);
			PUT(")");
		}
	}
	if (!sel->nexprs)
		PUT("{}");
	if (ns && ns[0] && !sel->any_namespace)
		PUT(" in namespace %s", ns);
#undef PUT
	if (n >= len && len > 4)
		memcpy(out + len - 4, "...", 4);
	return n;
}

static void selector_add(struct pol_state *st, struct json_object *arr, const struct pol_selector *sel,
			 const char *ns, const char *user)
{
	char text[1024];
	selector_text(sel, ns, text, sizeof(text));
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *o = json_object_array_get_idx(arr, i), *t, *users;
		json_object_object_get_ex(o, "selector", &t);
		if (strcmp(json_object_get_string(t), text))
			continue;
		json_object_object_get_ex(o, "users", &users);
		bool seen = false;
		for (size_t j = 0; j < json_object_array_length(users); j++)
			seen = seen || !strcmp(json_object_get_string(json_object_array_get_idx(users, j)), user);
		if (!seen)
			json_object_array_add(users, json_object_new_string(user));
		return;
	}
	struct json_object *o = json_object_new_object(), *users = json_object_new_array();
	struct ids ids = {0};
	const struct sel_entry *c = sel->cached;
	for (size_t i = 0; c && i < c->nids; i++)
		ids_add(&ids, c->ids[i].identity);
	for (size_t i = 1; !c && i < st->ep_hi; i++)
		if (st->eps[i] && pol_selector_match(sel, st->eps[i]->match_labels, ns))
			ids_add(&ids, st->eps[i]->identity);
	for (size_t i = 0; i < st->nrids; i++)
		if (pol_selector_match(sel, st->rids[i].match_labels, ns))
			ids_add(&ids, st->rids[i].identity);
	struct json_object *idarr = json_object_new_array();
	for (size_t i = 0; i < ids.n; i++)
		json_object_array_add(idarr, json_object_new_int64(ids.v[i]));
	free(ids.v);
	json_object_array_add(users, json_object_new_string(user));
	json_object_object_add(o, "selector", json_object_new_string(text));
	json_object_object_add(o, "identities", idarr);
	json_object_object_add(o, "users", users);
	json_object_array_add(arr, o);
}

static void get_selectors(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	struct pol_state *st = ud;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	for (size_t p = 0; p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		char user[POL_NS_MAX + POL_NAME_MAX + 48];
		snprintf(user, sizeof(user), "%s %s%s%s", pol_kind_name(pol->kind), pol->ns,
			 pol->ns[0] ? "/" : "", pol->name);
		for (size_t r = 0; r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			selector_add(st, arr, &rule->subject, pol->ns, user);
			for (size_t k = 0; k < rule->npeers; k++)
				for (size_t e = 0; e < rule->peers[k].nendpoints; e++)
					selector_add(st, arr, &rule->peers[k].endpoints[e], pol->ns, user);
		}
	}
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "selectors", arr);
	reply(resp, 200, o);
}

/* ---- trace: which rule allows or denies a flow, from the resolved policy ------------------ */

struct trace_end {
	const struct pol_ep *ep; /* a local endpoint, or NULL */
	uint32_t identity;
	char desc[POL_NS_MAX + POL_NAME_MAX + 64];
};

static const char *identity_name(uint32_t id)
{
	switch (id) {
	case FIBRIL_IDENTITY_HOST: return "host";
	case FIBRIL_IDENTITY_WORLD: return "world";
	case FIBRIL_IDENTITY_REMOTE_NODE: return "remote-node";
	case FIBRIL_IDENTITY_HEALTH: return "health";
	case FIBRIL_IDENTITY_INIT: return "init";
	case FIBRIL_IDENTITY_KUBE_APISERVER: return "kube-apiserver";
	default: return id >= POL_CIDR_IDENTITY_BASE ? "cidr" : "endpoint";
	}
}

static void end_of_ep(struct trace_end *out, const struct pol_ep *ep)
{
	out->ep = ep;
	out->identity = ep->identity;
	if (ep->pod_name[0])
		snprintf(out->desc, sizeof(out->desc), "%s/%s (endpoint %u, identity %u)", ep->pod_ns,
			 ep->pod_name, ep->id, ep->identity);
	else
		snprintf(out->desc, sizeof(out->desc), "endpoint %u (identity %u)", ep->id, ep->identity);
}

/* "host", "world", an endpoint ID, "NAMESPACE/POD", or an IPv4 or IPv6 address (a
 * local endpoint's, else the identity of its longest CIDR prefix, else world). */
static bool trace_end_parse(struct pol_state *st, const char *spec, struct trace_end *out,
			    char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	struct in_addr a;
	struct in6_addr a6;
	if (!spec || !*spec) {
		snprintf(err, errlen, "missing (an endpoint ID, NAMESPACE/POD, an IP address, host or world)");
		return false;
	}
	if (!strcmp(spec, "host") || !strcmp(spec, "world")) {
		out->identity = spec[0] == 'h' ? FIBRIL_IDENTITY_HOST : FIBRIL_IDENTITY_WORLD;
		snprintf(out->desc, sizeof(out->desc), "%s (identity %u)", spec, out->identity);
		return true;
	}
	if (strspn(spec, "0123456789") == strlen(spec) && strlen(spec) <= 5) {
		long id = strtol(spec, NULL, 10);
		if (id > 0 && id < POL_EP_MAX && st->eps[id]) {
			end_of_ep(out, st->eps[id]);
			return true;
		}
		snprintf(err, errlen, "no local endpoint %.20s", spec);
		return false;
	}
	int family = inet_pton(AF_INET, spec, &a) == 1 ? 4 : inet_pton(AF_INET6, spec, &a6) == 1 ? 6 : 0;
	const void *addr = family == 4 ? (const void *)&a : &a6;
	if (family) {
		for (size_t i = 1; i < st->ep_hi; i++) {
			const struct pol_ep *ep = st->eps[i];
			if (ep && ((family == 4 && ep->has_ipv4 && ep->ipv4.s_addr == a.s_addr) ||
				   (family == 6 && ep->has_ipv6 && !memcmp(&ep->ipv6, &a6, sizeof(a6))))) {
				end_of_ep(out, ep);
				return true;
			}
		}
		/* the longest CIDR identity holding it (as the ipcache's longest
		 * prefix decides), else world */
		out->identity = FIBRIL_IDENTITY_WORLD;
		int best = -1;
		for (size_t i = 0; i < st->ncidrs; i++)
			if (st->cidrs[i].cidr.family == family && (int)st->cidrs[i].cidr.plen > best &&
			    addr_in(family, addr, &st->cidrs[i].cidr)) {
				best = st->cidrs[i].cidr.plen;
				out->identity = st->cidrs[i].identity;
			}
		snprintf(out->desc, sizeof(out->desc), "%s (identity %u, %s)", spec, out->identity,
			 identity_name(out->identity));
		return true;
	}
	const char *slash = strchr(spec, '/');
	if (slash)
		for (size_t i = 1; i < st->ep_hi; i++) {
			const struct pol_ep *ep = st->eps[i];
			if (ep && strlen(ep->pod_ns) == (size_t)(slash - spec) &&
			    !strncmp(ep->pod_ns, spec, (size_t)(slash - spec)) && !strcmp(ep->pod_name, slash + 1)) {
				end_of_ep(out, ep);
				return true;
			}
		}
	snprintf(err, errlen, "'%.100s' is no local endpoint, pod, IP address, host or world", spec);
	return false;
}

static bool entry_matches(const struct pol_entry *e, uint32_t id, uint8_t proto, uint16_t port)
{
	if (e->identity && e->identity != id)
		return false;
	if (!e->proto)
		return true;
	if (e->proto != proto)
		return false;
	uint16_t mask = e->bits ? (uint16_t)(0xffffu << (16 - e->bits)) : 0;
	return (port & mask) == e->port;
}

/* The entry the datapath's longest-prefix lookup finds for identity id
 * among the endpoint's entries in place (NULL: none). */
static const struct pol_entry *entry_lookup(const struct pol_ep *ep, uint8_t dir, uint32_t id,
					    uint8_t proto, uint16_t port)
{
	const struct pol_entry *best = NULL;
	int best_len = -1;
	for (size_t i = 0; i < ep->nentries; i++) {
		const struct pol_entry *e = &ep->entries[i];
		if (e->dir != dir || e->identity != id || !entry_matches(e, id, proto, port))
			continue;
		int len = e->proto ? 1 + e->bits : 0;
		if (len > best_len) {
			best = e;
			best_len = len;
		}
	}
	return best;
}

/* What the datapath decides from the entries in place, as policy_check()
 * in bpf/lib/policy.h: the remote identity's entry and the any-identity
 * entry are looked up, a deny found either way wins. Adds "match" and
 * "rule" (the rule the drop or verdict event names) to o. */
static void trace_decide(const struct pol_state *st, const struct pol_ep *ep, bool ingress,
			 uint32_t remote, uint8_t proto, uint16_t port, struct json_object *o)
{
	uint8_t dir = ingress ? FIBRIL_DATAPATH_INGRESS : FIBRIL_DATAPATH_EGRESS;
	const char *match = "open";
	const struct pol_entry *v = NULL;
	if (ep && (ingress ? ep->ingress : ep->egress)) {
		const struct pol_entry *exact = entry_lookup(ep, dir, remote, proto, port);
		const struct pol_entry *any = remote ? entry_lookup(ep, dir, 0, proto, port) : NULL;
		v = exact && exact->deny ? exact : any && any->deny ? any : exact ? exact : any;
		match = !v ? "default-deny" : v->deny ? "deny" : "allow";
	}
	json_object_object_add(o, "match", json_object_new_string(match));
	const struct pol_rule_rec *r = v ? rule_by_id(st, v->rule) : NULL;
	json_object_object_add(o, "rule", r ? rule_json(r) : NULL);
}

/* One direction at one end: the policies selecting it, the rules that match. */
static struct json_object *trace_dir(struct pol_state *st, const struct pol_ep *subject, bool ingress,
				     uint32_t remote, uint8_t proto, uint16_t port, bool *allowed)
{
	struct json_object *o = json_object_new_object(), *sel = json_object_new_array(),
			   *allow = json_object_new_array(), *deny = json_object_new_array();
	bool enforced = false;
	struct ids ids = {0};
	for (size_t p = 0; subject && p < st->npols; p++) {
		const struct pol_policy *pol = st->pols[p];
		for (size_t r = 0; r < pol->nrules; r++) {
			const struct pol_rule *rule = &pol->rules[r];
			if (!pol_selector_match(&rule->subject, subject->match_labels, pol->ns) ||
			    !(ingress ? rule->has_ingress : rule->has_egress))
				continue;
			enforced = true;
			char name[POL_NS_MAX + POL_NAME_MAX + 96];
			snprintf(name, sizeof(name), "%s %s%s%s", pol_kind_name(pol->kind), pol->ns,
				 pol->ns[0] ? "/" : "", pol->name);
			json_object_array_add(sel, json_object_new_string(name));
			for (size_t k = 0; k < rule->npeers; k++) {
				const struct pol_peer *peer = &rule->peers[k];
				if (peer->ingress != ingress)
					continue;
				struct entry_vec vec = {0};
				ids.n = 0;
				peer_identities(st, pol, peer, &ids);
				peer_entries(st, subject, peer, &ids, &vec);
				bool hit = false;
				for (size_t i = 0; i < vec.n && !hit; i++)
					hit = entry_matches(&vec.v[i], remote, proto, port);
				free(vec.v);
				if (!hit)
					continue;
				char why[sizeof(name) + 64];
				snprintf(why, sizeof(why), "%s rule %zu %s%s peer %zu", name, r,
					 ingress ? "ingress" : "egress", peer->deny ? "Deny" : "", k);
				json_object_array_add(peer->deny ? deny : allow, json_object_new_string(why));
			}
		}
	}
	free(ids.v);
	const char *reason;
	if (!subject) {
		*allowed = true;
		reason = "not a local endpoint: no policy applies here";
	} else if (!enforced) {
		*allowed = true;
		reason = ingress ? "no policy selects it for ingress (default allow)"
				 : "no policy selects it for egress (default allow)";
	} else if (json_object_array_length(deny)) {
		*allowed = false;
		reason = "denied by a deny rule (a deny always wins)";
	} else if (json_object_array_length(allow)) {
		*allowed = true;
		reason = "allowed by a rule";
	} else {
		*allowed = false;
		reason = "selected, and no rule allows it (default deny)";
	}
	json_object_object_add(o, "enforced", json_object_new_boolean(enforced));
	json_object_object_add(o, "verdict", json_object_new_string(*allowed ? "allowed" : "denied"));
	json_object_object_add(o, "reason", json_object_new_string(reason));
	json_object_object_add(o, "selected_by", sel);
	json_object_object_add(o, "allowed_by", allow);
	json_object_object_add(o, "denied_by", deny);
	trace_decide(st, subject, ingress, remote, proto, port, o);
	return o;
}

static void get_trace(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct pol_state *st = ud;
	struct trace_end src, dst;
	char err[256];
	if (!trace_end_parse(st, fibril_req_query(req, "src"), &src, err, sizeof(err))) {
		fibril_resp_error(resp, 400, "src: %s", err);
		return;
	}
	if (!trace_end_parse(st, fibril_req_query(req, "dst"), &dst, err, sizeof(err))) {
		fibril_resp_error(resp, 400, "dst: %s", err);
		return;
	}
	const char *dport = fibril_req_query(req, "dport");
	char num[8] = "", pr[8] = "";
	long port = -1;
	if (dport && sscanf(dport, "%7[0-9]/%7s", num, pr) >= 1)
		port = strtol(num, NULL, 10);
	uint8_t proto = !pr[0] || !strcasecmp(pr, "tcp") ? IPPROTO_TCP
			: !strcasecmp(pr, "udp")	  ? IPPROTO_UDP
			: !strcasecmp(pr, "sctp")	  ? IPPROTO_SCTP
							  : 0;
	if (port < 0 || port > 65535 || !proto) {
		fibril_resp_error(resp, 400, "dport: '%.40s' is not PORT[/tcp|udp|sctp]", dport ? dport : "");
		return;
	}
	bool out_ok, in_ok;
	struct json_object *o = json_object_new_object(), *e;
	json_object_object_add(o, "revision", json_object_new_int64((int64_t)st->revision));
	json_object_object_add(o, "src", json_object_new_string(src.desc));
	json_object_object_add(o, "dst", json_object_new_string(dst.desc));
	json_object_object_add(o, "protocol", json_object_new_string(proto == IPPROTO_TCP ? "TCP"
								 : proto == IPPROTO_UDP ? "UDP"
											: "SCTP"));
	json_object_object_add(o, "port", json_object_new_int((int)port));
	e = trace_dir(st, src.ep, false, dst.identity, proto, (uint16_t)port, &out_ok);
	json_object_object_add(o, "egress", e);
	e = trace_dir(st, dst.ep, true, src.identity, proto, (uint16_t)port, &in_ok);
	json_object_object_add(o, "ingress", e);
	json_object_object_add(o, "verdict", json_object_new_string(out_ok && in_ok ? "allowed" : "denied"));
	reply(resp, 200, o);
}

/* ---- Kubernetes: policies from the informers, namespaces and pods ------------------------ */

static const char *const k8s_policy_resources[] = {FIBRIL_K8S_NETWORKPOLICIES, FIBRIL_K8S_CNPS,
						   FIBRIL_K8S_CCNPS, NULL};

static const char *resource_of(enum pol_kind k)
{
	return k == POL_KIND_KNP ? FIBRIL_K8S_NETWORKPOLICIES : k == POL_KIND_CCNP ? FIBRIL_K8S_CCNPS
										    : FIBRIL_K8S_CNPS;
}

static void k8s_count(struct pol_state *st, const char *res, const char *result)
{
	fibril_series_inc(fibril_metric_labels(st->m_k8s_invalid, res, result));
}

struct k8s_strs {
	const char *res, *ns, *name, *obj;
};

/* A k8s bus event's payload and texts; NULL when it is not one to act on. */
static const struct fibril_k8s_event *k8s_event(const struct pol_state *st,
						const struct fibril_event *ev, struct k8s_strs *out)
{
	const struct fibril_k8s_event *e = ev->payload;
	if (!st->started || ev->payload_len < sizeof(*e) || e->sz < sizeof(*e) ||
	    e->sz > ev->payload_len)
		return NULL;
	out->res = FIBRIL_K8S_STR(e, resource);
	out->ns = FIBRIL_K8S_STR(e, namespace_);
	out->name = FIBRIL_K8S_STR(e, name);
	out->obj = FIBRIL_K8S_STR(e, object);
	return out->res && out->name ? e : NULL;
}

/* One object of a policy informer added, updated (deleted: remove). */
static void k8s_apply(struct pol_state *st, const char *res, const char *ns, const char *name,
		      const char *obj, bool deleted)
{
	bool knp = !strcmp(res, FIBRIL_K8S_NETWORKPOLICIES), ccnp = !strcmp(res, FIBRIL_K8S_CCNPS);
	if (!ns || ccnp)
		ns = "";
	ssize_t at = pol_find(st, true, knp, name, ns);
	if (deleted) {
		if (at < 0)
			return;
		pol_remove_at(st, (size_t)at);
		st->k8s_deleted++;
		k8s_count(st, res, "deleted");
		repo_changed(st);
		fibril_info(st->m, "%s %s%s%s deleted, revision %llu", res, ns, ns[0] ? "/" : "", name,
			    (unsigned long long)st->revision);
		return;
	}
	/* list items may come without kind: the informer says what it is */
	struct json_object *o = obj ? json_tokener_parse(obj) : NULL;
	if (o && json_object_is_type(o, json_type_object) && !json_object_object_get_ex(o, "kind", NULL))
		json_object_object_add(o, "kind",
				       json_object_new_string(knp ? "NetworkPolicy"
							      : ccnp ? "CiliumClusterwideNetworkPolicy"
								     : "CiliumNetworkPolicy"));
	const char *text = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : "";
	struct pol_policy **v = NULL;
	char err[512] = "";
	int n = pol_parse(text, strlen(text), &v, err, sizeof(err));
	json_object_put(o);
	if (n == 1 && strcmp(resource_of(v[0]->kind), res)) {
		snprintf(err, sizeof(err), "kind: a %s in the %s informer", pol_kind_name(v[0]->kind), res);
		n = -1;
	}
	if (n != 1) {
		pol_policies_free(v, n > 0 ? (size_t)n : 0);
		st->k8s_invalid++;
		k8s_count(st, res, "invalid");
		snprintf(st->last_error, sizeof(st->last_error), "%s %s/%s: %s", res, ns, name, err);
		fibril_warn(st->m, "%s %s%s%s is refused: %s (%s; the other policies keep applying)", res,
			    ns, ns[0] ? "/" : "", name, err,
			    at >= 0 ? "its previous version stays in force" : "not applied");
		return;
	}
	struct pol_policy *p = v[0];
	free(v);
	p->from_k8s = true;
	if (at >= 0 && !strcmp(st->pols[at]->text, p->text)) {
		pol_policy_free(p);
		return;
	}
	pol_take_ids(st, p); /* before the old version lets go of them */
	if (at >= 0) {
		pol_retire(st, st->pols[at]);
		st->pols[at] = p;
	} else {
		struct pol_policy **grown = realloc(st->pols, (st->npols + 1) * sizeof(*grown));
		if (!grown) {
			pol_drop_ids(st, p);
			pol_policy_free(p);
			fibril_error(st->m, "%s %s/%s: out of memory", res, ns, name);
			return;
		}
		st->pols = grown;
		st->pols[st->npols++] = p;
	}
	st->k8s_applied++;
	k8s_count(st, res, "applied");
	repo_changed(st);
	fibril_info(st->m, "%s %s%s%s applied, revision %llu", res, ns, ns[0] ? "/" : "", name,
		    (unsigned long long)st->revision);
}

static int on_k8s_policy(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	struct k8s_strs k;
	if (!st->started) {
		st->k8s_missed++; /* caught up from the caches once they sync */
		return 0;
	}
	const struct fibril_k8s_event *e = k8s_event(st, ev, &k);
	if (e)
		k8s_apply(st, k.res, k.ns, k.name, k.obj, e->type == FIBRIL_K8S_DELETED);
	return 0;
}

struct catch_up {
	struct pol_state *st;
	const char *res;
};

static int catch_up_one(const char *json, void *ud)
{
	struct catch_up *cu = ud;
	struct json_object *o = json_tokener_parse(json), *md, *ns = NULL, *name = NULL;
	if (o && json_object_object_get_ex(o, "metadata", &md)) {
		json_object_object_get_ex(md, "namespace", &ns);
		json_object_object_get_ex(md, "name", &name);
	}
	if (name && json_object_is_type(name, json_type_string))
		k8s_apply(cu->st, cu->res, ns ? json_object_get_string(ns) : "",
			  json_object_get_string(name), json, false);
	json_object_put(o);
	return 0;
}

/* The first lists are in: the k8s policies kept from the last run that
 * are no longer in the caches go. */
static void on_k8s_synced(void *ud, int err, const char *pending)
{
	struct pol_state *st = ud;
	if (!st->started || !st->k8s)
		return;
	if (err) {
		fibril_warn(st->m, "k8s policy caches not synced (%s): the policies of the last run stay "
				   "until they are",
			    pending ? pending : "?");
		return;
	}
	st->k8s_synced = true;
	/* events that came before this module started: from the caches */
	for (size_t r = 0; st->k8s_missed && k8s_policy_resources[r]; r++) {
		struct catch_up cu = {.st = st, .res = k8s_policy_resources[r]};
		st->k8s->list(st->k8s_ctx, cu.res, catch_up_one, &cu);
	}
	st->k8s_missed = 0;
	size_t gone = 0;
	for (size_t i = st->npols; i-- > 0;) {
		const struct pol_policy *p = st->pols[i];
		if (!p->from_k8s || st->k8s->get(st->k8s_ctx, resource_of(p->kind), p->ns, p->name))
			continue;
		pol_remove_at(st, i);
		gone++;
	}
	if (gone) {
		st->k8s_deleted += gone;
		repo_changed(st);
	}
	fibril_info(st->m, "k8s policy caches synced; %zu polic%s of the last run gone", gone,
		    gone == 1 ? "y" : "ies");
}

/* A namespace relabelled or a pod changed: the endpoints it concerns. */
static int on_k8s_scope(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	struct k8s_strs k;
	if (!k8s_event(st, ev, &k))
		return 0;
	const char *res = k.res, *ns = k.ns, *name = k.name;
	bool namespaces = !strcmp(res, FIBRIL_K8S_NAMESPACES), changed = false;
	st->sel_gen++;
	for (size_t i = 1; i < st->ep_hi; i++) {
		struct pol_ep *ep = st->eps[i];
		if (!ep || (namespaces ? strcmp(ep->pod_ns, name)
				       : (!ns || strcmp(ep->pod_ns, ns) || strcmp(ep->pod_name, name))))
			continue;
		sel_cache_ep(st, ep, -1);
		if (ep_refresh(st, ep))
			changed = ep->dirty = true;
		sel_cache_ep(st, ep, 1);
	}
	/* a cluster identity of that namespace: its namespace labels changed */
	for (size_t i = 0; namespaces && i < st->nrids; i++) {
		char rns[POL_NS_MAX];
		if (strcmp(labels_namespace(st->rids[i].labels, rns, sizeof(rns)), name))
			continue;
		sel_cache_rid(st, &st->rids[i], -1);
		if (rid_refresh(st, &st->rids[i]))
			changed = true;
		sel_cache_rid(st, &st->rids[i], 1);
	}
	if (changed) {
		mark_dependents(st);
		recompute(st);
	}
	return 0;
}

static void k8s_start(struct pol_state *st)
{
	st->k8s = (const struct fibril_k8s_ops *)fibril_service_lookup(st->m, FIBRIL_K8S_CAPABILITY,
								       FIBRIL_K8S_VERSION, &st->k8s_ctx);
	if (st->k8s && (!FIBRIL_SERVICE_HAS(st->k8s, get) || !st->k8s->watch_resource ||
			!st->k8s->wait_synced)) {
		fibril_warn(st->m, "the '%s' provider's table is incomplete: no policy from Kubernetes",
			    FIBRIL_K8S_CAPABILITY);
		st->k8s = NULL;
	}
	if (!st->k8s)
		return;
	const char *watched[] = {FIBRIL_K8S_NETWORKPOLICIES, FIBRIL_K8S_CNPS, FIBRIL_K8S_CCNPS,
				 FIBRIL_K8S_NAMESPACES, FIBRIL_K8S_PODS};
	for (size_t i = 0; i < sizeof(watched) / sizeof(watched[0]); i++) {
		int rc = st->k8s->watch_resource(st->k8s_ctx, watched[i]);
		if (rc < 0)
			fibril_warn(st->m, "k8s: cannot watch %s: %s", watched[i], strerror(-rc));
	}
	int rc = st->k8s->wait_synced(st->k8s_ctx, k8s_policy_resources, 120000, on_k8s_synced, st);
	if (rc < 0)
		fibril_warn(st->m, "k8s: cannot wait for the policy caches: %s", strerror(-rc));
}

/* ---- capability --------------------------------------------------------------------------- */

static uint64_t op_revision(void *ctx)
{
	return ((struct pol_state *)ctx)->revision;
}

static int op_endpoint_state(void *ctx, uint16_t id, struct fibril_policy_endpoint_state *out)
{
	struct pol_state *st = ctx;
	if (!out || out->sz < offsetof(struct fibril_policy_endpoint_state, entries) +
				      sizeof(out->entries))
		return -EINVAL;
	const struct pol_ep *ep = st->eps[id];
	if (!ep)
		return -ENOENT;
	out->ingress_enforced = ep->ingress;
	out->egress_enforced = ep->egress;
	out->revision = ep->revision;
	out->entries = (uint32_t)ep->nentries;
	return 0;
}

static int op_rule_lookup(void *ctx, uint32_t rule_id, struct fibril_policy_rule *out)
{
	struct pol_state *st = ctx;
	if (!out || out->sz < FIBRIL_OFFSETOFEND(struct fibril_policy_rule, rule_index))
		return -EINVAL;
	const struct pol_rule_rec *r = rule_by_id(st, rule_id);
	if (!r)
		return -ENOENT;
	uint32_t sz = out->sz;
	memset(out, 0, FIBRIL_OFFSETOFEND(struct fibril_policy_rule, rule_index));
	out->sz = sz;
	out->id = r->id;
	snprintf(out->kind, sizeof(out->kind), "%s", pol_kind_name(r->kind));
	snprintf(out->source, sizeof(out->source), "%s", r->from_k8s ? "k8s" : "api");
	snprintf(out->namespace_, sizeof(out->namespace_), "%s", r->ns);
	snprintf(out->name, sizeof(out->name), "%s", r->name);
	snprintf(out->section, sizeof(out->section), "%s", section_name(r->ingress, r->deny));
	out->ingress = r->ingress;
	out->deny = r->deny;
	out->spec_index = r->spec;
	out->rule_index = r->index;
	return 0;
}

/* ---- module ------------------------------------------------------------------------------- */

static int policy_init(struct fibril_module *m)
{
	struct pol_state *st = calloc(1, sizeof(*st));
	if (!st || !(st->eps = calloc(POL_EP_MAX, sizeof(*st->eps)))) {
		free(st);
		fibril_module_set_error(m, "out of memory");
		return -ENOMEM;
	}
	st->m = m;
	st->dirfd = -1;
	fibril_module_set_data(m, st);
	st->ops.hdr.sz = sizeof(st->ops);
	st->ops.hdr.version = FIBRIL_POLICY_VERSION;
	st->ops.revision = op_revision;
	st->ops.endpoint_state = op_endpoint_state;
	st->ops.rule_lookup = op_rule_lookup;
	int rc;
	if ((rc = fibril_service_provide(m, FIBRIL_POLICY_CAPABILITY, &st->ops.hdr, st))) {
		fibril_module_set_error(m, "cannot provide '%s': %s", FIBRIL_POLICY_CAPABILITY,
					strerror(-rc));
		return rc;
	}
	if ((rc = fibril_api_route(m, "GET", "/v1/policy", 0, get_policy, st)) ||
	    (rc = fibril_api_route(m, "PUT", "/v1/policy", 0, put_policy, st)) ||
	    (rc = fibril_api_route(m, "GET", "/v1/policy/trace", 0, get_trace, st)) ||
	    (rc = fibril_api_route(m, "GET", "/v1/policy/selectors", 0, get_selectors, st)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/policy", 0, delete_all, st)) ||
	    (rc = fibril_api_route(m, "DELETE", "/v1/policy/{name}", 0, delete_one, st))) {
		fibril_module_set_error(m, "cannot register the /v1/policy routes: %s", strerror(-rc));
		return rc;
	}
	const char *topics[] = {FIBRIL_ENDPOINT_TOPIC_CREATED, FIBRIL_ENDPOINT_TOPIC_UPDATED,
				FIBRIL_ENDPOINT_TOPIC_DELETED};
	for (size_t i = 0; i < 3; i++)
		if (!fibril_bus_subscribe(m, topics[i], 1, on_endpoint_event, st)) {
			fibril_module_set_error(m, "cannot subscribe to %s", topics[i]);
			return -ENOMEM;
		}
	const char *id_topics[] = {FIBRIL_ENDPOINT_TOPIC_IDENTITY_ADDED,
				   FIBRIL_ENDPOINT_TOPIC_IDENTITY_DELETED};
	for (size_t i = 0; i < 2; i++)
		if (!fibril_bus_subscribe(m, id_topics[i], 1, on_identity_event, st)) {
			fibril_module_set_error(m, "cannot subscribe to %s", id_topics[i]);
			return -ENOMEM;
		}
	const char *k8s_topics[] = {FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_NETWORKPOLICIES,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CNPS,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_CCNPS,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_NAMESPACES,
				    FIBRIL_K8S_TOPIC_PREFIX FIBRIL_K8S_PODS};
	for (size_t i = 0; i < 5; i++)
		if (!fibril_bus_subscribe(m, k8s_topics[i], 1, i < 3 ? on_k8s_policy : on_k8s_scope, st)) {
			fibril_module_set_error(m, "cannot subscribe to %s", k8s_topics[i]);
			return -ENOMEM;
		}
	static const char *const labels[] = {"resource", "result", NULL};
	struct fibril_metric_opts mo = {.sz = sizeof(mo), .type = FIBRIL_METRIC_COUNTER,
					.name = "fibril_policy_k8s_objects_total",
					.help = "Kubernetes policy objects by resource and result "
						"(applied, invalid, deleted)",
					.labels = labels};
	st->m_k8s_invalid = fibril_metric_register(m, &mo);
	return 0;
}

static int policy_start(struct fibril_module *m)
{
	struct pol_state *st = fibril_module_data(m);
	errno = 0;
	st->dp = (const struct fibril_datapath_ops *)fibril_service_lookup(
		m, FIBRIL_DATAPATH_CAPABILITY, 2, &st->dp_ctx);
	if (!st->dp || !FIBRIL_SERVICE_HAS(st->dp, policy_list) || !st->dp->policy_upsert ||
	    !st->dp->policy_remove || !st->dp->policy_enforce || !st->dp->policy_list) {
		fibril_module_set_error(m, "no usable '%s' provider (interface version 2 with the "
					   "policy functions): %s",
					FIBRIL_DATAPATH_CAPABILITY,
					errno == EPROTO ? "its interface is too old" : "missing");
		st->dp = NULL;
		return -EPROTO;
	}
	st->epops = (const struct fibril_endpoint_ops *)fibril_service_lookup(
		m, FIBRIL_ENDPOINT_CAPABILITY, 1, &st->ep_ctx);
	char why[512];
	int rc = state_open(st, why, sizeof(why));
	if (rc < 0) {
		fibril_module_set_error(m, "%s", why);
		return rc;
	}
	state_load(st);
	st->started = true;
	k8s_start(st);
	if (st->epops && st->epops->foreach)
		st->epops->foreach(st->ep_ctx, ep_seen, st);
	adopt_map(st);
	st->full = true;
	recompute(st);
	fibril_info(m, "policy enforcement on; %s", st->epops ? "endpoints followed"
							      : "no endpoint module");
	return 0;
}

static void policy_stop(struct fibril_module *m)
{
	struct pol_state *st = fibril_module_data(m);
	/* the datapath keeps enforcing what is in place */
	st->started = false;
	st->dp = NULL;
	st->epops = NULL;
	st->k8s = NULL;
	st->k8s_synced = false;
	if (st->dirfd >= 0)
		close(st->dirfd);
	st->dirfd = -1;
	pol_policies_free(st->pols, st->npols);
	st->pols = NULL;
	st->npols = 0;
	sel_cache_clear(st);
	for (size_t i = 0; i < POL_EP_MAX; i++) {
		ep_free(st->eps[i]);
		st->eps[i] = NULL;
	}
	free(st->cidrs);
	st->cidrs = NULL;
	st->ncidrs = 0;
	rules_free(st);
	st->next_rule_id = 0;
}

static void policy_fini(struct fibril_module *m)
{
	struct pol_state *st = fibril_module_data(m);
	if (!st)
		return;
	for (size_t i = 0; st->eps && i < POL_EP_MAX; i++)
		ep_free(st->eps[i]);
	free(st->eps);
	rids_free(st);
	pol_policies_free(st->pols, st->npols);
	sel_cache_clear(st);
	free(st->cidrs);
	rules_free(st);
	if (st->dirfd >= 0)
		close(st->dirfd);
	free(st);
	fibril_module_set_data(m, NULL);
}

static int policy_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct pol_state *st = fibril_module_data(m);
	size_t n = 0;
	for (size_t i = 1; i < st->ep_hi; i++)
		n += st->eps[i] && (st->eps[i]->ingress || st->eps[i]->egress);
	return snprintf(buf, len, "%zu policies, revision %llu, %zu endpoints enforced", st->npols,
			(unsigned long long)st->revision, n);
}

FIBRIL_MODULE(.name = POL_MODULE, .version = "1.0.0",
	      .description = "network policy: NetworkPolicy and CiliumNetworkPolicy at L3/L4 in the eBPF datapath",
	      .provides = FIBRIL_LIST(FIBRIL_POLICY_CAPABILITY),
	      .requires = FIBRIL_LIST(FIBRIL_DATAPATH_CAPABILITY),
	      .wants = FIBRIL_LIST(FIBRIL_ENDPOINT_CAPABILITY, FIBRIL_K8S_CAPABILITY),
	      .init = policy_init,
	      .start = policy_start, .stop = policy_stop, .fini = policy_fini,
	      .summary = policy_summary);
