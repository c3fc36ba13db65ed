/* cli/output.c - the fibril CLI's output helpers: one-line errors on
 * stderr, allocation that exits on failure, cleaned copies of what the agent
 * sends (safe to print), the aligned-table printer and the JSON accessors
 * the commands render replies with. */

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json.h>

#include "cli.h"

/* ---- small helpers ------------------------------------------------------- */

void print_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fibril: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A usage error: one line naming what was wrong; returns EXIT_USAGE. */
int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fibril: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see 'fibril help')\n", stderr);
	return EXIT_USAGE;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		print_error("out of memory");
		exit(EXIT_FAIL);
	}
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		print_error("out of memory");
		exit(EXIT_FAIL);
	}
	return s;
}

/* Copy of s (at most n bytes) fit for one table cell or message line:
 * control characters (newlines, escape sequences from a misbehaving module)
 * become spaces or '?', so nothing the agent sends can break the layout or
 * the terminal. */
char *clean_ndup(const char *s, size_t n)
{
	char *d;

	n = strnlen(s, n);
	d = xrealloc(NULL, n + 1);

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\n' || c == '\r' || c == '\t')
			d[i] = ' ';
		else if (c < 0x20 || c == 0x7f)
			d[i] = '?';
		else
			d[i] = (char)c;
	}
	d[n] = '\0';
	return d;
}

char *clean_dup(const char *s)
{
	return clean_ndup(s, SIZE_MAX);
}

/* Terminal columns taken by s: UTF-8 continuation bytes take none. */
static size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

/* ---- table printer --------------------------------------------------------- */

/* Rows of strings; the first row is the header. print pads every column but
 * the last to its widest cell, with two spaces between columns. */
void table_init(struct table *t, size_t ncols)
{
	*t = (struct table){ .ncols = ncols };
}

/* Adds a row of t->ncols cells (const char *); NULL cells print as "-". */
void table_row(struct table *t, ...)
{
	va_list ap;

	if (t->nrows == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof(*t->cells));
	}
	va_start(ap, t);
	for (size_t c = 0; c < t->ncols; c++) {
		const char *s = va_arg(ap, const char *);

		t->cells[t->nrows * t->ncols + c] = clean_dup(s ? s : "-");
	}
	va_end(ap);
	t->nrows++;
}

void table_print(const struct table *t)
{
	size_t *width = xrealloc(NULL, t->ncols * sizeof(*width));
	size_t linecap = 1;

	for (size_t c = 0; c < t->ncols; c++) {
		width[c] = 0;
		for (size_t r = 0; r < t->nrows; r++) {
			size_t w = text_width(t->cells[r * t->ncols + c]);

			if (w > width[c])
				width[c] = w;
		}
	}
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		linecap += strlen(t->cells[i]) + width[i % t->ncols] + 2;

	char *line = xrealloc(NULL, linecap);

	for (size_t r = 0; r < t->nrows; r++) {
		size_t len = 0;

		for (size_t c = 0; c < t->ncols; c++) {
			const char *cell = t->cells[r * t->ncols + c];
			size_t n = strlen(cell);

			memcpy(line + len, cell, n);
			len += n;
			if (c + 1 < t->ncols) {
				size_t pad = width[c] - text_width(cell) + 2;

				memset(line + len, ' ', pad);
				len += pad;
			}
		}
		while (len > 0 && line[len - 1] == ' ') /* empty trailing cells */
			len--;
		line[len] = '\0';
		puts(line);
	}
	free(line);
	free(width);
}

void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

/* ---- JSON accessors ------------------------------------------------------ */

struct json_object *jget(struct json_object *o, const char *key, enum json_type type)
{
	struct json_object *v;

	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

/* The string o[key], or NULL when missing, null or not a string. */
const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v = jget(o, key, json_type_string);

	return v ? json_object_get_string(v) : NULL;
}

bool jnum(struct json_object *o, const char *key, double *out)
{
	struct json_object *v;

	if ((v = jget(o, key, json_type_int)) || (v = jget(o, key, json_type_double))) {
		*out = json_object_get_double(v);
		return true;
	}
	return false;
}

/* o[key] as an integer in buf, or "-" when missing or null. */
const char *fmt_int(struct json_object *o, const char *key, char *buf, size_t len)
{
	struct json_object *v = jget(o, key, json_type_int);
	double d;

	if (v)
		snprintf(buf, len, "%lld", (long long)json_object_get_int64(v));
	else if (jnum(o, key, &d))
		snprintf(buf, len, "%.0f", d);
	else
		return "-";
	return buf;
}

/* o[key], Unix seconds, as RFC 3339 UTC ("2026-11-28T05:40:12Z"), or "-". */
const char *fmt_time(struct json_object *o, const char *key, char *buf, size_t len)
{
	double d;
	struct tm tm;
	time_t t;

	if (!jnum(o, key, &d) || d < 0 || d > 253402300799.0) /* up to year 9999 */
		return "-";
	t = (time_t)d;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		return "-";
	return buf;
}

/* o[key], a duration in milliseconds, as "1.23ms", or "-". */
const char *fmt_ms(struct json_object *o, const char *key, char *buf, size_t len)
{
	double d;

	if (!jnum(o, key, &d))
		return "-";
	snprintf(buf, len, "%.2fms", d);
	return buf;
}

/* The array of strings o[key] joined with commas, or "-" when empty or
 * missing. The result is malloc'd. */
char *join_list(struct json_object *o, const char *key)
{
	struct json_object *a = jget(o, key, json_type_array);
	size_t n = a ? json_object_array_length(a) : 0;
	char *out = NULL;

	for (size_t i = 0; i < n; i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(a, i));
		char *more = xasprintf("%s%s%s", out ? out : "", out ? "," : "", s ? s : "null");

		free(out);
		out = more;
	}
	return out ? out : xasprintf("-");
}

/* o[key] which must be an array of objects; prints a bad-reply error and
 * returns NULL otherwise. */
struct json_object *jarray_of_objects(struct json_object *o, const char *key)
{
	struct json_object *a = jget(o, key, json_type_array);

	if (!a) {
		print_error("bad reply from agent: no \"%s\" array", key);
		return NULL;
	}
	for (size_t i = 0; i < json_object_array_length(a); i++)
		if (!json_object_is_type(json_object_array_get_idx(a, i), json_type_object)) {
			print_error("bad reply from agent: \"%s\"[%zu] is not an object", key, i);
			return NULL;
		}
	return a;
}

void print_json(struct json_object *o)
{
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
}

char *policy_rule_text(struct json_object *o)
{
	char spec[32] = "", idx[32] = "", id[32] = "";
	const char *name = o ? jstr(o, "name") : NULL, *ns = o ? jstr(o, "namespace") : NULL;
	double n;
	if (!o)
		return NULL;
	if (!name)
		return jnum(o, "rule_id", &n) ? xasprintf("rule %.0f", n) : NULL;
	if (jnum(o, "spec", &n) && n > 0)
		snprintf(spec, sizeof(spec), "specs[%.0f].", n);
	if (jnum(o, "rule_index", &n))
		snprintf(idx, sizeof(idx), "[%.0f]", n);
	if (jnum(o, "rule_id", &n))
		snprintf(id, sizeof(id), " (rule %.0f)", n);
	return xasprintf("%s %s%s%s %s%s%s%s", jstr(o, "kind") ? jstr(o, "kind") : "?", ns ? ns : "",
			 ns && *ns ? "/" : "", name, spec, jstr(o, "section") ? jstr(o, "section") : "?",
			 idx, id);
}
