/* benchlib.h - helpers the benchmarks share (bench/ only; not a library of the product).
 *
 * Clocks and nearest-rank percentiles in integers (no libm), and the master child process:
 * master_start() runs BIN/tessera-master on 127.0.0.1:0 with PR_SET_PDEATHSIG, so it cannot
 * outlive the benchmark, and master_stop() stops it by pid (SIGTERM, then SIGKILL after 5 s).
 * Threads: master_start/stop from the main thread only. */
#ifndef TS_BENCH_BENCHLIB_H
#define TS_BENCH_BENCHLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"
#include "util/flags.h"

#define LEASE_MS 30000      /* generous: a simulated worker must never expire during a run */

struct master {
    pid_t pid;
    char port_file[64];
    char target[64];          /* "127.0.0.1:PORT" */
};

struct lat {                  /* microseconds */
    double p50, p90, p99, max;
    int64_t n;
};

#include <time.h>

/* Parses a benchmark's options (no positional arguments). Returns -1 to go on, or the exit
 * status to return at once: 0 after printing --help ("PROG [options]", about, the table), 2
 * after a bad option (printed as "PROG: message"). */
int bench_flags(const char *prog, const char *about, const struct ts_flag *flags, int argc,
                char **argv);

int64_t clock_ns(clockid_t id);
int64_t now_ns(void);
int64_t round_i(double x);
/* SIGINT/SIGTERM handler: stops the master started last, then exits. */
void on_signal(int sig);
void sleep_until_ns(int64_t t);
/* Sorts ns in place and fills l. */
void lat_from_ns(int64_t *ns, size_t n, struct lat *l);
double round1(double x);
/* utime + stime of pid in clock ticks (/proc/PID/stat). */
ts_status proc_cpu_ticks(pid_t pid, uint64_t *ticks, struct ts_err *err) TS_MUST_CHECK;
ts_status master_start(const char *bin, struct master *m, struct ts_err *err) TS_MUST_CHECK;
/* Returns false if the master did not exit cleanly. */
bool master_stop(struct master *m);

/* The median of v[0..n), n >= 1 (v is left as it is). */
double bench_median(const double *v, size_t n);
/* bytes / ns: GB/s (1e9 B/s); 0 for ns <= 0. */
double bench_gbps(size_t bytes, int64_t ns);
/* The median GB/s of `reps` memcpy of bytes from src to dst: the baseline of the benchmarks
 * that move or scan memory. */
double bench_memcpy_gbps(void *dst, const void *src, size_t bytes, int reps);

/* "2 cpus, AMD EPYC ..." from /proc/cpuinfo, for the JSON's machine field. */
void machine_desc(char *buf, size_t n);
/* mkdir -p of the directory part of path (for --out). */
ts_status make_parent_dirs(const char *path, struct ts_err *err) TS_MUST_CHECK;

/* Ends the top-level JSON object (the caller has closed its headline) and writes it to path,
 * making its directory. Frees j's text. */
struct ts_json;
ts_status bench_write_json(struct ts_json *j, const char *path, struct ts_err *err) TS_MUST_CHECK;

#endif
