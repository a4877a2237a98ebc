/* rollback.c - see rollback.h. */
#include "rollback.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "master.h"
#include "cluster/shard.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/log.h"
#include "util/proc.h"

#define ROLLBACK_CALL_MS 60000   /* one shard's restore reads the snapshot's chunks */
#define ROLLBACK_RETRY_MS 500

void rollbacks_init(struct rollbacks *rb)
{
    memset(rb, 0, sizeof(*rb));
    pthread_mutex_init(&rb->mu, NULL);
    pthread_cond_init(&rb->cv, NULL);
}

void rollbacks_fini(struct rollbacks *rb)
{
    pthread_mutex_destroy(&rb->mu);
    pthread_cond_destroy(&rb->cv);
}

void rollbacks_wake(struct rollbacks *rb)
{
    pthread_mutex_lock(&rb->mu);
    pthread_cond_broadcast(&rb->cv);
    pthread_mutex_unlock(&rb->mu);
}

/* Why job is lost for good and how to survive it next time, fitted to how this master runs:
 * a replica count above the one it has, and what it lacks to have a snapshot to go back to
 * (a store, automatic snapshots, or snapshots more often). Short: the job's note keeps 256
 * bytes. */
static void lost_for_good(struct master *m, const char *job, uint32_t shard, char *out,
                          size_t n)
{
    uint32_t r = ts_members_replicas(m->members);
    char runs[48] = "", more[32] = "--replicas 2 or more", snap[48];

    if (r > 1) {
        snprintf(runs, sizeof(runs), "; the cluster runs --replicas %u", r);
        snprintf(more, sizeof(more), "--replicas %u", r + 1);
    }
    if (!m->snap.store)
        snprintf(snap, sizeof(snap), "--store DIR --snapshot-every N");
    else if (!m->snap.every)
        snprintf(snap, sizeof(snap), "--snapshot-every N");
    else
        snprintf(snap, sizeof(snap), "--snapshot-every below %u", m->snap.every);
    snprintf(out, n, "every copy of a partition of job '%s' is lost (shard %u heads it and holds "
             "none%s) and there is no snapshot of the job to go back to; to survive this, run "
             "with %s, or with %s", job, shard, runs, more, snap);
}

ts_status rollback_request(struct master *m, const char *job, uint32_t shard, uint32_t seen,
                           char *action, size_t n, struct ts_err *err)
{
    struct rollback_todo td = { .step = 0 };
    struct ts_err e = { 0 };
    ts_status st;

    snprintf(td.job, sizeof(td.job), "%s", job);
    if (!snapper_last_of(&m->snap, job, td.hex, &td.step)) {
        lost_for_good(m, job, shard, action, n);
        if ((st = jobs_rollback_begin(m->jobs, job, seen, &td.generation, &e)) == TS_EEXIST)
            return TS_OK;   /* said already */
        if (st)
            return ts_err_set(err, st, "%s", e.msg);
        jobs_rollback_end(m->jobs, job, false, true, 0, action);
        ts_log(TS_ERROR, "master", "%s", action);
        return TS_OK;
    }
    if ((st = jobs_rollback_begin(m->jobs, job, seen, &td.generation, &e)) == TS_EEXIST) {
        snprintf(action, n, "%s", e.msg);
        return TS_OK;
    }
    if (st)
        return ts_err_set(err, st, "%s", e.msg);
    pthread_mutex_lock(&m->rb.mu);
    if (m->rb.n == ROLLBACK_QUEUE) {
        pthread_mutex_unlock(&m->rb.mu);
        jobs_rollback_end(m->jobs, job, false, false, 0, "too many rollbacks at once");
        return ts_err_set(err, TS_EUNAVAIL, "%d rollbacks wait already: report again later",
                          ROLLBACK_QUEUE);
    }
    m->rb.queue[m->rb.n++] = td;
    pthread_cond_broadcast(&m->rb.cv);
    pthread_mutex_unlock(&m->rb.mu);
    snprintf(action, n, "rolling back to step %" PRIu64 " (snapshot %.12s), rollback %u", td.step,
             td.hex, td.generation);
    ts_log(TS_WARN, "master", "job %s: shard %u reports a partition with every copy lost; %s",
           job, shard, action);
    return TS_OK;
}

/* RollbackJob(req) on every alive shard; shards that do not hold the job are skipped.
 * *loaded: partitions the shards loaded. sn->mu held (its channels). */
static ts_status each_shard(struct snapper *sn, Tessera__V1__RollbackJobRequest *req,
                            uint64_t *loaded, struct ts_err *err)
{
    struct ts_members_view v;
    ts_status st;

    if ((st = ts_members_view(sn->members, true, &v, err)))
        return st;
    req->map_epoch = v.epoch;
    shard_channels_reserve(&sn->chan, v.nshards);
    for (size_t i = 0; !st && i < v.nshards; i++) {
        Tessera__V1__RollbackJobResponse *r = NULL;
        struct ts_rpc_channel *ch;
        struct ts_err e = { 0 };

        if ((st = shard_channels_get(&sn->chan, v.shards[i].addr, &ch, err)))
            break;
        st = ts_shard_rollback_job(ch, req, ROLLBACK_CALL_MS, &r, &e);
        if (st == TS_ENOTFOUND) {   /* the shard does not hold the job */
            st = TS_OK;
            continue;
        }
        if (st)
            ts_err_set(err, st, "shard %u: %s", v.shards[i].id, e.msg);
        else
            *loaded += r->partitions;
        if (r)
            protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_members_view_free(&v);
    return st;
}

/* Check everywhere, then fence and load everywhere, then open everywhere: a snapshot a shard
 * cannot load is found before any shard fences the job. Tried again on a new map if a shard
 * fails (it died: the map changes). sn->mu held. */
static ts_status run(struct master *m, const struct rollback_todo *td, uint64_t *loaded,
                     struct ts_err *err)
{
    struct snapper *sn = &m->snap;
    ts_status st = TS_OK;

    for (int attempt = 1; attempt <= ROLLBACK_ATTEMPTS; attempt++) {
        Tessera__V1__RollbackJobRequest req = TESSERA__V1__ROLLBACK_JOB_REQUEST__INIT;
        struct ts_err e = { 0 };

        req.job = (char *)td->job;
        req.snapshot_id = (char *)td->hex;
        req.step = td->step;
        req.generation = td->generation;
        *loaded = 0;
        req.check = true;
        if (!(st = each_shard(sn, &req, &(uint64_t){ 0 }, &e))) {
            req.check = false;
            st = each_shard(sn, &req, loaded, &e);
        }
        if (!st) {
            req.open = true;
            st = each_shard(sn, &req, &(uint64_t){ 0 }, &e);
        }
        if (!st)
            return TS_OK;
        ts_log(TS_WARN, "master", "job %s: rollback to step %" PRIu64 ", attempt %d of %d: %s",
               td->job, td->step, attempt, ROLLBACK_ATTEMPTS, e.msg);
        if (attempt == ROLLBACK_ATTEMPTS || atomic_load(&m->stopping))
            return ts_err_set(err, st, "%s", e.msg);
        ts_sleep_ms(ROLLBACK_RETRY_MS);
    }
    return st;
}

void *rollbacker_main(void *arg)
{
    struct master *m = arg;

    for (;;) {
        struct rollback_todo td;
        struct ts_err err = { 0 };
        char note[257];
        uint64_t loaded = 0;
        int64_t t0;
        ts_status st;

        pthread_mutex_lock(&m->rb.mu);
        while (!m->rb.n && !atomic_load(&m->stopping))
            pthread_cond_wait(&m->rb.cv, &m->rb.mu);
        if (atomic_load(&m->stopping)) {
            pthread_mutex_unlock(&m->rb.mu);
            return NULL;
        }
        td = m->rb.queue[0];
        memmove(m->rb.queue, m->rb.queue + 1, --m->rb.n * sizeof(td));
        pthread_mutex_unlock(&m->rb.mu);

        t0 = ts_now_ms();
        atomic_fetch_add(&m->snap.rollbacks, 1);   /* an automatic snapshot yields */
        pthread_mutex_lock(&m->snap.mu);   /* no snapshot of a job going back */
        atomic_fetch_sub(&m->snap.rollbacks, 1);
        st = run(m, &td, &loaded, &err);
        pthread_mutex_unlock(&m->snap.mu);
        if (!st)
            snprintf(note, sizeof(note), "back to step %" PRIu64 " of snapshot %.12s (%" PRIu64
                     " partitions loaded in %.2f s)", td.step, td.hex, loaded,
                     (ts_now_ms() - t0) / 1000.0);
        else
            snprintf(note, sizeof(note), "the rollback to step %" PRIu64 " of snapshot %.12s "
                     "failed: %.160s", td.step, td.hex, err.msg);
        jobs_rollback_end(m->jobs, td.job, !st, st != TS_OK, td.step, note);
        ts_log(st ? TS_ERROR : TS_WARN, "master", "job %s: rollback %u: %s", td.job,
               td.generation, note);
    }
}
