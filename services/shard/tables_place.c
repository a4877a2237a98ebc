/* tables_place.c - a shard's sparse tables placed anew (tables.h): when the map changes
 * (copies take over, or the job goes back to a snapshot), a join's hold and move, and a
 * rollback's load. Registration and snapshots are tables.c's. */
#include "tables.h"
#include "params_internal.h"
#include "tables_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durable.h"
#include "rowcopy.h"
#include "util/log.h"
#include "util/proc.h"

/* ---- when a shard goes: its copies take over, or the job goes back to a snapshot ---- */

/* Whether t is held for a join's move, its time not passed. */
static bool holding(struct shard_table *t)
{
    return atomic_load(&t->hold) && ts_now_ms() < atomic_load(&t->hold_until_ms);
}

bool shard_tables_held(struct shard_table *t, uint64_t step)
{
    uint64_t hold = atomic_load(&t->hold);

    return hold && step + 1 >= hold && holding(t);   /* a push of step S makes step S + 1 */
}

/* The map changed: job sj's rows, checked (mu held). A table held for a join's move whose
 * rows are only misplaced is not reported: the move places it on the new map (or its hold
 * ends first, shard_tables_expire_holds, which checks it again). Rows lost are reported
 * held or not: no move brings them back. */
static void rechain_job(struct shard_job *sj, struct ts_cluster *cl)
{
    for (uint32_t i = 0; sj->ntables && i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = sj->tables[i];
        enum rowcopy_check c;
        if (!t || atomic_load(&sj->fence) || (c = rowcopy_rechain(t, cl)) == ROWCOPY_HELD ||
            (c == ROWCOPY_MISPLACED && holding(t)))
            continue;
        if (!atomic_load(&sj->lost_report))
            ts_log(TS_WARN, "shard", "job %s table '%s': the shards holding its rows changed "
                   "(%zu when it was placed%s): some rows lost every copy or are misplaced; "
                   "the job goes back to its last snapshot", sj->job.id, t->name, t->nmembers,
                   t->replicated ? ", 2 copies of each row" : ", one copy of each row");
        atomic_store(&sj->lost_gen, atomic_load(&sj->rollbacks));
        atomic_store(&sj->state_lost, true);
        atomic_store(&sj->lost_report, true);
        break;
    }
}

void shard_tables_rechain(struct shard_params *sp, struct ts_cluster *cl)
{
    for (size_t j = 0; j < sp->njobs; j++)
        rechain_job(sp->jobs[j], cl);
}

void shard_tables_unhold(struct shard_params *sp, struct shard_job *sj)
{
    bool any = atomic_load(&sj->tables_held_until) != 0;

    pthread_mutex_lock(&sp->mu);   /* no map is taken up meanwhile (shard_params_rechain) */
    for (uint32_t i = 0; sj->ntables && i < SHARD_MAX_TABLES; i++)
        any |= sj->tables[i] && atomic_load(&sj->tables[i]->hold);
    if (any && atomic_load(&sp->rechained) != atomic_load(&sj->held_epoch)) {
        /* The map moved since the hold began, and its check of the held tables was left to
         * the move: the hold ends at its time, with that check (shard_tables_expire_holds). */
        pthread_mutex_unlock(&sp->mu);
        ts_log(TS_WARN, "shard", "job %s: the hold of its tables for a join's move is given "
               "up after the map moved; it ends at its time, and the map is checked then",
               sj->job.id);
        return;
    }
    for (uint32_t i = 0; sj->ntables && i < SHARD_MAX_TABLES; i++)
        if (sj->tables[i])
            atomic_store(&sj->tables[i]->hold, 0);
    atomic_store(&sj->tables_held_until, 0);
    pthread_mutex_unlock(&sp->mu);
}

void shard_tables_expire_holds(struct shard_params *sp, struct ts_cluster *cl, int64_t now_ms)
{
    pthread_mutex_lock(&sp->mu);
    for (size_t j = 0; j < sp->njobs; j++) {
        struct shard_job *sj = sp->jobs[j];
        bool expired = false;
        for (uint32_t i = 0; sj->ntables && i < SHARD_MAX_TABLES; i++) {
            struct shard_table *t = sj->tables[i];
            if (t && atomic_load(&t->hold) && now_ms >= atomic_load(&t->hold_until_ms)) {
                atomic_store(&t->hold, 0);
                expired = true;
            }
        }
        if (atomic_load(&sj->tables_held_until) && now_ms >= atomic_load(&sj->tables_held_until))
            atomic_store(&sj->tables_held_until, 0);
        if (!expired)
            continue;
        ts_log(TS_WARN, "shard", "job %s: its tables were held %d s for a join's move that did "
               "not come; they take pushes again%s", sj->job.id, SHARD_TABLE_HOLD_MS / 1000,
               cl ? ", and a map that moved their rows sends the job back to a snapshot" : "");
        if (cl)
            rechain_job(sj, cl);
    }
    pthread_mutex_unlock(&sp->mu);
}

ts_status shard_tables_rollback_check(struct shard_params *sp, struct shard_job *sj,
                                      const ts_manifest *m, struct ts_err *err)
{
    for (size_t i = 0; sj->ntables && i < m->n_tables; i++)
        for (size_t r = 0; r < m->tables[i]->n_runs; r++)
            for (size_t c = 0; c < m->tables[i]->runs[r]->n_chunks; c++)
                if (!ts_store_has(sp->store, m->tables[i]->runs[r]->chunks[c].data))
                    return ts_err_set(err, TS_ECORRUPT, "table '%s': a chunk of the run of "
                                      "shard %u at step %" PRIu64 " is not in the store",
                                      m->tables[i]->spec->name, m->tables[i]->runs[r]->shard_id,
                                      m->tables[i]->runs[r]->step);
    return TS_OK;
}

/* The snapshot's tables this shard does not hold, made empty (placed below): a shard that
 * joined the map (a new one, or one restarted) took no registration of the job's tables, and
 * the rollback or the join's move places rows on it. hold: a move's held step + 1 (0: a
 * rollback, which fences the job), which each is held at from the start: a worker's push may
 * find it before its load. */
static ts_status adopt_tables(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                              struct shard_job *sj, const ts_manifest *m, uint64_t hold,
                              struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; !st && i < m->n_tables; i++) {
        Tessera__V1__RegisterTableRequest req = TESSERA__V1__REGISTER_TABLE_REQUEST__INIT;
        struct shard_table *t = NULL;

        req.table = m->tables[i]->spec;
        req.table_id = m->tables[i]->id;
        if ((st = tables_check_spec(&req, err)) || (st = tables_find(sj, &req, &t, err)) || t)
            continue;
        if ((st = tables_create(sp, cl, my_id, sj, &req, &t, err)))
            break;
        if ((st = shard_durable_table(sp->durable, sj, t, err))) {
            tables_free_one(t);
            break;
        }
        atomic_store(&t->hold_until_ms, atomic_load(&sj->tables_held_until));
        atomic_store(&t->hold, hold);
        sj->tables[t->id] = t;
        sj->ntables++;
        ts_log(TS_INFO, "shard", "job %s: table %u '%s' taken from the snapshot (this shard "
               "joined the map since it was registered)", sj->job.id, t->id, t->name);
    }
    pthread_mutex_unlock(&sp->mu);
    if (st)
        ts_err_prefix(err, "the snapshot's tables");
    return st;
}

/* shard_tables_move asked again for the move done here last (a master restarted in its
 * middle asks every shard): TS_OK with what this shard serves now if every table is still
 * placed on the ring of the map it was moved to (the members it has now), else TS_ESTATE:
 * the map moved since, and what that does to the rows is a rollback's to mend. */
static ts_status moved_before(struct shard_params *sp, struct ts_cluster *cl,
                              struct shard_job *sj, uint32_t *tables,
                              uint64_t *rows, uint32_t *held_ms, struct ts_err *err)
{
    *held_ms = 0;
    for (uint32_t i = 0; i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = shard_params_table(sp, sj, i);
        bool same;
        if (!t)
            continue;
        pthread_rwlock_rdlock(&t->lock);
        if ((same = rowcopy_on_ring(t, cl))) {
            (*tables)++;
            *rows += ts_table_count(t->t);
        }
        pthread_rwlock_unlock(&t->lock);
        if (!same)
            return ts_err_set(err, TS_ESTATE, "job '%s': its tables were moved from this "
                              "snapshot already, and the map has moved table '%s' since",
                              sj->job.id, t->name);
    }
    ts_log(TS_WARN, "shard", "job %s: its tables were moved from snapshot %.12s here "
           "already (asked again: a master that restarted)", sj->job.id, sj->moved_from);
    return TS_OK;
}

/* Table t emptied, placed on the ring of cl's map (its own rows and copies) and loaded from m
 * at step; moved: the epoch of a join's move (0: a rollback), which ends the hold, and which a
 * table that took a push past step (its hold ended first) refuses: the load would lose it. */
static ts_status place_anew(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                            struct shard_job *sj, struct shard_table *t, const ts_manifest *m,
                            const char *hex, uint64_t step, uint64_t moved, struct ts_err *err)
{
    Tessera__V1__TableSpec spec;
    ts_status st;

    tables_spec(t, &spec);
    pthread_rwlock_wrlock(&t->lock);
    if (moved && tables_pushed_past(t, step, &(uint64_t){ 0 })) {
        pthread_rwlock_unlock(&t->lock);
        return ts_err_set(err, TS_ESTATE, "table '%s' took a push past step %" PRIu64 " (its "
                          "hold ended before the join's move)", t->name, step);
    }
    tables_runs_free(t);   /* what it wrote since is not the job's any more: the next is full */
    ts_table_reset(t->t);
    if (!(st = rowcopy_place(t, &sj->job, &sp->tables_budget, cl, my_id, err)) &&
        !(st = tables_load(sp, t, &spec, m, hex, err)))
        for (size_t k = 0; !st && k < t->nstores; k++)
            st = ts_table_set_step(t->stores[k].t, step, err);
    if (!st && moved)
        atomic_store(&t->moved, moved);
    atomic_store(&t->hold, 0);
    pthread_rwlock_unlock(&t->lock);
    if (st)
        ts_err_prefix(err, "table '%s'", t->name);
    return st;
}

ts_status shard_tables_rollback(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                struct shard_job *sj, const ts_manifest *m, const char *hex,
                                uint64_t step, struct ts_err *err)
{
    ts_status st = adopt_tables(sp, cl, my_id, sj, m, 0, err);

    for (uint32_t i = 0; !st && i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = shard_params_table(sp, sj, i);
        if (t)
            st = place_anew(sp, cl, my_id, sj, t, m, hex, step, 0, err);
    }
    atomic_store(&sj->tables_held_until, 0);
    return st;
}

ts_status shard_tables_move(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                            struct shard_job *sj, const ts_manifest *m, const char *hex,
                            uint64_t step, uint64_t epoch, uint32_t *tables, uint64_t *rows,
                            uint32_t *held_ms, struct ts_err *err)
{
    int64_t since = atomic_load(&sj->tables_held_until) - SHARD_TABLE_HOLD_MS;
    ts_status st = TS_OK;

    *tables = 0;
    *rows = 0;
    *held_ms = since > 0 ? (uint32_t)(ts_now_ms() - since) : 0;
    if (sj->moved_step == step + 1 && strcmp(sj->moved_from, hex) == 0)
        return moved_before(sp, cl, sj, tables, rows, held_ms, err);
    /* Every table this shard holds must be held at step: one that took pushes past it would
     * lose them to the load. */
    for (uint32_t i = 0; i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = shard_params_table(sp, sj, i);
        if (t && atomic_load(&t->hold) != step + 1)
            return ts_err_set(err, TS_ESTATE, "table '%s' of job '%s' is not held at step %"
                              PRIu64 " on this shard (its hold ended, or was never asked: "
                              "ArmSnapshot with hold_tables); the job goes back to a snapshot "
                              "instead", t->name, sj->job.id, step);
    }
    if (!sj->ntables && !atomic_load(&sj->tables_held_until))
        return ts_err_set(err, TS_ESTATE, "job '%s' is not held at step %" PRIu64 " on this "
                          "shard (ArmSnapshot with hold_tables first)", sj->job.id, step);
    if ((st = adopt_tables(sp, cl, my_id, sj, m, step + 1, err)))
        return st;
    for (uint32_t i = 0; !st && i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = shard_params_table(sp, sj, i);
        if (!t)
            continue;
        if (!(st = place_anew(sp, cl, my_id, sj, t, m, hex, step, epoch, err))) {
            (*tables)++;
            *rows += ts_table_count(t->t);
        }
    }
    if (st) {   /* tables left as they were do not agree with the map: back to a snapshot, whose
                 * load ends the holds left */
        ts_err_prefix(err, "job '%s'", sj->job.id);
        atomic_store(&sj->lost_gen, atomic_load(&sj->rollbacks));
        atomic_store(&sj->state_lost, true);
        atomic_store(&sj->lost_report, true);
    }
    if (!st) {
        snprintf(sj->moved_from, sizeof(sj->moved_from), "%s", hex);
        sj->moved_step = step + 1;
    }
    atomic_store(&sj->tables_held_until, 0);
    return st;
}
