/* reclaim.c - jobs that nobody will come back for are given back (docs/operations.md, "What
 * nobody comes back for"; issue 41).
 *
 * A shard frees a job when the master's releaser says so (ReleaseJob), which it does for the
 * jobs in its table once they end. Some never get there: a client that registered tensors
 * and never a worker (the master never heard of the job), or a job the master released while
 * this shard was cut off from it. Their memory would stay charged to --mem-budget for good and
 * refuse every later job. So each heartbeat lists this shard's jobs, the master answers with
 * those it holds nothing of, and a job it names without a break for --orphan-job-ms is
 * released as ReleaseJob would. Only the master's answers count: a shard that cannot reach it
 * keeps everything. See params.h for the contract. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "params.h"
#include "params_internal.h"
#include "util/log.h"

size_t shard_params_held_jobs(struct shard_params *sp, char (*ids)[TS_JOB_ID_MAX + 1],
                              size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs && n < max; i++)
        snprintf(ids[n++], TS_JOB_ID_MAX + 1, "%s", sp->jobs[i]->job.id);
    pthread_mutex_unlock(&sp->mu);
    return n;
}

/* Whether id is one of unknown[0..n). */
static bool named(const char *id, char *const *unknown, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(unknown[i], id))
            return true;
    return false;
}

void shard_params_orphans(struct shard_params *sp, char *const *unknown, size_t n,
                          int64_t now_ms)
{
    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs; i++) {
        struct shard_job *sj = sp->jobs[i];
        if (!named(sj->job.id, unknown, n)) {
            /* Known, or made after the heartbeat listed the jobs: the master has not said. */
            sj->orphan_since_ms = 0;
            continue;
        }
        if (!sj->orphan_since_ms) {
            sj->orphan_since_ms = now_ms;
            ts_log(TS_INFO, "shard", "job %s: the master holds nothing of it; released if it "
                   "still says so in %" PRId64 " ms (--orphan-job-ms)", sj->job.id,
                   sp->orphan_ms);
        }
        sj->orphan_seen_ms = now_ms;
    }
    pthread_mutex_unlock(&sp->mu);
}

size_t shard_params_reclaim_orphans(struct shard_params *sp,
                                    void (*end_job)(void *ctx, const char *job), void *ctx)
{
    char ids[SHARD_MAX_JOBS][TS_JOB_ID_MAX + 1];
    int64_t for_ms[SHARD_MAX_JOBS];
    size_t n = 0, done = 0;

    if (sp->orphan_ms <= 0)
        return 0;
    /* Orphaned without a break from since to seen, both the master's word: a shard that
     * cannot reach the master never counts the time it could not ask. */
    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs; i++) {
        struct shard_job *sj = sp->jobs[i];
        if (sj->orphan_since_ms && sj->orphan_seen_ms - sj->orphan_since_ms >= sp->orphan_ms) {
            for_ms[n] = sj->orphan_seen_ms - sj->orphan_since_ms;
            snprintf(ids[n++], sizeof(ids[0]), "%s", sj->job.id);
        }
    }
    pthread_mutex_unlock(&sp->mu);
    for (size_t i = 0; i < n; i++) {
        struct ts_err err = { 0 };
        uint64_t bytes;
        bool held;

        if (end_job)
            end_job(ctx, ids[i]);
        if (shard_params_release(sp, ids[i], &held, &bytes, &err)) {
            ts_log(TS_DEBUG, "shard", "job %s, unknown to the master: not released yet (%s)",
                   ids[i], err.msg);
            continue;
        }
        if (!held)
            continue;
        pthread_mutex_lock(&sp->mu);
        sp->orphans_released++;
        pthread_mutex_unlock(&sp->mu);
        done++;
        ts_log(TS_WARN, "shard", "job %s: the master has held nothing of it for %" PRId64 " ms "
               "(--orphan-job-ms): released, %" PRIu64 " parameter bytes freed", ids[i],
               for_ms[i], bytes);
    }
    return done;
}
