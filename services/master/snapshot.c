/* snapshot.c - coordinated snapshots and gc; see snapshot.h. */
#include "snapshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics/metrics.h"
#include "cluster/shard.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

#define MAX_SHARDS SNAP_MAX_SHARDS
#define CALL_MS 10000           /* ShardStatus, ArmSnapshot */
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
    bool held[MAX_SHARDS] = { false };

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

/* Arms step on every shard; *past set (and everything disarmed) if one is past it. */
static ts_status arm_all(struct shards *s, const char *job, uint64_t step, bool disarm,
                         bool *past, uint64_t *maxv, struct ts_err *err)
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

        (void)arm_all(s, job, 0, true, &ignored, &m, err);
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
        st = arm_all(s, job, *step, false, &past, &maxv, err);
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

/* job's record (added, in place of the oldest when full, if add); stat_mu held. */
static struct snap_job *job_rec(struct snapper *sn, const char *job, bool add)
{
    struct snap_job *r;

    for (size_t i = 0; i < sn->njobs; i++)
        if (!strcmp(sn->jobs[i].id, job))
            return &sn->jobs[i];
    if (!add)
        return NULL;
    if (sn->njobs < SNAP_MAX_JOBS)
        r = &sn->jobs[sn->njobs++];
    else
        r = &sn->jobs[sn->next_slot++ % SNAP_MAX_JOBS];
    memset(r, 0, sizeof(*r));
    snprintf(r->id, sizeof(r->id), "%s", job);
    return r;
}

/* job's newest snapshot is hex at step; stat_mu held. */
static void note_job(struct snapper *sn, const char *job, const char *hex, uint64_t step)
{
    struct snap_job *r = job_rec(sn, job, true);

    snprintf(r->hex, sizeof(r->hex), "%s", hex);
    r->step = step;
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
        pieces[i] = (struct ts_snap_piece){ .shard = s->id[i], .tensors = r->tensors,
                                            .n_tensors = r->n_tensors, .job = r->job,
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
    note_job(sn, m.job->id, out->hex, step);
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
    struct ts_metric_family *taken, *secs, *bytes;
} snap_metrics = { PTHREAD_ONCE_INIT, NULL, NULL, NULL };

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
            (void)arm_all(&s, job, 0, true, &ignored, &maxv, &e);
        else
            st = commit(sn, &s, job, step, req, out, err);
    }
    shards_free(&s);
    count_snapshot(!st, (double)(ts_now_ns() - t0) / 1e9, st ? 0 : out->written);
    return st;
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
    st = take(sn, &(struct take_req){ job, message, tag, timeout_ms, false, 0 }, &t, err);
    pthread_mutex_unlock(&sn->mu);
    if (!st || t.hex[0]) {  /* written (a tag that failed is reported with the id) */
        memcpy(hex, t.hex, sizeof(t.hex));
        *step = t.step;
        *written = t.written;
    }
    return st;
}

/* The running jobs that keep their parameters on the shards (not reduce), on the alive
 * shards (at most max), and the newest step of each; returns how many. sn->mu held (its
 * channels). */
static size_t running_jobs(struct snapper *sn, char (*ids)[TS_JOB_ID_MAX + 1], uint64_t *maxv,
                           size_t max)
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
                maxv[n++] = 0;
            }
            if (k < n && js->max_version > maxv[k])
                maxv[k] = js->max_version;
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_members_view_free(&v);
    return n;
}

/* The automatic loop: each running bsp, ssp or asp job in turn, at the next multiple of
 * `every` it has not passed (the current step itself when it is a multiple not written yet:
 * an idle job is captured at once). */
static void *auto_loop(void *arg)
{
    struct snapper *sn = arg;

    while (!atomic_load(&sn->stop)) {
        char ids[SNAP_MAX_JOBS][TS_JOB_ID_MAX + 1];
        uint64_t maxvs[SNAP_MAX_JOBS], maxv, step, done = 0;
        struct taken t;
        struct ts_err err = { 0 };
        struct snap_job *r;
        size_t n, k;
        ts_status st;

        ts_sleep_ms(20);
        pthread_mutex_lock(&sn->mu);
        if (!(n = running_jobs(sn, ids, maxvs, SNAP_MAX_JOBS))) {
            pthread_mutex_unlock(&sn->mu);
            ts_sleep_ms(50);
            continue;
        }
        k = sn->turn++ % n;
        maxv = maxvs[k];
        pthread_mutex_lock(&sn->stat_mu);
        if ((r = job_rec(sn, ids[k], false)))
            done = r->step;
        pthread_mutex_unlock(&sn->stat_mu);
        step = maxv % sn->every == 0 && maxv > done ? maxv : (maxv / sn->every + 1) * sn->every;
        st = take(sn, &(struct take_req){ ids[k], "", "", 3600000, true, step }, &t, &err);
        if (st == TS_ESTATE)
            ts_log(TS_INFO, "master", "automatic snapshot: job %s step %" PRIu64 " skipped "
                   "(training passed it while another snapshot was written, or it is not a "
                   "sync of a tensor with a sync period)", ids[k], step);
        pthread_mutex_unlock(&sn->mu);
        pthread_mutex_lock(&sn->stat_mu);
        if (st && st != TS_ENOTFOUND && st != TS_ETIMEDOUT && st != TS_ESTATE &&
            st != TS_ECANCELLED) {
            if (strcmp(sn->error, err.msg))
                ts_log(TS_WARN, "master", "automatic snapshot: %s", err.msg);
            snprintf(sn->error, sizeof(sn->error), "%s", err.msg);
        } else if (!st) {
            sn->error[0] = '\0';
        }
        pthread_mutex_unlock(&sn->stat_mu);
        if (st)
            ts_sleep_ms(st == TS_ENOTFOUND || st == TS_ESTATE ? 50 : 300 / n);
    }
    return NULL;
}

/* "from-<12 hex>", or with -2, -3... if that branch exists at another snapshot. */
static ts_status new_branch(struct snapper *sn, const char *stem, const uint8_t *at,
                            struct ts_err *err)
{
    uint8_t cur[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };

    for (int n = 1; n < 1000; n++) {
        if (n == 1)
            snprintf(sn->branch, sizeof(sn->branch), "heads/%s", stem);
        else
            snprintf(sn->branch, sizeof(sn->branch), "heads/%s-%d", stem, n);
        ts_status st;

        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_ENOTFOUND || (st == TS_OK && at && memcmp(cur, at, sizeof(cur)) == 0))
            return TS_OK;
        if (st && st != TS_ENOTFOUND)
            return ts_err_set(err, st, "%s", e.msg);
    }
    return ts_err_set(err, TS_EEXIST, "store: branches %s-2..999 all exist; use --branch", stem);
}

/* The snapshot restore names becomes the tip (named: the branch it is the tip of, or ""). */
static ts_status resolve_restore(struct snapper *sn, const char *restore,
                                 char named[TS_STORE_REF_MAX + 1], struct ts_err *err)
{
    ts_status st;

    named[0] = '\0';
    if (!restore || !restore[0])
        return TS_OK;
    if ((st = ts_snap_resolve(sn->store, restore, sn->tip, named, err)))
        return st;
    sn->has_tip = true;
    return TS_OK;
}

/* A restarted master goes on committing to the branch it had: the tip is the branch's value
 * now (none if it has no snapshot yet), and HEAD points at it. */
static ts_status continue_branch(struct snapper *sn, const char *resume, struct ts_err *err)
{
    struct ts_err e = { 0 };
    ts_status st;

    snprintf(sn->branch, sizeof(sn->branch), "%s", resume);
    if (!ts_store_ref_valid(sn->branch))
        return ts_err_set(err, TS_ECORRUPT, "the state's branch '%s' is not a valid name",
                          resume);
    st = ts_store_ref_get(sn->store, sn->branch, sn->tip, &e);
    if (st && st != TS_ENOTFOUND)
        return ts_err_set(err, st, "%s", e.msg);
    sn->has_tip = st == TS_OK;
    return ts_store_head_set(sn->store, sn->branch, err);
}

static ts_status settle_branch(struct snapper *sn, const char *restore, const char *branch,
                               struct ts_err *err)
{
    char named[TS_STORE_REF_MAX + 1] = "", hex[TS_STORE_HEX_LEN + 1], stem[64];
    uint8_t cur[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };
    ts_status st;

    if ((st = resolve_restore(sn, restore, named, err)))
        return st;
    if (branch && branch[0]) {
        snprintf(sn->branch, sizeof(sn->branch), "heads/%s", branch);
        if (!ts_store_ref_valid(sn->branch))
            return ts_err_set(err, TS_EINVAL, "--branch: '%s' is not a valid name", branch);
        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_OK && !(sn->has_tip && memcmp(cur, sn->tip, sizeof(cur)) == 0))
            return ts_err_set(err, TS_EEXIST, "--branch: %s exists at another snapshot; pick "
                              "another name", branch);
        if (st && st != TS_ENOTFOUND)
            return ts_err_set(err, st, "%s", e.msg);
    } else if (named[0]) {
        snprintf(sn->branch, sizeof(sn->branch), "%s", named);
    } else if (sn->has_tip) {
        snprintf(stem, sizeof(stem), "from-%.12s", ts_store_hex(sn->tip, hex));
        if ((st = new_branch(sn, stem, sn->tip, err)))
            return st;
    }
    if (sn->has_tip) { /* a new branch starts at the restored snapshot */
        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_ENOTFOUND)
            st = ts_store_ref_set(sn->store, sn->branch, sn->tip, NULL, err);
        else if (st)
            st = ts_err_set(err, st, "%s", e.msg);
        if (st)
            return st;
    } else if (!(branch && branch[0])) {
        if ((st = ts_store_head_get(sn->store, sn->branch, err)))
            return st;
        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_OK) { /* a fresh run does not continue someone else's history */
            time_t now = time(NULL);
            struct tm tm;

            strftime(stem, sizeof(stem), "run-%Y%m%d-%H%M%S", gmtime_r(&now, &tm));
            if ((st = new_branch(sn, stem, NULL, err)))
                return st;
        } else if (st != TS_ENOTFOUND) {
            return ts_err_set(err, st, "%s", e.msg);
        }
    }
    return ts_store_head_set(sn->store, sn->branch, err);
}

ts_status snapper_open(struct snapper *sn, struct ts_members *members, struct datamap *data,
                       struct jobs *jobs, const char *dir, const char *restore,
                       const char *branch, const char *resume, uint32_t every,
                       struct ts_err *err)
{
    char named[TS_STORE_REF_MAX + 1];
    bool resuming = resume && resume[0];
    ts_status st;

    memset(sn, 0, sizeof(*sn));
    pthread_mutex_init(&sn->mu, NULL);
    pthread_mutex_init(&sn->stat_mu, NULL);
    sn->members = members;
    sn->running = jobs;
    sn->data = data;
    sn->every = every;
    if (!dir)
        return TS_OK;
    snprintf(sn->dir, sizeof(sn->dir), "%s", dir);
    if ((st = ts_store_open(dir, NULL, &sn->store, err)) ||
        (st = resuming ? resolve_restore(sn, restore, named, err)
                       : settle_branch(sn, restore, branch, err))) {
        ts_err_prefix(err, "--store %s", dir);
        return st;
    }
    if (sn->has_tip) {
        char hex[TS_STORE_HEX_LEN + 1];
        ts_manifest *m;

        if ((st = ts_manifest_load(sn->store, sn->tip, &m, err)))
            return st;
        snprintf(sn->last_hex, sizeof(sn->last_hex), "%s", ts_store_hex(sn->tip, hex));
        char source[96];
        snprintf(source, sizeof(source), "snapshot %.12s", hex);
        if ((st = datamap_restore(data, m, source, err))) {
            ts_manifest_free(m);
            return st;
        }
        sn->last_step = m->step;
        sn->last_unix_ms = m->created_unix_ms;
        if (m->job)
            note_job(sn, m->job->id, sn->last_hex, m->step);
        ts_manifest_free(m);
    }
    if (resuming && (st = continue_branch(sn, resume, err))) {
        ts_err_prefix(err, "--store %s", dir);
        return st;
    }
    ts_log(TS_INFO, "master", "snapshots: store %s, branch %s%s", dir, sn->branch,
           resuming ? " (continued after a restart)" : sn->has_tip ? " (restored)" : "");
    if (every && pthread_create(&sn->thread, NULL, auto_loop, sn) == 0)
        sn->thread_started = true;
    return TS_OK;
}

void snapper_stop(struct snapper *sn)
{
    atomic_store(&sn->stop, true);
    if (sn->thread_started)
        pthread_join(sn->thread, NULL);
    sn->thread_started = false;
}

void snapper_close(struct snapper *sn)
{
    snapper_stop(sn);
    shard_channels_free(&sn->chan);
    ts_store_close(sn->store);
    pthread_mutex_destroy(&sn->mu);
    pthread_mutex_destroy(&sn->stat_mu);
}

ts_status snapper_gc(struct snapper *sn, unsigned tmp_grace_s, struct ts_store_stats *stats,
                     uint64_t *live, struct ts_err *err)
{
    uint8_t (*ids)[TS_STORE_ID_LEN] = NULL;
    size_t n = 0;
    ts_status st;

    if (!sn->store)
        return ts_err_set(err, TS_ESTATE, "this master runs without --store");
    pthread_mutex_lock(&sn->mu);
    st = ts_snap_live_chunks(sn->store, &ids, &n, NULL, err);
    if (!st)
        st = ts_store_gc(sn->store, (const uint8_t(*)[TS_STORE_ID_LEN])ids, n, tmp_grace_s,
                         stats, err);
    pthread_mutex_unlock(&sn->mu);
    free(ids);
    *live = n;
    return st;
}

bool snapper_last_of(struct snapper *sn, const char *job, char hex[TS_STORE_HEX_LEN + 1],
                     uint64_t *step)
{
    struct snap_job *r;
    bool found;

    pthread_mutex_lock(&sn->stat_mu);
    r = sn->store ? job_rec(sn, job, false) : NULL;
    if ((found = r && r->hex[0])) {
        memcpy(hex, r->hex, TS_STORE_HEX_LEN + 1);
        *step = r->step;
    }
    pthread_mutex_unlock(&sn->stat_mu);
    return found;
}

void snapper_status(struct snapper *sn, struct ts_rpc_call *call,
                    Tessera__V1__ClusterStatusResponse *resp)
{
    resp->store = ts_rpc_strdup(call, sn->dir);
    resp->snapshot_every = sn->every;
    pthread_mutex_lock(&sn->stat_mu);
    resp->branch = ts_rpc_strdup(call, sn->store ? sn->branch : "");
    resp->snapshot_error = ts_rpc_strdup(call, sn->error);
    if (sn->last_hex[0]) {
        Tessera__V1__SnapshotRef *r = ts_rpc_new(call, &tessera__v1__snapshot_ref__descriptor);
        r->id = ts_rpc_strdup(call, sn->last_hex);
        r->branch = ts_rpc_strdup(call, sn->branch);
        r->step = sn->last_step;
        r->created_unix_ms = sn->last_unix_ms;
        resp->last_snapshot = r;
    }
    pthread_mutex_unlock(&sn->stat_mu);
}

const char *snapper_branch(struct snapper *sn, struct ts_rpc_call *call)
{
    const char *b;

    pthread_mutex_lock(&sn->stat_mu);
    b = ts_rpc_strdup(call, sn->store ? sn->branch : "");
    pthread_mutex_unlock(&sn->stat_mu);
    return b;
}

Tessera__V1__JobSnapshot **snapper_job_snapshots(struct snapper *sn, struct ts_rpc_call *call,
                                                 size_t *n)
{
    Tessera__V1__JobSnapshot **out;

    pthread_mutex_lock(&sn->stat_mu);
    out = ts_rpc_alloc(call, (sn->njobs + 1) * sizeof(*out));
    *n = 0;
    for (size_t i = 0; i < sn->njobs; i++) {
        Tessera__V1__JobSnapshot *j;
        if (!sn->jobs[i].hex[0])
            continue;
        j = ts_rpc_new(call, &tessera__v1__job_snapshot__descriptor);
        j->job = ts_rpc_strdup(call, sn->jobs[i].id);
        j->id = ts_rpc_strdup(call, sn->jobs[i].hex);
        j->step = sn->jobs[i].step;
        out[(*n)++] = j;
    }
    pthread_mutex_unlock(&sn->stat_mu);
    return out;
}

void snapper_restore_jobs(struct snapper *sn, Tessera__V1__JobSnapshot *const *v, size_t n)
{
    pthread_mutex_lock(&sn->stat_mu);
    for (size_t i = 0; i < n; i++)
        if (strlen(v[i]->job) <= TS_JOB_ID_MAX && strlen(v[i]->id) == TS_STORE_HEX_LEN)
            note_job(sn, v[i]->job, v[i]->id, v[i]->step);
    pthread_mutex_unlock(&sn->stat_mu);
}
