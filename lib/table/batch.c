/* batch.c - a worker's batch of rows placed, sorted and merged per shard (batch.h).
 *
 * The idea: one (shard, id, position) triple per input row, one qsort, then one pass in which
 * equal (shard, id) neighbours are repeats. Sorting by position last fixes the order of a
 * float sum; exact sums are integers and need no order. Every check runs before any output
 * is written, so a refused batch leaves nothing behind but an empty batch. */
#include "table/batch.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps/part.h"
#include "table/table.h"
#include "tensor/tensor.h"

struct trip {
    uint64_t id;
    uint32_t shard;
    uint32_t pos;              /* cap <= TS_TABLE_PUSH_MAX, so a position fits */
};

struct part {
    uint32_t shard;
    size_t first, n;
};

struct ts_rows_batch {
    uint32_t dim;
    bool exact;
    size_t cap;
    size_t n, nuniq, nparts;   /* the prepared batch: inputs, unique rows, shards */
    struct trip *trip;         /* cap each */
    uint64_t *ids;
    uint32_t *index;
    struct part *parts;
    void *grad;                /* cap x dim int64 (exact) or float */
};

ts_status ts_rows_batch_create(uint32_t dim, size_t cap, bool exact,
                               struct ts_rows_batch **out, struct ts_err *err)
{
    struct ts_rows_batch *b;
    size_t esz = exact ? sizeof(int64_t) : sizeof(float);

    if (dim < 1 || dim > TS_TABLE_DIM_MAX)
        return ts_err_set(err, TS_EINVAL, "rows.dim: %u is outside 1..%u", dim,
                          TS_TABLE_DIM_MAX);
    if (cap < 1 || cap > TS_TABLE_PUSH_MAX)
        return ts_err_set(err, TS_EINVAL, "rows.cap: %zu is outside 1..%u", cap,
                          TS_TABLE_PUSH_MAX);
    b = calloc(1, sizeof(*b));
    if (!b)
        return ts_err_set(err, TS_ENOMEM, "rows: out of memory for a batch");
    b->dim = dim;
    b->exact = exact;
    b->cap = cap;
    b->trip = malloc(cap * sizeof(*b->trip));
    b->ids = malloc(cap * sizeof(*b->ids));
    b->index = malloc(cap * sizeof(*b->index));
    b->parts = malloc(cap * sizeof(*b->parts));
    b->grad = malloc(cap * dim * esz);
    if (!b->trip || !b->ids || !b->index || !b->parts || !b->grad) {
        ts_rows_batch_free(b);
        return ts_err_set(err, TS_ENOMEM, "rows: out of memory for a batch of %zu rows of %u",
                          cap, dim);
    }
    *out = b;
    return TS_OK;
}

void ts_rows_batch_free(struct ts_rows_batch *b)
{
    if (!b)
        return;
    free(b->trip);
    free(b->ids);
    free(b->index);
    free(b->parts);
    free(b->grad);
    free(b);
}

/* What the push would refuse, checked before anything is written: ids past max_id, values
 * that are not finite, and in exact mode those ts_fixed_from_f32 refuses (|v| >= 2^31). */
static ts_status check(const struct ts_rows_batch *b, uint64_t max_id, const uint64_t *ids,
                       size_t n, const float *grad, struct ts_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const float *g = grad ? grad + i * b->dim : NULL;

        if (ids[i] > max_id)
            return ts_err_set(err, TS_EINVAL, "rows.ids[%zu]: %" PRIu64 " is above max_id %"
                              PRIu64, i, ids[i], max_id);
        for (uint32_t k = 0; g && k < b->dim; k++)
            if (!isfinite(g[k]) || (b->exact && fabsf(g[k]) >= 0x1p31f))
                return ts_err_set(err, TS_EINVAL, "rows.grad[%zu][%u]: %g is %s", i, k,
                                  (double)g[k], isfinite(g[k]) ? "outside the fixed-point "
                                  "range of +-2^31 (exact mode)" : "not finite");
    }
    return TS_OK;
}

static int trip_cmp(const void *pa, const void *pb)
{
    const struct trip *a = pa, *b = pb;

    if (a->shard != b->shard)
        return a->shard < b->shard ? -1 : 1;
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

/* Adds input row t->pos into unique row u, which `fresh` says is new. */
static ts_status merge_row(struct ts_rows_batch *b, size_t u, bool fresh, const float *g)
{
    if (b->exact) {
        int64_t *acc = (int64_t *)b->grad + u * b->dim;

        if (fresh)
            memset(acc, 0, b->dim * sizeof(*acc));
        return ts_fixed_add_f32(acc, g, b->dim, NULL);
    }
    float *acc = (float *)b->grad + u * b->dim;

    if (fresh)
        memcpy(acc, g, b->dim * sizeof(*acc));
    else
        for (uint32_t k = 0; k < b->dim; k++)
            acc[k] += g[k];
    return TS_OK;
}

ts_status ts_rows_batch_prepare(struct ts_rows_batch *b, const struct ts_ring *r,
                                const char *table, uint64_t max_id, const uint64_t *ids,
                                size_t n, const float *grad, struct ts_err *err)
{
    ts_status st;
    uint64_t nh;

    b->n = b->nuniq = b->nparts = 0;
    if (n > b->cap)
        return ts_err_set(err, TS_EINVAL, "rows.n: %zu rows, above the batch's capacity %zu",
                          n, b->cap);
    if (n && (!ids || !r || !table))
        return ts_err_set(err, TS_EINVAL, "rows: ids, ring and table are required");
    if (n && ts_ring_members(r) == 0)
        return ts_err_set(err, TS_EINVAL, "rows: the ring has no shards");
    if ((st = check(b, max_id, ids, n, grad, err)))
        return st;
    nh = n ? ts_ring_name_hash(table) : 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t shard = ts_ring_lookup_hash(r, ts_ring_row_hash(nh, ids[i]));

        b->trip[i] = (struct trip){ .id = ids[i], .shard = shard, .pos = (uint32_t)i };
    }
    qsort(b->trip, n, sizeof(*b->trip), trip_cmp);

    size_t u = 0, p = 0;
    for (size_t i = 0; i < n; i++) {
        const struct trip *t = &b->trip[i];
        bool fresh = i == 0 || t->id != t[-1].id || t->shard != t[-1].shard;

        if (fresh) {
            u = b->nuniq++;
            b->ids[u] = t->id;
            if (i == 0 || t->shard != t[-1].shard) {
                p = b->nparts++;
                b->parts[p] = (struct part){ .shard = t->shard, .first = u };
            }
            b->parts[p].n++;
        }
        b->index[t->pos] = (uint32_t)u;
        if (grad && merge_row(b, u, fresh, grad + (size_t)t->pos * b->dim)) {
            b->nuniq = b->nparts = 0;
            return ts_err_set(err, TS_EINVAL, "rows.grad: the sum of id %" PRIu64 "'s repeats "
                              "leaves the fixed-point range (at rows.ids[%u])", t->id, t->pos);
        }
    }
    b->n = n;
    return TS_OK;
}

size_t ts_rows_batch_shards(const struct ts_rows_batch *b)
{
    return b->nparts;
}

void ts_rows_batch_shard(const struct ts_rows_batch *b, size_t i, struct ts_rows_part *out)
{
    const struct part *p = &b->parts[i];
    size_t esz = b->exact ? sizeof(int64_t) : sizeof(float);

    *out = (struct ts_rows_part){
        .shard = p->shard, .n = p->n, .first = p->first, .ids = b->ids + p->first,
        .grad = (const char *)b->grad + p->first * b->dim * esz,
        .encoding = b->exact ? TS_ENC_FIXED : TS_ENC_RAW };
}

size_t ts_rows_batch_unique(const struct ts_rows_batch *b)
{
    return b->nuniq;
}

size_t ts_rows_batch_index(const struct ts_rows_batch *b, size_t i)
{
    return b->index[i];
}

void ts_rows_batch_scatter(const struct ts_rows_batch *b, const float *rows, float *out)
{
    for (size_t i = 0; i < b->n; i++)
        memcpy(out + i * b->dim, rows + (size_t)b->index[i] * b->dim, b->dim * sizeof(*out));
}
