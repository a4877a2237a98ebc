/* repair.c - see repair.h. */
#include "repair.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"
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
    if (!p || follows || !next)   /* no longer this shard's to send */
        return true;
    n = ts_part_image_bytes(p);
    if ((st = chain_image_room(links, n, &e)) ||
        (st = ts_part_image(p, links->image, n, &version, &e)) ||
        (st = chain_send(links, atomic_load(&r->dp->cluster), td->sj->job.id, next, td->t->id,
                         td->p, version, links->image, n, &r->stop, &e))) {
        if (st == TS_ESTATE)   /* the member already holds a newer image: done */
            return true;
        ts_log(TS_WARN, "repair", "job %s tensor '%s' partition %u to shard %u: %s",
               td->sj->job.id, td->t->name, td->p, next, e.msg);
        return st != TS_EUNAVAIL;
    }
    ts_part_publish(p, version);
    atomic_fetch_add(&r->sp->copies_sent, 1);
    ts_log(TS_INFO, "repair", "job %s tensor '%s' partition %u: shard %u has its copy at "
           "version %" PRIu64, td->sj->job.id, td->t->name, td->p, next, version);
    return true;
}

/* Jobs with a partition whose every copy is lost: the master hears of each, and rolls it back
 * to its last snapshot (docs/replication.md, "Rollback"). */
static void report_lost(struct repair *r)
{
    char ids[8][TS_JOB_ID_MAX + 1];
    size_t n = shard_params_lost_jobs(r->sp, ids, 8);

    for (size_t i = 0; i < n; i++)
        if (!atomic_load(&r->dp->cluster) ||
            !ts_cluster_report_lost(atomic_load(&r->dp->cluster), ids[i],
                                    atomic_load(&r->dp->self)))
            shard_params_mark_lost(r->sp, ids[i]);   /* the next pass tries again */
}

static void *repair_main(void *arg)
{
    struct repair *r = arg;

    while (!atomic_load(&r->stop)) {
        struct chain_links links = { 0 };
        struct todo *todo;
        size_t n;
        bool again = false;

        ts_sleep_ms(REPAIR_POLL_MS);
        report_lost(r);
        pthread_rwlock_rdlock(&r->sp->life);   /* no job is released under the pass */
        todo = collect(r->sp, &n);
        for (size_t i = 0; i < n && !atomic_load(&r->stop); i++)
            if (!resync(r, &links, &todo[i])) {
                pthread_mutex_lock(&r->sp->mu);
                todo[i].t->resync[todo[i].p] = true;
                r->sp->resyncs++;
                pthread_mutex_unlock(&r->sp->mu);
                again = true;
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
