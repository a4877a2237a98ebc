/* metrics.h - counters, gauges and histograms, exposed in Prometheus' text format
 * (docs/observability.md).
 *
 * Why a module: every service (master, shard, verify, worker) reports the same way, and an
 * update on the data path must cost nothing measurable: one relaxed atomic add, no lock and
 * no allocation. So a metric is a family (name, help, type, label names, histogram buckets)
 * with children, one per tuple of label values; a child is found or made once, under the
 * family's lock, and its caller keeps the pointer for every update after.
 * Families live in one process-wide registry; ts_metrics_family returns the one already
 * registered under a name (same type and labels), so modules may each ask for it. Collectors
 * (ts_metrics_collector) run before each rendering, to set gauges read from elsewhere.
 * Series come and go with what they label: ts_metrics_forget removes the children of a label
 * value (a shard forgets a job's when it releases the job), so a process that serves
 * thousands of jobs exports the series of those it holds, not of every one it ever saw.
 * Ownership: families live until the process exits (never freed). The registry owns the
 * children; one from ts_metric_child is borrowed, valid until ts_metrics_forget removes it
 * (never, for a label value nobody forgets). A caller that keeps a child while its value may
 * be forgotten holds it (ts_metric_hold): a held child is freed at its last ts_metric_put,
 * not before, so an update racing with the forget lands in memory still valid (and counts
 * nowhere: the series is gone). ts_metrics_render's text is the caller's (free()).
 * Threads: every function is thread-safe. Naming follows Prometheus: `tessera_` prefix, base
 * units (`_seconds`, `_bytes`), counters ending in `_total`. */
#ifndef TS_METRICS_METRICS_H
#define TS_METRICS_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum ts_metric_type { TS_METRIC_COUNTER, TS_METRIC_GAUGE, TS_METRIC_HISTOGRAM };

#define TS_METRIC_MAX_LABELS 4
#define TS_METRIC_MAX_BUCKETS 24

struct ts_metric_family;
struct ts_metric;

/* The family `name`, registered on first call. labels: comma-separated label names ("job,rank")
 * or NULL; buckets: a histogram's upper bounds, ascending (NULL: ts_metric_latency_buckets).
 * Returns NULL (and logs why) for an invalid name or labels, or a name registered with
 * another type or labels: a bug, which the metric's updates then ignore. */
struct ts_metric_family *ts_metrics_family(const char *name, const char *help,
                                           enum ts_metric_type type, const char *labels,
                                           const double *buckets, size_t nbuckets);
/* The child with these label values (as many as the family has labels), made on first call.
 * NULL family or out of memory: NULL, which every update below accepts and ignores. */
struct ts_metric *ts_metric_child(struct ts_metric_family *f, const char *const *values);
/* ts_metric_child for a family of no labels, or of one (value). */
struct ts_metric *ts_metric_one(struct ts_metric_family *f, const char *value);
/* ts_metric_child, held: valid until ts_metric_put, even if its label value is forgotten
 * meanwhile. NULL as ts_metric_child. */
struct ts_metric *ts_metric_hold(struct ts_metric_family *f, const char *const *values);
void ts_metric_put(struct ts_metric *m);   /* NULL: nothing */
/* Removes, from every family with a label named `label`, the children whose value of it is
 * `value`: they are rendered no more, and a later ts_metric_child of that value starts a
 * new one from zero. A child nobody holds is freed now, a held one at its last put; a
 * borrowed pointer to one (ts_metric_child) must not be used after. Returns how many went. */
size_t ts_metrics_forget(const char *label, const char *value);

void ts_counter_add(struct ts_metric *m, uint64_t n);
/* A counter kept elsewhere (a collector mirrors it): its value now, never lower than before. */
void ts_counter_set(struct ts_metric *m, uint64_t v);
void ts_gauge_set(struct ts_metric *m, double v);
void ts_gauge_add(struct ts_metric *m, double v);
void ts_histogram_observe(struct ts_metric *m, double v);
/* The counter's value, or the histogram's count (tests). */
uint64_t ts_metric_count(const struct ts_metric *m);

/* Bounds for latencies in seconds: 50 us to 10 s, about three per decade. */
extern const double ts_metric_latency_buckets[];
extern const size_t ts_metric_latency_nbuckets;

/* fn(ctx) runs before each rendering, in registration order (at most 16 collectors). */
void ts_metrics_collector(void (*fn)(void *ctx), void *ctx);

/* The registry in Prometheus' text exposition format 0.0.4, NUL-terminated; *len its length.
 * NULL when out of memory. */
char *ts_metrics_render(size_t *len);

#endif
