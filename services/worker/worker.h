/* worker.h - tessera-worker's options and its trainer (train.c). */
#ifndef TS_WORKER_WORKER_H
#define TS_WORKER_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/data.h"
#include "tessera.h"

struct train_opts {
    struct tessera_options sdk;      /* the job's options, as tessera-worker's flags set them
                                      * (lib/client/option_flags.h): connect takes them */
    const char *data_dir;
    uint32_t batch, micro, epochs;   /* sdk.batch and sdk.micro_batch, as integers */
    uint64_t steps, seed, partition_bytes;
    int slow_ms, delay_ms;           /* testing: sleep per step; per data-plane send */
    int compute_ms;                  /* testing: each micro-batch also sleeps this long */
    double slow_factor;              /* testing: compute this many times slower (1: not) ... */
    uint64_t slow_from, slow_until;  /* ... in steps [slow_from, slow_until) */
    const char *unit_log;            /* dynamic: append each unit pushed to this file */
    bool overlap;                    /* asp: exchange a step while computing the next */
    bool json;
    int64_t metrics_port;            /* --metrics-port or --metrics-listen's; -1: no /metrics */
    const char *metrics_host;        /* --metrics-listen's host (ts_serve_metrics_addr) */
    /* --model ctr (ctr.c): features, rows a table, the rows' dim, the tables' optimizer and
     * the held-out samples scored at the end. */
    bool ctr;
    uint32_t ctr_features, ctr_dim;
    uint64_t ctr_rows, eval_samples;
    uint32_t prefetch_depth;       /* --prefetch-depth */
    uint64_t row_ttl_steps, row_ttl_seconds;   /* --row-ttl (one of them, or none) */
    const char *table_optimizer;
};

/* The exit code of a restarted worker (restarts > 0) whose job ended before it rejoined: the
 * others finished the job; a supervisor (tessera train --respawn) counts it as done. */
#define WORKER_EXIT_JOB_ENDED 3

/* Trains; returns the process exit code (messages already printed): 0, 1 for a failure, or
 * WORKER_EXIT_JOB_ENDED. */
int train_run(const struct train_opts *o);

/* ctr.c: the CTR trainer (--model ctr), as train_run. */
int train_ctr(const struct train_opts *o);

/* metrics.c: /metrics on o->metrics_host, port o->metrics_port (nothing if negative), reading
 * t's stats at each scrape; 1 (said on stderr) if the port cannot be served. Then per step
 * (seconds), per evaluation of rank 0, and stop before t is closed. */
int worker_metrics_start(const struct train_opts *o, tessera *t);
void worker_metrics_step(double step_s, double exchange_s);
void worker_metrics_eval(double loss, double train_acc, double test_acc);
void worker_metrics_stop(void);

/* overlap.c: asp with --overlap, a step's exchange on a thread while the worker computes the
 * next, on predicted values (that file says why and what it costs). overlap_open allocates
 * its own sets of values and sums beside the worker's arrays params and acc, whose pointers
 * it rewrites in place: they always name the set to compute with; 1 on no memory.
 * overlap_step waits for the exchange in flight, then starts step's; overlap_wait only waits
 * (params: predicted from the newest pull); overlap_end waits and leaves in params the newest
 * values pulled, not a prediction, to evaluate or report. Each returns a TESSERA_E* code and
 * fills e. overlap_close waits and frees its sets: the arrays must not be read after. */
struct overlap;
int overlap_open(struct overlap **out, tessera *t, uint32_t rank, float **params, void **acc);
int overlap_step(struct overlap *ov, uint64_t step, struct tessera_error *e);
int overlap_wait(struct overlap *ov, struct tessera_error *e);
int overlap_end(struct overlap *ov, struct tessera_error *e);
/* Points params[] at the newest values pulled, untouched by the exchange in flight (before the
 * first pull: leaves params as they are). They hold version s when the exchange of step s is
 * in flight. The pointers stay valid until the next overlap_wait. */
void overlap_pulled(const struct overlap *ov, float **params);
void overlap_close(struct overlap *ov);

#endif
