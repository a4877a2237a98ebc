/* sdk_metrics.c - tessera_serve_metrics: a trainer's own /metrics (docs/observability.md, "A
 * trainer's /metrics"), for programs that are not tessera-worker (tessera.torch's
 * attach(metrics_port=)). The series are labelled job_id and rank and named as
 * tessera-worker's, so the dashboard's worker panels show either: steps and what
 * tessera_stats counts, read at each scrape, and the figures of the last progress report
 * (tessera_report_progress) that the trainer gave, none before (a rank that reports no loss
 * exports none, never a 0 nobody measured).
 * One client per process is served: the state below is the process's. Its mutex guards the
 * client pointer against tessera_close: a scrape reads the client only while it holds it. */
#include "client/sdk_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "metrics/http.h"
#include "metrics/metrics.h"

static struct {
    pthread_mutex_t mu;
    tessera *t;                     /* the client served; NULL: none */
    struct ts_metrics_http *http;
    bool collecting;                /* the collector is registered (once per process) */
    char job[TS_JOB_ID_MAX + 1], rank[16];
    struct tessera_progress last;   /* NaN where the trainer gave no value */
} m = { .mu = PTHREAD_MUTEX_INITIALIZER };

static struct ts_metric *series(const char *name, const char *help, enum ts_metric_type type)
{
    return ts_metric_child(ts_metrics_family(name, help, type, "job_id,rank", NULL, 0),
                           (const char *[]){ m.job, m.rank });
}

/* Before each scrape: the served client's figures, with m.mu held against its close. */
static void collect(void *arg)
{
    struct tessera_stats st;
    const struct {
        const char *name, *help;
        double v;
    } *g, gauges[] = {
        { "tessera_worker_loss", "training loss of the last progress report", m.last.loss },
        { "tessera_worker_train_accuracy", "accuracy of the last progress report (0..1)",
          m.last.accuracy },
        { "tessera_worker_samples_per_second", "samples of the global batch per second, last "
          "progress report", m.last.samples_per_s },
    };

    (void)arg;
    pthread_mutex_lock(&m.mu);
    if (m.t) {
        tessera_stats(m.t, &st);
        ts_counter_set(series("tessera_worker_steps_total", "training steps done",
                              TS_METRIC_COUNTER), st.steps);
        ts_counter_set(series("tessera_worker_steps_skipped_total", "steps a shard skipped "
                              "for a non-finite sum", TS_METRIC_COUNTER), st.steps_skipped);
        ts_counter_set(series("tessera_worker_push_bytes_total", "gradient bytes pushed, as "
                              "sent (after compression)", TS_METRIC_COUNTER), st.bytes_pushed);
        ts_counter_set(series("tessera_worker_push_raw_bytes_total", "gradient bytes pushed, "
                              "before compression", TS_METRIC_COUNTER), st.bytes_raw);
        ts_counter_set(series("tessera_worker_pull_bytes_total", "parameter bytes pulled, as "
                              "received", TS_METRIC_COUNTER), st.bytes_pulled);
        ts_counter_set(series("tessera_worker_failovers_total", "steps sent again to a new "
                              "shard map after a shard died", TS_METRIC_COUNTER),
                       st.failovers);
        ts_gauge_set(series("tessera_worker_staleness_steps", "ssp, asp: steps the slowest "
                            "worker was behind at the last pull", TS_METRIC_GAUGE),
                     (double)st.staleness_last);
        ts_gauge_set(series("tessera_worker_loss_scale", "the fp16 loss scale (1 without loss "
                            "scaling)", TS_METRIC_GAUGE), st.loss_scale);
        for (g = gauges; g < gauges + sizeof(gauges) / sizeof(gauges[0]); g++)
            if (!isnan(g->v))
                ts_gauge_set(series(g->name, g->help, TS_METRIC_GAUGE), g->v);
    }
    pthread_mutex_unlock(&m.mu);
}

int tessera_serve_metrics(tessera *t, const char *host, int port, int *bound,
                          struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct ts_metrics_http *h = NULL;

    if (port < 0 || port > 65535) {
        ts_err_set(&err, TS_EINVAL, "port: %d is not 0..65535 (0: a free one)", port);
        return sdk_fail(e, &err);
    }
    pthread_mutex_lock(&m.mu);
    if (m.t) {
        pthread_mutex_unlock(&m.mu);
        ts_err_set(&err, TS_EEXIST, "metrics: this process serves another client's already "
                   "(one per process; close it first)");
        return sdk_fail(e, &err);
    }
    pthread_mutex_unlock(&m.mu);
    if (ts_metrics_http_start(host && host[0] ? host : "127.0.0.1", (uint16_t)port, &h, &err))
        return sdk_fail(e, &err);
    pthread_mutex_lock(&m.mu);
    m.t = t;
    m.http = h;
    snprintf(m.job, sizeof(m.job), "%s", t->job.id);
    snprintf(m.rank, sizeof(m.rank), "%u", t->rank);
    m.last = (struct tessera_progress){ NAN, NAN, NAN };
    if (!m.collecting)
        ts_metrics_collector(collect, NULL);
    m.collecting = true;
    pthread_mutex_unlock(&m.mu);
    if (bound)
        *bound = ts_metrics_http_port(h);
    return sdk_ok(e);
}

/* Keeps a progress report for the scrapes, when t is the served client. */
static void progress(tessera *t, const struct tessera_progress *p)
{
    pthread_mutex_lock(&m.mu);
    if (m.t == t) {
        m.last.loss = p->loss;
        m.last.samples_per_s = p->samples_per_s;
        if (!isnan(p->accuracy))   /* the last accuracy given stays */
            m.last.accuracy = p->accuracy;
    }
    pthread_mutex_unlock(&m.mu);
}

void sdk_metrics_close(tessera *t)
{
    struct ts_metrics_http *h = NULL;

    pthread_mutex_lock(&m.mu);
    if (m.t == t) {
        h = m.http;
        m.t = NULL;
        m.http = NULL;
        ts_metrics_forget("job_id", m.job);   /* its series go with it */
    }
    pthread_mutex_unlock(&m.mu);
    ts_metrics_http_stop(h);   /* outside the lock: a scrape in flight may wait on it */
}

void tessera_report_progress(tessera *t, const struct tessera_progress *p)
{
    if (!p)
        return;
    if (t->ms)
        ts_membership_set_progress(t->ms, p->loss, p->accuracy, p->samples_per_s);
    progress(t, p);
}
