/* durable_restore.c - a shard that starts from its own log (durable.h, shard_durable_start;
 * docs/embeddings.md, "Restarting from its own disk").
 *
 * A shard that keeps its identity in its directory asks the master's map, before it serves
 * anything, whether its member is still on the ring: the master holds the place of a shard
 * that keeps a log for its restart grace (--shard-restart-grace). If it is, the shard replays
 * its log (durable_replay.h) into its own registry under that map, with nothing logged
 * meanwhile: each table registered as its registration in the log says and its records
 * applied in place, each tensor registered and every partition the map has it head loaded
 * with its last image and generation. Only then does the log take them again (their
 * registrations and images written anew, the holds on), and the shard registers as the same
 * member (RegisterShardRequest.resumed). A tensor whose head partition is missing from the
 * log, or a map without the member, makes the shard start afresh instead: the log is set
 * aside in DIR/previous and the jobs go back to their snapshots, as for any shard that
 * joins. A log that cannot be read is an error: the shard does not start (the log is kept). */
#include "durable.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durable_replay.h"
#include "params_internal.h"
#include "tables.h"
#include "tables_internal.h"
#include "tensor/tensor.h"
#include "util/log.h"
#include "util/proc.h"

#define MAP_WAIT_MS 30000   /* as long as the membership tries the master at start */
#define MAP_POLL_MS 500

/* The id of this shard's member (instance) on the ring of the master's map (0: not there). */
static ts_status find_place(struct ts_cluster *cl, const char *instance, uint32_t *id,
                            struct ts_err *err)
{
    int64_t until = ts_now_ms() + MAP_WAIT_MS;
    uint64_t registered;

    for (;;) {
        struct ts_err e = { 0 };
        if (!ts_cluster_refresh(cl, &e)) {
            *id = ts_cluster_instance_id(cl, instance, &registered);
            return TS_OK;
        }
        if (ts_now_ms() > until)
            return ts_err_set(err, TS_EUNAVAIL, "cannot ask the master's shard map whether "
                              "this shard's place is kept (%s); is the master running?", e.msg);
        ts_sleep_ms(MAP_POLL_MS);
    }
}

struct live {
    struct shard_params *sp;
    struct ts_cluster *cl;
    uint32_t me;
};

/* A table of the log registered in the shard as its registration says (with nothing logged),
 * its records then applied in place. */
static ts_status live_table(void *ctx, struct durable_rtable *e,
                            const Tessera__V1__RegisterTableRequest *req, struct ts_err *err)
{
    struct live *lv = ctx;
    Tessera__V1__RegisterTableRequest r = *req;
    struct shard_table *t;
    uint64_t version, rows;
    ts_status st;

    r.map_epoch = ts_cluster_epoch(lv->cl);
    if ((st = shard_params_register_table(lv->sp, lv->cl, lv->me, &r, &version, &rows, err)))
        return st;
    t = shard_params_table(lv->sp, params_find_job(lv->sp, req->job->id), req->table_id);
    if (!t || ts_table_step(t->t) || ts_table_count(t->t))
        return ts_err_set(err, TS_ECORRUPT, "table %u '%s' of job %s: %s", req->table_id,
                          req->table->name, req->job->id, t ? "registered twice in the log"
                          : "not installed");
    e->t = t->t;
    e->owner = t;
    return TS_OK;
}

/* Whether every partition of every tensor in the log that the map has this shard head has its
 * image there; else the partition, in why. */
static bool heads_whole(struct ts_cluster *cl, uint32_t me, const struct durable_replay *rp,
                        char *why, size_t n)
{
    uint32_t chain[TS_MAX_CHAIN];
    size_t ring;

    for (size_t i = 0; i < rp->ntensors; i++) {
        const struct durable_rtensor *e = &rp->tensors[i];
        for (uint32_t p = 0; e->req && p < e->nparts; p++)
            if (!e->image[p] &&
                ts_cluster_chain(cl, e->req->tensor->name, e->req->tensor->placement_salt, p,
                                 chain, &ring) && chain[0] == me) {
                snprintf(why, n, "job %s tensor '%s' partition %u, which this shard heads, is "
                         "not in its log", e->req->job->id, e->req->tensor->name, p);
                return false;
            }
    }
    return true;
}

/* A tensor of the log registered in the shard (with nothing logged) and each partition it
 * heads loaded with its image, at the image's generation. */
static ts_status live_tensor(struct live *lv, const struct durable_rtensor *e,
                             struct ts_err *err)
{
    Tessera__V1__RegisterTensorRequest r = *e->req;
    struct shard_tensor *t;
    struct shard_job *sj;
    uint32_t *owned = NULL, nparts, salt;
    uint64_t version, pbytes;
    size_t nowned;
    ts_status st = TS_OK;

    r.map_epoch = ts_cluster_epoch(lv->cl);
    if ((st = shard_params_register(lv->sp, lv->cl, lv->me, &r, &owned, &nowned, &nparts,
                                    &version, &salt, &pbytes, err)))
        return st;
    free(owned);
    sj = params_find_job(lv->sp, r.job->id);
    if (!(t = shard_params_tensor(lv->sp, sj, r.tensor_id)) || t->nparts != e->nparts)
        return ts_err_set(err, TS_ECORRUPT, "tensor '%s' of job %s: not made as its log says",
                          r.tensor->name, r.job->id);
    for (uint32_t p = 0; !st && p < t->nparts; p++) {
        if (!t->parts[p] || t->follows[p] || !e->image[p])
            continue;
        uint32_t gen = durable_image_generation(e->image[p]);
        if (gen > atomic_load(&sj->rollbacks))
            atomic_store(&sj->rollbacks, gen);
        ts_part_set_generation(t->parts[p], gen);
        if ((st = ts_part_load_image(t->parts[p], e->image[p] + 8, e->image_len[p] - 8, err)))
            ts_err_prefix(err, "tensor '%s' partition %u", t->name, p);
    }
    return st;
}

/* The log (d) takes every table and tensor of the shard again: their registrations and
 * images written anew into its current generation. */
static ts_status attach_all(struct shard_params *sp, struct shard_durable *d,
                            struct ts_err *err)
{
    ts_status st = TS_OK;

    sp->durable = d;
    for (size_t j = 0; !st && j < sp->njobs; j++) {
        struct shard_job *sj = sp->jobs[j];
        for (uint32_t i = 0; !st && i < SHARD_MAX_TABLES; i++)
            if (sj->tables[i])
                st = shard_durable_table(d, sj, sj->tables[i], err);
        for (uint32_t i = 0; !st && i < SHARD_MAX_TENSORS; i++)
            if (sj->tensors[i])
                st = shard_durable_tensor(d, sj, sj->tensors[i], err);
    }
    return st;
}

/* The log replayed into the shard as member me (durable.h): false in *whole, nothing made,
 * where a partition this shard heads is missing (why says which). */
static ts_status restore(struct shard_params *sp, struct ts_cluster *cl, uint32_t me,
                         bool *whole, char *why, size_t n, struct ts_err *err)
{
    struct live lv = { sp, cl, me };
    struct durable_replay rp = { .make = live_table, .ctx = &lv };
    struct shard_durable *d = sp->durable;
    struct ts_redo_replayed got = { 0 };
    size_t tables = 0, tensors = 0;
    int64_t began = ts_now_ms();
    ts_status st;

    *whole = true;
    sp->durable = NULL;   /* what is made now is what the log holds: nothing logged */
    st = durable_replay_read(shard_durable_redo(d), &rp, DURABLE_TENSORS, NULL, err);
    if (!st && !(*whole = heads_whole(cl, me, &rp, why, n)))
        goto out;
    for (size_t i = 0; !st && i < rp.ntensors; i++)
        if (rp.tensors[i].req) {
            st = live_tensor(&lv, &rp.tensors[i], err);
            tensors++;
        }
    if (!st)
        st = durable_replay_read(shard_durable_redo(d), &rp, DURABLE_TABLES, &got, err);
    for (size_t i = 0; i < rp.ntables; i++)
        tables += rp.tables[i].t != NULL;
    if (!st)
        st = attach_all(sp, d, err);
    if (!st) {
        shard_durable_resumed(d, ts_now_ms() - began);
        ts_log(TS_INFO, "shard", "started from its redo log as shard %u: %zu tables, %zu "
               "tensors (%" PRIu64 " records, %" PRIu64 " bytes) in %" PRId64 " ms", me, tables,
               tensors, got.records, got.bytes, ts_now_ms() - began);
    }
out:
    sp->durable = d;
    durable_replay_free(&rp);
    return st;
}

ts_status shard_durable_start(struct shard_params *sp, const char *dir, struct ts_cluster *cl,
                              char *instance, size_t ilen,
                              uint8_t secret[TS_MEMBER_SECRET_LEN], bool *resumed,
                              struct ts_err *err)
{
    char why[256] = "";
    uint32_t me = 0;
    bool kept, whole = true;
    ts_status st;

    *resumed = false;
    if ((st = shard_durable_identity(dir, instance, ilen, secret, &kept, err)) ||
        (kept && (st = find_place(cl, instance, &me, err))))
        return st;
    if (kept && !me)
        snprintf(why, sizeof(why), "the master's shard map (epoch %" PRIu64 ") does not hold "
                 "its member (instance %s) on the ring: its place was not kept",
                 ts_cluster_epoch(cl), instance);
    if ((st = shard_durable_open(dir, me != 0, why, &sp->durable, err)))
        return st;
    if (!me)
        return TS_OK;
    st = restore(sp, cl, me, &whole, why, sizeof(why), err);
    if (st) {
        ts_err_prefix(err, "--redo-dir %s: starting from its log (kept as it is; `tessera-shard "
                      "--replay %s` reads it)", dir, dir);
        return st;
    }
    if (whole) {
        *resumed = true;
        return TS_OK;
    }
    /* Nothing was made: set the log aside and start afresh. */
    shard_durable_free(sp->durable);
    sp->durable = NULL;
    return shard_durable_open(dir, false, why, &sp->durable, err);
}
