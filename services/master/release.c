/* release.c - the releaser: ended jobs are freed on every alive shard, then forgotten.
 * See jobs.h for when a job ends and master.h for the thread's contract. */
#include <stdio.h>
#include <string.h>

#include "master.h"
#include "cluster/shard.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/log.h"
#include "util/proc.h"

#define RELEASE_POLL_MS 100
#define RELEASE_CALL_MS 5000
#define RELEASE_DUE_MAX 64          /* jobs released per round */
#define RELEASE_WARN_MS 30000       /* a release refused this long is logged as a warning */

/* Asks every alive shard to free job, also after one refused: a shard's refusal can wait on
 * another's (a chain link from a head whose workers' pulls only that shard's ReleaseJob ends).
 * TS_OK once all of them have; else the first refusal. */
static ts_status release_everywhere(struct shard_channels *chan,
                                    const struct ts_members_view *v, const char *job,
                                    uint64_t *freed, struct ts_err *err)
{
    ts_status first = TS_OK;

    *freed = 0;
    for (size_t i = 0; i < v->nshards; i++) {
        Tessera__V1__ReleaseJobRequest req = TESSERA__V1__RELEASE_JOB_REQUEST__INIT;
        Tessera__V1__ReleaseJobResponse *r = NULL;
        struct ts_rpc_channel *ch = NULL;
        struct ts_err e = { 0 };
        ts_status st;

        req.job = (char *)job;
        if (!(st = shard_channels_get(chan, v->shards[i].addr, &ch, &e)))
            st = ts_shard_release_job(ch, &req, RELEASE_CALL_MS, &r, &e);
        if (st && !first) {
            first = ts_err_set(err, st, "shard %u: %s", v->shards[i].id, e.msg);
        } else if (!st) {
            *freed += r->bytes_freed;
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
    }
    return first;
}

void *releaser_main(void *arg)
{
    struct master *m = arg;
    char ids[RELEASE_DUE_MAX][TS_JOB_ID_MAX + 1];
    /* When each due job was first refused, to warn once it has waited long. */
    struct { char id[TS_JOB_ID_MAX + 1]; int64_t since; bool warned; } waiting[RELEASE_DUE_MAX];
    size_t nwaiting = 0;
    static struct shard_channels chan;   /* this thread's alone */

    while (!atomic_load(&m->stopping)) {
        struct ts_members_view v;
        struct ts_err err = { 0 };
        size_t n;

        /* Every alive shard heartbeats a few times a lease, naming its jobs: twice the longest
         * lease without a word of a kept job means no shard holds anything of it. */
        jobs_reclaim_unheld(m->jobs, ts_now_ms(),
                            2 * (int64_t)ts_members_max_lease(m->members, TS_MEMBER_SHARD));
        n = jobs_due(m->jobs, ts_now_ms(), ids, RELEASE_DUE_MAX);

        if (n && ts_members_view(m->members, true, &v, &err) == TS_OK) {
            for (size_t i = 0; i < n; i++) {
                uint64_t freed;
                size_t w = 0;

                err = (struct ts_err){ 0 };
                while (w < nwaiting && strcmp(waiting[w].id, ids[i]))
                    w++;
                if (release_everywhere(&chan, &v, ids[i], &freed, &err) == TS_OK) {
                    datamap_drop(&m->data, ids[i]);
                    jobs_released(m->jobs, ids[i], ts_now_ms());
                    ts_log(TS_INFO, "master", "job %s released: %llu parameter bytes freed on "
                           "%zu shards", ids[i], (unsigned long long)freed, v.nshards);
                    if (w < nwaiting)
                        waiting[w] = waiting[--nwaiting];
                    continue;
                }
                if (w == nwaiting && nwaiting < RELEASE_DUE_MAX) {
                    snprintf(waiting[w].id, sizeof(waiting[w].id), "%s", ids[i]);
                    waiting[w].since = ts_now_ms();
                    waiting[w].warned = false;
                    nwaiting++;
                }
                if (w < nwaiting && !waiting[w].warned &&
                    ts_now_ms() - waiting[w].since > RELEASE_WARN_MS) {
                    ts_log(TS_WARN, "master", "job %s: not released yet (%s); retrying", ids[i],
                           err.msg);
                    waiting[w].warned = true;
                }
            }
            ts_members_view_free(&v);
        }
        ts_sleep_ms(RELEASE_POLL_MS);
    }
    shard_channels_free(&chan);
    return NULL;
}
