/* sdk_launch.c - tessera_launch_env: a process's place in a job, as its launcher (tessera run,
 * torchrun, srun, a Kubernetes indexed Job) wrote it into the environment (docs/launch.md). */
#include "client/sdk_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/names.h"

#define RANK_MAX 1023
#define WORKERS_MAX 1024

/* The first of names[] that is set and not empty (its name in *from), or NULL. */
static const char *first_set(const char *const *names, const char **from)
{
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && v[0]) {
            *from = *names;
            return v;
        }
    }
    return NULL;
}

/* The integer of the first variable of names[] set into *out (unset: *out stays). */
static ts_status env_int(const char *const *names, long lo, long hi, int *out,
                         const char **from, struct ts_err *err)
{
    const char *s = first_set(names, from);
    char *end;
    long x;

    if (!s)
        return TS_OK;
    errno = 0;
    x = strtol(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi)
        return ts_err_set(err, TS_EINVAL, "$%s: '%.40s' is not an integer in %ld..%ld (the "
                          "launcher's environment: docs/launch.md)", *from, s, lo, hi);
    *out = (int)x;
    return TS_OK;
}

/* The job id into l->job; returns the variable it came from (NULL: none). */
static const char *job_of(struct tessera_launch *l)
{
    const char *v = getenv("TESSERA_JOB"), *step;

    if (v && v[0]) {
        l->job = v;
        return "$TESSERA_JOB";
    }
    v = getenv("TORCHELASTIC_RUN_ID");   /* torchrun --rdzv-id; "none" when not given */
    if (v && v[0] && strcmp(v, "none")) {
        l->job = v;
        return "$TORCHELASTIC_RUN_ID";
    }
    v = getenv("SLURM_JOB_ID");
    if (v && v[0]) {   /* one job per step: every task of an srun agrees on it */
        step = getenv("SLURM_STEP_ID");
        snprintf(l->job_buf, sizeof(l->job_buf), "slurm-%.24s%s%.24s", v,
                 step && step[0] ? "." : "", step && step[0] ? step : "");
        l->job = l->job_buf;
        return "$SLURM_JOB_ID";
    }
    return NULL;
}

int tessera_launch_env(struct tessera_launch *l, struct tessera_error *out)
{
    static const char *const rank[] = { "TESSERA_RANK", "RANK", "SLURM_PROCID",
                                        "JOB_COMPLETION_INDEX", NULL };
    static const char *const workers[] = { "TESSERA_WORKERS", "WORLD_SIZE", "SLURM_NTASKS",
                                           NULL };
    static const char *const local[] = { "LOCAL_RANK", "SLURM_LOCALID", NULL };
    static const char *const master[] = { "TESSERA_MASTER", NULL };
    static const char *const restarts[] = { "TESSERA_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
                                            NULL };
    struct ts_err err = { 0 };
    const char *from, *job_from;
    int again = 0;
    ts_status st;

    memset(l, 0, sizeof(*l));
    l->rank = l->local_rank = -1;
    l->master = first_set(master, &from);
    job_from = job_of(l);
    if ((st = env_int(rank, 0, RANK_MAX, &l->rank, &l->rank_from, &err)) ||
        (st = env_int(workers, 1, WORKERS_MAX, &l->workers, &l->workers_from, &err)) ||
        (st = env_int(local, 0, RANK_MAX, &l->local_rank, &from, &err)) ||
        (st = env_int(restarts, 0, 1000000, &again, &from, &err)))
        return sdk_fail(out, &err);
    l->restarts = (unsigned)again;
    if (l->rank >= 0 && l->workers && l->rank >= l->workers) {
        ts_err_set(&err, TS_EINVAL, "$%s is %d, not below $%s %d: a rank counts from 0 to the "
                   "workers less one", l->rank_from, l->rank, l->workers_from, l->workers);
        return sdk_fail(out, &err);
    }
    if (l->job && ts_job_id_check(job_from, l->job, &err))
        return sdk_fail(out, &err);
    return sdk_ok(out);
}
