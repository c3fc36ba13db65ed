/* modules/endpoint/store.c - the endpoint state files under
 * <state-dir>/endpoint/: "<id>.json" per endpoint (the endpoint object
 * with its identity and labels), and "identities" (where the next run's
 * identity search starts). Every write is durable before the caller goes
 * on (fibril_state_write_atomic / fibril_state_remove, <fibril/module.h>). */
#include "endpoint_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ep_store_open(struct ep_manager *mg, char *why, size_t len)
{
	const char *base = fibril_state_dir();
	char path[PATH_MAX];

	if (!base || !*base) {
		snprintf(why, len, "no [agent] state-dir");
		return -EINVAL;
	}
	if (snprintf(path, sizeof(path), "%s/%s", base, EP_MODULE) >= (int)sizeof(path)) {
		snprintf(why, len, "state dir path too long");
		return -ENAMETOOLONG;
	}
	if (mkdir(base, 0755) && errno != EEXIST) {
		int err = errno;

		snprintf(why, len, "cannot create %s: %s", base, strerror(err));
		return -err;
	}
	if (mkdir(path, 0700) && errno != EEXIST) {
		int err = errno;

		snprintf(why, len, "cannot create %s: %s", path, strerror(err));
		return -err;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		int err = errno;

		snprintf(why, len, "cannot open %s: %s", path, strerror(err));
		return -err;
	}
	snprintf(mg->dir, sizeof(mg->dir), "%s", path);
	mg->dirfd = fd;
	return 0;
}

void ep_store_close(struct ep_manager *mg)
{
	if (mg->dirfd >= 0)
		close(mg->dirfd);
	mg->dirfd = -1;
}

int ep_store_write(struct ep_manager *mg, const struct ep_endpoint *ep)
{
	struct ep_buf b = { 0 };
	char name[32];

	snprintf(name, sizeof(name), "%u.json", ep->id);
	ep_buf_endpoint(&b, ep, true);
	ep_buf_add(&b, "\n", 1);
	int rc = b.oom ? -ENOMEM : fibril_state_write_atomic(mg->dirfd, name, b.p, b.len, 0600);

	free(b.p);
	if (rc)
		fibril_error(mg->m, "cannot write %s/%s: %s", mg->dir, name, strerror(-rc));
	return rc;
}

int ep_store_remove(struct ep_manager *mg, uint16_t id)
{
	char name[32];

	snprintf(name, sizeof(name), "%u.json", id);
int rc = fibril_state_remove(mg->dirfd, name);

	if (rc)
		fibril_error(mg->m, "cannot remove %s/%s: %s", mg->dir, name, strerror(-rc));
	return rc;
}
