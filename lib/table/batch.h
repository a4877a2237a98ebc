/* batch.h - a worker's batch of embedding rows, made ready to push (issue 46,
 * docs/embeddings.md, "Batches on a worker").
 *
 * Why: a batch names rows by id in input order, with repeats (a popular id appears in many
 * samples), while a shard's push (table.h) wants its own rows only, strictly ascending, each
 * once. So the worker merges repeats first (an open-addressing map from id to its unique
 * row: a batch of 4096 Zipf ids holds about 1500 unique ones), places only the unique ids on
 * the ring (ts_ring_row_hash: row keys spread one table over every shard), sorts them by
 * (shard, id), and adds each input's gradient into its unique row in one pass in input order,
 * keeping for each input position the index of its unique row, so the rows a pull returns
 * can be scattered back to the batch's positions (the forward of an embedding lookup).
 *
 * Sums of repeats. Exact: each gradient row is rounded to int64 fixed point
 * (ts_fixed_from_f32) and repeats are summed as integers (ts_fixed_add_f32): the same bits in
 * any order, grouping or number of workers, pushed as TS_ENC_FIXED. Float: the repeats of an
 * id are summed in ascending input position (the order of that pass), so the result depends on
 * the batch's order only as far as float addition does; pushed as TS_ENC_RAW.
 *
 * Refused, nothing produced (the batch then holds no rows): n above the capacity
 * (rows.n), an id above max_id (rows.ids[i]), a NaN or infinite gradient, or in exact mode
 * any value ts_fixed_from_f32 refuses (rows.grad[i][k]), and an exact sum of repeats leaving
 * int64 (rows.grad). TS_EINVAL; the message names the field and the position.
 *
 * Ownership: ts_rows_batch_create returns a batch freed with ts_rows_batch_free; it allocates
 * every buffer for `cap` rows once, so ts_rows_batch_prepare allocates nothing. The ring,
 * table name, ids and gradients passed in are borrowed for the call only. What
 * ts_rows_batch_shard returns points into the batch: valid until the next prepare or free.
 * Threads: a batch is one thread's at a time; batches share nothing. */
#ifndef TS_TABLE_BATCH_H
#define TS_TABLE_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "placement/ring.h"
#include "util/err.h"

struct ts_rows_batch;

/* dim: 1..TS_TABLE_DIM_MAX; cap: rows a batch may hold, 1..TS_TABLE_PUSH_MAX; exact: sums in
 * fixed point. TS_EINVAL names rows.dim or rows.cap; TS_ENOMEM. */
ts_status ts_rows_batch_create(uint32_t dim, size_t cap, bool exact,
                               struct ts_rows_batch **out, struct ts_err *err) TS_MUST_CHECK;
void ts_rows_batch_free(struct ts_rows_batch *b);   /* NULL: no-op */

/* Places, sorts and merges ids[0..n) (each <= max_id, any order, repeats allowed) with their
 * gradients grad (n x dim floats, row i at grad + i * dim) of table `table` on ring r. n may
 * be 0. grad NULL: ids only (a pull's: placed, sorted and merged, no gradient; the parts'
 * grad is then not to be read). On error the batch holds nothing (ts_rows_batch_shards is
 * 0). */
ts_status ts_rows_batch_prepare(struct ts_rows_batch *b, const struct ts_ring *r,
                                const char *table, uint64_t max_id, const uint64_t *ids,
                                size_t n, const float *grad, struct ts_err *err) TS_MUST_CHECK;

/* The shards the prepared batch touches, in ascending shard id; a shard of the ring not among
 * them gets an empty push (n = 0). */
size_t ts_rows_batch_shards(const struct ts_rows_batch *b);

/* Shard i's part (i < ts_rows_batch_shards): its id, its unique ids strictly ascending, their
 * summed gradients (n x dim int64 when exact, else float), and `first`, the index of its first
 * row among all the batch's unique rows (shard by shard, as listed here). */
struct ts_rows_part {
    uint32_t shard;
    size_t n;
    size_t first;
    const uint64_t *ids;
    const void *grad;
    unsigned encoding;         /* TS_ENC_FIXED or TS_ENC_RAW (lib/ps part.h) */
};
void ts_rows_batch_shard(const struct ts_rows_batch *b, size_t i, struct ts_rows_part *out);

/* The unique rows of the batch in all, and which of them input position i (< n) reads. */
size_t ts_rows_batch_unique(const struct ts_rows_batch *b);
size_t ts_rows_batch_index(const struct ts_rows_batch *b, size_t i);

/* The forward's scatter: out[i] = rows[index(i)] for every input position i, dim floats each;
 * rows: the unique rows' values (ts_rows_batch_unique x dim), shard by shard, as pulled. */
void ts_rows_batch_scatter(const struct ts_rows_batch *b, const float *rows, float *out);

#endif
