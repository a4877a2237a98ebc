/* batch.c - a worker's batch of rows placed, sorted and merged per shard (batch.h).
 *
 * The idea: repeats are merged first, with an open-addressing map from id to its unique row
 * (a batch of 4096 Zipf ids has about 1500 unique ones), so that only unique ids are hashed,
 * placed on the ring and sorted by (shard, id). A second pass over the input then adds each
 * gradient row into its unique row's final place, in ascending input position: the order of
 * a float sum is fixed by the batch alone; exact sums are integers and need no order. Every
 * check runs before any output is written, so a refused batch leaves nothing behind but an
 * empty batch. */
#include "table/batch.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps/part.h"
#include "table/table.h"
#include "tensor/tensor.h"

#define SLOT_EMPTY UINT32_MAX

struct uniq {
    uint64_t id;
    uint32_t shard;
    uint32_t u;                /* its number in first-seen order */
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
    uint64_t *keys;            /* the dedupe map: mcap ids and their unique number */
    uint32_t *vals;
    size_t mcap;               /* a power of two, at least 2 x cap */
    struct uniq *uniq;         /* cap: unique ids in first-seen order, then sorted */
    struct uniq *tmp;          /* cap: the sort's other buffer */
    uint32_t *rank;            /* cap: unique number -> its place in sorted order */
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
    for (b->mcap = 16; b->mcap < 2 * cap; b->mcap *= 2)
        ;
    b->keys = malloc(b->mcap * sizeof(*b->keys));
    b->vals = malloc(b->mcap * sizeof(*b->vals));
    if (b->vals)   /* every slot empty; prepare leaves it so (map_clear) */
        memset(b->vals, 0xff, b->mcap * sizeof(*b->vals));
    b->uniq = malloc(cap * sizeof(*b->uniq));
    b->tmp = malloc(cap * sizeof(*b->tmp));
    b->rank = malloc(cap * sizeof(*b->rank));
    b->ids = malloc(cap * sizeof(*b->ids));
    b->index = malloc(cap * sizeof(*b->index));
    b->parts = malloc(cap * sizeof(*b->parts));
    b->grad = malloc(cap * dim * esz);
    if (!b->keys || !b->vals || !b->uniq || !b->tmp || !b->rank || !b->ids || !b->index || !b->parts ||
        !b->grad) {
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
    free(b->keys);
    free(b->vals);
    free(b->uniq);
    free(b->tmp);
    free(b->rank);
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

/* Byte `byte` of q's sort key: the id's 8 bytes, least significant first, then the shard's
 * 4 (so the shard is the most significant part of the key). */
static unsigned key_byte(const struct uniq *q, unsigned byte)
{
    return byte < 8 ? (unsigned)(q->id >> (8 * byte)) & 0xff
                    : (q->shard >> (8 * (byte - 8))) & 0xff;
}

/* Sorts b->uniq by (shard, id): a least-significant-digit radix sort over the key's 12 bytes,
 * each pass a stable counting sort, a byte all the rows share skipped (a table's ids seldom
 * use their top bytes, shard ids theirs). qsort with a comparison call per pair was a fifth of
 * a worker's CPU in the tiered benchmark (bench/table_tiers.py, perf). */
static void sort_uniq(struct ts_rows_batch *b)
{
    struct uniq *from = b->uniq, *to = b->tmp, *t;
    size_t n = b->nuniq, count[256];

    for (unsigned byte = 0; byte < 12 && n > 1; byte++) {
        size_t at = 0;

        memset(count, 0, sizeof(count));
        for (size_t i = 0; i < n; i++)
            count[key_byte(&from[i], byte)]++;
        if (count[key_byte(&from[0], byte)] == n)
            continue;                  /* one value: the order stands */
        for (unsigned v = 0; v < 256; v++) {
            size_t c = count[v];

            count[v] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[key_byte(&from[i], byte)]++] = from[i];
        t = from;
        from = to;
        to = t;
    }
    if (from != b->uniq)
        memcpy(b->uniq, from, n * sizeof(*from));
}

/* Where id's probe in the dedupe map starts (Fibonacci hashing: ids may be strided). */
static size_t home(const struct ts_rows_batch *b, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (b->mcap - 1);
}

/* The unique number of id, a new one if it has none yet (*fresh). */
static uint32_t dedupe(struct ts_rows_batch *b, uint64_t id, bool *fresh)
{
    size_t mask = b->mcap - 1, k = home(b, id);

    for (;; k = (k + 1) & mask) {
        if (b->vals[k] == SLOT_EMPTY) {
            b->keys[k] = id;
            b->vals[k] = (uint32_t)b->nuniq;
            b->uniq[b->nuniq] = (struct uniq){ .id = id, .u = (uint32_t)b->nuniq };
            *fresh = true;
            return (uint32_t)b->nuniq++;
        }
        if (b->keys[k] == id) {
            *fresh = false;
            return b->vals[k];
        }
    }
}

/* Empties the dedupe map for the next batch, in O(unique ids) rather than its whole size:
 * entries go in the reverse of their insertion, so that every one still left is reached by
 * its probe (a later entry may sit past an earlier one, never the other way round). */
static void map_clear(struct ts_rows_batch *b)
{
    size_t mask = b->mcap - 1;

    for (size_t u = b->nuniq; u-- > 0;) {
        uint64_t id = b->uniq[b->rank[u]].id;
        size_t k = home(b, id);

        while (b->keys[k] != id || b->vals[k] == SLOT_EMPTY)
            k = (k + 1) & mask;
        b->vals[k] = SLOT_EMPTY;
    }
}

/* Adds input row g into unique row k (its sorted place), which `fresh` says is new. */
static ts_status merge_row(struct ts_rows_batch *b, size_t k, bool fresh, const float *g)
{
    if (b->exact) {
        int64_t *acc = (int64_t *)b->grad + k * b->dim;

        if (fresh)
            memset(acc, 0, b->dim * sizeof(*acc));
        return ts_fixed_add_f32(acc, g, b->dim, NULL);
    }
    float *acc = (float *)b->grad + k * b->dim;

    if (fresh)
        memcpy(acc, g, b->dim * sizeof(*acc));
    else
        for (uint32_t j = 0; j < b->dim; j++)
            acc[j] += g[j];
    return TS_OK;
}

ts_status ts_rows_batch_prepare(struct ts_rows_batch *b, const struct ts_ring *r,
                                const char *table, uint64_t max_id, const uint64_t *ids,
                                size_t n, const float *grad, struct ts_err *err)
{
    ts_status st;
    uint64_t nh;
    size_t p = 0;

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
    if (!n)
        return TS_OK;
    /* Repeats merged: each input's unique number (in b->index for now). */
    for (size_t i = 0; i < n; i++) {
        bool fresh;
        b->index[i] = dedupe(b, ids[i], &fresh);
    }
    /* Unique ids placed and sorted by (shard, id); rank: where each unique number went. */
    nh = ts_ring_name_hash(table);
    for (size_t u = 0; u < b->nuniq; u++)
        b->uniq[u].shard = ts_ring_lookup_hash(r, ts_ring_row_hash(nh, b->uniq[u].id));
    sort_uniq(b);
    for (size_t k = 0; k < b->nuniq; k++) {
        const struct uniq *q = &b->uniq[k];
        b->rank[q->u] = (uint32_t)k;
        b->ids[k] = q->id;
        if (k == 0 || q->shard != q[-1].shard) {
            p = b->nparts++;
            b->parts[p] = (struct part){ .shard = q->shard, .first = k };
        }
        b->parts[p].n++;
    }
    /* Each input's gradient into its unique row's place, in ascending input position. Unique
     * numbers were given in first-seen order, so u's first input is where u == next. */
    uint32_t next = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = b->index[i], k = b->rank[u];
        bool fresh = u == next;

        next += fresh;
        b->index[i] = k;
        if (grad && merge_row(b, k, fresh, grad + i * b->dim)) {
            map_clear(b);
            b->n = b->nuniq = b->nparts = 0;
            return ts_err_set(err, TS_EINVAL, "rows.grad: the sum of id %" PRIu64 "'s repeats "
                              "leaves the fixed-point range (at rows.ids[%zu])", ids[i], i);
        }
    }
    map_clear(b);
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
