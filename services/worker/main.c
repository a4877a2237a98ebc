/* main.c - tessera-worker: the built-in trainer (MLP on Fashion-MNIST) as one rank of a job. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/serve.h"
#include "util/flags.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/proc.h"
#include "worker.h"

#define DEFAULT_OPTIMIZER "momentum:lr=0.02,momentum=0.9"

int main(int argc, char **argv)
{
    const char *master = NULL, *job = "default", *optimizer = DEFAULT_OPTIMIZER;
    const char *transport = NULL, *data = NULL, *mode = NULL, *compress = NULL, *sync = NULL;
    const char *pull = NULL;
    const char *loss = "none";
    int64_t rank = 0, workers = 1, batch = 64, micro = 16, epochs = 1, steps = 0, seed = 1;
    int64_t partition_kb = 0, staleness = 0, slow_ms = 0, delay_ms = 0, restarts = 0;
    int64_t start_workers = 0, metrics_port = -1, compute_ms = 0;
    bool exact = false, json = false, keep = false, no_elastic = false, balance = false;
    bool dynamic = false, overlap = false;
    const char *unit_log = NULL, *metrics_listen = NULL;
    const char *slow_factor = NULL, *slow_steps = NULL;
    char metrics_host[256];
    double factor = 1;
    uint64_t slow_from = 0, slow_until = UINT64_MAX;
    struct ts_rpc_tls tls = { 0 };
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR", "master address, or `local` for a "
                                                  "single-process run (default "
                                                  "$TESSERA_MASTER, then local)", 0, 0 },
        { "job", TS_FLAG_STR, &job, "ID", "job id (default $TESSERA_JOB, ...: the launcher's "
          "environment, docs/launch.md; then `default`)", 0, 0 },
        { "rank", TS_FLAG_INT, &rank, "R", "this worker's rank (default $TESSERA_RANK, $RANK, "
          "$SLURM_PROCID, ...; then 0)", 0, 1023 },
        { "workers", TS_FLAG_INT, &workers, "N", "workers in the job (default "
          "$TESSERA_WORKERS, $WORLD_SIZE, $SLURM_NTASKS; then 1)", 1, 1024 },
        { "epochs", TS_FLAG_INT, &epochs, "E", "epochs to train (default 1)", 1, 1000 },
        { "steps", TS_FLAG_INT, &steps, "K", "train exactly K global steps instead", 0,
          100000000 },
        { "seed", TS_FLAG_INT, &seed, "S", "seed of the init and the data order (default 1)",
          0, INT64_MAX },
        { "batch", TS_FLAG_INT, &batch, "B", "global batch (default 64)", 1, 60000 },
        { "micro", TS_FLAG_INT, &micro, "M", "micro-batch, divides B (default 16)", 1, 60000 },
        { "exact", TS_FLAG_BOOL, &exact, NULL, "bitwise-reproducible sums (fixed point)", 0, 0 },
        { "optimizer", TS_FLAG_STR, &optimizer, "SPEC", "default " DEFAULT_OPTIMIZER, 0, 0 },
        { "transport", TS_FLAG_STR, &transport, "NAME", "data plane: shm or tcp (default: "
                                                        "the best both ends have)", 0, 0 },
        { "partition-kb", TS_FLAG_INT, &partition_kb, "KB", "partition size (default: 4096 "
          "with every shard on this host, smaller between hosts; docs/placement.md)", 0,
          131072 },
        { "data", TS_FLAG_STR, &data, "DIR", "Fashion-MNIST directory (default "
                                             TS_FMNIST_DIR ")", 0, 0 },
        { "mode", TS_FLAG_STR, &mode, "MODE", "bsp (default), ssp, asp or reduce", 0, 0 },
        { "staleness", TS_FLAG_INT, &staleness, "S", "ssp: steps ahead of the slowest worker",
          0, 1000000 },
        { "compress", TS_FLAG_STR, &compress, "CODEC", "none, fp16, bf16, int8, topk:RATIO, or "
                                                       "TENSOR=CODEC,...", 0, 0 },
        { "compress-pull", TS_FLAG_STR, &pull, "CODEC", "parameters on the wire, as deltas "
                                                        "against this worker's copy: codecs as "
                                                        "for --compress (tcp only)", 0, 0 },
        { "sync-every", TS_FLAG_STR, &sync, "T=K,...", "tensor T syncs every K steps", 0, 0 },
        { "loss-scale", TS_FLAG_STR, &loss, "KIND", "none (default) or dynamic (fp16 "
                                                    "gradients with GradScaler's rules)", 0, 0 },
        { "slow-ms", TS_FLAG_INT, &slow_ms, "MS", "testing: sleep MS before each step", 0,
          60000 },
        { "slow-factor", TS_FLAG_STR, &slow_factor, "X", "testing: compute X times slower "
          "(after its slots' gradients the worker sleeps X - 1 times as long as they took; "
          "1 < X <= 100)", 0, 0 },
        { "compute-ms", TS_FLAG_INT, &compute_ms, "MS", "testing: each micro-batch also takes "
          "MS ms, a sleep: an accelerator's compute time, which does not load the CPUs "
          "(--slow-factor multiplies it too)", 0, 10000 },
        { "slow-steps", TS_FLAG_STR, &slow_steps, "A:B", "testing: --slow-factor applies to "
          "steps A..B-1 only (default all)", 0, 0 },
        { "delay-ms", TS_FLAG_INT, &delay_ms, "MS",
          "a slower link, for benchmarks: each data-plane send sleeps MS first", 0, 60000 },
        { "json", TS_FLAG_BOOL, &json, NULL, "rank 0's result, one JSON document, is all it "
          "writes to stdout (other ranks write none there); progress goes to stderr", 0, 0 },
        { "keep", TS_FLAG_BOOL, &keep, NULL, "the shards keep the job once its workers finish",
          0, 0 },
        { "restarts", TS_FLAG_INT, &restarts, "N", "times a supervisor restarted this rank's "
          "worker (tessera train --respawn; default $TESSERA_RESTARTS; shown by tessera status). Such a worker never starts a "
          "run: if its job ended meanwhile it exits 3", 0, 1000000 },
        { "start-workers", TS_FLAG_INT, &start_workers, "N", "the workers the job starts "
          "with, below --workers (elastic; default all): the slots of ranks N and above go to "
          "them until a worker joins for that rank (docs/elastic.md)", 0, 1024 },
        { "balance", TS_FLAG_BOOL, &balance, NULL, "the master moves slots between live "
          "workers by their measured speed (elastic, --workers above --start-workers; "
          "docs/scheduler.md)", 0, 0 },
        { "dynamic", TS_FLAG_BOOL, &dynamic, NULL, "asp, ssp: take the next units of the data "
          "from the master's queue as this worker becomes free, instead of a fixed share "
          "(docs/scheduler.md)", 0, 0 },
        { "unit-log", TS_FLAG_STR, &unit_log, "FILE", "--dynamic: append a line `unit U step S "
          "rank R` for each unit pushed", 0, 0 },
        { "overlap", TS_FLAG_BOOL, &overlap, NULL, "asp: push and pull a step while computing "
          "the next, on values predicted from the last two pulls (docs/modes.md)", 0, 0 },
        { "no-elastic", TS_FLAG_BOOL, &no_elastic, NULL, "a dead worker stops the job instead "
          "of its slot moving to a live one (elastic needs bsp, no --sync-every, no top-k)", 0,
          0 },
        TS_METRICS_FLAGS(&metrics_port, &metrics_listen, "127.0.0.1, as a worker serves no "
                         "gRPC"),
        TS_TLS_FLAGS(&tls),
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct train_opts o;
    struct tessera_launch env;
    struct tessera_error e;
    struct ts_err err = { 0 };
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
    master = env.master ? env.master : master;
    job = env.job ? env.job : job;
    rank = env.rank >= 0 ? env.rank : rank;
    workers = env.workers ? env.workers : workers;
    restarts = env.restarts;
    if ((done = ts_flags_program("tessera-worker", NULL,
                                 "One rank of a training job: the MLP 784-256-128-10 on "
                                 "Fashion-MNIST,\nthrough the Tessera SDK. `tessera train` starts "
                                 "these for you.", flags, argc, argv)) >= 0)
        return done;
    if (ts_rpc_tls_setup(&tls, &err) ||
        ts_serve_metrics_addr(metrics_listen, metrics_port, NULL, metrics_host,
                              sizeof(metrics_host), &metrics_port, &err)) {
        fprintf(stderr, "tessera-worker: %s\n", err.msg);
        return 2;
    }
    if (strcmp(loss, "none") && strcmp(loss, "dynamic")) {
        fprintf(stderr, "tessera-worker: --loss-scale %s: want none or dynamic\n", loss);
        return 2;
    }
    if (slow_factor) {
        char *end;
        factor = strtod(slow_factor, &end);
        if (*end || !(factor > 1 && factor <= 100)) {
            fprintf(stderr, "tessera-worker: --slow-factor %s: want a number above 1, at most "
                    "100 (2: twice as slow)\n", slow_factor);
            return 2;
        }
    }
    if (slow_steps) {
        unsigned long long a, b;
        char tail;
        if (sscanf(slow_steps, "%llu:%llu%c", &a, &b, &tail) != 2 || a >= b) {
            fprintf(stderr, "tessera-worker: --slow-steps %s: want A:B with A < B (steps "
                    "A..B-1), e.g. 0:100\n", slow_steps);
            return 2;
        }
        slow_from = a;
        slow_until = b;
    }
    if (balance && (no_elastic || start_workers == 0 || start_workers >= workers)) {
        fprintf(stderr, "tessera-worker: --balance needs an elastic job with more slots than "
                "workers: --workers W (the slots) above --start-workers N (the processes)\n");
        return 2;
    }
    if ((dynamic && (!mode || (strcmp(mode, "asp") && strcmp(mode, "ssp")))) ||
        (unit_log && !dynamic)) {
        fprintf(stderr, "tessera-worker: %s\n", unit_log && !dynamic
                ? "--unit-log needs --dynamic"
                : "--dynamic needs --mode asp or ssp (bsp: use --balance)");
        return 2;
    }
    if (overlap && (!mode || strcmp(mode, "asp"))) {
        fprintf(stderr, "tessera-worker: --overlap needs --mode asp (bsp and ssp wait for "
                "each step's values before the next)\n");
        return 2;
    }
    if (batch % micro || rank >= workers) {
        fprintf(stderr, "tessera-worker: %s\n", batch % micro ? "--micro must divide --batch"
                                                              : "--rank must be below --workers");
        return 2;
    }
    o = (struct train_opts){ .master = master, .job = job, .optimizer = optimizer,
                             .transport = transport, .data_dir = data, .rank = (uint32_t)rank,
                             .workers = (uint32_t)workers, .batch = (uint32_t)batch,
                             .micro = (uint32_t)micro, .epochs = (uint32_t)epochs,
                             .steps = (uint64_t)steps, .seed = (uint64_t)seed,
                             .partition_bytes = (uint64_t)partition_kb * 1024, .exact = exact,
                             .json = json, .keep = keep, .mode = mode, .compress = compress,
                             .sync_every = sync, .staleness = (uint32_t)staleness,
                             .loss_scale = strcmp(loss, "dynamic") ? TESSERA_LOSS_SCALE_NONE
                                                                   : TESSERA_LOSS_SCALE_SDK,
                             .slow_ms = (int)slow_ms, .delay_ms = (int)delay_ms };
    /* Elastic where it can be: bsp, no sync periods, no top-k (docs/elastic.md). */
    o.restarts = (uint32_t)restarts;
    o.start_workers = (uint32_t)start_workers;
    o.metrics_port = metrics_port;
    o.metrics_host = metrics_host;
    o.balance = balance;
    o.dynamic = dynamic;
    o.unit_log = unit_log;
    o.overlap = overlap;
    o.compute_ms = (int)compute_ms;
    o.slow_factor = factor;
    o.slow_from = slow_from;
    o.slow_until = slow_until;
    o.pull_compress = pull;
    o.elastic = !no_elastic && (!mode || !strcmp(mode, "bsp")) && !sync &&
                !(compress && strstr(compress, "topk")) && !(pull && strcmp(pull, "none"));
    return train_run(&o);
}
