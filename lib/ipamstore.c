/* lib/ipamstore.c - the allocation store of <fibril/ipamstore.h>: what an
 * IPAM mode handed out, in two chained hash tables over the same entries
 * (by address, by owner; doubled when they fill up), recorded in a
 * group-committed journal (<fibril/journal.h>, "allocations.journal" and
 * ".snap" in the store's directory: records "+<address> <owner>" and
 * "-<address>") whose flush the consumer waits for with wait_durable before
 * it tells anyone; the node-cidr file, one allocator per family's node
 * CIDR, and the "ipam" interface over all of it. The one-file-per-address
 * layout of SDK 1.3 (<dir>/<family>/<address>) is read on open and moved
 * into the journal.
 *
 * An entry is "placed" when it is claimed in its family's allocator; a
 * restored entry outside the node CIDR (or on a reserved address of it) is
 * not, and counts as stale. Only placed entries are handed out again to
 * their owner or listed; any entry can be released. The ipam interface
 * over the store is lib/ipamstore_ops.c. */
#include "ipamstore_int.h"
#include <fibril/compat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the table ---------------------------------------------------------------- */

static size_t ip_len(const struct fibril_ip *ip)
{
	return ip->family == 6 ? 16 : 4;
}

static uint64_t fnv1a(const void *data, size_t len, uint64_t h)
{
	const uint8_t *p = data;
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static size_t ip_bucket(const struct fibril_ip *ip, size_t n)
{
	uint64_t h = fnv1a(&ip->family, 1, 14695981039346656037ull);
	return (size_t)(fnv1a(ip->bytes, ip_len(ip), h) & (n - 1));
}

static size_t owner_bucket(const char *owner, size_t n)
{
	return (size_t)(fnv1a(owner, strlen(owner), 14695981039346656037ull) & (n - 1));
}

static bool ip_equal(const struct fibril_ip *a, const struct fibril_ip *b)
{
	return a->family == b->family && memcmp(a->bytes, b->bytes, ip_len(a)) == 0;
}

struct entry *ipamstore_entry_new(const struct fibril_ip *ip, const char *owner)
{
	struct entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->owner = strdup(owner ? owner : "");
	if (!e->owner) {
		free(e);
		return NULL;
	}
	e->ip.family = ip->family; /* the bytes past an IPv4 address stay zero */
	memcpy(e->ip.bytes, ip->bytes, ip_len(ip));
	fibril_ip_format(ip, e->addr, sizeof(e->addr));
	return e;
}

void ipamstore_entry_free(struct entry *e)
{
	if (!e)
		return;
	free(e->owner);
	free(e);
}

struct entry *ipamstore_find_ip(const struct fibril_ipamstore *s, const struct fibril_ip *ip)
{
	for (struct entry *e = s->by_ip[ip_bucket(ip, s->nbuckets)]; e; e = e->next_ip)
		if (ip_equal(&e->ip, ip))
			return e;
	return NULL;
}

/* The lowest placed address of owner in family, so that an owner holding
 * several gets a stable answer. */
struct entry *ipamstore_find_owner(const struct fibril_ipamstore *s, const char *owner, int family)
{
	if (!owner || !owner[0])
		return NULL;
	struct entry *best = NULL;
	for (struct entry *e = s->by_owner[owner_bucket(owner, s->nbuckets)]; e; e = e->next_owner) {
		if (!e->placed || e->ip.family != family || strcmp(e->owner, owner) != 0)
			continue;
		if (!best || memcmp(e->ip.bytes, best->ip.bytes, 16) < 0)
			best = e;
	}
	return best;
}

static void link_entry(struct fibril_ipamstore *s, struct entry *e)
{
	size_t bi = ip_bucket(&e->ip, s->nbuckets), bo = owner_bucket(e->owner, s->nbuckets);
	e->next_ip = s->by_ip[bi];
	s->by_ip[bi] = e;
	e->next_owner = s->by_owner[bo];
	s->by_owner[bo] = e;
}

/* Doubles the buckets; on no memory keeps the old ones (longer chains). */
static void grow(struct fibril_ipamstore *s)
{
	size_t n = s->nbuckets * 2;
	struct entry **by_ip = calloc(n, sizeof(*by_ip)), **by_owner = calloc(n, sizeof(*by_owner));
	if (!by_ip || !by_owner) {
		free(by_ip);
		free(by_owner);
		return;
	}
	struct entry **old = s->by_ip;
	size_t oldn = s->nbuckets;
	free(s->by_owner);
	s->by_ip = by_ip;
	s->by_owner = by_owner;
	s->nbuckets = n;
	for (size_t i = 0; i < oldn; i++) {
		struct entry *e = old[i];
		while (e) {
			struct entry *next = e->next_ip;
			link_entry(s, e);
			e = next;
		}
	}
	free(old);
}

void ipamstore_insert(struct fibril_ipamstore *s, struct entry *e)
{
	if (s->count >= s->nbuckets)
		grow(s);
	link_entry(s, e);
	s->count++;
}

void ipamstore_unlink_entry(struct fibril_ipamstore *s, struct entry *e)
{
	struct entry **p = &s->by_ip[ip_bucket(&e->ip, s->nbuckets)];
	while (*p && *p != e)
		p = &(*p)->next_ip;
	if (*p)
		*p = e->next_ip;
	p = &s->by_owner[owner_bucket(e->owner, s->nbuckets)];
	while (*p && *p != e)
		p = &(*p)->next_owner;
	if (*p)
		*p = e->next_owner;
	s->count--;
}

static int cmp_entry(const void *x, const void *y)
{
	const struct entry *a = *(const struct entry *const *)x;
	const struct entry *b = *(const struct entry *const *)y;
	if (a->ip.family != b->ip.family)
		return a->ip.family < b->ip.family ? -1 : 1;
	return memcmp(a->ip.bytes, b->ip.bytes, 16);
}

/* Every entry, sorted by family then address (free the array). */
struct entry **ipamstore_sorted(const struct fibril_ipamstore *s, size_t *n)
{
	struct entry **v = malloc((s->count ? s->count : 1) * sizeof(*v));
	*n = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct entry *e = s->by_ip[i]; e; e = e->next_ip)
			v[(*n)++] = e;
	qsort(v, *n, sizeof(*v), cmp_entry);
	return v;
}

/* ---- files ------------------------------------------------------------------------ */

static int open_dir_at(int at, const char *name)
{
	if (mkdirat(at, name, 0755) && errno != EEXIST)
		return -errno;
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* The owner a file holds (at most FIBRIL_IPAM_OWNER_LEN - 1 bytes). */
static int read_owner(int dirfd, const char *name, char *owner, size_t len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	size_t got = 0;
	ssize_t r;
	while (got < len - 1 && (r = read(fd, owner + got, len - 1 - got)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			close(fd);
			return e;
		}
		got += (size_t)r;
	}
	close(fd);
	owner[got] = '\0';
	return 0;
}

static bool is_tmp(const char *name)
{
	size_t n = strlen(name);
	return name[0] == '.' && n > 5 && strcmp(name + n - 4, ".tmp") == 0;
}

/* One directory entry: an allocation (1), a leftover temp file or junk (0). */
static int load_entry(struct fibril_ipamstore *s, struct fam *f, const char *name)
{
	if (is_tmp(name)) {
		unlinkat(f->dirfd, name, 0);
		return 0;
	}
	if (name[0] == '.')
		return 0;
	struct fibril_ip ip;
	char canon[FIBRIL_IPAM_ADDR_LEN];
	if (fibril_ip_parse(name, &ip) || ip.family != f->family ||
	    strcmp(fibril_ip_format(&ip, canon, sizeof(canon)), name) != 0) {
		fibril_warn(s->m, "ignoring %s/%d/%s: not an IPv%d address in canonical form", s->dir,
			    f->family, name, f->family);
		return 0;
	}
	char owner[FIBRIL_IPAM_OWNER_LEN];
	int rc = read_owner(f->dirfd, name, owner, sizeof(owner));
	if (rc) {
		fibril_warn(s->m, "%s/%d/%s: %s; kept as allocated, owner unknown", s->dir, f->family,
			    name, strerror(-rc));
		owner[0] = '\0';
	}
	struct entry *e = ipamstore_entry_new(&ip, owner);
	if (!e)
		return -ENOMEM;
	e->legacy = true;
	ipamstore_insert(s, e);
	return 1;
}

/* Every allocation file of the family into the table (not placed yet);
 * returns how many. */
static int load_family(struct fibril_ipamstore *s, struct fam *f)
{
	int fd = dup(f->dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	int n = 0, rc = 0;
	struct dirent *de;
	while (rc >= 0 && (de = readdir(d)) != NULL) {
		rc = load_entry(s, f, de->d_name);
		n += rc > 0;
	}
	closedir(d);
	return rc < 0 ? rc : n;
}

struct fam *ipamstore_fam_of(struct fibril_ipamstore *s, int family)
{
	return family == 4 ? &s->fam[0] : family == 6 ? &s->fam[1] : NULL;
}

static int save_node(struct fibril_ipamstore *s)
{
	char buf[NFAM * (FIBRIL_IPAM_CIDR_LEN + 4)] = "";
	size_t off = 0;
	for (int i = 0; i < NFAM; i++) {
		const struct fam *f = &s->fam[i];
		if (!f->have_node)
			continue;
		char c[FIBRIL_IPAM_CIDR_LEN];
		off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%d %s\n", f->family,
					fibril_cidr_format(&f->node, c, sizeof(c)));
	}
	return fibril_state_write_atomic(s->basefd, NODE_FILE, buf, off, 0644);
}

/* The last run's node CIDRs; a missing file or a bad line is no hint. */
static void load_node(struct fibril_ipamstore *s)
{
	int fd = openat(s->basefd, NODE_FILE, O_RDONLY | O_CLOEXEC);
	FILE *fp = fd >= 0 ? fdopen(fd, "r") : NULL;
	if (!fp) {
		if (fd >= 0)
			close(fd);
		return;
	}
	char line[128], text[FIBRIL_IPAM_CIDR_LEN];
	int family;
	while (fgets(line, sizeof(line), fp)) {
		struct fibril_cidr c;
		if (sscanf(line, "%d %49s", &family, text) != 2 || fibril_cidr_parse(text, &c) ||
		    c.ip.family != family)
			continue;
		struct fam *f = ipamstore_fam_of(s, family);
		if (f) {
			f->saved = c;
			f->have_saved = true;
		}
	}
	fclose(fp);
}

/* ---- the journal --------------------------------------------------------------------- */

#define RECORD_MAX (1 + FIBRIL_IPAM_ADDR_LEN + 1 + FIBRIL_IPAM_OWNER_LEN)

static size_t record_of(const struct entry *e, bool add, char *buf)
{
	size_t n = (size_t)snprintf(buf, RECORD_MAX, "%c%s", add ? '+' : '-', e->addr);
	if (add)
		n += (size_t)snprintf(buf + n, RECORD_MAX - n, " %s", e->owner);
	return n;
}

/* One record of the journal into the table (not placed yet): a later
 * record of an address replaces the earlier one. */
static int replay_record(void *ud, const void *rec, size_t len)
{
	struct fibril_ipamstore *s = ud;
	char text[RECORD_MAX + 1], *owner = NULL;
	if (len < 2 || len > RECORD_MAX || (((const char *)rec)[0] != '+' && ((const char *)rec)[0] != '-'))
		return -EBADMSG;
	memcpy(text, rec, len);
	text[len] = '\0';
	if (text[0] == '+') {
		owner = strchr(text, ' ');
		if (!owner)
			return -EBADMSG;
		*owner++ = '\0';
	}
	struct fibril_ip ip;
	if (fibril_ip_parse(text + 1, &ip))
		return -EBADMSG;
	struct entry *old = ipamstore_find_ip(s, &ip);
	if (old) {
		ipamstore_unlink_entry(s, old);
		ipamstore_entry_free(old);
	}
	if (!owner)
		return 0;
	struct entry *e = ipamstore_entry_new(&ip, owner);
	if (!e)
		return -ENOMEM;
	ipamstore_insert(s, e);
	return 0;
}

static int snapshot_all(void *ud, struct fibril_journal *j)
{
	struct fibril_ipamstore *s = ud;
	char rec[RECORD_MAX + 1];
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct entry *e = s->by_ip[i]; e; e = e->next_ip) {
			int rc = fibril_journal_snapshot_add(j, rec, record_of(e, true, rec));
			if (rc)
				return rc;
		}
	return 0;
}

/* Appends what became of e, and starts a flush if none is running (the
 * consumer waits for it with wait_durable). */
int ipamstore_record(struct fibril_ipamstore *s, const struct entry *e, bool add)
{
	char rec[RECORD_MAX + 1];
	int rc = fibril_journal_append(s->j, rec, record_of(e, add, rec));
	if (rc == 0)
		fibril_journal_sync(s->j, NULL, NULL);
	return rc;
}

/* Opens the journal over the entries read from the 1.3 layout (legacy > 0
 * of them): those are appended, flushed (close) and their files removed. */
static int open_journal(struct fibril_ipamstore *s, int legacy, char *why, size_t len)
{
	struct fibril_journal_opts o = {.sz = sizeof(o), .dir = s->dir, .name = JOURNAL_NAME,
					.replay = replay_record, .snapshot = snapshot_all, .ud = s};
	int rc = fibril_journal_open(s->m, &o, &s->j, why, len);
	if (rc || legacy == 0)
		return rc;
	size_t n, k = 0;
	struct entry **v = ipamstore_sorted(s, &n);
	struct moved {
		int family;
		char addr[FIBRIL_IPAM_ADDR_LEN];
	} *files = calloc((size_t)legacy, sizeof(*files));
	if (!v || !files) {
		free(v);
		free(files);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (!v[i]->legacy || k == (size_t)legacy)
			continue;
		rc = ipamstore_record(s, v[i], true);
		files[k].family = v[i]->ip.family;
		memcpy(files[k++].addr, v[i]->addr, sizeof(files[0].addr));
	}
	free(v); /* the reopen below replaces the entries */
	fibril_journal_close(s->j); /* flushes here */
	s->j = NULL;
	if (rc) {
		free(files);
		snprintf(why, len, "cannot move the allocation files of %s into its journal: %s",
			 s->dir, strerror(-rc));
		return rc;
	}
	rc = fibril_journal_open(s->m, &o, &s->j, why, len); /* replays them again */
	for (size_t i = 0; i < k && rc == 0; i++) {
		struct fam *f = ipamstore_fam_of(s, files[i].family);
		if (f && f->dirfd >= 0)
			unlinkat(f->dirfd, files[i].addr, 0);
	}
	for (int i = 0; i < NFAM && rc == 0; i++)
		if (s->fam[i].dirfd >= 0)
			fsync(s->fam[i].dirfd);
	free(files);
	if (rc == 0)
		fibril_info(s->m, "moved %d allocation file(s) of %s into %s/%s.journal", legacy, s->dir,
			    s->dir, JOURNAL_NAME);
	return rc;
}

int fibril_ipamstore_new(struct fibril_module *m, const struct fibril_ipamstore_opts *opts,
			 struct fibril_ipamstore **out)
{
	if (out)
		*out = NULL;
	if (!out)
		return -EINVAL;
	struct fibril_ipamstore_opts given;
	if (opts) { /* the SDK's growth rule: shorter is fine, unknown bytes must be zero */
		char why[200];
		int rc = fibril_struct_copy_in(&given, sizeof(given), opts, opts->sz,
					       FIBRIL_OFFSETOFEND(struct fibril_ipamstore_opts, sz),
					       "struct fibril_ipamstore_opts", why, sizeof(why));
		if (rc < 0) {
			fibril_warn(NULL, "module %s: ipamstore refused: %s",
				   m ? fibril_module_name(m) : "(host)", why);
			return rc;
		}
		opts = &given;
	}
	if (opts && opts->strategy != FIBRIL_IPALLOC_SEQUENTIAL &&
	    opts->strategy != FIBRIL_IPALLOC_RANDOM)
		return -EINVAL;
	if ((!opts || !opts->dir) && !m)
		return -EINVAL; /* no module name to make the default directory of */
	if (opts && opts->dir && (!opts->dir[0] || strlen(opts->dir) >= PATH_MAX))
		return -EINVAL;
	struct fibril_ipamstore *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->m = m;
	s->basefd = -1;
	for (int i = 0; i < NFAM; i++) {
		s->fam[i].family = i ? 6 : 4;
		s->fam[i].dirfd = -1;
	}
	if (opts) {
		s->strategy = opts->strategy;
		s->seed = opts->seed;
		s->serving = opts->serving;
		s->ud = opts->ud;
		if (opts->dir) {
			snprintf(s->dir, sizeof(s->dir), "%s", opts->dir);
			s->dir_given = true;
		}
	}
	s->nbuckets = INITIAL_BUCKETS;
	s->by_ip = calloc(s->nbuckets, sizeof(*s->by_ip));
	s->by_owner = calloc(s->nbuckets, sizeof(*s->by_owner));
	if (!s->by_ip || !s->by_owner) {
		fibril_ipamstore_free(s);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

void fibril_ipamstore_free(struct fibril_ipamstore *s)
{
	if (!s)
		return;
	fibril_journal_close(s->j);
	for (size_t i = 0; s->by_ip && i < s->nbuckets; i++) {
		struct entry *e = s->by_ip[i];
		while (e) {
			struct entry *next = e->next_ip;
			ipamstore_entry_free(e);
			e = next;
		}
	}
	free(s->by_ip);
	free(s->by_owner);
	for (int i = 0; i < NFAM; i++) {
		fibril_ipalloc_free(s->fam[i].alloc);
		if (s->fam[i].dirfd >= 0)
			close(s->fam[i].dirfd);
	}
	if (s->basefd >= 0)
		close(s->basefd);
	free(s);
}

const struct fibril_ipam_ops *fibril_ipamstore_ops(const struct fibril_ipamstore *s)
{
	(void)s; /* one table for every store: the store is the ctx */
	return &ipamstore_store_ops;
}

const char *fibril_ipamstore_dir(const struct fibril_ipamstore *s)
{
	return s && s->opened ? s->dir : "";
}

int fibril_ipamstore_open(struct fibril_ipamstore *s, unsigned families, char *why, size_t len)
{
	char scratch[8];
	if (!why || !len) {
		why = scratch;
		len = sizeof(scratch);
	}
	why[0] = '\0';
	if (!s || s->opened || !families ||
	    (families & ~(FIBRIL_IPAMSTORE_IPV4 | FIBRIL_IPAMSTORE_IPV6))) {
		snprintf(why, len, "ipamstore: bad open (no store, opened twice, or no family)");
		return -EINVAL;
	}
	if (!s->dir_given) {
		const char *state = fibril_state_dir(), *name = fibril_module_name(s->m);
		if (!state || !name ||
		    snprintf(s->dir, sizeof(s->dir), "%s/%s", state, name) >= (int)sizeof(s->dir)) {
			snprintf(why, len, "ipamstore: no state directory for module %s",
				 name ? name : "?");
			return -EINVAL;
		}
	}
	s->opened = true;
	int rc = mkdir_p(s->dir, 0755);
	s->basefd = rc ? rc : open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->basefd < 0) {
		rc = rc ? rc : -errno;
		s->basefd = -1;
		snprintf(why, len, "cannot open %s: %s", s->dir, strerror(-rc));
		return rc;
	}
	load_node(s);
	int legacy = 0;
	for (int i = 0; i < NFAM; i++) {
		struct fam *f = &s->fam[i];
		if (!(families & (i ? FIBRIL_IPAMSTORE_IPV6 : FIBRIL_IPAMSTORE_IPV4)))
			continue;
		f->dirfd = open_dir_at(s->basefd, f->family == 6 ? "6" : "4");
		if (f->dirfd < 0) {
			rc = f->dirfd;
			f->dirfd = -1;
			snprintf(why, len, "cannot open %s/%d: %s", s->dir, f->family, strerror(-rc));
			return rc;
		}
		f->open = true;
		int n = load_family(s, f);
		if (n < 0) {
			snprintf(why, len, "cannot restore allocations from %s/%d: %s", s->dir,
				 f->family, strerror(-n));
			return n;
		}
		legacy += n;
	}
	rc = open_journal(s, legacy, why, len);
	if (rc)
		return rc;
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct entry *e = s->by_ip[i]; e; e = e->next_ip) {
			struct fam *f = ipamstore_fam_of(s, e->ip.family);
			if (f && f->open)
				f->restored++;
		}
	for (int i = 0; i < NFAM; i++)
		if (s->fam[i].restored)
			fibril_info(s->m, "restored %llu IPv%d allocation(s) from %s",
				    (unsigned long long)s->fam[i].restored, s->fam[i].family, s->dir);
	return 0;
}

/* Puts each restored allocation of the family into the allocator; those
 * outside the node CIDR (or on a reserved address) stay as stale. */
static void place_all(struct fibril_ipamstore *s, struct fam *f)
{
	size_t n;
	struct entry **v = ipamstore_sorted(s, &n);
	char c[FIBRIL_IPAM_CIDR_LEN];
	fibril_cidr_format(&f->node, c, sizeof(c));
	f->stale = 0;
	for (size_t i = 0; v && i < n; i++) {
		struct entry *e = v[i];
		if (e->ip.family != f->family)
			continue;
		e->placed = fibril_ipalloc_claim(f->alloc, &e->ip) == 0;
		if (e->placed)
			continue;
		if (f->stale++ < STALE_LOGGED)
			fibril_warn(s->m, "allocation %s of '%s' is outside node CIDR %s: kept in "
				    "%s/%d (release it to remove it)", e->addr, e->owner, c, s->dir,
				    f->family);
	}
	if (f->stale > STALE_LOGGED)
		fibril_warn(s->m, "%llu allocations in all are outside node CIDR %s",
			    (unsigned long long)f->stale, c);
	free(v);
}

int fibril_ipamstore_set_node(struct fibril_ipamstore *s, const struct fibril_cidr *cidr)
{
	if (!s || !cidr)
		return -EINVAL;
	struct fam *f = ipamstore_fam_of(s, cidr->ip.family);
	if (!f)
		return -EINVAL;
	if (!f->open)
		return -EAFNOSUPPORT;
	struct fibril_ipalloc_opts opts = {.sz = sizeof(opts), .strategy = s->strategy,
					   .seed = s->seed};
	struct fibril_ipalloc *a = NULL;
	int rc = fibril_ipalloc_new(cidr, &opts, &a);
	if (rc)
		return rc;
	fibril_ipalloc_free(f->alloc);
	f->alloc = a;
	f->node = *cidr;
	f->have_node = true;
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct entry *e = s->by_ip[i]; e; e = e->next_ip)
			if (e->ip.family == f->family)
				e->placed = false;
	place_all(s, f);
	rc = save_node(s);
	if (rc)
		fibril_warn(s->m, "cannot record the node CIDR in %s/%s: %s", s->dir, NODE_FILE,
			    strerror(-rc));
	return 0;
}

bool ipamstore_serving(const struct fibril_ipamstore *s, const struct fam *f)
{
	return f->open && f->alloc && (!s->serving || s->serving(s->ud, f->family));
}

int fibril_ipamstore_family(const struct fibril_ipamstore *s, int family,
			    struct fibril_ipamstore_family *out)
{
	if (!s || !out || out->sz < sizeof(uint32_t) || (family != 4 && family != 6))
		return -EINVAL;
	const struct fam *f = &s->fam[family == 6];
	struct fibril_ipamstore_family info = {.sz = out->sz, .family = family};
	info.open = f->open;
	info.have_node = f->have_node;
	info.serving = ipamstore_serving(s, f);
	if (f->alloc) {
		info.node = f->node;
		fibril_ipalloc_router(f->alloc, &info.router);
		info.used = fibril_ipalloc_used(f->alloc);
		info.capacity = fibril_ipalloc_capacity(f->alloc);
	}
	info.stale = f->stale;
	info.restored = f->restored;
	info.have_saved = f->have_saved;
	info.saved = f->saved;
	/* an older caller's struct is a prefix of this one */
	memcpy(out, &info, out->sz < sizeof(info) ? out->sz : sizeof(info));
	return 0;
}

