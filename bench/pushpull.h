/* pushpull.h - what bench_pushpull's two halves share: the parent (pushpull.c: the cluster,
 * the gloo baseline, tables and JSON) and the worker it re-executes (pushpull_worker.c). */
#ifndef TS_BENCH_PUSHPULL_H
#define TS_BENCH_PUSHPULL_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

#define WARMUP 2
#define MAX_WORKERS 256            /* the worker mode's bound (bench/multihost.py runs 4) */
#define STEP_TIMEOUT_MS 60000      /* a worker stuck on a pull gives up after this */
/* The issue asked for lr = 0 (parameters that never change); lib/tensor refuses lr <= 0, so the
 * smallest step that is still an SGD step: the apply pass costs the same for any lr. */
#define OPTIMIZER "sgd:lr=1e-9"

/* The hidden worker mode (bench_pushpull --worker ARGS...): argv is
 * MASTER JOB TRANSPORT RANK BYTES ITERS MODE BUFFERS WORKERS PARTITION_BYTES, as the parent
 * (or bench/multihost.py, which runs one worker per emulated host) writes them. WORKERS is the
 * job's worker count, PARTITION_BYTES the tensor's partition size (0: the SDK's, 4 MiB), MODE an
 * enum pp_mode (0 float, 1 exact, 2 exact with float pushes). Prints
 * "ready" after the warm-up, then "TRANSPORT CPU_NS NS1 .. NSn". Returns the exit status. */
int pushpull_worker_main(int argc, char **argv);

/* ---- the parent's options and results, shared by pushpull.c and pushpull_report.c ---- */

#define MIB ((uint64_t)1 << 20)
#define MAX_SIZES 8
#define PP_MAX_SHARDS 8            /* --shards */
#define PP_MAX_WORKERS 8           /* --workers */
#define PP_MAX_TRANSPORTS 3        /* shm, tcp, rdma */
#define HEADLINE_MIB 64
#define GOAL_BEST 2.0              /* best transport / gloo at 64 MiB */
#define GOAL_TCP 0.8               /* tcp / gloo at 64 MiB */
#define GOAL_EXACT 1.3             /* exact step time / float step time at 64 MiB, shm */

/* A run's mode: float; exact with int64 pushes the worker converts (tessera_to_fixed); exact
 * with float pushes the shards round (exact_push float). --exact measures both exact ones. */
enum pp_mode { PP_FLOAT = 0, PP_EXACT = 1, PP_EXACT_F32 = 2 };
#define PP_MODES 3

static inline const char *pp_mode_name(int mode)
{
    return mode == PP_EXACT_F32 ? "exact-f32" : mode == PP_EXACT ? "exact" : "float";
}

struct opts {
    const char *bin, *sizes_s, *transports_s, *buffers_s, *out, *python;
    const char *tp[PP_MAX_TRANSPORTS];     /* --transports, in their order */
    const char *host;              /* --host: the shards' listening address */
    int64_t iters, sizes[MAX_SIZES], replicas;
    int64_t metrics_port;          /* shard i serves /metrics on this + i, scraped each second */
    int64_t workers, shards;       /* --workers (and gloo's ranks), --shards: default 2 each */
    int64_t partition_kib;         /* --partition-kib: 0 is the SDK's default (4 MiB) */
    const char *tls;               /* --tls DIR: mutual TLS and the data-plane handshake */
    int nsizes, ntp, nbuf;
    bool exact, quick, buf[2];     /* buf: the --buffers kinds in order, true for "shared" */
    bool no_gloo;                  /* --no-gloo: Tessera's runs alone (bench/security.py) */
};

/* One transport, buffers kind, mode and size. Times are per step in ms; CPU is summed over the
 * processes. name: the transport, "+buffers" for a tessera_buffers run ("shm+buffers"). */
struct run {
    const char *transport;
    char name[24];
    bool buffers, done;
    int mode;                      /* enum pp_mode */
    int64_t size_mib;
    double med_ms, min_ms, max_ms, gbs, worker_cpu_ms, shard_cpu_ms, other_cpu_ms;
};

struct results {
    char machine[192], gloo_error[256];
    struct run runs[PP_MAX_TRANSPORTS * 2 * PP_MODES * MAX_SIZES];   /* transports x buffers x
                                                                     * modes x sizes */
    int nruns, ngloo;
    struct { int64_t size_mib; double med_ms, gbs; } gloo[MAX_SIZES];
    /* The machine's limits per size (by index in o->sizes), measured in the same run: a
     * memcpy of S bytes, the limit of shared memory; a raw loopback TCP stream of S bytes
     * between two threads, the limit of tcp. GB/s; 0 where not measured. limit_tcp_cpu: the
     * CPU that stream spent per byte, ns (bench_tcp_stream_gbps). */
    double limit_memcpy[MAX_SIZES], limit_tcp[MAX_SIZES], limit_tcp_cpu[MAX_SIZES];
    uint64_t scrapes;              /* --metrics-port: scrapes answered */
};

/* pushpull_report.c: the tables on stdout, and the JSON written to o->out. */
void pushpull_report(const struct opts *o, const struct results *res);
ts_status pushpull_write_json(const struct opts *o, const struct results *res, bool ok,
                              struct ts_err *err) TS_MUST_CHECK;

#endif
