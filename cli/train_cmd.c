/* train_cmd.c - `tessera train`'s flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client/option_flags.h"
#include "cluster/cluster.h"
#include "util/flags.h"
#include "util/proc.h"

/* Shared by train and demo: fills t from argv; returns -1 to go on, else an exit code. */
/* --slow-factor: RANK:X[:A-B] items, X in (1, 100], A < B; says what is wrong. */
static bool slow_factor_bad(const char *cmd, const char *spec)
{
    const char *p = spec;

    while (p && *p) {
        unsigned rank;
        double x;
        unsigned long long a = 0, b = 1;
        int used = 0, got = sscanf(p, "%u:%lf%n:%llu-%llu%n", &rank, &x, &used, &a, &b, &used);
        if (got < 2 || !(x > 1 && x <= 100) || a >= b || (p[used] && p[used] != ',')) {
            fprintf(stderr, "tessera %s: --slow-factor %s: want RANK:X[:A-B],... with X above 1 "
                    "and at most 100 and A < B, e.g. 1:2 or 1:3:0-200,2:3:200-400\n", cmd, spec);
            return true;
        }
        p += used + (p[used] == ',');
    }
    return false;
}

/* The schema's flags tessera train does not take: it gives each worker its own. */
static const char *const not_ours[] = { "master", "job", "rank", "workers", "restarts",
                                        "start-workers", NULL };

/* The job's options as the workers will get them, from the flags: the slots (--width) and
 * who starts with them, elastic where the job can be, and the SDK's rules, before anything
 * starts. 2 after saying why, else -1. */
static int job_options(const char *cmd, struct train_cli *t, int64_t width)
{
    struct tessera_error e;
    struct ts_err err = { 0 };

    if (t->amp && t->sdk.compress) {
        fprintf(stderr, "tessera %s: --amp sends fp16 gradients; drop --compress\n", cmd);
        return 2;
    }
    if (t->amp)
        t->sdk.compress = "fp16";
    t->sdk.loss_scale = t->amp ? TESSERA_LOSS_SCALE_SDK : TESSERA_LOSS_SCALE_NONE;
    /* what the check needs to know of the master: only whether there is one */
    t->sdk.master = t->local ? "local" : "cluster";
    t->sdk.job = t->job;
    t->sdk.workers = t->local ? 1 : width > t->workers ? (unsigned)width : (unsigned)t->workers;
    t->sdk.start_workers = !t->local && width > t->workers ? (unsigned)t->workers : 0;
    t->sdk.batch = (double)t->tr.batch;
    t->sdk.balance = t->sdk.balance && !t->local;
    t->sdk.elastic = !t->local && !t->tr.no_elastic && tessera_options_can_be_elastic(&t->sdk);
    if (tessera_options_check(&t->sdk, TESSERA_OPTIONS_NAME_FLAGS, &e)) {
        fprintf(stderr, "tessera %s: %s\n", cmd, e.message);
        return 2;
    }
    if (ts_trainer_check(&t->tr, &t->sdk, &err)) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.msg);
        return 2;
    }
    t->sdk.master = NULL;   /* the workers get the real one */
    return -1;
}

int train_flags(const char *cmd, const char *usage, const char *about, struct train_cli *t,
                const char **master, int64_t *shards, int argc, char **argv)
{
    int64_t workers = t->workers, width = 0, join = -1;
    struct ts_flag flags[TS_OPTION_FLAGS_MAX + 40];
    struct ts_option_flags given = { 0 };
    struct ts_err err = { 0 };
    size_t n = 0;
    int npos = 0, rc;
    bool help;

    if (master)
        flags[n++] = (struct ts_flag){ "master", TS_FLAG_STR, master, "ADDR",
                                       "master (default $TESSERA_MASTER, then 127.0.0.1:7070)",
                                       0, 0 };
    if (shards)
        flags[n++] = (struct ts_flag){ "shards", TS_FLAG_INT, shards, "N",
                                       "shards to start (default 2)", 1, 64 };
    else
        flags[n++] = (struct ts_flag){ "local", TS_FLAG_BOOL, &t->local, NULL,
                                       "one process, no cluster: the reference run", 0, 0 };
    flags[n++] = (struct ts_flag){ "workers", TS_FLAG_INT, &workers, "N",
                                   "worker processes (default 2)", 1, 64 };
    ts_trainer_flags_add(&t->tr, flags, &n, TS_OPTION_FLAGS_MAX + 20);
    ts_option_flags_add(&given, flags, &n, TS_OPTION_FLAGS_MAX, not_ours);
    flags[n++] = (struct ts_flag){ "amp", TS_FLAG_BOOL, &t->amp, NULL,
                                   "fp16 gradients with dynamic loss scaling (GradScaler's "
                                   "defaults)", 0, 0 };
    flags[n++] = (struct ts_flag){ "slow", TS_FLAG_STR, &t->slow, "RANK:MS",
                                   "testing: worker RANK sleeps MS before each step", 0, 0 };
    flags[n++] = (struct ts_flag){ "slow-factor", TS_FLAG_STR, &t->slow_factor,
                                   "RANK:X[:A-B],...", "testing: worker RANK computes X times "
                                   "slower (in steps A..B-1 only, with :A-B)", 0, 0 };
    flags[n++] = (struct ts_flag){ "metrics-port", TS_FLAG_INT, &t->metrics_port, "BASE",
                                   "rank R serves Prometheus metrics on port BASE + R "
                                   "(docs/observability.md; 0: free ports, logged)", 0, 65000 };
    flags[n++] = (struct ts_flag){ "metrics-listen", TS_FLAG_STR, &t->metrics_listen, "HOST",
                                   "the address the workers' /metrics listen on (default "
                                   "127.0.0.1; 0.0.0.0: every address, for a Prometheus "
                                   "elsewhere)", 0, 0 };
    flags[n++] = (struct ts_flag){ "job", TS_FLAG_STR, &t->job, "ID",
                                   "job id (default: a new one per run, train-PID-MS)", 0, 0 };
    flags[n++] = (struct ts_flag){ "width", TS_FLAG_INT, &width, "W",
                                   "the job's slots, above --workers: workers that join later "
                                   "(tessera-worker --rank R, R below W) take theirs "
                                   "(elastic; default --workers; with --balance --batch / "
                                   "--micro, at most 64)", 0, 64 };
    flags[n++] = (struct ts_flag){ "join", TS_FLAG_INT, &join, "R",
                                   "start only rank R, a worker that joins the running job "
                                   "--job (elastic; R below --width; the same settings as the "
                                   "job's)", 0, 63 };
    flags[n++] = (struct ts_flag){ "respawn", TS_FLAG_BOOL, &t->respawn, NULL,
                                   "start a worker killed by a signal again, with its rank: it "
                                   "joins the running job (elastic jobs)", 0, 0 };
    flags[n] = (struct ts_flag){ NULL, 0, NULL, NULL, NULL, 0, 0 };
    if (ts_flags_parse(flags, argc, argv, NULL, &npos, &help, &err) ||
        (!help && ts_option_flags_apply(&given, &t->sdk, &err))) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.msg);
        return 2;
    }
    if (help) {
        ts_flags_usage(stdout, usage, about, flags);
        return 0;
    }
    if (t->slow && (!strchr(t->slow, ':') || atoi(t->slow) < 0 ||
                    atoi(strchr(t->slow, ':') + 1) <= 0)) {
        fprintf(stderr, "tessera %s: --slow %s: want RANK:MS, e.g. 1:50\n", cmd, t->slow);
        return 2;
    }
    if (slow_factor_bad(cmd, t->slow_factor))
        return 2;
    if (t->sdk.balance && !t->local && !width && t->tr.micro && !(t->tr.batch % t->tr.micro))
        width = t->tr.batch / t->tr.micro < 64 ? t->tr.batch / t->tr.micro : 64;
    if (t->sdk.balance && !t->local && width <= workers) {
        fprintf(stderr, "tessera %s: --balance moves slots between the workers: it needs more "
                "slots (--width %lld; default --batch / --micro) than --workers %lld\n", cmd,
                (long long)width, (long long)workers);
        return 2;
    }
    if (t->metrics_listen && t->metrics_port < 0) {
        fprintf(stderr, "tessera %s: --metrics-listen says where the workers' /metrics listen: "
                "give --metrics-port BASE too\n", cmd);
        return 2;
    }
    if (width && width < workers) {
        fprintf(stderr, "tessera %s: --width %lld is below --workers %lld: the width counts "
                "every worker the job may have\n", cmd, (long long)width, (long long)workers);
        return 2;
    }
    if (width > workers && t->tr.no_elastic) {
        fprintf(stderr, "tessera %s: --width needs an elastic job: drop --no-elastic\n", cmd);
        return 2;
    }
    if (join >= 0 && (join >= (width > workers ? width : workers) || !t->job || t->local ||
                      t->tr.no_elastic)) {
        fprintf(stderr, "tessera %s: --join %lld adds one worker to a running elastic job: it "
                "needs --job, a rank below --width (or --workers), and no --local or "
                "--no-elastic\n", cmd, (long long)join);
        return 2;
    }
    t->join = (int)join;
    t->width = width > workers ? (int)width : 0;
    t->workers = (int)workers;
    if ((rc = job_options(cmd, t, width)) >= 0)
        return rc;
    return -1;
}

void train_defaults(struct train_cli *t)
{
    *t = (struct train_cli){ .workers = 2, .tr = TS_TRAINER_DEFAULTS, .job = NULL, .join = -1,
                             .metrics_port = -1, .sdk = TESSERA_OPTIONS_INIT };
    t->tr.epochs = 3;
    t->sdk.optimizer = TS_TRAINER_OPTIMIZER;
}

int cmd_train(int argc, char **argv)
{
    struct train_cli t;
    const char *master = NULL;
    int rc;

    train_defaults(&t);
    rc = train_flags("train", "tessera train [--master ADDR | --local] [options]",
                     "Trains the built-in MLP 784-256-128-10 on Fashion-MNIST with N worker\n"
                     "processes against a running cluster (tessera up), or in one process\n"
                     "with --local. Same seed and batch give the same fingerprint\n"
                     "(params_sha256) for any worker and shard count with --exact.",
                     &t, &master, NULL, argc, argv);
    if (rc >= 0)
        return rc;
    ts_proc_block_signals();
    return run_training(&t, ts_master_default_addr(master));
}
