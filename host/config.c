/* host/config.c - the agent's configuration store: the keys each section
 * declares, validation of the entries read (host/config_sources.c reads
 * them from the files and --set) with one-line errors, and the effective
 * values that the agent and the modules read, print (--print-config, with
 * the file, --set or default each came from) and serve (GET /v1/config). */
#include "config_sources.h"
#include "internal.h"
#include <fibril/compat.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MS_PER_SECOND INT64_C(1000)
#define MS_PER_MINUTE INT64_C(60000)
#define MS_PER_HOUR INT64_C(3600000)

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
	config_sources_reset();
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

/* Whether an unknown section's name is a near miss of a declared one (a
 * typo: an error, with the suggestion): at most 1 + len/4 edits away, so
 * [agnet] and [hellp] are typos while a short name such as [lb] is not
 * taken for [k8s]. */
static bool section_is_typo(const char *section)
{
	size_t limit = 1 + strlen(section) / 4;
	for (size_t i = 0; i < store.nsections; i++)
		if (edit_distance(section, store.sections[i].name) <= limit)
			return true;
	return false;
}

/* A file's section no loaded module declares and no declared section's
 * near miss: a warning, once per section and file, and its settings
 * ignored. A removed but not purged module package leaves its drop-in
 * (50-NAME.conf) behind: Debian's normal state, which must not stop the
 * next start. A near miss ([agnet]) and --set are still errors. */
static void unknown_section_warning(const struct config_entry *e)
{
	for (const struct config_entry *p = config_file_entries()->head; p && p != e; p = p->next)
		if (strcmp(p->section, e->section) == 0 && p->file && e->file &&
		    strcmp(p->file, e->file) == 0)
			return; /* said already */
	char where[ERRBUF_LEN], why[ERRBUF_LEN];
	config_entry_where(e, where, sizeof(where));
	unknown_section_error(where, e->section, why);
	host_warn("%s; no loaded module has this section, its settings are ignored (a removed "
		  "module's configuration?)", why);
}

static int validate_entry(struct config_entry *e, char *err)
{
	char where[ERRBUF_LEN];
	config_entry_where(e, where, sizeof(where));
	const struct config_section *s = section_find(e->section);
	if (!s && e->file && !section_is_typo(e->section)) {
		unknown_section_warning(e);
		return 0;
	}
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
	if (validate_entries(config_file_entries(), section, err))
		return -1;
	return validate_entries(config_override_entries(), section, err);
}

int config_validate_all(char *err)
{
	if (validate_entries(config_file_entries(), NULL, err))
		return -1;
	return validate_entries(config_override_entries(), NULL, err);
}

/* ---- effective values ------------------------------------------------------ */

/* The entry that sets section.key (--set wins over the file), or NULL. */
static const struct config_entry *effective_entry(const char *section, const char *key)
{
	const struct config_entry *e = config_entry_find(config_override_entries(), section, key);
	return e ? e : config_entry_find(config_file_entries(), section, key);
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
	return section && (config_entries_have_section(config_file_entries(), section) ||
			   config_entries_have_section(config_override_entries(), section));
}

/* ---- --check's warnings ---------------------------------------------------- */

size_t config_warn_unset(FILE *out)
{
	size_t n = 0;
	for (size_t i = 0; i < store.nsections; i++) {
		const struct config_section *s = &store.sections[i];
		for (size_t j = 0; j < s->nkeys; j++) {
			const struct fibril_config_key *k = &s->keys[j];
			if (!k->site_specific || effective_entry(s->name, k->name))
				continue;
			fprintf(out, "warning: [%s] %s is not set: the default (%s) is used; set it for "
				     "this node in a drop-in (fibril.conf(5))\n",
				s->name, k->name, k->default_value && k->default_value[0] ? k->default_value : "none");
			n++;
		}
	}
	return n;
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
	/* Which file:line, --set or default gave the value below. */
	const char *origin = config_origin(section, k->name);
	fprintf(out, ", from: %s)\n", origin ? origin : "default");
	const char *value = config_value(section, k->name);
	if (!value)
		fprintf(out, "# %s =\n", k->name);
	else if (!value[0])
		fprintf(out, "%s =\n", k->name);
	else
		fprintf(out, "%s = %s\n", k->name, value);
	/* [providers]: the module the resolved graph chose, set or not */
	if (strcmp(section, "providers") == 0) {
		const struct fibril_module *p = graph_provider(k->name);
		fprintf(out, "# resolved: %s%s\n", p ? p->name : "no module",
			value && value[0] ? "" : " (the only provider loaded)");
	}
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
