/* push.c - a table's pushes: their checks, a BSP step's sums and its update, SSP and ASP
 * updates on arrival (table.h).
 *
 * Every check runs, and everything that can fail is reserved (budget, map and record room,
 * the dirty list), before the first change: a refused push leaves the table as it was, and an
 * accepted one cannot fail half way. A BSP step sums into its own map (struct step_acc), so the
 * rows are untouched until every rank has pushed; then the touched ids are sorted and each row
 * is updated once, in ascending id order. */
#include "table/internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NO_ENTRY UINT64_MAX       /* t->where: the id has no entry in the step's sums yet */

/* A gradient row: each value finite (float jobs), or one ts_fixed_from_f32 takes (exact). */
static ts_status check_grad_row(const struct ts_table *t, const float *g, struct ts_err *err)
{
    bool below;

    if (t->job->exact)
        return ts_fixed_check_f32(g, t->dim, 0x1p31f, &below, err);
    for (uint32_t j = 0; j < t->dim; j++)
        if (!isfinite(g[j]))
            return ts_err_set(err, TS_EINVAL, "gradient element %u is %s: want finite values "
                              "(scale the loss down or clip gradients)", j,
                              isnan(g[j]) ? "nan" : "inf");
    return TS_OK;
}

/* What a push is, whatever the table's step. */
static ts_status check_form(const struct ts_table *t, const struct ts_row_push *in,
                            struct ts_err *err)
{
    bool exact = t->job->exact;

    if (in->rank >= t->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", in->rank,
                          t->job->workers);
    if (exact ? in->encoding != TS_ENC_FIXED && in->encoding != TS_ENC_FIXED_F32
              : in->encoding != TS_ENC_RAW)
        return exact ? ts_err_set(err, TS_EINVAL, "encoding: %u; this job (exact mode) takes "
                                  "%u (fixed point) or %u (float, rounded by the table)",
                                  in->encoding, TS_ENC_FIXED, TS_ENC_FIXED_F32)
                     : ts_err_set(err, TS_EINVAL, "encoding: %u; this job (float mode) takes "
                                  "raw float (%u)", in->encoding, TS_ENC_RAW);
    if (in->n > TS_TABLE_PUSH_MAX)
        return ts_err_set(err, TS_EINVAL, "n: %zu rows, more than a push may carry (%u)",
                          in->n, TS_TABLE_PUSH_MAX);
    if (in->n && (!in->ids || !in->grad))
        return ts_err_set(err, TS_EINVAL, "n: %zu rows but no %s", in->n,
                          in->ids ? "gradients" : "ids");
    for (size_t i = 0; i < in->n; i++) {
        if (in->ids[i] > t->max_id)
            return ts_err_set(err, TS_EINVAL, "ids[%zu]: %" PRIu64 " is outside the table's "
                              "ids 0..%" PRIu64, i, in->ids[i], t->max_id);
        if (i && in->ids[i] <= in->ids[i - 1])
            return ts_err_set(err, TS_EINVAL, "ids[%zu]: %" PRIu64 " after %" PRIu64 ": a "
                              "push's ids are strictly ascending (sorted, each once)", i,
                              in->ids[i], in->ids[i - 1]);
    }
    if (in->encoding == TS_ENC_FIXED)
        return TS_OK;
    for (size_t i = 0; i < in->n; i++) {
        ts_status st = check_grad_row(t, (const float *)in->grad + i * t->dim, err);

        if (st) {
            ts_err_prefix(err, "row %" PRIu64 " (ids[%zu])", in->ids[i], i);
            return st;
        }
    }
    return TS_OK;
}

/* Whether the push comes at its step, once for its rank. */
static ts_status check_step(const struct ts_table *t, const struct ts_row_push *in,
                            struct ts_err *err)
{
    uint64_t at = table_async(t) ? t->clock[in->rank] : t->step;

    if (in->step != at)
        return ts_err_set(err, in->step < at ? TS_ESTATE : TS_EINVAL, "step: %" PRIu64 ", but "
                          "%s is at step %" PRIu64 " (%s takes only the current step)",
                          in->step, table_async(t) ? "this rank" : "the table", at,
                          ts_mode_name(t->job->mode));
    if (!table_async(t) && t->pushed[in->rank])
        return ts_err_set(err, TS_ESTATE, "rank %u already pushed step %" PRIu64, in->rank,
                          in->step);
    return TS_OK;
}

/* A retry of a step the table already has from the rank (table.h, ts_row_push.retry). */
static bool had(const struct ts_table *t, const struct ts_row_push *in)
{
    if (table_async(t))
        return in->step < t->clock[in->rank];
    return in->step < t->step || (in->step == t->step && t->pushed[in->rank]);
}

/* ---- BSP: the step's sums ---- */

static size_t sum_size(const struct ts_table *t)
{
    return t->job->exact ? sizeof(int64_t) : sizeof(float);
}

/* Room for `more` entries in the step's sums. */
static ts_status acc_reserve(struct ts_table *t, size_t more, struct ts_err *err)
{
    struct step_acc *a = &t->acc;
    size_t cap = a->cap ? a->cap : 64;
    uint64_t *ids;
    void *sums;
    ts_status st;

    if ((st = idmap_reserve(&a->map, more, err)))
        return st;
    while (cap < a->n + more)
        cap *= 2;
    if (cap == a->cap)
        return TS_OK;
    if (!(ids = realloc(a->ids, cap * sizeof(*ids))))
        return ts_err_set(err, TS_ENOMEM, "no memory for the step's sums of %zu rows", cap);
    a->ids = ids;
    if (!(sums = realloc(a->sums, cap * t->dim * sum_size(t))))
        return ts_err_set(err, TS_ENOMEM, "no memory for the step's sums of %zu rows", cap);
    a->sums = sums;
    a->cap = cap;
    return TS_OK;
}

static void *acc_sum(const struct ts_table *t, uint64_t k)
{
    return (char *)t->acc.sums + k * t->dim * sum_size(t);
}

/* An exact push's row must not take a sum already there out of the fixed-point range; checked
 * for every row before any is added. */
static ts_status check_overflow(struct ts_table *t, const struct ts_row_push *in,
                                struct ts_err *err)
{
    for (size_t i = 0; i < in->n; i++) {
        const int64_t *x = t->scratch;
        const int64_t *acc;
        ts_status st;

        if (t->where[i] == NO_ENTRY)
            continue;
        acc = acc_sum(t, t->where[i]);
        if (in->encoding == TS_ENC_FIXED)
            x = (const int64_t *)in->grad + i * t->dim;
        else if ((st = ts_fixed_from_f32((const float *)in->grad + i * t->dim, t->dim,
                                         t->scratch, err)))
            return st;     /* check_form took every value: not reached */
        for (uint32_t j = 0; j < t->dim; j++) {
            int64_t s;

            if (__builtin_add_overflow(acc[j], x[j], &s))
                return ts_err_set(err, TS_EINVAL, "row %" PRIu64 " (ids[%zu]) element %u: the "
                                  "step's sum leaves the fixed-point range of +-2^31 (scale "
                                  "the loss down or clip gradients)", in->ids[i], i, j);
        }
    }
    return TS_OK;
}

/* Adds row i of the push to its entry (none yet: a new one, zeroed first). Cannot fail:
 * checked. */
static void acc_add(struct ts_table *t, const struct ts_row_push *in, size_t i)
{
    struct step_acc *a = &t->acc;
    uint64_t k = t->where[i];
    ts_status st = TS_OK;

    if (k == NO_ENTRY) {
        k = a->n++;
        a->ids[k] = in->ids[i];
        idmap_put(&a->map, in->ids[i], k);
        memset(acc_sum(t, k), 0, t->dim * sum_size(t));
    }
    if (in->encoding == TS_ENC_FIXED)
        st = ts_fixed_add(acc_sum(t, k), (const int64_t *)in->grad + i * t->dim, t->dim, NULL);
    else if (in->encoding == TS_ENC_FIXED_F32)
        st = ts_fixed_add_f32(acc_sum(t, k), (const float *)in->grad + i * t->dim, t->dim,
                              NULL);
    else
        ts_f32_add(acc_sum(t, k), (const float *)in->grad + i * t->dim, t->dim);
    (void)st;   /* check_form and check_overflow refused what these would */
}

/* One optimizer update of row w with gradient t->grad at `step`. */
static void update(struct ts_table *t, struct row *w, uint64_t step)
{
    float *v = row_values(w);

    ts_optim_apply(&t->optim, w->updates + 1, v, v + t->dim, t->grad, t->dim);
    w->updates++;
    w->step = step;
    w->flags |= ROW_UNWRITTEN;
    table_mark_dirty(t, w->id);
}

/* An entry of the step's sums by its id, for sorting. */
struct entry {
    uint64_t id, k;
};

static int cmp_entry(const void *a, const void *b)
{
    uint64_t x = ((const struct entry *)a)->id, y = ((const struct entry *)b)->id;

    return x < y ? -1 : x > y;
}

/* Room in t->prev for a step of n rows (before the step changes anything). */
static ts_status prev_reserve(struct ts_table *t, size_t n, struct ts_err *err)
{
    struct step_prev *p = &t->prev;
    size_t cap = p->cap ? p->cap : 256;
    uint64_t *ids;
    float *values;

    if (n <= p->cap)
        return TS_OK;
    while (cap < n)
        cap *= 2;
    if (!(ids = realloc(p->ids, cap * sizeof(*ids))))
        return ts_err_set(err, TS_ENOMEM, "no memory to keep the step's %zu rows", n);
    p->ids = ids;
    if (!(values = realloc(p->values, cap * t->dim * sizeof(*values))))
        return ts_err_set(err, TS_ENOMEM, "no memory to keep the step's %zu rows", n);
    p->values = values;
    p->cap = cap;
    return TS_OK;
}

/* Room in t->prev for n rows, given back when it holds over four times that (a sweep's
 * dropped rows grew it for one step): before a step fills it, with nothing in it. A shrink
 * that fails keeps the larger room. */
static void prev_shrink(struct step_prev *p, size_t n, uint32_t dim)
{
    size_t cap = 256;
    uint64_t *ids;
    float *values;

    while (cap < n)
        cap *= 2;
    if (p->cap <= 4 * cap || !(values = realloc(p->values, cap * dim * sizeof(*values))))
        return;
    p->values = values;
    if ((ids = realloc(p->ids, cap * sizeof(*ids))))
        p->ids = ids;
    p->cap = cap;
}

/* The values of the rows a sweep dropped, kept, merged into t->prev (ids ascending) after
 * the step's; swept_lost when some are not (kept->over, or no memory). */
static void prev_merge_swept(struct ts_table *t, struct rows_kept *kept, struct entry *order)
{
    struct step_prev *p = &t->prev;
    size_t i, j, out, dim = t->dim;

    p->swept_lost = kept->over;
    if (!kept->n)
        return;
    if (!order || prev_reserve(t, p->n + kept->n, NULL)) {
        p->swept_lost = true;
        return;
    }
    for (size_t k = 0; k < kept->n; k++)
        order[k] = (struct entry){ .id = kept->ids[k], .k = k };
    qsort(order, kept->n, sizeof(*order), cmp_entry);
    /* From the end, so that neither list is overwritten before it is read. */
    for (i = p->n, j = kept->n, out = p->n + kept->n; j;) {
        out--;
        if (i && p->ids[i - 1] > order[j - 1].id) {
            i--;
            p->ids[out] = p->ids[i];
            memmove(p->values + out * dim, p->values + i * dim, dim * sizeof(float));
        } else {
            j--;
            p->ids[out] = order[j].id;
            memcpy(p->values + out * dim, kept->values + order[j].k * dim,
                   dim * sizeof(float));
        }
    }
    p->n += kept->n;
}

/* Row lifetime (table.h): the rows last updated before step `before` go, their values at the
 * version before kept in t->prev. */
void table_expire(struct ts_table *t, uint64_t before)
{
    struct rows_kept kept = { .dim = t->dim, .most = SIZE_MAX };
    struct entry *order;
    bool partial;
    uint64_t dropped;

    if (t->rows.tier)
        kept.most = t->sweep_keep / (t->dim * sizeof(float));
    dropped = rows_expire(&t->rows, before, &kept, &partial);
    if (dropped) {
        table_refund(t, dropped);
        t->lost_dirty = true;   /* the next capture is full: runs cannot say "deleted" */
    }
    (void)partial;   /* rows it could not reach stay (table.h) */
    order = kept.n ? malloc(kept.n * sizeof(*order)) : NULL;
    prev_merge_swept(t, &kept, order);
    free(order);
    free(kept.ids);
    free(kept.values);
}

/* Every rank pushed: each touched row, in ascending id, gets sum / batch through the
 * optimizer once, its values before kept in t->prev; the rows the step creates were charged
 * and reserved by its pushes, and t->prev's room by the last push. */
static void bsp_apply(struct ts_table *t, struct entry *order)
{
    struct step_acc *a = &t->acc;
    struct step_prev *p = &t->prev;
    double div = t->job->batch;
    float inv = (float)(1.0 / div);
    struct redo_item *log = table_redo_step_begin(t, a->n);   /* NULL: no log */
    uint64_t cut;

    for (uint64_t k = 0; k < a->n; k++)
        order[k] = (struct entry){ .id = a->ids[k], .k = k };
    qsort(order, a->n, sizeof(*order), cmp_entry);
    p->n = 0;
    prev_shrink(p, a->n, t->dim);
    for (uint64_t e = 0; e < a->n; e++) {
        uint64_t k = order[e].k, id = order[e].id;
        struct row *w = rows_find(&t->rows, id);

        if (!w)
            w = table_new_row(t, id);
        p->ids[p->n] = id;
        memcpy(p->values + p->n++ * t->dim, row_values(w), t->dim * sizeof(float));
        if (t->job->exact) {
            ts_fixed_to_f32(acc_sum(t, k), t->dim, div, t->grad);
        } else {
            const float *s = acc_sum(t, k);

            for (uint32_t j = 0; j < t->dim; j++)
                t->grad[j] = s[j] * inv;
        }
        update(t, w, t->step);
        table_redo_step_row(t, log, e, w);
    }
    a->n = 0;
    a->fresh = 0;
    idmap_clear(&a->map);
    p->of = t->step++;
    p->valid = true;
    p->swept_lost = false;
    if (t->ttl && t->step % t->ttl == 0)
        cut = t->step - t->ttl;
    else
        cut = life_applied(&t->life, p->of);
    table_redo_step_end(t, log, cut);   /* the step's rows, then the same sweep on a replay */
    if (cut)
        table_expire(t, cut);
    t->npushed = 0;
    table_init_forget(t);   /* this step's rows exist now */
    memset(t->pushed, 0, t->job->workers);
    table_capture_due(t);   /* a snapshot armed at this step (capture.c) */
    pthread_cond_broadcast(&t->cv);
}

/* The push's ids with no row (SSP, ASP: the rows it creates). */
static uint64_t count_fresh(struct ts_table *t, const uint64_t *ids, size_t n)
{
    uint64_t fresh = 0;

    for (size_t i = 0; i < n; i++)
        fresh += !rows_find(&t->rows, ids[i]);
    return fresh;
}

/* With a disk tier, the last push of a step: every row the step touches in memory, pinned
 * (those of the step's sums and the push's new ids), and room for those it creates, before
 * anything changes. */
static ts_status load_step(struct ts_table *t, const struct ts_row_push *in, uint64_t *charged,
                           struct ts_err *err)
{
    uint64_t *all = malloc((t->acc.n + in->n + 1) * sizeof(*all));
    size_t m = t->acc.n;
    ts_status st;

    if (!all)
        return ts_err_set(err, TS_ENOMEM, "no memory for the step's %zu rows", t->acc.n + in->n);
    if (m)   /* a first push of the step: no sums yet (nor their array) */
        memcpy(all, t->acc.ids, m * sizeof(*all));
    for (size_t i = 0; i < in->n; i++)
        if (t->where[i] == NO_ENTRY)
            all[m++] = in->ids[i];
    rows_note(&t->rows, all, m);
    if (!(st = rows_load(&t->rows, all, m, err))) {
        uint64_t fresh = count_fresh(t, all, m);   /* the rows the step creates */

        if (!(st = table_charge(t, fresh, err))) {
            *charged = fresh;                       /* the caller's to refund on failure */
            st = rows_reserve(&t->rows, fresh, err);
        }
    }
    free(all);
    return st;
}

/* BSP: where each id of the push sums, into t->where: its entry in the step's sums, or
 * NO_ENTRY; and *fresh, the ids with neither an entry nor a row (the rows the step will create
 * because of this push). One look-up of each map an id, which the later passes reuse. */
static ts_status locate(struct ts_table *t, const struct ts_row_push *in, uint64_t *fresh,
                        struct ts_err *err)
{
    if (in->n > t->where_cap) {
        uint64_t *w = realloc(t->where, in->n * sizeof(*w));

        if (!w)
            return ts_err_set(err, TS_ENOMEM, "no memory for a push of %zu rows", in->n);
        t->where = w;
        t->where_cap = in->n;
    }
    *fresh = 0;
    for (size_t i = 0; i < in->n; i++)
        if (!idmap_find(&t->acc.map, in->ids[i], &t->where[i])) {
            t->where[i] = NO_ENTRY;
            *fresh += !rows_find(&t->rows, in->ids[i]);
        }
    return TS_OK;
}

static ts_status push_bsp(struct ts_table *t, const struct ts_row_push *in, bool *applied,
                          struct ts_err *err)
{
    struct entry *order = NULL;
    bool last = t->npushed + 1 == t->job->workers;
    uint64_t fresh = 0, charged;
    ts_status st;

    if ((st = locate(t, in, &fresh, err)))
        return st;
    if (t->job->exact && (st = check_overflow(t, in, err)))
        return st;
    /* Without a tier each push charges the rows it adds to the step (locate: in no map);
     * with one, the last push charges those the step creates, known once the step's rows
     * are loaded (load_step). */
    charged = t->rows.tier ? 0 : fresh;
    if ((st = table_charge(t, charged, err)))
        return st;
    if (!(st = t->rows.tier ? (last ? load_step(t, in, &charged, err) : TS_OK)
                            : rows_reserve(&t->rows, t->acc.fresh + fresh, err)) &&
        !(st = acc_reserve(t, in->n, err)) &&
        !(st = table_dirty_reserve(t, t->acc.n + in->n, err)) &&
        !(st = last ? prev_reserve(t, t->acc.n + in->n, err) : TS_OK) &&
        last && !(order = malloc((t->acc.n + in->n + 1) * sizeof(*order))))
        st = ts_err_set(err, TS_ENOMEM, "no memory to sort the step's %zu rows",
                        t->acc.n + in->n);
    if (st) {
        table_refund(t, charged);
        return st;
    }
    for (size_t i = 0; i < in->n; i++)
        acc_add(t, in, i);
    t->acc.fresh += fresh;
    if (!t->npushed)   /* the step's first push: its sweep planned (lifetime.c) */
        life_plan(&t->life, t->step, in->sweep);
    t->pushed[in->rank] = 1;
    t->npushed++;
    if (last)
        bsp_apply(t, order);
    free(order);
    *applied = last;
    return TS_OK;
}

/* ---- SSP, ASP: on arrival ---- */

static ts_status push_async(struct ts_table *t, const struct ts_row_push *in, bool *applied,
                            struct ts_err *err)
{
    float inv = (float)(1.0 / t->job->batch);
    uint64_t fresh;
    ts_status st;

    rows_note(&t->rows, in->ids, in->n);
    if ((st = rows_load(&t->rows, in->ids, in->n, err)))
        return st;
    fresh = count_fresh(t, in->ids, in->n);
    if ((st = table_charge(t, fresh, err)))
        return st;
    if ((st = rows_reserve(&t->rows, fresh, err)) ||
        (st = table_dirty_reserve(t, in->n, err))) {
        table_refund(t, fresh);
        return st;
    }
    for (size_t i = 0; i < in->n; i++) {
        const float *g = (const float *)in->grad + i * t->dim;
        struct row *w = rows_find(&t->rows, in->ids[i]);

        if (!w)
            w = table_new_row(t, in->ids[i]);
        for (uint32_t j = 0; j < t->dim; j++)
            t->grad[j] = g[j] * inv;
        update(t, w, in->step);
    }
    t->clock[in->rank]++;
    pthread_cond_broadcast(&t->cv);
    *applied = true;
    return TS_OK;
}

uint32_t ts_table_sweep_plan(struct ts_table *t, uint64_t step)
{
    uint32_t code;

    pthread_mutex_lock(&t->mu);
    code = life_plan_of(&t->life, step);
    pthread_mutex_unlock(&t->mu);
    return code;
}

ts_status ts_table_push(struct ts_table *t, const struct ts_row_push *in, bool *applied,
                        struct ts_err *err)
{
    ts_status st;

    *applied = false;
    pthread_mutex_lock(&t->mu);
    table_begin(t);
    if ((st = check_form(t, in, err)) || (in->retry && had(t, in)))
        ;
    else if (!(st = check_step(t, in, err)))
        st = table_async(t) ? push_async(t, in, applied, err) : push_bsp(t, in, applied, err);
    pthread_mutex_unlock(&t->mu);
    if (st)
        ts_err_prefix(err, "table '%s'", t->name);
    return st;
}
