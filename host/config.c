/* host/config.c - the agent's configuration store: the INI file's raw
 * entries (remembered with file:line), --set overrides, the keys each
 * section declares, validation with one-line errors, and the effective
 * values that the agent and the modules read, print (--print-config) and
 * serve (GET /v1/config). */
#include "internal.h"
#include "struct_size.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#define MS_PER_SECOND INT64_C(1000)
#define MS_PER_MINUTE INT64_C(60000)
#define MS_PER_HOUR INT64_C(3600000)
/* inih truncates longer section names; refuse them instead. */
#define MAX_SECTION_NAME 49

/* One value from the file or from --set, or a section heading (key NULL). */
struct config_entry {
	char *section;
	char *key;
	char *value;
	char *file;   /* NULL: from --set */
	int line;
	char *origin; /* "FILE:LINE" or "--set" */
	struct config_entry *next;
};

struct entry_list {
	struct config_entry *head, *tail;
};

struct config_section {
	char *name;
	const struct fibril_config_key *keys; /* not owned (module descriptor) */
	size_t nkeys;
	struct fibril_config_key *owned_keys; /* dynamic sections only */
	char *owned_help;
	struct fibril_config_key *copied_keys; /* a module's keys at our element size */
};

/* The one config store. */
static struct {
	struct config_section *sections; /* in declaration order */
	size_t nsections;
	struct entry_list file_entries;  /* in file order */
	struct entry_list overrides;     /* one entry per section.key */
} store;

static const char *const type_names[] = {
	[FIBRIL_CONFIG_STRING] = "string", [FIBRIL_CONFIG_INT] = "int",
	[FIBRIL_CONFIG_BOOL] = "bool",     [FIBRIL_CONFIG_PATH] = "path",
	[FIBRIL_CONFIG_DURATION] = "duration", [FIBRIL_CONFIG_LIST] = "list",
};

static bool type_is_valid(enum fibril_config_type type)
{
	return type >= FIBRIL_CONFIG_STRING && type <= FIBRIL_CONFIG_LIST;
}

static const char *type_name(enum fibril_config_type type)
{
	return type_is_valid(type) ? type_names[type] : "unknown";
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

/* The last entry that sets section.key, or NULL. */
static struct config_entry *list_find(const struct entry_list *list, const char *section,
				      const char *key)
{
	struct config_entry *found = NULL;
	for (struct config_entry *e = list->head; e; e = e->next) {
		if (e->key && strcmp(e->section, section) == 0 && strcmp(e->key, key) == 0)
			found = e;
	}
	return found;
}

static bool list_has_section(const struct entry_list *list, const char *section)
{
	for (const struct config_entry *e = list->head; e; e = e->next) {
		if (strcmp(e->section, section) == 0)
			return true;
	}
	return false;
}

/* "FILE:LINE" or "--set section.key": how errors point at an entry. */
static void entry_where(const struct config_entry *e, char *buf, size_t len)
{
	if (e->file)
		snprintf(buf, len, "%s", e->origin);
	else
		snprintf(buf, len, "--set %s.%s", e->section, e->key ? e->key : "");
}

/* ---- declared sections ------------------------------------------------- */

static struct config_section *section_find(const char *name)
{
	for (size_t i = 0; i < store.nsections; i++) {
		if (strcmp(store.sections[i].name, name) == 0)
			return &store.sections[i];
	}
	return NULL;
}

static const struct fibril_config_key *section_key(const struct config_section *s, const char *key)
{
	for (size_t i = 0; i < s->nkeys; i++) {
		if (strcmp(s->keys[i].name, key) == 0)
			return &s->keys[i];
	}
	return NULL;
}

static const struct fibril_config_key *declared_key(const char *section, const char *key)
{
	const struct config_section *s = section_find(section);
	return s ? section_key(s, key) : NULL;
}

static struct config_section *section_add(const char *name)
{
	size_t n = store.nsections + 1;
	struct config_section *grown = realloc(store.sections, n * sizeof(*grown));
	if (!grown)
		abort();
	store.sections = grown;
	store.nsections = n;
	struct config_section *s = &grown[n - 1];
	memset(s, 0, sizeof(*s));
	s->name = xstrdup(name);
	return s;
}

static size_t count_keys(const struct fibril_config_key *keys)
{
	size_t n = 0;
	while (keys && keys[n].name)
		n++;
	return n;
}

/* Names non-empty and unique, types known. Defaults are trusted. */
static bool keys_are_valid(const struct fibril_config_key *keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!keys[i].name[0] || !type_is_valid(keys[i].type))
			return false;
		for (size_t j = 0; j < i; j++) {
			if (strcmp(keys[i].name, keys[j].name) == 0)
				return false;
		}
	}
	return true;
}

int config_declare(const char *section, const struct fibril_config_key *keys)
{
	if (!section || !section[0])
		return -EINVAL;
	if (section_find(section))
		return -EEXIST;
	size_t n = count_keys(keys);
	if (!keys_are_valid(keys, n))
		return -EINVAL;
	struct config_section *s = section_add(section);
	s->keys = keys;
	s->nkeys = n;
	return 0;
}

static bool names_contain(const struct fibril_config_key *keys, size_t n, const char *name);

/* The stride of a module's config_keys array: the size its descriptor
 * carries, else (a descriptor older than 1.4, or built by hand) the size
 * fibril_config_key had at the descriptor's minor. */
static size_t module_key_size(const struct fibril_module_desc *d)
{
	if (d->config_key_sz)
		return d->config_key_sz;
	if (d->abi_minor < 4) /* 1.0 - 1.3 */
		return FIBRIL_OFFSETOFEND(struct fibril_config_key, check);
	return FIBRIL_OFFSETOFEND(struct fibril_config_key, deprecated_alias); /* 1.4 */
}

int config_declare_module(const struct fibril_module *m, char *err)
{
	const struct fibril_module_desc *d = &m->desc;
	const size_t stride = module_key_size(d);
	const size_t max_keys = 4096;
	const char *base = (const char *)d->config_keys;
	size_t n = 0;
	if (stride < FIBRIL_OFFSETOFEND(struct fibril_config_key, name) ||
	    stride > FIBRIL_STRUCT_SIZE_MAX) {
		errbuf_set(err, "module %s: config_key_sz %zu is not a valid struct fibril_config_key size",
			   m->path, stride);
		return -1;
	}
	while (base && n < max_keys && ((const struct fibril_config_key *)(base + n * stride))->name)
		n++;
	struct fibril_config_key *keys = xcalloc(n + 1, sizeof(*keys));
	for (size_t i = 0; i < n; i++) {
		char what[96], why[ERRBUF_LEN];
		snprintf(what, sizeof(what), "struct fibril_config_key #%zu", i);
		if (fibril_struct_copy_in(&keys[i], sizeof(keys[i]), base + i * stride, stride,
					  stride, what, why, sizeof(why)) < 0) {
			errbuf_set(err, "module %s: %s", m->path, why);
			free(keys);
			return -1;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const char *alias = keys[i].deprecated_alias;
		bool clash = alias && (!alias[0] || names_contain(keys, n, alias));
		for (size_t j = 0; alias && !clash && j < i; j++)
			clash = keys[j].deprecated_alias && strcmp(keys[j].deprecated_alias, alias) == 0;
		if (clash) {
			errbuf_set(err, "module %s: config key '%s': deprecated_alias '%s' is empty or "
				   "names another key", m->path, keys[i].name, alias);
			free(keys);
			return -1;
		}
	}
	if (config_declare(m->name, keys)) {
		errbuf_set(err, "module %s: invalid config key declarations", m->path);
		free(keys);
		return -1;
	}
	section_find(m->name)->copied_keys = keys;
	return 0;
}

static bool names_contain(const struct fibril_config_key *keys, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(keys[i].name, name) == 0)
			return true;
	}
	return false;
}

int config_declare_dynamic(const char *section, const char *const *names, size_t n,
			   const char *help)
{
	if (!section || !section[0] || (n && !names))
		return -EINVAL;
	if (section_find(section))
		return -EEXIST;
	struct config_section *s = section_add(section);
	s->owned_help = help ? xstrdup(help) : NULL;
	s->owned_keys = xcalloc(n + 1, sizeof(*s->owned_keys));
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		if (!names[i] || !names[i][0] || names_contain(s->owned_keys, used, names[i]))
			continue;
		s->owned_keys[used].name = xstrdup(names[i]);
		s->owned_keys[used].type = FIBRIL_CONFIG_STRING;
		s->owned_keys[used].help = s->owned_help;
		used++;
	}
	s->keys = s->owned_keys;
	s->nkeys = used;
	return 0;
}

static void section_free(struct config_section *s)
{
	for (size_t i = 0; s->owned_keys && i < s->nkeys; i++)
		free((char *)s->owned_keys[i].name);
	free(s->owned_keys);
	free(s->copied_keys);
	free(s->owned_help);
	free(s->name);
}

void config_reset(void)
{
	for (size_t i = 0; i < store.nsections; i++)
		section_free(&store.sections[i]);
	free(store.sections);
	list_free(&store.file_entries);
	list_free(&store.overrides);
	memset(&store, 0, sizeof(store));
}

/* ---- parsing values ------------------------------------------------------ */

int config_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	for (size_t i = 0; s && i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
			*out = strcasecmp(s, yes[i]) == 0;
			return 0;
		}
	}
	return -EINVAL;
}

_Static_assert(sizeof(long long) == sizeof(int64_t), "strtoll parses int64_t");

int config_parse_int(const char *s, int64_t *out)
{
	if (!s)
		return -EINVAL;
	const char *digits = (s[0] == '+' || s[0] == '-') ? s + 1 : s;
	if (!isdigit((unsigned char)digits[0]))
		return -EINVAL;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE)
		return -ERANGE;
	*out = (int64_t)v;
	return 0;
}

static int64_t duration_unit_ms(const char *unit)
{
	if (strcmp(unit, "ms") == 0)
		return 1;
	if (strcmp(unit, "s") == 0)
		return MS_PER_SECOND;
	if (strcmp(unit, "m") == 0)
		return MS_PER_MINUTE;
	if (strcmp(unit, "h") == 0)
		return MS_PER_HOUR;
	return 0;
}

int config_parse_duration_ms(const char *s, int64_t *out)
{
	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	char *unit;
	errno = 0;
	long long n = strtoll(s, &unit, 10);
	int64_t per = unit[0] ? duration_unit_ms(unit) : (n == 0 ? 1 : 0);
	if (!per)
		return -EINVAL;
	if (errno == ERANGE || n > INT64_MAX / per)
		return -ERANGE;
	*out = (int64_t)n * per;
	return 0;
}

/* 3600000 -> "1h", 1500 -> "1500ms": the largest unit that is exact. */
static void format_duration(int64_t ms, char *buf, size_t len)
{
	if (ms != 0 && ms % MS_PER_HOUR == 0)
		snprintf(buf, len, "%" PRId64 "h", ms / MS_PER_HOUR);
	else if (ms != 0 && ms % MS_PER_MINUTE == 0)
		snprintf(buf, len, "%" PRId64 "m", ms / MS_PER_MINUTE);
	else if (ms != 0 && ms % MS_PER_SECOND == 0)
		snprintf(buf, len, "%" PRId64 "s", ms / MS_PER_SECOND);
	else if (ms != 0)
		snprintf(buf, len, "%" PRId64 "ms", ms);
	else
		snprintf(buf, len, "0");
}

static bool key_has_range(const struct fibril_config_key *k)
{
	return (k->type == FIBRIL_CONFIG_INT || k->type == FIBRIL_CONFIG_DURATION) &&
	       (k->min != 0 || k->max != 0);
}

/* "1..100" or "1s..1h". */
static void format_range(const struct fibril_config_key *k, char *buf, size_t len)
{
	if (k->type == FIBRIL_CONFIG_DURATION) {
		char lo[32], hi[32];
		format_duration(k->min, lo, sizeof(lo));
		format_duration(k->max, hi, sizeof(hi));
		snprintf(buf, len, "%s..%s", lo, hi);
	} else {
		snprintf(buf, len, "%" PRId64 "..%" PRId64, k->min, k->max);
	}
}

/* Comma-separated words; blanks around words are fine, empty items not. */
static bool is_word_list(const char *s)
{
	const char *p = s;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return true;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		size_t word = 0;
		while (p[word] && p[word] != ',' && !isspace((unsigned char)p[word]))
			word++;
		p += word;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!word || (*p && *p != ','))
			return false;
		if (!*p)
			return true;
		p++;
	}
}

/* ---- validating values --------------------------------------------------- */

static int why_set(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int why_set(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -1;
}

static int check_int(const struct fibril_config_key *k, const char *value, char *why, size_t len)
{
	int64_t v;
	int rc = config_parse_int(value, &v);
	if (rc == -ERANGE)
		return why_set(why, len, "'%s' does not fit in 64 bits", value);
	if (rc)
		return why_set(why, len, "'%s' is not an integer", value);
	if (key_has_range(k) && (v < k->min || v > k->max)) {
		char range[80];
		format_range(k, range, sizeof(range));
		return why_set(why, len, "%s is out of range %s", value, range);
	}
	return 0;
}

static int check_duration(const struct fibril_config_key *k, const char *value, char *why,
			  size_t len)
{
	int64_t ms;
	int rc = config_parse_duration_ms(value, &ms);
	if (rc == -ERANGE)
		return why_set(why, len, "'%s' is too long a duration", value);
	if (rc)
		return why_set(why, len, "'%s' is not a duration (e.g. 250ms, 5s, 2m, 1h)", value);
	if (key_has_range(k) && (ms < k->min || ms > k->max)) {
		char range[80];
		format_range(k, range, sizeof(range));
		return why_set(why, len, "%s is out of range %s", value, range);
	}
	return 0;
}

static int check_type(const struct fibril_config_key *k, const char *value, char *why, size_t len)
{
	bool b;
	switch (k->type) {
	case FIBRIL_CONFIG_STRING:
		return 0;
	case FIBRIL_CONFIG_INT:
		return check_int(k, value, why, len);
	case FIBRIL_CONFIG_BOOL:
		if (config_parse_bool(value, &b))
			return why_set(why, len, "'%s' is not a boolean (true/false, yes/no, on/off, 1/0)",
				       value);
		return 0;
	case FIBRIL_CONFIG_PATH:
		if (value[0] != '/')
			return why_set(why, len, "'%s' is not an absolute path", value);
		return 0;
	case FIBRIL_CONFIG_DURATION:
		return check_duration(k, value, why, len);
	case FIBRIL_CONFIG_LIST:
		if (!is_word_list(value))
			return why_set(why, len, "'%s' is not a comma-separated list of words", value);
		return 0;
	}
	return why_set(why, len, "has an unknown type %d", (int)k->type);
}

static int check_value(const struct fibril_config_key *k, const char *value, char *why, size_t len)
{
	if (check_type(k, value, why, len))
		return -1;
	if (!k->check)
		return 0;
	why[0] = '\0';
	if (k->check(value, why, len) == 0)
		return 0;
	if (!why[0])
		why_set(why, len, "'%s' is not accepted", value);
	return -1;
}

static int unknown_section_error(const char *where, const char *section, char *err)
{
	const char **names = xcalloc(store.nsections, sizeof(*names));
	for (size_t i = 0; i < store.nsections; i++)
		names[i] = store.sections[i].name;
	const char *guess = nearest_name(section, names, store.nsections);
	if (guess)
		errbuf_set(err, "%s: unknown section [%s] (did you mean [%s]?)", where, section, guess);
	else
		errbuf_set(err, "%s: unknown section [%s]", where, section);
	free(names);
	return -1;
}

static int unknown_key_error(const char *where, const struct config_section *s, const char *key,
			     char *err)
{
	const char **names = xcalloc(s->nkeys, sizeof(*names));
	for (size_t i = 0; i < s->nkeys; i++)
		names[i] = s->keys[i].name;
	const char *guess = nearest_name(key, names, s->nkeys);
	if (guess)
		errbuf_set(err, "%s: [%s] unknown key '%s' (did you mean '%s'?)", where, s->name, key,
			   guess);
	else
		errbuf_set(err, "%s: [%s] unknown key '%s'", where, s->name, key);
	free(names);
	return -1;
}

/* The key whose deprecated_alias is name, or NULL. */
static const struct fibril_config_key *alias_key(const struct config_section *s, const char *name)
{
	for (size_t i = 0; i < s->nkeys; i++) {
		if (s->keys[i].deprecated_alias && strcmp(s->keys[i].deprecated_alias, name) == 0)
			return &s->keys[i];
	}
	return NULL;
}

static int validate_entry(struct config_entry *e, char *err)
{
	char where[ERRBUF_LEN];
	entry_where(e, where, sizeof(where));
	const struct config_section *s = section_find(e->section);
	if (!s)
		return unknown_section_error(where, e->section, err);
	if (!e->key)
		return 0;
	const struct fibril_config_key *k = section_key(s, e->key);
	if (!k && (k = alias_key(s, e->key)) != NULL) {
		/* A former name: read it as the current one from now on. */
		host_warn("%s: [%s] '%s' is deprecated, use '%s'", where, s->name, e->key, k->name);
		free(e->key);
		e->key = xstrdup(k->name);
	}
	if (!k)
		return unknown_key_error(where, s, e->key, err);
	char why[ERRBUF_LEN];
	if (check_value(k, e->value, why, sizeof(why)) == 0)
		return 0;
	errbuf_set(err, "%s: [%s] %s: %s", where, s->name, k->name, why);
	return -1;
}

/* Every entry of the list, or only those of one section (NULL: all). */
static int validate_entries(const struct entry_list *list, const char *only_section, char *err)
{
	for (struct config_entry *e = list->head; e; e = e->next) {
		if (only_section && strcmp(e->section, only_section) != 0)
			continue;
		if (validate_entry(e, err))
			return -1;
	}
	return 0;
}

int config_validate_section(const char *section, char *err)
{
	if (!section || !section_find(section)) {
		errbuf_set(err, "[%s] is not a declared config section", section ? section : "");
		return -1;
	}
	if (validate_entries(&store.file_entries, section, err))
		return -1;
	return validate_entries(&store.overrides, section, err);
}

int config_validate_all(char *err)
{
	if (validate_entries(&store.file_entries, NULL, err))
		return -1;
	return validate_entries(&store.overrides, NULL, err);
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
	const struct config_entry *prev = list_find(&ctx->entries, section, key);
	if (!prev)
		prev = list_find(&store.file_entries, section, key);
	if (prev && strcmp(prev->file, ctx->path) == 0)
		return load_fail(ctx, "[%s] key '%s' already set at line %d", section, key, prev->line);
	if (prev)
		return load_fail(ctx, "[%s] key '%s' already set at %s", section, key, prev->origin);
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
		list_splice(&store.file_entries, &ctx.entries);
	list_free(&ctx.entries);
	free(ctx.buf);
	fclose(ctx.fp);
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
	struct config_entry *e = list_find(&store.overrides, section, key);
	if (!e) {
		e = entry_new(section, key, NULL, NULL, 0);
		list_append(&store.overrides, e);
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

/* ---- effective values ------------------------------------------------------ */

/* The entry that sets section.key (--set wins over the file), or NULL. */
static const struct config_entry *effective_entry(const char *section, const char *key)
{
	const struct config_entry *e = list_find(&store.overrides, section, key);
	return e ? e : list_find(&store.file_entries, section, key);
}

const char *config_value(const char *section, const char *key)
{
	if (!section || !key)
		return NULL;
	const struct config_entry *e = effective_entry(section, key);
	if (e)
		return e->value;
	const struct fibril_config_key *k = declared_key(section, key);
	return k ? k->default_value : NULL;
}

const char *config_origin(const char *section, const char *key)
{
	if (!section || !key)
		return NULL;
	const struct config_entry *e = effective_entry(section, key);
	if (e)
		return e->origin;
	return declared_key(section, key) ? "default" : NULL;
}

bool config_section_present(const char *section)
{
	return section && (list_has_section(&store.file_entries, section) ||
			   list_has_section(&store.overrides, section));
}

/* ---- --print-config ------------------------------------------------------ */

/* Help text on one comment line. */
static void print_one_line(FILE *out, const char *text)
{
	for (const char *p = text; *p; p++)
		fputc(*p == '\n' || *p == '\r' ? ' ' : *p, out);
}

static void print_key(FILE *out, const char *section, const struct fibril_config_key *k)
{
	fputs("# ", out);
	if (k->help && k->help[0]) {
		print_one_line(out, k->help);
		fputc(' ', out);
	}
	fprintf(out, "(type: %s", type_name(k->type));
	if (k->default_value)
		fprintf(out, ", default: %s", k->default_value[0] ? k->default_value : "\"\"");
	if (key_has_range(k)) {
		char range[80];
		format_range(k, range, sizeof(range));
		fprintf(out, ", range: %s", range);
	}
	fputs(")\n", out);
	const char *value = config_value(section, k->name);
	if (!value)
		fprintf(out, "# %s =\n", k->name);
	else if (!value[0])
		fprintf(out, "%s =\n", k->name);
	else
		fprintf(out, "%s = %s\n", k->name, value);
}

void config_print(FILE *out)
{
	for (size_t i = 0; i < store.nsections; i++) {
		const struct config_section *s = &store.sections[i];
		fprintf(out, "%s[%s]\n", i ? "\n" : "", s->name);
		for (size_t j = 0; j < s->nkeys; j++)
			print_key(out, s->name, &s->keys[j]);
	}
}

/* ---- GET /v1/config -------------------------------------------------------- */

static struct json_object *string_or_null(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

static struct json_object *key_to_json(const char *section, const struct fibril_config_key *k)
{
	struct json_object *obj = json_object_new_object();
	json_object_object_add(obj, "name", json_object_new_string(k->name));
	json_object_object_add(obj, "type", json_object_new_string(type_name(k->type)));
	json_object_object_add(obj, "value", string_or_null(config_value(section, k->name)));
	json_object_object_add(obj, "default", string_or_null(k->default_value));
	json_object_object_add(obj, "origin", string_or_null(config_origin(section, k->name)));
	json_object_object_add(obj, "help", string_or_null(k->help));
	return obj;
}

static struct json_object *section_to_json(const struct config_section *s)
{
	struct json_object *obj = json_object_new_object();
	struct json_object *keys = json_object_new_array();
	for (size_t i = 0; i < s->nkeys; i++)
		json_object_array_add(keys, key_to_json(s->name, &s->keys[i]));
	json_object_object_add(obj, "name", json_object_new_string(s->name));
	json_object_object_add(obj, "keys", keys);
	return obj;
}

struct json_object *config_to_json(void)
{
	struct json_object *root = json_object_new_object();
	struct json_object *sections = json_object_new_array();
	for (size_t i = 0; i < store.nsections; i++)
		json_object_array_add(sections, section_to_json(&store.sections[i]));
	json_object_object_add(root, "sections", sections);
	return root;
}

/* ---- SDK getters ----------------------------------------------------------- */

static const char *module_section(const struct fibril_module *m)
{
	return m && m->name ? m->name : "agent";
}

const char *fibril_config_string(struct fibril_module *m, const char *key)
{
	return config_value(module_section(m), key);
}

int64_t fibril_config_int(struct fibril_module *m, const char *key)
{
	int64_t v;
	const char *s = config_value(module_section(m), key);
	return s && config_parse_int(s, &v) == 0 ? v : 0;
}

bool fibril_config_bool(struct fibril_module *m, const char *key)
{
	bool v;
	const char *s = config_value(module_section(m), key);
	return s && config_parse_bool(s, &v) == 0 ? v : false;
}

uint64_t fibril_config_duration_ms(struct fibril_module *m, const char *key)
{
	int64_t ms;
	const char *s = config_value(module_section(m), key);
	return s && config_parse_duration_ms(s, &ms) == 0 ? (uint64_t)ms : 0;
}

const char *fibril_config_get(const char *section, const char *key)
{
	return config_value(section, key);
}
