/* main.c - tessera-worker: the built-in trainer (MLP on Fashion-MNIST) as one rank of a job. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/option_flags.h"
#include "rpc/serve.h"
#include "util/flags.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/proc.h"
#include "worker.h"

/* The trainer's own flags; the job's options come from the SDK's schema (option_flags.h). */
struct trainer_flags {
    struct ts_trainer_opts tr;       /* what tessera train hands on as it is */
    const char *data, *loss, *unit_log, *metrics_listen, *slow_factor, *slow_steps;
    int64_t slow_ms, compute_ms, metrics_port;
};

/* The checks of what only this trainer has, and its values into o. 2 after saying why. */
static int trainer_options(const struct trainer_flags *f, struct train_opts *o)
{
    unsigned long long a, b;
    char *end, tail;

    if (strcmp(f->loss, "none") && strcmp(f->loss, "dynamic")) {
        fprintf(stderr, "tessera-worker: --loss-scale %s: want none or dynamic\n", f->loss);
        return 2;
    }
    o->slow_factor = 1;
    if (f->slow_factor) {
        o->slow_factor = strtod(f->slow_factor, &end);
        if (*end || !(o->slow_factor > 1 && o->slow_factor <= 100)) {
            fprintf(stderr, "tessera-worker: --slow-factor %s: want a number above 1, at most "
                    "100 (2: twice as slow)\n", f->slow_factor);
            return 2;
        }
    }
    o->slow_from = 0, o->slow_until = UINT64_MAX;
    if (f->slow_steps) {
        if (sscanf(f->slow_steps, "%llu:%llu%c", &a, &b, &tail) != 2 || a >= b) {
            fprintf(stderr, "tessera-worker: --slow-steps %s: want A:B with A < B (steps "
                    "A..B-1), e.g. 0:100\n", f->slow_steps);
            return 2;
        }
        o->slow_from = a, o->slow_until = b;
    }
    if (f->unit_log && !o->sdk.dynamic) {
        fprintf(stderr, "tessera-worker: --unit-log needs --dynamic\n");
        return 2;
    }
    if (o->sdk.balance && (!o->sdk.start_workers || o->sdk.start_workers >= o->sdk.workers)) {
        fprintf(stderr, "tessera-worker: --balance needs an elastic job with more slots than "
                "workers: --workers W (the slots) above --start-workers N (the processes)\n");
        return 2;
    }
    o->data_dir = f->data, o->unit_log = f->unit_log, o->overlap = f->tr.overlap;
    o->batch = (uint32_t)f->tr.batch, o->micro = (uint32_t)f->tr.micro;
    o->epochs = (uint32_t)f->tr.epochs, o->steps = (uint64_t)f->tr.steps;
    o->seed = (uint64_t)f->tr.seed, o->partition_bytes = (uint64_t)f->tr.partition_kb * 1024;
    o->slow_ms = (int)f->slow_ms, o->delay_ms = (int)f->tr.delay_ms;
    o->compute_ms = (int)f->compute_ms, o->json = f->tr.json;
    o->sdk.batch = (double)f->tr.batch;
    o->sdk.data_seed = o->seed;
    o->sdk.micro_batch = o->micro;
    o->sdk.loss_scale = strcmp(f->loss, "dynamic") ? TESSERA_LOSS_SCALE_NONE
                                                   : TESSERA_LOSS_SCALE_SDK;
    /* Elastic where it can be: bsp, no sync periods, no top-k (docs/elastic.md). */
    o->ctr = !strcmp(f->tr.model, "ctr");
    o->ctr_features = (uint32_t)f->tr.ctr_features, o->ctr_dim = (uint32_t)f->tr.ctr_dim;
    o->ctr_rows = (uint64_t)f->tr.ctr_rows, o->eval_samples = (uint64_t)f->tr.eval_samples;
    o->table_optimizer = f->tr.table_optimizer;
    o->prefetch_depth = (uint32_t)f->tr.prefetch_depth;
    o->sdk.elastic = !f->tr.no_elastic && tessera_options_can_be_elastic(&o->sdk);
    return -1;
}

int main(int argc, char **argv)
{
    struct trainer_flags f = { .tr = TS_TRAINER_DEFAULTS, .loss = "none", .metrics_port = -1 };
    const struct ts_flag own[] = {
        { "data", TS_FLAG_STR, &f.data, "DIR", "Fashion-MNIST directory (default "
                                               TS_FMNIST_DIR ")", 0, 0 },
        { "loss-scale", TS_FLAG_STR, &f.loss, "KIND", "none (default) or dynamic (fp16 "
                                                      "gradients with GradScaler's rules)", 0, 0 },
        { "slow-ms", TS_FLAG_INT, &f.slow_ms, "MS", "testing: sleep MS before each step", 0,
          60000 },
        { "slow-factor", TS_FLAG_STR, &f.slow_factor, "X", "testing: compute X times slower "
          "(after its slots' gradients the worker sleeps X - 1 times as long as they took; "
          "1 < X <= 100)", 0, 0 },
        { "compute-ms", TS_FLAG_INT, &f.compute_ms, "MS", "testing: each micro-batch also "
          "takes MS ms, a sleep: an accelerator's compute time, which does not load the CPUs "
          "(--slow-factor multiplies it too)", 0, 10000 },
        { "slow-steps", TS_FLAG_STR, &f.slow_steps, "A:B", "testing: --slow-factor applies to "
          "steps A..B-1 only (default all)", 0, 0 },
        { "unit-log", TS_FLAG_STR, &f.unit_log, "FILE", "--dynamic: append a line `unit U step "
          "S rank R` for each unit pushed", 0, 0 },
    };
    struct tessera_error e;
    struct ts_rpc_tls tls = { 0 };
    const struct ts_flag tail[] = {
        TS_METRICS_FLAGS(&f.metrics_port, &f.metrics_listen, "127.0.0.1, as a worker serves no "
                         "gRPC"),
        TS_TLS_FLAGS(&tls),
    };
    struct ts_flag flags[TS_OPTION_FLAGS_MAX + 40];
    struct ts_option_flags given = { 0 };
    struct train_opts o = { .sdk = TESSERA_OPTIONS_INIT };
    struct tessera_launch env;
    struct ts_err err = { 0 };
    char metrics_host[256];
    size_t n = 0;
    int done;

    signal(SIGPIPE, SIG_IGN);
    if (!ts_knob_is_set(TS_KNOB_LOG)) /* rank 0 writes the user's progress: only problems on top */
        ts_log_set_level(TS_WARN);
    /* Defaults from a launcher's environment, so that one command line serves every rank
     * (tessera run, srun, a Kubernetes indexed Job: docs/launch.md); flags win. */
    if (tessera_launch_env(&env, &e)) {
        fprintf(stderr, "tessera-worker: %s\n", e.message);
        return 2;
    }
    o.sdk.master = env.master;
    o.sdk.job = env.job ? env.job : "default";
    o.sdk.rank = env.rank >= 0 ? (unsigned)env.rank : 0;
    o.sdk.workers = env.workers ? (unsigned)env.workers : 1;
    o.sdk.restarts = env.restarts;
    o.sdk.optimizer = TS_TRAINER_OPTIMIZER;
    ts_option_flags_add(&given, flags, &n, TS_OPTION_FLAGS_MAX, NULL);
    ts_trainer_flags_add(&f.tr, flags, &n, TS_OPTION_FLAGS_MAX + 20);
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        flags[n++] = own[i];
    for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]) && tail[i].name; i++)
        flags[n++] = tail[i];
    flags[n] = (struct ts_flag){ NULL, 0, NULL, NULL, NULL, 0, 0 };
    if ((done = ts_flags_program("tessera-worker", NULL,
                                 "One rank of a training job: the MLP 784-256-128-10 on "
                                 "Fashion-MNIST, or with --model ctr\na DLRM-style CTR model "
                                 "through sparse tables, through the Tessera SDK.\n`tessera "
                                 "train` starts these for you.", flags, argc, argv)) >= 0)
        return done;
    if (ts_option_flags_apply(&given, &o.sdk, &err) ||
        ts_rpc_tls_setup(&tls, &err) ||
        ts_serve_metrics_addr(f.metrics_listen, f.metrics_port, NULL, metrics_host,
                              sizeof(metrics_host), &f.metrics_port, &err)) {
        fprintf(stderr, "tessera-worker: %s\n", err.msg);
        return 2;
    }
    if ((done = trainer_options(&f, &o)) >= 0)
        return done;
    if (tessera_options_check(&o.sdk, TESSERA_OPTIONS_NAME_FLAGS, &e)) {
        fprintf(stderr, "tessera-worker: %s\n", e.message);
        return 2;
    }
    if (ts_trainer_check(&f.tr, &o.sdk, &err) ||
        ts_row_ttl_parse(f.tr.row_ttl, &o.row_ttl_steps, &o.row_ttl_seconds, &err)) {
        fprintf(stderr, "tessera-worker: %s\n", err.msg);
        return 2;
    }
    o.metrics_port = f.metrics_port;
    o.metrics_host = metrics_host;
    return o.ctr ? train_ctr(&o) : train_run(&o);
}
