/* rollback.c - a job back to a snapshot on this shard, when a partition of it lost every copy
 * (docs/replication.md, "Rollback"). See params.h for the contract; the master drives it
 * (services/master/rollback.c): fence and restore on every shard, then reopen on every shard. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "params_internal.h"
#include "durable.h"
#include "tables.h"
#include "testhooks.h"
#include "util/log.h"

/* Partition p of t back to the snapshot: its place in the chain under cl's map, created if
 * this shard lacks it, loaded at step. Called with life held for reading. */
static ts_status rollback_part(struct shard_params *sp, struct shard_job *sj,
                               struct ts_cluster *cl, uint32_t my_id, struct shard_tensor *t,
                               uint32_t p, struct params_restore *rc, uint64_t step,
                               uint32_t generation, bool *done, struct ts_err *err)
{
    struct params_place at;
    struct ts_part *part;
    ts_status st;

    *done = false;
    if ((st = params_place_of(cl, my_id, t, p, &at, err)) || !at.held)
        return st;
    pthread_mutex_lock(&sp->mu);
    t->follows[p] = !at.head;
    t->next[p] = at.next;
    t->resync[p] = false;   /* every member of the chain loads the same snapshot */
    if (!t->parts[p] && !(st = params_add_copy(sp, sj, t, p, &at, err)))
        /* Not loaded yet: a push or pull of a connection from before the rollback that finds
         * it is refused as one of an older generation, not served from version 0. */
        ts_part_set_generation(t->parts[p], generation);
    part = t->parts[p];
    pthread_mutex_unlock(&sp->mu);
    if (st)
        return st;
    rc->pm = rc->tm->partitions[p];
    if ((st = ts_part_rollback(part, step, generation, params_restore_load, rc, err)))
        return st;
    ts_part_hold(part, at.head && (at.len > 1 || shard_durable_holds(t)));
    /* --redo-dir: the image the job went back to supersedes the log's */
    if (at.head && (st = shard_durable_part(sj, t, p, part, false, err)))
        return st;
    pthread_mutex_lock(&sp->mu);
    t->lost[p] = false;
    pthread_mutex_unlock(&sp->mu);
    *done = true;
    return TS_OK;
}

/* The snapshot of job named hex, which must be of that job at that step. A name the store
 * does not know is the request's mistake (TS_EINVAL), not TS_ENOTFOUND: that code says the
 * job is not on this shard, and the master skips such a shard. */
static ts_status load_manifest(struct shard_params *sp, const char *job, const char *hex,
                               uint64_t step, ts_manifest **out, struct ts_err *err)
{
    uint8_t id[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };
    ts_status st;

    if (!sp->store)
        return ts_err_set(err, TS_ESTATE, "this shard runs without --store: it cannot read "
                          "snapshots");
    if ((st = ts_snap_resolve(sp->store, hex, id, NULL, &e)) ||
        (st = ts_manifest_load(sp->store, id, out, &e)))
        return ts_err_set(err, st == TS_ENOTFOUND ? TS_EINVAL : st, "snapshot_id: %.80s: %s",
                          hex, e.msg);
    if (!(*out)->job || strcmp((*out)->job->id, job) || (*out)->step != step) {
        st = ts_err_set(err, TS_EINVAL, "snapshot_id: %.12s is job '%s' at step %" PRIu64
                        ", not '%s' at %" PRIu64, hex, (*out)->job ? (*out)->job->id : "?",
                        (*out)->step, job, step);
        ts_manifest_free(*out);
        *out = NULL;
    }
    return st;
}

/* Every chunk of the partitions of t this shard will load is in the store (their contents are
 * checked as they are read). */
static ts_status chunks_present(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                const struct shard_tensor *t, const ts_tensor_manifest *tm,
                                struct ts_err *err)
{
    char hex[TS_STORE_HEX_LEN + 1];

    for (uint32_t p = 0; p < t->nparts; p++) {
        const ts_partition_manifest *pm = tm->partitions[p];
        size_t nv = pm->n_value_chunks, n = nv + pm->n_state_chunks;
        struct params_place at;
        ts_status st;

        if ((st = params_place_of(cl, my_id, t, p, &at, err)))
            return st;
        for (size_t k = 0; at.held && k < n; k++) {
            const ProtobufCBinaryData *c = k < nv ? &pm->value_chunks[k]
                                                  : &pm->state_chunks[k - nv];
            if (!ts_store_has(sp->store, c->data))
                return ts_err_set(err, TS_ECORRUPT, "snapshot_id: chunk %.12s of tensor '%s' "
                                  "partition %u is missing from the store",
                                  ts_store_hex(c->data, hex), t->name, p);
        }
    }
    return TS_OK;
}

/* The job is on this shard: a NOT_FOUND from what its restore reads (a tensor the snapshot
 * lacks, a chunk gone from the store) must not read as "the job is not on this shard", which
 * the master takes for a shard to skip (services/master/rollback.c, each_shard): skipped at
 * the restore, the shard was then found unfenced at the open, and the real cause never
 * shown. TS_ECORRUPT (DATA_LOSS) instead, the message kept. */
static ts_status not_a_skip(ts_status st, struct ts_err *err)
{
    if (st != TS_ENOTFOUND)
        return st;
    if (err)
        err->code = TS_ECORRUPT;
    return TS_ECORRUPT;
}

ts_status shard_params_rollback_check(struct shard_params *sp, struct ts_cluster *cl,
                                      uint32_t my_id, const char *job, const char *hex,
                                      uint64_t step, ts_manifest **out, struct ts_err *err)
{
    ts_manifest *m = NULL;
    struct shard_job *sj;
    ts_status st;

    pthread_rwlock_rdlock(&sp->life);   /* the job is not released under the check */
    if (!(sj = params_find_job(sp, job)))
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not on this shard", job);
    else if (!(st = load_manifest(sp, job, hex, step, &m, err)))
        st = shard_tables_rollback_check(sp, sj, m, err);
    for (size_t i = 0; !st && i < SHARD_MAX_TENSORS; i++) {
        const ts_tensor_manifest *tm;
        struct shard_tensor *t;

        pthread_mutex_lock(&sp->mu);
        t = sj->tensors[i];
        pthread_mutex_unlock(&sp->mu);
        if (t && (!(tm = params_manifest_tensor(m, t, &st, err)) ||
                  (st = chunks_present(sp, cl, my_id, t, tm, err)))) {
            st = not_a_skip(st, err);
            ts_err_prefix(err, "snapshot_id %.12s", hex);
        }
    }
    pthread_rwlock_unlock(&sp->life);
    if (st)
        ts_manifest_free(m);
    else
        *out = m;
    return st;
}

ts_status shard_params_fence(struct shard_params *sp, const char *job, uint64_t step,
                             struct ts_err *err)
{
    struct shard_job *sj;
    ts_status st = TS_OK;

    pthread_rwlock_rdlock(&sp->life);
    if (!(sj = params_find_job(sp, job)))
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not on this shard", job);
    else
        atomic_store(&sj->fence, step + 1);
    pthread_rwlock_unlock(&sp->life);
    return st;
}

ts_status shard_params_rollback(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                const char *job, const ts_manifest *m, const char *hex,
                                uint64_t step, uint32_t generation, uint64_t *restored,
                                struct ts_err *err)
{
    struct params_restore rc = { .sp = sp, .m = m };
    struct shard_job *sj;
    ts_status st = TS_OK;

    *restored = 0;
    /* Not under a snapshot's write: the tables' runs it appends to are dropped here. Lock
     * order: snapshots, then walks (params.c). */
    pthread_mutex_lock(&sp->snap_mu);
    pthread_rwlock_rdlock(&sp->life);   /* no job is released under the rollback */
    if (!(sj = params_find_job(sp, job))) {
        pthread_rwlock_unlock(&sp->life);
        pthread_mutex_unlock(&sp->snap_mu);
        return ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not on this shard", job);
    }
    if (atomic_load(&sj->fence) != step + 1)
        st = ts_err_set(err, TS_ESTATE, "job '%s' is not fenced for step %" PRIu64
                        " (shard_params_fence first)", job, step);
    for (size_t i = 0; !st && i < SHARD_MAX_TENSORS; i++) {
        struct shard_tensor *t;

        pthread_mutex_lock(&sp->mu);
        t = sj->tensors[i];
        pthread_mutex_unlock(&sp->mu);
        if (!t || !(rc.tm = params_manifest_tensor(m, t, &st, err)))
            continue;
        for (uint32_t p = 0; !st && p < t->nparts; p++) {
            bool done;
            st = rollback_part(sp, sj, cl, my_id, t, p, &rc, step, generation, &done, err);
            *restored += done;
        }
        if (st)
            ts_err_prefix(err, "tensor '%s'", t->name);
    }
    if (!st)   /* the tables: their rows as the snapshot had them, on the ring as it is */
        st = shard_tables_rollback(sp, cl, my_id, sj, m, hex, step, err);
    st = not_a_skip(st, err);   /* past the job's own look-up above */
    pthread_rwlock_unlock(&sp->life);
    pthread_mutex_unlock(&sp->snap_mu);
    if (!st)
        ts_log(TS_WARN, "shard", "job %s: back to step %" PRIu64 " of snapshot %.12s (%" PRIu64
               " partitions loaded); waiting for the master to reopen it", job, step, hex,
               *restored);
    return st;
}

ts_status shard_params_move_tables(struct shard_params *sp, struct ts_cluster *cl,
                                   uint32_t my_id, const char *job, const char *hex,
                                   uint64_t step, uint64_t epoch, uint32_t *tables,
                                   uint64_t *rows, uint32_t *held_ms, struct ts_err *err)
{
    ts_manifest *m = NULL;
    struct shard_job *sj;
    ts_status st;

    *tables = 0;
    *rows = 0;
    hook_reach(HOOK_MOVE);
    /* Not under a snapshot's write (the runs it appends to are dropped), nor a release. */
    pthread_mutex_lock(&sp->snap_mu);
    pthread_rwlock_rdlock(&sp->life);
    if (!(sj = params_find_job(sp, job)))
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not on this shard", job);
    else if (!(st = load_manifest(sp, job, hex, step, &m, err)) &&
             !(st = shard_tables_rollback_check(sp, sj, m, err)))
        st = shard_tables_move(sp, cl, my_id, sj, m, hex, step, epoch, tables, rows, held_ms,
                               err);
    st = sj ? not_a_skip(st, err) : st;
    pthread_rwlock_unlock(&sp->life);
    pthread_mutex_unlock(&sp->snap_mu);
    ts_manifest_free(m);
    if (!st)
        ts_log(TS_INFO, "shard", "job %s: %u tables placed on the map of epoch %" PRIu64 " from "
               "snapshot %.12s at step %" PRIu64 " (a move after a join or a death, no "
               "rollback): %" PRIu64 " rows served here; its pushes held %u ms", job, *tables,
               epoch, hex, step, *rows, *held_ms);
    return st;
}

ts_status shard_params_reopen(struct shard_params *sp, const char *job, uint32_t generation,
                              struct ts_err *err)
{
    struct shard_job *sj;
    uint64_t fence;

    pthread_rwlock_rdlock(&sp->life);
    if (!(sj = params_find_job(sp, job))) {
        pthread_rwlock_unlock(&sp->life);
        return ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not on this shard", job);
    }
    if (!(fence = atomic_load(&sj->fence))) {
        pthread_rwlock_unlock(&sp->life);
        return ts_err_set(err, TS_ESTATE, "job '%s' is not rolling back on this shard "
                          "(open it after the restore)", job);
    }
    atomic_store(&sj->rollback_step, fence - 1);
    atomic_store(&sj->rollbacks, generation);
    atomic_store(&sj->state_lost, false);   /* the snapshot's state is whole again */
    atomic_store(&sj->fence, 0);
    pthread_rwlock_unlock(&sp->life);
    ts_log(TS_INFO, "shard", "job %s: open again at step %" PRIu64 " (rollback %u)", job,
           fence - 1, generation);
    return TS_OK;
}

void shard_params_mark_lost(struct shard_params *sp, const char *id)
{
    struct shard_job *sj;

    pthread_mutex_lock(&sp->mu);
    if ((sj = params_find_job(sp, id)))
        atomic_store(&sj->lost_report, true);
    pthread_mutex_unlock(&sp->mu);
}

size_t shard_params_lost_jobs(struct shard_params *sp, char (*ids)[TS_JOB_ID_MAX + 1],
                              uint32_t *gens, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&sp->mu);
    for (size_t j = 0; j < sp->njobs && n < max; j++)
        if (atomic_exchange(&sp->jobs[j]->lost_report, false)) {
            gens[n] = atomic_load(&sp->jobs[j]->lost_gen);
            snprintf(ids[n++], TS_JOB_ID_MAX + 1, "%s", sp->jobs[j]->job.id);
        }
    pthread_mutex_unlock(&sp->mu);
    return n;
}
