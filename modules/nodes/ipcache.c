/* modules/nodes/ipcache.c - the ipcache through the kvstore (Cilium's
 * state/ip/v1/default/<ip>): every local endpoint's address is published
 * with its identity, this node's IP (HostIP) and name, held by the node
 * registry's lease (so the entries of a node whose agent is gone expire with
 * its registry key); every node reads the prefix whole once the registry is
 * read, then watches it, and writes each remote endpoint into the
 * datapath's LPM ipcache (address/32 or /128 -> identity). An entry is
 * programmed only while its node is known: a node that is gone takes its
 * entries out of the datapath (nodes_ipcache_node_changed), one that comes
 * back puts them again. This node's IP is `host` in the ipcache (route.c
 * makes the others' `remote-node` and their pod CIDRs `world`). Remote
 * entries are kept in a hash table by address (ipcache_table.c; 100,000
 * endpoints per cluster is the scale this is measured at). A remote record
 * is bound to its writer: refused unless its identity is a cluster one and
 * it lies in the pod CIDRs of the node it names, with that node's HostIP
 * (checked again whenever its node changes). GET /v1/ipcache lists them. */
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

/* ---- the datapath ----------------------------------------------------------------------------- */

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The known node of that name: a table by name hash, rebuilt after the
 * nodes changed (nodes_ipcache_node_changed), so a read of 100,000 entries
 * of 1,000 nodes does not walk the node list for each. */
static struct node_entry *node_of(struct nodes *s, const char *name)
{
	struct nodes_ipcache *c = &s->ipc;
	if (!c->node_table_valid) {
		size_t want = 16;
		while (want < s->n_nodes * 2 + 2)
			want *= 2;
		if (want != c->node_slots) {
			struct node_entry **t = calloc(want, sizeof(*t));
			if (!t)
				goto walk;
			free(c->node_table);
			c->node_table = t;
			c->node_slots = want;
		} else {
			memset(c->node_table, 0, want * sizeof(*c->node_table));
		}
		for (struct node_entry *n = s->nodes; n; n = n->next) {
			size_t i = name_hash(n->n.name) & (c->node_slots - 1);
			while (c->node_table[i])
				i = (i + 1) & (c->node_slots - 1);
			c->node_table[i] = n;
		}
		c->node_table_valid = true;
	}
	for (size_t i = name_hash(name) & (c->node_slots - 1); c->node_table[i];
	     i = (i + 1) & (c->node_slots - 1))
		if (!strcmp(c->node_table[i]->n.name, name))
			return c->node_table[i];
	return NULL;
walk:
	for (struct node_entry *n = s->nodes; n; n = n->next)
		if (!strcmp(n->n.name, name))
			return n;
	return NULL;
}

/* into the page's batch: false when it cannot go there */
static bool batch_add(struct nodes *s, struct nodes_ip *e)
{
	struct nodes_ipcache *c = &s->ipc;
	/* (an older datapath: one entry at a time, as its entries are shorter) */
	if (!c->batching || !FIBRIL_SERVICE_HAS(s->dp, ipcache_upsert_batch) ||
	    !s->dp->ipcache_upsert_batch || !nodes_dp_owned(s))
		return false;
	if (c->batch_n == c->batch_cap) {
		size_t cap = c->batch_cap ? c->batch_cap * 2 : 1024;
		struct fibril_datapath_ipcache_entry *b = realloc(c->batch, cap * sizeof(*b));
		if (b)
			c->batch = b;
		struct nodes_ip **of = b ? realloc(c->batch_of, cap * sizeof(*of)) : NULL;
		if (!of)
			return false;
		c->batch_of = of;
		c->batch_cap = cap;
	}
	struct fibril_datapath_ipcache_entry *b = &c->batch[c->batch_n];
	memset(b, 0, sizeof(*b));
	b->sz = sizeof(*b);
	b->source = FIBRIL_DATAPATH_IPCACHE_SOURCE_REMOTE_ENDPOINT;
	b->family = e->r.family;
	b->prefix_len = e->r.family == 4 ? 32 : 128;
	b->identity = e->r.identity;
	memcpy(b->addr, e->r.addr, sizeof(b->addr));
	if (e->r.host_family) {
		b->tunnel_family = e->r.host_family;
		memcpy(b->tunnel_endpoint, e->r.host, sizeof(b->tunnel_endpoint));
	}
	c->batch_of[c->batch_n++] = e;
	e->programmed = true; /* the flush takes it back if the write fails */
	return true;
}

/* the page's batch into the datapath, in one call */
static void batch_flush(struct nodes *s)
{
	struct nodes_ipcache *c = &s->ipc;
	char err[256] = "";
	size_t done = 0;
	if (!c->batch_n)
		return;
	int rc = s->dp->ipcache_upsert_batch(s->dpctx, c->batch, c->batch_n, &done, err, sizeof(err));
	if (done > c->batch_n)
		done = c->batch_n;
	c->stats.programmed += done;
	if (rc) {
		fibril_warn(s->m, "ipcache: %zu of %zu entries not written: %s", c->batch_n - done,
			    c->batch_n, err[0] ? err : strerror(-rc));
		for (size_t i = done; i < c->batch_n; i++) {
			c->batch_of[i]->programmed = false;
			c->stats.errors++;
		}
	}
	c->batch_n = 0;
}

static void dp_put(struct nodes *s, struct nodes_ip *e)
{
	if (!s->dp) {
		e->programmed = true; /* nothing to program: known is all there is */
		return;
	}
	if (batch_add(s, e))
		return;
	/* the host IP goes with it: tunnel mode's endpoint for this pod (a /32
	 * without one would shadow its node CIDR's entry and leave the tunnel) */
	int rc = nodes_dp_ipcache_put(s, FIBRIL_DATAPATH_IPCACHE_SOURCE_REMOTE_ENDPOINT, e->r.family,
				      e->r.addr, e->r.family == 4 ? 32 : 128,
				      e->r.identity, e->r.host_family, e->r.host);
	if (rc) {
		s->ipc.stats.errors++;
		return;
	}
	e->programmed = true;
	s->ipc.stats.programmed++;
}

static void dp_del(struct nodes *s, struct nodes_ip *e)
{
	char err[256] = "", a[INET6_ADDRSTRLEN];
	if (!e->programmed)
		return;
	e->programmed = false;
	if (!s->dp)
		return;
	int rc = nodes_dp_ipcache_del(s, FIBRIL_DATAPATH_IPCACHE_SOURCE_REMOTE_ENDPOINT, e->r.family,
				      e->r.addr, e->r.family == 4 ? 32 : 128, err, sizeof(err));
	if (rc && rc != -ENOENT) {
		s->ipc.stats.errors++;
		fibril_warn(s->m, "ipcache %s: %s", nodes_ip_text(e->r.family, e->r.addr, a, sizeof(a)),
			    err[0] ? err : strerror(-rc));
		return;
	}
	s->ipc.stats.removed++;
}

/* program it when its node is known and it is bound to that node, else
 * keep it out of the datapath */
static void settle(struct nodes *s, struct nodes_ip *e)
{
	if (e->local)
		return;
	struct node_entry *n = node_of(s, e->r.node);
	if (n && !nodes_ip_bound(n, &e->r, NULL, 0))
		dp_put(s, e);
	else
		dp_del(s, e);
}

static void drop(struct nodes *s, struct nodes_ip *e)
{
	dp_del(s, e);
	nodes_ipc_unlink(&s->ipc, e);
	nodes_ipc_entry_free(e);
}

/* ---- remote entries: read and watch ---------------------------------------------------------- */

/* one remote endpoint record from either source (the kvstore's key, or a
 * CiliumEndpoint object: ipcache_crd.c), `what` naming it for the log:
 * ours are skipped; bound to its writer or refused */
void nodes_ipcache_apply(struct nodes *s, const struct nodes_ip_record *rr, const char *what)
{
	const struct nodes_ip_record r = *rr;
	char why[NODES_WHY_LEN];
	struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, r.family, r.addr);
	if (!strcmp(r.node, s->self.name)) {
		if (e)
			e->mark = true;
		return; /* ours: the endpoint module put it in the datapath */
	}
	if (e && e->local)
		return; /* a remote record for one of our addresses: ours wins here */
	/* bound to its writer: a cluster identity, and (its node known; else
	 * settle checks when the node comes) in that node's CIDRs, its HostIP */
	struct node_entry *owner = node_of(s, r.node);
	struct nodes_ip_compact rc = {.family = r.family, .host_family = r.host_family};
	memcpy(rc.addr, r.addr, sizeof(rc.addr));
	memcpy(rc.host, r.host, sizeof(rc.host));
	if (nodes_ip_identity_check(r.identity, why, sizeof(why)) ||
	    (owner && nodes_ip_bound(owner, &rc, why, sizeof(why)))) {
		s->ipc.stats.refused++;
		fibril_warn(s->m, "ipcache %s: %s; refused", what, why);
		if (e)
			e->mark = true; /* keep what was known rather than drop it */
		return;
	}
	if (!e) {
		if (!(e = nodes_ipc_insert(&s->ipc, &r)))
			return;
		s->ipc.stats.added++;
	} else if (e->r.identity != r.identity || strcmp(e->r.node, r.node) ||
		   e->r.host_family != r.host_family || memcmp(e->r.host, r.host, 16)) {
		nodes_ipc_rec_set(&e->r, &r); /* settle's upsert replaces the datapath's entry */
		s->ipc.stats.updated++;
	} else {
		e->mark = true;
		if (!e->programmed)
			settle(s, e);
		return;
	}
	e->mark = true;
	settle(s, e);
}

/* a remote address gone from its source (ours are put back by the caller) */
void nodes_ipcache_forget(struct nodes *s, uint8_t family, const uint8_t *addr)
{
	struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, family, addr);
	if (!e || e->local)
		return;
	s->ipc.stats.deleted++;
	drop(s, e);
}

/* one key read or watched */
static void apply_put(struct nodes *s, const struct fibril_kv *kv)
{
	const char *ip = kv->key + strlen(NODES_IP_PREFIX);
	struct nodes_ip_record r = {0};
	char why[NODES_WHY_LEN], what[512];
	if (strncmp(kv->key, NODES_IP_PREFIX, strlen(NODES_IP_PREFIX)) ||
	    nodes_ip_record_decode(kv->value, kv->value_len, ip, &r, why, sizeof(why))) {
		if (strncmp(kv->key, NODES_IP_PREFIX, strlen(NODES_IP_PREFIX)))
			snprintf(why, sizeof(why), "not under %s", NODES_IP_PREFIX);
		s->ipc.stats.bad_records++;
		fibril_warn(s->m, "ipcache key %s (revision %lld): %s; ignored", kv->key,
			    (long long)kv->mod_revision, why);
		struct nodes_ip *stale = nodes_ipc_lookup(&s->ipc, r.family, r.addr);
		if (stale && r.family)
			stale->mark = true; /* keep what was known rather than drop it */
		return;
	}
	snprintf(what, sizeof(what), "key %.400s (revision %lld)", kv->key,
		 (long long)kv->mod_revision);
	nodes_ipcache_apply(s, &r, what);
}

static void apply_delete(struct nodes *s, const struct fibril_kv *kv)
{
	const char *ip = kv->key + strlen(NODES_IP_PREFIX);
	uint8_t addr[16] = {0}, family = 0;
	if (strncmp(kv->key, NODES_IP_PREFIX, strlen(NODES_IP_PREFIX)))
		return;
	if (inet_pton(AF_INET, ip, addr) == 1)
		family = 4;
	else if (inet_pton(AF_INET6, ip, addr) == 1)
		family = 6;
	else
		return;
	struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, family, addr);
	if (!e)
		return;
	if (e->local) {
		/* ours went (by hand, or the lease): put it back */
		e->published = false;
		nodes_ipcache_publish(s);
		return;
	}
	s->ipc.stats.deleted++;
	drop(s, e);
}

static void ipc_read(struct nodes *s);

static void on_watch(void *ud, int err, enum fibril_kv_event_type type, const struct fibril_kv *kv,
		     int64_t revision)
{
	struct nodes *s = ud;
	(void)revision;
	if (s->stopping)
		return;
	if (err) {
		if (err == -ERANGE) {
			s->ipc.stats.resyncs++;
			ipc_read(s);
		}
		return;
	}
	if (type == FIBRIL_KV_EVENT_PUT)
		apply_put(s, kv);
	else
		apply_delete(s, kv);
}

static void on_retry(struct fibril_timer *t, void *ud)
{
	struct nodes *s = ud;
	(void)t;
	s->ipc.retry = NULL;
	if (!s->stopping && !s->ipc.synced)
		ipc_read(s);
}

/* One page of the read (the whole prefix when the kvstore has no paged
 * read): the marks were cleared when the read started; after the last page
 * what no page (nor the watch meanwhile) marked is gone. */
static void on_page(void *ud, int err, const struct fibril_kv *kvs, size_t n, bool more,
		    int64_t revision)
{
	struct nodes *s = ud;
	if (!more)
		s->ipc.reading = false;
	if (s->stopping)
		return;
	if (err) {
		fibril_warn(s->m, "reading the ipcache (%s): %s; retrying", NODES_IP_PREFIX,
			    strerror(-err));
		if (!s->ipc.retry)
			s->ipc.retry = fibril_timer_add(
				s->m, (uint64_t)fibril_config_duration_ms(s->m, "retry"), 0, on_retry, s);
		return;
	}
	s->ipc.batching = true;
	for (size_t i = 0; i < n; i++)
		apply_put(s, &kvs[i]);
	s->ipc.batching = false;
	batch_flush(s);
	if (more)
		return;
	for (size_t b = 0; b < s->ipc.nbuckets; b++) {
		for (struct nodes_ip *e = s->ipc.buckets[b], *next; e; e = next) {
			next = e->next;
			if (!e->mark && !e->local) {
				s->ipc.stats.deleted++;
				drop(s, e);
			}
		}
	}
	s->ipc.synced = true;
	if (!s->ipc.watch)
		s->ipc.watch = s->kv->watch(s->kvctx, NODES_IP_PREFIX, revision + 1, on_watch, s);
	fibril_info(s->m, "ipcache read at revision %lld: %zu entries", (long long)revision,
		    s->ipc.count);
}

static void on_get(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	on_page(ud, err, kvs, n, false, revision);
}

/* Keys per page of the read. etcd (3.4) collects every key of the range
 * left for each page before it cuts the page, so a page's cost grows with
 * what is left: 100,000 keys in pages of 1,000 cost it ~50 times the keys,
 * in pages of 10,000 ~5 times (a page is ~3 MB of JSON, freed once applied). */
#define NODES_IPCACHE_PAGE 10000

static int cmp_text(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void cuts_free(struct nodes *s)
{
	for (size_t i = 0; i < s->ipc.ncuts; i++)
		free(s->ipc.cuts[i]);
	free(s->ipc.cuts);
	s->ipc.cuts = NULL;
	s->ipc.ncuts = 0;
}

/* Where to cut the prefix into `parts` key ranges for a read in parallel:
 * quantiles of the remote nodes' pod CIDR addresses in text order
 * (endpoint keys are their addresses as text, mostly inside their node's
 * CIDR, so each part holds about as many). Into s->ipc.cuts, ascending
 * and distinct; none when fewer than two nodes are known. */
static void split_keys(struct nodes *s, unsigned parts)
{
	size_t n = 0, i = 0;
	cuts_free(s);
	for (struct node_entry *e = s->nodes; e; e = e->next)
		n += e->n.n_cidrs;
	if (n < 2 || parts < 2)
		return;
	char (*texts)[64] = calloc(n, sizeof(*texts));
	char **order = calloc(n, sizeof(*order));
	s->ipc.cuts = calloc(parts - 1, sizeof(*s->ipc.cuts));
	if (texts && order && s->ipc.cuts) {
		for (struct node_entry *e = s->nodes; e; e = e->next)
			for (uint32_t c = 0; c < e->n.n_cidrs && i < n; c++, i++) {
				nodes_cidr_text(&e->n.cidrs[c], texts[i], sizeof(texts[i]));
				texts[i][strcspn(texts[i], "/")] = '\0';
				order[i] = texts[i];
			}
		qsort(order, i, sizeof(*order), cmp_text);
		for (unsigned k = 1; k < parts && i >= 2; k++) {
			const char *at = order[i * k / parts];
			const char *last = s->ipc.ncuts ? s->ipc.cuts[s->ipc.ncuts - 1] : NULL;
			char *key;
			if (last && strcmp(last + strlen(NODES_IP_PREFIX), at) >= 0)
				continue; /* not past the previous cut */
			if (asprintf(&key, "%s%s", NODES_IP_PREFIX, at) < 0)
				break;
			s->ipc.cuts[s->ipc.ncuts++] = key;
		}
	}
	free(texts);
	free(order);
}

static void ipc_read_failed(struct nodes *s)
{
	s->ipc.reading = false;
	if (!s->ipc.retry)
		s->ipc.retry = fibril_timer_add(
			s->m, (uint64_t)fibril_config_duration_ms(s->m, "retry"), 0, on_retry, s);
}

static void on_part_page(void *ud, int err, const struct fibril_kv *kvs, size_t n, bool more,
			 int64_t revision);

/* Parts first..last of a read in parts at `revision` (0: the current one):
 * part k reads from cut k-1 (the prefix for part 0) to cut k (the prefix's
 * end for the last part, ncuts). */
static void parts_start(struct nodes *s, size_t first, size_t last, int64_t revision)
{
	for (size_t k = first; k <= last && k <= s->ipc.ncuts && !s->stopping; k++) {
		const char *from = k ? s->ipc.cuts[k - 1] : NODES_IP_PREFIX;
		const char *to = k < s->ipc.ncuts ? s->ipc.cuts[k] : NODES_IP_PREFIX_END;
		if (s->kv->get_range(s->kvctx, from, to, revision, NODES_IPCACHE_PAGE, on_part_page,
				     s)) {
			s->ipc.parts_failed = true;
			break;
		}
		s->ipc.parts_running++;
	}
}

/* A page of one part of a read in parts. Without a revision to read at,
 * the first part starts alone and its first answer's revision is the one
 * every other part reads at. The read ends (sweep, watch) when every part
 * has ended. */
static void on_part_page(void *ud, int err, const struct fibril_kv *kvs, size_t n, bool more,
			 int64_t revision)
{
	struct nodes *s = ud;
	if (!err && !s->ipc.parts_started) {
		s->ipc.parts_started = true;
		s->ipc.read_revision = revision;
		parts_start(s, 1, s->ipc.ncuts, revision);
	}
	if (err)
		s->ipc.parts_failed = true;
	if (!more || err)
		s->ipc.parts_running--;
	if (s->stopping)
		return;
	if (!err && n) {
		fibril_debug(s->m, "ipcache read: %zu keys from %s", n, kvs[0].key);
		on_page(ud, 0, kvs, n, true, revision);
	}
	if (s->ipc.parts_running)
		return;
	if (s->ipc.parts_failed)
		on_page(ud, err ? err : -EIO, NULL, 0, false, 0);
	else
		on_page(ud, 0, NULL, 0, false, s->ipc.read_revision);
}

static void ipc_read(struct nodes *s)
{
	if (s->ipc.reading || s->stopping)
		return;
	s->ipc.reading = true;
	for (size_t b = 0; b < s->ipc.nbuckets; b++)
		for (struct nodes_ip *e = s->ipc.buckets[b]; e; e = e->next)
			e->mark = e->local;
	if (FIBRIL_SERVICE_HAS(s->kv, get_range) && s->kv->get_range) {
		split_keys(s, (unsigned)fibril_config_int(s->m, "ipcache-read-parts"));
		/* the registry's revision once (a failed read retries at the
		 * current one): every part starts at once */
		int64_t rev = s->ipc.start_revision;
		s->ipc.start_revision = 0;
		s->ipc.parts_started = rev > 0;
		s->ipc.parts_failed = false;
		s->ipc.read_revision = rev;
		s->ipc.parts_running = 0;
		parts_start(s, 0, rev > 0 ? s->ipc.ncuts : 0, rev);
		if (!s->ipc.parts_running)
			ipc_read_failed(s);
		return;
	}
	bool paged = FIBRIL_SERVICE_HAS(s->kv, get_paged) && s->kv->get_paged;
	if (paged ? s->kv->get_paged(s->kvctx, NODES_IP_PREFIX, NODES_IPCACHE_PAGE, on_page, s)
		  : s->kv->get(s->kvctx, NODES_IP_PREFIX, true, on_get, s))
		ipc_read_failed(s);
}

void nodes_ipcache_start(struct nodes *s, int64_t revision)
{
	s->ipc.start_revision = revision;
	if (s->self.has_ipv4)
		nodes_ipcache_host(s, 4, &s->self.ipv4);
	if (s->self.has_ipv6)
		nodes_ipcache_host(s, 6, &s->self.ipv6);
	ipc_read(s);
}

void nodes_ipcache_host(struct nodes *s, int family, const void *addr)
{
	nodes_dp_ipcache_put(s, FIBRIL_DATAPATH_IPCACHE_SOURCE_NODE, family, addr,
			     family == 4 ? 32 : 128, FIBRIL_IDENTITY_HOST, 0, NULL);
}

void nodes_ipcache_node_changed(struct nodes *s, const char *name)
{
	s->ipc.node_table_valid = false;
	for (size_t b = 0; b < s->ipc.nbuckets; b++)
		for (struct nodes_ip *e = s->ipc.buckets[b]; e; e = e->next)
			if (!e->local && !strcmp(e->r.node, name))
				settle(s, e);
}

/* ---- local endpoints: publish ------------------------------------------------------------------ */

static void on_published(void *ud, int err, int64_t revision)
{
	struct nodes *s = ud;
	(void)revision;
	if (s->ipc.puts_inflight)
		s->ipc.puts_inflight--;
	if (err && !s->stopping) {
		s->ipc.stats.errors++;
		s->ipc.publish_failed = true;
	}
}

static void publish_one(struct nodes *s, struct nodes_ip *e)
{
	char key[sizeof(NODES_IP_PREFIX) + INET6_ADDRSTRLEN], a[INET6_ADDRSTRLEN];
	snprintf(key, sizeof(key), NODES_IP_PREFIX "%s",
		 nodes_ip_text(e->r.family, e->r.addr, a, sizeof(a)));
	struct nodes_ip_record full;
	nodes_ipc_rec_expand(&e->r, &full);
	char *json = nodes_ip_record_encode(&full);
	if (!json)
		return;
	if (s->kv->put(s->kvctx, key, json, strlen(json), s->lease, on_published, s) == 0) {
		s->ipc.puts_inflight++;
		e->published = true;
		s->ipc.stats.published++;
	}
	free(json);
}

void nodes_ipcache_publish(struct nodes *s)
{
	if (!s->lease || s->stopping || s->ipc_crd)
		return;
	if (s->ipc.publish_failed || s->ipc.lease_published != s->lease) {
		/* a new lease, or a put failed: everything of ours again */
		s->ipc.publish_failed = false;
		s->ipc.lease_published = s->lease;
		for (size_t b = 0; b < s->ipc.nbuckets; b++)
			for (struct nodes_ip *e = s->ipc.buckets[b]; e; e = e->next)
				if (e->local)
					e->published = false;
	}
	for (size_t b = 0; b < s->ipc.nbuckets; b++)
		for (struct nodes_ip *e = s->ipc.buckets[b]; e; e = e->next)
			if (e->local && !e->published)
				publish_one(s, e);
}

static void local_put(struct nodes *s, const struct fibril_endpoint_event *ev, uint8_t family,
		      const void *addr)
{
	struct nodes_ip_record r = {.family = family, .identity = ev->identity};
	memcpy(r.addr, addr, family == 4 ? 4 : 16);
	if (s->self.has_ipv4) {
		r.host_family = 4;
		memcpy(r.host, &s->self.ipv4, 4);
	} else if (s->self.has_ipv6) {
		r.host_family = 6;
		memcpy(r.host, &s->self.ipv6, 16);
	}
	snprintf(r.node, sizeof(r.node), "%s", s->self.name);
	snprintf(r.pod_namespace, sizeof(r.pod_namespace), "%s", ev->pod_namespace);
	snprintf(r.pod_name, sizeof(r.pod_name), "%s", ev->pod_name);
	struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, family, r.addr);
	if (e && !e->local) {
		drop(s, e); /* a remote record for an address now ours */
		e = NULL;
	}
	if (!e && !(e = nodes_ipc_insert(&s->ipc, &r)))
		return;
	if (e->local && e->r.identity == r.identity && e->published)
		return;
	nodes_ipc_rec_set(&e->r, &r);
	e->local = true;
	e->published = false;
	nodes_ipcache_publish(s);
}

static void local_delete(struct nodes *s, uint8_t family, const void *addr)
{
	uint8_t a16[16] = {0};
	char key[sizeof(NODES_IP_PREFIX) + INET6_ADDRSTRLEN], a[INET6_ADDRSTRLEN];
	memcpy(a16, addr, family == 4 ? 4 : 16);
	struct nodes_ip *e = nodes_ipc_lookup(&s->ipc, family, a16);
	if (!e || !e->local)
		return;
	nodes_ipc_unlink(&s->ipc, e);
	nodes_ipc_entry_free(e);
	if (!s->lease || s->ipc_crd)
		return; /* it goes with the old lease, or as a CiliumEndpoint */
	snprintf(key, sizeof(key), NODES_IP_PREFIX "%s", nodes_ip_text(family, a16, a, sizeof(a)));
	if (s->kv->del(s->kvctx, key, false, on_published, s) == 0)
		s->ipc.puts_inflight++;
	s->ipc.stats.unpublished++;
}

int nodes_ipcache_on_endpoint(const struct fibril_event *ev, void *ud)
{
	struct nodes *s = ud;
	const struct fibril_endpoint_event *e = ev->payload;
	if ((!s->kv && !s->ipc_crd) || s->stopping || ev->payload_len < sizeof(*e) ||
	    e->sz < sizeof(*e))
		return 0;
	bool deleted = !strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_DELETED);
	if (s->ipc_crd)
		nodes_ipcache_crd_endpoint(s, e, deleted);
	if (e->has_ipv4) {
		if (deleted)
			local_delete(s, 4, &e->ipv4);
		else
			local_put(s, e, 4, &e->ipv4);
	}
	if (e->has_ipv6) {
		if (deleted)
			local_delete(s, 6, &e->ipv6);
		else
			local_put(s, e, 6, &e->ipv6);
	}
	return 0;
}

/* ---- lifecycle, API -------------------------------------------------------------------------- */

void nodes_ipcache_stop(struct nodes *s)
{
	/* entries stay in the datapath and the kvstore: a restart adopts them */
	if (s->ipc.watch && s->kv)
		s->kv->unwatch(s->kvctx, s->ipc.watch);
	s->ipc.watch = NULL;
	fibril_timer_cancel(s->ipc.retry);
	s->ipc.retry = NULL;
}

void nodes_ipcache_free(struct nodes *s)
{
	fibril_timer_cancel(s->ipc.retry);
	s->ipc.retry = NULL;
	for (size_t b = 0; b < s->ipc.nbuckets; b++) {
		for (struct nodes_ip *e = s->ipc.buckets[b], *next; e; e = next) {
			next = e->next;
			nodes_ipc_entry_free(e);
		}
	}
	free(s->ipc.buckets);
	s->ipc.buckets = NULL;
	free(s->ipc.batch);
	free(s->ipc.batch_of);
	cuts_free(s);
	s->ipc.batch = NULL;
	s->ipc.batch_of = NULL;
	s->ipc.batch_n = s->ipc.batch_cap = 0;
	free(s->ipc.node_table);
	s->ipc.node_table = NULL;
	s->ipc.node_slots = 0;
	s->ipc.node_table_valid = false;
	s->ipc.nbuckets = s->ipc.count = 0;
}

static struct json_object *entry_json(const char *prefix, uint32_t identity, const char *source,
				      const char *node, const char *host, bool programmed)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "prefix", json_object_new_string(prefix));
	json_object_object_add(o, "identity", json_object_new_int64(identity));
	json_object_object_add(o, "source", json_object_new_string(source));
	json_object_object_add(o, "node", json_object_new_string(node));
	if (host)
		json_object_object_add(o, "host-ip", json_object_new_string(host));
	json_object_object_add(o, "programmed", json_object_new_boolean(programmed));
	return o;
}

static void add_node_entries(struct json_object *arr, const struct fibril_node *n, bool self,
			     bool routed)
{
	char a[INET6_ADDRSTRLEN], p[64];
	uint32_t id = self ? FIBRIL_IDENTITY_HOST : FIBRIL_IDENTITY_REMOTE_NODE;
	if (n->has_ipv4) {
		snprintf(p, sizeof(p), "%s/32", inet_ntop(AF_INET, &n->ipv4, a, sizeof(a)));
		json_object_array_add(arr, entry_json(p, id, "node", n->name, NULL, self || routed));
	}
	if (n->has_ipv6) {
		snprintf(p, sizeof(p), "%s/128", inet_ntop(AF_INET6, &n->ipv6, a, sizeof(a)));
		json_object_array_add(arr, entry_json(p, id, "node", n->name, NULL, self || routed));
	}
	for (uint32_t i = 0; !self && i < n->n_cidrs && i < FIBRIL_NODE_MAX_CIDRS; i++)
		json_object_array_add(arr, entry_json(nodes_cidr_text(&n->cidrs[i], p, sizeof(p)),
						      FIBRIL_IDENTITY_WORLD, "node", n->name, NULL,
						      routed));
}

void nodes_ipcache_get(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct nodes *s = ud;
	(void)req;
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	json_object_object_add(o, "synced", json_object_new_boolean(s->ipc.synced));
	add_node_entries(arr, &s->self, true, true);
	for (struct node_entry *n = s->nodes; n; n = n->next)
		add_node_entries(arr, &n->n, false, n->routed);
	for (size_t b = 0; b < s->ipc.nbuckets; b++) {
		for (struct nodes_ip *e = s->ipc.buckets[b]; e; e = e->next) {
			char a[INET6_ADDRSTRLEN], p[64], h[INET6_ADDRSTRLEN];
			snprintf(p, sizeof(p), "%s/%u", nodes_ip_text(e->r.family, e->r.addr, a, sizeof(a)),
				 e->r.family == 4 ? 32 : 128);
			struct json_object *j = entry_json(
				p, e->r.identity, e->local ? "local" : s->ipc_crd ? "crd" : "kvstore", e->r.node,
				e->r.host_family ? nodes_ip_text(e->r.host_family, e->r.host, h, sizeof(h))
						 : NULL,
				e->local ? true : e->programmed);
			if (e->r.pod)
				json_object_object_add(j, "pod", json_object_new_string(e->r.pod));
			if (e->local)
				json_object_object_add(j, "published", json_object_new_boolean(e->published));
			json_object_array_add(arr, j);
		}
	}
	json_object_object_add(o, "entries", arr);
	struct json_object *m = json_object_new_object();
#define STAT(k, v) json_object_object_add(m, k, json_object_new_int64((int64_t)s->ipc.stats.v))
	STAT("added", added);
	STAT("updated", updated);
	STAT("deleted", deleted);
	STAT("programmed", programmed);
	STAT("removed", removed);
	STAT("published", published);
	STAT("unpublished", unpublished);
	STAT("bad-records", bad_records);
	STAT("records-refused", refused);
	STAT("errors", errors);
	STAT("resyncs", resyncs);
#undef STAT
	json_object_object_add(o, "metrics", m);
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}
