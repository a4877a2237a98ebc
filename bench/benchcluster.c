/* benchcluster.c - the cluster a benchmark measures: a lib/local cluster with the benchmarks'
 * settings (a lease no simulated worker outlives, a short grace, the children's stderr ours,
 * TLS from a `tessera certs init` directory left as it is), stopped on every exit path, on
 * signals too. See benchlib.h. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"
#include "local/local.h"

/* For the signal handler: the cluster started last. */
static struct ts_local *volatile for_signal;

void bench_on_signal(int sig)
{
    ts_local_kill(for_signal);
    _exit(128 + sig);
}

ts_status bench_master_start(const char *bin, struct bench_master *m, struct ts_err *err)
{
    struct ts_local_opts o = { .bin = bin, .tmp_prefix = "ts-bench", .no_logs = true,
                               .no_state = true,
                               .lease_ms = m->lease_ms ? m->lease_ms : LEASE_MS,
                               .grace_ms = 1000,
                               .replicas = m->replicas > 0 ? m->replicas : 1,
                               .tls = m->tls_dir != NULL, .tls_dir = m->tls_dir,
                               .tls_as_is = true, .keep_process_tls = true };
    char exe[PATH_MAX];
    ts_status st;

    m->local = NULL;
    m->pid = 0;
    snprintf(exe, sizeof(exe), "%s/tessera-master", bin);
    if (access(exe, X_OK) != 0)
        return ts_err_set(err, TS_ENOTFOUND, "--bin: no executable %s (%s)", exe,
                          strerror(errno));
    setenv("TESSERA_LOG", "warn", 0); /* before any thread exists: main calls us first */
    if ((st = ts_local_start(&o, &m->local, err)))
        return st;
    for_signal = m->local;
    snprintf(m->target, sizeof(m->target), "%s", ts_local_master_addr(m->local));
    m->pid = ts_local_master_pid(m->local);
    return TS_OK;
}

bool bench_master_stop(struct bench_master *m)
{
    struct ts_err err = { 0 };
    bool clean;

    if (!m->local)
        return true;
    for_signal = NULL;
    if (!(clean = ts_local_stop(m->local, &err)))
        fprintf(stderr, "bench: %s\n", err.msg);
    ts_local_remove_logs(m->local);
    ts_local_free(m->local);
    m->local = NULL;
    m->pid = 0;
    return clean;
}
