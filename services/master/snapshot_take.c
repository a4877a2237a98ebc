/* snapshot_take.c - taking a coordinated snapshot (snapshot.h): find the shards holding the
 * job, arm a step ahead of training on each, have each write its partitions, then commit the
 * manifest and move the branch; CreateSnapshot's entry and the automatic loop that takes one
 * every N steps of each running job; the snapshot metrics. */
#include "snapshot.h"
#include "snapshot_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/shard.h"
#include "metrics/metrics.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

#define MAX_SHARDS SNAP_MAX_SHARDS
#define WRITE_CALL_MS 600000    /* WriteSnapshot: waiting plus writing the partitions */
#define POLL_MS 500             /* one WriteSnapshot wait */
#define STALL_MS 5000           /* no partition moved for this long: training has stopped */

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
        if ((st = ts_shard_status(out->ch[out->n - 1], &req, TS_SHARD_ONCE, SNAP_CALL_MS, &r,
                                  err)))
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
        one = ts_shard_arm_snapshot(s->ch[i], &req, SNAP_CALL_MS, &r, disarm ? &e : err);
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

void snap_count_move(const char *result, uint32_t held_ms)
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

ts_status snap_take(struct snapper *sn, const struct take_req *req, struct taken *out,
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

ts_status snap_take_while_stale(struct snapper *sn, const char *job, const char *message,
                                const char *tag, int timeout_ms, bool hold, struct taken *t,
                                struct ts_err *err)
{
    ts_status st;

    for (int64_t until = ts_now_ms() + timeout_ms;;) {
        int left = (int)(until - ts_now_ms());
        st = snap_take(sn, &(struct take_req){ job, message, tag, left > 0 ? left : 0, false, 0,
                                          hold }, t, err);
        if (st != TS_ESTALE || ts_now_ms() + SNAP_STALE_RETRY_MS >= until ||
            atomic_load(&sn->stop))
            return st;
        ts_log(TS_INFO, "master", "snapshot: %s; again in %d ms", err->msg,
               SNAP_STALE_RETRY_MS);
        ts_err_clear(err);
        ts_sleep_ms(SNAP_STALE_RETRY_MS);
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
    st = snap_take_while_stale(sn, job, message, tag, timeout_ms, false, &t, err);
    pthread_mutex_unlock(&sn->mu);
    if (!st || t.hex[0]) {  /* written (a tag that failed is reported with the id) */
        memcpy(hex, t.hex, sizeof(t.hex));
        *step = t.step;
        *written = t.written;
    }
    return st;
}
