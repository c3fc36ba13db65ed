/* tests/unit/test_util.c - unit tests of the host's small helpers
 * (lib/util.c): edit_distance, nearest_name ("did you mean"),
 * write_file_atomic (content, mode, no temp file left, replace, two
 * writers of one path each with its own temp file (issue 14), clean
 * failure), mkdir_p and errbuf_set. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cunit_main.h"
#include <fibril/compat.h>
#include "lib_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char test_dir[64];

/* ---- helpers --------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void make_test_dir(void)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/fibril-test-util-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(test_dir));
}

static void remove_test_dir(void)
{
	if (test_dir[0])
		nftw(test_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	test_dir[0] = '\0';
}

static void path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", test_dir, name);
}

/* Number of entries in dir (without . and ..); the only name in *only. */
static int count_entries(const char *dir, char *only, size_t only_len)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (only)
			snprintf(only, only_len, "%s", de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* Reads a whole (small) file into buf; returns its length or -1. */
static ssize_t read_all(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len);
	close(fd);
	return n;
}

static unsigned file_mode(const char *path)
{
	struct stat st;
	if (stat(path, &st))
		return 0xffffffffu;
	return st.st_mode & 07777;
}

/* ---- edit_distance ---------------------------------------------------------- */

static void t_edit_distance(void)
{
	CU_ASSERT_EQUAL(edit_distance("", ""), 0);
	CU_ASSERT_EQUAL(edit_distance("abc", "abc"), 0);
	CU_ASSERT_EQUAL(edit_distance("", "abc"), 3);
	CU_ASSERT_EQUAL(edit_distance("abc", ""), 3);
	CU_ASSERT_EQUAL(edit_distance("kitten", "sitting"), 3);
	CU_ASSERT_EQUAL(edit_distance("sitting", "kitten"), 3);
	CU_ASSERT_EQUAL(edit_distance("flaw", "lawn"), 2);
	CU_ASSERT_EQUAL(edit_distance("state-dir", "statedir"), 1); /* deletion */
	CU_ASSERT_EQUAL(edit_distance("statedir", "state-dir"), 1); /* insertion */
	CU_ASSERT_EQUAL(edit_distance("log-level", "log-lever"), 1); /* substitution */
	CU_ASSERT_EQUAL(edit_distance("ab", "ba"), 2);                 /* no transposition */
	CU_ASSERT_EQUAL(edit_distance("Hello", "hello"), 1);           /* case-sensitive */
}

static void t_edit_distance_long(void)
{
	char a64[65], b64[65], a65[66];
	memset(a64, 'a', 64);
	a64[64] = '\0';
	memcpy(b64, a64, sizeof(b64));
	b64[63] = 'b';
	memset(a65, 'a', 65);
	a65[65] = '\0';
	CU_ASSERT_EQUAL(edit_distance(a64, a64), 0);
	CU_ASSERT_EQUAL(edit_distance(a64, b64), 1);
	CU_ASSERT_EQUAL(edit_distance("", a64), 64);
	/* Longer than 64: "infinitely" far, never suggested. */
	CU_ASSERT_EQUAL(edit_distance(a65, a64), (size_t)-1);
	CU_ASSERT_EQUAL(edit_distance(a64, a65), (size_t)-1);
}

/* ---- nearest_name ----------------------------------------------------------- */

static void t_nearest_name(void)
{
	static const char *const keys[] = {"state-dir", "run-dir", "log-level", "start-timeout"};
	const size_t n = sizeof(keys) / sizeof(keys[0]);
	const char *s;

	s = nearest_name("log-levl", keys, n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "log-level");

	s = nearest_name("statedir", keys, n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "state-dir");

	/* An exact match is its own nearest name. */
	s = nearest_name("run-dir", keys, n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "run-dir");

	/* Nothing close: no suggestion. */
	CU_ASSERT_PTR_NULL(nearest_name("completely-different", keys, n));
	CU_ASSERT_PTR_NULL(nearest_name("x", keys, n));
	/* No candidates. */
	CU_ASSERT_PTR_NULL(nearest_name("run-dir", keys, 0));
	/* Only the first n candidates are looked at. */
	CU_ASSERT_PTR_NULL(nearest_name("start-timeout", keys, 2));
}

static void t_nearest_name_threshold(void)
{
	static const char *const one[] = {"abcdefgh"};
	/* distance 3: still suggested */
	CU_ASSERT_EQUAL(edit_distance("abcdeXYZ", "abcdefgh"), 3);
	const char *s = nearest_name("abcdeXYZ", one, 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "abcdefgh");
	/* distance 4: too far */
	CU_ASSERT_EQUAL(edit_distance("abcdWXYZ", "abcdefgh"), 4);
	CU_ASSERT_PTR_NULL(nearest_name("abcdWXYZ", one, 1));
}

static void t_nearest_name_best_wins(void)
{
	/* The closest candidate wins wherever it is in the list. */
	static const char *const cands[] = {"timeout", "start-timeout", "stop-timeout"};
	const char *s = nearest_name("stop-timeot", cands, 3);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "stop-timeout");
	/* On a tie the first one is kept. */
	static const char *const ties[] = {"cat", "bat", "hat"};
	s = nearest_name("rat", ties, 3);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "cat");
	/* A word longer than 64 characters is never close to anything. */
	char longword[80];
	memset(longword, 'a', sizeof(longword) - 1);
	longword[sizeof(longword) - 1] = '\0';
	static const char *const as[] = {"aaaa"};
	CU_ASSERT_PTR_NULL(nearest_name(longword, as, 1));
}

/* ---- write_file_atomic ------------------------------------------------------- */

static void t_write_atomic_content_and_mode(void)
{
	make_test_dir();
	char path[PATH_MAX], buf[256], only[256];
	path_in(path, sizeof(path), "state.json");
	mode_t old = umask(0);
	static const char data[] = "{\"a\":1}\n\0binary\xff";
	int rc = write_file_atomic(path, data, sizeof(data), 0640);
	umask(old);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_EQUAL(read_all(path, buf, sizeof(buf)), (ssize_t)sizeof(data));
	CU_ASSERT_EQUAL(memcmp(buf, data, sizeof(data)), 0);
	CU_ASSERT_EQUAL(file_mode(path), 0640);
	/* No temporary file left behind. */
	CU_ASSERT_EQUAL(count_entries(test_dir, only, sizeof(only)), 1);
	CU_ASSERT_STRING_EQUAL(only, "state.json");
	remove_test_dir();
}

static void t_write_atomic_other_mode(void)
{
	make_test_dir();
	char path[PATH_MAX];
	path_in(path, sizeof(path), "secret");
	mode_t old = umask(0);
	int rc = write_file_atomic(path, "k", 1, 0600);
	umask(old);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_EQUAL(file_mode(path), 0600);
	remove_test_dir();
}

static void t_write_atomic_empty(void)
{
	make_test_dir();
	char path[PATH_MAX], buf[16];
	path_in(path, sizeof(path), "empty");
	CU_ASSERT_EQUAL(write_file_atomic(path, NULL, 0, 0644), 0);
	CU_ASSERT_EQUAL(read_all(path, buf, sizeof(buf)), 0);
	CU_ASSERT_EQUAL(count_entries(test_dir, NULL, 0), 1);
	remove_test_dir();
}

static void t_write_atomic_replaces(void)
{
	make_test_dir();
	char path[PATH_MAX], buf[256], only[256];
	path_in(path, sizeof(path), "leases");
	FILE *f = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs("old content that is longer than the new one\n", f);
	fclose(f);
	struct stat before;
	CU_ASSERT_EQUAL_FATAL(stat(path, &before), 0);

	/* A reader holding the old file keeps seeing the old content. */
	int old_fd = open(path, O_RDONLY | O_CLOEXEC);
	CU_ASSERT_FATAL(old_fd >= 0);

	mode_t old = umask(0);
	int rc = write_file_atomic(path, "new\n", 4, 0600);
	umask(old);
	CU_ASSERT_EQUAL(rc, 0);
	ssize_t n = read_all(path, buf, sizeof(buf));
	CU_ASSERT_EQUAL(n, 4);
	CU_ASSERT_EQUAL(memcmp(buf, "new\n", 4), 0);
	/* Replaced by rename: a new inode, not the old one truncated. */
	struct stat after;
	CU_ASSERT_EQUAL_FATAL(stat(path, &after), 0);
	CU_ASSERT_NOT_EQUAL(after.st_ino, before.st_ino);
	CU_ASSERT_EQUAL(after.st_mode & 07777, 0600);
	n = read(old_fd, buf, sizeof(buf));
	CU_ASSERT(n > 4 && strncmp(buf, "old content", 11) == 0);
	close(old_fd);

	CU_ASSERT_EQUAL(count_entries(test_dir, only, sizeof(only)), 1);
	CU_ASSERT_STRING_EQUAL(only, "leases");
	remove_test_dir();
}

static void t_write_atomic_missing_dir(void)
{
	make_test_dir();
	char path[PATH_MAX], sub[PATH_MAX];
	path_in(sub, sizeof(sub), "no-such-dir");
	path_in(path, sizeof(path), "no-such-dir/file");
	CU_ASSERT_EQUAL(write_file_atomic(path, "x", 1, 0644), -ENOENT);
	CU_ASSERT_EQUAL(access(sub, F_OK), -1);
	CU_ASSERT_EQUAL(count_entries(test_dir, NULL, 0), 0);
	remove_test_dir();
}

static void t_write_atomic_rename_fails(void)
{
	/* The target is a non-empty directory: the rename fails, the error is
	 * returned and the temp file is removed. */
	make_test_dir();
	char path[PATH_MAX], inner[PATH_MAX];
	path_in(path, sizeof(path), "target");
	CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
	path_in(inner, sizeof(inner), "target/keep");
	FILE *f = fopen(inner, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fclose(f);
	int rc = write_file_atomic(path, "x", 1, 0644);
	CU_ASSERT(rc < 0);
	CU_ASSERT(rc == -EISDIR || rc == -ENOTEMPTY || rc == -EEXIST);
	CU_ASSERT_EQUAL(count_entries(test_dir, NULL, 0), 1); /* just "target" */
	CU_ASSERT_EQUAL(count_entries(path, NULL, 0), 1);     /* still "keep" */
	remove_test_dir();
}

static void t_write_atomic_relative_path(void)
{
	/* A bare file name: the directory to fsync is ".". */
	make_test_dir();
	char cwd[PATH_MAX], buf[8];
	CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(cwd, sizeof(cwd)));
	CU_ASSERT_EQUAL_FATAL(chdir(test_dir), 0);
	CU_ASSERT_EQUAL(write_file_atomic("plain", "abc", 3, 0644), 0);
	CU_ASSERT_EQUAL(read_all("plain", buf, sizeof(buf)), 3);
	CU_ASSERT_EQUAL(chdir(cwd), 0);
	CU_ASSERT_EQUAL(count_entries(test_dir, NULL, 0), 1);
	remove_test_dir();
}

/* Issue 14: two writers of one path. Another writer's temp file, still
 * being written, must not be truncated, written into or renamed away. */
static void t_write_atomic_other_writers_tmp(void)
{
	make_test_dir();
	char path[PATH_MAX], theirs[PATH_MAX], buf[64];
	path_in(path, sizeof(path), "shared");
	path_in(theirs, sizeof(theirs), ".shared.tmp"); /* the name every writer used */
	int fd = open(theirs, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "theirs, half", 12), 12);
	CU_ASSERT_EQUAL(write_file_atomic(path, "mine\n", 5, 0644), 0);
	CU_ASSERT_EQUAL(read_all(path, buf, sizeof(buf)), 5);
	CU_ASSERT_EQUAL(memcmp(buf, "mine\n", 5), 0);
	CU_ASSERT_EQUAL(read_all(theirs, buf, sizeof(buf)), 12); /* untouched */
	CU_ASSERT_EQUAL(memcmp(buf, "theirs, half", 12), 0);
	close(fd);
	remove_test_dir();
}

struct racer {
	const char *path;
	char fill;
	int errors;
};

#define RACE_SIZE 65536
#define RACE_ROUNDS 150

static void *race_writer(void *arg)
{
	struct racer *r = arg;
	char *data = malloc(RACE_SIZE);
	if (!data)
		return NULL;
	memset(data, r->fill, RACE_SIZE);
	for (int i = 0; i < RACE_ROUNDS; i++)
		if (write_file_atomic(r->path, data, RACE_SIZE, 0644))
			r->errors++;
	free(data);
	return NULL;
}

/* Two threads rewrite one path: every write succeeds, and the file always
 * holds one writer's whole content, never a mix or a short file. */
static void t_write_atomic_concurrent_writers(void)
{
	make_test_dir();
	char path[PATH_MAX];
	path_in(path, sizeof(path), "raced");
	struct racer a = {.path = path, .fill = 'a'}, b = {.path = path, .fill = 'b'};
	pthread_t ta, tb;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&ta, NULL, race_writer, &a), 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&tb, NULL, race_writer, &b), 0);
	int mixed = 0, checks = 0;
	char *buf = malloc(RACE_SIZE + 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	for (int i = 0; i < 400; i++) {
		ssize_t n = read_all(path, buf, RACE_SIZE + 1);
		if (n < 0)
			continue; /* not there yet */
		checks++;
		if (n != RACE_SIZE || (buf[0] != 'a' && buf[0] != 'b') ||
		    memchr(buf, buf[0] == 'a' ? 'b' : 'a', RACE_SIZE) || memchr(buf, 0, RACE_SIZE))
			mixed++;
	}
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	free(buf);
	CU_ASSERT_EQUAL(a.errors + b.errors, 0);
	CU_ASSERT_EQUAL(mixed, 0);
	CU_ASSERT_EQUAL(count_entries(test_dir, NULL, 0), 1); /* no temp file left */
	(void)checks;
	remove_test_dir();
}

/* ---- mkdir_p ------------------------------------------------------------------ */

static bool is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void t_mkdir_p_nested(void)
{
	make_test_dir();
	char path[PATH_MAX], mid[PATH_MAX], top[PATH_MAX];
	path_in(top, sizeof(top), "a");
	path_in(mid, sizeof(mid), "a/b");
	path_in(path, sizeof(path), "a/b/c");
	mode_t old = umask(0);
	int rc = mkdir_p(path, 0750);
	umask(old);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(is_dir(top));
	CU_ASSERT(is_dir(mid));
	CU_ASSERT(is_dir(path));
	CU_ASSERT_EQUAL(file_mode(top), 0750);
	CU_ASSERT_EQUAL(file_mode(mid), 0750);
	CU_ASSERT_EQUAL(file_mode(path), 0750);
	remove_test_dir();
}

static void t_mkdir_p_existing(void)
{
	make_test_dir();
	char path[PATH_MAX], deeper[PATH_MAX];
	/* The test dir itself exists already (mode 0700 from mkdtemp). */
	CU_ASSERT_EQUAL(mkdir_p(test_dir, 0755), 0);
	CU_ASSERT_EQUAL(file_mode(test_dir), 0700); /* an existing dir keeps its mode */
	path_in(path, sizeof(path), "x/y");
	CU_ASSERT_EQUAL(mkdir_p(path, 0755), 0);
	CU_ASSERT_EQUAL(mkdir_p(path, 0755), 0); /* twice is fine */
	/* Extending an existing path. */
	path_in(deeper, sizeof(deeper), "x/y/z");
	CU_ASSERT_EQUAL(mkdir_p(deeper, 0755), 0);
	CU_ASSERT(is_dir(deeper));
	/* Trailing slash and doubled slashes. */
	path_in(path, sizeof(path), "t//u/");
	CU_ASSERT_EQUAL(mkdir_p(path, 0755), 0);
	path_in(path, sizeof(path), "t/u");
	CU_ASSERT(is_dir(path));
	/* "/" exists. */
	CU_ASSERT_EQUAL(mkdir_p("/", 0755), 0);
	remove_test_dir();
}

static void t_mkdir_p_through_file(void)
{
	make_test_dir();
	char file[PATH_MAX], path[PATH_MAX];
	path_in(file, sizeof(file), "plain");
	FILE *f = fopen(file, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fclose(f);
	/* A component is a regular file: fails with a negative errno. */
	path_in(path, sizeof(path), "plain/sub/dir");
	CU_ASSERT_EQUAL(mkdir_p(path, 0755), -ENOTDIR);
	/* Too long a path. */
	char longpath[PATH_MAX + 16];
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	CU_ASSERT_EQUAL(mkdir_p(longpath, 0755), -ENAMETOOLONG);
	remove_test_dir();
}

static void t_mkdir_p_existing_file(void)
{
	/* Like `mkdir -p FILE`, the final component being an existing regular
	 * file is an error, not success: the caller would go on to create files
	 * under it and fail later with a less helpful ENOTDIR. */
	make_test_dir();
	char file[PATH_MAX];
	path_in(file, sizeof(file), "plain");
	FILE *f = fopen(file, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fclose(f);
	int rc = mkdir_p(file, 0755);
	CU_ASSERT(rc == -EEXIST || rc == -ENOTDIR);
	remove_test_dir();
}

/* ---- errbuf_set ----------------------------------------------------------------- */

static void t_errbuf_set(void)
{
	char err[ERRBUF_LEN];
	errbuf_set(err, "module %s: %d errors", "hello", 3);
	CU_ASSERT_STRING_EQUAL(err, "module hello: 3 errors");
	/* Replaces, does not append. */
	errbuf_set(err, "%s", "second");
	CU_ASSERT_STRING_EQUAL(err, "second");
	/* NULL buffer: ignored, no crash. */
	errbuf_set(NULL, "nothing %d", 1);
	/* Long messages are truncated to ERRBUF_LEN - 1 characters. */
	char big[ERRBUF_LEN * 2];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	char guarded[ERRBUF_LEN + 8];
	memset(guarded, '#', sizeof(guarded));
	errbuf_set(guarded, "%s", big);
	CU_ASSERT_EQUAL(strlen(guarded), ERRBUF_LEN - 1);
	CU_ASSERT_EQUAL(guarded[ERRBUF_LEN - 1], '\0');
	CU_ASSERT_EQUAL(guarded[ERRBUF_LEN], '#'); /* nothing written past the buffer */
}

/* ---- others ------------------------------------------------------------------------ */

static void t_xstrdup_xcalloc(void)
{
	char *s = xstrdup("abc");
	CU_ASSERT_STRING_EQUAL(s, "abc");
	free(s);
	s = xstrdup(NULL);
	CU_ASSERT_STRING_EQUAL(s, "");
	free(s);
	unsigned char *p = xcalloc(4, 8);
	for (size_t i = 0; i < 32; i++)
		CU_ASSERT_EQUAL(p[i], 0);
	free(p);
	p = xcalloc(0, 0); /* never NULL */
	CU_ASSERT_PTR_NOT_NULL(p);
	free(p);
}

static void t_mono_ms(void)
{
	double a = mono_ms();
	usleep(20000);
	double b = mono_ms();
	CU_ASSERT(b - a >= 19.0);
	CU_ASSERT(b - a < 5000.0);
}

/* <fibril/compat.h>: the growth rule every sz struct goes through (libbpf's
 * OPTS_VALID): shorter is fine (the rest reads as zero), longer only with
 * zero unknown bytes (-E2BIG otherwise), below min or absurd is -EINVAL. */
struct grow_v1 {
	uint32_t sz;
	uint32_t a;
};
struct grow_v2 {
	uint32_t sz;
	uint32_t a;
	uint64_t b;
};
struct grow_v3 {
	uint32_t sz;
	uint32_t a;
	uint64_t b;
	uint64_t c;
};

static void t_struct_copy_in(void)
{
	char why[200];
	struct grow_v2 ours;
	size_t min = FIBRIL_OFFSETOFEND(struct grow_v2, a);
	/* an older caller's (shorter): b reads as zero */
	struct grow_v1 old = {.sz = sizeof(old), .a = 7};
	memset(&ours, 0xff, sizeof(ours));
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), &old, old.sz, min, "v", why, sizeof(why)), 0);
	CU_ASSERT_EQUAL(ours.a, 7);
	CU_ASSERT_EQUAL(ours.b, 0);
	/* the same size */
	struct grow_v2 same = {.sz = sizeof(same), .a = 1, .b = 2};
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), &same, same.sz, min, "v", why, sizeof(why)), 0);
	CU_ASSERT_EQUAL(ours.b, 2);
	/* a newer caller's (longer) that sets nothing new: fine */
	struct grow_v3 newer = {.sz = sizeof(newer), .a = 3, .b = 4};
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), &newer, newer.sz, min, "v", why, sizeof(why)), 0);
	CU_ASSERT_EQUAL(ours.a, 3);
	CU_ASSERT_EQUAL(ours.b, 4);
	/* ... that sets a field this side does not have: refused, named */
	newer.c = 5;
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), &newer, newer.sz, min, "struct grow", why,
					      sizeof(why)), -E2BIG);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "struct grow: size 24 has non-zero byte 16"));
	CU_ASSERT_EQUAL(ours.a, 0); /* nothing half-copied */
	/* below min, absurd, missing */
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), &old, 4, min, "v", why, sizeof(why)), -EINVAL);
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), &old, FIBRIL_STRUCT_SIZE_MAX + 1, min, "v", why,
					      sizeof(why)), -EINVAL);
	CU_ASSERT_EQUAL(fibril_struct_copy_in(&ours, sizeof(ours), NULL, 8, min, "v", why, sizeof(why)), -EINVAL);
}

FIBRIL_TEST_MAIN("util", NULL, NULL,
		 FIBRIL_TEST(t_edit_distance),
		 FIBRIL_TEST(t_edit_distance_long),
		 FIBRIL_TEST(t_nearest_name),
		 FIBRIL_TEST(t_nearest_name_threshold),
		 FIBRIL_TEST(t_nearest_name_best_wins),
		 FIBRIL_TEST(t_write_atomic_content_and_mode),
		 FIBRIL_TEST(t_write_atomic_other_mode),
		 FIBRIL_TEST(t_write_atomic_empty),
		 FIBRIL_TEST(t_write_atomic_replaces),
		 FIBRIL_TEST(t_write_atomic_missing_dir),
		 FIBRIL_TEST(t_write_atomic_rename_fails),
		 FIBRIL_TEST(t_write_atomic_relative_path),
		 FIBRIL_TEST(t_write_atomic_other_writers_tmp),
		 FIBRIL_TEST(t_write_atomic_concurrent_writers),
		 FIBRIL_TEST(t_mkdir_p_nested),
		 FIBRIL_TEST(t_mkdir_p_existing),
		 FIBRIL_TEST(t_mkdir_p_through_file),
		 FIBRIL_TEST(t_mkdir_p_existing_file),
		 FIBRIL_TEST(t_errbuf_set),
		 FIBRIL_TEST(t_xstrdup_xcalloc),
		 FIBRIL_TEST(t_mono_ms),
		 FIBRIL_TEST(t_struct_copy_in))
