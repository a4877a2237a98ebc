/* capture.c - a table's rows for snapshots: captured at an armed step, loaded back on a
 * restore (table.h, "Snapshots").
 *
 * A capture is taken under the table's lock at the moment the table reaches the armed step
 * (a BSP step's update is what moves it: push.c calls table_capture_due), so it holds the
 * rows exactly as of that step while training goes on. An incremental capture takes the rows
 * changed since the last capture (the dirty list), a full one every row. */
#include "table/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "records are written as the host's bytes, which snapshots take as little-endian"
#endif

size_t ts_table_record_bytes(const struct ts_table *t)
{
    return TS_TABLE_RECORD_HEAD + (1 + t->slen) * t->dim * sizeof(float);
}

/* Takes the capture now (mu held): records of the dirty rows, or of every row. A failure is
 * kept for ts_table_capture_take to report. */
static void capture_now(struct ts_table *t)
{
    struct table_capture *c = &t->cap;
    size_t rb = ts_table_record_bytes(t), n = 0;
    uint64_t *ids = NULL;
    struct ts_err err = { 0 };

    c->armed = false;
    c->taken = true;
    c->st = TS_OK;
    c->full |= t->lost_dirty;   /* rows dropped, or changes that could not be listed */
    if (c->full)
        t->lost_dirty = false;   /* every row is in it */
    if (c->full) {
        if (t->rows.n && (c->st = rows_sorted_ids(&t->rows, &ids, &err)))
            goto out;
        n = t->rows.n;
    } else {
        n = t->ndirty;
        if (n && !(ids = malloc(n * sizeof(*ids)))) {
            c->st = TS_ENOMEM;
            goto out;
        }
        if (n) {   /* none changed: an empty run */
            memcpy(ids, t->dirty, n * sizeof(*ids));
            qsort(ids, n, sizeof(*ids), table_cmp_u64);
        }
    }
    if (n && !(c->records = malloc(n * rb))) {
        c->st = TS_ENOMEM;
        goto out;
    }
    if ((c->st = table_records(t, ids, n, c->records, &err)))
        goto out;
    c->n = n;
    c->rows = t->rows.n;
    /* What the capture holds is no longer "changed since the last capture". */
    idmap_clear(&t->dirty_set);
    t->ndirty = 0;
out:
    free(ids);
    if (c->st) {
        free(c->records);
        c->records = NULL;
        c->n = 0;
    }
}

void table_record_put(const struct ts_table *t, struct row *w, uint8_t *out)
{
    memcpy(out, &w->id, 8);
    memcpy(out + 8, &w->updates, 8);
    memcpy(out + 16, &w->step, 8);
    memcpy(out + TS_TABLE_RECORD_HEAD, row_values(w), (1 + t->slen) * t->dim * sizeof(float));
}

ts_status table_records(struct ts_table *t, const uint64_t *ids, size_t n, uint8_t *out,
                        struct ts_err *err)
{
    size_t rb = ts_table_record_bytes(t);
    struct row *w;
    ts_status st = TS_OK;
    bool found;

    if (!n)
        return TS_OK;
    if (!(w = malloc(t->rows.rec)))
        return ts_err_set(err, TS_ENOMEM, "table '%s': no memory to read a row", t->name);
    for (size_t k = 0; k < n && !st; k++) {   /* from whichever tier holds the row */
        if ((st = rows_read(&t->rows, ids[k], w, &found, err)))
            break;
        if (!found)   /* listed as existing, and not */
            st = ts_err_set(err, TS_EINTERNAL, "table '%s': row %" PRIu64 " is listed and "
                            "found nowhere", t->name, ids[k]);
        else
            table_record_put(t, w, out + k * rb);
    }
    free(w);
    return st;
}

void table_capture_due(struct ts_table *t)
{
    if (t->cap.armed && t->step == t->cap.step)
        capture_now(t);
}

ts_status ts_table_arm(struct ts_table *t, uint64_t step, bool full, bool *armed,
                       struct ts_err *err)
{
    ts_status st = TS_OK;

    *armed = false;
    if (table_async(t))
        return ts_err_set(err, TS_ENOTSUP, "table '%s': snapshots of tables in ssp and asp "
                          "jobs are not built yet (bsp only)", t->name);
    pthread_mutex_lock(&t->mu);
    if (t->cap.armed || t->cap.taken) {
        st = ts_err_set(err, TS_ESTATE, "table '%s': a capture of step %" PRIu64 " is armed "
                        "or not written yet", t->name, t->cap.step);
    } else if (t->step <= step) {
        t->cap = (struct table_capture){ .armed = true, .step = step, .full = full };
        *armed = true;
        table_capture_due(t);
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

ts_status ts_table_capture_take(struct ts_table *t, uint64_t step,
                                struct ts_table_capture *out, bool *ready, struct ts_err *err)
{
    ts_status st = TS_OK;

    *ready = false;
    pthread_mutex_lock(&t->mu);
    if ((!t->cap.armed && !t->cap.taken) || t->cap.step != step) {
        st = ts_err_set(err, TS_ESTATE, "table '%s': no capture of step %" PRIu64 " is armed",
                        t->name, step);
    } else if (t->cap.taken && t->cap.st) {
        st = ts_err_set(err, t->cap.st, "table '%s': no memory to capture %" PRIu64 " rows "
                        "at step %" PRIu64, t->name, t->rows.n, step);
        t->cap = (struct table_capture){ 0 };
    } else if (t->cap.taken) {
        *out = (struct ts_table_capture){ .step = step, .full = t->cap.full, .n = t->cap.n,
                                          .records = t->cap.records, .rows = t->cap.rows };
        t->cap = (struct table_capture){ 0 };
        *ready = true;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

bool ts_table_captured(struct ts_table *t, uint64_t step)
{
    bool taken;

    pthread_mutex_lock(&t->mu);
    taken = t->cap.taken && t->cap.step == step;
    pthread_mutex_unlock(&t->mu);
    return taken;
}

bool ts_table_capture_pending(struct ts_table *t, uint64_t step)
{
    bool pending;

    pthread_mutex_lock(&t->mu);
    pending = (t->cap.armed || t->cap.taken) && t->cap.step == step;
    pthread_mutex_unlock(&t->mu);
    return pending;
}

void ts_table_disarm(struct ts_table *t)
{
    struct table_capture c;

    pthread_mutex_lock(&t->mu);
    c = t->cap;
    t->cap = (struct table_capture){ 0 };
    pthread_mutex_unlock(&t->mu);
    if (c.taken) {   /* taken and never handed out: its rows are changed again */
        struct ts_table_capture back = { .n = c.n, .records = c.records };
        ts_table_capture_undo(t, &back);
    }
    free(c.records);
}

void ts_table_capture_undo(struct ts_table *t, const struct ts_table_capture *c)
{
    size_t rb = ts_table_record_bytes(t);

    pthread_mutex_lock(&t->mu);
    /* Room first: a list that cannot grow leaves them out of the next incremental capture,
     * which the caller's next capture must then make full (table.h). */
    if (table_dirty_reserve(t, c->n, NULL) == TS_OK)
        for (size_t k = 0; k < c->n; k++) {
            uint64_t id;
            bool found = false;
            memcpy(&id, c->records + k * rb, 8);
            if (rows_read(&t->rows, id, NULL, &found, NULL) == TS_OK && found)
                table_mark_dirty(t, id);
        }
    else
        t->lost_dirty = true;
    pthread_mutex_unlock(&t->mu);
}

bool ts_table_needs_full(struct ts_table *t)
{
    bool lost;

    pthread_mutex_lock(&t->mu);
    lost = t->lost_dirty;
    pthread_mutex_unlock(&t->mu);
    return lost;
}

/* Records [from, to) that keep takes become rows; their rows are in memory (pinned) or do
 * not exist, and there is room for those they create. */
static void load_records(struct ts_table *t, const uint8_t *records, size_t from, size_t to,
                         bool (*keep)(void *ctx, uint64_t id), void *ctx)
{
    size_t rb = ts_table_record_bytes(t);

    for (size_t k = from; k < to; k++) {
        const uint8_t *r = records + k * rb;
        uint64_t id;
        memcpy(&id, r, 8);
        if (keep && !keep(ctx, id))
            continue;
        struct row *w = rows_find(&t->rows, id);
        if (!w)
            w = table_new_row(t, id);
        memcpy(&w->updates, r + 8, 8);
        memcpy(&w->step, r + 16, 8);
        memcpy(row_values(w), r + TS_TABLE_RECORD_HEAD, (1 + t->slen) * t->dim * sizeof(float));
        w->flags |= ROW_UNWRITTEN;
    }
}

/* With a disk tier: LOAD_GROUP records at a time, each group's rows brought into memory and
 * given room, so that a table larger than memory is restored through its tiers. */
#define LOAD_GROUP 1024
static ts_status load_tiered(struct ts_table *t, const uint8_t *records, size_t n,
                             bool (*keep)(void *ctx, uint64_t id), void *ctx,
                             struct ts_err *err)
{
    size_t rb = ts_table_record_bytes(t);
    uint64_t ids[LOAD_GROUP], fresh;
    ts_status st;

    for (size_t at = 0; at < n; at += LOAD_GROUP) {
        size_t to = n - at < LOAD_GROUP ? n : at + LOAD_GROUP, m = 0;

        for (size_t k = at; k < to; k++) {
            memcpy(&ids[m], records + k * rb, 8);
            m += !keep || keep(ctx, ids[m]);
        }
        table_begin(t);
        if ((st = rows_load(&t->rows, ids, m, err)))
            return st;
        fresh = 0;
        for (size_t i = 0; i < m; i++)
            fresh += !rows_find(&t->rows, ids[i]);
        if ((st = table_charge(t, fresh, err)))   /* the index entries of the rows it makes */
            return st;
        if ((st = rows_reserve(&t->rows, fresh, err))) {
            table_refund(t, fresh);
            return st;
        }
        load_records(t, records, at, to, keep, ctx);
    }
    return TS_OK;
}

ts_status table_load_locked(struct ts_table *t, const uint8_t *records, size_t n,
                            bool (*keep)(void *ctx, uint64_t id), void *ctx,
                            struct ts_err *err)
{
    size_t rb = ts_table_record_bytes(t);
    uint64_t fresh = 0;
    ts_status st = TS_OK;

    for (size_t k = 0; k < n; k++) {
        uint64_t id;
        memcpy(&id, records + k * rb, 8);
        if (id > t->max_id)
            return ts_err_set(err, TS_ECORRUPT, "table '%s': a snapshot's row %" PRIu64 " is "
                              "outside 0..%" PRIu64, t->name, id, t->max_id);
        if (!t->rows.tier)
            fresh += (!keep || keep(ctx, id)) && !rows_find(&t->rows, id);
    }
    if (t->rows.tier) {
        /* A disk error part way leaves part of the run loaded: the restore fails, and the
         * job with it (its caller starts the table again from ts_table_reset). */
        st = load_tiered(t, records, n, keep, ctx, err);
    } else {
        /* Everything a load needs is taken before a row changes: budget, record room. */
        if (fresh && !(st = table_charge(t, fresh, err)) &&
            (st = rows_reserve(&t->rows, fresh, err)))
            table_refund(t, fresh);
        if (!st)
            load_records(t, records, 0, n, keep, ctx);
    }
    t->prev.valid = false;   /* the rows' values are the snapshot's now */
    return st;
}

ts_status ts_table_load(struct ts_table *t, const uint8_t *records, size_t n,
                        bool (*keep)(void *ctx, uint64_t id), void *ctx, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&t->mu);
    table_redo_restoring(t);   /* logged whole once its step is set */
    st = table_load_locked(t, records, n, keep, ctx, err);
    pthread_mutex_unlock(&t->mu);
    if (st)
        ts_err_prefix(err, "restore");
    return st;
}

void ts_table_reset(struct ts_table *t)
{
    struct ts_tier *tier;
    size_t rec;

    pthread_mutex_lock(&t->mu);
    rec = t->rows.rec;
    tier = t->rows.tier;
    rows_fini(&t->rows);
    rows_init(&t->rows, rec, tier, t->budget, t->row_bytes);
    table_refund(t, t->charged / table_row_cost(t));
    idmap_clear(&t->acc.map);
    t->acc.n = 0;
    t->acc.fresh = 0;
    t->npushed = 0;
    memset(t->pushed, 0, t->job->workers);
    if (t->clock)
        memset(t->clock, 0, t->job->workers * sizeof(*t->clock));
    t->step = 0;
    t->prev.valid = false;
    life_restart(&t->life);
    t->ndirty = 0;
    idmap_clear(&t->dirty_set);
    t->lost_dirty = false;
    free(t->cap.records);
    t->cap = (struct table_capture){ 0 };
    table_init_forget(t);
    table_redo_restoring(t);
    pthread_cond_broadcast(&t->cv);   /* a pull waiting for a step that will not come */
    pthread_mutex_unlock(&t->mu);
}

ts_status ts_table_set_step(struct ts_table *t, uint64_t step, struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&t->mu);
    if (table_async(t) || t->npushed || t->acc.n)
        st = ts_err_set(err, TS_ESTATE, "table '%s': its step is set only on a bsp table no "
                        "rank pushed to yet", t->name);
    else
        t->step = step;
    if (!st)
        table_redo_restored(t);
    t->prev.valid = false;   /* a restored table keeps no version before its step */
    life_restart(&t->life);
    pthread_mutex_unlock(&t->mu);
    return st;
}
