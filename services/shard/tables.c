/* tables.c - a shard's sparse tables (tables.h): registration, and their part of snapshots.
 * Placing them anew (map changes, a join's move, a rollback) is tables_place.c's. */
#include "tables.h"
#include "params_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement/ring.h"
#include "durable.h"
#include "rowcopy.h"
#include "tables_internal.h"
#include "util/log.h"
#include "util/proc.h"

/* Whether the table t holds is the one req registers. */
static bool same_table(const struct shard_table *t, const Tessera__V1__TableSpec *s)
{
    return strcmp(t->name, s->name) == 0 && t->dim == s->dim && t->max_id == s->max_id &&
           strcmp(t->init, s->initializer) == 0 && t->seed == s->seed &&
           strcmp(t->optimizer, s->optimizer) == 0 && t->ttl_steps == s->ttl_steps &&
           t->ttl_seconds == s->ttl_seconds;
}

void tables_spec(const struct shard_table *t, Tessera__V1__TableSpec *spec)
{
    tessera__v1__table_spec__init(spec);
    spec->name = (char *)t->name;
    spec->dim = t->dim;
    spec->max_id = t->max_id;
    spec->initializer = (char *)t->init;
    spec->seed = t->seed;
    spec->optimizer = (char *)t->optimizer;
    spec->ttl_steps = t->ttl_steps;
    spec->ttl_seconds = t->ttl_seconds;
}

/* The spec's strings fit (lib/table checks the rest when it creates the store). */
ts_status tables_check_spec(const Tessera__V1__RegisterTableRequest *req, struct ts_err *err)
{
    const Tessera__V1__TableSpec *s = req->table;

    if (!s)
        return ts_err_set(err, TS_EINVAL, "table: required");
    if (req->table_id >= SHARD_MAX_TABLES)
        return ts_err_set(err, TS_EINVAL, "table_id: %u; a job has at most %d tables, ids "
                          "0..%d", req->table_id, SHARD_MAX_TABLES, SHARD_MAX_TABLES - 1);
    if (strlen(s->initializer) >= sizeof(((struct shard_table *)0)->init))
        return ts_err_set(err, TS_EINVAL, "table.initializer: longer than 63 bytes");
    if (strlen(s->optimizer) >= sizeof(((struct shard_table *)0)->optimizer))
        return ts_err_set(err, TS_EINVAL, "table.optimizer: longer than 127 bytes");
    return ts_job_id_check("table.name", s->name, err);
}

void tables_free_one(struct shard_table *t)
{
    shard_durable_forget(t);
    rowcopy_free(t);
    ts_table_free(t->t);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

ts_status tables_create(struct shard_params *sp, struct ts_cluster *cl, uint32_t me,
                        struct shard_job *sj, const Tessera__V1__RegisterTableRequest *req,
                        struct shard_table **out, struct ts_err *err)
{
    const Tessera__V1__TableSpec *s = req->table;
    struct ts_table_cfg cfg = { .name = s->name, .dim = s->dim, .max_id = s->max_id,
                                .init = s->initializer, .seed = s->seed,
                                .optimizer = s->optimizer, .ttl_steps = s->ttl_steps,
                                .ttl_seconds = s->ttl_seconds };
    struct shard_table *t = calloc(1, sizeof(*t));
    pthread_rwlockattr_t ra;
    ts_status st;

    if (!t)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if ((st = ts_table_create(&sj->job, &cfg, &sp->tables_budget, &t->t, err))) {
        free(t);
        return st;
    }
    /* A rollback's exclusive hold is not starved by pulls that keep coming. */
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&t->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    t->id = req->table_id;
    snprintf(t->name, sizeof(t->name), "%s", s->name);
    snprintf(t->init, sizeof(t->init), "%s", s->initializer);
    snprintf(t->optimizer, sizeof(t->optimizer), "%s", s->optimizer);
    t->dim = s->dim;
    t->max_id = s->max_id;
    t->seed = s->seed;
    t->ttl_steps = s->ttl_steps;
    t->ttl_seconds = s->ttl_seconds;
    t->rate_ms = ts_now_ms();   /* the first heartbeat measures from here */
    if ((st = rowcopy_place(t, &sj->job, &sp->tables_budget, cl, me, err))) {
        tables_free_one(t);
        return st;
    }
    *out = t;
    return TS_OK;
}

/* The table registered under req's id, or TS_EEXIST where the id or the name is another's. */
ts_status tables_find(const struct shard_job *sj, const Tessera__V1__RegisterTableRequest *req,
                      struct shard_table **out, struct ts_err *err)
{
    *out = sj->tables[req->table_id];
    if (*out && !same_table(*out, req->table))
        return ts_err_set(err, TS_EEXIST, "table_id: %u is table '%s' (dim %u, max_id %" PRIu64
                          ", init %s, seed %" PRIu64 ", optimizer %s); register it with that "
                          "spec", req->table_id, (*out)->name, (*out)->dim, (*out)->max_id,
                          (*out)->init, (*out)->seed, (*out)->optimizer);
    for (uint32_t i = 0; !*out && i < SHARD_MAX_TABLES; i++)
        if (sj->tables[i] && strcmp(sj->tables[i]->name, req->table->name) == 0)
            return ts_err_set(err, TS_EEXIST, "table.name: '%s' is table %u, not %u",
                              req->table->name, i, req->table_id);
    return TS_OK;
}

/* Whether store s of table t holds row id, for a snapshot's load. */
struct keeper {
    const struct shard_table *t;
    const struct table_store *s;
};

static bool keeps(void *ctx, uint64_t id)
{
    const struct keeper *k = ctx;

    return rowcopy_keeps(k->t, k->s, id);
}

static int by_step(const void *a, const void *b)
{
    const ts_row_run *x = *(ts_row_run *const *)a, *y = *(ts_row_run *const *)b;

    return x->step < y->step ? -1 : x->step > y->step;
}

/* Table t (placed: rowcopy_place) starts from the snapshot's table of its name, if it has
 * one: its runs loaded oldest first, each store keeping its rows of the placed ring (this
 * shard's own, and the copies it holds), all at the snapshot's step. */
ts_status tables_load(struct shard_params *sp, struct shard_table *t,
                      const Tessera__V1__TableSpec *spec, const ts_manifest *m, const char *hex,
                      struct ts_err *err)
{
    const ts_table_manifest *tm = NULL;
    const ts_row_run **runs = NULL;
    ts_status st = TS_OK;

    for (size_t i = 0; m && i < m->n_tables && !tm; i++)
        if (strcmp(m->tables[i]->spec->name, t->name) == 0)
            tm = m->tables[i];
    if (!tm)
        return TS_OK;
    if (tm->id != t->id || !ts_snap_same_table(tm->spec, spec))
        return ts_err_set(err, TS_ESTATE, "table: '%s' is table %u of snapshot %.12s, with dim "
                          "%u, max_id %" PRIu64 ", init %s, seed %" PRIu64 " and optimizer %s; "
                          "register it so", t->name, tm->id, hex, tm->spec->dim,
                          tm->spec->max_id, tm->spec->initializer, tm->spec->seed,
                          tm->spec->optimizer);
    if (!(runs = malloc((tm->n_runs + 1) * sizeof(*runs))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    memcpy(runs, tm->runs, tm->n_runs * sizeof(*runs));
    qsort(runs, tm->n_runs, sizeof(*runs), by_step);
    for (size_t k = 0; !st && k < tm->n_runs; k++) {
        size_t rb = ts_table_record_bytes(t->t);
        uint8_t *buf = malloc((size_t)runs[k]->records * rb + 1);
        if (!buf)
            st = ts_err_set(err, TS_ENOMEM, "out of memory for a run of %" PRIu64 " rows",
                            runs[k]->records);
        if (!st)
            st = ts_snap_read_run(sp->store, m, tm, runs[k], buf, err);
        for (size_t j = 0; !st && j < t->nstores; j++) {
            struct keeper kp = { t, &t->stores[j] };
            st = ts_table_load(t->stores[j].t, buf, (size_t)runs[k]->records, keeps, &kp, err);
        }
        free(buf);
    }
    for (size_t j = 0; !st && j < t->nstores; j++)
        st = ts_table_set_step(t->stores[j].t, m->step, err);
    if (!st)
        ts_log(TS_INFO, "shard", "table '%s': %" PRIu64 " of its %" PRIu64 " rows loaded from "
               "snapshot %.12s at step %" PRIu64 " (and %zu copies of other shards' rows)",
               t->name, ts_table_count(t->t), tm->rows, hex, m->step, t->nstores - 1);
    free(runs);
    return st;
}

ts_status shard_params_register_table(struct shard_params *sp, struct ts_cluster *cl,
                                      uint32_t my_id,
                                      const Tessera__V1__RegisterTableRequest *req,
                                      uint64_t *version, uint64_t *rows, struct ts_err *err)
{
    struct shard_job *sj = NULL;
    struct shard_table *t = NULL;
    bool made = false;
    ts_status st;

    if ((st = tables_check_spec(req, err)) ||
        (st = ts_cluster_check_epoch(cl, req->map_epoch, err)))
        return st;
    pthread_mutex_lock(&sp->mu);
    st = params_get_job(sp, req->job, &sj, &made, err);
    if (!st && sj->job.mode == TS_MODE_REDUCE)
        st = ts_err_set(err, TS_ESTATE, "job.mode: reduce keeps parameters on the workers; "
                        "tables live on the shards (bsp, ssp or asp)");
    if (!st)
        st = tables_find(sj, req, &t, err);
    if (!st && !t && !(st = tables_create(sp, cl, my_id, sj, req, &t, err)) &&
        ((st = tables_load(sp, t, req->table, sp->restore, sp->restore_hex, err)) ||
         (st = shard_durable_table(sp->durable, sj, t, err)))) {
        tables_free_one(t);
        t = NULL;
    }
    if (!st && !sj->tables[req->table_id]) {
        bool armed;
        /* A snapshot armed before this table existed covers it too (as for a tensor). */
        if (sj->armed && (ts_table_arm(t->t, sj->armed_step, true, &armed, err) || !armed))
            ts_log(TS_WARN, "shard", "job %s table '%s': %s (the armed snapshot will be "
                   "incomplete)", sj->job.id, t->name, err->code ? err->msg : "past its step");
        ts_err_clear(err);
        sj->tables[t->id] = t;
        sj->ntables++;
        sj->orphan_since_ms = 0;
        ts_log(TS_INFO, "shard", "job %s: table %u '%s', dim %u, ids 0..%" PRIu64 ", %s, %s",
               sj->job.id, t->id, t->name, t->dim, t->max_id, t->init, t->optimizer);
    }
    if (!st) {
        *version = ts_table_step(t->t);
        *rows = rowcopy_rows(t);
    }
    if (st && made)
        params_drop_unused(sp, sj);
    pthread_mutex_unlock(&sp->mu);
    return st;
}

struct shard_table *shard_params_table(struct shard_params *sp, struct shard_job *sj,
                                       uint32_t table)
{
    struct shard_table *t = NULL;

    if (!sj || table >= SHARD_MAX_TABLES)
        return NULL;
    pthread_mutex_lock(&sp->mu);
    t = sj->tables[table];
    pthread_mutex_unlock(&sp->mu);
    return t;
}

void shard_tables_each(struct shard_params *sp,
                       void (*fn)(void *arg, const char *job, struct shard_table *t), void *arg)
{
    pthread_rwlock_rdlock(&sp->life);   /* no job is released meanwhile */
    pthread_mutex_lock(&sp->mu);
    for (size_t j = 0; j < sp->njobs; j++)
        for (uint32_t i = 0; sp->jobs[j]->ntables && i < SHARD_MAX_TABLES; i++)
            if (sp->jobs[j]->tables[i])
                fn(arg, sp->jobs[j]->job.id, sp->jobs[j]->tables[i]);
    pthread_mutex_unlock(&sp->mu);
    pthread_rwlock_unlock(&sp->life);
}

static void tick_one(void *arg, const char *job, struct shard_table *t)
{
    int64_t now = *(const int64_t *)arg, dt = now - t->rate_ms;
    uint64_t pulled = atomic_load(&t->pulled), pushed = atomic_load(&t->pushed);

    (void)job;
    if (dt > 0) {
        atomic_store(&t->pulled_milli_s, (pulled - t->rate_pulled) * 1000000 / (uint64_t)dt);
        atomic_store(&t->pushed_milli_s, (pushed - t->rate_pushed) * 1000000 / (uint64_t)dt);
    }
    t->rate_pulled = pulled;
    t->rate_pushed = pushed;
    t->rate_ms = now;
}

void shard_tables_tick(struct shard_params *sp, int64_t now_ms)
{
    shard_tables_each(sp, tick_one, &now_ms);
}

void tables_runs_free(struct shard_table *t)
{
    for (size_t k = 0; k < t->nruns; k++)
        free(t->runs[k].chunks);
    free(t->runs);
    t->runs = NULL;
    t->nruns = 0;
}

void shard_tables_free(struct shard_job *sj)
{
    for (uint32_t i = 0; i < SHARD_MAX_TABLES; i++)
        if (sj->tables[i]) {
            tables_runs_free(sj->tables[i]);
            tables_free_one(sj->tables[i]);
            sj->tables[i] = NULL;
        }
    sj->ntables = 0;
}

/* ---- snapshots ---- */

/* Whether the next run of t must be full: none yet, one of its chunks gone from the store (a
 * gc after a snapshot that was never committed), changes the table could not list, or the
 * incremental runs since the last full one outweigh the rows it holds. */
static bool want_full(struct shard_params *sp, struct shard_table *t)
{
    uint64_t since = 0;

    if (!t->nruns || ts_table_needs_full(t->t))
        return true;
    for (size_t k = 0; k < t->nruns; k++) {
        for (size_t c = 0; c < t->runs[k].nchunks; c++)
            if (!ts_store_has(sp->store, t->runs[k].chunks[c]))
                return true;
        since += t->runs[k].full ? 0 : t->runs[k].records;
    }
    return since >= ts_table_count(t->t);
}

/* Whether some store of t took a push of a step past `step`. t->lock held. */
bool tables_pushed_past(struct shard_table *t, uint64_t step, uint64_t *newest)
{
    bool past = false;

    for (size_t k = 0; k < t->nstores; k++) {
        uint64_t s = ts_table_pushed_step(t->stores[k].t);
        past |= s > step;
        *newest = s > *newest ? s : *newest;
    }
    return past;
}

/* Arms (or disarms) step's capture in every store of t served to workers: full in all when
 * the run is full (want_full), else full only in a copy taken over since the last run. hold:
 * also holds t at step (with its lock held exclusive, so that no push is between its check
 * and its store), or *armed false if a store took a push past it (*newest: that step). */
static ts_status arm_table(struct shard_params *sp, struct shard_table *t, uint64_t step,
                           bool disarm, bool hold, bool *armed, uint64_t *newest,
                           struct ts_err *err)
{
    bool full = !disarm && want_full(sp, t);
    ts_status st = TS_OK;

    *armed = true;
    if (hold && !disarm)
        pthread_rwlock_wrlock(&t->lock);
    else
        pthread_rwlock_rdlock(&t->lock);
    if (hold && !disarm && tables_pushed_past(t, step, newest))
        *armed = false;
    for (size_t k = 0; k < t->nstores && !st && *armed; k++) {
        struct table_store *s = &t->stores[k];
        bool one = true;
        if (!atomic_load(&s->owned))
            continue;
        if (disarm)
            ts_table_disarm(s->t);
        else if (!(st = ts_table_arm(s->t, step, full || atomic_load(&s->full), &one, err)))
            *armed &= one;
    }
    if (st || !*armed)
        for (size_t k = 0; k < t->nstores; k++)
            if (atomic_load(&t->stores[k].owned))
                ts_table_disarm(t->stores[k].t);
    if (hold && !disarm && !st && *armed) {
        atomic_store(&t->hold_until_ms, ts_now_ms() + SHARD_TABLE_HOLD_MS);
        atomic_store(&t->hold, step + 1);
    }
    pthread_rwlock_unlock(&t->lock);
    return st;
}

/* *all: whether every store of t served to workers has its capture of step. A copy taken
 * over since the arm (its head died) has none armed: it is armed now, whole (its rows were
 * never in this shard's runs), or TS_ESTATE when it is past step already. */
static ts_status captured(struct shard_table *t, uint64_t step, bool *all, struct ts_err *err)
{
    ts_status st = TS_OK;

    *all = true;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t k = 0; !st && k < t->nstores; k++) {
        struct table_store *s = &t->stores[k];
        bool armed = true;
        if (!atomic_load(&s->owned))
            continue;
        if (!ts_table_capture_pending(s->t, step)) {
            if (!(st = ts_table_arm(s->t, step, true, &armed, err)) && !armed)
                st = ts_err_set(err, TS_ESTATE, "table '%s': the copy of shard %u's rows this "
                                "shard took over since step %" PRIu64 " was armed is past "
                                "it; take the snapshot again", t->name, s->origin, step);
            else if (!st)
                ts_log(TS_INFO, "shard", "table '%s': the copy of shard %u's rows taken over "
                       "since the arm goes whole into the snapshot of step %" PRIu64, t->name,
                       s->origin, step);
        }
        *all &= ts_table_captured(s->t, step);
    }
    pthread_rwlock_unlock(&t->lock);
    return st;
}

static int cmp_record(const void *a, const void *b)
{
    uint64_t x, y;

    memcpy(&x, a, sizeof(x));
    memcpy(&y, b, sizeof(y));
    return x < y ? -1 : x > y;
}

/* Gives the records of c back to every store of t served to workers (each marks those it
 * holds as changed again) and frees them. t->lock held. */
static void undo_capture(struct shard_table *t, struct ts_table_capture *c)
{
    for (size_t k = 0; k < t->nstores; k++)
        if (atomic_load(&t->stores[k].owned))
            ts_table_capture_undo(t->stores[k].t, c);
    free(c->records);
    memset(c, 0, sizeof(*c));
}

/* Takes every served store's capture of step into one (*out: ascending id, full as
 * stores[0]'s; *got false if one went, and then nothing is taken: what was is given back).
 * took[k]: whether store k's capture is in *out (t->nstores of them). */
static ts_status take_table(struct shard_table *t, uint64_t step, struct ts_table_capture *out,
                            bool *took, bool *got, struct ts_err *err)
{
    size_t rb = ts_table_record_bytes(t->t);
    ts_status st = TS_OK;

    *got = true;
    memset(out, 0, sizeof(*out));
    pthread_rwlock_rdlock(&t->lock);
    memset(took, 0, t->nstores * sizeof(*took));
    for (size_t k = 0; k < t->nstores && !st && *got; k++) {
        struct ts_table_capture c = { 0 };
        bool one = false;
        uint8_t *grown;
        if (!atomic_load(&t->stores[k].owned))
            continue;
        if ((st = ts_table_capture_take(t->stores[k].t, step, &c, &one, err)) || !one) {
            *got = one;
            break;
        }
        took[k] = true;
        if (k == 0) {
            *out = c;
            continue;
        }
        if (!(grown = realloc(out->records, (out->n + c.n) * rb + 1))) {
            undo_capture(t, &c);
            st = ts_err_set(err, TS_ENOMEM, "table '%s': out of memory for a capture",
                            t->name);
            break;
        }
        if (c.n)   /* an empty capture may have no records at all */
            memcpy(grown + out->n * rb, c.records, c.n * rb);
        out->records = grown;
        out->n += c.n;
        out->rows += c.rows;
        free(c.records);
    }
    /* A store taken over since the arm has no capture: the rows taken so far are changed
     * again, or the next incremental run would miss them. */
    if (st || !*got)
        undo_capture(t, out);
    pthread_rwlock_unlock(&t->lock);
    if (!st && *got && t->nstores > 1 && out->n > 1)
        qsort(out->records, out->n, rb, cmp_record);
    return st;
}

ts_status shard_tables_arm(struct shard_params *sp, struct shard_job *sj, uint64_t step,
                           bool disarm, bool hold, bool *past, uint64_t *maxv,
                           struct ts_err *err)
{
    ts_status st = TS_OK;
    uint64_t ignored_step = 0;
    uint32_t i;

    *past = false;
    if (hold && !disarm)
        atomic_store(&sj->held_epoch, atomic_load(&sp->rechained));
    for (i = 0; !st && i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = shard_params_table(sp, sj, i);
        uint64_t newest = 0;
        bool armed = false;
        if (!t)
            continue;
        if ((st = arm_table(sp, t, step, disarm, hold, &armed, &newest, err)) || disarm)
            continue;
        if (!armed) {
            *past = true;
            newest = newest > ts_table_step(t->t) ? newest : ts_table_step(t->t);
            if (newest > *maxv)
                *maxv = newest;
            break;
        }
    }
    if ((st || *past) && !disarm) {   /* nothing stays armed, or held */
        for (uint32_t k = 0; k < i; k++) {
            struct shard_table *t = shard_params_table(sp, sj, k);
            bool ignored;
            if (t)
                (void)arm_table(sp, t, step, true, false, &ignored, &ignored_step, err);
        }
        if (hold)
            shard_tables_unhold(sp, sj);
    } else if (hold && !disarm) {     /* a shard that joined has no table before the move */
        atomic_store(&sj->tables_held_until, ts_now_ms() + SHARD_TABLE_HOLD_MS);
    }
    return st;
}

/* The piece's copy of t with this shard's chain of runs (in the piece's arena); rows: those
 * the stores in the capture held at its step. */
/* The shards t was placed on, and those whose rows the stores in this run hold (took[k]:
 * store k's capture is in it), into tm: what the master checks every row is in some piece by
 * (TableManifest.placed_on, covers). */
static ts_status piece_cover(struct ts_snap_piece *pc, struct shard_table *t, const bool *took,
                             ts_table_manifest *tm, struct ts_err *err)
{
    pthread_rwlock_rdlock(&t->lock);
    tm->placed_on = pc->alloc(pc->alloc_ctx, (t->nmembers + 1) * sizeof(*tm->placed_on));
    tm->covers = pc->alloc(pc->alloc_ctx, (t->nstores + 1) * sizeof(*tm->covers));
    if (tm->placed_on && tm->covers) {
        memcpy(tm->placed_on, t->members, t->nmembers * sizeof(*tm->placed_on));
        tm->n_placed_on = t->nmembers;
        for (size_t k = 0; k < t->nstores; k++)
            if (took[k])
                tm->covers[tm->n_covers++] = t->stores[k].origin;
    }
    pthread_rwlock_unlock(&t->lock);
    if (!tm->placed_on || !tm->covers)
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    return TS_OK;
}

static ts_status piece_table(struct ts_snap_piece *pc, struct shard_table *t, uint64_t rows,
                             const bool *took, struct ts_err *err)
{
    ts_table_manifest *tm = pc->alloc(pc->alloc_ctx, sizeof(*tm));
    Tessera__V1__TableSpec *spec = pc->alloc(pc->alloc_ctx, sizeof(*spec));
    ts_row_run **runs = pc->alloc(pc->alloc_ctx, (t->nruns + 1) * sizeof(*runs));
    ts_table_manifest **tables = pc->alloc(pc->alloc_ctx, (pc->n_tables + 1) * sizeof(*tables));

    if (!tm || !spec || !runs || !tables)
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    tessera__v1__table_manifest__init(tm);
    tables_spec(t, spec);
    tm->id = t->id;
    tm->spec = spec;
    tm->rows = rows;
    for (size_t k = 0; k < t->nruns; k++) {
        const struct shard_run *sr = &t->runs[k];
        ts_row_run *r = pc->alloc(pc->alloc_ctx, sizeof(*r));
        ProtobufCBinaryData *bd = pc->alloc(pc->alloc_ctx, (sr->nchunks + 1) * sizeof(*bd));
        uint8_t *ids = pc->alloc(pc->alloc_ctx, sr->nchunks * TS_STORE_ID_LEN + 1);
        if (!r || !bd || !ids)
            return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
        tessera__v1__row_run__init(r);
        r->shard_id = pc->shard;
        r->step = sr->step;
        r->records = sr->records;
        r->full = sr->full;
        r->bytes_written = sr->bytes_written;
        memcpy(ids, sr->chunks, sr->nchunks * TS_STORE_ID_LEN);
        for (size_t c = 0; c < sr->nchunks; c++)
            bd[c] = (ProtobufCBinaryData){ TS_STORE_ID_LEN, ids + c * TS_STORE_ID_LEN };
        r->chunks = bd;
        r->n_chunks = sr->nchunks;
        runs[k] = r;
    }
    tm->runs = runs;
    tm->n_runs = t->nruns;
    if (piece_cover(pc, t, took, tm, err))
        return TS_ENOMEM;
    if (pc->n_tables)
        memcpy(tables, pc->tables, pc->n_tables * sizeof(*tables));
    tables[pc->n_tables++] = tm;
    pc->tables = tables;
    return TS_OK;
}

/* Writes capture c of t as a new run, which joins t's chain (a full one replaces it). */
static ts_status write_run(struct shard_params *sp, struct shard_table *t,
                           const struct ts_table_capture *c, uint32_t chunk_bytes,
                           uint64_t *written, struct ts_err *err)
{
    size_t rb = ts_table_record_bytes(t->t);
    void *mem = malloc(ts_snap_run_mem(c->n, rb, chunk_bytes));
    ts_row_run run = TESSERA__V1__ROW_RUN__INIT;
    struct shard_run sr = { .step = c->step, .records = c->n, .full = c->full };
    struct shard_run *grown;
    ts_status st;

    if (!mem)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    st = ts_snap_put_run(sp->store, c->records, c->n, rb, chunk_bytes, &run, mem, written, err);
    if (!st && !(sr.chunks = malloc(run.n_chunks * TS_STORE_ID_LEN + 1)))
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    if (!st && !(grown = realloc(t->runs, (t->nruns + 1) * sizeof(*t->runs))))
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    if (st) {
        free(sr.chunks);
        free(mem);
        return st;
    }
    for (size_t k = 0; k < run.n_chunks; k++)
        memcpy(sr.chunks[k], run.chunks[k].data, TS_STORE_ID_LEN);
    sr.nchunks = run.n_chunks;
    sr.bytes_written = *written;
    t->runs = grown;
    if (c->full) {   /* the chain starts again from it */
        for (size_t k = 0; k < t->nruns; k++)
            free(t->runs[k].chunks);
        t->nruns = 0;
    }
    t->runs[t->nruns++] = sr;
    free(mem);
    return TS_OK;
}

ts_status shard_tables_write(struct shard_params *sp, struct shard_job *sj, uint64_t step,
                             int64_t until_ms, struct ts_snap_piece *piece, bool *ready,
                             struct ts_err *err)
{
    ts_status st = TS_OK;

    /* Every table's capture taken, or not ready: nothing is handed out before all are. */
    *ready = false;
    for (;;) {
        bool all = true;
        for (uint32_t i = 0; all && i < SHARD_MAX_TABLES; i++) {
            struct shard_table *t = shard_params_table(sp, sj, i);
            ts_status cs = t ? captured(t, step, &all, err) : TS_OK;
            if (cs)
                return cs;
        }
        if (all)
            break;
        if (ts_now_ms() >= until_ms)
            return TS_OK;
        ts_sleep_ms(5);
    }
    *ready = true;
    for (uint32_t i = 0; i < SHARD_MAX_TABLES; i++) {
        struct shard_table *t = shard_params_table(sp, sj, i);
        struct ts_table_capture c = { 0 };
        bool took[TS_CLUSTER_MAX_SHARDS + 1];   /* a store per shard at most */
        uint64_t written = 0;
        bool got = false;
        ts_status cs;

        if (!t)
            continue;
        if ((cs = take_table(t, step, &c, took, &got, err)) || !got) {
            st = st ? st : cs ? cs : ts_err_set(err, TS_EINTERNAL, "table '%s': its capture "
                                                "of step %" PRIu64 " went", t->name, step);
            continue;
        }
        if (!st)
            st = write_run(sp, t, &c, piece->chunk_bytes, &written, err);
        piece->bytes_written += written;
        if (!st)
            st = piece_table(piece, t, c.rows, took, err);
        pthread_rwlock_rdlock(&t->lock);
        if (st)   /* not written: its rows are changed again */
            undo_capture(t, &c);
        for (size_t k = 0; !st && k < t->nstores; k++)
            if (took[k])   /* in this run whole; not one taken over since the take */
                atomic_store(&t->stores[k].full, false);
        pthread_rwlock_unlock(&t->lock);
        free(c.records);
    }
    return st;
}
