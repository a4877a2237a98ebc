/* table.h - the rows of a sparse embedding table that one shard holds (issue 46,
 * docs/embeddings.md, "Rows on a shard").
 *
 * Why a module: a recommendation model's parameters are mostly rows of tables with 10^5..10^8
 * rows of 16..256 floats, of which a step touches a few thousand. A dense partition (lib/ps)
 * holds every element from the start; a table instead creates a row when a push first touches
 * it, keeps it in a hash map keyed by its 64-bit id, and updates only the rows a step touched,
 * with optimizer state that lives with the row ("lazy" state). A shard holds the rows the
 * ring gives it of every table; with a disk tier (struct ts_table_budget.tier, tier.h) the
 * rows that do not fit in its memory share wait on disk, which is why rows are reached
 * through one narrow interface (internal.h, rows.c).
 *
 * A table is created for a job (lib/ps's struct ts_job: workers, exact, batch, mode,
 * staleness) from a struct ts_table_cfg: name, dim, the id range [0, max_id] (max_id up to
 * 2^63 - 1), an initializer, a seed and an optimizer.
 *
 * Initial values. Row `id` starts as elements 0..dim-1 of lib/tensor's initializer for a
 * tensor named after the table, with the per-row seed XXH3-64(id as 8 bytes little-endian,
 * seed): so a row's bits depend only on (seed, table name, id, dim), never on when or where
 * it is created. Why a per-row seed rather than offset id x dim into one stream: ids reach
 * 2^63 and lib/tensor counts elements (2 draws each) in 64 bits, so id x dim would wrap and
 * rows far apart would share draws. Initializers: zeros, ones, const:V, uniform:A, normal:STD
 * (xavier and he need fans a row does not have; assigned needs an assignment step).
 *
 * Optimizers: sgd, adagrad, adam (lib/tensor's specs, e.g. "adam:lr=0.001"), applied to a row
 * with ts_optim_apply over its dim elements, its state (dim floats a component) beside it. Each
 * row counts its own updates: Adam's t for a row is 1 + the updates that row had, so a row
 * first touched at step 1000 gets the bias correction of its first update (each row is its
 * own Adam), and weight decay reaches a row only in the steps that touch it. A row untouched
 * in a step keeps its values, its state and its count.
 *
 * Pushes. A rank's push of a step carries n ids, strictly ascending, each at most max_id, and
 * n x dim gradients (row i at grad + i * dim): float (TS_ENC_RAW) in a float job; in an exact
 * job int64 fixed point (TS_ENC_FIXED) or float that the table rounds to it
 * (TS_ENC_FIXED_F32, ts_fixed_from_f32's bits). Every rank pushes every step, with n = 0 when
 * its batch touched no row of this shard.
 * - BSP: the step's pushes are summed per row in an accumulator (exact: int64, lib/tensor's
 *   ts_fixed_add; float: float, in arrival order). When every rank has pushed, the rows the
 *   step touched are updated in ascending id order, each once, with gradient sum / job batch
 *   (exact: ts_fixed_to_f32), and the table moves to the next step. In exact mode the bits
 *   are those of any other grouping, order, worker count or split of the ids over shards.
 * - SSP, ASP: a push updates its rows at once (gradient / job batch); each rank pushes its
 *   steps in order (its clock). Exact mode needs BSP (lib/ps: ts_job_set_mode).
 * - Refused, nothing changed (not the rows, not the step's sums, not the budget): a rank not
 *   below the job's workers, an encoding the job does not take, ids unsorted, repeated or
 *   past max_id, a gradient that is NaN or infinite (also in float jobs: a sparse step has no
 *   loss-scale skip; exact: any value ts_fixed_from_f32 refuses, or a sum leaving the
 *   fixed-point range), a step other than the current one (TS_ESTATE for one already
 *   applied, TS_EINVAL for a later one), a rank pushing a step twice (TS_ESTATE), and rows
 *   past the budget (TS_ENOMEM). Errors start with "table 'NAME'" and name the field.
 *
 * Memory budget. A shard's tables share one struct ts_table_budget. A row costs
 * ts_table_row_bytes: its record (a 32-byte header: id, update count, last step, dirty flag;
 * dim values; dim floats per optimizer state component; rounded up to 8 bytes) plus 2 map
 * slots of 16 bytes (the map grows by doubling at 3/4 full, so it holds 4/3..8/3 slots a row;
 * 2 are counted), and with a disk tier 16 bytes more (its slot's entry in the free list and
 * its share of the memory tier's window list). Not counted: the slack of the last chunk of 1024 records, a step's
 * accumulator (8 or 4 bytes per element of the rows a step touches, kept for the next step)
 * and the dirty list. A push whose new rows (ids with no row, and no earlier push of the
 * step) would take the budget past its limit is refused whole with TS_ENOMEM naming the
 * table and the budget; a BSP push takes its rows' bytes when accepted, before the step
 * applies, so the step cannot fail later.
 *
 * Pulls do not create rows: an absent row's values are computed from the initializer, the
 * bits it would be created with. So reads cost no budget, and which rows exist, and the
 * fingerprint, depend only on the pushes. A pull of step s waits for its version as the dense
 * pull does: BSP until step s - 1 is applied (every rank's push of it), SSP until the slowest
 * rank's clock is at least s - staleness, ASP not at all. A pull of a version the table is
 * past reads the newest rows, except one version back in BSP (below).
 *
 * Elastic jobs (docs/elastic.md): a rank is a slot, and a slot that changes hands mid-step is
 * computed again by its new owner from the step's values, while shards that had every slot's
 * push may have applied the step. So a BSP table keeps the values the last applied step
 * changed as they were before it (a created row's initial ones), and those its row lifetime's
 * sweep dropped: a pull of version s on a table at step s + 1 reads those, the rows at
 * version s. Not after a reset or a restore: then the newest. With a tier a sweep keeps at
 * most SWEEP_KEEP_BYTES of dropped rows' values (internal.h); past that, such a pull that
 * meets a row found nowhere is refused (TS_ESTATE) rather than read as its initial values.
 *
 * Fingerprint (ts_table_sha256): SHA-256 over the table's name and a NUL byte, dim (4 bytes
 * little-endian), the row count (8 bytes LE), then each row in ascending id: its id (8 bytes
 * LE) and its dim values (float32 LE); optimizer state is not covered, as params_sha256 covers
 * values only. Several stores (a table's rows on several shards) are merged in that order.
 *
 * A worker makes its pushes with batch.h: rows placed on the ring by (table, id), repeats
 * merged, ids sorted and split per shard.
 *
 * Row lifetime (ttl_steps T > 0, BSP only): when a step s is applied with s + 1 a multiple
 * of T, every row whose last update was before step s + 1 - T (none in the last T steps) is
 * dropped, from memory and from the disk tier; a later touch makes it again from its
 * initializer, with fresh optimizer state. The sweep depends only on the step, so exact mode
 * stays exact for any worker and shard count. It reads every row (on disk too), once every
 * T steps; the capture after a sweep that dropped rows is full (a snapshot's runs have no
 * deletions). A disk or memory failure during a sweep leaves the rows it could not reach.
 *
 * Row lifetime by the clock (ttl_seconds T > 0; BSP, not exact: which rows go then depends
 * on timing, not only on the pushes): at the first push of a step s, T seconds or more after
 * its last sweep (or its creation, or a restore), the table plans a sweep after s; it drops
 * the rows whose last update was before the newest step the table had applied T seconds
 * ago or more (steps timed by marks, at most every T/16 s: lifetime.c), so a row goes
 * between T and about 2T seconds after its last update. The plan is the head's: a copy of
 * its rows (services/shard) is given it with each push (ts_row_push.sweep) and drops the
 * same rows whatever its own clock says. A restore starts the lifetime again.
 *
 * Dirty rows (incremental snapshots): every row an update or a creation changed since the
 * last ts_table_dirty_take; a row is listed once however often it changed (O(1) a row).
 *
 * Ownership: ts_table_create returns a table freed with ts_table_free; the job and the budget
 * are borrowed and must outlive it. Every buffer passed in is the caller's and only read
 * during the call.
 * Threads: every function locks the table (one mutex a table), so a shard's connection
 * threads call them without a lock of their own; ts_table_pull blocks (on a condition
 * variable) until its step is there or ms pass. The budget is shared by tables under
 * different locks and updated atomically. ts_table_sha256 locks its stores in address order. */
#ifndef TS_TABLE_TABLE_H
#define TS_TABLE_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/part.h"
#include "util/err.h"

#define TS_TABLE_DIM_MAX 4096
#define TS_TABLE_ID_LIMIT 0x7fffffffffffffffull   /* the largest max_id: 2^63 - 1 */
#define TS_TABLE_PUSH_MAX (1u << 24)              /* rows in one push */
#define TS_TABLE_TTL_SECONDS_MAX 315360000        /* ts_table_cfg.ttl_seconds: 10 years */

/* What a shard's tables may hold in memory in all: limit bytes (0: no limit); used counts
 * every table's rows in memory (ts_table_row_bytes each) and, with a tier, the records of
 * rows waiting for the disk. Embedded by the caller.
 *
 * tier (NULL: none, set before the first table is made, and outliving every table): the disk
 * tier (tier.h) under every table made with this budget. Then no push is refused for memory:
 * each table keeps at most limit / tables bytes of rows in memory (tables: the tables made
 * with this budget and not freed), a fifth of it at most for rows on their way to the disk,
 * and the rest of its rows on disk (docs/embeddings.md, "Tables bigger than memory"). What
 * every row that exists costs in memory wherever it is, its entry in the tier's index, is
 * counted apart in `index`, TS_TABLE_INDEX_ROW_BYTES a row: a push or a restore that would
 * create rows past index_limit (0: no limit) is refused with TS_ENOMEM, nothing of it taken.
 * A separate limit, not a share of `limit`, so that the memory tier's size stays what
 * --table-mem says. */
#define TS_TABLE_INDEX_ROW_BYTES 48   /* a 16-byte entry of a map 3/8 to 3/4 full, rounded up */
struct ts_tier;
struct ts_table_budget {
    uint64_t limit;
    _Atomic uint64_t used;
    struct ts_tier *tier;
    _Atomic uint32_t tables;
    uint64_t index_limit;
    _Atomic uint64_t index;
};
/* limit as above; index_limit 0 (none) until the caller sets it. */
void ts_table_budget_init(struct ts_table_budget *b, uint64_t limit);
uint64_t ts_table_budget_used(struct ts_table_budget *b);


struct ts_table_cfg {
    const char *name;          /* as a job id: 1..64 of [A-Za-z0-9._-] */
    uint32_t dim;              /* 1..TS_TABLE_DIM_MAX floats a row */
    uint64_t max_id;           /* ids 0..max_id, max_id <= TS_TABLE_ID_LIMIT */
    const char *init;          /* zeros, ones, const:V, uniform:A, normal:STD */
    uint64_t seed;
    const char *optimizer;     /* sgd, adagrad or adam, with options (ts_optim_parse) */
    uint64_t ttl_steps;        /* row lifetime (below); 0: rows live for ever */
    uint64_t ttl_seconds;      /* row lifetime by the clock (below; not with ttl_steps) */
};

struct ts_table;

/* A table's tiers (all zero without a disk tier): rows in memory and their bytes, look-ups
 * of existing rows found in memory (hits) or read from the disk (misses), rows evicted,
 * rows written to the disk, the records waiting for the writer and how long the oldest has
 * waited (a batch goes to the writer when full or a second old, at the table's next
 * operation), and the disk its rows' files have reserved (tier.c: whole segments, so up to
 * twice the rows' bytes, at most 64 MiB more). */
struct ts_table_tiers {
    bool tiered;
    uint64_t rows, resident, mem_bytes, quota_rows;
    uint64_t hits, misses, evictions, written, pending, lag_ms, disk_bytes;
    /* ts_table_prefetch: rows it brought in, and of those, used by an operation since, or
     * evicted unused */
    uint64_t prefetched, prefetch_used, prefetch_unused;
    /* Rows its row lifetime dropped (ts_table_cfg.ttl_steps), with a tier or without. */
    uint64_t expired;
};
void ts_table_tiers(struct ts_table *t, struct ts_table_tiers *out);

/* Validates cfg for job: TS_EINVAL names the field (table.name, table.dim, table.max_id,
 * table.init, table.optimizer, table.ttl_steps, table.ttl_seconds; job.mode for a reduce
 * job, whose parameters live on its workers). What ts_table_create checks first; for those
 * who write a table's records without making it (a snapshot's import). */
ts_status ts_table_check(const struct ts_job *job, const struct ts_table_cfg *cfg,
                         struct ts_err *err) TS_MUST_CHECK;
/* Validates cfg (ts_table_check) and makes an empty table. budget: NULL for no limit. */
ts_status ts_table_create(const struct ts_job *job, const struct ts_table_cfg *cfg,
                          struct ts_table_budget *budget, struct ts_table **out,
                          struct ts_err *err) TS_MUST_CHECK;
/* Frees the table and gives its rows' bytes back to the budget. NULL: no-op. */
void ts_table_free(struct ts_table *t);

/* Fixed at creation, read without the lock. name: the table's, valid until ts_table_free. */
const char *ts_table_name(const struct ts_table *t);
uint32_t ts_table_dim(const struct ts_table *t);
uint64_t ts_table_row_bytes(const struct ts_table *t);
/* The rows that exist; the step (BSP: steps applied; SSP, ASP: the slowest rank's clock). */
uint64_t ts_table_count(struct ts_table *t);
uint64_t ts_table_step(struct ts_table *t);
/* The step the table reaches once the pushes taken so far apply (a push of step s makes step
 * s + 1): BSP, the steps applied, and one more while some rank's push of the next is in;
 * SSP, ASP: the fastest rank's clock. A join's hold (services/shard) needs no push past its
 * step taken, not only none applied. */
uint64_t ts_table_pushed_step(struct ts_table *t);

struct ts_row_push {
    uint32_t rank;
    uint64_t step;
    size_t n;                  /* rows, at most TS_TABLE_PUSH_MAX; 0: none this step */
    const uint64_t *ids;       /* n, strictly ascending */
    unsigned encoding;         /* TS_ENC_RAW, TS_ENC_FIXED or TS_ENC_FIXED_F32 (part.h) */
    const void *grad;          /* n x dim floats, or int64 for TS_ENC_FIXED */
    /* Sent again (a worker after a failover, a head passing a push on again): a step the
     * table already has from this rank (BSP: pushed or applied; SSP, ASP: below its clock)
     * is acknowledged with nothing changed, once check_form took it. */
    bool retry;
    /* A copy's push (a head passing it on), on a table with a lifetime by the clock: the
     * head's plan for the step (ts_table_sweep_plan), which the copy follows; 0: the table
     * plans by its own clock (a head's push). */
    uint32_t sweep;
};
/* Adds a push (above). *applied: this push updated rows (SSP, ASP) or completed the step
 * (BSP); false for a retry the table already had. */
ts_status ts_table_push(struct ts_table *t, const struct ts_row_push *in, bool *applied,
                        struct ts_err *err) TS_MUST_CHECK;

/* The sweep planned for `step` by a table with a lifetime by the clock (above), to give its
 * copies with their pushes (ts_row_push.sweep): TS_TABLE_SWEEP_NONE, or more for a sweep;
 * 0 when no push of `step` came yet (or the step is two or more behind), or the table has no
 * such lifetime. */
#define TS_TABLE_SWEEP_NONE 1u
uint32_t ts_table_sweep_plan(struct ts_table *t, uint64_t step);

/* The values of ids[0..n) (any order, repeats allowed, each <= max_id) into out (n x dim),
 * once step `want` may be read (above); waits at most ms (TS_ETIMEDOUT). rank < workers. */
ts_status ts_table_pull(struct ts_table *t, uint32_t rank, uint64_t want, int ms,
                        const uint64_t *ids, size_t n, float *out,
                        struct ts_err *err) TS_MUST_CHECK;

/* Waits at most ms for the table to reach version want as a pull of it does (BSP: step
 * want - 1 applied), so that a push of step want may come: a store that took over another
 * shard's rows mid-step can be a step behind its shard's others (services/shard). TS_ETIMEDOUT
 * after ms. */
ts_status ts_table_wait(struct ts_table *t, uint64_t want, int ms,
                        struct ts_err *err) TS_MUST_CHECK;

/* With a disk tier: rows among ids[0..n) (any order, repeats allowed) that exist only on
 * disk are read into memory, at most a quarter of the table's memory share a call, so that
 * a pull or a step that comes for them later finds them there (docs/embeddings.md,
 * "Prefetch"). The disk is read without the table's lock; a row that an operation brought
 * in meanwhile keeps that operation's bits. A hint: without a tier, for ids past max_id, or
 * while another prefetch of the table runs, nothing is done. */
void ts_table_prefetch(struct ts_table *t, const uint64_t *ids, size_t n);

/* One row as it is stored, for a snapshot writer and the tests: values (dim floats), state
 * (dim floats per optimizer state component, component by component) and the row's update
 * count and last updated step (either pointer may be NULL). TS_ENOTFOUND if it does not
 * exist. */
struct ts_row_meta {
    uint64_t updates;          /* optimizer updates applied to the row */
    uint64_t step;             /* the step of the last of them (0 if none) */
};
ts_status ts_table_row(struct ts_table *t, uint64_t id, float *values, float *state,
                       struct ts_row_meta *meta, struct ts_err *err) TS_MUST_CHECK;

/* The rows changed since the last call, ascending, into *ids (caller frees with free(); NULL
 * when *n is 0), and the list starts again empty. */
ts_status ts_table_dirty_take(struct ts_table *t, uint64_t **ids, size_t *n,
                              struct ts_err *err) TS_MUST_CHECK;

/* The ids of the rows that exist once step `want` may be read (as ts_table_pull waits),
 * ascending, into *ids (caller frees with free(); NULL when *n is 0): what a fingerprint or a
 * scan of the rows walks, reading them with ts_table_pull. TS_ETIMEDOUT after ms. */
ts_status ts_table_ids(struct ts_table *t, uint64_t want, int ms, uint64_t **ids, size_t *n,
                       struct ts_err *err) TS_MUST_CHECK;

/* The fingerprint (above) of the rows of n stores of one table (same name and dim, each id in
 * at most one of them: TS_ECORRUPT names an id held twice), as 64 hex digits and a NUL. */
ts_status ts_table_sha256(struct ts_table *const *stores, size_t n, char hex[65],
                          struct ts_err *err) TS_MUST_CHECK;

/* ---- Snapshots (capture.c; docs/embeddings.md, "Snapshots of tables") ----
 * A record is a row as snapshots store it: its id, update count and last step (8 bytes each,
 * little-endian), then its dim values and its slen x dim state floats (float32 LE), so
 * ts_table_record_bytes(t) = 24 + 4 x dim x (1 + slen) bytes. BSP tables only (TS_ENOTSUP for
 * ssp and asp). */
#define TS_TABLE_RECORD_HEAD 24
size_t ts_table_record_bytes(const struct ts_table *t);

/* Arms a capture of step `step`: when the table reaches it (its step counts the steps
 * applied), or at once if it is there, the rows changed since the last capture (full: every
 * row) are copied as records, ascending id, and count as unchanged from then on. *armed false
 * (nothing armed) when the table is already past step. TS_ESTATE while another capture is
 * armed or not taken. */
ts_status ts_table_arm(struct ts_table *t, uint64_t step, bool full, bool *armed,
                       struct ts_err *err) TS_MUST_CHECK;
struct ts_table_capture {
    uint64_t step;
    bool full;
    size_t n;
    uint8_t *records;          /* n records; the caller's once taken (free()) */
    uint64_t rows;             /* the rows the table held at step (n of them with full) */
};
/* The capture of step once taken (*ready true, *out filled, the table holds none after);
 * *ready false while the table has not reached step. TS_ESTATE when none of step is armed;
 * TS_ENOMEM when it could not be copied (then the table holds none). */
ts_status ts_table_capture_take(struct ts_table *t, uint64_t step, struct ts_table_capture *out,
                                bool *ready, struct ts_err *err) TS_MUST_CHECK;
/* Whether the capture of step is taken (and not handed out yet). */
bool ts_table_captured(struct ts_table *t, uint64_t step);
/* Whether a capture of step is armed or taken (and not handed out yet). */
bool ts_table_capture_pending(struct ts_table *t, uint64_t step);
/* Drops an armed capture, or one taken and not yet handed out: its rows count as changed
 * again. */
void ts_table_disarm(struct ts_table *t);
/* A capture handed out and then not written (the snapshot failed): its rows count as changed
 * again, so the next incremental capture has them. Where the list cannot grow for them,
 * ts_table_needs_full says so from then on: the next capture must be full. */
void ts_table_capture_undo(struct ts_table *t, const struct ts_table_capture *c);
bool ts_table_needs_full(struct ts_table *t);

/* A restore: the n records (any order) of one of a snapshot's runs, those keep(ctx, id) takes
 * (keep NULL: all), become rows: made where absent (charged to the budget first: TS_ENOMEM,
 * nothing changed) or overwritten, values, state, count and step. Runs are loaded oldest
 * first, so a later record of a row wins. TS_ECORRUPT for an id past max_id. Then
 * ts_table_set_step: the table continues from the snapshot's step (a bsp table no rank has
 * pushed to yet; TS_ESTATE otherwise). */
ts_status ts_table_load(struct ts_table *t, const uint8_t *records, size_t n,
                        bool (*keep)(void *ctx, uint64_t id), void *ctx,
                        struct ts_err *err) TS_MUST_CHECK;
ts_status ts_table_set_step(struct ts_table *t, uint64_t step, struct ts_err *err) TS_MUST_CHECK;
/* Empties the table for a rollback: no rows (their bytes back to the budget), step 0, no
 * pushes of a step, nothing changed or captured; then ts_table_load and ts_table_set_step. */
void ts_table_reset(struct ts_table *t);

/* The fingerprint made row by row, for a caller that merges rows from elsewhere (the SDK,
 * from every shard's scan): begin with the table's name, dim and row count, add each row in
 * ascending id, end (which frees f; hex NULL: abandoned). TS_EINTERNAL without SHA-256. */
struct ts_table_fp;
ts_status ts_table_fp_begin(const char *name, uint32_t dim, uint64_t count,
                            struct ts_table_fp **out, struct ts_err *err) TS_MUST_CHECK;
void ts_table_fp_row(struct ts_table_fp *f, uint64_t id, const float *values);
void ts_table_fp_end(struct ts_table_fp *f, char hex[65]);

#endif
