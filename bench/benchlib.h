/* benchlib.h - helpers the benchmarks share (bench/ only; not a library of the product).
 *
 * Clocks and nearest-rank percentiles in integers (no libm) (benchlib.c), and the cluster a
 * benchmark measures (benchcluster.c, over lib/local; link ts_local): bench_master_start()
 * runs BIN/tessera-master on 127.0.0.1:0 with PR_SET_PDEATHSIG, so it cannot outlive the
 * benchmark, shards are added with ts_local_add_shard on m->local, and bench_master_stop()
 * stops them all by pid (SIGTERM, then SIGKILL after 10 s).
 * Threads: bench_master_start/stop from the main thread only. */
#ifndef TS_BENCH_BENCHLIB_H
#define TS_BENCH_BENCHLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"
#include "util/flags.h"
#include "util/proc.h"

#define LEASE_MS 30000      /* generous: a simulated worker must never expire during a run */

struct ts_local;
struct bench_master {
    struct ts_local *local;   /* the cluster; NULL when stopped */
    pid_t pid;                /* the master's */
    char target[64];          /* "127.0.0.1:PORT" */
    int replicas;             /* set before bench_master_start: its --replicas (0: default) */
    int lease_ms;             /* ... its --lease-ms (0: LEASE_MS) */
    /* set before bench_master_start: a `tessera certs init` directory: the master serves
     * mutual TLS with its master.pem (NULL: plaintext). */
    const char *tls_dir;
};

struct bench_lat {                  /* microseconds */
    double p50, p90, p99, max;
    int64_t n;
};

/* Clocks: ts_clock_ns and ts_now_ns from util/proc.h. */
int64_t bench_round_i(double x);
/* SIGINT/SIGTERM handler: stops the cluster started last, then exits. */
void bench_on_signal(int sig);
void bench_sleep_until_ns(int64_t t);
/* Sorts ns in place and fills l. */
void bench_lat_from_ns(int64_t *ns, size_t n, struct bench_lat *l);
double bench_round1(double x);
/* The resident set of pid in bytes (/proc/PID/status, VmRSS). */
ts_status bench_proc_rss(pid_t pid, uint64_t *bytes, struct ts_err *err) TS_MUST_CHECK;
/* utime + stime of pid in clock ticks (/proc/PID/stat). */
ts_status bench_proc_cpu_ticks(pid_t pid, uint64_t *ticks, struct ts_err *err) TS_MUST_CHECK;
/* The master of a new cluster, with its --lease-ms (lease_ms, else LEASE_MS), --grace-ms 1000 (the shards'
 * too), --replicas and TLS (with tls_dir: its master.pem, and shard-<i>.pem for shard i; no
 * admin token; this process takes its own TLS from $TESSERA_TLS_DIR); its stderr is ours, at
 * TESSERA_LOG=warn unless the caller set a level: anything it prints is worth reading. */
ts_status bench_master_start(const char *bin, struct bench_master *m,
                             struct ts_err *err) TS_MUST_CHECK;
/* Stops the cluster and removes its directory. Returns false, saying why on stderr, if a
 * process did not exit cleanly. */
bool bench_master_stop(struct bench_master *m);

/* The median of v[0..n), n >= 1 (v is left as it is). */
double bench_median(const double *v, size_t n);
/* splitmix64: the next of a seeded stream of well-mixed 64-bit numbers (*s advances). */
uint64_t bench_rng_next(uint64_t *s);
/* Ascending uint64_t, for qsort. */
int bench_cmp_u64(const void *a, const void *b);
/* A sparse step's ids: n draws over [0, below) from *seed, sorted, a repeat made the next id
 * up (so ids reach below + n - 1). */
void bench_sorted_ids(uint64_t *seed, uint64_t below, size_t n, uint64_t *out);
/* bytes / ns: GB/s (1e9 B/s); 0 for ns <= 0. */
double bench_gbps(size_t bytes, int64_t ns);
/* The median GB/s of `reps` memcpy of bytes from src to dst: the baseline of the benchmarks
 * that move or scan memory. */
double bench_memcpy_gbps(void *dst, const void *src, size_t bytes, int reps);
/* The median GB/s of `reps` transfers of bytes over one loopback TCP connection, from a thread
 * writing a buffer to the caller reading into another: what the kernel's loopback path can
 * carry one way, the limit a tcp benchmark on one host chases. 0 if it could not run. Runs
 * more than `reps` transfers where they would carry less than 256 MiB in all.
 * cpu_ns_per_byte (may be NULL) gets the CPU both ends spent per byte moved (this process's
 * CPU time, both threads, the kernel's work done on their behalf included; softirq work the
 * kernel defers to its own threads is not), 0 if it could not run. */
double bench_tcp_stream_gbps(size_t bytes, int reps, double *cpu_ns_per_byte);

/* "2 cpus, AMD EPYC ..." from /proc/cpuinfo, for the JSON's machine field. */
void bench_machine_desc(char *buf, size_t n);
/* mkdir -p of the directory part of path (for --out). */
ts_status bench_make_parent_dirs(const char *path, struct ts_err *err) TS_MUST_CHECK;

/* Ends the top-level JSON object (the caller has closed its headline) and writes it to path,
 * making its directory. Frees j's text. */
struct ts_json;
ts_status bench_write_json(struct ts_json *j, const char *path, struct ts_err *err) TS_MUST_CHECK;

/* The phases of a benchmark that measures inside its own process (codec, verify, snapshot).
 * bench_run calls prepare, measure, table and json in that order on the benchmark's state
 * (arg), stops at the first failure, then always calls release (which frees arg). */
struct bench_phases {
    const char *prog;                                   /* "bench_codec": for messages */
    ts_status (*prepare)(void *arg, struct ts_err *err); /* allocate and fill the inputs */
    ts_status (*measure)(void *arg, struct ts_err *err);
    void (*table)(const void *arg);                     /* the table on stdout */
    ts_status (*json)(const void *arg, struct ts_err *err); /* the results file */
    void (*release)(void *arg);
};
/* Runs ph on arg and says how it ended: "wrote OUT" on stdout, or "PROG: message" on stderr.
 * Returns the exit status: 0, or 1 after a failure. */
int bench_run(const struct bench_phases *ph, void *arg, const char *out);

#endif
