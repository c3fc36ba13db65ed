/* host/loader.c - finds module files, checks them (ownership, mode, entry
 * symbol, ABI, signature, duplicate names) and dlopens them. Every refusal
 * is one line naming the file and what was expected versus found. */
#include "internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The smallest descriptor any ABI 1.x module can have: up to `fini`. */
#define DESC_MIN_SIZE (offsetof(struct fibril_module_desc, fini) + sizeof(fibril_fini_fn))

static int check_owner_mode(const char *what, const char *path, bool want_dir, char *err)
{
	struct stat st;
	if (stat(path, &st)) {
		errbuf_set(err, "%s %s: %s", what, path, strerror(errno));
		return -1;
	}
	if (want_dir && !S_ISDIR(st.st_mode)) {
		errbuf_set(err, "%s %s: not a directory", what, path);
		return -1;
	}
	if (!want_dir && !S_ISREG(st.st_mode)) {
		errbuf_set(err, "%s %s: not a regular file", what, path);
		return -1;
	}
	if (st.st_uid != 0) {
		errbuf_set(err, "%s %s: owned by uid %u, expected root (uid 0)", what, path,
			   (unsigned)st.st_uid);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		errbuf_set(err, "%s %s: mode %04o is %s-writable, expected no group/world write", what,
			   path, (unsigned)(st.st_mode & 07777),
			   (st.st_mode & S_IWOTH) ? "world" : "group");
		return -1;
	}
	return 0;
}

static bool valid_module_name(const char *name)
{
	size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-");
	return n > 0 && n <= 32 && name[n] == '\0' && name[0] != '-';
}

struct fibril_module *module_set_find(const struct module_set *set, const char *name)
{
	for (size_t i = 0; i < set->n; i++)
		if (strcmp(set->mods[i]->name, name) == 0)
			return set->mods[i];
	return NULL;
}

static int check_descriptor(const struct module_set *set, const char *path,
			    const struct fibril_module_desc *d, char *err)
{
	if (d->sz < DESC_MIN_SIZE) {
		errbuf_set(err, "module %s: descriptor is %u bytes, smaller than any ABI %d descriptor (%zu)",
			   path, d->sz, FIBRIL_ABI_MAJOR, (size_t)DESC_MIN_SIZE);
		return -1;
	}
	if (d->abi_major != FIBRIL_ABI_MAJOR) {
		errbuf_set(err, "module %s: ABI major mismatch: built for ABI %u.%u, host provides %d.%d",
			   path, d->abi_major, d->abi_minor, FIBRIL_ABI_MAJOR, FIBRIL_ABI_MINOR);
		return -1;
	}
	if (d->abi_minor > FIBRIL_ABI_MINOR) {
		errbuf_set(err, "module %s: built for ABI %u.%u, newer than the host's %d.%d (upgrade fibril-agent)",
			   path, d->abi_major, d->abi_minor, FIBRIL_ABI_MAJOR, FIBRIL_ABI_MINOR);
		return -1;
	}
	if (!d->signature || strcmp(d->signature, FIBRIL_BUILD_SIGNATURE) != 0) {
		errbuf_set(err, "module %s: build signature '%s' does not match the host's '%s'", path,
			   d->signature ? d->signature : "(none)", FIBRIL_BUILD_SIGNATURE);
		return -1;
	}
	if (!d->name || !valid_module_name(d->name)) {
		errbuf_set(err, "module %s: invalid module name '%s' (expected 1-32 of [a-z0-9-])", path,
			   d->name ? d->name : "(null)");
		return -1;
	}
	const struct fibril_module *dup = module_set_find(set, d->name);
	if (dup) {
		errbuf_set(err, "module %s: duplicate module name '%s' (already loaded from %s)", path,
			   d->name, dup->path);
		return -1;
	}
	return 0;
}

int loader_load_file(struct module_set *set, const char *path, char *err)
{
	if (check_owner_mode("module file", path, false, err))
		return -1;
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		errbuf_set(err, "module %s: cannot load: %s", path, dlerror());
		return -1;
	}
	dlerror();
	const struct fibril_module_desc *d = dlsym(dl, FIBRIL_MODULE_ENTRY_SYMBOL);
	if (!d) {
		errbuf_set(err, "module %s: missing entry symbol '%s' (not a fibril module?)", path,
			   FIBRIL_MODULE_ENTRY_SYMBOL);
		dlclose(dl);
		return -1;
	}
	if (check_descriptor(set, path, d, err)) {
		dlclose(dl);
		return -1;
	}
	struct fibril_module *m = xcalloc(1, sizeof(*m));
	m->dl = dl;
	m->path = xstrdup(path);
	m->desc_sz = d->sz;
	/* An older minor's descriptor is shorter: the rest stays zero (absent). */
	memcpy(&m->desc, d, d->sz < sizeof(m->desc) ? d->sz : sizeof(m->desc));
	m->desc.sz = sizeof(m->desc);
	m->name = xstrdup(d->name);
	m->order = -1;
	struct fibril_module **grown = realloc(set->mods, (set->n + 1) * sizeof(*grown));
	if (!grown)
		abort();
	set->mods = grown;
	set->mods[set->n++] = m;
	host_debug("loaded module %s %s (ABI %u.%u) from %s", m->name,
		   m->desc.version ? m->desc.version : "", d->abi_major, d->abi_minor, path);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int load_listed(struct module_set *set, const char *dir, const char *only, char *err)
{
	char *list = xstrdup(only);
	int rc = 0;
	char *save = NULL;
	for (char *tok = strtok_r(list, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s.so", dir, tok);
		if (access(path, F_OK)) {
			errbuf_set(err, "module '%s' listed in [agent] modules: %s not found", tok, path);
			rc = -1;
			break;
		}
		if ((rc = loader_load_file(set, path, err)))
			break;
	}
	free(list);
	return rc;
}

int loader_load_dir(struct module_set *set, const char *dir, const char *only, char *err)
{
	if (check_owner_mode("module directory", dir, true, err))
		return -1;
	if (only && *only)
		return load_listed(set, dir, only, err);
	DIR *d = opendir(dir);
	if (!d) {
		errbuf_set(err, "module directory %s: %s", dir, strerror(errno));
		return -1;
	}
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 4 || strcmp(de->d_name + len - 3, ".so") != 0 || de->d_name[0] == '.')
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		if (!names)
			abort();
		names[n++] = xstrdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(*names), by_name);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (!rc)
			rc = loader_load_file(set, path, err);
		free(names[i]);
	}
	free(names);
	return rc;
}

void loader_unload_all(struct module_set *set)
{
	for (size_t i = set->n; i-- > 0;) {
		struct fibril_module *m = set->mods[i];
		health_free(m);
		free(m->deps);
		if (m->dl && !getenv("FIBRIL_NO_DLCLOSE")) /* keep symbols for leak reports */
			dlclose(m->dl);
		free(m->name);
		free(m->path);
		free(m);
	}
	free(set->mods);
	free(set->order);
	memset(set, 0, sizeof(*set));
}
