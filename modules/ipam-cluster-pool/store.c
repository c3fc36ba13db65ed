/* modules/ipam-cluster-pool/store.c - what survives the agent, under
 * <state-dir>/ipam-cluster-pool/:
 *   4/<address>, 6/<address>  one file per allocation, holding the owner
 *   node-cidr                 "<family> <cidr>" lines: the last node CIDRs
 * Every write is atomic and durable before the caller goes on (temp file,
 * fsync, rename, fsync the directory); a release unlinks and fsyncs the
 * directory. A leftover ".<name>.tmp" is a write that never completed (its
 * address was never returned), so restore removes it. */
#include "cluster_pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NODE_FILE "node-cidr"

static int write_all(int fd, const void *data, size_t len)
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

static int write_tmp(int dirfd, const char *tmp, const void *data, size_t len)
{
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	int rc = write_all(fd, data, len);
	if (rc == 0 && fsync(fd))
		rc = -errno;
	if (close(fd) && rc == 0)
		rc = -errno;
	return rc;
}

int cp_write_atomic(int dirfd, const char *name, const void *data, size_t len)
{
	char tmp[300];
	if (snprintf(tmp, sizeof(tmp), ".%s.tmp", name) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int rc = write_tmp(dirfd, tmp, data, len);
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name))
		rc = -errno;
	if (rc) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	return fsync(dirfd) ? -errno : 0;
}

static int open_dir_at(int at, const char *name)
{
	if (mkdirat(at, name, 0755) && errno != EEXIST)
		return -errno;
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int cp_store_open(struct cp *cp, char *why, size_t len)
{
	snprintf(cp->base, sizeof(cp->base), "%s/%s", fibril_state_dir(), CP_MODULE);
	cp->basefd = open_dir_at(AT_FDCWD, cp->base);
	if (cp->basefd < 0) {
		snprintf(why, len, "cannot open %s: %s", cp->base, strerror(-cp->basefd));
		return cp->basefd;
	}
	for (int i = 0; i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		if (!f->enabled)
			continue;
		f->dirfd = open_dir_at(cp->basefd, f->family == 6 ? "6" : "4");
		if (f->dirfd < 0) {
			snprintf(why, len, "cannot open %s/%d: %s", cp->base, f->family,
				 strerror(-f->dirfd));
			return f->dirfd;
		}
	}
	return 0;
}

void cp_store_close(struct cp *cp)
{
	for (int i = 0; i < CP_NFAM; i++) {
		if (cp->fam[i].dirfd >= 0)
			close(cp->fam[i].dirfd);
		cp->fam[i].dirfd = -1;
	}
	if (cp->basefd >= 0)
		close(cp->basefd);
	cp->basefd = -1;
}

int cp_store_put(struct cp_fam *f, const char *addr, const char *owner)
{
	return cp_write_atomic(f->dirfd, addr, owner, strlen(owner));
}

int cp_store_del(struct cp_fam *f, const char *addr)
{
	if (unlinkat(f->dirfd, addr, 0) && errno != ENOENT)
		return -errno;
	return fsync(f->dirfd) ? -errno : 0;
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

/* One directory entry: an allocation, a leftover temp file, or junk. */
static int load_entry(struct cp *cp, struct cp_fam *f, const char *name)
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
		fibril_warn(cp->m, "ignoring %s/%d/%s: not an IPv%d address in canonical form",
			    cp->base, f->family, name, f->family);
		return 0;
	}
	char owner[FIBRIL_IPAM_OWNER_LEN];
	int rc = read_owner(f->dirfd, name, owner, sizeof(owner));
	if (rc) {
		fibril_warn(cp->m, "%s/%d/%s: %s; kept as allocated, owner unknown", cp->base,
			    f->family, name, strerror(-rc));
		owner[0] = '\0';
	}
	struct cp_alloc *a = cp_alloc_new(&ip, owner);
	if (!a)
		return -ENOMEM;
	cp_table_insert(&cp->table, a);
	return 1;
}

/* Every allocation file of the family into the table (not placed yet);
 * returns how many. */
int cp_store_load(struct cp *cp, struct cp_fam *f)
{
	int fd = dup(f->dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	rewinddir(d);
	int n = 0, rc = 0;
	struct dirent *de;
	while (rc >= 0 && (de = readdir(d)) != NULL) {
		rc = load_entry(cp, f, de->d_name);
		n += rc > 0;
	}
	closedir(d);
	return rc < 0 ? rc : n;
}

int cp_store_save_node(struct cp *cp)
{
	char buf[2 * (FIBRIL_IPAM_CIDR_LEN + 4)] = "";
	size_t off = 0;
	for (int i = 0; i < CP_NFAM; i++) {
		const struct cp_fam *f = &cp->fam[i];
		if (!f->have_node)
			continue;
		char c[FIBRIL_IPAM_CIDR_LEN];
		off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%d %s\n", f->family,
					fibril_cidr_format(&f->node, c, sizeof(c)));
	}
	return cp_write_atomic(cp->basefd, NODE_FILE, buf, off);
}

void cp_store_load_node(struct cp *cp)
{
	int fd = openat(cp->basefd, NODE_FILE, O_RDONLY | O_CLOEXEC);
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
		struct cp_fam *f = cp_fam_of(cp, family);
		if (f) {
			f->saved = c;
			f->have_saved = true;
		}
	}
	fclose(fp);
}
