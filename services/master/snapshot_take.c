/* snapshot_take.c - taking a coordinated snapshot (snapshot.h): find the shards holding the
 * job, arm a step ahead of training on each, have each write its partitions, then commit the
 * manifest and move the branch; CreateSnapshot's entry and the automatic loop that takes one
 * every N steps of each running job; the snapshot metrics. */
#include "snapshot.h"
#include "snapshot_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/shard.h"
#include "metrics/metrics.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/hook.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

#define MAX_SHARDS SNAP_MAX_SHARDS
#define CALL_MS 10000           /* ShardStatus, ArmSnapshot */
#define WRITE_CALL_MS 600000    /* WriteSnapshot: waiting plus writing the partitions */
#define POLL_MS 500             /* one WriteSnapshot wait */
#define STALL_MS 5000           /* no partition moved for this long: training has stopped */
#define STALE_RETRY_MS 250      /* a requested snapshot the map moved under: again after */
#define JOIN_SNAP_MS 60000      /* a snapshot a join waits for (snapshot_for_join) */
#define MOVE_WAIT_MS 30000      /* a join's move waits this long for the shards on the ring */
#define MOVE_CALL_MS 120000     /* MoveTables: a shard loads its tables' rows */

/* The shards holding a job, with a channel each (borrowed from the snapper). */
struct shards {
    size_t n;
    uint32_t id[MAX_SHARDS];
    struct ts_rpc_channel *ch[MAX_SHARDS];
    Tessera__V1__WriteSnapshotResponse *got[MAX_SHARDS];
    uint64_t map_epoch;
    uint32_t alive;
};

static void shards_free(struct shards *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->got[i])
            protobuf_c_message_free_unpacked(&s->got[i]->base, NULL);
    }
    memset(s, 0, sizeof(*s));
}

/* Finds the alive shards, the job (job "": the only one) and the span of its versions. */
static ts_status discover(struct snapper *sn, const char *job, struct shards *out,
                          char *job_id, uint64_t *maxv, struct ts_err *err)
{
    struct ts_members_view v;
    char seen[2][TS_JOB_ID_MAX + 1] = { "", "" };
    ts_status st = ts_members_view(sn->members, true, &v, err);
    bool held[MAX_SHARDS] = { false }, joining[MAX_SHARDS] = { false }, any = false;

    if (st)
        return st;
    *maxv = 0;
    out->map_epoch = v.epoch;
    shard_channels_reserve(&sn->chan, v.nshards);
    out->alive = (uint32_t)v.nshards;
    for (size_t i = 0; !st && i < v.nshards && i < MAX_SHARDS; i++) {
        Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
        Tessera__V1__ShardStatusResponse *r = NULL;

        out->id[out->n] = v.shards[i].id;
        joining[out->n] = v.shards[i].joining;
        if ((st = shard_channels_get(&sn->chan, v.shards[i].addr, &out->ch[out->n], err)))
            break;
        out->n++;
        /* One call each, not retried: a shard that is gone fails the snapshot at once (the
         * previous one stays), and the master can stop instead of retrying until a
         * deadline. */
        if ((st = ts_shard_status(out->ch[out->n - 1], &req, TS_SHARD_ONCE, CALL_MS, &r, err)))
            break;
        for (size_t j = 0; j < r->n_jobs; j++) {
            const char *id = r->jobs[j]->id;
            if (job[0] ? strcmp(id, job) != 0 : false)
                continue;
            if (!job[0] && strcmp(seen[0], id) && !seen[0][0])
                snprintf(seen[0], sizeof(seen[0]), "%s", id);
            else if (!job[0] && strcmp(seen[0], id))
                snprintf(seen[1], sizeof(seen[1]), "%s", id);
            held[out->n - 1] = true;
            if (r->jobs[j]->max_version > *maxv)
                *maxv = r->jobs[j]->max_version;
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_members_view_free(&v);
    if (st)
        return st;
    if (seen[1][0])
        return ts_err_set(err, TS_EINVAL, "job: the shards hold several jobs ('%s', '%s', ...); "
                          "name one", seen[0], seen[1]);
    snprintf(job_id, 65, "%s", job[0] ? job : seen[0]);
    /* Workers register a job's tensors and tables with every shard of the ring: one on it
     * without the job is still to hear of it (or lost it), and holds rows or partitions of
     * it that no piece would. Joining shards head nothing yet. */
    for (size_t i = 0; i < out->n; i++)
        any |= held[i];
    for (size_t i = 0; any && i < out->n; i++)
        if (!held[i] && !joining[i])
            return ts_err_set(err, TS_ESTALE, "job: shard %u does not hold job '%s' yet (its "
                              "workers are still registering it?); take the snapshot again "
                              "in a moment", out->id[i], job_id);
    /* Keep only the shards that hold the job. */
    for (size_t i = 0, k = 0, n = out->n; i < n; i++) {
        if (held[i]) {
            out->id[k] = out->id[i];
            out->ch[k++] = out->ch[i];
        } else {
            out->n--;
        }
    }
    if (!out->n)
        return ts_err_set(err, TS_ENOTFOUND, job[0] ? "job: no shard holds job '%s'"
                                                    : "job: no job has registered tensors yet%s",
                          job);
    return TS_OK;
}

/* Arms step on every shard (hold: the job's tables held at it, for a join's move); *past set
 * (and everything disarmed) if one is past it. */
static ts_status arm_all(struct shards *s, const char *job, uint64_t step, bool disarm,
                         bool hold, bool *past, uint64_t *maxv, struct ts_err *err)
{
    ts_status st = TS_OK;

    *past = false;
    for (size_t i = 0; i < s->n && (disarm || (!st && !*past)); i++) {
        Tessera__V1__ArmSnapshotRequest req = TESSERA__V1__ARM_SNAPSHOT_REQUEST__INIT;
        Tessera__V1__ArmSnapshotResponse *r = NULL;
        struct ts_err e = { 0 };
        ts_status one;

        req.job = (char *)job;
        req.step = step;
        req.disarm = disarm;
        req.hold_tables = hold && !disarm;
        one = ts_shard_arm_snapshot(s->ch[i], &req, CALL_MS, &r, disarm ? &e : err);
        if (one == TS_OK) {
            if (!disarm && !r->armed)
                *past = true;
            if (r->max_version > *maxv)
                *maxv = r->max_version;
            protobuf_c_message_free_unpacked(&r->base, NULL);
        } else if (!disarm) {
            st = one;
        }
    }
    if (!disarm && (st || *past)) {
        bool ignored;
        uint64_t m = 0;

        (void)arm_all(s, job, 0, true, false, &ignored, &m, err);
    }
    return st;
}

/* Asks each shard to write its copies; waits while training moves toward step. */
static ts_status write_all(struct snapper *sn, struct shards *s, const char *job, uint64_t step,
                           int64_t until, bool yield, struct ts_err *err)
{
    uint64_t last_min = 0;
    int64_t moved = ts_now_ms();
    size_t done = 0;
    ts_status st = TS_OK;

    while (!st && done < s->n) {
        for (size_t i = 0; !st && i < s->n; i++) {
            Tessera__V1__WriteSnapshotRequest req = TESSERA__V1__WRITE_SNAPSHOT_REQUEST__INIT;
            Tessera__V1__WriteSnapshotResponse *r = NULL;

            if (s->got[i])
                continue;
            req.job = (char *)job;
            req.step = step;
            req.wait_ms = POLL_MS;
            req.map_epoch = s->map_epoch;
            if ((st = ts_shard_write_snapshot(s->ch[i], &req, WRITE_CALL_MS, &r, err))) {
                ts_err_prefix(err, "shard %u", s->id[i]);
                break;
            }
            if (r->ready) {
                s->got[i] = r;
                done++;
                continue;
            }
            if (r->min_version != last_min) {
                last_min = r->min_version;
                moved = ts_now_ms();
            }
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        if (!st && done < s->n && atomic_load(&sn->stop))
            st = ts_err_set(err, TS_ECANCELLED, "snapshot cancelled: the master is stopping");
        if (!st && done < s->n && yield && atomic_load(&sn->requested))
            st = ts_err_set(err, TS_ECANCELLED, "automatic snapshot of step %" PRIu64 " yields "
                            "to a requested one", step);
        if (!st && done < s->n && yield &&
            atomic_load(&sn->join_asked) > atomic_load(&sn->join_passed))
            st = ts_err_set(err, TS_ECANCELLED, "automatic snapshot of step %" PRIu64 " yields "
                            "to the snapshots a join waits for", step);
        /* A job going back stopped training (its own, or a job beside it on the dead shard):
         * the step may never come. */
        if (!st && done < s->n && yield && atomic_load(&sn->rollbacks))
            st = ts_err_set(err, TS_ECANCELLED, "automatic snapshot of step %" PRIu64 " yields "
                            "to a rollback", step);
        if (!st && done < s->n && ts_now_ms() - moved > STALL_MS)
            st = ts_err_set(err, TS_ETIMEDOUT, "training is not moving: the job's partitions "
                            "stay at version %" PRIu64 ", short of step %" PRIu64 " (finished, "
                            "or a worker is gone)", last_min, step);
        if (!st && done < s->n && ts_now_ms() > until)
            st = ts_err_set(err, TS_ETIMEDOUT, "step %" PRIu64 " was not reached in time (at %"
                            PRIu64 ")", step, last_min);
    }
    return st;
}

/* What a snapshot is asked for: job ("": the only one), message and tag (may be ""). fixed:
 * step is the one to take (the automatic loop); else the newest step any partition is at. */
struct take_req {
    const char *job, *message, *tag;
    int timeout_ms;
    bool fixed;
    uint64_t step;
    bool hold;                 /* the job's tables held at the step (a join's move) */
};

/* What a snapshot became. */
struct taken {
    char hex[TS_STORE_HEX_LEN + 1];
    uint64_t step, written;
};

/* Arms a step on every shard: req's (fixed), else one ahead of training, aiming a little
 * further each time training outruns the arming. */
static ts_status arm(struct shards *s, const char *job, const struct take_req *req,
                     uint64_t maxv, uint64_t *step, struct ts_err *err)
{
    bool past = true;
    ts_status st = TS_OK;

    *step = req->fixed ? req->step : maxv;
    for (int attempt = 0; !st && past && attempt < 20; attempt++) {
        st = arm_all(s, job, *step, false, req->hold, &past, &maxv, err);
        if (past && req->fixed)
            st = ts_err_set(err, TS_ESTATE, "step %" PRIu64 ": training is already past it",
                            *step);
        if (past)
            *step = maxv + (uint64_t)attempt;
    }
    if (!st && past)
        st = ts_err_set(err, TS_EUNAVAIL, "snapshot: could not arm a step ahead of training");
    return st;
}

/* Merges the shards' pieces, adds what the master knows (message, parent, cluster, schedule,
 * data checksums) and commits the manifest on the branch, then the tag; sn->mu held. */
static ts_status commit(struct snapper *sn, struct shards *s, const char *job, uint64_t step,
                        const struct take_req *req, struct taken *out, struct ts_err *err)
{
    ts_manifest m = TESSERA__V1__MANIFEST__INIT;
    Tessera__V1__ClusterShape shape = TESSERA__V1__CLUSTER_SHAPE__INIT;
    Tessera__V1__ScheduleState sched = TESSERA__V1__SCHEDULE_STATE__INIT;
    Tessera__V1__Manifest__DataChecksumsEntry **dc = NULL;
    struct ts_snap_piece pieces[MAX_SHARDS];
    uint8_t id[TS_STORE_ID_LEN];
    void *mem = NULL;
    ts_status st;

    out->written = 0;
    for (size_t i = 0; i < s->n; i++) {
        const Tessera__V1__WriteSnapshotResponse *r = s->got[i];

        /* A shard on another map than the master's (one that moved again while it wrote)
         * heads what that map says: the dead shard's partitions and rows would be in no
         * piece, or in two. */
        if (r->map_epoch != s->map_epoch)
            return ts_err_set(err, TS_ESTALE, "snapshot of step %" PRIu64 ": shard %u wrote "
                              "its piece under shard map epoch %" PRIu64 ", the master asked "
                              "under %" PRIu64 " (the map is moving); none taken, try again",
                              step, s->id[i], r->map_epoch, s->map_epoch);
        pieces[i] = (struct ts_snap_piece){ .shard = s->id[i], .tensors = r->tensors,
                                            .n_tensors = r->n_tensors, .tables = r->tables,
                                            .n_tables = r->n_tables, .job = r->job,
                                            .chunk_bytes = r->chunk_bytes,
                                            .bytes_written = r->bytes_written };
        out->written += r->bytes_written;
    }
    if ((st = ts_snap_merge(pieces, s->n, step, &m, &mem, err)) ||
        (st = datamap_manifest(sn->data, job, &dc, &m.n_data_checksums, err)))
        goto out;
    m.created_unix_ms = ts_unix_ms();
    m.message = (char *)req->message;
    if (sn->has_tip) {
        m.parent.data = sn->tip;
        m.parent.len = TS_STORE_ID_LEN;
    }
    shape.shards = s->alive;
    shape.workers = m.job->workers;
    shape.map_epoch = s->map_epoch;
    m.cluster = &shape;
    sched.seed = m.job->data_seed;
    sched.micro_batch = m.job->micro_batch;
    sched.next_step = step;
    m.schedule = &sched;
    m.data_checksums = dc;
    if ((st = ts_snap_commit(sn->store, &m, sn->branch, sn->has_tip ? sn->tip : NULL, id, err)))
        goto out;
    memcpy(sn->tip, id, sizeof(id));
    sn->has_tip = true;
    ts_store_hex(id, out->hex);
    out->step = step;
    if (req->tag[0])
        st = ts_snap_tag(sn->store, req->tag, id, err);
    pthread_mutex_lock(&sn->stat_mu);
    snap_note_job(sn, m.job->id, out->hex, step);
    snprintf(sn->last_hex, sizeof(sn->last_hex), "%s", out->hex);
    sn->last_step = step;
    sn->last_unix_ms = m.created_unix_ms;
    pthread_mutex_unlock(&sn->stat_mu);
    ts_log(TS_INFO, "master", "snapshot %.12s: job %s step %" PRIu64 ", %zu tensors, %" PRIu64
           " bytes written, %s", out->hex, job, step, m.n_tensors, out->written, sn->branch);
out:
    free(mem);
    free(dc);
    return st;
}

/* Snapshots for Prometheus (docs/observability.md): by result, how long, bytes written. They
 * take from milliseconds to minutes (a partition's bytes through the store). */
static struct {
    pthread_once_t once;
    struct ts_metric_family *taken, *secs, *bytes, *moves, *held;
} snap_metrics = { PTHREAD_ONCE_INIT, NULL, NULL, NULL, NULL, NULL };

static void register_snap_metrics(void)
{
    static const double buckets[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                                      120, 300 };

    snap_metrics.taken = ts_metrics_family("tessera_snapshots_total", "coordinated snapshots, "
                                           "by result (ok, failed)", TS_METRIC_COUNTER,
                                           "result", NULL, 0);
    snap_metrics.secs = ts_metrics_family("tessera_snapshot_seconds", "a snapshot taken: from "
                                          "its request to its commit", TS_METRIC_HISTOGRAM,
                                          NULL, buckets, sizeof(buckets) / sizeof(buckets[0]));
    snap_metrics.bytes = ts_metrics_family("tessera_snapshot_bytes_total", "bytes the shards "
                                           "wrote into the store for snapshots (new chunks "
                                           "only)", TS_METRIC_COUNTER, NULL, NULL, 0);
    snap_metrics.moves = ts_metrics_family("tessera_table_moves_total", "moves of a job's "
                                           "sparse tables to the map after a join or a death "
                                           "(docs/embeddings.md), by result (moved; failed or "
                                           "gave_up: the job goes back to a snapshot if the "
                                           "map moved its rows)", TS_METRIC_COUNTER, "result",
                                           NULL, 0);
    snap_metrics.held = ts_metrics_family("tessera_table_move_held_seconds", "a move done: how "
                                          "long its tables' pushes were held, from the "
                                          "snapshot's arm to the last shard's load",
                                          TS_METRIC_HISTOGRAM, NULL, buckets,
                                          sizeof(buckets) / sizeof(buckets[0]));
}

/* A move of tables ended (result: moved, failed, gave_up); held_ms: a done one's hold. */
static void count_move(const char *result, uint32_t held_ms)
{
    pthread_once(&snap_metrics.once, register_snap_metrics);
    ts_counter_add(ts_metric_one(snap_metrics.moves, result), 1);
    if (strcmp(result, "moved") == 0)
        ts_histogram_observe(ts_metric_one(snap_metrics.held, NULL), held_ms / 1000.0);
}

static void count_snapshot(bool ok, double seconds, uint64_t bytes)
{
    pthread_once(&snap_metrics.once, register_snap_metrics);
    ts_counter_add(ts_metric_one(snap_metrics.taken, ok ? "ok" : "failed"), 1);
    if (ok) {
        ts_histogram_observe(ts_metric_one(snap_metrics.secs, NULL), seconds);
        ts_counter_add(ts_metric_one(snap_metrics.bytes, NULL), bytes);
    }
}

/* The snapshot itself: discover, arm, write, commit; sn->mu held. */
static ts_status take(struct snapper *sn, const struct take_req *req, struct taken *out,
                      struct ts_err *err)
{
    struct shards s = { 0 };
    char job[TS_JOB_ID_MAX + 1];
    int64_t t0 = ts_now_ns(), until = ts_now_ms() + req->timeout_ms;
    uint64_t maxv = 0, step = 0;
    struct ts_err e = { 0 };
    bool ignored;
    ts_status st;

    if (req->tag[0] && (st = ts_snap_tag_check(sn->store, req->tag, err)))
        return st;
    if (!(st = discover(sn, req->job, &s, job, &maxv, err)) &&
        !(st = arm(&s, job, req, maxv, &step, err))) {
        if ((st = write_all(sn, &s, job, step, until, req->fixed, err)))
            (void)arm_all(&s, job, 0, true, false, &ignored, &maxv, &e);
        else
            st = commit(sn, &s, job, step, req, out, err);
    }
    shards_free(&s);
    count_snapshot(!st, (double)(ts_now_ns() - t0) / 1e9, st ? 0 : out->written);
    return st;
}

/* A snapshot taken now (one step ahead of training), again while the map moves under it (a
 * shard died or joined) or the job is still being registered, which settles within a
 * heartbeat or two, for as long as timeout_ms lasts. sn->mu held. */
static ts_status take_while_stale(struct snapper *sn, const char *job, const char *message,
                                  const char *tag, int timeout_ms, bool hold, struct taken *t,
                                  struct ts_err *err)
{
    ts_status st;

    for (int64_t until = ts_now_ms() + timeout_ms;;) {
        int left = (int)(until - ts_now_ms());
        st = take(sn, &(struct take_req){ job, message, tag, left > 0 ? left : 0, false, 0,
                                          hold }, t, err);
        if (st != TS_ESTALE || ts_now_ms() + STALE_RETRY_MS >= until ||
            atomic_load(&sn->stop))
            return st;
        ts_log(TS_INFO, "master", "snapshot: %s; again in %d ms", err->msg, STALE_RETRY_MS);
        ts_err_clear(err);
        ts_sleep_ms(STALE_RETRY_MS);
    }
}

ts_status snapper_create(struct snapper *sn, const char *job, const char *message,
                         const char *tag, int timeout_ms, char hex[TS_STORE_HEX_LEN + 1],
                         uint64_t *step, uint64_t *written, struct ts_err *err)
{
    struct taken t = { .hex = "" };
    ts_status st;

    if (!sn->store)
        return ts_err_set(err, TS_ESTATE, "this master runs without --store; restart the "
                          "cluster with tessera up --store DIR");
    atomic_fetch_add(&sn->requested, 1); /* an automatic snapshot waiting for a step yields */
    pthread_mutex_lock(&sn->mu);
    atomic_fetch_sub(&sn->requested, 1);
    st = take_while_stale(sn, job, message, tag, timeout_ms, false, &t, err);
    pthread_mutex_unlock(&sn->mu);
    if (!st || t.hex[0]) {  /* written (a tag that failed is reported with the id) */
        memcpy(hex, t.hex, sizeof(t.hex));
        *step = t.step;
        *written = t.written;
    }
    return st;
}

/* The running jobs that keep their parameters on the shards (not reduce), on the alive
 * shards (at most max), the newest step of each, and whether it has tables; returns how
 * many. sn->mu held (its channels). */
static size_t running_jobs(struct snapper *sn, char (*ids)[TS_JOB_ID_MAX + 1], uint64_t *maxv,
                           bool *tables, size_t max)
{
    struct ts_members_view v;
    struct ts_err err = { 0 };
    size_t n = 0;

    if (ts_members_view(sn->members, true, &v, &err))
        return 0;
    shard_channels_reserve(&sn->chan, v.nshards);
    for (size_t i = 0; i < v.nshards; i++) {
        Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
        Tessera__V1__ShardStatusResponse *r = NULL;
        struct ts_rpc_channel *ch;

        if (shard_channels_get(&sn->chan, v.shards[i].addr, &ch, &err) ||
            ts_shard_status(ch, &req, TS_SHARD_ONCE, CALL_MS, &r, &err))
            continue;
        for (size_t j = 0; j < r->n_jobs; j++) {
            const Tessera__V1__JobStatus *js = r->jobs[j];
            size_t k = 0;
            if (js->mode == TESSERA__V1__TRAIN_MODE__TRAIN_MODE_REDUCE || !js->partitions ||
                (sn->running && !jobs_running(sn->running, js->id)))
                continue;
            while (k < n && strcmp(ids[k], js->id))
                k++;
            if (k == n && n < max) {
                snprintf(ids[n], TS_JOB_ID_MAX + 1, "%s", js->id);
                tables[n] = false;
                maxv[n++] = 0;
            }
            if (k < n && js->max_version > maxv[k])
                maxv[k] = js->max_version;
            if (k < n)
                tables[k] |= js->n_table_status > 0;
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_members_view_free(&v);
    return n;
}

bool snapper_join_ready(void *ctx, uint64_t epoch)
{
    struct snapper *sn = ctx;
    uint64_t asked;

    if (!sn->thread_started || atomic_load(&sn->stop) || atomic_load(&sn->join_passed) >= epoch)
        return true;
    asked = atomic_load(&sn->join_asked);
    if (asked < epoch && atomic_compare_exchange_strong(&sn->join_asked, &asked, epoch))
        ts_log(TS_INFO, "master", "the shards joining at epoch %" PRIu64 " have their copies; "
               "they go on the ring once each running job with tables has a snapshot taken "
               "now", epoch);
    return false;
}

/* sn->moves changed: copied for the state file's encoder (snapper_table_moves), and the file
 * to be synced once the loop lets mu go (unlock_loop). sn->mu held. */
static void moves_changed(struct snapper *sn)
{
    pthread_mutex_lock(&sn->stat_mu);
    memcpy(sn->kept_moves, sn->moves, sn->nmoves * sizeof(*sn->moves));
    sn->nkept_moves = sn->nmoves;
    pthread_mutex_unlock(&sn->stat_mu);
    sn->moves_changed = true;
}

/* The loop lets mu go; a change of the moves is on disk before their calls begin (the
 * encoder takes stat_mu and the members' and jobs' locks, never mu: synced after it). */
static void unlock_loop(struct snapper *sn)
{
    bool sync = sn->moves_changed;
    struct ts_err err = { 0 };

    sn->moves_changed = false;
    pthread_mutex_unlock(&sn->mu);
    if (sync && sn->state && master_state_sync(sn->state, &err))
        ts_log(TS_WARN, "master", "the tables' moves could not be written to the state "
               "directory (%s): a restart before they end sends their jobs back to a snapshot",
               err.msg);
}

Tessera__V1__TableMove **snapper_table_moves(struct snapper *sn, struct ts_rpc_call *call,
                                             size_t *n)
{
    Tessera__V1__TableMove **out;

    pthread_mutex_lock(&sn->stat_mu);
    out = ts_rpc_alloc(call, (sn->nkept_moves + 1) * sizeof(*out));
    for (*n = 0; *n < sn->nkept_moves; (*n)++) {
        const struct snap_move *mv = &sn->kept_moves[*n];
        Tessera__V1__TableMove *t = ts_rpc_new(call, &tessera__v1__table_move__descriptor);
        t->job = ts_rpc_strdup(call, mv->job);
        t->snapshot_id = ts_rpc_strdup(call, mv->hex);
        t->step = mv->step;
        t->epoch = mv->epoch;
        out[*n] = t;
    }
    pthread_mutex_unlock(&sn->stat_mu);
    return out;
}

void snapper_restore_moves(struct snapper *sn, Tessera__V1__TableMove *const *v, size_t n)
{
    pthread_mutex_lock(&sn->mu);
    for (size_t i = 0; i < n && sn->nmoves < SNAP_MAX_JOBS; i++) {
        struct snap_move *mv = &sn->moves[sn->nmoves];
        if (ts_job_id_check("job", v[i]->job, NULL) ||
            strspn(v[i]->snapshot_id, "0123456789abcdef") != TS_STORE_HEX_LEN ||
            v[i]->snapshot_id[TS_STORE_HEX_LEN]) {
            ts_log(TS_WARN, "master", "state: table move %zu ('%.64s', snapshot '%.64s') is "
                   "not well formed; left out", i, v[i]->job, v[i]->snapshot_id);
            continue;
        }
        if (!sn->store || !sn->every) {   /* what makes the moves: the automatic loop */
            ts_log(TS_WARN, "master", "job %s: the move of its tables from snapshot %.12s, "
                   "which the master was making when it stopped, is not made: this master "
                   "takes no automatic snapshots (--store with --snapshot-every); the shards' "
                   "holds end at their time", v[i]->job, v[i]->snapshot_id);
            continue;
        }
        snprintf(mv->job, sizeof(mv->job), "%s", v[i]->job);
        memcpy(mv->hex, v[i]->snapshot_id, sizeof(mv->hex));
        mv->step = v[i]->step;
        mv->epoch = v[i]->epoch;
        mv->since_ms = ts_now_ms();   /* MOVE_WAIT_MS again from the restart */
        sn->nmoves++;
        ts_log(TS_WARN, "master", "job %s: the move of its tables from snapshot %.12s at step %"
               PRIu64 ", which the master was making when it stopped, is made now", mv->job,
               mv->hex, mv->step);
    }
    moves_changed(sn);
    sn->moves_changed = false;   /* the file holds them */
    pthread_mutex_unlock(&sn->mu);
}

/* A snapshot, taken now, of each running job with tables among ids[0..n), its tables held at
 * the snapshot's step (no push of a later step taken) until the move (moves_run) places them
 * on the map from it, once that map is past `epoch` with no shard joining. why: for the
 * message and the log ("before the shards joining at epoch E take rows"). A job's move
 * replaces one of it still waiting (the newer snapshot is of the same held step or later). A
 * snapshot that fails (the job lost state or ended, its steps stopped) is logged, its hold
 * ended. sn->mu held. */
static void hold_and_snapshot(struct snapper *sn, uint64_t epoch, const char *why,
                              char (*ids)[TS_JOB_ID_MAX + 1], const bool *tables, size_t n)
{
    for (size_t k = 0; k < n && !atomic_load(&sn->stop); k++) {
        struct taken t = { .hex = "" };
        struct ts_err err = { 0 };
        struct snap_move *mv = NULL;
        ts_status st;

        if (!tables[k])
            continue;
        if ((st = take_while_stale(sn, ids[k], why, "", JOIN_SNAP_MS, true, &t, &err))) {
            ts_log(TS_WARN, "master", "job %s: no snapshot %s (%s); its rows stay where they "
                   "are, and a map that moved them sends it back to its last snapshot",
                   ids[k], why, err.msg);
            continue;
        }
        ts_log(TS_INFO, "master", "job %s: snapshot %.12s of step %" PRIu64 " taken %s, its "
               "tables held there: they move to the map from it, no step redone", ids[k],
               t.hex, t.step, why);
        for (size_t i = 0; i < sn->nmoves && !mv; i++)
            if (strcmp(sn->moves[i].job, ids[k]) == 0)
                mv = &sn->moves[i];
        if (!mv && sn->nmoves == SNAP_MAX_JOBS)   /* unheld by its shards in time */
            continue;
        if (!mv)
            mv = &sn->moves[sn->nmoves++];
        snprintf(mv->job, sizeof(mv->job), "%s", ids[k]);
        memcpy(mv->hex, t.hex, sizeof(mv->hex));
        mv->step = t.step;
        mv->epoch = epoch > mv->epoch ? epoch : mv->epoch;
        mv->since_ms = ts_now_ms();
        moves_changed(sn);
    }
}

/* What a join waits for (snapper_join_ready): the held snapshots above, of the jobs with
 * tables, whose moves come once the joining shards are on the ring; a job whose snapshot
 * failed goes back to its last one when they are. Then the join may go on. sn->mu held. */
static void snapshot_for_join(struct snapper *sn, uint64_t epoch,
                              char (*ids)[TS_JOB_ID_MAX + 1], const bool *tables, size_t n)
{
    char why[96];

    snprintf(why, sizeof(why), "before the shards joining at epoch %" PRIu64 " take rows",
             epoch);
    hold_and_snapshot(sn, epoch, why, ids, tables, n);
    atomic_store(&sn->join_passed, epoch);
}

/* Whether a shard on the ring at the loop's last pass has left it since (it died, or was
 * declared dead); remembers the ring of now. sn->mu held. */
static bool a_shard_left(struct snapper *sn)
{
    struct ts_members_view v;
    struct ts_err err = { 0 };
    uint32_t now[SNAP_MAX_SHARDS];
    size_t n = 0;
    bool left = false;

    if (ts_members_view(sn->members, true, &v, &err))
        return false;
    for (size_t i = 0; i < v.nshards && n < SNAP_MAX_SHARDS; i++)
        if (!v.shards[i].joining)
            now[n++] = v.shards[i].id;
    ts_members_view_free(&v);
    for (size_t k = 0; k < sn->nring_seen && !left; k++) {
        bool there = false;
        for (size_t i = 0; i < n && !there; i++)
            there = now[i] == sn->ring_seen[k];
        left = !there;
    }
    memcpy(sn->ring_seen, now, n * sizeof(*now));
    sn->nring_seen = n;
    return left;
}

/* After a death on a cluster with copies: the copies of the dead shard's rows took over, and
 * those rows, and the ones it followed, have one copy left (docs/embeddings.md, "When a shard
 * goes"). A held snapshot of each job with tables, and its move on the map as it is, places
 * every row on two shards again. sn->mu held. */
static void recopy_after_death(struct snapper *sn, char (*ids)[TS_JOB_ID_MAX + 1],
                               const bool *tables, size_t n)
{
    hold_and_snapshot(sn, 0, "to copy the rows anew after a shard died", ids, tables, n);
}

/* $TESSERA_TEST_MASTER_DIE_MOVING=N (a build with test hooks only: util/hook.h): the master
 * SIGKILLs itself once N shards moved a job's tables, the others' still held: a master that
 * restarts in the middle of a move (tests/integration/test_ctr.py, Joins). */
#if TS_TEST_HOOKS
static void hook_moved(uint32_t moved)
{
    const char *v = ts_hook("TESSERA_TEST_MASTER_DIE_MOVING");

    if (v && strtol(v, NULL, 10) == (long)moved) {
        ts_log(TS_WARN, "master", "TESSERA_TEST_MASTER_DIE_MOVING: killed after %u shards "
               "moved their tables", moved);
        raise(SIGKILL);
    }
}
#else
static void hook_moved(uint32_t moved)
{
    (void)moved;
}
#endif

/* MoveTables(mv) on every alive shard of view v (those without the job skipped); *moved: the
 * shards that moved its tables. */
static ts_status move_on_shards(struct snapper *sn, const struct snap_move *mv,
                                const struct ts_members_view *v, uint32_t *moved,
                                uint32_t *tables, uint64_t *rows, uint32_t *held_ms,
                                struct ts_err *err)
{
    Tessera__V1__MoveTablesRequest req = TESSERA__V1__MOVE_TABLES_REQUEST__INIT;
    ts_status st = TS_OK;

    req.job = (char *)mv->job;
    req.snapshot_id = (char *)mv->hex;
    req.step = mv->step;
    req.map_epoch = v->epoch;
    shard_channels_reserve(&sn->chan, v->nshards);
    for (size_t i = 0; !st && i < v->nshards; i++) {
        Tessera__V1__MoveTablesResponse *r = NULL;
        struct ts_rpc_channel *ch;
        struct ts_err e = { 0 };

        if ((st = shard_channels_get(&sn->chan, v->shards[i].addr, &ch, err)))
            break;
        st = ts_shard_move_tables(ch, &req, MOVE_CALL_MS, &r, &e);
        if (st == TS_ENOTFOUND) {   /* the shard does not hold the job */
            st = TS_OK;
        } else if (st) {
            ts_err_set(err, st, "shard %u: %s", v->shards[i].id, e.msg);
        } else {
            hook_moved(++*moved);
            *tables = r->tables > *tables ? r->tables : *tables;
            *rows += r->rows;
            *held_ms = r->held_ms > *held_ms ? r->held_ms : *held_ms;
        }
        if (r)
            protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    return st;
}

/* The join's moves (snapshot_for_join), once no shard is joining on a map past the joining
 * epoch: every shard places the job's tables on that map from the held step's snapshot. A
 * map that moved again before any shard moved them (ABORTED) is tried again on the next
 * pass; a move that fails otherwise (a shard that moved them takes pushes again: the move
 * cannot be done over), or waits past MOVE_WAIT_MS, is given up: the shards' holds end at
 * their time, and a job whose rows the map moved goes back to a snapshot, the join's
 * (services/shard/tables.c). sn->mu held. */
static void moves_run(struct snapper *sn)
{
    struct ts_members_view v;
    struct ts_err err = { 0 };
    bool joining = false;

    if (ts_members_view(sn->members, true, &v, &err))
        return;
    for (size_t i = 0; i < v.nshards; i++)
        joining |= v.shards[i].joining;
    for (size_t k = 0; k < sn->nmoves; ) {
        struct snap_move *mv = &sn->moves[k];
        uint32_t moved = 0, tables = 0, held_ms = 0;
        uint64_t rows = 0;
        int64_t t0 = ts_now_ms();
        ts_status st = TS_ESTALE;

        if (!joining && v.epoch > mv->epoch) {
            st = move_on_shards(sn, mv, &v, &moved, &tables, &rows, &held_ms, &err);
            if (st == TS_ESTALE && moved)
                st = TS_EUNAVAIL;   /* not to be tried again (above) */
            if (!st)
                count_move("moved", held_ms);
            else if (st != TS_ESTALE)
                count_move("failed", 0);
            if (!st)
                ts_log(TS_WARN, "master", "job %s: %u tables moved to the shards of epoch %"
                       PRIu64 " from snapshot %.12s at step %" PRIu64 " in %" PRId64 " ms (%"
                       PRIu64 " rows; their pushes held %u ms in all); no step redone",
                       mv->job, tables, v.epoch, mv->hex, mv->step, ts_now_ms() - t0, rows,
                       held_ms);
            else if (st != TS_ESTALE)
                ts_log(TS_WARN, "master", "job %s: the move of its tables failed (%s); "
                       "it goes back to a snapshot", mv->job, err.msg);
        }
        if (st == TS_ESTALE && ts_now_ms() - mv->since_ms < MOVE_WAIT_MS) {
            k++;
            continue;
        }
        if (st == TS_ESTALE) {
            count_move("gave_up", 0);
            ts_log(TS_WARN, "master", "job %s: no map past epoch %" PRIu64 " without a joining "
                   "shard came within %d s of its snapshot; its tables are not moved (their "
                   "holds end at their time, and a map that moved their rows sends the job "
                   "back to a snapshot)", mv->job, mv->epoch, MOVE_WAIT_MS / 1000);
        }
        sn->moves[k] = sn->moves[--sn->nmoves];
        moves_changed(sn);
        ts_err_clear(&err);
    }
    ts_members_view_free(&v);
}

/* The automatic loop: each running bsp, ssp or asp job in turn, at the next multiple of
 * `every` it has not passed (the current step itself when it is a multiple not written yet:
 * an idle job is captured at once). */
static void *auto_loop(void *arg)
{
    struct snapper *sn = arg;

    while (!atomic_load(&sn->stop)) {
        char ids[SNAP_MAX_JOBS][TS_JOB_ID_MAX + 1];
        bool tables[SNAP_MAX_JOBS];
        uint64_t maxvs[SNAP_MAX_JOBS], maxv, step, done = 0, join;
        struct taken t;
        struct ts_err err = { 0 };
        struct snap_job *r;
        size_t n, k;
        ts_status st;

        ts_sleep_ms(20);
        pthread_mutex_lock(&sn->mu);
        if (sn->nmoves) {   /* held tables: no other snapshot of their steps comes first */
            moves_run(sn);
            unlock_loop(sn);
            ts_sleep_ms(sn->nmoves ? 50 : 0);
            continue;
        }
        n = running_jobs(sn, ids, maxvs, tables, SNAP_MAX_JOBS);
        if ((join = atomic_load(&sn->join_asked)) > atomic_load(&sn->join_passed)) {
            snapshot_for_join(sn, join, ids, tables, n);
            unlock_loop(sn);
            continue;
        }
        if (a_shard_left(sn) && ts_members_replicas(sn->members) >= 2) {
            recopy_after_death(sn, ids, tables, n);
            unlock_loop(sn);
            continue;
        }
        if (!n) {
            pthread_mutex_unlock(&sn->mu);
            ts_sleep_ms(50);
            continue;
        }
        k = sn->turn++ % n;
        maxv = maxvs[k];
        pthread_mutex_lock(&sn->stat_mu);
        if ((r = snap_job_rec(sn, ids[k], false)))
            done = r->step;
        pthread_mutex_unlock(&sn->stat_mu);
        step = maxv % sn->every == 0 && maxv > done ? maxv : (maxv / sn->every + 1) * sn->every;
        st = take(sn, &(struct take_req){ ids[k], "", "", 3600000, true, step, false }, &t, &err);
        /* Training passed the step while another snapshot was written, it is not a sync of
         * a tensor with a sync period, the job lost state, or the map moved: a later one. */
        if (st == TS_ESTATE || st == TS_ESTALE)
            ts_log(TS_INFO, "master", "automatic snapshot: job %s step %" PRIu64 " skipped: "
                   "%s", ids[k], step, err.msg);
        pthread_mutex_unlock(&sn->mu);
        pthread_mutex_lock(&sn->stat_mu);
        if (st && st != TS_ENOTFOUND && st != TS_ETIMEDOUT && st != TS_ESTATE &&
            st != TS_ESTALE && st != TS_ECANCELLED) {
            if (strcmp(sn->error, err.msg))
                ts_log(TS_WARN, "master", "automatic snapshot: %s", err.msg);
            snprintf(sn->error, sizeof(sn->error), "%s", err.msg);
        } else if (!st) {
            sn->error[0] = '\0';
        }
        pthread_mutex_unlock(&sn->stat_mu);
        if (st)
            ts_sleep_ms(st == TS_ENOTFOUND || st == TS_ESTATE ? 50
                        : st == TS_ESTALE ? STALE_RETRY_MS : 300 / n);
    }
    return NULL;
}

void snapper_start(struct snapper *sn, struct master_state *state)
{
    sn->state = state;
    if (sn->store && sn->every && !sn->thread_started &&
        pthread_create(&sn->thread, NULL, auto_loop, sn) == 0)
        sn->thread_started = true;
}
