/* host/config_sources.c - where the config's values come from: the main
 * INI file, then its drop-in directory (FILE.d/NAME.conf in name order; a
 * later file overrides an earlier one), then --set. Every entry is kept
 * with its FILE:LINE (or "--set") so errors and --print-config can name it;
 * host/config.c declares, validates and serves the values. */
#include "config_sources.h"
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

/* inih truncates longer section names; refuse them instead. */
#define MAX_SECTION_NAME 49

static struct entry_list file_entries; /* main file, then drop-ins */
static struct entry_list overrides;    /* one entry per section.key */

struct entry_list *config_file_entries(void)
{
	return &file_entries;
}

struct entry_list *config_override_entries(void)
{
	return &overrides;
}

/* ---- entries ------------------------------------------------------------ */

static char *format_origin(const char *file, int line)
{
	int len = snprintf(NULL, 0, "%s:%d", file, line);
	char *origin = xcalloc(1, (size_t)len + 1);
	snprintf(origin, (size_t)len + 1, "%s:%d", file, line);
	return origin;
}

static struct config_entry *entry_new(const char *section, const char *key, const char *value,
				      const char *file, int line)
{
	struct config_entry *e = xcalloc(1, sizeof(*e));
	e->section = xstrdup(section);
	e->key = key ? xstrdup(key) : NULL;
	e->value = value ? xstrdup(value) : NULL;
	e->file = file ? xstrdup(file) : NULL;
	e->line = line;
	e->origin = file ? format_origin(file, line) : xstrdup("--set");
	return e;
}

static void entry_free(struct config_entry *e)
{
	free(e->section);
	free(e->key);
	free(e->value);
	free(e->file);
	free(e->origin);
	free(e);
}

static void list_append(struct entry_list *list, struct config_entry *e)
{
	if (list->tail)
		list->tail->next = e;
	else
		list->head = e;
	list->tail = e;
}

static void list_splice(struct entry_list *dst, struct entry_list *src)
{
	if (!src->head)
		return;
	if (dst->tail)
		dst->tail->next = src->head;
	else
		dst->head = src->head;
	dst->tail = src->tail;
	src->head = src->tail = NULL;
}

static void list_free(struct entry_list *list)
{
	struct config_entry *e = list->head;
	while (e) {
		struct config_entry *next = e->next;
		entry_free(e);
		e = next;
	}
	list->head = list->tail = NULL;
}

struct config_entry *config_entry_find(const struct entry_list *list, const char *section,
				       const char *key)
{
	struct config_entry *found = NULL;
	for (struct config_entry *e = list->head; e; e = e->next) {
		if (e->key && strcmp(e->section, section) == 0 && strcmp(e->key, key) == 0)
			found = e;
	}
	return found;
}

bool config_entries_have_section(const struct entry_list *list, const char *section)
{
	for (const struct config_entry *e = list->head; e; e = e->next) {
		if (strcmp(e->section, section) == 0)
			return true;
	}
	return false;
}

void config_entry_where(const struct config_entry *e, char *buf, size_t len)
{
	if (e->file)
		snprintf(buf, len, "%s", e->origin);
	else
		snprintf(buf, len, "--set %s.%s", e->section, e->key ? e->key : "");
}

void config_sources_reset(void)
{
	list_free(&file_entries);
	list_free(&overrides);
}

/* ---- loading the file ---------------------------------------------------- */

struct load_ctx {
	const char *path;
	FILE *fp;
	int line;                    /* of the line inih is working on */
	char *buf;                   /* getline's */
	size_t cap;
	int read_errno;              /* when reading failed */
	struct entry_list entries;   /* this file's, kept only on success */
	int error_line;              /* first line our own checks refused */
	char *err;
};

static int load_fail(struct load_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int load_fail(struct load_ctx *ctx, const char *fmt, ...)
{
	if (ctx->error_line)
		return 0;
	char what[ERRBUF_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	ctx->error_line = ctx->line;
	errbuf_set(ctx->err, "%s:%d: %s", ctx->path, ctx->line, what);
	return 0; /* what an inih handler returns on error */
}

/* Lines are handed to inih without their indentation: inih would take an
 * indented line for the continuation of the previous value. */
static char *line_text(struct load_ctx *ctx, ssize_t len)
{
	char *text = ctx->buf;
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
		text[--len] = '\0';
	if (ctx->line == 1 && strncmp(text, "\xEF\xBB\xBF", 3) == 0)
		text += 3;
	while (isspace((unsigned char)*text))
		text++;
	return text;
}

static void note_section_heading(struct load_ctx *ctx, const char *text)
{
	const char *close = strchr(text, ']');
	if (!close)
		return; /* inih reports it */
	size_t len = (size_t)(close - text - 1);
	if (len > MAX_SECTION_NAME) {
		load_fail(ctx, "section name is longer than %d characters", MAX_SECTION_NAME);
		return;
	}
	char name[MAX_SECTION_NAME + 1];
	memcpy(name, text + 1, len);
	name[len] = '\0';
	list_append(&ctx->entries, entry_new(name, NULL, NULL, ctx->path, ctx->line));
}

/* inih's reader: one line per call, so ctx->line is inih's line number. */
static char *read_line(char *str, int num, void *stream)
{
	struct load_ctx *ctx = stream;
	if (ctx->error_line)
		return NULL;
	errno = 0;
	ssize_t len = getline(&ctx->buf, &ctx->cap, ctx->fp);
	if (len < 0) {
		ctx->read_errno = ferror(ctx->fp) ? errno : 0;
		return NULL;
	}
	ctx->line++;
	const char *text = line_text(ctx, len);
	size_t text_len = strlen(text);
	if (text_len + 2 > (size_t)num) {
		load_fail(ctx, "line is longer than %d characters", num - 2);
		return NULL;
	}
	memcpy(str, text, text_len);
	memcpy(str + text_len, "\n", 2);
	if (text[0] == '[')
		note_section_heading(ctx, text);
	return str;
}

static int on_ini_entry(void *user, const char *section, const char *key, const char *value)
{
	struct load_ctx *ctx = user;
	if (!key[0])
		return 0; /* "= value": a syntax error */
	if (!section[0])
		return load_fail(ctx, "key '%s' is outside any [section]", key);
	/* Twice in one file is a mistake; a later file overriding an earlier
	 * one is what drop-ins are for (config_entry_find takes the last). */
	const struct config_entry *prev = config_entry_find(&ctx->entries, section, key);
	if (prev)
		return load_fail(ctx, "[%s] key '%s' already set at line %d", section, key, prev->line);
	list_append(&ctx->entries, entry_new(section, key, value, ctx->path, ctx->line));
	return 1;
}

/* inih's verdict and ours: whichever error came first. */
static int load_result(struct load_ctx *ctx, int ini_rc)
{
	if (ctx->read_errno || ferror(ctx->fp)) {
		errbuf_set(ctx->err, "%s: %s", ctx->path,
			   strerror(ctx->read_errno ? ctx->read_errno : EIO));
		return -1;
	}
	if (ini_rc > 0 && (!ctx->error_line || ini_rc < ctx->error_line)) {
		errbuf_set(ctx->err, "%s:%d: syntax error", ctx->path, ini_rc);
		return -1;
	}
	if (ini_rc < 0 && !ctx->error_line) {
		errbuf_set(ctx->err, "%s: cannot parse (inih error %d)", ctx->path, ini_rc);
		return -1;
	}
	return ctx->error_line ? -1 : 0;
}

int config_load_file(const char *path, char *err)
{
	struct load_ctx ctx = {.path = path, .err = err};
	ctx.fp = fopen(path, "re");
	if (!ctx.fp) {
		errbuf_set(err, "%s: %s", path, strerror(errno));
		return -1;
	}
	int rc = load_result(&ctx, ini_parse_stream(read_line, &ctx, on_ini_entry, &ctx));
	if (rc == 0)
		list_splice(&file_entries, &ctx.entries);
	list_free(&ctx.entries);
	free(ctx.buf);
	fclose(ctx.fp);
	return rc;
}

/* ---- drop-ins -------------------------------------------------------------- */

/* "NAME.conf", not hidden: dpkg's NAME.conf.dpkg-dist/-old and editors'
 * backups are not read. */
static int is_dropin_name(const struct dirent *de)
{
	size_t len = strlen(de->d_name);
	return de->d_name[0] != '.' && len > 5 && strcmp(de->d_name + len - 5, ".conf") == 0;
}

/* Byte order, whatever the locale: 10-a.conf before 20-b.conf before a.conf. */
static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int load_dropin_dir(const char *dir, char *err)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, is_dropin_name, by_name);
	if (n < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		errbuf_set(err, "%s: %s", dir, strerror(errno));
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		if (rc == 0) {
			size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
			char *path = xcalloc(1, len);
			snprintf(path, len, "%s/%s", dir, names[i]->d_name);
			rc = config_load_file(path, err);
			free(path);
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int config_load_with_dropins(const char *path, bool required, char *err)
{
	if ((required || access(path, F_OK) == 0) && config_load_file(path, err))
		return -1;
	size_t len = strlen(path) + 3;
	char *dir = xcalloc(1, len);
	snprintf(dir, len, "%s.d", path);
	int rc = load_dropin_dir(dir, err);
	free(dir);
	return rc;
}

/* ---- --set --------------------------------------------------------------- */

static char *dup_trimmed(const char *begin, const char *end)
{
	while (begin < end && isspace((unsigned char)*begin))
		begin++;
	while (end > begin && isspace((unsigned char)end[-1]))
		end--;
	char *s = xcalloc(1, (size_t)(end - begin) + 1);
	memcpy(s, begin, (size_t)(end - begin));
	return s;
}

static void override_store(char *section, char *key, char *value)
{
	struct config_entry *e = config_entry_find(&overrides, section, key);
	if (!e) {
		e = entry_new(section, key, NULL, NULL, 0);
		list_append(&overrides, e);
	}
	free(e->value);
	e->value = value;
	free(section);
	free(key);
}

int config_set_override(const char *spec, char *err)
{
	const char *s = spec ? spec : "";
	const char *eq = strchr(s, '=');
	const char *dot = eq ? memchr(s, '.', (size_t)(eq - s)) : NULL;
	if (!dot) {
		errbuf_set(err, "--set '%s': expected section.key=value", s);
		return -1;
	}
	char *section = dup_trimmed(s, dot);
	char *key = dup_trimmed(dot + 1, eq);
	char *value = dup_trimmed(eq + 1, eq + strlen(eq));
	const char *why = NULL;
	if (!section[0] || !key[0])
		why = "expected section.key=value";
	else if (strpbrk(value, "\r\n"))
		why = "the value must be a single line";
	if (why) {
		errbuf_set(err, "--set '%s': %s", s, why);
		free(section);
		free(key);
		free(value);
		return -1;
	}
	override_store(section, key, value);
	return 0;
}
