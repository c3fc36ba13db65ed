/* lib/metrics.c - the Prometheus metrics registry (SDK 1.5,
 * <fibril/metrics.h>): families owned by modules (or the agent), series per
 * label values updated with atomics from any thread, scrape callbacks, and
 * the text exposition format (0.0.4) the host serves at GET /metrics. The
 * host's own figures are host/metrics_host.c's.
 *
 * Threads: the family list and each family's series list change only under
 * g_lock (register, first use of a series, delete, release, exposition); a
 * series' value, buckets, count and sum are atomics, so updates take no
 * lock. A deleted series (SDK 1.7) leaves the exposition for its family's
 * retired list, where it keeps its memory (a pointer some thread still
 * holds stays valid; what it adds is seen by nobody) and is taken back,
 * zeroed, when the same label values are used again. A series is freed
 * only when its owner is released, after its worker jobs were waited for,
 * so no update can race with the free. */
#include "lib_int.h"
#include <fibril/compat.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct fibril_series {
	struct fibril_metric *family;
	char **values; /* family->nlabels */
	_Atomic uint64_t value; /* counter, gauge: the bits of a double */
	_Atomic uint64_t count; /* histogram */
	_Atomic uint64_t sum;   /* histogram: the bits of a double */
	_Atomic uint64_t *buckets; /* histogram: nbounds + 1 (the last is +Inf), not cumulative */
	struct fibril_series *next;
};

struct fibril_metric {
	struct fibril_module *owner;
	enum fibril_metric_type type;
	char *name, *help;
	char *labels[FIBRIL_METRIC_MAX_LABELS];
	size_t nlabels;
	double bounds[FIBRIL_METRIC_MAX_BUCKETS];
	size_t nbounds;
	struct fibril_series *series, **series_tail;
	struct fibril_series *retired; /* deleted series, kept for late updaters */
	struct fibril_metric *next;
};

struct scrape_cb {
	struct fibril_module *owner;
	fibril_metrics_scrape_fn cb;
	void *ud;
	struct scrape_cb *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fibril_metric *g_families, **g_families_tail = &g_families;
static struct scrape_cb *g_scrapes;

static const double g_default_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

/* ---- names ------------------------------------------------------------------------------ */

static bool name_ok(const char *s, bool colon)
{
	if (!s || !*s)
		return false;
	for (const char *p = s; *p; p++) {
		bool alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
			     (colon && *p == ':');
		if (!alpha && !(p > s && *p >= '0' && *p <= '9'))
			return false;
	}
	return true;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Names the host writes itself (host/routes.c, host/bus.c,
 * host/metrics_process.c): not for modules. */
static bool name_reserved(const char *name)
{
	static const char *const prefixes[] = {"fibril_bus_", "fibril_module_", "fibril_uptime_",
					       "fibril_ready", "process_"};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

static struct fibril_metric *family_find(const char *name)
{
	for (struct fibril_metric *f = g_families; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			return f;
	return NULL;
}

/* ---- doubles in atomics ------------------------------------------------------------------ */

static uint64_t d2u(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

static double u2d(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

static void atomic_add_double(_Atomic uint64_t *a, double v)
{
	uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(a, &old, d2u(u2d(old) + v), memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/* ---- registration -------------------------------------------------------------------------- */

static void series_list_free(const struct fibril_metric *f, struct fibril_series *s)
{
	for (struct fibril_series *next; s; s = next) {
		next = s->next;
		for (size_t i = 0; i < f->nlabels; i++)
			free(s->values[i]);
		free(s->values);
		free(s->buckets);
		free(s);
	}
}

static void family_free(struct fibril_metric *f)
{
	series_list_free(f, f->series);
	series_list_free(f, f->retired);
	for (size_t i = 0; i < f->nlabels; i++)
		free(f->labels[i]);
	free(f->name);
	free(f->help);
	free(f);
}

#define REFUSE(...)                                                                                \
	do {                                                                                       \
		fibril_error(m, __VA_ARGS__);                                                      \
		errno = EINVAL;                                                                    \
		return NULL;                                                                       \
	} while (0)

struct fibril_metric *fibril_metric_register(struct fibril_module *m,
					     const struct fibril_metric_opts *in)
{
	/* the caller's struct may be shorter (older SDK) or longer (newer) */
	struct fibril_metric_opts o;
	char why[256];
	int rc = fibril_struct_copy_in(&o, sizeof(o), in, in ? in->sz : 0,
				       offsetof(struct fibril_metric_opts, labels),
				       "struct fibril_metric_opts", why, sizeof(why));
	if (rc) {
		fibril_error(m, "metric: options refused: %s", why);
		errno = -rc;
		return NULL;
	}
	const char *name = o.name ? o.name : "(null)";
	if (!name_ok(o.name, true))
		REFUSE("metric %s: invalid name (expected [a-zA-Z_:][a-zA-Z0-9_:]*)", name);
	if (o.type != FIBRIL_METRIC_COUNTER && o.type != FIBRIL_METRIC_GAUGE &&
	    o.type != FIBRIL_METRIC_HISTOGRAM)
		REFUSE("metric %s: unknown type %d", name, (int)o.type);
	if (o.type == FIBRIL_METRIC_COUNTER && !ends_with(o.name, "_total"))
		REFUSE("metric %s: a counter's name must end in _total", name);
	if (o.type != FIBRIL_METRIC_COUNTER && ends_with(o.name, "_total"))
		REFUSE("metric %s: only counters end in _total", name);
	if (m && name_reserved(o.name))
		REFUSE("metric %s: the name is reserved for the host's own metrics", name);
	if (o.help && strchr(o.help, '\n'))
		REFUSE("metric %s: help must be one line", name);
	size_t nlabels = 0;
	for (; o.labels && o.labels[nlabels]; nlabels++) {
		const char *l = o.labels[nlabels];
		if (nlabels == FIBRIL_METRIC_MAX_LABELS)
			REFUSE("metric %s: more than %d labels", name, FIBRIL_METRIC_MAX_LABELS);
		if (!name_ok(l, false) || strncmp(l, "__", 2) == 0)
			REFUSE("metric %s: invalid label name '%s'", name, l);
		if (o.type == FIBRIL_METRIC_HISTOGRAM && strcmp(l, "le") == 0)
			REFUSE("metric %s: label 'le' is reserved for histogram buckets", name);
		for (size_t j = 0; j < nlabels; j++)
			if (strcmp(o.labels[j], l) == 0)
				REFUSE("metric %s: label '%s' given twice", name, l);
	}
	const double *bounds = o.buckets;
	size_t nbounds = o.nbuckets;
	if (o.type == FIBRIL_METRIC_HISTOGRAM) {
		if (!bounds) {
			bounds = g_default_buckets;
			nbounds = sizeof(g_default_buckets) / sizeof(g_default_buckets[0]);
		}
		if (nbounds == 0 || nbounds > FIBRIL_METRIC_MAX_BUCKETS)
			REFUSE("metric %s: %zu buckets (expected 1 to %d)", name, nbounds,
			       FIBRIL_METRIC_MAX_BUCKETS);
		for (size_t i = 0; i < nbounds; i++)
			if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
				REFUSE("metric %s: bucket %zu (%g) is not finite and greater than the one before",
				       name, i, bounds[i]);
	}
	struct fibril_metric *f = xcalloc(1, sizeof(*f));
	f->owner = m;
	f->type = o.type;
	f->name = xstrdup(o.name);
	f->help = xstrdup(o.help ? o.help : "");
	f->nlabels = nlabels;
	for (size_t i = 0; i < nlabels; i++)
		f->labels[i] = xstrdup(o.labels[i]);
	if (o.type == FIBRIL_METRIC_HISTOGRAM) {
		memcpy(f->bounds, bounds, nbounds * sizeof(double));
		f->nbounds = nbounds;
	}
	f->series_tail = &f->series;
	pthread_mutex_lock(&g_lock);
	struct fibril_metric *other = family_find(o.name);
	if (other) {
		pthread_mutex_unlock(&g_lock);
		fibril_error(m, "metric %s is already registered by %s", o.name,
			     other->owner ? fibril_module_name(other->owner) : "the agent");
		family_free(f);
		errno = EEXIST;
		return NULL;
	}
	*g_families_tail = f;
	g_families_tail = &f->next;
	pthread_mutex_unlock(&g_lock);
	return f;
}

static bool series_is(const struct fibril_metric *f, const struct fibril_series *s,
		      const char *const *values)
{
	for (size_t i = 0; i < f->nlabels; i++)
		if (strcmp(s->values[i], values[i]) != 0)
			return false;
	return true;
}

static void series_zero(const struct fibril_metric *f, struct fibril_series *s)
{
	atomic_store_explicit(&s->value, d2u(0), memory_order_relaxed);
	atomic_store_explicit(&s->count, 0, memory_order_relaxed);
	atomic_store_explicit(&s->sum, d2u(0), memory_order_relaxed);
	if (s->buckets)
		for (size_t b = 0; b <= f->nbounds; b++)
			atomic_store_explicit(&s->buckets[b], 0, memory_order_relaxed);
}

struct fibril_series *fibril_metric_series(struct fibril_metric *f, const char *const *values)
{
	if (!f) {
		errno = EINVAL;
		return NULL;
	}
	for (size_t i = 0; i < f->nlabels; i++) {
		if (!values || !values[i]) {
			errno = EINVAL;
			return NULL;
		}
	}
	pthread_mutex_lock(&g_lock);
	for (struct fibril_series *s = f->series; s; s = s->next) {
		if (series_is(f, s, values)) {
			pthread_mutex_unlock(&g_lock);
			return s;
		}
	}
	/* a deleted series of these values comes back from zero */
	for (struct fibril_series **pp = &f->retired; *pp; pp = &(*pp)->next) {
		struct fibril_series *s = *pp;
		if (!series_is(f, s, values))
			continue;
		*pp = s->next;
		series_zero(f, s);
		s->next = NULL;
		*f->series_tail = s;
		f->series_tail = &s->next;
		pthread_mutex_unlock(&g_lock);
		return s;
	}
	struct fibril_series *s = xcalloc(1, sizeof(*s));
	s->family = f;
	s->values = xcalloc(f->nlabels ? f->nlabels : 1, sizeof(char *));
	for (size_t i = 0; i < f->nlabels; i++)
		s->values[i] = xstrdup(values[i]);
	if (f->type == FIBRIL_METRIC_HISTOGRAM)
		s->buckets = xcalloc(f->nbounds + 1, sizeof(*s->buckets));
	*f->series_tail = s;
	f->series_tail = &s->next;
	pthread_mutex_unlock(&g_lock);
	return s;
}

struct fibril_series *fibril_metric_labels(struct fibril_metric *f, ...)
{
	if (!f) {
		errno = EINVAL;
		return NULL;
	}
	const char *values[FIBRIL_METRIC_MAX_LABELS + 1] = {0};
	va_list ap;
	va_start(ap, f);
	for (size_t i = 0; i < f->nlabels; i++)
		values[i] = va_arg(ap, const char *);
	va_end(ap);
	return fibril_metric_series(f, values);
}

/* ---- deletes (SDK 1.7) ---------------------------------------------------------------------------- */

/* Move every live series of f that match(f, s, arg) says to the retired
 * list; returns how many. Under g_lock. */
static int retire_where(struct fibril_metric *f,
			bool (*match)(const struct fibril_metric *, const struct fibril_series *, const void *),
			const void *arg)
{
	int n = 0;
	struct fibril_series **pp = &f->series;
	f->series_tail = &f->series;
	while (*pp) {
		struct fibril_series *s = *pp;
		if (match(f, s, arg)) {
			*pp = s->next;
			s->next = f->retired;
			f->retired = s;
			n++;
			continue;
		}
		f->series_tail = &s->next;
		pp = &s->next;
	}
	return n;
}

static bool match_values(const struct fibril_metric *f, const struct fibril_series *s, const void *arg)
{
	return series_is(f, s, arg);
}

struct label_match {
	size_t label;
	const char *value;
};

static bool match_label(const struct fibril_metric *f, const struct fibril_series *s, const void *arg)
{
	(void)f;
	const struct label_match *lm = arg;
	return strcmp(s->values[lm->label], lm->value) == 0;
}

int fibril_metric_delete(struct fibril_metric *f, const char *const *values)
{
	if (!f)
		return -EINVAL;
	for (size_t i = 0; i < f->nlabels; i++)
		if (!values || !values[i])
			return -EINVAL;
	pthread_mutex_lock(&g_lock);
	int n = retire_where(f, match_values, values);
	pthread_mutex_unlock(&g_lock);
	return n;
}

int fibril_metric_delete_matching(struct fibril_metric *f, const char *label, const char *value)
{
	if (!f || !label || !value)
		return -EINVAL;
	struct label_match lm = {.label = f->nlabels, .value = value};
	for (size_t i = 0; i < f->nlabels; i++)
		if (strcmp(f->labels[i], label) == 0)
			lm.label = i;
	if (lm.label == f->nlabels)
		return -ENOENT;
	pthread_mutex_lock(&g_lock);
	int n = retire_where(f, match_label, &lm);
	pthread_mutex_unlock(&g_lock);
	return n;
}

/* ---- updates ---------------------------------------------------------------------------------- */

void fibril_series_add(struct fibril_series *s, double v)
{
	if (!s || s->family->type == FIBRIL_METRIC_HISTOGRAM)
		return;
	if (s->family->type == FIBRIL_METRIC_COUNTER && !(v >= 0))
		return;
	atomic_add_double(&s->value, v);
}

void fibril_series_inc(struct fibril_series *s)
{
	fibril_series_add(s, 1);
}

void fibril_series_set(struct fibril_series *s, double v)
{
	if (!s || s->family->type == FIBRIL_METRIC_HISTOGRAM)
		return;
	atomic_store_explicit(&s->value, d2u(v), memory_order_relaxed);
}

void fibril_series_observe(struct fibril_series *s, double v)
{
	if (!s || s->family->type != FIBRIL_METRIC_HISTOGRAM || isnan(v))
		return;
	const struct fibril_metric *f = s->family;
	size_t lo = 0, hi = f->nbounds; /* the first bound >= v, or nbounds (+Inf) */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (f->bounds[mid] >= v)
			hi = mid;
		else
			lo = mid + 1;
	}
	atomic_fetch_add_explicit(&s->buckets[lo], 1, memory_order_relaxed);
	atomic_add_double(&s->sum, v);
	atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
}

double fibril_series_value(const struct fibril_series *s)
{
	if (!s)
		return 0;
	if (s->family->type == FIBRIL_METRIC_HISTOGRAM)
		return (double)atomic_load_explicit(&s->count, memory_order_relaxed);
	return u2d(atomic_load_explicit(&s->value, memory_order_relaxed));
}

int fibril_metrics_on_scrape(struct fibril_module *m, fibril_metrics_scrape_fn cb, void *ud)
{
	if (!cb)
		return -EINVAL;
	struct scrape_cb *c = xcalloc(1, sizeof(*c));
	c->owner = m;
	c->cb = cb;
	c->ud = ud;
	pthread_mutex_lock(&g_lock);
	c->next = g_scrapes;
	g_scrapes = c;
	pthread_mutex_unlock(&g_lock);
	return 0;
}

/* ---- exposition --------------------------------------------------------------------------------- */

/* Shortest text that reads back as the same double; +Inf, -Inf, NaN. */
static void fmt_double(char *buf, size_t len, double v)
{
	if (isnan(v))
		snprintf(buf, len, "NaN");
	else if (isinf(v))
		snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
	else {
		snprintf(buf, len, "%.15g", v);
		if (strtod(buf, NULL) != v)
			snprintf(buf, len, "%.17g", v);
	}
}

static void put_escaped(FILE *out, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", out);
		else if (*s == '\n')
			fputs("\\n", out);
		else if (quote && *s == '"')
			fputs("\\\"", out);
		else
			fputc(*s, out);
	}
}

/* name{labels[,le="x"]} value */
static void put_sample(FILE *out, const struct fibril_metric *f, const char *suffix,
		       const struct fibril_series *s, const char *le, double v)
{
	fputs(f->name, out);
	fputs(suffix, out);
	if (f->nlabels || le) {
		fputc('{', out);
		for (size_t i = 0; i < f->nlabels; i++) {
			fprintf(out, "%s%s=\"", i ? "," : "", f->labels[i]);
			put_escaped(out, s->values[i], true);
			fputc('"', out);
		}
		if (le)
			fprintf(out, "%sle=\"%s\"", f->nlabels ? "," : "", le);
		fputc('}', out);
	}
	char num[64];
	fmt_double(num, sizeof(num), v);
	fprintf(out, " %s\n", num);
}

static const char *type_name(enum fibril_metric_type t)
{
	return t == FIBRIL_METRIC_COUNTER ? "counter" : t == FIBRIL_METRIC_GAUGE ? "gauge" : "histogram";
}

static void write_family(FILE *out, const struct fibril_metric *f)
{
	fprintf(out, "# HELP %s ", f->name);
	put_escaped(out, f->help, false);
	fprintf(out, "\n# TYPE %s %s\n", f->name, type_name(f->type));
	for (const struct fibril_series *s = f->series; s; s = s->next) {
		if (f->type != FIBRIL_METRIC_HISTOGRAM) {
			put_sample(out, f, "", s, NULL, fibril_series_value(s));
			continue;
		}
		/* read the buckets first: the count written is their sum, so
		 * _count equals the +Inf bucket even while observations land */
		uint64_t cum = 0;
		char le[64];
		for (size_t b = 0; b <= f->nbounds; b++) {
			cum += atomic_load_explicit(&s->buckets[b], memory_order_relaxed);
			if (b < f->nbounds)
				fmt_double(le, sizeof(le), f->bounds[b]);
			else
				snprintf(le, sizeof(le), "+Inf");
			put_sample(out, f, "_bucket", s, le, (double)cum);
		}
		put_sample(out, f, "_sum", s, NULL, u2d(atomic_load_explicit(&s->sum, memory_order_relaxed)));
		put_sample(out, f, "_count", s, NULL, (double)cum);
	}
}

void metrics_write(FILE *out, metrics_scrape_caller call)
{
	/* the scrape callbacks may look up series (which locks): call them
	 * from a copy of the list, on the loop thread */
	pthread_mutex_lock(&g_lock);
	size_t n = 0;
	for (struct scrape_cb *c = g_scrapes; c; c = c->next)
		n++;
	struct scrape_cb *copy = n ? xcalloc(n, sizeof(*copy)) : NULL;
	n = 0;
	for (struct scrape_cb *c = g_scrapes; c; c = c->next)
		copy[n++] = *c;
	pthread_mutex_unlock(&g_lock);
	for (size_t i = n; i-- > 0;) { /* in registration order */
		if (call)
			call(copy[i].owner, copy[i].cb, copy[i].ud);
		else
			copy[i].cb(copy[i].owner, copy[i].ud);
	}
	free(copy);
	pthread_mutex_lock(&g_lock);
	for (const struct fibril_metric *f = g_families; f; f = f->next)
		write_family(out, f);
	pthread_mutex_unlock(&g_lock);
}

void metrics_release_owner(struct fibril_module *owner)
{
	pthread_mutex_lock(&g_lock);
	struct fibril_metric **pp = &g_families;
	g_families_tail = &g_families;
	while (*pp) {
		struct fibril_metric *f = *pp;
		if (f->owner == owner) {
			*pp = f->next;
			family_free(f);
			continue;
		}
		g_families_tail = &f->next;
		pp = &f->next;
	}
	for (struct scrape_cb **cp = &g_scrapes; *cp;) {
		struct scrape_cb *c = *cp;
		if (c->owner == owner) {
			*cp = c->next;
			free(c);
			continue;
		}
		cp = &c->next;
	}
	pthread_mutex_unlock(&g_lock);
}
