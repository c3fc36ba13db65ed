/* tests/unit/test_ipamstore.c - unit tests of the IPAM allocation store
 * (lib/ipamstore.c, <fibril/ipamstore.h>): allocate and release through
 * its ipam interface, one address per owner and family, error codes, the
 * serving callback, what is on disk (the journal replayed as the next run
 * reads it), restore from disk (the journal, and SDK 1.3's one file per
 * allocation written by hand as ipam-cluster-pool wrote it, moved into the
 * journal), stale allocations after a CIDR change, corrupt and leftover
 * files, a failed flush reported by wait_durable, and the family report
 * for an older caller's shorter struct. No loop runs here, so every
 * journal flush happens at once on this thread. */
#include "lib_int.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_main.h"

static char dir[PATH_MAX]; /* the store's directory, fresh per test */
static char root[64]; /* /tmp/test_ipamstore.XXXXXX */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void fresh_dir(void)
{
	if (root[0])
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(root, sizeof(root), "/tmp/test_ipamstore.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/state/ipam-test", root); /* created by open */
}

static int suite_teardown(void)
{
	if (root[0])
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static struct fibril_cidr cidr_of(const char *s)
{
	struct fibril_cidr c;
	memset(&c, 0, sizeof(c));
	CU_ASSERT_EQUAL_FATAL(fibril_cidr_parse(s, &c), 0);
	return c;
}

static bool serving_answer;
static bool serving_cb(void *ud, int family)
{
	(void)ud;
	(void)family;
	return serving_answer;
}

/* A store over dir opened for families, with node CIDRs (NULL: none yet). */
static struct fibril_ipamstore *open_store(unsigned families, const char *v4, const char *v6,
					   bool with_serving)
{
	struct fibril_ipamstore_opts o = {.sz = sizeof(o), .dir = dir};
	if (with_serving)
		o.serving = serving_cb;
	struct fibril_ipamstore *s = NULL;
	CU_ASSERT_EQUAL_FATAL(fibril_ipamstore_new(NULL, &o, &s), 0);
	char why[256];
	int rc = fibril_ipamstore_open(s, families, why, sizeof(why));
	if (rc)
		fprintf(stderr, "open: %s\n", why);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	if (v4) {
		struct fibril_cidr c = cidr_of(v4);
		CU_ASSERT_EQUAL_FATAL(fibril_ipamstore_set_node(s, &c), 0);
	}
	if (v6) {
		struct fibril_cidr c = cidr_of(v6);
		CU_ASSERT_EQUAL_FATAL(fibril_ipamstore_set_node(s, &c), 0);
	}
	return s;
}

#define OPS(s) fibril_ipamstore_ops(s)

/* allocate_next for one family -> the address ("" on error, *rc set). */
static const char *next(struct fibril_ipamstore *s, int family, const char *owner, int *rc)
{
	static struct fibril_ipam_result r;
	memset(&r, 0, sizeof(r));
	r.sz = sizeof(r);
	*rc = OPS(s)->allocate_next(s, family, owner, &r, 1);
	return *rc == 1 ? r.address : "";
}

static const char *next_ok(struct fibril_ipamstore *s, int family, const char *owner)
{
	int rc;
	const char *a = next(s, family, owner, &rc);
	CU_ASSERT_EQUAL(rc, 1);
	return a;
}

/* What the next run reads for an address: replays the store's journal
 * ("+<address> <owner>", "-<address>") as open would. */
struct disk_lookup {
	const char *addr;
	char owner[512];
	bool found;
};

static int disk_record(void *ud, const void *rec, size_t len)
{
	struct disk_lookup *d = ud;
	char text[600];
	if (len >= sizeof(text))
		return -E2BIG;
	memcpy(text, rec, len);
	text[len] = '\0';
	char *sp = strchr(text, ' ');
	if (sp)
		*sp = '\0';
	if (strcmp(text + 1, d->addr) != 0)
		return 0;
	d->found = text[0] == '+';
	snprintf(d->owner, sizeof(d->owner), "%s", sp ? sp + 1 : "");
	return 0;
}

/* The owner the disk holds for an allocation, or NULL when absent. */
static const char *file_of(int family, const char *addr)
{
	(void)family;
	static struct disk_lookup d;
	memset(&d, 0, sizeof(d));
	d.addr = addr;
	struct fibril_journal_opts o = {.sz = sizeof(o), .dir = dir, .name = "allocations",
					.replay = disk_record, .ud = &d};
	struct fibril_journal *j = NULL;
	char why[256];
	CU_ASSERT_EQUAL_FATAL(fibril_journal_open(NULL, &o, &j, why, sizeof(why)), 0);
	fibril_journal_close(j);
	return d.found ? d.owner : NULL;
}

static void put_file(const char *rel, const char *content)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	FILE *f = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(content, f);
	fclose(f);
}

static bool exists(const char *rel)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return access(path, F_OK) == 0;
}

/* list() into "addr=owner;..." */
static char listed[4096];
static int list_cb(const char *address, const char *owner, void *ud)
{
	(void)ud;
	size_t off = strlen(listed);
	snprintf(listed + off, sizeof(listed) - off, "%s=%s;", address, owner);
	return 0;
}

static const char *list_all(struct fibril_ipamstore *s)
{
	listed[0] = '\0';
	CU_ASSERT(OPS(s)->list(s, list_cb, NULL) >= 0);
	return listed;
}

static struct fibril_ipamstore_family info_of(struct fibril_ipamstore *s, int family)
{
	struct fibril_ipamstore_family f = {.sz = sizeof(f)};
	CU_ASSERT_EQUAL(fibril_ipamstore_family(s, family, &f), 0);
	return f;
}

static void test_allocate_release(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/29", NULL, false);
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "a/eth0"), "10.0.0.2"); /* .1 is the router */
	CU_ASSERT_STRING_EQUAL(next_ok(s, FIBRIL_IPAM_ANY, "b/eth0"), "10.0.0.3");
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "a/eth0"), "10.0.0.2"); /* asking again */
	CU_ASSERT_STRING_EQUAL(file_of(4, "10.0.0.2"), "a/eth0");
	CU_ASSERT_STRING_EQUAL(file_of(4, "10.0.0.3"), "b/eth0");
	CU_ASSERT_STRING_EQUAL(list_all(s), "10.0.0.2=a/eth0;10.0.0.3=b/eth0;");

	struct fibril_ipam_result r = {.sz = sizeof(r)};
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.5", "c/eth0", &r), 0);
	CU_ASSERT_STRING_EQUAL(r.cidr, "10.0.0.0/29");
	CU_ASSERT_STRING_EQUAL(r.gateway, "10.0.0.1");
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.5", "c/eth0", &r), 0); /* idempotent */
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.5", "d/eth0", &r), -EEXIST);
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.1", "d/eth0", &r), -ERANGE); /* router */
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.1.5", "d/eth0", &r), -ERANGE);
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "fd00::5", "d/eth0", &r), -EAFNOSUPPORT);
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "nope", "d/eth0", &r), -EINVAL);

	int rc;
	next(s, 6, "x", &rc);
	CU_ASSERT_EQUAL(rc, -EAFNOSUPPORT);
	next(s, 5, "x", &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	char longowner[FIBRIL_IPAM_OWNER_LEN + 1];
	memset(longowner, 'o', sizeof(longowner) - 1);
	longowner[sizeof(longowner) - 1] = '\0';
	next(s, 4, longowner, &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	struct fibril_ipam_result small = {.sz = 4};
	CU_ASSERT_EQUAL(OPS(s)->allocate_next(s, 4, "e", &small, 1), -EINVAL);

	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "e"), "10.0.0.4");
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "f"), "10.0.0.6");
	next(s, 4, "g", &rc); /* .2-.6 usable: exhausted */
	CU_ASSERT_EQUAL(rc, -ENOSPC);
	CU_ASSERT_PTR_NULL(file_of(4, "10.0.0.7"));

	struct fibril_ipam_pool p = {.sz = sizeof(p)};
	CU_ASSERT_EQUAL(OPS(s)->pools(s, &p, 1), 1);
	CU_ASSERT_EQUAL(p.used, 5);
	CU_ASSERT_EQUAL(p.total, 5);

	CU_ASSERT_EQUAL(OPS(s)->release_ip(s, "10.0.0.3"), 0);
	CU_ASSERT_PTR_NULL(file_of(4, "10.0.0.3"));
	CU_ASSERT_EQUAL(OPS(s)->release_ip(s, "10.0.0.3"), -ENOENT);
	CU_ASSERT_EQUAL(OPS(s)->release_ip(s, "10.0.9.3"), -ERANGE);
	CU_ASSERT_EQUAL(OPS(s)->release_owner(s, "a/eth0"), 1);
	CU_ASSERT_EQUAL(OPS(s)->release_owner(s, "a/eth0"), 0);
	CU_ASSERT_EQUAL(OPS(s)->release_owner(s, ""), -EINVAL);
	CU_ASSERT_PTR_NULL(file_of(4, "10.0.0.2"));
	CU_ASSERT_STRING_EQUAL(list_all(s), "10.0.0.4=e;10.0.0.5=c/eth0;10.0.0.6=f;");
	CU_ASSERT_EQUAL(info_of(s, 4).used, 3);
	CU_ASSERT(!exists("4/.10.0.0.4.tmp")); /* no temp file is left behind */
	fibril_ipamstore_free(s);
}

static void test_dual_stack_all_or_nothing(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4 | FIBRIL_IPAMSTORE_IPV6,
						"10.0.0.0/30", "fd00::/120", false);
	struct fibril_ipam_result r[2] = {{.sz = sizeof(r[0])}, {.sz = sizeof(r[1])}};
	CU_ASSERT_EQUAL(OPS(s)->allocate_next(s, FIBRIL_IPAM_ANY, "a", r, 2), 2);
	CU_ASSERT_STRING_EQUAL(r[0].address, "10.0.0.2");
	CU_ASSERT_STRING_EQUAL(r[1].address, "fd00::2");
	CU_ASSERT_EQUAL(OPS(s)->allocate_next(s, FIBRIL_IPAM_ANY, "b", r, 1), -EINVAL); /* max */
	/* IPv4 is full (a /30 has one usable address): b gets nothing, not even IPv6 */
	CU_ASSERT_EQUAL(OPS(s)->allocate_next(s, FIBRIL_IPAM_ANY, "b", r, 2), -ENOSPC);
	CU_ASSERT_STRING_EQUAL(list_all(s), "10.0.0.2=a;fd00::2=a;");
	CU_ASSERT_STRING_EQUAL(file_of(6, "fd00::2"), "a");
	CU_ASSERT_EQUAL(OPS(s)->release_owner(s, "a"), 2);
	fibril_ipamstore_free(s);
	/* the node-cidr file names both */
	FILE *f;
	char path[PATH_MAX + 16], buf[256] = "";
	snprintf(path, sizeof(path), "%s/node-cidr", dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f = fopen(path, "r"));
	CU_ASSERT(fread(buf, 1, sizeof(buf) - 1, f) > 0);
	fclose(f);
	CU_ASSERT_STRING_EQUAL(buf, "4 10.0.0.0/30\n6 fd00::/120\n");
}

/* Output arrays carry their element size: a caller built against a newer
 * SDK whose result and pool structs grew (a field appended) passes
 * elements longer than the host's; element 1 is where the caller's stride
 * puts it, and what the host does not know stays as the caller set it. */
struct grown_result {
	struct fibril_ipam_result r;
	uint64_t future;
};
struct grown_pool {
	struct fibril_ipam_pool p;
	uint64_t future;
};

static void test_grown_output_arrays(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4 | FIBRIL_IPAMSTORE_IPV6,
						"10.0.0.0/24", "fd00::/120", false);
	struct grown_result r[2];
	memset(r, 0, sizeof(r));
	r[0].r.sz = r[1].r.sz = sizeof(r[0]);
	r[0].future = r[1].future = 0x5a5a;
	CU_ASSERT_EQUAL(OPS(s)->allocate_next(s, FIBRIL_IPAM_ANY, "a", &r[0].r, 2), 2);
	CU_ASSERT_STRING_EQUAL(r[0].r.address, "10.0.0.2");
	CU_ASSERT_STRING_EQUAL(r[1].r.address, "fd00::2");
	CU_ASSERT_EQUAL(r[1].r.family, 6);
	CU_ASSERT_EQUAL(r[0].future, 0x5a5a);
	CU_ASSERT_EQUAL(r[1].future, 0x5a5a);
	CU_ASSERT_EQUAL(r[1].r.sz, sizeof(r[1]));
	/* elements that disagree on their size are refused, nothing allocated */
	r[1].r.sz = sizeof(r[1].r);
	CU_ASSERT_EQUAL(OPS(s)->allocate_next(s, FIBRIL_IPAM_ANY, "b", &r[0].r, 2), -EINVAL);
	CU_ASSERT_STRING_EQUAL(list_all(s), "10.0.0.2=a;fd00::2=a;");

	struct grown_pool p[2];
	memset(p, 0, sizeof(p));
	p[0].p.sz = p[1].p.sz = sizeof(p[0]);
	p[0].future = p[1].future = 0x5a5a;
	CU_ASSERT_EQUAL(OPS(s)->pools(s, &p[0].p, 2), 2);
	CU_ASSERT_EQUAL(p[0].p.family, 4);
	CU_ASSERT_EQUAL(p[1].p.family, 6);
	CU_ASSERT_STRING_EQUAL(p[1].p.cidr, "fd00::/120");
	CU_ASSERT_EQUAL(p[1].p.used, 1);
	CU_ASSERT_EQUAL(p[0].future, 0x5a5a);
	CU_ASSERT_EQUAL(p[1].future, 0x5a5a);
	fibril_ipamstore_free(s);
}

static void test_serving_callback(void)
{
	fresh_dir();
	serving_answer = false;
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/24", NULL, true);
	int rc;
	next(s, 4, "a", &rc);
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	struct fibril_ipam_pool p = {.sz = sizeof(p)};
	CU_ASSERT_EQUAL(OPS(s)->pools(s, &p, 1), 0);
	CU_ASSERT(!info_of(s, 4).serving);
	serving_answer = true;
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "a"), "10.0.0.2");
	CU_ASSERT_EQUAL(OPS(s)->pools(s, &p, 1), 1);
	serving_answer = false; /* e.g. the claim was lost: releases still work */
	CU_ASSERT_EQUAL(OPS(s)->release_ip(s, "10.0.0.2"), 0);
	fibril_ipamstore_free(s);
}

/* Files as ipam-cluster-pool wrote them: restored, and the same owner gets
 * the same address. */
static void test_restore(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/24", NULL, false);
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "a"), "10.0.0.2");
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "b"), "10.0.0.3");
	fibril_ipamstore_free(s);
	put_file("4/10.0.0.77", "hand/eth0");
	put_file("4/10.0.0.78", ""); /* anonymous */

	s = open_store(FIBRIL_IPAMSTORE_IPV4, NULL, NULL, false);
	struct fibril_ipamstore_family fi = info_of(s, 4);
	CU_ASSERT_EQUAL(fi.restored, 4);
	CU_ASSERT(fi.have_saved && !fi.have_node);
	/* the 1.3 files moved into the journal */
	CU_ASSERT(!exists("4/10.0.0.77") && !exists("4/10.0.0.78"));
	CU_ASSERT_STRING_EQUAL(file_of(4, "10.0.0.77"), "hand/eth0");
	CU_ASSERT_STRING_EQUAL(file_of(4, "10.0.0.78"), "");
	char c[FIBRIL_IPAM_CIDR_LEN];
	CU_ASSERT_STRING_EQUAL(fibril_cidr_format(&fi.saved, c, sizeof(c)), "10.0.0.0/24");
	int rc;
	next(s, 4, "a", &rc); /* no node CIDR yet */
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	struct fibril_cidr node = cidr_of("10.0.0.0/24");
	CU_ASSERT_EQUAL(fibril_ipamstore_set_node(s, &node), 0);
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "b"), "10.0.0.3");
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "hand/eth0"), "10.0.0.77");
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "c"), "10.0.0.4"); /* restored ones are taken */
	CU_ASSERT_STRING_EQUAL(list_all(s),
			       "10.0.0.2=a;10.0.0.3=b;10.0.0.4=c;10.0.0.77=hand/eth0;10.0.0.78=;");
	CU_ASSERT_EQUAL(info_of(s, 4).used, 5);
	fibril_ipamstore_free(s);
}

/* The node CIDR changed: restored allocations outside it are stale. */
static void test_stale(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/24", NULL, false);
	next_ok(s, 4, "a");
	next_ok(s, 4, "b");
	next_ok(s, 4, "c");
	fibril_ipamstore_free(s);

	s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.1.0/24", NULL, false);
	struct fibril_ipamstore_family fi = info_of(s, 4);
	CU_ASSERT_EQUAL(fi.stale, 3);
	CU_ASSERT_EQUAL(fi.used, 0);
	CU_ASSERT_STRING_EQUAL(list_all(s), ""); /* stale ones are not listed */
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "a"), "10.0.1.2"); /* nor handed out again */
	struct fibril_ipam_result r = {.sz = sizeof(r)};
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.3", "b", &r), -ERANGE);
	CU_ASSERT_EQUAL(OPS(s)->release_ip(s, "10.0.0.2"), 0); /* releasing removes it */
	CU_ASSERT_PTR_NULL(file_of(4, "10.0.0.2"));
	CU_ASSERT_EQUAL(OPS(s)->release_owner(s, "b"), 1);
	CU_ASSERT_EQUAL(info_of(s, 4).stale, 1);
	CU_ASSERT_STRING_EQUAL(file_of(4, "10.0.0.4"), "c");
	/* the old CIDR comes back: what is still on disk is handed out to its owner */
	struct fibril_cidr old = cidr_of("10.0.0.0/24");
	CU_ASSERT_EQUAL(fibril_ipamstore_set_node(s, &old), 0);
	CU_ASSERT_EQUAL(info_of(s, 4).stale, 1); /* now 10.0.1.2 */
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "c"), "10.0.0.4");
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "d"), "10.0.0.2");
	fibril_ipamstore_free(s);
}

/* Leftover temp files go, junk stays and is ignored, an unreadable
 * allocation is kept with an unknown owner, a bad node-cidr is no hint. */
static void test_corrupt_files(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4 | FIBRIL_IPAMSTORE_IPV6,
						NULL, NULL, false);
	fibril_ipamstore_free(s);
	put_file("4/.10.0.0.9.tmp", "crashed/eth0"); /* a write that never completed */
	put_file("4/garbage", "x");
	put_file("4/10.0.0.010", "x"); /* not canonical */
	put_file("4/fd00::5", "x");    /* another family's */
	put_file("6/10.0.0.5", "x");
	put_file("4/10.0.0.11", "ok/eth0");
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/4/10.0.0.12", dir);
	CU_ASSERT_EQUAL(mkdir(path, 0755), 0); /* cannot be read as a file */
	put_file("node-cidr", "4 10.0.0.0/33\nsix fd00::/64\n6 10.0.0.0/8\n");

	s = open_store(FIBRIL_IPAMSTORE_IPV4 | FIBRIL_IPAMSTORE_IPV6, NULL, NULL, false);
	CU_ASSERT(!exists("4/.10.0.0.9.tmp"));
	CU_ASSERT(exists("4/garbage") && exists("4/10.0.0.010") && exists("6/10.0.0.5"));
	struct fibril_ipamstore_family f4 = info_of(s, 4), f6 = info_of(s, 6);
	CU_ASSERT_EQUAL(f4.restored, 2);
	CU_ASSERT_EQUAL(f6.restored, 0);
	CU_ASSERT(!f4.have_saved && !f6.have_saved);
	struct fibril_cidr node = cidr_of("10.0.0.0/24");
	CU_ASSERT_EQUAL(fibril_ipamstore_set_node(s, &node), 0);
	CU_ASSERT_STRING_EQUAL(list_all(s), "10.0.0.11=ok/eth0;10.0.0.12=;");
	struct fibril_ipam_result r = {.sz = sizeof(r)};
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.9", "new", &r), 0); /* the temp's is free */
	CU_ASSERT_EQUAL(OPS(s)->allocate_ip(s, "10.0.0.12", "new", &r), -EEXIST);
	fibril_ipamstore_free(s);
}

static int durable_status = 1;
static void durable_cb(void *ud, int status)
{
	(void)ud;
	durable_status = status;
}

/* A flush that fails (the disk is full: the file size limit) is reported
 * by wait_durable, so nobody is told of the answer; the store refuses
 * every change after it, and the next run does not have the allocation. */
static void test_failed_flush_reported(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/24", NULL, false);
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "a"), "10.0.0.2");
	CU_ASSERT_EQUAL(OPS(s)->wait_durable(s, durable_cb, NULL), 0);
	CU_ASSERT_EQUAL(durable_status, 0);
	char path[PATH_MAX + 32];
	struct stat st;
	snprintf(path, sizeof(path), "%s/allocations.journal", dir);
	CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
	struct rlimit old, lim;
	CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)st.st_size; /* no byte more */
	void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
	CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_FSIZE, &lim), 0);
	int rc;
	next(s, 4, "b", &rc); /* answered from memory ... */
	CU_ASSERT_EQUAL(rc, 1);
	CU_ASSERT_EQUAL(OPS(s)->wait_durable(s, durable_cb, NULL), -EIO); /* ... never durable */
	next(s, 4, "c", &rc);
	CU_ASSERT_EQUAL(rc, -EIO);
	CU_ASSERT_EQUAL(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, oldsig);
	fibril_ipamstore_free(s);
	CU_ASSERT_STRING_EQUAL(file_of(4, "10.0.0.2"), "a");
	CU_ASSERT_PTR_NULL(file_of(4, "10.0.0.3"));
	s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/24", NULL, false);
	CU_ASSERT_STRING_EQUAL(list_all(s), "10.0.0.2=a;");
	fibril_ipamstore_free(s);
}

static void test_api_misuse(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = NULL;
	struct fibril_ipamstore_opts o = {.sz = 4, .dir = dir};
	CU_ASSERT_EQUAL(fibril_ipamstore_new(NULL, &o, &s), -EINVAL); /* too short */
	CU_ASSERT_PTR_NULL(s);
	CU_ASSERT_EQUAL(fibril_ipamstore_new(NULL, NULL, &s), -EINVAL); /* no dir, no module */
	o.sz = sizeof(o);
	o.strategy = (enum fibril_ipalloc_strategy)7;
	CU_ASSERT_EQUAL(fibril_ipamstore_new(NULL, &o, &s), -EINVAL);
	o.strategy = FIBRIL_IPALLOC_RANDOM;
	o.seed = 42;
	CU_ASSERT_EQUAL_FATAL(fibril_ipamstore_new(NULL, &o, &s), 0);
	CU_ASSERT_STRING_EQUAL(fibril_ipamstore_dir(s), "");
	struct fibril_cidr c = cidr_of("10.0.0.0/24");
	CU_ASSERT_EQUAL(fibril_ipamstore_set_node(s, &c), -EAFNOSUPPORT); /* not opened */
	char why[256];
	CU_ASSERT_EQUAL(fibril_ipamstore_open(s, 0, why, sizeof(why)), -EINVAL);
	CU_ASSERT_EQUAL(fibril_ipamstore_open(s, FIBRIL_IPAMSTORE_IPV6, why, sizeof(why)), 0);
	CU_ASSERT_STRING_EQUAL(fibril_ipamstore_dir(s), dir);
	CU_ASSERT_EQUAL(fibril_ipamstore_open(s, FIBRIL_IPAMSTORE_IPV6, why, sizeof(why)), -EINVAL);
	CU_ASSERT_EQUAL(fibril_ipamstore_set_node(s, &c), -EAFNOSUPPORT); /* v4 not opened */
	struct fibril_cidr big = cidr_of("fd00::/64");
	CU_ASSERT_EQUAL(fibril_ipamstore_set_node(s, &big), -E2BIG);
	CU_ASSERT(!info_of(s, 6).have_node);
	int rc;
	next(s, 6, "a", &rc);
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	fibril_ipamstore_free(s);
	fibril_ipamstore_free(NULL);

	/* a path that cannot be a directory: one line naming it */
	char blocker[PATH_MAX + 32];
	snprintf(blocker, sizeof(blocker), "%s/state/blocker", root);
	FILE *f = fopen(blocker, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fclose(f);
	snprintf(dir, sizeof(dir), "%s/state/blocker/sub", root);
	CU_ASSERT_EQUAL_FATAL(fibril_ipamstore_new(NULL, &o, &s), 0);
	CU_ASSERT_EQUAL(fibril_ipamstore_open(s, FIBRIL_IPAMSTORE_IPV4, why, sizeof(why)), -ENOTDIR);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "cannot open "));
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "/state/blocker/sub"));
	fibril_ipamstore_free(s);
}

/* An older caller's struct is shorter: nothing past its sz is written. */
static void test_family_short_struct(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/24", NULL, false);
	next_ok(s, 4, "a");
	union {
		struct fibril_ipamstore_family f;
		unsigned char raw[sizeof(struct fibril_ipamstore_family) + 8];
	} u;
	memset(&u, 0xab, sizeof(u));
	size_t shortsz = offsetof(struct fibril_ipamstore_family, capacity);
	u.f.sz = (uint32_t)shortsz;
	CU_ASSERT_EQUAL(fibril_ipamstore_family(s, 4, &u.f), 0);
	CU_ASSERT_EQUAL(u.f.sz, shortsz);
	CU_ASSERT_EQUAL(u.f.used, 1);
	CU_ASSERT(u.f.have_node && u.f.serving && u.f.open);
	for (size_t i = shortsz; i < sizeof(u); i++)
		CU_ASSERT_EQUAL(u.raw[i], 0xab);
	u.f.sz = 2;
	CU_ASSERT_EQUAL(fibril_ipamstore_family(s, 4, &u.f), -EINVAL);
	u.f.sz = sizeof(u.f);
	CU_ASSERT_EQUAL(fibril_ipamstore_family(s, 5, &u.f), -EINVAL);
	fibril_ipamstore_free(s);
}

/* Many owners: the tables grow and every lookup still answers. */
static void test_many(void)
{
	fresh_dir();
	struct fibril_ipamstore *s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/22", NULL, false);
	char owner[32], first[FIBRIL_IPAM_ADDR_LEN] = "";
	for (int i = 0; i < 600; i++) {
		snprintf(owner, sizeof(owner), "pod-%d/eth0", i);
		const char *a = next_ok(s, 4, owner);
		if (i == 0)
			snprintf(first, sizeof(first), "%s", a);
	}
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "pod-0/eth0"), first);
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "pod-599/eth0"), "10.0.2.89");
	CU_ASSERT_EQUAL(info_of(s, 4).used, 600);
	fibril_ipamstore_free(s);
	s = open_store(FIBRIL_IPAMSTORE_IPV4, "10.0.0.0/22", NULL, false);
	CU_ASSERT_EQUAL(info_of(s, 4).restored, 600);
	CU_ASSERT_STRING_EQUAL(next_ok(s, 4, "pod-599/eth0"), "10.0.2.89");
	CU_ASSERT_EQUAL(OPS(s)->release_owner(s, "pod-300/eth0"), 1);
	CU_ASSERT_EQUAL(info_of(s, 4).used, 599);
	fibril_ipamstore_free(s);
}

FIBRIL_TEST_MAIN("ipamstore", NULL, suite_teardown, FIBRIL_TEST(test_allocate_release),
		 FIBRIL_TEST(test_dual_stack_all_or_nothing), FIBRIL_TEST(test_grown_output_arrays),
		 FIBRIL_TEST(test_serving_callback),
		 FIBRIL_TEST(test_restore), FIBRIL_TEST(test_stale), FIBRIL_TEST(test_corrupt_files),
		 FIBRIL_TEST(test_failed_flush_reported), FIBRIL_TEST(test_api_misuse),
		 FIBRIL_TEST(test_family_short_struct), FIBRIL_TEST(test_many))
