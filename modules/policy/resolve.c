/* modules/policy/resolve.c - one endpoint's policy, resolved from the
 * repository: the rules that select it, each peer's identities (through
 * the selector cache, the CIDR identities, the entities, a NetworkPolicy
 * ipBlock's local pods) and ports (ranges as aligned blocks, named ports
 * per pod) become map entries. pol_resolve's result is sorted by
 * pol_entry_cmp, one entry per key: a deny of a key wins over an allow and
 * names its rule, else the lowest rule ID; an allow that a deny of the
 * same identity covers is left out (the datapath's trie returns the longest
 * match only). With allow-localhost (the default) an endpoint whose
 * ingress is enforced also gets an allow of the host identity on every
 * port, rule 0, which a deny naming the host overrides. It reads the state
 * and writes nothing (program.c writes). */
#include "policy_state.h"

#include "grow.h"

#include <stdlib.h>
#include <string.h>

int pol_entry_cmp(const void *a, const void *b)
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

bool pol_entry_same_key(const struct pol_entry *x, const struct pol_entry *y)
{
	return x->dir == y->dir && x->identity == y->identity && x->proto == y->proto &&
	       x->bits == y->bits && x->port == y->port;
}

void pol_entry_vec_add(struct entry_vec *vec, struct pol_entry e)
{
	struct pol_entry *n = mod_grow(vec->v, vec->n, &vec->cap, sizeof(*n), 32);
	if (!n) {
		vec->oom = true;
		return;
	}
	vec->v = n;
	vec->v[vec->n++] = e;
}

void pol_ids_add(struct ids *s, uint32_t id)
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

static bool ipblock_holds_addr(const struct pol_cidr_rule *cr, int family, const void *addr)
{
	if (cr->cidr.family != family || !pol_addr_in(family, addr, &cr->cidr))
		return false;
	for (size_t e = 0; e < cr->nexcept; e++)
		if (pol_addr_in(family, addr, &cr->except[e]))
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
			pol_ids_add(out, ep->identity);
	}
}

void peer_identities(struct pol_state *st, const struct pol_policy *pol,
		     const struct pol_peer *peer, struct ids *out)
{
	if (peer->all_peers) {
		pol_ids_add(out, 0);
		return;
	}
	if (!peer->any_l3) {
		if (peer->nports)
			pol_ids_add(out, 0); /* L4-only: every peer */
		return;
	}
	for (size_t s = 0; s < peer->nendpoints; s++) {
		const struct sel_entry *c = peer->endpoints[s].cached;
		for (size_t i = 0; c && i < c->nids; i++)
			pol_ids_add(out, c->ids[i].identity);
		for (size_t i = 1; !c && i < st->ep_hi; i++) {
			const struct pol_ep *ep = st->eps[i];
			if (ep && pol_selector_match(&peer->endpoints[s], ep->match_labels, pol->ns))
				pol_ids_add(out, ep->identity);
		}
		for (size_t i = 0; !c && i < st->nrids; i++) /* the cache holds them */
			if (pol_selector_match(&peer->endpoints[s], st->rids[i].match_labels, pol->ns))
				pol_ids_add(out, st->rids[i].identity);
	}
	if (pol->kind == POL_KIND_KNP)
		for (size_t c = 0; c < peer->ncidrs; c++)
			ipblock_pods(st, &peer->cidrs[c], out);
	for (size_t c = 0; c < peer->ncidrs; c++) {
		const struct pol_cidr_rule *cr = &peer->cidrs[c];
		if (cr->cidr.plen == 0) {
			pol_ids_add(out, FIBRIL_IDENTITY_WORLD);
			pol_ids_add(out, cr->cidr.family == 4 ? FIBRIL_IDENTITY_WORLD_IPV4
							  : FIBRIL_IDENTITY_WORLD_IPV6);
		}
		for (size_t i = 0; i < st->ncidrs; i++) {
			const struct pol_cidr *k = &st->cidrs[i].cidr;
			if (!pol_cidr_within(k, &cr->cidr))
				continue;
			bool excepted = false;
			for (size_t e = 0; e < cr->nexcept; e++)
				excepted = excepted || pol_cidr_within(k, &cr->except[e]);
			if (!excepted)
				pol_ids_add(out, st->cidrs[i].identity);
		}
	}
	uint32_t en = peer->entities;
	if (en & POL_ENT_ALL)
		pol_ids_add(out, 0);
	if (en & POL_ENT_WORLD) {
		pol_ids_add(out, FIBRIL_IDENTITY_WORLD);
		pol_ids_add(out, FIBRIL_IDENTITY_WORLD_IPV4);
		pol_ids_add(out, FIBRIL_IDENTITY_WORLD_IPV6);
		for (size_t i = 0; i < st->ncidrs; i++)
			pol_ids_add(out, st->cidrs[i].identity);
	}
	if (en & (POL_ENT_HOST | POL_ENT_CLUSTER))
		pol_ids_add(out, FIBRIL_IDENTITY_HOST);
	if (en & (POL_ENT_REMOTE_NODE | POL_ENT_CLUSTER))
		pol_ids_add(out, FIBRIL_IDENTITY_REMOTE_NODE);
	if (en & (POL_ENT_HEALTH | POL_ENT_CLUSTER))
		pol_ids_add(out, FIBRIL_IDENTITY_HEALTH);
	if (en & (POL_ENT_INIT | POL_ENT_CLUSTER))
		pol_ids_add(out, FIBRIL_IDENTITY_INIT);
	if (en & (POL_ENT_KUBE_APISERVER | POL_ENT_CLUSTER))
		pol_ids_add(out, FIBRIL_IDENTITY_KUBE_APISERVER);
	if (en & POL_ENT_CLUSTER) {
		for (size_t i = 1; i < st->ep_hi; i++)
			if (st->eps[i])
				pol_ids_add(out, st->eps[i]->identity);
		for (size_t i = 0; i < st->nrids; i++)
			pol_ids_add(out, st->rids[i].identity);
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
	pol_entry_vec_add(b->vec, e);
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
			pol_entry_vec_add(vec, t);
		return;
	}
	uint32_t id = t.identity;
	for (size_t i = 1; i < st->ep_hi; i++) {
		const struct pol_ep *ep = st->eps[i];
		if (!ep || (id && ep->identity != id) || !(t.port = named_port(ep, pp->name, pp->proto)))
			continue;
		t.identity = ep->identity;
		pol_entry_vec_add(vec, t);
	}
}

void peer_entries(struct pol_state *st, const struct pol_ep *subject,
		  const struct pol_peer *peer, const struct ids *ids, struct entry_vec *vec)
{
	for (size_t i = 0; i < ids->n; i++) {
		struct pol_entry t = {.identity = ids->v[i],
				      .dir = peer->ingress ? FIBRIL_DATAPATH_INGRESS
							   : FIBRIL_DATAPATH_EGRESS,
				      .deny = peer->deny,
				      .rule = peer->rule_id};
		if (!peer->nports) {
			pol_entry_vec_add(vec, t);
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
				pol_entry_vec_add(vec, t);
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
void pol_resolve(struct pol_state *st, const struct pol_ep *ep, struct entry_vec *vec,
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
			if (!pol_selector_match(&rule->subject, ep->subject_labels, pol->ns))
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
	/* allow-localhost: the node's own traffic (kubelet's probes) in, as
	 * Kubernetes requires; a rule making the same entry names it, a deny
	 * of the host's wins over it as over any allow */
	if (*ingress && st->allow_localhost)
		pol_entry_vec_add(vec, (struct pol_entry){.identity = FIBRIL_IDENTITY_HOST,
							  .dir = FIBRIL_DATAPATH_INGRESS,
							  .rule = POL_RULE_LOCALHOST});
	if (!vec->n)
		return;
	qsort(vec->v, vec->n, sizeof(*vec->v), pol_entry_cmp);
	/* one entry per key: a deny of the same key wins (sorted after the
	 * allows) and names its rule; else the lowest rule ID (sorted first) */
	size_t o = 0;
	for (size_t i = 0; i < vec->n; i++) {
		if (o && pol_entry_same_key(&vec->v[o - 1], &vec->v[i])) {
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
	for (size_t i = 0; i < vec->n; i++)
		if (vec->v[i].rule == POL_RULE_LOCALHOST)
			vec->v[i].rule = 0; /* no rule: allow-localhost */
}
