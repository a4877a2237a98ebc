/* walks.c - the walks over a job's partitions: snapshot arm and write, and status. See
 * params.h; the registry itself is params.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "params.h"
#include "params_internal.h"
#include "rowcopy.h"
#include "tables.h"
#include "util/log.h"
#include "util/proc.h"

/* Calls fn on every partition this shard holds of sj; stops at the first error. Tensors are
 * only ever added, but a map that moved a partition away drops it (rechain.c), and
 * shard_params_reap frees it once nothing pins it: each one is read under mu and pinned
 * while fn runs (a snapshot's write waits on a partition for seconds; a partition freed
 * meanwhile was a use after free that hung the shard's snapshot). */
static ts_status walk(struct shard_params *sp, struct shard_job *sj, bool followers,
                      ts_status (*fn)(void *ctx, struct shard_tensor *t, uint32_t index,
                                      struct ts_part *p, struct ts_err *err),
                      void *ctx, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (size_t i = 0; !st && i < SHARD_MAX_TENSORS; i++) {
        struct shard_tensor *t;

        pthread_mutex_lock(&sp->mu);
        t = sj->tensors[i];
        pthread_mutex_unlock(&sp->mu);
        for (uint32_t p = 0; t && !st && p < t->nparts; p++) {
            struct ts_part *part;

            pthread_mutex_lock(&sp->mu);
            if ((part = t->parts[p]) && (followers || !t->follows[p]))
                ts_part_pin(part);
            else
                part = NULL;
            pthread_mutex_unlock(&sp->mu);
            if (part) {
                st = fn(ctx, t, p, part, err);
                ts_part_unpin(part);
            }
        }
    }
    return st;
}

/* fn's calls through each_part, which walks heads only: a chain speaks through its head. */
struct head_fn {
    ts_status (*fn)(void *ctx, struct shard_tensor *t, struct ts_part *p, struct ts_err *err);
    void *ctx;
};

static ts_status head_one(void *ctx, struct shard_tensor *t, uint32_t index, struct ts_part *p,
                          struct ts_err *err)
{
    struct head_fn *h = ctx;

    return h->fn(h->ctx, t, p, err);
}

static ts_status each_part(struct shard_params *sp, struct shard_job *sj,
                           ts_status (*fn)(void *ctx, struct shard_tensor *t, struct ts_part *p,
                                           struct ts_err *err),
                           void *ctx, struct ts_err *err)
{
    struct head_fn h = { fn, ctx };

    return walk(sp, sj, false, head_one, &h, err);
}

/* The span of versions over a job's partitions (min starts at UINT64_MAX), and how many. */
struct versions {
    uint64_t min, max, count;
};

static void note_version(struct versions *v, struct ts_part *p)
{
    uint64_t lo, hi;

    ts_part_steps(p, &lo, &hi);
    v->min = lo < v->min ? lo : v->min;
    v->max = hi > v->max ? hi : v->max;
    v->count++;
}

static ts_status versions_one(void *ctx, struct shard_tensor *t, struct ts_part *p,
                              struct ts_err *err)
{
    note_version(ctx, p);
    return TS_OK;
}

/* The walk that arms (or, with disarm, disarms) every partition of a job for `step`. */
struct arming {
    struct versions v;
    uint64_t step;
    bool disarm;
};

static ts_status arm_one(void *ctx, struct shard_tensor *t, struct ts_part *p, struct ts_err *err)
{
    struct arming *a = ctx;

    note_version(&a->v, p);
    if (a->disarm) {
        ts_part_disarm(p);
        return TS_OK;
    }
    return ts_part_arm(p, a->step, err);
}

static ts_status disarm_one(void *ctx, struct shard_tensor *t, struct ts_part *p,
                            struct ts_err *err)
{
    ts_part_disarm(p);
    return TS_OK;
}

static void set_armed(struct shard_params *sp, struct shard_job *sj, bool armed, uint64_t step)
{
    pthread_mutex_lock(&sp->mu);
    sj->armed_step = step;
    sj->armed = armed;
    sj->armed_ms = ts_now_ms();
    pthread_mutex_unlock(&sp->mu);
}

/* Snapshots need a mode that keeps the parameters on the shards (docs/modes.md). Sync
 * periods are fine: a snapshot falls on a multiple of every one (ts_part_arm). */
static ts_status check_snapshottable(struct shard_job *sj, struct ts_err *err)
{
    if (sj->job.mode == TS_MODE_REDUCE)
        return ts_err_set(err, TS_ESTATE, "job: '%s' runs in mode reduce, whose parameters "
                          "live on the workers; snapshots need mode bsp, ssp or asp "
                          "(docs/modes.md)", sj->job.id);
    return TS_OK;
}

/* TS_OK unless sj lost state a snapshot would have to hold. */
static ts_status state_whole(struct shard_job *sj, struct ts_err *err)
{
    if (!atomic_load(&sj->state_lost))
        return TS_OK;
    return ts_err_set(err, TS_ESTATE, "job '%s' lost state on this shard (a partition, or "
                      "table rows, lost every copy): a snapshot now would miss it; the job "
                      "goes back to its last snapshot first", sj->job.id);
}

ts_status shard_params_arm(struct shard_params *sp, const char *job, uint64_t step, bool disarm,
                           bool hold, bool *armed, uint64_t *minv, uint64_t *maxv,
                           struct ts_err *err)
{
    struct shard_job *sj;
    struct arming a = { .v.min = UINT64_MAX, .step = step, .disarm = disarm };
    struct ts_err past = { 0 };
    ts_status st = TS_OK;

    *armed = false;
    *minv = *maxv = 0;
    pthread_mutex_lock(&sp->snap_mu);   /* the job cannot be released meanwhile */
    if (!(sj = params_find_job(sp, job)))
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' has no tensors on this shard", job);
    else if (!disarm)
        st = check_snapshottable(sj, err);
    if (!st && !disarm)
        st = state_whole(sj, err);
    if (st) {
        pthread_mutex_unlock(&sp->snap_mu);
        return st;
    }
    /* Announced before the walk, under the registry lock: a tensor registered from now on
     * arms its own partitions (shard_params_register), one registered before is walked. */
    set_armed(sp, sj, !disarm, step);
    st = each_part(sp, sj, arm_one, &a, &past);
    if (!st || disarm) {   /* the tables too (tables.h): one past step is as a partition */
        bool tpast = false;
        ts_status ts = shard_tables_arm(sp, sj, step, disarm, hold, &tpast, &a.v.max, &past);
        if (!disarm && (ts || tpast)) {
            st = ts ? ts : TS_ESTATE;
            (void)shard_tables_arm(sp, sj, step, true, false, &tpast, &a.v.max, &past);
        }
    }
    if (disarm)   /* the master gave the snapshot up: a join's hold with it */
        shard_tables_unhold(sp, sj);
    if (!st && !disarm) {
        *armed = true;
    } else if (!disarm) {
        /* One is past step (or out of memory): undo, walking all to report the full span. */
        set_armed(sp, sj, false, 0);
        a = (struct arming){ .v.min = UINT64_MAX, .disarm = true };
        (void)each_part(sp, sj, arm_one, &a, err);
        st = st == TS_ESTATE ? TS_OK : ts_err_set(err, st, "%s", past.msg);
    }
    *minv = a.v.min == UINT64_MAX ? 0 : a.v.min;
    *maxv = a.v.max;
    pthread_mutex_unlock(&sp->snap_mu);
    return st;
}

struct writer {
    struct shard_params *sp;
    int64_t until;
    bool missing;
    size_t slen;
    uint64_t step;
    struct ts_snap_piece *piece;
};

/* Waits for p's copy of the step. A partition this shard heads since the arm (promoted when
 * its head died) has none armed: it is armed now, or the write fails when it is past the
 * step (the master takes the next snapshot). */
static ts_status wait_one(void *ctx, struct shard_tensor *t, struct ts_part *p,
                          struct ts_err *err)
{
    struct writer *w = ctx;
    int64_t left = w->until - ts_now_ms();
    ts_status st;

    if (!ts_part_armed(p, w->step)) {
        if ((st = ts_part_arm(p, w->step, err))) {
            ts_err_prefix(err, "tensor '%s': this shard heads partition %u since the snapshot "
                          "of step %" PRIu64 " was armed; take the snapshot again", t->name,
                          ts_part_index(p), w->step);
            return st;
        }
        ts_log(TS_INFO, "shard", "tensor '%s' partition %u: headed here since the arm, armed "
               "for the snapshot of step %" PRIu64, t->name, ts_part_index(p), w->step);
    }
    if (!ts_part_captured(p, left > 0 ? (int)left : 0))
        w->missing = true;
    return TS_OK;
}

static struct ts_snap_tensor snap_tensor(const struct shard_tensor *t)
{
    return (struct ts_snap_tensor){
        .id = t->id, .nparts = t->nparts, .name = t->name, .init = t->init, .shape = t->shape,
        .ndim = t->ndim, .seed = t->seed, .fan_in = t->fan_in, .fan_out = t->fan_out,
        .numel = t->numel, .partition_bytes = t->partition_bytes, .salt = t->salt,
    };
}

static ts_status write_one(void *ctx, struct shard_tensor *t, struct ts_part *p,
                           struct ts_err *err)
{
    struct writer *w = ctx;
    struct ts_snap_tensor ts = snap_tensor(t);
    struct ts_snap_part part = {
        .index = ts_part_index(p), .offset = ts_part_offset(p), .len = ts_part_len(p),
        .version = w->step, .has_updates = true,
    };

    if (!ts_part_armed(p, w->step) || !ts_part_captured(p, 0))   /* headed here since the wait */
        return ts_err_set(err, TS_ESTATE, "tensor '%s': this shard heads partition %u since "
                          "the snapshot of step %" PRIu64 " was waited for; take the snapshot "
                          "again", t->name, ts_part_index(p), w->step);

    ts_part_capture(p, &part.value, &part.state, &part.updates);
    part.slen = w->slen * part.len;
    return ts_snap_piece_add(w->piece, w->sp->store, &ts, &part, err);
}

ts_status shard_params_write(struct shard_params *sp, const char *job, uint64_t step,
                             int wait_ms, struct ts_snap_piece *piece, bool *ready,
                             uint64_t *min_version, struct ts_err *err)
{
    struct shard_job *sj;
    struct writer w = { .sp = sp, .until = ts_now_ms() + wait_ms, .step = step, .piece = piece };
    ts_status st = TS_OK;

    *ready = false;
    *min_version = 0;
    if (!sp->store)
        return ts_err_set(err, TS_ESTATE, "this shard runs without --store; restart it with "
                          "the cluster's store");
    pthread_mutex_lock(&sp->snap_mu);   /* the job cannot be released meanwhile */
    if (!(sj = params_find_job(sp, job)))
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' has no tensors on this shard", job);
    else if (!sj->armed || sj->armed_step != step)
        st = ts_err_set(err, TS_ESTATE, "step: no snapshot of job '%s' is armed at step %"
                        PRIu64 " on this shard (ArmSnapshot first)", job, step);
    if (!st)
        st = each_part(sp, sj, wait_one, &w, err);
    if (!st && w.missing) {
        struct versions v = { .min = UINT64_MAX };

        pthread_mutex_lock(&sp->mu);   /* its master still waits for it */
        sj->armed_ms = ts_now_ms();
        pthread_mutex_unlock(&sp->mu);

        (void)each_part(sp, sj, versions_one, &v, err);
        *min_version = v.min;
        pthread_mutex_unlock(&sp->snap_mu);
        return TS_OK; /* not ready; still armed */
    }
    w.slen = ts_optim_state_len(sj->job.optim.kind);
    if (!st) {   /* the tables' captures: not ready is as a partition missing */
        bool tready = false;
        st = shard_tables_write(sp, sj, step, w.until, piece, &tready, err);
        if (!st && !tready) {
            struct versions v = { .min = UINT64_MAX };
            (void)each_part(sp, sj, versions_one, &v, err);
            *min_version = v.min == UINT64_MAX ? 0 : v.min;
            pthread_mutex_unlock(&sp->snap_mu);
            return TS_OK;   /* not ready; still armed */
        }
    }
    if (!st)
        st = each_part(sp, sj, write_one, &w, err);
    for (size_t i = 0; !st && i < SHARD_MAX_TENSORS; i++) {
        struct shard_tensor *t;

        pthread_mutex_lock(&sp->mu);   /* tensors are only added: t stays */
        t = sj->tensors[i];
        pthread_mutex_unlock(&sp->mu);
        if (t) {
            struct ts_snap_tensor ts = snap_tensor(t);
            st = ts_snap_piece_declare(piece, &ts, err);
        }
    }
    /* Lost since the arm (a death this shard followed meanwhile): the piece would miss it. */
    if (!st)
        st = state_whole(sj, err);
    if (!st)
        st = ts_snap_piece_set_job(piece, &sj->job, sj->data_seed, sj->micro, err);
    if (!st) {
        *ready = true;
        (void)each_part(sp, sj, disarm_one, NULL, err);
        set_armed(sp, sj, false, 0);
    }
    pthread_mutex_unlock(&sp->snap_mu);
    return st;
}

/* Disarms sj if its snapshot lapsed; whether it did. snap_mu held. */
static bool expire_arm(struct shard_params *sp, struct shard_job *sj, int64_t now_ms)
{
    struct ts_err ignored = { 0 };
    int64_t idle;
    uint64_t step;

    pthread_mutex_lock(&sp->mu);
    idle = now_ms - sj->armed_ms;
    step = sj->armed_step;
    pthread_mutex_unlock(&sp->mu);
    if (!sj->armed || idle < sp->arm_timeout_ms)
        return false;
    (void)each_part(sp, sj, disarm_one, NULL, &ignored);
    {
        bool past;
        uint64_t maxv = 0;
        (void)shard_tables_arm(sp, sj, step, true, false, &past, &maxv, &ignored);
    }
    set_armed(sp, sj, false, 0);
    pthread_mutex_lock(&sp->mu);
    sp->arms_expired++;
    pthread_mutex_unlock(&sp->mu);
    ts_log(TS_WARN, "shard", "job %s: the snapshot armed at step %" PRIu64 " was not asked for "
           "in %" PRId64 " ms (--arm-timeout-ms): disarmed, the job may be released", sj->job.id,
           step, idle);
    return true;
}

size_t shard_params_expire_arms(struct shard_params *sp, int64_t now_ms)
{
    char ids[SHARD_MAX_JOBS][TS_JOB_ID_MAX + 1];
    size_t n = 0, done = 0;

    if (sp->arm_timeout_ms <= 0)
        return 0;
    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs; i++)
        if (sp->jobs[i]->armed && now_ms - sp->jobs[i]->armed_ms >= sp->arm_timeout_ms)
            snprintf(ids[n++], sizeof(ids[0]), "%s", sp->jobs[i]->job.id);
    pthread_mutex_unlock(&sp->mu);
    for (size_t i = 0; i < n; i++) {
        struct shard_job *sj;

        pthread_mutex_lock(&sp->snap_mu);   /* the job cannot be released meanwhile */
        if ((sj = params_find_job(sp, ids[i])))
            done += expire_arm(sp, sj, now_ms);
        pthread_mutex_unlock(&sp->snap_mu);
    }
    return done;
}

static ts_status ranks_one(void *ctx, struct shard_tensor *t, struct ts_part *p,
                           struct ts_err *err)
{
    ts_part_fold_ranks(p, ctx);
    return TS_OK;
}

/* sj's per-rank records and skipped count into js. */
static ts_status job_ranks(struct shard_params *sp, struct shard_job *sj,
                           struct shard_job_status *js, struct ts_err *err)
{
    uint32_t n = sj->job.mode == TS_MODE_SSP || sj->job.mode == TS_MODE_ASP ? sj->job.workers : 0;
    struct ts_part_ranks *r = &js->ranks;
    uint64_t *block = malloc((3 * (size_t)n + 1) * sizeof(uint64_t));
    struct ts_err e = { 0 };

    if (!block)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    *r = (struct ts_part_ranks){ .n = n, .clock = block, .stale_last = block + n,
                                 .stale_max = block + 2 * (size_t)n };
    for (uint32_t k = 0; k < n; k++) {
        r->clock[k] = UINT64_MAX;
        r->stale_last[k] = r->stale_max[k] = 0;
    }
    (void)each_part(sp, sj, ranks_one, r, &e);
    for (uint32_t k = 0; k < n; k++)
        if (r->clock[k] == UINT64_MAX)
            r->clock[k] = 0;
    return TS_OK;
}

static ts_status roles_one(void *ctx, struct shard_tensor *t, uint32_t index, struct ts_part *p,
                          struct ts_err *err)
{
    struct shard_job_status *js = ctx;

    if (t->follows[index])
        js->follows++;
    else
        js->lag += ts_part_version(p) - ts_part_visible(p);
    return TS_OK;
}

ts_status shard_params_jobs(struct shard_params *sp, struct shard_job_status **out, size_t *n,
                            struct ts_err *err)
{
    struct shard_job_status *all;
    size_t nj;
    ts_status st = TS_OK;

    pthread_rwlock_rdlock(&sp->life);   /* no job is released during the walk */
    pthread_mutex_lock(&sp->mu);
    nj = sp->njobs;
    pthread_mutex_unlock(&sp->mu);
    if (!(all = calloc(nj + 1, sizeof(*all)))) {
        pthread_rwlock_unlock(&sp->life);
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    }
    for (size_t j = 0; !st && j < nj; j++) {
        struct shard_job *sj = sp->jobs[j];
        struct shard_job_status *js = &all[j];
        struct versions v = { .min = UINT64_MAX };
        struct ts_err e = { 0 };

        (void)each_part(sp, sj, versions_one, &v, &e);
        (void)walk(sp, sj, true, roles_one, js, &e);
        js->armed_step = sj->armed ? sj->armed_step : 0;
        for (size_t i = 0; i < SHARD_MAX_TENSORS; i++)
            js->tensors += sj->tensors[i] != NULL;
        for (size_t i = 0; !st && i < SHARD_MAX_TABLES; i++) {
            struct shard_table *t = shard_params_table(sp, sj, (uint32_t)i);
            struct shard_table_status *ts;
            if (!t)
                continue;
            if (!js->table && !(js->table = calloc(SHARD_MAX_TABLES, sizeof(*js->table)))) {
                st = ts_err_set(err, TS_ENOMEM, "out of memory");
                break;
            }
            ts = &js->table[js->tables++];
            ts->id = t->id;
            snprintf(ts->name, sizeof(ts->name), "%s", t->name);
            ts->rows = rowcopy_rows(t);
            ts->bytes = rowcopy_bytes(t);
            ts->ttl_steps = t->ttl_steps;
            ts->ttl_seconds = t->ttl_seconds;
            rowcopy_tiers(t, &ts->tiers);
            ts->pulled = atomic_load(&t->pulled);
            ts->pushed = atomic_load(&t->pushed);
            ts->pulled_per_s = atomic_load(&t->pulled_milli_s) / 1000.0;
            ts->pushed_per_s = atomic_load(&t->pushed_milli_s) / 1000.0;
            js->table_rows += ts->rows;
            js->table_bytes += ts->bytes;
        }
        snprintf(js->id, sizeof(js->id), "%s", sj->job.id);
        js->workers = sj->job.workers;
        js->exact = sj->job.exact;
        js->min_version = v.min == UINT64_MAX ? 0 : v.min;
        js->max_version = v.max;
        js->partitions = v.count;
        js->mode = sj->job.mode;
        js->staleness = sj->job.staleness;
        st = job_ranks(sp, sj, js, err);
    }
    pthread_rwlock_unlock(&sp->life);
    if (st) {
        shard_params_jobs_free(all, nj);
        return st;
    }
    *out = all;
    *n = nj;
    return TS_OK;
}

void shard_params_jobs_free(struct shard_job_status *js, size_t n)
{
    for (size_t j = 0; js && j < n; j++) {
        free(js[j].ranks.clock);
        free(js[j].table);
    }
    free(js);
}

/* ---- replica digests ---- */

struct digests {
    struct shard_part_digest *d;
    size_t n, cap;
};

static ts_status digest_one(void *ctx, struct shard_tensor *t, uint32_t index, struct ts_part *p,
                            struct ts_err *err)
{
    struct digests *ds = ctx;
    size_t n = ts_part_image_bytes(p);
    struct shard_part_digest *d;
    void *img;
    ts_status st;

    if (ds->n == ds->cap) {
        size_t cap = ds->cap ? 2 * ds->cap : 64;
        if (!(d = realloc(ds->d, cap * sizeof(*d))))
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        ds->d = d;
        ds->cap = cap;
    }
    d = &ds->d[ds->n];
    memset(d, 0, sizeof(*d));
    if (!(img = malloc(n)))
        return ts_err_set(err, TS_ENOMEM, "out of memory for a %zu-byte image", n);
    if (!(st = ts_part_image(p, img, n, &d->version, err)) &&
        EVP_Digest(img, n, d->sha256, NULL, EVP_sha256(), NULL) != 1)
        st = ts_err_set(err, TS_EINTERNAL, "SHA-256 failed");
    free(img);
    if (st)
        return st;
    d->tensor_id = t->id;
    snprintf(d->tensor, sizeof(d->tensor), "%s", t->name);
    d->partition = index;
    d->follows = t->follows[index];
    d->next = t->next[index];
    ds->n++;
    return TS_OK;
}

ts_status shard_params_digests(struct shard_params *sp, const char *job,
                               struct shard_part_digest **out, size_t *n, struct ts_err *err)
{
    struct digests ds = { 0 };
    struct shard_job *sj;
    ts_status st;

    pthread_rwlock_rdlock(&sp->life);   /* no job is released during the walk */
    if (!(sj = params_find_job(sp, job)))
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not on this shard", job);
    else
        st = walk(sp, sj, true, digest_one, &ds, err);
    pthread_rwlock_unlock(&sp->life);
    if (st) {
        free(ds.d);
        return st;
    }
    *out = ds.d;
    *n = ds.n;
    return TS_OK;
}
