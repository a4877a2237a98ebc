/* proc.h - process plumbing shared by the services and the CLI: clocks, termination signals,
 * instance ids, finding sibling binaries.
 *
 * Signals: a service blocks SIGINT/SIGTERM (and ignores SIGPIPE) in main() before any thread
 * exists, so every thread inherits the mask, then waits for them in main with
 * ts_proc_wait_signal(). That is the shutdown path gRPC's threads can live with.
 * Threads: all functions are safe. */
#ifndef TS_UTIL_PROC_H
#define TS_UTIL_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "util/err.h"

int64_t ts_clock_ns(clockid_t id); /* that clock, nanoseconds */
int64_t ts_now_ns(void);          /* CLOCK_MONOTONIC, nanoseconds */
int64_t ts_now_ms(void);          /* CLOCK_MONOTONIC, milliseconds */
int64_t ts_now_us(void);          /* CLOCK_MONOTONIC, microseconds */
int64_t ts_unix_ms(void);         /* CLOCK_REALTIME, milliseconds since the epoch */
void ts_sleep_ms(int64_t ms);
/* The CLOCK_REALTIME time ms from now, for pthread_cond_timedwait. */
struct timespec;
void ts_abstime_ms(struct timespec *ts, int64_t ms);

/* Fixes malloc's mmap and trim thresholds at 128 KiB (glibc's starting values) instead of
 * glibc's sliding ones; a long-lived service calls it first in main(), before any thread.
 * Why: once a large block is freed glibc raises both thresholds (the trim one up to 64 MiB),
 * then keeps large blocks in its arenas and never gives back a thread arena's free top, which
 * malloc_trim does not reach either: a shard kept 7-40 MiB resident with under 1 MiB in use,
 * and the master's RSS climbed for 600 jobs (docs/operations.md, "Memory over many jobs").
 * With fixed thresholds a large block is mapped and unmapped each time; no service allocates
 * large short-lived blocks on a hot path. */
void ts_proc_fix_malloc(void);

/* Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (call first in main), ignores SIGPIPE. */
void ts_proc_block_signals(void);
/* Waits up to ms (-1: forever) for one of them; returns the signal, or 0 on timeout. */
int ts_proc_wait_signal(int ms);

/* Writes "PORT\n" to path atomically (ts_file_replace), so that a launcher polling for the
 * file reads the whole port or nothing, never an empty or partial file. TS_EIO naming path
 * on failure (nothing left behind). */
ts_status ts_port_file_write(const char *path, int port, struct ts_err *err) TS_MUST_CHECK;
/* The port in path (> 0), or 0 when the file is not there yet or holds no port. */
int ts_port_file_read(const char *path);

/* A random id for this process start, 32 hex characters, into buf (>= 33 bytes). */
void ts_proc_instance_id(char *buf, size_t n);

/* The directory holding the running executable (no trailing slash), into buf. */
ts_status ts_proc_exe_dir(char *buf, size_t n, struct ts_err *err) TS_MUST_CHECK;

#endif
