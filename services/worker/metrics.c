/* metrics.c - a worker's figures for Prometheus (docs/observability.md), labelled with its job and
 * rank: steps and their time (the whole step, and the part spent in the SDK's push and pull), what
 * tessera_stats counts (failovers among them), and rank 0's loss and accuracy at each evaluation.
 * Only rank 0 evaluates, so only rank 0 has those three families, and their series appear
 * with the first evaluation: a gauge at 0 before it, or on another rank, would be a loss
 * nobody measured. Served with --metrics-port (tessera train --metrics-port BASE gives rank r
 * BASE + r). */
#include "worker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "metrics/metrics.h"
#include "rpc/serve.h"

static struct {
    struct ts_metric *steps, *step_s, *exchange_s, *skipped, *pushed, *raw, *stale, *scale;
    struct ts_metric *failovers;
    /* Rank 0: the families from the start; their series made by the collector after the
     * first evaluation (have), with its values: a scrape never sees them at 0. Under mu. */
    struct ts_metric_family *loss_f, *train_acc_f, *test_acc_f;
    struct ts_metric *loss, *train_acc, *test_acc;
    pthread_mutex_t mu;
    bool have;
    double eval[3];                  /* loss, train accuracy, test accuracy */
    const char *job;
    char rank[16];
    tessera *t;
} w = { .mu = PTHREAD_MUTEX_INITIALIZER };

static struct ts_metric_family *family(const char *name, const char *help,
                                       enum ts_metric_type type)
{
    return ts_metrics_family(name, help, type, "job_id,rank", NULL, 0);
}

static struct ts_metric *child(const char *name, const char *help, enum ts_metric_type type,
                               const char *job, const char *rank)
{
    return ts_metric_child(family(name, help, type), (const char *[]){ job, rank });
}

/* Rank 0's evaluation, once there is one. */
static void collect_eval(void)
{
    const char *v[2] = { w.job, w.rank };

    pthread_mutex_lock(&w.mu);
    if (w.have) {
        if (!w.loss) {
            w.loss = ts_metric_child(w.loss_f, v);
            w.train_acc = ts_metric_child(w.train_acc_f, v);
            w.test_acc = ts_metric_child(w.test_acc_f, v);
        }
        ts_gauge_set(w.loss, w.eval[0]);
        ts_gauge_set(w.train_acc, w.eval[1]);
        ts_gauge_set(w.test_acc, w.eval[2]);
    }
    pthread_mutex_unlock(&w.mu);
}

static void collect(void *arg)
{
    struct tessera_stats st;

    (void)arg;
    collect_eval();
    if (!w.t)
        return;
    tessera_stats(w.t, &st);
    ts_counter_set(w.skipped, st.steps_skipped);
    ts_counter_set(w.pushed, st.bytes_pushed);
    ts_counter_set(w.raw, st.bytes_raw);
    ts_gauge_set(w.stale, (double)st.staleness_last);
    ts_gauge_set(w.scale, st.loss_scale);
    ts_counter_set(w.failovers, st.failovers);
}

int worker_metrics_start(const struct train_opts *o, tessera *t)
{
    struct ts_err err = { 0 };
    const char *rank = w.rank;

    if (o->metrics_port < 0)
        return 0;
    snprintf(w.rank, sizeof(w.rank), "%u", o->sdk.rank);
    w.job = o->sdk.job;
    w.steps = child("tessera_worker_steps_total", "training steps done", TS_METRIC_COUNTER,
                    o->sdk.job, rank);
    w.step_s = child("tessera_worker_step_seconds", "a whole step: forward, backward and the "
                     "exchange", TS_METRIC_HISTOGRAM, o->sdk.job, rank);
    w.exchange_s = child("tessera_worker_exchange_seconds", "the part of a step in the SDK: "
                         "pushes, pulls and waiting for the other ranks", TS_METRIC_HISTOGRAM,
                         o->sdk.job, rank);
    w.skipped = child("tessera_worker_steps_skipped_total", "steps a shard skipped for a "
                      "non-finite sum", TS_METRIC_COUNTER, o->sdk.job, rank);
    w.pushed = child("tessera_worker_push_bytes_total", "gradient bytes pushed, as sent "
                     "(after compression)", TS_METRIC_COUNTER, o->sdk.job, rank);
    w.raw = child("tessera_worker_push_raw_bytes_total", "gradient bytes pushed, before "
                  "compression", TS_METRIC_COUNTER, o->sdk.job, rank);
    w.stale = child("tessera_worker_staleness_steps", "ssp, asp: steps the slowest worker was "
                    "behind at the last pull", TS_METRIC_GAUGE, o->sdk.job, rank);
    w.scale = child("tessera_worker_loss_scale", "the fp16 loss scale (1 without loss "
                    "scaling)", TS_METRIC_GAUGE, o->sdk.job, rank);
    w.failovers = child("tessera_worker_failovers_total", "steps sent again to a new shard map "
                        "after a shard died", TS_METRIC_COUNTER, o->sdk.job, rank);
    if (o->sdk.rank == 0) {
        w.loss_f = family("tessera_worker_loss", "training loss at the last evaluation "
                          "(rank 0)", TS_METRIC_GAUGE);
        w.train_acc_f = family("tessera_worker_train_accuracy", "training accuracy at the "
                               "last evaluation (rank 0)", TS_METRIC_GAUGE);
        w.test_acc_f = family("tessera_worker_test_accuracy", "test accuracy at the last "
                              "evaluation (rank 0)", TS_METRIC_GAUGE);
    }
    w.t = t;
    ts_metrics_collector(collect, NULL);
    if (ts_serve_metrics(o->metrics_host, o->metrics_port, "worker", &err)) {
        fprintf(stderr, "tessera-worker: %s\n", err.msg);
        return 1;
    }
    return 0;
}

void worker_metrics_step(double step_s, double exchange_s)
{
    ts_counter_add(w.steps, 1);
    ts_histogram_observe(w.step_s, step_s);
    ts_histogram_observe(w.exchange_s, exchange_s);
}

void worker_metrics_eval(double loss, double train_acc, double test_acc)
{
    pthread_mutex_lock(&w.mu);
    w.have = w.loss_f != NULL;   /* rank 0 with /metrics on */
    w.eval[0] = loss;
    w.eval[1] = train_acc;
    w.eval[2] = test_acc;
    pthread_mutex_unlock(&w.mu);
}

void worker_metrics_stop(void)
{
    ts_serve_metrics_stop();
    w.t = NULL;
}
