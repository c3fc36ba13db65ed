/* fibril/metrics.h - Prometheus metrics owned by a module (ABI 1.5;
 * deleting series: ABI 1.7).
 *
 * A module registers metric families (counter, gauge, histogram with fixed
 * buckets), each with a fixed list of label names, usually in init. Each
 * combination of label values is a series, made on first use and stable
 * until the module is released: look it up once and keep the pointer, then
 * updating it is one atomic operation (no lock, no allocation), from the
 * loop or from any worker thread. The host serves every family of every
 * module, and its own, at GET /metrics (unix socket and the TCP listener)
 * in the Prometheus text exposition format (version 0.0.4). Everything a
 * module registered is released with it (after its fini).
 *
 * Names: a family name matches [a-zA-Z_:][a-zA-Z0-9_:]* and is unique in the
 * agent (by convention fibril_<module>_<what>_<unit>); a counter's name ends
 * in _total. Label names match [a-zA-Z_][a-zA-Z0-9_]*, do not start with
 * "__", and "le" is reserved for histograms. Label values are any UTF-8
 * text (escaped on output). Keep the label values bounded (reasons,
 * directions, pools), never per packet or per request.
 *
 * A series whose subject is gone (a node that left, a pool removed) is
 * taken out of the exposition with fibril_metric_delete (SDK 1.7).
 *
 * Figures the module already keeps elsewhere (a BPF map, a struct) can be
 * mirrored at scrape time: fibril_metrics_on_scrape's callback runs on the
 * loop right before each exposition and may fibril_series_set anything. */
#ifndef FIBRIL_METRICS_H
#define FIBRIL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fibril_module;
struct fibril_metric; /* a family: name, help, type, label names */
struct fibril_series; /* one series of a family (one set of label values) */

enum fibril_metric_type {
	FIBRIL_METRIC_COUNTER = 1,
	FIBRIL_METRIC_GAUGE = 2,
	FIBRIL_METRIC_HISTOGRAM = 3,
};

#define FIBRIL_METRIC_MAX_LABELS 8
#define FIBRIL_METRIC_MAX_BUCKETS 32

struct fibril_metric_opts {
	uint32_t sz; /* sizeof(struct fibril_metric_opts): fields may be appended */
	enum fibril_metric_type type;
	const char *name;
	const char *help;           /* one line */
	const char *const *labels;  /* NULL-terminated label names; NULL: none */
	const double *buckets;      /* histograms: upper bounds, strictly increasing
				     * and finite (+Inf is implied); NULL: the
				     * default latency buckets (5 ms .. 10 s) */
	size_t nbuckets;
};

/* Register a family owned by m (NULL and errno set on bad input: EINVAL
 * with a one-line reason logged, EEXIST for a name already taken). */
struct fibril_metric *fibril_metric_register(struct fibril_module *m,
					     const struct fibril_metric_opts *opts);

/* The series for these label values (one per label name, in order; NULL
 * when the family has no labels), made on first use. Thread-safe. NULL and
 * errno EINVAL when a value is missing or mt is NULL. */
struct fibril_series *fibril_metric_series(struct fibril_metric *mt, const char *const *values);
/* The same with the values as arguments (exactly as many as label names). */
struct fibril_series *fibril_metric_labels(struct fibril_metric *mt, ...);

/* Deleting series (SDK 1.7; check FIBRIL_ABI_MINOR >= 7 at build time and
 * run on a host of 1.7 or later, which the loader ensures for a module
 * built against 1.7). Thread-safe, also against a scrape in progress: the
 * exposition shows a series whole or not at all.
 *
 * fibril_metric_delete takes the series of these label values (as for
 * fibril_metric_series) out of the exposition: 1 when it was there, 0 when
 * it was not, -EINVAL when mt or a value is missing.
 * fibril_metric_delete_matching takes out every series of mt whose label
 * `label` equals `value` (a node's series of every target, say): how many,
 * -EINVAL when an argument is NULL, -ENOENT when mt has no such label.
 *
 * The memory of a deleted series is kept until the module is released, so
 * a pointer another thread still holds stays valid: its updates are lost
 * (nobody sees them). Using the same label values again brings the series
 * back from zero (the same pointer), so the memory kept is bounded by the
 * label value sets ever used, as without deleting; drop your own pointers
 * to a deleted series, or they update it once it is back. */
int fibril_metric_delete(struct fibril_metric *mt, const char *const *values);
int fibril_metric_delete_matching(struct fibril_metric *mt, const char *label, const char *value);

/* Updates: lock-free, from any thread. A NULL series is ignored. */
void fibril_series_inc(struct fibril_series *s);             /* counter, gauge: +1 */
void fibril_series_add(struct fibril_series *s, double v);   /* counter: v >= 0 (negative
							       * is ignored); gauge: any */
void fibril_series_set(struct fibril_series *s, double v);   /* gauge; a counter only to
							       * mirror a count kept elsewhere */
void fibril_series_observe(struct fibril_series *s, double v); /* histogram */
/* The current value (counter, gauge) or the count of observations. */
double fibril_series_value(const struct fibril_series *s);

/* Called on the loop before each exposition of /metrics, to mirror figures
 * the module keeps elsewhere. Several may be registered; released with m. */
typedef void (*fibril_metrics_scrape_fn)(struct fibril_module *m, void *ud);
int fibril_metrics_on_scrape(struct fibril_module *m, fibril_metrics_scrape_fn cb, void *ud);

#ifdef __cplusplus
}
#endif
#endif
