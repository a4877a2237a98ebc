/* table.c - a table's configuration, its rows' initial values and budget, pulls, reads of
 * one row and the dirty list (table.h). Pushes and the step's sums are push.c's; the
 * fingerprint is digest.c's. */
#include "table/internal.h"

#include "util/proc.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#define MAP_SLOT_BYTES 16          /* an id and a record number */
#define MAP_SLOTS_COUNTED 2        /* a row's share of the map (table.h) */
/* With a disk tier, a slot's entry in the free list (8 bytes) and its share of the window's
 * list (16-byte entries for a fifth of the slots, the list up to twice that), rounded up. */
#define TIER_SLOT_BYTES 16

void ts_table_budget_init(struct ts_table_budget *b, uint64_t limit)
{
    b->limit = limit;
    b->tier = NULL;
    atomic_init(&b->used, 0);
    atomic_init(&b->tables, 0);
    b->index_limit = 0;
    atomic_init(&b->index, 0);
}

uint64_t ts_table_budget_used(struct ts_table_budget *b)
{
    return atomic_load(&b->used);
}

uint64_t table_row_cost(const struct ts_table *t)
{
    return t->rows.tier ? TS_TABLE_INDEX_ROW_BYTES : t->row_bytes;
}

/* With a tier the memory tier holds what fits (rows.c): a new row costs its index entry,
 * counted against index_limit (table.h). */
static ts_status charge_index(struct ts_table *t, uint64_t rows, struct ts_err *err)
{
    struct ts_table_budget *b = t->budget;
    uint64_t bytes = rows * TS_TABLE_INDEX_ROW_BYTES, used = atomic_load(&b->index);

    do {
        if (b->index_limit && (bytes > b->index_limit || used > b->index_limit - bytes))
            return ts_err_set(err, TS_ENOMEM, "%" PRIu64 " new rows would take the disk "
                              "tier's index past the shard's --table-index-mem of %" PRIu64
                              " bytes (%d a row; %" PRIu64 " in use); nothing of the call was "
                              "taken: raise --table-index-mem or add shards", rows,
                              b->index_limit, TS_TABLE_INDEX_ROW_BYTES, used);
    } while (!atomic_compare_exchange_weak(&b->index, &used, used + bytes));
    t->charged += bytes;
    return TS_OK;
}

ts_status table_charge(struct ts_table *t, uint64_t rows, struct ts_err *err)
{
    uint64_t bytes = rows * t->row_bytes, used;

    if (!rows)
        return TS_OK;
    if (t->rows.tier)
        return charge_index(t, rows, err);
    if (t->budget) {
        used = atomic_load(&t->budget->used);
        do {
            if (t->budget->limit && (bytes > t->budget->limit ||
                                     used > t->budget->limit - bytes))
                return ts_err_set(err, TS_ENOMEM, "%" PRIu64 " new rows of %" PRIu64 " bytes "
                                  "would take the shard's row budget of %" PRIu64 " bytes "
                                  "past its limit (%" PRIu64 " in use); nothing of the push "
                                  "was taken: raise the budget or add shards", rows,
                                  t->row_bytes, t->budget->limit, used);
        } while (!atomic_compare_exchange_weak(&t->budget->used, &used, used + bytes));
    }
    t->charged += bytes;
    return TS_OK;
}

void table_refund(struct ts_table *t, uint64_t rows)
{
    uint64_t bytes = rows * table_row_cost(t);

    if (t->budget)   /* a table with a tier has one: the tier is the budget's */
        atomic_fetch_sub(t->rows.tier ? &t->budget->index : &t->budget->used, bytes);
    t->charged -= bytes;
}

/* The initializers a row can take: lib/tensor's, less those that need fans or a step. */
static ts_status check_init(const char *init, struct ts_err *err)
{
    static const char *const ok[] = { "zeros", "ones", "const:", "uniform:", "normal:" };
    struct ts_err e = { 0 };

    if (!init || strlen(init) >= 64)
        return ts_err_set(err, TS_EINVAL, "table.init: required, under 64 bytes");
    if (ts_init_check(init, &e))
        return ts_err_set(err, TS_EINVAL, "table.init: %s", e.msg);
    for (size_t k = 0; k < sizeof(ok) / sizeof(ok[0]); k++)
        if (strncmp(init, ok[k], strlen(ok[k])) == 0)
            return TS_OK;
    return ts_err_set(err, TS_EINVAL, "table.init: '%s' does not fit a row (xavier and he need "
                      "fans, assigned an assignment step); want zeros, ones, const:V, uniform:A "
                      "or normal:STD", init);
}

static ts_status check_cfg(const struct ts_job *job, const struct ts_table_cfg *c,
                           struct ts_optim_cfg *optim, struct ts_err *err)
{
    struct ts_err e = { 0 };
    ts_status st;

    if (ts_job_id_check("table.name", c->name, err))
        return TS_EINVAL;
    if (c->dim < 1 || c->dim > TS_TABLE_DIM_MAX)
        return ts_err_set(err, TS_EINVAL, "table.dim: %u is outside 1..%d", c->dim,
                          TS_TABLE_DIM_MAX);
    if (c->max_id > TS_TABLE_ID_LIMIT)
        return ts_err_set(err, TS_EINVAL, "table.max_id: %" PRIu64 " is past 2^63 - 1",
                          c->max_id);
    if ((st = check_init(c->init, err)))
        return st;
    if (ts_optim_parse(c->optimizer, optim, &e))
        return ts_err_set(err, TS_EINVAL, "table.optimizer: %s", e.msg);
    if (optim->kind != TS_OPTIM_SGD && optim->kind != TS_OPTIM_ADAGRAD &&
        optim->kind != TS_OPTIM_ADAM)
        return ts_err_set(err, TS_EINVAL, "table.optimizer: '%s': rows take sgd, adagrad or "
                          "adam", c->optimizer);
    if (job->mode == TS_MODE_REDUCE)
        return ts_err_set(err, TS_EINVAL, "job.mode: reduce keeps the parameters on the "
                          "workers; a table's rows need bsp, ssp or asp");
    if (c->ttl_steps && job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_EINVAL, "table.ttl_steps: %" PRIu64 ": a row lifetime needs "
                          "bsp (its sweeps follow the steps)", c->ttl_steps);
    if (!c->ttl_seconds)
        return TS_OK;
    if (c->ttl_steps)
        return ts_err_set(err, TS_EINVAL, "table.ttl_seconds: %" PRIu64 ", and ttl_steps %"
                          PRIu64 ": a table has one row lifetime, in steps or in seconds",
                          c->ttl_seconds, c->ttl_steps);
    if (c->ttl_seconds > TS_TABLE_TTL_SECONDS_MAX)
        return ts_err_set(err, TS_EINVAL, "table.ttl_seconds: %" PRIu64 " is past %d (10 "
                          "years)", c->ttl_seconds, TS_TABLE_TTL_SECONDS_MAX);
    if (job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_EINVAL, "table.ttl_seconds: %" PRIu64 ": a row lifetime "
                          "needs bsp (its sweeps come after a step)", c->ttl_seconds);
    if (job->exact)
        return ts_err_set(err, TS_EINVAL, "table.ttl_seconds: %" PRIu64 ": an exact job drops "
                          "rows by steps (ttl_steps), not by a clock, which would make its "
                          "rows depend on timing", c->ttl_seconds);
    return TS_OK;
}

ts_status ts_table_check(const struct ts_job *job, const struct ts_table_cfg *cfg,
                         struct ts_err *err)
{
    struct ts_optim_cfg optim;

    return check_cfg(job, cfg, &optim, err);
}

ts_status ts_table_create(const struct ts_job *job, const struct ts_table_cfg *cfg,
                          struct ts_table_budget *budget, struct ts_table **out,
                          struct ts_err *err)
{
    struct ts_optim_cfg optim;
    struct ts_table *t;
    size_t rec;
    ts_status st;

    if ((st = check_cfg(job, cfg, &optim, err)))
        return st;
    if (!(t = calloc(1, sizeof(*t))))
        return ts_err_set(err, TS_ENOMEM, "table '%s': out of memory", cfg->name);
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->tiers_mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->job = job;
    t->budget = budget;
    snprintf(t->name, sizeof(t->name), "%s", cfg->name);
    snprintf(t->init, sizeof(t->init), "%s", cfg->init);
    t->dim = cfg->dim;
    t->max_id = cfg->max_id;
    t->seed = cfg->seed;
    t->ttl = cfg->ttl_steps;
    life_init(&t->life, cfg->ttl_seconds);
    t->sweep_keep = SWEEP_KEEP_BYTES;
    t->optim = optim;
    t->slen = ts_optim_state_len(optim.kind);
    /* Rounded up to 8 bytes, so that every record's header is aligned. */
    rec = (sizeof(struct row) + (size_t)t->dim * (1 + t->slen) * sizeof(float) + 7) &
          ~(size_t)7;
    t->row_bytes = rec + MAP_SLOTS_COUNTED * MAP_SLOT_BYTES +
                   (budget && budget->tier ? TIER_SLOT_BYTES : 0);
    rows_init(&t->rows, rec, budget ? budget->tier : NULL, budget, t->row_bytes);
    if (t->rows.tier)
        atomic_fetch_add(&budget->tables, 1);
    t->pushed = calloc(job->workers, 1);
    t->grad = malloc(t->dim * sizeof(float));
    t->scratch = malloc(t->dim * sizeof(int64_t));
    if (table_async(t))
        t->clock = calloc(job->workers, sizeof(uint64_t));
    if (!t->pushed || !t->grad || !t->scratch || (table_async(t) && !t->clock)) {
        ts_table_free(t);
        return ts_err_set(err, TS_ENOMEM, "table '%s': out of memory", cfg->name);
    }
    *out = t;
    return TS_OK;
}

void ts_table_free(struct ts_table *t)
{
    if (!t)
        return;
    table_redo_detach(t);
    if (t->budget)
        atomic_fetch_sub(t->rows.tier ? &t->budget->index : &t->budget->used, t->charged);
    if (t->rows.tier)
        atomic_fetch_sub(&t->budget->tables, 1);
    rows_fini(&t->rows);
    idmap_fini(&t->dirty_set);
    idmap_fini(&t->acc.map);
    idmap_fini(&t->icache.map);
    free(t->icache.vals);
    free(t->acc.ids);
    free(t->acc.sums);
    free(t->prev.ids);
    free(t->prev.values);
    free(t->pushed);
    free(t->clock);
    free(t->dirty);
    free(t->where);
    free(t->grad);
    free(t->scratch);
    scratch_fini(&t->pf);
    free(t->cap.records);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->tiers_mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

const char *ts_table_name(const struct ts_table *t)
{
    return t->name;
}

uint32_t ts_table_dim(const struct ts_table *t)
{
    return t->dim;
}

uint64_t ts_table_row_bytes(const struct ts_table *t)
{
    return t->row_bytes;
}

uint64_t ts_table_count(struct ts_table *t)
{
    /* Without the lock (status must not wait behind a pull reading the disk): rows.n is
     * stored atomically where it changes (rows.c). */
    return __atomic_load_n(&t->rows.n, __ATOMIC_RELAXED);
}

/* The slowest rank's clock. Called with mu held (SSP, ASP). */
static uint64_t min_clock(const struct ts_table *t)
{
    uint64_t m = UINT64_MAX;

    for (uint32_t r = 0; r < t->job->workers; r++)
        m = t->clock[r] < m ? t->clock[r] : m;
    return m;
}

uint64_t ts_table_step(struct ts_table *t)
{
    uint64_t s;

    pthread_mutex_lock(&t->mu);
    s = table_async(t) ? min_clock(t) : t->step;
    pthread_mutex_unlock(&t->mu);
    return s;
}

uint64_t ts_table_pushed_step(struct ts_table *t)
{
    uint64_t s = 0;

    pthread_mutex_lock(&t->mu);
    if (table_async(t))
        for (uint32_t r = 0; r < t->job->workers; r++)
            s = t->clock[r] > s ? t->clock[r] : s;
    else
        s = t->step + (t->npushed > 0);
    pthread_mutex_unlock(&t->mu);
    return s;
}

/* The initializer's values of row id into out. */
static void draw_init(const struct ts_table *t, uint64_t id, float *out)
{
    uint8_t le[8];
    ts_status st;

    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)(id >> (8 * b));
    /* check_init accepted the spec, and none of these needs fans: this cannot fail. */
    st = ts_tensor_init(t->init, XXH3_64bits_withSeed(le, sizeof(le), t->seed), t->name, 0, 0,
                        0, t->dim, out, NULL);
    assert(st == TS_OK);
    (void)st;
}

void table_init_values(struct ts_table *t, uint64_t id, float *out)
{
    struct init_cache *c = &t->icache;
    uint64_t k;

    if (idmap_find(&c->map, id, &k)) {
        memcpy(out, c->vals + k * t->dim, t->dim * sizeof(float));
        return;
    }
    draw_init(t, id, out);
    if (c->n == c->cap) {   /* grown to its bytes, or emptied once there */
        size_t most = INIT_CACHE_BYTES / (t->dim * sizeof(float));
        size_t cap = c->cap ? c->cap * 2 : 1024;
        float *v = c->cap < most ? realloc(c->vals, (cap < most ? cap : most) * t->dim *
                                                        sizeof(float)) : NULL;
        if (v) {
            c->vals = v;
            c->cap = cap < most ? cap : most;
        } else {
            table_init_forget(t);
        }
    }
    if (c->n < c->cap && idmap_reserve(&c->map, 1, NULL) == TS_OK) {
        memcpy(c->vals + c->n * t->dim, out, t->dim * sizeof(float));
        idmap_put(&c->map, id, c->n++);
    }
}

void table_init_forget(struct ts_table *t)
{
    if (t->icache.n) {
        idmap_clear(&t->icache.map);
        t->icache.n = 0;
    }
}

struct row *table_new_row(struct ts_table *t, uint64_t id)
{
    struct row *w = rows_add(&t->rows, id);

    w->updates = 0;
    w->step = 0;
    table_init_values(t, id, row_values(w));
    memset(row_values(w) + t->dim, 0, t->slen * t->dim * sizeof(float));
    return w;
}

ts_status table_dirty_reserve(struct ts_table *t, size_t more, struct ts_err *err)
{
    size_t cap = t->dirty_cap ? t->dirty_cap : 64;
    uint64_t *d;

    ts_status st;

    if ((st = idmap_reserve(&t->dirty_set, more, err)))
        return st;
    while (cap < t->ndirty + more)
        cap *= 2;
    if (cap == t->dirty_cap)
        return TS_OK;
    if (!(d = realloc(t->dirty, cap * sizeof(*d))))
        return ts_err_set(err, TS_ENOMEM, "no memory for a list of %zu changed rows", cap);
    t->dirty = d;
    t->dirty_cap = cap;
    return TS_OK;
}

void table_mark_dirty(struct ts_table *t, uint64_t id)
{
    uint64_t k;

    if (idmap_find(&t->dirty_set, id, &k))
        return;
    idmap_put(&t->dirty_set, id, 0);
    t->dirty[t->ndirty++] = id;
}

/* The rows this table may keep in memory: its share of the budget (table.h). */
static uint64_t table_quota(const struct ts_table *t)
{
    uint32_t tables;
    uint64_t q;

    if (!t->rows.tier || !t->budget->limit)
        return UINT64_MAX;
    tables = atomic_load(&t->budget->tables);
    q = t->budget->limit / (tables ? tables : 1) / t->row_bytes;
    return q ? q : 1;
}

void table_begin(struct ts_table *t)
{
    t->rows.gen = t->step;   /* the memory tier's window keeps a step's rows through it */
    rows_begin(&t->rows, table_quota(t));
}

void ts_table_tiers(struct ts_table *t, struct ts_table_tiers *out)
{
    const struct rows *r = &t->rows;
    int64_t since = 0;

    memset(out, 0, sizeof(*out));
    /* Status must not wait behind an operation reading the disk with the lock held: then
     * the figures of the last call that got it. */
    if (pthread_mutex_trylock(&t->mu)) {
        pthread_mutex_lock(&t->tiers_mu);
        *out = t->tiers_seen;
        pthread_mutex_unlock(&t->tiers_mu);
        out->rows = ts_table_count(t);
        return;
    }
    out->rows = r->n;
    out->expired = r->stats.expired;
    if (r->tier) {
        out->tiered = true;
        out->resident = r->resident;
        out->mem_bytes = r->resident * t->row_bytes + r->pending * r->rec;
        out->quota_rows = table_quota(t);
        out->hits = r->stats.hits;
        out->misses = r->stats.misses;
        out->evictions = r->stats.evictions;
        out->written = r->stats.written;
        out->pending = r->pending;
        out->prefetched = r->stats.prefetched;
        out->prefetch_used = r->stats.prefetch_used;
        out->prefetch_unused = r->stats.prefetch_unused;
        since = r->oldest ? r->oldest->made_ms : r->fill && r->fill->n ? r->fill->made_ms : 0;
    }
    pthread_mutex_unlock(&t->mu);
    if (since)
        out->lag_ms = (uint64_t)(ts_now_ms() - since);
    if (out->tiered)
        out->disk_bytes = tier_space_bytes(t->rows.tier, t->rows.space);
    pthread_mutex_lock(&t->tiers_mu);
    t->tiers_seen = *out;
    pthread_mutex_unlock(&t->tiers_mu);
}

ts_status ts_table_dirty_take(struct ts_table *t, uint64_t **ids, size_t *n,
                              struct ts_err *err)
{
    (void)err;
    pthread_mutex_lock(&t->mu);
    idmap_clear(&t->dirty_set);
    *n = t->ndirty;
    *ids = t->ndirty ? t->dirty : NULL;
    if (t->ndirty) {
        t->dirty = NULL;
        t->dirty_cap = 0;
    }
    t->ndirty = 0;
    pthread_mutex_unlock(&t->mu);
    if (*ids)
        qsort(*ids, *n, sizeof(**ids), table_cmp_u64);
    return TS_OK;
}

ts_status ts_table_row(struct ts_table *t, uint64_t id, float *values, float *state,
                       struct ts_row_meta *meta, struct ts_err *err)
{
    struct row *w = malloc(t->rows.rec);
    bool found = false;
    ts_status st;

    if (!w)
        return ts_err_set(err, TS_ENOMEM, "table '%s': no memory to read a row", t->name);
    pthread_mutex_lock(&t->mu);
    st = rows_read(&t->rows, id, w, &found, err);
    pthread_mutex_unlock(&t->mu);
    if (!st && !found)
        st = ts_err_set(err, TS_ENOTFOUND, "table '%s': row %" PRIu64 " does not exist",
                        t->name, id);
    if (!st && values)
        memcpy(values, row_values(w), t->dim * sizeof(float));
    if (!st && state)
        memcpy(state, row_values(w) + t->dim, t->slen * t->dim * sizeof(float));
    if (!st && meta) {
        meta->updates = w->updates;
        meta->step = w->step;
    }
    free(w);
    return st;
}

/* Whether step want may be read (table.h). Called with mu held. */
static bool pull_ready(const struct ts_table *t, uint64_t want)
{
    if (t->job->mode == TS_MODE_ASP)
        return true;
    if (t->job->mode == TS_MODE_SSP)
        return min_clock(t) + t->job->staleness >= want;
    return t->step >= want;
}

static ts_status pull_wait(struct ts_table *t, uint64_t want, int ms, struct ts_err *err)
{
    int64_t until = ts_now_ms() + ms;

    while (!pull_ready(t, want)) {
        struct timespec ts;
        int64_t left = until - ts_now_ms();

        if (left <= 0)
            return ts_err_set(err, TS_ETIMEDOUT, "step %" PRIu64 " did not come within %d ms "
                              "(at step %" PRIu64 ", %u of %u ranks pushed)", want, ms,
                              table_async(t) ? min_clock(t) : t->step, t->npushed,
                              t->job->workers);
        ts_abstime_ms(&ts, left < 100 ? left : 100);
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    return TS_OK;
}

ts_status ts_table_wait(struct ts_table *t, uint64_t want, int ms, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&t->mu);
    st = pull_wait(t, want, ms, err);
    pthread_mutex_unlock(&t->mu);
    if (st)
        ts_err_prefix(err, "table '%s'", t->name);
    return st;
}

ts_status ts_table_ids(struct ts_table *t, uint64_t want, int ms, uint64_t **ids, size_t *n,
                       struct ts_err *err)
{
    ts_status st;

    *ids = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    if (!(st = pull_wait(t, want, ms, err)) && t->rows.n &&
        !(st = rows_sorted_ids(&t->rows, ids, err)))
        *n = t->rows.n;
    pthread_mutex_unlock(&t->mu);
    if (st)
        ts_err_prefix(err, "table '%s'", t->name);
    return st;
}

void ts_table_prefetch(struct ts_table *t, const uint64_t *ids, size_t n)
{
    uint64_t *want = NULL, space;
    uint8_t *recs = NULL;
    bool *found = NULL;
    size_t m = 0;
    bool begun;

    if (!t->rows.tier)
        return;
    pthread_mutex_lock(&t->mu);
    table_begin(t);
    space = t->rows.space;
    begun = !t->pf_busy &&
            rows_prefetch_begin(&t->rows, ids, n, t->rows.quota / 4 ? t->rows.quota / 4 : 1,
                                &want, &m, NULL);
    t->pf_busy |= begun;
    pthread_mutex_unlock(&t->mu);
    if (!begun)
        return;
    if (m && (recs = scratch_get(&t->pf, m * (t->rows.rec + sizeof(*found)))))
        found = (bool *)(recs + m * t->rows.rec);
    if (m && (!recs ||
              tier_get_many(t->rows.tier, space, m, want, recs, t->rows.rec, found, NULL)))
        m = 0;   /* a hint: the pull reads them itself */
    pthread_mutex_lock(&t->mu);
    rows_prefetch_end(&t->rows, space, want, m, recs, found);
    scratch_done(&t->pf, recs);
    t->pf_busy = false;
    pthread_mutex_unlock(&t->mu);
    free(want);
}

/* Row id's values in p (ids ascending), or NULL: the last step did not change it. */
static const float *prev_values(const struct step_prev *p, uint32_t dim, uint64_t id)
{
    size_t lo = 0, hi = p->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && p->ids[lo] == id ? p->values + lo * dim : NULL;
}

ts_status ts_table_pull(struct ts_table *t, uint32_t rank, uint64_t want, int ms,
                        const uint64_t *ids, size_t n, float *out, struct ts_err *err)
{
    ts_status st;
    bool before;

    if (rank >= t->job->workers)
        return ts_err_set(err, TS_EINVAL, "table '%s': rank: %u is not below the job's %u "
                          "workers", t->name, rank, t->job->workers);
    for (size_t i = 0; i < n; i++)
        if (ids[i] > t->max_id)
            return ts_err_set(err, TS_EINVAL, "table '%s': ids[%zu]: %" PRIu64 " is outside "
                              "0..%" PRIu64, t->name, i, ids[i], t->max_id);
    pthread_mutex_lock(&t->mu);
    st = pull_wait(t, want, ms, err);
    /* The version before the table's step (a slot redone in an elastic job, table.h): the
     * rows the last step changed as they were before it. */
    before = !st && !table_async(t) && t->prev.valid && t->prev.of == want &&
             t->step == want + 1;
    /* With a tier, a part of the ids at a time, each its own operation: a pull of more rows
     * than memory holds (a scan of the whole table) keeps memory to its quota. */
    for (size_t at = 0, part = n; !st && at < n; at += part) {
        table_begin(t);
        if (t->rows.tier)
            part = t->rows.quota / 4 > 64 ? t->rows.quota / 4 : 64;
        part = part < n - at ? part : n - at;
        rows_note(&t->rows, ids + at, part);
        st = rows_load(&t->rows, ids + at, part, err);
        for (size_t i = at; !st && i < at + part; i++) {
            struct row *w = rows_find(&t->rows, ids[i]);
            const float *old = before ? prev_values(&t->prev, t->dim, ids[i]) : NULL;

            if (old) {
                memcpy(out + i * t->dim, old, t->dim * sizeof(float));
            } else if (before && !w && t->prev.swept_lost) {
                st = ts_err_set(err, TS_ESTATE, "ids[%zu]: row %" PRIu64 " at version %" PRIu64
                                " is not kept: the row lifetime's sweep after that step "
                                "dropped more rows than it keeps (%zu MiB of values with a "
                                "disk tier), so the version before the table's cannot be "
                                "read; give the rows a longer --row-ttl", i, ids[i], want,
                                t->sweep_keep >> 20);
            } else if (w) {
                memcpy(out + i * t->dim, row_values(w), t->dim * sizeof(float));
            } else {
                table_init_values(t, ids[i], out + i * t->dim);
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (st)
        ts_err_prefix(err, "table '%s'", t->name);
    return st;
}
