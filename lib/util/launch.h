/* launch.h - starting Tessera's own processes: spawn one, learn the port it bound, stop it.
 *
 * Why one module: the CLI (`tessera up`, `tessera train`), the benchmarks and the C
 * integration tests all start masters, shards and workers, and each must do it the same safe
 * way: a child gets SIGTERM when its launcher dies (PR_SET_PDEATHSIG), so nothing outlives a
 * killed launcher; it starts with no signals blocked (launchers block them to wait in
 * sigwait); its output goes to a log file; its port is read from its --port-file, which every
 * service writes whole (ts_port_file_write), waiting until it is there or the child exits; and
 * it is stopped by pid, never by name: SIGTERM, a bounded wait, then SIGKILL.
 *
 * Ownership: a pid returned is the caller's child, to stop with ts_launch_stop or to reap.
 * Threads: call from one thread per set of children (waitpid reaps). */
#ifndef TS_UTIL_LAUNCH_H
#define TS_UTIL_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/err.h"

/* Forks and executes path with argv (argv[0] is what the child sees as its name). Its stdout
 * and stderr go to the file log (created or truncated) when log is not NULL, else its stdout
 * goes to out_fd when that is >= 0, else both stay ours. TS_EIO (nothing started) if log
 * cannot be created or fork fails; an exec failure shows as the child exiting with status
 * 127. */
ts_status ts_launch(const char *path, char *const argv[], const char *log, int out_fd,
                    pid_t *pid, struct ts_err *err) TS_MUST_CHECK;

/* Waits up to ms for the port that child pid writes to port_file. TS_EUNAVAIL if the child
 * exits first (it is then reaped, its wait status in *status when not NULL), TS_ETIMEDOUT
 * after ms. The messages name port_file; callers add which process and where its log is. */
ts_status ts_launch_wait_port(pid_t pid, const char *port_file, int ms, int *port, int *status,
                              struct ts_err *err) TS_MUST_CHECK;

/* Whether child pid has exited, reaping it if so (its wait status in *status when not
 * NULL). False for pid <= 0. */
bool ts_launch_exited(pid_t pid, int *status);

/* How a child ended, for messages: "exited with status 1", "was killed by signal 9 (Killed)"
 * (", core dumped" when it did). */
void ts_launch_describe(int status, char *buf, size_t cap);

/* SIGTERM to child pid, up to ms for it to exit, then SIGKILL; reaps it. Returns its wait
 * status (0 when pid <= 0 or it was reaped elsewhere). */
int ts_launch_stop(pid_t pid, int ms);

/* The last non-empty line of a child's log at path into out, for a message saying why it
 * ended ("no log" if the file cannot be read, "(empty)" if it has no such line). */
void ts_launch_last_line(const char *path, char *out, size_t n);

#endif
