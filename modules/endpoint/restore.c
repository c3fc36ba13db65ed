/* modules/endpoint/restore.c - bringing the endpoints of the previous run
 * back in the start hook, before the API serves:
 *   1. the newest record of each endpoint, replayed from the journal by
 *      ep_store_open (store.c), plus any "<id>.json" state file of a
 *      version before the journal, which is moved into the journal (its
 *      file removed once that is durable); a corrupt file is logged and
 *      moved aside to <file>.corrupt, a corrupt record is logged and
 *      deleted; leftover temp files are removed. An endpoint whose netns
 *      path or host veth is gone is marked for removal, the others get
 *      their stored identity back for their labels. The files are read in
 *      the start hook; the journal's records are parsed and checked in
 *      slices of RESTORE_SLICE_MS like step 3;
 *   2. IPAM: kept endpoints re-reserve their addresses (allocate_ip with
 *      their owner), removed ones release their owner. While IPAM answers
 *      -EAGAIN (no pool yet) the start is pending and this step is retried
 *      on a short timer;
 *   3. removed endpoints leave the datapath and the journal; kept ones keep
 *      their IDs, are re-adopted by the datapath (endpoint_upsert) and
 *      announced with endpoint.created. In slices of RESTORE_SLICE_MS, the
 *      loop running between them (the start stays pending): 10,000
 *      endpoints never hold it for long. A kept endpoint whose veth went
 *      away meanwhile is recorded as such (ep_iface_gone), not retried.
 * The log says "restored N endpoints in X ms (M removed)". */
#include "endpoint_int.h"
#include "grow.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif
#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

#define RETRY_MS 100
#define RESTORE_SLICE_MS 5.0 /* steps 1 and 3's work between two turns of the loop */
#define MAX_STATE_FILE (1u << 20)

struct restore_entry {
	struct ep_endpoint *ep;
	char *why;                /* NULL: kept; else why it is removed */
	char *labels;             /* from the file, until its identity is registered */
	uint32_t stored_identity; /* from the file */
	bool from_file;           /* a state file of before the journal */
};

struct ep_restore {
	struct restore_entry *v;
	size_t n, cap;
	unsigned load_id;       /* the next journal record step 1 parses */
	size_t settle_at;       /* the next entry step 1 checks (alive, identity) */
	bool loaded, settled;   /* step 1's parts done */
	uint16_t *migrated;     /* state files moved into the journal */
	size_t nmigrated;
	size_t ipam_at;         /* the next entry step 2 handles */
	size_t finish_at;       /* the next entry step 3 handles */
	size_t kept, removed;   /* by step 3 */
	bool waiting_ipam;      /* the timer is step 2's retry (else a slice's turn) */
	size_t corrupt;
	double active_ms;       /* time spent restoring (not waiting) */
	struct timespec wait_start;
	double waited_ms;
	bool waiting_logged;
};

static void restore_tick(struct fibril_timer *t, void *ud);

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void restore_free(struct ep_restore *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++) {
		ep_free(r->v[i].ep);
		free(r->v[i].why);
		free(r->v[i].labels);
	}
	free(r->v);
	free(r->migrated);
	free(r);
}

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *dup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/* ---- step 1: the files ------------------------------------------------------- */

/* An unusable endpoint record: its file (from_file) is moved aside, and the
 * journal forgets the ID. */
static void set_aside(struct ep_manager *mg, struct ep_restore *r, unsigned id, bool from_file,
		      const char *why)
{
	char name[32], aside[NAME_MAX + 1];

	r->corrupt++;
	ep_store_remove(mg, (uint16_t)id);
	if (!from_file) {
		fibril_error(mg->m, "the state of endpoint %u in %s/endpoints.journal is corrupt (%s): "
			     "skipped, deleted", id, mg->dir, why);
		return;
	}
	snprintf(name, sizeof(name), "%u.json", id);
	snprintf(aside, sizeof(aside), "%s.corrupt", name);
	if (renameat(mg->dirfd, name, mg->dirfd, aside) == 0 && fsync(mg->dirfd) == 0)
		fibril_error(mg->m, "state file %s/%s is corrupt (%s): skipped, moved to %s/%s", mg->dir,
			     name, why, mg->dir, aside);
	else
		fibril_error(mg->m, "state file %s/%s is corrupt (%s): skipped (cannot move it aside: %s)",
			     mg->dir, name, why, strerror(errno));
}

/* The file's text (NUL-terminated, malloc'd), or NULL with why. */
static char *read_file(int dirfd, const char *name, size_t *len, char *why, size_t whylen)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	char *buf = NULL;
	size_t at = 0;

	if (fd < 0) {
		snprintf(why, whylen, "cannot open: %s", strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_STATE_FILE) {
		snprintf(why, whylen, "not a regular file under %u bytes", MAX_STATE_FILE);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	while (at < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + at, (size_t)st.st_size - at);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(why, whylen, "read: %s", n < 0 ? strerror(errno) : "short file");
			free(buf);
			buf = NULL;
			goto out;
		}
		at += (size_t)n;
	}
	buf[at] = '\0';
	*len = at;
out:
	close(fd);
	return buf;
}

/* "<digits>.json" -> the ID, else 0. */
static unsigned state_file_id(const char *name)
{
	char *end;
	unsigned long id;

	if (name[0] < '1' || name[0] > '9')
		return 0;
	id = strtoul(name, &end, 10);
	return strcmp(end, ".json") || id > EP_ID_MAX ? 0 : (unsigned)id;
}

/* The socket of the SIOCGIFNAME ioctls: if_indextoname(3) opens and closes
 * one per call, two thousand of them in a restart of 1,000 endpoints. */
static int g_ioctl_fd = -1;

void ep_ifname_close(void)
{
	if (g_ioctl_fd >= 0)
		close(g_ioctl_fd);
	g_ioctl_fd = -1;
}

/* if_indextoname over one socket kept open (opened in the agent's netns on
 * first use); name is IF_NAMESIZE. */
static char *ifname_of(int ifindex, char *name)
{
	struct ifreq ifr;

	if (g_ioctl_fd < 0)
		g_ioctl_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (g_ioctl_fd < 0)
		return if_indextoname((unsigned)ifindex, name);
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_ifindex = ifindex;
	if (ioctl(g_ioctl_fd, SIOCGIFNAME, &ifr))
		return NULL;
	memcpy(name, ifr.ifr_name, IF_NAMESIZE);
	name[IF_NAMESIZE - 1] = '\0';
	return name;
}

/* Why the endpoint cannot be kept (malloc'd), or NULL when it is alive. */
char *ep_gone_reason(const struct ep_endpoint *ep)
{
	struct statfs sfs;
	char name[IF_NAMESIZE];

	if (statfs(ep->netns, &sfs))
		return dup_printf("its netns %s is gone (%s)", ep->netns, strerror(errno));
	if (sfs.f_type != (typeof(sfs.f_type))NSFS_MAGIC &&
	    sfs.f_type != (typeof(sfs.f_type))PROC_SUPER_MAGIC)
		return dup_printf("its netns %s is no longer a namespace", ep->netns);
	if (!ifname_of(ep->host_ifindex, name))
		return dup_printf("its host veth %s (ifindex %d) is gone", ep->host_ifname,
				  ep->host_ifindex);
	if (strcmp(name, ep->host_ifname))
		return dup_printf("its host veth %s (ifindex %d) is gone: that index is now %s",
				  ep->host_ifname, ep->host_ifindex, name);
	return NULL;
}

static int add_entry(struct ep_restore *r, struct ep_endpoint *ep, struct ep_spec *spec)
{
	struct restore_entry *v = mod_grow(r->v, r->n, &r->cap, sizeof(*v), 64);

	if (!v)
		return -ENOMEM;
	r->v = v;
	r->v[r->n].ep = ep;
	r->v[r->n].why = NULL;
	r->v[r->n].labels = spec->labels;
	r->v[r->n].stored_identity = spec->identity;
	r->v[r->n].from_file = false;
	spec->labels = NULL;
	r->n++;
	return 0;
}

/* One endpoint's state text (a file's, or the journal's newest record)
 * into an entry; a corrupt one is set aside. 0, or -ENOMEM. */
static int load_text(struct ep_manager *mg, struct ep_restore *r, const char *text, size_t len,
		     unsigned id, bool from_file)
{
	char why[512];
	struct ep_spec spec = { 0 };
	struct ep_endpoint *ep = NULL;
	int rc;

	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = tok ? json_tokener_parse_ex(tok, text, (int)len) : NULL;

	if (!o || json_tokener_get_error(tok) != json_tokener_success) {
		snprintf(why, sizeof(why), "not JSON: %s",
			 tok ? json_tokener_error_desc(json_tokener_get_error(tok)) : "out of memory");
		json_object_put(o);
		json_tokener_free(tok);
		set_aside(mg, r, id, from_file, why);
		return 0;
	}
	json_tokener_free(tok);
	rc = ep_spec_parse(o, &spec, true, why, sizeof(why));
	json_object_put(o);
	if (rc == -ENOMEM)
		return rc;
	if (rc == 0 && spec.id != id) {
		snprintf(why, sizeof(why), "id: %u does not match the file name", spec.id);
		rc = -EINVAL;
	}
	if (rc) {
		ep_spec_clear(&spec);
		set_aside(mg, r, id, from_file, why);
		return 0;
	}
	if (!(ep = calloc(1, sizeof(*ep))) || ep_apply_spec(ep, &spec)) {
		ep_free(ep);
		ep_spec_clear(&spec);
		return -ENOMEM;
	}
	ep->id = (uint16_t)spec.id;
	ep->created = spec.created;
	ep->state = FIBRIL_EP_WAITING_FOR_IDENTITY; /* registered in settle_some */
	rc = add_entry(r, ep, &spec);
	if (rc)
		ep_free(ep);
	ep_spec_clear(&spec);
	return rc;
}

/* A state file of before the journal: its endpoint (the file wins over the
 * journal: it is there only when its move into the journal did not finish)
 * and its record appended to the journal. 1 migrated, 0 set aside, or
 * -ENOMEM. */
static int load_file(struct ep_manager *mg, struct ep_restore *r, const char *name, unsigned id)
{
	char why[512];
	size_t len = 0, had = r->n;
	char *text = read_file(mg->dirfd, name, &len, why, sizeof(why));
	int rc;

	if (mg->stored) {
		free(mg->stored[id]);
		mg->stored[id] = NULL;
	}
	if (!text) {
		set_aside(mg, r, id, true, why);
		return 0;
	}
	rc = load_text(mg, r, text, len, id, true);
	while (rc == 0 && len && (text[len - 1] == '\n' || text[len - 1] == ' '))
		len--;
	if (rc == 0 && r->n > had)
		rc = ep_store_write_text(mg, (uint16_t)id, text, len) ? -EIO : 1;
	free(text);
	return rc;
}

static int cmp_key(const void *a, const void *b)
{
	const struct ep_endpoint *x = ((const struct restore_entry *)a)->ep;
	const struct ep_endpoint *y = ((const struct restore_entry *)b)->ep;
	int c = strcmp(x->container_id, y->container_id);

	if (!c)
		c = strcmp(x->ifname, y->ifname);
	return c ? c : (int)x->id - (int)y->id;
}

static int cmp_id(const void *a, const void *b)
{
	return (int)((const struct restore_entry *)a)->ep->id -
	       (int)((const struct restore_entry *)b)->ep->id;
}

/* The second record of one attachment is set aside (the entries sorted by
 * attachment). */
static void dedupe_entries(struct ep_manager *mg, struct ep_restore *r)
{
	size_t kept = 0;

	if (r->n > 1)
		qsort(r->v, r->n, sizeof(*r->v), cmp_key);
	for (size_t i = 0; i < r->n; i++) {
		struct restore_entry *e = &r->v[i];

		if (kept && !strcmp(r->v[kept - 1].ep->container_id, e->ep->container_id) &&
		    !strcmp(r->v[kept - 1].ep->ifname, e->ep->ifname)) {
			char why[256];

			snprintf(why, sizeof(why), "container-id %s ifname %s is also endpoint %u",
				 e->ep->container_id, e->ep->ifname, r->v[kept - 1].ep->id);
			set_aside(mg, r, e->ep->id, e->from_file, why);
			free(e->labels);
			ep_free(e->ep);
			continue;
		}
		r->v[kept++] = *e;
	}
	r->n = kept;
}

/* Dead endpoints are marked, labels and stored numbers become identities:
 * from r->settle_at, until the slice that began at t0 is over. 0 done,
 * -EINPROGRESS more. */
static int settle_some(struct ep_manager *mg, struct ep_restore *r, double t0)
{
	for (; r->settle_at < r->n; r->settle_at++) {
		struct restore_entry *e = &r->v[r->settle_at];
		char *labels = e->labels;

		if (now_ms() - t0 >= RESTORE_SLICE_MS)
			return -EINPROGRESS;
		e->labels = NULL;
		e->why = ep_gone_reason(e->ep);
		if (!e->why) {
			int rc = ep_identity_restore(mg, *labels ? labels
								 : mg->reserved[FIBRIL_IDENTITY_INIT].labels,
						     e->stored_identity, &e->ep->identity);

			if (rc) {
				e->why = dup_printf("no identity for its labels: %s", strerror(-rc));
				e->ep->identity = NULL;
			}
		}
		free(labels);
	}
	if (r->n > 1)
		qsort(r->v, r->n, sizeof(*r->v), cmp_id);
	return 0;
}

/* The journal's records into entries, from r->load_id, until the slice that
 * began at t0 is over. 0 done, -EINPROGRESS more, -ENOMEM. */
static int load_some(struct ep_manager *mg, struct ep_restore *r, double t0)
{
	for (; mg->stored && r->load_id <= EP_ID_MAX; r->load_id++) {
		unsigned id = r->load_id;

		if (!mg->stored[id])
			continue;
		if (now_ms() - t0 >= RESTORE_SLICE_MS)
			return -EINPROGRESS;
		int rc = load_text(mg, r, mg->stored[id], strlen(mg->stored[id]), id, false);

		if (rc)
			return rc;
	}
	ep_store_free_stored(mg);
	dedupe_entries(mg, r);
	return 0;
}

/* Step 1 after the files: the records parsed and the entries settled, in
 * slices. 0 done, -EINPROGRESS more, or an error that fails the start. */
static int load_and_settle(struct ep_manager *mg, struct ep_restore *r, double t0)
{
	int rc;

	if (!r->loaded) {
		if ((rc = load_some(mg, r, t0)))
			return rc;
		r->loaded = true;
	}
	if (!r->settled) {
		if ((rc = settle_some(mg, r, t0)))
			return rc;
		r->settled = true;
		rc = ep_store_migrated(mg, r->migrated, r->nmigrated);
		if (rc == -EIO)
			fibril_module_set_error(mg->m, "cannot journal the endpoint state in %s", mg->dir);
		if (rc)
			return rc;
	}
	return 0;
}

static int read_all(struct ep_manager *mg, struct ep_restore *r)
{
	int fd = dup(mg->dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	uint16_t *migrated = NULL;
	size_t nmigrated = 0, cap = 0;
	int rc = 0;

	if (!d) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		fibril_module_set_error(mg->m, "cannot read %s: %s", mg->dir, strerror(err));
		return -err;
	}
	r->corrupt += mg->stored_bad;
	rewinddir(d);
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		size_t l = strlen(name);
		unsigned id;

		if (name[0] == '.' && l > 4 && !strcmp(name + l - 4, ".tmp") &&
		    strncmp(name, ".endpoints.", 11)) {
			/* a write that never completed: nobody was answered with it */
			unlinkat(mg->dirfd, name, 0);
			continue;
		}
		if (!(id = state_file_id(name)))
			continue;
		size_t at = r->n;

		if ((rc = load_file(mg, r, name, id)) < 0)
			break;
		if (rc == 1) {
			r->v[at].from_file = true;
			uint16_t *v = mod_grow(migrated, nmigrated, &cap, sizeof(*v), 64);

			if (!v) {
				rc = -ENOMEM;
				break;
			}
			migrated = v;
			migrated[nmigrated++] = (uint16_t)id;
		}
		rc = 0;
	}
	closedir(d);
	/* the journal's records are parsed in slices (load_and_settle) */
	r->load_id = 1;
	r->migrated = migrated;
	r->nmigrated = nmigrated;
	return rc;
}

/* ---- step 2: IPAM ---------------------------------------------------------------- */

/* The holder of an address in IPAM. */
struct holder {
	const char *address;
	char owner[FIBRIL_IPAM_OWNER_LEN];
};

static int find_holder(const char *address, const char *owner, void *ud)
{
	struct holder *h = ud;

	if (address && owner && !strcmp(address, h->address)) {
		snprintf(h->owner, sizeof(h->owner), "%s", owner);
		return 1;
	}
	return 0;
}

/* 0, or -EAGAIN (retry later); marks the entry removed on a conflict. */
static int reserve(struct ep_manager *mg, struct restore_entry *e)
{
	struct ep_endpoint *ep = e->ep;
	char owner[FIBRIL_IPAM_OWNER_LEN];

	ep_owner(ep, owner, sizeof(owner));
	if (e->why) {
		int rc = mg->ipam->release_owner(mg->ipam_ctx, owner);

		return rc == -EAGAIN ? rc : 0;
	}
	for (int fam = 4; fam <= 6; fam += 2) {
		char addr[INET6_ADDRSTRLEN];
		struct fibril_ipam_result res = { .sz = sizeof(res) };

		if (fam == 4 && !ep->has_ipv4)
			continue;
		if (fam == 6 && !ep->has_ipv6)
			continue;
		inet_ntop(fam == 4 ? AF_INET : AF_INET6, fam == 4 ? (void *)&ep->ipv4 : (void *)&ep->ipv6,
			  addr, sizeof(addr));
		int rc = mg->ipam->allocate_ip(mg->ipam_ctx, addr, owner, &res);

		if (rc == -EAGAIN)
			return rc;
		if (rc == -EEXIST) {
			struct holder h = { .address = addr };

			mg->ipam->list(mg->ipam_ctx, find_holder, &h);
			e->why = dup_printf("its address %s is held by %s in IPAM", addr,
					    *h.owner ? h.owner : "another owner");
			ep_identity_release(mg, ep->identity);
			ep->identity = NULL;
			return 0;
		}
		if (rc < 0)
			fibril_warn(mg->m, "endpoint %u: ipam did not re-reserve %s for %s: %s (kept)",
				    ep->id, addr, owner, strerror(-rc));
	}
	return 0;
}

/* ---- step 3: the table and the datapath -------------------------------------------- */

/* Step 3 for the entries from r->finish_at, for RESTORE_SLICE_MS at most;
 * then the end of the restore. 0 done, -EINPROGRESS: more (the caller lets
 * the loop run first). */
static int finish(struct ep_manager *mg, struct ep_restore *r)
{
	double t0 = now_ms();
	char err[256];

	for (; r->finish_at < r->n; r->finish_at++) {
		struct restore_entry *e = &r->v[r->finish_at];
		struct ep_endpoint *ep = e->ep;

		if (now_ms() - t0 >= RESTORE_SLICE_MS) {
			r->active_ms += now_ms() - t0;
			return -EINPROGRESS;
		}
		if (e->why) {
			char owner[FIBRIL_IPAM_OWNER_LEN];

			ep_owner(ep, owner, sizeof(owner));
			if (ep_datapath_remove(mg, ep, err, sizeof(err)))
				fibril_warn(mg->m, "endpoint %u: the datapath did not remove it: %s", ep->id, err);
			ep_store_remove(mg, ep->id);
			fibril_warn(mg->m, "endpoint %u (%s) removed at restore: %s; its addresses were released",
				    ep->id, owner, e->why);
			r->removed++;
			continue;
		}
		if (ep_table_insert(mg, ep)) {
			fibril_error(mg->m, "endpoint %u: cannot restore it: out of memory", ep->id);
			ep_identity_release(mg, ep->identity);
			continue;
		}
		e->ep = NULL; /* the table owns it */
		r->kept++;
		ep->state = FIBRIL_EP_REGENERATING;
		if (ep_datapath_upsert(mg, ep, err, sizeof(err))) {
			if (!ep_iface_gone(mg, ep, err)) {
				fibril_warn(mg->m, "endpoint %u: the datapath did not re-adopt it: %s; retrying",
					    ep->id, err);
				ep->datapath_pending = true;
			}
		} else {
			ep->state = FIBRIL_EP_READY;
		}
		ep_publish(mg, FIBRIL_ENDPOINT_TOPIC_CREATED, ep, ep->identity->id);
	}
	mg->store_live = true; /* the table holds every endpoint: compaction may run */
	ep_store_sync(mg, NULL, NULL);
	r->active_ms += now_ms() - t0;
	char extra[96] = "";

	if (r->corrupt)
		snprintf(extra, sizeof(extra), ", %zu corrupt state file%s skipped", r->corrupt,
			 r->corrupt == 1 ? "" : "s");
	if (r->waited_ms > 0)
		snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), "; waited %.0f ms for ipam",
			 r->waited_ms);
	fibril_info(mg->m, "restored %zu endpoints in %.1f ms (%zu removed%s)", r->kept, r->active_ms,
		    r->removed, extra);
	ep_apply_cached_pods(mg);
	cl_crd_restored(mg); /* CRD mode: this node's stale CiliumEndpoints go */
	ep_update_health(mg);
	if (r->kept && mg->retry_timer == NULL) {
		for (size_t i = 1; i < mg->eps_cap; i++)
			if (mg->eps[i] && (mg->eps[i]->datapath_pending || mg->eps[i]->k8s_pending)) {
				ep_schedule_retry(mg);
				break;
			}
	}
	return 0;
}

/* Step 2 from where it stopped, then step 3. 0 done, -EAGAIN waiting for
 * IPAM, -EINPROGRESS: step 3 goes on after a turn of the loop. */
static int advance(struct ep_manager *mg, struct ep_restore *r)
{
	double t0 = now_ms();
	int rc = load_and_settle(mg, r, t0);

	if (rc) {
		r->active_ms += now_ms() - t0;
		return rc;
	}
	for (; r->ipam_at < r->n; r->ipam_at++) {
		if (reserve(mg, &r->v[r->ipam_at]) == -EAGAIN) {
			r->active_ms += now_ms() - t0;
			return -EAGAIN;
		}
	}
	r->active_ms += now_ms() - t0;
	return finish(mg, r);
}

/* The timer of the next step: IPAM's retry, or at once (a slice's turn). */
static int arm(struct ep_manager *mg, struct ep_restore *r, int rc)
{
	r->waiting_ipam = rc == -EAGAIN;
	if (r->waiting_ipam && !r->waiting_logged) {
		r->waiting_logged = true;
		fibril_info(mg->m, "ipam has no pool yet: restore of %zu endpoints waits for it (retrying every %d ms)",
			    r->n, RETRY_MS);
	}
	if (r->waiting_ipam)
		clock_gettime(CLOCK_MONOTONIC, &r->wait_start);
	/* 1 ms, not 0: a timer due at the loop's cached time runs in the same
	 * timers phase (libuv), and the loop would never turn between slices */
	mg->restore_timer = fibril_timer_add(mg->m, r->waiting_ipam ? RETRY_MS : 1, 0, restore_tick, mg);
	return mg->restore_timer ? 0 : -ENOMEM;
}

static void restore_tick(struct fibril_timer *t, void *ud)
{
	struct ep_manager *mg = ud;
	struct ep_restore *r = mg->restore;
	struct timespec now;

	(void)t;
	mg->restore_timer = NULL;
	if (!r)
		return;
	if (r->waiting_ipam) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		r->waited_ms += (double)(now.tv_sec - r->wait_start.tv_sec) * 1e3 +
				(double)(now.tv_nsec - r->wait_start.tv_nsec) / 1e6;
	}
	int rc = advance(mg, r);

	if (rc == -EAGAIN || rc == -EINPROGRESS) {
		if (arm(mg, r, rc)) {
			fibril_module_set_error(mg->m, "cannot arm the restore retry timer");
			mg->restore = NULL;
			restore_free(r);
			fibril_module_start_done(mg->m, -ENOMEM);
		}
		return;
	}
	mg->restore = NULL;
	if (rc < 0) { /* out of memory, or the journal refused the migrated files */
		for (size_t i = 0; i < r->n; i++)
			if (r->v[i].ep && r->v[i].ep->identity)
				ep_identity_release(mg, r->v[i].ep->identity);
		if (rc == -ENOMEM)
			fibril_module_set_error(mg->m, "restore: out of memory");
	}
	restore_free(r);
	fibril_module_start_done(mg->m, rc < 0 ? rc : 0);
}

int ep_restore_start(struct ep_manager *mg)
{
	struct ep_restore *r = calloc(1, sizeof(*r));
	double t0 = now_ms();
	int rc;

	if (!r)
		return -ENOMEM;
	if ((rc = read_all(mg, r))) {
		restore_free(r);
		if (rc == -ENOMEM)
			fibril_module_set_error(mg->m, "restore: out of memory");
		return rc;
	}
	r->active_ms = now_ms() - t0;
	/* the records parsed, checked and put back in slices: the first one
	 * here, the others after turns of the loop */
	rc = advance(mg, r);
	if (rc == 0) {
		restore_free(r);
		return 0;
	}
	mg->restore = r;
	if (arm(mg, r, rc)) {
		mg->restore = NULL;
		restore_free(r);
		fibril_module_set_error(mg->m, "cannot arm the restore retry timer");
		return -ENOMEM;
	}
	return FIBRIL_START_PENDING;
}

void ep_restore_abort(struct ep_manager *mg)
{
	if (mg->restore_timer)
		fibril_timer_cancel(mg->restore_timer);
	mg->restore_timer = NULL;
	if (mg->restore) {
		for (size_t i = 0; i < mg->restore->n; i++)
			if (mg->restore->v[i].ep && mg->restore->v[i].ep->identity)
				ep_identity_release(mg, mg->restore->v[i].ep->identity);
		restore_free(mg->restore);
	}
	mg->restore = NULL;
}
