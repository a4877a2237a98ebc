/* metrics.c - see metrics.h. */
#include "metrics/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define MAX_COLLECTORS 16

const double ts_metric_latency_buckets[] = { 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                             1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                             10 };
const size_t ts_metric_latency_nbuckets =
    sizeof(ts_metric_latency_buckets) / sizeof(ts_metric_latency_buckets[0]);

struct ts_metric {
    struct ts_metric *next;
    const struct ts_metric_family *f;
    atomic_uint refs;           /* 1 while in its family's list, plus one per hold */
    char *values[TS_METRIC_MAX_LABELS];
    _Atomic uint64_t v;         /* counter; gauge: a double's bits; histogram: the count */
    _Atomic uint64_t sum;       /* histogram: the sum, a double's bits */
    _Atomic uint64_t *in;       /* histogram: observations per bucket, +Inf last */
};

struct ts_metric_family {
    struct ts_metric_family *next;
    char *name, *help;
    enum ts_metric_type type;
    size_t nlabels;
    char *labels[TS_METRIC_MAX_LABELS];
    double bounds[TS_METRIC_MAX_BUCKETS];
    size_t nbounds;
    pthread_mutex_t mu;          /* children */
    struct ts_metric *children, **tail;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ts_metric_family *families, **families_tail = &families;
static struct {
    void (*fn)(void *ctx);
    void *ctx;
} collectors[MAX_COLLECTORS];
static size_t ncollectors;

static const char *type_name(enum ts_metric_type t)
{
    return t == TS_METRIC_COUNTER ? "counter" : t == TS_METRIC_GAUGE ? "gauge" : "histogram";
}

static bool valid_name(const char *s, bool colon)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || (colon && *s == ':')))
            return false;
    return true;
}

static uint64_t dbits(double d)
{
    uint64_t u;

    memcpy(&u, &d, sizeof(u));
    return u;
}

static double bitsd(uint64_t u)
{
    double d;

    memcpy(&d, &u, sizeof(d));
    return d;
}

/* Splits "a,b" into f->labels; false if a name is bad or there are too many. */
static bool parse_labels(struct ts_metric_family *f, const char *labels)
{
    char buf[256], *save = NULL;

    if (!labels || !*labels)
        return true;
    snprintf(buf, sizeof(buf), "%s", labels);
    for (char *l = strtok_r(buf, ",", &save); l; l = strtok_r(NULL, ",", &save)) {
        if (f->nlabels == TS_METRIC_MAX_LABELS || !valid_name(l, false) || !strcmp(l, "le") ||
            !(f->labels[f->nlabels] = strdup(l)))
            return false;
        f->nlabels++;
    }
    return true;
}

static bool same_shape(const struct ts_metric_family *f, enum ts_metric_type type,
                       const char *labels)
{
    char want[256] = "";

    for (size_t i = 0; i < f->nlabels; i++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s", i ? "," : "",
                 f->labels[i]);
    return f->type == type && !strcmp(want, labels ? labels : "");
}

static void family_free(struct ts_metric_family *f)
{
    free(f->name);
    free(f->help);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f);
}

struct ts_metric_family *ts_metrics_family(const char *name, const char *help,
                                           enum ts_metric_type type, const char *labels,
                                           const double *buckets, size_t nbuckets)
{
    struct ts_metric_family *f;

    pthread_mutex_lock(&reg_mu);
    for (f = families; f && strcmp(f->name, name ? name : ""); f = f->next)
        ;
    if (f) {
        pthread_mutex_unlock(&reg_mu);
        if (same_shape(f, type, labels))
            return f;
        ts_log(TS_ERROR, "metrics", "metric %s: registered again with another type or labels",
               name);
        return NULL;
    }
    if (!buckets) {
        buckets = ts_metric_latency_buckets;
        nbuckets = ts_metric_latency_nbuckets;
    }
    f = calloc(1, sizeof(*f));
    if (!f || !valid_name(name, true) || nbuckets > TS_METRIC_MAX_BUCKETS ||
        !(f->name = strdup(name)) || !(f->help = strdup(help ? help : "")) ||
        !parse_labels(f, labels)) {
        pthread_mutex_unlock(&reg_mu);
        ts_log(TS_ERROR, "metrics", "metric %s: bad name, labels or buckets, or out of memory",
               name ? name : "(null)");
        if (f)
            family_free(f);
        return NULL;
    }
    f->type = type;
    memcpy(f->bounds, buckets, nbuckets * sizeof(double));
    f->nbounds = type == TS_METRIC_HISTOGRAM ? nbuckets : 0;
    pthread_mutex_init(&f->mu, NULL);
    f->tail = &f->children;
    *families_tail = f;
    families_tail = &f->next;
    pthread_mutex_unlock(&reg_mu);
    if (!f->nlabels)   /* shown at 0 from the start */
        (void)ts_metric_child(f, NULL);
    return f;
}

static bool same_values(const struct ts_metric *m, const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(m->values[i], values[i] ? values[i] : ""))
            return false;
    return true;
}

static void child_free(struct ts_metric *m)
{
    for (size_t i = 0; i < m->f->nlabels; i++)
        free(m->values[i]);
    free(m->in);
    free(m);
}

/* The child of values, made if missing; held (one more reference) with hold. */
static struct ts_metric *find(struct ts_metric_family *f, const char *const *values, bool hold)
{
    struct ts_metric *m;
    bool ok = true;

    if (!f)
        return NULL;
    pthread_mutex_lock(&f->mu);
    for (m = f->children; m && !same_values(m, values, f->nlabels); m = m->next)
        ;
    if (!m && (m = calloc(1, sizeof(*m)))) {
        m->f = f;
        atomic_init(&m->refs, 1);
        for (size_t i = 0; ok && i < f->nlabels; i++)
            ok = (m->values[i] = strdup(values[i] ? values[i] : "")) != NULL;
        if (ok && f->type == TS_METRIC_HISTOGRAM)
            ok = (m->in = calloc(f->nbounds + 1, sizeof(*m->in))) != NULL;
        if (ok) {
            *f->tail = m;
            f->tail = &m->next;
        } else {
            child_free(m);
            m = NULL;
        }
    }
    if (m && hold)   /* under f->mu: a forget cannot free it in between */
        atomic_fetch_add(&m->refs, 1);
    pthread_mutex_unlock(&f->mu);
    return m;
}

struct ts_metric *ts_metric_child(struct ts_metric_family *f, const char *const *values)
{
    return find(f, values, false);
}

struct ts_metric *ts_metric_hold(struct ts_metric_family *f, const char *const *values)
{
    return find(f, values, true);
}

void ts_metric_put(struct ts_metric *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1)   /* forgotten, and this was the last hold */
        child_free(m);
}

/* Unlinks f's children whose label `at` is value onto *gone (linked by next). */
static size_t unlink_value(struct ts_metric_family *f, size_t at, const char *value,
                           struct ts_metric **gone)
{
    size_t n = 0;

    pthread_mutex_lock(&f->mu);
    for (struct ts_metric **pp = &f->children; *pp;) {
        struct ts_metric *m = *pp;
        if (strcmp(m->values[at], value)) {
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        if (f->tail == &m->next)
            f->tail = pp;
        m->next = *gone;
        *gone = m;
        n++;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

size_t ts_metrics_forget(const char *label, const char *value)
{
    struct ts_metric *gone = NULL, *next;
    size_t n = 0;

    if (!label || !value)
        return 0;
    pthread_mutex_lock(&reg_mu);
    for (struct ts_metric_family *f = families; f; f = f->next)
        for (size_t i = 0; i < f->nlabels; i++)
            if (!strcmp(f->labels[i], label))
                n += unlink_value(f, i, value, &gone);
    pthread_mutex_unlock(&reg_mu);
    /* Out of every list, so no rendering or lookup reaches them: drop the registry's
     * reference; a held one lives on until its holder's put. */
    for (; gone; gone = next) {
        next = gone->next;
        ts_metric_put(gone);
    }
    return n;
}

struct ts_metric *ts_metric_one(struct ts_metric_family *f, const char *value)
{
    const char *v[1] = { value };

    return ts_metric_child(f, v);
}

void ts_counter_add(struct ts_metric *m, uint64_t n)
{
    if (m)
        atomic_fetch_add_explicit(&m->v, n, memory_order_relaxed);
}

void ts_counter_set(struct ts_metric *m, uint64_t v)
{
    uint64_t old;

    if (!m)
        return;
    old = atomic_load_explicit(&m->v, memory_order_relaxed);
    while (v > old && !atomic_compare_exchange_weak_explicit(&m->v, &old, v, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

void ts_gauge_set(struct ts_metric *m, double v)
{
    if (m)
        atomic_store_explicit(&m->v, dbits(v), memory_order_relaxed);
}

/* *a += v for a double held as bits. */
static void add_double(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);

    while (!atomic_compare_exchange_weak_explicit(a, &old, dbits(bitsd(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void ts_gauge_add(struct ts_metric *m, double v)
{
    if (m)
        add_double(&m->v, v);
}

void ts_histogram_observe(struct ts_metric *m, double v)
{
    size_t b = 0;

    if (!m || !m->in)
        return;
    while (b < m->f->nbounds && v > m->f->bounds[b])
        b++;
    atomic_fetch_add_explicit(&m->in[b], 1, memory_order_relaxed);
    add_double(&m->sum, v);
    atomic_fetch_add_explicit(&m->v, 1, memory_order_relaxed);
}

uint64_t ts_metric_count(const struct ts_metric *m)
{
    return m ? atomic_load_explicit(&m->v, memory_order_relaxed) : 0;
}

void ts_metrics_collector(void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&reg_mu);
    if (ncollectors < MAX_COLLECTORS) {
        collectors[ncollectors].fn = fn;
        collectors[ncollectors++].ctx = ctx;
    } else {
        ts_log(TS_ERROR, "metrics", "more than %d collectors: one ignored", MAX_COLLECTORS);
    }
    pthread_mutex_unlock(&reg_mu);
}

/* ---- the text format ---- */

static void put_escaped(FILE *o, const char *s, bool quotes)
{
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\\\", o);
        else if (*s == '\n')
            fputs("\\n", o);
        else if (quotes && *s == '"')
            fputs("\\\"", o);
        else
            fputc(*s, o);
    }
}

static void put_value(FILE *o, double v)
{
    if (isnan(v))
        fputs("NaN", o);
    else if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", o);
    else
        fprintf(o, "%.17g", v);
}

/* name{labels[,le="bound"]} with suffix, no value. */
static void put_series(FILE *o, const struct ts_metric *m, const char *suffix, const char *le)
{
    const struct ts_metric_family *f = m->f;

    fprintf(o, "%s%s", f->name, suffix);
    if (!f->nlabels && !le)
        return;
    fputc('{', o);
    for (size_t i = 0; i < f->nlabels; i++) {
        fprintf(o, "%s%s=\"", i ? "," : "", f->labels[i]);
        put_escaped(o, m->values[i], true);
        fputc('"', o);
    }
    if (le)
        fprintf(o, "%sle=\"%s\"", f->nlabels ? "," : "", le);
    fputc('}', o);
}

static void put_child(FILE *o, const struct ts_metric *m)
{
    const struct ts_metric_family *f = m->f;
    uint64_t v = atomic_load_explicit(&m->v, memory_order_relaxed), cum = 0;
    char le[32];

    if (f->type == TS_METRIC_COUNTER) {
        put_series(o, m, "", NULL);
        fprintf(o, " %llu\n", (unsigned long long)v);
        return;
    }
    if (f->type == TS_METRIC_GAUGE) {
        put_series(o, m, "", NULL);
        fputc(' ', o);
        put_value(o, bitsd(v));
        fputc('\n', o);
        return;
    }
    for (size_t b = 0; b <= f->nbounds; b++) {
        cum += atomic_load_explicit(&m->in[b], memory_order_relaxed);
        if (b < f->nbounds)
            snprintf(le, sizeof(le), "%.6g", f->bounds[b]);
        put_series(o, m, "_bucket", b < f->nbounds ? le : "+Inf");
        fprintf(o, " %llu\n", (unsigned long long)cum);
    }
    put_series(o, m, "_sum", NULL);
    fputc(' ', o);
    put_value(o, bitsd(atomic_load_explicit(&m->sum, memory_order_relaxed)));
    fputc('\n', o);
    put_series(o, m, "_count", NULL);
    /* The buckets were read one by one: count as their total keeps the series consistent. */
    fprintf(o, " %llu\n", (unsigned long long)cum);
}

char *ts_metrics_render(size_t *len)
{
    char *text = NULL;
    size_t n = 0, nc;
    FILE *o;

    pthread_mutex_lock(&reg_mu);
    nc = ncollectors;
    pthread_mutex_unlock(&reg_mu);
    for (size_t i = 0; i < nc; i++)   /* registered once, never removed */
        collectors[i].fn(collectors[i].ctx);
    if (!(o = open_memstream(&text, &n)))
        return NULL;
    pthread_mutex_lock(&reg_mu);
    for (struct ts_metric_family *f = families; f; f = f->next) {
        fprintf(o, "# HELP %s ", f->name);
        put_escaped(o, f->help, false);
        fprintf(o, "\n# TYPE %s %s\n", f->name, type_name(f->type));
        pthread_mutex_lock(&f->mu);
        for (const struct ts_metric *m = f->children; m; m = m->next)
            put_child(o, m);
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_unlock(&reg_mu);
    if (fclose(o)) {
        free(text);
        return NULL;
    }
    if (len)
        *len = n;
    return text;
}
