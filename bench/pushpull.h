/* pushpull.h - what bench_pushpull's two halves share: the parent (pushpull.c: the cluster,
 * the gloo baseline, tables and JSON) and the worker it re-executes (pushpull_worker.c). */
#ifndef TS_BENCH_PUSHPULL_H
#define TS_BENCH_PUSHPULL_H

#define WARMUP 2
#define NWORKERS 2                 /* bench_pushpull's own runs */
#define MAX_WORKERS 256            /* the worker mode's bound (bench/multihost.py runs 4) */
#define STEP_TIMEOUT_MS 60000      /* a worker stuck on a pull gives up after this */
/* The issue asked for lr = 0 (parameters that never change); lib/tensor refuses lr <= 0, so the
 * smallest step that is still an SGD step: the apply pass costs the same for any lr. */
#define OPTIMIZER "sgd:lr=1e-9"

/* The hidden worker mode (bench_pushpull --worker ARGS...): argv is
 * MASTER JOB TRANSPORT RANK BYTES ITERS EXACT BUFFERS WORKERS PARTITION_BYTES, as the parent
 * (or bench/multihost.py, which runs one worker per emulated host) writes them. WORKERS is the
 * job's worker count, PARTITION_BYTES the tensor's partition size (0: the SDK's, 4 MiB). Prints
 * "ready" after the warm-up, then "TRANSPORT CPU_NS NS1 .. NSn". Returns the exit status. */
int pushpull_worker_main(int argc, char **argv);

#endif
