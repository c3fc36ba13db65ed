/* lib/util.c - small helpers the library and the host share: error
 * buffers, monotonic time, atomic file writes (and the
 * SDK's fibril_state_write_atomic / fibril_state_remove), mkdir -p. */
#include "lib_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void errbuf_set(char *err, const char *fmt, ...)
{
	if (!err)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, ERRBUF_LEN, fmt, ap);
	va_end(ap);
}

double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");
	if (!p)
		abort();
	return p;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (!p)
		abort();
	return p;
}

int write_file_atomic(const char *path, const void *data, size_t len, unsigned mode)
{
	char dir[PATH_MAX], base[PATH_MAX];
	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	snprintf(base, sizeof(base), "%s", path);
	int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int rc = fibril_state_write_atomic(dfd, basename(base), data, len, mode);
	close(dfd);
	return rc;
}

int mkdir_p(const char *path, unsigned mode)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) && errno != EEXIST)
		return -errno;
	struct stat st;
	if (stat(buf, &st))
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A temp file beside `name`, unique to this writer: ".<name>.<6 random
 * characters>.tmp", created with O_EXCL so that two writers of one path
 * (two threads, two processes) never share it (issue 14). Leftover ".*.tmp"
 * files are what the state owners remove on open. */
static int open_unique_tmp(int dirfd, const char *name, unsigned mode, char *tmp, size_t len)
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	static _Atomic uint64_t counter;
	for (int attempt = 0; attempt < 100; attempt++) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t x = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^
			     ((uint64_t)ts.tv_sec << 20) ^ (++counter * 0x9e3779b97f4a7c15ull) ^
			     (uint64_t)(uintptr_t)&ts;
		char suffix[7];
		for (int i = 0; i < 6; i++) {
			x ^= x >> 29;
			x *= 0xbf58476d1ce4e5b9ull;
			suffix[i] = alphabet[(x >> 33) % (sizeof(alphabet) - 1)];
		}
		suffix[6] = '\0';
		if (snprintf(tmp, len, ".%s.%s.tmp", name, suffix) >= (int)len)
			return -ENAMETOOLONG;
		int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
				(mode_t)mode);
		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : -errno;
	}
	return -EEXIST;
}

/* The SDK's durable state writes (<fibril/module.h>). */
int fibril_state_write_atomic(int dirfd, const char *name, const void *data, size_t len,
			      unsigned int mode)
{
	char tmp[NAME_MAX + 1];
	int fd = open_unique_tmp(dirfd, name, mode, tmp, sizeof(tmp));
	if (fd < 0)
		return fd;
	/* O_EXCL created it with mode & ~umask, as O_TRUNC on a new file did */
	int rc = write_all(fd, data, len);
	if (rc == 0 && fsync(fd))
		rc = -errno;
	if (close(fd) && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name))
		rc = -errno;
	if (rc) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	return fsync(dirfd) ? -errno : 0;
}

int fibril_state_remove(int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) && errno != ENOENT)
		return -errno;
	return fsync(dirfd) ? -errno : 0;
}
