/* modules/datapath/dp_ipc_owner.c - the ipcache's owners (issue 22). The
 * nodes module (node IPs, pod CIDRs, remote endpoints), the policy module
 * (CIDR identities), the endpoints this datapath puts in place and the
 * datapath itself (world /0) all write the one LPM ipcache map. A table
 * in userspace keeps, per prefix, one claim per source (identity and
 * tunnel endpoint) and the map holds the claim of the highest source:
 *   datapath (world /0) > local endpoint > remote endpoint > node
 *   > CIDR policy > unspecified (an older caller)
 * (Cilium's ipcache keeps a resource owner and source per prefix the
 * same way). A claim replaces that source's earlier one; a removal takes
 * only the remover's claim, and the next one left, if any, is written back
 * (a tenant's ipBlock over a node's address neither replaces nor, once
 * deleted, removes the node's entry). A map write is made only when the
 * winner's value changes, so a batch of claims costs one bpf() call for
 * the entries that do. A prefix whose map write failed is written again
 * at its next claim. The ipcache calls of <fibril/datapath.h> are here
 * too: each entry is copied in by the SDK's growth rule (a shorter
 * caller's source reads as UNSPEC) and claimed. */
#include "datapath.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <fibril/datapath.h>
#include <fibril/service.h>

struct dp_ipc_claim {
	uint8_t source;
	struct dp_ipcache_value value;
};

struct dp_ipc_prefix {
	struct dp_ipc_prefix *next;
	struct dp_ipcache_key key;
	bool in_map;   /* the map holds the winner's value */
	uint8_t n;     /* claims, highest source first */
	struct dp_ipc_claim claims[];
};

static struct dp_ipc_table *table(struct datapath *dp)
{
	if (!dp->ipc)
		dp->ipc = calloc(1, sizeof(*dp->ipc));
	return dp->ipc;
}

static uint32_t key_hash(const struct dp_ipcache_key *k)
{
	const uint8_t *b = (const uint8_t *)k;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

/* the slot that points at k's prefix (or the chain's end) */
static struct dp_ipc_prefix **slot_of(struct dp_ipc_table *t, const struct dp_ipcache_key *k)
{
	struct dp_ipc_prefix **p = &t->buckets[key_hash(k) & (t->nbuckets - 1)];
	while (*p && memcmp(&(*p)->key, k, sizeof(*k)))
		p = &(*p)->next;
	return p;
}

static int grow(struct dp_ipc_table *t)
{
	if (t->nbuckets && t->count < t->nbuckets)
		return 0;
	size_t nb = t->nbuckets ? t->nbuckets * 2 : 1024;
	struct dp_ipc_prefix **b = calloc(nb, sizeof(*b));
	if (!b)
		return t->nbuckets ? 0 : -ENOMEM; /* a longer chain will do */
	for (size_t i = 0; i < t->nbuckets; i++)
		for (struct dp_ipc_prefix *p = t->buckets[i], *next; p; p = next) {
			next = p->next;
			size_t j = key_hash(&p->key) & (nb - 1);
			p->next = b[j];
			b[j] = p;
		}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
	return 0;
}

/* Set source's claim on k in the table. *write: the map must be written
 * with *winner (the winner changed, or the map missed it). */
static int claim_set(struct dp_ipc_table *t, const struct dp_ipcache_key *k, uint8_t source,
		     const struct dp_ipcache_value *given, bool *write,
		     const struct dp_ipcache_value **winner)
{
	/* the nodes module's and the endpoints' prefixes are the cluster's:
	 * masquerading leaves them alone (DP_IPCACHE_F_CLUSTER) */
	struct dp_ipcache_value flagged = *given;
	if (source == FIBRIL_DATAPATH_IPCACHE_SOURCE_NODE ||
	    source == FIBRIL_DATAPATH_IPCACHE_SOURCE_REMOTE_ENDPOINT ||
	    source == FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT)
		flagged.flags |= DP_IPCACHE_F_CLUSTER;
	const struct dp_ipcache_value *v = &flagged;
	*write = false;
	if (grow(t))
		return -ENOMEM;
	struct dp_ipc_prefix **slot = slot_of(t, k), *p = *slot;
	if (!p) {
		if (!(p = malloc(sizeof(*p) + sizeof(p->claims[0]))))
			return -ENOMEM;
		p->next = NULL;
		p->key = *k;
		p->in_map = false;
		p->n = 1;
		p->claims[0] = (struct dp_ipc_claim){.source = source, .value = *v};
		*slot = p;
		t->count++;
		*write = true;
		*winner = &p->claims[0].value;
		return 0;
	}
	size_t i = 0;
	while (i < p->n && p->claims[i].source > source)
		i++;
	if (i < p->n && p->claims[i].source == source) {
		bool changed = memcmp(&p->claims[i].value, v, sizeof(*v)) != 0;
		p->claims[i].value = *v;
		*write = (i == 0 && changed) || !p->in_map;
	} else {
		struct dp_ipc_prefix *q = realloc(p, sizeof(*p) + (p->n + 1u) * sizeof(p->claims[0]));
		if (!q)
			return -ENOMEM;
		*slot = p = q;
		memmove(&p->claims[i + 1], &p->claims[i], (p->n - i) * sizeof(p->claims[0]));
		p->claims[i] = (struct dp_ipc_claim){.source = source, .value = *v};
		p->n++;
		*write = i == 0 || !p->in_map;
	}
	if (*write)
		p->in_map = false; /* until the write is made */
	*winner = &p->claims[0].value;
	return 0;
}

static void mark_in_map(struct dp_ipc_table *t, const struct dp_ipcache_key *k, bool in)
{
	struct dp_ipc_prefix *p = t->nbuckets ? *slot_of(t, k) : NULL;
	if (p)
		p->in_map = in;
}

static int check_source(unsigned source, char *err, size_t len)
{
	if (source <= FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT || source == DP_IPC_SRC_DATAPATH)
		return 0;
	dp_seterr(err, len, "ipcache: source %u is not one of enum fibril_datapath_ipcache_source "
			    "(0..%u)", source, FIBRIL_DATAPATH_IPCACHE_SOURCE_LOCAL_ENDPOINT);
	return -EINVAL;
}

int dp_ipc_claim(struct datapath *dp, const struct fibril_datapath_ipcache_entry *e, char *err,
		 size_t len)
{
	size_t done;
	return dp_ipc_claim_batch(dp, e, 1, sizeof(*e), &done, err, len);
}

int dp_ipc_claim_tunnel(struct datapath *dp, unsigned source, int family, const void *addr,
			unsigned plen, uint32_t identity, int tunnel_family, const void *tunnel_ip,
			char *err, size_t len)
{
	struct fibril_datapath_ipcache_entry e = {.sz = sizeof(e), .family = (uint8_t)family,
						  .prefix_len = (uint8_t)plen, .identity = identity,
						  .tunnel_family = (uint8_t)tunnel_family,
						  .source = source};
	if (family != 4 && family != 6) {
		dp_seterr(err, len, "ipcache: family %d is neither 4 nor 6", family);
		return -EINVAL;
	}
	if (plen > 128) {
		dp_seterr(err, len, "ipcache: prefix length /%u is longer than /128", plen);
		return -EINVAL;
	}
	memcpy(e.addr, addr, family == 4 ? 4 : 16);
	if (tunnel_family == 4 || tunnel_family == 6)
		memcpy(e.tunnel_endpoint, tunnel_ip, tunnel_family == 4 ? 4 : 16);
	return dp_ipc_claim(dp, &e, err, len);
}

int dp_ipc_claim_batch(struct datapath *dp, const struct fibril_datapath_ipcache_entry *entries,
		       size_t n, size_t stride, size_t *done, char *err, size_t len)
{
	*done = 0;
	if (!n)
		return 0;
	struct dp_ipc_table *t = table(dp);
	struct dp_ipcache_key *keys = malloc(n * sizeof(*keys));
	struct dp_ipcache_value *values = malloc(n * sizeof(*values));
	size_t *of = malloc(n * sizeof(*of)); /* the entry each write is for */
	int rc = t && keys && values && of ? 0 : -ENOMEM;
	if (rc)
		dp_seterr(err, len, "ipcache: out of memory for a batch of %zu", n);
	/* every entry checked before anything changes */
	for (size_t i = 0; !rc && i < n; i++) {
		const struct fibril_datapath_ipcache_entry *e =
			(const void *)((const char *)entries + i * stride);
		if (!(rc = check_source(e->source, err, len)))
			rc = dp_ipcache_entry_kv(e, &keys[i], &values[i], err, len);
	}
	/* the claims, and the writes they need (in place: write m <= entry i) */
	size_t m = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		const struct fibril_datapath_ipcache_entry *e =
			(const void *)((const char *)entries + i * stride);
		const struct dp_ipcache_value *winner = NULL;
		bool write;
		struct dp_ipcache_key k = keys[i];
		struct dp_ipcache_value v = values[i];
		if ((rc = claim_set(t, &k, (uint8_t)e->source, &v, &write, &winner))) {
			dp_seterr(err, len, "ipcache: out of memory for entry %zu", i);
			*done = i;
			break;
		}
		if (!write) {
			t->writes_skipped++;
			continue;
		}
		keys[m] = k;
		values[m] = *winner;
		of[m++] = i;
	}
	size_t written = 0;
	int wrc = m ? dp_ipcache_write_batch(dp, keys, values, m, &written, err, len) : 0;
	for (size_t j = 0; j < m; j++)
		mark_in_map(t, &keys[j], j < written);
	t->writes += written;
	size_t upto = rc ? *done : n;
	if (wrc && written < m && of[written] < upto)
		upto = of[written];
	*done = upto;
	if (wrc && !rc)
		rc = wrc;
	free(keys);
	free(values);
	free(of);
	return rc;
}

int dp_ipc_unclaim(struct datapath *dp, unsigned source, int family, const void *addr,
		   unsigned plen, char *err, size_t len)
{
	struct dp_ipcache_key k;
	int rc = check_source(source, err, len);
	if (rc || (rc = dp_ipcache_key_of(family, addr, plen, &k, err, len)))
		return rc;
	struct dp_ipc_table *t = table(dp);
	struct dp_ipc_prefix **slot = t && t->nbuckets ? slot_of(t, &k) : NULL, *p = slot ? *slot : NULL;
	if (!p) /* nobody claims it since the start: a previous run's entry */
		return dp_ipcache_delete(dp, &k, err, len);
	size_t i = 0;
	while (i < p->n && p->claims[i].source != source)
		i++;
	if (i == p->n)
		return 0; /* not this source's: nothing to take */
	memmove(&p->claims[i], &p->claims[i + 1], (p->n - i - 1) * sizeof(p->claims[0]));
	p->n--;
	if (!p->n) {
		*slot = p->next;
		free(p);
		t->count--;
		t->deletes++;
		return dp_ipcache_delete(dp, &k, err, len);
	}
	if (i != 0)
		return 0; /* a shadowed claim went: the map keeps the winner */
	/* the winner went: the next claim comes back */
	p->in_map = (rc = dp_ipcache_write(dp, &k, &p->claims[0].value, err, len)) == 0;
	t->writes += p->in_map;
	return rc;
}

void dp_ipc_adopt(struct datapath *dp, unsigned source, int family, const void *addr,
		  unsigned plen)
{
	struct dp_ipcache_key k;
	struct dp_ipcache_value v;
	struct dp_ipc_table *t = table(dp);
	const struct dp_ipcache_value *winner;
	bool write;
	if (!t || dp_ipcache_key_of(family, addr, plen, &k, NULL, 0) ||
	    bpf_map_lookup_elem(fibril_map_fd(dp->maps[DPM_IPCACHE]), &k, &v) != 0 ||
	    claim_set(t, &k, (uint8_t)source, &v, &write, &winner))
		return;
	mark_in_map(t, &k, true);
}

void dp_ipc_free(struct datapath *dp)
{
	struct dp_ipc_table *t = dp->ipc;
	if (!t)
		return;
	for (size_t i = 0; i < t->nbuckets; i++)
		for (struct dp_ipc_prefix *p = t->buckets[i], *next; p; p = next) {
			next = p->next;
			free(p);
		}
	free(t->buckets);
	free(t);
	dp->ipc = NULL;
}

/* ---- the ipcache calls of <fibril/datapath.h> ---------------------------------------------- */

int dp_op_ipcache_upsert(void *ctx, int family, const void *addr, unsigned prefixlen,
			     uint32_t identity, char *err, size_t errlen)
{
	if (!addr) {
		dp_seterr(err, errlen, "ipcache: no address");
		return -EINVAL;
	}
	/* an older caller's claim: the lowest source */
	return dp_ipc_claim_tunnel(ctx, FIBRIL_DATAPATH_IPCACHE_SOURCE_UNSPEC, family, addr, prefixlen,
				   identity, 0, NULL, err, errlen);
}

int dp_op_ipcache_remove(void *ctx, int family, const void *addr, unsigned prefixlen,
			     char *err, size_t errlen)
{
	if (!addr) {
		dp_seterr(err, errlen, "ipcache: no address");
		return -EINVAL;
	}
	/* takes the older callers' claim only (ipcache_remove_entry names its source) */
	return dp_ipc_unclaim(ctx, FIBRIL_DATAPATH_IPCACHE_SOURCE_UNSPEC, family, addr, prefixlen,
			      err, errlen);
}

int dp_op_ipcache_upsert_entry(void *ctx, const struct fibril_datapath_ipcache_entry *e,
				   char *err, size_t errlen)
{
	struct fibril_datapath_ipcache_entry given;
	char why[DP_ERR_LEN];
	int rc = fibril_struct_copy_in(&given, sizeof(given), e, e ? e->sz : 0,
				       FIBRIL_OFFSETOFEND(struct fibril_datapath_ipcache_entry,
							  identity),
				       "struct fibril_datapath_ipcache_entry", why, sizeof(why));
	if (rc < 0) {
		dp_seterr(err, errlen, "%s", why);
		return rc;
	}
	given.sz = sizeof(given); /* a shorter caller's source reads as 0: UNSPEC */
	return dp_ipc_claim(ctx, &given, err, errlen);
}

int dp_op_ipcache_remove_entry(void *ctx, const struct fibril_datapath_ipcache_entry *e,
				   char *err, size_t errlen)
{
	struct fibril_datapath_ipcache_entry given;
	char why[DP_ERR_LEN];
	int rc = fibril_struct_copy_in(&given, sizeof(given), e, e ? e->sz : 0,
				       FIBRIL_OFFSETOFEND(struct fibril_datapath_ipcache_entry, addr),
				       "struct fibril_datapath_ipcache_entry", why, sizeof(why));
	if (rc < 0) {
		dp_seterr(err, errlen, "%s", why);
		return rc;
	}
	return dp_ipc_unclaim(ctx, given.source, given.family, given.addr, given.prefix_len, err,
			      errlen);
}

int dp_op_ipcache_upsert_batch(void *ctx, const struct fibril_datapath_ipcache_entry *entries,
				   size_t n, size_t *done, char *err, size_t errlen)
{
	size_t written = 0;
	if (!done)
		done = &written;
	*done = 0;
	if (!n)
		return 0;
	if (!entries) {
		dp_seterr(err, errlen, "struct fibril_datapath_ipcache_entry: batch of %zu is NULL", n);
		return -EINVAL;
	}
	/* The array's stride is the caller's struct size (entries[0].sz), and
	 * each entry is taken by the same rule as ipcache_upsert_entry's
	 * (fibril_struct_copy_in): a shorter struct's missing fields read as
	 * zero, a longer one is refused if it sets a byte this datapath does
	 * not know. Every entry must carry the same sz: a mismatch means the
	 * caller's stride is not what it says. Nothing is written unless the
	 * whole batch is valid. */
	size_t stride = entries[0].sz;
	const size_t min = FIBRIL_OFFSETOFEND(struct fibril_datapath_ipcache_entry, identity);
	if (stride < min || stride > FIBRIL_STRUCT_SIZE_MAX) {
		dp_seterr(err, errlen,
			  "struct fibril_datapath_ipcache_entry: sz %zu is not valid (at least %zu, "
			  "at most %u)", stride, min, FIBRIL_STRUCT_SIZE_MAX);
		return -EINVAL;
	}
	struct fibril_datapath_ipcache_entry *full = NULL;
	if (stride != sizeof(*full) && !(full = calloc(n, sizeof(*full)))) {
		dp_seterr(err, errlen, "ipcache: out of memory for a batch of %zu", n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const struct fibril_datapath_ipcache_entry *e =
			(const void *)((const char *)entries + i * stride);
		if (e->sz != stride) {
			dp_seterr(err, errlen,
				  "struct fibril_datapath_ipcache_entry: entry %zu of the batch has sz "
				  "%u, entry 0 has %zu (one size for the whole array)", i, e->sz, stride);
			free(full);
			return -EINVAL;
		}
		if (!full)
			continue;
		char why[DP_ERR_LEN];
		int rc = fibril_struct_copy_in(&full[i], sizeof(full[i]), e, stride, min,
					       "struct fibril_datapath_ipcache_entry", why, sizeof(why));
		if (rc < 0) {
			dp_seterr(err, errlen, "entry %zu of the batch: %s", i, why);
			free(full);
			return rc;
		}
	}
	int rc = full ? dp_ipc_claim_batch(ctx, full, n, sizeof(*full), done, err, errlen)
		      : dp_ipc_claim_batch(ctx, entries, n, stride, done, err, errlen);
	free(full);
	return rc;
}
