/* repair.c - see repair.h. */
#include "repair.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "cluster/shard.h"
#include "tables.h"
#include "params_internal.h"
#include "testhooks.h"
#include "util/log.h"
#include "util/proc.h"

#define REPAIR_POLL_MS 100
#define REPAIR_RETRY_MS 500     /* after a pass that could not reach every new member */

struct todo {
    struct shard_job *sj;
    struct shard_tensor *t;
    uint32_t p;
};

/* The flagged partitions, their flags cleared; NULL with *n 0 if none (or out of memory: the
 * flags stay for the next pass). Called with life held for reading. */
static struct todo *collect(struct shard_params *sp, size_t *n)
{
    struct todo *all = NULL;
    size_t cap;

    *n = 0;
    pthread_mutex_lock(&sp->mu);
    cap = sp->resyncs;
    if (cap && (all = calloc(cap, sizeof(*all)))) {
        for (size_t j = 0; j < sp->njobs; j++)
            for (size_t i = 0; i < SHARD_MAX_TENSORS; i++) {
                struct shard_tensor *t = sp->jobs[j]->tensors[i];
                for (uint32_t p = 0; t && p < t->nparts && *n < cap; p++)
                    if (t->resync[p]) {
                        t->resync[p] = false;
                        all[(*n)++] = (struct todo){ sp->jobs[j], t, p };
                    }
            }
        sp->resyncs = 0;   /* flags of released jobs went with them */
        sp->inflight += *n;   /* moves still to make until each is done (shard_params_moves) */
    }
    pthread_mutex_unlock(&sp->mu);
    return all;
}

/* Sends one partition's image to its next shard; false if it should be tried again. */
static bool resync(struct repair *r, struct chain_links *links, const struct todo *td)
{
    struct ts_part *p;
    uint32_t next = 0;
    bool follows = true;
    uint64_t version;
    struct ts_err e = { 0 };
    ts_status st;
    size_t n;

    p = shard_params_find(r->sp, td->sj, td->t->id, td->p, &follows, &next);
    if (!p || !next) {   /* no longer this shard's to send */
        shard_params_put(p);
        return true;
    }
    n = ts_part_image_bytes(p);
    hook_reach(HOOK_REPAIR);
    if ((st = chain_image_room(links, n, &e)) ||
        (st = ts_part_image(p, links->image, n, &version, &e)) ||
        (st = chain_send(links, atomic_load(&r->dp->cluster), td->sj->job.id, next, td->t->id,
                         td->p, version, &(struct chain_image){
                             .whole = &(struct iovec){ links->image, n }, .nwhole = 1,
                             .values_fd = -1 }, &r->stop, &e))) {
        shard_params_put(p);
        /* A newer image is there (done), or the chain changed again (the rechain flags it
         * anew). */
        if (st == TS_ESTATE || st == TS_ESTALE)
            return true;
        ts_log(TS_WARN, "repair", "job %s tensor '%s' partition %u to shard %u: %s",
               td->sj->job.id, td->t->name, td->p, next, e.msg);
        /* Unreachable, or a joining shard not yet told of the job (introduce, next pass). */
        return st != TS_EUNAVAIL && st != TS_ENOTFOUND;
    }
    if (!follows)
        ts_part_publish(p, version);
    shard_params_put(p);
    atomic_fetch_add(&r->sp->copies_sent, 1);
    ts_log(TS_INFO, "repair", "job %s tensor '%s' partition %u: shard %u has its copy at "
           "version %" PRIu64, td->sj->job.id, td->t->name, td->p, next, version);
    return true;
}

/* Registers every tensor of sj with joining shard id, which holds none of its copies until
 * their heads' images come (docs/replication.md, "Joining"); returns how many tensors it
 * had, or -1 if a call failed (tried again next pass). Life held for reading. */
static int64_t introduce_job(struct repair *r, struct ts_cluster *cl, struct shard_job *sj,
                             uint32_t id)
{
    uint32_t count;

    pthread_mutex_lock(&r->sp->mu);
    count = sj->ntensors;
    pthread_mutex_unlock(&r->sp->mu);
    for (uint32_t i = 0; i < SHARD_MAX_TENSORS; i++) {
        Tessera__V1__JobSpec js;
        Tessera__V1__TensorSpec ts;
        Tessera__V1__RegisterTensorRequest req;
        Tessera__V1__RegisterTensorResponse *resp = NULL;
        struct shard_tensor *t = shard_params_tensor(r->sp, sj, i);
        struct ts_err e = { 0 };

        if (!t)
            continue;
        params_tensor_request(sj, t, &js, &ts, &req);
        if (ts_cluster_register_tensor(cl, id, &req, 0, &resp, &e)) {
            ts_log(TS_WARN, "repair", "job %s tensor '%s': telling joining shard %u of it: %s",
                   sj->job.id, t->name, id, e.msg);
            return -1;
        }
        /* It knew the tensor already (it joins again), under another salt: its chains and
         * ours differ. Never seen; said loudly should it ever happen. */
        if (resp->placement_salt != t->salt)
            ts_log(TS_ERROR, "repair", "job %s tensor '%s': joining shard %u places it with "
                   "placement salt %u, this shard with %u", sj->job.id, t->name, id,
                   resp->placement_salt, t->salt);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return count;
}

/* Notes that joining shard id has count tensors of sj; forgets shards that no longer join. */
static void introduced(struct shard_params *sp, struct shard_job *sj, uint32_t id,
                       uint32_t count, const uint32_t *joining, size_t nj)
{
    size_t k = 0;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sj->nintroduced; i++) {
        bool still = false;
        for (size_t j = 0; j < nj; j++)
            still |= joining[j] == sj->introduced[i].id;
        if (still && sj->introduced[i].id != id)
            sj->introduced[k++] = sj->introduced[i];
    }
    sj->nintroduced = k;
    if (k < SHARD_MAX_JOINING) {
        sj->introduced[k].id = id;
        sj->introduced[k].tensors = count;
        sj->nintroduced++;
    }
    pthread_mutex_unlock(&sp->mu);
}

/* Tells each joining shard of the jobs (and tensors) it does not know yet: a shard that joins
 * knows nothing of the jobs that started before it. Life held for reading. */
static void introduce(struct repair *r)
{
    struct ts_cluster *cl = atomic_load(&r->dp->cluster);
    uint32_t joining[SHARD_MAX_JOINING], self = atomic_load(&r->dp->self);
    size_t nj = cl ? ts_cluster_joining(cl, joining, SHARD_MAX_JOINING) : 0;

    if (cl && ts_cluster_is_joining(cl, self))
        return;   /* a joining shard introduces nothing */
    for (size_t k = 0; k < nj && !atomic_load(&r->stop); k++)
        for (size_t j = 0; !atomic_load(&r->stop); j++) {
            struct shard_job *sj = NULL;
            bool done = false;
            int64_t count;

            pthread_mutex_lock(&r->sp->mu);
            if (j < r->sp->njobs) {   /* no job is released under the pass: indices hold */
                sj = r->sp->jobs[j];
                done = params_introduced(sj, joining[k]);
            }
            pthread_mutex_unlock(&r->sp->mu);
            if (!sj)
                break;
            if (!done && (count = introduce_job(r, cl, sj, joining[k])) >= 0)
                introduced(r->sp, sj, joining[k], (uint32_t)count, joining, nj);
        }
}

/* Frees the partitions whose chains left this shard, once unused. */
static void reap(struct shard_params *sp)
{
    size_t n;

    pthread_mutex_lock(&sp->mu);
    n = sp->ndrops;
    pthread_mutex_unlock(&sp->mu);
    if (!n)
        return;
    pthread_rwlock_wrlock(&sp->life);   /* walks read partitions without mu */
    shard_params_reap(sp);
    pthread_rwlock_unlock(&sp->life);
}

/* A job the master does not know is released as ReleaseJob would (reclaim.c): its waiting
 * pulls end first. */
static void end_job(void *ctx, const char *job)
{
    struct dataplane *dp = ctx;

    if (dp->n)
        dataplane_end_job(dp, job);
}

/* Jobs with a partition whose every copy is lost: the master hears of each, and rolls it back
 * to its last snapshot (docs/replication.md, "Rollback"). */
static void report_lost(struct repair *r)
{
    char ids[8][TS_JOB_ID_MAX + 1];
    uint32_t gens[8];
    size_t n = shard_params_lost_jobs(r->sp, ids, gens, 8);

    for (size_t i = 0; i < n; i++)
        if (!atomic_load(&r->dp->cluster) ||
            !ts_cluster_report_lost(atomic_load(&r->dp->cluster), ids[i],
                                    atomic_load(&r->dp->self), gens[i]))
            shard_params_mark_lost(r->sp, ids[i]);   /* the next pass tries again */
}

static void *repair_main(void *arg)
{
    struct repair *r = arg;

    while (!atomic_load(&r->stop)) {
        struct chain_links links = { .self = atomic_load(&r->dp->self),
                                     .keys = r->dp->require_auth ? dp_access_chain_key : NULL,
                                     .keys_ctx = r->dp };
        struct todo *todo;
        size_t n;
        bool again = false;

        ts_sleep_ms(REPAIR_POLL_MS);
        report_lost(r);
        reap(r->sp);
        (void)shard_params_expire_arms(r->sp, ts_now_ms());
        shard_tables_expire_holds(r->sp, atomic_load(&r->dp->cluster), ts_now_ms());
        (void)shard_params_reclaim_orphans(r->sp, end_job, r->dp);
        pthread_rwlock_rdlock(&r->sp->life);   /* no job is released under the pass */
        introduce(r);
        todo = collect(r->sp, &n);
        for (size_t i = 0; i < n; i++) {
            bool done = atomic_load(&r->stop) || resync(r, &links, &todo[i]);
            pthread_mutex_lock(&r->sp->mu);
            if (!done) {
                todo[i].t->resync[todo[i].p] = true;
                r->sp->resyncs++;
                again = true;
            }
            r->sp->inflight--;
            pthread_mutex_unlock(&r->sp->mu);
        }
        /* The links name their jobs on the other shards: closed, they let those end. */
        chain_links_close(&links);
        pthread_rwlock_unlock(&r->sp->life);
        free(todo);
        if (again)
            ts_sleep_ms(REPAIR_RETRY_MS);
    }
    return NULL;
}

void repair_start(struct repair *r, struct shard_params *sp, struct dataplane *dp)
{
    memset(r, 0, sizeof(*r));
    r->sp = sp;
    r->dp = dp;
    r->started = pthread_create(&r->thread, NULL, repair_main, r) == 0;
    if (!r->started)
        ts_log(TS_ERROR, "repair", "cannot start the repair thread: a chain that gains a "
               "shard gets its copy only with the next step");
}

void repair_stop(struct repair *r)
{
    if (!r->started)
        return;
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    r->started = false;
}
