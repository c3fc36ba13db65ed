/* host/loader.c - finds module files, checks them and dlopens them. Every
 * refusal is one line naming the file and what was expected versus found.
 *
 * No code of a module runs before it passed every check, and what is checked
 * is what is loaded:
 *   1. every directory from / down to the module directory is walked with
 *      O_NOFOLLOW (after resolving the configured path once): each must be
 *      owned by root and not group/world-writable - unless it has the
 *      sticky bit (as /tmp does), where nobody else can rename or remove
 *      the root-owned entry below it (the rule of sudo and systemd's
 *      path checks); the module directory itself may not be writable at all;
 *   2. the file is opened with O_NOFOLLOW (a symlink is refused), and the
 *      descriptor is checked: a regular file, owned by root, not group or
 *      world-writable;
 *   3. the ELF is read from that descriptor with libelf: the dynamic symbol
 *      fibril_module_entry, its bytes (size, ABI major/minor) and the
 *      strings its signature and name point to (resolved through the
 *      relocations in .rela.dyn, as the dynamic linker would) are checked,
 *      and the name against the modules already loaded;
 *   4. only then is that same descriptor dlopen'ed (/proc/self/fd/N, kept
 *      open while the module is loaded), running its constructors, and the
 *      descriptor in memory is checked against the one read from the file. */
#include "internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Off only for build-time introspection (--untrusted-module-dir with
 * --list-modules / --print-config): a package build reads its own,
 * unprivileged build tree. Never for a start: the agent refuses the flag
 * there. */
static bool g_check_ownership = true;

void loader_trust_module_dir(void)
{
	g_check_ownership = false;
}

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
	if (!g_check_ownership)
		return 0;
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

/* Refusal text for a directory on the way to the modules, or "" when fine. */
static int check_dir_stat(const char *dir, const char *parent, const struct stat *st, char *err)
{
	char what[PATH_MAX + 64];
	if (parent)
		snprintf(what, sizeof(what), "module directory %s: parent directory %s", dir, parent);
	else
		snprintf(what, sizeof(what), "module directory %s", dir);
	if (!S_ISDIR(st->st_mode)) {
		errbuf_set(err, "%s: not a directory", what);
		return -1;
	}
	if (!g_check_ownership)
		return 0;
	if (st->st_uid != 0) {
		errbuf_set(err, "%s: owned by uid %u, expected root (uid 0)", what, (unsigned)st->st_uid);
		return -1;
	}
	bool sticky_ok = parent && (st->st_mode & S_ISVTX);
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !sticky_ok) {
		errbuf_set(err, "%s: mode %04o is %s-writable, expected no group/world write%s", what,
			   (unsigned)(st->st_mode & 07777), (st->st_mode & S_IWOTH) ? "world" : "group",
			   parent ? " (or the sticky bit)" : "");
		return -1;
	}
	return 0;
}

/* Walk from / to dir (resolved once) with O_NOFOLLOW, checking each step;
 * returns an O_PATH descriptor of dir, or -1 with err set. */
static int open_module_dir(const char *dir, char *err)
{
	char real[PATH_MAX];
	if (!realpath(dir, real)) {
		errbuf_set(err, "module directory %s: %s", dir, strerror(errno));
		return -1;
	}
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		errbuf_set(err, "module directory %s: /: %s", dir, strerror(errno));
		goto fail;
	}
	char walked[PATH_MAX] = "/";
	char *save = NULL;
	char *next = strtok_r(real, "/", &save);
	if (!next) /* the modules are in / itself */
		return check_dir_stat(dir, NULL, &st, err) ? (close(fd), -1) : fd;
	if (check_dir_stat(dir, "/", &st, err))
		goto fail;
	while (next) {
		char *comp = next;
		next = strtok_r(NULL, "/", &save);
		int nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		size_t len = strlen(walked);
		snprintf(walked + len, sizeof(walked) - len, "%s%s", len > 1 ? "/" : "", comp);
		if (nfd < 0) {
			errbuf_set(err, "module directory %s: %s: %s", dir, walked,
				   errno == ELOOP || errno == ENOTDIR ? "changed while being checked" : strerror(errno));
			goto fail;
		}
		close(fd);
		fd = nfd;
		if (fstat(fd, &st)) {
			errbuf_set(err, "module directory %s: %s: %s", dir, walked, strerror(errno));
			goto fail;
		}
		if (check_dir_stat(dir, next ? walked : NULL, &st, err))
			goto fail;
	}
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Open the module file itself through dirfd: no symlink, a root-owned
 * regular file nobody else can write. */
static int open_module_file(int dirfd, const char *path, char *err)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	int fd = openat(dirfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ELOOP)
			errbuf_set(err, "module file %s: is a symbolic link, expected the file itself", path);
		else
			errbuf_set(err, "module file %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st)) {
		errbuf_set(err, "module file %s: %s", path, strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		errbuf_set(err, "module file %s: not a regular file", path);
	} else if (!g_check_ownership) {
		return fd;
	} else if (st.st_uid != 0) {
		errbuf_set(err, "module file %s: owned by uid %u, expected root (uid 0)", path,
			   (unsigned)st.st_uid);
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		errbuf_set(err, "module file %s: mode %04o is %s-writable, expected no group/world write",
			   path, (unsigned)(st.st_mode & 07777), (st.st_mode & S_IWOTH) ? "world" : "group");
	} else {
		return fd;
	}
	close(fd);
	return -1;
}

/* ---- reading the descriptor from the ELF file ------------------------------ */

struct elf_file {
	int fd;
	Elf *elf;
	size_t nsec;
};

/* Copy len bytes at virtual address vaddr from the section holding them
 * (zeros for .bss); -1 when no section holds them all. */
static int elf_read_vaddr(const struct elf_file *ef, GElf_Addr vaddr, void *out, size_t len)
{
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(ef->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC))
			continue;
		if (vaddr < sh.sh_addr || vaddr - sh.sh_addr > sh.sh_size ||
		    len > sh.sh_size - (vaddr - sh.sh_addr))
			continue;
		if (sh.sh_type == SHT_NOBITS) {
			memset(out, 0, len);
			return 0;
		}
		off_t off = (off_t)(sh.sh_offset + (vaddr - sh.sh_addr));
		return pread(ef->fd, out, len, off) == (ssize_t)len ? 0 : -1;
	}
	return -1;
}

/* A NUL-terminated string at vaddr, at most max - 1 bytes; -1 if none. */
static int elf_read_string(const struct elf_file *ef, GElf_Addr vaddr, char *out, size_t max)
{
	for (size_t i = 0; i < max; i++) {
		if (elf_read_vaddr(ef, vaddr + i, &out[i], 1))
			return -1;
		if (!out[i])
			return 0;
	}
	out[max - 1] = '\0';
	return -1;
}

static bool is_relative_reloc(GElf_Half machine, unsigned type)
{
	switch (machine) {
	case EM_X86_64: return type == R_X86_64_RELATIVE;
	case EM_386: return type == R_386_RELATIVE;
	case EM_AARCH64: return type == R_AARCH64_RELATIVE;
	case EM_ARM: return type == R_ARM_RELATIVE;
	case EM_PPC64: return type == R_PPC64_RELATIVE;
	case EM_S390: return type == R_390_RELATIVE;
#ifdef R_RISCV_RELATIVE
	case EM_RISCV: return type == R_RISCV_RELATIVE;
#endif
	default: return false;
	}
}

/* The pointer stored at vaddr once the dynamic linker has relocated it: a
 * RELATIVE relocation's addend (RELA), a defined symbol plus addend, or the
 * bytes in the file (REL, RELR, or no relocation at all). */
static int elf_read_pointer(const struct elf_file *ef, GElf_Half machine, GElf_Addr vaddr,
			    GElf_Addr *out)
{
	uint64_t inplace = 0;
	if (elf_read_vaddr(ef, vaddr, &inplace, sizeof(void *)))
		return -1;
	*out = inplace;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(ef->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_RELA && sh.sh_type != SHT_REL))
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		if (!data || !sh.sh_entsize)
			continue;
		size_t n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Rela r = {0};
			if (sh.sh_type == SHT_RELA) {
				if (!gelf_getrela(data, (int)i, &r))
					break;
			} else {
				GElf_Rel rel;
				if (!gelf_getrel(data, (int)i, &rel))
					break;
				r.r_offset = rel.r_offset;
				r.r_info = rel.r_info;
				r.r_addend = (GElf_Sxword)inplace;
			}
			if (r.r_offset != vaddr)
				continue;
			unsigned type = (unsigned)GELF_R_TYPE(r.r_info);
			if (is_relative_reloc(machine, type)) {
				*out = (GElf_Addr)r.r_addend;
				return 0;
			}
			/* a symbolic relocation: only a symbol this file defines */
			Elf_Scn *symscn = elf_getscn(ef->elf, sh.sh_link);
			Elf_Data *syms = symscn ? elf_getdata(symscn, NULL) : NULL;
			GElf_Sym sym;
			if (!syms || !gelf_getsym(syms, (int)GELF_R_SYM(r.r_info), &sym) ||
			    sym.st_shndx == SHN_UNDEF)
				return -1;
			*out = sym.st_value + (GElf_Addr)r.r_addend;
			return 0;
		}
	}
	return 0;
}

static GElf_Half host_machine(void)
{
#if defined(__x86_64__)
	return EM_X86_64;
#elif defined(__i386__)
	return EM_386;
#elif defined(__aarch64__)
	return EM_AARCH64;
#elif defined(__arm__)
	return EM_ARM;
#elif defined(__powerpc64__)
	return EM_PPC64;
#elif defined(__s390x__)
	return EM_S390;
#elif defined(__riscv)
	return EM_RISCV;
#else
	return EM_NONE;
#endif
}

/* What the loader checks, read from the file before any of its code runs. */
struct file_desc {
	uint32_t sz;
	uint16_t abi_major, abi_minor;
	bool has_signature, has_name;
	char signature[128];
	char name[64];
};

static int read_file_desc(int fd, const char *path, struct file_desc *fdesc, char *err)
{
	memset(fdesc, 0, sizeof(*fdesc));
	elf_version(EV_CURRENT);
	struct elf_file ef = {.fd = fd, .elf = elf_begin(fd, ELF_C_READ, NULL)};
	int rc = -1;
	GElf_Ehdr eh;
	if (!ef.elf || elf_kind(ef.elf) != ELF_K_ELF || !gelf_getehdr(ef.elf, &eh)) {
		errbuf_set(err, "module %s: cannot load: not an ELF file", path);
		goto out;
	}
	if (eh.e_type != ET_DYN) {
		errbuf_set(err, "module %s: cannot load: not an ELF shared object", path);
		goto out;
	}
	if (gelf_getclass(ef.elf) != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	    (host_machine() != EM_NONE && eh.e_machine != host_machine())) {
		errbuf_set(err, "module %s: cannot load: built for another architecture (ELF machine %u, class %d)",
			   path, (unsigned)eh.e_machine, gelf_getclass(ef.elf));
		goto out;
	}
	/* the dynamic symbol, as dlsym would find it */
	Elf_Scn *scn = NULL;
	GElf_Sym entry;
	bool found = false;
	while (!found && (scn = elf_nextscn(ef.elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		size_t n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; data && i < n; i++) {
			GElf_Sym sym;
			if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF)
				continue;
			const char *name = elf_strptr(ef.elf, sh.sh_link, sym.st_name);
			if (name && strcmp(name, FIBRIL_MODULE_ENTRY_SYMBOL) == 0 &&
			    GELF_ST_BIND(sym.st_info) != STB_LOCAL) {
				entry = sym;
				found = true;
				break;
			}
		}
	}
	if (!found) {
		errbuf_set(err, "module %s: missing entry symbol '%s' (not a fibril module?)", path,
			   FIBRIL_MODULE_ENTRY_SYMBOL);
		goto out;
	}
	struct {
		uint32_t sz;
		uint16_t abi_major, abi_minor;
	} head;
	if (entry.st_size < sizeof(head) || elf_read_vaddr(&ef, entry.st_value, &head, sizeof(head))) {
		errbuf_set(err, "module %s: entry symbol '%s' is not a descriptor (%llu bytes)", path,
			   FIBRIL_MODULE_ENTRY_SYMBOL, (unsigned long long)entry.st_size);
		goto out;
	}
	fdesc->sz = head.sz;
	fdesc->abi_major = head.abi_major;
	fdesc->abi_minor = head.abi_minor;
	/* signature and name are pointers: what the dynamic linker will make
	 * of them, then the strings they point to */
	static const struct {
		size_t off;
		size_t max;
	} ptrs[2] = {{offsetof(struct fibril_module_desc, signature), sizeof(fdesc->signature)},
		     {offsetof(struct fibril_module_desc, name), sizeof(fdesc->name)}};
	char *dst[2] = {fdesc->signature, fdesc->name};
	bool *has[2] = {&fdesc->has_signature, &fdesc->has_name};
	for (int i = 0; i < 2; i++) {
		GElf_Addr p = 0;
		if (entry.st_size < ptrs[i].off + sizeof(void *) || head.sz < ptrs[i].off + sizeof(void *))
			continue;
		if (elf_read_pointer(&ef, eh.e_machine, entry.st_value + ptrs[i].off, &p) || !p)
			continue;
		*has[i] = elf_read_string(&ef, p, dst[i], ptrs[i].max) == 0;
	}
	rc = 0;
out:
	if (ef.elf)
		elf_end(ef.elf);
	return rc;
}

/* Descriptors kept open while their module is loaded: /proc/self/fd/N is
 * the name the dynamic linker knows the module by, so N must not be reused. */
struct module_fd {
	struct fibril_module *m;
	int fd;
};
static struct module_fd *g_module_fds;
static size_t g_nmodule_fds;

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
			    const struct file_desc *d, char *err)
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
	if (!d->has_signature || strcmp(d->signature, FIBRIL_BUILD_SIGNATURE) != 0) {
		errbuf_set(err, "module %s: build signature '%s' does not match the host's '%s'", path,
			   d->has_signature ? d->signature : "(none)", FIBRIL_BUILD_SIGNATURE);
		return -1;
	}
	if (!d->has_name || !valid_module_name(d->name)) {
		errbuf_set(err, "module %s: invalid module name '%s' (expected 1-32 of [a-z0-9-])", path,
			   d->has_name ? d->name : "(null)");
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
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	int dirfd = open_module_dir(dir, err);
	if (dirfd < 0)
		return -1;
	int fd = open_module_file(dirfd, path, err);
	close(dirfd);
	if (fd < 0)
		return -1;
	struct file_desc fdesc;
	if (read_file_desc(fd, path, &fdesc, err) || check_descriptor(set, path, &fdesc, err)) {
		close(fd);
		return -1;
	}
	/* Checked: now (and only now) its code may run. */
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	void *dl = dlopen(self, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		errbuf_set(err, "module %s: cannot load: %s", path, dlerror());
		close(fd);
		return -1;
	}
	dlerror();
	const struct fibril_module_desc *d = dlsym(dl, FIBRIL_MODULE_ENTRY_SYMBOL);
	if (!d || d->sz != fdesc.sz || d->abi_major != fdesc.abi_major ||
	    d->abi_minor != fdesc.abi_minor || !d->signature ||
	    strcmp(d->signature, fdesc.signature) != 0 || !d->name || strcmp(d->name, fdesc.name) != 0) {
		errbuf_set(err, "module %s: its descriptor in memory differs from the one in the file "
			   "(changed while loading?)", path);
		dlclose(dl);
		close(fd);
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
	struct module_fd *fds = realloc(g_module_fds, (g_nmodule_fds + 1) * sizeof(*fds));
	if (!fds)
		abort();
	g_module_fds = fds;
	g_module_fds[g_nmodule_fds++] = (struct module_fd){.m = m, .fd = fd};
	host_debug("loaded module %s %s (ABI %u.%u) from %s", m->name,
		   m->desc.version ? m->desc.version : "", d->abi_major, d->abi_minor, path);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The module file in dir whose name is closest to name (at most a third of
 * its letters, and at least one, away), as "; did you mean 'NAME'?", or "". */
static void did_you_mean(const char *dir, const char *name, char *out, size_t len)
{
	DIR *d = opendir(dir);
	size_t best = strlen(name) / 3 + 1;
	char found[NAME_MAX + 1] = "";
	struct dirent *de;

	out[0] = '\0';
	while (d && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n < 4 || strcmp(de->d_name + n - 3, ".so") != 0 || de->d_name[0] == '.')
			continue;
		char stem[NAME_MAX + 1];
		snprintf(stem, sizeof(stem), "%.*s", (int)(n - 3), de->d_name);
		size_t dist = edit_distance(name, stem);
		if (dist <= best && (dist < best || !*found || strcmp(stem, found) < 0)) {
			best = dist;
			snprintf(found, sizeof(found), "%s", stem);
		}
	}
	if (d)
		closedir(d);
	if (*found)
		snprintf(out, len, "; did you mean '%s'?", found);
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
			char hint[NAME_MAX + 32];
			did_you_mean(dir, tok, hint, sizeof(hint));
			errbuf_set(err, "module '%s' listed in [agent] modules: %s not found%s", tok, path,
				   hint);
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
	if (n > 1) /* an empty directory leaves names NULL: qsort's base must not be */
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
		for (size_t j = 0; j < g_nmodule_fds; j++) {
			if (g_module_fds[j].m != m)
				continue;
			close(g_module_fds[j].fd);
			g_module_fds[j] = g_module_fds[--g_nmodule_fds];
			break;
		}
		free(m->name);
		free(m->path);
		free(m);
	}
	free(set->mods);
	free(set->order);
	memset(set, 0, sizeof(*set));
	if (!g_nmodule_fds) {
		free(g_module_fds);
		g_module_fds = NULL;
	}
}
